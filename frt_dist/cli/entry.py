"""The ``frt`` command's entry point (``frt_dist._entry``, the console script's target, and
``python -m frt_dist.cli`` call it).

The script generated from ``[project.scripts]`` imports its function before calling it, so a
Ctrl-C while ``frt_dist.cli.main`` (and what it imports) loads would end in a ``KeyboardInterrupt``
traceback. This module imports nothing at load time and imports the CLI inside the guard: an
interrupt at start-up ends like one anywhere else, one line and exit 130 (``render.interrupted``).
"""


def main() -> int:
    try:
        from .main import main as cli_main  # noqa: PLC0415
    except KeyboardInterrupt:
        from .render import interrupted  # noqa: PLC0415

        return interrupted()
    return cli_main()
