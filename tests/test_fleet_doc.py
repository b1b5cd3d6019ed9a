"""``docs/fleet-local.md`` is run as written: every command of its ``sh`` blocks, in order, in an empty
folder, and every named file block (```` ```python NAME ````) written where the walk-through stands
when it comes. It starts moto's S3 server on 127.0.0.1 (the page's port 5000 replaced by a free one),
makes a project, qualifies and locks it, publishes to the store, makes a node folder from the store,
verifies and resolves there, and loads from the store. No network: ``HF_HUB_OFFLINE=1``, and the only
server is the local one."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("boto3", reason="the fleet extra (boto3) is installed by `make venv`")
pytest.importorskip("moto.server", reason="moto[server] is in the test extra")
pytest.importorskip("torch", reason="frt qualify needs the runtime extra")

from helpers.docsteps import doc_steps
from helpers.paths import ROOT
from helpers.s3server import free_port

DOC = ROOT / "docs" / "fleet-local.md"
FRT = [sys.executable, "-m", "frt_dist.cli"]
STEP_TIMEOUT = 300  # seconds: `frt qualify` is the longest step (about 20 s on two cores)


def _steps() -> list[tuple[str, str]]:
    return doc_steps(DOC)


def _wait_for_port(port: int, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 60
    while True:
        assert proc.poll() is None, f"the background server exited; its whole log:\n{log.read_text()}"
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            assert time.monotonic() < deadline, f"nothing listens on {port}; the server's whole log:\n{log.read_text()}"
            time.sleep(0.2)


def test_the_fleet_on_a_laptop_walkthrough_runs_as_written(tmp_path):
    steps = _steps()
    if any(kind == "run" and step.startswith("frt publish") for kind, step in steps):
        import argparse  # noqa: PLC0415

        from frt_dist.cli.main import build_parser  # noqa: PLC0415

        commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
        if "publish" not in commands:
            pytest.skip("`frt publish` is not in this frt's parser yet (the CLI renames)")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FRT_", "HF_", "KERNELS_", "AWS_"))}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONDONTWRITEBYTECODE="1", PYTHONPATH=str(ROOT),
               FRT_STORE=str(tmp_path / "store"), XDG_CACHE_HOME=str(tmp_path / "cache"),
               HF_HOME=str(tmp_path / "hf"), HOME=str(tmp_path / "home"), OMP_NUM_THREADS="1")
    (tmp_path / "home").mkdir()
    cwd = tmp_path / "walk"
    cwd.mkdir()
    outputs: dict[str, str] = {}
    background: subprocess.Popen | None = None
    log = tmp_path / "server.log"
    try:
        for kind, step in steps:
            if kind == "file":
                name, _, text = step.partition("\n")
                (cwd / name).write_text(text, "utf-8")
                continue
            step = re.sub(r"\b5000\b", str(port), step)
            if step.endswith("&"):
                argv = shlex.split(step[:-1])
                argv[0] = sys.executable if argv[0] == "python" else shutil.which(argv[0])
                assert background is None, "the page starts one background server"
                background = subprocess.Popen(argv, cwd=cwd, env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT)
                _wait_for_port(port, background, log)
                continue
            argv = shlex.split(step)
            if argv[0] == "export":
                env.update(a.split("=", 1) for a in argv[1:])
                continue
            if argv[0] == "cd":
                cwd = (cwd / argv[1]).resolve()
                continue
            if argv == ["kill", "%1"]:
                assert background is not None and background.poll() is None, "the server ran to the end"
                background.terminate()
                background.wait(timeout=30)
                continue
            argv = (FRT + argv[1:] if argv[0] == "frt" else
                    [sys.executable, *argv[1:]] if argv[0] == "python" else [shutil.which(argv[0]), *argv[1:]])
            run = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=STEP_TIMEOUT)
            assert run.returncode == 0, f"{step}\n{run.stdout}\n{run.stderr}"
            outputs[step] = run.stdout + run.stderr
    finally:
        if background is not None and background.poll() is None:
            background.kill()
            background.wait(timeout=30)

    def said(prefix: str) -> str:
        return next(v for k, v in outputs.items() if k.startswith(prefix))

    walk = tmp_path / "walk"
    # what the page says happened, happened: the store got the objects and the lockfile last,
    publish = said("frt publish")
    assert "to s3://fleet/frt" in publish and "lockfile lockfiles/my-model.lock last" in publish, publish
    # the node holds only its lockfile and the mirror, filled from the store and verified,
    node = walk / "node"
    assert sorted(p.name for p in node.iterdir()) == ["kernels", "load.py", "lockfiles"]
    assert (node / "kernels" / "kernels--my-org--rmsnorm").is_dir()
    assert "fetched" in said("frt mirror kernels --from"), said("frt mirror kernels --from")
    assert "lockfiles/my-model.lock: ok" in said("frt verify --mirror")
    # resolve there uses the qualified route in both bands, and the load from the store binds it
    assert re.search(r"decode .* route fast-norm", said("frt resolve")), said("frt resolve")
    assert re.search(r"prefill .* route fast-norm", said("frt resolve")), said("frt resolve")
    assert "{'decode': 'fast-norm', 'prefill': 'fast-norm'}" in said("python load.py")
