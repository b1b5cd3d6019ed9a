"""The bridge to ``kernels.kernelize``: a ``Plan`` as a kernel mapping.

Models whose layers use ``kernels.use_kernel_forward_from_hub("LayerName")`` get their
kernels through a mapping ``{layer name: {device type: repository}}`` that
``kernels.use_kernel_mapping`` registers and ``kernels.kernelize`` reads; a repository
is anything with ``load() -> nn.Module subclass`` and ``layer_name``.
``plan.kernel_mapping({seam: layer name})`` builds that mapping from what ``load``
already bound:

- the layer class is taken from the **verified module** of the package each band's
  decision chose (``plan.packages[repo].module.layers.<LayerName>``): no second
  import, no download, nothing `kernels` resolves on its own;
- the forward that replaces the model's is one layer per seam that picks the phase
  band by the input's rows (the elements of the first input over its last dimension,
  as a ``[batch, seq, hidden]`` activation counts tokens) and runs that band's
  verified layer, counted in the plan's ledger;
- a band with no route under the plan's policy (decided ``host``) is **not**
  kernelized: the module's own forward runs there, counted as a host call; rows in
  no band are a contract miss (``rows``) that runs the module's own forward under
  ``fallback="host"`` and raises ``ContractViolation`` otherwise; a detached plan runs
  the module's own forward.

The layer's own forward is the kernel team's code from the verified package; frt's
per-argument contract checks apply to ``plan.entry`` callables, not to layers, whose
arguments are module attributes the binding decides.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping

from ..errors import ContractViolation, KernelUnavailable, UsageError

__all__ = ["kernel_mapping", "package_layer"]


class PlanLayerRepository:
    """A `kernels` layer repository backed by a ``Plan`` (``RepositoryProtocol``)."""

    def __init__(self, plan, seam: str, layer_name: str, layers: dict):
        self._plan, self._seam, self.layer_name, self._layers = plan, seam, layer_name, layers
        self._cls = None

    def __repr__(self) -> str:
        bands = ", ".join(f"{p}: {self._plan.decisions[p].route or 'host'}" for p in self._layers)
        return f"frt plan {self._plan.model!r} seam {self._seam!r} layer {self.layer_name!r} ({bands})"

    __str__ = __repr__

    def load(self):
        if self._cls is None:
            self._cls = _seam_layer(self._plan, self._seam, self.layer_name, self._layers)
        return self._cls


def _rows(x) -> int:
    shape = getattr(x, "shape", None)
    if not shape:
        return 1
    last = shape[-1] or 1
    return x.numel() // last


def _seam_layer(plan, seam: str, layer_name: str, layers: dict):
    import torch.nn as nn  # noqa: PLC0415

    phases = plan.lockfile.manifest.phases
    bands = [(p, phases[p].rows[0], phases[p].rows[1], layers[p]) for p in layers]
    host_ok = plan.fallback == "host"
    template = next((cls for cls in layers.values() if cls is not None), None)

    def forward(self, x, *args, **kwargs):
        own = type(self).forward  # the module's own forward (kernelize replaced the instance's)
        rows = _rows(x)
        for phase, lo, hi, layer in bands:
            if lo <= rows <= hi:
                st = plan.counts(seam, phase)
                st.calls += 1
                if layer is None or plan.detached:
                    st.host_calls += 1
                    return own(self, x, *args, **kwargs)
                return layer.forward(self, x, *args, **kwargs)
        st = plan.counts(seam, bands[0][0])
        st.calls += 1
        st.misses["rows"] = st.misses.get("rows", 0) + 1
        if host_ok:
            st.fallbacks += 1
            return own(self, x, *args, **kwargs)
        st.contract_refusals += 1
        shown = ", ".join(f"{p} {lo}..{hi}" for p, lo, hi, _ in bands)
        raise ContractViolation(f"seam {seam!r} (layer {layer_name}): rows {rows} in no phase band ({shown})",
                                reasons=[{"seam": seam, "kind": "rows", "reason": f"rows {rows} in no phase band ({shown})"}])

    if template is not None:  # kernels checks that the forward signature matches the layer it replaces
        forward.__signature__ = inspect.signature(template.forward)
    attrs = {"forward": forward, "__module__": __name__, "__qualname__": f"frt_{layer_name}"}
    if template is not None:
        for flag in ("can_torch_compile", "has_backward"):
            if hasattr(template, flag):
                attrs[flag] = getattr(template, flag)
    return type(f"frt_{layer_name}", (nn.Module,), attrs)


def package_layer(module, layer_name: str) -> tuple[type | None, str | None]:
    """``(module.layers.<layer_name>, None)``, or ``(None, why it is not a layer to serve)``: it must be
    an ``nn.Module`` subclass defined in the package itself (its ``layers`` module or another module
    of the package), not anything else the ``layers`` module happens to hold (an imported ``torch``
    class, a function, a constant). The one lookup of a package's layer: ``load`` (a vLLM binding's
    layer impls), the vLLM plugin's qualification plan and ``kernel_mapping``."""
    import torch.nn as nn  # noqa: PLC0415

    layers = getattr(module, "layers", None)
    if not isinstance(layers, type(module)):
        return None, f"has no layers.{layer_name} (the package has no layers module)"
    layer = vars(layers).get(layer_name)
    if layer is None:
        return None, f"has no layers.{layer_name}"
    if not (isinstance(layer, type) and issubclass(layer, nn.Module)):
        return None, f"layers.{layer_name} is not a layer class (an nn.Module subclass), it is {type(layer).__name__}"
    home = getattr(layer, "__module__", "") or ""
    if home != module.__name__ and not home.startswith(module.__name__ + "."):
        return None, f"layers.{layer_name} is {home}.{layer.__qualname__}, not a layer the package defines"
    return layer, None


def kernel_mapping(plan, layers: Mapping[str, str], *, device: str | None = None) -> dict:
    """``{layer name: {device type: repository}}`` for ``kernels.use_kernel_mapping``.

    ``layers`` maps each seam to the layer name the model's modules declare with
    ``use_kernel_forward_from_hub``; ``device`` is the `kernels` device type to register
    for (default: the plan's hardware backend, ``cuda``/``rocm``/``cpu``/...)."""
    m = plan.lockfile.manifest
    mapping: dict = {}
    for seam, layer_name in layers.items():
        if seam not in m.seams:
            raise UsageError(f"kernel_mapping: unknown seam {seam!r} for model {plan.model!r} (seams: {', '.join(m.seams)})")
        if not isinstance(layer_name, str) or not layer_name.isidentifier() or layer_name.startswith("_"):
            # a name like "__class__" or "_private" is an attribute of every module, never a layer
            raise UsageError(f"kernel_mapping: layer name for seam {seam!r} must be an identifier naming a layer "
                             f"class (not starting with '_'), got {layer_name!r}")
        chosen: dict = {}
        for phase, d in plan.decisions.items():
            b = plan.binding(seam, phase)
            if d.decision != "route" or b is None:
                chosen[phase] = None  # not kernelized in this band: the module's own forward runs
                continue
            layer, why = package_layer(plan.packages[b.repo].module, layer_name)
            if why is not None:
                why = f"package {b.repo} (variant {b.variant}) {why}"
                raise KernelUnavailable(f"kernel_mapping: seam {seam!r}, {phase} band: {why}",
                                        reasons=[{"package": b.repo, "seam": seam, "phase": phase, "reason": why}])
            chosen[phase] = layer
        mapping[layer_name] = {device or plan.hardware.backend: PlanLayerRepository(plan, seam, layer_name, chosen)}
    return mapping
