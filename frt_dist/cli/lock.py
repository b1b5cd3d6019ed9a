"""``frt lock``: lock every manifest (or one) into lockfiles/ (docs/reference.md#frt-lock)."""

from __future__ import annotations

import sys

from ..base.canonical import short_digest, short_digests
from ..errors import FrtError, UsageError
from .context import find_project
from .parser import common_options, output_file_arg
from .render import emit, progress_bar


def add_parser(sub) -> None:
    """``frt lock``'s flags."""
    s = sub.add_parser("lock", help="lock every manifest (or one) into lockfiles/")
    common_options(s, verbose="also each locked package, at its revision, with its variants")
    s.add_argument("--model", metavar="M", help="lock one model")
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
                   help="deprecated: use `frt export --format FMT`. Write nothing to lockfiles/: print the locked "
                        "pins in another tool's lock format (kernels: a kernels.lock for kernels.load_kernel / "
                        "LockedLayerRepository). kernels checks no file digest when it loads: an edited file in the "
                        "mirror runs; check the mirror with `frt verify --mirror DIR` before such a load "
                        "(frt_dist.load checks every file itself). cyclonedx: one model's lock as a CycloneDX 1.6 "
                        "JSON SBOM")
    s.add_argument("-o", "--output", metavar="FILE", type=output_file_arg,
                   help="with --export: write to FILE instead of stdout")


def run(args) -> int:
    """Lock every model it can: a model whose packages fail is reported (`error: <model>: <package>:
    <reason>`), its lockfile left as it was, and the others are still locked and written; the run
    then exits non-zero. One ``LockSession`` fetches a package shared by several models once."""
    from ..lock.build import CoverageLoss, LockFailed, LockSession, NothingAccepted, lock_model  # noqa: PLC0415

    if args.export:
        from . import export  # noqa: PLC0415

        return export.run(args)
    project = find_project(args)
    project.need_manifests("lock")
    models = [args.model] if args.model is not None else project.models()
    if args.model is not None:
        project.manifest_path(args.model)
    if not models:
        raise UsageError(f"no manifests in {project.manifests_dir}")
    results, failed, stale_any = [], [], False
    session = LockSession()
    quiet = args.quiet and not args.json
    pending: list[str] = []  # one model's warnings, said once it is locked (a release receipt's, by its report line)
    warn = (lambda m: None) if quiet else pending.append
    for model in models:
        bar = None
        pending.clear()

        def progress(ev: dict) -> None:
            nonlocal bar
            if bar is None:
                bar = progress_bar(args, total=ev["total"], desc=f"lock {ev['model']}", unit="pkg")
            bar.update(1)
            bar.set_postfix_str(ev["repo"])

        try:
            res = lock_model(project, model, check=args.check, strict=args.strict, allow_loss=args.allow_loss,
                             upgrade=set(args.upgrade_package), warn=warn, progress=progress, session=session,
                             upgrade_release=args.upgrade_release)
        except (CoverageLoss, NothingAccepted) as exc:  # reported like the others, with its diff: the old lockfile stays
            results.append(exc.result)
            failed.append((model, exc))
            _say_warnings(pending, None, args)  # (its release report leaves the reasons to these lines)
            continue
        except FrtError as exc:
            _say_warnings(pending, None, args)
            if len(models) == 1 and not isinstance(exc, LockFailed):
                raise  # one model, and not its packages (a bad manifest): the plain error
            failed.append((model, exc))
            continue
        finally:
            if bar is not None:
                bar.close()
        _say_warnings(pending, res, args)
        results.append(res)
        stale_any |= bool(res.stale)
    lines = []
    refused = {model: exc for model, exc in failed if isinstance(exc, (CoverageLoss, NothingAccepted))}
    for r in results:
        rel = project.rel(r.path)
        cov = r.coverage
        if args.check:
            lines.append(f"{rel}: {'stale' if r.stale else 'up to date'}")
            lines += [f"  - {s}" for s in r.stale]
            if cov.changes:
                lines.append(f"  coverage if locked now: {cov.summary()}")
        else:
            state = ("not written, no receipt accepted" if isinstance(refused.get(r.model), NothingAccepted) else
                     "not written, coverage would shrink") if r.model in refused else \
                "written" if r.written else "unchanged"
            lines.append(f"{rel}: {state} "
                         f"({len(r.lockfile.packages)} packages, {len(r.lockfile.receipts)} receipts, "
                         f"{len(r.lockfile.rejected)} rejected, {len(r.lockfile.index)} cells"
                         + ("; first lock" if cov.first else f"; {cov.summary()}" if cov.changes else
                            "; coverage unchanged" if r.written else "") + ")")
        # a refused model's losses: each reason once, on its error line (stderr)
        lines += [f"  {c}" for c in cov.lines(limit=None if r.model in refused else 20,
                                              loss_reasons=r.model not in refused)]
        if args.verbose:
            lines += [f"  package {repo} @ {short_digest(p.revision)}: {', '.join(sorted(p.variants))}"
                      for repo, p in sorted(r.lockfile.packages.items())]
        if r.written and cov.losses and not args.json and not args.quiet:
            n = cov.counts()
            print(f"warning: {r.model}: written with less coverage than {rel} had ({n['lost']} lost, "
                  f"{n['dropped']} dropped), as --allow-loss asks", file=sys.stderr)
        if r.release:
            from ..lock.release import change_lines  # noqa: PLC0415

            lines += change_lines(r.release, reasons=r.model not in refused)
    failures = []
    for model, exc in failed:
        if isinstance(exc, NothingAccepted):
            failures += [{"model": model, "package": None, **{k: v for k, v in r.items() if k not in ("model", "reason")},
                          "reason": f"rejected {r['file']} (receipt digest {r['digest']}): {r['reason']}"}
                         for r in exc.reasons]
        elif isinstance(exc, CoverageLoss):
            failures += [{"model": model, "package": None, **{k: v for k, v in r.items() if k != "model"},
                          "reason": f"{r['kind']} {r['cell']} route {r['route']}: {r['reason']}"} for r in exc.reasons]
        else:
            failures += [{"model": model, "package": r.get("package"), "reason": r["reason"]}
                         for r in (exc.reasons if isinstance(exc, LockFailed) else [{"reason": str(exc)}])]
    hints = list(dict.fromkeys(h for _, exc in failed for h in exc.hints))
    doc = {"ok": not stale_any and not failed, "lockfiles": [
        {"model": r.model, "path": project.rel(r.path), "written": r.written, "stale": r.stale,
         "lock-digest": None if r.model in refused else r.lockfile.lock_digest, "receipts": len(r.lockfile.receipts),
         "rejected": r.lockfile.rejected,
         "refused": (("nothing-accepted" if isinstance(refused[r.model], NothingAccepted) else "coverage-loss")
                     if r.model in refused else None),
         "coverage": r.coverage.to_dict(), **({"release": r.release} if r.release else {}),
         **({"release-news": r.release_news} if r.release_news else {})} for r in results],
        "failures": failures, "hints": hints}
    emit(args, doc, short_digests("\n".join(lines)))
    if not (args.json or args.quiet):
        for r in results:
            for line in r.release_news:
                print(f"note: {line}", file=sys.stderr)
    if stale_any:
        print("error: lockfile is stale", file=sys.stderr)
        print("hint: run `frt lock` to regenerate it", file=sys.stderr)
    if failed and not args.json:
        for model, exc in failed:
            if isinstance(exc, (CoverageLoss, NothingAccepted)):
                print(f"error: {model}: {exc.summary}", file=sys.stderr)
        for f in failures:
            print(short_digests(f"error: {f['model']}: " + (f"{f['package']}: " if f["package"] else "") + f["reason"]),
                  file=sys.stderr)
        for h in hints:
            print(short_digests(f"hint: {h}"), file=sys.stderr)
    return max([exc.exit_code for _, exc in failed] + [1 if stale_any else 0])


def _say_warnings(pending: list[str], result, args) -> None:
    """``warning:`` lines for what ``lock_model`` warned about, digests shortened; a release receipt the
    release report lists with its verdict (added or edited, rejected) is not warned about again there."""
    reported = set()
    if result is not None and result.release and not args.json:
        from ..documents.lock_release import label_prefix  # noqa: PLC0415

        prefix = label_prefix(result.release["repo"])
        reported = {prefix + it["file"] for k in ("added", "edited") for it in result.release[k]
                    if it["verdict"].startswith("rejected")}
    for m in pending:
        if not any(m.startswith(f"{label}: ") for label in reported):
            print(short_digests(f"warning: {m}"), file=sys.stderr)
    pending.clear()
