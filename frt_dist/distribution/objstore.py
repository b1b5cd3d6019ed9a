"""Object stores: where a fleet's mirror lives when it is not a folder on this machine
(``docs/reference.md#object-stores``).

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

Errors are ``frt_dist.errors`` errors with these exit codes (``docs/reference.md#exit-codes``):
``StoreAccess`` (exit 2: no credentials, access denied, no such bucket, a bad URL), ``ObjectMissing``
(exit 1), ``StoreUnavailable`` (exit 1: a timeout or a server error that persisted through the
bounded retries). Messages name the location and key, never a credential. The mapping lives with
each client; the words they share are in ``store_api``.

Configuration is the standard AWS chain, read by botocore itself: ``AWS_ENDPOINT_URL`` (an
``http://`` endpoint is used as given), ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/
``AWS_SESSION_TOKEN``, ``AWS_REGION``/``AWS_DEFAULT_REGION``, ``AWS_PROFILE`` with the shared
config and credentials files. ``FRT_STORE_ATTEMPTS`` (default 4) caps the attempts per request,
``FRT_STORE_TIMEOUT`` (seconds, default 20) the connect and read timeouts, and ``FRT_STORE_DEADLINE``
(seconds, default 600) each whole transfer, retries and resumes included (a server that sends a byte
just inside every read timeout is stopped there); a load's fetches share one (``store_api.load_deadline``).
boto3 is imported only when a URL is used (the ``fleet`` extra); locking and resolving never import it.

A store cannot lead a client elsewhere: boto3 follows no redirect at an endpoint that is not AWS
(``s3_boto3._harden``), obstore (which follows one, without the ``Authorization`` header but with
``X-Amz-Security-Token``) does not read when a session token is set; a listing that does not end
is refused; a 200 that is not XML is named as such; an endpoint URL with a user name or password
in it is refused, never shown (``endpoint_problem``).

The clients live in their own modules, imported when first used: ``S3Store`` (boto3,
``frt_dist.distribution.s3_boto3``), ``ObstoreS3Reader`` (obstore, ``s3_obstore``) and ``FileStore``
(``file://``, ``filestore``); each name is importable from here too.

Readers (``open_store(url, reading=True)``: a node's load, ``frt mirror DIR --from``) get
``ObstoreS3Reader`` instead when the environment alone configures the store (``read_client_why``
gives the rule): obstore is a tenth of boto3's start-up, which every fleet node pays. Writers, and
readers under a profile, a role or config-file settings, keep boto3. Both map to the same errors.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from .. import settings
from ..errors import ObjectMissing, StoreAccess, StoreUnavailable, UsageError
from .store_api import (
    _OBSTORE,
    Location,
    ObjectStore,
    StoreInfo,
    check_endpoint,
    digest_from_object_key,
    endpoint_problem,
    is_url,
    lock_key,
    locked_file_key,
    object_key,
    receipt_key,
    store_config,
)
from .store_api import parse_location as _parse_location

if TYPE_CHECKING:  # the clients are imported when first used (``__getattr__`` below)
    from .filestore import FileStore
    from .s3_boto3 import S3Store
    from .s3_obstore import ObstoreS3Reader

__all__ = ["Location", "parse_location", "is_url", "open_store", "ObjectStore", "S3Store", "FileStore",
           "ObstoreS3Reader", "read_client", "read_client_why",
           "StoreAccess", "StoreUnavailable", "ObjectMissing", "object_key", "locked_file_key", "lock_key", "receipt_key",
           "digest_from_object_key", "store_config", "endpoint_problem", "check_endpoint", "StoreInfo"]

def parse_location(text) -> Location:
    """``store_api.parse_location``, and ``oci://REGISTRY/REPOSITORY[:TAG][@sha256:HEX]`` (an OCI registry,
    ``frt_dist.distribution.oci``, parsed there: imported only when such a URL is given)."""
    text = os.fspath(text)
    if is_url(text) and text.split("://", 1)[0].lower() == "oci":
        from .oci import parse_oci  # noqa: PLC0415

        return parse_oci(text)
    return _parse_location(text)


def open_store(location, *, reading: bool = False) -> ObjectStore:
    """The store for a URL (``Location`` or text); a plain folder is a ``UsageError`` (callers
    use ``frt_dist.distribution.mirror`` for those). ``reading=True``: the caller only reads (a node's load,
    ``frt mirror DIR --from``); an ``s3://`` store is then read through obstore when the
    environment alone configures it (``read_client``), else through boto3 as for writes."""
    loc = location if isinstance(location, Location) else parse_location(location)
    if loc.scheme == "s3":
        check_endpoint()  # before any client reads it: a URL with a password in it is never used
        if reading and read_client() == "obstore":
            from .s3_obstore import ObstoreS3Reader  # noqa: PLC0415

            return ObstoreS3Reader(loc)
        from .s3_boto3 import S3Store  # noqa: PLC0415

        return S3Store(loc)
    if loc.scheme == "oci":  # one artefact in an OCI registry (docs/reference.md#oci-registries)
        from .oci import OciStore  # noqa: PLC0415

        return OciStore(loc, reading=reading)
    if loc.scheme == "file":
        from .filestore import FileStore  # noqa: PLC0415

        return FileStore(loc)
    raise UsageError(f"{loc.path}: a folder, not an object-store URL")


# ---------------------------------------------------------------------------
# which client reads an s3:// store

# The AWS_* variables whose meaning the obstore reader reproduces exactly (or that neither client's
# outcome depends on: the retry and checksum settings frt overrides on both paths, the CLI's own).
# Any other AWS_* variable (AWS_PROFILE, AWS_ROLE_ARN, AWS_WEB_IDENTITY_TOKEN_FILE, AWS_CA_BUNDLE,
# AWS_ENDPOINT_URL_S3, AWS_CONTAINER_CREDENTIALS_*, ...) means boto3 reads, as it writes.
_OBSTORE_ENV = frozenset({
    "AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION",
    "AWS_DEFAULT_REGION", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE", "AWS_EC2_METADATA_DISABLED",
    "AWS_MAX_ATTEMPTS", "AWS_RETRY_MODE", "AWS_REQUEST_CHECKSUM_CALCULATION", "AWS_RESPONSE_CHECKSUM_VALIDATION",
    "AWS_PAGER", "AWS_DEFAULT_OUTPUT"})


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
    env = settings.value
    want = (env("FRT_STORE_CLIENT") or "auto").strip().lower()
    if want not in ("auto", "boto3"):
        raise UsageError(f"FRT_STORE_CLIENT={settings.raw('FRT_STORE_CLIENT')!r}: expected 'auto' or 'boto3'")
    if want == "boto3":
        return "boto3", "FRT_STORE_CLIENT=boto3"
    if _OBSTORE["forked"]:
        return "boto3", "this process was forked from one that had used obstore (its runtime does not survive a fork)"
    other = sorted(k for k in settings.family("AWS_") if k not in _OBSTORE_ENV)
    if other:
        return "boto3", f"{other[0]} is set (boto3 reads it; obstore would not read it the same way)"
    if not (env("AWS_ACCESS_KEY_ID") and env("AWS_SECRET_ACCESS_KEY")):
        return "boto3", "no key pair in the environment (boto3's credential chain finds one)"
    if env("AWS_SESSION_TOKEN"):
        # obstore's HTTP client follows a redirect to another host, and drops the Authorization header
        # there but not X-Amz-Security-Token: boto3 follows none (tests/test_store_hostile.py)
        return "boto3", "AWS_SESSION_TOKEN is set (obstore would send it along a redirect to another host)"
    endpoint = env("AWS_ENDPOINT_URL") or ""
    if endpoint and endpoint_problem(endpoint):
        return "boto3", "AWS_ENDPOINT_URL is not a plain scheme://host[:port] URL"
    if not endpoint and not (env("AWS_REGION") or env("AWS_DEFAULT_REGION")):
        return "boto3", "AWS without a region (boto3 follows the bucket's region redirect)"
    config = env("AWS_CONFIG_FILE") or os.path.join(os.path.expanduser("~"), ".aws", "config")
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


# The clients, imported when first named (``from frt_dist.distribution.objstore import S3Store`` still
# works): importing this module imports neither boto3, obstore nor their modules here.
_CLIENTS = {"S3Store": "s3_boto3", "ObstoreS3Reader": "s3_obstore", "FileStore": "filestore"}


def __getattr__(name: str):
    module = _CLIENTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib  # noqa: PLC0415

    return getattr(importlib.import_module(f"{__package__}.{module}"), name)
