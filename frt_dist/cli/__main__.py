"""``python -m frt_dist.cli``: the ``frt`` command."""

import sys

from .entry import main

sys.exit(main())
