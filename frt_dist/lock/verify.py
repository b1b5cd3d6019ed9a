"""``frt verify``: check lockfiles (and a mirror) without trusting what they say (docs/reference.md#verification).

The ``lock-digest`` is an unkeyed sha256 over the lock's own content: it catches damage
(a flipped byte, a truncated copy), not an author, since anyone who edits a lockfile can
recompute it. So verify **re-derives** instead of trusting. Offline, from the lockfile's
embedded manifest and receipts (and, where they are at hand, the package sources), it
recomputes everything ``frt lock`` derived and compares it with what the lock records:

- every embedded receipt: its shape (``Receipt.parse``), its digest against its embedded
  text, the route/state its line is filed under, and its validity under the embedded
  manifest and the pins (``locker.receipt_verdict``: the cell rules and every evidence rule
  of ``receipt.EVIDENCE_RULES``, self-contradiction included);
- the route index of every cell (``locker.derive_index``, the ranking ``frt lock`` uses),
  from the receipts that are valid: winner, runner-ups, states and receipt digests;
- every package's trust decision (``locker.derive_trust``) from the manifest and the
  publisher fact recorded at lock time (``publisher-trusted``), and its source, path and
  version against the manifest; a package the manifest does not declare is accepted only
  when a locked variant names it in ``kernel-depends`` (transitively from the manifest's
  packages, at the version asked for, with no cycle: ``locker.depends_of``/``depends_cycle``);
- a path package's revision, version and variant facts from its source in the project,
  and with ``--mirror`` each mirrored variant's facts from its ``metadata.json`` (with the
  file digests frt computes, ``metadata.with_computed_digests``, for a variant whose
  metadata declares none: ``digest-source = "frt"``);
- the routes table (route digests, precision, assembly, packages) from the manifest;
- every name that can reach a path (``frt_dist.base.names``): repo ids, variant names, file
  paths inside variants, the receipt file labels, index cell names;
- and finally, when all of that agrees, that the whole document is what ``frt lock`` would
  write from those inputs (a catch-all for anything not named above).

Publisher signatures (docs/reference.md#publisher-signatures): every recorded signer is judged again against the embedded
manifest's policy (kind ``signature``); a path package's bundles are verified again from its
source, and with ``--mirror`` each mirrored bundle over the mirrored ``metadata.json``.

What it cannot re-derive offline is said in ``notes``, not hidden: a Hub package's commit and
variant facts without a mirror (the Hub is not asked), a Hub package's bundles without a mirror, a path package whose source is not
in the project, the rejected receipts (their bodies are not embedded), and a
``publisher-trusted`` fact an author recorded falsely.

The result is one report: ``{"ok", "lockfiles", "problems": [{"kind", "path", "expected",
"computed", ...}], "notes"}``. Kinds (docs/reference.md#verification): ``missing | unknown | mismatched |
lock-digest | receipt``, and for what re-derivation finds ``index``, ``trust``, ``package``,
``name``, ``field`` and ``signature``; those problems also carry ``recorded`` (what the lock says; also
``expected``), ``derived`` (what verify computed; also ``computed``) and a ``message``.
``stale`` (docs/reference.md#freshness): the project's manifest file is not the one the lock embeds
(``freshness.manifest_drift``); ``expected``/``computed`` are the two manifest digests.
A lockfile that does not parse, and a ``--mirror`` that is not a directory, are bad input
(exit 2), not a failed verification.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..base import names
from ..base.canonical import short_digest
from ..base.record import dataclass, field, replace
from ..documents.receipt import cell_name
from ..documents.schema import toml_key
from ..errors import FrtError, LockfileError, ReceiptInvalid, UsageError

__all__ = ["verify", "VerifyReport", "rederive", "DERIVED_KINDS"]

DERIVED_KINDS = ("receipt", "index", "trust", "package", "name", "field", "signature")


@dataclass
class VerifyReport:
    lockfiles: list[str] = field(default_factory=list)
    problems: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict:
        return {"ok": self.ok, "lockfiles": list(self.lockfiles), "problems": [dict(p) for p in self.problems],
                "notes": list(self.notes)}


def verify(project, models: list[str] | None = None, *, mirror: str | Path | None = None,
           variants: list[str] | None = None, all_variants: bool = False,
           lockfile: str | Path | None = None) -> VerifyReport:
    """Verify the project's lockfiles (all, or those of ``models``), or the one file ``lockfile``
    (``frt verify --lockfile FILE``: a lock you were given, re-derived in ``project``; with
    ``models``, it must be the lockfile of one of them)."""
    from ..documents.lockfile import Lockfile  # noqa: PLC0415

    if mirror is not None and "://" in str(mirror):  # an oci:// artefact: unpacked privately, verified as a folder
        from ..distribution.oci_verify import verify_artefact  # noqa: PLC0415

        return verify_artefact(verify, project, models, str(mirror), variants=variants, all_variants=all_variants)
    if mirror is not None and not Path(mirror).is_dir():
        # bad input, not a failed verification: every locked file reported missing would bury the cause
        what = "is not a directory" if Path(mirror).exists() else "does not exist"
        raise UsageError(f"--mirror {mirror}: {what}",
                         hints=[f"fill it with `frt mirror {mirror}`, or name the directory the mirror is in"])
    if lockfile is not None:
        if not Path(lockfile).is_file():  # a missing lockfile is a "no" (exit 1), as wherever one is named
            raise FrtError(f"no lockfile at {lockfile} (--lockfile)", hints=["name an existing lockfile in --lockfile"])
        targets = [(Path(lockfile), str(lockfile))]
    else:
        models = list(models) if models else [p.stem for p in sorted(project.lockfiles_dir.glob("*.lock"))]
        if not models:  # nothing to verify is a "no" (exit 1), like a missing lockfile
            raise FrtError(f"no lockfiles in {project.rel(project.lockfiles_dir)}", hints=["frt lock"])
        targets = [(path, project.rel(path)) for path in map(project.existing_lockfile, models)]
    report = VerifyReport()
    for path, label in targets:
        report.lockfiles.append(label)
        try:
            lock = Lockfile.read(path, label=label, index_refs=False)
            if lockfile is not None and models and lock.model not in models:
                raise UsageError(f"--lockfile {lockfile} is the lockfile of model {lock.model!r}, not {models[0]!r}",
                                 hints=[f"--model {lock.model}, or leave --model out"])
            # every cell and receipt line listed now: a line a decision never reads is read here, and
            # what reading it refuses (not JSON, a receipt embedded twice...) is refused as at read
            len(lock.index), len(lock.receipts)
        except LockfileError as exc:
            if exc.exit_code == 2:
                raise  # does not parse: bad input, not a failed verification
            report.problems += [{"kind": r.get("kind", "lock-digest"), "path": r.get("path", label),
                                 "expected": r.get("expected"), "computed": r.get("computed"), "message": str(exc)}
                                for r in (exc.reasons or [{}])]
            continue
        report.problems += _staleness(lock, label, project)
        report.problems += _stale_receipt_files(lock, label, project)
        problems, notes = rederive(lock, label=label, project=project, mirror=mirror)
        report.problems += problems
        report.notes += notes
        if mirror is not None:
            from ..distribution.mirror import verify_mirror  # noqa: PLC0415

            report.problems += verify_mirror(lock, Path(mirror), variants=variants, all_variants=all_variants)
            if lock.release:  # the Hub release's files, beside the packages'
                from ..distribution.release_files import mirror_problems  # noqa: PLC0415

                report.problems += mirror_problems(lock, Path(mirror))
    return report


def _staleness(lock, label: str, project) -> list[dict]:
    """A lock whose embedded manifest is not the project's manifest file is stale
    (``freshness.manifest_drift``, the rule ``load`` and ``resolve`` warn with). Reported as a
    problem of kind ``stale``: the lock may be intact and still not what the manifest asks for."""
    from .freshness import manifest_drift  # noqa: PLC0415

    why = manifest_drift(lock, project.root)  # a manifest-file that is no safe name is never followed
    if why is None:
        return []
    from ..documents.manifest import Manifest  # noqa: PLC0415

    try:
        now = Manifest.read(Path(project.root) / lock.manifest_file, label=lock.manifest_file).digest
    except FrtError as exc:
        now = f"unreadable: {exc}"
    # the drift text is the serving side's warning; verify fails instead of using the lock
    why = why.replace("; using the lockfile as reviewed", "")
    return [{"kind": "stale", "path": f"{label}: manifest-digest", "manifest": lock.manifest_file,
             "expected": lock.manifest.digest, "computed": now, "message": why}]


def _stale_receipt_files(lock, label: str, project) -> list[dict]:
    """Each receipt file in the project that is not the receipt the lock embeds under its name
    (re-qualified or edited since `frt lock`), as a problem of kind ``stale``: the lock may be
    intact and still not what the project's receipts say. A receipt file that is not there is no
    problem (the lock carries the receipt; a receipts folder need not travel with it)."""
    import os  # noqa: PLC0415

    from .build import rejected_digest  # noqa: PLC0415 - a file's digest, whatever it holds

    out = []
    readable = []
    for d in lock.receipts:
        try:
            readable.append(lock.receipts[d])
        except LockfileError as exc:
            if exc.exit_code == 2:
                raise
            continue  # an embedded receipt that does not read (or match its digest): rederive reports it, by kind
    for rec in sorted(readable, key=lambda r: (r.file, r.digest)):
        if names.problem("path", rec.file):
            continue  # (an unsafe name is never followed; rederive reports it)
        p = Path(project.root) / rec.file
        if not os.path.lexists(p):
            continue
        now = rejected_digest(p)
        if now == rec.digest:
            continue
        model = lock.model
        out.append({"kind": "stale", "path": f"{label}: receipts ({rec.file})", "file": rec.file,
                    "expected": rec.digest, "computed": now,
                    "message": f"{rec.file} in the project is not the receipt {label} embeds (locked "
                               f"{short_digest(rec.digest)}, the file is {short_digest(now)}): it was re-qualified or "
                               "edited after `frt lock`",
                    "hint": f"lock the receipt now in the project with `frt lock --model {model}` (it is judged "
                            "again), or restore the locked one"})
    return out


# ---------------------------------------------------------------------------


class _Findings:
    def __init__(self, label: str):
        self.label = label
        self.problems: list[dict] = []
        self.notes: list[str] = []

    def add(self, kind: str, where: str, recorded: str, derived: str, message: str) -> None:
        self.problems.append({"kind": kind, "path": f"{self.label}: {where}", "expected": recorded,
                              "computed": derived, "recorded": recorded, "derived": derived, "message": message})

    def name(self, kind: str, value, where: str) -> bool:
        """Check one name; report it (kind ``name``) and return False when it is unsafe."""
        why = names.problem(kind, value)
        if why:
            self.add("name", where, repr(value), f"refused: {why}",
                     f"{where} {value!r} is not a safe {kind} name ({why})")
        return why is None

    def note(self, text: str) -> None:
        self.notes.append(f"{self.label}: {text}")


def _cands(cands) -> str:
    if not cands:
        return "no candidates"
    out = []
    for c in cands:
        sp = c.get("speedup")
        fig = f" {sp:g}x" if isinstance(sp, (int, float)) and not isinstance(sp, bool) else ""
        out.append(f"{c.get('route')} {c.get('state')}{fig} ({short_digest(c.get('receipt'))})")
    return ", ".join(out)


def rederive(lock, *, label: str, project=None, mirror: str | Path | None = None) -> tuple[list[dict], list[str]]:
    """Everything ``frt lock`` derived, computed again from ``lock``'s embedded manifest and
    receipts (plus the path sources under ``project`` and the ``mirror``, when given), compared
    with what ``lock`` records. Returns ``(problems, notes)``."""
    from ..documents.lockfile import Lockfile, embedded_receipt_rows  # noqa: PLC0415
    from ..documents.receipt import CellKey, Receipt  # noqa: PLC0415
    from .build import derive_index, receipt_verdict  # noqa: PLC0415

    f = _Findings(label)
    doc, m = lock.read_document(), lock.manifest

    # -- the lock's own fields --------------------------------------------------
    if lock.model != m.model:
        f.add("field", "model", lock.model, m.model, "the lock's model is not its embedded manifest's")
    f.name("path", lock.manifest_file, "manifest-file")

    # -- packages: names, manifest, trust, sources --------------------------------
    depends = _check_depends(f, lock)
    packages = {repo: _check_package(f, lock, repo, project, mirror, depends) for repo in sorted(lock.packages)}
    for repo in sorted(set(m.packages) - set(lock.packages)):
        f.add("package", f"packages.{toml_key(repo)}", "not locked", "declared by the manifest",
              f"the manifest declares package {repo!r}; the lock does not pin it")

    # -- routes table -----------------------------------------------------------
    recorded_routes = doc.get("routes", {})
    derived_routes = {name: {"route-digest": rt.digest, "precision": rt.precision, "assembly": rt.assembly,
                             "packages": m.route_packages(name)} for name, rt in m.routes.items()}
    for name in sorted(set(recorded_routes) | set(derived_routes)):
        a, b = recorded_routes.get(name), derived_routes.get(name)
        if a != b:
            f.add("field", f"routes.{toml_key(name)}", json.dumps(a, sort_keys=True) if a is not None else "no route",
                  json.dumps(b, sort_keys=True) if b is not None else "no route",
                  f"route {name!r} as recorded differs from the embedded manifest's definition")

    # -- receipts: shape, digest, filing, validity --------------------------------
    accepted: dict[str, Receipt] = {}
    invalid: dict[str, str] = {}  # recorded digest -> why it is not accepted
    for where, row in embedded_receipt_rows(doc):
        if isinstance(row, str):
            f.add("receipt", where, "an embedded receipt", f"unreadable: {row}", f"{where}: {row}")
            continue
        head, rfile = row["digest"], row["file"]
        at = f"{where} ({rfile})"
        f.name("path", rfile, f"{where}.file")
        try:
            rec = Receipt.parse(row["receipt"], file=rfile)
        except ReceiptInvalid as exc:
            invalid[head] = str(exc)
            f.add("receipt", at, f"accepted as {row['state']}", f"invalid: {exc}",
                  f"{rfile}: the embedded receipt does not parse: {exc}")
            continue
        if rec.digest != head:
            invalid[head] = "does not match its digest"
            f.add("receipt", f"{where}.digest ({rfile})", head, rec.digest,
                  "the embedded receipt does not match the digest it is filed under")
        if (row["route"], row["state"]) != (rec.route, rec.state):
            f.add("receipt", at, f"filed as {row['route']} {row['state']}", f"the receipt says {rec.route} {rec.state}",
                  "the line's head does not say what the receipt says")
        why = receipt_verdict(lock, rec)
        if why:
            invalid.setdefault(head, "; ".join(why))
            f.add("receipt", at, f"accepted as {rec.state}", "rejected: " + "; ".join(why),
                  f"frt lock would reject {rfile}: " + "; ".join(why))
        elif rec.digest == head:
            accepted[rec.digest] = rec

    # -- receipt signatures (docs/reference.md#receipt-signatures): re-checked offline against the pinned keys --------
    signatures, receipt_keys = _check_receipt_signatures(f, lock, accepted, invalid, project)

    # -- rejected receipts: only their names and that they are not also accepted ----
    for i, rj in enumerate(lock.rejected):
        where = f"rejected-receipts[{i}]"
        if not isinstance(rj, dict):
            f.add("field", where, repr(rj), "a table", f"{where} is not a table")
            continue
        if isinstance(rj.get("file"), str):
            f.name("path", rj["file"], f"{where}.file")
        if rj.get("digest") in accepted:
            f.add("receipt", where, "rejected", "accepted",
                  f"{rj.get('file')} is recorded as rejected and embedded as accepted")
    if lock.rejected:
        f.note(f"{len(lock.rejected)} rejected receipt(s): their bodies are not embedded, so the reasons are not re-derived")

    # -- the route index ----------------------------------------------------------
    derived_index = derive_index(accepted.values())
    derived_rows = {k: _index_row(e) for k, e in derived_index.items()}
    raw_index = doc.get("index", [])
    recorded_rows = json.loads(raw_index) if isinstance(raw_index, str) else list(raw_index)
    seen = set()
    for i, it in enumerate(recorded_rows):
        key = CellKey(*(it[k] for k in ("phase", "precision", "backend", "arch", "device-class")))
        where = f"index[{cell_name(key)}]"
        for k in ("phase", "precision", "backend", "arch", "device-class"):
            f.name("name", it[k], f"index[{i}].{k}")
        if key in seen:
            f.add("index", where, "recorded twice", "one cell", f"index cell {cell_name(key)} is recorded twice")
            continue
        seen.add(key)
        want = derived_rows.get(key)
        if want is None:
            f.add("index", where, _cands(it.get("candidates")), "no cell",
                  f"no accepted receipt was measured on {cell_name(key)}; "
                  + _why_not_here(it.get("candidates") or [], key, accepted, invalid, lock.receipts))
            continue
        if it != want:
            got_c, want_c = it.get("candidates"), want["candidates"]
            if got_c != want_c:
                f.add("index", where, _cands(got_c), _cands(want_c),
                      f"cell {cell_name(key)}: the recorded ranking is not the one frt lock derives from the valid "
                      "receipts of this cell" + _cand_detail(got_c or [], want_c, key, accepted, invalid))
            top = {k: it.get(k) for k in ("route", "state", "receipt")}
            want_top = {k: want[k] for k in ("route", "state", "receipt")}
            if top != want_top:
                f.add("index", f"{where}.route", f"{top['route']} {top['state']} ({short_digest(top['receipt'])})",
                      f"{want_top['route']} {want_top['state']} ({short_digest(want_top['receipt'])})",
                      f"cell {cell_name(key)}: the recorded winner is not the derived one")
            extra = sorted(set(it) - set(want))
            if extra:
                f.add("index", where, ", ".join(extra), "no such fields", f"cell {cell_name(key)} has fields frt lock does not write")
    for key in sorted(set(derived_rows) - seen):
        f.add("index", f"index[{cell_name(key)}]", "no cell", _cands(derived_rows[key]["candidates"]),
              f"the valid receipts measured on {cell_name(key)} are not in the index")

    # -- catch-all: the whole document, as frt lock would write it ---------------------
    if not f.problems:
        derived = Lockfile(model=m.model, manifest_file=lock.manifest_file, manifest=m, packages=packages,
                           receipts=accepted, rejected=list(lock.rejected), index=derived_index,
                           receipt_keys=receipt_keys, signatures=signatures, release=lock.release)
        written = derived.document()
        if "nearest" not in doc and doc.get("schema") == "frt.lock/1":
            # an older frt wrote it (frt.lock/1.1 added the summary): resolve groups the index itself
            written.pop("nearest", None)
            written["schema"] = doc["schema"]
            f.note("no `nearest` summary (written by an older frt): a refusal reason reads every cell; "
                   "`frt lock` adds it")
        diff = list(_document_diff(doc, written))
        for key, a, b in diff:
            f.add("field", key, a, b, f"{key} differs from what frt lock writes from the same inputs")
        # the same values in another layout: resolve finds a cell or a receipt by its line's head, so
        # the texts must be the ones frt lock writes, byte for byte (a reader that does not find a
        # head refuses; it never finds another cell's line)
        for key in ("index", "nearest", "receipts") if not diff else ():
            if isinstance(doc.get(key), str) and doc[key] != written.get(key):
                f.add("field", key, "another layout", "the layout frt lock writes",
                      f"{key} holds what frt lock derives, written in another layout: resolve looks cells and "
                      "receipts up by the line heads frt lock writes, and may not find them")
    return f.problems, f.notes


def _check_receipt_signatures(f: _Findings, lock, accepted: dict, invalid: dict, project) -> tuple[dict, dict]:
    """Receipt signatures (docs/reference.md#receipt-signatures), re-derived offline: under the embedded
    manifest's ``[trust.receipts]`` policy, every accepted receipt it covers must carry an embedded signature
    that verifies with a pinned key (or, for a Sigstore bundle, against the pinned trusted root with a listed
    identity) over the receipt's own digest, by the signer the lock records. Each pinned key must be the key
    its PEM holds (keyid recomputed) and, where the project holds the key file, that file's key; each ``.sig``
    beside a receipt in the project must be the one locked. A receipt that fails is dropped from ``accepted``
    (its cell is then derived without it) and reported as kind ``signature``. Returns the (signatures, keys)
    ``frt lock`` would record."""
    policy = lock.manifest.receipt_policy
    released = set()
    if lock.release:  # a Hub release's receipts: always judged, never without a policy
        from ..documents.lock_release import NO_POLICY, is_release_label  # noqa: PLC0415

        released = {dig for dig, rec in accepted.items() if is_release_label(lock, rec.file)}
        for dig in sorted(released) if policy is None else ():
            rec = accepted.pop(dig)
            invalid[dig] = NO_POLICY
            f.add("receipt", f"receipts ({rec.file})", f"accepted as {rec.state}", "rejected: " + NO_POLICY,
                  f"frt lock would reject {rec.file}: {NO_POLICY}")
    if policy is None:
        for _dig, row in sorted(lock.signatures.items()):
            f.add("signature", f"receipt-signatures ({row.get('file')})", f"signed by {row.get('signer')}", "no policy",
                  "the lock records a receipt signature, but its manifest has no [trust.receipts] policy")
        for rel in sorted(lock.receipt_keys):
            f.add("signature", f'receipt-keys."{rel}"', "pinned", "no policy",
                  "the lock pins a receipt signer's key, but its manifest has no [trust.receipts] policy")
        return {}, {}
    from ..provenance.signing import check_row, key_from_pin  # noqa: PLC0415 - only under a policy

    keys = {}
    for rel in policy.keys:
        where = f'receipt-keys."{rel}"'
        pin = lock.receipt_keys.get(rel)
        if pin is None:
            f.add("signature", where, "not pinned", "listed by [trust.receipts] keys",
                  f"the policy lists key file {rel}; the lock does not pin it")
            continue
        key, why = key_from_pin(rel, pin)
        if key is None:
            f.add("signature", where, pin.get("keyid"), why, f"{rel}: {why}")
            continue
        keys[rel] = key
        if project is not None and not names.problem("path", rel):
            p = Path(project.root) / rel
            if p.is_file():
                from ..errors import ManifestError  # noqa: PLC0415
                from ..provenance.signing import ReceiptPolicy, read_policy_keys  # noqa: PLC0415

                try:
                    now = read_policy_keys(project.root, ReceiptPolicy(keys=(rel,)), manifest_file=lock.manifest_file)[rel].keyid
                except ManifestError as exc:
                    now = f"unreadable: {exc}"
                if now != key.keyid:
                    f.add("signature", where, key.keyid, now,
                          f"key file {rel} in the project is not the key the lock pinned: re-lock after a key change")
            else:
                f.note(f"key file {rel} is not in this project; its pinned key ({key.keyid}) is used")
    for rel in sorted(set(lock.receipt_keys) - set(policy.keys)):
        f.add("signature", f'receipt-keys."{rel}"', "pinned", "not listed by [trust.receipts] keys",
              f"the lock pins key file {rel}, which the policy does not list")
    signatures = {}
    for dig, rec in sorted(accepted.items()):
        row = lock.signatures.get(dig)
        if not policy.covers(rec.device_class) and dig not in released:
            continue
        where = f"receipt-signatures ({rec.file})"
        if row is None:
            why = f"unsigned: the lock embeds no signature, and the policy covers device class {rec.device_class!r}"
            f.add("signature", where, f"accepted as {rec.state}", "rejected: " + why, f"frt lock would reject {rec.file}: {why}")
            invalid[dig] = why
            continue
        signer, why = check_row(row, dig, policy, keys)
        if signer is None:
            f.add("signature", where, f"signed by {row.get('signer')}", "rejected: " + why,
                  f"{rec.file}: the embedded signature does not hold: {why}")
            invalid[dig] = why
            continue
        recorded = (row.get("signer"), row.get("issuer"))
        found = (signer.identity, signer.issuer) if row.get("kind") == "sigstore" else (signer, None)
        if recorded != found:
            f.add("signature", where + ".signer", " ".join(x for x in recorded if x), " ".join(x for x in found if x),
                  f"{rec.file}: the lock records another signer than the one whose signature verifies")
            invalid[dig] = "the recorded signer is not the one found"
            continue
        if row.get("file") != rec.file:
            f.add("signature", where + ".file", str(row.get("file")), rec.file,
                  "the signature row names another file than its receipt")
        signatures[dig] = row
        if project is not None and not names.problem("path", rec.file):
            _compare_on_disk(f, rec, row, dig, policy, keys, Path(project.root))
    for dig in list(accepted):
        if dig in invalid:
            del accepted[dig]
    for dig, row in sorted(lock.signatures.items()):
        if dig not in signatures and dig not in invalid:
            f.add("signature", f"receipt-signatures ({row.get('file')})", f"signed by {row.get('signer')}",
                  "no accepted receipt the policy covers",
                  "the lock records a signature for a receipt it does not accept, or one the policy does not cover")
    return signatures, {rel: k.to_toml() for rel, k in keys.items()}


def _compare_on_disk(f: _Findings, rec, row: dict, dig: str, policy, keys: dict, root: Path) -> None:
    """The signature file beside the receipt in the project (``.sig`` for a key, ``.sigstore`` for
    an identity) must be the one the lock embeds: one replaced after ``frt lock`` is reported,
    saying whether the replacement would verify and by whom. A file that is not there is no
    problem: the lock carries the signature (a receipt folder need not travel with the lock)."""
    from ..documents.schema import JSONInvalid, json_loads, read_bytes  # noqa: PLC0415
    from ..provenance.signing import MAX_SIGNATURE_BYTES, bundle_path, check_row, sig_path  # noqa: PLC0415

    key_kind = row.get("kind") == "key"
    on_disk = (sig_path if key_kind else bundle_path)(root / rec.file)
    if not on_disk.is_file():
        return
    body = "envelope" if key_kind else "bundle"
    suffix = on_disk.name[len(Path(rec.file).name):]
    try:  # at most MAX_SIGNATURE_BYTES are read: a file that is too large is not the one locked
        found = json_loads(read_bytes(on_disk, FrtError, rec.file + suffix, limit=MAX_SIGNATURE_BYTES))
    except (FrtError, JSONInvalid) as exc:
        found = f"unreadable: {exc}"
    if found == row.get(body):
        return
    held = check_row({"kind": row.get("kind"), body: found}, dig, policy, keys)[0] if isinstance(found, dict) else None
    shown = getattr(held, "identity", held)
    f.add("signature", rec.file + suffix, f"the {body} locked (signer {row.get('signer')})",
          f"another {body}" + (f" (signer {shown})" if held else ", which does not verify for this receipt"),
          f"{rec.file}{suffix} in the project is not the signature the lock embeds: it was replaced after `frt lock`; "
          f"restore it, or sign the receipt again and run `frt lock`")


def _index_row(e) -> dict:
    c0 = e.candidates[0]
    return {**e.key.as_dict(), "route": c0.route, "state": c0.state, "receipt": c0.receipt,
            "candidates": [c.to_toml() for c in e.candidates]}


def _why_not_here(cands, key, accepted, invalid, embedded) -> str:
    out = []
    for c in cands:
        d = c.get("receipt")
        if d in accepted:
            out.append(f"receipt {short_digest(d)} ({c.get('route')}) was measured on {cell_name(accepted[d].key)}")
        elif d in invalid:
            out.append(f"receipt {short_digest(d)} ({c.get('route')}) is not valid: {invalid[d]}")
        elif d not in embedded:
            out.append(f"receipt {short_digest(d)} ({c.get('route')}) is not embedded in the lock")
    return "; ".join(out) or "the cell has no candidates"


def _cand_detail(got, want, key, accepted, invalid) -> str:
    want_by = {c["receipt"]: c for c in want}
    out = []
    for c in got:
        d = c.get("receipt")
        w = want_by.get(d)
        if w is None:
            if d in accepted:
                out.append(f"; {short_digest(d)} was measured on {cell_name(accepted[d].key)}")
            elif d in invalid:
                out.append(f"; {short_digest(d)} is not valid: {invalid[d]}")
            else:
                out.append(f"; {short_digest(d)} is not embedded in the lock")
        elif c != w:
            diffs = [f"{k} {c.get(k)!r} recorded, {w.get(k)!r} in the receipt" for k in ("route", "state", "speedup")
                     if c.get(k) != w.get(k)]
            if diffs:
                out.append(f"; {short_digest(d)}: " + ", ".join(diffs))
    return "".join(out)


# ---------------------------------------------------------------------------
# packages


def _check_depends(f: _Findings, lock) -> set[str]:
    """The packages ``frt lock`` adds for ``kernel-depends`` (``locker.lock_depends``): every one a
    locked variant names, transitively from the manifest's packages, with the locker's own
    ``depends_of`` and ``depends_cycle``. A dependency that is not locked, one locked at another
    version than a variant asks for, and a cycle are reported, as ``frt lock`` refuses them.
    Returns the undeclared packages reached this way (a lock may pin those, and no others)."""
    from .build import depends_cycle, depends_of  # noqa: PLC0415

    m, reached = lock.manifest, set()
    queue = sorted(r for r in m.packages if r in lock.packages)
    while queue:
        repo = queue.pop(0)
        for dep, version in depends_of(lock.packages[repo]):
            have = lock.packages.get(dep)
            if have is None:
                f.add("package", f"packages.{toml_key(dep)}", "not locked", f"kernel-depends of {repo} (version {version})",
                      f"{repo}: a locked variant names {dep!r} version {version} in kernel-depends; the lock does not pin it")
            elif have.source == "hub" and have.version != version:
                f.add("package", f"packages.{toml_key(dep)}.version", str(have.version), str(version),
                      f"{repo}: a locked variant names {dep!r} version {version} in kernel-depends")
            if have is not None and dep not in m.packages and dep not in reached:
                reached.add(dep)
                queue.append(dep)
    cycle = depends_cycle(lock.packages)
    if cycle:
        f.add("package", "kernel-depends", "no cycle", " -> ".join(cycle),
              f"kernel-depends cycle: {' -> '.join(cycle)} (frt lock refuses it, as kernels does)")
    return reached


def _check_package(f: _Findings, lock, repo: str, project, mirror, depends: set[str]):
    """Check one locked package; return it as `frt lock` would record it from what could be
    re-derived (the recorded facts where nothing could be). A package in ``depends`` (reached
    through ``kernel-depends`` only) is checked as ``frt lock`` locks it: a Hub package at the
    version asked for (``_check_depends`` compares that), trusted as any other."""
    from ..documents.manifest import Package  # noqa: PLC0415
    from .build import derive_trust  # noqa: PLC0415

    lp, m = lock.packages[repo], lock.manifest
    fp = f"packages.{toml_key(repo)}"
    f.name("repo", repo, fp)
    if lp.path is not None:
        f.name("path", lp.path, fp + ".path")
    for vname, v in sorted(lp.variants.items()):
        vp = f"{fp}.variants.{vname}"
        f.name("variant", vname, vp)
        for rel in sorted(v.files):
            f.name("path", rel, f"{vp}.files.{toml_key(rel)}")
        for k, val in (("module-id", v.module_id), ("module-name", v.module_name)):
            if not (isinstance(val, str) and val.isascii() and val.isidentifier()):
                f.add("name", f"{vp}.{k}", repr(val), "refused: not a Python identifier",
                      f"{vp}.{k} {val!r} is not a Python identifier")
    _check_signatures(f, lp, m.publisher_policy(repo), fp)
    mp = m.packages.get(repo)
    if mp is None and repo in depends:
        mp = Package(repo, version=lp.version)
    elif mp is None:
        f.add("package", fp, "locked", "not declared by the manifest",
              f"the lock pins {repo!r}, which the embedded manifest does not declare and no locked variant "
              "names in kernel-depends")
        return lp
    derived = lp
    want_source = "path" if mp.is_path else "hub"
    if lp.source != want_source:
        by = "the manifest declares" if repo in m.packages else "kernel-depends names"
        f.add("package", fp + ".source", lp.source, want_source, f"{by} {repo!r} as a {want_source} package")
    elif mp.is_path and lp.path != mp.path:
        f.add("package", fp + ".path", str(lp.path), str(mp.path), f"the manifest's path for {repo!r} differs")
    elif not mp.is_path and lp.version != mp.version:
        f.add("package", fp + ".version", str(lp.version), str(mp.version), f"the manifest's version for {repo!r} differs")
    trust = derive_trust(mp, lp.publisher_trusted if lp.source == "hub" else None)
    if trust != lp.trust:
        org = repo.split("/", 1)[0]
        shown = trust or (f"refused: publisher {org!r} is not trusted by the manifest and the lock records no "
                          "trusted-publisher fact")
        f.add("trust", fp + ".trust", lp.trust, shown,
              f"{repo}: the trust decision does not follow from the manifest "
              f"({'path package' if mp.is_path else 'trust = true' if mp.trust else 'no trust'}) and the recorded "
              f"publisher fact (publisher-trusted {'not recorded' if lp.publisher_trusted is None else str(lp.publisher_trusted).lower()})")
    elif trust is not None:
        derived = replace(derived, trust=trust)
    if lp.source == "hub" and lp.trust == "trusted-publisher" and lp.publisher_trusted:
        f.note(f"{repo}: trusted-publisher rests on the publisher fact recorded at lock time; "
               "verify cannot ask the Hub offline")
    if lp.source == "path" and mp.is_path and lp.path == mp.path:
        derived = _rederive_path(f, lp, mp, derived, project, m.publisher_policy(repo))
    elif lp.source == "hub" and mirror is None:
        f.note(f"{repo}: Hub commit and variant facts not re-derived offline (pass --mirror DIR to check "
               "them against the mirrored metadata.json)")
        if any(v.signature for v in lp.variants.values()):
            f.note(f"{repo}: publisher signatures judged from the signers the lock records; pass --mirror DIR "
                   "to verify the mirrored bundles again")
    if mirror is not None:
        if lp.source == "hub":  # the mirror stands in for the Hub's content; nobody asked the Hub
            f.note(f"{repo}: Hub commit not checked offline: --mirror compares the mirrored files and "
                   f"metadata.json with the lock, not with what the Hub holds at {lp.revision}")
        _rederive_from_mirror(f, lp, Path(mirror), m.publisher_policy(repo))
    return derived


def _check_signatures(f: _Findings, lp, policy, fp: str) -> None:
    """Each variant's recorded publisher signature against the embedded manifest's policy (the
    signer recorded at lock, re-judged without the bundle's bytes: ``publisher.record_problems``)."""
    from ..provenance.publisher import record_problems  # noqa: PLC0415

    for vname, v in sorted(lp.variants.items()):
        for why in record_problems(v.signature, policy):
            signer = v.signature["identity"] if v.signature else "none (unsigned)"
            f.add("signature", f"{fp}.variants.{vname}.signature", json.dumps(v.signature, sort_keys=True),
                  f"refused: {why}", f"{lp.repo} variant {vname}: publisher signature (signer {signer}): {why}")


def _check_mirrored_signature(f: _Findings, lp, vname: str, raw: bytes, mirror: Path, policy) -> None:
    """A signed variant's bundle in the mirror, verified again offline over the mirrored metadata.json
    (when the bundle is the locked one: a missing or other file is verify_mirror's to report)."""
    from ..base.canonical import sha256_hex  # noqa: PLC0415
    from ..distribution.mirror import read_mirrored  # noqa: PLC0415
    from ..distribution.sources import repo_folder  # noqa: PLC0415
    from ..provenance.publisher import BUNDLE, SignatureRefused, signature_record, verify_bundle  # noqa: PLC0415

    sig = lp.variants[vname].signature
    folder = repo_folder(lp.repo)
    bundle = read_mirrored(mirror, folder, f"{folder}/snapshots/{lp.snapshot}/build/{vname}/{BUNDLE}")
    if bundle is None or "sha256:" + sha256_hex(bundle) != sig["bundle-sha256"]:
        return
    where = f"packages.{toml_key(lp.repo)}.variants.{vname}.signature"
    try:
        facts = verify_bundle(raw, bundle, policy.signer, repo=lp.repo, variant=vname)
    except SignatureRefused as exc:
        f.add("signature", where, sig["identity"], f"refused: {exc.reason}",
              f"{lp.repo} variant {vname}: the mirrored publisher signature (recorded signer {sig['identity']}) "
              f"does not verify: {exc}")
        return
    now = signature_record(bundle, facts, policy)
    if now != sig:
        f.add("signature", where, json.dumps(sig, sort_keys=True), json.dumps(now, sort_keys=True),
              f"{lp.repo} variant {vname}: the mirrored bundle is signed by {facts.describe()}; the lock records "
              f"{sig['identity']}")


def _rederive_path(f: _Findings, lp, mp, derived, project, policy=None):
    """A path package's revision, version and variant facts from its source in the project."""
    from ..errors import KernelUnavailable  # noqa: PLC0415
    from .build import derive_path_package  # noqa: PLC0415

    fp = f"packages.{toml_key(lp.repo)}"
    if project is None or names.problem("path", mp.path) or not (Path(project.root) / mp.path).is_dir():
        f.note(f"{lp.repo}: path source {mp.path} is not in this project; its revision and variant facts "
               "are not re-derived")
        return derived
    from ..documents.metadata import PackageDigestMismatch  # noqa: PLC0415
    from ..provenance.publisher import SignatureRefused  # noqa: PLC0415

    try:
        now = derive_path_package(project, mp, policy)
    except SignatureRefused as exc:
        f.add("signature", f"{fp}.variants.{exc.reasons[0].get('variant')}.signature", "verified at lock",
              f"refused: {exc.reason}", str(exc))
        return derived
    except PackageDigestMismatch as exc:  # what the mirror and the loader would refuse: each file, and the fix
        for r in exc.reasons:
            f.problems.append({"kind": "mismatched", "path": r["path"],
                               "expected": r["expected"] or "not listed in metadata.json",
                               "computed": r["computed"] or "missing", "hint": exc.hints[0],
                               "message": f"{lp.repo}: {r['path']} does not match the digest in its variant's "
                                          "metadata.json (the mirror and the loader refuse it)"})
        from ..base.canonical import digest, tree_digests  # noqa: PLC0415

        revision = digest(tree_digests((Path(project.root) / mp.path).resolve()))
        if revision != lp.revision:  # the files changed since the lock too: say that as well
            f.add("package", fp + ".revision", lp.revision, revision,
                  f"{lp.repo}: the content digest of {mp.path} is not the locked revision")
        return derived
    except (KernelUnavailable, FrtError, OSError) as exc:
        f.add("package", fp, lp.revision, f"not derivable: {exc}", f"{lp.repo}: the path source cannot be locked: {exc}")
        return derived
    if now.revision != lp.revision:
        f.add("package", fp + ".revision", lp.revision, now.revision,
              f"{lp.repo}: the content digest of {mp.path} is not the locked revision")
    if now.version != lp.version:
        f.add("package", fp + ".version", str(lp.version), str(now.version),
              f"{lp.repo}: the version in {mp.path}'s metadata.json is not the locked one")
    _compare_variants(f, fp, lp.variants, now.variants, source=mp.path, complete=True)
    return replace(derived, revision=now.revision, version=now.version, variants=now.variants)


def _rederive_from_mirror(f: _Findings, lp, mirror: Path, policy=None) -> None:
    """Each mirrored variant's facts from its metadata.json (only where the bytes are the locked
    ones: a mismatched file is verify_mirror's to report)."""
    from ..base.canonical import sha256_hex  # noqa: PLC0415
    from ..distribution.sources import repo_folder  # noqa: PLC0415
    from ..documents.metadata import parse_variant_metadata, with_computed_digests  # noqa: PLC0415
    from ..errors import KernelUnavailable  # noqa: PLC0415

    if names.problem("repo", lp.repo):
        return
    snap = mirror / repo_folder(lp.repo) / "snapshots" / lp.snapshot / "build"
    found = {}
    for vname, v in sorted(lp.variants.items()):
        if names.problem("variant", vname):
            continue
        p = snap / vname / "metadata.json"
        try:
            real = p.resolve(strict=True)
            if not real.is_relative_to(mirror.resolve()) or not real.is_file():
                continue
            raw = real.read_bytes()
        except OSError:
            continue
        if "sha256:" + sha256_hex(raw) != v.metadata_sha256:
            continue
        if v.signature and policy is not None:
            _check_mirrored_signature(f, lp, vname, raw, mirror, policy)
        try:
            now = replace(parse_variant_metadata(raw, repo=lp.repo, variant=vname), signature=v.signature)
            if now.digest_source == "frt":  # as frt lock computes them: from the variant's files
                computed = with_computed_digests(now, _mirrored_files(snap / vname, mirror), repo=lp.repo)
                # the metadata declares no digests, so the mirror's files are the only witness of the
                # locked ones: where they differ, verify_mirror names each file (missing, unknown,
                # mismatched), and nothing tells a damaged mirror from an edited digest offline. That
                # is a mirror problem first (refilling it from the Hub checks the lock's digests against
                # the published files), not a re-derivation that blames the lock.
                if computed.files != v.files:
                    f.note(f"{lp.repo} variant {vname}: its metadata.json declares no digests, so a mirrored file "
                           "that does not match could be a damaged mirror or an edited lock digest; refilling the "
                           "mirror from the Hub (`frt mirror`) checks the published files against the lock and tells which")
                now = computed if computed.files == v.files else replace(computed, files=dict(v.files))
            found[vname] = now
        except KernelUnavailable as exc:
            f.add("package", f"packages.{toml_key(lp.repo)}.variants.{vname}", "locked", f"not derivable: {exc}", str(exc))
    _compare_variants(f, f"packages.{toml_key(lp.repo)}", {n: lp.variants[n] for n in found}, found,
                      source="the mirror", complete=False)


def _mirrored_files(vdir: Path, mirror: Path) -> dict[str, bytes]:
    """The files of a mirrored variant (relpath -> bytes; snapshots link into ``blobs/``). A link
    leaving the mirror is not read: ``verify_mirror`` reports it, and the digests then differ."""
    from ..base.canonical import scan_tree  # noqa: PLC0415

    root, out = mirror.resolve(), {}
    for rel, path, _ in scan_tree(vdir):
        real = Path(path).resolve()
        try:
            if real.is_relative_to(root) and real.is_file():
                out[rel] = real.read_bytes()
        except OSError:
            continue  # unreadable: missing from the digests, as verify_mirror reports it
    return out


_VARIANT_FIELDS = (("backend", "backend"), ("archs", "archs"), ("metadata-sha256", "metadata_sha256"),
                   ("module-id", "module_id"), ("module-name", "module_name"), ("digest-algorithm", "algorithm"),
                   ("files", "files"), ("digest-source", "digest_source"), ("kernels-minver", "kernels_minver"),
                   ("python-depends", "python_depends"), ("kernel-depends", "kernel_depends"),
                   ("signature", "signature"))


def _compare_variants(f: _Findings, fp: str, recorded: dict, derived: dict, *, source: str, complete: bool) -> None:
    if complete:
        for vname in sorted(set(recorded) - set(derived)):
            f.add("package", f"{fp}.variants.{vname}", "locked", "no such variant",
                  f"{source} has no build/{vname}/")
        for vname in sorted(set(derived) - set(recorded)):
            f.add("package", f"{fp}.variants.{vname}", "not locked", "present",
                  f"{source} has build/{vname}/, which the lock does not record")
    for vname in sorted(set(recorded) & set(derived)):
        a, b = recorded[vname], derived[vname]
        for key, attr in _VARIANT_FIELDS:
            va, vb = getattr(a, attr), getattr(b, attr)
            if va != vb:
                def show(v):
                    return (json.dumps(list(v) if isinstance(v, tuple) else v, sort_keys=True))
                said = (f"the digests frt computes from the files of build/{vname}/ in {source} (its metadata.json "
                        "declares none) differ" if key == "files" and b.digest_source == "frt"
                        else f"build/{vname}/metadata.json in {source} says otherwise")
                f.add("package", f"{fp}.variants.{vname}.{key}", show(va), show(vb), said)


# ---------------------------------------------------------------------------
# the catch-all


def _document_diff(recorded: dict, derived: dict):
    """(key, recorded, derived) for each top-level key whose content differs (JSON-in-TOML
    parts compared as the values they hold, so a lock in the older table forms compares too)."""
    from ..documents.lockfile import embedded_receipt_rows  # noqa: PLC0415

    def norm(key, value):
        if value is None:
            return None
        if key in ("manifest", "index", "nearest") and isinstance(value, str):
            return json.loads(value)
        if key == "receipts":
            rows = embedded_receipt_rows({"receipts": value})
            return sorted((json.dumps(r, sort_keys=True) if isinstance(r, dict) else r) for _, r in rows)
        if key == "rejected-receipts":
            return sorted(json.dumps(r, sort_keys=True) for r in value)
        return value

    body = {k: v for k, v in recorded.items() if k != "lock-digest"}
    for key in sorted(set(body) | set(derived)):
        a, b = norm(key, body.get(key)), norm(key, derived.get(key))
        if a != b:
            yield key, _brief(body.get(key)), _brief(derived.get(key))


def _brief(v) -> str:
    if v is None:
        return "absent"
    text = v if isinstance(v, str) else json.dumps(v, sort_keys=True)
    return text if len(text) <= 120 else text[:117] + "..."
