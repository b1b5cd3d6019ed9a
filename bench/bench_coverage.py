#!/usr/bin/env python3
"""Benchmark: what the coverage comparison adds to a re-lock (`frt lock` compares the new route
index with the lock it replaces before it writes).

Per size, ``bench_resolve.build_lock``'s lock (4 phases x N/4 device classes, 4 routes, one
certified receipt per cell) is written to a file; the "new" lock is the same in memory with one
receipt gone (one cell lost). Timed, alternating within each round:

- ``render``: ``new.render()``, the bytes `frt lock` makes on every run anyway (the baseline);
- ``diff``: ``Lockfile.read(old file)`` (as `lock_model` reads the lock it replaces: lazily) then
  ``coverage_diff(old, new)``, every cell of both indexes compared.

Reported: medians and the median within-round ratio diff / render.

    .venv/bin/python bench/bench_coverage.py [--sizes 1000 10000 100000] [--rounds 5]
"""

from __future__ import annotations

import sys

sys.dont_write_bytecode = True

import argparse
import statistics
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_resolve import build_lock

from frt_dist.base.record import replace
from frt_dist.documents.lockfile import Lockfile
from frt_dist.lock.build import derive_index
from frt_dist.lock.coverage import coverage_diff


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    print(f"{'cells':>7} {'render ms':>10} {'diff ms':>9} {'diff/render':>12}  changes")
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.sizes:
            old = build_lock(n)
            path = Path(tmp) / f"bench-{n}.lock"
            path.write_bytes(old.render())
            receipts = dict(old.receipts)
            receipts.pop(sorted(receipts)[0])
            new = replace(old, receipts=receipts, index=derive_index(receipts.values()))
            times = {"render": [], "diff": []}
            ratios, changes = [], None
            for i in range(args.rounds):
                order = ("render", "diff") if i % 2 == 0 else ("diff", "render")
                t = {}
                for what in order:
                    t0 = time.perf_counter()
                    if what == "render":
                        new.render()
                    else:
                        d = coverage_diff(Lockfile.read(path), new)
                        changes = d.summary()
                    t[what] = time.perf_counter() - t0
                    times[what].append(t[what])
                ratios.append(t["diff"] / t["render"])
            print(f"{n:>7} {statistics.median(times['render']) * 1e3:>10.1f} {statistics.median(times['diff']) * 1e3:>9.1f} "
                  f"{statistics.median(ratios):>11.2f}x  {changes}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
