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

from .canonical import short_digest
from .errors import FrtError, UsageError

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
    p.add_argument("--project", metavar="DIR", help="project root (default: the current project, FRT_HOME, or the bundled defaults)")
    p.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    p.add_argument("--quiet", "-q", action="store_true", help="print nothing but errors")


def _hardware_flags(p: argparse.ArgumentParser) -> None:
    """The declared-hardware flags (SPEC §17: any machine can be declared on any machine);
    ``_hardware(args)`` turns them into a ``Hardware``."""
    from .hardware import BACKENDS, CPUS, OSES  # noqa: PLC0415

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


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="frt", description="Distribution layer for qualified GPU kernel packages.")
    p.add_argument("--version", action="version", version=f"frt {__import__('frt_dist').__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    s = sub.add_parser("lock", help="lock every manifest (or one) into lockfiles/")
    _common(s)
    s.add_argument("--model", help="lock one model")
    s.add_argument("--check", action="store_true", help="write nothing; exit 1 naming what is stale")
    s.add_argument("--strict", action="store_true", help="exit 1 when any receipt is rejected")
    s.add_argument("--upgrade-package", action="append", default=[], metavar="REPO",
                   help="re-resolve REPO's branch on the Hub (otherwise a locked commit is kept)")
    s.add_argument("--export", choices=["kernels"],
                   help="write nothing to lockfiles/: print the locked pins in another tool's lock format "
                        "(kernels: a kernels.lock for kernels.load_kernel / LockedLayerRepository)")
    s.add_argument("-o", "--output", metavar="FILE", type=_output_file,
                   help="with --export: write to FILE instead of stdout")

    s = sub.add_parser("resolve", help="print the route decision per phase band")
    _common(s)
    s.add_argument("--model", required=True, help="the model whose lockfile decides (lockfiles/MODEL.lock)")
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

    s = sub.add_parser("mirror", help="fill DIR with every locked file the selection needs",
                       description="Fill DIR with every locked file the selection needs. Select by --variant, "
                                   "--all-variants, the machines you ship to (the hardware flags for one, "
                                   "--machine for each further one), or --cells; default: this machine.",
                       epilog="example: frt mirror DIR --arch 9.0 --device-class h200 --software torch=2.13,cuda=12.8 "
                              "--machine 'arch=12.0,device-class=rtx-5090,software=torch=2.13;cuda=12.8'")
    _common(s)
    s.add_argument("dir", metavar="DIR", help="the mirror folder (a hub-cache layout; created when needed)")
    s.add_argument("--model", help="one model's lockfile (default: every lockfile of the project)")
    s.add_argument("--variant", action="append", help="a variant to mirror (repeatable); default: this system's")
    s.add_argument("--all-variants", action="store_true", help="every locked variant of every package")
    _hardware_flags(s)
    s.add_argument("--machine", action="append", metavar="KEY=V,...",
                   help="a machine to mirror for (repeatable): the hardware flags as KEY=VALUE pairs, software "
                        "pairs joined by ';', e.g. arch=9.0,device-class=h200,software=torch=2.13;cuda=12.8")
    s.add_argument("--cells", action="store_true",
                   help="every variant that any locked cell selects, on the facts its receipt records")

    s = sub.add_parser("qualify", help="measure a route against the unmodified host and write receipts")
    _common(s)
    s.add_argument("--model", required=True, help="the model whose manifest names the route")
    s.add_argument("--route", required=True, help="the route to measure against the manifest's host-entry")
    s.add_argument("--phase", action="append", help="one phase band (repeatable); default: every band")
    s.add_argument("--rounds", type=_count, help="paired timing rounds (default: the manifest's [qualify] rounds)")
    s.add_argument("--out", metavar="DIR", help="receipts folder (default: the project's receipts/<model>/)")
    s.add_argument("--seed", type=int, default=0, help="seed of the synthetic inputs and host weights (default 0)")

    s = sub.add_parser("init", help="create a project (pyproject.toml, a commented manifest, a kernel package)")
    s.add_argument("dir", metavar="DIR", nargs="?", default=".", help="the project folder (default: here)")
    s.add_argument("--model", default="my-model", help="the model name of the first manifest (default: my-model)")
    s.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    s.add_argument("--quiet", "-q", action="store_true", help="print nothing but errors")

    s = sub.add_parser("matrix", help="render the cell x route state matrix from the lockfiles")
    _common(s)
    s.add_argument("--model", help="one model's lockfile (default: every lockfile of the project)")
    s.add_argument("--format", choices=["md", "html"],
                   help="Markdown (default) or a self-contained HTML page; --json gives the JSON document")
    s.add_argument("-o", "--output", metavar="FILE", type=_output_file, help="write to FILE instead of stdout")
    return p


# ---------------------------------------------------------------------------


def _project(args):
    """The project in force, said once on stderr: always for the bundled demo (SPEC §23: never
    silently the demo), on a terminal for any other project."""
    from .project import Project  # noqa: PLC0415

    project = Project.find(explicit=args.project)
    if not args.quiet and not args.json:
        if project.read_only:
            print(f"note: using the bundled demo project (read-only) at {project.root}; "
                  "run in your project's folder, or pass --project DIR (`frt init` creates one)", file=sys.stderr)
        elif sys.stderr.isatty():  # a person at a terminal sees which project; logs and pipes stay as they were
            print(f"note: {project.describe()}", file=sys.stderr)
    return project


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
        print(json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False))
    elif not args.quiet and text:
        print(text)


def cmd_lock(args) -> int:
    """Lock every model it can: a model whose packages fail is reported (`error: <model>: <package>:
    <reason>`), its lockfile left as it was, and the others are still locked and written; the run
    then exits non-zero. One ``LockSession`` fetches a package shared by several models once."""
    from .locker import LockFailed, LockSession, lock_model  # noqa: PLC0415

    if args.export:
        return _lock_export(args)
    project = _project(args)
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
            res = lock_model(project, model, check=args.check, strict=args.strict,
                             upgrade=set(args.upgrade_package), warn=warn, progress=progress, session=session)
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
    for r in results:
        rel = project.rel(r.path)
        if args.check:
            lines.append(f"{rel}: {'stale' if r.stale else 'up to date'}")
            lines += [f"  - {s}" for s in r.stale]
        else:
            lines.append(f"{rel}: {'written' if r.written else 'unchanged'} "
                         f"({len(r.lockfile.packages)} packages, {len(r.lockfile.receipts)} receipts, "
                         f"{len(r.lockfile.rejected)} rejected, {len(r.lockfile.index)} cells)")
    failures = [{"model": model, "package": r.get("package"), "reason": r["reason"]}
                for model, exc in failed for r in (exc.reasons if isinstance(exc, LockFailed) else [{"reason": str(exc)}])]
    hints = list(dict.fromkeys(h for _, exc in failed for h in exc.hints))
    doc = {"ok": not stale_any and not failed, "lockfiles": [
        {"model": r.model, "path": project.rel(r.path), "written": r.written, "stale": r.stale,
         "lock-digest": r.lockfile.lock_digest, "receipts": len(r.lockfile.receipts),
         "rejected": r.lockfile.rejected} for r in results], "failures": failures, "hints": hints}
    _emit(args, doc, "\n".join(lines))
    if stale_any:
        print("error: lockfile is stale", file=sys.stderr)
        print("hint: run `frt lock` to regenerate it", file=sys.stderr)
    if failed and not args.json:
        for f in failures:
            print(f"error: {f['model']}: " + (f"{f['package']}: " if f["package"] else "") + f["reason"], file=sys.stderr)
        for h in hints:
            print(f"hint: {h}", file=sys.stderr)
    return max([exc.exit_code for _, exc in failed] + [1 if stale_any else 0])


def _lock_export(args) -> int:
    """``frt lock --export kernels``: the pins of the lockfiles in force, in `kernels`' format."""
    from .export import kernels_lock_json  # noqa: PLC0415
    from .lockfile import Lockfile, write_atomic  # noqa: PLC0415

    project = _project(args)
    models = [args.model] if args.model is not None else project.models()
    locks = [Lockfile.read(project.existing_lockfile(m)) for m in models]
    text = kernels_lock_json(locks)
    if args.output:
        out = Path(args.output)
        write_atomic(out, text.encode("utf-8"))
        if not args.quiet:
            print(f"wrote {out} ({len(json.loads(text))} kernels, from {', '.join(project.rel(l.path) for l in locks)})",
                  file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def cmd_init(args) -> int:
    from .init import init_project  # noqa: PLC0415

    written = init_project(args.dir, model=args.model)
    root = Path(args.dir).resolve()
    doc = {"project": str(root), "model": args.model, "written": [p.name for p in written]}
    _emit(args, doc, f"created project {root} (model {args.model}): {', '.join(p.name for p in written)}\n"
                     f"next: cd {args.dir} && frt lock && frt qualify --model {args.model} --route fast-norm "
                     "(see docs/first-project.md)")
    return 0


def _hardware(args):
    """Declared hardware from the flags, else the running system. ``--detect`` with a declared
    fact (``--arch``, ``--device-class``, ``--cpu``, ``--os``) is a usage error: a detected
    machine is never partly overridden, so the cell it resolves is the one it is."""
    from .hardware import Hardware, parse_software  # noqa: PLC0415

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
        from dataclasses import replace  # noqa: PLC0415

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
    from .lockfile import Lockfile  # noqa: PLC0415

    for source, given in (("--lockfile", explicit), ("FRT_LOCK", os.environ.get("FRT_LOCK"))):
        if given:
            if not os.path.isfile(given):  # False, not OSError, for a name too long to stat
                raise FrtError(f"no lockfile at {given} ({source})",
                               hints=[f"frt lock --model {model}, or name an existing lockfile in {source}"])
            return Lockfile.read(given)
    path = project.existing_lockfile(model)
    return Lockfile.read(path, label=project.rel(path))


def _stale_warning(lock) -> list[str]:
    """SPEC §23: resolve uses a stale lock (it is what was reviewed) but says so, once."""
    from .freshness import manifest_drift  # noqa: PLC0415
    from .loader import lock_root  # noqa: PLC0415

    stale = manifest_drift(lock, lock_root(lock))
    return [stale] if stale else []


def cmd_resolve(args) -> int:
    from .routes.resolver import check_policy, resolve_all  # noqa: PLC0415

    project = _project(args)
    lock = _find_lock(project, args.model, args.lockfile)
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
        from .routes.explain import Trace  # noqa: PLC0415

        trace = Trace()
    decisions = resolve_all(lock, hardware=hw, precision=precision, phases=args.phase, fallback=args.fallback,
                            accept=accept, reporter=trace)
    doc = {"model": lock.model, "lock-digest": lock.lock_digest, "precision": precision,
           "hardware": hw.to_dict(), "decisions": [d.to_dict() for d in decisions.values()], "warnings": warnings}
    if trace is not None:
        from .routes.explain import candidates  # noqa: PLC0415

        doc["candidates"] = candidates(lock, decisions, hw, verbose=args.verbose)
        doc["rejected-receipts"] = lock.rejected
        doc["events"] = trace.events
    _emit(args, doc, _render_resolve(lock, hw, precision, accept, decisions, doc.get("candidates")))
    refused = [p for p, d in decisions.items() if d.decision == "refused"]
    if refused and not (args.json or args.quiet):
        hints = _software_hints(decisions, hw) or [
            f"qualify a route on the machine itself (`frt qualify --model {lock.model} --route ROUTE`), then `frt lock`",
            "`--explain` shows every candidate and why it lost; `--fallback host` decides the host path instead"]
        for h in hints:
            print(f"hint: {h}", file=sys.stderr)
    return 1 if refused else 0


def _render_resolve(lock, hw, precision, accept, decisions, candidates) -> str:
    lines = [f"model {lock.model}  precision {precision}  hardware {hw.describe()}  accept {','.join(accept)}"]
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
    from .verify import verify  # noqa: PLC0415

    report = verify(_project(args), [args.model] if args.model is not None else None, mirror=args.mirror,
                    variants=args.variant, all_variants=args.all_variants)
    from .verify import DERIVED_KINDS  # noqa: PLC0415

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
        print(f"error: verification failed ({len(problems)} problem(s))", file=sys.stderr)
        kinds = {p["kind"] for p in problems}
        if kinds & set(DERIVED_KINDS):
            print("hint: the lockfile does not hold what `frt lock` derives from its own manifest and receipts: "
                  "find out who edited it (its lock-digest says nothing about that)", file=sys.stderr)
        for hint in _verify_fixes(args, problems, {"lock-digest", "stale", *DERIVED_KINDS}):
            print(f"hint: {hint}", file=sys.stderr)
        return 1
    return 0


def _verify_fixes(args, problems: list[dict], lock_kinds: set) -> list[str]:
    """The exact commands that fix what ``frt verify`` found: ``frt lock --model X`` per
    lockfile at fault; for the mirror, ``frt mirror DIR`` with the selection that was checked
    (the variants named in the problem paths when verify checked what the mirror holds), and
    ``rm`` for files the lock does not know (``frt mirror`` adds, it never deletes)."""
    import shlex  # noqa: PLC0415

    models = (Path(p["path"].split(": ", 1)[0]).stem for p in problems if p["kind"] in lock_kinds)
    out = [f"regenerate the lockfile with `frt lock --model {m}`" for m in dict.fromkeys(models)]
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
    from .mirror import mirror_lock, select_for_mirror  # noqa: PLC0415

    project = _project(args)
    models = [args.model] if args.model is not None else [p.stem for p in sorted(project.lockfiles_dir.glob("*.lock"))]
    if not models:
        raise FrtError(f"no lockfiles in {project.rel(project.lockfiles_dir)}", hints=["frt lock"])  # a "no": exit 1
    machines = _mirror_machines(args)
    select = {"variants": args.variant, "all_variants": args.all_variants, "machines": machines, "cells": args.cells}
    if not any(select.values()):
        select["machines"] = [_hardware(args)]  # this machine, detected: checked like a declared one
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
            rep = mirror_lock(lock, Path(args.dir), **select, progress=progress, root=project.root)
        except KeyboardInterrupt:  # not "nothing was written": what was verified stays (item 21.4)
            return _mirror_interrupted(args)
        finally:
            bar.close()
        d = rep.to_dict()
        d["model"] = model
        reports.append(d)
        lines.append(f"{model}: {len(rep.packages)} package(s) into {args.dir}: {rep.fetched} blob(s) fetched, "
                     f"{rep.present} already present and verified, {rep.bytes} bytes written")
        for p in rep.packages:
            lines.append(f"  {p['repo']} @ {short_digest(p['snapshot'])}  {', '.join(p['variants'])}")
        for sk in rep.skipped:
            lines.append(f"  skipped {sk['repo']}: {sk['reason']}")
    _emit(args, {"ok": True, "dir": str(args.dir), "models": reports}, "\n".join(lines))
    return 0


def _mirror_interrupted(args) -> int:
    msg = (f"interrupted; the files already verified stay in {args.dir} (this run's temporary files are "
           "removed, or by the next run if it was killed)")
    hints = ["run the same `frt mirror` again: it resumes, fetching only what is missing"]
    if getattr(args, "json", False):
        _print_json({"error": msg, "hints": hints, "exit": 130, "reasons": []})
    else:
        print(f"error: {msg}", file=sys.stderr)
        for h in hints:
            print(f"hint: {h}", file=sys.stderr)
    return 130


def cmd_qualify(args) -> int:
    from .qualify import qualify, write_receipt  # noqa: PLC0415

    project = _project(args)
    lock = _find_lock(project, args.model, None)
    if project.read_only and not args.out:
        raise FrtError("the bundled defaults are read-only; pass --out DIR for the receipts",
                       hints=["or run in a project folder (manifests/, receipts/, lockfiles/)"])
    out = Path(args.out) if args.out else project.receipts_dir / args.model
    talk = not (args.quiet or args.json)
    if talk:
        print(f"qualifying {args.model} route {args.route} on this machine", file=sys.stderr)
    bars: dict = {}

    def progress(ev: dict) -> None:
        if ev["event"] == "message":
            if talk:
                print(ev["text"], file=sys.stderr)
        elif ev["event"] == "round":
            if ev["phase"] not in bars:
                bars[ev["phase"]] = _bar(args, total=ev["rounds"], desc=f"  {ev['phase']} rounds", unit="round")
            bars[ev["phase"]].update(1)

    try:
        results = qualify(lock, args.route, phases=args.phase, rounds=args.rounds, seed=args.seed,
                          root=project.root, progress=progress)
    finally:
        for b in bars.values():
            b.close()
    lines, docs = [], []
    for r in results:
        if r.passed:
            r.path = write_receipt(r.receipt, out)
            ev = r.receipt["evidence"]
            t = ev["timing"]
            lines.append(f"{r.phase:<8} {r.state:<17} speedup {t['speedup-median']:.3f}x "
                         f"[{t['speedup-min']:.3f}-{t['speedup-max']:.3f}]  max-abs {ev['parity']['max-abs']:.2e}  "
                         f"-> {project.rel(r.path)}")
        else:
            lines.append(f"{r.phase:<8} FAIL (no receipt written)")
            lines += [f"    {f}" for f in r.failures]
        docs.append({"phase": r.phase, "passed": r.passed, "state": r.state,
                     "receipt": project.rel(r.path) if r.path else None, "failures": r.failures})
    _emit(args, {"model": args.model, "route": args.route, "results": docs}, "\n".join(lines))
    if all(r.passed for r in results):
        if not args.quiet and not args.json:
            print("hint: run `frt lock` to embed the new receipts", file=sys.stderr)
        return 0
    print("error: qualification failed for " + ", ".join(r.phase for r in results if not r.passed), file=sys.stderr)
    return 1


def cmd_matrix(args) -> int:
    """The matrix as Markdown, HTML or (``--json``) the JSON document, on stdout or into ``-o FILE``."""
    from .routes.matrix import render_matrix  # noqa: PLC0415

    if args.json and args.format:
        raise UsageError(f"--json and --format {args.format} each choose the output; give one")
    project = _project(args)
    text = render_matrix(project, model=args.model, fmt="json" if args.json else args.format or "md")
    if args.output:
        from .lockfile import write_atomic  # noqa: PLC0415

        write_atomic(Path(args.output), text.encode("utf-8"))
    else:
        sys.stdout.write(text)
    return 0


COMMANDS = {"lock": cmd_lock, "resolve": cmd_resolve, "verify": cmd_verify, "mirror": cmd_mirror,
            "qualify": cmd_qualify, "matrix": cmd_matrix, "init": cmd_init}


def main(argv: list[str] | None = None) -> int:
    import warnings  # noqa: PLC0415

    # torch warns once when numpy is absent; frt never hands tensors to numpy
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
    parser = build_parser()
    _ARGV[:] = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help(sys.stderr)
        return 2
    if args.command in ("lock", "mirror"):
        try:
            from .hub import configure_timeout  # noqa: PLC0415

            configure_timeout()
        except ImportError:  # pragma: no cover
            pass
    try:
        return COMMANDS[args.command](args)
    except FrtError as exc:
        if getattr(args, "json", False):  # SPEC §24: under --json every outcome is JSON, errors included
            _print_json({"error": str(exc), "hints": exc.hints, "exit": exc.exit_code,
                         "reasons": exc.reasons})
            return exc.exit_code
        print(f"error: {exc}", file=sys.stderr)
        for h in exc.hints:
            print(f"hint: {h}", file=sys.stderr)
        return exc.exit_code
    except BrokenPipeError:  # `frt ... | head`: the reader left; end quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # Python's own flush at exit must not fail again
        return 0
    except KeyboardInterrupt:
        print("error: interrupted; nothing was written", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
