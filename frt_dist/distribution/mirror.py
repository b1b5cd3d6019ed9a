"""``frt mirror`` and ``frt verify --mirror``: an offline copy of every locked file
(SPEC §3 "Mirror", §4, §8.8, §8.9).

A mirror is a directory laid out as a Hugging Face hub cache, so that plain
`kernels` with ``HF_HUB_OFFLINE=1 KERNELS_CACHE=DIR`` loads from it too::

    DIR/kernels--<org>--<name>/
        blobs/<sha256 hex of the bytes>              each file's bytes, stored once
        snapshots/<snapshot>/build/<variant>/<file>  relative symlink into blobs/ (a copy where links are unavailable)
        refs/v<N>                                    the snapshot name (no newline); refs/main too when absent
    DIR/.locks/<repo folder>/<blob>.lock             per-blob lock files (while a run needs them)
    DIR/.locks/frt-runs/<run>.lock                   held by a live run for as long as it runs
    DIR/.frt-tmp/<run>/…                             that run's in-flight temp files (nothing when idle)

``<snapshot>`` is the locked commit, or for a path package the first 40 hex
digits of its content digest (``LockedPackage.snapshot``).

``mirror_lock`` copies (path packages) or downloads (Hub packages, at the
locked commit; from the local hub cache first) each file the selection needs.
Every blob is verified against the locked digest before it becomes visible
(temp file, then rename); a blob already present and verified is not
fetched again, so an interrupted run resumes; a lock per blob makes concurrent
runs on one DIR fetch each blob once. A package's refs are written last, and only
when every file of it is in place: a ref never names an incomplete snapshot.

What a mirror cannot make frt do. DIR (and the folders above it) is the user's choice
and may be a link; nothing inside it is trusted. Every read, write, rename and delete
below DIR goes through ``frt_dist.base.safedir.SafeDir`` (one descriptor per folder,
``dir_fd=``, ``O_NOFOLLOW``): a folder inside the mirror that is a link (or not a
folder) is refused (``MirrorUnsafe``, exit 2, naming it) before anything goes through
it; a file that is a link (a blob, a ref, a snapshot entry, a lock) is never read or
written through, only replaced or removed itself. Hub downloads are staged in a
private folder under the system temp folder (``TMPDIR``), outside the mirror: the
downloader writes by path (the run that removes a killed run's temp folder removes its
staging folders there too). A DIR that cannot be written (a full disk, a read-only or
denied folder) stops the run (``MirrorUnwritable``, exit 2, naming the file and the
cause); nothing is left half-written: temp files are removed, and a verified blob
only ever appears whole under its name.

Housekeeping (what a killed run leaves behind). Every run writes its temp files
only under its own folder ``.frt-tmp/<run>/``, and holds the lock
``.locks/frt-runs/<run>.lock`` from before that folder exists until after it is
gone; the operating system drops the lock (``flock``) when the process dies, even by
SIGKILL. So ownership, not age, decides what is stale: at its start and at its
end a run removes every ``.frt-tmp/<run>/`` whose run lock it can take at once
(its owner is dead), and leaves alone the folder of a run still holding its lock.
Loose entries directly under ``.frt-tmp/`` (an earlier frt's layout, with no
owner to ask) are removed once nothing in them changed for ``STALE_S`` seconds.
At its end a run also deletes every lock file under ``.locks/`` it can take at
once (each deleted while held, so nobody holds a deleted lock without knowing),
then the folders left empty; a lock another run holds stays. A run that waited for
a lock re-checks, once it holds it, that the file still carries the name (not
deleted meanwhile) and otherwise takes it again; a folder a concurrent sweep removed
between its making and its use is made again. The locks are ``flock`` locks, the
same that ``filelock`` takes on POSIX, so older frt versions on one DIR agree.

``verify_mirror`` reports what is ``missing``, ``unknown`` or ``mismatched``, with expected and computed
digests, without importing torch or `kernels`.

Selection (both functions): ``variants=[...]`` names variants; ``all_variants``
takes every locked variant; ``machines=[Hardware, ...]`` (or one ``hardware``) takes,
per package, the variants those machines select (the machines you ship to);
``cells`` takes the machines of the lock's cells, as their receipts record them; else
``mirror_lock`` detects this machine. A machine that selects nothing is refused
before anything is written. ``verify_mirror`` without
any of these checks the variants the mirror holds (a package it holds none of
is reported missing in full), so it never needs the running device.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import shlex
import shutil
import stat
import tempfile
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..errors import FrtError, KernelUnavailable, UsageError
from ..loader.integrity import Expected, check_variant_dir
from ..loader import is_offline, lock_root, repo_folder
from ..provenance.publisher import BUNDLE
from ..base.safedir import SafeDir, UnsafePath, WriteError
from ..system.variants import parse_variant, select_variants
from .sources import HashingWriter, LockedFile, Unsupplied, hash_copy, locate_file, locked_files
from ..errors import MirrorUnsafe, MirrorUnwritable  # noqa: F401 - defined with every FrtError

__all__ = ["mirror_lock", "verify_mirror", "MirrorReport", "MirrorUnsafe", "MirrorUnwritable", "select_for_mirror",
           "cell_machines", "machine_label", "sweep_temp", "sweep_locks"]

_CHUNK = 1 << 20
TMP = ".frt-tmp"
LOCKS = ".locks"
RUNS = "frt-runs"  # under LOCKS: one lock per live run
STALE_S = 3600.0  # loose temp entries (no owning run) untouched this long are removed
_RUN_ID = re.compile(r"^run-[0-9]+-[0-9a-f]{12}$")


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


# ---------------------------------------------------------------------------
# selection


def cell_machines(lock) -> list:
    """The machine of every locked cell (a receipt the lock's index ranks): the backend, arch,
    device class and software its receipt records, and the CPU, OS and C++ ABI of the variants
    it measured (a variant name carries them; a noarch one leaves ``Hardware``'s defaults)."""
    from ..system.hardware import Hardware  # noqa: PLC0415

    out = {}
    for entry in lock.index.values():
        for cand in entry.candidates:
            rec = lock.receipts[cand.receipt]
            hw = rec.cell["hardware"]
            built = [v for v in (parse_variant(it["variant"] or "") for it in rec.cell["impls"].values())
                     if v is not None and v.cpu]
            cxx11 = next((v.cxx11 for v in built if v.cxx11 is not None), True)
            machine = Hardware(arch=hw["arch"], device_class=hw["device-class"], backend=hw["backend"],
                               cpu=built[0].cpu if built else "", os=built[0].os if built else "",
                               software=rec.software, cxx11_abi=cxx11)
            out.setdefault(machine.fingerprint, machine)
    return list(out.values())


def machine_label(hw) -> str:
    """A machine as a person declared it: ``h200 (cuda 9.0) torch=2.13,cuda=12.8``."""
    soft = ",".join(f"{k}={v}" for k, v in hw.software.items())
    return f"{hw.describe()}{' ' + soft if soft else ''}"


def select_for_mirror(lock, *, variants=None, all_variants: bool = False, hardware=None, machines=None,
                      cells: bool = False, mirror: Path | None = None) -> tuple[dict[str, list[str]], list[dict]]:
    """({repo: [variant, ...]}, skipped) for a selection (see the module docstring).

    ``machines`` (or one ``hardware``) takes, per package, the union of the variants each
    machine selects; ``cells`` takes the machines of the lock's cells (``cell_machines``).
    A machine that selects no variant of any package is a ``KernelUnavailable`` naming it
    and every package's variants: mirroring nothing for it would only fail later, offline."""
    given = [name for name, on in (("--variant", variants is not None), ("--all-variants", all_variants),
                                   ("declared machines (--arch/--machine)", bool(machines) or hardware is not None),
                                   ("--cells", cells)) if on]
    if len(given) > 1:
        raise UsageError(f"{', '.join(given[:-1])} and {given[-1]} exclude each other")
    if hardware is not None:
        machines = [hardware]
    if cells:
        machines = cell_machines(lock)
        if not machines:
            raise KernelUnavailable(f"--cells: the lock for model {lock.model!r} has no cells (no receipts), "
                                    "so no cell selects a variant",
                                    hints=["qualify a route (`frt qualify`) and `frt lock`, or declare the machines "
                                           "(--arch/--device-class or --machine)"])
    chosen, skipped = {}, []
    if variants is not None:
        names = list(dict.fromkeys(variants))
        known = {v for p in lock.packages.values() for v in p.variants}
        unknown = [v for v in names if v not in known]
        if unknown:
            raise UsageError(f"--variant: {', '.join(unknown)} is not a locked variant "
                             f"(locked: {', '.join(sorted(known))})")
    elif machines:
        return _select_machines(lock, machines)
    for repo, pkg in sorted(lock.packages.items()):
        if all_variants:
            chosen[repo] = sorted(pkg.variants)
        elif variants is not None:
            have = [v for v in names if v in pkg.variants]
            if have:
                chosen[repo] = have
            else:
                skipped.append({"repo": repo, "reason": f"none of the selected variants is locked for it "
                                                        f"(it has {', '.join(sorted(pkg.variants))})"})
        else:  # verify: what the mirror holds
            build = (mirror / repo_folder(repo) / "snapshots" / pkg.snapshot / "build") if mirror else None
            held = sorted(p.name for p in build.iterdir() if p.name in pkg.variants) if build and build.is_dir() else []
            chosen[repo] = held or sorted(pkg.variants)
    return chosen, skipped


def _select_machines(lock, machines) -> tuple[dict[str, list[str]], list[dict]]:
    chosen: dict[str, set] = {}
    skipped, empty = [], []
    for hw in machines:
        got = 0
        for repo, pkg in sorted(lock.packages.items()):
            choice = select_variants(pkg.variants, hw)
            if choice.selected:
                chosen.setdefault(repo, set()).add(choice.selected)
                got += 1
            elif (skip := {"repo": repo, "reason": f"no locked variant runs on {hw.describe()}"}) not in skipped:
                skipped.append(skip)
        if not got and lock.packages:
            empty.append(hw)
    if empty:
        has = "; ".join(f"{repo} has {', '.join(sorted(p.variants))}" for repo, p in sorted(lock.packages.items()))
        raise KernelUnavailable(
            f"mirror: model {lock.model!r} selects no locked variant for machine(s) "
            f"{'; '.join(machine_label(hw) for hw in empty)} ({has}); nothing would be mirrored for them",
            hints=["declare the machine's software too (e.g. --software torch=2.13,cuda=12.8, or "
                   "software=torch=2.13;cuda=12.8 in --machine), or name variants with --variant"])
    return {repo: sorted(vs) for repo, vs in sorted(chosen.items())}, skipped


# ---------------------------------------------------------------------------
# one file


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


# ---------------------------------------------------------------------------
# locks, runs and housekeeping (see the module docstring); every name below the mirror root
# goes through ``SafeDir`` (frt_dist/base/safedir.py): no link inside a mirror is ever followed


def _lock_in(root: SafeDir, folders: tuple[str, ...], name: str, *, blocking: bool = True):
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


class _Run:
    """One run's claim on its temp folder ``.frt-tmp/<run>/``: the run lock is taken
    before the folder exists and let go after it is gone."""

    def __init__(self, root: SafeDir):
        self.root = root
        self.id = f"run-{os.getpid()}-{uuid.uuid4().hex[:12]}"
        self.lock = _lock_in(root, (LOCKS, RUNS), f"{self.id}.lock")
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


def _staging_prefix(run_id: str) -> str:
    return f"frt-mirror-{run_id}-"


def _sweep_staging(run_id: str) -> None:
    """Remove the Hub download staging folders a dead run left in the system temp folder (this
    user's real folders named for that run; links and others' entries are left alone)."""
    where = tempfile.gettempdir()
    try:
        names = [n for n in os.listdir(where) if n.startswith(_staging_prefix(run_id))]
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
                    lock = _lock_in(root, (LOCKS, RUNS), f"{name}.lock", blocking=False)
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


class _Mirror:
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
                           staging_prefix=_staging_prefix(self.run_id))

    # -- blobs and links ------------------------------------------------------
    def _lock_name(self, item: LockedFile) -> str:
        key = item.blob or hashlib.sha256(f"{item.algorithm}:{item.expected}".encode()).hexdigest()
        return f"{key}.lock"

    def blob(self, pkg, item: LockedFile, blobs: SafeDir) -> str:
        """Ensure the item's blob exists and verifies; return its name."""
        with _lock_in(self.root, (LOCKS, repo_folder(pkg.repo)), self._lock_name(item)):
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
            except BaseException as exc:  # noqa: BLE001 - handed to package(), which sorts them
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
        return dict(zip(items, results))


def _drop_if_empty(top: SafeDir, name: str) -> None:
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
def _mirror_errors(dest):
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


# ---------------------------------------------------------------------------
# public


def mirror_lock(lock, dir, *, variants=None, all_variants: bool = False, hardware=None, machines=None,
                cells: bool = False, progress: Callable[[dict], None] | None = None, root=None,
                source=None) -> MirrorReport:
    """Fill ``dir`` with every locked file the selection needs (see the module docstring).

    ``root`` is the project root of the lock's path packages (default: found
    from the lockfile's place). Raises ``KernelUnavailable`` listing every file
    that could not be supplied, after supplying all the others; ``MirrorUnsafe`` when a
    folder inside ``dir`` is a link, ``MirrorUnwritable`` when ``dir`` cannot be written
    (both exit 2, naming the path; nothing is written through a link, nothing left half-written).

    ``source`` (an ``frt_dist.distribution.objstore.ObjectStore``) syncs from an object store instead of the
    project's sources: each blob is fetched by the key its locked digest gives (several at once)
    and verified against ``lock`` before it becomes visible, exactly as a local source is; the
    store is never trusted for anything else. Its errors (``StoreAccess`` exit 2,
    ``StoreUnavailable`` exit 1) stop the run; a missing or damaged object is one more file that
    could not be supplied, naming the object and the locked file.
    """
    from ..loader import _as_lock  # noqa: PLC0415

    lock = _as_lock(lock)
    dest = Path(dir)
    if variants is None and not all_variants and hardware is None and not machines and not cells:
        from ..system.hardware import Hardware  # noqa: PLC0415

        hardware = Hardware.detect()
    chosen, skipped = select_for_mirror(lock, variants=variants, all_variants=all_variants, hardware=hardware,
                                        machines=machines, cells=cells)
    from .objstore import StoreUnavailable  # noqa: PLC0415

    gone = None
    with _mirror_errors(dest):
        top = SafeDir.root(dest, create=True)  # after the selection: a refused one writes nothing
        owner = None
        try:
            owner = _Run(top)
            run = _Mirror(lock, top, Path(root) if root else lock_root(lock), progress, owner.tmp)
            run.run_id = owner.id
            run.store = source
            run.report.dir = str(dest)
            run.report.skipped = skipped
            run.report.cleaned["temp"] += sweep_temp(top, keep=owner.id)  # space first: what killed runs left
            try:
                for repo, vs in chosen.items():
                    run.package(lock.packages[repo], vs)
            except StoreUnavailable as exc:  # the store went away (past its bounded retries): say what stays
                gone = exc
            if lock.release and source is None and gone is None:  # a Hub release's files (frt_dist.release.consume)
                from ..release.consume import mirror_files  # noqa: PLC0415

                run.problems += mirror_files(lock, top, owner.tmp, progress=progress)
        finally:
            if owner is not None:
                owner.close()
            for repo in chosen:  # a package folder this run made and could fill nothing into goes
                _drop_if_empty(top, repo_folder(repo))
            cleaned = sweep_temp(top), sweep_locks(top)  # also after a refusal: what this run made goes
            top.rmdir(TMP)  # only when empty
            top.close()
        run.report.cleaned["temp"] += cleaned[0]
        run.report.cleaned["locks"] += cleaned[1]
    if gone is not None:
        total = len({item.object_key for repo, vs in chosen.items() for v in vs
                     for item in locked_files(lock.packages[repo], v)})
        done = run.report.fetched + run.report.present
        raise StoreUnavailable(f"{gone} ({done} of {total} file(s) verified in {dest} so far)",
                               hints=[*(gone.hints or []), "run the same `frt mirror DIR --from URL` again once the "
                                      "store answers: it resumes, fetching only the files not yet verified"])
    if run.problems:
        raise KernelUnavailable(f"mirror {dest}: {len(run.problems)} file(s) could not be supplied:\n  "
                                + "\n  ".join(p["reason"] for p in run.problems), reasons=run.problems,
                                hints=["fix the source (or go online) and run `frt mirror` again; it resumes"])
    return run.report


def verify_mirror(lock, dir, *, variants=None, all_variants: bool = False, hardware=None) -> list[dict]:
    """Every problem of the mirror ``dir`` for ``lock``: ``{"kind": "missing" | "unknown" |
    "mismatched", "path", "expected", "computed", "reason"}``, paths relative to ``dir``."""
    from ..loader import _as_lock  # noqa: PLC0415

    lock = _as_lock(lock)
    dest = Path(dir)
    chosen, _ = select_for_mirror(lock, variants=variants, all_variants=all_variants, hardware=hardware,
                                  mirror=dest)
    problems = []
    for repo, vs in chosen.items():
        pkg = lock.packages[repo]
        folder = repo_folder(repo)
        for v in vs:
            prefix = f"{folder}/snapshots/{pkg.snapshot}/build/{v}/"
            problems += check_variant_dir(dest / prefix, Expected.from_locked(pkg.variants[v]),
                                          tree_root=dest / folder, prefix=prefix)
            problems += bundle_problems(dest, folder, prefix, pkg, v)
        problems += _ref_problems(dest, folder, f"v{pkg.version}", pkg.snapshot)
    return problems


def read_mirrored(dest: Path, folder: str, path: str) -> bytes | None:
    """The bytes of ``dest/path`` when it resolves to a regular file inside ``dest/folder`` (a
    snapshot entry links into that folder's ``blobs/``); ``None`` when it is absent, or a link that
    leaves the package's folder (nothing outside it is read)."""
    try:
        real = os.path.realpath(dest / path)
        if not real.startswith(os.path.realpath(dest / folder) + os.sep):
            return None
        fd = os.open(real, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            return None
        return fh.read((1 << 20) + 1)


def bundle_problems(dest: Path, folder: str, prefix: str, pkg, variant: str) -> list[dict]:
    """A signed variant's ``metadata.json.sigstore`` in the mirror: missing, or not the locked bytes."""
    sig = pkg.variants[variant].signature
    if not sig:
        return []
    path = prefix + BUNDLE
    data = read_mirrored(dest, folder, path)
    who = f"{pkg.repo} variant {variant}: the publisher signature (signed by {sig['identity']})"
    if data is None:
        present = os.path.lexists(dest / path)
        return [{"kind": "mismatched" if present else "missing", "path": path, "expected": sig["bundle-sha256"],
                 "computed": "a link leaving the package folder, or not a file" if present else None,
                 "reason": f"{path}: {who} is {'not a regular file inside the mirror' if present else 'missing from the mirror'}"}]
    got = "sha256:" + hashlib.sha256(data).hexdigest()
    if got != sig["bundle-sha256"]:
        return [{"kind": "mismatched", "path": path, "expected": sig["bundle-sha256"], "computed": got,
                 "reason": f"{path}: {who} is not the locked bundle"}]
    return []


def _ref_problems(dest: Path, folder: str, ref: str, snapshot: str) -> list[dict]:
    path = f"{folder}/refs/{ref}"
    try:
        got = (dest / path).read_text("utf-8").strip()
    except OSError:
        return [{"kind": "missing", "path": path, "expected": snapshot, "computed": None, "reason": f"{path}: missing"}]
    if got != snapshot:
        return [{"kind": "mismatched", "path": path, "expected": snapshot, "computed": got,
                 "reason": f"{path}: points at {got}, the lock pins {snapshot}"}]
    return []
