"""Receipt output of ``frt qualify``: the receipt's file name, the folder checked before anything is
measured, the signing policy checked before anything is measured, and the write itself (the previous
receipt and its signatures kept aside first, the new one written atomically)."""

from __future__ import annotations

import json
from pathlib import Path

from ..base import names
from ..documents.lock_writer import write_atomic
from ..documents.receipt import superseded_path
from ..errors import UsageError

__all__ = ["receipt_filename", "check_receipt_folder", "check_signing_policy", "keep_previous", "write_receipt"]


def receipt_filename(receipt: dict) -> str:
    """``<route>--<phase>--<precision>--<device class>.json``: each part checked as a name (docs/reference.md#names),
    so the receipt is written inside the folder it is meant for."""
    c = receipt["cell"]
    parts = {"cell.route": c["route"], "cell.phase": c["phase"], "cell.precision": c["precision"],
             "cell.hardware.device-class": c["hardware"]["device-class"]}
    for where, value in parts.items():
        names.check("name", value, where, UsageError)
    return "--".join(parts.values()) + ".json"


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc)


def check_receipt_folder(folder: Path, *, show=str) -> None:
    """Raise ``UsageError`` (exit 2) naming ``folder`` and the cause unless a receipt can be
    written there: ``frt qualify`` calls it before it measures, so a read-only or missing folder
    costs nothing. The folder need not exist yet: then its nearest existing parent must be a
    writable folder (it is created when the first receipt is written, so a qualification that
    writes no receipt leaves nothing behind). The check writes and removes one empty probe file,
    as the write itself would (root ignores permission bits, so only trying tells). ``show``
    turns a path into how messages name it (the CLI: relative to the project)."""
    import os  # noqa: PLC0415
    import tempfile  # noqa: PLC0415

    folder = Path(folder)
    label = show(folder)
    probe = folder
    while not probe.exists() and probe != probe.parent:
        if probe.is_symlink():
            raise UsageError(f"receipts folder {label}: {show(probe)} is a dangling symbolic link",
                             hints=["point --out at a folder you can write"])
        probe = probe.parent
    if not probe.is_dir():
        raise UsageError(f"receipts folder {label}: {show(probe)} is not a folder",
                         hints=["point --out at a folder you can write"])
    try:
        fd, tmp = tempfile.mkstemp(prefix=".frt-write-check.", suffix=".tmp", dir=probe)
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        where = "" if probe == folder else f" (its nearest existing folder {show(probe)})"
        raise UsageError(f"receipts folder {label}{where} cannot be written: {_why(exc)}",
                         hints=["qualification writes one receipt per band there; make it writable, "
                                "or pass --out DIR for another folder"]) from None


def check_signing_policy(policy, device_class: str, *, manifest_file: str, key=None, unsigned: bool = False,
                         root=None, command: str = "frt qualify") -> None:
    """Before anything is measured: where the manifest's ``[trust.receipts]`` ``policy`` covers
    ``device_class`` (this machine's), a receipt written unsigned would be rejected by `frt lock`,
    so qualifying without a key (``key``: the private key of ``--sign``) is a ``UsageError``
    (exit 2) unless ``unsigned`` (``--unsigned``: on purpose, to be signed afterwards); and a key
    whose public key the policy does not list (read from the project ``root``) is one too."""
    if policy is None or not policy.covers(device_class) or unsigned:
        return
    where = f"{manifest_file}: [trust.receipts]"
    if key is None:
        listed = ", ".join(policy.keys) or "none (identities only)"
        raise UsageError(f"{where} covers device class {device_class!r} (this machine): an unsigned receipt would "
                         f"be rejected by `frt lock`; nothing was measured",
                         hints=[f"sign as you qualify: {command} --sign KEY (a private key whose public key the "
                                f"policy lists; listed: {listed})",
                                "or pass --unsigned to qualify on purpose without signing, then sign the receipts: "
                                "frt sign --key KEY RECEIPT... (or --sigstore)"])
    if root is None:
        return
    from ..provenance.signing import keyid, read_policy_keys  # noqa: PLC0415

    pinned = read_policy_keys(Path(root), policy, manifest_file=manifest_file)
    mine = keyid(key.public_key())
    if mine not in {k.keyid for k in pinned.values()}:
        listed = ", ".join(f"{rel} ({k.keyid})" for rel, k in pinned.items()) or "none (identities only)"
        raise UsageError(f"--sign: key {mine} is not one {where} lists (listed: {listed}): `frt lock` would reject "
                         "the receipts it signs; nothing was measured",
                         hints=["sign with a listed key, or add this key's public key to [trust.receipts] keys "
                                "(openssl pkey -in KEY -pubout) after review"])


def keep_previous(path: Path, new_digest: str) -> list[Path]:
    """Before a receipt with ``new_digest`` is written at ``path``: move the signature files beside
    ``path`` (``.sig``, ``.sigstore``) and the receipt there now aside (``superseded_path``), in
    that order, so a receipt is never replaced while a signature over its old bytes stays beside
    it (an interruption leaves at worst the old receipt unsigned, never signed wrongly). Nothing
    moves when the receipt there is the same (its canonical digest is ``new_digest``): its
    signatures still hold. A signature file without a receipt moves aside tagged with its own
    bytes' digest. Returns where each moved file went. ``OSError`` from a move propagates."""
    import os  # noqa: PLC0415
    import shutil  # noqa: PLC0415

    from ..base.canonical import sha256_hex  # noqa: PLC0415
    from ..lock.build import rejected_digest  # noqa: PLC0415 - a file's digest, whatever its contents
    from ..provenance.signing import signature_files  # noqa: PLC0415

    path = Path(path)
    there = os.path.lexists(path)
    sigs = signature_files(path)
    if not there and not sigs:
        return []
    old = rejected_digest(path) if there else None
    if old == new_digest:
        return []
    moved = []
    for sig in sigs:
        tag = old if there and old != "unreadable" else "sha256:" + sha256_hex(sig.read_bytes() if sig.is_file() else b"")
        base = superseded_path(path, tag)
        dest = base.with_name(base.name + sig.name[len(path.name):])  # <kept name>.sig / .sigstore
        os.replace(sig, dest)
        moved.append(dest)
    if there:
        tag = old if old != "unreadable" else "sha256:" + sha256_hex(str(path).encode())
        dest = superseded_path(path, tag)
        if path.is_symlink() or not path.is_file():
            os.replace(path, dest)
        elif not os.path.lexists(dest):
            try:  # a second name for the old bytes: `path` itself is replaced atomically next
                os.link(path, dest)
            except OSError:
                shutil.copy2(path, dest)
        moved.append(dest)
    return moved


def write_receipt(receipt: dict, folder: Path, *, label: str | None = None, written=(), kept: list | None = None) -> Path:
    """Write ``receipt`` into ``folder`` (created if needed) atomically: a failure (a full disk, a
    folder made read-only meanwhile) leaves no partial file and raises ``UsageError`` naming the
    path and the cause; ``written`` lists receipts this run already wrote (they are complete, and kept).

    A receipt already at that name (re-qualifying the same cell) is kept, not lost: it and its
    signature files move aside first (``keep_previous``; ``kept``, when given, receives where)."""
    from ..base.canonical import digest  # noqa: PLC0415

    path = Path(folder) / receipt_filename(receipt)
    shown = f"{label}/{path.name}" if label else str(path)
    try:
        moved = keep_previous(path, digest(receipt))
    except OSError as exc:
        raise UsageError(f"cannot move the previous receipt {shown} or its signature aside: {_why(exc)}; "
                         "it was not replaced", hints=["make the folder writable, then qualify again"]) from None
    if kept is not None:
        kept.extend(moved)
    try:
        write_atomic(path, (json.dumps(receipt, indent=2, sort_keys=True) + "\n").encode("utf-8"))
    except OSError as exc:
        hints = ["nothing partial was left; free space or fix the folder, then qualify again"]
        if written:
            hints.append("kept, complete: " + ", ".join(written))
        raise UsageError(f"cannot write the receipt {shown}: {_why(exc)}", hints=hints) from None
    return path
