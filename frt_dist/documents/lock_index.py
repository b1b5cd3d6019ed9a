"""A lockfile's route index and embedded receipts as readers look them up (see ``lockfile``).

Every reader of a lock asks its route index the same few questions, declared once in
``RouteIndex``; both lockfile readers answer them: ``CellIndex`` holds every entry built (a lock
read whole by the TOML reader, or built in memory by ``frt lock``), ``_FoundIndex`` finds and
builds a cell when it is first looked up in the index text of a lock in frt's own layout. The
receipts are a ``Mapping`` of digest to ``Receipt`` parsed on first use (``_LazyReceipts``,
``_FoundReceipts``). The texts they search (``Cut``: bytes where they lie in the file) stay
inside this module and ``lock_fast``: no caller sees one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from ..base.record import dataclass
from ..errors import LockfileError
from .manifest import Manifest
from .receipt import STATES, CellKey, Receipt
from .schema import JSONInvalid, Reader, json_loads

__all__ = ["Candidate", "CellIndex", "Cut", "SHA256_DIGEST", "IndexEntry", "RouteIndex",
           "embedded_receipt_rows", "read_index", "read_receipts"]

SHA256_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


@dataclass(frozen=True)
class Candidate:
    """One ranked route for a cell of the route index, with the receipt it rests on."""

    route: str
    state: str
    receipt: str
    speedup: float | None

    def to_toml(self) -> dict:
        d = {"route": self.route, "state": self.state, "receipt": self.receipt}
        if self.speedup is not None:
            d["speedup"] = self.speedup
        return d


@dataclass(frozen=True)
class IndexEntry:
    """A cell of the route index and its ranked candidates."""

    key: CellKey
    candidates: tuple[Candidate, ...]  # ranked: [0] is the winner, the rest the runner-ups



class RouteIndex(Mapping):
    """What every reader of a lock asks of its route index: a ``Mapping`` of ``CellKey`` to
    ``IndexEntry`` (``get``, ``in``, ``items``), and the routes of a cell's candidates without
    building its entry (``routes_of``, ``cell_routes``: what the resolver's refusal reasons
    group). Both lockfile readers implement it: ``CellIndex`` and ``_FoundIndex``.

    ``lazy`` says what listing costs: ``True`` when cells are found and built one at a time
    (listing every cell reads the whole index text; a caller that can ask for its cells one by
    one, or use the lock's ``nearest`` summary, should)."""

    lazy = False

    def routes_of(self, key) -> set[str] | None:
        """The routes of the cell's candidates, or ``None`` without the cell."""
        entry = self.get(key)
        return None if entry is None else {c.route for c in entry.candidates}

    def cell_routes(self):
        """(cell key, the routes of its candidates) for every cell."""
        return ((k, {c.route for c in e.candidates}) for k, e in self.items())


class CellIndex(dict, RouteIndex):
    """A route index with every entry built: a dict of ``CellKey`` to ``IndexEntry`` (a lock read
    whole, or built by ``frt lock``). ``Lockfile`` wraps any other mapping it is given in one."""

    __slots__ = ()


class Cut:
    """A text as it lies in a buffer, ``buf[start:end]`` (UTF-8): the index and the receipts of
    a lockfile read from a file (``_read_fast`` cuts them out without decoding them), or a text
    given as ``str``, encoded once. Searched as bytes; decoded where a part is used, or whole by
    ``str()`` (``frt verify``, iterating every entry)."""

    __slots__ = ("buf", "end", "start")

    def __init__(self, buf: bytes, start: int = 0, end: int | None = None):
        self.buf, self.start, self.end = buf, start, len(buf) if end is None else end

    @classmethod
    def of(cls, value) -> Cut | None:
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            try:
                return cls(value.encode("utf-8"))
            except UnicodeEncodeError:  # (a lone surrogate: not text; the JSON reader names it)
                return None
        return None

    def __str__(self) -> str:
        return str(memoryview(self.buf)[self.start:self.end], "utf-8")

    def startswith(self, prefix: bytes) -> bool:
        return self.buf.startswith(prefix, self.start, self.end)

    def endswith(self, suffix: bytes) -> bool:
        return self.buf.endswith(suffix, self.start, self.end)

    def line_at(self, at: int) -> bytes:
        """The line that starts after the newline at ``at``, without a trailing comma (its number
        among the array's items is ``place(at)``, counted only when a message needs it)."""
        eol = self.buf.find(b"\n", at + 1, self.end)
        line = self.buf[at + 1:eol if eol >= 0 else self.end]
        return line[:-1] if line.endswith(b",") else line

    def place(self, at: int) -> int:
        """The number of the line after the newline at ``at`` among the array's items (0: the first)."""
        return self.buf.count(b"\n", self.start, at)

    def __eq__(self, other) -> bool:  # (a document compared as values compares the texts)
        return str(self) == (str(other) if isinstance(other, Cut) else other)

    __hash__ = None


class _LazyReceipts(Mapping):
    """The embedded receipts, parsed on first use.

    The lock-digest already covers every embedded byte, so reading a lockfile
    (what serving does) need not parse and re-digest every receipt: a receipt is
    parsed, shape-checked and checked against its own recorded digest when it is
    first looked at (the resolver looks only at the candidates it considers;
    ``frt verify`` looks at all of them).
    """

    def __init__(self, file: str, raw: dict[str, tuple], verify: bool):
        # digest -> (path, file label, body, kind): kind "line" is one line of the JSON array frt lock
        # writes (parsed on use), "text" a [[receipts]] table's json string, "object" a parsed receipt
        self._file, self._raw, self._verify = file, raw, verify
        self._parsed: dict[str, Receipt] = {}

    def __getitem__(self, digest_: str) -> Receipt:
        rec = self._parsed.get(digest_)
        if rec is None:
            rec = self._parsed[digest_] = self._parse(digest_, *self._raw[digest_])
        return rec

    def _parse(self, digest_: str, p: str, label, body, kind: str) -> Receipt:
        from ..errors import ReceiptInvalid  # noqa: PLC0415

        try:
            if kind == "line":
                label, body = self._line(p, digest_, body)
            rec = Receipt.parse(json_loads(body) if kind == "text" else body, file=label)
        except JSONInvalid as exc:  # (not JSON, nested too deeply, a lone surrogate, NaN...: _schema.json_loads)
            raise LockfileError(f"{self._file}: {p}: not valid JSON: {exc}", exit_code=1,
                                reasons=[{"kind": "receipt", "path": p, "expected": "JSON", "computed": str(exc)}]) from None
        except ReceiptInvalid as exc:
            raise LockfileError(f"{self._file}: {p}: {exc}", exit_code=1,
                                reasons=[{"kind": "receipt", "path": p, "expected": "a valid receipt",
                                          "computed": str(exc)}]) from None
        if self._verify and rec.digest != digest_:
            raise LockfileError(f"{self._file}: {p}.digest does not match the embedded receipt "
                                f"(expected {digest_}, computed {rec.digest})", exit_code=1,
                                reasons=[{"kind": "receipt", "path": f"{p}.digest", "expected": digest_,
                                          "computed": rec.digest}],
                                hints=["regenerate it with `frt lock`"])
        return rec

    def _line(self, p: str, digest_: str, line: str) -> tuple[str, dict]:
        """(file label, receipt object) of one line of the receipts array, checked like a table."""
        obj = json_loads(line)
        r = Reader(self._file, LockfileError)
        if not isinstance(obj, dict):
            raise r.fail(p, f"expected an object, got {type(obj).__name__}")
        r.only(obj, {"digest", "file", "route", "state", "receipt"}, p)
        if r.get(obj, "digest", str, p) != digest_:  # the line's head was read without parsing it
            raise r.fail(p + ".digest", "does not match the line it heads")
        for k in ("route", "state"):
            r.get(obj, k, str, p)
        return r.get(obj, "file", str, p), r.get(obj, "receipt", dict, p)

    def __contains__(self, digest_) -> bool:
        return digest_ in self._raw

    def list_all(self) -> None:
        """Read where every receipt lies, once (here: already known), so that checking every
        cell's candidates costs a lookup each, not a search each."""

    def __iter__(self):
        return iter(self._raw)

    def __len__(self) -> int:
        return len(self._raw)


class _FoundReceipts(_LazyReceipts):
    """The receipts text ``receipts_text`` writes (``[``, one receipt per line headed by
    ``{"digest": "sha256:<hex>", ``, ``]``), looked up by searching for the head: a receipt's
    line is found, parsed and checked (as ``_LazyReceipts`` does) only when it is used, so
    reading a lock and resolving with it costs a few searches, not a pass per receipt.

    A line can only start after a newline, and JSON holds no raw newline, so a head found is a
    line's head. The same receipt embedded twice is refused when it is looked up (the search
    goes on past the first) and when every receipt is listed; listing (``frt verify``, the
    matrix, ``len``) reads every line's head, as reading the text whole does."""

    def __init__(self, file: str, text: Cut, verify: bool):
        super().__init__(file, {}, verify)
        self._text = text
        self._at: dict[str, int] = {}  # digest -> the offset of the newline before its line
        self._all: dict[str, tuple] | None = None

    @staticmethod
    def layout(text: Cut) -> bool:
        return text.startswith(b'[\n{"digest": "sha256:') and text.endswith(b"}\n]\n")

    def _find(self, digest_) -> int:
        at = self._at.get(digest_)
        if at is None:
            if not (isinstance(digest_, str) and SHA256_DIGEST.match(digest_)):
                return -1
            t = self._text
            head = b'\n{"digest": "' + digest_.encode("ascii") + b'", '
            at = t.buf.find(head, t.start, t.end)
            if at >= 0:
                again = t.buf.find(head, at + 1, t.end)
                if again >= 0:
                    raise Reader(self._file, LockfileError).fail(
                        f"receipts[{t.place(again)}].digest", f"{digest_} is embedded twice")
                self._at[digest_] = at
        return at

    def __getitem__(self, digest_: str) -> Receipt:
        rec = self._parsed.get(digest_)
        if rec is None and self._all is not None:  # listed: its line is known (no search)
            i, start, end = self._all[digest_]
            rec = self._parsed[digest_] = self._parse(digest_, f"receipts[{i}]", None, self._all_text[start:end], "line")
        if rec is None:
            at = self._find(digest_)
            if at < 0:
                raise KeyError(digest_)
            line = self._text.line_at(at)
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError as exc:  # (the lock-digest was made over other bytes: an author's file)
                raise Reader(self._file, LockfileError).fail(f"receipts[{self._text.place(at)}]",
                                                             f"not UTF-8: {exc}") from None
            try:
                rec = self._parse(digest_, "receipts[?]", None, text, "line")
            except LockfileError:  # name the line by its place, counted only now
                rec = self._parse(digest_, f"receipts[{self._text.place(at)}]", None, text, "line")
            self._parsed[digest_] = rec
        return rec

    def __contains__(self, digest_) -> bool:
        if self._all is not None:
            return digest_ in self._all
        return self._find(digest_) >= 0

    def list_all(self) -> None:
        self._every()

    def _every(self) -> dict[str, tuple]:
        """digest -> (its place, start, end in the decoded text) of every line, read once:
        after it, a lookup is a dict lookup (listing every cell checks every candidate's
        receipt: one search each would read the text once per cell)."""
        if self._all is None:
            text = str(self._text)
            spans = _receipt_spans(text)
            if spans is None:
                raise Reader(self._file, LockfileError).fail("receipts", "not the layout frt lock writes: "
                                                             "one receipt per line, each headed by its digest")
            out: dict[str, tuple] = {}
            for i, (dig, start, end) in enumerate(spans):
                if dig in out:
                    raise Reader(self._file, LockfileError).fail(f"receipts[{i}].digest", f"{dig} is embedded twice")
                out[dig] = (i, start, end)
            self._all, self._all_text = out, text
        return self._all

    def __iter__(self):
        return iter(self._every())

    def __len__(self) -> int:
        return len(self._every())



def read_receipts(r: Reader, value, verify: bool) -> Mapping[str, Receipt]:
    """The embedded receipts, in any form a lock holds them: the text ``receipts_text`` writes
    (found line by line when used, ``_FoundReceipts``), another JSON array text, or an array of
    tables (parsed when first looked at, ``_LazyReceipts``)."""
    text = Cut.of(value)
    if text is not None and _FoundReceipts.layout(text):  # the layout frt lock writes
        return _FoundReceipts(r.file, text, verify)
    if isinstance(value, Cut):
        value = str(value)
    raw_receipts: dict[str, tuple] = {}
    for i, rt in enumerate(r.json_value(value, "receipts", list, "a JSON array (string) or an array of tables")):
        p = f"receipts[{i}]"
        if not isinstance(rt, dict):
            raise r.fail(p, f"expected an object, got {type(rt).__name__}")
        if "json" in rt:  # [[receipts]] tables: the receipt as a JSON string
            r.only(rt, {"digest", "file", "route", "state", "json"}, p)
            body, kind = r.get(rt, "json", str, p), "text"
        else:
            r.only(rt, {"digest", "file", "route", "state", "receipt"}, p)
            body, kind = r.get(rt, "receipt", dict, p), "object"
        dig = r.get(rt, "digest", str, p)
        raw_receipts[dig] = (p, r.get(rt, "file", str, p), body, kind)
    return _LazyReceipts(r.file, raw_receipts, verify)


def _index_entry(r: Reader, it, p: str, manifest: Manifest, receipts, index_refs: bool) -> IndexEntry:
    """One cell of the route index, checked field by field (``p``: its path, ``index[i]``)."""
    if not isinstance(it, dict):
        raise r.fail(p, f"expected an object, got {type(it).__name__}")
    r.only(it, {"phase", "precision", "backend", "arch", "device-class", "route", "state", "receipt", "candidates"}, p)
    key = CellKey(*(r.get(it, k, str, p) for k in ("phase", "precision", "backend", "arch", "device-class")))
    cands = []
    for j, c in enumerate(r.get(it, "candidates", list, p)):
        cp = f"{p}.candidates[{j}]"
        if not isinstance(c, dict):
            raise r.fail(cp, f"expected an object, got {type(c).__name__}")
        sp = r.number(c, "speedup", cp, required=False)
        route = r.get(c, "route", str, cp)
        if r.get(c, "state", str, cp) not in STATES:
            raise r.fail(cp + ".state", f"expected one of {', '.join(STATES)}, got {c['state']!r}")
        if route not in manifest.routes:
            raise r.fail(cp + ".route", f"{route!r} is not a route of the embedded manifest")
        cands.append(Candidate(route, r.get(c, "state", str, cp), r.get(c, "receipt", str, cp), sp))
        if index_refs and cands[-1].receipt not in receipts:
            raise r.fail(cp + ".receipt", "names a receipt the lockfile does not embed")
    if not cands:
        raise r.fail(p + ".candidates", "an index entry needs at least one candidate")
    return IndexEntry(key, tuple(cands))


def read_index(r: Reader, value, manifest: Manifest, receipts, index_refs: bool):
    """The route index: looked up cell by cell when it is the text ``index_text`` writes (see
    ``_FoundIndex``); else every entry now, as a ``CellIndex``."""
    text = Cut.of(value)
    if text is not None and _FoundIndex.layout(text):
        return _FoundIndex(r, text, manifest, receipts, index_refs)
    if isinstance(value, Cut):
        value = str(value)
    return _whole_index(r, value, manifest, receipts, index_refs)


def _whole_index(r: Reader, value, manifest: Manifest, receipts, index_refs: bool) -> CellIndex:
    entries = r.json_value(value, "index", list, "a JSON array (string) or an array of tables")
    if index_refs and len(entries) > 8:  # (receipts: read_receipts' answer)
        receipts.list_all()  # every candidate's receipt is checked: list them once, not one search per cell
    index = CellIndex()
    for i, it in enumerate(entries):
        e = _index_entry(r, it, f"index[{i}]", manifest, receipts, index_refs)
        index[e.key] = e
    return index


def _js(s: str) -> bytes:
    return json.dumps(s, ensure_ascii=False).encode("utf-8")


# the candidates' routes in one line of the index (a candidate object starts `{"route": `; the cell's
# own `"route": ` follows a comma)
_LINE_ROUTES = re.compile(rb'\{"route": "([^"\\\x00-\x1f]*)", ')
_LINE_HEAD = re.compile(rb'\{"phase": "([^"]*)", "precision": "([^"]*)", "backend": "([^"]*)", "arch": "([^"]*)", '
                        rb'"device-class": "([^"]*)", "route": ')


class _FoundIndex(RouteIndex):
    """The route index of a lockfile, looked up one cell at a time by searching its text.

    ``index_text`` writes ``[``, then one JSON object per line whose first five keys are the
    cell's (``{"phase": "...", "precision": "...", "backend": "...", "arch": "...",
    "device-class": "...", "route": ``...), then ``]``. A cell is found by searching for that
    head (the last line with it, as a dict of every entry keeps the last), and its line is
    decoded and checked (``_index_entry``, the same checks and messages as reading every entry)
    when the cell is first looked up: resolving one cell builds no object for the others and
    reads no other line. ``layout`` takes the text only when that search finds what reading
    the array whole finds: it is one JSON array whose every line starts with ``{"phase": ``
    (lines joined by ``,`` and a newline, none after the last), and it holds no backslash, so
    no string in it is escaped and a value's JSON is its text. A line whose keys are in
    another order, or any other layout an author may write, is ``frt verify``'s to report (it
    compares the text with what ``frt lock`` writes). Iterating builds every entry (``frt
    verify``, the matrix)."""

    lazy = True

    def __init__(self, r: Reader, text: Cut, manifest: Manifest, receipts, index_refs: bool):
        self._r, self._text, self._args = r, text, (manifest, receipts, index_refs)
        self._built: dict = {}
        self._all: dict | None = None

    @staticmethod
    def layout(text: Cut) -> bool:
        b, s, e = text.buf, text.start, text.end
        if not (text.startswith(b'[\n{"phase": ') and text.endswith(b"}\n]\n")) or b.find(b"\\", s, e) >= 0:
            return False
        lines = b.count(b'\n{"phase": ', s, e)
        return lines == b.count(b"\n", s, e) - 2 and b.count(b'},\n{"phase": ', s, e) == lines - 1

    def _find(self, key) -> int:
        try:
            phase, precision, backend, arch, dc = key
            head = (b'\n{"phase": ' + _js(phase) + b', "precision": ' + _js(precision) + b', "backend": '
                    + _js(backend) + b', "arch": ' + _js(arch) + b', "device-class": ' + _js(dc) + b', "route": ')
        except (TypeError, ValueError):  # (not a 5-tuple of text: no cell of this index)
            return -1
        t = self._text
        return t.buf.rfind(head, t.start, t.end)

    def __getitem__(self, key) -> IndexEntry:
        e = self._built.get(key)
        if e is None:
            if self._all is not None:
                return self._all[key]
            at = self._find(key)
            if at < 0:
                raise KeyError(key)
            try:
                e = self._entry(key, at, "index[?]")
            except LockfileError:  # name the line by its place, counted only now
                e = self._entry(key, at, f"index[{self._text.place(at)}]")
            self._built[key] = e
        return e

    def _entry(self, key, at: int, p: str) -> IndexEntry:
        line = self._text.line_at(at)
        try:
            obj = json_loads(line)
        except JSONInvalid as exc:
            raise self._r.fail(p, f"not valid JSON: {exc}") from None
        e = _index_entry(self._r, obj, p, *self._args)
        if tuple(e.key) != tuple(key):  # (a key written twice in the line: JSON keeps the last)
            raise self._r.fail(p, "the line does not hold the cell its head names")
        return e

    def __contains__(self, key) -> bool:
        if self._all is not None:
            return key in self._all
        return key in self._built or self._find(key) >= 0

    def cell_routes(self):
        """(cell key as a plain 5-tuple, the routes of its candidates) for every cell, from the
        lines' heads and candidates' routes alone: what the resolver groups for its refusal
        reasons when the lock has no ``nearest`` summary (a ``frt.lock/1`` lock), without building
        every entry. A line whose head is not frt's lists every entry instead."""
        t = self._text
        if self._all is None:
            body = t.buf[t.start:t.end].split(b"\n")[1:-2]
            out = {}
            for line in body:
                m = _LINE_HEAD.match(line)
                if m is None:
                    break
                out[tuple(g.decode("utf-8") for g in m.groups())] = {r.decode("utf-8") for r in _LINE_ROUTES.findall(line)}
            else:
                return iter(out.items())
        return ((tuple(k), {c.route for c in e.candidates}) for k, e in self._every().items())

    def routes_of(self, key) -> set[str] | None:
        """The routes of the cell's candidates, from its line alone (no entry built, no receipt
        looked up: what the resolver's refusal reasons group), or ``None`` without the cell."""
        at = self._find(key)
        if at < 0:
            return None
        line = self._text.line_at(at)
        return {m.decode("utf-8") for m in _LINE_ROUTES.findall(line)}

    def _every(self) -> dict:
        if self._all is None:
            self._all = _whole_index(self._r, str(self._text), *self._args)
        return self._all

    def __iter__(self):
        return iter(self._every())

    def __len__(self) -> int:
        return len(self._every())


def _json(text: str):
    """``_schema.json_loads``: every failure a ``ValueError`` (``JSONInvalid``): not JSON, too deep,
    NaN, an integer too long, a lone surrogate escape (not text: no digest can be made of it)."""
    return json_loads(text)


def embedded_receipt_rows(data: dict) -> list[tuple[str, dict | str]]:
    """Every embedded receipt of a parsed lockfile document as ``(where, row)``: ``row`` is
    ``{"digest", "file", "route", "state", "receipt"}`` (the receipt as an object, whatever
    form the lock holds it in), or the reason the entry cannot be read. What ``frt verify``
    re-checks: nothing here is trusted, not even the digest at the head of a line."""
    embedded = data.get("receipts", [])
    lines = _receipt_lines(embedded) if isinstance(embedded, str) else None
    if lines is not None:
        items = []
        for _, line in lines:
            try:
                items.append(_json(line))
            except ValueError as exc:
                items.append(f"not valid JSON: {exc}")
    elif isinstance(embedded, str):
        try:
            items = _json(embedded)
        except ValueError as exc:
            return [("receipts", f"not valid JSON: {exc}")]
    else:
        items = embedded
    if not isinstance(items, list):
        return [("receipts", f"expected an array, got {type(items).__name__}")]
    out: list[tuple[str, dict | str]] = []
    for i, it in enumerate(items):
        where = f"receipts[{i}]"
        if isinstance(it, str):
            out.append((where, it))
            continue
        if not isinstance(it, dict):
            out.append((where, f"expected an object, got {type(it).__name__}"))
            continue
        row = {k: v for k, v in it.items() if k != "json"}
        if "json" in it:
            try:
                row["receipt"] = _json(it["json"]) if isinstance(it["json"], str) else None
            except ValueError as exc:
                out.append((where, f"json: not valid JSON: {exc}"))
                continue
        extra = sorted(set(row) - {"digest", "file", "route", "state", "receipt"})
        bad = [k for k in ("digest", "file", "route", "state") if not isinstance(row.get(k), str)]
        if extra or bad or not isinstance(row.get("receipt"), dict):
            out.append((where, f"unknown field(s) {', '.join(extra)}" if extra else
                        f"{bad[0]} must be a string" if bad else "the receipt must be an object"))
            continue
        out.append((where, row))
    return out


_RECEIPT_LINE = re.compile(r'\{"digest": "(sha256:[0-9a-f]{64})", ')


def _receipt_lines(text: str) -> list[tuple[str, str]] | None:
    """(digest, line) per receipt when ``text`` has exactly the layout ``receipts_text``
    writes (``[``, one object per line headed by its digest, ``]``), else ``None``."""
    lines = text.split("\n")
    if len(lines) < 4 or lines[0] != "[" or lines[-2:] != ["]", ""]:
        return None
    body = lines[1:-2]
    out = []
    for j, line in enumerate(body):
        if j < len(body) - 1:
            if not line.endswith(","):
                return None
            line = line[:-1]
        m = _RECEIPT_LINE.match(line)
        if m is None or not line.endswith("}"):
            return None
        out.append((m.group(1), line))
    return out


_HEX64 = re.compile(r"[0-9a-f]{64}")


def _receipt_spans(text: str) -> list[tuple[str, int, int]] | None:
    """``_receipt_lines`` without cutting the text into lines: (digest, start, end) of each
    receipt line when ``text`` has exactly the layout ``receipts_text`` writes, else ``None``.
    The same checks, line by line, over offsets: a large lock's receipts are most of its bytes,
    and serving reads only the few it resolves with."""
    if not text.startswith("[\n") or not text.endswith("\n]\n") or len(text) < 6:
        return None
    out = []
    find, startswith, hexmatch = text.find, text.startswith, _HEX64.fullmatch
    last = len(text) - 3  # the newline before the closing "]"
    pos = 2
    while True:
        end = find("\n", pos)
        final = end == last
        stop = end if final else end - 1  # the line without its comma
        if not final and text[stop] != ",":
            return None
        # the head `_RECEIPT_LINE` matches: {"digest": "sha256:<64 hex>", ; and the object's close
        if (not startswith('{"digest": "sha256:', pos) or hexmatch(text, pos + 19, pos + 83) is None
                or not startswith('", ', pos + 83) or stop - 1 < pos + 86 or text[stop - 1] != "}"):
            return None
        out.append((text[pos + 12:pos + 83], pos, stop))
        if final:
            return out
        pos = end + 1

