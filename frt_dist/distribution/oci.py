"""OCI registries as a mirror location (``docs/reference.md#oci-registries``, SPEC §16, issue 37):
``oci://REGISTRY/REPOSITORY[:TAG][@sha256:HEX]`` wherever ``s3://`` is one.

**One artefact per lock.** ``frt publish oci://…`` (and the deprecated ``frt mirror oci://…``) runs
the object-store publish (``frt_dist.distribution.fleet.publish_lock``): each selected locked file,
hashed against the lock, goes up as a blob (content-addressed: a HEAD first, so a blob is never
sent twice), then the release files and the lockfile; then ``oci_publish.finish_lock`` writes one OCI image
manifest whose layers are those blobs, each titled (``org.opencontainers.image.title``) with its
path in a mirror folder (``kernels--<org>--<name>/snapshots/<snapshot>/build/<variant>/<file>``,
the refs, ``models--…`` for a release, ``lockfiles/<model>.lock``), so ``oras pull`` unpacks it
into a folder that is a valid ``FRT_MIRROR``. The manifest is tagged and its digest printed; a
node can be pointed at ``oci://…@sha256:…``, and the same lock and selection give the same digest.
Then the lock's signatures go up as referrers of that manifest (``frt_dist.distribution.oci_sign``).

**Reading.** ``OciStore`` is an ``ObjectStore`` (``frt_dist.distribution.store_api``): a key
(``sha256/<hex>``, ``lockfiles/<model>.lock``) is a layer of the one manifest the reference
names, which is fetched once, hashed (it must be the pinned digest, or the one the registry
names for the tag) and checked as a document (``_parse_manifest``) before any layer is read.
So a node's load, ``frt mirror DIR --from oci://…`` and ``frt verify --mirror oci://…`` take from
the artefact exactly what the lock names by digest, and hash every blob against the lock as from
any store (the callers do). A tag moved to another artefact holds other layers: the files of
this lock are then missing, named; an ``@sha256:`` pin does not move.

**Bounds**: the object store's, read the same way (``store_api.store_config``):
``FRT_STORE_ATTEMPTS`` attempts per request (connection errors, 5xx, 429; a broken blob download
resumes with a Range request), ``FRT_STORE_TIMEOUT`` for a connection or a read that stalls, and
``FRT_STORE_DEADLINE`` for each whole transfer, retries included, enforced by the same watcher
(``store_api._deadline``) that shuts the transfer's sockets down, so a registry that trickles a
byte inside every read timeout is still stopped. A blob larger than its descriptor says is cut at
``size + 1`` bytes and refused; a manifest larger than 4 MiB too.

**Who may be talked to.** HTTPS, except to a loopback registry (127.0.0.0/8, ::1, localhost) or
where ``FRT_OCI_PLAIN_HTTP=1``. Credentials are Docker's (``DOCKER_CONFIG``, else
``~/.docker/config.json``: ``auths`` entries, ``auth`` or ``username``/``password``), sent only to
the registry's own origin and to its token service (a Bearer challenge's realm: over HTTPS, or to
the registry's own host); a redirect (a registry hands blob downloads to a storage service) is
followed without the ``Authorization`` header when it leaves the origin, and never from HTTPS down to
plain HTTP. No message shows a credential. Errors are the object store's: ``StoreAccess`` (exit 2:
a bad address, refused credentials, no such repository or tag), ``ObjectMissing`` (exit 1) and
``StoreUnavailable`` (exit 1: a server error or timeout past the bounds, a malformed or lying answer).

Only the standard library speaks HTTP here (``http.client``): a node imports nothing more.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import ipaddress
import json
import os
import re
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass

from .. import settings
from ..errors import ObjectMissing, StoreAccess, StoreUnavailable, UsageError
from .store_api import Location, ObjectStore, StoreInfo, _deadline, _DeadlinePassed, store_config

__all__ = ["OciLocation", "parse_oci", "OciStore", "MANIFEST", "INDEX", "ARTIFACT", "LAYER", "TITLE",
           "registry_error"]

MANIFEST = "application/vnd.oci.image.manifest.v1+json"
INDEX = "application/vnd.oci.image.index.v1+json"
EMPTY = "application/vnd.oci.empty.v1+json"
EMPTY_JSON = b"{}"
ARTIFACT = "application/vnd.frt-dist.lock.v1"  # the artefact of one lock
LAYER = "application/vnd.frt-dist.file.v1"  # one file of it
TITLE = "org.opencontainers.image.title"
KEY = "dev.frt-dist.key"  # the object-store key the layer stands for (sha256/<hex>, lockfiles/<model>.lock)
MODEL = "dev.frt-dist.model"
LOCK_DIGEST = "dev.frt-dist.lock-digest"

MANIFEST_LIMIT = 4 << 20
_CHUNK = 1 << 20
_REDIRECTS = 5
_REPO = re.compile(r"[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*)*")
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_HOST = re.compile(r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}"
                   r"[A-Za-z0-9])?)*|\[[0-9A-Fa-f:.]{2,45}\])(?::[0-9]{1,5})?")
_TITLE = re.compile(r"[A-Za-z0-9_.\-]+(?:/[A-Za-z0-9_.\-+=@]+)*")


# ---------------------------------------------------------------------------
# the address


@dataclass(frozen=True)
class OciLocation(Location):
    """``oci://REGISTRY/REPOSITORY[:TAG][@sha256:HEX]`` parsed (``scheme`` is ``"oci"``)."""

    registry: str = ""  # host[:port]
    repository: str = ""
    tag: str = ""  # "" when none was given
    digest: str = ""  # "sha256:<hex>" when pinned

    @property
    def url(self) -> str:
        return f"oci://{self.registry}/{self.repository}" + (f":{self.tag}" if self.tag else "") + \
            (f"@{self.digest}" if self.digest else "")

    @property
    def reference(self) -> str:
        """What the manifest is asked for by: the digest when pinned, else the tag (``latest`` when none)."""
        return self.digest or self.tag or "latest"

    @property
    def repo_url(self) -> str:
        return f"oci://{self.registry}/{self.repository}"


def parse_oci(text: str) -> OciLocation:
    """Parse an ``oci://`` address; ``StoreAccess`` (exit 2) naming what is wrong with it."""
    hint = ["e.g. oci://registry.example.com/frt/kernels:prod, or @sha256:<64 hex> to pin an artefact"]
    rest = text.split("://", 1)[1]
    registry, sep, path = rest.partition("/")
    if "@" in registry:
        raise StoreAccess("an oci:// address with a user name or password in it is refused (credentials come from "
                          "the Docker config: DOCKER_CONFIG or ~/.docker/config.json)", hints=hint)
    if not sep or not path or not _HOST.fullmatch(registry):
        raise StoreAccess(f"{text}: not oci://REGISTRY/REPOSITORY[:TAG][@sha256:HEX]", hints=hint)
    digest = ""
    if "@" in path:
        path, digest = path.split("@", 1)
        if not _DIGEST.fullmatch(digest):
            raise StoreAccess(f"{text}: {digest!r} is not a sha256:<64 lowercase hex> digest", hints=hint)
    tag = ""
    last = path.rsplit("/", 1)[-1]
    if ":" in last:
        path, tag = path.rsplit(":", 1)
        if not _TAG.fullmatch(tag):
            raise StoreAccess(f"{text}: {tag!r} is not a tag (letters, digits, '_', '.', '-'; at most 128)", hints=hint)
    if not _REPO.fullmatch(path) or len(path) > 255:
        raise StoreAccess(f"{text}: {path!r} is not a repository name (lowercase path segments: letters, digits, "
                          "'.', '_', '-')", hints=hint)
    return OciLocation("oci", registry=registry.lower(), repository=path, tag=tag, digest=digest)


def _loopback(host: str) -> bool:
    host = host.strip("[]").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _plain_http_allowed(host: str) -> bool:
    return _loopback(host) or (settings.raw("FRT_OCI_PLAIN_HTTP") or "").strip() == "1"


def _split_hostport(hostport: str) -> tuple[str, int | None]:
    u = urllib.parse.urlsplit("//" + hostport)
    return (u.hostname or ""), u.port


# ---------------------------------------------------------------------------
# credentials (Docker's config)


def _docker_config() -> dict:
    folder = settings.raw("DOCKER_CONFIG") or os.path.join(os.path.expanduser("~"), ".docker")
    path = os.path.join(folder, "config.json")
    try:
        with open(path, "rb") as f:
            data = f.read(1 << 20)
    except OSError:
        return {}
    try:
        doc = json.loads(data)
    except ValueError:
        raise StoreAccess(f"{path}: not valid JSON (the Docker config frt reads registry credentials from)",
                          hints=["fix it, or point DOCKER_CONFIG at a folder holding a valid config.json"]) from None
    return doc if isinstance(doc, dict) else {}


def _credentials(registry: str) -> tuple[str, str] | None:
    """``(user, password)`` for ``registry`` (host[:port]) from the Docker config's ``auths``."""
    auths = _docker_config().get("auths")
    if not isinstance(auths, dict):
        return None
    for name, entry in auths.items():
        if not isinstance(entry, dict) or not isinstance(name, str):
            continue
        host = urllib.parse.urlsplit(name if "://" in name else "//" + name).netloc.lower()
        if host != registry.lower():
            continue
        if isinstance(entry.get("auth"), str) and entry["auth"]:
            try:
                user, _, pw = base64.b64decode(entry["auth"]).decode("utf-8").partition(":")
            except (ValueError, UnicodeDecodeError):
                raise StoreAccess(f"the Docker config's auths entry for {registry}: 'auth' is not base64 of "
                                  "user:password", hints=["log in again (docker login / oras login)"]) from None
            return user, pw
        if isinstance(entry.get("username"), str) and isinstance(entry.get("password"), str):
            return entry["username"], entry["password"]
    return None


def _basic(creds: tuple[str, str]) -> str:
    return "Basic " + base64.b64encode(f"{creds[0]}:{creds[1]}".encode()).decode("ascii")


def _challenge(header: str) -> tuple[str, dict]:
    scheme, _, rest = header.strip().partition(" ")
    params = dict((k.lower(), v) for k, v in re.findall(r'([A-Za-z_]+)="([^"]*)"', rest))
    return scheme.lower(), params


# ---------------------------------------------------------------------------
# errors


def registry_error(where: str, status: int, what: str) -> Exception:
    """The error for an HTTP status the registry answered ``what`` (a manifest, a blob) with."""
    if status == 401:
        return StoreAccess(f"{where}: the registry wants credentials (401) and took none frt had",
                           hints=["log in (docker login / oras login, or an auths entry in DOCKER_CONFIG/config.json "
                                  "or ~/.docker/config.json) with a user allowed to pull (and push, to publish); frt "
                                  "runs no credential helper (credsStore, credHelpers): give it an auths entry"])
    if status == 403:
        return StoreAccess(f"{where}: access denied (403)",
                           hints=["the registry refused this user: check its permissions on the repository"])
    if status == 404:
        return ObjectMissing(f"{where}: no such {what} (404)")
    return StoreUnavailable(f"{where}: the registry answered {status} for the {what}")


class _Retry(Exception):
    """A failure worth another attempt (a connection error, 5xx, 429, a broken download)."""


class _Response:
    def __init__(self, resp: http.client.HTTPResponse, conn, url: str):
        self.resp, self.conn, self.url, self.status = resp, conn, url, resp.status

    def header(self, name: str) -> str | None:
        return self.resp.getheader(name)

    def read(self, limit: int) -> bytes:
        """The body, at most ``limit`` + 1 bytes (the caller refuses more)."""
        out = bytearray()
        while len(out) <= limit:
            chunk = self.resp.read(min(_CHUNK, limit + 1 - len(out)))
            if not chunk:
                break
            out += chunk
        return bytes(out)

    def close(self) -> None:
        try:
            self.resp.close()
        except Exception:  # noqa: BLE001 - closing a broken response
            pass


# ---------------------------------------------------------------------------
# the HTTP client


class _Client:
    """Requests to one registry: scheme choice, credentials, token auth, redirects, retries, bounds."""

    def __init__(self, loc: OciLocation):
        self.loc = loc
        host, _ = _split_hostport(loc.registry)
        self.scheme = "http" if _plain_http_allowed(host) else "https"
        self.base = f"{self.scheme}://{loc.registry}"
        self.cfg = store_config()
        self._creds: tuple[str, str] | None | bool = False  # False: not read yet
        self._tokens: dict[str, str] = {}  # scope -> "Bearer …"
        self._auth: str | None = None  # the Authorization for the registry's origin, once known
        self._lock = threading.Lock()
        self._local = threading.local()

    # -- credentials --
    def creds(self):
        if self._creds is False:
            self._creds = _credentials(self.loc.registry)
        return self._creds

    def _origin(self, url: str) -> tuple[str, str, int]:
        u = urllib.parse.urlsplit(url)
        return u.scheme, (u.hostname or "").lower(), u.port or (443 if u.scheme == "https" else 80)

    # -- connections (one per origin per thread, kept) --
    def _conn(self, url: str, timeout: float):
        scheme, host, port = self._origin(url)
        pool = getattr(self._local, "pool", None)
        if pool is None:
            pool = self._local.pool = {}
        key = (scheme, host, port)
        conn = pool.get(key)
        if conn is None:
            if scheme == "https":
                conn = http.client.HTTPSConnection(host, port, timeout=timeout, context=ssl.create_default_context())
            else:
                conn = http.client.HTTPConnection(host, port, timeout=timeout)
            pool[key] = conn
        return conn

    def _drop(self, url: str) -> None:
        pool = getattr(self._local, "pool", {})
        conn = pool.pop(self._origin(url), None)
        if conn is not None:
            conn.close()

    def close(self) -> None:
        for conn in list(getattr(self._local, "pool", {}).values()):
            conn.close()
        self._local.pool = {}

    # -- one request, following redirects and auth challenges --
    def request(self, method: str, path: str, *, where: str, headers: dict | None = None, body=None,
                body_len: int | None = None, transfer=None) -> _Response:
        """One request (``path`` below the registry, or an absolute URL the registry gave), retried
        up to FRT_STORE_ATTEMPTS times on a connection error, 5xx or 429; the final response
        (any status) is returned with its body unread. ``body``: bytes, or a callable giving a fresh
        file object for each attempt."""
        attempts = self.cfg["attempts"]
        last = None
        for attempt in range(attempts):
            if attempt:
                time.sleep(min(0.1 * 2 ** attempt, 2.0))
            try:
                resp = self._once(method, path, where=where, headers=headers or {}, body=body, body_len=body_len,
                                  transfer=transfer)
            except _Retry as exc:
                last = str(exc)
                continue
            if resp.status >= 500 or resp.status == 429:
                last = f"the registry answered {resp.status}"
                resp.read(1 << 16)
                resp.close()
                continue
            return resp
        raise StoreUnavailable(f"{where}: {last}, through {attempts} attempt(s) (FRT_STORE_ATTEMPTS)",
                               hints=["the registry is down or overloaded; try again, or check its address"])

    def _once(self, method, path, *, where, headers, body, body_len, transfer) -> _Response:
        url = path if "://" in path else self.base + path
        sent_auth = False
        for _hop in range(_REDIRECTS + 2):
            if transfer is not None and transfer.expired:
                raise _DeadlinePassed()
            same = self._origin(url)[:3] == self._origin(self.base)[:3]
            h = {"User-Agent": "frt-dist", **headers}
            auth = self._auth if same else None
            if auth:
                h["Authorization"] = auth
            data = body() if callable(body) else body
            if data is not None:
                h["Content-Length"] = str(body_len if body_len is not None else len(data))
            elif method in ("PUT", "POST"):
                h["Content-Length"] = "0"
            u = urllib.parse.urlsplit(url)
            target = (u.path or "/") + (f"?{u.query}" if u.query else "")
            conn = self._conn(url, self.cfg["timeout"])
            try:
                if conn.sock is None:
                    conn.connect()
                if transfer is not None:
                    transfer.add(conn)
                conn.request(method, target, body=data, headers=h)
                resp = conn.getresponse()
            except (OSError, http.client.HTTPException) as exc:
                self._drop(url)
                if transfer is not None and transfer.expired:
                    raise _DeadlinePassed() from None
                raise _Retry(f"{type(exc).__name__}: {exc}") from None
            finally:
                if hasattr(data, "close"):
                    data.close()
            r = _Response(resp, conn, url)
            if r.status in (301, 302, 303, 307, 308):
                loc = r.header("Location")
                r.read(1 << 16)
                r.close()
                if not loc:
                    raise StoreUnavailable(f"{where}: a redirect ({r.status}) without a Location")
                nxt = urllib.parse.urljoin(url, loc)
                ns, nh, _np = self._origin(nxt)
                if ns not in ("http", "https"):
                    raise StoreUnavailable(f"{where}: the registry redirected to a {ns}: address; refused")
                if ns == "http" and (self._origin(url)[0] == "https" or not _plain_http_allowed(nh)):
                    raise StoreUnavailable(f"{where}: the registry redirected to plain HTTP on {nh}; refused "
                                           "(FRT_OCI_PLAIN_HTTP=1 allows plain HTTP to a registry you trust)")
                if r.status == 303 or (r.status in (301, 302) and method not in ("GET", "HEAD")):
                    method, body = ("GET" if method != "HEAD" else "HEAD"), None
                url = nxt
                continue
            if r.status == 401 and same and not sent_auth:
                challenge = r.header("WWW-Authenticate") or ""
                r.read(1 << 16)
                r.close()
                new = self._authorise(challenge, where, transfer)
                if new is None:
                    return r
                self._auth, sent_auth = new, True
                continue
            return r
        raise StoreUnavailable(f"{where}: more than {_REDIRECTS} redirects; refused")

    def _authorise(self, challenge: str, where: str, transfer) -> str | None:
        """The Authorization header a 401's challenge asks for, or None when frt has nothing to offer."""
        scheme, params = _challenge(challenge)
        creds = self.creds()
        if scheme == "basic":
            return _basic(creds) if creds else None
        if scheme != "bearer" or not params.get("realm"):
            return None
        realm = params["realm"]
        rs, rh, _rp = self._origin(realm)
        if rs not in ("http", "https") or (rs == "http" and not _plain_http_allowed(rh)):
            raise StoreAccess(f"{where}: the registry's token service {rs}://{rh} is not HTTPS; refused "
                              "(FRT_OCI_PLAIN_HTTP=1 allows plain HTTP to a registry you trust)")
        q = {k: params[k] for k in ("service", "scope") if params.get(k)}
        token_url = realm + ("&" if "?" in realm else "?") + urllib.parse.urlencode(q)
        cache = q.get("scope", "") + "|" + realm
        with self._lock:
            if cache in self._tokens and self._tokens[cache] != self._auth:
                return self._tokens[cache]
            self._tokens.pop(cache, None)  # refused (expired): ask the token service again
        headers = {"User-Agent": "frt-dist"}
        own_host = rh == self._origin(self.base)[1]
        if creds and (rs == "https" or own_host):
            headers["Authorization"] = _basic(creds)
        conn = (http.client.HTTPSConnection(rh, self._origin(realm)[2], timeout=self.cfg["timeout"],
                                            context=ssl.create_default_context()) if rs == "https"
                else http.client.HTTPConnection(rh, self._origin(realm)[2], timeout=self.cfg["timeout"]))
        try:
            u = urllib.parse.urlsplit(token_url)
            conn.connect()
            if transfer is not None:
                transfer.add(conn)
            conn.request("GET", (u.path or "/") + (f"?{u.query}" if u.query else ""), headers=headers)
            resp = conn.getresponse()
            data = resp.read(1 << 20)
        except (OSError, http.client.HTTPException) as exc:
            raise StoreUnavailable(f"{where}: the registry's token service did not answer: {type(exc).__name__}") \
                from None
        finally:
            conn.close()
        if resp.status in (401, 403):
            raise StoreAccess(f"{where}: the registry's token service refused the credentials ({resp.status})",
                              hints=["log in again (docker login / oras login), or check DOCKER_CONFIG"])
        try:
            doc = json.loads(data)
            token = doc.get("token") or doc.get("access_token")
        except (ValueError, AttributeError):
            token = None
        if not isinstance(token, str) or not token:
            raise StoreUnavailable(f"{where}: the registry's token service answered {resp.status} without a token")
        value = f"Bearer {token}"
        with self._lock:
            self._tokens[cache] = value
        return value


# ---------------------------------------------------------------------------
# the manifest


@dataclass(frozen=True)
class Layer:
    digest: str
    size: int
    title: str
    key: str
    media_type: str


def _fail(where: str, what: str) -> StoreUnavailable:
    return StoreUnavailable(f"{where}: the manifest is malformed: {what}; nothing of it is used",
                            hints=["the tag or digest may not name an artefact frt pushed; push it again with "
                                   "`frt publish oci://…`"])


def descriptor_problem(d, field: str) -> str | None:
    """Why ``d`` is not an OCI descriptor frt can use (``field`` names it in the message), or None."""
    if not isinstance(d, dict):
        return f"{field} is not an object"
    if not isinstance(d.get("mediaType"), str):
        return f"{field}.mediaType is missing"
    if not isinstance(d.get("digest"), str) or not _DIGEST.fullmatch(d["digest"]):
        return f"{field}.digest is not sha256:<64 hex>"
    if not isinstance(d.get("size"), int) or isinstance(d.get("size"), bool) or d["size"] < 0:
        return f"{field}.size is not a whole number"
    ann = d.get("annotations", {})
    if not isinstance(ann, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in ann.items()):
        return f"{field}.annotations is not a map of strings"
    return None


def _parse_manifest(data: bytes, where: str) -> tuple[dict, list[Layer]]:
    """The manifest document and its layers, checked: an OCI image manifest of frt's artefact type,
    every layer a sha256 descriptor with a plain relative title. ``StoreUnavailable`` naming the field."""
    from ..documents.schema import JSONInvalid, json_loads  # noqa: PLC0415

    try:
        doc = json_loads(data)
    except JSONInvalid as exc:
        raise _fail(where, f"not JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise _fail(where, "not a JSON object")
    if doc.get("schemaVersion") != 2:
        raise _fail(where, "schemaVersion is not 2")
    if doc.get("mediaType", MANIFEST) != MANIFEST:
        raise _fail(where, f"mediaType {str(doc.get('mediaType'))[:80]!r} is not an OCI image manifest")
    if doc.get("artifactType") != ARTIFACT:
        raise StoreUnavailable(f"{where}: not an artefact frt pushed (artifactType "
                               f"{str(doc.get('artifactType'))[:80]!r}, not {ARTIFACT!r}); nothing of it is used",
                               hints=["the tag may have been moved to another artefact: pin the one you published "
                                      "(oci://…@sha256:…), or push it again with `frt publish oci://…`"])
    why = descriptor_problem(doc.get("config"), "config")
    if why:
        raise _fail(where, why)
    layers = doc.get("layers")
    if not isinstance(layers, list):
        raise _fail(where, "layers is not a list")
    out, titles = [], set()
    for i, d in enumerate(layers):
        why = descriptor_problem(d, f"layers[{i}]")
        if why:
            raise _fail(where, why)
        ann = d.get("annotations", {})
        title, key = ann.get(TITLE, ""), ann.get(KEY, "")
        if not _TITLE.fullmatch(title) or any(p in (".", "..") for p in title.split("/")):
            raise _fail(where, f"layers[{i}] has no plain relative title ({TITLE})")
        if title in titles:
            raise _fail(where, f"layers[{i}]: the title {title!r} twice")
        titles.add(title)
        out.append(Layer(d["digest"], d["size"], title, key, d["mediaType"]))
    return doc, out


# ---------------------------------------------------------------------------
# the store


class OciStore(ObjectStore):
    """One artefact in a registry, as an ``ObjectStore`` (see the module docstring). Writing
    (``reading=False``) uploads blobs under the keys publish gives and remembers each one's
    descriptor for ``oci_publish.finish_lock``; reading resolves the reference once and serves its layers."""

    def __init__(self, loc: OciLocation, *, reading: bool = False):
        self.loc, self.reading = loc, reading
        self.url = loc.url
        self.client = _Client(loc)
        self._lock = threading.Lock()
        self._manifest: tuple[str, bytes, dict, list[Layer]] | None = None
        self.blobs: dict[str, tuple[str, int]] = {}  # write: key -> (digest, size)
        self.sent = 0  # write: blobs uploaded
        if not reading and loc.digest:
            raise UsageError(f"{loc.url}: a digest names an artefact already pushed; publish to a tag "
                             f"({loc.repo_url}:TAG)")

    # -- names --
    def _where(self) -> str:
        m = self._manifest
        return f"{self.url} ({m[0]})" if m and not self.loc.digest else self.url

    def where(self, key: str) -> str:
        if self._manifest is None and self.reading:
            try:
                self.manifest()
            except Exception:  # noqa: BLE001 - a name for a message: the fetch's own error is raised where it is used
                pass
        layer = self._layer_or_none(key) if self._manifest else None
        return f"{self._where()} layer {layer.title if layer else key}"

    # -- reading --
    def manifest(self) -> tuple[str, bytes, dict, list[Layer]]:
        """(digest, bytes, document, layers) of the artefact the reference names, fetched once."""
        with self._lock:
            if self._manifest is None:
                self._manifest = self._fetch_manifest(self.loc.reference)
            return self._manifest

    def _fetch_manifest(self, ref: str) -> tuple[str, bytes, dict, list[Layer]]:
        where = self.url
        data, said = self.get_manifest_bytes(ref, accept=MANIFEST)
        if data is None:
            raise StoreAccess(f"{where}: no such artefact in the registry (no manifest {ref})",
                              hints=[f"publish it: `frt publish {self.loc.repo_url}:{self.loc.tag or 'TAG'}`, or "
                                     "check the address"])
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        if self.loc.digest and digest != self.loc.digest:
            raise StoreUnavailable(f"{where}: the registry answered a manifest whose digest is {digest}, not the "
                                   "pinned one; nothing of it is used")
        if said and said != digest:
            raise StoreUnavailable(f"{where}: the registry says the manifest is {said}, its bytes hash to {digest}; "
                                   "nothing of it is used")
        doc, layers = _parse_manifest(data, f"{where} ({digest})" if not self.loc.digest else where)
        return digest, data, doc, layers

    def get_manifest_bytes(self, ref: str, *, accept: str) -> tuple[bytes | None, str | None]:
        """A manifest's bytes (at most 4 MiB) and the digest the registry names it by; None when absent."""
        where = self.url
        with _deadline(self.client.cfg["deadline"]) as tr:
            try:
                r = self.client.request("GET", f"/v2/{self.loc.repository}/manifests/{ref}", where=where,
                                        headers={"Accept": accept}, transfer=tr)
                try:
                    if r.status == 404:
                        return None, None
                    if r.status != 200:
                        raise registry_error(where, r.status, f"manifest {ref}")
                    data = r.read(MANIFEST_LIMIT)
                finally:
                    r.close()
            except (_DeadlinePassed, OSError, http.client.HTTPException):
                if tr.expired:
                    raise _deadline_error(where, self.client.cfg["deadline"]) from None
                raise StoreUnavailable(f"{where}: the manifest {ref} could not be read") from None
            if tr.expired:
                raise _deadline_error(where, self.client.cfg["deadline"])
        if len(data) > MANIFEST_LIMIT:
            raise StoreUnavailable(f"{where}: the manifest {ref} is larger than {MANIFEST_LIMIT} bytes; refused")
        return data, r.header("Docker-Content-Digest")

    def _layer_or_none(self, key: str) -> Layer | None:
        _d, _b, _doc, layers = self._manifest
        for layer in layers:
            if layer.key == key:
                return layer
        if key.startswith("sha256/"):
            want = "sha256:" + key.split("/", 1)[1]
            return next((la for la in layers if la.digest == want), None)
        return None

    def _layer(self, key: str) -> Layer:
        self._refuse_receipts(key)
        self.manifest()
        layer = self._layer_or_none(key)
        if layer is None:
            raise ObjectMissing(f"{self._where()}: the artefact has no layer for {key}")
        return layer

    def head(self, key: str) -> int | None:
        if not self.reading:
            info = self.stat(key)
            return None if info is None else info.size
        try:
            return self._layer(key).size
        except ObjectMissing:
            return None

    def get(self, key: str, out, *, limit: int | None = None, progress: Callable[[int], None] | None = None) -> int:
        layer = self._layer(key)
        return self.get_blob(layer.digest, layer.size, out, where=self.where(key), limit=limit, progress=progress)

    def get_blob(self, digest: str, size: int, out, *, where: str, limit: int | None = None,
                 progress: Callable[[int], None] | None = None) -> int:
        """Stream blob ``digest`` (``size`` bytes as its descriptor says) into ``out.write``. More
        than ``size`` bytes, or a Content-Length other than what is still owed, is refused
        (``StoreUnavailable``); a broken download resumes (a Range request) within the bounds."""
        cap = size if limit is None else min(size, limit)
        n = 0
        cfg = self.client.cfg
        with _deadline(cfg["deadline"]) as tr:
            tries = 0
            while True:
                headers = {"Range": f"bytes={n}-"} if n else {}
                try:
                    r = self.client.request("GET", f"/v2/{self.loc.repository}/blobs/{digest}", where=where,
                                            headers=headers, transfer=tr)
                except _DeadlinePassed:
                    raise _deadline_error(where, cfg["deadline"]) from None
                try:
                    if r.status not in (200, 206):
                        raise registry_error(where, r.status, "blob")
                    skip = n if (n and r.status == 200) else 0
                    length = r.header("Content-Length")
                    if length is not None:
                        try:
                            told = int(length)
                        except ValueError:
                            told = -1
                        if told != (size if r.status == 200 else size - n):
                            raise StoreUnavailable(f"{where}: the registry says the blob is {length} bytes"
                                                   f"{' from byte ' + str(n) if r.status == 206 else ''}; the "
                                                   f"manifest says {size}; refused")
                    while True:
                        try:
                            chunk = r.resp.read(_CHUNK)
                        except (OSError, http.client.HTTPException):
                            chunk = None
                        if chunk is None:
                            raise _Retry("the download broke off")
                        if not chunk:
                            break
                        if skip:
                            cut = min(skip, len(chunk))
                            chunk, skip = chunk[cut:], skip - cut
                            if not chunk:
                                continue
                        if n + len(chunk) > cap:
                            out.write(chunk[: cap + 1 - n])
                            n = cap + 1
                            if limit is not None and limit < size:
                                return n
                            raise StoreUnavailable(f"{where}: the registry sent more than the {size} bytes the "
                                                   "manifest says; refused")
                        out.write(chunk)
                        n += len(chunk)
                        if progress:
                            progress(len(chunk))
                    if n < size:
                        raise _Retry(f"the download ended at {n} of {size} bytes")
                    return n
                except _Retry as exc:
                    self.client._drop(r.url)
                    tries += 1
                    if tr.expired:
                        raise _deadline_error(where, cfg["deadline"]) from None
                    if tries >= cfg["attempts"]:
                        raise StoreUnavailable(f"{where}: {exc}, through {tries} attempt(s) (FRT_STORE_ATTEMPTS)") \
                            from None
                finally:
                    r.close()
                if tr.expired:
                    raise _deadline_error(where, cfg["deadline"])

    def list(self, prefix: str) -> list[tuple[str, int]]:
        self._refuse_receipts(prefix)
        _d, _b, _doc, layers = self.manifest()
        return sorted((la.key, la.size) for la in layers if la.key.startswith(prefix.rstrip("/") + "/"))

    def _refuse_receipts(self, key: str) -> None:
        if key.startswith("receipts"):
            raise UsageError(f"{self.loc.repo_url}: receipts travel between qualification hosts through an object "
                             "store (s3://, file://); a registry carries a lock's artefact and its signatures",
                             hints=["frt receipts push s3://bucket/prefix"])

    # -- writing --
    def stat(self, key: str) -> StoreInfo | None:
        self._refuse_receipts(key)
        if self.reading:
            size = self.head(key)
            return None if size is None else StoreInfo(size)
        if not key.startswith("sha256/"):
            return None  # another algorithm's key: put_file learns its sha256 (and asks the registry) then
        digest = "sha256:" + key.split("/", 1)[1]
        size = self.blob_size(digest)
        if size is None:
            return None
        with self._lock:
            self.blobs[key] = (digest, size)
        return StoreInfo(size, base64.b64encode(bytes.fromhex(digest[7:])).decode("ascii"))

    def blob_size(self, digest: str) -> int | None:
        """The size a HEAD of the blob answers, None when the repository does not hold it."""
        where = f"{self.loc.repo_url} blob {digest}"
        with _deadline(self.client.cfg["deadline"]) as tr:
            try:
                r = self.client.request("HEAD", f"/v2/{self.loc.repository}/blobs/{digest}", where=where, transfer=tr)
            except _DeadlinePassed:
                raise _deadline_error(where, self.client.cfg["deadline"]) from None
            r.close()
        if r.status == 404:
            return None
        if r.status != 200:
            raise registry_error(where, r.status, "blob")
        try:
            return int(r.header("Content-Length") or "")
        except ValueError:
            return None

    def put_file(self, key: str, path, *, progress=None, sha256: str | None = None) -> None:
        self._refuse_receipts(key)
        if sha256 is None:
            h = hashlib.sha256()
            with open(path, "rb") as f:
                while chunk := f.read(_CHUNK):
                    h.update(chunk)
            hexd = h.hexdigest()
        else:
            hexd = base64.b64decode(sha256).hex()
        size = os.path.getsize(path)
        self.upload(f"sha256:{hexd}", size, lambda: open(path, "rb"), key=key)

    def put_bytes(self, key: str, data: bytes) -> None:
        self._refuse_receipts(key)
        self.upload("sha256:" + hashlib.sha256(data).hexdigest(), len(data), lambda: data, key=key)

    def upload(self, digest: str, size: int, body, *, key: str | None = None, check: bool = True) -> None:
        """Upload one blob (POST, then a monolithic PUT), unless ``check`` finds it there already."""
        where = f"{self.loc.repo_url} blob {digest}" + (f" ({key})" if key else "")
        if not check or self.blob_size(digest) != size:
            repo = self.loc.repository
            with _deadline(self.client.cfg["deadline"]) as tr:
                try:
                    r = self.client.request("POST", f"/v2/{repo}/blobs/uploads/", where=where, transfer=tr)
                    r.read(1 << 16)
                    r.close()
                    if r.status != 202 or not r.header("Location"):
                        raise registry_error(where, r.status, "upload") if r.status != 202 else \
                            StoreUnavailable(f"{where}: the registry started an upload without a Location")
                    loc = urllib.parse.urljoin(r.url, r.header("Location"))
                    loc += ("&" if "?" in loc else "?") + urllib.parse.urlencode({"digest": digest})
                    r = self.client.request("PUT", loc, where=where, body=body, body_len=size,
                                            headers={"Content-Type": "application/octet-stream"}, transfer=tr)
                    r.read(1 << 16)
                    r.close()
                except _DeadlinePassed:
                    raise _deadline_error(where, self.client.cfg["deadline"]) from None
            if r.status != 201:
                raise registry_error(where, r.status, "upload")
            with self._lock:
                self.sent += 1
        if key is not None:
            with self._lock:
                self.blobs[key] = (digest, size)

    def put_manifest(self, ref: str, data: bytes, media_type: str = MANIFEST) -> str:
        """PUT a manifest under ``ref`` (a tag or its digest); its digest (checked against the registry's)."""
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        where = f"{self.loc.repo_url}:{ref}" if not ref.startswith("sha256:") else f"{self.loc.repo_url}@{ref}"
        with _deadline(self.client.cfg["deadline"]) as tr:
            try:
                r = self.client.request("PUT", f"/v2/{self.loc.repository}/manifests/{ref}", where=where, body=data,
                                        headers={"Content-Type": media_type}, transfer=tr)
            except _DeadlinePassed:
                raise _deadline_error(where, self.client.cfg["deadline"]) from None
            body = r.read(1 << 16)
            r.close()
        if r.status not in (200, 201):
            detail = body[:300].decode("utf-8", "replace").strip()
            err = registry_error(where, r.status, "manifest")
            if r.status < 500 and r.status not in (401, 403, 404):
                err = StoreUnavailable(f"{where}: the registry refused the manifest ({r.status}): {detail}")
            raise err
        said = r.header("Docker-Content-Digest")
        if said and said != digest:
            raise StoreUnavailable(f"{where}: the registry stored the manifest as {said}, its bytes hash to {digest}")
        self.last_put_headers = {k.lower(): v for k, v in r.resp.getheaders()}
        return digest

    def close(self) -> None:
        self.client.close()


def _deadline_error(where: str, deadline: float) -> StoreUnavailable:
    return StoreUnavailable(f"{where}: the transfer took longer than FRT_STORE_DEADLINE={deadline:g}s (its retries "
                            "included) and was stopped; nothing of it is used",
                            hints=["the registry is too slow or sends its bytes a few at a time; check the registry "
                                   "and the network (FRT_STORE_DEADLINE raises the limit for a slow link and large "
                                   "files)"])


def empty_descriptor() -> dict:
    return {"mediaType": EMPTY, "digest": "sha256:" + hashlib.sha256(EMPTY_JSON).hexdigest(), "size": len(EMPTY_JSON)}


def canonical_json(doc) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def lock_digest(lock) -> str:
    return "sha256:" + hashlib.sha256(lock.render()).hexdigest()
