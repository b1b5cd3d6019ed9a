"""A variant's ``metadata.json``: the facts frt reads from it (SPEC §1, §3).

The one reader of the file, used by ``frt lock`` (from the Hub or a path
package) and by the loader (from the bytes it verified). Unknown keys are
ignored, as `kernels` does; what frt relies on is checked and named by field.
"""

from __future__ import annotations

import re

from . import names
from ._schema import JSONInvalid, json_loads
from .canonical import sha256_hex
from .errors import KernelUnavailable
from .lockfile import LockedVariant
from .variants import valid_variant_name

__all__ = ["parse_variant_metadata"]

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
    name = meta.get("name")
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise bad("name", f"expected a kernel name like 'my-kernel', got {name!r}")
    mid = meta.get("id")
    if not isinstance(mid, str) or not _ID_RE.match(mid):
        raise bad("id", f"expected a Python identifier, got {mid!r}")
    backend = meta.get("backend")
    if not isinstance(backend, dict) or not isinstance(backend.get("type"), str):
        raise bad("backend.type", "missing")
    archs = backend.get("archs", [])
    if archs is None:
        archs = []
    if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
        raise bad("backend.archs", "expected a list of strings")
    dg = meta.get("digest")
    if not isinstance(dg, dict):
        raise bad("digest", "missing: frt cannot verify the variant's files without it")
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
                         name.replace("-", "_"), algorithm, dict(sorted(files.items())))
