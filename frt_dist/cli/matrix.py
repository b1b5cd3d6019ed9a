"""``frt matrix``: the cell x route state matrix (docs/reference.md#frt-matrix)."""

from __future__ import annotations

import sys
from pathlib import Path

from ..errors import UsageError
from .context import find_project
from .parser import common_options, output_file_arg
from .render import write_output


def add_parser(sub) -> None:
    """``frt matrix``'s flags."""
    s = sub.add_parser("matrix", help="render the cell x route state matrix from the lockfiles")
    common_options(s)
    s.add_argument("--model", metavar="M", help="one model's lockfile (default: every lockfile of the project)")
    s.add_argument("--format", choices=["text", "md", "html"],
                   help="an aligned plain-text table (the default on a terminal), Markdown (the default into a "
                        "pipe or -o FILE: a review's format) or a self-contained HTML page; --json gives the JSON "
                        "document")
    s.add_argument("-o", "--output", metavar="FILE", type=output_file_arg, help="write to FILE instead of stdout")


def run(args) -> int:
    """The matrix as text (a terminal), Markdown (a pipe, ``-o FILE``), HTML or (``--json``) the JSON
    document, on stdout or into ``-o FILE``."""
    from ..routes.matrix import render_matrix  # noqa: PLC0415

    if args.json and args.format:
        raise UsageError(f"--json and --format {args.format} each choose the output; give one")
    project = find_project(args)
    fmt = "json" if args.json else args.format or ("text" if not args.output and sys.stdout.isatty() else "md")
    text = render_matrix(project, model=args.model, fmt=fmt)
    if args.output:
        write_output(Path(args.output), text.encode("utf-8"))
    else:
        sys.stdout.write(text)
    return 0
