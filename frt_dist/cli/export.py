"""``frt export``: the locked pins in another tool's format (docs/reference.md#frt-export)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ..errors import UsageError
from .context import find_project
from .render import write_output


def run_export(args) -> int:
    """``frt lock --export kernels``: the pins of the lockfiles in force, in `kernels`' format."""
    from ..documents.lockfile import Lockfile  # noqa: PLC0415
    from ..lock.export_kernels import kernels_lock_json  # noqa: PLC0415

    if args.export == "cyclonedx":
        return _lock_export_sbom(args)
    project = find_project(args)
    models = [args.model] if args.model is not None else project.models()
    locks = [Lockfile.read(project.existing_lockfile(m)) for m in models]
    text = kernels_lock_json(locks)
    export_output(args, text, f"{len(json.loads(text))} kernels, from {', '.join(project.rel(l.path) for l in locks)}")
    if not args.quiet:  # after the export exists: a write that failed gets its error alone
        print("note: kernels checks no file digest when it loads through this kernels.lock: run "
              "`frt verify --mirror DIR` on the mirror before such a load", file=sys.stderr)
    return 0


def _lock_export_sbom(args) -> int:
    """``frt lock --export cyclonedx``: one model's lockfile as a CycloneDX 1.6 JSON SBOM."""
    from ..documents.lockfile import Lockfile  # noqa: PLC0415
    from ..provenance.sbom import cyclonedx_json, package_licences, source_date  # noqa: PLC0415

    when = source_date()  # a bad SOURCE_DATE_EPOCH is exit 2 before anything is read
    project = find_project(args)
    models = [args.model] if args.model is not None else project.models()
    if len(models) != 1:
        raise UsageError(f"frt lock --export cyclonedx describes one model; this project has {len(models)} "
                         f"({', '.join(models) or 'none'})", hints=["name one: --model MODEL"])
    path = project.existing_lockfile(models[0])
    lock = Lockfile.read(path, label=project.rel(path))
    export_output(args, cyclonedx_json(lock, licences=package_licences(lock, project.root), timestamp=when),
                   f"CycloneDX 1.6, {len(lock.packages)} package(s), from {project.rel(lock.path)}")
    return 0


def export_output(args, text: str, what: str) -> None:
    """An export to ``-o FILE`` (whole or not at all, then ``wrote FILE (what)`` unless quiet),
    else to standard output."""
    if args.output:
        out = Path(args.output)
        write_output(out, text.encode("utf-8"))
        if not args.quiet:
            print(f"wrote {out} ({what})", file=sys.stderr)
    else:
        sys.stdout.write(text)
