"""frt as a vLLM general plugin (entry point ``frt`` in ``vllm.general_plugins``).

vLLM calls ``register()`` in every process it starts (the API server, the engine core,
each worker), possibly more than once. Configuration is the environment:

``FRT_MODEL``     the frt model name; unset: the plugin does nothing (it says so once)
``FRT_PROJECT``   the project folder (default: found upward from the current folder)
``FRT_LOCK``, ``FRT_MIRROR``   as everywhere in frt
``FRT_FALLBACK``  ``refuse`` (default) or ``host``
``FRT_ACCEPT``    comma-separated receipt states (default ``certified_fast``)

``register()`` reads the lockfile (no torch, no kernel import) and registers, for each
seam's ``vllm-op``, frt's routing class in vLLM's out-of-tree op registry
(``frt_dist.serve.vllm.ops``). Nothing else happens until vLLM builds the first such op in a
process: then ``Engine.ensure_plan`` decides every phase band for this process's device
from the lock (``frt_dist.load``: no measurement), refuses a decision or package the
policy does not allow (the engine's start fails with ``error:`` lines, one reason per
route), checks each route's ``assembly`` against the form the engine runs (eager or
compiled), verifies and imports the packages once, smokes each layer on a real op, and
logs every band's decision once.

A refusal is logged where it happens, and the first process of the engine prints frt's
``error:`` and ``hint:`` lines once more at its exit, after vLLM's tracebacks
(``frt_dist.serve.vllm.refusal``). The ledger reaches ``/metrics`` through the ledger files
(``frt_dist.serve.vllm.metrics``).
"""

from __future__ import annotations

import dataclasses
import logging
import threading

from ... import settings
from ...errors import FrtError

__all__ = ["register", "engine", "FrtStartupError", "ENGINE_FORMS", "parse_accept", "Qualifying"]

# the assembly a receipt names, per form vLLM runs the model in
ENGINE_FORMS = {"eager": "eager", "compile": "compile", "compile-then-capture": "compile-then-capture"}

_lock = threading.RLock()
_engine = None  # the Engine of this process, once FRT_MODEL was seen
_inactive_said = False


class FrtStartupError(RuntimeError):
    """The engine must not start: frt refused (the message is frt's ``error:`` and reasons)."""


def _log() -> logging.Logger:
    # a child of vLLM's "vllm" logger: vLLM's handler and format print it
    return logging.getLogger("vllm.frt")


def engine():
    """This process's ``Engine`` (``None`` while the plugin is inactive)."""
    return _engine


def register(lock=None, *, qualifying: Qualifying | None = None) -> None:
    """vLLM's plugin hook: idempotent, cheap, and inert without ``FRT_MODEL``. ``lock``: the ``Lockfile``
    to route from instead of the one found from the environment. ``qualifying``: ``frt qualify``'s
    door (``frt_dist.qualify.vllm``, which hands it the lock it measures: the manifest as the project's
    file defines it now, with the lock's pins): this process's engine then binds that route in those
    bands, consulting no receipt, with ``fallback="host"``; the model is the lock's and the project the
    one named, not the environment's."""
    global _engine, _inactive_said
    with _lock:
        if _engine is not None:
            return
        model = lock.manifest.model if qualifying is not None else settings.value("FRT_MODEL")
        if not model:
            if not _inactive_said:
                _inactive_said = True
                _log().info("frt: FRT_MODEL is not set; the frt plugin is inactive in this process")
            return
        from .metrics import install_collector, open_ledger_dir  # noqa: PLC0415
        from .refusal import arm  # noqa: PLC0415

        arm()  # the first process prints a refusal last, at its exit
        try:
            open_ledger_dir().close()  # refused when another user could write the ledger files /metrics sums
            eng = Engine.from_env(model, lock=lock) if qualifying is None else Engine.qualifying_route(lock, qualifying)
            eng.register_ops()
            install_collector()
        except FrtError as exc:
            raise _startup_error(exc) from None
        _engine = eng


_last_error = None  # the FrtError behind the last start-up refusal in this process (frt qualify re-raises it)


def last_error():
    """The refusal of this process's start-up, for a caller that reports it itself (then it is not
    printed again at exit)."""
    if _last_error is not None:
        from .refusal import take  # noqa: PLC0415

        take()
    return _last_error


def _startup_error(exc: FrtError) -> FrtStartupError:
    """Log frt's error the way the CLI prints it (``error:``, one line per reason, ``hint:``s that
    fit an engine), and keep it to print last (``refusal``)."""
    global _last_error
    _last_error = exc
    lines = [f"error: {str(exc).splitlines()[0]}"]
    for r in getattr(exc, "reasons", None) or []:
        where = " ".join(f"{k} {r[k]}" for k in ("phase", "route", "seam") if r.get(k))
        lines.append(f"  {where + ': ' if where else ''}{r.get('reason', r)}")
    from .refusal import engine_hints, record  # noqa: PLC0415

    lines += [f"hint: {h}" for h in engine_hints(exc, _engine.lock if _engine is not None else None)]
    log = _log()
    for line in lines:
        log.error("frt: %s", line)
    record([f"frt: {line}" for line in lines])
    return FrtStartupError("\n".join(lines))


@dataclasses.dataclass(frozen=True)
class Qualifying:
    """What ``frt qualify`` asks of this process's engine: bind ``route`` in ``phases`` (no receipt
    consulted), for the project at ``root``."""

    route: str
    phases: tuple
    root: object  # the project folder (a path)


@dataclasses.dataclass
class Band:
    """One phase band of one seam in this engine: rows, the layer serving it (None: vLLM's own op)."""

    phase: str
    lo: int
    hi: int
    layer: object
    counts: object  # the plan's counters of (seam, phase)
    contract: dict
    warm: int = 0  # calls during vLLM's dummy runs (profiling, warm-up, capture)

    def __post_init__(self):
        from ..guard import TensorRule  # noqa: PLC0415

        rule = TensorRule(self.contract)  # the guard's reading of the contract, and its reasons
        self.fits, self.problems = rule.fits, rule.problems


class SeamTable:
    """The bands of one seam, and what a call does under the engine's policy."""

    def __init__(self, seam: str, bands: list, fallback: str):
        self.seam, self.bands, self.fallback = seam, bands, fallback
        self.shown = ", ".join(f"{b.phase} {b.lo}..{b.hi}" for b in bands)

    def call(self, op, own, args, kwargs, warming: bool):
        """One call of the seam's op: the band its rows fall in decides (eager calls, and the body of
        ``frt::dispatch`` in a compiled graph)."""
        x = args[0] if args else next(iter(kwargs.values()))
        rows = x.shape[0]
        for band in self.bands:
            if band.lo <= rows <= band.hi:
                if warming:
                    band.warm += 1
                else:
                    band.counts.calls += 1
                if band.layer is None:  # decided host: vLLM's own op
                    if not warming:
                        band.counts.host_calls += 1
                    return own(*args, **kwargs)
                if band.fits(x):
                    return band.layer.forward(op, *args, **kwargs)
                return self.miss(band, band.problems(x), own, args, kwargs, warming)
        return self.miss(None, [("rows", f"rows {rows} in no phase band ({self.shown})")], own, args, kwargs, warming)

    def miss(self, band, problems, own, args, kwargs, warming: bool):
        from ...errors import ContractViolation  # noqa: PLC0415

        if warming and (band is None or problems[0][0] == "rows"):
            (band or self.bands[0]).warm += 1
            return own(*args, **kwargs)  # a dummy run outside every band: not traffic
        st = (band or self.bands[0]).counts
        if band is None:
            st.calls += 1
        for kind, _ in problems:
            st.misses[kind] = st.misses.get(kind, 0) + 1
        if self.fallback == "host":
            st.fallbacks += 1
            return own(*args, **kwargs)
        st.contract_refusals += 1
        text = "; ".join(r for _, r in problems)
        raise ContractViolation(f"seam {self.seam!r}: {text}",
                                reasons=[{"seam": self.seam, "kind": k, "reason": r} for k, r in problems],
                                hints=["set FRT_FALLBACK=host to run vLLM's own op for such calls (counted)"])


def parse_accept(value: str) -> tuple[str, ...]:
    """``FRT_ACCEPT``'s value as the ``accept`` the plugin passes to ``frt_dist.load``: the
    comma-separated states, each one ``certified_fast`` or ``supported_correct`` (else a
    ``UsageError`` naming what is wrong). What they mean is the resolver's one rule
    (``routes.resolver.accepted_states``: ``supported_correct`` accepts ``certified_fast`` too), as
    for ``frt resolve --accept`` and ``load(accept=)``."""
    from ...errors import UsageError  # noqa: PLC0415

    accept = tuple(s.strip() for s in value.split(",") if s.strip())
    bad = [s for s in accept if s not in ("certified_fast", "supported_correct")]
    if bad or not accept:
        raise UsageError(f"FRT_ACCEPT: expected states among certified_fast, supported_correct, got {bad or accept}")
    return accept


class Engine:
    """What the plugin holds in one process."""

    def __init__(self, model: str, lock, project, fallback: str, accept: tuple, mirror):
        self.model, self.lock, self.project = model, lock, project
        self.fallback, self.accept, self.mirror = fallback, accept, mirror
        self.plan = None
        self.table: dict = {}
        self.form = None
        self.warming = False
        self.host_bands: dict = {}  # (seam, phase) -> why vLLM's own op serves it
        self.ops: dict = {}  # seam -> vllm op name
        self.dispatched: frozenset = frozenset()  # seams a compiled graph calls through frt::dispatch
        self.qualifying: Qualifying | None = None

    @classmethod
    def from_env(cls, model: str, lock=None) -> Engine:
        from ...errors import UsageError  # noqa: PLC0415
        from ...project.discover import Project  # noqa: PLC0415
        from ..load import find_lockfile  # noqa: PLC0415

        fallback = settings.value("FRT_FALLBACK")
        if fallback not in ("refuse", "host"):
            raise UsageError(f"FRT_FALLBACK: expected refuse or host, got {fallback!r}")
        accept = parse_accept(settings.value("FRT_ACCEPT"))
        project = Project.find(explicit=settings.value("FRT_PROJECT"))
        if lock is None:
            lock, _root = find_lockfile(model, None, project)
        return cls(model, lock, project, fallback, accept, settings.value("FRT_MIRROR"))._with_ops()

    @classmethod
    def qualifying_route(cls, lock, q: Qualifying) -> Engine:
        """The engine ``frt qualify`` measures in (``register(lock, qualifying=q)``): ``q.route`` bound in
        ``q.phases``, contract misses counted as fallbacks (``fallback="host"``), never hidden."""
        from ...project.discover import Project  # noqa: PLC0415

        eng = cls(lock.manifest.model, lock, Project.find(explicit=str(q.root)), "host", ("certified_fast",),
                  settings.value("FRT_MIRROR"))
        eng.qualifying = q
        return eng._with_ops()

    def _with_ops(self) -> Engine:
        """This engine with the vLLM op of every seam; ``UsageError`` for a manifest the plugin cannot serve."""
        from ...errors import UsageError  # noqa: PLC0415

        m, eng = self.lock.manifest, self
        if m.host != "vllm":
            raise UsageError(f"{m.file}: host is {m.host!r}; the vLLM plugin serves a vLLM binding (host = \"vllm\")",
                             hints=["set FRT_MODEL to a model whose manifest says host = \"vllm\""])
        from .ops import ADAPTERS  # noqa: PLC0415

        for seam in m.seams.values():
            if seam.vllm_op not in ADAPTERS:
                raise UsageError(f"{m.file}: seams.{seam.name}.vllm-op: frt does not route vLLM's {seam.vllm_op!r} "
                                 f"(it routes {', '.join(sorted(ADAPTERS))})")
            eng.ops[seam.name] = seam.vllm_op
        return eng

    # -- registration (every process) -----------------------------------------
    def register_ops(self) -> None:
        from vllm.model_executor.custom_op import CustomOp, op_registry_oot  # noqa: PLC0415

        from ...errors import UsageError  # noqa: PLC0415
        from .ops import ADAPTERS, route_class, vllm_op_class  # noqa: PLC0415

        for seam, op in self.ops.items():
            have = op_registry_oot.get(op)
            if have is not None:
                if getattr(have, "_frt_seam", None) is not None:
                    continue  # ours, from an earlier load of the plugin in this process
                raise UsageError(f"vLLM op {op} is already replaced by {have.__module__}.{have.__qualname__}; "
                                 "frt cannot route it", hints=["remove the other plugin (VLLM_PLUGINS=frt,...)"])
            base = vllm_op_class(ADAPTERS[op])
            cls = route_class(base, seam, self, ADAPTERS[op])
            CustomOp.register_oot(cls, name=op)
            # keep vLLM's own name for its `custom_ops` setting (register_oot sets the class name)
            cls.name = base.name

    # -- the plan (processes that build a model) -------------------------------
    def ensure_plan(self) -> None:
        with _lock:
            if self.plan is None:
                try:
                    self._bind()
                except FrtError as exc:
                    raise _startup_error(exc) from None

    def _form(self) -> tuple[str, str]:
        from vllm.config import get_current_vllm_config  # noqa: PLC0415
        from vllm.config.compilation import CompilationMode  # noqa: PLC0415

        cc = get_current_vllm_config().compilation_config
        if cc.mode == CompilationMode.NONE:
            return "eager", "compilation mode NONE (enforce_eager)"
        graphs = cc.cudagraph_mode is not None and str(cc.cudagraph_mode.name) != "NONE"
        from vllm.platforms import current_platform  # noqa: PLC0415

        if graphs and current_platform.is_cuda_alike():
            return "compile-then-capture", f"compilation mode {cc.mode.name}, CUDA graphs {cc.cudagraph_mode.name}"
        return "compile", f"compilation mode {cc.mode.name}, no CUDA graphs"

    @staticmethod
    def hardware():
        """This machine's hardware facts (``Hardware.detect``) with vLLM's version among the software."""
        from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415

        from ...system.hardware import Hardware, software_version  # noqa: PLC0415

        hw = Hardware.detect()
        try:
            import vllm  # noqa: PLC0415

            v = vllm.__version__
        except (ImportError, AttributeError):
            try:
                v = version("vllm")
            except PackageNotFoundError:
                v = None
        soft = dict(hw.software)
        if v and software_version(v):
            soft["vllm"] = software_version(v)
        return dataclasses.replace(hw, software=soft)

    def _bind(self) -> None:
        import time  # noqa: PLC0415

        from ...errors import KernelUnavailable, RouteRefused  # noqa: PLC0415
        from ..load import load  # noqa: PLC0415
        from .ops import ADAPTERS, smoke_layer, smoke_rows, vllm_op_class  # noqa: PLC0415

        t0 = time.perf_counter()
        log = _log()
        m = self.lock.manifest
        self.form, why_form = self._form()
        hw = Engine.hardware()
        qualifying = self.qualifying
        if qualifying:  # `frt qualify` in this process: the route in the bands asked for, no receipt
            plan = self._qualify_plan(qualifying.route, list(qualifying.phases), hw)
        else:
            plan = load(self.model, fallback=self.fallback, accept=self.accept, lockfile=self.lock,
                        mirror=self.mirror, hardware=hw, project=self.project)
        # the form the engine runs must be the form each receipt measured
        refusals = []
        for phase, d in plan.decisions.items():
            if d.decision != "route":
                continue
            assembly = m.routes[d.route].assembly
            if assembly != self.form:
                why = (f"route {d.route!r} was qualified with assembly {assembly!r}; this engine runs "
                       f"{self.form!r} ({why_form})")
                refusals.append({"phase": phase, "route": d.route, "reason": why})
        # the bind-time smoke: each layer against vLLM's own op at the low and high end of every band it serves
        smoke: dict = {}
        for (seam, phase), layer in sorted(plan.fns.items()):
            if any(r["phase"] == phase for r in refusals):
                continue
            impl = plan.binding(seam, phase).impl
            entry = smoke.setdefault((seam, impl.name), [layer, impl, set(), []])
            entry[2].update(smoke_rows(m.phases[phase].rows))
            entry[3].append(phase)
        for (seam, _name), (layer, impl, rows, phases) in sorted(smoke.items()):
            op = self.ops[seam]
            why = smoke_layer(ADAPTERS[op], vllm_op_class(ADAPTERS[op]), layer, impl, sorted(rows), m.tolerance)
            if why:
                raise _startup_error(KernelUnavailable(
                    f"model {self.model!r}: the layer of seam {seam!r} failed its smoke on vLLM's {op}",
                    reasons=[{"seam": seam, "phase": ph, "reason": why} for ph in phases],
                    hints=["fix the package's layer, or qualify and lock another route for those bands"]))
        gap = None if qualifying else self._rows_in_no_band()
        if gap and self.fallback != "host":
            plan.detach()
            from ...errors import UsageError  # noqa: PLC0415

            raise _startup_error(UsageError(
                f"model {self.model!r}: rows {gap[0]}..{gap[1]} are in no phase band ("
                + ", ".join(f"{n} {ph.rows[0]}..{ph.rows[1]}" for n, ph in sorted(m.phases.items(), key=lambda kv: kv[1].rows))
                + f"), but this engine "
                f"runs steps of 1..{gap[2]} rows (max_num_batched_tokens): a step there would stop it "
                "(FRT_FALLBACK=refuse)",
                hints=[f"start vLLM with --max-num-batched-tokens {gap[0] - 1}" if gap[0] > 1 and gap[1] == gap[2]
                       else "add a phase band covering those rows to the manifest, qualify and lock it",
                       "or set FRT_FALLBACK=host to run vLLM's own ops for those rows (counted as fallbacks)"]))
        if gap:
            log.warning("frt: rows %d..%d are in no phase band (this engine runs up to %d): vLLM's own ops serve them, "
                        "counted as fallbacks (FRT_FALLBACK=host)", *gap)
        if refusals and self.fallback != "host":
            plan.detach()
            raise _startup_error(RouteRefused(
                f"model {self.model!r}: {len(refusals)} band(s) cannot run their route in this engine",
                reasons=refusals, hints=["qualify the route in the form the engine runs (`assembly` in the manifest), "
                                         "or start with FRT_FALLBACK=host to run vLLM's own ops there"]))
        hostless = {r["phase"] for r in refusals}
        self._build_table(plan, hostless)
        for r in refusals:
            log.warning("frt: %s band runs vLLM's own ops (FRT_FALLBACK=host): %s", r["phase"], r["reason"])
        self.plan = plan
        if self.form != "eager":
            self._key_compile_cache()
        self._log_decisions(refusals)
        self._hook_dummy_runs()
        from .metrics import start_writer  # noqa: PLC0415

        start_writer(self)
        log.info("frt: model %s bound in %.2f s (engine form %s)", self.model, time.perf_counter() - t0, self.form)

    def _qualify_plan(self, route: str, phases: list, hw):
        from ...loader.core import load_locked  # noqa: PLC0415
        from ...project.discover import lock_root  # noqa: PLC0415
        from ..load import plan_for_route  # noqa: PLC0415

        m = self.lock.manifest
        phases = phases or list(m.phases)
        packages = {repo: load_locked(self.lock, repo, hardware=hw, root=lock_root(self.lock))
                    for repo in m.route_packages(route)}
        fns = {}
        for seam, name in m.routes[route].seams.items():
            impl = m.impl(seam, name)
            from ..kernelize import package_layer  # noqa: PLC0415

            layer, why = package_layer(packages[impl.package].module, impl.layer)
            if why:
                from ...errors import KernelUnavailable  # noqa: PLC0415

                raise KernelUnavailable(f"package {impl.package} {why}", reasons=[{"seam": seam, "reason": why}])
            for ph in phases:
                fns[(seam, ph)] = layer
        return plan_for_route(self.lock, route, phases, hw, packages, fns)

    def routed(self, on: bool) -> None:
        """Qualification: switch between the route (True) and vLLM's own ops (False) in one engine."""
        if not hasattr(self, "_routed_table"):
            self._routed_table = self.table
        self.table = self._routed_table if on else {}

    def perturb(self, seam: str, on: bool) -> None:
        """Qualification's negative control: the seam's layers perturbed (x (1 + 1e-2) + 1e-3)."""
        import torch.nn as nn  # noqa: PLC0415

        for band in self._routed_table[seam].bands if hasattr(self, "_routed_table") else self.table[seam].bands:
            if on and band.layer is not None and not hasattr(band, "_good"):
                good = band._good = band.layer

                def forward(op, *args, _good=good, **kwargs):
                    out = _good.forward(op, *args, **kwargs)
                    if isinstance(out, tuple):
                        return (out[0] * (1 + 1e-2) + 1e-3,) + tuple(out[1:])
                    return out * (1 + 1e-2) + 1e-3

                band.layer = type("Perturbed", (nn.Module,), {"forward": forward})
            elif not on and hasattr(band, "_good"):
                band.layer = band._good
                del band._good

    def _rows_in_no_band(self):
        """``(low, high, top)``: the first run of row counts in 1..``max_num_batched_tokens`` (``top``) that no
        phase band holds, or ``None``. vLLM's steps carry 1..top rows (prefill chunks and decode batches alike)."""
        from vllm.config import get_current_vllm_config  # noqa: PLC0415

        top = get_current_vllm_config().scheduler_config.max_num_batched_tokens
        reach = 0
        for lo, hi in sorted(ph.rows for ph in self.lock.manifest.phases.values()):
            if lo > reach + 1:
                return reach + 1, min(lo - 1, top), top
            reach = max(reach, hi)
            if reach >= top:
                return None
        return (reach + 1, top, top) if reach < top else None

    def _key_compile_cache(self) -> None:
        """Make frt's routing part of what keys vLLM's compile cache: a graph that calls frt::dispatch
        must never be handed to an engine without it (nor one without it to an engine with it). vLLM
        hashes ``additional_config`` into its config hash (``VllmConfig.compute_hash``), which keys both
        its AOT artifacts and its Inductor cache folder; the graph depends only on which ops call
        frt::dispatch (the routing itself is decided per call, at run time, from this engine's lock)."""
        from vllm.config import get_current_vllm_config  # noqa: PLC0415

        from .ops import DISPATCH_SCHEMA  # noqa: PLC0415

        cfg = get_current_vllm_config()
        key = {"dispatch": f"frt::{DISPATCH_SCHEMA}",
               "ops": sorted({self.ops[s] for s in self.dispatched})}
        if isinstance(cfg.additional_config, dict):
            cfg.additional_config["frt"] = key
        else:  # a platform's own config object: frt cannot add to it; keep vLLM from sharing the cache instead
            import os  # noqa: PLC0415

            os.environ["VLLM_DISABLE_COMPILE_CACHE"] = "1"
            _log().warning("frt: additional_config is a %s, not a table: vLLM's compile cache is disabled in this "
                           "process so that a graph without frt's routing is never reused", type(cfg.additional_config))

    def _build_table(self, plan, hostless: set) -> None:
        m = self.lock.manifest
        routed = set()
        for seam in m.seams:
            bands = []
            for phase, ph in sorted(m.phases.items(), key=lambda kv: kv[1].rows):
                if phase not in plan.decisions:  # `frt qualify --phase`: only the bands asked for are bound
                    continue
                key = (seam, phase)
                layer = plan.fns.get(key) if phase not in hostless else None
                b = plan.binding(seam, phase)
                contract = b.impl.contract if b is not None else {}
                if layer is None:
                    self.host_bands[key] = ("host decision" if plan.decisions[phase].decision == "host" else
                                            "refused in this engine form" if phase in hostless else "not bound")
                else:
                    routed.add(seam)
                bands.append(Band(phase, ph.rows[0], ph.rows[1], layer, plan.counts(seam, phase), contract))
            self.table[seam] = SeamTable(seam, bands, self.fallback)
            if (self.form != "eager" and seam not in routed) or self.form == "compile-then-capture":
                # vLLM's own compiled op (no band routed), or CUDA-graph replays: calls run no frt code
                for b in bands:
                    b.counts.compiled = True
        self.dispatched = frozenset(routed)

    def _log_decisions(self, refusals) -> None:
        log = _log()
        plan = self.plan
        log.info("frt: model %s, lock %s, hardware %s, fallback %s, engine form %s", self.model,
                 self.lock.lock_digest[:19], plan.hardware.device_class, self.fallback, self.form)
        refused = {r["phase"] for r in refusals}
        for phase, d in plan.decisions.items():
            rows = self.lock.manifest.phases[phase].rows
            if d.decision == "route" and phase not in refused:
                seams = ", ".join(f"{s}={self.ops[s]}" for s in sorted(self.ops) if plan.binding(s, phase) is not None)
                log.info("frt: band %s rows %d..%d: route %s (%s, receipt %s) replaces %s", phase, rows[0], rows[1],
                         d.route, d.state, (d.receipt or "")[:19], seams)
            else:
                why = "; ".join(f"{r.route}: {r.reason}" for r in d.reasons) or "refused in this engine form"
                log.info("frt: band %s rows %d..%d: host (vLLM's own ops): %s", phase, rows[0], rows[1], why)

    def _hook_dummy_runs(self) -> None:
        """Mark vLLM's dummy runs (profiling, compile warm-up, CUDA-graph capture) as warm-up."""
        import sys  # noqa: PLC0415

        mod = sys.modules.get("vllm.v1.worker.gpu_model_runner")
        runner = getattr(mod, "GPUModelRunner", None)
        if runner is None or getattr(runner._dummy_run, "_frt_hooked", False):
            return
        original = runner._dummy_run
        eng = self

        def _dummy_run(self, *args, **kwargs):
            was, eng.warming = eng.warming, True
            try:
                return original(self, *args, **kwargs)
            finally:
                eng.warming = was

        _dummy_run._frt_hooked = True
        runner._dummy_run = _dummy_run

    # -- the ledger --------------------------------------------------------------
    def ledger(self) -> dict:
        """``plan.ledger()`` plus, per seam and band, ``warmup-calls`` (vLLM's dummy runs), the
        engine form, and the lock the engine runs (``lock-digest``, ``release``, ``release-commit``:
        ``frt_lock_info`` in ``/metrics``)."""
        from .metrics import lock_info  # noqa: PLC0415

        snap = {**self.plan.ledger(), **lock_info(self.lock)}
        for seam, t in self.table.items():
            s = snap["seams"][seam]
            s["warmup-calls"] = sum(b.warm for b in t.bands)
            for b in t.bands:
                s["phases"][b.phase]["warmup-calls"] = b.warm
        snap["engine-form"] = self.form
        snap["vllm-ops"] = dict(self.ops)
        return snap

    def detach(self) -> None:
        """vLLM's own ops serve every call from now on (in a compiled engine, inside frt::dispatch)."""
        self.plan.detach()
        self.table = {}
