"""The qualification door: ``frt qualify --model X --route R``.

Runs the route and the unmodified host in one process on this machine and
writes one receipt per phase band (docs/reference.md#receipt). Never called by
``load``. What it measures, per band:

- **parity** at the output boundary (the whole binding's output, not a seam's)
  over the manifest's qualification rows, against the declared tolerances
  (``|route - host| <= abs + rel * |host|`` elementwise), with the worst case;
- **target calls** per seam (> 0) and **fallbacks** (= 0), read from the ledger
  of the same guarded entries serving uses (``serve.plan_for_route``);
- **paired alternating timing**: warm-up, then rounds of host and route calls
  in alternating order (ABBA...), per-round speedup, medians and spread;
- a **null check** (the host rerun is bit-identical), a **negative control**
  (a deliberately perturbed impl must fail parity, proving the gate can fail),
  and **detach restores host** bit-exactly.

``certified_fast`` only when the low end of the 95% interval of the median paired
speedup (``median_ci``) clears the route's gate (``manifest.route_gate``: its ``gate.min-speedup``, else
the default 1.02; recorded as ``evidence.timing.gate``) and 1, the median
does too and the host's median time is above the route's (``speed_state``); otherwise
``supported_correct`` ("cannot tell" included). Timing is adaptive up to a cap
(``paired_timing``). A failed check writes no receipt; the receipts folder is checked
before anything is measured (``check_receipt_folder``).

This module is the run; each of its parts is a module of this package: ``host`` (the manifest's
``host-entry`` and the block it returns), ``parity``, ``stats`` (the speedup's interval and the state
it supports), ``timing`` (paired timing and its clocks), ``gates`` (the checks a band must pass and
the receipt's cell, shared with a vLLM binding's run), ``receipts`` (writing them), ``vllm`` (the
run on a vLLM binding).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..documents.lockfile import Lockfile
from ..documents.manifest import route_gate
from ..errors import KernelUnavailable, UsageError
from ..system.hardware import Hardware
from .gates import band_failures, speed_verdict
from .gates import receipt as make_receipt
from .host import HOST_HINT, build_host_block, load_host_factory, one_block_side
from .parity import output_parity, run_all
from .timing import clock_for, device_timing

__all__ = ["qualify", "measured_lock", "unpinned", "check_route", "QualifyResult"]

DEFAULT_ROUNDS = 30
DEFAULT_WARMUP = 5


@dataclass
class QualifyResult:
    phase: str
    passed: bool
    state: str | None
    receipt: dict | None
    path: Path | None = None
    failures: list[str] = field(default_factory=list)
    speedups: list[float] = field(default_factory=list)  # the per-round host/route ratios, in order


def check_route(m, route_name: str, phases=None) -> list[str]:
    """The phases to qualify (default: all of the manifest's), or the ``UsageError`` naming an
    unknown route or phase and the valid ones. ``frt qualify`` calls it before importing torch
    and kernels (seconds), so a mistyped name is refused at once."""
    if route_name not in m.routes:
        raise UsageError(f"unknown route {route_name!r} for model {m.model!r} (valid: {', '.join(m.routes)})")
    phases = list(phases or m.phases)
    for ph in phases:
        if ph not in m.phases:
            raise UsageError(f"unknown phase {ph!r} for model {m.model!r} (valid: {', '.join(m.phases)})")
    return phases


def unpinned(lock: Lockfile, manifest, repos, *, project=None) -> list[str]:
    """Why each of ``repos`` (packages ``manifest`` declares) cannot be measured with the pins of
    ``lock``: not pinned, pinned at another version or path, or a path package whose files changed
    since (its content digest, derived again under ``project``). [] when every one is pinned as declared."""
    out = []
    for repo in sorted(repos):
        pkg, pin = manifest.packages.get(repo), lock.packages.get(repo)
        if pkg is None:
            continue
        if pin is None:
            out.append(f"{repo} is not pinned")
        elif pkg.is_path != (pin.source == "path"):
            out.append(f"{repo} is pinned as a {'path' if pin.source == 'path' else 'Hub'} package")
        elif not pkg.is_path and pkg.version != pin.version:
            out.append(f"{repo} is pinned at version {pin.version}, the manifest asks for {pkg.version}")
        elif pkg.is_path and pkg.path != pin.path:
            out.append(f"{repo} is pinned from path {pin.path!r}, the manifest names {pkg.path!r}")
        elif pkg.is_path and project is not None:
            from ..errors import FrtError  # noqa: PLC0415
            from ..lock.build import derive_path_package  # noqa: PLC0415

            try:
                now = derive_path_package(project, pkg).revision
            except FrtError:
                continue  # (the loader names what is wrong with it)
            if now != pin.revision:
                out.append(f"{repo}'s files changed since the lock pinned them")
    return out


def measured_lock(lock: Lockfile, manifest, route_name: str, *, lock_label: str, project=None) -> Lockfile:
    """What ``frt qualify`` measures (docs/reference.md#frt-qualify): the route as ``manifest`` (the
    project's manifest file, now) defines it, with the packages ``lock`` pins. Where the route needs a
    package the lock does not pin as the manifest declares it, the ``FrtError`` (exit 1) says which
    ``frt lock`` comes first: with ``--allow-loss`` where the lock would drop receipts measured on a
    route definition the manifest no longer has (the new receipts bring those cells back)."""
    from ..base.record import replace  # noqa: PLC0415
    from ..errors import FrtError  # noqa: PLC0415

    check_route(manifest, route_name)
    why = unpinned(lock, manifest, manifest.route_packages(route_name), project=project)
    if why:
        model = manifest.model
        losing = sorted({rec.file for rec in lock.receipts.values() if rec.problems(manifest)})
        step = f"frt lock --model {model}" + (" --allow-loss" if losing else "")
        drops = (f" (it drops the {len(losing)} receipt(s) measured on route definitions {manifest.file} no longer "
                 f"has: {', '.join(losing[:3])}{', ...' if len(losing) > 3 else ''}; the receipts you measure next "
                 "bring those cells back)") if losing else ""
        raise FrtError(f"route {route_name!r} of {manifest.file} needs packages {lock_label} does not pin as the "
                       f"manifest declares them: {'; '.join(why)}; frt qualify measures with the lock's pins",
                       reasons=[{"route": route_name, "reason": w} for w in why],
                       hints=[f"lock them first: `{step}`{drops}, then `frt qualify --model {model} --route "
                              f"{route_name}{' --key KEY' if manifest.receipt_policy is not None else ''}`, then "
                              f"`frt lock --model {model}`"])
    if manifest.raw == lock.manifest.raw:
        return lock
    return replace(lock, manifest=manifest)


def qualify(lock: Lockfile, route_name: str, *, phases=None, rounds: int | None = None, seed: int = 0,
            hardware: Hardware | None = None, root=None, progress=None, l2_flush: bool = False,
            max_rounds: int | None = None) -> list[QualifyResult]:
    """Measure ``route_name`` against the host in every requested phase band.

    Timing uses the clock the inputs' device needs (``clock_for``): the host's wall clock on
    CPU, CUDA events on a GPU, where ``l2_flush`` overwrites a buffer larger than L2 before
    each measured side.

    ``progress``, when given, receives events: ``{"event": "message", "text"}`` and,
    per timing round, ``{"event": "round", "phase", "round", "rounds"}`` (``rounds`` grows when
    adaptive timing adds rounds, up to ``max_rounds``: the argument, else ``[qualify] max-rounds``,
    else ``MAX_ROUNDS_FACTOR`` times the initial rounds)."""
    import torch  # noqa: PLC0415

    from ..loader.core import load_locked  # noqa: PLC0415
    from ..loader.smoke import smoke_impl  # noqa: PLC0415
    from ..project.discover import lock_root  # noqa: PLC0415
    from ..serve.load import plan_for_route  # noqa: PLC0415

    m = lock.manifest
    emit = progress or (lambda event: None)

    def say(text: str) -> None:
        emit({"event": "message", "text": text})
    phases = check_route(m, route_name, phases)
    route = m.routes[route_name]
    gate = route_gate(route)
    say(f"  gate: certified_fast needs the speedup interval's low end at or above {gate.describe()}")
    if m.host == "vllm":  # a vLLM binding: the route against the same engine with the route detached
        return _qualify_vllm(lock, route_name, phases=phases, rounds=rounds, seed=seed, root=root, progress=progress,
                             max_rounds=max_rounds)
    hw = hardware or Hardware.detect()
    factory = load_host_factory(m.host_entry, m.model, root if root is not None else lock_root(lock))
    tol = m.tolerance
    rounds = rounds or int(m.qualify.get("rounds", DEFAULT_ROUNDS))
    warmup = int(m.qualify.get("warmup", DEFAULT_WARMUP))
    max_rounds = max_rounds or m.qualify.get("max-rounds")

    loaded, entries, problems = {}, {}, []
    for seam, impl_name in sorted(route.seams.items()):
        impl = m.impl(seam, impl_name)
        try:
            pkg = loaded.get(impl.package) or load_locked(lock, impl.package, hardware=hw, root=root)
        except KernelUnavailable as exc:
            problems.append(str(exc))
            continue
        loaded[impl.package] = pkg
        fn = getattr(pkg.module, impl.entry, None)
        if not callable(fn):
            problems.append(f"{impl.package} offers no entry {impl.entry!r} (seam {seam})")
            continue
        entries[seam] = (impl, fn)
    if problems:
        raise KernelUnavailable("route cannot be bound: " + "; ".join(problems),
                                reasons=[{"route": route_name, "reason": p} for p in problems])

    results = []
    for ph in phases:
        phase = m.phases[ph]
        failures = []
        for _seam, (impl, fn) in entries.items():
            why = smoke_impl(fn, impl, phase)
            if why:
                failures.append(why)
        if failures:
            results.append(QualifyResult(ph, False, None, None, failures=failures))
            continue
        rows_list = list(m.qualify.get("rows", {}).get(ph) or sorted({phase.rows[0], min(phase.rows[1], 512)}))
        host = build_host_block(factory, m.host_entry, ph, seed, entries)
        block = build_host_block(factory, m.host_entry, ph, seed, entries)
        # the route runs through the same guarded entries and ledger that serving uses
        plan = plan_for_route(lock, route_name, [ph], hw, loaded, {(seam, ph): fn for seam, (_, fn) in entries.items()})
        for seam in entries:
            block.bind(seam, plan.entry(seam, ph, host=block.host_seams[seam]))
        inputs = {r: host.make_inputs(r, seed=seed + r) for r in rows_list}
        for r, x in inputs.items():
            if not isinstance(x, torch.Tensor):
                raise UsageError(f"host-entry {m.host_entry!r}: make_inputs({r}, seed={seed + r}) returned a "
                                 f"{type(x).__name__}, not a tensor", hints=[HOST_HINT])
        clock = clock_for(hw.backend, next(iter(inputs.values())).device.type)
        say(f"  {ph}: parity over rows {rows_list}")
        with torch.inference_mode():
            ref = run_all(host, inputs)
            out = run_all(block, inputs)
            parity = output_parity(torch, out, ref, tol)
            null_check = all(torch.equal(ref[r], v) for r, v in run_all(host, inputs).items())
            # negative control: a perturbed impl on the first seam must fail the same gate
            first = sorted(entries)[0]
            good = block.seams[first]
            block.bind(first, lambda *a, _f=good: _f(*a) * (1 + 1e-2) + 1e-3)
            negative = not output_parity(torch, run_all(block, inputs), ref, tol)["pass"]
            block.bind(first, good)
            led = plan.ledger()["seams"]
            target_calls = {s: led[s]["phases"][ph]["calls"] for s in entries}
            fallbacks = sum(led[s]["phases"][ph]["fallbacks"] for s in entries)
            # detach restores host bit-exactly
            probe = build_host_block(factory, m.host_entry, ph, seed, entries)
            for seam, (_impl, fn) in entries.items():
                probe.bind(seam, fn)
            probe.detach()
            detach_ok = all(torch.equal(ref[r], v) for r, v in run_all(probe, inputs).items())
            say(f"  {ph}: timing {rounds} paired rounds (+{warmup} warm-up), more while the speedup is undecided")
            speedups: list[float] = []
            # both sides of every round run on the one block, its seams switched between the host's
            # callables and the route's: the same weights in the same memory, so nothing but the
            # seams differs (two block objects measured 2x apart for one run, ~1.0x the next)
            on_host = one_block_side(block, {s: block.host_seams[s] for s in entries})
            on_route = one_block_side(block, {s: block.seams[s] for s in entries})
            timing = device_timing(torch, on_host, on_route, inputs, clock=clock, l2_flush=l2_flush,
                                    rounds=rounds, warmup=warmup, gate=gate.min_speedup, max_rounds=max_rounds,
                                    speedups=speedups,
                                    tick=lambda i, n, ph=ph: emit({"event": "round", "phase": ph, "round": i, "rounds": n}))
        failures += band_failures(
            ph, parity=parity, null_check=null_check, negative=negative, detach_ok=detach_ok, exact_detach=True,
            parity_failure=(f"max-abs {parity['max-abs']:.3g} at rows {parity['worst-case']['rows']} "
                            f"(tolerance abs {tol['abs']:g}, rel {tol['rel']:g})"),
            fallbacks=fallbacks, calls=target_calls, host="the host")
        if failures:
            results.append(QualifyResult(ph, False, None, None, failures=failures, speedups=speedups))
            continue
        # the same rules `frt lock` applies to the recorded figures
        state, why = speed_verdict(timing, gate)
        if why and timing["speedup-median"] >= gate.min_speedup:
            say(f"  {ph}: {why}: supported_correct")
        receipt = make_receipt(
            m, route_name, hw, ph, impls={seam: impl for seam, (impl, _) in entries.items()}, packages=loaded,
            software={k: v for k, v in hw.software.items() if k in ("torch", "cuda", "rocm", "kernels")},
            inputs={"source": "synthetic", "seed": seed,
                    "note": f"seeded normal(0, 1) block inputs at rows {rows_list}; weights from host-entry seed {seed}"},
            state=state,
            evidence={"parity": parity, "target-calls": target_calls, "fallbacks": fallbacks, "timing": timing,
                      "null-check": null_check, "negative-control": negative, "detach-restores-host": detach_ok})
        results.append(QualifyResult(ph, True, state, receipt, speedups=speedups))
    return results


def _qualify_vllm(lock, route_name, *, phases, rounds, seed, root, progress, max_rounds) -> list[QualifyResult]:
    from ..project.discover import lock_root  # noqa: PLC0415
    from .vllm import qualify_vllm  # noqa: PLC0415

    m = lock.manifest
    gate = route_gate(m.routes[route_name])
    got = qualify_vllm(lock, route_name, phases=phases, rounds=rounds or int(m.qualify.get("rounds", 10)),
                       warmup=int(m.qualify.get("warmup", 1)), seed=seed,
                       root=root if root is not None else lock_root(lock), progress=progress,
                       max_rounds=max_rounds or m.qualify.get("max-rounds"), gate=gate)
    return [QualifyResult(ph, ok, state, receipt, failures=failures, speedups=sp)
            for ph, ok, state, receipt, failures, sp in got]


