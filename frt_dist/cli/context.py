"""What several commands share: the project, the model, the lockfile and the hardware in force."""

from __future__ import annotations

import os
import sys

from ..errors import FrtError, UsageError


def find_project(args):
    """The project in force (``Project.find``: outside any project, ``NoProject``, exit 2), said once
    on stderr: always for the bundled demo (``--demo``), whatever stdout is (under ``--json`` too, as
    stdout is the document), on a terminal for any other project; ``--quiet`` silences it.
    ``--json`` documents carry it as ``"project": {"root", "kind", "bundled"}`` (``emit``)."""
    from ..project.discover import Project  # noqa: PLC0415

    project = Project.find(explicit=args.project, demo=getattr(args, "demo", False))
    args.frt_project = project
    if not args.quiet:
        if project.read_only:
            print(f"note: using the bundled demo project (read-only) at {project.root} (--demo)", file=sys.stderr)
        elif sys.stderr.isatty() and not args.json:  # a person at a terminal sees which project
            print(f"note: {project.describe()}", file=sys.stderr)
    return project


def find_lock(project, model: str | None, explicit: str | None):
    """The lockfile in force: ``--lockfile``, else ``FRT_LOCK``, else the project's. ``model``: the
    model it must be the lockfile of; ``None`` takes the named lockfile's own model (a project's
    lockfile needs a model). A missing lockfile is a "no" (exit 1, docs/reference.md#exit-codes)
    wherever it was named; one that does not parse is bad input."""
    from ..documents.lockfile import Lockfile  # noqa: PLC0415
    from ..project.discover import env_lockfile  # noqa: PLC0415

    named = env_lockfile()  # a relative FRT_LOCK is taken against FRT_PROJECT when that is set
    for source, given, how in (("--lockfile", explicit, "--lockfile"),
                               ("FRT_LOCK", named and named[0], named and named[1])):
        if given:
            if not os.path.isfile(given):  # False, not OSError, for a name too long to stat
                raise FrtError(f"no lockfile at {given} ({how})",
                               hints=[f"frt lock --model {model or 'MODEL'}, or name an existing lockfile in {source}"])
            lock = Lockfile.read(given)
            if model is not None and lock.model != model:
                raise UsageError(f"{source} {given} is the lockfile of model {lock.model!r}, not {model!r}",
                                 hints=[f"--model {lock.model}, or name {model!r}'s lockfile in {source}"])
            return lock
    if model is None:  # pragma: no cover - the callers pass None only with a lockfile named
        raise UsageError("--model is needed to find the project's lockfile")
    path = project.existing_lockfile(model)
    return Lockfile.read(path, label=project.rel(path))


def the_model(project, args) -> str:
    """``--model``, or the project's only model when it was left out; several models (or none)
    is a usage error listing them."""
    if args.model is not None:
        return args.model
    models = project.models()
    if len(models) == 1:
        return models[0]
    if not models:
        raise UsageError(f"--model is needed: no manifests in {project.describe()} "
                         f"({project.rel(project.manifests_dir)}/)", hints=["`frt init` creates a project with one"])
    raise UsageError(f"--model is needed: {project.describe()} has {len(models)} models: {', '.join(models)}",
                     hints=[f"e.g. frt {args.command} --model {models[0]}"])


def hardware_from_args(args):
    """Declared hardware from the flags, else the running system. ``--detect`` with a declared
    fact (``--arch``, ``--device-class``, ``--cpu``, ``--os``) is a usage error: a detected
    machine is never partly overridden, so the cell it resolves is the one it is."""
    from ..system.hardware import Hardware, parse_software  # noqa: PLC0415

    declared = [flag for flag, value in (("--arch", args.arch), ("--device-class", args.device_class),
                                         ("--cpu", args.cpu), ("--os", args.os)) if value]
    if declared and args.detect:
        raise UsageError(f"--detect reads this machine; it cannot be combined with {', '.join(declared)}",
                         hints=["drop --detect to declare the machine, or drop the declared facts"])
    if declared:
        if not (args.arch and args.device_class):
            raise UsageError("declared hardware needs both --arch and --device-class",
                             hints=["e.g. --arch 12.0 --device-class rtx-5090 --software torch=2.13,cuda=12.8"])
        return Hardware.from_flags(arch=args.arch, device_class=args.device_class, backend=args.backend,
                                   software=parse_software(args.software or ""), cpu=args.cpu, os=args.os)
    hw = Hardware.detect()
    if args.software:
        from ..base.record import replace  # noqa: PLC0415 - dataclasses.replace, without importing dataclasses

        hw = replace(hw, software={**hw.software, **parse_software(args.software)})
    return hw
