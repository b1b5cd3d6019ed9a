"""A directory opened once and used only through its file descriptor, never following a link
(the one file-system layer of ``frt mirror``).

The folder the user names (the mirror root) is opened like any path: it, or a folder above it,
may be a symbolic link the user chose. Nothing *inside* it is trusted. Every name below the root is
one component, opened, created, renamed or removed relative to its parent's descriptor
(``dir_fd=``), with ``O_NOFOLLOW``: a folder inside that turns out to be a link (or not a folder)
is ``UnsafePath``, never entered; a file that is a link is never read or written through (reading
treats it as absent, ``replace``/``unlink`` act on the link itself). A folder renamed or swapped for
a link after it was opened changes nothing: its descriptor still names the folder that was opened.
So nothing a mirror contains can make frt read, write or delete outside it.

Write failures (a full disk, a read-only or denied folder) are ``WriteError``: an ``OSError`` whose
``filename`` is the whole path shown to the user, so the message names the destination.
POSIX only (``O_NOFOLLOW``, ``O_DIRECTORY``, ``dir_fd``, ``flock``).
"""

from __future__ import annotations

import errno
import os
import stat
import uuid

from .regular import NotRegular, file_kind

__all__ = ["SafeDir", "UnsafePath", "WriteError", "DirLock"]

_SUPPORTED = (hasattr(os, "O_NOFOLLOW") and hasattr(os, "O_DIRECTORY")
              and {os.open, os.mkdir, os.stat, os.unlink, os.rmdir, os.rename, os.symlink} <= os.supports_dir_fd)
_DIR_FLAGS = (os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)
              | getattr(os, "O_CLOEXEC", 0))
_RETRIES = 50


class UnsafePath(OSError):
    """A name inside the tree that is a symbolic link (or not a folder) where a folder belongs."""

    def __init__(self, path: str, what: str):
        super().__init__(errno.ELOOP, what, path)
        self.path, self.what = path, what

    def __str__(self) -> str:
        return f"{self.path}: {self.what}"


class WriteError(OSError):
    """Creating, writing, renaming or linking failed; ``filename`` is the full display path."""

    def __str__(self) -> str:
        return f"{self.filename}: {self.strerror}"


def _write_error(exc: OSError, path: str) -> WriteError:
    return WriteError(exc.errno, exc.strerror or str(exc), path)


def _check_name(name: str) -> str:
    if not name or name in (".", "..") or "/" in name or "\0" in name:
        raise ValueError(f"not one path component: {name!r}")
    return name


class SafeDir:
    """An open folder. ``path`` is for messages only; every operation goes through ``fd``."""

    def __init__(self, fd: int, path: str):
        self.fd, self.path = fd, path

    # -- opening ----------------------------------------------------------------
    @classmethod
    def root(cls, path, *, create: bool = False) -> SafeDir:
        """The user's folder, links followed (their choice); made (``mkdir -p``) when ``create``."""
        path = os.fspath(path)
        if not _SUPPORTED:
            raise WriteError(errno.ENOTSUP, "this platform lacks O_NOFOLLOW, O_DIRECTORY or dir_fd, which frt "
                                            "needs to write a mirror safely", path)
        if create:
            try:
                os.makedirs(path, exist_ok=True)
            except FileExistsError:
                pass  # not a folder: the open below says so
            except OSError as exc:
                raise _write_error(exc, exc.filename or path) from None
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except NotADirectoryError:
            raise UnsafePath(path, "is not a directory") from None
        except OSError as exc:  # e.g. a dangling link the user named: cannot be made
            raise _write_error(exc, path) from None
        return cls(fd, path)

    def _join(self, name: str) -> str:
        return f"{self.path.rstrip('/')}/{name}"

    def child(self, name: str, *, create: bool = False) -> SafeDir | None:
        """The folder ``name`` in this one (made when ``create``; else None when absent). A link,
        or anything not a folder, under that name is ``UnsafePath``."""
        _check_name(name)
        for _ in range(_RETRIES):
            if create:
                try:
                    os.mkdir(name, 0o777, dir_fd=self.fd)
                except FileExistsError:
                    pass  # made by a concurrent run, or already there: opened below either way
                except OSError as exc:
                    raise _write_error(exc, self._join(name)) from None
            try:
                return SafeDir(os.open(name, _DIR_FLAGS, dir_fd=self.fd), self._join(name))
            except FileNotFoundError:
                if not create:
                    return None
                continue  # a concurrent sweep removed it (empty) between the mkdir and the open
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise self._unsafe(name) from None
                raise _write_error(exc, self._join(name)) from None
        raise WriteError(errno.EAGAIN, "the folder keeps disappearing (removed by a concurrent run)",
                         self._join(name))

    def _unsafe(self, name: str) -> UnsafePath:
        st = self.lstat(name)
        if st is not None and stat.S_ISLNK(st.st_mode):
            try:
                target = os.readlink(name, dir_fd=self.fd)
            except OSError:
                target = "?"
            return UnsafePath(self._join(name), f"is a symbolic link (to {target}); frt does not follow links "
                                                f"inside a mirror")
        return UnsafePath(self._join(name), "is not a directory")

    def walk(self, *names: str, create: bool = False) -> SafeDir | None:
        """``child`` over several components; the intermediate descriptors are closed."""
        cur, owned = self, False
        for name in names:
            nxt = cur.child(name, create=create)
            if owned:
                cur.close()
            if nxt is None:
                return None
            cur, owned = nxt, True
        if not owned:  # no names: a second descriptor of this folder
            return SafeDir(os.dup(self.fd), self.path)
        return cur

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> SafeDir:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- looking ----------------------------------------------------------------
    def listdir(self) -> list[str]:
        return sorted(os.listdir(self.fd))

    def lstat(self, name: str) -> os.stat_result | None:
        try:
            return os.stat(_check_name(name), dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def readlink(self, name: str) -> str | None:
        try:
            return os.readlink(_check_name(name), dir_fd=self.fd)
        except OSError:  # absent, or not a link
            return None

    def open_read(self, name: str):
        """A binary reader of the regular file ``name``; None when absent, a link or not a file."""
        try:
            fd = os.open(_check_name(name), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK,
                         dir_fd=self.fd)
        except OSError:
            return None
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO or device planted to hang or mislead
            os.close(fd)
            return None
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")

    def read_bytes(self, name: str, limit: int = 1 << 16) -> bytes | None:
        f = self.open_read(name)
        if f is None:
            return None
        with f:
            return f.read(limit)

    # -- writing ----------------------------------------------------------------
    def new_file(self, prefix: str):
        """(name, binary writer) of a new file here, never an existing name or a link."""
        for _ in range(_RETRIES):
            name = f"{prefix}{uuid.uuid4().hex}"
            try:
                fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666,
                             dir_fd=self.fd)
            except FileExistsError:
                continue
            except OSError as exc:
                raise _write_error(exc, self._join(name)) from None
            return name, _Writer(fd, self._join(name))
        raise WriteError(errno.EEXIST, "no free temporary name", self._join(prefix))

    def write_file(self, prefix: str, data: bytes) -> str:
        """A new file holding ``data`` (flushed to disk); its name."""
        name, w = self.new_file(prefix)
        try:
            with w:
                w.write(data)
                w.sync()
        except BaseException:
            self.unlink(name)
            raise
        return name

    def put(self, name: str, data: bytes) -> bool:
        """Make ``name`` hold ``data``, atomically (a new file, flushed, then renamed over it); False
        when it already holds those bytes. What is there now is looked at without following it or
        opening it for a blocking read: a link is ``UnsafePath``, a FIFO, a device or a folder is
        ``NotRegular`` (neither is replaced); a regular file is read only when its size is the new
        one's, and then at most one byte more."""
        st = self.lstat(name)
        if st is not None:
            if stat.S_ISLNK(st.st_mode):
                raise UnsafePath(self._join(name), "is a symbolic link; frt writes nothing through it")
            if not stat.S_ISREG(st.st_mode):
                raise NotRegular(self._join(name), file_kind(st.st_mode))
            if st.st_size == len(data) and self.read_bytes(name, limit=len(data) + 1) == data:
                return False
        tmp = self.write_file(f".{name}.", data)
        try:
            self.replace(tmp, self, name)
        except BaseException:
            self.unlink(tmp)
            raise
        return True

    def symlink(self, target: str, name: str) -> None:
        try:
            os.symlink(target, _check_name(name), dir_fd=self.fd)
        except OSError as exc:
            raise _write_error(exc, self._join(name)) from None

    def replace(self, name: str, dst: SafeDir, dst_name: str) -> None:
        """Rename ``name`` here onto ``dst_name`` in ``dst`` (atomic; a link there is replaced, not followed)."""
        try:
            os.replace(_check_name(name), _check_name(dst_name), src_dir_fd=self.fd, dst_dir_fd=dst.fd)
        except OSError as exc:
            raise _write_error(exc, dst._join(dst_name)) from None

    # -- removing (never raises for what is already gone) -------------------------
    def unlink(self, name: str) -> bool:
        try:
            os.unlink(_check_name(name), dir_fd=self.fd)
            return True
        except FileNotFoundError:
            return False

    def rmdir(self, name: str) -> bool:
        """Remove the folder ``name`` when it is empty."""
        try:
            os.rmdir(_check_name(name), dir_fd=self.fd)
            return True
        except OSError:
            return False

    def rmtree(self, name: str) -> None:
        """Remove ``name`` and, for a real folder, everything in it; a link is removed, never followed.
        Best effort: what cannot be removed stays."""
        st = self.lstat(name)
        if st is None:
            return
        if not stat.S_ISDIR(st.st_mode):
            try:
                self.unlink(name)
            except OSError:
                pass
            return
        try:
            sub = self.child(name)
        except OSError:  # swapped for a link since the lstat: remove the link
            try:
                self.unlink(name)
            except OSError:
                pass
            return
        if sub is None:
            return
        with sub:
            try:
                names = sub.listdir()
            except OSError:
                names = []
            for n in names:
                sub.rmtree(n)
        self.rmdir(name)

    # -- locks ------------------------------------------------------------------
    def lock(self, name: str, *, blocking: bool = True, own: bool = False) -> DirLock | None:
        """An exclusive ``flock`` on the file ``name`` here (made when absent); None when
        ``blocking`` is false and another process holds it. A lock file deleted or replaced
        between its open and the lock is opened again, so a held lock is always the file that
        carries the name. A link under the name is removed, never followed. With ``own``, the
        lock closes this folder when it is released."""
        for _ in range(_RETRIES):
            try:
                fd = os.open(_check_name(name), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666,
                             dir_fd=self.fd)
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    self.unlink(name)
                    continue
                raise _write_error(exc, self._join(name)) from None
            try:
                import fcntl  # noqa: PLC0415 - POSIX

                fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
            except BlockingIOError:
                os.close(fd)
                return None
            except BaseException:
                os.close(fd)
                raise
            now = self.lstat(name)
            held = os.fstat(fd)
            if now is not None and (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino):
                return DirLock(self, name, fd, own=own)
            os.close(fd)  # deleted (by a sweep) while we waited: that lock guards nothing
        raise WriteError(errno.EAGAIN, "the lock file keeps disappearing", self._join(name))


class DirLock:
    """A held lock (see ``SafeDir.lock``)."""

    def __init__(self, folder: SafeDir, name: str, fd: int, *, own: bool = False):
        self.folder, self.name, self.fd, self.own = folder, name, fd, own

    def release(self, *, delete: bool = False) -> None:
        """Let go; with ``delete``, remove the file first, while still holding it."""
        if self.fd < 0:
            return
        try:
            if delete:
                try:
                    self.folder.unlink(self.name)
                except OSError:
                    pass
        finally:
            os.close(self.fd)  # closing drops the flock
            self.fd = -1
            if self.own:
                self.folder.close()

    def __enter__(self) -> DirLock:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


class _Writer:
    """A binary file opened by ``new_file``: writes and syncs raise ``WriteError`` naming it."""

    def __init__(self, fd: int, path: str):
        self.fd, self.path = fd, path
        self._f = os.fdopen(fd, "wb", buffering=0)

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        try:
            while view:
                n = self._f.write(view)
                view = view[n:]
        except OSError as exc:
            raise _write_error(exc, self.path) from None

    def sync(self) -> None:
        try:
            os.fsync(self.fd)
        except OSError as exc:
            raise _write_error(exc, self.path) from None

    def close(self) -> None:
        try:
            self._f.close()
        except OSError as exc:
            raise _write_error(exc, self.path) from None

    def __enter__(self) -> _Writer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
