#!/usr/bin/env python3
"""Micro-benchmark: the demo decoder block on its host binding vs two kernel routes.

Routes (packages imported straight from their Hub-layout sources under
the repository's ``packages/`` with ``kernels.get_local_kernel``):

* ``fused``: norm -> frt-demo/rmsnorm ``rms_norm``, ffn -> frt-demo/fused-ffn ``gated_mlp``
* ``split``: norm -> frt-demo/rmsnorm ``rms_norm``, ffn -> frt-demo/silu-mul ``gated_mlp``

For each row count the host block and every route are timed in paired,
alternating rounds (the order flips every round: H A B / B A H ...), after a
warm-up; per-round speedup is host time / route time from the same round.
The table reports medians over the rounds, the min/max of the per-round
speedup, and the max abs error of the route's block output against the host's.

    .venv/bin/python bench/bench_demo_kernels.py [--rows 1 16 64 512 2048] [--rounds 20] [--threads 2]
"""

from __future__ import annotations

import sys

sys.dont_write_bytecode = True  # keep __pycache__ out of the package sources (digests)

import argparse
import os
import platform
import statistics
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch

from frt_dist.demo.decoder import DecoderBlock

PACKAGES = ROOT / "packages"


def load_packages() -> dict:
    import kernels

    return {d: kernels.get_local_kernel(PACKAGES / d) for d in ("rmsnorm", "silu-mul", "fused-ffn")}


def make_routes(pk: dict) -> dict:
    return {
        "fused": {"norm": pk["rmsnorm"].rms_norm, "ffn": pk["fused-ffn"].gated_mlp},
        "split": {"norm": pk["rmsnorm"].rms_norm, "ffn": pk["silu-mul"].gated_mlp},
    }


def bound_block(seed: int, binding: dict | None) -> DecoderBlock:
    blk = DecoderBlock(seed=seed)
    for seam, fn in (binding or {}).items():
        blk.bind(seam, fn)
    return blk


def _timed(fn, x) -> float:
    t0 = time.perf_counter()
    fn(x)
    return time.perf_counter() - t0


def bench_rows(rows: int, blocks: dict, rounds: int, warmup: int) -> dict:
    host = blocks["host"]
    x = host.make_inputs(rows, seed=1)
    names = list(blocks)
    with torch.inference_mode():
        ref = host(x)
        errs = {n: (blocks[n](x) - ref).abs().max().item() for n in names if n != "host"}
        for _ in range(warmup):
            for n in names:
                blocks[n](x)
        times = {n: [] for n in names}
        for r in range(rounds):
            order = names if r % 2 == 0 else names[::-1]
            for n in order:
                times[n].append(_timed(blocks[n], x))
    out = {"host_ms": statistics.median(times["host"]) * 1e3, "routes": {}}
    for n in names:
        if n == "host":
            continue
        speedups = [h / t for h, t in zip(times["host"], times[n], strict=True)]
        out["routes"][n] = {
            "ms": statistics.median(times[n]) * 1e3,
            "speedup": statistics.median(speedups),
            "min": min(speedups),
            "max": max(speedups),
            "err": errs[n],
        }
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="demo kernel micro-benchmark")
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 16, 64, 512, 2048])
    ap.add_argument("--rounds", type=int, default=20, help="minimum paired rounds per row count")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    torch.set_num_threads(args.threads)
    pk = load_packages()
    routes = make_routes(pk)
    blocks = {"host": bound_block(args.seed, None)}
    blocks.update({name: bound_block(args.seed, b) for name, b in routes.items()})

    print(
        f"torch {torch.__version__} | threads {torch.get_num_threads()} | {platform.machine()} "
        f"| fp32 | hidden {blocks['host'].hidden} intermediate {blocks['host'].intermediate}"
    )
    print("routes: fused = rmsnorm.rms_norm + fused-ffn.gated_mlp; split = rmsnorm.rms_norm + silu-mul.gated_mlp")
    header = f"{'rows':>5} {'rounds':>6} {'host ms':>9} | {'route':<5} {'ms':>9} {'speedup':>8} {'min':>6} {'max':>6} {'max|err|':>9}"
    print(header)
    print("-" * len(header))
    for rows in args.rows:
        # small shapes are cheap: take more rounds there for stabler medians
        rounds = max(args.rounds, min(200, args.rounds * 2048 // (rows * 16) if rows < 128 else args.rounds))
        res = bench_rows(rows, blocks, rounds=rounds, warmup=3)
        for i, (name, r) in enumerate(res["routes"].items()):
            lead = f"{rows:>5} {rounds:>6} {res['host_ms']:>9.3f}" if i == 0 else " " * 22
            print(
                f"{lead} | {name:<5} {r['ms']:>9.3f} {r['speedup']:>7.2f}x {r['min']:>6.2f} {r['max']:>6.2f} {r['err']:>9.1e}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
