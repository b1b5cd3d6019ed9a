"""A refusal an operator sees: frt's ``error:`` and ``hint:`` lines last, with hints that fit an engine.

When frt stops an engine's start-up, the process that refused logs frt's lines through vLLM's
logger, and vLLM then prints its own tracebacks: the worker's, the engine core's, then the API
server's ``Engine core initialization failed``. So the first process of the engine (the one
that made the ledger dir: ``vllm serve``, ``python -m vllm.entrypoints.openai.api_server``, or a
program running ``vllm.LLM`` in-process) prints the refusal once more at its exit, on stderr,
after Python printed the traceback: a refusal in that process is kept in memory; one in a
process vLLM started (engine core, worker) is written to ``refusal-<pid>.txt`` in the ledger
dir, which the first process reads, prints and removes. Only that process prints; a refusal
several workers made alike is printed once; a caller that reports the refusal itself
(``frt qualify``, through ``plugin.last_error()``) takes it, and nothing is printed for it.

Hints fit the cause inside an engine, where there are no flags to pass: a model the project
does not have lists the models it has; a release receipt rejected for want of a policy names
``frt release trust``; a state the engine does not accept names ``FRT_ACCEPT``; nothing
suggests ``--demo``, ``--project`` or ``frt init``.
"""

from __future__ import annotations

import os
import re
import stat
import sys
import time
import weakref

from ... import settings
from ...errors import FrtError

__all__ = ["arm", "record", "take", "engine_hints"]

_printer = None  # the pid of the process that prints at exit (0: another process does)
_armed_at = 0.0
_here: list[list[str]] = []  # refusals made in this process, as lines
_taken = False


def arm() -> None:
    """From ``register()``: in the first of the engine's processes, print at exit the refusals
    made in it and in the processes it started. Once per process."""
    global _printer, _armed_at
    if _printer is not None:
        return
    import multiprocessing  # noqa: PLC0415

    from .metrics import AT_EXIT, ledger_dir  # noqa: PLC0415

    given = settings.value("FRT_LEDGER_DIR")
    ledger_dir()  # made here when not given: the processes vLLM starts inherit it
    if given is None or multiprocessing.parent_process() is None:
        _printer, _armed_at = os.getpid(), time.time()
        # Finalizers run at exit in reverse order of creation, inside one atexit handler that plain
        # handlers registered later precede. vLLM shuts its process managers down from finalizers it
        # makes after this (vllm/v1/utils.py, APIServerProcessManager: "[shutdown] ... send sigterm"
        # lines), so a finalizer made now prints after them; the ledger dir's removal, made before
        # (ledger_dir), comes after it.
        weakref.finalize(AT_EXIT, _at_exit)
    else:
        _printer = 0


def record(lines: list[str]) -> None:
    """A refusal (its lines as printed) made in this process."""
    if _printer in (None, os.getpid()):
        _here.append(list(lines))
        return
    if not settings.value("FRT_LEDGER_DIR"):
        return
    from .metrics import open_ledger_dir, write_new  # noqa: PLC0415

    try:
        with open_ledger_dir() as folder:  # refused where another user can write: then only logged
            write_new(folder, f"refusal-{os.getpid()}.txt", ("\n".join(lines) + "\n").encode())
    except (OSError, FrtError):
        pass  # the dir went away (the first process has exited, nothing is left to print after), or is not safe


def take() -> None:
    """The caller reports this process's refusal itself: do not print it at exit."""
    global _taken
    _taken = True


def _at_exit() -> None:
    if _printer != os.getpid():
        return  # a forked child: its parent prints
    blocks = [] if _taken else list(_here)
    if settings.value("FRT_LEDGER_DIR"):
        blocks += _refusals_written()
    seen, lines = set(), []
    for block in blocks:
        key = tuple(block)
        if block and key not in seen:
            seen.add(key)
            lines.extend(block)
    if not lines:
        return
    try:
        sys.stdout.flush()  # what vLLM logged comes first
    except (OSError, ValueError):
        pass
    try:
        sys.stderr.write("\n".join(lines) + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def _refusals_written() -> list[list[str]]:
    """The refusals the engine's other processes wrote (``refusal-<pid>.txt``), each file removed
    once read; not one an earlier server left in a folder given to it, nor one that is not a
    regular file of this user's (``metrics.read_file``: a FIFO there does not hang the exit)."""
    from .metrics import open_ledger_dir, read_file  # noqa: PLC0415

    out = []
    try:
        folder = open_ledger_dir()
    except (OSError, FrtError):
        return out
    with folder:
        try:
            names = folder.listdir()
        except OSError:
            return out
        for name in names:
            if not _REFUSAL_NAME.fullmatch(name):
                continue
            st = folder.lstat(name)
            if st is None or not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
                continue  # not one an engine process of this user's wrote
            if st.st_mtime >= _armed_at - 1:  # not one an earlier server left in a folder given to it
                data, _why = read_file(folder, name, limit=1 << 16)
                if data is not None:
                    out.append(data.decode("utf-8", "replace").splitlines())
            try:
                folder.unlink(name)
            except OSError:
                pass
    return out


_REFUSAL_NAME = re.compile(r"refusal-\d{1,10}\.txt")

# -- hints ----------------------------------------------------------------------

_FLAGS = ("--demo", "--project", "frt init")  # the command line's answers: an engine takes none of them


def engine_hints(exc, lock=None) -> list[str]:
    """The hints of ``exc`` (an ``FrtError`` that stops an engine's start-up) as they fit a vLLM
    engine configured by its environment. ``lock``: the lockfile the engine read, if it got so far."""
    from ...errors import NoProject, RouteRefused  # noqa: PLC0415

    model = settings.value("FRT_MODEL") or ""
    given = list(getattr(exc, "hints", None) or [])
    hints = [h for h in given if not any(f in h for f in _FLAGS)]
    if isinstance(exc, NoProject) or len(hints) < len(given):
        hints.append(f"set FRT_PROJECT to the project's folder (or FRT_LOCK to the model's lockfile) in vLLM's "
                     f"environment; without them each vLLM process looks for a project upward from its working "
                     f"folder ({os.getcwd()})")
    missing = _not_in_project(model)
    if missing is not None:
        project, models = missing
        hints = [f"FRT_MODEL: {project.describe()} has no model {model!r}; its models: "
                 f"{', '.join(models) or 'none'} (set FRT_MODEL to one of them, or FRT_PROJECT to the project that "
                 f"has {model!r})"]
    if isinstance(exc, RouteRefused):
        # the resolver's hints name load()'s arguments (fallback=, accept); an engine's policy is its environment
        hints = [h for h in hints if "fallback=" not in h] + _refusal_hints(exc, model, lock)
        if not any("FRT_FALLBACK" in h for h in hints):
            hints.append("set FRT_FALLBACK=host to start on vLLM's own ops in those bands")
    return list(dict.fromkeys(hints))


def _not_in_project(model: str):
    """(project, its models) when ``model`` is neither a manifest nor a lockfile of the project
    the engine found; None when it is, or when the engine reads a lockfile named by FRT_LOCK."""
    from ...errors import FrtError  # noqa: PLC0415
    from ...project.discover import Project  # noqa: PLC0415

    if not model or settings.value("FRT_LOCK"):
        return None
    try:
        project = Project.find(explicit=settings.value("FRT_PROJECT"))
        models = project.models()
        if model in models or project.lockfile_path(model).exists():
            return None
    except (FrtError, OSError):
        return None
    return project, models


def _refusal_hints(exc, model: str, lock) -> list[str]:
    """What to do about the resolver's reasons, by their kind (``routes.resolver.REASON_KINDS``)."""
    from ...documents.lock_release import NO_POLICY  # noqa: PLC0415

    reasons = [r for r in (getattr(exc, "reasons", None) or []) if isinstance(r, dict)]
    kinds = {r.get("kind") for r in reasons} - {None}
    out = []
    untrusted = {(r.get("route"), r.get("phase")) for r in reasons
                 if r.get("kind") == "receipt-rejected" and _for_want_of_policy(r, lock, NO_POLICY)}
    if untrusted:
        out.append("the lock rejected the release's receipts for want of a policy naming their signers: review "
                   f"them, then run `frt release trust --model {model}` and `frt lock` in the project, and restart "
                   "vLLM")
        if all(r.get("kind") != "receipt-rejected" or (r.get("route"), r.get("phase")) in untrusted for r in reasons):
            kinds.discard("receipt-rejected")
    if "state-below-accept" in kinds:
        out.append(f"FRT_ACCEPT is {settings.value('FRT_ACCEPT')}: set FRT_ACCEPT=certified_fast,supported_correct to "
                   "serve routes qualified supported_correct too")
    if kinds - {"state-below-accept", "outranked"}:
        out.append(f"qualify the route on this machine (`frt qualify --model {model} --route ROUTE`), then `frt "
                   "lock`, and restart vLLM")
    return out


def _for_want_of_policy(reason: dict, lock, no_policy: str) -> bool:
    if lock is not None:
        return any(r.get("reason") == no_policy and r.get("route") == reason.get("route")
                   and r.get("phase") == reason.get("phase") for r in getattr(lock, "rejected", None) or ())
    return no_policy in str(reason.get("reason", ""))
