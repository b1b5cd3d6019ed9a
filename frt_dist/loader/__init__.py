"""The loader: the one shared ``hub_kernel`` and everything a load checks before it imports.

- ``core``: which revision, trust, variant, arch, where the bytes come from, one
  module per package per process (``hub_kernel``, ``load_locked``);
- ``frt_dist.distribution.integrity`` (below the loader): every file of a variant against the
  lock (missing, unknown, mismatched, links leaving the tree); ``check_variant_dir`` is what
  ``frt verify --mirror`` reports with;
- ``store``: the verified store, where a load's bytes are hashed into and
  imported from (what is imported is what was verified: docs/reference.md#verified-store);
- ``importer``: the meta-path finder and loaders that import a package from its
  store entry only (no bytecode read or written);
- ``remote``: a load straight from an object store into the verified store;
- ``smoke``: the bind-time launch at the seam's real shape.

How a load runs, the store and its threat model: docs/design.md#loading-and-the-verified-store.
Importing this package imports neither torch, `kernels` nor ``huggingface_hub``.
"""

from __future__ import annotations

__all__ = ["hub_kernel", "load_package", "load_locked", "prepare_locked", "unavailable_report", "LoadedPackage",
           "Ready", "CheckBatch", "pin_env_name", "record_unavailable",
           "mirror_dir", "mirror_location", "cache_dirs", "is_offline", "repo_folder", "lock_root"]

# Importing the package imports nothing (start-up: a command that needs one loader module does not pay
# for the rest); ``frt_dist.loader.hub_kernel`` and the other names below come from ``core`` on first use.
_FROM_CORE = frozenset({
    "CheckBatch",
    "LoadedPackage",
    "Ready",
    "_as_lock",
    "_forget_all",
    "_LOADED",
    "cache_dirs",
    "hub_kernel",
    "is_offline",
    "load_locked",
    "load_package",
    "lock_root",
    "mirror_dir",
    "mirror_location",
    "pin_env_name",
    "prepare_locked",
    "record_unavailable",
    "repo_folder",
    "unavailable_report",
})


def __getattr__(name: str):
    if name in _FROM_CORE:
        from . import core  # noqa: PLC0415

        return getattr(core, name)
    raise AttributeError(f"module 'frt_dist.loader' has no attribute {name!r}")
