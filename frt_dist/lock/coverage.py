"""What a new lock does to a model's coverage, compared with the lock it replaces.

``coverage_diff(old, new)`` compares two lockfiles of one model route by route in every cell of
their route indexes (a cell is ``phase/precision/backend/arch/device-class``; a route's state
in a cell is its best candidate's) and returns a ``CoverageDiff``: one ``CellChange`` per

- **lost**: a route the old lock ranked in a cell that the new one does not;
- **dropped**: a route whose state in a cell falls from ``certified_fast`` to ``supported_correct``;
- **gained**: a route the new lock ranks in a cell that the old one did not;
- **changed**: the same route and state resting on another receipt, a state raised to
  ``certified_fast``, or another route ranked first in the cell.

A loss (lost or dropped) names what became of the receipt the old lock rested on, read from
the new lock alone: rejected (with its rejection), its file rewritten (rejected, or holding
another receipt), or its file gone. ``frt lock`` refuses to write a lock with a loss unless
``--allow-loss`` (``locker.lock_model``); ``frt lock --check`` reports the same diff. The
function is pure (two lockfiles in, the diff out), so any command that replaces a lock can
report it the same way.
"""

from __future__ import annotations

from ..base.canonical import short_digest
from ..base.record import dataclass
from ..documents.receipt import STATES, CellKey, cell_name

__all__ = ["CellChange", "CoverageDiff", "coverage_diff", "KINDS", "LOSS_KINDS"]

KINDS = ("lost", "dropped", "changed", "gained")
"""The kinds of change, in the order a report lists them (losses first)."""
LOSS_KINDS = ("lost", "dropped")


@dataclass(frozen=True)
class CellChange:
    """One route of one cell whose coverage the new lock changes.

    ``before``/``after``: the route's state in the cell in the old/new lock (``None``: not
    ranked there). ``receipt``/``file``: the receipt the change is about (a loss: the one the old
    lock rested on; otherwise the new lock's). ``cause`` is the kind of ``reason``:
    ``rejected``, ``rewritten`` (the file now holds another receipt), ``missing`` (the file is
    gone), ``new``, ``receipt`` (another receipt, same state), ``raised`` or ``winner``."""

    kind: str
    cell: CellKey
    route: str
    before: str | None
    after: str | None
    receipt: str | None
    file: str | None
    cause: str
    reason: str

    @property
    def is_loss(self) -> bool:
        return self.kind in LOSS_KINDS

    def line(self, *, reason: bool = True) -> str:
        """One line: ``lost     decode/fp32/cuda/9.0/h200  route fast (certified_fast): <reason>`` (without
        ``reason``: the receipt's file in its place, where an error line elsewhere gives the reason)."""
        if self.kind == "dropped":
            state = f"{self.before} -> {self.after}"
        else:
            state = self.before if self.kind == "lost" else self.after
        tail = self.reason if reason else f"{self.file or short_digest(self.receipt)} {self.cause} (error below)"
        return f"{self.kind:<8} {cell_name(self.cell)}  route {self.route} ({state}): {tail}"

    def to_dict(self) -> dict:
        return {"kind": self.kind, "cell": cell_name(self.cell), **self.cell.as_dict(), "route": self.route,
                "before": self.before, "after": self.after, "receipt": self.receipt, "file": self.file,
                "cause": self.cause, "reason": self.reason}


@dataclass(frozen=True)
class CoverageDiff:
    """Every ``CellChange`` of a new lock against the one it replaces (``first``: there was none,
    so nothing can be lost, and the cells, all new, are not listed)."""

    changes: tuple
    first: bool = False

    @property
    def losses(self) -> list[CellChange]:
        return [c for c in self.changes if c.is_loss]

    def of(self, kind: str) -> list[CellChange]:
        return [c for c in self.changes if c.kind == kind]

    def counts(self) -> dict[str, int]:
        return {k: len(self.of(k)) for k in KINDS}

    def summary(self) -> str:
        """``1 lost, 1 dropped, 0 changed, 2 gained`` (routes in cells)."""
        n = self.counts()
        return ", ".join(f"{n[k]} {k}" for k in KINDS)

    def lines(self, *, limit: int | None = None, kinds=KINDS, loss_reasons: bool = True) -> list[str]:
        """One line per change of ``kinds``, losses first; past ``limit`` per kind, one line saying
        how many more (``--json`` lists them all). ``loss_reasons`` False: a loss's line names its
        receipt, not the reason (a refused lock's error lines give each reason once)."""
        out = []
        for k in kinds:
            items = self.of(k)
            shown = items if limit is None else items[:limit]
            out += [c.line(reason=loss_reasons or not c.is_loss) for c in shown]
            if len(items) > len(shown):
                out.append(f"{k:<8} ... and {len(items) - len(shown)} more (--json lists every one)")
        return out

    def to_dict(self) -> dict:
        return {"first-lock": self.first, "counts": self.counts(), "changes": [c.to_dict() for c in self.changes]}


def _routes(entry) -> dict[str, tuple]:
    """route -> (state, receipt digest, speedup) of its best candidate in one index entry."""
    out: dict[str, tuple] = {}
    for c in entry.candidates:  # ranked: a route's first candidate is its best
        if c.route not in out:
            out[c.route] = (c.state, c.receipt, c.speedup)
    return out


class _Fates:
    """What became of a receipt of the old lock, read from the new lock."""

    def __init__(self, old, new):
        self.old, self.new = old, new
        self.rejected = {r.get("digest"): r for r in new.rejected}
        self.rejected_files = {r.get("file"): r for r in new.rejected}
        self._new_files = None

    def file_of(self, digest: str) -> str | None:
        rec = self.old.receipts.get(digest) if digest in self.old.receipts else None
        return rec.file if rec is not None else None

    def new_files(self) -> dict[str, object]:
        if self._new_files is None:
            self._new_files = {r.file: r for r in self.new.receipts.values()}
        return self._new_files

    def of(self, digest: str, file: str | None, key: CellKey | None = None, route: str | None = None) -> tuple[str, str]:
        """(cause, reason) for the old lock's receipt ``digest`` filed as ``file`` (a receipt of
        ``route`` on cell ``key``: a rewritten file still about them is not named again)."""
        shown = file or f"receipt {short_digest(digest)}"
        rj = self.rejected.get(digest)
        if rj is not None:
            return "rejected", f"{rj.get('file') or shown} is rejected: {rj.get('reason')}"
        if file is not None and file in self.rejected_files:
            rj = self.rejected_files[file]
            return "rejected", (f"{file} was rewritten since the last lock (now {short_digest(rj.get('digest'))}) "
                                f"and is rejected: {rj.get('reason')}")
        if file is not None and file in self.new_files():
            now = self.new_files()[file]
            what = (f"a {now.state} receipt" if (now.key, now.route) == (key, route)
                    else f"{now.route} {now.state} on {cell_name(now.key)}")
            return "rewritten", (f"{file} was rewritten since the last lock: it now holds {what} "
                                 f"({short_digest(now.digest)})")
        if digest in self.new.receipts:
            return "rewritten", f"{shown} is still accepted, but on another cell"
        return "missing", f"{shown} is no longer among the receipts (removed or renamed since the last lock)"


def coverage_diff(old, new) -> CoverageDiff:
    """The coverage ``new`` (a ``Lockfile``) gains, loses and changes against ``old`` (the lock it
    replaces; ``None``: a first lock, which lists no change). Pure: reads the two route indexes, ``new``'s rejected
    receipts and the two locks' receipt file names."""
    if old is None:  # nothing to lose, and every cell is new: not listed one by one
        return CoverageDiff((), first=True)
    fates = _Fates(old, new)
    changes = []
    for key in sorted(set(old.index) | set(new.index)):
        a = _routes(old.index[key]) if key in old.index else {}
        b = _routes(new.index[key]) if key in new.index else {}
        for route in sorted(set(a) | set(b)):
            was, now = a.get(route), b.get(route)
            if now is None:
                file = fates.file_of(was[1])
                cause, why = fates.of(was[1], file, key, route)
                changes.append(CellChange("lost", key, route, was[0], None, was[1], file, cause, why))
            elif was is None:
                file = _file(new, now[1])
                changes.append(CellChange("gained", key, route, None, now[0], now[1], file, "new",
                                          f"new in this lock ({file or short_digest(now[1])})"))
            elif STATES.index(now[0]) > STATES.index(was[0]):
                file = fates.file_of(was[1])
                cause, why = fates.of(was[1], file, key, route)
                best = _file(new, now[1])
                if best != file:
                    why += f"; its best receipt now is {best or short_digest(now[1])} ({now[0]})"
                changes.append(CellChange("dropped", key, route, was[0], now[0], was[1], file, cause, why))
            elif now[0] != was[0]:
                file = _file(new, now[1])
                changes.append(CellChange("changed", key, route, was[0], now[0], now[1], file, "raised",
                                          f"raised to {now[0]} by {file or short_digest(now[1])}"))
            elif now[1] != was[1]:
                file = _file(new, now[1])
                changes.append(CellChange("changed", key, route, was[0], now[0], now[1], file, "receipt",
                                          f"now rests on {file or short_digest(now[1])} ({short_digest(now[1])}, "
                                          f"speedup {_x(was[2])} -> {_x(now[2])}), not "
                                          f"{fates.file_of(was[1]) or short_digest(was[1])} ({short_digest(was[1])})"))
        if a and b:
            win_a, win_b = old.index[key].candidates[0], new.index[key].candidates[0]
            if win_a.route != win_b.route and win_a.route in b:  # (a lost winner is reported as lost)
                changes.append(CellChange("changed", key, win_b.route, a.get(win_b.route, (None,))[0], win_b.state,
                                          win_b.receipt,
                                          _file(new, win_b.receipt), "winner",
                                          f"now ranked first in the cell (was {win_a.route})"))
    order = {k: i for i, k in enumerate(KINDS)}
    changes.sort(key=lambda c: (order[c.kind], c.cell, c.route, c.cause))
    return CoverageDiff(tuple(changes))


def _file(lock, digest: str) -> str | None:
    rec = lock.receipts.get(digest) if digest in lock.receipts else None
    return rec.file if rec is not None else None


def _x(speedup) -> str:
    return f"{speedup:g}x" if isinstance(speedup, (int, float)) and not isinstance(speedup, bool) else "?"
