"""A variant's ``metadata.json``: the facts frt reads from it (docs/reference.md#metadata).

The one reader of the file, used by ``frt lock`` (from the Hub or a path
package) and by the loader (from the bytes it verified). Unknown keys are
ignored, as `kernels` does; what frt relies on is checked and named by field.
Also where what a variant needs of the machine (``kernels-minver``,
``python-depends``) is judged for resolve: the same facts, read once.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import stat
from pathlib import Path

from ..base import names
from ..base.canonical import IGNORED_PARTS, sha256_hex
from ..base.record import replace
from ..errors import (
    KernelUnavailable,
    PackageDigestMismatch,
)
from ..system.variants import valid_variant_name
from .lockfile import LockedVariant
from .schema import JSONInvalid, json_loads

__all__ = ["parse_variant_metadata", "with_computed_digests", "requirement_problem", "variant_file_digests",
           "digest_mismatches", "PackageDigestMismatch", "MAX_METADATA_BYTES"]

MAX_METADATA_BYTES = 4 << 20  # a metadata.json is a few KB: one digest line per file

_NAME_RE = re.compile(r"^[a-z][-a-z0-9]*[a-z0-9]$")
_ID_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def parse_variant_metadata(raw: bytes, *, repo: str, variant: str) -> LockedVariant:
    """Read the facts frt needs from a ``metadata.json`` (unknown keys ignored, as `kernels` does)."""
    where = f"package {repo!r} variant {variant!r}: metadata.json"
    if not valid_variant_name(variant):
        raise KernelUnavailable(f"package {repo!r}: variant name {variant!r} escapes its directory (not a plain directory name)",
                                reasons=[{"package": repo, "reason": f"variant name escapes its directory: {variant!r}"}])

    def bad(field_path: str, msg: str) -> KernelUnavailable:
        return KernelUnavailable(f"{where}: {field_path}: {msg}",
                                 reasons=[{"package": repo, "variant": variant, "field": field_path, "reason": msg}])

    try:
        meta = json_loads(raw)
    except JSONInvalid as exc:
        raise bad("", f"not valid JSON: {exc}") from None
    if not isinstance(meta, dict):
        raise bad("", "expected a JSON object")
    for fld, rx, want in (("name", _NAME_RE, "a kernel name like 'my-kernel'"), ("id", _ID_RE, "a Python identifier")):
        if fld not in meta:
            # kernels 0.17 refuses such metadata too (its Metadata has `name` and `id` required): older
            # kernel-builder output, notably pre-0.17 torch-universal builds, lacks them
            raise KernelUnavailable(f"{where}: {fld}: missing (kernels >= 0.17 requires it)",
                                    reasons=[{"package": repo, "variant": variant, "field": fld, "reason": "missing"}],
                                    hints=[f"the variant was built by an older kernel-builder; ask the publisher to "
                                           f"rebuild it, or vendor it as a path package with `{fld}` added"])
        if not isinstance(meta[fld], str) or not rx.match(meta[fld]):
            raise bad(fld, f"expected {want}, got {meta[fld]!r}")
    name, mid = meta["name"], meta["id"]
    backend = meta.get("backend")
    if not isinstance(backend, dict) or not isinstance(backend.get("type"), str):
        raise bad("backend.type", "missing")
    archs = backend.get("archs", [])
    if archs is None:
        archs = []
    if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
        raise bad("backend.archs", "expected a list of strings")
    requires = _requirements(meta, bad)
    dg = meta.get("digest")
    if dg is None:
        # older kernel-builder output: the locker computes the digests from the files (digest-source "frt")
        return LockedVariant(variant, backend["type"], tuple(archs), "sha256:" + sha256_hex(raw), mid,
                             name.replace("-", "_"), "sha256", {}, digest_source="frt", **requires)
    if not isinstance(dg, dict):
        raise bad("digest", "expected an object")
    algorithm = dg.get("algorithm")
    if algorithm not in ("sha256", "sha512"):
        raise bad("digest.algorithm", f"expected sha256 or sha512, got {algorithm!r}")
    files = dg.get("files")
    if not isinstance(files, dict):
        raise bad("digest.files", "expected an object")
    for rel, val in files.items():
        why = names.problem("path", rel)
        if why or rel == "metadata.json":
            raise bad(f"digest.files.{rel}", f"path escapes the variant directory ({why or 'metadata.json is not a payload file'})")
        if not isinstance(val, str):
            raise bad(f"digest.files.{rel}", "expected a base64 digest string")
    return LockedVariant(variant, backend["type"], tuple(archs), "sha256:" + sha256_hex(raw), mid,
                         name.replace("-", "_"), algorithm, dict(sorted(files.items())), **requires)


_VERSION_RE = re.compile(r"^[0-9]+\.[0-9]+\.[0-9]+$")


def _requirements(meta: dict, bad) -> dict:
    """What the variant needs of the machine and of other packages, as kernels 0.17 reads it:
    ``kernels-minver`` ("X.Y.Z"), ``python-depends`` (names of kernels' python_depends.json)
    and ``kernel-depends`` (``{"repo-id", "version"}``), checked by field and recorded at lock."""
    minver = meta.get("kernels-minver")
    if minver is not None and (not isinstance(minver, str) or not _VERSION_RE.match(minver)):
        raise bad("kernels-minver", f"expected a version like '0.17.0', got {minver!r}")
    pydeps = meta.get("python-depends", [])
    if not isinstance(pydeps, list) or not all(isinstance(d, str) and d for d in pydeps):
        raise bad("python-depends", f"expected a list of dependency names, got {pydeps!r}")
    kdeps = meta.get("kernel-depends", [])
    if not isinstance(kdeps, list):
        raise bad("kernel-depends", f"expected a list, got {kdeps!r}")
    out = []
    for i, d in enumerate(kdeps):
        dep_repo = d.get("repo-id") if isinstance(d, dict) else None
        version = d.get("version") if isinstance(d, dict) else None
        if not isinstance(dep_repo, str) or names.problem("repo", dep_repo):
            raise bad(f"kernel-depends[{i}].repo-id", f"expected a repo id like 'org/name', got {dep_repo!r}")
        if isinstance(version, bool) or not isinstance(version, int) or version < 0:
            raise bad(f"kernel-depends[{i}].version", f"expected a version number, got {version!r}")
        out.append((dep_repo, version))
    return {"kernels_minver": minver, "python_depends": tuple(sorted(set(pydeps))), "kernel_depends": tuple(out)}


_NOT_PAYLOAD = ("metadata.json", "metadata.json.sigstore")


def _is_payload(rel: str) -> bool:
    """Whether kernels' digest rule covers ``rel`` (a posix path inside the variant directory)."""
    return not (rel in _NOT_PAYLOAD or rel.endswith(".pyc") or any(p in IGNORED_PARTS for p in rel.split("/")))


def variant_file_digests(vdir: Path, algorithm: str, *, label: str) -> dict[str, str]:
    """``{relpath: base64 digest}`` of the files of a variant directory on disk that kernels'
    digest rule covers, read in chunks. A symlink or anything but a regular file is refused
    (``KernelUnavailable`` naming ``label``/relpath): its bytes are not the package's own."""
    from ..base.canonical import scan_tree  # noqa: PLC0415

    out = {}
    for rel, path, link in scan_tree(vdir):
        if not _is_payload(rel):
            continue
        why = names.problem("path", rel)
        if why or link:
            what = "is a symlink (its target is not part of the package)" if link else f"is not a file name frt accepts: {why}"
            raise KernelUnavailable(f"{label}/{rel} {what}", reasons=[{"path": f"{label}/{rel}", "reason": what}])
        h = hashlib.new(algorithm)
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
            with os.fdopen(fd, "rb") as fh:
                if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                    raise KernelUnavailable(f"{label}/{rel} is not a regular file",
                                            reasons=[{"path": f"{label}/{rel}", "reason": "not a regular file"}])
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    h.update(chunk)
        except OSError as exc:
            raise KernelUnavailable(f"{label}/{rel} cannot be read: {exc.strerror or exc}",
                                    reasons=[{"path": f"{label}/{rel}", "reason": f"cannot be read: {exc.strerror or exc}"}]) from None
        out[rel] = base64.b64encode(h.digest()).decode("ascii")
    return dict(sorted(out.items()))


def digest_mismatches(declared: dict[str, str], computed: dict[str, str]) -> list[tuple[str, str | None, str | None]]:
    """``(relpath, expected, computed)`` for every file whose digest in ``metadata.json``
    (``declared``) is not the one computed from the files: a changed file, one the metadata does
    not list (expected ``None``: kernels' rule makes an extra file a violation) and a listed file
    that is not there (computed ``None``). Empty when they agree."""
    return [(rel, declared.get(rel), computed.get(rel)) for rel in sorted(set(declared) | set(computed))
            if declared.get(rel) != computed.get(rel)]


def with_computed_digests(v: LockedVariant, files: dict[str, bytes], *, repo: str) -> LockedVariant:
    """``v`` (parsed from a metadata.json without ``digest``) with the digests frt computed from
    the variant's ``files`` (relpath -> bytes): sha256, base64 of the raw digest, over the files
    kernels' digest rule covers (all but the top-level metadata.json and its .sigstore,
    ``__pycache__/`` and ``*.pyc``), so loading checks them exactly as it checks published ones."""
    out = {}
    for rel, data in files.items():
        if not _is_payload(rel):
            continue
        why = names.problem("path", rel)
        if why:
            raise KernelUnavailable(f"package {repo!r} variant {v.name!r}: file {rel!r}: {why}",
                                    reasons=[{"package": repo, "variant": v.name, "reason": f"bad file path {rel!r}"}])
        out[rel] = base64.b64encode(hashlib.sha256(data).digest()).decode("ascii")
    if not out:
        raise KernelUnavailable(f"package {repo!r} variant {v.name!r}: no files besides metadata.json",
                                reasons=[{"package": repo, "variant": v.name, "reason": "empty variant"}])
    return replace(v, algorithm="sha256", files=dict(sorted(out.items())), digest_source="frt")


# ---------------------------------------------------------------------------
# what a locked variant needs of the machine (checked by resolve, docs/reference.md#metadata)

_RELEASE_RE = re.compile(r"^([0-9]+)\.([0-9]+)(?:\.([0-9]+))?")


def _release(text: str | None) -> tuple[int, ...] | None:
    m = _RELEASE_RE.match(text or "")
    return None if m is None else tuple(int(g) for g in m.groups() if g is not None)


def requirement_problem(repo: str, v: LockedVariant, hw) -> str | None:
    """Why this machine cannot load variant ``v`` of ``repo`` although it selects it, or ``None``.

    ``kernels-minver`` is compared with the hardware's ``kernels`` software fact (the detected
    machine: the installed version as ``importlib.metadata`` reports it, patch included, as
    kernels' own MinverValidator compares it; declared hardware: its ``major.minor``, so only
    a newer minor is a "no"). ``python-depends`` is a fact of the Python environment, so it is
    checked only for the machine resolving (detected hardware), with kernels'
    ``python_depends.json`` mapping and ``importlib.util.find_spec`` as kernels does: a
    declared machine elsewhere says nothing about its environment. Nothing is imported."""
    short = repo.split("/", 1)[-1]
    if v.kernels_minver is not None:
        have_text = _installed("kernels") if hw.detected else hw.software.get("kernels")
        need, have = _release(v.kernels_minver), _release(have_text)
        if have is not None and have < need[:len(have)]:  # a declared major.minor compares as such
            return f"package {short} needs kernels >= {v.kernels_minver}; this system has {have_text}"
    if v.python_depends and hw.detected:
        return _python_depends_problem(short, v)
    return None


def _installed(dist: str) -> str | None:
    from importlib import metadata  # noqa: PLC0415

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _python_depends_problem(short: str, v: LockedVariant) -> str | None:
    """kernels' DependencyValidator, read as data (its python_depends.json), without importing kernels."""
    import importlib.util  # noqa: PLC0415 - only for a variant that declares python-depends

    spec = importlib.util.find_spec("kernels")
    table = None
    if spec is not None and spec.submodule_search_locations:
        path = Path(list(spec.submodule_search_locations)[0]) / "python_depends.json"
        try:
            table = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            table = None
    if not isinstance(table, dict):
        return f"package {short} needs Python dependencies ({', '.join(v.python_depends)}); kernels is not installed to map them"
    known = {**table.get("backends", {}).get(v.backend, {}), **table.get("general", {})}
    for dep in v.python_depends:
        info = known.get(dep)
        if info is None:
            return f"package {short} needs Python dependency {dep!r}, which kernels does not support on {v.backend}"
        for py in info.get("python", []):
            if py.get("import") and importlib.util.find_spec(py["import"]) is None:
                return (f"package {short} needs Python dependency {py.get('pkg', dep)!r}, not installed here "
                        f"(pip install {py.get('pkg', dep)})")
    return None
