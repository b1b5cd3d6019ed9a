"""The lock's view of a Hub release: what one ``frt lock`` of a model reads of the release its
manifest names (``for_lock``: at the commit the lock pins, or the branch's head the first time and
under ``--upgrade-release``), the package pins its receipts were measured on, the ``[release]``
record the lock writes, what a re-lock changed (``change``, ``change_lines``) and why a lock's
release part is stale (``stale_reasons``, for ``frt lock --check``).

The release's files come from ``frt_dist.distribution.release_files``. Its receipts are judged by
``frt_dist.lock.build`` like the project's own, with one rule more: a release receipt is accepted
only when signed by a signer the *project's* ``[trust.receipts]`` policy names (``device-classes``
does not exempt it); with no policy every one is rejected (``NO_POLICY``). The release's lockfile
supplies the package pins its receipts were measured on (``LockRelease.package_base``), never its
trust facts: those are the consumer's to derive. The ``[release]`` record: ``repo``, ``version``,
``commit``, the sha256 of every release file read (``files``: what ``frt mirror`` carries and ``frt
verify --mirror`` checks); docs/releases-consume.md.
"""

from __future__ import annotations

from pathlib import Path

from .. import settings
from ..distribution.release_files import SIG_SUFFIXES, Fetched, fetch
from ..documents.lock_release import NO_POLICY, label_prefix
from ..errors import FrtError

__all__ = ["LockRelease", "for_lock", "change", "change_lines", "stale_reasons", "NO_POLICY"]


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
