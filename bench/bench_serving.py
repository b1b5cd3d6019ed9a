"""Serving-path benchmarks (issue: loader and serving). Ratios against baselines measured in the same run.

1. guarded call overhead: ``plan.entry(seam, phase)`` on a no-op entry vs calling the entry directly;
2. warm ``load`` of the demo model from a mirror (lockfile verify, resolve, variant + arch + trust checks,
   full digest verification of every file, import, smoke) vs ``kernels.get_local_kernel`` of the same
   packages with no verification, each in a fresh process with torch already imported, alternated;
3. digest verification throughput (frt's file digest) vs raw ``hashlib.sha256`` over the same bytes;
4. ``import frt_dist`` time vs a bare interpreter, and proof that torch is not imported.

    .venv/bin/python bench/bench_serving.py
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.dont_write_bytecode = True
PY = sys.executable


def guard_overhead(n: int = 200_000, repeats: int = 7) -> dict:
    import torch

    from factories import CPU, TinyProject, impl_doc
    import frt_dist

    from factories import manifest_doc

    tmp = Path(tempfile.mkdtemp(prefix="frt-bench-"))
    noop = '"""no-op kernel"""\n\n\ndef noop(x, w):\n    return x\n'
    doc = manifest_doc(model="noop", packages={"t-org/noop": {"path": "packages/noop"}},
                       seams={"s": {"structure": "noop@1", "impls": {"noop": impl_doc("t-org/noop", "noop")}}},
                       routes={"r": {"assembly": "eager", "seams": {"s": "noop"}, "gate": {"min-speedup": 1.02}}})
    tp = TinyProject(tmp / "p", manifest=doc, packages={"noop": {"name": "noop", "source": noop}})
    lock = tp.lock(receipts=[("r", "decode"), ("r", "prefill")])
    plan = frt_dist.load("noop", lockfile=lock, hardware=CPU)
    entry = plan.entry("s", "decode")
    direct = sys.modules[lock.packages["t-org/noop"].variants["torch-cpu"].module_id].noop
    x, w = torch.zeros(4, 8), torch.zeros(8)
    for _ in range(1000):
        entry(x, w), direct(x, w)
    d_ns, g_ns = [], []
    for _ in range(repeats):  # alternate, take medians
        t0 = time.perf_counter_ns()
        for _ in range(n):
            direct(x, w)
        d_ns.append((time.perf_counter_ns() - t0) / n)
        t0 = time.perf_counter_ns()
        for _ in range(n):
            entry(x, w)
        g_ns.append((time.perf_counter_ns() - t0) / n)
    d, g = statistics.median(d_ns), statistics.median(g_ns)
    calls = plan.ledger()["seams"]["s"]["calls"]
    shutil.rmtree(tmp, ignore_errors=True)
    return {"direct-ns": round(d, 1), "guarded-ns": round(g, 1), "overhead-ns": round(g - d, 1),
            "ratio": round(g / d, 2), "counted-calls": calls}


LOAD = r'''
import time, warnings, json, sys
warnings.filterwarnings("ignore")
import torch, kernels, pathlib  # both sides start with torch and kernels imported
mode, mirror = sys.argv[1], sys.argv[2]
import frt_dist
hw = frt_dist.Hardware(arch="x86_64", device_class="amd-epyc", backend="cpu",
                       software={"torch": "2.13", "kernels": "0.17.2"})
if mode == "load":      # the whole serving start-up: verify lock, resolve, check + import, smoke at real shapes
    t0 = time.perf_counter()
    plan = frt_dist.load("demo-decoder", mirror=mirror, hardware=hw)
    dt = time.perf_counter() - t0
elif mode == "loader":  # lockfile read + per-package trust/variant/arch/full digest verification + import
    from frt_dist.loader import load_locked
    from frt_dist.lockfile import Lockfile
    from frt_dist.project import bundled_root
    t0 = time.perf_counter()
    lock = Lockfile.read(bundled_root() / "lockfiles" / "demo-decoder.lock")
    mods = [load_locked(lock, repo, mirror=mirror, hardware=hw) for repo in sorted(lock.packages)]
    dt = time.perf_counter() - t0
else:                   # plain kernels, no verification at all
    dirs = json.loads(sys.argv[3])
    t0 = time.perf_counter()
    mods = [kernels.get_local_kernel(pathlib.Path(d)) for d in dirs]
    dt = time.perf_counter() - t0
print(json.dumps({"s": dt}))
'''


def warm_load(rounds: int = 7) -> dict:
    from frt_dist.lockfile import Lockfile
    from frt_dist.mirror import mirror_lock
    from frt_dist.project import bundled_root

    lock = Lockfile.read(bundled_root() / "lockfiles" / "demo-decoder.lock")
    tmp = Path(tempfile.mkdtemp(prefix="frt-bench-mirror-"))
    mirror_lock(lock, tmp, variants=["torch-cpu"], root=bundled_root())
    dirs = []
    for repo, pkg in sorted(lock.packages.items()):
        org, name = repo.split("/")
        dirs.append(str(tmp / f"kernels--{org}--{name}" / "snapshots" / pkg.snapshot))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "FRT_", "KERNELS_"))}
    env.update(HF_HUB_OFFLINE="1", PYTHONDONTWRITEBYTECODE="1")
    times = {"load": [], "loader": [], "raw": []}
    modes = list(times)
    for i in range(rounds):
        for mode in (modes if i % 2 == 0 else modes[::-1]):
            out = subprocess.run([PY, "-c", LOAD, mode, str(tmp), json.dumps(dirs)], capture_output=True, text=True,
                                 env=env, cwd=tmp, check=True).stdout
            times[mode].append(json.loads(out.strip().splitlines()[-1])["s"])
    shutil.rmtree(tmp, ignore_errors=True)
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    return {"load-ms": round(med["load"], 2), "loader-ms": round(med["loader"], 2),
            "get_local_kernel-ms": round(med["raw"], 2), "loader-ratio": round(med["loader"] / med["raw"], 2),
            "load-ratio": round(med["load"] / med["raw"], 2), "rounds": rounds}


def digest_throughput(size_mb: int = 256, repeats: int = 5) -> dict:
    from frt_dist.integrity import file_digest

    tmp = Path(tempfile.mkdtemp(prefix="frt-bench-digest-"))
    p = tmp / "blob.bin"
    with open(p, "wb") as fh:
        chunk = os.urandom(1 << 20)
        for _ in range(size_mb):
            fh.write(chunk)
    frt_s, raw_s = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        file_digest(p)
        frt_s.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        h = hashlib.sha256()
        with open(p, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        raw_s.append(time.perf_counter() - t0)
    shutil.rmtree(tmp, ignore_errors=True)
    f, r = statistics.median(frt_s), statistics.median(raw_s)
    return {"size-mb": size_mb, "frt-MBps": round(size_mb / f), "hashlib-MBps": round(size_mb / r),
            "throughput-ratio": round(r / f, 2)}


def import_time(rounds: int = 15) -> dict:
    env = {k: v for k, v in os.environ.items()}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    code = "import frt_dist, sys; print(int('torch' in sys.modules), int('kernels' in sys.modules))"
    base, imp = [], []
    for _ in range(rounds):
        t0 = time.perf_counter()
        subprocess.run([PY, "-c", "pass"], check=True, env=env)
        base.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        out = subprocess.run([PY, "-c", code], check=True, capture_output=True, text=True, env=env).stdout
        imp.append(time.perf_counter() - t0)
    return {"bare-python-ms": round(statistics.median(base) * 1e3, 1),
            "import-frt_dist-ms": round(statistics.median(imp) * 1e3, 1),
            "added-ms": round((statistics.median(imp) - statistics.median(base)) * 1e3, 1),
            "torch-imported": out.split()[0] == "1", "kernels-imported": out.split()[1] == "1"}


def main() -> int:
    print("frt-dist serving benchmarks (ratios against baselines measured in this run)")
    g = guard_overhead()
    print(f"guarded call, no-op entry: direct {g['direct-ns']} ns, guarded {g['guarded-ns']} ns -> "
          f"overhead {g['overhead-ns']} ns/call, ratio {g['ratio']}x (ledger counted {g['counted-calls']} calls)")
    w = warm_load()
    print(f"warm load from a mirror (demo-decoder, 3 packages, fresh process each, {w['rounds']} alternating rounds, "
          f"torch+kernels already imported):")
    print(f"  kernels.get_local_kernel x3, no verification : {w['get_local_kernel-ms']} ms (baseline)")
    print(f"  frt loader x3 (lock read, trust, variant, arch, full digest verification, import): "
          f"{w['loader-ms']} ms -> {w['loader-ratio']}x")
    print(f"  frt_dist.load (above + resolve + real-shape smoke launch of each bound impl): "
          f"{w['load-ms']} ms -> {w['load-ratio']}x")
    d = digest_throughput()
    print(f"digest throughput over {d['size-mb']} MiB: frt {d['frt-MBps']} MiB/s vs hashlib {d['hashlib-MBps']} MiB/s "
          f"-> {d['throughput-ratio']}x")
    i = import_time()
    print(f"import frt_dist: {i['import-frt_dist-ms']} ms vs bare python {i['bare-python-ms']} ms "
          f"(+{i['added-ms']} ms); torch imported: {i['torch-imported']}, kernels imported: {i['kernels-imported']}")
    print(json.dumps({"guard": g, "warm-load": w, "digest": d, "import": i}, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
