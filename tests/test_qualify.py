"""`frt qualify`: route vs unmodified host, receipts whose evidence supports their state."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from frt_dist.documents.lockfile import Lockfile
from frt_dist.documents.receipt import Receipt
from frt_dist.qualify.run import qualify
from helpers.frt import frt_main, frt_process  # in this process (no second torch import), or as the console command
from helpers.gpu import needs_no_gpu
from helpers.paths import HELPERS


def _lock(p):
    return Lockfile.read(p / "lockfiles" / "toyq.lock")


@needs_no_gpu  # qualifies CPU-only packages on the detected hardware
def test_fast_route_is_certified_with_full_evidence(qproject):
    [res] = qualify(_lock(qproject), "fastscale", root=qproject)
    assert res.passed and res.state == "certified_fast", res.failures
    r = res.receipt
    ev, cell = r["evidence"], r["cell"]
    assert ev["parity"]["pass"] and ev["parity"]["max-abs"] == 0.0
    # from the guard's ledger: rows 1 and 16, in the parity pass and the negative-control pass
    assert ev["target-calls"] == {"norm": 4} and ev["fallbacks"] == 0
    assert ev["null-check"] and ev["negative-control"] and ev["detach-restores-host"]
    t = ev["timing"]
    assert t["method"] == "paired-alternating" and t["rounds"] == 6 and t["speedup-median"] > 1.05
    assert t["speedup-min"] <= t["speedup-median"] <= t["speedup-max"]
    assert cell["inputs"]["source"] == "synthetic" and cell["inputs"]["seed"] == 0
    assert cell["impls"]["norm"]["variant"] == "torch-cpu" and cell["impls"]["norm"]["revision"].startswith("sha256:")
    assert cell["hardware"]["backend"] == "cpu" and cell["software"]["torch"] and cell["software"]["kernels"] == "0.17"
    # the receipt is valid for the lock it was measured against
    lk = _lock(qproject)
    rec = Receipt.parse(r, file="x.json")
    assert rec.problems(lk.manifest) == [] and lk.pin_problems(rec) == []


@needs_no_gpu  # qualifies CPU-only packages on the detected hardware
def test_correct_but_slower_route_is_supported_correct(qproject):
    [res] = qualify(_lock(qproject), "slowscale", root=qproject)
    assert res.passed and res.state == "supported_correct"
    assert res.receipt["evidence"]["timing"]["speedup-median"] < 1.05


@needs_no_gpu  # qualifies CPU-only packages on the detected hardware
def test_failed_parity_writes_no_receipt(qproject, monkeypatch, capsys):
    r = frt_main(["qualify", "--model", "toyq", "--route", "badscale"], cwd=qproject)
    assert r.returncode == 1
    assert "decode   FAIL (no receipt written)" in r.stdout and "parity failed: max-abs 0.1" in r.stdout
    assert not (qproject / "receipts" / "toyq").exists()


@needs_no_gpu  # qualifies CPU-only packages on the detected hardware
@pytest.mark.subprocess
def test_cli_writes_receipts_that_lock_embeds(qproject):
    r = frt_process(["qualify", "--model", "toyq", "--route", "fastscale", "--json"], cwd=qproject,
                env={"PYTHONPATH": str(HELPERS)})
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["results"][0]["state"] == "certified_fast"
    path = qproject / doc["results"][0]["receipt"]
    assert path.is_file()
    r = frt_process(["lock"], cwd=qproject)
    assert r.returncode == 0 and "1 receipts, 0 rejected, 1 cells" in r.stdout
    r = frt_process(["resolve", "--model", "toyq", "--detect"], cwd=qproject)
    assert r.returncode == 0 and "route fastscale  [certified_fast]" in r.stdout


def test_unknown_route_is_usage_error(qproject, monkeypatch, capsys):
    r = frt_main(["qualify", "--model", "toyq", "--route", "nope"], cwd=qproject)
    assert r.returncode == 2 and "unknown route 'nope' for model 'toyq' (valid: fastscale, slowscale, badscale)" in r.stderr


@pytest.mark.parametrize("argv, why", [
    (["--route", "nope"], "unknown route 'nope' for model 'toyq' (valid: fastscale, slowscale, badscale)"),
    (["--route", "fastscale", "--phase", "nope"], "unknown phase 'nope' for model 'toyq'"),
])
@pytest.mark.subprocess
def test_a_mistyped_route_or_phase_is_refused_before_torch_is_imported(qproject, argv, why):
    """The names are checked before ``frt qualify`` imports torch and kernels (seconds): here torch
    cannot be imported at all, and the refusal still comes, naming the valid names (exit 2)."""
    code = ("import sys; sys.modules['torch'] = None; sys.modules['kernels'] = None\n"
            "from frt_dist.cli.main import main; sys.exit(main(sys.argv[1:]))")
    r = subprocess.run([sys.executable, "-c", code, "qualify", "--model", "toyq", *argv], cwd=qproject,
                       capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(HELPERS)})
    assert r.returncode == 2 and why in r.stderr, r.stderr
