"""The Hub client: what frt asks the Hub, through ``huggingface_hub``'s public API, with one timeout
and deadline (``configure_timeout``) and its errors as frt's.

Two kinds of repo: kernel packages (``HubClient``, what ``frt lock`` reads of a package) and
release repos (Hub *model* repos: ``api``, ``hub_call``, ``branch_commit``; ``frt release push``,
``frt init --from``, ``frt lock`` on a project that consumes a release, ``release_files``).

Per package the request budget is fixed by the number of variants, never by
the number of files: one ``refs`` call (branch ``vN`` → commit), one (recursive) tree
listing of ``build/`` at that commit, one ``metadata.json`` GET per variant, one
``metadata.json.sigstore`` GET per variant the listing shows signed (when the policy reads them),
and (for a publisher the manifest does not trust) one organization overview
per org per run. Binaries are never fetched at lock time, except for a variant
whose ``metadata.json`` declares no digests (older kernel-builder output):
frt then reads its files to compute them.
"""

from __future__ import annotations

import time

from .. import settings
from ..base.record import dataclass
from ..errors import FrtError, HubError, ReleaseError, UsageError

__all__ = ["HubClient", "RemoteVariant", "configure_timeout", "apply_timeout", "end_deadline", "deadline_error",
           "RELEASE_REPO_TYPE", "api", "endpoint", "hub_call", "branch_commit"]

REPO_TYPE = "kernel"
RELEASE_REPO_TYPE = "model"  # a release is published as a Hub model repo
DEFAULT_TIMEOUT_S = 30.0


_TIMEOUT_S: float | None = None
# FRT_HUB_DEADLINE: when (time.monotonic()) every Hub transfer of the running command must have ended,
# and the setting's value for messages; None outside a command (a library caller's requests are its own)
_DEADLINE: float | None = None
_DEADLINE_S: float | None = None


def configure_timeout(seconds: float | None = None, *, deadline: float | None = None) -> None:
    """Give the Hub requests frt makes a timeout (``huggingface_hub``'s shared HTTP
    client has none by default, so a Hub that hangs would hang ``frt lock``), and the command one
    deadline for all of them (``FRT_HUB_DEADLINE``, from now): a Hub that trickles a byte at a time
    never trips a per-read timeout, and several files fetched in parallel each take their own. Called
    by the CLI at a command's start (``FRT_HUB_TIMEOUT``, default 30 s); library callers keep whatever
    client they configured unless they call it."""
    global _TIMEOUT_S, _DEADLINE, _DEADLINE_S
    _TIMEOUT_S = float(seconds if seconds is not None else settings.number("FRT_HUB_TIMEOUT"))
    _DEADLINE_S = float(deadline if deadline is not None else settings.number("FRT_HUB_DEADLINE"))
    _DEADLINE = time.monotonic() + _DEADLINE_S


def end_deadline() -> None:
    """The command is over: its deadline no longer bounds requests made in this process."""
    global _DEADLINE, _DEADLINE_S
    _DEADLINE = _DEADLINE_S = None


def deadline_error(what: str | None = None) -> HubError | None:
    """The error for a Hub transfer stopped by ``FRT_HUB_DEADLINE`` (``what``: the file or request),
    or None while the deadline has not passed (or there is none)."""
    if _DEADLINE is None or time.monotonic() < _DEADLINE:
        return None
    what = what or "a Hub transfer"
    return HubError(f"{what}: not received within FRT_HUB_DEADLINE={_DEADLINE_S:g}s, the deadline of all of this "
                    "command's Hub transfers (those in parallel and retries included); nothing was written",
                    reasons=[{"request": what, "reason": f"FRT_HUB_DEADLINE={_DEADLINE_S:g}s passed"}],
                    hints=["a large download on a slow link: raise FRT_HUB_DEADLINE (seconds); a Hub that answers "
                           "this slowly: check HF_ENDPOINT and the network, then retry"])


def _what(request) -> str:
    """The file a Hub request fetches (``<org>/<name> <path>`` of a ``.../resolve/<rev>/<path>`` URL),
    else the request itself, for the deadline's message."""
    from urllib.parse import unquote  # noqa: PLC0415

    segs = [unquote(x) for x in request.url.path.split("/")]
    if "resolve" in segs:
        i = segs.index("resolve")
        if i >= 2 and len(segs) > i + 2:
            from ..documents.lock_release import shown  # noqa: PLC0415

            return shown(f"{segs[i - 2]}/{segs[i - 1]} {'/'.join(segs[i + 2:])}")
    return f"{request.method} {request.url.path}"


def _on_request(request) -> None:
    """Before each request on the shared client: none starts past the deadline, and none may wait
    (connect, read, write) longer than what is left of it."""
    if _DEADLINE is None:
        return
    left = _DEADLINE - time.monotonic()
    if left <= 0:
        raise deadline_error(_what(request))
    t = dict(request.extensions.get("timeout") or {})
    for k in ("connect", "read", "write", "pool"):
        t[k] = left if t.get(k) is None else min(t[k], left)
    request.extensions = {**request.extensions, "timeout": t}


def _on_response(response) -> None:
    """Each answer's body is read through a ``DeadlineStream``: a trickle ends at the deadline."""
    cls = _deadline_stream()
    if _DEADLINE is not None and not isinstance(response.stream, cls):
        response.stream = cls(response.stream, _what(response.request))


_STREAM: list = []  # the DeadlineStream class, made when httpx2 is first needed (not by `import frt_dist`)


def _deadline_stream():
    if not _STREAM:
        import httpx2  # noqa: PLC0415 - huggingface_hub's HTTP client

        class DeadlineStream(httpx2.SyncByteStream):
            """A response body whose every chunk is checked against the command's deadline."""

            def __init__(self, inner, what: str):
                self.inner, self.what = inner, what

            def __iter__(self):
                for chunk in self.inner:
                    err = deadline_error(self.what)
                    if err is not None:
                        raise err
                    yield chunk

            def close(self) -> None:
                self.inner.close()

        _STREAM.append(DeadlineStream)
    return _STREAM[0]


def _apply_timeout() -> None:
    """Set the timeout and the deadline's hooks on the shared client (public ``get_session``,
    ``event_hooks``; the client is recreated after a fork or a TLS error, so it is set again before
    each call)."""
    if _TIMEOUT_S is None and _DEADLINE is None:
        return
    from huggingface_hub import get_session  # noqa: PLC0415

    session = get_session()
    if _TIMEOUT_S is not None:
        session.timeout = _TIMEOUT_S
    hooks = {k: list(v) for k, v in session.event_hooks.items()}
    for kind, hook in (("request", _on_request), ("response", _on_response)):
        if hook not in hooks.setdefault(kind, []):
            hooks[kind].append(hook)
            session.event_hooks = hooks


def apply_timeout() -> None:
    """``configure_timeout``'s timeout and deadline on the shared client, for a module that asks the
    Hub through huggingface_hub itself (``sources``' downloads, ``frt_dist.release.upgrade``)."""
    _apply_timeout()


def _within_deadline(fn, what: str, own: type[FrtError]):
    """``fn()``; a timeout (or what a library made of it) once ``FRT_HUB_DEADLINE`` passed is said as
    such (``deadline_error(what)``); an ``own`` error passes as it is."""
    try:
        return fn()
    except own:
        raise
    except Exception:
        err = deadline_error(what)
        if err is not None:
            raise err from None
        raise


@dataclass(frozen=True)
class RemoteVariant:
    name: str
    metadata: bytes


class HubClient:
    """A thin, counted wrapper over ``HfApi`` with errors that name the package."""

    def __init__(self, endpoint: str | None = None):
        from huggingface_hub import HfApi  # noqa: PLC0415 - not imported by `import frt_dist`

        self.api = HfApi(endpoint=endpoint, library_name="frt-dist")
        self.endpoint = self.api.endpoint
        self._trust_cache: dict[str, bool] = {}

    def _wrap(self, repo: str, what: str, fn):
        import httpx2  # noqa: PLC0415 - huggingface_hub's HTTP client
        from huggingface_hub import errors as hf_errors  # noqa: PLC0415

        _apply_timeout()
        try:
            return _within_deadline(fn, f"package {repo!r}: {what}", HubError)
        except HubError:
            raise
        except hf_errors.OfflineModeIsEnabled:
            raise HubError(f"package {repo!r}: the Hub cannot be asked: offline mode is on ({what})",
                           reasons=[{"package": repo, "reason": "offline (HF_HUB_OFFLINE)"}],
                           hints=["unset HF_HUB_OFFLINE to lock against the Hub, or lock where the Hub is reachable "
                                  "and copy the lockfile; a mirror is for loading, not for locking"]) from None
        except hf_errors.RepositoryNotFoundError:
            raise HubError(f"package {repo!r}: not found on the Hub at {self.endpoint} ({what})",
                           reasons=[{"package": repo, "reason": "repository not found"}],
                           hints=["check the repo id in the manifest, or HF_ENDPOINT / the mirror in use"]) from None
        except hf_errors.RevisionNotFoundError:
            raise HubError(f"package {repo!r}: revision not found ({what})",
                           reasons=[{"package": repo, "reason": "revision not found"}],
                           hints=["the branch or commit may have been deleted; `frt lock --upgrade-package "
                                  f"{repo}` re-resolves the version's branch"]) from None
        except hf_errors.EntryNotFoundError:
            raise HubError(f"package {repo!r}: file not found ({what})",
                           reasons=[{"package": repo, "reason": f"file not found: {what}"}],
                           hints=["the package's build/ tree is incomplete at this commit; ask its publisher"]) from None
        except hf_errors.HfHubHTTPError as exc:
            status = getattr(getattr(exc, "response", None), "status_code", "?")
            hints = ["log in (`hf auth login`) or set HF_TOKEN"] if status in (401, 403) else []
            raise HubError(f"package {repo!r}: the Hub answered HTTP {status} ({what})",
                           reasons=[{"package": repo, "reason": f"HTTP {status}"}],
                           hints=hints + ["retry later; nothing was written"]) from None
        except httpx2.TimeoutException:
            raise HubError(f"package {repo!r}: the Hub did not answer in time ({what})",
                           reasons=[{"package": repo, "reason": "timeout"}],
                           hints=["retry later, or raise FRT_HUB_TIMEOUT; nothing was written"]) from None
        except httpx2.HTTPError as exc:
            raise HubError(f"package {repo!r}: cannot reach the Hub at {self.endpoint}: {exc}",
                           reasons=[{"package": repo, "reason": f"network error: {exc}"}],
                           hints=["check the network or HF_ENDPOINT; nothing was written"]) from None

    def branch_commit(self, repo: str, version: int) -> str:
        """Branch ``v<version>`` → its full commit sha (the `kernels` convention)."""
        refs = self._wrap(repo, "refs", lambda: self.api.list_repo_refs(repo, repo_type=REPO_TYPE))
        branch = f"v{version}"
        for b in refs.branches:
            if b.name == branch:
                return b.target_commit
        names = sorted(b.name for b in refs.branches)
        raise HubError(f"package {repo!r}: no branch {branch!r} (branches: {', '.join(names) or 'none'})",
                       reasons=[{"package": repo, "reason": f"version {version} not published"}],
                       hints=["publish the version (a `v<N>` branch) or change `version` in the manifest"])

    def variant_names(self, repo: str, commit: str) -> list[str]:
        from huggingface_hub.hf_api import RepoFolder  # noqa: PLC0415

        def listing():
            return [e for e in self.api.list_repo_tree(repo, path_in_repo="build", revision=commit,
                                                       repo_type=REPO_TYPE, recursive=False)]

        entries = self._wrap(repo, "list build/", listing)
        return sorted(e.path.split("/", 1)[1] for e in entries if isinstance(e, RepoFolder) and "/" in e.path)

    def variant_listing(self, repo: str, commit: str) -> tuple[list[str], set[str]]:
        """(variant names, the variants that carry a publisher signature ``metadata.json.sigstore``)
        at ``commit``, from one recursive listing of ``build/``."""
        from huggingface_hub.hf_api import RepoFolder  # noqa: PLC0415

        def listing():
            return list(self.api.list_repo_tree(repo, path_in_repo="build", revision=commit, repo_type=REPO_TYPE,
                                                recursive=True))

        entries = self._wrap(repo, "list build/", listing)
        names, signed = set(), set()
        for e in entries:
            parts = e.path.split("/")
            if isinstance(e, RepoFolder) and len(parts) == 2:
                names.add(parts[1])
            elif not isinstance(e, RepoFolder) and len(parts) == 3 and parts[2] == "metadata.json.sigstore":
                signed.add(parts[1])
        return sorted(names), signed & names

    def metadata(self, repo: str, commit: str, variant: str) -> bytes:
        """GET ``build/<variant>/metadata.json`` at ``commit`` (one request, no cache dance)."""
        return self.file(repo, commit, f"build/{variant}/metadata.json")

    def variant_files(self, repo: str, commit: str, variant: str) -> dict[str, bytes]:
        """Every file of ``build/<variant>/`` at ``commit`` (relpath -> bytes): one listing and one
        GET per file. Only for a variant whose metadata.json declares no digests (older
        kernel-builder output), so that `frt lock` can compute them."""
        from huggingface_hub.hf_api import RepoFile  # noqa: PLC0415

        prefix = f"build/{variant}/"
        entries = self._wrap(repo, f"list {prefix}", lambda: list(self.api.list_repo_tree(
            repo, path_in_repo=prefix.rstrip("/"), revision=commit, repo_type=REPO_TYPE, recursive=True)))
        return {e.path[len(prefix):]: self.file(repo, commit, e.path)
                for e in entries if isinstance(e, RepoFile) and e.path.startswith(prefix)}

    def file(self, repo: str, commit: str, path: str) -> bytes:
        """GET one file of the repo at ``commit``."""
        from huggingface_hub import get_session, hf_hub_url  # noqa: PLC0415
        from huggingface_hub.utils import build_hf_headers, hf_raise_for_status  # noqa: PLC0415

        url = hf_hub_url(repo, path, repo_type=REPO_TYPE, revision=commit, endpoint=self.endpoint)

        def get():
            r = get_session().get(url, headers=build_hf_headers(token=self.api.token, library_name="frt-dist"))
            hf_raise_for_status(r)
            return r.content

        return self._wrap(repo, path, get)

    def publisher_trusted(self, repo: str) -> bool:
        """The Hub's ``trustedKernelPublisher`` flag of the repo's org (cached per run)."""
        org = repo.split("/", 1)[0]
        if org not in self._trust_cache:
            info = self._wrap(repo, f"organization {org!r}", lambda: self.api.get_organization_overview(org))
            self._trust_cache[org] = bool(getattr(info, "trustedKernelPublisher", False) or
                                          getattr(info, "trusted_kernel_publisher", False))
        return self._trust_cache[org]


# ---------------------------------------------------------------------------
# release repos (Hub model repos), through huggingface_hub's own client


def api(token: bool = False):
    """An ``HfApi`` on ``HF_ENDPOINT`` (with the user's token when ``token``), for release repos."""
    from huggingface_hub import HfApi, get_token  # noqa: PLC0415

    return HfApi(endpoint=settings.value("HF_ENDPOINT"), library_name="frt-dist",
                 token=get_token() if token else None)


def endpoint() -> str:
    """The Hub endpoint frt talks to (``HF_ENDPOINT``, else huggingface_hub's default), for messages."""
    from huggingface_hub import constants  # noqa: PLC0415

    return (settings.value("HF_ENDPOINT") or constants.ENDPOINT or "https://huggingface.co").rstrip("/")


# what a Hub answer huggingface_hub cannot use raises inside it: a field missing (KeyError), a value of
# another type (TypeError, AttributeError), a body that is not JSON (ValueError, JSONDecodeError's base)
_UNEXPECTED = (KeyError, TypeError, AttributeError, ValueError, IndexError)


def hub_call(repo: str, what: str, fn, *, writing: bool = False):
    """``fn()`` on the release repo ``repo`` with huggingface_hub's errors as frt errors naming the repo
    and the endpoint: an HTTP error, no connection, or an answer huggingface_hub cannot use (a field
    it expects missing, a body that is not JSON), never a traceback."""
    import httpx2  # noqa: PLC0415
    from huggingface_hub import errors as hf_errors  # noqa: PLC0415

    _apply_timeout()
    try:
        return _release_call(repo, what, fn, writing=writing, hf_errors=hf_errors, httpx2=httpx2)
    except FrtError as exc:
        if endpoint() not in exc.message:
            exc.message = f"{exc.message} [Hub {endpoint()}]"
            exc.args = (exc.message,)
        raise


def _release_call(repo: str, what: str, fn, *, writing: bool, hf_errors, httpx2):
    try:
        return _within_deadline(fn, f"release {repo!r}: {what}", FrtError)
    except hf_errors.OfflineModeIsEnabled:
        raise ReleaseError(f"release {repo!r}: the Hub cannot be asked: offline mode is on ({what})",
                           hints=["unset HF_HUB_OFFLINE, or lock from a mirror that holds the release "
                                  "(`frt mirror DIR` where the Hub is reachable; [tool.frt] mirror or FRT_MIRROR)"]) from None
    except hf_errors.RepositoryNotFoundError:
        raise ReleaseError(f"release {repo!r}: no such model repo on the Hub ({what})",
                           hints=["check [release] repo in the manifest, or HF_ENDPOINT"]) from None
    except hf_errors.RevisionNotFoundError:
        raise ReleaseError(f"release {repo!r}: revision not found ({what})",
                           hints=["the branch or commit may have been deleted; `frt lock --upgrade-release` "
                                  "reads the version's branch again"]) from None
    except hf_errors.HfHubHTTPError as exc:
        status = getattr(getattr(exc, "response", None), "status_code", None)
        if writing and status in (401, 403):
            raise UsageError(f"release {repo!r}: no write access on {api().endpoint} (HTTP {status}, {what}); "
                             "nothing was committed",
                             reasons=[{"repo": repo, "reason": f"HTTP {status}"}],
                             hints=["use a token that may write to the repo's organisation: set HF_TOKEN, or "
                                    "`hf auth login`"]) from None
        if writing and status == 412:
            raise ReleaseError(f"release {repo!r}: the branch moved under you ({what}): another commit landed "
                               "after this push read the branch head; nothing was committed",
                               reasons=[{"repo": repo, "reason": "branch moved (HTTP 412)"}],
                               hints=["look at what was pushed (`frt init --from ...` in a scratch folder), then "
                                      "run `frt release push` again"]) from None
        raise ReleaseError(f"release {repo!r}: the Hub answered HTTP {status} ({what})",
                           hints=["retry later; nothing was written"]) from None
    except httpx2.HTTPError as exc:
        raise ReleaseError(f"release {repo!r}: cannot reach the Hub: {exc} ({what})",
                           hints=["check the network or HF_ENDPOINT; nothing was written"]) from None
    except FrtError:
        raise
    except _UNEXPECTED as exc:
        why = f"{type(exc).__name__}: {exc}" if not isinstance(exc, KeyError) else f"the field {exc} is missing"
        raise ReleaseError(f"release {repo!r}: the Hub at {endpoint()} gave an answer frt cannot use ({what}: {why})"
                           + ("; nothing was committed" if writing else ""),
                           reasons=[{"repo": repo, "endpoint": endpoint(), "request": what, "reason": why}],
                           hints=["check HF_ENDPOINT names a Hugging Face Hub (or a server that speaks its API), "
                                  "then retry"]) from None


def branch_commit(client, repo: str, version: int) -> str | None:
    """The head commit of branch ``v<version>`` of the release repo ``repo`` (``client``: ``api()``),
    None when there is no such branch (one refs request)."""
    refs = hub_call(repo, "refs", lambda: client.list_repo_refs(repo, repo_type=RELEASE_REPO_TYPE))
    return next((b.target_commit for b in refs.branches if b.name == f"v{version}"), None)
