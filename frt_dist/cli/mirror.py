"""``frt mirror``: fill a folder with every locked file a selection needs (docs/reference.md#frt-mirror)."""

from __future__ import annotations

from pathlib import Path

from ..base.canonical import short_digest
from ..errors import UsageError
from .context import find_project
from .parser import common_options
from .render import deprecated, emit, progress_bar
from .selection import VERBOSE, file_progress, interrupted, selection, selection_flags


def add_parser(sub) -> None:
    """``frt mirror``'s flags."""
    s = sub.add_parser("mirror", help="fill DIR with every locked file the selection needs (from a store: --from URL)",
                       description="Fill DIR with every locked file the selection needs. Select by --variant, "
                                   "--all-variants, the machines you ship to (the hardware flags for one, "
                                   "--machine for each further one), or --cells; default: this machine. "
                                   "With --from URL: fill DIR from an object store (s3://bucket/prefix, "
                                   "file:///path), every file verified against the local lockfile. (An object-store "
                                   "URL instead of DIR publishes there: deprecated, use `frt publish URL`.)",
                       epilog="example: frt mirror DIR --arch 9.0 --device-class h200 --software torch=2.13,cuda=12.8 "
                              "--machine 'arch=12.0,device-class=rtx-5090,software=torch=2.13;cuda=12.8'; "
                              "frt mirror /srv/kernels --from s3://bucket/frt "
                              "(AWS_ENDPOINT_URL, AWS_PROFILE, AWS_ACCESS_KEY_ID... as the AWS tools read them)")
    common_options(s, verbose=VERBOSE)
    s.add_argument("dir", metavar="DIR",
                   help="the mirror folder (a hub-cache layout; created when needed); an "
                        "object-store URL here publishes (deprecated: `frt publish URL`)")
    s.add_argument("--from", dest="from_url", metavar="URL",
                   help="fill DIR from this object store (s3://bucket/prefix, oci://registry/repo[:tag|@sha256:…], "
                        "file:///path) instead of the "
                        "packages' own sources; the project's lockfile decides what and verifies every byte")
    s.add_argument("--repair", action="store_true", help="with an object-store URL (deprecated): as `frt publish --repair`")
    selection_flags(s)


def run(args) -> int:
    from ..distribution.objstore import is_url, open_store  # noqa: PLC0415

    if is_url(args.dir):  # the old spelling of `frt publish URL`
        deprecated("frt mirror URL", "frt publish URL")
        if args.from_url:
            raise UsageError(f"frt mirror {args.dir} --from {args.from_url}: publish to a store, or fill a folder "
                             "from one; not both", hints=["frt mirror DIR --from URL fills DIR; frt publish URL publishes"])
        from . import publish  # noqa: PLC0415

        args.url = args.dir
        return publish.publish(args, again="frt mirror")
    if args.repair:
        raise UsageError("--repair applies when publishing to an object store (frt mirror s3://... --repair)")
    project = find_project(args)  # no project here: said before any store is opened or folder made
    if args.from_url:
        with open_store(args.from_url, reading=True) as store:
            return _mirror(args, project, store)
    return _mirror(args, project, None)


def _mirror(args, project, store) -> int:
    """``frt mirror DIR [--from URL]``: fill DIR from the packages' sources, or from ``store``."""
    from ..distribution.mirror import mirror_lock  # noqa: PLC0415
    from ..errors import KernelUnavailable  # noqa: PLC0415

    locks, select = selection(args, project)
    reports, lines = [], []
    for model, lock in locks.items():
        bar = progress_bar(args, total=None, desc=f"mirror {model}", unit="B", unit_scale=True, unit_divisor=1024)
        try:
            rep = mirror_lock(lock, Path(args.dir), **select, progress=file_progress(args, bar), root=project.root,
                              source=store)
        except KeyboardInterrupt:  # not "nothing was written": what was verified stays
            return interrupted(args, f"interrupted; the files already verified stay in {args.dir} (this run's "
                                     "temporary files are removed, or by the next run if it was killed)",
                               "run the same `frt mirror` again: it resumes, fetching only what is missing")
        except KernelUnavailable as exc:
            if project.is_node and store is None:  # a file this node could not supply: no sources of its own
                url = project.mirror if project.mirror and "://" in project.mirror else "URL"
                exc.hints = [f"a node fills its mirror from the fleet's store: `frt mirror {args.dir} --from {url}`"]
            raise
        finally:
            bar.close()
        d = rep.to_dict()
        d["model"] = model
        reports.append(d)
        lines.append(f"{model}: {len(rep.packages)} package(s) into {args.dir}: {rep.fetched} blob(s) fetched, "
                     f"{rep.present} already present and verified, {rep.bytes} bytes written")
        for p in rep.packages:
            lines.append(f"  {p['repo']} @ {short_digest(p['snapshot'])}  {', '.join(p['variants'])}")
        if lock.release:
            from ..distribution.release_files import cache_folder  # noqa: PLC0415

            d["release"] = {k: lock.release[k] for k in ("repo", "version", "commit")}
            d["release"]["files"] = sorted(lock.release.get("files", {}))
            lines.append(f"  release {lock.release['repo']} @ {lock.release['commit'][:12]}: "
                         f"{len(lock.release.get('files', {}))} file(s) in {cache_folder(lock.release['repo'])}/ "
                         f"(refs/v{lock.release['version']})")
        for sk in rep.skipped:
            lines.append(f"  skipped {sk['repo']}: {sk['reason']}")
    doc = {"ok": True, "dir": str(args.dir), "models": reports}
    if args.from_url:
        doc["from"] = store.url
    emit(args, doc, "\n".join(lines))
    return 0
