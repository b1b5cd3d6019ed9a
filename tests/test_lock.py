"""`frt lock` / `frt verify` against a real Hub protocol (tests/helpers/hubserver.py) and path packages."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tomllib

import pytest

from frt_dist.documents.lockfile import Lockfile
from frt_dist.documents.manifest import Manifest
from frt_dist.documents.metadata import parse_variant_metadata
from frt_dist.documents.schema import parse_toml
from frt_dist.errors import KernelUnavailable, LockfileError
from helpers.factories import toy_manifest, write_files
from helpers.frt import frt_process
from helpers.hubserver import kernel_variant_files

from test_strict_document_readers import receipt_for

REPO = "testorg/addone"
# A ceiling that only guards against a hang (a busy machine must never reach it), never a tuned wait.
HANG_GUARD_S = 120


def publish(hub, repo=REPO, *, branch="v1", n_files=1, variants=("torch-cpu", "torch-universal"), archs=None, tag=b""):
    files = {}
    for v in variants:
        mods = {"__init__.py": b"def add_one(x):\n    return x + 1\n" + tag}
        mods.update({f"data/f{i}.txt": f"{i}".encode() + tag for i in range(n_files - 1)})
        backend = "cpu" if v in ("torch-cpu", "torch-universal") or "cpu" in v else "cuda"
        files.update(kernel_variant_files(name=repo.split("/")[1], variant=v, backend=backend, archs=archs,
                                          module_files=mods))
    return hub.commit(repo, files, branch=branch)


def lock(project, hub, *args, env=None):
    # the Hub timeout is a hang guard here; the test of the timeout itself sets a short one
    e = {"HF_ENDPOINT": hub.url, "HF_HOME": str(project / ".hf"), "FRT_HUB_TIMEOUT": str(HANG_GUARD_S)}
    e.update(env or {})
    return frt_process(["lock", *args], cwd=project, env=e)


def setup_toy(project, **kw):
    (project / "manifests" / "toy.toml").write_text(toy_manifest(**kw))


@pytest.mark.subprocess
def test_lock_pins_commit_records_variants_and_is_deterministic(project, hub):
    sha = publish(hub)
    setup_toy(project)
    r = lock(project, hub)
    assert r.returncode == 0, r.stderr
    lf = project / "lockfiles" / "toy.lock"
    first = lf.read_bytes()
    lk = Lockfile.read(lf)
    pkg = lk.packages[REPO]
    assert pkg.source == "hub" and pkg.revision == sha and pkg.trust == "manifest"
    assert sorted(pkg.variants) == ["torch-cpu", "torch-universal"]
    v = pkg.variants["torch-cpu"]
    assert v.backend == "cpu" and v.metadata_sha256.startswith("sha256:") and "addone/__init__.py" in v.files
    # second run: byte-identical, file not rewritten
    mtime = lf.stat().st_mtime_ns
    r = lock(project, hub)
    assert r.returncode == 0 and "unchanged" in r.stdout
    assert lf.read_bytes() == first and lf.stat().st_mtime_ns == mtime
    # from scratch under other hash seeds: identical bytes
    for seed in ("0", "12345"):
        lf.unlink()
        assert lock(project, hub, env={"PYTHONHASHSEED": seed}).returncode == 0
        assert lf.read_bytes() == first
    text = first.decode()
    assert text.splitlines()[1] == 'schema = "frt.lock/1.1"' and text.splitlines()[2].startswith("lock-digest = ")
    assert str(project) not in text and "127.0.0.1" not in text  # no absolute paths, no hosts


@pytest.mark.subprocess
def test_request_budget_does_not_grow_with_file_count(project, hub):
    publish(hub, "testorg/small", n_files=1)
    publish(hub, "testorg/big", n_files=60)
    pk = '[packages."testorg/small"]\nversion = 1\ntrust = true\n[packages."testorg/big"]\nversion = 1\ntrust = true'
    setup_toy(project, repo="testorg/small", package_toml=pk)
    assert lock(project, hub).returncode == 0
    small, big = hub.request_count("testorg/small"), hub.request_count("testorg/big")
    # refs + tree of build/ + one metadata.json per variant (2)
    assert small == big == 4
    assert len(Lockfile.read(project / "lockfiles" / "toy.lock").packages["testorg/big"].variants["torch-cpu"].files) == 60
    # a re-lock with nothing changed asks the Hub nothing
    hub.reset_counts()
    assert lock(project, hub).returncode == 0 and hub.request_count("testorg/") == 0


@pytest.mark.subprocess
def test_branch_move_is_stale_only_with_upgrade(project, hub):
    publish(hub)
    setup_toy(project)
    assert lock(project, hub).returncode == 0
    new = publish(hub, tag=b"# v1.1\n")
    r = lock(project, hub, "--check")
    assert r.returncode == 0, r.stdout + r.stderr
    r = lock(project, hub, "--check", "--upgrade-package", REPO)
    assert r.returncode == 1
    assert f"package '{REPO}': locked revision" in r.stdout and new in r.stdout
    assert "error: lockfile is stale" in r.stderr and "hint: run `frt lock`" in r.stderr
    assert lock(project, hub, "--upgrade-package", REPO).returncode == 0
    assert Lockfile.read(project / "lockfiles" / "toy.lock").packages[REPO].revision == new


@pytest.mark.subprocess
def test_check_names_what_changed(project, hub):
    publish(hub)
    setup_toy(project)
    r = lock(project, hub, "--check")
    assert r.returncode == 1 and "lockfiles/toy.lock is missing" in r.stdout
    assert not (project / "lockfiles" / "toy.lock").exists()
    assert lock(project, hub).returncode == 0
    before = (project / "lockfiles" / "toy.lock").read_bytes()
    (project / "manifests" / "toy.toml").write_text(toy_manifest().replace("[1, 16]", "[1, 32]"))
    r = lock(project, hub, "--check")
    assert r.returncode == 1 and "manifest manifests/toy.toml changed" in r.stdout
    assert (project / "lockfiles" / "toy.lock").read_bytes() == before  # --check writes nothing


@pytest.mark.subprocess
def test_receipts_embedded_rejected_and_strict(project, hub):
    sha = publish(hub)
    setup_toy(project)
    m = Manifest.read(project / "manifests" / "toy.toml")
    (project / "receipts" / "toy").mkdir()
    good = receipt_for(m, revision=sha)
    (project / "receipts" / "toy" / "good.json").write_text(json.dumps(good))
    bad = receipt_for(m, revision=sha, phase="prefill")
    bad["evidence"]["fallbacks"] = 3
    (project / "receipts" / "toy" / "bad.json").write_text(json.dumps(bad))
    stale = receipt_for(m, revision="f" * 40, phase="prefill", state="supported_correct")
    (project / "receipts" / "toy" / "stale.json").write_text(json.dumps(stale))
    r = lock(project, hub)
    assert r.returncode == 0
    assert "warning: receipts/toy/bad.json: fallbacks is 3; a qualified route has none" in r.stderr
    assert "warning: receipts/toy/stale.json: cell.impls.norm: measured testorg/addone at revision ffff" in r.stderr
    lk = Lockfile.read(project / "lockfiles" / "toy.lock")
    assert len(lk.receipts) == 1 and len(lk.rejected) == 2 and len(lk.index) == 1
    raw = (project / "lockfiles" / "toy.lock").read_bytes()  # a Hub package, rejected receipts (escapes)
    assert parse_toml(raw, LockfileError, "toy.lock") == tomllib.loads(raw.decode())  # the stdlib as oracle
    entry = next(iter(lk.index.values()))
    assert entry.candidates[0].route == "fast" and entry.candidates[0].state == "certified_fast"
    r = lock(project, hub, "--strict")
    assert r.returncode == 1 and "2 receipt(s) rejected under --strict" in r.stderr
    # a receipt removed makes the lock stale, by name
    (project / "receipts" / "toy" / "good.json").unlink()
    r = lock(project, hub, "--check")
    assert r.returncode == 1 and "receipt removed: receipts/toy/good.json" in r.stdout


@pytest.mark.subprocess
def test_untrusted_publisher_refused_unless_trusted(project, hub):
    publish(hub, "strangers/addone")
    setup_toy(project, repo="strangers/addone", package_toml='[packages."strangers/addone"]\nversion = 1')
    r = lock(project, hub)
    assert r.returncode == 1
    assert "publisher 'strangers' is not a trusted kernel publisher" in r.stderr
    assert 'hint: after reviewing the package, add `trust = true` under [packages."strangers/addone"]' in r.stderr
    assert not (project / "lockfiles" / "toy.lock").exists()
    hub.set_trusted("strangers", True)
    assert lock(project, hub).returncode == 0
    assert Lockfile.read(project / "lockfiles" / "toy.lock").packages["strangers/addone"].trust == "trusted-publisher"


def _assert_untouched(project, before: bytes | None):
    lf = project / "lockfiles" / "toy.lock"
    if before is None:
        assert not lf.exists()
    else:
        assert lf.read_bytes() == before
    assert [p.name for p in (project / "lockfiles").iterdir() if p.name != "toy.lock"] == []


@pytest.mark.parametrize("fault, message", [
    (("no-repo", None), "not found on the Hub"),
    (("no-branch", None), "no branch 'v1' (branches: main, v2)"),
    (("/refs", 500), "the Hub answered HTTP 500"),
    (("/refs", 404), "the Hub answered HTTP 404"),
    (("hold", None), "did not answer in time"),
])
@pytest.mark.subprocess
def test_hub_failures_leave_previous_lock_intact(project, hub, fault, message):
    publish(hub)
    setup_toy(project)
    assert lock(project, hub).returncode == 0
    before = (project / "lockfiles" / "toy.lock").read_bytes()
    (project / "manifests" / "toy.toml").write_text(toy_manifest().replace("[1, 16]", "[1, 8]"))  # forces a re-lock...
    kind, arg = fault
    if kind == "no-repo":
        (project / "manifests" / "toy.toml").write_text(toy_manifest(repo="testorg/missing"))
    elif kind == "no-branch":
        publish(hub, "testorg/onlyv2", branch="v2")
        (project / "manifests" / "toy.toml").write_text(toy_manifest(repo="testorg/onlyv2"))
    elif kind == "hold":
        # the Hub never answers (until the test ends): the 3 s client timeout must fire however
        # slowly this machine runs, which a finite server-side delay could not promise
        (project / "manifests" / "toy.toml").write_text(toy_manifest(repo="testorg/slow"))
        publish(hub, "testorg/slow")
        hub.hold("/refs")
    else:
        (project / "manifests" / "toy.toml").write_text(toy_manifest(repo="testorg/flaky"))
        publish(hub, "testorg/flaky")
        hub.fail("/refs", arg)
    r = lock(project, hub, env={"FRT_HUB_TIMEOUT": "3"} if kind == "hold" else None)
    assert r.returncode == 1, r.stderr
    assert message in r.stderr and r.stderr.startswith("error: ")
    _assert_untouched(project, before)


def _default_sigint() -> None:
    """In a child before exec: SIGINT back to its default (exec keeps an ignored signal ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _popen(argv, **kw) -> subprocess.Popen:
    """A child that a SIGINT from the test interrupts, however this suite was started."""
    return subprocess.Popen(argv, preexec_fn=_default_sigint, **kw)


@pytest.mark.subprocess
def test_a_child_of_a_suite_started_with_sigint_ignored_can_be_interrupted():
    # what `(trap '' INT; pytest)`, `nohup` or `&` from a script hand the suite; set here so the
    # check does not depend on how this run was started
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        p = _popen([sys.executable, "-c", "import signal; print(signal.getsignal(signal.SIGINT) is "
                    "signal.default_int_handler)"], stdout=subprocess.PIPE, text=True)
        out, _ = p.communicate(timeout=HANG_GUARD_S)
    finally:
        signal.signal(signal.SIGINT, old)
    assert out.strip() == "True", out


@pytest.mark.subprocess
def test_interrupted_lock_leaves_previous_lockfile_and_no_temp_files(project, hub):
    publish(hub)
    setup_toy(project)
    assert lock(project, hub).returncode == 0
    before = (project / "lockfiles" / "toy.lock").read_bytes()
    publish(hub, "testorg/slow")
    (project / "manifests" / "toy.toml").write_text(toy_manifest(repo="testorg/slow"))
    # Event-driven, no tuned deadlines: the Hub holds the tree listing unanswered, the test waits
    # for that request to arrive (the child is then inside `frt lock`, past startup), interrupts it,
    # and waits for it to exit. HANG_GUARD_S only ends a hang; a busy machine never reaches it.
    hub.hold("build", ceiling=2 * HANG_GUARD_S)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "FRT_"))}
    env.update(HF_ENDPOINT=hub.url, HF_HOME=str(project / ".hf"), FRT_HUB_TIMEOUT=str(2 * HANG_GUARD_S),
               PYTHONDONTWRITEBYTECODE="1")
    try:
        for sig in (signal.SIGINT, signal.SIGKILL):
            hub.reset_counts()
            # the child gets SIGINT's default disposition whatever this process inherited: a suite
            # started with SIGINT ignored (a background job, `nohup`) would pass SIG_IGN on, and
            # Python installs no KeyboardInterrupt handler for a signal ignored at start
            p = _popen([sys.executable, "-m", "frt_dist.cli", "lock"], cwd=project, env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            try:
                reached = hub.wait_for_request("build", HANG_GUARD_S, alive=lambda p=p: p.poll() is None)
                if not reached:
                    p.kill()
                    out, err = p.communicate()
                    pytest.fail(f"lock never reached the tree listing (exit {p.returncode}): {err[-2000:]}")
                p.send_signal(sig)
                out, err = p.communicate(timeout=HANG_GUARD_S)
            finally:
                if p.poll() is None:
                    p.kill()
                    p.communicate()
            assert p.returncode != 0
            if sig == signal.SIGINT:
                assert p.returncode == 130 and "interrupted; nothing was written" in err, err
            else:
                assert p.returncode == -signal.SIGKILL
            _assert_untouched(project, before)
    finally:
        hub.release()


@pytest.mark.subprocess
def test_path_package_locked_by_content_digest(project):
    pkg = project / "packages" / "addone"
    write_files(pkg, kernel_variant_files(name="addone", variant="torch-cpu"))
    setup_toy(project, package_toml='[packages."testorg/addone"]\npath = "packages/addone"')
    r = frt_process(["lock"], cwd=project)
    assert r.returncode == 0, r.stderr
    lk = Lockfile.read(project / "lockfiles" / "toy.lock")
    p = lk.packages[REPO]
    assert p.source == "path" and p.trust == "project-path" and p.revision.startswith("sha256:") and p.path == "packages/addone"
    # __pycache__ never counts; an edit does
    (pkg / "build" / "torch-cpu" / "addone" / "__pycache__").mkdir()
    (pkg / "build" / "torch-cpu" / "addone" / "__pycache__" / "x.pyc").write_bytes(b"junk")
    assert frt_process(["lock", "--check"], cwd=project).returncode == 0
    (pkg / "build" / "torch-cpu" / "addone" / "__init__.py").write_text("def add_one(x):\n    return x + 2\n")
    r = frt_process(["lock", "--check"], cwd=project)  # its metadata.json still has the old digest: refused
    assert r.returncode == 1 and "addone/__init__.py (expected " in r.stderr, r.stderr
    assert frt_process(["digest", "packages/addone"], cwd=project).returncode == 0
    r = frt_process(["lock", "--check"], cwd=project)
    assert r.returncode == 1 and "package 'testorg/addone': locked revision sha256:" in r.stdout


@pytest.mark.parametrize("variant, meta, why", [
    ("../up", {}, "escapes its directory"),
    ("torch-cpu", {"digest": {"algorithm": "sha256", "files": {"../../etc/passwd": "AAAA"}}}, "path escapes the variant directory"),
    ("torch-cpu", {"digest": {"algorithm": "sha256", "files": {"/etc/passwd": "AAAA"}}}, "path escapes the variant directory"),
    ("torch-cpu", {"digest": "sha256"}, "digest: expected an object"),  # no digest at all: frt computes it
    ("torch-cpu", {"name": "Bad Name"}, "expected a kernel name"),
])
def test_bad_metadata_refused(variant, meta, why):
    base = {"name": "addone", "id": "_addone_1", "version": 1, "license": "mit", "python-depends": [],
            "backend": {"type": "cpu"}, "digest": {"algorithm": "sha256", "files": {"addone/__init__.py": "AAAA"}}}
    base.update(meta)
    if base.get("digest") is None:
        base.pop("digest")
    with pytest.raises(KernelUnavailable) as ei:
        parse_variant_metadata(json.dumps(base).encode(), repo=REPO, variant=variant)
    assert why in str(ei.value) and ei.value.reasons[0]["package"] == REPO


@pytest.mark.subprocess
def test_hub_metadata_with_escaping_digest_path_is_refused(project, hub):
    files = kernel_variant_files(name="addone", variant="torch-cpu")
    meta = json.loads(files["build/torch-cpu/metadata.json"])
    meta["digest"]["files"]["../../../escape.py"] = meta["digest"]["files"]["addone/__init__.py"]
    files["build/torch-cpu/metadata.json"] = json.dumps(meta).encode()
    hub.commit(REPO, files, branch="v1")
    setup_toy(project)
    r = lock(project, hub)
    assert r.returncode == 1 and "digest.files.../../../escape.py: path escapes the variant directory" in r.stderr


# --- verify -----------------------------------------------------------------

def _flip_hex(text: str, at: int) -> str:
    c = text[at]
    return text[:at] + ("0" if c != "0" else "1") + text[at + 1:]


@pytest.mark.subprocess
def test_verify_catches_one_hex_digit_anywhere(project, hub):
    sha = publish(hub)
    setup_toy(project)
    m = Manifest.read(project / "manifests" / "toy.toml")
    (project / "receipts" / "toy").mkdir()
    (project / "receipts" / "toy" / "good.json").write_text(json.dumps(receipt_for(m, revision=sha)))
    assert lock(project, hub).returncode == 0
    lf = project / "lockfiles" / "toy.lock"
    good = lf.read_text()
    r = frt_process(["verify"], cwd=project)
    assert r.returncode == 0 and "lockfiles/toy.lock: ok" in r.stdout
    digests = r'(revision = "|metadata-sha256 = "sha256:|lock-digest = "sha256:|receipt = "sha256:|"receipt": "sha256:)'
    targets = [m.end() + 5 for m in re.finditer(digests, good)]
    targets.append(good.index("sha256:", good.index("\"receipt\": {")) + 12)  # inside an embedded receipt
    assert len(targets) >= 6
    for at in targets:
        assert re.match(r"[0-9a-f]", good[at]), good[at - 10: at + 10]
        lf.write_text(_flip_hex(good, at))
        r = frt_process(["verify", "--json"], cwd=project)
        assert r.returncode == 1, good[at - 30: at + 5]
        doc = json.loads(r.stdout)
        assert doc["ok"] is False and doc["problems"][0]["kind"] == "lock-digest"
        assert doc["problems"][0]["expected"] != doc["problems"][0]["computed"]
        assert "hint: regenerate the lockfile with `frt lock --model toy`" in r.stderr
    lf.write_text(good)
    # resolve refuses a lockfile that does not verify, before any decision
    lf.write_text(_flip_hex(good, targets[0]))
    r = frt_process(["resolve", "--model", "toy", "--arch", "x86_64", "--device-class", "amd-epyc-7b13"], cwd=project)
    assert r.returncode == 1 and "lock-digest does not verify (expected sha256:" in r.stderr
    assert "hint: the lockfile was edited or damaged; regenerate it with `frt lock`" in r.stderr
