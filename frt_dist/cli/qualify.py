"""``frt qualify``: measure a route against the host and write receipts (docs/reference.md#frt-qualify)."""

from __future__ import annotations

import sys
from pathlib import Path

from ..errors import FrtError, UsageError
from .context import find_lock, find_project, the_model
from .parser import common_options, count_arg
from .render import deprecated, emit, progress_bar


def add_parser(sub) -> None:
    """``frt qualify``'s flags."""
    s = sub.add_parser("qualify", help="measure a route against the unmodified host and write receipts")
    common_options(s)
    s.add_argument("--model", metavar="M",
                   help="the model whose manifest names the route; may be left out when the project "
                        "has one model")
    s.add_argument("--route", required=True, metavar="R", help="the route to measure against the manifest's host-entry")
    s.add_argument("--phase", action="append", metavar="PH", help="one phase band (repeatable); default: every band")
    s.add_argument("--rounds", type=count_arg, metavar="N",
                   help="paired timing rounds (default: the manifest's [qualify] rounds)")
    s.add_argument("--max-rounds", type=count_arg, metavar="N",
                   help="the cap of adaptive timing while the speedup is undecided "
                        "(default: [qualify] max-rounds, else 4x the rounds)")
    s.add_argument("--output-dir", dest="out", metavar="DIR",
                   help="receipts folder (default: the project's receipts/<model>/)")
    s.add_argument("--out", dest="out_old", metavar="DIR", help="deprecated spelling of --output-dir")
    s.add_argument("--seed", type=int, default=0, metavar="N",
                   help="seed of the synthetic inputs and host weights (default 0)")
    sign = s.add_mutually_exclusive_group()
    sign.add_argument("--key", metavar="KEY",
                      help="sign each receipt written with the PEM private key KEY (EC P-256 or "
                           "Ed25519): writes <receipt>.json.sig beside it "
                           "(docs/reference.md#receipt-signatures)")
    sign.add_argument("--sign", dest="sign_old", metavar="KEY", help="deprecated spelling of --key")
    sign.add_argument("--unsigned", action="store_true",
                      help="qualify without signing where the manifest's [trust.receipts] policy covers this "
                           "machine (otherwise refused before measuring): sign the receipts afterwards with frt sign")


def run(args) -> int:
    from ..qualify.receipts import check_receipt_folder, write_receipt  # noqa: PLC0415
    from ..qualify.run import check_route, qualify  # noqa: PLC0415

    _old_spellings(args)
    key = None
    if args.key:  # a bad key is refused before minutes of measuring, not after
        from ..provenance.signing import load_private_key  # noqa: PLC0415

        key = load_private_key(args.key)
    project = find_project(args)
    project.need_manifests("qualify")
    args.model = the_model(project, args)
    lock = find_lock(project, args.model, None)
    lock = _measured_lock(project, args, lock)
    if project.read_only and not args.out:
        raise FrtError("the bundled defaults are read-only; pass --output-dir DIR for the receipts",
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
                bars[ev["phase"]] = progress_bar(args, total=ev["rounds"], desc=f"  {ev['phase']} rounds", unit="round")
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
    from ..documents.manifest import route_gate  # noqa: PLC0415

    emit(args, {"model": args.model, "route": args.route,
                "gate": route_gate(lock.manifest.routes[args.route]).to_json(), "results": docs}, "\n".join(lines))
    if all(r.passed for r in results):
        if not args.quiet and not args.json:
            print("hint: run `frt lock` to embed the new receipts", file=sys.stderr)
        return 0
    print("error: qualification failed for " + ", ".join(r.phase for r in results if not r.passed), file=sys.stderr)
    return 1


def _measured_lock(project, args, lock):
    """The lock ``frt qualify`` measures with: the manifest file as it is now, with the packages the
    lock pins (``qualify.measured_lock``); the lock's own manifest where the file cannot be read (a
    node, or ``FRT_LOCK`` naming another project's lock)."""
    from ..documents.manifest import Manifest  # noqa: PLC0415
    from ..qualify.run import measured_lock  # noqa: PLC0415

    mpath = project.manifest_path(args.model)
    if not mpath.is_file() or lock.model != args.model:
        return lock
    manifest = Manifest.read(mpath, label=project.rel(mpath))  # a manifest that does not read: exit 2, its field
    label = project.rel(project.lockfile_path(args.model))
    got = measured_lock(lock, manifest, args.route, lock_label=label, project=project)
    old = lock.manifest.routes.get(args.route)
    if old is not None and old.digest != manifest.routes[args.route].digest and not (args.quiet or args.json):
        print(f"note: route {args.route} changed since {label} was written: measuring it as {manifest.file} defines "
              "it now, with the packages the lock pins", file=sys.stderr)
    return got


def _old_spellings(args) -> None:
    """``--out DIR`` and ``--sign KEY`` still work, with a deprecation note."""
    if args.out_old is not None:
        deprecated("frt qualify --out", "frt qualify --output-dir")
        if args.out is not None and args.out != args.out_old:
            raise UsageError(f"--output-dir {args.out} and --out {args.out_old} differ; give one")
        args.out = args.out_old
    if args.sign_old is not None:
        deprecated("frt qualify --sign", "frt qualify --key")
        args.key = args.sign_old


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


def _qualify_signing_check(project, lock, args, key):
    """This machine's facts, after the check that the project's ``[trust.receipts]`` policy (its
    manifest file's; the lock's embedded one where the file cannot be read) would accept what
    ``frt qualify`` is about to write (``qualify.check_signing_policy``)."""
    from ..documents.manifest import Manifest  # noqa: PLC0415
    from ..qualify.receipts import check_signing_policy  # noqa: PLC0415
    from ..system.hardware import Hardware  # noqa: PLC0415

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
