"""The lock-digest of a large lock computed from the file's bytes is the
canonical digest of the document the TOML reader reads.

``_read_fast`` no longer decodes the whole file into one string and re-encodes the cut-out
index and receipts texts to escape them: it decodes each piece where it lies and escapes the
cut texts' UTF-8 bytes by byte replacements (``_escape_bytes``). Each step is held here to
the slow definition it stands for, on non-ASCII text, on slices that split a character, and
on bytes that are not UTF-8 at all.
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
from frt_dist.documents.lockfile import Lockfile
from frt_dist.documents.schema import parse_toml
from frt_dist.errors import LockfileError
from frt_dist.project.discover import bundled_root

DEMO = bundled_root() / "lockfiles" / "demo-decoder.lock"
# what a cut text may hold (no control character but the line feed) and what JSON escapes
PLAIN = ['"', "\\", "\n", "a", " ", "{", "}", ",", ":", "'", "é", "\u2028", "\u00a0", "𝄞", "z", "\u0085", "中"]


def _text(rnd: random.Random, n: int, alphabet=PLAIN) -> str:
    return "".join(rnd.choice(alphabet) for _ in range(n))


def test_escaping_the_bytes_is_json_dumps_of_the_text():
    rnd = random.Random(1)
    for _ in range(300):
        t = _text(rnd, rnd.randint(0, 200))
        want = json.dumps(t, ensure_ascii=False)[1:-1].encode("utf-8")
        b = t.encode("utf-8")
        assert LF._escape_bytes(b) == want
        cut = rnd.randint(0, len(b))  # any byte offset, inside a multi-byte character too
        assert LF._escape_bytes(b[:cut]) + LF._escape_bytes(b[cut:]) == want


@pytest.mark.parametrize("chunk", [1, 3, 1 << 16])
def test_the_digest_from_the_bytes_is_the_canonical_digest(monkeypatch, chunk):
    """``_raw`` (the cut texts' bytes) gives the canonical digest of the body holding their
    text, and ``None`` for a text with a control character other than the line feed."""
    monkeypatch.setattr(LF, "_CHUNK", chunk)
    rnd = random.Random(chunk)
    for _ in range(80):
        alphabet = PLAIN + (["\t", "\x01", "\r", "\x7f", "\x1f"] if rnd.random() < 0.3 else [])
        body = {"schema": "frt.lock/1", "index": _text(rnd, rnd.randint(0, 120), alphabet),
                "receipts": _text(rnd, rnd.randint(0, 120), alphabet), "model": "é"}
        raw = {k: memoryview(body[k].encode("utf-8")) for k in ("index", "receipts")}
        plain = not any(c in body["index"] + body["receipts"] for c in "\t\x01\r\x7f\x1f")
        got = LF.lock_digest_of(body, literal={"index", "receipts"}, _raw=raw)
        assert got == (digest(body) if plain else None)


def _demo_doc() -> dict:
    doc = parse_toml(DEMO.read_bytes(), LockfileError, "demo")
    doc.pop("lock-digest")
    return doc


def test_a_lock_with_non_ascii_cut_texts_reads_as_the_toml_reader_reads_it(tmp_path):
    doc = _demo_doc()
    doc["receipts"] += 'é "𝄞" \\ \u2028 中\n'  # (not frt's receipt layout: the text is still cut and hashed)
    doc["index"] += "ü\n"
    raw = L.render(doc, digest(doc))
    assert b"\nreceipts = '''\n" in raw and b"\nindex = '''\n" in raw  # both still literal strings: both cut
    fast = LF._read_fast(raw)
    full = parse_toml(raw, LockfileError, "x")
    assert fast is not None and fast[0] == full and list(fast[0]) == list(full)
    assert fast[1] == full["lock-digest"] == digest(doc)


def test_bytes_that_are_not_utf8_inside_a_cut_text_go_to_the_full_reader(tmp_path):
    """A byte sequence UTF-8 refuses, anywhere (inside the index, the receipts, the rest): the
    fast read steps aside and the full reader refuses the file naming it."""
    raw = DEMO.read_bytes()
    for anchor in (b"\nindex = '''\n[\n", b"\nreceipts = '''\n[\n", b'\nmodel = "'):
        at = raw.index(anchor) + len(anchor)
        for bad in (b"\xc3", b"\xff", b"\xe4\xb8", b"\xed\xa0\x80"):  # a cut character, never UTF-8, a surrogate
            s = raw[:at] + bad + raw[at:]
            assert LF._read_fast(s) is None, (anchor, bad)
            with pytest.raises(LockfileError):
                parse_toml(s, LockfileError, "x")
            path = tmp_path / "bad.lock"
            path.write_bytes(s)
            with pytest.raises(LockfileError) as ei:
                Lockfile.read(path)
            assert str(path) in str(ei.value)


def test_damage_with_multibyte_characters_never_makes_the_fast_read_differ():
    """Non-ASCII and partial characters put near the cut texts' delimiters and inside them:
    the fast read either steps aside or returns the TOML reader's document and digest."""
    base = DEMO.read_bytes()
    hot = [i for i in range(len(base)) if base[i:i + 3] == b"'''" or base[i:i + 1] == b"\n"]
    pieces = ["é".encode(), "𝄞".encode(), "𝄞".encode()[:2], b"\x80", "\u2028".encode(), b'"', b"\\", b"'''", b"\n"]
    rnd = random.Random(23)
    taken = 0
    for _ in range(300):
        s = bytearray(base)
        for _ in range(rnd.randint(1, 3)):
            j = min(len(s), max(0, rnd.choice(hot) + rnd.randint(-3, 40)))
            s[j:j] = rnd.choice(pieces)
        s = bytes(s)
        fast = LF._read_fast(s)
        if fast is None:
            continue
        taken += 1
        full = parse_toml(s, LockfileError, "x")
        assert fast[0] == full and list(fast[0]) == list(full)
        assert fast[1] == digest({k: v for k, v in full.items() if k != "lock-digest"})
    assert taken > 50


# --- the receipts, read by offset: each refusal names its place


def _with_receipt_lines(tmp_path, edit) -> Path:
    doc = _demo_doc()
    lines = doc["receipts"].split("\n")
    body = [ln.rstrip(",") for ln in lines[1:-2]]
    doc["receipts"] = "[\n" + ",\n".join(edit(body)) + "\n]\n"
    path = tmp_path / "edited.lock"
    path.write_bytes(L.render(doc, digest(doc)))
    return path


def test_a_receipt_embedded_twice_is_refused_naming_the_second_line(tmp_path):
    path = _with_receipt_lines(tmp_path, lambda b: b[:2] + [b[0]] + b[2:])
    assert LI._receipt_spans(parse_toml(path.read_bytes(), LockfileError, "x")["receipts"]) is not None
    dig = json.loads(_demo_doc()["receipts"].split("\n")[1].rstrip(","))["digest"]
    want = f"{path}: receipts[2].digest: {dig} is embedded twice"
    for use in (lambda lk: lk.receipts[dig], lambda lk: dig in lk.receipts, lambda lk: list(lk.receipts)):
        lock = Lockfile.read(path)  # read: looked up, or listed, it is refused
        with pytest.raises(LockfileError) as ei:
            use(lock)
        assert str(ei.value) == want


def test_a_damaged_receipt_line_is_named_by_its_place_when_it_is_used(tmp_path):
    """The path of a receipt (``receipts[i]``) is written only when the receipt is parsed: the
    error names the same line as reading the file whole does."""
    from frt_dist.errors import LockfileError as E

    def damage(b):
        head, _, _ = b[1].partition('"receipt": ')
        return b[:1] + [head + '"receipt": {"oops"}'] + b[2:]

    path = _with_receipt_lines(tmp_path, damage)
    lock = Lockfile.read(path)
    dig = list(lock.receipts)[1]
    with pytest.raises(E) as ei:
        lock.receipts[dig]
    assert f"{path}: receipts[1]: not valid JSON" in str(ei.value)
    assert [ln for ln in lock.receipts if ln != dig]  # the others still read
    assert all(lock.receipts[d].digest == d for d in lock.receipts if d != dig)
