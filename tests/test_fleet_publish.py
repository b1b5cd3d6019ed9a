"""Object-store mirrors: ``frt mirror URL`` publishes, ``frt mirror DIR --from URL`` syncs, against a
real S3-protocol server (moto, its own process, tests/helpers/s3server.py) through the production client
(boto3 in frt_dist/distribution/objstore.py, configured only by the standard AWS environment), and ``file://``."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time

import pytest

from frt_dist import loader
from frt_dist.distribution.mirror import verify_mirror
from helpers.factories import CPU, tiny_project
from helpers.frt import frt_process
from helpers.s3server import FAKE_KEY_ID, FAKE_SECRET, FaultProxy, connects_script, run_traced

pytestmark = [pytest.mark.usefixtures("fresh_loader"), pytest.mark.subprocess]

SCALE_FILE = "t-org/scale build/torch-cpu/scale/__init__.py"


@pytest.fixture
def proj(tmp_path):
    tp = tiny_project(tmp_path)
    return tp, tp.lock()


def _objects(s3, bucket: str) -> dict[str, bytes]:
    c = s3.client()
    keys = [o["Key"] for o in c.list_objects_v2(Bucket=bucket).get("Contents", [])]
    return {k: c.get_object(Bucket=bucket, Key=k)["Body"].read() for k in keys}


def _locked_objects(tp, lock) -> dict[str, bytes]:
    """sha256/<hex> -> bytes of every torch-cpu file the lock names (read from the path packages)."""
    out = {}
    for pkg in lock.packages.values():
        base = tp.root / pkg.path / "build" / "torch-cpu"
        for p in base.rglob("*"):
            if p.is_file():
                out[f"sha256/{hashlib.sha256(p.read_bytes()).hexdigest()}"] = p.read_bytes()
    return out


def _scale_key(tp, lock) -> str:
    data = (tp.root / lock.packages["t-org/scale"].path / "build/torch-cpu/scale/__init__.py").read_bytes()
    return f"sha256/{hashlib.sha256(data).hexdigest()}"


def test_publish_then_sync_then_load(proj, tmp_path, s3, bucket):
    tp, lock = proj
    r = frt_process(["mirror", f"s3://{bucket}/fleet/prod", "--variant", "torch-cpu"], cwd=tp.root)
    assert r.returncode == 0, r.stderr
    assert "4 object(s) uploaded" in r.stdout and "lockfiles/tiny.lock last" in r.stdout
    objs = _objects(s3, bucket)
    want = {f"fleet/prod/{k}": v for k, v in _locked_objects(tp, lock).items()}
    assert {k: v for k, v in objs.items() if "/sha256/" in k} == want  # content-addressed, nothing else
    assert objs["fleet/prod/lockfiles/tiny.lock"] == tp.lock_path.read_bytes()
    assert sorted(objs) == sorted([*want, "fleet/prod/lockfiles/tiny.lock"])

    mirror = tmp_path / "node-mirror"
    r = frt_process(["mirror", str(mirror), "--from", f"s3://{bucket}/fleet/prod", "--variant", "torch-cpu", "--json"],
                cwd=tp.root)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["from"] == f"s3://{bucket}/fleet/prod" and doc["models"][0]["fetched"] == 4
    assert verify_mirror(lock, mirror, variants=["torch-cpu"]) == []
    loaded = loader.load_locked(lock, "t-org/scale", mirror=mirror, hardware=CPU)  # the existing verifying loader
    import torch

    assert loaded.module.scale(torch.ones(2), torch.full((2,), 3.0)).tolist() == [3.0, 3.0]
    r = frt_process(["mirror", str(mirror), "--from", f"s3://{bucket}/fleet/prod", "--variant", "torch-cpu"],
                cwd=tp.root)
    assert r.returncode == 0 and "0 blob(s) fetched, 4 already present" in r.stdout, r.stderr


def test_file_url_publishes_and_syncs_the_same_layout(proj, tmp_path):
    tp, lock = proj
    store = tmp_path / "shared-disk"
    r = frt_process(["mirror", f"file://{store}", "--variant", "torch-cpu"], cwd=tp.root)
    assert r.returncode == 0, r.stderr
    files = sorted(str(p.relative_to(store)) for p in store.rglob("*") if p.is_file())
    assert files == sorted([*_locked_objects(tp, lock), "lockfiles/tiny.lock"])  # no temp file left
    mirror = tmp_path / "m"
    r = frt_process(["mirror", str(mirror), "--from", f"file://{store}", "--variant", "torch-cpu"], cwd=tp.root)
    assert r.returncode == 0, r.stderr
    assert verify_mirror(lock, mirror, variants=["torch-cpu"]) == []


@pytest.mark.slow
def test_republish_skips_present_objects_and_sends_the_lockfile_last(proj, s3, bucket, monkeypatch):
    tp, lock = proj
    proxy = FaultProxy(s3.url).start()
    try:
        env = {"AWS_ENDPOINT_URL": proxy.url}
        r = frt_process(["mirror", f"s3://{bucket}/p", "--variant", "torch-cpu"], cwd=tp.root, env=env)
        assert r.returncode == 0, r.stderr
        puts = [p for m, p in proxy.log if m == "PUT"]
        assert len(puts) == 5 and puts[-1].endswith("/p/lockfiles/tiny.lock")  # 4 objects, then the lockfile
        assert all("/p/sha256/" in p for p in puts[:-1])
        proxy.log.clear()
        r = frt_process(["mirror", f"s3://{bucket}/p", "--variant", "torch-cpu"], cwd=tp.root, env=env)
        assert r.returncode == 0 and "0 object(s) uploaded, 4 already present" in r.stdout, r.stderr
        assert [p for m, p in proxy.log if m == "PUT"] == [puts[-1]]  # only the lockfile (idempotent)
        # an object with the wrong size is sent again; --repair sends every one
        s3.client().put_object(Bucket=bucket, Key=f"p/{_scale_key(tp, lock)}", Body=b"short")
        proxy.log.clear()
        r = frt_process(["mirror", f"s3://{bucket}/p", "--variant", "torch-cpu"], cwd=tp.root, env=env)
        assert r.returncode == 0 and "1 object(s) uploaded, 3 already present" in r.stdout, r.stderr
        proxy.log.clear()
        r = frt_process(["mirror", f"s3://{bucket}/p", "--variant", "torch-cpu", "--repair"], cwd=tp.root, env=env)
        assert r.returncode == 0 and "4 object(s) uploaded" in r.stdout, r.stderr
        assert proxy.count("PUT") == 5
    finally:
        proxy.stop()
    assert _objects(s3, bucket)[f"p/{_scale_key(tp, lock)}"] == _locked_objects(tp, lock)[_scale_key(tp, lock)]


def test_a_source_that_does_not_match_the_lock_is_not_uploaded_and_no_lockfile_goes_up(proj, s3, bucket):
    tp, lock = proj
    src = tp.root / lock.packages["t-org/scale"].path / "build/torch-cpu/scale/__init__.py"
    src.write_text(src.read_text() + "\n# edited after locking\n")
    r = frt_process(["mirror", f"s3://{bucket}/p", "--variant", "torch-cpu"], cwd=tp.root)
    assert r.returncode == 1, r.stderr
    assert SCALE_FILE in r.stderr and "do not match the lock" in r.stderr and "lockfile was not published" in r.stderr
    objs = _objects(s3, bucket)
    assert not any("lockfiles" in k for k in objs)
    assert hashlib.sha256(src.read_bytes()).hexdigest() not in " ".join(objs)  # the edited bytes never went up
    assert len(objs) == 3  # the three good files did


@pytest.mark.parametrize("fault", ["tampered", "missing", "truncated"])
def test_a_damaged_or_missing_object_is_refused_naming_it_and_nothing_becomes_visible(proj, tmp_path, s3, bucket,
                                                                                      fault):
    tp, lock = proj
    assert frt_process(["mirror", f"s3://{bucket}/p", "--variant", "torch-cpu"], cwd=tp.root).returncode == 0
    key = f"p/{_scale_key(tp, lock)}"
    good = _objects(s3, bucket)[key]
    c = s3.client()
    if fault == "missing":
        c.delete_object(Bucket=bucket, Key=key)
    else:
        c.put_object(Bucket=bucket, Key=key, Body=good.replace(b"*", b"+") if fault == "tampered" else good[:-7])
    mirror = tmp_path / "m"
    r = frt_process(["mirror", str(mirror), "--from", f"s3://{bucket}/p", "--variant", "torch-cpu"], cwd=tp.root)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    assert f"s3://{bucket}/{key}" in r.stderr and SCALE_FILE in r.stderr  # the object and the locked file
    assert ("is not in the store" if fault == "missing" else "do not match the lock") in r.stderr
    scale = mirror / "kernels--t-org--scale"
    assert not (scale / "refs").exists()  # kernels sees no snapshot of the package
    blobs = list((scale / "blobs").iterdir()) if (scale / "blobs").exists() else []
    assert all(hashlib.sha256(p.read_bytes()).hexdigest() == p.name for p in blobs)  # only verified bytes
    assert _scale_key(tp, lock).split("/")[1] not in {p.name for p in blobs}  # the damaged one is not there
    assert (mirror / "kernels--t-org--norm" / "refs" / "v1").is_file()  # the intact package is usable
    assert not (mirror / ".frt-tmp").exists()


def test_a_server_error_that_persists_is_retried_a_bounded_number_of_times(proj, tmp_path, s3, bucket):
    tp, lock = proj
    assert frt_process(["mirror", f"s3://{bucket}/p", "--variant", "torch-cpu"], cwd=tp.root).returncode == 0
    proxy = FaultProxy(s3.url, mode="500").start()
    try:
        env = {"AWS_ENDPOINT_URL": proxy.url, "FRT_STORE_ATTEMPTS": "3"}
        t0 = time.monotonic()
        r = frt_process(["mirror", str(tmp_path / "m"), "--from", f"s3://{bucket}/p", "--variant", "torch-cpu",
                     "--model", "tiny"], cwd=tp.root, env=env)
        took = time.monotonic() - t0
        assert r.returncode == 1, r.stderr
        assert "answered 500" in r.stderr and "through 3 attempt(s)" in r.stderr and "Traceback" not in r.stderr
        per_object = {}
        for _method, p in proxy.log:
            per_object[p] = per_object.get(p, 0) + 1
        assert per_object and max(per_object.values()) == 3  # bounded: 3 attempts per request, no more
        assert took < 30
        # a fault that clears: the first two answers are 500, then it works
        proxy.mode, proxy.fail_first = "pass", 2
        r = frt_process(["mirror", str(tmp_path / "m2"), "--from", f"s3://{bucket}/p", "--variant", "torch-cpu"],
                    cwd=tp.root, env=env)
        assert r.returncode == 0, r.stderr
        assert verify_mirror(lock, tmp_path / "m2", variants=["torch-cpu"]) == []
    finally:
        proxy.stop()


def test_a_stream_cut_mid_way_resumes_where_it_stopped(proj, tmp_path, s3, bucket):
    tp, lock = proj
    assert frt_process(["mirror", f"s3://{bucket}/p", "--variant", "torch-cpu"], cwd=tp.root).returncode == 0
    proxy = FaultProxy(s3.url).start()
    proxy.cut_first = 4  # every object's first GET drops after half its bytes
    try:
        r = frt_process(["mirror", str(tmp_path / "m"), "--from", f"s3://{bucket}/p", "--variant", "torch-cpu"],
                    cwd=tp.root, env={"AWS_ENDPOINT_URL": proxy.url})
    finally:
        proxy.stop()
    assert r.returncode == 0, r.stderr
    assert proxy.cut_first == 0 and sum(1 for m, p in proxy.log if m == "GET" and "/sha256/" in p) == 8
    assert verify_mirror(lock, tmp_path / "m", variants=["torch-cpu"]) == []


def test_a_stalled_server_times_out_in_bounded_time(proj, tmp_path, s3, bucket):
    tp, _ = proj
    proxy = FaultProxy(s3.url, mode="stall", stall_s=60).start()
    try:
        env = {"AWS_ENDPOINT_URL": proxy.url, "FRT_STORE_ATTEMPTS": "2", "FRT_STORE_TIMEOUT": "0.5"}
        t0 = time.monotonic()
        r = frt_process(["mirror", f"s3://{bucket}/p", "--variant", "torch-cpu"], cwd=tp.root, env=env, timeout=40)
        took = time.monotonic() - t0
    finally:
        proxy.server.shutdown()  # stalled handler threads are daemons
    assert r.returncode == 1, r.stderr
    assert "timed out through 2 attempt(s)" in r.stderr and "Traceback" not in r.stderr
    assert took < 20


def test_no_credentials_is_exit_2_with_a_hint(proj, tmp_path, s3, bucket, monkeypatch):
    tp, _ = proj
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    for args in (["mirror", f"s3://{bucket}/p", "--variant", "torch-cpu"],
                 ["mirror", str(tmp_path / "m"), "--from", f"s3://{bucket}/p", "--variant", "torch-cpu"],
                 ["receipts", "pull", f"s3://{bucket}/p"]):
        r = frt_process(args, cwd=tp.root)
        assert r.returncode == 2, (args, r.stderr)
        assert "no credentials for the object store" in r.stderr and "Traceback" not in r.stderr
        assert "hint: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE" in r.stderr
    r = frt_process(["mirror", f"s3://{bucket}/p", "--variant", "torch-cpu", "--json"], cwd=tp.root)
    doc = json.loads(r.stdout)
    assert r.returncode == 2 and doc["exit"] == 2 and "no credentials" in doc["error"]


def test_access_denied_and_no_such_bucket_are_exit_2(proj, tmp_path, s3, bucket):
    tp, _ = proj
    proxy = FaultProxy(s3.url, mode="403").start()
    try:
        r = frt_process(["mirror", f"s3://{bucket}/p", "--variant", "torch-cpu"], cwd=tp.root,
                    env={"AWS_ENDPOINT_URL": proxy.url})
    finally:
        proxy.stop()
    assert r.returncode == 2 and ": access denied (" in r.stderr and "hint:" in r.stderr, r.stderr
    r = frt_process(["mirror", str(tmp_path / "m"), "--from", "s3://frt-no-such-bucket/p", "--variant", "torch-cpu"],
                cwd=tp.root)
    assert r.returncode == 2 and "no such bucket 'frt-no-such-bucket'" in r.stderr, r.stderr
    assert not (tmp_path / "m" / "kernels--t-org--scale" / "refs").exists()
    # publishing starts with HEADs, whose 404 has no body: frt asks once whether the bucket exists
    r = frt_process(["mirror", "s3://frt-no-such-bucket/p", "--variant", "torch-cpu"], cwd=tp.root)
    assert r.returncode == 2 and "no such bucket 'frt-no-such-bucket'" in r.stderr, r.stderr


def test_a_profile_from_the_aws_config_files_is_used(proj, tmp_path, s3, bucket, monkeypatch):
    tp, _ = proj
    creds = tmp_path / "aws-credentials"
    creds.write_text(f"[fleet]\naws_access_key_id = {FAKE_KEY_ID}\naws_secret_access_key = {FAKE_SECRET}\n")
    config = tmp_path / "aws-config"
    config.write_text(f"[profile fleet]\nregion = us-east-1\nendpoint_url = {s3.url}\n")
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(k)
    env = {"AWS_PROFILE": "fleet", "AWS_SHARED_CREDENTIALS_FILE": str(creds), "AWS_CONFIG_FILE": str(config)}
    r = frt_process(["mirror", f"s3://{bucket}/p", "--variant", "torch-cpu"], cwd=tp.root, env=env)
    assert r.returncode == 0, r.stderr
    r = frt_process(["mirror", f"s3://{bucket}/p", "--variant", "torch-cpu"], cwd=tp.root,
                env={**env, "AWS_PROFILE": "nope"})
    assert r.returncode == 2 and "the AWS profile 'nope' is not in the AWS config files" in r.stderr, r.stderr


def test_bad_locations_and_flag_mixes_are_usage_errors(proj, tmp_path):
    tp, _ = proj
    for args, says in ((["mirror", "gs://b/p", "--variant", "torch-cpu"], "does not know the scheme 'gs'"),
                       (["mirror", "s3://B_/p", "--variant", "torch-cpu"], "is not a bucket name"),
                       (["mirror", "s3://bucket/../x", "--variant", "torch-cpu"], "is not a plain name"),
                       (["mirror", "file://relative/x", "--variant", "torch-cpu"], "needs an absolute path"),
                       (["mirror", "s3://bucket/p", "--from", "s3://bucket/q"], "not both"),
                       (["mirror", str(tmp_path / "m"), "--repair"], "--repair applies when publishing"),
                       (["receipts", "push", str(tmp_path)], "not an object-store URL")):
        r = frt_process(args, cwd=tp.root)
        assert r.returncode == 2 and says in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)


def test_a_link_inside_a_file_store_is_never_followed(proj, tmp_path):
    tp, lock = proj
    store, outside = tmp_path / "store", tmp_path / "outside"
    store.mkdir()
    outside.mkdir()
    (store / "sha256").symlink_to(outside)
    r = frt_process(["mirror", f"file://{store}", "--variant", "torch-cpu"], cwd=tp.root)
    assert r.returncode == 2 and "is a symbolic link" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert list(outside.iterdir()) == [] and not (store / "lockfiles").exists()
    # reading: objects behind the link are absent, never read through it
    for key, data in _locked_objects(tp, lock).items():
        (outside / key.split("/")[1]).write_bytes(data)
    (store / "lockfiles").mkdir()
    (store / "lockfiles" / "tiny.lock").write_bytes(tp.lock_path.read_bytes())
    r = frt_process(["mirror", str(tmp_path / "m"), "--from", f"file://{store}", "--variant", "torch-cpu"], cwd=tp.root)
    assert r.returncode == 1 and "is not in the store" in r.stderr and SCALE_FILE in r.stderr, r.stderr


_AUDIT = connects_script("from frt_dist.cli.main import main\nrc = main(sys.argv[2:])", after="sys.exit(rc)\n")


def test_zero_connections_to_anything_but_the_configured_endpoint(proj, tmp_path, s3, bucket):

    tp, lock = proj
    log = tmp_path / "connects.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "FRT_", "KERNELS_"))}
    env.update(HF_ENDPOINT="http://127.0.0.1:9", HF_HOME=str(tmp_path / "hf"))
    for args in (["mirror", f"s3://{bucket}/p", "--variant", "torch-cpu"],
                 ["mirror", str(tmp_path / "m"), "--from", f"s3://{bucket}/p", "--variant", "torch-cpu"]):
        r, traced = run_traced([sys.executable, "-c", _AUDIT, str(log), *args], tmp_path / "strace.log",
                               cwd=tp.root, env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        seen = json.loads(log.read_text())
        connects = [tuple(a) for a in seen if a[0] != "resolve"]
        if "--from" in args:  # the sync reads through obstore (Rust): Python's audit hook sees no socket
            assert connects == [], seen
        else:  # publishing is boto3's
            assert connects and set(connects) == {("127.0.0.1", s3.port)}, seen
        assert all(a[1] in ("127.0.0.1", "localhost") for a in seen if a[0] == "resolve"), seen
        # every connect() of every thread, whichever client made it (strace; skipped where it is not installed)
        assert traced is None or traced == {("127.0.0.1", s3.port)}, traced


@pytest.mark.slow
def test_credentials_never_appear_in_output_or_anything_written(proj, tmp_path, s3, bucket):
    tp, lock = proj
    outputs = []
    mirror = tmp_path / "m"
    proxy = FaultProxy(s3.url).start()
    try:
        runs = [(["mirror", f"s3://{bucket}/p", "--variant", "torch-cpu"], {}),
                (["mirror", f"s3://{bucket}/p", "--variant", "torch-cpu", "--json"], {}),
                (["mirror", str(mirror), "--from", f"s3://{bucket}/p", "--variant", "torch-cpu"], {}),
                (["receipts", "pull", f"s3://{bucket}/p", "--json"], {}),
                (["mirror", str(tmp_path / "m2"), "--from", "s3://frt-no-such-bucket/p", "--variant", "torch-cpu"], {}),
                (["mirror", str(tmp_path / "m3"), "--from", f"s3://{bucket}/p", "--variant", "torch-cpu"],
                 {"AWS_ENDPOINT_URL": proxy.url, "FRT_STORE_ATTEMPTS": "1", "_mode": "500"}),
                (["mirror", f"s3://{bucket}/p", "--variant", "torch-cpu", "--json"],
                 {"AWS_ENDPOINT_URL": proxy.url, "_mode": "403"}),
                (["mirror", f"s3://{bucket}/p", "--variant", "torch-cpu"], {"AWS_ENDPOINT_URL": "http://127.0.0.1:9",
                                                                             "FRT_STORE_ATTEMPTS": "1"}),
                # credentials someone put into the endpoint URL itself
                (["mirror", f"s3://{bucket}/p", "--variant", "torch-cpu"],
                 {"AWS_ENDPOINT_URL": f"http://{FAKE_KEY_ID}:{FAKE_SECRET.replace('/', '%2F')}@127.0.0.1:9",
                  "FRT_STORE_ATTEMPTS": "1"})]
        for args, env in runs:
            proxy.mode = env.pop("_mode", "pass")
            r = frt_process(args, cwd=tp.root, env=env)
            outputs += [r.stdout, r.stderr]
    finally:
        proxy.stop()
    written = [p.read_bytes() for p in [*tp.root.rglob("*"), *mirror.rglob("*")] if p.is_file()]
    written += list(_objects(s3, bucket).values())
    for secret in (FAKE_SECRET, FAKE_KEY_ID, FAKE_SECRET.replace("/", "%2F")):
        assert not any(secret in o for o in outputs), secret
        assert not any(secret.encode() in w for w in written), secret
    assert any("answered 500" in o for o in outputs) and any("cannot connect" in o for o in outputs)


def test_locking_and_resolving_never_import_the_s3_client(proj):
    import subprocess

    tp, _ = proj
    code = ("import sys; from frt_dist.cli.main import main\n"
            "assert main(['lock', '--quiet']) == 0\n"
            "main(['resolve', '--arch', 'x86_64', '--device-class', 'test-cpu', '--software', 'torch=2.13', '--quiet'])\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('boto3', 'botocore')\n"
            "             or m in ('frt_dist.distribution.objstore', 'frt_dist.distribution.fleet')))")
    r = subprocess.run([sys.executable, "-c", code], cwd=tp.root, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


@pytest.mark.parametrize("direction", ["publish", "sync"])
def test_ctrl_c_ends_promptly_with_130_and_publishes_no_lockfile(proj, tmp_path, s3, bucket, direction):
    import signal
    import subprocess

    tp, _ = proj
    if direction == "sync":
        assert frt_process(["mirror", f"s3://{bucket}/p", "--variant", "torch-cpu"], cwd=tp.root).returncode == 0
    proxy = FaultProxy(s3.url, mode="stall", stall_s=30).start()
    target = [f"s3://{bucket}/q"] if direction == "publish" else [str(tmp_path / "m"), "--from", f"s3://{bucket}/p"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "FRT_", "KERNELS_"))}
    env.update(AWS_ENDPOINT_URL=proxy.url, FRT_STORE_TIMEOUT="1.5", FRT_STORE_ATTEMPTS="1")
    p = subprocess.Popen([sys.executable, "-m", "frt_dist.cli", "mirror", *target, "--variant", "torch-cpu"],
                         cwd=tp.root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not proxy.log and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proxy.log, "frt never reached the store"
        p.send_signal(signal.SIGINT)
        t0 = time.monotonic()
        out, err = p.communicate(timeout=30)
        took = time.monotonic() - t0
    finally:
        p.kill()
        proxy.server.shutdown()
    assert p.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    assert took < 10  # in-flight requests end within their timeout; nothing new starts
    if direction == "publish":
        assert "no lockfile was published" in err
        keys = [o["Key"] for o in s3.client().list_objects_v2(Bucket=bucket).get("Contents", [])]
        assert not any(k.startswith("q/") for k in keys)
    else:
        assert not (tmp_path / "m" / "kernels--t-org--scale" / "refs").exists()


def test_a_same_size_object_planted_before_the_first_publish_is_found_and_replaced(proj, tmp_path, s3, bucket):
    """The size proves nothing: an object planted under a key before the first publish, with the
    locked file's size, is replaced (one without a checksum is downloaded and hashed; one whose
    SHA-256 checksum is another's is replaced without a download), the run says so, and the nodes
    then take what the lockfile names. Present objects put with their checksum are checked by it,
    with no GET; one put without a checksum (an older publish) is downloaded and hashed."""
    tp, lock = proj
    files = _locked_objects(tp, lock)
    key_a, key_b = sorted(files)[:2]
    c = s3.client()
    for key, how in ((key_a, "plain"), (key_b, "checksum")):
        fake = bytes(len(files[key]))  # same size, other bytes
        kw = {"ChecksumAlgorithm": "SHA256"} if how == "checksum" else {}
        c.put_object(Bucket=bucket, Key=f"p/{key}", Body=fake, **kw)
    proxy = FaultProxy(s3.url).start()
    try:
        env = {"AWS_ENDPOINT_URL": proxy.url}
        r = frt_process(["mirror", f"s3://{bucket}/p", "--variant", "torch-cpu", "--json"], cwd=tp.root, env=env)
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)["models"][0]
        assert doc["uploaded"] == 4 and doc["present"] == 0
        assert sorted(x["key"] for x in doc["replaced"]) == [key_a, key_b]
        why = {x["key"]: x["reason"] for x in doc["replaced"]}
        assert "downloaded and hashed" in why[key_a] and "checksum is not the locked file's" in why[key_b]
        assert proxy.count("GET", key_a) == 1 and proxy.count("GET", key_b) == 0  # a checksum needs no download
        assert {k.split("/", 1)[1]: v for k, v in _objects(s3, bucket).items() if "/sha256/" in k} == files

        proxy.log.clear()  # again: every object is shown by its checksum, nothing is downloaded or sent
        r = frt_process(["mirror", f"s3://{bucket}/p", "--variant", "torch-cpu"], cwd=tp.root, env=env)
        assert r.returncode == 0, r.stderr
        assert "0 object(s) uploaded, 4 already present (4 by the store's SHA-256 checksum, 0 downloaded and " \
               "hashed)" in r.stdout, r.stdout
        assert proxy.count("GET", "/sha256/") == 0 and proxy.count("PUT") == 1  # the lockfile

        c.put_object(Bucket=bucket, Key=f"p/{key_a}", Body=files[key_a])  # the right bytes, no SHA-256 kept
        proxy.log.clear()
        r = frt_process(["mirror", f"s3://{bucket}/p", "--variant", "torch-cpu"], cwd=tp.root, env=env)
        assert r.returncode == 0 and "4 already present (3 by the store's SHA-256 checksum, 1 downloaded" in r.stdout
        assert proxy.count("GET", "/sha256/") == 1 and proxy.count("PUT") == 1
    finally:
        proxy.stop()
    mirror = tmp_path / "node"
    r = frt_process(["mirror", str(mirror), "--from", f"s3://{bucket}/p", "--variant", "torch-cpu"], cwd=tp.root)
    assert r.returncode == 0, r.stderr
    assert verify_mirror(lock, mirror, variants=["torch-cpu"]) == []


def test_a_file_store_checks_a_present_object_by_its_bytes(proj, tmp_path):
    tp, lock = proj
    store = tmp_path / "shared"
    files = _locked_objects(tp, lock)
    key = sorted(files)[0]
    (store / key).parent.mkdir(parents=True)
    (store / key).write_bytes(bytes(len(files[key])))  # planted, same size
    r = frt_process(["mirror", f"file://{store}", "--variant", "torch-cpu", "--json"], cwd=tp.root)
    assert r.returncode == 0, r.stderr
    assert [x["key"] for x in json.loads(r.stdout)["models"][0]["replaced"]] == [key]
    assert (store / key).read_bytes() == files[key]


@pytest.mark.parametrize("client", ["auto", "boto3"])
def test_a_store_that_goes_away_mid_sync_says_what_is_verified_and_a_rerun_resumes(proj, tmp_path, s3, bucket,
                                                                                   monkeypatch, client):
    """The endpoint stops answering at the third request of a sync (the first package's two files
    are in): the run retries within FRT_STORE_ATTEMPTS, then exit 1 saying how many files are
    verified and that a re-run resumes; the package that got nothing leaves no folder behind."""
    from helpers.frt import frt_main

    tp, lock = proj
    r = frt_process(["mirror", f"s3://{bucket}/p", "--variant", "torch-cpu"], cwd=tp.root)
    assert r.returncode == 0, r.stderr
    proxy = FaultProxy(s3.url).start()
    proxy.gone_at = 3
    mirror = tmp_path / "node"
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
    monkeypatch.setenv("FRT_STORE_ATTEMPTS", "2")
    monkeypatch.setenv("FRT_STORE_CLIENT", client)
    try:
        rc, out, err = frt_main(["mirror", str(mirror), "--from", f"s3://{bucket}/p", "--variant", "torch-cpu",
                                 "--project", str(tp.root)])
    finally:
        proxy.stop()
    lines = err.splitlines()
    assert rc == 1 and lines[0].startswith("error: "), err
    assert "cannot connect to the endpoint" in lines[0] or "connection failed" in lines[0], lines[0]
    assert f"(2 of 4 file(s) verified in {mirror} so far)" in lines[0], lines[0]
    assert any("again" in ln and "it resumes" in ln for ln in lines if ln.startswith("hint: ")), err
    folders = sorted(p.name for p in mirror.iterdir() if not p.name.startswith("."))
    assert folders == ["kernels--t-org--norm"] or folders == ["kernels--t-org--scale"], folders  # none empty
    assert all(any((mirror / f / "blobs").iterdir()) for f in folders)
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.url)
    rc, out, err = frt_main(["mirror", str(mirror), "--from", f"s3://{bucket}/p", "--variant", "torch-cpu",
                             "--project", str(tp.root)])
    assert rc == 0 and "2 blob(s) fetched, 2 already present and verified" in out, (out, err)
    assert verify_mirror(lock, mirror, variants=["torch-cpu"]) == []
