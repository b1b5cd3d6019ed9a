"""What a publisher signature costs `frt lock` (issue 19): per variant, and once per run.

Measured on the real production-signed test vector (tests/data/sigstore): ``verify_bundle``
(sigstore's offline verification under the pinned trusted root + frt's signer policy), against a
baseline measured in the same run: parsing the variant's ``metadata.json`` the way `frt lock` does
(``parse_variant_metadata``), which every locked variant already costs. Also the one-time costs:
importing sigstore (a fresh interpreter) and building the Verifier from the trusted-root file.

    PYTHONPATH=. .venv/bin/python bench/bench_publisher.py [--n 200]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DATA = ROOT / "tests" / "data" / "sigstore"


def timed(fn, n: int) -> float:
    """Median seconds of ``fn()`` over ``n`` runs."""
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200)
    n = ap.parse_args().n
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import sigstore.verify, sigstore.models"], check=True)
    import_s = time.perf_counter() - t
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    bare_s = time.perf_counter() - t

    from frt_dist.documents.metadata import parse_variant_metadata
    from frt_dist.documents.publisher_policy import SignerPolicy
    from frt_dist.provenance import publisher, sigstore_root

    wheel = (DATA / "rfc8785-0.1.2-py3-none-any.whl").read_bytes()
    bundle = (DATA / "rfc8785-0.1.2-py3-none-any.whl.sigstore").read_bytes()
    policy = SignerPolicy("https://github.com/trailofbits/rfc8785.py",
                          ("https://github.com/trailofbits/rfc8785.py/.github/workflows/release.yml",))
    meta = (ROOT / "packages/rmsnorm/build/torch-cpu/metadata.json").read_bytes()
    root = sigstore_root.trusted_root_path()

    def build():
        sigstore_root._verifier.cache_clear()
        sigstore_root.verifier(root)

    build_s = timed(build, max(5, n // 20))
    sigstore_root.verifier(root)
    verify_s = timed(lambda: publisher.verify_bundle(wheel, bundle, policy), n)
    parse_s = timed(lambda: parse_variant_metadata(meta, repo="frt-demo/rmsnorm", variant="torch-cpu"), n)
    print(f"n={n}")
    print(f"import sigstore (fresh interpreter, minus a bare one): {1000 * (import_s - bare_s):.0f} ms once per run")
    print(f"Verifier from the pinned trusted_root.json: {1000 * build_s:.1f} ms once per run")
    print(f"verify_bundle per signed variant: {1000 * verify_s:.2f} ms median")
    print(f"baseline, parse_variant_metadata per variant: {1000 * parse_s:.3f} ms median")
    print(f"ratio verify / parse: {verify_s / parse_s:.0f}x")


if __name__ == "__main__":
    main()
