"""Lockfiles: ``lockfiles/<model>.lock``, written only by ``frt lock`` (docs/reference.md#lockfile).

TOML, strict, deterministic. The lock embeds the manifest it was made from, so
serving needs nothing but the lockfile (and the package bytes it pins). The
``lock-digest`` covers everything else; a reader that finds it wrong refuses
the lockfile before any decision. It is an unkeyed sha256: it detects damage,
not an author (anyone who edits the file can recompute it). Serving trusts a
lock whose digest holds; ``frt verify`` (``frt_dist.lock.verify``) re-derives what
``frt lock`` derived and names every difference.

This module is the lockfile's value (``Lockfile`` and what it pins) and the field-by-field
reading of its document. The rest lives beside it: ``lock_index`` (the route index and the
receipts as looked up, the interface every reader of the index uses), ``lock_fast`` (reading a
large lock without running its big texts through the TOML reader), ``lock_writer`` (rendering
and ``write_atomic``; its names are importable from here too).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from ..base import names
from ..base.canonical import digest
from ..base.record import dataclass, field
from ..errors import LockfileError
from .lock_fast import lock_digest_of, read_fast
from .lock_index import (
    SHA256_DIGEST,
    Candidate,
    CellIndex,
    IndexEntry,
    RouteIndex,
    embedded_receipt_rows,
    read_index,
    read_receipts,
)
from .manifest import Manifest
from .receipt import Receipt
from .schema import Reader, parse_toml, read_bytes

__all__ = ["Lockfile", "LockCache", "LockedPackage", "LockedVariant", "IndexEntry", "Candidate", "RouteIndex",
           "CellIndex", "embedded_receipt_rows", "TRUST_DECISIONS"]  # and lock_writer's names (__getattr__)

SCHEMA = "frt.lock/1.1"  # 1.1: the `nearest` summary (docs/reference.md#lockfile)
SCHEMA_RELEASE = "frt.lock/1.2"  # 1.2: the `[release]` table, written only by a lock that consumes a Hub release
SCHEMA_FAMILY, SCHEMA_MAJOR = "frt.lock", 1
_HEX40 = re.compile(r"^[0-9a-f]{40}$")
_MODULE_ID = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
TRUST_DECISIONS = ("trusted-publisher", "manifest", "project-path")


@dataclass(frozen=True)
class LockedVariant:
    """One locked build variant of a package: what its directory must hold, and its import id."""

    name: str
    backend: str
    archs: tuple[str, ...]
    metadata_sha256: str
    module_id: str
    module_name: str
    algorithm: str
    files: dict[str, str]  # relpath -> base64 digest, as metadata.json declares (or frt computed)
    # "metadata": the digests are the publisher's (metadata.json `digest`); "frt": metadata.json has
    # none (older kernel-builder output) and `frt lock` computed them from the files it read
    digest_source: str = "metadata"
    # what the variant needs (metadata.json), checked by resolve on the machine: kernels-minver,
    # python-depends, and kernel-depends as (repo, version) pairs, locked as packages of their own
    kernels_minver: str | None = None
    python_depends: tuple[str, ...] = ()
    kernel_depends: tuple[tuple[str, int], ...] = ()
    # the publisher's signature over metadata.json (metadata.json.sigstore, docs/reference.md#publisher-signatures), as `frt lock`
    # verified it: {"bundle-sha256", "identity", "issuer", "repository"?, "build-signer"?, "policy"};
    # None: the variant carries no bundle (or the policy reads none)
    signature: dict | None = None

    def to_toml(self) -> dict:
        out = {"backend": self.backend, "archs": list(self.archs), "metadata-sha256": self.metadata_sha256,
               "module-id": self.module_id, "module-name": self.module_name,
               "digest-algorithm": self.algorithm, "files": dict(sorted(self.files.items()))}
        # written only when not the default, so locks of packages without them keep their bytes
        if self.digest_source != "metadata":
            out["digest-source"] = self.digest_source
        if self.kernels_minver is not None:
            out["kernels-minver"] = self.kernels_minver
        if self.python_depends:
            out["python-depends"] = list(self.python_depends)
        if self.kernel_depends:
            out["kernel-depends"] = [{"repo-id": r, "version": v} for r, v in self.kernel_depends]
        if self.signature is not None:
            out["signature"] = dict(self.signature)
        return out


@dataclass(frozen=True)
class LockedPackage:
    """One package as the lock pins it: source, revision, trust decision and its locked variants."""

    repo: str
    source: str  # "hub" | "path"
    version: int
    revision: str  # 40-hex commit, or sha256:<hex> content digest for a path package
    trust: str
    variants: dict[str, LockedVariant]
    path: str | None = None
    # the Hub's trustedKernelPublisher fact for the repo's org, as the locker read it: recorded when
    # the trust decision rests on it ("trusted-publisher"), so `frt verify` can re-derive the decision
    publisher_trusted: bool | None = None

    @property
    def snapshot(self) -> str:
        """The hub-cache snapshot directory name: the commit, or for a path package the first 40 hex
        digits of its content digest (docs/reference.md#mirrors)."""
        return self.revision.split(":", 1)[1][:40] if self.revision.startswith("sha256:") else self.revision

    def to_toml(self) -> dict:
        out = {"source": self.source}
        if self.path is not None:
            out["path"] = self.path
        out.update({"version": self.version, "revision": self.revision, "trust": self.trust})
        if self.publisher_trusted is not None:
            out["publisher-trusted"] = self.publisher_trusted
        out["variants"] = {n: v.to_toml() for n, v in sorted(self.variants.items())}
        return out


class LockCache:
    """What is derived from one ``Lockfile`` once and kept with it (``Lockfile.cache``). Each
    entry is a pure function of the lock and its key, so dropping any (``clear``) changes no
    answer, only its cost. Declared here with who fills it and its key: nothing else hangs data
    on a lock. The tables are bounded (``put``): a long-lived process asking about ever new
    machines keeps the last few, not all."""

    __slots__ = ("decisions", "miss_index", "roots", "route_facts")
    DECISIONS_MAX = 4096
    ROUTE_FACTS_MAX = 64

    def __init__(self):
        # (the values' types are the resolver's, named here in words: this module imports no route code)
        # routes.resolver.resolve, asked without a reporter: (hardware fingerprint, precision,
        # phase, fallback, accept) -> its Decision
        self.decisions: dict[tuple, object] = {}
        # routes.resolver.facts_for: a machine's variant-selection facts (backend, arch, cpu, os,
        # cxx11 abi, detected, software) -> the per-route facts (_RouteFacts) they decide
        self.route_facts: dict[tuple, object] = {}
        # routes.resolver._nearest_miss: the index grouped for refusal reasons (_MissIndex),
        # made when a reason first asks
        self.miss_index: object | None = None
        # project.discover.lock_root: the lock's path when asked (None: built in memory) -> the
        # project root its path packages are relative to
        self.roots: dict[str | None, Path] = {}

    def clear(self) -> None:
        """Drop every entry."""
        self.__init__()

    @staticmethod
    def put(table: dict, key, value, limit: int):
        """``table[key] = value``, emptying the table first when it holds ``limit`` entries."""
        if len(table) >= limit:
            table.clear()
        table[key] = value
        return value


@dataclass
class Lockfile:
    """A lockfile: the embedded manifest, the package pins, the receipts and the route index."""

    model: str
    manifest_file: str
    manifest: Manifest
    packages: dict[str, LockedPackage]
    receipts: Mapping[str, Receipt]  # digest -> receipt (lazily parsed when read from a file)
    rejected: list[dict]
    # a ``RouteIndex`` (any other mapping given is wrapped in a ``CellIndex``); read from a file in
    # frt's layout, a cell is found and parsed when first looked up
    index: RouteIndex
    lock_digest: str = ""
    path: str | None = None
    # the document as read: its plain values, and the texts the fast reader kept as they lie in
    # the file (``read_document`` gives both as text)
    _doc: dict = field(default_factory=dict, repr=False)
    _texts: dict = field(default_factory=dict, repr=False)
    # what is derived from this lock once and kept with it (``LockCache``); never copied by
    # ``replace`` (a changed lock starts empty)
    cache: LockCache = field(default_factory=LockCache, init=False, repr=False, compare=False)
    # under a [trust.receipts] policy (docs/reference.md#receipt-signatures): the policy's public keys as pinned at lock
    # (project-relative path -> {"keyid", "pem"}), and each accepted covered receipt's signature
    # (receipt digest -> {"receipt", "file", "kind", "signer"[, "issuer"], "envelope" | "bundle"});
    # both empty, and absent from the file, without a policy
    receipt_keys: dict[str, dict] = field(default_factory=dict)
    signatures: dict[str, dict] = field(default_factory=dict)
    # read from a file: the `nearest` summary as recorded, (route, phase, precision, backend) ->
    # the one or two smallest (device class, arch) of its cells (``nearest_rows``); None when the
    # lock has none (an older frt wrote it, or the lock was built in memory)
    nearest: dict | None = field(default=None, repr=False, compare=False)
    # the Hub release the receipts come from (frt_dist.lock.release): {"repo", "version", "commit", "files"[, "cells"]};
    # None (and no [release] table) when the manifest names none
    release: dict | None = None

    def __post_init__(self):
        if not isinstance(self.index, RouteIndex):
            self.index = CellIndex(self.index)

    # -- building the document ---------------------------------------------
    def document(self) -> dict:
        """The lockfile as a TOML-ready dict, without ``lock-digest``."""
        from .lock_writer import index_text, manifest_text, nearest_rows, nearest_text, receipts_text, signatures_text  # noqa: PLC0415

        m = self.manifest
        routes = {}
        for name, rt in sorted(m.routes.items()):
            routes[name] = {"route-digest": rt.digest, "precision": rt.precision, "assembly": rt.assembly,
                            "packages": m.route_packages(name)}
        doc = {
            "schema": SCHEMA,
            "model": self.model,
            "manifest-file": self.manifest_file,
            "manifest-digest": m.digest,
            "manifest": manifest_text(m.raw),
            "packages": {repo: p.to_toml() for repo, p in sorted(self.packages.items())},
            "routes": routes,
        }
        if self.rejected:
            doc["rejected-receipts"] = sorted(self.rejected, key=lambda x: (x["file"], x["digest"]))
        if self.index:
            doc["index"] = index_text([
                {**e.key.as_dict(), "route": e.candidates[0].route, "state": e.candidates[0].state,
                 "receipt": e.candidates[0].receipt, "candidates": [c.to_toml() for c in e.candidates]}
                for e in sorted(self.index.values(), key=lambda e: e.key)
            ])
            doc["nearest"] = nearest_text(nearest_rows(self.index.values()))
        if self.receipts:
            doc["receipts"] = receipts_text(sorted(self.receipts.values(), key=lambda r: (r.file, r.digest)))
        if self.receipt_keys:
            doc["receipt-keys"] = {k: dict(v) for k, v in sorted(self.receipt_keys.items())}
        if self.signatures:
            doc["receipt-signatures"] = signatures_text(sorted(self.signatures.values(), key=lambda x: (x["file"], x["receipt"])))
        if self.release:
            from .lock_release import document_table  # noqa: PLC0415

            doc["schema"] = SCHEMA_RELEASE
            doc["release"] = document_table(self)
        return doc

    def render(self) -> bytes:
        doc = self.document()
        from .lock_writer import render  # noqa: PLC0415

        self.lock_digest = digest(doc)
        return render(doc, self.lock_digest)

    # -- reading ------------------------------------------------------------
    @classmethod
    def of(cls, lock) -> Lockfile:
        """``lock`` itself, or the lockfile read (and verified) from a path: what every
        API taking ``lock`` accepts."""
        if isinstance(lock, cls):
            return lock
        if isinstance(lock, (str, os.PathLike)):
            return cls.read(lock)
        raise TypeError(f"lock must be a path or a frt_dist.Lockfile, got {type(lock).__name__}")

    @classmethod
    def read(cls, path: str | os.PathLike, *, verify: bool = True, label: str | None = None,
             index_refs: bool = True) -> Lockfile:
        label = label or str(path)
        raw = read_bytes(Path(path), LockfileError, label)
        fast = read_fast(raw)  # frt's own layout: the index and receipts texts not run through the TOML reader
        data, texts, computed = fast if fast is not None else (parse_toml(raw, LockfileError, label), {}, None)
        lf = cls._from_parts(data, texts, file=label, verify=verify, index_refs=index_refs, computed=computed)
        lf.path = str(path)
        return lf

    @classmethod
    def from_document(cls, data: dict, *, file: str, verify: bool = True, index_refs: bool = True) -> Lockfile:
        """The lockfile in ``data`` (a parsed TOML document). With ``verify`` the lock-digest and
        the manifest digest must hold. With ``index_refs`` (the default) an index candidate that
        names a receipt the lock does not embed is refused; ``frt verify`` reads without it and
        reports the candidate as an ``index`` problem with everything else it re-derives."""
        return cls._from_parts(data, {}, file=file, verify=verify, index_refs=index_refs)

    @classmethod
    def _from_parts(cls, data: dict, texts: dict, *, file: str, verify: bool, index_refs: bool,
                    computed: str | None = None) -> Lockfile:
        """``from_document`` of ``data`` with the ``texts`` the fast reader cut out of it (its
        ``computed`` lock-digest covers both)."""
        r = Reader(file, LockfileError)
        r.no_datetimes(data)  # before the digest: canonical JSON has no such type
        r.only(data, {"schema", "lock-digest", "model", "manifest-file", "manifest-digest", "manifest",
                      "packages", "routes", "receipts", "rejected-receipts", "index", "nearest", "receipt-keys",
                      "receipt-signatures", "release"}, "")
        r.schema(data, SCHEMA_FAMILY, SCHEMA_MAJOR)
        stated = r.get(data, "lock-digest", str, "")
        body = {k: v for k, v in data.items() if k != "lock-digest"}
        computed = computed or lock_digest_of(body)  # (`read` may have hashed it while reading)
        if verify and stated != computed:
            raise LockfileError(
                f"{file}: lock-digest does not verify (expected {stated}, computed {computed})",
                exit_code=1,
                reasons=[{"kind": "lock-digest", "path": file, "expected": stated, "computed": computed}],
                hints=["the lockfile was edited or damaged; regenerate it with `frt lock`"],
            )
        model = names.check("name", r.get(data, "model", str, ""), "model", LockfileError, file=file)
        manifest_file = r.get(data, "manifest-file", str, "")
        mdig = r.get(data, "manifest-digest", str, "")
        raw = r.json_value(data.get("manifest"), "manifest", dict,
                           "the manifest as a JSON object (string) or a table")
        from ..errors import ManifestError  # noqa: PLC0415

        try:
            manifest = Manifest.from_dict(raw, file=f"{file} [manifest]")
        except ManifestError as exc:
            raise LockfileError(str(exc), exit_code=2, reasons=exc.reasons) from None
        if manifest.digest != mdig:
            raise LockfileError(f"{file}: manifest-digest does not match the embedded manifest "
                                f"(expected {mdig}, computed {manifest.digest})", exit_code=1,
                                reasons=[{"kind": "lock-digest", "path": file, "expected": mdig, "computed": manifest.digest}],
                                hints=["regenerate it with `frt lock`"])
        packages = {}
        for repo, t in r.get(data, "packages", dict, "").items():
            p = f'packages."{repo}"'
            names.check("repo", repo, p, LockfileError, file=file)  # names are checked where they are read
            r.only(t, {"source", "path", "version", "revision", "trust", "publisher-trusted", "variants"}, p)
            source = r.get(t, "source", str, p)
            if source not in ("hub", "path"):
                raise r.fail(p + ".source", f"expected hub or path, got {source!r}")
            revision = r.get(t, "revision", str, p)
            if not (_HEX40.match(revision) if source == "hub" else SHA256_DIGEST.match(revision)):
                raise r.fail(p + ".revision", f"not a {'40-hex commit' if source == 'hub' else 'sha256: content digest'}: {revision!r}")
            trust = r.get(t, "trust", str, p)
            if trust not in TRUST_DECISIONS:
                raise r.fail(p + ".trust", f"expected one of {', '.join(TRUST_DECISIONS)}, got {trust!r}")
            publisher_trusted = r.get(t, "publisher-trusted", bool, p, required=False)
            if publisher_trusted is not None and source != "hub":
                raise r.fail(p + ".publisher-trusted", "is a Hub publisher fact; a path package has none")
            variants = {}
            for vname, vt in r.get(t, "variants", dict, p).items():
                vp = f"{p}.variants.{vname}"
                names.check("variant", vname, vp, LockfileError, file=file)
                r.only(vt, {"backend", "archs", "metadata-sha256", "module-id", "module-name",
                            "digest-algorithm", "files", "digest-source", "kernels-minver", "python-depends",
                            "kernel-depends", "signature"}, vp)
                files = r.get(vt, "files", dict, vp)
                for rel in files:
                    why = names.problem("path", rel)
                    if why or rel == "metadata.json":
                        raise r.fail(f"{vp}.files.{rel!r}", f"not a file path inside the variant: {why or 'reserved'}")
                if not _MODULE_ID.fullmatch(r.get(vt, "module-id", str, vp)):
                    raise r.fail(vp + ".module-id", "not a Python identifier")
                variants[vname] = LockedVariant(
                    vname, r.get(vt, "backend", str, vp), tuple(r.str_list(vt, "archs", vp)),
                    r.get(vt, "metadata-sha256", str, vp), r.get(vt, "module-id", str, vp),
                    r.get(vt, "module-name", str, vp), r.get(vt, "digest-algorithm", str, vp),
                    {k: str(v) for k, v in files.items()}, **_requirements(r, vt, vp),
                    signature=_signature(r, vt, vp))
            packages[repo] = LockedPackage(repo, source, r.get(t, "version", int, p), revision, trust, variants,
                                           _rel_path(r, t, p, file), publisher_trusted)
        receipts = read_receipts(r, texts.get("receipts", data.get("receipts", [])), verify)
        for rname, rt in r.get(data, "routes", dict, "", required=False, default={}).items():
            rp = f"routes.{rname}"  # what verify compares with the manifest: each field of its type
            r.only(rt, {"route-digest", "precision", "assembly", "packages"}, rp)
            for k in ("route-digest", "precision", "assembly"):
                r.get(rt, k, str, rp)
            r.str_list(rt, "packages", rp)
        rejected = r.get(data, "rejected-receipts", list, "", required=False, default=[])
        for i, rj in enumerate(rejected):
            rp = f"rejected-receipts[{i}]"
            if not isinstance(rj, dict):
                raise r.fail(rp, f"expected a table, got {type(rj).__name__}")
            for k in ("digest", "file", "reason"):
                r.get(rj, k, str, rp)
            for k in ("route", "phase", "device-class"):
                r.get(rj, k, str, rp, required=False)
        index = read_index(r, texts.get("index", data.get("index", [])), manifest, receipts, index_refs)
        nearest = _read_nearest(r, data)
        receipt_keys, signatures = _read_signing(r, data)
        release = None
        if "release" in data:
            from .lock_release import read_table  # noqa: PLC0415

            release = read_table(r, data)
        lf = cls(model=model, manifest_file=manifest_file, manifest=manifest, packages=packages,
                 receipts=receipts, rejected=list(rejected), index=index, lock_digest=stated, _doc=data, _texts=texts,
                 receipt_keys=receipt_keys, signatures=signatures, nearest=nearest, release=release)
        return lf

    def read_document(self) -> dict:
        """The document as read (every text as ``str``): what ``frt verify`` compares."""
        return {**self._doc, **{k: str(v) for k, v in self._texts.items()}}

    # -- checks -------------------------------------------------------------
    def receipt_problems(self) -> list[tuple[str, str]]:
        """(where, why) for every embedded receipt that does not parse, does not match its
        digest, or does not fit the embedded manifest and the pins."""
        out, ok = [], []
        for dig in self.receipts:
            try:
                ok.append(self.receipts[dig])
            except LockfileError as exc:
                where = (exc.reasons or [{}])[0].get("path") or dig
                out.append((where, str(exc)))
        for rec in sorted(ok, key=lambda r: r.file):
            for why in rec.problems(self.manifest) + self.pin_problems(rec):
                out.append((rec.file, why))
        return out

    def pin_problems(self, rec: Receipt) -> list[str]:
        out = []
        for seam, it in sorted(rec.cell["impls"].items()):
            pkg = self.packages.get(it["package"])
            if pkg is None:
                out.append(f"cell.impls.{seam}: package {it['package']!r} is not locked")
                continue
            if it["revision"] != pkg.revision:
                out.append(f"cell.impls.{seam}: measured {it['package']} at revision {it['revision']}; the lock pins {pkg.revision}")
            if it["variant"] not in pkg.variants:
                out.append(f"cell.impls.{seam}: variant {it['variant']!r} of {it['package']} is not locked")
        return out


SIGNATURE_KINDS = ("key", "sigstore")


def _read_signing(r: Reader, data: dict) -> tuple[dict, dict]:
    """``receipt-keys`` and ``receipt-signatures`` (docs/reference.md#receipt-signatures), checked by field. Whether they hold
    (keyids, signatures, signers) is ``frt verify``'s to re-derive; reading only takes the shape."""
    keys = {}
    for rel, t in r.get(data, "receipt-keys", dict, "", required=False, default={}).items():
        p = f'receipt-keys."{rel}"'
        names.check("path", rel, p, LockfileError, file=r.file)
        r.only(t, {"keyid", "pem"}, p)
        if not SHA256_DIGEST.match(r.get(t, "keyid", str, p)):
            raise r.fail(p + ".keyid", f"not a sha256: fingerprint: {t['keyid']!r}")
        keys[rel] = {"keyid": t["keyid"], "pem": r.get(t, "pem", str, p)}
    rows = r.json_value(data.get("receipt-signatures", []), "receipt-signatures", list,
                        "a JSON array (string) of signature rows")
    sigs = {}
    for i, row in enumerate(rows):
        p = f"receipt-signatures[{i}]"
        if not isinstance(row, dict):
            raise r.fail(p, f"expected an object, got {type(row).__name__}")
        kind = r.get(row, "kind", str, p)
        if kind not in SIGNATURE_KINDS:
            raise r.fail(p + ".kind", f"expected one of {', '.join(SIGNATURE_KINDS)}, got {kind!r}")
        body = "envelope" if kind == "key" else "bundle"
        r.only(row, {"receipt", "file", "kind", "signer", body} | ({"issuer"} if kind == "sigstore" else set()), p)
        dig = r.get(row, "receipt", str, p)
        if not SHA256_DIGEST.match(dig):
            raise r.fail(p + ".receipt", f"not a receipt digest: {dig!r}")
        if dig in sigs:
            raise r.fail(p + ".receipt", f"{dig} is signed twice")
        r.get(row, "file", str, p)
        r.get(row, "signer", str, p)
        if kind == "sigstore":
            r.get(row, "issuer", str, p)
        r.get(row, body, dict, p)
        sigs[dig] = row
    return keys, sigs


def _requirements(r: Reader, vt: dict, vp: str) -> dict:
    """A locked variant's digest source and what it needs (``LockedVariant``), checked by field."""
    source = r.get(vt, "digest-source", str, vp, required=False, default="metadata")
    if source not in ("metadata", "frt"):
        raise r.fail(vp + ".digest-source", f"expected metadata or frt, got {source!r}")
    deps = []
    for i, d in enumerate(r.get(vt, "kernel-depends", list, vp, required=False, default=[])):
        dp = f"{vp}.kernel-depends[{i}]"
        if not isinstance(d, dict):
            raise r.fail(dp, f"expected a table, got {type(d).__name__}")
        r.only(d, {"repo-id", "version"}, dp)
        deps.append((names.check("repo", r.get(d, "repo-id", str, dp), dp + ".repo-id", LockfileError, file=r.file),
                     r.get(d, "version", int, dp)))
    return {"digest_source": source, "kernels_minver": r.get(vt, "kernels-minver", str, vp, required=False),
            "python_depends": tuple(r.str_list(vt, "python-depends", vp, required=False, default=[])),
            "kernel_depends": tuple(deps)}


_SIGNATURE_KEYS = ("bundle-sha256", "identity", "issuer", "repository", "build-signer", "policy")


def _signature(r: Reader, vt: dict, vp: str) -> dict | None:
    """A locked variant's publisher ``signature`` table (``frt_dist.provenance.publisher.signature_record``)."""
    st = r.get(vt, "signature", dict, vp, required=False)
    if st is None:
        return None
    sp = vp + ".signature"
    r.only(st, set(_SIGNATURE_KEYS), sp)
    out = {}
    for k in _SIGNATURE_KEYS:
        v = r.get(st, k, str, sp, required=k not in ("repository", "build-signer"))
        if v is not None:
            out[k] = v
    if not SHA256_DIGEST.match(out["bundle-sha256"]):
        raise r.fail(sp + ".bundle-sha256", f"not a sha256: digest: {out['bundle-sha256']!r}")
    return out


def _rel_path(r: Reader, t: dict, p: str, file: str) -> str | None:
    """A path package's ``path``: relative to the project root and inside it (docs/reference.md#names)."""
    path = r.get(t, "path", str, p, required=False)
    return None if path is None else names.check("path", path, p + ".path", LockfileError, file=file)


def _read_nearest(r: Reader, data: dict) -> dict | None:
    """The ``nearest`` summary as recorded (``nearest_rows``), checked by field; ``None`` when
    the lock has none. Whether it is right is ``frt verify``'s to re-derive: it only ever
    words a refusal reason."""
    if "nearest" not in data:
        return None
    rows = r.json_value(data["nearest"], "nearest", list, "a JSON array (string) of groups")
    out: dict[tuple, list] = {}
    for i, row in enumerate(rows):
        p = f"nearest[{i}]"
        if not isinstance(row, dict):
            raise r.fail(p, f"expected an object, got {type(row).__name__}")
        r.only(row, {"route", "phase", "precision", "backend", "nearest"}, p)
        g = tuple(r.get(row, k, str, p) for k in ("route", "phase", "precision", "backend"))
        near = r.get(row, "nearest", list, p)
        if not (1 <= len(near) <= 2 and all(isinstance(x, list) and len(x) == 2 and all(isinstance(y, str) for y in x)
                                            for x in near)):
            raise r.fail(p + ".nearest", "expected one or two [device class, arch] pairs")
        if g in out:
            raise r.fail(p, f"group {', '.join(g)} is recorded twice")
        out[g] = sorted(tuple(x) for x in near)
    return out


_WRITER = ("manifest_text", "index_text", "receipts_text", "nearest_rows", "nearest_text", "signatures_text",
           "render", "write_atomic", "same_bytes")


def __getattr__(name: str):
    """The writer's names (``lock_writer``), importable from here as before, without importing
    the writer where a lock is only read."""
    if name in _WRITER:
        from . import lock_writer  # noqa: PLC0415

        return getattr(lock_writer, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
