"""Import a package from its verified store entry, and from nothing else (docs/reference.md#verified-store).

A meta-path finder, first on ``sys.meta_path``, answers for each registered
import id and every name below it, and maps those names to the files of one
store entry (``frt_dist.loader.store``), in the order ``FileFinder`` would use
(a package folder's ``__init__``, then an extension module, then a ``.py``
module, then a folder as a package without code) but only among the files the
lock declares. No name under a registered id falls through to the path-based
finders, so nothing outside the entry is ever looked at.

- ``.py`` modules: ``VerifiedSourceLoader`` reads the source bytes from the
  entry, hashes them against the locked digest, and compiles those bytes. It
  never reads a bytecode cache (there is none in an entry, and it never asks
  for one) and never writes one.
- extension modules: ``VerifiedExtensionLoader`` opens the entry's file once.
  While its seal holds on an ``fstat`` of that descriptor (the entry record's
  fingerprint, a regular file owned by the user, writable by nobody, one link:
  ``frt_dist.loader.store.seal_holds``), the dynamic loader maps that very
  descriptor (``/proc/self/fd/<n>``) and no byte is read: a warm load of a
  256 MB library costs what `kernels`' does. Otherwise, and for every extension
  module under ``FRT_STORE_REHASH=1``, it reads the file once, hashes those bytes
  against the locked digest, copies them into a sealed anonymous file
  (``memfd_create``, sealed against writes, on Linux) and has the dynamic loader
  map that file; a file swapped in an entry, with the record rewritten to match,
  is then refused with the same error as a ``.py``. ``__file__`` is the entry's
  path either way. Where no sealed copy can be made (no ``memfd_create``, or a
  system that refuses to execute one), the open file that was hashed is what is
  mapped (``/proc/self/fd/<n>`` of that descriptor; off Linux, its path, and
  there is no sealed path: every extension module is hashed).

The top-level module is created and registered the way `kernels`
(``kernels.importer._import_from_path``) does it: named by the metadata ``id``,
``__file__`` the package's ``__init__.py``, ``__path__`` its folder,
``sys.modules[id]`` set before its code runs and removed (with everything
under it) when the code raises.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import importlib.machinery
import importlib.util
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from .store import seal_holds

__all__ = ["VerifiedSourceLoader", "VerifiedFinder", "import_verified", "forget", "package_dir", "FINDER"]


def _check(data: bytes, digest: str, algorithm: str, fullname: str, path: str, verb: str) -> None:
    """Refuse ``data`` (the bytes about to be compiled or mapped) unless they carry the lock's digest."""
    got = base64.b64encode(hashlib.new(algorithm, data).digest()).decode("ascii")
    if got != digest:
        raise ImportError(f"{path}: bytes in the verified store do not match the lock "
                          f"(expected {digest}, computed {got}); not {verb}", name=fullname, path=path)


class VerifiedSourceLoader(importlib.machinery.SourceFileLoader):
    """Compiles the verified source bytes of ``path``; no bytecode is read or written."""

    def __init__(self, fullname: str, path: str, digest: str, algorithm: str):
        super().__init__(fullname, path)
        self.digest = digest
        self.algorithm = algorithm

    def get_code(self, fullname):
        data = self.get_data(self.path)
        _check(data, self.digest, self.algorithm, fullname, self.path, "compiled")
        return self.source_to_code(data, self.path)

    def path_stats(self, path):  # no bytecode cache: whoever asks learns there is none
        raise OSError("frt's verified loader keeps no bytecode cache")

    def set_data(self, path, data, *, _mode=0o666):  # never writes bytecode
        return None


_PROC_FD = os.path.isdir("/proc/self/fd")  # a descriptor can be mapped by a path naming it (Linux)
_KEPT_FDS: list[int] = []  # the files extension modules were mapped from, open for the process's life:
# a path /proc/self/fd/<n> is never reused for another module (CPython caches extensions by path and name)
_MFD_EXEC = 0x0010  # Linux >= 6.3: ask for an executable memfd where vm.memfd_noexec would seal it otherwise
_SEALS = ("F_SEAL_SEAL", "F_SEAL_SHRINK", "F_SEAL_GROW", "F_SEAL_WRITE")


def _sealed_copy(data: bytes) -> int | None:
    """A memfd holding ``data``, sealed so nobody can change it, that can be mapped executable; None where not."""
    create = getattr(os, "memfd_create", None)
    if create is None or not _PROC_FD:
        return None
    import fcntl  # noqa: PLC0415 - POSIX only, like memfd_create
    import mmap  # noqa: PLC0415

    flags = os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING
    fd = None
    for extra in (_MFD_EXEC, 0):  # an older kernel refuses the flag it does not know
        try:
            fd = create("frt-verified-extension", flags | extra)
            break
        except OSError:
            continue
    if fd is None:
        return None
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        seals = 0
        for name in _SEALS:
            seals |= getattr(fcntl, name)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
        # the dynamic loader maps it executable: find out now whether this system allows that
        with mmap.mmap(fd, len(data), flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_EXEC):
            pass
    except (OSError, ValueError, AttributeError):
        os.close(fd)
        return None
    return fd


class _MappedSpec:
    """What ``_imp.create_dynamic`` reads of a spec: the name, and the file to ``dlopen``."""

    __slots__ = ("name", "origin")

    def __init__(self, name: str, origin: str):
        self.name, self.origin = name, origin


class VerifiedExtensionLoader(importlib.machinery.ExtensionFileLoader):
    """Maps the verified bytes of the extension module ``path`` (see the module docstring): the file
    opened, when ``seal`` (its entry record's fingerprint) still holds for that descriptor; otherwise
    its bytes, read once, checked against the lock's digest and copied into a sealed anonymous file."""

    def __init__(self, fullname: str, path: str, digest: str, algorithm: str, seal=None):
        super().__init__(fullname, path)
        self.digest = digest
        self.algorithm = algorithm
        self.seal = seal

    def create_module(self, spec):
        import _imp  # noqa: PLC0415

        flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        src = os.open(self.path, flags)
        try:
            if self.seal is not None and _PROC_FD and seal_holds(os.fstat(src), self.seal):
                fd, src = src, None  # the sealed file itself, bound by its descriptor: nothing read
            else:
                with open(src, "rb", closefd=False) as fh:
                    data = fh.read()
                _check(data, self.digest, self.algorithm, spec.name, self.path, "loaded")
                fd = _sealed_copy(data)
                if fd is None and _PROC_FD:  # the descriptor whose bytes were hashed
                    fd, src = src, None
        finally:
            if src is not None:
                os.close(src)
        origin = f"/proc/self/fd/{fd}" if fd is not None else self.path
        if fd is not None:
            _KEPT_FDS.append(fd)
        module = _imp.create_dynamic(_MappedSpec(spec.name, origin))
        if getattr(module, "__file__", None) == origin:  # a single-phase module is told where it was mapped from
            try:
                module.__file__ = self.path  # the entry's file, as for any extension module
            except AttributeError:
                pass
        return module


class _NoCodeLoader:
    """A folder of the package without ``__init__``: a package whose module runs no code."""

    @staticmethod
    def create_module(spec):
        return None

    @staticmethod
    def exec_module(module):
        return None


class _Root:
    """One registered import id: ``base`` is the entry's variant folder, ``package`` the
    package's folder inside it (``""`` when ``__init__.py`` is at the top), ``files`` the
    lock's ``{relpath: digest}``."""

    __slots__ = ("module_id", "base", "package", "files", "algorithm", "seals")

    def __init__(self, module_id: str, base: Path, package: str, files: dict, algorithm: str,
                 seals: dict | None = None):
        self.module_id, self.base, self.package, self.files, self.algorithm = module_id, base, package, files, algorithm
        self.seals = seals

    def _rel(self, parts: list[str]) -> str:
        return "/".join([self.package, *parts] if self.package else parts)

    def _file_spec(self, fullname: str, rel: str, package_dir: str | None):
        path = str(self.base / rel)
        if rel.endswith(".py"):  # sources are hashed as they are compiled, always (they are small)
            loader = VerifiedSourceLoader(fullname, path, self.files[rel], self.algorithm)
        else:
            seal = self.seals.get(rel) if self.seals is not None else None
            loader = VerifiedExtensionLoader(fullname, path, self.files[rel], self.algorithm, seal)
        locations = [str(self.base / package_dir)] if package_dir is not None else None
        return importlib.util.spec_from_file_location(fullname, path, loader=loader,
                                                       submodule_search_locations=locations)

    def spec(self, fullname: str):
        parts = [] if fullname == self.module_id else fullname[len(self.module_id) + 1:].split(".")
        rel = self._rel(parts)
        suffixes = [*importlib.machinery.EXTENSION_SUFFIXES, ".py"]
        for suffix in suffixes:  # a package folder first, as FileFinder does
            init = f"{rel}/__init__{suffix}" if rel else f"__init__{suffix}"
            if init in self.files:
                return self._file_spec(fullname, init, rel)
        if parts:
            for suffix in suffixes:  # extension modules before source, as FileFinder does
                if rel + suffix in self.files:
                    return self._file_spec(fullname, rel + suffix, None)
            if any(f.startswith(rel + "/") for f in self.files):
                spec = importlib.machinery.ModuleSpec(fullname, _NoCodeLoader, is_package=True)
                spec.submodule_search_locations = [str(self.base / rel)]
                return spec
        return None


class VerifiedFinder:
    """The meta-path finder for every registered import id (one per process, ``FINDER``)."""

    def __init__(self) -> None:
        self._roots: dict[str, _Root] = {}
        self._lock = threading.Lock()

    def _root_for(self, fullname: str) -> _Root | None:
        roots = self._roots
        if not roots:
            return None
        got = roots.get(fullname)
        if got is not None:
            return got
        i = fullname.find(".")
        while i != -1:
            got = roots.get(fullname[:i])
            if got is not None:
                return got
            i = fullname.find(".", i + 1)
        return None

    def find_spec(self, fullname, path=None, target=None):
        root = self._root_for(fullname)
        if root is None:
            return None
        spec = root.spec(fullname)
        if spec is None:  # never fall through to the path finders for a name we own
            raise ModuleNotFoundError(f"No module named {fullname!r} (not among the verified files of "
                                      f"{root.module_id!r} in {root.base})", name=fullname)
        return spec

    def invalidate_caches(self) -> None:
        return None

    def add(self, root: _Root) -> None:
        with self._lock:
            self._roots[root.module_id] = root
            if not any(f is self for f in sys.meta_path):
                sys.meta_path.insert(0, self)

    def remove(self, module_id: str) -> None:
        with self._lock:
            self._roots.pop(module_id, None)

    def roots(self) -> dict[str, Path]:
        return {mid: r.base for mid, r in self._roots.items()}


FINDER = VerifiedFinder()


def package_dir(files, name: str) -> str:
    """Where the package's ``__init__.py`` is, as `kernels` looks: the variant's top, else ``<name>/``
    (``name`` the metadata name with ``-`` as ``_``)."""
    return "" if "__init__.py" in files else name


def import_verified(module_id: str, base: str | Path, package: str, files: dict, algorithm: str,
                    context: Callable[[], contextlib.AbstractContextManager] | None = None,
                    seals: dict | None = None):
    """Import ``module_id`` from the entry folder ``base``; the module, or the exception its code raised
    (then nothing under ``module_id`` is left in ``sys.modules`` and the id is unregistered). ``seals``
    (the entry record's fingerprints): an extension module whose open file still carries its seal is
    mapped without being read; None hashes every one (``FRT_STORE_REHASH``)."""
    root = _Root(module_id, Path(base), package, dict(files), algorithm, seals)
    FINDER.add(root)
    try:
        spec = root.spec(module_id)
        if spec is None or spec.loader is None or spec.origin is None:
            raise ImportError(f"no __init__.py for {module_id!r} in {base}", name=module_id)
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_id] = module
        with context() if context is not None else contextlib.nullcontext():
            spec.loader.exec_module(module)
    except BaseException:
        forget(module_id)
        raise
    return module


def forget(module_id: str) -> None:
    """Unregister ``module_id`` and drop it and its submodules from ``sys.modules``."""
    FINDER.remove(module_id)
    for key in [k for k in list(sys.modules) if isinstance(k, str) and (k == module_id or k.startswith(module_id + "."))]:
        sys.modules.pop(key, None)
