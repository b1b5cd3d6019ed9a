#!/usr/bin/env python3
"""Benchmark: route resolution cost per decision vs lock size, and `frt resolve` end to end.

Builds synthetic lockfiles (real ``Lockfile`` objects, rendered to TOML by the
real writer) with 1k, 10k and 100k cells: 4 phase bands x N/4 device classes
(spread over CUDA archs 8.0..12.0) x 1 precision, 4 routes (one package each);
every cell holds one certified receipt of one route, so each decision walks one
candidate and gives the other three routes a reason, like a real refusal table.

For each size, after ``Lockfile.read`` (warm: lock in memory, hardware objects
built), it times ``resolve()`` per decision over a fixed sample of cells and,
in the same run, a bare ``dict.get`` of a comparable key (the same 5-string
``CellKey`` against the lock's own index), then prints ns/decision, the ratio
to the dict lookup and the flatness across sizes (ns at N / ns at 1k). Then it
runs ``frt resolve --model X --arch A --device-class D --json`` in a subprocess
against the 100k-cell lockfile (the CLI end to end, including reading it) and
breaks the read down (TOML parse, digest verification + receipt parsing).

    .venv/bin/python bench/bench_resolve.py [--sizes 1000 10000 100000] [--keep DIR]
"""

from __future__ import annotations

import sys

sys.dont_write_bytecode = True

import argparse
import cProfile
import gc
import importlib.util
import io
import os
import platform
import pstats
import random
import shutil
import statistics
import subprocess
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if importlib.util.find_spec("frt_dist") is None:  # not installed: use the checkout's sources
    sys.path.insert(0, str(ROOT))

from frt_dist.base.canonical import digest
from frt_dist.documents.lockfile import IndexEntry, LockedPackage, LockedVariant, Lockfile
from frt_dist.documents.manifest import Manifest
from frt_dist.documents.receipt import CellKey, Receipt
from frt_dist.documents.schema import parse_toml as read_toml
from frt_dist.errors import LockfileError
from frt_dist.lock.build import rank_candidates
from frt_dist.routes.resolver import resolve
from frt_dist.system.hardware import Hardware

MODEL = "bench-model"
PHASES = {"decode": [1, 16], "prefill": [64, 2048], "verify": [17, 63], "long": [2049, 32768]}
ROUTES = ["alpha", "beta", "gamma", "delta"]
ARCHS = ["8.0", "8.6", "8.9", "9.0", "10.0", "12.0"]
VARIANT = "torch213-cxx11-cu128-x86_64-linux"
SOFTWARE = {"cuda": "12.8", "torch": "2.13"}


def manifest_dict() -> dict:
    pk = {f"bench/{r}-kernel": {"path": f"packages/{r}-kernel"} for r in ROUTES}
    seams = {"core": {"structure": "core@1", "impls": {
        r: {"package": f"bench/{r}-kernel", "entry": "forward", "precision": "bf16",
            "contract": {"device": "cuda", "dtypes": ["bfloat16"], "layout": "contiguous"},
            "smoke": {"inputs": [{"shape": ["rows", 64], "dtype": "bfloat16"}]}} for r in ROUTES}}}
    routes = {r: {"assembly": "eager", "seams": {"core": r}} for r in ROUTES}
    return {"schema": "frt.manifest/1", "model": MODEL, "binding": "bench_binding", "host": "torch",
            "family": "bench", "default-precision": "bf16", "packages": pk,
            "phases": {p: {"rows": rows} for p, rows in PHASES.items()}, "seams": seams, "routes": routes}


def device_class(i: int) -> str:
    return f"dc-{i:05d}"


def arch_of(i: int) -> str:
    return ARCHS[i % len(ARCHS)]


def receipt_data(m: Manifest, pkgs: dict, route: str, phase: str, dev: int, speedup: float) -> dict:
    rt = m.routes[route]
    repo = f"bench/{route}-kernel"
    rows = PHASES[phase]
    return {
        "schema": "frt.receipt/1",
        "cell": {"model": MODEL, "binding": m.binding, "family": m.family, "route": route,
                 "route-digest": rt.digest,
                 "hardware": {"backend": "cuda", "arch": arch_of(dev), "device-class": device_class(dev)},
                 "precision": "bf16", "layout": "contiguous", "phase": phase, "band": {"rows": rows},
                 "software": SOFTWARE, "assembly": "eager",
                 "impls": {"core": {"impl": route, "package": repo, "revision": pkgs[repo].revision,
                                    "variant": VARIANT}},
                 "calibration": None, "inputs": {"source": "synthetic", "seed": 0}},
        "state": "certified_fast",
        "evidence": {"parity": {"max-abs": 1e-6, "max-rel": 2e-6, "tolerance": {"abs": 1e-4, "rel": 1e-3},
                                "worst-case": {"rows": rows[1]}, "pass": True},
                     "target-calls": {"core": 64}, "fallbacks": 0,
                     "timing": {"method": "paired-alternating", "rounds": 40, "host-median-ms": 1.0,
                                "route-median-ms": round(1 / speedup, 6), "speedup-median": speedup,
                                "speedup-min": round(speedup - 0.02, 4), "speedup-max": round(speedup + 0.02, 4)},
                     "null-check": True, "negative-control": True, "detach-restores-host": True},
        "verdict": "PASS",
    }


def build_lock(n_cells: int) -> Lockfile:
    m = Manifest.from_dict(manifest_dict(), file=f"manifests/{MODEL}.toml")
    pkgs = {}
    for r in ROUTES:
        repo = f"bench/{r}-kernel"
        v = LockedVariant(VARIANT, "cuda", ("8.0", "9.0", "10.0", "12.0"), "sha256:" + "0" * 64, f"_{r}_kernel",
                          f"{r}_kernel", "sha256", {f"{r}_kernel/__init__.py": "AAAA"})
        pkgs[repo] = LockedPackage(repo, "path", 1, digest({"repo": repo}), "project-path", {VARIANT: v},
                                   path=f"packages/{r}-kernel")
    n_dev = n_cells // len(PHASES)
    receipts, groups = {}, {}
    for dev in range(n_dev):
        for pi, phase in enumerate(PHASES):
            route = ROUTES[(dev + pi) % len(ROUTES)]
            data = receipt_data(m, pkgs, route, phase, dev, 1.05 + ((dev * 7 + pi) % 50) / 100)
            rec = Receipt(data=data, file=f"receipts/{MODEL}/{device_class(dev)}-{phase}.json", digest=digest(data))
            receipts[rec.digest] = rec
            groups.setdefault(rec.key, []).append(rec)
    index = {k: IndexEntry(k, rank_candidates(v)) for k, v in groups.items()}
    return Lockfile(model=MODEL, manifest_file=f"manifests/{MODEL}.toml", manifest=m, packages=pkgs,
                    receipts=receipts, rejected=[], index=index)


# ---------------------------------------------------------------------------


def per_call_ns(fn, args_list, *, budget=0.6, max_rounds=5) -> float:
    """Median over rounds of (round time / calls), in ns. A round runs over a prefix of
    ``args_list`` sized from a probe so that all rounds fit in about ``budget`` seconds."""
    gc.collect()
    t0 = time.perf_counter_ns()
    fn(args_list[:1])
    probe = max(time.perf_counter_ns() - t0, 1)
    n = int(min(len(args_list), max(3, budget * 1e9 / max_rounds / probe)))
    items = args_list[:n]
    rounds = []
    rounds_n = max_rounds if n > 3 else (1 if probe > 2e8 else 3)  # a 0.2 s+ call: one round of 3
    for _ in range(rounds_n):
        t0 = time.perf_counter_ns()
        fn(items)
        rounds.append((time.perf_counter_ns() - t0) / len(items))
    return statistics.median(rounds), n


def sample_queries(lock: Lockfile, n: int, seed: int = 0):
    rng = random.Random(seed)
    n_dev = len(lock.index) // len(PHASES)
    out = []
    for _ in range(n):
        dev = rng.randrange(n_dev)
        phase = rng.choice(list(PHASES))
        hw = Hardware(arch=arch_of(dev), device_class=device_class(dev), backend="cuda", cpu="x86_64", os="linux",
                      software=SOFTWARE)
        out.append((hw, phase))
    return out


def run_cli(proj: Path, hw: Hardware) -> tuple[float, int, str]:
    """`frt resolve ... --json` in a fresh interpreter: wall time, exit code, output."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FRT_", "HF_", "KERNELS_"))}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    args = ["resolve", "--project", str(proj), "--model", MODEL, "--arch", hw.arch, "--device-class", hw.device_class,
            "--software", "torch=2.13,cuda=12.8", "--json"]
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "frt_dist.cli", *args], cwd=proj, env=env, capture_output=True,
                       text=True, timeout=900)
    return time.perf_counter() - t0, r.returncode, (r.stdout if r.returncode == 0 else r.stderr)


def cli_hardware(n_cells: int) -> Hardware:
    dev = (n_cells // len(PHASES)) // 2
    return Hardware(arch=arch_of(dev), device_class=device_class(dev), backend="cuda", cpu="x86_64", os="linux",
                    software=SOFTWARE)


def bench_size(n_cells: int, workdir: Path, results: dict, *, parse_toml: bool, cli: bool) -> None:
    """One lock size. ``parse_toml``: read the written file with tomllib in this process
    (else hand ``from_document`` the identical in-memory document, see main); ``cli``: run
    `frt resolve` on the written lockfile."""
    t0 = time.perf_counter()
    lock = build_lock(n_cells)
    t_build = time.perf_counter() - t0
    t0 = time.perf_counter()
    data = lock.render()
    t_render = time.perf_counter() - t0
    proj = workdir / f"p{n_cells}"
    (proj / "lockfiles").mkdir(parents=True, exist_ok=True)
    path = proj / "lockfiles" / f"{MODEL}.lock"
    path.write_bytes(data)
    mem_doc = {"lock-digest": lock.lock_digest, **lock.document()}
    del lock
    gc.collect()
    # Lockfile.read = the TOML read (frt's one reader, rtoml) + from_document
    # (lock-digest verify, manifest validation, index; receipts parsed when used);
    # the stdlib's tomllib is timed on the same bytes in the same run, for the ratio
    t_toml = t_tomllib = None
    if parse_toml:
        raw = path.read_bytes()
        t0 = time.perf_counter()
        tomllib.loads(raw.decode("utf-8"))
        t_tomllib = time.perf_counter() - t0
        t0 = time.perf_counter()
        doc = read_toml(raw, LockfileError, str(path))
        t_toml = time.perf_counter() - t0
        assert doc == mem_doc, "the in-memory document must equal what the reader reads back"
    else:
        doc = mem_doc
    del mem_doc
    t0 = time.perf_counter()
    lock = Lockfile.from_document(doc, file=str(path), verify=True)
    lock.path = str(path)
    t_doc = time.perf_counter() - t0
    t0 = time.perf_counter()
    digest({k: v for k, v in doc.items() if k != "lock-digest"})
    t_verify = time.perf_counter() - t0
    del doc
    assert len(lock.index) == n_cells, (len(lock.index), n_cells)

    # random cells; how many are timed is sized to a time budget (per_call_ns)
    qs = sample_queries(lock, 2000)
    keys = [CellKey(ph, "bf16", hw.backend, hw.arch, hw.device_class) for hw, ph in qs]
    index = lock.index
    tuple_dict = {(k.phase, k.precision, k.backend, k.arch, k.device_class): e for k, e in index.items()}
    tkeys = [(k.phase, k.precision, k.backend, k.arch, k.device_class) for k in keys]

    def run_resolve(items):  # warm: a repeated question is answered from the lock's decision cache
        for hw, ph in items:
            resolve(lock, hardware=hw, phase=ph)

    def run_resolve_cold(items):  # cold: every decision computed (cached decisions dropped before each round)
        lock.cache.decisions.clear()
        for hw, ph in items:
            resolve(lock, hardware=hw, phase=ph)

    def run_dict(items):
        get = index.get
        for k in items:
            get(k)

    def run_tuple_dict(items):
        get = tuple_dict.get
        for k in items:
            get(k)

    # sanity: every sampled decision is a route (each cell holds one certified receipt)
    d = resolve(lock, hardware=qs[0][0], phase=qs[0][1])
    assert d.decision == "route" and len(d.reasons) == len(ROUTES) - 1, d
    ns_cold, _ = per_call_ns(run_resolve_cold, qs, budget=1.5)
    ns_resolve, n_q = per_call_ns(run_resolve, qs, budget=1.5)
    ns_dict, _ = per_call_ns(run_dict, keys * 100, budget=0.2)
    ns_tdict, _ = per_call_ns(run_tuple_dict, tkeys * 100, budget=0.2)
    cli_res = run_cli(proj, cli_hardware(n_cells)) if cli else None
    results[n_cells] = {"build": t_build, "render": t_render, "bytes": len(data), "toml": t_toml, "tomllib": t_tomllib, "doc": t_doc,
                        "verify": t_verify, "cli": cli_res, "ns_resolve": ns_resolve, "ns_cold": ns_cold, "ns_dict": ns_dict,
                        "ns_tdict": ns_tdict, "queries": n_q, "receipts": len(lock.receipts), "lock": lock, "qs": qs}
    read = (f"Lockfile.read {t_toml + t_doc:6.2f}s (rtoml {t_toml:.3f}s [tomllib {t_tomllib:.3f}s, "
            f"{t_tomllib / t_toml:.1f}x] + from_document {t_doc:.2f}s"
            if t_toml is not None else f"from_document {t_doc:6.2f}s (in-memory document; the TOML read: see the CLI line")
    print(f"  {n_cells:>7} cells: built {t_build:6.2f}s, rendered {t_render:6.2f}s ({len(data) / 1e6:6.1f} MB), "
          f"{read}; lock-digest verify alone {t_verify:.2f}s); resolve {ns_resolve / 1e3:,.1f} us/decision "
          f"({n_q} cells timed)" + (f"; `frt resolve` {cli_res[0]:.2f}s wall" if cli_res else ""), flush=True)


def profile_resolve(lock, qs, n) -> str:
    pr = cProfile.Profile()
    pr.enable()
    for hw, ph in qs[:n]:
        resolve(lock, hardware=hw, phase=ph)
    pr.disable()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).strip_dirs().sort_stats("tottime").print_stats(8)
    lines = [ln for ln in s.getvalue().splitlines() if ln.strip()]
    start = next(i for i, ln in enumerate(lines) if ln.lstrip().startswith("ncalls"))
    return "\n".join(lines[start:start + 9])


def cli_wall(args: list[str], runs: int = 3) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FRT_", "HF_", "KERNELS_"))}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "frt_dist.cli", *args], env=env, capture_output=True, timeout=120)
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    ap.add_argument("--keep", metavar="DIR", help="keep the synthetic projects here")
    ap.add_argument("--no-cli", action="store_true", help="skip the `frt resolve` subprocess runs")
    ap.add_argument("--full-read", action="store_true",
                    help="also read the 100k lockfile's TOML in this process (by default the "
                         "CLI run measures that read and this process hands from_document the identical document)")
    args = ap.parse_args()
    t_all = time.perf_counter()
    print(f"bench_resolve: python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} cpu(s); "
          f"{len(PHASES)} phases x N/4 device classes x 1 precision, {len(ROUTES)} routes, 1 receipt per cell")
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="frt-bench-resolve-"))
    work.mkdir(parents=True, exist_ok=True)
    results: dict = {}
    big = max(args.sizes)
    try:
        for n in args.sizes:
            bench_size(n, work, results, parse_toml=args.full_read or n < 100000, cli=not args.no_cli)
        base = results[args.sizes[0]]["ns_resolve"]
        print()
        print(f"{'cells':>8} {'receipts':>9} {'resolve ns/dec':>15} {'dict.get ns':>12} {'tuple-dict ns':>14} "
              f"{'ratio':>9} {'flatness':>9} {'cold ns/dec':>12} {'cold ratio':>10}")
        for n in args.sizes:
            r = results[n]
            print(f"{n:>8} {r['receipts']:>9} {r['ns_resolve']:>15,.0f} {r['ns_dict']:>12.1f} {r['ns_tdict']:>14.1f} "
                  f"{r['ns_resolve'] / r['ns_dict']:>8,.0f}x {r['ns_resolve'] / base:>8.2f}x "
                  f"{r['ns_cold']:>12,.0f} {r['ns_cold'] / r['ns_dict']:>9,.0f}x")
        print("  resolve = a decision asked again (served from the lock's decision cache); cold = computed every time;")
        print("  ratio = resolve / dict.get of the same CellKey in the lock's index (per call, loop included);")
        print("  tuple-dict = dict.get of a plain 5-tuple key; flatness = resolve ns at this size / at the smallest size")
        worst = max(results[n]["ns_resolve"] / results[n]["ns_dict"] for n in args.sizes)
        if worst > 10:
            print()
            print(f"resolve is up to {worst:,.0f}x a dict lookup (target: within 10x). Profiles (own time):")
            for n in sorted({min(args.sizes), big}):
                r = results[n]
                k = max(2, min(300, int(1.5e9 / r["ns_resolve"])))
                print(f"-- {n} cells, {k} decisions under cProfile:")
                print(profile_resolve(r["lock"], r["qs"], k))
        if not args.no_cli:
            print()
            t_ver = cli_wall(["--version"])
            print(f"`frt --version` (interpreter start + frt_dist.cli.main import): {t_ver * 1000:.0f} ms")
            for n in args.sizes:
                r = results[n]
                wall, rc, out = r["cli"]
                print(f"`frt resolve --model {MODEL} --arch A --device-class D --software ... --json`, {n:>6} cells "
                      f"({r['bytes'] / 1e6:.1f} MB lockfile): {wall:7.2f} s wall, exit {rc}")
                if rc != 0:
                    print("   " + out[-600:].replace("\n", "\n   "))
            print("  of which reading the lockfile (measured in-process above): " + "; ".join(
                f"{n}: {results[n]['toml'] + results[n]['doc']:.2f} s" if results[n]["toml"] is not None else
                f"{n}: from_document {results[n]['doc']:.2f} s + the TOML read (the rest of the wall time)"
                for n in args.sizes))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(f"\ntotal bench wall time {time.perf_counter() - t_all:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
