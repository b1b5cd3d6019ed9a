"""One validator for every name that can reach the filesystem (docs/reference.md#names).

Repo ids, variant names, file paths inside a variant, and model, phase, route,
seam, impl, precision and device-class names come from documents (manifests,
receipts, lockfiles, ``metadata.json``) and from arguments. Each is checked
here, where it is read, before it is joined to any path: a name is plain ASCII
(no look-alike letters, no direction overrides), has no separator, no ``..``,
no NUL or control character, no trailing dot or space, is not a Windows device
name, and is short. A relative file path is such components joined by ``/``.

``problem(kind, value)`` says what is wrong (``None`` when the name is safe);
``check(kind, value, field, error)`` raises ``error`` naming the field.
"""

from __future__ import annotations

import re

__all__ = ["KINDS", "problem", "check", "MAX_NAME", "MAX_PATH"]

MAX_NAME = 128  # characters of one name (a path component is at most 255 bytes on common filesystems)
MAX_PATH = 1024  # characters of a relative file path

# one path component: ASCII letters, digits, '_', '-', '.', '+'; a letter, digit or '_' first
_COMPONENT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*")
# a name frt itself gives meaning to (model, phase, route, seam, impl, precision, device class)
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
# one part of a Hub repo id (the Hub's own rule: no '--' or '..', no '-' or '.' at either end)
_REPO_PART = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?")
_WINDOWS_DEVICES = {"con", "prn", "aux", "nul", *(f"com{i}" for i in range(1, 10)), *(f"lpt{i}" for i in range(1, 10))}

KINDS = ("name", "repo", "variant", "path")


def _component(value: str, rx: re.Pattern, limit: int = MAX_NAME) -> str | None:
    if not value:
        return "is empty"
    if len(value) > limit:
        return f"is {len(value)} characters long (at most {limit})"
    if not value.isascii():
        return "has a character outside ASCII letters, digits and _ . - +"
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        return "has a control character"
    if value in (".", ".."):
        return f"is {value!r}"
    if "/" in value or "\\" in value:
        return "has a path separator"
    if ".." in value:
        return "has '..'"
    if value.endswith((".", " ")):
        return "ends with a dot or a space"
    if value.split(".", 1)[0].lower() in _WINDOWS_DEVICES:
        return "is a Windows device name"
    if not rx.fullmatch(value):
        return "has a character outside ASCII letters, digits and _ . - +" if rx is _COMPONENT else \
            "must start with a letter or digit and hold only letters, digits, _ . -"
    return None


def problem(kind: str, value) -> str | None:
    """What is wrong with ``value`` as a name of ``kind`` (one of ``KINDS``), or ``None``."""
    if not isinstance(value, str):
        return f"expected a string, got {type(value).__name__}"
    if kind == "name":
        return _component(value, _NAME)
    if kind == "variant":
        return _component(value, _COMPONENT)
    if kind == "repo":
        if value.count("/") != 1:
            return "is not a repo id: a repo id is 'org/name'"
        for part in value.split("/"):
            why = _component(part, _REPO_PART, 96)
            if why:
                return f"part {part!r} {why}"
            if "--" in part:
                return f"part {part!r} has '--'"
        return None
    if kind == "path":
        if not value:
            return "is empty"
        if len(value) > MAX_PATH:
            return f"is {len(value)} characters long (at most {MAX_PATH})"
        if value.startswith("/") or re.match(r"[A-Za-z]:", value):
            return "is absolute"
        for part in value.split("/"):
            why = _component(part, _COMPONENT, 255)
            if why:
                return f"component {part!r} {why}" if part else "has an empty component"
        return None
    raise ValueError(f"unknown name kind {kind!r}")


def check(kind: str, value, field: str, error, *, file: str | None = None) -> str:
    """``value`` when it is a safe name of ``kind``; else raise ``error`` (an ``FrtError``
    class) naming ``file`` and ``field``. Exit code 2: a bad name is bad input."""
    why = problem(kind, value)
    if why is None:
        return value
    where = f"{file}: {field}" if file else field
    shown = repr(value) if not isinstance(value, str) or len(value) <= 80 else repr(value[:77] + "...")
    raise error(f"{where}: {shown} {why}", reasons=[{"file": file or "", "field": field, "reason": why}])
