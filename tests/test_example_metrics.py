"""The serving example (``examples/serve_metrics.py``) as a user runs it: a real process that
loads the bundled demo at start-up, a real HTTP client on 127.0.0.1, and the exposition read
back by ``prometheus_client``'s own parser (an independent reader of the text format)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from helpers.paths import ROOT

EXAMPLE = ROOT / "examples" / "serve_metrics.py"
from prometheus_client import parser  # noqa: E402 - the test extra installs it

pytestmark = [pytest.mark.subprocess, pytest.mark.slow]  # every test here starts a process and takes over ~5 s


def _start(tmp_path, *extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("FRT_")}
    env["FRT_STORE"] = str(tmp_path / "store")
    proc = subprocess.Popen([sys.executable, str(EXAMPLE), "--port", "0", "--demo", *extra], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = []
    for line in proc.stdout:  # start-up prints the decisions, then the address
        lines.append(line.rstrip())
        if line.startswith("serving on "):
            return proc, line.split()[2], lines
    proc.wait(timeout=30)
    pytest.fail(f"the example did not start: {lines} {proc.stderr.read()}")


def _get(url):
    with urllib.request.urlopen(url, timeout=30) as r:
        return r.status, r.headers.get("Content-Type"), r.read().decode()


def _post(url):
    req = urllib.request.Request(url, data=b"", method="POST")
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _samples(text: str) -> dict:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in parser.text_string_to_metric_families(text) for s in fam.samples}


@pytest.fixture
def server(tmp_path):
    proc, base, lines = _start(tmp_path)
    yield base, lines
    proc.terminate()
    proc.wait(timeout=30)


def test_the_example_serves_the_ledger_on_metrics(server):
    base, lines = server
    assert [ln.split(":")[0] for ln in lines[:2]] == ["decode", "prefill"]  # start-up says what each band runs
    assert _get(base + "/healthz")[2] == "ok\n"
    for rows in (4, 4, 128):
        code, doc = _post(f"{base}/forward?rows={rows}")
        assert code == 200 and doc["phase"] == ("decode" if rows == 4 else "prefill"), doc
    code, doc = _post(f"{base}/forward?rows=40")  # between the bands
    assert code == 400 and doc["error"] == "rows 40 is in no phase band (decode 1..16, prefill 64..2048)"
    status, ctype, text = _get(base + "/metrics")
    assert status == 200 and ctype.startswith("text/plain; version=0.0.4")
    got = _samples(text)
    ledger = json.loads(_get(base + "/ledger")[2])
    for seam in ("norm", "ffn"):
        for phase, calls in (("decode", 2), ("prefill", 1)):
            v = ledger["seams"][seam]["phases"][phase]
            assert v["calls"] == calls
            key = ("frt_seam_calls_total", tuple(sorted({"model": "demo-decoder", "seam": seam, "phase": phase,
                                                         "route": v["route"] or "", "state": v["state"] or ""}.items())))
            assert got[key] == calls
    assert ledger["totals"]["calls"] == 6 and ledger["totals"]["fallbacks"] == 0


def test_the_prometheus_client_collector_reads_the_same_ledger(tmp_path):
    proc, base, _ = _start(tmp_path, "--registry")
    try:
        _post(f"{base}/forward?rows=2")
        status, ctype, text = _get(base + "/metrics")
        got = _samples(text)
        ledger = json.loads(_get(base + "/ledger")[2])
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    for seam, entry in ledger["seams"].items():
        for phase, v in entry["phases"].items():
            labels = tuple(sorted({"model": "demo-decoder", "seam": seam, "phase": phase,
                                   "route": v["route"] or "", "state": v["state"] or ""}.items()))
            assert got[("frt_seam_calls_total", labels)] == v["calls"]
            assert got[("frt_seam_fallbacks_total", labels)] == v["fallbacks"]
    assert sum(v for (name, _), v in got.items() if name == "frt_seam_calls_total") == 2
