"""Signatures as referrers of a lock's OCI artefact (SPEC §16 item 50, issue 37 item 3;
``docs/reference.md#oci-registries``).

``frt publish oci://…`` attaches, to the artefact's manifest, one referrer per signature the lock
holds: each accepted receipt's signature (``receipt-signatures``: a DSSE envelope signed with a key
the lock pins under ``receipt-keys``, or a Sigstore bundle) and each signed variant's publisher
bundle (``metadata.json.sigstore``, already a layer of the artefact). A referrer is an OCI image
manifest whose ``subject`` is the artefact and whose one layer is the signature document:

    artifactType application/vnd.frt-dist.receipt-signature.v1+json   (annotations: receipt digest, kind, signer)
    artifactType application/vnd.frt-dist.publisher-signature.v1+json (annotations: package, variant, identity)

It is pushed by its digest; where the registry answers without ``OCI-Subject`` (it has no referrers
API: Distribution 2.8), the OCI 1.1 fallback tag ``sha256-<artefact hex>`` is updated to an image
index listing it. Readers ask ``/v2/<repo>/referrers/<digest>`` and, on a 404, read that tag.

``frt verify --mirror oci://…`` (``check_referrers``) re-checks them offline of the Hub: each receipt
signature's envelope is verified with the keys the lock pins (``receipt-keys``), over a receipt the
lock embeds; one signed by a key the lock does not pin, or over another receipt, is a problem; a
Sigstore row must be the bundle the lock embeds (whose signature ``frt verify`` re-checks); a
publisher referrer's layer must be the locked bundle; and every signature the lock holds must be
there. Nothing a referrer says is believed before it is checked; another tool's referrers (other
artifact types) are left alone.
"""

from __future__ import annotations

import hashlib

from ..errors import StoreUnavailable
from .oci import EMPTY_JSON, INDEX, MANIFEST, canonical_json, descriptor_problem, empty_descriptor

__all__ = ["attach_signatures", "attach_referrer", "referrers", "check_referrers", "RECEIPT_SIG", "PUBLISHER_SIG"]

RECEIPT_SIG = "application/vnd.frt-dist.receipt-signature.v1+json"
PUBLISHER_SIG = "application/vnd.frt-dist.publisher-signature.v1+json"
DSSE = "application/vnd.dsse.envelope.v1+json"
SIGSTORE = "application/vnd.dev.sigstore.bundle.v0.3+json"
RECEIPT, KIND, SIGNER = "dev.frt-dist.receipt", "dev.frt-dist.kind", "dev.frt-dist.signer"
PACKAGE, VARIANT, IDENTITY = "dev.frt-dist.package", "dev.frt-dist.variant", "dev.frt-dist.identity"
_SIG_LIMIT = 4 << 20


def fallback_tag(digest: str) -> str:
    """The OCI 1.1 referrers tag schema: ``<alg>-<ref>``."""
    return digest.replace(":", "-")


def attach_signatures(store, lock, digest: str, size: int) -> list[dict]:
    """Attach every signature ``lock`` holds to the artefact ``digest`` (``size`` bytes); the referrers
    pushed, as ``{"digest", "artifactType", "annotations"}``."""
    out = []
    for receipt, row in sorted(lock.signatures.items()):
        kind = row.get("kind")
        doc = row.get("envelope") if kind == "key" else row.get("bundle")
        ann = {RECEIPT: receipt, KIND: str(kind), SIGNER: str(row.get("signer"))}
        out.append(attach_referrer(store, digest, size, RECEIPT_SIG, canonical_json(doc),
                                   DSSE if kind == "key" else SIGSTORE, ann))
    for repo, pkg in sorted(lock.packages.items()):
        for vname, lv in sorted(pkg.variants.items()):
            sig = lv.signature
            if not sig:
                continue
            bundle = sig["bundle-sha256"]
            if f"sha256/{bundle.removeprefix('sha256:')}" not in store.blobs:
                continue  # a variant not in this artefact's selection
            ann = {PACKAGE: repo, VARIANT: vname, IDENTITY: str(sig.get("identity"))}
            out.append(attach_referrer(store, digest, size, PUBLISHER_SIG, None, SIGSTORE, ann, blob=bundle))
    return out


def attach_referrer(store, subject: str, subject_size: int, artifact_type: str, data: bytes | None,
                    media_type: str, annotations: dict, *, blob: str | None = None) -> dict:
    """Push one referrer of ``subject``: its layer (``data``, or the blob ``blob`` already there), its
    manifest by digest, then the fallback tag's index where the registry has no referrers API."""
    if data is not None:
        blob = "sha256:" + hashlib.sha256(data).hexdigest()
        store.upload(blob, len(data), lambda: data)
        size = len(data)
    else:
        size = store.blob_size(blob)
        if size is None:
            raise StoreUnavailable(f"{store.loc.repo_url}: the signature blob {blob} is not in the repository")
    store.upload("sha256:" + hashlib.sha256(EMPTY_JSON).hexdigest(), len(EMPTY_JSON), lambda: EMPTY_JSON)
    doc = {"schemaVersion": 2, "mediaType": MANIFEST, "artifactType": artifact_type, "config": empty_descriptor(),
           "layers": [{"mediaType": media_type, "digest": blob, "size": size}],
           "subject": {"mediaType": MANIFEST, "digest": subject, "size": subject_size},
           "annotations": dict(sorted(annotations.items()))}
    body = canonical_json(doc)
    digest = store.put_manifest("sha256:" + hashlib.sha256(body).hexdigest(), body)
    desc = {"mediaType": MANIFEST, "digest": digest, "size": len(body), "artifactType": artifact_type,
            "annotations": doc["annotations"]}
    if "oci-subject" not in getattr(store, "last_put_headers", {}):  # no referrers API: the fallback tag
        tag = fallback_tag(subject)
        data_, _ = store.get_manifest_bytes(tag, accept=INDEX)
        index = _index(data_, f"{store.loc.repo_url}:{tag}") if data_ else {"schemaVersion": 2, "mediaType": INDEX,
                                                                             "manifests": []}
        if not any(m.get("digest") == digest for m in index["manifests"]):
            index["manifests"].append(desc)
            store.put_manifest(tag, canonical_json(index), INDEX)
    return {"digest": digest, "artifactType": artifact_type, "annotations": doc["annotations"]}


def _index(data: bytes, where: str) -> dict:
    from ..documents.schema import JSONInvalid, json_loads  # noqa: PLC0415

    try:
        doc = json_loads(data)
    except JSONInvalid as exc:
        raise StoreUnavailable(f"{where}: the referrers index is not JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("schemaVersion") != 2 or not isinstance(doc.get("manifests"), list):
        raise StoreUnavailable(f"{where}: the referrers index is not an OCI image index")
    for i, m in enumerate(doc["manifests"]):
        why = descriptor_problem(m, f"manifests[{i}]")
        if why:
            raise StoreUnavailable(f"{where}: the referrers index is malformed: {why}")
    return doc


def referrers(store, digest: str) -> list[dict]:
    """The referrers of ``digest``: the referrers API's answer, or the fallback tag's index (none: [])."""
    where = f"{store.loc.repo_url} referrers of {digest}"
    from .oci import _deadline, registry_error  # noqa: PLC0415

    with _deadline(store.client.cfg["deadline"]) as tr:
        r = store.client.request("GET", f"/v2/{store.loc.repository}/referrers/{digest}", where=where,
                                 headers={"Accept": INDEX}, transfer=tr)
        body = r.read(_SIG_LIMIT)
        r.close()
    if r.status == 200:
        return _index(body, where)["manifests"]
    if r.status != 404:
        raise registry_error(where, r.status, "referrers list")
    data, _ = store.get_manifest_bytes(fallback_tag(digest), accept=INDEX)
    return _index(data, f"{store.loc.repo_url}:{fallback_tag(digest)}")["manifests"] if data else []


def _referrer(store, desc: dict, subject: str) -> tuple[dict | None, bytes | None, str | None]:
    """(the referrer manifest, its one layer's bytes, None) once both are checked, else (…, why)."""
    from ..documents.schema import JSONInvalid, json_loads  # noqa: PLC0415
    from .oci import _fail  # noqa: PLC0415

    where = f"{store.loc.repo_url}@{desc['digest']}"
    data, _ = store.get_manifest_bytes(desc["digest"], accept=MANIFEST)
    if data is None:
        return None, None, f"{where}: the referrer's manifest is not in the registry"
    if "sha256:" + hashlib.sha256(data).hexdigest() != desc["digest"]:
        return None, None, f"{where}: the referrer's manifest does not hash to its digest"
    try:
        doc = json_loads(data)
    except JSONInvalid:
        return None, None, str(_fail(where, "not JSON"))
    layers = doc.get("layers") if isinstance(doc, dict) else None
    if not isinstance(layers, list) or len(layers) != 1 or descriptor_problem(layers[0], "layers[0]"):
        return None, None, f"{where}: the referrer does not hold exactly one signature layer"
    if not isinstance(doc.get("subject"), dict) or doc["subject"].get("digest") != subject:
        return None, None, f"{where}: the referrer's subject is not the artefact {subject}"
    layer = layers[0]
    if layer["size"] > _SIG_LIMIT:
        return doc, None, f"{where}: its signature layer is {layer['size']} bytes; larger than a signature can be"

    class _Buf:
        def __init__(self):
            self.data = bytearray()

        def write(self, b):
            self.data += b

    buf = _Buf()
    store.get_blob(layer["digest"], layer["size"], buf, where=f"{where} layer {layer['digest']}")
    blob = bytes(buf.data)
    if "sha256:" + hashlib.sha256(blob).hexdigest() != layer["digest"]:
        return doc, None, f"{where}: its signature layer does not hash to its digest {layer['digest']}"
    return doc, blob, None


def check_referrers(store, lock, digest: str, *, project=None) -> list[dict]:
    """Every problem of the artefact's signature referrers against ``lock`` (see the module docstring):
    ``{"kind": "signature", "path", "expected", "computed", "reason", "message"}``."""
    from ..documents.schema import JSONInvalid, json_loads  # noqa: PLC0415

    here = f"{store.url}" + ("" if store.loc.digest else f" ({digest})")
    problems: list[dict] = []

    def problem(what: str, reason: str, expected=None, computed=None) -> None:
        problems.append({"kind": "signature", "path": f"{here} referrer {what}", "expected": expected,
                         "computed": computed, "reason": reason, "message": reason})

    keys = {}
    if lock.receipt_keys:
        from ..provenance.signing import key_from_pin  # noqa: PLC0415

        for rel, pin in lock.receipt_keys.items():
            k, _why = key_from_pin(rel, pin)
            if k is not None:
                keys[k.keyid] = k
    seen_receipts, seen_bundles = set(), set()
    for desc in referrers(store, digest):
        kind = desc.get("artifactType")
        if kind not in (RECEIPT_SIG, PUBLISHER_SIG):
            continue  # another tool's referrer (a cosign signature, an SBOM): not frt's to judge
        doc, blob, why = _referrer(store, desc, digest)
        if why:
            problem(desc["digest"], why)
            continue
        ann = doc.get("annotations") if isinstance(doc.get("annotations"), dict) else {}
        if kind == PUBLISHER_SIG:
            bundle = doc["layers"][0]["digest"]
            wanted = {lv.signature["bundle-sha256"] for p in lock.packages.values() for lv in p.variants.values()
                      if lv.signature}
            if bundle not in wanted:
                problem(desc["digest"], f"{here}: the publisher-signature referrer {desc['digest']} holds bundle "
                                        f"{bundle}, which the lock does not record for any variant", None, bundle)
            seen_bundles.add(bundle)
            continue
        receipt = ann.get(RECEIPT)
        if receipt not in lock.receipts and receipt not in lock.signatures:
            problem(desc["digest"], f"{here}: the receipt-signature referrer {desc['digest']} signs receipt "
                                    f"{receipt!r}, which the lock does not embed", None, receipt)
            continue
        try:
            sig_doc = json_loads(blob)
        except JSONInvalid:
            problem(desc["digest"], f"{here}: the receipt-signature referrer {desc['digest']}: not JSON")
            continue
        row = lock.signatures.get(receipt)
        if doc["layers"][0]["mediaType"] == DSSE:
            from ..provenance.signing import check_envelope  # noqa: PLC0415

            signer, why = check_envelope(sig_doc, receipt, keys)
            if why:
                pinned = ", ".join(sorted(keys)) or "none"
                problem(desc["digest"], f"{here}: the receipt-signature referrer {desc['digest']} for receipt "
                                        f"{receipt}: {why.replace('the policy does not list', 'the lock does not pin')}"
                                        f" (the lock pins: {pinned}); refused", row and row.get("signer"), None)
                continue
        elif row is None or row.get("bundle") != sig_doc:
            problem(desc["digest"], f"{here}: the receipt-signature referrer {desc['digest']} for receipt {receipt} "
                                    "is not the Sigstore bundle the lock embeds; refused")
            continue
        seen_receipts.add(receipt)
    for receipt, row in sorted(lock.signatures.items()):
        if receipt not in seen_receipts:
            problem(receipt, f"{here}: no referrer carries the lock's signature of receipt {receipt} "
                             f"({row.get('file')}, signed by {row.get('signer')})", row.get("signer"), None)
    for p in lock.packages.values():
        for vname, lv in sorted(p.variants.items()):
            if lv.signature and lv.signature["bundle-sha256"] not in seen_bundles and \
                    f"sha256/{lv.signature['bundle-sha256'].removeprefix('sha256:')}" in \
                    {la.key for la in store.manifest()[3]}:
                problem(f"{p.repo} {vname}", f"{here}: no referrer carries the publisher signature of {p.repo} "
                                             f"variant {vname}", lv.signature["bundle-sha256"], None)
    return problems
