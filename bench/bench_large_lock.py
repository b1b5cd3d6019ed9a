#!/usr/bin/env python3
"""Benchmark: `frt resolve` on 1k / 10k / 100k-cell lockfiles against `rtoml` parsing the same file.

The lockfiles are ``bench_resolve.py``'s (4 phases x N/4 device classes, 4 routes, one
certified receipt per cell: each decision takes one route and gives the three others a
nearest-miss reason). Per size, rounds of fresh processes in alternating order:

- ``rtoml``: ``python -c`` reading the file and ``rtoml.loads`` of its text; the child prints
  the parse alone (in-process ``perf_counter``) and the parent times the whole process;
- ``frt``: ``frt resolve --model bench-model --arch A --device-class D --software ... --json``
  (the console script's code) on the same file: reading, lock-digest check, decisions;
- ``before`` (with ``--before DIR``): the same command run from another checkout (e.g. a
  ``git worktree`` of the commit before), for the before/after table.

Reported: medians, and the median over rounds of the ratio within a round: frt wall / rtoml
process wall, and frt wall / rtoml parse alone (the stricter one: no interpreter start, no
file read on the rtoml side). Both outputs are compared: the decisions must be identical.

    .venv/bin/python bench/bench_large_lock.py [--sizes 1000 10000 100000] [--rounds 7] [--keep DIR] [--before DIR]
"""

from __future__ import annotations

import sys

sys.dont_write_bytecode = True

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_resolve import MODEL, build_lock, cli_hardware

RTOML = ("import sys, time, rtoml\n"
         "text = open(sys.argv[1], encoding='utf-8').read()\n"
         "t0 = time.perf_counter(); rtoml.loads(text); print(time.perf_counter() - t0)")
ENTRY = "import sys; from frt_dist._entry import main; sys.argv[0] = 'frt'; sys.exit(main())"


def _env(src: Path, cache: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FRT_", "HF_", "KERNELS_", "PYTHONDONTWRITE"))}
    env["PYTHONPATH"] = str(src)
    env["PYTHONPYCACHEPREFIX"] = cache  # bytecode cached once, as an installed wheel has it
    return env


def _run(argv, cwd, env) -> tuple[float, str, int]:
    t0 = time.perf_counter()
    r = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    return time.perf_counter() - t0, r.stdout, r.returncode


def ensure_lock(n: int, work: Path) -> Path:
    proj = work / f"p{n}"
    path = proj / "lockfiles" / f"{MODEL}.lock"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(build_lock(n).render())
    return proj


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--keep", metavar="DIR", help="keep (and reuse) the synthetic projects here")
    ap.add_argument("--before", metavar="DIR", type=Path, help="a checkout of the code before, run alongside")
    args = ap.parse_args()
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="frt-bench-large-"))
    work.mkdir(parents=True, exist_ok=True)
    cache = tempfile.mkdtemp(prefix="frt-bench-pyc-")
    sides = {"frt": _env(ROOT, cache)}
    if args.before:
        sides["before"] = _env(args.before.resolve(), cache + "-before")
    print(f"bench_large_lock: {args.rounds} rounds per size, alternating order; python {sys.version.split()[0]}")
    print(f"{'cells':>8} {'MB':>6} {'rtoml parse':>12} {'rtoml proc':>11} {'frt':>8} {'frt/parse':>10} {'frt/proc':>9}"
          + (f" {'before':>8} {'before/parse':>13}" if args.before else ""))
    try:
        for n in args.sizes:
            proj = ensure_lock(n, work)
            lock = proj / "lockfiles" / f"{MODEL}.lock"
            hw = cli_hardware(n)
            cmd = [sys.executable, "-P", "-c", ENTRY, "resolve", "--project", str(proj), "--model", MODEL, "--arch", hw.arch,
                   "--device-class", hw.device_class, "--software", "torch=2.13,cuda=12.8", "--json"]
            outs = {}
            for name, env in sides.items():  # warm: page cache, bytecode
                _, outs[name], _ = _run(cmd, proj, env)
            if "before" in outs and outs["before"] != outs["frt"]:
                print("  DECISIONS DIFFER between before and after", flush=True)
                return 1
            res: dict[str, list] = {k: [] for k in ("parse", "proc", *sides, *(f"{s}/parse" for s in sides),
                                                    *(f"{s}/proc" for s in sides))}
            for i in range(args.rounds):
                order = ["rtoml", *sides]
                if i % 2:
                    order.reverse()
                got = {}
                for name in order:
                    if name == "rtoml":
                        wall, out, _ = _run([sys.executable, "-P", "-c", RTOML, str(lock)], proj, sides["frt"])
                        got["proc"], got["parse"] = wall, float(out.strip())
                    else:
                        got[name], out, rc = _run(cmd, proj, sides[name])
                        assert rc == 0 and out == outs[name], (name, rc)
                for k in ("parse", "proc", *sides):
                    res[k].append(got[k])
                for s in sides:
                    res[f"{s}/parse"].append(got[s] / got["parse"])
                    res[f"{s}/proc"].append(got[s] / got["proc"])
            med = {k: statistics.median(v) for k, v in res.items()}
            print(f"{n:>8} {lock.stat().st_size / 1e6:>6.1f} {med['parse']:>11.3f}s {med['proc']:>10.3f}s "
                  f"{med['frt']:>7.3f}s {med['frt/parse']:>9.2f}x {med['frt/proc']:>8.2f}x"
                  + (f" {med['before']:>7.3f}s {med['before/parse']:>12.2f}x" if args.before else ""), flush=True)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
        shutil.rmtree(cache + "-before", ignore_errors=True)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print("frt/parse = frt resolve wall / rtoml.loads alone; frt/proc = / a process reading and parsing with rtoml;"
          " medians over rounds of the ratio within a round")
    return 0


if __name__ == "__main__":
    sys.exit(main())
