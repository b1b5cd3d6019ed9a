"""The ``frt`` argument parser: the tree of subcommands (each command module adds its own flags),
the options they share, and argparse's errors in frt's one-line form with suggestions."""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from .render import print_json

# every command, in the order `frt --help` lists them; each is the module cli/<name>.py, with
# add_parser(sub) (its flags) and run(args) (the command)
COMMAND_NAMES = ("lock", "export", "resolve", "verify", "mirror", "publish", "receipts", "qualify", "sign", "init",
                 "release", "digest", "matrix", "completion")

ARGV: list[str] = []  # what main() parses: the parser's errors look at it for --json and suggestions


class Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse exits 2 too; keep frt's one-line `error:` form
        hints = _suggestions(self, message)
        if "--json" in ARGV:
            print_json({"error": message, "hints": hints, "exit": 2})
        else:
            self.print_usage(sys.stderr)
            print(f"error: {message}", file=sys.stderr)
            for h in hints:
                print(f"hint: {h}", file=sys.stderr)
        raise SystemExit(2)


def _suggestions(parser: argparse.ArgumentParser, message: str) -> list[str]:
    """``did you mean ...`` for a mistyped subcommand, flag or choice (like git and uv)."""
    import difflib  # noqa: PLC0415
    import re  # noqa: PLC0415

    m = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
    if m:
        choices = re.findall(r"'([^']*)'", m.group(2))
        close = difflib.get_close_matches(m.group(1), choices, n=1, cutoff=0.5)
        return [f"did you mean {close[0]!r}?"] if close else []
    options = set(parser._option_string_actions)
    for action in parser._actions:  # the subcommand's own flags, when one was named
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                if name in ARGV:
                    options |= set(sub._option_string_actions)
    out = []
    for word in ARGV:  # every flag given that the command does not know (argparse may name another error first)
        flag = word.split("=", 1)[0]
        if flag.startswith("-") and flag not in options and not flag.lstrip("-").replace(".", "").isdigit():
            close = difflib.get_close_matches(flag, sorted(options), n=1, cutoff=0.6)
            if close:
                out.append(f"{flag}: did you mean {close[0]}?")
    return out


def count_arg(text: str) -> int:
    """An argparse type: a whole number >= 1 (``--rounds 0`` is a usage error, not an empty run)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a number >= 1, got {n}")
    return n


def output_file_arg(text: str) -> str:
    """An argparse type for ``-o FILE``: its folder must exist (no silent ``mkdir -p``)."""
    parent = Path(text).expanduser().resolve().parent
    if not parent.is_dir():
        raise argparse.ArgumentTypeError(f"folder {parent} does not exist")
    return text


def common_options(p: argparse.ArgumentParser, verbose: str | None = None) -> None:
    """``--project``, ``--demo`` and the output options of a command that works on a project."""
    p.add_argument("--project", metavar="DIR",
                   help="project root (default: FRT_PROJECT, else the project or node at or "
                        "above this folder, else FRT_HOME; none is exit 2)")
    p.add_argument("--demo", action="store_true", help="use the bundled demo project (read-only)")
    output_options(p, verbose)


def output_options(p: argparse.ArgumentParser, verbose: str | None = None) -> None:
    """``--json``, ``-q/--quiet`` and, where the command has more to say, ``-v/--verbose``
    (``verbose``: what it adds, for ``--help``)."""
    p.add_argument("-q", "--quiet", action="store_true", help="print nothing but errors")
    if verbose is not None:
        p.add_argument("-v", "--verbose", action="store_true", help=verbose)
    p.add_argument("--json", action="store_true", help="print one JSON document on stdout")


def hardware_flags(p: argparse.ArgumentParser) -> None:
    """The declared-hardware flags (any machine can be declared on any machine: docs/reference.md#hardware-and-detection);
    ``hardware_from_args(args)`` turns them into a ``Hardware``."""
    from ..system.hardware import BACKENDS, CPUS, OSES  # noqa: PLC0415

    g = p.add_argument_group("hardware (declared, or --detect)")
    g.add_argument("--arch", metavar="A",
                   help="compute capability as major.minor (12.0, not sm_120), gfx name "
                        "(gfx942), or the CPU (x86_64) on the cpu backend")
    g.add_argument("--device-class", metavar="D", help="device name, normalised: 'NVIDIA H200' is h200")
    g.add_argument("--backend", choices=BACKENDS, help="default: from --arch")
    g.add_argument("--cpu", metavar="CPU", help=f"the host CPU variants are built for: {', '.join(CPUS)} "
                                                "(default: this machine's)")
    g.add_argument("--os", metavar="OS", help=f"the host OS: {', '.join(OSES)} (default: this machine's)")
    g.add_argument("--software", metavar="K=V,...",
                   help="dispatch-relevant software, e.g. torch=2.13,cuda=12.8 (also rocm, xpu, cann, tvm-ffi, macos)")
    g.add_argument("--detect", action="store_true",
                   help="read the running system; the default when no hardware is declared")


# the global flags that take no value (``GLOBAL_FLAGS``: dest -> the subcommand's own dest)
GLOBAL_FLAGS = {"global_demo": "demo", "global_quiet": "quiet", "global_verbose": "verbose", "global_json": "json"}
_HEAD_FLAGS = ("--demo", "-q", "--quiet", "-v", "--verbose", "--json")


def named_command(argv: list[str]) -> str | None:
    """The subcommand ``argv`` runs when that is certain from its head (only global options
    before it), else ``None``: then every subcommand's flags are built, as for ``--help``."""
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--project":
            i += 2
        elif a.startswith("--project=") or a in _HEAD_FLAGS:
            i += 1
        else:
            return a if a in COMMAND_NAMES else None
    return None


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The ``frt`` parser. ``only``: build that one subcommand and its flags (start-up: building
    all of them costs more than `frt resolve`'s own work; the top-level usage then names ``COMMAND``,
    not the list); ``None``: all of them."""
    p = Parser(prog="frt", description="Distribution layer for qualified GPU kernel packages.")
    p.add_argument("--version", action="version", version=f"frt {__import__('frt_dist').__version__}")
    p.add_argument("--project", metavar="DIR", dest="global_project",
                   help="project root for the command that follows (`frt --project DIR lock`); the same as the "
                        "command's own --project")
    p.add_argument("--demo", action="store_true", dest="global_demo",
                   help="use the bundled demo project (read-only) for the command that follows (`frt --demo resolve`)")
    p.add_argument("-q", "--quiet", action="store_true", dest="global_quiet",
                   help="print nothing but errors (before the command or after it)")
    p.add_argument("-v", "--verbose", action="store_true", dest="global_verbose",
                   help="say more, on the commands that have more to say (before the command or after it)")
    p.add_argument("--json", action="store_true", dest="global_json",
                   help="print one JSON document on stdout, errors included (before the command or after it)")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)

    for name in COMMAND_NAMES:
        if only is None or name == only:
            importlib.import_module(f"{__package__}.{name}").add_parser(sub)
    return p
