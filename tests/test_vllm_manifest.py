"""A vLLM binding's manifest keys (host-model, vllm-op, layer) and the plugin's configuration refusals,
without starting an engine (no vLLM import: these run where vLLM is not installed too)."""

from __future__ import annotations

import copy
from importlib.metadata import entry_points

import pytest

from frt_dist.documents.manifest import Manifest
from frt_dist.errors import ManifestError, UsageError
from helpers import vllm_support as vs


def _read(doc):
    return Manifest.from_dict(doc, file="manifests/tiny-qwen2.toml")


def test_the_binding_reads():
    m = _read(vs.binding_manifest())
    assert m.host == "vllm" and m.host_model == "models/tiny-qwen2"
    assert m.seams["norm"].vllm_op == "RMSNorm" and m.impl("norm", "rms").layer == "RMSNorm"
    assert m.impl("norm", "rms").entry == ""


@pytest.mark.parametrize("edit, field, text", [
    (lambda d: d.pop("host-model"), "host-model", "names the Hugging Face model folder"),
    (lambda d: d.update({"host-model": "../outside"}), "host-model", ""),
    (lambda d: d["seams"]["norm"].pop("vllm-op"), "seams.norm.vllm-op", "names the vLLM op class"),
    (lambda d: d["seams"]["norm"].update({"vllm-op": "rms norm"}), "seams.norm.vllm-op", "CustomOp class name"),
    (lambda d: d["seams"]["norm"]["impls"]["rms"].pop("layer"), "seams.norm.impls.rms.layer", "layer class"),
    (lambda d: d["seams"]["norm"]["impls"]["rms"].update({"layer": "1x"}), "seams.norm.impls.rms.layer",
     "not a Python class name"),
])
def test_binding_fields_are_checked(edit, field, text):
    doc = copy.deepcopy(vs.binding_manifest())
    edit(doc)
    with pytest.raises(ManifestError) as exc:
        _read(doc)
    assert field in str(exc.value) and text in str(exc.value)


def test_an_impl_names_an_entry_or_a_layer():
    doc = copy.deepcopy(vs.binding_manifest())
    doc["host"] = "torch"
    for seam in doc["seams"].values():
        seam.pop("vllm-op")
    doc["seams"]["norm"]["impls"]["rms"].pop("layer")
    with pytest.raises(ManifestError, match=r"seams\.norm\.impls\.rms\.entry.*missing required field"):
        _read(doc)


def test_the_plugin_is_registered_with_vllm():
    eps = {ep.name: ep.value for ep in entry_points(group="vllm.general_plugins")}
    assert eps.get("frt") == "frt_dist.serve.vllm.plugin:register"


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A locked vLLM binding (no receipts), selected by FRT_PROJECT as the plugin reads it."""
    def make(**edits):
        from helpers.factories import TinyProject

        doc = vs.binding_manifest()
        for k, v in edits.items():
            doc["seams"]["norm"][k] = v
        tp = TinyProject(tmp_path / "proj", manifest=doc, packages=vs.package_specs())
        tp.lock()
        monkeypatch.setenv("FRT_PROJECT", str(tp.root))
        return tp
    return make


def test_plugin_refuses_an_op_it_does_not_route(project):
    from frt_dist.serve.vllm.plugin import Engine

    project(**{"vllm-op": "FusedMoE"})
    with pytest.raises(UsageError, match=r"seams\.norm\.vllm-op: frt does not route vLLM's 'FusedMoE' "
                                         r"\(it routes RMSNorm, SiluAndMul\)"):
        Engine.from_env("tiny-qwen2")


@pytest.mark.parametrize("var, value, text", [
    ("FRT_FALLBACK", "maybe", "FRT_FALLBACK: expected refuse or host, got 'maybe'"),
    ("FRT_ACCEPT", "fast", "FRT_ACCEPT: expected states among certified_fast, supported_correct"),
])
def test_plugin_refuses_bad_configuration(project, monkeypatch, var, value, text):
    from frt_dist.serve.vllm.plugin import Engine

    project()
    monkeypatch.setenv(var, value)
    with pytest.raises(UsageError) as exc:
        Engine.from_env("tiny-qwen2")
    assert text in str(exc.value)


def test_plugin_refuses_a_binding_that_is_not_vllm(monkeypatch):
    from frt_dist.serve.vllm.plugin import Engine
    from helpers.paths import ROOT

    monkeypatch.setenv("FRT_PROJECT", str(ROOT))
    with pytest.raises(UsageError, match=r"host is 'torch'; the vLLM plugin serves a vLLM binding"):
        Engine.from_env("demo-decoder")


def test_the_vllm_router_checks_a_layer_input_by_the_guards_contract_rule():
    """One contract rule (serve.guard.TensorRule): the router's Band refuses what the guard refuses, with the
    guard's reasons, and its per-call fast path agrees with them."""
    import torch

    from frt_dist.serve.vllm.plugin import Band

    band = Band("decode", 1, 16, layer=object(), counts=None,
                contract={"device": "cpu", "dtypes": ["float32"], "width": 8, "layout": "contiguous"})
    assert band.fits(torch.randn(4, 8)) and band.problems(torch.randn(4, 8)) == []
    x = torch.randn(9, 4).t().half()  # [4, 9]: float16, not contiguous, width 9
    assert not band.fits(x)
    assert band.problems(x) == [("dtype", "input 1: dtype float16 not in [float32]"),
                                ("layout", "input 1: not contiguous"), ("width", "input 1: width 9 not 8")]
