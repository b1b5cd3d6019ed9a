"""The ``frt`` console script's entry point.

The script generated from ``[project.scripts]`` imports its function before calling it, so a
Ctrl-C while ``frt_dist.cli.main`` (and what it imports) loads would end in a ``KeyboardInterrupt``
traceback. This module imports nothing at load time and imports the CLI inside the guard:
an interrupt at start-up ends like one anywhere else, one line and exit 130.
"""

import sys


def main() -> int:
    try:
        from .cli.main import main as cli_main  # noqa: PLC0415
    except KeyboardInterrupt:
        print("error: interrupted; nothing was written", file=sys.stderr)
        return 130
    return cli_main()
