"""What ``frt mirror`` and ``frt publish`` share: the selection flags and what they select (the
lockfiles, then variants or machines), the progress callback and the interrupt report."""

from __future__ import annotations

import argparse
import sys

from .. import settings
from ..errors import FrtError, UsageError
from .context import find_lock, hardware_from_args
from .parser import hardware_flags
from .render import print_json

VERBOSE = "also each file as it is written (or sent), on stderr"


def selection_flags(s) -> None:
    """What ``frt mirror`` and ``frt publish`` select: the lockfile(s), then variants or machines."""
    s.add_argument("--model", metavar="M", help="one model's lockfile (default: every lockfile of the project)")
    s.add_argument("--lockfile", metavar="FILE", help="this lockfile only (its model, under its own name), as FRT_LOCK")
    s.add_argument("--variant", action="append", metavar="V",
                   help="a locked variant to select (repeatable); default: this system's")
    s.add_argument("--all-variants", action="store_true", help="every locked variant of every package")
    hardware_flags(s)
    s.add_argument("--machine", action="append", metavar="KEY=V,...",
                   help="a machine to select for (repeatable): the hardware flags as KEY=VALUE pairs, software "
                        "pairs joined by ';', e.g. arch=9.0,device-class=h200,software=torch=2.13;cuda=12.8")
    s.add_argument("--cells", action="store_true",
                   help="every variant that any locked cell selects, on the facts its receipt records")


def selection(args, project) -> tuple[dict, dict]:
    """What ``frt mirror`` and ``frt publish`` take: ``{model: Lockfile}`` (the lockfile named, else the
    project's, else one model's) and the selection (``select_for_mirror``'s keywords), every model's
    selection checked before anything is written or sent."""
    from ..distribution.mirror import select_for_mirror  # noqa: PLC0415

    if args.lockfile or settings.value("FRT_LOCK"):  # the lockfile named is the one model mirrored, its own name
        lock = find_lock(project, args.model, args.lockfile)
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
    for lock in locks.values():  # every model's selection is checked before anything is written
        select_for_mirror(lock, **select)
    return locks, select


def file_progress(args, bar):
    """The progress callback of a mirror or publish run: the bar, and each file under ``-v``."""

    def progress(ev: dict) -> None:
        if ev.get("event") == "file":
            if args.verbose and not args.quiet:
                print(f"  {ev.get('repo')} {ev.get('path')}", file=sys.stderr)
            bar.update(ev.get("bytes") or 0)
            bar.set_postfix_str(f"{ev.get('repo')} {ev.get('path')}")

    return progress


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


def interrupted(args, msg: str, hint: str) -> int:
    """Ctrl-C in a mirror or publish run: one error (JSON under --json) saying what stays, exit 130."""
    if getattr(args, "json", False):
        print_json({"error": msg, "hints": [hint], "exit": 130, "reasons": []})
    else:
        print(f"error: {msg}\nhint: {hint}", file=sys.stderr)
    return 130
