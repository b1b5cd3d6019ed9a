"""The one way tests run ``frt``: in this process, or as a real process.

``frt_main(args)`` calls ``frt_dist.cli.main.main`` here (no interpreter start-up, no second torch
import) and ``frt_process(args, cwd=...)`` runs ``python -m frt_dist.cli`` as a subprocess (for an
exit code, environment or import that only a real process shows). Both return a ``Result``:
``.code``, ``.out``, ``.err`` and ``.json()``; it also unpacks as ``code, out, err`` and answers to
``subprocess.CompletedProcess``'s ``returncode``/``stdout``/``stderr``, so a test can move between
the two without rewriting its assertions. The ``frt`` fixture (``tests/conftest.py``) hands out
``Frt()``: ``frt("lock", cwd=p)`` and ``frt.process("lock", cwd=p)``.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from typing import Any, NamedTuple


class Result(NamedTuple):
    code: Any  # the exit status (an int; ``SystemExit``'s code as raised, for argparse's exits)
    out: str
    err: str

    @property
    def returncode(self):
        return self.code

    @property
    def stdout(self) -> str:
        return self.out

    @property
    def stderr(self) -> str:
        return self.err

    def json(self):
        """stdout read as JSON (``--json`` output)."""
        return json.loads(self.out)


def _argv(args) -> list[str]:
    if len(args) == 1 and isinstance(args[0], (list, tuple)):
        args = args[0]
    return [str(a) for a in args]


@contextlib.contextmanager
def _environ(env: dict | None):
    """``os.environ`` with ``env`` applied (a value of None removes the variable), put back after."""
    if not env:
        yield
        return
    saved = {k: os.environ.get(k) for k in env}
    try:
        for k, v in env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = str(v)
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def frt_main(*args, cwd=None, env: dict | None = None) -> Result:
    """``frt args`` through ``frt_dist.cli.main.main`` in this process, from ``cwd`` and with ``env``
    applied if given; stdout and stderr captured, and no traceback allowed on stderr. ``args`` is
    one list (``frt_main(["lock", "--check"])``) or the words themselves (``frt_main("lock", "--check")``)."""
    from frt_dist.cli.main import main  # the CLI is imported by the test that runs it

    out, err = io.StringIO(), io.StringIO()
    with contextlib.ExitStack() as stack:
        if cwd is not None:
            stack.enter_context(contextlib.chdir(cwd))
        stack.enter_context(_environ(env))
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = main(_argv(args))
            except SystemExit as exc:
                rc = exc.code
    assert "Traceback" not in err.getvalue()
    return Result(rc, out.getvalue(), err.getvalue())


def frt_process(*args, cwd=None, env: dict | None = None, timeout: float = 120, input: str | None = None) -> Result:
    """``frt args`` in a real subprocess (the console script's module, ``python -m frt_dist.cli``) from
    ``cwd``: this environment without its HF_*/FRT_*/KERNELS_* variables, plus ``env``; ``args`` as
    for ``frt_main``. ``timeout`` bounds it (``subprocess.TimeoutExpired``)."""
    e = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "FRT_", "KERNELS_"))}
    e["PYTHONDONTWRITEBYTECODE"] = "1"
    e.update(env or {})
    p = subprocess.run([sys.executable, "-m", "frt_dist.cli", *_argv(args)], cwd=cwd, env=e, capture_output=True,
                       text=True, timeout=timeout, input=input)
    return Result(p.returncode, p.stdout, p.stderr)


class Frt:
    """What the ``frt`` fixture returns: ``frt(*args, cwd=, env=)`` runs in this process,
    ``frt.process(*args, cwd=, env=, timeout=, input=)`` in a subprocess."""

    def __call__(self, *args, cwd=None, env: dict | None = None) -> Result:
        return frt_main(*args, cwd=cwd, env=env)

    def process(self, *args, cwd=None, env: dict | None = None, timeout: float = 120,
                input: str | None = None) -> Result:
        return frt_process(*args, cwd=cwd, env=env, timeout=timeout, input=input)
