"""``frt mirror``: fill a folder with every locked file a selection needs (docs/reference.md#frt-mirror)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .. import settings
from ..base.canonical import short_digest
from ..errors import FrtError, UsageError
from .context import find_lock, find_project, hardware_from_args
from .parser import common_options, hardware_flags
from .render import deprecated, emit, print_json, progress_bar


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
    s.add_argument("dir", metavar="DIR", help="the mirror folder (a hub-cache layout; created when needed); an "
                                              "object-store URL here publishes (deprecated: `frt publish URL`)")
    s.add_argument("--from", dest="from_url", metavar="URL",
                   help="fill DIR from this object store (s3://bucket/prefix, oci://registry/repo[:tag|@sha256:…], "
                        "file:///path) instead of the "
                        "packages' own sources; the project's lockfile decides what and verifies every byte")
    s.add_argument("--repair", action="store_true", help="with an object-store URL (deprecated): as `frt publish --repair`")
    selection_flags(s)


VERBOSE = "also each file as it is written (or sent), on stderr"


def selection_flags(s) -> None:
    """What ``frt mirror`` and ``frt publish`` select: the lockfile(s), then variants or machines."""
    s.add_argument("--model", help="one model's lockfile (default: every lockfile of the project)")
    s.add_argument("--lockfile", metavar="FILE", help="this lockfile only (its model, under its own name), as FRT_LOCK")
    s.add_argument("--variant", action="append", help="a variant to mirror (repeatable); default: this system's")
    s.add_argument("--all-variants", action="store_true", help="every locked variant of every package")
    hardware_flags(s)
    s.add_argument("--machine", action="append", metavar="KEY=V,...",
                   help="a machine to mirror for (repeatable): the hardware flags as KEY=VALUE pairs, software "
                        "pairs joined by ';', e.g. arch=9.0,device-class=h200,software=torch=2.13;cuda=12.8")
    s.add_argument("--cells", action="store_true",
                   help="every variant that any locked cell selects, on the facts its receipt records")


def run(args) -> int:
    from ..distribution.objstore import is_url, open_store  # noqa: PLC0415

    publish = is_url(args.dir)
    if publish and not getattr(args, "publishing", False):
        deprecated("frt mirror URL", "frt publish URL")
    if publish and args.from_url:
        raise UsageError(f"frt mirror {args.dir} --from {args.from_url}: publish to a store, or fill a folder "
                         "from one; not both", hints=["frt mirror DIR --from URL fills DIR; frt publish URL publishes"])
    if args.repair and not publish:
        raise UsageError("--repair applies when publishing to an object store (frt mirror s3://... --repair)")
    project = find_project(args)  # no project here: said before any store is opened or folder made
    store = (open_store(args.dir) if publish else open_store(args.from_url, reading=True)) if (publish or args.from_url) \
        else None
    if store is not None:
        with store:
            return _cmd_mirror(args, project, store, publish)
    return _cmd_mirror(args, project, None, False)


def _cmd_mirror(args, project, store, publish: bool) -> int:
    from ..distribution.mirror import mirror_lock, select_for_mirror  # noqa: PLC0415
    from ..errors import KernelUnavailable  # noqa: PLC0415

    if args.lockfile or settings.value("FRT_LOCK"):  # the lockfile named is the one model mirrored, its own name
        lock = find_lock(project, args.model or "MODEL", args.lockfile)
        models, locks = [lock.model], {lock.model: lock}
    else:
        models = [args.model] if args.model is not None else [p.stem for p in sorted(project.lockfiles_dir.glob("*.lock"))]
        locks = None
    if not models:
        raise FrtError(f"no lockfiles in {project.rel(project.lockfiles_dir)}",  # a "no": exit 1
                       hints=["copy the lockfiles here from the project that locks them" if project.is_node
                              else "frt lock"])
    machines = _mirror_machines(args)
    select = {"variants": args.variant, "all_variants": args.all_variants, "machines": machines, "cells": args.cells}
    if not any(select.values()):
        select["machines"] = [hardware_from_args(args)]  # this machine, detected: checked like a declared one
    if locks is None:
        locks = {model: find_lock(project, model, None) for model in models}
    if publish and getattr(getattr(store, "loc", None), "scheme", "") == "oci" and len(locks) > 1:  # one lock per reference
        raise UsageError(f"{store.url}: a registry reference holds one lock's artefact, and this project has "
                         f"{len(locks)} lockfiles ({', '.join(sorted(locks))})",
                         hints=[f"publish each model to its own tag: frt publish {store.loc.repo_url}:MODEL --model MODEL"])
    for lock in locks.values():  # every model's selection is checked before anything is written
        select_for_mirror(lock, **select)
    reports, lines = [], []
    for model, lock in locks.items():
        bar = progress_bar(args, total=None, desc=f"mirror {model}", unit="B", unit_scale=True, unit_divisor=1024)

        def progress(ev: dict, bar=bar) -> None:
            if ev.get("event") == "file":
                if args.verbose and not args.quiet:
                    print(f"  {ev.get('repo')} {ev.get('path')}", file=sys.stderr)
                bar.update(ev.get("bytes") or 0)
                bar.set_postfix_str(f"{ev.get('repo')} {ev.get('path')}")

        try:
            if publish:
                from ..distribution.fleet import publish_lock  # noqa: PLC0415

                pub = publish_lock(lock, store, **select, progress=progress, root=project.root, repair=args.repair)
            else:
                rep = mirror_lock(lock, Path(args.dir), **select, progress=progress, root=project.root, source=store)
        except KeyboardInterrupt:  # not "nothing was written": what was verified stays (item 21.4)
            if publish:
                return _publish_interrupted(args)
            return _mirror_interrupted(args)
        except KernelUnavailable as exc:
            if project.is_node and store is None:  # a file this node could not supply: no sources of its own
                url = project.mirror if project.mirror and "://" in project.mirror else "URL"
                exc.hints = [f"a node fills its mirror from the fleet's store: `frt mirror {args.dir} --from {url}`"]
            raise
        finally:
            bar.close()
        if publish:
            reports.append(pub.to_dict())
            lines.append(f"{model}: {len(pub.packages)} package(s) to {store.url}: {pub.uploaded} object(s) uploaded, "
                         f"{pub.present} already present ({pub.checked['checksum']} by the store's SHA-256 checksum, "
                         f"{pub.checked['download']} downloaded and hashed), {pub.bytes} bytes sent; lockfile "
                         f"{pub.lockfile} last")
            if lock.release:
                lines.append(f"  release {lock.release['repo']} @ {lock.release['commit'][:12]}: "
                             f"{len(lock.release.get('files', {}))} file(s) by their sha256, {len(pub.release)} uploaded")
            if pub.artefact is not None:  # a registry: the manifest to pin nodes to
                a = pub.artefact
                lines.append(f"  artefact {a['reference']} ({a['layers']} layer(s), tagged {a['tag']}; "
                             f"{len(a['referrers'])} signature referrer(s))")
            for r in pub.replaced:
                lines.append(f"  replaced {r['key']} ({r['repo']} {r['path']}): {r['reason']}")
            for sk in pub.skipped:
                lines.append(f"  skipped {sk['repo']}: {sk['reason']}")
            continue
        d = rep.to_dict()
        d["model"] = model
        reports.append(d)
        lines.append(f"{model}: {len(rep.packages)} package(s) into {args.dir}: {rep.fetched} blob(s) fetched, "
                     f"{rep.present} already present and verified, {rep.bytes} bytes written")
        for p in rep.packages:
            lines.append(f"  {p['repo']} @ {short_digest(p['snapshot'])}  {', '.join(p['variants'])}")
        if lock.release:
            from ..release.consume import cache_folder  # noqa: PLC0415

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


class _MachineParser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(f"--machine: {message}")


def _machine_parser() -> _MachineParser:
    """The resolve hardware flags alone (``hardware_flags``), for one ``--machine`` value."""
    flags = _MachineParser(prog="--machine", add_help=False)
    hardware_flags(flags)
    return flags


def _machine(spec: str):
    """One ``--machine`` value as a ``Hardware``: the resolve hardware flags as KEY=VALUE
    pairs (``arch=9.0,device-class=h200,software=torch=2.13;cuda=12.8``), read by a parser
    built from ``hardware_flags`` and checked by ``hardware_from_args``, so both forms read alike."""
    flags = _machine_parser()
    keys = [o[2:] for o in flags._option_string_actions if o.startswith("--") and o != "--detect"]
    argv, seen = [], set()
    for part in (p.strip() for p in spec.split(",")):
        key, sep, value = part.partition("=")
        if not sep or key not in keys or key in seen:
            why = "repeats" if key in seen else "is not KEY=VALUE with KEY one of " + ", ".join(keys)
            raise UsageError(f"--machine {spec!r}: {part!r} {why}",
                             hints=["e.g. --machine arch=9.0,device-class=h200,software=torch=2.13;cuda=12.8"])
        seen.add(key)
        argv += [f"--{key}", value.strip().replace(";", ",")]
    ns = flags.parse_args(argv)
    if not (ns.arch and ns.device_class):
        raise UsageError(f"--machine {spec!r}: a machine needs arch= and device-class=",
                         hints=["e.g. --machine arch=9.0,device-class=h200,software=torch=2.13;cuda=12.8"])
    return hardware_from_args(ns)


def _mirror_machines(args) -> list | None:
    """The machines ``frt mirror`` was told about: the hardware flags (one), then each --machine."""
    hw_dests = {a.dest for a in _machine_parser()._actions}
    machines = [hardware_from_args(args)] if any(getattr(args, d, None) for d in hw_dests) else []
    return machines + [_machine(spec) for spec in args.machine or ()] or None


def _interrupted(args, msg: str, hint: str) -> int:
    """Ctrl-C in a mirror run: one error (JSON under --json) saying what stays, exit 130."""
    if getattr(args, "json", False):
        print_json({"error": msg, "hints": [hint], "exit": 130, "reasons": []})
    else:
        print(f"error: {msg}\nhint: {hint}", file=sys.stderr)
    return 130


def _publish_interrupted(args) -> int:
    return _interrupted(args, f"interrupted; the objects already sent stay in {args.dir}, and no lockfile was published "
                              "for the model being sent, so no reader takes it as a release",
                        f"run the same `frt {'publish' if getattr(args, 'publishing', False) else 'mirror'}` again: "
                        "it skips what is already there")


def _mirror_interrupted(args) -> int:
    return _interrupted(args, f"interrupted; the files already verified stay in {args.dir} (this run's temporary files "
                              "are removed, or by the next run if it was killed)",
                        "run the same `frt mirror` again: it resumes, fetching only what is missing")
