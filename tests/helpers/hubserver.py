"""In-process fake of the Hugging Face Hub HTTP protocol, serving *kernel* repositories.

Tests build repositories in memory (``HubServer.commit``) and point the real
``huggingface_hub`` client (``HfApi(endpoint=server.url)`` or ``HF_ENDPOINT``) and the
real ``kernels`` library at it. Only the standard library is used.

Protocol notes (verified against huggingface_hub 2.4.0 and kernels 0.17.2)
-------------------------------------------------------------------------
Kernel repos use the URL prefix ``kernels/`` (``constants.REPO_TYPES_URL_PREFIXES``) and the
API prefix ``api/kernels/`` (``f"api/{repo_type}s/"``). Endpoints served:

``GET  /api/kernels/<ns>/<name>``                      ``HfApi.kernel_info`` / ``repo_info(repo_type="kernel")``
``GET  /api/kernels/<ns>/<name>/revision/<rev>``       same, with ``revision=``; ``snapshot_download`` uses it to
                                                      resolve a branch to a commit (``sha``).
``GET  /api/kernels/<ns>/<name>/refs[?include_prs=1]`` ``list_repo_refs`` (kernels: version branches ``v<N>``)
``GET  /api/kernels/<ns>/<name>/tree/<rev>[/<path>]``  ``list_repo_tree`` (``?recursive=true|false&expand=...``);
                                                      ``<path>`` arrives ``quote(path, safe="")``-encoded
                                                      (``build%2Ftorch-cpu``); no pagination (no ``Link`` header).
``GET  /api/kernels/<ns>/<name>/commits/<rev>``        ``list_repo_commits`` (small extra)
``HEAD|GET /kernels/<ns>/<name>/resolve/<rev>/<path>`` ``hf_hub_download`` / ``snapshot_download``: a HEAD for
                                                      metadata, then a GET for the bytes (``Range`` honoured).
``GET  /api/organizations/<org>/overview``             ``get_organization_overview``; kernels reads
                                                      ``trustedKernelPublisher`` from it.
``GET  /api/agent-harnesses``                          telemetry side request of huggingface_hub (see below).

*Model* repos (``repo_type="model"``: a release, ``frt release push``) are served under ``api/models/`` and
files under ``/<ns>/<name>/resolve/...`` (no prefix), with the same GET endpoints, and these writes, each
answered the way ``huggingface_hub`` 2.4 reads them (``HfApi.create_repo``, ``create_branch``, ``create_commit``):

``POST /api/repos/create``                             ``{"name", "organization", "type"}``: a repo with one
                                                      commit (``.gitattributes``) on ``main``; 409 if it exists.
``POST /api/<type>s/<ns>/<name>/branch/<branch>``      ``{"startingPoint"?}`` (default: ``main``); 409 if it exists.
``POST /api/<type>s/<ns>/<name>/preupload/<rev>``      ``{"files": [{"path", "sample", "size"}]}`` ->
                                                      ``{"files": [{"path", "uploadMode": "regular",
                                                      "shouldIgnore": false, "oid": <git blob sha at rev | null>}]}``
                                                      (the client skips a file whose oid is its own).
``POST /api/<type>s/<ns>/<name>/commit/<branch>``      NDJSON: a ``header`` line (``summary``, ``description``,
                                                      ``parentCommit``?), then ``file`` (base64 ``content``),
                                                      ``deletedFile`` and ``deletedFolder`` lines; answers
                                                      ``{"commitUrl", "commitOid"}``. A ``parentCommit`` that is no
                                                      longer the branch's head is 412 (the branch moved).

Writes need a token in ``write_tokens`` when that set is given (``Authorization: Bearer <token>``): none is
401, another 403, as the Hub answers a read-only token.

Headers the client needs on a resolve HEAD (``file_download.get_hf_file_metadata``):
``X-Repo-Commit`` (mandatory, else ``FileMetadataError``), ``ETag`` (mandatory; it names the blob in the
cache; git-blob sha1 for regular files, sha256 for LFS files, where ``X-Linked-Etag`` /
``X-Linked-Size`` take precedence) and ``Content-Length`` (expected size, checked after the GET).
No ``X-Xet-*`` headers are sent, so the client never tries Xet.

Errors (``utils/_http.py::hf_raise_for_status``) are chosen by the ``X-Error-Code`` header:
``RepoNotFound`` -> ``RepositoryNotFoundError``, ``RevisionNotFound`` -> ``RevisionNotFoundError``,
``EntryNotFound`` -> ``RemoteEntryNotFoundError`` (an ``EntryNotFoundError``). An EntryNotFound on a
resolve URL also carries ``X-Repo-Commit`` so the client can cache the non-existence (``.no_exist``).

Client quirks worth knowing when writing tests:

* ``HF_HUB_DISABLE_TELEMETRY=1`` breaks kernels 0.17.2 with huggingface_hub 2.4.0: kernels then passes
  ``user_agent=""``, the User-Agent ends in ``"; "`` and httpx2 refuses to send it
  (``LocalProtocolError: Illegal header value``). Leave telemetry on; it costs one
  ``GET /api/agent-harnesses`` per fresh HF_HOME (answered here with an empty registry).
* Retries with exponential backoff (1, 2, 4, 8, 8 s): ``list_repo_tree`` (``http_backoff``) retries
  408/429/5xx and timeouts; ``hf_hub_download`` retries its HEAD (timeout 60 s) after a 5xx/timeout
  when nothing is cached. ``list_repo_refs``, ``repo_info``/``kernel_info`` and
  ``get_organization_overview`` never retry. So inject 5xx on those, or 4xx elsewhere, to keep tests fast.
* Every request is recorded in ``requests`` (telemetry included); ``request_count(repo_id)`` is the
  robust counter, and ``wait_for_request(pattern)`` waits for one to arrive (an event, not a poll).
* ``hold(pattern)`` keeps matching requests unanswered until ``release()`` (or the server stops, or a
  hang-guard ceiling passes): a test that needs a client stuck in a request waits for that request
  with ``wait_for_request`` instead of guessing how long a sleep covers it on a busy machine.
* ``trickle(pattern, every_s)`` answers matching GETs with their whole length promised, then one byte
  every ``every_s`` (a Hub no per-read timeout stops); ``rewrite(repo, commit, files)`` serves other
  files at a commit that already exists (a Hub that lies about an immutable commit). Both are hostile
  Hubs for the deadline and pinning tests; a trickle ends when the server stops.

Files whose suffix is a typical binary (``.so``, ``.bin``, ...) or that are bigger than 10 MiB are
served the way the Hub serves LFS files (tree entry with an ``lfs`` block, sha256 ETag); everything
else is a plain git blob.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

__all__ = ["HubServer", "kernel_variant_files"]

_COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
_LFS_SUFFIXES = (".so", ".dylib", ".dll", ".pyd", ".bin", ".safetensors", ".pt", ".pth", ".whl", ".metallib")
_LFS_MIN_SIZE = 10 * 1024 * 1024
# Fixed timestamp so that repo/commit info is deterministic.
_EPOCH = "2025-01-01T00:00:00.000Z"


# ---------------------------------------------------------------------------
# In-memory git-like store
# ---------------------------------------------------------------------------


def _git_blob_sha(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass(frozen=True)
class _Blob:
    data: bytes
    git_sha: str  # git object id of what git stores (the blob itself, or its LFS pointer)
    sha256: str
    lfs: bool

    @property
    def size(self) -> int:
        return len(self.data)

    @property
    def etag(self) -> str:
        # What the Hub puts in ETag: git blob sha1 for regular files, sha256 for LFS files.
        return self.sha256 if self.lfs else self.git_sha

    @staticmethod
    def make(path: str, data: bytes) -> _Blob:
        sha256 = hashlib.sha256(data).hexdigest()
        lfs = path.endswith(_LFS_SUFFIXES) or len(data) >= _LFS_MIN_SIZE
        if lfs:
            pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {len(data)}\n"
            git_sha = _git_blob_sha(pointer.encode())
        else:
            git_sha = _git_blob_sha(data)
        return _Blob(data=data, git_sha=git_sha, sha256=sha256, lfs=lfs)

    def pointer_size(self) -> int:
        return len(f"version https://git-lfs.github.com/spec/v1\noid sha256:{self.sha256}\nsize {self.size}\n")


@dataclass
class _Commit:
    sha: str
    files: dict[str, _Blob]
    parent: str | None
    message: str
    date: str = _EPOCH

    def dirs(self) -> set[str]:
        out: set[str] = set()
        for path in self.files:
            parts = path.split("/")[:-1]
            for i in range(1, len(parts) + 1):
                out.add("/".join(parts[:i]))
        return out

    def tree_oid(self, directory: str) -> str:
        """Deterministic id of a directory (stand-in for the git tree sha)."""
        prefix = directory + "/"
        h = hashlib.sha1(b"tree\0")
        for path in sorted(p for p in self.files if p.startswith(prefix)):
            h.update(path[len(prefix) :].encode() + b"\0" + self.files[path].git_sha.encode() + b"\n")
        return h.hexdigest()


@dataclass
class _Repo:
    commits: dict[str, _Commit] = field(default_factory=dict)
    branches: dict[str, str] = field(default_factory=dict)


def _key(repo_type: str, repo_id: str) -> str:
    """Where a repo is kept: a kernel repo under its id (as before model repos were served),
    any other type under ``<type>:<id>``."""
    if repo_type not in ("kernel", "model", "dataset", "space"):
        raise ValueError(f"unknown repo type {repo_type!r}")
    return repo_id if repo_type == "kernel" else f"{repo_type}:{repo_id}"


def _normalize_path(path: str) -> str:
    p = path.replace("\\", "/").strip("/")
    if not p or any(part in ("", ".", "..") for part in p.split("/")):
        raise ValueError(f"invalid repo path: {path!r}")
    return p


# ---------------------------------------------------------------------------
# Server
# ---------------------------------------------------------------------------


_JSON = "application/json; charset=utf-8"
# (status, body, headers, content type)
_Response = tuple[int, bytes, dict[str, str], str]


def _json(obj, headers: dict[str, str] | None = None) -> _Response:
    return 200, json.dumps(obj).encode(), dict(headers or {}), _JSON


class _HTTPError(Exception):
    def __init__(self, status: int, message: str, error_code: str | None = None, headers: dict | None = None,
                 extra: dict | None = None):
        super().__init__(message)
        self.extra = extra or {}
        self.status = status
        self.message = message
        self.error_code = error_code
        self.headers = headers or {}


class HubServer:
    """Hub-protocol server for kernel repositories, backed by an in-memory store."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._repos: dict[str, _Repo] = {}
        self._trusted: dict[str, bool] = {}
        self._faults: list[tuple[str, int]] = []
        self._delays: list[tuple[str, float]] = []
        # (method or None, pattern, status, body): an answer given in place of the real one
        self._answers: list[tuple[str | None, str, int, bytes]] = []
        # (pattern, requests still to hold or None for all, the event that releases them)
        self._holds: list[list] = []
        # (pattern, seconds between bytes): GET answers sent one byte at a time
        self._trickles: list[tuple[str, float]] = []
        self._stopping = threading.Event()
        self._arrived = threading.Condition(self._lock)
        self.requests: list[tuple[str, str]] = []
        # tokens that may write (create a repo or a branch, commit); None: every request may write
        self.write_tokens: set[str] | None = None
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.url: str = ""

    # -- lifecycle ---------------------------------------------------------

    def start(self) -> HubServer:
        if self._httpd is not None:
            return self
        handler = type("_BoundHandler", (_Handler,), {"hub": self})
        httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        httpd.daemon_threads = True
        self._httpd = httpd
        self.url = f"http://127.0.0.1:{httpd.server_address[1]}"
        self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        self._stopping.set()
        self.release()
        httpd.shutdown()
        httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> HubServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- store manipulation -------------------------------------------------

    def commit(
        self,
        repo_id: str,
        files: dict[str, bytes],
        *,
        branch: str = "main",
        parent: str | None = None,
        message: str = "",
        repo_type: str = "kernel",
    ) -> str:
        """Create a commit whose tree is exactly ``files``; point ``branch`` (and "main" if absent) at it."""
        repo_id = _key(repo_type, repo_id)
        blobs = {}
        for path, data in files.items():
            p = _normalize_path(path)
            blobs[p] = _Blob.make(p, bytes(data))
        with self._lock:
            repo = self._repos.setdefault(repo_id, _Repo())
            if parent is None:
                parent = repo.branches.get(branch)
            elif parent not in repo.commits:
                raise KeyError(f"unknown parent commit {parent} in {repo_id}")
            h = hashlib.sha1()
            h.update(b"repo\0" + repo_id.encode() + b"\n")
            for p in sorted(blobs):
                h.update(b"file\0" + p.encode() + b"\0" + blobs[p].git_sha.encode() + b"\n")
            h.update(b"parent\0" + (parent or "").encode() + b"\n")
            sha = h.hexdigest()
            if sha not in repo.commits:
                repo.commits[sha] = _Commit(sha=sha, files=blobs, parent=parent, message=message or f"commit {sha[:7]}")
            repo.branches[branch] = sha
            repo.branches.setdefault("main", sha)
            return sha

    def set_branch(self, repo_id: str, branch: str, sha: str, *, repo_type: str = "kernel") -> None:
        repo_id = _key(repo_type, repo_id)
        with self._lock:
            repo = self._repos.get(repo_id)
            if repo is None or sha not in repo.commits:
                raise KeyError(f"unknown commit {sha} in {repo_id}")
            repo.branches[branch] = sha

    def delete_branch(self, repo_id: str, branch: str, *, repo_type: str = "kernel") -> None:
        repo_id = _key(repo_type, repo_id)
        with self._lock:
            repo = self._repos.get(repo_id)
            if repo is not None:
                repo.branches.pop(branch, None)

    def files(self, repo_id: str, revision: str, *, repo_type: str = "kernel") -> dict[str, bytes]:
        """The tree at ``revision`` (a branch or a commit): path -> bytes."""
        with self._lock:
            return {p: b.data for p, b in self._resolve(_key(repo_type, repo_id), revision).files.items()}

    def branch(self, repo_id: str, branch: str, *, repo_type: str = "kernel") -> str | None:
        """The commit ``branch`` points at, or None."""
        with self._lock:
            repo = self._repos.get(_key(repo_type, repo_id))
            return None if repo is None else repo.branches.get(branch)

    def set_trusted(self, org: str, trusted: bool) -> None:
        with self._lock:
            self._trusted[org] = bool(trusted)

    # -- fault injection ----------------------------------------------------

    def fail(self, pattern: str, status: int) -> None:
        """Every request whose path (raw or percent-decoded) contains ``pattern`` answers ``status``."""
        with self._lock:
            self._faults.append((pattern, int(status)))

    def answer(self, pattern: str, status: int, body: bytes, *, method: str | None = None) -> None:
        """Requests (of ``method``, or any) whose path contains ``pattern`` get this answer instead of
        the real one: a Hub that answers with a field missing, or with something that is not JSON."""
        with self._lock:
            self._answers.append((method, pattern, int(status), bytes(body)))

    def trickle(self, pattern: str, every_s: float) -> None:
        """GET answers whose path contains ``pattern``: the status and headers at once (the whole
        ``Content-Length`` promised), then the body one byte every ``every_s`` seconds."""
        with self._lock:
            self._trickles.append((pattern, float(every_s)))

    def rewrite(self, repo_id: str, commit: str, files: dict[str, bytes], *, repo_type: str = "kernel") -> None:
        """Serve ``files`` as the tree of the existing ``commit`` from now on (the Hub's commits are
        immutable; this one lies)."""
        with self._lock:
            c = self._repo(_key(repo_type, repo_id)).commits[commit]
            c.files = {_normalize_path(p): _Blob.make(_normalize_path(p), bytes(d)) for p, d in files.items()}

    def delay(self, pattern: str, seconds: float) -> None:
        """Sleep ``seconds`` before answering requests whose path contains ``pattern``."""
        with self._lock:
            self._delays.append((pattern, float(seconds)))

    def hold(self, pattern: str, count: int | None = None, ceiling: float = 120.0) -> None:
        """Leave requests whose path contains ``pattern`` unanswered until ``release()`` (all of them,
        or only the next ``count``). ``ceiling`` seconds is a hang guard, never a tuned wait: past
        it a held request is answered normally, so a client that never gives up still ends."""
        with self._lock:
            self._holds.append([pattern, count, threading.Event(), float(ceiling)])

    def release(self) -> None:
        """Answer every held request now, and hold no more."""
        with self._lock:
            holds, self._holds = self._holds, []
        for h in holds:
            h[2].set()

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()
            self._delays.clear()
            self._answers.clear()
            self._trickles.clear()
        self.release()

    # -- request accounting -------------------------------------------------

    def request_count(self, repo_id: str | None = None) -> int:
        with self._lock:
            if repo_id is None:
                return len(self.requests)
            return sum(1 for _, path in self.requests if repo_id in path)

    def reset_counts(self) -> None:
        with self._lock:
            self.requests.clear()

    def wait_for_request(self, pattern: str, timeout: float = 120.0, *, alive=None) -> bool:
        """Block until a request whose (decoded) path contains ``pattern`` has been recorded since the
        last ``reset_counts()``; True once it has. ``timeout`` is a hang guard; ``alive`` (a callable)
        is asked now and then so that a client that died early ends the wait at once (False)."""
        end = time.monotonic() + timeout
        with self._arrived:
            while not any(pattern in path for _, path in self.requests):
                left = end - time.monotonic()
                if left <= 0 or (alive is not None and not alive()):
                    return False
                self._arrived.wait(min(left, 0.5))
            return True

    # -- internal helpers used by the handler -------------------------------

    def _record(self, method: str, path: str) -> tuple[float, int | None]:
        """Log the request; return (delay seconds, injected status or None)."""
        decoded = unquote(path)
        with self._lock:
            self.requests.append((method, decoded))
            delay = sum(s for pat, s in self._delays if pat in path or pat in decoded)
            status = next((st for pat, st in self._faults if pat in path or pat in decoded), None)
            hold = next((h for h in self._holds if (h[0] in path or h[0] in decoded) and h[1] != 0), None)
            if hold is not None and hold[1] is not None:
                hold[1] -= 1
            self._arrived.notify_all()
        if hold is not None:
            hold[2].wait(hold[3])
        return delay, status

    def _repo(self, repo_id: str) -> _Repo:
        repo = self._repos.get(repo_id)
        if repo is None:
            raise _HTTPError(404, "Repository not found", "RepoNotFound")
        return repo

    def _resolve(self, repo_id: str, revision: str) -> _Commit:
        repo = self._repo(repo_id)
        rev = revision[len("refs/heads/") :] if revision.startswith("refs/heads/") else revision
        sha = repo.branches.get(rev)
        if sha is None and _COMMIT_RE.match(rev) and rev in repo.commits:
            sha = rev
        if sha is None:
            raise _HTTPError(404, f"Invalid rev id: {revision}", "RevisionNotFound")
        return repo.commits[sha]


def _truthy(params: dict[str, list[str]], key: str) -> bool:
    # httpx serializes Python bools as "true"/"false".
    return params.get(key, ["false"])[-1].lower() in ("1", "true", "yes")


class _Handler(BaseHTTPRequestHandler):
    hub: HubServer  # set on the bound subclass
    protocol_version = "HTTP/1.1"  # keep-alive: httpx reuses connections
    server_version = "FakeHub/1.0"
    timeout = 30  # idle keep-alive connections eventually free their thread
    # TCP_NODELAY on accepted sockets: a response goes out as two writes (headers, then body);
    # with Nagle on, the body waits for the client's delayed ACK, ~44 ms per request on loopback
    disable_nagle_algorithm = True

    def log_message(self, format, *args):  # silence stderr logging
        pass

    # -- plumbing -----------------------------------------------------------

    def do_GET(self):
        self._dispatch("GET")

    def do_HEAD(self):
        self._dispatch("HEAD")

    def do_POST(self):
        self._dispatch("POST")

    def _dispatch(self, method: str) -> None:
        try:
            length = int(self.headers.get("Content-Length") or 0)
            self.body = self.rfile.read(length) if length else b""
            delay, injected = self.hub._record(method, self.path)
            if delay:
                time.sleep(delay)
            if injected is not None:
                body = json.dumps({"error": f"injected failure ({injected})"}).encode()
                self._send(injected, body, {}, _JSON)
                return
            with self.hub._lock:
                decoded = unquote(self.path)
                canned = next(((st, b) for m, pat, st, b in self.hub._answers
                               if (m is None or m == method) and (pat in self.path or pat in decoded)), None)
            if canned is not None:
                self._send(canned[0], canned[1], {}, _JSON)
                return
            try:
                # Build the whole response under the store lock, send it outside the lock.
                with self.hub._lock:
                    status, body, headers, ctype = self._route(method)
            except _HTTPError as e:
                headers = dict(e.headers)
                if e.error_code:
                    headers["X-Error-Code"] = e.error_code
                headers["X-Error-Message"] = e.message
                status, body, ctype = e.status, json.dumps({"error": e.message, **e.extra}).encode(), _JSON
            except Exception as e:  # a bug in the fake itself: report it instead of hanging up
                headers = {"X-Error-Message": f"fake hub internal error: {e!r}"}
                status, body, ctype = 500, json.dumps({"error": f"fake hub internal error: {e!r}"}).encode(), _JSON
            self._send(status, body, headers, ctype)
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
            # Client went away (e.g. it timed out during an injected delay).
            self.close_connection = True

    def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None, content_type: str = "") -> None:
        self.send_response(status)
        if content_type:
            self.send_header("Content-Type", content_type)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command == "HEAD":
            return
        with self.hub._lock:
            decoded = unquote(self.path)
            every = next((s for pat, s in self.hub._trickles if pat in self.path or pat in decoded), None)
        if every is None or self.command != "GET":
            self.wfile.write(body)
            return
        for i in range(len(body)):
            if self.hub._stopping.wait(every):
                self.close_connection = True
                return
            self.wfile.write(body[i:i + 1])
            self.wfile.flush()

    # -- routing ------------------------------------------------------------

    def _route(self, method: str) -> _Response:
        split = urlsplit(self.path)
        params = parse_qs(split.query)
        # Split the *raw* path first so that %2F inside a segment (revision names, tree paths)
        # stays inside that segment.
        seg = [unquote(s) for s in split.path.split("/")[1:]]
        if seg == ["api", "agent-harnesses"] and method == "GET":
            # huggingface_hub >= 2.x telemetry (utils/_detect_agent.py) fetches this registry from
            # HF_ENDPOINT once per process/day when HF_HUB_DISABLE_TELEMETRY is not set.
            return _json({"standardEnvVars": [], "harnesses": {}})

        if seg[:2] == ["api", "organizations"] and len(seg) == 4 and seg[3] == "overview" and method == "GET":
            return self._org_overview(seg[2])

        if seg == ["api", "repos", "create"] and method == "POST":
            return self._create_repo()

        types = {"kernels": "kernel", "models": "model", "datasets": "dataset", "spaces": "space"}
        if seg[:1] == ["api"] and len(seg) >= 4 and seg[1] in types and method in ("GET", "POST"):
            repo_id = f"{seg[2]}/{seg[3]}"
            key = _key(types[seg[1]], repo_id)
            rest = seg[4:]
            if method == "POST":
                if len(rest) >= 2 and rest[0] in ("branch", "preupload", "commit"):
                    self._check_write()
                    rev = "/".join(rest[1:])
                    return {"branch": self._create_branch, "preupload": self._preupload,
                            "commit": self._commit}[rest[0]](key, repo_id, rev)
                raise _HTTPError(404, f"Not found: {split.path}")
            if not rest:
                return self._repo_info(key, "main")
            if rest[0] == "revision" and len(rest) >= 2:
                return self._repo_info(key, "/".join(rest[1:]))
            if rest == ["refs"]:
                return self._refs(key, _truthy(params, "include_prs"))
            if rest[0] == "tree" and len(rest) >= 2:
                return self._tree(key, rest[1], "/".join(rest[2:]), params)
            if rest[0] == "commits" and len(rest) >= 2:
                return self._commits(key, "/".join(rest[1:]))

        # /kernels/<ns>/<name>/resolve/<rev>/<path...>
        if seg[:1] == ["kernels"] and len(seg) >= 6 and seg[3] == "resolve" and method in ("GET", "HEAD"):
            return self._resolve_file(f"{seg[1]}/{seg[2]}", seg[4], "/".join(seg[5:]))
        # /<ns>/<name>/resolve/<rev>/<path...> (a model repo)
        if len(seg) >= 5 and seg[2] == "resolve" and method in ("GET", "HEAD"):
            return self._resolve_file(_key("model", f"{seg[0]}/{seg[1]}"), seg[3], "/".join(seg[4:]))

        raise _HTTPError(404, f"Not found: {split.path}")

    # -- endpoints ----------------------------------------------------------

    def _org_overview(self, org: str) -> _Response:
        hub = self.hub
        known = org in hub._trusted or any(r.split("/", 1)[0] == org for r in hub._repos)
        if not known:
            raise _HTTPError(404, "Organization not found")
        return _json(
            {
                "_id": hashlib.sha1(org.encode()).hexdigest()[:24],
                "name": org,
                "fullname": org,
                "avatarUrl": "",
                "isVerified": False,
                "isFollowing": False,
                "numUsers": 1,
                "numModels": 0,
                "numSpaces": 0,
                "numDatasets": 0,
                "numFollowers": 0,
                "numPapers": 0,
                # Read by kernels.hf_hub._check_trust_remote_code via getattr(info, "trustedKernelPublisher").
                "trustedKernelPublisher": hub._trusted.get(org, False),
            },
        )

    def _repo_info(self, key: str, revision: str) -> _Response:
        commit = self.hub._resolve(key, revision)
        repo_id = key.split(":", 1)[-1]
        return _json(
            {
                "_id": hashlib.sha1(repo_id.encode()).hexdigest()[:24],
                "id": repo_id,
                "author": repo_id.split("/", 1)[0],
                "sha": commit.sha,  # snapshot_download requires this to resolve a branch
                "lastModified": commit.date,
                "createdAt": _EPOCH,
                "private": False,
                "gated": False,
                "disabled": False,
                "downloads": 0,
                "likes": 0,
                "tags": [],
                "siblings": [{"rfilename": p} for p in sorted(commit.files)],
            },
        )

    def _refs(self, repo_id: str, include_prs: bool) -> _Response:
        repo = self.hub._repo(repo_id)
        body = {
            "branches": [
                {"name": b, "ref": f"refs/heads/{b}", "targetCommit": sha} for b, sha in sorted(repo.branches.items())
            ],
            "tags": [],
            "converts": [],
        }
        if include_prs:
            body["pullRequests"] = []
        return _json( body)

    def _tree(self, repo_id: str, revision: str, path: str, params: dict[str, list[str]]) -> _Response:
        commit = self.hub._resolve(repo_id, revision)
        recursive = _truthy(params, "recursive")
        expand = _truthy(params, "expand")
        path = path.strip("/")
        dirs = commit.dirs()
        if path and path not in dirs:
            raise _HTTPError(404, f"Entry not found: {path}", "EntryNotFound", {"X-Repo-Commit": commit.sha})
        prefix = path + "/" if path else ""

        def wanted(p: str) -> bool:
            if not p.startswith(prefix):
                return False
            return recursive or "/" not in p[len(prefix) :]

        last_commit = {"id": commit.sha, "title": commit.message, "date": commit.date}
        entries = []
        for d in sorted(d for d in dirs if d != path and wanted(d)):
            entry = {"type": "directory", "oid": commit.tree_oid(d), "size": 0, "path": d}
            if expand:
                entry["lastCommit"] = last_commit
            entries.append(entry)
        for p in sorted(p for p in commit.files if wanted(p)):
            blob = commit.files[p]
            entry = {"type": "file", "oid": blob.git_sha, "size": blob.size, "path": p}
            if blob.lfs:
                entry["lfs"] = {"oid": blob.sha256, "size": blob.size, "pointerSize": blob.pointer_size()}
            if expand:
                entry["lastCommit"] = last_commit
            entries.append(entry)
        return _json( entries)

    def _commits(self, repo_id: str, revision: str) -> _Response:
        repo = self.hub._repo(repo_id)
        commit: _Commit | None = self.hub._resolve(repo_id, revision)
        out = []
        while commit is not None:
            out.append(
                {
                    "id": commit.sha,
                    "authors": [{"user": "fakehub"}],
                    "date": commit.date,
                    "title": commit.message,
                    "message": "",
                }
            )
            commit = repo.commits.get(commit.parent) if commit.parent else None
        return _json( out)

    # -- writes -------------------------------------------------------------

    def _check_write(self) -> None:
        allowed = self.hub.write_tokens
        if allowed is None:
            return
        auth = self.headers.get("Authorization") or ""
        token = auth[len("Bearer "):] if auth.startswith("Bearer ") else None
        if token is None:
            raise _HTTPError(401, "Invalid credentials in Authorization header")
        if token not in allowed:
            raise _HTTPError(403, "You don't have the rights to write to this repository")

    def _create_repo(self) -> _Response:
        self._check_write()
        body = json.loads(self.body or b"{}")
        repo_type = body.get("type") or "model"
        repo_id = f"{body['organization']}/{body['name']}" if body.get("organization") else body["name"]
        key = _key(repo_type, repo_id)
        prefix = "" if repo_type == "model" else f"{repo_type}s/"
        if key in self.hub._repos:  # the Hub's 409 names the repo's url too (create_repo(exist_ok=True) reads it)
            raise _HTTPError(409, "You already created this model repo", extra={"url": f"{self.hub.url}/{prefix}{repo_id}"})
        self.hub.commit(repo_id, {".gitattributes": b"*.bin filter=lfs diff=lfs merge=lfs -text\n"},
                        message="initial commit", repo_type=repo_type)
        return _json({"url": f"{self.hub.url}/{prefix}{repo_id}", "name": repo_id})

    def _create_branch(self, key: str, repo_id: str, branch: str) -> _Response:
        repo = self.hub._repo(key)
        if branch in repo.branches:
            raise _HTTPError(409, f"Reference already exists: refs/heads/{branch}")
        start = json.loads(self.body or b"{}").get("startingPoint") or "main"
        repo.branches[branch] = self.hub._resolve(key, start).sha
        return _json({})

    def _preupload(self, key: str, repo_id: str, revision: str) -> _Response:
        commit = self.hub._resolve(key, revision)
        files = json.loads(self.body or b"{}").get("files", [])
        out = []
        for f in files:
            blob = commit.files.get(f["path"])
            out.append({"path": f["path"], "uploadMode": "regular", "shouldIgnore": False,
                        "oid": blob.git_sha if blob is not None else None})
        return _json({"files": out, "commitOid": commit.sha})

    def _commit(self, key: str, repo_id: str, branch: str) -> _Response:
        repo = self.hub._repo(key)
        head = repo.branches.get(branch)
        if head is None:
            raise _HTTPError(404, f"Invalid rev id: {branch}", "RevisionNotFound")
        lines = [json.loads(line) for line in self.body.splitlines() if line.strip()]
        if not lines or lines[0].get("key") != "header":
            raise _HTTPError(400, "the first line must be the commit header")
        header = lines[0]["value"]
        parent = header.get("parentCommit")
        if parent is not None and parent != head:
            raise _HTTPError(412, "A commit has happened since. Please refresh and try again.")
        files = {p: b.data for p, b in repo.commits[head].files.items()}
        for line in lines[1:]:
            kind, value = line.get("key"), line.get("value", {})
            if kind == "file":
                files[_normalize_path(value["path"])] = base64.b64decode(value["content"])
            elif kind == "deletedFile":
                if files.pop(_normalize_path(value["path"]), None) is None:
                    raise _HTTPError(404, "A file with this name doesn't exist", "EntryNotFound")
            elif kind == "deletedFolder":
                prefix = _normalize_path(value["path"]) + "/"
                for p in [p for p in files if p.startswith(prefix)]:
                    del files[p]
            else:
                raise _HTTPError(400, f"this test Hub does not take {kind!r} commit lines")
        repo_type, _, rid = key.rpartition(":")
        sha = self.hub.commit(rid, files, branch=branch, parent=head, message=header.get("summary", ""),
                              repo_type=repo_type or "kernel")
        prefix = "" if repo_type in ("", "model") else f"{repo_type}s/"
        if not repo_type:
            prefix = "kernels/"
        return _json({"commitUrl": f"{self.hub.url}/{prefix}{rid}/commit/{sha}", "commitOid": sha,
                      "pullRequestUrl": None})

    def _resolve_file(self, repo_id: str, revision: str, path: str) -> _Response:
        commit = self.hub._resolve(repo_id, revision)
        blob = commit.files.get(path)
        if blob is None:
            # X-Repo-Commit lets the client cache the non-existence under .no_exist/<commit>/.
            raise _HTTPError(404, "Entry not found", "EntryNotFound", {"X-Repo-Commit": commit.sha})

        headers = {
            # Mandatory: the client raises FileMetadataError without it.
            "X-Repo-Commit": commit.sha,
            # Mandatory: names the cache blob. The client prefers X-Linked-Etag when present.
            "ETag": f'"{blob.etag}"',
            "Accept-Ranges": "bytes",
            "Content-Disposition": f'inline; filename="{path.rsplit("/", 1)[-1]}";',
        }
        if blob.lfs:
            # The Hub answers LFS files with a redirect carrying these; we serve the bytes directly.
            headers["X-Linked-Etag"] = f'"{blob.sha256}"'
            headers["X-Linked-Size"] = str(blob.size)

        data = blob.data
        status = 200
        rng = self.headers.get("Range")
        if rng and self.command == "GET":
            m = re.fullmatch(r"bytes=(\d*)-(\d*)", rng.strip())
            if m is None or (not m.group(1) and not m.group(2)):
                raise _HTTPError(416, "Invalid range", headers={"Content-Range": f"bytes */{blob.size}"})
            if m.group(1):
                start = int(m.group(1))
                end = int(m.group(2)) if m.group(2) else blob.size - 1
            else:  # suffix range: last N bytes
                start = max(blob.size - int(m.group(2)), 0)
                end = blob.size - 1
            end = min(end, blob.size - 1)
            if start > end or start >= blob.size:
                raise _HTTPError(416, "Range not satisfiable", headers={"Content-Range": f"bytes */{blob.size}"})
            data = data[start : end + 1]
            status = 206
            headers["Content-Range"] = f"bytes {start}-{end}/{blob.size}"
        return status, data, headers, "application/octet-stream"


# ---------------------------------------------------------------------------
# Kernel build helpers
# ---------------------------------------------------------------------------


_DEFAULT_INIT = b'''"""Tiny test kernel served by tests/hubserver.py."""


def add_one(x):
    return x + 1
'''


def _digest_excluded(relpath: str) -> bool:
    # Mirrors kernels._rust.Digest.hash_variant: the top-level metadata.json and its sigstore bundle,
    # __pycache__ directories and *.pyc files are not part of the digest.
    if relpath in ("metadata.json", "metadata.json.sigstore"):
        return True
    return relpath.endswith(".pyc") or "__pycache__" in relpath.split("/")


def kernel_variant_files(
    *,
    name: str,
    variant: str,
    backend: str = "cpu",
    archs: list[str] | None = None,
    module_files: dict[str, bytes] | None = None,
    version: int = 1,
    id: str | None = None,  # mirrors the metadata key
    extra_metadata: dict | None = None,
) -> dict[str, bytes]:
    """Files of one kernel build variant, keyed by repo path ``build/<variant>/...``.

    ``module_files`` paths are relative to the kernel's Python package directory
    ``build/<variant>/<python_name>/`` (default: an ``__init__.py`` defining ``add_one``).
    ``metadata.json`` follows kernels 0.17: name, id, version, license, python-depends, backend
    and a sha256 ``digest`` (base64 of the raw digest, keyed by the path relative to the
    variant directory) over every other file of the variant.
    """
    python_name = name.replace("-", "_")
    if module_files is None:
        module_files = {"__init__.py": _DEFAULT_INIT}

    variant_files: dict[str, bytes] = {}
    for rel, data in module_files.items():
        variant_files[f"{python_name}/{_normalize_path(rel)}"] = bytes(data)

    if id is None:
        h = hashlib.sha256(f"{name}\0{variant}\0{version}\0{backend}".encode())
        for rel in sorted(variant_files):
            h.update(rel.encode() + b"\0" + hashlib.sha256(variant_files[rel]).digest())
        id = f"_{python_name}_{h.hexdigest()[:10]}"

    backend_info: dict = {"type": backend}
    if archs is not None:
        backend_info["archs"] = list(archs)

    metadata: dict = {
        "name": name,
        "id": id,
        "version": version,
        "license": "apache-2.0",
        "python-depends": [],
        "backend": backend_info,
        "digest": {
            "algorithm": "sha256",
            "files": {
                rel: base64.b64encode(hashlib.sha256(data).digest()).decode()
                for rel, data in sorted(variant_files.items())
                if not _digest_excluded(rel)
            },
        },
    }
    if extra_metadata:
        metadata.update(extra_metadata)

    out = {f"build/{variant}/{rel}": data for rel, data in variant_files.items()}
    out[f"build/{variant}/metadata.json"] = (json.dumps(metadata, indent=2, sort_keys=True) + "\n").encode()
    return out
