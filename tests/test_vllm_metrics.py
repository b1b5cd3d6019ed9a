"""The ``frt_seam_*`` families and ``frt_lock_info`` in vLLM's ``/metrics`` (SPEC 42): summed over the live
engine processes' ledger files, a file that is not a ledger skipped. The default mode (one API server) is
``test_vllm_doc.py``'s walk-through.
"""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest

pytest.importorskip("prometheus_client", reason="the vLLM extra: pip install 'frt-dist[vllm]'")

from frt_dist.serve.vllm import metrics  # noqa: E402


def _series(text: str, family: str) -> dict:
    """{labels (sorted tuple of pairs): value} of one family in a Prometheus text exposition."""
    out = {}
    for m in re.finditer(rf"^{re.escape(family)}\{{([^}}]*)\}} (\S+)$", text, re.M):
        out[tuple(sorted(re.findall(r'(\w+)="([^"]*)"', m.group(1))))] = float(m.group(2))
    return out


def _calls(text: str) -> dict:
    return {(d["seam"], d["phase"]): v for k, v in _series(text, "frt_seam_calls_total").items() for d in [dict(k)]}


def _snap(model="tiny-qwen2", calls=(3, 4), lock="sha256:" + "a" * 64, release="", commit="", observed=True):
    phases = {p: {"calls": n, "fallbacks": 0, "host-calls": 0, "contract-refusals": 0, "bind-refusals": 0,
                  "captures": 0, "warmup-calls": 1, "route": "eager", "state": "certified_fast", "observed": observed}
              for p, n in zip(("decode", "prefill"), calls, strict=True)}
    return {"model": model, "lock-digest": lock, "release": release, "release-commit": commit,
            "seams": {"norm": {"phases": phases}}}


# -- the collector, no engine --------------------------------------------------------------------------------------


def test_collector_sums_live_ledgers_and_skips_the_rest(tmp_path):
    """Two live engine processes are summed; a dead process's ledger, a file that is not JSON, not an object,
    not a ledger's shape, or not named by a pid is skipped, and a scrape never fails on one."""
    from prometheus_client import CollectorRegistry, generate_latest

    sleepers = [subprocess.Popen(["sleep", "60"]) for _ in range(5)]
    gone = subprocess.Popen(["true"])
    gone.wait(timeout=30)
    try:
        live = [os.getpid()] + [p.pid for p in sleepers]
        rel = ("hf://acme/tiny@v2", "c" * 40)
        (tmp_path / f"{live[0]}.json").write_text(json.dumps(_snap(calls=(3, 4), release=rel[0], commit=rel[1])))
        (tmp_path / f"{live[1]}.json").write_text(json.dumps(_snap(calls=(10, 20), release=rel[0], commit=rel[1])))
        (tmp_path / f"{gone.pid}.json").write_text(json.dumps(_snap(calls=(1000, 1000))))  # exited: not summed
        (tmp_path / f"{live[2]}.json").write_text("{not json")
        (tmp_path / f"{live[3]}.json").write_text("[1, 2]")
        (tmp_path / f"{live[4]}.json").write_text(json.dumps({"model": "tiny-qwen2", "seams": {"norm": "x"}}))
        bad = _snap(calls=(5, 5))
        bad["seams"]["norm"]["phases"]["decode"]["calls"] = "many"
        (tmp_path / f"{live[5]}.json").write_text(json.dumps(bad))  # half a ledger is not counted either
        (tmp_path / "notes.json").write_text(json.dumps(_snap(calls=(1000, 1000))))
        registry = CollectorRegistry()
        registry.register(metrics.LedgerCollector(tmp_path))
        text = generate_latest(registry).decode()
    finally:
        for p in sleepers:
            p.kill()
            p.wait(timeout=30)
    assert _calls(text) == {("norm", "decode"): 13.0, ("norm", "prefill"): 24.0}, text
    assert _series(text, "frt_seam_warmup_calls_total")[
        (("model", "tiny-qwen2"), ("phase", "decode"), ("route", "eager"), ("seam", "norm"),
         ("state", "certified_fast"))] == 2.0
    assert _series(text, "frt_engine_processes") == {(("model", "tiny-qwen2"),): 2.0}
    assert _series(text, "frt_lock_info") == {
        (("commit", rel[1]), ("lock_digest", "sha256:" + "a" * 64), ("model", "tiny-qwen2"), ("release", rel[0])): 1.0}


def test_lock_info_names_the_release(tmp_path):
    """``lock_info``: the lock's digest and, when it consumes a Hub release, hf://ORG/NAME@vN and the commit."""
    from types import SimpleNamespace

    plain = SimpleNamespace(lock_digest="sha256:" + "b" * 64, release=None)
    assert metrics.lock_info(plain) == {"lock-digest": "sha256:" + "b" * 64, "release": "", "release-commit": ""}
    released = SimpleNamespace(lock_digest="sha256:" + "b" * 64,
                               release={"repo": "acme/tiny", "version": 3, "commit": "d" * 40, "files": {}})
    assert metrics.lock_info(released) == {"lock-digest": "sha256:" + "b" * 64, "release": "hf://acme/tiny@v3",
                                           "release-commit": "d" * 40}
