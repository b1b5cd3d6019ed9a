"""Serving: ``load(model)`` → ``Plan`` (SPEC §5, §6, §8.5, §8.6).

``load`` is decision, then supply, then bind; it never measures:

1. find the lockfile in force (``lockfile=``, ``FRT_LOCK``, the project's
   ``lockfiles/<model>.lock``, the bundled one) and read it (digests verified);
2. resolve every phase band (``frt_dist.routes.resolver.resolve_all``); any refusal
   raises one ``RouteRefused`` with every reason, before anything is downloaded
   or imported;
3. load each package the chosen routes use, at the variant each decision names,
   through the one shared loader (``frt_dist.loader.load_locked``);
4. for every bound impl and band: the required ``entry`` must exist, optional
   ``probes`` are recorded as offered / not offered, and one bind-time smoke call
   must pass (``frt_dist.loader.smoke``). Every failure of steps 3–4 is gathered into
   one ``KernelUnavailable``.

The ``Plan`` hands out guarded callables per (seam, phase band). The guard
checks the first tensor argument against the impl's contract (device, dtype,
layout, row band, width) and counts; a miss raises ``ContractViolation``, or,
when the caller gave ``host=`` and the plan's policy is ``fallback="host"``,
runs the host and counts a fallback. Everything the guard needs is computed
at bind time. Under ``torch.compile`` the guard's checks are traced (so they
become compile-time guards) but its counters cannot run; the ledger then says
the seam was "not observed under compilation" instead of reporting zeros.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .errors import ContractViolation, KernelUnavailable, LockfileError, RouteRefused, UsageError
from .hardware import Hardware

__all__ = ["load", "Plan", "find_lockfile", "NOT_OBSERVED"]

NOT_OBSERVED = "not observed under compilation"
_DEVICE_FLAGS = {"cpu": "is_cpu", "cuda": "is_cuda", "xpu": "is_xpu", "mps": "is_mps", "meta": "is_meta"}


# ---------------------------------------------------------------------------
# finding the lockfile


def _project(project):
    from .project import Project  # noqa: PLC0415

    if project is None:
        return Project.find()
    if isinstance(project, Project):
        return project
    return Project(Path(project).resolve(), "project", {})


def find_lockfile(model: str, lockfile=None, project=None):
    """(Lockfile, project root for its path packages), in SPEC §8.4 order."""
    from .loader import lock_root  # noqa: PLC0415
    from .lockfile import Lockfile  # noqa: PLC0415
    from .project import bundled_root  # noqa: PLC0415

    proj = _project(project)
    if isinstance(lockfile, Lockfile):
        lock = lockfile
        root = lock_root(lock) if lock.path else proj.root
    else:
        path = lockfile if lockfile is not None else os.environ.get("FRT_LOCK") or None
        if path is None:
            looked = [proj.lockfile_path(model), bundled_root() / "lockfiles" / f"{model}.lock"]
            path = next((p for p in looked if p.is_file()), None)
            if path is None:
                raise LockfileError(f"no lockfile for model {model!r} (looked in {', '.join(map(str, looked))})",
                                    exit_code=1, hints=[f"run `frt lock --model {model}` in the project"])
        lock = Lockfile.read(path)
        root = lock_root(lock)
    if lock.model != model:
        raise UsageError(f"lockfile {lock.path or '(in memory)'} is for model {lock.model!r}, not {model!r}")
    return lock, root


# ---------------------------------------------------------------------------
# binds: which impl serves which seam in which band


@dataclass(frozen=True)
class _Bind:
    """Which impl (from which package variant) serves a seam in a phase band."""

    seam: str
    phase: str
    impl: object  # frt_dist.manifest.Impl
    repo: str
    variant: str


def _binds(lock, decisions) -> list[_Bind]:
    m = lock.manifest
    out = []
    for phase, d in decisions.items():
        if d.decision != "route":
            continue
        for seam, name in sorted(m.routes[d.route].seams.items()):
            impl = m.impl(seam, name)
            out.append(_Bind(seam, phase, impl, impl.package, d.variants[impl.package]))
    return out


def _supply(lock, binds, *, mirror, hardware, allow_pins, root, project) -> tuple[dict, list[dict]]:
    """Check every package the binds use, then import them only if all passed:
    (repo → LoadedPackage, reasons of those that failed)."""
    from .loader import CheckBatch, Ready, prepare_locked  # noqa: PLC0415

    ready, reasons = {}, []
    batch = CheckBatch()  # nothing is imported until every package is checked
    for repo, variant in sorted({(b.repo, b.variant) for b in binds}):
        try:
            ready[repo] = prepare_locked(lock, repo, variant, mirror=mirror, hardware=hardware,
                                         allow_pins=allow_pins, root=root, project=project, batch=batch)
        except KernelUnavailable as exc:
            reasons.extend(exc.reasons)
    if reasons:
        return {}, reasons
    packages = {}
    for repo, got in ready.items():
        try:
            packages[repo] = got.load() if isinstance(got, Ready) else got
        except KernelUnavailable as exc:
            reasons.extend(exc.reasons)
    return packages, reasons


def _check_binds(lock, binds, packages) -> tuple[dict, dict, list[dict]]:
    """Entry symbols, probes and smoke for every bind whose package loaded."""
    from .loader import record_unavailable  # noqa: PLC0415
    from .loader.smoke import smoke_impl  # noqa: PLC0415

    fns, probes, reasons = {}, {}, []
    cache: dict = {}  # smoke inputs shared by the binds of this load (weights materialised once)
    for b in binds:
        pkg = packages.get(b.repo)
        if pkg is None:
            continue
        facts = {"package": b.repo, "revision": pkg.revision, "seam": b.seam, "phase": b.phase, "impl": b.impl.name}
        fn = getattr(pkg.module, b.impl.entry, None)
        if not callable(fn):
            why = f"package {b.repo} revision {pkg.revision} does not export the entry {b.impl.entry!r}"
            reasons.append({**facts, "kind": "entry", "reason": why})
            record_unavailable(b.repo, KernelUnavailable(why, reasons=[reasons[-1]]), version=pkg.version,
                               revision=pkg.revision, variant=pkg.variant)
            continue
        probes[(b.seam, b.phase)] = {p: ("offered" if pkg.offers(p) else "not offered") for p in b.impl.probes}
        why = smoke_impl(fn, b.impl, lock.manifest.phases[b.phase], cache=cache)
        if why:
            reasons.append({**facts, "kind": "smoke", "reason": why})
            record_unavailable(b.repo, KernelUnavailable(why, reasons=[reasons[-1]]), version=pkg.version,
                               revision=pkg.revision, variant=pkg.variant)
            continue
        fns[(b.seam, b.phase)] = fn
    return fns, probes, reasons


def load(model: str, *, precision: str | None = None, fallback: str = "refuse", accept=("certified_fast",),
         lockfile=None, mirror=None, hardware: Hardware | None = None, allow_pins: bool = False,
         project=None) -> "Plan":
    """Resolve, supply and bind ``model`` for this (or the declared) hardware (SPEC §5, §8.6)."""
    from .loader import mirror_dir  # noqa: PLC0415
    from .routes.resolver import refusal_error, resolve_all  # noqa: PLC0415

    proj = _project(project)
    lock, root = find_lockfile(model, lockfile, proj)
    hw = hardware or Hardware.detect()
    decisions = resolve_all(lock, hardware=hw, precision=precision, fallback=fallback, accept=accept)
    refused = refusal_error(model, decisions)
    if refused is not None:
        raise refused
    binds = _binds(lock, decisions)
    mdir = mirror_dir(mirror, proj)
    packages, reasons = _supply(lock, binds, mirror=mdir, hardware=hw, allow_pins=allow_pins, root=root,
                                project=proj)
    fns, probes, more = _check_binds(lock, binds, packages)
    reasons += more
    if reasons:
        raise KernelUnavailable(
            f"model {model!r}: {len(reasons)} problem(s) supplying the chosen routes; nothing was bound:\n  "
            + "\n  ".join(r["reason"] for r in reasons[:40]), reasons=reasons,
            hints=["`frt verify --mirror DIR` names damaged files; `frt mirror DIR` refills them"])
    return Plan(lock, hw, decisions, fallback, packages, binds, fns, probes)


def plan_for_route(lock, route: str, phases, hardware: Hardware, packages: dict, fns: dict) -> "Plan":
    """A ``Plan`` that binds ``route`` in ``phases`` without a decision from receipts.

    For the qualification door only (``frt qualify`` measures a route before any
    receipt exists): the same guarded entries and ledger serving uses, with
    ``fallback="host"`` so a contract miss is counted as a fallback, never hidden.
    """
    from .routes.resolver import Decision  # noqa: PLC0415

    m = lock.manifest
    rt = m.routes[route]
    variants = {repo: packages[repo].variant for repo in m.route_packages(route)}
    revisions = {repo: packages[repo].revision for repo in variants}
    decisions = {ph: Decision(ph, "route", route, "unknown", None, (), variants, revisions) for ph in phases}
    binds = [_Bind(seam, ph, m.impl(seam, name), m.impl(seam, name).package, variants[m.impl(seam, name).package])
             for ph in phases for seam, name in sorted(rt.seams.items())]
    return Plan(lock, hardware, decisions, "host", packages, binds, dict(fns), {})


# ---------------------------------------------------------------------------
# contracts and counters


class _Counts:
    """Counters of one (seam, phase band). Plain attributes: cheap to bump, and
    transparent to ``torch.compile`` (a store to them is an ordinary side effect)."""

    def __init__(self, seam: str, phase: str):
        self.seam, self.phase = seam, phase
        self.calls = self.fallbacks = self.host_calls = self.contract_refusals = self.bind_refusals = 0
        self.misses: dict[str, int] = {}
        self.compiled = False
        self.active = True


def _dtype_name(dt) -> str:
    return str(dt).removeprefix("torch.")


class _Contract:
    """One impl's contract in one band, precomputed for the guard."""

    def __init__(self, impl, phase):
        import torch  # noqa: PLC0415

        c = impl.contract
        self.seam, self.phase = impl.seam, phase.name
        self.device = c["device"]
        self.dtype_names = list(c["dtypes"])
        self.dtypes = tuple(getattr(torch, n) for n in self.dtype_names if isinstance(getattr(torch, n, None), torch.dtype))
        self.contiguous = c.get("layout", "contiguous") == "contiguous"
        self.lo, self.hi = phase.rows
        self.width = c.get("width")
        self.arity = len(impl.smoke.get("inputs", ())) or 1  # positional arguments of the smoke call

    def problems(self, args, kwargs) -> list[tuple[str, str]]:
        """Every way the call's first tensor argument misses the contract, as (kind, reason)."""
        import torch  # noqa: PLC0415

        x = next((a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)), None)
        if x is None:
            return [("type", "input: no tensor argument")]
        out = []
        if x.device.type != self.device:
            out.append(("device", f"device {x.device.type} not {self.device}"))
        if x.dtype not in self.dtypes:
            out.append(("dtype", f"dtype {_dtype_name(x.dtype)} not in [{', '.join(self.dtype_names)}]"))
        if self.contiguous and not x.is_contiguous():
            out.append(("layout", "layout: input is not contiguous"))
        if x.dim() == 0:
            out.append(("rows", f"rows: input is 0-dimensional; {self.phase} band is [{self.lo}, {self.hi}]"))
            return out
        rows = x.shape[0]
        if not self.lo <= rows <= self.hi:
            out.append(("rows", f"rows {rows} outside {self.phase} band [{self.lo}, {self.hi}]"))
        if self.width is not None and x.shape[-1] != self.width:
            out.append(("width", f"width {x.shape[-1]} not {self.width}"))
        return out

    def violation(self, problems) -> ContractViolation:
        reasons = [{"seam": self.seam, "phase": self.phase, "kind": k, "reason": r} for k, r in problems]
        return ContractViolation(f"seam {self.seam!r} ({self.phase}): " + "; ".join(r for _, r in problems),
                                 reasons=reasons,
                                 hints=["pass host= and load(..., fallback=\"host\") to run the host path instead"])


def _detached(st: _Counts) -> RouteRefused:
    st.bind_refusals += 1
    return RouteRefused(f"seam {st.seam!r} ({st.phase}): the plan was detached and no host= was given",
                        reasons=[{"seam": st.seam, "phase": st.phase, "reason": "plan detached"}])


# The guard's hot path, specialised per contract at bind time (like dataclasses
# writes __init__): only the checks the contract declares are emitted, each as a
# direct attribute read. Anything unusual (detached plan, a miss, a tensor
# subclass, kwargs-only call) takes ``slow``, which re-checks exactly.
_FAST_TEMPLATE = """
def entry(*args, **kwargs):
    if compiling():
        return traced(args, kwargs)
    st.calls += 1
    if st.active:
        if len(args) == {arity} and not kwargs:  # the call shape the manifest's smoke declares
            {unpack} = args
            if type(x) is Tensor and {dtype} and {device}{layout}:
                s = x.shape
                if s and lo <= s[0] <= hi{width}:
                    return fn({call})
        elif args:
            x = args[0]
            if type(x) is Tensor and {dtype} and {device}{layout}:
                s = x.shape
                if s and lo <= s[0] <= hi{width}:
                    return fn(*args, **kwargs)
    return slow(args, kwargs)
"""


def _fast_source(con: _Contract) -> str:
    names = ["x"] + [f"a{i}" for i in range(1, max(con.arity, 1))]
    return _FAST_TEMPLATE.format(
        arity=len(names), unpack=", ".join(names) + ("," if len(names) == 1 else ""), call=", ".join(names),
        dtype="x.dtype is dtype0" if len(con.dtypes) == 1 else "x.dtype in dtypes",
        device=f"x.{_DEVICE_FLAGS[con.device]}" if con.device in _DEVICE_FLAGS else "x.device.type == device",
        layout=" and x.is_contiguous()" if con.contiguous else "",
        width=" and s[-1] == width" if con.width is not None else "")


def _kernel_entry(fn: Callable, st: _Counts, con: _Contract, host: Callable | None, fall_back: bool) -> Callable:
    """The guarded kernel callable for one (seam, band): contract checks and counts."""
    import torch  # noqa: PLC0415

    host_ok = fall_back and host is not None

    def slow(args, kwargs):
        if not st.active:
            if host is None:
                raise _detached(st)
            st.host_calls += 1
            return host(*args, **kwargs)
        problems = con.problems(args, kwargs)
        if not problems:  # e.g. a tensor subclass, or the tensor passed by keyword
            return fn(*args, **kwargs)
        for kind, _ in problems:
            st.misses[kind] = st.misses.get(kind, 0) + 1
        if host_ok:
            st.fallbacks += 1
            return host(*args, **kwargs)
        st.contract_refusals += 1
        raise con.violation(problems)

    def traced(args, kwargs):
        st.compiled = True
        problems = con.problems(args, kwargs)  # evaluated at trace time; becomes compile guards
        if problems:
            if host_ok:
                return host(*args, **kwargs)
            # Building the error is not traceable: dynamo breaks the graph here and the
            # error is raised eagerly.
            raise con.violation(problems)
        return fn(*args, **kwargs)

    namespace = {
        # torch.compiler.is_dynamo_compiling is a plain `return False` in eager and is
        # constant-folded to True while dynamo traces (is_compiling() costs ~3x more).
        "compiling": torch.compiler.is_dynamo_compiling, "traced": traced, "slow": slow, "fn": fn, "st": st,
        "Tensor": torch.Tensor, "dtype0": con.dtypes[0] if con.dtypes else None, "dtypes": con.dtypes,
        "device": con.device, "lo": con.lo, "hi": con.hi, "width": con.width,
    }
    exec(compile(_fast_source(con), f"<frt guard {con.seam}/{con.phase}>", "exec"), namespace)  # noqa: S102
    entry = namespace["entry"]
    entry.__name__ = getattr(fn, "__name__", "entry")
    entry.__qualname__ = f"frt_guard[{con.seam}/{con.phase}]"
    entry.__doc__ = getattr(fn, "__doc__", None)
    entry.__wrapped__ = fn
    return entry


def _host_entry(host: Callable, st: _Counts) -> Callable:
    """The caller's host callable, counted (a host decision or an unbound seam)."""
    import torch  # noqa: PLC0415

    compiling = torch.compiler.is_dynamo_compiling  # a plain `return False` in eager; True while dynamo traces

    def entry(*args, **kwargs):
        if compiling():
            st.compiled = True
        else:
            st.calls += 1
            st.host_calls += 1
        return host(*args, **kwargs)

    entry.__name__ = getattr(host, "__name__", "host")
    entry.__qualname__ = f"frt_host[{st.seam}/{st.phase}]"
    entry.__wrapped__ = host
    return entry


# ---------------------------------------------------------------------------
# the plan


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
        self._counts = {(s, p): _Counts(s, p) for s in m.seams for p in self.decisions}
        self._impls = {(b.seam, b.phase): b for b in self.binds}
        self._contracts = {k: _Contract(b.impl, m.phases[b.phase]) for k, b in self._impls.items()}
        self._entries = {k: _kernel_entry(self.fns[k], self._counts[k], self._contracts[k], None, False)
                         for k in self._impls}
        self.notes = [n for p in self.packages.values() for n in p.notes]

    # -- entries --------------------------------------------------------------
    def entry(self, seam: str, phase: str, host: Callable | None = None) -> Callable:
        """The guarded callable for ``seam`` in ``phase`` (SPEC §8.5).

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
        if key in self._impls and not self.detached:
            return _kernel_entry(self.fns[key], st, self._contracts[key], host, self.fallback == "host")
        if host is not None:
            return _host_entry(host, st)
        st.bind_refusals += 1
        raise RouteRefused(self._why_host(seam, phase),
                           reasons=[{"seam": seam, "phase": phase, "reason": self._why_host(seam, phase)}],
                           hints=[f"pass host= (the caller's own {seam} implementation) to plan.entry"])

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
    def ledger(self, format: str | None = None):  # noqa: A002 - the SPEC's keyword
        """A snapshot of the counts (SPEC §8.5); ``format="prometheus"`` for text exposition.

        ``{"model", "lock-digest", "hardware", "fallback", "detached", "host-bands",
        "seams": {seam: {...}}, "totals": {"calls", "fallbacks", "host-decisions", "refusals"}, "notes"}``.
        Per seam, summed over its phase bands: ``calls`` (guarded calls seen in
        eager mode), ``fallbacks`` (contract misses that ran ``host=``),
        ``host-calls`` (calls the host served by decision: a host band, an
        unbound seam, a detached plan), ``contract-misses`` (``{kind: n}``, kinds
        device/dtype/layout/rows/width/type; a call missing two ways counts
        twice), ``contract-refusals`` (misses that raised), ``bind-refusals``
        (``entry`` requests refused); ``route``/``state``/``receipt`` as
        ``{phase: value}`` (a seam's route differs per band); ``packages``
        (``{repo: revision}``), ``pinned`` (any author-pinned package),
        ``observed`` (false once the seam ran inside a compiled graph, whose
        calls the guard cannot count; ``notes`` says so) and ``phases`` with the
        same facts per band plus ``decision``, ``impl`` and ``probes``.
        ``totals.host-decisions`` is the sum of ``host-calls``; ``totals.refusals``
        of contract and bind refusals.
        """
        snap = self._snapshot()
        if format is None:
            return snap
        if format == "prometheus":
            return _prometheus(snap, self)
        raise UsageError(f"ledger format must be None or 'prometheus', got {format!r}")

    def _phase_view(self, seam: str, phase: str) -> dict:
        st, d = self._counts[(seam, phase)], self.decisions[phase]
        b = self._impls.get((seam, phase))
        return {
            "decision": "unbound" if d.decision == "route" and b is None else d.decision,
            "route": d.route, "state": d.state, "receipt": d.receipt,
            "impl": b.impl.name if b else None,
            "calls": st.calls, "fallbacks": st.fallbacks, "host-calls": st.host_calls,
            "contract-misses": dict(sorted(st.misses.items())), "contract-refusals": st.contract_refusals,
            "bind-refusals": st.bind_refusals, "observed": not st.compiled,
            "probes": dict(self.probes.get((seam, phase), {})),
        }

    def _snapshot(self) -> dict:
        seams, totals = {}, {"calls": 0, "fallbacks": 0, "host-decisions": 0, "refusals": 0}
        for seam in self.lockfile.manifest.seams:
            phases = {p: self._phase_view(seam, p) for p in self.decisions}
            misses: dict[str, int] = {}
            for v in phases.values():
                for k, n in v["contract-misses"].items():
                    misses[k] = misses.get(k, 0) + n
            repos = sorted({self._impls[(seam, p)].repo for p in self.decisions if (seam, p) in self._impls})
            pkgs = {r: self.packages[r].revision for r in repos if r in self.packages}
            unobserved = [p for p, v in phases.items() if not v["observed"]]
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
                "pinned": any(self.packages[r].pinned for r in pkgs),
                "observed": not unobserved,
                "notes": [f"{NOT_OBSERVED}: calls of the {p} band inside compiled graphs are not counted"
                          for p in unobserved],
                "phases": phases,
            }
            seams[seam] = entry
            totals["calls"] += entry["calls"]
            totals["fallbacks"] += entry["fallbacks"]
            totals["host-decisions"] += entry["host-calls"]
            totals["refusals"] += entry["contract-refusals"] + entry["bind-refusals"]
        return {
            "model": self.model, "lock-digest": self.lockfile.lock_digest, "hardware": self.hardware.to_dict(),
            "fallback": self.fallback, "detached": self.detached,
            "host-bands": sorted(p for p, d in self.decisions.items() if d.decision == "host"),
            "seams": seams, "totals": totals, "notes": list(self.notes),
        }


# ---------------------------------------------------------------------------
# Prometheus text exposition

_METRICS = (
    ("frt_seam_calls_total", "counter", "Calls that entered the frt guard, per seam and phase band.", "calls"),
    ("frt_seam_fallbacks_total", "counter", "Contract misses that ran the caller's host path.", "fallbacks"),
    ("frt_seam_host_calls_total", "counter", "Calls served by the host path by decision (host band, unbound seam, detached).",
     "host-calls"),
    ("frt_seam_contract_refusals_total", "counter", "Contract misses that raised ContractViolation.",
     "contract-refusals"),
    ("frt_seam_bind_refusals_total", "counter", "plan.entry requests refused (RouteRefused).", "bind-refusals"),
)


def _esc(v) -> str:
    return str(v).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(**kw) -> str:
    return "{" + ",".join(f'{k}="{_esc(v if v is not None else "")}"' for k, v in kw.items()) + "}"


def _prometheus(snap: dict, plan: Plan) -> str:
    model = snap["model"]
    lines: list[str] = []

    def head(name, kind, text):
        lines.extend([f"# HELP {name} {text}", f"# TYPE {name} {kind}"])

    views = [(seam, p, v) for seam, s in snap["seams"].items() for p, v in s["phases"].items()]
    for name, kind, text, key in _METRICS:
        head(name, kind, text)
        for seam, p, v in views:
            lines.append(f"{name}{_labels(model=model, seam=seam, phase=p, route=v['route'], state=v['state'])} {v[key]}")
    head("frt_seam_contract_misses_total", "counter", "Contract misses by reason kind (device, dtype, layout, rows, width).")
    for seam, p, v in views:
        for kind, n in v["contract-misses"].items():
            lines.append(f"frt_seam_contract_misses_total{_labels(model=model, seam=seam, phase=p, reason=kind)} {n}")
    head("frt_seam_observed", "gauge", "1 when the guard's counters saw every call; 0 when the seam ran inside "
         f"a compiled graph ({NOT_OBSERVED}).")
    for seam, p, v in views:
        lines.append(f"frt_seam_observed{_labels(model=model, seam=seam, phase=p)} {int(v['observed'])}")
    head("frt_package_info", "gauge", "Packages bound by the plan (value 1), with revision, variant and pin flag.")
    for repo, pkg in sorted(plan.packages.items()):
        lines.append(f"frt_package_info{_labels(model=model, repo=repo, revision=pkg.revision, variant=pkg.variant, source=pkg.source, pinned=str(pkg.pinned).lower())} 1")
    for key, name, text in (("calls", "frt_calls_total", "Guarded calls, all seams."),
                            ("fallbacks", "frt_fallbacks_total", "Contract-miss fallbacks to the host, all seams."),
                            ("host-decisions", "frt_host_decisions_total", "Calls served by the host by decision, all seams."),
                            ("refusals", "frt_refusals_total", "Contract and bind refusals, all seams.")):
        head(name, "counter", text)
        lines.append(f"{name}{_labels(model=model)} {snap['totals'][key]}")
    return "\n".join(lines) + "\n"

