"""``docs/first-project.md`` is run as written: every command of its ``sh`` blocks, in order, in an
empty folder, with the installed ``frt`` and this Python; each step's exit code and key output
are checked, so the page cannot drift from the product."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "first-project.md"
FRT = str(Path(sys.executable).with_name("frt"))


def _commands() -> list[str]:
    blocks = re.findall(r"```sh\n(.*?)```", DOC.read_text("utf-8"), re.S)
    return [line for b in blocks for line in b.splitlines() if line.strip()]


def test_the_first_project_walkthrough_runs_as_written(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FRT_", "HF_", "KERNELS_"))}
    env.update(FRT_STORE=str(tmp_path / "store"), HF_HUB_OFFLINE="1", PYTHONDONTWRITEBYTECODE="1")
    cwd = tmp_path
    outputs = []
    for line in _commands():
        argv = shlex.split(line)
        if argv[0] == "cd":
            cwd = cwd / argv[1]
            continue
        argv[0] = {"frt": FRT, "python": sys.executable}[argv[0]]
        run = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
        outputs.append((line, run.returncode, run.stdout + run.stderr))
    codes = {line: code for line, code, _ in outputs}
    assert codes["frt init my-project --model my-model"] == 0
    assert codes["frt resolve --model my-model"] == 1  # before any receipt: refused
    assert codes["frt qualify --model my-model --route fast-norm"] == 0
    assert codes["frt resolve --model my-model --accept supported_correct"] == 0
    assert [c for _, c, _ in outputs if c not in (0, 1)] == []
    assert [line for line, c, _ in outputs if c == 1] == ["frt resolve --model my-model"]
    served = outputs[-1][2]
    assert "{'decode': ('route', 'fast-norm'), 'prefill': ('route', 'fast-norm')}" in served
    project = tmp_path / "my-project"
    assert sorted(p.name for p in (project / "receipts" / "my-model").iterdir())[0].startswith("fast-norm--decode--fp32--")
    assert (project / "lockfiles" / "my-model.lock").is_file()
