"""`frt resolve` and the lockfile it needs: a missing one is a "no" (exit 1) wherever it
was named, with the command that writes it as the hint; a stale one is used (it is what was
reviewed) with one `warning:` (a stale lock is named), in text and in JSON. Real subprocesses, declared hardware."""

from __future__ import annotations

import json
import tomllib

import pytest

from frt_dist.documents.manifest import Manifest
from helpers.frt import frt_process
from helpers.resolver_support import build_case

from test_matrix import CASE

HW = ["--arch", "12.0", "--device-class", "rtx-5090", "--software", "torch=2.13,cuda=12.8"]
DECODE = ["--phase", "decode"]  # the band the rtx-5090 has a winner for: exit 0
NO_LOCK = "no lockfile for model 'case-model' (lockfiles/case-model.lock)"


@pytest.fixture
def root(tmp_path):
    build_case(CASE, tmp_path / "p")
    return tmp_path / "p"


def resolve(root, *args, env=None):
    return frt_process(["resolve", "--project", str(root), "--model", "case-model", *HW, *args], cwd=root.parent,
                   env=env)


@pytest.mark.subprocess
def test_missing_project_lockfile_is_a_no_with_the_lock_command(root):
    (root / "lockfiles" / "case-model.lock").unlink()
    r = resolve(root)
    assert (r.returncode, r.stdout) == (1, "")
    assert r.stderr == f"error: {NO_LOCK}\nhint: frt lock --model case-model\n"
    r = resolve(root, "--json")
    assert r.returncode == 1 and r.stderr == ""
    assert json.loads(r.stdout) == {"error": NO_LOCK, "hints": ["frt lock --model case-model"], "exit": 1,
                                    "reasons": []}
    # an unknown model stays bad input (exit 2), naming the models there are
    r = frt_process(["resolve", "--project", str(root), "--model", "nope", *HW], cwd=root.parent)
    assert r.returncode == 2 and r.stderr.startswith("error: unknown model 'nope'") and "case-model" in r.stderr


@pytest.mark.parametrize("source", ["--lockfile", "FRT_LOCK"])
@pytest.mark.subprocess
def test_missing_named_lockfile_is_a_no_too(root, source):
    gone = root / "elsewhere.lock"
    args, env = (["--lockfile", str(gone)], None) if source == "--lockfile" else ([], {"FRT_LOCK": str(gone)})
    r = resolve(root, *args, env=env)
    assert r.returncode == 1, r.stderr
    assert r.stderr == (f"error: no lockfile at {gone} ({source})\n"
                        f"hint: frt lock --model case-model, or name an existing lockfile in {source}\n")
    r = resolve(root, "--json", *args, env=env)
    assert r.returncode == 1 and json.loads(r.stdout)["exit"] == 1
    # present but not a lockfile: bad input (exit 2), not a "no"
    gone.write_text("not toml [")
    r = resolve(root, *args, env=env)
    assert r.returncode == 2 and "elsewhere.lock" in r.stderr and "Traceback" not in r.stderr, r.stderr


@pytest.mark.subprocess
def test_stale_lock_is_used_with_one_warning(root):
    lockfile = root / "lockfiles" / "case-model.lock"
    manifest = root / "manifests" / "case-model.toml"
    fresh_text = resolve(root, *DECODE)
    fresh = resolve(root, *DECODE, "--json")
    assert fresh_text.returncode == 0 and "warning" not in fresh_text.stderr, fresh_text.stderr
    assert fresh.returncode == 0 and json.loads(fresh.stdout)["warnings"] == []

    text = manifest.read_text("utf-8")
    assert text.count("min-speedup = 1.02") == 1
    manifest.write_text(text.replace("min-speedup = 1.02", "min-speedup = 1.5"), "utf-8")
    locked = tomllib.loads(lockfile.read_text("utf-8"))["manifest-digest"]
    now = Manifest.read(manifest).digest
    assert locked != now
    want = (f"lockfile for 'case-model' is stale: manifest manifests/case-model.toml changed since it was locked "
            f"(locked {locked[:19]}, now {now[:19]}); using the lockfile as reviewed; "
            "run `frt lock --model case-model`")
    r = resolve(root, *DECODE)
    assert r.returncode == 0, r.stderr
    assert [ln for ln in r.stderr.splitlines() if ln.startswith("warning:")] == [f"warning: {want}"]
    assert r.stdout == fresh_text.stdout  # the lock as reviewed decides, not the edited manifest
    r = resolve(root, *DECODE, "--json")
    assert r.returncode == 0 and r.stderr == ""
    doc = json.loads(r.stdout)
    assert doc["warnings"] == [want]
    assert doc["decisions"] == json.loads(fresh.stdout)["decisions"]


@pytest.mark.subprocess
def test_stale_check_never_follows_an_unsafe_manifest_file(root):
    """A lock whose ``manifest-file`` leaves the project (names cannot escape it) is not compared with what lies
    there: no file outside the project is read, no warning is built from it (verify names it)."""
    from test_names_cannot_escape import _relock_digest

    lockfile = root / "lockfiles" / "case-model.lock"
    doc = tomllib.loads(lockfile.read_text("utf-8"))
    outside = root.parent / "outside.toml"
    outside.write_text((root / doc["manifest-file"]).read_text("utf-8").replace("min-speedup = 1.02",
                                                                                  "min-speedup = 1.5"), "utf-8")
    doc["manifest-file"] = "../outside.toml"
    lockfile.write_text(_relock_digest(doc), "utf-8")
    r = resolve(root, *DECODE, "--json")
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert json.loads(r.stdout)["warnings"] == []
    # the same file inside the project is compared, and is stale
    (root / "moved.toml").write_bytes(outside.read_bytes())
    doc["manifest-file"] = "moved.toml"
    lockfile.write_text(_relock_digest(doc), "utf-8")
    r = resolve(root, *DECODE, "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["warnings"][0].startswith(
        "lockfile for 'case-model' is stale: manifest moved.toml changed"), r.stdout


def test_verify_without_a_lockfile_is_a_no(tmp_path, capsys):
    from frt_dist.cli.main import main

    (tmp_path / "manifests").mkdir()
    (tmp_path / "lockfiles").mkdir()
    assert main(["verify", "--project", str(tmp_path)]) == 1
    assert "error: no lockfiles in lockfiles" in capsys.readouterr().err


def test_mirror_without_a_lockfile_is_a_no(tmp_path, capsys):
    from frt_dist.cli.main import main

    (tmp_path / "manifests").mkdir()
    assert main(["mirror", str(tmp_path / "m"), "--project", str(tmp_path)]) == 1
    assert "error: no lockfiles in lockfiles" in capsys.readouterr().err and not (tmp_path / "m").exists()
