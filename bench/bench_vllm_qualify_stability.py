"""Verdict stability of `frt qualify` on a vLLM binding (issue 33 item 4): the docs/vllm.md example, N runs.

Builds the docs/vllm.md project exactly as the page writes it (its files, `python ../make_model.py`, `frt digest`,
`frt lock`), then runs `frt qualify --model tiny-qwen2 --route ROUTE` N times, each in a fresh process as a user
would, and records per run and band: the state, the speed-up median and its 95% interval, the rounds timing took,
and the run's wall time. `--route compiled` is the page's route (vLLM's default compiled form); `--route eager`
qualifies the same seams in an `--enforce-eager` engine (added to the manifest by this script), where frt's layer
and vLLM's op run the same eager code and the speed-up sits near 1.00x: the case that flipped between states.

    .venv/bin/python bench/bench_vllm_qualify_stability.py [--runs 5] [--route compiled|eager]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from helpers.docsteps import doc_steps, write_step_file

FRT = str(Path(sys.executable).with_name("frt"))


def build(work: Path, env: dict) -> Path:
    cwd = work
    for kind, step in doc_steps(ROOT / "docs" / "vllm.md", ("sh", "python", "toml", "json")):
        if kind == "file":
            write_step_file(cwd, step)
            continue
        argv = shlex.split(step)
        if argv[0] == "cd":
            cwd = cwd / argv[1]
            continue
        if argv[:2] == ["frt", "qualify"]:
            return cwd
        argv[0] = {"frt": FRT, "python": sys.executable}.get(argv[0], argv[0])
        subprocess.run(argv, cwd=cwd, env=env, check=True, capture_output=True, timeout=600)
    raise SystemExit("docs/vllm.md has no `frt qualify` step")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--route", default="compiled", choices=["compiled", "eager"])
    args = ap.parse_args()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FRT_", "VLLM_"))}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1", VLLM_CPU_OMP_THREADS_BIND="nobind")
    work = Path(tempfile.mkdtemp(prefix="frt-vllm-stability-"))
    env["XDG_CACHE_HOME"] = str(work / "cache")
    proj = build(work, env)
    if args.route == "eager":
        m = proj / "manifests" / "tiny-qwen2.toml"
        m.write_text(m.read_text("utf-8") + '\n[routes.eager]\nassembly = "eager"\nseams = { norm = "rms", act = "silu" }\n',
                     "utf-8")
        subprocess.run([FRT, "lock"], cwd=proj, env=env, check=True, capture_output=True, timeout=600)
    rows = []
    for i in range(args.runs):
        t0 = time.perf_counter()
        proc = subprocess.run([FRT, "qualify", "--model", "tiny-qwen2", "--route", args.route], cwd=proj,
                              env=env, capture_output=True, text=True, timeout=1800)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            raise SystemExit(proc.stdout[-3000:] + proc.stderr[-3000:])
        got = {}
        for rec in sorted((proj / "receipts" / "tiny-qwen2").glob(f"{args.route}--*.json")):
            d = json.loads(rec.read_text("utf-8"))
            t = d["evidence"]["timing"]
            ci = t.get("speedup-ci") or {}
            got[d["cell"]["phase"]] = (d["state"], t["speedup-median"], ci.get("low"), ci.get("high"), t["rounds"])
        rows.append((wall, got))
        print(f"run {i + 1}: {wall:.1f} s  " + "  ".join(
            f"{ph} {s} {med:.3f}x [{lo:.3f}-{hi:.3f}] {n} rounds" for ph, (s, med, lo, hi, n) in sorted(got.items())),
            flush=True)
    phases = sorted(rows[0][1])
    for ph in phases:
        states = [g[ph][0] for _, g in rows]
        print(f"{ph}: states {sorted(set(states))} over {len(rows)} runs"
              f"{'' if len(set(states)) == 1 else '  (UNSTABLE)'}; rounds median "
              f"{statistics.median(g[ph][4] for _, g in rows):.0f}")
    print(f"qualify wall time: median {statistics.median(w for w, _ in rows):.1f} s per run (route {args.route})")


if __name__ == "__main__":
    main()
