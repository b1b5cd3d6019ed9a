"""Object-store mirrors: ``frt_dist.load(model, mirror="s3://…")``, ``FRT_MIRROR=s3://…`` and
``[tool.frt] mirror = "s3://…"`` (and ``file://``) load straight into the verified store, fetching
only the locked files of the variants the chosen routes bind, against a real S3-protocol server
(moto in its own process, tests/helpers/s3server.py) through the production client (boto3); requests are
counted by a real HTTP proxy in front of it (``FaultProxy``), not by patching the client."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import frt_dist
from frt_dist import loader
from frt_dist.distribution.objstore import StoreAccess
from frt_dist.errors import KernelUnavailable
from frt_dist.loader import remote
from helpers.factories import CPU, tiny_project, variant_files, write_variant
from helpers.frt import frt_process
from helpers.s3server import FAKE_KEY_ID, FAKE_SECRET, FaultProxy, connects_script, run_traced

pytestmark = [pytest.mark.usefixtures("fresh_loader"), pytest.mark.subprocess]

SCALE_ID = "_frt_test_scale_v1"


def _project(tmp_path, receipts):
    """The tiny project with a second (CUDA) variant of each package, locked with ``receipts``."""
    tp = tiny_project(tmp_path)
    for name in ("scale", "norm"):
        write_variant(tp.root / "packages" / name / "build" / "torch-cuda",
                      variant_files(name, backend="cuda", archs=["9.0"], source=f"# {name} for CUDA\n" * 50))
    return tp, tp.lock(receipts=receipts)


@pytest.fixture
def solo(tmp_path, bucket):
    """Receipts for route ``solo`` only (it binds ``t-org/scale``, not ``t-org/norm``); every variant
    of both packages published to ``s3://<bucket>/p``."""
    from frt_dist.distribution.fleet import publish_lock
    from frt_dist.distribution.objstore import open_store

    tp, lock = _project(tmp_path, [("solo", "decode"), ("solo", "prefill")])
    with open_store(f"s3://{bucket}/p") as store:  # what `frt mirror s3://… --all-variants` does, in process
        assert publish_lock(lock, store, all_variants=True, root=tp.root).uploaded == 8
    return tp, lock


def _variant_objects(tp, lock, repo: str, variant: str) -> dict[str, bytes]:
    """sha256/<hex> -> bytes of every file of one locked variant."""
    base = tp.root / lock.packages[repo].path / "build" / variant
    return {f"sha256/{hashlib.sha256(p.read_bytes()).hexdigest()}": p.read_bytes()
            for p in base.rglob("*") if p.is_file()}


def _gets(proxy) -> list[str]:
    return [p for m, p in proxy.log if m == "GET"]


def _store_entries() -> list[Path]:
    root = Path(os.environ["XDG_CACHE_HOME"]) / "frt-dist" / "store"
    return sorted(p for p in root.iterdir() if not p.name.startswith(".")) if root.is_dir() else []


def test_load_fetches_only_the_files_of_the_variant_the_chosen_route_binds(solo, s3, bucket, monkeypatch):
    tp, lock = solo
    proxy = FaultProxy(s3.url).start()
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
    try:
        remote.reset_stats()
        plan = frt_dist.load("tiny", project=tp.root, hardware=CPU, mirror=f"s3://{bucket}/p")
        want = _variant_objects(tp, lock, "t-org/scale", "torch-cpu")
        assert sorted(p.split(f"/{bucket}/p/", 1)[1] for p in _gets(proxy)) == sorted(want)  # nothing else
        assert [m for m, _ in proxy.log if m != "GET"] == []  # no listing, no HEAD, no lockfile
        assert remote.stats()["bytes"] == sum(map(len, want.values())) and remote.stats()["objects"] == 2
        scale = plan.packages["t-org/scale"]
        assert (scale.source, scale.location) == ("mirror", f"s3://{bucket}/p")  # not the path package next door
        assert "t-org/norm" not in plan.packages and plan.decisions["decode"].route == "solo"
        import torch

        assert plan.entry("act", "decode")(torch.ones(2, 8), torch.full((8,), 2.0)).sum().item() == 32.0
        # warm: a new process-worth of loader state, the same store: nothing is fetched again
        loader._forget_all()
        proxy.log.clear()
        frt_dist.load("tiny", project=tp.root, hardware=CPU, mirror=f"s3://{bucket}/p")
        assert proxy.log == [] and remote.stats()["warm"] == 1
    finally:
        proxy.stop()


_NODE = r"""
import json, sys
import frt_dist
from frt_dist.system.hardware import Hardware
from frt_dist.loader import remote
hw = Hardware(arch="x86_64", device_class="test-cpu", backend="cpu", software={"torch": "2.13"})
plan = frt_dist.load("tiny", hardware=hw)
print(json.dumps({"packages": {r: [p.source, p.location] for r, p in plan.packages.items()}, "stats": remote.stats()}))
"""


@pytest.mark.parametrize("how", ["FRT_MIRROR", "tool.frt", "file-url"])
@pytest.mark.slow
def test_frt_mirror_and_tool_frt_mirror_and_file_urls(solo, tmp_path, bucket, how):
    tp, lock = solo
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FRT_", "HF_"))}
    env.update(HF_HUB_OFFLINE="1", PYTHONDONTWRITEBYTECODE="1", XDG_CACHE_HOME=str(tmp_path / "node-cache"))
    url = f"s3://{bucket}/p"
    if how == "FRT_MIRROR":
        env["FRT_MIRROR"] = url
    elif how == "tool.frt":
        (tp.root / "pyproject.toml").write_text(f'[tool.frt]\nmirror = "{url}"\n')
    else:
        shared = tmp_path / "shared-disk"
        assert frt_process(["mirror", f"file://{shared}", "--all-variants"], cwd=tp.root).returncode == 0
        url = f"file://{shared}"
        env["FRT_MIRROR"] = url
    r = subprocess.run([sys.executable, "-c", _NODE], cwd=tp.root, env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["packages"] == {"t-org/scale": ["mirror", url]}
    assert doc["stats"]["objects"] == 2


@pytest.mark.parametrize("fault", ["tampered", "missing", "truncated"])
def test_a_damaged_or_missing_object_is_refused_naming_it_and_nothing_is_imported_or_stored(solo, s3, bucket, fault):
    tp, lock = solo
    objs = _variant_objects(tp, lock, "t-org/scale", "torch-cpu")
    src = (tp.root / "packages/scale/build/torch-cpu/scale/__init__.py").read_bytes()
    key = f"sha256/{hashlib.sha256(src).hexdigest()}"
    c = s3.client()
    if fault == "missing":
        c.delete_object(Bucket=bucket, Key=f"p/{key}")
    else:  # the attacker's bytes: code that would run if it were imported
        bad = b"raise SystemExit('pwned')\n" if fault == "tampered" else src[:-9]
        c.put_object(Bucket=bucket, Key=f"p/{key}", Body=bad)
    with pytest.raises(KernelUnavailable) as ei:
        frt_dist.load("tiny", project=tp.root, hardware=CPU, mirror=f"s3://{bucket}/p")
    msg = str(ei.value)
    assert f"s3://{bucket}/p/{key}" in msg and "build/torch-cpu/scale/__init__.py" in msg and "t-org/scale" in msg
    assert ("is not in the store" if fault == "missing" else "does not match the lock") in msg
    assert "nothing was bound" in msg and "--repair" in " ".join(ei.value.hints)
    r = [x for x in ei.value.reasons if x.get("path") == "build/torch-cpu/scale/__init__.py"]
    assert r and r[0]["kind"] == ("missing" if fault == "missing" else "mismatched")
    assert r[0]["object"] == f"s3://{bucket}/p/{key}" and r[0]["expected"]
    assert SCALE_ID not in sys.modules and not _store_entries()  # nothing imported, nothing stored
    root = Path(os.environ["XDG_CACHE_HOME"]) / "frt-dist" / "store"
    assert not [p for p in root.iterdir() if p.name.startswith(".tmp-")]  # the temporary entry is gone
    assert loader.unavailable_report()[-1]["repo"] == "t-org/scale"
    # the same refusal from `frt`-less Python is the documented one; and the good object back: it loads
    c.put_object(Bucket=bucket, Key=f"p/{key}", Body=objs[key])
    plan = frt_dist.load("tiny", project=tp.root, hardware=CPU, mirror=f"s3://{bucket}/p")
    assert plan.packages["t-org/scale"].location == f"s3://{bucket}/p"


def test_no_credentials_and_access_denied_are_exit_2_refusals_with_a_hint_and_no_secret(solo, s3, bucket,
                                                                                        monkeypatch):
    tp, _ = solo
    proxy = FaultProxy(s3.url, mode="403").start()
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
        with pytest.raises(StoreAccess) as denied:
            frt_dist.load("tiny", project=tp.root, hardware=CPU, mirror=f"s3://{bucket}/p")
    finally:
        proxy.stop()
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.url)
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    with pytest.raises(StoreAccess) as nocred:
        frt_dist.load("tiny", project=tp.root, hardware=CPU, mirror=f"s3://{bucket}/p")
    for exc, says in ((denied.value, "access denied"), (nocred.value, "no credentials for the object store")):
        assert exc.exit_code == 2 and says in str(exc) and isinstance(exc, ValueError)
        assert any("AWS_ACCESS_KEY_ID" in h for h in exc.hints) and any("s3:GetObject" in h for h in exc.hints)
        text = str(exc) + " ".join(exc.hints)
        assert FAKE_SECRET not in text and FAKE_KEY_ID not in text
    assert SCALE_ID not in sys.modules and not _store_entries()


def test_a_failing_server_is_retried_a_bounded_number_of_times_then_refused(solo, s3, bucket, monkeypatch):
    tp, _ = solo
    proxy = FaultProxy(s3.url, mode="500").start()
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
        monkeypatch.setenv("FRT_STORE_ATTEMPTS", "2")
        with pytest.raises(KernelUnavailable) as ei:
            frt_dist.load("tiny", project=tp.root, hardware=CPU, mirror=f"s3://{bucket}/p")
        assert "answered 500" in str(ei.value) and "through 2 attempt(s)" in str(ei.value)
        assert ei.value.reasons[0]["kind"] == "store"
        per = {}
        for _, p in proxy.log:
            per[p] = per.get(p, 0) + 1
        assert per and max(per.values()) == 2  # bounded
        proxy.mode, proxy.fail_first = "pass", 1  # a fault that clears is retried through
        loader._forget_all()
        plan = frt_dist.load("tiny", project=tp.root, hardware=CPU, mirror=f"s3://{bucket}/p")
        assert "t-org/scale" in plan.packages
    finally:
        proxy.stop()
    assert SCALE_ID in sys.modules


def test_a_url_mirror_without_a_lockfile_is_refused_and_a_bad_url_is_a_usage_error(tmp_path, bucket):
    with pytest.raises(KernelUnavailable) as ei:
        frt_dist.hub_kernel("t-org/scale", 1, mirror=f"s3://{bucket}/p", trust=True)
    assert "only through a lockfile" in str(ei.value) and ei.value.hints
    with pytest.raises(StoreAccess) as bad:
        frt_dist.hub_kernel("t-org/scale", 1, mirror="gs://b/p", trust=True)
    assert bad.value.exit_code == 2 and "does not know the scheme 'gs'" in str(bad.value)


def test_hub_kernel_with_a_lockfile_reads_the_url_mirror(solo, bucket):
    tp, lock = solo
    mod = frt_dist.hub_kernel("t-org/scale", 1, lockfile=tp.lock_path, mirror=f"s3://{bucket}/p", hardware=CPU)
    assert mod.__name__ == SCALE_ID
    assert loader.load_package("t-org/scale", 1, lockfile=tp.lock_path, hardware=CPU).location == f"s3://{bucket}/p"


_AUDIT = connects_script("""
import frt_dist
from frt_dist.system.hardware import Hardware
hw = Hardware(arch="x86_64", device_class="test-cpu", backend="cpu", software={"torch": "2.13"})
frt_dist.load("tiny", hardware=hw)
""")


@pytest.mark.parametrize("client", ["auto", "boto3"])
@pytest.mark.slow
def test_a_url_mirror_connects_to_the_endpoint_and_nothing_else(solo, tmp_path, s3, bucket, client):
    """Every connect() of the node, seen by strace (the obstore reader's sockets are Rust's, which a
    Python audit hook does not see), and by the audit hook for boto3's."""
    tp, _ = solo
    log = tmp_path / "connects.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "FRT_", "KERNELS_"))}
    env.update(HF_ENDPOINT="http://127.0.0.1:9", HF_HOME=str(tmp_path / "hf"), FRT_MIRROR=f"s3://{bucket}/p",
               XDG_CACHE_HOME=str(tmp_path / "node-cache"), PYTHONDONTWRITEBYTECODE="1", FRT_STORE_CLIENT=client)
    code = _AUDIT + "print(sorted(m.split('.')[0] for m in sys.modules if m.split('.')[0] in ('obstore', 'boto3')))\n"
    r, traced = run_traced([sys.executable, "-c", code, str(log)], tmp_path / "strace.log", cwd=tp.root, env=env,
                           capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    connects = {tuple(a) for a in json.loads(log.read_text()) if a[0] != "resolve"}
    if client == "boto3":
        assert connects == {("127.0.0.1", s3.port)}, connects  # not the Hub (HF_ENDPOINT), nothing else
        assert "boto3" in r.stdout and "obstore" not in r.stdout
    else:  # the node read through obstore and never imported boto3
        assert connects == set() and "obstore" in r.stdout and "boto3" not in r.stdout, (connects, r.stdout)
    if traced is None:
        pytest.skip("strace is not installed: the obstore reader's connections were not observed")
    assert traced == {("127.0.0.1", s3.port)}, traced


def test_links_inside_the_verified_store_make_frt_write_nothing_outside_it(solo, tmp_path, bucket, monkeypatch):
    """The store the objects are fetched into is private; still, a link planted in it (an entry,
    the fetch lock) is removed or refused, never written through, never chmod-ed through."""
    tp, lock = solo
    store = tmp_path / "store"
    monkeypatch.setenv("FRT_STORE", str(store))
    outside = tmp_path / "outside"
    outside.mkdir(mode=0o755)
    (outside / "precious").write_text("keep me\n")
    frt_dist.load("tiny", project=tp.root, hardware=CPU, mirror=f"s3://{bucket}/p")  # builds the entry
    [entry] = [p for p in store.iterdir() if not p.name.startswith(".") and p.name != "seen"]
    key = entry.name
    os.chmod(entry, 0o700)
    import shutil

    for dirpath, dirs, _ in os.walk(entry):
        for d in dirs:
            os.chmod(os.path.join(dirpath, d), 0o700)
    shutil.rmtree(entry)
    entry.symlink_to(outside)  # the entry is now a link to someone else's folder
    lockfile = store / f".fetch-{key[:32]}.lock"
    lockfile.unlink()
    lockfile.symlink_to(outside / "precious")  # and the fetch lock a link to a file outside
    loader._forget_all()
    with pytest.raises(KernelUnavailable) as ei:
        frt_dist.load("tiny", project=tp.root, hardware=CPU, mirror=f"s3://{bucket}/p")
    assert "fetch lock" in str(ei.value) and ei.value.reasons[0]["kind"] == "store"
    lockfile.unlink()  # the operator removes the planted lock link; the entry link is dealt with by frt
    loader._forget_all()
    plan = frt_dist.load("tiny", project=tp.root, hardware=CPU, mirror=f"s3://{bucket}/p")
    assert Path(plan.packages["t-org/scale"].store_path).resolve().is_relative_to(store.resolve())
    assert not entry.is_symlink() and entry.is_dir()  # the link was replaced by a real entry
    assert sorted(p.name for p in outside.iterdir()) == ["precious"]
    assert (outside / "precious").read_text() == "keep me\n" and (outside.stat().st_mode & 0o777) == 0o755


def test_a_store_folder_open_to_others_is_refused_before_anything_is_fetched(solo, tmp_path, s3, bucket,
                                                                           monkeypatch):
    tp, lock = solo
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    link = tmp_path / "store-link"
    link.symlink_to(shared)  # the store named through a link: what is checked is the folder it names
    monkeypatch.setenv("FRT_STORE", str(link))
    proxy = FaultProxy(s3.url).start()
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
        with pytest.raises(KernelUnavailable) as ei:
            frt_dist.load("tiny", project=tp.root, hardware=CPU, mirror=f"s3://{bucket}/p")
        with pytest.raises(KernelUnavailable) as one:
            loader.load_locked(lock, "t-org/scale", hardware=CPU, mirror=f"s3://{bucket}/p")
    finally:
        proxy.stop()
    assert "writable by group or others" in str(ei.value) and ei.value.reasons[0]["kind"] == "store"
    assert "chmod 700" in " ".join(one.value.hints)
    assert proxy.log == [] and list(shared.iterdir()) == []


from test_load_plan_and_guard import forbid_measurement  # noqa: E402,F401 (fixture: any clock read from frt code fails)


def test_loading_through_the_store_never_measures(solo, bucket, forbid_measurement):  # noqa: F811
    tp, _ = solo
    plan = frt_dist.load("tiny", project=tp.root, hardware=CPU, mirror=f"s3://{bucket}/p")  # a cold fetch
    assert plan.packages["t-org/scale"].location == f"s3://{bucket}/p"
    assert forbid_measurement == []  # no clock read by frt on the serving path, fetching included


@pytest.mark.slow
def test_no_such_bucket_is_exit_2_and_no_output_of_a_node_ever_shows_a_credential(solo, tmp_path, s3, bucket):
    tp, _ = solo
    with pytest.raises(StoreAccess) as nob:
        frt_dist.load("tiny", project=tp.root, hardware=CPU, mirror="s3://frt-no-such-bucket/p")
    assert nob.value.exit_code == 2 and "no such bucket 'frt-no-such-bucket'" in str(nob.value)
    proxy = FaultProxy(s3.url).start()
    outputs, caches = [], []
    try:
        for i, (mode, extra) in enumerate((("pass", {}), ("403", {}), ("500", {"FRT_STORE_ATTEMPTS": "1"}),
                                           ("pass", {"AWS_ENDPOINT_URL": "http://127.0.0.1:9", "FRT_STORE_ATTEMPTS": "1"}),
                                           ("pass", {"FRT_MIRROR": "s3://frt-no-such-bucket/p"}))):
            proxy.mode = mode
            env = {k: v for k, v in os.environ.items() if not k.startswith(("FRT_", "HF_"))}
            env.update(HF_HUB_OFFLINE="1", PYTHONDONTWRITEBYTECODE="1", XDG_CACHE_HOME=str(tmp_path / f"c{i}"),
                       FRT_MIRROR=f"s3://{bucket}/p", AWS_ENDPOINT_URL=proxy.url)
            env.update(extra)
            caches.append(tmp_path / f"c{i}")
            r = subprocess.run([sys.executable, "-c", _NODE], cwd=tp.root, env=env, capture_output=True, text=True,
                               timeout=120)
            assert (r.returncode == 0) == (i == 0), (mode, extra, r.stderr[-2000:])
            outputs += [r.stdout, r.stderr]
    finally:
        proxy.stop()
    assert any("access denied" in o for o in outputs) and any("answered 500" in o for o in outputs)
    assert any("cannot connect" in o for o in outputs) and any("no such bucket" in o for o in outputs)
    written = [p.read_bytes() for c in caches for p in c.rglob("*") if p.is_file()]
    for secret in (FAKE_SECRET, FAKE_KEY_ID):
        assert not any(secret in o for o in outputs), secret
        assert not any(secret.encode() in w for w in written), secret


@pytest.mark.parametrize("client", ["auto", "boto3"])
def test_a_full_verified_store_is_exit_2_naming_it_and_leaves_nothing(tmp_path, s3, bucket, monkeypatch, client):
    """The verified store on a 1 MiB file system, a locked file of 2 MiB: exit 2 naming the store (a
    fault of this machine, not of the object store: no hint to republish), nothing imported, no entry."""
    import subprocess as sp

    from frt_dist.distribution.fleet import publish_lock
    from frt_dist.distribution.objstore import open_store
    from frt_dist.loader.remote import VerifiedStoreFull
    from helpers.factories import NORM_SRC, manifest_doc

    from test_mirror_disk import _mount_tmpfs

    full = tmp_path / "full"
    _mount_tmpfs(full)
    try:
        monkeypatch.setenv("FRT_STORE_CLIENT", client)
        monkeypatch.setenv("FRT_STORE", str(full / "store"))
        tp = tiny_project(tmp_path, "bigproj", manifest=manifest_doc(), packages={
            "scale": {"name": "scale", "module": {"__init__.py": "def scale(x, w):\n    return x * w\n",
                                                  "weights.bin": os.urandom(2 << 20)}},
            "norm": {"name": "norm", "source": NORM_SRC}})
        lock = tp.lock(receipts=[("solo", "decode"), ("solo", "prefill")])
        with open_store(f"s3://{bucket}/p") as store:
            publish_lock(lock, store, all_variants=True, root=tp.root)
        with pytest.raises(VerifiedStoreFull) as ei:
            frt_dist.load("tiny", project=tp.root, hardware=CPU, mirror=f"s3://{bucket}/p")
        text = str(ei.value) + " ".join(ei.value.hints)
        assert ei.value.exit_code == 2 and f"verified store {full / 'store'}: cannot write: No space left" in str(ei.value)
        assert "FRT_STORE" in text and "--repair" not in text and "republish" not in text
        assert SCALE_ID not in sys.modules
        assert [p.name for p in (full / "store").iterdir() if not p.name.startswith(".")] == []  # no entry
    finally:
        sp.run(["umount", str(full)], capture_output=True)


@pytest.mark.parametrize("client", ["auto", "boto3"])
def test_one_deadline_binds_a_loads_parallel_fetches_and_its_packages_together(tmp_path, bucket, monkeypatch, client):
    """Issue 35: route ``fast`` binds two packages, fetched one after the other (t-org/norm, then t-org/scale),
    each variant's files in parallel, at most ``remote._WORKERS`` at once (norm has two files more). An endpoint
    trickling one byte every 1.5 s (each read inside FRT_STORE_TIMEOUT=2): FRT_STORE_DEADLINE=3 is one deadline for
    the whole load, so the parallel fetches all stop at it, and norm's files still queued and scale's are refused
    without a request (a deadline per file, or per package, would start them afresh); the refusal names the store,
    the locked file and the setting; nothing is imported."""
    import threading

    from frt_dist.distribution.fleet import publish_lock
    from frt_dist.distribution.objstore import open_store
    from helpers.factories import NORM_SRC, SCALE_SRC
    from helpers.hostile import Hostile

    extra = {f"part{i}.py": f"# part {i} of norm\n" * 40 for i in range(remote._WORKERS)}
    tp = tiny_project(tmp_path, packages={"scale": {"name": "scale", "source": SCALE_SRC},
                                          "norm": {"name": "norm", "module": {"__init__.py": NORM_SRC, **extra}}})
    lock = tp.lock(receipts=[("fast", "decode"), ("fast", "prefill")])
    with open_store(f"s3://{bucket}/p") as store:
        publish_lock(lock, store, root=tp.root)
    norm_keys = set(_variant_objects(tp, lock, "t-org/norm", "torch-cpu"))
    assert len(norm_keys) == remote._WORKERS + 2  # metadata.json, __init__.py and the parts
    monkeypatch.setenv("FRT_STORE_CLIENT", client)
    monkeypatch.setenv("FRT_STORE_DEADLINE", "3")
    monkeypatch.setenv("FRT_STORE_TIMEOUT", "2")
    monkeypatch.setenv("FRT_STORE_ATTEMPTS", "2")
    box = {}
    with Hostile("trickle", body=b"z" * 10_000, every_s=1.5) as slow:
        monkeypatch.setenv("AWS_ENDPOINT_URL", slow.url)

        def run():
            try:
                frt_dist.load("tiny", project=tp.root, hardware=CPU, mirror=f"s3://{bucket}/p")
            except BaseException as exc:  # handed back
                box["exc"] = exc

        th = threading.Thread(target=run, daemon=True)
        th.start()
        th.join(60)
        assert not th.is_alive(), "the load was still running after 60 s"
        asked = {path.split(f"/{bucket}/p/", 1)[-1] for method, path, _ in slow.requests if method == "GET"}
    exc = box.get("exc")
    assert isinstance(exc, KernelUnavailable), repr(exc)
    # norm's first fetches, at once (a loaded machine may start fewer before the deadline); no later one, none of scale's
    assert asked and asked <= norm_keys and len(asked) <= remote._WORKERS, (asked, norm_keys)
    by_pkg = {r["package"]: r for r in exc.reasons}
    assert set(by_pkg) == {"t-org/norm", "t-org/scale"} and {r["kind"] for r in exc.reasons} == {"store"}, exc.reasons
    for repo, r in by_pkg.items():
        assert r["reason"].startswith(f"{repo} build/torch-cpu/"), r["reason"]  # the locked file
        assert f": s3://{bucket}/p/sha256/" in r["reason"], r["reason"]  # the store and the object
        assert ("this load's fetches (all its files, fetched in parallel, retries included) took longer than "
                "FRT_STORE_DEADLINE=3s and were stopped") in r["reason"], r["reason"]
    assert SCALE_ID not in sys.modules and "_frt_test_norm_v1" not in sys.modules and not _store_entries()


@pytest.mark.parametrize("client", ["auto", "boto3"])
def test_a_trickling_store_ends_the_load_within_the_deadline_and_frees_the_fetch_lock(solo, bucket, monkeypatch,
                                                                                       client):
    """An endpoint that sends one byte every 0.2 s (each read well inside FRT_STORE_TIMEOUT): the load
    refuses within FRT_STORE_DEADLINE (2 s here; a generous multiple allowed for a loaded machine),
    imports nothing, and the store's fetch lock is free again (another process could fetch at once)."""
    import fcntl
    import threading
    import time

    from helpers.hostile import Hostile

    tp, _ = solo
    monkeypatch.setenv("FRT_STORE_CLIENT", client)
    monkeypatch.setenv("FRT_STORE_DEADLINE", "2")
    monkeypatch.setenv("FRT_STORE_TIMEOUT", "2")
    monkeypatch.setenv("FRT_STORE_ATTEMPTS", "2")
    box = {}
    with Hostile("trickle", body=b"z" * 100_000, every_s=0.2) as slow:
        monkeypatch.setenv("AWS_ENDPOINT_URL", slow.url)

        def run():
            t0 = time.monotonic()
            try:
                frt_dist.load("tiny", project=tp.root, hardware=CPU, mirror=f"s3://{bucket}/p")
            except BaseException as exc:  # handed back
                box["exc"] = exc
            box["took"] = time.monotonic() - t0

        th = threading.Thread(target=run, daemon=True)
        th.start()
        th.join(60)
        assert not th.is_alive(), "the load was still running after 60 s"
    exc = box.get("exc")
    assert isinstance(exc, KernelUnavailable), repr(exc)
    assert "took longer than FRT_STORE_DEADLINE=2s" in str(exc) and exc.reasons[0]["kind"] == "store", str(exc)
    assert box["took"] < 2 * 10, box["took"]
    assert SCALE_ID not in sys.modules and not _store_entries()
    root = Path(os.environ["XDG_CACHE_HOME"]) / "frt-dist" / "store"
    for lock in root.glob(".fetch-*.lock"):
        fd = os.open(lock, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free: raises BlockingIOError if still held
        finally:
            os.close(fd)
