"""Routes: from a lockfile's ranked evidence to decisions.

- ``resolver``: (lockfile, hardware, precision, phase band, policy) → one
  ``Decision`` (a route, ``host``, or a refusal with one reason per route); a
  pure function with a no-op ``Reporter`` for explanations;
- ``matrix``: the cell × route state matrix that ``frt matrix`` renders.

Neither imports torch or `kernels`; neither measures anything.
"""

from __future__ import annotations

__all__ = ["resolve", "resolve_all", "Decision", "Reason", "Reporter", "FALLBACKS", "ACCEPTABLE"]


def __getattr__(name: str):  # the resolver's names on first use: importing the package imports nothing
    if name in __all__:
        from . import resolver  # noqa: PLC0415

        return getattr(resolver, name)
    raise AttributeError(f"module 'frt_dist.routes' has no attribute {name!r}")
