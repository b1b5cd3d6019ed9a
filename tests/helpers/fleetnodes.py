"""Many node processes loading a model through an object-store mirror at once: the 16-node test
(tests/test_fleet_nodes.py) and the fleet benchmark (bench/bench_fleet.py).

    python tests/helpers/fleetnodes.py SPEC.json

SPEC: ``{"nodes": [{"env": {...}, "cwd": DIR, "model": M, "lockfile": PATH|null, "mirror": URL|null,
"hardware": {Hardware kwargs}, "check": [[seam, phase, rows, width], ...], "mode": "load"|"prepare"}],
"out": DIR}``. ``prepare`` stops where ``load`` would import (the benchmark's fetch-and-verify part).
A node with ``"wait_for": PATH`` waits, once started, until that file exists (bounded), so a test can
start something else while every node is known to be running, without reading a clock.

The parent imports what every node imports anyway (torch, kernels, boto3, obstore, frt_dist), prints
``ready`` and waits for a line on stdin, then **forks one real process per node** at once: each
child applies its environment, runs ``frt_dist.load`` (resolve, fetch the bound variants from the
store into its verified store, verify, import, smoke), checks that every file of every package it
imported hashes to its own lock's digest, calls each ``check`` entry on ones × twos, and writes
``<out>/<i>.json``: ``ok``, ``error``, the seconds it took, what ``frt_dist.loader.remote`` fetched,
the packages (source, location, store path) and the entry sums. Forking after the imports keeps
16 or 32 nodes within a 2-core machine's means: the nodes share no state but the pages of
modules imported before the fork; the store, the client and the load are each node's own.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import sys
import time


def _check_files(lock, plan) -> list[str]:
    """Every file of every imported package's store entry against the node's own lock."""
    bad = []
    for repo, pkg in plan.packages.items():
        lv = lock.packages[repo].variants[pkg.variant]
        root = pkg.store_path
        seen = set()
        for dirpath, _dirs, files in os.walk(root):
            for n in files:
                rel = os.path.relpath(os.path.join(dirpath, n), root).replace(os.sep, "/")
                seen.add(rel)
                data = open(os.path.join(dirpath, n), "rb").read()
                if rel == "metadata.json":
                    ok = "sha256:" + hashlib.sha256(data).hexdigest() == lv.metadata_sha256
                else:
                    want = lv.files.get(rel)
                    ok = want is not None and base64.b64encode(hashlib.new(lv.algorithm, data).digest()).decode() == want
                if not ok:
                    bad.append(f"{repo} {rel}")
        missing = (set(lv.files) | {"metadata.json"}) - seen
        bad += [f"{repo} {rel} (missing)" for rel in sorted(missing)]
    return bad


class _Done(Exception):
    pass


def _prepare(node: dict, hw) -> None:
    """What ``frt_dist.load`` does before it imports: resolve, then every bound package's
    variant fetched and verified into the store (``prepare_locked``), nothing imported."""
    from frt_dist.loader import CheckBatch, prepare_locked
    from frt_dist.routes.resolver import refusal_error, resolve_all
    from frt_dist.serve.load import _binds, find_lockfile

    lock, root = find_lockfile(node["model"], node.get("lockfile"))
    decisions = resolve_all(lock, hardware=hw, precision=None, fallback="refuse", accept=("certified_fast",))
    refused = refusal_error(node["model"], decisions)
    if refused is not None:
        raise refused
    batch = CheckBatch()
    binds = sorted({(b.repo, b.variant) for b in _binds(lock, decisions)})
    mirror = node.get("mirror")
    if node.get("sync_dir"):  # the other design: fill a local mirror from the store, then load from it
        from frt_dist.distribution.mirror import mirror_lock
        from frt_dist.distribution.objstore import open_store

        with open_store(mirror) as store:
            mirror_lock(lock, node["sync_dir"], variants=sorted({v for _, v in binds}), source=store, root=root)
        mirror = node["sync_dir"]
    for repo, variant in binds:
        prepare_locked(lock, repo, variant, mirror=mirror, hardware=hw, root=root, batch=batch)


def _wait_for(path: str, doc: dict, limit_s: float = 60.0) -> None:
    """Poll (bounded) until ``path`` exists; ``doc["waited_for"]`` says it did."""
    deadline = time.monotonic() + limit_s
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear within {limit_s:.0f} s")
        time.sleep(0.01)
    doc["waited_for"] = path


def _node(i: int, node: dict, out: str) -> int:
    t0 = time.perf_counter()
    doc = {"i": i, "ok": False, "start_epoch": time.time()}
    try:
        os.chdir(node.get("cwd") or os.getcwd())
        os.environ.update(node.get("env") or {})
        import frt_dist
        from frt_dist.loader import remote
        from frt_dist.serve.load import find_lockfile
        from frt_dist.system.hardware import Hardware

        hw = Hardware(**node["hardware"])
        if node.get("wait_for"):  # started, then held until the test says go on (a file appears)
            _wait_for(node["wait_for"], doc)
        if node.get("mode") == "prepare":  # load's first half: resolve, fetch, verify into the store; no import
            _prepare(node, hw)
            doc["stats"] = remote.stats()
            doc["ok"] = True
            raise _Done
        plan = frt_dist.load(node["model"], hardware=hw, lockfile=node.get("lockfile"), mirror=node.get("mirror"))
        doc["load_s"] = time.perf_counter() - t0
        lock, _ = find_lockfile(node["model"], node.get("lockfile"))
        # the test's independent check of what was imported (the benchmark turns it off: it is not part of a load)
        doc["bad_files"] = _check_files(lock, plan) if node.get("verify_files", True) else []
        doc["packages"] = {r: {"source": p.source, "location": p.location, "store": p.store_path,
                               "variant": p.variant, "revision": p.revision} for r, p in plan.packages.items()}
        sums = {}
        if node.get("check"):
            import torch

            for seam, phase, rows, width in node["check"]:
                fn = plan.entry(seam, phase)
                sums[f"{seam}/{phase}"] = float(fn(torch.ones(rows, width), torch.full((width,), 2.0)).sum())
        doc["sums"] = sums
        doc["stats"] = remote.stats()
        doc["ok"] = not doc["bad_files"]
    except _Done:
        pass
    except BaseException as exc:  # reported to the parent
        doc["error"] = f"{type(exc).__name__}: {exc}"
        doc["exit_code"] = getattr(exc, "exit_code", None)
        try:
            from frt_dist.loader import remote

            doc["stats"] = remote.stats()
        except Exception:
            pass
    doc["t"] = time.perf_counter() - t0
    doc["end_epoch"] = time.time()
    with open(os.path.join(out, f"{i}.json"), "w") as fh:
        json.dump(doc, fh)
    return 0 if doc["ok"] else 1


def main(argv: list[str]) -> int:
    spec = json.load(open(argv[0]))
    if spec.get("preimport_client", True):  # off: each node imports its S3 client itself, as a fresh process does
        import boto3  # noqa: F401 - what every node needs: imported once, before the fork
        try:  # the read client when the environment allows it (frt_dist.distribution.objstore.read_client)
            import obstore  # noqa: F401
        except ImportError:  # pragma: no cover
            pass
    import torch  # noqa: F401

    import frt_dist
    import frt_dist.loader.remote
    import frt_dist.serve.load  # noqa: F401
    from frt_dist.loader import _kernels_adapter

    _kernels_adapter.read_metadata  # noqa: B018
    try:
        import kernels  # noqa: F401
    except ImportError:  # pragma: no cover
        pass
    os.makedirs(spec["out"], exist_ok=True)
    print("ready", flush=True)
    sys.stdin.readline()
    t0 = time.perf_counter()
    pids = {}
    for i, node in enumerate(spec["nodes"]):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = _node(i, node, spec["out"])
            finally:
                os._exit(code)
        pids[pid] = i
    codes = {}
    while pids:
        pid, status = os.wait()
        codes[pids.pop(pid)] = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    print(json.dumps({"wall_s": wall, "codes": [codes[i] for i in sorted(codes)]}), flush=True)
    return 0 if all(c == 0 for c in codes.values()) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
