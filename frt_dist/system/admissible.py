"""The one admissibility rule (docs/reference.md#admissibility): may a locked variant stand for a cell's hardware?

A receipt measured a route with one locked variant per package. The receipt can
only stand for its cell when every one of those variants would run there: a
receipt "certified on an L40S" for a build that declares no 8.9 kernel is
evidence about nothing the system would load. ``frt lock`` rejects such a receipt
(``[[rejected-receipts]]``), ``frt verify`` re-derives that, the resolver refuses a
package whose selected variant fails the same test, and ``frt matrix`` leaves such
a receipt out, so the matrix's winner is what resolve decides.

The rule for one variant on ``(backend, arch)``:

- the variant is a build for that backend (its metadata's ``backend.type``), or a
  ``torch-universal`` build (pure Python: it runs on every backend, whatever type
  its metadata names);
- its declared archs admit the arch (``hardware.arch_admits``: CUDA capability
  rules, exact gfx for ROCm). A CPU cell is admitted by a CPU (or universal) build
  that declares no archs: a CPU build has no device code to restrict, and an arch
  list there is no claim frt can check, so it is not taken as evidence of support.

Lower than both ``locker`` and ``routes`` (it imports only ``hardware`` and
``variants``), so each uses it without an import cycle.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from .hardware import arch_admits, parse_cuda_arch
from .variants import parse_variant

__all__ = ["variant_problem", "admission_problems", "fmt_archs"]


def _arch_key(entry: str) -> tuple:
    """Numeric order for printing: 8.0 < 9.0 < 10.0 < 12.0a, then gfx names, then the rest."""
    parsed = parse_cuda_arch(entry)
    return (0, *parsed[:2], entry) if parsed else (1 if entry.startswith("gfx") else 2, 0, 0, entry)


def fmt_archs(archs: Iterable[str]) -> str:
    """Declared archs in numeric order, comma-separated (``8.9,11.0a,12.0a``)."""
    return ",".join(sorted(archs, key=_arch_key))


def _universal(name: str) -> bool:
    p = parse_variant(name)
    return p is not None and p.kind == "noarch" and p.backend == "universal"


def variant_problem(variant, backend: str, arch: str) -> str | None:
    """``None`` when ``variant`` (a ``LockedVariant``) runs on ``(backend, arch)``; else what it
    declares that rules the device out (``is a cuda build``, ``declares 8.9,12.0a``), a phrase
    callers put after the package's name."""
    if variant.backend != backend and not _universal(variant.name):
        return f"is a {variant.backend} build"
    if not arch_admits(variant.archs, arch):
        return f"declares {fmt_archs(variant.archs) or 'no archs'}"
    return None


def admission_problems(packages: Mapping, cell: Mapping) -> list[str]:
    """Why the receipt ``cell`` cannot stand for its hardware under the locked ``packages``
    (``repo -> LockedPackage``): one reason per measured impl whose locked variant is missing or
    does not admit the cell's backend and arch. ``[]`` when the cell is admissible."""
    hw = cell["hardware"]
    out = []
    for seam, it in sorted(cell["impls"].items()):
        pkg = packages.get(it["package"])
        variant = pkg.variants.get(it["variant"]) if pkg is not None else None
        if variant is None:
            out.append(f"cell.impls.{seam}: variant {it['variant']!r} of {it['package']} is not locked")
            continue
        why = variant_problem(variant, hw["backend"], hw["arch"])
        if why:
            out.append(f"cell.impls.{seam}: package {it['package']} variant {it['variant']} {why}; "
                       f"the cell's {hw['backend']} arch {hw['arch']} is not admitted")
    return out
