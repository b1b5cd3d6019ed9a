"""The steps of a page that a test runs as written (docs/first-project.md, docs/fleet-local.md, docs/vllm.md)."""

from __future__ import annotations

import re
from pathlib import Path


def doc_steps(page: Path, kinds: tuple[str, ...] = ("sh", "python")) -> list[tuple[str, str]]:
    """``("run", command line)`` for each line of a ``sh`` block, and ``("file", name + "\\n" + text)`` for
    each block of another of ``kinds`` whose fence names a file (```` ```python host.py ````), in the
    page's order."""
    out = []
    fence = rf"```({'|'.join(map(re.escape, kinds))}) ?([^\n]*)\n(.*?)```"
    for kind, name, body in re.findall(fence, page.read_text("utf-8"), re.S):
        if kind == "sh":
            out += [("run", line) for line in body.splitlines() if line.strip()]
        elif name:
            out.append(("file", f"{name}\n{body}"))
    return out


def write_step_file(cwd: Path, step: str) -> Path:
    """Write a ``("file", ...)`` step's text where the walk-through stands (``cwd``); its path."""
    name, _, text = step.partition("\n")
    path = cwd / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, "utf-8")
    return path
