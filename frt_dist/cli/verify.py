"""``frt verify``: re-derive the project's lockfiles (or one given with ``--lockfile``) and check a mirror
(docs/reference.md#frt-verify)."""

from __future__ import annotations

import sys
from pathlib import Path

from .context import find_project
from .parser import common_options
from .render import emit


def add_parser(sub) -> None:
    """``frt verify``'s flags."""
    s = sub.add_parser("verify", help="check lockfile digests and receipts (and a mirror)")
    common_options(s, verbose="also each lockfile checked, with its result, when some have problems")
    s.add_argument("--model", metavar="M", help="verify one model's lockfile (default: every lockfile of the project)")
    s.add_argument("--lockfile", metavar="FILE",
                   help="verify this lockfile (one you were given), re-derived from what it embeds and this project")
    s.add_argument("--mirror", metavar="DIR", help="also check that DIR (a folder, or an oci:// artefact with its "
                   "signature referrers) holds every locked file")
    s.add_argument("--variant", action="append", metavar="V",
                   help="with --mirror: variants to check (default: this system's)")
    s.add_argument("--all-variants", action="store_true", help="with --mirror: check every locked variant")


def run(args) -> int:
    from ..lock.verify import verify  # noqa: PLC0415

    report = verify(find_project(args), [args.model] if args.model is not None else None, mirror=args.mirror,
                    variants=args.variant, all_variants=args.all_variants, lockfile=args.lockfile)
    from ..lock.verify import DERIVED_KINDS  # noqa: PLC0415

    problems = report.problems

    def line(p: dict) -> str:
        if p["kind"] == "stale":  # docs/reference.md#freshness: the message names the manifest and both digests
            return f"stale: {p['message']}"
        if "derived" in p:  # a re-derivation: what the lock records vs what verify derived
            return f"{p['kind']}: {p['path']}: recorded {p['recorded']}, derived {p['derived']}"
        return f"{p['kind']}: {p['path']}: expected {p['expected']}, computed {p['computed']}"

    at_fault = {p["path"].split(": ", 1)[0] for p in problems}
    checked = [f"{c}: {'problems' if c in at_fault else 'ok'}" for c in report.lockfiles] if args.verbose else []
    text = "\n".join(([f"{c}: ok" for c in report.lockfiles] if not problems else checked + [line(p) for p in problems])
                     + [f"note: {n}" for n in report.notes])
    emit(args, report.to_dict(), text)
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
    lockfile at fault (for ``--lockfile FILE``: a fresh one from whoever locked it); for the
    mirror, ``frt mirror DIR`` with the selection that was checked (the variants named in the problem
    paths when verify checked what the mirror holds), and ``rm`` for files the lock does not know
    (``frt mirror`` adds, it never deletes)."""
    import shlex  # noqa: PLC0415

    project = getattr(args, "frt_project", None)
    node = project is not None and project.is_node
    models = (Path(p["path"].split(": ", 1)[0]).stem for p in problems if p["kind"] in lock_kinds)
    out = [f"bring a fresh lockfiles/{m}.lock from the project that locks it (`frt lock --model {m}` there)" if node
           else f"regenerate the lockfile with `frt lock --model {m}`" for m in dict.fromkeys(models)]
    if args.lockfile and out:  # a lockfile given from elsewhere: its name need not be its model's
        out = [f"do not use {args.lockfile}: get a fresh lockfile from whoever locked it (`frt lock` in their project)"]
    mirrored = [p for p in problems if p["kind"] not in lock_kinds]
    if not mirrored or args.mirror is None:
        return out
    model = f" --model {shlex.quote(args.model)}" if args.model is not None else ""
    if args.lockfile:  # refill from the lockfile that was checked
        model = f" --lockfile {shlex.quote(args.lockfile)}"
    if args.all_variants:
        select = " --all-variants"
    else:  # <folder>/snapshots/<snapshot>/build/<variant>/... or <folder>/refs/<ref>
        parts = [p["path"].split("/") for p in mirrored]
        variants = args.variant or [q[4] for q in parts if q[3:4] == ["build"]]
        if not variants:  # a ref only: the variants the mirror holds of that package
            variants = [d.name for q in parts for d in Path(args.mirror).glob(f"{q[0]}/snapshots/*/build/*")]
        select = "".join(f" --variant {shlex.quote(v)}" for v in dict.fromkeys(variants)) or " --all-variants"
    if str(args.mirror).startswith("oci://"):  # an artefact is made whole by publishing it again
        return out + [f"publish the artefact again from the project that locks it: `frt publish "
                      f"{shlex.quote(args.mirror)}{model}{select}`; a node can pin a good one (oci://…@sha256:…)"]
    if node:  # a node has no sources of its own: it fills its mirror from the fleet's store
        url = project.mirror if project.mirror and "://" in project.mirror else "URL"  # [tool.frt] mirror, a store
        select += f" --from {shlex.quote(url)}"
    if any(p["kind"] != "unknown" for p in mirrored):
        out.append(f"refill the mirror with `frt mirror {shlex.quote(args.mirror)}{model}{select}`")
    unknown = [shlex.quote(str(Path(args.mirror) / p["path"])) for p in mirrored if p["kind"] == "unknown"]
    if unknown:
        out.append(f"remove what the lock does not know with `rm -- {' '.join(unknown)}`")
    return out
