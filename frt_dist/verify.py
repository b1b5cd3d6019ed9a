"""``frt verify``: check lockfiles (and a mirror) without trusting what they say.

Per lockfile: its digest and schema (``Lockfile.read``), every embedded receipt
re-validated against the embedded manifest and the pins; with a mirror, every
locked file of the selected variants present with its locked digest. The
result is one report (SPEC §8.8): ``{"ok", "lockfiles", "problems": [{"kind",
"path", "expected", "computed"}]}``. A lockfile that does not parse is bad
input (``LockfileError`` with exit 2), not a failed verification.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .errors import LockfileError, UsageError

__all__ = ["verify", "VerifyReport"]


@dataclass
class VerifyReport:
    lockfiles: list[str] = field(default_factory=list)
    problems: list[dict] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict:
        return {"ok": self.ok, "lockfiles": list(self.lockfiles), "problems": [dict(p) for p in self.problems]}


def verify(project, models: list[str] | None = None, *, mirror: str | Path | None = None,
           variants: list[str] | None = None, all_variants: bool = False) -> VerifyReport:
    """Verify the project's lockfiles (all, or those of ``models``)."""
    from .lockfile import Lockfile  # noqa: PLC0415

    models = list(models) if models else [p.stem for p in sorted(project.lockfiles_dir.glob("*.lock"))]
    if not models:
        raise UsageError(f"no lockfiles in {project.lockfiles_dir}", hints=["run `frt lock` first"])
    report = VerifyReport()
    for model in models:
        path = project.lockfile_path(model)
        label = project.rel(path)
        report.lockfiles.append(label)
        try:
            lock = Lockfile.read(path, label=label)
        except LockfileError as exc:
            if exc.exit_code == 2:
                raise  # does not parse: bad input, not a failed verification
            report.problems += [{"kind": r.get("kind", "lock-digest"), "path": r.get("path", label),
                                 "expected": r.get("expected"), "computed": r.get("computed"), "message": str(exc)}
                                for r in (exc.reasons or [{}])]
            continue
        for where, why in lock.receipt_problems():
            report.problems.append({"kind": "receipt", "path": where, "expected": "valid", "computed": why})
        if mirror is not None:
            from .mirror import verify_mirror  # noqa: PLC0415

            report.problems += verify_mirror(lock, Path(mirror), variants=variants, all_variants=all_variants)
    return report
