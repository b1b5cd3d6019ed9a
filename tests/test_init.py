"""``frt init``: a new project that works, and nothing written over an existing one."""

from __future__ import annotations

import tomllib

from frt_dist.cli.main import main
from frt_dist.documents.manifest import Manifest
from frt_dist.project.discover import Project


def test_init_creates_a_project_found_from_below(tmp_path, capsys):
    assert main(["init", str(tmp_path / "p"), "--model", "m1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"created project {tmp_path / 'p'} (model m1): ")
    root = tmp_path / "p"
    assert "frt" in tomllib.loads((root / "pyproject.toml").read_text())["tool"]
    doc = tomllib.loads((root / "manifests" / "m1.toml").read_text())
    m = Manifest.from_dict(doc, file="m1.toml")
    assert (m.model, list(m.routes), list(m.phases)) == ("m1", ["fast-norm"], ["decode", "prefill"])
    assert Project.find(root / "packages" / "rmsnorm").root == root  # found upward, like git
    assert not [p for p in root.iterdir() if p.name.startswith(".frt-init-")]


def test_init_refuses_an_existing_project_and_changes_nothing(tmp_path, capsys):
    (tmp_path / "manifests").mkdir()
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(["init", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"error: frt init: {tmp_path} is already a project (it has manifests/)" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert main(["init", str(tmp_path / "x"), "--model", "../evil"]) == 2
    assert "--model" in capsys.readouterr().err and not (tmp_path / "x").exists() and not (tmp_path.parent / "evil").exists()


def test_init_keeps_an_existing_pyproject(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'mine'\n")
    assert main(["init", str(tmp_path), "-q"]) == 0
    assert (tmp_path / "pyproject.toml").read_text() == "[project]\nname = 'mine'\n"
    assert (tmp_path / "manifests" / "my-model.toml").is_file()


def test_the_nearest_project_above_wins_and_the_checkout_is_its_own_project(tmp_path, monkeypatch):
    from pathlib import Path

    from frt_dist.project.discover import bundled_root

    (tmp_path / "outer" / "manifests").mkdir(parents=True)
    deep = tmp_path / "outer" / "a" / "b"
    deep.mkdir(parents=True)
    assert Project.find(deep).root == tmp_path / "outer" and Project.find(deep).kind == "project"
    (tmp_path / "outer" / "a" / "manifests").mkdir()
    assert Project.find(deep).root == tmp_path / "outer" / "a"
    monkeypatch.delenv("FRT_HOME", raising=False)
    inside = Path(bundled_root()) / "manifests"
    found = Project.find(inside)  # the checkout's own project, read-write, not the bundled demo
    assert (found.kind, found.root, found.read_only) == ("project", bundled_root(), False)
