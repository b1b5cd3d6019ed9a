"""``frt export --format cyclonedx`` (formerly ``frt lock --export cyclonedx``): the lock as a CycloneDX 1.6 SBOM (JSON).

Built with ``cyclonedx-python-lib`` (the CycloneDX project's own library; the ``provenance``
extra), imported only when this export is asked for. What it holds, read from the lockfile (and,
for licences only, each package's ``metadata.json`` where the project or the local Hub cache holds
it, taken only when its sha256 is the one the lock records):

- ``metadata.tools``: frt-dist, the generating tool, at its version; ``metadata.timestamp`` only
  when ``SOURCE_DATE_EPOCH`` is set (that instant, UTC), so the same lock gives the same bytes;
  ``metadata.supplier`` (and the root component's supplier) when the caller names one;
- the root component (``metadata.component``, type ``application``): the model binding,
  ``name`` = the lock's model, ``version`` = its ``lock-digest``; properties ``frt:binding``,
  ``frt:family``, ``frt:manifest-digest``, ``frt:lock-digest``, and one ``frt:route`` per cell of
  the route index (``<phase>/<precision>/<backend>/<arch>/<device-class> -> <route> <state>
  <receipt digest>``);
- one component per locked package (type ``library``, ``group`` = org, ``name``, ``supplier`` =
  the org that publishes it, ``licenses`` from its ``metadata.json``): a Hub package at its commit
  with purl ``pkg:huggingface/<org>/<name>@<commit>``; a path package (locked by content digest)
  with purl ``pkg:generic/<org>/<name>@<snapshot>?checksum=sha256:<content digest>`` where
  ``<snapshot>`` is the first 40 hex digits of the content digest, the name frt's mirror gives it;
  properties ``frt:source``, ``frt:revision``, ``frt:version``, ``frt:trust``;
- under each package, one sub-component per locked variant (type ``library``, name
  ``<name>/<variant>``; properties ``frt:backend``, ``frt:archs`` and, when signed, the publisher
  signature: ``frt:signer-identity``, ``frt:signer-issuer``, ``frt:signer-repository``,
  ``frt:signature-bundle-sha256``, ``frt:signature-policy``), and under it one ``file`` component
  per locked file with its hash (``SHA-256`` or ``SHA-512``, hex): ``metadata.json``, every file its
  digest declares, and ``metadata.json.sigstore`` when signed;
- the runtime the receipts were measured on: one component per software fact a receipt records
  (``torch`` a ``framework``, ``cuda``/``rocm`` a ``platform``, others such as ``kernels`` a
  ``library``), at the ``major.minor`` version the receipt records, bom-ref
  ``frt-runtime:<name>@<version>``;
- every embedded receipt as a component of type ``data``: bom-ref ``frt-receipt:<digest>``, name
  its file, version its digest, hash ``SHA-256`` (of its canonical JSON: the receipt digest), and
  one property per fact (``frt:route``, ``frt:state``, ``frt:phase``, ``frt:precision``,
  ``frt:backend``, ``frt:arch``, ``frt:device-class``, ``frt:software:<name>``); when the lock
  records its signature (under a ``[trust.receipts]`` policy), its signer as ``authors`` and as
  properties: ``frt:signature`` (``key`` | ``sigstore``), ``frt:signer`` (the keyid or the
  identity), ``frt:signer-issuer``, ``frt:signer-key-file`` (the project's key file the lock pins
  for that keyid);
- ``dependencies``: the root on every package and every receipt; a package on its
  ``kernel-depends``; a receipt on the packages its cell measured and the runtime it records.

The output is byte-deterministic: keys sorted, the serial number a name-based UUID (v5) of the
lock-digest, and no timestamp unless ``SOURCE_DATE_EPOCH`` gives one.
"""

from __future__ import annotations

import base64
import datetime
import json
import uuid
from pathlib import Path

from .. import settings
from ..errors import UsageError

__all__ = ["cyclonedx_json", "purl_of", "package_licences", "source_date"]

# how a receipt's software fact is typed as a CycloneDX component
_RUNTIME_TYPES = {"torch": "FRAMEWORK", "cuda": "PLATFORM", "rocm": "PLATFORM"}


def _lib():
    try:
        import cyclonedx  # noqa: F401, PLC0415
    except ImportError:
        raise UsageError("frt export --format cyclonedx needs the cyclonedx-python-lib library",
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


def source_date(environ=None) -> datetime.datetime | None:
    """The instant ``SOURCE_DATE_EPOCH`` names (reproducible-builds.org: whole seconds since 1970,
    UTC), or None when it is unset or empty. Anything else is a usage error naming the variable."""
    raw = (settings.value("SOURCE_DATE_EPOCH", environ) or "").strip()
    if not raw:
        return None
    try:
        if not raw.isdigit():
            raise ValueError
        return datetime.datetime.fromtimestamp(int(raw), tz=datetime.UTC)
    except (ValueError, OverflowError, OSError):
        raise UsageError(f"SOURCE_DATE_EPOCH={raw[:40]!r}: expected whole seconds since 1970-01-01 UTC "
                         "(a non-negative integer)", hints=["unset it for an SBOM without a timestamp"]) from None


def package_licences(lock, root) -> dict[str, str]:
    """Each locked package's licence (repo -> the ``license`` its ``metadata.json`` states), read
    from where frt finds the file offline: a path package's folder under ``root``, else the local Hub
    cache at the locked commit. A file is used only when its sha256 is the one the lock records for
    that variant (read bounded, a FIFO or a device refused); a package none of whose variants can be
    read so has no entry."""
    from ..base.canonical import sha256_hex  # noqa: PLC0415
    from ..documents.schema import JSONInvalid, json_loads, read_bytes  # noqa: PLC0415
    from ..errors import FrtError  # noqa: PLC0415

    out = {}
    for repo, pkg in sorted(lock.packages.items()):
        found = set()
        for vname, v in sorted(pkg.variants.items()):
            for path in _metadata_paths(pkg, vname, Path(root)):
                try:
                    data = read_bytes(path, UsageError, str(path), limit=1 << 20)
                except FrtError:
                    continue
                if "sha256:" + sha256_hex(data) != v.metadata_sha256:
                    continue
                try:
                    lic = json_loads(data).get("license")
                except (JSONInvalid, AttributeError):
                    lic = None
                if isinstance(lic, str) and lic.strip():
                    found.add(lic.strip())
                break
        if found:
            out[repo] = " OR ".join(sorted(found)) if len(found) > 1 else found.pop()
    return out


def _metadata_paths(pkg, vname: str, root: Path) -> list[Path]:
    rel = Path("build") / vname / "metadata.json"
    if pkg.source == "path":
        return [root / pkg.path / rel]
    from ..distribution.sources import cache_dirs, repo_folder  # noqa: PLC0415 - imports no torch

    return [c / repo_folder(pkg.repo) / "snapshots" / pkg.revision / rel for c in cache_dirs()]


def cyclonedx_json(lock, *, licences: dict[str, str] | None = None, supplier: dict | None = None,
                   timestamp: datetime.datetime | None = None) -> str:
    """The CycloneDX 1.6 JSON text of ``lock`` (a ``frt_dist.Lockfile``). ``licences``: repo ->
    licence (``package_licences``); ``supplier``: ``{"name", "url"?}`` of whoever supplies the
    model's release (the SBOM's and the root component's supplier); ``timestamp``: the SBOM's time
    (``source_date()``), else none."""
    _lib()
    from cyclonedx.model.bom import Bom, BomMetaData  # noqa: PLC0415
    from cyclonedx.model.component import Component, ComponentType  # noqa: PLC0415
    from cyclonedx.model.tool import ToolRepository  # noqa: PLC0415
    from cyclonedx.output.json import JsonV1Dot6  # noqa: PLC0415

    from .. import __version__  # noqa: PLC0415

    m = lock.manifest
    root_props = [("frt:binding", m.binding), ("frt:family", m.family), ("frt:manifest-digest", m.digest),
                  ("frt:lock-digest", lock.lock_digest)]
    for e in sorted(lock.index.values(), key=lambda e: e.key):
        c = e.candidates[0]
        root_props.append(("frt:route", f"{'/'.join(e.key)} -> {c.route} {c.state} {c.receipt}"))
    release_who, release_props = release_supplier(lock)
    root_props += release_props
    supplier = supplier or release_who
    org_entity = _entity(supplier) if supplier else None
    root = Component(name=m.model, type=ComponentType.APPLICATION, version=lock.lock_digest,
                     bom_ref=f"frt-model:{m.model}", properties=_props(root_props), supplier=org_entity)

    packages = {repo: _package(repo, pkg, (licences or {}).get(repo)) for repo, pkg in sorted(lock.packages.items())}
    runtime: dict[tuple[str, str], Component] = {}
    receipts = []
    for dig in sorted(lock.receipts):
        rec = lock.receipts[dig]
        needs = [runtime.setdefault((k, str(v)), _runtime(k, str(v)))
                 for k, v in sorted(rec.cell.get("software", {}).items())]
        receipts.append((_receipt(lock, dig, rec), rec, needs))

    tool = Component(name="frt-dist", type=ComponentType.APPLICATION, version=__version__, bom_ref="frt-tool:frt-dist",
                     description="frt export --format cyclonedx: the SBOM of a frt lockfile")
    serial = uuid.uuid5(uuid.NAMESPACE_URL, f"frt-lock:{lock.lock_digest}")
    meta = BomMetaData(component=root, tools=ToolRepository(components=[tool]), supplier=org_entity)
    components = [*packages.values(), *sorted(runtime.values(), key=lambda c: str(c.bom_ref)),
                  *(c for c, _, _ in receipts)]
    bom = Bom(components=components, serial_number=serial, metadata=meta)
    bom.register_dependency(root, [*packages.values(), *(c for c, _, _ in receipts)])
    for repo, pkg in sorted(lock.packages.items()):
        deps = sorted({d for v in pkg.variants.values() for d, _ in v.kernel_depends} & set(packages))
        bom.register_dependency(packages[repo], [packages[d] for d in deps])
    for comp, rec, needs in receipts:
        measured = sorted({i.get("package") for i in rec.cell.get("impls", {}).values()
                           if isinstance(i, dict)} & set(packages))
        bom.register_dependency(comp, [*(packages[r] for r in measured), *needs])
    for c in runtime.values():
        bom.register_dependency(c, [])
    doc = json.loads(JsonV1Dot6(bom).output_as_string())
    if timestamp is None:
        doc.get("metadata", {}).pop("timestamp", None)  # the lock has none: the same lock, the same bytes
    else:
        doc["metadata"]["timestamp"] = timestamp.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def release_supplier(lock) -> tuple[dict | None, list]:
    """(the supplier, root properties) for a lock whose receipts come from a Hub release
    (``frt_dist.lock.release``): the release repo supplies the evidence, at the commit the lock pins
    (``frt:release`` = ``hf://ORG/NAME@<commit>``), with the receipts it supplied
    (``frt:release-receipt``, one per digest). ``(None, [])`` for a lock that names no release."""
    rel = lock.release
    if not rel:
        return None, []
    from ..documents.lock_release import release_receipts  # noqa: PLC0415

    props = [("frt:release", f"hf://{rel['repo']}@{rel['commit']}"), ("frt:release-version", str(rel["version"]))]
    props += [("frt:release-receipt", d) for d in sorted(release_receipts(lock))]
    return {"name": rel["repo"]}, props


def _props(pairs) -> list:
    from cyclonedx.model import Property  # noqa: PLC0415

    return [Property(name=k, value=v) for k, v in pairs if v is not None]


def _entity(who: dict):
    from cyclonedx.model import XsUri  # noqa: PLC0415
    from cyclonedx.model.contact import OrganizationalEntity  # noqa: PLC0415

    return OrganizationalEntity(name=who["name"], urls=[XsUri(who["url"])] if who.get("url") else None)


def _licence(text: str):
    try:
        from cyclonedx.contrib.license.factories import LicenseFactory  # noqa: PLC0415
    except ImportError:  # pragma: no cover - an older 11.x
        from cyclonedx.factory.license import LicenseFactory  # noqa: PLC0415

    return LicenseFactory().make_from_string(text)


def _package(repo: str, pkg, licence: str | None):
    """A locked package: its component, with one sub-component per variant and their files."""
    from cyclonedx.model import HashAlgorithm, HashType  # noqa: PLC0415
    from cyclonedx.model.component import Component, ComponentType  # noqa: PLC0415
    from cyclonedx.model.contact import OrganizationalEntity  # noqa: PLC0415
    from packageurl import PackageURL  # noqa: PLC0415

    algos = {"sha256": HashAlgorithm.SHA_256, "sha512": HashAlgorithm.SHA_512}
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
            properties=_props([("frt:variant", vname), ("frt:backend", v.backend), ("frt:archs", ",".join(v.archs)),
                               ("frt:signer-identity", sig.get("identity")), ("frt:signer-issuer", sig.get("issuer")),
                               ("frt:signer-repository", sig.get("repository")),
                               ("frt:signature-bundle-sha256", sig.get("bundle-sha256")),
                               ("frt:signature-policy", sig.get("policy"))])))
    return Component(
        name=name, group=org, type=ComponentType.LIBRARY, version=pkg.revision, bom_ref=ref,
        purl=PackageURL.from_string(purl_of(pkg)), components=variants, supplier=OrganizationalEntity(name=org),
        licenses=[_licence(licence)] if licence else None,
        properties=_props([("frt:repo", repo), ("frt:source", pkg.source), ("frt:revision", pkg.revision),
                           ("frt:version", str(pkg.version)), ("frt:trust", pkg.trust), ("frt:path", pkg.path)]))


def _runtime(name: str, version: str):
    """A software fact a receipt records (``torch`` ``2.13``), as the component it was measured on."""
    from cyclonedx.model.component import Component, ComponentType  # noqa: PLC0415

    return Component(name=name, version=version, type=getattr(ComponentType, _RUNTIME_TYPES.get(name, "LIBRARY")),
                     bom_ref=f"frt-runtime:{name}@{version}",
                     description=f"{name} {version} (major.minor, as the receipts record it): the runtime the "
                                 "route was qualified on")


def _receipt(lock, dig: str, rec):
    """An embedded receipt as a ``data`` component (see the module docstring)."""
    from cyclonedx.model import HashAlgorithm, HashType  # noqa: PLC0415
    from cyclonedx.model.component import Component, ComponentType  # noqa: PLC0415
    from cyclonedx.model.contact import OrganizationalContact  # noqa: PLC0415

    phase, precision, backend, arch, device_class = rec.key
    pairs = [("frt:receipt-digest", dig), ("frt:route", rec.route), ("frt:state", rec.state), ("frt:phase", phase),
             ("frt:precision", precision), ("frt:backend", backend), ("frt:arch", arch),
             ("frt:device-class", device_class)]
    pairs += [(f"frt:software:{k}", str(v)) for k, v in sorted(rec.cell.get("software", {}).items())]
    sig = lock.signatures.get(dig) or {}
    signer = sig.get("signer")
    key_file = None
    if sig.get("kind") == "key" and signer:
        key_file = next((rel for rel, pin in sorted((getattr(lock, "receipt_keys", None) or {}).items())
                         if isinstance(pin, dict) and pin.get("keyid") == signer), None)
    pairs += [("frt:signature", sig.get("kind")), ("frt:signer", signer), ("frt:signer-issuer", sig.get("issuer")),
              ("frt:signer-key-file", key_file)]
    author = None
    if signer:
        who = signer if sig.get("kind") == "sigstore" else f"key {key_file or 'not pinned'} ({signer})"
        author = [OrganizationalContact(name=who)]
    return Component(name=rec.file, type=ComponentType.DATA, version=dig, bom_ref=f"frt-receipt:{dig}",
                     description=f"qualification receipt: route {rec.route} on {'/'.join(rec.key)}: {rec.state}",
                     hashes=[HashType(alg=HashAlgorithm.SHA_256, content=dig.split(":", 1)[1])],
                     authors=author, properties=_props(pairs))
