"""Writing a lockfile: the JSON texts it embeds, the TOML bytes, and ``write_atomic``.

``Lockfile.document`` assembles the document from these texts, ``render`` lays it out (the large
JSON texts as multi-line literal strings, which ``lock_fast`` cuts back out), and
``write_atomic`` puts bytes in place (every file frt writes goes through it).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from ..base.regular import open_regular

__all__ = ["index_text", "manifest_text", "nearest_rows", "nearest_text", "receipts_text", "render", "same_bytes",
           "signatures_text", "write_atomic"]

_JSON_TEXT = ("manifest", "index", "nearest", "receipts", "receipt-signatures")


def manifest_text(raw: dict) -> str:
    """The embedded manifest: its JSON in the manifest file's own order (route and
    seam order mean something to readers), one key or item per line.

    Stored as one TOML multi-line literal string, a reader takes it with one
    string search and ``json.loads`` (a TOML table of the same content costs
    a reader about as much as the rest of the lockfile together); it stays one
    line per value for review and diffs.
    """
    return json.dumps(raw, indent=1, ensure_ascii=False) + "\n"


def index_text(entries: list[dict]) -> str:
    """The route index: a JSON array with one cell per line (a reviewer sees one line
    change per cell that changed). Stored as a TOML multi-line literal string like the
    manifest: a large lock is mostly index, and ``json`` reads it many times faster than
    a TOML reader reads the same cells as ``[[index]]`` tables."""
    return "[\n" + ",\n".join(json.dumps(e, ensure_ascii=False) for e in entries) + "\n]\n"


def receipts_text(receipts) -> str:
    """The embedded receipts: a JSON array, one receipt per line, each the receipt's
    canonical JSON with the digest, file, route and state it is indexed by."""
    lines = []
    for r in receipts:
        head = json.dumps({"digest": r.digest, "file": r.file, "route": r.route, "state": r.state},
                          ensure_ascii=False)
        body = json.dumps(r.data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        lines.append(f'{head[:-1]}, "receipt": {body}}}')
    return "[\n" + ",\n".join(lines) + "\n]\n"


def nearest_rows(entries) -> list[dict]:
    """The ``nearest`` summary of a route index: for each (route, phase, precision, backend) that
    some cell has the route among its candidates, the one or two smallest (device class, arch)
    of those cells, ascending. It is what a refusal reason names ("receipt measured on X"), kept
    so that resolving reads no cell but its own (``routes.resolver._MissIndex``); derived from the
    index alone, so ``frt verify`` re-derives it."""
    low: dict[tuple, list] = {}
    for e in entries:
        k = e.key
        v = [k.device_class, k.arch]
        for route in {c.route for c in e.candidates}:
            two = low.setdefault((route, k.phase, k.precision, k.backend), [])
            two.append(v)
            if len(two) > 2:
                two.sort()
                del two[2:]
    return [{"route": g[0], "phase": g[1], "precision": g[2], "backend": g[3], "nearest": sorted(two)}
            for g, two in sorted(low.items())]


def nearest_text(rows: list[dict]) -> str:
    """The ``nearest`` summary as a JSON array, one group per line (like the index)."""
    return "[\n" + ",\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n]\n"


def signatures_text(rows) -> str:
    """The receipts' signatures: a JSON array, one row per signed receipt (a reviewer sees one
    line change per signature), stored like the receipts."""
    order = ("receipt", "file", "kind", "signer", "issuer", "envelope", "bundle")  # who first, the proof last
    return "[\n" + ",\n".join(json.dumps({k: row[k] for k in order if k in row}, ensure_ascii=False)
                               for row in rows) + "\n]\n"


def render(doc: dict, lock_digest: str) -> bytes:
    """TOML bytes with ``schema`` first and ``lock-digest`` second (docs/reference.md#lockfile).

    The embedded manifest, route index and receipts are JSON, each one TOML
    multi-line literal string among the top-level keys (a reader takes each with
    one string search and ``json``); a text a literal cannot hold (``'''`` or a
    control character) falls back to an escaped basic string. Packages, routes and
    rejected receipts are TOML tables.
    """
    import tomli_w  # noqa: PLC0415

    top = {"schema": doc["schema"], "lock-digest": lock_digest}
    top.update((k, v) for k, v in doc.items() if k != "schema" and not _is_table(v))
    tables = {k: v for k, v in doc.items() if _is_table(v)}
    header = "# Written by `frt lock`. Do not edit: regenerate with `frt lock`.\n"
    parts = [header]
    for k, v in top.items():
        if k in _JSON_TEXT and isinstance(v, str) and _multiline_literal_ok(v):
            parts.append(f"{k} = '''\n{v}'''\n")
        else:
            parts.append(tomli_w.dumps({k: v}))
    if tables:
        parts.append("\n" + tomli_w.dumps(tables))
    return "".join(parts).encode("utf-8")


def _is_table(v) -> bool:
    return isinstance(v, dict) or (isinstance(v, list) and bool(v) and all(isinstance(x, dict) for x in v))


_NOT_MULTILINE_LITERAL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]|'''|'\Z")


def _multiline_literal_ok(s: str) -> bool:
    return _NOT_MULTILINE_LITERAL.search(s) is None


def _umask() -> int:
    """The process umask, read without changing it where the platform allows."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


def same_bytes(path: Path, data: bytes) -> bool:
    """Does the file at ``path`` hold exactly ``data``? False when it is absent. Its type is
    checked before it is read (a FIFO, a device: ``NotRegular``, never opened for a blocking
    read), and only a file of ``len(data)`` bytes is read, at most one byte more: an old file
    of any size costs no more than the new one."""
    try:
        fd = open_regular(path)
    except FileNotFoundError:
        return False
    with open(fd, "rb") as fh:
        if os.fstat(fh.fileno()).st_size != len(data):
            return False
        return fh.read(len(data) + 1) == data


def write_atomic(path: Path, data: bytes) -> bool:
    """Write ``data`` to ``path`` via a temp file in the same folder and ``os.replace``.

    Returns ``False`` (and writes nothing) when the file already holds exactly
    these bytes. The temp file never survives an error or an interrupt. An old file that
    is not a regular file (a FIFO, a device, a socket, a folder) is refused before anything
    is read or written: ``NotRegular``, an ``OSError`` naming it.
    """
    import tempfile  # noqa: PLC0415 - only writers need it (reading a lockfile does not)

    path = Path(path)
    if same_bytes(path, data):
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        # mkstemp makes the file 0600: give the result the old file's mode, or what a plain write would
        try:
            mode = path.stat().st_mode & 0o777
        except FileNotFoundError:
            mode = 0o666 & ~_umask()
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return True
