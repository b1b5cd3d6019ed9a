"""``frt receipts push|pull``: carry receipts through an object store (docs/reference.md#frt-receipts)."""

from __future__ import annotations

import sys
from pathlib import Path

from ..errors import FrtError, UsageError
from .context import find_project
from .parser import Parser, common_options
from .render import emit


def add_parser(sub) -> None:
    """``frt receipts``'s flags."""
    s = sub.add_parser("receipts", help="carry receipts between hosts through an object store (push, pull)",
                       description="Qualification hosts push their receipts to an object store; the lock job pulls "
                                   "them into receipts/ and runs `frt lock`. Each receipt is stored once under its "
                                   "canonical digest, so order and duplicates do not change the lock.",
                       epilog="example: frt receipts push s3://bucket/frt (on each GPU host); frt receipts pull "
                              "s3://bucket/frt && frt lock (on the lock job)")
    rsub = s.add_subparsers(dest="receipts_command", metavar="ACTION", parser_class=Parser, required=True,
                            help="push: send receipts to a store; pull: fetch them into receipts/")
    r = rsub.add_parser("push", help="send receipts to URL, each under its canonical digest")
    common_options(r, verbose="also each receipt sent")
    r.add_argument("url", metavar="URL", help="s3://bucket/prefix or file:///path")
    r.add_argument("paths", metavar="PATH", nargs="*",
                   help="receipt files or folders (default: the project's receipts/ folder)")
    r = rsub.add_parser("pull", help="fetch every receipt in URL into the project's receipts/<model>/")
    common_options(r)
    r.add_argument("url", metavar="URL", help="s3://bucket/prefix or file:///path")
    r.add_argument("--model", metavar="M", help="only this model's receipts")
    r.add_argument("--strict", action="store_true",
                   help="exit 1 when the store holds an object that is not a valid receipt (default: a warning "
                        "naming it; it is not written, and the others are)")


def run(args) -> int:
    """``frt receipts push URL [PATH...]`` / ``frt receipts pull URL [--model M]`` (frt_dist/distribution/fleet.py)."""
    from ..distribution.fleet import pull_receipts, push_receipts  # noqa: PLC0415
    from ..distribution.objstore import is_url, open_store  # noqa: PLC0415

    if not is_url(args.url):
        raise UsageError(f"frt receipts {args.receipts_command} {args.url}: not an object-store URL",
                         hints=["s3://bucket/prefix or file:///path; receipts in a folder are already where "
                                "`frt lock` reads them"])
    project = find_project(args)
    with open_store(args.url) as store:
        if args.receipts_command == "push":
            paths = args.paths or [project.receipts_dir]
            res = push_receipts(store, paths, label=lambda p: project.rel(Path(p)))
            emit(args, {"ok": True, **res.to_dict()},
                  f"{len(res.sent)} receipt(s) sent to {store.url}, {len(res.present)} already there"
                  + (f"; {len(res.signatures)} signature file(s) sent" if res.signatures else "")
                  + "".join(f"\n  {x}" for x in (res.sent if args.verbose else ())))
            return 0
        if args.model is not None:
            from ..base import names  # noqa: PLC0415

            names.check("name", args.model, "--model", UsageError)
        if project.read_only:
            raise UsageError("frt receipts pull: the bundled demo project is read-only; run it in a project folder "
                             "(manifests/, receipts/, lockfiles/) or pass --project DIR")
        res = pull_receipts(store, project.receipts_dir, model=args.model, label=lambda p: project.rel(Path(p)))
    lines = [f"{len(res.written)} receipt(s) written from {store.url}, {len(res.present)} already here"]
    lines += [f"  {w}" for w in res.written]
    lines += [f"  {w} (signature)" for w in res.signatures]
    # An object the store holds that is not a valid receipt is refused and named, never written: the
    # store is untrusted, so one bad object is a warning (it must not stop every later `pull && lock`);
    # --strict makes it exit 1. A destination here that cannot take a receipt is this project's to fix: exit 1.
    local = [r for r in res.refused if "file" in r]
    if local or (res.refused and args.strict):
        raise FrtError(f"{len(res.refused)} receipt(s) in {store.url} refused (not written):\n  "
                       + "\n  ".join(r["reason"] for r in res.refused),
                       reasons=res.refused, hints=["the others were written; remove or re-push the refused ones"]
                       + (["move the named file or link away, then pull again"] if local else []))
    if res.refused and not (args.quiet and not args.json):
        for r in res.refused:
            print(f"warning: refused: {r['reason']}", file=sys.stderr)
    emit(args, {"ok": True, **res.to_dict()}, "\n".join(lines))
    if res.written and not (args.quiet or args.json):
        print("hint: run `frt lock` to embed the new receipts", file=sys.stderr)
    return 0
