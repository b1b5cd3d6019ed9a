"""What a fleet node pays to start each S3 read client (issue 18 item 7): a fresh Python process that
imports the client and constructs it for one bucket (no request), against bare Python, in one run.

    PYTHONPATH=$PWD .venv/bin/python bench/bench_client_start.py [--repeat 7]

Wall and CPU seconds (user + sys of the child) per process, median of --repeat, order alternated.
frt_dist.distribution.objstore is what the node really runs: ``open_store(url, reading=True)``, with
``FRT_STORE_CLIENT`` choosing the client.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time

CODE = {
    "bare python": "pass",
    "frt reader, obstore": "from frt_dist.distribution.objstore import open_store; open_store('s3://frt-bench/p', reading=True)",
    "frt reader, boto3": "from frt_dist.distribution.objstore import open_store; open_store('s3://frt-bench/p', reading=True)",
}


def one(name: str, env: dict) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", CODE[name]], env=env, check=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=7)
    a = ap.parse_args()
    base = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    base.update(AWS_ENDPOINT_URL="http://127.0.0.1:9", AWS_ACCESS_KEY_ID="AKIAEXAMPLE", AWS_SECRET_ACCESS_KEY="x" * 40,
                AWS_DEFAULT_REGION="us-east-1", AWS_CONFIG_FILE=os.devnull, AWS_SHARED_CREDENTIALS_FILE=os.devnull)
    envs = {"bare python": base, "frt reader, obstore": {**base, "FRT_STORE_CLIENT": "auto"},
            "frt reader, boto3": {**base, "FRT_STORE_CLIENT": "boto3"}}
    got = {k: [] for k in CODE}
    for r in range(a.repeat):
        for name in (list(CODE) if r % 2 == 0 else list(reversed(CODE))):
            got[name].append(one(name, envs[name]))
    bare = statistics.median(w for w, _ in got["bare python"])
    print("| process (import + construct, no request) | wall s | CPU s | wall minus bare python s |")
    print("|---|---:|---:|---:|")
    for name, runs in got.items():
        w, c = statistics.median(x for x, _ in runs), statistics.median(y for _, y in runs)
        print(f"| {name} | {w:.3f} | {c:.3f} | {w - bare:.3f} |")


if __name__ == "__main__":
    main()
