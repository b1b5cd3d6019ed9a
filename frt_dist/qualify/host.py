"""The host binding ``frt qualify`` measures a route against: the manifest's ``host-entry =
"module:callable"``, a factory ``(phase, *, seed) -> block`` whose block runs the binding
(``HOST_INTERFACE``, checked by ``build_host_block`` before anything is bound), and one block's
seams switched between the host's callables and the route's (``one_block_side``)."""

from __future__ import annotations

from ..errors import UsageError

__all__ = ["HOST_INTERFACE", "HOST_HINT", "load_host_factory", "build_host_block", "one_block_side"]


def load_host_factory(spec: str | None, model: str, root=None):
    """The host-entry factory; its module is found from the project ``root`` first
    (``project.import_entry``: no ``PYTHONPATH`` needed, nothing installed shadowed)."""
    from ..project.discover import import_entry  # noqa: PLC0415

    if not spec:
        raise UsageError(f"model {model!r}: the manifest declares no `host-entry = \"module:callable\"`; "
                         "qualification needs the unmodified host")
    try:
        factory = import_entry(spec, root)
    except (ImportError, AttributeError) as exc:
        raise UsageError(f"host-entry {spec!r} cannot be imported: {exc}") from None
    if not callable(factory):
        raise UsageError(f"host-entry {spec!r} is a {type(factory).__name__}, not a callable factory",
                         hints=[HOST_HINT])
    return factory


HOST_INTERFACE = {
    "__call__": "block(x) runs the binding and returns its output tensor",
    "seams": "a mapping seam -> the callable currently bound",
    "host_seams": "a mapping seam -> the host's own callable, for every seam the route binds",
    "bind": "bind(seam, fn) swaps one seam's callable",
    "detach": "detach() restores every host seam",
    "make_inputs": "make_inputs(rows, *, seed=) builds the seeded input tensor",
}
"""What ``frt qualify`` uses of the object a host-entry factory returns (docs/first-project.md)."""
HOST_HINT = ("a host-entry is a factory (phase, *, seed) -> block; the block provides "
             + "; ".join(f"`{k}`: {v}" for k, v in HOST_INTERFACE.items()))


def build_host_block(factory, spec: str, phase: str, seed: int, seams) -> object:
    """``factory(phase, seed=seed)``, checked against ``HOST_INTERFACE`` before anything is bound
    or measured: a missing attribute or seam is one ``UsageError`` (exit 2) naming the host-entry
    and everything missing, not an ``AttributeError`` from deep inside qualification."""
    try:
        block = factory(phase, seed=seed)
    except Exception as exc:  # the user's code: name it, and say how it was called
        raise UsageError(f"host-entry {spec!r}: calling it as factory({phase!r}, seed={seed}) raised "
                         f"{type(exc).__name__}: {exc}", hints=[HOST_HINT]) from None
    kind = type(block).__name__
    missing = []
    for name in HOST_INTERFACE:
        if name == "__call__":
            if not callable(block):
                missing.append("__call__ (it is not callable)")
        elif name in ("seams", "host_seams"):
            v = getattr(block, name, None)
            if v is None or not hasattr(v, "__getitem__") or not hasattr(v, "__contains__"):
                missing.append(f"{name} (a mapping)" if v is None else f"{name} (a mapping, got {type(v).__name__})")
        elif not callable(getattr(block, name, None)):
            missing.append(f"{name}() (a method)")
    if missing:
        raise UsageError(f"host-entry {spec!r}: the host object it returned ({kind}) is missing "
                         + ", ".join(missing), hints=[HOST_HINT, "docs/first-project.md shows a complete host"])
    absent = [s for s in seams if s not in block.host_seams]
    if absent:
        have = ", ".join(sorted(map(str, block.host_seams))) if hasattr(block.host_seams, "__iter__") else "?"
        raise UsageError(f"host-entry {spec!r}: the host object's host_seams ({kind}) has no seam "
                         + ", ".join(repr(s) for s in absent) + f" that the route binds (it has: {have or 'none'})",
                         hints=["host_seams maps every seam name of the manifest to the host's own callable"])
    return block


def one_block_side(block, fns: dict):
    """``block(x)`` with ``fns`` bound to their seams first (a bind only where another callable is
    bound, so within one side's calls it costs a dict lookup per seam)."""

    def run(x):
        for seam, fn in fns.items():
            if block.seams[seam] is not fn:
                block.bind(seam, fn)
        return block(x)

    return run
