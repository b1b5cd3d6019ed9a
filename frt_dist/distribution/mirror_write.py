"""Writing a mirror folder: one run of ``frt mirror DIR`` (``mirror_lock`` drives it).

Each blob is taken from where ``frt_dist.distribution.sources`` says a locked file's bytes come
from (or from an object store, ``frt mirror DIR --from URL``), hashed as it is copied into the
run's temp folder, and renamed into ``blobs/<sha256>`` only when its digest is the lock's; a blob
already present and verified is not fetched again; a lock per blob makes concurrent runs fetch it
once. Snapshot entries are relative links into ``blobs/`` (copies where links are unavailable);
a package's refs are written last, and only when every file of it is in place.
"""

from __future__ import annotations

import errno
import hashlib
import shlex
import shutil
import threading
import uuid
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from ..base.safedir import SafeDir, UnsafePath, WriteError
from ..errors import FrtError, MirrorUnsafe, MirrorUnwritable
from .mirror_housekeeping import LOCKS, lock_in, staging_prefix
from .sources import (
    HashingWriter,
    LockedFile,
    Unsupplied,
    hash_copy,
    is_offline,
    locate_file,
    locked_files,
    repo_folder,
)

__all__ = ["MirrorReport", "MirrorRun", "drop_if_empty", "mirror_errors"]

_CHUNK = 1 << 20


@dataclass
class MirrorReport:
    """What one ``mirror_lock`` run did."""

    dir: str
    packages: list[dict] = field(default_factory=list)  # {"repo", "revision", "snapshot", "variants"}
    fetched: int = 0  # blobs this run copied or downloaded
    present: int = 0  # blobs already there and verified
    linked: int = 0  # snapshot entries (re)created
    bytes: int = 0  # bytes this run wrote to blobs/
    skipped: list[dict] = field(default_factory=list)  # {"repo", "reason"}
    cleaned: dict = field(default_factory=lambda: {"temp": 0, "locks": 0})  # stale entries this run removed

    def to_dict(self) -> dict:
        return {"dir": self.dir, "packages": self.packages, "fetched": self.fetched, "present": self.present,
                "linked": self.linked, "bytes": self.bytes, "skipped": self.skipped, "cleaned": dict(self.cleaned)}


def _blob_ok(blobs: SafeDir, name: str, item: LockedFile) -> bool:
    """Whether ``blobs/name`` is a regular file (not a link) whose bytes have the locked digest."""
    f = blobs.open_read(name)
    if f is None:
        return False
    sink = HashingWriter(item.algorithm)
    try:
        with f:
            while chunk := f.read(_CHUNK):
                sink.write(chunk)
    except OSError:
        return False
    return item.computed(sink.hashes) == item.expected


class MirrorRun:
    """One run of ``mirror_lock`` over one directory (opened once: ``root``)."""

    def __init__(self, lock, root: SafeDir, project_root: Path, progress: Callable | None, tmp: SafeDir):
        self.lock, self.root, self.project_root = lock, root, project_root
        self.progress = progress or (lambda event: None)
        self.report = MirrorReport(root.path if root is not None else "")
        self.problems: list[dict] = []
        self.tmp = tmp
        self.run_id = "run"
        self.offline = is_offline()
        self.store = None  # an ObjectStore to sync from (``frt mirror DIR --from URL``), else the usual sources
        self._count = threading.Lock()

    # -- sources (outside the mirror): frt_dist.distribution.sources --------------
    def _source(self, pkg, item: LockedFile) -> tuple[Path, str | None]:
        return locate_file(pkg, item, project_root=self.project_root, offline=self.offline,
                           staging_prefix=staging_prefix(self.run_id))

    # -- blobs and links ------------------------------------------------------
    def _lock_name(self, item: LockedFile) -> str:
        key = item.blob or hashlib.sha256(f"{item.algorithm}:{item.expected}".encode()).hexdigest()
        return f"{key}.lock"

    def blob(self, pkg, item: LockedFile, blobs: SafeDir) -> str:
        """Ensure the item's blob exists and verifies; return its name."""
        with lock_in(self.root, (LOCKS, repo_folder(pkg.repo)), self._lock_name(item)):
            if item.blob and _blob_ok(blobs, item.blob, item):
                with self._count:
                    self.report.present += 1
                self._emit(item, "present", 0)
                return item.blob
            src, staging = self._source(pkg, item) if self.store is None else (None, None)
            try:
                tmp, out = self.tmp.new_file("blob-")
                try:
                    with out:
                        if self.store is None:
                            hashes, n = hash_copy(src, out, item.algorithm)
                        else:
                            hashes, n = self._fetch(item, out)
                    got = item.computed(hashes)
                    if got != item.expected:
                        what = ("source bytes" if self.store is None
                                else f"object {self.store.where(item.object_key)} ({n} bytes)")
                        raise Unsupplied(item, got, f"{what} do not match the lock (expected {item.expected}, "
                                               f"computed {got})")
                    name = hashes["sha256"].hexdigest()
                    self.tmp.replace(tmp, blobs, name)
                finally:
                    self.tmp.unlink(tmp)
            finally:
                if staging:
                    shutil.rmtree(staging, ignore_errors=True)
        with self._count:
            self.report.fetched += 1
            self.report.bytes += n
        self._emit(item, "fetched", n)
        return name

    def _fetch(self, item: LockedFile, out) -> tuple[dict, int]:
        """The item's bytes from the object store into ``out``, hashed as they arrive; nothing is
        trusted here: ``blob`` compares the digest with the lock before the bytes become visible."""
        from .objstore import ObjectMissing  # noqa: PLC0415

        sink = HashingWriter(item.algorithm, out)
        hashes = sink.hashes
        try:
            n = self.store.get(item.object_key, sink)
        except ObjectMissing:
            raise Unsupplied(item, None, f"object {self.store.where(item.object_key)} is not in the store") from None
        out.sync()
        return hashes, n

    def link(self, pkg, item: LockedFile, blob: str, folder: SafeDir, blobs: SafeDir) -> None:
        parts = ["snapshots", pkg.snapshot, "build", item.variant, *item.rel.split("/")]
        target = "../" * (len(parts) - 1) + f"blobs/{blob}"
        with folder.walk(*parts[:-1], create=True) as here:
            if here.readlink(parts[-1]) == target:
                return
            tmp = f"link-{uuid.uuid4().hex}"
            try:
                try:
                    self.tmp.symlink(target, tmp)
                except WriteError as exc:
                    if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.ENOSYS):
                        raise
                    tmp = self._copy_blob(blobs, blob)  # no symlinks here (e.g. some network file systems)
                self.tmp.replace(tmp, here, parts[-1])
            finally:
                self.tmp.unlink(tmp)
        self.report.linked += 1

    def _copy_blob(self, blobs: SafeDir, blob: str) -> str:
        f = blobs.open_read(blob)
        if f is None:
            raise WriteError(errno.ENOENT, "the blob just written is gone", f"{blobs.path}/{blob}")
        name, out = self.tmp.new_file("copy-")
        with f, out:
            while chunk := f.read(_CHUNK):
                out.write(chunk)
            out.sync()
        return name

    def refs(self, pkg, folder: SafeDir) -> None:
        with folder.child("refs", create=True) as refs:
            _write_if_changed(refs, f"v{pkg.version}", pkg.snapshot, self.tmp)
            if refs.lstat("main") is None:
                _write_if_changed(refs, "main", pkg.snapshot, self.tmp)

    def _emit(self, item: LockedFile, action: str, n: int) -> None:
        self.progress({"event": "file", "repo": item.repo, "variant": item.variant, "path": item.rel,
                       "action": action, "bytes": n})

    # -- a whole package -----------------------------------------------------
    def package(self, pkg, variants: list[str]) -> None:
        """Every blob and snapshot entry first; the refs last, and only when every file of the
        package is in place (a ref is what makes a snapshot visible to `kernels`)."""
        before = len(self.problems)
        with self.root.child(repo_folder(pkg.repo), create=True) as folder, \
                folder.child("blobs", create=True) as blobs:
            fetched = self._prefetch(pkg, variants, blobs)
            for variant in variants:
                for item in locked_files(pkg, variant):
                    try:
                        got = fetched.get(item)
                        if isinstance(got, BaseException):
                            raise got
                        self.link(pkg, item, got or self.blob(pkg, item, blobs), folder, blobs)
                    except Unsupplied as f:
                        self.problems.append(f.problem(pkg))
                    except WriteError as exc:  # the mirror itself (full, read-only, denied): the run stops
                        exc.doing = f"{pkg.repo} build/{variant}/{item.rel}"
                        raise
                    except UnsafePath:
                        raise
                    except OSError as exc:  # an unreadable source: this file fails, the rest go on
                        self.problems.append(
                            Unsupplied(item, None, f"{exc.strerror or exc}: {exc.filename or ''}").problem(pkg))
            if len(self.problems) == before:
                self.refs(pkg, folder)
        self.report.packages.append({"repo": pkg.repo, "revision": pkg.revision, "snapshot": pkg.snapshot,
                                     "variants": list(variants)})


    def _prefetch(self, pkg, variants: list[str], blobs: SafeDir) -> dict:
        """From an object store: every blob of the package at once (a thread pool; the per-blob
        locks still make each one fetched once), {item: blob name or the exception}; the links
        are then made in order by ``package``. Other sources go one by one, as before."""
        if self.store is None:
            return {}
        from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415

        items = [item for v in variants for item in locked_files(pkg, v)]

        def one(item):
            try:
                return self.blob(pkg, item, blobs)
            except (KeyboardInterrupt, SystemExit):
                raise
            except BaseException as exc:
                return exc

        pool = ThreadPoolExecutor(max_workers=min(8, max(1, len(items))))
        try:
            results = [fu.result() for fu in [pool.submit(one, item) for item in items]]
        except BaseException:  # Ctrl-C: start nothing more; what is in flight ends (bounded by the store's timeouts)
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        finally:
            pool.shutdown(wait=True)
        for r in results:  # a store that refuses us (no credentials, no bucket) ends the run
            if isinstance(r, FrtError):
                raise r
        return dict(zip(items, results, strict=False))


def drop_if_empty(top: SafeDir, name: str) -> None:
    """Remove the package folder ``name`` when it holds nothing but an empty ``blobs/`` (a run that
    failed before any of its files arrived); a link or anything in it keeps it."""
    try:
        folder = top.child(name)
    except (OSError, UnsafePath):
        return
    if folder is None:
        return
    with folder:
        folder.rmdir("blobs")
    top.rmdir(name)


def _write_if_changed(folder: SafeDir, name: str, text: str, tmp: SafeDir) -> None:
    if folder.read_bytes(name) == text.encode("utf-8"):  # a link reads as absent: it is replaced
        return
    staged = tmp.write_file("ref-", text.encode("utf-8"))
    try:
        tmp.replace(staged, folder, name)
    finally:
        tmp.unlink(staged)


@contextmanager
def mirror_errors(dest):
    try:
        yield
    except UnsafePath as exc:
        raise MirrorUnsafe(f"mirror {dest}: {exc.path} {exc.what}", hints=[
            f"remove it (`rm {shlex.quote(exc.path)}`; only the link goes) and run `frt mirror` again: "
            "frt reads, writes and deletes nothing through a link inside a mirror"]) from None
    except WriteError as exc:
        hint = ("free space on the mirror's file system, or choose another DIR" if exc.errno in (errno.ENOSPC, errno.EDQUOT)
                else "make DIR writable for this user, or choose another DIR")
        doing = f" (for {exc.doing})" if getattr(exc, "doing", None) else ""
        raise MirrorUnwritable(f"mirror {dest}: cannot write {exc.filename}{doing}: {exc.strerror}", hints=[
            hint, "nothing was left half-written: the blobs already verified stay and `frt mirror` resumes from "
                  "them"]) from None

