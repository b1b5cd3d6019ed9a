"""Publish and sync of a 256 MB package through frt vs a plain parallel copy (s5cmd), against a local
moto server, in one run (issue 18; a sanity check of the object-store layer, one node; the N-node
benchmark is item 7's).

    PYTHONPATH=$PWD .venv/bin/python bench/bench_fleet_sync.py [--mb 256] [--repeat 2]

Rows: `frt mirror s3://...` (publish: hash while staging, HEAD, multipart upload, lockfile last) vs
`s5cmd cp` of the same files up; `frt mirror DIR --from s3://...` (fetch, hash, verify, rename into the
hub-cache layout, refs) vs `s5cmd cp 's3://.../sha256/*' DIR` (no verification). Wall seconds of the
whole command, process start included, best of --repeat.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from helpers.factories import SCALE_SRC, tiny_project
from helpers.s3server import S3Server

S5CMD = shutil.which("s5cmd") or str(Path(sys.executable).parent / "s5cmd")


def timed(cmd, **kw) -> float:
    t = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    took = time.perf_counter() - t
    if r.returncode != 0:
        raise SystemExit(f"{cmd}: {r.returncode}\n{r.stderr}")
    return took


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=2)
    a = ap.parse_args()
    srv = S3Server().start()
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "HF_", "FRT_"))}, **srv.env()}
    best: dict[str, float] = {}
    try:
        with tempfile.TemporaryDirectory() as d:
            tmp = Path(d)
            tp = tiny_project(tmp, packages={
                "scale": {"name": "scale", "module": {"__init__.py": SCALE_SRC, "weights.bin": os.urandom(a.mb << 20)}},
                "norm": {"name": "norm"}})
            tp.lock()
            frt = [sys.executable, "-m", "frt_dist.cli"]
            files = [p for p in (tp.root / "packages").rglob("*") if p.is_file()]
            for i in range(a.repeat):
                for tool in ("frt", "s5cmd"):
                    bucket = f"bench-{tool}-{i}"
                    srv.client().create_bucket(Bucket=bucket)
                    if tool == "frt":
                        up = timed([*frt, "mirror", f"s3://{bucket}/p", "--variant", "torch-cpu"], cwd=tp.root, env=env)
                        down = timed([*frt, "mirror", str(tmp / f"m-{i}"), "--from", f"s3://{bucket}/p", "--variant",
                                      "torch-cpu"], cwd=tp.root, env=env)
                    else:
                        up = timed([S5CMD, "--endpoint-url", srv.url, "cp", f"{tp.root / 'packages'}/",
                                    f"s3://{bucket}/p/"], env=env)
                        down = timed([S5CMD, "--endpoint-url", srv.url, "cp", f"s3://{bucket}/p/*",
                                      f"{tmp / f's5-{i}'}/"], env=env)
                    for k, v in ((f"{tool} up", up), (f"{tool} down", down)):
                        best[k] = min(v, best.get(k, v))
                    srv.reset()
                shutil.rmtree(tmp / f"m-{i}", ignore_errors=True)
                shutil.rmtree(tmp / f"s5-{i}", ignore_errors=True)
            total = sum(p.stat().st_size for p in files)
    finally:
        srv.stop()
    print(f"{total / 2**20:.0f} MiB in {len(files)} files, best of {a.repeat}")
    print("| step | frt s | s5cmd s | frt / s5cmd |")
    print("|---|---:|---:|---:|")
    for step, what in (("up", "publish (`frt mirror s3://…`) vs `s5cmd cp` up"),
                       ("down", "sync (`frt mirror DIR --from s3://…`, verified) vs `s5cmd cp` down")):
        f, s = best[f"frt {step}"], best[f"s5cmd {step}"]
        print(f"| {what} | {f:.2f} | {s:.2f} | {f / s:.2f}x |")


if __name__ == "__main__":
    main()
