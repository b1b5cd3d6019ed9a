"""Object stores: where a fleet's mirror lives when it is not a folder on this machine (SPEC §25).

A location is ``s3://bucket/prefix`` (the S3 API: AWS, MinIO, Ceph, GCS interop, R2),
``file:///path`` (a shared disk, same layout) or a plain directory (today's hub-cache mirror,
``frt_dist.distribution.mirror``; not an object store). ``parse_location`` tells them apart;
``open_store`` gives an ``ObjectStore`` for a URL.

An ``ObjectStore`` has five verbs, all on keys relative to the location's prefix::

    head(key) -> size | None            is it there, and how big
    get(key, out, limit=None) -> n      stream its bytes into out.write (a file, a hashing writer)
    get_bytes(key, limit) -> bytes|None a small object (a lockfile, a receipt), None when absent
    put_file(key, path) / put_bytes(key, data)
                                        whole-object writes: a reader sees the old object or the
                                        new one, never part of one (S3: one PUT, or a multipart
                                        upload that completes atomically; file://: temp + rename)
    list(prefix) -> [(key, size)]       keys under a prefix, sorted

That is all publish, sync and ``receipts push/pull`` need, so GCS or Azure is one more small class.

Layout (content-addressed, untrusted; see README "Object-store mirrors")::

    <prefix>/<algorithm>/<hex>          one locked file's bytes, named by the lock's digest of them
                                        (sha256 for every file kernels-builder digests today)
    <prefix>/lockfiles/<model>.lock     the lockfile, written after every object it names
    <prefix>/receipts/sha256/<hex>.json a qualification receipt, named by its canonical digest

Nothing in a store is trusted: every byte is checked against the local lock before use (the
callers do it; ``get`` streams into the caller's hashing writer and stops at ``limit`` bytes so a
hostile object cannot fill a disk). Keys frt reads are only ever built from digests and validated
names (``object_key``, ``lock_key``, ``receipt_key``), never taken from a listing as a path.

Errors are ``frt_dist.errors`` errors with SPEC §25's exit codes: ``StoreAccess`` (exit 2: no
credentials, access denied, no such bucket, a bad URL), ``ObjectMissing`` (exit 1), ``StoreUnavailable``
(exit 1: a timeout or a server error that persisted through the bounded retries). Messages name
the location and key, never a credential.

Configuration is the standard AWS chain, read by botocore itself: ``AWS_ENDPOINT_URL`` (an
``http://`` endpoint is used as given), ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/
``AWS_SESSION_TOKEN``, ``AWS_REGION``/``AWS_DEFAULT_REGION``, ``AWS_PROFILE`` with the shared
config and credentials files. ``FRT_STORE_ATTEMPTS`` (default 4) caps the attempts per request,
``FRT_STORE_TIMEOUT`` (seconds, default 20) the connect and read timeouts, and ``FRT_STORE_DEADLINE``
(seconds, default 600) each whole transfer, retries and resumes included (a server that sends a byte
just inside every read timeout is stopped there). boto3 is imported only when a URL is used (the
``fleet`` extra); locking and resolving never import it.

A store cannot lead a client elsewhere: boto3 follows no redirect at an endpoint that is not AWS
(``_harden``), obstore (which follows one, without the ``Authorization`` header but with
``X-Amz-Security-Token``) does not read when a session token is set; a listing that does not end
is refused; a 200 that is not XML is named as such; an endpoint URL with a user name or password
in it is refused, never shown (``endpoint_problem``).

Readers (``open_store(url, reading=True)``: a node's load, ``frt mirror DIR --from``) get
``ObstoreS3Reader`` instead when the environment alone configures the store (``read_client_why``
gives the rule): obstore is a tenth of boto3's start-up, which every fleet node pays. Writers, and
readers under a profile, a role or config-file settings, keep boto3. Both map to the same errors.
"""

from __future__ import annotations

import errno
import os
import re
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..errors import FrtError, UsageError
from ..errors import ObjectMissing, StoreAccess, StoreUnavailable  # noqa: F401 - defined with every FrtError

__all__ = ["Location", "parse_location", "is_url", "open_store", "ObjectStore", "S3Store", "FileStore",
           "ObstoreS3Reader", "read_client", "read_client_why",
           "StoreAccess", "StoreUnavailable", "ObjectMissing", "object_key", "locked_file_key", "lock_key", "receipt_key",
           "digest_from_object_key", "store_config", "endpoint_problem", "check_endpoint", "StoreInfo"]

_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.\-_]{1,254}$")
_SEGMENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-]*$")
_ALGO = re.compile(r"^[a-z0-9][a-z0-9_\-]{0,31}$")
_HEX = re.compile(r"^[0-9a-f]{16,256}$")
_CHUNK = 1 << 20


# ---------------------------------------------------------------------------
# locations and keys


@dataclass(frozen=True)
class Location:
    """A parsed mirror location: ``scheme`` is ``"s3"``, ``"file"`` or ``"dir"`` (a plain folder)."""

    scheme: str
    bucket: str = ""  # s3
    prefix: str = ""  # s3: no leading or trailing slash
    path: str = ""  # file, dir

    @property
    def url(self) -> str:
        if self.scheme == "s3":
            return f"s3://{self.bucket}/{self.prefix}".rstrip("/")
        if self.scheme == "file":
            return f"file://{self.path}"
        return self.path

    @property
    def is_store(self) -> bool:
        return self.scheme != "dir"


def is_url(text: str) -> bool:
    """Whether ``text`` names an object store (``scheme://``), not a folder."""
    return bool(re.match(r"^[A-Za-z][A-Za-z0-9+.\-]*://", str(text)))


def parse_location(text) -> Location:
    """``s3://bucket/prefix``, ``file:///abs/path`` or a folder. Anything else with a scheme is a
    ``StoreAccess`` (exit 2) naming the schemes frt knows."""
    text = os.fspath(text)
    if not is_url(text):
        return Location("dir", path=text)
    scheme, rest = text.split("://", 1)
    scheme = scheme.lower()
    if scheme == "s3":
        bucket, _, prefix = rest.partition("/")
        prefix = prefix.strip("/")
        if not _BUCKET.match(bucket):
            raise StoreAccess(f"{text}: {bucket!r} is not a bucket name", hints=["e.g. s3://my-bucket/frt/prod"])
        for seg in prefix.split("/") if prefix else []:
            if not _SEGMENT.match(seg):
                raise StoreAccess(f"{text}: the prefix segment {seg!r} is not a plain name (letters, digits, '.', "
                                  "'_', '-'; not starting with '.')", hints=["e.g. s3://my-bucket/frt/prod"])
        return Location("s3", bucket=bucket, prefix=prefix)
    if scheme == "file":
        if not rest.startswith("/"):
            raise StoreAccess(f"{text}: a file URL needs an absolute path (file:///srv/frt-mirror)")
        return Location("file", path=rest)
    raise StoreAccess(f"{text}: frt does not know the scheme {scheme!r}",
                      hints=["mirror locations are s3://bucket/prefix, file:///path or a folder "
                             "(GCS, R2, MinIO and Ceph speak the S3 API: s3:// with AWS_ENDPOINT_URL)"])


def object_key(algorithm: str, hexdigest: str) -> str:
    """The key of a locked file's bytes: ``<algorithm>/<hex>``."""
    if not _ALGO.match(algorithm) or not _HEX.match(hexdigest):
        raise ValueError(f"not a digest: {algorithm}:{hexdigest}")
    return f"{algorithm}/{hexdigest}"


def locked_file_key(algorithm: str, expected: str) -> str:
    """The key of a locked file from the lock's own digest of it: ``expected`` as the lock writes it
    (``"sha256:<hex>"`` for ``metadata.json``, else the base64 digest in ``digest-algorithm``)."""
    import base64  # noqa: PLC0415
    import binascii  # noqa: PLC0415

    if expected.startswith("sha256:"):
        return object_key("sha256", expected.split(":", 1)[1])
    try:
        raw = base64.b64decode(expected, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"not a base64 digest: {expected!r}") from None
    return object_key(algorithm, raw.hex())


def digest_from_object_key(key: str) -> tuple[str, str] | None:
    parts = key.split("/")
    if len(parts) == 2 and _ALGO.match(parts[0]) and _HEX.match(parts[1]):
        return parts[0], parts[1]
    return None


def lock_key(model: str) -> str:
    if not _SEGMENT.match(model):
        raise UsageError(f"model name {model!r} cannot name a lockfile in a store")
    return f"lockfiles/{model}.lock"


def receipt_key(hexdigest: str) -> str:
    if not re.fullmatch(r"[0-9a-f]{64}", hexdigest):
        raise ValueError(f"not a sha256 hex digest: {hexdigest!r}")
    return f"receipts/sha256/{hexdigest}.json"


def _check_key(key: str) -> str:
    parts = key.split("/")
    if not key or any(not _SEGMENT.match(p) for p in parts):
        raise ValueError(f"not a store key frt writes or reads: {key!r}")
    return key


def store_config() -> dict:
    """The retry and timeout bounds (``FRT_STORE_ATTEMPTS``, ``FRT_STORE_TIMEOUT``)."""
    def num(name, default, kind):
        raw = os.environ.get(name)
        if raw in (None, ""):
            return default
        try:
            v = kind(raw)
        except ValueError:
            v = None
        if v is None or v <= 0:
            raise UsageError(f"{name}={raw!r}: expected a positive number")
        return v

    return {"attempts": num("FRT_STORE_ATTEMPTS", 4, int), "timeout": num("FRT_STORE_TIMEOUT", 20.0, float),
            "deadline": num("FRT_STORE_DEADLINE", 600.0, float)}


_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9\-]{0,61}[A-Za-z0-9])?"
_ENDPOINT_NETLOC = re.compile(rf"(?:{_LABEL}(?:\.{_LABEL})*\.?|\[[0-9A-Fa-f:.]{{2,45}}\])(?::[0-9]{{1,5}})?")
_ENDPOINT_PATH = re.compile(r"(?:/[A-Za-z0-9._~\-]*)*")
_LIST_PAGES = 10_000  # 10 million keys at S3's 1000 a page: far past any store frt writes


def endpoint_problem(url: str) -> str | None:
    """Why an endpoint URL (``AWS_ENDPOINT_URL``) cannot be used, in words that never repeat it
    (it may carry a password), or ``None``. Parsed as RFC 3986 reads it (``urllib.parse``): the
    authority ends at the first ``/``, ``?`` or ``#``; a ``user[:password]@`` part, or any ``@``
    (a password holding a ``/`` spills into the path), is refused: frt signs every request with the AWS key pair and sends nothing else, so a password
    in the URL would only ever leak (into a Host header, a log, a message)."""
    from urllib.parse import urlsplit  # noqa: PLC0415

    if "@" in url:  # userinfo, or a password with a '/', '?' or '#' in it that spilled into the path
        return "it has a user name or password in it (user:...@host); frt neither sends nor shows it"
    try:
        parts = urlsplit(url)
        host, _port = parts.hostname, parts.port  # .port raises on a port that is not a number
    except ValueError:
        return "it is not a URL (its host or port cannot be read)"
    if parts.scheme.lower() not in ("http", "https"):
        return "it is not an http:// or https:// URL"
    if not host:
        return "it names no host"
    if not _ENDPOINT_NETLOC.fullmatch(parts.netloc) or parts.query or parts.fragment \
            or not _ENDPOINT_PATH.fullmatch(parts.path):
        # a host name, an IPv4 address or a bracketed IPv6 one, an optional port, a plain path: what both
        # clients read the same way (obstore's HTTP layer panics on some hosts urllib.parse takes: "h%20ost")
        return "it is not a plain scheme://host[:port] URL (a host name or address, a port, a plain path)"
    return None


def check_endpoint() -> None:
    """``StoreAccess`` (exit 2) when ``AWS_ENDPOINT_URL`` (or ``AWS_ENDPOINT_URL_S3``) is set and
    not a plain ``http(s)://host[:port]`` URL (``endpoint_problem``); the URL is never shown."""
    for var in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        raw = os.environ.get(var)
        why = endpoint_problem(raw) if raw else None
        if why:
            raise StoreAccess(f"{var} cannot be used: {why}",
                              hints=[f"set {var} to scheme://host[:port] (e.g. http://minio.internal:9000) and the "
                                     "credentials in AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY"])


# ---------------------------------------------------------------------------
# the interface


class ObjectStore:
    """The verbs every backend implements (see the module docstring). ``url`` is for messages."""

    url: str = ""

    def head(self, key: str) -> int | None:  # pragma: no cover - interface
        raise NotImplementedError

    def get(self, key: str, out, *, limit: int | None = None,
            progress: Callable[[int], None] | None = None) -> int:  # pragma: no cover - interface
        """Stream the object into ``out.write``; the byte count. More than ``limit`` bytes stops
        the transfer (the count returned is then ``limit + 1``): the caller refuses the object."""
        raise NotImplementedError

    def get_bytes(self, key: str, limit: int = 16 << 20) -> bytes | None:
        buf = _Buffer()
        try:
            self.get(key, buf, limit=limit)
        except ObjectMissing:
            return None
        if len(buf.data) > limit:
            raise StoreUnavailable(f"{self.where(key)}: larger than {limit} bytes; not a file frt wrote there")
        return bytes(buf.data)

    def stat(self, key: str) -> "StoreInfo | None":
        """The object's size, and its SHA-256 when the store can vouch for it without a download
        (``StoreInfo``); ``None`` when absent. This base form knows only the size."""
        size = self.head(key)
        return None if size is None else StoreInfo(size)

    def put_file(self, key: str, path, *, progress: Callable[[int], None] | None = None,
                 sha256: str | None = None) -> None:  # pragma: no cover
        """``sha256``: the file's base64 SHA-256, when the caller knows it (a store that keeps
        checksums stores it with the object and checks the upload against it)."""
        raise NotImplementedError

    def put_bytes(self, key: str, data: bytes) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def list(self, prefix: str) -> list[tuple[str, int]]:  # pragma: no cover - interface
        raise NotImplementedError

    def where(self, key: str) -> str:
        return f"{self.url.rstrip('/')}/{key}"

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _no_such_bucket(store, err: FrtError) -> FrtError:
    """An S3 store's "not found": the object's, or the whole bucket's? Asked once per store
    (``_bucket_missing``, one listing), whichever thread gets here first; then it is the object's."""
    if isinstance(err, ObjectMissing):
        with store._lock:
            if not store._checked_bucket:
                if store._bucket_missing():
                    return StoreAccess(f"{store.url}: no such bucket {store.loc.bucket!r}",
                                       hints=["check the bucket name and AWS_ENDPOINT_URL / AWS_REGION"])
                store._checked_bucket = True
    return err


class _Buffer:
    def __init__(self):
        self.data = bytearray()

    def write(self, b) -> None:
        self.data += b


def open_store(location, *, reading: bool = False) -> ObjectStore:
    """The store for a URL (``Location`` or text); a plain folder is a ``UsageError`` (callers
    use ``frt_dist.distribution.mirror`` for those). ``reading=True``: the caller only reads (a node's load,
    ``frt mirror DIR --from``); an ``s3://`` store is then read through obstore when the
    environment alone configures it (``read_client``), else through boto3 as for writes."""
    loc = location if isinstance(location, Location) else parse_location(location)
    if loc.scheme == "s3":
        check_endpoint()  # before any client reads it: a URL with a password in it is never used
        if reading and read_client() == "obstore":
            return ObstoreS3Reader(loc)
        return S3Store(loc)
    if loc.scheme == "file":
        return FileStore(loc)
    raise UsageError(f"{loc.path}: a folder, not an object-store URL")


# ---------------------------------------------------------------------------
# S3 (boto3)


_ACCESS_CODES = {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken",
                 "AllAccessDisabled", "AccountProblem", "InvalidClientTokenId", "UnrecognizedClientException",
                 "403", "Forbidden"}
_CRED_HINTS = ["set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE naming a profile in ~/.aws/config "
               "(and AWS_ENDPOINT_URL for a store that is not AWS)",
               "a node that only reads needs s3:GetObject and s3:ListBucket on the prefix; a publisher also "
               "s3:PutObject"]


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
                "s3", region_name=os.environ.get("AWS_REGION") or None, config=Config(retries={"mode": "standard", "total_max_attempts": self.attempts},
                                    connect_timeout=cfg["timeout"], read_timeout=cfg["timeout"],
                                    max_pool_connections=32, signature_version="s3v4",
                                    # botocore >= 1.36 adds CRC checksums to every PUT by default, which
                                    # several S3-API stores (older MinIO, Ceph, GCS interop) refuse; frt
                                    # checks every byte against the lock's digest itself
                                    request_checksum_calculation="when_required",
                                    response_checksum_validation="when_required"))
        except Exception as exc:  # noqa: BLE001 - ProfileNotFound, a bad config file, a bad endpoint
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
            return StoreAccess(f"{where}: the AWS profile {os.environ.get('AWS_PROFILE', '')!r} is not in the AWS "
                               "config files", hints=["check AWS_PROFILE, AWS_CONFIG_FILE and AWS_SHARED_CREDENTIALS_FILE"])
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
        except Exception:  # noqa: BLE001 - cannot tell: report the object
            return False

    def _call(self, fn, key: str, **kw):
        with _deadline(self.deadline):  # one request and its retries (inside a get: the get's own)
            _TLS.malformed = False
            try:
                return fn(**kw)
            except FrtError:
                raise
            except Exception as exc:  # noqa: BLE001 - mapped; unknown ones re-raised by _error
                raise _no_such_bucket(self, self._error(exc, key)) from None

    # -- verbs ------------------------------------------------------------------
    def head(self, key: str) -> int | None:
        try:
            r = self._call(self.client.head_object, key, Bucket=self.loc.bucket, Key=self._key(key))
        except ObjectMissing:
            return None
        return int(r["ContentLength"])

    def stat(self, key: str) -> "StoreInfo | None":
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
        n, etag = 0, None
        for attempt in range(self.attempts):
            kw = {"Range": f"bytes={n}-"} if n else {}
            if etag:
                kw["IfMatch"] = etag  # the same object, not one replaced meanwhile
            r = self._call(self.client.get_object, key, Bucket=self.loc.bucket, Key=self._key(key), **kw)
            etag = etag or r.get("ETag")
            body = r["Body"]
            try:
                for chunk in body.iter_chunks(_CHUNK):
                    if limit is not None and n + len(chunk) > limit:
                        out.write(chunk[: limit + 1 - n])
                        return limit + 1
                    out.write(chunk)
                    n += len(chunk)
                    if progress:
                        progress(len(chunk))
                return n
            except Exception as exc:  # noqa: BLE001 - a stream cut mid-way: resume from byte n
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
        except Exception:  # noqa: BLE001 - best effort
            pass


_SESSIONS: dict[tuple, object] = {}
_SESSIONS_LOCK = threading.Lock()


def _session(boto3):
    """One boto3 session per process and AWS environment: a session loads botocore's service models
    (most of a client's start-up cost) and resolves credentials once (refreshable ones refresh
    themselves). Keyed by every ``AWS_*`` variable, so a changed environment gets a new session."""
    key = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("AWS_")))
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
        v = os.environ.get(var)
        if v and len(v) >= 4:
            text = text.replace(v, "***")
    return text


@dataclass(frozen=True)
class StoreInfo:
    """What ``stat`` says of an object: its size, and the base64 SHA-256 of its bytes when the
    store keeps a full-object checksum for it (``None``: it cannot tell without a download)."""

    size: int
    sha256: str | None = None


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


def _malformed_error(where: str, attempts: int) -> FrtError:
    return StoreUnavailable(f"{where}: the server answered 200 with a body that is not S3's XML (a malformed "
                            f"answer), through {attempts} attempt(s)",
                            hints=["AWS_ENDPOINT_URL may not be an S3-API server, or something between "
                                   "rewrites its answers; check the endpoint"])


def _endless_listing(where: str, pages: int, why: str) -> FrtError:
    return StoreUnavailable(f"{where}: the server's listing {why} (page {pages}); a listing that does not end is "
                            "refused", hints=["the store's server is misbehaving; check AWS_ENDPOINT_URL"])


def _deadline_error(where: str, deadline: float) -> FrtError:
    return StoreUnavailable(f"{where}: the transfer took longer than FRT_STORE_DEADLINE={deadline:g}s (its retries "
                            "included) and was stopped; nothing of it is used",
                            hints=["the endpoint is too slow or sends its bytes a few at a time; check "
                                   "AWS_ENDPOINT_URL and the network (FRT_STORE_DEADLINE raises the limit for a "
                                   "slow link and large files)"])


# -- the boto3 client's hardening: an overall deadline, no redirects, malformed answers named --------

_TLS = threading.local()  # .transfer: the running _Transfer of this thread; .malformed: the last answer was not XML


class _DeadlinePassed(Exception):
    """Raised before a request is sent when its transfer's deadline has passed (not retried)."""


class _Transfer:
    """One transfer's overall deadline (a timer thread: no clock is read, so a load still never
    measures). On the obstore path it only marks the transfer expired (obstore's own total timeout
    ends the request); on the boto3 path it does more. botocore's timeouts bound each socket
    read, so a server that sends a byte just inside each of them keeps a transfer going for ever.
    Every connection the thread sends a request on while the transfer runs is recorded (the pool
    classes of ``_harden``); when the deadline passes, a watcher thread shuts those sockets down
    (a read blocked in them returns at once) and any request not yet sent is refused before it
    goes (the ``before-send`` hook), so the call ends with ``_DeadlinePassed`` or a broken read."""

    def __init__(self, seconds: float):
        self.seconds, self.expired = seconds, False
        self.expiry = threading.Event()  # set when the deadline passes
        self._conns: list = []
        self._lock = threading.Lock()
        self._done = threading.Event()

    def add(self, conn) -> None:
        with self._lock:
            if conn not in self._conns:
                self._conns.append(conn)

    def _watch(self) -> None:
        import socket  # noqa: PLC0415

        if self._done.wait(self.seconds):
            return
        self.expired = True
        self.expiry.set()
        while True:  # again until the transfer gives up: a connection made meanwhile is shut too
            with self._lock:
                conns = list(self._conns)
            for conn in conns:
                sock = getattr(conn, "sock", None)
                if sock is not None:
                    try:
                        sock.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
            if self._done.wait(0.1):
                return


class _deadline:  # noqa: N801 - a context manager used like a function
    """``with _deadline(s):`` runs the block as one transfer (nested blocks join the outer one)."""

    def __init__(self, seconds: float):
        self.seconds, self.mine = seconds, None

    def __enter__(self) -> _Transfer:
        outer = getattr(_TLS, "transfer", None)
        if outer is not None:
            return outer
        self.mine = _TLS.transfer = _Transfer(self.seconds)
        threading.Thread(target=self.mine._watch, daemon=True, name="frt-store-deadline").start()
        return self.mine

    def __exit__(self, *exc) -> None:
        if self.mine is not None:
            self.mine._done.set()
            _TLS.transfer = None


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


# ---------------------------------------------------------------------------
# S3 reads through obstore (a node's load, `frt mirror DIR --from`)

# The AWS_* variables whose meaning the obstore reader reproduces exactly (or that neither client's
# outcome depends on: the retry and checksum settings frt overrides on both paths, the CLI's own).
# Any other AWS_* variable (AWS_PROFILE, AWS_ROLE_ARN, AWS_WEB_IDENTITY_TOKEN_FILE, AWS_CA_BUNDLE,
# AWS_ENDPOINT_URL_S3, AWS_CONTAINER_CREDENTIALS_*, ...) means boto3 reads, as it writes.
_OBSTORE_ENV = frozenset({
    "AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION",
    "AWS_DEFAULT_REGION", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE", "AWS_EC2_METADATA_DISABLED",
    "AWS_MAX_ATTEMPTS", "AWS_RETRY_MODE", "AWS_REQUEST_CHECKSUM_CALCULATION", "AWS_RESPONSE_CHECKSUM_VALIDATION",
    "AWS_PAGER", "AWS_DEFAULT_OUTPUT"})


_OBSTORE = {"used": False, "forked": False}


def _after_fork_in_child() -> None:
    # obstore runs its requests on a Tokio runtime whose threads do not survive a fork: a child of a
    # process that has used obstore hangs on its first request (tested). Such a child reads with boto3.
    if _OBSTORE["used"]:
        _OBSTORE["forked"] = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def read_client() -> str:
    """Which client reads an ``s3://`` store in this environment: ``"obstore"`` or ``"boto3"``
    (see ``read_client_why``)."""
    return read_client_why()[0]


def read_client_why() -> tuple[str, str]:
    """``(client, reason)``. obstore reads when the environment alone configures the store, so that
    it means exactly what boto3 would make of it: ``FRT_STORE_CLIENT`` is unset or ``auto``,
    obstore is installed, ``AWS_ACCESS_KEY_ID`` and ``AWS_SECRET_ACCESS_KEY`` are set, ``AWS_PROFILE``
    is not, no other ``AWS_*`` variable but those in ``_OBSTORE_ENV`` is set, the AWS config file
    (``AWS_CONFIG_FILE`` or ``~/.aws/config``) has no ``[default]`` settings, ``AWS_SESSION_TOKEN``
    is not set (obstore would carry it along a redirect to another host), ``AWS_ENDPOINT_URL`` (when
    set) is a plain URL, a region is set when no endpoint is, and this process is not a
    fork of one that has used obstore (``_after_fork_in_child``). Otherwise boto3
    (profiles, SSO, roles, instance credentials, config-file settings: boto3's own chain)."""
    env = os.environ
    want = (env.get("FRT_STORE_CLIENT") or "auto").strip().lower()
    if want not in ("auto", "boto3"):
        raise UsageError(f"FRT_STORE_CLIENT={env.get('FRT_STORE_CLIENT')!r}: expected 'auto' or 'boto3'")
    if want == "boto3":
        return "boto3", "FRT_STORE_CLIENT=boto3"
    if _OBSTORE["forked"]:
        return "boto3", "this process was forked from one that had used obstore (its runtime does not survive a fork)"
    other = sorted(k for k in env if k.startswith("AWS_") and k not in _OBSTORE_ENV)
    if other:
        return "boto3", f"{other[0]} is set (boto3 reads it; obstore would not read it the same way)"
    if not (env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY")):
        return "boto3", "no key pair in the environment (boto3's credential chain finds one)"
    if env.get("AWS_SESSION_TOKEN"):
        # obstore's HTTP client follows a redirect to another host, and drops the Authorization header
        # there but not X-Amz-Security-Token: boto3 follows none (tests/test_store_hostile.py)
        return "boto3", "AWS_SESSION_TOKEN is set (obstore would send it along a redirect to another host)"
    endpoint = env.get("AWS_ENDPOINT_URL") or ""
    if endpoint and endpoint_problem(endpoint):
        return "boto3", "AWS_ENDPOINT_URL is not a plain scheme://host[:port] URL"
    if not endpoint and not (env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")):
        return "boto3", "AWS without a region (boto3 follows the bucket's region redirect)"
    config = env.get("AWS_CONFIG_FILE") or os.path.join(os.path.expanduser("~"), ".aws", "config")
    try:
        present = os.path.isfile(config) and os.path.getsize(config) > 0
    except OSError:
        present = True
    if present:  # only then is configparser imported (a node's start pays for what it uses)
        import configparser  # noqa: PLC0415

        try:
            cp = configparser.RawConfigParser()
            cp.read(config, encoding="utf-8")
            if cp.has_section("default") and cp.options("default"):
                return "boto3", f"the AWS config file {config} has [default] settings"
        except (OSError, ValueError, configparser.Error):
            return "boto3", f"the AWS config file {config} is not plain (boto3 reads it)"
    try:
        import obstore  # noqa: F401,PLC0415
    except ImportError:
        return "boto3", "obstore is not installed"
    return "obstore", "the environment configures the store"


_STATUS = re.compile(r"status code: (\d{3})")
_CODE = re.compile(r"<Code>([A-Za-z0-9.]{1,64})</Code>")


class ObstoreS3Reader(ObjectStore):
    """Reads (``head``, ``get``, ``get_bytes``, ``list``) of an S3-API bucket through obstore (Rust:
    about 0.05 s to import and construct against boto3's 0.5 s and more, and less CPU per byte;
    bench/RESULTS.md). Configured only from our own reading of the environment (``read_client_why``
    says when): endpoint (path-style, as botocore addresses a custom endpoint; virtual-hosted on AWS
    for a bucket without dots, as botocore does), region (``AWS_REGION``, else ``AWS_DEFAULT_REGION``,
    else us-east-1 with an endpoint), the key pair (never a session token: ``read_client_why``),
    ``http://`` allowed when the endpoint says so. ``FRT_STORE_ATTEMPTS`` caps the attempts (obstore retries 5xx, timeouts and
    dropped connections itself, max_retries = attempts - 1), ``FRT_STORE_TIMEOUT`` is the connect
    timeout and the timeout of every read (a stall), ``FRT_STORE_DEADLINE`` the whole of each request
    and the time after which no retry starts. Errors are the same frt errors as ``S3Store``'s;
    obstore's own messages (which name the endpoint) are never shown."""

    def __init__(self, loc: Location):
        from datetime import timedelta  # noqa: PLC0415

        import obstore  # noqa: PLC0415
        from obstore.store import S3Store as _ObS3  # noqa: PLC0415

        self.loc, self.url, self._ob = loc, loc.url, obstore
        _OBSTORE["used"] = True  # from here a forked child reads with boto3 (_after_fork_in_child)
        cfg = store_config()
        self.attempts, self.timeout, self.deadline = cfg["attempts"], cfg["timeout"], cfg["deadline"]
        self._checked_bucket = False
        self._lock = threading.Lock()
        env = os.environ
        self.endpoint = (env.get("AWS_ENDPOINT_URL") or "").rstrip("/")
        kw = {"access_key_id": env["AWS_ACCESS_KEY_ID"], "secret_access_key": env["AWS_SECRET_ACCESS_KEY"],
              "region": env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1"}
        if env.get("AWS_SESSION_TOKEN"):  # obstore's client would send it along a redirect to another host
            raise UsageError("AWS_SESSION_TOKEN is set: the obstore reader is not used with a session token "
                             "(read_client_why); boto3 reads")
        if self.endpoint:
            kw["endpoint"], kw["virtual_hosted_style_request"] = self.endpoint, False
        else:
            kw["virtual_hosted_style_request"] = "." not in loc.bucket
        t = timedelta(seconds=self.timeout)
        try:
            self.store = _ObS3(
                loc.bucket,
                client_options={"allow_http": self.endpoint.lower().startswith("http://"), "connect_timeout": t,
                                "read_timeout": t,
                                # one request, its body included, ends a second past the deadline (our
                                # timer marks the transfer expired first), and no retry starts after the
                                # deadline (retry_timeout): the whole transfer ends about then
                                "timeout": timedelta(seconds=self.deadline + 1)},
                retry_config={"max_retries": self.attempts - 1,
                              "retry_timeout": timedelta(seconds=min(self.deadline,
                                                                     self.attempts * (2 * self.timeout + 10))),
                              "backoff": {"init_backoff": timedelta(milliseconds=100),
                                          "max_backoff": timedelta(seconds=5), "base": 2}},
                **kw)
        except Exception as exc:  # noqa: BLE001 - a bad endpoint URL, a bad region
            raise StoreAccess(f"{self.url}: the object-store configuration is not usable ({type(exc).__name__})",
                              hints=["check AWS_ENDPOINT_URL and AWS_REGION"]) from None

    def _key(self, key: str) -> str:
        _check_key(key)
        return f"{self.loc.prefix}/{key}" if self.loc.prefix else key

    # -- errors -----------------------------------------------------------------
    def _error(self, exc: Exception, key: str) -> FrtError:
        from obstore import exceptions as oex  # noqa: PLC0415

        where = self.where(key) if key else self.url
        text = str(exc)
        m = _STATUS.search(text)
        status = int(m.group(1)) if m else 0
        m = _CODE.search(text)
        code = m.group(1) if m else ""
        if code == "NoSuchBucket":
            return StoreAccess(f"{self.url}: no such bucket {self.loc.bucket!r}",
                               hints=["check the bucket name and AWS_ENDPOINT_URL / AWS_REGION"])
        if isinstance(exc, (oex.PermissionDeniedError, oex.UnauthenticatedError, PermissionError)) \
                or status in (401, 403) or code in _ACCESS_CODES:
            return StoreAccess(f"{where}: access denied ({code or status or 403})", hints=list(_CRED_HINTS))
        if isinstance(exc, (oex.NotFoundError, FileNotFoundError)) or status == 404:
            return ObjectMissing(f"{where}: no such object", key=key)
        if isinstance(exc, (oex.PreconditionError, oex.NotModifiedError)) or status == 412:
            return StoreUnavailable(f"{where}: the object was replaced while it was read; try again")
        if "invalid list response" in text.lower() or "InvalidXml" in text or "Deserialize" in text:
            return _malformed_error(where, self.attempts)
        if status >= 500:
            return StoreUnavailable(f"{where}: the server answered {status} {code} through {self.attempts} "
                                    "attempt(s)", hints=["the store is failing; try again later (FRT_STORE_ATTEMPTS "
                                                         "raises the retry cap)"])
        if status:
            return StoreUnavailable(f"{where}: the server refused the request ({code or status})")
        if "kind: Timeout" in text or "timed out" in text.lower():
            return StoreUnavailable(f"{where}: timed out through {self.attempts} attempt(s) "
                                    f"(FRT_STORE_TIMEOUT={self.timeout:g}s each)",
                                    hints=["check the endpoint (AWS_ENDPOINT_URL) and the network; "
                                           "FRT_STORE_TIMEOUT sets the limit"])
        if "kind: Connect" in text:
            return StoreUnavailable(f"{where}: cannot connect to the endpoint "
                                    f"{self.endpoint or 'of ' + self.loc.bucket + ' on AWS'}",
                                    hints=["check AWS_ENDPOINT_URL (and AWS_REGION)"])
        return StoreUnavailable(f"{where}: the connection failed through {self.attempts} attempt(s) "
                                f"({type(exc).__name__})")

    def _bucket_missing(self) -> bool:
        """After a 404 with no body (HEAD): is it the bucket? One listing of one key says."""
        try:
            for _ in self._ob.list(self.store, prefix=self.loc.prefix or None, chunk_size=1):
                break
            return False
        except Exception as exc:  # noqa: BLE001 - cannot tell: report the object
            return "NoSuchBucket" in str(exc)

    def _raise(self, exc: Exception, key: str):
        raise _no_such_bucket(self, self._error(exc, key)) from None

    # -- verbs ------------------------------------------------------------------
    def head(self, key: str) -> int | None:
        try:
            meta = self._ob.head(self.store, self._key(key))
        except Exception as exc:  # noqa: BLE001 - mapped
            try:
                self._raise(exc, key)
            except ObjectMissing:
                return None
        return int(meta["size"])

    def get(self, key, out, *, limit=None, progress=None) -> int:
        """One streamed GET. A stream cut mid-way is resumed by obstore itself (a ranged request from
        the next byte, counted against the same ``max_retries``: FRT_STORE_ATTEMPTS bounds the
        requests in all), so ``out`` receives each byte once, in order; past the attempts it is a
        ``StoreUnavailable`` and the caller discards what it wrote."""
        with _deadline(self.deadline) as transfer:  # a timer, not a clock read: loading never measures
            return self._get(key, out, limit, progress, transfer)

    def _get(self, key, out, limit, progress, transfer) -> int:
        try:
            r = self._ob.get(self.store, self._key(key))
            it = iter(r.stream(min_chunk_size=_CHUNK))
        except Exception as exc:  # noqa: BLE001 - mapped
            if transfer.expired:
                raise _deadline_error(self.where(key), self.deadline) from None
            self._raise(exc, key)
        n = 0
        while True:
            try:
                chunk = next(it)
            except StopIteration:
                return n
            except Exception as exc:  # noqa: BLE001 - the stream failed past obstore's retries
                if transfer.expired or ("Timeout" in str(exc) and transfer.expiry.wait(2)):
                    # obstore's own total timeout (just past the deadline) ended it; a timer thread
                    # held up on a loaded machine is given two seconds to say so
                    raise _deadline_error(self.where(key), self.deadline) from None
                raise self._error(exc, key) from None
            if transfer.expired:
                raise _deadline_error(self.where(key), self.deadline)
            size = len(chunk)
            if limit is not None and n + size > limit:
                out.write(memoryview(chunk)[: limit + 1 - n])
                return limit + 1
            out.write(chunk)  # outside the try: the caller's own errors (a full disk) are its own
            n += size
            if progress:
                progress(size)

    def list(self, prefix: str) -> list[tuple[str, int]]:
        """Every key under ``prefix`` (obstore pages through the listing itself). A listing that does
        not end is refused: a page of keys all seen before (a continuation token that leads back),
        more than ``_LIST_PAGES`` pages, or past FRT_STORE_DEADLINE."""
        full = self._key(prefix.rstrip("/"))
        out, seen = [], set()
        with _deadline(self.deadline) as transfer:
            return self._list(prefix, full, out, seen, transfer)

    def _list(self, prefix, full, out, seen, transfer) -> list[tuple[str, int]]:
        try:
            for page, batch in enumerate(self._ob.list(self.store, prefix=full), 1):
                paths = [str(meta["path"]) for meta in batch]
                if paths and (len(set(paths)) < len(paths) or seen.issuperset(paths)):
                    raise _endless_listing(self.where(prefix), page, "repeats a page it gave before (a continuation "
                                                                     "token that leads back)")
                if page > _LIST_PAGES:
                    raise _endless_listing(self.where(prefix), page, f"is longer than {_LIST_PAGES} pages")
                if transfer.expired:
                    raise _deadline_error(self.where(prefix), self.deadline)
                seen.update(paths)
                for meta, path in zip(batch, paths):
                    rel = path[len(self.loc.prefix) + 1:] if self.loc.prefix else path
                    out.append((rel, int(meta["size"])))
        except FrtError:
            raise
        except Exception as exc:  # noqa: BLE001 - mapped
            self._raise(exc, prefix)
        return sorted(out)

    def put_file(self, key, path, *, progress=None, sha256=None) -> None:
        raise UsageError(f"{self.where(key)}: this store was opened for reading")

    def put_bytes(self, key, data) -> None:
        raise UsageError(f"{self.where(key)}: this store was opened for reading")


# ---------------------------------------------------------------------------
# file:// (a shared disk), through SafeDir: no link inside the store is followed


class FileStore(ObjectStore):
    """A folder holding the store layout. The folder the URL names may be a link (the user's
    choice); nothing inside is followed (``frt_dist.base.safedir``): a key whose folder is a link reads
    as missing and is never written through. Writes are temp file then rename, so a reader never
    sees part of an object."""

    def __init__(self, loc: Location):
        self.loc, self.url, self.root = loc, loc.url, Path(loc.path)

    def _open(self, key: str, *, create: bool):
        from ..base.safedir import SafeDir, UnsafePath  # noqa: PLC0415

        parts = _check_key(key).split("/")
        try:
            top = SafeDir.root(self.root, create=create)
        except UnsafePath as exc:
            raise StoreAccess(f"{self.url}: {exc.path} {exc.what}") from None
        except OSError as exc:
            if not create and exc.errno == errno.ENOENT:
                return None, parts[-1]
            raise self._os_error(exc, key) from None
        try:
            return top.walk(*parts[:-1], create=create), parts[-1]
        except UnsafePath as exc:
            if create:
                raise StoreAccess(f"{self.where(key)}: {exc.path} {exc.what}; frt writes nothing through it",
                                  hints=[f"remove the link ({exc.path}) from the store"]) from None
            return None, parts[-1]  # reading: a link reads as absent
        finally:
            top.close()

    def _os_error(self, exc: OSError, key: str) -> FrtError:
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT):
            return StoreAccess(f"{self.where(key)}: {exc.strerror or exc}",
                               hints=["check the folder's permissions and free space"])
        return StoreUnavailable(f"{self.where(key)}: {exc.strerror or exc}")

    def head(self, key):
        folder, name = self._open(key, create=False)
        if folder is None:
            return None
        with folder:
            st = folder.lstat(name)
        import stat as _stat  # noqa: PLC0415

        return st.st_size if st is not None and _stat.S_ISREG(st.st_mode) else None

    def get(self, key, out, *, limit=None, progress=None) -> int:
        folder, name = self._open(key, create=False)
        f = None
        if folder is not None:
            with folder:
                f = folder.open_read(name)
        if f is None:
            raise ObjectMissing(f"{self.where(key)}: no such object", key=key)
        n = 0
        with f:
            while chunk := f.read(_CHUNK):
                if limit is not None and n + len(chunk) > limit:
                    out.write(chunk[: limit + 1 - n])
                    return limit + 1
                out.write(chunk)
                n += len(chunk)
                if progress:
                    progress(len(chunk))
        return n

    def _put(self, key, write) -> None:
        folder, name = self._open(key, create=True)
        with folder:
            tmp, w = folder.new_file(f".frt-put-{uuid.uuid4().hex[:8]}-")
            try:
                with w:
                    write(w)
                    w.sync()
                folder.replace(tmp, folder, name)
            except OSError as exc:
                raise self._os_error(exc, key) from None
            finally:
                folder.unlink(tmp)

    def put_file(self, key, path, *, progress=None, sha256=None) -> None:
        def write(w):
            with open(path, "rb") as fi:
                while chunk := fi.read(_CHUNK):
                    w.write(chunk)
                    if progress:
                        progress(len(chunk))

        self._put(key, write)

    def put_bytes(self, key, data) -> None:
        self._put(key, lambda w: w.write(bytes(data)))

    def list(self, prefix):
        import stat as _stat  # noqa: PLC0415

        folder, _ = self._open(prefix.rstrip("/") + "/x", create=False)
        if folder is None:
            return []
        out = []
        base = prefix.rstrip("/")
        with folder:
            for name in folder.listdir():
                st = folder.lstat(name)
                if st is not None and _stat.S_ISREG(st.st_mode) and _SEGMENT.match(name):
                    out.append((f"{base}/{name}", st.st_size))
        return sorted(out)
