"""frt-demo/fused-ffn: fused gated MLP for CPU (torch-cpu, noarch).

``gated_mlp(x, w_gate_up, w_down) == linear(silu(g) * u, w_down)`` where
``g, u = linear(x, w_gate_up).chunk(2, -1)``;
``gated_mlp_out(x, w_gate_up, w_down, out)`` writes the same result into ``out``.

What it does differently from the plain composition, for fp32 CPU input
(any leading shape, flattened to rows):

* The GEMM formulation is chosen by row count.  ``F.linear`` computes
  ``x @ W.T``; on MKL that form is slow for small/medium row counts at these
  shapes.  For ``rows <= SMALL_ROWS`` the gate/up projection goes through
  oneDNN's dense-weight linear (``torch.ops.mkldnn._linear_pointwise``) when
  this torch build has it; otherwise the MLP runs transposed (``W @ x.T``),
  which keeps the GEMMs on MKL's faster path and makes the gate and up
  halves contiguous row blocks.
* SiLU-and-multiply runs in place on the gate half of the projection buffer
  (or into one buffer), so there are no extra activation temporaries.

Anything else (other dtypes/devices, autograd) takes a generic path equal to
the plain composition.  No weights are cached or repacked between calls.
"""

import torch
import torch.nn.functional as F

__all__ = ["gated_mlp", "gated_mlp_out", "SMALL_ROWS"]

# At or below this many rows the oneDNN projection wins at Qwen2.5-0.5B shapes
# (measured on 2 AVX2 cores); above it the transposed MKL formulation does.
SMALL_ROWS = 64


def _probe_onednn_linear():
    op = getattr(getattr(torch.ops, "mkldnn", None), "_linear_pointwise", None)
    if op is None:
        return None
    try:
        if not torch.backends.mkldnn.is_available():
            return None
        y = op(torch.ones(2, 3), torch.ones(4, 3), None, "none", [], "")
        if tuple(y.shape) != (2, 4) or not bool((y == 3).all()):
            return None
    except Exception:
        return None
    return op


_ONEDNN_LINEAR = _probe_onednn_linear()


def _fast_ok(x2: torch.Tensor, w_gate_up: torch.Tensor, w_down: torch.Tensor) -> bool:
    for t in (x2, w_gate_up, w_down):
        if t.dtype != torch.float32 or t.device.type != "cpu" or t.layout != torch.strided:
            return False
    if torch.is_grad_enabled() and (x2.requires_grad or w_gate_up.requires_grad or w_down.requires_grad):
        return False
    return (
        w_gate_up.dim() == 2
        and w_down.dim() == 2
        and w_gate_up.shape[1] == x2.shape[1]
        and w_gate_up.shape[0] == 2 * w_down.shape[1]
        and x2.shape[0] > 0
    )


def _generic(x: torch.Tensor, w_gate_up: torch.Tensor, w_down: torch.Tensor) -> torch.Tensor:
    gate, up = F.linear(x, w_gate_up).chunk(2, dim=-1)
    return F.linear(F.silu(gate) * up, w_down)


def _gated_mlp_2d(x2, w_gate_up, w_down, out2d=None):
    """fp32 CPU fast path on [rows, hidden].  Without ``out2d`` a small-row
    result is a transposed view of a [hidden, rows] buffer."""
    inter = w_down.shape[1]
    if _ONEDNN_LINEAR is not None and x2.shape[0] <= SMALL_ROWS:
        gate_up = _ONEDNN_LINEAR(x2.contiguous(), w_gate_up.contiguous(), None, "none", [], "")
        h = F.silu(gate_up[:, :inter])
        h.mul_(gate_up[:, inter:])
        if out2d is None:
            # W_d @ h.T beats h @ W_d.T at few rows; hand back the transposed view.
            return torch.mm(w_down, h.t()).t()
        return torch.mm(h, w_down.t(), out=out2d)
    # gate_up_t = W_gu @ x.T is [2I, rows]; both halves are contiguous row
    # blocks, so SiLU-and-multiply runs in place on the gate half.
    gate_up_t = torch.mm(w_gate_up, x2.t())
    h_t = gate_up_t[:inter]
    F.silu(h_t, inplace=True)
    h_t.mul_(gate_up_t[inter:])
    # Down projection straight into a row-major [rows, hidden] result.
    if out2d is None:
        return torch.mm(h_t.t(), w_down.t())
    return torch.mm(h_t.t(), w_down.t(), out=out2d)


def gated_mlp(x: torch.Tensor, w_gate_up: torch.Tensor, w_down: torch.Tensor) -> torch.Tensor:
    x2 = x.reshape(-1, x.shape[-1])
    if not _fast_ok(x2, w_gate_up, w_down):
        return _generic(x, w_gate_up, w_down)
    y = _gated_mlp_2d(x2, w_gate_up, w_down)
    return y if x.dim() == 2 else y.reshape(*x.shape[:-1], y.shape[-1])


def gated_mlp_out(x: torch.Tensor, w_gate_up: torch.Tensor, w_down: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """``gated_mlp`` that writes its result into ``out`` (shape
    ``[..., hidden]``) and returns ``out``."""
    expected = (*x.shape[:-1], w_down.shape[0])
    if tuple(out.shape) != expected:
        raise ValueError(f"gated_mlp_out: out has shape {tuple(out.shape)}, expected {expected}")
    x2 = x.reshape(-1, x.shape[-1])
    if not _fast_ok(x2, w_gate_up, w_down) or out.dtype != torch.float32 or out.device.type != "cpu":
        return out.copy_(_generic(x, w_gate_up, w_down))
    if out.is_contiguous():
        _gated_mlp_2d(x2, w_gate_up, w_down, out2d=out.view(x2.shape[0], w_down.shape[0]))
    else:
        out.copy_(_gated_mlp_2d(x2, w_gate_up, w_down).reshape(expected))
    return out
