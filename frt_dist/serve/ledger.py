"""The plan's ledger: the counters the guard bumps per (seam, phase band), and the snapshot
``Plan.ledger()`` returns (what ``frt_dist.serve.prometheus`` exposes, and vLLM's metrics read).
See ``docs/reference.md#loading-and-guard``."""

from __future__ import annotations

__all__ = ["CAPTURED", "NOT_OBSERVED", "Counts", "phase_view", "snapshot"]

NOT_OBSERVED = "not observed under compilation"
CAPTURED = "captured in CUDA graphs"


class Counts:
    """Counters of one (seam, phase band). Plain attributes: cheap to bump, and
    transparent to ``torch.compile`` (a store to them is an ordinary side effect)."""

    def __init__(self, seam: str, phase: str):
        self.seam, self.phase = seam, phase
        self.calls = self.fallbacks = self.host_calls = self.contract_refusals = self.bind_refusals = 0
        self.misses: dict[str, int] = {}
        self.compiled = False
        self.captures = 0  # calls made while a CUDA graph was being captured (replays run no Python)
        self.active = True


def phase_view(plan, seam: str, phase: str) -> dict:
    """The counts and decision of one (seam, phase band)."""
    st, d = plan.counts(seam, phase), plan.decisions[phase]
    b = plan.binding(seam, phase)
    return {
        "decision": "unbound" if d.decision == "route" and b is None else d.decision,
        "route": d.route, "state": d.state, "receipt": d.receipt,
        "impl": b.impl.name if b else None,
        "calls": st.calls, "fallbacks": st.fallbacks, "host-calls": st.host_calls,
        "contract-misses": dict(sorted(st.misses.items())), "contract-refusals": st.contract_refusals,
        "bind-refusals": st.bind_refusals, "observed": not st.compiled, "captures": st.captures,
        "probes": dict(plan.probes.get((seam, phase), {})),
    }

def snapshot(plan) -> dict:
    """``Plan.ledger()``: the counts of every seam, summed over its bands, and the totals."""
    host_bands = sorted(p for p, d in plan.decisions.items() if d.decision == "host")
    seams = {}
    totals = {"calls": 0, "fallbacks": 0, "host-decisions": len(host_bands), "host-calls": 0, "refusals": 0}
    for seam in plan.lockfile.manifest.seams:
        phases = {p: phase_view(plan, seam, p) for p in plan.decisions}
        misses: dict[str, int] = {}
        for v in phases.values():
            for k, n in v["contract-misses"].items():
                misses[k] = misses.get(k, 0) + n
        repos = sorted({b.repo for p in plan.decisions if (b := plan.binding(seam, p)) is not None})
        pkgs = {r: plan.packages[r].revision for r in repos if r in plan.packages}
        unobserved = [p for p, v in phases.items() if not v["observed"]]
        captured = [p for p, v in phases.items() if v["captures"]]
        entry = {
            "calls": sum(v["calls"] for v in phases.values()),
            "fallbacks": sum(v["fallbacks"] for v in phases.values()),
            "host-calls": sum(v["host-calls"] for v in phases.values()),
            "contract-misses": dict(sorted(misses.items())),
            "contract-refusals": sum(v["contract-refusals"] for v in phases.values()),
            "bind-refusals": sum(v["bind-refusals"] for v in phases.values()),
            "route": {p: v["route"] for p, v in phases.items()},
            "state": {p: v["state"] for p, v in phases.items()},
            "receipt": {p: v["receipt"] for p, v in phases.items()},
            "packages": pkgs,
            "pinned": any(plan.packages[r].pinned for r in pkgs),
            "observed": not unobserved,
            "captures": sum(v["captures"] for v in phases.values()),
            "notes": [f"{NOT_OBSERVED}: calls of the {p} band inside compiled graphs are not counted"
                      for p in unobserved]
            + [f"{CAPTURED}: {phases[p]['captures']} call(s) of the {p} band were captured into CUDA graphs; "
               "each counted once, at capture (its checks ran then); replays run no Python and are not counted"
               for p in captured],
            "phases": phases,
        }
        seams[seam] = entry
        totals["calls"] += entry["calls"]
        totals["fallbacks"] += entry["fallbacks"]
        totals["host-calls"] += entry["host-calls"]
        totals["refusals"] += entry["contract-refusals"] + entry["bind-refusals"]
    return {
        "model": plan.model, "lock-digest": plan.lockfile.lock_digest, "hardware": plan.hardware.to_dict(),
        "fallback": plan.fallback, "detached": plan.detached,
        "host-bands": host_bands,
        "seams": seams, "totals": totals, "notes": list(plan.notes),
    }
