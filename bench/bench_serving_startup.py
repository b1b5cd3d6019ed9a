#!/usr/bin/env python3
"""Benchmark: serving start-up broken down, from process start to the first guarded call (issue 20 item 4).

``frt_dist.load("demo-decoder")`` on the bundled demo (its path packages, no network), in a
fresh process per round. The child runs what ``load`` runs, step by step through the same
functions (``serve.find_lockfile``, ``resolve_all``, ``serve._supply``, ``serve._check_binds``,
``Plan``), timing each:

- **interpreter**: process start (the parent's clock before spawning) to the child's first line;
- **import torch**: torch's own import, reported apart (any torch program pays it; not frt's);
- **import frt**: ``frt_dist`` and the modules ``load`` uses (serve, loader, lockfile, resolver);
- **lock read**: finding and reading the lockfile (TOML, lock-digest, manifest), the stale check;
- **resolve**: the decision per phase band;
- **import kernels**: the ``kernels`` library (and ``huggingface_hub``), which the loader imports
  on first use to register the packages; third-party, timed apart;
- **verify + import packages**: every locked file of the chosen variants hashed against the lock,
  then the packages imported;
- **smoke**: each bind's entry called once at its declared smoke shapes;
- **plan**: guards compiled, counters made;
- **first guarded call**: one call through ``plan.entry(seam, phase)`` at decode shapes.

A second child per round calls ``frt_dist.load`` itself (no step timing) and reports process
start to the first guarded call: the steps must add up to about that. Medians over rounds.

    .venv/bin/python bench/bench_serving_startup.py [--rounds 7]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, time
T = {"start": time.time()}
p0 = time.perf_counter()
marks = []
def mark(name):
    marks.append((name, time.perf_counter()))
import warnings
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
mark("python")
import torch
mark("import torch")
HW = dict(arch="x86_64", device_class="amd-epyc", backend="cpu", software={"torch": "2.13", "kernels": "0.17.2"})
ACCEPT = ("certified_fast", "supported_correct")
if sys.argv[1] == "steps":
    import frt_dist
    from frt_dist import serve
    from frt_dist.lock.freshness import manifest_drift
    from frt_dist.loader import mirror_dir
    from frt_dist.routes.resolver import refusal_error, resolve_all
    mark("import frt")
    hw = frt_dist.Hardware(**HW)
    proj = serve._project(None)
    lock, root = serve.find_lockfile("demo-decoder", None, proj)
    manifest_drift(lock, root)
    mark("lock read")
    decisions = resolve_all(lock, hardware=hw, accept=ACCEPT)
    assert refusal_error("demo-decoder", decisions) is None
    binds = serve._binds(lock, decisions)
    mark("resolve")
    import kernels  # what the loader imports on first use (with huggingface_hub): timed apart
    mark("import kernels")
    packages, reasons = serve._supply(lock, binds, mirror=mirror_dir(None, proj), hardware=hw, allow_pins=False,
                                      root=root, project=proj)
    assert not reasons, reasons
    mark("verify + import packages")
    fns, probes, more = serve._check_binds(lock, binds, packages)
    assert not more, more
    mark("smoke")
    plan = serve.Plan(lock, hw, decisions, "refuse", packages, binds, fns, probes)
    mark("plan")
else:
    import frt_dist
    plan = frt_dist.load("demo-decoder", hardware=frt_dist.Hardware(**HW), accept=ACCEPT)
    mark("load")
con = plan.contract("norm", "decode")
args = [torch.randn(*[4 if d == "rows" else int(d) for d in spec.shape], dtype=torch.float32) for spec in con.inputs]
entry = plan.entry("norm", "decode")
with torch.inference_mode():
    entry(*args)
mark("first guarded call")
assert plan.ledger()["seams"]["norm"]["calls"] == 1
out, last = {}, p0
for name, t in marks:
    out[name] = t - last
    last = t
out["to first call"] = marks[-1][1] - p0
print(json.dumps({"start": T["start"], "steps": out}))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--src", type=Path, default=ROOT, help="the checkout whose frt_dist runs (e.g. a worktree of the commit before)")
    args = ap.parse_args()
    cache = tempfile.mkdtemp(prefix="frt-bench-pyc-")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FRT_", "HF_", "KERNELS_", "PYTHONDONTWRITE"))}
    env["PYTHONPATH"] = str(args.src.resolve())
    env["PYTHONPYCACHEPREFIX"] = cache  # bytecode cached once, as an installed wheel has it
    env["HF_HUB_OFFLINE"] = "1"
    rows: dict[str, list] = {}
    whole: list = []
    try:
        for i in range(args.rounds + 1):  # the first round warms the caches and is not counted
            for mode in (("steps", "load") if i % 2 else ("load", "steps")):
                t0 = time.time()
                r = subprocess.run([sys.executable, "-c", CHILD, mode], cwd=args.src, env=env, capture_output=True,
                                   text=True, timeout=600)
                t_end = time.time()
                if r.returncode != 0:
                    print(r.stdout + r.stderr)
                    return 1
                doc = json.loads(r.stdout.strip().splitlines()[-1])
                if i == 0:
                    continue
                interp = doc["start"] - t0
                if mode == "steps":
                    rows.setdefault("interpreter", []).append(interp)
                    for k, v in doc["steps"].items():
                        rows.setdefault(k, []).append(v)
                    rows.setdefault("process start to first call", []).append(interp + doc["steps"]["to first call"])
                    rows.setdefault("process wall (exit included)", []).append(t_end - t0)
                else:
                    whole.append(interp + doc["steps"]["to first call"])
    finally:
        import shutil

        shutil.rmtree(cache, ignore_errors=True)
    print(f"bench_serving_startup: frt_dist.load('demo-decoder') on the bundled demo, {args.rounds} rounds, "
          f"medians (ms); python {sys.version.split()[0]}; frt_dist from {args.src}")
    order = ["interpreter", "python", "import torch", "import frt", "lock read", "resolve", "import kernels",
             "verify + import packages",
             "smoke", "plan", "first guarded call", "process start to first call", "process wall (exit included)"]
    frt_part = sum(statistics.median(rows[k]) for k in ("import frt", "lock read", "resolve",
                                                         "verify + import packages", "smoke", "plan",
                                                         "first guarded call"))
    for k in order:
        v = statistics.median(rows[k]) * 1e3
        note = {"python": " (warnings filter)", "import torch": " (torch's own; not frt's)",
                "import kernels": " (third-party: kernels + huggingface_hub)"}.get(k, "")
        print(f"  {k:<32} {v:8.1f}{note}")
    print(f"  {'frt (all but interpreter, torch, kernels)':<32} {frt_part * 1e3:8.1f}")
    print(f"  {'frt_dist.load itself, start to first call':<32} {statistics.median(whole) * 1e3:8.1f}  "
          f"(a separate process calling load(); the steps above should add up to about this)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
