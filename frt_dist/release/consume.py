"""Releases on the Hub: a model's manifest, its accepted receipts (with their signature files) and its
lockfile, published as one commit on branch ``v<N>`` of a Hub *model* repo, and consumed by other
projects (``frt release push``, ``frt init --from``, a manifest's ``[release]`` table).

Publishing (``frt_dist.release.push``): the project's lock must be up to date (``frt lock --check``), no accepted receipt
may rest on a path package (a folder only the publisher has), and the upload is one
``huggingface_hub`` commit whose ``parent_commit`` is the branch head read before it: a branch that
moved meanwhile refuses the commit, nothing is half-published. Files of this model no longer in the
release (a receipt the lock dropped) are deleted in the same commit; other models' files stay.

Consuming: ``frt lock`` reads the release at a commit (``Fetched``): the branch's head the first time
or under ``--upgrade-release``, else the commit the lock pins. The release's receipts are judged like
the project's own, with one rule more: a release receipt is accepted only when signed by a signer the
*project's* ``[trust.receipts]`` policy names (``device-classes`` does not exempt it); with no policy
every one is rejected (``NO_POLICY``). The release's lockfile supplies the package pins its receipts
were measured on (never its trust facts: those are the consumer's to derive). The lock records the
release as a ``[release]`` table: ``repo``, ``version``, ``commit``, the sha256 of every release file
read (``files``: what ``frt mirror`` carries and ``frt verify --mirror`` checks), and for each cell of
the route index whose evidence serves it (``cells``: ``release`` or ``project``).

Trust is never taken silently: the signers a release's lockfile names are trusted only by
``frt release trust`` (or ``frt init --from ... --trust``), which writes each key's PEM under
``keys/<org>/<name>/`` and adds it (or the Sigstore identity) to the manifest's policy, printing each.
A later commit signed by a key the policy does not list is rejected until the consumer runs it again.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from .. import settings
from ..base import names
from ..base.record import dataclass, field
from ..distribution.hub import RELEASE_REPO_TYPE as REPO_TYPE
from ..distribution.hub import api, branch_commit, hub_call
from ..documents.lock_release import NO_POLICY, is_release_label, label_prefix, release_receipts  # noqa: F401 (re-exported)
from ..errors import (
    FrtError,
    ReleaseError,
    UsageError,
)

__all__ = ["Fetched", "LockRelease", "ReleaseError", "parse_ref", "fetch", "for_lock", "trust", "signers",
           "refused_signers", "identity_problem", "change", "change_lines", "NO_POLICY", "REPO_TYPE",
           "is_release_label", "label_prefix",
           "mirror_files", "mirror_problems", "stale_reasons", "release_manifest", "models_of", "api", "hub_call",
           "branch_commit", "SIG_SUFFIXES", "code_trust", "release_code_trust", "store_files", "release_key"]

MAX_FILE_BYTES = 16 << 20  # a release file (manifest, receipt, signature, lockfile) is read whole, at most this
_REF = re.compile(r"^hf://([^@/]+/[^@/]+)(?:@v(\d+))?$")
_HEX40 = re.compile(r"^[0-9a-f]{40}$")
SIG_SUFFIXES = (".sig", ".sigstore")


def parse_ref(url: str, *, flag: str = "URL", need_version: bool = False) -> tuple[str, int | None]:
    """``hf://ORG/NAME[@vN]`` -> (repo, version or None); a bad one is a usage error (exit 2)."""
    m = _REF.match(url or "")
    if m is None or names.problem("repo", m.group(1)):
        raise UsageError(f"{flag} {url!r}: expected hf://ORG/NAME" + ("@vN" if need_version else "[@vN]"),
                         hints=["for example hf://acme/qwen-kernels@v1"])
    if need_version and m.group(2) is None:
        raise UsageError(f"{flag} {url!r}: name the version: hf://{m.group(1)}@v<N>",
                         hints=[f"hf://{m.group(1)}@v1"])
    return m.group(1), None if m.group(2) is None else int(m.group(2))


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


# ---------------------------------------------------------------------------
# reading a release at a commit


@dataclass
class Fetched:
    """The release files of one model at one commit: where they lie and the sha256 of each."""

    repo: str
    version: int
    commit: str
    model: str
    root: Path  # the snapshot folder (hub cache or mirror layout)
    files: dict[str, str] = field(default_factory=dict)  # release path -> sha256:<hex>

    def path(self, rel: str) -> Path:
        return self.root / rel

    def read(self, rel: str) -> bytes:
        from ..documents.schema import read_bytes  # noqa: PLC0415

        return read_bytes(self.root / rel, ReleaseError, f"{self.repo}@{self.commit[:12]}/{rel}", limit=MAX_FILE_BYTES)


def _wanted(model: str, rel: str) -> bool:
    if rel in (f"manifests/{model}.toml", f"lockfiles/{model}.lock"):
        return True
    return rel.startswith(f"receipts/{model}/") and rel.endswith((".json", ".json.sig", ".json.sigstore"))


_LAYOUT = ("manifests", "lockfiles", "receipts")  # the release layout's folders (any model's)


def _in_layout(rel: str) -> bool:
    """Whether a path a Hub lists claims a place in the release layout (whatever its name does after)."""
    return re.split(r"[/\\]", rel.lstrip("/\\"), maxsplit=1)[0] in _LAYOUT


def cache_folder(repo: str) -> str:
    """The hub-cache folder of a model repo: ``models--<org>--<name>``."""
    return "models--" + "--".join(repo.split("/"))


MAX_REF_BYTES = 4096  # a mirror's refs/v<N>: one commit id


def _read(path: Path, label: str) -> bytes:
    """A release file of a mirror or a hub cache, read only when it is a regular file (a FIFO, a
    device or a folder there is refused, never opened for reading) and at most ``MAX_FILE_BYTES``."""
    from ..documents.schema import read_bytes  # noqa: PLC0415

    try:
        return read_bytes(path, ReleaseError, label, limit=MAX_FILE_BYTES)
    except ReleaseError as exc:
        exc.hints.append(f"remove {path} (a damaged or planted copy); `frt mirror DIR` where the Hub is reachable "
                         "writes the release's files again")
        raise


def _scan(root: Path, model: str, label: str, only=None) -> tuple[dict[str, str], list[str]]:
    """The sha256 of each release file of ``model`` under the snapshot folder ``root`` (each read as
    ``_read`` reads), and the files there that ``only`` (the files a lock records at this commit;
    None: every file) leaves out, not read."""
    out, extra = {}, []
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if not _wanted(model, rel) or p.is_dir():
            continue
        if (only is not None and rel not in only) or names.problem("path", rel):
            extra.append(rel)
            continue
        out[rel] = _sha256(_read(p, f"{label}/{rel}"))
    return out, extra


def _local_snapshot(repo: str, commit: str, want: dict[str, str] | None, dirs: list[Path]) -> Path | None:
    """A snapshot folder of ``repo`` at ``commit`` in a mirror or a hub cache holding every file of
    ``want`` with its recorded sha256 (``want`` None: the folder, whatever it holds)."""
    for d in dirs:
        snap = d / cache_folder(repo) / "snapshots" / commit
        if not snap.is_dir():
            continue
        if want is None:
            return snap
        try:
            if all(_sha256(_read(snap / rel, rel)) == sha for rel, sha in want.items()):
                return snap
        except (OSError, FrtError):
            continue
    return None


def _local_ref(repo: str, version: int, dirs: list[Path]) -> str | None:
    from ..documents.schema import read_bytes  # noqa: PLC0415

    for d in dirs:
        p = d / cache_folder(repo) / "refs" / f"v{version}"
        if not os.path.lexists(p):
            continue
        try:  # a FIFO there is refused, never waited on
            data = read_bytes(p, ReleaseError, f"release {repo!r}: {p}", limit=MAX_REF_BYTES)
        except ReleaseError as exc:
            exc.hints.append("remove it; `frt mirror DIR` where the Hub is reachable writes the mirror's release again")
            raise
        try:
            text = data.decode("ascii").strip()
        except UnicodeDecodeError:
            continue
        if _HEX40.match(text):
            return text
    return None


def _dirs(mirror: str | None) -> list[Path]:
    from ..distribution.sources import cache_dirs  # noqa: PLC0415

    out = []
    if mirror and "://" not in mirror:
        out.append(Path(mirror))
    return out + cache_dirs()


def _hub_files(repo: str, commit: str, model: str) -> list[str]:
    """The release files of ``model`` the Hub lists at ``commit`` (one recursive listing). A listed
    file that claims a place in the release layout with a name that is not a plain relative path
    there (``..``, absolute, a control character: docs/reference.md#names) is refused, naming it:
    nothing of the release is read then."""
    from huggingface_hub.hf_api import RepoFile  # noqa: PLC0415

    from ..documents.lock_release import shown  # noqa: PLC0415

    client = api()
    listed = hub_call(repo, f"list files at {commit[:12]}", lambda: [
        e.path for e in client.list_repo_tree(repo, revision=commit, repo_type=REPO_TYPE, recursive=True)
        if isinstance(e, RepoFile)])
    out = []
    for rel in listed:
        if not isinstance(rel, str) or not _in_layout(rel):
            continue
        why = names.problem("path", rel)
        if why:
            raise ReleaseError(f"release {repo!r} at {commit[:12]}: the Hub lists a file {shown(rel)!r} whose name "
                               f"{why}: not a file of the release layout (manifests/, lockfiles/, receipts/); "
                               "nothing was read or written",
                               reasons=[{"repo": repo, "commit": commit, "file": shown(rel), "reason": why}],
                               hints=["ask the publisher to remove the file and push the release again"])
        if _wanted(model, rel):
            out.append(rel)
    return sorted(out)


def fetch(repo: str, version: int, model: str, *, commit: str | None = None, recorded: dict | None = None,
          mirror: str | None = None) -> Fetched:
    """The release files of ``model`` in ``repo`` at ``commit`` (None: the head of branch ``v<version>``).
    A commit whose recorded files (``recorded``: path -> sha256) are all in a mirror or the hub cache
    asks the Hub nothing; offline (``HF_HUB_OFFLINE``) the mirror and the caches are all there is.
    With ``recorded`` (the commit a lock pins) the release is exactly those files: any other file
    the snapshot folder holds or the Hub lists at that commit is left out, unread, and named in an
    ``FrtWarning`` (only an upgrade reads the release anew)."""
    from ..distribution.sources import is_offline  # noqa: PLC0415

    dirs = _dirs(mirror)
    offline = is_offline()
    if commit is None:
        commit = _local_ref(repo, version, dirs) if offline else branch_commit(api(), repo, version)
        if commit is None:
            raise ReleaseError(f"release {repo!r}: no branch v{version}" + (" in the mirror or the hub cache "
                                                                             "(offline)" if offline else ""),
                               hints=["publish it (`frt release push`), or change [release] version"]
                               + (["mirror it where the Hub is reachable: `frt mirror DIR`"] if offline else []))
    root = _local_snapshot(repo, commit, recorded, dirs) if recorded else None
    if root is None and offline:
        root = _local_snapshot(repo, commit, None, dirs)
        if root is None:
            raise ReleaseError(f"release {repo!r}: commit {commit} is not in the mirror or the hub cache, and the "
                               "Hub is offline (HF_HUB_OFFLINE)",
                               hints=["mirror the release where the Hub is reachable (`frt mirror DIR`), and name "
                                      "the mirror ([tool.frt] mirror, FRT_MIRROR)"])
    listed_extra = []
    if root is None:
        import sys  # noqa: PLC0415

        from huggingface_hub import snapshot_download  # noqa: PLC0415
        from huggingface_hub.utils import disable_progress_bars  # noqa: PLC0415

        if not sys.stderr.isatty():  # progress on a terminal only (docs/reference.md#common-options)
            disable_progress_bars()
        take = _hub_files(repo, commit, model)
        if recorded:
            listed_extra = [rel for rel in take if rel not in recorded]
            take = [rel for rel in take if rel in recorded]
        from ..distribution.sources import cache_dirs  # noqa: PLC0415

        # the exact names (plain relative paths: no pattern character), not the release's patterns, into the
        # hub cache frt looks in (huggingface_hub's own, as the environment names it now)
        root = Path(hub_call(repo, f"files at {commit[:12]}", lambda: snapshot_download(
            repo, repo_type=REPO_TYPE, revision=commit, allow_patterns=take or ["/"], cache_dir=cache_dirs()[-1],
            endpoint=settings.value("HF_ENDPOINT"))))
    files, extra = _scan(root, model, f"{repo}@{commit[:12]}", only=recorded or None)
    got = Fetched(repo, version, commit, model, root, files)
    if recorded:
        bad = sorted(rel for rel, sha in recorded.items() if got.files.get(rel) != sha)
        if bad:
            raise ReleaseError(f"release {repo!r} at {commit[:12]}: {', '.join(bad)} differ from the sha256 the "
                               "lock records (a damaged mirror or cache)",
                               hints=["remove the damaged copy and run `frt lock` again where the Hub is reachable"])
        extra = sorted(set(extra) | set(listed_extra))
        if extra:
            import warnings  # noqa: PLC0415

            from ..documents.lock_release import shown  # noqa: PLC0415
            from ..errors import FrtWarning  # noqa: PLC0415

            warnings.warn(f"release {repo} at {commit[:12]}: {len(extra)} file(s) the lock does not record at this "
                          f"commit ignored: {', '.join(shown(x) for x in extra)} (a commit's files never change on "
                          "the Hub; `frt lock --upgrade-release` reads the release anew and reports each change)",
                          FrtWarning, stacklevel=2)
    return got


# ---------------------------------------------------------------------------
# frt lock


class LockRelease:
    """The release one ``frt lock`` of a model reads: its receipts, its package pins, and the
    ``[release]`` record the lock writes."""

    def __init__(self, fetched: Fetched, *, previous: dict | None):
        self.fetched = fetched
        self.previous = previous  # the [release] record of the lock this one replaces
        self.prefix = label_prefix(fetched.repo)

    def owns(self, label: str) -> bool:
        return label.startswith(self.prefix)

    def receipts(self) -> list[tuple[str, object, Path]]:
        """(label, Receipt or its ReceiptInvalid, path) for every receipt of the release."""
        from ..documents.receipt import Receipt  # noqa: PLC0415
        from ..errors import ReceiptInvalid  # noqa: PLC0415

        out = []
        for rel in sorted(self.fetched.files):
            if not rel.endswith(".json"):
                continue
            label, path = self.prefix + rel, self.fetched.path(rel)
            try:
                out.append((label, Receipt.read(path, label=label), path))
            except ReceiptInvalid as exc:
                out.append((label, exc, path))
        return out

    def package_base(self, old):
        """The lock whose package pins `frt lock` starts from: the project's own while it pins this
        same release commit, else the release's lockfile (the pins its receipts were measured on),
        with every publisher fact dropped so that trust is derived again from the consumer's manifest."""
        if old is not None and self.previous and self.previous.get("commit") == self.fetched.commit:
            return old
        rel = f"lockfiles/{self.fetched.model}.lock"
        if rel not in self.fetched.files:
            return old
        from ..base.record import replace  # noqa: PLC0415
        from ..documents.lockfile import Lockfile  # noqa: PLC0415
        from ..errors import LockfileError  # noqa: PLC0415

        try:
            theirs = Lockfile.read(self.fetched.path(rel), label=self.prefix + rel)
        except LockfileError:
            return old
        theirs.packages = {r: replace(p, publisher_trusted=None) for r, p in theirs.packages.items()
                           if p.source == "hub"}
        return theirs

    def route_digests(self) -> dict[str, str]:
        """route -> route digest in the release's own manifest ({} when it has none that reads)."""
        if not hasattr(self, "_digests"):
            from ..documents.manifest import Manifest  # noqa: PLC0415
            from ..documents.schema import parse_toml  # noqa: PLC0415
            from ..errors import ManifestError  # noqa: PLC0415

            rel = f"manifests/{self.fetched.model}.toml"
            self._digests = {}
            if rel in self.fetched.files:
                try:
                    m = Manifest.from_dict(parse_toml(self.fetched.read(rel), ManifestError, self.prefix + rel),
                                           file=self.prefix + rel)
                    self._digests = {name: r.digest for name, r in m.routes.items()}
                except FrtError:
                    pass
        return self._digests

    def record(self) -> dict:
        f = self.fetched
        return {"repo": f.repo, "version": f.version, "commit": f.commit, "files": dict(sorted(f.files.items()))}


def for_lock(project, manifest, old, *, upgrade: bool = False) -> LockRelease | None:
    """The release ``manifest`` names, read at the commit the lock pins (or, the first time, under
    ``upgrade``, or when the manifest names another release or version, at the branch's head)."""
    ref = manifest.release
    if ref is None:
        return None
    prev = old.release if old is not None else None
    pinned = prev if prev and prev.get("repo") == ref.repo and prev.get("version") == ref.version else None
    mirror = settings.value("FRT_MIRROR") or project.mirror
    if pinned and not upgrade:
        fetched = fetch(ref.repo, ref.version, manifest.model, commit=pinned["commit"],
                        recorded=pinned.get("files") or None, mirror=mirror)
    else:
        fetched = fetch(ref.repo, ref.version, manifest.model, mirror=mirror)
    return LockRelease(fetched, previous=prev)


def change(old, new) -> dict | None:
    """What a re-lock changed in the release (None when it pins the same commit): the commit from ->
    to, and each receipt added, removed or edited (by its release path; file sha256 before and after),
    with its verdict in the new lock (``accepted <digest>`` or ``rejected: <reason>``)."""
    a = old.release if old is not None else None
    b = new.release
    if not b or (a and a.get("commit") == b["commit"] and a.get("repo") == b["repo"]):
        return None
    before = {k: v for k, v in (a or {}).get("files", {}).items() if k.endswith(".json")} if a and a.get("repo") == b["repo"] else {}
    after = {k: v for k, v in b["files"].items() if k.endswith(".json")}
    sigs_a = {k: v for k, v in (a or {}).get("files", {}).items() if k.endswith(SIG_SUFFIXES)}
    sigs_b = {k: v for k, v in b["files"].items() if k.endswith(SIG_SUFFIXES)}
    prefix = label_prefix(b["repo"])
    accepted = {rec.file: rec.digest for rec in new.receipts.values()}
    rejected = {r["file"]: r["reason"] for r in new.rejected}

    def verdict(rel: str) -> str:
        label = prefix + rel
        if label in accepted:
            return f"accepted {accepted[label]}"
        return "rejected: " + rejected.get(label, "not read")

    out = {"repo": b["repo"], "version": b["version"], "from": (a or {}).get("commit"), "to": b["commit"],
           "added": [], "removed": [], "edited": []}
    for rel in sorted(set(before) | set(after)):
        x, y = before.get(rel), after.get(rel)
        sig_changes = [{"file": rel + s, "from": sigs_a.get(rel + s), "to": sigs_b.get(rel + s)}
                       for s in SIG_SUFFIXES if sigs_a.get(rel + s) != sigs_b.get(rel + s)]
        if x is None:
            out["added"].append({"file": rel, "sha256": y, "verdict": verdict(rel)})
        elif y is None:
            out["removed"].append({"file": rel, "sha256": x})
        elif x != y or sig_changes:
            out["edited"].append({"file": rel, "from": x, "to": y, "signature-changed": bool(sig_changes),
                                  "signatures": sig_changes, "verdict": verdict(rel)})
    return out


def change_lines(ch: dict, *, reasons: bool = True) -> list[str]:
    """The upgrade report, one line per change (``reasons`` False: a rejection's reason is left to the
    error or warning line that gives it, as in a refused lock)."""
    from ..base.canonical import short_digest, short_digests  # noqa: PLC0415

    def verdict(v: str) -> str:  # "accepted <receipt digest>" / "rejected: <reason>", the digests labelled and short
        if v.startswith("accepted "):
            return f"accepted (receipt digest {short_digest(v.removeprefix('accepted '))})"
        return short_digests(v) if reasons else "rejected (its reason below)"

    head = f"release {ch['repo']} v{ch['version']}: "
    lines = [head + (f"commit {ch['from'][:12]} -> {ch['to'][:12]}" if ch["from"] else f"pinned at commit {ch['to'][:12]}")]
    def sig(d):  # a signature file's sha256 on one side of a change, or its absence
        return f"file sha256 {short_digest(d)}" if d else "none"

    for it in ch["added"]:
        lines.append(f"  + {it['file']} (file sha256 {short_digest(it['sha256'])}): {verdict(it['verdict'])}")
    for it in ch["edited"]:
        parts = [f"edited: file sha256 {short_digest(it['from'])} -> {short_digest(it['to'])}"] if it["from"] != it["to"] \
            else []
        parts += [f"signature {s['file'].rsplit('/', 1)[-1]} changed: {sig(s['from'])} -> {sig(s['to'])}"
                  for s in it.get("signatures", [])]
        lines.append(f"  ~ {it['file']} ({'; '.join(parts)}): {verdict(it['verdict'])}")
    for it in ch["removed"]:
        lines.append(f"  - {it['file']} (file sha256 {short_digest(it['sha256'])}): removed from the release")
    return lines


def stale_reasons(old, new) -> list[str]:
    """``frt lock --check``: why the release part of ``old`` is not what ``new`` derives."""
    a, b = old.release, new.release
    if a == b or (a and b and {k: a.get(k) for k in ("repo", "version", "commit", "files")}
                  == {k: b.get(k) for k in ("repo", "version", "commit", "files")}):
        return []
    if not a:
        return [f"release {b['repo']} v{b['version']} is not pinned by the lock"]
    if not b:
        return [f"the lock pins release {a['repo']}, which the manifest no longer names"]
    if a.get("commit") != b["commit"]:
        return [f"release {b['repo']}: commit {a.get('commit')} in the lock, {b['commit']} now"]
    return [f"release {b['repo']}: its files differ from those the lock records"]


# ---------------------------------------------------------------------------
# trust: the explicit step


def _release_digests(fetched: Fetched) -> set[str]:
    """The receipt digests of the receipts the release itself holds (its ``receipts/<model>/*.json``):
    a signature row of its lockfile for any other receipt signs nothing of this release."""
    from ..base.canonical import digest  # noqa: PLC0415
    from ..documents.schema import json_loads  # noqa: PLC0415

    out = set()
    for rel in fetched.files:
        if rel.endswith(".json"):
            try:
                out.add(digest(json_loads(fetched.read(rel))))
            except (FrtError, ValueError, TypeError):
                continue  # not a receipt: `frt lock` rejects it, naming it
    return out


def identity_problem(identity, issuer) -> str | None:
    """Why a Sigstore signer from a release cannot be printed as is or trusted: a control (or other
    unprintable) character, which could rewrite what a terminal shows; an empty identity or
    issuer, or an issuer that is not an https URL (no manifest could hold it). ``None`` when fine."""
    if not isinstance(identity, str) or not isinstance(issuer, str):
        return "its identity or issuer is not a string"
    if not all(c.isprintable() for c in identity + issuer):
        return "it holds a control character: a Sigstore identity or issuer with a control character is never trusted"
    if not identity:
        return "its identity is empty"
    if not issuer:
        return f"identity {identity!r} with an empty issuer"
    if not issuer.startswith("https://"):
        return f"its issuer {issuer!r} is not an OIDC issuer URL (https://...)"
    return None


def signers(fetched: Fetched) -> list[dict]:
    """The signers the release's lockfile records for the receipts the release holds: ``{"kind": "key",
    "keyid", "pem", "receipts"}`` (the PEM as that lock pins it, checked against its keyid) or
    ``{"kind": "sigstore", "identity", "issuer", "receipts"}``; ``receipts`` counts the release's own
    receipt files each signs (a row for a receipt the release does not hold counts for nothing). A
    signer that cannot be trusted carries ``"refused"``: why (a PEM that is not the key its keyid
    names, an identity with a control character or an empty issuer); ``frt release trust`` refuses
    while any does."""
    from ..documents.lockfile import Lockfile  # noqa: PLC0415
    from ..errors import LockfileError  # noqa: PLC0415
    from ..provenance.signing import key_from_pin  # noqa: PLC0415

    rel = f"lockfiles/{fetched.model}.lock"
    if rel not in fetched.files:
        raise ReleaseError(f"release {fetched.repo!r} at {fetched.commit[:12]} has no {rel}: no signer to trust")
    try:
        theirs = Lockfile.read(fetched.path(rel), label=f"{fetched.repo}/{rel}")
    except LockfileError as exc:
        raise ReleaseError(f"release {fetched.repo!r}: {exc}") from None
    own = _release_digests(fetched)
    pems = {pin["keyid"]: (path, pin) for path, pin in theirs.receipt_keys.items()}
    found: dict[tuple, dict] = {}
    for row in theirs.signatures.values():
        if row.get("receipt") not in own:
            continue
        if row["kind"] == "key":
            kid = row["signer"]
            s = found.get(("key", kid))
            if s is None:
                s = found[("key", kid)] = {"kind": "key", "keyid": kid, "pem": None, "receipts": 0}
                if kid not in pems:
                    s["refused"] = f"its lockfile pins no public key (receipt-keys) for {kid}"
                else:
                    path, pin = pems[kid]
                    key, why = key_from_pin(path, pin)
                    if key is None:
                        s["refused"] = (f"the PEM its lockfile pins for {path} is not the key {kid} its signatures "
                                        f"name ({why})")
                    else:
                        s["pem"] = key.pem
        else:
            issuer = row.get("issuer")
            s = found.setdefault(("sigstore", row["signer"], issuer),
                                 {"kind": "sigstore", "identity": row["signer"], "issuer": issuer, "receipts": 0})
            why = identity_problem(row["signer"], issuer)
            if why:
                s["refused"] = why
        s["receipts"] += 1
    return [found[k] for k in sorted(found, key=lambda k: tuple(str(x) for x in k))]


def refused_signers(fetched: Fetched, found: list[dict]) -> ReleaseError | None:
    """The error ``frt release trust`` raises, before it writes anything, when a signer of ``found``
    (``signers``) cannot be trusted: each named, printed safely."""
    from ..documents.lock_release import shown  # noqa: PLC0415

    bad = [s for s in found if s.get("refused")]
    if not bad:
        return None
    who = [(f"key {shown(s['keyid'])}" if s["kind"] == "key" else
            f"identity {shown(s['identity'])} (issuer {shown(s['issuer'])})") + f": {shown(s['refused'])}" for s in bad]
    return ReleaseError(f"release {fetched.repo!r} at {fetched.commit[:12]}: its lockfile names {len(bad)} signer(s) frt "
                        "cannot trust; nothing was written:\n  " + "\n  ".join(who),
                        reasons=[{"repo": fetched.repo, "commit": fetched.commit, "signer": shown(s.get("keyid") or
                                                                                                   s.get("identity")),
                                  "reason": shown(s["refused"])} for s in bad],
                        hints=["ask the publisher to fix its lockfile and push again; trust no signer from this "
                               "release until then"])


def code_trust(fetched: Fetched) -> list[dict]:
    """The code trust the release's manifest declares (``release_code_trust``); [] when it has no
    manifest of the model."""
    from ..documents.schema import parse_toml  # noqa: PLC0415
    from ..errors import ManifestError  # noqa: PLC0415

    rel = f"manifests/{fetched.model}.toml"
    if rel not in fetched.files:
        return []
    return release_code_trust(parse_toml(fetched.read(rel), ManifestError, f"{fetched.repo}/{rel}"))


def _add_package_keys(text: str, repo: str, keys: dict) -> str | None:
    """``text`` (a manifest) with ``keys`` (trust, signature, signer) set in ``[packages."<repo>"]``
    (the lines added under its header, replacing any the table has); None where the table is written
    in a form this cannot edit (inline, dotted keys)."""
    import json  # noqa: PLC0415

    lines = text.splitlines(keepends=True)
    sec = _section(lines, f'packages."{repo}"')
    if sec is None:
        return None
    a, b = sec
    body = [ln for ln in lines[a:b] if not re.match(r"^\s*(" + "|".join(keys) + r")\s*=", ln)]
    add = []
    for k, v in keys.items():
        if isinstance(v, bool):
            add.append(f"{k} = {'true' if v else 'false'}\n")
        elif isinstance(v, str):
            add.append(f"{k} = {json.dumps(v)}\n")
        elif isinstance(v, dict) and all(isinstance(x, str) for x in v.values()):
            add.append(f"{k} = {{ " + ", ".join(f"{json.dumps(x)} = {json.dumps(y)}" for x, y in v.items()) + " }\n")
        else:
            return None
    lines[a:b] = add + body
    return "".join(lines)


def trust(project, model: str, fetched: Fetched) -> list[dict]:
    """Trust what the release trusts, in ``model``'s manifest: the signers of its receipts (each
    key's PEM written to ``keys/<org>/<name>/<keyid>.pub`` and listed under ``[trust.receipts] keys``,
    each Sigstore identity under ``identities``) and the code trust its manifest declares for each
    package this manifest uses (``trust = true``, and a publisher-signature policy). Returns one row
    per signer and per package with ``"added"`` true or false (already there). Nothing is written when
    the manifest cannot be edited in place."""
    from ..documents.manifest import Manifest  # noqa: PLC0415
    from ..documents.schema import load_toml  # noqa: PLC0415
    from ..errors import ManifestError  # noqa: PLC0415

    found = signers(fetched)
    refused = refused_signers(fetched, found)
    if refused is not None:
        raise refused
    code = code_trust(fetched)
    if not found and not any(c["kind"] == "package" for c in code):
        raise ReleaseError(f"release {fetched.repo!r} at {fetched.commit[:12]}: its lockfile records no receipt "
                           "signature: there is no signer to trust",
                           hints=["ask the publisher to sign the receipts (`frt sign`) under a [trust.receipts] "
                                  "policy and push again"])
    mpath = project.manifest_path(model)
    label = project.rel(mpath)
    data = load_toml(mpath, ManifestError, label)
    policy = data.get("trust", {}).get("receipts", {})
    keys, idents = list(policy.get("keys", [])), [dict(i) for i in policy.get("identities", [])]
    have = set()
    if keys:
        from ..provenance.signing import read_policy_keys  # noqa: PLC0415

        m = Manifest.read(mpath, label=label)
        have = {k.keyid for k in read_policy_keys(project.root, m.receipt_policy, manifest_file=label).values()}
    org, name = fetched.repo.split("/", 1)
    new_files, rows = {}, []
    for s in found:
        if s["kind"] == "key":
            rel = f"keys/{org}/{name}/{s['keyid'].removeprefix('sha256:')[:16]}.pub"
            added = s["keyid"] not in have
            if added:
                keys.append(rel)
                new_files[rel] = s["pem"].encode("ascii")
            rows.append({**{k: v for k, v in s.items() if k != "pem"}, "file": rel, "added": added})
        else:
            ident = {"issuer": s["issuer"], "identity": s["identity"]}
            added = ident not in idents
            if added:
                idents.append(ident)
            rows.append({**s, "added": added})
    packages = {r: dict(t) for r, t in data.get("packages", {}).items()}
    pkg_edits = {}
    for c in code:
        if c["kind"] != "package" or c["repo"] not in packages or "path" in packages[c["repo"]]:
            continue  # a package this manifest does not use (or has as a local path) needs no trust
        mine = packages[c["repo"]]
        add = {k: v for k, v in c["keys"].items() if mine.get(k) != v}
        rows.append({"kind": "package", "repo": c["repo"], **c["keys"], "added": bool(add)})
        if add:
            pkg_edits[c["repo"]] = add
            mine.update(add)
    if not any(r["added"] for r in rows):
        return rows
    text = mpath.read_text("utf-8")
    signers_added = any(r["added"] for r in rows if r["kind"] != "package")
    new_text = set_policy(text, keys, idents, note=f"{fetched.repo}@{fetched.commit[:12]}") if signers_added else text
    for repo, add in sorted(pkg_edits.items()):
        new_text = None if new_text is None else _add_package_keys(new_text, repo, add)
    want = dict(data)
    if signers_added:
        want["trust"] = {**data.get("trust", {}), "receipts": {**policy, "keys": keys, **({"identities": idents} if idents else {})}}
        if not keys:
            want["trust"]["receipts"].pop("keys")
    if pkg_edits:
        want["packages"] = packages
    from ..documents.schema import parse_toml  # noqa: PLC0415

    try:
        ok = new_text is not None and parse_toml(new_text.encode("utf-8"), ManifestError, label) == want
    except ManifestError:
        ok = False
    if not ok:
        lines = ([f"[trust.receipts] keys = {_toml_list(keys)}"] if signers_added else []) + (
            [f"[trust.receipts] identities = {_toml_idents(idents)}"] if signers_added and idents else []) + [
            f"[packages.\"{repo}\"] " + ", ".join(f"{k} = {_toml_value(v)}" for k, v in add.items())
            for repo, add in sorted(pkg_edits.items())]
        raise UsageError(f"{label}: [trust.receipts] or a package's table is written in a form frt cannot edit in "
                         "place; nothing was written",
                         hints=["set these yourself (and write the key files from the release's lockfile, "
                                "receipt-keys): " + "; ".join(lines)])
    try:  # the manifest as it will read back, checked before anything is written
        Manifest.from_dict(parse_toml(new_text.encode("utf-8"), ManifestError, label), file=label)
    except ManifestError as exc:
        raise ReleaseError(f"release {fetched.repo!r}: trusting what its lockfile names would leave {label} "
                           f"unreadable ({exc}); nothing was written",
                           hints=["ask the publisher to fix its lockfile and push again"]) from None
    _write_all(project.root, new_files, mpath, new_text.encode("utf-8"))
    return rows


def _write_all(root: Path, files: dict[str, bytes], mpath: Path, manifest: bytes) -> None:
    """Write the key ``files`` (project-relative), then the manifest, each atomically; when any write
    fails, the files written so far are put back as they were (and the folders made for them
    removed), so a failed trust leaves the project as it found it."""
    from ..documents.lock_writer import write_atomic  # noqa: PLC0415

    done: list[tuple[Path, bytes | None]] = []
    made: list[Path] = []
    try:
        for rel, data in files.items():
            p = root / rel
            missing = [d for d in (p.parent, *p.parent.parents) if not d.exists() and root in d.parents]
            p.parent.mkdir(parents=True, exist_ok=True)
            made += reversed(missing)
            done.append((p, p.read_bytes() if p.is_file() else None))
            write_atomic(p, data)
        write_atomic(mpath, manifest)
    except BaseException:
        for p, old in reversed(done):
            try:
                if old is None:
                    p.unlink(missing_ok=True)
                else:
                    write_atomic(p, old)
            except OSError:
                pass
        for d in reversed(made):
            try:
                d.rmdir()
            except OSError:
                pass
        raise


def _toml_value(v) -> str:
    import json  # noqa: PLC0415

    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{json.dumps(x)} = {_toml_value(y)}" for x, y in v.items()) + " }"
    return json.dumps(v)


def _toml_list(items: list[str]) -> str:
    import json  # noqa: PLC0415

    return "[" + ", ".join(json.dumps(i) for i in items) + "]"


def _toml_idents(idents: list[dict]) -> str:
    import json  # noqa: PLC0415

    return "[" + ", ".join(f"{{ issuer = {json.dumps(i['issuer'])}, identity = {json.dumps(i['identity'])} }}"
                           for i in idents) + "]"


_HEADER = re.compile(r"^\s*\[")


def _section(lines: list[str], header: str) -> tuple[int, int] | None:
    """(first line after the ``[header]`` line, the line where the next table starts) or None."""
    start = next((i for i, ln in enumerate(lines) if re.match(r"^\s*\[" + re.escape(header) + r"\]\s*(#.*)?$", ln)), None)
    if start is None:
        return None
    end = next((i for i in range(start + 1, len(lines)) if _HEADER.match(lines[i])), len(lines))
    return start + 1, end


def _value_span(lines: list[str], a: int, b: int, key: str) -> tuple[int, int] | None:
    """The lines ``[i, j)`` of ``key = [ ... ]`` in ``lines[a:b]`` (brackets counted outside strings)."""
    for i in range(a, b):
        if re.match(r"^\s*" + re.escape(key) + r"\s*=", lines[i]):
            depth, quote = 0, None
            for j in range(i, b):
                k, s = 0, lines[j]
                while k < len(s):
                    c = s[k]
                    if quote:
                        if c == "\\" and quote == '"':
                            k += 1
                        elif c == quote:
                            quote = None
                    elif c in "\"'":
                        quote = c
                    elif c == "#":
                        break
                    elif c == "[":
                        depth += 1
                    elif c == "]":
                        depth -= 1
                        if depth == 0:
                            return i, j + 1
                    k += 1
            return None
    return None


_TRUST_NOTE = "# Receipt signers this project accepts, added by `frt release trust`; last from "
_TRUST_NOTE_OLD = "# Receipt signers this project accepts. Added by `frt release trust` from "


def set_policy(text: str, keys: list[str], idents: list[dict], *, note: str) -> str | None:
    """``text`` (a manifest) with ``[trust.receipts]`` listing ``keys`` and ``idents``: the table's
    ``keys``/``identities`` lines replaced (or added under its header), or the table appended."""
    lines = text.splitlines(keepends=True)
    new = {"keys": f"keys = {_toml_list(keys)}\n"} if keys else {}
    if idents:
        new["identities"] = f"identities = {_toml_idents(idents)}\n"
    sec = _section(lines, "trust.receipts")
    if sec is None:
        if re.search(r"^\s*receipts\s*=", text, re.M):
            return None
        tail = "" if text.endswith("\n") else "\n"
        return (text + tail + f"\n{_TRUST_NOTE}{note}'s lockfile:\n# review them; a release receipt signed by anyone "
                "else is rejected.\n[trust.receipts]\n" + "".join(new.values()))
    for i in range(sec[0] - 2, max(sec[0] - 5, -1), -1):  # the comment above the table: it names the latest trust
        if lines[i].startswith(_TRUST_NOTE) or lines[i].startswith(_TRUST_NOTE_OLD):
            lines[i] = f"{_TRUST_NOTE}{note}'s lockfile:\n"
            break
    a, b = sec
    for key in ("identities", "keys"):
        if key not in new:
            continue
        span = _value_span(lines, a, b, key)
        if span is None:
            if any(re.match(r"^\s*" + key + r"\s*=", ln) for ln in lines[a:b]):
                return None
            lines[a:a] = [new[key]]
        else:
            lines[span[0]:span[1]] = [new[key]]
        sec = _section(lines, "trust.receipts")
        a, b = sec
    return "".join(lines)


# ---------------------------------------------------------------------------
# frt init --from


def strip_policy(text: str) -> tuple[str, bool]:
    """``text`` without its ``[trust.receipts]`` table (the publisher's signers are not the
    consumer's until it says so); True when one was removed."""
    lines = text.splitlines(keepends=True)
    sec = _section(lines, "trust.receipts")
    if sec is None:
        return text, False
    a, b = sec
    kept = lines[:a - 1] + ["# [trust.receipts]: the publisher's policy, left out by `frt init --from`: trust the\n",
                            "# release's signers with `frt release trust` (it lists and adds them).\n"] + lines[b:]
    return "".join(kept), True


_PKG_TRUST_KEYS = ("trust", "signature", "signer")  # a package's code trust and its publisher-signature policy


def release_code_trust(data: dict) -> list[dict]:
    """The code trust a release's manifest (``data``, parsed) declares: one row per package with
    ``trust = true`` or a publisher-signature policy (``signature``/``signer``), and one per
    ``[trust.publishers."<org>"]`` table: ``{"kind": "package", "repo", "keys": {...}}`` /
    ``{"kind": "publisher", "org", "keys": {...}}``. `frt init --from` copies none of it; `frt release
    trust` adds it, printing each."""
    out = []
    for repo, t in sorted(data.get("packages", {}).items()):
        keys = {k: t[k] for k in _PKG_TRUST_KEYS if k in t and t[k] is not False}
        if keys and "path" not in t:
            out.append({"kind": "package", "repo": repo, "keys": keys})
    for org, t in sorted(data.get("trust", {}).get("publishers", {}).items()):
        out.append({"kind": "publisher", "org": org, "keys": dict(t)})
    return out


def strip_code_trust(text: str, data: dict) -> tuple[str, list[dict]]:
    """``text`` (a manifest, ``data`` parsed) without the code trust ``release_code_trust`` lists:
    each package's ``trust``/``signature``/``signer`` lines and every ``[trust.publishers."<org>"]``
    table, a comment left where they were. Returns the text and the rows removed."""
    rows = release_code_trust(data)
    if not rows:
        return text, rows
    lines = text.splitlines(keepends=True)
    for row in rows:
        if row["kind"] == "package":
            sec = _section(lines, f'packages."{row["repo"]}"')
            if sec is None:
                continue  # (written another way: the check in release_manifest refuses it)
            a, b = sec
            keep = [ln for ln in lines[a:b] if not re.match(r"^\s*(" + "|".join(_PKG_TRUST_KEYS) + r")\s*=", ln)]
            if len(keep) != b - a:
                keep.insert(0, "# trust: the publisher's, left out by `frt init --from`; review the package, then "
                               "`frt release trust` adds it\n")
            lines[a:b] = keep
        else:
            sec = _section(lines, f'trust.publishers."{row["org"]}"') or _section(lines, f'trust.publishers.{row["org"]}')
            if sec is None:
                continue
            a, b = sec
            lines[a - 1:b] = [f"# [trust.publishers.\"{row['org']}\"]: the publisher's, left out by `frt init --from`\n"]
    return "".join(lines), rows


def _without_code_trust(data: dict) -> dict:
    """``data`` (a manifest, parsed) as ``strip_code_trust`` leaves it."""
    out = dict(data)
    pk = {}
    for repo, t in data.get("packages", {}).items():
        pk[repo] = dict(t) if "path" in t else {k: v for k, v in t.items() if k not in _PKG_TRUST_KEYS}
    if "packages" in data:
        out["packages"] = pk
    if "publishers" in data.get("trust", {}):
        out["trust"] = {k: v for k, v in data["trust"].items() if k != "publishers"}
        if not out["trust"]:
            del out["trust"]
    return out


def release_manifest(fetched: Fetched) -> str:
    """The consumer's manifest: the release's, its receipt policy and its code trust (package
    ``trust``, publisher-signature policy) left out, plus ``[release]``."""
    from ..documents.manifest import Manifest  # noqa: PLC0415
    from ..documents.schema import parse_toml  # noqa: PLC0415
    from ..errors import ManifestError  # noqa: PLC0415

    rel = f"manifests/{fetched.model}.toml"
    raw = fetched.read(rel)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ReleaseError(f"release {fetched.repo!r}: {rel} is not UTF-8") from None
    label = f"{fetched.repo}/{rel}"
    original = parse_toml(raw, ManifestError, label)
    if "release" in original:
        raise ReleaseError(f"release {fetched.repo!r}: {rel} names a release itself ([release]); frt consumes one "
                           "release per project")
    out, stripped = strip_policy(text)
    out, _code = strip_code_trust(out, original)
    out = out + ("" if out.endswith("\n") else "\n") + (
        f"\n# The release this project consumes (`frt init --from hf://{fetched.repo}@v{fetched.version}`): `frt lock` "
        "reads its receipts\n# at the commit it pins; `frt lock --upgrade-release` moves to the branch's head.\n"
        f"[release]\nrepo = \"{fetched.repo}\"\nversion = {fetched.version}\n")
    data = parse_toml(out.encode("utf-8"), ManifestError, label)
    want = dict(original)
    if stripped:
        want["trust"] = {k: v for k, v in original.get("trust", {}).items() if k != "receipts"}
        if not want["trust"]:
            del want["trust"]
    want = _without_code_trust(want)
    want["release"] = {"repo": fetched.repo, "version": fetched.version}
    if data != want:  # written so that lines cannot be taken out (inline tables): the same content, rewritten
        import tomli_w  # noqa: PLC0415

        body = {k: v for k, v in want.items() if k != "release"}
        out = (f"# The manifest of release {fetched.repo} v{fetched.version}, rewritten by `frt init --from` without the "
               "publisher's trust\n# ([trust.receipts], [trust.publishers], the packages' trust): `frt release trust` "
               "adds what you accept.\n" + tomli_w.dumps(body) +
               f"\n[release]\nrepo = \"{fetched.repo}\"\nversion = {fetched.version}\n")
        data = parse_toml(out.encode("utf-8"), ManifestError, label)
    if data != want:
        raise ReleaseError(f"release {fetched.repo!r}: {rel} could not be written again without the publisher's "
                           "trust so that it reads as the release's, less that trust",
                           hints=["write the manifest by hand: the release's, without [trust.receipts], "
                                  "[trust.publishers] and the packages' trust/signature/signer keys, plus "
                                  f"[release] repo = \"{fetched.repo}\", version = {fetched.version}"])
    Manifest.from_dict(data, file=label)
    return out


def models_of(repo: str, version: int) -> tuple[str, list[str]]:
    """(the branch's head commit, the models the release publishes there)."""
    from huggingface_hub.hf_api import RepoFile  # noqa: PLC0415

    client = api()
    commit = branch_commit(client, repo, version)
    if commit is None:
        raise ReleaseError(f"release {repo!r}: no branch v{version}",
                           hints=[f"the publisher pushes it with `frt release push hf://{repo}@v{version}`"])
    entries = hub_call(repo, "list manifests", lambda: list(client.list_repo_tree(
        repo, path_in_repo="manifests", revision=commit, repo_type=REPO_TYPE)))
    models = sorted(e.path[len("manifests/"):-len(".toml")] for e in entries
                    if isinstance(e, RepoFile) and e.path.endswith(".toml"))
    return commit, [m for m in models if not names.problem("name", m)]


# ---------------------------------------------------------------------------
# frt mirror / frt verify --mirror: the release's files beside the packages'


def release_key(sha: str) -> str:
    """A release file's key in an object store: its sha256, as every locked file's (``sha256/<hex>``)."""
    from ..distribution.store_api import object_key  # noqa: PLC0415

    return object_key("sha256", sha.removeprefix("sha256:"))


def store_files(lock, store, *, progress=None) -> list[str]:
    """``frt publish URL``: every release file ``lock`` records, uploaded to ``store`` under its sha256
    (``release_key``) once verified against the lock; one already there with that size is left. Returns
    the keys sent. The lockfile goes up after these (the caller), so a store holding the lockfile holds them."""
    rel = lock.release
    if not rel or not rel.get("files"):
        return []
    src = fetch(rel["repo"], rel["version"], lock.model, commit=rel["commit"], recorded=rel["files"])
    sent = []
    for path, sha in sorted(rel["files"].items()):
        data = src.read(path)
        if _sha256(data) != sha:  # (fetch checked it; a file changed since is not sent)
            raise ReleaseError(f"release {rel['repo']} {path}: not the bytes the lock records; not published")
        key = release_key(sha)
        if store.head(key) != len(data):
            store.put_bytes(key, data)
            sent.append(key)
        if progress:
            progress({"event": "file", "repo": rel["repo"], "variant": "release", "path": path,
                      "action": "uploaded" if key in sent else "present", "bytes": len(data)})
    return sent


class _StoreSource:
    """The release files of a lock, read from an object store by their sha256 (``frt mirror DIR --from URL``)."""

    def __init__(self, store, rel):
        self.store, self.rel = store, rel

    def read(self, path: str) -> bytes | None:
        return self.store.get_bytes(release_key(self.rel["files"][path]), MAX_FILE_BYTES)


def mirror_files(lock, top, tmp, *, progress=None, store=None) -> list[dict]:
    """Write the release files ``lock`` records into the mirror ``top`` (a ``SafeDir``), hub-cache
    layout (``models--<org>--<name>/blobs``, ``snapshots/<commit>/...``, ``refs/v<N>`` last), each
    verified against its recorded sha256 first: from ``store`` (an object store ``frt publish``
    filled) when given, else from the mirror, the hub cache or the Hub. Returns the problems (a file
    that could not be supplied) and reports each file it adds to ``progress``."""
    rel = lock.release
    if not rel or not rel.get("files"):
        return []
    from ..distribution.sources import is_offline  # noqa: PLC0415

    problems = []
    if store is not None:
        src = _StoreSource(store, rel)
    else:
        try:
            got = fetch(rel["repo"], rel["version"], lock.model, commit=rel["commit"], recorded=rel["files"])
        except FrtError as exc:
            if is_offline():
                return [{"kind": "missing", "path": f"{cache_folder(rel['repo'])}/snapshots/{rel['commit']}",
                         "reason": f"release {rel['repo']}: {exc}"}]
            raise
        src = got
    with top.child(cache_folder(rel["repo"]), create=True) as folder, folder.child("blobs", create=True) as blobs:
        for path, sha in sorted(rel["files"].items()):
            data = src.read(path)
            if data is None:
                problems.append({"kind": "missing", "path": path, "expected": sha, "computed": None,
                                 "reason": f"release {rel['repo']} {path}: no object {release_key(sha)} in the store"})
                continue
            if _sha256(data) != sha:
                problems.append({"kind": "mismatched", "path": path, "expected": sha, "computed": _sha256(data),
                                 "reason": f"release {rel['repo']} {path}: not the bytes the lock records"})
                continue
            blob = sha.removeprefix("sha256:")
            if blobs.lstat(blob) is None:
                name = tmp.write_file("release-", data)
                tmp.replace(name, blobs, blob)
            parts = ["snapshots", rel["commit"], *path.split("/")]
            with folder.walk(*parts[:-1], create=True) as here:
                target = "../" * (len(parts) - 1) + f"blobs/{blob}"
                if here.readlink(parts[-1]) != target:
                    link = f"release-link-{os.urandom(8).hex()}"
                    tmp.symlink(target, link)
                    tmp.replace(link, here, parts[-1])
            if progress:
                progress({"event": "file", "repo": rel["repo"], "variant": "release", "path": path,
                          "action": "fetched", "bytes": len(data)})
        if not problems:
            with folder.child("refs", create=True) as refs:
                name = tmp.write_file("release-ref-", rel["commit"].encode("ascii"))
                tmp.replace(name, refs, f"v{rel['version']}")
    return problems


def mirror_problems(lock, dest: Path) -> list[dict]:
    """``frt verify --mirror``: every release file the lock records, present in ``dest`` with its sha256."""
    rel = lock.release
    if not rel:
        return []
    out = []
    base = f"{cache_folder(rel['repo'])}/snapshots/{rel['commit']}"
    for path, sha in sorted(rel.get("files", {}).items()):
        p = dest / base / path
        where = f"{base}/{path}"
        if not p.is_file():
            out.append({"kind": "missing", "path": where, "expected": sha, "computed": None,
                        "reason": f"release {rel['repo']} file {path} is not in the mirror"})
            continue
        try:
            got = _sha256(_read(p, where))
        except ReleaseError as exc:
            out.append({"kind": "mismatched", "path": where, "expected": sha, "computed": None,
                        "reason": f"release {rel['repo']} file {path}: {exc}"})
            continue
        if got != sha:
            out.append({"kind": "mismatched", "path": where, "expected": sha, "computed": got,
                        "reason": f"release {rel['repo']} file {path}: expected {sha}, computed {got}"})
    return out
