"""A mirror's housekeeping: the locks and temp folders of its runs, and what a killed run left
behind. Every name below the mirror root goes through ``SafeDir`` (``frt_dist.base.safedir``): no
link inside a mirror is ever followed.

Every run writes its temp files only under its own folder ``.frt-tmp/<run>/``, and holds the lock
``.locks/frt-runs/<run>.lock`` from before that folder exists until after it is gone; the
operating system drops the lock (``flock``) when the process dies, even by SIGKILL. So ownership,
not age, decides what is stale: at its start and at its end a run removes every ``.frt-tmp/<run>/``
whose run lock it can take at once (its owner is dead), and leaves alone the folder of a run still
holding its lock. Loose entries directly under ``.frt-tmp/`` (an earlier frt's layout, with no
owner to ask) are removed once nothing in them changed for ``STALE_S`` seconds. At its end a run
also deletes every lock file under ``.locks/`` it can take at once (each deleted while held, so
nobody holds a deleted lock without knowing), then the folders left empty; a lock another run
holds stays. A run that waited for a lock re-checks, once it holds it, that the file still carries
the name (not deleted meanwhile) and otherwise takes it again; a folder a concurrent sweep removed
between its making and its use is made again. The locks are ``flock`` locks, the same that
``filelock`` takes on POSIX, so older frt versions on one DIR agree.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import tempfile
import time
import uuid

from ..base.safedir import SafeDir, WriteError

__all__ = ["RunClaim", "lock_in", "staging_prefix", "sweep_temp", "sweep_locks", "TMP", "LOCKS", "RUNS", "STALE_S"]

TMP = ".frt-tmp"
LOCKS = ".locks"
RUNS = "frt-runs"  # under LOCKS: one lock per live run
STALE_S = 3600.0  # loose temp entries (no owning run) untouched this long are removed
_RUN_ID = re.compile(r"^run-[0-9]+-[0-9a-f]{12}$")


def lock_in(root: SafeDir, folders: tuple[str, ...], name: str, *, blocking: bool = True):
    """The lock ``folders/name`` under ``root`` (folders made); made again if a concurrent
    cleanup removed a folder (left empty) between its open and the making of the folder or the
    lock file in it."""
    for _ in range(50):
        try:
            folder = root.walk(*folders, create=True)
        except WriteError as exc:  # a sweep removed a folder we had opened before we made the next one in it
            if exc.errno == errno.ENOENT:
                continue
            raise
        try:
            lock = folder.lock(name, blocking=blocking, own=True)
        except WriteError as exc:
            folder.close()
            if exc.errno == errno.ENOENT:
                continue
            raise
        except BaseException:
            folder.close()
            raise
        if lock is None:
            folder.close()
        return lock
    raise WriteError(errno.EAGAIN, "its folder keeps disappearing", f"{root.path}/{'/'.join((*folders, name))}")


class RunClaim:
    """One run's claim on its temp folder ``.frt-tmp/<run>/``: the run lock is taken
    before the folder exists and let go after it is gone."""

    def __init__(self, root: SafeDir):
        self.root = root
        self.id = f"run-{os.getpid()}-{uuid.uuid4().hex[:12]}"
        self.lock = lock_in(root, (LOCKS, RUNS), f"{self.id}.lock")
        try:
            for _ in range(50):
                try:
                    with root.child(TMP, create=True) as tmp_root:
                        self.tmp = tmp_root.child(self.id, create=True)
                    break
                except WriteError as exc:  # a run ending removed TMP (empty) between its open and our mkdir
                    if exc.errno != errno.ENOENT:
                        raise
            else:
                raise WriteError(errno.EAGAIN, "its folder keeps disappearing", f"{root.path}/{TMP}/{self.id}")
        except BaseException:
            self.lock.release(delete=True)
            raise

    def close(self) -> None:
        self.tmp.close()
        try:
            tmp_root = self.root.child(TMP)
        except OSError:  # swapped for a link: nothing of ours to remove through it
            tmp_root = None
        if tmp_root is not None:
            with tmp_root:
                tmp_root.rmtree(self.id)
        self.lock.release(delete=True)


def _newest_mtime(folder: SafeDir, name: str) -> float:
    st = folder.lstat(name)
    if st is None:
        raise FileNotFoundError(name)
    newest = st.st_mtime
    sub = folder.child(name) if stat.S_ISDIR(st.st_mode) else None
    if sub is not None:
        with sub:
            for n in sub.listdir():
                try:
                    newest = max(newest, _newest_mtime(sub, n))
                except OSError:
                    pass
    return newest


def staging_prefix(run_id: str) -> str:
    return f"frt-mirror-{run_id}-"


def _sweep_staging(run_id: str) -> None:
    """Remove the Hub download staging folders a dead run left in the system temp folder (this
    user's real folders named for that run; links and others' entries are left alone)."""
    where = tempfile.gettempdir()
    try:
        names = [n for n in os.listdir(where) if n.startswith(staging_prefix(run_id))]
    except OSError:
        return
    if not names:
        return
    try:
        with SafeDir.root(where) as temp:
            for n in names:
                st = temp.lstat(n)
                if st is not None and stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid():
                    temp.rmtree(n)
    except OSError:
        pass


def _opened(dest) -> SafeDir | None:
    try:
        return dest if isinstance(dest, SafeDir) else SafeDir.root(dest)
    except OSError:
        return None


def sweep_temp(dest, *, keep: str | None = None, now: float | None = None) -> int:
    """Remove what dead runs left under ``DIR/.frt-tmp``; return how many entries went.

    A run folder goes when its run lock can be taken at once (its owner is gone);
    a loose entry (no owner) when nothing in it changed for ``STALE_S`` seconds.
    ``dest`` is the mirror's path or its open ``SafeDir``; a ``.frt-tmp`` that is a link is left alone.
    """
    root = _opened(dest)
    if root is None:
        return 0
    try:
        tmp = root.child(TMP)
    except OSError:
        tmp = None
    if tmp is None:
        if root is not dest:
            root.close()
        return 0
    now = time.time() if now is None else now
    removed = 0
    try:
        for name in tmp.listdir():
            if name == keep:
                continue
            if _RUN_ID.match(name):
                try:
                    lock = lock_in(root, (LOCKS, RUNS), f"{name}.lock", blocking=False)
                except OSError:
                    continue
                if lock is None:  # a live run's folder
                    continue
                try:
                    tmp.rmtree(name)
                    _sweep_staging(name)
                finally:
                    lock.release(delete=True)  # while held: see the module docstring
                removed += 1
            else:
                try:
                    if now - _newest_mtime(tmp, name) < STALE_S:
                        continue
                except OSError:
                    continue
                tmp.rmtree(name)
                removed += 1
    finally:
        tmp.close()
        if root is not dest:
            root.close()
    return removed


def sweep_locks(dest) -> int:
    """Delete every lock file under ``DIR/.locks`` that nobody holds (each while holding
    it), then the folders left empty; return how many lock files went. Links are never
    followed (nor removed); a ``.locks`` that is a link is left alone."""
    root = _opened(dest)
    if root is None:
        return 0
    try:
        locks = root.child(LOCKS)
    except OSError:
        locks = None
    try:
        if locks is None:
            return 0
        with locks:
            removed = _sweep_lock_folder(locks)
        root.rmdir(LOCKS)  # only when empty
        return removed
    finally:
        if root is not dest:
            root.close()


def _sweep_lock_folder(folder: SafeDir) -> int:
    removed = 0
    for name in folder.listdir():
        st = folder.lstat(name)
        if st is None:
            continue
        if stat.S_ISDIR(st.st_mode):
            try:
                sub = folder.child(name)
            except OSError:
                continue
            if sub is not None:
                with sub:
                    removed += _sweep_lock_folder(sub)
                folder.rmdir(name)  # only when empty
        elif stat.S_ISREG(st.st_mode) and name.endswith(".lock"):
            try:
                lock = folder.lock(name, blocking=False)
            except OSError:
                continue
            if lock is not None:
                lock.release(delete=True)
                removed += 1
    return removed
