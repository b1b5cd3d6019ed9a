#!/usr/bin/env python3
"""Benchmark: the guard against the Python floor of its own checks (issue 20 item 3).

Three callables on the same no-op kernel and the same tensors (a CPU contract with
``inputs`` tensors: ``x [rows, 8]``, ``w [8]``, then ``[rows, 8]`` ones):

- **direct**: the kernel function itself;
- **floor**: a plain function evaluating exactly the pass condition the guard evaluates (the
  same tensor attribute reads and comparisons, generated from the same contract by
  ``serve.guard._fast_checks``) and then calling the kernel: what any Python check of these facts
  costs;
- **guard**: ``plan.entry(seam, phase)``, what a model calls: the same condition plus what the
  guard adds (the compile check, the count, the detach check, the argument shape).

Rounds alternate the three; medians over rounds and the median of the per-round ratio
guard / floor are reported (the shared machine's load moves all three alike within a round).

    .venv/bin/python bench/bench_guard.py [--inputs 2 3] [--rounds 15] [--n 100000]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.dont_write_bytecode = True


def setup(tmp: Path, inputs: int):
    import torch

    import frt_dist
    from frt_dist.serve import guard as serve_guard
    from helpers.factories import CPU, TinyProject, impl_doc, manifest_doc

    params = ", ".join(["x", "w", *(f"r{i}" for i in range(2, inputs))][:inputs])
    noop = f'"""no-op kernel"""\n\n\ndef noop({params}):\n    return x\n'
    specs = [{"shape": ["rows", 8], "dtype": "float32"}, {"shape": [8], "dtype": "float32"}]
    specs = (specs + [{"shape": ["rows", 8], "dtype": "float32"}] * inputs)[:inputs]
    pkg = f"noop{inputs}"
    doc = manifest_doc(model="noop", packages={f"t-org/{pkg}": {"path": f"packages/{pkg}"}},
                       seams={"s": {"structure": "noop@1", "impls": {"noop": impl_doc(f"t-org/{pkg}", "noop", inputs=specs)}}},
                       routes={"r": {"assembly": "eager", "seams": {"s": "noop"}, "gate": {"min-speedup": 1.02}}})
    tp = TinyProject(tmp / f"p{inputs}", manifest=doc, packages={pkg: {"name": pkg, "source": noop}})
    lock = tp.lock(receipts=[("r", "decode"), ("r", "prefill")])
    plan = frt_dist.load("noop", lockfile=lock, hardware=CPU)
    guard = plan.entry("s", "decode")
    fn = plan.fns[("s", "decode")]
    con = plan.contract("s", "decode")
    names, checks, consts = serve_guard._fast_checks(con)
    ns = {"Tensor": torch.Tensor, "Parameter": torch.nn.Parameter, "fn": fn,
          "dtype0": con.dtypes[0] if con.dtypes else None, "dtypes": con.dtypes, "device": con.device,
          "lo": con.lo, "hi": con.hi, **consts}
    exec(f"def floor({', '.join(names)}):\n    if {checks}:\n        return fn({', '.join(names)})\n", ns)
    args = ([torch.zeros(4, 8), torch.zeros(8)] + [torch.zeros(4, 8)] * inputs)[:inputs]
    return plan, fn, ns["floor"], guard, args


def timer(k: int):
    names = [f"a{i}" for i in range(k)]
    ns: dict = {"time": time}  # the loop calls with plain positional arguments, as a model does
    exec(f"def loop(f, n, {', '.join(names)}):\n    t0 = time.perf_counter_ns()\n    for _ in range(n):\n"
         f"        f({', '.join(names)})\n    return (time.perf_counter_ns() - t0) / n\n", ns)
    return ns["loop"]


def measure(inputs: int, rounds: int, n: int, tmp: Path) -> dict:
    plan, direct, floor, guard, args = setup(tmp, inputs)
    loop = timer(inputs)
    for f in (direct, floor, guard):
        loop(f, 2000, *args)
    t: dict[str, list] = {"direct": [], "floor": [], "guard": []}
    ratio = []
    for i in range(rounds):
        order = [("direct", direct), ("floor", floor), ("guard", guard)]
        for name, f in (order if i % 2 == 0 else order[::-1]):
            t[name].append(loop(f, n, *args))
        ratio.append(t["guard"][-1] / t["floor"][-1])
    calls = plan.ledger()["seams"]["s"]["calls"]
    med = {k: statistics.median(v) for k, v in t.items()}
    return {"inputs": inputs, **{f"{k}-ns": round(v, 1) for k, v in med.items()},
            **{f"min-{k}-ns": round(min(v), 1) for k, v in t.items()},
            "guard/floor": round(statistics.median(ratio), 3), "checks-ns": round(med["floor"] - med["direct"], 1),
            "extra-ns": round(med["guard"] - med["floor"], 1), "counted": calls, "expected-count": (rounds * n + 2000)}


def native_floor(rounds: int, n: int) -> dict:
    """What a native check reached through ``torch.library`` would pay before checking anything:
    the cheapest call into a C++ op through the dispatcher from Python (``aten.is_contiguous``
    on one tensor), next to the same fact read as a tensor method and a bare Python call."""
    import torch

    x = torch.zeros(4, 8)
    op = torch.ops.aten.is_contiguous.default

    def py_call(t):
        return t

    fs = {"python call": py_call, "x.is_contiguous()": torch.Tensor.is_contiguous, "torch.ops.aten.is_contiguous": op}
    loop = timer(1)
    t: dict[str, list] = {k: [] for k in fs}
    for _ in range(rounds):
        for k, f in fs.items():
            t[k].append(loop(f, n, x))
    return {k: (round(statistics.median(v), 1), round(min(v), 1)) for k, v in t.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--inputs", type=int, nargs="+", default=[2, 3])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--n", type=int, default=100_000)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="frt-bench-guard-"))
    try:
        print(f"bench_guard: {args.rounds} rounds x {args.n} calls, alternating direct/floor/guard")
        print(f"{'inputs':>6} {'direct ns':>10} {'floor ns':>9} {'guard ns':>9} {'guard/floor':>12} "
              f"{'checks ns':>10} {'guard extra ns':>15} {'min d/f/g ns':>20} counted")
        for k in args.inputs:
            r = measure(k, args.rounds, args.n, tmp)
            assert r["counted"] == r["expected-count"], r  # every guarded call counted
            print(f"{k:>6} {r['direct-ns']:>10} {r['floor-ns']:>9} {r['guard-ns']:>9} {r['guard/floor']:>11}x "
                  f"{r['checks-ns']:>10} {r['extra-ns']:>15} "
                  f"{r['min-direct-ns']:>6}/{r['min-floor-ns']}/{r['min-guard-ns']} {r['counted']}", flush=True)
        print("guard/floor = median over rounds of (guard ns / floor ns) in the same round; checks = floor - direct;"
              " guard extra = guard - floor (medians)")
        print("a native check's entry fee, one tensor (median / fastest round, ns):")
        for k, (med, low) in native_floor(args.rounds, args.n).items():
            print(f"  {k:<30} {med:>8} / {low}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
