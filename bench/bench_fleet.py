"""Fleet loading through an object store (issue 18 item 7): N node processes each load a model
through a local moto S3 server, against a plain parallel copy of the same objects by ``s5cmd``
run as the same N processes, in the same run, so the numbers are ratios of the same load.

    PYTHONPATH=$PWD .venv/bin/python bench/bench_fleet.py [--nodes 8,32] [--big-mb 256] [--rounds 1]
                                                        [--workloads demo,big] [--design] [--boto3]

Workloads: ``demo`` is this repository's demo model (``lockfiles/demo-decoder.lock``, the machine of
its locked cell), ``big`` a tiny model whose ``t-org/scale`` variant carries a ``--big-mb`` file
(random bytes, digested like any other). Each is published once (``frt mirror s3://…``).

For each workload and N, in one run (order alternated between rounds):

- ``s5cmd``: N ``s5cmd run`` processes at once, each copying exactly the objects its node needs
  (``cp -c 1 -p 1024``: one GET per object, as frt does; s5cmd's default ranged parts make moto
  read the whole object once per part), into a folder of its own; nothing is verified.
- ``frt fetch+verify``: N node processes (tests/helpers/fleetnodes.py, forked after the shared imports)
  each doing what ``frt_dist.load`` does before it imports: resolve, then fetch the bound variants'
  locked files into a verified store of its own, hashing and checking every byte.
- ``frt load``: the whole ``frt_dist.load`` (also import and the bind-time smoke launches).
- ``--boto3``: fetch+verify again with ``FRT_STORE_CLIENT=boto3`` (the read client before obstore).

Wall time is from the moment the N processes are released to the last one's exit. Bytes per node
are counted by frt's fetch code (``frt_dist.loader.remote.stats``) and compared with what the
node's variants need (the sizes of the objects its lock names for them). ``--design`` adds one
node of the ``big`` workload loaded two ways: straight into the verified store (what frt does)
and through a local mirror first (``frt mirror DIR --from URL``, then a load from DIR).

Every process reads frt_dist's modules compiled (``PYTHONPYCACHEPREFIX`` in the run's folder, filled
once by ``compileall``), as from an installed package.

The moto server is one Python process on the same 2 cores as the nodes: for both sides it is
likely the bottleneck, so only the ratio means anything.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.dont_write_bytecode = True

from helpers.s3server import S3Server

BUCKET = "frt-bench"
S5CMD = str(Path(sys.executable).parent / "s5cmd")
FRESH_CLIENT = False  # --fresh-client: nodes import their S3 client after the fork, as separate processes would
TINY_HW = {"arch": "x86_64", "device_class": "test-cpu", "backend": "cpu", "software": {"torch": "2.13"}}


def _rm(path: Path) -> None:
    """Remove a tree, store entries (read-only) included."""
    if not path.exists():
        return
    for dirpath, dirs, _files in os.walk(path):
        for d in dirs:
            try:
                os.chmod(os.path.join(dirpath, d), 0o700)
            except OSError:
                pass
    shutil.rmtree(path, ignore_errors=True)


def _frt(args, cwd, env):
    r = subprocess.run([sys.executable, "-m", "frt_dist.cli", *args], cwd=cwd, env=env, capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"frt {' '.join(args)} failed:\n{r.stderr}")
    return r.stdout


def _needed(lock, hw_kwargs, prefix: str, sizes: dict) -> dict:
    """{object key under the bucket: size} of what one node loads: the variants the resolved routes bind."""
    from frt_dist.distribution.sources import locked_files
    from frt_dist.routes.resolver import resolve_all
    from frt_dist.serve.load import _binds
    from frt_dist.system.hardware import Hardware

    decisions = resolve_all(lock, hardware=Hardware(**hw_kwargs), precision=None, fallback="refuse",
                            accept=("certified_fast",))
    out = {}
    for repo, variant in sorted({(b.repo, b.variant) for b in _binds(lock, decisions)}):
        for item in locked_files(lock.packages[repo], variant):
            key = f"{prefix}/{item.object_key}"
            out[key] = sizes[key]
    return out


def _workloads(names, work: Path, env: dict, big_mb: int) -> dict:
    from frt_dist.distribution.mirror import cell_machines
    from frt_dist.documents.lockfile import Lockfile
    from helpers.factories import NORM_SRC, SCALE_SRC, tiny_project

    out = {}
    if "demo" in names:
        lock = Lockfile.read(ROOT / "lockfiles" / "demo-decoder.lock")
        hw = cell_machines(lock)[0]
        hw_kwargs = {"arch": hw.arch, "device_class": hw.device_class, "backend": hw.backend, "cpu": hw.cpu,
                     "os": hw.os, "software": dict(hw.software)}
        _frt(["mirror", f"s3://{BUCKET}/demo", "--cells"], ROOT, env)
        out["demo"] = {"cwd": str(ROOT), "model": "demo-decoder", "lockfile": str(lock.path), "lock": lock,
                       "prefix": "demo", "hardware": hw_kwargs, "label": "demo model (demo-decoder)"}
    if "big" in names:
        big = os.urandom(big_mb << 20)
        tp = tiny_project(work, "big", packages={
            "scale": {"name": "scale", "module": {"__init__.py": SCALE_SRC, "weights.bin": big}},
            "norm": {"name": "norm", "source": NORM_SRC}})
        del big
        lock = tp.lock(receipts=[("fast", "decode"), ("fast", "prefill")])
        _frt(["mirror", f"s3://{BUCKET}/big", "--variant", "torch-cpu"], tp.root, env)
        out["big"] = {"cwd": str(tp.root), "model": "tiny", "lockfile": str(tp.lock_path), "lock": lock,
                      "prefix": "big", "hardware": TINY_HW, "label": f"{big_mb} MB package"}
    return out


def _sizes(s3) -> dict:
    c = s3.client()
    out, token = {}, None
    while True:
        kw = {"Bucket": BUCKET, **({"ContinuationToken": token} if token else {})}
        r = c.list_objects_v2(**kw)
        out.update({o["Key"]: o["Size"] for o in r.get("Contents", [])})
        if not r.get("IsTruncated"):
            return out
        token = r["NextContinuationToken"]


def run_s5cmd(n: int, needed: dict, work: Path, env: dict, url: str) -> dict:
    dirs, procs = [], []
    cmds = []
    for i in range(n):
        d = work / f"s5-{i}"
        d.mkdir(parents=True)
        f = work / f"s5-{i}.txt"
        f.write_text("".join(f"cp -c 1 -p 1024 s3://{BUCKET}/{k} {d}/{k.rsplit('/', 1)[1]}\n" for k in needed))
        dirs.append(d)
        cmds.append([S5CMD, "--endpoint-url", url, "--log", "error", "run", str(f)])
    t0 = time.perf_counter()
    procs = [subprocess.Popen(c, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for c in cmds]
    errs = [p.communicate()[1] for p in procs]
    wall = time.perf_counter() - t0
    codes = [p.returncode for p in procs]
    got = [sum(f.stat().st_size for f in d.iterdir()) for d in dirs]
    for d in dirs:
        _rm(d)
    if any(codes):
        raise SystemExit(f"s5cmd failed: {codes} {errs[0][:500]!r}")
    return {"wall_s": wall, "bytes": got}


def run_nodes(n: int, w: dict, work: Path, env: dict, mode: str, *, sync: bool = False, client: str = "auto",
              mirror: str | None = None) -> dict:
    out = work / f"nodes-{mode}-{time.monotonic_ns()}"
    stores = [work / f"store-{mode}-{i}" for i in range(n)]
    nodes = []
    for i in range(n):
        node_env = {**env, "FRT_STORE": str(stores[i]), "XDG_CACHE_HOME": str(work / f"xdg-{i}"),
                    "FRT_STORE_CLIENT": client}
        node = {"cwd": w["cwd"], "model": w["model"], "lockfile": w["lockfile"], "mirror": mirror or f"s3://{BUCKET}/{w['prefix']}",
                "hardware": w["hardware"], "mode": mode if mode != "sync" else "prepare", "env": node_env,
                "verify_files": False}
        if sync:
            node["sync_dir"] = str(work / f"sync-{i}")
        nodes.append(node)
    spec = work / "spec.json"
    spec.write_text(json.dumps({"nodes": nodes, "out": str(out), "preimport_client": not FRESH_CLIENT}))
    penv = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "FRT_", "KERNELS_"))}
    penv.update(env, HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT))
    penv.pop("PYTHONDONTWRITEBYTECODE", None)  # the nodes read the compiled modules (env's PYTHONPYCACHEPREFIX)
    proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "helpers" / "fleetnodes.py"), str(spec)], env=penv,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.stdout.readline().strip() != "ready":
        raise SystemExit(proc.stderr.read())
    proc.stdin.write("go\n")
    proc.stdin.flush()
    stdout, stderr = proc.communicate()
    summary = json.loads(stdout.strip().splitlines()[-1])
    docs = [json.loads((out / f"{i}.json").read_text()) for i in range(n)]
    bad = [d for d in docs if not d.get("ok")]
    for p in [out, *stores, *(work / f"xdg-{i}" for i in range(n)), *(work / f"sync-{i}" for i in range(n))]:
        _rm(p)
    if bad:
        raise SystemExit(f"{len(bad)} node(s) failed: {bad[0]}\n{stderr[-2000:]}")
    return {"wall_s": summary["wall_s"], "bytes": [d["stats"]["bytes"] for d in docs]}


# Each side imports what it needs first, then times only the operation (printed as the last stderr line): the
# ORAS SDK's import alone takes seconds here (jsonschema's format checkers), and frt's CLI start-up is measured
# elsewhere; the whole command's wall time is kept too.
_FRT_OP = ("import json, sys, time\nfrom frt_dist.cli.main import main\nimport frt_dist.distribution.oci\n"
           "t = time.perf_counter(); rc = main(sys.argv[1:])\n"
           "print(json.dumps({'op_s': time.perf_counter() - t}), file=sys.stderr); sys.exit(rc)\n")
_ORAS_OP = ("import json, os, sys, time, oras.client\nc = oras.client.OrasClient(insecure=True)\n"
            "if sys.argv[1] == 'wait': sys.stdout.write('ready\\n'); sys.stdout.flush(); sys.stdin.readline()\n"
            "t = time.perf_counter()\n"
            "if sys.argv[2] == 'pull': c.pull(target=sys.argv[3], outdir=sys.argv[4])\n"
            "else:\n"
            "    os.chdir(sys.argv[4])\n"
            "    files = sorted(os.path.relpath(os.path.join(d, f)) for d, _, fs in os.walk('.') for f in fs)\n"
            "    json.dump({f: {'org.opencontainers.image.title': f} for f in files}, open(sys.argv[5], 'w'))\n"
            "    c.push(target=sys.argv[3], files=files, annotation_file=sys.argv[5], disable_path_validation=True)\n"
            "print(json.dumps({'op_s': time.perf_counter() - t}), file=sys.stderr)\n")


def _timed(cmd, env, cwd=None) -> tuple[float, float, str]:
    """(the operation's own seconds, the whole process's, its stdout)."""
    t0 = time.perf_counter()
    r = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if r.returncode:
        raise SystemExit(f"{' '.join(map(str, cmd[:4]))} failed:\n{r.stderr[-2000:]}")
    return json.loads(r.stderr.strip().splitlines()[-1])["op_s"], wall, r.stdout


def run_registry(work: Path, env: dict, big_mb: int, n: int, rounds: int) -> None:
    """``--registry``: push and pull of the ``big`` workload through a local OCI registry (Debian's
    docker-registry, tests/helpers/ociregistry.py) by frt and by ``oras`` (the ORAS Python SDK, its own
    processes) on the same artefact, each push into an empty registry; then ``n`` nodes at once loading
    from ``oci://…@sha256:…`` (fetch+verify) against ``n`` ``oras pull`` processes at once."""
    from frt_dist.documents.lockfile import Lockfile
    from helpers.factories import NORM_SRC, SCALE_SRC, tiny_project
    from helpers.ociregistry import Registry

    big = os.urandom(big_mb << 20)
    tp = tiny_project(work, "big", packages={
        "scale": {"name": "scale", "module": {"__init__.py": SCALE_SRC, "weights.bin": big}},
        "norm": {"name": "norm", "source": NORM_SRC}})
    del big
    tp.lock(receipts=[("fast", "decode"), ("fast", "prefill")])
    lock = Lockfile.read(tp.lock_path)
    (work / "docker").mkdir()
    env = {**env, "DOCKER_CONFIG": str(work / "docker")}
    w = {"cwd": str(tp.root), "model": "tiny", "lockfile": str(tp.lock_path), "lock": lock, "prefix": "",
         "hardware": TINY_HW}
    best: dict[str, float] = {}
    frt = [sys.executable, "-c", _FRT_OP]

    def keep(what, op, whole=None):
        print(f"registry {what}: {op:.2f} s" + (f" (whole process {whole:.2f} s)" if whole else ""), file=sys.stderr,
              flush=True)
        best[what] = min(best.get(what, op), op)
        if whole:
            best[what + " whole"] = min(best.get(what + " whole", whole), whole)

    for r in range(rounds):
        reg = Registry().start()
        try:
            ref = f"{reg.host}/frt/big"
            op, whole, out = _timed([*frt, "publish", f"oci://{ref}:bench", "--variant", "torch-cpu", "--json"], env,
                                    tp.root)
            keep("frt push", op, whole)
            digest = json.loads(out)["models"][0]["artefact"]["digest"]
            for who in (["frt", "oras"] if r % 2 == 0 else ["oras", "frt"]):
                dest = work / f"pull-{who}"
                if who == "frt":
                    op, whole, _ = _timed([*frt, "mirror", str(dest), "--from", f"oci://{ref}@{digest}", "--variant",
                                           "torch-cpu"], env, tp.root)
                else:
                    op, whole, _ = _timed([sys.executable, "-c", _ORAS_OP, "now", "pull", f"{ref}@{digest}", str(dest)],
                                          env)
                keep(f"{who} pull", op, whole)
            nodes = run_nodes(n, w, work, env, "prepare", mirror=f"oci://{ref}@{digest}")
            keep(f"frt {n} nodes", nodes["wall_s"])
            procs = [subprocess.Popen([sys.executable, "-c", _ORAS_OP, "wait", "pull", f"{ref}@{digest}",
                                       str(work / f"op-{i}")], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True) for i in range(n)]
            for p in procs:  # every process has imported the SDK: release them together
                if p.stdout.readline().strip() != "ready":
                    raise SystemExit(p.stderr.read()[-1000:])
            t0 = time.perf_counter()
            for p in procs:
                p.stdin.write("go\n")
                p.stdin.flush()
            errs = [p.communicate()[1] for p in procs]
            wall = time.perf_counter() - t0
            if any(p.returncode for p in procs):
                raise SystemExit(f"oras pull failed: {errs[0][-1000:]!r}")
            keep(f"oras {n} pulls", wall)
            for i in range(n):
                _rm(work / f"op-{i}")
        finally:
            reg.stop()
        reg2 = Registry().start()  # oras pushes the unpacked artefact (the same files and titles) into an empty registry
        try:
            op, whole, _ = _timed([sys.executable, "-c", _ORAS_OP, "now", "push", f"{reg2.host}/frt/big:bench",
                                   str(work / "pull-oras"), str(work / "annotations.json")], env)
            keep("oras push", op, whole)
        finally:
            reg2.stop()
            _rm(work / "pull-oras")
            _rm(work / "pull-frt")
    print(f"\n| {big_mb} MB package, local registry | frt s | oras s | ratio | whole process: frt s | oras s |")
    print("|---|---:|---:|---:|---:|---:|")
    for label, a, b in (("push (into an empty registry)", "frt push", "oras push"),
                        ("pull (frt: fetch + verify into a mirror folder)", "frt pull", "oras pull"),
                        (f"{n} nodes pulling at once (frt: fetch + verify into each node's store)", f"frt {n} nodes",
                         f"oras {n} pulls")):
        wa, wb = best.get(a + " whole"), best.get(b + " whole")
        tail = f" {wa:.2f} | {wb:.2f} |" if wa else " | |"
        print(f"| {label} | {best[a]:.2f} | {best[b]:.2f} | {best[a] / best[b]:.2f}x |{tail}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", default="8,32")
    ap.add_argument("--big-mb", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--workloads", default="demo,big")
    ap.add_argument("--design", action="store_true")
    ap.add_argument("--boto3", action="store_true",
                    help="also fetch+verify with the boto3 read client (FRT_STORE_CLIENT=boto3): the before column")
    ap.add_argument("--fresh-client", action="store_true",
                    help="nodes import their S3 client themselves (not before the fork), as separate processes do")
    ap.add_argument("--registry", action="store_true",
                    help="only the OCI registry part: push and pull of the big package by frt and by oras, and "
                         "--nodes (first value, default 16) nodes pulling at once")
    args = ap.parse_args()
    if args.registry:
        work = Path(tempfile.mkdtemp(prefix="frt-bench-oci-"))
        try:
            env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "FRT_", "HF_"))}
            env.update(PYTHONPATH=str(ROOT), PYTHONPYCACHEPREFIX=str(work / "pycache"), HF_HUB_OFFLINE="1")
            subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "frt_dist"), str(ROOT / "tests")],
                           env=env, check=True, stdout=subprocess.DEVNULL)
            n = int(args.nodes.split(",")[0]) if args.nodes != "8,32" else 16
            run_registry(work, env, args.big_mb, n, args.rounds)
        finally:
            _rm(work)
        return 0
    global FRESH_CLIENT
    FRESH_CLIENT = args.fresh_client
    ns = [int(x) for x in args.nodes.split(",")]
    work = Path(tempfile.mkdtemp(prefix="frt-bench-fleet-"))
    s3 = S3Server().start()
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        # an installed frt has compiled modules (.pyc); the checkout keeps none, so without this every node
        # would compile frt_dist's modules from source (about 0.1 s of CPU each, 3 s for 32 nodes on 2 cores):
        # they are compiled once, into a cache of the run's own (the checkout is left untouched)
        env.update(s3.env(), PYTHONPATH=str(ROOT), PYTHONPYCACHEPREFIX=str(work / "pycache"))
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "frt_dist"), str(ROOT / "tests")],
                       env=env, check=True, stdout=subprocess.DEVNULL)
        s3.client().create_bucket(Bucket=BUCKET)
        loads = _workloads(args.workloads.split(","), work, env, args.big_mb)
        sizes = _sizes(s3)
        rows = []
        for name, w in loads.items():
            needed = _needed(w["lock"], w["hardware"], w["prefix"], sizes)
            need = sum(needed.values())
            for n in ns:
                best = {}
                for r in range(args.rounds):
                    order = ["s5cmd", "prepare", "load"] + (["prepare-boto3"] if args.boto3 else [])
                    if r % 2:
                        order.reverse()
                    for what in order:
                        if what == "s5cmd":
                            got = run_s5cmd(n, needed, work, env, s3.url)
                        elif what == "prepare-boto3":
                            got = run_nodes(n, w, work, env, "prepare", client="boto3")
                        else:
                            got = run_nodes(n, w, work, env, what)
                        print(f"{name} N={n} round {r + 1} {what}: {got['wall_s']:.2f} s", file=sys.stderr, flush=True)
                        if what not in best or got["wall_s"] < best[what]["wall_s"]:
                            best[what] = got
                excess = max(b - need for b in best["prepare"]["bytes"])
                b3 = best.get("prepare-boto3", {}).get("wall_s")
                rows.append((w["label"], n, need, len(needed), best["s5cmd"]["wall_s"], best["prepare"]["wall_s"],
                             best["load"]["wall_s"], excess, b3))
        print("\n| workload | N | bytes a node needs (objects) | excess bytes fetched per node | s5cmd copy s | "
              "frt fetch+verify s | ratio | frt whole load s | ratio |" + (" boto3 fetch+verify s | ratio |" if args.boto3 else ""))
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---:|---:|" if args.boto3 else ""))
        for label, n, need, k, s5, prep, load, excess, b3 in rows:
            print(f"| {label} | {n} | {need:,} ({k}) | {excess} | {s5:.2f} | {prep:.2f} | {prep / s5:.2f}x | "
                  f"{load:.2f} | {load / s5:.2f}x |" + (f" {b3:.2f} | {b3 / s5:.2f}x |" if b3 else ""))
        if args.design and "big" in loads:
            w = loads["big"]
            direct = run_nodes(1, w, work, env, "prepare")
            synced = run_nodes(1, w, work, env, "sync", sync=True)
            print(f"\ndesign, one node, {w['label']}: straight into the verified store {direct['wall_s']:.2f} s; "
                  f"local mirror first, then load from it {synced['wall_s']:.2f} s "
                  f"({synced['wall_s'] / direct['wall_s']:.2f}x)")
    finally:
        s3.stop()
        _rm(work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
