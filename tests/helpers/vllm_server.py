"""A real vLLM OpenAI server for the tests, started as an operator starts it: ``python -m
vllm.entrypoints.openai.api_server`` (one API server) or ``vllm serve`` (through
``helpers/vllm_cli.py``, for ``--api-server-count``), the engine core in its own process, on the
tiny Qwen2 of ``vllm_support``, with the flags that work on a CPU (docs/vllm.md). Every wait is
bounded; ``stop`` ends the whole process group."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from . import vllm_support as vs
from .paths import HELPERS, ROOT
from .s3server import free_port  # noqa: F401 - the one free-port finder, re-exported for the vLLM tests

CLI = HELPERS / "vllm_cli.py"
CPU_FLAGS = ["--enforce-eager", "--dtype", "float32", "--max-model-len", "256", "--max-num-batched-tokens", "256",
             "--kv-cache-memory-bytes", str(32 << 20)]


def server_env(project: Path | None, **extra) -> dict:
    """``vs.engine_env`` with vLLM's engine core in its own process, as a server runs it."""
    env = vs.engine_env(project, **extra)
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
    if "PYTHONPATH" not in extra:  # this checkout's frt_dist, in every process vLLM starts
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    return env


def argv(model: Path, port: int, *extra: str, cli: bool = False) -> list[str]:
    head = [sys.executable, str(CLI), "serve"] if cli else [sys.executable, "-m", "vllm.entrypoints.openai.api_server"]
    return [*head, "--model", str(model), "--served-model-name", "tiny", "--host", "127.0.0.1", "--port", str(port),
            *CPU_FLAGS, *extra]


def start(cmd: list[str], env: dict, log: Path, cwd: Path) -> subprocess.Popen:
    out = open(log, "wb")
    try:
        return subprocess.Popen(cmd, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    finally:
        out.close()


def wait_ready(proc: subprocess.Popen, port: int, log: Path, timeout: float = 420) -> float:
    """Seconds until ``/health`` answers; fails with the whole log (the cause of a start-up failure is often
    far above its last lines) if the server exits or the time runs out."""
    t0 = time.monotonic()
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                if r.status == 200:
                    return time.monotonic() - t0
        except (OSError, urllib.error.URLError):
            pass
        if proc.poll() is not None:
            raise AssertionError(f"server exited {proc.returncode}; its whole log:\n{log.read_text(errors='replace')}")
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"server not ready in {timeout} s; its whole log:\n{log.read_text(errors='replace')}")
        time.sleep(1)


def stop(proc: subprocess.Popen, timeout: float = 60) -> None:
    """SIGTERM to the server's process group (the server, its engine core and workers), then SIGKILL."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # whatever of the group is left (a worker that outlived its parent)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)


def get(port: int, path: str, timeout: float = 60) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
        return r.read().decode("utf-8")


def complete(port: int, prompt: str, max_tokens: int, timeout: float = 120) -> dict:
    body = json.dumps({"model": "tiny", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                       "ignore_eos": True}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def run_to_exit(cmd: list[str], env: dict, cwd: Path, timeout: float = 420) -> tuple[int, str]:
    """A server expected to stop by itself (a refused start-up): its exit code and everything it printed,
    stdout and stderr in the order written. Past ``timeout`` its process group is killed and the test fails."""
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate(timeout=30)
        raise AssertionError(f"still running after {timeout} s; all it printed:\n{out.decode(errors='replace')}") from None
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # an engine process that outlived the server
        except ProcessLookupError:
            pass
    return proc.returncode, out.decode("utf-8", errors="replace")
