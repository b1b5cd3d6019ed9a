"""Packaging: the sdist carries the demo project, the wheel built from that sdist maps it into
``frt_dist/_bundled/``, and an installed copy outside the checkout resolves and verifies it.

Builds with hatchling's PEP 517 hooks in a subprocess (no network, no build isolation: hatchling is
a test dependency), installs with ``pip --target`` and runs ``frt`` from a folder with no project.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from helpers.paths import ROOT

pytestmark = pytest.mark.subprocess  # every test here starts frt or a server as a process

pytest.importorskip("hatchling")

# the demo project at the repository root, and where the wheel must carry it
DEMO_DIRS = ("manifests", "lockfiles", "receipts", "packages")
BUNDLED = "frt_dist/_bundled"
HANG_GUARD_S = 300  # only a guard against a hang; a build or an install here takes a second or two


def _python(code: str, *, cwd: Path, env: dict | None = None) -> str:
    r = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True,
                       timeout=HANG_GUARD_S)
    assert r.returncode == 0, f"{code}\n{r.stdout}\n{r.stderr}"
    return r.stdout.strip().splitlines()[-1]


def _build(hook: str, out: Path, *, cwd: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    name = _python(f"from hatchling.build import {hook}; print({hook}({str(out)!r}))", cwd=cwd,
                   env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
    return out / name


def _junk(name: str) -> bool:
    return "__pycache__" in name.split("/") or name.endswith((".pyc", ".pyo"))


@pytest.fixture(scope="module")
def dists(tmp_path_factory):
    """(sdist, wheel built from the extracted sdist, wheel built from the checkout)."""
    tmp = tmp_path_factory.mktemp("dists")
    sdist = _build("build_sdist", tmp / "sdist", cwd=ROOT)
    with tarfile.open(sdist) as tf:
        tf.extractall(tmp / "extracted", filter="data")
    [src] = (tmp / "extracted").iterdir()
    from_sdist = _build("build_wheel", tmp / "wheel-from-sdist", cwd=src)
    from_checkout = _build("build_wheel", tmp / "wheel-from-checkout", cwd=ROOT)
    return sdist, from_sdist, from_checkout


def _wheel_names(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as zf:
        return sorted(zf.namelist())


def _checkout_demo_files() -> list[str]:
    """The demo project's files in this checkout (what git would hold: no bytecode)."""
    out = []
    for d in DEMO_DIRS:
        for p in (ROOT / d).rglob("*"):
            rel = p.relative_to(ROOT).as_posix()
            if p.is_file() and not _junk(rel):
                out.append(rel)
    return sorted(out)


def test_sdist_carries_the_demo_project(dists):
    sdist, _, _ = dists
    with tarfile.open(sdist) as tf:
        names = [n.split("/", 1)[1] for n in tf.getnames() if "/" in n]
    for rel in _checkout_demo_files():
        assert rel in names, f"the sdist lacks {rel}"
    assert "pyproject.toml" in names
    assert not [n for n in names if _junk(n)]


def test_wheel_from_the_sdist_equals_the_wheel_from_the_checkout(dists):
    _, from_sdist, from_checkout = dists
    assert _wheel_names(from_sdist) == _wheel_names(from_checkout)


def test_wheel_bundles_the_demo_project_and_nothing_else(dists):
    _, wheel, _ = dists
    names = _wheel_names(wheel)
    bundled = sorted(n.removeprefix(BUNDLED + "/") for n in names if n.startswith(BUNDLED + "/"))
    assert bundled == _checkout_demo_files()
    for rel in ("lockfiles/demo-decoder.lock", "manifests/demo-decoder.toml",
                "receipts/demo-decoder/fused--decode--fp32--amd-epyc.json",
                "packages/rmsnorm/build/torch-cpu/metadata.json"):
        assert f"{BUNDLED}/{rel}" in names
    # the package and its metadata only: no tests, benchmarks, docs, scripts or bytecode
    tops = {n.split("/")[0] for n in names}
    assert "frt_dist" in tops and all(t == "frt_dist" or re.fullmatch(r"frt_dist-[^/]+\.dist-info", t) for t in tops), tops
    assert not [n for n in names if _junk(n)]
    assert not [n for n in names if {"tests", "bench", "docs", "scripts"} & set(n.split("/")[:2])]


@pytest.fixture(scope="module")
def installed(dists, tmp_path_factory):
    """The wheel built from the sdist, installed into a bare folder; returns (site, env, cwd)."""
    _, wheel, _ = dists
    tmp = tmp_path_factory.mktemp("installed")
    site, cwd = tmp / "site", tmp / "elsewhere"
    cwd.mkdir()
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--no-compile",
                        "--disable-pip-version-check", "--target", str(site), str(wheel)],
                       capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert r.returncode == 0, r.stdout + r.stderr
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FRT_", "HF_", "KERNELS_"))}
    env.update(PYTHONPATH=str(site), PYTHONDONTWRITEBYTECODE="1", HF_HUB_OFFLINE="1",
               HF_HOME=str(tmp / "hf-home"))
    return site, env, cwd


def _frt(installed, *args: str) -> subprocess.CompletedProcess:
    # not helpers.frt: the installed copy's own environment and folder, not this checkout's
    _, env, cwd = installed
    return subprocess.run([sys.executable, "-m", "frt_dist.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=HANG_GUARD_S)


def test_installed_copy_imports_from_the_install_and_finds_its_bundled_project(installed):
    site, env, cwd = installed
    assert not (cwd / "manifests").exists()
    out = _python("import frt_dist, frt_dist.project.discover as p; print(frt_dist.__file__, p.bundled_root())",
                  cwd=cwd, env=env)
    module, bundled = out.split(" ")
    assert Path(module).resolve() == (site / "frt_dist" / "__init__.py").resolve()
    assert Path(bundled).resolve() == (site / BUNDLED).resolve()


def test_installed_copy_resolves_the_bundled_lockfile(installed):
    site, _, _ = installed
    argv = ["resolve", "--model", "demo-decoder", "--arch", "x86_64", "--device-class", "amd-epyc",
            "--software", "torch=2.13,kernels=0.17.2", "--json"]
    r = _frt(installed, *argv)  # outside a project: never the bundled demo unasked
    assert r.returncode == 2 and json.loads(r.stdout)["error"].startswith("no frt project here"), r.stdout + r.stderr
    r = _frt(installed, "--demo", *argv)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    assert doc["project"] == {"root": str((site / BUNDLED).resolve()), "kind": "bundled", "bundled": True}
    assert [(d["phase"], d["decision"], d["route"]) for d in doc["decisions"]] == [
        ("decode", "route", "fused"), ("prefill", "route", "fused")]


def test_installed_copy_verifies_the_bundled_lockfile(installed):
    site, env, cwd = installed
    # the console script pip wrote for the installed copy (entry point frt_dist.cli.main:main)
    script = site / "bin" / "frt"
    argv = [str(script)] if script.is_file() else [sys.executable, "-m", "frt_dist.cli"]
    r = subprocess.run([*argv, "verify", "--demo"], cwd=cwd, env=env, capture_output=True, text=True,
                       timeout=HANG_GUARD_S)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "lockfiles/demo-decoder.lock: ok" in r.stdout
