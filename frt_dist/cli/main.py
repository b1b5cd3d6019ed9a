"""The ``frt`` command: ``main(argv)`` parses, runs one command, and turns what it raised into an
exit code (docs/reference.md#commands, docs/reference.md#exit-codes).

Exit codes: 0 success; 1 a "no" (refused route, stale lock, failed verification, refused package);
2 bad invocation or invalid input. Errors go to stderr as ``error: ...`` then ``hint: ...`` lines
(``render``). Every reporting command takes ``--json``. The parser is ``parser``; each command is its
own module (``cli/lock.py``, ``cli/resolve.py``, ...), imported only when that command runs, so
``frt resolve`` loads none of the others. Commands import torch/kernels only when they run kernels
(``mirror`` of Hub packages, ``qualify``).
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

from ..errors import FrtError, UsageError
from .parser import ARGV, COMMAND_NAMES, GLOBAL_FLAGS, build_parser, named_command
from .render import DEPRECATED, interrupted, os_error, report, say_deprecated, show_warnings

__all__ = ["main"]

_named_command = named_command  # the name the start-up tests know


def _command(name: str):
    """``frt NAME``'s ``run(args)``, its module imported when the command runs (not at start-up)."""

    def run(args) -> int:
        return importlib.import_module(f"{__package__}.{name}").run(args)

    run.__name__ = f"cmd_{name}"
    return run


# name -> run(args): every command, each a module of this package (tests replace an entry)
COMMANDS = {name: _command(name) for name in COMMAND_NAMES}



def main(argv: list[str] | None = None) -> int:
    """Run one ``frt`` command; the exit code. A Ctrl-C anywhere, start-up included, ends with
    exit 130 and one line; an ``OSError`` no command turned into an ``FrtError`` (a full disk, a
    read-only folder, a denied permission) is ``error: <path>: <cause>`` (exit 2; another OSError
    exit 1), never a traceback. Any other exception is a defect and keeps its traceback."""
    try:
        return _main(argv)
    except KeyboardInterrupt:
        return interrupted()


def _main(argv: list[str] | None) -> int:
    import warnings  # noqa: PLC0415

    # torch warns once when numpy is absent; frt never hands tensors to numpy
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
    ARGV[:] = list(sys.argv[1:] if argv is None else argv)
    DEPRECATED.clear()
    parser = build_parser(only=named_command(ARGV))
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help(sys.stderr)
        return 2
    with warnings.catch_warnings():  # what the command changes in warnings' state is undone after it
        try:
            return _run(args)
        finally:
            say_deprecated()


def _run(args) -> int:
    try:
        _global_options(args)
        show_warnings(args)
        if args.command in ("lock", "mirror", "release", "init", "publish"):
            from ..distribution.hub import configure_timeout, end_deadline  # noqa: PLC0415

            configure_timeout()  # FRT_HUB_TIMEOUT per request, FRT_HUB_DEADLINE for all of this command's
            try:
                return COMMANDS[args.command](args)
            finally:
                end_deadline()
        return COMMANDS[args.command](args)
    except OSError as exc:
        if isinstance(exc, BrokenPipeError):  # `frt ... | head`: the reader left; end quietly
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())  # Python's own flush at exit must not fail again
            return 0
        return report(args, os_error(exc, args.command))
    except FrtError as exc:
        return report(args, exc)


_LACKS = {"demo": "uses no project", "quiet": "prints only its output", "verbose": "has nothing more to say",
          "json": "prints no JSON document"}


def _global_options(args) -> None:
    """``frt --project DIR <command>``, ``frt --demo|-q|-v|--json <command>``: the global option stands
    for the subcommand's own; one the command does not have is a usage error (``frt -v export``)."""
    for dest, own in GLOBAL_FLAGS.items():
        if getattr(args, dest, False):
            if not hasattr(args, own):  # e.g. init, digest, sign: no project; completion: no JSON
                args.json = getattr(args, "json", False) or args.global_json  # the error as JSON under --json
                flag = {"demo": "--demo", "quiet": "-q", "verbose": "-v", "json": "--json"}[own]
                raise UsageError(f"{flag}: frt {args.command} {_LACKS[own]}")
            setattr(args, own, True)
    given = getattr(args, "global_project", None)
    if given is None:
        return
    if args.command == "init":  # init's folder is its argument: `frt --project DIR init` creates DIR
        if args.dir not in (".", given):
            raise UsageError(f"frt --project {given} init {args.dir}: two different folders; give one")
        args.dir = given
        return
    own = getattr(args, "project", None)
    if own is not None and Path(own).resolve() != Path(given).resolve():
        raise UsageError(f"--project {given} (before the command) and --project {own} (after it) differ; give one")
    args.project = given


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
