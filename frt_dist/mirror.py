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
(temp file, then ``os.replace``); a blob already present and verified is not
fetched again, so an interrupted run resumes; a ``filelock.FileLock`` per blob
makes concurrent runs on one DIR fetch each blob once.

Housekeeping (what a killed run leaves behind). Every run writes its temp files
only under its own folder ``.frt-tmp/<run>/``, and holds the lock
``.locks/frt-runs/<run>.lock`` from before that folder exists until after it is
gone; the operating system drops the lock when the process dies, even by
SIGKILL. So ownership, not age, decides what is stale: at its start and at its
end a run removes every ``.frt-tmp/<run>/`` whose run lock it can take at once
(its owner is dead), and leaves alone the folder of a run still holding its lock.
Loose entries directly under ``.frt-tmp/`` (an earlier frt's layout, with no
owner to ask) are removed once nothing in them changed for ``STALE_S`` seconds.
At its end a run also deletes every lock file under ``.locks/`` it can take at
once (each deleted while held, so nobody holds a deleted lock without knowing),
then the folders left empty; a lock another run holds stays. filelock ≥ 4 re-checks
after locking that the file was not deleted meanwhile and retries; with an older
filelock the rare loser of that race may fetch a blob twice, which is harmless
(every fetch writes its own temp file and renames a verified blob into place).
``verify_mirror`` reports
what is ``missing``, ``unknown`` or ``mismatched``, with expected and computed
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

import base64
import hashlib
import os
import re
import shutil
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .canonical import file_digest_b64, file_sha256_hex
from .errors import KernelUnavailable, UsageError
from .loader.integrity import Expected, check_variant_dir
from .loader import cache_dirs, is_offline, lock_root, repo_folder
from .variants import parse_variant, select_variants

__all__ = ["mirror_lock", "verify_mirror", "MirrorReport", "select_for_mirror", "cell_machines", "machine_label",
           "sweep_temp", "sweep_locks"]

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
    from .hardware import Hardware  # noqa: PLC0415

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


@dataclass(frozen=True)
class _Item:
    repo: str
    variant: str
    rel: str  # relative to build/<variant>/
    algorithm: str
    expected: str  # lock form: "sha256:<hex>" for metadata.json, else base64

    @property
    def blob(self) -> str | None:
        """The blob name when the lock's digest already gives the sha256."""
        if self.expected.startswith("sha256:"):
            return self.expected.split(":", 1)[1]
        if self.algorithm == "sha256":
            return base64.b64decode(self.expected).hex()
        return None

    def computed(self, hashes: dict) -> str:
        if self.expected.startswith("sha256:"):
            return "sha256:" + hashes["sha256"].hexdigest()
        return base64.b64encode(hashes[self.algorithm].digest()).decode("ascii")


def _items(pkg, variant: str) -> list[_Item]:
    lv = pkg.variants[variant]
    out = [_Item(pkg.repo, variant, "metadata.json", "sha256", lv.metadata_sha256)]
    out += [_Item(pkg.repo, variant, rel, lv.algorithm, d) for rel, d in sorted(lv.files.items())]
    return out


def _hash_copy(src: Path, dst: Path, algorithm: str) -> tuple[dict, int]:
    hashes = {"sha256": hashlib.sha256()}
    if algorithm != "sha256":
        hashes[algorithm] = hashlib.new(algorithm)
    n = 0
    with open(src, "rb") as fi, open(dst, "wb") as fo:
        while chunk := fi.read(_CHUNK):
            for h in hashes.values():
                h.update(chunk)
            fo.write(chunk)
            n += len(chunk)
        fo.flush()
        os.fsync(fo.fileno())
    return hashes, n


def _blob_ok(path: Path, item: _Item) -> bool:
    try:
        if item.expected.startswith("sha256:"):
            return "sha256:" + file_sha256_hex(path) == item.expected
        return file_digest_b64(path, item.algorithm) == item.expected
    except OSError:
        return False


# ---------------------------------------------------------------------------
# locks, runs and housekeeping (see the module docstring)


def _mkdirs(path: Path) -> None:
    """``mkdir -p``, again if a concurrent run's cleanup removed an (empty) parent meanwhile."""
    for _ in range(50):
        try:
            path.mkdir(parents=True, exist_ok=True)
            return
        except FileNotFoundError:
            continue
    path.mkdir(parents=True, exist_ok=True)


def _acquire(path: Path, timeout: float = -1):
    """A held ``filelock.FileLock`` on ``path`` (its folder made, and made again if a
    concurrent cleanup removed it between the mkdir and the open)."""
    from filelock import FileLock  # noqa: PLC0415

    for _ in range(50):
        _mkdirs(path.parent)
        lock = FileLock(str(path))
        try:
            lock.acquire(timeout=timeout)
            return lock
        except FileNotFoundError:
            continue
    raise OSError(f"could not create the lock file {path}: its folder keeps disappearing")


@contextmanager
def _holding(path: Path):
    lock = _acquire(path)
    try:
        yield lock
    finally:
        lock.release()


def _try_lock(path: Path):
    """The lock on ``path`` if nobody holds it now (not waiting), else None."""
    from filelock import FileLock, Timeout  # noqa: PLC0415

    lock = FileLock(str(path))
    try:
        lock.acquire(timeout=0)
    except (Timeout, OSError):
        return None
    return lock


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            path.unlink()
        except FileNotFoundError:
            pass


def _newest_mtime(path: Path) -> float:
    newest = path.lstat().st_mtime
    if path.is_dir() and not path.is_symlink():
        for dirpath, dirnames, filenames in os.walk(path):
            for n in dirnames + filenames:
                try:
                    newest = max(newest, os.lstat(os.path.join(dirpath, n)).st_mtime)
                except OSError:
                    pass
    return newest


class _Run:
    """One run's claim on its temp folder ``.frt-tmp/<run>/``: the run lock is taken
    before the folder exists and let go after it is gone."""

    def __init__(self, dest: Path):
        self.dest = dest
        while True:
            self.id = f"run-{os.getpid()}-{uuid.uuid4().hex[:12]}"
            self.lock_path = dest / LOCKS / RUNS / f"{self.id}.lock"
            self.lock = _acquire(self.lock_path)
            # The name is new, so only a lock sweep that caught the file between its creation and
            # our lock can have deleted it (a deleted lock guards nothing): then take another name.
            if self.lock_path.exists():
                break
            self.lock.release()
        self.tmp = dest / TMP / self.id

    def close(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)
        try:
            self.lock_path.unlink()
        except FileNotFoundError:
            pass
        self.lock.release()


def sweep_temp(dest: Path, *, keep: str | None = None, now: float | None = None) -> int:
    """Remove what dead runs left under ``DIR/.frt-tmp``; return how many entries went.

    A run folder goes when its run lock can be taken at once (its owner is gone);
    a loose entry (no owner) when nothing in it changed for ``STALE_S`` seconds.
    """
    tmp = Path(dest) / TMP
    try:
        entries = sorted(tmp.iterdir())
    except OSError:
        return 0
    now = time.time() if now is None else now
    removed = 0
    for entry in entries:
        if entry.name == keep:
            continue
        if _RUN_ID.match(entry.name):
            lock_path = Path(dest) / LOCKS / RUNS / f"{entry.name}.lock"
            try:
                lock_path.parent.mkdir(parents=True, exist_ok=True)
            except OSError:
                continue
            lock = _try_lock(lock_path)
            if lock is None:  # a live run's folder
                continue
            try:
                _remove(entry)
                lock_path.unlink(missing_ok=True)  # while held: see the module docstring
            finally:
                lock.release()
            removed += 1
        else:
            try:
                if now - _newest_mtime(entry) < STALE_S:
                    continue
            except OSError:
                continue
            _remove(entry)
            removed += 1
    return removed


def sweep_locks(dest: Path) -> int:
    """Delete every lock file under ``DIR/.locks`` that nobody holds (each while holding
    it), then the folders left empty; return how many lock files went."""
    root = Path(dest) / LOCKS
    if not root.is_dir():
        return 0
    removed = 0
    for dirpath, _dirs, files in os.walk(root, topdown=False):
        for name in sorted(files):
            path = Path(dirpath) / name
            if path.is_symlink() or not name.endswith(".lock"):
                continue
            lock = _try_lock(path)
            if lock is None:
                continue
            try:
                path.unlink(missing_ok=True)
                removed += 1
            finally:
                lock.release()
        try:
            os.rmdir(dirpath)  # only when empty
        except OSError:
            pass
    return removed


class _Mirror:
    """One run of ``mirror_lock`` over one directory."""

    def __init__(self, lock, dest: Path, root: Path, progress: Callable | None, tmp: Path):
        self.lock, self.dest, self.root = lock, dest, root
        self.progress = progress or (lambda event: None)
        self.report = MirrorReport(str(dest))
        self.problems: list[dict] = []
        self.tmp = tmp
        self.offline = is_offline()

    # -- sources ------------------------------------------------------------
    def _source(self, pkg, item: _Item) -> Path:
        """A local file holding the item's bytes (downloaded to the temp area if need be)."""
        rel = f"build/{item.variant}/{item.rel}"
        if pkg.source == "path":
            base = (self.root / pkg.path).resolve()
            src = base / rel
            if not os.path.realpath(src).startswith(str(base) + os.sep):
                raise _Fail(item, None, f"{pkg.path}/{rel} leaves the package folder")
            if not src.is_file():
                raise _Fail(item, None, f"{pkg.path}/{rel} not found in the path source")
            return src
        for cache in cache_dirs():
            src = cache / repo_folder(pkg.repo) / "snapshots" / pkg.revision / rel
            if src.is_file():
                return src
        if self.offline:
            raise _Fail(item, None, "not in the hub cache and the Hub is offline (HF_HUB_OFFLINE)")
        return self._download(pkg, rel, item)

    def _download(self, pkg, rel: str, item: _Item) -> Path:
        from huggingface_hub import hf_hub_download  # noqa: PLC0415

        staging = self.tmp / f"dl-{uuid.uuid4().hex}"
        try:
            return Path(hf_hub_download(pkg.repo, rel, repo_type="kernel", revision=pkg.revision,
                                        local_dir=staging, endpoint=os.environ.get("HF_ENDPOINT") or None))
        except Exception as exc:  # noqa: BLE001 - every Hub failure is a problem with its text
            shutil.rmtree(staging, ignore_errors=True)
            raise _Fail(item, None, f"download failed: {type(exc).__name__}: {exc}") from None

    # -- blobs and links ------------------------------------------------------
    def _lock_path(self, item: _Item) -> Path:
        key = item.blob or hashlib.sha256(f"{item.algorithm}:{item.expected}".encode()).hexdigest()
        return self.dest / LOCKS / repo_folder(item.repo) / f"{key}.lock"

    def blob(self, pkg, item: _Item) -> str:
        """Ensure the item's blob exists and verifies; return its name."""
        blobs = self.dest / repo_folder(pkg.repo) / "blobs"
        blobs.mkdir(parents=True, exist_ok=True)
        with _holding(self._lock_path(item)):
            if item.blob and _blob_ok(blobs / item.blob, item):
                self.report.present += 1
                self._emit(item, "present", 0)
                return item.blob
            src = self._source(pkg, item)
            try:
                _mkdirs(self.tmp)
                tmp = self.tmp / f"blob-{uuid.uuid4().hex}"
                try:
                    hashes, n = _hash_copy(src, tmp, item.algorithm)
                    got = item.computed(hashes)
                    if got != item.expected:
                        raise _Fail(item, got, f"source bytes do not match the lock (expected {item.expected}, "
                                               f"computed {got})")
                    name = hashes["sha256"].hexdigest()
                    os.replace(tmp, blobs / name)
                finally:
                    tmp.unlink(missing_ok=True)
            finally:
                if self.tmp in src.parents:
                    shutil.rmtree(next(p for p in src.parents if p.parent == self.tmp), ignore_errors=True)
        self.report.fetched += 1
        self.report.bytes += n
        self._emit(item, "fetched", n)
        return name

    def link(self, pkg, item: _Item, blob: str) -> None:
        folder = self.dest / repo_folder(pkg.repo)
        parts = ["snapshots", pkg.snapshot, "build", item.variant, *item.rel.split("/")]
        path = folder.joinpath(*parts)
        target = "../" * (len(parts) - 1) + f"blobs/{blob}"
        if path.is_symlink() and os.readlink(path) == target:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        _mkdirs(self.tmp)
        tmp = self.tmp / f"link-{uuid.uuid4().hex}"
        try:
            try:
                os.symlink(target, tmp)
            except OSError:  # no symlinks here (e.g. some Windows setups): a copy
                shutil.copyfile(folder / "blobs" / blob, tmp)
            os.replace(tmp, path)
        finally:
            if tmp.is_symlink() or tmp.exists():
                tmp.unlink()
        self.report.linked += 1

    def refs(self, pkg) -> None:
        refs = self.dest / repo_folder(pkg.repo) / "refs"
        refs.mkdir(parents=True, exist_ok=True)
        _write_if_changed(refs / f"v{pkg.version}", pkg.snapshot, self.tmp)
        if not (refs / "main").exists():
            _write_if_changed(refs / "main", pkg.snapshot, self.tmp)

    def _emit(self, item: _Item, action: str, n: int) -> None:
        self.progress({"event": "file", "repo": item.repo, "variant": item.variant, "path": item.rel,
                       "action": action, "bytes": n})

    # -- a whole package -----------------------------------------------------
    def package(self, pkg, variants: list[str]) -> None:
        for variant in variants:
            for item in _items(pkg, variant):
                try:
                    self.link(pkg, item, self.blob(pkg, item))
                except _Fail as f:
                    self.problems.append(f.problem(pkg))
                except OSError as exc:  # unreadable source, full disk, ...: this file fails, the rest go on
                    self.problems.append(_Fail(item, None, f"{exc.strerror or exc}: {exc.filename or ''}").problem(pkg))
        self.refs(pkg)
        self.report.packages.append({"repo": pkg.repo, "revision": pkg.revision, "snapshot": pkg.snapshot,
                                     "variants": list(variants)})


class _Fail(Exception):
    def __init__(self, item: _Item, computed: str | None, reason: str):
        super().__init__(reason)
        self.item, self.computed, self.reason = item, computed, reason

    def problem(self, pkg) -> dict:
        i = self.item
        return {"package": pkg.repo, "revision": pkg.revision, "variant": i.variant,
                "kind": "mismatched" if self.computed else "missing",
                "path": f"build/{i.variant}/{i.rel}", "expected": i.expected, "computed": self.computed,
                "reason": f"{pkg.repo} build/{i.variant}/{i.rel}: {self.reason}"}


def _write_if_changed(path: Path, text: str, tmpdir: Path) -> None:
    try:
        if path.read_text("utf-8") == text:
            return
    except OSError:
        pass
    _mkdirs(tmpdir)
    tmp = tmpdir / f"ref-{uuid.uuid4().hex}"
    tmp.write_text(text, "utf-8")
    os.replace(tmp, path)


# ---------------------------------------------------------------------------
# public


def mirror_lock(lock, dir, *, variants=None, all_variants: bool = False, hardware=None, machines=None,
                cells: bool = False, progress: Callable[[dict], None] | None = None, root=None) -> MirrorReport:
    """Fill ``dir`` with every locked file the selection needs (see the module docstring).

    ``root`` is the project root of the lock's path packages (default: found
    from the lockfile's place). Raises ``KernelUnavailable`` listing every file
    that could not be supplied, after supplying all the others.
    """
    from .loader import _as_lock  # noqa: PLC0415

    lock = _as_lock(lock)
    dest = Path(dir)
    if variants is None and not all_variants and hardware is None and not machines and not cells:
        from .hardware import Hardware  # noqa: PLC0415

        hardware = Hardware.detect()
    chosen, skipped = select_for_mirror(lock, variants=variants, all_variants=all_variants, hardware=hardware,
                                        machines=machines, cells=cells)
    dest.mkdir(parents=True, exist_ok=True)  # after the selection: a refused one writes nothing
    owner = _Run(dest)
    run = _Mirror(lock, dest, Path(root) if root else lock_root(lock), progress, owner.tmp)
    run.report.skipped = skipped
    try:
        run.report.cleaned["temp"] += sweep_temp(dest, keep=owner.id)  # space first: what killed runs left
        for repo, vs in chosen.items():
            run.package(lock.packages[repo], vs)
    finally:
        owner.close()
        run.report.cleaned["temp"] += sweep_temp(dest)
        run.report.cleaned["locks"] += sweep_locks(dest)
        try:
            (dest / TMP).rmdir()
        except OSError:
            pass
    if run.problems:
        raise KernelUnavailable(f"mirror {dest}: {len(run.problems)} file(s) could not be supplied:\n  "
                                + "\n  ".join(p["reason"] for p in run.problems), reasons=run.problems,
                                hints=["fix the source (or go online) and run `frt mirror` again; it resumes"])
    return run.report


def verify_mirror(lock, dir, *, variants=None, all_variants: bool = False, hardware=None) -> list[dict]:
    """Every problem of the mirror ``dir`` for ``lock``: ``{"kind": "missing" | "unknown" |
    "mismatched", "path", "expected", "computed", "reason"}``, paths relative to ``dir``."""
    from .loader import _as_lock  # noqa: PLC0415

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
        problems += _ref_problems(dest, folder, f"v{pkg.version}", pkg.snapshot)
    return problems


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
