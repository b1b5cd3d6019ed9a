"""Fleets (``docs/reference.md#object-stores``): publish a lock's files to an object store, and carry receipts
from many qualification hosts to the one job that locks.

``publish_lock(lock, store, selection)`` (``frt mirror s3://bucket/prefix``) uploads every
selected locked file once, under the key its locked digest gives (``frt_dist.distribution.objstore``
layout), then the lockfile last. Each file comes from where ``frt mirror DIR`` takes it (a path
package's folder, the local hub cache, else the Hub at the locked commit), is copied into a
private staging file under the system temp folder while it is hashed, and is uploaded from that
copy only when its digest matched the lock (so what was checked is what is sent), with its
SHA-256 as the PUT's checksum (``ChecksumAlgorithm``: the server checks the upload against it and
keeps it). An object already under the key is trusted only when it is the locked file
(``_check_present``): a HEAD with ``ChecksumMode`` gives the SHA-256 the server keeps, compared with
the file's without a download; where the server keeps none (an object put without one, a server
that ignores the header, a multipart object's checksum of checksums) the object is downloaded and
hashed. Anything else there (another size, another checksum, other bytes) is replaced and
reported, so a publish never puts a lockfile on top of objects its nodes would refuse (bench/
RESULTS.md has the cost of each check). ``--repair`` re-sends every object without checking.
Keys are content addresses, so concurrent publishers write the same
bytes to the same keys, and a PUT is atomic: a reader sees no object or a whole one. The
lockfile goes up after every object of the model is there, so a store that holds a lockfile
holds every object the published selection of it needs; a publish killed at any point leaves at
worst objects without a lockfile, which no reader takes as a release.

``push_receipts(store, paths)`` stores each receipt under its canonical digest
(``receipts/sha256/<hex>.json``): a receipt pushed twice, from two hosts or by a re-run, is one
object. ``pull_receipts(store, receipts_dir)`` writes each into
``receipts/<model>/<hex>.json`` (the model from the receipt, checked as a name; the file name
from the digest, never from the store), after the same validation a local receipt gets and a
check that its canonical digest is its key. Then ``frt lock`` sees the same files whatever order
they arrived in, so the lock's bytes do not depend on it.
"""

from __future__ import annotations

import base64
import os
import shutil
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from ..base.safedir import SafeDir, UnsafePath
from ..documents.schema import JSONInvalid, json_loads, read_bytes
from ..errors import FrtError, KernelUnavailable, ReceiptInvalid
from .objstore import ObjectStore, lock_key, receipt_key
from .sources import HashingWriter, Unsupplied, hash_copy, is_offline, locate_file, locked_files

__all__ = ["publish_lock", "PublishReport", "push_receipts", "pull_receipts", "ReceiptTransfer"]


@dataclass
class PublishReport:
    """What one ``publish_lock`` did."""

    url: str
    model: str
    lockfile: str = ""  # its key
    packages: list[dict] = field(default_factory=list)  # {"repo", "revision", "variants"}
    uploaded: int = 0  # objects sent
    present: int = 0  # objects already there and shown to be the locked file (not sent)
    bytes: int = 0  # bytes sent
    skipped: list[dict] = field(default_factory=list)
    checked: dict = field(default_factory=lambda: {"checksum": 0, "download": 0})  # how the present ones were shown
    replaced: list[dict] = field(default_factory=list)  # {"key", "repo", "path", "reason"}: there, but not the file
    release: list[str] = field(default_factory=list)  # the keys of the Hub release's files sent (already there: not listed)
    artefact: dict | None = None  # an oci:// store: the artefact's manifest (frt_dist.distribution.oci_publish.finish_lock)

    def to_dict(self) -> dict:
        return {"url": self.url, "model": self.model, "lockfile": self.lockfile, "packages": self.packages,
                "uploaded": self.uploaded, "present": self.present, "bytes": self.bytes, "skipped": self.skipped,
                "checked": dict(self.checked), "replaced": self.replaced, "release-files": self.release,
                **({"artefact": self.artefact} if self.artefact is not None else {})}


def publish_lock(lock, store: ObjectStore, *, variants=None, all_variants: bool = False, hardware=None,
                 machines=None, cells: bool = False, progress: Callable[[dict], None] | None = None, root=None,
                 repair: bool = False, workers: int = 8) -> PublishReport:
    """Upload the selection's locked files, then the lockfile (see the module docstring).
    Raises ``KernelUnavailable`` (exit 1) listing every file that could not be supplied, after
    sending all the others, and then uploads no lockfile; store errors stop the run."""
    from ..documents.lockfile import Lockfile  # noqa: PLC0415
    from ..project.discover import lock_root  # noqa: PLC0415
    from .mirror_select import select_for_mirror  # noqa: PLC0415

    lock = Lockfile.of(lock)
    if variants is None and not all_variants and hardware is None and not machines and not cells:
        from ..system.hardware import Hardware  # noqa: PLC0415

        hardware = Hardware.detect()
    chosen, skipped = select_for_mirror(lock, variants=variants, all_variants=all_variants, hardware=hardware,
                                        machines=machines, cells=cells)
    report = PublishReport(store.url, lock.model, skipped=skipped)
    project_root, offline = Path(root) if root else lock_root(lock), is_offline()  # where files come from
    emit = progress or (lambda event: None)
    count = threading.Lock()
    work, seen = [], set()
    for repo, vs in chosen.items():
        pkg = lock.packages[repo]
        report.packages.append({"repo": repo, "revision": pkg.revision, "variants": list(vs)})
        for v in vs:
            for item in locked_files(pkg, v):
                if item.object_key not in seen:  # content-addressed: one object per distinct file
                    seen.add(item.object_key)
                    work.append((pkg, item))
    problems: list[dict] = []
    staging_root = tempfile.mkdtemp(prefix="frt-publish-")

    def one(pkg, item):
        src = staging = None
        try:
            src, staging = locate_file(pkg, item, project_root=project_root, offline=offline)
            fd, tmp = tempfile.mkstemp(dir=staging_root)
            try:
                with os.fdopen(fd, "wb") as out:
                    hashes, n = hash_copy(src, _Plain(out), item.algorithm)
                got = item.computed(hashes)
                if got != item.expected:
                    raise Unsupplied(item, got, f"source bytes do not match the lock (expected {item.expected}, "
                                                f"computed {got}); not uploaded")
                key = item.object_key
                sha = base64.b64encode(hashes["sha256"].digest()).decode("ascii")
                verdict, how = ("absent", "") if repair else _check_present(store, key, n, sha, item)
                if verdict == "present":
                    with count:
                        report.present += 1
                        report.checked[how] += 1
                    emit({"event": "file", "repo": pkg.repo, "variant": item.variant, "path": item.rel,
                          "action": "present", "bytes": 0, "checked": how})
                    return
                store.put_file(key, tmp, sha256=sha)
                with count:
                    report.uploaded += 1
                    report.bytes += n
                    if verdict == "replace":
                        report.replaced.append({"key": key, "repo": pkg.repo, "path": f"build/{item.variant}/{item.rel}",
                                                "reason": how})
                emit({"event": "file", "repo": pkg.repo, "variant": item.variant, "path": item.rel,
                      "action": "replaced" if verdict == "replace" else "uploaded", "bytes": n})
            finally:
                os.unlink(tmp)
        except Unsupplied as f:
            with count:
                problems.append(f.problem(pkg))
        except OSError as exc:  # an unreadable source: this file fails, the rest go on
            with count:
                problems.append(Unsupplied(item, None, f"{exc.strerror or exc}: {exc.filename or ''}").problem(pkg))
        finally:
            if staging:
                shutil.rmtree(staging, ignore_errors=True)

    pool = ThreadPoolExecutor(max_workers=max(1, min(workers, len(work) or 1)))
    try:
        futures = [pool.submit(one, pkg, item) for pkg, item in work]
        for fu in futures:
            fu.result()  # a store error (FrtError) ends the publish here, before any lockfile
    except BaseException:  # Ctrl-C or a store error: start nothing more; what is in flight ends (bounded)
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    finally:
        pool.shutdown(wait=True)
        shutil.rmtree(staging_root, ignore_errors=True)
    if problems:
        problems.sort(key=lambda p: p["reason"])
        raise KernelUnavailable(f"publish {store.url}: {len(problems)} file(s) could not be supplied, so the "
                                f"lockfile was not published:\n  " + "\n  ".join(p["reason"] for p in problems),
                                reasons=problems,
                                hints=["fix the source (or go online) and run the same `frt mirror` again; objects "
                                       "already sent are skipped"])
    if lock.release:  # a Hub release's files, as a folder mirror carries them (release_files)
        from .release_files import store_files  # noqa: PLC0415

        report.release = store_files(lock, store, progress=emit)
    report.lockfile = lock_key(lock.model)
    store.put_bytes(report.lockfile, lock.render())  # last: only now does the store hold a release
    if getattr(getattr(store, "loc", None), "scheme", "") == "oci":  # a registry: one manifest over those blobs
        from .oci_publish import finish_lock  # noqa: PLC0415

        report.artefact = finish_lock(store, lock, report)
    return report


def _check_present(store: ObjectStore, key: str, n: int, sha256: str, item) -> tuple[str, str]:
    """Is the object under ``key`` the locked file (``n`` bytes, base64 SHA-256 ``sha256``)?
    ``("present", "checksum" | "download")``, ``("absent", "")``, or ``("replace", why)``.
    The size alone proves nothing (a same-size object planted before the first publish); the
    SHA-256 checksum the store keeps decides without a download; without one, the bytes are
    downloaded (at most ``n`` + 1) and hashed with the lock's algorithm."""
    from .objstore import ObjectMissing  # noqa: PLC0415

    info = store.stat(key)
    if info is None:
        return "absent", ""
    if info.size != n:
        return "replace", f"{info.size} bytes there, the locked file has {n}"
    if info.sha256 is not None:
        if info.sha256 == sha256:
            return "present", "checksum"
        return "replace", "its SHA-256 checksum is not the locked file's"
    sink = HashingWriter(item.algorithm)
    hashes = sink.hashes
    try:
        got = store.get(key, sink, limit=n)
    except ObjectMissing:
        return "absent", ""
    if got == n and item.computed(hashes) == item.expected:
        return "present", "download"
    return "replace", "same size, other bytes (downloaded and hashed: the store keeps no checksum for it)"


class _Plain:
    """``hash_copy``'s writer protocol over a plain file (write, sync)."""

    def __init__(self, f):
        self.f = f

    def write(self, data) -> None:
        self.f.write(data)

    def sync(self) -> None:
        self.f.flush()


# ---------------------------------------------------------------------------
# receipts from many hosts


@dataclass
class ReceiptTransfer:
    """What one push or pull did: the receipts by digest, and those refused."""

    url: str
    sent: list[str] = field(default_factory=list)  # push: digests sent
    present: list[str] = field(default_factory=list)  # already there (push) or already in the folder (pull)
    written: list[str] = field(default_factory=list)  # pull: files written (project-relative)
    refused: list[dict] = field(default_factory=list)  # {"key" or "file", "reason"}
    signatures: list[str] = field(default_factory=list)  # push: signature objects sent; pull: files written

    def to_dict(self) -> dict:
        return {"url": self.url, "sent": self.sent, "present": self.present, "written": self.written,
                "refused": self.refused, "signatures": self.signatures}


# A receipt's signature files travel with it (docs/reference.md#receipt-signatures): `<receipt>.json.sig` (a DSSE envelope, `frt sign
# --key`) and `<receipt>.json.sigstore` (a Sigstore bundle, `frt sign --sigstore`), stored beside the receipt's
# object as `receipts/sha256/<hex>.json.sig|.sigstore`. They are evidence `frt lock` judges against the
# manifest's [trust.receipts] policy, so nothing here trusts them: a store can only withhold or spoil one,
# and the lock then rejects that receipt, naming the signature problem.
SIGNATURE_SUFFIXES = (".sig", ".sigstore")
_SIGNATURE_LIMIT = 4 << 20


def _signature_doc(data: bytes) -> bool:
    """Is this (at most) a JSON object: the shape both signature files have. Its contents are the lock's to judge.
    Read with the bounded JSON reader: deep nesting or a huge integer is "not a signature", never a crash."""
    try:
        return isinstance(json_loads(data), dict)
    except JSONInvalid:
        return False


def receipt_files(paths) -> list[Path]:
    """Every ``*.json`` receipt under the given files and folders (folders walked, sorted). Anything
    named so that is not a folder is taken (a FIFO or a device too: the reader then refuses it,
    naming it, instead of it being passed over in silence)."""
    out = []
    for p in map(Path, paths):
        if p.is_dir():
            out += sorted(q for q in p.rglob("*.json") if not q.is_dir())
        else:
            out.append(p)
    return out


def push_receipts(store: ObjectStore, paths, *, label: Callable[[Path], str] = str) -> ReceiptTransfer:
    """Send each receipt under ``receipts/sha256/<canonical digest>.json``. Every file is
    validated first (read once, bounded, and parsed as ``Receipt.read`` does; the bytes sent are
    the bytes checked): an invalid one, or one that is not a regular file (a FIFO, a device), is
    ``ReceiptInvalid`` (exit 2) naming it and its field, and nothing is sent."""
    from ..documents.receipt import Receipt  # noqa: PLC0415

    files = receipt_files(paths)
    if not files:
        raise ReceiptInvalid(f"no receipts (*.json) in {', '.join(map(str, paths))}")
    recs = []
    for p in files:  # all checked before anything is sent
        data = read_bytes(p, ReceiptInvalid, label(p))
        recs.append((Receipt.parse(_receipt_json(data, label(p)), file=label(p)), p, data))
    sigs = {p: _signature_files(p, label(p)) for p in files}
    out = ReceiptTransfer(store.url)
    for rec, path, data in recs:
        hexd = rec.digest.split(":", 1)[1]
        if hexd in out.sent or hexd in out.present:
            continue  # the same receipt twice in what was given: one object
        key = receipt_key(hexd)
        if _stored_receipt_digest(store, key) == rec.digest:
            out.present.append(hexd)  # content-addressed: the same receipt is there (a receipt is small: checked whole)
        else:
            store.put_bytes(key, data)
            out.sent.append(hexd)
        for suffix, sig in sigs[path]:
            if store.head(key + suffix) is None or store.get_bytes(key + suffix, limit=_SIGNATURE_LIMIT) != sig:
                store.put_bytes(key + suffix, sig)
                out.signatures.append(label(path) + suffix)
    return out


def _receipt_json(data: bytes, where: str):
    """The JSON of a receipt's bytes through the bounded reader (``ReceiptInvalid`` naming ``where``)."""
    try:
        return json_loads(data)
    except JSONInvalid as exc:
        raise ReceiptInvalid(f"{where}: not valid JSON: {exc}",
                             reasons=[{"file": where, "field": "", "reason": f"not valid JSON: {exc}"}]) from None


def _signature_files(path: Path, label: str) -> list[tuple[str, bytes]]:
    """The signature files beside a receipt being pushed, read (bounded, regular files only) and
    shape-checked (bad input: exit 2)."""
    out = []
    for suffix in SIGNATURE_SUFFIXES:
        sig = path.with_name(path.name + suffix)
        if sig.is_symlink() or not os.path.lexists(sig):
            continue  # a link is not read (the lock does not read one either)
        data = read_bytes(sig, ReceiptInvalid, label + suffix, limit=_SIGNATURE_LIMIT)
        if not _signature_doc(data):
            raise ReceiptInvalid(f"{label}{suffix}: not a JSON object (a DSSE envelope or a Sigstore bundle)",
                                 hints=["sign it again with `frt sign`"])
        out.append((suffix, data))
    return out


def _stored_receipt_digest(store: ObjectStore, key: str) -> str | None:
    """The canonical digest of the receipt stored under ``key``, or None when absent or not a receipt."""
    from ..documents.receipt import Receipt  # noqa: PLC0415

    data = store.get_bytes(key, limit=4 << 20) if store.head(key) is not None else None
    if data is None:
        return None
    try:
        return Receipt.parse(json_loads(data), file=store.where(key)).digest
    except (JSONInvalid, FrtError):
        return None


def _local_receipts(receipts_dir: Path) -> dict[str, tuple[str, ...]]:
    """Every receipt already in the project's receipts folder, whatever its name: canonical digest ->
    its path's components below the folder. Folders and files that are links are not entered or
    read; each file is read bounded and through the bounded JSON reader; one that is not a receipt's
    JSON is simply not in the map."""
    from ..base.canonical import digest  # noqa: PLC0415

    out: dict[str, tuple[str, ...]] = {}
    root = Path(receipts_dir)
    for folder, dirs, files in os.walk(root):  # os.walk enters no linked folder
        dirs.sort()
        for name in sorted(files):
            p = Path(folder) / name
            if not name.endswith(".json") or p.is_symlink():
                continue
            try:
                d = digest(json_loads(read_bytes(p, ReceiptInvalid)))
            except (FrtError, JSONInvalid, ValueError, RecursionError):
                continue
            out.setdefault(d, p.relative_to(root).parts)
    return out


def pull_receipts(store: ObjectStore, receipts_dir: Path, *, model: str | None = None,
                  label: Callable[[Path], str] = str, limit: int = 4 << 20) -> ReceiptTransfer:
    """Fetch every receipt in the store (or one model's) into ``receipts_dir/<model>/<hex>.json``.
    Nothing from the store is used as a path: the key must be ``receipts/sha256/<64 hex>.json``,
    the bytes must parse (through the bounded JSON reader) as a receipt whose canonical digest is
    that hex, and the model it names must be a valid name. A receipt already in the folder, under
    any name, is not written again (its signature files are brought beside it). Writes go through
    ``SafeDir``: a ``receipts/<model>`` folder that is a link is not entered, and a destination
    that is a link, a FIFO or a device is not replaced.

    What fails is listed, not written, and the others go on: a store object that is not a valid
    receipt under ``refused`` as ``{"key", "reason"}``; a local destination that cannot take one
    as ``{"file", "reason"}``."""
    import re  # noqa: PLC0415

    from ..base import names  # noqa: PLC0415
    from ..documents.receipt import Receipt  # noqa: PLC0415

    out = ReceiptTransfer(store.url)
    local: dict[str, tuple[str, ...]] | None = None
    root: SafeDir | None = None
    try:
        for key, size in store.list("receipts/sha256"):
            if re.fullmatch(r"receipts/sha256/[0-9a-f]{64}\.json(?:\.sig|\.sigstore)", key):
                continue  # a receipt's signature: fetched with its receipt, below
            m = re.fullmatch(r"receipts/sha256/([0-9a-f]{64})\.json", key)
            if not m:
                out.refused.append({"key": key, "reason": f"{store.where(key)}: not a receipt key frt writes "
                                                          "(receipts/sha256/<64 hex>.json); ignored"})
                continue
            hexd = m.group(1)
            if size > limit:
                out.refused.append({"key": key, "reason": f"{store.where(key)}: {size} bytes, larger than a receipt "
                                                          f"can be ({limit})"})
                continue
            data = store.get_bytes(key, limit=limit)
            if data is None:
                continue  # removed since the listing
            try:
                rec = Receipt.parse(_receipt_json(data, store.where(key)), file=store.where(key))
                rec_model = names.check("name", rec.cell.get("model"), "cell.model", ReceiptInvalid,
                                        file=store.where(key))
            except FrtError as exc:
                out.refused.append({"key": key, "reason": str(exc)})
                continue
            if rec.digest != f"sha256:{hexd}":
                out.refused.append({"key": key, "reason": f"{store.where(key)}: its canonical digest is {rec.digest}, "
                                                          f"not the sha256:{hexd} its key names; not written"})
                continue
            if model is not None and rec_model != model:
                continue
            if local is None:
                local = _local_receipts(receipts_dir)
            if rec.digest in local:  # already here, under this name or another
                out.present.append(hexd)
                parts = local[rec.digest]
                dest = Path(receipts_dir).joinpath(*parts)
                try:
                    if root is None:
                        root = SafeDir.root(receipts_dir, create=True)
                    with root.walk(*parts[:-1]) as folder:
                        _pull_signatures(store, key, folder, dest, label, out)
                except OSError as exc:
                    out.refused.append({"file": label(dest), "reason": f"{label(dest)}: its signatures not written: "
                                                                       f"{_why(exc)}"})
                continue
            dest = Path(receipts_dir) / rec_model / f"{hexd}.json"
            try:
                if root is None:
                    root = SafeDir.root(receipts_dir, create=True)
                with root.child(rec_model, create=True) as folder:
                    folder.put(dest.name, data)
                    local[rec.digest] = (rec_model, dest.name)
                    out.written.append(label(dest))
                    _pull_signatures(store, key, folder, dest, label, out)
            except OSError as exc:
                out.refused.append({"file": label(dest), "reason": f"{label(dest)}: not written: {_why(exc)}"})
    finally:
        if root is not None:
            root.close()
    return out


def _why(exc: OSError) -> str:
    """An ``OSError`` from a ``SafeDir`` write, as the reason a file was not written."""
    if isinstance(exc, UnsafePath):
        return f"{exc.path} {exc.what}"
    return exc.strerror or str(exc)


def _pull_signatures(store: ObjectStore, key: str, folder: SafeDir, dest: Path, label, out: ReceiptTransfer) -> None:
    """Write the signature files the store holds for the receipt at ``key`` beside ``dest`` (the
    receipt just written or found). Only the shape is checked here: which signer the project
    accepts, and whether the signature holds over the receipt, is `frt lock`'s to judge. ``folder``
    is ``dest``'s, opened without following a link (``SafeDir``); a destination that is a link, a
    FIFO or a device is refused, not replaced."""
    for suffix in SIGNATURE_SUFFIXES:
        size = store.head(key + suffix)
        if size is None:
            continue
        sig = dest.with_name(dest.name + suffix)
        if size > _SIGNATURE_LIMIT:
            out.refused.append({"key": key + suffix, "reason": f"{store.where(key + suffix)}: {size} bytes, "
                                                               f"larger than a signature can be ({_SIGNATURE_LIMIT})"})
            continue
        data = store.get_bytes(key + suffix, limit=_SIGNATURE_LIMIT)
        if data is None:
            continue  # removed since the head
        if not _signature_doc(data):
            out.refused.append({"key": key + suffix, "reason": f"{store.where(key + suffix)}: not a JSON object "
                                                               "(a DSSE envelope or a Sigstore bundle); not written"})
            continue
        try:
            wrote = folder.put(sig.name, data)
        except OSError as exc:
            out.refused.append({"file": label(sig), "reason": f"{label(sig)}: not written: {_why(exc)}"})
            continue
        if wrote:
            out.signatures.append(label(sig))
