"""``frt verify --mirror oci://…``: the artefact checked as the folder ``oras pull`` would unpack it
into, plus its signature referrers (``frt_dist.distribution.oci_sign``), offline of the Hub.

The artefact is unpacked into a private temporary folder (each layer under its title, each blob
hashed against its descriptor's digest on the way: one that does not match is a problem naming the
registry and the layer, and is not written), then the folder is verified exactly as ``frt verify
--mirror DIR`` verifies one (``frt_dist.lock.verify``: every locked file of the variants the artefact
holds against the lock, the refs, the release files, the publisher bundles over the mirrored
metadata). Problem paths are the layer titles; the messages name the registry reference.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

from ..errors import ObjectMissing, StoreUnavailable, UsageError

__all__ = ["unpack", "verify_artefact"]


class _Into:
    def __init__(self, fd: int):
        self.fd, self.h = fd, hashlib.sha256()

    def write(self, chunk) -> None:
        self.h.update(chunk)
        view = memoryview(chunk)
        while view:
            view = view[os.write(self.fd, view):]


def unpack(store, dest: Path) -> list[dict]:
    """Write every layer of the artefact under ``dest/<title>`` (a fresh private folder), each blob
    hashed against its descriptor first; the problems (a blob missing, or not its digest)."""
    digest, _data, _doc, layers = store.manifest()
    problems = []
    for layer in layers:
        path = dest / layer.title
        where = f"{store.url} layer {layer.title}"
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = path.with_name(f".part-{path.name}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        sink = _Into(fd)
        try:
            store.get_blob(layer.digest, layer.size, sink, where=where)
        except ObjectMissing:
            problems.append({"kind": "missing", "path": layer.title, "expected": layer.digest, "computed": None,
                             "reason": f"{where}: the registry does not hold its blob {layer.digest}"})
            continue
        except StoreUnavailable as exc:
            if "FRT_STORE_DEADLINE" in str(exc) or "attempt(s)" in str(exc):
                raise
            problems.append({"kind": "mismatched", "path": layer.title, "expected": layer.digest, "computed": None,
                             "reason": str(exc)})
            continue
        finally:
            os.close(fd)
        got = "sha256:" + sink.h.hexdigest()
        if got != layer.digest:
            os.unlink(tmp)
            problems.append({"kind": "mismatched", "path": layer.title, "expected": layer.digest, "computed": got,
                             "reason": f"{where}: the registry's blob does not hash to its digest {layer.digest} "
                                       f"(computed {got}); not used"})
            continue
        os.replace(tmp, path)
    for leftover in dest.rglob(".part-*"):
        leftover.unlink()
    return problems


def verify_artefact(verify, project, models, url: str, *, variants=None, all_variants: bool = False):
    """``verify(project, models, mirror=<the unpacked artefact>)`` with the artefact's own problems
    (unpacking, signature referrers) added, every path and message naming the registry reference."""
    from .objstore import open_store, parse_location  # noqa: PLC0415

    loc = parse_location(url)
    if loc.scheme != "oci":
        raise UsageError(f"--mirror {url}: verify checks a folder or an oci:// artefact",
                         hints=[f"fill a folder from the store (`frt mirror DIR --from {url}`) and verify that"])
    tmp = Path(tempfile.mkdtemp(prefix="frt-verify-oci-"))
    try:
        with open_store(loc, reading=True) as store:
            digest = store.manifest()[0]
            model = store.manifest()[2].get("annotations", {}).get("dev.frt-dist.model")
            if models is None and isinstance(model, str) and (Path(project.lockfiles_dir) / f"{model}.lock").is_file():
                models = [model]  # one artefact holds one lock: the others are not in it
            pulled = unpack(store, tmp / "m")
            report = verify(project, models, mirror=tmp / "m", variants=variants, all_variants=all_variants)
            from ..documents.lockfile import Lockfile  # noqa: PLC0415
            from .oci_sign import check_referrers  # noqa: PLC0415

            signatures = []
            for label in report.lockfiles:
                lock = Lockfile.read(Path(project.root) / label, label=label, index_refs=False)
                if store.manifest()[2].get("annotations", {}).get("dev.frt-dist.model") == lock.model:
                    signatures += check_referrers(store, lock, digest, project=project)
        here = f"{loc.url}" + ("" if loc.digest else f" ({digest})")
        prefix = str(tmp / "m") + os.sep
        for p in report.problems:
            for k in ("message", "reason"):
                if isinstance(p.get(k), str):
                    p[k] = p[k].replace(prefix, f"{here} ")
        report.problems[:0] = pulled
        report.problems += signatures
        report.notes.append(f"{here}: {len(store.manifest()[3])} layer(s) unpacked and checked against the lock")
        return report
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
