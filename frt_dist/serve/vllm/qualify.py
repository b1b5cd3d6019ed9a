"""``frt qualify`` on a vLLM binding: the route against the same engine with the route detached.

One vLLM engine runs in this process (the engine core in-process), with the plugin bound to
the route under qualification (``FRT_QUALIFY_ROUTE``: every band the route is asked for, no
receipt consulted) in the form the route's ``assembly`` names (``eager``: ``enforce_eager``;
``compile``: vLLM's compiled form). Greedy generation from fixed prompts whose lengths are the
manifest's qualify rows (``[qualify] rows``, else each band's low end and ``min(high, 128)``)
gives prefill calls at those row counts and decode calls at 1 row, so every band's rows run.

- **parity** at the output boundary: the generated tokens are identical and each token's
  logprob is within the manifest's tolerance of the host's;
- **ledger**: the route's calls > 0 in every band qualified, fallbacks 0;
- **null check**: two host runs give identical tokens and logprobs;
- **negative control**: the first seam's layer perturbed (x (1 + 1e-2) + 1e-3) must fail parity;
- **timing**: paired alternating rounds, route vs host, each the whole generation of every
  prompt (the ratio is of the engine's decode, not of one op);
- **detach** (``plan.detach``) restores the host bit-exactly.

Host vs route inside one engine is switched by the plugin's routing table (``Engine.routed``):
the same weights in the same memory. A compiled engine's graph holds what it traced, so the
route cannot be switched off inside it: only ``eager`` routes are qualified here (the form a
serving engine runs is checked against the receipt's ``assembly`` at its start-up).
"""

from __future__ import annotations

import os
import time

__all__ = ["qualify_vllm"]

_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def _cases(m, phases) -> list[int]:
    rows = set()
    for ph in phases:
        band = m.phases[ph]
        listed = m.qualify.get("rows", {}).get(ph)
        rows.update(listed or {max(band.rows[0], 1), min(band.rows[1], 128)})
    return sorted(rows)


def qualify_vllm(lock, route_name: str, *, phases, rounds: int, warmup: int, seed: int, root, progress=None,
                 max_rounds=None, timing, speed_state, gate: float):
    """``QualifyResult``-shaped dicts per phase: ``(phase, ok, state, receipt, failures, speedups)``."""
    from ...errors import UsageError  # noqa: PLC0415

    m = lock.manifest
    route = m.routes[route_name]
    emit = progress or (lambda event: None)

    def say(text):
        emit({"event": "message", "text": text})

    if route.assembly != "eager":
        raise UsageError(f"route {route_name!r}: assembly {route.assembly!r}; on a vLLM binding `frt qualify` "
                         "measures eager routes (route and host switched in one engine; a compiled graph holds "
                         "what it traced)", hints=["declare an eager twin of the route and qualify that"])
    model_dir = (root / m.host_model).resolve()
    if not (model_dir / "config.json").is_file():
        raise UsageError(f"{m.file}: host-model: {model_dir} holds no Hugging Face model (config.json)")
    os.environ.update({"FRT_MODEL": m.model, "FRT_QUALIFY_ROUTE": route_name, "FRT_QUALIFY_PHASES": ",".join(phases),
                       "FRT_FALLBACK": "host", "FRT_PROJECT": str(root), "VLLM_ENABLE_V1_MULTIPROCESSING": "0"})
    if lock.path:
        os.environ["FRT_LOCK"] = str(lock.path)
    cases = _cases(m, phases)
    top = max(cases)
    say(f"  starting vLLM on {m.host_model} (eager, {_DTYPES.get(route.precision, route.precision)})")
    from vllm import LLM, SamplingParams  # noqa: PLC0415

    from . import plugin  # noqa: PLC0415

    try:
        plugin.register()  # vLLM loads it too; a second call is a no-op
        llm = _engine(LLM, model_dir, route, top, seed)
    except Exception:
        if plugin.last_error() is not None:  # frt refused at the engine's start: its own error, not vLLM's
            raise plugin.last_error() from None
        raise
    eng = plugin.engine()
    sp = SamplingParams(temperature=0, max_tokens=4, logprobs=0, ignore_eos=True)
    return _measure(llm, eng, sp, lock, route_name, route, m, phases, cases, rounds, warmup, seed, emit, say,
                    max_rounds, timing, speed_state, gate)


def _engine(LLM, model_dir, route, top, seed):
    return LLM(model=str(model_dir), enforce_eager=True, dtype=_DTYPES.get(route.precision, route.precision),
              max_model_len=max(256, top + 16), max_num_batched_tokens=max(256, top + 16), max_num_seqs=8, seed=seed,
              skip_tokenizer_init=True, kv_cache_memory_bytes=64 << 20,
              # every run computes its prefill: a cached prefix would hand one side the other's KV
              enable_prefix_caching=False)


def _measure(llm, eng, sp, lock, route_name, route, m, phases, cases, rounds, warmup, seed, emit, say, max_rounds,
             timing, speed_state, gate):
    prompts = [{"prompt_token_ids": [(seed + 7 * i + r) % 200 + 2 for i in range(r)]} for r in cases]

    def generate():
        outs = []
        for p in prompts:  # one prompt at a time: its prefill is exactly its length in rows
            o = llm.generate([p], sp, use_tqdm=False)[0].outputs[0]
            outs.append((list(o.token_ids), [lp[t].logprob for lp, t in zip(o.logprobs, o.token_ids, strict=False)]))
        return outs

    def side(routed):
        def run(_xs):
            eng.routed(routed)
            return generate()
        return run

    def measure(block, xs):
        t0 = time.perf_counter()
        block(xs)
        return time.perf_counter() - t0

    tol = m.tolerance

    def parity(a, b):
        worst = 0.0
        same = True
        for (ta, la), (tb, lb) in zip(a, b, strict=False):
            same = same and ta == tb
            worst = max([worst] + [abs(x - y) for x, y in zip(la, lb, strict=False)])
        return {"tokens-identical": same, "max-abs": worst, "tolerance": tol,
                "pass": same and worst <= tol["abs"] + tol["rel"] * 1.0}

    say(f"  parity over prompts of {cases} tokens")
    eng.routed(False)
    ref = generate()
    null_check = generate() == ref
    eng.routed(True)
    out = generate()
    par = parity(out, ref)
    first = sorted(route.seams)[0]
    eng.perturb(first, True)
    negative = not parity(generate(), ref)["pass"]
    eng.perturb(first, False)
    led = eng.plan.ledger()["seams"]
    say(f"  timing {rounds} paired rounds (+{warmup} warm-up)")
    speedups: list = []
    tm = timing(side(False), side(True), {r: None for r in cases}, rounds=rounds, warmup=warmup, measure=measure,
                gate=gate, max_rounds=max_rounds, speedups=speedups,
                tick=lambda i, n: emit({"event": "round", "phase": ",".join(phases), "round": i, "rounds": n}))
    eng.routed(True)
    eng.plan.detach()
    detach_ok = generate() == ref
    import vllm  # noqa: PLC0415

    from ...system.hardware import software_version  # noqa: PLC0415

    hw = eng.plan.hardware
    results = []
    for ph in phases:
        calls = {s: led[s]["phases"][ph]["calls"] for s in route.seams}
        fallbacks = sum(led[s]["phases"][ph]["fallbacks"] for s in route.seams)
        failures = []
        if not par["pass"]:
            failures.append(f"parity failed: tokens identical {par['tokens-identical']}, logprob max-abs "
                            f"{par['max-abs']:.3g} (tolerance abs {tol['abs']:g})")
        if not null_check:
            failures.append("null check failed: two host runs differ")
        if not negative:
            failures.append("negative control passed parity: the gate cannot fail")
        if not detach_ok:
            failures.append("detach did not restore the host bit-exactly")
        if fallbacks:
            failures.append(f"{fallbacks} call(s) fell back to vLLM's own op")
        if any(n <= 0 for n in calls.values()):
            failures.append(f"a seam was never called in the {ph} band: {calls}")
        if failures:
            results.append((ph, False, None, None, failures, speedups))
            continue
        state, _why = speed_state(tm, gate)
        band = m.phases[ph]
        receipt = {
            "schema": "frt.receipt/1",
            "cell": {
                "model": m.model, "binding": m.binding, "family": m.family,
                "route": route_name, "route-digest": route.digest,
                "hardware": {"backend": hw.backend, "arch": hw.arch, "device-class": hw.device_class,
                             "device-name": hw.device_name or hw.device_class},
                "precision": route.precision,
                "layout": m.impl(first, route.seams[first]).contract.get("layout", "contiguous"),
                "phase": ph, "band": {"rows": list(band.rows)},
                "software": {**{k: v for k, v in hw.software.items() if k in ("torch", "cuda", "rocm", "kernels")},
                             "vllm": software_version(vllm.__version__)},
                "assembly": route.assembly,
                "impls": {s: {"impl": i, "package": m.impl(s, i).package,
                              "revision": eng.plan.packages[m.impl(s, i).package].revision,
                              "variant": eng.plan.packages[m.impl(s, i).package].variant}
                          for s, i in sorted(route.seams.items())},
                "calibration": None,
                "inputs": {"source": "synthetic", "seed": seed,
                           "note": f"greedy generation (4 tokens) in vLLM {vllm.__version__} from fixed prompts of "
                                   f"{cases} tokens; model {m.host_model}"},
            },
            "state": state,
            "evidence": {"parity": {"max-abs": par["max-abs"], "max-rel": 0.0, "tolerance": tol,
                                    "worst-case": {"rows": max(cases)}, "pass": True},
                         "target-calls": calls, "fallbacks": fallbacks, "timing": tm,
                         "null-check": null_check, "negative-control": negative, "detach-restores-host": detach_ok},
            "verdict": "PASS",
        }
        results.append((ph, True, state, receipt, [], speedups))
    return results
