"""A reader for the TOML layout frt writes its lockfiles in, or ``None``.

``tomllib`` is written in Python and walks basic strings one character at a
time: on the demo lockfile it spends about a millisecond, a large share of a
serving start-up. A lockfile that ``frt lock`` wrote uses a small, regular part
of TOML (what ``tomli_w`` emits, plus multi-line literal strings), which this
module reads line by line with a few regular expressions.

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
# non-strict decoder), and no \u escape of a surrogate.
_BASIC = r'"(?:[^"\\\x00-\x08\x0a-\x1f\x7f]|\\[btnfr"\\]|\\u(?![dD][89a-fA-F])[0-9a-fA-F]{4})*"'
_LITERAL = r"'[^'\x00-\x08\x0a-\x1f\x7f]*'"
_KEY = rf"(?:[A-Za-z0-9_-]+|{_BASIC}|{_LITERAL})"
_SCALAR = rf"(?:{_BASIC}|{_LITERAL}|0|-?[1-9][0-9]*|true|false)"

_KEY_PART = re.compile(_KEY)
_HEADER = re.compile(rf"\[({_KEY}(?:\.{_KEY})*)\]")
_ARRAY_HEADER = re.compile(rf"\[\[({_KEY})\]\]")
_KEY_VALUE = re.compile(rf"({_KEY}) = ({_SCALAR}|\[\]|\[|''')")
_ITEM = re.compile(rf"    ({_SCALAR}),")
_COMMENT = re.compile(r"#[^\x00-\x08\x0a-\x1f\x7f]*")


_JSON = json.JSONDecoder(strict=False)


class _Unsure(Exception):
    """This text is outside the part of TOML read here."""


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


def _line_end(text: str, pos: int) -> int:
    end = text.find("\n", pos)
    return len(text) if end < 0 else end


# ASCII control characters but tab and newline: none may appear anywhere in this layout (TOML
# forbids them raw, save \r in a CRLF line end, left to tomllib). UTF-8 never uses these byte
# values inside a multi-byte character, so a scan of the bytes is a scan of the characters.
_CONTROL = bytes(c for c in range(32) if c not in (9, 10)) + b"\x7f"


def loads(data: bytes) -> dict | None:
    """``tomllib.loads(data.decode())`` for the layout frt lockfiles use, else ``None``."""
    if len(data.translate(None, _CONTROL)) != len(data):  # one C pass, not a regex over the text
        return None
    try:
        return _loads(data.decode("utf-8"))
    except (_Unsure, UnicodeDecodeError):
        return None


def _loads(text: str) -> dict:
    root: dict = {}
    cur = root
    arrays: set[str] = set()  # top-level keys made by [[key]] headers
    pos, n = 0, len(text)
    while pos < n:
        end = _line_end(text, pos)
        line = text[pos:end]
        pos = end + 1
        if not line or (line[0] == "#" and _COMMENT.fullmatch(line)):
            continue
        first = line[0]
        if first == "[":
            m = _ARRAY_HEADER.fullmatch(line)
            if m:
                name = _key(m.group(1))
                have = root.get(name)
                if have is None:
                    root[name] = have = []
                    arrays.add(name)
                elif name not in arrays:
                    raise _Unsure
                cur = {}
                have.append(cur)
                continue
            m = _HEADER.fullmatch(line)
            if m is None:
                raise _Unsure
            path, parts, at = m.group(1), [], 0
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
            table[parts[-1]] = cur = {}
            continue
        m = _KEY_VALUE.fullmatch(line)
        if m is None:
            raise _Unsure
        key, raw = _key(m.group(1)), m.group(2)
        if key in cur:
            raise _Unsure
        if raw == "[]":
            value = []
        elif raw == "[":
            value = []
            while True:
                end = _line_end(text, pos)
                line = text[pos:end]
                pos = end + 1
                if line == "]":
                    break
                item = _ITEM.fullmatch(line)
                if item is None:
                    raise _Unsure
                value.append(_scalar(item.group(1)))
        elif raw == "'''":
            close = text.find("'''", pos)
            if close < 0 or text[close + 3:close + 4] not in ("\n", ""):
                raise _Unsure  # unterminated, or quotes right before the delimiter
            value = text[pos:close]  # holds no control character: checked on the bytes
            pos = close + 4
        else:
            value = _scalar(raw)
        cur[key] = value
    return root
