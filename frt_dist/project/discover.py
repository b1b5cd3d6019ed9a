"""Where a project keeps ``manifests/``, ``receipts/`` and ``lockfiles/`` (docs/reference.md#operators-rules).

In order: ``--project DIR`` (``explicit=``), else ``FRT_PROJECT``, else the
nearest project at or above the current directory (a folder whose
``pyproject.toml`` has ``[tool.frt]``, or that holds ``manifests/``, or a
**node**: a folder holding ``lockfiles/`` and no ``manifests/``; searched
upward, like git and uv; the root of a frt-dist checkout is its own project,
read-write), else ``FRT_HOME``, else the folder of the lockfile ``FRT_LOCK``
names. Nowhere is ``NoProject`` (exit 2, ``no frt project here``): the bundled
demo project (``bundled_root``, read-only) is used only when asked for
(``--demo``, ``Project.find(demo=True)``).
"""

from __future__ import annotations

import functools
import importlib
import importlib.machinery
import os
import re
import sys
from pathlib import Path

from .. import settings as env
from ..base import names
from ..base.record import dataclass, field
from ..documents.schema import parse_toml
from ..errors import FrtError, NoProject, UsageError

__all__ = ["Project", "bundled_root", "import_entry", "lock_root", "no_project", "env_lockfile"]


@functools.cache
def bundled_root() -> Path:
    """The bundled demo project (read-only), resolved once.

    In the repository it is the repository's own project: the top-level
    ``manifests/``, ``lockfiles/``, ``receipts/`` and ``packages/`` beside
    ``frt_dist/`` (a checkout or an editable install). An installed wheel
    carries the same folders as ``frt_dist/_bundled/`` (the build maps them
    there; ``pyproject.toml``'s wheel ``sources``), so git holds one copy.
    """
    pkg = Path(__file__).resolve().parent.parent  # frt_dist/, this file being frt_dist/project/discover.py
    installed = pkg / "_bundled"
    if installed.is_dir():
        return installed
    return pkg.parent


@dataclass(frozen=True)
class Project:
    """Where manifests, receipts, lockfiles and the mirror live, and which kind of root it is."""

    root: Path
    kind: str  # "project" | "node" | "frt-home" | "bundled"
    settings: dict = field(default_factory=dict)

    @property
    def read_only(self) -> bool:
        return self.kind == "bundled"

    @property
    def is_node(self) -> bool:
        """A node: ``lockfiles/`` and no ``manifests/``. It resolves, loads, mirrors from a store,
        verifies and renders the matrix from its lockfiles; it does not lock or qualify."""
        return self.kind == "node" or (self.kind == "frt-home" and _node_dirs(self.root, self.settings))

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
            return str(m)  # an object-store URL (docs/reference.md#object-stores), taken as written
        return str((self.root / m).resolve()) if m else None

    def rel(self, path: Path) -> str:
        """A project-relative posix path (what goes into lockfiles and messages)."""
        try:
            return Path(path).resolve().relative_to(self.root.resolve()).as_posix()
        except ValueError:
            return str(path)

    def models(self) -> list[str]:
        """The project's models: its manifests; on a node, its lockfiles."""
        if self.is_node:
            return sorted(p.stem for p in self.lockfiles_dir.glob("*.lock"))
        d = self.manifests_dir
        return sorted(p.stem for p in d.glob("*.toml")) if d.is_dir() else []

    def need_manifests(self, command: str) -> None:
        """``frt lock`` and ``frt qualify`` read manifests: on a node they are a usage error that says so."""
        if self.is_node:
            raise UsageError(f"frt {command} needs the project's manifests: {self.root} is a node "
                             f"({self.rel(self.lockfiles_dir)}/ and no {self.rel(self.manifests_dir)}/)",
                             hints=[f"run `frt {command}` in the project that holds manifests/ (or pass --project DIR), "
                                    "then bring its lockfiles/ here",
                                    "on a node: frt resolve, frt mirror DIR --from URL, frt verify --mirror DIR, "
                                    "frt matrix and frt_dist.load work from the lockfiles"])

    def manifest_path(self, model: str) -> Path:
        p = self.manifests_dir / f"{names.check('name', model, 'model', UsageError)}.toml"
        if not p.is_file():
            raise UsageError(f"unknown model {model!r} in {self.describe()} (models: {', '.join(self.models()) or 'none'})")
        return p

    def lockfile_path(self, model: str) -> Path:
        return self.lockfiles_dir / f"{names.check('name', model, 'model', UsageError)}.lock"

    def existing_lockfile(self, model: str) -> Path:
        """``lockfiles/<model>.lock`` for a command that reads it. A missing one is a "no" (exit 1,
        docs/reference.md#exit-codes, as ``frt lock --check`` has it) whose hint is the command that writes it; a model
        with no manifest either is a usage error naming the models there are."""
        path = self.lockfile_path(model)
        if not path.exists():  # something else there (a FIFO, a folder) is the reader's to refuse, naming it
            if self.manifests_dir.is_dir():
                self.manifest_path(model)
            hint = (f"copy lockfiles/{model}.lock here from the project that locks it" if self.is_node
                    else f"frt lock --model {model}")
            raise FrtError(f"no lockfile for model {model!r} ({self.rel(path)})", hints=[hint])
        return path

    def describe(self) -> str:
        label = {"project": "project", "node": "node", "frt-home": "FRT_HOME", "bundled": "bundled defaults"}[self.kind]
        return f"{label} {self.root}"

    @classmethod
    def demo(cls) -> Project:
        """The bundled demo project, read-only: only when asked for (``frt --demo``)."""
        return cls(bundled_root(), "bundled", {})

    @classmethod
    def find(cls, start: str | os.PathLike | None = None, *, explicit: str | os.PathLike | None = None,
             demo: bool = False, lockfile: str | os.PathLike | None = None, python: bool = False) -> Project:
        """The project in force (the module's docstring says the order). ``lockfile``: a lockfile named
        by the caller (``load(lockfile=)``), which, like ``FRT_LOCK``, stands for a project when none is
        found. ``python``: ``NoProject``'s hints name ``load``'s arguments instead of the flags."""
        if demo:
            if explicit is not None:
                raise UsageError(f"--demo and --project {explicit} each name the project; give one")
            return cls.demo()
        source = "--project"
        if explicit is None and env.value("FRT_PROJECT"):
            explicit, source = env.value("FRT_PROJECT"), "FRT_PROJECT"
        if explicit is not None:
            root = Path(explicit).resolve()
            if not root.is_dir():
                raise UsageError(f"{source}: {root} is not a directory",
                                 hints=["`frt init DIR` creates a project there"])
            settings = _settings(root)
            return cls(root, _kind(root, settings), settings)
        here = Path(start or os.getcwd()).resolve()
        found = _project_above(here)
        if found is not None:
            return found
        home = env.value("FRT_HOME")
        if home:
            return cls(Path(home).resolve(), "frt-home", _settings(Path(home)) or {})
        given = lockfile if lockfile is not None else env.value("FRT_LOCK")
        if given:  # a lockfile named outside any project: the folder it lives in (its project or node)
            lock = Path(given).resolve()
            found = _project_above(lock.parent)
            if found is not None:
                return found
            return cls(lock.parent, _kind(lock.parent, {}), {})
        raise no_project(here, python=python)


def env_lockfile() -> tuple[str, str] | None:
    """The lockfile ``FRT_LOCK`` names, and how its path was taken (for messages), or None when unset.
    A relative ``FRT_LOCK`` is taken against ``FRT_PROJECT`` when that is set (the two name one
    deployment, as a service's environment does: ``FRT_PROJECT=/srv/p FRT_LOCK=lockfiles/m.lock``),
    else against the current folder (docs/reference.md#environment)."""
    given = env.value("FRT_LOCK")
    if not given:
        return None
    proj = env.value("FRT_PROJECT")
    if proj and not os.path.isabs(os.path.expanduser(given)):
        return os.path.join(proj, given), f"FRT_LOCK={given}, relative to FRT_PROJECT={proj}"
    how = "FRT_LOCK" if os.path.isabs(os.path.expanduser(given)) else \
        f"FRT_LOCK={given}, relative to the current folder {os.getcwd()}"
    return os.path.expanduser(given), how


def no_project(here: Path, *, python: bool = False) -> NoProject:
    """``no frt project here``, with what to do about it (the flags, or ``load``'s arguments)."""
    if python:
        hints = ["`frt init` creates a project here (manifests/, receipts/, lockfiles/)",
                 "or name one: project=DIR (or FRT_PROJECT=DIR); a lockfile alone: lockfile=PATH (or FRT_LOCK)",
                 "the bundled demo: project=frt_dist.project.discover.bundled_root()"]
    else:
        hints = ["`frt init` creates a project here (manifests/, receipts/, lockfiles/)",
                 "or name one: --project DIR (or FRT_PROJECT=DIR); a folder holding only lockfiles/ is a node",
                 "the bundled demo project (read-only): --demo"]
    return NoProject(f"no frt project here ({here}: no manifests/, lockfiles/ or pyproject.toml with [tool.frt] "
                     "in it or in a folder above it)", hints=hints)


def _project_above(here: Path) -> Project | None:
    """The nearest project or node at or above ``here``, like git and uv."""
    bundled = bundled_root()
    for d in (here, *here.parents):
        settings = _settings(d)
        if (d / "manifests").is_dir() or ((d / "pyproject.toml").is_file() and _has_tool_frt(d)):
            if d == bundled and d.name == "_bundled":  # inside an installed wheel's demo: read-only
                return Project.demo()
            settings = settings or {}  # a frt-dist checkout's root is its own project, read-write
            return Project(d, _kind(d, settings), settings)
        if (d / "lockfiles").is_dir():  # lockfiles/ and no manifests/: a node
            return Project(d, "node", {})
    return None


def _node_dirs(root: Path, settings: dict) -> bool:
    return (not (root / settings.get("manifests", "manifests")).is_dir()
            and (root / settings.get("lockfiles", "lockfiles")).is_dir())


def _kind(root: Path, settings: dict) -> str:
    return "node" if _node_dirs(root, settings) else "project"


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
    lockfile holding ``manifests/``, a ``pyproject.toml`` with ``[tool.frt]``, or
    ``lockfiles/`` (a node), else the lockfile's own folder.
    Found once per lockfile object (kept in its ``cache.roots``). It lives here, not in
    the loader (which re-exports it), so `frt resolve` finds the root without
    importing the loader."""
    hit = lock.cache.roots.get(lock.path)
    if hit is not None:
        return hit
    root = None
    if lock.path:
        p = Path(lock.path).resolve()
        b = bundled_root()
        if p.is_relative_to(b):
            root = b
        else:
            found = _project_above(p.parent)
            root = found.root if found is not None else p.parent
    if root is None:  # a lockfile made in memory: the project in force, else here
        try:
            root = Project.find().root
        except NoProject:
            root = Path(os.getcwd()).resolve()
    lock.cache.roots[lock.path] = root
    return root
