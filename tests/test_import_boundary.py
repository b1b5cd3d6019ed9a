"""`import frt_dist` and the lock/resolve/verify/matrix commands import neither torch nor kernels (SPEC §5)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import kernel_variant_files, toy_manifest, write_files

PROBE = """
import sys, runpy
{body}
heavy = sorted(m for m in ("torch", "kernels") if m in sys.modules)
print("HEAVY=" + ",".join(heavy))
"""


def _run(body: str, cwd) -> str:
    r = subprocess.run([sys.executable, "-c", PROBE.format(body=body)], cwd=cwd, capture_output=True, text=True,
                       timeout=60, env={"PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1", "HOME": str(cwd)})
    assert "HEAVY=" in r.stdout, r.stderr
    return r.stdout.rsplit("HEAVY=", 1)[1].strip()


def test_import_frt_dist_is_light(tmp_path):
    assert _run("import frt_dist; frt_dist.Hardware(arch='12.0', device_class='h200'); frt_dist.arch_admits(['9.0'], '9.0')", tmp_path) == ""


@pytest.mark.parametrize("argv", [["lock", "--help"], ["verify", "--help"], ["resolve", "--help"], ["matrix", "--help"]])
def test_help_is_light(tmp_path, argv):
    body = f"from frt_dist.cli import main\ntry:\n    main({argv!r})\nexcept SystemExit:\n    pass"
    assert _run(body, tmp_path) == ""


def test_lock_resolve_verify_matrix_are_light(tmp_path):
    write_files(tmp_path / "packages" / "addone", kernel_variant_files(name="addone", variant="torch-cpu"))
    (tmp_path / "manifests").mkdir()
    (tmp_path / "manifests" / "toy.toml").write_text(
        toy_manifest(package_toml='[packages."testorg/addone"]\npath = "packages/addone"'))
    body = "\n".join([
        "from frt_dist.cli import main",
        "import contextlib, io",
        "codes = []",
        "for argv in (['lock'], ['lock', '--check'], ['verify'], ['resolve', '--model', 'toy', '--arch', '12.0', '--device-class', 'h200', '--json'], ['matrix', '--format', 'html']):",
        "    with contextlib.redirect_stdout(io.StringIO()):",
        "        codes.append(main(argv))",
        "print('CODES=' + repr(codes))",
    ])
    r = subprocess.run([sys.executable, "-c", PROBE.format(body=body)], cwd=tmp_path, capture_output=True, text=True,
                       timeout=60, env={"PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1", "HOME": str(tmp_path)})
    assert "CODES=[0, 0, 0, 1, 0]" in r.stdout, r.stdout + r.stderr  # resolve: refused (no receipts) is exit 1
    assert r.stdout.rsplit("HEAVY=", 1)[1].strip() == ""
