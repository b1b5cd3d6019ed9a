"""The read client: reads of an ``s3://`` store go through obstore when the
environment alone configures the store, through boto3 otherwise (``objstore.read_client_why``),
and both map every fault to the same frt errors. Against the real moto server and the fault proxy
in front of it (tests/helpers/s3server.py); each fault test runs once per client."""

from __future__ import annotations

import io
import os
import sys
import time

import pytest

from frt_dist.distribution.objstore import (
    ObjectMissing,
    ObstoreS3Reader,
    S3Store,
    StoreAccess,
    StoreUnavailable,
    open_store,
    read_client_why,
)
from frt_dist.errors import UsageError
from helpers.s3server import FAKE_KEY_ID, FAKE_SECRET, FaultProxy

pytestmark = pytest.mark.subprocess  # every test here starts frt or a server as a process

KEY = "sha256/" + "ab" * 32
DATA = os.urandom(3 << 20) + b"end"


# ---------------------------------------------------------------------------
# which client


def test_the_environment_alone_picks_obstore_and_anything_only_boto3_reads_picks_boto3(bucket, tmp_path, monkeypatch):
    assert read_client_why() == ("obstore", "the environment configures the store")
    assert isinstance(open_store(f"s3://{bucket}/p", reading=True), ObstoreS3Reader)
    assert isinstance(open_store(f"s3://{bucket}/p"), S3Store)  # writers are boto3's, always
    config = tmp_path / "config"

    def case(says, **env):
        with monkeypatch.context() as m:
            for k, v in env.items():
                m.delenv(k, raising=False) if v is None else m.setenv(k, v)
            client, why = read_client_why()
            assert client == "boto3" and says in why, (env, why)
            try:
                assert type(open_store(f"s3://{bucket}/p", reading=True)) is S3Store
            except StoreAccess as exc:  # boto3's own answer to a profile or role that is not there
                assert any(w in str(exc) for w in ("profile", "no credentials", "user name or password")), str(exc)
                assert FAKE_KEY_ID not in str(exc)  # the endpoint's userinfo is never shown

    case("AWS_PROFILE is set", AWS_PROFILE="fleet")
    case("AWS_ROLE_ARN is set", AWS_ROLE_ARN="arn:aws:iam::1:role/r", AWS_WEB_IDENTITY_TOKEN_FILE="/t")
    case("AWS_ENDPOINT_URL_S3 is set", AWS_ENDPOINT_URL_S3="http://127.0.0.1:9")
    case("no key pair", AWS_SECRET_ACCESS_KEY=None)
    case("no key pair", AWS_ACCESS_KEY_ID="")
    case("not a plain scheme://host", AWS_ENDPOINT_URL=f"http://{FAKE_KEY_ID}@127.0.0.1:9")
    case("without a region", AWS_ENDPOINT_URL=None, AWS_DEFAULT_REGION=None)
    case("AWS_SESSION_TOKEN is set", AWS_SESSION_TOKEN="tok")  # obstore would carry it along a redirect
    case("FRT_STORE_CLIENT=boto3", FRT_STORE_CLIENT="boto3")
    config.write_text("[default]\nregion = eu-west-1\n")
    case("has [default] settings", AWS_CONFIG_FILE=str(config))
    config.write_text("region = eu-west-1\n")  # no section header: boto3's problem to report
    case("is not plain", AWS_CONFIG_FILE=str(config))
    with monkeypatch.context() as m:  # obstore not installed
        m.setitem(sys.modules, "obstore", None)
        case("obstore is not installed")
    # what is fine for obstore: other profiles in the config file, no region with an endpoint
    config.write_text("[profile other]\nregion = eu-west-1\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    assert read_client_why()[0] == "obstore"
    monkeypatch.setenv("FRT_STORE_CLIENT", "rust")
    with pytest.raises(UsageError) as bad:
        read_client_why()
    assert bad.value.exit_code == 2 and "FRT_STORE_CLIENT='rust'" in str(bad.value)


def test_the_obstore_reader_reads_and_never_writes(s3, bucket):
    c = s3.client()
    c.put_object(Bucket=bucket, Key=f"p/{KEY}", Body=DATA)
    c.put_object(Bucket=bucket, Key="p/receipts/sha256/x.json", Body=b"{}")
    st = open_store(f"s3://{bucket}/p", reading=True)
    assert isinstance(st, ObstoreS3Reader)
    assert st.head(KEY) == len(DATA) and st.head("sha256/" + "cd" * 32) is None
    got = []
    out = io.BytesIO()
    assert st.get(KEY, out, progress=got.append) == len(DATA) and out.getvalue() == DATA and sum(got) == len(DATA)
    out = io.BytesIO()
    assert st.get(KEY, out, limit=10) == 11 and out.getvalue() == DATA[:11]  # stops one byte past the limit
    assert st.get_bytes("receipts/sha256/x.json") == b"{}" and st.get_bytes("receipts/sha256/y.json") is None
    assert st.list("receipts/sha256") == [("receipts/sha256/x.json", 2)] and st.list("lockfiles") == []
    for put in (lambda: st.put_bytes(KEY, b"x"), lambda: st.put_file(KEY, __file__)):
        with pytest.raises(UsageError, match="opened for reading"):
            put()
    with pytest.raises(ValueError):
        st.head("../outside")


# ---------------------------------------------------------------------------
# the same frt errors from both clients


@pytest.fixture(params=["auto", "boto3"])
def client(request, monkeypatch):
    monkeypatch.setenv("FRT_STORE_CLIENT", request.param)
    return request.param


def _reader(url, client):
    st = open_store(url, reading=True)
    assert isinstance(st, ObstoreS3Reader if client == "auto" else S3Store)
    return st


def _no_secret(exc):
    text = str(exc) + " ".join(exc.hints or [])
    assert FAKE_SECRET not in text and FAKE_KEY_ID not in text, text


def test_missing_object_and_missing_bucket(s3, bucket, client):
    st = _reader(f"s3://{bucket}/p", client)
    with pytest.raises(ObjectMissing) as miss:
        st.get(KEY, io.BytesIO())
    assert miss.value.exit_code == 1 and f"s3://{bucket}/p/{KEY}: no such object" in str(miss.value)
    for verb in ("get", "head"):  # a GET's 404 names the bucket in its body; a HEAD's has none: frt asks
        st = _reader("s3://frt-no-such-bucket/p", client)
        with pytest.raises(StoreAccess) as nob:
            st.get(KEY, io.BytesIO()) if verb == "get" else st.head(KEY)
        assert nob.value.exit_code == 2 and "no such bucket 'frt-no-such-bucket'" in str(nob.value), verb
        assert nob.value.hints
        _no_secret(nob.value)


def test_access_denied_is_exit_2_with_the_hints(s3, bucket, client, monkeypatch):
    proxy = FaultProxy(s3.url, mode="403").start()
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
        st = _reader(f"s3://{bucket}/p", client)
        for call, code in ((lambda: st.get(KEY, io.BytesIO()), "AccessDenied"), (lambda: st.head(KEY), "403"),
                           (lambda: st.list("receipts/sha256"), "AccessDenied")):  # a HEAD's answer has no body
            with pytest.raises(StoreAccess) as denied:
                call()
            assert denied.value.exit_code == 2 and f"access denied ({code})" in str(denied.value), str(denied.value)
            assert any("s3:GetObject" in h for h in denied.value.hints)
            _no_secret(denied.value)
    finally:
        proxy.stop()


def test_a_persisting_500_takes_exactly_the_attempts_then_is_unavailable(s3, bucket, client, monkeypatch):
    proxy = FaultProxy(s3.url, mode="500").start()
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
        monkeypatch.setenv("FRT_STORE_ATTEMPTS", "3")
        st = _reader(f"s3://{bucket}/p", client)
        with pytest.raises(StoreUnavailable) as ei:
            st.get(KEY, io.BytesIO())
        assert ei.value.exit_code == 1
        assert "the server answered 500 InternalError through 3 attempt(s)" in str(ei.value), str(ei.value)
        assert proxy.count("GET", KEY) == 3  # bounded: no more, no fewer
        _no_secret(ei.value)
        proxy.mode, proxy.fail_first = "pass", 2  # a fault that clears within the attempts is retried through
        s3.client().put_object(Bucket=bucket, Key=f"p/{KEY}", Body=DATA)
        out = io.BytesIO()
        assert st.get(KEY, out) == len(DATA) and out.getvalue() == DATA
    finally:
        proxy.stop()


def test_a_stall_times_out_in_bounded_time(s3, bucket, client, monkeypatch):
    proxy = FaultProxy(s3.url, mode="stall", stall_s=12).start()  # longer than 2 attempts of 0.5 s, and than took's cap
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
        monkeypatch.setenv("FRT_STORE_ATTEMPTS", "2")
        monkeypatch.setenv("FRT_STORE_TIMEOUT", "0.5")  # a stall is a stall: a short limit shows it as well
        st = _reader(f"s3://{bucket}/p", client)
        t0 = time.monotonic()
        with pytest.raises(StoreUnavailable) as ei:
            st.get(KEY, io.BytesIO())
        took = time.monotonic() - t0
    finally:
        proxy.server.shutdown()  # stalled handler threads are daemons
    assert "timed out through 2 attempt(s) (FRT_STORE_TIMEOUT=0.5s each)" in str(ei.value), str(ei.value)
    assert took < 10 and proxy.count("GET", KEY) == 2
    _no_secret(ei.value)


def test_a_refused_connection_names_the_endpoint(bucket, client, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("FRT_STORE_ATTEMPTS", "1")
    st = _reader(f"s3://{bucket}/p", client)
    with pytest.raises(StoreUnavailable) as ei:
        st.get(KEY, io.BytesIO())
    assert "cannot connect to the endpoint http://127.0.0.1:9" in str(ei.value), str(ei.value)
    _no_secret(ei.value)


def test_a_cut_stream_resumes_from_the_next_byte(s3, bucket, client, monkeypatch):
    s3.client().put_object(Bucket=bucket, Key=f"p/{KEY}", Body=DATA)
    proxy = FaultProxy(s3.url).start()
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
        st = _reader(f"s3://{bucket}/p", client)
        proxy.cut_first = 1  # the first GET drops after half its bytes
        out = io.BytesIO()
        assert st.get(KEY, out) == len(DATA) and out.getvalue() == DATA  # each byte once, in order
        assert proxy.cut_first == 0 and proxy.count("GET", KEY) == 2
        proxy.cut_first = 5  # cut every time: fails cleanly after the attempts
        monkeypatch.setenv("FRT_STORE_ATTEMPTS", "2")
        st = _reader(f"s3://{bucket}/p", client)
        proxy.log.clear()
        with pytest.raises(StoreUnavailable) as ei:
            st.get(KEY, io.BytesIO())
        assert proxy.count("GET", KEY) == 2, proxy.log  # the attempts bound the resumes too
        _no_secret(ei.value)
    finally:
        proxy.stop()


def test_a_child_forked_after_obstore_ran_reads_with_boto3_instead_of_hanging(s3, bucket):
    """obstore's runtime does not survive a fork (a child's first request would hang): a server that
    loaded through the store and then forks workers still loads in them, through boto3."""
    import subprocess

    s3.client().put_object(Bucket=bucket, Key=f"p/{KEY}", Body=DATA)
    code = f"""
import io, os, sys
from frt_dist.distribution.objstore import open_store, read_client_why
st = open_store("s3://{bucket}/p", reading=True)
assert type(st).__name__ == "ObstoreS3Reader" and st.get("{KEY}", io.BytesIO()) == {len(DATA)}
pid = os.fork()
if pid == 0:
    st2 = open_store("s3://{bucket}/p", reading=True)
    print(type(st2).__name__, read_client_why()[1], st2.get("{KEY}", io.BytesIO()), flush=True)
    os._exit(0)
os._exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[0] == "S3Store" and "forked from one that had used obstore" in r.stdout
    assert r.stdout.split()[-1] == str(len(DATA))


@pytest.mark.parametrize("client", ["boto3", "auto"])
@pytest.mark.subprocess
def test_a_resumed_read_never_splices_an_object_replaced_after_the_cut(s3, bucket, monkeypatch, client):
    """Planted defect this catches: the resumed ranged GET no longer pinned to the object's ETag. The object is replaced
    between the cut and the resume: the read must fail (or return one whole object), never the
    first object's head joined to the second's tail."""
    from frt_dist.distribution.objstore import open_store
    from frt_dist.errors import FrtError

    key = "sha256/" + "cd" * 32
    old, new = os.urandom(1 << 20), os.urandom(1 << 20)
    s3.client().put_object(Bucket=bucket, Key=f"p/{key}", Body=old)
    proxy = FaultProxy(s3.url).start()
    try:
        for var, value in s3.env(endpoint=proxy.url).items():
            monkeypatch.setenv(var, value)
        monkeypatch.setenv("FRT_STORE_CLIENT", client)
        st = open_store(f"s3://{bucket}/p", reading=True)
        proxy.cut_first = 1
        proxy.on_cut = lambda: s3.client().put_object(Bucket=bucket, Key=f"p/{key}", Body=new)
        out = io.BytesIO()
        try:
            st.get(key, out)
        except FrtError:
            return  # refused: the object changed under the read
        assert proxy.cut_first == 0  # the cut happened
        assert out.getvalue() in (old, new), "a resumed read spliced two versions of the object"
    finally:
        proxy.stop()
