"""frt-demo/silu-mul: SiLU-and-multiply activation for CPU (torch-cpu, noarch).

``silu_and_mul(gate_up)``: ``[..., 2I] -> [..., I]``, ``silu(gate_up[..., :I]) * gate_up[..., I:]``.
``gated_mlp(x, w_gate_up, w_down)``: ``linear -> silu_and_mul -> linear`` (the
unfused "split" composition; the projections are plain ``F.linear``).

The activation writes one output buffer (SiLU of the gate slice, then an
in-place multiply by the up slice) instead of the two temporaries of
``F.silu(gate) * up``.
"""

import torch
import torch.nn.functional as F

__all__ = ["silu_and_mul", "gated_mlp"]


def silu_and_mul(gate_up: torch.Tensor) -> torch.Tensor:
    n = gate_up.shape[-1]
    if n % 2:
        raise ValueError(f"silu_and_mul: last dimension must be even, got {n}")
    d = n // 2
    gate, up = gate_up[..., :d], gate_up[..., d:]
    if torch.is_grad_enabled() and gate_up.requires_grad:
        return F.silu(gate) * up
    return F.silu(gate).mul_(up)


def gated_mlp(x: torch.Tensor, w_gate_up: torch.Tensor, w_down: torch.Tensor) -> torch.Tensor:
    return F.linear(silu_and_mul(F.linear(x, w_gate_up)), w_down)
