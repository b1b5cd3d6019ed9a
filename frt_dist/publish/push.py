"""``frt release push``: a model's manifest, the receipts its lock accepted (with their signature
files) and its lockfile, as one commit on branch ``v<N>`` of a Hub model repo (``frt_dist.distribution.release_files``
reads releases; this module writes them)."""

from __future__ import annotations

from pathlib import Path

from ..distribution.hub import RELEASE_REPO_TYPE as REPO_TYPE
from ..distribution.hub import api, branch_commit, hub_call
from ..distribution.release_files import SIG_SUFFIXES
from ..documents.lock_release import release_receipts
from ..errors import ReleaseError, UsageError

__all__ = ["push"]


def _local_path_problems(lock, model: str) -> list[dict]:
    """Every accepted receipt measured on a path package (a folder only this project has), and every
    path package of the manifest: a consumer could fetch neither."""
    out = []
    path_pkgs = {repo: p.path for repo, p in lock.packages.items() if p.source == "path"}
    for rec in sorted(lock.receipts.values(), key=lambda r: r.file):
        for seam, it in sorted(rec.cell["impls"].items()):
            if it["package"] in path_pkgs:
                out.append({"file": rec.file, "field": f"cell.impls.{seam}",
                            "reason": f"{rec.file}: cell.impls.{seam} was measured on path package "
                                      f"{it['package']!r} (path {path_pkgs[it['package']]!r}, revision "
                                      f"{it['revision']}): a local path no consumer has"})
    if not out:
        for repo, path in sorted(path_pkgs.items()):
            out.append({"file": lock.manifest_file, "field": f'packages."{repo}".path',
                        "reason": f"{lock.manifest_file}: package {repo!r} is a local path ({path!r}) no consumer has"})
    return out


def push(project, model: str, repo: str, version: int) -> dict:
    """Publish ``model``'s manifest, accepted receipts (with their signature files) and lockfile as
    one commit on branch ``v<version>`` of the model repo ``repo`` (created if missing). Raises
    ``ReleaseError`` (stale lock, branch moved: exit 1) or ``UsageError`` (local path, no write
    access: exit 2); nothing is committed then."""
    from huggingface_hub import CommitOperationAdd, CommitOperationDelete  # noqa: PLC0415
    from huggingface_hub.hf_api import RepoFile  # noqa: PLC0415

    from ..base.canonical import digest  # noqa: PLC0415
    from ..documents.lockfile import Lockfile  # noqa: PLC0415
    from ..documents.schema import json_loads  # noqa: PLC0415
    from ..lock.build import lock_model  # noqa: PLC0415

    lpath = project.existing_lockfile(model)
    check = lock_model(project, model, check=True, warn=lambda m: None)
    if check.stale:
        raise ReleaseError(f"{project.rel(lpath)} is stale; a release publishes what was locked:\n  "
                           + "\n  ".join(check.stale),
                           reasons=[{"file": project.rel(lpath), "reason": s} for s in check.stale],
                           hints=[f"frt lock --model {model}, review the change, then push again"])
    lock = Lockfile.read(lpath, label=project.rel(lpath))
    bad = _local_path_problems(lock, model)
    if bad:
        raise UsageError(f"release {repo!r}: {len(bad)} local path(s) cannot be published:\n  "
                         + "\n  ".join(b["reason"] for b in bad), reasons=bad,
                         hints=["publish the package on the Hub (a `v<N>` branch), point the manifest at it, "
                                "qualify again, then `frt lock` and push"])
    files = {f"manifests/{model}.toml": project.manifest_path(model).read_bytes(),
             f"lockfiles/{model}.lock": lpath.read_bytes()}
    upstream = release_receipts(lock)  # a publisher that itself consumes a release does not re-publish its receipts
    renamed = {}
    own = project.rel(project.receipts_dir / model) + "/"  # the model's own folder first: its names are kept
    for rec in sorted(lock.receipts.values(), key=lambda r: (not r.file.startswith(own), r.file)):
        if rec.digest in upstream:
            continue
        src = project.root / rec.file
        data = src.read_bytes() if src.is_file() else None
        if data is None or digest(json_loads(data)) != rec.digest:
            raise ReleaseError(f"{rec.file}: not the receipt the lock embeds ({rec.digest})",
                               hints=[f"frt lock --model {model}"])
        inner = Path(rec.file).relative_to(project.rel(project.receipts_dir)) if rec.file.startswith(
            project.rel(project.receipts_dir) + "/") else Path(Path(rec.file).name)
        parts = inner.parts
        dest = "receipts/" + "/".join(parts if parts[0] == model else (model, *parts))
        if any(dest + x in files for x in ("", *SIG_SUFFIXES)):
            # two receipts with one name, from different folders (receipts/x.json and receipts/<model>/x.json):
            # the second is published under its name plus its digest, never over the first
            dest = f"{dest.removesuffix('.json')}--{rec.digest.removeprefix('sha256:')[:12]}.json"
            renamed[rec.file] = dest
        files[dest] = data
        for suffix in SIG_SUFFIXES:
            sig = src.with_name(src.name + suffix)
            if sig.is_file():
                files[dest + suffix] = sig.read_bytes()
    client = api(token=True)
    branch = f"v{version}"
    hub_call(repo, "create repo", lambda: client.create_repo(repo, repo_type=REPO_TYPE, exist_ok=True), writing=True)
    head = branch_commit(client, repo, version)
    if head is None:
        hub_call(repo, f"create branch {branch}",
             lambda: client.create_branch(repo, branch=branch, repo_type=REPO_TYPE, exist_ok=True), writing=True)
        head = branch_commit(client, repo, version)

    def listing():
        return {e.path: e for e in client.list_repo_tree(repo, revision=head, repo_type=REPO_TYPE, recursive=True)
                if isinstance(e, RepoFile) and _ours(e.path, model)}

    there = hub_call(repo, f"list the files of {branch} at {head[:12]}", listing)
    gone = sorted(p for p in there if p.startswith(f"receipts/{model}/") and p not in files)
    common = {"repo": repo, "version": version, "branch": branch, "parent": head, "files": sorted(files),
              "deleted": gone, "renamed": renamed, "receipts": len(lock.receipts) - len(upstream),
              "upstream-skipped": len(upstream)}
    if not gone and all(p in there and _same(there[p], data) for p, data in files.items()):
        # the head's tree already holds these bytes, compared here (not left to the Hub): no commit
        return {**common, "commit": head, "unchanged": True}
    ops = [CommitOperationAdd(p, data) for p, data in sorted(files.items())] + [CommitOperationDelete(p) for p in gone]
    info = hub_call(repo, f"commit to {branch}", lambda: client.create_commit(
        repo, operations=ops, commit_message=f"frt release push: {model} ({len(lock.receipts) - len(upstream)} receipts)",
        revision=branch, parent_commit=head, repo_type=REPO_TYPE), writing=True)
    oid = getattr(info, "oid", None)
    if not isinstance(oid, str) or not oid:
        raise ReleaseError(f"release {repo!r}: the Hub's answer to the commit on {branch} names no commit id; "
                           "look at the branch before pushing again", hints=[f"frt init --from hf://{repo}@v{version} "
                                                                             "in a scratch folder shows what is there"])
    return {**common, "commit": oid, "unchanged": oid == head}


def _ours(path: str, model: str) -> bool:
    """A file of ``model``'s release (the others' files in the repo are left alone)."""
    return path in (f"manifests/{model}.toml", f"lockfiles/{model}.lock") or path.startswith(f"receipts/{model}/")


def _same(entry, data: bytes) -> bool:
    """Does the Hub's tree entry hold ``data``: its LFS sha256, else its git blob id."""
    import hashlib  # noqa: PLC0415

    lfs = getattr(entry, "lfs", None)
    if lfs is not None:
        want = lfs.get("sha256") if isinstance(lfs, dict) else getattr(lfs, "sha256", None)
        return want == hashlib.sha256(data).hexdigest()
    return entry.blob_id == hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
