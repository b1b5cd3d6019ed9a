"""The ``[release]`` record of a lockfile (a release is read by ``frt_dist.lock.release``): how a lock that consumes a Hub release
writes it and reads it back, and how its receipts are told from the project's own (their labels start
``release/<org>/<name>/``). A leaf module: the lockfile reader and ``frt verify`` need it without the
machinery that fetches a release."""

from __future__ import annotations

import re

from ..base import names

__all__ = ["NO_POLICY", "label_prefix", "is_release_label", "document_table", "read_table", "release_receipts",
           "shown"]

NO_POLICY = ("a release's receipts need a policy naming their signers: the manifest has no [trust.receipts] "
             "(review the release's signers, then `frt release trust`)")
_HEX40 = re.compile(r"^[0-9a-f]{40}$")


def label_prefix(repo: str) -> str:
    """The receipt label prefix of a release's files in a lock (``release/<org>/<name>/``)."""
    return f"release/{repo}/"


def is_release_label(lock, label: str) -> bool:
    rel = lock.release
    return bool(rel) and isinstance(label, str) and label.startswith(label_prefix(rel["repo"]))


def document_table(lock) -> dict:
    """The lock's ``[release]`` table: the record, and for each cell of the index whose evidence
    serves it (its winning receipt's: ``release`` or ``project``)."""
    rel = lock.release
    prefix = label_prefix(rel["repo"])
    cells = {}
    for key, entry in sorted(lock.index.items()):
        rec = lock.receipts.get(entry.candidates[0].receipt) if entry.candidates else None
        cells["/".join(key)] = "release" if rec is not None and rec.file.startswith(prefix) else "project"
    out = {k: rel[k] for k in ("repo", "version", "commit")}
    out["files"] = dict(sorted(rel.get("files", {}).items()))
    if cells:
        out["cells"] = cells
    return out


def read_table(r, data: dict) -> dict | None:
    """The ``[release]`` table of a lockfile document, checked by field (``r``: the lock's Reader)."""
    from ..errors import LockfileError  # noqa: PLC0415

    t = r.get(data, "release", dict, "", required=False)
    if t is None:
        return None
    p = "release"
    r.only(t, {"repo", "version", "commit", "files", "cells"}, p)
    repo = names.check("repo", r.get(t, "repo", str, p), p + ".repo", LockfileError, file=r.file)
    version = r.get(t, "version", int, p)
    commit = r.get(t, "commit", str, p)
    if not _HEX40.match(commit):
        raise r.fail(p + ".commit", f"not a 40-hex commit: {commit!r}")
    files = r.get(t, "files", dict, p, required=False, default={})
    for rel, sha in files.items():
        names.check("path", rel, f"{p}.files", LockfileError, file=r.file)
        if not isinstance(sha, str) or not re.fullmatch(r"sha256:[0-9a-f]{64}", sha):
            raise r.fail(f"{p}.files.{rel!r}", f"not a sha256: digest: {sha!r}")
    cells = r.get(t, "cells", dict, p, required=False, default={})
    for cell, who in cells.items():
        if who not in ("release", "project"):
            raise r.fail(f"{p}.cells.{cell!r}", f"expected release or project, got {who!r}")
    return {"repo": repo, "version": version, "commit": commit, "files": dict(files), "cells": dict(cells)}


def release_receipts(lock) -> set[str]:
    """Digests of the accepted receipts a lock took from its release."""
    if not lock.release:
        return set()
    prefix = label_prefix(lock.release["repo"])
    return {d for d, rec in lock.receipts.items() if rec.file.startswith(prefix)}


def shown(text) -> str:
    """``text`` safe on a terminal: every control or otherwise unprintable character (``\\r``, an ESC
    sequence, a bidi override) written as its escape, so a name from a release prints as what it is."""
    out = []
    for c in str(text):
        if c.isprintable():
            out.append(c)
        elif ord(c) < 0x100:
            out.append(f"\\x{ord(c):02x}")
        else:
            out.append(f"\\u{ord(c):04x}" if ord(c) < 0x10000 else f"\\U{ord(c):08x}")
    return "".join(out)
