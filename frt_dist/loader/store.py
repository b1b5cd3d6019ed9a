"""The verified store: what is imported is what was verified, by construction (docs/reference.md#verified-store).

A load imports a variant from a private, per-user, content-addressed copy frt wrote from the very
bytes it hashed (``$FRT_STORE``, else ``~/.cache/frt-dist/store``), never from where it found it.
``admit`` lists the source, hashes each declared file as it copies it into a temporary entry and
commits it (read-only, ``record.json`` last, renamed into place); ``Store.lookup`` finds a sound entry for
a whole identity (warm: nothing hashed again; ``seal_holds`` says whether a file is still what was hashed).
Layout, cold and warm loads, seals, and the threat model (who can write what, ``FRT_STORE_REHASH=1``):
docs/design.md#loading-and-the-verified-store.
"""

from __future__ import annotations

import base64
import errno
import hashlib
import json
import os
import stat
from collections.abc import Callable
from pathlib import Path

from .. import settings
from ..base.canonical import canonical_json, digest, scan_tree
from ..distribution.integrity import (
    IGNORED_TOP,
    METADATA,
    Expected,
    is_inside,
    link_target,
    missing_problems,
    open_checked,
    problem,
    real_dir,
)
from ..errors import StoreUnusable

__all__ = ["STORE_ENV", "REHASH_ENV", "FORMAT", "StoreUnusable", "Entry", "Admitted", "Store", "store_path",
           "open_store", "identity_of", "entry_key", "admit", "seal_holds", "rehash_requested"]

STORE_ENV = "FRT_STORE"
REHASH_ENV = "FRT_STORE_REHASH"
FORMAT = "frt.store/1"
RECORD = "record.json"
VARIANT = "variant"
SEEN = "seen"
LARGE = 1 << 20  # files above this go to the thread pool: copied in the kernel, their copy hashed
CHUNK = 1 << 20  # copied, then hashed while still in the cache
RACY_NS = 100_000_000  # a fingerprint whose ctime is this close to the read (or later) is not recorded
STALE_S = 3600  # a .tmp-/.trash- folder older than this is left over from a crash


def _unique() -> str:
    return os.urandom(12).hex()


# ---------------------------------------------------------------------------
# where the store is, and whether it may be used


def store_path() -> Path:
    """``$FRT_STORE``, else ``platformdirs.user_cache_path("frt-dist") / "store"``."""
    env = settings.value(STORE_ENV)
    if env:
        return Path(os.path.expanduser(env))
    import platformdirs  # noqa: PLC0415 - only when no FRT_STORE is given

    return platformdirs.user_cache_path("frt-dist") / "store"


def _owned_private_dir(path: Path, what: str) -> None:
    try:
        st = os.stat(path)
    except OSError as exc:
        raise StoreUnusable(f"{what} {path} cannot be used: {exc.strerror or exc}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise StoreUnusable(f"{what} {path} is not a directory")
    uid = os.geteuid() if hasattr(os, "geteuid") else st.st_uid  # no owner ids to compare off POSIX
    if st.st_uid != uid:
        raise StoreUnusable(f"{what} {path} is owned by uid {st.st_uid}, not by the current user (uid {uid}); "
                            "frt imports only from a store that only you can write")
    if st.st_mode & 0o022:
        raise StoreUnusable(f"{what} {path} is writable by group or others (mode {stat.S_IMODE(st.st_mode):#o}); "
                            "frt imports only from a store that only you can write")


def open_store(path: str | os.PathLike | None = None) -> Store:
    """The store at ``path`` (default ``store_path()``), created 0700 when absent; refused
    (``StoreUnusable``) when it is not a directory owned by this user and closed to others."""
    root = Path(path) if path is not None else store_path()
    try:
        if not root.parent.is_dir():
            os.makedirs(root.parent, mode=0o700, exist_ok=True)
        os.mkdir(root, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise StoreUnusable(f"verified store {root} cannot be created: {exc.strerror or exc}") from None
    real = Path(os.path.realpath(root))  # resolved once: the folder checked is the folder used
    _owned_private_dir(real, "verified store")
    return Store(real)


# ---------------------------------------------------------------------------
# entries


def identity_of(expected: Expected, module_id: str) -> dict:
    """Everything an entry is keyed by."""
    if expected.metadata_sha256 is None:
        raise ValueError("a store identity needs the metadata's sha256")
    return {"format": FORMAT, "algorithm": expected.algorithm, "files": dict(sorted(expected.files.items())),
            "metadata": expected.metadata_sha256, "module": module_id}


def entry_key(identity: dict) -> str:
    """The store entry's name for ``identity``: the hex of its canonical digest."""
    return digest(identity).split(":", 1)[1]


class Entry:
    """One committed entry: ``variant_dir`` holds the verified files; ``seals`` the record's
    fingerprint of each (``seal_holds``), which the importer compares with the file it opens.
    (Plain classes here, not dataclasses: this module is imported by the first load, and every
    millisecond of it counts.)"""

    __slots__ = ("key", "path", "identity", "seals")

    def __init__(self, key: str, path: Path, identity: dict, seals: dict | None = None):
        self.key, self.path, self.identity, self.seals = key, path, identity, seals

    def __repr__(self) -> str:
        return f"Entry({self.key!r}, {str(self.path)!r})"

    @property
    def variant_dir(self) -> Path:
        return self.path / VARIANT

    @property
    def module_id(self) -> str:
        return self.identity["module"]

    @property
    def algorithm(self) -> str:
        return self.identity["algorithm"]

    @property
    def files(self) -> dict:
        return self.identity["files"]

    def metadata_bytes(self) -> bytes:
        """The verified ``metadata.json`` (checked against the identity's sha256 on every read)."""
        data = (self.variant_dir / METADATA).read_bytes()
        if "sha256:" + hashlib.sha256(data).hexdigest() != self.identity["metadata"]:
            raise StoreUnusable(f"{self.variant_dir / METADATA}: does not match its store entry's identity")
        return data


def _fingerprint(st: os.stat_result) -> list[int]:
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def _euid() -> int | None:
    return os.geteuid() if hasattr(os, "geteuid") else None  # no owner ids to compare off POSIX


def _sealed_kind(st: os.stat_result) -> bool:
    """A regular file owned by this user, writable by nobody (mode 0444 in an entry), with one name."""
    uid = _euid()
    return (stat.S_ISREG(st.st_mode) and (uid is None or st.st_uid == uid) and not st.st_mode & 0o222
            and st.st_nlink == 1)


def seal_holds(st: os.stat_result, seal) -> bool:
    """Whether the file ``st`` describes (an ``fstat`` of the descriptor about to be mapped) is still
    the one sealed in its entry's record: the same inode, size, mtime and ctime, and still a regular
    file owned by this user, writable by nobody, with no other name (see "Sealed entries")."""
    return _sealed_kind(st) and _fingerprint(st) == seal


def rehash_requested() -> bool:
    """``FRT_STORE_REHASH`` set (to anything but ``""``/``0``/``false``/``no``/``off``): every
    extension module is hashed against the lock at each load, whatever its seal says."""
    return settings.flag(REHASH_ENV)


def _source_fingerprint(st: os.stat_result) -> list[int]:
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _make_writable(top: Path) -> None:
    for dirpath, dirnames, _files in os.walk(top):
        for d in [dirpath, *(os.path.join(dirpath, n) for n in dirnames)]:
            try:
                if not os.path.islink(d):
                    os.chmod(d, 0o700)
            except OSError:
                pass


def _rmtree(top: Path) -> None:
    if os.path.islink(top):  # a link where an entry was: remove the link, never touch what it names
        try:
            os.unlink(top)
        except OSError:
            pass
        return
    try:
        os.chmod(top, 0o700)
    except OSError:
        return
    _make_writable(top)
    import shutil  # noqa: PLC0415 - only when something is removed

    shutil.rmtree(top, ignore_errors=True)


class Store:
    """A checked store directory (``open_store``)."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def entry_path(self, key: str) -> Path:
        return self.root / key

    # -- reading ------------------------------------------------------------

    def lookup(self, identity: dict) -> tuple[Entry | None, bool]:
        """(the committed entry for ``identity``, or None; whether a folder was there but doubtful)."""
        key = entry_key(identity)
        path = self.entry_path(key)
        try:
            with open(path / RECORD, "rb") as fh:
                if not _sealed_kind(os.fstat(fh.fileno())):  # the record vouches for the seals: only the user wrote it
                    return None, True
                record = json.loads(fh.read())
        except FileNotFoundError:
            return None, os.path.lexists(path)
        except (OSError, ValueError):
            return None, True
        if not (isinstance(record, dict) and record.get("format") == FORMAT and record.get("key") == key
                and record.get("identity") == identity and isinstance(record.get("files"), dict)):
            return None, True
        if not self._sound(path / VARIANT, identity, record["files"]):
            return None, True
        return Entry(key, path, identity, record["files"]), False

    @staticmethod
    def _sound(vdir: Path, identity: dict, fingerprints: dict) -> bool:
        """Every recorded file is still the regular file that was recorded, and nothing else is there."""
        wanted = set(identity["files"]) | {METADATA}
        if set(fingerprints) != wanted:
            return False
        dirs = {""}
        for rel in wanted:
            try:
                st = os.lstat(vdir / rel)
            except OSError:
                return False
            if not seal_holds(st, fingerprints[rel]):
                return False
            parts = rel.split("/")[:-1]
            dirs.update("/".join(parts[:i]) for i in range(1, len(parts) + 1))
        for d in dirs:  # nothing besides the recorded files and their folders (no __pycache__, no extras)
            try:
                with os.scandir(vdir / d if d else vdir) as it:
                    for e in it:
                        rel = f"{d}/{e.name}" if d else e.name
                        if e.is_symlink():
                            return False
                        if rel not in wanted and not (rel in dirs and e.is_dir(follow_symlinks=False)):
                            return False
            except OSError:
                return False
        return True

    # -- source fingerprints -----------------------------------------------

    def _seen_path(self, key: str, source: str) -> Path:
        return self.root / SEEN / (hashlib.sha256(f"{key}\0{source}".encode()).hexdigest() + ".json")

    def read_seen(self, key: str, source: str) -> dict:
        try:
            with open(self._seen_path(key, source), "rb") as fh:
                doc = json.loads(fh.read())
        except (OSError, ValueError):
            return {}
        if not (isinstance(doc, dict) and doc.get("format") == FORMAT and doc.get("key") == key
                and doc.get("source") == source and isinstance(doc.get("files"), dict)):
            return {}
        return doc["files"]

    def write_seen(self, key: str, source: str, files: dict) -> None:
        """Record fingerprints of a source whose bytes matched (best effort: a failure only costs a re-hash)."""
        target = self._seen_path(key, source)
        try:
            target.parent.mkdir(mode=0o700, exist_ok=True)
            tmp = target.parent / f".tmp-{_unique()}"
            with open(tmp, "xb") as fh:
                fh.write(canonical_json({"format": FORMAT, "key": key, "source": source, "files": files}))
            os.replace(tmp, target)
        except OSError:
            try:
                os.unlink(tmp)
            except (OSError, UnboundLocalError):
                pass

    # -- writing ------------------------------------------------------------

    def new_build(self, key: str) -> Path:
        """A fresh temporary entry folder (same parent as the entries: a rename never moves a
        read-only directory to another parent, which would need write access to it)."""
        tmp = self.root / f".tmp-{key[:16]}-{_unique()}"
        try:
            os.mkdir(tmp, 0o700)
            os.mkdir(tmp / VARIANT, 0o700)
        except OSError as exc:
            raise StoreUnusable(f"verified store {self.root}: cannot create an entry: {exc.strerror or exc}") from None
        self._sweep(os.stat(tmp).st_ctime_ns, keep=tmp.name)
        return tmp

    def fs_now(self) -> int:
        """The file system's current time (ns), read from a file created for the purpose: the
        clock that stamps ctimes (frt reads no wall clock on the serving path, docs/reference.md#loading-and-guard)."""
        probe = self.root / f".clock-{_unique()}"
        try:
            fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)
        except OSError:
            return 0  # no time: no fingerprint is recorded, the next load hashes again
        try:
            return os.fstat(fd).st_ctime_ns
        finally:
            os.close(fd)
            os.unlink(probe)

    def discard(self, tmp: Path) -> None:
        _rmtree(tmp)

    def evict(self, key: str) -> None:
        """Move a doubtful entry out of the way (same parent), then delete it."""
        trash = self.root / f".trash-{key[:16]}-{_unique()}"
        try:
            os.rename(self.entry_path(key), trash)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise StoreUnusable(f"verified store {self.root}: cannot remove the damaged entry {key}: "
                                f"{exc.strerror or exc}") from None
        _rmtree(trash)

    def commit(self, tmp: Path, identity: dict) -> Entry:
        """Make ``tmp`` read-only, write its record last, rename it into place; the winner's
        entry when another builder got there first."""
        key = entry_key(identity)
        vdir = tmp / VARIANT
        rels = sorted(set(identity["files"]) | {METADATA})
        try:
            fingerprints = {}
            for rel in rels:
                os.chmod(vdir / rel, 0o444)
                fingerprints[rel] = _fingerprint(os.lstat(vdir / rel))
            for dirpath, _dirnames, _files in sorted(os.walk(vdir), key=lambda t: -len(t[0])):
                os.chmod(dirpath, 0o555)
            record = {"format": FORMAT, "key": key, "identity": identity, "files": fingerprints}
            fd = os.open(tmp / RECORD, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o444)
            with open(fd, "wb") as fh:
                fh.write(canonical_json(record))
            os.chmod(tmp, 0o555)
        except OSError as exc:
            self.discard(tmp)
            raise StoreUnusable(f"verified store {self.root}: cannot write entry {key}: {exc.strerror or exc}") from None
        try:
            os.rename(tmp, self.entry_path(key))
        except OSError as exc:
            self.discard(tmp)
            if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise StoreUnusable(f"verified store {self.root}: cannot commit entry {key}: "
                                    f"{exc.strerror or exc}") from None
            winner, _ = self.lookup(identity)  # another builder won: use its entry
            if winner is None:
                raise StoreUnusable(f"verified store {self.root}: entry {key} was committed by another process "
                                    "but is not sound") from None
            return winner
        return Entry(key, self.entry_path(key), identity, fingerprints)

    def _sweep(self, now_ns: int, keep: str) -> None:
        """Remove folders left by builders that crashed (older than an hour by the file system's clock)."""
        try:
            with os.scandir(self.root) as it:
                stale = [Path(e.path) for e in it if e.name.startswith((".tmp-", ".trash-", ".clock-"))
                         and e.name != keep and now_ns - e.stat(follow_symlinks=False).st_mtime_ns > STALE_S * 10**9]
        except OSError:
            return
        for p in stale:
            _rmtree(p)


# ---------------------------------------------------------------------------
# reading a source directory: list, then hash (and copy) in one pass


class _Job:
    __slots__ = ("rel", "path", "link", "want", "size")

    def __init__(self, rel: str, path: str, link: bool, want: str | None, size: int):
        self.rel, self.path, self.link, self.want, self.size = rel, path, link, want, size


class _WriteFailed(Exception):
    """Writing into the store failed (as opposed to reading the source)."""

    def __init__(self, exc: OSError):
        super().__init__(exc)
        self.exc = exc


def _read_all(fd: int) -> bytes:
    with open(fd, "rb", closefd=False) as fh:
        return fh.read()  # to EOF, even if the file grew


def _write_all(out: int, view) -> None:
    try:
        while view:
            n = os.write(out, view)
            view = view[n:]
    except OSError as exc:
        raise _WriteFailed(exc) from None


_NO_RANGE = {errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EBADF, errno.EPERM}


def _copy_span(fd: int, out: int, off: int, n: int, in_kernel: list) -> int:
    """Copy up to ``n`` bytes at ``off`` from ``fd`` to the same offset of ``out``; the
    count copied (0: the source ended). In the kernel (``copy_file_range``: no trip through
    user space, a reflink where the file system shares extents) while ``in_kernel[0]``;
    ``pread``/``pwrite`` after the kernel refuses once."""
    if in_kernel[0]:
        try:
            return os.copy_file_range(fd, out, n, off, off)
        except OSError as exc:
            if exc.errno not in _NO_RANGE:
                raise
            in_kernel[0] = False  # another file system, an old kernel: copy by hand from here
    data = os.pread(fd, n, off)
    view = memoryview(data)
    while view:
        try:
            k = os.pwrite(out, view, off)
        except OSError as exc:
            raise _WriteFailed(exc) from None
        off += k
        view = view[k:]
    return len(data)


def _copy_hash_large(fd: int, out: int, algorithm: str):
    """Copy a large file into the store, then hash **the store's copy**: what is hashed is by
    construction what is imported, whatever the source does meanwhile (the store is private).

    A copier thread copies ``CHUNK``-sized spans in the kernel and posts how far it got; this
    thread hashes the copy up to there through a read-only map of it, while its pages are still
    in the cache. Copying and hashing overlap on two cores for one file; with several large
    files the pool keeps every core hashing and the copy adds only the kernel's ``memcpy``."""
    import mmap  # noqa: PLC0415
    import queue  # noqa: PLC0415
    import threading  # noqa: PLC0415

    size = os.fstat(fd).st_size
    try:
        os.ftruncate(out, size)  # the map needs the length; the copier fills it in
    except OSError as exc:
        raise _WriteFailed(exc) from None
    posted: queue.SimpleQueue = queue.SimpleQueue()
    failed: list[BaseException] = []
    stop = threading.Event()

    def copier():
        off = 0
        try:
            in_kernel = [hasattr(os, "copy_file_range")]
            while off < size and not stop.is_set():
                k = _copy_span(fd, out, off, min(CHUNK, size - off), in_kernel)
                if not k:
                    break  # the source shrank: the copy is what was read, the digest will say so
                off += k
                posted.put(off)
        except BaseException as exc:
            failed.append(exc)
        posted.put(None)

    h = hashlib.new(algorithm)
    done = 0
    thread = threading.Thread(target=copier, name="frt-store-copier", daemon=True)
    thread.start()
    try:
        with mmap.mmap(out, size, prot=mmap.PROT_READ) as m:
            view = memoryview(m)
            try:
                while (upto := posted.get()) is not None:
                    h.update(view[done:upto])
                    done = upto
            finally:
                view.release()
    finally:
        stop.set()
        thread.join()
    if failed:
        raise failed[0]
    if done != size:
        try:
            os.ftruncate(out, done)
        except OSError as exc:
            raise _WriteFailed(exc) from None
    return h


def _hash_file(job: _Job, fd: int, algorithm: str, dest: Path | None, keep: bool, t0: int):
    """(raw digest, bytes if ``keep``, source fingerprint or None); closes ``fd``."""
    try:
        st0 = os.fstat(fd)
        data = None
        if dest is None:
            if keep or st0.st_size <= LARGE:
                data = _read_all(fd)
                h = hashlib.new(algorithm, data)
            else:
                with open(fd, "rb", closefd=False) as fh:
                    h = hashlib.file_digest(fh, algorithm)
        else:
            try:
                dest.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                out = os.open(dest, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)
            except OSError as exc:
                raise _WriteFailed(exc) from None
            try:
                if keep or st0.st_size <= LARGE:
                    data = _read_all(fd)
                    h = hashlib.new(algorithm, data)
                    _write_all(out, memoryview(data))
                else:
                    h = _copy_hash_large(fd, out, algorithm)
            finally:
                os.close(out)
        st1 = os.fstat(fd)
    finally:
        os.close(fd)
    fp0 = _source_fingerprint(st0)
    stable = fp0 == _source_fingerprint(st1) and st0.st_ctime_ns < t0 - RACY_NS
    return h.digest(), (data if keep else None), (fp0 if stable else None)


class Admitted:
    """What ``admit`` found: ``problems`` in ``check_variant_dir``'s form; when there are none,
    the ``entry`` to import from and the verified ``metadata`` bytes; ``warm`` when the entry
    existed; ``hashed``, how many source files this call read."""

    __slots__ = ("problems", "entry", "metadata", "warm", "hashed")

    def __init__(self, problems: list, entry: Entry | None = None, metadata: bytes | None = None,
                 warm: bool = False, hashed: int = 0):
        self.problems, self.entry, self.metadata, self.warm, self.hashed = problems, entry, metadata, warm, hashed


def _examine(vdir: Path, expected: Expected, *, tree: str, prefix: str, real_dirs: dict,
             seen: dict | None, dest: Path | None, now: Callable[[], int]) -> tuple[list, dict, bytes | None, int]:
    """(problems, source fingerprints, metadata bytes read, files read).

    ``seen``: fingerprints of files known to match (a warm load hashes only the others);
    ``dest``: copy each declared file there while hashing it (a cold load); ``now``: the
    file system's time, asked once before the first file is read."""
    root = real_dir(tree, real_dirs)
    if not vdir.is_dir():
        missing = [(METADATA, expected.metadata_sha256)] + sorted(expected.files.items())
        return sorted((problem("missing", prefix + rel, want, None,
                                f"{prefix}{rel}: missing (variant directory not found)")
                       for rel, want in missing), key=lambda p: p["path"]), {}, None, 0
    problems: list[dict] = []
    fingerprints: dict = {}
    jobs: list[_Job] = []
    present = set()
    # 1. list: names, kinds and sizes only; nothing is read
    for rel, path, link in scan_tree(vdir):
        if rel in IGNORED_TOP:
            continue
        present.add(rel)
        shown = prefix + rel
        is_meta = rel == METADATA
        want = expected.metadata_sha256 if is_meta else expected.files.get(rel)
        declared = is_meta or want is not None
        kind = "mismatched" if declared else "unknown"
        if link:
            try:
                target = link_target(path, real_dirs)
            except OSError as exc:
                why = f"unreadable: {exc.strerror or exc}"
                problems.append(problem(kind, shown, want, why, f"{shown}: {why}"))
                continue
            if not is_inside(target, root):
                why = f"symlink leaving its tree -> {target}"
                problems.append(problem(kind, shown, want, why, f"{shown}: {why}"))
                continue
        try:
            st = os.stat(path)
        except OSError as exc:
            why = f"unreadable: {exc.strerror or exc}"
            problems.append(problem(kind, shown, want, why, f"{shown}: {why}"))
            continue
        if not stat.S_ISREG(st.st_mode):
            why = "a directory where a file belongs" if stat.S_ISDIR(st.st_mode) else "not a regular file"
            problems.append(problem(kind, shown, want, why, f"{shown}: {why}"))
            continue
        if not declared:
            p = problem("unknown", shown, None, None,
                         f"{shown}: not declared by the package ({st.st_size} bytes, not read)")
            p["size"] = st.st_size
            problems.append(p)
            continue
        if seen is not None and seen.get(rel) == _source_fingerprint(st):
            fingerprints[rel] = seen[rel]
            continue
        jobs.append(_Job(rel, path, link, want, st.st_size))
    problems += missing_problems(expected, present, prefix)
    if problems:
        dest = None  # nothing will be stored: hash only, for the report
    # 2. hash every declared file that needs it (and copy it), large ones in parallel
    meta: list[bytes] = []
    t0 = now() if jobs else 0

    def run(job: _Job):
        shown = prefix + job.rel
        fd, why = open_checked(job.path, job.link, root, real_dirs)
        if fd is None:
            return [problem("mismatched", shown, job.want, why, f"{shown}: {why}")]
        is_meta = job.rel == METADATA
        try:
            raw, data, fp = _hash_file(job, fd, "sha256" if is_meta else expected.algorithm,
                                       dest / job.rel if dest is not None else None, is_meta, t0)
        except _WriteFailed as exc:
            raise StoreUnusable(f"cannot write the verified store: {exc.exc.strerror or exc.exc}") from None
        except OSError as exc:
            why = f"unreadable: {exc.strerror or exc}"
            return [problem("mismatched", shown, job.want, why, f"{shown}: {why}")]
        if is_meta:
            meta.append(data)
            got = "sha256:" + raw.hex()
        else:
            got = base64.b64encode(raw).decode("ascii")
        if job.want is not None and got != job.want:
            return [problem("mismatched", shown, job.want, got,
                             f"{shown}: digest mismatch (expected {job.want}, computed {got})")]
        if fp is not None:
            fingerprints[job.rel] = fp
        return []

    large = [j for j in jobs if j.size > LARGE and j.rel != METADATA]
    small = [j for j in jobs if not (j.size > LARGE and j.rel != METADATA)]
    if len(large) > 1 or (large and small):
        from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415

        with ThreadPoolExecutor(max_workers=min(os.cpu_count() or 1, len(large)),
                                thread_name_prefix="frt-store-hash") as pool:
            futures = [pool.submit(run, job) for job in large]
            for job in small:  # meanwhile, the small files in this thread
                problems += run(job)
            for f in futures:
                problems += f.result()
    else:
        for job in large + small:
            problems += run(job)
    problems.sort(key=lambda p: (p["path"], p["kind"]))
    return problems, fingerprints, (meta[0] if meta else None), len(jobs)


def admit(vdir: str | os.PathLike, expected: Expected, module_id: str, *, tree_root: str | os.PathLike,
          prefix: str = "", real_dirs: dict | None = None, store: Store | None = None) -> Admitted:
    """Check ``vdir`` against ``expected`` and return the store entry to import from.

    Warm: a sound entry exists; the source is listed and only files whose fingerprint
    changed are hashed. Cold: every declared file is hashed and copied into a new entry
    in one pass; a mismatch stores nothing. Either way ``problems`` lists everything
    wrong with the source, and a load with problems imports nothing.
    """
    real_dirs = {} if real_dirs is None else real_dirs
    store = store or open_store()
    vdir = Path(vdir)
    tree = os.fspath(tree_root)
    identity = identity_of(expected, module_id)
    key = entry_key(identity)
    source = real_dir(vdir, real_dirs)
    entry, doubtful = store.lookup(identity)
    if entry is not None:
        try:
            meta = entry.metadata_bytes()
        except (OSError, StoreUnusable):
            entry, doubtful = None, True
    if entry is not None:
        seen = store.read_seen(key, source)
        problems, fps, _, n = _examine(vdir, expected, tree=tree, prefix=prefix, real_dirs=real_dirs,
                                       seen=seen, dest=None, now=store.fs_now)
        if problems:
            return Admitted(problems, hashed=n)
        if fps != seen:
            store.write_seen(key, source, fps)
        return Admitted([], entry, meta, warm=True, hashed=n)
    if doubtful:
        store.evict(key)
    tmp = store.new_build(key)
    try:
        problems, fps, meta, n = _examine(vdir, expected, tree=tree, prefix=prefix, real_dirs=real_dirs,
                                          seen=None, dest=tmp / VARIANT, now=lambda: os.stat(tmp).st_ctime_ns)
    except BaseException:
        store.discard(tmp)
        raise
    if problems:
        store.discard(tmp)
        return Admitted(problems, hashed=n)
    entry = store.commit(tmp, identity)
    store.write_seen(key, source, fps)
    return Admitted([], entry, meta, hashed=n)
