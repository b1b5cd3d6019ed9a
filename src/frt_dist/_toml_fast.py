"""A reader for the TOML layout frt writes its lockfiles in, or ``None``.

``tomllib`` is written in Python and walks basic strings one character at a
time: on the demo lockfile it spends about a millisecond, a large share of a
serving start-up. A lockfile that ``frt lock`` wrote uses a small, regular part
of TOML (what ``tomli_w`` emits, plus multi-line literal strings), which this
module reads with one regular expression per line, matched in place.

It reads that part only. Anything else - another quoting or escape, dotted or
spaced keys, inline tables, floats, dates, comments after a value, a table
opened twice, ``\\r`` - gives ``None``, and the caller reads the text with
``tomllib``, which then decides (and words any error). So for every text this
returns either exactly what ``tomllib.loads`` returns, keys in the same order,
or ``None``; ``tests/test_toml_fast.py`` holds it to that on real lockfiles and
on thousands of damaged ones.
"""

from __future__ import annotations

import json
import re

__all__ = ["loads"]

# TOML strings without the parts this reader leaves to tomllib: a basic string's escapes are
# the ones JSON shares with TOML (decoded by json; a raw tab, which TOML allows, by json's
# non-strict decoder), and no \u escape of a surrogate. Written as "a run of plain characters,
# then (escape, run) repeated": one character class per run, not one alternation per character.
_PLAIN = r'[^"\\\x00-\x08\x0a-\x1f\x7f]'
_BASIC = rf'"{_PLAIN}*(?:\\(?:[btnfr"\\]|u(?![dD][89a-fA-F])[0-9a-fA-F]{{4}}){_PLAIN}*)*"'
_LITERAL = r"'[^'\x00-\x08\x0a-\x1f\x7f]*'"
_KEY = rf"(?:[A-Za-z0-9_-]+|{_BASIC}|{_LITERAL})"
_SCALAR = rf"(?:{_BASIC}|{_LITERAL}|0|-?[1-9][0-9]*|true|false)"
_ML = "'" * 3  # the multi-line literal string delimiter

# One whole line, its newline included (or the end of the text).
_LINE = re.compile(
    rf"(?:(?P<key>{_KEY}) = (?P<value>{_SCALAR}|\[\]|\[|{_ML})"  # key = value
    rf"|\[\[(?P<array>{_KEY})\]\]"  # [[array of tables]] (one key)
    rf"|\[(?P<table>{_KEY}(?:\.{_KEY})*)\]"  # [table.header]
    r"|#[^\x00-\x08\x0a-\x1f\x7f]*"  # a comment line
    r")?(?:\n|\Z)")  # ... or a blank line
_ITEM = re.compile(rf"    (?P<item>{_SCALAR}),\n|(?P<close>)\](?:\n|\Z)")  # inside a multi-line array
_KEY_PART = re.compile(_KEY)

_JSON = json.JSONDecoder(strict=False)

# ASCII control characters but tab and newline: none may appear anywhere in this layout (TOML
# forbids them raw, save \r in a CRLF line end, left to tomllib). UTF-8 never uses these byte
# values inside a multi-byte character, so a scan of the bytes is a scan of the characters.
_CONTROL = bytes(c for c in range(32) if c not in (9, 10)) + b"\x7f"


class _Unsure(Exception):
    """This text is outside the part of TOML read here."""


def loads(data: bytes) -> dict | None:
    """``tomllib.loads(data.decode())`` for the layout frt lockfiles use, else ``None``."""
    if len(data.translate(None, _CONTROL)) != len(data):  # one C pass, not a regex over the text
        return None
    try:
        return _loads(data.decode("utf-8"))
    except (_Unsure, UnicodeDecodeError):
        return None


def _key(s: str) -> str:
    c = s[0]
    if c == '"':
        return _JSON.decode(s) if "\\" in s else s[1:-1]
    if c == "'":
        return s[1:-1]
    return s


def _scalar(s: str):
    c = s[0]
    if c == '"':
        return _JSON.decode(s) if "\\" in s else s[1:-1]
    if c == "'":
        return s[1:-1]
    if s == "true":
        return True
    if s == "false":
        return False
    return int(s)


def _table(root: dict, path: str) -> dict:
    """The new, empty table a ``[path]`` header opens."""
    parts, at = [], 0
    while at < len(path):
        k = _KEY_PART.match(path, at)
        parts.append(_key(k.group()))
        at = k.end() + 1  # past the dot
    table = root
    for part in parts[:-1]:
        nxt = table.get(part)
        if nxt is None:
            table[part] = nxt = {}
        elif not isinstance(nxt, dict):  # a value or an array of tables: tomllib's rules
            raise _Unsure
        table = nxt
    if parts[-1] in table:  # opened before, or a key: tomllib decides whether that is allowed
        raise _Unsure
    table[parts[-1]] = new = {}
    return new


def _loads(text: str) -> dict:
    root: dict = {}
    cur = root
    arrays: set[str] = set()  # top-level keys made by [[key]] headers
    line = _LINE.match
    pos, n = 0, len(text)
    while pos < n:
        m = line(text, pos)
        if m is None:
            raise _Unsure
        pos = m.end()
        raw = m.group("value")
        if raw is not None:
            key = _key(m.group("key"))
            if key in cur:
                raise _Unsure
            if raw == "[]":
                value = []
            elif raw == "[":
                value = []
                while True:
                    it = _ITEM.match(text, pos)
                    if it is None:
                        raise _Unsure
                    pos = it.end()
                    if it.group("close") is not None:
                        break
                    value.append(_scalar(it.group("item")))
            elif raw == _ML:  # the line ended right after the delimiter: the string starts at pos
                close = text.find(_ML, pos)
                if close < 0 or text[close + 3:close + 4] not in ("\n", ""):
                    raise _Unsure  # unterminated, or quotes right before the delimiter
                value = text[pos:close]  # holds no control character: checked on the bytes
                pos = close + 4
            else:
                value = _scalar(raw)
            cur[key] = value
        elif m.group("table") is not None:
            cur = _table(root, m.group("table"))
        elif m.group("array") is not None:
            name = _key(m.group("array"))
            have = root.get(name)
            if have is None:
                root[name] = have = []
                arrays.add(name)
            elif name not in arrays:
                raise _Unsure
            cur = {}
            have.append(cur)
    return root
