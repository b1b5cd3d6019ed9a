"""``frt mirror`` / ``verify_mirror``: hub-cache layout, verification, resume, concurrency,
and plain `kernels` reading the mirror offline."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from frt_dist import KernelUnavailable, UsageError, loader
from frt_dist.distribution.hub import HubClient
from frt_dist.distribution.mirror import mirror_lock, verify_mirror
from helpers.factories import CPU, NORM_SRC, REMOTE, cuda_hw, hub_manifest, sha256_b64, start_hub, tiny_project
from helpers.paths import SRC

SCALE_DIR = "kernels--t-org--scale"
NORM_DIR = "kernels--t-org--norm"


pytestmark = pytest.mark.usefixtures("fresh_loader")  # conftest: no outside mirror, lock or offline setting


@pytest.fixture
def proj(tmp_path):
    tp = tiny_project(tmp_path)
    return tp, tp.lock()


def _clean_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HF_", "HUGGINGFACE_", "KERNELS_", "FRT_")) and k != "LOCAL_KERNELS"}
    env.update(PYTHONPATH=str(SRC), PYTHONDONTWRITEBYTECODE="1", **extra)
    return env


def _snapshot(mirror: Path, lock, repo: str) -> Path:
    pkg = lock.packages[repo]
    return mirror / loader.repo_folder(repo) / "snapshots" / pkg.snapshot / "build" / "torch-cpu"


def test_layout_is_a_hub_cache_with_one_blob_per_file(proj, tmp_path):
    tp, lock = proj
    mirror = tmp_path / "mirror"
    events = []
    report = mirror_lock(lock, mirror, hardware=CPU, progress=events.append)
    assert (report.fetched, report.present, report.linked, report.skipped) == (4, 0, 4, [])
    assert sorted((e["repo"], e["path"], e["action"]) for e in events) == [
        ("t-org/norm", "metadata.json", "fetched"), ("t-org/norm", "norm/__init__.py", "fetched"),
        ("t-org/scale", "metadata.json", "fetched"), ("t-org/scale", "scale/__init__.py", "fetched")]
    pkg = lock.packages["t-org/scale"]
    folder = mirror / SCALE_DIR
    assert pkg.snapshot == pkg.revision.removeprefix("sha256:")[:40]
    assert (folder / "refs" / "v1").read_text() == pkg.snapshot
    assert (folder / "refs" / "main").read_text() == pkg.snapshot
    src = tp.root / "packages" / "scale" / "build" / "torch-cpu"
    for rel in ("metadata.json", "scale/__init__.py"):
        entry = _snapshot(mirror, lock, "t-org/scale") / rel
        data = (src / rel).read_bytes()
        assert entry.is_symlink() and not os.path.isabs(os.readlink(entry))
        assert entry.resolve() == (folder / "blobs" / hashlib.sha256(data).hexdigest()).resolve()
        assert entry.read_bytes() == data
    assert sorted(p.name for p in (folder / "blobs").iterdir()) == sorted(
        hashlib.sha256((src / r).read_bytes()).hexdigest() for r in ("metadata.json", "scale/__init__.py"))
    assert not (mirror / ".frt-tmp").exists()
    assert verify_mirror(lock, mirror) == []


def test_verify_names_missing_unknown_and_mismatched_files(proj, tmp_path):
    _, lock = proj
    mirror = tmp_path / "mirror"
    mirror_lock(lock, mirror, variants=["torch-cpu"])
    scale, norm = _snapshot(mirror, lock, "t-org/scale"), _snapshot(mirror, lock, "t-org/norm")
    scale_files = lock.packages["t-org/scale"].variants["torch-cpu"].files
    norm_files = lock.packages["t-org/norm"].variants["torch-cpu"].files
    (scale / "scale" / "__init__.py").unlink()
    (scale / "scale" / "extra.py").write_bytes(b"evil = 1\n")
    blob = (norm / "norm" / "__init__.py").resolve()
    blob.write_bytes(b"tampered\n")
    (mirror / NORM_DIR / "refs" / "v1").write_text("0" * 40)
    s_prefix = f"{SCALE_DIR}/snapshots/{lock.packages['t-org/scale'].snapshot}/build/torch-cpu/"
    n_prefix = f"{NORM_DIR}/snapshots/{lock.packages['t-org/norm'].snapshot}/build/torch-cpu/"
    got = [(p["kind"], p["path"], p["expected"], p["computed"]) for p in verify_mirror(lock, mirror)]
    assert got == [
        ("mismatched", n_prefix + "norm/__init__.py", norm_files["norm/__init__.py"], sha256_b64(b"tampered\n")),
        ("mismatched", f"{NORM_DIR}/refs/v1", lock.packages["t-org/norm"].snapshot, "0" * 40),
        ("missing", s_prefix + "scale/__init__.py", scale_files["scale/__init__.py"], None),
        ("unknown", s_prefix + "scale/extra.py", None, sha256_b64(b"evil = 1\n")),
    ]


def test_rerun_resumes_and_repairs(proj, tmp_path):
    _, lock = proj
    mirror = tmp_path / "mirror"
    mirror_lock(lock, mirror, variants=["torch-cpu"])
    again = mirror_lock(lock, mirror, variants=["torch-cpu"])
    assert (again.fetched, again.present, again.linked) == (0, 4, 0)
    (_snapshot(mirror, lock, "t-org/norm") / "norm" / "__init__.py").resolve().write_bytes(b"bit rot\n")
    (_snapshot(mirror, lock, "t-org/scale") / "metadata.json").unlink()
    repaired = mirror_lock(lock, mirror, variants=["torch-cpu"])
    assert (repaired.fetched, repaired.present, repaired.linked) == (1, 3, 1)
    assert verify_mirror(lock, mirror) == []


def test_a_source_that_does_not_match_the_lock_never_becomes_a_blob(proj, tmp_path):
    tp, lock = proj
    src = tp.root / "packages" / "scale" / "build" / "torch-cpu" / "scale" / "__init__.py"
    src.write_text("def scale(x, w):\n    return x\n")
    mirror = tmp_path / "mirror"
    with pytest.raises(KernelUnavailable) as ei:
        mirror_lock(lock, mirror, variants=["torch-cpu"])
    want = lock.packages["t-org/scale"].variants["torch-cpu"].files["scale/__init__.py"]
    got = sha256_b64(src.read_bytes())
    assert ei.value.reasons == [{
        "package": "t-org/scale", "revision": lock.packages["t-org/scale"].revision, "variant": "torch-cpu",
        "kind": "mismatched", "path": "build/torch-cpu/scale/__init__.py", "expected": want, "computed": got,
        "reason": f"t-org/scale build/torch-cpu/scale/__init__.py: source bytes do not match the lock "
                  f"(expected {want}, computed {got})"}]
    blobs = {p.name for p in (mirror / SCALE_DIR / "blobs").iterdir()}
    assert hashlib.sha256(src.read_bytes()).hexdigest() not in blobs and len(blobs) == 1
    assert not (mirror / ".frt-tmp").exists() or not any((mirror / ".frt-tmp").iterdir())
    # the rest was mirrored; the incomplete package gets no ref (a ref is what makes a snapshot visible)
    assert [(p["kind"], p["path"].split("/")[-1]) for p in verify_mirror(lock, mirror)] == [
        ("missing", "__init__.py"), ("missing", "v1")]
    assert not (mirror / SCALE_DIR / "refs").exists() and (mirror / NORM_DIR / "refs" / "v1").is_file()


def test_selection_of_variants(tmp_path):
    pkgs = {"scale": {"name": "scale"}, "norm": {"name": "norm", "source": NORM_SRC}}
    tp = tiny_project(tmp_path, packages=pkgs)
    from helpers.factories import write_package

    write_package(tp.root / "packages" / "scale", "scale", variant="torch-cuda", backend="cuda", archs=["9.0"])
    lock = tp.lock()
    with pytest.raises(UsageError) as ei:
        mirror_lock(lock, tmp_path / "m0", variants=["torch-rocm"])
    assert str(ei.value) == "--variant: torch-rocm is not a locked variant (locked: torch-cpu, torch-cuda)"
    report = mirror_lock(lock, tmp_path / "m1", hardware=cuda_hw("9.0"))
    assert [(p["repo"], p["variants"]) for p in report.packages] == [("t-org/scale", ["torch-cuda"])]
    assert report.skipped == [{"repo": "t-org/norm", "reason": "no locked variant runs on h100 (cuda 9.0)"}]
    report = mirror_lock(lock, tmp_path / "m2", all_variants=True)
    assert [(p["repo"], p["variants"]) for p in report.packages] == [
        ("t-org/norm", ["torch-cpu"]), ("t-org/scale", ["torch-cpu", "torch-cuda"])]
    assert verify_mirror(lock, tmp_path / "m2") == []  # default: the variants the mirror holds
    assert verify_mirror(lock, tmp_path / "m2", all_variants=True) == []


_WORKER = """
import json, os, sys, time
from frt_dist.distribution.mirror import mirror_lock
print("ready", flush=True)
while not os.path.exists(sys.argv[3]):  # every worker imported: all start at once, on an empty mirror
    time.sleep(0.005)
r = mirror_lock(sys.argv[1], sys.argv[2], variants=["torch-cpu"])
print(json.dumps(r.to_dict()))
"""


@pytest.mark.subprocess
def test_concurrent_runs_fetch_each_blob_once(proj, tmp_path):
    _, lock = proj
    mirror, go = tmp_path / "mirror", tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", _WORKER, lock.path, str(mirror), str(go)], env=_clean_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(4)]
    assert [p.stdout.readline().strip() for p in procs] == ["ready"] * 4
    go.write_bytes(b"")
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], [err for _, err in outs]  # no FileExistsError (item 11)
    reports = [json.loads(out) for out, _ in outs]
    assert sum(r["fetched"] for r in reports) == 4
    assert all(r["fetched"] + r["present"] == 4 for r in reports)
    assert verify_mirror(lock, mirror) == []


_KERNELS = """
import kernels, torch
m = kernels.get_kernel("t-org/scale", version=1, backend="cpu")  # the mirrored variant, whatever GPU is here
print(m.__name__, m.scale(torch.ones(2), torch.full((2,), 3.0)).tolist())
"""


@pytest.mark.subprocess
def test_plain_kernels_loads_from_the_mirror_offline(proj, tmp_path):
    _, lock = proj
    mirror = tmp_path / "mirror"
    mirror_lock(lock, mirror, variants=["torch-cpu"])
    env = _clean_env(HF_HUB_OFFLINE="1", KERNELS_CACHE=str(mirror), HF_HOME=str(tmp_path / "hf-home"),
                     HF_ENDPOINT="http://127.0.0.1:9")
    out = subprocess.run([sys.executable, "-c", _KERNELS], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[0] == "_frt_test_scale_v1 [3.0, 3.0]"
    assert verify_mirror(lock, mirror) == []  # kernels wrote nothing into the snapshot


def test_hub_packages_are_downloaded_at_the_locked_commit_once(monkeypatch, tmp_path):
    server, commit = start_hub(monkeypatch, tmp_path)
    try:
        tp = tiny_project(tmp_path, "hubproj", manifest=hub_manifest())
        tp.hub = HubClient(endpoint=server.url)
        lock = tp.lock()
        server.commit(REMOTE, {"README.md": b"moved on\n"}, branch="v1")  # v1 moves; the lock does not
        server.reset_counts()
        mirror = tmp_path / "mirror"
        report = mirror_lock(lock, mirror, variants=["torch-cpu"])
        assert report.fetched == 4
        gets = [p for m, p in server.requests if m == "GET" and "/resolve/" in p]
        assert sorted(gets) == sorted(f"/kernels/{REMOTE}/resolve/{commit}/build/torch-cpu/{rel}"
                                      for rel in ("metadata.json", "scale/__init__.py"))
        assert (mirror / "kernels--remote-org--scale" / "refs" / "v1").read_text() == commit
        assert verify_mirror(lock, mirror) == []
        server.reset_counts()
        assert mirror_lock(lock, mirror, variants=["torch-cpu"]).fetched == 0
        assert server.request_count(REMOTE) == 0
    finally:
        server.stop()


def _mirror_only(tp, lock, tmp_path, monkeypatch) -> Path:
    """A mirror of the lock with the path sources moved away and the process offline."""
    mirror = tmp_path / "m"
    mirror_lock(lock, mirror, variants=["torch-cpu"])
    (tp.root / "packages").rename(tp.root / "packages.away")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return mirror


def test_a_truncated_blob_is_refused_before_import(proj, tmp_path, monkeypatch):
    tp, lock = proj
    mirror = _mirror_only(tp, lock, tmp_path, monkeypatch)
    target = (_snapshot(mirror, lock, "t-org/scale") / "scale" / "__init__.py").resolve()  # the blob
    data = target.read_bytes()
    target.write_bytes(data[: len(data) // 2])
    before = set(sys.modules)
    with pytest.raises(KernelUnavailable) as ei:
        loader.load_locked(lock, "t-org/scale", mirror=mirror, hardware=CPU)
    assert set(sys.modules) == before
    [r] = [r for r in ei.value.reasons if r.get("kind") == "mismatched"]
    assert r["path"] == "build/torch-cpu/scale/__init__.py"
    assert r["expected"] == lock.packages["t-org/scale"].variants["torch-cpu"].files["scale/__init__.py"]
    assert r["computed"] == sha256_b64(data[: len(data) // 2])
    problems = verify_mirror(lock, mirror, variants=["torch-cpu"])
    assert [(p["kind"], p["path"].endswith("scale/__init__.py")) for p in problems] == [("mismatched", True)]


def test_a_mirror_missing_the_variant_is_refused_offline(proj, tmp_path, monkeypatch):
    tp, lock = proj
    mirror = _mirror_only(tp, lock, tmp_path, monkeypatch)
    import shutil

    shutil.rmtree(_snapshot(mirror, lock, "t-org/norm"))  # the variant directory is gone
    before = set(sys.modules)
    with pytest.raises(KernelUnavailable) as ei:
        loader.load_locked(lock, "t-org/norm", mirror=mirror, hardware=CPU)
    assert set(sys.modules) == before
    text = str(ei.value)
    assert text.startswith("package 't-org/norm' is unavailable: build/torch-cpu/ at revision sha256:")
    assert f"not found in mirror {mirror}" in text
    assert any(p["kind"] == "missing" for p in verify_mirror(lock, mirror, variants=["torch-cpu"]))
