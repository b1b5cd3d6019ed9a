"""``frt publish URL``: publish every locked file a selection needs, then the lockfile(s), to an
object store (docs/reference.md#frt-publish). What ``frt mirror URL`` did, now its own verb:
publishing to a store is not filling a folder."""

from __future__ import annotations

from ..errors import UsageError
from .mirror import VERBOSE, selection_flags
from .parser import common_options


def add_parser(sub) -> None:
    """``frt publish``'s flags."""
    s = sub.add_parser("publish", help="publish every locked file the selection needs, then the lockfile(s), to an "
                                       "object store",
                       description="Publish every locked file the selection needs to an object store, each object "
                                   "verified against the lockfile, then the lockfile(s) last, so a reader never takes "
                                   "a half-sent release. Select as `frt mirror` does: --variant, --all-variants, the "
                                   "hardware flags and --machine, or --cells; default: this machine.",
                       epilog="example: frt publish s3://bucket/frt --cells (AWS_ENDPOINT_URL, AWS_PROFILE, "
                              "AWS_ACCESS_KEY_ID... as the AWS tools read them); nodes then run "
                              "frt mirror /srv/kernels --from s3://bucket/frt")
    common_options(s, verbose=VERBOSE)
    s.add_argument("url", metavar="URL", nargs="?", help="the object store: s3://bucket/prefix, file:///path, or "
                                                         "oci://registry/repository[:tag] (one artefact per lock; "
                                                         "its manifest digest is printed)")
    s.add_argument("--repair", action="store_true",
                   help="send every selected object again, even one already present with the right size")
    selection_flags(s)


def run(args) -> int:
    from ..distribution.objstore import is_url  # noqa: PLC0415
    from . import mirror  # noqa: PLC0415

    if not args.url:
        raise UsageError("frt publish: the object store to publish to is needed",
                         hints=["e.g. frt publish s3://bucket/prefix, or file:///path"])
    if not is_url(args.url):
        raise UsageError(f"frt publish {args.url}: not an object-store URL",
                         hints=["s3://bucket/prefix or file:///path; `frt mirror DIR` fills a folder"])
    args.dir, args.from_url, args.publishing = args.url, None, True
    return mirror.run(args)
