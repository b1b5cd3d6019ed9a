"""``FileStore``: a ``file://`` object store (a shared disk), through ``SafeDir``: no link inside the
store is followed. Imported when a ``file://`` URL is used.
"""

from __future__ import annotations

import errno
import uuid
from pathlib import Path

from ..errors import FrtError, ObjectMissing, StoreAccess, StoreUnavailable
from .store_api import _CHUNK, _SEGMENT, Location, ObjectStore, Pump, _check_key

__all__ = ["FileStore"]


class FileStore(ObjectStore):
    """A folder holding the store layout. The folder the URL names may be a link (the user's
    choice); nothing inside is followed (``frt_dist.base.safedir``): a key whose folder is a link reads
    as missing and is never written through. Writes are temp file then rename, so a reader never
    sees part of an object."""

    def __init__(self, loc: Location):
        self.loc, self.url, self.root = loc, loc.url, Path(loc.path)

    def _open(self, key: str, *, create: bool):
        from ..base.safedir import SafeDir, UnsafePath  # noqa: PLC0415

        parts = _check_key(key).split("/")
        try:
            top = SafeDir.root(self.root, create=create)
        except UnsafePath as exc:
            raise StoreAccess(f"{self.url}: {exc.path} {exc.what}") from None
        except OSError as exc:
            if not create and exc.errno == errno.ENOENT:
                return None, parts[-1]
            raise self._os_error(exc, key) from None
        try:
            return top.walk(*parts[:-1], create=create), parts[-1]
        except UnsafePath as exc:
            if create:
                raise StoreAccess(f"{self.where(key)}: {exc.path} {exc.what}; frt writes nothing through it",
                                  hints=[f"remove the link ({exc.path}) from the store"]) from None
            return None, parts[-1]  # reading: a link reads as absent
        finally:
            top.close()

    def _os_error(self, exc: OSError, key: str) -> FrtError:
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT):
            return StoreAccess(f"{self.where(key)}: {exc.strerror or exc}",
                               hints=["check the folder's permissions and free space"])
        return StoreUnavailable(f"{self.where(key)}: {exc.strerror or exc}")

    def head(self, key):
        folder, name = self._open(key, create=False)
        if folder is None:
            return None
        with folder:
            st = folder.lstat(name)
        import stat as _stat  # noqa: PLC0415

        return st.st_size if st is not None and _stat.S_ISREG(st.st_mode) else None

    def get(self, key, out, *, limit=None, progress=None) -> int:
        folder, name = self._open(key, create=False)
        f = None
        if folder is not None:
            with folder:
                f = folder.open_read(name)
        if f is None:
            raise ObjectMissing(f"{self.where(key)}: no such object", key=key)
        with f:
            return Pump(out, limit, progress).feed(iter(lambda: f.read(_CHUNK), b""))

    def _put(self, key, write) -> None:
        folder, name = self._open(key, create=True)
        with folder:
            tmp, w = folder.new_file(f".frt-put-{uuid.uuid4().hex[:8]}-")
            try:
                with w:
                    write(w)
                    w.sync()
                folder.replace(tmp, folder, name)
            except OSError as exc:
                raise self._os_error(exc, key) from None
            finally:
                folder.unlink(tmp)

    def put_file(self, key, path, *, progress=None, sha256=None) -> None:
        def write(w):
            with open(path, "rb") as fi:
                while chunk := fi.read(_CHUNK):
                    w.write(chunk)
                    if progress:
                        progress(len(chunk))

        self._put(key, write)

    def put_bytes(self, key, data) -> None:
        self._put(key, lambda w: w.write(bytes(data)))

    def list(self, prefix):
        import stat as _stat  # noqa: PLC0415

        folder, _ = self._open(prefix.rstrip("/") + "/x", create=False)
        if folder is None:
            return []
        out = []
        base = prefix.rstrip("/")
        with folder:
            for name in folder.listdir():
                st = folder.lstat(name)
                if st is not None and _stat.S_ISREG(st.st_mode) and _SEGMENT.match(name):
                    out.append((f"{base}/{name}", st.st_size))
        return sorted(out)
