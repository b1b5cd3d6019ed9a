"""Canonical JSON and the digests built on it (SPEC §3, "Digests and names").

Every frt digest is ``"sha256:" + hexdigest`` of the canonical JSON of a value,
so receipts written by other tools on other machines digest identically.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from pathlib import Path
from typing import Any, Iterable

__all__ = [
    "canonical_json",
    "digest",
    "sha256_hex",
    "file_sha256_hex",
    "file_digest_b64",
    "tree_digests",
    "IGNORED_PARTS",
]

_CHUNK = 1 << 20


def canonical_json(value: Any) -> bytes:
    """``json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False)`` as UTF-8."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def digest(value: Any) -> str:
    """``sha256:<hex>`` of the canonical JSON of ``value``."""
    return "sha256:" + hashlib.sha256(canonical_json(value)).hexdigest()


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def file_sha256_hex(path: str | os.PathLike, algorithm: str = "sha256") -> str:
    """Hex digest of a file's bytes, streamed (``hashlib.file_digest``)."""
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, algorithm).hexdigest()


def file_digest_b64(path: str | os.PathLike, algorithm: str = "sha256") -> str:
    """The ``metadata.json`` digest form: base64 of the raw digest bytes."""
    with open(path, "rb") as fh:
        raw = hashlib.file_digest(fh, algorithm).digest()
    return base64.b64encode(raw).decode("ascii")


# Files that never take part in a tree digest (the `kernels` convention).
IGNORED_PARTS = ("__pycache__",)


def _ignored(rel: str) -> bool:
    parts = rel.split("/")
    return any(p in IGNORED_PARTS for p in parts) or rel.endswith(".pyc")


def iter_tree(root: Path) -> Iterable[tuple[str, Path]]:
    """Every regular file (and symlink) under ``root`` as (posix relpath, path), sorted."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if d not in IGNORED_PARTS)
        # a symlinked directory is listed in dirnames but not walked into; report it as a file entry
        for d in list(dirnames):
            p = Path(dirpath) / d
            if p.is_symlink():
                dirnames.remove(d)
                filenames.append(d)
        for f in filenames:
            p = Path(dirpath) / f
            rel = p.relative_to(root).as_posix()
            if not _ignored(rel):
                out.append((rel, p))
    out.sort()
    return out


def tree_digests(root: Path) -> dict[str, str]:
    """``{relpath: sha256 hex}`` over every file under ``root`` (path-package revision input)."""
    return {rel: file_sha256_hex(p) for rel, p in iter_tree(root)}
