"""``frt digest PATH``: rewrite a package's ``metadata.json`` digests after editing it.

A variant's ``metadata.json`` lists the digest of every file of the variant (kernels'
rule: every file but the top-level ``metadata.json``, ``metadata.json.sigstore``,
``__pycache__/`` and ``*.pyc``). The loader and ``frt mirror`` check the files against
those digests, so ``frt lock`` refuses a path package whose files changed since they
were digested, and names this command. It recomputes the ``digest`` of each
``build/<variant>/metadata.json`` from the files now there (keeping the algorithm the
file declares, sha256 when it declares none) and leaves every other key, and their
order, as they were. Each file is written atomically and only when its digests change;
every variant is computed before any is written, so a refusal writes nothing.

It blesses whatever is in the folder: run it on a package you are developing, after
reviewing the change, never to make a package from someone else pass.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import KernelUnavailable, UsageError
from .metadata import MAX_METADATA_BYTES, digest_mismatches, variant_file_digests
from .schema import JSONInvalid, json_loads, read_bytes

__all__ = ["redigest", "VariantDigest"]


@dataclass
class VariantDigest:
    """One variant's ``metadata.json``: the files whose digest changed, and whether it was written."""

    metadata: Path
    changed: list[tuple[str, str | None, str | None]] = field(default_factory=list)  # (relpath, old, new)
    written: bool = False
    signed: bool = False  # a metadata.json.sigstore beside it, which a rewrite invalidates
    data: bytes = b""

    def to_dict(self) -> dict:
        return {"metadata": str(self.metadata), "stale": bool(self.changed), "written": self.written,
                "files": [{"path": r, "old": a, "new": b} for r, a, b in self.changed],
                "signature-invalidated": self.signed and self.written}


def _variants(path: Path) -> list[Path]:
    if (path / "metadata.json").is_file():
        return [path]
    build = path / "build"
    if not build.is_dir():
        raise UsageError(f"frt digest: {path} is neither a package folder (with build/<variant>/metadata.json) "
                         "nor a variant folder (with metadata.json)",
                         hints=["pass the package folder, e.g. `frt digest packages/rmsnorm`"])
    out = []
    for vdir in sorted(p for p in build.iterdir() if p.is_dir() and not p.is_symlink()):
        if not (vdir / "metadata.json").is_file():
            raise UsageError(f"frt digest: {vdir}/metadata.json not found; frt digest rewrites the digests of an "
                             "existing metadata.json (name, id, version, license, python-depends, backend)")
        out.append(vdir)
    if not out:
        raise UsageError(f"frt digest: {build} has no variant folders")
    return out


def _one(vdir: Path) -> VariantDigest:
    mpath = vdir / "metadata.json"
    raw = read_bytes(mpath, UsageError, str(mpath), limit=MAX_METADATA_BYTES)
    try:
        meta = json_loads(raw)
    except JSONInvalid as exc:
        raise UsageError(f"{mpath}: not valid JSON: {exc}") from None
    if not isinstance(meta, dict):
        raise UsageError(f"{mpath}: expected a JSON object, got {type(meta).__name__}")
    old = meta.get("digest")
    old = old if isinstance(old, dict) else {}
    algorithm = old.get("algorithm") if old.get("algorithm") in ("sha256", "sha512") else "sha256"
    declared = old.get("files") if isinstance(old.get("files"), dict) else {}
    try:
        files = variant_file_digests(vdir, algorithm, label=str(vdir))
    except KernelUnavailable as exc:
        raise UsageError(f"frt digest: {exc}", reasons=exc.reasons) from None
    if not files:
        raise UsageError(f"frt digest: {vdir} has no files besides metadata.json")
    new_digest = {"algorithm": algorithm, "files": files}
    out = VariantDigest(mpath, signed=(vdir / "metadata.json.sigstore").exists())
    if meta.get("digest") == new_digest:
        return out
    out.changed = digest_mismatches(declared, files) or [("(digest)", json.dumps(meta.get("digest")), "rewritten")]
    new = dict(meta)
    new["digest"] = new_digest  # in place when present, appended when not
    out.data = (json.dumps(new, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
    return out


def redigest(paths, *, check: bool = False) -> list[VariantDigest]:
    """Re-digest every variant of the packages (or variant folders) ``paths``. With ``check``
    nothing is written and each stale variant lists its changed files."""
    from .lock_writer import write_atomic  # noqa: PLC0415

    found = [_one(v) for p in paths for v in _variants(Path(p))]
    if check:
        return found
    for vd in found:
        if vd.changed:
            try:
                vd.written = write_atomic(vd.metadata, vd.data)
            except OSError as exc:
                raise UsageError(f"{vd.metadata}: cannot be written: {exc.strerror or exc}",
                               reasons=[{"path": str(vd.metadata), "reason": exc.strerror or str(exc)}],
                               hints=["check the folder's permissions and free space, then run it again (a metadata.json "
                                      "already rewritten is left as written)"]) from None
    return found
