"""A publish SIGKILLed at 30 random points leaves nothing a reader accepts as complete,
and publishers running at once agree. Real processes, a real S3-protocol server (moto)
behind a proxy of ours that SIGKILLs the publisher at its N-th request, before the request
reaches the server or after the server acted on it but before the publisher heard back.

The publishers are forked from one process that has imported frt and boto3 once (a "zygote"),
so 30 kills cost 30 forks, not 30 interpreter start-ups; each child is an ordinary process
running ``frt_dist.cli.main.main`` and is killed with SIGKILL like any other."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from frt_dist import KernelUnavailable
from frt_dist.distribution.mirror import mirror_lock, verify_mirror
from frt_dist.distribution.objstore import lock_key, open_store
from frt_dist.documents.lockfile import Lockfile
from helpers.factories import tiny_project
from helpers.s3server import FaultProxy

pytestmark = [pytest.mark.usefixtures("fresh_loader"), pytest.mark.subprocess]

_ZYGOTE = r"""
import json, os, sys
import boto3, botocore.session
import frt_dist.cli.main, frt_dist.distribution.fleet, frt_dist.distribution.mirror, frt_dist.distribution.objstore
frt_dist.distribution.objstore.open_store("s3://warm-up/p").close()  # a session for this environment, as a long-lived process has
for line in sys.stdin:
    req = json.loads(line)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(w)
        os.read(r, 1)  # wait until the test has armed the proxy with this pid
        os.environ.update(req["env"])
        os.chdir(req["cwd"])
        fd = os.open(req["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1); os.dup2(fd, 2)
        rc = frt_dist.cli.main.main(req["argv"])
        sys.stdout.flush(); sys.stderr.flush()
        os._exit(rc)
    os.close(r)
    print(pid, flush=True)
    sys.stdin.readline()  # "go"
    os.write(w, b"g"); os.close(w)
    _, status = os.waitpid(pid, 0)
    print(json.dumps({"pid": pid, "status": status}), flush=True)
"""


class Zygote:
    def __init__(self, env: dict):
        self.proc = subprocess.Popen([sys.executable, "-c", _ZYGOTE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, env=env)

    def run(self, argv, *, cwd, env, out, arm=lambda pid: None) -> int:
        """Run ``frt argv`` in a forked child; ``arm(pid)`` before it starts; its wait status."""
        self.proc.stdin.write(json.dumps({"argv": argv, "cwd": str(cwd), "env": env, "out": str(out)}) + "\n")
        self.proc.stdin.flush()
        pid = int(self.proc.stdout.readline())
        arm(pid)
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())["status"]

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(30)


def _reader_accepts(lock, url: str, dest: Path) -> bool:
    """What a node does: no lockfile in the store is no release; a lockfile means the sync must
    succeed and verify. Returns whether a release was there."""
    with open_store(url) as store:
        if store.head(lock_key(lock.model)) is None:
            return False
        assert store.get_bytes(lock_key(lock.model)) == lock.render()
        mirror_lock(lock, dest, variants=["torch-cpu"], source=store)  # raises on any missing or bad object
    assert verify_mirror(lock, dest, variants=["torch-cpu"]) == []
    return True


@pytest.mark.slow
def test_a_publish_killed_at_30_random_points_never_leaves_a_partial_release(tmp_path, s3, bucket, monkeypatch):
    tp = tiny_project(tmp_path)
    tp.lock()
    lock = Lockfile.read(tp.lock_path)
    proxy = FaultProxy(s3.url).start()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "FRT_", "KERNELS_"))}
    child_env = {"AWS_ENDPOINT_URL": proxy.url}
    zyg = Zygote({**env, **child_env})
    try:
        argv = ["mirror", "", "--variant", "torch-cpu"]
        # one whole publish first: how many requests it makes
        s3.client().create_bucket(Bucket=f"{bucket}-full")
        status = zyg.run([*argv[:1], f"s3://{bucket}-full/p", *argv[2:]], cwd=tp.root, env=child_env,
                         out=tmp_path / "full.out")
        assert status == 0, (tmp_path / "full.out").read_text()
        total = len(proxy.log)
        assert total >= 9  # 4 HEADs, 4 object PUTs, the lockfile PUT
        rng = random.Random(18)
        # 28 random points, and both sides of the last request (the lockfile's PUT) for sure
        points = [(rng.randint(1, total), rng.random() < 0.5) for _ in range(28)] + [(total, False), (total, True)]
        rng.shuffle(points)
        outcomes = {"no release": 0, "complete": 0}
        for i, (at, after) in enumerate(points):
            name = f"{bucket}-k{i}"
            s3.client().create_bucket(Bucket=name)
            proxy.log.clear()

            def arm(pid, at=at, after=after):
                proxy.kill_at, proxy.kill_after, proxy.kill_pid = at, after, pid

            status = zyg.run([argv[0], f"s3://{name}/p", *argv[2:]], cwd=tp.root, env=child_env,
                             out=tmp_path / f"k{i}.out", arm=arm)
            assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, (at, after, status)
            released = _reader_accepts(lock, f"s3://{name}/p", tmp_path / f"node-{i}")
            outcomes["complete" if released else "no release"] += 1
            if at < total:  # killed before the lockfile PUT was sent: never a release
                assert not released, (at, after)
        assert outcomes["no release"] > 0 and outcomes["complete"] > 0, outcomes  # both ends were reached
        # and a re-run after a kill completes the release (resumable)
        status = zyg.run([argv[0], f"s3://{bucket}-k0/p", *argv[2:]], cwd=tp.root, env=child_env,
                         out=tmp_path / "resume.out")
        assert status == 0
        assert _reader_accepts(lock, f"s3://{bucket}-k0/p", tmp_path / "node-resume")
    finally:
        zyg.close()
        proxy.stop()


def test_a_reader_refuses_a_store_whose_lockfile_names_missing_objects(tmp_path, s3, bucket):
    """The check above would catch a partial release: a lockfile present with an object missing
    makes the sync fail (so `_reader_accepts` is not vacuous)."""
    tp = tiny_project(tmp_path)
    tp.lock()
    lock = Lockfile.read(tp.lock_path)
    with open_store(f"s3://{bucket}/p") as store:
        store.put_bytes(lock_key(lock.model), lock.render())
    with pytest.raises(KernelUnavailable, match="is not in the store"):
        _reader_accepts(lock, f"s3://{bucket}/p", tmp_path / "node")


@pytest.mark.slow
def test_publishers_at_once_agree(tmp_path, s3, bucket):
    tp = tiny_project(tmp_path)
    tp.lock()
    lock = Lockfile.read(tp.lock_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "FRT_", "KERNELS_"))}
    procs = [subprocess.Popen([sys.executable, "-m", "frt_dist.cli", "mirror", f"s3://{bucket}/p", "--variant",
                               "torch-cpu"], cwd=tp.root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(3)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], [e for _, e in outs]
    assert _reader_accepts(lock, f"s3://{bucket}/p", tmp_path / "node")
