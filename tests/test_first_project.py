"""``docs/first-project.md`` is run as written: every command of its ``sh`` blocks, in order, in an
empty folder, with the installed ``frt`` and this Python, and every file block (```` ```python
NAME ````) written where the walk-through stands when it comes; each step's exit code and key output
are checked, so the page cannot drift from the product. The README's ``kernel_mapping`` example is
the page's ``serve_kernelize.py``, word for word, so it runs here too."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.docsteps import doc_steps
from helpers.paths import ROOT

pytestmark = [pytest.mark.subprocess, pytest.mark.slow]  # every test here starts a process and takes over ~5 s

DOC = ROOT / "docs" / "first-project.md"
README = ROOT / "README.md"
FRT = str(Path(sys.executable).with_name("frt"))


def _steps() -> list[tuple[str, str]]:
    return doc_steps(DOC)


def _readme_kernelize_example() -> str:
    blocks = [b for b in re.findall(r"```python\n(.*?)```", README.read_text("utf-8"), re.S) if "kernel_mapping(" in b]
    assert len(blocks) == 1, "the README shows one kernel_mapping example"
    return blocks[0]


def test_the_first_project_walkthrough_runs_as_written(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FRT_", "HF_", "KERNELS_")) and k != "PYTHONPATH"}
    env.update(FRT_STORE=str(tmp_path / "store"), HF_HUB_OFFLINE="1", PYTHONDONTWRITEBYTECODE="1")
    cwd = tmp_path
    outputs, files = [], {}
    for kind, step in _steps():
        if kind == "file":
            name, _, text = step.partition("\n")
            (cwd / name).write_text(text, "utf-8")
            files[name] = text
            continue
        argv = shlex.split(step)
        if argv[0] == "cd":
            cwd = cwd / argv[1]
            continue
        argv[0] = {"frt": FRT, "python": sys.executable, "sed": shutil.which("sed")}[argv[0]]
        run = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
        outputs.append((step, run.returncode, run.stdout + run.stderr))
    codes = {}
    for line, code, _ in outputs:
        codes.setdefault(line, []).append(code)
    assert codes["frt init my-project --model my-model"] == [0]
    assert codes["frt resolve --model my-model"] == [1]  # before any receipt: refused
    assert codes["frt qualify --model my-model --route fast-norm"] == [0]
    assert codes["frt resolve --model my-model --accept supported_correct"] == [0]
    assert [(line, c, o) for line, c, o in outputs if c not in (0, 1)] == []
    assert [line for line, c, _ in outputs if c == 1] == ["frt resolve --model my-model"]
    served = next(o for line, _, o in outputs if line.startswith("python -c"))
    assert "{'decode': ('route', 'fast-norm'), 'prefill': ('route', 'fast-norm')}" in served
    project = tmp_path / "my-project"
    assert sorted(p.name for p in (project / "receipts" / "my-model").iterdir())[0].startswith("fast-norm--decode--fp32--")
    assert (project / "lockfiles" / "my-model.lock").is_file()

    # 6. the project's own host, found from the project root with no PYTHONPATH, measured and locked
    qualified = dict((line, o) for line, _, o in outputs)["frt qualify --route fast-norm"]
    assert "qualifying my-model route fast-norm on this machine" in qualified, qualified
    assert 'host-entry = "my_block:build_host"' in (project / "manifests" / "my-model.toml").read_text("utf-8")
    lock = (project / "lockfiles" / "my-model.lock").read_text("utf-8")
    assert "my_block:build_host" in lock
    assert codes["frt resolve --accept supported_correct"] == [0]

    # 7. kernels.kernelize runs the locked package's layer; the README shows this very file
    assert files["serve_kernelize.py"] == _readme_kernelize_example()
    kernelized = next(o for line, _, o in outputs if line == "python serve_kernelize.py")
    assert kernelized.strip().splitlines()[-1] == "kernelized calls: 1", kernelized
