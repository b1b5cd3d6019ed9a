"""The one shared loader: identity, integrity, arch, trust, pins, sources, offline."""

from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from frt_dist import KernelUnavailable, hub_kernel, loader, unavailable_report
from frt_dist.distribution.hub import HubClient
from frt_dist.distribution.mirror import mirror_lock
from frt_dist.documents.lockfile import Lockfile
from helpers.factories import (
    CPU,
    NORM_SRC,
    REMOTE,
    SCALE_SRC,
    NetworkTripwire,
    cuda_hw,
    hub_manifest,
    sha256_b64,
    start_hub,
    tiny_project,
    write_package,
)
from helpers.paths import SRC

SCALE = "t-org/scale"
PIN = loader.pin_env_name(SCALE)


@pytest.fixture(autouse=True)
def fresh(monkeypatch, tmp_path):
    """Each test starts with no loads, isolated caches and no frt/HF environment."""
    loader._forget_all()
    for var in ("FRT_MIRROR", "FRT_LOCK", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_ENDPOINT", PIN):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("KERNELS_CACHE", str(tmp_path / "kcache"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hfcache"))
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    yield
    loader._forget_all()


@pytest.fixture
def proj(tmp_path):
    tp = tiny_project(tmp_path)
    return tp, tp.lock()


def _refusal(fn, *a, **k) -> KernelUnavailable:
    with pytest.raises(KernelUnavailable) as ei:
        fn(*a, **k)
    assert isinstance(ei.value, ValueError)
    return ei.value


# ---------------------------------------------------------------------------
# one module per package per process


def test_path_package_loads_once_and_hub_kernel_returns_the_same_module(proj):
    tp, lock = proj
    first = loader.load_locked(lock, SCALE, hardware=CPU)
    assert (first.source, first.variant, first.revision, first.trust) == ("path", "torch-cpu", lock.packages[SCALE].revision,
                                                                          "project-path")
    assert sys.modules[first.module_id] is first.module
    # verified from the path package, imported from its copy in the verified store
    assert Path(first.location) == (tp.root / "packages" / "scale" / "build" / "torch-cpu").resolve()
    assert Path(first.module.__file__) == Path(first.store_path) / "scale" / "__init__.py"
    assert Path(first.module.__file__).read_bytes() == (Path(first.location) / "scale" / "__init__.py").read_bytes()
    assert loader.load_locked(lock, SCALE, hardware=CPU) is first
    assert hub_kernel(SCALE, 1, lockfile=lock.path, hardware=CPU) is first.module
    import kernels

    assert first.module in [k.module for k in kernels.get_loaded_kernels()]  # registered as kernels does


def test_second_copy_and_symlinked_path_do_not_load_twice(proj, tmp_path):
    tp, lock = proj
    first = loader.load_locked(lock, SCALE, hardware=CPU)
    copy = tp.copy_to(tmp_path / "copy")
    link = tmp_path / "link"
    link.symlink_to(tp.root)
    for root in (copy.root, link):
        other = Lockfile.read(root / "lockfiles" / "tiny.lock")
        assert other.packages[SCALE].revision == lock.packages[SCALE].revision
        assert loader.load_locked(other, SCALE, hardware=CPU).module is first.module
    assert [k for k in sys.modules if k.startswith("_frt_test_scale")] == [first.module_id]


def test_location_is_the_real_variant_directory_through_a_symlinked_project(proj, tmp_path):
    tp, _ = proj
    link = tmp_path / "via" / "link"
    link.parent.mkdir()
    link.symlink_to(tp.root)
    got = loader.load_locked(Lockfile.read(link / "lockfiles" / "tiny.lock"), SCALE, hardware=CPU)
    assert got.location == os.path.realpath(tp.root / "packages" / "scale" / "build" / "torch-cpu")
    assert Path(got.module.__file__).parent.parent == Path(got.store_path)


def test_two_revisions_of_one_repo_are_refused_naming_both(proj, tmp_path):
    tp, lock = proj
    first = loader.load_locked(lock, SCALE, hardware=CPU)
    copy = tp.copy_to(tmp_path / "copy")
    write_package(copy.root / "packages" / "scale", "scale", source=SCALE_SRC + "\n# v1.1\n")
    other = copy.lock()
    rev_b = other.packages[SCALE].revision
    exc = _refusal(loader.load_locked, other, SCALE, hardware=CPU)
    (reason,) = exc.reasons
    assert reason["kind"] == "conflict"
    assert reason["loaded"] == first.request and lock.packages[SCALE].revision in reason["loaded"]
    assert rev_b in reason["requested"] and str(copy.root) in reason["requested"]
    assert reason["reason"] == f"already loaded in this process as {first.request}; this request asks for {reason['requested']}"
    assert unavailable_report()[-1] == {"repo": SCALE, "version": 1, "revision": rev_b, "variant": "torch-cpu",
                                        "message": str(exc), "reasons": exc.reasons}


# ---------------------------------------------------------------------------
# integrity before import


def test_every_damaged_file_is_reported_and_nothing_is_imported(tmp_path):
    module = {"__init__.py": "from .helpers import scale, scale_out\n", "helpers.py": SCALE_SRC,
              "data.txt": "payload\n", "notes.txt": "notes\n"}
    tp = tiny_project(tmp_path, packages={"scale": {"name": "scale", "module": module},
                                          "norm": {"name": "norm", "source": NORM_SRC}})
    lock = tp.lock()
    files = lock.packages[SCALE].variants["torch-cpu"].files
    pkg = tp.root / "packages" / "scale" / "build" / "torch-cpu" / "scale"
    (pkg / "helpers.py").write_text(SCALE_SRC + "import os  # injected\n")  # mismatched
    (pkg / "notes.txt").unlink()  # missing
    (pkg / "extra.py").write_text("x = 1\n")  # unknown
    outside = tmp_path / "outside.txt"
    outside.write_text("payload\n")  # same bytes, but outside the package
    (pkg / "data.txt").unlink()
    (pkg / "data.txt").symlink_to(outside)  # symlink leaving its tree

    before = set(sys.modules)
    exc = _refusal(loader.load_locked, lock, SCALE, hardware=CPU)
    assert set(sys.modules) == before
    got = [(r["kind"], r["path"], r["expected"], r["computed"]) for r in exc.reasons]
    assert got == [
        ("mismatched", "build/torch-cpu/scale/data.txt", files["scale/data.txt"], f"symlink leaving its tree -> {outside}"),
        ("unknown", "build/torch-cpu/scale/extra.py", None, None),  # named with its size, never read
        ("mismatched", "build/torch-cpu/scale/helpers.py", files["scale/helpers.py"],
         sha256_b64((SCALE_SRC + "import os  # injected\n").encode())),
        ("missing", "build/torch-cpu/scale/notes.txt", files["scale/notes.txt"], None),
    ]
    assert all(r["source"] == "path" and r["package"] == SCALE for r in exc.reasons)
    assert exc.reasons[1]["size"] == 6 and exc.reasons[1]["reason"].endswith("(6 bytes, not read)")
    assert "4 file(s) of build/torch-cpu/" in str(exc) and "nothing was imported" in str(exc)
    report = unavailable_report()
    assert report[-1]["message"] == str(exc) and report[-1]["reasons"] == exc.reasons


def test_special_files_are_refused_without_reading_or_waiting(tmp_path):
    """A FIFO where a file belongs must not block the check (it is opened non-blocking and
    classified by what was opened); a symlink to a directory is named as such."""
    module = {"__init__.py": SCALE_SRC, "fifo.bin": "data\n", "dirlink": "not a dir\n"}
    tp = tiny_project(tmp_path, packages={"scale": {"name": "scale", "module": module},
                                          "norm": {"name": "norm", "source": NORM_SRC}})
    lock = tp.lock()
    pkg = tp.root / "packages" / "scale" / "build" / "torch-cpu" / "scale"
    (pkg / "fifo.bin").unlink()
    os.mkfifo(pkg / "fifo.bin")
    (pkg / "sub").mkdir()
    (pkg / "dirlink").unlink()
    (pkg / "dirlink").symlink_to(pkg / "sub")
    exc = _refusal(loader.load_locked, lock, SCALE, hardware=CPU)
    got = [(r["kind"], r["path"], r["computed"]) for r in exc.reasons]
    assert got == [("mismatched", "build/torch-cpu/scale/dirlink", "a directory where a file belongs"),
                   ("mismatched", "build/torch-cpu/scale/fifo.bin", "not a regular file")]


@pytest.mark.parametrize("case,why", [  # kernel-depends are loaded now: tests/test_package_requirements.py
    ("no-entry", "build/torch-cpu/ has neither __init__.py nor scale/__init__.py"),
])
def test_a_variant_frt_cannot_import_is_refused(tmp_path, case, why):
    spec = {"name": "scale", "module": {"ops.py": SCALE_SRC}}
    tp = tiny_project(tmp_path, packages={"scale": spec, "norm": {"name": "norm", "source": NORM_SRC}})
    before = set(sys.modules)
    exc = _refusal(loader.load_locked, tp.lock(), SCALE, hardware=CPU)
    assert [r["reason"] for r in exc.reasons] == [why]
    assert set(sys.modules) == before


def test_locked_metadata_is_pinned_too(proj):
    tp, lock = proj
    meta = tp.root / "packages" / "scale" / "build" / "torch-cpu" / "metadata.json"
    meta.write_text(meta.read_text().replace('"apache-2.0"', '"mit"'))
    exc = _refusal(loader.load_locked, lock, SCALE, hardware=CPU)
    (r,) = exc.reasons
    assert (r["kind"], r["path"], r["expected"]) == ("mismatched", "build/torch-cpu/metadata.json",
                                                     lock.packages[SCALE].variants["torch-cpu"].metadata_sha256)
    assert r["computed"].startswith("sha256:") and r["computed"] != r["expected"]


def test_a_package_that_raises_on_import_leaves_nothing_behind(tmp_path):
    tp = tiny_project(tmp_path, packages={"scale": {"name": "scale", "source": "raise RuntimeError('boom')\n"},
                                          "norm": {"name": "norm", "source": NORM_SRC}})
    lock = tp.lock()
    exc = _refusal(loader.load_locked, lock, SCALE, hardware=CPU)
    assert [r["reason"] for r in exc.reasons] == ["import of build/torch-cpu/ failed: RuntimeError: boom"]
    assert "_frt_test_scale_v1" not in sys.modules


# ---------------------------------------------------------------------------
# arch, on every source


@pytest.mark.parametrize("source", ["path", "mirror", "cache"])
def test_arch_is_checked_on_every_source(tmp_path, monkeypatch, source):
    cuda_pkg = {"name": "scale", "variant": "torch-cuda", "backend": "cuda", "archs": ["8.0"]}
    tp = tiny_project(tmp_path, packages={"scale": cuda_pkg, "norm": {"name": "norm", "source": NORM_SRC}})
    lock = tp.lock()
    where = {"mirror": tmp_path / "mirror", "cache": tmp_path / "kcache"}.get(source)
    if where is not None:
        mirror_lock(lock, where, all_variants=True)
    mirror = where if source == "mirror" else None
    before = set(sys.modules)
    exc = _refusal(loader.load_locked, lock, SCALE, mirror=mirror, hardware=cuda_hw("9.0"))
    assert set(sys.modules) == before
    assert exc.reasons == [{"package": SCALE, "revision": lock.packages[SCALE].revision, "kind": "arch",
                            "reason": "variant torch-cuda declares archs 8.0; device h100 is 9.0",
                            "archs": ["8.0"], "device": "9.0"}]
    # the same bytes on a device the package declares: loads, from that source
    loaded = loader.load_locked(lock, SCALE, mirror=mirror, hardware=cuda_hw("8.6", "a6000"))
    assert (loaded.source, loaded.variant, loaded.notes) == (source, "torch-cuda", ())


def test_no_declared_archs_loads_with_a_note(proj):
    _, lock = proj
    loaded = loader.load_locked(lock, SCALE, hardware=CPU)
    assert loaded.notes == ("t-org/scale variant torch-cpu declares no backend.archs; loaded without an arch claim",)


def test_load_applies_the_admissibility_rule_of_resolve_and_lock(tmp_path):
    """One admissibility rule: a CUDA build that declares no archs makes no arch claim, but it is no CPU build:
    admissible.variant_problem refuses it on a CPU cell, and so does the loader, before import."""
    from frt_dist.system.admissible import variant_problem

    cuda_pkg = {"name": "scale", "variant": "torch-cuda", "backend": "cuda"}
    tp = tiny_project(tmp_path, packages={"scale": cuda_pkg, "norm": {"name": "norm", "source": NORM_SRC}})
    lock = tp.lock()
    lv = lock.packages[SCALE].variants["torch-cuda"]
    assert lv.archs == () and variant_problem(lv, CPU.backend, CPU.arch) == "is a cuda build"
    before = set(sys.modules)
    exc = _refusal(loader.load_locked, lock, SCALE, "torch-cuda", hardware=CPU)
    assert set(sys.modules) == before
    assert exc.reasons == [{"package": SCALE, "revision": lock.packages[SCALE].revision, "kind": "backend",
                            "reason": "variant torch-cuda is a cuda build; device test is cpu",
                            "backend": "cuda", "device": "cpu"}]
    assert variant_problem(lv, "cuda", "9.0") is None  # where the rule admits it, it loads (with the note)
    assert loader.load_locked(lock, SCALE, hardware=cuda_hw("9.0")).notes == (
        "t-org/scale variant torch-cuda declares no backend.archs; loaded without an arch claim",)


def test_no_variant_for_this_system_is_refused(proj):
    _, lock = proj
    exc = _refusal(loader.load_locked, lock, SCALE, hardware=cuda_hw())
    assert exc.reasons[0]["reason"] == ("no locked variant runs on this system (h100 (cuda 9.0)): torch-cpu: "
                                        "backend (cpu) does not match system backend (cuda) and is not universal")


# ---------------------------------------------------------------------------
# import ids


@pytest.mark.parametrize("mid,why", [
    ("json", "import id 'json' would shadow sys.modules['json'], which frt did not load"),
    ("antigravity", "import id 'antigravity' would shadow the importable module 'antigravity'"),
    # a submodule entry without its parent: the package's own `from . import ops` would get it
    ("_frt_orphan", "import id '_frt_orphan' would shadow sys.modules['_frt_orphan.ops'], which frt did not load"),
])
def test_an_import_id_that_would_shadow_a_module_is_refused(tmp_path, monkeypatch, mid, why):
    import json  # noqa: F401 - make sure the stdlib module is the one in sys.modules

    monkeypatch.setitem(sys.modules, "_frt_orphan.ops", types.ModuleType("_frt_orphan.ops"))
    stdlib_json = sys.modules["json"]
    tp = tiny_project(tmp_path, packages={"scale": {"name": "scale", "id": mid},
                                          "norm": {"name": "norm", "source": NORM_SRC}})
    lock = tp.lock()
    exc = _refusal(loader.load_locked, lock, SCALE, hardware=CPU)
    assert [r["reason"] for r in exc.reasons] == [why]
    assert sys.modules["json"] is stdlib_json and "antigravity" not in sys.modules


# ---------------------------------------------------------------------------
# author pins


def test_author_pin_is_refused_under_a_lockfile_unless_allowed(proj, monkeypatch):
    _, lock = proj
    rev = lock.packages[SCALE].revision
    monkeypatch.setenv(PIN, rev)
    exc = _refusal(loader.load_locked, lock, SCALE, hardware=CPU)
    assert [r["reason"] for r in exc.reasons] == [
        f"author pin FRT_KERNEL_REV_T_ORG_SCALE={rev} is set but lockfile {lock.path} is in force (it pins {rev})"]
    loaded = loader.load_locked(lock, SCALE, hardware=CPU, allow_pins=True)
    assert loaded.pinned and loaded.revision == rev


def test_author_pin_to_another_revision_loads_that_revision(proj, tmp_path, monkeypatch):
    tp, lock = proj
    other = tp.copy_to(tmp_path / "other")
    write_package(other.root / "packages" / "scale", "scale", source=SCALE_SRC + "\nBISECT = 2\n")
    other_lock = other.lock()
    mirror = tmp_path / "mirror"
    mirror_lock(other_lock, mirror, variants=["torch-cpu"])
    monkeypatch.setenv(PIN, other_lock.packages[SCALE].revision)
    loaded = loader.load_locked(lock, SCALE, hardware=CPU, allow_pins=True, mirror=mirror)
    assert (loaded.pinned, loaded.source, loaded.module.BISECT) == (True, "mirror", 2)
    assert loaded.revision == other_lock.packages[SCALE].revision != lock.packages[SCALE].revision


def test_malformed_pin_is_refused(proj, monkeypatch):
    _, lock = proj
    monkeypatch.setenv(PIN, "main")
    exc = _refusal(loader.load_locked, lock, SCALE, hardware=CPU, allow_pins=True)
    assert exc.reasons[0]["reason"] == "FRT_KERNEL_REV_T_ORG_SCALE='main' is not a 40-hex commit or a sha256:<hex> content digest"


# ---------------------------------------------------------------------------
# hub_kernel without a lockfile; offline; versions


def test_unlocked_offline_requires_trust(proj, tmp_path):
    _, lock = proj
    mirror = tmp_path / "mirror"
    mirror_lock(lock, mirror, variants=["torch-cpu"])
    exc = _refusal(hub_kernel, SCALE, 1, mirror=mirror, hardware=CPU)
    assert [r["reason"] for r in exc.reasons] == ["publisher 't-org' cannot be verified offline and no lockfile is in force"]
    pkg = loader.load_package(SCALE, 1, trust=True, mirror=mirror, hardware=CPU)
    assert (pkg.source, pkg.trust, pkg.revision) == ("mirror", "caller", lock.packages[SCALE].snapshot)
    assert hub_kernel(SCALE, 1, trust=True, mirror=mirror, hardware=CPU) is pkg.module


def test_lockfile_in_force_must_lock_the_requested_version(proj, monkeypatch):
    _, lock = proj
    monkeypatch.setenv("FRT_LOCK", lock.path)
    exc = _refusal(hub_kernel, SCALE, 2, hardware=CPU)
    assert exc.reasons[0]["reason"] == f"lockfile {lock.path} locks version 1; version 2 was requested"
    assert hub_kernel(SCALE, 1, hardware=CPU).scale is not None
    exc = _refusal(hub_kernel, "t-org/absent", 1, hardware=CPU)
    assert exc.reasons[0]["reason"] == f"not locked in {lock.path} (locked: t-org/norm, t-org/scale)"


def test_another_version_of_a_loaded_repo_is_refused_without_asking_anyone(proj, monkeypatch):
    _, lock = proj
    first = loader.load_locked(lock, SCALE, hardware=CPU)
    wire = NetworkTripwire(monkeypatch)
    exc = _refusal(hub_kernel, SCALE, 2, hardware=CPU)
    assert exc.reasons[0]["kind"] == "conflict" and exc.reasons[0]["loaded"] == first.request
    assert exc.reasons[0]["requested"] == "t-org/scale version 2 (no lockfile)"
    assert wire.attempts == []


# ---------------------------------------------------------------------------
# the Hub (loopback server), and offline means no network


@pytest.fixture
def hub(monkeypatch, tmp_path):
    server, commit = start_hub(monkeypatch, tmp_path)
    yield server, commit
    server.stop()


def _hub_lock(tmp_path, server) -> Lockfile:
    tp = tiny_project(tmp_path, "hubproj", manifest=hub_manifest())
    tp.hub = HubClient(endpoint=server.url)
    return tp.lock()


def test_locked_hub_package_downloads_then_loads_from_the_cache(hub, tmp_path, monkeypatch):
    server, commit = hub
    lock = _hub_lock(tmp_path, server)
    assert lock.packages[REMOTE].revision == commit and lock.packages[REMOTE].trust == "trusted-publisher"
    loaded = loader.load_locked(lock, REMOTE, hardware=CPU)
    assert (loaded.source, loaded.revision) == ("hub", commit)
    snap = tmp_path / "kcache" / "kernels--remote-org--scale" / "snapshots" / commit / "build" / "torch-cpu"
    assert Path(loaded.location) == snap.resolve()
    loader._forget_all()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    server.stop()
    wire = NetworkTripwire(monkeypatch)
    again = loader.load_locked(lock, REMOTE, hardware=CPU)
    assert again.source == "cache" and wire.attempts == []


def test_a_partial_cache_snapshot_is_completed_but_a_tampered_one_is_refused(hub, tmp_path):
    server, commit = hub
    lock = _hub_lock(tmp_path, server)
    first = loader.load_locked(lock, REMOTE, hardware=CPU)
    snap = Path(first.location)
    loader._forget_all()
    (snap / "scale" / "__init__.py").unlink()  # as after an interrupted download
    again = loader.load_locked(lock, REMOTE, hardware=CPU)
    assert again.source == "hub" and (snap / "scale" / "__init__.py").is_file()
    loader._forget_all()
    (snap / "scale" / "__init__.py").resolve().write_text("def scale(x, w):\n    return x\n")
    exc = _refusal(loader.load_locked, lock, REMOTE, hardware=CPU)
    assert [(r["kind"], r["path"], r["source"]) for r in exc.reasons] == [
        ("mismatched", "build/torch-cpu/scale/__init__.py", "cache")]


def test_unlocked_hub_kernel_follows_publisher_trust(hub, monkeypatch):
    server, commit = hub
    server.set_trusted("remote-org", False)
    exc = _refusal(hub_kernel, REMOTE, 1, hardware=CPU)
    assert [r["reason"] for r in exc.reasons] == ["publisher 'remote-org' is not a trusted kernel publisher"]
    server.set_trusted("remote-org", True)
    pkg = loader.load_package(REMOTE, 1, hardware=CPU)
    assert (pkg.source, pkg.revision, pkg.trust) == ("hub", commit, "trusted-publisher")
    assert pkg.module.scale(2, 3) == 6


def test_arch_is_checked_on_hub_downloads_before_import(monkeypatch, tmp_path):
    server, commit = start_hub(monkeypatch, tmp_path, archs=["8.0"])
    try:
        before = set(sys.modules)
        exc = _refusal(hub_kernel, REMOTE, 1, hardware=CPU)
        # the device class test-cpu, normalised (the device-class rule): test
        assert [r["reason"] for r in exc.reasons] == ["variant torch-cpu declares archs 8.0; device test is x86_64"]
        assert not [m for m in set(sys.modules) - before if m.startswith("_scale")]
    finally:
        server.stop()


def test_with_a_mirror_or_offline_no_connection_is_attempted(hub, tmp_path, monkeypatch):
    server, commit = hub
    lock = _hub_lock(tmp_path, server)
    full = tmp_path / "mirror"
    mirror_lock(lock, full, variants=["torch-cpu"])  # online: fills the mirror from the Hub
    server.stop()
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    wire = NetworkTripwire(monkeypatch)

    empty = tmp_path / "empty-mirror"
    empty.mkdir()
    exc = _refusal(loader.load_locked, lock, REMOTE, mirror=empty, hardware=CPU)
    assert exc.reasons[0]["reason"] == (
        f"build/torch-cpu/ at revision {commit} not found in mirror {empty}, cache {tmp_path / 'kcache'}, "
        f"cache {tmp_path / 'hfcache'}; the Hub was not asked: offline (a mirror is in use)")

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    exc = _refusal(loader.load_locked, lock, REMOTE, hardware=CPU)
    assert exc.reasons[0]["reason"].endswith("the Hub was not asked: offline (HF_HUB_OFFLINE)")
    exc = _refusal(hub_kernel, REMOTE, 1, hardware=CPU)  # no lockfile, offline, not trusted by the caller
    assert exc.reasons[0]["reason"] == "publisher 'remote-org' cannot be verified offline and no lockfile is in force"
    monkeypatch.delenv("HF_HUB_OFFLINE")

    loaded = loader.load_locked(lock, REMOTE, mirror=full, hardware=CPU)
    assert (loaded.source, loaded.revision) == ("mirror", commit)
    assert wire.attempts == []


# ---------------------------------------------------------------------------
# import cost


@pytest.mark.subprocess
def test_importing_frt_modules_imports_neither_torch_nor_kernels():
    code = ("import sys, frt_dist, frt_dist.loader, frt_dist.serve.load, frt_dist.distribution.mirror, frt_dist.loader.smoke, "
            "frt_dist.distribution.integrity; frt_dist.hub_kernel; frt_dist.load; "
            "print(sorted(m for m in ('torch', 'kernels', 'huggingface_hub') if m in sys.modules))")
    env = dict(os.environ, PYTHONPATH=str(SRC))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_symlink_targets_are_resolved_exactly_as_realpath_does(tmp_path, monkeypatch):
    """The integrity check resolves hub-cache style links from cached real directories;
    every other link shape must land exactly where ``os.path.realpath`` says."""
    from frt_dist.distribution.integrity import link_target, real_dir

    t = tmp_path
    (t / "a" / "b" / "c").mkdir(parents=True)
    (t / "blobs").mkdir()
    (t / "blobs" / "x").write_text("x")
    os.symlink(t / "blobs", t / "a" / "bl")
    links = {
        "hub": "../../../blobs/x", "via-dir-link": "../../bl/x", "to-a-link": "hub", "absolute": str(t / "blobs" / "x"),
        "escapes": "../" * 30 + "etc/passwd", "dotdot-after-name": "x/../../y", "dangling": "missing/file",
        "trailing-slash": "../../../blobs/", "dot": "./../../../blobs/x",
    }
    for name, target in links.items():
        os.symlink(target, t / "a" / "b" / "c" / name)
    os.symlink(t / "a", t / "root-link")
    shared: dict = {}  # one cache across trees, as a CheckBatch shares it across the packages of a load
    for base in (t / "a" / "b" / "c", t / "root-link" / "b" / "c"):
        cache: dict = {}
        for name in links:
            p = str(base / name)
            assert link_target(p, cache) == os.path.realpath(p), name
            assert link_target(p, shared) == os.path.realpath(p), name
    for d in (t / "root-link" / "b", t / "a" / "bl", t / "root-link" / "bl", t / "nowhere" / "x", t / "a" / "b" / ".." / "bl"):
        assert real_dir(d, shared) == real_dir(d, {}) == os.path.realpath(d), d
    monkeypatch.chdir(t)  # a relative path resolves from the working directory
    assert real_dir("root-link/b", {}) == os.path.realpath("root-link/b") == os.path.realpath(t / "a" / "b")


def test_a_digest_mismatch_hints_by_where_the_bytes_came_from(hub, tmp_path, monkeypatch):
    """The hint follows the cause. A damaged mirror or cache copy is refetched
    (never "who edited the lockfile"); a changed path package is restored or re-locked; only bytes
    the Hub serves at the locked commit that differ from the lock point at the lockfile."""
    from test_verify import Edit

    server, commit = hub
    lock = _hub_lock(tmp_path, server)
    rel = "scale/__init__.py"

    def hints() -> list[str]:
        loader._forget_all()
        got = _refusal(loader.load_locked, Lockfile.read(lock.path), REMOTE, hardware=CPU,
                       mirror=mirror if use_mirror else None)
        assert [(r["kind"], r["path"]) for r in got.reasons] == [("mismatched", f"build/torch-cpu/{rel}")]
        return got.hints

    mirror, use_mirror = tmp_path / "mirror", True
    mirror_lock(lock, mirror, variants=["torch-cpu"])
    mirrored = mirror / "kernels--remote-org--scale" / "snapshots" / commit / "build" / "torch-cpu" / rel
    mirrored.unlink()
    mirrored.write_text("def scale(x, w):\n    return x\n")
    assert hints() == [f"the mirror's copy is damaged or was altered: refill it with `frt mirror {mirror}` (it "
                       "fetches the locked files again and checks them); never edit files in a mirror"]

    use_mirror = False
    cached = Path(loader.load_locked(lock, REMOTE, hardware=CPU).location)  # downloaded into the cache
    (cached / rel).resolve().write_text("def scale(x, w):\n    return x\n")
    snap = tmp_path / "kcache" / "kernels--remote-org--scale" / "snapshots" / commit
    assert hints() == [f"the cached snapshot is damaged or was altered: remove it (`rm -r {snap}`) and load "
                       "again online to download it afresh"]

    monkeypatch.setenv("KERNELS_CACHE", str(tmp_path / "kcache2"))  # nothing cached: downloaded afresh
    e = Edit(Path(lock.path))
    e.doc["packages"][REMOTE]["variants"]["torch-cpu"]["files"][rel] = sha256_b64(b"what the editor wanted")
    e.save()
    assert hints() == [f"the Hub serves other files at {commit} than the lock's digests: the lockfile was "
                       "edited or damaged; find out who edited it, then re-lock with `frt lock`"]

    tp = tiny_project(tmp_path, "pathproj")
    lock = tp.lock()
    rel = "scale/__init__.py"
    (tp.root / "packages" / "scale" / "build" / "torch-cpu" / rel).write_text(SCALE_SRC + "# edited\n")
    loader._forget_all()
    got = _refusal(loader.load_locked, lock, SCALE, hardware=CPU)
    assert got.hints == [f"the path package {tp.root / 'packages' / 'scale'} is not what was locked: restore its "
                         "files, or re-lock with `frt lock` if you changed it on purpose"]
