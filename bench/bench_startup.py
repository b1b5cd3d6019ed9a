#!/usr/bin/env python3
"""Benchmark: `frt resolve|verify|lock --check|matrix` start-up against the bare interpreter floor.

The floor is ``python -c "import tomllib, json, hashlib"`` (what any TOML+JSON+digest tool
pays before doing anything). Each command is run in a fresh process, **paired** with a
floor run, in alternating order (floor first in even rounds, the command first in odd
ones), so load from other processes on a shared machine hits both sides alike; the
reported figure is the median over rounds of (command wall / floor wall) within the
pair, next to the medians of each side. CPU time (user+sys of the child) is reported the
same way.

    .venv/bin/python bench/bench_startup.py [--rounds 21] [--project DIR]

Run in the repository root (the bundled demo project, ``lockfiles/demo-decoder.lock``).
"""

from __future__ import annotations

import sys

sys.dont_write_bytecode = True

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

RESOLVE = ["resolve", "--model", "demo-decoder", "--arch", "x86_64", "--device-class", "amd-epyc",
           "--software", "torch=2.13,kernels=0.17.2", "--json"]
COMMANDS = {
    "resolve": RESOLVE,
    "verify": ["verify", "--model", "demo-decoder", "--json"],
    "lock --check": ["lock", "--model", "demo-decoder", "--check"],
    "matrix": ["matrix", "--model", "demo-decoder", "--json"],
}
FLOOR = [sys.executable, "-P", "-c", "import tomllib, json, hashlib"]


def _env(bytecode: bool, cache: str, src: Path = ROOT) -> dict:
    """The children's environment. With ``bytecode`` (the default) compiled modules are cached
    under ``cache`` (``PYTHONPYCACHEPREFIX``, nothing written into the checkout), as an installed
    wheel has them; without, every process compiles frt's sources (``PYTHONDONTWRITEBYTECODE``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FRT_", "HF_", "KERNELS_", "PYTHONDONTWRITE"))}
    env["PYTHONPATH"] = str(src)
    if bytecode:
        env["PYTHONPYCACHEPREFIX"] = cache
    else:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def timed(argv: list[str], cwd: Path, env: dict) -> tuple[float, float, int]:
    """(wall s, child cpu s, exit code) of one fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    r = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, r.returncode


def paired(cmd: list[str], rounds: int, cwd: Path, env: dict, before_env: dict | None = None,
           before_cwd: Path | None = None) -> dict:
    """Rounds of (floor, frt[, frt from the before checkout]) in alternating order."""
    fw, cw, fc, cc, ratios, cpu_ratios, codes, bw, bratios, bcodes = [], [], [], [], [], [], set(), [], [], set()
    for i in range(rounds):
        runs = [("floor", FLOOR, env, cwd), ("frt", cmd, env, cwd)] + (
            [("before", cmd, before_env, before_cwd or cwd)] if before_env else [])
        res = {}
        for name, argv, e, where in (runs if i % 2 == 0 else runs[::-1]):
            res[name] = timed(argv, where, e)
        (f_wall, f_cpu, _), (c_wall, c_cpu, code) = res["floor"], res["frt"]
        codes.add(code)
        fw.append(f_wall)
        cw.append(c_wall)
        fc.append(f_cpu)
        cc.append(c_cpu)
        ratios.append(c_wall / f_wall)
        cpu_ratios.append(c_cpu / f_cpu if f_cpu else float("nan"))
        if before_env:
            bw.append(res["before"][0])
            bratios.append(res["before"][0] / f_wall)
            bcodes.add(res["before"][2])
    out = {"floor": statistics.median(fw), "cmd": statistics.median(cw), "ratio": statistics.median(ratios),
           "cpu_ratio": statistics.median(cpu_ratios), "min_ratio": min(ratios), "codes": sorted(codes)}
    if before_env:
        out.update(before=statistics.median(bw), before_ratio=statistics.median(bratios), before_codes=sorted(bcodes))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--project", type=Path, default=ROOT)
    ap.add_argument("--only", nargs="*", choices=list(COMMANDS), help="run only these commands")
    ap.add_argument("--no-bytecode", action="store_true",
                    help="compile frt's sources in every process (PYTHONDONTWRITEBYTECODE=1, as this dev "
                         "environment runs); default: bytecode cached once, as an installed wheel has it")
    ap.add_argument("--before", type=Path, metavar="DIR",
                    help="also run the commands from this checkout (e.g. a git worktree of the commit before)")
    ap.add_argument("--before-project", type=Path, metavar="DIR",
                    help="run the before commands in this project (default: --project); the before checkout's own "
                         "demo project when the lockfile format changed, so each side reads a lock it can read")
    ap.add_argument("--module", action="store_true", help="run `python -m frt_dist.cli.main` instead of the console script's code")
    args = ap.parse_args()
    cache = tempfile.mkdtemp(prefix="frt-bench-pyc-")
    env = _env(not args.no_bytecode, cache)
    before_env = _env(not args.no_bytecode, cache + "-before", args.before.resolve()) if args.before else None
    # what the `frt` console script runs ([project.scripts] frt = frt_dist._entry:main), with this
    # checkout first on the path; `--module` runs `python -m frt_dist.cli.main` (as the tests do) instead
    # -P: the working folder is not put first on sys.path, so each side imports the frt_dist its
    # PYTHONPATH names (the demo project is a checkout: its own frt_dist would win otherwise)
    base = ([sys.executable, "-P", "-m", "frt_dist.cli"] if args.module else
            [sys.executable, "-P", "-c", "import sys; from frt_dist._entry import main; sys.argv[0] = 'frt'; sys.exit(main())"])
    before_cwd = args.before_project or args.project
    for argv in COMMANDS.values():  # warm: the bytecode cache, the page cache
        timed(base + argv, args.project, env)
        if before_env:
            timed(base + argv, before_cwd, before_env)
    print(f"bench_startup: {args.rounds} paired rounds per command, alternating order; floor = "
          f"`python -c \"import tomllib, json, hashlib\"`; cwd {args.project}"
          f"{f' (before: {before_cwd})' if before_env else ''}; "
          f"{'no bytecode cache' if args.no_bytecode else 'bytecode cached'}")
    print(f"{'command':<14} {'floor ms':>9} {'frt ms':>8} {'wall ratio':>11} {'best':>6} {'cpu ratio':>10}  exit"
          + (f" {'before ms':>10} {'before ratio':>13}  exit" if before_env else ""))
    for name, argv in COMMANDS.items():
        if args.only and name not in args.only:
            continue
        r = paired(base + argv, args.rounds, args.project, env, before_env, before_cwd)
        print(f"{name:<14} {r['floor'] * 1e3:>9.1f} {r['cmd'] * 1e3:>8.1f} {r['ratio']:>10.2f}x {r['min_ratio']:>5.2f}x "
              f"{r['cpu_ratio']:>9.2f}x  {','.join(map(str, r['codes'])):<4}"
              + (f" {r['before'] * 1e3:>10.1f} {r['before_ratio']:>12.2f}x  {','.join(map(str, r['before_codes']))}"
                 if before_env else ""), flush=True)
    print("ratio = median over rounds of (frt wall / floor wall) in the same pair; best = the lowest pair")
    shutil.rmtree(cache, ignore_errors=True)
    shutil.rmtree(cache + "-before", ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
