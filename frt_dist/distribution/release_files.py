"""Where a Hub release's own files come from (its manifest, receipts, signature files and lockfile at
one commit of the release repo, a Hub *model* repo) and where they go: a mirror folder, an object store.

The places follow ``frt_dist.distribution.sources``' rules: the mirror folder named, then each hub
cache (``cache_dirs``), then the Hub at the commit, never offline (``is_offline``). A mirror and a
hub cache share the hub-cache layout (``models--<org>--<name>/snapshots/<commit>/<release path>``,
``refs/v<N>``: ``cache_folder``); an object store holds each file under its sha256
(``release_key``). Nothing is trusted where it lies: every file is read at most ``MAX_FILE_BYTES``,
only when it is a regular file, and checked against the sha256 the lock records.

``fetch`` reads a release for ``frt lock``, ``frt init --from`` and ``frt release``; ``mirror_files``
and ``store_files`` carry a lock's release files into a mirror (``frt mirror DIR``) and an object
store (``frt publish URL``); ``mirror_problems`` is ``frt verify --mirror``'s check of them. The
release's meaning (its receipts, its trust, the lock's view of it) is ``frt_dist.release`` and
``frt_dist.lock.release``; the design: docs/design.md, docs/releases-consume.md.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from ..base import names
from ..base.record import dataclass, field
from ..errors import FrtError, ReleaseError
from .hub import RELEASE_REPO_TYPE as REPO_TYPE
from .hub import api, branch_commit, hub_call
from .sources import cache_dirs, hub_endpoint, is_offline, repo_folder

__all__ = ["Fetched", "fetch", "cache_folder", "release_key", "store_files", "mirror_files", "mirror_problems",
           "SIG_SUFFIXES", "MAX_FILE_BYTES"]

MAX_FILE_BYTES = 16 << 20  # a release file (manifest, receipt, signature, lockfile) is read whole, at most this
_HEX40 = re.compile(r"^[0-9a-f]{40}$")
SIG_SUFFIXES = (".sig", ".sigstore")  # a receipt's signature files beside it: <receipt>.json.sig, .json.sigstore

def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


# ---------------------------------------------------------------------------
# reading a release at a commit


@dataclass
class Fetched:
    """The release files of one model at one commit: where they lie and the sha256 of each."""

    repo: str
    version: int
    commit: str
    model: str
    root: Path  # the snapshot folder (hub cache or mirror layout)
    files: dict[str, str] = field(default_factory=dict)  # release path -> sha256:<hex>

    def path(self, rel: str) -> Path:
        return self.root / rel

    def read(self, rel: str) -> bytes:
        from ..documents.schema import read_bytes  # noqa: PLC0415

        return read_bytes(self.root / rel, ReleaseError, f"{self.repo}@{self.commit[:12]}/{rel}", limit=MAX_FILE_BYTES)


def _wanted(model: str, rel: str) -> bool:
    if rel in (f"manifests/{model}.toml", f"lockfiles/{model}.lock"):
        return True
    return rel.startswith(f"receipts/{model}/") and rel.endswith((".json", ".json.sig", ".json.sigstore"))


_LAYOUT = ("manifests", "lockfiles", "receipts")  # the release layout's folders (any model's)


def _in_layout(rel: str) -> bool:
    """Whether a path a Hub lists claims a place in the release layout (whatever its name does after)."""
    return re.split(r"[/\\]", rel.lstrip("/\\"), maxsplit=1)[0] in _LAYOUT


def cache_folder(repo: str) -> str:
    """The hub-cache folder of a release repo: ``models--<org>--<name>`` (``sources.repo_folder``'s rule)."""
    return repo_folder(repo, REPO_TYPE)


MAX_REF_BYTES = 4096  # a mirror's refs/v<N>: one commit id


def _read(path: Path, label: str) -> bytes:
    """A release file of a mirror or a hub cache, read only when it is a regular file (a FIFO, a
    device or a folder there is refused, never opened for reading) and at most ``MAX_FILE_BYTES``."""
    from ..documents.schema import read_bytes  # noqa: PLC0415

    try:
        return read_bytes(path, ReleaseError, label, limit=MAX_FILE_BYTES)
    except ReleaseError as exc:
        exc.hints.append(f"remove {path} (a damaged or planted copy); `frt mirror DIR` where the Hub is reachable "
                         "writes the release's files again")
        raise


def _scan(root: Path, model: str, label: str, only=None) -> tuple[dict[str, str], list[str]]:
    """The sha256 of each release file of ``model`` under the snapshot folder ``root`` (each read as
    ``_read`` reads), and the files there that ``only`` (the files a lock records at this commit;
    None: every file) leaves out, not read."""
    out, extra = {}, []
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if not _wanted(model, rel) or p.is_dir():
            continue
        if (only is not None and rel not in only) or names.problem("path", rel):
            extra.append(rel)
            continue
        out[rel] = _sha256(_read(p, f"{label}/{rel}"))
    return out, extra


def _local_snapshot(repo: str, commit: str, want: dict[str, str] | None, dirs: list[Path]) -> Path | None:
    """A snapshot folder of ``repo`` at ``commit`` in a mirror or a hub cache holding every file of
    ``want`` with its recorded sha256 (``want`` None: the folder, whatever it holds)."""
    for d in dirs:
        snap = d / cache_folder(repo) / "snapshots" / commit
        if not snap.is_dir():
            continue
        if want is None:
            return snap
        try:
            if all(_sha256(_read(snap / rel, rel)) == sha for rel, sha in want.items()):
                return snap
        except (OSError, FrtError):
            continue
    return None


def _local_ref(repo: str, version: int, dirs: list[Path]) -> str | None:
    from ..documents.schema import read_bytes  # noqa: PLC0415

    for d in dirs:
        p = d / cache_folder(repo) / "refs" / f"v{version}"
        if not os.path.lexists(p):
            continue
        try:  # a FIFO there is refused, never waited on
            data = read_bytes(p, ReleaseError, f"release {repo!r}: {p}", limit=MAX_REF_BYTES)
        except ReleaseError as exc:
            exc.hints.append("remove it; `frt mirror DIR` where the Hub is reachable writes the mirror's release again")
            raise
        try:
            text = data.decode("ascii").strip()
        except UnicodeDecodeError:
            continue
        if _HEX40.match(text):
            return text
    return None


def _dirs(mirror: str | None) -> list[Path]:
    """The places a release's files are looked for, in ``sources``' order: the mirror folder named (an
    object-store URL is no folder here), then each hub cache."""
    out = []
    if mirror and "://" not in mirror:
        out.append(Path(mirror))
    return out + cache_dirs()


def _hub_files(repo: str, commit: str, model: str) -> list[str]:
    """The release files of ``model`` the Hub lists at ``commit`` (one recursive listing). A listed
    file that claims a place in the release layout with a name that is not a plain relative path
    there (``..``, absolute, a control character: docs/reference.md#names) is refused, naming it:
    nothing of the release is read then."""
    from huggingface_hub.hf_api import RepoFile  # noqa: PLC0415

    from ..documents.lock_release import shown  # noqa: PLC0415

    client = api()
    listed = hub_call(repo, f"list files at {commit[:12]}", lambda: [
        e.path for e in client.list_repo_tree(repo, revision=commit, repo_type=REPO_TYPE, recursive=True)
        if isinstance(e, RepoFile)])
    out = []
    for rel in listed:
        if not isinstance(rel, str) or not _in_layout(rel):
            continue
        why = names.problem("path", rel)
        if why:
            raise ReleaseError(f"release {repo!r} at {commit[:12]}: the Hub lists a file {shown(rel)!r} whose name "
                               f"{why}: not a file of the release layout (manifests/, lockfiles/, receipts/); "
                               "nothing was read or written",
                               reasons=[{"repo": repo, "commit": commit, "file": shown(rel), "reason": why}],
                               hints=["ask the publisher to remove the file and push the release again"])
        if _wanted(model, rel):
            out.append(rel)
    return sorted(out)


def fetch(repo: str, version: int, model: str, *, commit: str | None = None, recorded: dict | None = None,
          mirror: str | None = None) -> Fetched:
    """The release files of ``model`` in ``repo`` at ``commit`` (None: the head of branch ``v<version>``).
    A commit whose recorded files (``recorded``: path -> sha256) are all in a mirror or the hub cache
    asks the Hub nothing; offline (``HF_HUB_OFFLINE``) the mirror and the caches are all there is.
    With ``recorded`` (the commit a lock pins) the release is exactly those files: any other file
    the snapshot folder holds or the Hub lists at that commit is left out, unread, and named in an
    ``FrtWarning`` (only an upgrade reads the release anew)."""
    dirs = _dirs(mirror)
    offline = is_offline()
    if commit is None:
        commit = _local_ref(repo, version, dirs) if offline else branch_commit(api(), repo, version)
        if commit is None:
            raise ReleaseError(f"release {repo!r}: no branch v{version}" + (" in the mirror or the hub cache "
                                                                             "(offline)" if offline else ""),
                               hints=["publish it (`frt release push`), or change [release] version"]
                               + (["mirror it where the Hub is reachable: `frt mirror DIR`"] if offline else []))
    root = _local_snapshot(repo, commit, recorded, dirs) if recorded else None
    if root is None and offline:
        root = _local_snapshot(repo, commit, None, dirs)
        if root is None:
            raise ReleaseError(f"release {repo!r}: commit {commit} is not in the mirror or the hub cache, and the "
                               "Hub is offline (HF_HUB_OFFLINE)",
                               hints=["mirror the release where the Hub is reachable (`frt mirror DIR`), and name "
                                      "the mirror ([tool.frt] mirror, FRT_MIRROR)"])
    listed_extra = []
    if root is None:
        import sys  # noqa: PLC0415

        from huggingface_hub import snapshot_download  # noqa: PLC0415
        from huggingface_hub.utils import disable_progress_bars  # noqa: PLC0415

        if not sys.stderr.isatty():  # progress on a terminal only (docs/reference.md#common-options)
            disable_progress_bars()
        take = _hub_files(repo, commit, model)
        if recorded:
            listed_extra = [rel for rel in take if rel not in recorded]
            take = [rel for rel in take if rel in recorded]
        # the exact names (plain relative paths: no pattern character), not the release's patterns, into the
        # hub cache frt looks in (huggingface_hub's own, as the environment names it now)
        root = Path(hub_call(repo, f"files at {commit[:12]}", lambda: snapshot_download(
            repo, repo_type=REPO_TYPE, revision=commit, allow_patterns=take or ["/"], cache_dir=cache_dirs()[-1],
            endpoint=hub_endpoint())))
    files, extra = _scan(root, model, f"{repo}@{commit[:12]}", only=recorded or None)
    got = Fetched(repo, version, commit, model, root, files)
    if recorded:
        bad = sorted(rel for rel, sha in recorded.items() if got.files.get(rel) != sha)
        if bad:
            raise ReleaseError(f"release {repo!r} at {commit[:12]}: {', '.join(bad)} differ from the sha256 the "
                               "lock records (a damaged mirror or cache)",
                               hints=["remove the damaged copy and run `frt lock` again where the Hub is reachable"])
        extra = sorted(set(extra) | set(listed_extra))
        if extra:
            import warnings  # noqa: PLC0415

            from ..documents.lock_release import shown  # noqa: PLC0415
            from ..errors import FrtWarning  # noqa: PLC0415

            warnings.warn(f"release {repo} at {commit[:12]}: {len(extra)} file(s) the lock does not record at this "
                          f"commit ignored: {', '.join(shown(x) for x in extra)} (a commit's files never change on "
                          "the Hub; `frt lock --upgrade-release` reads the release anew and reports each change)",
                          FrtWarning, stacklevel=2)
    return got


# ---------------------------------------------------------------------------
# frt mirror / frt publish / frt verify --mirror: the release's files beside the packages'


def release_key(sha: str) -> str:
    """A release file's key in an object store: its sha256, as every locked file's (``sha256/<hex>``)."""
    from .store_api import object_key  # noqa: PLC0415

    return object_key("sha256", sha.removeprefix("sha256:"))


def store_files(lock, store, *, progress=None) -> list[str]:
    """``frt publish URL``: every release file ``lock`` records, uploaded to ``store`` under its sha256
    (``release_key``) once verified against the lock; one already there with that size is left. Returns
    the keys sent. The lockfile goes up after these (the caller), so a store holding the lockfile holds them."""
    rel = lock.release
    if not rel or not rel.get("files"):
        return []
    src = fetch(rel["repo"], rel["version"], lock.model, commit=rel["commit"], recorded=rel["files"])
    sent = []
    for path, sha in sorted(rel["files"].items()):
        data = src.read(path)
        if _sha256(data) != sha:  # (fetch checked it; a file changed since is not sent)
            raise ReleaseError(f"release {rel['repo']} {path}: not the bytes the lock records; not published")
        key = release_key(sha)
        if store.head(key) != len(data):
            store.put_bytes(key, data)
            sent.append(key)
        if progress:
            progress({"event": "file", "repo": rel["repo"], "variant": "release", "path": path,
                      "action": "uploaded" if key in sent else "present", "bytes": len(data)})
    return sent


class _StoreSource:
    """The release files of a lock, read from an object store by their sha256 (``frt mirror DIR --from URL``)."""

    def __init__(self, store, rel):
        self.store, self.rel = store, rel

    def read(self, path: str) -> bytes | None:
        return self.store.get_bytes(release_key(self.rel["files"][path]), MAX_FILE_BYTES)


def mirror_files(lock, top, tmp, *, progress=None, store=None) -> list[dict]:
    """Write the release files ``lock`` records into the mirror ``top`` (a ``SafeDir``), hub-cache
    layout (``models--<org>--<name>/blobs``, ``snapshots/<commit>/...``, ``refs/v<N>`` last), each
    verified against its recorded sha256 first: from ``store`` (an object store ``frt publish``
    filled) when given, else from the mirror, the hub cache or the Hub. Returns the problems (a file
    that could not be supplied) and reports each file it adds to ``progress``."""
    rel = lock.release
    if not rel or not rel.get("files"):
        return []
    problems = []
    if store is not None:
        src = _StoreSource(store, rel)
    else:
        try:
            got = fetch(rel["repo"], rel["version"], lock.model, commit=rel["commit"], recorded=rel["files"])
        except FrtError as exc:
            if is_offline():
                return [{"kind": "missing", "path": f"{cache_folder(rel['repo'])}/snapshots/{rel['commit']}",
                         "reason": f"release {rel['repo']}: {exc}"}]
            raise
        src = got
    with top.child(cache_folder(rel["repo"]), create=True) as folder, folder.child("blobs", create=True) as blobs:
        for path, sha in sorted(rel["files"].items()):
            data = src.read(path)
            if data is None:
                problems.append({"kind": "missing", "path": path, "expected": sha, "computed": None,
                                 "reason": f"release {rel['repo']} {path}: no object {release_key(sha)} in the store"})
                continue
            if _sha256(data) != sha:
                problems.append({"kind": "mismatched", "path": path, "expected": sha, "computed": _sha256(data),
                                 "reason": f"release {rel['repo']} {path}: not the bytes the lock records"})
                continue
            blob = sha.removeprefix("sha256:")
            if blobs.lstat(blob) is None:
                name = tmp.write_file("release-", data)
                tmp.replace(name, blobs, blob)
            parts = ["snapshots", rel["commit"], *path.split("/")]
            with folder.walk(*parts[:-1], create=True) as here:
                target = "../" * (len(parts) - 1) + f"blobs/{blob}"
                if here.readlink(parts[-1]) != target:
                    link = f"release-link-{os.urandom(8).hex()}"
                    tmp.symlink(target, link)
                    tmp.replace(link, here, parts[-1])
            if progress:
                progress({"event": "file", "repo": rel["repo"], "variant": "release", "path": path,
                          "action": "fetched", "bytes": len(data)})
        if not problems:
            with folder.child("refs", create=True) as refs:
                name = tmp.write_file("release-ref-", rel["commit"].encode("ascii"))
                tmp.replace(name, refs, f"v{rel['version']}")
    return problems


def mirror_problems(lock, dest: Path) -> list[dict]:
    """``frt verify --mirror``: every release file the lock records, present in ``dest`` with its sha256."""
    rel = lock.release
    if not rel:
        return []
    out = []
    base = f"{cache_folder(rel['repo'])}/snapshots/{rel['commit']}"
    for path, sha in sorted(rel.get("files", {}).items()):
        p = dest / base / path
        where = f"{base}/{path}"
        if not p.is_file():
            out.append({"kind": "missing", "path": where, "expected": sha, "computed": None,
                        "reason": f"release {rel['repo']} file {path} is not in the mirror"})
            continue
        try:
            got = _sha256(_read(p, where))
        except ReleaseError as exc:
            out.append({"kind": "mismatched", "path": where, "expected": sha, "computed": None,
                        "reason": f"release {rel['repo']} file {path}: {exc}"})
            continue
        if got != sha:
            out.append({"kind": "mismatched", "path": where, "expected": sha, "computed": got,
                        "reason": f"release {rel['repo']} file {path}: expected {sha}, computed {got}"})
    return out
