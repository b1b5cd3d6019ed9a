"""An overall deadline that several threads share, and a blocking iteration a caller stops
waiting for when the deadline passes.

``Deadline(seconds).start()`` is a timer thread, not a clock read (loading never measures): when
it fires, ``expired`` turns true, ``expiry`` is set and every hook given to ``on_expiry`` runs
(in the timer thread). Whoever made it calls ``finish()`` when the work it bounds is over.

``bounded(make_iter, deadline)`` iterates ``make_iter()`` in a helper thread, one item each time
the caller asks for one, and hands the items over; when the deadline passes while the caller
waits, the caller gets ``DeadlinePassed`` at once, whatever the helper is blocked in (a client
library's own network call that the deadline cannot interrupt). The helper is told to stop and
ends when that call returns (the client's own timeouts bound it); it writes nothing anywhere.
Used by the object-store clients (``FRT_STORE_DEADLINE``); it knows nothing of stores, so any
transfer with an overall deadline can use it.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Iterator

__all__ = ["Deadline", "DeadlinePassed", "bounded"]


class DeadlinePassed(Exception):
    """The deadline passed before the work it bounds ended."""


class Deadline:
    """An overall deadline (see the module docstring)."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.expiry = threading.Event()  # set when the deadline passes
        self._done = threading.Event()
        self._hooks: list[Callable[[], None]] = []
        self._lock = threading.Lock()

    @property
    def expired(self) -> bool:
        return self.expiry.is_set()

    def start(self, name: str = "frt-deadline") -> Deadline:
        threading.Thread(target=self._run, daemon=True, name=name).start()
        return self

    def finish(self) -> None:
        self._done.set()

    def on_expiry(self, hook: Callable[[], None]) -> Callable[[], None]:
        """Run ``hook`` when the deadline passes (now, when it has); returns what removes it."""
        with self._lock:
            if not self.expiry.is_set():
                self._hooks.append(hook)
                return lambda: self._remove(hook)
        hook()
        return lambda: None

    def _remove(self, hook) -> None:
        with self._lock:
            if hook in self._hooks:
                self._hooks.remove(hook)

    def _run(self) -> None:
        if self._done.wait(self.seconds):
            return
        with self._lock:
            self.expiry.set()
            hooks = list(self._hooks)
        for hook in hooks:
            hook()
        self.after_expiry()

    def after_expiry(self) -> None:
        """What a subclass does in the timer thread once the hooks ran (nothing here)."""


_PASSED = object()


def bounded(make_iter: Callable[[], Iterable], deadline: Deadline) -> Iterator:
    """The items of ``make_iter()``, produced in a helper thread; ``DeadlinePassed`` as soon as the
    deadline passes while the caller waits (at once when it already has). An exception of the
    iteration is raised to the caller as it is. Close the iterator (or exhaust it) to let the
    helper go."""
    if deadline.expired:
        raise DeadlinePassed()
    asks: queue.SimpleQueue = queue.SimpleQueue()
    answers: queue.SimpleQueue = queue.SimpleQueue()

    def helper() -> None:
        it = None
        try:
            while asks.get():
                try:
                    if it is None:
                        it = iter(make_iter())
                    answers.put((True, next(it)))
                except StopIteration:
                    answers.put((False, None))
                    return
                except BaseException as exc:  # handed to the caller
                    answers.put((None, exc))
                    return
        finally:
            close = getattr(it, "close", None)
            if close is not None:
                try:
                    close()
                except Exception:
                    pass

    threading.Thread(target=helper, daemon=True, name="frt-bounded").start()
    remove = deadline.on_expiry(lambda: answers.put(_PASSED))

    def items() -> Iterator:
        try:
            while True:
                asks.put(True)
                got = answers.get()
                if got is _PASSED:
                    raise DeadlinePassed()
                ok, value = got
                if ok is None:
                    raise value
                if not ok:
                    return
                yield value
        finally:
            asks.put(False)
            remove()

    return items()
