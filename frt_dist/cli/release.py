"""``frt release push|trust``: Hub releases (docs/reference.md#frt-release)."""

from __future__ import annotations

import sys

from .. import settings
from ..errors import UsageError
from .context import find_project, the_model
from .parser import Parser, common_options
from .render import emit


def add_parser(sub) -> None:
    """``frt release``'s flags."""
    s = sub.add_parser("release", help="publish a model's receipts and lock as a Hub release; trust a release's signers",
                       description="push: upload the model's manifest, the receipts its lock accepted (with their "
                                   "signature files) and the lockfile as one commit on branch vN of a Hub model repo "
                                   "(HF_ENDPOINT, HF_TOKEN). trust: add the signers the consumed release's lockfile "
                                   "names to the manifest's [trust.receipts], printing each "
                                   "(docs/releases-publish.md, docs/releases-consume.md).",
                       epilog="example: frt release push hf://acme/qwen-kernels --version 1; "
                              "frt release trust --model qwen")
    rsub = s.add_subparsers(dest="release_command", metavar="ACTION", parser_class=Parser, required=True,
                            help="push: publish; trust: accept the release's signers")
    r = rsub.add_parser("push", help="publish as one commit on branch vN of hf://ORG/NAME (created if missing)")
    common_options(r)
    r.add_argument("url", metavar="hf://ORG/NAME", help="the Hub model repo")
    r.add_argument("--model", help="the model to publish; may be left out when the project has one")
    r.add_argument("--version", type=int, default=None, help="the release version: branch vN (default: 1)")
    r = rsub.add_parser("trust", help="trust the signers of the release the manifest names (keys and identities)")
    common_options(r)
    r.add_argument("--model", help="the consuming model; may be left out when the project has one")


def run(args) -> int:
    """``frt release push hf://ORG/NAME [--model M] [--version N]`` / ``frt release trust [--model M]``."""
    from ..release import consume as release  # noqa: PLC0415

    project = find_project(args)
    model = the_model(project, args)
    if args.release_command == "push":
        repo, at = release.parse_ref(args.url, flag="frt release push")
        if at is not None and args.version is not None and at != args.version:
            raise UsageError(f"{args.url} names v{at}, --version {args.version}: give one")
        version = args.version if args.version is not None else (at if at is not None else 1)
        if version < 0:
            raise UsageError(f"--version {version}: must be a non-negative integer")
        from ..release.push import push  # noqa: PLC0415

        res = push(project, model, repo, version)
        what = (f"nothing changed: the head of {res['branch']} ({res['parent'][:12]}) already holds these files; "
                "no commit made" if res["unchanged"] else
                f"commit {res['commit'][:12]} on {res['branch']} (parent {res['parent'][:12]})")
        lines = [f"release {repo} v{version}: {what}; {res['receipts']} receipt(s), {len(res['files'])} file(s)"
                 + (f", {len(res['deleted'])} removed" if res["deleted"] else "")]
        lines += [f"  {src} -> {dest} (another receipt has its name)" for src, dest in sorted(res["renamed"].items())]
        emit(args, {"ok": True, **res}, "\n".join(lines))
        return 0
    from ..documents.lockfile import Lockfile  # noqa: PLC0415
    from ..documents.manifest import Manifest  # noqa: PLC0415

    m = Manifest.read(project.manifest_path(model), label=project.rel(project.manifest_path(model)))
    if m.release is None:
        raise UsageError(f"{m.file}: names no [release] to trust", hints=["frt init --from hf://ORG/NAME@vN"])
    lpath = project.lockfile_path(model)
    pinned = None
    if lpath.is_file():
        old = Lockfile.read(lpath, label=project.rel(lpath))
        if old.release and old.release["repo"] == m.release.repo and old.release["version"] == m.release.version:
            pinned = old.release
    fetched = release.fetch(m.release.repo, m.release.version, model, commit=pinned and pinned["commit"],
                            recorded=pinned and pinned.get("files"), mirror=settings.value("FRT_MIRROR") or project.mirror)
    rows = release.trust(project, model, fetched)
    emit(args, {"ok": True, "release": {"repo": fetched.repo, "commit": fetched.commit}, "trusted": rows},
          "\n".join(trust_lines(rows, fetched.repo, fetched.commit)))
    if any(r["added"] for r in rows) and not (args.quiet or args.json):
        print("hint: run `frt lock` to judge the release's receipts under the policy", file=sys.stderr)
    return 0


def shown(text) -> str:
    """``text`` safe on a terminal: every control or otherwise unprintable character (``\\r``, an ESC
    sequence, a bidi override) written as its escape, so a name from a release prints as what it is."""
    out = []
    for c in str(text):
        if c.isprintable():
            out.append(c)
        elif ord(c) < 0x100:
            out.append(f"\\x{ord(c):02x}")
        else:
            out.append(f"\\u{ord(c):04x}" if ord(c) < 0x10000 else f"\\U{ord(c):08x}")
    return "".join(out)


def signer_lines(found, repo, commit, code=()) -> list[str]:
    out = []
    if not found:
        out.append(f"note: the receipts of {repo}@{commit[:12]} carry no signature its lockfile records: with no "
                   "signer to trust, `frt lock` rejects every one")
    else:
        out.append(f"the receipts of {repo}@{commit[:12]} are signed by (its lockfile says; none is trusted yet):")
        out += [f"  {_signer(s)} ({s['receipts']} receipt(s))" for s in found]
    pk = [c for c in code if c["kind"] == "package"]
    if pk:
        out.append("the release's manifest trusts the code of (not copied; none is trusted yet):")
        out += [f"  package {shown(c['repo'])} ({_keys(c['keys'])})" for c in pk]
    for c in code:
        if c["kind"] == "publisher":
            out.append(f"note: the release's manifest has [trust.publishers.\"{shown(c['org'])}\"] "
                       f"({_keys(c['keys'])}): not copied, and `frt release trust` does not add it")
    if found or pk:
        out.append("review them, then `frt release trust` (or `frt init --from ... --trust`); until then `frt lock` "
                   "rejects every release receipt" + (" and refuses those packages" if pk else ""))
    return out


def _keys(keys: dict) -> str:
    from ..release.consume import _toml_value  # noqa: PLC0415

    return ", ".join(f"{k} = {shown(_toml_value(v))}" for k, v in keys.items())


def _signer(s: dict) -> str:
    if s["kind"] == "package":
        return f"package {shown(s['repo'])} ({_keys({k: s[k] for k in ('trust', 'signature', 'signer') if k in s})})"
    return f"key {s['keyid']}" if s["kind"] == "key" else f"identity {shown(s['identity'])} (issuer {shown(s['issuer'])})"


def trust_lines(rows, repo, commit) -> list[str]:
    out = []
    for r in rows:
        where = f" -> {r['file']}" if r.get("file") else ""
        what = (f"as the release's manifest at {repo}@{commit[:12]} has it" if r["kind"] == "package" else
                f"signs {r['receipts']} receipt(s) of {repo}@{commit[:12]}")
        out.append(f"{'trusted' if r['added'] else 'already trusted'}: {_signer(r)}{where} ({what})")
    return out
