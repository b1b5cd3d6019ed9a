"""``frt digest``: rewrite a package's metadata.json file digests (docs/reference.md#frt-digest)."""

from __future__ import annotations

import sys

from .parser import output_options
from .render import emit


def add_parser(sub) -> None:
    """``frt digest``'s flags."""
    s = sub.add_parser("digest", help="rewrite a package's metadata.json file digests after editing it",
                       description="Recompute the `digest` of each build/<variant>/metadata.json of a package you "
                                   "are developing from the files now there (kernels' rule: every file but "
                                   "metadata.json, metadata.json.sigstore, __pycache__/ and *.pyc), keeping every "
                                   "other key. `frt lock` refuses a path package whose files do not match these "
                                   "digests. It blesses what is in the folder: review the change first.",
                       epilog="example: frt digest packages/rmsnorm && frt lock")
    s.add_argument("paths", nargs="+", metavar="PATH", help="a package folder (with build/) or one variant folder")
    s.add_argument("--check", action="store_true", help="write nothing; exit 1 naming each stale variant and file")
    output_options(s, verbose="also each file whose digest changed, with its old and new digest")


def run(args) -> int:
    """``frt digest PATH...``: re-digest packages under development (``frt_dist.documents.redigest``)."""
    import shlex  # noqa: PLC0415

    from ..documents.redigest import redigest  # noqa: PLC0415

    found = redigest(args.paths, check=args.check)
    lines = []
    for vd in found:
        state = ("stale" if args.check else "updated") if vd.changed else "up to date"
        lines.append(f"{vd.metadata}: {state}" + (f" ({', '.join(r for r, _, _ in vd.changed)})" if vd.changed else ""))
        if args.verbose:
            lines += [f"  {rel}: {old} -> {new}" for rel, old, new in vd.changed]
        if vd.written and vd.signed:
            print(f"warning: {vd.metadata}.sigstore no longer matches the rewritten metadata.json: sign it again "
                  "or remove it", file=sys.stderr)
    stale = [vd for vd in found if vd.changed]
    emit(args, {"ok": not (args.check and stale), "variants": [vd.to_dict() for vd in found]}, "\n".join(lines))
    if args.check and stale:
        print(f"error: {len(stale)} metadata.json file(s) do not match their files",
              file=sys.stderr)
        print(f"hint: run `frt digest {shlex.join(args.paths)}` after reviewing the changes", file=sys.stderr)
        return 1
    if stale and not (args.quiet or args.json):
        print("hint: run `frt lock` to lock the new digests", file=sys.stderr)
    return 0
