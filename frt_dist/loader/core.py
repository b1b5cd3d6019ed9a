"""The one shared loader (``docs/reference.md#loading-and-guard``).

``hub_kernel(repo, version)`` and ``load_locked(lock, repo, variant)`` turn a package request into one
imported module, or a ``KernelUnavailable`` whose ``reasons`` list everything that stood in the way. Before
anything is imported a load decides the revision (the lockfile in force, else `kernels`' rule), trust, the
variant and its arch, where the bytes come from (``frt_dist.distribution.sources``), checks every file into
the verified store (``frt_dist.loader.store``) and the import id; then it imports from the store entry alone
(``frt_dist.loader.importer``). One module per repo per process; every refusal kept for
``unavailable_report()``. The checks in order, and the threat model: docs/design.md#loading-and-the-verified-store.

Nothing here imports torch, `kernels` or `huggingface_hub` at module import; a refused request imports
nothing at all.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import settings
from ..distribution.integrity import Expected, format_problems, real_dir
from ..distribution.sources import (
    NotFound,
    cache_dirs,
    download_variant,
    is_offline,
    locate_variant,
    mirror_dir,
    mirror_location,
    repo_folder,
)
from ..distribution.sources import hub_endpoint as _hub_endpoint
from ..errors import FrtError, KernelUnavailable
from ..project.discover import lock_root
from ..system.admissible import variant_problem
from ..system.hardware import Hardware
from ..system.variants import select_variants, valid_variant_name
from ._kernels_adapter import forget as forget_registered
from ._kernels_adapter import loading_context, read_metadata, register, validate
from .importer import forget as forget_module
from .importer import import_verified, package_dir
from .store import StoreUnusable, admit, open_store, rehash_requested

if TYPE_CHECKING:
    from ..documents.lockfile import LockedVariant
    from .store import Entry

__all__ = ["hub_kernel", "load_package", "load_locked", "prepare_locked", "unavailable_report", "LoadedPackage",
           "Ready", "CheckBatch", "pin_env_name", "record_unavailable",
           "mirror_dir", "mirror_location", "cache_dirs", "is_offline", "repo_folder", "lock_root"]

_PIN_CHARS = re.compile(r"[^A-Z0-9]")

PIN_PREFIX = "FRT_KERNEL_REV_"
_HEX40 = re.compile(r"^[0-9a-f]{40}$")
_SHA = re.compile(r"^sha256:[0-9a-f]{64}$")


# ---------------------------------------------------------------------------
# results and process-wide state


@dataclass(frozen=True)
class LoadedPackage:
    """One imported package variant and where it came from."""

    repo: str
    version: int
    revision: str
    variant: str
    module: Any = field(repr=False)
    module_id: str
    source: str  # "mirror" | "cache" | "path" | "hub"
    location: str  # the real path of the variant directory its bytes were verified from (in ``source``)
    trust: str  # the trust decision it was loaded under
    pinned: bool = False
    notes: tuple[str, ...] = ()
    request: str = ""
    store_path: str = ""  # the verified store entry's variant folder the module was imported from

    def offers(self, symbol: str) -> bool:
        """Does the module export a callable ``symbol`` (a capability probe)?"""
        return callable(getattr(self.module, symbol, None))


_LOCK = threading.RLock()
_LOADED: dict[str, LoadedPackage] = {}  # repo -> the one load of this process
_OWNED: dict[str, str] = {}  # sys.modules key -> repo that put it there
_UNAVAILABLE: list[dict] = []


def unavailable_report() -> list[dict]:
    """Every package this process asked for and could not get, in order:
    ``{"repo", "version", "revision", "variant", "message", "reasons"}``."""
    with _LOCK:
        return [dict(r, reasons=[dict(x) for x in r["reasons"]]) for r in _UNAVAILABLE]


def record_unavailable(repo: str, exc: FrtError, *, version=None, revision=None, variant=None) -> None:
    """Keep a refusal for ``unavailable_report()`` (also used for smoke failures)."""
    with _LOCK:
        _UNAVAILABLE.append({"repo": repo, "version": version, "revision": revision, "variant": variant,
                             "message": str(exc), "reasons": [dict(r) for r in exc.reasons]})


def _forget_all() -> None:
    """Test hook: forget every load of this process and unregister its modules."""
    with _LOCK:
        for mid in list(_OWNED):
            forget_module(mid)
        forget_registered([p.store_path for p in _LOADED.values() if p.store_path])
        _LOADED.clear()
        _OWNED.clear()
        _UNAVAILABLE.clear()


# ---------------------------------------------------------------------------
# environment facts (read without importing huggingface_hub)


def pin_env_name(repo: str) -> str:
    """``FRT_KERNEL_REV_<REPO>``: upper-cased, every non-alphanumeric → ``_``."""
    return PIN_PREFIX + _PIN_CHARS.sub("_", repo.upper())


def _as_lock(lock):
    from ..documents.lockfile import Lockfile  # noqa: PLC0415

    return Lockfile.of(lock)


# ---------------------------------------------------------------------------
# what the checks of several packages share


class CheckBatch:
    """What the checks of several packages share while nothing is imported in between
    (``frt_dist.load`` checks every package of a plan before it imports any): one
    listing of the ``sys.modules`` names for the import-id checks, and the real paths
    of the directories resolved so far (a mirror's own path is resolved once, not
    once per package). A single ``load_locked`` uses a batch of its own."""

    def __init__(self) -> None:
        self.real_dirs: dict[str, str] = {}
        self._names: str | None = None

    def module_names(self) -> str:
        """The keys of ``sys.modules``, one per line (module names hold no newline)."""
        if self._names is None:
            self._names = "\n".join(sys.modules)
        return self._names


# ---------------------------------------------------------------------------
# what to load


@dataclass
class _Want:
    """A fully decided request: which bytes, checked against what."""

    repo: str
    version: int
    revision: str
    variant: str
    source_kind: str  # "hub" | "path": where the package is published
    trust: str
    request: str
    expected: Expected | None = None  # None: the variant's own metadata digest (no lock, or pinned)
    facts: LockedVariant | None = None  # the variant's backend, archs, id: the lock's (None: its metadata's)
    module_id: str | None = None
    path_source: Callable[[], Path] | None = None  # finds a path package's source folder (path_root)
    pinned: bool = False
    # the kernel-depends it needs, checked (``Ready``) or loaded, dependencies first; ``None``: not
    # loaded from a lock, where kernel-depends are refused (nothing pins what they resolve to)
    deps: tuple | None = None
    # the lock's kernel-depends of this variant, ``(repo, version)`` pairs: checked against the
    # verified metadata.json before any dependency is even prepared (``None``: not from a lock)
    lock_depends: tuple | None = None

    @functools.cached_property
    def path_root(self) -> Path | None:
        """A path package's source folder, found when first needed: a load from a mirror or
        cache never looks at it (finding the project root costs a realpath)."""
        return self.path_source() if self.path_source is not None else None

    @property
    def snapshot(self) -> str:
        return self.revision.split(":", 1)[1][:40] if self.revision.startswith("sha256:") else self.revision


def _refuse(repo: str, reasons: list[str | dict], *, hints=None, **facts) -> KernelUnavailable:
    rs = []
    for r in reasons:
        d = dict(r) if isinstance(r, dict) else {"reason": r}
        rs.append({"package": repo, **facts, **d})
    text = "; ".join(r["reason"] for r in rs) if len(rs) <= 1 else "\n  " + "\n  ".join(r["reason"] for r in rs)
    return KernelUnavailable(f"package {repo!r} is unavailable: {text}", reasons=rs, hints=hints)


def _pin_value(repo: str) -> str | None:
    v = settings.raw(pin_env_name(repo))
    return v.strip() if v and v.strip() else None


def _check_pin_form(repo: str, pin: str) -> None:
    if not (_HEX40.match(pin) or _SHA.match(pin)):
        raise _refuse(repo, [f"{pin_env_name(repo)}={pin!r} is not a 40-hex commit or a sha256:<hex> content digest"])


def _want_from_lock(lock, repo: str, variant: str | None, hw: Hardware, *, allow_pins: bool,
                    root: Path | None) -> _Want:
    label = lock.path or f"lockfile of {lock.model}"
    pkg = lock.packages.get(repo)
    if pkg is None:
        raise _refuse(repo, [f"not locked in {label} (locked: {', '.join(sorted(lock.packages)) or 'none'})"],
                      hints=["add the package to the manifest and run `frt lock`"])
    if variant is None:
        choice = select_variants(pkg.variants, hw)
        if choice.selected is None:
            raise _refuse(repo, [f"no locked variant runs on this system ({hw.describe()}): "
                                 + "; ".join(f"{n}: {why}" for n, why in choice.rejected)], revision=pkg.revision)
        variant = choice.selected
    if variant not in pkg.variants:
        raise _refuse(repo, [f"variant {variant!r} is not locked (locked: {', '.join(sorted(pkg.variants))})"],
                      revision=pkg.revision)
    lv = pkg.variants[variant]
    revision, pinned, expected = pkg.revision, False, Expected.from_locked(lv)
    pin = _pin_value(repo)
    if pin is not None:
        if not allow_pins:
            raise _refuse(repo, [f"author pin {pin_env_name(repo)}={pin} is set but lockfile {label} is in force "
                                 f"(it pins {pkg.revision})"], revision=pkg.revision,
                          hints=["unset the pin, or pass allow_pins=True to load the pinned revision"])
        _check_pin_form(repo, pin)
        revision, pinned = pin, True
        if pin != pkg.revision:
            expected = None  # the pinned revision's own metadata declares its files
    path_source = None
    if pkg.source == "path" and pkg.path:
        path_source = functools.partial(_path_root, lock, root, pkg.path)
    return _Want(repo, pkg.version, revision, variant, pkg.source, pkg.trust,
                 f"{repo} version {pkg.version} at revision {revision} variant {variant} (lockfile {label})",
                 expected, lv if expected is not None else None,
                 lv.module_id if expected is not None else None, path_source, pinned)


def _path_root(lock, root: Path | None, rel: str) -> Path:
    return (Path(root) if root is not None else lock_root(lock)) / rel


# ---------------------------------------------------------------------------
# finding bytes


def _locate(want: _Want, mirror: Path | None, offline: bool) -> tuple[Path, Path, str]:
    """(variant dir, tree root, source name) from the first place that holds it
    (``frt_dist.distribution.sources.locate_variant``: the one rule of where bytes come from)."""
    try:
        return locate_variant(want.repo, want.revision, want.snapshot, want.variant, mirror=mirror,
                              path_root=lambda: want.path_root,
                              path_content=want.revision if want.pinned and want.expected is None else None,
                              hub=want.source_kind == "hub", offline=offline)
    except NotFound as exc:
        raise _refuse(want.repo, [exc.reason], revision=want.revision, hints=exc.hints) from None


def _download(want: _Want) -> tuple[Path, Path]:
    """Fetch ``build/<variant>/`` at the commit into the hub cache (the only network step)."""
    try:
        return download_variant(want.repo, want.revision, want.variant)
    except NotFound as exc:
        raise _refuse(want.repo, [exc.reason], revision=want.revision) from None


# ---------------------------------------------------------------------------
# checks on the bytes found


def _read_metadata(want: _Want, vdir: Path, data: bytes) -> dict:
    """The variant's metadata, from ``data``: the verified bytes (hashed by the check, held by the store)."""
    try:
        from ..documents.schema import json_loads  # noqa: PLC0415 - the bounded reader (JSONInvalid is a ValueError)

        meta = json_loads(data)
        if not isinstance(meta, dict):
            raise ValueError("not a JSON object")
        return meta
    except (OSError, ValueError) as exc:
        raise _refuse(want.repo, [f"build/{want.variant}/metadata.json: unreadable: {exc}"],
                      revision=want.revision) from None


def _self_declared(want: _Want, vdir: Path) -> None:
    """No lock facts for this revision: take archs, id and file digests from its metadata."""
    from ..documents.metadata import parse_variant_metadata  # noqa: PLC0415

    try:
        raw = (vdir / "metadata.json").read_bytes()
    except OSError as exc:
        raise _refuse(want.repo, [f"build/{want.variant}/metadata.json: {exc.strerror or exc}"],
                      revision=want.revision) from None
    try:
        lv = parse_variant_metadata(raw, repo=want.repo, variant=want.variant)
    except KernelUnavailable as exc:
        raise _refuse(want.repo, exc.reasons, revision=want.revision) from None
    if lv.digest_source == "frt":
        raise _refuse(want.repo, [{"field": "digest", "reason": f"build/{want.variant}/metadata.json declares no "
                                   "digest: nothing to check its files against without a lock"}],
                      revision=want.revision, hints=["lock the package with `frt lock`, which computes the digests"])
    # pinned to the bytes just parsed: the check then proves the metadata it hashes (and stores,
    # and takes the id from) is this one, not one swapped in after this read
    want.expected = Expected(lv.algorithm, dict(lv.files), "sha256:" + hashlib.sha256(raw).hexdigest())
    want.facts = lv
    want.module_id = lv.module_id


def _arch_notes(want: _Want, hw: Hardware) -> list[str]:
    """Refuse, before import, a variant that does not run on ``hw`` by the rule a receipt's cell
    is admitted with (``admissible.variant_problem``), so what load refuses is what resolve and
    the matrix refuse; the notes of an admitted variant (no archs declared: no claim checked)."""
    v = want.facts
    why = variant_problem(v, hw.backend, hw.arch)
    if why is None:
        return [] if v.archs else [f"{want.repo} variant {want.variant} declares no backend.archs; "
                                   "loaded without an arch claim"]
    if why.startswith("declares "):  # the arch is not admitted: the wording refusals have always had
        reason = {"reason": f"variant {want.variant} declares archs {', '.join(v.archs)}; "
                            f"device {hw.device_class} is {hw.arch}", "kind": "arch", "archs": list(v.archs),
                  "device": hw.arch}
    else:
        reason = {"reason": f"variant {want.variant} {why}; device {hw.device_class} is {hw.backend}",
                  "kind": "backend", "backend": v.backend, "device": hw.backend}
    raise _refuse(want.repo, [reason], revision=want.revision)


def _integrity(want: _Want, vdir: Path, tree: Path, source: str, offline: bool,
               batch: CheckBatch) -> tuple[Path, Path, str, bytes, Entry]:
    """Check the variant's files into the verified store; returns where they came from
    (the variant directory's real path, its tree, the source: a partial hub-cache snapshot
    of a Hub package is completed from the Hub once, online), the verified metadata bytes
    and the store entry to import from."""
    real_dirs = batch.real_dirs
    try:
        store = open_store()
    except StoreUnusable as exc:
        raise _refuse(want.repo, [{"reason": str(exc), "kind": "store"}], revision=want.revision,
                      hints=["fix the folder's owner and mode (chmod 700), "
                             "or point FRT_STORE at a private folder"]) from None
    mid = want.module_id if want.module_id is not None else ""

    def check(vdir: Path, tree: Path):
        try:
            return admit(vdir, want.expected, mid, tree_root=tree, prefix=f"build/{want.variant}/",
                         real_dirs=real_dirs, store=store)
        except StoreUnusable as exc:
            raise _refuse(want.repo, [{"reason": str(exc), "kind": "store"}], revision=want.revision) from None

    got = check(vdir, tree)
    problems = got.problems
    if (problems and source == "cache" and want.source_kind == "hub" and not offline
            and all(p["kind"] == "missing" for p in problems)):  # an interrupted download, not tampering
        vdir, tree = _download(want)
        source = "hub"
        real_dirs.clear()
        got = check(vdir, tree)
        problems = got.problems
    if problems:
        raise KernelUnavailable(
            f"package {want.repo!r} revision {want.revision}: {len(problems)} file(s) of build/{want.variant}/ "
            f"(from {source} {vdir}) do not match the locked digests; nothing was imported:\n  "
            + format_problems(problems),
            reasons=[{"package": want.repo, "revision": want.revision, "source": source, **p} for p in problems],
            hints=_integrity_hints(want, source, tree))
    # what the checks resolved on the way (one lstat per level), not a realpath of the whole path again
    return Path(real_dir(vdir, real_dirs)), tree, source, got.metadata, got.entry


def _integrity_hints(want: _Want, source: str, tree: Path) -> list[str]:
    """What to do about files that do not match the lock, by where they came from: a copy that can
    be fetched again (mirror, hub cache) was damaged or altered; a path package was changed; bytes
    just downloaded from the Hub at the locked commit can only differ if the lock's digests do."""
    import shlex  # noqa: PLC0415

    if source == "mirror":
        return [f"the mirror's copy is damaged or was altered: refill it with `frt mirror {shlex.quote(str(tree.parent))}` "
                "(it fetches the locked files again and checks them); never edit files in a mirror"]
    if source == "cache":
        snap = tree / "snapshots" / want.snapshot
        return [f"the cached snapshot is damaged or was altered: remove it (`rm -r {shlex.quote(str(snap))}`) "
                "and load again online to download it afresh"]
    if source == "path":
        return [f"the path package {want.path_root} is not what was locked: restore its files, or re-lock "
                "with `frt lock` if you changed it on purpose"]
    return [f"the Hub serves other files at {want.revision} than the lock's digests: the lockfile was edited "
            "or damaged; find out who edited it, then re-lock with `frt lock`"]


def _depends_problems(want: _Want, meta_bytes: bytes) -> list[dict]:
    """The lock's kernel-depends of the variant against what its verified ``metadata.json`` declares.

    The lock-digest does not say who wrote a lock: an edited lock can name any package as a
    dependency. The metadata's bytes were just checked against the lock's sha256 (and are the
    store's copy), so what they declare is what the publisher built against; any difference
    refuses the load before a dependency is prepared."""
    if want.lock_depends is None:
        return []
    from ..documents.metadata import parse_variant_metadata  # noqa: PLC0415

    where = f"build/{want.variant}/metadata.json"
    try:
        declared = parse_variant_metadata(meta_bytes, repo=want.repo, variant=want.variant).kernel_depends
    except KernelUnavailable as exc:
        return [{"reason": f"{where}: {exc.reasons[0]['reason'] if exc.reasons else exc}", "kind": "kernel-depends"}]
    locked = want.lock_depends

    def show(deps) -> str:
        return ", ".join(f"{r} version {v}" for r, v in sorted(set(deps))) or "none"

    if sorted(set(declared)) == sorted(set(locked)):
        return []
    return [{"reason": f"the lock's kernel-depends of variant {want.variant} ({show(locked)}) are not what the "
                       f"verified {where} declares ({show(declared)}); no dependency was loaded",
             "kind": "kernel-depends", "recorded": show(locked), "declared": show(declared)}]


def _module_problems(want: _Want, meta: dict, vdir: Path, batch: CheckBatch) -> list[str]:
    out = []
    mid = meta.get("id")
    if want.module_id is not None and mid != want.module_id:
        out.append(f"metadata id {mid!r} is not the locked module id {want.module_id!r}")
    if meta.get("kernel-depends") and want.deps is None:
        out.append("declares kernel-depends, which only a lock pins: lock the package with `frt lock`")
    name = str(meta.get("name", "")).replace("-", "_")
    # the integrity check passed: the variant holds exactly the regular files expected names
    files = want.expected.files
    if not ("__init__.py" in files or f"{name}/__init__.py" in files):
        out.append(f"build/{want.variant}/ has neither __init__.py nor {name}/__init__.py")
    if isinstance(mid, str):
        owner = _OWNED.get(mid)
        taken = None if owner is not None else mid if mid in sys.modules else _submodule_of(mid, batch)
        if taken is not None:
            out.append(f"import id {mid!r} would shadow sys.modules[{taken!r}], which frt did not load")
        elif owner is None and _is_importable_elsewhere(mid):
            out.append(f"import id {mid!r} would shadow the importable module {mid!r}")
        elif owner is not None and owner != want.repo:
            out.append(f"import id {mid!r} is already taken by package {owner!r}")
    return out


def _submodule_of(name: str, batch: CheckBatch) -> str | None:
    """A ``name.<x>`` key of ``sys.modules``, if there is one."""
    try:  # one search of the batch's listing instead of a loop over the keys
        names = batch.module_names()
        if not (names.startswith(name + ".") or f"\n{name}." in names):
            return None
    except TypeError:  # a non-str key someone put there: take the slow walk
        pass
    return next((k for k in list(sys.modules) if isinstance(k, str) and k.startswith(name + ".")), None)


def _is_importable_elsewhere(name: str) -> bool:
    if name in sys.builtin_module_names or name in getattr(sys, "stdlib_module_names", ()):
        return True
    from importlib.machinery import PathFinder  # noqa: PLC0415

    return PathFinder.find_spec(name) is not None


def _import(want: _Want, entry: Entry, mid: str, meta: dict, meta_bytes: bytes, deps: dict | None = None):
    """Import ``mid`` from the store entry (``frt_dist.loader.importer``), doing what
    ``kernels.get_local_kernel`` does for a local variant (``_kernels_adapter``); ``deps``
    (repo -> module) is what ``kernels.get_kernel_dep`` answers while the package loads."""
    try:  # `kernels` (and torch) are imported here, by the adapter's first call
        metadata = read_metadata(meta_bytes)
        validate(metadata, want.variant)
        files = entry.files
        package = package_dir(files, str(meta.get("name", "")).replace("-", "_"))
        module = import_verified(mid, entry.variant_dir, package, files, entry.algorithm,
                                 context=lambda: loading_context(deps or {}),
                                 seals=None if rehash_requested() else entry.seals)
        register(entry.variant_dir, metadata, module)
        return module
    except Exception as exc:
        forget_module(mid)
        raise _refuse(want.repo, [f"import of build/{want.variant}/ failed: {type(exc).__name__}: {exc}"],
                      revision=want.revision) from None


# ---------------------------------------------------------------------------
# the one path every load takes


def _conflict(want: _Want, have: LoadedPackage) -> KernelUnavailable | None:
    if (have.version, have.revision, have.variant) == (want.version, want.revision, want.variant):
        return None
    return _refuse(want.repo, [{"reason": f"already loaded in this process as {have.request}; "
                                          f"this request asks for {want.request}",
                                "kind": "conflict", "loaded": have.request, "requested": want.request}],
                   revision=want.revision,
                   hints=["one process loads one revision of a package; restart to switch revisions"])


@dataclass
class Ready:
    """A package that passed every check and is ready to import (``load()``).

    ``load`` can check several packages first and import only when all pass,
    so a refusal of one imports none of them.
    """

    want: _Want
    vdir: Path  # its real path (where the bytes were verified from)
    source: str
    module_id: str
    notes: tuple[str, ...]
    entry: Entry | None = None  # the verified store entry the import reads
    meta: dict = field(default_factory=dict)  # the verified metadata, parsed
    meta_bytes: bytes = b""
    location: str = ""  # where the bytes were verified from, when that is no folder (an object-store URL)

    @property
    def repo(self) -> str:
        return self.want.repo

    def load(self) -> LoadedPackage:
        want = self.want
        with _LOCK:
            try:
                have = _LOADED.get(want.repo)
                if have is not None:  # another thread got there first
                    err = _conflict(want, have)
                    if err:
                        raise err
                    return have
                # kernel-depends first (each checked before anything was imported, each loaded once)
                deps = {d.repo: (d.load() if isinstance(d, Ready) else d).module for d in want.deps or ()}
                module = _import(want, self.entry, self.module_id, self.meta, self.meta_bytes, deps)
            except KernelUnavailable as exc:
                record_unavailable(want.repo, exc, version=want.version, revision=want.revision,
                                   variant=want.variant)
                raise
            loaded = LoadedPackage(want.repo, want.version, want.revision, want.variant, module, self.module_id,
                                   self.source, self.location or str(self.vdir), want.trust, want.pinned, self.notes,
                                   want.request, str(self.entry.variant_dir))
            _LOADED[want.repo] = loaded
            _OWNED[self.module_id] = want.repo
            return loaded


def _prepare(want: _Want, hw: Hardware, mirror: Path | str | None,
             batch: CheckBatch | None = None) -> LoadedPackage | Ready:
    """Every check before import; the loaded package when this process already has it. ``mirror``
    is a folder, or an object-store URL (``frt_dist.loader.remote``: the variant's locked files
    are fetched straight into the verified store)."""
    batch = batch or CheckBatch()
    have = _LOADED.get(want.repo)
    if have is not None:
        err = _conflict(want, have)
        if err:
            raise err
        return have
    if not valid_variant_name(want.variant):
        raise _refuse(want.repo, [f"variant name {want.variant!r} is not a plain directory name"])
    notes = _arch_notes(want, hw) if want.expected is not None else []
    location = ""
    if isinstance(mirror, str):  # an object store: only what the lock names, fetched into the store
        from .remote import fetch_variant  # noqa: PLC0415

        entry, meta_bytes = fetch_variant(want, mirror)
        vdir, source, location = entry.variant_dir, "mirror", mirror
    else:
        offline = is_offline(mirror)
        vdir, tree, source = _locate(want, mirror, offline)
        if want.expected is None:
            _self_declared(want, vdir)
            notes = _arch_notes(want, hw)
        vdir, tree, source, meta_bytes, entry = _integrity(want, vdir, tree, source, offline, batch)
    meta = _read_metadata(want, vdir, meta_bytes)
    problems = _depends_problems(want, meta_bytes) + _module_problems(want, meta, vdir, batch)
    if problems:
        edited = any(isinstance(p, dict) and p.get("kind") == "kernel-depends" for p in problems)
        raise _refuse(want.repo, problems, revision=want.revision,
                      hints=["the lockfile names dependencies the package does not: find out who edited it "
                             "(`frt verify --mirror DIR` compares it with the mirrored metadata.json), "
                             "then re-lock with `frt lock`"] if edited else None)
    return Ready(want, vdir, source, meta["id"], tuple(notes), entry, meta, meta_bytes, location)


def _load(want: _Want, hw: Hardware, mirror: Path | None) -> LoadedPackage:
    got = _prepare(want, hw, mirror)
    return got.load() if isinstance(got, Ready) else got


def _run(repo: str, facts: dict, fn):
    with _LOCK:
        try:
            return fn()
        except KernelUnavailable as exc:
            record_unavailable(repo, exc, **facts)
            raise


# ---------------------------------------------------------------------------
# public entry points


def load_locked(lock, repo: str, variant: str | None = None, *, mirror=None, hardware: Hardware | None = None,
                allow_pins: bool = False, root: str | os.PathLike | None = None, project=None) -> LoadedPackage:
    """Load ``repo`` exactly as ``lock`` pins it.

    ``variant`` is the one the route decision names (default: the one
    ``select_variants`` picks for ``hardware``). ``root`` is the project root
    ``path`` packages are relative to (default: found from the lockfile's place).
    """
    got = prepare_locked(lock, repo, variant, mirror=mirror, hardware=hardware, allow_pins=allow_pins, root=root,
                         project=project)
    return got.load() if isinstance(got, Ready) else got


def prepare_locked(lock, repo: str, variant: str | None = None, *, mirror=None, hardware: Hardware | None = None,
                   allow_pins: bool = False, root: str | os.PathLike | None = None,
                   project=None, batch: CheckBatch | None = None, _chain: tuple = ()) -> LoadedPackage | Ready:
    """``load_locked`` without the import: every check, then a ``Ready`` to ``load()``
    (or the ``LoadedPackage`` this process already has). The planner's entry point;
    ``batch`` is shared by the packages it checks before importing any."""
    lock = _as_lock(lock)
    pkg = lock.packages.get(repo)
    facts = {"version": pkg.version if pkg else None, "revision": pkg.revision if pkg else None, "variant": variant}

    def go():
        hw = hardware or Hardware.detect()
        want = _want_from_lock(lock, repo, variant, hw, allow_pins=allow_pins, root=Path(root) if root else None)
        facts.update(revision=want.revision, variant=want.variant)
        want.lock_depends = tuple(getattr(lock.packages[repo].variants.get(want.variant), "kernel_depends", ()))
        want.deps = ()  # a locked load: kernel-depends are allowed, and prepared below
        # this variant first: its files and metadata.json verified, its declared kernel-depends
        # compared with the lock's (``_prepare``); only then is any dependency looked at, so a
        # package the lock alone names is never prepared, let alone loaded
        got = _prepare(want, hw, mirror_location(mirror, project), batch)
        if isinstance(got, Ready):
            want.deps = tuple(_prepare_dep(lock, repo, dep, _chain, mirror=mirror, hardware=hw,
                                           allow_pins=allow_pins, root=root, project=project, batch=batch)
                              for dep, _ in want.lock_depends)
        return got

    return _run(repo, facts, go)


def _prepare_dep(lock, repo: str, dep: str, chain: tuple, **kw) -> LoadedPackage | Ready:
    """A kernel-depends package of ``repo``, prepared from the same lock (a cycle, which `frt lock`
    refuses, is refused here too rather than recursed into)."""
    if dep in chain + (repo,):
        raise _refuse(repo, [f"kernel-depends cycle: {' -> '.join(chain + (repo, dep))}"])
    if dep not in lock.packages:
        raise _refuse(repo, [f"kernel-depends {dep!r} is not locked"], hints=["re-lock with `frt lock`"])
    return prepare_locked(lock, dep, _chain=chain + (repo,), **kw)


def hub_kernel(repo: str, version: int, *, trust: bool | None = None, lockfile=None, mirror=None,
               hardware: Hardware | None = None, allow_pins: bool = False):
    """The one shared loader: the module of ``repo`` at ``version`` (branch ``v<version>``).

    With a lockfile in force (``lockfile=`` or ``FRT_LOCK``) the package must be
    locked at that version and loads exactly as locked; without one it follows
    `kernels` (``get_kernel(version=...)``) plus frt's checks. Returns the same
    module object for the same package every time; raises ``KernelUnavailable``.
    """
    return load_package(repo, version, trust=trust, lockfile=lockfile, mirror=mirror, hardware=hardware,
                        allow_pins=allow_pins).module


def load_package(repo: str, version: int, *, trust: bool | None = None, lockfile=None, mirror=None,
                 hardware: Hardware | None = None, allow_pins: bool = False, project=None) -> LoadedPackage:
    """``hub_kernel`` returning the ``LoadedPackage`` (module, revision, source, notes)."""
    if lockfile is None and settings.value("FRT_LOCK"):
        lockfile = settings.value("FRT_LOCK")
    if lockfile is not None:
        lock = _as_lock(lockfile)
        pkg = lock.packages.get(repo)
        if pkg is not None and pkg.version != version:
            exc = _refuse(repo, [f"lockfile {lock.path or lock.model} locks version {pkg.version}; "
                                 f"version {version} was requested"], revision=pkg.revision)
            record_unavailable(repo, exc, version=version, revision=pkg.revision)
            raise exc
        return load_locked(lock, repo, mirror=mirror, hardware=hardware, allow_pins=allow_pins, project=project)
    facts = {"version": version, "revision": None, "variant": None}

    def go():
        hw = hardware or Hardware.detect()
        mdir = mirror_location(mirror, project)
        if isinstance(mdir, str):
            raise _refuse(repo, [{"kind": "store", "reason": f"mirror {mdir} is an object store, which frt reads only "
                                                             "through a lockfile (the lock is what names the bytes "
                                                             "to fetch and check); no lockfile is in force"}],
                          hints=["pass lockfile= (or set FRT_LOCK) to the lockfile that locks this package"])
        have = _LOADED.get(repo)
        if have is not None and have.version == version and _pin_value(repo) in (None, have.revision):
            return have
        if have is not None and have.version != version:  # refuse before asking anyone anything
            raise _refuse(repo, [{"reason": f"already loaded in this process as {have.request}; "
                                            f"this request asks for {repo} version {version} (no lockfile)",
                                  "kind": "conflict", "loaded": have.request,
                                  "requested": f"{repo} version {version} (no lockfile)"}])
        want = _want_unlocked(repo, version, trust, hw, mdir)
        facts.update(revision=want.revision, variant=want.variant)
        return _load(want, hw, mdir)

    return _run(repo, facts, go)


# ---------------------------------------------------------------------------
# no lockfile in force: kernels' rules plus frt's checks


def _want_unlocked(repo: str, version: int, trust: bool | None, hw: Hardware, mirror: Path | None) -> _Want:
    from ..documents.manifest import validate_repo_id  # noqa: PLC0415

    why = validate_repo_id(repo)
    if why:
        raise _refuse(repo, [f"invalid repo id: {why}"])
    offline = is_offline(mirror)
    trust_decision = _trust_unlocked(repo, trust, offline)
    pin = _pin_value(repo)
    if pin is not None:
        _check_pin_form(repo, pin)
    revision = pin or _branch_commit(repo, version, mirror, offline)
    want = _Want(repo, version, revision, "", "hub", trust_decision,
                 f"{repo} version {version} at revision {revision} (no lockfile)", pinned=pin is not None)
    names = _variant_names(want, mirror, offline)
    choice = select_variants(names, hw)
    if choice.selected is None:
        raise _refuse(repo, [f"no variant of revision {revision} runs on this system ({hw.describe()}): "
                             + ("; ".join(f"{n}: {w}" for n, w in choice.rejected) or "no variants")],
                      revision=revision)
    want.variant = choice.selected
    want.request = f"{repo} version {version} at revision {revision} variant {want.variant} (no lockfile)"
    return want


def _trust_unlocked(repo: str, trust: bool | None, offline: bool) -> str:
    if trust:
        return "caller"
    org = repo.split("/", 1)[0]
    if offline:
        raise _refuse(repo, [f"publisher {org!r} cannot be verified offline and no lockfile is in force"],
                      hints=["pass trust=True after reviewing the package, or load it through a lockfile"])
    from ..distribution.hub import HubClient  # noqa: PLC0415

    try:
        trusted = HubClient(endpoint=_hub_endpoint()).publisher_trusted(repo)
    except FrtError as exc:
        raise _refuse(repo, [f"publisher trust of {org!r} could not be verified: {exc}"]) from None
    if not trusted:
        raise _refuse(repo, [f"publisher {org!r} is not a trusted kernel publisher"],
                      hints=["pass trust=True after reviewing the package, or trust it in a manifest and lock it"])
    return "trusted-publisher"


def _branch_commit(repo: str, version: int, mirror: Path | None, offline: bool) -> str:
    if offline:
        bases = ([mirror] if mirror is not None else []) + cache_dirs()
        for base in bases:
            ref = base / repo_folder(repo) / "refs" / f"v{version}"
            try:
                commit = ref.read_text("utf-8").strip()
            except OSError:
                continue
            if commit:
                return commit
        raise _refuse(repo, [f"version {version} is not in {', '.join(str(b) for b in bases)} "
                             f"(no refs/v{version}) and the Hub is offline"])
    from ..distribution.hub import HubClient  # noqa: PLC0415

    try:
        return HubClient(endpoint=_hub_endpoint()).branch_commit(repo, version)
    except FrtError as exc:
        raise _refuse(repo, [str(exc)]) from None


def _variant_names(want: _Want, mirror: Path | None, offline: bool) -> list[str]:
    """The revision's variants: from the Hub online (as `kernels` does; a local
    snapshot may hold only some), else from the mirror's or cache's snapshot."""
    if offline:
        bases = ([mirror] if mirror is not None else []) + cache_dirs()
        for base in bases:
            build = base / repo_folder(want.repo) / "snapshots" / want.snapshot / "build"
            if build.is_dir():
                return sorted(p.name for p in build.iterdir() if p.is_dir())
        raise _refuse(want.repo, [f"revision {want.revision} is not in {', '.join(str(b) for b in bases)} "
                                  "and the Hub is offline"], revision=want.revision)
    from ..distribution.hub import HubClient  # noqa: PLC0415

    try:
        return HubClient(endpoint=_hub_endpoint()).variant_names(want.repo, want.revision)
    except FrtError as exc:
        raise _refuse(want.repo, [str(exc)], revision=want.revision) from None
