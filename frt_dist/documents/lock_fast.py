"""Reading a lockfile fast: the lock-digest in one pass, the large texts not run through the TOML reader.

A large lock is mostly its route index and embedded receipts, two JSON texts that ``render``
writes as top-level multi-line literal strings. ``read_fast`` cuts them out of the file as they
lie (``lock_index.Cut``, searched by ``lock_index`` when a cell or a receipt is looked up), has
the TOML reader read the rest, and hashes the lock-digest over everything in one pass. What it
cannot prove to be what the TOML reader reads, it leaves to ``parse_toml`` (``None``).
"""

from __future__ import annotations

import os

from ..base.canonical import digest
from .lock_index import Cut

__all__ = ["read_fast", "lock_digest_of"]

_CHUNK = 1 << 16  # characters (bytes) of a large text escaped and hashed at a time (cache-sized: fastest)
# what `_read_fast` leaves to the full TOML reader in a literal string: every control character
# (U+0000-U+001F, U+007F) but the line feed, so the tab (allowed) and CR (CRLF) too
_NOT_IN_LITERAL = bytes(c for c in range(0x20) if c != 0x0A) + b"\x7f"
_LITERAL_KEYS = ("index", "receipts")


def _read_fast(raw: bytes) -> tuple[dict, str] | None:
    """(document, its lock-digest computed) of a lockfile in the layout ``render`` writes, with
    the index and the receipts (most of a large lock's bytes) not run through the TOML reader:
    ``None`` for anything else, and the caller reads the file whole with ``parse_toml``.

    Each of those is a top-level multi-line literal string (``key = '''`` + newline ...
    ``'''``), whose text TOML takes as it stands. Its text is cut out and the rest of the file,
    with ``key = '<random token>'`` in its place, is read by the TOML reader; the result holds
    exactly that token at that top-level key, or the cut was not that key's value (text inside
    another string, a table's key) and the file is read whole. What the TOML reader would check
    in the text itself is checked here (UTF-8: one ``isascii`` pass over the file, else a
    decode) and while the digest hashes it (``lock_digest_of``: no control character). So the
    document is the one ``parse_toml`` returns, but for the two texts, which it holds as
    ``Cut``s (the bytes where they lie, decoded where used), and the digest is
    ``canonical.digest`` of it.

    The file's bytes are searched and decoded piece by piece where they lie (``memoryview``
    slices: the bytes are not copied, the whole text is never one string): every delimiter
    searched for is ASCII, which UTF-8 never uses inside a multi-byte character, so a byte
    offset found is the same cut as the character offset in the decoded text, the pieces
    decode exactly when the whole does, and the cut texts' canonical JSON is computed from
    their bytes (``_escape_bytes``)."""
    cuts = []
    for key in _LITERAL_KEYS:
        opener = b"\n" + key.encode() + b" = '''\n"
        at = raw.find(opener)
        if at < 0:
            continue
        start = at + len(opener)
        end = raw.find(b"'''", start)  # (a longer quote run there leaves a quote after the token: not TOML)
        if end < 0:
            return None
        cuts.append((at + 1 + len(key) + 3, start, end, key))
    if not cuts:
        return None
    cuts.sort()
    token = "frt-cut-" + os.urandom(16).hex()
    view = memoryview(raw)
    rest, pos, texts = [], 0, {}
    ascii_ = raw.isascii()  # (one fast pass: then every piece is UTF-8 without decoding it)
    try:
        for delim, start, end, key in cuts:  # (cuts that overlap leave two tokens side by side: not TOML)
            rest += (str(view[pos:max(pos, delim)], "utf-8"), f"'{token}'")
            if not ascii_:
                str(view[start:end], "utf-8")  # UTF-8, as the TOML reader requires (the text is not kept)
            texts[key] = Cut(raw, start, end)
            pos = end + 3
        rest.append(str(view[pos:], "utf-8"))
    except UnicodeDecodeError:
        return None
    import rtoml  # noqa: PLC0415

    try:
        doc = rtoml.loads("".join(rest))
    except ValueError:
        return None
    for _, _start, _end, key in cuts:
        if doc.get(key) != token:
            return None
        doc[key] = texts[key]
    try:
        digest_ = lock_digest_of({k: v for k, v in doc.items() if k != "lock-digest"}, literal={c[3] for c in cuts},
                               _raw={c[3]: view[c[1]:c[2]] for c in cuts})
    except (TypeError, ValueError, RecursionError, UnicodeEncodeError):
        return None  # a value canonical JSON cannot hold (a TOML date...): the full path names it
    return None if digest_ is None else (doc, digest_)


def _escape_bytes(b: bytes) -> bytes:
    """The UTF-8 of ``json.dumps(text, ensure_ascii=False)[1:-1]`` for the text whose UTF-8 is
    ``b``, when that text holds no control character but the line feed (which the caller has
    checked): canonical JSON escapes only the quote, the backslash and the control characters,
    and leaves every other character as it is; all three are ASCII bytes, which never occur
    inside a multi-byte UTF-8 character, so replacing them byte for byte is escaping the text
    (and escaping a slice of the bytes, even one that splits a character, is escaping that part).
    ``tests/test_lock_large.py`` holds it to ``json.dumps``."""
    return b.replace(b"\\", b"\\\\").replace(b'"', b'\\"').replace(b"\n", b"\\n")


def lock_digest_of(body: dict, literal=(), _raw=None) -> str | None:
    """``canonical.digest(body)``, byte for byte, without building the canonical JSON of the
    whole lockfile as one string: each top-level value is written and hashed in turn, and
    the large JSON texts (index, receipts) are escaped and hashed a few MB at a time.

    Canonical JSON is ``json.dumps(sort_keys=True, separators=(",", ":"),
    ensure_ascii=False)``: ``{`` then ``"key":value`` per key in sorted order, joined by
    ``,``, then ``}``; a string is escaped character by character, so escaping a text in
    slices and joining them (without the quotes each slice gets) is escaping it whole.
    Anything canonical JSON refuses (a lone surrogate, a value nested too deeply) raises here
    as it would there.

    ``literal``: keys whose text ``_read_fast`` cut out of the file unparsed; on the same pass
    each is checked for what a TOML literal string may not hold (a control character; a tab,
    which it may, is sent to the full reader too), and ``None`` is the answer when one does.
    ``_raw``: for such a key, the text's UTF-8 bytes as they lie in the file (a buffer): those
    are checked and escaped as bytes (``_escape_bytes``), not re-encoded from the text."""
    import hashlib  # noqa: PLC0415
    from json.encoder import encode_basestring  # noqa: PLC0415 - what json.dumps(str, ensure_ascii=False) is

    from ..base.canonical import canonical_json  # noqa: PLC0415

    if not all(isinstance(k, str) for k in body):  # not a TOML document: leave it to the one definition
        return digest(body)
    _raw = _raw or {}
    h = hashlib.sha256()
    update = h.update
    update(b"{")
    for n, key in enumerate(sorted(body)):
        value = body[key]
        update((b"," if n else b"") + encode_basestring(key).encode("utf-8") + b":")
        checked = key in literal
        if checked and key in _raw:
            buf = _raw[key]
            update(b'"')
            for i in range(0, len(buf), _CHUNK):
                part = bytes(buf[i:i + _CHUNK])  # (a cache-sized copy: each pass below stays in cache)
                if len(part.translate(None, _NOT_IN_LITERAL)) != len(part):
                    return None
                update(_escape_bytes(part))
            update(b'"')
        elif isinstance(value, str) and (checked or len(value) > _CHUNK):
            update(b'"')
            for i in range(0, len(value), _CHUNK):
                part = value[i:i + _CHUNK]
                if checked:
                    raw = part.encode("utf-8")
                    if len(raw.translate(None, _NOT_IN_LITERAL)) != len(raw):
                        return None
                update(memoryview(encode_basestring(part).encode("utf-8"))[1:-1])
            update(b'"')
        else:
            update(canonical_json(value))
    update(b"}")
    return "sha256:" + h.hexdigest()


def read_fast(raw: bytes) -> tuple[dict, dict, str] | None:
    """(the document but for the texts cut out, those texts by key, the lock-digest computed) of a
    lockfile in the layout ``render`` writes (``_read_fast``), or ``None``: read it with
    ``parse_toml``. The texts are for ``lock_index.read_index`` and ``read_receipts`` (and
    ``str()`` when a caller asks for the document as read); the document holds plain values only."""
    fast = _read_fast(raw)
    if fast is None:
        return None
    doc, computed = fast
    texts = {k: doc.pop(k) for k in [k for k, v in doc.items() if isinstance(v, Cut)]}
    return doc, texts, computed

