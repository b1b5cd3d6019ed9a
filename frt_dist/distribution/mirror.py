"""``frt mirror DIR`` and ``frt verify --mirror``: an offline copy of every locked file
(``docs/reference.md#mirrors``).

A mirror is a directory laid out as a Hugging Face hub cache, so that plain
`kernels` with ``HF_HUB_OFFLINE=1 KERNELS_CACHE=DIR`` loads from it too::

    DIR/kernels--<org>--<name>/
        blobs/<sha256 hex of the bytes>              each file's bytes, stored once
        snapshots/<snapshot>/build/<variant>/<file>  relative symlink into blobs/ (a copy where links are unavailable)
        refs/v<N>                                    the snapshot name (no newline); refs/main too when absent
    DIR/.locks/<repo folder>/<blob>.lock             per-blob lock files (while a run needs them)
    DIR/.locks/frt-runs/<run>.lock                   held by a live run for as long as it runs
    DIR/.frt-tmp/<run>/…                             that run's in-flight temp files (nothing when idle)

``<snapshot>`` is the locked commit, or for a path package the first 40 hex
digits of its content digest (``LockedPackage.snapshot``).

This module is the public face; the work is in four modules:

- ``mirror_select``: which variants a selection names (``select_for_mirror``, ``cell_machines``);
- ``mirror_write``: one run filling DIR (``MirrorRun``): each file from where
  ``frt_dist.distribution.sources`` says its bytes come from (a path package's source, the local
  hub cache, the Hub at the locked commit) or from an object store (``--from URL``), every blob
  verified against the locked digest before it becomes visible (temp file, then rename); a blob
  already present and verified is not fetched again, so an interrupted run resumes; a lock per
  blob makes concurrent runs on one DIR fetch each blob once. A package's refs are written last,
  and only when every file of it is in place: a ref never names an incomplete snapshot;
- ``mirror_housekeeping``: the runs' locks and temp folders, and what a killed run left behind
  (ownership, not age, decides what is stale);
- ``mirror_check``: ``verify_mirror``, which reports what is ``missing``, ``unknown`` or
  ``mismatched``, with expected and computed digests, without importing torch or `kernels`.

What a mirror cannot make frt do. DIR (and the folders above it) is the user's choice
and may be a link; nothing inside it is trusted. Every read, write, rename and delete
below DIR goes through ``frt_dist.base.safedir.SafeDir`` (one descriptor per folder,
``dir_fd=``, ``O_NOFOLLOW``): a folder inside the mirror that is a link (or not a
folder) is refused (``MirrorUnsafe``, exit 2, naming it) before anything goes through
it; a file that is a link (a blob, a ref, a snapshot entry, a lock) is never read or
written through, only replaced or removed itself. Hub downloads are staged in a
private folder under the system temp folder (``TMPDIR``), outside the mirror: the
downloader writes by path (the run that removes a killed run's temp folder removes its
staging folders there too). A DIR that cannot be written (a full disk, a read-only or
denied folder) stops the run (``MirrorUnwritable``, exit 2, naming the file and the
cause); nothing is left half-written: temp files are removed, and a verified blob
only ever appears whole under its name.

Selection (``mirror_lock`` and ``verify_mirror``): ``variants=[...]`` names variants;
``all_variants`` takes every locked variant; ``machines=[Hardware, ...]`` (or one ``hardware``)
the variants those machines select; ``cells`` the machines of the lock's cells; else
``mirror_lock`` detects this machine, and ``verify_mirror`` checks the variants the mirror holds.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ..base.safedir import SafeDir
from ..errors import KernelUnavailable, MirrorUnsafe, MirrorUnwritable
from ..project.discover import lock_root
from .mirror_check import bundle_problems, read_mirrored, verify_mirror  # noqa: F401 - public here
from .mirror_housekeeping import LOCKS, RUNS, STALE_S, TMP, RunClaim, sweep_locks, sweep_temp  # noqa: F401 - public here
from .mirror_select import cell_machines, machine_label, select_for_mirror
from .mirror_write import MirrorReport, MirrorRun, drop_if_empty, mirror_errors
from .sources import HashingWriter, locked_files, repo_folder  # noqa: F401 - HashingWriter: public here before

__all__ = ["mirror_lock", "verify_mirror", "MirrorReport", "MirrorUnsafe", "MirrorUnwritable", "select_for_mirror",
           "cell_machines", "machine_label", "sweep_temp", "sweep_locks"]


def mirror_lock(lock, dir, *, variants=None, all_variants: bool = False, hardware=None, machines=None,
                cells: bool = False, progress: Callable[[dict], None] | None = None, root=None,
                source=None) -> MirrorReport:
    """Fill ``dir`` with every locked file the selection needs (see the module docstring).

    ``root`` is the project root of the lock's path packages (default: found
    from the lockfile's place). Raises ``KernelUnavailable`` listing every file
    that could not be supplied, after supplying all the others; ``MirrorUnsafe`` when a
    folder inside ``dir`` is a link, ``MirrorUnwritable`` when ``dir`` cannot be written
    (both exit 2, naming the path; nothing is written through a link, nothing left half-written).

    ``source`` (an ``frt_dist.distribution.objstore.ObjectStore``) syncs from an object store instead of the
    project's sources: each blob is fetched by the key its locked digest gives (several at once)
    and verified against ``lock`` before it becomes visible, exactly as a local source is; the
    store is never trusted for anything else. Its errors (``StoreAccess`` exit 2,
    ``StoreUnavailable`` exit 1) stop the run; a missing or damaged object is one more file that
    could not be supplied, naming the object and the locked file.
    """
    from ..documents.lockfile import Lockfile  # noqa: PLC0415

    lock = Lockfile.of(lock)
    dest = Path(dir)
    if variants is None and not all_variants and hardware is None and not machines and not cells:
        from ..system.hardware import Hardware  # noqa: PLC0415

        hardware = Hardware.detect()
    chosen, skipped = select_for_mirror(lock, variants=variants, all_variants=all_variants, hardware=hardware,
                                        machines=machines, cells=cells)
    from .objstore import StoreUnavailable  # noqa: PLC0415

    gone = None
    with mirror_errors(dest):
        top = SafeDir.root(dest, create=True)  # after the selection: a refused one writes nothing
        owner = None
        try:
            owner = RunClaim(top)
            run = MirrorRun(lock, top, Path(root) if root else lock_root(lock), progress, owner.tmp)
            run.run_id = owner.id
            run.store = source
            run.report.dir = str(dest)
            run.report.skipped = skipped
            run.report.cleaned["temp"] += sweep_temp(top, keep=owner.id)  # space first: what killed runs left
            try:
                for repo, vs in chosen.items():
                    run.package(lock.packages[repo], vs)
            except StoreUnavailable as exc:  # the store went away (past its bounded retries): say what stays
                gone = exc
            if lock.release and gone is None:  # a Hub release's files (release_files), from the store too
                from .release_files import mirror_files  # noqa: PLC0415

                run.problems += mirror_files(lock, top, owner.tmp, progress=progress, store=source)
        finally:
            if owner is not None:
                owner.close()
            for repo in chosen:  # a package folder this run made and could fill nothing into goes
                drop_if_empty(top, repo_folder(repo))
            cleaned = sweep_temp(top), sweep_locks(top)  # also after a refusal: what this run made goes
            top.rmdir(TMP)  # only when empty
            top.close()
        run.report.cleaned["temp"] += cleaned[0]
        run.report.cleaned["locks"] += cleaned[1]
    if gone is not None:
        total = len({item.object_key for repo, vs in chosen.items() for v in vs
                     for item in locked_files(lock.packages[repo], v)})
        done = run.report.fetched + run.report.present
        raise StoreUnavailable(f"{gone} ({done} of {total} file(s) verified in {dest} so far)",
                               hints=[*(gone.hints or []), "run the same `frt mirror DIR --from URL` again once the "
                                      "store answers: it resumes, fetching only the files not yet verified"])
    if run.problems:
        raise KernelUnavailable(f"mirror {dest}: {len(run.problems)} file(s) could not be supplied:\n  "
                                + "\n  ".join(p["reason"] for p in run.problems), reasons=run.problems,
                                hints=["fix the source (or go online) and run `frt mirror` again; it resumes"])
    return run.report

