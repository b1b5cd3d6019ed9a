"""The ``frt`` command (SPEC §4).

Exit codes: 0 success; 1 a "no" (refused route, stale lock, failed
verification, refused package); 2 bad invocation or invalid input. Errors go
to stderr as ``error: ...`` then ``hint: ...`` lines. Every reporting command
takes ``--json``. Commands import torch/kernels only when they run kernels
(``mirror`` of Hub packages, ``qualify``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from ..base.canonical import short_digest
from ..errors import FrtError, UsageError

__all__ = ["main"]


_ARGV: list[str] = []  # what main() parses: the parser's errors look at it for --json and suggestions


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse exits 2 too; keep SPEC's one-line form
        hints = _suggestions(self, message)
        if "--json" in _ARGV:
            _print_json({"error": message, "hints": hints, "exit": 2})
        else:
            self.print_usage(sys.stderr)
            print(f"error: {message}", file=sys.stderr)
            for h in hints:
                print(f"hint: {h}", file=sys.stderr)
        raise SystemExit(2)


def _suggestions(parser: argparse.ArgumentParser, message: str) -> list[str]:
    """``did you mean ...`` for a mistyped subcommand, flag or choice (like git and uv)."""
    import difflib  # noqa: PLC0415
    import re  # noqa: PLC0415

    m = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
    if m:
        choices = re.findall(r"'([^']*)'", m.group(2))
        close = difflib.get_close_matches(m.group(1), choices, n=1, cutoff=0.5)
        return [f"did you mean {close[0]!r}?"] if close else []
    options = set(parser._option_string_actions)
    for action in parser._actions:  # the subcommand's own flags, when one was named
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                if name in _ARGV:
                    options |= set(sub._option_string_actions)
    out = []
    for word in _ARGV:  # every flag given that the command does not know (argparse may name another error first)
        flag = word.split("=", 1)[0]
        if flag.startswith("-") and flag not in options and not flag.lstrip("-").replace(".", "").isdigit():
            close = difflib.get_close_matches(flag, sorted(options), n=1, cutoff=0.6)
            if close:
                out.append(f"{flag}: did you mean {close[0]}?")
    return out


def _count(text: str) -> int:
    """An argparse type: a whole number >= 1 (``--rounds 0`` is a usage error, not an empty run)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a number >= 1, got {n}")
    return n


def _output_file(text: str) -> str:
    """An argparse type for ``-o FILE``: its folder must exist (no silent ``mkdir -p``)."""
    parent = Path(text).expanduser().resolve().parent
    if not parent.is_dir():
        raise argparse.ArgumentTypeError(f"folder {parent} does not exist")
    return text


def _print_json(doc: dict) -> None:
    print(json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False))


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--project", metavar="DIR", help="project root (default: FRT_PROJECT, else the project or node at or "
                                                    "above this folder, else FRT_HOME; none is exit 2)")
    p.add_argument("--demo", action="store_true", help="use the bundled demo project (read-only)")
    p.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    p.add_argument("--quiet", "-q", action="store_true", help="print nothing but errors")


def _hardware_flags(p: argparse.ArgumentParser) -> None:
    """The declared-hardware flags (SPEC §17: any machine can be declared on any machine);
    ``_hardware(args)`` turns them into a ``Hardware``."""
    from ..system.hardware import BACKENDS, CPUS, OSES  # noqa: PLC0415

    g = p.add_argument_group("hardware (declared, or --detect)")
    g.add_argument("--arch", help="compute capability as major.minor (12.0, not sm_120), gfx name (gfx942), "
                                  "or the CPU (x86_64) on the cpu backend")
    g.add_argument("--device-class", help="device name, normalised: 'NVIDIA H200' is h200")
    g.add_argument("--backend", choices=BACKENDS, help="default: from --arch")
    g.add_argument("--cpu", metavar="CPU", help=f"the host CPU variants are built for: {', '.join(CPUS)} "
                                                "(default: this machine's)")
    g.add_argument("--os", metavar="OS", help=f"the host OS: {', '.join(OSES)} (default: this machine's)")
    g.add_argument("--software", metavar="K=V,...",
                   help="dispatch-relevant software, e.g. torch=2.13,cuda=12.8 (also rocm, xpu, cann, tvm-ffi, macos)")
    g.add_argument("--detect", action="store_true",
                   help="read the running system; the default when no hardware is declared")


class _Unused:
    """Stands for a subcommand that this run does not parse (``build_parser(only=)``): neither it
    nor its flags are built. ``frt --help`` (no subcommand named) builds them all, as before."""

    def add_argument(self, *args, **kwargs):
        return None

    def add_argument_group(self, *args, **kwargs):
        return self

    def add_mutually_exclusive_group(self, *args, **kwargs):
        return self

    def add_subparsers(self, *args, **kwargs):  # a subcommand with actions of its own (`frt receipts push`)
        return self

    def add_parser(self, *args, **kwargs):
        return self

    def set_defaults(self, **kwargs):
        return None


class _OnlySubparsers:
    """``add_subparsers()``'s action, handing back ``_Unused`` for every subcommand but ``only``
    (which is then the only one made: the top-level usage names ``COMMAND``, not the list)."""

    def __init__(self, action, only: str | None):
        self._action, self._only = action, only

    def add_parser(self, name, **kwargs):
        if self._only is not None and name != self._only:
            return _Unused()
        return self._action.add_parser(name, **kwargs)


def _named_command(argv: list[str]) -> str | None:
    """The subcommand ``argv`` runs when that is certain from its head (only ``--project DIR``
    before it), else ``None``: then every subcommand's flags are built, as for ``--help``."""
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--project":
            i += 2
        elif a.startswith("--project=") or a == "--demo":
            i += 1
        else:
            return a if a in COMMANDS else None
    return None


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The ``frt`` parser. ``only``: build that one subcommand and its flags (start-up: building
    all eight costs more than `frt resolve`'s own work); ``None``: all of them."""
    p = _Parser(prog="frt", description="Distribution layer for qualified GPU kernel packages.")
    p.add_argument("--version", action="version", version=f"frt {__import__('frt_dist').__version__}")
    p.add_argument("--project", metavar="DIR", dest="global_project",
                   help="project root for the command that follows (`frt --project DIR lock`); the same as the "
                        "command's own --project")
    p.add_argument("--demo", action="store_true", dest="global_demo",
                   help="use the bundled demo project (read-only) for the command that follows (`frt --demo resolve`)")
    sub = _OnlySubparsers(p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser), only)

    s = sub.add_parser("lock", help="lock every manifest (or one) into lockfiles/")
    _common(s)
    s.add_argument("--model", help="lock one model")
    s.add_argument("--check", action="store_true", help="write nothing; exit 1 naming what is stale")
    s.add_argument("--strict", action="store_true", help="exit 1 when any receipt is rejected")
    s.add_argument("--allow-loss", action="store_true",
                   help="write the lock even when it loses coverage the lock it replaces had (a route lost in a "
                        "cell, or a state dropped to supported_correct); without it such a lock is exit 1, the "
                        "old lockfile left as it was")
    s.add_argument("--upgrade-package", action="append", default=[], metavar="REPO",
                   help="re-resolve REPO's branch on the Hub (otherwise a locked commit is kept)")
    s.add_argument("--upgrade-release", action="store_true",
                   help="move the manifest's [release] to its branch's head (otherwise the locked release commit "
                        "is kept) and report each receipt added, removed or edited")
    s.add_argument("--export", choices=["kernels", "cyclonedx"],
                   help="write nothing to lockfiles/: print the locked pins in another tool's lock format "
                        "(kernels: a kernels.lock for kernels.load_kernel / LockedLayerRepository). kernels checks "
                        "no file digest when it loads: an edited file in the mirror runs; check the mirror with "
                        "`frt verify --mirror DIR` before such a load (frt_dist.load checks every file itself). "
                        "cyclonedx: one model's lock as a CycloneDX 1.6 JSON SBOM (packages at their commits, "
                        "file hashes, publisher signers, route receipts)")
    s.add_argument("-o", "--output", metavar="FILE", type=_output_file,
                   help="with --export: write to FILE instead of stdout")

    s = sub.add_parser("resolve", help="print the route decision per phase band")
    _common(s)
    s.add_argument("--model", help="the model whose lockfile decides (lockfiles/MODEL.lock); "
                                   "may be left out when the project has one model")
    _hardware_flags(s)
    s.add_argument("--precision", help="the precision asked for (default: the manifest's default-precision); "
                                       "a lower one is never chosen for you")
    s.add_argument("--phase", action="append", help="one phase band (repeatable); default: all")
    s.add_argument("--fallback", choices=["refuse", "host"], default="refuse",
                   help="a band with no qualified route: refuse (default, exit 1) or decide the host path")
    s.add_argument("--accept", action="append", choices=["certified_fast", "supported_correct"],
                   help="accepted states (repeatable); default certified_fast; supported_correct implies both")
    s.add_argument("--explain", action="store_true",
                   help="list every candidate route, why it won or lost, every failing package, and the "
                        "variant this system selects for each package")
    s.add_argument("-v", "--verbose", action="store_true",
                   help="with --explain (implies it): also every locked variant, accepted or rejected and why")
    s.add_argument("--lockfile", metavar="FILE", help="resolve against this lockfile")

    s = sub.add_parser("verify", help="check lockfile digests and receipts (and a mirror)")
    _common(s)
    s.add_argument("--model", help="verify one model's lockfile (default: every lockfile of the project)")
    s.add_argument("--mirror", metavar="DIR", help="also check that DIR holds every locked file")
    s.add_argument("--variant", action="append", help="with --mirror: variants to check (default: this system's)")
    s.add_argument("--all-variants", action="store_true", help="with --mirror: check every locked variant")

    s = sub.add_parser("mirror", help="fill DIR (or publish to an object store) with every locked file the selection needs",
                       description="Fill DIR with every locked file the selection needs. Select by --variant, "
                                   "--all-variants, the machines you ship to (the hardware flags for one, "
                                   "--machine for each further one), or --cells; default: this machine. "
                                   "With an object-store URL (s3://bucket/prefix, file:///path) instead of DIR: "
                                   "publish those files there, then the lockfile(s). With --from URL: fill DIR "
                                   "from such a store, every file verified against the local lockfile.",
                       epilog="example: frt mirror DIR --arch 9.0 --device-class h200 --software torch=2.13,cuda=12.8 "
                              "--machine 'arch=12.0,device-class=rtx-5090,software=torch=2.13;cuda=12.8'; "
                              "frt mirror s3://bucket/frt --cells; frt mirror /srv/kernels --from s3://bucket/frt "
                              "(AWS_ENDPOINT_URL, AWS_PROFILE, AWS_ACCESS_KEY_ID... as the AWS tools read them)")
    _common(s)
    s.add_argument("dir", metavar="DIR|URL", help="the mirror folder (a hub-cache layout; created when needed), or "
                                                  "an object store to publish to: s3://bucket/prefix, file:///path")
    s.add_argument("--from", dest="from_url", metavar="URL",
                   help="fill DIR from this object store (s3://bucket/prefix, file:///path) instead of the "
                        "packages' own sources; the project's lockfile decides what and verifies every byte")
    s.add_argument("--repair", action="store_true",
                   help="publishing: send every selected object again, even one already present with the right size")
    s.add_argument("--model", help="one model's lockfile (default: every lockfile of the project)")
    s.add_argument("--variant", action="append", help="a variant to mirror (repeatable); default: this system's")
    s.add_argument("--all-variants", action="store_true", help="every locked variant of every package")
    _hardware_flags(s)
    s.add_argument("--machine", action="append", metavar="KEY=V,...",
                   help="a machine to mirror for (repeatable): the hardware flags as KEY=VALUE pairs, software "
                        "pairs joined by ';', e.g. arch=9.0,device-class=h200,software=torch=2.13;cuda=12.8")
    s.add_argument("--cells", action="store_true",
                   help="every variant that any locked cell selects, on the facts its receipt records")

    s = sub.add_parser("receipts", help="carry receipts between hosts through an object store (push, pull)",
                       description="Qualification hosts push their receipts to an object store; the lock job pulls "
                                   "them into receipts/ and runs `frt lock`. Each receipt is stored once under its "
                                   "canonical digest, so order and duplicates do not change the lock.",
                       epilog="example: frt receipts push s3://bucket/frt (on each GPU host); frt receipts pull "
                              "s3://bucket/frt && frt lock (on the lock job)")
    rsub = s.add_subparsers(dest="receipts_command", metavar="ACTION", parser_class=_Parser, required=True,
                            help="push: send receipts to a store; pull: fetch them into receipts/")
    r = rsub.add_parser("push", help="send receipts to URL, each under its canonical digest")
    _common(r)
    r.add_argument("url", metavar="URL", help="s3://bucket/prefix or file:///path")
    r.add_argument("paths", metavar="PATH", nargs="*",
                   help="receipt files or folders (default: the project's receipts/ folder)")
    r = rsub.add_parser("pull", help="fetch every receipt in URL into the project's receipts/<model>/")
    _common(r)
    r.add_argument("url", metavar="URL", help="s3://bucket/prefix or file:///path")
    r.add_argument("--model", help="only this model's receipts")
    r.add_argument("--strict", action="store_true",
                   help="exit 1 when the store holds an object that is not a valid receipt (default: a warning "
                        "naming it; it is not written, and the others are)")

    s = sub.add_parser("qualify", help="measure a route against the unmodified host and write receipts")
    _common(s)
    s.add_argument("--model", help="the model whose manifest names the route; may be left out when the project "
                                   "has one model")
    s.add_argument("--route", required=True, help="the route to measure against the manifest's host-entry")
    s.add_argument("--phase", action="append", help="one phase band (repeatable); default: every band")
    s.add_argument("--rounds", type=_count, help="paired timing rounds (default: the manifest's [qualify] rounds)")
    s.add_argument("--max-rounds", type=_count, help="the cap of adaptive timing while the speedup is undecided "
                                                     "(default: [qualify] max-rounds, else 4x the rounds)")
    s.add_argument("--out", metavar="DIR", help="receipts folder (default: the project's receipts/<model>/)")
    s.add_argument("--seed", type=int, default=0, help="seed of the synthetic inputs and host weights (default 0)")
    sign = s.add_mutually_exclusive_group()
    sign.add_argument("--sign", metavar="KEY", help="sign each receipt written with the PEM private key KEY (EC P-256 or "
                                                    "Ed25519): writes <receipt>.json.sig beside it (SPEC §26)")
    sign.add_argument("--unsigned", action="store_true",
                      help="qualify without signing where the manifest's [trust.receipts] policy covers this "
                           "machine (otherwise refused before measuring): sign the receipts afterwards with frt sign")

    s = sub.add_parser("sign", help="sign receipts: write <receipt>.json.sig (a DSSE envelope) beside each",
                       description="Sign each RECEIPT with a PEM private key (EC P-256 or Ed25519): writes "
                                   "<receipt>.json.sig, a DSSE envelope whose payload is an in-toto Statement naming "
                                   "the receipt's canonical digest. A manifest's [trust.receipts] policy lists the "
                                   "public keys `frt lock` accepts (docs/provenance.md).",
                       epilog="example: frt sign --key qualify-ci.pem receipts/demo-decoder/*.json")
    s.add_argument("receipts", nargs="+", metavar="RECEIPT", help="a receipt file (JSON)")
    how = s.add_mutually_exclusive_group(required=True)
    how.add_argument("--key", metavar="KEY", help="the PEM private key (unencrypted): writes <receipt>.json.sig")
    how.add_argument("--sigstore", action="store_true",
                     help="sign keylessly with this CI's OIDC identity through Sigstore (network): writes "
                          "<receipt>.json.sigstore, a bundle over the receipt's canonical JSON")
    s.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    s.add_argument("--quiet", "-q", action="store_true", help="print nothing but errors")

    s = sub.add_parser("init", help="create a project (pyproject.toml, a commented manifest, a kernel package)")
    s.add_argument("dir", metavar="DIR", nargs="?", default=".", help="the project folder (default: here)")
    s.add_argument("--model", default=None, help="the model name of the first manifest (default: my-model); with "
                                                 "--from, the release's model (needed when it publishes several)")
    s.add_argument("--from", dest="from_release", metavar="hf://ORG/NAME@vN",
                   help="make the project from a release on the Hub: its manifest plus a [release] table; "
                        "`frt lock` then reads the release's receipts (docs/releases-consume.md)")
    s.add_argument("--trust", action="store_true",
                   help="with --from: trust the release's signers now (as `frt release trust` does, printing each)")
    s.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    s.add_argument("--quiet", "-q", action="store_true", help="print nothing but errors")

    s = sub.add_parser("release", help="publish a model's receipts and lock as a Hub release; trust a release's signers",
                       description="push: upload the model's manifest, the receipts its lock accepted (with their "
                                   "signature files) and the lockfile as one commit on branch vN of a Hub model repo "
                                   "(HF_ENDPOINT, HF_TOKEN). trust: add the signers the consumed release's lockfile "
                                   "names to the manifest's [trust.receipts], printing each (docs/releases-publish.md, docs/releases-consume.md).",
                       epilog="example: frt release push hf://acme/qwen-kernels --version 1; "
                              "frt release trust --model qwen")
    rsub = s.add_subparsers(dest="release_command", metavar="ACTION", parser_class=_Parser, required=True,
                            help="push: publish; trust: accept the release's signers")
    r = rsub.add_parser("push", help="publish as one commit on branch vN of hf://ORG/NAME (created if missing)")
    _common(r)
    r.add_argument("url", metavar="hf://ORG/NAME", help="the Hub model repo")
    r.add_argument("--model", help="the model to publish; may be left out when the project has one")
    r.add_argument("--version", type=int, default=None, help="the release version: branch vN (default: 1)")
    r = rsub.add_parser("trust", help="trust the signers of the release the manifest names (keys and identities)")
    _common(r)
    r.add_argument("--model", help="the consuming model; may be left out when the project has one")

    s = sub.add_parser("digest", help="rewrite a package's metadata.json file digests after editing it",
                       description="Recompute the `digest` of each build/<variant>/metadata.json of a package you "
                                   "are developing from the files now there (kernels' rule: every file but "
                                   "metadata.json, metadata.json.sigstore, __pycache__/ and *.pyc), keeping every "
                                   "other key. `frt lock` refuses a path package whose files do not match these "
                                   "digests. It blesses what is in the folder: review the change first.",
                       epilog="example: frt digest packages/rmsnorm && frt lock")
    s.add_argument("paths", nargs="+", metavar="PATH", help="a package folder (with build/) or one variant folder")
    s.add_argument("--check", action="store_true", help="write nothing; exit 1 naming each stale variant and file")
    s.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    s.add_argument("--quiet", "-q", action="store_true", help="print nothing but errors")

    s = sub.add_parser("matrix", help="render the cell x route state matrix from the lockfiles")
    _common(s)
    s.add_argument("--model", help="one model's lockfile (default: every lockfile of the project)")
    s.add_argument("--format", choices=["text", "md", "html"],
                   help="an aligned plain-text table (the default on a terminal), Markdown (the default into a "
                        "pipe or -o FILE: a review's format) or a self-contained HTML page; --json gives the JSON "
                        "document")
    s.add_argument("-o", "--output", metavar="FILE", type=_output_file, help="write to FILE instead of stdout")
    return p


# ---------------------------------------------------------------------------


def _project(args):
    """The project in force (``Project.find``: outside any project, ``NoProject``, exit 2), said once
    on stderr: always for the bundled demo (``--demo``), whatever stdout is (under ``--json`` too, as
    stdout is the document), on a terminal for any other project; ``--quiet`` silences it.
    ``--json`` documents carry it as ``"project": {"root", "kind", "bundled"}`` (``_emit``)."""
    from ..project.discover import Project  # noqa: PLC0415

    project = Project.find(explicit=args.project, demo=getattr(args, "demo", False))
    args.frt_project = project
    if not args.quiet:
        if project.read_only:
            print(f"note: using the bundled demo project (read-only) at {project.root} (--demo)", file=sys.stderr)
        elif sys.stderr.isatty() and not args.json:  # a person at a terminal sees which project
            print(f"note: {project.describe()}", file=sys.stderr)
    return project


def _project_doc(args) -> dict | None:
    """``{"root", "kind", "bundled"}`` of the project a command used, for its ``--json`` document."""
    project = getattr(args, "frt_project", None)
    if project is None:
        return None
    return {"root": str(project.root), "kind": project.kind, "bundled": project.read_only}


class _NoBar:
    def update(self, n=1):
        pass

    def set_postfix_str(self, s):
        pass

    def close(self):
        pass


def _bar(args, **kw):
    """A ``huggingface_hub`` tqdm on stderr for long work: off under ``--quiet``/``--json``,
    when stderr is not a terminal (checked first, so nothing is imported then), and
    when ``HF_HUB_DISABLE_PROGRESS_BARS`` is set (huggingface_hub's own switch)."""
    if args.quiet or args.json or not sys.stderr.isatty():
        return _NoBar()
    from huggingface_hub.utils import tqdm  # noqa: PLC0415

    return tqdm(file=sys.stderr, leave=False, dynamic_ncols=True, **kw)


def _emit(args, doc: dict, text: str) -> None:
    if args.json:
        where = _project_doc(args)
        if where is not None and "project" not in doc:  # a command's own "project" key stays (`frt init`)
            doc = {**doc, "project": where}
        print(json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False))
    elif not args.quiet and text:
        print(text)


def cmd_lock(args) -> int:
    """Lock every model it can: a model whose packages fail is reported (`error: <model>: <package>:
    <reason>`), its lockfile left as it was, and the others are still locked and written; the run
    then exits non-zero. One ``LockSession`` fetches a package shared by several models once."""
    from ..lock.build import CoverageLoss, LockFailed, LockSession, lock_model  # noqa: PLC0415

    if args.export:
        return _lock_export(args)
    project = _project(args)
    project.need_manifests("lock")
    models = [args.model] if args.model is not None else project.models()
    if args.model is not None:
        project.manifest_path(args.model)
    if not models:
        raise UsageError(f"no manifests in {project.manifests_dir}")
    results, failed, stale_any = [], [], False
    session = LockSession()
    warn = (lambda m: None) if args.quiet and not args.json else (lambda m: print(f"warning: {m}", file=sys.stderr))
    for model in models:
        bar = None

        def progress(ev: dict) -> None:
            nonlocal bar
            if bar is None:
                bar = _bar(args, total=ev["total"], desc=f"lock {ev['model']}", unit="pkg")
            bar.update(1)
            bar.set_postfix_str(ev["repo"])

        try:
            res = lock_model(project, model, check=args.check, strict=args.strict, allow_loss=args.allow_loss,
                             upgrade=set(args.upgrade_package), warn=warn, progress=progress, session=session,
                             upgrade_release=args.upgrade_release)
        except CoverageLoss as exc:  # reported like the others, with its diff: the old lockfile stays
            results.append(exc.result)
            failed.append((model, exc))
            continue
        except FrtError as exc:
            if len(models) == 1 and not isinstance(exc, LockFailed):
                raise  # one model, and not its packages (a bad manifest): the plain error
            failed.append((model, exc))
            continue
        finally:
            if bar is not None:
                bar.close()
        results.append(res)
        stale_any |= bool(res.stale)
    lines = []
    refused = {model for model, exc in failed if isinstance(exc, CoverageLoss)}
    for r in results:
        rel = project.rel(r.path)
        cov = r.coverage
        if args.check:
            lines.append(f"{rel}: {'stale' if r.stale else 'up to date'}")
            lines += [f"  - {s}" for s in r.stale]
            if cov.changes:
                lines.append(f"  coverage if locked now: {cov.summary()}")
        else:
            state = "not written, coverage would shrink" if r.model in refused else \
                "written" if r.written else "unchanged"
            lines.append(f"{rel}: {state} "
                         f"({len(r.lockfile.packages)} packages, {len(r.lockfile.receipts)} receipts, "
                         f"{len(r.lockfile.rejected)} rejected, {len(r.lockfile.index)} cells"
                         + ("; first lock" if cov.first else f"; {cov.summary()}" if cov.changes else
                            "; coverage unchanged" if r.written else "") + ")")
        lines += [f"  {c}" for c in cov.lines(limit=None if r.model in refused else 20)]
        if r.written and cov.losses and not args.json and not args.quiet:
            n = cov.counts()
            print(f"warning: {r.model}: written with less coverage than {rel} had ({n['lost']} lost, "
                  f"{n['dropped']} dropped), as --allow-loss asks", file=sys.stderr)
        if r.release:
            from ..release.consume import change_lines  # noqa: PLC0415

            lines += change_lines(r.release)
    failures = []
    for model, exc in failed:
        if isinstance(exc, CoverageLoss):
            failures += [{"model": model, "package": None, **{k: v for k, v in r.items() if k != "model"},
                          "reason": f"{r['kind']} {r['cell']} route {r['route']}: {r['reason']}"} for r in exc.reasons]
        else:
            failures += [{"model": model, "package": r.get("package"), "reason": r["reason"]}
                         for r in (exc.reasons if isinstance(exc, LockFailed) else [{"reason": str(exc)}])]
    hints = list(dict.fromkeys(h for _, exc in failed for h in exc.hints))
    doc = {"ok": not stale_any and not failed, "lockfiles": [
        {"model": r.model, "path": project.rel(r.path), "written": r.written, "stale": r.stale,
         "lock-digest": None if r.model in refused else r.lockfile.lock_digest, "receipts": len(r.lockfile.receipts),
         "rejected": r.lockfile.rejected, "refused": "coverage-loss" if r.model in refused else None,
         "coverage": r.coverage.to_dict(), **({"release": r.release} if r.release else {})} for r in results], "failures": failures, "hints": hints}
    _emit(args, doc, "\n".join(lines))
    if stale_any:
        print("error: lockfile is stale", file=sys.stderr)
        print("hint: run `frt lock` to regenerate it", file=sys.stderr)
    if failed and not args.json:
        for model, exc in failed:
            if isinstance(exc, CoverageLoss):
                print(f"error: {model}: {exc.summary}", file=sys.stderr)
        for f in failures:
            print(f"error: {f['model']}: " + (f"{f['package']}: " if f["package"] else "") + f["reason"], file=sys.stderr)
        for h in hints:
            print(f"hint: {h}", file=sys.stderr)
    return max([exc.exit_code for _, exc in failed] + [1 if stale_any else 0])


def _lock_export(args) -> int:
    """``frt lock --export kernels``: the pins of the lockfiles in force, in `kernels`' format."""
    from ..lock.export_kernels import kernels_lock_json  # noqa: PLC0415
    from ..documents.lockfile import Lockfile  # noqa: PLC0415

    if args.export == "cyclonedx":
        return _lock_export_sbom(args)
    project = _project(args)
    models = [args.model] if args.model is not None else project.models()
    locks = [Lockfile.read(project.existing_lockfile(m)) for m in models]
    text = kernels_lock_json(locks)
    _export_output(args, text, f"{len(json.loads(text))} kernels, from {', '.join(project.rel(l.path) for l in locks)}")
    if not args.quiet:  # after the export exists: a write that failed gets its error alone
        print("note: kernels checks no file digest when it loads through this kernels.lock: run "
              "`frt verify --mirror DIR` on the mirror before such a load", file=sys.stderr)
    return 0


def _lock_export_sbom(args) -> int:
    """``frt lock --export cyclonedx``: one model's lockfile as a CycloneDX 1.6 JSON SBOM."""
    from ..documents.lockfile import Lockfile  # noqa: PLC0415
    from ..provenance.sbom import cyclonedx_json, package_licences, source_date  # noqa: PLC0415

    when = source_date()  # a bad SOURCE_DATE_EPOCH is exit 2 before anything is read
    project = _project(args)
    models = [args.model] if args.model is not None else project.models()
    if len(models) != 1:
        raise UsageError(f"frt lock --export cyclonedx describes one model; this project has {len(models)} "
                         f"({', '.join(models) or 'none'})", hints=["name one: --model MODEL"])
    path = project.existing_lockfile(models[0])
    lock = Lockfile.read(path, label=project.rel(path))
    _export_output(args, cyclonedx_json(lock, licences=package_licences(lock, project.root), timestamp=when),
                   f"CycloneDX 1.6, {len(lock.packages)} package(s), from {project.rel(lock.path)}")
    return 0


def _export_output(args, text: str, what: str) -> None:
    """An export to ``-o FILE`` (whole or not at all, then ``wrote FILE (what)`` unless quiet),
    else to standard output."""
    if args.output:
        out = Path(args.output)
        _write_output(out, text.encode("utf-8"))
        if not args.quiet:
            print(f"wrote {out} ({what})", file=sys.stderr)
    else:
        sys.stdout.write(text)


def _write_output(out: Path, data: bytes) -> None:
    """``-o FILE``, whole or not at all: a temp file beside FILE renamed over it, removed on any
    failure (``write_atomic``). A failure names FILE, not the temp file: ``error: -o FILE: cannot
    be written: <cause>`` (exit 2), FILE as it was before."""
    from ..documents.lockfile import write_atomic  # noqa: PLC0415

    try:
        write_atomic(out, data)
    except OSError as exc:
        cause = exc.strerror or str(exc) or type(exc).__name__
        raise UsageError(f"-o {out}: cannot be written: {cause}", hints=_os_error(exc).hints,
                       reasons=[{"path": str(out), "reason": cause}]) from None


def cmd_init(args) -> int:
    from ..project.init import init_project  # noqa: PLC0415

    if args.from_release:
        return _init_from(args)
    if args.trust:
        raise UsageError("frt init --trust: trusts a release's signers; it needs --from hf://ORG/NAME@vN")
    args.model = args.model or "my-model"
    written = init_project(args.dir, model=args.model)
    root = Path(args.dir).resolve()
    doc = {"project": str(root), "model": args.model, "written": [p.name for p in written]}
    _emit(args, doc, f"created project {root} (model {args.model}): {', '.join(p.name for p in written)}\n"
                     f"next: cd {args.dir} && frt lock && frt qualify --model {args.model} --route fast-norm "
                     "(see docs/first-project.md)")
    return 0


def _init_from(args) -> int:
    """``frt init --from hf://ORG/NAME@vN [DIR] [--model M] [--trust]``."""
    from ..release import consume as release  # noqa: PLC0415
    from ..project.init import init_from_release  # noqa: PLC0415

    repo, version = release.parse_ref(args.from_release, flag="--from", need_version=True)
    commit, models = release.models_of(repo, version)
    if args.model is not None:
        if args.model not in models:
            raise UsageError(f"--model {args.model}: release {repo} v{version} publishes {', '.join(models) or 'no model'}")
        model = args.model
    elif len(models) == 1:
        model = models[0]
    else:
        raise UsageError(f"release {repo} v{version} publishes {len(models)} models ({', '.join(models) or 'none'})",
                         hints=["name one: --model MODEL"])
    fetched = release.fetch(repo, version, model, commit=commit)
    written = init_from_release(args.dir, model, release.release_manifest(fetched))
    root = Path(args.dir).resolve()
    from ..project.discover import Project  # noqa: PLC0415

    found = release.signers(fetched) if f"lockfiles/{model}.lock" in fetched.files else []
    rows = release.trust(Project(root, "project", {}), model, fetched) if args.trust else []
    doc = {"project": str(root), "model": model, "written": [p.name for p in written],
           "release": {"repo": repo, "version": version, "commit": commit},
           "signers": [{k: v for k, v in s.items() if k != "pem"} for s in found], "trusted": rows}
    lines = [f"created project {root} from release {repo} v{version} (commit {commit[:12]}, model {model}): "
             f"{', '.join(p.name for p in written)}"]
    lines += _trust_lines(rows, repo, commit) if args.trust else _signer_lines(found, repo, commit)
    lines.append(f"next: cd {args.dir} && frt lock" + ("" if args.trust else "   (after `frt release trust`)"))
    _emit(args, doc, "\n".join(lines))
    return 0


def _signer_lines(found, repo, commit) -> list[str]:
    if not found:
        return [f"note: the receipts of {repo}@{commit[:12]} carry no signature its lockfile records: with no "
                "signer to trust, `frt lock` rejects every one"]
    out = [f"the receipts of {repo}@{commit[:12]} are signed by (its lockfile says; none is trusted yet):"]
    out += [f"  {_signer(s)} ({s['receipts']} receipt(s))" for s in found]
    out.append("review them, then `frt release trust` (or `frt init --from ... --trust`); until then `frt lock` "
               "rejects every release receipt")
    return out


def _signer(s: dict) -> str:
    return f"key {s['keyid']}" if s["kind"] == "key" else f"identity {s['identity']} (issuer {s['issuer']})"


def _trust_lines(rows, repo, commit) -> list[str]:
    out = []
    for r in rows:
        where = f" -> {r['file']}" if r.get("file") else ""
        out.append(f"{'trusted' if r['added'] else 'already trusted'}: {_signer(r)}{where} "
                   f"(signs {r['receipts']} receipt(s) of {repo}@{commit[:12]})")
    return out


def cmd_release(args) -> int:
    """``frt release push hf://ORG/NAME [--model M] [--version N]`` / ``frt release trust [--model M]``."""
    from ..release import consume as release  # noqa: PLC0415

    project = _project(args)
    model = _the_model(project, args)
    if args.release_command == "push":
        repo, at = release.parse_ref(args.url, flag="frt release push")
        if at is not None and args.version is not None and at != args.version:
            raise UsageError(f"{args.url} names v{at}, --version {args.version}: give one")
        version = args.version if args.version is not None else (at if at is not None else 1)
        if version < 0:
            raise UsageError(f"--version {version}: must be a non-negative integer")
        from ..release.push import push  # noqa: PLC0415

        res = push(project, model, repo, version)
        what = ("nothing changed: the branch already holds this release" if res["unchanged"] else
                f"commit {res['commit'][:12]} on {res['branch']} (parent {res['parent'][:12]})")
        _emit(args, {"ok": True, **res}, f"release {repo} v{version}: {what}; {res['receipts']} receipt(s), "
                                         f"{len(res['files'])} file(s)" + (f", {len(res['deleted'])} removed" if res["deleted"] else ""))
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
                            recorded=pinned and pinned.get("files"), mirror=os.environ.get("FRT_MIRROR") or project.mirror)
    rows = release.trust(project, model, fetched)
    _emit(args, {"ok": True, "release": {"repo": fetched.repo, "commit": fetched.commit}, "trusted": rows},
          "\n".join(_trust_lines(rows, fetched.repo, fetched.commit)))
    if any(r["added"] for r in rows) and not (args.quiet or args.json):
        print("hint: run `frt lock` to judge the release's receipts under the policy", file=sys.stderr)
    return 0


def _hardware(args):
    """Declared hardware from the flags, else the running system. ``--detect`` with a declared
    fact (``--arch``, ``--device-class``, ``--cpu``, ``--os``) is a usage error: a detected
    machine is never partly overridden, so the cell it resolves is the one it is."""
    from ..system.hardware import Hardware, parse_software  # noqa: PLC0415

    declared = [flag for flag, value in (("--arch", args.arch), ("--device-class", args.device_class),
                                         ("--cpu", args.cpu), ("--os", args.os)) if value]
    if declared and args.detect:
        raise UsageError(f"--detect reads this machine; it cannot be combined with {', '.join(declared)}",
                         hints=["drop --detect to declare the machine, or drop the declared facts"])
    if declared:
        if not (args.arch and args.device_class):
            raise UsageError("declared hardware needs both --arch and --device-class",
                             hints=["e.g. --arch 12.0 --device-class rtx-5090 --software torch=2.13,cuda=12.8"])
        return Hardware.from_flags(arch=args.arch, device_class=args.device_class, backend=args.backend,
                                   software=parse_software(args.software or ""), cpu=args.cpu, os=args.os)
    hw = Hardware.detect()
    if args.software:
        from ..base.record import replace  # noqa: PLC0415 - dataclasses.replace, without importing dataclasses

        hw = replace(hw, software={**hw.software, **parse_software(args.software)})
    return hw


def _software_hints(decisions, hw) -> list[str]:
    """For each "software not declared: torch (receipt: 2.13), ..." reason, the ``--software``
    value that declares what the receipt recorded on top of what was declared."""
    import re  # noqa: PLC0415

    out: list[str] = []
    for d in decisions.values():
        for r in d.reasons:
            if not r.reason.startswith("software not declared: "):
                continue
            recorded = dict(re.findall(r"([^\s,]+) \(receipt: ([^)]+)\)", r.reason))
            facts = ",".join(f"{k}={v}" for k, v in sorted({**hw.software, **recorded}.items()))
            hint = f"declare the software the receipt recorded: --software {facts}"
            if hint not in out:
                out.append(hint)
    return out


def _find_lock(project, model: str, explicit: str | None):
    """The lockfile in force: ``--lockfile``, else ``FRT_LOCK``, else the project's. A missing
    lockfile is a "no" (exit 1, SPEC §4) wherever it was named; one that does not parse is bad input."""
    from ..documents.lockfile import Lockfile  # noqa: PLC0415

    for source, given in (("--lockfile", explicit), ("FRT_LOCK", os.environ.get("FRT_LOCK"))):
        if given:
            if not os.path.isfile(given):  # False, not OSError, for a name too long to stat
                raise FrtError(f"no lockfile at {given} ({source})",
                               hints=[f"frt lock --model {model}, or name an existing lockfile in {source}"])
            lock = Lockfile.read(given)
            if model != "MODEL" and lock.model != model:  # "MODEL": the caller takes the lockfile's own
                raise UsageError(f"{source} {given} is the lockfile of model {lock.model!r}, not {model!r}",
                                 hints=[f"--model {lock.model}, or name {model!r}'s lockfile in {source}"])
            return lock
    path = project.existing_lockfile(model)
    return Lockfile.read(path, label=project.rel(path))


def _the_model(project, args) -> str:
    """``--model``, or the project's only model when it was left out; several models (or none)
    is a usage error listing them."""
    if args.model is not None:
        return args.model
    models = project.models()
    if len(models) == 1:
        return models[0]
    if not models:
        raise UsageError(f"--model is needed: no manifests in {project.describe()} "
                         f"({project.rel(project.manifests_dir)}/)", hints=["`frt init` creates a project with one"])
    raise UsageError(f"--model is needed: {project.describe()} has {len(models)} models: {', '.join(models)}",
                     hints=[f"e.g. frt {args.command} --model {models[0]}"])


def _stale_warning(lock) -> list[str]:
    """SPEC §23: resolve uses a stale lock (it is what was reviewed) but says so, once."""
    from ..lock.freshness import manifest_drift  # noqa: PLC0415
    from ..project.discover import lock_root  # noqa: PLC0415 - not the loader's: resolve imports no loader

    stale = manifest_drift(lock, lock_root(lock))
    return [stale] if stale else []


def cmd_resolve(args) -> int:
    from ..routes.resolver import check_policy, resolve_all  # noqa: PLC0415

    project = _project(args)
    if args.model is None and (args.lockfile or os.environ.get("FRT_LOCK")):
        lock = _find_lock(project, "MODEL", args.lockfile)  # the lockfile named says which model
    else:
        lock = _find_lock(project, _the_model(project, args), args.lockfile)
    warnings = _stale_warning(lock)
    if not args.json:
        for w in warnings:
            print(f"warning: {w}", file=sys.stderr)
    accept = tuple(args.accept or ("certified_fast",))
    if "supported_correct" in accept and "certified_fast" not in accept:
        accept = ("certified_fast", "supported_correct")
    for ph in args.phase or ():
        check_policy(lock, precision=args.precision, phase=ph, fallback=args.fallback, accept=accept)
    precision, accept = check_policy(lock, precision=args.precision, phase=None, fallback=args.fallback, accept=accept)
    hw = _hardware(args)
    trace = None
    if args.explain or args.verbose:
        from ..routes.explain import Trace  # noqa: PLC0415

        trace = Trace()
    decisions = resolve_all(lock, hardware=hw, precision=precision, phases=args.phase, fallback=args.fallback,
                            accept=accept, reporter=trace)
    doc = {"model": lock.model, "lock-digest": lock.lock_digest, "precision": precision,
           "hardware": hw.to_dict(), "decisions": [d.to_dict() for d in decisions.values()], "warnings": warnings}
    if trace is not None:
        from ..routes.explain import candidates  # noqa: PLC0415

        doc["candidates"] = candidates(lock, decisions, hw, verbose=args.verbose)
        doc["rejected-receipts"] = lock.rejected
        doc["events"] = trace.events
    _emit(args, doc, _render_resolve(lock, hw, precision, accept, decisions, doc.get("candidates")))
    refused = [p for p, d in decisions.items() if d.decision == "refused"]
    if refused and not (args.json or args.quiet):
        qualify = (f"qualify a route on a machine like this one in the project that locks {lock.model} "
                   f"(`frt qualify --model {lock.model} --route ROUTE`, then `frt lock`), and bring the new lockfile "
                   "to this node" if project.is_node else
                   f"qualify a route on the machine itself (`frt qualify --model {lock.model} --route ROUTE`), then `frt lock`")
        hints = _software_hints(decisions, hw) or _state_hints(decisions, refused, accept) or [
            qualify, "`--explain` shows every candidate and why it lost; `--fallback host` decides the host path instead"]
        for h in hints:
            print(f"hint: {h}", file=sys.stderr)
    return 1 if refused else 0


STATE_LOSS = "receipt is supported_correct; accept is "  # the resolver's reason for a route lost on its state


def _state_hints(decisions, refused: list[str], accept) -> list[str]:
    """When every refused band had a route that lost only on its state (a correct receipt,
    ``supported_correct``, under ``accept`` certified_fast), the flag that accepts it."""
    if "supported_correct" in accept:
        return []
    if all(any(r.reason.startswith(STATE_LOSS) for r in decisions[p].reasons) for p in refused):
        return ["the qualified routes here are supported_correct (correct, no speed claim): "
                "`--accept supported_correct` serves them; only certified_fast is accepted by default"]
    return []


def _render_resolve(lock, hw, precision, accept, decisions, candidates) -> str:
    # the arch as "arch 12.0": "cuda 12.0" would read as a CUDA version
    machine = f"{hw.device_class} ({hw.backend}, arch {hw.arch})"
    lines = [f"model {lock.model}  precision {precision}  hardware {machine}  accept {','.join(accept)}"]
    for d in decisions.values():
        band = lock.manifest.phases[d.phase].rows
        head = f"{d.phase:<8} {'rows ' + str(band[0]) + '-' + str(band[1]):<14}"
        if d.decision == "route":
            sp = f"  speedup {d.speedup:.2f}x" if d.speedup else ""
            lines.append(f"{head} route {d.route}  [{d.state}]{sp}  receipt {short_digest(d.receipt)}")
        elif d.decision == "host":
            lines.append(f"{head} host  (fallback=host; no qualified route)")
        else:
            lines.append(f"{head} REFUSED")
        for r in d.reasons:
            lines.append(f"    {r.route:<14} {r.reason}")
    if candidates:
        lines.append("")
        lines.append("candidates:")
        for c in candidates:
            mark = "won " if c["won"] else "lost"
            lines.append(f"  {c['phase']:<8} {mark} {c['route']:<14} {short_digest(c['route-digest'])}  {c['reason']}")
            for repo, p in c["packages"].items():
                fails = f"  FAILS: {p['problem']}" if p["problem"] else ""
                lines.append(f"           {repo} @ {short_digest(p['revision']) if p['revision'] else 'not locked'}  "
                             f"selects {p['variant'] or 'no variant'}{fails}")
                if "accepted" in p:
                    lines.append(f"             accepted: {', '.join(p['accepted']) or 'none'}")
                    lines += [f"             rejected: {r['variant']}: {r['reason']}" for r in p["rejected"]]
    return "\n".join(lines)


def cmd_verify(args) -> int:
    from ..lock.verify import verify  # noqa: PLC0415

    report = verify(_project(args), [args.model] if args.model is not None else None, mirror=args.mirror,
                    variants=args.variant, all_variants=args.all_variants)
    from ..lock.verify import DERIVED_KINDS  # noqa: PLC0415

    problems = report.problems

    def line(p: dict) -> str:
        if p["kind"] == "stale":  # SPEC §23: the message names the manifest and both digests
            return f"stale: {p['message']}"
        if "derived" in p:  # a re-derivation: what the lock records vs what verify derived
            return f"{p['kind']}: {p['path']}: recorded {p['recorded']}, derived {p['derived']}"
        return f"{p['kind']}: {p['path']}: expected {p['expected']}, computed {p['computed']}"

    text = "\n".join(([f"{c}: ok" for c in report.lockfiles] if not problems else [line(p) for p in problems])
                     + [f"note: {n}" for n in report.notes])
    _emit(args, report.to_dict(), text)
    if problems:
        kinds = {p["kind"] for p in problems}
        print(f"error: verification failed ({len(problems)} problem(s): {', '.join(sorted(kinds))})", file=sys.stderr)
        if kinds & set(DERIVED_KINDS):
            print("hint: the lockfile does not hold what `frt lock` derives from its own manifest and receipts: "
                  "find out who edited it (its lock-digest says nothing about that)", file=sys.stderr)
        own = [p["hint"] for p in problems if p.get("hint")]  # a problem that knows its fix says it
        for hint in dict.fromkeys(own + _verify_fixes(args, [p for p in problems if not p.get("hint")],
                                                      {"lock-digest", "stale", *DERIVED_KINDS})):
            print(f"hint: {hint}", file=sys.stderr)
        return 1
    return 0


def _verify_fixes(args, problems: list[dict], lock_kinds: set) -> list[str]:
    """The exact commands that fix what ``frt verify`` found: ``frt lock --model X`` per
    lockfile at fault; for the mirror, ``frt mirror DIR`` with the selection that was checked
    (the variants named in the problem paths when verify checked what the mirror holds), and
    ``rm`` for files the lock does not know (``frt mirror`` adds, it never deletes)."""
    import shlex  # noqa: PLC0415

    project = getattr(args, "frt_project", None)
    node = project is not None and project.is_node
    models = (Path(p["path"].split(": ", 1)[0]).stem for p in problems if p["kind"] in lock_kinds)
    out = [f"bring a fresh lockfiles/{m}.lock from the project that locks it (`frt lock --model {m}` there)" if node
           else f"regenerate the lockfile with `frt lock --model {m}`" for m in dict.fromkeys(models)]
    mirrored = [p for p in problems if p["kind"] not in lock_kinds]
    if not mirrored or args.mirror is None:
        return out
    model = f" --model {shlex.quote(args.model)}" if args.model is not None else ""
    if args.all_variants:
        select = " --all-variants"
    else:  # <folder>/snapshots/<snapshot>/build/<variant>/... or <folder>/refs/<ref>
        parts = [p["path"].split("/") for p in mirrored]
        variants = args.variant or [q[4] for q in parts if q[3:4] == ["build"]]
        if not variants:  # a ref only: the variants the mirror holds of that package
            variants = [d.name for q in parts for d in Path(args.mirror).glob(f"{q[0]}/snapshots/*/build/*")]
        select = "".join(f" --variant {shlex.quote(v)}" for v in dict.fromkeys(variants)) or " --all-variants"
    if node:  # a node has no sources of its own: it fills its mirror from the fleet's store
        url = project.mirror if project.mirror and "://" in project.mirror else "URL"  # [tool.frt] mirror, a store
        select += f" --from {shlex.quote(url)}"
    if any(p["kind"] != "unknown" for p in mirrored):
        out.append(f"refill the mirror with `frt mirror {shlex.quote(args.mirror)}{model}{select}`")
    unknown = [shlex.quote(str(Path(args.mirror) / p["path"])) for p in mirrored if p["kind"] == "unknown"]
    if unknown:
        out.append(f"remove what the lock does not know with `rm -- {' '.join(unknown)}`")
    return out


class _MachineParser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(f"--machine: {message}")


def _machine_parser() -> _MachineParser:
    """The resolve hardware flags alone (``_hardware_flags``), for one ``--machine`` value."""
    flags = _MachineParser(prog="--machine", add_help=False)
    _hardware_flags(flags)
    return flags


def _machine(spec: str):
    """One ``--machine`` value as a ``Hardware``: the resolve hardware flags as KEY=VALUE
    pairs (``arch=9.0,device-class=h200,software=torch=2.13;cuda=12.8``), read by a parser
    built from ``_hardware_flags`` and checked by ``_hardware``, so both forms read alike."""
    flags = _machine_parser()
    keys = [o[2:] for o in flags._option_string_actions if o.startswith("--") and o != "--detect"]
    argv, seen = [], set()
    for part in (p.strip() for p in spec.split(",")):
        key, sep, value = part.partition("=")
        if not sep or key not in keys or key in seen:
            why = "repeats" if key in seen else "is not KEY=VALUE with KEY one of " + ", ".join(keys)
            raise UsageError(f"--machine {spec!r}: {part!r} {why}",
                             hints=["e.g. --machine arch=9.0,device-class=h200,software=torch=2.13;cuda=12.8"])
        seen.add(key)
        argv += [f"--{key}", value.strip().replace(";", ",")]
    ns = flags.parse_args(argv)
    if not (ns.arch and ns.device_class):
        raise UsageError(f"--machine {spec!r}: a machine needs arch= and device-class=",
                         hints=["e.g. --machine arch=9.0,device-class=h200,software=torch=2.13;cuda=12.8"])
    return _hardware(ns)


def _mirror_machines(args) -> list | None:
    """The machines ``frt mirror`` was told about: the hardware flags (one), then each --machine."""
    hw_dests = {a.dest for a in _machine_parser()._actions}
    machines = [_hardware(args)] if any(getattr(args, d, None) for d in hw_dests) else []
    return machines + [_machine(spec) for spec in args.machine or ()] or None


def cmd_mirror(args) -> int:
    from ..distribution.objstore import is_url, open_store  # noqa: PLC0415

    publish = is_url(args.dir)
    if publish and args.from_url:
        raise UsageError(f"frt mirror {args.dir} --from {args.from_url}: publish to a store, or fill a folder "
                         "from one; not both", hints=["frt mirror DIR --from URL fills DIR; frt mirror URL publishes"])
    if args.repair and not publish:
        raise UsageError("--repair applies when publishing to an object store (frt mirror s3://... --repair)")
    project = _project(args)  # no project here: said before any store is opened or folder made
    store = (open_store(args.dir) if publish else open_store(args.from_url, reading=True)) if (publish or args.from_url) \
        else None
    if store is not None:
        with store:
            return _cmd_mirror(args, project, store, publish)
    return _cmd_mirror(args, project, None, False)


def _cmd_mirror(args, project, store, publish: bool) -> int:
    from ..errors import KernelUnavailable  # noqa: PLC0415
    from ..distribution.mirror import mirror_lock, select_for_mirror  # noqa: PLC0415

    if os.environ.get("FRT_LOCK"):  # the lockfile named is the one model mirrored, under its own name
        lock = _find_lock(project, args.model or "MODEL", None)
        models, locks = [lock.model], {lock.model: lock}
    else:
        models = [args.model] if args.model is not None else [p.stem for p in sorted(project.lockfiles_dir.glob("*.lock"))]
        locks = None
    if not models:
        raise FrtError(f"no lockfiles in {project.rel(project.lockfiles_dir)}",  # a "no": exit 1
                       hints=["copy the lockfiles here from the project that locks them" if project.is_node
                              else "frt lock"])
    machines = _mirror_machines(args)
    select = {"variants": args.variant, "all_variants": args.all_variants, "machines": machines, "cells": args.cells}
    if not any(select.values()):
        select["machines"] = [_hardware(args)]  # this machine, detected: checked like a declared one
    if locks is None:
        locks = {model: _find_lock(project, model, None) for model in models}
    for lock in locks.values():  # every model's selection is checked before anything is written
        select_for_mirror(lock, **select)
    reports, lines = [], []
    for model, lock in locks.items():
        bar = _bar(args, total=None, desc=f"mirror {model}", unit="B", unit_scale=True, unit_divisor=1024)

        def progress(ev: dict, bar=bar) -> None:
            if ev.get("event") == "file":
                bar.update(ev.get("bytes") or 0)
                bar.set_postfix_str(f"{ev.get('repo')} {ev.get('path')}")

        try:
            if publish:
                from ..distribution.fleet import publish_lock  # noqa: PLC0415

                pub = publish_lock(lock, store, **select, progress=progress, root=project.root, repair=args.repair)
            else:
                rep = mirror_lock(lock, Path(args.dir), **select, progress=progress, root=project.root, source=store)
        except KeyboardInterrupt:  # not "nothing was written": what was verified stays (item 21.4)
            if publish:
                return _publish_interrupted(args)
            return _mirror_interrupted(args)
        except KernelUnavailable as exc:
            if project.is_node and store is None:  # a file this node could not supply: no sources of its own
                url = project.mirror if project.mirror and "://" in project.mirror else "URL"
                exc.hints = [f"a node fills its mirror from the fleet's store: `frt mirror {args.dir} --from {url}`"]
            raise
        finally:
            bar.close()
        if publish:
            reports.append(pub.to_dict())
            lines.append(f"{model}: {len(pub.packages)} package(s) to {store.url}: {pub.uploaded} object(s) uploaded, "
                         f"{pub.present} already present ({pub.checked['checksum']} by the store's SHA-256 checksum, "
                         f"{pub.checked['download']} downloaded and hashed), {pub.bytes} bytes sent; lockfile "
                         f"{pub.lockfile} last")
            for r in pub.replaced:
                lines.append(f"  replaced {r['key']} ({r['repo']} {r['path']}): {r['reason']}")
            for sk in pub.skipped:
                lines.append(f"  skipped {sk['repo']}: {sk['reason']}")
            continue
        d = rep.to_dict()
        d["model"] = model
        reports.append(d)
        lines.append(f"{model}: {len(rep.packages)} package(s) into {args.dir}: {rep.fetched} blob(s) fetched, "
                     f"{rep.present} already present and verified, {rep.bytes} bytes written")
        for p in rep.packages:
            lines.append(f"  {p['repo']} @ {short_digest(p['snapshot'])}  {', '.join(p['variants'])}")
        for sk in rep.skipped:
            lines.append(f"  skipped {sk['repo']}: {sk['reason']}")
    doc = {"ok": True, "dir": str(args.dir), "models": reports}
    if args.from_url:
        doc["from"] = store.url
    _emit(args, doc, "\n".join(lines))
    return 0


def _interrupted(args, msg: str, hint: str) -> int:
    """Ctrl-C in a mirror run: one error (JSON under --json) saying what stays, exit 130."""
    if getattr(args, "json", False):
        _print_json({"error": msg, "hints": [hint], "exit": 130, "reasons": []})
    else:
        print(f"error: {msg}\nhint: {hint}", file=sys.stderr)
    return 130


def _publish_interrupted(args) -> int:
    return _interrupted(args, f"interrupted; the objects already sent stay in {args.dir}, and no lockfile was published "
                              "for the model being sent, so no reader takes it as a release",
                        "run the same `frt mirror` again: it skips what is already there")


def _import_holding_ctrl_c(*modules: str) -> None:
    """Import ``modules`` with a Ctrl-C held until they are in: torch's import calls back into
    Python from C++, and a ``KeyboardInterrupt`` raised in such a callback aborts the process
    (``terminate called after throwing ...``, SIGABRT) instead of ending it. The interrupt is
    raised once the import is done, where ``main`` turns it into exit 130."""
    import importlib  # noqa: PLC0415
    import signal  # noqa: PLC0415
    import threading  # noqa: PLC0415

    todo = [m for m in modules if m not in sys.modules]
    if not todo:
        return
    held: list[int] = []
    own = threading.current_thread() is threading.main_thread() and \
        signal.getsignal(signal.SIGINT) is signal.default_int_handler
    previous = signal.signal(signal.SIGINT, lambda signum, frame: held.append(signum)) if own else None
    try:
        for m in todo:
            try:
                importlib.import_module(m)
            except ImportError:
                pass  # the command itself reports a missing runtime dependency
    finally:
        if own:
            signal.signal(signal.SIGINT, previous)
    if held:
        raise KeyboardInterrupt


def _mirror_interrupted(args) -> int:
    return _interrupted(args, f"interrupted; the files already verified stay in {args.dir} (this run's temporary files "
                              "are removed, or by the next run if it was killed)",
                        "run the same `frt mirror` again: it resumes, fetching only what is missing")


def cmd_sign(args) -> int:
    """``frt sign --key KEY RECEIPT...``: the key is read (and refused, exit 2, naming it) before
    any receipt is; each receipt is read and signed in turn, each ``.sig`` written atomically."""
    from ..provenance.signing import load_private_key, sign_receipt, sign_receipts_sigstore  # noqa: PLC0415

    args.receipts, skipped = _receipts_to_sign(args)
    if args.sigstore:
        rows = [{"receipt": r, "signature": str(out), "digest": dig, "identity": who}
                for r, (out, dig, who) in zip(args.receipts, sign_receipts_sigstore([Path(r) for r in args.receipts]))]
        _emit(args, {"ok": True, "signed": rows, "skipped": skipped},
              "\n".join(f"{x['signature']}: signed {short_digest(x['digest'])} as {x['identity']}" for x in rows))
        return 0
    key = load_private_key(args.key)
    rows, lines = [], []
    for r in args.receipts:
        out, dig, kid = sign_receipt(Path(r), key)
        rows.append({"receipt": r, "signature": str(out), "digest": dig, "keyid": kid})
        lines.append(f"{out}: signed {short_digest(dig)} with key {kid}")
    _emit(args, {"ok": True, "signed": rows, "skipped": skipped}, "\n".join(lines))
    return 0


def cmd_qualify(args) -> int:
    from ..qualify.run import check_receipt_folder, check_route, qualify, write_receipt  # noqa: PLC0415

    key = None
    if args.sign:  # a bad key is refused before minutes of measuring, not after
        from ..provenance.signing import load_private_key  # noqa: PLC0415

        key = load_private_key(args.sign)
    project = _project(args)
    project.need_manifests("qualify")
    args.model = _the_model(project, args)
    lock = _find_lock(project, args.model, None)
    if project.read_only and not args.out:
        raise FrtError("the bundled defaults are read-only; pass --out DIR for the receipts",
                       hints=["or run in a project folder (manifests/, receipts/, lockfiles/)"])
    out = Path(args.out) if args.out else project.receipts_dir / args.model
    check_receipt_folder(out, show=project.rel)  # before minutes of measuring, not after
    check_route(lock.manifest, args.route, args.phase)  # before seconds of importing torch
    hw = _qualify_signing_check(project, lock, args, key)  # an unsigned receipt the policy would reject: before too
    talk = not (args.quiet or args.json)
    if talk:
        print(f"qualifying {args.model} route {args.route} on this machine", file=sys.stderr)
    _import_holding_ctrl_c("torch", "kernels")
    bars: dict = {}

    def progress(ev: dict) -> None:
        if ev["event"] == "message":
            if talk:
                print(ev["text"], file=sys.stderr)
        elif ev["event"] == "round":
            if ev["phase"] not in bars:
                bars[ev["phase"]] = _bar(args, total=ev["rounds"], desc=f"  {ev['phase']} rounds", unit="round")
            bar = bars[ev["phase"]]
            if getattr(bar, "total", ev["rounds"]) != ev["rounds"]:  # adaptive timing added rounds
                bar.total = ev["rounds"]
            bar.update(1)

    try:
        results = qualify(lock, args.route, phases=args.phase, rounds=args.rounds, seed=args.seed,
                          root=project.root, progress=progress, max_rounds=args.max_rounds, hardware=hw)
    finally:
        for b in bars.values():
            b.close()
    lines, docs = [], []
    written = []
    for r in results:
        if r.passed:
            kept: list = []
            r.path = write_receipt(r.receipt, out, label=project.rel(out), written=written, kept=kept)
            written.append(project.rel(r.path))
            if kept and talk:
                print(f"note: kept the previous {project.rel(r.path)} as " + ", ".join(project.rel(k) for k in kept),
                      file=sys.stderr)
            if key is not None:
                from ..provenance.signing import sign_receipt  # noqa: PLC0415

                sign_receipt(r.path, key, label=project.rel(r.path))
                written.append(project.rel(r.path) + ".sig")
            ev = r.receipt["evidence"]
            t = ev["timing"]
            ci = t.get("speedup-ci")
            spread = (f"{ci['level']:.0%} CI {ci['low']:.3f}-{ci['high']:.3f}, {t['rounds']} rounds" if ci
                      else f"{t['speedup-min']:.3f}-{t['speedup-max']:.3f}")
            lines.append(f"{r.phase:<8} {r.state:<17} speedup {t['speedup-median']:.3f}x "
                         f"[{spread}]  max-abs {ev['parity']['max-abs']:.2e}  "
                         f"-> {project.rel(r.path)}")
        else:
            lines.append(f"{r.phase:<8} FAIL (no receipt written)")
            lines += [f"    {f}" for f in r.failures]
        docs.append({"phase": r.phase, "passed": r.passed, "state": r.state,
                     "receipt": project.rel(r.path) if r.path else None, "failures": r.failures,
                     "signature": project.rel(r.path) + ".sig" if r.path and key is not None else None,
                     "kept": [project.rel(k) for k in kept] if r.passed else []})
    _emit(args, {"model": args.model, "route": args.route, "results": docs}, "\n".join(lines))
    if all(r.passed for r in results):
        if not args.quiet and not args.json:
            print("hint: run `frt lock` to embed the new receipts", file=sys.stderr)
        return 0
    print("error: qualification failed for " + ", ".join(r.phase for r in results if not r.passed), file=sys.stderr)
    return 1


def _receipts_to_sign(args) -> tuple[list[str], list[dict]]:
    """``frt sign``'s RECEIPT arguments without the signature files a glob such as
    ``receipts/m/*`` also matches (``.sig``, ``.sigstore``) and the receipts re-qualifying kept
    aside (``*.superseded-<hex>``): each is skipped with a ``note:``. Nothing left is exit 2.
    Returns (the receipts to sign, ``[{"file", "reason"}]`` for each skipped)."""
    from ..documents.receipt import SUPERSEDED  # noqa: PLC0415
    from ..provenance.signing import BUNDLE_SUFFIX, SIG_SUFFIX  # noqa: PLC0415

    keep, skipped = [], []
    for r in args.receipts:
        name = Path(r).name
        if name.endswith((SIG_SUFFIX, BUNDLE_SUFFIX)):
            skipped.append((r, "a signature file, not a receipt"))
        elif SUPERSEDED in name and not name.endswith(".json"):
            skipped.append((r, "a receipt re-qualifying kept aside (frt lock does not read it)"))
        else:
            keep.append(r)
    if keep and not args.quiet and not args.json:
        for r, why in skipped:
            print(f"note: skipped {r}: {why}", file=sys.stderr)
    if not keep:
        raise UsageError(f"no receipt to sign among the {len(args.receipts)} file(s) given: "
                         + "; ".join(f"{r}: {why}" for r, why in skipped[:3]) + (" ..." if len(skipped) > 3 else ""),
                         hints=["name the receipts (*.json): frt sign --key KEY receipts/MODEL/*.json"])
    return keep, [{"file": r, "reason": why} for r, why in skipped]


def _qualify_signing_check(project, lock, args, key):
    """This machine's facts, after the check that the project's ``[trust.receipts]`` policy (its
    manifest file's; the lock's embedded one where the file cannot be read) would accept what
    ``frt qualify`` is about to write (``qualify.check_signing_policy``)."""
    from ..system.hardware import Hardware  # noqa: PLC0415
    from ..documents.manifest import Manifest  # noqa: PLC0415
    from ..qualify.run import check_signing_policy  # noqa: PLC0415

    hw = Hardware.detect()
    manifest = lock.manifest
    try:
        manifest = Manifest.read(project.manifest_path(args.model), label=project.rel(project.manifest_path(args.model)))
    except FrtError:
        pass
    check_signing_policy(manifest.receipt_policy, hw.device_class, manifest_file=manifest.file, key=key,
                         unsigned=args.unsigned, root=project.root,
                         command=f"frt qualify --model {args.model} --route {args.route}")
    return hw


def cmd_matrix(args) -> int:
    """The matrix as text (a terminal), Markdown (a pipe, ``-o FILE``), HTML or (``--json``) the JSON
    document, on stdout or into ``-o FILE``."""
    from ..routes.matrix import render_matrix  # noqa: PLC0415

    if args.json and args.format:
        raise UsageError(f"--json and --format {args.format} each choose the output; give one")
    project = _project(args)
    fmt = "json" if args.json else args.format or ("text" if not args.output and sys.stdout.isatty() else "md")
    text = render_matrix(project, model=args.model, fmt=fmt)
    if args.output:
        _write_output(Path(args.output), text.encode("utf-8"))
    else:
        sys.stdout.write(text)
    return 0


def cmd_digest(args) -> int:
    """``frt digest PATH...``: re-digest packages under development (``frt_dist.documents.redigest``)."""
    import shlex  # noqa: PLC0415

    from ..documents.redigest import redigest  # noqa: PLC0415

    found = redigest(args.paths, check=args.check)
    lines = []
    for vd in found:
        state = ("stale" if args.check else "updated") if vd.changed else "up to date"
        lines.append(f"{vd.metadata}: {state}" + (f" ({', '.join(r for r, _, _ in vd.changed)})" if vd.changed else ""))
        if vd.written and vd.signed:
            print(f"warning: {vd.metadata}.sigstore no longer matches the rewritten metadata.json: sign it again "
                  "or remove it", file=sys.stderr)
    stale = [vd for vd in found if vd.changed]
    _emit(args, {"ok": not (args.check and stale), "variants": [vd.to_dict() for vd in found]}, "\n".join(lines))
    if args.check and stale:
        print(f"error: {len(stale)} metadata.json file(s) do not match their files",
              file=sys.stderr)
        print(f"hint: run `frt digest {shlex.join(args.paths)}` after reviewing the changes", file=sys.stderr)
        return 1
    if stale and not (args.quiet or args.json):
        print("hint: run `frt lock` to lock the new digests", file=sys.stderr)
    return 0


def cmd_receipts(args) -> int:
    """``frt receipts push URL [PATH...]`` / ``frt receipts pull URL [--model M]`` (frt_dist/distribution/fleet.py)."""
    from ..distribution.fleet import pull_receipts, push_receipts  # noqa: PLC0415
    from ..distribution.objstore import is_url, open_store  # noqa: PLC0415

    if not is_url(args.url):
        raise UsageError(f"frt receipts {args.receipts_command} {args.url}: not an object-store URL",
                         hints=["s3://bucket/prefix or file:///path; receipts in a folder are already where "
                                "`frt lock` reads them"])
    project = _project(args)
    with open_store(args.url) as store:
        if args.receipts_command == "push":
            paths = args.paths or [project.receipts_dir]
            res = push_receipts(store, paths, label=lambda p: project.rel(Path(p)))
            _emit(args, {"ok": True, **res.to_dict()},
                  f"{len(res.sent)} receipt(s) sent to {store.url}, {len(res.present)} already there"
                  + (f"; {len(res.signatures)} signature file(s) sent" if res.signatures else ""))
            return 0
        if args.model is not None:
            from ..base import names  # noqa: PLC0415

            names.check("name", args.model, "--model", UsageError)
        if project.read_only:
            raise UsageError("frt receipts pull: the bundled demo project is read-only; run it in a project folder "
                             "(manifests/, receipts/, lockfiles/) or pass --project DIR")
        res = pull_receipts(store, project.receipts_dir, model=args.model, label=lambda p: project.rel(Path(p)))
    lines = [f"{len(res.written)} receipt(s) written from {store.url}, {len(res.present)} already here"]
    lines += [f"  {w}" for w in res.written]
    lines += [f"  {w} (signature)" for w in res.signatures]
    # An object the store holds that is not a valid receipt is refused and named, never written: the
    # store is untrusted, so one bad object is a warning (it must not stop every later `pull && lock`);
    # --strict makes it exit 1. A destination here that cannot take a receipt is this project's to fix: exit 1.
    local = [r for r in res.refused if "file" in r]
    if local or (res.refused and args.strict):
        raise FrtError(f"{len(res.refused)} receipt(s) in {store.url} refused (not written):\n  "
                       + "\n  ".join(r["reason"] for r in res.refused),
                       reasons=res.refused, hints=["the others were written; remove or re-push the refused ones"]
                       + (["move the named file or link away, then pull again"] if local else []))
    if res.refused and not (args.quiet and not args.json):
        for r in res.refused:
            print(f"warning: refused: {r['reason']}", file=sys.stderr)
    _emit(args, {"ok": True, **res.to_dict()}, "\n".join(lines))
    if res.written and not (args.quiet or args.json):
        print("hint: run `frt lock` to embed the new receipts", file=sys.stderr)
    return 0


COMMANDS = {"lock": cmd_lock, "resolve": cmd_resolve, "verify": cmd_verify, "mirror": cmd_mirror,
            "receipts": cmd_receipts, "release": cmd_release,
            "qualify": cmd_qualify, "matrix": cmd_matrix, "init": cmd_init, "digest": cmd_digest, "sign": cmd_sign}


def main(argv: list[str] | None = None) -> int:
    """Run one ``frt`` command; the exit code. A Ctrl-C anywhere, start-up included, ends with
    exit 130 and one line; an ``OSError`` no command turned into an ``FrtError`` (a full disk, a
    read-only folder, a denied permission) is ``error: <path>: <cause>`` (exit 2; another OSError
    exit 1), never a traceback. Any other exception is a defect and keeps its traceback."""
    try:
        return _main(argv)
    except KeyboardInterrupt:
        print("error: interrupted; nothing was written", file=sys.stderr)
        return 130


def _main(argv: list[str] | None) -> int:
    import warnings  # noqa: PLC0415

    # torch warns once when numpy is absent; frt never hands tensors to numpy
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
    _ARGV[:] = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(only=_named_command(_ARGV))
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help(sys.stderr)
        return 2
    try:
        _global_project(args)
        if args.command in ("lock", "mirror", "release", "init"):
            try:
                from ..distribution.hub import configure_timeout  # noqa: PLC0415

                configure_timeout()
            except ImportError:  # pragma: no cover
                pass
        return COMMANDS[args.command](args)
    except OSError as exc:
        if isinstance(exc, BrokenPipeError):  # `frt ... | head`: the reader left; end quietly
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())  # Python's own flush at exit must not fail again
            return 0
        return _report(args, _os_error(exc, args.command))
    except FrtError as exc:
        return _report(args, exc)


def _report(args, exc: FrtError) -> int:
    if getattr(args, "json", False):  # SPEC §24: under --json every outcome is JSON, errors included
        _print_json({"error": str(exc), "hints": exc.hints, "exit": exc.exit_code, "reasons": exc.reasons})
        return exc.exit_code
    print(f"error: {exc}", file=sys.stderr)
    for h in exc.hints:
        print(f"hint: {h}", file=sys.stderr)
    return exc.exit_code


_OS_HINTS = {
    "ENOSPC": "free space on that file system (or write somewhere else), then run the command again",
    "EDQUOT": "free space within your quota (or write somewhere else), then run the command again",
    "EROFS": "the file system is mounted read-only: run where you can write, or pass --project DIR / -o FILE there",
    "EACCES": "you may not write there: check the folder's owner and permissions, or write somewhere else",
    "EPERM": "you may not write there: check the folder's owner and permissions, or write somewhere else",
}


def _os_error(exc: OSError, command: str | None = None) -> FrtError:
    """The last resort for an ``OSError`` no command reported itself: ``<path>: <cause>``, exit 2 for
    a place that cannot be written (full, read-only, denied), else exit 1, with a hint for the common causes."""
    import errno  # noqa: PLC0415

    path = _written_file(exc.filename) if exc.filename is not None else None
    cause = exc.strerror or str(exc) or type(exc).__name__
    where = f"{path}: " if path is not None else f"frt {command}: " if command else ""
    if exc.filename2 is not None:
        where = f"{path} -> {exc.filename2}: "
    name = errno.errorcode.get(exc.errno or 0, "")
    hints = [_OS_HINTS[name]] if name in _OS_HINTS else []
    # a place that cannot be written is exit 2, as every command that reports it itself says (README);
    # anything else the machine refused (an I/O error) is a "no", exit 1
    kind = UsageError if name in _UNWRITABLE else FrtError
    return kind(f"{where}{cause}", hints=hints, reasons=[{"path": None if path is None else str(path),
                                                          "errno": name or None, "reason": cause}])


_UNWRITABLE = frozenset({"ENOSPC", "EDQUOT", "EROFS", "EACCES", "EPERM", "EFBIG", "ENOTDIR", "EISDIR"})


def _written_file(name):
    """The file being written when ``name`` is ``write_atomic``'s temp file beside it
    (``.<file>.<random>.tmp``, removed again by then): the error names the destination."""
    import re  # noqa: PLC0415

    p = Path(os.fsdecode(name)) if isinstance(name, (str, bytes, os.PathLike)) else None
    m = re.fullmatch(r"\.(.+)\.[A-Za-z0-9_]{8}\.tmp", p.name) if p is not None else None
    return str(p.with_name(m.group(1))) if m else name


def _global_project(args) -> None:
    """``frt --project DIR <command>`` and ``frt --demo <command>``: the global option stands for the
    subcommand's own."""
    if getattr(args, "global_demo", False):
        if not hasattr(args, "demo"):  # init, digest, sign: no project to choose
            raise UsageError(f"--demo: frt {args.command} uses no project")
        args.demo = True
    given = getattr(args, "global_project", None)
    if given is None:
        return
    if args.command == "init":  # init's folder is its argument: `frt --project DIR init` creates DIR
        if args.dir not in (".", given):
            raise UsageError(f"frt --project {given} init {args.dir}: two different folders; give one")
        args.dir = given
        return
    own = getattr(args, "project", None)
    if own is not None and Path(own).resolve() != Path(given).resolve():
        raise UsageError(f"--project {given} (before the command) and --project {own} (after it) differ; give one")
    args.project = given


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
