"""Output of every command: text or one JSON document, errors as ``error:``/``hint:`` lines, progress bars."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from ..errors import FrtError, UsageError


def show_warnings(args) -> None:
    """Every ``FrtWarning`` library code raises while the command runs is printed as
    ``warning: <message>`` on stderr, each time (never inside ``--json`` stdout); ``--quiet``
    without ``--json`` silences them, as it silences everything but errors."""
    import warnings  # noqa: PLC0415

    from ..errors import FrtWarning  # noqa: PLC0415

    quiet = getattr(args, "quiet", False) and not getattr(args, "json", False)
    warnings.simplefilter("ignore" if quiet else "always", FrtWarning)
    shown = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, FrtWarning):
            print(f"warning: {message}", file=sys.stderr)
        else:
            shown(message, category, filename, lineno, file, line)

    warnings.showwarning = show


DEPRECATED: list[str] = []  # the old spellings this run used, said when it ends (``say_deprecated``)


def deprecated(old: str, new: str) -> None:
    """An old spelling that still works: noted now, said on stderr when the command ends without
    an error (after its output, so the lines a script reads stay where they were; never in
    ``--json`` stdout)."""
    line = f"warning: '{old}' is deprecated and will be removed in the next release; use '{new}'"
    if line not in DEPRECATED:
        DEPRECATED.append(line)


def say_deprecated() -> None:
    for line in DEPRECATED:
        print(line, file=sys.stderr)
    DEPRECATED.clear()


def print_json(doc: dict) -> None:
    print(json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False))


def _project_doc(args) -> dict | None:
    """``{"root", "kind", "bundled"}`` of the project a command used, for its ``--json`` document."""
    project = getattr(args, "frt_project", None)
    if project is None:
        return None
    return {"root": str(project.root), "kind": project.kind, "bundled": project.read_only}


def emit(args, doc: dict, text: str) -> None:
    if args.json:
        where = _project_doc(args)
        if where is not None and "project" not in doc:  # a command's own "project" key stays (`frt init`)
            doc = {**doc, "project": where}
        print(json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False))
    elif not args.quiet and text:
        print(text)


class _NoBar:
    def update(self, n=1):
        pass

    def set_postfix_str(self, s):
        pass

    def close(self):
        pass


def progress_bar(args, **kw):
    """A ``huggingface_hub`` tqdm on stderr for long work: off under ``--quiet``/``--json``,
    when stderr is not a terminal (checked first, so nothing is imported then), and
    when ``HF_HUB_DISABLE_PROGRESS_BARS`` is set (huggingface_hub's own switch)."""
    if args.quiet or args.json or not sys.stderr.isatty():
        return _NoBar()
    from huggingface_hub.utils import tqdm  # noqa: PLC0415

    return tqdm(file=sys.stderr, leave=False, dynamic_ncols=True, **kw)


def write_output(out: Path, data: bytes) -> None:
    """``-o FILE``, whole or not at all: a temp file beside FILE renamed over it, removed on any
    failure (``write_atomic``). A failure names FILE, not the temp file: ``error: -o FILE: cannot
    be written: <cause>`` (exit 2), FILE as it was before."""
    from ..documents.lock_writer import write_atomic  # noqa: PLC0415

    try:
        write_atomic(out, data)
    except OSError as exc:
        cause = exc.strerror or str(exc) or type(exc).__name__
        raise UsageError(f"-o {out}: cannot be written: {cause}", hints=os_error(exc).hints,
                       reasons=[{"path": str(out), "reason": cause}]) from None


def interrupted() -> int:
    """A Ctrl-C, at start-up or in a command: one line on stderr, exit 130 (nothing was written)."""
    print("error: interrupted; nothing was written", file=sys.stderr)
    return 130


def report(args, exc: FrtError) -> int:
    """The error (and its hints) as ``error:``/``hint:`` lines, or under ``--json`` as one JSON
    document; the exit code. An error is said alone: no deprecation note follows it."""
    DEPRECATED.clear()
    if getattr(args, "json", False):  # docs/reference.md#json-output: under --json every outcome is JSON, errors included
        print_json({"error": str(exc), "hints": exc.hints, "exit": exc.exit_code, "reasons": exc.reasons})
        return exc.exit_code
    print(f"error: {exc}", file=sys.stderr)
    for h in exc.hints:
        print(f"hint: {h}", file=sys.stderr)
    return exc.exit_code


_OS_HINTS = {
    "ENOSPC": "free space on that file system (or write somewhere else), then run the command again",
    "EDQUOT": "free space within your quota (or write somewhere else), then run the command again",
    "EROFS": "the file system is mounted read-only: run where you can write, or pass --project DIR / -o FILE there",
    "EACCES": "you may not write there: check the folder's owner and permissions, or write somewhere else",
    "EPERM": "you may not write there: check the folder's owner and permissions, or write somewhere else",
}


def os_error(exc: OSError, command: str | None = None) -> FrtError:
    """The last resort for an ``OSError`` no command reported itself: ``<path>: <cause>``, exit 2 for
    a place that cannot be written (full, read-only, denied), else exit 1, with a hint for the common causes."""
    import errno  # noqa: PLC0415

    path = _written_file(exc.filename) if exc.filename is not None else None
    cause = exc.strerror or str(exc) or type(exc).__name__
    where = f"{path}: " if path is not None else f"frt {command}: " if command else ""
    if exc.filename2 is not None:
        where = f"{path} -> {exc.filename2}: "
    name = errno.errorcode.get(exc.errno or 0, "")
    hints = [_OS_HINTS[name]] if name in _OS_HINTS else []
    # a place that cannot be written is exit 2, as every command that reports it itself says (README);
    # anything else the machine refused (an I/O error) is a "no", exit 1
    kind = UsageError if name in _UNWRITABLE else FrtError
    return kind(f"{where}{cause}", hints=hints, reasons=[{"path": None if path is None else str(path),
                                                          "errno": name or None, "reason": cause}])


_UNWRITABLE = frozenset({"ENOSPC", "EDQUOT", "EROFS", "EACCES", "EPERM", "EFBIG", "ENOTDIR", "EISDIR"})


def _written_file(name):
    """The file being written when ``name`` is ``write_atomic``'s temp file beside it
    (``.<file>.<random>.tmp``, removed again by then): the error names the destination."""
    import re  # noqa: PLC0415

    p = Path(os.fsdecode(name)) if isinstance(name, (str, bytes, os.PathLike)) else None
    m = re.fullmatch(r"\.(.+)\.[A-Za-z0-9_]{8}\.tmp", p.name) if p is not None else None
    return str(p.with_name(m.group(1))) if m else name
