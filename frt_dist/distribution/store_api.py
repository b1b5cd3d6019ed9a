"""What every object-store client shares (``frt_dist.distribution.objstore`` is the public face):
locations and keys, the ``ObjectStore`` interface, the bounds read from the environment
(``store_config``, ``check_endpoint``), the words both S3 clients map errors onto, each transfer's
overall deadline, and whether this process may read with obstore after a fork. Imports nothing
beyond the standard library: the clients (``s3_boto3``, ``s3_obstore``, ``filestore``) import it.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass

from .. import settings
from ..base.deadline import Deadline, DeadlinePassed
from ..errors import FrtError, ObjectMissing, StoreAccess, StoreUnavailable, UsageError

__all__ = ["Location", "parse_location", "is_url", "ObjectStore", "StoreInfo", "object_key", "locked_file_key",
           "lock_key", "receipt_key", "digest_from_object_key", "store_config", "endpoint_problem",
           "check_endpoint", "load_deadline", "current_transfer", "joined"]

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
                      hints=["mirror locations are s3://bucket/prefix, oci://registry/repository[:tag], file:///path or a folder "
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
    """The retry and timeout bounds (``FRT_STORE_ATTEMPTS``, ``FRT_STORE_TIMEOUT``, ``FRT_STORE_DEADLINE``;
    their defaults are declared in ``frt_dist.settings``)."""
    def num(name, kind):
        raw = settings.raw(name)
        if raw in (None, ""):
            return kind(settings.declared(name).default)
        try:
            v = kind(raw)
        except ValueError:
            v = None
        if v is None or v <= 0:
            raise UsageError(f"{name}={raw!r}: expected a positive number")
        return v

    return {"attempts": num("FRT_STORE_ATTEMPTS", int), "timeout": num("FRT_STORE_TIMEOUT", float),
            "deadline": num("FRT_STORE_DEADLINE", float)}


_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9\-]{0,61}[A-Za-z0-9])?"
_ENDPOINT_NETLOC = re.compile(rf"(?:{_LABEL}(?:\.{_LABEL})*\.?|\[[0-9A-Fa-f:.]{{2,45}}\])(?::[0-9]{{1,5}})?")
_ENDPOINT_PATH = re.compile(r"(?:/[A-Za-z0-9._~\-]*)*")
_LIST_PAGES = 10_000  # 10 million keys at S3's 1000 a page: far past any store frt writes


def endpoint_problem(url: str) -> str | None:
    """Why an endpoint URL (``AWS_ENDPOINT_URL``) cannot be used, in words that never repeat it
    (it may carry a password), or ``None``. Parsed as RFC 3986 reads it (``urllib.parse``): the
    authority ends at the first ``/``, ``?`` or ``#``; a ``user[:password]@`` part, or any ``@``
    (a password holding a ``/`` spills into the path), is refused: frt signs every request with the AWS key pair and sends
    nothing else, so a password in the URL would only ever leak (into a Host header, a log, a message)."""
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
        raw = settings.raw(var)
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

    def stat(self, key: str) -> StoreInfo | None:
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


class Pump:
    """Passes an object's chunks to ``out.write`` in order, counting them (``n``, kept across a
    resumed stream); past ``limit`` only ``limit + 1`` bytes go, so the caller refuses the object."""

    def __init__(self, out, limit: int | None, progress: Callable[[int], None] | None):
        self.out, self.limit, self.progress, self.n = out, limit, progress, 0

    def feed(self, chunks) -> int:
        """Pass every chunk on; the count (``limit + 1`` once past the limit, where it stops)."""
        for chunk in chunks:
            if self.limit is not None and self.n + len(chunk) > self.limit:
                self.out.write(chunk[: self.limit + 1 - self.n])
                self.n = self.limit + 1
                return self.n
            self.out.write(chunk)
            self.n += len(chunk)
            if self.progress:
                self.progress(len(chunk))
        return self.n


class _Buffer:
    def __init__(self):
        self.data = bytearray()

    def write(self, b) -> None:
        self.data += b


# ---------------------------------------------------------------------------
# what both S3 clients share: the error mapping's words, and each transfer's deadline


_ACCESS_CODES = {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken",
                 "AllAccessDisabled", "AccountProblem", "InvalidClientTokenId", "UnrecognizedClientException",
                 "403", "Forbidden"}
_CRED_HINTS = ["set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE naming a profile in ~/.aws/config "
               "(and AWS_ENDPOINT_URL for a store that is not AWS)",
               "a node that only reads needs s3:GetObject and s3:ListBucket on the prefix; a publisher also "
               "s3:PutObject"]


@dataclass(frozen=True)
class StoreInfo:
    """What ``stat`` says of an object: its size, and the base64 SHA-256 of its bytes when the
    store keeps a full-object checksum for it (``None``: it cannot tell without a download)."""

    size: int
    sha256: str | None = None


# one PUT carries up to 5 GiB on S3: every file frt publishes below that goes as one, so the server
# keeps its full-object SHA-256 (a multipart object's checksum is a checksum of its parts' checksums,


def _malformed_error(where: str, attempts: int) -> FrtError:
    return StoreUnavailable(f"{where}: the server answered 200 with a body that is not S3's XML (a malformed "
                            f"answer), through {attempts} attempt(s)",
                            hints=["AWS_ENDPOINT_URL may not be an S3-API server, or something between "
                                   "rewrites its answers; check the endpoint"])


def _endless_listing(where: str, pages: int, why: str) -> FrtError:
    return StoreUnavailable(f"{where}: the server's listing {why} (page {pages}); a listing that does not end is "
                            "refused", hints=["the store's server is misbehaving; check AWS_ENDPOINT_URL"])


def _deadline_error(where: str, deadline: float) -> FrtError:
    """The refusal of a transfer stopped at its deadline; when the transfer is a whole load's fetches
    (``load_deadline``), it says so."""
    transfer = getattr(_TLS, "transfer", None)
    if transfer is not None and transfer.load:
        text = (f"{where}: this load's fetches (all its files, fetched in parallel, retries included) took longer "
                f"than FRT_STORE_DEADLINE={transfer.seconds:g}s and were stopped; nothing of them is used")
    else:
        text = (f"{where}: the transfer took longer than FRT_STORE_DEADLINE={deadline:g}s (its retries included) "
                "and was stopped; nothing of it is used")
    return StoreUnavailable(text, hints=["the endpoint is too slow or sends its bytes a few at a time; check "
                                         "AWS_ENDPOINT_URL and the network (FRT_STORE_DEADLINE raises the limit for "
                                         "a slow link and large files)"])


# -- every transfer's overall deadline (both S3 clients) ------------------------------------------

_TLS = threading.local()  # .transfer: the running _Transfer of this thread; .malformed: the last answer was not XML


class _DeadlinePassed(DeadlinePassed):
    """Raised before a request is sent when its transfer's deadline has passed (not retried)."""


class _Transfer(Deadline):
    """One transfer's overall deadline (``base.deadline.Deadline``: a timer thread, no clock is
    read, so a load still never measures), shared by every thread that joins it (``joined``: the
    parallel fetches of one load). On the obstore path the reader stops waiting when it passes
    (``base.deadline.bounded``; obstore's own total timeout ends the request behind). On the boto3
    path botocore's timeouts bound each socket read, so a server that sends a byte just inside each
    of them keeps a transfer going for ever: every connection a joined thread sends a request on
    is recorded (the pool classes of ``_harden``); when the deadline passes, the timer thread
    shuts those sockets down (a read blocked in them returns at once) and any request not yet sent
    is refused before it goes (the ``before-send`` hook), so each call ends with
    ``_DeadlinePassed`` or a broken read."""

    def __init__(self, seconds: float, *, load: bool = False):
        super().__init__(seconds)
        self.load = load  # the deadline of a whole load's fetches (the refusal says so)
        self._conns: list = []

    def add(self, conn) -> None:
        with self._lock:
            if conn not in self._conns:
                self._conns.append(conn)

    def after_expiry(self) -> None:
        import socket  # noqa: PLC0415

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


class _deadline:
    """``with _deadline(s):`` runs the block as one transfer (nested blocks, and the threads that
    join it, share the outer one)."""

    def __init__(self, seconds: float, *, load: bool = False):
        self.seconds, self.load, self.mine = seconds, load, None

    def __enter__(self) -> _Transfer:
        outer = getattr(_TLS, "transfer", None)
        if outer is not None:
            return outer
        self.mine = _TLS.transfer = _Transfer(self.seconds, load=self.load).start("frt-store-deadline")
        return self.mine

    def __exit__(self, *exc) -> None:
        if self.mine is not None:
            self.mine.finish()
            _TLS.transfer = None


def load_deadline():
    """``with load_deadline():`` one ``FRT_STORE_DEADLINE`` for every store transfer the block makes,
    in this thread and in the threads that join it (``current_transfer``/``joined``): a node load's
    parallel fetches, and the packages it fetches one after another, end together at it."""
    return _deadline(store_config()["deadline"], load=True)


def current_transfer() -> _Transfer | None:
    """The transfer this thread runs in, to hand to the threads that work for it (``joined``)."""
    return getattr(_TLS, "transfer", None)


class joined:
    """``with joined(transfer):`` in a worker thread: its store calls belong to ``transfer`` (its
    deadline, its connections shut at expiry); ``None`` changes nothing."""

    def __init__(self, transfer: _Transfer | None):
        self.transfer, self.before = transfer, None

    def __enter__(self):
        self.before = getattr(_TLS, "transfer", None)
        if self.transfer is not None:
            _TLS.transfer = self.transfer
        return self.transfer

    def __exit__(self, *exc) -> None:
        _TLS.transfer = self.before


# obstore's state in this process (``read_client_why`` reads it, ``ObstoreS3Reader`` sets it)
_OBSTORE = {"used": False, "forked": False}


def _after_fork_in_child() -> None:
    # obstore runs its requests on a Tokio runtime whose threads do not survive a fork: a child of a
    # process that has used obstore hangs on its first request (tested). Such a child reads with boto3.
    if _OBSTORE["used"]:
        _OBSTORE["forked"] = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)

