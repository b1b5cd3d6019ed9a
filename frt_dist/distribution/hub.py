"""The Hub client: what ``frt lock`` asks the Hub, through ``huggingface_hub``.

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

from .. import settings
from ..base.record import dataclass
from ..errors import HubError

__all__ = ["HubClient", "RemoteVariant", "configure_timeout", "apply_timeout"]

REPO_TYPE = "kernel"
DEFAULT_TIMEOUT_S = 30.0


_TIMEOUT_S: float | None = None


def configure_timeout(seconds: float | None = None) -> None:
    """Give the Hub requests frt makes a timeout (``huggingface_hub``'s shared HTTP
    client has none by default, so a Hub that hangs would hang ``frt lock``). Called
    by the CLI (``FRT_HUB_TIMEOUT``, default 30 s); library callers keep whatever
    client they configured unless they call it."""
    global _TIMEOUT_S
    _TIMEOUT_S = float(seconds if seconds is not None else settings.number("FRT_HUB_TIMEOUT"))


def _apply_timeout() -> None:
    """Set the timeout on the shared client (public ``get_session``; the client is
    recreated after a fork or a TLS error, so it is set again before each call)."""
    if _TIMEOUT_S is not None:
        from huggingface_hub import get_session  # noqa: PLC0415

        get_session().timeout = _TIMEOUT_S


def apply_timeout() -> None:
    """``configure_timeout``'s timeout on the shared client, for another module that asks the Hub
    through huggingface_hub (``frt_dist.release.consume``)."""
    _apply_timeout()


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
            return fn()
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
