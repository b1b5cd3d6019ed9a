"""`frt init` and `frt lock` where they cannot write: a read-only folder, a full
disk, a denied permission. Each is one `error:` naming the path and the cause, exit 2, no
traceback, nothing half-written: no temp files, a previous lockfile intact, no half project.

Real filesystems: a tmpfs mounted read-only or a few KB large (root, as in CI, mounts them; chmod
does not stop root), and a denied permission as root without the capabilities that bypass file modes. Where mounting or
dropping privileges is not possible the test is skipped, saying why."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from frt_dist.cli.main import main


@contextlib.contextmanager
def tmpfs(where: Path, options: str):
    where.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {r.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def remount_ro(where: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(where)], check=True)


def fill(where: Path) -> None:
    """Write until the filesystem is full."""
    with open(where / "filler", "wb", buffering=0) as fh:
        try:
            while True:
                fh.write(b"x" * 4096)
                fh.flush()
        except OSError:
            pass


def everything(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*"))


def tighten(model: str, project: Path) -> None:
    """A manifest change that changes the lockfile (a comment would not)."""
    m = project / "manifests" / f"{model}.toml"
    m.write_text(m.read_text().replace("min-speedup = 1.05", "min-speedup = 1.07"))


# --- frt init -------------------------------------------------------------------


@pytest.mark.subprocess
def test_init_into_a_read_only_folder(tmp_path, capsys):
    with tmpfs(tmp_path / "ro", "ro") as ro:
        assert main(["init", str(ro / "p")]) == 2
        err = capsys.readouterr().err
        assert f"error: frt init: {ro / 'p'}: cannot be written: Read-only file system; nothing was written" in err
        assert "Traceback" not in err and everything(ro) == []


@pytest.mark.parametrize("size", ["8k", "12k"])
@pytest.mark.subprocess
def test_init_on_a_full_disk_leaves_nothing(tmp_path, capsys, size):
    with tmpfs(tmp_path / "small", f"size={size}") as small:
        assert main(["init", str(small / "p")]) == 2
        err = capsys.readouterr().err
        assert f"error: frt init: {small / 'p'}: cannot be written: No space left on device; nothing was written" in err
        assert everything(small) == []  # not even the folder it would have made


def test_init_refuses_a_dangling_manifests_symlink(tmp_path, capsys):
    (tmp_path / "manifests").symlink_to(tmp_path / "gone")
    before = everything(tmp_path)
    assert main(["init", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert (f"error: frt init: {tmp_path / 'manifests'} is a symlink to {tmp_path / 'gone'}, which does not exist; "
            "frt init writes real folders") in err
    assert "Traceback" not in err and everything(tmp_path) == before


def test_init_refuses_a_symlinked_receipts_folder(tmp_path, capsys):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "receipts").symlink_to(tmp_path / "elsewhere")
    assert main(["init", str(tmp_path / "p")]) == 2
    assert f"{tmp_path / 'p' / 'receipts'} is a symlink to {tmp_path / 'elsewhere'}; frt init writes real folders" in \
        capsys.readouterr().err
    assert everything(tmp_path / "elsewhere") == [] and everything(tmp_path / "p") == ["receipts"]


def test_init_adds_its_package_beside_the_users_packages(tmp_path, capsys):
    (tmp_path / "packages" / "mine").mkdir(parents=True)
    assert main(["init", str(tmp_path), "-q"]) == 0
    assert sorted(p.name for p in (tmp_path / "packages").iterdir()) == ["mine", "rmsnorm"]
    assert main(["lock", "--project", str(tmp_path), "-q"]) == 0


@pytest.mark.parametrize("model", ["a.b", "A1", "m_2.x-y"])
def test_init_makes_a_project_lock_accepts_for_any_model_name_it_takes(tmp_path, capsys, model):
    assert main(["init", str(tmp_path / "p"), "--model", model, "-q"]) == 0
    assert main(["lock", "--project", str(tmp_path / "p")]) == 0, capsys.readouterr().err
    assert main(["verify", "--project", str(tmp_path / "p")]) == 0, capsys.readouterr()


# --- frt lock -------------------------------------------------------------------


def _locked_project(where: Path, capsys) -> tuple[Path, bytes]:
    assert main(["init", str(where / "p"), "-q"]) == 0
    assert main(["lock", "--project", str(where / "p"), "-q"]) == 0
    capsys.readouterr()
    return where / "p", (where / "p" / "lockfiles" / "my-model.lock").read_bytes()


@pytest.mark.subprocess
def test_lock_in_a_read_only_project(tmp_path, capsys):
    with tmpfs(tmp_path / "fs", "size=1m") as fs:
        project, before = _locked_project(fs, capsys)
        tighten("my-model", project)
        remount_ro(fs)
        assert main(["lock", "--project", str(project)]) == 2
        err = capsys.readouterr().err
        assert ("error: lockfiles/my-model.lock: cannot be written: Read-only file system; the previous lockfile is "
                "unchanged") in err
        assert "hint: make lockfiles/ writable" in err and "Traceback" not in err
        assert (project / "lockfiles" / "my-model.lock").read_bytes() == before
        assert sorted(p.name for p in (project / "lockfiles").iterdir()) == ["my-model.lock"]


@pytest.mark.subprocess
def test_lock_on_a_full_disk(tmp_path, capsys):
    with tmpfs(tmp_path / "fs", "size=256k") as fs:
        project, before = _locked_project(fs, capsys)
        tighten("my-model", project)
        fill(fs)
        assert main(["lock", "--project", str(project)]) == 2
        err = capsys.readouterr().err
        assert ("error: lockfiles/my-model.lock: cannot be written: No space left on device; the previous lockfile "
                "is unchanged") in err
        assert (project / "lockfiles" / "my-model.lock").read_bytes() == before
        assert sorted(p.name for p in (project / "lockfiles").iterdir()) == ["my-model.lock"]


@pytest.mark.subprocess
def test_lock_without_a_lockfiles_folder_on_a_read_only_disk(tmp_path, capsys):
    with tmpfs(tmp_path / "fs", "size=1m") as fs:
        project, _ = _locked_project(fs, capsys)
        shutil.rmtree(project / "lockfiles")
        remount_ro(fs)
        assert main(["lock", "--project", str(project)]) == 2
        assert ("error: lockfiles/my-model.lock: cannot be written: Read-only file system; no lockfile was written"
                in capsys.readouterr().err)


# --- a denied permission: root without the capabilities that bypass file modes ----------------


def _denied(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    # not helpers.frt: the child drops capabilities before exec (preexec_fn), with no XDG_* and HOME=cwd
    """``frt argv`` as root without CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH and CAP_FOWNER, so the
    folders' modes apply to it. (Not as the user nobody: a checkout in a 0700 folder, as
    ``mktemp -d`` makes, is one nobody cannot import frt_dist from.)"""
    if os.geteuid() != 0 or not sys.platform.startswith("linux"):
        pytest.skip("needs root on Linux to drop the capabilities that bypass file modes")
    from test_mirror_disk import _drop_dac_caps

    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "FRT_", "KERNELS_", "XDG_"))}
    env.update(PYTHONDONTWRITEBYTECODE="1", HOME=str(cwd), HF_HUB_OFFLINE="1")
    return subprocess.run([sys.executable, "-m", "frt_dist.cli", *argv], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120, preexec_fn=_drop_dac_caps)


@pytest.fixture
def shared_dir():
    """A folder of its own, removed afterwards whatever modes the test left in it."""
    d = Path(tempfile.mkdtemp(prefix="frt-perm-"))
    yield d
    for p in [d, *d.rglob("*")]:
        if p.is_dir() and not p.is_symlink():
            p.chmod(0o755)
    shutil.rmtree(d, ignore_errors=True)


@pytest.mark.subprocess
def test_lock_and_init_with_permission_denied(shared_dir, capsys):
    project, before = _locked_project(shared_dir, capsys)
    tighten("my-model", project)
    for p in [project, *project.rglob("*")]:
        p.chmod(0o555 if p.is_dir() else 0o444)  # readable, writable by nobody without the capabilities
    r = _denied(["lock"], project)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert ("error: lockfiles/my-model.lock: cannot be written: Permission denied; the previous lockfile is "
            "unchanged") in r.stderr and "Traceback" not in r.stderr
    assert (project / "lockfiles" / "my-model.lock").read_bytes() == before
    assert sorted(p.name for p in (project / "lockfiles").iterdir()) == ["my-model.lock"]
    shared_dir.chmod(0o555)
    r = _denied(["init", str(shared_dir / "q")], shared_dir)
    assert r.returncode == 2 and (f"error: frt init: {shared_dir / 'q'}: cannot be written: Permission denied; "
                                  "nothing was written") in r.stderr, r.stderr
    assert not (shared_dir / "q").exists()


@pytest.mark.subprocess
def test_export_and_digest_on_a_read_only_disk(tmp_path, capsys):
    with tmpfs(tmp_path / "fs", "size=1m") as fs:
        project, _ = _locked_project(fs, capsys)
        f = project / "packages" / "rmsnorm" / "build" / "torch-cpu" / "rmsnorm" / "__init__.py"
        f.write_text(f.read_text() + "\n# edited\n")
        (fs / "out").mkdir()
        remount_ro(fs)
        assert main(["lock", "--project", str(project), "--export", "kernels", "-o", str(fs / "out" / "k.lock")]) == 2
        err = capsys.readouterr().err
        assert f"error: -o {fs / 'out' / 'k.lock'}: cannot be written: Read-only file system" in err
        assert "Traceback" not in err and list((fs / "out").iterdir()) == []
        assert main(["digest", str(project / "packages" / "rmsnorm")]) == 2
        assert "metadata.json: cannot be written: Read-only file system" in capsys.readouterr().err
