"""frt-cuda-ops: RMSNorm and fused SiLU-and-multiply CUDA kernels (built from ../../csrc).

Entries follow the bundled demo's seams (frt_dist.demo.decoder): ``rms_norm(x, weight, eps)``,
``silu_and_mul(gate_up)`` and ``gated_mlp(x, w_gate_up, w_down)``. The operators are registered
as ``torch.ops.frt_cuda_ops.*`` with fake (meta) implementations, so torch.compile traces them
without a graph break and CUDA graphs capture them (they launch on the current stream).
"""

import torch
import torch.nn.functional as F

from . import _C  # noqa: F401 - loading the extension registers torch.ops.frt_cuda_ops

_ops = torch.ops.frt_cuda_ops


@torch.library.register_fake("frt_cuda_ops::rms_norm")
def _rms_norm_fake(x, weight, eps):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.register_fake("frt_cuda_ops::silu_and_mul")
def _silu_and_mul_fake(gate_up):
    return gate_up.new_empty((*gate_up.shape[:-1], gate_up.shape[-1] // 2))


def rms_norm(x, weight, eps=1e-6):
    return _ops.rms_norm(x, weight, eps)


def silu_and_mul(gate_up):
    return _ops.silu_and_mul(gate_up)


def gated_mlp(x, w_gate_up, w_down):
    """``down(silu(gate) * up)``: the host's projections, the activation in one kernel."""
    return F.linear(_ops.silu_and_mul(F.linear(x, w_gate_up)), w_down)
