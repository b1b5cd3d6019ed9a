"""``frt release upgrade [@vN]``: move a consuming project to another version of its release
(docs/releases-consume.md#5-another-version), and what ``frt lock`` says about newer ones.

The upgrade reads the release at the head of branch ``v<N>`` (default: the newest ``vN`` branch),
reports what changes (``report``): the release's manifest against the one the project consumes now
(routes, seams, bands, packages), the code trust the new manifest declares that the project does not
have, and every signer the new release's lockfile records, each new one named. Then it writes the
project's manifest as the release's (``apply``: ``release_manifest``'s text, the release's trust left
out) with the project's own trust put back: its ``[trust.receipts]`` and ``[trust.publishers]`` tables
as they are written, and each package's ``trust``/``signature``/``signer`` for the packages the new
manifest still has. The project's own receipts are files under ``receipts/``, untouched. `frt lock`
then locks it under the coverage rule (the caller, ``frt_dist.cli.release``).

``news(repo, version, commit)`` is what ``frt lock`` says online: the branch's head when it is not the
pinned commit, and the newest version when it is above the pinned one (one refs request, given at most
``NEWS_TIMEOUT_S``; offline, or when the Hub does not answer, nothing).
"""

from __future__ import annotations

import re

from ..distribution.hub import RELEASE_REPO_TYPE as REPO_TYPE
from ..distribution.hub import api, hub_call
from ..distribution.release_files import Fetched
from ..errors import ReleaseError, UsageError
from .trust import add_package_keys, release_manifest, section, signers

__all__ = ["versions", "newest", "news", "manifest_changes", "change_lines", "apply", "new_signers"]

_VN = re.compile(r"^v(\d+)$")
NEWS_TIMEOUT_S = 5.0  # the refs request `frt lock` makes for its note, at most


def versions(repo: str) -> dict[int, str]:
    """``{N: head commit}`` of every ``vN`` branch of the release repo (one refs request)."""
    client = api()
    refs = hub_call(repo, "refs", lambda: client.list_repo_refs(repo, repo_type=REPO_TYPE))
    out = {}
    for b in refs.branches:
        m = _VN.match(b.name or "")
        if m and isinstance(b.target_commit, str):
            out[int(m.group(1))] = b.target_commit
    return out


def newest(repo: str) -> int:
    found = versions(repo)
    if not found:
        raise ReleaseError(f"release {repo!r}: no vN branch on the Hub",
                           hints=[f"the publisher pushes one with `frt release push hf://{repo}@vN`"])
    return max(found)


def news(repo: str, version: int, commit: str) -> list[str]:
    """What is newer than the pinned ``commit`` of ``v<version>``, as lines a person reads (online only;
    [] offline or when the Hub does not answer: this is advice, never a failure)."""
    from ..distribution.sources import is_offline  # noqa: PLC0415

    if is_offline():
        return []
    from huggingface_hub import get_session  # noqa: PLC0415

    from ..distribution.hub import apply_timeout  # noqa: PLC0415

    apply_timeout()
    session = get_session()
    before = session.timeout
    try:  # advice: a Hub that does not answer within a few seconds costs the lock no more than that
        session.timeout = NEWS_TIMEOUT_S
        refs = api().list_repo_refs(repo, repo_type=REPO_TYPE)
        found = {int(m.group(1)): b.target_commit for b in refs.branches
                 if (m := _VN.match(b.name or "")) and isinstance(b.target_commit, str)}
    except Exception:  # noqa: BLE001 - whatever the Hub or the network did, the lock goes on without the note
        return []
    finally:
        session.timeout = before
    out = []
    head = found.get(version)
    if head is not None and head != commit:
        out.append(f"release {repo} v{version} has a newer commit ({head[:12]}) than the lock pins ({commit[:12]}): "
                   "`frt lock --upgrade-release` moves to it, reporting each receipt it changes")
    above = [n for n in found if n > version]
    if above:
        out.append(f"release {repo} has a newer version, v{max(above)}: `frt release upgrade @v{max(above)}` "
                   "shows its changes and applies its manifest")
    return out


# ---------------------------------------------------------------------------
# the change report


def _manifest(data: dict, label: str):
    from ..documents.manifest import Manifest  # noqa: PLC0415

    return Manifest.from_dict(data, file=label)


def manifest_changes(old: dict, new: dict, *, old_label: str, new_label: str) -> list[dict]:
    """What the release's manifest changes, one row per route, seam, band or package added, removed or
    changed: ``{"what", "name", "change", "detail"}``. ``old``/``new``: the manifests, parsed."""
    a, b = _manifest(old, old_label), _manifest(new, new_label)
    rows = []

    def row(what, name, change, detail=""):
        rows.append({"what": what, "name": name, "change": change, "detail": detail})

    for name in sorted(set(a.routes) | set(b.routes)):
        x, y = a.routes.get(name), b.routes.get(name)
        if x is None:
            row("route", name, "added", f"seams {_seams(y)}, {y.assembly}")
        elif y is None:
            row("route", name, "removed")
        elif x.digest != y.digest:
            parts = []
            if x.seams != y.seams:
                parts.append(f"seams {_seams(x)} -> {_seams(y)}")
            if x.assembly != y.assembly:
                parts.append(f"assembly {x.assembly} -> {y.assembly}")
            if not parts:
                parts.append("an impl it runs changed")
            row("route", name, "changed", "; ".join(parts) + f" (route digest {x.digest[:19]} -> {y.digest[:19]})")
        elif x.gate != y.gate:
            row("route", name, "changed", f"gate {x.gate or 'default'} -> {y.gate or 'default'}")
    for name in sorted(set(a.seams) | set(b.seams)):
        x, y = a.seams.get(name), b.seams.get(name)
        if x is None:
            row("seam", name, "added", f"impls {', '.join(sorted(y.impls))}")
        elif y is None:
            row("seam", name, "removed")
        else:
            added, removed = sorted(set(y.impls) - set(x.impls)), sorted(set(x.impls) - set(y.impls))
            changed = sorted(i for i in set(x.impls) & set(y.impls) if x.impls[i].table != y.impls[i].table)
            detail = "; ".join(f"{k} {', '.join(v)}" for k, v in (("impls added", added), ("impls removed", removed),
                                                                    ("impls changed", changed)) if v)
            if detail or x.structure != y.structure:
                row("seam", name, "changed", detail or f"structure {x.structure} -> {y.structure}")
    for name in sorted(set(a.phases) | set(b.phases)):
        x, y = a.phases.get(name), b.phases.get(name)
        if x is None:
            row("band", name, "added", f"rows {list(y.rows)}")
        elif y is None:
            row("band", name, "removed")
        elif x.rows != y.rows:
            row("band", name, "changed", f"rows {list(x.rows)} -> {list(y.rows)}")
    pa, pb = old.get("packages", {}), new.get("packages", {})
    for name in sorted(set(pa) | set(pb)):
        x, y = pa.get(name), pb.get(name)
        if x is None:
            row("package", name, "added", _pkg(y))
        elif y is None:
            row("package", name, "removed")
        elif (x.get("version"), x.get("path")) != (y.get("version"), y.get("path")):
            row("package", name, "changed", f"{_pkg(x)} -> {_pkg(y)}")
    return rows


def _seams(route) -> str:
    return "{" + ", ".join(f"{s} = {i}" for s, i in sorted(route.seams.items())) + "}"


def _pkg(t: dict) -> str:
    return f"path {t['path']}" if "path" in t else f"version {t.get('version')}"


def new_signers(project, model: str, fetched: Fetched) -> list[dict]:
    """Every signer the release's lockfile records (``signers``), each with ``"new"``: not in the
    project's ``[trust.receipts]`` (by keyid, or issuer and identity)."""
    from ..documents.manifest import Manifest  # noqa: PLC0415

    mpath = project.manifest_path(model)
    m = Manifest.read(mpath, label=project.rel(mpath))
    have_keys, have_ids = set(), []
    if m.receipt_policy is not None:
        from ..provenance.signing import read_policy_keys  # noqa: PLC0415

        have_keys = {k.keyid for k in read_policy_keys(project.root, m.receipt_policy, manifest_file=m.file).values()}
        have_ids = [dict(i) for i in m.raw.get("trust", {}).get("receipts", {}).get("identities", [])]
    try:
        found = signers(fetched)
    except ReleaseError:
        found = []
    out = []
    for s in found:
        new = (s["keyid"] not in have_keys) if s["kind"] == "key" else \
            ({"issuer": s["issuer"], "identity": s["identity"]} not in have_ids)
        out.append({**{k: v for k, v in s.items() if k != "pem"}, "new": new})
    return out


def change_lines(doc: dict) -> list[str]:
    """The upgrade report's text (the receipts' lines come from the lock: ``frt_dist.lock.release.change_lines``)."""
    from ..documents.lock_release import shown  # noqa: PLC0415

    head = (f"release {doc['repo']}: v{doc['from-version']} -> v{doc['version']} (commit "
            f"{(doc['from-commit'] or 'none')[:12]} -> {doc['commit'][:12]})")
    lines = [head]
    if doc["manifest"]:
        lines.append(f"  the release's manifest changes ({len(doc['manifest'])}):")
        mark = {"added": "+", "removed": "-", "changed": "~"}
        lines += [f"    {mark[r['change']]} {r['what']} {shown(r['name'])}" + (f": {shown(r['detail'])}" if r["detail"] else "")
                  for r in doc["manifest"]]
    else:
        lines.append("  the release's manifest: no route, seam, band or package changes")
    for s in doc["signers"]:
        who = f"key {shown(s['keyid'])}" if s["kind"] == "key" else \
            f"identity {shown(s['identity'])} (issuer {shown(s['issuer'])})"
        lines.append(f"  signer {who}: {s['receipts']} receipt(s), "
                     + (f"refused: {shown(s['refused'])}" if s.get("refused") else
                        "NEW: not in your [trust.receipts]; review it" if s["new"] else "trusted"))
    for c in doc["code-trust"]:
        lines.append(f"  package {shown(c['repo'])}: the release's manifest trusts its code, yours does not (NEW): "
                     "review it")
    return lines


# ---------------------------------------------------------------------------
# applying the release's manifest


def _own_trust(text: str, data: dict) -> tuple[list[str], dict]:
    """The project's own trust tables as written: the lines of ``[trust.receipts]`` (with the comment
    lines right above it) and of each ``[trust.publishers.*]`` table; and the packages' trust keys."""
    lines = text.splitlines(keepends=True)
    blocks = []
    headers = [i for i, ln in enumerate(lines) if re.match(r"^\s*\[trust\.(receipts|publishers\b[^\]]*)\]\s*(#.*)?$", ln)]
    for i in headers:
        name = re.match(r"^\s*\[([^\]]+)\]", lines[i]).group(1)
        sec = section(lines, name)
        if sec is None:
            continue
        a, b = sec
        top = i
        while top > 0 and lines[top - 1].startswith("#") and "frt init --from" not in lines[top - 1]:
            top -= 1
        body = lines[top:b]
        while body and not body[-1].strip():
            body.pop()
        blocks.append("".join(body))
    pkg = {repo: {k: t[k] for k in ("trust", "signature", "signer") if k in t}
           for repo, t in data.get("packages", {}).items() if "path" not in t}
    return blocks, {r: k for r, k in pkg.items() if k}


def _parsed(text: str, label: str) -> dict | None:
    from ..documents.schema import parse_toml  # noqa: PLC0415
    from ..errors import ManifestError  # noqa: PLC0415

    try:
        return parse_toml(text.encode("utf-8"), ManifestError, label)
    except ManifestError:
        return None


def apply(project, model: str, fetched: Fetched) -> tuple[str, dict]:
    """The text of ``model``'s manifest upgraded to ``fetched`` (the release's, its trust left out, plus
    ``[release]`` at its version) with the project's own trust put back; and the parsed result.
    Raises ``UsageError`` (nothing written) where the result would not read back as intended."""
    from ..documents.schema import load_toml, parse_toml  # noqa: PLC0415
    from ..errors import ManifestError  # noqa: PLC0415

    mpath = project.manifest_path(model)
    label = project.rel(mpath)
    mine_text = mpath.read_text("utf-8")
    mine = load_toml(mpath, ManifestError, label)
    text = release_manifest(fetched)
    blocks, pkg_trust = _own_trust(mine_text, mine)
    base = parse_toml(text.encode("utf-8"), ManifestError, label)
    for repo, keys in sorted(pkg_trust.items()):
        if repo in base.get("packages", {}) and "path" not in base["packages"][repo]:
            text = add_package_keys(text, repo, keys) if text is not None else None
    if text is None:
        raise UsageError(f"{label}: the release's manifest writes a package table in a form frt cannot add your "
                         "package trust to; nothing was written",
                         hints=["apply the release's manifest by hand, keeping your [trust.*] tables"])
    bare = text  # the release's manifest with the project's package trust, before its trust tables
    if blocks:
        text = text.rstrip("\n") + "\n\n" + "\n\n".join(blocks) + "\n"
    want = dict(base)
    if mine.get("trust"):
        want["trust"] = {**base.get("trust", {}), **mine["trust"]}
    for repo, keys in pkg_trust.items():
        if repo in want.get("packages", {}) and "path" not in want["packages"][repo]:
            want["packages"][repo] = {**want["packages"][repo], **keys}
    got = _parsed(text, label)
    if got != want and mine.get("trust"):
        # written another valid way (a [trust] header holding dotted keys, inline tables): the same
        # content, as TOML writes it, instead of the lines as they were
        import tomli_w  # noqa: PLC0415

        text = (bare.rstrip("\n") + "\n\n# Your trust tables, carried over by `frt release upgrade` (rewritten: "
                "their lines could not be taken over as written):\n" + tomli_w.dumps({"trust": mine["trust"]}))
        got = _parsed(text, label)
    if got != want:
        raise UsageError(f"{label}: your [trust.*] tables could not be carried over to the release's manifest as "
                         "they read; nothing was written",
                         hints=["apply the release's manifest by hand, keeping your [trust.*] tables"])
    _manifest(got, label)
    return text, got
