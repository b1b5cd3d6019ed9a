"""A reader for the TOML layout frt writes its lockfiles in, or ``None``.

``tomllib`` is written in Python and walks basic strings one character at a
time: on the demo lockfile it spends about a millisecond, a large share of a
serving start-up. A lockfile that ``frt lock`` wrote uses a small, regular part
of TOML (what ``tomli_w`` emits, plus multi-line literal strings), which this
module reads line by line with string methods. It compiles no regular
expression at import (in a fresh process that costs more than the parse
saves); the one for string escapes is compiled the first time a string holds
a backslash.

It reads that part only. Anything else - another quoting, an escaped key,
dotted or spaced keys, inline tables, floats, dates, comments after a value, a
table opened twice, ``\\r`` - gives ``None``, and the caller reads the text with
``tomllib``, which then decides (and words any error). So for every text this
returns either exactly what ``tomllib.loads`` returns, keys in the same order,
or ``None``; ``tests/test_toml_fast.py`` holds it to that on real lockfiles and
on thousands of damaged ones.
"""

from __future__ import annotations

import json

__all__ = ["loads"]

_BARE = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-"
_DIGITS = "0123456789"
_ML = "'" * 3  # the multi-line literal string delimiter

# ASCII control characters but tab and newline: none may appear anywhere in this layout (TOML
# forbids them raw, save \r in a CRLF line end, left to tomllib). UTF-8 never uses these byte
# values inside a multi-byte character, so a scan of the bytes is a scan of the characters.
_CONTROL = bytes(c for c in range(32) if c not in (9, 10)) + b"\x7f"

_JSON = json.JSONDecoder(strict=False)  # strict=False: a raw tab, which TOML allows in strings
_escaped = None  # the pattern of a basic string with escapes, compiled on first need


class _Unsure(Exception):
    """This text is outside the part of TOML read here."""


def loads(data: bytes) -> dict | None:
    """``tomllib.loads(data.decode())`` for the layout frt lockfiles use, else ``None``."""
    if len(data.translate(None, _CONTROL)) != len(data):  # one C pass over the bytes
        return None
    try:
        return _loads(data.decode("utf-8"))
    except (_Unsure, UnicodeDecodeError):
        return None


def _key(s: str) -> str:
    """A bare key, or a double-quoted one without escapes."""
    if s and not s.strip(_BARE):
        return s
    if len(s) >= 2 and s[0] == '"' and s[-1] == '"':
        inner = s[1:-1]
        if '"' not in inner and "\\" not in inner:
            return inner
    raise _Unsure


def _string(s: str) -> str:
    """A double-quoted basic string, its escapes those JSON shares with TOML."""
    inner = s[1:-1]
    if len(s) < 2 or s[-1] != '"':
        raise _Unsure
    if "\\" not in inner:
        if '"' in inner:
            raise _Unsure
        return inner
    global _escaped
    if _escaped is None:
        import re  # noqa: PLC0415 - only a string with escapes needs it

        _escaped = re.compile(r'"[^"\\]*(?:\\(?:[btnfr"\\]|u[0-9a-fA-F]{4})[^"\\]*)*"')
    if _escaped.fullmatch(s) is None:
        raise _Unsure
    v = _JSON.decode(s)
    try:  # TOML strings hold Unicode scalar values only: no surrogate from a \u escape
        v.encode("utf-8")
    except UnicodeEncodeError:
        raise _Unsure from None
    return v


def _scalar(s: str):
    if s[:1] == '"':
        return _string(s)
    if s == "true":
        return True
    if s == "false":
        return False
    digits = s[1:] if s[:1] == "-" else s
    if digits and not digits.strip(_DIGITS) and (digits[0] != "0" or s == "0"):
        return int(s)
    raise _Unsure  # floats, dates, other integer forms, literal strings, inline tables, ...


def _table(root: dict, path: str) -> dict:
    """The new, empty table a ``[path]`` header opens."""
    parts, at, n = [], 0, len(path)
    while at <= n:
        if path[at:at + 1] == '"':
            end = path.find('"', at + 1)
            if end < 0:
                raise _Unsure
            end += 1
        else:
            end = path.find(".", at)
            end = n if end < 0 else end
        parts.append(_key(path[at:end]))
        if end < n and path[end] != ".":
            raise _Unsure
        at = end + 1
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
    pos, n = 0, len(text)
    while pos < n:
        end = text.find("\n", pos)
        end = n if end < 0 else end
        line = text[pos:end]
        pos = end + 1
        if not line or line[0] == "#":  # a blank line; a comment (control characters already refused)
            continue
        if line[0] == "[":
            if line[-1] != "]":
                raise _Unsure
            if line[1:2] == "[":  # [[array of tables]], one key
                if line[-2:] != "]]":
                    raise _Unsure
                name = _key(line[2:-2])
                have = root.get(name)
                if have is None:
                    root[name] = have = []
                    arrays.add(name)
                elif name not in arrays:
                    raise _Unsure
                cur = {}
                have.append(cur)
            else:
                cur = _table(root, line[1:-1])
            continue
        k, sep, raw = line.partition(" = ")
        if not sep:
            raise _Unsure
        key = _key(k)
        if key in cur:
            raise _Unsure
        if raw == "[]":
            value = []
        elif raw == "[":  # one item per line, each "    <value>,", then "]"
            value = []
            while True:
                end = text.find("\n", pos)
                end = n if end < 0 else end
                item = text[pos:end]
                pos = end + 1
                if item == "]":
                    break
                if not (item.startswith("    ") and item.endswith(",")):
                    raise _Unsure
                value.append(_scalar(item[4:-1]))
        elif raw == _ML:  # the string starts on the next line
            close = text.find(_ML, pos)
            if close < 0 or text[close + 3:close + 4] not in ("\n", ""):
                raise _Unsure  # unterminated, or quotes right before the delimiter
            value = text[pos:close]  # holds no control character: checked on the bytes
            pos = close + 4
        else:
            value = _scalar(raw)
        cur[key] = value
    return root
