"""Re-measure the bundled demo on this machine and refresh its receipts and lockfile.

Qualifies both demo routes in a temporary copy of the bundled project (the
bundled tree is read-only to `frt`), locks, then copies the receipts and the
lockfile back into the repository's demo project (lockfiles/, receipts/) and checks `frt lock --check` there.
Run it when a demo kernel, the manifest or the reference machine changes:

    .venv/bin/python scripts/refresh_bundled.py [--rounds N]

With ``--lock-only`` it keeps the committed receipts and only re-locks (for a
change in how lockfiles are written, when nothing was measured anew).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUNDLED = ROOT
MODEL = "demo-decoder"


def frt(*args, cwd):
    print("$ frt " + " ".join(args), flush=True)
    subprocess.run([sys.executable, "-m", "frt_dist.cli", *args], cwd=cwd, check=True,
                   env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=None, help="default: the manifest's [qualify] rounds")
    ap.add_argument("--lock-only", action="store_true", help="keep the committed receipts; only re-lock")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="frt-refresh-"))
    for d in ("manifests", "packages") + (("receipts",) if args.lock_only else ()):
        shutil.copytree(BUNDLED / d, work / d, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    if not args.lock_only:
        (work / "receipts").mkdir()
        frt("lock", cwd=work)
        for route in ("fused", "split"):
            extra = ["--rounds", str(args.rounds)] if args.rounds else []
            frt("qualify", "--model", MODEL, "--route", route, *extra, cwd=work)
    frt("lock", cwd=work)
    if not args.lock_only:
        dst = BUNDLED / "receipts" / MODEL
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(work / "receipts" / MODEL, dst)
    (BUNDLED / "lockfiles").mkdir(exist_ok=True)
    shutil.copy2(work / "lockfiles" / f"{MODEL}.lock", BUNDLED / "lockfiles" / f"{MODEL}.lock")
    frt("lock", "--check", cwd=ROOT)
    shutil.rmtree(work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
