"""One family of errors.

Every error is a ``ValueError`` (on purpose: layers that record a refusal and go
on catch ``ValueError``) and carries structured ``reasons`` besides its message.
A reason is a plain dict so that it serialises to ``--json`` unchanged.
"""

from __future__ import annotations

__all__ = [
    "FrtError",
    "UsageError",
    "NoProject",
    "ManifestError",
    "LockfileError",
    "ReceiptInvalid",
    "HubError",
    "KernelUnavailable",
    "RouteRefused",
    "ContractViolation",
]


class FrtError(ValueError):
    """Base of every frt-dist error.

    ``exit_code`` is what the command line returns for it (docs/reference.md#exit-codes): 1 for a
    "no" (refusal, stale, failed verification), 2 for bad invocation or input.
    ``hints`` are next steps printed as ``hint:`` lines.
    """

    exit_code = 1

    def __init__(self, message: str, *, reasons: list[dict] | None = None, hints: list[str] | None = None):
        super().__init__(message)
        self.message = message
        self.reasons: list[dict] = list(reasons or [])
        self.hints: list[str] = list(hints or [])

    def __str__(self) -> str:
        return self.message


class UsageError(FrtError):
    """Bad invocation: an unknown model, phase, precision or flag value."""

    exit_code = 2


class NoProject(UsageError):
    """No project where a command or ``load`` ran: no ``manifests/``, ``lockfiles/`` or ``[tool.frt]``
    at or above the folder, and none named (``--project``, ``FRT_PROJECT``, ``FRT_HOME``, ``FRT_LOCK``).
    The bundled demo is never used in its place."""


class ManifestError(FrtError):
    """A manifest that does not parse or breaks the format; names file and field."""

    exit_code = 2


class LockfileError(FrtError):
    """A lockfile that does not parse (exit 2) or does not verify (exit 1)."""

    exit_code = 2

    def __init__(self, message: str, *, exit_code: int | None = None, **kw):
        super().__init__(message, **kw)
        if exit_code is not None:
            self.exit_code = exit_code


class ReceiptInvalid(FrtError):
    """A receipt missing a field, or whose evidence does not support its state."""

    exit_code = 2


class HubError(FrtError):
    """The Hub (or mirror endpoint) could not answer: 404, 5xx, timeout."""

    exit_code = 1


class KernelUnavailable(FrtError):
    """A package is not here: not published, not mirrored, no variant, arch not
    declared, digest mismatch, smoke failed."""

    exit_code = 1


class RouteRefused(FrtError):
    """No qualified route for the cell under the caller's policy."""

    exit_code = 1


class ContractViolation(FrtError):
    """A guarded call whose arguments fall outside the impl's contract."""

    exit_code = 1
