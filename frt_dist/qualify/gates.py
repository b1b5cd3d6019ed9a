"""What a band must pass before ``frt qualify`` writes its receipt, and the receipt it writes: one
home for both kinds of run (a torch host, ``frt_dist.qualify.run``; a vLLM binding,
``frt_dist.qualify.vllm``).

A band passes when parity holds, the null check (two host runs agree) holds, the negative control
(a perturbed seam) fails parity, detach restores the host, nothing fell back to the host and every
seam of the route was called in the band (``band_failures``). Its state is the one its recorded
figures support under the route's gate (``speed_verdict``, the rules ``frt lock`` applies), and the
receipt's cell names the route, this machine, the band and the packages measured (``receipt``).
"""

from __future__ import annotations

from .stats import speed_state

__all__ = ["band_failures", "speed_verdict", "receipt"]


def band_failures(phase: str, *, parity: dict, parity_failure: str, null_check: bool, negative: bool,
                  detach_ok: bool, exact_detach: bool, fallbacks: int, calls: dict, host: str) -> list[str]:
    """Why the ``phase`` band fails, one line per failed check (``[]``: it passes). ``parity_failure``
    says how parity failed (the run's own figures), ``host`` names what a fallback ran, and
    ``exact_detach`` says whether detach must restore the host bit-exactly."""
    out = []
    if not parity["pass"]:
        out.append(f"parity failed: {parity_failure}")
    if not null_check:
        out.append("null check failed: two runs of the host differ")
    if not negative:
        out.append("negative control passed parity: the gate cannot fail")
    if not detach_ok:
        out.append("detach did not restore the host" + (" bit-exactly" if exact_detach else ""))
    if fallbacks:
        out.append(f"{fallbacks} call(s) fell back to {host}")
    if any(n <= 0 for n in calls.values()):
        out.append(f"a seam was never called in the {phase} band: {calls}")
    return out


def speed_verdict(timing: dict, gate) -> tuple[str, str | None]:
    """The state ``timing`` supports under ``gate`` (``documents.manifest.Gate``) and why not
    ``certified_fast``; the gate is recorded in ``timing`` (``evidence.timing.gate``), as the state
    was decided with it (``frt lock`` judges with the route's own)."""
    state, why = speed_state(timing, gate.min_speedup)
    timing["gate"] = gate.to_json()
    return state, why


def receipt(m, route_name: str, hw, phase: str, *, impls: dict, packages: dict, software: dict, inputs: dict,
            state: str, evidence: dict) -> dict:
    """The receipt of ``route_name`` in the ``phase`` band on ``hw``: ``impls`` maps each seam to the
    impl measured (``documents.manifest.Impl``), ``packages`` each package to what was loaded
    (its revision and variant); ``software`` and ``inputs`` as the run records them."""
    route = m.routes[route_name]
    first = sorted(impls)[0]
    return {
        "schema": "frt.receipt/1",
        "cell": {
            "model": m.model, "binding": m.binding, "family": m.family,
            "route": route_name, "route-digest": route.digest,
            "hardware": {"backend": hw.backend, "arch": hw.arch, "device-class": hw.device_class,
                         "device-name": hw.device_name or hw.device_class},
            "precision": route.precision,
            "layout": impls[first].contract.get("layout", "contiguous"),
            "phase": phase, "band": {"rows": list(m.phases[phase].rows)},
            "software": software,
            "assembly": route.assembly,
            "impls": {seam: {"impl": impl.name, "package": impl.package,
                             "revision": packages[impl.package].revision,
                             "variant": packages[impl.package].variant}
                      for seam, impl in sorted(impls.items())},
            "calibration": None,
            "inputs": inputs,
        },
        "state": state,
        "evidence": evidence,
        "verdict": "PASS",
    }
