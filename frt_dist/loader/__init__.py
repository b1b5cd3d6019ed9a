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
- ``smoke``: the bind-time launch at the seam's real shape.

**The verified store** is per user and content-addressed: ``$FRT_STORE``, else
``platformdirs.user_cache_path("frt-dist")/"store"`` (``~/.cache/frt-dist/store``
on Linux), created 0700; a store not owned by the user or writable by group or
others is refused. An entry holds exactly a variant's locked files and its
``metadata.json``, read-only, plus a record written last that embeds its key
(the hash of algorithm, file digests, metadata sha256 and module id).

- A **cold** load lists the source directory (a missing file, an extra file –
  named with its size, never read –, a link leaving the tree), then reads each
  declared file once, hashing and copying the same bytes into a new entry
  (large files in parallel threads); any mismatch stores nothing and imports
  nothing, and the report names each file with expected and computed digests.
- A **warm** load (a sound entry for the same identity) hashes no extension
  module; it lists the source again and hashes only the files whose stat
  fingerprint changed since their bytes last matched: a source that drifted is
  still refused.
- Either way the import reads only the entry: ``.py`` files are hashed against
  the lock again and compiled from those bytes; an extension module is mapped
  from the descriptor whose seal (recorded fingerprint, owner, mode 0444, one
  link) was checked, unread, or, under ``FRT_STORE_REHASH=1`` or a broken seal,
  hashed and mapped from a sealed copy of the bytes hashed.

**Threat model**: an attacker who can write the mirror, the hub cache, a path
package or the lockfile (at any moment, also between check and import), but not
the user's own private store (``store`` says what a writer of the store can do,
and what ``FRT_STORE_REHASH=1`` takes away from them). They can make a load refuse; they cannot make it
run bytes whose digests do not match the lockfile in force.

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
