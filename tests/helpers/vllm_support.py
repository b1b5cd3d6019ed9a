"""Test support for the vLLM plugin: a tiny Qwen2 made locally, a vLLM binding project, and a runner
that starts a real vLLM engine in a subprocess (``python tests/helpers/vllm_support.py run CONFIG``).

Nothing is downloaded: the model is random weights saved by ``transformers`` with a word-level
tokenizer built by ``tokenizers``; every run sets ``HF_HUB_OFFLINE=1``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HIDDEN, INTER = 128, 256
# scripts/gpu-check runs the engine tests on a GPU with FRT_VLLM_DEVICE=cuda: the layers' contract and package
# variant follow it
DEVICE = os.environ.get("FRT_VLLM_DEVICE", "cpu")

LAYERS_SRC = '''"""Layers following the `kernels` layer convention: forward is called as vLLM's op forward
and reads the op's own attributes."""
import torch
from torch import nn


class RMSNorm(nn.Module):
    def forward(self, x, residual=None):
        if residual is not None:
            x = x + residual
            residual = x
        var = x.float().pow(2).mean(-1, keepdim=True)
        out = (x.float() * torch.rsqrt(var + self.variance_epsilon)).to(x.dtype) * self.weight
        return out if residual is None else (out, residual)


class RMSNormB(nn.Module):
    """The same norm computed another way (in float64): a second impl, for per-band routing."""

    def forward(self, x, residual=None):
        if residual is not None:
            x = x + residual
            residual = x
        xd = x.double()
        out = (xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)).to(x.dtype) * self.weight
        return out if residual is None else (out, residual)


class SiluAndMul(nn.Module):
    def forward(self, x):
        d = x.shape[-1] // 2
        return nn.functional.silu(x[..., :d]) * x[..., d:]
'''

INIT_SRC = '''from . import layers  # noqa: F401
'''


def make_tiny_qwen2(out: Path) -> Path:
    """A 2-layer Qwen2 (hidden 128) with random weights and a byte-level BPE tokenizer trained here."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(["the quick brown fox jumps over the lazy dog"] * 10, trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>").save_pretrained(out)
    cfg = Qwen2Config(vocab_size=320, hidden_size=HIDDEN, intermediate_size=INTER, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      eos_token_id=0, bos_token_id=0, tie_word_embeddings=False)
    torch.manual_seed(0)
    Qwen2ForCausalLM(cfg).to(torch.float32).save_pretrained(out)
    return out


def binding_manifest(model: str = "tiny-qwen2", *, decode=(1, 16), prefill=(17, 256)) -> dict:
    def impl(pkg, layer, width):
        return {"package": pkg, "layer": layer, "precision": "fp32",
                "contract": {"device": DEVICE, "dtypes": ["float32"], "layout": "contiguous", "width": width},
                "smoke": {"inputs": [{"shape": ["rows", width], "dtype": "float32"}]}}

    return {
        "schema": "frt.manifest/1", "model": model, "binding": "tiny_qwen2_vllm", "host": "vllm",
        "host-model": "models/tiny-qwen2", "family": "qwen2", "default-precision": "fp32",
        "packages": {"frt-vllm/rmsnorm": {"path": "packages/rmsnorm"},
                     "frt-vllm/silu-mul": {"path": "packages/silu-mul"}},
        "phases": {"decode": {"rows": list(decode)}, "prefill": {"rows": list(prefill)}},
        "seams": {
            "norm": {"structure": "rms_norm@1", "vllm-op": "RMSNorm",
                     "impls": {"rms": impl("frt-vllm/rmsnorm", "RMSNorm", HIDDEN),
                               "rms_b": impl("frt-vllm/rmsnorm", "RMSNormB", HIDDEN)}},
            "act": {"structure": "silu_and_mul@1", "vllm-op": "SiluAndMul",
                    "impls": {"silu": impl("frt-vllm/silu-mul", "SiluAndMul", 2 * INTER)}},
        },
        "routes": {"eager": {"assembly": "eager", "seams": {"norm": "rms", "act": "silu"}},
                   "compiled": {"assembly": "compile", "seams": {"norm": "rms", "act": "silu"}},
                   "compiled-b": {"assembly": "compile", "seams": {"norm": "rms_b", "act": "silu"}},
                   # vLLM's default form on a GPU (torch.compile + CUDA graphs): scripts/gpu-check's engine tests
                   "captured": {"assembly": "compile-then-capture", "seams": {"norm": "rms", "act": "silu"}},
                   "captured-b": {"assembly": "compile-then-capture", "seams": {"norm": "rms_b", "act": "silu"}}},
        "qualify": {"tolerance": {"abs": 1e-3, "rel": 1e-3}},
    }


def package_specs() -> dict:
    mod = {"__init__.py": INIT_SRC, "layers.py": LAYERS_SRC}
    where = {} if DEVICE == "cpu" else {"variant": "torch-universal", "backend": DEVICE}
    return {"rmsnorm": {"name": "rmsnorm", "module": mod, "id": "_frt_vllm_rmsnorm_v1", **where},
            "silu-mul": {"name": "silu-mul", "module": mod, "id": "_frt_vllm_silu_mul_v1", **where}}


def engine_hardware():
    """What the plugin decides with on this machine: the detected hardware plus vLLM's version."""
    from frt_dist.serve.vllm.plugin import Engine

    return Engine.hardware()


def make_project(root: Path, model_dir: Path, receipts=(("eager", "decode"), ("eager", "prefill")), **kw):
    """A vLLM binding project at ``root`` whose lock accepts ``receipts`` on this machine."""
    from .factories import TinyProject

    tp = TinyProject(Path(root), manifest=binding_manifest(**kw), packages=package_specs())
    (tp.root / "models").mkdir(exist_ok=True)
    link = tp.root / "models" / "tiny-qwen2"
    if not link.exists():
        link.symlink_to(Path(model_dir).resolve())
    tp.lock(receipts=list(receipts), hardware=engine_hardware())
    return tp


def engine_env(project: Path | None, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FRT_")}
    env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
                "PYTHONDONTWRITEBYTECODE": "1", "VLLM_LOGGING_LEVEL": "INFO", "OMP_NUM_THREADS": "1",
                "VLLM_CPU_OMP_THREADS_BIND": "nobind"})
    if project is not None:
        env.update({"FRT_MODEL": "tiny-qwen2", "FRT_PROJECT": str(project)})
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run_engine(config: dict, env: dict, *, timeout: int = 480) -> tuple[int, dict | None, str]:
    """Start an engine in a subprocess with ``config``; (exit code, its JSON result or None, its log)."""
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "run", json.dumps(config)], env=env,
                          cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True, timeout=timeout)
    result = None
    for line in proc.stdout.splitlines():
        if line.startswith("FRT-RESULT "):
            result = json.loads(line[len("FRT-RESULT "):])
    return proc.returncode, result, proc.stdout + proc.stderr


PROMPTS = [[5, 6, 7, 8], list(range(10, 40))]  # 4 rows (decode band) and 30 rows (prefill band)


def _generate(llm, prompts, max_tokens):
    from vllm import SamplingParams

    sp = SamplingParams(temperature=0, max_tokens=max_tokens, logprobs=1, ignore_eos=True)
    outs = llm.generate([{"prompt_token_ids": p} for p in prompts], sp, use_tqdm=False)
    res = []
    for o in outs:
        c = o.outputs[0]
        res.append({"tokens": list(c.token_ids),
                    "logprobs": [lp[t].logprob for lp, t in zip(c.logprobs, c.token_ids, strict=False)]})
    return res


def _run(config: dict) -> None:
    import time

    from vllm import LLM

    graphs = {}
    if DEVICE == "cuda" and not config.get("eager", True):  # the compiled form without CUDA graphs, unless asked
        sizes = config.get("capture_sizes")
        graphs = {"compilation_config": {"cudagraph_capture_sizes": sizes} if sizes else {"cudagraph_mode": "NONE"}}

    def engine():
        return LLM(model=config["model"], enforce_eager=config.get("eager", True), dtype="float32",
                   max_model_len=256, max_num_batched_tokens=config.get("max_num_batched_tokens", 256),
                   max_num_seqs=config.get("max_num_seqs", 8), seed=0,
                   kv_cache_memory_bytes=32 << 20, skip_tokenizer_init=True, enable_prefix_caching=False, **graphs)

    out = {}
    prompts = config.get("prompts", PROMPTS)
    from frt_dist.serve.vllm import plugin

    def gen(llm):
        if config.get("sequential"):  # one request at a time: a prompt's prefill is exactly its length in rows
            return [r for p in prompts for r in _generate(llm, [p], config.get("max_tokens", 6))]
        return _generate(llm, prompts, config.get("max_tokens", 6))

    if config.get("plain_first"):  # vLLM's own engine first, in this process: frt's op classes out of its registry
        from vllm.model_executor.custom_op import op_registry_oot

        plugin.register()
        ours = dict(op_registry_oot)
        op_registry_oot.clear()
        plain = engine()
        out["plain"] = gen(plain)
        op_registry_oot.update(ours)
    t0 = time.perf_counter()
    llm = engine()
    out["start-s"] = time.perf_counter() - t0

    eng = plugin.engine()
    out["active"] = eng is not None and eng.plan is not None
    out["on"] = gen(llm)
    from torch._dynamo.utils import counters

    out["graph-breaks"] = {k: sum(v.values()) if hasattr(v, "values") else v for k, v in counters["graph_break"].items()}
    if eng is not None and eng.plan is not None:
        out["ledger"] = eng.ledger()
        if config.get("register_again"):
            from vllm.model_executor.custom_op import op_registry_oot

            before = dict(op_registry_oot)
            plugin.register()
            plugin.register()
            out["registry-unchanged"] = dict(op_registry_oot) == before
        if config.get("detach"):
            eng.detach()
            out["off"] = gen(llm)
            out["ledger-after-detach"] = eng.plan.ledger()["totals"]
    print("FRT-RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "run":
        _run(json.loads(sys.argv[2]))
    elif sys.argv[1] == "model":
        make_tiny_qwen2(Path(sys.argv[2]))


def once_per_run(tmp_path_factory, name: str, compute):
    """``compute()`` once per test run, whichever pytest-xdist worker asks first, its JSON result shared with the
    others through the run's base temporary folder (the pytest-xdist recipe for a session fixture that must run
    once): an engine start-up two workers would otherwise both pay for."""
    from filelock import FileLock

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # shared by the workers of this run
    path = root / f"frt-once-{name}.json"
    with FileLock(str(path) + ".lock"):
        if path.is_file():
            return json.loads(path.read_text("utf-8"))
        result = compute()
        path.write_text(json.dumps(result), "utf-8")
        return result
