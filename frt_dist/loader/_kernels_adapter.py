"""The one place the loader touches `kernels` internals (kernels 0.17).

frt imports a verified variant itself (``frt_dist.loader.importer``) instead of
``kernels.get_local_kernel``, and reproduces what that call does for a local
variant (``kernel-depends`` come from the lock, loaded first by the loader):

- parse ``metadata.json`` with `kernels`' own parser (public ``kernels.Metadata.from_bytes``),
  here from the verified bytes instead of re-reading the file by path;
- run `kernels`' default metadata validators (python-depends, kernels-minver, the
  dirty-tree warning): ``kernels.validate.default_metadata_validators`` (private);
- run the package code inside ``kernels.deps.use_kernel_deps(deps)`` (private), as
  `kernels` does, so ``get_kernel_dep`` answers the same during loading;
- register the module in `kernels`' loaded-kernel registry, so
  ``kernels.get_loaded_kernels()`` lists it: ``kernels.importer._loaded_kernels``
  (private), keyed by the variant path (here: the store entry's).

Not reproduced, on purpose: the resolver chain (``LOCAL_KERNELS`` overrides, Hub
resolution of kernel dependencies) and variant selection inside the path: frt
decided the variant, and the dependencies are the packages the lock pins.

``tests/test_store.py::test_kernels_internals_the_adapter_uses_are_still_there``
fails loudly when upstream moves any of these names. `kernels` (and with it
torch) is imported by the first call that needs it, never by ``forget``.
"""

from __future__ import annotations

import sys
from pathlib import Path

__all__ = ["read_metadata", "validate", "loading_context", "register", "forget"]


def read_metadata(data: bytes):
    """`kernels`' parse of the verified ``metadata.json`` bytes (``ValueError`` when invalid)."""
    import kernels  # noqa: PLC0415

    return kernels.Metadata.from_bytes(data)


def validate(metadata, variant: str) -> None:
    """`kernels`' default validators, as ``get_local_kernel`` applies them."""
    import kernels.validate  # noqa: PLC0415

    for validator in kernels.validate.default_metadata_validators():
        validator.validate_metadata(metadata=metadata, variant=variant)


def loading_context(deps: dict | None = None):
    """The context `kernels` runs package code in: ``deps`` (repo -> loaded module) are what
    ``kernels.get_kernel_dep`` answers, as kernels sets them for a dependency tree."""
    import kernels.deps  # noqa: PLC0415

    return kernels.deps.use_kernel_deps(dict(deps or {}))


def register(variant_path: Path, metadata, module) -> None:
    import kernels  # noqa: PLC0415
    import kernels.importer  # noqa: PLC0415

    kernels.importer._loaded_kernels[Path(variant_path)] = kernels.LoadedKernel(
        metadata=metadata, module=module, repo_info=None)


def forget(paths) -> None:
    """Drop registry entries for ``paths`` (only if `kernels` was imported at all)."""
    kimp = sys.modules.get("kernels.importer")
    registry = getattr(kimp, "_loaded_kernels", None)
    if isinstance(registry, dict):
        wanted = {Path(p) for p in paths}
        for key in [k for k in registry if Path(k) in wanted]:
            registry.pop(key, None)
