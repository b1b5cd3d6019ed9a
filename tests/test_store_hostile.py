"""A store cannot lead a node astray: hostile endpoints (tests/helpers/hostile.py, real HTTP
servers on 127.0.0.1) against both read clients, obstore and boto3. A redirect to another host is
never followed with credentials; a trickling endpoint ends in a refusal within FRT_STORE_DEADLINE;
a listing that does not end is refused, and a 200 that is not XML is named as such; an endpoint URL
with a user name or password in it is refused without being shown.

Every call that could hang runs in a thread joined with a timeout (the test fails, it does not
hang), and times are asserted against generous multiples of the documented bound."""

from __future__ import annotations

import io
import os
import threading
import time

import pytest

from frt_dist.distribution.objstore import (
    ObstoreS3Reader,
    S3Store,
    StoreAccess,
    StoreUnavailable,
    endpoint_problem,
    open_store,
    read_client_why,
)
from helpers.hostile import Hostile
from helpers.s3server import FAKE_KEY_ID, FAKE_SECRET

KEY = "sha256/" + "ab" * 32
TOKEN = "frtSessionTokenDoNotLeak0123456789"


@pytest.fixture
def aws_env(monkeypatch, tmp_path):
    for k in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(k)
    for k, v in {"AWS_ACCESS_KEY_ID": FAKE_KEY_ID, "AWS_SECRET_ACCESS_KEY": FAKE_SECRET,
                 "AWS_DEFAULT_REGION": "us-east-1", "AWS_CONFIG_FILE": os.devnull,
                 "AWS_SHARED_CREDENTIALS_FILE": os.devnull, "AWS_EC2_METADATA_DISABLED": "true",
                 "FRT_STORE_ATTEMPTS": "2", "FRT_STORE_TIMEOUT": "3"}.items():
        monkeypatch.setenv(k, v)
    return monkeypatch


# obstore reads when the environment alone configures the store and holds no session token; boto3
# with FRT_STORE_CLIENT=boto3, and whenever a session token is set (obstore would carry it along)
CLIENTS = {"obstore": ({}, ObstoreS3Reader), "boto3": ({"FRT_STORE_CLIENT": "boto3", "AWS_SESSION_TOKEN": TOKEN}, S3Store),
           "token": ({"AWS_SESSION_TOKEN": TOKEN}, S3Store)}


@pytest.fixture(params=["obstore", "boto3"])
def client(request, aws_env):
    env, _ = CLIENTS[request.param]
    for k, v in env.items():
        aws_env.setenv(k, v)
    return request.param


def _reader(url, client):
    st = open_store(url, reading=True)
    assert type(st) is CLIENTS[client][1], read_client_why()
    return st


def _bounded(fn, limit: float):
    """(result or exception, seconds) of ``fn()`` run in a thread; the test fails if it outlives ``limit``."""
    box = {}

    def run():
        t0 = time.monotonic()
        try:
            box["r"] = fn()
        except BaseException as exc:  # handed back
            box["r"] = exc
        box["t"] = time.monotonic() - t0

    th = threading.Thread(target=run, daemon=True)
    th.start()
    th.join(limit)
    assert not th.is_alive(), f"still running after {limit} s"
    return box["r"], box["t"]


def _clean(exc):
    text = str(exc) + " ".join(getattr(exc, "hints", None) or [])
    assert FAKE_SECRET not in text and FAKE_KEY_ID not in text and TOKEN not in text, text


# ---------------------------------------------------------------------------
# redirects


@pytest.mark.parametrize("client", ["obstore", "boto3", "token"], indirect=True)
def test_a_redirect_to_another_host_never_carries_credentials(client, aws_env):
    """The endpoint answers 307 to a second server (another port, and `localhost` for 127.0.0.1):
    whatever each client does with it, no Authorization and no X-Amz-Security-Token arrive there.
    boto3 follows no redirect at all (exit 2, saying so; it used to recurse to a RecursionError);
    obstore, which follows one without the Authorization header, is not used with a session token."""
    with Hostile("serve", host="localhost") as target, Hostile("redirect", target=target) as red:
        aws_env.setenv("AWS_ENDPOINT_URL", red.url)
        st = _reader("s3://bkt/p", client)
        for call in (lambda: st.get(KEY, io.BytesIO()), lambda: st.head(KEY), lambda: st.list("receipts/sha256")):
            got, _ = _bounded(call, 60)
            if isinstance(got, BaseException):
                assert isinstance(got, (StoreAccess, StoreUnavailable)), repr(got)  # a refusal, not a traceback
                _clean(got)
            if client != "obstore":
                assert isinstance(got, StoreAccess) and got.exit_code == 2, repr(got)
                assert "answered with a redirect (307" in str(got) and "follows no redirect" in str(got)
        assert red.requests  # the endpoint was asked
        for headers in target.headers_seen():
            assert "authorization" not in headers and "x-amz-security-token" not in headers, headers
            assert FAKE_KEY_ID not in str(headers) and TOKEN not in str(headers)
        if client != "obstore":
            assert target.requests == []  # boto3 does not go there at all


# ---------------------------------------------------------------------------
# an overall deadline


def test_a_trickling_endpoint_is_refused_within_the_deadline(client, aws_env):
    """One byte every 0.2 s keeps each read inside FRT_STORE_TIMEOUT (3 s) for ever; the transfer's
    deadline (2 s, retries included) ends it with a refusal that says so."""
    aws_env.setenv("FRT_STORE_DEADLINE", "2")
    with Hostile("trickle", body=b"y" * 10_000, every_s=0.2) as slow:
        aws_env.setenv("AWS_ENDPOINT_URL", slow.url)
        st = _reader("s3://bkt/p", client)
        got, took = _bounded(lambda: st.get(KEY, io.BytesIO()), 60)
    assert isinstance(got, StoreUnavailable), repr(got)
    assert got.exit_code == 1 and "took longer than FRT_STORE_DEADLINE=2s" in str(got), str(got)
    assert any("FRT_STORE_DEADLINE" in h for h in got.hints)
    assert took < 2 * 10, took  # the bound, with room for a loaded machine; before: still running after 60 s
    _clean(got)


# ---------------------------------------------------------------------------
# listings and malformed answers


def test_a_listing_that_repeats_its_continuation_token_is_refused(client, aws_env):
    with Hostile("loop") as srv:
        aws_env.setenv("AWS_ENDPOINT_URL", srv.url)
        st = _reader("s3://bkt/p", client)
        got, _ = _bounded(lambda: st.list("receipts/sha256"), 60)
        pages = len(srv.requests)
    assert isinstance(got, StoreUnavailable), repr(got)
    assert "listing" in str(got) and "does not end is refused" in str(got), str(got)
    assert pages <= 200, pages  # it stopped (obstore reads ahead a page batch; boto3 stops at the second page)
    _clean(got)


def test_a_200_that_is_not_xml_is_reported_as_malformed_not_as_a_500(client, aws_env):
    with Hostile("badxml") as srv:
        aws_env.setenv("AWS_ENDPOINT_URL", srv.url)
        st = _reader("s3://bkt/p", client)
        got, _ = _bounded(lambda: st.list("receipts/sha256"), 60)
    assert isinstance(got, StoreUnavailable), repr(got)
    assert "answered 200 with a body that is not S3's XML" in str(got) and "500" not in str(got), str(got)
    assert got.hints
    _clean(got)


# ---------------------------------------------------------------------------
# an endpoint with userinfo


@pytest.mark.parametrize("url", [
    f"http://{FAKE_KEY_ID}:{FAKE_SECRET}@127.0.0.1:9000",  # the secret has a '/' in it
    f"http://{FAKE_KEY_ID}@127.0.0.1:9000",
    "http://usr0:p@ss@127.0.0.1:9000/",  # an '@' in the password: the host is what follows the last one
    f"https://{FAKE_SECRET}@s3.internal",
])
def test_an_endpoint_with_a_user_or_password_is_refused_without_showing_it(url, aws_env, tmp_path):
    from helpers.frt import frt_main

    assert endpoint_problem(url)
    for client in ("auto", "boto3"):
        aws_env.setenv("FRT_STORE_CLIENT", client)
        aws_env.setenv("AWS_ENDPOINT_URL", url)
        with pytest.raises(StoreAccess) as ei:
            open_store("s3://bkt/p", reading=True)
        assert ei.value.exit_code == 2 and "AWS_ENDPOINT_URL cannot be used" in str(ei.value), str(ei.value)
        for secret in (FAKE_SECRET, FAKE_KEY_ID, "p@ss", "usr0"):
            assert secret not in str(ei.value) + " ".join(ei.value.hints)
    (tmp_path / "lockfiles").mkdir()
    rc, out, err = frt_main(["mirror", str(tmp_path / "m"), "--from", "s3://bkt/p", "--project", str(tmp_path)])
    assert rc == 2 and "AWS_ENDPOINT_URL cannot be used" in err and "hint:" in err, err
    assert FAKE_SECRET not in out + err and FAKE_KEY_ID not in out + err and "p@ss" not in out + err


def test_plain_endpoints_pass_and_broken_ones_are_refused_without_being_shown():
    for ok in ("http://127.0.0.1:9000", "https://minio.internal", "http://[::1]:9000/", "HTTP://Host:1"):
        assert endpoint_problem(ok) is None, ok
    for bad, says in (("http://u:pa/ss@host", "user name or password"), ("ftp://host", "not an http"), ("http://", "no host"),
                      ("http://[::1", "not a URL"), ("http://host:port", "not a URL"),
                      ("http://h%20ost", "not a plain"), ("http://127.0.0.1:9?x", "not a plain"),
                      ("http://-h:9", "not a plain"), ("http://127.0.0.1:9/a b", "not a plain")):
        why = endpoint_problem(bad)
        assert why and says in why, (bad, why)
        assert "pa/ss" not in why and (bad.split("://")[-1] or "-") not in why


# ---------------------------------------------------------------------------
# wrong credentials, against a moto server that checks them


@pytest.fixture(scope="module")
def checking_s3():
    """moto's server with its authentication on (``INITIAL_NO_AUTH_ACTION_COUNT=0``): a key it does
    not know is refused as S3 refuses it (403 InvalidAccessKeyId)."""
    from helpers.s3server import free_port, start_moto

    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["INITIAL_NO_AUTH_ACTION_COUNT"] = "0"
    proc, log = start_moto(port, env)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


@pytest.mark.subprocess
def test_wrong_credentials_read_the_same_from_both_clients(checking_s3, aws_env, tmp_path):
    from helpers.factories import tiny_project
    from helpers.frt import frt_main

    tp = tiny_project(tmp_path)
    tp.lock()
    aws_env.setenv("AWS_ENDPOINT_URL", checking_s3)
    said = {}
    for client in ("auto", "boto3"):
        aws_env.setenv("FRT_STORE_CLIENT", client)
        assert read_client_why()[0] == ("obstore" if client == "auto" else "boto3")
        for verb, call in (("get", lambda st: st.get(KEY, io.BytesIO())), ("head", lambda st: st.head(KEY)),
                           ("list", lambda st: st.list("receipts/sha256"))):
            with pytest.raises(StoreAccess) as ei:
                call(open_store("s3://bkt-x/p", reading=True))
            said[client, verb] = (str(ei.value), ei.value.hints, ei.value.exit_code)
            _clean(ei.value)
        rc, out, err = frt_main(["mirror", str(tmp_path / f"m-{client}"), "--from", "s3://bkt-x/p", "--variant",
                                 "torch-cpu", "--project", str(tp.root)])
        said[client, "sync"] = (rc, err.replace(str(tmp_path / f"m-{client}"), "DIR"))
        assert rc == 2 and "access denied (InvalidAccessKeyId)" in err and "hint: " in err, err
        assert FAKE_SECRET not in out + err and FAKE_KEY_ID not in out + err
        assert not list((tmp_path / f"m-{client}").glob("kernels--*"))  # a failed sync leaves no empty package folder
    for what in ("get", "head", "list", "sync"):
        assert said["auto", what] == said["boto3", what], what
    assert "access denied (InvalidAccessKeyId)" in said["auto", "get"][0]


def test_an_endpoint_obstore_would_panic_on_is_refused_before_either_client_sees_it(client, aws_env):
    """obstore's HTTP layer panics (a Rust panic: a BaseException past `except Exception`, with a Rust
    backtrace on stderr) on a host urllib.parse takes, such as `h%20ost`; frt refuses it first."""
    aws_env.setenv("AWS_ENDPOINT_URL", "http://h%20ost:9000")
    got, _ = _bounded(lambda: open_store("s3://bkt/p", reading=True).head(KEY), 30)
    assert isinstance(got, StoreAccess) and got.exit_code == 2, repr(got)
    assert "AWS_ENDPOINT_URL cannot be used: it is not a plain scheme://host[:port] URL" in str(got)


def test_a_client_configuration_error_never_shows_the_credentials(monkeypatch):
    """Planted defect this catches: the configuration error's text no longer scrubbed of credentials (``_scrub`` dropped)."""
    from frt_dist.distribution.objstore import StoreAccess, open_store

    for var, value in {"AWS_ACCESS_KEY_ID": FAKE_KEY_ID, "AWS_SECRET_ACCESS_KEY": FAKE_SECRET,
                       "AWS_CONFIG_FILE": os.devnull,
                       "AWS_SHARED_CREDENTIALS_FILE": os.devnull, "AWS_EC2_METADATA_DISABLED": "true",
                       "FRT_STORE_CLIENT": "boto3",
                       # a region botocore refuses and quotes, carrying both credentials (a pasted line gone
                       # wrong); an endpoint URL with user:password@ is refused before any client sees it
                       # (tests/test_store_hostile.py), so this is the way left to reach botocore's own text
                       "AWS_DEFAULT_REGION": f"{FAKE_KEY_ID}/{FAKE_SECRET}"}.items():
        monkeypatch.setenv(var, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_REGION", raising=False)
    with pytest.raises(StoreAccess) as e:
        open_store("s3://bucket-x/p").head("k")
    text = str(e.value) + " ".join(e.value.hints)
    assert "the object-store configuration is not usable" in text, text
    assert FAKE_SECRET not in text and FAKE_KEY_ID not in text, text


def test_a_call_the_deadline_cannot_interrupt_is_abandoned_at_the_deadline():
    """``base.deadline.bounded``, under the obstore reader's GET: the iteration runs in a helper thread, and a
    caller waiting on a call blocked where no timeout reaches (obstore's runtime after a fork, say) gets
    ``DeadlinePassed`` when the deadline passes; the helper is let go once the blocked call returns, and an
    expired deadline refuses a new iteration before it starts anything."""
    from frt_dist.base.deadline import Deadline, DeadlinePassed, bounded

    release, started, stopped = threading.Event(), [], threading.Event()

    def blocked():
        try:
            started.append(threading.current_thread())
            yield b"head"
            release.wait(60)  # blocked until the test lets it go
            yield b"late"
        finally:
            stopped.set()

    deadline = Deadline(0.2).start()
    box = {}

    def caller():
        it = bounded(blocked, deadline)
        box["first"] = next(it)
        try:
            next(it)
        except DeadlinePassed:
            box["passed"] = True
        finally:
            it.close()

    th = threading.Thread(target=caller, daemon=True)
    th.start()
    th.join(30)
    assert not th.is_alive(), "the caller was still waiting 30 s after a 0.2 s deadline"
    assert box == {"first": b"head", "passed": True}
    assert not stopped.is_set()  # the helper is still in the blocked call
    release.set()
    assert stopped.wait(30)  # and ends once it returns, told to stop
    deadline.finish()
    with pytest.raises(DeadlinePassed):
        bounded(lambda: started.append("again") or iter(()), deadline)
    assert len(started) == 1
