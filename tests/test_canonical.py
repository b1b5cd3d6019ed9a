"""The canonical-JSON rule that receipt and lock digests are taken over, checked against bytes written by hand.

Receipts are written on other machines by other tools, so frt's digests must be exactly
``"sha256:" + sha256(json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
.encode("utf-8")).hexdigest()``: keys sorted by code point at every depth, no whitespace, non-ASCII
text as its raw UTF-8 bytes (never ``\\uXXXX``), JSON's own escapes for quotes, backslashes and
control characters. Each expected byte string below is spelled out, not computed with ``json``.
"""

from __future__ import annotations

import hashlib
import json

import pytest

from frt_dist.base.canonical import canonical_json, digest
from helpers.paths import BUNDLED

CASES = [
    ("umlaut", {"name": "ü"}, b'{"name":"\xc3\xbc"}'),
    ("japanese", "日本", b'"\xe6\x97\xa5\xe6\x9c\xac"'),
    ("emoji-outside-the-bmp", ["🙂"], b'["\xf0\x9f\x99\x82"]'),
    ("nested-unsorted-keys", {"z": {"y": 1, "x": {"b": "日本", "a": "🙂"}}, "a": [True, False, None]},
     b'{"a":[true,false,null],"z":{"x":{"a":"\xf0\x9f\x99\x82","b":"\xe6\x97\xa5\xe6\x9c\xac"},"y":1}}'),
    ("keys-by-code-point", {"é": 1, "z": 2, "A": 3, "a": 4},
     b'{"A":3,"a":4,"z":2,"\xc3\xa9":1}'),
    ("escapes", {"q": 'a"b\\c\n\t\x01'}, b'{"q":"a\\"b\\\\c\\n\\t\\u0001"}'),
    ("numbers", {"f": 0.0001, "g": 1.0, "i": -3, "e": 1e-07}, b'{"e":1e-07,"f":0.0001,"g":1.0,"i":-3}'),
    ("empty-containers", {"b": {}, "a": []}, b'{"a":[],"b":{}}'),
]


@pytest.mark.parametrize("value, expected", [(v, b) for _, v, b in CASES], ids=[c[0] for c in CASES])
def test_canonical_bytes_and_digest_by_hand(value, expected):
    assert canonical_json(value) == expected
    assert digest(value) == "sha256:" + hashlib.sha256(expected).hexdigest()


def test_a_receipt_digest_is_reproducible_without_frt():
    """The bundled lock's receipt digests, recomputed from the receipt files with hashlib and json alone."""
    from frt_dist.documents.lockfile import Lockfile

    lock = Lockfile.read(BUNDLED / "lockfiles" / "demo-decoder.lock")
    for path in sorted((BUNDLED / "receipts" / "demo-decoder").glob("*.json")):
        data = json.loads(path.read_text("utf-8"))
        text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        assert "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest() in lock.receipts


def test_one_short_digest_notation_in_reports():
    from frt_dist.base.canonical import short_digest

    assert short_digest("sha256:" + "ab" * 32) == "sha256:" + "ab" * 6
    assert short_digest("0123456789abcdef0123456789abcdef01234567") == "0123456789ab"  # a commit
    assert short_digest("y+2JmXlxnNtA8RnxRX7dh3F1azeGPAKpmmvEkmgObWg=") == "y+2JmXlxnNtA8RnxRX7dh3F1azeGPAKpmmvEkmgObWg="
    assert short_digest(None) == "None"
