"""``frt lock --export kernels``: `kernels` reads the export with its own functions and loads
offline, from an frt mirror, exactly the locked bytes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from frt_dist.distribution.mirror import mirror_lock
from frt_dist.export.kernels_lock import kernels_lock_json
from helpers.factories import tiny_project
from helpers.paths import ROOT, SRC


@pytest.fixture
def proj(tmp_path):
    tp = tiny_project(tmp_path)
    return tp, tp.lock()


def test_the_export_is_kernels_own_lock_format(proj):
    from kernels.locking import _get_locked_kernel_revision

    _, lock = proj
    text = kernels_lock_json(lock)
    assert json.loads(text) == [  # the format, recomputed from the frt lock
        {"dependency": {"repo-id": repo, "version": pkg.version}, "lock": {"commit": pkg.revision.split(":")[1][:40]}}
        for repo, pkg in sorted(lock.packages.items())]
    for repo, pkg in lock.packages.items():  # kernels' own reader
        locks, dep = _get_locked_kernel_revision(repo, text)
        assert dep.repo_id == repo and locks[dep].commit == pkg.snapshot


_LOAD = """
import sys, kernels, torch
from pathlib import Path
m = kernels.load_kernel("t-org/scale", lockfile=Path(sys.argv[1]), backend="cpu")
print(m.__file__)
print(m.scale(torch.ones(2), torch.full((2,), 3.0)).tolist())
kernels.LockedLayerRepository("t-org/scale", lockfile=Path(sys.argv[1]), layer_name="Scale")  # reads the lock
print("locked-layer-repository accepted it")
"""


@pytest.mark.subprocess
def test_kernels_loads_the_export_offline_from_an_frt_mirror(proj, tmp_path):
    from frt_dist.cli.main import main

    tp, lock = proj
    mirror = tmp_path / "mirror"
    mirror_lock(lock, mirror, variants=["torch-cpu"])
    out = tmp_path / "kernels.lock"
    assert main(["lock", "--project", str(tp.root), "--model", "tiny", "--export", "kernels", "-o", str(out)]) == 0
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_", "KERNELS_", "FRT_"))}
    env.update(PYTHONPATH=str(SRC), PYTHONDONTWRITEBYTECODE="1", HF_HUB_OFFLINE="1", KERNELS_CACHE=str(mirror),
               HF_HOME=str(tmp_path / "hf-home"), HF_ENDPOINT="http://127.0.0.1:9")
    run = subprocess.run([sys.executable, "-c", _LOAD, str(out)], env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    path, values, repo_line = run.stdout.splitlines()[:3]
    snap = lock.packages["t-org/scale"].snapshot
    assert f"/kernels--t-org--scale/snapshots/{snap}/build/torch-cpu/" in path
    assert values == "[3.0, 3.0]" and repo_line == "locked-layer-repository accepted it"


def test_one_repo_pinned_twice_across_models_is_an_error_naming_both(proj, tmp_path):
    from dataclasses import replace

    from frt_dist.errors import LockfileError

    _, lock = proj
    pkg = lock.packages["t-org/scale"]
    other = replace(lock, packages={**lock.packages, "t-org/scale": replace(pkg, revision="sha256:" + "ab" * 32)})
    with pytest.raises(LockfileError, match=r"t-org/scale is pinned twice: v1 at .* in .*, v1 at abab"):
        kernels_lock_json([lock, other])


def test_export_errors_name_the_problem_and_write_nothing(proj, tmp_path, capsys):
    from frt_dist.cli.main import main

    tp, _ = proj
    with pytest.raises(SystemExit) as exit_:
        main(["lock", "--project", str(tp.root), "--export", "kernels", "-o", str(tmp_path / "no" / "k.lock")])
    assert exit_.value.code == 2
    assert "does not exist" in capsys.readouterr().err and not (tmp_path / "no").exists()
    (tp.root / "lockfiles" / "tiny.lock").unlink()
    assert main(["lock", "--project", str(tp.root), "--export", "kernels"]) == 1  # a missing lockfile is a "no"
    err = capsys.readouterr().err
    assert "error: no lockfile for model 'tiny' (lockfiles/tiny.lock)" in err and "hint: frt lock --model tiny" in err


@pytest.mark.subprocess
def test_kernels_runs_an_edited_mirror_file_so_the_export_points_to_verify_mirror(proj, tmp_path, capsys):
    """What README and `--help` say of the export, held true: `kernels` loads through it without
    checking a digest (an edited mirror file runs), `frt verify --mirror` catches the edit, and the
    export says to run it."""
    from frt_dist.cli.main import build_parser, main

    tp, lock = proj
    mirror = tmp_path / "mirror"
    mirror_lock(lock, mirror, variants=["torch-cpu"])
    out = tmp_path / "kernels.lock"
    assert main(["lock", "--project", str(tp.root), "--model", "tiny", "--export", "kernels", "-o", str(out)]) == 0
    assert ("note: kernels checks no file digest when it loads through this kernels.lock: run "
            "`frt verify --mirror DIR` on the mirror before such a load") in capsys.readouterr().err
    snap = lock.packages["t-org/scale"].snapshot
    mirrored = mirror / "kernels--t-org--scale" / "snapshots" / snap / "build" / "torch-cpu" / "scale" / "__init__.py"
    real = mirrored.resolve()  # a snapshot entry links to its blob: edit the bytes
    real.chmod(0o644)
    real.write_text(real.read_text().replace("return x * w", "return x * w * 100"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_", "KERNELS_", "FRT_"))}
    env.update(PYTHONPATH=str(SRC), PYTHONDONTWRITEBYTECODE="1", HF_HUB_OFFLINE="1", KERNELS_CACHE=str(mirror),
               HF_HOME=str(tmp_path / "hf-home"), HF_ENDPOINT="http://127.0.0.1:9")
    run = subprocess.run([sys.executable, "-c", _LOAD, str(out)], env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stdout.splitlines()[1] == "[300.0, 300.0]", run.stderr  # the edit ran
    assert main(["verify", "--project", str(tp.root), "--model", "tiny", "--mirror", str(mirror)]) == 1
    assert "mismatched: kernels--t-org--scale/snapshots/" in capsys.readouterr().out
    export_help = next(a.help for a in build_parser()._subparsers._group_actions[0].choices["lock"]._actions
                       if a.dest == "export")
    assert "kernels checks no file digest" in export_help and "frt verify --mirror DIR" in export_help
    readme = (ROOT / "README.md").read_text("utf-8")
    assert "**`kernels` checks no file digest when it loads**" in readme
