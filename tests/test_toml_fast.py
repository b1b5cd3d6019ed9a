"""The lockfile-layout TOML reader (frt_dist._toml_fast) against tomllib.

Its contract: for every input it returns exactly what ``tomllib.loads`` returns
(same values, same key order) or ``None`` (the caller then uses tomllib). It must
also actually read what ``frt lock`` writes, or serving silently loses its speed.
"""

from __future__ import annotations

import json
import random
import tomllib

import pytest

from frt_dist import _toml_fast
from frt_dist.lockfile import Lockfile
from frt_dist.project import bundled_root

BUNDLED = bundled_root() / "lockfiles" / "demo-decoder.lock"


def _agrees(data: bytes) -> bool:
    """The contract on one input; True when the fast reader took it."""
    got = _toml_fast.loads(data)
    try:
        want = tomllib.loads(data.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError):
        assert got is None, f"fast reader accepted what tomllib refuses: {data[:200]!r}"
        return False
    if got is None:
        return False
    assert got == want
    # same key order everywhere (from_document keeps document order for packages and routes)
    assert json.dumps(got) == json.dumps(want)
    return True


def _rich_lock() -> bytes:
    """The bundled lock plus rejected receipts whose text needs TOML escapes."""
    lf = Lockfile.read(BUNDLED)
    lf.rejected = [
        {"digest": "sha256:" + "1" * 64, "file": 'receipts/odd "name".json',
         "reason": "line one\nline two \\ back\tslash 'quoted' \u00e9\u4e2d \x7f \x01 \U0001f600"},
        {"digest": "sha256:" + "2" * 64, "file": "receipts/demo-decoder/plain.json", "reason": "fallbacks is 3",
         "route": "fused", "phase": "decode", "device-class": "amd-epyc"},
    ]
    return lf.render()


def test_reads_what_frt_lock_writes():
    for data in (BUNDLED.read_bytes(), _rich_lock()):
        assert _agrees(data), "the fast reader fell back on a lockfile frt wrote"
    lf = Lockfile.read(BUNDLED)
    assert lf.packages and lf.index and len(lf.receipts) == 4


def test_a_rendered_lock_with_rejected_receipts_reads_back():
    data = _rich_lock()
    parsed = _toml_fast.loads(data)
    assert parsed is not None and len(parsed["rejected-receipts"]) == 2
    odd = next(r for r in parsed["rejected-receipts"] if r["digest"] == "sha256:" + "1" * 64)
    assert odd["file"] == 'receipts/odd "name".json'
    assert odd["reason"].startswith("line one\nline two \\ back\tslash 'quoted' \u00e9")
    lf = Lockfile.from_document(parsed, file="rich.lock")  # lock-digest verifies over what was read
    assert sorted(r["file"] for r in lf.rejected) == ["receipts/demo-decoder/plain.json", 'receipts/odd "name".json']


EDGES = [
    # each: either read exactly as tomllib reads it, or left to tomllib
    'a = 1\na = 2\n',                               # duplicate key
    '[t]\nx = 1\n[t]\ny = 2\n',                      # table opened twice
    '[t.u]\nx = 1\n[t]\ny = 2\n',                    # super-table defined after (valid TOML)
    '[t]\nu = 1\n[t.u]\nx = 1\n',                    # table over a value
    'x = []\n[[x]]\ny = 1\n',                        # array of tables over a static array
    '[[x]]\ny = 1\n[[x]]\ny = 2\n',                  # two elements
    '[[x]]\ny = 1\n[x.z]\nw = 1\n',                  # sub-table of the last element (valid TOML)
    '[[x]]\ny = 1\n[x]\n',                           # table over an array of tables
    "s = '''\nabc'''\n",
    "s = '''\nab'c''''\n",                           # a quote before the closing delimiter
    "s = '''\nabc'''\nt = 1\n",
    "s = '''\nabc'''x\n",
    "s = '''abc'''\n",
    "s = '''\nabc\n",                                # unterminated
    "s = '''\na\r\nb'''\n",
    'a = 1\r\nb = 2\r\n',                            # CRLF
    'a = "x\ty"\n',                                  # raw tab in a basic string (valid TOML)
    "a = 'x\ty'\n",                                  # raw tab in a literal string (valid TOML)
    'a = "\\u00e9\\"\\\\\\n"\n',
    'a = "\\U0001F600"\n',
    'a = "\\ud800"\n',                               # a surrogate: not a scalar value
    'a = "\\e"\n',
    'a = "\\/"\n',                                   # JSON knows \\/, TOML does not
    'a = "x" # comment\n',
    '# only a comment\n\na = 1\n',
    '#\x01\na = 1\n',
    'a.b = 1\n',
    '"a.b" = 1\n',
    "'a.b' = 1\n",
    "'' = 1\n",
    '[a . b]\n',
    '[a."b.c".\'d\']\nx = 1\n',
    'a = 1.5\n',
    'a = -0\n',
    'a = +1\n',
    'a = 0x10\n',
    'a = 1_000\n',
    'a = 007\n',
    'a = -12\n',
    'a = true\nb = false\n',
    'a = True\n',
    'a = {x = 1}\n',
    'a = [\n    1,\n    "two",\n]\n',
    'a = [\n    1\n]\n',
    'a = [\n    1,\n',
    'a = [1, 2]\n',
    'a=1\n',
    ' a = 1\n',
    'a = 1 \n',
    '\ufeffa = 1\n',
    'a = "\x7f"\n',
    '[[a.b]]\nx = 1\n',
]


@pytest.mark.parametrize("text", EDGES)
def test_edge_cases_agree_with_tomllib(text):
    _agrees(text.encode("utf-8"))


@pytest.mark.parametrize("text", [
    '[a."b.c".d]\nx = 1\n[a."b.c".e]\ny = "\\"q\\" \\u00e9"\n',
    '[a.""]\nx = true\n[[r]]\nx = 1\n[[r]]\nx = 2\n',
    'k = [\n    "a",\n    -3,\n]\n# note\n\nm = \'\'\'\n{"j": 1}\n\'\'\'\n',
])
def test_the_forms_frt_writes_are_read_not_left_to_tomllib(text):
    assert _agrees(text.encode("utf-8"))


def test_invalid_utf8_is_left_to_tomllib():
    assert _toml_fast.loads(b'a = "\xff"\n') is None


_PALETTE = ["\"", "'", "\\", "[", "]", "=", " ", ".", "#", "\n", "\r", "\t", "x", "0", "-", "'''", "\"\"\"",
            "\\u", "{", ",", "\x00", "\u00e9"]


def _mutate(rng: random.Random, text: str) -> str:
    lines = text.split("\n")
    op = rng.randrange(6)
    if op == 0:  # insert a TOML-significant character
        i = rng.randrange(len(text) + 1)
        return text[:i] + rng.choice(_PALETTE) + text[i:]
    if op == 1:  # delete a character
        i = rng.randrange(len(text))
        return text[:i] + text[i + 1:]
    if op == 2:  # duplicate a line
        i = rng.randrange(len(lines))
        return "\n".join(lines[:i + 1] + [lines[i]] + lines[i + 1:])
    if op == 3:  # move a line
        i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
        line = lines.pop(i)
        lines.insert(j, line)
        return "\n".join(lines)
    if op == 4:  # delete a line
        i = rng.randrange(len(lines))
        return "\n".join(lines[:i] + lines[i + 1:])
    i = rng.randrange(len(text))  # replace a character
    return text[:i] + rng.choice(_PALETTE) + text[i + 1:]


def test_damaged_lockfiles_agree_with_tomllib():
    """Seeded random damage to a real lockfile: the fast reader never disagrees with tomllib."""
    rng = random.Random(20261129)
    base = _rich_lock().decode("utf-8")
    tables = base.index("\n[packages.")
    taken = left = 0
    for n in range(2500):
        text = _mutate(rng, base)
        if n % 2:  # half of the damage lands in the TOML tables, where the layout rules live
            text = base[:tables] + _mutate(rng, base[tables:])
        if rng.random() < 0.3:
            text = _mutate(rng, text)
        if _agrees(text.encode("utf-8")):
            taken += 1
        else:
            left += 1
    assert taken > 100 and left > 100  # both branches exercised
