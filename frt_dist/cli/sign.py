"""``frt sign``: sign receipts (docs/reference.md#frt-sign)."""

from __future__ import annotations

import sys
from pathlib import Path

from ..base.canonical import short_digest
from ..errors import UsageError
from .parser import output_options
from .render import emit


def add_parser(sub) -> None:
    """``frt sign``'s flags."""
    s = sub.add_parser("sign", help="sign receipts: write <receipt>.json.sig (a DSSE envelope) beside each",
                       description="Sign each RECEIPT with a PEM private key (EC P-256 or Ed25519): writes "
                                   "<receipt>.json.sig, a DSSE envelope whose payload is an in-toto Statement naming "
                                   "the receipt's canonical digest. A manifest's [trust.receipts] policy lists the "
                                   "public keys `frt lock` accepts (docs/provenance.md).",
                       epilog="example: frt sign --key qualify-ci.pem receipts/demo-decoder/*.json")
    s.add_argument("receipts", nargs="+", metavar="RECEIPT", help="a receipt file (JSON)")
    how = s.add_mutually_exclusive_group(required=True)
    how.add_argument("--key", metavar="KEY", help="the PEM private key (unencrypted): writes <receipt>.json.sig")
    how.add_argument("--sigstore", action="store_true",
                     help="sign keylessly with this CI's OIDC identity through Sigstore (network): writes "
                          "<receipt>.json.sigstore, a bundle over the receipt's canonical JSON")
    output_options(s)


def run(args) -> int:
    """``frt sign --key KEY RECEIPT...``: the key is read (and refused, exit 2, naming it) before
    any receipt is; each receipt is read and signed in turn, each ``.sig`` written atomically."""
    from ..provenance.signing import (  # noqa: PLC0415
        load_private_key,
        sign_receipt,
        sign_receipts_sigstore,
    )

    args.receipts, skipped = _receipts_to_sign(args)
    if args.sigstore:
        rows = [{"receipt": r, "signature": str(out), "digest": dig, "identity": who}
                for r, (out, dig, who) in zip(args.receipts, sign_receipts_sigstore([Path(r) for r in args.receipts]), strict=False)]
        emit(args, {"ok": True, "signed": rows, "skipped": skipped},
              "\n".join(f"{x['signature']}: signed {short_digest(x['digest'])} as {x['identity']}" for x in rows))
        return 0
    key = load_private_key(args.key)
    rows, lines = [], []
    for r in args.receipts:
        out, dig, kid = sign_receipt(Path(r), key)
        rows.append({"receipt": r, "signature": str(out), "digest": dig, "keyid": kid})
        lines.append(f"{out}: signed {short_digest(dig)} with key {kid}")
    emit(args, {"ok": True, "signed": rows, "skipped": skipped}, "\n".join(lines))
    return 0


def _receipts_to_sign(args) -> tuple[list[str], list[dict]]:
    """``frt sign``'s RECEIPT arguments without the signature files a glob such as
    ``receipts/m/*`` also matches (``.sig``, ``.sigstore``) and the receipts re-qualifying kept
    aside (``*.superseded-<hex>``): each is skipped with a ``note:``. Nothing left is exit 2.
    Returns (the receipts to sign, ``[{"file", "reason"}]`` for each skipped)."""
    from ..documents.receipt import SUPERSEDED  # noqa: PLC0415
    from ..provenance.signing import BUNDLE_SUFFIX, SIG_SUFFIX  # noqa: PLC0415

    keep, skipped = [], []
    for r in args.receipts:
        name = Path(r).name
        if name.endswith((SIG_SUFFIX, BUNDLE_SUFFIX)):
            skipped.append((r, "a signature file, not a receipt"))
        elif SUPERSEDED in name and not name.endswith(".json"):
            skipped.append((r, "a receipt re-qualifying kept aside (frt lock does not read it)"))
        else:
            keep.append(r)
    if keep and not args.quiet and not args.json:
        for r, why in skipped:
            print(f"note: skipped {r}: {why}", file=sys.stderr)
    if not keep:
        raise UsageError(f"no receipt to sign among the {len(args.receipts)} file(s) given: "
                         + "; ".join(f"{r}: {why}" for r, why in skipped[:3]) + (" ..." if len(skipped) > 3 else ""),
                         hints=["name the receipts (*.json): frt sign --key KEY receipts/MODEL/*.json"])
    return keep, [{"file": r, "reason": why} for r, why in skipped]
