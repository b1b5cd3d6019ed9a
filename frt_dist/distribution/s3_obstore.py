"""``ObstoreS3Reader``: reads of an S3-API bucket through obstore, when the environment alone
configures the store (``frt_dist.distribution.objstore.read_client_why`` says when). Imported when a
URL is read.
"""

from __future__ import annotations

import re
import threading

from .. import settings
from ..base.deadline import DeadlinePassed, bounded
from ..errors import FrtError, ObjectMissing, StoreAccess, StoreUnavailable, UsageError
from .store_api import (
    _ACCESS_CODES,
    _CHUNK,
    _CRED_HINTS,
    _LIST_PAGES,
    _OBSTORE,
    Location,
    ObjectStore,
    _check_key,
    _deadline,
    _deadline_error,
    _endless_listing,
    _malformed_error,
    _no_such_bucket,
    store_config,
)

__all__ = ["ObstoreS3Reader"]

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
        env = settings.value
        self.endpoint = (env("AWS_ENDPOINT_URL") or "").rstrip("/")
        kw = {"access_key_id": env("AWS_ACCESS_KEY_ID"), "secret_access_key": env("AWS_SECRET_ACCESS_KEY"),
              "region": env("AWS_REGION") or env("AWS_DEFAULT_REGION") or "us-east-1"}
        if env("AWS_SESSION_TOKEN"):  # obstore's client would send it along a redirect to another host
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
        except Exception as exc:
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
        except Exception as exc:
            return "NoSuchBucket" in str(exc)

    def _raise(self, exc: Exception, key: str):
        raise _no_such_bucket(self, self._error(exc, key)) from None

    # -- verbs ------------------------------------------------------------------
    def head(self, key: str) -> int | None:
        try:
            meta = self._ob.head(self.store, self._key(key))
        except Exception as exc:
            try:
                self._raise(exc, key)
            except ObjectMissing:
                return None
        return int(meta["size"])

    def get(self, key, out, *, limit=None, progress=None) -> int:
        """One streamed GET. A stream cut mid-way is resumed by obstore itself (a ranged request from
        the next byte, counted against the same ``max_retries``: FRT_STORE_ATTEMPTS bounds the
        requests in all), so ``out`` receives each byte once, in order; past the attempts it is a
        ``StoreUnavailable`` and the caller discards what it wrote. obstore's calls block in its own
        runtime, which our deadline cannot interrupt: they run in a helper thread
        (``base.deadline.bounded``), and this call ends when the transfer's deadline passes (one
        transfer's, or a whole load's: ``store_api.load_deadline``), whatever obstore is waiting for."""
        with _deadline(self.deadline) as transfer:  # a timer, not a clock read: loading never measures
            return self._get(key, out, limit, progress, transfer)

    def _get(self, key, out, limit, progress, transfer) -> int:
        def answer():
            r = self._ob.get(self.store, self._key(key))
            yield None  # the answer's head came: what fails from here is the body's
            yield from r.stream(min_chunk_size=_CHUNK)

        try:
            it = bounded(answer, transfer)
            next(it)
        except DeadlinePassed:
            raise _deadline_error(self.where(key), self.deadline) from None
        except Exception as exc:
            if transfer.expired:
                raise _deadline_error(self.where(key), self.deadline) from None
            self._raise(exc, key)
        try:
            n = 0
            while True:
                try:
                    chunk = next(it)
                except StopIteration:
                    return n
                except DeadlinePassed:
                    raise _deadline_error(self.where(key), self.deadline) from None
                except Exception as exc:
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
        finally:
            it.close()  # the helper stops after what it waits for returns

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
                for meta, path in zip(batch, paths, strict=False):
                    rel = path[len(self.loc.prefix) + 1:] if self.loc.prefix else path
                    out.append((rel, int(meta["size"])))
        except FrtError:
            raise
        except Exception as exc:
            self._raise(exc, prefix)
        return sorted(out)

    def put_file(self, key, path, *, progress=None, sha256=None) -> None:
        raise UsageError(f"{self.where(key)}: this store was opened for reading")

    def put_bytes(self, key, data) -> None:
        raise UsageError(f"{self.where(key)}: this store was opened for reading")
