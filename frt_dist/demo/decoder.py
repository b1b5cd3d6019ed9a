"""Unmodified host binding for the bundled demo: one decoder block in plain torch.

Shapes follow Qwen2.5-0.5B (hidden 896, intermediate 4864, RMSNorm eps 1e-6),
fp32 on CPU.  The block exposes two *seams* -- ``norm`` and ``ffn`` -- whose
callables can be swapped for kernel entries (``bind``) and restored
(``detach``).  The host callables here are the numerical reference the
kernels are checked against.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

__all__ = [
    "HIDDEN",
    "INTERMEDIATE",
    "EPS",
    "host_rms_norm",
    "host_gated_mlp",
    "DecoderBlock",
    "build_host",
]

HIDDEN = 896
INTERMEDIATE = 4864
EPS = 1e-6


def host_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """Reference RMSNorm: ``x * rsqrt(mean(x^2, -1) + eps) * weight``."""
    variance = x.pow(2).mean(-1, keepdim=True)
    return x * torch.rsqrt(variance + eps) * weight


def host_gated_mlp(x: torch.Tensor, w_gate_up: torch.Tensor, w_down: torch.Tensor) -> torch.Tensor:
    """Reference gated MLP: ``down(silu(gate) * up)`` with a merged gate/up projection."""
    gate_up = F.linear(x, w_gate_up)
    gate, up = gate_up.chunk(2, dim=-1)
    return F.linear(F.silu(gate) * up, w_down)


class DecoderBlock:
    """The MLP half of a pre-norm decoder block: ``x + ffn(norm(x))``.

    Weights are deterministic functions of ``seed``.  ``seams`` maps each seam
    name to the callable currently bound; ``host_seams`` is the frozen host
    binding that ``detach`` restores.
    """

    seam_names = ("norm", "ffn")

    def __init__(
        self,
        *,
        seed: int = 0,
        hidden: int = HIDDEN,
        intermediate: int = INTERMEDIATE,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        self.seed = seed
        self.hidden = hidden
        self.intermediate = intermediate
        self.dtype = dtype
        self.eps = EPS

        gen = torch.Generator(device="cpu").manual_seed(seed)
        self.norm_weight = (1.0 + 0.1 * torch.randn(hidden, generator=gen)).to(dtype)
        self.w_gate_up = (torch.randn(2 * intermediate, hidden, generator=gen) / hidden**0.5).to(dtype)
        self.w_down = (torch.randn(hidden, intermediate, generator=gen) / intermediate**0.5).to(dtype)

        self.seams: dict[str, Callable] = {"norm": host_rms_norm, "ffn": host_gated_mlp}
        self.host_seams: dict[str, Callable] = dict(self.seams)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        h = self.seams["norm"](x, self.norm_weight)
        return x + self.seams["ffn"](h, self.w_gate_up, self.w_down)

    def _check_seam(self, seam: str) -> None:
        if seam not in self.seams:
            raise KeyError(f"unknown seam {seam!r}; valid seams: {', '.join(self.seam_names)}")

    def bind(self, seam: str, fn: Callable) -> None:
        """Route ``seam`` to ``fn`` (same call signature as the host callable)."""
        self._check_seam(seam)
        if not callable(fn):
            raise TypeError(f"seam {seam!r} must be bound to a callable, got {type(fn).__name__}")
        self.seams[seam] = fn

    def detach(self) -> None:
        """Restore every seam to its host callable."""
        self.seams = dict(self.host_seams)

    def seam_args(self, seam: str, x: torch.Tensor) -> tuple:
        """Arguments ``seam`` receives when the block runs on input ``x``.

        For ``ffn`` the input is produced by the *host* norm, so the result does
        not depend on what is currently bound to ``norm``.
        """
        self._check_seam(seam)
        if seam == "norm":
            return (x, self.norm_weight)
        h = self.host_seams["norm"](x, self.norm_weight)
        return (h, self.w_gate_up, self.w_down)

    def make_inputs(self, rows: int, *, seed: int = 0) -> torch.Tensor:
        """Seeded ``N(0, 1)`` block input of shape ``[rows, hidden]``."""
        gen = torch.Generator(device="cpu").manual_seed(seed)
        return torch.randn(rows, self.hidden, generator=gen).to(self.dtype)


def build_host(phase: str | None = None, *, seed: int = 0) -> DecoderBlock:
    """Manifest ``host-entry`` factory.  ``phase`` is accepted for interface
    compatibility; the demo block is the same in every phase."""
    return DecoderBlock(seed=seed)
