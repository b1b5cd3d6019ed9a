"""``frt mirror``'s order and races: a package's refs are written only after every blob and
snapshot entry they make visible, and a folder a concurrent run creates or
removes between this run's check and its use is not a crash (item 11: ``FileExistsError``
creating ``.locks/<repo>``)."""

from __future__ import annotations

import errno
import os
import sys
from pathlib import Path

import pytest

from frt_dist.base import safedir
from frt_dist.distribution import mirror as mirror_mod
from frt_dist.distribution.mirror import LOCKS, TMP, mirror_lock, verify_mirror
from frt_dist.loader import repo_folder
from helpers.factories import tiny_project

pytestmark = [pytest.mark.skipif(sys.platform == "win32", reason="POSIX dir_fd"),
              pytest.mark.usefixtures("fresh_loader")]


@pytest.fixture
def proj(tmp_path):
    tp = tiny_project(tmp_path)
    return tp, tp.lock()


def _refs_point_at_complete_snapshots(lock, mirror: Path) -> list[str]:
    """Every ref in the mirror whose package's snapshot is not complete (as verify sees it)."""
    bad = []
    problems = verify_mirror(lock, mirror, variants=["torch-cpu"]) if mirror.exists() else []
    for repo, pkg in lock.packages.items():
        folder = repo_folder(repo)
        refs = mirror / folder / "refs"
        if not refs.is_dir():
            continue
        snap = f"{folder}/snapshots/{pkg.snapshot}/"
        missing = [p["path"] for p in problems if p["path"].startswith(snap)]
        if missing:
            bad.append(f"{folder}/refs: {sorted(r.name for r in refs.iterdir())} while {missing} not in place")
    return bad


def test_refs_are_written_after_every_file_they_make_visible(proj, tmp_path):
    """At every step of a run (each file event), no ref points at a snapshot that is not complete."""
    _, lock = proj
    mirror = tmp_path / "mirror"
    seen = []

    def watch(event):
        seen.append(event["path"])
        assert _refs_point_at_complete_snapshots(lock, mirror) == [], seen

    mirror_lock(lock, mirror, variants=["torch-cpu"], progress=watch)
    assert len(seen) == 4
    for repo in lock.packages:
        assert (mirror / repo_folder(repo) / "refs" / "v1").is_file()
    assert verify_mirror(lock, mirror, variants=["torch-cpu"]) == []


def test_a_run_stopped_before_its_last_entry_leaves_no_ref(proj, tmp_path, monkeypatch):
    """Interrupted between the last blob and its snapshot entry: that package has no ref; the blobs
    are kept and the next run completes it."""
    _, lock = proj
    mirror = tmp_path / "mirror"
    real_link = mirror_mod.MirrorRun.link

    def link(self, pkg, item, blob, folder, blobs):
        if pkg.repo == "t-org/scale" and item.rel == "scale/__init__.py":
            raise KeyboardInterrupt
        return real_link(self, pkg, item, blob, folder, blobs)

    monkeypatch.setattr(mirror_mod.MirrorRun, "link", link)
    with pytest.raises(KeyboardInterrupt):
        mirror_lock(lock, mirror, variants=["torch-cpu"])
    assert not (mirror / repo_folder("t-org/scale") / "refs").exists()
    assert _refs_point_at_complete_snapshots(lock, mirror) == []
    assert len(list((mirror / repo_folder("t-org/scale") / "blobs").iterdir())) == 2  # kept for the next run
    assert not (mirror / TMP).exists()
    monkeypatch.setattr(mirror_mod.MirrorRun, "link", real_link)
    again = mirror_lock(lock, mirror, variants=["torch-cpu"])
    assert (again.fetched, again.present) == (0, 4)
    assert verify_mirror(lock, mirror, variants=["torch-cpu"]) == []


def _fd_path(fd: int) -> str:
    return os.readlink(f"/proc/self/fd/{fd}")


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="names a folder descriptor through /proc")
def test_a_folder_made_and_removed_by_a_concurrent_run_between_mkdir_and_open_is_made_again(
        proj, tmp_path, monkeypatch):
    """The race of item 11, made certain: for every folder the run makes, a concurrent run made it
    first (this run's mkdir finds it) and a concurrent sweep removed it (left empty) before this run
    opened it."""
    _, lock = proj
    mirror = tmp_path / "mirror"
    real_mkdir = os.mkdir
    raced = []

    def mkdir(path, mode=0o777, *, dir_fd=None):
        if dir_fd is not None and (str(path), _fd_path(dir_fd)) not in raced:  # once per folder
            raced.append((str(path), _fd_path(dir_fd)))
            real_mkdir(path, mode, dir_fd=dir_fd)  # the other run makes it ...
            os.rmdir(path, dir_fd=dir_fd)  # ... and its sweep removes it, empty
            raise FileExistsError(errno.EEXIST, "File exists", str(path))
        return real_mkdir(path, mode, dir_fd=dir_fd)

    monkeypatch.setattr(os, "mkdir", mkdir)
    report = mirror_lock(lock, mirror, variants=["torch-cpu"])
    monkeypatch.undo()
    assert report.fetched == 4
    scale = mirror / repo_folder("t-org/scale")
    for folder in (mirror / LOCKS, mirror / LOCKS / "frt-runs", mirror / LOCKS / scale.name,  # the report's
                   mirror / TMP, scale, scale / "blobs", scale / "refs", scale / "snapshots"):
        assert (folder.name, str(folder.parent)) in raced
    assert verify_mirror(lock, mirror, variants=["torch-cpu"]) == []


def test_a_lock_folder_removed_between_its_open_and_the_lock_files_creation_is_made_again(
        proj, tmp_path, monkeypatch):
    _, lock = proj
    mirror = tmp_path / "mirror"
    real_lock = safedir.SafeDir.lock
    removed = []

    def lock_(self, name, **kw):
        if self.path not in removed and not os.listdir(self.path):
            removed.append(self.path)
            os.rmdir(self.path)  # a concurrent sweep: the folder was empty
        return real_lock(self, name, **kw)

    monkeypatch.setattr(safedir.SafeDir, "lock", lock_)
    report = mirror_lock(lock, mirror, variants=["torch-cpu"])
    monkeypatch.undo()
    assert report.fetched == 4
    assert str(mirror / LOCKS / repo_folder("t-org/scale")) in removed
    assert verify_mirror(lock, mirror, variants=["torch-cpu"]) == []
