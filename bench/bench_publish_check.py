"""What it costs a publish to trust an object already in the store (issue 26 item 5), against a local
moto S3 server, in one run:

    PYTHONPATH=$PWD .venv/bin/python bench/bench_publish_check.py [--small 64x1] [--big 4x64] [--rounds 3]

Each workload is N objects of M MiB (random bytes), put once with their SHA-256 checksum and once
without (other keys). Then every object of a workload is checked the way ``frt mirror s3://…``
checks a present object (``frt_dist.distribution.fleet._check_present``, 8 at once as publish runs them):

- ``size only``: a HEAD and a size comparison (the rule before: it trusts a same-size plant);
- ``checksum``: a HEAD with ``ChecksumMode=ENABLED``, the SHA-256 the server keeps compared with
  the file's (what publish does now for objects it put);
- ``download+hash``: the fallback for an object the server keeps no SHA-256 for (put without one,
  a server that ignores the header, a multipart object): the object is downloaded and hashed.

Per object (ms) and per GB of objects checked (s/GB), best of the rounds, with the ratio to size
only. moto is one Python process on the same 2 cores: its HEAD is much slower and its GET much
faster than a real store across a network, so only the order of magnitude between the rows holds.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.dont_write_bytecode = True

from helpers.s3server import S3Server


class _Item:
    """What ``_check_present`` reads of a locked file."""

    algorithm = "sha256"

    def __init__(self, data: bytes):
        self.expected = "sha256:" + hashlib.sha256(data).hexdigest()

    def computed(self, hashes) -> str:
        return "sha256:" + hashes["sha256"].hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--small", default="64x1", help="N x MiB")
    ap.add_argument("--big", default="4x64", help="N x MiB")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    srv = S3Server().start()
    try:
        for k in [k for k in os.environ if k.startswith("AWS_")]:
            del os.environ[k]
        os.environ.update(srv.env())
        srv.client().create_bucket(Bucket="frt-bench")
        from frt_dist.distribution.fleet import _check_present
        from frt_dist.distribution.objstore import open_store

        store = open_store("s3://frt-bench/p")
        rows = []
        for label, spec in (("small", args.small), ("big", args.big)):
            n, mib = (int(x) for x in spec.split("x"))
            objs = []
            for i in range(n):
                data = os.urandom(mib << 20)
                sha = base64.b64encode(hashlib.sha256(data).digest()).decode()
                hexd = hashlib.sha256(data).hexdigest()
                tmp = ROOT / f".bench-obj-{i}"
                tmp.write_bytes(data)
                store.put_file(f"sha256/{hexd}", tmp, sha256=sha)  # with its checksum (what publish puts)
                store.put_file(f"sha512/{hexd}", tmp)  # the same bytes, no checksum kept
                tmp.unlink()
                objs.append((hexd, len(data), sha, _Item(data)))
            total = sum(o[1] for o in objs)

            def size_only(o):
                assert store.head(f"sha256/{o[0]}") == o[1]

            def checksum(o):
                assert _check_present(store, f"sha256/{o[0]}", o[1], o[2], o[3]) == ("present", "checksum")

            def download(o):
                assert _check_present(store, f"sha512/{o[0]}", o[1], o[2], o[3]) == ("present", "download")

            best = {}
            for r in range(args.rounds):
                order = [("size only", size_only), ("checksum", checksum), ("download+hash", download)]
                for name, fn in order if r % 2 == 0 else order[::-1]:
                    t0 = time.perf_counter()
                    with ThreadPoolExecutor(8) as pool:
                        list(pool.map(fn, objs))
                    best[name] = min(best.get(name, 1e9), time.perf_counter() - t0)
            for name in ("size only", "checksum", "download+hash"):
                t = best[name]
                rows.append((f"{label} ({n} x {mib} MiB)", name, 1e3 * t / n, t / (total / 1e9), t / best["size only"]))
        print("| objects | check | ms per object | s per GB | vs size only |")
        print("|---|---|---:|---:|---:|")
        for wl, name, per, per_gb, ratio in rows:
            print(f"| {wl} | {name} | {per:.1f} | {per_gb:.2f} | {ratio:.2f}x |")
    finally:
        srv.stop()


if __name__ == "__main__":
    main()
