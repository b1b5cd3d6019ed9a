"""16 concurrent node processes load a model through the object store (a real
moto server) while a publisher adds a newer lock and its new objects to the same prefix. Every
node succeeds with its own lock's bytes (each imported file hashed against the node's lock), none
imports anything unverified, and the 16 nodes share one verified store: the per-entry fetch lock
makes them fetch each object once, and the entries they import from are whole."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from helpers.factories import tiny_project
from helpers.frt import frt_process
from helpers.paths import HELPERS

pytestmark = [pytest.mark.skipif(not hasattr(os, "fork"), reason="the node runner forks"),
              pytest.mark.usefixtures("fresh_loader"), pytest.mark.subprocess, pytest.mark.slow]

HW = {"arch": "x86_64", "device_class": "test-cpu", "backend": "cpu", "software": {"torch": "2.13"}}
V2_SCALE = '''"""tiny test kernel: scale, release 2 (twice the old answer, so a node shows which bytes it runs)."""


def scale(x, w):
    return x * w * 2


def scale_out(x, w, out):
    return out.copy_(x * w * 2)
'''
N = 16


def _run_nodes(tmp_path, nodes, *, before_go=None) -> tuple[dict, list[dict], object]:
    spec = tmp_path / f"spec-{time.monotonic_ns()}.json"
    out = tmp_path / f"out-{time.monotonic_ns()}"
    spec.write_text(json.dumps({"nodes": nodes, "out": str(out)}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "FRT_", "KERNELS_"))}
    env.update(PYTHONDONTWRITEBYTECODE="1", HF_HUB_OFFLINE="1")
    proc = subprocess.Popen([sys.executable, str(HELPERS / "fleetnodes.py"), str(spec)],
                            env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
    proc.stdin.write("go\n")
    proc.stdin.flush()
    side = before_go() if before_go else None  # e.g. the publisher, started as the nodes start
    stdout, stderr = proc.communicate(timeout=120)
    summary = json.loads(stdout.strip().splitlines()[-1])
    docs = [json.loads((out / f"{i}.json").read_text()) for i in range(len(nodes))]
    return summary, docs, side


def test_16_nodes_load_through_the_store_while_a_newer_lock_is_published(tmp_path, s3, bucket):
    v1 = tiny_project(tmp_path, "v1")
    v1.lock(receipts=[("fast", "decode"), ("fast", "prefill")])
    url = f"s3://{bucket}/fleet"
    assert frt_process(["mirror", url, "--variant", "torch-cpu"], cwd=v1.root).returncode == 0
    v2 = v1.copy_to(tmp_path / "v2")  # the next release: t-org/scale changes, t-org/norm does not
    (v2.root / "packages/scale/build/torch-cpu").rename(tmp_path / "old-scale")
    from helpers.factories import write_package

    write_package(v2.root / "packages/scale", "scale", source=V2_SCALE)
    v2.lock(receipts=[("fast", "decode"), ("fast", "prefill")])
    aws = {k: v for k, v in os.environ.items() if k.startswith("AWS_")} | {"FRT_STORE_TIMEOUT": "10"}
    store = tmp_path / "shared-store"  # one verified store for all 16: they must not trip over each other
    check = [["act", "decode", 2, 8]]

    published = tmp_path / "publisher-started"  # every node, once started, waits for it before it loads

    def node(lock, i, **extra):
        return {"cwd": str(tmp_path), "model": "tiny", "lockfile": str(lock), "mirror": url, "hardware": HW,
                "check": check, "env": {**aws, "FRT_STORE": str(store), "XDG_CACHE_HOME": str(tmp_path / f"c{i}")},
                **extra}

    def publish():
        p = subprocess.Popen([sys.executable, "-m", "frt_dist.cli", "mirror", url, "--variant", "torch-cpu"],
                             cwd=v2.root, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        published.write_bytes(b"")
        return p

    summary, docs, pub = _run_nodes(tmp_path, [node(v1.lock_path, i, wait_for=str(published)) for i in range(N)],
                                    before_go=publish)
    pub_out, pub_err = pub.communicate(timeout=60)
    assert pub.returncode == 0, pub_err
    assert "2 object(s) uploaded, 2 already present" in pub_out  # the new scale files and metadata only
    failed = [d for d in docs if not d["ok"]]
    assert not failed and summary["codes"] == [0] * N, failed[:2]
    for d in docs:
        assert d["bad_files"] == [] and d["sums"] == {"act/decode": 32.0}  # v1's bytes: x * w
        assert {r: p["location"] for r, p in d["packages"].items()} == {"t-org/scale": url, "t-org/norm": url}
        assert d["packages"]["t-org/scale"]["revision"] == v1.lock().packages["t-org/scale"].revision
    # one shared store: each of the 4 objects was fetched once in all (the fetch lock), the others waited
    assert sum(d["stats"]["objects"] for d in docs) == 4 and sum(d["stats"]["entries"] for d in docs) == 2
    assert sum(d["stats"]["warm"] for d in docs) == 2 * N - 2
    assert not [p for p in store.iterdir() if p.name.startswith((".tmp-", ".trash-"))]
    # the publisher started while the nodes loaded: each node was running, and loaded only after it started
    assert [d.get("waited_for") for d in docs] == [str(published)] * N
    # the newer lock's nodes, after the publish: its bytes (x * w * 2), its new objects only
    summary, docs, _ = _run_nodes(tmp_path, [node(v2.lock_path, N + i) for i in range(2)])
    assert summary["codes"] == [0, 0], docs
    assert all(d["sums"] == {"act/decode": 64.0} and d["bad_files"] == [] for d in docs)
    assert sum(d["stats"]["objects"] for d in docs) == 2  # norm's entry was already in the store
