"""``frt resolve``: the route decision per phase band (docs/reference.md#frt-resolve)."""

from __future__ import annotations

import sys

from .. import settings
from ..base.canonical import short_digest
from .context import find_lock, find_project, hardware_from_args, the_model
from .parser import common_options, hardware_flags
from .render import emit


def add_parser(sub) -> None:
    """``frt resolve``'s flags."""
    s = sub.add_parser("resolve", help="print the route decision per phase band")
    common_options(s)
    s.add_argument("--model", metavar="M",
                   help="the model whose lockfile decides (lockfiles/MODEL.lock); "
                        "may be left out when the project has one model")
    hardware_flags(s)
    s.add_argument("--precision", metavar="P",
                   help="the precision asked for (default: the manifest's default-precision); "
                        "a lower one is never chosen for you")
    s.add_argument("--phase", action="append", metavar="PH", help="one phase band (repeatable); default: all")
    s.add_argument("--fallback", choices=["refuse", "host"], default="refuse",
                   help="a band with no qualified route: refuse (default, exit 1) or decide the host path")
    s.add_argument("--accept", action="append", choices=["certified_fast", "supported_correct"],
                   help="accepted states (repeatable); default certified_fast; supported_correct accepts "
                        "certified_fast too, as load(accept=) and FRT_ACCEPT do")
    s.add_argument("--explain", action="store_true",
                   help="list every candidate route, why it won or lost, every failing package, and the "
                        "variant this system selects for each package")
    s.add_argument("-v", "--verbose", action="store_true",
                   help="with --explain (implies it): also every locked variant, accepted or rejected and why")
    s.add_argument("--lockfile", metavar="FILE", help="resolve against this lockfile")


def run(args) -> int:
    from ..routes.resolver import check_policy, resolve_all  # noqa: PLC0415

    project = find_project(args)
    if args.model is None and (args.lockfile or settings.value("FRT_LOCK")):
        lock = find_lock(project, None, args.lockfile)  # the lockfile named says which model
    else:
        lock = find_lock(project, the_model(project, args), args.lockfile)
    warnings = _stale_warning(lock)
    if not args.json:
        for w in warnings:
            print(f"warning: {w}", file=sys.stderr)
    accept = tuple(args.accept or ("certified_fast",))  # (supported_correct implies certified_fast: check_policy)
    for ph in args.phase or ():
        check_policy(lock, precision=args.precision, phase=ph, fallback=args.fallback, accept=accept)
    precision, accept = check_policy(lock, precision=args.precision, phase=None, fallback=args.fallback, accept=accept)
    hw = hardware_from_args(args)
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
    emit(args, doc, _render_resolve(lock, hw, precision, accept, decisions, doc.get("candidates")))
    refused = [p for p, d in decisions.items() if d.decision == "refused"]
    if refused and not (args.json or args.quiet):
        qualify = (f"qualify a route on a machine like this one in the project that locks {lock.model} "
                   f"(`frt qualify --model {lock.model} --route ROUTE`, then `frt lock`), and bring the new lockfile "
                   "to this node" if project.is_node else
                   f"qualify a route on the machine itself (`frt qualify --model {lock.model} --route ROUTE`), then `frt lock`")
        hints = _software_hints(lock, decisions, hw, precision) or _state_hints(decisions, refused, accept) or [
            qualify, "`--explain` shows every candidate and why it lost; `--fallback host` decides the host path instead"]
        for h in hints:
            print(f"hint: {h}", file=sys.stderr)
    return 1 if refused else 0


def _stale_warning(lock) -> list[str]:
    """Resolve uses a stale lock (it is what was reviewed) but says so, once (docs/reference.md#freshness)."""
    from ..lock.freshness import manifest_drift  # noqa: PLC0415
    from ..project.discover import lock_root  # noqa: PLC0415 - not the loader's: resolve imports no loader

    stale = manifest_drift(lock, lock_root(lock))
    return [stale] if stale else []


def _software_hints(lock, decisions, hw, precision) -> list[str]:
    """For each band where a route lost for software the receipt recorded and the declared
    system does not name (kind ``software-not-declared``), the ``--software`` value that declares
    what the receipt recorded on top of what was declared: read from the receipt itself."""
    from ..documents.receipt import CellKey  # noqa: PLC0415

    out: list[str] = []
    for d in decisions.values():
        for r in d.reasons:
            if r.kind != "software-not-declared":
                continue
            entry = lock.index.get(CellKey(d.phase, precision, hw.backend, hw.arch, hw.device_class))
            for cand in entry.candidates if entry is not None else ():
                recorded = {k: v for k, v in lock.receipts[cand.receipt].software.items() if k not in hw.software}
                if cand.route != r.route or not recorded:
                    continue
                facts = ",".join(f"{k}={v}" for k, v in sorted({**hw.software, **recorded}.items()))
                hint = f"declare the software the receipt recorded: --software {facts}"
                if hint not in out:
                    out.append(hint)
                break  # the route's best receipt, as the reason is
    return out


def _state_hints(decisions, refused: list[str], accept) -> list[str]:
    """When every refused band had a route that lost only on its state (kind ``state-below-accept``:
    a correct receipt, ``supported_correct``, under ``accept`` certified_fast), the flag that accepts it."""
    if "supported_correct" in accept:
        return []
    if all(any(r.kind == "state-below-accept" for r in decisions[p].reasons) for p in refused):
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
