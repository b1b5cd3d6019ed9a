"""``frt mirror`` housekeeping: what a killed run leaves in the mirror
(``.frt-tmp`` temp files, ``.locks`` lock files) is removed by the next run, and what a
live concurrent run holds is not. Real ``frt mirror`` processes, killed with SIGKILL."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from frt_dist.distribution.hub import HubClient
from frt_dist.distribution.mirror import LOCKS, RUNS, STALE_S, TMP, mirror_lock, sweep_locks, sweep_temp, verify_mirror
from helpers.factories import NORM_SRC, hub_manifest, manifest_doc, start_hub, tiny_project

pytestmark = [pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL and flock semantics"),
              pytest.mark.usefixtures("fresh_loader")]  # conftest: no outside mirror, lock or offline setting

HELD = "scale/__init__.py"  # the Hub file whose download the test Hub holds




def _env(tmp_path: Path, name: str, endpoint: str | None = None) -> dict:
    """A subprocess environment with empty caches of its own (so Hub files must be downloaded)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HF_", "HUGGINGFACE_", "KERNELS_", "FRT_")) and k != "LOCAL_KERNELS"}
    home = tmp_path / f"env-{name}"
    temp = tmp_path / "tmpdir"  # shared by every run of a test: where Hub downloads are staged
    temp.mkdir(exist_ok=True)
    env.update(PYTHONDONTWRITEBYTECODE="1", HF_HOME=str(home / "hf"), HF_HUB_CACHE=str(home / "hub"), TMPDIR=str(temp),
               KERNELS_CACHE=str(home / "kernels"), XDG_CACHE_HOME=str(home / "xdg"), HF_HUB_DISABLE_XET="1",
               HF_HUB_DISABLE_PROGRESS_BARS="1", HF_HUB_DISABLE_IMPLICIT_TOKEN="1")
    if endpoint:
        env["HF_ENDPOINT"] = endpoint
    return env


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # a suite started with SIGINT ignored must not pass that on


def _frt(args, *, cwd, env, wait=True):
    # not helpers.frt: a Popen that the test interrupts (SIGINT restored in the child), with its own whole env
    cmd = [sys.executable, "-m", "frt_dist.cli", *args]
    if not wait:
        return subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=_default_sigint)
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=180)


def _files(root: Path) -> list[str]:
    """Every file and symlink under ``root`` (relative), empty folders as ``name/``."""
    if not root.exists():
        return []
    out = []
    for dirpath, dirs, files in os.walk(root):
        rel = Path(dirpath).relative_to(root)
        out += [str(rel / f) for f in files]
        out += [str(rel / d) + "/" for d in dirs if not os.listdir(Path(dirpath) / d)]
    return sorted(out)


def _hub_project(monkeypatch, tmp_path):
    server, commit = start_hub(monkeypatch, tmp_path)
    tp = tiny_project(tmp_path, "hubproj", manifest=hub_manifest())
    tp.hub = HubClient(endpoint=server.url)
    tp.lock()
    return server, tp


def _held_run(server, tp, mirror: Path, tmp_path: Path, name: str):
    """A real `frt mirror` process stuck in the Hub's answer for HELD, after it fetched
    remote-org/scale's metadata.json."""
    server.reset_counts()
    server.hold(HELD)
    proc = _frt(["mirror", str(mirror), "--variant", "torch-cpu"], cwd=tp.root,
                env=_env(tmp_path, name, server.url), wait=False)
    assert server.wait_for_request(HELD, timeout=120, alive=lambda: proc.poll() is None), proc.communicate()
    return proc


def _verify(tp, mirror: Path, tmp_path: Path):
    r = _frt(["verify", "--mirror", str(mirror), "--variant", "torch-cpu"], cwd=tp.root, env=_env(tmp_path, "verify"))
    assert r.returncode == 0, r.stdout + r.stderr
    return r


@pytest.mark.subprocess
def test_a_killed_run_leaves_nothing_once_the_next_run_ends(monkeypatch, tmp_path):
    server, tp = _hub_project(monkeypatch, tmp_path)
    mirror = tmp_path / "mirror"
    try:
        proc = _held_run(server, tp, mirror, tmp_path, "killed")
        os.kill(proc.pid, signal.SIGKILL)  # mid-run: a blob lock and the run lock held, its temp folder in use
        proc.communicate(timeout=60)
        server.release()
        left = _files(mirror / TMP) + _files(mirror / LOCKS)
        run = f"run-{proc.pid}-"
        assert any(p.startswith(run) for p in _files(mirror / TMP)), left  # the killed run's temp folder
        assert any(p.startswith(f"{RUNS}/{run}") for p in _files(mirror / LOCKS)), left  # its run lock
        assert any(p.startswith("kernels--remote-org--scale/") for p in _files(mirror / LOCKS)), left  # a blob lock
        assert verify_mirror(_lock(tp), mirror, variants=["torch-cpu"])  # not complete yet
        staged = list((tmp_path / "tmpdir").glob(f"frt-mirror-{run}*"))  # its Hub download, outside the mirror
        assert staged, _files(tmp_path / "tmpdir")

        again = _frt(["mirror", str(mirror), "--variant", "torch-cpu", "--json"], cwd=tp.root,
                     env=_env(tmp_path, "again", server.url))
        assert again.returncode == 0, again.stderr
        [report] = json.loads(again.stdout)["models"]
        assert report["cleaned"]["temp"] == 1 and report["cleaned"]["locks"] >= 2
        assert not any(p.exists() for p in staged)
        assert _files(tmp_path / "tmpdir") == []
        assert not (mirror / TMP).exists(), _files(mirror / TMP)
        assert not (mirror / LOCKS).exists(), _files(mirror / LOCKS)
        _verify(tp, mirror, tmp_path)
    finally:
        server.stop()


@pytest.mark.subprocess
def test_an_interrupted_run_says_what_it_kept_and_the_next_run_resumes(monkeypatch, tmp_path):
    """Ctrl-C mid-run: not "nothing was written" — the verified blobs stay, the
    temp files and locks go, no ref points at the unfinished package, and the next run resumes."""
    server, tp = _hub_project(monkeypatch, tmp_path)
    mirror = tmp_path / "mirror"
    try:
        proc = _held_run(server, tp, mirror, tmp_path, "interrupted")  # metadata.json done, HELD in flight
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        server.release()
        assert proc.returncode == 130, err
        assert err.splitlines()[-2:] == [
            f"error: interrupted; the files already verified stay in {mirror} (this run's temporary files are "
            "removed, or by the next run if it was killed)",
            "hint: run the same `frt mirror` again: it resumes, fetching only what is missing"]
        assert "nothing was written" not in err and "Traceback" not in err
        [blob] = (mirror / "kernels--remote-org--scale" / "blobs").iterdir()
        assert hashlib.sha256(blob.read_bytes()).hexdigest() == blob.name  # kept, whole
        assert not (mirror / "kernels--remote-org--scale" / "refs").exists()
        assert not (mirror / TMP).exists(), _files(mirror / TMP)
        assert not (mirror / LOCKS).exists(), _files(mirror / LOCKS)

        server.reset_counts()
        again = _frt(["mirror", str(mirror), "--variant", "torch-cpu", "--json"], cwd=tp.root,
                     env=_env(tmp_path, "resume", server.url))
        assert again.returncode == 0, again.stderr
        [report] = json.loads(again.stdout)["models"]
        assert (report["fetched"], report["present"]) == (3, 1)  # remote-org/scale's metadata.json was kept
        _verify(tp, mirror, tmp_path)
    finally:
        server.stop()


def _lock(tp):
    from frt_dist.documents.lockfile import Lockfile

    return Lockfile.read(tp.lock_path)


BIG = 96 << 20  # a path-package file large enough that its copy into a blob takes a while


def _size(path: Path) -> int:
    """The size of a file the mirror may rename away between listing and looking (0 then)."""
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


@pytest.mark.subprocess
@pytest.mark.slow
def test_a_partial_blob_of_a_killed_run_is_removed_by_the_next_run(tmp_path):
    """Killed while copying a large path-package file: the partial blob is in the run's temp folder."""
    doc = manifest_doc()
    tp = tiny_project(tmp_path, "bigproj", manifest=doc,
                      packages={"scale": {"name": "scale", "module": {"__init__.py": "def scale(x, w):\n    return x * w\n",
                                                                       "weights.bin": os.urandom(1 << 20) * (BIG >> 20)}},
                                "norm": {"name": "norm", "source": NORM_SRC}})
    tp.lock()
    for attempt in range(3):  # the kill must land during the copy; a very fast disk may need another try
        mirror = tmp_path / f"mirror{attempt}"
        proc = _frt(["mirror", str(mirror), "--variant", "torch-cpu"], cwd=tp.root, env=_env(tmp_path, "big"),
                    wait=False)
        partial = None
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            found = [p for p in (mirror / TMP).glob("run-*/blob-*") if _size(p) > 0]
            if found:
                partial = found[0]
                os.kill(proc.pid, signal.SIGKILL)
                break
            time.sleep(0.001)
        proc.communicate(timeout=60)
        if partial is not None and partial.exists() and partial.stat().st_size < BIG:
            break
    else:
        pytest.fail("never caught the copy of the large file in progress")
    assert any(p.startswith(f"{RUNS}/run-{proc.pid}-") for p in _files(mirror / LOCKS))
    again = _frt(["mirror", str(mirror), "--variant", "torch-cpu"], cwd=tp.root, env=_env(tmp_path, "big2"))
    assert again.returncode == 0, again.stderr
    assert not partial.exists()
    assert not (mirror / TMP).exists(), _files(mirror / TMP)
    assert not (mirror / LOCKS).exists(), _files(mirror / LOCKS)
    _verify(tp, mirror, tmp_path)


@pytest.mark.subprocess
@pytest.mark.slow
def test_a_concurrent_runs_temp_folder_and_held_locks_stay(monkeypatch, tmp_path):
    """Two processes on one mirror: B starts and ends while A is stuck in a download.
    B removes what it can lock (its own locks, a dead run's leftovers) and nothing A holds."""
    server, tp = _hub_project(monkeypatch, tmp_path)
    other = tiny_project(tmp_path, "pathproj")  # path packages only: B never waits for A's blob
    other.lock()
    mirror = tmp_path / "mirror"
    try:
        a = _held_run(server, tp, mirror, tmp_path, "a")
        dead = mirror / TMP / "run-999999-0123456789ab"  # what a dead run left (nobody holds its run lock)
        (dead / "dl-x").mkdir(parents=True)
        (dead / "blob-1").write_bytes(b"partial")
        (mirror / LOCKS / RUNS / f"{dead.name}.lock").write_bytes(b"")
        (mirror / LOCKS / "kernels--t-org--gone").mkdir(parents=True)
        (mirror / LOCKS / "kernels--t-org--gone" / "abc.lock").write_bytes(b"")
        a_tmp = [p for p in (mirror / TMP).iterdir() if p.name.startswith(f"run-{a.pid}-")]
        a_locks = [p for p in _files(mirror / LOCKS) if p.startswith(f"{RUNS}/run-{a.pid}-")
                   or p.startswith("kernels--remote-org--scale/")]
        assert len(a_tmp) == 1 and len(a_locks) == 3, _files(mirror / LOCKS)  # run lock, 2 blob locks

        b = _frt(["mirror", str(mirror), "--variant", "torch-cpu", "--json"], cwd=other.root, env=_env(tmp_path, "b"))
        assert b.returncode == 0, b.stderr
        assert a.poll() is None  # A is still in its download
        assert a_tmp[0].is_dir() and not dead.exists()
        locks = _files(mirror / LOCKS)
        assert [p for p in locks if p.startswith(f"{RUNS}/")] == [p for p in a_locks if p.startswith(f"{RUNS}/")]
        # A let go of remote-org/scale's metadata.json lock (B took and removed it) but holds HELD's
        [still] = [p for p in locks if p.startswith("kernels--remote-org--scale/")]
        assert still in a_locks
        assert not any("t-org" in p for p in locks)  # B's own locks and the dead one are gone
        [report] = json.loads(b.stdout)["models"]
        assert report["cleaned"]["temp"] == 1

        server.release()
        out, err = a.communicate(timeout=120)
        assert a.returncode == 0, err
        assert not (mirror / TMP).exists(), _files(mirror / TMP)
        assert not (mirror / LOCKS).exists(), _files(mirror / LOCKS)
        _verify(tp, mirror, tmp_path)
        _verify(other, mirror, tmp_path)
    finally:
        server.stop()


def test_loose_temp_entries_without_an_owner_go_only_when_stale(tmp_path):
    """Entries directly under .frt-tmp (an older frt's layout) have no run lock to ask: age decides."""
    mirror = tmp_path / "m"
    old, fresh = mirror / TMP / "blob-old", mirror / TMP / "dl-fresh"
    old.parent.mkdir(parents=True)
    old.write_bytes(b"x")
    (fresh / "sub").mkdir(parents=True)
    (fresh / "sub" / "part").write_bytes(b"y")
    t = time.time()
    os.utime(old, (t - STALE_S - 10, t - STALE_S - 10))
    assert sweep_temp(mirror, now=t) == 1
    assert not old.exists() and fresh.exists()
    assert sweep_temp(mirror, now=t + STALE_S + 10) == 1 and not fresh.exists()


@pytest.mark.subprocess
def test_a_lock_held_in_another_process_is_not_swept(tmp_path):
    locks = tmp_path / "m" / LOCKS / "kernels--o--n"
    locks.mkdir(parents=True)
    held, free = locks / "held.lock", locks / "free.lock"
    free.write_bytes(b"")
    code = ("import sys, time; from filelock import FileLock; l = FileLock(sys.argv[1]); l.acquire(); "
            "print('held', flush=True); time.sleep(60)")
    holder = subprocess.Popen([sys.executable, "-c", code, str(held)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert sweep_locks(tmp_path / "m") == 1
        assert held.exists() and not free.exists()
    finally:
        holder.kill()
        holder.wait()
    assert sweep_locks(tmp_path / "m") == 1 and not (tmp_path / "m" / LOCKS).exists()


def test_an_in_process_run_cleans_up_after_itself(tmp_path):
    tp = tiny_project(tmp_path)
    lock = tp.lock()
    mirror = tmp_path / "mirror"
    report = mirror_lock(lock, mirror, variants=["torch-cpu"])
    assert report.fetched == 4 and report.cleaned == {"temp": 0, "locks": 4}
    assert sorted(p.name for p in mirror.iterdir()) == ["kernels--t-org--norm", "kernels--t-org--scale"]
    assert verify_mirror(lock, mirror, variants=["torch-cpu"]) == []


@pytest.mark.parametrize("removed, made", [
    (LOCKS, lambda name: name == RUNS),  # another run's lock sweep, before we make frt-runs in .locks
    (TMP, lambda name: name.startswith("run-")),  # a run ending, before we make our folder in .frt-tmp
])
def test_a_run_starts_even_when_another_run_removes_a_folder_it_is_making_a_folder_in(monkeypatch, tmp_path,
                                                                                       removed, made):
    """Another run removes ``.locks`` or ``.frt-tmp`` (left empty) after this run opened it and
    before it made ``frt-runs`` or its own folder in it: the mkdir in the removed folder fails
    (ENOENT) and the run walks again from the mirror's root, instead of failing (seen once in four
    concurrent runs under load, test_mirror.py::test_concurrent_runs_fetch_each_blob_once)."""
    from frt_dist.base.safedir import SafeDir
    from frt_dist.distribution import mirror as M

    real_child, raced = SafeDir.child, []

    def child(self, name, *, create=False):
        if create and made(name) and not raced:  # the other run, exactly between our open and this mkdir
            raced.append(name)
            os.rmdir(tmp_path / "m" / removed)
        return real_child(self, name, create=create)

    monkeypatch.setattr(SafeDir, "child", child)
    root = SafeDir.root(tmp_path / "m", create=True)
    run = M.RunClaim(root)
    try:
        assert raced == [RUNS if removed == LOCKS else run.id]
        assert (tmp_path / "m" / LOCKS / RUNS / f"{run.id}.lock").is_file()
        assert (tmp_path / "m" / TMP / run.id).is_dir()
    finally:
        run.close()
        root.close()
