"""Publisher signatures: a variant's ``metadata.json.sigstore`` (docs/reference.md#publisher-signatures).

A kernel publisher's build workflow signs each variant's ``metadata.json`` keylessly with
Sigstore; the bundle sits beside it as ``metadata.json.sigstore``. The ``digest`` inside that
``metadata.json`` covers every other file of the variant, so one verified signature vouches for
the whole variant. ``frt lock`` verifies each bundle it finds, offline, against the package's
policy, and records who signed; ``frt verify`` checks it again.

Two separate questions, answered in this order:

1. **Is the signature real?** ``sigstore``'s ``Verifier`` checks the bundle against a *pinned*
   trusted root (``frt_dist.provenance.sigstore_root``: the production ``trusted_root.json`` the ``sigstore``
   wheel ships, or the file ``FRT_SIGSTORE_TRUSTED_ROOT`` names): certificate chain to Fulcio
   at the time the transparency log fixed, the log entry's inclusion proof and signed
   timestamp, and the signature over the artifact's bytes. No TUF refresh and no request to
   Rekor: the Verifier is built from a file (``Verifier(trusted_root=TrustedRoot.from_file(...))``)
   and ``verify_artifact`` reads only the bundle.
2. **Is it the signer the project accepts?** ``signer_problems``, a pure function over the facts
   of the signing certificate (``SignerFacts``: OIDC issuer, SAN identity, source repository,
   build-signer URI), states `kernels`' ``GitHubWorkflowPolicy``: issuer, source repository, and
   one of the accepted build-signer workflow URIs. It runs inside sigstore's verification (as a
   ``VerificationPolicy``) at lock time, and on the facts the lock recorded at ``frt verify``.

The policy of a package (``PublisherPolicy``, in ``frt_dist.documents.publisher_policy``) comes from the
manifest (``Manifest.publisher_policy``):
the package's own ``signature``/``signer`` keys, else its organisation's table
``[trust.publishers."<org>"]``, else for ``kernels-community/*`` the same signers as `kernels`'
default policy (``KERNELS_COMMUNITY``), else no signer policy (a bundle is still verified and its
signer recorded, but any valid Sigstore identity passes).

``sigstore`` is imported only when a bundle is to be checked (the ``provenance`` extra).
"""

from __future__ import annotations

import hashlib
import os

from ..base.record import dataclass
from ..documents.publisher_policy import PublisherPolicy, SignerPolicy
from ..errors import (
    SignatureRefused,
)
from . import sigstore_root
from .sigstore_root import need

__all__ = ["BUNDLE", "SignerFacts", "SignatureRefused", "verify_bundle", "signer_problems",
           "bundle_digest", "signature_record", "record_problems"]

BUNDLE = "metadata.json.sigstore"

# Fulcio certificate extensions (https://github.com/sigstore/fulcio/blob/main/docs/oid-info.md)
_OID_ISSUER_V1 = "1.3.6.1.4.1.57264.1.1"  # raw bytes (deprecated, still issued)
_OID_ISSUER_V2 = "1.3.6.1.4.1.57264.1.8"  # DER UTF8String
_OID_BUILD_SIGNER = "1.3.6.1.4.1.57264.1.9"
_OID_SOURCE_REPO = "1.3.6.1.4.1.57264.1.12"


@dataclass(frozen=True)
class SignerFacts:
    """What the signing certificate says about its signer."""

    identity: str  # the SAN: a build-signer URI for a workflow, an e-mail for a person
    issuer: str | None
    repository: str | None = None
    build_signer: str | None = None

    def describe(self) -> str:
        return f"{self.identity} (issuer {self.issuer or 'not stated'})"


def signer_problems(facts: SignerFacts, signer: SignerPolicy) -> list[str]:
    """Each clause of ``signer`` that ``facts`` does not meet, named; ``[]`` when all are met."""
    out = []
    if facts.issuer != signer.issuer:
        out.append(f"OIDC issuer is {facts.issuer or 'not stated'}, the policy accepts {signer.issuer}")
    if facts.repository != signer.repository:
        out.append(f"source repository is {facts.repository or 'not stated'}, the policy accepts {signer.repository}")
    b = facts.build_signer
    if not (b and any(b == w or ("@" not in w and b.startswith(w + "@")) for w in signer.workflows)):
        out.append(f"build signer is {b or 'not stated'}, the policy accepts {' | '.join(signer.workflows)}")
    return out


def bundle_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def signature_record(bundle: bytes, facts: SignerFacts, policy: PublisherPolicy) -> dict:
    """What the lock records for a signed variant (``LockedVariant.signature``)."""
    out = {"bundle-sha256": bundle_digest(bundle), "identity": facts.identity, "issuer": facts.issuer or ""}
    if facts.repository:
        out["repository"] = facts.repository
    if facts.build_signer:
        out["build-signer"] = facts.build_signer
    out["policy"] = policy.name
    return out


def facts_of_record(rec: dict) -> SignerFacts:
    return SignerFacts(rec.get("identity", ""), rec.get("issuer") or None, rec.get("repository"), rec.get("build-signer"))


def record_problems(rec: dict | None, policy: PublisherPolicy) -> list[str]:
    """Why a variant's recorded signature (``None``: unsigned) does not satisfy ``policy`` as it
    reads now: the check ``frt verify`` and a pinned re-lock apply without the bundle's bytes."""
    if policy.signature == "off":
        return ["a signature is recorded, but the policy reads no signatures (signature = \"off\")"] if rec else []
    if rec is None:
        return ["unsigned (no metadata.json.sigstore), and the policy requires a signature"] \
            if policy.signature == "required" else []
    out = []
    if rec.get("policy") != policy.name:
        out.append(f"judged by policy {rec.get('policy')!r} at lock, the manifest's policy is now {policy.name!r}")
    if policy.signer:
        out += [f"signed by {facts_of_record(rec).describe()}: {p}" for p in signer_problems(facts_of_record(rec), policy.signer)]
    return out


# ---------------------------------------------------------------------------
# the trusted root and sigstore (imported lazily)


_OFF_HINT = ("or set `signature = \"off\"` for the package in the manifest to lock without reading its "
             "signatures")


def _sigstore():
    return need("sigstore", "checking a publisher signature (metadata.json.sigstore)", hints=(_OFF_HINT,))


def _der_utf8(data: bytes) -> str | None:
    """The text of a DER ``UTF8String`` (tag 0x0C), or ``None``."""
    if len(data) < 2 or data[0] != 0x0C:
        return None
    n, i = data[1], 2
    if n & 0x80:
        k = n & 0x7F
        n, i = int.from_bytes(data[2:2 + k], "big"), 2 + k
    body = data[i:i + n]
    return body.decode("utf-8", "replace") if len(body) == n else None


def facts_of(cert) -> SignerFacts:
    """The signer facts of a Fulcio certificate (``cryptography`` ``Certificate``)."""
    from cryptography import x509  # noqa: PLC0415

    identity = ""
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        found = (san.get_values_for_type(x509.UniformResourceIdentifier) + san.get_values_for_type(x509.RFC822Name))
        identity = found[0] if found else ""
    except x509.ExtensionNotFound:
        pass
    ext = {}
    for e in cert.extensions:
        if isinstance(e.value, x509.UnrecognizedExtension):
            ext[e.oid.dotted_string] = e.value.value
    issuer = _der_utf8(ext.get(_OID_ISSUER_V2, b""))
    if issuer is None and _OID_ISSUER_V1 in ext:
        issuer = ext[_OID_ISSUER_V1].decode("utf-8", "replace")
    return SignerFacts(identity, issuer, _der_utf8(ext.get(_OID_SOURCE_REPO, b"")),
                       _der_utf8(ext.get(_OID_BUILD_SIGNER, b"")))


def verify_bundle(artifact: bytes, bundle: bytes, signer: SignerPolicy | None, *, trusted_root: str | os.PathLike | None = None,
                  repo: str = "", variant: str = "", what: str = "metadata.json") -> SignerFacts:
    """Verify the Sigstore ``bundle`` (its JSON bytes) over ``artifact`` offline, under the pinned
    trusted root, and check its signer against ``signer`` (``None``: any identity). Returns the
    signer's facts; raises ``SignatureRefused`` with the reason (``what`` names the artifact)."""
    _sigstore()
    from sigstore.errors import VerificationError  # noqa: PLC0415
    from sigstore.models import Bundle, InvalidBundle  # noqa: PLC0415

    where = f"package {repo!r} variant {variant!r}: {BUNDLE}" if repo else BUNDLE
    try:
        parsed = Bundle.from_json(bundle)
    except (InvalidBundle, ValueError, TypeError) as exc:
        raise SignatureRefused(f"{where}: not a Sigstore bundle: {exc}", repo=repo, variant=variant,
                               reason=f"not a Sigstore bundle: {exc}") from None
    try:
        facts = facts_of(parsed.signing_certificate)
    except Exception as exc:
        raise SignatureRefused(f"{where}: its certificate cannot be read: {exc}", repo=repo, variant=variant,
                               reason=f"unreadable certificate: {exc}") from None

    class _Mismatch(VerificationError):
        pass

    class _Policy:  # a sigstore VerificationPolicy: runs after the chain to the trusted root holds
        def verify(self, cert) -> None:
            problems = signer_problems(facts_of(cert), signer) if signer else []
            if problems:
                raise _Mismatch("; ".join(problems))

    verifier = sigstore_root.verifier(trusted_root or None)
    try:
        verifier.verify_artifact(artifact, parsed, _Policy())
    except _Mismatch as exc:
        raise SignatureRefused(
            f"{where}: signed by {facts.describe()}, not by a signer the policy accepts ({signer.source}): {exc}",
            repo=repo, variant=variant, facts=facts, reason=f"wrong signer: {exc}",
            hints=[f"the policy accepts {signer.describe()}; if this signer is right, set `signer` for the package "
                   "in the manifest (after reviewing it)"]) from None
    except VerificationError as exc:
        msg = str(exc)
        if "digest mismatch" in msg or "invalid for input" in msg:
            reason = f"the bundle is for other bytes than {what} (sigstore: {msg})"
        else:
            reason = f"the signature does not verify under the pinned Sigstore trusted root (sigstore: {msg})"
        raise SignatureRefused(f"{where}: {reason}; signer named in the bundle: {facts.describe()}", repo=repo,
                               variant=variant, facts=facts, reason=reason) from None
    except Exception as exc:
        reason = f"the bundle cannot be checked ({type(exc).__name__}: {exc})"
        raise SignatureRefused(f"{where}: {reason}; signer named in the bundle: {facts.describe()}", repo=repo,
                               variant=variant, facts=facts, reason=reason) from None
    return facts
