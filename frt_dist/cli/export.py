"""``frt export``: the locked pins in another tool's format (docs/reference.md#frt-export)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ..errors import UsageError
from .context import find_lock, find_project
from .parser import common_options, output_file_arg
from .render import deprecated, write_output

FORMATS = ("kernels", "cyclonedx")


def add_parser(sub) -> None:
    """``frt export``'s flags."""
    s = sub.add_parser("export", help="print the locked pins in another tool's format (kernels.lock, CycloneDX SBOM)",
                       description="Write nothing to lockfiles/: print the locked pins in another tool's lock format. "
                                   "kernels: a kernels.lock for kernels.load_kernel / LockedLayerRepository. kernels "
                                   "checks no file digest when it loads: an edited file in the mirror runs; check the "
                                   "mirror with `frt verify --mirror DIR` before such a load (frt_dist.load checks "
                                   "every file itself). cyclonedx: one model's lock as a CycloneDX 1.6 JSON SBOM "
                                   "(packages at their commits, file hashes, publisher signers, route receipts).",
                       epilog="example: frt export --format cyclonedx --model demo-decoder -o sbom.json")
    common_options(s)
    s.add_argument("--format", choices=FORMATS, default="kernels", help="the format (default: kernels)")
    s.add_argument("--model", metavar="M",
                   help="one model's lockfile (default: every lockfile of the project; cyclonedx: the "
                        "project's only one)")
    s.add_argument("--lockfile", metavar="FILE", help="export this lockfile")
    s.add_argument("-o", "--output", metavar="FILE", type=output_file_arg, help="write to FILE instead of stdout")


def run(args) -> int:
    """``frt export --format FMT``; ``frt lock --export FMT`` (deprecated) comes here too."""
    if getattr(args, "export", None):  # the old spelling, from `frt lock`
        deprecated(f"frt lock --export {args.export}", f"frt export --format {args.export}")
        args.format, args.lockfile = args.export, None
    return _export_sbom(args) if args.format == "cyclonedx" else _export_kernels(args)


def _locks(args, project, models):
    from ..documents.lockfile import Lockfile  # noqa: PLC0415

    if args.lockfile:
        return [find_lock(project, args.model, args.lockfile)]
    if len(models) == 1 and args.format == "cyclonedx":
        path = project.existing_lockfile(models[0])
        return [Lockfile.read(path, label=project.rel(path))]
    return [Lockfile.read(project.existing_lockfile(m)) for m in models]


def _export_kernels(args) -> int:
    """The pins of the lockfiles in force, in `kernels`' format."""
    from ..export.kernels_lock import kernels_lock_json  # noqa: PLC0415

    project = find_project(args)
    models = [args.model] if args.model is not None else project.models()
    locks = _locks(args, project, models)
    text = kernels_lock_json(locks)
    export_output(args, text, f"{len(json.loads(text))} kernels, from {', '.join(project.rel(lk.path) for lk in locks)}")
    if not args.quiet:  # after the export exists: a write that failed gets its error alone
        print("note: kernels checks no file digest when it loads through this kernels.lock: run "
              "`frt verify --mirror DIR` on the mirror before such a load", file=sys.stderr)
    return 0


def _export_sbom(args) -> int:
    """One model's lockfile as a CycloneDX 1.6 JSON SBOM."""
    from ..export.sbom import cyclonedx_json, package_licences, source_date  # noqa: PLC0415

    when = source_date()  # a bad SOURCE_DATE_EPOCH is exit 2 before anything is read
    project = find_project(args)
    models = [args.model] if args.model is not None else project.models()
    if len(models) != 1 and not args.lockfile:
        spelling = "frt lock --export cyclonedx" if getattr(args, "export", None) else "frt export --format cyclonedx"
        raise UsageError(f"{spelling} describes one model; this project has {len(models)} "
                         f"({', '.join(models) or 'none'})", hints=["name one: --model MODEL"])
    [lock] = _locks(args, project, models[:1])
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
