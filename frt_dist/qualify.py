"""The qualification door: ``frt qualify --model X --route R``.

Runs the route and the unmodified host in one process on this machine and
writes one receipt per phase band (SPEC §3 "Receipt", §7). Never called by
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

``certified_fast`` only when the route's ``gate.min-speedup`` is cleared (and
the median speedup is above 1); otherwise ``supported_correct``. A failed
check writes no receipt.

The host binding is the manifest's ``host-entry = "module:callable"``: a
factory ``(phase, *, seed) -> block`` where ``block(x)`` runs the binding,
``block.seams`` maps seam → callable, ``block.bind(seam, fn)`` swaps one,
``block.detach()`` restores the host and ``block.make_inputs(rows, seed=)``
builds the seeded input.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import names
from .errors import KernelUnavailable, UsageError
from .hardware import Hardware
from .lockfile import Lockfile, write_atomic
from .receipt import MIN_CERT_ROUNDS

__all__ = ["qualify", "QualifyResult", "write_receipt", "receipt_filename", "load_host_factory"]

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


def load_host_factory(spec: str | None, model: str, root=None):
    """The host-entry factory; its module is found from the project ``root`` first
    (``project.import_entry``: no ``PYTHONPATH`` needed, nothing installed shadowed)."""
    from .project import import_entry  # noqa: PLC0415

    if not spec:
        raise UsageError(f"model {model!r}: the manifest declares no `host-entry = \"module:callable\"`; "
                         "qualification needs the unmodified host")
    try:
        return import_entry(spec, root)
    except (ImportError, AttributeError) as exc:
        raise UsageError(f"host-entry {spec!r} cannot be imported: {exc}") from None


def _parity(torch, outs_route, outs_host, tol) -> dict:
    worst = {"rows": None, "max-abs": -1.0}
    max_abs = max_rel = 0.0
    ok = True
    for rows in sorted(outs_host):
        a, b = outs_route[rows], outs_host[rows]
        if not torch.isfinite(a).all():
            ok = False
            max_abs = float("inf")
            worst = {"rows": rows, "max-abs": float("inf")}
            continue
        err = (a - b).abs()
        m_abs = float(err.max())
        m_rel = float((err / (b.abs() + tol["abs"])).max())
        ok &= bool((err <= tol["abs"] + tol["rel"] * b.abs()).all())
        if m_abs > worst["max-abs"]:
            worst = {"rows": rows, "max-abs": m_abs}
        max_abs, max_rel = max(max_abs, m_abs), max(max_rel, m_rel)
    return {"max-abs": max_abs, "max-rel": max_rel, "tolerance": dict(tol), "worst-case": worst, "pass": ok}


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


def _timing(host, route, inputs, *, rounds: int, warmup: int, tick=None, measure=_wall_clock) -> dict:
    """Paired alternating timing over the same inputs (warm-up rounds first, then host/route in
    ABBA order); per-round speedup = host / route. ``measure(block, xs) -> seconds`` is the clock."""
    xs = list(inputs.values())
    for _ in range(warmup):
        measure(host, xs)
        measure(route, xs)
    th, tr, sp = [], [], []
    for i in range(rounds):
        if i % 2 == 0:
            h = measure(host, xs)
            r = measure(route, xs)
        else:
            r = measure(route, xs)
            h = measure(host, xs)
        th.append(h)
        tr.append(r)
        sp.append(h / r)
        if tick:
            tick(i + 1)
    q = statistics.quantiles(sp, n=4) if len(sp) >= 2 else [sp[0]] * 3
    return {"method": "paired-alternating", "rounds": rounds, "warmup": warmup, "rows": list(inputs),
            "host-median-ms": round(statistics.median(th) * 1e3, 4),
            "route-median-ms": round(statistics.median(tr) * 1e3, 4),
            "speedup-median": round(statistics.median(sp), 4), "speedup-min": round(min(sp), 4),
            "speedup-max": round(max(sp), 4), "speedup-p25": round(q[0], 4), "speedup-p75": round(q[2], 4)}


def _device_timing(torch, host, block, inputs, *, clock: str, l2_flush: bool, **kw) -> dict:
    """``_timing`` with ``clock``; a CUDA run also records the GPU (NVML: name, driver, clocks
    at start and end of timing) and whether L2 was flushed."""
    first = next(iter(inputs.values()))
    if clock == "perf-counter":
        return {**_timing(host, block, inputs, **kw), "clock": clock}
    from .detect import nvml_clocks, nvml_device_facts  # noqa: PLC0415

    flush = l2_flush_buffer(torch, first.device) if l2_flush else None
    gpu, _ = nvml_device_facts()
    start = nvml_clocks()
    timing = _timing(host, block, inputs, measure=cuda_event_clock(torch, flush), **kw)
    device = {"name": (gpu or {}).get("name") or torch.cuda.get_device_name(first.device),
              "driver": (gpu or {}).get("driver"), "cuda-driver": (gpu or {}).get("cuda-driver"),
              "clocks-start": start, "clocks-end": nvml_clocks()}
    return {**timing, "clock": clock, "l2-flush": bool(l2_flush), "device": device}


def qualify(lock: Lockfile, route_name: str, *, phases=None, rounds: int | None = None, seed: int = 0,
            hardware: Hardware | None = None, root=None, progress=None, l2_flush: bool = False) -> list[QualifyResult]:
    """Measure ``route_name`` against the host in every requested phase band.

    Timing uses the clock the inputs' device needs (``clock_for``): the host's wall clock on
    CPU, CUDA events on a GPU, where ``l2_flush`` overwrites a buffer larger than L2 before
    each measured side.

    ``progress``, when given, receives events: ``{"event": "message", "text"}`` and,
    per timing round, ``{"event": "round", "phase", "round", "rounds"}``."""
    import torch  # noqa: PLC0415

    from .loader import load_locked, lock_root  # noqa: PLC0415
    from .serve import plan_for_route  # noqa: PLC0415
    from .loader.smoke import smoke_impl  # noqa: PLC0415

    m = lock.manifest
    emit = progress or (lambda event: None)

    def say(text: str) -> None:
        emit({"event": "message", "text": text})
    if route_name not in m.routes:
        raise UsageError(f"unknown route {route_name!r} for model {m.model!r} (valid: {', '.join(m.routes)})")
    phases = list(phases or m.phases)
    for ph in phases:
        if ph not in m.phases:
            raise UsageError(f"unknown phase {ph!r} for model {m.model!r} (valid: {', '.join(m.phases)})")
    route = m.routes[route_name]
    hw = hardware or Hardware.detect()
    factory = load_host_factory(m.host_entry, m.model, root if root is not None else lock_root(lock))
    tol = m.tolerance
    rounds = rounds or int(m.qualify.get("rounds", DEFAULT_ROUNDS))
    warmup = int(m.qualify.get("warmup", DEFAULT_WARMUP))

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
        for seam, (impl, fn) in entries.items():
            why = smoke_impl(fn, impl, phase)
            if why:
                failures.append(why)
        if failures:
            results.append(QualifyResult(ph, False, None, None, failures=failures))
            continue
        rows_list = list(m.qualify.get("rows", {}).get(ph) or sorted({phase.rows[0], min(phase.rows[1], 512)}))
        host = factory(ph, seed=seed)
        block = factory(ph, seed=seed)
        # the route runs through the same guarded entries and ledger that serving uses
        plan = plan_for_route(lock, route_name, [ph], hw, loaded, {(seam, ph): fn for seam, (_, fn) in entries.items()})
        for seam in entries:
            block.bind(seam, plan.entry(seam, ph, host=block.host_seams[seam]))
        inputs = {r: host.make_inputs(r, seed=seed + r) for r in rows_list}
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
            probe = factory(ph, seed=seed)
            for seam, (impl, fn) in entries.items():
                probe.bind(seam, fn)
            probe.detach()
            detach_ok = all(torch.equal(ref[r], v) for r, v in _run_all(probe, inputs).items())
            say(f"  {ph}: timing {rounds} paired rounds (+{warmup} warm-up)")
            timing = _device_timing(torch, host, block, inputs, clock=clock, l2_flush=l2_flush,
                                    rounds=rounds, warmup=warmup,
                                    tick=lambda i, ph=ph: emit({"event": "round", "phase": ph, "round": i, "rounds": rounds}))
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
            results.append(QualifyResult(ph, False, None, None, failures=failures))
            continue
        gate = route.min_speedup if route.min_speedup is not None else 1.0
        fast = timing["speedup-median"] >= gate and timing["speedup-median"] > 1.0
        # the same rule `frt lock` applies: a speed claim needs enough paired rounds
        state = "certified_fast" if fast and rounds >= MIN_CERT_ROUNDS else "supported_correct"
        if fast and rounds < MIN_CERT_ROUNDS:
            say(f"  {ph}: {rounds} timing rounds are too few for a speed claim (>= {MIN_CERT_ROUNDS}): supported_correct")
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
        results.append(QualifyResult(ph, True, state, receipt))
    return results


def receipt_filename(receipt: dict) -> str:
    """``<route>--<phase>--<precision>--<device class>.json``: each part checked as a name (SPEC §21),
    so the receipt is written inside the folder it is meant for."""
    c = receipt["cell"]
    parts = {"cell.route": c["route"], "cell.phase": c["phase"], "cell.precision": c["precision"],
             "cell.hardware.device-class": c["hardware"]["device-class"]}
    for where, value in parts.items():
        names.check("name", value, where, UsageError)
    return "--".join(parts.values()) + ".json"


def write_receipt(receipt: dict, folder: Path) -> Path:
    path = Path(folder) / receipt_filename(receipt)
    write_atomic(path, (json.dumps(receipt, indent=2, sort_keys=True) + "\n").encode("utf-8"))
    return path
