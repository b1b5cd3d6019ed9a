"""Which project a command uses: no implicit demo, nodes, the checkout's own project.

Outside any project every command is exit 2 (``no frt project here``, with hints), and so is
``frt_dist.load``; the bundled demo is used only under ``--demo``. A folder holding ``lockfiles/``
and no ``manifests/`` is a node: the lock-only commands work there and name it as the project,
``lock``/``qualify`` say they need manifests, and hints point at ``--from URL``. The commands run
in-process (``helpers.frt.frt_main``) from a ``chdir``; one module-scoped project is locked and
published to a ``file://`` store once."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from helpers.factories import CPU, tiny_project
from helpers.frt import frt_main, frt_process
from helpers.paths import ROOT

pytestmark = pytest.mark.usefixtures("fresh_loader")

HW = ["--arch", "x86_64", "--device-class", "test-cpu", "--backend", "cpu", "--software", "torch=2.13"]
NO_PROJECT = "no frt project here ("
NODE_JSON = "node"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """A locked tiny project (receipts for route ``fast`` on the declared CPU), published with every
    torch-cpu file to a ``file://`` store; ``node()`` makes a node folder holding only its lockfile."""
    base = tmp_path_factory.mktemp("fleet")
    tp = tiny_project(base)
    tp.lock(receipts=[("fast", "decode"), ("fast", "prefill")])
    store = base / "store"
    rc, out, err = frt_main(["mirror", f"file://{store}", "--variant", "torch-cpu", "--project", str(tp.root)])
    assert rc == 0, err
    return tp, f"file://{store}"


def _node(fleet, where: Path, *, pyproject: str | None = None) -> Path:
    tp, _ = fleet
    node = where / "node"
    (node / "lockfiles").mkdir(parents=True)
    shutil.copy(tp.lock_path, node / "lockfiles" / "tiny.lock")
    if pyproject is not None:
        (node / "pyproject.toml").write_text(pyproject, "utf-8")
    return node


def _json(argv) -> tuple[int, dict, str]:
    rc, out, err = frt_main([*argv, "--json"])
    return rc, json.loads(out), err


# --- outside any project -------------------------------------------------------------------------

OUTSIDE = [["lock"], ["lock", "--check"], ["lock", "--export", "kernels"], ["resolve", *HW],
           ["resolve", "--model", "demo-decoder", *HW], ["verify"], ["verify", "--mirror", "m"],
           ["mirror", "m", "--variant", "torch-cpu"], ["mirror", "m", "--from", "STORE", "--all-variants"],
           ["mirror", "STORE", "--all-variants"], ["matrix"], ["qualify", "--route", "fast"],
           ["receipts", "push", "STORE"], ["receipts", "pull", "STORE"]]


@pytest.fixture
def outside(tmp_path, monkeypatch):
    work = tmp_path / "empty"
    work.mkdir()
    monkeypatch.chdir(work)
    return work


@pytest.mark.parametrize("argv", OUTSIDE, ids=lambda a: " ".join(a[:2]))
def test_outside_a_project_every_command_is_exit_2_and_says_what_to_do(outside, argv):
    store = outside.parent / "store"
    argv = [f"file://{store}" if a == "STORE" else a for a in argv]
    rc, out, err = frt_main(argv)
    lines = err.splitlines()
    assert rc == 2 and out == "", err
    assert lines[0] == f"error: {NO_PROJECT}{outside}: no manifests/, lockfiles/ or pyproject.toml with [tool.frt] " \
                       "in it or in a folder above it)", err
    assert lines[1:] == ["hint: `frt init` creates a project here (manifests/, receipts/, lockfiles/)",
                         "hint: or name one: --project DIR (or FRT_PROJECT=DIR); a folder holding only lockfiles/ "
                         "is a node",
                         "hint: the bundled demo project (read-only): --demo"], err
    assert "demo-decoder" not in err and "bundled demo project (read-only) at" not in err
    assert list(outside.iterdir()) == [] and not store.exists()  # nothing written, no store opened
    rc, doc, err = _json(argv)
    assert (rc, doc["exit"], err) == (2, 2, "") and doc["error"].startswith(NO_PROJECT)
    assert [h.split(" ")[0] for h in doc["hints"]] == ["`frt", "or", "the"] and "--demo" in doc["hints"][2]


@pytest.mark.subprocess
def test_the_console_script_outside_a_project(tmp_path):
    r = frt_process(["resolve", "--model", "demo-decoder", *HW], cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.startswith(f"error: {NO_PROJECT}"), r.stderr
    assert r.stdout == "" and "Traceback" not in r.stderr


def test_load_outside_a_project_raises_no_project_with_pythons_hints(outside, fleet):
    import frt_dist

    with pytest.raises(frt_dist.NoProject) as exc:
        frt_dist.load("demo-decoder", hardware=CPU)
    e = exc.value
    assert isinstance(e, frt_dist.UsageError) and e.exit_code == 2 and str(e).startswith(NO_PROJECT)
    assert any("project=DIR" in h for h in e.hints) and any("bundled_root()" in h for h in e.hints)
    # a lockfile named stands for the project: the tiny lock resolves, and its project is found from it
    tp, _ = fleet
    plan = frt_dist.load("tiny", lockfile=str(tp.lock_path), hardware=CPU, fallback="host", mirror=None)
    assert plan.lockfile.model == "tiny"


def test_what_names_a_project_outside_one(outside, fleet, monkeypatch, tmp_path):
    tp, _ = fleet
    monkeypatch.setenv("FRT_PROJECT", str(tp.root))
    rc, doc, _ = _json(["verify"])
    assert rc == 0 and doc["project"] == {"root": str(tp.root), "kind": "project", "bundled": False}
    monkeypatch.setenv("FRT_PROJECT", str(tmp_path / "absent"))
    rc, out, err = frt_main(["verify"])
    assert rc == 2 and err.startswith(f"error: FRT_PROJECT: {tmp_path / 'absent'} is not a directory"), err
    monkeypatch.delenv("FRT_PROJECT")
    monkeypatch.setenv("FRT_HOME", str(tp.root))
    assert _json(["verify"])[1]["project"]["kind"] == "frt-home"
    monkeypatch.delenv("FRT_HOME")
    monkeypatch.setenv("FRT_LOCK", str(tp.lock_path))  # the lockfile's own project
    rc, doc, err = _json(["resolve", *HW])
    assert rc == 0 and doc["model"] == "tiny" and doc["project"]["root"] == str(tp.root), err


def test_the_demo_only_when_asked_for(outside):
    bundled = {"root": str(ROOT), "kind": "bundled", "bundled": True}
    for argv in (["--demo", "resolve", "--model", "demo-decoder", *HW], ["resolve", "--demo", "--model", "demo-decoder", *HW]):
        rc, out, err = frt_main([*argv, "--json"])
        assert rc in (0, 1) and json.loads(out)["project"] == bundled, err
        assert err.splitlines() == [f"note: using the bundled demo project (read-only) at {ROOT} (--demo)"]
    rc, out, err = frt_main(["verify", "--demo", "--project", str(outside)])
    assert rc == 2 and f"error: --demo and --project {outside} each name the project; give one" in err
    rc, out, err = frt_main(["--demo", "init", "x"])
    assert rc == 2 and "error: --demo: frt init uses no project" in err and not (outside / "x").exists()
    rc, out, err = frt_main(["lock", "--demo", "--check"])  # asked for: the demo's lockfile, as shipped
    assert rc == 0 and out == "lockfiles/demo-decoder.lock: up to date\n", err


# --- a node: lockfiles/ and no manifests/ ---------------------------------------------------------


def test_a_node_runs_the_lock_only_commands_and_names_itself(fleet, tmp_path, monkeypatch):
    _, url = fleet
    node = _node(fleet, tmp_path)
    monkeypatch.chdir(node)
    me = {"root": str(node), "kind": NODE_JSON, "bundled": False}
    rc, doc, err = _json(["resolve", *HW])  # --model left out: the node's one lockfile
    assert rc == 0 and doc["model"] == "tiny" and doc["project"] == me, err
    assert [d["route"] for d in doc["decisions"]] == ["fast", "fast"]
    rc, doc, err = _json(["mirror", "m", "--from", url, "--variant", "torch-cpu"])
    assert rc == 0 and doc["project"] == me and doc["from"] == url, err
    assert [m["model"] for m in doc["models"]] == ["tiny"] and doc["models"][0]["fetched"] == 4
    assert sorted(p.name for p in (node / "m").iterdir() if p.name.startswith("kernels--")) == [
        "kernels--t-org--norm", "kernels--t-org--scale"]  # the node's model, not the demo's
    rc, doc, err = _json(["verify", "--mirror", "m", "--variant", "torch-cpu"])
    assert rc == 0 and doc["ok"] and doc["lockfiles"] == ["lockfiles/tiny.lock"] and doc["project"] == me, err
    rc, out, err = frt_main(["matrix", "--format", "md"])
    assert rc == 0 and "tiny" in out and "demo-decoder" not in out, err
    rc, out, err = frt_main(["lock", "--export", "kernels"])
    assert rc == 0 and "t-org/scale" in out, err
    import frt_dist

    plan = frt_dist.load("tiny", hardware=CPU, mirror=str(node / "m"))  # the node's lockfile, its mirror
    assert {d.route for d in plan.decisions.values()} == {"fast"}


@pytest.mark.parametrize("argv", [["lock"], ["lock", "--check"], ["qualify", "--route", "fast"]],
                         ids=lambda a: " ".join(a))
def test_on_a_node_lock_and_qualify_say_they_need_manifests(fleet, tmp_path, monkeypatch, argv):
    node = _node(fleet, tmp_path)
    monkeypatch.chdir(node)
    rc, out, err = frt_main(argv)
    assert rc == 2, err
    assert err.splitlines()[0] == (f"error: frt {argv[0]} needs the project's manifests: {node} is a node "
                                   "(lockfiles/ and no manifests/)"), err
    assert f"hint: run `frt {argv[0]}` in the project that holds manifests/" in err
    rc, doc, _ = _json(argv)
    assert rc == 2 and doc["error"].startswith(f"frt {argv[0]} needs the project's manifests")
    assert sorted(p.name for p in node.iterdir()) == ["lockfiles"]  # nothing written


def test_a_node_verifies_its_own_lockfile_not_the_demos(fleet, tmp_path, monkeypatch):
    node = _node(fleet, tmp_path)
    lock = node / "lockfiles" / "tiny.lock"
    lock.write_text(lock.read_text().replace('"min-speedup": 1.02', '"min-speedup": 1.01', 1))
    monkeypatch.chdir(node)
    rc, doc, err = _json(["verify"])
    assert rc == 1 and not doc["ok"] and doc["project"]["root"] == str(node), err
    assert "lock-digest" in {p["kind"] for p in doc["problems"]}
    assert all(p["path"].startswith("lockfiles/tiny.lock") for p in doc["problems"])
    rc, out, err = frt_main(["verify"])
    assert rc == 1 and "demo-decoder" not in out + err
    assert "hint: bring a fresh lockfiles/tiny.lock from the project that locks it (`frt lock --model tiny` there)" \
        in err and "hint: regenerate" not in err


def test_a_node_is_found_from_below_and_by_its_pyproject(fleet, tmp_path, monkeypatch):
    _, url = fleet
    node = _node(fleet, tmp_path, pyproject=f'[tool.frt]\nmirror = "{url}"\n')
    (node / "deep" / "er").mkdir(parents=True)
    monkeypatch.chdir(node / "deep" / "er")
    rc, doc, err = _json(["verify"])
    assert rc == 0 and doc["project"] == {"root": str(node), "kind": NODE_JSON, "bundled": False}, err


def test_node_hints_point_at_from_url(fleet, tmp_path, monkeypatch):
    _, url = fleet
    node = _node(fleet, tmp_path, pyproject=f'[tool.frt]\nmirror = "{url}"\n')
    monkeypatch.chdir(node)
    # a mirror filled without --from: the node holds none of the path sources
    rc, out, err = frt_main(["mirror", "m", "--variant", "torch-cpu"])
    assert rc == 1 and err.splitlines()[-1] == f"hint: a node fills its mirror from the fleet's store: " \
                                               f"`frt mirror m --from {url}`", err
    assert "fix the source" not in err
    assert frt_main(["mirror", "m", "--from", url, "--variant", "torch-cpu"])[0] == 0
    victim = next((node / "m").glob("kernels--t-org--scale/snapshots/*/build/torch-cpu/scale/__init__.py"))
    os.chmod(victim, 0o644)
    victim.write_text("# edited\n")
    rc, out, err = frt_main(["verify", "--mirror", "m", "--variant", "torch-cpu"])
    assert rc == 1 and f"hint: refill the mirror with `frt mirror m --variant torch-cpu --from {url}`" in err, err
    rc, out, err = frt_main(["resolve", "--model", "other", *HW])
    assert rc == 1 and "hint: copy lockfiles/other.lock here from the project that locks it" in err, err
    rc, out, err = frt_main(["resolve", "--arch", "9.0", "--device-class", "h200", "--software", "torch=2.13,cuda=12.8"])
    assert rc == 1 and "and bring the new lockfile to this node" in err and "then `frt lock`\n" not in err, err


def test_load_on_a_node_points_at_from_url(fleet, tmp_path, monkeypatch):
    import frt_dist

    _, url = fleet
    node = _node(fleet, tmp_path)
    monkeypatch.chdir(node)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(frt_dist.KernelUnavailable) as exc:
        frt_dist.load("tiny", hardware=CPU, mirror=str(tmp_path / "empty-mirror"))
    assert any("frt mirror DIR --from URL" in h for h in exc.value.hints), exc.value.hints
    with pytest.raises(frt_dist.LockfileError) as exc:  # a model the node has no lockfile for: not the demo's
        frt_dist.load("demo-decoder", hardware=CPU)
    assert str(exc.value) == (f"no lockfile for model 'demo-decoder' (looked in {node / 'lockfiles/demo-decoder.lock'}; "
                              f"node {node})") and exc.value.exit_code == 1
    assert exc.value.hints == ["copy lockfiles/demo-decoder.lock here from the project that locks it"]


# --- FRT_LOCK names the model mirrored --------------------------------------------------------------


def test_frt_lock_mirror_from_is_labelled_with_the_locks_model(fleet, tmp_path, monkeypatch):
    tp, url = fleet
    monkeypatch.chdir(ROOT)  # the checkout's demo project is in force; FRT_LOCK names another model's lock
    monkeypatch.setenv("FRT_LOCK", str(tp.lock_path))
    rc, doc, err = _json(["mirror", str(tmp_path / "m"), "--from", url, "--variant", "torch-cpu"])
    assert rc == 0 and [m["model"] for m in doc["models"]] == ["tiny"], err
    rc, out, err = frt_main(["mirror", str(tmp_path / "m"), "--from", url, "--variant", "torch-cpu"])
    assert rc == 0 and out.startswith("tiny: 2 package(s) into ") and "demo-decoder" not in out + err, err
    rc, out, err = frt_main(["mirror", str(tmp_path / "m"), "--from", url, "--model", "demo-decoder", "--all-variants"])
    assert rc == 2 and f"error: FRT_LOCK {tp.lock_path} is the lockfile of model 'tiny', not 'demo-decoder'" in err


def test_a_relative_frt_lock_is_taken_against_frt_project(fleet, tmp_path, monkeypatch):
    """``FRT_PROJECT=DIR FRT_LOCK=lockfiles/tiny.lock`` names DIR's lockfile, wherever the command
    runs; a missing one is named by its whole path and how it was taken."""
    tp, _ = fleet
    monkeypatch.chdir(tmp_path)  # no project here, no lockfiles/ here
    monkeypatch.setenv("FRT_PROJECT", str(tp.root))
    monkeypatch.setenv("FRT_LOCK", "lockfiles/tiny.lock")
    rc, doc, err = _json(["resolve", *HW, "--phase", "decode"])
    assert rc == 0, err
    monkeypatch.setenv("FRT_LOCK", "lockfiles/gone.lock")
    rc, out, err = frt_main(["resolve", *HW])
    assert rc == 1
    assert f"error: no lockfile at {tp.root / 'lockfiles' / 'gone.lock'} (FRT_LOCK=lockfiles/gone.lock, relative to " \
           f"FRT_PROJECT={tp.root})" in err, err
    monkeypatch.delenv("FRT_PROJECT")
    rc, out, err = frt_main(["resolve", *HW, "--project", str(tp.root)])
    assert rc == 1 and f"(FRT_LOCK=lockfiles/gone.lock, relative to the current folder {tmp_path})" in err, err


def test_load_takes_a_relative_frt_lock_as_the_commands_do(fleet, tmp_path, monkeypatch):
    """``frt_dist.load`` (and so the vLLM plugin) reads ``FRT_PROJECT=DIR FRT_LOCK=lockfiles/tiny.lock`` as the
    ``frt`` commands do: DIR's lockfile, wherever the process runs; a missing one named with how it was taken."""
    import frt_dist
    from frt_dist.errors import LockfileError

    tp, _ = fleet
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FRT_PROJECT", str(tp.root))
    monkeypatch.setenv("FRT_LOCK", "lockfiles/tiny.lock")
    plan = frt_dist.load("tiny", hardware=CPU, fallback="host")
    assert Path(plan.lockfile.path) == tp.root / "lockfiles" / "tiny.lock"
    monkeypatch.setenv("FRT_LOCK", "lockfiles/gone.lock")
    with pytest.raises(LockfileError) as e:
        frt_dist.load("tiny", hardware=CPU, fallback="host")
    assert str(e.value) == (f"no lockfile at {tp.root / 'lockfiles' / 'gone.lock'} (FRT_LOCK=lockfiles/gone.lock, "
                            f"relative to FRT_PROJECT={tp.root})") and e.value.exit_code == 1


# --- the root of a frt-dist checkout ----------------------------------------------------------------


def test_the_checkout_root_is_its_own_project_read_write(monkeypatch):
    from frt_dist.project.discover import Project, bundled_root

    assert bundled_root() == ROOT  # this suite runs from a checkout (an editable install)
    for where in (ROOT, ROOT / "manifests", ROOT / "packages"):
        found = Project.find(where)
        assert (found.root, found.kind, found.read_only) == (ROOT, "project", False)
    monkeypatch.chdir(ROOT)
    rc, doc, err = _json(["lock", "--check"])
    assert rc == 0 and doc["project"] == {"root": str(ROOT), "kind": "project", "bundled": False}, err
    assert "bundled" not in err and "read-only" not in err
