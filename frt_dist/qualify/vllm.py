"""``frt qualify`` on a vLLM binding: the route against vLLM's own ops, in the form the route names,
band by band, on engine steps whose rows lie in the band.

vLLM runs in this process (the engine core in-process), with the plugin bound to the route under
qualification (``plugin.register(lock, qualifying=...)``: every band asked for, no receipt consulted),
in the form the route's ``assembly`` names:

- ``eager`` (``enforce_eager``): one engine; host and route are switched by the plugin's routing
  table (``Engine.routed``): the same weights in the same memory, vLLM's own op on the host side.
- ``compile`` (vLLM's default ``torch.compile``) and, on a GPU, ``compile-then-capture`` (with CUDA
  graphs): two engines in this process on the same model: the host is an engine built without frt
  (frt's op classes out of vLLM's registry while it is built), so it runs vLLM's own ops compiled
  (and captured) as vLLM does; the route is an engine whose graph calls ``frt::dispatch`` at the
  seams.

**What each band is measured on** (``steps_for``): a band's qualify rows (``[qualify] rows``, else
the band's low end and ``min(high, 128)``) are each one *sample*: a ``decode`` band (its name says
decode, or its rows are at most ``DECODE_MAX``) is ``r`` sequences decoding together, so every timed
step has ``r`` rows (their prefill runs in a first step that is not timed); any other band is one
prompt of ``r`` tokens, so its one step (the prefill) has ``r`` rows. Only those steps are timed
(``LLMEngine.step``, one scheduler step each): a band's figure comes from its own steps, and its
receipt records the steps it measured (``evidence.timing.steps``).

Per band: **parity** at the output boundary of those samples (identical greedy tokens, every
logprob within the manifest's tolerance); the **ledger** (the route's calls > 0 in the band,
fallbacks 0); the **null check** (two host runs identical); the **negative control** (the first
seam's layer perturbed, x (1 + 1e-2) + 1e-3, must fail parity); **timing** in paired alternating
rounds (``timing``: the same statistics and adaptive rule as every qualification), and at the end
**detach** (``plan.detach``): vLLM's own ops again, bit-exactly in an eager engine, and within the
parity gate of the host in a compiled one (vLLM's op then runs inside ``frt::dispatch``, eagerly,
where the host engine runs it fused by Inductor).
"""

from __future__ import annotations

import os
import time

from .gates import band_failures, speed_verdict
from .gates import receipt as make_receipt
from .timing import paired_timing

__all__ = ["qualify_vllm", "steps_for", "DECODE_MAX", "DECODE_STEPS", "MIN_ROUNDS"]

_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}

DECODE_MAX = 64
"""A band whose qualify rows are all at most this (or whose name says decode) is timed on decode steps."""
DECODE_STEPS = 8
"""Decode steps timed per decode sample (after its untimed prefill step)."""
MIN_ROUNDS = 20
"""In-engine timing runs at least this many paired rounds per band (a round costs milliseconds of
engine steps; fewer rounds gave one state one run and another the next)."""
PROMPT = 1  # tokens per prompt of a decode sample: its prefill step has the band's rows too


def steps_for(m, phases) -> dict:
    """``{phase: (kind, [rows, ...])}``: what each band is measured on."""
    out = {}
    for ph in phases:
        band = m.phases[ph]
        listed = m.qualify.get("rows", {}).get(ph)
        rows = sorted(set(listed or {max(band.rows[0], 1), min(band.rows[1], 128)}))
        decode = "decode" in ph or ("prefill" not in ph and max(rows) <= DECODE_MAX)
        out[ph] = ("decode" if decode and max(rows) <= DECODE_MAX else "prefill", rows)
    return out


def qualify_vllm(lock, route_name: str, *, phases, rounds: int, warmup: int, seed: int, root, progress=None,
                 max_rounds=None, gate):
    """``QualifyResult``-shaped tuples per phase: ``(phase, ok, state, receipt, failures, speedups)``. Every
    setting is an argument: ``root`` the project, ``gate`` the route's (``documents.manifest.Gate``)."""
    from ..errors import UsageError  # noqa: PLC0415

    m = lock.manifest
    route = m.routes[route_name]
    emit = progress or (lambda event: None)

    def say(text):
        emit({"event": "message", "text": text})

    from vllm.platforms import current_platform  # noqa: PLC0415

    cuda = current_platform.is_cuda_alike()
    forms = ("eager", "compile", "compile-then-capture") if cuda else ("eager", "compile")
    if route.assembly not in forms:
        raise UsageError(f"route {route_name!r}: assembly {route.assembly!r}; vLLM runs {', '.join(forms)} on this "
                         "machine (compile-then-capture is vLLM's form with CUDA graphs: qualify it on the GPU that "
                         "serves it)",
                         hints=["run `frt qualify` on the GPU, or declare a route with assembly \"compile\" here"])
    model_dir = (root / m.host_model).resolve()
    if not (model_dir / "config.json").is_file():
        raise UsageError(f"{m.file}: host-model: {model_dir} holds no Hugging Face model (config.json)")
    # vLLM's own setting: the engine core runs in this process, where the plugin's engine is the one
    # `register(..., qualifying=...)` made (frt's own settings go to it as arguments, not the environment)
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    plan = steps_for(m, phases)
    top = max(max(rows) * (PROMPT if kind == "decode" else 1) for kind, rows in plan.values())
    seqs = max([8] + [max(rows) for kind, rows in plan.values() if kind == "decode"])
    compiled = route.assembly != "eager"
    # on a GPU vLLM captures CUDA graphs unless told not to: a `compile` route is measured without them
    graphs = {"compilation_config": {"cudagraph_mode": "NONE"}} if cuda and route.assembly == "compile" else {}
    dtype = _DTYPES.get(route.precision, route.precision)
    from vllm import LLM  # noqa: PLC0415
    from vllm.model_executor.custom_op import op_registry_oot  # noqa: PLC0415

    from ..serve.vllm import plugin  # noqa: PLC0415

    def engine():
        return LLM(model=str(model_dir), enforce_eager=not compiled, dtype=dtype,
                   max_model_len=max(256, top + DECODE_STEPS + 16), max_num_batched_tokens=max(256, top + 16),
                   max_num_seqs=seqs, seed=seed, skip_tokenizer_init=True, kv_cache_memory_bytes=64 << 20,
                   # every run computes its prefill (a cached prefix would hand one side the other's KV), and one
                   # step() is one scheduled step
                   enable_prefix_caching=False, async_scheduling=False, **graphs)

    try:
        # the lock measured (the manifest as it is now), the route in the bands asked for; vLLM's own call of
        # the plugin hook is then a no-op
        plugin.register(lock, qualifying=plugin.Qualifying(route_name, tuple(phases), root))
        host_llm = None
        if compiled:
            say(f"  starting vLLM on {m.host_model} without frt (compile, {dtype}): the host")
            ours = {k: v for k, v in op_registry_oot.items() if getattr(v, "_frt_seam", None) is not None}
            for k in ours:
                del op_registry_oot[k]
            try:
                host_llm = engine()
            finally:
                op_registry_oot.update(ours)
        say(f"  starting vLLM on {m.host_model} with the route ({route.assembly}, {dtype})")
        llm = engine()
    except Exception:
        if plugin.last_error() is not None:  # frt refused at the engine's start: its own error, not vLLM's
            raise plugin.last_error() from None
        raise
    eng = plugin.engine()
    return _measure(llm, host_llm, eng, lock, route_name, route, m, phases, plan, max(rounds, MIN_ROUNDS), warmup,
                    seed, emit, say, max_rounds, gate)


class _Sample:
    """One band's sample: the requests, the steps timed, and what they produced."""

    def __init__(self, kind: str, rows: int, seed: int):
        self.kind, self.rows = kind, rows
        if kind == "prefill":
            self.prompts = [[(seed + 7 * i + rows) % 200 + 2 for i in range(rows)]]
            self.max_tokens, self.skip = 1, 0
        else:
            self.prompts = [[(seed + 11 * s + j) % 200 + 2 for j in range(PROMPT)] for s in range(rows)]
            self.max_tokens, self.skip = 1 + DECODE_STEPS, 1

    def run(self, llm) -> tuple[float, list, list]:
        """(seconds in the timed steps, [(tokens, logprobs)] per request, [rows per timed step])."""
        from vllm import SamplingParams  # noqa: PLC0415

        e = llm.llm_engine
        sp = SamplingParams(temperature=0, max_tokens=self.max_tokens, logprobs=0, ignore_eos=True)
        ids = []
        for p in self.prompts:
            rid = f"frt-q-{next(_ids)}"
            e.add_request(rid, {"prompt_token_ids": p}, sp)
            ids.append(rid)
        done, spent, step, shapes = {}, 0.0, 0, []
        while e.has_unfinished_requests():
            t0 = time.perf_counter()
            outs = e.step()
            dt = time.perf_counter() - t0
            if step >= self.skip:
                spent += dt
                shapes.append(self.rows)
            step += 1
            for o in outs:
                if o.finished:
                    c = o.outputs[0]
                    done[o.request_id] = (list(c.token_ids),
                                          [lp[t].logprob for lp, t in zip(c.logprobs, c.token_ids, strict=False)])
        return spent, [done[i] for i in ids], shapes


def _counter():
    n = 0
    while True:
        n += 1
        yield n


_ids = _counter()


def _measure(llm, host_llm, eng, lock, route_name, route, m, phases, plan, rounds, warmup, seed, emit, say, max_rounds,
             gate):
    compiled = host_llm is not None
    tol = m.tolerance
    samples = {ph: [_Sample(kind, r, seed) for r in rows] for ph, (kind, rows) in plan.items()}

    def host_run(ss):
        if compiled:
            return [s.run(host_llm) for s in ss]
        eng.routed(False)
        return [s.run(llm) for s in ss]

    def route_run(ss):
        eng.routed(True)
        return [s.run(llm) for s in ss]

    def outputs(runs):
        return [o for _, outs, _ in runs for o in outs]

    def parity(a, b):
        worst, same = 0.0, True
        for (ta, la), (tb, lb) in zip(a, b, strict=True):
            same = same and ta == tb
            worst = max([worst] + [abs(x - y) for x, y in zip(la, lb, strict=False)])
        return {"tokens-identical": same, "max-abs": worst, "tolerance": tol,
                "pass": same and worst <= tol["abs"] + tol["rel"] * 1.0}

    first = sorted(route.seams)[0]
    led0 = eng.plan.ledger()["seams"]
    checks = {}
    for ph in phases:
        ss = samples[ph]
        say(f"  {ph}: parity over {plan[ph][0]} steps of rows {plan[ph][1]}")
        ref = outputs(host_run(ss))
        null_check = outputs(host_run(ss)) == ref
        before = eng.plan.ledger()["seams"]
        par = parity(outputs(route_run(ss)), ref)
        after = eng.plan.ledger()["seams"]
        eng.perturb(first, True)
        negative = not parity(outputs(route_run(ss)), ref)["pass"]
        eng.perturb(first, False)
        calls = {s: after[s]["phases"][ph]["calls"] - before[s]["phases"][ph]["calls"] for s in route.seams}
        fallbacks = sum(after[s]["phases"][ph]["fallbacks"] for s in route.seams)
        checks[ph] = (ref, null_check, par, negative, calls, fallbacks)
    del led0
    timings, all_speedups = {}, {}
    for ph in phases:
        ss = samples[ph]
        shapes: list = []

        def measure(block, _xs, _ss=ss, _shapes=shapes):
            runs = block(_ss)
            _shapes[:] = [r for _, _, rs in runs for r in rs]
            return sum(t for t, _, _ in runs)

        say(f"  {ph}: timing {rounds} paired rounds (+{warmup} warm-up) on {plan[ph][0]} steps, more while the "
            f"speedup is undecided against the gate {gate.min_speedup:g}")
        speedups: list = []
        tm = paired_timing(host_run, route_run, {r: None for r in plan[ph][1]}, rounds=rounds, warmup=warmup,
                           measure=measure, gate=gate.min_speedup, max_rounds=max_rounds, speedups=speedups,
                    tick=lambda i, n, ph=ph: emit({"event": "round", "phase": ph, "round": i, "rounds": n}))
        tm["steps"] = {"kind": plan[ph][0], "rows": plan[ph][1], "per-sample": len(shapes) // max(1, len(ss)),
                       "form": route.assembly,
                       "host": "vLLM's own ops, compiled by vLLM (an engine without frt)" if compiled
                       else "vLLM's own ops in the same eager engine"}
        timings[ph], all_speedups[ph] = tm, speedups
    eng.routed(True)
    eng.plan.detach()
    eng.table = {}
    detached = {ph: outputs([s.run(llm) for s in samples[ph]]) for ph in phases}
    return _receipts(eng, route_name, route, m, phases, plan, checks, timings, all_speedups, detached, parity,
                     compiled, seed, gate)


def _receipts(eng, route_name, route, m, phases, plan, checks, timings, all_speedups, detached, parity, compiled, seed,
              gate):
    import vllm  # noqa: PLC0415

    from ..system.hardware import software_version  # noqa: PLC0415

    tol = m.tolerance
    hw = eng.plan.hardware
    results = []
    for ph in phases:
        ref, null_check, par, negative, calls, fallbacks = checks[ph]
        detach_ok = parity(detached[ph], ref)["pass"] if compiled else detached[ph] == ref
        failures = band_failures(
            ph, parity=par, null_check=null_check, negative=negative, detach_ok=detach_ok, exact_detach=not compiled,
            parity_failure=(f"tokens identical {par['tokens-identical']}, logprob max-abs {par['max-abs']:.3g} "
                            f"(tolerance abs {tol['abs']:g})"),
            fallbacks=fallbacks, calls=calls, host="vLLM's own op")
        if failures:
            results.append((ph, False, None, None, failures, all_speedups[ph]))
            continue
        tm = timings[ph]
        state, _why = speed_verdict(tm, gate)
        kind, rows = plan[ph]
        receipt = make_receipt(
            m, route_name, hw, ph, impls={s: m.impl(s, i) for s, i in route.seams.items()}, packages=eng.plan.packages,
            software={**{k: v for k, v in hw.software.items() if k in ("torch", "cuda", "rocm", "kernels")},
                      "vllm": software_version(vllm.__version__)},
            inputs={"source": "synthetic", "seed": seed,
                    "note": (f"vLLM {vllm.__version__} ({route.assembly}) engine steps of {rows} rows: "
                             + (f"{rows} sequences decoding together, {DECODE_STEPS} timed steps each"
                                if kind == "decode" else "one prompt of that many tokens, its prefill step")
                             + f"; greedy tokens; model {m.host_model}")},
            state=state,
            evidence={"parity": {"max-abs": par["max-abs"], "max-rel": 0.0, "tolerance": tol,
                                 "worst-case": {"rows": max(rows)}, "pass": True},
                      "target-calls": calls, "fallbacks": fallbacks, "timing": tm,
                      "null-check": null_check, "negative-control": negative, "detach-restores-host": detach_ok})
        results.append((ph, True, state, receipt, [], all_speedups[ph]))
    return results
