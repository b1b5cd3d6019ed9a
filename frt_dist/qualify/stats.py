"""The statistics a speed claim rests on: the distribution-free interval of the median paired
speedup (``median_ci``), whether it decides against the gate (``ci_decision``), and the state the
recorded figures support (``speed_state``: the rules ``frt lock`` applies to them)."""

from __future__ import annotations

from ..documents.receipt import MIN_CERT_ROUNDS

__all__ = ["CI_LEVEL", "CI_NARROW", "median_ci", "ci_decision", "speed_state"]


CI_LEVEL = 0.95
"""The confidence level of the speedup interval a speed claim must clear."""
CI_NARROW = 0.05
"""Adaptive timing stops, undecided, once the interval is this narrow relative to the median:
the speedup is then known to within a few percent of the gate, and more rounds would not decide it."""
def median_ci(values, level: float = CI_LEVEL) -> dict | None:
    """The distribution-free confidence interval of the median of ``values`` (the sign-test
    interval): the ``k``-th smallest and ``k``-th largest value, ``k`` the largest count with
    ``P(Binomial(n, 1/2) < k) <= (1 - level) / 2``. Its coverage, ``1 - 2 P(Binomial(n, 1/2) < k)``,
    is at least ``level`` for any continuous distribution of independent rounds, whatever its
    shape (a bootstrap interval under-covers at the 10-30 rounds qualification runs). Exact and
    deterministic: no resampling, no seed. ``None`` under 6 values (even ``[min, max]`` covers less
    than 95% then). ``ranks`` are 1-based positions in sorted order."""
    from fractions import Fraction  # noqa: PLC0415
    from math import comb  # noqa: PLC0415

    xs, n = sorted(values), len(values)
    alpha = (1 - Fraction(level)) / 2 * 2 ** n  # in counts of the 2**n equally likely sign patterns
    k, below = 0, 0  # below: the number of patterns with fewer than k values under the median
    while k < n and below + comb(n, k) <= alpha:
        below += comb(n, k)
        k += 1
    if k == 0 or k > n + 1 - k:
        return None
    return {"level": level, "low": xs[k - 1], "high": xs[n - k], "method": "sign-test-median",
            "ranks": [k, n + 1 - k], "coverage": float(1 - Fraction(2 * below, 2 ** n))}


def ci_decision(ci: dict | None, gate: float) -> str | None:
    """``fast`` when the interval's low end clears the gate (and 1), ``not-fast`` when its high
    end does not, ``None`` while the interval straddles the gate (or there is none yet)."""
    if ci is None:
        return None
    if ci["low"] >= gate and ci["low"] > 1.0:
        return "fast"
    if ci["high"] < gate or ci["high"] <= 1.0:
        return "not-fast"
    return None


def speed_state(timing: dict, gate: float) -> tuple[str, str | None]:
    """The state the recorded ``timing`` supports, and why not ``certified_fast`` when it is not.

    ``certified_fast`` needs, on the figures the receipt records (the rules ``frt lock`` applies
    to them, so a receipt qualify writes is never one lock rejects): at least ``MIN_CERT_ROUNDS``
    rounds; the ``CI_LEVEL`` interval's low end at or above the gate and above 1; the median
    speedup at or above the gate and above 1; the host's median time above the route's."""
    ci = timing.get("speedup-ci")
    if timing["rounds"] < MIN_CERT_ROUNDS or ci is None:
        return "supported_correct", (f"{timing['rounds']} timing rounds are too few for a speed claim "
                                     "(an interval of the speedup needs >= 6)")
    med = timing["speedup-median"]
    if not (med >= gate and med > 1.0):
        return "supported_correct", None
    if ci_decision(ci, gate) != "fast":
        return "supported_correct", (f"speedup {med:.3f}x, but its {ci['level']:.0%} interval "
                                     f"{ci['low']:.3f}-{ci['high']:.3f}x does not clear the gate {gate:g}: cannot tell")
    if not timing["host-median-ms"] > timing["route-median-ms"]:
        return "supported_correct", "the route is not faster than the host in the median time"
    return "certified_fast", None
