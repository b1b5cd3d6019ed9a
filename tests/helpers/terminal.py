"""A command run with one of its outputs on a terminal (a pty), for what frt draws only there
(progress bars, the plain-text matrix, the `note: project ...` line). ``helpers.frt`` pipes both
outputs, so these tests use this runner instead."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import subprocess
import tempfile
import termios
import time

__all__ = ["on_a_terminal"]


def on_a_terminal(cmd: list[str], *, cwd, env, stream: str = "stderr", columns: int = 120,
                  timeout: float = 300) -> tuple[int, str, str]:
    """Run ``cmd`` with ``stream`` (``"stdout"`` or ``"stderr"``) on a new pty ``columns`` wide (a new
    pty is 0 columns wide), stdin empty; ``(exit code, what the terminal showed, the other stream)``.
    The terminal's ``\\r\\n`` is kept (a bar redraws with a bare ``\\r``). Every wait is bounded by
    ``timeout`` seconds: a command still running then is killed and the test fails with what it showed."""
    assert stream in ("stdout", "stderr"), stream
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    with tempfile.TemporaryFile() as other:
        outs = {"stdout": other, "stderr": other, stream: follower}
        p = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, **outs)
        os.close(follower)
        chunks, deadline = [], time.monotonic() + timeout
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    p.kill()
                    raise AssertionError(f"{cmd} still running after {timeout} s; it showed:\n"
                                         + b"".join(chunks).decode("utf-8", "replace"))
                ready, _, _ = select.select([leader], [], [], min(left, 1.0))
                if not ready:
                    continue
                try:
                    data = os.read(leader, 65536)
                except OSError:  # EIO: the child closed its side
                    break
                if not data:
                    break
                chunks.append(data)
        finally:
            os.close(leader)
        code = p.wait(timeout=max(1.0, deadline - time.monotonic()))
        other.seek(0)
        return code, b"".join(chunks).decode("utf-8", "replace"), other.read().decode("utf-8", "replace")
