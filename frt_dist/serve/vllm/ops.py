"""vLLM ops frt can replace, and the replacement class for one seam.

An **adapter** says what frt needs to know about one vLLM op class (``CustomOp``'s
registry names it by class name, as ``vllm-op`` does in a manifest): where vLLM defines
it, and how to build a small instance of it and its call for the bind-time smoke. A new
op (a fused-MoE method, an attention backend) is one more entry in ``ADAPTERS``; the
routing class below is the same for every op.

The **routing class** (``route_class``) subclasses vLLM's own op and is registered with
``CustomOp.register_oot`` under the op's class name, so every instance vLLM builds is
one of ours. Its ``__init__`` runs vLLM's own (so ``self._forward_method`` is exactly
the forward vLLM would have run: its ``custom_ops`` setting decides it as before), and
its ``forward`` picks, per call, the phase band by the first input's leading dimension
(tokens in the batch) and runs:

- the band's verified layer (``layers.<Layer>.forward(self, *args)``: the layer reads
  the op's own attributes), counted as a call; inputs outside the impl's contract
  (device, dtype, width, layout) are a contract miss;
- vLLM's own forward for a band decided ``host``, counted as a host call;
- for rows in no band (a contract miss of kind ``rows``): vLLM's own forward counted as
  a fallback under ``FRT_FALLBACK=host``, else ``ContractViolation``.

During vLLM's own dummy runs (memory profiling, compile warm-up, CUDA-graph capture,
all of which go through the model runner's ``_dummy_run``), calls are counted apart as
``warmup`` and a call in no band runs vLLM's own op instead of refusing: the profile run
uses ``max_num_batched_tokens`` rows, which need not be in any band, and is not
traffic. In-band dummy calls run the route, so what is compiled or captured is the
route.

Under ``torch.compile`` (vLLM's default form) the forward is traced once for every batch
size; a band cannot be chosen per call inside one graph. The plugin therefore routes a
compiled engine only where one impl covers every row count the engine can run
(``Engine.compiled_binding``); the layer is traced into the graph and its calls are not
counted (the ledger's ``observed`` is 0 and its notes say why).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["ADAPTERS", "Adapter", "route_class", "vllm_op_class"]


@dataclass(frozen=True)
class Adapter:
    """What frt knows about one vLLM op class."""

    name: str  # the class name (CustomOp's out-of-tree registry key)
    module: str  # where vLLM defines it
    make: Callable  # (cls, width, dtype) -> a smoke instance (weights as vLLM initialises them)
    calls: Callable  # (rows, width, dtype, generator) -> [(args, kwargs)] the smoke runs


def _rms_make(cls, width, dtype):
    import torch  # noqa: PLC0415

    op = _bare(cls)
    cls.__init__(op, width, eps=1e-6, dtype=dtype)
    with torch.no_grad():
        op.weight.normal_(1.0, 0.1, generator=torch.Generator().manual_seed(0))
    return op


def _rms_calls(rows, width, dtype, gen):
    import torch  # noqa: PLC0415

    x = torch.randn(rows, width, generator=gen).to(dtype)
    r = torch.randn(rows, width, generator=gen).to(dtype)
    return [((x,), {}), ((x.clone(), r), {})]


def _silu_make(cls, width, dtype):
    op = _bare(cls)
    cls.__init__(op)
    return op


def _silu_calls(rows, width, dtype, gen):
    import torch  # noqa: PLC0415

    return [((torch.randn(rows, width, generator=gen).to(dtype),), {})]


ADAPTERS = {
    "RMSNorm": Adapter("RMSNorm", "vllm.model_executor.layers.layernorm", _rms_make, _rms_calls),
    "SiluAndMul": Adapter("SiluAndMul", "vllm.model_executor.layers.activation", _silu_make, _silu_calls),
}


def _bare(cls):
    """An instance of vLLM's own ``cls`` without ``CustomOp.__new__``'s out-of-tree swap."""
    import torch.nn as nn  # noqa: PLC0415

    return nn.Module.__new__(cls)


def vllm_op_class(adapter: Adapter):
    """vLLM's own op class for ``adapter`` (imported from where vLLM defines it)."""
    mod = importlib.import_module(adapter.module)
    return getattr(mod, adapter.name)


def smoke_layer(adapter: Adapter, base, layer, impl, rows: int) -> str | None:
    """One real call of ``layer`` as ``base``'s forward at ``rows`` rows for each call shape
    the adapter knows: ``None`` when every output has vLLM's own output's shapes and is
    finite, else why not."""
    import torch  # noqa: PLC0415

    dtype = getattr(torch, impl.contract["dtypes"][0])
    width = impl.contract.get("width") or int(impl.smoke["inputs"][0]["shape"][-1])
    gen = torch.Generator().manual_seed(rows)
    op = adapter.make(base, width, dtype)
    for args, kwargs in adapter.calls(rows, width, dtype, gen):
        try:
            want = op.forward_native(*[a.clone() for a in args], **kwargs)
            got = layer.forward(op, *[a.clone() for a in args], **kwargs)
        except Exception as exc:
            return f"layers.{impl.layer} raised {type(exc).__name__}: {exc} at rows {rows}"
        want = want if isinstance(want, tuple) else (want,)
        got = got if isinstance(got, tuple) else (got,)
        if len(got) != len(want) or any(tuple(g.shape) != tuple(w.shape) for g, w in zip(got, want, strict=False)):
            return (f"layers.{impl.layer} returned shapes {[list(g.shape) for g in got]}, vLLM's {adapter.name} "
                    f"returns {[list(w.shape) for w in want]} (rows {rows})")
        if not all(bool(torch.isfinite(g).all()) for g in got):
            return f"layers.{impl.layer} returned non-finite values at rows {rows}"
    return None


def route_class(base, seam: str, engine):
    """The class registered in place of vLLM's ``base`` op for ``seam`` (see the module doc)."""
    import torch  # noqa: PLC0415

    from ...errors import ContractViolation  # noqa: PLC0415

    compiling = torch.compiler.is_compiling

    class FrtRoutedOp(base):
        _frt_seam = seam
        _frt_engine = engine

        def __init__(self, *args, **kwargs):
            engine.ensure_plan()  # the first op vLLM builds in this process: decide, verify, load, smoke
            super().__init__(*args, **kwargs)

        def forward(self, *args, **kwargs):
            table = engine.table.get(seam)
            own = self._forward_method  # what vLLM itself would run for this op
            if table is None:  # the seam is not routed in this engine (host everywhere, or detached)
                return own(*args, **kwargs)
            if compiling():
                return table.traced(self, own, args, kwargs)
            x = args[0] if args else next(iter(kwargs.values()))
            rows = x.shape[0]
            for band in table.bands:
                if band.lo <= rows <= band.hi:
                    if engine.warming:
                        band.warm += 1
                    else:
                        band.counts.calls += 1
                    if band.layer is None:  # decided host: vLLM's own op
                        if not engine.warming:
                            band.counts.host_calls += 1
                        return own(*args, **kwargs)
                    problems = band.problems(x)
                    if not problems:
                        return band.layer.forward(self, *args, **kwargs)
                    return table.miss(band, problems, own, args, kwargs, engine.warming)
            return table.miss(None, [("rows", f"rows {rows} in no phase band ({table.shown})")], own, args, kwargs,
                              engine.warming)

    FrtRoutedOp.__name__ = FrtRoutedOp.__qualname__ = f"Frt{base.__name__}"
    FrtRoutedOp.__module__ = __name__
    FrtRoutedOp._frt_violation = ContractViolation
    return FrtRoutedOp
