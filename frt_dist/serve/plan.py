"""``Plan``: what ``load`` bound, handing out guarded entries (``guard``) and counting (``ledger``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import RouteRefused, UsageError
from ..system.hardware import Hardware
from .guard import Contract, host_entry, kernel_entry
from .ledger import Counts, snapshot

__all__ = ["Plan", "Binding"]


@dataclass(frozen=True)
class Binding:
    """Which impl (from which package variant) serves a seam in a phase band."""

    seam: str
    phase: str
    impl: object  # frt_dist.documents.manifest.Impl
    repo: str
    variant: str


@dataclass
class Plan:
    """What ``load`` bound: ``decisions`` (``{phase: Decision}``), ``packages``
    (``{repo: LoadedPackage}``), guarded entries (``entry``), counts (``ledger``).
    ``notes`` carries what the loader recorded (e.g. a package with no archs)."""

    lockfile: object
    hardware: Hardware
    decisions: dict
    fallback: str
    packages: dict  # repo -> frt_dist.loader.LoadedPackage
    binds: list = field(repr=False)
    fns: dict = field(repr=False)  # (seam, phase) -> the package's entry function
    probes: dict = field(repr=False)  # (seam, phase) -> {symbol: "offered" | "not offered"}
    detached: bool = False

    def __post_init__(self):
        m = self.lockfile.manifest
        self.model = m.model
        self._counts = {(s, p): Counts(s, p) for s in m.seams for p in self.decisions}
        self._impls = {(b.seam, b.phase): b for b in self.binds}
        # a layer impl (vLLM binding) is called as its op's forward by the host's adapter
        # (frt_dist.serve.vllm.ops), not through a function guard
        fn_binds = {k: b for k, b in self._impls.items() if b.impl.layer is None}
        self._contracts = {k: Contract(b.impl, m.phases[b.phase], self.fns.get(k)) for k, b in fn_binds.items()}
        self._entries = {k: kernel_entry(self.fns[k], self._counts[k], self._contracts[k], None, False)
                         for k in fn_binds}
        self.notes = [n for p in self.packages.values() for n in p.notes]

    # -- what was bound (the ledger, kernelize and the vLLM plugin read it here) --
    def binding(self, seam: str, phase: str) -> Binding | None:
        """Which impl serves ``seam`` in the ``phase`` band, or ``None`` (a host band, a seam the
        route does not bind)."""
        return self._impls.get((seam, phase))

    def counts(self, seam: str, phase: str) -> Counts:
        """The counters of ``seam`` in the ``phase`` band (``frt_dist.serve.ledger.Counts``), which the
        guard and every router serving this plan bump."""
        return self._counts[(seam, phase)]

    def contract(self, seam: str, phase: str) -> Contract | None:
        """The guard's contract of a function impl bound for ``seam`` in the ``phase`` band, or ``None``."""
        return self._contracts.get((seam, phase))

    # -- entries --------------------------------------------------------------
    def entry(self, seam: str, phase: str, host: Callable | None = None) -> Callable:
        """The guarded callable for ``seam`` in ``phase`` (docs/reference.md#loading-and-guard).

        A route-decided band gives the kernel entry, guarded by its contract;
        ``host`` is what a contract miss falls back to under ``fallback="host"``.
        A host-decided band, or a seam the chosen route does not bind, gives
        ``host`` wrapped for counting, and raises ``RouteRefused`` without one.
        """
        if host is None:
            e = self._entries.get((seam, phase))
            if e is not None and not self.detached:
                return e
        return self._make_entry(seam, phase, host)

    def _make_entry(self, seam: str, phase: str, host: Callable | None) -> Callable:
        st = self._counts.get((seam, phase))
        if st is None:
            m = self.lockfile.manifest
            if seam not in m.seams:
                raise UsageError(f"unknown seam {seam!r} for model {self.model!r} (seams: {', '.join(m.seams)})")
            raise UsageError(f"unknown phase {phase!r} for model {self.model!r} (phases: {', '.join(self.decisions)})")
        key = (seam, phase)
        if key in self._contracts and not self.detached:
            return kernel_entry(self.fns[key], st, self._contracts[key], host, self.fallback == "host")
        if host is not None:
            return host_entry(host, st)
        st.bind_refusals += 1
        raise RouteRefused(self._why_host(seam, phase),
                           reasons=[{"seam": seam, "phase": phase, "reason": self._why_host(seam, phase)}],
                           hints=[f"pass host= (the caller's own {seam} implementation) to plan.entry"])

    def kernel_mapping(self, layers, *, device: str | None = None) -> dict:
        """The mapping ``kernels.use_kernel_mapping`` takes, served from this plan's verified
        modules: ``{seam: layer name}`` in, ``{layer name: {device: repository}}`` out
        (``frt_dist.serve.kernelize``). Bands decided ``host`` keep the module's own forward."""
        from .kernelize import kernel_mapping  # noqa: PLC0415

        return kernel_mapping(self, layers, device=device)

    def _why_host(self, seam: str, phase: str) -> str:
        d = self.decisions[phase]
        if self.detached:
            return f"seam {seam!r} in {phase} band: the plan was detached and no host= was given"
        if d.decision == "host":
            why = "; ".join(f"{r.route}: {r.reason}" for r in d.reasons) or "no qualified route"
            return f"{phase} band is decided host ({why}); entry({seam!r}, {phase!r}) needs host="
        return f"route {d.route!r} chosen for the {phase} band does not bind seam {seam!r}; pass host="

    def detach(self) -> None:
        """Release what ``load`` bound: guarded entries stop calling kernels (they
        call their ``host=`` if they have one, else raise ``RouteRefused``)."""
        self.detached = True
        for st in self._counts.values():
            st.active = False
        self._entries.clear()
        self.fns = {}

    # -- ledger ---------------------------------------------------------------
    def ledger(self, format: str | None = None):
        """A snapshot of the counts (docs/reference.md#loading-and-guard); ``format="prometheus"`` for text exposition.

        ``{"model", "lock-digest", "hardware", "fallback", "detached", "host-bands",
        "seams": {seam: {...}}, "totals": {"calls", "fallbacks", "host-decisions", "host-calls", "refusals"},
        "notes"}``.
        Per seam, summed over its phase bands: ``calls`` (guarded calls seen in
        eager mode), ``fallbacks`` (contract misses that ran ``host=``),
        ``host-calls`` (calls the host served by decision: a host band, an
        unbound seam, a detached plan), ``contract-misses`` (``{kind: n}``, kinds
        arity/type/device/dtype/layout/rows/width/shape, for any input; a call
        missing two ways counts twice), ``contract-refusals`` (misses that raised), ``bind-refusals``
        (``entry`` requests refused); ``route``/``state``/``receipt`` as
        ``{phase: value}`` (a seam's route differs per band); ``packages``
        (``{repo: revision}``), ``pinned`` (any author-pinned package),
        ``observed`` (false once the seam ran inside a compiled graph, whose
        calls the guard cannot count; ``notes`` says so), ``captures`` (calls made
        while a CUDA graph was captured: included in ``calls``, counted once each at
        capture, where the checks ran; replays run no Python; ``notes`` says so) and ``phases`` with the
        same facts per band plus ``decision``, ``impl`` and ``probes``.
        ``totals.host-decisions`` is the number of phase bands decided ``host`` (those
        ``host-bands`` lists), whether or not a call came yet; ``totals.host-calls`` the
        sum of the seams' ``host-calls``; ``totals.refusals`` of contract and bind refusals.
        """
        snap = snapshot(self)
        if format is None:
            return snap
        if format == "prometheus":
            from .prometheus import exposition  # noqa: PLC0415

            return exposition(snap, self)
        raise UsageError(f"ledger format must be None or 'prometheus', got {format!r}")
