"""The folders tests refer to."""

from __future__ import annotations

from pathlib import Path

HELPERS = Path(__file__).resolve().parent  # this package; also the toy host's folder (``toyhost:build_host``)
TESTS = HELPERS.parent
ROOT = TESTS.parent  # the checkout
BUNDLED = ROOT  # the repository's own demo project (manifests/, lockfiles/, receipts/, packages/)
