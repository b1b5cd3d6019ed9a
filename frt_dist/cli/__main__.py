"""``python -m frt_dist.cli``: the ``frt`` command."""

import sys

from .._entry import main

sys.exit(main())
