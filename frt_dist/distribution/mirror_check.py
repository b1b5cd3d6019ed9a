"""``frt verify --mirror``: what a mirror folder holds against the lock, as ``missing``,
``unknown`` or ``mismatched``, with expected and computed digests, without importing torch or
`kernels`.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

from ..provenance.publisher import BUNDLE
from .integrity import Expected, check_variant_dir
from .mirror_select import select_for_mirror
from .sources import repo_folder

__all__ = ["verify_mirror", "read_mirrored", "bundle_problems"]


def verify_mirror(lock, dir, *, variants=None, all_variants: bool = False, hardware=None) -> list[dict]:
    """Every problem of the mirror ``dir`` for ``lock``: ``{"kind": "missing" | "unknown" |
    "mismatched", "path", "expected", "computed", "reason"}``, paths relative to ``dir``."""
    from ..documents.lockfile import Lockfile  # noqa: PLC0415

    lock = Lockfile.of(lock)
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
            problems += bundle_problems(dest, folder, prefix, pkg, v)
        problems += _ref_problems(dest, folder, f"v{pkg.version}", pkg.snapshot)
    return problems


def read_mirrored(dest: Path, folder: str, path: str) -> bytes | None:
    """The bytes of ``dest/path`` when it resolves to a regular file inside ``dest/folder`` (a
    snapshot entry links into that folder's ``blobs/``); ``None`` when it is absent, or a link that
    leaves the package's folder (nothing outside it is read)."""
    try:
        real = os.path.realpath(dest / path)
        if not real.startswith(os.path.realpath(dest / folder) + os.sep):
            return None
        fd = os.open(real, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            return None
        return fh.read((1 << 20) + 1)


def bundle_problems(dest: Path, folder: str, prefix: str, pkg, variant: str) -> list[dict]:
    """A signed variant's ``metadata.json.sigstore`` in the mirror: missing, or not the locked bytes."""
    sig = pkg.variants[variant].signature
    if not sig:
        return []
    path = prefix + BUNDLE
    data = read_mirrored(dest, folder, path)
    who = f"{pkg.repo} variant {variant}: the publisher signature (signed by {sig['identity']})"
    if data is None:
        present = os.path.lexists(dest / path)
        return [{"kind": "mismatched" if present else "missing", "path": path, "expected": sig["bundle-sha256"],
                 "computed": "a link leaving the package folder, or not a file" if present else None,
                 "reason": f"{path}: {who} is {'not a regular file inside the mirror' if present else 'missing from the mirror'}"}]
    got = "sha256:" + hashlib.sha256(data).hexdigest()
    if got != sig["bundle-sha256"]:
        return [{"kind": "mismatched", "path": path, "expected": sig["bundle-sha256"], "computed": got,
                 "reason": f"{path}: {who} is not the locked bundle"}]
    return []


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
