"""``frt completion bash|zsh|fish``: a shell completion script for ``frt`` on stdout
(docs/reference.md#frt-completion). bash and zsh come from ``shtab`` (the ``completion`` extra),
which reads the parser itself; fish is written here from the same parser."""

from __future__ import annotations

import argparse
import sys

from ..errors import UsageError

SHELLS = ("bash", "zsh", "fish")


def add_parser(sub) -> None:
    """``frt completion``'s flags."""
    s = sub.add_parser("completion", help="print a shell completion script (bash, zsh, fish)",
                       description="Print a completion script for SHELL on stdout. bash and zsh scripts are made "
                                   "by shtab (pip install 'frt-dist[completion]'); fish needs nothing more.",
                       epilog="example: frt completion bash > ~/.local/share/bash-completion/completions/frt; "
                              "frt completion zsh > \"${fpath[1]}/_frt\"; "
                              "frt completion fish > ~/.config/fish/completions/frt.fish")
    s.add_argument("shell", metavar="SHELL", nargs="?", choices=SHELLS, help="bash, zsh or fish")


def run(args) -> int:
    from .parser import build_parser  # noqa: PLC0415

    if args.shell is None:
        raise UsageError("frt completion: name the shell", hints=["frt completion bash (or zsh, fish)"])
    parser = build_parser()
    if args.shell == "fish":
        sys.stdout.write(fish_script(parser))
        return 0
    try:
        import shtab  # noqa: PLC0415
    except ImportError:
        raise UsageError(f"frt completion {args.shell} needs shtab, which is not installed",
                         hints=["pip install 'frt-dist[completion]'"]) from None
    sys.stdout.write(shtab.complete(parser, shell=args.shell))
    return 0


def _subcommands(parser: argparse.ArgumentParser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {c.dest: c.help or "" for c in action._choices_actions}
            for name, sub in action.choices.items():
                yield name, helps.get(name, ""), sub


def _quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _options(parser: argparse.ArgumentParser, condition: str) -> list[str]:
    out = []
    for a in parser._actions:
        if not a.option_strings or a.help == argparse.SUPPRESS:
            continue
        flags = "".join(f" -l {o[2:]}" if o.startswith("--") else f" -s {o[1:]}" for o in a.option_strings)
        takes = a.nargs != 0
        value = f" -xa {_quote(' '.join(a.choices))}" if a.choices else " -r" if takes else ""
        desc = (a.help or "").split(". ")[0].split("; ")[0][:80]
        out.append(f"complete -c frt -n {_quote(condition)}{flags}{value} -d {_quote(desc)}")
    return out


def fish_script(parser: argparse.ArgumentParser) -> str:
    """Completions for fish: each subcommand (and its actions), then its flags and their choices."""
    lines = ["# fish completion for frt (frt completion fish)", "complete -c frt -f"]
    top = "__fish_use_subcommand"
    lines += _options(parser, top)
    for name, help_, sub in _subcommands(parser):
        lines.append(f"complete -c frt -n {top} -a {name} -d {_quote(help_)}")
        here = f"__fish_seen_subcommand_from {name}"
        nested = list(_subcommands(sub))
        for action, ahelp, asub in nested:
            lines.append(f"complete -c frt -n {_quote(here)} -a {action} -d {_quote(ahelp)}")
            lines += _options(asub, f"{here}; and __fish_seen_subcommand_from {action}")
        if not nested:
            lines += _options(sub, here)
        if any(not a.option_strings and a.metavar in ("DIR", "PATH", "RECEIPT", "FILE") for a in sub._actions):
            lines.append(f"complete -c frt -n {_quote(here)} -F")
    return "\n".join(lines) + "\n"
