"""The GPU check and the frt-cuda-ops build script, on a machine without a GPU (CI's part).

What needs a GPU (compiling, qualifying, serving) is ``scripts/gpu-check`` on one; here: the
no-GPU run and its skips, the build's refusal without nvcc, the kernels layout the build
assembles (checked with `kernels`' own metadata parser and digest), and the 12.0a-only build
refused on a declared H200 before import, through the check's own project.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from frt_dist.errors import KernelUnavailable, UsageError
from frt_dist.system.hardware import Hardware
from helpers.paths import ROOT

PKG = ROOT / "packages" / "frt-cuda-ops"
VARIANT = "torch213-cxx11-cu128-x86_64-linux"  # what this CPU torch (2.13) would build against CUDA 12.8
H200 = Hardware(arch="9.0", device_class="h200", backend="cuda", cpu="x86_64", os="linux",
                software={"torch": "2.13", "cuda": "12.8"})


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_loader(name, importlib.machinery.SourceFileLoader(name, str(path)))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def build():
    return _load("frt_cuda_ops_build", PKG / "build.py")


@pytest.fixture(scope="module")
def gpu_check():
    return _load("gpu_check", ROOT / "scripts" / "gpu-check")


# -- the no-GPU run --------------------------------------------------------------------------

@pytest.mark.subprocess
def test_without_a_gpu_the_check_runs_what_needs_none_and_says_what_it_skipped(tmp_path):
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")  # no GPU, even on a machine that has one
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu-check"), "--out", str(tmp_path)],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads((tmp_path / "gpu-check.json").read_text())
    steps = {s["name"]: s for s in summary["steps"]}
    assert summary["ok"] is True and summary["gpu"] is False
    assert [n for n, s in steps.items() if s["status"] == "ok"] == ["wheels", "detect", "manifest"]
    assert steps["detect"]["hardware"]["backend"] == "cpu" and steps["detect"]["torch-imported"] is False
    for name in ("build", "lock", "qualify", "relock", "mirror", "serve", "refuse"):
        assert steps[name]["status"] == "skipped"
        assert steps[name]["reason"].startswith("no NVIDIA GPU: "), steps[name]
        assert f"[skipped] {name}: no NVIDIA GPU: " in proc.stdout
    assert steps["manifest"]["routes"] == ["cuda-ops", "sm120a-only"]


def test_missing_packages_without_wheels_fail_clearly(gpu_check, tmp_path):
    run = gpu_check.Run(tmp_path / "out", tmp_path / "work", 60)
    (tmp_path / "wheels").mkdir()
    (tmp_path / "wheels" / "rtoml-0.14.0-cp312-cp312-manylinux_2_17_x86_64.whl").write_bytes(b"")
    with pytest.raises(RuntimeError) as exc:
        gpu_check.install_wheels(run, tmp_path / "wheels", needed={"frt-no-such-dist": "1.0", "packaging": "999"})
    assert str(exc.value).startswith(f"missing frt-no-such-dist>=1.0, packaging>=999 and no wheels of "
                                     f"frt-no-such-dist, packaging in {tmp_path / 'wheels'}; download them where "
                                     "pip works, then carry wheels/: python3 -m pip download")
    assert not (tmp_path / "work" / "site").exists()


def test_present_packages_need_no_wheels(gpu_check, tmp_path):
    run = gpu_check.Run(tmp_path / "out", tmp_path / "work", 60)
    got = gpu_check.install_wheels(run, tmp_path / "no-wheels", needed={"packaging": "20"})
    assert got["installed"] == [] and got["versions"]["kernels"] == "0.17.2"


def test_a_step_whose_prerequisite_failed_is_skipped_with_the_reason(gpu_check, tmp_path):
    run = gpu_check.Run(tmp_path / "out", tmp_path / "work", 60)
    run.step("build", lambda: (_ for _ in ()).throw(RuntimeError("nvcc exploded")))
    later = run.step("lock", lambda: {"ran": True}, needs=("build",))
    assert run.steps[0]["status"] == "failed" and run.steps[0]["reason"] == "RuntimeError: nvcc exploded"
    assert later["status"] == "skipped" and later["reason"] == "needs build"


# -- the build script ------------------------------------------------------------------------

def test_build_without_nvcc_stops_before_torch_and_writes_nothing(build, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.setattr(build, "DEFAULT_NVCC", tmp_path / "no-cuda" / "bin" / "nvcc")
    monkeypatch.setitem(sys.modules, "torch", None)  # importing torch would raise: it must not be reached
    out = tmp_path / "pkg"
    assert build.main(["--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: nvcc not found: frt-cuda-ops is compiled on the machine it runs on, "
                          "which needs the CUDA toolkit\nhint: install the CUDA toolkit, or set CUDA_HOME to it")
    assert not out.exists()


@pytest.mark.parametrize("cuda, archs, message", [
    (None, [], "error: torch {torch} is not a CUDA build: the variant needs its CUDA version"),
    ("12.8", [], "error: no GPU visible to name the arch: pass --archs (e.g. 9.0)"),
    ("12.8", ["--archs", "9.0,sm_120"], "error: --archs: 'sm_120' is not a CUDA arch (expected e.g. 9.0, 12.0a, 8.0+PTX)"),
])
def test_build_refuses_before_compiling(build, tmp_path, monkeypatch, capsys, cuda, archs, message):
    import torch

    monkeypatch.setattr(build, "find_nvcc", lambda: "/opt/cuda/bin/nvcc")
    monkeypatch.setattr(torch.version, "cuda", cuda)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(build, "compile_extension", lambda *a, **k: pytest.fail("compiled after a refusal"))
    assert build.main(["--out", str(tmp_path / "pkg"), *archs]) == 2
    assert capsys.readouterr().err.splitlines()[0] == message.format(torch=torch.__version__)
    assert not (tmp_path / "pkg").exists()


def test_nvcc_is_found_through_cuda_home(build, tmp_path):
    nvcc = tmp_path / "cuda" / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True)
    nvcc.write_text("#!/bin/sh\n")
    nvcc.chmod(0o755)
    assert build.find_nvcc({"CUDA_HOME": str(tmp_path / "cuda"), "PATH": ""}) == str(nvcc)


def test_gencode_per_declared_arch_and_nothing_else(build):
    assert build.gencode_flags(["9.0", "12.0a", "8.0+PTX"]) == [
        "-gencode=arch=compute_90,code=sm_90", "-gencode=arch=compute_120a,code=sm_120a",
        "-gencode=arch=compute_80,code=sm_80", "-gencode=arch=compute_80,code=compute_80"]
    with pytest.raises(UsageError, match=r"--archs: 'sm_90' is not a CUDA arch \(expected e.g. 9.0, 12.0a, 8.0\+PTX\)"):
        build.gencode_flags(["sm_90"])


@pytest.mark.parametrize("torch_version, cuda, want", [("2.11.0+cu130", "13.0", "torch211-cxx11-cu130-x86_64-linux"),
                                                       ("2.13.0", "12.8", VARIANT)])
def test_variant_name_is_one_kernels_reads_back(build, torch_version, cuda, want):
    from kernels.variants import parse_variant

    name = build.variant_name(torch_version, cuda, True, "x86_64", "linux")
    assert name == want and parse_variant(name).variant_str == name


def _fake_extension(tmp_path: Path) -> Path:
    ext = tmp_path / "compiled" / "_C.cpython-312-x86_64-linux-gnu.so"
    ext.parent.mkdir(parents=True, exist_ok=True)
    ext.write_bytes(b"\x7fELF not really: never imported in these tests")
    return ext


def test_assembled_variant_is_the_kernels_layout_with_kernels_digests(build, tmp_path):
    from kernels._rust import Digest, DigestAlgorithm, Metadata

    target = build.assemble(tmp_path / "pkg", _fake_extension(tmp_path), variant=VARIANT, archs=["9.0"])
    assert target == tmp_path / "pkg" / "build" / VARIANT
    assert sorted(p.relative_to(target).as_posix() for p in target.rglob("*") if p.is_file()) == [
        "frt_cuda_ops/_C.cpython-312-x86_64-linux-gnu.so", "frt_cuda_ops/__init__.py", "metadata.json"]
    meta = Metadata.from_bytes((target / "metadata.json").read_bytes())
    meta.digest.validate(Digest.hash_variant(DigestAlgorithm.SHA256, target))  # kernels' own digest agrees
    doc = json.loads((target / "metadata.json").read_text())
    assert doc["backend"] == {"type": "cuda", "archs": ["9.0"]} and doc["name"] == "frt-cuda-ops"
    assert doc["id"].startswith("_frt_cuda_ops_") and not list(tmp_path.glob("pkg/build/.*"))  # no staging left


def test_a_failed_assembly_leaves_the_previous_variant(build, tmp_path):
    first = build.assemble(tmp_path / "pkg", _fake_extension(tmp_path), variant=VARIANT, archs=["9.0"])
    before = (first / "metadata.json").read_bytes()
    with pytest.raises(FileNotFoundError):
        build.assemble(tmp_path / "pkg", tmp_path / "missing" / "_C.so", variant=VARIANT, archs=["9.0"])
    assert (first / "metadata.json").read_bytes() == before
    assert [p.name for p in (tmp_path / "pkg" / "build").iterdir()] == [VARIANT]


# -- the check's project, with assembled (never imported) builds ----------------------------

@pytest.fixture
def checked_project(build, gpu_check, tmp_path):
    """The check's project as steps 2-3 leave it, with assembled (never imported) builds."""
    from frt_dist.lock.build import lock_model
    from frt_dist.project.discover import Project

    run = gpu_check.Run(tmp_path / "out", tmp_path / "work", 120)
    shutil.copytree(PKG / "project", run.project, ignore=shutil.ignore_patterns("__pycache__"))
    ext = _fake_extension(tmp_path)
    build.assemble(run.project / "packages" / "frt-cuda-ops", ext, variant=VARIANT, archs=["9.0"])
    sm120a = build.assemble(run.project / "packages" / "frt-cuda-ops-sm120a", ext, variant=VARIANT, archs=["12.0a"])
    lock_model(Project(run.project, "project"), "frt-cuda-ops")
    return run, {"frt-cuda-ops-sm120a": {"id": json.loads((sm120a / "metadata.json").read_text())["id"]}}


DECLARED_H200 = "Hardware(arch='9.0', device_class='h200', backend='cuda', software={'torch': '2.13', 'cuda': '12.8'})"


def test_the_12_0a_only_build_is_refused_on_an_h200_before_import(checked_project):
    from frt_dist.documents.lockfile import Lockfile
    from frt_dist.loader import load_locked

    run, builds = checked_project
    with pytest.raises(KernelUnavailable) as exc:
        load_locked(Lockfile.read(run.lock), "frt-gpu-check/frt-cuda-ops-sm120a", hardware=H200, root=run.project)
    assert f"variant {VARIANT} declares archs 12.0a; device h200 is 9.0" in str(exc.value)
    assert not [m for m in sys.modules if m.startswith(builds["frt-cuda-ops-sm120a"]["id"])]


def test_the_refuse_step_itself_on_a_declared_h200(checked_project, gpu_check):
    run, builds = checked_project
    got = gpu_check.refuse(run, builds, hardware=DECLARED_H200)
    assert got["refused"] and got["imported"] == [] and "declares archs 12.0a; device h200 is 9.0" in got["reason"]


@pytest.mark.slow
def test_the_refuse_step_fails_when_the_build_loads(checked_project, gpu_check):
    run, builds = checked_project  # a 12.0 device admits the 12.0a build: it is imported (the fake binary fails)
    with pytest.raises(RuntimeError) as exc:
        gpu_check.refuse(run, builds, hardware=DECLARED_H200.replace("'9.0'", "'12.0'").replace("h200", "rtx-5090"))
    assert str(exc.value).startswith("refused for another reason than the arch: package "
                                     "'frt-gpu-check/frt-cuda-ops-sm120a' is unavailable: import of build/")


def test_the_gpu_only_steps_are_valid_python(gpu_check):
    for template, fields in ((gpu_check.SERVE, ("project", "model", "mirror")),
                             (gpu_check.QUALIFY, ("project", "lock", "route", "receipts"))):
        compile(template.format(**{f: "x" for f in fields}), "<gpu-check step>", "exec")
