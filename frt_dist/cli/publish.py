"""``frt publish URL``: publish every locked file a selection needs, then the lockfile(s), to an
object store (docs/reference.md#frt-publish). The selection is ``frt mirror``'s (``mirror.selection``);
the sending is ``distribution.fleet.publish_lock``."""

from __future__ import annotations

from ..errors import UsageError
from .parser import common_options
from .render import emit, progress_bar
from .selection import VERBOSE, file_progress, interrupted, selection, selection_flags


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
    s.add_argument("url", metavar="URL", help="the object store: s3://bucket/prefix, file:///path, or "
                   "oci://registry/repository[:tag] (one artefact per lock; its manifest digest is printed)")
    s.add_argument("--repair", action="store_true",
                   help="send every selected object again, even one already present with the right size")
    selection_flags(s)


def run(args) -> int:
    from ..distribution.objstore import is_url  # noqa: PLC0415

    if not is_url(args.url):
        raise UsageError(f"frt publish {args.url}: not an object-store URL",
                         hints=["s3://bucket/prefix, file:///path or oci://registry/repository[:tag]; "
                                "`frt mirror DIR` fills a folder"])
    return publish(args, again="frt publish")


def publish(args, *, again: str) -> int:
    """Publish to ``args.url`` (an object-store URL); ``again``: the command the interrupt hint names
    (``frt mirror URL``, the deprecated spelling, names itself)."""
    from ..distribution.fleet import publish_lock  # noqa: PLC0415
    from ..distribution.objstore import open_store  # noqa: PLC0415
    from .context import find_project  # noqa: PLC0415

    project = find_project(args)  # no project here: said before any store is opened
    with open_store(args.url) as store:
        locks, select = selection(args, project)
        if getattr(getattr(store, "loc", None), "scheme", "") == "oci" and len(locks) > 1:  # one lock per reference
            raise UsageError(f"{store.url}: a registry reference holds one lock's artefact, and this project has "
                             f"{len(locks)} lockfiles ({', '.join(sorted(locks))})",
                             hints=[f"publish each model to its own tag: frt publish {store.loc.repo_url}:MODEL "
                                    "--model MODEL"])
        reports, lines = [], []
        for model, lock in locks.items():
            bar = progress_bar(args, total=None, desc=f"mirror {model}", unit="B", unit_scale=True, unit_divisor=1024)
            try:
                pub = publish_lock(lock, store, **select, progress=file_progress(args, bar), root=project.root,
                                   repair=args.repair)
            except KeyboardInterrupt:  # not "nothing was written": what was sent stays
                return interrupted(args, f"interrupted; the objects already sent stay in {args.url}, and no lockfile "
                                         "was published for the model being sent, so no reader takes it as a release",
                                   f"run the same `{again}` again: it skips what is already there")
            finally:
                bar.close()
            reports.append(pub.to_dict())
            lines.append(f"{model}: {len(pub.packages)} package(s) to {store.url}: {pub.uploaded} object(s) uploaded, "
                         f"{pub.present} already present ({pub.checked['checksum']} by the store's SHA-256 checksum, "
                         f"{pub.checked['download']} downloaded and hashed), {pub.bytes} bytes sent; lockfile "
                         f"{pub.lockfile} last")
            if lock.release:
                lines.append(f"  release {lock.release['repo']} @ {lock.release['commit'][:12]}: "
                             f"{len(lock.release.get('files', {}))} file(s) by their sha256, {len(pub.release)} "
                             "uploaded")
            if pub.artefact is not None:  # a registry: the manifest to pin nodes to
                a = pub.artefact
                lines.append(f"  artefact {a['reference']} ({a['layers']} layer(s), tagged {a['tag']}; "
                             f"{len(a['referrers'])} signature referrer(s))")
            for r in pub.replaced:
                lines.append(f"  replaced {r['key']} ({r['repo']} {r['path']}): {r['reason']}")
            for sk in pub.skipped:
                lines.append(f"  skipped {sk['repo']}: {sk['reason']}")
    emit(args, {"ok": True, "dir": str(args.url), "models": reports}, "\n".join(lines))
    return 0
