"""Receipt signatures (docs/reference.md#receipt-signatures): who vouches for a qualification receipt.

A receipt stays what it is; its signature is an **envelope beside it** (the pattern of DSSE,
Sigstore bundles and in-toto): ``<receipt>.json.sig`` is a DSSE envelope whose payload is an
in-toto Statement v1 naming the receipt's canonical digest (docs/reference.md#digests-and-names) as its one subject. The
signature is over the DSSE pre-authentication encoding (``pae``) of the payload type and the
payload bytes, so the type cannot be swapped under a valid signature. Verification returns
the statement only after the signature held, and only that statement is trusted: the
receipt's own digest must be the subject's.

Two kinds of signer:

- **a key** (``frt sign --key KEY``, ``frt qualify --sign KEY``): a PEM private key, EC P-256
  (ECDSA over SHA-256, DER signature) or Ed25519. Its ``keyid`` is ``sha256:`` + the sha256 of
  the public key's DER SubjectPublicKeyInfo, what ``openssl pkey -pubin -outform DER |
  sha256sum`` prints. A policy lists the public keys (PEM files in the project).
- **a Sigstore identity**: ``<receipt>.json.sigstore``, a Sigstore bundle made keylessly by a
  CI's OIDC identity, either over the same DSSE statement or as a message signature over the
  receipt's canonical JSON (whose sha256 *is* the receipt digest). Verified offline against a
  pinned trusted root (``frt_dist.provenance.sigstore_root``: the production
  ``trusted_root.json`` the ``sigstore`` wheel ships, or ``FRT_SIGSTORE_TRUSTED_ROOT``), never
  refreshed over the network; the policy lists ``{issuer, identity}`` pairs.

``ReceiptPolicy`` is the manifest's ``[trust.receipts]`` (read by ``frt_dist.documents.manifest``);
``check_receipt`` is the one judgement ``frt lock`` makes and ``frt verify`` makes again.
``cryptography`` and ``sigstore`` (the ``provenance`` extra) are imported only when a key, a
signature or a policy is actually used: a project without a policy never loads them.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from pathlib import Path

from ..base.canonical import canonical_json
from ..base.record import dataclass, field
from ..documents.manifest import Identity, ReceiptPolicy  # the policy's shape is the manifest's; judged here
from ..documents.schema import JSONInvalid, json_loads, read_bytes
from ..errors import (
    FrtError,
    SigningUnavailable,
    UsageError,
)
from . import sigstore_root
from .sigstore_root import need

__all__ = ["PAYLOAD_TYPE", "STATEMENT_TYPE", "PREDICATE_TYPE", "SIG_SUFFIX", "BUNDLE_SUFFIX", "pae", "statement",
           "ReceiptPolicy", "Identity", "PolicyKey", "Signed", "load_private_key", "load_public_key", "keyid",
           "sign_receipt", "envelope_for", "check_envelope", "check_bundle", "check_receipt", "sig_path",
           "bundle_path", "signature_files", "MAX_KEY_BYTES", "MAX_SIGNATURE_BYTES", "SigningUnavailable",
           "sign_receipts_sigstore"]

PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "urn:frt-dist:predicate:qualification-receipt:v1"
"""What the statement says about its subject: "this receipt is a qualification frt accepts as
evidence, made by the signer". A URN of frt's own (no web address is implied)."""
SIG_SUFFIX = ".sig"  # <receipt>.json.sig: a DSSE envelope signed by a key
BUNDLE_SUFFIX = ".sigstore"  # <receipt>.json.sigstore: a Sigstore bundle signed by an identity
MAX_KEY_BYTES = 64 << 10  # a PEM key is a few hundred bytes
MAX_SIGNATURE_BYTES = 1 << 20  # an envelope is about 1 KB, a Sigstore bundle about 10 KB


# ---------------------------------------------------------------------------
# DSSE and in-toto


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE's pre-authentication encoding: ``DSSEv1 SP LEN(type) SP type SP LEN(body) SP body``,
    lengths as ASCII decimal byte counts. What a DSSE signature signs."""
    t = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(payload), payload)


def statement(receipt, name: str) -> dict:
    """The in-toto Statement v1 for ``receipt`` (a ``Receipt``) filed as ``name``: its canonical
    digest as the one subject, and a small predicate saying which cell and state it claims."""
    cell, hw = receipt.cell, receipt.cell["hardware"]
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": name, "digest": {"sha256": receipt.digest.removeprefix("sha256:")}}],
        "predicateType": PREDICATE_TYPE,
        "predicate": {"model": cell["model"], "route": cell["route"], "route-digest": cell["route-digest"],
                      "phase": cell["phase"], "precision": cell["precision"], "backend": hw["backend"],
                      "arch": hw["arch"], "device-class": receipt.device_class, "state": receipt.state},
    }


def sig_path(receipt_path: Path) -> Path:
    return Path(receipt_path).with_name(Path(receipt_path).name + SIG_SUFFIX)


def bundle_path(receipt_path: Path) -> Path:
    return Path(receipt_path).with_name(Path(receipt_path).name + BUNDLE_SUFFIX)


# ---------------------------------------------------------------------------
# keys


def keyid(public_key) -> str:
    """``sha256:`` + hex sha256 of the public key's DER SubjectPublicKeyInfo (docs/reference.md#digests-and-names)."""
    from cryptography.hazmat.primitives import serialization  # noqa: PLC0415

    der = public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return "sha256:" + hashlib.sha256(der).hexdigest()


def _kind_ok(key) -> str | None:
    """None when ``key`` (private or public) is a kind frt signs with, else what it is."""
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519  # noqa: PLC0415

    if isinstance(key, (ed25519.Ed25519PrivateKey, ed25519.Ed25519PublicKey)):
        return None
    if isinstance(key, (ec.EllipticCurvePrivateKey, ec.EllipticCurvePublicKey)):
        return None if isinstance(key.curve, ec.SECP256R1) else f"an EC key on curve {key.curve.name}"
    return f"a {type(key).__name__.lstrip('_').replace('PrivateKey', '').replace('PublicKey', '')} key"


def load_private_key(path: str | Path, *, label: str | None = None):
    """The private key in the PEM file ``path``; ``UsageError`` (exit 2) naming the file and why
    not: unreadable, not a PEM private key, encrypted, or not EC P-256 / Ed25519. The key's bytes
    never appear in a message."""
    label = label or str(path)
    need("cryptography", "signing")
    from cryptography.hazmat.primitives import serialization  # noqa: PLC0415

    data = read_bytes(Path(path), UsageError, label, limit=MAX_KEY_BYTES)
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except TypeError:  # "Password was not given but private key is encrypted"
        raise UsageError(f"{label}: the private key is encrypted; frt signs with an unencrypted PEM key",
                         hints=["keep the key in the CI's secret store and write it to a private file for the "
                                "signing step (`openssl pkey -in enc.pem -out key.pem`)"]) from None
    except Exception as exc:
        why = "not a PEM private key" if b"PRIVATE KEY" not in data else f"not a usable PEM private key ({type(exc).__name__})"
        hint = ("this is a public key: sign with the private key, and list the public key in the manifest's "
                "[trust.receipts] keys") if b"PUBLIC KEY" in data else \
            "make one with `openssl genpkey -algorithm ed25519 -out key.pem` (or -algorithm EC -pkeyopt ec_paramgen_curve:P-256)"
        raise UsageError(f"{label}: {why}", hints=[hint]) from None
    bad = _kind_ok(key)
    if bad:
        raise UsageError(f"{label}: {bad}; frt signs with EC P-256 (ECDSA, SHA-256) or Ed25519 keys",
                         hints=["make one with `openssl genpkey -algorithm ed25519 -out key.pem`"])
    return key


def load_public_key(data: bytes, *, label: str, error=UsageError, field_: str = ""):
    """The public key in PEM ``data`` (EC P-256 or Ed25519), or ``error`` naming ``label`` and
    ``field_``."""
    need("cryptography", "a receipt-signing policy")
    from cryptography.hazmat.primitives import serialization  # noqa: PLC0415

    where = f"{label}: {field_}: " if field_ else f"{label}: "
    try:
        key = serialization.load_pem_public_key(data)
    except Exception:
        why = "is a private key; list the public key (`openssl pkey -pubout`)" if b"PRIVATE KEY" in data \
            else "is not a PEM public key"
        raise error(where + why, reasons=[{"file": label, "field": field_, "reason": why}]) from None
    bad = _kind_ok(key)
    if bad:
        why = f"is {bad}; a receipt signer's key is EC P-256 or Ed25519"
        raise error(where + why, reasons=[{"file": label, "field": field_, "reason": why}])
    return key


def _sign(key, message: bytes) -> bytes:
    from cryptography.hazmat.primitives import hashes  # noqa: PLC0415
    from cryptography.hazmat.primitives.asymmetric import ec  # noqa: PLC0415

    if isinstance(key, ec.EllipticCurvePrivateKey):
        return key.sign(message, ec.ECDSA(hashes.SHA256()))
    return key.sign(message)


def _verify(public_key, sig: bytes, message: bytes) -> bool:
    from cryptography.exceptions import InvalidSignature  # noqa: PLC0415
    from cryptography.hazmat.primitives import hashes  # noqa: PLC0415
    from cryptography.hazmat.primitives.asymmetric import ec  # noqa: PLC0415

    try:
        if isinstance(public_key, ec.EllipticCurvePublicKey):
            public_key.verify(sig, message, ec.ECDSA(hashes.SHA256()))
        else:
            public_key.verify(sig, message)
    except (InvalidSignature, ValueError):
        return False
    return True


# ---------------------------------------------------------------------------
# signing


def envelope_for(receipt, name: str, key) -> dict:
    """The DSSE envelope (a dict) signing ``receipt``'s statement with the private ``key``."""
    payload = canonical_json(statement(receipt, name))
    sig = _sign(key, pae(PAYLOAD_TYPE, payload))
    return {"payloadType": PAYLOAD_TYPE, "payload": base64.b64encode(payload).decode("ascii"),
            "signatures": [{"keyid": keyid(key.public_key()), "sig": base64.b64encode(sig).decode("ascii")}]}


def sign_receipt(path: Path, key, *, label: str | None = None) -> tuple[Path, str, str]:
    """Write ``<path>.sig`` (atomically, replacing an older one) for the receipt at ``path``.
    Returns ``(sig path, receipt digest, keyid)``. A receipt that does not parse is refused
    (``ReceiptInvalid``, exit 2): only a receipt frt can read is worth vouching for."""
    from ..documents.lock_writer import write_atomic  # noqa: PLC0415
    from ..documents.receipt import Receipt  # noqa: PLC0415

    path = Path(path)
    label = label or str(path)
    rec = Receipt.read(path, label=label)
    env = envelope_for(rec, path.name, key)
    out = sig_path(path)
    try:
        write_atomic(out, (json.dumps(env, indent=2, sort_keys=True) + "\n").encode("utf-8"))
    except OSError as exc:
        from ..base.regular import NotRegular  # noqa: PLC0415

        fix = (f"move {label}{SIG_SUFFIX} away (frt replaces only a regular file)" if isinstance(exc, NotRegular)
               else "make the folder writable")
        raise UsageError(f"{label}{SIG_SUFFIX}: cannot be written: {exc.strerror or exc}",
                         hints=[f"nothing partial was left; {fix}, then sign again"]) from None
    return out, rec.digest, env["signatures"][0]["keyid"]


def sign_receipts_sigstore(paths: list[Path], *, staging: bool = False) -> list[tuple[Path, str, str]]:
    """Sign receipts keylessly (a CI's ambient OIDC identity, e.g. GitHub Actions with
    ``permissions: id-token: write``): for each, a Sigstore bundle whose message signature is over
    the receipt's canonical JSON, so the signed digest is the receipt digest, written atomically
    to ``<receipt>.json.sigstore``. Needs the network (Fulcio, Rekor, Sigstore's TUF repository):
    it is a CI step, never a serving one. Returns ``[(bundle path, receipt digest, identity)]``.

    Every receipt is read before anything is signed (one that does not parse is exit 2); no
    identity token in the environment is exit 2 with a hint; a Sigstore service failing is exit 1."""
    from ..documents.lock_writer import write_atomic  # noqa: PLC0415
    from ..documents.receipt import Receipt  # noqa: PLC0415

    recs = [(Path(p), Receipt.read(Path(p), label=str(p))) for p in paths]
    need("sigstore", "keyless signing")
    from sigstore.errors import Error as SigstoreError  # noqa: PLC0415
    from sigstore.models import ClientTrustConfig  # noqa: PLC0415
    from sigstore.oidc import IdentityError, IdentityToken, detect_credential  # noqa: PLC0415
    from sigstore.sign import SigningContext  # noqa: PLC0415

    try:
        raw = detect_credential()
    except IdentityError as exc:
        raise UsageError(f"--sigstore: the ambient OIDC credential could not be read: {exc}") from None
    if raw is None:
        raise UsageError("--sigstore: no OIDC identity token in this environment (keyless signing runs in a CI "
                         "that grants one)", hints=["on GitHub Actions: `permissions: id-token: write` in the job; "
                                                    "elsewhere sign with a key: frt sign --key KEY"])
    out = []
    try:
        token = IdentityToken(raw)
        config = ClientTrustConfig.staging() if staging else ClientTrustConfig.production()
        with SigningContext.from_trust_config(config).signer(token) as signer:
            for path, rec in recs:
                bundle = signer.sign_artifact(canonical_json(rec.data))
                dest = bundle_path(path)
                try:
                    write_atomic(dest, (bundle.to_json() + "\n").encode("utf-8"))
                except OSError as exc:
                    raise UsageError(f"{dest}: cannot be written: {exc.strerror or exc}") from None
                out.append((dest, rec.digest, token.identity))
    except (SigstoreError, IdentityError) as exc:
        raise FrtError(f"--sigstore: signing failed: {str(exc).splitlines()[0]}",
                       hints=["keyless signing needs the network (Fulcio, Rekor) and a valid identity token"]) from None
    return out


# ---------------------------------------------------------------------------
# the policy


@dataclass(frozen=True)
class PolicyKey:
    """A policy key as the lock pins it: the file it was read from, its keyid and PEM text."""

    path: str
    keyid: str
    pem: str
    key: object = field(repr=False, compare=False, default=None)

    def to_toml(self) -> dict:
        return {"keyid": self.keyid, "pem": self.pem}


def read_policy_keys(root: Path, policy: ReceiptPolicy, *, manifest_file: str) -> dict[str, PolicyKey]:
    """Every policy key read from the project (path -> ``PolicyKey``). A key file that is missing,
    outside the project, unreadable or not an EC P-256/Ed25519 PEM public key is a ``ManifestError``
    (exit 2) naming the manifest, the field and the key file."""
    from ..errors import ManifestError  # noqa: PLC0415

    out = {}
    top = Path(root).resolve()
    for i, rel in enumerate(policy.keys):
        fld = f"trust.receipts.keys[{i}]"
        p = Path(root) / rel
        try:
            real = p.resolve(strict=True)
        except (OSError, RuntimeError):
            why = f"key file {rel} not found"
            raise ManifestError(f"{manifest_file}: {fld}: {why}",
                                reasons=[{"file": manifest_file, "field": fld, "reason": why}]) from None
        if not real.is_relative_to(top):
            why = f"key file {rel} leaves the project (a link to {real})"
            raise ManifestError(f"{manifest_file}: {fld}: {why}", reasons=[{"file": manifest_file, "field": fld, "reason": why}])
        try:
            data = read_bytes(real, ManifestError, rel, limit=MAX_KEY_BYTES)
        except ManifestError as exc:
            raise ManifestError(f"{manifest_file}: {fld}: {exc}", reasons=exc.reasons) from None
        key = load_public_key(data, label=f"{manifest_file}: {fld}: key file {rel}", error=ManifestError)
        out[rel] = pinned_key(rel, key)
    return out


def pinned_key(rel: str, key) -> PolicyKey:
    """A ``PolicyKey`` for the public ``key``: its PEM re-encoded (one form, whatever the file's
    line endings or comments) and its keyid."""
    from cryptography.hazmat.primitives import serialization  # noqa: PLC0415

    pem = key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode("ascii")
    return PolicyKey(rel, keyid(key), pem, key)


def key_from_pin(rel: str, pin: dict) -> tuple[PolicyKey | None, str | None]:
    """A ``PolicyKey`` from a lock's ``receipt-keys`` entry, checked: its PEM must be a usable
    public key whose keyid is the recorded one. Returns ``(key, None)`` or ``(None, why)``."""
    try:
        key = load_public_key(pin["pem"].encode("ascii"), label=rel)
    except (UsageError, UnicodeEncodeError, AttributeError, KeyError, TypeError) as exc:
        return None, f"the pinned key is not a usable public key: {exc}"
    got = keyid(key)
    if got != pin.get("keyid"):
        return None, f"the pinned key's keyid is {got}, not the recorded {pin.get('keyid')}"
    return PolicyKey(rel, got, pin["pem"], key), None


# ---------------------------------------------------------------------------
# checking


@dataclass(frozen=True)
class Signed:
    """An accepted signature: who signed (a keyid, or a Sigstore identity), how, and the envelope
    or bundle itself (embedded in the lock so verify re-checks it offline)."""

    kind: str  # "key" (a DSSE envelope, <receipt>.json.sig) | "sigstore" (a bundle, <receipt>.json.sigstore)
    signer: str  # sha256:<keyid hex> | the certificate identity
    document: dict  # the envelope or the bundle, as JSON
    issuer: str | None = None

    def row(self, receipt: str, file: str) -> dict:
        out = {"receipt": receipt, "file": file, "kind": self.kind, "signer": self.signer}
        if self.issuer is not None:
            out["issuer"] = self.issuer
        out["envelope" if self.kind == "key" else "bundle"] = self.document
        return out


def _short(d: str) -> str:
    from ..base.canonical import short_digest  # noqa: PLC0415

    return short_digest(d)


def _subject_digest(d: dict) -> str:
    """A statement subject's digest as ``alg:hex`` (shortened), by the algorithm it names: a subject
    given only as sha512 is named sha512, never ``sha256:None``."""
    for alg in ["sha256"] + sorted(k for k in d if k != "sha256"):
        if isinstance(d.get(alg), str):
            return _short(f"sha256:{d[alg]}") if alg == "sha256" else f"{str(alg)[:16]}:{d[alg][:12]}"
    return "a digest with no algorithm frt reads"


def _statement_problem(payload: bytes, receipt_digest: str) -> str | None:
    """Why the signed in-toto statement does not vouch for ``receipt_digest`` (None: it does)."""
    try:
        st = json_loads(payload)
    except JSONInvalid as exc:
        return f"the signed payload is not JSON: {exc}"
    if not isinstance(st, dict) or st.get("_type") != STATEMENT_TYPE:
        return f"the signed payload is not an in-toto Statement v1 (_type {st.get('_type') if isinstance(st, dict) else None!r})"
    if st.get("predicateType") != PREDICATE_TYPE:
        return f"the signed statement's predicateType is {st.get('predicateType')!r}, not frt's {PREDICATE_TYPE!r}"
    subjects = st.get("subject")
    digests = [s["digest"] for s in subjects if isinstance(s, dict) and isinstance(s.get("digest"), dict)] \
        if isinstance(subjects, list) else []
    want = receipt_digest.removeprefix("sha256:")
    if want not in [d.get("sha256") for d in digests]:
        signed = ", ".join(_subject_digest(d) for d in digests) or "nothing"
        return (f"the signature is over receipt digest {signed}, but the receipt's digest is {_short(receipt_digest)}: "
                "the receipt was edited after signing, or the signature is another receipt's")
    return None


def check_envelope(env, receipt_digest: str, keys: dict[str, PolicyKey], *,
                   known: dict[str, str] | None = None) -> tuple[str | None, str | None]:
    """Judge a DSSE envelope (parsed JSON) for the receipt of ``receipt_digest`` under the policy
    ``keys`` (keyid -> key). Returns ``(signer keyid, None)`` or ``(None, why not)``. ``known``
    (keyid -> key file, from a previous lock's pins) names the file of a signer no longer listed.

    The signature is checked first, then the payload read: nothing in an unverified payload is
    believed. An envelope's ``keyid`` is only a hint (DSSE does not authenticate it): a
    signature is tried with the key it names, and one naming no listed key with every listed key."""
    if not isinstance(env, dict):
        return None, "the .sig file is not a DSSE envelope (a JSON object)"
    if env.get("payloadType") != PAYLOAD_TYPE:
        return None, f"the envelope's payloadType is {env.get('payloadType')!r}, not {PAYLOAD_TYPE!r}"
    sigs = env.get("signatures")
    if not isinstance(env.get("payload"), str) or not isinstance(sigs, list) or not sigs:
        return None, "the envelope has no payload or no signatures"
    try:
        payload = base64.b64decode(env["payload"], validate=True)
    except (binascii.Error, ValueError):
        return None, "the envelope's payload is not base64"
    message = pae(PAYLOAD_TYPE, payload)
    named, unknown = [], []
    for s in sigs:
        if not isinstance(s, dict) or not isinstance(s.get("sig"), str):
            continue
        try:
            raw = base64.b64decode(s["sig"], validate=True)
        except (binascii.Error, ValueError):
            continue
        kid = s.get("keyid")
        candidates = [keys[kid]] if kid in keys else list(keys.values())
        (named if kid in keys else unknown).append(kid)
        for k in candidates:
            if _verify(k.key, raw, message):
                why = _statement_problem(payload, receipt_digest)
                return (None, why) if why else (k.keyid, None)
    listed = ", ".join(f"{k.keyid} ({k.path})" for k in keys.values()) or "none"
    if named:
        return None, (f"the signature by listed key {named[0]} does not verify: the envelope was altered after "
                      "signing")
    known = known or {}
    shown = ", ".join(f"{u} ({known[u]}, which the previous lock pinned)" if u in known else str(u)
                      for u in unknown if u) or "a key with no keyid"
    return None, f"signed by {shown}, which the policy does not list (listed keys: {listed})"


def _cert_identity(cert) -> str:
    from cryptography import x509  # noqa: PLC0415

    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return "no identity"
    from ..documents.lock_release import shown  # noqa: PLC0415 - a certificate's names are printed as what they are

    names = san.get_values_for_type(x509.UniformResourceIdentifier) + san.get_values_for_type(x509.RFC822Name)
    return shown(", ".join(names)) or "no identity"


def check_bundle(bundle, digest_hex: str, identities, *, trusted_root: Path | None = None) -> tuple[Identity | None, str | None]:
    """Judge a Sigstore bundle (parsed JSON) offline: it must verify against the pinned trusted root
    (certificate chain, transparency-log inclusion, signature) over the artefact whose sha256 is
    ``digest_hex`` — a message signature over those bytes, or a DSSE in-toto statement naming that
    digest — and its certificate must carry one of ``identities``. Returns ``(identity, None)`` or
    ``(None, why not)``. For a receipt, ``digest_hex`` is its canonical digest (the sha256 of its
    canonical JSON)."""
    need("sigstore", "checking a Sigstore signature")
    from sigstore.errors import Error as SigstoreError  # noqa: PLC0415
    from sigstore.hashes import HashAlgorithm, Hashed  # noqa: PLC0415
    from sigstore.models import Bundle  # noqa: PLC0415
    from sigstore.verify import policy as sp  # noqa: PLC0415

    if not isinstance(bundle, dict):
        return None, "the .sigstore file is not a Sigstore bundle (a JSON object)"
    try:
        b = Bundle.from_json(json.dumps(bundle))
    except Exception as exc:
        return None, f"not a Sigstore bundle: {str(exc).splitlines()[0]}"
    v = sigstore_root.verifier(trusted_root)
    try:
        if "dsseEnvelope" in bundle:
            ptype, payload = v.verify_dsse(b, sp.UnsafeNoOp())
            if ptype != PAYLOAD_TYPE:
                return None, f"the bundle's DSSE payloadType is {ptype!r}, not {PAYLOAD_TYPE!r}"
            why = _statement_problem(payload, "sha256:" + digest_hex)
            if why:
                return None, why
        else:
            v.verify_artifact(Hashed(algorithm=HashAlgorithm.SHA2_256, digest=bytes.fromhex(digest_hex)), b, sp.UnsafeNoOp())
    except (SigstoreError, ValueError) as exc:
        return None, f"the Sigstore bundle does not verify against the pinned trusted root: {str(exc).splitlines()[0]}"
    cert = b.signing_certificate
    for ident in identities:
        try:
            sp.Identity(identity=ident.identity, issuer=ident.issuer).verify(cert)
        except SigstoreError:
            continue
        return ident, None
    listed = "; ".join(str(i) for i in identities) or "none"
    return None, f"signed by identity {_cert_identity(cert)}, which the policy does not list (listed identities: {listed})"


def _read_json(path: Path, label: str):
    """(parsed JSON, None) of a signature file, (None, why) when it cannot be read, or
    (None, None) when there is none."""
    if not path.exists() and not path.is_symlink():
        return None, None
    try:
        return json_loads(read_bytes(path, FrtError, label, limit=MAX_SIGNATURE_BYTES)), None
    except FrtError as exc:
        return None, str(exc)
    except JSONInvalid as exc:
        return None, f"{label}: not valid JSON: {exc}"


def signature_files(receipt_path: Path) -> list[Path]:
    """The signature files beside a receipt (``.sig``, ``.sigstore``) that exist (a link counts)."""
    import os  # noqa: PLC0415

    return [p for p in (sig_path(receipt_path), bundle_path(receipt_path)) if os.path.lexists(p)]


def check_receipt(receipt, path: Path, label: str, policy: ReceiptPolicy, keys: dict[str, PolicyKey], *,
                  trusted_root: Path | None = None, known: dict[str, str] | None = None) -> tuple[Signed | None, str | None]:
    """The signature judgement ``frt lock`` applies to a covered receipt read from ``path``
    (``label`` in messages): its ``.sig`` checked against the policy's keys, its ``.sigstore``
    against the policy's identities; the first that holds is the signer. Returns ``(Signed,
    None)`` or ``(None, reason)``, the reason naming each signature problem found. ``known``:
    keyid -> key file a previous lock pinned (names an unlisted signer's file)."""
    by_id = {k.keyid: k for k in keys.values()}
    problems = []
    env, bad = _read_json(sig_path(path), label + SIG_SUFFIX)
    if bad:
        problems.append(bad)
    elif env is not None:
        if not by_id:
            problems.append(f"{label}{SIG_SUFFIX}: the policy lists no keys (only identities)")
        else:
            signer, why = check_envelope(env, receipt.digest, by_id, known=known)
            if signer:
                return Signed("key", signer, env), None
            problems.append(f"{label}{SIG_SUFFIX}: {why}")
    bundle, bad = _read_json(bundle_path(path), label + BUNDLE_SUFFIX)
    if bad:
        problems.append(bad)
    elif bundle is not None:
        if not policy.identities:
            problems.append(f"{label}{BUNDLE_SUFFIX}: the policy lists no identities (only keys)")
        else:
            ident, why = check_bundle(bundle, receipt.digest.removeprefix("sha256:"), policy.identities,
                                      trusted_root=trusted_root)
            if ident:
                return Signed("sigstore", ident.identity, bundle, ident.issuer), None
            problems.append(f"{label}{BUNDLE_SUFFIX}: {why}")
    if not problems:
        return None, (f"unsigned: no {label}{SIG_SUFFIX} or {label}{BUNDLE_SUFFIX}, and the manifest's "
                      f"[trust.receipts] policy covers device class {receipt.device_class!r} "
                      f"(accepted signers: {policy.describe()})")
    return None, "signature: " + "; ".join(problems)


def check_row(row: dict, receipt_digest: str, policy: ReceiptPolicy, keys: dict[str, PolicyKey], *,
              trusted_root: Path | None = None) -> tuple[str | None, str | None]:
    """``frt verify``'s re-check of one embedded signature row: ``(signer, None)`` or ``(None, why)``;
    the signer is a keyid for a key, an ``Identity`` (identity and issuer) for a Sigstore bundle."""
    kind = row.get("kind")
    if kind == "key":
        return check_envelope(row.get("envelope"), receipt_digest, {k.keyid: k for k in keys.values()})
    if kind == "sigstore":
        ident, why = check_bundle(row.get("bundle"), receipt_digest.removeprefix("sha256:"), policy.identities,
                                  trusted_root=trusted_root)
        return (ident, None) if ident else (None, why)
    return None, f"unknown signature kind {kind!r}"
