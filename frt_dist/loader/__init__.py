"""The loader: the one shared ``hub_kernel`` and everything a load checks before it imports.

- ``core``: which revision, trust, variant, arch, where the bytes come from, one
  module per package per process (``hub_kernel``, ``load_locked``);
- ``integrity``: every file of a variant against the lock (missing, unknown,
  mismatched, links leaving the tree), before anything is imported;
- ``smoke``: the bind-time launch at the seam's real shape.

The verified store (what is imported is what was verified, SPEC §22) will live
here too. Importing this package imports neither torch, `kernels` nor
``huggingface_hub``.
"""

from __future__ import annotations

from .core import (
    CheckBatch,
    LoadedPackage,
    Ready,
    _as_lock,
    _forget_all,
    _LOADED,
    cache_dirs,
    hub_kernel,
    is_offline,
    load_locked,
    load_package,
    lock_root,
    mirror_dir,
    pin_env_name,
    prepare_locked,
    record_unavailable,
    repo_folder,
    unavailable_report,
)

__all__ = ["hub_kernel", "load_package", "load_locked", "prepare_locked", "unavailable_report", "LoadedPackage",
           "Ready", "CheckBatch", "pin_env_name", "record_unavailable",
           "mirror_dir", "cache_dirs", "is_offline", "repo_folder", "lock_root"]
