"""Is a lockfile fresh? (docs/reference.md#freshness)

A lockfile records the manifest it was made from (embedded, with its digest, and the
project-relative ``manifest-file``). When the project's manifest file now says
something else, the lock is **stale**: ``frt verify`` fails on it (exit 1), while
``frt resolve`` and ``load`` keep using the lock — it is what was reviewed — and print
one ``warning:`` naming the manifest, so nobody serves an old lock unknowingly.
"""

from __future__ import annotations

from pathlib import Path

from ..base.canonical import short_digest
from ..errors import FrtError

__all__ = ["manifest_drift"]


def manifest_drift(lock, root) -> str | None:
    """Why ``lock`` is stale against the manifest file under ``root``, or ``None``.

    No manifest file there (a lock used outside its project, or the bundled demo's
    lock in a wheel) is not staleness: there is nothing to compare with. Nor is a
    ``manifest-file`` that is no safe project-relative path (docs/reference.md#names): it is never
    followed out of the project; ``frt verify`` reports the name."""
    from ..base import names  # noqa: PLC0415

    if not lock.manifest_file or names.problem("path", lock.manifest_file):
        return None
    path = Path(root) / lock.manifest_file
    if not path.is_file():
        return None
    from ..documents.manifest import Manifest  # noqa: PLC0415

    model = lock.model
    try:
        current = Manifest.read(path, label=lock.manifest_file)
    except FrtError as exc:
        return (f"lockfile for {model!r} may be stale: its manifest {lock.manifest_file} does not read ({exc}); "
                "using the lockfile as reviewed")
    if current.digest == lock.manifest.digest:
        return None
    return (f"lockfile for {model!r} is stale: manifest {lock.manifest_file} changed since it was locked "
            f"(locked {short_digest(lock.manifest.digest)}, now {short_digest(current.digest)}); using the lockfile as reviewed; "
            f"run `frt lock --model {model}`")
