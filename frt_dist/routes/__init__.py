"""Routes: from a lockfile's ranked evidence to decisions.

- ``resolver``: (lockfile, hardware, precision, phase band, policy) → one
  ``Decision`` (a route, ``host``, or a refusal with one reason per route); a
  pure function with a no-op ``Reporter`` for explanations;
- ``matrix``: the cell × route state matrix that ``frt matrix`` renders.

Neither imports torch or `kernels`; neither measures anything.
"""

from __future__ import annotations

from .resolver import (
    ACCEPTABLE,
    FALLBACKS,
    Decision,
    Reason,
    Reporter,
    resolve,
    resolve_all,
)

__all__ = ["resolve", "resolve_all", "Decision", "Reason", "Reporter", "FALLBACKS", "ACCEPTABLE"]
