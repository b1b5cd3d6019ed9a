"""Verdict stability of `frt qualify` (issue 21 item 6): the same route qualified N times.

Makes a fresh `frt init` project (its RMSNorm kernel, whose real effect on the demo block is
about 1.00x, against the gate 1.05: the case that flipped between `certified_fast` 1.088x and
`supported_correct` 0.849x), locks it, then qualifies route `fast-norm` N times, each run in a
fresh process through `frt_dist.qualify.run.qualify` (what `frt qualify` calls), on every band.

Per run and band it records the state the receipt says (the interval rule: the 95% sign-test
interval of the median paired speedup must clear the gate; rounds extend adaptively from the
manifest's 10 up to 40), and, from the same run's first 10 rounds, the state the old rule would
have given (median of 10 rounds >= gate). The summary counts verdict changes between consecutive
runs and, the goal, changes between `certified_fast` and a loss.

    .venv/bin/python bench/bench_qualify_stability.py [--runs 10] [--project DIR | --demo] [--model M --route R]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ONE_RUN = r"""
import json, sys
from frt_dist.documents.lockfile import Lockfile
from frt_dist.qualify.run import qualify
lock = Lockfile.read(sys.argv[1])
out = []
for r in qualify(lock, sys.argv[2], root=sys.argv[3]):
    out.append({"phase": r.phase, "passed": r.passed, "state": r.state, "speedups": r.speedups,
                "timing": (r.receipt or {}).get("evidence", {}).get("timing")})
print(json.dumps(out))
"""


def old_state(speedups: list[float], gate: float, rounds: int) -> str:
    """The pre-issue-21 rule on the first ``rounds`` rounds: median >= gate (and > 1)."""
    med = round(statistics.median(speedups[:rounds]), 4)
    return "certified_fast" if med >= gate and med > 1.0 else "supported_correct"


def changes(states: list[str]) -> int:
    return sum(a != b for a, b in itertools.pairwise(states))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--project", help="an existing project (default: a fresh `frt init` one)")
    ap.add_argument("--demo", action="store_true", help="a copy of the repository's demo project instead "
                                                        "(use with --model demo-decoder --route fused)")
    ap.add_argument("--model", default="my-model")
    ap.add_argument("--route", default="fast-norm")
    ap.add_argument("--json", help="also write the raw results here")
    args = ap.parse_args()
    frt = [sys.executable, "-m", "frt_dist.cli"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with tempfile.TemporaryDirectory(prefix="frt-stability-") as tmp:
        project = Path(args.project) if args.project else Path(tmp) / "proj"
        if args.demo:
            import shutil

            for d in ("manifests", "lockfiles", "receipts", "packages"):
                shutil.copytree(ROOT / d, project / d, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        elif not args.project:
            subprocess.run(frt + ["init", str(project), "--model", args.model, "-q"], check=True, env=env)
        subprocess.run(frt + ["lock", "-q"], check=True, cwd=project, env=env)
        from frt_dist.documents.lockfile import Lockfile
        from frt_dist.documents.manifest import route_gate

        lockpath = project / "lockfiles" / f"{args.model}.lock"
        m = Lockfile.read(lockpath).manifest
        gate = route_gate(m.routes[args.route]).min_speedup
        rounds0 = int(m.qualify.get("rounds", 30))
        runs = []
        for i in range(args.runs):
            p = subprocess.run([sys.executable, "-c", ONE_RUN, str(lockpath), args.route, str(project)],
                               capture_output=True, text=True, env=env, cwd=project)
            if p.returncode:
                print(p.stderr, file=sys.stderr)
                return 1
            runs.append(json.loads(p.stdout))
            for b in runs[-1]:
                t = b["timing"] or {}
                ci = t.get("speedup-ci") or {}
                print(f"run {i + 1:>2} {b['phase']:<8} {b['state']:<17} median {t.get('speedup-median', 0):.3f}x "
                      f"CI {ci.get('low', 0):.3f}-{ci.get('high', 0):.3f} rounds {t.get('rounds')} "
                      f"({(t.get('adaptive') or {}).get('stopped')})  old rule: {old_state(b['speedups'], gate, rounds0)} "
                      f"(median of {rounds0} {statistics.median(b['speedups'][:rounds0]):.3f}x)", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=1))
    print(f"\nroute {args.route}, gate {gate}, {args.runs} runs, initial rounds {rounds0}")
    for ph in [b["phase"] for b in runs[0]]:
        new = [next(b for b in r if b["phase"] == ph)["state"] for r in runs]
        old = [old_state(next(b for b in r if b["phase"] == ph)["speedups"], gate, rounds0) for r in runs]
        meds = [next(b for b in r if b["phase"] == ph)["timing"]["speedup-median"] for r in runs]
        used = [next(b for b in r if b["phase"] == ph)["timing"]["rounds"] for r in runs]
        # W: certified_fast; L: supported_correct, the interval decided below the gate; ?: cannot tell
        # (supported_correct at the cap or with a narrow interval straddling the gate)
        cats = "".join("W" if st == "certified_fast" else
                       "L" if next(b for b in r if b["phase"] == ph)["timing"]["adaptive"]["stopped"] == "decided" else "?"
                       for st, r in zip(new, runs, strict=True))
        wl = sum({a, b} == {"W", "L"} for a, b in itertools.pairwise(cats))
        print(f"{ph}: verdicts by run {cats} (W certified, ? cannot tell, L below the gate); "
              f"W<->L changes between consecutive runs: {wl}; W and L both seen: {'W' in cats and 'L' in cats}")
        print(f"{ph}: interval rule: {new.count('certified_fast')} certified_fast / {new.count('supported_correct')} "
              f"supported_correct, {changes(new)} changes between consecutive runs; "
              f"old rule (median of {rounds0}): {old.count('certified_fast')} / {old.count('supported_correct')}, "
              f"{changes(old)} changes; medians {min(meds):.3f}-{max(meds):.3f}x; rounds run {min(used)}-{max(used)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
