#!/usr/bin/env python3
"""Recompute the ``digest`` of every bundled kernel package's metadata.json.

Each package lives at ``packages/<dir>/build/<variant>/`` (the repository's demo project)
in Hugging Face Kernel Hub layout.  The digest (kernels >= 0.17 format) maps
every file of the variant -- path relative to the variant directory, POSIX
separators -- to the base64 of its raw SHA-256, excluding ``metadata.json``
itself, any ``metadata.json.sigstore`` bundle, ``__pycache__/`` and ``*.pyc``.

Run after editing a kernel:

    python scripts/redigest_packages.py          # rewrite digests
    python scripts/redigest_packages.py --check  # exit 1 if any is stale

Stdlib only.  Other metadata keys keep their order; output is indented by 2
with a trailing newline.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ROOT / "packages"
EXCLUDED_NAMES = {"metadata.json", "metadata.json.sigstore"}


def variant_files(variant: Path) -> list[Path]:
    files = []
    for path in variant.rglob("*"):
        rel = path.relative_to(variant)
        if "__pycache__" in rel.parts or path.suffix == ".pyc":
            continue
        if path.is_file() and rel.as_posix() not in EXCLUDED_NAMES:
            files.append(path)
    return sorted(files, key=lambda p: p.relative_to(variant).as_posix())


def compute_digest(variant: Path) -> dict:
    files = {}
    for path in variant_files(variant):
        raw = hashlib.sha256(path.read_bytes()).digest()
        files[path.relative_to(variant).as_posix()] = base64.b64encode(raw).decode("ascii")
    return {"algorithm": "sha256", "files": files}


def variants(packages: Path = PACKAGES) -> list[Path]:
    return sorted(p.parent for p in packages.glob("*/build/*/metadata.json"))


def render(metadata: dict) -> str:
    return json.dumps(metadata, indent=2, ensure_ascii=False) + "\n"


def redigest(variant: Path, *, check: bool = False) -> bool:
    """Update (or with ``check`` only compare) one variant; True if it was current."""
    meta_path = variant / "metadata.json"
    metadata = json.loads(meta_path.read_text(encoding="utf-8"))
    new = dict(metadata)
    new["digest"] = compute_digest(variant)  # replaces in place if present, else appends
    current = metadata.get("digest") == new["digest"]
    if not check and (not current or meta_path.read_text(encoding="utf-8") != render(new)):
        meta_path.write_text(render(new), encoding="utf-8")
    return current


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only report stale digests")
    parser.add_argument("--packages", type=Path, default=PACKAGES, help="packages root")
    args = parser.parse_args(argv)
    found = variants(args.packages)
    if not found:
        print(f"no */build/*/metadata.json under {args.packages}", file=sys.stderr)
        return 1
    stale = 0
    for variant in found:
        ok = redigest(variant, check=args.check)
        stale += not ok
        label = "ok" if ok else ("STALE" if args.check else "updated")
        print(f"{label:8s} {variant.relative_to(args.packages).as_posix()}")
    return 1 if (args.check and stale) else 0


if __name__ == "__main__":
    raise SystemExit(main())
