"""One family of errors.

Every error is a ``ValueError`` (on purpose: layers that record a refusal and go
on catch ``ValueError``) and carries structured ``reasons`` besides its message.
A reason is a plain dict so that it serialises to ``--json`` unchanged.

Every ``FrtError`` subclass is defined here, so ``from frt_dist.errors import X`` works for each
one; the module that raises it imports it from here. Library code never prints: what a user
should see without failing is an ``FrtWarning`` (``warnings.warn(message, FrtWarning)``), and the
command line decides how to show it (``warning: ...`` on stderr, never inside ``--json``).
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
    "LockFailed",
    "CoverageLoss",
    "NothingAccepted",
    "ReleaseError",
    "MirrorUnsafe",
    "MirrorUnwritable",
    "StoreAccess",
    "StoreUnavailable",
    "ObjectMissing",
    "SignatureRefused",
    "SigningUnavailable",
    "PackageDigestMismatch",
    "VerifiedStoreFull",
    "StoreUnusable",
    "FrtWarning",
]


class FrtWarning(UserWarning):
    """Something a user should know that does not stop the work (a dropped receipt, a deprecated
    spelling). ``frt`` prints it as ``warning: <message>``; a library user's ``warnings`` filters apply."""


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


# --- frt lock (raised in frt_dist/lock/build.py) -----------------------------

class LockFailed(KernelUnavailable):
    """Packages of one model that could not be locked (nothing written for the model).
    ``failures`` is ``[(repo, error)]``, every package that failed, in manifest order;
    ``reasons`` has one ``{"model", "package", "reason"}`` per failure."""

    def __init__(self, model: str, failures: list[tuple[str, FrtError]]):
        reasons = [{"model": model, "package": repo, "reason": _package_reason(repo, exc)} for repo, exc in failures]
        super().__init__(f"model {model!r}: " + "; ".join(f"{r['package']}: {r['reason']}" for r in reasons),
                         reasons=reasons, hints=list(dict.fromkeys(h for _, exc in failures for h in exc.hints)))
        self.model, self.failures = model, failures
        self.exit_code = max(exc.exit_code for _, exc in failures)


class CoverageLoss(FrtError):
    """The new lock of a model loses coverage the lock it replaces had (a route lost in a cell, or
    a state dropped to ``supported_correct``): nothing is written unless ``allow_loss``.
    ``result`` is the ``LockResult`` (its ``coverage`` the whole diff); ``reasons`` has one
    ``{"model", "kind", "cell", "route", "before", "after", "file", "reason"}`` per loss."""

    exit_code = 1

    def __init__(self, result, label: str, hints: list[str]):  # result: frt_dist.lock.build.LockResult
        losses = result.coverage.losses
        reasons = [{"model": result.model, **{k: v for k, v in c.to_dict().items()
                                               if k in ("kind", "cell", "route", "before", "after", "file", "reason")}}
                   for c in losses]
        n = result.coverage.counts()
        self.summary = (f"the new lock loses coverage ({n['lost']} lost, {n['dropped']} dropped to supported_correct); "
                        f"{label} is unchanged")
        super().__init__(f"model {result.model!r}: {self.summary}", reasons=reasons, hints=hints)
        self.model, self.result = result.model, result


class NothingAccepted(FrtError):
    """A model has receipts (its own or its release's) and the new lock accepts none of them: a lock
    that routes no cell, refused (nothing written) unless ``allow_loss`` (docs/reference.md#frt-lock).
    ``result`` is the ``LockResult``; ``reasons`` has one ``{"model", "kind": "rejected", "file",
    "digest", "route", "phase", "device-class", "reason"}`` per rejected receipt."""

    exit_code = 1

    def __init__(self, result, label: str, hints: list[str]):  # result: frt_dist.lock.build.LockResult
        rejected = result.lockfile.rejected
        reasons = [{"model": result.model, "kind": "rejected", "file": r.get("file"), "digest": r.get("digest"),
                    "route": r.get("route"), "phase": r.get("phase"), "device-class": r.get("device-class"),
                    "reason": r.get("reason")} for r in rejected]
        self.summary = (f"none of its {len(rejected)} receipt(s) is accepted: the lock would route no cell; "
                        f"{label} is {'unchanged' if result.path.exists() else 'not written'}")
        super().__init__(f"model {result.model!r}: {self.summary}", reasons=reasons, hints=hints)
        self.model, self.result = result.model, result


def _package_reason(repo: str, exc: FrtError) -> str:
    """The error's message without the ``package 'org/name'`` its line is already prefixed with."""
    msg = str(exc)
    head = f"package {repo!r}"
    return msg[len(head):].lstrip(": ") if msg.startswith(head) else msg


# --- Hub releases (raised in frt_dist/distribution/hub.py, release_files.py, frt_dist/release/) --------------------

class ReleaseError(FrtError):
    """A release that cannot be read or published (exit 1: a "no"; the Hub said no, or moved)."""


# --- mirrors (raised in frt_dist/distribution/mirror.py) ---------------------

class MirrorUnsafe(FrtError):
    """A folder inside the mirror is a symbolic link (or not a folder): refused, nothing followed."""

    exit_code = 2


class MirrorUnwritable(FrtError):
    """The mirror cannot be written: a full disk, a read-only or denied folder."""

    exit_code = 2


# --- object stores (raised in frt_dist/distribution/objstore.py) -------------

class StoreAccess(FrtError):
    """The store refused us or does not exist: no credentials, access denied, no such bucket,
    a malformed URL. Bad input (exit 2), with a hint."""

    exit_code = 2


class StoreUnavailable(FrtError):
    """The store did not answer well enough: timeouts or server errors that persisted through the
    bounded retries, or a connection refused (exit 1)."""

    exit_code = 1


class ObjectMissing(FrtError):
    """An object the caller needs is not in the store (exit 1). The caller adds which locked file
    it stands for."""

    exit_code = 1

    def __init__(self, message: str, *, key: str = "", **kw):
        super().__init__(message, **kw)
        self.key = key


# --- publisher signatures (raised in frt_dist/provenance/publisher.py) -------

class SignatureRefused(KernelUnavailable):
    """A publisher signature that is missing where required, does not verify, or names a signer
    the policy does not accept. ``facts`` is the signer found (a ``frt_dist.provenance.publisher.SignerFacts``;
    ``None`` when none could be read)."""

    def __init__(self, message: str, *, repo: str, variant: str, reason: str, facts=None,
                 hints=None):
        r = {"package": repo, "variant": variant, "reason": reason}
        if facts is not None:
            r["signer"] = facts.identity
            r["issuer"] = facts.issuer
        super().__init__(message, reasons=[r], hints=hints or [])
        self.facts = facts
        self.reason = reason


# --- receipt signatures (raised in frt_dist/provenance/signing.py) -----------

class SigningUnavailable(UsageError):
    """A signature or a policy is in use and ``cryptography``/``sigstore`` is not installed."""


# --- package metadata (raised in frt_dist/documents/metadata.py) -------------

class PackageDigestMismatch(KernelUnavailable):
    """A path package whose files are not the ones its variants' ``metadata.json`` digests name
    (a kernel edited after it was digested). ``variants`` is ``[(variant, [(relpath, expected,
    computed)])]``; the hint is the command that re-digests the package (``frt digest PATH``)."""

    def __init__(self, repo: str, label: str, variants: list[tuple[str, list]], *, fix: str):
        def one(rel, want, got):
            if want is None:
                return f"{rel} (not in metadata.json; computed {got})"
            if got is None:
                return f"{rel} (metadata.json has {want}; the file is missing)"
            return f"{rel} (expected {want}, computed {got})"

        parts = [f"{label}/build/{v}/metadata.json digests do not match the files: " + ", ".join(one(*m) for m in ms)
                 for v, ms in variants]
        super().__init__(
            f"package {repo!r}: " + "; ".join(parts),
            reasons=[{"package": repo, "variant": v, "path": f"{label}/build/{v}/{rel}", "expected": want,
                      "computed": got, "reason": "file digest does not match metadata.json"}
                     for v, ms in variants for rel, want, got in ms],
            hints=[f"the package changed since its digests were written; after reviewing the change, "
                   f"re-digest it with `{fix}` (rewrites the digests in each build/<variant>/metadata.json), "
                   "then run `frt lock`"])
        self.repo, self.variants, self.fix = repo, variants, fix


# --- loading through an object store (raised in frt_dist/loader/remote.py) ---

class VerifiedStoreFull(FrtError):
    """The verified store's file system has no room (or quota) for what the lock names: bad input for
    this machine (exit 2), naming the store; the partial entry is removed, nothing is imported. Not a
    fault of the object store, so no republish would help."""

    exit_code = 2


# --- the verified store (raised in frt_dist/loader/store.py) -----------------

class StoreUnusable(FrtError):
    """The verified store cannot be used (wrong owner, writable by others, not a directory, I/O)."""
