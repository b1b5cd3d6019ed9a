"""The ``frt`` console script's target (``[project.scripts]``); the entry point is ``frt_dist.cli.entry``."""

from .cli.entry import main

__all__ = ["main"]
