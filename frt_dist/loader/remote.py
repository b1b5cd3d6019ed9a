"""Loading through an object-store mirror (``docs/reference.md#object-stores``):
``mirror="s3://bucket/prefix"``, ``FRT_MIRROR=s3://…`` or ``[tool.frt] mirror = "s3://…"``
(``file:///path`` too).

The node's own lockfile is the root of trust; the store is untrusted. After resolve has chosen
the routes, the loader asks this module for exactly one variant of one package at a time (the
variant a winning route binds, then each kernel-depends once that variant's verified
``metadata.json`` named it), and this module feeds the **verified store** straight from the
object store:

1. **Warm**: the store already holds a sound entry for the variant's whole identity (file
   digests, metadata sha256, module id): nothing is fetched, nothing is hashed (the store is
   private; the import hashes each file it runs again, as always).
2. **Cold**: under a per-entry lock (``flock`` on ``<store>/.fetch-<key>.lock``, so processes
   sharing one store fetch an entry once and the others wait, then use it), a temporary entry is
   made and every locked file of the variant is fetched by the key its locked digest gives
   (``<algorithm>/<hex>``, ``frt_dist.distribution.objstore``), several at once, each streamed into its file
   in the temporary entry while it is hashed. Every digest is compared with the lock; one
   missing, truncated or altered object discards the whole entry (nothing becomes visible,
   nothing is imported) and the refusal names each object and the locked file it stands for.
   Otherwise the entry is committed (read-only, record last, renamed into place), exactly as a
   load from a local mirror commits one.

So each byte is written once and hashed once on its way in, and only the files of the selected
variants cross the network: no listing, no lockfile, no other variant, no Hub (a URL mirror makes
the load offline). Why not fill a local mirror first (``frt mirror DIR --from URL``) and load from
it: that writes and hashes every byte twice (the mirror's blob, then the store's copy) and needs a
second folder kept safe; the numbers are in bench/RESULTS.md. The sync command stays the tool for
init containers and for plain `kernels`.

Errors: a store that refuses us (no credentials, access denied, no such bucket, a bad URL) is
``objstore.StoreAccess`` (exit 2, with a hint) and stops the load; a store that fails (timeouts,
server errors through the bounded retries) is a ``KernelUnavailable`` for the package (kind
``store``), as is a missing or damaged object (kinds ``missing`` / ``mismatched``). Messages name
the location and key, never a credential.
"""

from __future__ import annotations

import errno
import fcntl
import os
import threading
from pathlib import Path

from .. import settings
from ..distribution.integrity import format_problems, problem
from ..distribution.sources import HashingWriter, LockedFile, expected_files, location_of
from ..errors import (
    FrtError,
    KernelUnavailable,
    VerifiedStoreFull,
)
from .store import STORE_ENV, VARIANT, Entry, StoreUnusable, identity_of
from .store import open_store as open_verified_store

__all__ = ["fetch_variant", "fetch_deadline", "location_of", "stats", "reset_stats", "VerifiedStoreFull"]


_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)


def _write_failed(exc: OSError, root: Path) -> FrtError:
    if exc.errno in _FULL:
        return VerifiedStoreFull(f"verified store {root}: cannot write: {exc.strerror or exc}",
                                 hints=[f"free space on the file system that holds {root}, or point {STORE_ENV} at "
                                        "a folder with room; nothing was imported, and the partial entry was "
                                        "removed"])
    return StoreUnusable(f"cannot write the verified store {root}: {exc.strerror or exc}")

_WORKERS = 8
_lock = threading.Lock()
_clients: dict[tuple, object] = {}  # (url, AWS_* / FRT_STORE_* environment) -> ObjectStore, one per process
_STATS = {"objects": 0, "bytes": 0, "entries": 0, "warm": 0}


if hasattr(os, "register_at_fork"):  # a forked child must not share its parent's connections
    os.register_at_fork(after_in_child=_clients.clear)


def stats() -> dict:
    """What this process fetched through URL mirrors: objects and bytes fetched, entries built,
    warm hits (no fetch). Read by the fleet benchmark and the tests."""
    with _lock:
        return dict(_STATS)


def reset_stats() -> None:
    with _lock:
        for k in _STATS:
            _STATS[k] = 0


def _client(url: str):
    from ..distribution.objstore import open_store  # noqa: PLC0415

    # everything that configures a client: the AWS and store settings, and for oci:// the registry's
    # (plain HTTP, the Docker config folder and the home it defaults to)
    key = (url, tuple(sorted({**settings.family("AWS_"), **settings.family("FRT_STORE_"), **settings.family("FRT_OCI_"),
                              "DOCKER_CONFIG": settings.raw("DOCKER_CONFIG"),
                              "~": os.path.expanduser("~")}.items(), key=lambda kv: kv[0])))
    with _lock:
        got = _clients.get(key)
        if got is None:
            got = _clients[key] = open_store(url, reading=True)  # obstore when the environment allows
        return got


def _plain_rel(rel: str) -> bool:
    parts = rel.split("/")
    return bool(rel) and not rel.startswith("/") and all(p not in ("", ".", "..") for p in parts) and "\0" not in rel


class _Flock:
    """An exclusive ``flock`` on a file in the (private) store, made without following a link."""

    def __init__(self, path: Path):
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        self.fd = os.open(path, flags, 0o600)
        fcntl.flock(self.fd, fcntl.LOCK_EX)

    def release(self) -> None:
        os.close(self.fd)  # drops the lock


def _refuse(want, reasons, hints=None) -> KernelUnavailable:
    text = "; ".join(r["reason"] for r in reasons) if len(reasons) <= 1 else "\n  " + format_problems(reasons)
    return KernelUnavailable(f"package {want.repo!r} is unavailable: {text}",
                             reasons=[{"package": want.repo, "revision": want.revision, **r} for r in reasons],
                             hints=hints)


def fetch_variant(want, url: str) -> tuple[Entry, bytes]:
    """The verified store entry of ``want`` (a ``core._Want`` decided from the lock), fetched
    from the object store at ``url`` when the store does not hold it yet, and its verified
    ``metadata.json`` bytes. See the module docstring."""
    from ..distribution.objstore import ObjectMissing, StoreUnavailable  # noqa: PLC0415
    from ..distribution.store_api import load_deadline  # noqa: PLC0415

    if want.expected is None or want.expected.metadata_sha256 is None or want.module_id is None:
        raise _refuse(want, [{"kind": "store", "reason": f"{url} is an object-store mirror: it serves only what a "
                                                         "lockfile names by digest, and this request has no locked "
                                                         "digests (an author pin, or no lockfile)"}],
                      hints=["load through the lockfile (lockfile= or FRT_LOCK) without a pin, or use a folder "
                             "mirror (`frt mirror DIR --from URL`)"])
    try:
        store = open_verified_store()
        identity = identity_of(want.expected, want.module_id)
        key = identity_key(identity)
        entry, _ = store.lookup(identity)
        if entry is not None:
            with _lock:
                _STATS["warm"] += 1
            return entry, entry.metadata_bytes()
        try:
            held = _Flock(store.root / f".fetch-{key[:32]}.lock")
        except OSError as exc:
            raise StoreUnusable(f"verified store {store.root}: cannot take the fetch lock: "
                                f"{exc.strerror or exc}") from None
        try:
            entry, doubtful = store.lookup(identity)  # another process may have built it meanwhile
            if entry is not None:
                with _lock:
                    _STATS["warm"] += 1
                return entry, entry.metadata_bytes()
            if doubtful:
                store.evict(key)
            objects = _client(url)
            tmp = store.new_build(key)
            try:
                with load_deadline():  # one FRT_STORE_DEADLINE for the variant's files (or the load's, around it)
                    problems = _fetch_all(want, objects, tmp / VARIANT, store.root)
            except BaseException:
                store.discard(tmp)
                raise
            if problems:
                store.discard(tmp)
                if all(p["kind"] == "store" for p in problems):
                    raise _refuse(want, problems[:1], hints=problems[0].pop("hints", None))
                for p in problems:
                    p.pop("hints", None)
                raise KernelUnavailable(
                    f"package {want.repo!r} revision {want.revision}: {len(problems)} file(s) of "
                    f"build/{want.variant}/ could not be taken from {url}; nothing was imported:\n  "
                    + format_problems(problems),
                    reasons=[{"package": want.repo, "revision": want.revision, "source": url, **p} for p in problems],
                    hints=[f"republish from a machine that holds the verified files: `frt mirror {url} "
                           "--repair` (it sends every object again); whoever can write the store can delete or "
                           "replace objects: check who can"])
            entry = store.commit(tmp, identity)
            with _lock:
                _STATS["entries"] += 1
            return entry, entry.metadata_bytes()
        finally:
            held.release()
    except StoreUnusable as exc:
        raise _refuse(want, [{"kind": "store", "reason": str(exc)}],
                      hints=["fix the folder's owner and mode (chmod 700), or point FRT_STORE at a private "
                             "folder"]) from None
    except StoreUnavailable as exc:
        raise _refuse(want, [{"kind": "store", "reason": str(exc)}], hints=exc.hints) from None
    except ObjectMissing as exc:  # pragma: no cover - _fetch_all reports these per file
        raise _refuse(want, [{"kind": "missing", "reason": str(exc)}]) from None


def fetch_deadline(mirror):
    """``with fetch_deadline(mirror):`` around a load's supply: with an object-store mirror, one
    ``FRT_STORE_DEADLINE`` for every file the load fetches (its packages' variants one after
    another, each variant's files in parallel); nothing otherwise."""
    if not isinstance(mirror, str):
        from contextlib import nullcontext  # noqa: PLC0415

        return nullcontext()
    from ..distribution.store_api import load_deadline  # noqa: PLC0415

    return load_deadline()


def identity_key(identity: dict) -> str:
    from .store import entry_key  # noqa: PLC0415

    return entry_key(identity)


def _fetch_all(want, objects, vdir: Path, root: Path | None = None) -> list[dict]:
    """Fetch every file of the variant into ``vdir`` (a fresh temporary entry), hashing each as
    it arrives; the problems (``check_variant_dir``'s form plus ``object``), empty when all match.
    ``StoreAccess`` (no credentials, denied, no bucket) is raised: it is no fault of one file."""
    from ..distribution.objstore import ObjectMissing, StoreAccess, StoreUnavailable  # noqa: PLC0415

    items = expected_files(want.repo, want.variant, want.expected)

    def one(item: LockedFile) -> dict | None:
        rel, expected, shown = item.rel, item.expected, item.path
        told = f"{want.repo} {shown}"  # the locked file, as `frt mirror` names it
        if not _plain_rel(rel):
            return problem("mismatched", shown, expected, None, f"{told}: not a plain relative path in the lock")
        try:
            key = item.object_key
        except (ValueError, TypeError):
            return problem("mismatched", shown, expected, None, f"{told}: the lock's digest names no object")
        where = objects.where(key)
        dest = vdir / rel
        try:
            dest.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)
        except OSError as exc:
            raise _write_failed(exc, root or vdir) from None

        class _Into:
            @staticmethod
            def write(chunk) -> None:
                view = memoryview(chunk)
                while view:
                    try:
                        k = os.write(fd, view)
                    except OSError as exc:
                        raise _write_failed(exc, root or vdir) from None
                    view = view[k:]

        sink = HashingWriter(item.algorithm, _Into)
        try:
            n = objects.get(key, sink)
        except ObjectMissing:
            return problem("missing", shown, expected, None, f"{told}: object {where} is not in the store") | \
                {"object": where}
        except StoreUnavailable as exc:  # the reason names the locked file, the object (store and key) and why
            return {"kind": "store", "path": shown, "object": where, "reason": f"{told}: {exc}", "hints": exc.hints}
        finally:
            os.close(fd)
        got = item.computed(sink.hashes)
        with _lock:
            _STATS["objects"] += 1
            _STATS["bytes"] += n
        if got != expected:
            return problem("mismatched", shown, expected, got,
                            f"{told}: object {where} ({n} bytes) does not match the lock (expected {expected}, "
                            f"computed {got})") | {"object": where}
        return None

    if len(items) == 1:
        results = [one(items[0])]
    else:
        from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415

        from ..distribution.store_api import current_transfer, joined  # noqa: PLC0415

        transfer = current_transfer()  # the fetches share it: one deadline for them all

        def in_transfer(item: LockedFile) -> dict | None:
            with joined(transfer):
                return one(item)

        with ThreadPoolExecutor(max_workers=min(_WORKERS, len(items)), thread_name_prefix="frt-fetch") as pool:
            futures = [pool.submit(in_transfer, item) for item in items]
            results, errors = [], []
            for f in futures:
                try:
                    results.append(f.result())
                except (StoreAccess, StoreUnusable, VerifiedStoreFull) as exc:
                    errors.append(exc)
            if errors:
                raise errors[0]
    problems = [p for p in results if p is not None]
    problems.sort(key=lambda p: (p["path"], p["kind"]))
    return problems

