"""Serving-path benchmarks (issue: loader and serving). Ratios against baselines measured in the same run.

1. guarded call overhead: ``plan.entry(seam, phase)`` on a no-op entry vs calling the entry directly;
2. warm ``load`` of the demo model from a mirror (lockfile verify, resolve, variant + arch + trust checks,
   full digest verification of every file, import, smoke) vs ``kernels.get_local_kernel`` of the same
   packages with no verification, each in a fresh process with torch already imported, alternated;
3. digest verification throughput (frt's file digest) vs raw ``hashlib.sha256`` over the same bytes;
4. ``import frt_dist`` time vs a bare interpreter, and proof that torch is not imported.

    .venv/bin/python bench/bench_serving.py                 # everything
    .venv/bin/python bench/bench_serving.py --only guard    # one part: guard, load, digest, import
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


def guard_overhead(n: int = 200_000, repeats: int = 9, inputs: int = 2) -> dict:
    """The guard on a no-op entry whose contract declares ``inputs`` tensors: ``x [rows, 8]``,
    ``w [8]`` and then ``[rows, 8]`` ones (every input is checked)."""
    import torch

    import frt_dist
    from helpers.factories import CPU, TinyProject, impl_doc, manifest_doc

    tmp = Path(tempfile.mkdtemp(prefix="frt-bench-"))
    params = ", ".join(["x", "w", *(f"r{i}" for i in range(2, inputs))][:inputs])
    noop = f'"""no-op kernel"""\n\n\ndef noop({params}):\n    return x\n'
    specs = [{"shape": ["rows", 8], "dtype": "float32"}, {"shape": [8], "dtype": "float32"}]
    specs = (specs + [{"shape": ["rows", 8], "dtype": "float32"}] * inputs)[:inputs]
    pkg = "noop" if inputs == 2 else f"noop{inputs}"  # one package per process: a name per variant of the bench
    doc = manifest_doc(model="noop", packages={f"t-org/{pkg}": {"path": f"packages/{pkg}"}},
                       seams={"s": {"structure": "noop@1", "impls": {"noop": impl_doc(f"t-org/{pkg}", "noop", inputs=specs)}}},
                       routes={"r": {"assembly": "eager", "seams": {"s": "noop"}, "gate": {"min-speedup": 1.02}}})
    tp = TinyProject(tmp / "p", manifest=doc, packages={pkg: {"name": pkg, "source": noop}})
    lock = tp.lock(receipts=[("r", "decode"), ("r", "prefill")])
    plan = frt_dist.load("noop", lockfile=lock, hardware=CPU)
    entry = plan.entry("s", "decode")
    direct = sys.modules[lock.packages[f"t-org/{pkg}"].variants["torch-cpu"].module_id].noop
    args = ([torch.zeros(4, 8), torch.zeros(8)] + [torch.zeros(4, 8)] * inputs)[:inputs]
    names = [f"a{i}" for i in range(inputs)]
    ns: dict = {"time": time}  # the timed loop calls with plain positional arguments, as a model does
    exec(f"def loop(f, n, {', '.join(names)}):\n    t0 = time.perf_counter_ns()\n    for _ in range(n):\n"
         f"        f({', '.join(names)})\n    return (time.perf_counter_ns() - t0) / n\n", ns)
    loop = ns["loop"]
    loop(entry, 1000, *args), loop(direct, 1000, *args)
    d_ns, g_ns = [], []
    for _ in range(repeats):  # alternate, take medians
        d_ns.append(loop(direct, n, *args))
        g_ns.append(loop(entry, n, *args))
    d, g = statistics.median(d_ns), statistics.median(g_ns)
    calls = plan.ledger()["seams"]["s"]["calls"]
    shutil.rmtree(tmp, ignore_errors=True)
    # median: what this (shared, noisy) machine gave; min: the code's cost with the least interference
    return {"direct-ns": round(d, 1), "guarded-ns": round(g, 1), "overhead-ns": round(g - d, 1),
            "ratio": round(g / d, 2), "min-direct-ns": round(min(d_ns), 1), "min-guarded-ns": round(min(g_ns), 1),
            "min-overhead-ns": round(min(g_ns) - min(d_ns), 1), "counted-calls": calls, "repeats": repeats,
            "inputs": inputs}


LOAD = r"""
import time, warnings, json, sys
warnings.filterwarnings("ignore")
import torch, kernels, pathlib  # both sides start with torch and kernels imported ...
mode, mirror, plan = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
# ... and frt's side with the frt modules a load uses (their import cost is measured apart: import_time)
import frt_dist, frt_dist.serve.load, frt_dist.loader, frt_dist.documents.lockfile, frt_dist.routes.resolver
import frt_dist.loader.smoke, frt_dist.project.discover
hw = frt_dist.Hardware(arch="x86_64", device_class="amd-epyc", backend="cpu",
                       software={"torch": "2.13", "kernels": "0.17.2"})


def launches(fns):  # the binds' real-shape calls, with plain torch tensors (what a bare smoke costs)
    for fn, shapes, scales in fns:
        args = [torch.full(sh, sc) for sh, sc in zip(shapes, scales)]
        with torch.no_grad():
            out = fn(*args)
        assert torch.isfinite(out).all()


t0 = time.perf_counter()
if mode == "load":        # the whole serving start-up: verify lock, resolve, check + import, smoke at real shapes
    frt_dist.load("demo-decoder", mirror=mirror, hardware=hw)
elif mode == "loader":    # lockfile read + trust/variant/arch/full digest verification of every package, then import
    lock = frt_dist.documents.lockfile.Lockfile.read(frt_dist.project.discover.bundled_root() / "lockfiles" / "demo-decoder.lock")
    batch = frt_dist.loader.CheckBatch()  # as load does: every package checked before any is imported
    ready = [frt_dist.loader.prepare_locked(lock, repo, mirror=mirror, hardware=hw, batch=batch)
             for repo in plan["route-repos"]]
    for r in ready:
        r.load()
elif mode == "loader-each":  # the same, one load_locked (hub_kernel's path) per package
    lock = frt_dist.documents.lockfile.Lockfile.read(frt_dist.project.discover.bundled_root() / "lockfiles" / "demo-decoder.lock")
    for repo in plan["route-repos"]:
        frt_dist.loader.load_locked(lock, repo, mirror=mirror, hardware=hw)
elif mode == "raw":       # plain kernels, no verification at all
    for d in plan["route-dirs"]:
        kernels.get_local_kernel(pathlib.Path(d))
else:                     # plain kernels + the same launches load's smoke makes, no checks
    mods = [kernels.get_local_kernel(pathlib.Path(d)) for d in plan["route-dirs"]]
    launches([(getattr(mods[i], entry), shapes, scales) for i, entry, shapes, scales in plan["launches"]])
dt = time.perf_counter() - t0
print(json.dumps({"s": dt}))
"""


def _route_plan(lock, mirror: Path) -> dict:
    """What the certified route of the demo binds: its packages' mirror dirs and every smoke launch
    (entry, concrete shapes, scales) load makes, so the bare baseline does the same work."""
    from frt_dist.loader.smoke import _dims, smoke_rows
    from frt_dist.routes.resolver import resolve_all

    hw = _bench_hardware()
    decisions = resolve_all(lock, hardware=hw)
    m = lock.manifest
    repos = sorted({m.impl(s, n).package for d in decisions.values() for s, n in m.routes[d.route].seams.items()})
    dirs = []
    for repo in repos:
        org, name = repo.split("/")
        snap = lock.packages[repo].snapshot
        dirs.append(str(mirror / f"kernels--{org}--{name}" / "snapshots" / snap))
    calls = []
    for phase, d in sorted(decisions.items()):
        for seam, name in sorted(m.routes[d.route].seams.items()):
            impl = m.impl(seam, name)
            rows = smoke_rows(m.phases[phase])
            shapes = [list(_dims(i["shape"], rows)) for i in impl.smoke["inputs"]]
            scales = [float(i.get("scale", 1.0)) for i in impl.smoke["inputs"]]
            calls.append([repos.index(impl.package), impl.entry, shapes, scales])
    return {"route-repos": repos, "route-dirs": dirs, "launches": calls}


def _bench_hardware():
    import frt_dist

    return frt_dist.Hardware(arch="x86_64", device_class="amd-epyc", backend="cpu",
                             software={"torch": "2.13", "kernels": "0.17.2"})


def warm_load(rounds: int = 15) -> dict:
    """Each measurement is a fresh process over a filled mirror, with bytecode cached for every module
    on both sides (``PYTHONPYCACHEPREFIX``; one untimed round first), as an installed deployment runs."""
    from frt_dist.distribution.mirror import mirror_lock
    from frt_dist.documents.lockfile import Lockfile
    from frt_dist.project.discover import bundled_root

    lock = Lockfile.read(bundled_root() / "lockfiles" / "demo-decoder.lock")
    tmp = Path(tempfile.mkdtemp(prefix="frt-bench-mirror-"))
    mirror = tmp / "mirror"
    mirror_lock(lock, mirror, variants=["torch-cpu"], root=bundled_root())
    plan = json.dumps(_route_plan(lock, mirror))
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HF_", "FRT_", "KERNELS_")) and k != "PYTHONDONTWRITEBYTECODE"}
    env.update(HF_HUB_OFFLINE="1", PYTHONPYCACHEPREFIX=str(tmp / "pycache"), OMP_NUM_THREADS="2")
    times = {"load": [], "loader": [], "loader-each": [], "raw": [], "raw+launches": []}
    modes = list(times)
    for i in range(rounds + 1):
        for mode in (modes if i % 2 == 0 else modes[::-1]):
            out = subprocess.run([PY, "-c", LOAD, mode, str(mirror), plan], capture_output=True, text=True,
                                 env=env, cwd=tmp, check=True).stdout
            if i:  # round 0 only fills the bytecode caches
                times[mode].append(json.loads(out.strip().splitlines()[-1])["s"])
    shutil.rmtree(tmp, ignore_errors=True)
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}

    def paired(a: str, b: str) -> float:  # median of per-round ratios: each pair ran back to back
        return round(statistics.median(x / y for x, y in zip(times[a], times[b], strict=True)), 2)

    return {"load-ms": round(med["load"], 2), "loader-ms": round(med["loader"], 2),
            "loader-each-ms": round(med["loader-each"], 2),
            "loader-each-ratio": round(med["loader-each"] / med["raw"], 2),
            "loader-each-ratio-paired": paired("loader-each", "raw"),
            "get_local_kernel-ms": round(med["raw"], 2), "raw+launches-ms": round(med["raw+launches"], 2),
            "loader-ratio": round(med["loader"] / med["raw"], 2), "loader-ratio-paired": paired("loader", "raw"),
            "load-ratio": round(med["load"] / med["raw"], 2),
            "load-vs-raw+launches": round(med["load"] / med["raw+launches"], 2),
            "load-vs-raw+launches-paired": paired("load", "raw+launches"),
            "packages": len(json.loads(plan)["route-repos"]), "launches": len(json.loads(plan)["launches"]),
            "rounds": rounds}


def digest_throughput(size_mb: int = 256, repeats: int = 5) -> dict:
    from frt_dist.distribution.integrity import file_digest

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


SERVING_MODULES = ("frt_dist.serve.load, frt_dist.loader, frt_dist.documents.lockfile, frt_dist.routes.resolver, "
                   "frt_dist.loader.smoke, frt_dist.project.discover")


def import_time(rounds: int = 15) -> dict:
    """Fresh interpreters: bare, ``import frt_dist``, and ``import frt_dist`` plus the modules ``load`` pulls in,
    with bytecode cached (as an installed package runs; one untimed round fills the cache) and, for
    ``import frt_dist``, without any bytecode (``PYTHONDONTWRITEBYTECODE=1`` and no cache, as `make test` runs)."""
    tmp = Path(tempfile.mkdtemp(prefix="frt-bench-import-"))
    cached = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    cached["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache")
    bare = {k: v for k, v in os.environ.items() if k != "PYTHONPYCACHEPREFIX"}
    bare["PYTHONDONTWRITEBYTECODE"] = "1"
    probe = "; import sys; print(int('torch' in sys.modules), int('kernels' in sys.modules))"
    runs = {"bare": ("pass", cached), "frt_dist": ("import frt_dist" + probe, cached),
            "serving": (f"import frt_dist, {SERVING_MODULES}" + probe, cached),
            "frt_dist-no-bytecode": ("import frt_dist" + probe, bare)}
    # what a serving process pays: the frt modules load uses, in a process that already has torch and kernels
    in_serving = ("import warnings; warnings.filterwarnings('ignore'); import time, torch, kernels; "
                  f"t0 = time.perf_counter(); import frt_dist, {SERVING_MODULES}; print(time.perf_counter() - t0)")
    times = {k: [] for k in runs}
    times["after-torch"] = []
    outs = {}
    for i in range(rounds + 1):
        for k, (code, env) in runs.items():
            t0 = time.perf_counter()
            outs[k] = subprocess.run([PY, "-c", code], check=True, capture_output=True, text=True, env=env).stdout
            if i:
                times[k].append(time.perf_counter() - t0)
        out = subprocess.run([PY, "-c", in_serving], check=True, capture_output=True, text=True, env=cached).stdout
        if i:
            times["after-torch"].append(float(out.split()[-1]))
    shutil.rmtree(tmp, ignore_errors=True)
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    return {"bare-python-ms": round(med["bare"], 1),
            "added-ms": round(med["frt_dist"] - med["bare"], 1),
            "added-serving-ms": round(med["serving"] - med["bare"], 1),
            "serving-after-torch-ms": round(med["after-torch"], 1),
            "added-no-bytecode-ms": round(med["frt_dist-no-bytecode"] - med["bare"], 1),
            "torch-imported": any(outs[k].split()[0] == "1" for k in ("frt_dist", "serving")),
            "kernels-imported": any(outs[k].split()[1] == "1" for k in ("frt_dist", "serving"))}


PARTS = ("guard", "load", "digest", "import")


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", action="append", choices=PARTS, help="run only this part (repeatable)")
    parts = set(ap.parse_args(argv).only or PARTS)
    print("frt-dist serving benchmarks (ratios against baselines measured in this run)")
    out = {}
    if "guard" in parts:
        g = out["guard"] = guard_overhead()
        print(f"guarded call, no-op entry, {g['inputs']} inputs checked, median of {g['repeats']} rounds: direct "
              f"{g['direct-ns']} ns, guarded {g['guarded-ns']} ns -> overhead {g['overhead-ns']} ns/call, ratio "
              f"{g['ratio']}x; fastest rounds: {g['min-guarded-ns']} vs {g['min-direct-ns']} ns -> "
              f"{g['min-overhead-ns']} ns (ledger counted {g['counted-calls']} calls)")
        g3 = out["guard-3-inputs"] = guard_overhead(inputs=3)
        print(f"  the same with 3 inputs (x, w, and a [rows, 8] residual): overhead {g3['overhead-ns']} ns/call "
              f"(fastest rounds {g3['min-overhead-ns']} ns)")
    if parts - {"guard"}:
        _rest(parts, out)
    print(json.dumps(out, sort_keys=True))
    return 0


def _rest(parts: set, out: dict) -> None:
    if "load" in parts:
        out["warm-load"] = _print_load(warm_load())
    if "digest" in parts:
        d = out["digest"] = digest_throughput()
        print(f"digest throughput over {d['size-mb']} MiB: frt {d['frt-MBps']} MiB/s vs hashlib {d['hashlib-MBps']} "
              f"MiB/s -> {d['throughput-ratio']}x")
    if "import" in parts:
        i = out["import"] = import_time()
        print(f"import frt_dist: +{i['added-ms']} ms over a bare interpreter ({i['bare-python-ms']} ms), "
              f"+{i['added-serving-ms']} ms with the modules load uses (bytecode cached), of which "
              f"{i['serving-after-torch-ms']} ms remain in a process that already imported torch and kernels; "
              f"+{i['added-no-bytecode-ms']} ms with no bytecode at all; "
              f"torch imported: {i['torch-imported']}, kernels imported: {i['kernels-imported']}")


def _print_load(w: dict) -> dict:
    print(f"warm load from a mirror (demo-decoder's route: {w['packages']} packages, {w['launches']} smoke launches; "
          f"fresh process each, {w['rounds']} alternating rounds, torch+kernels+frt modules imported, bytecode cached):")
    print(f"  kernels.get_local_kernel, no verification : {w['get_local_kernel-ms']} ms (baseline)")
    print(f"  frt loader (lock read+verify, trust, variant, arch, full digest verification, import): "
          f"{w['loader-ms']} ms -> {w['loader-ratio']}x (per-round pairs: {w['loader-ratio-paired']}x)")
    print(f"  the same, one load_locked per package (hub_kernel's path): {w['loader-each-ms']} ms -> "
          f"{w['loader-each-ratio']}x (per-round pairs: {w['loader-each-ratio-paired']}x)")
    print(f"  get_local_kernel + the same real-shape launches, no checks: {w['raw+launches-ms']} ms")
    print(f"  frt_dist.load (loader + resolve + smoke launch of each bound impl): {w['load-ms']} ms -> "
          f"{w['load-ratio']}x the bare import, {w['load-vs-raw+launches']}x import+launches "
          f"(per-round pairs: {w['load-vs-raw+launches-paired']}x)")
    return w


if __name__ == "__main__":
    sys.exit(main())
