"""Reading a large lockfile fast (issue 20 item 2) reads exactly what reading it whole reads.

The fast reader cuts the index and receipts texts out of the file instead of running them
through the TOML reader, hashes the lock-digest in slices, and parses the route index one cell
at a time. Each shortcut is held to the slow definition it stands for, on frt's own layout and
on damaged or hand-written files (which must fall back, or fail the same way).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from frt_dist import lockfile as L
from frt_dist._schema import parse_toml
from frt_dist.canonical import digest
from frt_dist.errors import LockfileError
from frt_dist.hardware import Hardware
from frt_dist.lockfile import Lockfile
from frt_dist.project import bundled_root
from frt_dist.receipt import CellKey
from frt_dist.routes import resolver
from frt_dist.routes.resolver import resolve_all

DEMO = bundled_root() / "lockfiles" / "demo-decoder.lock"
DEMO_HW = Hardware(arch="x86_64", device_class="amd-epyc", backend="cpu", software={"torch": "2.13", "kernels": "0.17.2"})


def _doc() -> dict:
    doc = parse_toml(DEMO.read_bytes(), LockfileError, "demo")
    doc.pop("lock-digest")
    return doc


def _write(path: Path, doc: dict) -> Path:
    """``doc`` rendered as frt lock renders it, with its lock-digest recomputed."""
    path.write_bytes(L.render(doc, digest(doc)))
    return path


def _whole(path: Path, **kw) -> Lockfile:
    """The lockfile read the slow way: the TOML reader on every byte, every index entry built."""
    from unittest import mock

    data = parse_toml(path.read_bytes(), LockfileError, str(path))
    with mock.patch.object(L._LazyIndex, "scan", classmethod(lambda cls, *a: None)):
        lock = Lockfile.from_document(data, file=str(path), **kw)
    assert isinstance(lock.index, dict)
    return lock


# --- the lock-digest, hashed in slices


def _random_text(rnd: random.Random, n: int) -> str:
    alphabet = ['"', "\\", "\n", "a", "b", " ", "{", "}", ",", ":", "é", "\u2028", "𝄞", "\t", "\x01", "\x7f", "'"]
    return "".join(rnd.choice(alphabet) for _ in range(n))


@pytest.mark.parametrize("chunk", [1, 7, 1 << 18])
def test_the_sliced_digest_is_the_canonical_digest(monkeypatch, chunk):
    monkeypatch.setattr(L, "_CHUNK", chunk)
    rnd = random.Random(chunk)
    for _ in range(60):
        body = {"schema": "frt.lock/1", "index": _random_text(rnd, rnd.randint(0, 300)),
                "receipts": _random_text(rnd, rnd.randint(0, 300)), "packages": {"a/b": {"x": [1, 2.5, None, True]}},
                _random_text(rnd, 3): _random_text(rnd, 5)}
        assert L._lock_digest(body) == digest(body)
        # a text the fast reader cut out: any control character but a newline sends it to the full reader
        plain = all(c not in body["index"] + body["receipts"] for c in "\t\x01\x7f")
        assert L._lock_digest(body, literal={"index", "receipts"}) == (digest(body) if plain else None)
    demo = _doc()
    assert L._lock_digest(demo) == digest(demo) == parse_toml(DEMO.read_bytes(), LockfileError, "d")["lock-digest"]


# --- the index and receipts cut out of the file, the rest read by the TOML reader


def test_the_fast_read_of_the_demo_lock_is_the_toml_readers():
    raw = DEMO.read_bytes()
    doc, computed = L._read_fast(raw)
    full = parse_toml(raw, LockfileError, "demo")
    assert doc == full and list(doc) == list(full)
    assert computed == full["lock-digest"]


@pytest.mark.parametrize("edit, stepped_aside", [
    (("\nindex = '''\n", "\nindex = '''\n\t"), True),  # a tab (TOML allows it): the full reader decides
    (("\nreceipts = '''\n", "\nreceipts = '''\n\x01"), True),  # a control character (TOML refuses it)
    (("\nreceipts = '''\n", "\nreceipts = '''\n\x7f"), True),
    (("]\n'''\n", "]\n''''\n"), True),  # closes with a quote in the text
    (("\nmodel = ", "\nnote = \"\"\"\nindex = '''\n'''\n\"\"\"\nmodel = "), True),  # an opener in another string
    (("\nindex = '''\n", "\nindex = '''\r\n"), False),  # CRLF after the opener: that text is not cut
])
def test_what_the_fast_read_cannot_prove_goes_to_the_full_reader(edit, stepped_aside):
    text = DEMO.read_text("utf-8")
    assert edit[0] in text
    raw = text.replace(edit[0], edit[1], 1).encode("utf-8")
    fast = L._read_fast(raw)
    assert (fast is None) == stepped_aside
    if fast is not None:
        assert fast[0] == parse_toml(raw, LockfileError, "x")


def test_an_opener_formed_by_another_literals_closing_quotes_is_not_cut():
    """The receipts text ending in ``index = `` makes its closing quotes look like an index
    opener: the two cuts overlap, and the file is read whole (and reads as the TOML reader reads it)."""
    doc = _doc()
    doc.pop("index")
    doc["receipts"] += "x\nindex = "
    raw = L.render(doc, digest(doc))
    assert "\nindex = '''\n" in raw.decode()
    assert L._read_fast(raw) is None
    assert "index" not in parse_toml(raw, LockfileError, "x")


def test_the_fast_read_never_differs_from_the_toml_reader_on_damaged_files():
    """Damage near every line break and delimiter of the demo lock: the fast read either steps
    aside (None) or returns exactly the TOML reader's document and the canonical digest."""
    base = DEMO.read_bytes()
    hot = [i for i in range(len(base)) if base[i:i + 3] == b"'''" or base[i:i + 1] == b"\n"]
    pieces = [b"'", b"'''", b"\n", b"\r\n", b"\t", b"\x01", b'"', b'"""', b"index = '''\n", b"receipts = '''\n",
              b"[t]\n", b"\nindex = ''\n", b"#", b"\\", b"\xc3", b" "]
    rnd = random.Random(20)
    taken = 0
    for _ in range(600):
        s = bytearray(base)
        for _ in range(rnd.randint(1, 3)):
            j = min(len(s), max(0, rnd.choice(hot) + rnd.randint(-3, 3)))
            op = rnd.random()
            if op < 0.5:
                s[j:j] = rnd.choice(pieces)
            elif op < 0.8:
                del s[j:j + rnd.randint(1, 3)]
            else:
                s[j:j + 1] = rnd.choice(pieces)
        s = bytes(s)
        fast = L._read_fast(s)
        if fast is None:
            continue
        taken += 1
        full = parse_toml(s, LockfileError, "x")  # the fast read took it: the TOML reader must too
        assert fast[0] == full and list(fast[0]) == list(full)
        assert fast[1] == digest({k: v for k, v in full.items() if k != "lock-digest"})
    assert taken > 100  # the fast path is exercised, not only stepped aside from


def test_receipt_spans_find_exactly_the_lines_the_line_reader_finds():
    text = _doc()["receipts"]
    nl = [i for i, c in enumerate(text) if c == "\n"]
    rnd = random.Random(7)
    for _ in range(1500):
        s = list(text)
        for _ in range(rnd.randint(1, 2)):
            j = min(len(s) - 1, max(0, rnd.choice(nl) + rnd.randint(-4, 95)))
            op, ch = rnd.random(), rnd.choice(["\n", ",", "}", "{", '"', "a", " ", "[", "]", "0", "f"])
            if op < 0.4:
                s[j] = ch
            elif op < 0.7:
                del s[j]
            else:
                s.insert(j, ch)
        s = "".join(s)
        lines, spans = L._receipt_lines(s), L._receipt_spans(s)
        assert (lines is None) == (spans is None)
        if lines is not None:
            assert lines == [(d, s[a:b]) for d, a, b in spans]


# --- the route index, one cell at a time


def _big_index(doc: dict, n: int) -> dict:
    """The demo lock with ``n`` more cells, each pointing at the demo's receipts."""
    index = json.loads(doc["index"])
    for i in range(n):
        for base in index[:2]:
            e = json.loads(json.dumps(base))
            e["device-class"] = f"dc-{i:05d}"
            e["arch"] = ["x86_64", "aarch64"][i % 2]
            index.append(e)
    index.sort(key=lambda e: tuple(e[k] for k in ("phase", "precision", "backend", "arch", "device-class")))
    return {**doc, "index": L.index_text(index)}


def test_resolving_one_cell_builds_only_that_cells_entries(tmp_path):
    path = _write(tmp_path / "big.lock", _big_index(_doc(), 500))
    lock = Lockfile.read(path)
    assert isinstance(lock.index, L._LazyIndex) and len(lock.index) == 1002
    decisions = resolve_all(lock, hardware=DEMO_HW, precision="fp32")
    assert [d.route for d in decisions.values()] == ["fused", "fused"]
    assert len(lock.index._built) == 2  # the two phase bands' cells, out of 1,002
    assert decisions == resolve_all(_whole(path), hardware=DEMO_HW, precision="fp32")


def test_the_lazy_index_holds_what_reading_every_entry_holds(tmp_path):
    path = _write(tmp_path / "big.lock", _big_index(_doc(), 40))
    lazy, whole = Lockfile.read(path).index, _whole(path).index
    assert isinstance(lazy, L._LazyIndex) and isinstance(whole, dict)
    assert list(lazy) == list(whole) and dict(lazy.items()) == whole
    assert all(isinstance(k, CellKey) for k in lazy)
    assert CellKey("decode", "fp32", "cpu", "x86_64", "nope") not in lazy
    with pytest.raises(KeyError):
        lazy[CellKey("decode", "fp32", "cpu", "x86_64", "nope")]


@pytest.mark.parametrize("how", ["escaped", "key-order", "indented", "duplicate"])
def test_an_index_not_in_frts_layout_is_read_whole_and_the_same(tmp_path, how):
    doc = _doc()
    entries = json.loads(doc["index"])
    if how == "escaped":  # the same value, written with an escape: the head is no longer its text
        text = L.index_text(entries).replace('"amd-epyc"', '"amd\\u002depyc"', 1)
    elif how == "key-order":
        text = "[\n" + ",\n".join(json.dumps(dict(reversed(list(e.items())))) for e in entries) + "\n]\n"
    elif how == "indented":
        text = json.dumps(entries, indent=1) + "\n"
    else:  # the same cell twice: the last line wins, as in a dict of every entry
        dup = json.loads(json.dumps(entries[0]))
        dup["candidates"] = dup["candidates"][1:]
        text = L.index_text(entries + [dup])
    path = _write(tmp_path / "x.lock", {**doc, "index": text})
    lock = Lockfile.read(path)
    assert dict(lock.index.items()) == _whole(path).index
    assert isinstance(lock.index, dict) == (how != "duplicate")
    if how == "duplicate":
        assert [c.route for c in lock.index[CellKey(*(entries[0][k] for k in (
            "phase", "precision", "backend", "arch", "device-class")))].candidates] == ["split"]


@pytest.mark.parametrize("damage, path_, why", [
    ("route", "index[1].candidates[1].route", "'nope' is not a route of the embedded manifest"),
    ("receipt", "index[1].candidates[0].receipt", "names a receipt the lockfile does not embed"),
])
def test_a_damaged_cell_is_refused_at_read_as_before(tmp_path, damage, path_, why):
    """A cell the resolver never looks at still makes the read fail, with the message reading
    every entry gives (a lock whose digest holds but whose index names what it lacks)."""
    doc = _doc()
    entries = json.loads(doc["index"])
    if damage == "route":
        entries[1]["candidates"][1]["route"] = "nope"
    else:
        entries[1]["candidates"][0]["receipt"] = "sha256:" + "0" * 64
    path = _write(tmp_path / "x.lock", {**doc, "index": L.index_text(entries)})
    with pytest.raises(LockfileError) as lazy:
        Lockfile.read(path)
    with pytest.raises(LockfileError) as whole:
        _whole(path)
    assert str(lazy.value) == str(whole.value) == f"{path}: {path_}: {why}"
    r = subprocess.run([sys.executable, "-m", "frt_dist.cli", "resolve", "--lockfile", str(path), "--arch", "x86_64",
                        "--device-class", "amd-epyc", "--json"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stdout + r.stderr
    assert json.loads(r.stdout)["error"] == f"{path}: {path_}: {why}"


# --- nearest-miss reasons from two per group


def _reference_miss(index: dict, route: str, key: CellKey) -> str | None:
    """The grouping the resolver used before: every (device class, arch) of a group, sorted."""
    same, band, hw = {}, {}, {}
    for k, routes in index.items():
        for r in routes:
            same.setdefault((r, k.phase, k.precision, k.backend), set()).add((k.device_class, k.arch))
            band.setdefault((r, k.phase, k.precision), set()).add((k.device_class, k.arch, k.backend))
            hw.setdefault((r, k.backend, k.arch, k.device_class), set()).add((k.phase, k.precision))
    for dc, arch in sorted(same.get((route, key.phase, key.precision, key.backend), ())):
        if dc != key.device_class:
            return f"dc {dc}"
        if arch != key.arch:
            return f"arch {arch}"
    for dc, arch, backend in sorted(band.get((route, key.phase, key.precision), ())):
        if backend == key.backend:
            continue
        return f"dc {dc}" if dc != key.device_class else f"arch {arch}" if arch != key.arch else f"backend {backend}"
    cells = hw.get((route, key.backend, key.arch, key.device_class), ())
    return repr((sorted({p for p, q in cells if q == key.precision}), sorted({q for _, q in cells})))


def test_nearest_miss_reasons_match_the_full_grouping():
    rnd = random.Random(3)
    vals = {"phase": ["a", "b"], "precision": ["p", "q"], "backend": ["cuda", "rocm", "cpu"], "arch": ["1", "2", "3"],
            "device_class": ["d1", "d2", "d3", "d4"]}
    for _ in range(200):
        index = {CellKey(*(rnd.choice(v) for v in vals.values())): {rnd.choice("RST") for _ in range(rnd.randint(1, 2))}
                 for _ in range(rnd.randint(1, 12))}

        class Fake:
            pass

        lock = Fake()
        lock.index = type("I", (), {"cell_routes": lambda self: iter(index.items())})()
        lock.memo, lock.rejected = {}, []
        for _ in range(10):
            key = CellKey(*(rnd.choice(v) for v in vals.values()))
            route = rnd.choice("RST")
            got = resolver._nearest_miss(lock, route, key, None)
            want = _reference_miss(index, route, key)
            if want.startswith(("dc ", "arch ", "backend ")):
                kind, value = want.split(" ", 1)
                assert got == "no receipt for this cell: receipt measured on " + {
                    "dc": f"{value}, device is {key.device_class}", "arch": f"arch {value}, device is {key.arch}",
                    "backend": f"backend {value}, device is {key.backend}"}[kind]
            else:
                phases, precisions = eval(want)  # noqa: S307 - the reference's own repr
                if phases and key.phase not in phases:
                    assert got.endswith(f"receipts cover phase {', '.join(phases)}, not {key.phase}")
                elif precisions and key.precision not in precisions:
                    assert got.endswith(f"receipts cover precision {', '.join(precisions)}, not {key.precision}")
                else:
                    assert got == "no receipt for this cell"


@pytest.mark.parametrize("how", ["comma missing", "comma after the last", "no opening bracket", "no closing bracket"])
def test_an_index_that_is_not_one_json_array_is_refused_at_read_as_before(tmp_path, how):
    """Lines that each look like a cell but do not make one JSON array (a comma missing between
    two, or one after the last) are refused at read, as reading the array whole refuses them."""
    doc = _doc()
    text = L.index_text(json.loads(doc["index"]))
    text = {"comma missing": lambda t: t.replace("},\n{", "}\n{", 1),
            "comma after the last": lambda t: t.replace("}\n]\n", "},\n]\n"),
            "no opening bracket": lambda t: "(" + t[1:],
            "no closing bracket": lambda t: t[:-2] + ")\n"}[how](text)
    path = _write(tmp_path / "x.lock", {**doc, "index": text})
    with pytest.raises(LockfileError) as lazy:
        Lockfile.read(path)
    with pytest.raises(LockfileError) as whole:
        _whole(path)
    assert str(lazy.value) == str(whole.value)
    assert str(lazy.value).startswith(f"{path}: index: not valid JSON")
