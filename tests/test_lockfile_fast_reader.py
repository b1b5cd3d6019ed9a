"""Reading a large lockfile fast reads exactly what reading it whole reads.

The fast reader cuts the index and receipts texts out of the file instead of running them
through the TOML reader, hashes the lock-digest in slices, and parses the route index one cell
at a time. Each shortcut is held to the slow definition it stands for, on frt's own layout and
on damaged or hand-written files (which must fall back, or fail the same way).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from frt_dist.base.canonical import digest
from frt_dist.documents import lock_fast as LF
from frt_dist.documents import lock_index as LI
from frt_dist.documents import lockfile as L
from frt_dist.documents.lockfile import LockCache, Lockfile
from frt_dist.documents.receipt import CellKey
from frt_dist.documents.schema import parse_toml
from frt_dist.errors import LockfileError
from frt_dist.project.discover import bundled_root
from frt_dist.routes import resolver
from frt_dist.routes.resolver import resolve_all
from frt_dist.system.hardware import Hardware
from helpers.frt import frt_process

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
    with mock.patch.object(LI._FoundIndex, "layout", staticmethod(lambda text: False)), \
            mock.patch.object(LI._FoundReceipts, "layout", staticmethod(lambda text: False)):
        lock = Lockfile.from_document(data, file=str(path), **kw)
    assert isinstance(lock.index, dict) and type(lock.receipts) is LI._LazyReceipts
    return lock


# --- the lock-digest, hashed in slices


def _random_text(rnd: random.Random, n: int) -> str:
    alphabet = ['"', "\\", "\n", "a", "b", " ", "{", "}", ",", ":", "é", "\u2028", "𝄞", "\t", "\x01", "\x7f", "'"]
    return "".join(rnd.choice(alphabet) for _ in range(n))


@pytest.mark.parametrize("chunk", [1, 7, 1 << 18])
def test_the_sliced_digest_is_the_canonical_digest(monkeypatch, chunk):
    monkeypatch.setattr(LF, "_CHUNK", chunk)
    rnd = random.Random(chunk)
    for _ in range(60):
        body = {"schema": "frt.lock/1", "index": _random_text(rnd, rnd.randint(0, 300)),
                "receipts": _random_text(rnd, rnd.randint(0, 300)), "packages": {"a/b": {"x": [1, 2.5, None, True]}},
                _random_text(rnd, 3): _random_text(rnd, 5)}
        assert LF.lock_digest_of(body) == digest(body)
        # a text the fast reader cut out: any control character but a newline sends it to the full reader
        plain = all(c not in body["index"] + body["receipts"] for c in "\t\x01\x7f")
        assert LF.lock_digest_of(body, literal={"index", "receipts"}) == (digest(body) if plain else None)
    demo = _doc()
    assert LF.lock_digest_of(demo) == digest(demo) == parse_toml(DEMO.read_bytes(), LockfileError, "d")["lock-digest"]


# --- the index and receipts cut out of the file, the rest read by the TOML reader


def test_the_fast_read_of_the_demo_lock_is_the_toml_readers():
    raw = DEMO.read_bytes()
    doc, computed = LF._read_fast(raw)
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
    fast = LF._read_fast(raw)
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
    assert LF._read_fast(raw) is None
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
        fast = LF._read_fast(s)
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
        lines, spans = LI._receipt_lines(s), LI._receipt_spans(s)
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
    assert isinstance(lock.index, LI._FoundIndex) and isinstance(lock.receipts, LI._FoundReceipts)
    decisions = resolve_all(lock, hardware=DEMO_HW, precision="fp32")
    assert [d.route for d in decisions.values()] == ["fused", "fused"]
    # the two phase bands' cells, out of 1,002, and the receipts their candidates name: nothing
    # else was decoded (no listing of every cell or receipt was made)
    assert len(lock.index._built) == 2 and lock.index._all is None
    assert lock.receipts._all is None
    assert set(lock.receipts._parsed) == {c.receipt for e in lock.index._built.values() for c in e.candidates}
    assert len(lock.index) == 1002  # (listing reads every line)
    assert decisions == resolve_all(_whole(path), hardware=DEMO_HW, precision="fp32")


def test_the_lazy_index_holds_what_reading_every_entry_holds(tmp_path):
    path = _write(tmp_path / "big.lock", _big_index(_doc(), 40))
    lazy, whole = Lockfile.read(path).index, _whole(path).index
    assert isinstance(lazy, LI._FoundIndex) and isinstance(whole, dict)
    for key, entry in whole.items():  # each cell found by its head is the cell reading every entry holds
        assert key in lazy and lazy[key] == entry
    assert lazy._all is None and len(lazy._built) == len(whole)
    assert list(lazy) == list(whole) and dict(lazy.items()) == whole
    assert all(isinstance(k, CellKey) for k in lazy)
    fresh = Lockfile.read(path).index
    for missing in (CellKey("decode", "fp32", "cpu", "x86_64", "nope"), CellKey("decode", "fp32", "cpu", "x86_6", "amd-epyc"),
                    ("decode", "fp32", "cpu"), CellKey("decode", "fp32", "cpu", "x86_64", 'amd-epyc", "route": ')):
        assert missing not in fresh
        with pytest.raises(KeyError):
            fresh[missing]
        assert fresh.routes_of(missing) is None


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
    assert isinstance(lock.index, dict) == (how != "duplicate")
    if how == "duplicate":  # looked up by its head: the last line, as a dict of every entry keeps
        assert [c.route for c in lock.index[CellKey(*(entries[0][k] for k in (
            "phase", "precision", "backend", "arch", "device-class")))].candidates] == ["split"]
    assert dict(lock.index.items()) == _whole(path).index


@pytest.mark.parametrize("damage, path_, why", [
    ("route", "index[1].candidates[1].route", "'nope' is not a route of the embedded manifest"),
    ("receipt", "index[1].candidates[0].receipt", "names a receipt the lockfile does not embed"),
])
@pytest.mark.subprocess
def test_a_damaged_cell_is_refused_when_it_is_used(tmp_path, damage, path_, why):
    """A cell is checked when a decision reads it, with the message reading every entry gives
    (a lock whose digest holds but whose index names what it lacks: an author's edit). A cell
    no decision reads is not read: resolving another band still answers, and ``frt verify``
    (which reads every cell) reports it (tests/test_verify.py)."""
    doc = _doc()
    entries = json.loads(doc["index"])
    if damage == "route":
        entries[1]["candidates"][1]["route"] = "nope"
    else:
        entries[1]["candidates"][0]["receipt"] = "sha256:" + "0" * 64
    path = _write(tmp_path / "x.lock", {**doc, "index": L.index_text(entries)})
    lock = Lockfile.read(path)
    key = CellKey(*(entries[1][k] for k in ("phase", "precision", "backend", "arch", "device-class")))
    with pytest.raises(LockfileError) as lazy:
        lock.index[key]
    with pytest.raises(LockfileError) as whole:
        _whole(path)
    with pytest.raises(LockfileError) as listed:
        list(Lockfile.read(path).index.items())
    assert str(lazy.value) == str(whole.value) == str(listed.value) == f"{path}: {path_}: {why}"
    cli = ["resolve", "--lockfile", str(path), "--arch", "x86_64",
           "--device-class", "amd-epyc", "--software", "torch=2.13,kernels=0.17.2", "--json"]
    r = frt_process(cli, timeout=60)
    assert r.returncode == 2, r.stdout + r.stderr
    assert json.loads(r.stdout)["error"] == f"{path}: {path_}: {why}"
    r = frt_process(cli + ["--phase", entries[0]["phase"]], timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert [d["route"] for d in json.loads(r.stdout)["decisions"]] == [entries[0]["route"]]


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
            nearest = None

        lock = Fake()
        lock.index = type("I", (), {"lazy": False, "cell_routes": lambda self, index=index: iter(index.items())})()
        lock.cache, lock.rejected = LockCache(), []
        for _ in range(10):
            key = CellKey(*(rnd.choice(v) for v in vals.values()))
            route = rnd.choice("RST")
            got_kind, got = resolver._nearest_miss(lock, route, key, None)
            want = _reference_miss(index, route, key)
            if want.startswith(("dc ", "arch ", "backend ")):
                kind, value = want.split(" ", 1)
                assert got_kind == {"dc": "device-not-covered", "arch": "arch-not-covered",
                                    "backend": "backend-not-covered"}[kind]
                assert got == "no receipt for this cell: receipt measured on " + {
                    "dc": f"{value}, device is {key.device_class}", "arch": f"arch {value}, device is {key.arch}",
                    "backend": f"backend {value}, device is {key.backend}"}[kind]
            else:
                phases, precisions = eval(want)  # the reference's own repr
                if phases and key.phase not in phases:
                    assert got_kind == "phase-not-covered"
                    assert got.endswith(f"receipts cover phase {', '.join(phases)}, not {key.phase}")
                elif precisions and key.precision not in precisions:
                    assert got_kind == "precision-not-covered"
                    assert got.endswith(f"receipts cover precision {', '.join(precisions)}, not {key.precision}")
                else:
                    assert (got_kind, got) == ("no-receipt", "no receipt for this cell")


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


# --- the `nearest` summary: what a refusal reason names, without reading the other cells


def test_the_nearest_summary_is_the_two_smallest_of_every_group():
    """``nearest_rows`` against the grouping recomputed here: every (route, phase, precision,
    backend) that a cell's candidates hold, with all of its (device class, arch) sorted."""
    rnd = random.Random(11)
    for _ in range(150):
        entries, seen = [], set()
        for _ in range(rnd.randint(1, 30)):
            key = CellKey(rnd.choice("ab"), rnd.choice("pq"), rnd.choice(["cpu", "cuda"]), rnd.choice("123"),
                          rnd.choice(["d1", "d2", "d3", "d4", "d5"]))
            if key in seen:
                continue
            seen.add(key)
            routes = rnd.sample("RSTU", rnd.randint(1, 3))
            entries.append(L.IndexEntry(key, tuple(L.Candidate(r, "certified_fast", "sha256:" + "0" * 64, None)
                                                   for r in routes + routes[:1])))
        groups: dict = {}
        for e in entries:
            for c in e.candidates:
                groups.setdefault((c.route, e.key.phase, e.key.precision, e.key.backend), set()).add(
                    (e.key.device_class, e.key.arch))
        want = [{"route": g[0], "phase": g[1], "precision": g[2], "backend": g[3],
                 "nearest": [list(v) for v in sorted(vs)[:2]]} for g, vs in sorted(groups.items())]
        assert L.nearest_rows(entries) == want
        assert json.loads(L.nearest_text(want)) == want


ARCHS = {"cpu": ["x86_64"], "cuda": ["9.0", "8.0"]}


def _varied_lock(doc: dict, rnd: random.Random, n: int) -> dict:
    """The demo lock with ``n`` cells spread over phases, backends, archs and device classes,
    each holding one or both routes (the demo's receipts)."""
    base = json.loads(doc["index"])
    by_route = {c["route"]: c for e in base for c in e["candidates"]}
    cells = {}
    for _ in range(n):
        backend = rnd.choice(["cpu", "cuda"])
        cell = {"phase": rnd.choice(["decode", "prefill"]), "precision": "fp32", "backend": backend,
                "arch": rnd.choice(ARCHS[backend]), "device-class": rnd.choice(["amd-epyc", "d1", "d2", "d3"])}
        routes = rnd.sample(sorted(by_route), rnd.randint(1, 2))
        cands = [dict(by_route[r]) for r in routes]
        cells[tuple(cell.values())] = {**cell, "route": cands[0]["route"], "state": cands[0]["state"],
                                        "receipt": cands[0]["receipt"], "candidates": cands}
    doc = {**doc, "index": L.index_text([cells[k] for k in sorted(cells)])}
    lock = Lockfile.from_document({**doc, "lock-digest": "x"}, file="x", verify=False)
    doc["nearest"] = L.nearest_text(L.nearest_rows(lock.index.values()))
    return doc


def test_decisions_read_by_head_with_the_summary_are_the_decisions_reading_every_cell(tmp_path):
    """On varied locks, every decision (routes and every refusal reason) from the lock as read
    (cells found by their heads, reasons from the summary) is the decision from the same lock
    with every entry built and the reasons grouped from every cell."""
    rnd = random.Random(5)
    hws = [Hardware(arch=a, device_class=d, backend=b, software={"torch": "2.13", "kernels": "0.17.2"})
           for b in ("cpu", "cuda") for a in ARCHS[b] + ["aarch64" if b == "cpu" else "7.5"]
           for d in ("amd-epyc", "d1", "d3", "d9")]
    for i in range(30):  # (small locks too: a machine with cells of one phase only, a lone backend)
        path = _write(tmp_path / f"v{i}.lock", _varied_lock(_doc(), rnd, rnd.choice([1, 2, 3, 5, 10, 40])))
        fast, whole = Lockfile.read(path), _whole(path)
        assert fast.nearest is not None and isinstance(fast.index, LI._FoundIndex)
        whole.nearest = None  # (the reasons grouped from every cell, as a lock without the summary)
        for hw in hws:
            for fallback in ("refuse", "host"):
                got = resolve_all(fast, hardware=hw, precision="fp32", fallback=fallback,
                                  accept=("certified_fast", "supported_correct"))
                assert got == resolve_all(whole, hardware=hw, precision="fp32", fallback=fallback,
                                          accept=("certified_fast", "supported_correct"))
        assert fast.index._all is None  # (no decision listed every cell)


def test_a_line_holding_another_cell_than_its_head_names_is_refused(tmp_path):
    """A line whose head names one cell and whose JSON holds another (a key written twice: JSON
    keeps the last) is refused when that cell is looked up, naming the line."""
    doc = _doc()
    text = doc["index"]
    line = text.split("\n")[1]
    other = line.replace(', "candidates": ', ', "phase": "elsewhere", "candidates": ', 1)
    path = _write(tmp_path / "x.lock", {**doc, "index": text.replace(line, other, 1)})
    lock = Lockfile.read(path)
    head = json.loads(line.rstrip(","))
    with pytest.raises(LockfileError) as ei:
        lock.index[CellKey(*(head[k] for k in ("phase", "precision", "backend", "arch", "device-class")))]
    assert str(ei.value) == f"{path}: index[0]: the line does not hold the cell its head names"


@pytest.mark.parametrize("edit, where, why", [
    (lambda rows: rows[0].pop("nearest"), "nearest[0].nearest", "missing"),
    (lambda rows: rows[0].update(nearest=[["a", "b"]] * 3), "nearest[0].nearest", "one or two [device class, arch] pairs"),
    (lambda rows: rows[0].update(nearest=[["a", 1]]), "nearest[0].nearest", "one or two [device class, arch] pairs"),
    (lambda rows: rows.append(dict(rows[0])), "nearest[4]", "recorded twice"),
    (lambda rows: rows[1].update(extra=1), "nearest[1]", "extra"),
    (lambda rows: rows.__setitem__(2, "x"), "nearest[2]", "expected an object"),
])
def test_a_malformed_nearest_summary_is_refused_naming_the_field(tmp_path, edit, where, why):
    doc = _doc()
    rows = json.loads(doc["nearest"])
    edit(rows)
    path = _write(tmp_path / "x.lock", {**doc, "nearest": L.nearest_text(rows)})
    with pytest.raises(LockfileError) as ei:
        Lockfile.read(path)
    assert ei.value.exit_code == 2 and str(ei.value).startswith(f"{path}: {where}") and why in str(ei.value)


def test_listing_every_cell_and_receipt_searches_for_none(tmp_path):
    """Listing (verify, the matrix, a mirror's selection) reads every line once: it does not
    search the receipts text once per cell to check each candidate's receipt (which made listing
    a 100,000-cell lock quadratic), nor search for a cell or a receipt it has listed."""
    from unittest import mock

    path = _write(tmp_path / "big.lock", _big_index(_doc(), 50))
    lock = Lockfile.read(path)
    with mock.patch.object(LI._FoundReceipts, "_find", side_effect=AssertionError("searched")), \
            mock.patch.object(LI._FoundIndex, "_find", side_effect=AssertionError("searched")):
        entries = dict(lock.index.items())
        assert len(entries) == 102 and all(k in lock.index for k in entries)
        receipts = dict(lock.receipts.items())
        assert all(c.receipt in receipts for e in entries.values() for c in e.candidates)
        assert all(lock.receipts[d] is r for d, r in receipts.items())
    assert entries == _whole(path).index and receipts == dict(_whole(path).receipts.items())


def test_reasons_without_the_summary_group_the_cells_from_their_heads(tmp_path):
    """A ``frt.lock/1`` lock (no ``nearest``) groups its refusal reasons from every line's head
    and candidates' routes, building no entry, and decides as with the summary."""
    doc = _varied_lock(_doc(), random.Random(8), 40)
    with_summary = Lockfile.read(_write(tmp_path / "new.lock", doc))
    old = {k: v for k, v in doc.items() if k != "nearest"}
    lock = Lockfile.read(_write(tmp_path / "old.lock", {**old, "schema": "frt.lock/1"}))
    assert lock.nearest is None and isinstance(lock.index, LI._FoundIndex)
    assert dict(lock.index.cell_routes()) == {tuple(k): {c.route for c in e.candidates}
                                              for k, e in _whole(tmp_path / "old.lock").index.items()}
    for dc in ("amd-epyc", "d1", "d9"):
        hw = Hardware(arch="x86_64", device_class=dc, backend="cpu", software={"torch": "2.13", "kernels": "0.17.2"})
        assert resolve_all(lock, hardware=hw, precision="fp32") == resolve_all(with_summary, hardware=hw, precision="fp32")
    assert lock.index._all is None
