"""``frt lock --export cyclonedx``: the lock as a CycloneDX 1.6 SBOM (JSON).

Built with ``cyclonedx-python-lib`` (the CycloneDX project's own library; the ``provenance``
extra), imported only when this export is asked for. What it holds, all read from the lockfile:

- the root component (``metadata.component``, type ``application``): the model binding,
  ``name`` = the lock's model, ``version`` = its ``lock-digest``; properties ``frt:binding``,
  ``frt:family``, ``frt:manifest-digest``, ``frt:lock-digest``; and the route evidence:
  one ``frt:route`` property per cell of the route index (``<phase>/<precision>/<backend>/<arch>/
  <device-class> -> <route> <state> <receipt digest>``) and one ``frt:receipt`` property per
  embedded receipt (canonical JSON of its digest, file, route, state, cell key, and its signer
  and issuer and signature kind when the lock records a signature for it, ``Lockfile.signatures``);
- one component per locked package (type ``library``, ``group`` = org, ``name``): a Hub
  package at its commit with purl ``pkg:huggingface/<org>/<name>@<commit>``; a path package
  (no commit: locked by content digest, SPEC §3) with purl ``pkg:generic/<org>/<name>@<snapshot>
  ?checksum=sha256:<content digest>`` where ``<snapshot>`` is the first 40 hex digits of the
  content digest, the name frt's mirror gives it (SPEC §8.9); properties ``frt:source``,
  ``frt:revision``, ``frt:version``, ``frt:trust``;
- under each package, one sub-component per locked variant (type ``library``, name
  ``<name>/<variant>``; properties ``frt:backend``, ``frt:archs`` and, when signed, the publisher
  signature: ``frt:signer-identity``, ``frt:signer-issuer``, ``frt:signer-repository``,
  ``frt:signature-bundle-sha256``, ``frt:signature-policy``), and under it one ``file`` component
  per locked file with its hash (``SHA-256`` or ``SHA-512``, hex): ``metadata.json``, every file its
  digest declares, and ``metadata.json.sigstore`` when signed;
- ``dependencies``: the root depends on every package; a package on its ``kernel-depends``.

The output is byte-deterministic: no timestamp, and the serial number is a name-based UUID (v5)
of the lock-digest (the same lock gives the same SBOM on any machine, keys sorted).
"""

from __future__ import annotations

import base64
import json
import uuid

from .errors import UsageError

__all__ = ["cyclonedx_json", "purl_of"]


def _lib():
    try:
        import cyclonedx  # noqa: F401, PLC0415
    except ImportError:
        raise UsageError("frt lock --export cyclonedx needs the cyclonedx-python-lib library",
                         hints=["pip install 'frt-dist[provenance]'"]) from None


def purl_of(pkg) -> str:
    """The package URL of a locked package (see the module docstring)."""
    from packageurl import PackageURL  # noqa: PLC0415 - a dependency of cyclonedx-python-lib

    org, name = pkg.repo.split("/", 1)
    if pkg.source == "hub":
        return PackageURL(type="huggingface", namespace=org, name=name, version=pkg.revision).to_string()
    return PackageURL(type="generic", namespace=org, name=name, version=pkg.snapshot,
                      qualifiers={"checksum": pkg.revision}).to_string()


def _hex(algorithm: str, b64: str) -> str:
    return base64.b64decode(b64).hex()


def cyclonedx_json(lock) -> str:
    """The CycloneDX 1.6 JSON text of ``lock`` (a ``frt_dist.Lockfile``)."""
    _lib()
    from cyclonedx.model import HashAlgorithm, HashType, Property  # noqa: PLC0415
    from cyclonedx.model.bom import Bom, BomMetaData  # noqa: PLC0415
    from cyclonedx.model.component import Component, ComponentType  # noqa: PLC0415
    from cyclonedx.output.json import JsonV1Dot6  # noqa: PLC0415
    from packageurl import PackageURL  # noqa: PLC0415

    algos = {"sha256": HashAlgorithm.SHA_256, "sha512": HashAlgorithm.SHA_512}

    def props(pairs) -> list:
        return [Property(name=k, value=v) for k, v in pairs if v is not None]

    m = lock.manifest
    root_props = [("frt:binding", m.binding), ("frt:family", m.family), ("frt:manifest-digest", m.digest),
                  ("frt:lock-digest", lock.lock_digest)]
    for e in sorted(lock.index.values(), key=lambda e: e.key):
        c = e.candidates[0]
        root_props.append(("frt:route", f"{'/'.join(e.key)} -> {c.route} {c.state} {c.receipt}"))
    # the receipt signatures a [trust.receipts] policy records (SPEC §26; ``Lockfile.signatures``:
    # receipt digest -> {"kind", "signer"[, "issuer"], ...}); none in a lock without such a policy
    signatures = getattr(lock, "signatures", None) or {}
    for dig in sorted(lock.receipts):
        rec = lock.receipts[dig]
        row = {"digest": dig, "file": rec.file, "route": rec.route, "state": rec.state, "cell": "/".join(rec.key)}
        sig = signatures.get(dig) or {}
        for k in ("signer", "issuer"):
            if sig.get(k):
                row[k] = sig[k]
        if sig.get("kind"):
            row["signature"] = sig["kind"]
        root_props.append(("frt:receipt", json.dumps(row, sort_keys=True, separators=(",", ":"))))
    supplier, release_props = release_supplier(lock)
    root_props += release_props
    root = Component(name=m.model, type=ComponentType.APPLICATION, version=lock.lock_digest,
                     bom_ref=f"frt-model:{m.model}", properties=props(root_props))

    packages = {}
    for repo, pkg in sorted(lock.packages.items()):
        org, name = repo.split("/", 1)
        ref = f"{repo}@{pkg.revision}"
        variants = []
        for vname, v in sorted(pkg.variants.items()):
            vref = f"{ref}#{vname}"
            files = [Component(name=f"build/{vname}/metadata.json", type=ComponentType.FILE,
                               bom_ref=f"{vref}/metadata.json",
                               hashes=[HashType(alg=HashAlgorithm.SHA_256, content=v.metadata_sha256.split(":", 1)[1])])]
            for rel, b64 in sorted(v.files.items()):
                files.append(Component(name=f"build/{vname}/{rel}", type=ComponentType.FILE, bom_ref=f"{vref}/{rel}",
                                       hashes=[HashType(alg=algos[v.algorithm], content=_hex(v.algorithm, b64))]))
            sig = v.signature or {}
            if sig:
                files.append(Component(name=f"build/{vname}/metadata.json.sigstore", type=ComponentType.FILE,
                                       bom_ref=f"{vref}/metadata.json.sigstore",
                                       hashes=[HashType(alg=HashAlgorithm.SHA_256,
                                                        content=sig["bundle-sha256"].split(":", 1)[1])]))
            variants.append(Component(
                name=f"{name}/{vname}", type=ComponentType.LIBRARY, group=org, version=pkg.revision, bom_ref=vref,
                components=files,
                properties=props([("frt:variant", vname), ("frt:backend", v.backend), ("frt:archs", ",".join(v.archs)),
                                  ("frt:signer-identity", sig.get("identity")), ("frt:signer-issuer", sig.get("issuer")),
                                  ("frt:signer-repository", sig.get("repository")),
                                  ("frt:signature-bundle-sha256", sig.get("bundle-sha256")),
                                  ("frt:signature-policy", sig.get("policy"))])))
        packages[repo] = Component(
            name=name, group=org, type=ComponentType.LIBRARY, version=pkg.revision, bom_ref=ref,
            purl=PackageURL.from_string(purl_of(pkg)), components=variants,
            properties=props([("frt:repo", repo), ("frt:source", pkg.source), ("frt:revision", pkg.revision),
                              ("frt:version", str(pkg.version)), ("frt:trust", pkg.trust), ("frt:path", pkg.path)]))

    serial = uuid.uuid5(uuid.NAMESPACE_URL, f"frt-lock:{lock.lock_digest}")
    bom = Bom(components=list(packages.values()), serial_number=serial,
              metadata=BomMetaData(component=root, supplier=supplier))
    bom.register_dependency(root, list(packages.values()))
    for repo, pkg in sorted(lock.packages.items()):
        deps = sorted({d for v in pkg.variants.values() for d, _ in v.kernel_depends} & set(packages))
        bom.register_dependency(packages[repo], [packages[d] for d in deps])
    doc = json.loads(JsonV1Dot6(bom).output_as_string())
    doc.get("metadata", {}).pop("timestamp", None)  # the lock has none: the same lock, the same bytes
    return json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def release_supplier(lock):
    """(the BOM's supplier, root properties) for a lock whose receipts come from a Hub release
    (``frt_dist.release``): the release repo supplies the evidence, at the commit the lock pins
    (``frt:release`` = ``hf://ORG/NAME@<commit>``), with the receipts it supplied
    (``frt:release-receipt``, one per digest). ``(None, [])`` for a lock that names no release."""
    rel = getattr(lock, "release", None)
    if not rel:
        return None, []
    from cyclonedx.model.contact import OrganizationalEntity  # noqa: PLC0415

    from .release_record import release_receipts  # noqa: PLC0415

    props = [("frt:release", f"hf://{rel['repo']}@{rel['commit']}"), ("frt:release-version", str(rel["version"]))]
    props += [("frt:release-receipt", d) for d in sorted(release_receipts(lock))]
    return OrganizationalEntity(name=rel["repo"]), props
