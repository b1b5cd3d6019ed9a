"""What ``frt mirror`` copies and ``frt verify --mirror`` checks: the variants a selection names
(``--variant``, ``--all-variants``, declared machines, ``--cells``), per package.

``machines=[Hardware, ...]`` (or one ``hardware``) takes, per package, the variants those machines
select (the machines you ship to); ``cells`` takes the machines of the lock's cells, as their
receipts record them. A machine that selects nothing is refused before anything is written.
Without any of these, ``verify_mirror`` checks the variants the mirror holds (a package it holds
none of is reported missing in full), so it never needs the running device.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import KernelUnavailable, UsageError
from ..system.variants import parse_variant, select_variants
from .sources import repo_folder

__all__ = ["select_for_mirror", "cell_machines", "machine_label"]


def cell_machines(lock) -> list:
    """The machine of every locked cell (a receipt the lock's index ranks): the backend, arch,
    device class and software its receipt records, and the CPU, OS and C++ ABI of the variants
    it measured (a variant name carries them; a noarch one leaves ``Hardware``'s defaults)."""
    from ..system.hardware import Hardware  # noqa: PLC0415

    out = {}
    for entry in lock.index.values():
        for cand in entry.candidates:
            rec = lock.receipts[cand.receipt]
            hw = rec.cell["hardware"]
            built = [v for v in (parse_variant(it["variant"] or "") for it in rec.cell["impls"].values())
                     if v is not None and v.cpu]
            cxx11 = next((v.cxx11 for v in built if v.cxx11 is not None), True)
            machine = Hardware(arch=hw["arch"], device_class=hw["device-class"], backend=hw["backend"],
                               cpu=built[0].cpu if built else "", os=built[0].os if built else "",
                               software=rec.software, cxx11_abi=cxx11)
            out.setdefault(machine.fingerprint, machine)
    return list(out.values())


def machine_label(hw) -> str:
    """A machine as a person declared it: ``h200 (cuda 9.0) torch=2.13,cuda=12.8``."""
    soft = ",".join(f"{k}={v}" for k, v in hw.software.items())
    return f"{hw.describe()}{' ' + soft if soft else ''}"


def select_for_mirror(lock, *, variants=None, all_variants: bool = False, hardware=None, machines=None,
                      cells: bool = False, mirror: Path | None = None) -> tuple[dict[str, list[str]], list[dict]]:
    """({repo: [variant, ...]}, skipped) for a selection (see the module docstring).

    ``machines`` (or one ``hardware``) takes, per package, the union of the variants each
    machine selects; ``cells`` takes the machines of the lock's cells (``cell_machines``).
    A machine that selects no variant of any package is a ``KernelUnavailable`` naming it
    and every package's variants: mirroring nothing for it would only fail later, offline."""
    given = [name for name, on in (("--variant", variants is not None), ("--all-variants", all_variants),
                                   ("declared machines (--arch/--machine)", bool(machines) or hardware is not None),
                                   ("--cells", cells)) if on]
    if len(given) > 1:
        raise UsageError(f"{', '.join(given[:-1])} and {given[-1]} exclude each other")
    if hardware is not None:
        machines = [hardware]
    if cells:
        machines = cell_machines(lock)
        if not machines:
            raise KernelUnavailable(f"--cells: the lock for model {lock.model!r} has no cells (no receipts), "
                                    "so no cell selects a variant",
                                    hints=["qualify a route (`frt qualify`) and `frt lock`, or declare the machines "
                                           "(--arch/--device-class or --machine)"])
    chosen, skipped = {}, []
    if variants is not None:
        names = list(dict.fromkeys(variants))
        known = {v for p in lock.packages.values() for v in p.variants}
        unknown = [v for v in names if v not in known]
        if unknown:
            raise UsageError(f"--variant: {', '.join(unknown)} is not a locked variant "
                             f"(locked: {', '.join(sorted(known))})")
    elif machines:
        return _select_machines(lock, machines)
    for repo, pkg in sorted(lock.packages.items()):
        if all_variants:
            chosen[repo] = sorted(pkg.variants)
        elif variants is not None:
            have = [v for v in names if v in pkg.variants]
            if have:
                chosen[repo] = have
            else:
                skipped.append({"repo": repo, "reason": f"none of the selected variants is locked for it "
                                                        f"(it has {', '.join(sorted(pkg.variants))})"})
        else:  # verify: what the mirror holds
            build = (mirror / repo_folder(repo) / "snapshots" / pkg.snapshot / "build") if mirror else None
            held = sorted(p.name for p in build.iterdir() if p.name in pkg.variants) if build and build.is_dir() else []
            chosen[repo] = held or sorted(pkg.variants)
    return chosen, skipped


def _select_machines(lock, machines) -> tuple[dict[str, list[str]], list[dict]]:
    chosen: dict[str, set] = {}
    skipped, empty = [], []
    for hw in machines:
        got = 0
        for repo, pkg in sorted(lock.packages.items()):
            choice = select_variants(pkg.variants, hw)
            if choice.selected:
                chosen.setdefault(repo, set()).add(choice.selected)
                got += 1
            elif (skip := {"repo": repo, "reason": f"no locked variant runs on {hw.describe()}"}) not in skipped:
                skipped.append(skip)
        if not got and lock.packages:
            empty.append(hw)
    if empty:
        has = "; ".join(f"{repo} has {', '.join(sorted(p.variants))}" for repo, p in sorted(lock.packages.items()))
        raise KernelUnavailable(
            f"mirror: model {lock.model!r} selects no locked variant for machine(s) "
            f"{'; '.join(machine_label(hw) for hw in empty)} ({has}); nothing would be mirrored for them",
            hints=["declare the machine's software too (e.g. --software torch=2.13,cuda=12.8, or "
                   "software=torch=2.13;cuda=12.8 in --machine), or name variants with --variant"])
    return {repo: sorted(vs) for repo, vs in sorted(chosen.items())}, skipped

