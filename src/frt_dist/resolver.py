"""Route resolution: a pure, deterministic function of (lockfile, hardware,
precision, phase band, policy) → one ``Decision``.

No benchmarking, probing or I/O beyond reading the lockfile. The lock's index
has already ranked the receipts of each cell (winner first); resolution walks
that ranking and takes the first candidate whose exact cell matches (software
facts, selected variants, declared archs) and whose state the caller accepts.
Every route of the binding that is not taken gets one reason, in manifest
route order, so a refusal reads like a table.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from os import PathLike

from .errors import RouteRefused, UsageError
from .hardware import Hardware, arch_admits
from .lockfile import Lockfile
from .receipt import CellKey, Receipt
from .variants import select_variants

__all__ = ["resolve", "resolve_all", "Decision", "Reason", "Reporter", "FALLBACKS", "ACCEPTABLE"]

FALLBACKS = ("refuse", "host")
ACCEPTABLE = ("certified_fast", "supported_correct")


@dataclass(frozen=True)
class Reason:
    route: str
    reason: str
    kind: str = ""

    def to_dict(self) -> dict:
        return {"route": self.route, "reason": self.reason}


@dataclass(frozen=True)
class Decision:
    phase: str
    decision: str  # "route" | "host" | "refused"
    route: str | None
    state: str
    receipt: str | None
    reasons: tuple[Reason, ...] = ()
    variants: dict = field(default_factory=dict)  # repo -> variant the system selects (chosen route)
    revisions: dict = field(default_factory=dict)  # repo -> locked revision (chosen route)
    speedup: float | None = None

    def to_dict(self) -> dict:
        return {"phase": self.phase, "decision": self.decision, "route": self.route, "state": self.state,
                "receipt": self.receipt, "reasons": [r.to_dict() for r in self.reasons]}


class Reporter:
    """Receives every candidate considered (resolvelib style). The default does
    nothing; subclass and pass ``reporter=`` to observe a resolution."""

    def considering(self, phase: str, route: str, receipt: str | None) -> None: ...
    def rejecting(self, phase: str, route: str, reason: str) -> None: ...
    def choosing(self, phase: str, route: str | None, decision: str) -> None: ...


_NULL = Reporter()


def _as_lock(lock) -> Lockfile:
    if isinstance(lock, Lockfile):
        return lock
    if isinstance(lock, (str, PathLike)):
        return Lockfile.read(lock)
    raise TypeError(f"lock must be a path or a frt_dist.Lockfile, got {type(lock).__name__}")


def check_policy(lock: Lockfile, *, precision: str | None, phase: str | None, fallback: str, accept) -> tuple[str, tuple]:
    """Validate the caller's policy; return (precision, accept)."""
    m = lock.manifest
    if fallback not in FALLBACKS:
        raise UsageError(f"fallback must be one of {', '.join(FALLBACKS)}, got {fallback!r}")
    if isinstance(accept, str):
        accept = (accept,)
    accept = tuple(accept)
    for a in accept:
        if a not in ACCEPTABLE:
            raise UsageError(f"accept: unknown state {a!r} (valid: {', '.join(ACCEPTABLE)})")
    if phase is not None and phase not in m.phases:
        raise UsageError(f"unknown phase {phase!r} for model {m.model!r} (valid: {', '.join(m.phases)})")
    if precision is None:
        precision = m.default_precision
        if precision is None:
            raise UsageError(f"model {m.model!r} declares no default-precision; pass one "
                             f"(valid: {', '.join(m.precisions)})")
    elif precision not in m.precisions:
        raise UsageError(f"unknown precision {precision!r} for model {m.model!r} (valid: {', '.join(m.precisions)})")
    return precision, accept


def _fmt_archs(archs) -> str:
    return ",".join(archs)


class _RouteFacts:
    """Per-route facts that do not depend on the phase: variants the system
    selects and the arch verdict of every package. Computed once per call."""

    def __init__(self, lock: Lockfile, hw: Hardware):
        self.lock, self.hw = lock, hw
        self._pkg: dict[str, tuple[str | None, str | None]] = {}

    def package(self, repo: str) -> tuple[str | None, str | None]:
        """(selected variant, problem) for one locked package on this hardware."""
        if repo in self._pkg:
            return self._pkg[repo]
        pkg = self.lock.packages.get(repo)
        if pkg is None:
            res = (None, f"package {repo} is not locked")
        else:
            choice = select_variants(pkg.variants, self.hw)
            if choice.selected is None:
                res = (None, f"variant for this system not locked: {repo} has {', '.join(sorted(pkg.variants))}")
            else:
                v = pkg.variants[choice.selected]
                if v.archs and not arch_admits(v.archs, self.hw.arch):
                    short = repo.split("/", 1)[1]
                    res = (choice.selected, f"package {short} declares {_fmt_archs(v.archs)}; device is {self.hw.arch}")
                else:
                    res = (choice.selected, None)
        self._pkg[repo] = res
        return res

    def route(self, route: str) -> tuple[dict, str | None]:
        variants, problem = {}, None
        for repo in self.lock.manifest.route_packages(route):
            sel, why = self.package(repo)
            variants[repo] = sel
            if why and problem is None:
                problem = why
        return variants, problem


def _software_problem(rec: Receipt, hw: Hardware) -> str | None:
    for key, want in sorted(rec.software.items()):
        have = hw.software.get(key)
        if have is None:
            return f"software not declared: {key}"
        if have != want:
            verb = "running" if hw.detected else "declared"
            return f"receipt software {key} {want}, {verb} {have}"
    return None


def _variant_problem(rec: Receipt, variants: dict) -> str | None:
    for seam, it in sorted(rec.cell["impls"].items()):
        sel = variants.get(it["package"])
        if sel != it["variant"]:
            return f"receipt measured variant {it['variant']} of {it['package']}; this system selects {sel}"
    return None


def _fig(c) -> str:
    return f"{c.state} {c.speedup:.2f}x" if c.speedup is not None else c.state


def _nearest_miss(lock: Lockfile, route: str, key: CellKey, hw: Hardware) -> str:
    """Why no receipt of ``route`` covers this cell, naming the closest one."""
    mine = [r for r in lock.receipts.values() if r.route == route]
    same_band = [r for r in mine if r.key.phase == key.phase and r.key.precision == key.precision]
    for r in sorted(same_band, key=lambda r: (r.key.backend != key.backend, r.key.device_class, r.key.arch)):
        k = r.key
        if k.device_class != key.device_class:
            return f"no receipt for this cell: receipt measured on {k.device_class}, device is {key.device_class}"
        if k.arch != key.arch:
            return f"no receipt for this cell: receipt measured on arch {k.arch}, device is {key.arch}"
        if k.backend != key.backend:
            return f"no receipt for this cell: receipt measured on backend {k.backend}, device is {key.backend}"
    same_hw = [r for r in mine if (r.key.backend, r.key.arch, r.key.device_class) == (key.backend, key.arch, key.device_class)]
    phases = sorted({r.key.phase for r in same_hw if r.key.precision == key.precision})
    if phases and key.phase not in phases:
        return f"no receipt for this cell: receipts cover phase {', '.join(phases)}, not {key.phase}"
    precisions = sorted({r.key.precision for r in same_hw})
    if precisions and key.precision not in precisions:
        return f"no receipt for this cell: receipts cover precision {', '.join(precisions)}, not {key.precision}"
    return "no receipt for this cell"


def resolve(lock, *, hardware: Hardware, precision: str | None = None, phase: str,
            fallback: str = "refuse", accept=("certified_fast",), reporter: Reporter | None = None,
            _facts: _RouteFacts | None = None) -> Decision:
    """One phase band → one ``Decision`` (SPEC §5, §6)."""
    lock = _as_lock(lock)
    if phase is None:
        raise UsageError(f"phase is required (valid: {', '.join(lock.manifest.phases)})")
    precision, accept = check_policy(lock, precision=precision, phase=phase, fallback=fallback, accept=accept)
    rep = reporter or _NULL
    facts = _facts or _RouteFacts(lock, hardware)
    m = lock.manifest
    key = CellKey(phase, precision, hardware.backend, hardware.arch, hardware.device_class)
    reasons: dict[str, str] = {}
    entry = lock.index.get(key)
    chosen = None
    if entry is not None:
        for cand in entry.candidates:
            if cand.route in reasons:
                continue  # one reason per route: its best receipt's
            rep.considering(phase, cand.route, cand.receipt)
            rec = lock.receipts[cand.receipt]
            variants, problem = facts.route(cand.route)
            why = (problem or _software_problem(rec, hardware) or _variant_problem(rec, variants))
            if why is None and cand.state not in accept:
                why = f"receipt is {cand.state}; accept is {','.join(accept)}"
            if why is None:
                chosen = (cand, rec, variants)
                break
            reasons[cand.route] = why
            rep.rejecting(phase, cand.route, why)
        if chosen:
            win = chosen[0]
            for cand in entry.candidates:
                if cand.route in reasons or cand.route == win.route:
                    continue
                if cand.state not in accept:
                    reasons[cand.route] = f"receipt is {cand.state}; accept is {','.join(accept)}"
                else:
                    reasons[cand.route] = (f"ranked below {win.route} in this cell at lock time "
                                           f"({_fig(cand)} vs {_fig(win)})")
    ordered: list[Reason] = []
    for rname, rt in m.routes.items():
        if chosen and chosen[0].route == rname:
            continue
        why = reasons.get(rname)
        if why is None:
            if rt.precision != precision:
                why = f"route precision is {rt.precision}; requested {precision}"
            else:
                _, problem = facts.route(rname)
                why = problem or _nearest_miss(lock, rname, key, hardware)
            if chosen is None or why:
                rep.rejecting(phase, rname, why)
        ordered.append(Reason(rname, why))
    if chosen:
        cand, rec, variants = chosen
        rep.choosing(phase, cand.route, "route")
        revs = {repo: lock.packages[repo].revision for repo in variants}
        return Decision(phase, "route", cand.route, cand.state, cand.receipt, tuple(ordered), variants, revs,
                        cand.speedup)
    if fallback == "host":
        rep.choosing(phase, None, "host")
        return Decision(phase, "host", None, "unknown", None, tuple(ordered))
    rep.choosing(phase, None, "refused")
    return Decision(phase, "refused", None, "unknown", None, tuple(ordered))


def resolve_all(lock, *, hardware: Hardware, precision: str | None = None, phases=None,
                fallback: str = "refuse", accept=("certified_fast",), reporter: Reporter | None = None) -> dict[str, Decision]:
    """Every requested phase band (default: all, in manifest order)."""
    lock = _as_lock(lock)
    phases = list(lock.manifest.phases) if phases is None else list(phases)
    facts = _RouteFacts(lock, hardware)
    return {ph: resolve(lock, hardware=hardware, precision=precision, phase=ph, fallback=fallback,
                        accept=accept, reporter=reporter, _facts=facts) for ph in phases}


def refusal_error(model: str, decisions: dict[str, Decision]) -> RouteRefused | None:
    """One ``RouteRefused`` carrying every reason of every refused band, or ``None``."""
    refused = [d for d in decisions.values() if d.decision == "refused"]
    if not refused:
        return None
    reasons = [{"phase": d.phase, **r.to_dict()} for d in refused for r in d.reasons]
    lines = [f"{r['phase']}: {r['route']}: {r['reason']}" for r in reasons]
    return RouteRefused(f"no qualified route for model {model!r} in phase band(s) "
                        f"{', '.join(d.phase for d in refused)}:\n  " + "\n  ".join(lines),
                        reasons=reasons,
                        hints=["qualify the route on this hardware (`frt qualify`), accept supported_correct routes, "
                               "or pass fallback=\"host\" to keep the host path"])
