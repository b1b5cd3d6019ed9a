"""Trusting a Hub release, as an explicit step: the signers its lockfile names for its receipts
(``signers``, ``refused_signers``, ``identity_problem``), the code trust its manifest declares
(``code_trust``, ``release_code_trust``), and ``trust``, which adds them to a project's manifest
(``frt release trust``, ``frt init --from ... --trust``): each key's PEM written under
``keys/<org>/<name>/`` and listed under ``[trust.receipts] keys`` (a Sigstore identity under
``identities``), each package's ``trust``/``signature``/``signer``, printed by the caller; all or
nothing. A later commit signed by a key the policy does not list is rejected until it runs again.

And the other side: the consumer's manifest made from the release's without the publisher's trust
(``release_manifest``, ``strip_policy``, ``strip_code_trust``), for ``frt init --from`` and ``frt
release upgrade``, with the line-level TOML edits both need (``section``, ``set_policy``,
``add_package_keys``, ``toml_value``). Why: docs/design.md (threat model), docs/releases-consume.md.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..distribution.release_files import Fetched
from ..errors import FrtError, ReleaseError, UsageError

__all__ = ["signers", "refused_signers", "identity_problem", "code_trust", "release_code_trust", "trust",
           "release_manifest", "strip_policy", "strip_code_trust", "set_policy", "add_package_keys", "section",
           "toml_value"]


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


def add_package_keys(text: str, repo: str, keys: dict) -> str | None:
    """``text`` (a manifest) with ``keys`` (trust, signature, signer) set in ``[packages."<repo>"]``
    (the lines added under its header, replacing any the table has); None where the table is written
    in a form this cannot edit (inline, dotted keys)."""
    import json  # noqa: PLC0415

    lines = text.splitlines(keepends=True)
    sec = section(lines, f'packages."{repo}"')
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
        new_text = None if new_text is None else add_package_keys(new_text, repo, add)
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
            f"[packages.\"{repo}\"] " + ", ".join(f"{k} = {toml_value(v)}" for k, v in add.items())
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


def toml_value(v) -> str:
    import json  # noqa: PLC0415

    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{json.dumps(x)} = {toml_value(y)}" for x, y in v.items()) + " }"
    return json.dumps(v)


def _toml_list(items: list[str]) -> str:
    import json  # noqa: PLC0415

    return "[" + ", ".join(json.dumps(i) for i in items) + "]"


def _toml_idents(idents: list[dict]) -> str:
    import json  # noqa: PLC0415

    return "[" + ", ".join(f"{{ issuer = {json.dumps(i['issuer'])}, identity = {json.dumps(i['identity'])} }}"
                           for i in idents) + "]"


_HEADER = re.compile(r"^\s*\[")


def section(lines: list[str], header: str) -> tuple[int, int] | None:
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
    sec = section(lines, "trust.receipts")
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
        sec = section(lines, "trust.receipts")
        a, b = sec
    return "".join(lines)


# ---------------------------------------------------------------------------
# the consumer's manifest: the release's, without the publisher's trust (frt init --from, frt release upgrade)


def strip_policy(text: str) -> tuple[str, bool]:
    """``text`` without its ``[trust.receipts]`` table (the publisher's signers are not the
    consumer's until it says so); True when one was removed."""
    lines = text.splitlines(keepends=True)
    sec = section(lines, "trust.receipts")
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
            sec = section(lines, f'packages."{row["repo"]}"')
            if sec is None:
                continue  # (written another way: the check in release_manifest refuses it)
            a, b = sec
            keep = [ln for ln in lines[a:b] if not re.match(r"^\s*(" + "|".join(_PKG_TRUST_KEYS) + r")\s*=", ln)]
            if len(keep) != b - a:
                keep.insert(0, "# trust: the publisher's, left out by `frt init --from`; review the package, then "
                               "`frt release trust` adds it\n")
            lines[a:b] = keep
        else:
            sec = section(lines, f'trust.publishers."{row["org"]}"') or section(lines, f'trust.publishers.{row["org"]}')
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
