"""``plan.kernel_mapping``: `kernels.kernelize` runs the plan's verified modules.

The model side is `kernels`' own API (``use_kernel_forward_from_hub``, ``use_kernel_mapping``,
``kernelize``), unmodified: frt only supplies the mapping. Which code ran is told by the
package's own layer counting its calls, and by the plan's ledger."""

from __future__ import annotations

import os
import sys

import pytest
import torch
from kernels import Mode, kernelize, use_kernel_forward_from_hub, use_kernel_mapping

from frt_dist import ContractViolation, KernelUnavailable, UsageError
from frt_dist.serve.load import load
from helpers.factories import CPU, SCALE_SRC, tiny_project

LAYERS_SRC = '''import torch.nn as nn

CALLS = [0]


class Scale(nn.Module):
    can_torch_compile = True

    def forward(self, x):
        CALLS[0] += 1
        return x * self.weight
'''
SCALE_WITH_LAYERS = {"name": "scale", "module": {"__init__.py": SCALE_SRC + "from . import layers\n",
                                                 "layers.py": LAYERS_SRC}}
W = torch.randn(8)


@use_kernel_forward_from_hub("Scale")
class ScaleLayer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(W.clone(), requires_grad=False)

    def forward(self, x):  # the host: the model's own code
        return x * self.weight


pytestmark = pytest.mark.usefixtures("fresh_loader")


def _plan(tmp_path, receipts, **kw):
    from helpers.factories import NORM_SRC

    tp = tiny_project(tmp_path, packages={"scale": SCALE_WITH_LAYERS, "norm": {"name": "norm", "source": NORM_SRC}})
    return load("tiny", lockfile=tp.lock(receipts=receipts).path, hardware=CPU, **kw)


def _kernelized(plan, mode=Mode.INFERENCE):
    model = torch.nn.Sequential(ScaleLayer())
    with use_kernel_mapping(plan.kernel_mapping({"act": "Scale"}), inherit_mapping=False):
        kernelize(model, mode=mode, device="cpu")
    return model


def _calls(plan):
    return sys.modules[plan.packages["t-org/scale"].module_id + ".layers"].CALLS[0]


def test_kernelize_runs_the_verified_layer_of_the_chosen_route(tmp_path):
    plan = _plan(tmp_path, [("fast", "decode"), ("fast", "prefill")])
    mapping = plan.kernel_mapping({"act": "Scale"})
    assert list(mapping) == ["Scale"] and list(mapping["Scale"]) == ["cpu"]
    layers_mod = sys.modules[plan.packages["t-org/scale"].module_id + ".layers"]
    assert os.path.realpath(layers_mod.__file__).startswith(os.path.realpath(plan.packages["t-org/scale"].store_path))
    before = set(sys.modules)
    model = _kernelized(plan)
    assert set(sys.modules) == before  # nothing imported again, nothing downloaded
    x = torch.randn(2, 3, 8)  # 6 tokens: the decode band
    torch.testing.assert_close(model(x), x * W)
    y = torch.randn(100, 8)  # the prefill band
    torch.testing.assert_close(model(y), y * W)
    assert _calls(plan) == 2  # both ran the package's layer
    led = plan.ledger()["seams"]["act"]["phases"]
    assert (led["decode"]["calls"], led["prefill"]["calls"]) == (1, 1)


def test_a_band_decided_host_is_not_kernelized(tmp_path):
    plan = _plan(tmp_path, [("fast", "decode")], fallback="host")
    assert plan.decisions["prefill"].decision == "host"
    model = _kernelized(plan)
    model(torch.randn(4, 8))  # decode: the verified layer
    x = torch.randn(128, 8)  # prefill: the module's own forward
    torch.testing.assert_close(model(x), x * W)
    assert _calls(plan) == 1
    led = plan.ledger()["seams"]["act"]["phases"]
    assert (led["prefill"]["calls"], led["prefill"]["host-calls"]) == (1, 1)
    assert (led["decode"]["calls"], led["decode"]["host-calls"]) == (1, 0)


def test_rows_in_no_band_are_a_contract_miss(tmp_path):
    plan = _plan(tmp_path, [("fast", "decode"), ("fast", "prefill")])
    model = _kernelized(plan)
    with pytest.raises(ContractViolation, match=r"seam 'act' \(layer Scale\): rows 40 in no phase band "
                                                r"\(decode 1\.\.16, prefill 64\.\.256\)"):
        model(torch.randn(40, 8))
    assert plan.ledger()["seams"]["act"]["contract-misses"] == {"rows": 1}
    host_plan = _plan(tmp_path / "h", [("fast", "decode"), ("fast", "prefill")], fallback="host")
    x = torch.randn(40, 8)
    torch.testing.assert_close(_kernelized(host_plan)(x), x * W)
    assert host_plan.ledger()["seams"]["act"]["fallbacks"] == 1


def test_a_detached_plan_runs_the_modules_own_forward(tmp_path):
    plan = _plan(tmp_path, [("fast", "decode"), ("fast", "prefill")])
    model = _kernelized(plan)
    plan.detach()
    model(torch.randn(4, 8))
    assert _calls(plan) == 0


def test_the_mapping_refuses_what_it_cannot_serve(tmp_path):
    plan = _plan(tmp_path, [("fast", "decode"), ("fast", "prefill")])
    with pytest.raises(UsageError, match=r"unknown seam 'mlp' for model 'tiny' \(seams: act, norm\)"):
        plan.kernel_mapping({"mlp": "Scale"})
    with pytest.raises(KernelUnavailable, match=r"seam 'norm', decode band: package t-org/norm \(variant torch-cpu\) "
                                               r"has no layers\.RMSNorm"):
        plan.kernel_mapping({"norm": "RMSNorm"})
    with pytest.raises(UsageError, match=r"must be an identifier naming a layer class \(not starting with '_'\), "
                                         r"got 'a-b'"):
        plan.kernel_mapping({"act": "a-b"})


def test_the_mapping_serves_only_layer_classes_the_package_defines(tmp_path):
    """`kernel_mapping({"norm": "__class__"})` is no traceback: any attribute of the
    layers module that is not a layer class of the package is refused, naming the seam and the name."""
    from helpers.factories import NORM_SRC

    layers = LAYERS_SRC + "import torch\nLinear = torch.nn.Linear\nWIDTH = 8\n\ndef helper():\n    pass\n"
    tp = tiny_project(tmp_path, packages={"scale": {"name": "scale", "module": {
        "__init__.py": SCALE_SRC + "from . import layers\n", "layers.py": layers}},
        "norm": {"name": "norm", "source": NORM_SRC}})
    plan = load("tiny", lockfile=tp.lock(receipts=[("fast", "decode"), ("fast", "prefill")]).path, hardware=CPU)
    for name in ("__class__", "__dict__", "_private"):
        with pytest.raises(UsageError, match=rf"kernel_mapping: layer name for seam 'act' must be an identifier "
                                             rf"naming a layer class \(not starting with '_'\), got '{name}'"):
            plan.kernel_mapping({"act": name})
    for name, why in (("WIDTH", "layers.WIDTH is not a layer class (an nn.Module subclass), it is int"),
                      ("helper", "layers.helper is not a layer class (an nn.Module subclass), it is function"),
                      ("Linear", "layers.Linear is torch.nn.modules.linear.Linear, not a layer the package defines"),
                      ("torch", "layers.torch is not a layer class (an nn.Module subclass), it is module")):
        with pytest.raises(KernelUnavailable) as ei:
            plan.kernel_mapping({"act": name})
        assert str(ei.value).startswith("kernel_mapping: seam 'act', decode band: package t-org/scale ")
        assert str(ei.value).endswith(why), str(ei.value)
    assert "Scale" in plan.kernel_mapping({"act": "Scale"})


def test_the_kernelized_model_compiles_without_graph_breaks(tmp_path):
    plan = _plan(tmp_path, [("fast", "decode"), ("fast", "prefill")])
    model = _kernelized(plan, mode=Mode.INFERENCE | Mode.TORCH_COMPILE)
    x = torch.randn(4, 8)
    explained = torch._dynamo.explain(model)(x)
    assert explained.graph_break_count == 0, explained.break_reasons
    torch.testing.assert_close(torch.compile(model, fullgraph=True, backend="eager")(x), x * W)


RMS_LAYER_SRC = '''import torch
import torch.nn as nn

CALLS = [0]


class RMSNorm(nn.Module):
    def forward(self, hidden_states):
        CALLS[0] += 1
        dtype = hidden_states.dtype
        h = hidden_states.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return self.weight * h.to(dtype)
'''


@pytest.mark.slow
def test_a_tiny_transformers_model_runs_the_locked_rmsnorm(tmp_path):
    """A randomly initialised Llama from `transformers` (no download), whose
    RMSNorm layers declare ``use_kernel_forward_from_hub("RMSNorm")``, kernelized from the plan."""
    import transformers  # the test extra pins a version whose kernels window holds kernels 0.17.2

    from helpers.factories import NORM_SRC

    norm_pkg = {"name": "norm", "module": {"__init__.py": NORM_SRC + "from . import layers\n", "layers.py": RMS_LAYER_SRC}}
    tp = tiny_project(tmp_path, packages={"scale": SCALE_WITH_LAYERS, "norm": norm_pkg})
    plan = load("tiny", lockfile=tp.lock(receipts=[("fast", "decode"), ("fast", "prefill")]).path, hardware=CPU)
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64)
    model = transformers.LlamaForCausalLM(config).eval()
    ids = torch.randint(0, 128, (1, 5))  # 5 tokens: the decode band
    with torch.no_grad():
        want = model(ids).logits
        with use_kernel_mapping(plan.kernel_mapping({"norm": "RMSNorm"}), inherit_mapping=False):
            kernelize(model, mode=Mode.INFERENCE, device="cpu")
        got = model(ids).logits
    calls = sys.modules[plan.packages["t-org/norm"].module_id + ".layers"].CALLS[0]
    assert calls == 2 * 2 + 1  # two norms per layer and the final one ran the locked package's layer
    torch.testing.assert_close(got, want)
    assert plan.ledger()["seams"]["norm"]["phases"]["decode"]["calls"] == 5
