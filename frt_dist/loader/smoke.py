"""Bind-time smoke (docs/reference.md#loading-and-guard; ``smoke.expect``: docs/reference.md#manifest).

Before ``load`` hands out an impl for a phase band it makes one real call of
the impl's entry with inputs built from the manifest's ``smoke.inputs``:
``"rows"`` becomes a row count inside the band (its low end, at least 1 when
the band allows it), each input is seeded ``N(0, 1)`` times its ``scale``, in
its ``dtype``, on the contract's device. The call fails when it raises, when
its output is not a tensor of the expected shape (``smoke.expect.shape`` with
``"rows"`` substituted, else the first input's shape), or when any output
element is not finite. A failure is a reason string; the caller turns every
reason into one ``KernelUnavailable``.

This is a correctness check, not a measurement: nothing is timed, repeated or
remembered.
"""

from __future__ import annotations

__all__ = ["smoke_rows", "smoke_inputs", "expected_shape", "smoke_impl"]

SEED = 0


def smoke_rows(phase) -> int:
    """A row count inside the phase band: its low end (1 when the band starts at 0 and allows it)."""
    lo, hi = phase.rows
    return 1 if lo == 0 and hi >= 1 else lo


def _dims(shape, rows: int) -> tuple[int, ...]:
    return tuple(rows if d == "rows" else int(d) for d in shape)


def _dtype(name: str):
    import torch  # noqa: PLC0415

    dt = getattr(torch, name, None)
    if not isinstance(dt, torch.dtype):
        raise ValueError(f"unknown dtype {name!r}")
    return dt


_TILE = 65521  # prime: a tiled seeded block has no short period along any dimension


def smoke_inputs(impl, rows: int, *, seed: int = SEED, cache: dict | None = None) -> list:
    """The smoke inputs of ``impl`` at ``rows``: seeded ``N(0, 1) * scale`` on the contract device.

    Large inputs (weights at real shapes) tile one seeded block of ``_TILE``
    values instead of drawing every element: same shape, dtype and value
    distribution, a fraction of the cost (a real shape is what the smoke needs,
    not fresh randomness in every element). ``cache`` (one ``load`` call's dict)
    shares inputs whose shape does not depend on ``rows`` — the weights — between
    the smokes of one load, so each is materialised once.
    """
    import math  # noqa: PLC0415

    import torch  # noqa: PLC0415

    gen = torch.Generator(device="cpu").manual_seed(seed)
    device = impl.contract.get("device", "cpu")
    out = []
    for i, spec in enumerate(impl.smoke["inputs"]):
        shape = _dims(spec["shape"], rows)
        key = None
        if cache is not None and "rows" not in spec["shape"]:
            key = (i, shape, spec["dtype"], float(spec.get("scale", 1.0)), device, seed)
            if key in cache:
                out.append(cache[key])
                continue
        n = math.prod(shape)
        if n > _TILE:
            base = torch.randn(_TILE, generator=gen, dtype=torch.float32)
            t = base.repeat(-(-n // _TILE))[:n].view(shape)
        else:
            t = torch.randn(shape, generator=gen, dtype=torch.float32)
        scale = float(spec.get("scale", 1.0))
        if scale != 1.0:
            t = t.mul_(scale) if n > _TILE else t * scale
        t = t.to(dtype=_dtype(spec["dtype"]), device=device)
        if key is not None:
            cache[key] = t
        out.append(t)
    return out


def expected_shape(impl, rows: int, inputs: list) -> tuple[int, ...]:
    exp = impl.smoke.get("expect")
    if exp and "shape" in exp:
        return _dims(exp["shape"], rows)
    return tuple(inputs[0].shape)


def smoke_impl(fn, impl, phase, *, seed: int = SEED, cache: dict | None = None) -> str | None:
    """One real call of ``fn`` for ``impl`` in ``phase``; ``None`` when it passes, else why not."""
    import torch  # noqa: PLC0415

    rows = smoke_rows(phase)
    where = f"smoke of {impl.seam}/{impl.name} ({impl.package}.{impl.entry}) at rows={rows} ({phase.name})"
    try:
        inputs = smoke_inputs(impl, rows, seed=seed, cache=cache)
    except Exception as exc:
        return f"{where}: could not build inputs: {type(exc).__name__}: {exc}"
    want = expected_shape(impl, rows, inputs)
    try:
        with torch.no_grad():
            out = fn(*inputs)
    except Exception as exc:
        return f"{where}: raised {type(exc).__name__}: {exc}"
    if not isinstance(out, torch.Tensor):
        return f"{where}: returned {type(out).__name__}, not a tensor"
    if tuple(out.shape) != want:
        return f"{where}: output shape {list(out.shape)}, expected {list(want)}"
    if (out.is_floating_point() or out.is_complex()) and not bool(torch.isfinite(out).all()):
        return f"{where}: output has non-finite values"
    return None
