"""Manifests: ``manifests/<model>.toml``, written by people (docs/reference.md#manifest).

A manifest declares one model binding: packages, phase bands, seams with their
impls and contracts, and routes. ``Manifest.read`` parses strictly and names
the file and field of the first problem; ``route_digest`` is the identity a
receipt is tied to.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import cached_property, partial
from pathlib import Path
from typing import Any, NamedTuple

from ..base import names
from ..base.canonical import digest
from ..base.record import dataclass, field
from ..errors import ManifestError
from ..system.hardware import device_class
from .schema import Reader, load_toml, toml_key

__all__ = ["Manifest", "Package", "Impl", "Route", "Phase", "Seam", "validate_repo_id", "ASSEMBLIES", "ReceiptPolicy",
           "Identity", "ReleaseRef", "DEFAULT_MIN_SPEEDUP", "GATE_SOURCES", "Gate", "route_gate"]

SCHEMA_FAMILY, SCHEMA_MAJOR = "frt.manifest", 1
ASSEMBLIES = ("eager", "compile", "capture", "compile-then-capture")
LAYOUTS = ("contiguous", "any")
ARITIES = ("open", "fixed")  # contract.arity: may a call pass arguments beyond the smoke's inputs?
_SYMBOL = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_HOST_ENTRY = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


def validate_repo_id(repo: str) -> str | None:
    """``None`` when ``repo`` is a safe ``org/name`` id, else what is wrong with it (``frt_dist.base.names``)."""
    return names.problem("repo", repo)


@dataclass(frozen=True)
class Package:
    """A package the manifest declares: a Hub version or a project path."""

    repo: str
    version: int | None = None
    path: str | None = None
    trust: bool = False
    # publisher signatures (docs/reference.md#publisher-signatures; frt_dist.provenance.publisher): the package's
    # own `signature` mode and `signer` policy, when it sets them (else its organisation's, see
    # Manifest.publisher_policy)
    signature: str | None = None
    signer: Any = None  # frt_dist.documents.publisher_policy.SignerPolicy

    @property
    def is_path(self) -> bool:
        return self.path is not None


@dataclass(frozen=True)
class Phase:
    """A phase band: the row counts (inclusive) a route is qualified for."""

    name: str
    rows: tuple[int, int]

    def admits(self, rows: int) -> bool:
        return self.rows[0] <= rows <= self.rows[1]


@dataclass(frozen=True)
class Impl:
    """One implementation of a seam: package entry, precisions, contract and smoke."""

    seam: str
    name: str
    package: str
    entry: str
    # the route precisions it may serve: `precision = "bf16"` or `precision = ["bf16", "fp8"]`
    # (e.g. a bf16 attention kernel inside an fp8 route, without a second impl)
    precisions: tuple[str, ...]
    contract: dict
    smoke: dict
    probes: tuple[str, ...] = ()
    table: dict = field(default_factory=dict, compare=False, repr=False)
    # a vLLM binding's impl names a layer class in its package's `layers` module (the `kernels`
    # layer convention) instead of an `entry` function; `entry` is then ""
    layer: str | None = None


@dataclass(frozen=True)
class Seam:
    """A place in the host model a kernel can take over, with its implementations."""

    name: str
    structure: str
    impls: dict[str, Impl]
    vllm_op: str | None = None  # a vLLM binding: the CustomOp class name the seam replaces ("RMSNorm")


DEFAULT_MIN_SPEEDUP = 1.02
"""The gate of a route that declares none (docs/reference.md#qualification): ``certified_fast`` needs the
speed-up interval's low end (and the median) at or above it. A gate of 1 would certify noise: a route
as fast as the host measures an interval starting at 1.001 on a quiet machine. A manifest
that means another effect says so with ``gate = { min-speedup = X }``."""
GATE_SOURCES = ("declared", "default")


class Gate(NamedTuple):
    """The gate a route's speed claims are judged against, and where it comes from: ``declared``
    (the route's ``gate.min-speedup``) or ``default`` (``DEFAULT_MIN_SPEEDUP``)."""

    min_speedup: float
    source: str

    @property
    def is_default(self) -> bool:
        return self.source == "default"

    def to_json(self) -> dict:
        """What a receipt records as ``evidence.timing.gate``."""
        return {"min-speedup": self.min_speedup, "source": self.source}

    def describe(self) -> str:
        """``min-speedup 1.02 (the default: the route declares no gate)`` / ``min-speedup 1.05 (declared)``."""
        why = "the default: the route declares no gate" if self.is_default else "declared"
        return f"min-speedup {self.min_speedup:g} ({why})"


def route_gate(route: Route) -> Gate:
    """The one rule for a route's gate: its declared ``gate.min-speedup``, else ``DEFAULT_MIN_SPEEDUP``.
    `frt qualify` decides a receipt's state with it and `frt lock`/`frt verify` judge the receipt's
    ``certified_fast`` with it (``receipt.EVIDENCE_RULES``), so qualify never writes a receipt lock
    rejects; lock judges by the route as the manifest defines it now, whatever gate a receipt recorded."""
    declared = route.min_speedup
    return Gate(DEFAULT_MIN_SPEEDUP, "default") if declared is None else Gate(declared, "declared")


@dataclass(frozen=True)
class Route:
    """A named choice of one impl per seam, its assembly and its gate."""

    name: str
    assembly: str
    seams: dict[str, str]  # seam -> impl name
    gate: dict
    precision: str
    # computes ``digest`` (the route-digest, docs/reference.md#digests-and-names) when first asked: serving never
    # needs it, only locking, qualifying and checking receipts do
    digest_of: Callable[[], str] = field(repr=False, compare=False)

    @cached_property
    def digest(self) -> str:
        return self.digest_of()

    @property
    def min_speedup(self) -> float | None:
        """The *declared* gate (``None``: none declared); the gate applied is ``route_gate(route)``."""
        v = self.gate.get("min-speedup")
        return float(v) if v is not None else None


@dataclass(frozen=True)
class Identity:
    """A Sigstore signer: the certificate's OIDC issuer and its identity (the SAN)."""

    issuer: str
    identity: str

    def __str__(self) -> str:
        return f"{self.identity} (issuer {self.issuer})"


@dataclass(frozen=True)
class ReceiptPolicy:
    """The manifest's ``[trust.receipts]``: the receipt signers it accepts (key files relative to
    the project root, Sigstore identities) and, optionally, the device classes it covers."""

    keys: tuple[str, ...] = ()
    identities: tuple[Identity, ...] = ()
    device_classes: tuple[str, ...] | None = None  # None: every receipt is covered

    def covers(self, device_class: str) -> bool:
        """Whether a receipt of ``device_class`` (normalised) must be signed under this policy.
        A receipt the policy does not cover is read as if there were no policy."""
        return self.device_classes is None or device_class in self.device_classes

    def describe(self) -> str:
        signers = [f"key {k}" for k in self.keys] + [f"identity {i}" for i in self.identities]
        return ", ".join(signers)


@dataclass(frozen=True)
class ReleaseRef:
    """The manifest's ``[release]``: a Hub model repo whose receipts the project consumes, at a
    version (its branch ``v<version>``; ``frt_dist.lock.release``)."""

    repo: str
    version: int


@dataclass(frozen=True)
class Manifest:
    """A model binding's manifest, validated (``Manifest.read``, ``Manifest.from_dict``)."""

    file: str  # as named in messages and in the lock (relative to the project root)
    model: str
    binding: str
    host: str
    family: str
    default_precision: str | None
    host_entry: str | None
    packages: dict[str, Package]
    phases: dict[str, Phase]
    seams: dict[str, Seam]
    routes: dict[str, Route]
    qualify: dict
    raw: dict = field(repr=False, compare=False)
    digest: str = ""
    # [trust.publishers."<org>"]: {"signature": mode or None, "signer": SignerPolicy or None}
    publishers: dict = field(default_factory=dict, compare=False)
    # [trust.receipts] (docs/reference.md#receipt-signatures): the receipt signers the project accepts; None: no policy
    receipt_policy: ReceiptPolicy | None = None
    # [release]: the Hub release whose receipts this project consumes (frt_dist.lock.release); None: none
    release: ReleaseRef | None = None
    # a vLLM binding (`host = "vllm"`): the Hugging Face model folder qualification runs, relative to
    # the project root
    host_model: str | None = None

    # -- reading ------------------------------------------------------------
    @classmethod
    def read(cls, path: Path, *, label: str | None = None) -> Manifest:
        label = label or str(path)
        data = load_toml(Path(path), ManifestError, label)
        return cls.from_dict(data, file=label)

    @classmethod
    def from_dict(cls, data: dict, *, file: str) -> Manifest:
        r = Reader(file, ManifestError)
        r.only(data, {"schema", "model", "binding", "host", "family", "default-precision", "host-entry",
                      "description", "packages", "phases", "seams", "routes", "qualify", "trust", "release", "host-model"}, "")
        r.schema(data, SCHEMA_FAMILY, SCHEMA_MAJOR)
        model = names.check("name", r.get(data, "model", str, ""), "model", ManifestError, file=file)
        binding = r.get(data, "binding", str, "")
        host = r.get(data, "host", str, "")
        family = r.get(data, "family", str, "")
        r.get(data, "description", str, "", required=False)
        default_precision = r.get(data, "default-precision", str, "", required=False)
        host_entry = r.get(data, "host-entry", str, "", required=False)
        if host_entry is not None and not _HOST_ENTRY.match(host_entry):
            raise r.fail("host-entry", f"expected 'module:callable', got {host_entry!r}")
        host_model = r.get(data, "host-model", str, "", required=False)
        if host_model is not None:
            names.check("path", host_model, "host-model", ManifestError, file=file)
        if host == "vllm" and host_model is None:
            raise r.fail("host-model", "a vLLM binding (host = \"vllm\") names the Hugging Face model folder it "
                                       "runs, relative to the project root")

        packages: dict[str, Package] = {}
        for repo, t in r.get(data, "packages", dict, "").items():
            p = f"packages.{toml_key(repo)}"
            names.check("repo", repo, p, ManifestError, file=file)
            if not isinstance(t, dict):
                raise r.fail(p, "expected a table")
            r.only(t, {"version", "path", "trust", "signature", "signer"}, p)
            version = r.get(t, "version", int, p, required=False)
            path = r.get(t, "path", str, p, required=False)
            trust = r.get(t, "trust", bool, p, required=False, default=False)
            signature, signer = _signature_policy(r, t, p, "package")
            if (version is None) == (path is None):
                raise r.fail(p, "exactly one of `version` or `path` is required")
            if version is not None and version < 0:
                raise r.fail(p + ".version", "must be a non-negative integer")
            if path is not None:  # relative to the project root, inside it (docs/reference.md#names)
                names.check("path", path, p + ".path", ManifestError, file=file)
            packages[repo] = Package(repo, version, path, trust, signature, signer)
        if not packages:
            raise r.fail("packages", "at least one package is required")

        phases: dict[str, Phase] = {}
        for name, t in r.get(data, "phases", dict, "").items():
            p = f"phases.{toml_key(name)}"
            names.check("name", name, p, ManifestError, file=file)
            if not isinstance(t, dict):
                raise r.fail(p, "expected a table")
            r.only(t, {"rows"}, p)
            rows = r.get(t, "rows", list, p)
            if len(rows) != 2 or not all(isinstance(x, int) and not isinstance(x, bool) for x in rows) or rows[0] < 0 or rows[0] > rows[1]:
                raise r.fail(p + ".rows", f"expected [low, high] integers with 0 <= low <= high, got {rows!r}")
            phases[name] = Phase(name, (rows[0], rows[1]))
        if not phases:
            raise r.fail("phases", "at least one phase band is required")

        seams: dict[str, Seam] = {}
        for sname, t in r.get(data, "seams", dict, "").items():
            p = f"seams.{toml_key(sname)}"
            names.check("name", sname, p, ManifestError, file=file)
            if not isinstance(t, dict):
                raise r.fail(p, "expected a table")
            r.only(t, {"structure", "impls", "description", "vllm-op"}, p)
            structure = r.get(t, "structure", str, p)
            vllm_op = r.get(t, "vllm-op", str, p, required=False)
            if vllm_op is not None and not _SYMBOL.match(vllm_op):
                raise r.fail(p + ".vllm-op", f"expected a vLLM CustomOp class name like \"RMSNorm\", got {vllm_op!r}")
            if host == "vllm" and vllm_op is None:
                raise r.fail(p + ".vllm-op", "a vLLM binding's seam names the vLLM op class it replaces "
                                             "(vllm-op = \"RMSNorm\")")
            impls: dict[str, Impl] = {}
            for iname, it in r.get(t, "impls", dict, p).items():
                names.check("name", iname, f"{p}.impls.{toml_key(iname)}", ManifestError, file=file)
                if vllm_op is not None and isinstance(it, dict) and "layer" not in it:
                    raise r.fail(f"{p}.impls.{toml_key(iname)}.layer", f"the seam replaces the vLLM op {vllm_op}: its "
                                 "impls name a layer class of their package's `layers` module (layer = "
                                 f"\"{vllm_op}\")")
                impls[iname] = _read_impl(r, sname, iname, it, f"{p}.impls.{toml_key(iname)}", packages)
            if not impls:
                raise r.fail(p + ".impls", "at least one impl is required")
            seams[sname] = Seam(sname, structure, impls, vllm_op)

        qualify = r.get(data, "qualify", dict, "", required=False, default={})
        r.only(qualify, {"tolerance", "rounds", "max-rounds", "warmup", "rows"}, "qualify")
        if "tolerance" in qualify:
            tol = r.get(qualify, "tolerance", dict, "qualify")
            r.only(tol, {"abs", "rel"}, "qualify.tolerance")
            r.number(tol, "abs", "qualify.tolerance")
            r.number(tol, "rel", "qualify.tolerance")
        r.get(qualify, "rounds", int, "qualify", required=False)
        r.get(qualify, "warmup", int, "qualify", required=False)
        if r.get(qualify, "max-rounds", int, "qualify", required=False) is not None and qualify["max-rounds"] < 1:
            raise r.fail("qualify.max-rounds", "expected a positive number of rounds (the cap of adaptive timing)")
        if "rows" in qualify:
            rq = r.get(qualify, "rows", dict, "qualify")
            for ph, v in rq.items():
                if ph not in phases:
                    raise r.fail(f"qualify.rows.{toml_key(ph)}", f"unknown phase (phases: {', '.join(phases)})")
                if not isinstance(v, list) or not all(isinstance(x, int) and phases[ph].admits(x) for x in v):
                    raise r.fail(f"qualify.rows.{toml_key(ph)}", f"expected row counts inside the band {list(phases[ph].rows)}")

        routes: dict[str, Route] = {}
        for rname, t in r.get(data, "routes", dict, "").items():
            p = f"routes.{toml_key(rname)}"
            names.check("name", rname, p, ManifestError, file=file)
            if rname == "host":
                raise r.fail(p, "invalid route name ('host' is reserved)")
            if not isinstance(t, dict):
                raise r.fail(p, "expected a table")
            r.only(t, {"assembly", "seams", "gate", "precision"}, p)
            assembly = r.get(t, "assembly", str, p)
            if assembly not in ASSEMBLIES:
                raise r.fail(p + ".assembly", f"expected one of {', '.join(ASSEMBLIES)}, got {assembly!r}")
            rseams = r.get(t, "seams", dict, p)
            if not rseams:
                raise r.fail(p + ".seams", "a route binds at least one seam")
            served = []
            for seam, impl in rseams.items():
                sp = f"{p}.seams.{toml_key(seam)}"
                if seam not in seams:
                    raise r.fail(sp, f"unknown seam (seams: {', '.join(seams)})")
                if not isinstance(impl, str):
                    raise r.fail(sp, "expected an impl name (string)")
                if impl not in seams[seam].impls:
                    raise r.fail(sp, f"unknown impl {impl!r} (impls of {seam}: {', '.join(seams[seam].impls)})")
                served.append((seam, seams[seam].impls[impl].precisions))
            precision = _route_precision(r, t, p, served)
            gate = r.get(t, "gate", dict, p, required=False, default={})
            r.only(gate, {"min-speedup"}, p + ".gate")
            if "min-speedup" in gate:
                ms = r.number(gate, "min-speedup", p + ".gate")
                if ms <= 0:
                    raise r.fail(p + ".gate.min-speedup", "must be positive")
            routes[rname] = Route(rname, assembly, dict(rseams), dict(gate), precision,
                                  partial(route_digest_of, t, seams))
        if not routes:
            raise r.fail("routes", "at least one route is required")

        publishers = {}
        trust_t = r.get(data, "trust", dict, "", required=False, default={})
        r.only(trust_t, {"publishers", "receipts"}, "trust")
        for org, t in r.get(trust_t, "publishers", dict, "trust", required=False, default={}).items():
            p = f"trust.publishers.{toml_key(org)}"
            if names.problem("repo", f"{org}/x"):
                raise r.fail(p, f"not an organisation name: {org!r}")
            if not isinstance(t, dict):
                raise r.fail(p, "expected a table")
            r.only(t, {"signature", "signer"}, p)
            publishers[org] = _signature_policy(r, t, p, "organisation")
        receipt_policy = _read_trust(r, trust_t)

        release = _read_release(r, data)

        precs = {pr for s in seams.values() for impl in s.impls.values() for pr in impl.precisions}
        if default_precision is not None and default_precision not in precs:
            raise r.fail("default-precision", f"no impl has precision {default_precision!r} (impls: {', '.join(sorted(precs))})")
        return cls(file=file, model=model, binding=binding, host=host, family=family,
                   default_precision=default_precision, host_entry=host_entry, packages=packages,
                   phases=phases, seams=seams, routes=routes, qualify=qualify, raw=data,
                   digest=r.digest(data), publishers=publishers, receipt_policy=receipt_policy,
                   host_model=host_model, release=release)

    # -- derived ------------------------------------------------------------
    def publisher_policy(self, repo: str):
        """The publisher-signature policy of ``repo`` (``frt_dist.documents.publisher_policy.PublisherPolicy``): its
        own ``signature``/``signer`` keys, else those of ``[trust.publishers."<org>"]``, else for
        ``kernels-community/*`` `kernels`' default signers, else no signer policy; the mode
        defaults to ``optional``."""
        from .publisher_policy import KERNELS_COMMUNITY, PublisherPolicy  # noqa: PLC0415

        pkg = self.packages.get(repo)
        org = repo.split("/", 1)[0]
        org_sig, org_signer = self.publishers.get(org, (None, None))
        signature = (pkg.signature if pkg else None) or org_sig or "optional"
        signer = (pkg.signer if pkg else None) or org_signer or (KERNELS_COMMUNITY if org == "kernels-community" else None)
        return PublisherPolicy(signature, signer)

    @cached_property
    def precisions(self) -> list[str]:
        """Every precision a route of this manifest runs at (checked on each decision)."""
        return sorted({r.precision for r in self.routes.values()})

    def route_packages(self, route: str) -> list[str]:
        rt = self.routes[route]
        return sorted({self.seams[s].impls[i].package for s, i in rt.seams.items()})

    def impl(self, seam: str, name: str) -> Impl:
        return self.seams[seam].impls[name]

    @property
    def tolerance(self) -> dict:
        t = self.qualify.get("tolerance", {})
        return {"abs": float(t.get("abs", 1e-4)), "rel": float(t.get("rel", 1e-3))}


def _read_trust(r: Reader, trust: dict) -> ReceiptPolicy | None:
    """``[trust.receipts]`` of the manifest's ``[trust]`` table (docs/reference.md#receipt-signatures): ``keys``
    (PEM public key files, relative to the project root and inside it), ``identities`` (``{issuer, identity}``
    Sigstore signers) and optional ``device-classes`` (normalised, docs/reference.md#digests-and-names). Only the
    shape is checked here; the key files are read when the policy is used (``signing.read_policy_keys``)."""
    t = r.get(trust, "receipts", dict, "trust", required=False)
    if t is None:
        return None
    p = "trust.receipts"
    r.only(t, {"keys", "identities", "device-classes"}, p)
    keys = r.str_list(t, "keys", p, required=False, default=[])
    for i, k in enumerate(keys):
        names.check("path", k, f"{p}.keys[{i}]", ManifestError, file=r.file)
    if len(set(keys)) != len(keys):
        raise r.fail(p + ".keys", "lists a key file twice")
    identities = []
    for i, it in enumerate(r.get(t, "identities", list, p, required=False, default=[])):
        ip = f"{p}.identities[{i}]"
        if not isinstance(it, dict):
            raise r.fail(ip, "expected a table { issuer = \"...\", identity = \"...\" }")
        r.only(it, {"issuer", "identity"}, ip)
        issuer, ident = r.get(it, "issuer", str, ip), r.get(it, "identity", str, ip)
        if not issuer.startswith("https://"):
            raise r.fail(ip + ".issuer", f"expected the OIDC issuer URL (https://...), got {issuer!r}")
        if not ident:
            raise r.fail(ip + ".identity", "must not be empty (the certificate identity: a workflow URI or an e-mail)")
        identities.append(Identity(issuer, ident))
    if not keys and not identities:
        raise r.fail(p, "a policy needs at least one signer: `keys` or `identities`")
    classes = None
    if "device-classes" in t:
        listed = r.str_list(t, "device-classes", p)
        if not listed:
            raise r.fail(p + ".device-classes", "lists no device class (leave it out to cover every receipt)")
        classes = []
        for i, dc in enumerate(listed):
            norm = device_class(dc)
            why = names.problem("name", norm)
            if why:
                raise r.fail(f"{p}.device-classes[{i}]", f"{dc!r} {why}")
            classes.append(norm)
        classes = tuple(dict.fromkeys(classes))
    return ReceiptPolicy(tuple(keys), tuple(identities), classes)


def _read_release(r: Reader, data: dict):
    """``[release]``: ``repo = "ORG/NAME"`` (a Hub model repo) and ``version = N`` (its branch ``vN``)."""
    t = r.get(data, "release", dict, "", required=False)
    if t is None:
        return None
    r.only(t, {"repo", "version"}, "release")
    repo = names.check("repo", r.get(t, "repo", str, "release"), "release.repo", ManifestError, file=r.file)
    version = r.get(t, "version", int, "release")
    if version < 0:
        raise r.fail("release.version", "must be a non-negative integer")
    return ReleaseRef(repo, version)


def _signature_policy(r: Reader, t: dict, p: str, source: str) -> tuple:
    """A table's ``signature`` mode and ``signer`` policy (``frt_dist.documents.publisher_policy``), checked by field."""
    if "signature" not in t and "signer" not in t:  # neither: `frt resolve` need not import the policy types
        return None, None
    from .publisher_policy import GITHUB_ISSUER, SIGNATURE_MODES, SignerPolicy  # noqa: PLC0415

    signature = r.get(t, "signature", str, p, required=False)
    if signature is not None and signature not in SIGNATURE_MODES:
        raise r.fail(p + ".signature", f"expected one of {', '.join(SIGNATURE_MODES)}, got {signature!r}")
    st = r.get(t, "signer", dict, p, required=False)
    if st is None:
        return signature, None
    sp = p + ".signer"
    r.only(st, {"issuer", "repository", "workflows"}, sp)
    issuer = r.get(st, "issuer", str, sp, required=False, default=GITHUB_ISSUER)
    repository = r.get(st, "repository", str, sp)
    workflows = r.str_list(st, "workflows", sp)
    for k, v in (("issuer", issuer), ("repository", repository)):
        if not v.startswith("https://"):
            raise r.fail(f"{sp}.{k}", f"expected an https:// URI, got {v!r}")
    if not workflows:
        raise r.fail(sp + ".workflows", "at least one build-signer workflow URI is required (as kernels requires)")
    for i, w in enumerate(workflows):  # a reusable workflow may live in another repository: not tied to it
        if not w.startswith("https://"):
            raise r.fail(f"{sp}.workflows[{i}]", f"expected a build-signer URI like https://github.com/<org>/<repo>"
                                                 f"/.github/workflows/<file>[@<ref>], got {w!r}")
    return signature, SignerPolicy(repository, tuple(workflows), issuer, source)


def _read_impl(r: Reader, seam: str, name: str, t: Any, p: str, packages: dict) -> Impl:
    if not isinstance(t, dict):
        raise r.fail(p, "expected a table")
    r.only(t, {"package", "entry", "layer", "probes", "precision", "contract", "smoke"}, p)
    package = r.get(t, "package", str, p)
    if package not in packages:
        raise r.fail(p + ".package", f"package {package!r} is not declared in [packages]")
    layer = r.get(t, "layer", str, p, required=False)
    if layer is not None and not _SYMBOL.match(layer):
        raise r.fail(p + ".layer", f"not a Python class name: {layer!r}")
    entry = r.get(t, "entry", str, p, required=layer is None, default="")
    if (entry or layer is None) and not _SYMBOL.match(entry):
        raise r.fail(p + ".entry", f"not a Python symbol: {entry!r}")
    probes = r.str_list(t, "probes", p, required=False, default=[])
    for i, pr in enumerate(probes):
        if not _SYMBOL.match(pr):
            raise r.fail(f"{p}.probes[{i}]", f"not a Python symbol: {pr!r}")
    raw_prec = r.get(t, "precision", (str, list), p)
    listed = [raw_prec] if isinstance(raw_prec, str) else raw_prec
    if not listed:
        raise r.fail(p + ".precision", "at least one precision is required")
    precisions = tuple(names.check("name", pr, f"{p}.precision", ManifestError, file=r.file) for pr in listed)
    if len(set(precisions)) != len(precisions):
        raise r.fail(p + ".precision", f"lists a precision twice: {listed!r}")
    contract = r.get(t, "contract", dict, p)
    cp = p + ".contract"
    r.only(contract, {"device", "dtypes", "layout", "width", "arity"}, cp)
    r.get(contract, "device", str, cp)
    r.str_list(contract, "dtypes", cp)
    layout = r.get(contract, "layout", str, cp, required=False, default="contiguous")
    if layout not in LAYOUTS:
        raise r.fail(cp + ".layout", f"expected one of {', '.join(LAYOUTS)}, got {layout!r}")
    width = r.get(contract, "width", int, cp, required=False)
    arity = r.get(contract, "arity", str, cp, required=False, default="open")
    if arity not in ARITIES:
        raise r.fail(cp + ".arity", f"expected one of {', '.join(ARITIES)}, got {arity!r}")
    smoke = r.get(t, "smoke", dict, p)
    sp = p + ".smoke"
    r.only(smoke, {"inputs", "expect"}, sp)
    inputs = r.get(smoke, "inputs", list, sp)
    if not inputs:
        raise r.fail(sp + ".inputs", "at least one input is required")
    for i, inp in enumerate(inputs):
        ip = f"{sp}.inputs[{i}]"
        if not isinstance(inp, dict):
            raise r.fail(ip, "expected a table")
        r.only(inp, {"shape", "dtype", "scale"}, ip)
        _shape(r, inp, ip)
        r.get(inp, "dtype", str, ip)
        r.number(inp, "scale", ip, required=False)
    dtypes = contract["dtypes"]
    if not any(inp["dtype"] in dtypes for inp in inputs):
        # the guard checks the call's precision on the inputs the smoke declares with one of `dtypes`
        raise r.fail(sp + ".inputs", f"no input has a dtype from {cp}.dtypes {dtypes!r}: the guard could not "
                                     "check the call's precision")
    first = inputs[0]["shape"]
    if width is not None and (not first or first[-1] != width):
        # the guard checks `width` on the first input's last dimension, which the smoke declares too:
        # a contract no call could meet is refused here, not at the first request
        raise r.fail(cp + ".width", f"width {width} does not match the last dimension of {sp}.inputs[0].shape "
                                    f"{first!r}")
    if "expect" in smoke:
        ep = sp + ".expect"
        exp = r.get(smoke, "expect", dict, sp)
        r.only(exp, {"shape"}, ep)
        _shape(r, exp, ep)
    return Impl(seam, name, package, entry, precisions, dict(contract), dict(smoke), tuple(probes), dict(t), layer)


def _route_precision(r: Reader, t: dict, p: str, served: list[tuple[str, tuple[str, ...]]]) -> str:
    """The precision a route runs at: its own ``precision`` when it declares one (every impl must
    serve it), else the one precision all its impls serve; none in common, or several with none
    declared, is an error naming the route."""
    common = set(served[0][1]).intersection(*(set(ps) for _, ps in served[1:]))
    declared = r.get(t, "precision", str, p, required=False)
    if declared is not None:
        for seam, ps in served:
            if declared not in ps:
                raise r.fail(p + ".precision", f"{declared!r} is not served by the impl of seam {seam!r} "
                                               f"(it serves {', '.join(ps)})")
        return declared
    if len(common) == 1:
        return common.pop()
    listing = "; ".join(f"{seam}: {', '.join(ps)}" for seam, ps in served)
    if not common:
        raise r.fail(p + ".seams", f"the route's impls share no precision ({listing})")
    raise r.fail(p + ".precision", f"the route's impls share several precisions ({', '.join(sorted(common))}): "
                                   "declare which one the route runs at")


def _shape(r: Reader, t: dict, p: str) -> None:
    shape = r.get(t, "shape", list, p)
    for j, d in enumerate(shape):
        if isinstance(d, bool) or not (isinstance(d, int) and d >= 0 or d == "rows"):
            raise r.fail(f"{p}.shape[{j}]", f"expected a non-negative integer or \"rows\", got {d!r}")


def route_digest_of(route_table: dict, seams: dict[str, Seam]) -> str:
    """The route-digest (docs/reference.md#digests-and-names): the route's table without ``gate``, each impl
    name replaced by that impl's table without ``smoke``."""
    t = {k: v for k, v in route_table.items() if k != "gate"}
    t["seams"] = {
        seam: {k: v for k, v in seams[seam].impls[impl].table.items() if k != "smoke"}
        for seam, impl in route_table["seams"].items()
    }
    return digest(t)
