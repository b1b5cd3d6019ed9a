"""``frt release push|trust|upgrade``: Hub releases (docs/reference.md#frt-release)."""

from __future__ import annotations

import argparse
import sys

from .. import settings
from ..documents.lock_release import shown
from ..errors import FrtError, ReleaseError, UsageError
from .context import find_project, the_model
from .parser import Parser, common_options
from .render import deprecated, emit


def add_parser(sub) -> None:
    """``frt release``'s flags."""
    s = sub.add_parser("release", help="publish a model's receipts and lock as a Hub release; trust a release's signers",
                       description="push: upload the model's manifest, the receipts its lock accepted (with their "
                                   "signature files) and the lockfile as one commit on branch vN of a Hub model repo "
                                   "(HF_ENDPOINT, HF_TOKEN). trust: add the signers the consumed release's lockfile "
                                   "names to the manifest's [trust.receipts], printing each "
                                   "(docs/releases-publish.md, docs/releases-consume.md).",
                       epilog="example: frt release push hf://acme/qwen-kernels@v1; frt release trust --model qwen; "
                              "frt release upgrade @v2")
    rsub = s.add_subparsers(dest="release_command", metavar="ACTION", parser_class=Parser, required=True,
                            help="push: publish; trust: accept the release's signers")
    r = rsub.add_parser("push", help="publish as one commit on branch vN of hf://ORG/NAME@vN (created if missing)")
    common_options(r)
    r.add_argument("url", metavar="hf://ORG/NAME@vN",
                   help="the Hub model repo and the release version, branch vN (@vN left out: v1)")
    r.add_argument("--model", metavar="M", help="the model to publish; may be left out when the project has one")
    _old_version_flag(r)
    r = rsub.add_parser("trust", help="trust the signers of the release the manifest names (keys and identities) "
                                      "and the code trust its manifest declares")
    common_options(r)
    r.add_argument("--model", metavar="M", help="the consuming model; may be left out when the project has one")
    r = rsub.add_parser("upgrade", help="move to another version of the release: show its changes, apply its "
                                        "manifest (keeping your trust tables), lock")
    common_options(r)
    r.add_argument("release", metavar="[hf://ORG/NAME]@vN", nargs="?",
                   help="the version to move to, branch vN of the manifest's release (the repo may be left out; "
                        "default: the newest vN branch)")
    r.add_argument("--model", metavar="M", help="the consuming model; may be left out when the project has one")
    _old_version_flag(r)
    r.add_argument("--dry-run", action="store_true", help="show the changes; write nothing")
    r.add_argument("--trust", action="store_true",
                   help="also trust the new release's signers and code trust, as `frt release trust` does (printing "
                        "each), before locking")
    r.add_argument("--allow-loss", action="store_true",
                   help="lock even when the new lock loses coverage or accepts none of the receipts (as frt lock)")


def _old_version_flag(r) -> None:
    """``--version N``: the old spelling of ``@vN`` (hidden; it read like ``frt --version``)."""
    r.add_argument("--version", dest="old_version", type=int, default=None, metavar="N", help=argparse.SUPPRESS)


def _version(args, at: int | None, new: str) -> int | None:
    """The version asked for: ``@vN`` (``at``), else the deprecated ``--version N``; both and differing
    is a usage error."""
    if args.old_version is None:
        return at
    deprecated(f"--version {args.old_version}", new.format(n=args.old_version))
    if at is not None and at != args.old_version:
        raise UsageError(f"@v{at} and --version {args.old_version} name two versions; give one (@vN)")
    if args.old_version < 0:
        raise UsageError(f"--version {args.old_version}: must be a non-negative integer")
    return args.old_version


def run(args) -> int:
    """``frt release push hf://ORG/NAME[@vN] [--model M]`` / ``frt release trust [--model M]`` /
    ``frt release upgrade [[hf://ORG/NAME]@vN] [--model M] [--dry-run] [--trust] [--allow-loss]``."""
    from ..distribution import release_files  # noqa: PLC0415
    from ..release import consume  # noqa: PLC0415
    from ..release import trust as release_trust  # noqa: PLC0415

    project = find_project(args)
    model = the_model(project, args)
    if args.release_command == "push":
        repo, at = consume.parse_ref(args.url, flag="frt release push")
        version = _version(args, at, f"frt release push hf://{repo}@v{{n}}")
        version = 1 if version is None else version
        from ..publish.push import push  # noqa: PLC0415

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
        raise UsageError(f"{m.file}: names no [release] to {args.release_command}",
                         hints=["frt init --from hf://ORG/NAME@vN"])
    if args.release_command == "upgrade":
        return _upgrade(args, project, model, m)
    lpath = project.lockfile_path(model)
    pinned = None
    if lpath.is_file():
        old = Lockfile.read(lpath, label=project.rel(lpath))
        if old.release and old.release["repo"] == m.release.repo and old.release["version"] == m.release.version:
            pinned = old.release
    fetched = release_files.fetch(m.release.repo, m.release.version, model, commit=pinned and pinned["commit"],
                                  recorded=pinned and pinned.get("files"), mirror=settings.value("FRT_MIRROR") or project.mirror)
    rows = release_trust.trust(project, model, fetched)
    emit(args, {"ok": True, "release": {"repo": fetched.repo, "commit": fetched.commit}, "trusted": rows},
          "\n".join(trust_lines(rows, fetched.repo, fetched.commit)))
    if any(r["added"] for r in rows) and not (args.quiet or args.json):
        print("hint: run `frt lock` to judge the release's receipts under the policy", file=sys.stderr)
    return 0


def signer_lines(found, repo, commit, code=()) -> list[str]:
    out = []
    if not found:
        out.append(f"note: the receipts of {repo}@{commit[:12]} carry no signature its lockfile records: with no "
                   "signer to trust, `frt lock` rejects every one")
    else:
        out.append(f"the receipts of {repo}@{commit[:12]} are signed by (its lockfile says; none is trusted yet):")
        out += [f"  {_signer(s)} ({s['receipts']} receipt(s))" + _refused(s) for s in found]
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


def _refused(s: dict) -> str:
    """A signer `frt release trust` will not add: why, printed safely."""
    return f"; refused: {shown(s['refused'])}" if s.get("refused") else ""


def _keys(keys: dict) -> str:
    from ..release.trust import toml_value  # noqa: PLC0415

    return ", ".join(f"{k} = {shown(toml_value(v))}" for k, v in keys.items())


def _signer(s: dict) -> str:
    if s["kind"] == "package":
        return f"package {shown(s['repo'])} ({_keys({k: s[k] for k in ('trust', 'signature', 'signer') if k in s})})"
    return f"key {shown(s['keyid'])}" if s["kind"] == "key" else \
        f"identity {shown(s['identity'])} (issuer {shown(s['issuer'])})"


def trust_lines(rows, repo, commit) -> list[str]:
    out = []
    for r in rows:
        where = f" -> {r['file']}" if r.get("file") else ""
        what = (f"as the release's manifest at {repo}@{commit[:12]} has it" if r["kind"] == "package" else
                f"signs {r['receipts']} receipt(s) of {repo}@{commit[:12]}")
        out.append(f"{'trusted' if r['added'] else 'already trusted'}: {_signer(r)}{where} ({what})")
    return out


def _upgrade_ref(given: str | None, repo: str) -> int | None:
    """``frt release upgrade``'s ``[hf://ORG/NAME]@vN`` -> N (``None`` when left out); the repo, when
    named, must be the one the manifest's ``[release]`` consumes."""
    import re  # noqa: PLC0415

    from ..release import consume  # noqa: PLC0415

    if given is None:
        return None
    m = re.fullmatch(r"@v(\d+)", given)
    if m:
        return int(m.group(1))
    named, version = consume.parse_ref(given, flag="frt release upgrade", need_version=True)
    if named != repo:
        raise UsageError(f"frt release upgrade {given}: the manifest consumes release {repo!r}, not {named!r}",
                         hints=[f"frt release upgrade @v{version} (a version of {repo}); another release is another "
                                "project: frt init --from hf://ORG/NAME@vN"])
    return version


def _upgrade(args, project, model, m) -> int:
    """``frt release upgrade``: the change report, the release's manifest applied (the project's trust
    kept), then ``frt lock --upgrade-release`` for the model (its output, its coverage rule, its exit)."""
    import contextlib  # noqa: PLC0415
    import io  # noqa: PLC0415
    import json  # noqa: PLC0415

    from ..distribution import release_files  # noqa: PLC0415
    from ..documents.lock_writer import write_atomic  # noqa: PLC0415
    from ..documents.lockfile import Lockfile  # noqa: PLC0415
    from ..documents.schema import load_toml, parse_toml  # noqa: PLC0415
    from ..errors import LockfileError, ManifestError  # noqa: PLC0415
    from ..release import trust as release_trust  # noqa: PLC0415
    from ..release import upgrade  # noqa: PLC0415
    from . import lock as lock_cmd  # noqa: PLC0415

    repo = m.release.repo
    target = _version(args, _upgrade_ref(args.release, repo), "frt release upgrade @v{n}")
    target = upgrade.newest(repo) if target is None else target
    mirror = settings.value("FRT_MIRROR") or project.mirror
    lpath = project.lockfile_path(model)
    pinned = None
    if lpath.is_file():
        try:
            old = Lockfile.read(lpath, label=project.rel(lpath))
        except LockfileError:
            old = None
        if old is not None and old.release and old.release["repo"] == repo:
            pinned = old.release
    mpath = project.manifest_path(model)
    mine = load_toml(mpath, ManifestError, project.rel(mpath))
    before = {k: v for k, v in mine.items() if k != "release"}
    before_label = project.rel(mpath)
    if pinned:  # what the project consumes now: the release's manifest at the commit the lock pins
        try:
            was = release_files.fetch(repo, pinned["version"], model, commit=pinned["commit"],
                                recorded=pinned.get("files") or None, mirror=mirror)
            rel_path = f"manifests/{model}.toml"
            if rel_path in was.files:
                before = parse_toml(was.read(rel_path), ManifestError, f"{repo}@{was.commit[:12]}/{rel_path}")
                before_label = f"{repo}@{was.commit[:12]}/{rel_path}"
        except FrtError:
            pass
    new = release_files.fetch(repo, target, model, mirror=mirror)
    rel_path = f"manifests/{model}.toml"
    if rel_path not in new.files:
        raise ReleaseError(f"release {repo!r} v{target} at {new.commit[:12]} publishes no {rel_path}",
                           hints=["name another version (@vN), or the model it publishes (--model)"])
    after = parse_toml(new.read(rel_path), ManifestError, f"{repo}@{new.commit[:12]}/{rel_path}")
    rows = upgrade.manifest_changes(before, after, old_label=before_label, new_label=f"{repo}/{rel_path}")
    signers = upgrade.new_signers(project, model, new)
    trusted_pkgs = {r for r, t in mine.get("packages", {}).items() if t.get("trust")}
    code = [c for c in release_trust.code_trust(new) if c["kind"] == "package" and c["repo"] not in trusted_pkgs]
    doc = {"repo": repo, "from-version": m.release.version, "version": target,
           "from-commit": pinned["commit"] if pinned else None, "commit": new.commit, "manifest": rows,
           "signers": signers, "code-trust": code, "applied": False}
    lines = upgrade.change_lines(doc)
    if args.dry_run:
        lines.append(f"dry run: {project.rel(mpath)} and the lockfile left as they are; to apply: `frt release upgrade "
                     f"--model {model} @v{target}`" + (" (with --trust to trust what is marked NEW)"
                                                               if any(s["new"] for s in signers) or code else ""))
        emit(args, {"ok": True, "upgrade": doc}, "\n".join(lines))
        return 0
    text, _ = upgrade.apply(project, model, new)
    refused = release_trust.refused_signers(new, signers) if args.trust else None
    if refused is not None:  # --trust would refuse them: said before anything is written
        raise refused
    old_text = mpath.read_bytes()
    keys_before = {p: p.read_bytes() for p in (project.root / "keys").rglob("*") if p.is_file()} \
        if (project.root / "keys").is_dir() else {}
    write_atomic(mpath, text.encode("utf-8"))
    doc["applied"] = True
    trusted = []
    if args.trust:
        try:
            trusted = release_trust.trust(project, model, new)
        except (ReleaseError, UsageError):
            write_atomic(mpath, old_text)
            raise
        doc["trusted"] = trusted
        lines += trust_lines(trusted, repo, new.commit)
    lines.append(f"{project.rel(mpath)}: now the release's v{target} manifest, your trust tables kept; locking "
                 "(the coverage rule applies)")
    ns = argparse.Namespace(**{**vars(args), "model": model, "check": False, "strict": False,
                               "upgrade_package": [], "upgrade_release": True, "export": None, "output": None,
                               "verbose": getattr(args, "verbose", False)})
    out, err = io.StringIO(), io.StringIO()
    rc = None
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = lock_cmd.run(ns)
    finally:
        if rc != 0:  # everything or nothing: the manifest (and keys written by --trust) as they were
            write_atomic(mpath, old_text)
            for p in sorted((project.root / "keys").rglob("*")) if (project.root / "keys").is_dir() else ():
                if p.is_file() and p not in keys_before:
                    p.unlink()
            doc["applied"] = False
    hints = []
    if rc != 0:
        again = f"frt release upgrade --model {model} @v{target}"
        if any(s["new"] for s in signers) or code:
            hints.append(f"review the signers and packages marked NEW above, then `{again} --trust` (it trusts them, "
                         "printing each, then locks)")
        hints.append(f"to take the version with less coverage on purpose: `{again} --allow-loss`")
    if args.json:
        emit(args, {"ok": rc == 0, "upgrade": doc, "lock": json.loads(out.getvalue() or "{}"),
                    **({"hints": hints} if hints else {})}, "")
        return rc
    if not args.quiet:
        print("\n".join(lines))
        print(out.getvalue(), end="")
    for ln in err.getvalue().splitlines():
        if not (rc != 0 and ln.startswith("hint: ")):  # the lock's hints name steps for a lock; these name the upgrade
            print(ln, file=sys.stderr)
    if rc != 0:
        print(f"error: {model}: the upgrade to v{target} is not applied: {project.rel(mpath)} and the lockfile are as "
              "they were", file=sys.stderr)
        for h in hints:
            print(f"hint: {h}", file=sys.stderr)
    return rc
