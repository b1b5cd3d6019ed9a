"""``frt publish oci://…``'s last step (``frt_dist.distribution.fleet.publish_lock`` calls it once every
blob and the lockfile are in the registry): the artefact's manifest over those blobs, each layer titled with
its path in a mirror folder, tagged; then the lock's signatures as its referrers
(``frt_dist.distribution.oci_sign``). See ``frt_dist.distribution.oci``."""

from __future__ import annotations

import hashlib

from .oci import (
    ARTIFACT,
    EMPTY_JSON,
    KEY,
    LAYER,
    LOCK_DIGEST,
    MANIFEST,
    MODEL,
    TITLE,
    OciStore,
    canonical_json,
    empty_descriptor,
    lock_digest,
)
from .oci_sign import attach_signatures

__all__ = ["mirror_paths", "finish_lock"]


def mirror_paths(lock, packages: list[dict]) -> list[tuple[str, str, bytes | None]]:
    """Every file of the artefact: ``(title, key, bytes or None)``, ``bytes`` given for the small
    files made here (the refs). ``packages``: the publish report's ``{"repo", "variants"}``."""
    from .sources import locked_files, repo_folder  # noqa: PLC0415

    out = []
    for p in packages:
        pkg = lock.packages[p["repo"]]
        folder = repo_folder(pkg.repo)
        for v in p["variants"]:
            for item in locked_files(pkg, v):
                out.append((f"{folder}/snapshots/{pkg.snapshot}/{item.path}", item.object_key, None))
        ref = pkg.snapshot.encode("ascii")
        out.append((f"{folder}/refs/v{pkg.version}", "", ref))
        out.append((f"{folder}/refs/main", "", ref))
    rel = lock.release
    if rel and rel.get("files"):
        from .release_files import cache_folder, release_key  # noqa: PLC0415

        folder = cache_folder(rel["repo"])
        for path, sha in sorted(rel["files"].items()):
            out.append((f"{folder}/snapshots/{rel['commit']}/{path}", release_key(sha), None))
        out.append((f"{folder}/refs/v{rel['version']}", "", rel["commit"].encode("ascii")))
    from .store_api import lock_key  # noqa: PLC0415

    out.append((lock_key(lock.model), lock_key(lock.model), None))
    return out


def finish_lock(store: OciStore, lock, report) -> dict:
    """After ``publish_lock`` sent every blob and the lockfile: the artefact's manifest, tagged, then
    the signatures as referrers. Returns ``{"digest", "reference", "layers", "referrers"}``."""
    layers = []
    for title, key, data in mirror_paths(lock, report.packages):
        if data is not None:
            digest = "sha256:" + hashlib.sha256(data).hexdigest()
            store.upload(digest, len(data), lambda data=data: data)
            size = len(data)
        else:
            digest, size = store.blobs[key]
        ann = {TITLE: title}
        if key:
            ann[KEY] = key
        layers.append({"mediaType": LAYER, "digest": digest, "size": size, "annotations": ann})
    store.upload("sha256:" + hashlib.sha256(EMPTY_JSON).hexdigest(), len(EMPTY_JSON), lambda: EMPTY_JSON)
    doc = {"schemaVersion": 2, "mediaType": MANIFEST, "artifactType": ARTIFACT,
           "config": empty_descriptor(), "layers": layers,
           "annotations": {MODEL: lock.model, LOCK_DIGEST: lock_digest(lock)}}
    data = canonical_json(doc)
    tag = store.loc.tag or "latest"
    digest = store.put_manifest(tag, data)
    out = {"digest": digest, "reference": f"{store.loc.repo_url}@{digest}", "tag": f"{store.loc.repo_url}:{tag}",
           "layers": len(layers), "blobs-sent": store.sent, "referrers": []}
    out["referrers"] = attach_signatures(store, lock, digest, len(data))
    return out


