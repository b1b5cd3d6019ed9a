"""Serving: ``load(model)`` → ``Plan`` (docs/reference.md#python-api, #loading-and-guard).

``load`` is decision, then supply, then bind; it never measures:

1. find the lockfile in force (``lockfile=``, ``FRT_LOCK``, the project's
   ``lockfiles/<model>.lock``, the bundled one) and read it (digests verified);
2. resolve every phase band (``frt_dist.routes.resolver.resolve_all``); any refusal
   raises one ``RouteRefused`` with every reason, before anything is downloaded
   or imported;
3. load each package the chosen routes use, at the variant each decision names,
   through the one shared loader (``frt_dist.loader.load_locked``);
4. for every bound impl and band: the required ``entry`` must exist, optional
   ``probes`` are recorded as offered / not offered, and one bind-time smoke call
   must pass (``frt_dist.loader.smoke``). Every failure of steps 3–4 is gathered into
   one ``KernelUnavailable``.

The ``Plan`` (``plan``) hands out guarded callables per (seam, phase band)
(``guard``) and counts what they see (``ledger``, exposed by ``prometheus``).
"""

from __future__ import annotations

import os
import warnings

from ..errors import FrtWarning, KernelUnavailable, LockfileError, UsageError
from ..system.hardware import Hardware
from .ledger import CAPTURED, NOT_OBSERVED
from .plan import Binding, Plan

__all__ = ["CAPTURED", "NOT_OBSERVED", "Plan", "find_lockfile", "load"]


# ---------------------------------------------------------------------------
# finding the lockfile


def _project(project, lockfile=None):
    """The project ``load`` uses: ``project=`` (a ``Project`` or a folder), else found as the CLI
    finds it (``FRT_PROJECT``, upward, ``FRT_HOME``, the lockfile named); none is ``NoProject``,
    never the bundled demo."""
    from ..documents.lockfile import Lockfile  # noqa: PLC0415
    from ..project.discover import Project  # noqa: PLC0415

    if isinstance(project, Project):
        return project
    if project is not None:
        return Project.find(explicit=project)
    named = (lockfile if isinstance(lockfile, (str, os.PathLike)) else
             lockfile.path if isinstance(lockfile, Lockfile) else None)
    return Project.find(lockfile=named, python=True)


def find_lockfile(model: str, lockfile=None, project=None):
    """(Lockfile, project root for its path packages), in this order: ``lockfile=``,
    ``FRT_LOCK``, the project's ``lockfiles/<model>.lock``."""
    from ..documents.lockfile import Lockfile  # noqa: PLC0415
    from ..project.discover import env_lockfile, lock_root  # noqa: PLC0415

    proj = _project(project, lockfile)
    if isinstance(lockfile, Lockfile):
        lock = lockfile
        root = lock_root(lock) if lock.path else proj.root
    else:
        path = lockfile
        if path is None and (named := env_lockfile()) is not None:  # relative: against FRT_PROJECT when set
            path, how = named
            if not os.path.isfile(path):
                raise LockfileError(f"no lockfile at {path} ({how})", exit_code=1,
                                    hints=["name an existing lockfile in FRT_LOCK, or unset it to use the project's"])
        if path is None:
            path = proj.lockfile_path(model)
            if not path.is_file():
                hint = (f"copy lockfiles/{model}.lock here from the project that locks it" if proj.is_node
                        else f"run `frt lock --model {model}` in the project")
                raise LockfileError(f"no lockfile for model {model!r} (looked in {path}; {proj.describe()})",
                                    exit_code=1, hints=[hint])
        lock = Lockfile.read(path)
        root = lock_root(lock)
    if lock.model != model:
        raise UsageError(f"lockfile {lock.path or '(in memory)'} is for model {lock.model!r}, not {model!r}")
    return lock, root


# ---------------------------------------------------------------------------
# binds: which impl serves which seam in which band


def _binds(lock, decisions) -> list[Binding]:
    m = lock.manifest
    out = []
    for phase, d in decisions.items():
        if d.decision != "route":
            continue
        for seam, name in sorted(m.routes[d.route].seams.items()):
            impl = m.impl(seam, name)
            out.append(Binding(seam, phase, impl, impl.package, d.variants[impl.package]))
    return out


def _supply(lock, binds, *, mirror, hardware, allow_pins, root, project) -> tuple[dict, list[dict]]:
    """Check every package the binds use, then import them only if all passed:
    (repo → LoadedPackage, reasons of those that failed)."""
    from ..loader.core import CheckBatch, Ready, prepare_locked  # noqa: PLC0415
    from ..loader.remote import fetch_deadline  # noqa: PLC0415

    ready, reasons = {}, []
    batch = CheckBatch()  # nothing is imported until every package is checked
    with fetch_deadline(mirror):  # an object store: FRT_STORE_DEADLINE bounds all the load's fetches together
        for repo, variant in sorted({(b.repo, b.variant) for b in binds}):
            try:
                ready[repo] = prepare_locked(lock, repo, variant, mirror=mirror, hardware=hardware,
                                             allow_pins=allow_pins, root=root, project=project, batch=batch)
            except KernelUnavailable as exc:
                reasons.extend(exc.reasons)
    if reasons:
        return {}, reasons
    packages = {}
    for repo, got in ready.items():
        try:
            packages[repo] = got.load() if isinstance(got, Ready) else got
        except KernelUnavailable as exc:
            reasons.extend(exc.reasons)
    return packages, reasons


def _check_binds(lock, binds, packages) -> tuple[dict, dict, list[dict]]:
    """Entry symbols, probes and smoke for every bind whose package loaded."""
    from ..loader.core import record_unavailable  # noqa: PLC0415
    from ..loader.smoke import smoke_impl  # noqa: PLC0415

    fns, probes, reasons = {}, {}, []
    cache: dict = {}  # smoke inputs shared by the binds of this load (weights materialised once)
    for b in binds:
        pkg = packages.get(b.repo)
        if pkg is None:
            continue
        facts = {"package": b.repo, "revision": pkg.revision, "seam": b.seam, "phase": b.phase, "impl": b.impl.name}
        if b.impl.layer is not None:  # a layer impl (vLLM binding): the host smokes it on its own op
            from .kernelize import package_layer  # noqa: PLC0415

            layer, why = package_layer(pkg.module, b.impl.layer)
            if why:
                reasons.append({**facts, "kind": "entry", "reason": f"package {b.repo} revision {pkg.revision} {why}"})
                record_unavailable(b.repo, KernelUnavailable(reasons[-1]["reason"], reasons=[reasons[-1]]),
                                   version=pkg.version, revision=pkg.revision, variant=pkg.variant)
                continue
            fns[(b.seam, b.phase)] = layer
            continue
        fn = getattr(pkg.module, b.impl.entry, None)
        if not callable(fn):
            why = f"package {b.repo} revision {pkg.revision} does not export the entry {b.impl.entry!r}"
            reasons.append({**facts, "kind": "entry", "reason": why})
            record_unavailable(b.repo, KernelUnavailable(why, reasons=[reasons[-1]]), version=pkg.version,
                               revision=pkg.revision, variant=pkg.variant)
            continue
        probes[(b.seam, b.phase)] = {p: ("offered" if pkg.offers(p) else "not offered") for p in b.impl.probes}
        why = smoke_impl(fn, b.impl, lock.manifest.phases[b.phase], cache=cache)
        if why:
            reasons.append({**facts, "kind": "smoke", "reason": why})
            record_unavailable(b.repo, KernelUnavailable(why, reasons=[reasons[-1]]), version=pkg.version,
                               revision=pkg.revision, variant=pkg.variant)
            continue
        fns[(b.seam, b.phase)] = fn
    return fns, probes, reasons


def load(model: str, *, precision: str | None = None, fallback: str = "refuse", accept=("certified_fast",),
         lockfile=None, mirror=None, hardware: Hardware | None = None, allow_pins: bool = False,
         project=None) -> Plan:
    """Resolve, supply and bind ``model`` for this (or the declared) hardware
    (docs/reference.md#loading-and-guard)."""
    from ..distribution.sources import mirror_location  # noqa: PLC0415
    from ..routes.resolver import refusal_error, resolve_all  # noqa: PLC0415

    proj = _project(project, lockfile)
    lock, root = find_lockfile(model, lockfile, proj)
    from ..lock.freshness import manifest_drift  # noqa: PLC0415

    stale = manifest_drift(lock, root)
    if stale:  # the lock is what was reviewed: say once that the manifest moved on (docs/reference.md#freshness)
        warnings.warn(stale, FrtWarning, stacklevel=2)
    hw = hardware or Hardware.detect()
    decisions = resolve_all(lock, hardware=hw, precision=precision, fallback=fallback, accept=accept)
    refused = refusal_error(model, decisions)
    if refused is not None:
        raise refused
    binds = _binds(lock, decisions)
    mdir = mirror_location(mirror, proj)
    packages, reasons = _supply(lock, binds, mirror=mdir, hardware=hw, allow_pins=allow_pins, root=root,
                                project=proj)
    fns, probes, more = _check_binds(lock, binds, packages)
    reasons += more
    if reasons:
        raise KernelUnavailable(
            f"model {model!r}: {len(reasons)} problem(s) supplying the chosen routes; nothing was bound:\n  "
            + "\n  ".join(r["reason"] for r in reasons[:40]), reasons=reasons,
            hints=[f"republish the objects named from a machine holding the verified files (`frt mirror {mdir} "
                   "--repair`); nothing unverified was used"] if isinstance(mdir, str) else
                  ["`frt verify --mirror DIR` names damaged files; "
                   + ("`frt mirror DIR --from URL` refills them from the fleet's store" if proj.is_node
                      else "`frt mirror DIR` refills them")])
    plan = Plan(lock, hw, decisions, fallback, packages, binds, fns, probes)
    if stale:
        plan.notes.append(stale)
    return plan


def plan_for_route(lock, route: str, phases, hardware: Hardware, packages: dict, fns: dict) -> Plan:
    """A ``Plan`` that binds ``route`` in ``phases`` without a decision from receipts.

    For the qualification door only (``frt qualify`` measures a route before any
    receipt exists): the same guarded entries and ledger serving uses, with
    ``fallback="host"`` so a contract miss is counted as a fallback, never hidden.
    """
    from ..routes.resolver import Decision  # noqa: PLC0415

    m = lock.manifest
    rt = m.routes[route]
    variants = {repo: packages[repo].variant for repo in m.route_packages(route)}
    revisions = {repo: packages[repo].revision for repo in variants}
    decisions = {ph: Decision(ph, "route", route, "unknown", None, (), variants, revisions) for ph in phases}
    binds = [Binding(seam, ph, m.impl(seam, name), m.impl(seam, name).package, variants[m.impl(seam, name).package])
             for ph in phases for seam, name in sorted(rt.seams.items())]
    return Plan(lock, hardware, decisions, "host", packages, binds, dict(fns), {})
