"""Strict readers for frt's own documents (manifests, receipts, lockfiles).

Each check names the file and the field path (``routes.fused.seams.norm``) and
raises the document's own error class. Unknown keys are errors in frt files.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from ..base.canonical import digest as _digest
from ..base.regular import NotRegular, open_regular
from ..errors import FrtError

__all__ = ["Reader", "load_toml", "load_json", "json_loads", "JSONInvalid", "SCHEMA_RE", "read_bytes", "MAX_BYTES",
           "DEFAULT_MAX_BYTES", "toml_key"]

SCHEMA_RE = re.compile(r"^(frt\.[a-z]+)/(\d+)(?:\.(\d+))?$")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


class JSONInvalid(ValueError):
    """JSON from outside that frt cannot take: the reason is the message."""


def _no_constant(name: str):
    raise JSONInvalid(f"{name} is not a JSON number")


def json_loads(data: str | bytes):
    """``json.loads`` for JSON from outside (receipts, ``metadata.json``, the JSON parts of a
    lockfile). Every way it can fail is one ``JSONInvalid`` with the reason: not UTF-8, not
    valid JSON, nested too deeply (``RecursionError``), an integer over Python's 4,300-digit
    limit, ``NaN``/``Infinity``, or a lone UTF-16 surrogate escape (``"\\ud800"``: not text,
    it cannot be written back as UTF-8)."""
    try:
        text = data.decode("utf-8") if isinstance(data, (bytes, bytearray)) else data
        value = json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise JSONInvalid("nested too deeply") from None
    except UnicodeDecodeError as exc:
        raise JSONInvalid(f"not UTF-8: {exc}") from None
    except ValueError as exc:  # JSONDecodeError, and int() over its digit limit
        raise JSONInvalid(str(exc)) from None
    if "\\u" in text and _SURROGATE_ESCAPE.search(text):
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise JSONInvalid("holds a lone UTF-16 surrogate escape (not UTF-8 text)") from None
        except (RecursionError, ValueError):
            raise JSONInvalid("nested too deeply") from None
    return value

_TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "a boolean",
               list: "an array", dict: "a table"}


def _tname(t) -> str:
    if isinstance(t, tuple):
        return " or ".join(_tname(x) for x in t)
    return _TYPE_NAMES.get(t, t.__name__)


def _kind(v: Any) -> str:
    if v is None:
        return "null"
    for t, n in ((bool, "a boolean"), (int, "an integer"), (float, "a number"), (str, "a string"),
                 (list, "an array"), (dict, "a table")):
        if isinstance(v, t):
            return n
    return type(v).__name__


_PLAIN = frozenset({str, int, float, bool})


def _datetime_types() -> tuple:
    """TOML's date/time types, imported on the first value that is not plain (a document
    without one, every frt document, never imports ``datetime``)."""
    import datetime as _dt  # noqa: PLC0415

    return (_dt.date, _dt.time)


_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def toml_key(key: str) -> str:
    """``key`` as one part of a TOML dotted path, as every frt message names a field: bare when TOML
    allows it (``routes.fast``), else quoted (``packages."org/name"``)."""
    return key if _BARE_KEY.fullmatch(key) else '"' + key.replace('"', '\\"') + '"'


class Reader:
    """Field access with error messages that name ``file`` and the field path."""

    def __init__(self, file: str, error: type[FrtError]):
        self.file = file
        self.error = error

    def fail(self, path: str, msg: str) -> FrtError:
        where = f"{self.file}: {path}: " if path else f"{self.file}: "
        return self.error(where + msg, reasons=[{"file": self.file, "field": path, "reason": msg}])

    def get(self, table: dict, key: str, types, path: str, *, required: bool = True, default=None):
        try:
            v = table[key]
        except (KeyError, TypeError):  # TypeError: not a table at all, which has no such field either
            if required:
                raise self.fail(f"{path}.{key}" if path else key, "missing required field") from None
            return default
        if type(v) is types:  # the common case, exactly the type asked for (a bool is never an int)
            return v
        ok = isinstance(v, types)
        if ok and isinstance(v, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
            ok = False  # a bool is not an int here
        if not ok:
            raise self.fail(f"{path}.{key}" if path else key, f"expected {_tname(types)}, got {_kind(v)}")
        return v

    def number(self, table: dict, key: str, path: str, *, required: bool = True, default=None):
        v = self.get(table, key, (int, float), path, required=required, default=default)
        if v is None:
            return None
        try:
            return float(v)
        except OverflowError:  # an integer like 10**400: JSON and TOML hold it, a float does not
            digits = len(str(abs(v))) if abs(v).bit_length() < 14000 else "thousands of"
            raise self.fail(f"{path}.{key}" if path else key,
                            f"an integer of {digits} digits is out of range for a number (at most about 1.8e308)") from None

    def str_list(self, table: dict, key: str, path: str, *, required: bool = True, default=None) -> list[str] | None:
        v = self.get(table, key, list, path, required=required, default=default)
        if v is None:
            return None
        for i, item in enumerate(v):
            if not isinstance(item, str):
                raise self.fail(f"{path}.{key}[{i}]" if path else f"{key}[{i}]", f"expected a string, got {_kind(item)}")
        return list(v)

    def json_value(self, value, path: str, types, expected: str):
        """``value``, or the JSON it holds when it is a string (frt writes large parts of a TOML
        document as JSON text), which must then be one of ``types``."""
        if isinstance(value, str):
            try:
                value = json_loads(value)
            except JSONInvalid as exc:
                raise self.fail(path, f"not valid JSON: {exc}") from None
        if not isinstance(value, types):
            raise self.fail(path, f"expected {expected}, got {type(value).__name__}")
        return value

    def digest(self, value, path: str = "") -> str:
        """The document's frt digest (canonical JSON); a value canonical JSON cannot hold
        (too deep, an integer over the digit limit, text that is not UTF-8) is this
        document's error, naming the field."""
        try:
            return _digest(value)
        except RecursionError:
            raise self.fail(path, "nested too deeply") from None
        except (ValueError, UnicodeEncodeError) as exc:
            raise self.fail(path, f"cannot be written as canonical JSON: {exc}") from None

    def no_datetimes(self, doc, path: str = "") -> None:
        """Refuse any TOML date or time anywhere in ``doc``: frt's documents hold none, and a
        value of that type would otherwise reach code that expects text or numbers (the
        canonical-JSON digest first). The error names the first such field."""
        stack = [(path, doc)]
        while stack:
            where, v = stack.pop()
            if isinstance(v, dict):
                stack.extend((f"{where}.{k}" if where else str(k), x) for k, x in reversed(list(v.items())))
            elif isinstance(v, list):
                stack.extend((f"{where}[{i}]", x) for i, x in reversed(list(enumerate(v))))
            elif type(v) not in _PLAIN and isinstance(v, _datetime_types()):
                raise self.fail(where, f"expected a string or a number, got a TOML date/time ({v.isoformat()}); "
                                       "frt documents hold none (quote it if it is text)")

    def only(self, table: dict, allowed, path: str) -> None:
        if not isinstance(table, dict):
            raise self.fail(path, f"expected a table, got {_kind(table)}")
        for key in table:
            if key not in allowed:
                full = f"{path}.{key}" if path else key
                raise self.fail(full, f"unknown field (allowed: {', '.join(sorted(allowed))})")

    def schema(self, table: dict, family: str, major: int) -> str:
        s = self.get(table, "schema", str, "")
        m = SCHEMA_RE.match(s)
        if not m or m.group(1) != family:
            raise self.fail("schema", f"expected {family}/{major}, got {s!r}")
        if int(m.group(2)) != major:
            raise self.fail("schema", f"unknown schema major version {m.group(2)} (this frt reads {family}/{major})")
        return s


def _mb(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB" if n < (1 << 30) else f"{n / (1 << 30):.1f} GiB"


# The largest file frt parses, per document kind (its error class), checked before parsing: a
# document over it is refused naming the file, its size and the limit, instead of exhausting time
# and memory. Each is far above what a real document holds (measured: bench/RESULTS.md):
# a lockfile is 1.7 MB per 1,000 cells with one receipt each (10,000 cells: 17 MB, the 100,000-cell
# benchmark: 172 MB); a manifest is a few KB (one table per seam, impl and route); a receipt is
# about 2 KB.
MAX_BYTES = {"LockfileError": 256 << 20, "ManifestError": 16 << 20, "ReceiptInvalid": 4 << 20}


# Any other file frt reads through ``read_bytes`` without a limit of its own (a ``pyproject.toml``, a
# document kind not listed above) is bounded by this.
DEFAULT_MAX_BYTES = 16 << 20

def read_bytes(path: Path, error: type[FrtError], label: str | None = None, *, limit: int | None = None) -> bytes:
    """The file's bytes, or ``error`` naming ``label`` and why not. The file's type is checked on
    the descriptor before anything is read (``open_regular``): a FIFO, a device, a socket or a
    directory is refused, never read, so none can hang or flood the reader. A file larger than
    ``limit`` bytes (default: ``MAX_BYTES`` for the document kind ``error`` names, else
    ``DEFAULT_MAX_BYTES``) is refused before it is read, and at most ``limit + 1`` bytes are ever
    read, so a file that grows cannot make the reader take more."""
    label = label or str(path)
    if limit is None:
        limit = next((MAX_BYTES[c.__name__] for c in error.__mro__ if c.__name__ in MAX_BYTES), DEFAULT_MAX_BYTES)
    try:
        with open(open_regular(path), "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            data = fh.read(limit + 1) if size <= limit else b""
    except FileNotFoundError:
        raise error(f"{label}: file not found", reasons=[{"file": label, "field": "", "reason": "file not found"}]) from None
    except NotRegular as exc:
        why = exc.strerror
        raise error(f"{label}: {why}", reasons=[{"file": label, "field": "", "reason": why, "kind": exc.kind}]) from None
    except (OSError, ValueError) as exc:  # no permission, a name the OS refuses (NUL, too long)
        why = f"cannot be read: {getattr(exc, 'strerror', None) or exc}"
        raise error(f"{label}: {why}", reasons=[{"file": label, "field": "", "reason": why}]) from None
    if size > limit or len(data) > limit:
        why = (f"is {_mb(max(size, len(data)))}{' or more' if size <= limit else ''}, over the "
               f"{_mb(limit)} limit for this kind of file; frt refuses it before parsing")
        raise error(f"{label}: {why}", reasons=[{"file": label, "field": "", "reason": why, "size": max(size, len(data)),
                                                  "limit": limit}])
    return data


def load_toml(path: Path, error: type[FrtError], label: str | None = None) -> dict:
    return parse_toml(read_bytes(path, error, label), error, label or str(path))


def parse_toml(data: bytes, error: type[FrtError], label: str) -> dict:
    """The one TOML reader of frt's documents (manifests, lockfiles, ``pyproject.toml``).

    ``rtoml`` (a maintained, compiled TOML 1.0 reader) rather than the stdlib's
    pure-Python ``tomllib``: on a lockfile it is 2.3x (100k cells) to 7.7x (the
    demo lock) faster, and a serving process reads its lockfile at every start
    (``bench/RESULTS.md``). It keeps key order, as ``tomllib`` does; a test holds
    its result to ``tomllib``'s on real lockfiles.
    """
    import rtoml  # noqa: PLC0415 - a compiled extension, imported when a document is first read

    try:
        return rtoml.loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:  # rtoml.TomlParsingError is a ValueError
        msg = str(exc).strip()
        raise error(f"{label}: not valid TOML: {msg}", reasons=[{"file": label, "field": "", "reason": f"not valid TOML: {msg}"}]) from None


def load_json(path: Path, error: type[FrtError], label: str | None = None) -> Any:
    label = label or str(path)
    data = read_bytes(path, error, label)
    try:
        return json_loads(data)
    except JSONInvalid as exc:
        raise error(f"{label}: not valid JSON: {exc}", reasons=[{"file": label, "field": "", "reason": f"not valid JSON: {exc}"}]) from None
