"""Command-line contract: usage errors exit 2 and list valid values; messages are `error:` + `hint:`."""

from __future__ import annotations

import json

import pytest

from helpers.factories import toy_manifest, write_files
from helpers.frt import frt_process
from helpers.hubserver import kernel_variant_files

pytestmark = pytest.mark.subprocess  # every test here starts frt or a server as a process


@pytest.fixture
def toy_project(project):
    write_files(project / "packages" / "addone", kernel_variant_files(name="addone", variant="torch-cpu"))
    (project / "manifests" / "toy.toml").write_text(
        toy_manifest(package_toml='[packages."testorg/addone"]\npath = "packages/addone"'))
    assert frt_process(["lock", "--quiet"], cwd=project).returncode == 0
    return project


HW = ["--arch", "x86_64", "--device-class", "amd-epyc-7b13", "--software", "torch=2.13"]


@pytest.mark.parametrize("argv, message", [
    (["resolve", "--model", "nope", *HW], "unknown model 'nope' in project"),
    (["resolve", "--model", "toy", "--phase", "verify", *HW], "unknown phase 'verify' for model 'toy' (valid: decode, prefill)"),
    (["resolve", "--model", "toy", "--precision", "int3", *HW], "unknown precision 'int3' for model 'toy' (valid: fp32)"),
    (["resolve", "--model", "toy", "--arch", "12.0"], "declared hardware needs both --arch and --device-class"),
    (["resolve", "--model", "toy", "--fallback", "maybe", *HW], "invalid choice: 'maybe'"),
    (["lock", "--model", "nope"], "unknown model 'nope'"),
])
def test_usage_errors_exit_2(toy_project, argv, message):
    r = frt_process(argv, cwd=toy_project)
    assert r.returncode == 2, r.stderr
    assert message in r.stderr and "error: " in r.stderr


def test_manifest_error_exit_2_names_file_and_field(toy_project):
    (toy_project / "manifests" / "toy.toml").write_text(toy_manifest().replace('host = "torch"', 'host = 7'))
    r = frt_process(["lock"], cwd=toy_project)
    assert r.returncode == 2
    assert r.stderr.strip() == "error: manifests/toy.toml: host: expected a string, got an integer"


def test_resolve_human_and_json(toy_project):
    r = frt_process(["resolve", "--model", "toy", *HW], cwd=toy_project)
    assert r.returncode == 1
    assert "decode   rows 1-16      REFUSED" in r.stdout and "fast           no receipt for this cell" in r.stdout
    r = frt_process(["resolve", "--model", "toy", *HW, "--json", "--fallback", "host"], cwd=toy_project)
    assert r.returncode == 0
    doc = json.loads(r.stdout)
    assert set(doc) == {"model", "lock-digest", "precision", "hardware", "decisions", "warnings", "project"}
    assert doc["project"] == {"root": str(toy_project.resolve()), "kind": "project", "bundled": False}
    assert doc["warnings"] == []  # a fresh lock (test_resolve_lockfile.py: a stale one)
    assert doc["decisions"][0] == {"phase": "decode", "decision": "host", "route": None, "state": "unknown",
                                   "receipt": None, "reasons": [{"route": "fast", "reason": "no receipt for this cell",
                                                                "kind": "no-receipt"}]}


def test_resolve_explain_lists_every_candidate(toy_project):
    r = frt_process(["resolve", "--model", "toy", *HW, "--explain", "--json"], cwd=toy_project)
    doc = json.loads(r.stdout)
    cands = doc["candidates"]
    assert [(c["phase"], c["route"]) for c in cands] == [("decode", "fast"), ("prefill", "fast")]
    pk = cands[0]["packages"]["testorg/addone"]
    assert cands[0]["route-digest"].startswith("sha256:") and pk["revision"].startswith("sha256:")
    assert pk["variants"] == ["torch-cpu"]


def test_detect_needs_no_torch(toy_project, tmp_path):
    # --detect imports no torch: with torch unimportable, --detect still reads the machine (NVML, the OS, package metadata)
    import subprocess
    import sys
    code = ("import sys; sys.modules['torch'] = None\n"
            "from frt_dist.cli.main import main\nraise SystemExit(main(['resolve', '--model', 'toy', '--detect', '--json']))")
    r = subprocess.run([sys.executable, "-c", code], cwd=toy_project, capture_output=True, text=True)
    assert r.returncode in (0, 1), r.stderr  # a decision (route or refusal), not a usage error
    assert json.loads(r.stdout)["hardware"]["backend"] in ("cpu", "cuda")


def test_bundled_defaults_are_read_only(toy_project):
    from frt_dist.errors import FrtError
    from frt_dist.lock.build import lock_model
    from frt_dist.project.discover import Project

    (toy_project / "lockfiles" / "toy.lock").unlink()
    with pytest.raises(FrtError, match="the bundled defaults are read-only") as ei:
        lock_model(Project(toy_project, "bundled"), "toy")
    assert "set FRT_HOME" in ei.value.hints[0]
    assert not (toy_project / "lockfiles" / "toy.lock").exists()
    # --check still works on read-only defaults
    res = lock_model(Project(toy_project, "bundled"), "toy", check=True)
    assert res.stale == ["lockfiles/toy.lock is missing"]
