"""Where a project keeps ``manifests/``, ``receipts/`` and ``lockfiles/`` (SPEC §4).

In order: the nearest project at or above the current directory (a folder
whose ``pyproject.toml`` has ``[tool.frt]``, or that holds ``manifests/``:
searched upward, like git and uv; inside a checkout of frt-dist itself that is
the bundled demo, read-only), else
``FRT_HOME``, else the bundled demo project (read-only; ``bundled_root``).
"""

from __future__ import annotations

import functools
import importlib
import importlib.machinery
import os
import re
import sys
from pathlib import Path

from . import names
from ._record import dataclass, field
from ._schema import parse_toml
from .errors import FrtError, UsageError

__all__ = ["Project", "bundled_root", "import_entry", "lock_root"]


@functools.cache
def bundled_root() -> Path:
    """The bundled demo project (read-only), resolved once.

    In the repository it is the repository's own project: the top-level
    ``manifests/``, ``lockfiles/``, ``receipts/`` and ``packages/`` beside
    ``frt_dist/`` (a checkout or an editable install). An installed wheel
    carries the same folders as ``frt_dist/_bundled/`` (the build maps them
    there; ``pyproject.toml``'s wheel ``sources``), so git holds one copy.
    """
    pkg = Path(__file__).resolve().parent
    installed = pkg / "_bundled"
    if installed.is_dir():
        return installed
    return pkg.parent


@dataclass(frozen=True)
class Project:
    """Where manifests, receipts, lockfiles and the mirror live, and which kind of root it is."""

    root: Path
    kind: str  # "project" | "frt-home" | "bundled"
    settings: dict = field(default_factory=dict)

    @property
    def read_only(self) -> bool:
        return self.kind == "bundled"

    @property
    def manifests_dir(self) -> Path:
        return self.root / self.settings.get("manifests", "manifests")

    @property
    def receipts_dir(self) -> Path:
        return self.root / self.settings.get("receipts", "receipts")

    @property
    def lockfiles_dir(self) -> Path:
        return self.root / self.settings.get("lockfiles", "lockfiles")

    @property
    def mirror(self) -> str | None:
        m = self.settings.get("mirror")
        if m and re.match(r"^[A-Za-z][A-Za-z0-9+.\-]*://", str(m)):
            return str(m)  # an object-store URL (SPEC §25), taken as written
        return str((self.root / m).resolve()) if m else None

    def rel(self, path: Path) -> str:
        """A project-relative posix path (what goes into lockfiles and messages)."""
        try:
            return Path(path).resolve().relative_to(self.root.resolve()).as_posix()
        except ValueError:
            return str(path)

    def models(self) -> list[str]:
        d = self.manifests_dir
        return sorted(p.stem for p in d.glob("*.toml")) if d.is_dir() else []

    def manifest_path(self, model: str) -> Path:
        p = self.manifests_dir / f"{names.check('name', model, 'model', UsageError)}.toml"
        if not p.is_file():
            raise UsageError(f"unknown model {model!r} in {self.describe()} (models: {', '.join(self.models()) or 'none'})")
        return p

    def lockfile_path(self, model: str) -> Path:
        return self.lockfiles_dir / f"{names.check('name', model, 'model', UsageError)}.lock"

    def existing_lockfile(self, model: str) -> Path:
        """``lockfiles/<model>.lock`` for a command that reads it. A missing one is a "no" (exit 1,
        SPEC §4, as ``frt lock --check`` has it) whose hint is the command that writes it; a model
        with no manifest either is a usage error naming the models there are."""
        path = self.lockfile_path(model)
        if not path.exists():  # something else there (a FIFO, a folder) is the reader's to refuse, naming it
            if self.manifests_dir.is_dir():
                self.manifest_path(model)
            raise FrtError(f"no lockfile for model {model!r} ({self.rel(path)})", hints=[f"frt lock --model {model}"])
        return path

    def describe(self) -> str:
        label = {"project": "project", "frt-home": "FRT_HOME", "bundled": "bundled defaults"}[self.kind]
        return f"{label} {self.root}"

    @classmethod
    def find(cls, start: str | os.PathLike | None = None, *, explicit: str | os.PathLike | None = None) -> "Project":
        if explicit is not None:
            root = Path(explicit).resolve()
            if not root.is_dir():
                raise UsageError(f"--project: {root} is not a directory")
            return cls(root, "project", _settings(root))
        here = Path(start or os.getcwd()).resolve()
        bundled = bundled_root()
        for d in (here, *here.parents):  # upward, like git and uv: the nearest project wins
            settings = _settings(d)
            tool = settings is not None and (d / "pyproject.toml").is_file() and _has_tool_frt(d)
            if tool or (d / "manifests").is_dir():
                if d == bundled:  # inside a checkout of frt-dist itself: its demo project, read-only
                    return cls(d, "bundled", {})
                return cls(d, "project", settings or {})
        home = os.environ.get("FRT_HOME")
        if home:
            return cls(Path(home).resolve(), "frt-home", _settings(Path(home)) or {})
        return cls(bundled_root(), "bundled", {})


def _has_tool_frt(d: Path) -> bool:
    try:
        return "frt" in parse_toml((d / "pyproject.toml").read_bytes(), UsageError, "pyproject.toml").get("tool", {})
    except (OSError, UsageError):
        return False


def _settings(d: Path) -> dict | None:
    pp = d / "pyproject.toml"
    if not pp.is_file():
        return {}
    try:
        raw = pp.read_bytes()
    except OSError as exc:
        raise UsageError(f"{pp}: cannot be read: {exc.strerror}") from None
    data = parse_toml(raw, UsageError, str(pp))
    return dict(data.get("tool", {}).get("frt", {}))


def import_entry(spec: str, root: str | os.PathLike | None, *, field: str = "host-entry"):
    """The object ``spec`` (``"module:attr"``) names, its module found from the project ``root``
    first, without ``PYTHONPATH`` and without putting ``root`` on ``sys.path``.

    Only the module's top-level name is looked up in ``root`` (``root/<name>.py`` or the package
    ``root/<name>/``); submodules then come from that package's own folder, so a host package
    imports its helpers relatively (``from .blocks import ...``). Nothing else in the project
    becomes importable, so no file there can shadow an installed module for any other import. A
    top-level name that is both in ``root`` and installed (or in the standard library, or already
    imported from elsewhere) is refused rather than guessed: the error names both files. A name
    not in ``root`` is imported as usual (an installed module, e.g. ``frt_dist.demo.decoder``)."""
    mod, _, attr = spec.partition(":")
    top = mod.partition(".")[0]
    local = _local_spec(top, Path(root)) if root is not None else None
    if local is not None:
        elsewhere = _elsewhere(top, Path(root))
        if elsewhere is not None and _same_file(elsewhere, local.origin):
            elsewhere = None  # the same file reached another way (an editable install, cwd on sys.path)
        if elsewhere is not None:
            raise UsageError(f"{field} {spec!r}: module {top!r} is both in the project ({local.origin}) and "
                             f"installed ({elsewhere}); frt will not guess which one is meant",
                             hints=[f"rename the project's {top!r} (e.g. {top}_host) and the {field} with it"])
        if top not in sys.modules:
            from importlib.util import module_from_spec  # noqa: PLC0415 - only for a project-local host entry

            module = module_from_spec(local)
            sys.modules[top] = module
            try:
                local.loader.exec_module(module)
            except BaseException:
                sys.modules.pop(top, None)
                raise
    return getattr(importlib.import_module(mod), attr)


def _local_spec(top: str, root: Path):
    """The spec of ``root/<top>.py`` or the regular package ``root/<top>/`` (not a bare folder:
    ``manifests/`` or ``packages/`` are not modules)."""
    if not top.isidentifier():
        return None
    spec = importlib.machinery.PathFinder.find_spec(top, [str(root)])
    if spec is None or not spec.origin or not spec.has_location or spec.loader is None:
        return None
    return spec


def _elsewhere(top: str, root: Path) -> str | None:
    """Where ``top`` comes from without the project root: an imported module's file, a builtin or
    standard-library name, or a module found on ``sys.path`` outside ``root``."""
    loaded = sys.modules.get(top)
    if loaded is not None:
        return getattr(loaded, "__file__", None) or f"<{top}, already imported>"
    if top in sys.builtin_module_names or top in getattr(sys, "stdlib_module_names", ()):
        return f"<the standard library's {top}>"
    here = root.resolve()
    paths = [p for p in sys.path if _resolved(p) != here]
    spec = importlib.machinery.PathFinder.find_spec(top, paths)
    if spec is None:
        return None
    return spec.origin or (list(spec.submodule_search_locations or []) or [f"<{top}>"])[0]


def _resolved(p: str) -> Path:
    try:
        return Path(p or os.getcwd()).resolve()
    except OSError:
        return Path(p)


def _same_file(a: str, b: str | None) -> bool:
    try:
        return b is not None and os.path.samefile(a, b)
    except OSError:
        return False


def lock_root(lock) -> Path:
    """The project root a lockfile's ``path`` packages are relative to: the
    bundled root for the bundled lock, else the nearest folder above the
    lockfile holding ``manifests/`` or a ``pyproject.toml`` with ``[tool.frt]``.
    Found once per lockfile object (kept in its ``memo``). It lives here, not in
    the loader (which re-exports it), so `frt resolve` finds the root without
    importing the loader."""
    key = ("lock-root", lock.path)
    hit = lock.memo.get(key)
    if hit is not None:
        return hit
    root = None
    if lock.path:
        p = Path(lock.path).resolve()
        b = bundled_root()
        if p.is_relative_to(b):
            root = b
        else:
            root = next((d for d in p.parents if (d / "manifests").is_dir() or _has_tool_frt(d)), None)
    if root is None:
        root = Project.find().root
    lock.memo[key] = root
    return root
