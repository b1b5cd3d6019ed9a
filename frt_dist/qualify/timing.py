"""Paired alternating timing (``paired_timing``: warm-up, then host and route in ABBA order, adaptive
against the gate), the clock a cell's device needs (``clock_for``: the host's wall clock on CPU, CUDA
events on a GPU), and a GPU run's device facts (``device_timing``)."""

from __future__ import annotations

import statistics
import time

from ..errors import UsageError
from .stats import CI_NARROW, ci_decision, median_ci

__all__ = ["CLOCKS", "MAX_ROUNDS_FACTOR", "clock_for", "wall_clock", "cuda_event_clock", "l2_flush_buffer",
           "paired_timing", "device_timing"]


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


def wall_clock(block, xs) -> float:
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


MAX_ROUNDS_FACTOR = 4
"""Without ``[qualify] max-rounds`` adaptive timing runs at most this many times the initial rounds."""


def paired_timing(host, route, inputs, *, rounds: int, warmup: int, tick=None, measure=wall_clock,
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
        if ci_decision(ci, gate) is not None:
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


def device_timing(torch, host, block, inputs, *, clock: str, l2_flush: bool, **kw) -> dict:
    """``paired_timing`` with ``clock``; a CUDA run also records the GPU (NVML: name, driver, clocks
    at start and end of timing) and whether L2 was flushed."""
    first = next(iter(inputs.values()))
    if clock == "perf-counter":
        return {**paired_timing(host, block, inputs, **kw), "clock": clock}
    from ..system.detect import nvml_clocks, nvml_device_facts  # noqa: PLC0415

    flush = l2_flush_buffer(torch, first.device) if l2_flush else None
    gpu, _ = nvml_device_facts()
    start = nvml_clocks()
    timing = paired_timing(host, block, inputs, measure=cuda_event_clock(torch, flush), **kw)
    device = {"name": (gpu or {}).get("name") or torch.cuda.get_device_name(first.device),
              "driver": (gpu or {}).get("driver"), "cuda-driver": (gpu or {}).get("cuda-driver"),
              "clocks-start": start, "clocks-end": nvml_clocks()}
    return {**timing, "clock": clock, "l2-flush": bool(l2_flush), "device": device}
