"""Lockfiles: ``lockfiles/<model>.lock``, written only by ``frt lock`` (SPEC §3, §8.12).

TOML, strict, deterministic. The lock embeds the manifest it was made from, so
serving needs nothing but the lockfile (and the package bytes it pins). The
``lock-digest`` covers everything else; a reader that finds it wrong refuses
the lockfile before any decision. It is an unkeyed sha256: it detects damage,
not an author (anyone who edits the file can recompute it). Serving trusts a
lock whose digest holds; ``frt verify`` (``frt_dist.lock.verify``) re-derives what
``frt lock`` derived and names every difference.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path

from ..base.record import dataclass, field
from .schema import JSONInvalid, Reader, json_loads, open_regular, parse_toml, read_bytes
from ..base import names
from ..base.canonical import digest
from ..errors import LockfileError
from .manifest import Manifest
from .receipt import STATES, CellKey, Receipt

__all__ = ["Lockfile", "LockedPackage", "LockedVariant", "IndexEntry", "Candidate", "write_atomic", "same_bytes", "render",
           "embedded_receipt_rows", "TRUST_DECISIONS"]

SCHEMA = "frt.lock/1.1"  # 1.1: the `nearest` summary (SPEC §8.12)
SCHEMA_RELEASE = "frt.lock/1.2"  # 1.2: the `[release]` table, written only by a lock that consumes a Hub release
SCHEMA_FAMILY, SCHEMA_MAJOR = "frt.lock", 1
_HEX40 = re.compile(r"^[0-9a-f]{40}$")
_MODULE_ID = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SHA = re.compile(r"^sha256:[0-9a-f]{64}$")
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
    # the publisher's signature over metadata.json (metadata.json.sigstore, SPEC §27), as `frt lock`
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
        """The hub-cache snapshot directory name (SPEC §8.9 for path packages)."""
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


@dataclass(frozen=True)
class Candidate:
    """One ranked route for a cell of the route index, with the receipt it rests on."""

    route: str
    state: str
    receipt: str
    speedup: float | None

    def to_toml(self) -> dict:
        d = {"route": self.route, "state": self.state, "receipt": self.receipt}
        if self.speedup is not None:
            d["speedup"] = self.speedup
        return d


@dataclass(frozen=True)
class IndexEntry:
    """A cell of the route index and its ranked candidates."""

    key: CellKey
    candidates: tuple[Candidate, ...]  # ranked: [0] is the winner, the rest the runner-ups


class _Cut:
    """A text as it lies in a buffer, ``buf[start:end]`` (UTF-8): the index and the receipts of
    a lockfile read from a file (``_read_fast`` cuts them out without decoding them), or a text
    given as ``str``, encoded once. Searched as bytes; decoded where a part is used, or whole by
    ``str()`` (``frt verify``, iterating every entry)."""

    __slots__ = ("buf", "start", "end")

    def __init__(self, buf: bytes, start: int = 0, end: int | None = None):
        self.buf, self.start, self.end = buf, start, len(buf) if end is None else end

    @classmethod
    def of(cls, value) -> "_Cut | None":
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            try:
                return cls(value.encode("utf-8"))
            except UnicodeEncodeError:  # (a lone surrogate: not text; the JSON reader names it)
                return None
        return None

    def __str__(self) -> str:
        return str(memoryview(self.buf)[self.start:self.end], "utf-8")

    def startswith(self, prefix: bytes) -> bool:
        return self.buf.startswith(prefix, self.start, self.end)

    def endswith(self, suffix: bytes) -> bool:
        return self.buf.endswith(suffix, self.start, self.end)

    def line_at(self, at: int) -> bytes:
        """The line that starts after the newline at ``at``, without a trailing comma (its number
        among the array's items is ``place(at)``, counted only when a message needs it)."""
        eol = self.buf.find(b"\n", at + 1, self.end)
        line = self.buf[at + 1:eol if eol >= 0 else self.end]
        return line[:-1] if line.endswith(b",") else line

    def place(self, at: int) -> int:
        """The number of the line after the newline at ``at`` among the array's items (0: the first)."""
        return self.buf.count(b"\n", self.start, at)

    def __eq__(self, other) -> bool:  # (a document compared as values compares the texts)
        return str(self) == (str(other) if isinstance(other, _Cut) else other)

    __hash__ = None


class _LazyReceipts(Mapping):
    """The embedded receipts, parsed on first use.

    The lock-digest already covers every embedded byte, so reading a lockfile
    (what serving does) need not parse and re-digest every receipt: a receipt is
    parsed, shape-checked and checked against its own recorded digest when it is
    first looked at (the resolver looks only at the candidates it considers;
    ``frt verify`` looks at all of them).
    """

    def __init__(self, file: str, raw: dict[str, tuple], verify: bool):
        # digest -> (path, file label, body, kind): kind "line" is one line of the JSON array frt lock
        # writes (parsed on use), "text" a [[receipts]] table's json string, "object" a parsed receipt
        self._file, self._raw, self._verify = file, raw, verify
        self._parsed: dict[str, Receipt] = {}

    def __getitem__(self, digest_: str) -> Receipt:
        rec = self._parsed.get(digest_)
        if rec is None:
            rec = self._parsed[digest_] = self._parse(digest_, *self._raw[digest_])
        return rec

    def _parse(self, digest_: str, p: str, label, body, kind: str) -> Receipt:
        from ..errors import ReceiptInvalid  # noqa: PLC0415

        try:
            if kind == "line":
                label, body = self._line(p, digest_, body)
            rec = Receipt.parse(json_loads(body) if kind == "text" else body, file=label)
        except JSONInvalid as exc:  # (not JSON, nested too deeply, a lone surrogate, NaN...: _schema.json_loads)
            raise LockfileError(f"{self._file}: {p}: not valid JSON: {exc}", exit_code=1,
                                reasons=[{"kind": "receipt", "path": p, "expected": "JSON", "computed": str(exc)}]) from None
        except ReceiptInvalid as exc:
            raise LockfileError(f"{self._file}: {p}: {exc}", exit_code=1,
                                reasons=[{"kind": "receipt", "path": p, "expected": "a valid receipt",
                                          "computed": str(exc)}]) from None
        if self._verify and rec.digest != digest_:
            raise LockfileError(f"{self._file}: {p}.digest does not match the embedded receipt "
                                f"(expected {digest_}, computed {rec.digest})", exit_code=1,
                                reasons=[{"kind": "receipt", "path": f"{p}.digest", "expected": digest_,
                                          "computed": rec.digest}],
                                hints=["regenerate it with `frt lock`"])
        return rec

    def _line(self, p: str, digest_: str, line: str) -> tuple[str, dict]:
        """(file label, receipt object) of one line of the receipts array, checked like a table."""
        obj = json_loads(line)
        r = Reader(self._file, LockfileError)
        if not isinstance(obj, dict):
            raise r.fail(p, f"expected an object, got {type(obj).__name__}")
        r.only(obj, {"digest", "file", "route", "state", "receipt"}, p)
        if r.get(obj, "digest", str, p) != digest_:  # the line's head was read without parsing it
            raise r.fail(p + ".digest", "does not match the line it heads")
        for k in ("route", "state"):
            r.get(obj, k, str, p)
        return r.get(obj, "file", str, p), r.get(obj, "receipt", dict, p)

    def __contains__(self, digest_) -> bool:
        return digest_ in self._raw

    def __iter__(self):
        return iter(self._raw)

    def __len__(self) -> int:
        return len(self._raw)


class _FoundReceipts(_LazyReceipts):
    """The receipts text ``receipts_text`` writes (``[``, one receipt per line headed by
    ``{"digest": "sha256:<hex>", ``, ``]``), looked up by searching for the head: a receipt's
    line is found, parsed and checked (as ``_LazyReceipts`` does) only when it is used, so
    reading a lock and resolving with it costs a few searches, not a pass per receipt.

    A line can only start after a newline, and JSON holds no raw newline, so a head found is a
    line's head. The same receipt embedded twice is refused when it is looked up (the search
    goes on past the first) and when every receipt is listed; listing (``frt verify``, the
    matrix, ``len``) reads every line's head, as reading the text whole does."""

    def __init__(self, file: str, text: _Cut, verify: bool):
        super().__init__(file, {}, verify)
        self._text = text
        self._at: dict[str, int] = {}  # digest -> the offset of the newline before its line
        self._all: dict[str, tuple] | None = None

    @staticmethod
    def layout(text: _Cut) -> bool:
        return text.startswith(b'[\n{"digest": "sha256:') and text.endswith(b"}\n]\n")

    def _find(self, digest_) -> int:
        at = self._at.get(digest_)
        if at is None:
            if not (isinstance(digest_, str) and _SHA.match(digest_)):
                return -1
            t = self._text
            head = b'\n{"digest": "' + digest_.encode("ascii") + b'", '
            at = t.buf.find(head, t.start, t.end)
            if at >= 0:
                again = t.buf.find(head, at + 1, t.end)
                if again >= 0:
                    raise Reader(self._file, LockfileError).fail(
                        f"receipts[{t.place(again)}].digest", f"{digest_} is embedded twice")
                self._at[digest_] = at
        return at

    def __getitem__(self, digest_: str) -> Receipt:
        rec = self._parsed.get(digest_)
        if rec is None and self._all is not None:  # listed: its line is known (no search)
            i, start, end = self._all[digest_]
            rec = self._parsed[digest_] = self._parse(digest_, f"receipts[{i}]", None, self._all_text[start:end], "line")
        if rec is None:
            at = self._find(digest_)
            if at < 0:
                raise KeyError(digest_)
            line = self._text.line_at(at)
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError as exc:  # (the lock-digest was made over other bytes: an author's file)
                raise Reader(self._file, LockfileError).fail(f"receipts[{self._text.place(at)}]",
                                                             f"not UTF-8: {exc}") from None
            try:
                rec = self._parse(digest_, "receipts[?]", None, text, "line")
            except LockfileError:  # name the line by its place, counted only now
                rec = self._parse(digest_, f"receipts[{self._text.place(at)}]", None, text, "line")
            self._parsed[digest_] = rec
        return rec

    def __contains__(self, digest_) -> bool:
        if self._all is not None:
            return digest_ in self._all
        return self._find(digest_) >= 0

    def _every(self) -> dict[str, tuple]:
        """digest -> (its place, start, end in the decoded text) of every line, read once:
        after it, a lookup is a dict lookup (listing every cell checks every candidate's
        receipt: one search each would read the text once per cell)."""
        if self._all is None:
            text = str(self._text)
            spans = _receipt_spans(text)
            if spans is None:
                raise Reader(self._file, LockfileError).fail("receipts", "not the layout frt lock writes: "
                                                             "one receipt per line, each headed by its digest")
            out: dict[str, tuple] = {}
            for i, (dig, start, end) in enumerate(spans):
                if dig in out:
                    raise Reader(self._file, LockfileError).fail(f"receipts[{i}].digest", f"{dig} is embedded twice")
                out[dig] = (i, start, end)
            self._all, self._all_text = out, text
        return self._all

    def __iter__(self):
        return iter(self._every())

    def __len__(self) -> int:
        return len(self._every())


@dataclass
class Lockfile:
    """A lockfile: the embedded manifest, the package pins, the receipts and the route index."""

    model: str
    manifest_file: str
    manifest: Manifest
    packages: dict[str, LockedPackage]
    receipts: Mapping[str, Receipt]  # digest -> receipt (lazily parsed when read from a file)
    rejected: list[dict]
    index: Mapping[CellKey, IndexEntry]  # a dict; read from a file, parsed cell by cell on use
    lock_digest: str = ""
    path: str | None = None
    _doc: dict = field(default_factory=dict, repr=False)
    # derived, read-only facts the resolver computes once per lockfile (indexes, decisions)
    memo: dict = field(default_factory=dict, repr=False, compare=False)
    # under a [trust.receipts] policy (SPEC §26): the policy's public keys as pinned at lock
    # (project-relative path -> {"keyid", "pem"}), and each accepted covered receipt's signature
    # (receipt digest -> {"receipt", "file", "kind", "signer"[, "issuer"], "envelope" | "bundle"});
    # both empty, and absent from the file, without a policy
    receipt_keys: dict[str, dict] = field(default_factory=dict)
    signatures: dict[str, dict] = field(default_factory=dict)
    # read from a file: the `nearest` summary as recorded, (route, phase, precision, backend) ->
    # the one or two smallest (device class, arch) of its cells (``nearest_rows``); None when the
    # lock has none (an older frt wrote it, or the lock was built in memory)
    nearest: dict | None = field(default=None, repr=False, compare=False)
    # the Hub release the receipts come from (frt_dist.release.consume): {"repo", "version", "commit", "files"[, "cells"]};
    # None (and no [release] table) when the manifest names none
    release: dict | None = None

    # -- building the document ---------------------------------------------
    def document(self) -> dict:
        """The lockfile as a TOML-ready dict, without ``lock-digest``."""
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
            from ..release.record import document_table  # noqa: PLC0415

            doc["schema"] = SCHEMA_RELEASE
            doc["release"] = document_table(self)
        return doc

    def render(self) -> bytes:
        doc = self.document()
        self.lock_digest = digest(doc)
        return render(doc, self.lock_digest)

    # -- reading ------------------------------------------------------------
    @classmethod
    def of(cls, lock) -> "Lockfile":
        """``lock`` itself, or the lockfile read (and verified) from a path: what every
        API taking ``lock`` accepts."""
        if isinstance(lock, cls):
            return lock
        if isinstance(lock, (str, os.PathLike)):
            return cls.read(lock)
        raise TypeError(f"lock must be a path or a frt_dist.Lockfile, got {type(lock).__name__}")

    @classmethod
    def read(cls, path: str | os.PathLike, *, verify: bool = True, label: str | None = None,
             index_refs: bool = True) -> "Lockfile":
        label = label or str(path)
        raw = read_bytes(Path(path), LockfileError, label)
        fast = _read_fast(raw)  # frt's own layout: the large JSON texts not run through the TOML reader
        data, computed = fast if fast is not None else (parse_toml(raw, LockfileError, label), None)
        lf = cls.from_document(data, file=label, verify=verify, index_refs=index_refs, _computed_digest=computed)
        lf.path = str(path)
        return lf

    @classmethod
    def from_document(cls, data: dict, *, file: str, verify: bool = True, index_refs: bool = True,
                      _computed_digest: str | None = None) -> "Lockfile":
        """The lockfile in ``data`` (a parsed TOML document). With ``verify`` the lock-digest and
        the manifest digest must hold. With ``index_refs`` (the default) an index candidate that
        names a receipt the lock does not embed is refused; ``frt verify`` reads without it and
        reports the candidate as an ``index`` problem with everything else it re-derives."""
        r = Reader(file, LockfileError)
        # before the digest: canonical JSON has no such type (a text cut out of the file is text)
        r.no_datetimes({k: v for k, v in data.items() if not isinstance(v, _Cut)})
        r.only(data, {"schema", "lock-digest", "model", "manifest-file", "manifest-digest", "manifest",
                      "packages", "routes", "receipts", "rejected-receipts", "index", "nearest", "receipt-keys",
                      "receipt-signatures", "release"}, "")
        r.schema(data, SCHEMA_FAMILY, SCHEMA_MAJOR)
        stated = r.get(data, "lock-digest", str, "")
        body = {k: v for k, v in data.items() if k != "lock-digest"}
        computed = _computed_digest or _lock_digest(body)  # (`read` may have hashed it while reading)
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
            if not (_HEX40.match(revision) if source == "hub" else _SHA.match(revision)):
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
        raw_receipts: dict[str, tuple] = {}
        embedded = data.get("receipts", [])
        text = _Cut.of(embedded)
        found = text is not None and _FoundReceipts.layout(text)
        if found:  # the layout frt lock writes: a receipt's line is found and parsed when first used
            embedded = []
        elif isinstance(embedded, _Cut):
            embedded = str(embedded)
        embedded = r.json_value(embedded, "receipts", list, "a JSON array (string) or an array of tables")
        for i, rt in enumerate(embedded):
            p = f"receipts[{i}]"
            if not isinstance(rt, dict):
                raise r.fail(p, f"expected an object, got {type(rt).__name__}")
            if "json" in rt:  # [[receipts]] tables: the receipt as a JSON string
                r.only(rt, {"digest", "file", "route", "state", "json"}, p)
                body, kind = r.get(rt, "json", str, p), "text"
            else:
                r.only(rt, {"digest", "file", "route", "state", "receipt"}, p)
                body, kind = r.get(rt, "receipt", dict, p), "object"
            dig = r.get(rt, "digest", str, p)
            raw_receipts[dig] = (p, r.get(rt, "file", str, p), body, kind)
        receipts = _FoundReceipts(file, text, verify) if found else _LazyReceipts(file, raw_receipts, verify)
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
        index = _read_index(r, data.get("index", []), manifest, receipts, index_refs)
        nearest = _read_nearest(r, data)
        receipt_keys, signatures = _read_signing(r, data)
        release = None
        if "release" in data:
            from ..release.record import read_table  # noqa: PLC0415

            release = read_table(r, data)
        lf = cls(model=model, manifest_file=manifest_file, manifest=manifest, packages=packages,
                 receipts=receipts, rejected=list(rejected), index=index, lock_digest=stated, _doc=data,
                 receipt_keys=receipt_keys, signatures=signatures, nearest=nearest, release=release)
        return lf

    def read_document(self) -> dict:
        """The document as read (every text as ``str``): what ``frt verify`` compares."""
        return {k: str(v) if isinstance(v, _Cut) else v for k, v in self._doc.items()}

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



# ---------------------------------------------------------------------------
# reading fast: the lock-digest in one pass, the route index parsed cell by cell

_CHUNK = 1 << 16  # characters (bytes) of a large text escaped and hashed at a time (cache-sized: fastest)
# what `_read_fast` leaves to the full TOML reader in a literal string: every control character
# (U+0000-U+001F, U+007F) but the line feed, so the tab (allowed) and CR (CRLF) too
_NOT_IN_LITERAL = bytes(c for c in range(0x20) if c != 0x0A) + b"\x7f"
_LITERAL_KEYS = ("index", "receipts")


def _read_fast(raw: bytes) -> tuple[dict, str] | None:
    """(document, its lock-digest computed) of a lockfile in the layout ``render`` writes, with
    the index and the receipts (most of a large lock's bytes) not run through the TOML reader:
    ``None`` for anything else, and the caller reads the file whole with ``parse_toml``.

    Each of those is a top-level multi-line literal string (``key = '''`` + newline ...
    ``'''``), whose text TOML takes as it stands. Its text is cut out and the rest of the file,
    with ``key = '<random token>'`` in its place, is read by the TOML reader; the result holds
    exactly that token at that top-level key, or the cut was not that key's value (text inside
    another string, a table's key) and the file is read whole. What the TOML reader would check
    in the text itself is checked here (UTF-8: one ``isascii`` pass over the file, else a
    decode) and while the digest hashes it (``_lock_digest``: no control character). So the
    document is the one ``parse_toml`` returns, but for the two texts, which it holds as
    ``_Cut``s (the bytes where they lie, decoded where used), and the digest is
    ``canonical.digest`` of it.

    The file's bytes are searched and decoded piece by piece where they lie (``memoryview``
    slices: the bytes are not copied, the whole text is never one string): every delimiter
    searched for is ASCII, which UTF-8 never uses inside a multi-byte character, so a byte
    offset found is the same cut as the character offset in the decoded text, the pieces
    decode exactly when the whole does, and the cut texts' canonical JSON is computed from
    their bytes (``_escape_bytes``)."""
    cuts = []
    for key in _LITERAL_KEYS:
        opener = b"\n" + key.encode() + b" = '''\n"
        at = raw.find(opener)
        if at < 0:
            continue
        start = at + len(opener)
        end = raw.find(b"'''", start)  # (a longer quote run there leaves a quote after the token: not TOML)
        if end < 0:
            return None
        cuts.append((at + 1 + len(key) + 3, start, end, key))
    if not cuts:
        return None
    cuts.sort()
    token = "frt-cut-" + os.urandom(16).hex()
    view = memoryview(raw)
    rest, pos, texts = [], 0, {}
    ascii_ = raw.isascii()  # (one fast pass: then every piece is UTF-8 without decoding it)
    try:
        for delim, start, end, key in cuts:  # (cuts that overlap leave two tokens side by side: not TOML)
            rest += (str(view[pos:max(pos, delim)], "utf-8"), f"'{token}'")
            if not ascii_:
                str(view[start:end], "utf-8")  # UTF-8, as the TOML reader requires (the text is not kept)
            texts[key] = _Cut(raw, start, end)
            pos = end + 3
        rest.append(str(view[pos:], "utf-8"))
    except UnicodeDecodeError:
        return None
    import rtoml  # noqa: PLC0415

    try:
        doc = rtoml.loads("".join(rest))
    except ValueError:
        return None
    for _, start, end, key in cuts:
        if doc.get(key) != token:
            return None
        doc[key] = texts[key]
    try:
        digest_ = _lock_digest({k: v for k, v in doc.items() if k != "lock-digest"}, literal={c[3] for c in cuts},
                               _raw={c[3]: view[c[1]:c[2]] for c in cuts})
    except (TypeError, ValueError, RecursionError, UnicodeEncodeError):
        return None  # a value canonical JSON cannot hold (a TOML date...): the full path names it
    return None if digest_ is None else (doc, digest_)


def _escape_bytes(b: bytes) -> bytes:
    """The UTF-8 of ``json.dumps(text, ensure_ascii=False)[1:-1]`` for the text whose UTF-8 is
    ``b``, when that text holds no control character but the line feed (which the caller has
    checked): canonical JSON escapes only the quote, the backslash and the control characters,
    and leaves every other character as it is; all three are ASCII bytes, which never occur
    inside a multi-byte UTF-8 character, so replacing them byte for byte is escaping the text
    (and escaping a slice of the bytes, even one that splits a character, is escaping that part).
    ``tests/test_lock_large.py`` holds it to ``json.dumps``."""
    return b.replace(b"\\", b"\\\\").replace(b'"', b'\\"').replace(b"\n", b"\\n")


def _lock_digest(body: dict, literal=(), _raw=None) -> str | None:
    """``canonical.digest(body)``, byte for byte, without building the canonical JSON of the
    whole lockfile as one string: each top-level value is written and hashed in turn, and
    the large JSON texts (index, receipts) are escaped and hashed a few MB at a time.

    Canonical JSON is ``json.dumps(sort_keys=True, separators=(",", ":"),
    ensure_ascii=False)``: ``{`` then ``"key":value`` per key in sorted order, joined by
    ``,``, then ``}``; a string is escaped character by character, so escaping a text in
    slices and joining them (without the quotes each slice gets) is escaping it whole.
    Anything canonical JSON refuses (a lone surrogate, a value nested too deeply) raises here
    as it would there.

    ``literal``: keys whose text ``_read_fast`` cut out of the file unparsed; on the same pass
    each is checked for what a TOML literal string may not hold (a control character; a tab,
    which it may, is sent to the full reader too), and ``None`` is the answer when one does.
    ``_raw``: for such a key, the text's UTF-8 bytes as they lie in the file (a buffer): those
    are checked and escaped as bytes (``_escape_bytes``), not re-encoded from the text."""
    import hashlib  # noqa: PLC0415
    from json.encoder import encode_basestring  # noqa: PLC0415 - what json.dumps(str, ensure_ascii=False) is

    from ..base.canonical import canonical_json  # noqa: PLC0415

    if not all(isinstance(k, str) for k in body):  # not a TOML document: leave it to the one definition
        return digest(body)
    _raw = _raw or {}
    h = hashlib.sha256()
    update = h.update
    update(b"{")
    for n, key in enumerate(sorted(body)):
        value = body[key]
        update(((b"," if n else b"") + encode_basestring(key).encode("utf-8") + b":"))
        checked = key in literal
        if checked and key in _raw:
            buf = _raw[key]
            update(b'"')
            for i in range(0, len(buf), _CHUNK):
                part = bytes(buf[i:i + _CHUNK])  # (a cache-sized copy: each pass below stays in cache)
                if len(part.translate(None, _NOT_IN_LITERAL)) != len(part):
                    return None
                update(_escape_bytes(part))
            update(b'"')
        elif isinstance(value, str) and (checked or len(value) > _CHUNK):
            update(b'"')
            for i in range(0, len(value), _CHUNK):
                part = value[i:i + _CHUNK]
                if checked:
                    raw = part.encode("utf-8")
                    if len(raw.translate(None, _NOT_IN_LITERAL)) != len(raw):
                        return None
                update(memoryview(encode_basestring(part).encode("utf-8"))[1:-1])
            update(b'"')
        else:
            update(canonical_json(value))
    update(b"}")
    return "sha256:" + h.hexdigest()


def _index_entry(r: Reader, it, p: str, manifest: Manifest, receipts, index_refs: bool) -> IndexEntry:
    """One cell of the route index, checked field by field (``p``: its path, ``index[i]``)."""
    if not isinstance(it, dict):
        raise r.fail(p, f"expected an object, got {type(it).__name__}")
    r.only(it, {"phase", "precision", "backend", "arch", "device-class", "route", "state", "receipt", "candidates"}, p)
    key = CellKey(*(r.get(it, k, str, p) for k in ("phase", "precision", "backend", "arch", "device-class")))
    cands = []
    for j, c in enumerate(r.get(it, "candidates", list, p)):
        cp = f"{p}.candidates[{j}]"
        if not isinstance(c, dict):
            raise r.fail(cp, f"expected an object, got {type(c).__name__}")
        sp = r.number(c, "speedup", cp, required=False)
        route = r.get(c, "route", str, cp)
        if r.get(c, "state", str, cp) not in STATES:
            raise r.fail(cp + ".state", f"expected one of {', '.join(STATES)}, got {c['state']!r}")
        if route not in manifest.routes:
            raise r.fail(cp + ".route", f"{route!r} is not a route of the embedded manifest")
        cands.append(Candidate(route, r.get(c, "state", str, cp), r.get(c, "receipt", str, cp), sp))
        if index_refs and cands[-1].receipt not in receipts:
            raise r.fail(cp + ".receipt", "names a receipt the lockfile does not embed")
    if not cands:
        raise r.fail(p + ".candidates", "an index entry needs at least one candidate")
    return IndexEntry(key, tuple(cands))


def _read_index(r: Reader, value, manifest: Manifest, receipts, index_refs: bool):
    """The route index: looked up cell by cell when it is the text ``index_text`` writes (see
    ``_FoundIndex``); else every entry now, as a dict."""
    text = _Cut.of(value)
    if text is not None and _FoundIndex.layout(text):
        return _FoundIndex(r, text, manifest, receipts, index_refs)
    if isinstance(value, _Cut):
        value = str(value)
    return _whole_index(r, value, manifest, receipts, index_refs)


def _whole_index(r: Reader, value, manifest: Manifest, receipts, index_refs: bool) -> dict:
    entries = r.json_value(value, "index", list, "a JSON array (string) or an array of tables")
    if index_refs and isinstance(receipts, _FoundReceipts) and len(entries) > 8:
        receipts._every()  # every candidate's receipt is checked: list them once, not one search per cell
    index = {}
    for i, it in enumerate(entries):
        e = _index_entry(r, it, f"index[{i}]", manifest, receipts, index_refs)
        index[e.key] = e
    return index


def _js(s: str) -> bytes:
    return json.dumps(s, ensure_ascii=False).encode("utf-8")


# the candidates' routes in one line of the index (a candidate object starts `{"route": `; the cell's
# own `"route": ` follows a comma)
_LINE_ROUTES = re.compile(rb'\{"route": "([^"\\\x00-\x1f]*)", ')
_LINE_HEAD = re.compile(rb'\{"phase": "([^"]*)", "precision": "([^"]*)", "backend": "([^"]*)", "arch": "([^"]*)", '
                        rb'"device-class": "([^"]*)", "route": ')


class _FoundIndex(Mapping):
    """The route index of a lockfile, looked up one cell at a time by searching its text.

    ``index_text`` writes ``[``, then one JSON object per line whose first five keys are the
    cell's (``{"phase": "...", "precision": "...", "backend": "...", "arch": "...",
    "device-class": "...", "route": ``...), then ``]``. A cell is found by searching for that
    head (the last line with it, as a dict of every entry keeps the last), and its line is
    decoded and checked (``_index_entry``, the same checks and messages as reading every entry)
    when the cell is first looked up: resolving one cell builds no object for the others and
    reads no other line. ``layout`` takes the text only when that search finds what reading
    the array whole finds: it is one JSON array whose every line starts with ``{"phase": ``
    (lines joined by ``,`` and a newline, none after the last), and it holds no backslash, so
    no string in it is escaped and a value's JSON is its text. A line whose keys are in
    another order, or any other layout an author may write, is ``frt verify``'s to report (it
    compares the text with what ``frt lock`` writes). Iterating builds every entry (``frt
    verify``, the matrix)."""

    def __init__(self, r: Reader, text: _Cut, manifest: Manifest, receipts, index_refs: bool):
        self._r, self._text, self._args = r, text, (manifest, receipts, index_refs)
        self._built: dict = {}
        self._all: dict | None = None

    @staticmethod
    def layout(text: _Cut) -> bool:
        b, s, e = text.buf, text.start, text.end
        if not (text.startswith(b'[\n{"phase": ') and text.endswith(b"}\n]\n")) or b.find(b"\\", s, e) >= 0:
            return False
        lines = b.count(b'\n{"phase": ', s, e)
        return lines == b.count(b"\n", s, e) - 2 and b.count(b'},\n{"phase": ', s, e) == lines - 1

    def _find(self, key) -> int:
        try:
            phase, precision, backend, arch, dc = key
            head = (b'\n{"phase": ' + _js(phase) + b', "precision": ' + _js(precision) + b', "backend": '
                    + _js(backend) + b', "arch": ' + _js(arch) + b', "device-class": ' + _js(dc) + b', "route": ')
        except (TypeError, ValueError):  # (not a 5-tuple of text: no cell of this index)
            return -1
        t = self._text
        return t.buf.rfind(head, t.start, t.end)

    def __getitem__(self, key) -> IndexEntry:
        e = self._built.get(key)
        if e is None:
            if self._all is not None:
                return self._all[key]
            at = self._find(key)
            if at < 0:
                raise KeyError(key)
            try:
                e = self._entry(key, at, "index[?]")
            except LockfileError:  # name the line by its place, counted only now
                e = self._entry(key, at, f"index[{self._text.place(at)}]")
            self._built[key] = e
        return e

    def _entry(self, key, at: int, p: str) -> IndexEntry:
        line = self._text.line_at(at)
        try:
            obj = json_loads(line)
        except JSONInvalid as exc:
            raise self._r.fail(p, f"not valid JSON: {exc}") from None
        e = _index_entry(self._r, obj, p, *self._args)
        if tuple(e.key) != tuple(key):  # (a key written twice in the line: JSON keeps the last)
            raise self._r.fail(p, "the line does not hold the cell its head names")
        return e

    def __contains__(self, key) -> bool:
        if self._all is not None:
            return key in self._all
        return key in self._built or self._find(key) >= 0

    def cell_routes(self):
        """(cell key as a plain 5-tuple, the routes of its candidates) for every cell, from the
        lines' heads and candidates' routes alone: what the resolver groups for its refusal
        reasons when the lock has no ``nearest`` summary (a ``frt.lock/1`` lock), without building
        every entry. A line whose head is not frt's lists every entry instead."""
        t = self._text
        if self._all is None:
            body = t.buf[t.start:t.end].split(b"\n")[1:-2]
            out = {}
            for line in body:
                m = _LINE_HEAD.match(line)
                if m is None:
                    break
                out[tuple(g.decode("utf-8") for g in m.groups())] = {r.decode("utf-8") for r in _LINE_ROUTES.findall(line)}
            else:
                return iter(out.items())
        return ((tuple(k), {c.route for c in e.candidates}) for k, e in self._every().items())

    def routes_of(self, key) -> set[str] | None:
        """The routes of the cell's candidates, from its line alone (no entry built, no receipt
        looked up: what the resolver's refusal reasons group), or ``None`` without the cell."""
        at = self._find(key)
        if at < 0:
            return None
        line = self._text.line_at(at)
        return {m.decode("utf-8") for m in _LINE_ROUTES.findall(line)}

    def _every(self) -> dict:
        if self._all is None:
            self._all = _whole_index(self._r, str(self._text), *self._args)
        return self._all

    def __iter__(self):
        return iter(self._every())

    def __len__(self) -> int:
        return len(self._every())


def _json(text: str):
    """``_schema.json_loads``: every failure a ``ValueError`` (``JSONInvalid``): not JSON, too deep,
    NaN, an integer too long, a lone surrogate escape (not text: no digest can be made of it)."""
    return json_loads(text)


def embedded_receipt_rows(data: dict) -> list[tuple[str, dict | str]]:
    """Every embedded receipt of a parsed lockfile document as ``(where, row)``: ``row`` is
    ``{"digest", "file", "route", "state", "receipt"}`` (the receipt as an object, whatever
    form the lock holds it in), or the reason the entry cannot be read. What ``frt verify``
    re-checks: nothing here is trusted, not even the digest at the head of a line."""
    embedded = data.get("receipts", [])
    lines = _receipt_lines(embedded) if isinstance(embedded, str) else None
    if lines is not None:
        items = []
        for _, line in lines:
            try:
                items.append(_json(line))
            except ValueError as exc:
                items.append(f"not valid JSON: {exc}")
    elif isinstance(embedded, str):
        try:
            items = _json(embedded)
        except ValueError as exc:
            return [("receipts", f"not valid JSON: {exc}")]
    else:
        items = embedded
    if not isinstance(items, list):
        return [("receipts", f"expected an array, got {type(items).__name__}")]
    out: list[tuple[str, dict | str]] = []
    for i, it in enumerate(items):
        where = f"receipts[{i}]"
        if isinstance(it, str):
            out.append((where, it))
            continue
        if not isinstance(it, dict):
            out.append((where, f"expected an object, got {type(it).__name__}"))
            continue
        row = {k: v for k, v in it.items() if k != "json"}
        if "json" in it:
            try:
                row["receipt"] = _json(it["json"]) if isinstance(it["json"], str) else None
            except ValueError as exc:
                out.append((where, f"json: not valid JSON: {exc}"))
                continue
        extra = sorted(set(row) - {"digest", "file", "route", "state", "receipt"})
        bad = [k for k in ("digest", "file", "route", "state") if not isinstance(row.get(k), str)]
        if extra or bad or not isinstance(row.get("receipt"), dict):
            out.append((where, f"unknown field(s) {', '.join(extra)}" if extra else
                        f"{bad[0]} must be a string" if bad else "the receipt must be an object"))
            continue
        out.append((where, row))
    return out


SIGNATURE_KINDS = ("key", "sigstore")


def _read_signing(r: Reader, data: dict) -> tuple[dict, dict]:
    """``receipt-keys`` and ``receipt-signatures`` (SPEC §26), checked by field. Whether they hold
    (keyids, signatures, signers) is ``frt verify``'s to re-derive; reading only takes the shape."""
    keys = {}
    for rel, t in r.get(data, "receipt-keys", dict, "", required=False, default={}).items():
        p = f'receipt-keys."{rel}"'
        names.check("path", rel, p, LockfileError, file=r.file)
        r.only(t, {"keyid", "pem"}, p)
        if not _SHA.match(r.get(t, "keyid", str, p)):
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
        if not _SHA.match(dig):
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


def signatures_text(rows) -> str:
    """The receipts' signatures: a JSON array, one row per signed receipt (a reviewer sees one
    line change per signature), stored like the receipts."""
    order = ("receipt", "file", "kind", "signer", "issuer", "envelope", "bundle")  # who first, the proof last
    return "[\n" + ",\n".join(json.dumps({k: row[k] for k in order if k in row}, ensure_ascii=False)
                               for row in rows) + "\n]\n"


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
    if not _SHA.match(out["bundle-sha256"]):
        raise r.fail(sp + ".bundle-sha256", f"not a sha256: digest: {out['bundle-sha256']!r}")
    return out


def _rel_path(r: Reader, t: dict, p: str, file: str) -> str | None:
    """A path package's ``path``: relative to the project root and inside it (SPEC §8.2, §21)."""
    path = r.get(t, "path", str, p, required=False)
    return None if path is None else names.check("path", path, p + ".path", LockfileError, file=file)


# ---------------------------------------------------------------------------
# rendering and writing

def manifest_text(raw: dict) -> str:
    """The embedded manifest: its JSON in the manifest file's own order (route and
    seam order mean something to readers), one key or item per line.

    Stored as one TOML multi-line literal string, a reader takes it with one
    string search and ``json.loads`` (a TOML table of the same content costs
    a reader about as much as the rest of the lockfile together); it stays one
    line per value for review and diffs.
    """
    return json.dumps(raw, indent=1, ensure_ascii=False) + "\n"


def index_text(entries: list[dict]) -> str:
    """The route index: a JSON array with one cell per line (a reviewer sees one line
    change per cell that changed). Stored as a TOML multi-line literal string like the
    manifest: a large lock is mostly index, and ``json`` reads it many times faster than
    a TOML reader reads the same cells as ``[[index]]`` tables."""
    return "[\n" + ",\n".join(json.dumps(e, ensure_ascii=False) for e in entries) + "\n]\n"


def receipts_text(receipts) -> str:
    """The embedded receipts: a JSON array, one receipt per line, each the receipt's
    canonical JSON with the digest, file, route and state it is indexed by."""
    lines = []
    for r in receipts:
        head = json.dumps({"digest": r.digest, "file": r.file, "route": r.route, "state": r.state},
                          ensure_ascii=False)
        body = json.dumps(r.data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        lines.append(f'{head[:-1]}, "receipt": {body}}}')
    return "[\n" + ",\n".join(lines) + "\n]\n"


def nearest_rows(entries) -> list[dict]:
    """The ``nearest`` summary of a route index: for each (route, phase, precision, backend) that
    some cell has the route among its candidates, the one or two smallest (device class, arch)
    of those cells, ascending. It is what a refusal reason names ("receipt measured on X"), kept
    so that resolving reads no cell but its own (``routes.resolver._MissIndex``); derived from the
    index alone, so ``frt verify`` re-derives it."""
    low: dict[tuple, list] = {}
    for e in entries:
        k = e.key
        v = [k.device_class, k.arch]
        for route in {c.route for c in e.candidates}:
            two = low.setdefault((route, k.phase, k.precision, k.backend), [])
            two.append(v)
            if len(two) > 2:
                two.sort()
                del two[2:]
    return [{"route": g[0], "phase": g[1], "precision": g[2], "backend": g[3], "nearest": sorted(two)}
            for g, two in sorted(low.items())]


def nearest_text(rows: list[dict]) -> str:
    """The ``nearest`` summary as a JSON array, one group per line (like the index)."""
    return "[\n" + ",\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n]\n"


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


_JSON_TEXT = ("manifest", "index", "nearest", "receipts", "receipt-signatures")
_RECEIPT_LINE = re.compile(r'\{"digest": "(sha256:[0-9a-f]{64})", ')


def _receipt_lines(text: str) -> list[tuple[str, str]] | None:
    """(digest, line) per receipt when ``text`` has exactly the layout ``receipts_text``
    writes (``[``, one object per line headed by its digest, ``]``), else ``None``."""
    lines = text.split("\n")
    if len(lines) < 4 or lines[0] != "[" or lines[-2:] != ["]", ""]:
        return None
    body = lines[1:-2]
    out = []
    for j, line in enumerate(body):
        if j < len(body) - 1:
            if not line.endswith(","):
                return None
            line = line[:-1]
        m = _RECEIPT_LINE.match(line)
        if m is None or not line.endswith("}"):
            return None
        out.append((m.group(1), line))
    return out


_HEX64 = re.compile(r"[0-9a-f]{64}")


def _receipt_spans(text: str) -> list[tuple[str, int, int]] | None:
    """``_receipt_lines`` without cutting the text into lines: (digest, start, end) of each
    receipt line when ``text`` has exactly the layout ``receipts_text`` writes, else ``None``.
    The same checks, line by line, over offsets: a large lock's receipts are most of its bytes,
    and serving reads only the few it resolves with."""
    if not text.startswith("[\n") or not text.endswith("\n]\n") or len(text) < 6:
        return None
    out = []
    find, startswith, hexmatch = text.find, text.startswith, _HEX64.fullmatch
    last = len(text) - 3  # the newline before the closing "]"
    pos = 2
    while True:
        end = find("\n", pos)
        final = end == last
        stop = end if final else end - 1  # the line without its comma
        if not final and text[stop] != ",":
            return None
        # the head `_RECEIPT_LINE` matches: {"digest": "sha256:<64 hex>", ; and the object's close
        if (not startswith('{"digest": "sha256:', pos) or hexmatch(text, pos + 19, pos + 83) is None
                or not startswith('", ', pos + 83) or stop - 1 < pos + 86 or text[stop - 1] != "}"):
            return None
        out.append((text[pos + 12:pos + 83], pos, stop))
        if final:
            return out
        pos = end + 1


def render(doc: dict, lock_digest: str) -> bytes:
    """TOML bytes with ``schema`` first and ``lock-digest`` second (SPEC §8.12).

    The embedded manifest, route index and receipts are JSON, each one TOML
    multi-line literal string among the top-level keys (a reader takes each with
    one string search and ``json``); a text a literal cannot hold (``'''`` or a
    control character) falls back to an escaped basic string. Packages, routes and
    rejected receipts are TOML tables.
    """
    import tomli_w  # noqa: PLC0415

    top = {"schema": doc["schema"], "lock-digest": lock_digest}
    top.update((k, v) for k, v in doc.items() if k != "schema" and not _is_table(v))
    tables = {k: v for k, v in doc.items() if _is_table(v)}
    header = "# Written by `frt lock`. Do not edit: regenerate with `frt lock`.\n"
    parts = [header]
    for k, v in top.items():
        if k in _JSON_TEXT and isinstance(v, str) and _multiline_literal_ok(v):
            parts.append(f"{k} = '''\n{v}'''\n")
        else:
            parts.append(tomli_w.dumps({k: v}))
    if tables:
        parts.append("\n" + tomli_w.dumps(tables))
    return "".join(parts).encode("utf-8")


def _is_table(v) -> bool:
    return isinstance(v, dict) or (isinstance(v, list) and bool(v) and all(isinstance(x, dict) for x in v))


_NOT_MULTILINE_LITERAL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]|'''|'\Z")


def _multiline_literal_ok(s: str) -> bool:
    return _NOT_MULTILINE_LITERAL.search(s) is None


def _umask() -> int:
    """The process umask, read without changing it where the platform allows."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


def same_bytes(path: Path, data: bytes) -> bool:
    """Does the file at ``path`` hold exactly ``data``? False when it is absent. Its type is
    checked before it is read (a FIFO, a device: ``NotRegular``, never opened for a blocking
    read), and only a file of ``len(data)`` bytes is read, at most one byte more: an old file
    of any size costs no more than the new one."""
    try:
        fd = open_regular(path)
    except FileNotFoundError:
        return False
    with open(fd, "rb") as fh:
        if os.fstat(fh.fileno()).st_size != len(data):
            return False
        return fh.read(len(data) + 1) == data


def write_atomic(path: Path, data: bytes) -> bool:
    """Write ``data`` to ``path`` via a temp file in the same folder and ``os.replace``.

    Returns ``False`` (and writes nothing) when the file already holds exactly
    these bytes. The temp file never survives an error or an interrupt. An old file that
    is not a regular file (a FIFO, a device, a socket, a folder) is refused before anything
    is read or written: ``NotRegular``, an ``OSError`` naming it.
    """
    import tempfile  # noqa: PLC0415 - only writers need it (reading a lockfile does not)

    path = Path(path)
    if same_bytes(path, data):
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        # mkstemp makes the file 0600: give the result the old file's mode, or what a plain write would
        try:
            mode = path.stat().st_mode & 0o777
        except FileNotFoundError:
            mode = 0o666 & ~_umask()
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return True
