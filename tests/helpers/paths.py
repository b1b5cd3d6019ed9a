"""The folders tests refer to: use these instead of computing them from ``__file__``."""

from __future__ import annotations

import importlib.util
from pathlib import Path

HELPERS = Path(__file__).resolve().parent  # this package; also the toy host's folder (``toyhost:build_host``)
TESTS = HELPERS.parent
DATA = TESTS / "data"  # test vectors (real Sigstore bundles, kernels' arch lists; see its READMEs)
ROOT = TESTS.parent  # the checkout
BUNDLED = ROOT  # the repository's own demo project (manifests/, lockfiles/, receipts/, packages/)
PKG = ROOT / "frt_dist"  # the package's sources in the checkout
# the folder ``frt_dist`` is imported from (found, not imported): a subprocess's PYTHONPATH, so it runs the same code
SRC = Path(importlib.util.find_spec("frt_dist").origin).resolve().parents[1]
