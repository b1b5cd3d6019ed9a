"""`frt lock` with several models: a package that cannot be locked fails its own
model only. Every other model is locked and written, every failure is reported as
`error: <model>: <package>: <reason>`, the failing model's old lockfile is left as it was, and the
run exits 1. A package several models use is fetched from the Hub once per run."""

from __future__ import annotations

import json

import pytest

from helpers.factories import toy_manifest
from helpers.hubserver import kernel_variant_files

from test_lock import REPO, lock, publish

pytestmark = pytest.mark.subprocess  # every test here starts frt or a server as a process

OLD = b"# an older lockfile: frt must leave it alone when this model cannot be locked\n"


def two_packages(model: str, first: str, second: str, *, trust_second: bool = True) -> str:
    """``toy_manifest`` with a second seam and route on package ``second``."""
    trust = "\ntrust = true" if trust_second else ""
    text = toy_manifest(model=model, package_toml=(f'[packages."{first}"]\nversion = 1\ntrust = true\n\n'
                                                   f'[packages."{second}"]\nversion = 1{trust}'), repo=first)
    return text + f'''
[seams.act]
structure = "act@1"

[seams.act.impls.other]
package = "{second}"
entry = "add_one"
precision = "fp32"
contract = {{ device = "cpu", dtypes = ["float32"], layout = "contiguous" }}
smoke = {{ inputs = [{{ shape = ["rows", 8], dtype = "float32" }}] }}

[routes.other]
assembly = "eager"
seams = {{ act = "other" }}
'''


def setup(project, hub):
    publish(hub)  # testorg/addone: used by every model
    publish(hub, "evil/addone")
    hub.set_trusted("evil", False)
    bad = kernel_variant_files(name="broken", variant="torch-cpu")
    bad["build/torch-cpu/metadata.json"] = b'{"name": "broken"'
    hub.commit("testorg/broken", bad, branch="v1")
    m = project / "manifests"
    (m / "alpha.toml").write_text(toy_manifest(model="alpha"))
    (m / "beta.toml").write_text(two_packages("beta", REPO, "testorg/missing"))
    (m / "gamma.toml").write_text(toy_manifest(model="gamma"))
    (m / "delta.toml").write_text(two_packages("delta", "testorg/broken", "evil/addone", trust_second=False))
    (project / "lockfiles" / "beta.lock").write_bytes(OLD)


def test_one_bad_package_does_not_stop_the_other_models(project, hub):
    setup(project, hub)
    r = lock(project, hub)
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith("error: ")]
    assert errors[:2] == [
        f"error: beta: testorg/missing: not found on the Hub at {hub.url} (refs)",
        "error: delta: evil/addone: publisher 'evil' is not a trusted kernel publisher",
    ], r.stderr
    assert len(errors) == 3 and errors[2].startswith("error: delta: testorg/broken: variant 'torch-cpu': metadata.json")
    assert "not valid JSON" in errors[2]
    assert "hint: check the repo id in the manifest" in r.stderr
    assert 'hint: after reviewing the package, add `trust = true` under [packages."evil/addone"]' in r.stderr
    # the models that could be locked were, completely
    assert "lockfiles/alpha.lock: written" in r.stdout and "lockfiles/gamma.lock: written" in r.stdout
    for model in ("alpha", "gamma"):
        assert (project / "lockfiles" / f"{model}.lock").is_file()
    # the failing ones: nothing written, an old lockfile untouched, no temp files left
    assert (project / "lockfiles" / "beta.lock").read_bytes() == OLD
    assert not (project / "lockfiles" / "delta.lock").exists()
    assert sorted(p.name for p in (project / "lockfiles").iterdir()) == ["alpha.lock", "beta.lock", "gamma.lock"]


def test_json_reports_every_failure(project, hub):
    setup(project, hub)
    r = lock(project, hub, "--json")
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    assert doc["ok"] is False
    assert [(f["model"], f["package"]) for f in doc["failures"]] == [
        ("beta", "testorg/missing"), ("delta", "evil/addone"), ("delta", "testorg/broken")]
    assert doc["failures"][1]["reason"] == "publisher 'evil' is not a trusted kernel publisher"
    assert [lf["model"] for lf in doc["lockfiles"]] == ["alpha", "gamma"]
    assert any("trust = true" in h for h in doc["hints"])
    assert "error:" not in r.stderr  # under --json the failures are in the document


def test_a_shared_package_is_fetched_once_per_run(project, hub, tmp_path_factory):
    publish(hub)
    m = project / "manifests"
    (m / "alpha.toml").write_text(toy_manifest(model="alpha"))
    r = lock(project, hub)
    assert r.returncode == 0, r.stderr
    one_model = hub.request_count(REPO)
    assert one_model >= 3  # refs, the build/ listing, each variant's metadata.json
    for p in (project / "lockfiles").iterdir():
        p.unlink()
    (m / "gamma.toml").write_text(toy_manifest(model="gamma"))
    (m / "omega.toml").write_text(toy_manifest(model="omega"))
    hub.reset_counts()
    r = lock(project, hub)
    assert r.returncode == 0, r.stderr
    assert hub.request_count(REPO) == one_model  # three models, one package: fetched once
    assert sorted(p.name for p in (project / "lockfiles").iterdir()) == ["alpha.lock", "gamma.lock", "omega.lock"]


def test_a_failing_shared_package_is_asked_once_and_fails_every_model(project, hub):
    m = project / "manifests"
    for model in ("alpha", "gamma"):
        (m / f"{model}.toml").write_text(toy_manifest(model=model, repo="testorg/missing"))
    r = lock(project, hub)
    assert r.returncode == 1
    assert [line for line in r.stderr.splitlines() if line.startswith("error: ")] == [
        f"error: {model}: testorg/missing: not found on the Hub at {hub.url} (refs)" for model in ("alpha", "gamma")]
    assert hub.request_count("testorg/missing") == 1
    assert not list((project / "lockfiles").iterdir())


def test_a_bad_manifest_among_several_models_is_bad_input_and_the_others_are_locked(project, hub):
    publish(hub)
    (project / "manifests" / "alpha.toml").write_text(toy_manifest(model="alpha"))
    (project / "manifests" / "zeta.toml").write_text(toy_manifest(model="zeta").replace('host = "torch"', "host ="))
    r = lock(project, hub)
    assert r.returncode == 2, r.stderr  # bad input wins over a "no"
    [err] = [line for line in r.stderr.splitlines() if line.startswith("error: ")]
    assert err.startswith("error: zeta: manifests/zeta.toml: ") and "Traceback" not in r.stderr, r.stderr
    assert sorted(p.name for p in (project / "lockfiles").iterdir()) == ["alpha.lock"]


def test_one_model_asked_by_name_reports_its_package(project, hub):
    (project / "manifests" / "alpha.toml").write_text(toy_manifest(model="alpha", repo="testorg/missing"))
    r = lock(project, hub, "--model", "alpha")
    assert r.returncode == 1
    assert r.stderr.startswith(f"error: alpha: testorg/missing: not found on the Hub at {hub.url} (refs)\n"), r.stderr


def test_strict_fails_only_the_model_with_a_rejected_receipt(project, hub):
    publish(hub)
    for model in ("alpha", "gamma"):
        (project / "manifests" / f"{model}.toml").write_text(toy_manifest(model=model))
    (project / "receipts" / "gamma").mkdir(parents=True)
    (project / "receipts" / "gamma" / "bad.json").write_text("{}")
    r = lock(project, hub, "--strict")
    assert r.returncode == 1, r.stderr
    assert "error: gamma: 1 receipt(s) rejected under --strict" in r.stderr.splitlines(), r.stderr
    assert sorted(p.name for p in (project / "lockfiles").iterdir()) == ["alpha.lock"]
