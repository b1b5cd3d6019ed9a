"""The guard checks every input the contract describes.

An impl's ``smoke.inputs`` declare the call's inputs in order; the contract's
device, dtypes, layout and width, the phase band and each input's declared shape
and dtype say what every one of them must be. A miss on any input — a bad second
or third argument, a missing one, an extra one where the arity is fixed — is a
contract miss: counted by kind, named by input number, then a host fallback under
``fallback="host"`` or a ``ContractViolation``; never a raw error from the kernel.
"""

from __future__ import annotations

import pytest
import torch

from frt_dist import ContractViolation, ManifestError, loader
from frt_dist.documents.manifest import Manifest
from frt_dist.serve.load import load
from helpers.factories import CPU, NORM_SRC, impl_doc, manifest_doc, tiny_project

# act: x * w + r, three inputs, precision family float32/float64 (one per call)
ADD_SRC = '"""tiny test kernel: scale and add."""\n\n\ndef scale_add(x, w, r):\n    return x * w + r\n'
# pick: x[:, idx] * scale; idx pinned to int64, scale to float64 (one of the contract's dtypes, but not
# the smoke dtype of the leading input, so it does not follow the call's precision)
PICK_SRC = ('"""tiny test kernel: pick columns."""\n\n\ndef pick(x, idx, scale):\n'
            '    return x.index_select(1, idx) * scale.to(x.dtype)\n')
ROWS = ["rows", 8]


def _manifest() -> dict:
    act = impl_doc("t-org/add", "scale_add", dtypes=("float32", "float64"),
                   inputs=[{"shape": ROWS, "dtype": "float32"}, {"shape": [8], "dtype": "float32"},
                           {"shape": ROWS, "dtype": "float32"}])
    norm = impl_doc("t-org/norm", "norm")  # norm(x, w, eps=1e-6)
    norm["contract"]["arity"] = "fixed"
    pick = impl_doc("t-org/pick", "pick", expect=["rows", 3], dtypes=("float32", "float64"),
                    inputs=[{"shape": ROWS, "dtype": "float32"}, {"shape": [3], "dtype": "int64", "scale": 0},
                            {"shape": [1], "dtype": "float64"}])
    seams = {"act": {"structure": "add@1", "impls": {"add": act}},
             "norm": {"structure": "norm@1", "impls": {"norm": norm}},
             "pick": {"structure": "pick@1", "impls": {"pick": pick}}}
    return manifest_doc(
        packages={"t-org/add": {"path": "packages/add"}, "t-org/norm": {"path": "packages/norm"},
                  "t-org/pick": {"path": "packages/pick"}},
        seams=seams, routes={"fast": {"assembly": "eager", "seams": {"act": "add", "norm": "norm", "pick": "pick"}}})


PACKAGES = {"add": {"name": "add", "source": ADD_SRC}, "norm": {"name": "norm", "source": NORM_SRC},
            "pick": {"name": "pick", "source": PICK_SRC}}


pytestmark = pytest.mark.usefixtures("fresh_loader")


@pytest.fixture
def lock(tmp_path):
    tp = tiny_project(tmp_path, manifest=_manifest(), packages=PACKAGES)
    return tp.lock(receipts=[("fast", "decode"), ("fast", "prefill")])


def _load(lock, fallback="refuse"):
    return load("tiny", lockfile=lock.path, hardware=CPU, fallback=fallback)


X, W, R = torch.randn(4, 8), torch.randn(8), torch.randn(4, 8)
IDX, S64 = torch.tensor([0, 5, 7]), torch.tensor([2.0], dtype=torch.float64)
META = torch.empty(8, device="meta")

# (arguments, kind, reason) for the three-input seam `act`: every miss is named by its input number
BAD_ACT = [
    ((X, W.half(), R), "dtype", "input 2: dtype float16 not in [float32, float64]"),
    ((X, W.double(), R), "dtype", "input 2: dtype float64, input 1 is float32 (one call has one precision)"),
    ((X, META, R), "device", "input 2: device meta not cpu"),
    ((X, torch.randn(9), R), "shape", "input 2: shape [9], expected [8]"),
    ((X, torch.randn(8, 1), R), "shape", "input 2: shape [8, 1], expected [8]"),
    ((X, torch.randn(16)[::2], R), "layout", "input 2: not contiguous"),
    ((X, 2.0, R), "type", "input 2: not a tensor (float)"),
    ((X, W, torch.randn(5, 8)), "shape", "input 3: shape [5, 8], expected [4, 8]"),
    ((X, W, torch.randn(4, 9)), "shape", "input 3: shape [4, 9], expected [4, 8]"),
    ((X, W, R.half()), "dtype", "input 3: dtype float16 not in [float32, float64]"),
    ((X, W, torch.empty(4, 8, device="meta")), "device", "input 3: device meta not cpu"),
    ((X, W, torch.randn(8, 4).t()), "layout", "input 3: not contiguous"),
    ((X, W), "arity", "input 3: missing (the contract declares 3 inputs)"),
    ((torch.randn(4, 2, 8), W, R), "shape", "input 1: shape [4, 2, 8], expected [4, 8]"),
]


def _ids(cases):
    return [f"{i}-{c[1]}" for i, c in enumerate(cases)]


def test_good_calls_pass_and_count_once(lock):
    plan = _load(lock)
    act, norm, pick = (plan.entry(s, "decode") for s in ("act", "norm", "pick"))
    torch.testing.assert_close(act(X, W, R), X * W + R)
    torch.testing.assert_close(act(X.double(), W.double(), R.double()), (X * W + R).double())  # the other precision
    torch.testing.assert_close(act(X, torch.nn.Parameter(W), R), X * W + R)
    torch.testing.assert_close(act(x=X, w=W, r=R), X * W + R)  # keywords, by the kernel's parameter names
    torch.testing.assert_close(act(X, W, r=R), X * W + R)
    assert norm(X, W).shape == (4, 8)
    assert torch.equal(pick(X, IDX, S64), X[:, [0, 5, 7]] * 2)
    led = plan.ledger()["seams"]
    assert [(led[s]["calls"], led[s]["contract-misses"], led[s]["fallbacks"]) for s in ("act", "norm", "pick")] == [
        (5, {}, 0), (1, {}, 0), (1, {}, 0)]


def test_the_smoke_call_shape_takes_the_fast_path(lock, monkeypatch):
    """A good positional call never reaches the exact (slow) check: the per-input
    checks are generated into the fast path, not left to the fallback."""
    plan = _load(lock)
    act, pick = plan.entry("act", "decode"), plan.entry("pick", "decode")
    con = plan.contract("act", "decode")

    def boom(*a, **k):
        raise AssertionError("slow path taken by a good call")

    monkeypatch.setattr(con, "problems", boom)
    monkeypatch.setattr(plan.contract("pick", "decode"), "problems", boom)
    act(X, W, R)
    act(X.double(), W.double(), R.double())
    act(X, torch.nn.Parameter(W), R)
    act(X, W, r=R)  # inputs by keyword are bound to the kernel's signature, then take the same checks
    act(x=X, w=W, r=R)
    pick(X, IDX, S64)
    pick(X.double(), IDX, S64)
    monkeypatch.setattr(plan.contract("norm", "decode"), "problems", boom)
    plan.entry("norm", "decode")(X, W)


@pytest.mark.parametrize("args,kind,why", BAD_ACT, ids=_ids(BAD_ACT))
def test_a_bad_input_is_refused_and_counted(lock, args, kind, why):
    plan = _load(lock)
    entry = plan.entry("act", "decode")
    with pytest.raises(ContractViolation) as ei:
        entry(*args)
    assert str(ei.value) == f"seam 'act' (decode): {why}"
    assert ei.value.reasons == [{"seam": "act", "phase": "decode", "kind": kind, "reason": why}]
    entry(X, W, R)
    act = plan.ledger()["seams"]["act"]
    assert (act["calls"], act["contract-misses"], act["contract-refusals"], act["fallbacks"]) == (2, {kind: 1}, 1, 0)


@pytest.mark.parametrize("args,kind,why", BAD_ACT, ids=_ids(BAD_ACT))
def test_a_bad_input_falls_back_to_the_host_under_the_host_policy(lock, args, kind, why):
    plan = _load(lock, fallback="host")
    seen = []
    entry = plan.entry("act", "decode", host=lambda *a, **k: seen.append(a) or "host")
    assert entry(*args) == "host" and len(seen) == 1 and all(a is b for a, b in zip(seen[0], args, strict=True))
    assert torch.is_tensor(entry(X, W, R))  # the good call still runs the kernel
    act = plan.ledger()["seams"]["act"]
    assert (act["calls"], act["contract-misses"], act["fallbacks"], act["contract-refusals"]) == (2, {kind: 1}, 1, 0)
    assert plan.ledger()["totals"]["fallbacks"] == 1


def test_keyword_inputs_are_checked_like_positional_ones(lock):
    plan = _load(lock)
    entry = plan.entry("act", "decode")
    cases = [
        (dict(x=X, w=W.half(), r=R), "input 2: dtype float16 not in [float32, float64]"),
        (dict(x=X, w=W), "input 3: missing (the contract declares 3 inputs)"),
        (dict(x=X, w=W, r=torch.randn(5, 8)), "input 3: shape [5, 8], expected [4, 8]"),
        (dict(x=X, w=W, r=R, bias=W), "unexpected keyword argument 'bias'"),
        (dict(x=X, w=W, r=R, y=X), "unexpected keyword argument 'y'"),
    ]
    for kwargs, why in cases:
        with pytest.raises(ContractViolation) as ei:
            entry(**kwargs)
        assert str(ei.value) == f"seam 'act' (decode): {why}"
    with pytest.raises(ContractViolation) as ei:
        entry(w=W, r=R)  # the first input missing: nothing else is reported
    assert [r["reason"] for r in ei.value.reasons] == ["input 1: missing (the contract declares 3 inputs)"]
    with pytest.raises(ContractViolation, match="argument 'w' given by position and by keyword"):
        entry(X, W, R, w=W)
    with pytest.raises(ContractViolation, match="^seam 'act' \\(decode\\): argument 'x' given by position and by keyword$"):
        entry(X, w=W, r=R, x=X)
    with pytest.raises(ContractViolation, match=r"4 positional arguments; scale_add\(\) takes at most 3"):
        entry(X, W, R, R)
    act = plan.ledger()["seams"]["act"]
    assert act["contract-misses"] == {"arity": 7, "dtype": 1, "shape": 1}
    assert act["contract-refusals"] == 9
    host_plan = _load(lock, fallback="host")
    seen = []
    hosted = host_plan.entry("act", "decode", host=lambda *a, **k: seen.append((a, sorted(k))) or "host")
    assert hosted(w=W, r=R) == "host" and hosted(X, w=W.half(), r=R) == "host"
    assert [(len(a), k) for a, k in seen] == [(0, ["r", "w"]), (1, ["r", "w"])]  # the host gets the call as made


def test_fixed_arity_refuses_an_extra_argument_and_open_arity_passes_it_on(lock, tmp_path):
    plan = _load(lock)
    norm = plan.entry("norm", "decode")  # contract arity = "fixed": exactly (x, w)
    for call, why in ((lambda: norm(X, W, 1e-5), "input 3: unexpected (the contract declares exactly 2 inputs)"),
                      (lambda: norm(X, W, eps=1e-5),
                       "keyword argument 'eps': unexpected (the contract declares exactly 2 inputs)")):
        with pytest.raises(ContractViolation) as ei:
            call()
        assert str(ei.value) == f"seam 'norm' (decode): {why}"
        assert ei.value.reasons[0]["kind"] == "arity"
    with pytest.raises(ContractViolation, match="input 2: missing"):
        norm(X)
    assert plan.ledger()["seams"]["norm"]["contract-misses"] == {"arity": 3}
    host_plan = _load(lock, fallback="host")
    hosted = host_plan.entry("norm", "decode", host=lambda x, w, eps=0.0: "host")
    assert hosted(X, W, 1e-5) == "host" and hosted(X, W, eps=1e-5) == "host"
    assert host_plan.ledger()["seams"]["norm"]["fallbacks"] == 2

    # the default arity is "open": arguments after the inputs reach the kernel unchecked
    manifest = _manifest()
    del manifest["seams"]["norm"]["impls"]["norm"]["contract"]["arity"]
    tp = tiny_project(tmp_path, name="open", manifest=manifest, packages=PACKAGES)
    open_lock = tp.lock(receipts=[("fast", "decode"), ("fast", "prefill")])
    loader._forget_all()  # the same packages, from another project
    open_plan = _load(open_lock)
    entry = open_plan.entry("norm", "decode")
    x = torch.full((2, 8), 2.0)
    torch.testing.assert_close(entry(x, torch.ones(8), 0.0), torch.ones(2, 8))
    torch.testing.assert_close(entry(x, torch.ones(8), eps=0.0), torch.ones(2, 8))
    with pytest.raises(ContractViolation, match="input 2: dtype float16"):
        entry(x, torch.ones(8).half(), 0.0)  # the inputs before the extra argument are still checked
    assert open_plan.ledger()["seams"]["norm"]["contract-misses"] == {"dtype": 1}


def test_a_pinned_input_keeps_its_declared_dtype(lock):
    """Only inputs declared with the leading input's smoke dtype follow the call's precision;
    the others (indices, scales) are pinned to their smoke dtype, even one that is in ``dtypes``."""
    plan = _load(lock)
    pick = plan.entry("pick", "decode")
    torch.testing.assert_close(pick(X.double(), IDX, S64), X.double()[:, [0, 5, 7]] * 2)  # the call runs at float64
    for args, kind, why in (((X, IDX.int(), S64), "dtype", "input 2: dtype int32 not int64"),
                            ((X, IDX.float(), S64), "dtype", "input 2: dtype float32 not int64"),
                            ((X, torch.tensor([0, 1]), S64), "shape", "input 2: shape [2], expected [3]"),
                            ((X, IDX, S64.float()), "dtype", "input 3: dtype float32 not float64"),
                            ((X.half(), IDX, S64), "dtype", "input 1: dtype float16 not in [float32, float64]")):
        with pytest.raises(ContractViolation) as ei:
            pick(*args)
        assert ei.value.reasons == [{"seam": "pick", "phase": "decode", "kind": kind, "reason": why}]


def test_every_miss_of_a_call_is_named_and_counted(lock):
    plan = _load(lock)
    with pytest.raises(ContractViolation) as ei:
        plan.entry("act", "decode")(torch.randn(20, 8), META, torch.randn(4, 8).half())
    assert [r["reason"] for r in ei.value.reasons] == [
        "input 1: rows 20 outside decode band [1, 16]", "input 2: device meta not cpu",
        "input 3: dtype float16 not in [float32, float64]", "input 3: shape [4, 8], expected [20, 8]"]
    assert plan.ledger()["seams"]["act"]["contract-misses"] == {"device": 1, "dtype": 1, "rows": 1, "shape": 1}
    with pytest.raises(ContractViolation) as ei:
        plan.entry("act", "decode")(X)
    assert [(r["kind"], r["reason"]) for r in ei.value.reasons] == [
        ("arity", "input 2: missing (the contract declares 3 inputs)"),
        ("arity", "input 3: missing (the contract declares 3 inputs)")]
    assert plan.ledger()["seams"]["act"]["contract-misses"]["arity"] == 2


def test_fast_and_exact_checks_agree(lock):
    """The generated fast path and ``Contract.problems`` must say the same thing
    about every call: a call passes the guard exactly when ``problems`` is empty."""
    plan = _load(lock)
    entry = plan.entry("act", "decode")
    con = plan.contract("act", "decode")
    firsts = [X, X.double(), torch.randn(1, 8), torch.randn(16, 8), torch.randn(17, 8), torch.randn(4, 9),
              torch.randn(8, 4).t(), torch.randn(8), torch.empty(4, 8, device="meta")]
    seconds = [W, W.double(), W.half(), torch.randn(9), torch.randn(16)[::2], META, torch.nn.Parameter(W), 1.0]
    n = 0
    for x in firsts:
        for w in seconds:
            rows = x.shape[0] if x.dim() else 1
            for r in (torch.randn(rows, 8, dtype=x.dtype), torch.randn(rows + 1, 8), torch.randn(rows, 8).half()):
                want_ok = con.problems((x, w, r), {}) == []
                assert con.problems((x,), {"w": w, "r": r}) == con.problems((x, w, r), {})
                for call in (lambda x=x, w=w, r=r: entry(x, w, r), lambda x=x, w=w, r=r: entry(x, w, r=r),
                             lambda x=x, w=w, r=r: entry(x=x, w=w, r=r)):
                    try:
                        call()
                        ok = True
                    except ContractViolation:
                        ok = False
                    assert ok == want_ok, (x.shape, x.dtype, w, r.shape, r.dtype)
                n += 1
    assert n == len(firsts) * len(seconds) * 3
    pick, con = plan.entry("pick", "decode"), plan.contract("pick", "decode")
    for x in (X, X.double(), X.half()):
        for idx in (IDX, IDX.int(), torch.tensor([[0, 1, 2]])):
            for scale in (S64, S64.float(), torch.tensor(2.0, dtype=torch.float64)):
                want_ok = con.problems((x, idx, scale), {}) == []
                try:
                    pick(x, idx, scale)
                    ok = True
                except ContractViolation:
                    ok = False
                assert ok == want_ok, (x.dtype, idx, scale)


def test_every_input_is_checked_under_torch_compile(lock):
    plan = _load(lock)
    act = plan.entry("act", "decode")

    def block(x, w, r):
        return act(x, w, r) * 2

    explained = torch._dynamo.explain(block)(X, W, R)
    assert explained.graph_break_count == 0, explained.break_reasons
    torch.testing.assert_close(torch.compile(block, fullgraph=True, backend="eager")(X, W, R), block(X, W, R))
    with pytest.raises(ContractViolation, match=r"input 2: dtype float16 not in \[float32, float64\]"):
        torch.compile(block, backend="eager")(X, W.half(), R)
    with pytest.raises(ContractViolation, match=r"input 3: shape \[5, 8\], expected \[4, 8\]"):
        torch.compile(block, backend="eager")(X, W, torch.randn(5, 8))
    host_plan = _load(lock, fallback="host")
    hosted = host_plan.entry("act", "decode", host=lambda x, w, r: x - x)
    out = torch.compile(lambda x, w, r: hosted(x, w, r), backend="eager")(X, W.half(), R)
    assert torch.equal(out, torch.zeros(4, 8))  # the host ran, inside the compiled function


def test_the_manifest_refuses_a_contract_its_smoke_contradicts(tmp_path):
    doc = _manifest()
    doc["seams"]["act"]["impls"]["add"]["contract"]["width"] = 16
    with pytest.raises(ManifestError, match=r"seams\.act\.impls\.add\.contract\.width: width 16 does not match the last "
                                            r"dimension of .*inputs\[0\]\.shape \['rows', 8\]"):
        Manifest.from_dict(doc, file="tiny.toml")
    doc = _manifest()
    doc["seams"]["act"]["impls"]["add"]["contract"]["dtypes"] = ["bfloat16"]
    with pytest.raises(ManifestError, match=r"seams\.act\.impls\.add\.smoke\.inputs: no input has a dtype from "
                                            r".*contract\.dtypes \['bfloat16'\]"):
        Manifest.from_dict(doc, file="tiny.toml")
    doc = _manifest()
    doc["seams"]["act"]["impls"]["add"]["contract"]["arity"] = "exact"
    with pytest.raises(ManifestError, match=r"contract\.arity: expected one of open, fixed, got 'exact'"):
        Manifest.from_dict(doc, file="tiny.toml")


def _guard(device: str, fn, host=None):
    """A guarded entry for the ``act`` contract on ``device``, built without a load (no smoke)."""
    from frt_dist.serve.guard import Contract, kernel_entry
    from frt_dist.serve.ledger import Counts

    doc = _manifest()
    doc["seams"]["act"]["impls"]["add"]["contract"]["device"] = device
    m = Manifest.from_dict(doc, file="tiny.toml")
    con = Contract(m.impl("act", "add"), m.phases["decode"], fn)
    st = Counts("act", "decode")
    return kernel_entry(fn, st, con, host, host is not None), con, st


def test_off_the_cpu_every_input_is_on_the_contracts_device(monkeypatch):
    """The generated checks for a device with an index (here ``meta``, which runs anywhere):
    each input's device type, and one device for all; the fast path takes the good call."""
    from frt_dist.serve.guard import _fast_source

    def scale_add(x, w, r):
        return x

    entry, con, st = _guard("meta", scale_add, host=lambda *a: "host")
    assert "x.get_device() == a1.get_device() == a2.get_device()" in _fast_source(con)[0]
    x, w, r = (torch.empty(4, 8, device="meta"), torch.empty(8, device="meta"), torch.empty(4, 8, device="meta"))
    with monkeypatch.context() as mp:
        mp.setattr(con, "problems", lambda *a: pytest.fail("the good call left the fast path"))
        assert entry(x, w, r) is x
    assert entry(x, W, r) == "host" and entry(x, w, R) == "host"
    assert st.misses == {"device": 2} and st.fallbacks == 2 and st.calls == 3
    assert con.problems((x, W, r), {}) == [("device", "input 2: device cpu not meta")]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_inputs_are_checked_on_the_gpu():
    def scale_add(x, w, r):
        return x * w + r

    entry, con, st = _guard("cuda", scale_add, host=lambda *a: "host")
    x, w, r = X.cuda(), W.cuda(), R.cuda()
    torch.testing.assert_close(entry(x, w, r), (X * W + R).cuda())
    assert entry(x, W, r) == "host"  # a CPU weight with CUDA activations
    assert con.problems((x, W, r), {}) == [("device", "input 2: device cpu not cuda")]
    if torch.cuda.device_count() > 1:
        assert entry(x, w.to("cuda:1"), r) == "host"
        assert con.problems((x, w.to("cuda:1"), r), {})[0][1] == "input 2: device cuda:1, input 1 is on cuda:0"
    assert st.misses["device"] >= 1 and st.calls >= 2


def test_a_cuda_contract_counts_calls_made_during_graph_capture_apart(monkeypatch):
    """Inside CUDA graph capture the guard runs as in eager mode (its checks run at capture);
    a replay runs no Python, so captures are counted apart. The capture state is a device fact:
    faked here (no GPU), the generated counting is the real one."""
    from frt_dist.serve.guard import _fast_source

    capturing = [False]
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: capturing[0])
    entry, con, st = _guard("cuda", lambda x, w, r: x, host=lambda *a: "host")
    assert "st.captures += 1" in _fast_source(con)[0]
    assert "st.captures" not in _fast_source(_guard("cpu", lambda x, w, r: x)[1])[0]  # CPU: nothing extra per call
    entry(X, W, R)  # CPU tensors against a CUDA contract: a miss, counted as an eager call
    capturing[0] = True
    entry(X, W, R)
    entry(X, W, R)
    assert (st.calls, st.captures, st.fallbacks) == (3, 2, 3)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_captured_cuda_graph_replays_without_the_guard():
    def scale_add(x, w, r):
        return x * w + r

    entry, con, st = _guard("cuda", scale_add)
    x, w, r = X.cuda(), W.cuda(), R.cuda()
    entry(x, w, r)  # warm-up on the capture stream's device
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = entry(x, w, r)
    for _ in range(5):
        g.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out, (X * W + R).cuda())
    assert (st.calls, st.captures) == (2, 1)  # one eager call, one capture; 5 replays ran no Python
