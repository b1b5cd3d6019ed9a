#!/usr/bin/env python3
"""Where `frt resolve` spends its time on a large lock, phase by phase, against `rtoml.loads`
of the same file in the same process and round (issue 20 item 2).

Per round (fresh objects each time, the file in the page cache): ``rtoml.loads`` of the whole
text; then what ``Lockfile.read`` + ``resolve_all`` do, each phase timed apart:

- ``read``: the file's bytes (``read_bytes``);
- ``cut+decode``: finding the index and receipts literals, decoding the rest and checking the
  texts are UTF-8 (one ``isascii`` pass; since the third pass the texts themselves are not decoded),
  ``rtoml`` on the rest (``_read_fast`` minus its digest);
- ``digest``: the lock-digest (canonical JSON of the document, hashed from the bytes);
- ``from_document``: the checks (before the third pass also the receipt offsets and the index
  scan; now the index's layout counts, cells and receipts are found on use);
- ``resolve``: every phase band's decision with its nearest-miss reasons (now: the cells' and
  receipts' searches, the reasons from the ``nearest`` summary);
- ``sha256(file)``: one sha256 pass over the file's bytes, what a digest over the file's bytes
  would cost instead (a lockfile format change, not made).

Then (``--parts``) the lock-digest's own parts over the cut texts' bytes, 64K slices as
``lock_digest_of`` takes them, each timed alone: the control-character check (``translate``),
each of the three byte replacements, sha256 of the escaped bytes; and the escapings evaluated
instead: ``json.encoder.encode_basestring`` on the text plus its UTF-8 encode (what the digest
did before), and ``codecs.escape_encode`` with quotes swapped around it (ASCII only).

Reported: the median of each, and of each divided by ``rtoml.loads`` within its round.

    .venv/bin/python bench/bench_large_phases.py [--cells 100000] [--rounds 5] [--keep DIR]
"""

from __future__ import annotations

import sys

sys.dont_write_bytecode = True

import argparse
import hashlib
import statistics
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_large_lock import ensure_lock
from bench_resolve import MODEL, cli_hardware

PARTS = ("  check (translate)", "  replace backslash", "  replace quote", "  replace newline", "  sha256 of escaped",
         "  alt: encode_basestring+encode", "  alt: escape_encode swap")


def _parts(raw: bytes) -> dict:
    """The digest's parts over the index and receipts texts' bytes, in 64K slices."""
    import codecs
    from json.encoder import encode_basestring

    from frt_dist.documents import lock_fast as LF

    view, chunk = memoryview(raw), 1 << 16
    spans = []
    for key in LF._LITERAL_KEYS:
        opener = b"\n" + key.encode() + b" = '''\n"
        start = raw.index(opener) + len(opener)
        spans.append((start, raw.index(b"'''", start)))
    slices = [bytes(view[i:min(i + chunk, e)]) for s, e in spans for i in range(s, e, chunk)]
    texts = [b.decode("utf-8", "surrogateescape") for b in slices]  # (a slice may split a character)
    swap = bytes.maketrans(b'"\'', b'\'"')
    out = {}

    def timed(name, fn):
        t = time.perf_counter()
        for _ in fn():
            pass
        out[name] = time.perf_counter() - t

    timed(PARTS[0], lambda: (b.translate(None, LF._NOT_IN_LITERAL) for b in slices))
    timed(PARTS[1], lambda: (b.replace(b"\\", b"\\\\") for b in slices))
    timed(PARTS[2], lambda: (b.replace(b'"', b'\\"') for b in slices))
    timed(PARTS[3], lambda: (b.replace(b"\n", b"\\n") for b in slices))
    escaped = [LF._escape_bytes(b) for b in slices]
    h = hashlib.sha256()
    timed(PARTS[4], lambda: (h.update(b) for b in escaped))
    timed(PARTS[5], lambda: (encode_basestring(t).encode("utf-8", "surrogateescape") for t in texts))
    timed(PARTS[6], lambda: (codecs.escape_encode(b.translate(swap))[0].translate(swap) for b in slices))
    return out


def main() -> int:
    import rtoml

    from frt_dist.documents import lock_fast as LF
    from frt_dist.documents import lockfile as L
    from frt_dist.documents.schema import read_bytes
    from frt_dist.errors import LockfileError
    from frt_dist.routes.resolver import resolve_all

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cells", type=int, default=100000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--keep", metavar="DIR", help="keep (and reuse) the synthetic project here")
    ap.add_argument("--parts", action="store_true", help="also time the lock-digest's parts and the escapings evaluated")
    args = ap.parse_args()
    work = Path(args.keep or tempfile.mkdtemp(prefix="frt-bench-phases-"))
    path = ensure_lock(args.cells, work) / "lockfiles" / f"{MODEL}.lock"
    hw = cli_hardware(args.cells)
    real_digest = LF.lock_digest_of
    res: dict[str, list] = {}
    for _ in range(args.rounds):
        got = {}
        text = path.read_text("utf-8")  # (the read is not part of the parse timed)
        t1 = time.perf_counter()
        rtoml.loads(text)
        got["rtoml.loads"] = time.perf_counter() - t1
        del text
        t0 = time.perf_counter()
        raw = read_bytes(path, LockfileError, str(path))
        got["read"] = time.perf_counter() - t0
        spent = []

        def timed(*a, spent=spent, **kw):
            t = time.perf_counter()
            try:
                return real_digest(*a, **kw)
            finally:
                spent.append(time.perf_counter() - t)

        LF.lock_digest_of = timed
        try:
            t0 = time.perf_counter()
            doc, texts, computed = LF.read_fast(raw)
            fast = time.perf_counter() - t0
        finally:
            LF.lock_digest_of = real_digest
        got["digest"] = sum(spent)
        got["cut+decode"] = fast - got["digest"]
        t0 = time.perf_counter()
        lock = L.Lockfile._from_parts(doc, texts, file=str(path), verify=True, index_refs=True, computed=computed)
        got["from_document"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        resolve_all(lock, hardware=hw, precision=None)
        got["resolve"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        hashlib.sha256(raw).hexdigest()
        got["sha256(file)"] = time.perf_counter() - t0
        got["total (read..resolve)"] = sum(got[k] for k in ("read", "cut+decode", "digest", "from_document", "resolve"))
        if args.parts:
            got.update(_parts(raw))
        for k, v in got.items():
            res.setdefault(k, []).append(v)
            res.setdefault(k + "/", []).append(v / got["rtoml.loads"])
    print(f"bench_large_phases: {args.cells} cells, {path.stat().st_size / 1e6:.1f} MB, {args.rounds} rounds; "
          f"python {sys.version.split()[0]}")
    print(f"{'phase':>24} {'median':>9} {'/ rtoml.loads':>14}")
    for k in ("rtoml.loads", "read", "cut+decode", "digest", "from_document", "resolve", "total (read..resolve)",
              "sha256(file)", *(PARTS if args.parts else ())):
        print(f"{k:>24} {statistics.median(res[k]):>8.3f}s {statistics.median(res[k + '/']):>13.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
