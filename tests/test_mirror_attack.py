"""What a mirror contains cannot make ``frt mirror`` write, read through or delete outside it:
a folder inside the mirror that is a symbolic link is refused (exit 2, the
path named) before anything goes through it, a file that is a link is replaced (the link, never
its target), and housekeeping never follows a link. The mirror root itself may be a link (the
user chose it)."""

from __future__ import annotations

import hashlib
import os
import sys
import time
from pathlib import Path

import pytest

from frt_dist.distribution.mirror import LOCKS, RUNS, STALE_S, TMP, verify_mirror
from frt_dist.loader import repo_folder
from helpers.factories import tiny_project
from helpers.frt import frt_main

pytestmark = [pytest.mark.skipif(sys.platform == "win32", reason="POSIX links and dir_fd"),
              pytest.mark.usefixtures("fresh_loader")]

SCALE = repo_folder("t-org/scale")
DEAD_RUN = "run-999999-0123456789ab"  # a run folder name whose run lock nobody holds


@pytest.fixture
def proj(tmp_path):
    tp = tiny_project(tmp_path)
    return tp, tp.lock()


def _frt(capsys, tp, mirror: Path, *extra):
    """``frt mirror`` of the project's torch-cpu variants into ``mirror``: (exit code, stdout, stderr)."""
    return frt_main("mirror", str(mirror), "--project", str(tp.root), "--variant", "torch-cpu", *extra)


def _tree(root: Path) -> dict:
    """Every entry under ``root`` (links not followed): name -> bytes, link target or 'dir', and mtime."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for n in dirs + files:
            p = Path(dirpath) / n
            st = p.lstat()
            kind = ("link:" + os.readlink(p)) if p.is_symlink() else ("dir" if p.is_dir() else p.read_bytes())
            out[str(p.relative_to(root))] = (kind, st.st_mtime_ns if not p.is_dir() else None)
    return out


def _victim(tmp_path: Path) -> Path:
    """An outside folder holding what the sweeps and writers would touch if they followed a link."""
    v = tmp_path / "victim"
    (v / DEAD_RUN).mkdir(parents=True)
    (v / DEAD_RUN / "blob-1").write_bytes(b"precious 1\n")  # looks like a dead run's temp folder
    (v / "blob-old").write_bytes(b"precious 2\n")  # looks like a stale loose temp entry
    old = time.time() - STALE_S - 100
    os.utime(v / "blob-old", (old, old))
    (v / "kernels--x--y").mkdir()
    (v / "kernels--x--y" / "abc.lock").write_bytes(b"precious 3\n")  # looks like a free lock file
    (v / RUNS).mkdir()
    (v / RUNS / f"{DEAD_RUN}.lock").write_bytes(b"precious 4\n")
    (v / "v1").write_bytes(b"precious 5\n")  # where refs/v1 would go
    return v


def _snapshot_parts(lock) -> list[str]:
    return [SCALE, "snapshots", lock.packages["t-org/scale"].snapshot]


# every folder of the layout, as a link to the outside folder
FOLDERS = {
    ".frt-tmp": lambda lock: [TMP],
    ".locks": lambda lock: [LOCKS],
    ".locks/frt-runs": lambda lock: [LOCKS, RUNS],
    ".locks/<repo>": lambda lock: [LOCKS, SCALE],
    "package folder": lambda lock: [SCALE],
    "refs": lambda lock: [SCALE, "refs"],
    "blobs": lambda lock: [SCALE, "blobs"],
    "snapshots": lambda lock: [SCALE, "snapshots"],
    "snapshot folder": lambda lock: _snapshot_parts(lock),
    "build/<variant>": lambda lock: [*_snapshot_parts(lock), "build", "torch-cpu"],
}


@pytest.mark.parametrize("where", list(FOLDERS))
def test_a_folder_inside_the_mirror_that_is_a_link_is_refused_and_nothing_outside_changes(
        where, proj, tmp_path, capsys):
    tp, lock = proj
    victim = _victim(tmp_path)
    before = _tree(victim)
    mirror = tmp_path / "mirror"
    parts = FOLDERS[where](lock)
    link = mirror.joinpath(*parts)
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(victim, target_is_directory=True)
    rc, out, err = _frt(capsys, tp, mirror)
    assert _tree(victim) == before  # nothing written, read-modified or deleted there
    assert rc == 2, err
    assert err.splitlines()[0] == (f"error: mirror {mirror}: {link} is a symbolic link (to {victim}); "
                                   "frt does not follow links inside a mirror")
    assert f"hint: remove it (`rm {link}`; only the link goes)" in err
    assert "Traceback" not in err
    assert link.is_symlink() and os.readlink(link) == str(victim)  # the link itself is left for the user
    # the refused run cleaned up after itself (its run lock, its temp folder)
    assert not (mirror / TMP).exists() or where == ".frt-tmp"
    assert not (mirror / LOCKS).exists() or where.startswith(".locks")
    # once the link is gone, the same command fills the mirror
    link.unlink()
    rc, _, err = _frt(capsys, tp, mirror)
    assert rc == 0, err
    assert verify_mirror(lock, mirror, variants=["torch-cpu"]) == []
    assert _tree(victim) == before


def test_a_folder_that_is_a_file_is_refused(proj, tmp_path, capsys):
    tp, lock = proj
    mirror = tmp_path / "mirror"
    (mirror / SCALE).mkdir(parents=True)
    (mirror / SCALE / "blobs").write_bytes(b"not a folder\n")
    rc, _, err = _frt(capsys, tp, mirror)
    assert rc == 2
    assert err.splitlines()[0] == f"error: mirror {mirror}: {mirror / SCALE / 'blobs'} is not a directory"


def _outside_file(tmp_path: Path, data: bytes) -> Path:
    f = tmp_path / "outside" / hashlib.sha256(data).hexdigest()[:8]
    f.parent.mkdir(exist_ok=True)
    f.write_bytes(data)
    return f


def _blob_of(tp, rel: str) -> str:
    return hashlib.sha256((tp.root / "packages" / "scale" / "build" / "torch-cpu" / rel).read_bytes()).hexdigest()


def test_files_inside_the_mirror_that_are_links_are_replaced_never_followed(proj, tmp_path, capsys):
    """A blob, a ref, a snapshot entry, a lock file and temp entries that are links to outside files
    or folders: frt replaces or removes the link; every outside file keeps its bytes and time."""
    tp, lock = proj
    mirror = tmp_path / "mirror"
    pkg = lock.packages["t-org/scale"]
    meta_blob, init_blob = _blob_of(tp, "metadata.json"), _blob_of(tp, "scale/__init__.py")
    same = _outside_file(tmp_path, (tp.root / "packages/scale/build/torch-cpu/scale/__init__.py").read_bytes())
    other = _outside_file(tmp_path, b"outside bytes\n")
    ref_target = _outside_file(tmp_path, pkg.snapshot.encode())  # even the right text: still a link
    lock_target = _outside_file(tmp_path, b"a file a lock would truncate\n")
    victim = _victim(tmp_path)
    links = {
        mirror / SCALE / "blobs" / init_blob: same,  # the right bytes, but outside: not "present"
        mirror / SCALE / "blobs" / meta_blob: other,
        mirror / SCALE / "refs" / "v1": ref_target,
        mirror / SCALE / "refs" / "main": ref_target,  # refs/main is only written when absent: left alone
        mirror.joinpath(*_snapshot_parts(lock), "build", "torch-cpu", "metadata.json"): other,
        mirror / LOCKS / SCALE / f"{init_blob}.lock": lock_target,
        mirror / LOCKS / RUNS / "run-1-000000000000.lock": lock_target,  # a link sweep_locks must not follow
        mirror / TMP / DEAD_RUN: victim / DEAD_RUN,  # a "dead run folder" that is a link
        mirror / TMP / "blob-loose": victim,  # a loose temp entry that is a link (aged below)
    }
    for link, target in links.items():
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(target)
    old = time.time() - STALE_S - 100
    os.utime(mirror / TMP / "blob-loose", (old, old), follow_symlinks=False)
    outside = {p: _tree(p) if p.is_dir() else (p.read_bytes(), p.stat().st_mtime_ns)
               for p in (same, other, ref_target, lock_target, victim)}

    rc, _, err = _frt(capsys, tp, mirror)
    assert rc == 0, err
    for p, was in outside.items():
        assert (_tree(p) if p.is_dir() else (p.read_bytes(), p.stat().st_mtime_ns)) == was, p
    blobs = mirror / SCALE / "blobs"
    assert not (blobs / init_blob).is_symlink() and not (blobs / meta_blob).is_symlink()
    assert not (mirror / SCALE / "refs" / "v1").is_symlink()
    assert (mirror / SCALE / "refs" / "v1").read_text() == pkg.snapshot
    entry = mirror.joinpath(*_snapshot_parts(lock), "build", "torch-cpu", "metadata.json")
    assert os.readlink(entry) == f"../../../../blobs/{meta_blob}"
    assert not (mirror / TMP).exists()  # both temp links removed (the links, not their targets)
    assert verify_mirror(lock, mirror, variants=["torch-cpu"]) == []


def test_the_mirror_root_may_be_a_link_the_user_chose(proj, tmp_path, capsys):
    tp, lock = proj
    real = tmp_path / "real-mirror"
    real.mkdir()
    mirror = tmp_path / "mirror-link"
    mirror.symlink_to(real, target_is_directory=True)
    rc, _, err = _frt(capsys, tp, mirror)
    assert rc == 0, err
    assert (real / SCALE / "refs" / "v1").is_file()
    assert verify_mirror(lock, real, variants=["torch-cpu"]) == []


def test_a_mirror_root_that_is_a_dangling_link_is_an_error_naming_it(proj, tmp_path, capsys):
    tp, _ = proj
    mirror = tmp_path / "mirror-link"
    mirror.symlink_to(tmp_path / "nowhere", target_is_directory=True)
    rc, _, err = _frt(capsys, tp, mirror)
    assert rc == 2
    assert err.splitlines()[0] == f"error: mirror {mirror}: cannot write {mirror}: No such file or directory"
    assert not (tmp_path / "nowhere").exists()
