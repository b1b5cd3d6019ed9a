"""Canonical JSON and the digests built on it (docs/reference.md#digests-and-names).

Every frt digest is ``"sha256:" + hexdigest`` of the canonical JSON of a value,
so receipts written by other tools on other machines digest identically.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from pathlib import Path
from typing import Any

__all__ = [
    "short_digest",
    "short_digests",
    "canonical_json",
    "digest",
    "sha256_hex",
    "file_sha256_hex",
    "file_digest_b64",
    "tree_digests",
    "scan_tree",
    "IGNORED_PARTS",
]

_CHUNK = 1 << 20


def canonical_json(value: Any) -> bytes:
    """``json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False)`` as UTF-8."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def digest(value: Any) -> str:
    """``sha256:<hex>`` of the canonical JSON of ``value``."""
    return "sha256:" + hashlib.sha256(canonical_json(value)).hexdigest()


SHORT_HEX = 12  # hex digits of a digest shown in reports: `sha256:` + 12, everywhere


def short_digests(text: str) -> str:
    """``text`` with every full ``sha256:<64 hex>`` in it shortened to ``short_digest``'s form: the
    lines a person reads (``--json`` keeps every digest whole)."""
    import re  # noqa: PLC0415

    return re.sub(rf"(sha256:[0-9a-f]{{{SHORT_HEX}}})[0-9a-f]{{{64 - SHORT_HEX}}}(?![0-9a-f])", r"\1", text)


def short_digest(d) -> str:
    """The one short notation of frt's own digests in reports: ``sha256:`` and 12 hex digits
    (a commit: its first 12); anything else (a base64 file digest, None) as it is."""
    if not isinstance(d, str):
        return str(d)
    if d.startswith("sha256:"):
        return d[:7 + SHORT_HEX]
    return d[:SHORT_HEX] if len(d) == 40 and all(c in "0123456789abcdef" for c in d) else d


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


_SMALL = 1 << 20


def hash_open_file(fh, algorithm: str):
    """The hash object over the bytes of an open binary file: a small file in one read,
    a larger one streamed (``hashlib.file_digest``)."""
    if os.fstat(fh.fileno()).st_size <= _SMALL:
        return hashlib.new(algorithm, fh.read())  # read() goes to EOF, even if the file grew
    return hashlib.file_digest(fh, algorithm)


def _file_hash(path: str | os.PathLike, algorithm: str):
    with open(path, "rb") as fh:
        return hash_open_file(fh, algorithm)


def file_sha256_hex(path: str | os.PathLike, algorithm: str = "sha256") -> str:
    """Hex digest of a file's bytes."""
    return _file_hash(path, algorithm).hexdigest()


def file_digest_b64(path: str | os.PathLike, algorithm: str = "sha256") -> str:
    """The ``metadata.json`` digest form: base64 of the raw digest bytes."""
    return base64.b64encode(_file_hash(path, algorithm).digest()).decode("ascii")


# Files that never take part in a tree digest (the `kernels` convention).
IGNORED_PARTS = ("__pycache__",)


def scan_tree(root: str | os.PathLike) -> list[tuple[str, str, bool]]:
    """Every file, symlink and special file under ``root`` that the digest rule covers,
    as sorted (posix relpath, path, is a symlink).

    ``__pycache__`` (file or folder) and ``*.pyc`` are left out, as `kernels` does; a
    symlinked directory is an entry, never entered. One ``scandir`` per directory and
    no ``stat`` per entry: what a directory holds comes from the directory itself.
    A directory that cannot be listed contributes nothing (its files then show up as
    missing to whoever expected them).
    """
    out: list[tuple[str, str, bool]] = []
    stack = [(os.fspath(root), "")]
    while stack:
        where, base = stack.pop()
        try:
            with os.scandir(where) as it:
                entries = list(it)
        except OSError:
            continue
        for e in entries:
            name = e.name
            if name in IGNORED_PARTS:
                continue
            try:
                link = e.is_symlink()
                is_dir = not link and e.is_dir(follow_symlinks=False)
            except OSError:
                link = is_dir = False
            if is_dir:
                stack.append((e.path, f"{base}{name}/"))
            elif not name.endswith(".pyc"):
                out.append((base + name, e.path, link))
    out.sort()
    return out


def tree_digests(root: Path) -> dict[str, str]:
    """``{relpath: sha256 hex}`` over every file under ``root`` (path-package revision input)."""
    return {rel: file_sha256_hex(p) for rel, p, _ in scan_tree(root)}
