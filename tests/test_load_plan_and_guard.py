"""``load`` → ``Plan``: refusal before import, supply and smoke, guard, ledger,
no measurement on the serving path, and compiler-friendly entries."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest
import torch

import frt_dist
from frt_dist import ContractViolation, KernelUnavailable, RouteRefused, UsageError, loader
from frt_dist.serve.load import load
from helpers.factories import CPU, NORM_SRC, impl_doc, manifest_doc, tiny_project
from helpers.paths import BUNDLED

BOTH = [("fast", "decode"), ("fast", "prefill")]
W = torch.randn(8)


@pytest.fixture(autouse=True)
def fresh(monkeypatch, tmp_path):
    loader._forget_all()
    for var in ("FRT_MIRROR", "FRT_LOCK", "HF_HUB_OFFLINE", loader.pin_env_name("t-org/scale")):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("KERNELS_CACHE", str(tmp_path / "kcache"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hfcache"))
    yield
    loader._forget_all()


def _project(tmp_path, receipts=BOTH, **kw):
    tp = tiny_project(tmp_path, **kw)
    return tp, tp.lock(receipts=receipts)


@pytest.fixture
def plan(tmp_path):
    _, lock = _project(tmp_path)
    return load("tiny", lockfile=lock.path, hardware=CPU)


def _x(rows, width=8, **kw):
    return torch.randn(rows, width, **kw)


# ---------------------------------------------------------------------------
# load: decide, supply, bind


def test_load_binds_the_chosen_route(plan):
    assert {p: (d.decision, d.route, d.state) for p, d in plan.decisions.items()} == {
        "decode": ("route", "fast", "certified_fast"), "prefill": ("route", "fast", "certified_fast")}
    x = _x(4)
    assert torch.equal(plan.entry("act", "decode")(x, W), x * W)
    assert plan.entry("act", "decode") is plan.entry("act", "decode")  # prebuilt at bind time
    assert sorted(plan.packages) == ["t-org/norm", "t-org/scale"]
    view = plan.ledger()["seams"]["act"]["phases"]["decode"]
    assert view["probes"] == {"scale_out": "offered", "scale_fast": "not offered"}
    assert view["calls"] == 1


def test_a_refused_band_stops_load_before_anything_is_imported(tmp_path):
    _, lock = _project(tmp_path, receipts=[("fast", "decode")])
    before = set(sys.modules)
    with pytest.raises(RouteRefused) as ei:
        load("tiny", lockfile=lock.path, hardware=CPU)
    assert set(sys.modules) == before and loader._LOADED == {} and loader.unavailable_report() == []
    assert ei.value.reasons == [
        {"phase": "prefill", "route": "fast", "reason": "no receipt for this cell: receipts cover phase decode, not prefill",
         "kind": "phase-not-covered"},
        {"phase": "prefill", "route": "solo", "reason": "no receipt for this cell", "kind": "no-receipt"}]


def test_host_decided_band_needs_the_callers_host(tmp_path):
    _, lock = _project(tmp_path, receipts=[("fast", "decode")])
    plan = load("tiny", lockfile=lock.path, hardware=CPU, fallback="host")
    assert plan.decisions["prefill"].decision == "host"
    with pytest.raises(RouteRefused) as ei:
        plan.entry("act", "prefill")
    assert str(ei.value) == ("prefill band is decided host (fast: no receipt for this cell: receipts cover phase "
                             "decode, not prefill; solo: no receipt for this cell); entry('act', 'prefill') needs host=")
    host_calls = []
    entry = plan.entry("act", "prefill", host=lambda x, w: host_calls.append(x) or x)
    x = _x(100)
    assert entry(x, W) is x and len(host_calls) == 1
    led = plan.ledger()
    assert (led["seams"]["act"]["host-calls"], led["seams"]["act"]["bind-refusals"]) == (1, 1)
    assert led["totals"] == {"calls": 1, "fallbacks": 0, "host-decisions": 1, "host-calls": 1, "refusals": 1}
    assert led["host-bands"] == ["prefill"]


def test_host_decisions_count_the_bands_decided_host_before_any_call(tmp_path):
    """With every band decided host, totals.host-decisions said 0 until a call came."""
    _, lock = _project(tmp_path, receipts=[])
    plan = load("tiny", lockfile=lock.path, hardware=CPU, fallback="host")
    led = plan.ledger()
    assert led["host-bands"] == ["decode", "prefill"]
    assert led["totals"] == {"calls": 0, "fallbacks": 0, "host-decisions": 2, "host-calls": 0, "refusals": 0}
    plan.entry("act", "decode", host=lambda x, w: x)(_x(2), W)
    plan.entry("act", "prefill", host=lambda x, w: x)(_x(100), W)
    assert plan.ledger()["totals"] == {"calls": 2, "fallbacks": 0, "host-decisions": 2, "host-calls": 2, "refusals": 0}
    lines = plan.ledger(format="prometheus").splitlines()
    assert "# TYPE frt_host_decisions gauge" in lines and 'frt_host_decisions{model="tiny"} 2' in lines
    assert 'frt_host_calls_total{model="tiny"} 2' in lines


def test_a_seam_the_route_does_not_bind_is_the_hosts(tmp_path):
    _, lock = _project(tmp_path, receipts=[("solo", "decode"), ("solo", "prefill")])
    plan = load("tiny", lockfile=lock.path, hardware=CPU)
    assert plan.decisions["decode"].route == "solo" and sorted(plan.packages) == ["t-org/scale"]
    with pytest.raises(RouteRefused) as ei:
        plan.entry("norm", "decode")
    assert str(ei.value) == "route 'solo' chosen for the decode band does not bind seam 'norm'; pass host="
    entry = plan.entry("norm", "decode", host=lambda x, w: x)
    entry(_x(2), W)
    norm = plan.ledger()["seams"]["norm"]
    assert (norm["calls"], norm["host-calls"], norm["phases"]["decode"]["decision"]) == (1, 1, "unbound")


def test_the_lockfile_in_force_is_found(tmp_path, monkeypatch):
    tp, lock = _project(tmp_path)
    assert load("tiny", project=tp.root, hardware=CPU).lockfile.path == str(tp.lock_path)
    monkeypatch.chdir(tp.root)
    assert load("tiny", hardware=CPU).lockfile.lock_digest == lock.lock_digest
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FRT_LOCK", str(tp.lock_path))
    assert load("tiny", hardware=CPU).lockfile.path == str(tp.lock_path)
    with pytest.raises(UsageError, match="is for model 'tiny', not 'other'"):
        load("other", hardware=CPU)
    monkeypatch.delenv("FRT_LOCK")
    with pytest.raises(frt_dist.LockfileError, match="no lockfile for model 'other'"):
        load("other", project=tp.root, hardware=CPU)


def test_unknown_seam_or_phase(plan):
    with pytest.raises(UsageError, match="unknown seam 'attn' for model 'tiny' \\(seams: act, norm\\)"):
        plan.entry("attn", "decode")
    with pytest.raises(UsageError, match="unknown phase 'train' for model 'tiny' \\(phases: decode, prefill\\)"):
        plan.entry("act", "train")


# ---------------------------------------------------------------------------
# smoke, entries, integrity: one KernelUnavailable with every reason


def test_every_smoke_failure_is_listed(tmp_path):
    seams = {
        "act": {"structure": "a@1", "impls": {"raises": impl_doc("t-org/scale", "scale")}},
        "norm": {"structure": "n@1", "impls": {"nan": impl_doc("t-org/norm", "norm")}},
        "out": {"structure": "o@1", "impls": {"shape": impl_doc("t-org/out", "project", expect=["rows", 4])}},
    }
    manifest = manifest_doc(
        packages={"t-org/scale": {"path": "packages/scale"}, "t-org/norm": {"path": "packages/norm"},
                  "t-org/out": {"path": "packages/out"}},
        seams=seams, routes={"fast": {"assembly": "eager", "seams": {"act": "raises", "norm": "nan", "out": "shape"}}},
        phases={"decode": {"rows": [1, 16]}})
    packages = {
        "scale": {"name": "scale", "source": "def scale(x, w):\n    raise RuntimeError('boom')\n"},
        "norm": {"name": "norm", "source": "def norm(x, w):\n    return x * float('nan')\n"},
        "out": {"name": "out", "source": "def project(x, w):\n    return x\n"},
    }
    _, lock = _project(tmp_path, receipts=[("fast", "decode")], manifest=manifest, packages=packages)
    with pytest.raises(KernelUnavailable) as ei:
        load("tiny", lockfile=lock.path, hardware=CPU)
    assert [(r["seam"], r["kind"], r["reason"]) for r in ei.value.reasons] == [
        ("act", "smoke", "smoke of act/raises (t-org/scale.scale) at rows=1 (decode): raised RuntimeError: boom"),
        ("norm", "smoke", "smoke of norm/nan (t-org/norm.norm) at rows=1 (decode): output has non-finite values"),
        ("out", "smoke", "smoke of out/shape (t-org/out.project) at rows=1 (decode): output shape [1, 8], expected [1, 4]"),
    ]
    assert [r["repo"] for r in loader.unavailable_report()] == ["t-org/scale", "t-org/norm", "t-org/out"]


def test_smoke_runs_at_each_bands_rows(tmp_path):
    seen = "ROWS = []\n\ndef scale(x, w):\n    ROWS.append(x.shape[0])\n    return x * w\n"
    pkgs = {"scale": {"name": "scale", "source": seen}, "norm": {"name": "norm", "source": NORM_SRC}}
    _, lock = _project(tmp_path, packages=pkgs)
    plan = load("tiny", lockfile=lock.path, hardware=CPU)
    assert plan.packages["t-org/scale"].module.ROWS == [1, 64]
    assert plan.ledger()["totals"]["calls"] == 0  # smoke calls are not serving calls


def test_a_missing_entry_is_refused_and_a_missing_probe_is_not(tmp_path):
    manifest = manifest_doc()
    manifest["seams"]["act"]["impls"]["scale"]["entry"] = "scale_v2"
    _, lock = _project(tmp_path, manifest=manifest)
    with pytest.raises(KernelUnavailable) as ei:
        load("tiny", lockfile=lock.path, hardware=CPU)
    rev = lock.packages["t-org/scale"].revision
    assert [(r["phase"], r["reason"]) for r in ei.value.reasons] == [
        ("decode", f"package t-org/scale revision {rev} does not export the entry 'scale_v2'"),
        ("prefill", f"package t-org/scale revision {rev} does not export the entry 'scale_v2'")]


def test_damaged_package_fails_load_with_each_file(tmp_path):
    tp, lock = _project(tmp_path)
    f = tp.root / "packages" / "norm" / "build" / "torch-cpu" / "norm" / "__init__.py"
    f.write_text(NORM_SRC + "# edited\n")
    before = set(sys.modules)
    with pytest.raises(KernelUnavailable) as ei:
        load("tiny", lockfile=lock.path, hardware=CPU)
    assert not [m for m in set(sys.modules) - before if m.startswith("_frt_test")]
    assert [(r["kind"], r["path"]) for r in ei.value.reasons] == [("mismatched", "build/torch-cpu/norm/__init__.py")]


# ---------------------------------------------------------------------------
# the guard


def test_guard_boundaries_and_reasons(plan):
    entry = plan.entry("act", "decode")
    for rows in (1, 16):
        entry(_x(rows), W)
    cases = [
        (_x(0), "rows", "input 1: rows 0 outside decode band [1, 16]"),
        (_x(17), "rows", "input 1: rows 17 outside decode band [1, 16]"),
        (torch.randn(8, 8).t(), "layout", "input 1: not contiguous"),
        (torch.randn(4, 16)[:, ::2], "layout", "input 1: not contiguous"),
        (_x(4, dtype=torch.float16), "dtype", "input 1: dtype float16 not in [float32]"),
        (_x(4, 9), "width", "input 1: width 9 not 8"),
        (torch.empty(4, 8, device="meta"), "device", "input 1: device meta not cpu"),
    ]
    for x, kind, why in cases:
        with pytest.raises(ContractViolation) as ei:
            entry(x, W)
        assert str(ei.value) == f"seam 'act' (decode): {why}"
        assert ei.value.reasons == [{"seam": "act", "phase": "decode", "kind": kind, "reason": why}]
    act = plan.ledger()["seams"]["act"]
    assert act["contract-misses"] == {"device": 1, "dtype": 1, "layout": 2, "rows": 2, "width": 1}
    assert (act["calls"], act["contract-refusals"], act["fallbacks"]) == (9, 7, 0)


def test_every_call_shape_is_guarded_the_same(plan):
    """The guard's fastest path is the smoke's call shape (two positional tensors here);
    keywords or all-keyword calls take other paths with the same contract and counts."""
    entry, x = plan.entry("act", "decode"), _x(4)
    for call in (lambda t: entry(t, W), lambda t: entry(t, w=W), lambda t: entry(x=t, w=W)):
        assert torch.equal(call(x), x * W)
        for bad, why in ((_x(17), "input 1: rows 17 outside decode band [1, 16]"), (_x(4, 9), "input 1: width 9 not 8"),
                         (torch.randn(8, 8).t(), "input 1: not contiguous")):
            with pytest.raises(ContractViolation, match=why.replace("[", r"\[").replace("]", r"\]")):
                call(bad)
    # a call the kernel's signature cannot take is a contract miss, not a raw TypeError
    with pytest.raises(ContractViolation, match=r"3 positional arguments; scale\(\) takes at most 2"):
        entry(x, W, W)
    with pytest.raises(ContractViolation, match="unexpected keyword argument 'eps'"):
        entry(x, W, eps=1e-5)
    act = plan.ledger()["seams"]["act"]
    assert (act["calls"], act["contract-refusals"]) == (14, 11)
    assert act["contract-misses"] == {"rows": 3, "width": 3, "layout": 3, "arity": 2}


def test_several_misses_in_one_call_are_all_named(plan):
    with pytest.raises(ContractViolation) as ei:
        plan.entry("act", "decode")(torch.randn(40, 16, dtype=torch.float64)[:, ::2], W)
    assert str(ei.value) == ("seam 'act' (decode): input 1: dtype float64 not in [float32]; input 1: not contiguous; "
                             "input 1: rows 40 outside decode band [1, 16]")


def test_host_policy_falls_back_and_counts(tmp_path):
    _, lock = _project(tmp_path)
    plan = load("tiny", lockfile=lock.path, hardware=CPU, fallback="host")
    host = lambda x, w: "host"  # noqa: E731
    entry = plan.entry("act", "decode", host=host)
    assert torch.is_tensor(entry(_x(4), W)) and entry(_x(17), W) == "host"
    act = plan.ledger()["seams"]["act"]
    assert (act["calls"], act["fallbacks"], act["contract-misses"]) == (2, 1, {"rows": 1})
    strict = load("tiny", lockfile=lock.path, hardware=CPU)  # fallback="refuse": host= does not license a fallback
    with pytest.raises(ContractViolation):
        strict.entry("act", "decode", host=host)(_x(17), W)


def test_detach_leaves_the_host_path(plan):
    kernel = plan.entry("act", "decode")
    with_host = plan.entry("act", "decode", host=lambda x, w: "host")
    plan.detach()
    assert with_host(_x(2), W) == "host"
    with pytest.raises(RouteRefused, match="the plan was detached"):
        kernel(_x(2), W)
    with pytest.raises(RouteRefused, match="the plan was detached"):
        plan.entry("act", "decode")
    assert plan.entry("act", "decode", host=lambda x, w: "h")(_x(2), W) == "h"
    assert plan.ledger()["detached"] is True


# ---------------------------------------------------------------------------
# ledger


def test_ledger_and_prometheus(tmp_path, monkeypatch):
    _, lock = _project(tmp_path)
    rev = lock.packages["t-org/scale"].revision
    monkeypatch.setenv(loader.pin_env_name("t-org/scale"), rev)
    with pytest.raises(KernelUnavailable, match="author pin FRT_KERNEL_REV_T_ORG_SCALE"):
        load("tiny", lockfile=lock.path, hardware=CPU)
    plan = load("tiny", lockfile=lock.path, hardware=CPU, allow_pins=True)
    entry = plan.entry("act", "decode")
    entry(_x(2), W)
    entry(_x(3), W)
    with pytest.raises(ContractViolation):
        entry(_x(20), W)
    led = plan.ledger()
    act, norm = led["seams"]["act"], led["seams"]["norm"]
    receipts = {p: d.receipt for p, d in plan.decisions.items()}
    assert {k: act[k] for k in ("calls", "fallbacks", "contract-misses", "bind-refusals", "route", "state", "receipt",
                                "packages", "pinned", "observed")} == {
        "calls": 3, "fallbacks": 0, "contract-misses": {"rows": 1}, "bind-refusals": 0,
        "route": {"decode": "fast", "prefill": "fast"},
        "state": {"decode": "certified_fast", "prefill": "certified_fast"},
        "receipt": receipts, "packages": {"t-org/scale": rev}, "pinned": True, "observed": True}
    assert norm["pinned"] is False
    assert led["totals"] == {"calls": 3, "fallbacks": 0, "host-decisions": 0, "host-calls": 0, "refusals": 1}
    assert led["lock-digest"] == lock.lock_digest and led["hardware"] == CPU.to_dict()
    text = plan.ledger(format="prometheus")
    lines = text.splitlines()
    assert "# HELP frt_seam_calls_total Calls that entered the frt guard, per seam and phase band." in lines
    assert "# TYPE frt_seam_calls_total counter" in lines
    assert 'frt_seam_calls_total{model="tiny",seam="act",phase="decode",route="fast",state="certified_fast"} 3' in lines
    assert 'frt_seam_contract_misses_total{model="tiny",seam="act",phase="decode",reason="rows"} 1' in lines
    assert (f'frt_package_info{{model="tiny",repo="t-org/scale",revision="{rev}",variant="torch-cpu",source="path",'
            'pinned="true"} 1') in lines
    assert act["captures"] == 0 and act["notes"] == []
    plan.counts("act", "decode").captures = 2  # what two calls during a CUDA graph capture leave (no GPU here)
    act = plan.ledger()["seams"]["act"]
    assert act["captures"] == 2 and act["phases"]["decode"]["captures"] == 2
    assert act["notes"] == ["captured in CUDA graphs: 2 call(s) of the decode band were captured into CUDA graphs; "
                            "each counted once, at capture (its checks ran then); replays run no Python and are not counted"]
    assert 'frt_seam_captures_total{model="tiny",seam="act",phase="decode",route="fast",state="certified_fast"} 2' in \
        plan.ledger(format="prometheus").splitlines()
    assert 'frt_refusals_total{model="tiny"} 1' in lines
    assert all(ln.startswith(("# HELP frt_", "# TYPE frt_", "frt_")) for ln in lines)
    with pytest.raises(UsageError):
        plan.ledger(format="json")


# ---------------------------------------------------------------------------
# no measurement on the serving path


FRT_SRC = str(Path(frt_dist.__file__).parent) + os.sep


@pytest.fixture
def forbid_measurement(monkeypatch):
    """Any clock read from frt code, any benchmark timer, cudnn autotuning or CUDA
    timing event, and any import of frt's qualification door, fails the test."""
    seen = []

    def clock(name, orig):
        def wrapper(*a, **k):
            caller = sys._getframe(1).f_code.co_filename
            if caller.startswith(FRT_SRC):
                seen.append((name, caller))
                raise AssertionError(f"time.{name} called from {caller}")
            return orig(*a, **k)
        return wrapper

    for name in ("perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "process_time", "process_time_ns",
                 "thread_time", "thread_time_ns", "time", "time_ns"):
        monkeypatch.setattr(time, name, clock(name, getattr(time, name)))

    def forbidden(*a, **k):
        seen.append(("forbidden", a))
        raise AssertionError("measurement on the serving path")

    import torch.utils.benchmark as tub

    monkeypatch.setattr(tub, "Timer", forbidden)
    monkeypatch.setattr(torch.cuda, "Event", forbidden)
    monkeypatch.setattr(torch.cuda, "synchronize", forbidden)
    cudnn_cls = type(torch.backends.cudnn)
    monkeypatch.setattr(cudnn_cls, "benchmark", property(lambda self: False, lambda self, v: forbidden()), raising=False)

    class Blocker:
        def find_spec(self, name, path=None, target=None):
            if name.startswith(("frt_dist.qualify", "frt_dist.bench")):
                seen.append(("import", name))
                raise ImportError(f"{name} imported on the serving path")
            return None

    blocker = Blocker()
    sys.meta_path.insert(0, blocker)
    for mod in [m for m in sys.modules if m.startswith(("frt_dist.qualify", "frt_dist.bench"))]:
        monkeypatch.delitem(sys.modules, mod)
    yield seen
    sys.meta_path.remove(blocker)


def test_load_resolve_and_calls_never_measure(tmp_path, forbid_measurement):
    tp, lock = _project(tmp_path)
    lock_bytes = Path(lock.path).read_bytes()
    plan = load("tiny", lockfile=lock.path, hardware=CPU, fallback="host")
    frt_dist.resolve(lock.path, hardware=CPU, phase="decode")
    entry = plan.entry("act", "decode", host=lambda x, w: x)
    for rows in (1, 8, 16, 17):
        entry(_x(rows), W)
    plan.ledger()
    plan.ledger(format="prometheus")
    assert forbid_measurement == []
    assert Path(lock.path).read_bytes() == lock_bytes  # nothing written back
    with pytest.raises(AssertionError):  # the tripwire itself works
        exec(compile("import time; time.perf_counter()", FRT_SRC + "probe.py", "exec"), {})


# ---------------------------------------------------------------------------
# torch.compile


def test_entries_compile_without_graph_breaks_and_the_ledger_says_so(tmp_path):
    _, lock = _project(tmp_path)
    plan = load("tiny", lockfile=lock.path, hardware=CPU)
    outside = plan.entry("norm", "decode")

    def block(x, w):
        h = outside(x, w)  # entry obtained outside the compiled function
        return plan.entry("act", "decode")(h, w) + x  # ... and inside it

    explained = torch._dynamo.explain(block)(_x(4), W)
    assert explained.graph_break_count == 0, explained.break_reasons
    compiled = torch.compile(block, fullgraph=True, backend="eager")
    x = _x(4)
    torch.testing.assert_close(compiled(x, W), block(x, W))
    led = plan.ledger()
    act = led["seams"]["act"]
    assert act["observed"] is False and act["phases"]["decode"]["observed"] is False
    assert act["notes"] == ["not observed under compilation: calls of the decode band inside compiled graphs are not counted"]
    assert act["calls"] == 1  # the one eager call of block(); compiled calls are not counted
    with pytest.raises(ContractViolation, match="rows 17 outside decode band"):
        torch.compile(block, backend="eager")(_x(17), W)


# ---------------------------------------------------------------------------
# the bundled demo, end to end on this CPU


DEMO = BUNDLED  # the repository's demo project


@pytest.mark.skipif(not (DEMO / "packages" / "fused-ffn" / "build").is_dir(), reason="demo packages not bundled")
def test_bundled_demo_binds_into_the_decoder_block(tmp_path, monkeypatch):
    import shutil

    for mid in [m for m in sys.modules if m.startswith("_frt_demo_")]:
        monkeypatch.delitem(sys.modules, mid)  # imported outside frt by other tests: would be refused as shadowed

    from frt_dist.demo.decoder import build_host
    from helpers.factories import TinyProject

    root = tmp_path / "demo"
    shutil.copytree(DEMO / "manifests", root / "manifests")
    shutil.copytree(DEMO / "packages", root / "packages")
    lock = TinyProject.existing(root, "demo-decoder").lock(receipts=[("fused", "decode"), ("fused", "prefill")])
    plan = load("demo-decoder", lockfile=lock.path, hardware=CPU)
    block = build_host()
    x = block.make_inputs(4)
    want = block(x)
    for seam in block.seams:
        block.bind(seam, plan.entry(seam, "decode", host=block.host_seams[seam]))
    torch.testing.assert_close(block(x), want, atol=1e-4, rtol=1e-3)
    assert plan.ledger()["seams"]["ffn"]["phases"]["decode"]["probes"] == {"gated_mlp_out": "offered"}
    assert plan.ledger()["totals"]["calls"] == 2


def _frt_warnings(call):
    """``call()``'s result and each ``FrtWarning`` it gave, as ``frt`` shows one (``warning: <message>``)."""
    import warnings

    from frt_dist.errors import FrtWarning

    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        out = call()
    return out, [f"warning: {w.message}" for w in got if issubclass(w.category, FrtWarning)]


def test_a_stale_lock_is_used_with_one_warning_naming_the_manifest(tmp_path, capsys):
    """Library code prints nothing: the warning is an ``FrtWarning`` (``frt`` prints it)."""
    tp, lock = _project(tmp_path)
    plan, err = _frt_warnings(lambda: load("tiny", lockfile=lock.path, hardware=CPU))
    assert err == [] and not [n for n in plan.notes if "stale" in n]
    mpath = tp.root / "manifests" / "tiny.toml"
    mpath.write_text(mpath.read_text().replace("min-speedup = 1.02", "min-speedup = 1.5"))
    loader._forget_all()
    plan, err = _frt_warnings(lambda: load("tiny", lockfile=lock.path, hardware=CPU))
    assert capsys.readouterr().err == ""
    assert len(err) == 1 and err[0].startswith(
        "warning: lockfile for 'tiny' is stale: manifest manifests/tiny.toml changed since it was locked")
    assert err[0].endswith("using the lockfile as reviewed; run `frt lock --model tiny`")
    assert plan.decisions["decode"].route == "fast" and plan.notes[-1] == err[0][len("warning: "):]
