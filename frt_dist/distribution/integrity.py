"""Integrity of one build-variant directory, checked before anything in it is imported
(docs/reference.md#verified-store: integrity before import; problem kinds as docs/reference.md#verification).

A variant directory is compared with what it must hold: the ``metadata.json``
the lock pinned (by its sha256) and every file the metadata's ``digest`` names
(base64 of the raw digest, the `kernels` 0.17 form). The answer is one list of
problems, never the first one found::

    {"kind": "missing" | "unknown" | "mismatched", "path": ..., "expected": ..., "computed": ..., "reason": ...}

``expected``/``computed`` use the lock's own forms: ``sha256:<hex>`` for
``metadata.json``, the metadata's base64 for every other file; ``None`` where
there is nothing to compare (a missing file has no computed digest). A symlink
that resolves outside its tree (the package's source folder, or the
``kernels--org--name`` folder of a hub cache or mirror, whose snapshots link
into ``blobs/``) is reported as ``mismatched`` with a ``computed`` that names
the target and is never read. Files outside the digest rule (``__pycache__/``,
``*.pyc``, a top-level ``metadata.json.sigstore``) are ignored, as `kernels` does.

Standard library only: the loader runs this before it imports `kernels` or torch.
"""

from __future__ import annotations

import base64
import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from ..base.canonical import file_digest_b64 as file_digest
from ..base.canonical import hash_open_file, scan_tree

__all__ = ["Expected", "check_variant_dir", "file_digest", "format_problems", "real_dir", "METADATA", "IGNORED_TOP",
           "problem", "is_inside", "link_target", "open_checked", "missing_problems"]

METADATA = "metadata.json"
IGNORED_TOP = {"metadata.json.sigstore"}


@dataclass(frozen=True)
class Expected:
    """What a variant directory must contain.

    ``metadata_sha256`` is ``sha256:<hex>`` when a lock pinned the metadata;
    ``None`` when the metadata is taken as found (no lockfile in force, or an
    author pin) and only the files it declares are checked.
    """

    algorithm: str
    files: dict  # relpath -> base64 digest
    metadata_sha256: str | None = None

    @classmethod
    def from_locked(cls, variant) -> Expected:
        """From a ``frt_dist.documents.lockfile.LockedVariant``."""
        return cls(variant.algorithm, dict(variant.files), variant.metadata_sha256)


def problem(kind: str, path: str, expected, computed, reason: str) -> dict:
    return {"kind": kind, "path": path, "expected": expected, "computed": computed, "reason": reason}


def is_inside(target: str, root: str) -> bool:
    return target == root or target.startswith(root.rstrip(os.sep) + os.sep)


def link_target(path: str, real_dirs: dict) -> str:
    """``os.path.realpath(path)`` for a symlink, with each directory resolved once.

    A hub cache links ``snapshots/<sha>/<file>`` to ``../../../../blobs/<digest>``:
    leading ``..`` applied to an already resolved directory, then plain names.
    That form is resolved from the (cached) real directories plus one ``lstat``;
    anything else (absolute targets, ``..`` after a name, a link to a link) goes
    to ``realpath``.
    """
    target = os.readlink(path)
    parts = target.split("/")
    ups = 0
    while ups < len(parts) and parts[ups] == "..":
        ups += 1
    rest = parts[ups:]
    if target.startswith("/") or not rest or any(p in ("", ".", "..") for p in rest):
        return os.path.realpath(path)
    base = _real_dir(os.path.dirname(path), real_dirs)
    for _ in range(ups):
        base = os.path.dirname(base)
    head = _real_dir(os.path.join(base, *rest[:-1]), real_dirs)
    cand = os.path.join(head, rest[-1])
    if os.path.islink(cand):  # a link to a link: let realpath follow the chain
        return os.path.realpath(path)
    return cand


def real_dir(d: str | os.PathLike, real_dirs: dict) -> str:
    """``os.path.realpath(d)`` from the directories ``check_variant_dir`` resolved."""
    return _real_dir(os.fspath(d), real_dirs)


def _real_dir(d: str, real_dirs: dict) -> str:
    """``os.path.realpath(d)``, built from the nearest known real parent: a name that
    is not a symlink in a resolved directory resolves to that directory plus the name
    (one ``lstat`` per new level instead of one per component of the whole path)."""
    got = real_dirs.get(d)
    if got is None:
        parent, name = os.path.split(d)
        if name in ("", ".", "..") or parent == d:
            got = os.path.realpath(d)
        else:
            cand = os.path.join(_real_dir(parent, real_dirs), name)
            got = os.path.realpath(cand) if os.path.islink(cand) else cand
        real_dirs[d] = got
    return got


_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


def open_checked(path: str, link: bool, tree_root: str, real_dirs: dict) -> tuple[int | None, str | None]:
    """(a descriptor open on the regular file at ``path``, or None and why not).

    Symlinks must stay in the tree. The file is opened before it is looked at
    (``O_NONBLOCK``: a FIFO does not wait for a writer) and classified by
    ``fstat`` of what was opened, so checking and reading are one lookup.
    """
    if link:
        try:
            target = link_target(path, real_dirs)
        except OSError as exc:
            return None, f"unreadable: {exc.strerror or exc}"
        if not is_inside(target, tree_root):
            return None, f"symlink leaving its tree -> {target}"
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as exc:
        try:  # a socket, say, cannot be opened at all: still say what it is
            if not stat.S_ISREG(os.stat(path).st_mode):
                return None, "not a regular file"
        except OSError:
            pass
        return None, f"unreadable: {exc.strerror or exc}"
    try:
        mode = os.fstat(fd).st_mode
    except OSError as exc:
        os.close(fd)
        return None, f"unreadable: {exc.strerror or exc}"
    if not stat.S_ISREG(mode):
        os.close(fd)
        return None, "a directory where a file belongs" if stat.S_ISDIR(mode) else "not a regular file"
    return fd, None


def _digest_fd(fd: int, algorithm: str, keep: bool = False) -> tuple[bytes, bytes | None]:
    """(raw digest of the open file's bytes, the bytes when ``keep``); closes ``fd``."""
    with open(fd, "rb") as fh:
        if keep:
            data = fh.read()
            return hashlib.new(algorithm, data).digest(), data
        return hash_open_file(fh, algorithm).digest(), None


def missing_problems(expected: Expected, present, prefix: str) -> list[dict]:
    """A ``missing`` problem for ``metadata.json`` and each expected file not in ``present``."""
    out = []
    if METADATA not in present:
        out.append(problem("missing", prefix + METADATA, expected.metadata_sha256, None,
                            f"{prefix}{METADATA}: missing"))
    for rel in sorted(set(expected.files) - set(present)):
        out.append(problem("missing", prefix + rel, expected.files[rel], None,
                            f"{prefix}{rel}: missing (expected {expected.files[rel]})"))
    return out


def check_variant_dir(variant_dir: str | os.PathLike, expected: Expected, *, tree_root: str | os.PathLike | None = None,
                      prefix: str = "", real_dirs: dict[str, str] | None = None,
                      found: dict[str, bytes] | None = None) -> list[dict]:
    """Every problem of ``variant_dir`` against ``expected``, sorted by path.

    ``tree_root`` bounds where symlinks may point (default: the variant
    directory itself). ``prefix`` is prepended to each reported path (e.g.
    ``build/torch-cpu/``) so a report names files the way a reader finds them.
    ``real_dirs``, when given, keeps the real paths of the directories resolved
    on the way (``real_dir`` then answers for the variant directory from it);
    ``found``, when given, receives the bytes of ``metadata.json`` that were
    hashed, so a caller parses exactly what was checked without reading it again.
    """
    vdir = Path(variant_dir)
    tree = os.fspath(tree_root if tree_root is not None else vdir)
    # a caller's cache may already hold the tree's parents (a mirror checked for another package)
    root = _real_dir(tree, real_dirs) if real_dirs is not None else os.path.realpath(tree)
    problems: list[dict] = []
    if not vdir.is_dir():  # every file it should hold is missing
        missing = [(METADATA, expected.metadata_sha256)] + sorted(expected.files.items())
        return sorted((problem("missing", prefix + rel, want, None, f"{prefix}{rel}: missing (variant directory not found)")
                       for rel, want in missing), key=lambda p: p["path"])
    seen = set()
    if real_dirs is None:
        real_dirs = {tree: root}
    for rel, path, link in scan_tree(vdir):
        if rel in IGNORED_TOP:
            continue
        shown = prefix + rel
        seen.add(rel)
        is_meta = rel == METADATA
        want = expected.metadata_sha256 if is_meta else expected.files.get(rel)
        fd, why = open_checked(path, link, root, real_dirs)
        if fd is None:
            kind = "mismatched" if want is not None or is_meta else "unknown"
            problems.append(problem(kind, shown, want, why, f"{shown}: {why}"))
            continue
        if is_meta:
            raw, data = _digest_fd(fd, "sha256", keep=True)
            if found is not None:
                found[METADATA] = data
            if want is not None:
                got = "sha256:" + raw.hex()
                if got != want:
                    problems.append(problem("mismatched", shown, want, got,
                                             f"{shown}: digest mismatch (expected {want}, computed {got})"))
            continue
        got = base64.b64encode(_digest_fd(fd, expected.algorithm)[0]).decode("ascii")
        if want is None:
            problems.append(problem("unknown", shown, None, got,
                                     f"{shown}: not declared by the package (computed {got})"))
        elif got != want:
            problems.append(problem("mismatched", shown, want, got,
                                     f"{shown}: digest mismatch (expected {want}, computed {got})"))
    problems += missing_problems(expected, seen, prefix)
    problems.sort(key=lambda p: (p["path"], p["kind"]))
    return problems


def format_problems(problems: list[dict], limit: int = 20) -> str:
    """One line per problem (at most ``limit``, then a count)."""
    lines = [p["reason"] for p in problems[:limit]]
    if len(problems) > limit:
        lines.append(f"... and {len(problems) - limit} more")
    return "\n  ".join(lines)
