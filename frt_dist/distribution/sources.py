"""Where a locked file's bytes come from: the one rule the loader (``frt_dist.loader.core``,
``frt_dist.loader.remote``), ``frt mirror DIR`` (``frt_dist.distribution.mirror``) and publishing to
an object store (``frt_dist.distribution.fleet``) follow.

**The places, in order.** (1) the mirror folder in force (a load only: ``mirror=``, ``FRT_MIRROR``,
``[tool.frt] mirror``: ``mirror_location``); (2) each hub cache, ``KERNELS_CACHE`` then
huggingface_hub's cache (``cache_dirs``); (3) a path package's project source; (4) the Hub at the locked commit, for a
Hub package only, and never offline (``HF_HUB_OFFLINE``, or a mirror in use: ``is_offline``).
An object-store mirror (``s3://``, ``file://``) replaces all four: it is asked for nothing the
lock does not name by digest.

**How a file is named in each.** A mirror and a hub cache share the hub-cache layout:
``<place>/kernels--<org>--<name>/snapshots/<snapshot>/build/<variant>/<file>`` (``repo_folder``;
the snapshot is the locked commit, or for a path package the first 40 hex digits of its content
digest). A path package's source: ``<project root>/<path>/build/<variant>/<file>``. The Hub:
``build/<variant>/<file>`` of the repo at the locked revision. An object store:
``<algorithm>/<hex>``, from the lock's own digest of the file (``LockedFile.object_key``).

**Verification.** No place is trusted. Whoever takes the bytes hashes them on their way into
where they are used and compares the digest with the lock's (``LockedFile.computed``, in the
lock's forms: ``sha256:<hex>`` for ``metadata.json`` and the publisher bundle, base64 of the
``digest-algorithm`` digest for the others): the loader in its verified store
(``frt_dist.loader.store.admit``, ``frt_dist.loader.remote``), ``frt mirror`` before a blob gets
its name, publish before an upload. That check stays with them (the store admits only hashed
bytes); this module only says where to look.

**Two differences, kept as parameters** (see ``locate_variant`` and ``locate_file``):

- *A load takes a variant, a copy takes a file.* A load takes the first place holding the
  variant's folder and checks that folder as one tree (a link leaving it is refused); it is never
  silently completed from another place when its files are wrong (only a hub-cache snapshot whose
  sole problems are missing files is completed from the Hub, once, online: an interrupted
  download). ``frt mirror`` and publish take each file from the first place holding it, since each
  file becomes its own blob or object, verified alone. So the Hub, too, is asked for a variant
  (into the hub cache, where the load then checks it) or for one file (into a private staging
  folder under the system temp folder, outside any mirror: a downloader writes by path).
- *A copy reads a path package from its source alone.* ``frt mirror`` and publish make the copies
  the others read; a path package is read from the project it was locked from, never from a copy
  of it in a hub cache (a stale or damaged copy there would fail the run while the source is at
  hand). A load reads copies first: a node has no project, and a verified copy is as good as
  the source.

What a variant's files are: ``locked_files`` (``metadata.json``, the files it declares, and the
publisher's bundle of a signed variant: a copy carries it) or ``expected_files`` (a load's: the
bundle is checked at lock time and never imported, so a load does not fetch it).
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .. import settings

__all__ = ["repo_folder", "cache_dirs", "is_offline", "hub_endpoint", "mirror_dir", "mirror_location", "location_of",
           "LockedFile", "locked_files", "expected_files", "new_hashes", "HashingWriter", "hash_copy", "Unsupplied",
           "NotFound", "locate_variant", "download_variant", "locate_file"]

_CHUNK = 1 << 20
_BYTECODE = ["*.pyc", "**/__pycache__/**"]


# ---------------------------------------------------------------------------
# the places


def repo_folder(repo: str, repo_type: str = "kernel") -> str:
    """The hub-cache folder of a repo, as huggingface_hub names it: ``kernels--<org>--<name>`` for a
    kernel repo, ``models--<org>--<name>`` for a model repo (a release: ``release_files``)."""
    return f"{repo_type}s--" + "--".join(repo.split("/"))


def _env(name: str, default: str) -> str:
    """The variable as huggingface_hub reads it (``os.getenv(name, default)``: set but empty is empty)."""
    got = settings.raw(name)
    return default if got is None else got


def _truthy(value: str | None) -> bool:
    return (value or "").strip().upper() in {"1", "ON", "YES", "TRUE"}


def is_offline(mirror: str | os.PathLike | None = None) -> bool:
    """Offline: a mirror is in use, or ``HF_HUB_OFFLINE`` is set (env, or already read by huggingface_hub)."""
    if mirror is not None:
        return True
    if _truthy(settings.raw("HF_HUB_OFFLINE")) or _truthy(settings.raw("TRANSFORMERS_OFFLINE")):
        return True
    constants = sys.modules.get("huggingface_hub.constants")
    return bool(getattr(constants, "HF_HUB_OFFLINE", False))


def cache_dirs() -> list[Path]:
    """Hub caches to look in: ``KERNELS_CACHE``, then the HF hub cache (same rule as huggingface_hub)."""
    out = []
    if settings.value("KERNELS_CACHE"):
        out.append(Path(settings.value("KERNELS_CACHE")))
    hf_home = os.path.expandvars(os.path.expanduser(_env(
        "HF_HOME", os.path.join(_env("XDG_CACHE_HOME", os.path.join(os.path.expanduser("~"), ".cache")),
                                "huggingface"))))
    legacy = _env("HUGGINGFACE_HUB_CACHE", os.path.join(hf_home, "hub"))
    hub = Path(os.path.expandvars(os.path.expanduser(_env("HF_HUB_CACHE", legacy))))
    if hub not in out:
        out.append(hub)
    return out


def mirror_dir(mirror=None, project=None) -> Path | None:
    """The mirror folder in force: ``mirror=``, else ``FRT_MIRROR``, else the project's ``[tool.frt]
    mirror``. An object-store URL is no folder: ``mirror_location`` gives it (a ``UsageError`` here)."""
    got = mirror_location(mirror, project)
    if isinstance(got, str):
        from ..errors import UsageError  # noqa: PLC0415

        raise UsageError(f"mirror {got} is an object-store URL, not a folder")
    return got


def mirror_location(mirror=None, project=None) -> Path | str | None:
    """The mirror in force (``mirror=``, else ``FRT_MIRROR``, else the project's ``[tool.frt] mirror``):
    a ``Path`` for a folder, the normalised URL (``str``) for an object store (``s3://``,
    ``file://``; ``docs/reference.md#object-stores``), ``None`` when there is none. A malformed URL
    is ``StoreAccess`` (exit 2)."""
    if mirror is not None:
        given = mirror
    elif settings.value("FRT_MIRROR"):
        given = settings.value("FRT_MIRROR")
    elif project is not None and project.mirror:
        given = project.mirror
    else:
        return None
    if "://" in os.fspath(given):  # only then: a folder's load imports nothing of the object-store code
        return location_of(given) or Path(given)
    return Path(given)


def location_of(text) -> str | None:
    """The normalised URL when ``text`` names an object store, else ``None`` (a folder).
    A malformed URL is ``StoreAccess`` (exit 2) naming it."""
    from .objstore import is_url, parse_location  # noqa: PLC0415

    if text is None or not is_url(os.fspath(text)):
        return None
    return parse_location(os.fspath(text)).url


def hub_endpoint() -> str | None:
    """The Hub's address (``HF_ENDPOINT``), ``None`` for huggingface_hub's default."""
    return settings.value("HF_ENDPOINT") or None


# ---------------------------------------------------------------------------
# a locked file, and its digest


@dataclass(frozen=True)
class LockedFile:
    """One file the lock names, with the lock's digest of it."""

    repo: str
    variant: str
    rel: str  # relative to build/<variant>/
    algorithm: str
    expected: str  # lock form: "sha256:<hex>" for metadata.json (and the bundle), else base64

    @property
    def path(self) -> str:
        return f"build/{self.variant}/{self.rel}"

    @property
    def blob(self) -> str | None:
        """The blob name when the lock's digest already gives the sha256."""
        if self.expected.startswith("sha256:"):
            return self.expected.split(":", 1)[1]
        if self.algorithm == "sha256":
            return base64.b64decode(self.expected).hex()
        return None

    @property
    def object_key(self) -> str:
        """The file's key in an object store (``frt_dist.distribution.objstore``): ``<algorithm>/<hex>``,
        from the lock's digest alone, so a node finds the bytes without trusting anything else."""
        from .objstore import locked_file_key  # noqa: PLC0415

        return locked_file_key(self.algorithm, self.expected)

    def computed(self, hashes: dict) -> str:
        """The digest of the bytes hashed into ``hashes`` (``new_hashes``), in the lock's form."""
        if self.expected.startswith("sha256:"):
            return "sha256:" + hashes["sha256"].hexdigest()
        return base64.b64encode(hashes[self.algorithm].digest()).decode("ascii")


def locked_files(pkg, variant: str) -> list[LockedFile]:
    """Every locked file of a package's variant: ``metadata.json``, the files it declares, and the
    publisher's bundle when the variant is signed (carried and verified like any other file)."""
    from ..provenance.publisher import BUNDLE  # noqa: PLC0415 - a load never needs it

    lv = pkg.variants[variant]
    out = [LockedFile(pkg.repo, variant, "metadata.json", "sha256", lv.metadata_sha256)]
    out += [LockedFile(pkg.repo, variant, rel, lv.algorithm, d) for rel, d in sorted(lv.files.items())]
    if lv.signature:
        out.append(LockedFile(pkg.repo, variant, BUNDLE, "sha256", lv.signature["bundle-sha256"]))
    return out


def expected_files(repo: str, variant: str, expected) -> list[LockedFile]:
    """The files a load takes of a variant (a ``frt_dist.distribution.integrity.Expected`` from the lock):
    ``metadata.json`` and the files it declares (the bundle is not imported, so not fetched)."""
    return [LockedFile(repo, variant, "metadata.json", "sha256", expected.metadata_sha256)] + \
        [LockedFile(repo, variant, rel, expected.algorithm, d) for rel, d in sorted(expected.files.items())]


def new_hashes(algorithm: str) -> dict:
    """``{"sha256": ..., algorithm: ...}``: what ``LockedFile.computed`` reads (the sha256 names a blob)."""
    hashes = {"sha256": hashlib.sha256()}
    if algorithm != "sha256":
        hashes[algorithm] = hashlib.new(algorithm)
    return hashes


class HashingWriter:
    """A writer for ``ObjectStore.get`` that hashes every chunk with ``algorithm`` (and sha256)
    into ``hashes`` and passes it on to ``out`` when one is given."""

    def __init__(self, algorithm: str, out=None):
        self.hashes = new_hashes(algorithm)
        self.out = out

    def write(self, chunk) -> None:
        for h in self.hashes.values():
            h.update(chunk)
        if self.out is not None:
            self.out.write(chunk)


def hash_copy(src: Path, out, algorithm: str) -> tuple[dict, int]:
    """Copy ``src`` into the writer ``out`` (``write``, ``sync``: a ``SafeDir.new_file``), hashing
    the bytes as they go. A read failure is the source's ``OSError``; a write failure the writer's."""
    sink = HashingWriter(algorithm, out)
    n = 0
    with open(src, "rb") as fi:
        while chunk := fi.read(_CHUNK):
            sink.write(chunk)
            n += len(chunk)
    out.sync()
    return sink.hashes, n


# ---------------------------------------------------------------------------
# a load: the first place holding the variant


class NotFound(Exception):
    """No place holds the variant (or the Hub would not give it): ``reason``, ``hints`` for the refusal."""

    def __init__(self, reason: str, hints: list[str] | None = None):
        super().__init__(reason)
        self.reason, self.hints = reason, hints


def _snapshot_in(base: Path, repo: str, snapshot: str, variant: str) -> tuple[Path, Path] | None:
    folder = base / repo_folder(repo)
    vdir = folder / "snapshots" / snapshot / "build" / variant
    return (vdir, folder) if vdir.is_dir() else None


def _path_variant(root: Path | None, variant: str, content: str | None) -> tuple[Path, Path] | None:
    if root is None:
        return None
    vdir = root / "build" / variant
    if not vdir.is_dir():
        return None
    if content is not None:
        from ..base.canonical import digest, tree_digests  # noqa: PLC0415

        if digest(tree_digests(root)) != content:
            return None  # the path source holds other content than the pinned revision
    return vdir, root


def download_variant(repo: str, revision: str, variant: str) -> tuple[Path, Path]:
    """Fetch ``build/<variant>/`` at the commit into the hub cache (a load's only network step):
    (the variant folder, its ``kernels--<org>--<name>`` tree). ``NotFound`` when the Hub fails."""
    from huggingface_hub import snapshot_download  # noqa: PLC0415

    from .hub import apply_timeout  # noqa: PLC0415

    apply_timeout()  # a command's FRT_HUB_TIMEOUT and FRT_HUB_DEADLINE (none for a library caller)
    try:
        snap = Path(snapshot_download(repo, repo_type="kernel", revision=revision,
                                      allow_patterns=[f"build/{variant}/*"], ignore_patterns=_BYTECODE,
                                      cache_dir=settings.value("KERNELS_CACHE") or None, endpoint=hub_endpoint()))
    except Exception as exc:
        raise NotFound(f"download of build/{variant}/ at {revision} failed: {type(exc).__name__}: {exc}") from None
    vdir = snap / "build" / variant
    if not vdir.is_dir():
        raise NotFound(f"revision {revision} has no build/{variant}/ on the Hub")
    return vdir, snap.parent.parent


def locate_variant(repo: str, revision: str, snapshot: str, variant: str, *, mirror: Path | None,
                   path_root: Callable[[], Path | None], path_content: str | None = None,
                   hub: bool, offline: bool) -> tuple[Path, Path, str]:
    """(variant folder, its tree, the place: ``"mirror" | "cache" | "path" | "hub"``) from the first
    place holding the variant's folder (see the module docstring). ``path_root`` finds a path
    package's source when first needed (a load from a mirror never looks); ``path_content``: the
    content digest the source must have (an author pin without lock facts); ``hub``: a Hub package.
    ``NotFound`` names every place looked in."""
    looked = []
    if mirror is not None:
        hit = _snapshot_in(mirror, repo, snapshot, variant)
        if hit:
            return (*hit, "mirror")
        looked.append(f"mirror {mirror}")
    for cache in cache_dirs():
        hit = _snapshot_in(cache, repo, snapshot, variant)
        if hit:
            return (*hit, "cache")
        looked.append(f"cache {cache}")
    root = path_root()
    hit = _path_variant(root, variant, path_content)
    if hit:
        return (*hit, "path")
    if root is not None:
        looked.append(f"path source {root}")
    if hub and not offline:
        return (*download_variant(repo, revision, variant), "hub")
    why = "offline (a mirror is in use)" if mirror is not None else "offline (HF_HUB_OFFLINE)"
    tail = f"; the Hub was not asked: {why}" if hub else ""
    raise NotFound(f"build/{variant}/ at revision {revision} not found in {', '.join(looked)}{tail}",
                   hints=["fill the mirror with `frt mirror DIR`, or go online"])


# ---------------------------------------------------------------------------
# a copy (`frt mirror DIR`, publish): the first place holding the file


class Unsupplied(Exception):
    """A locked file that could not be supplied: none found, or bytes not the locked ones
    (``computed`` then holds their digest)."""

    def __init__(self, item: LockedFile, computed: str | None, reason: str):
        super().__init__(reason)
        self.item, self.computed, self.reason = item, computed, reason

    def problem(self, pkg) -> dict:
        i = self.item
        return {"package": pkg.repo, "revision": pkg.revision, "variant": i.variant,
                "kind": "mismatched" if self.computed else "missing",
                "path": i.path, "expected": i.expected, "computed": self.computed,
                "reason": f"{pkg.repo} {i.path}: {self.reason}"}


def locate_file(pkg, item: LockedFile, *, project_root: Path, offline: bool,
                staging_prefix: str = "frt-mirror-run-") -> tuple[Path, str | None]:
    """A local file holding the item's bytes, and the private staging folder to remove after:
    a path package's source (alone), else the first hub cache holding it, else the Hub at the
    locked commit unless ``offline`` (downloaded into a folder made under the system temp folder,
    named ``staging_prefix…``, outside any mirror: a downloader writes by path, and no path inside a
    mirror is trusted). ``Unsupplied`` says why there is none."""
    rel = item.path
    if pkg.source == "path":
        base = (project_root / pkg.path).resolve()
        src = base / rel
        if not os.path.realpath(src).startswith(str(base) + os.sep):
            raise Unsupplied(item, None, f"{pkg.path}/{rel} leaves the package folder")
        if not src.is_file():
            raise Unsupplied(item, None, f"{pkg.path}/{rel} not found in the path source")
        return src, None
    for cache in cache_dirs():
        src = cache / repo_folder(pkg.repo) / "snapshots" / pkg.snapshot / rel
        if src.is_file():
            return src, None
    if offline:
        raise Unsupplied(item, None, "not in the hub cache and the Hub is offline (HF_HUB_OFFLINE)")
    from huggingface_hub import hf_hub_download  # noqa: PLC0415

    from .hub import apply_timeout  # noqa: PLC0415

    apply_timeout()  # a command's FRT_HUB_TIMEOUT and FRT_HUB_DEADLINE (none for a library caller)
    staging = tempfile.mkdtemp(prefix=staging_prefix)
    try:
        return Path(hf_hub_download(pkg.repo, rel, repo_type="kernel", revision=pkg.revision,
                                    local_dir=staging, endpoint=hub_endpoint())), staging
    except Exception as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise Unsupplied(item, None, f"download failed: {type(exc).__name__}: {exc}") from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
