"""The Hub client's failures reach the user as one `error:` line and a `hint:`, never a traceback,
and nothing is written. Real HTTP against the tests' Hub server on 127.0.0.1 (or a closed port)."""

from __future__ import annotations

import socket

import pytest

from test_lock import REPO, lock, publish, setup_toy

pytestmark = pytest.mark.subprocess  # every test here starts frt or a server as a process


def test_lock_offline_with_a_hub_package_is_a_clear_error(project, hub):
    publish(hub)
    setup_toy(project)
    r = lock(project, hub, env={"HF_HUB_OFFLINE": "1"})
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr
    assert f"error: toy: {REPO}: the Hub cannot be asked: offline mode is on (refs)" in r.stderr
    assert "hint: unset HF_HUB_OFFLINE" in r.stderr
    assert not (project / "lockfiles" / "toy.lock").exists()


def test_lock_against_a_closed_port_names_the_endpoint(project, hub):
    setup_toy(project)
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = lock(project, hub, env={"HF_ENDPOINT": f"http://127.0.0.1:{port}"})
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert f"cannot reach the Hub at http://127.0.0.1:{port}" in r.stderr and "hint: " in r.stderr
    assert not (project / "lockfiles" / "toy.lock").exists()


def test_lock_of_a_missing_repo_says_not_found_with_a_hint(project, hub):
    setup_toy(project)  # nothing published
    r = lock(project, hub)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert f"error: toy: {REPO}: not found on the Hub at {hub.url}" in r.stderr
    assert "hint: check the repo id in the manifest" in r.stderr
