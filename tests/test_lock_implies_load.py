"""No lock that passes and cannot load.

The property: for every project the tests build, `frt lock` and `frt verify` exiting 0 implies
that `frt mirror` fills a mirror and the loader loads every locked package from it (and from the
project's own sources). Projects that break the property's premise (a kernel edited after its
`metadata.json` was digested, a file added, a file removed) must be refused by `frt lock` and
`frt verify`, naming the files, with a hint whose command, run as written, fixes the project.
Also `frt digest`, the command the hint names, and the walk-through's section on it."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import sys
from pathlib import Path

import pytest

from frt_dist import loader
from frt_dist.cli.main import main
from frt_dist.documents.lockfile import Lockfile
from frt_dist.system.variants import select_variants
from helpers.factories import CPU, tiny_project
from helpers.frt import frt_process
from helpers.paths import ROOT

KERNEL = Path("packages/rmsnorm/build/torch-cpu/rmsnorm/__init__.py")


# --- the projects ----------------------------------------------------------------


def _demo(tmp: Path) -> Path:
    root = tmp / "demo"
    for d in ("manifests", "lockfiles", "receipts", "packages"):
        shutil.copytree(ROOT / d, root / d, ignore=shutil.ignore_patterns("__pycache__"))
    (root / "pyproject.toml").write_text("[tool.frt]\n")
    return root


def _init(tmp: Path) -> Path:
    assert main(["init", str(tmp / "p"), "-q"]) == 0
    return tmp / "p"


def _edit(root: Path) -> None:
    f = root / KERNEL
    f.write_text(f.read_text() + "\n# tuned by hand\n")


def _init_edited(tmp: Path) -> Path:
    root = _init(tmp)
    _edit(root)
    return root


def _init_edited_redigested(tmp: Path) -> Path:
    root = _init_edited(tmp)
    assert main(["digest", str(root / "packages" / "rmsnorm"), "-q"]) == 0
    return root


def _init_file_added(tmp: Path) -> Path:
    root = _init(tmp)
    (root / KERNEL).with_name("helpers.py").write_text("X = 1\n")
    return root


def _init_file_removed(tmp: Path) -> Path:
    root = _init(tmp)
    (root / KERNEL).with_name("extra.py").write_text("X = 1\n")
    assert main(["digest", str(root / "packages" / "rmsnorm"), "-q"]) == 0
    (root / KERNEL).with_name("extra.py").unlink()
    return root


def _init_no_digest(tmp: Path) -> Path:  # older kernel-builder output: frt computes the digests
    root = _init(tmp)
    meta = root / KERNEL.parent.parent / "metadata.json"
    doc = json.loads(meta.read_text())
    del doc["digest"]
    meta.write_text(json.dumps(doc, indent=2) + "\n")
    _edit(root)
    return root


def _tiny(tmp: Path) -> Path:
    return tiny_project(tmp).root


def _tiny_edited(tmp: Path) -> Path:
    root = tiny_project(tmp).root
    f = root / "packages" / "norm" / "build" / "torch-cpu" / "norm" / "__init__.py"
    f.write_text(f.read_text() + "\n# edited\n")
    return root


PROJECTS = {"bundled-demo": _demo, "init": _init, "init-edited": _init_edited,
            "init-edited-redigested": _init_edited_redigested, "init-file-added": _init_file_added,
            "init-file-removed": _init_file_removed, "init-without-digest": _init_no_digest,
            "factories-tiny": _tiny, "factories-tiny-edited": _tiny_edited}
REFUSED = {"init-edited", "init-file-added", "init-file-removed", "factories-tiny-edited"}


@pytest.mark.usefixtures("fresh_loader")
@pytest.mark.parametrize("name", sorted(PROJECTS))
def test_a_lock_that_passes_lock_and_verify_mirrors_and_loads(name, tmp_path, capsys, monkeypatch):
    root = PROJECTS[name](tmp_path)
    capsys.readouterr()
    locked = main(["lock", "--project", str(root), "-q"]) == 0
    lock_err = capsys.readouterr().err
    verified = locked and main(["verify", "--project", str(root), "-q"]) == 0
    capsys.readouterr()
    if locked and verified:  # the property: then it mirrors and loads
        _mirror_and_load(root, tmp_path / "mirror", capsys, monkeypatch)
    assert (name not in REFUSED) == (locked and verified), lock_err  # and the premise, as each project is built


def _mirror_and_load(root: Path, mirror: Path, capsys, monkeypatch) -> None:
    assert main(["mirror", str(mirror), "--all-variants", "--project", str(root), "-q"]) == 0, capsys.readouterr().err
    for model in (p.stem for p in (root / "lockfiles").glob("*.lock")):
        lock = Lockfile.read(root / "lockfiles" / f"{model}.lock")
        for repo, pkg in sorted(lock.packages.items()):
            variant = select_variants(pkg.variants, CPU).selected
            mid = pkg.variants[variant].module_id
            for name in [n for n in sys.modules if n == mid or n.startswith(mid + ".")]:
                monkeypatch.delitem(sys.modules, name)  # imported by another test, not by frt's loader: set aside
            monkeypatch.setenv("HF_HUB_OFFLINE", "1")
            got = loader.load_locked(lock, repo, variant, mirror=mirror, hardware=CPU, root=root)
            assert got.module is not None
            loader._forget_all()
            monkeypatch.delenv("HF_HUB_OFFLINE")
            got = loader.load_locked(lock, repo, variant, hardware=CPU, root=root)  # from the project's source
            assert got.module is not None
            loader._forget_all()


# --- the refusal and its hint ------------------------------------------------------


def _frt(args, cwd: Path):
    return frt_process(args, cwd=cwd, env={"HF_HUB_OFFLINE": "1"})  # the printed hint's command, as a user runs it


def _hint_command(stderr: str) -> list[str]:
    m = re.search(r"^hint: .*re-digest it with `([^`]*)`", stderr, re.M)
    assert m, stderr
    return shlex.split(m.group(1))


@pytest.mark.parametrize("where", [".", "packages"])  # the hint's path works from the folder it is printed in
@pytest.mark.subprocess
@pytest.mark.slow
def test_lock_refuses_an_edited_kernel_naming_the_file_and_the_hint_fixes_it(tmp_path, capsys, where):
    root = _init(tmp_path)
    assert main(["lock", "--project", str(root), "-q"]) == 0
    before = (root / "lockfiles" / "my-model.lock").read_bytes()
    _edit(root)
    cwd = root / where
    r = _frt(["lock"], cwd)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert re.search(r"^error: my-model: my-org/rmsnorm: packages/rmsnorm/build/torch-cpu/metadata\.json digests do "
                     r"not match the files: rmsnorm/__init__\.py \(expected \S+=, computed \S+=\)$", r.stderr, re.M), r.stderr
    assert (root / "lockfiles" / "my-model.lock").read_bytes() == before  # nothing written
    v = _frt(["verify"], cwd)
    assert v.returncode == 1
    assert "mismatched: packages/rmsnorm/build/torch-cpu/rmsnorm/__init__.py: expected " in v.stdout
    assert "re-digest it with `frt digest " in v.stderr and "find out who edited it" not in v.stderr.split(
        "re-digest")[0].split("\n")[-1]
    fix = _hint_command(r.stderr)
    assert fix == _hint_command(v.stderr)
    assert fix[0] == "frt"
    d = _frt(fix[1:], cwd)  # run as written
    assert d.returncode == 0, d.stderr
    assert "rmsnorm/build/torch-cpu/metadata.json: updated (rmsnorm/__init__.py)" in d.stdout
    assert _frt(["lock"], cwd).returncode == 0 and _frt(["verify"], cwd).returncode == 0
    assert _frt(["mirror", str(tmp_path / "m")], cwd).returncode == 0


@pytest.mark.subprocess
def test_an_extra_and_a_missing_file_are_named(tmp_path):
    root = _init(tmp_path)
    (root / KERNEL).with_name("helpers.py").write_text("X = 1\n")
    meta = root / KERNEL.parent.parent / "metadata.json"
    doc = json.loads(meta.read_text())
    doc["digest"]["files"]["rmsnorm/gone.py"] = "AAAA"
    meta.write_text(json.dumps(doc, indent=2) + "\n")
    r = _frt(["lock"], root)
    assert r.returncode == 1
    assert "rmsnorm/gone.py (metadata.json has AAAA; the file is missing)" in r.stderr
    assert re.search(r"rmsnorm/helpers\.py \(not in metadata\.json; computed \S+=\)", r.stderr), r.stderr
    assert _frt(["digest", "packages/rmsnorm"], root).returncode == 0
    doc = json.loads(meta.read_text())
    assert sorted(doc["digest"]["files"]) == ["rmsnorm/__init__.py", "rmsnorm/helpers.py", "rmsnorm/layers.py"]
    assert _frt(["lock"], root).returncode == 0


# --- frt digest ------------------------------------------------------------------


def test_digest_check_writes_nothing_and_keeps_every_other_key(tmp_path, capsys):
    root = _init(tmp_path)
    meta = root / KERNEL.parent.parent / "metadata.json"
    doc = json.loads(meta.read_text())
    doc = {"zzz-custom": [1, 2], **doc}  # an unknown key first: kept, in place
    meta.write_text(json.dumps(doc, indent=2) + "\n")
    assert main(["digest", str(root / "packages" / "rmsnorm"), "--check"]) == 0
    assert capsys.readouterr().out.strip().endswith("metadata.json: up to date")
    _edit(root)
    before = meta.read_bytes()
    assert main(["digest", str(root / "packages" / "rmsnorm"), "--check"]) == 1
    cap = capsys.readouterr()
    assert "metadata.json: stale (rmsnorm/__init__.py)" in cap.out
    assert f"hint: run `frt digest {root / 'packages' / 'rmsnorm'}` after reviewing the changes" in cap.err
    assert meta.read_bytes() == before
    assert main(["digest", str(root / "packages" / "rmsnorm" / "build" / "torch-cpu"), "--json"]) == 0  # one variant
    out = json.loads(capsys.readouterr().out)
    assert out["variants"][0]["written"] is True and out["variants"][0]["files"][0]["path"] == "rmsnorm/__init__.py"
    after = json.loads(meta.read_text())
    assert list(after) == list(doc) and after["zzz-custom"] == [1, 2]
    assert [p.name for p in meta.parent.iterdir() if p.name.endswith(".tmp")] == []
    assert main(["digest", str(root / "packages" / "rmsnorm")]) == 0
    assert "up to date" in capsys.readouterr().out


def test_digest_refusals_name_the_path_and_write_nothing(tmp_path, capsys):
    root = _init(tmp_path)
    assert main(["digest", str(root / "manifests")]) == 2
    assert (f"error: frt digest: {root / 'manifests'} is neither a package folder (with build/<variant>/metadata.json) "
            "nor a variant folder") in capsys.readouterr().err
    vdir = root / KERNEL.parent.parent
    meta = vdir / "metadata.json"
    before = meta.read_bytes()
    (vdir / "rmsnorm" / "link.py").symlink_to("/etc/hostname")
    assert main(["digest", str(root / "packages" / "rmsnorm")]) == 2
    assert "rmsnorm/link.py is a symlink (its target is not part of the package)" in capsys.readouterr().err
    assert meta.read_bytes() == before
    (vdir / "rmsnorm" / "link.py").unlink()
    meta.write_text("[1, 2]")
    assert main(["digest", str(root / "packages" / "rmsnorm")]) == 2
    assert f"error: {meta}: expected a JSON object, got list" in capsys.readouterr().err
    meta.write_bytes(before)
    (vdir / "metadata.json.sigstore").write_text("{}")
    _edit(root)
    assert main(["digest", str(root / "packages" / "rmsnorm")]) == 0
    assert ".sigstore no longer matches the rewritten metadata.json" in capsys.readouterr().err


def test_verify_names_a_lock_digest_mismatch_as_a_digest_problem(tmp_path, capsys):
    root = _init(tmp_path)
    assert main(["lock", "--project", str(root), "-q"]) == 0
    lockpath = root / "lockfiles" / "my-model.lock"
    lockpath.write_text(lockpath.read_text().replace('trust = "project-path"', 'trust = "manifest"'))  # no re-sign
    capsys.readouterr()
    assert main(["verify", "--project", str(root)]) == 1
    cap = capsys.readouterr()
    assert "error: verification failed (1 problem(s): lock-digest)" in cap.err
    assert "digest" in cap.err.splitlines()[0]
    assert "lock-digest: lockfiles/my-model.lock: expected sha256:" in cap.out


# --- the walk-through's section, run as written ------------------------------------------


@pytest.mark.subprocess
def test_the_first_project_redigest_section_runs_as_written(tmp_path):
    text = (ROOT / "docs" / "first-project.md").read_text("utf-8")
    section = text.split("## 8. Edit the kernel", 1)[1].split("\n## ", 1)[0]
    lines = [ln for b in re.findall(r"```shell\n(.*?)```", section, re.S) for ln in b.splitlines() if ln.strip()]
    assert lines[:2] == ["frt lock", "frt digest packages/rmsnorm"], lines
    root = _init(tmp_path)
    assert _frt(["lock"], root).returncode == 0
    _edit(root)
    codes = [_frt(shlex.split(ln)[1:], root).returncode for ln in lines]
    assert codes == [1] + [0] * (len(lines) - 1), list(zip(lines, codes, strict=True))
