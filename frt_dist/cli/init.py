"""``frt init``: create a project, or one from a Hub release (docs/reference.md#frt-init)."""

from __future__ import annotations

from pathlib import Path

from ..errors import UsageError
from .parser import output_options
from .release import signer_lines, trust_lines
from .render import emit


def add_parser(sub) -> None:
    """``frt init``'s flags."""
    s = sub.add_parser("init", help="create a project (pyproject.toml, a commented manifest, a kernel package)")
    s.add_argument("dir", metavar="DIR", nargs="?", default=".", help="the project folder (default: here)")
    s.add_argument("--model", default=None, metavar="M",
                   help="the model name of the first manifest (default: my-model); with "
                        "--from, the release's model (needed when it publishes several)")
    s.add_argument("--from", dest="from_release", metavar="hf://ORG/NAME@vN",
                   help="make the project from a release on the Hub: its manifest plus a [release] table; "
                        "`frt lock` then reads the release's receipts (docs/releases-consume.md)")
    s.add_argument("--trust", action="store_true",
                   help="with --from: trust the release's signers now (as `frt release trust` does, printing each)")
    output_options(s)


def run(args) -> int:
    from ..scaffold.init import init_project  # noqa: PLC0415

    if args.from_release:
        return _init_from(args)
    if args.trust:
        raise UsageError("frt init --trust: trusts a release's signers; it needs --from hf://ORG/NAME@vN")
    args.model = args.model or "my-model"
    written = init_project(args.dir, model=args.model)
    root = Path(args.dir).resolve()
    doc = {"project": str(root), "model": args.model, "written": [p.name for p in written]}
    emit(args, doc, f"created project {root} (model {args.model}): {', '.join(p.name for p in written)}\n"
                     f"next: cd {args.dir} && frt lock && frt qualify --model {args.model} --route fast-norm "
                     "(see docs/first-project.md)")
    return 0


def _init_from(args) -> int:
    """``frt init --from hf://ORG/NAME@vN [DIR] [--model M] [--trust]``."""
    from ..distribution import release_files  # noqa: PLC0415
    from ..release import consume  # noqa: PLC0415
    from ..release import trust as release_trust  # noqa: PLC0415
    from ..scaffold.init import init_from_release  # noqa: PLC0415

    repo, version = consume.parse_ref(args.from_release, flag="--from", need_version=True)
    commit, models = consume.models_of(repo, version)
    if args.model is not None:
        if args.model not in models:
            raise UsageError(f"--model {args.model}: release {repo} v{version} publishes {', '.join(models) or 'no model'}")
        model = args.model
    elif len(models) == 1:
        model = models[0]
    else:
        raise UsageError(f"release {repo} v{version} publishes {len(models)} models ({', '.join(models) or 'none'})",
                         hints=["name one: --model MODEL"])
    fetched = release_files.fetch(repo, version, model, commit=commit)
    text = release_trust.release_manifest(fetched)
    found = release_trust.signers(fetched) if f"lockfiles/{model}.lock" in fetched.files else []
    refused = release_trust.refused_signers(fetched, found) if args.trust else None
    if refused is not None:  # --trust would refuse after the project is made: refused before anything is written
        raise refused
    written = init_from_release(args.dir, model, text)
    root = Path(args.dir).resolve()
    from ..project.discover import Project  # noqa: PLC0415

    code = release_trust.code_trust(fetched)
    rows = release_trust.trust(Project(root, "project", {}), model, fetched) if args.trust else []
    doc = {"project": str(root), "model": model, "written": [p.name for p in written],
           "release": {"repo": repo, "version": version, "commit": commit},
           "signers": [{k: v for k, v in s.items() if k != "pem"} for s in found], "code-trust": code,
           "trusted": rows}
    lines = [f"created project {root} from release {repo} v{version} (commit {commit[:12]}, model {model}): "
             f"{', '.join(p.name for p in written)}"]
    lines += trust_lines(rows, repo, commit) if args.trust else signer_lines(found, repo, commit, code)
    lines.append(f"next: cd {args.dir} && frt lock" + ("" if args.trust else "   (after `frt release trust`)"))
    emit(args, doc, "\n".join(lines))
    return 0
