"""Which S3 client for frt's object-store layer (issue 18 item 4): boto3 vs obstore, against a
local moto server (tests/helpers/s3server.py), in one run so the numbers are ratios of the same load.

    PYTHONPATH=$PWD .venv/bin/python bench/bench_objstore_clients.py [--big-mb 256] [--small 200]

For each client: upload then download one big object (streamed from / to a file) and N small
objects (4 KiB, a thread pool of 8), wall seconds, best of --repeat runs. moto keeps objects in
memory and is itself the bottleneck, so the ratio between clients is what this shows.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from helpers.s3server import FAKE_KEY_ID, FAKE_SECRET, S3Server


def boto3_ops(url):
    import boto3
    from boto3.s3.transfer import TransferConfig
    from botocore.config import Config

    c = boto3.client("s3", endpoint_url=url, aws_access_key_id=FAKE_KEY_ID, aws_secret_access_key=FAKE_SECRET,
                     region_name="us-east-1", config=Config(max_pool_connections=16))
    tc = TransferConfig(multipart_threshold=64 << 20, multipart_chunksize=16 << 20, max_concurrency=8)
    return {"up": lambda k, p: c.upload_file(str(p), "frt-bench", k, Config=tc),
            "down": lambda k, p: c.download_file("frt-bench", k, str(p), Config=tc),
            "stream": lambda k, p: _stream(c, k, p),
            "put": lambda k, data: c.put_object(Bucket="frt-bench", Key=k, Body=data),
            "get": lambda k: c.get_object(Bucket="frt-bench", Key=k)["Body"].read()}


def _stream(c, k, p):
    """What frt_dist.distribution.objstore.S3Store.get does: one GET, streamed in 1 MiB chunks to a file."""
    with open(p, "wb") as f:
        for chunk in c.get_object(Bucket="frt-bench", Key=k)["Body"].iter_chunks(1 << 20):
            f.write(chunk)


def obstore_ops(url):
    import obstore
    from obstore.store import S3Store

    s = S3Store("frt-bench", endpoint=url, access_key_id=FAKE_KEY_ID, secret_access_key=FAKE_SECRET, region="us-east-1",
                client_options={"allow_http": True})

    def down(k, p):
        with open(p, "wb") as f:
            for chunk in obstore.get(s, k).stream(min_chunk_size=8 << 20):
                f.write(chunk)

    return {"up": lambda k, p: obstore.put(s, k, Path(p), chunk_size=16 << 20, max_concurrency=8),
            "down": down, "put": lambda k, data: obstore.put(s, k, data),
            "get": lambda k: bytes(obstore.get(s, k).bytes())}


def run(name, ops, big: Path, n_small: int, tmp: Path) -> dict:
    out = {}
    t = time.perf_counter()
    ops["up"](f"{name}/big", big)
    out["big up"] = time.perf_counter() - t
    t = time.perf_counter()
    ops["down"](f"{name}/big", tmp / f"{name}.down")
    out["big down"] = time.perf_counter() - t
    assert (tmp / f"{name}.down").stat().st_size == big.stat().st_size
    if "stream" in ops:
        t = time.perf_counter()
        ops["stream"](f"{name}/big", tmp / f"{name}.down")
        out["big down, one GET streamed"] = time.perf_counter() - t
    data = os.urandom(4096)
    with ThreadPoolExecutor(8) as pool:
        t = time.perf_counter()
        list(pool.map(lambda i: ops["put"](f"{name}/s/{i}", data), range(n_small)))
        out["small up"] = time.perf_counter() - t
        t = time.perf_counter()
        got = list(pool.map(lambda i: ops["get"](f"{name}/s/{i}"), range(n_small)))
        out["small down"] = time.perf_counter() - t
    assert all(g == data for g in got)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--big-mb", type=int, default=256)
    ap.add_argument("--small", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=2)
    a = ap.parse_args()
    srv = S3Server().start()
    try:
        srv.client().create_bucket(Bucket="frt-bench")
        with tempfile.TemporaryDirectory() as d:
            tmp = Path(d)
            big = tmp / "big"
            with open(big, "wb") as f:
                for _ in range(a.big_mb):
                    f.write(os.urandom(1 << 20))
            best: dict[str, dict] = {}
            for _ in range(a.repeat):
                for name, make in (("boto3", boto3_ops), ("obstore", obstore_ops)):
                    r = run(name, make(srv.url), big, a.small, tmp)
                    srv.reset()
                    srv.client().create_bucket(Bucket="frt-bench")
                    best[name] = {k: min(v, best.get(name, {}).get(k, v)) for k, v in r.items()}
    finally:
        srv.stop()
    print(f"| operation ({a.big_mb} MB object, {a.small} x 4 KiB) | boto3 s | obstore s | boto3 / obstore |")
    print("|---|---:|---:|---:|")
    for k in best["boto3"]:
        b, o = best["boto3"][k], best["obstore"].get(k, best["obstore"]["big down"])
        print(f"| {k} | {b:.2f} | {o:.2f} | {b / o:.2f}x |")


if __name__ == "__main__":
    main()
