"""``frt export --format kernels`` (formerly ``frt lock --export kernels``): the same pins in `kernels`' own lock format.

`kernels` projects pin their kernels in a ``kernels.lock`` (JSON: a list of
``{"dependency": {"repo-id", "version"}, "lock": {"commit"}}``) that
``kernels.load_kernel(repo, lockfile=...)``, ``get_locked_kernel`` and
``LockedLayerRepository`` read. The export is parsed into `kernels`' own lock type
(``kernels.locking.KernelLocks.from_json``) and written by it (``to_json``), so the
format cannot drift from the library's (a change there fails the export loudly); this is the one place frt's lock path
imports `kernels`, and only when an export is asked for.

Every locked package is exported at its locked version and commit. A path package
has no Git commit; it is exported under the snapshot name frt's mirror gives it (the
first 40 hex digits of its content digest, docs/reference.md#mirrors), so a `kernels` reading an frt
mirror (``KERNELS_CACHE=<mirror>``, offline) finds exactly the mirrored bytes. What
`kernels.lock` cannot say — file digests, trust decisions, variants, receipts — stays
in frt's lockfile: the export is a view for `kernels`, not a replacement.

`kernels` checks no file digest on any load path (``load_kernel``, ``get_locked_kernel``,
the locked layer repositories): a file edited in the mirror or the cache after ``frt mirror``
wrote it runs. A load through the export is as safe as the mirror it reads, so check the
mirror with ``frt verify --mirror DIR`` before it (``frt export`` says so on stderr);
``frt_dist.load`` verifies every file against the lock itself.
"""

from __future__ import annotations

import json

from ..errors import LockfileError, UsageError

__all__ = ["kernels_lock_json", "FORMATS"]

FORMATS = ("kernels",)


def kernels_lock_json(locks) -> str:
    """``kernels.lock`` text for every package of ``locks`` (a ``frt_dist.Lockfile`` or several:
    one project's models share one ``kernels.lock``; a repo pinned differently by two of them
    is an error naming both)."""
    from ..documents.lockfile import Lockfile  # noqa: PLC0415

    locks = [locks] if isinstance(locks, Lockfile) else list(locks)
    pins: dict = {}
    for lf in locks:
        for repo, pkg in lf.packages.items():
            seen = pins.setdefault(repo, (pkg, lf))
            if (seen[0].version, seen[0].snapshot) != (pkg.version, pkg.snapshot):
                raise LockfileError(
                    f"{repo} is pinned twice: v{seen[0].version} at {seen[0].snapshot} in {seen[1].path}, "
                    f"v{pkg.version} at {pkg.snapshot} in {lf.path}; a kernels.lock holds one pin per repo",
                    hints=["export one model: frt export --format kernels --model MODEL"])
    try:
        from kernels.locking import KernelLocks  # noqa: PLC0415
    except ImportError as exc:
        raise UsageError("frt export --format kernels needs the kernels library installed",
                         hints=["pip install 'frt-dist[runtime]' (or: pip install kernels)"]) from exc
    draft = [{"dependency": {"repo-id": repo, "version": pkg.version}, "lock": {"commit": pkg.snapshot}}
             for repo, (pkg, _) in sorted(pins.items())]
    try:  # kernels parses it into its own lock types and writes it back: the format is kernels'
        return KernelLocks.from_json(json.dumps(draft)).to_json() + "\n"
    except ValueError as exc:
        raise LockfileError(f"kernels does not accept the exported lock: {exc}") from None
