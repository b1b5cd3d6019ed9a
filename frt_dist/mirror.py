"""``frt mirror`` and ``frt verify --mirror``: an offline copy of every locked file
(SPEC §3 "Mirror", §4, §8.8, §8.9).

A mirror is a directory laid out as a Hugging Face hub cache, so that plain
`kernels` with ``HF_HUB_OFFLINE=1 KERNELS_CACHE=DIR`` loads from it too::

    DIR/kernels--<org>--<name>/
        blobs/<sha256 hex of the bytes>              each file's bytes, stored once
        snapshots/<snapshot>/build/<variant>/<file>  relative symlink into blobs/ (a copy where links are unavailable)
        refs/v<N>                                    the snapshot name (no newline); refs/main too when absent
    DIR/.locks/…                                     per-blob lock files
    DIR/.frt-tmp/…                                   in-flight temp files (empty when idle)

``<snapshot>`` is the locked commit, or for a path package the first 40 hex
digits of its content digest (``LockedPackage.snapshot``).

``mirror_lock`` copies (path packages) or downloads (Hub packages, at the
locked commit; from the local hub cache first) each file the selection needs.
Every blob is verified against the locked digest before it becomes visible
(temp file, then ``os.replace``); a blob already present and verified is not
fetched again, so an interrupted run resumes; a ``filelock.FileLock`` per blob
makes concurrent runs on one DIR fetch each blob once. ``verify_mirror`` reports
what is ``missing``, ``unknown`` or ``mismatched``, with expected and computed
digests, without importing torch or `kernels`.

Selection (both functions): ``variants=[...]`` names variants; ``all_variants``
takes every locked variant; else ``hardware`` (``mirror_lock`` detects it when
not given) picks the variant each package selects. ``verify_mirror`` without
any of these checks the variants the mirror holds (a package it holds none of
is reported missing in full), so it never needs the running device.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .canonical import file_digest_b64, file_sha256_hex
from .errors import KernelUnavailable, UsageError
from .loader.integrity import Expected, check_variant_dir
from .loader import cache_dirs, is_offline, lock_root, repo_folder
from .variants import select_variants

__all__ = ["mirror_lock", "verify_mirror", "MirrorReport", "select_for_mirror"]

_CHUNK = 1 << 20
TMP = ".frt-tmp"
LOCKS = ".locks"


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

    def to_dict(self) -> dict:
        return {"dir": self.dir, "packages": self.packages, "fetched": self.fetched, "present": self.present,
                "linked": self.linked, "bytes": self.bytes, "skipped": self.skipped}


# ---------------------------------------------------------------------------
# selection


def select_for_mirror(lock, *, variants=None, all_variants: bool = False, hardware=None,
                      mirror: Path | None = None) -> tuple[dict[str, list[str]], list[dict]]:
    """({repo: [variant, ...]}, skipped) for a selection (see the module docstring)."""
    if variants is not None and all_variants:
        raise UsageError("--variant and --all-variants exclude each other")
    chosen, skipped = {}, []
    if variants is not None:
        names = list(dict.fromkeys(variants))
        known = {v for p in lock.packages.values() for v in p.variants}
        unknown = [v for v in names if v not in known]
        if unknown:
            raise UsageError(f"--variant: {', '.join(unknown)} is not a locked variant "
                             f"(locked: {', '.join(sorted(known))})")
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
        elif hardware is not None:
            choice = select_variants(pkg.variants, hardware)
            if choice.selected:
                chosen[repo] = [choice.selected]
            else:
                skipped.append({"repo": repo, "reason": f"no locked variant runs on {hardware.describe()}"})
        else:  # verify: what the mirror holds
            build = (mirror / repo_folder(repo) / "snapshots" / pkg.snapshot / "build") if mirror else None
            held = sorted(p.name for p in build.iterdir() if p.name in pkg.variants) if build and build.is_dir() else []
            chosen[repo] = held or sorted(pkg.variants)
    return chosen, skipped


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


class _Mirror:
    """One run of ``mirror_lock`` over one directory."""

    def __init__(self, lock, dest: Path, root: Path, progress: Callable | None):
        self.lock, self.dest, self.root = lock, dest, root
        self.progress = progress or (lambda event: None)
        self.report = MirrorReport(str(dest))
        self.problems: list[dict] = []
        self.tmp = dest / TMP
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
    def _lock_for(self, item: _Item):
        from filelock import FileLock  # noqa: PLC0415

        key = item.blob or hashlib.sha256(f"{item.algorithm}:{item.expected}".encode()).hexdigest()
        d = self.dest / LOCKS / repo_folder(item.repo)
        d.mkdir(parents=True, exist_ok=True)
        return FileLock(str(d / f"{key}.lock"))

    def blob(self, pkg, item: _Item) -> str:
        """Ensure the item's blob exists and verifies; return its name."""
        blobs = self.dest / repo_folder(pkg.repo) / "blobs"
        blobs.mkdir(parents=True, exist_ok=True)
        with self._lock_for(item):
            if item.blob and _blob_ok(blobs / item.blob, item):
                self.report.present += 1
                self._emit(item, "present", 0)
                return item.blob
            src = self._source(pkg, item)
            try:
                self.tmp.mkdir(parents=True, exist_ok=True)
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
        self.tmp.mkdir(parents=True, exist_ok=True)
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
    tmpdir.mkdir(parents=True, exist_ok=True)
    tmp = tmpdir / f"ref-{uuid.uuid4().hex}"
    tmp.write_text(text, "utf-8")
    os.replace(tmp, path)


# ---------------------------------------------------------------------------
# public


def mirror_lock(lock, dir, *, variants=None, all_variants: bool = False, hardware=None,
                progress: Callable[[dict], None] | None = None, root=None) -> MirrorReport:
    """Fill ``dir`` with every locked file the selection needs (see the module docstring).

    ``root`` is the project root of the lock's path packages (default: found
    from the lockfile's place). Raises ``KernelUnavailable`` listing every file
    that could not be supplied, after supplying all the others.
    """
    from .loader import _as_lock  # noqa: PLC0415

    lock = _as_lock(lock)
    dest = Path(dir)
    dest.mkdir(parents=True, exist_ok=True)
    if variants is None and not all_variants and hardware is None:
        from .hardware import Hardware  # noqa: PLC0415

        hardware = Hardware.detect()
    chosen, skipped = select_for_mirror(lock, variants=variants, all_variants=all_variants, hardware=hardware)
    run = _Mirror(lock, dest, Path(root) if root else lock_root(lock), progress)
    run.report.skipped = skipped
    for repo, vs in chosen.items():
        run.package(lock.packages[repo], vs)
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
