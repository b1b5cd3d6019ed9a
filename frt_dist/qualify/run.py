"""The qualification door: ``frt qualify --model X --route R``.

Runs the route and the unmodified host in one process on this machine and
writes one receipt per phase band (docs/reference.md#receipt). Never called by
``load``. What it measures, per band:

- **parity** at the output boundary (the whole binding's output, not a seam's)
  over the manifest's qualification rows, against the declared tolerances
  (``|route - host| <= abs + rel * |host|`` elementwise), with the worst case;
- **target calls** per seam (> 0) and **fallbacks** (= 0), read from the ledger
  of the same guarded entries serving uses (``serve.plan_for_route``);
- **paired alternating timing**: warm-up, then rounds of host and route calls
  in alternating order (ABBA...), per-round speedup, medians and spread;
- a **null check** (the host rerun is bit-identical), a **negative control**
  (a deliberately perturbed impl must fail parity, proving the gate can fail),
  and **detach restores host** bit-exactly.

``certified_fast`` only when the low end of the 95% interval of the median paired
speedup (``median_ci``) clears the route's gate (``manifest.route_gate``: its ``gate.min-speedup``, else
the default 1.02; recorded as ``evidence.timing.gate``) and 1, the median
does too and the host's median time is above the route's (``speed_state``); otherwise
``supported_correct`` ("cannot tell" included). Timing is adaptive up to a cap
(``_timing``). A failed check writes no receipt; the receipts folder is checked
before anything is measured (``check_receipt_folder``).

The host binding is the manifest's ``host-entry = "module:callable"``: a
factory ``(phase, *, seed) -> block`` where ``block(x)`` runs the binding,
``block.seams`` maps seam → callable, ``block.bind(seam, fn)`` swaps one,
``block.detach()`` restores the host, ``block.host_seams`` maps seam → the host's own
callable and ``block.make_inputs(rows, seed=)`` builds the seeded input (``HOST_INTERFACE``,
checked by ``build_host_block`` before anything is bound).
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..base import names
from ..documents.lock_writer import write_atomic
from ..documents.lockfile import Lockfile
from ..documents.manifest import route_gate
from ..documents.receipt import MIN_CERT_ROUNDS, superseded_path
from ..errors import KernelUnavailable, UsageError
from ..system.hardware import Hardware

__all__ = ["qualify", "measured_lock", "unpinned",
           "QualifyResult", "write_receipt", "receipt_filename", "load_host_factory", "keep_previous",
           "check_signing_policy"]

DEFAULT_ROUNDS = 30
DEFAULT_WARMUP = 5


@dataclass
class QualifyResult:
    phase: str
    passed: bool
    state: str | None
    receipt: dict | None
    path: Path | None = None
    failures: list[str] = field(default_factory=list)
    speedups: list[float] = field(default_factory=list)  # the per-round host/route ratios, in order


def load_host_factory(spec: str | None, model: str, root=None):
    """The host-entry factory; its module is found from the project ``root`` first
    (``project.import_entry``: no ``PYTHONPATH`` needed, nothing installed shadowed)."""
    from ..project.discover import import_entry  # noqa: PLC0415

    if not spec:
        raise UsageError(f"model {model!r}: the manifest declares no `host-entry = \"module:callable\"`; "
                         "qualification needs the unmodified host")
    try:
        factory = import_entry(spec, root)
    except (ImportError, AttributeError) as exc:
        raise UsageError(f"host-entry {spec!r} cannot be imported: {exc}") from None
    if not callable(factory):
        raise UsageError(f"host-entry {spec!r} is a {type(factory).__name__}, not a callable factory",
                         hints=[HOST_HINT])
    return factory


HOST_INTERFACE = {
    "__call__": "block(x) runs the binding and returns its output tensor",
    "seams": "a mapping seam -> the callable currently bound",
    "host_seams": "a mapping seam -> the host's own callable, for every seam the route binds",
    "bind": "bind(seam, fn) swaps one seam's callable",
    "detach": "detach() restores every host seam",
    "make_inputs": "make_inputs(rows, *, seed=) builds the seeded input tensor",
}
"""What ``frt qualify`` uses of the object a host-entry factory returns (docs/first-project.md)."""
HOST_HINT = ("a host-entry is a factory (phase, *, seed) -> block; the block provides "
             + "; ".join(f"`{k}`: {v}" for k, v in HOST_INTERFACE.items()))


def build_host_block(factory, spec: str, phase: str, seed: int, seams) -> object:
    """``factory(phase, seed=seed)``, checked against ``HOST_INTERFACE`` before anything is bound
    or measured: a missing attribute or seam is one ``UsageError`` (exit 2) naming the host-entry
    and everything missing, not an ``AttributeError`` from deep inside qualification."""
    try:
        block = factory(phase, seed=seed)
    except Exception as exc:  # the user's code: name it, and say how it was called
        raise UsageError(f"host-entry {spec!r}: calling it as factory({phase!r}, seed={seed}) raised "
                         f"{type(exc).__name__}: {exc}", hints=[HOST_HINT]) from None
    kind = type(block).__name__
    missing = []
    for name in HOST_INTERFACE:
        if name == "__call__":
            if not callable(block):
                missing.append("__call__ (it is not callable)")
        elif name in ("seams", "host_seams"):
            v = getattr(block, name, None)
            if v is None or not hasattr(v, "__getitem__") or not hasattr(v, "__contains__"):
                missing.append(f"{name} (a mapping)" if v is None else f"{name} (a mapping, got {type(v).__name__})")
        elif not callable(getattr(block, name, None)):
            missing.append(f"{name}() (a method)")
    if missing:
        raise UsageError(f"host-entry {spec!r}: the host object it returned ({kind}) is missing "
                         + ", ".join(missing), hints=[HOST_HINT, "docs/first-project.md shows a complete host"])
    absent = [s for s in seams if s not in block.host_seams]
    if absent:
        have = ", ".join(sorted(map(str, block.host_seams))) if hasattr(block.host_seams, "__iter__") else "?"
        raise UsageError(f"host-entry {spec!r}: the host object's host_seams ({kind}) has no seam "
                         + ", ".join(repr(s) for s in absent) + f" that the route binds (it has: {have or 'none'})",
                         hints=["host_seams maps every seam name of the manifest to the host's own callable"])
    return block


def _parity(torch, outs_route, outs_host, tol) -> dict:
    """Parity of the route's outputs against the host's under the combined (``allclose``) rule
    ``|route - host| <= abs + rel * |host|``, element by element, in float64 (every float32 or
    float16 value is exact in float64, so the margin is computed without rounding the inputs).

    Besides the maxima it records the worst element under that rule: ``worst-margin``, the
    largest ``|route - host| - (abs + rel * |host|)``, with ``worst-margin-error`` and
    ``worst-margin-host`` (``|route - host|`` and ``|host|`` there). ``pass`` is exactly
    ``worst-margin <= 0``, so ``frt lock`` and ``frt verify`` decide it from the receipt alone."""
    worst = {"rows": None, "max-abs": -1.0}
    max_abs = max_rel = 0.0
    margin = None  # (margin, error, |host|) at the worst element so far
    ok = True
    for rows in sorted(outs_host):
        a, b = outs_route[rows], outs_host[rows]
        if tuple(a.shape) != tuple(b.shape) or not torch.isfinite(a).all():
            ok = False
            max_abs = float("inf")
            worst = {"rows": rows, "max-abs": float("inf")}
            continue
        a64, b64 = a.detach().double().reshape(-1), b.detach().double().reshape(-1)
        if a64.numel() == 0:
            continue
        err, hb = (a64 - b64).abs(), b64.abs()
        marg = err - (tol["abs"] + tol["rel"] * hb)
        i = int(marg.argmax())
        if margin is None or not float(marg[i]) <= margin[0]:  # NaN (a NaN host) is worst
            margin = (float(marg[i]), float(err[i]), float(hb[i]))
        m_abs = float(err.max())
        m_rel = float((err / (hb + tol["abs"])).max())
        if m_abs > worst["max-abs"]:
            worst = {"rows": rows, "max-abs": m_abs}
        max_abs, max_rel = max(max_abs, m_abs), max(max_rel, m_rel)
    out = {"max-abs": max_abs, "max-rel": max_rel, "tolerance": dict(tol), "worst-case": worst}
    if margin is not None:
        out.update({"worst-margin": margin[0], "worst-margin-error": margin[1], "worst-margin-host": margin[2]})
    out["pass"] = bool(ok and margin is not None and margin[0] <= 0)
    return out


def _run_all(block, inputs):
    return {rows: block(x) for rows, x in inputs.items()}


CLOCKS = {"cpu": "perf-counter", "cuda": "cuda-events"}
"""The timer per input device. On CUDA a host timer around launches times the launches, not the
kernels (they run asynchronously), so a GPU side is timed with CUDA events on its stream."""


def clock_for(backend: str, device_type: str) -> str:
    """The timing method for a cell on ``backend`` whose inputs live on ``device_type``.

    The two must agree: a CUDA cell measured on CPU tensors (or the reverse) would describe
    hardware the kernels never ran on."""
    want = "cpu" if backend == "cpu" else "cuda"  # ROCm builds of torch expose HIP as torch.cuda
    if device_type != want:
        raise UsageError(f"the cell's hardware is {backend}, but the host-entry builds inputs on {device_type!r}: "
                         f"qualification must run where the cell says",
                         hints=[f"make the host-entry's make_inputs place tensors on {want!r}"])
    return CLOCKS[want]


def _wall_clock(block, xs) -> float:
    t0 = time.perf_counter()
    for x in xs:
        block(x)
    return time.perf_counter() - t0


def cuda_event_clock(torch, flush=None):
    """A clock timing ``block`` over ``xs`` with CUDA events recorded on the current stream
    around the calls, read after ``torch.cuda.synchronize()``. ``flush``, a buffer larger than
    the L2 cache, is overwritten first (before the start event, so it is not timed): each side
    then starts with a cold L2 instead of inheriting the other side's data."""

    def measure(block, xs) -> float:
        if flush is not None:
            flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for x in xs:
            block(x)
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / 1e3  # ms -> s

    return measure


def l2_flush_buffer(torch, device):
    """A byte buffer twice the device's L2 cache (writing it evicts everything cached)."""
    l2 = int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 64 << 20)
    return torch.empty(2 * l2, dtype=torch.uint8, device=device)


CI_LEVEL = 0.95
"""The confidence level of the speedup interval a speed claim must clear."""
CI_NARROW = 0.05
"""Adaptive timing stops, undecided, once the interval is this narrow relative to the median:
the speedup is then known to within a few percent of the gate, and more rounds would not decide it."""
MAX_ROUNDS_FACTOR = 4
"""Without ``[qualify] max-rounds`` adaptive timing runs at most this many times the initial rounds."""


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


def _ci_decision(ci: dict | None, gate: float) -> str | None:
    """``fast`` when the interval's low end clears the gate (and 1), ``not-fast`` when its high
    end does not, ``None`` while the interval straddles the gate (or there is none yet)."""
    if ci is None:
        return None
    if ci["low"] >= gate and ci["low"] > 1.0:
        return "fast"
    if ci["high"] < gate or ci["high"] <= 1.0:
        return "not-fast"
    return None


def _timing(host, route, inputs, *, rounds: int, warmup: int, tick=None, measure=_wall_clock,
            gate: float | None = None, max_rounds: int | None = None, speedups: list | None = None) -> dict:
    """Paired alternating timing over the same inputs (warm-up rounds first, then host/route in
    ABBA order); per-round speedup = host / route. ``measure(block, xs) -> seconds`` is the clock.

    With a ``gate``, timing is adaptive: after ``rounds`` rounds, while the speedup interval
    (``median_ci``) straddles the gate and is wider than ``CI_NARROW`` of the median, more rounds
    are run (half the initial count at a time) up to ``max_rounds``. The result records the
    interval (``speedup-ci``), the rounds actually run, and why timing stopped (``adaptive``).
    ``speedups``, when given, receives the per-round ratios (for benchmarks; not in the receipt)."""
    xs = list(inputs.values())
    for _ in range(warmup):
        measure(host, xs)
        measure(route, xs)
    cap = max(rounds, max_rounds or rounds * MAX_ROUNDS_FACTOR) if gate is not None else rounds
    step = max(2, rounds // 2)
    th, tr, sp = [], [], []
    target, stopped, i = rounds, None, 0
    while True:
        while i < target:
            if i % 2 == 0:
                h = measure(host, xs)
                r = measure(route, xs)
            else:
                r = measure(route, xs)
                h = measure(host, xs)
            th.append(h)
            tr.append(r)
            sp.append(h / r)
            i += 1
            if tick:
                tick(i, target)
        if gate is None:
            break
        ci = median_ci([round(v, 4) for v in sp])
        if _ci_decision(ci, gate) is not None:
            stopped = "decided"
        elif ci is not None and ci["high"] - ci["low"] <= CI_NARROW * statistics.median(sp):
            stopped = "narrow"
        elif i >= cap:
            stopped = "max-rounds"
        else:
            target = min(cap, i + step)
            continue
        break
    if speedups is not None:
        speedups[:] = sp
    q = statistics.quantiles(sp, n=4) if len(sp) >= 2 else [sp[0]] * 3
    out = {"method": "paired-alternating", "rounds": len(sp), "warmup": warmup, "rows": list(inputs),
           "host-median-ms": round(statistics.median(th) * 1e3, 4),
           "route-median-ms": round(statistics.median(tr) * 1e3, 4),
           "speedup-median": round(statistics.median(sp), 4), "speedup-min": round(min(sp), 4),
           "speedup-max": round(max(sp), 4), "speedup-p25": round(q[0], 4), "speedup-p75": round(q[2], 4)}
    ci = median_ci([round(v, 4) for v in sp])  # the rounded ratios: the interval's ends are recorded figures
    if ci is not None:
        out["speedup-ci"] = ci
    if gate is not None:
        out["adaptive"] = {"initial-rounds": rounds, "max-rounds": cap, "stopped": stopped}
    return out


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
    if _ci_decision(ci, gate) != "fast":
        return "supported_correct", (f"speedup {med:.3f}x, but its {ci['level']:.0%} interval "
                                     f"{ci['low']:.3f}-{ci['high']:.3f}x does not clear the gate {gate:g}: cannot tell")
    if not timing["host-median-ms"] > timing["route-median-ms"]:
        return "supported_correct", "the route is not faster than the host in the median time"
    return "certified_fast", None


def one_block_side(block, fns: dict):
    """``block(x)`` with ``fns`` bound to their seams first (a bind only where another callable is
    bound, so within one side's calls it costs a dict lookup per seam)."""

    def run(x):
        for seam, fn in fns.items():
            if block.seams[seam] is not fn:
                block.bind(seam, fn)
        return block(x)

    return run


def _device_timing(torch, host, block, inputs, *, clock: str, l2_flush: bool, **kw) -> dict:
    """``_timing`` with ``clock``; a CUDA run also records the GPU (NVML: name, driver, clocks
    at start and end of timing) and whether L2 was flushed."""
    first = next(iter(inputs.values()))
    if clock == "perf-counter":
        return {**_timing(host, block, inputs, **kw), "clock": clock}
    from ..system.detect import nvml_clocks, nvml_device_facts  # noqa: PLC0415

    flush = l2_flush_buffer(torch, first.device) if l2_flush else None
    gpu, _ = nvml_device_facts()
    start = nvml_clocks()
    timing = _timing(host, block, inputs, measure=cuda_event_clock(torch, flush), **kw)
    device = {"name": (gpu or {}).get("name") or torch.cuda.get_device_name(first.device),
              "driver": (gpu or {}).get("driver"), "cuda-driver": (gpu or {}).get("cuda-driver"),
              "clocks-start": start, "clocks-end": nvml_clocks()}
    return {**timing, "clock": clock, "l2-flush": bool(l2_flush), "device": device}


def check_route(m, route_name: str, phases=None) -> list[str]:
    """The phases to qualify (default: all of the manifest's), or the ``UsageError`` naming an
    unknown route or phase and the valid ones. ``frt qualify`` calls it before importing torch
    and kernels (seconds), so a mistyped name is refused at once."""
    if route_name not in m.routes:
        raise UsageError(f"unknown route {route_name!r} for model {m.model!r} (valid: {', '.join(m.routes)})")
    phases = list(phases or m.phases)
    for ph in phases:
        if ph not in m.phases:
            raise UsageError(f"unknown phase {ph!r} for model {m.model!r} (valid: {', '.join(m.phases)})")
    return phases


def unpinned(lock: Lockfile, manifest, repos, *, project=None) -> list[str]:
    """Why each of ``repos`` (packages ``manifest`` declares) cannot be measured with the pins of
    ``lock``: not pinned, pinned at another version or path, or a path package whose files changed
    since (its content digest, derived again under ``project``). [] when every one is pinned as declared."""
    out = []
    for repo in sorted(repos):
        pkg, pin = manifest.packages.get(repo), lock.packages.get(repo)
        if pkg is None:
            continue
        if pin is None:
            out.append(f"{repo} is not pinned")
        elif pkg.is_path != (pin.source == "path"):
            out.append(f"{repo} is pinned as a {'path' if pin.source == 'path' else 'Hub'} package")
        elif not pkg.is_path and pkg.version != pin.version:
            out.append(f"{repo} is pinned at version {pin.version}, the manifest asks for {pkg.version}")
        elif pkg.is_path and pkg.path != pin.path:
            out.append(f"{repo} is pinned from path {pin.path!r}, the manifest names {pkg.path!r}")
        elif pkg.is_path and project is not None:
            from ..errors import FrtError  # noqa: PLC0415
            from ..lock.build import derive_path_package  # noqa: PLC0415

            try:
                now = derive_path_package(project, pkg).revision
            except FrtError:
                continue  # (the loader names what is wrong with it)
            if now != pin.revision:
                out.append(f"{repo}'s files changed since the lock pinned them")
    return out


def measured_lock(lock: Lockfile, manifest, route_name: str, *, lock_label: str, project=None) -> Lockfile:
    """What ``frt qualify`` measures (docs/reference.md#frt-qualify): the route as ``manifest`` (the
    project's manifest file, now) defines it, with the packages ``lock`` pins. Where the route needs a
    package the lock does not pin as the manifest declares it, the ``FrtError`` (exit 1) says which
    ``frt lock`` comes first: with ``--allow-loss`` where the lock would drop receipts measured on a
    route definition the manifest no longer has (the new receipts bring those cells back)."""
    from ..base.record import replace  # noqa: PLC0415
    from ..errors import FrtError  # noqa: PLC0415

    check_route(manifest, route_name)
    why = unpinned(lock, manifest, manifest.route_packages(route_name), project=project)
    if why:
        model = manifest.model
        losing = sorted({rec.file for rec in lock.receipts.values() if rec.problems(manifest)})
        step = f"frt lock --model {model}" + (" --allow-loss" if losing else "")
        drops = (f" (it drops the {len(losing)} receipt(s) measured on route definitions {manifest.file} no longer "
                 f"has: {', '.join(losing[:3])}{', ...' if len(losing) > 3 else ''}; the receipts you measure next "
                 "bring those cells back)") if losing else ""
        raise FrtError(f"route {route_name!r} of {manifest.file} needs packages {lock_label} does not pin as the "
                       f"manifest declares them: {'; '.join(why)}; frt qualify measures with the lock's pins",
                       reasons=[{"route": route_name, "reason": w} for w in why],
                       hints=[f"lock them first: `{step}`{drops}, then `frt qualify --model {model} --route "
                              f"{route_name}{' --key KEY' if manifest.receipt_policy is not None else ''}`, then "
                              f"`frt lock --model {model}`"])
    if manifest.raw == lock.manifest.raw:
        return lock
    return replace(lock, manifest=manifest)


def qualify(lock: Lockfile, route_name: str, *, phases=None, rounds: int | None = None, seed: int = 0,
            hardware: Hardware | None = None, root=None, progress=None, l2_flush: bool = False,
            max_rounds: int | None = None) -> list[QualifyResult]:
    """Measure ``route_name`` against the host in every requested phase band.

    Timing uses the clock the inputs' device needs (``clock_for``): the host's wall clock on
    CPU, CUDA events on a GPU, where ``l2_flush`` overwrites a buffer larger than L2 before
    each measured side.

    ``progress``, when given, receives events: ``{"event": "message", "text"}`` and,
    per timing round, ``{"event": "round", "phase", "round", "rounds"}`` (``rounds`` grows when
    adaptive timing adds rounds, up to ``max_rounds``: the argument, else ``[qualify] max-rounds``,
    else ``MAX_ROUNDS_FACTOR`` times the initial rounds)."""
    import torch  # noqa: PLC0415

    from ..loader.core import load_locked  # noqa: PLC0415
    from ..loader.smoke import smoke_impl  # noqa: PLC0415
    from ..project.discover import lock_root  # noqa: PLC0415
    from ..serve.load import plan_for_route  # noqa: PLC0415

    m = lock.manifest
    emit = progress or (lambda event: None)

    def say(text: str) -> None:
        emit({"event": "message", "text": text})
    phases = check_route(m, route_name, phases)
    route = m.routes[route_name]
    gate = route_gate(route)
    say(f"  gate: certified_fast needs the speedup interval's low end at or above {gate.describe()}")
    if m.host == "vllm":  # a vLLM binding: the route against the same engine with the route detached
        return _qualify_vllm(lock, route_name, phases=phases, rounds=rounds, seed=seed, root=root, progress=progress,
                             max_rounds=max_rounds)
    hw = hardware or Hardware.detect()
    factory = load_host_factory(m.host_entry, m.model, root if root is not None else lock_root(lock))
    tol = m.tolerance
    rounds = rounds or int(m.qualify.get("rounds", DEFAULT_ROUNDS))
    warmup = int(m.qualify.get("warmup", DEFAULT_WARMUP))
    max_rounds = max_rounds or m.qualify.get("max-rounds")

    loaded, entries, problems = {}, {}, []
    for seam, impl_name in sorted(route.seams.items()):
        impl = m.impl(seam, impl_name)
        try:
            pkg = loaded.get(impl.package) or load_locked(lock, impl.package, hardware=hw, root=root)
        except KernelUnavailable as exc:
            problems.append(str(exc))
            continue
        loaded[impl.package] = pkg
        fn = getattr(pkg.module, impl.entry, None)
        if not callable(fn):
            problems.append(f"{impl.package} offers no entry {impl.entry!r} (seam {seam})")
            continue
        entries[seam] = (impl, fn)
    if problems:
        raise KernelUnavailable("route cannot be bound: " + "; ".join(problems),
                                reasons=[{"route": route_name, "reason": p} for p in problems])

    results = []
    for ph in phases:
        phase = m.phases[ph]
        failures = []
        for _seam, (impl, fn) in entries.items():
            why = smoke_impl(fn, impl, phase)
            if why:
                failures.append(why)
        if failures:
            results.append(QualifyResult(ph, False, None, None, failures=failures))
            continue
        rows_list = list(m.qualify.get("rows", {}).get(ph) or sorted({phase.rows[0], min(phase.rows[1], 512)}))
        host = build_host_block(factory, m.host_entry, ph, seed, entries)
        block = build_host_block(factory, m.host_entry, ph, seed, entries)
        # the route runs through the same guarded entries and ledger that serving uses
        plan = plan_for_route(lock, route_name, [ph], hw, loaded, {(seam, ph): fn for seam, (_, fn) in entries.items()})
        for seam in entries:
            block.bind(seam, plan.entry(seam, ph, host=block.host_seams[seam]))
        inputs = {r: host.make_inputs(r, seed=seed + r) for r in rows_list}
        for r, x in inputs.items():
            if not isinstance(x, torch.Tensor):
                raise UsageError(f"host-entry {m.host_entry!r}: make_inputs({r}, seed={seed + r}) returned a "
                                 f"{type(x).__name__}, not a tensor", hints=[HOST_HINT])
        clock = clock_for(hw.backend, next(iter(inputs.values())).device.type)
        say(f"  {ph}: parity over rows {rows_list}")
        with torch.inference_mode():
            ref = _run_all(host, inputs)
            out = _run_all(block, inputs)
            parity = _parity(torch, out, ref, tol)
            null_check = all(torch.equal(ref[r], v) for r, v in _run_all(host, inputs).items())
            # negative control: a perturbed impl on the first seam must fail the same gate
            first = sorted(entries)[0]
            good = block.seams[first]
            block.bind(first, lambda *a, _f=good: _f(*a) * (1 + 1e-2) + 1e-3)
            negative = not _parity(torch, _run_all(block, inputs), ref, tol)["pass"]
            block.bind(first, good)
            led = plan.ledger()["seams"]
            target_calls = {s: led[s]["phases"][ph]["calls"] for s in entries}
            fallbacks = sum(led[s]["phases"][ph]["fallbacks"] for s in entries)
            # detach restores host bit-exactly
            probe = build_host_block(factory, m.host_entry, ph, seed, entries)
            for seam, (_impl, fn) in entries.items():
                probe.bind(seam, fn)
            probe.detach()
            detach_ok = all(torch.equal(ref[r], v) for r, v in _run_all(probe, inputs).items())
            say(f"  {ph}: timing {rounds} paired rounds (+{warmup} warm-up), more while the speedup is undecided")
            speedups: list[float] = []
            # both sides of every round run on the one block, its seams switched between the host's
            # callables and the route's: the same weights in the same memory, so nothing but the
            # seams differs (two block objects measured 2x apart for one run, ~1.0x the next)
            on_host = one_block_side(block, {s: block.host_seams[s] for s in entries})
            on_route = one_block_side(block, {s: block.seams[s] for s in entries})
            timing = _device_timing(torch, on_host, on_route, inputs, clock=clock, l2_flush=l2_flush,
                                    rounds=rounds, warmup=warmup, gate=gate.min_speedup, max_rounds=max_rounds,
                                    speedups=speedups,
                                    tick=lambda i, n, ph=ph: emit({"event": "round", "phase": ph, "round": i, "rounds": n}))
        if not parity["pass"]:
            failures.append(f"parity failed: max-abs {parity['max-abs']:.3g} at rows {parity['worst-case']['rows']} "
                            f"(tolerance abs {tol['abs']:g}, rel {tol['rel']:g})")
        if not null_check:
            failures.append("null check failed: the host is not bit-reproducible")
        if not negative:
            failures.append("negative control passed parity: the gate cannot fail")
        if not detach_ok:
            failures.append("detach did not restore the host bit-exactly")
        if fallbacks:
            failures.append(f"{fallbacks} call(s) fell back to the host")
        if any(n <= 0 for n in target_calls.values()):
            failures.append(f"a seam was never called: {target_calls}")
        if failures:
            results.append(QualifyResult(ph, False, None, None, failures=failures, speedups=speedups))
            continue
        # the same rules `frt lock` applies to the recorded figures
        state, why = speed_state(timing, gate.min_speedup)
        timing["gate"] = gate.to_json()  # the gate the state was decided with (lock judges with the route's own)
        if why and timing["speedup-median"] >= gate.min_speedup:
            say(f"  {ph}: {why}: supported_correct")
        receipt = {
            "schema": "frt.receipt/1",
            "cell": {
                "model": m.model, "binding": m.binding, "family": m.family,
                "route": route_name, "route-digest": route.digest,
                "hardware": {"backend": hw.backend, "arch": hw.arch, "device-class": hw.device_class,
                             "device-name": hw.device_name or hw.device_class},
                "precision": route.precision,
                "layout": entries[sorted(entries)[0]][0].contract.get("layout", "contiguous"),
                "phase": ph, "band": {"rows": list(phase.rows)},
                "software": {k: v for k, v in hw.software.items() if k in ("torch", "cuda", "rocm", "kernels")},
                "assembly": route.assembly,
                "impls": {seam: {"impl": impl.name, "package": impl.package,
                                 "revision": loaded[impl.package].revision,
                                 "variant": loaded[impl.package].variant}
                          for seam, (impl, _) in sorted(entries.items())},
                "calibration": None,
                "inputs": {"source": "synthetic", "seed": seed,
                           "note": f"seeded normal(0, 1) block inputs at rows {rows_list}; weights from host-entry seed {seed}"},
            },
            "state": state,
            "evidence": {"parity": parity, "target-calls": target_calls, "fallbacks": fallbacks, "timing": timing,
                         "null-check": null_check, "negative-control": negative, "detach-restores-host": detach_ok},
            "verdict": "PASS",
        }
        results.append(QualifyResult(ph, True, state, receipt, speedups=speedups))
    return results


def _qualify_vllm(lock, route_name, *, phases, rounds, seed, root, progress, max_rounds) -> list[QualifyResult]:
    from ..project.discover import lock_root  # noqa: PLC0415
    from .vllm import qualify_vllm  # noqa: PLC0415

    m = lock.manifest
    gate = route_gate(m.routes[route_name])
    got = qualify_vllm(lock, route_name, phases=phases, rounds=rounds or int(m.qualify.get("rounds", 10)),
                       warmup=int(m.qualify.get("warmup", 1)), seed=seed,
                       root=root if root is not None else lock_root(lock), progress=progress,
                       max_rounds=max_rounds or m.qualify.get("max-rounds"), timing=_timing, speed_state=speed_state,
                       gate=gate.min_speedup)
    for _ph, _ok, _state, receipt, _failures, _sp in got:
        timing = (receipt or {}).get("evidence", {}).get("timing")
        if timing is not None:  # the gate the state was decided with, as qualify() records it
            timing["gate"] = gate.to_json()
    return [QualifyResult(ph, ok, state, receipt, failures=failures, speedups=sp)
            for ph, ok, state, receipt, failures, sp in got]


def receipt_filename(receipt: dict) -> str:
    """``<route>--<phase>--<precision>--<device class>.json``: each part checked as a name (docs/reference.md#names),
    so the receipt is written inside the folder it is meant for."""
    c = receipt["cell"]
    parts = {"cell.route": c["route"], "cell.phase": c["phase"], "cell.precision": c["precision"],
             "cell.hardware.device-class": c["hardware"]["device-class"]}
    for where, value in parts.items():
        names.check("name", value, where, UsageError)
    return "--".join(parts.values()) + ".json"


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc)


def check_receipt_folder(folder: Path, *, show=str) -> None:
    """Raise ``UsageError`` (exit 2) naming ``folder`` and the cause unless a receipt can be
    written there: ``frt qualify`` calls it before it measures, so a read-only or missing folder
    costs nothing. The folder need not exist yet: then its nearest existing parent must be a
    writable folder (it is created when the first receipt is written, so a qualification that
    writes no receipt leaves nothing behind). The check writes and removes one empty probe file,
    as the write itself would (root ignores permission bits, so only trying tells). ``show``
    turns a path into how messages name it (the CLI: relative to the project)."""
    import os  # noqa: PLC0415
    import tempfile  # noqa: PLC0415

    folder = Path(folder)
    label = show(folder)
    probe = folder
    while not probe.exists() and probe != probe.parent:
        if probe.is_symlink():
            raise UsageError(f"receipts folder {label}: {show(probe)} is a dangling symbolic link",
                             hints=["point --out at a folder you can write"])
        probe = probe.parent
    if not probe.is_dir():
        raise UsageError(f"receipts folder {label}: {show(probe)} is not a folder",
                         hints=["point --out at a folder you can write"])
    try:
        fd, tmp = tempfile.mkstemp(prefix=".frt-write-check.", suffix=".tmp", dir=probe)
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        where = "" if probe == folder else f" (its nearest existing folder {show(probe)})"
        raise UsageError(f"receipts folder {label}{where} cannot be written: {_why(exc)}",
                         hints=["qualification writes one receipt per band there; make it writable, "
                                "or pass --out DIR for another folder"]) from None


def check_signing_policy(policy, device_class: str, *, manifest_file: str, key=None, unsigned: bool = False,
                         root=None, command: str = "frt qualify") -> None:
    """Before anything is measured: where the manifest's ``[trust.receipts]`` ``policy`` covers
    ``device_class`` (this machine's), a receipt written unsigned would be rejected by `frt lock`,
    so qualifying without a key (``key``: the private key of ``--sign``) is a ``UsageError``
    (exit 2) unless ``unsigned`` (``--unsigned``: on purpose, to be signed afterwards); and a key
    whose public key the policy does not list (read from the project ``root``) is one too."""
    if policy is None or not policy.covers(device_class) or unsigned:
        return
    where = f"{manifest_file}: [trust.receipts]"
    if key is None:
        listed = ", ".join(policy.keys) or "none (identities only)"
        raise UsageError(f"{where} covers device class {device_class!r} (this machine): an unsigned receipt would "
                         f"be rejected by `frt lock`; nothing was measured",
                         hints=[f"sign as you qualify: {command} --sign KEY (a private key whose public key the "
                                f"policy lists; listed: {listed})",
                                "or pass --unsigned to qualify on purpose without signing, then sign the receipts: "
                                "frt sign --key KEY RECEIPT... (or --sigstore)"])
    if root is None:
        return
    from ..provenance.signing import keyid, read_policy_keys  # noqa: PLC0415

    pinned = read_policy_keys(Path(root), policy, manifest_file=manifest_file)
    mine = keyid(key.public_key())
    if mine not in {k.keyid for k in pinned.values()}:
        listed = ", ".join(f"{rel} ({k.keyid})" for rel, k in pinned.items()) or "none (identities only)"
        raise UsageError(f"--sign: key {mine} is not one {where} lists (listed: {listed}): `frt lock` would reject "
                         "the receipts it signs; nothing was measured",
                         hints=["sign with a listed key, or add this key's public key to [trust.receipts] keys "
                                "(openssl pkey -in KEY -pubout) after review"])


def keep_previous(path: Path, new_digest: str) -> list[Path]:
    """Before a receipt with ``new_digest`` is written at ``path``: move the signature files beside
    ``path`` (``.sig``, ``.sigstore``) and the receipt there now aside (``superseded_path``), in
    that order, so a receipt is never replaced while a signature over its old bytes stays beside
    it (an interruption leaves at worst the old receipt unsigned, never signed wrongly). Nothing
    moves when the receipt there is the same (its canonical digest is ``new_digest``): its
    signatures still hold. A signature file without a receipt moves aside tagged with its own
    bytes' digest. Returns where each moved file went. ``OSError`` from a move propagates."""
    import os  # noqa: PLC0415
    import shutil  # noqa: PLC0415

    from ..base.canonical import sha256_hex  # noqa: PLC0415
    from ..lock.build import rejected_digest  # noqa: PLC0415 - a file's digest, whatever its contents
    from ..provenance.signing import signature_files  # noqa: PLC0415

    path = Path(path)
    there = os.path.lexists(path)
    sigs = signature_files(path)
    if not there and not sigs:
        return []
    old = rejected_digest(path) if there else None
    if old == new_digest:
        return []
    moved = []
    for sig in sigs:
        tag = old if there and old != "unreadable" else "sha256:" + sha256_hex(sig.read_bytes() if sig.is_file() else b"")
        base = superseded_path(path, tag)
        dest = base.with_name(base.name + sig.name[len(path.name):])  # <kept name>.sig / .sigstore
        os.replace(sig, dest)
        moved.append(dest)
    if there:
        tag = old if old != "unreadable" else "sha256:" + sha256_hex(str(path).encode())
        dest = superseded_path(path, tag)
        if path.is_symlink() or not path.is_file():
            os.replace(path, dest)
        elif not os.path.lexists(dest):
            try:  # a second name for the old bytes: `path` itself is replaced atomically next
                os.link(path, dest)
            except OSError:
                shutil.copy2(path, dest)
        moved.append(dest)
    return moved


def write_receipt(receipt: dict, folder: Path, *, label: str | None = None, written=(), kept: list | None = None) -> Path:
    """Write ``receipt`` into ``folder`` (created if needed) atomically: a failure (a full disk, a
    folder made read-only meanwhile) leaves no partial file and raises ``UsageError`` naming the
    path and the cause; ``written`` lists receipts this run already wrote (they are complete, and kept).

    A receipt already at that name (re-qualifying the same cell) is kept, not lost: it and its
    signature files move aside first (``keep_previous``; ``kept``, when given, receives where)."""
    from ..base.canonical import digest  # noqa: PLC0415

    path = Path(folder) / receipt_filename(receipt)
    shown = f"{label}/{path.name}" if label else str(path)
    try:
        moved = keep_previous(path, digest(receipt))
    except OSError as exc:
        raise UsageError(f"cannot move the previous receipt {shown} or its signature aside: {_why(exc)}; "
                         "it was not replaced", hints=["make the folder writable, then qualify again"]) from None
    if kept is not None:
        kept.extend(moved)
    try:
        write_atomic(path, (json.dumps(receipt, indent=2, sort_keys=True) + "\n").encode("utf-8"))
    except OSError as exc:
        hints = ["nothing partial was left; free space or fix the folder, then qualify again"]
        if written:
            hints.append("kept, complete: " + ", ".join(written))
        raise UsageError(f"cannot write the receipt {shown}: {_why(exc)}", hints=hints) from None
    return path
