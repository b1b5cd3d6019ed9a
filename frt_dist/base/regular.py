"""A regular file, opened so that nothing can block: ``open_regular`` (``O_NONBLOCK``, then the
type checked on the descriptor), ``NotRegular`` for a FIFO, a device, a socket or a directory, and
``file_kind`` naming what a file is. A leaf: the strict readers (``frt_dist.documents.schema``) and
``SafeDir`` both refuse what is not a regular file through it."""

from __future__ import annotations

import errno
import os
import stat

__all__ = ["NotRegular", "file_kind", "open_regular"]

_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory"))


def file_kind(mode: int) -> str:
    """What a file of ``mode`` is, in words (``"a FIFO (named pipe)"``); ``"a regular file"``."""
    if stat.S_ISREG(mode):
        return "a regular file"
    return next((what for test, what in _KINDS if test(mode)), "not a regular file")


def open_regular(path, flags: int = 0) -> int:
    """A descriptor of the regular file at ``path`` (links followed, as any open does), opened so
    that neither the open nor its type check can block: ``O_NONBLOCK`` (a FIFO with no writer
    opens at once instead of waiting), then ``fstat`` on that descriptor, so what is checked is
    what is read. Anything else (a FIFO, a device, a socket, a directory) is ``NotRegular``;
    other failures are the ``OSError`` of the open."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | flags)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegular(os.fspath(path), file_kind(mode))
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


class NotRegular(OSError):
    """A file frt reads or replaces is a FIFO, a device, a socket or a directory: refused, never read."""

    def __init__(self, path: str, kind: str):
        super().__init__(errno.EINVAL, f"is {kind}, not a regular file; frt reads and replaces only regular files",
                         path)
        self.kind = kind
