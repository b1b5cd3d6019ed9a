"""`make demo` end to end (with the fewest timing rounds a speed claim accepts): qualify → lock → mirror → verify → offline load → serve."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from helpers.frt import frt_process
from helpers.gpu import needs_no_gpu
from helpers.paths import ROOT


@needs_no_gpu  # the demo qualifies and serves CPU kernels on the detected hardware
@pytest.mark.subprocess
@pytest.mark.slow
def test_demo_runs_the_whole_lifecycle(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "FRT_", "KERNELS_"))}
    # TMPDIR: the demo's temporary project goes under this test's folder, never littering /tmp
    # FRT_DEMO_MAX_ROUNDS: no adaptive timing past those rounds (up to 4x more, the prefill's at 2,048 rows):
    # this test checks the lifecycle's steps and output, not how decided a speedup is
    env.update(FRT_DEMO_ROUNDS="5", FRT_DEMO_MAX_ROUNDS="5", PYTHONDONTWRITEBYTECODE="1", TMPDIR=str(tmp_path))
    r = subprocess.run([sys.executable, "-m", "frt_dist.demo.run"], capture_output=True, text=True, env=env,
                       timeout=400, cwd=ROOT)
    out = r.stdout
    assert r.returncode == 0, out[-3000:] + r.stderr[-3000:]
    # on success the temporary project is removed, and the demo says so
    work = Path(re.search(r"^frt demo: a temporary project in (.+)$", out, re.M).group(1))
    assert work.parent == tmp_path and f"removed the temporary project {work}" in out
    assert not work.exists()
    for needle in ("$ frt qualify --model demo-decoder --route fused", "lockfiles/demo-decoder.lock: written",
                   "$ frt mirror mirror", "lockfiles/demo-decoder.lock: ok", "decisions:",
                   "served 5 guarded forward passes", "ledger:", "fallbacks 0",
                   "no receipt for this cell: receipt measured on", "variant for this system not locked",
                   "hardware rtx-5090 (cuda, arch 12.0)", "bands decided host 0, host calls 0"):
        assert needle in out, needle
    assert "cuda 12.0" not in out  # an arch is not a CUDA version
    assert re.search(r"^  phase +rows +precision +hardware +device class +software +fused +split$", out, re.M), out
    assert "\\_" not in out  # the matrix is the aligned table, not Markdown
    assert "calls 5" in out  # every guarded pass went through the routed entries


@pytest.mark.subprocess
def test_bundled_lockfile_resolves_after_install(tmp_path):
    """`frt --demo resolve --model demo-decoder` against the bundled lockfile, from any folder."""
    r = frt_process(["--demo", "resolve", "--model", "demo-decoder", "--arch", "x86_64", "--device-class", "amd-epyc",
                 "--software", "torch=2.13,kernels=0.17.2", "--json"], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    import json

    doc = json.loads(r.stdout)
    assert [d["route"] for d in doc["decisions"]] == ["fused", "fused"]
    assert frt_process(["lock", "--check", "--demo"], cwd=tmp_path).returncode == 0
    assert frt_process(["verify", "--demo"], cwd=tmp_path).returncode == 0


# `make demo`'s temporary project, without the demo's minutes: every step stubbed


def _stubbed_demo(monkeypatch, tmp_path, step):
    from frt_dist.demo import run as demo

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # mkdtemp() places the project here
    monkeypatch.setattr(demo, "_run", step)
    return demo


def test_demo_removes_its_temporary_project_on_success(monkeypatch, tmp_path, capsys):
    demo = _stubbed_demo(monkeypatch, tmp_path, lambda argv, **kw: subprocess.CompletedProcess(argv, 0, "", ""))
    assert demo.main() == 0
    assert list(tmp_path.iterdir()) == []
    assert "frt demo: done; removed the temporary project" in capsys.readouterr().out


def test_demo_leaves_its_temporary_project_on_failure_and_says_where(monkeypatch, tmp_path, capsys):
    def failing_step(argv, **kw):
        print("demo: step failed with exit 3", file=sys.stderr)
        raise SystemExit(3)

    demo = _stubbed_demo(monkeypatch, tmp_path, failing_step)
    with pytest.raises(SystemExit) as exc:
        demo.main()
    assert exc.value.code == 3
    [left] = tmp_path.iterdir()
    assert (left / "manifests" / "demo-decoder.toml").is_file()
    err = capsys.readouterr().err
    assert f"frt demo: failed; the temporary project is left for inspection in {left}" in err
