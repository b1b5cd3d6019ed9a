"""``frt lock``: manifest + Hub (or path sources) + receipts → lockfile.

Pins every package (branch ``vN`` → commit, or content digest for a path
package), records each variant's metadata facts and declared file digests,
decides trust, validates receipts (an invalid one is recorded, never fatal
unless ``strict``), ranks the valid ones per cell, and writes the lockfile
atomically and only when its bytes change.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

from ..base import names
from ..base.canonical import digest, scan_tree, sha256_hex, short_digest, tree_digests
from ..base.record import dataclass, field, replace
from ..base.regular import NotRegular
from ..documents.lock_index import CellIndex
from ..documents.lock_writer import same_bytes, write_atomic
from ..documents.lockfile import Candidate, IndexEntry, LockedPackage, LockedVariant, Lockfile
from ..documents.manifest import DEFAULT_MIN_SPEEDUP, Manifest, Package, route_gate
from ..documents.metadata import (
    MAX_METADATA_BYTES,
    PackageDigestMismatch,
    digest_mismatches,
    parse_variant_metadata,
    variant_file_digests,
    with_computed_digests,
)
from ..documents.receipt import STATES, CellKey, Receipt, cell_name, superseded_path
from ..documents.schema import JSONInvalid, json_loads, load_json, read_bytes
from ..errors import (
    CoverageLoss,
    FrtError,
    FrtWarning,
    KernelUnavailable,
    LockFailed,
    LockfileError,
    NothingAccepted,
    ReceiptInvalid,
    UsageError,
)
from ..project.discover import Project
from ..provenance.publisher import BUNDLE
from ..system.admissible import admission_problems
from .coverage import CoverageDiff, coverage_diff

__all__ = ["lock_model", "LockResult", "LockSession", "LockFailed", "CoverageLoss", "NothingAccepted", "loss_hints",
           "nothing_hints", "rank_candidates",
           "derive_index", "derive_trust", "receipt_verdict", "derive_path_package", "judge_signature",
           "default_gate_routes"]


@dataclass
class LockResult:
    model: str
    path: Path
    lockfile: Lockfile
    data: bytes
    written: bool = False
    stale: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # what a re-lock changed in the Hub release it consumes (frt_dist.lock.release.change); None: no change
    release: dict | None = None
    # what this lock gains, loses and changes against the lockfile it replaces (``frt_dist.lock.coverage``);
    # empty when the bytes are the same
    coverage: CoverageDiff = field(default_factory=lambda: CoverageDiff(()))
    # receipt digest -> why it was rejected, as a kind the hints are chosen by: "invalid" (does not
    # parse), "receipt" (its cell or evidence), "pins" (measured on other pins), "unsigned", "signature"
    rejection_kinds: dict[str, str] = field(default_factory=dict)
    # the routes whose certified_fast receipts were judged against the default gate (``default_gate_routes``)
    default_gates: list[str] = field(default_factory=list)
    # route -> the packages it uses that this lock pins otherwise than the lock it replaces (new, or
    # another revision or version): `frt qualify` measures with the old lock's pins until it is written
    repinned: dict[str, list[str]] = field(default_factory=dict)
    # what is newer than the release commit this lock pins (``frt_dist.release.upgrade.news``; online only)
    release_news: list[str] = field(default_factory=list)


def rank_candidates(receipts: list[Receipt]) -> tuple[Candidate, ...]:
    """Deterministic order from recorded facts: certified_fast first, then the
    higher median speedup, the higher worst-round speedup, route name, digest."""

    def key(r: Receipt):
        t = r.timing or {}
        return (STATES.index(r.state), -(t.get("speedup-median") or 0.0), -(t.get("speedup-min") or 0.0),
                r.route, r.digest)

    return tuple(Candidate(r.route, r.state, r.digest, r.speedup) for r in sorted(receipts, key=key))


def derive_index(receipts) -> CellIndex:
    """The route index of a set of accepted receipts: grouped by cell, each cell ranked."""
    groups: dict[CellKey, list[Receipt]] = {}
    for rec in receipts:
        groups.setdefault(rec.key, []).append(rec)
    return CellIndex((k, IndexEntry(k, rank_candidates(v))) for k, v in groups.items())


def receipt_verdict(lock: Lockfile, rec: Receipt) -> list[str]:
    """Why ``rec`` cannot be accepted into ``lock`` (its manifest, pins and the admissibility of
    its cell, docs/reference.md#admissibility); ``[]`` when it can. The one rule `frt lock` applies and `frt verify`
    re-applies. Admissibility is judged on pinned variants only: a receipt measured on other
    pins already has its reason, and a missing variant would be reported twice."""
    pins = lock.pin_problems(rec)
    return rec.problems(lock.manifest) + (pins or admission_problems(lock.packages, rec.cell))


def default_gate_routes(manifest: Manifest, receipts) -> list[str]:
    """The routes, in manifest order, that declare no gate and have a receipt among ``receipts``
    (accepted or not) that claims ``certified_fast``: the ones whose speed claims this lock judges
    against ``DEFAULT_MIN_SPEEDUP``. `frt lock` warns once for each. A route with only
    ``supported_correct`` receipts, or none, is not named: nothing of it is judged against a gate."""
    claimed = {rec.route for rec in receipts if rec.state == "certified_fast"}
    return [name for name, rt in manifest.routes.items() if name in claimed and route_gate(rt).is_default]


def derive_trust(pkg: Package, publisher_trusted: bool | None) -> str | None:
    """The trust decision for a manifest package (docs/reference.md#loading-and-guard): ``project-path`` for a
    path package (trusted by being in the project), ``manifest`` when the manifest trusts it,
    ``trusted-publisher`` when the Hub flags its publisher as trusted, else ``None`` (refused).
    ``publisher_trusted`` is the Hub's fact as read at lock time (``None``: not read)."""
    if pkg.is_path:
        return "project-path"
    if pkg.trust:
        return "manifest"
    if publisher_trusted:
        return "trusted-publisher"
    return None


# ---------------------------------------------------------------------------


class LockSession:
    """What one `frt lock` run shares across its models: one Hub client (a publisher's trust fact
    is read once) and every Hub package version fetched once, keyed by (repo, version): its commit
    and variant facts, or the error fetching them raised. A package several models use costs its
    Hub requests once per run, and a broken one fails each model the same way without asking again."""

    def __init__(self, hub=None):
        self._hub = hub
        self.fetched: dict[tuple[str, int], tuple[str, dict] | FrtError] = {}
        # publisher signatures: the signed variants per (repo, commit), and the bytes read once per
        # run, so that each model judges them under its own manifest's policy
        self.signed: dict[tuple[str, str], set[str]] = {}
        self.metadata: dict[tuple[str, str, str], bytes] = {}
        self.bundles: dict[tuple[str, str, str], bytes] = {}

    @property
    def hub(self):
        if self._hub is None:
            from ..distribution.hub import HubClient  # noqa: PLC0415

            self._hub = HubClient()
        return self._hub


class _Locker:
    def __init__(self, project: Project, *, hub=None, upgrade: set[str] | None = None, session: LockSession | None = None):
        self.project = project
        self.session = session or LockSession(hub)
        self.upgrade = upgrade or set()

    @property
    def hub(self):
        return self.session.hub

    def lock_package(self, manifest: Manifest, pkg: Package, old: Lockfile | None) -> LockedPackage:
        if pkg.is_path:
            return self.lock_package_path(pkg, manifest.publisher_policy(pkg.repo))
        prev = old.packages.get(pkg.repo) if old else None
        old_entry = old.manifest.raw.get("packages", {}).get(pkg.repo) if old else None
        if (prev is not None and prev.source == "hub" and old_entry == manifest.raw["packages"][pkg.repo]
                and pkg.repo not in self.upgrade and old.manifest.publisher_policy(pkg.repo) == manifest.publisher_policy(pkg.repo)):
            # pinned: the commit and variant facts are kept (no network unless asked to upgrade), but
            # the trust decision is derived again, never copied: a decision edited into the old lock
            # must not survive a re-lock (or read as "up to date" under --check)
            trust, publisher = self.decide_trust(manifest, pkg, prev.publisher_trusted)
            return replace(prev, trust=trust, publisher_trusted=publisher)
        trust, publisher = self.decide_trust(manifest, pkg, None)
        commit, variants = self.fetch(pkg)
        variants = self.signed(pkg.repo, commit, variants, manifest.publisher_policy(pkg.repo))
        return LockedPackage(pkg.repo, "hub", pkg.version, commit, trust, variants, publisher_trusted=publisher)

    def signed(self, repo: str, commit: str, variants: dict, policy) -> dict:
        """``variants`` with each one's publisher signature verified and recorded (docs/reference.md#publisher-signatures)."""
        signed = self.session.signed.get((repo, commit), set())
        out = {}
        for name, v in sorted(variants.items()):
            bundle = None
            if policy.signature != "off" and name in signed:
                key = (repo, commit, name)
                if key not in self.session.bundles:
                    self.session.bundles[key] = self.hub.file(repo, commit, f"build/{name}/{BUNDLE}")
                bundle = self.session.bundles[key]
            out[name] = judge_signature(repo, v, self.session.metadata[(repo, commit, name)], bundle, policy)
        return out

    def lock_depends(self, manifest: Manifest, packages: dict[str, LockedPackage], old: Lockfile | None) -> None:
        """Add every ``kernel-depends`` package to ``packages``, transitively. A dependency is locked
        like a Hub package (its ``vN`` branch, as kernels resolves it; trust as for any package); one
        the manifest declares is that package, whose version must be the one asked for. A cycle is
        refused, as kernels refuses it."""
        queue = sorted(packages)
        while queue:
            repo = queue.pop(0)
            for dep, version in depends_of(packages[repo]):
                have = packages.get(dep)
                if have is None:
                    packages[dep] = self.lock_dependency(manifest, Package(dep, version=version), old)
                    queue.append(dep)
                elif have.source == "hub" and have.version != version:
                    raise KernelUnavailable(
                        f"package {repo!r}: kernel-depends {dep!r} version {version}, but {dep!r} is locked at "
                        f"version {have.version}", reasons=[{"package": repo, "reason": f"needs {dep} version {version}"}],
                        hints=[f"one process loads one version of {dep}: align the versions"])
        cycle = depends_cycle(packages)
        if cycle:
            raise KernelUnavailable(f"kernel-depends cycle: {' -> '.join(cycle)}",
                                    reasons=[{"package": cycle[0], "reason": "kernel-depends cycle: " + " -> ".join(cycle)}])

    def lock_dependency(self, manifest: Manifest, pkg: Package, old: Lockfile | None) -> LockedPackage:
        """A package only ``kernel-depends`` names: pinned by an earlier lock at the same version
        (unless upgraded), its trust decided again."""
        prev = old.packages.get(pkg.repo) if old else None
        if (prev is not None and prev.source == "hub" and prev.version == pkg.version
                and pkg.repo not in self.upgrade and pkg.repo not in (old.manifest.packages if old else {})
                and old.manifest.publisher_policy(pkg.repo) == manifest.publisher_policy(pkg.repo)):
            trust, publisher = self.decide_trust(manifest, pkg, prev.publisher_trusted)
            return replace(prev, trust=trust, publisher_trusted=publisher)
        trust, publisher = self.decide_trust(manifest, pkg, None)
        commit, variants = self.fetch(pkg)
        variants = self.signed(pkg.repo, commit, variants, manifest.publisher_policy(pkg.repo))
        return LockedPackage(pkg.repo, "hub", pkg.version, commit, trust, variants, publisher_trusted=publisher)

    def fetch(self, pkg: Package) -> tuple[str, dict]:
        """(commit, variant facts) of a Hub package's version branch, once per session."""
        key = (pkg.repo, pkg.version)
        hit = self.session.fetched.get(key)
        if hit is None:
            try:
                hit = self._fetch(pkg)
            except FrtError as exc:
                hit = exc
            self.session.fetched[key] = hit
        if isinstance(hit, FrtError):
            raise hit
        return hit

    def _fetch(self, pkg: Package) -> tuple[str, dict]:
        hub = self.hub
        commit = hub.branch_commit(pkg.repo, pkg.version)
        names, signed = hub.variant_listing(pkg.repo, commit)
        self.session.signed[(pkg.repo, commit)] = signed
        if not names:
            raise KernelUnavailable(f"package {pkg.repo!r}: commit {commit} has no build/<variant>/ directories",
                                    reasons=[{"package": pkg.repo, "reason": "no variants"}])
        variants = {}
        for name in names:
            raw = self.session.metadata[(pkg.repo, commit, name)] = hub.metadata(pkg.repo, commit, name)
            v = parse_variant_metadata(raw, repo=pkg.repo, variant=name)
            if v.digest_source == "frt":
                v = with_computed_digests(v, hub.variant_files(pkg.repo, commit, name), repo=pkg.repo)
            variants[name] = v
        return commit, variants

    def decide_trust(self, manifest: Manifest, pkg: Package, recorded: bool | None) -> tuple[str, bool | None]:
        """(decision, the publisher fact it rests on) for a Hub package. The manifest's trust needs no
        Hub fact; otherwise a fact recorded as true by an earlier lock is kept, else the Hub is asked."""
        publisher = None
        if not pkg.trust:
            publisher = True if recorded else self.hub.publisher_trusted(pkg.repo)
        trust = derive_trust(pkg, publisher)
        if trust is None:
            org = pkg.repo.split("/", 1)[0]
            raise KernelUnavailable(
                f"package {pkg.repo!r}: publisher {org!r} is not a trusted kernel publisher",
                reasons=[{"package": pkg.repo, "reason": "untrusted publisher"}],
                hints=([f"the release {manifest.release.repo} may trust it: `frt release trust --model {manifest.model}` "
                        "adds the code trust the release's manifest declares (printing each package), and its "
                        "receipt signers"] if manifest.release is not None else [])
                + [f"after reviewing the package, add `trust = true` under [packages.\"{pkg.repo}\"] in {manifest.file}"])
        return trust, publisher

    def lock_package_path(self, pkg: Package, policy=None) -> LockedPackage:
        root = (self.project.root / pkg.path).resolve()
        if not root.is_relative_to(self.project.root.resolve()):
            raise KernelUnavailable(f"package {pkg.repo!r}: path {pkg.path!r} leaves the project",
                                    reasons=[{"package": pkg.repo, "reason": "path escapes the project"}])
        build = root / "build"
        if not build.is_dir():
            raise KernelUnavailable(f"package {pkg.repo!r}: {pkg.path}/build/ not found (a path package is a Hub-layout source)",
                                    reasons=[{"package": pkg.repo, "reason": "no build/ directory"}])
        revision = digest(tree_digests(root))
        variants = {}
        versions = set()
        mismatched = []  # (variant, [(relpath, expected, computed)]): files edited since they were digested
        for vdir in sorted(p for p in build.iterdir() if p.is_dir()):
            mpath = vdir / "metadata.json"
            if not mpath.is_file():
                raise KernelUnavailable(f"package {pkg.repo!r}: {pkg.path}/build/{vdir.name}/metadata.json not found",
                                        reasons=[{"package": pkg.repo, "reason": "variant without metadata.json"}],
                                        hints=["kernels >= 0.17 loads no variant without metadata.json (pre-0.17 "
                                               "torch-universal builds have none): rebuild the package with a current "
                                               "kernel-builder, or add a metadata.json (name, id, version, license, "
                                               "python-depends, backend); frt computes the file digests if it has none"])
            try:
                raw = read_bytes(mpath, KernelUnavailable, f"{pkg.path}/build/{vdir.name}/metadata.json",
                                 limit=MAX_METADATA_BYTES)
            except KernelUnavailable as exc:
                raise KernelUnavailable(f"package {pkg.repo!r}: {exc}", reasons=exc.reasons) from None
            v = parse_variant_metadata(raw, repo=pkg.repo, variant=vdir.name)
            if v.digest_source == "frt":
                v = with_computed_digests(v, _read_tree(vdir, pkg.repo), repo=pkg.repo)
            else:  # the digests the loader and the mirror will check: they must be these files' own
                try:
                    now = variant_file_digests(vdir, v.algorithm, label=f"{pkg.path}/build/{vdir.name}")
                except KernelUnavailable as exc:
                    raise KernelUnavailable(f"package {pkg.repo!r}: {exc}", reasons=exc.reasons) from None
                bad = digest_mismatches(v.files, now)
                if bad:
                    mismatched.append((vdir.name, bad))
            variants[vdir.name] = judge_signature(pkg.repo, v, raw, _read_bundle(vdir, pkg, policy), policy)
            ver = json.loads(raw).get("version")
            if isinstance(ver, int):
                versions.add(ver)
        if not variants:
            raise KernelUnavailable(f"package {pkg.repo!r}: {pkg.path}/build/ has no variants",
                                    reasons=[{"package": pkg.repo, "reason": "no variants"}])
        if mismatched:
            raise PackageDigestMismatch(pkg.repo, pkg.path, mismatched, fix=f"frt digest {_shown(root)}")
        version = min(versions) if versions else 1
        return LockedPackage(pkg.repo, "path", version, revision, derive_trust(pkg, None), variants, path=pkg.path)

    def receipts_for(self, manifest: Manifest) -> list[tuple[str, object, Path]]:
        """(label, Receipt or the ReceiptInvalid it raised, path) for every receipt file of this model:
        files under ``receipts/<model>/``, and any other receipt whose ``cell.model`` names it."""
        d = self.project.receipts_dir
        out = []
        if not d.is_dir():
            return out
        for path in sorted(d.rglob("*.json")):
            label = self.project.rel(path)
            in_model_dir = path.relative_to(d).parts[0] == manifest.model
            try:
                rec = Receipt.read(path, label=label)
            except ReceiptInvalid as exc:
                try:
                    raw_model = load_json(path, ReceiptInvalid, label).get("cell", {}).get("model")
                except Exception:
                    raw_model = None
                if in_model_dir or raw_model == manifest.model:
                    out.append((label, exc, path))
                continue
            if rec.cell["model"] == manifest.model or in_model_dir:
                out.append((label, rec, path))
        return out


def rejected_digest(path: Path) -> str:
    """A rejected receipt's ``digest``: the canonical-JSON digest when the file is JSON
    (the digest the receipt would be filed under, whatever its formatting), else ``sha256`` of its
    bytes (not UTF-8, not JSON, or a value canonical JSON cannot hold). A file that cannot be read
    at all (a folder, a FIFO or a device named ``*.json``, a file over a receipt's size limit) has
    no digest: ``"unreadable"``, beside its reason."""
    try:
        data = read_bytes(path, ReceiptInvalid)  # bounded; a FIFO or a device is not read
    except ReceiptInvalid:
        return "unreadable"
    try:
        return digest(json_loads(data))
    except (JSONInvalid, ValueError, RecursionError, UnicodeEncodeError):
        return "sha256:" + sha256_hex(data)


def depends_of(pkg: LockedPackage) -> list[tuple[str, int]]:
    """The (repo, version) pairs any locked variant of ``pkg`` names in ``kernel-depends``."""
    return sorted({d for v in pkg.variants.values() for d in v.kernel_depends})


def depends_cycle(packages: dict[str, LockedPackage]) -> list[str] | None:
    """A ``kernel-depends`` cycle among ``packages`` as ``[a, b, ..., a]``, or ``None``."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(repo: str, path: list[str]) -> list[str] | None:
        state[repo] = 1
        for dep, _ in depends_of(packages[repo]) if repo in packages else ():
            if state.get(dep) == 1:
                return path[path.index(dep):] + [dep]
            if dep not in state:
                found = visit(dep, path + [dep])
                if found:
                    return found
        state[repo] = 2
        return None

    for repo in sorted(packages):
        if repo not in state:
            found = visit(repo, [repo])
            if found:
                return found
    return None


def _read_tree(vdir: Path, repo: str) -> dict[str, bytes]:
    """The files of a path package's variant directory (a symlink is refused: its target is not
    part of the package)."""
    out = {}
    for rel, path, link in scan_tree(vdir):
        if link:
            raise KernelUnavailable(f"package {repo!r}: {vdir.name}/{rel} is a symlink; frt cannot compute a digest "
                                    "for a file outside the package", reasons=[{"package": repo, "reason": "symlink in variant"}])
        out[rel] = Path(path).read_bytes()
    return out


def _shown(path: Path) -> str:
    """``path`` as a command argument that works from the current folder: relative when it is
    below it, else absolute; shell-quoted."""
    import os  # noqa: PLC0415
    import shlex  # noqa: PLC0415

    try:
        rel = os.path.relpath(path)
    except (OSError, ValueError):
        rel = str(path)
    return shlex.quote(str(path) if rel == ".." or rel.startswith("../") else rel)


def derive_path_package(project: Project, pkg: Package, policy=None) -> LockedPackage:
    """A path package as `frt lock` pins it now, from its source under the project
    (content digest, version, each variant's metadata facts, and its publisher signatures under
    ``policy``, a ``frt_dist.documents.publisher_policy.PublisherPolicy``). Raises ``KernelUnavailable``."""
    return _Locker(project).lock_package_path(pkg, policy)


def judge_signature(repo: str, v: LockedVariant, metadata: bytes, bundle: bytes | None, policy) -> LockedVariant:
    """``v`` with its publisher signature recorded, after ``bundle`` (``metadata.json.sigstore``'s
    bytes, ``None`` when the variant has none) verified over ``metadata`` under ``policy`` (docs/reference.md#publisher-signatures).
    Raises ``SignatureRefused``: a bundle that does not verify or names a signer the policy does not
    accept, or no bundle where the policy requires one. No policy and no bundle: ``v`` unchanged."""
    if policy is None or policy.signature == "off":
        return v
    from ..provenance.publisher import SignatureRefused, signature_record, verify_bundle  # noqa: PLC0415

    if bundle is None:
        if policy.signature == "required":
            raise SignatureRefused(
                f"package {repo!r} variant {v.name!r}: unsigned (no {BUNDLE}), and the manifest requires a "
                f"publisher signature (signature = \"required\"); signer found: none",
                repo=repo, variant=v.name, reason="unsigned; the policy requires a signature",
                hints=["ask the publisher for signed builds, or review the package and set "
                       "`signature = \"optional\"` for it in the manifest"])
        return v
    facts = verify_bundle(metadata, bundle, policy.signer, repo=repo, variant=v.name)
    return replace(v, signature=signature_record(bundle, facts, policy))


MAX_BUNDLE_BYTES = 1 << 20  # a Sigstore bundle is a few KB: a certificate, a log entry, a signature


def _read_bundle(vdir: Path, pkg: Package, policy) -> bytes | None:
    """A path package variant's ``metadata.json.sigstore`` bytes (``None``: there is none, or the
    policy reads none). A symlink is refused: its target is not part of the package."""
    if policy is None or policy.signature == "off":
        return None
    path = vdir / BUNDLE
    if not path.is_symlink() and not path.exists():
        return None
    if path.is_symlink() or not path.is_file():
        raise KernelUnavailable(f"package {pkg.repo!r}: {pkg.path}/build/{vdir.name}/{BUNDLE} is not a regular file "
                                "(a symlink's target is not part of the package)",
                                reasons=[{"package": pkg.repo, "variant": vdir.name, "reason": f"{BUNDLE} is not a regular file"}])
    try:
        return read_bytes(path, KernelUnavailable, f"{pkg.path}/build/{vdir.name}/{BUNDLE}", limit=MAX_BUNDLE_BYTES)
    except KernelUnavailable as exc:
        raise KernelUnavailable(f"package {pkg.repo!r}: {exc}", reasons=exc.reasons) from None


def _warn(msg: str) -> None:
    """What ``lock_model`` does with a rejected receipt when its caller passes no ``warn``: an
    ``FrtWarning`` attributed to that caller (``frt`` shows it as ``warning: <msg>``)."""
    warnings.warn(msg, FrtWarning, stacklevel=3)


def lock_model(project: Project, model: str, *, check: bool = False, strict: bool = False, hub=None,
               upgrade: set[str] | None = None, warn=None, progress=None,
               session: LockSession | None = None, upgrade_release: bool = False,
               allow_loss: bool = False) -> LockResult:
    """Lock one model. With ``check``, nothing is written and ``stale`` says why. Every package is
    tried; when any fails, ``LockFailed`` names each (and nothing is written). ``session`` shares
    Hub fetches across the models of one run (``LockSession``).

    The new route index is compared with the lockfile it replaces (``result.coverage``): a route
    lost in a cell, or a state dropped to ``supported_correct``, raises ``CoverageLoss`` and leaves
    that lockfile as it was, unless ``allow_loss``. A first lock has nothing to lose.

    ``progress``, when given, receives ``{"event": "package", "model", "repo", "done", "total"}``
    after each package is pinned (the Hub requests happen there)."""
    warn = warn or _warn
    mpath = project.manifest_path(model)
    mlabel = project.rel(mpath)
    manifest = Manifest.read(mpath, label=mlabel)
    if manifest.model != model:
        from ..errors import ManifestError  # noqa: PLC0415

        raise ManifestError(f"{mlabel}: model: is {manifest.model!r} but the file is named {model}.toml")
    lpath = project.lockfile_path(model)
    old = None
    old_problem = None
    if lpath.exists():
        try:
            old = Lockfile.read(lpath, label=project.rel(lpath))
        except LockfileError as exc:
            old_problem = str(exc)
    locker = _Locker(project, hub=hub, upgrade=upgrade, session=session)
    rel = None
    if manifest.release is not None:  # a Hub release's receipts and the package pins they were measured on
        from . import release as release_view  # noqa: PLC0415

        rel = release_view.for_lock(project, manifest, old, upgrade=upgrade_release)
    base = rel.package_base(old) if rel is not None else old
    packages, failures = {}, []
    for repo, pkg in sorted(manifest.packages.items()):
        try:
            packages[repo] = locker.lock_package(manifest, pkg, base)
        except FrtError as exc:
            failures.append((repo, exc))
        if progress:
            progress({"event": "package", "model": model, "repo": repo, "done": len(packages) + len(failures),
                      "total": len(manifest.packages)})
    if failures:
        raise LockFailed(model, failures)
    locker.lock_depends(manifest, packages, base)

    lf = Lockfile(model=model, manifest_file=mlabel, manifest=manifest, packages=packages, receipts={},
                  rejected=[], index={})
    policy = manifest.receipt_policy
    keys = {}
    if policy is not None:  # the signers' keys (docs/reference.md#receipt-signatures), read once and pinned in the lock
        from ..provenance.signing import read_policy_keys  # noqa: PLC0415

        keys = read_policy_keys(project.root, policy, manifest_file=mlabel)
        lf.receipt_keys = {rel: k.to_toml() for rel, k in keys.items()}
    accepted: dict[str, Receipt] = {}
    warnings = []
    kinds: dict[str, str] = {}
    # keyid -> the key file a previous lock pinned it from: an envelope by a key the policy no
    # longer lists is named by that file, not by a bare keyid
    known = {pin.get("keyid"): kf for kf, pin in (old.receipt_keys if old else {}).items() if isinstance(pin, dict)}
    read = locker.receipts_for(manifest) + (rel.receipts() if rel is not None else [])
    for label, rec, path in read:
        ours = rel is None or not rel.owns(label)  # a release's receipt always needs a signer the policy names
        if isinstance(rec, ReceiptInvalid):
            reason = str(rec).removeprefix(f"{label}: ")
            dig = rejected_digest(path)
            kinds[dig] = "invalid"
        else:
            problems = receipt_verdict(lf, rec)
            kind = ("pins" if lf.pin_problems(rec) else "receipt") if problems else None
            if problems and not ours and kind == "receipt":  # a route the release changed: said as the release's
                theirs = rel.route_digests().get(rec.route)
                ours_now = manifest.routes[rec.route].digest if rec.route in manifest.routes else None
                before = old.manifest.routes.get(rec.route) if old is not None else None
                mine_unchanged = before is not None and before.digest == ours_now  # not edited here since the last lock
                if theirs is not None and theirs == rec.cell.get("route-digest") and theirs != ours_now and mine_unchanged:
                    mine = short_digest(ours_now) if ours_now else "no such route"
                    problems = [f"measured on the release's definition of route {rec.route!r} (route digest "
                                f"{short_digest(theirs)}), not this manifest's ({mine}): the release changed the route"]
                    kind = "release-route"
            if not problems and not ours and policy is None:
                problems = [release_view.NO_POLICY]
                kind = "release-untrusted"
            if (not problems and policy is not None and (policy.covers(rec.device_class) or not ours)
                    and rec.digest not in lf.signatures):
                from ..provenance.signing import check_receipt, signature_files  # noqa: PLC0415

                signed, why = check_receipt(rec, path, label, policy, keys, known=known)
                if signed is None:
                    problems = [why]
                    kind = "signature" if signature_files(path) else "unsigned"
                else:
                    lf.signatures[rec.digest] = signed.row(rec.digest, label)
            if not problems:
                accepted.setdefault(rec.digest, rec)
                continue
            reason, dig = "; ".join(problems), rec.digest
            kinds.setdefault(dig, kind)
        entry = {"digest": dig, "file": label, "reason": reason}
        if not isinstance(rec, ReceiptInvalid):
            entry.update(route=rec.route, phase=rec.cell["phase"], **{"device-class": rec.key.device_class})
        lf.rejected.append(entry)
        warnings.append(f"{label}: {reason}")
    lf.receipts = accepted
    lf.index = derive_index(accepted.values())
    lf.release = rel.record() if rel is not None else None
    data = lf.render()
    defaults = default_gate_routes(manifest, [rec for _, rec, _ in read if isinstance(rec, Receipt)])
    for rname in defaults:
        warn(f"{mlabel}: route {rname!r} declares no gate: its certified_fast receipts are judged against the "
             f"default min-speedup {DEFAULT_MIN_SPEEDUP:g} (the speedup interval's low end must reach it); declare "
             f"`gate = {{ min-speedup = X }}` in [routes.{rname}] to choose the effect it must show")
    result = LockResult(model, lpath, lf, data, warnings=warnings, rejection_kinds=kinds,
                        release=release_view.change(old, lf) if rel is not None else None, default_gates=defaults)
    same = old is not None and lpath.read_bytes() == data
    if not same:  # (an unreadable old lockfile is replaced like a missing one: nothing to compare)
        result.coverage = coverage_diff(old, lf)
    if rel is not None:  # online: a newer commit of the branch, or a newer version (advice, never a failure)
        from ..release.upgrade import news  # noqa: PLC0415

        result.release_news = news(rel.fetched.repo, rel.fetched.version, rel.fetched.commit)
    if read and not accepted and not result.coverage.losses and not allow_loss and not check and not (strict and warnings):
        # receipts, and none accepted: a lock that routes no cell passes CI and fails at start-up;
        # refused, each rejection named once by the error (so not warned about as well). Where the
        # lock it replaces had cells, the coverage rule below refuses it, naming each cell lost.
        raise NothingAccepted(result, project.rel(lpath), nothing_hints(result, project))
    refused = bool(result.coverage.losses) and not allow_loss and not check and not (strict and warnings)
    named = {c.file for c in result.coverage.losses if c.cause == "rejected"} if refused else set()
    for w in warnings:  # a rejection the coverage refusal names (one line per lost cell) is not warned about too
        if not any(w.startswith(f"{f}: ") for f in named if f):
            warn(w)
    if strict and warnings:
        raise LockfileError(f"{len(warnings)} receipt(s) rejected under --strict", exit_code=1,
                            reasons=[{"file": r["file"], "reason": r["reason"]} for r in lf.rejected])
    if check:
        result.stale = _stale_reasons(old, old_problem, lf, lpath, data, project)
        return result
    if result.coverage.losses and not allow_loss:
        result.repinned = _repinned(manifest, old, lf) if old is not None else {}
        raise CoverageLoss(result, project.rel(lpath), loss_hints(result, project))
    if project.read_only:
        try:
            if same_bytes(lpath, data):
                return result
        except OSError:
            pass
        raise FrtError(f"the bundled defaults are read-only ({project.root})", hints=[
            "run frt in a project (a folder with manifests/) or set FRT_HOME"])
    try:
        result.written = write_atomic(lpath, data)
    except OSError as exc:  # read-only, full disk, no permission: the old lockfile stays, no temp file is left
        why = exc.strerror or str(exc)
        kept = "the previous lockfile is unchanged" if lpath.exists() else "no lockfile was written"
        raise UsageError(f"{project.rel(lpath)}: cannot be written: {why}; {kept}",
                         reasons=[{"model": model, "path": project.rel(lpath), "reason": why}],
                         hints=[f"move {project.rel(lpath)} away (frt replaces only a regular file), then run `frt lock` "
                                "again" if isinstance(exc, NotRegular) else
                                f"make {project.rel(lpath.parent)}/ writable (or free space on its disk), then run "
                                "`frt lock` again"]) from None
    return result


def _rejection_hint(kind: str | None, file: str | None, *, model: str, mfile: str, route: str, phase: str,
                    device_class: str, repinned: list[str] = (), release: dict | None = None,
                    sign: bool = False) -> str:
    """What to run for one rejected receipt, chosen by the kind of its rejection (commands in backticks,
    each one that succeeds where the hint is given). ``repinned``: the packages of ``route`` the lock
    being replaced does not pin as this one would (frt qualify measures with the written lock's pins)."""
    key = " --key KEY" if sign else ""  # under a [trust.receipts] policy covering the device class: signed
    requalify = (f"re-qualify on device class {device_class}: `frt qualify --model {model} --route {route} "
                 f"--phase {phase}{key}`, then `frt lock --model {model}`")
    if repinned and kind in (None, "receipt"):
        requalify = (f"route {route} now uses {', '.join(repinned)}, which the written lock does not pin yet (frt "
                     f"qualify measures with its pins): `frt lock --model {model} --allow-loss` first, then re-qualify "
                     f"on device class {device_class}: `frt qualify --model {model} --route {route} --phase "
                     f"{phase}{key}`, then `frt lock --model {model}`")
    if kind == "release-untrusted" or ((file or "").startswith("release/") and kind in ("signature", "unsigned")):
        return (f"the release's receipts need a signer your policy in {mfile} names: review the release's signers, "
                f"then `frt release trust --model {model}` (it names each one it adds), then `frt lock --model {model}`")
    if kind == "release-route" and release:
        return (f"the release {release['repo']} changed route {route}: review its change, then apply the release's "
                f"manifest (your trust tables and your own receipts are kept): `frt release upgrade --model {model} "
                f"@v{release['version']}`")
    if kind == "invalid":  # it does not read as a receipt: its route and cell are unknown
        return (f"{file} does not read as a receipt: remove it, or measure the route again (`frt qualify --model "
                f"{model} --route ROUTE`, then `frt lock --model {model}`)")
    if kind == "unsigned":
        return f"sign it with a key the policy lists: `frt sign --key KEY {file}`, then `frt lock --model {model}`"
    if kind == "signature":
        return (f"{file}: sign it again with a key the policy lists (`frt sign --key KEY {file}`), or list its "
                f"signer in [trust.receipts] of {mfile}; then `frt lock --model {model}`")
    if kind == "pins":  # qualify measures with the pins the lock holds: the new pins must be locked first
        return (f"{file} was measured on the pins this lock replaces; to measure the new ones: `frt lock --model "
                f"{model} --allow-loss`, then `frt qualify --model {model} --route {route} --phase {phase}{key}` on "
                f"device class {device_class}, then `frt lock --model {model}` (or keep the locked pins: no "
                "--upgrade-package, or the package's files as they were)")
    return requalify


def _repinned(manifest: Manifest, old: Lockfile, new: Lockfile) -> dict[str, list[str]]:
    """route -> its packages ``new`` pins otherwise than ``old`` (``LockResult.repinned``)."""
    out = {}
    for name in manifest.routes:
        repos = [repo for repo in manifest.route_packages(name) if repo in new.packages and (
            repo not in old.packages or (old.packages[repo].revision, old.packages[repo].version)
            != (new.packages[repo].revision, new.packages[repo].version))]
        if repos:
            out[name] = repos
    return out


def _signs(result: LockResult, device_class: str | None) -> bool:
    """Must a receipt of ``device_class`` be signed under the manifest's ``[trust.receipts]`` policy?"""
    policy = result.lockfile.manifest.receipt_policy
    return policy is not None and (device_class is None or policy.covers(device_class))


def loss_hints(result: LockResult, project: Project) -> list[str]:
    """What to run for each loss in ``result.coverage``, chosen by its cause and, for a rejected
    receipt, by the kind of its rejection (``result.rejection_kinds``); then how to accept it."""
    model, out = result.model, []
    mfile = result.lockfile.manifest_file
    rejected = {r.get("file"): r.get("digest") for r in result.lockfile.rejected}
    for c in result.coverage.losses:
        at = {"model": model, "mfile": mfile, "route": c.route, "phase": c.cell.phase,
              "device_class": c.cell.device_class, "repinned": result.repinned.get(c.route, []),
              "release": result.lockfile.release, "sign": _signs(result, c.cell.device_class)}
        if c.cause == "rejected":
            kind = result.rejection_kinds.get(c.receipt) or result.rejection_kinds.get(rejected.get(c.file))
            out.append(_rejection_hint(kind, c.file, **at))
        elif c.file and c.receipt and not names.problem("path", c.file):  # (a name from the old lock: checked)
            kept = superseded_path(project.root / c.file, c.receipt)
            if kept.is_file():
                out.append(f"re-qualifying kept the previous receipt as {project.rel(kept)}: to publish it again, "
                           f"move it back to {c.file} (with its .sig), then `frt lock --model {model}`")
            elif c.cause == "missing":
                out.append(f"restore {c.file} (from version control, or `frt receipts pull`), or "
                           + _rejection_hint(None, c.file, **at))
            else:
                out.append(_rejection_hint(None, c.file, **at))
        else:
            out.append(_rejection_hint(None, c.file, **at))
    out.append(f"to publish the smaller coverage on purpose: `frt lock --model {model} --allow-loss`")
    return list(dict.fromkeys(out))


def nothing_hints(result: LockResult, project: Project) -> list[str]:
    """What to run when no receipt of a model is accepted: one hint per kind of rejection (the
    first receipt of each kind named), then how to write the empty lock on purpose."""
    model, out = result.model, []
    mfile = result.lockfile.manifest_file
    for r in result.lockfile.rejected:
        kind = result.rejection_kinds.get(r.get("digest"))
        out.append(_rejection_hint(kind, r.get("file"), model=model, mfile=mfile, route=r.get("route") or "ROUTE",
                                   phase=r.get("phase") or "PHASE", device_class=r.get("device-class") or "?",
                                   release=result.lockfile.release, sign=_signs(result, r.get("device-class"))))
    out.append(f"to write a lock that routes no cell on purpose: `frt lock --model {model} --allow-loss`")
    return list(dict.fromkeys(out))


def _stale_reasons(old: Lockfile | None, old_problem: str | None, new: Lockfile, lpath: Path, data: bytes,
                   project: Project) -> list[str]:
    label = project.rel(lpath)
    if old is None:
        return [old_problem or f"{label} is missing"]
    try:
        if same_bytes(lpath, data):
            return []
    except OSError:  # replaced by a FIFO or a folder since it was read: stale, said below
        pass
    out = []
    if old.manifest.digest != new.manifest.digest:
        out.append(f"manifest {new.manifest_file} changed since {label} was written")
    for repo in sorted(set(old.packages) | set(new.packages)):
        a, b = old.packages.get(repo), new.packages.get(repo)
        if a is None:
            out.append(f"package {repo!r} is new")
        elif b is None:
            out.append(f"package {repo!r} was removed")
        elif a.revision != b.revision:
            out.append(f"package {repo!r}: locked revision {a.revision}, now {b.revision}")
        else:
            if a.trust != b.trust:
                out.append(f"package {repo!r}: trust decision {a.trust!r} in the lock, {b.trust!r} derived "
                           "from the manifest and the publisher facts")
            if a.publisher_trusted != b.publisher_trusted:
                out.append(f"package {repo!r}: publisher-trusted {_fact(a.publisher_trusted)} in the lock, "
                           f"{_fact(b.publisher_trusted)} now")
            if a.variants != b.variants:
                changed = sorted(n for n in set(a.variants) | set(b.variants) if a.variants.get(n) != b.variants.get(n))
                out.append(f"package {repo!r}: variant facts changed ({', '.join(changed)})")
            elif (a.source, a.version, a.path) != (b.source, b.version, b.path):
                out.append(f"package {repo!r}: source, version or path changed")
    old_files = {r.digest: r.file for r in old.receipts.values()}
    new_files = {r.digest: r.file for r in new.receipts.values()}
    old_by_file = {f: d for d, f in old_files.items()}
    new_by_file = {f: d for d, f in new_files.items()}
    for d in sorted(set(new_files) - set(old_files)):
        if new_files[d] not in old_by_file:
            out.append(f"receipt added: {new_files[d]}")
    now_rejected = {r["digest"]: r for r in new.rejected}
    rejected_files = {r["file"]: r for r in new.rejected}
    for d in sorted(set(old_files) - set(new_files)):
        f = old_files[d]
        if d in now_rejected:  # still there, the same bytes, but no longer accepted: say why
            out.append(f"receipt now rejected: {f}: {now_rejected[d]['reason']}")
        elif f in new_by_file:
            out.append(f"receipt rewritten: {f} ({short_digest(d)} in the lock, {short_digest(new_by_file[f])} now)")
        elif f in rejected_files:
            out.append(f"receipt rewritten and now rejected: {f} ({short_digest(d)} in the lock, "
                       f"{short_digest(rejected_files[f]['digest'])} now): {rejected_files[f]['reason']}")
        else:
            out.append(f"receipt removed: {f} (no longer among the receipts)")
    if {(r['digest'], r['reason']) for r in old.rejected} != {(r['digest'], r['reason']) for r in new.rejected}:
        out.append("the set of rejected receipts changed")
    if old.receipt_keys != new.receipt_keys:
        out.append("the receipt signers' keys ([trust.receipts] keys) changed: " + _keys_change(old.receipt_keys, new.receipt_keys))
    for d in sorted(set(old.signatures) | set(new.signatures)):
        a, b = old.signatures.get(d), new.signatures.get(d)
        if a != b:
            file = (b or a)["file"]
            out.append(f"receipt signature of {file}: " + ("added" if a is None else "removed" if b is None else
                                                           f"signer {a['signer']} in the lock, {b['signer']} now"
                                                           if a["signer"] != b["signer"] else "the signature changed"))
    for key in sorted(set(old.index) | set(new.index)):
        a, b = old.index.get(key), new.index.get(key)
        if (a.candidates if a else None) != (b.candidates if b else None):
            out.append(f"route index cell {cell_name(key)}: {_ranking(a)} in the lock, {_ranking(b)} derived")
    if old.release or new.release:
        from .release import stale_reasons  # noqa: PLC0415

        out += stale_reasons(old, new)
    if not out:
        out.append(f"{label} differs from what `frt lock` would write now")
    return out


def _keys_change(old: dict, new: dict) -> str:
    parts = []
    for rel in sorted(set(old) | set(new)):
        a, b = old.get(rel, {}).get("keyid"), new.get(rel, {}).get("keyid")
        if a != b:
            parts.append(f"{rel}: {a or 'not pinned'} in the lock, {b or 'not listed'} now")
    return "; ".join(parts) or "the pinned PEM text differs"


def _fact(v: bool | None) -> str:
    return "not recorded" if v is None else str(v).lower()


def _ranking(entry: IndexEntry | None) -> str:
    if entry is None:
        return "no cell"
    return "[" + ", ".join(f"{c.route} {c.state} {short_digest(c.receipt)}" for c in entry.candidates) + "]"
