"""``S3Store``: an S3-API bucket through boto3, for every write and for reads the environment does not
configure alone (``frt_dist.distribution.objstore.read_client_why``). Imported when a URL is used.

Hardened against the store it talks to: one overall deadline per transfer (``objstore._deadline``,
whose watcher shuts the sockets this client's connection pools record), no redirect followed at an
endpoint that is not AWS (``_harden``), a 200 that is not S3's XML named as such; errors mapped onto
frt's (``StoreAccess``, ``ObjectMissing``, ``StoreUnavailable``), messages naming no credential.
"""

from __future__ import annotations

import os
import re
import threading

from .. import settings
from ..errors import FrtError, ObjectMissing, StoreAccess, StoreUnavailable
from .store_api import (
    _ACCESS_CODES,
    _CHUNK,
    _CRED_HINTS,
    _LIST_PAGES,
    _TLS,
    Location,
    ObjectStore,
    Pump,
    StoreInfo,
    _check_key,
    _deadline,
    _deadline_error,
    _DeadlinePassed,
    _endless_listing,
    _malformed_error,
    _no_such_bucket,
    store_config,
)

__all__ = ["S3Store"]


class S3Store(ObjectStore):
    """An S3-API bucket through boto3 (the standard AWS environment and profile chain)."""

    def __init__(self, loc: Location):
        try:
            import boto3  # noqa: PLC0415
            from botocore.config import Config  # noqa: PLC0415
        except ImportError:
            raise StoreAccess(f"{loc.url}: s3:// locations need boto3, which is not installed",
                              hints=["pip install 'frt-dist[fleet]'"]) from None
        from botocore import exceptions as bex  # noqa: PLC0415

        self.loc, self.url, self._bex = loc, loc.url, bex
        cfg = store_config()
        self.attempts = cfg["attempts"]
        self._checked_bucket = False
        self._lock = threading.Lock()
        try:
            session = _session(boto3)
            self.client = session.client(
                # botocore reads AWS_DEFAULT_REGION only; AWS_REGION (which the other AWS SDKs and obstore
                # read first) is documented here too, so it wins when set, as it does in those
                "s3", region_name=settings.value("AWS_REGION") or None,
                config=Config(retries={"mode": "standard", "total_max_attempts": self.attempts},
                                    connect_timeout=cfg["timeout"], read_timeout=cfg["timeout"],
                                    max_pool_connections=32, signature_version="s3v4",
                                    # botocore >= 1.36 adds CRC checksums to every PUT by default, which
                                    # several S3-API stores (older MinIO, Ceph, GCS interop) refuse; frt
                                    # checks every byte against the lock's digest itself
                                    request_checksum_calculation="when_required",
                                    response_checksum_validation="when_required"))
        except Exception as exc:
            raise self._error(exc, "") from None
        self.deadline = cfg["deadline"]
        self._checksums = True  # False once the server refused a PUT's SHA-256 checksum (then size + download)
        _harden(self.client)

    def _key(self, key: str) -> str:
        _check_key(key)
        return f"{self.loc.prefix}/{key}" if self.loc.prefix else key

    # -- errors -----------------------------------------------------------------
    def _error(self, exc: Exception, key: str, *, missing_ok: bool = False) -> FrtError:
        bex = self._bex
        where = self.where(key) if key else self.url
        if isinstance(exc, FrtError):
            raise exc  # ours (the caller's writer: a full disk), not the store's
        transfer = getattr(_TLS, "transfer", None)
        if isinstance(exc, _DeadlinePassed) or (transfer is not None and transfer.expired):
            return _deadline_error(where, self.deadline)
        if isinstance(exc, (bex.NoCredentialsError, bex.PartialCredentialsError)):
            return StoreAccess(f"{where}: no credentials for the object store", hints=list(_CRED_HINTS))
        if isinstance(exc, bex.ProfileNotFound):
            profile = settings.raw("AWS_PROFILE") or ""
            return StoreAccess(f"{where}: the AWS profile {profile!r} is not in the AWS config files",
                               hints=["check AWS_PROFILE, AWS_CONFIG_FILE and AWS_SHARED_CREDENTIALS_FILE"])
        if isinstance(exc, bex.ClientError):
            err = exc.response.get("Error", {}) or {}
            code = str(err.get("Code") or "")
            status = int((exc.response.get("ResponseMetadata") or {}).get("HTTPStatusCode") or 0)
            if code in _ACCESS_CODES or status == 403:
                return StoreAccess(f"{where}: access denied ({code or status})", hints=list(_CRED_HINTS))
            if 300 <= status < 400 or code in _REDIRECT_CODES:
                return _redirect_error(where, status, code)
            if status == 500 and getattr(_TLS, "malformed", False):
                return _malformed_error(where, self.attempts)
            if code == "NoSuchBucket":
                return StoreAccess(f"{self.url}: no such bucket {self.loc.bucket!r}",
                                   hints=["check the bucket name and AWS_ENDPOINT_URL / AWS_REGION"])
            if code in ("NoSuchKey", "404", "NotFound") or status == 404:
                return ObjectMissing(f"{where}: no such object", key=key)
            if status >= 500 or code in ("SlowDown", "InternalError", "ServiceUnavailable"):
                return StoreUnavailable(f"{where}: the server answered {status or code} {code} through "
                                        f"{self.attempts} attempt(s)",
                                        hints=["the store is failing; try again later (FRT_STORE_ATTEMPTS raises the "
                                               "retry cap)"])
            return StoreUnavailable(f"{where}: the server refused the request ({code or status})")
        if isinstance(exc, (bex.ConnectTimeoutError, bex.ReadTimeoutError)) or isinstance(exc, TimeoutError):
            return StoreUnavailable(f"{where}: timed out through {self.attempts} attempt(s) "
                                    f"(FRT_STORE_TIMEOUT={store_config()['timeout']:g}s each)",
                                    hints=["check the endpoint (AWS_ENDPOINT_URL) and the network; "
                                           "FRT_STORE_TIMEOUT sets the limit"])
        if isinstance(exc, bex.EndpointConnectionError):
            return StoreUnavailable(f"{where}: cannot connect to the endpoint {_safe_url(self.client.meta.endpoint_url)}",
                                    hints=["check AWS_ENDPOINT_URL (and AWS_REGION)"])
        if isinstance(exc, (bex.ConnectionError, bex.HTTPClientError, bex.IncompleteReadError,
                            bex.ResponseStreamingError, ConnectionError)):
            return StoreUnavailable(f"{where}: the connection failed through {self.attempts} attempt(s) "
                                    f"({type(exc).__name__})")
        if isinstance(exc, (ValueError, bex.BotoCoreError)) and not isinstance(exc, FrtError):
            return StoreAccess(f"{where}: the object-store configuration is not usable ({type(exc).__name__}: "
                               f"{_scrub(str(exc))})", hints=["check AWS_ENDPOINT_URL, AWS_REGION and AWS_PROFILE"])
        raise exc

    def _bucket_missing(self) -> bool:
        """After a 404 on an object: is it the bucket that is missing? (HEAD has no error body.)"""
        try:
            self.client.head_bucket(Bucket=self.loc.bucket)
            return False
        except self._bex.ClientError as exc:
            status = int((exc.response.get("ResponseMetadata") or {}).get("HTTPStatusCode") or 0)
            return status == 404
        except Exception:
            return False

    def _call(self, fn, key: str, **kw):
        with _deadline(self.deadline):  # one request and its retries (inside a get: the get's own)
            _TLS.malformed = False
            try:
                return fn(**kw)
            except FrtError:
                raise
            except Exception as exc:
                raise _no_such_bucket(self, self._error(exc, key)) from None

    # -- verbs ------------------------------------------------------------------
    def head(self, key: str) -> int | None:
        try:
            r = self._call(self.client.head_object, key, Bucket=self.loc.bucket, Key=self._key(key))
        except ObjectMissing:
            return None
        return int(r["ContentLength"])

    def stat(self, key: str) -> StoreInfo | None:
        """HEAD with ``ChecksumMode=ENABLED``: the size, and the object's full SHA-256 when the server
        keeps one (an object frt put with its checksum; not a multipart object's checksum of part
        checksums, and not on a server that ignores the header)."""
        try:
            r = self._call(self.client.head_object, key, Bucket=self.loc.bucket, Key=self._key(key),
                           ChecksumMode="ENABLED")
        except ObjectMissing:
            return None
        sha = r.get("ChecksumSHA256")
        full = isinstance(sha, str) and "-" not in sha and r.get("ChecksumType", "FULL_OBJECT") == "FULL_OBJECT"
        return StoreInfo(int(r["ContentLength"]), sha if full else None)

    def get(self, key, out, *, limit=None, progress=None) -> int:
        """A stream cut mid-way resumes where it stopped (a ranged GET of the same ETag), within
        the attempt cap: ``out`` only ever receives each byte once, in order. The whole transfer,
        resumes included, ends within FRT_STORE_DEADLINE (``_deadline``)."""
        with _deadline(self.deadline):
            return self._get(key, out, limit=limit, progress=progress)

    def _get(self, key, out, *, limit=None, progress=None) -> int:
        pump, etag = Pump(out, limit, progress), None
        for attempt in range(self.attempts):
            kw = {"Range": f"bytes={pump.n}-"} if pump.n else {}
            if etag:
                kw["IfMatch"] = etag  # the same object, not one replaced meanwhile
            r = self._call(self.client.get_object, key, Bucket=self.loc.bucket, Key=self._key(key), **kw)
            etag = etag or r.get("ETag")
            body = r["Body"]
            try:
                return pump.feed(body.iter_chunks(_CHUNK))
            except Exception as exc:
                body.close()
                err = self._error(exc, key)
                if attempt + 1 >= self.attempts or not isinstance(err, StoreUnavailable) or _TLS.transfer.expired:
                    raise err from None
        raise StoreUnavailable(f"{self.where(key)}: could not be read")  # pragma: no cover

    def put_file(self, key, path, *, progress=None, sha256: str | None = None) -> None:
        """One PUT (with ``sha256``, the base64 SHA-256 of the file, as its checksum: the server
        checks the bytes it got against it and keeps it for ``stat``) up to 5 GiB; a multipart
        upload above (16 MiB parts). In the calling thread, so its deadline holds."""
        size = os.path.getsize(path)
        if size < _MULTIPART:
            with open(path, "rb") as body:
                self._put_object(key, body, sha256)
            if progress:
                progress(size)
            return
        from boto3.s3.transfer import TransferConfig  # noqa: PLC0415

        tc = TransferConfig(multipart_threshold=_MULTIPART, multipart_chunksize=16 << 20, use_threads=False)
        extra = {"ChecksumAlgorithm": "SHA256"} if self._checksums else {}
        self._call(self.client.upload_file, key, Filename=str(path), Bucket=self.loc.bucket, Key=self._key(key),
                   Config=tc, Callback=progress, ExtraArgs=extra)

    def put_bytes(self, key, data: bytes) -> None:
        import base64  # noqa: PLC0415
        import hashlib  # noqa: PLC0415

        data = bytes(data)
        self._put_object(key, data, base64.b64encode(hashlib.sha256(data).digest()).decode("ascii"))

    def _put_object(self, key, body, sha256: str | None) -> None:
        kw = {"Bucket": self.loc.bucket, "Key": self._key(key), "Body": body}
        if sha256 and self._checksums:
            try:
                return self._call(self.client.put_object, key, ChecksumAlgorithm="SHA256", ChecksumSHA256=sha256, **kw)
            except StoreUnavailable as exc:  # an S3-API server that does not take checksums: once more without
                if not any(c in str(exc) for c in _NO_CHECKSUM_CODES):
                    raise
                self._checksums = False
                if hasattr(body, "seek"):
                    body.seek(0)
        self._call(self.client.put_object, key, **kw)

    def list(self, prefix: str) -> list[tuple[str, int]]:
        """Every key under ``prefix``, page by page. A listing that does not end (a continuation
        token seen before, none where one is due, more than ``_LIST_PAGES`` pages) is refused."""
        full = self._key(prefix.rstrip("/")) + "/"
        out = []
        token, tokens = None, set()
        with _deadline(self.deadline):
            for page in range(1, _LIST_PAGES + 1):
                kw = {"Bucket": self.loc.bucket, "Prefix": full}
                if token:
                    kw["ContinuationToken"] = token
                r = self._call(self.client.list_objects_v2, prefix, **kw)
                for obj in r.get("Contents", []) or []:
                    rel = obj["Key"][len(self.loc.prefix) + 1:] if self.loc.prefix else obj["Key"]
                    out.append((rel, int(obj.get("Size", 0))))
                if not r.get("IsTruncated"):
                    return sorted(out)
                token = r.get("NextContinuationToken")
                if not token or token in tokens:
                    raise _endless_listing(self.where(prefix), page, "gave a continuation token it had given before"
                                           if token else "is truncated but gives no continuation token")
                tokens.add(token)
        raise _endless_listing(self.where(prefix), _LIST_PAGES, f"is longer than {_LIST_PAGES} pages")

    def close(self) -> None:
        try:
            self.client.close()
        except Exception:
            pass


_SESSIONS: dict[tuple, object] = {}
_SESSIONS_LOCK = threading.Lock()


def _session(boto3):
    """One boto3 session per process and AWS environment: a session loads botocore's service models
    (most of a client's start-up cost) and resolves credentials once (refreshable ones refresh
    themselves). Keyed by every ``AWS_*`` variable, so a changed environment gets a new session."""
    key = tuple(sorted(settings.family("AWS_").items()))
    with _SESSIONS_LOCK:
        got = _SESSIONS.get(key)
        if got is None:
            got = _SESSIONS[key] = boto3.session.Session()
        return got


def _safe_url(url: str) -> str:
    """An endpoint URL without any ``user:password@`` part someone put in it."""
    return re.sub(r"^([A-Za-z][A-Za-z0-9+.\-]*://)[^/@]*@", r"\1", str(url))


def _scrub(text: str) -> str:
    """A message with anything that looks like a credential from the environment taken out."""
    for var in ("AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID", "AWS_SESSION_TOKEN"):
        v = settings.raw(var)
        if v and len(v) >= 4:
            text = text.replace(v, "***")
    return text


# one PUT carries up to 5 GiB on S3: every file frt publishes below that goes as one, so the server
# keeps its full-object SHA-256 (a multipart object's checksum is a checksum of its parts' checksums,
# which says nothing of the whole without a download); larger ones go multipart
_MULTIPART = 5 << 30
_REDIRECT_CODES = {"PermanentRedirect", "TemporaryRedirect", "Redirect", "301", "302", "303", "307", "308"}
_NO_CHECKSUM_CODES = ("NotImplemented", "InvalidRequest", "InvalidArgument", "(501)")


def _redirect_error(where: str, status: int, code: str) -> FrtError:
    what = " ".join(dict.fromkeys(x for x in (str(status or ""), code) if x))
    return StoreAccess(f"{where}: the endpoint answered with a redirect ({what}); "
                       "frt follows no redirect from a store (its credentials would go along)",
                       hints=["point AWS_ENDPOINT_URL at the store itself, and AWS_REGION at the bucket's region"])


# -- the boto3 client's hardening: no redirects, malformed answers named, the deadline's sockets --------

def _tracking_pools() -> tuple:
    from botocore import awsrequest  # noqa: PLC0415

    def tracked(base):
        class Tracked(base):
            def request(self, *a, **kw):
                transfer = getattr(_TLS, "transfer", None)
                if transfer is not None:
                    transfer.add(self)
                return super().request(*a, **kw)

        return Tracked

    class HTTPPool(awsrequest.AWSHTTPConnectionPool):
        ConnectionCls = tracked(awsrequest.AWSHTTPConnection)

    class HTTPSPool(awsrequest.AWSHTTPSConnectionPool):
        ConnectionCls = tracked(awsrequest.AWSHTTPSConnection)

    return HTTPPool, HTTPSPool


def _refuse_past_deadline(**kw) -> None:
    transfer = getattr(_TLS, "transfer", None)
    if transfer is not None and transfer.expired:
        raise _DeadlinePassed()


def _no_region_redirect(context=None, **kw) -> None:
    # botocore's S3 region redirector re-sends a request that got a 301/307 to the bucket's "real"
    # region; at an endpoint that is not AWS that is a request to wherever the answer pointed, and a
    # second redirect there makes it recurse until Python's stack runs out. Marked as done already.
    if context is not None and isinstance(context.get("s3_redirect"), dict):
        context["s3_redirect"]["redirected"] = True


def _s3_200_error(operation_model, response_dict, **kw) -> None:
    # botocore's own handler (S3 can answer 200 with an <Error> body: turned into a 500, retried), and
    # a note of whether the body was no XML at all, so the error can say so instead of "500"
    from botocore import handlers  # noqa: PLC0415

    before = response_dict.get("status_code") if response_dict else None
    handlers._handle_200_error(operation_model, response_dict, **kw)
    if before == 200 and response_dict.get("status_code") == 500:
        import xml.etree.ElementTree as ET  # noqa: PLC0415

        try:
            ET.fromstring(response_dict.get("body") or b"")
            _TLS.malformed = False
        except ET.ParseError:
            _TLS.malformed = True


def _harden(client) -> None:
    """Our hooks on a botocore S3 client (each one optional: a botocore without the attribute keeps
    its own behaviour, and the deadline then holds between requests only)."""
    from botocore import handlers  # noqa: PLC0415

    events = client.meta.events
    pools = getattr(getattr(client._endpoint, "http_session", None), "_pool_classes_by_scheme", None)
    if isinstance(pools, dict):  # the pool manager holds this same dict: new pools use ours
        pools["http"], pools["https"] = _tracking_pools()
    events.register("before-send.s3", _refuse_past_deadline)
    from urllib.parse import urlsplit  # noqa: PLC0415

    host = (urlsplit(client.meta.endpoint_url).hostname or "").lower()
    if not (host.endswith(".amazonaws.com") or host.endswith(".amazonaws.com.cn")):
        events.register_last("before-call.s3", _no_region_redirect)
    if hasattr(handlers, "_handle_200_error"):
        events.unregister("before-parse.s3.*", handlers._handle_200_error)
        events.register_first("before-parse.s3.*", _s3_200_error)

