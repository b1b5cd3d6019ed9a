"""Consuming a Hub release: the release a project names (``hf://ORG/NAME@vN``: ``parse_ref``) and the
models a version publishes (``models_of``), for ``frt init --from`` and ``frt release``.

The rest of a release lives by job: its files, where they come from and go
(``frt_dist.distribution.release_files``; the Hub client ``frt_dist.distribution.hub``); trusting
its signers and code, and the consumer's manifest made from the release's (``frt_dist.release.trust``);
another version (``frt_dist.release.upgrade``); what ``frt lock`` reads of it and records
(``frt_dist.lock.release``); publishing one (``frt_dist.publish.push``). The ``[release]`` record of a
lock: ``frt_dist.documents.lock_release``. Why and how: docs/releases-consume.md, docs/design.md.
"""

from __future__ import annotations

import re

from ..base import names
from ..distribution.hub import RELEASE_REPO_TYPE as REPO_TYPE
from ..distribution.hub import api, branch_commit, hub_call
from ..errors import ReleaseError, UsageError

__all__ = ["parse_ref", "models_of"]

_REF = re.compile(r"^hf://([^@/]+/[^@/]+)(?:@v(\d+))?$")


def parse_ref(url: str, *, flag: str = "URL", need_version: bool = False) -> tuple[str, int | None]:
    """``hf://ORG/NAME[@vN]`` -> (repo, version or None); a bad one is a usage error (exit 2)."""
    m = _REF.match(url or "")
    if m is None or names.problem("repo", m.group(1)):
        raise UsageError(f"{flag} {url!r}: expected hf://ORG/NAME" + ("@vN" if need_version else "[@vN]"),
                         hints=["for example hf://acme/qwen-kernels@v1"])
    if need_version and m.group(2) is None:
        raise UsageError(f"{flag} {url!r}: name the version: hf://{m.group(1)}@v<N>",
                         hints=[f"hf://{m.group(1)}@v1"])
    return m.group(1), None if m.group(2) is None else int(m.group(2))


def models_of(repo: str, version: int) -> tuple[str, list[str]]:
    """(the branch's head commit, the models the release publishes there)."""
    from huggingface_hub.hf_api import RepoFile  # noqa: PLC0415

    client = api()
    commit = branch_commit(client, repo, version)
    if commit is None:
        raise ReleaseError(f"release {repo!r}: no branch v{version}",
                           hints=[f"the publisher pushes it with `frt release push hf://{repo}@v{version}`"])
    entries = hub_call(repo, "list manifests", lambda: list(client.list_repo_tree(
        repo, path_in_repo="manifests", revision=commit, repo_type=REPO_TYPE)))
    models = sorted(e.path[len("manifests/"):-len(".toml")] for e in entries
                    if isinstance(e, RepoFile) and e.path.endswith(".toml"))
    return commit, [m for m in models if not names.problem("name", m)]
