"""``frt mirror`` onto a destination that cannot take it: a full disk (a
1 MiB tmpfs), a read-only file system and a denied folder give one ``error:`` naming the path in
the mirror and the cause, exit 2, no traceback, and nothing half-written (no blob under its final
name that does not verify, no temp files, no lock files)."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from frt_dist.distribution.mirror import LOCKS, TMP
from helpers.factories import NORM_SRC, manifest_doc, tiny_project
from helpers.frt import frt_main
from helpers.paths import SRC

pytestmark = [pytest.mark.skipif(sys.platform != "linux", reason="tmpfs mounts and POSIX permissions"),
              pytest.mark.usefixtures("fresh_loader"), pytest.mark.subprocess]

BIG = 2 << 20  # larger than the 1 MiB file system


def _mount_tmpfs(where: Path, *options: str) -> None:
    where.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (CI runs as root)")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join(["size=1m", *options]), "tmpfs", str(where)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"mount -t tmpfs not permitted here: {r.stderr.strip()}")


@pytest.fixture
def tmpfs(tmp_path):
    mounted = []

    def mount(name: str, *options: str) -> Path:
        where = tmp_path / name
        _mount_tmpfs(where, *options)
        mounted.append(where)
        return where

    yield mount
    for where in mounted:
        subprocess.run(["umount", str(where)], capture_output=True)


def _big_project(root: Path):
    tp = tiny_project(root, "bigproj", manifest=manifest_doc(),
                      packages={"scale": {"name": "scale", "module": {"__init__.py": "def scale(x, w):\n    return x * w\n",
                                                                       "weights.bin": os.urandom(BIG)}},
                                "norm": {"name": "norm", "source": NORM_SRC}})
    return tp, tp.lock()


def _frt(capsys, tp, mirror: Path):
    """``frt mirror`` of the project's torch-cpu variants into ``mirror``: (exit code, stdout, stderr)."""
    return frt_main("mirror", str(mirror), "--project", str(tp.root), "--variant", "torch-cpu")


def _assert_nothing_half_written(mirror: Path) -> None:
    """Every blob verifies under its name; no temp files, no lock files, no dangling snapshot entry."""
    for blob in mirror.glob("kernels--*/blobs/*"):
        assert hashlib.sha256(blob.read_bytes()).hexdigest() == blob.name, blob
    for entry in mirror.glob("kernels--*/snapshots/**/*"):
        assert entry.is_dir() or entry.exists(), f"dangling {entry}"
    assert not (mirror / TMP).exists(), list((mirror / TMP).rglob("*"))
    assert not (mirror / LOCKS).exists(), list((mirror / LOCKS).rglob("*"))


def test_a_full_disk_names_the_mirror_file_and_the_cause(tmp_path, tmpfs, capsys):
    tp, lock = _big_project(tmp_path)
    mirror = tmpfs("full") / "mirror"
    rc, out, err = _frt(capsys, tp, mirror)
    _assert_nothing_half_written(mirror)
    big = hashlib.sha256((tp.root / "packages/scale/build/torch-cpu/scale/weights.bin").read_bytes()).hexdigest()
    assert not (mirror / "kernels--t-org--scale" / "blobs" / big).exists()
    assert not (mirror / "kernels--t-org--scale" / "refs").exists()  # an incomplete package gets no ref
    assert rc == 2, err
    lines = err.splitlines()
    assert re.fullmatch(rf"error: mirror {re.escape(str(mirror))}: cannot write {re.escape(str(mirror / TMP))}"
                        r"/run-\d+-[0-9a-f]{12}/blob-[0-9a-f]{32} \(for t-org/scale build/torch-cpu/scale/weights\.bin\): "
                        r"No space left on device", lines[0]), lines[0]
    assert lines[1] == "hint: free space on the mirror's file system, or choose another DIR"
    assert lines[2].startswith("hint: nothing was left half-written")
    assert str(tp.root) not in err  # the source is not blamed
    assert "Traceback" not in err and out == ""


def test_a_read_only_file_system(tmp_path, tmpfs, capsys):
    tp, lock = _big_project(tmp_path)
    ro = tmpfs("ro", "ro")
    rc, out, err = _frt(capsys, tp, ro)  # the folder exists: its first entry fails
    assert rc == 2
    assert err.splitlines()[0] == f"error: mirror {ro}: cannot write {ro / LOCKS}: Read-only file system"
    assert err.splitlines()[1] == "hint: make DIR writable for this user, or choose another DIR"
    assert "Traceback" not in err
    assert os.listdir(ro) == []
    rc, out, err = _frt(capsys, tp, ro / "sub" / "mirror")  # the folder itself cannot be made
    assert rc == 2
    assert err.splitlines()[0] == (f"error: mirror {ro / 'sub' / 'mirror'}: cannot write {ro / 'sub'}: "
                                   "Read-only file system")


def _drop_dac_caps() -> None:
    """In the child, as root: give up the capabilities that bypass file permissions (CAP_DAC_OVERRIDE,
    CAP_DAC_READ_SEARCH, CAP_FOWNER) from the bounding set, so the command runs under the folder's mode."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (1, 2, 3):
        if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def test_a_denied_folder(tmp_path):
    """A mirror folder this user may not write (as root: without the capabilities that bypass modes)."""
    tp, lock = _big_project(tmp_path)
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    os.chmod(mirror, 0o555)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HF_", "HUGGINGFACE_", "KERNELS_", "FRT_")) and k != "LOCAL_KERNELS"}
    env.update(PYTHONPATH=str(SRC), PYTHONDONTWRITEBYTECODE="1", HF_HOME=str(tmp_path / "hf"), HF_HUB_OFFLINE="1")
    try:
        r = subprocess.run([sys.executable, "-m", "frt_dist.cli", "mirror", str(mirror), "--variant", "torch-cpu"],
                           cwd=tp.root, env=env, capture_output=True, text=True, timeout=120,
                           preexec_fn=_drop_dac_caps if os.geteuid() == 0 else None)
    except subprocess.SubprocessError as exc:
        pytest.skip(f"cannot drop the permission-bypassing capabilities here: {exc}")
    finally:
        os.chmod(mirror, 0o755)
    assert r.returncode == 2, r.stderr
    assert f"error: mirror {mirror}: cannot write {mirror / LOCKS}: Permission denied" in r.stderr.splitlines()
    assert "hint: make DIR writable for this user, or choose another DIR" in r.stderr
    assert "Traceback" not in r.stderr
    assert os.listdir(mirror) == []
