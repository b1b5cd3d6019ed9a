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

from types import MappingProxyType

from ..base.record import dataclass, field
from ..documents.lockfile import Lockfile
from ..documents.metadata import requirement_problem
from ..documents.receipt import CellKey, Receipt
from ..errors import RouteRefused, UsageError
from ..system.admissible import variant_problem
from ..system.hardware import Hardware
from ..system.variants import select_variants

__all__ = ["resolve", "resolve_all", "Decision", "Reason", "Reporter", "FALLBACKS", "ACCEPTABLE", "REASON_KINDS",
           "accepted_states"]

FALLBACKS = ("refuse", "host")
ACCEPTABLE = ("certified_fast", "supported_correct")  # best first: accepting one accepts every state before it


# Why a route was not taken, as a short stable identifier (like resolvelib's criteria): callers
# choose what to do or say by the kind, never by the wording of ``Reason.reason``, which may change.
REASON_KINDS = MappingProxyType({
    # the route's packages on this system (``_RouteFacts.package``)
    "package-not-locked": "a package the route needs is not in the lockfile",
    "variant-not-locked": "no locked variant of a package is one this system can select",
    "variant-not-admitted": "the selected variant is a build for another backend",
    "arch-not-declared": "the selected variant does not declare the device's arch",
    "requirement-unmet": "the selected variant needs something this system lacks (kernels version, Python packages)",
    # a receipt of the cell that does not match this system (``_resolve``)
    "software-mismatch": "the receipt recorded a software fact with another value than this system's",
    "software-not-declared": "the receipt recorded software facts this (declared) system does not name",
    "variant-mismatch": "the receipt measured another variant than this system selects",
    "state-below-accept": "the receipt's state is not one the caller accepts (supported_correct under certified_fast)",
    "outranked": "another route of the cell ranked higher at lock time and was taken",
    "precision-mismatch": "the route is bound for another precision than the one asked for",
    # no receipt of the route covers the cell (``_nearest_miss``)
    "receipt-rejected": "a receipt for this band and device class was rejected by `frt lock`",
    "device-not-covered": "the route's receipts were measured on another device class",
    "arch-not-covered": "the route's receipts were measured on another arch",
    "backend-not-covered": "the route's receipts were measured on another backend",
    "phase-not-covered": "the route's receipts on this machine cover other phase bands",
    "precision-not-covered": "the route's receipts on this machine cover other precisions",
    "no-receipt": "no receipt of the route near this cell",
})


class Reason(tuple):
    """Why one candidate route was not taken (several per decision): ``reason`` is the sentence for
    people, ``kind`` (one of ``REASON_KINDS``) what a program decides on. It is the pair
    ``(route, reason)`` it always was (it compares, unpacks and indexes as that pair), with ``kind``
    as an attribute beside it."""

    def __new__(cls, route: str, reason: str, kind: str = "no-receipt"):
        self = tuple.__new__(cls, (route, reason))
        self.kind = kind
        return self

    def __getnewargs__(self):
        return (self[0], self[1], self.kind)

    @property
    def route(self) -> str:
        return self[0]

    @property
    def reason(self) -> str:
        return self[1]

    def __repr__(self) -> str:
        return f"Reason(route={self[0]!r}, reason={self[1]!r}, kind={self.kind!r})"

    def to_dict(self) -> dict:
        return {"route": self.route, "reason": self.reason, "kind": self.kind}


@dataclass(frozen=True)
class Decision:
    """What resolution decided for one phase band: a route, the host, or a refusal, with reasons."""

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


def accepted_states(accept) -> tuple[str, ...]:
    """The states a caller's ``accept`` admits, in ``ACCEPTABLE`` order: the one meaning of
    ``frt resolve --accept``, ``load(accept=)`` and the vLLM plugin's ``FRT_ACCEPT``
    (docs/reference.md#loading-and-guard). ``accept`` names the *lowest* state the caller will run:
    accepting ``supported_correct`` (a correctness claim) accepts ``certified_fast`` too, which makes
    the same claim and a speed claim besides, so ``("supported_correct",)`` is
    ``("certified_fast", "supported_correct")``. Among the accepted states the lock's ranking
    decides (``certified_fast`` first), so widening ``accept`` never displaces a route it already
    took. An unknown state is a ``UsageError`` naming it; an empty ``accept`` accepts nothing."""
    if isinstance(accept, str):
        accept = (accept,)
    accept = tuple(accept)
    for a in accept:
        if a not in ACCEPTABLE:
            raise UsageError(f"accept: unknown state {a!r} (valid: {', '.join(ACCEPTABLE)})")
    if not accept:
        return ()
    lowest = max(ACCEPTABLE.index(a) for a in accept)
    return ACCEPTABLE[:lowest + 1]


def check_policy(lock: Lockfile, *, precision: str | None, phase: str | None, fallback: str, accept) -> tuple[str, tuple]:
    """Validate the caller's policy; return (precision, the accepted states: ``accepted_states(accept)``)."""
    m = lock.manifest
    if fallback not in FALLBACKS:
        raise UsageError(f"fallback must be one of {', '.join(FALLBACKS)}, got {fallback!r}")
    accept = accepted_states(accept)
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


_Why = tuple[str, str]  # (kind, sentence): a reason before it is given its route


class _RouteFacts:
    """Per-route facts that do not depend on the phase: variants the system
    selects and the arch verdict of every package. Computed once per call."""

    def __init__(self, lock: Lockfile, hw: Hardware):
        self.lock, self.hw = lock, hw
        self._pkg: dict[str, tuple[str | None, _Why | None]] = {}
        self._route: dict[str, tuple[dict, tuple[_Why, ...]]] = {}

    def package(self, repo: str) -> tuple[str | None, str | None]:
        """(selected variant, problem) for one locked package on this hardware."""
        sel, why = self.package_why(repo)
        return sel, (why[1] if why else None)

    def package_why(self, repo: str) -> tuple[str | None, _Why | None]:
        """(selected variant, (kind, problem) or None) for one locked package on this hardware."""
        if repo in self._pkg:
            return self._pkg[repo]
        pkg = self.lock.packages.get(repo)
        if pkg is None:
            res = (None, ("package-not-locked", f"package {repo} is not locked"))
        else:
            choice = select_variants(pkg.variants, self.hw)
            if choice.selected is None:
                res = (None, ("variant-not-locked",
                              f"variant for this system not locked: {repo} has {', '.join(sorted(pkg.variants))}"))
            else:
                # defence in depth: the lock already rejected receipts whose variant this rule refuses
                variant = pkg.variants[choice.selected]
                why = variant_problem(variant, self.hw.backend, self.hw.arch)
                if why:
                    short = repo.split("/", 1)[1]
                    # variant_problem judges the backend first, then the archs
                    kind = "arch-not-declared" if variant.backend == self.hw.backend else "variant-not-admitted"
                    res = (choice.selected, (kind, f"package {short} {why}; device is {self.hw.arch}"))
                else:
                    need = requirement_problem(repo, variant, self.hw)
                    res = (choice.selected, ("requirement-unmet", need) if need else None)
        self._pkg[repo] = res
        return res

    def route(self, route: str) -> tuple[dict, _Why | None]:
        """(variant per package, first failing package's (kind, problem)): a decision's reason
        stays one line; ``problems`` has every failing package for ``--explain``."""
        variants, problems = self._facts(route)
        return variants, (problems[0] if problems else None)

    def problems(self, route: str) -> tuple[str, ...]:
        """Every failing package's problem of the route, in manifest order."""
        return tuple(text for _, text in self._facts(route)[1])

    def _facts(self, route: str) -> tuple[dict, tuple[_Why, ...]]:
        hit = self._route.get(route)
        if hit is None:
            variants, problems = {}, []
            for repo in self.lock.manifest.route_packages(route):
                sel, why = self.package_why(repo)
                variants[repo] = sel
                if why:
                    problems.append(why)
            hit = self._route[route] = (MappingProxyType(variants), tuple(problems))
        return hit


def _software_problem(rec: Receipt, hw: Hardware) -> _Why | None:
    """The first software fact that differs, else every fact the receipt records that the
    hardware lacks, each with the receipt's value, so one try names all of them."""
    missing = []
    for key, want in sorted(rec.software.items()):
        have = hw.software.get(key)
        if have is None:
            missing.append(f"{key} (receipt: {want})")
        elif have != want:
            verb = "running" if hw.detected else "declared"
            return "software-mismatch", f"receipt software {key} {want}, {verb} {have}"
    return ("software-not-declared", f"software not declared: {', '.join(missing)}") if missing else None


def _variant_problem(rec: Receipt, variants: dict) -> _Why | None:
    for _seam, it in sorted(rec.cell["impls"].items()):
        sel = variants.get(it["package"])
        if sel != it["variant"]:
            return ("variant-mismatch",
                    f"receipt measured variant {it['variant']} of {it['package']}; this system selects {sel}")
    return None


def _fig(c) -> str:
    return f"{c.state} {c.speedup:.2f}x" if c.speedup is not None else c.state


class _MissIndex:
    """What ``_nearest_miss`` needs, grouped once per lockfile from the index, so a
    reason costs O(1) in the number of receipts.

    A reason names the smallest (device class, arch) of a group that is not the cell's own,
    so each group keeps its two smallest, not all of them; which cells a machine's
    (backend, arch, device class) holds is found when a reason first asks, per machine.

    A lock read from a file that records the ``nearest`` summary (``lockfile.nearest_rows``:
    exactly those two smallest per group) gives them without reading any cell, and a machine's
    cells are looked up one (phase, precision) at a time: a decision then reads no cell but
    the ones it asks about. Without it (an older lock, a lock built in memory) every cell's
    routes are grouped here once."""

    def __init__(self, lock: Lockfile):
        self._hw: dict[tuple, dict] = {}
        near, index = lock.nearest, lock.index
        if near is not None and index.lazy:  # (an index with every entry built is grouped below, as cheaply)
            self.low, self.backends, self._cells, self._routes_of = near, {}, None, index.routes_of
            for route, phase, precision, backend in near:
                self.backends.setdefault((route, phase, precision), set()).add(backend)
            self._pairs = sorted({(g[1], g[2]) for g in near})
            return
        # (route, phase, precision, backend) -> the two smallest (device_class, arch), ascending
        low: dict[tuple, list] = {}
        backends: dict[tuple, set] = {}  # (route, phase, precision) -> {backend}
        self._cells = []
        for k, routes in index.cell_routes():  # (a lazy index gives these without building every entry)
            phase, precision, backend, arch, dc = k
            self._cells.append((k, routes))
            v = (dc, arch)
            for route in routes:
                g = (route, phase, precision, backend)
                two = low.get(g)
                if two is None:  # (a cell key is unique, so v is never already there)
                    low[g] = [v]
                    backends.setdefault((route, phase, precision), set()).add(backend)
                elif len(two) == 1:
                    two.insert(0 if v < two[0] else 1, v)
                elif v < two[1]:
                    two[:] = [v, two[0]] if v < two[0] else [two[0], v]
        self.low, self.backends = low, backends

    def hw(self, backend: str, arch: str, dc: str) -> dict[str, set]:
        """route -> {(phase, precision)} of the cells on this machine."""
        key = (backend, arch, dc)
        hit = self._hw.get(key)
        if hit is None:
            hit = {}
            if self._cells is None:  # (from the summary: the machine's cells looked up one by one)
                for phase, precision in self._pairs:
                    for route in self._routes_of(CellKey(phase, precision, backend, arch, dc)) or ():
                        hit.setdefault(route, set()).add((phase, precision))
            for k, routes in self._cells or ():
                if k[2] == backend and k[3] == arch and k[4] == dc:
                    for route in routes:
                        hit.setdefault(route, set()).add((k[0], k[1]))
            if len(self._hw) >= 64:
                self._hw.clear()
            self._hw[key] = hit
        return hit


def _nearest_miss(lock: Lockfile, route: str, key: CellKey, hw: Hardware) -> _Why:
    """Why no receipt of ``route`` covers this cell, naming the closest one."""
    # a receipt of this route measured on this very band and device class that `frt lock` rejected
    # is the reason, before any nearer accepted receipt (which would only say what is covered)
    rejected = [r for r in lock.rejected if r.get("route") == route and r.get("phase") == key.phase
                and r.get("device-class") == key.device_class]
    if rejected:
        return ("receipt-rejected", f"no receipt for this cell: {len(rejected)} rejected at lock time "
                                    f"({rejected[0]['file']}: {rejected[0]['reason']})")
    ix = lock.cache.miss_index
    if ix is None:
        ix = lock.cache.miss_index = _MissIndex(lock)
    # the closest receipt of this band and precision: same backend first, then by device class, arch
    for dc, arch in ix.low.get((route, key.phase, key.precision, key.backend), ()):
        if dc != key.device_class:
            return "device-not-covered", f"no receipt for this cell: receipt measured on {dc}, device is {key.device_class}"
        if arch != key.arch:
            return "arch-not-covered", f"no receipt for this cell: receipt measured on arch {arch}, device is {key.arch}"
    others = [(*ix.low[(route, key.phase, key.precision, b)][0], b)
              for b in ix.backends.get((route, key.phase, key.precision), ()) if b != key.backend]
    if others:
        dc, arch, backend = min(others)
        if dc != key.device_class:
            return "device-not-covered", f"no receipt for this cell: receipt measured on {dc}, device is {key.device_class}"
        if arch != key.arch:
            return "arch-not-covered", f"no receipt for this cell: receipt measured on arch {arch}, device is {key.arch}"
        return ("backend-not-covered",
                f"no receipt for this cell: receipt measured on backend {backend}, device is {key.backend}")
    cells = ix.hw(key.backend, key.arch, key.device_class).get(route, ())
    phases = sorted({ph for ph, prec in cells if prec == key.precision})
    if phases and key.phase not in phases:
        return "phase-not-covered", f"no receipt for this cell: receipts cover phase {', '.join(phases)}, not {key.phase}"
    precisions = sorted({prec for _, prec in cells})
    if precisions and key.precision not in precisions:
        return ("precision-not-covered",
                f"no receipt for this cell: receipts cover precision {', '.join(precisions)}, not {key.precision}")
    return "no-receipt", "no receipt for this cell"


def facts_for(lock: Lockfile, hw: Hardware) -> _RouteFacts:
    """Per-route facts for this system, kept with the lockfile: they depend on the
    variant-selection facts and the arch only, not on device class or phase."""
    cache = lock.cache
    fp = (hw.backend, hw.arch, hw.cpu, hw.os, hw.cxx11_abi, hw.detected, tuple(hw.software.items()))
    facts = cache.route_facts.get(fp)
    if facts is None:
        facts = cache.put(cache.route_facts, fp, _RouteFacts(lock, hw), cache.ROUTE_FACTS_MAX)
    return facts


def resolve(lock, *, hardware: Hardware, precision: str | None = None, phase: str,
            fallback: str = "refuse", accept=("certified_fast",), reporter: Reporter | None = None,
            _facts: _RouteFacts | None = None) -> Decision:
    """One phase band → one ``Decision`` (docs/reference.md#python-api, #loading-and-guard)."""
    lock = Lockfile.of(lock)
    key = None
    if reporter is None:
        # a decision is a pure function of these: serve it from the lock's cache when asked again
        key = (hardware.fingerprint, precision, phase, fallback, (accept,) if isinstance(accept, str) else tuple(accept))
        hit = lock.cache.decisions.get(key)
        if hit is not None:
            return hit
    decision = _resolve(lock, hardware=hardware, precision=precision, phase=phase, fallback=fallback,
                        accept=accept, reporter=reporter, _facts=_facts)
    if key is not None:
        lock.cache.put(lock.cache.decisions, key, decision, lock.cache.DECISIONS_MAX)
    return decision


def _resolve(lock: Lockfile, *, hardware: Hardware, precision, phase, fallback, accept, reporter, _facts) -> Decision:
    if phase is None:
        raise UsageError(f"phase is required (valid: {', '.join(lock.manifest.phases)})")
    precision, accept = check_policy(lock, precision=precision, phase=phase, fallback=fallback, accept=accept)
    rep = reporter or _NULL
    facts = _facts or facts_for(lock, hardware)
    m = lock.manifest
    key = CellKey(phase, precision, hardware.backend, hardware.arch, hardware.device_class)
    reasons: dict[str, _Why] = {}
    outranked: set[str] = set()
    entry = lock.index.get(key)
    chosen = None
    if entry is not None:
        # Every candidate is considered in ranking order. One route may hold several receipts
        # for one index key (they differ in software or variant, which the key leaves out), so
        # a route's failing best receipt must not hide a matching one; after the choice, each
        # remaining route still gets its own reason (its best receipt's).
        for cand in entry.candidates:
            if chosen is not None and (cand.route == chosen[0].route or cand.route in outranked):
                continue
            rep.considering(phase, cand.route, cand.receipt)
            rec = lock.receipts[cand.receipt]
            variants, problem = facts.route(cand.route)
            why = (problem or _software_problem(rec, hardware) or _variant_problem(rec, variants))
            if why is None and cand.state not in accept:
                why = "state-below-accept", f"receipt is {cand.state}; accept is {','.join(accept)}"
            if why is not None:
                reasons.setdefault(cand.route, why)
            elif chosen is None:
                chosen = (cand, rec, variants)
            else:
                win = chosen[0]
                reasons[cand.route] = ("outranked", f"ranked below {win.route} in this cell at lock time "
                                                    f"({_fig(cand)} vs {_fig(win)})")
                outranked.add(cand.route)
    ordered: list[Reason] = []
    for rname, rt in m.routes.items():
        if chosen and chosen[0].route == rname:
            continue
        why = reasons.get(rname)
        if why is None:
            if rt.precision != precision:
                why = "precision-mismatch", f"route precision is {rt.precision}; requested {precision}"
            else:
                _, problem = facts.route(rname)
                why = problem or _nearest_miss(lock, rname, key, hardware)
        rep.rejecting(phase, rname, why[1])  # once per route, with the reason the decision carries
        ordered.append(Reason(rname, why[1], why[0]))
    if chosen:
        cand, rec, variants = chosen
        rep.choosing(phase, cand.route, "route")
        revs = MappingProxyType({repo: lock.packages[repo].revision for repo in variants})
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
    lock = Lockfile.of(lock)
    phases = list(lock.manifest.phases) if phases is None else list(phases)
    facts = facts_for(lock, hardware)
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
