"""vLLM ops frt can replace, and the replacement class for one seam.

An **adapter** says what frt needs to know about one vLLM op class (``CustomOp``'s
registry names it by class name, as ``vllm-op`` does in a manifest): where vLLM defines
it, its call's parameters, the shapes of its outputs (the fake implementation a compiler
needs), and how to build a small instance of it and its call for the bind-time smoke. A
new op (a fused-MoE method, an attention backend) is one more entry in ``ADAPTERS``; the
routing class below is the same for every op.

The **routing class** (``route_class``) subclasses vLLM's own op and is registered with
``CustomOp.register_oot`` under the op's class name, so every instance vLLM builds is
one of ours. Its ``__init__`` runs vLLM's own (so ``self._forward_method`` is exactly
the forward vLLM would have run: its ``custom_ops`` setting decides it as before), and
each call is routed by ``SeamTable.call`` (frt_dist/serve/vllm/plugin.py): the phase band
is picked by the first input's leading dimension (tokens in the batch), then

- the band's verified layer (``layers.<Layer>.forward(self, *args)``: the layer reads
  the op's own attributes), counted as a call; inputs outside the impl's contract
  (device, dtype, width, layout) are a contract miss;
- vLLM's own forward for a band decided ``host``, counted as a host call;
- for rows in no band (a contract miss of kind ``rows``): vLLM's own forward counted as
  a fallback under ``FRT_FALLBACK=host``, else ``ContractViolation``.

**In vLLM's compiled form** (``torch.compile``, vLLM's default) one graph serves every
batch size, so the choice cannot be made while tracing. A routed seam's call is therefore
traced as one opaque op, ``torch.ops.frt.dispatch(tensors, slot)`` (a ``torch.library``
op with a fake implementation, as vLLM treats attention): Dynamo and Inductor see its
output shapes, never its body, and at run time its body is the same ``SeamTable.call``
as in eager mode, per call, counted. ``slot`` is the op instance's index in this
process's construction order (the same in every process that builds the same model, so a
graph vLLM cached on disk finds the same ops). A seam none of whose bands is routed is
traced as vLLM traces its own op: such an engine compiles exactly what vLLM compiles.
The op is functional: its outputs never alias its inputs (an output that is an input is
copied), and vLLM's own forward, where it may write its inputs (``Adapter.writes``),
runs on copies inside it. A layer served in a compiled engine must not write its inputs
(vLLM's IR asks the same of its functional overloads).

During vLLM's own dummy runs (memory profiling, compile warm-up, CUDA-graph capture,
all of which go through the model runner's ``_dummy_run``), calls are counted apart as
``warmup`` and a call in no band runs vLLM's own op instead of refusing: the profile run
uses ``max_num_batched_tokens`` rows, which need not be in any band, and is not
traffic. In-band dummy calls run the route, so what is captured is the route. Under CUDA
graphs (``compile-then-capture``) vLLM captures one graph per batch size: the band that
size falls in is the band its graph holds, and replays run no Python (not counted).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["ADAPTERS", "DISPATCH_SCHEMA", "Adapter", "dispatch_op", "route_class", "smoke_layer", "smoke_rows",
           "vllm_op_class"]


@dataclass(frozen=True)
class Adapter:
    """What frt knows about one vLLM op class."""

    name: str  # the class name (CustomOp's out-of-tree registry key)
    module: str  # where vLLM defines it
    make: Callable  # (cls, width, dtype) -> a smoke instance (weights as vLLM initialises them)
    calls: Callable  # (rows, width, dtype, generator) -> [(args, kwargs)] the smoke runs
    params: tuple = ("x",)  # the forward's tensor parameters, in order (the rest must be None)
    fake: Callable = None  # (tensors) -> [outputs] with the outputs' shapes and dtypes (no data)
    writes: bool = False  # vLLM's own forward may write its inputs (fused in-place kernels)

    def pack(self, args, kwargs) -> list:
        """The call's tensors, in ``params`` order, up to the first ``None`` (trailing ``None``s dropped)."""
        vals = list(args) + [kwargs[p] for p in self.params[len(args):] if p in kwargs]
        if len(kwargs) > len(self.params) - len(args) or any(k not in self.params for k in kwargs):
            raise TypeError(f"{self.name}.forward: unexpected arguments {sorted(kwargs)}")
        out = []
        for v in vals:
            if v is None:
                break
            out.append(v)
        return out


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


def _rms_fake(tensors):
    return [t.new_empty(t.shape) for t in tensors]  # out, and the residual when one is given


def _silu_fake(tensors):
    x = tensors[0]
    return [x.new_empty((*x.shape[:-1], x.shape[-1] // 2))]


ADAPTERS = {
    "RMSNorm": Adapter("RMSNorm", "vllm.model_executor.layers.layernorm", _rms_make, _rms_calls,
                       params=("x", "residual"), fake=_rms_fake, writes=True),
    "SiluAndMul": Adapter("SiluAndMul", "vllm.model_executor.layers.activation", _silu_make, _silu_calls,
                          params=("x",), fake=_silu_fake),
}


def _bare(cls):
    """An instance of vLLM's own ``cls`` without ``CustomOp.__new__``'s out-of-tree swap."""
    import torch.nn as nn  # noqa: PLC0415

    return nn.Module.__new__(cls)


def vllm_op_class(adapter: Adapter):
    """vLLM's own op class for ``adapter`` (imported from where vLLM defines it)."""
    mod = importlib.import_module(adapter.module)
    return getattr(mod, adapter.name)


def smoke_rows(band_rows, cap: int = 128) -> list[int]:
    """The row counts a band's smoke runs at: its low end and its high end, capped as qualification caps it."""
    lo, hi = band_rows
    return sorted({max(lo, 1), max(min(hi, cap), 1)})


def smoke_layer(adapter: Adapter, base, layer, impl, rows_list, tolerance: dict) -> str | None:
    """Real calls of ``layer`` as ``base``'s forward, at each of ``rows_list`` for each call shape the
    adapter knows, against vLLM's own op (``forward_native``) on the same inputs: ``None`` when every
    output is a tensor with vLLM's output's shape and dtype, finite, within ``tolerance`` (``abs + rel *
    |vLLM's|``) of it, and the layer left its inputs as they were; else why not (the first problem)."""
    import torch  # noqa: PLC0415

    dtype = getattr(torch, impl.contract["dtypes"][0])
    device = impl.contract.get("device") or "cpu"
    width = impl.contract.get("width") or int(impl.smoke["inputs"][0]["shape"][-1])
    op = adapter.make(base, width, dtype).to(device)
    for rows in rows_list:
        gen = torch.Generator().manual_seed(rows)
        for args, kwargs in adapter.calls(rows, width, dtype, gen):
            args = [a.to(device) for a in args]
            try:
                with torch.no_grad():
                    want = op.forward_native(*[a.clone() for a in args], **kwargs)
                    given = [a.clone() for a in args]
                    got = layer.forward(op, *given, **kwargs)
            except Exception as exc:
                return f"layers.{impl.layer} raised {type(exc).__name__}: {exc} at rows {rows}"
            want = list(want) if isinstance(want, tuple) else [want]
            got = list(got) if isinstance(got, tuple) else [got]
            where = f"at rows {rows}" + (" with a residual" if len(args) > 1 else "")
            if not all(isinstance(g, torch.Tensor) for g in got):
                kinds = ", ".join(type(g).__name__ for g in got)
                return f"layers.{impl.layer} returned {kinds}, not tensors as vLLM's {adapter.name} does ({where})"
            if len(got) != len(want) or any(tuple(g.shape) != tuple(w.shape) for g, w in zip(got, want, strict=False)):
                return (f"layers.{impl.layer} returned shapes {[list(g.shape) for g in got]}, vLLM's {adapter.name} "
                        f"returns {[list(w.shape) for w in want]} ({where})")
            for i, (g, w) in enumerate(zip(got, want, strict=True)):
                if g.dtype != w.dtype:
                    return (f"layers.{impl.layer} returned {str(g.dtype).removeprefix('torch.')} for output {i}, vLLM's "
                            f"{adapter.name} returns {str(w.dtype).removeprefix('torch.')} ({where})")
                if not bool(torch.isfinite(g).all()):
                    return f"layers.{impl.layer} returned non-finite values in output {i} ({where})"
                err = (g.double() - w.double()).abs()
                bound = tolerance["abs"] + tolerance["rel"] * w.double().abs()
                if bool((err > bound).any()):
                    return (f"layers.{impl.layer} differs from vLLM's {adapter.name} by {float(err.max()):.3g} in output "
                            f"{i} ({where}; tolerance abs {tolerance['abs']:g}, rel {tolerance['rel']:g})")
            for i, (before, after) in enumerate(zip(args, given, strict=True)):
                if not torch.equal(before, after):
                    return (f"layers.{impl.layer} wrote its input {i} ({where}): frt calls a layer as a function of "
                            "its inputs (a compiled graph may read them again)")
    return None


# -- the dispatch op a compiled graph calls ----------------------------------------------

DISPATCH_SCHEMA = "dispatch(Tensor[] tensors, int slot) -> Tensor[]"
"""frt's one op in a compiled graph (namespace ``frt``); part of what keys vLLM's compile cache."""

_SLOTS: list = []  # this process's routing-class instances, in construction order (a slot is an index)
_lib = None


def dispatch_op():
    """``torch.ops.frt.dispatch.default``, defined once per process."""
    global _lib
    import torch  # noqa: PLC0415

    if _lib is None:
        lib = torch.library.Library("frt", "FRAGMENT")
        lib.define(DISPATCH_SCHEMA)
        # CompositeExplicitAutograd: one kernel for every device, never decomposed by AOTAutograd
        lib.impl("dispatch", _dispatch, "CompositeExplicitAutograd")
        lib._register_fake("dispatch", _dispatch_fake)
        _lib = lib
    return torch.ops.frt.dispatch.default


def _dispatch_fake(tensors, slot):
    return _SLOTS[slot]._frt_adapter.fake(tensors)


def _dispatch(tensors, slot):
    """The body of ``frt::dispatch`` at run time: the seam's table decides this call (on the hot path:
    every call of a routed seam in a compiled graph comes here)."""
    op = _SLOTS[slot]
    eng = op._frt_engine
    table = eng.table.get(op._frt_seam)
    out = op._frt_own(*tensors) if table is None else table.call(op, op._frt_own, tensors, {}, eng.warming)
    if type(out) is not tuple and type(out) is not list:
        out = [out]
    ptrs = [t.data_ptr() for t in tensors]
    outs = []
    for o in out:  # functional: an output that is an input (the residual passed through) is a copy
        outs.append(o.clone() if o.data_ptr() in ptrs else o)
    return outs


def _copying(forward):
    """vLLM's own forward on copies of its inputs (an op whose forward may write them, inside a functional op)."""

    def own(*args, **kwargs):
        return forward(*[a.clone() for a in args], **kwargs)

    return own


def route_class(base, seam: str, engine, adapter: Adapter):
    """The class registered in place of vLLM's ``base`` op for ``seam`` (see the module doc)."""
    import torch  # noqa: PLC0415

    from ...errors import ContractViolation  # noqa: PLC0415

    compiling = torch.compiler.is_compiling
    dispatch = dispatch_op()

    class FrtRoutedOp(base):
        _frt_seam = seam
        _frt_engine = engine
        _frt_adapter = adapter

        def __init__(self, *args, **kwargs):
            engine.ensure_plan()  # the first op vLLM builds in this process: decide, verify, load, smoke
            super().__init__(*args, **kwargs)
            # what frt::dispatch runs for vLLM's own op: its forward, on copies where it may write its inputs
            self._frt_own = _copying(self._forward_method) if adapter.writes else self._forward_method
            self._frt_slot = len(_SLOTS)
            _SLOTS.append(self)

        def forward(self, *args, **kwargs):
            if compiling():  # one graph for every batch size: the band is chosen at run time, in frt::dispatch
                if seam not in engine.dispatched:  # no band routed: vLLM's own op, traced as vLLM traces it
                    return self._forward_method(*args, **kwargs)
                out = dispatch(adapter.pack(args, kwargs), self._frt_slot)
                return out[0] if len(out) == 1 else tuple(out)
            table = engine.table.get(seam)
            if table is None:  # the seam is not routed in this engine (host everywhere, or detached)
                return self._forward_method(*args, **kwargs)
            return table.call(self, self._forward_method, args, kwargs, engine.warming)

    FrtRoutedOp.__name__ = FrtRoutedOp.__qualname__ = f"Frt{base.__name__}"
    FrtRoutedOp.__module__ = __name__
    FrtRoutedOp._frt_violation = ContractViolation
    return FrtRoutedOp
