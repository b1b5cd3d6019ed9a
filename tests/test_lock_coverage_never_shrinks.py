"""Coverage never shrinks silently: `frt lock` compares each model's new route index with the
lock it replaces (``frt_dist.lock.coverage``), names every cell gained, lost or changed, and refuses
(exit 1, the old lockfile's bytes unchanged) a route lost in a cell or a state dropped to
``supported_correct`` unless ``--allow-loss``.

The cases are the ones an operator meets: a package upgrade that leaves every receipt measured
on the old commit (a real Hub protocol, ``tests/helpers/hubserver.py``), a receipt-signing policy added
over unsigned receipts (real keys made with ``cryptography``), a re-qualification that comes back
``supported_correct``, a receipt file deleted.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tomli_w

from frt_dist.base.canonical import digest
from frt_dist.documents.lockfile import Lockfile
from frt_dist.lock.build import CoverageLoss, lock_model
from frt_dist.lock.coverage import coverage_diff
from helpers.factories import receipt_doc, tiny_project
from helpers.frt import frt_process

from test_lock import REPO, publish, setup_toy
from test_lock import lock as hub_lock
from test_strict_document_readers import receipt_for

CELL = "decode/fp32/cpu/x86_64/test"  # (the declared class test-cpu, normalised)
PREFILL = "prefill/fp32/cpu/x86_64/test"


def _write_receipt(tp, name: str, doc: dict) -> Path:
    p = tp.root / "receipts" / tp.model / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(doc, indent=1), "utf-8")
    return p


def _lock(tp, **kw):
    return lock_model(tp.project, tp.model, warn=lambda m: None, **kw)


@pytest.fixture
def locked(tmp_path):
    """A tiny project locked with route fast certified in decode and prefill, solo in decode."""
    tp = tiny_project(tmp_path)
    tp.lock(receipts=[("fast", "decode"), ("fast", "prefill"), ("solo", "decode")])
    return tp


# ---------------------------------------------------------------------------
# a package upgrade: every receipt measured on the old commit is rejected, every cell lost


def _hub_project(project, hub):
    publish(hub)
    setup_toy(project)
    assert hub_lock(project, hub).returncode == 0
    lk = Lockfile.read(project / "lockfiles" / "toy.lock")
    rdir = project / "receipts" / "toy"
    rdir.mkdir(parents=True, exist_ok=True)
    for phase in ("decode", "prefill"):
        doc = receipt_for(lk.manifest, phase=phase, revision=lk.packages[REPO].revision)
        (rdir / f"fast-{phase}.json").write_text(json.dumps(doc, indent=1))
    r = hub_lock(project, hub)
    assert r.returncode == 0, r.stdout + r.stderr
    # the summary names the cells gained
    assert "fast-decode.json" in r.stdout and "gained   decode/fp32/cpu/x86_64/amd-epyc-7b13  route fast " \
        "(certified_fast): new in this lock (receipts/toy/fast-decode.json)" in r.stdout, r.stdout
    assert "0 lost, 0 dropped, 0 changed, 2 gained" in r.stdout
    return project / "lockfiles" / "toy.lock"


@pytest.mark.subprocess
def test_a_package_upgrade_that_loses_every_cell_is_exit_1_and_leaves_the_lock(project, hub):
    lf = _hub_project(project, hub)
    before = lf.read_bytes()
    old_rev = Lockfile.read(lf).packages[REPO].revision
    new_rev = publish(hub, tag=b"# v1.1\n")
    r = hub_lock(project, hub, "--upgrade-package", REPO)
    assert r.returncode == 1, r.stdout + r.stderr
    assert lf.read_bytes() == before  # the CI recipe's `frt mirror` after it never runs, and nothing changed
    assert "lockfiles/toy.lock: not written, coverage would shrink" in r.stdout
    assert "2 lost, 0 dropped, 0 changed, 0 gained" in r.stdout
    why = (f"receipts/toy/fast-decode.json is rejected: cell.impls.norm: measured {REPO} at revision {old_rev}; "
           f"the lock pins {new_rev}")
    assert "lost     decode/fp32/cpu/x86_64/amd-epyc-7b13  route fast (certified_fast): receipts/toy/fast-decode.json " \
           "rejected (error below)" in r.stdout
    assert (r.stdout + r.stderr).count(why) == 1  # each rejection said once: on its error line, not warned as well
    # the error names the cell, the route and the rejection; the hint says what to run
    assert "error: toy: the new lock loses coverage (2 lost, 0 dropped to supported_correct); " \
           "lockfiles/toy.lock is unchanged" in r.stderr
    assert f"error: toy: lost decode/fp32/cpu/x86_64/amd-epyc-7b13 route fast: {why}" in r.stderr
    assert "hint: receipts/toy/fast-decode.json was measured on the pins this lock replaces; to measure the new " \
           "ones: `frt lock --model toy --allow-loss`, then `frt qualify --model toy --route fast --phase decode` on " \
           "device class amd-epyc-7b13, then `frt lock --model toy` (or keep the locked pins" in r.stderr
    assert "hint: to publish the smaller coverage on purpose: `frt lock --model toy --allow-loss`" in r.stderr
    assert "Traceback" not in r.stderr

    # --json: the same diff, structured
    r = hub_lock(project, hub, "--upgrade-package", REPO, "--json")
    assert r.returncode == 1 and lf.read_bytes() == before
    doc = json.loads(r.stdout)
    assert doc["ok"] is False
    [entry] = doc["lockfiles"]
    assert entry["refused"] == "coverage-loss" and entry["written"] is False and entry["lock-digest"] is None
    assert entry["coverage"]["counts"] == {"lost": 2, "dropped": 0, "changed": 0, "gained": 0}
    lost = {c["phase"]: c for c in entry["coverage"]["changes"]}
    assert lost["decode"]["kind"] == "lost" and lost["decode"]["route"] == "fast"
    assert lost["decode"]["before"] == "certified_fast" and lost["decode"]["after"] is None
    assert lost["decode"]["cause"] == "rejected" and lost["decode"]["file"] == "receipts/toy/fast-decode.json"
    assert {f["kind"] for f in doc["failures"]} == {"lost"} and len(doc["failures"]) == 2
    assert doc["failures"][0]["cell"] == "decode/fp32/cpu/x86_64/amd-epyc-7b13"

    # --check names the same diff, and calls the receipts rejected, not removed
    r = hub_lock(project, hub, "--check", "--upgrade-package", REPO)
    assert r.returncode == 1
    assert f"receipt now rejected: receipts/toy/fast-decode.json: cell.impls.norm: measured {REPO}" in r.stdout
    assert "receipt removed" not in r.stdout
    assert "coverage if locked now: 2 lost, 0 dropped, 0 changed, 0 gained" in r.stdout
    assert f"lost     decode/fp32/cpu/x86_64/amd-epyc-7b13  route fast (certified_fast): {why}" in r.stdout
    doc = json.loads(hub_lock(project, hub, "--check", "--upgrade-package", REPO, "--json").stdout)
    assert doc["lockfiles"][0]["coverage"]["counts"]["lost"] == 2

    # --allow-loss writes it, on purpose, and says so
    r = hub_lock(project, hub, "--upgrade-package", REPO, "--allow-loss")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "lockfiles/toy.lock: written" in r.stdout and "2 lost, 0 dropped" in r.stdout
    assert "warning: toy: written with less coverage than lockfiles/toy.lock had (2 lost, 0 dropped), as " \
           "--allow-loss asks" in r.stderr
    new = Lockfile.read(lf)
    assert new.packages[REPO].revision == new_rev and new.index == {} and len(new.rejected) == 2
    # the next lock has nothing more to lose, but accepts none of the model's receipts: still exit 1
    # (no empty lock by accident), the lockfile as --allow-loss wrote it; --allow-loss again: unchanged
    written = lf.read_bytes()
    r = hub_lock(project, hub)
    assert r.returncode == 1 and "not written, no receipt accepted" in r.stdout and lf.read_bytes() == written
    r = hub_lock(project, hub, "--allow-loss")
    assert r.returncode == 0 and "unchanged" in r.stdout


# ---------------------------------------------------------------------------
# the library: lock_model


def test_lock_model_raises_coverage_loss_and_writes_nothing(locked):
    before = locked.lock_path.read_bytes()
    (locked.root / "receipts" / "tiny" / "01-fast-prefill.json").unlink()
    with pytest.raises(CoverageLoss) as ei:
        _lock(locked)
    assert locked.lock_path.read_bytes() == before
    exc = ei.value
    assert exc.exit_code == 1
    [r] = exc.reasons
    assert r == {"model": "tiny", "kind": "lost", "cell": PREFILL, "route": "fast", "before": "certified_fast",
                 "after": None, "file": "receipts/tiny/01-fast-prefill.json",
                 "reason": "receipts/tiny/01-fast-prefill.json is no longer among the receipts (removed or renamed "
                           "since the last lock)"}
    assert exc.hints[0] == ("restore receipts/tiny/01-fast-prefill.json (from version control, or `frt receipts pull`), "
                            "or re-qualify on device class test: `frt qualify --model tiny --route fast --phase prefill`, "
                            "then `frt lock --model tiny`")
    res = _lock(locked, allow_loss=True)
    assert res.written and [c.kind for c in res.coverage.changes] == ["lost"]
    assert PREFILL not in {"/".join(k) for k in Lockfile.read(locked.lock_path).index}


@pytest.mark.subprocess
def test_a_state_drop_is_a_loss(locked):
    """Re-qualifying comes back supported_correct (the same route, the same cell, the same file):
    the cell keeps its route but not its speed claim."""
    lk = Lockfile.read(locked.lock_path)
    p = locked.root / "receipts" / "tiny" / "00-fast-decode.json"
    old = json.loads(p.read_text())
    doc = receipt_doc(lk, "fast", "decode", state="supported_correct", speedup=1.01)
    _write_receipt(locked, p.name, doc)
    before = locked.lock_path.read_bytes()
    with pytest.raises(CoverageLoss) as ei:
        _lock(locked)
    assert locked.lock_path.read_bytes() == before
    [r] = ei.value.reasons
    assert (r["kind"], r["cell"], r["route"], r["before"], r["after"]) == \
        ("dropped", CELL, "fast", "certified_fast", "supported_correct")
    assert r["reason"] == ("receipts/tiny/00-fast-decode.json was rewritten since the last lock: it now holds a "
                           f"supported_correct receipt ({digest(doc)[:19]})")
    assert "dropped to supported_correct" in str(ei.value)
    # the line the CLI prints for it
    rc = frt_process(["lock"], cwd=locked.root)
    assert rc.returncode == 1
    assert f"dropped  {CELL}  route fast (certified_fast -> supported_correct): receipts/tiny/00-fast-decode.json " \
           "rewritten (error below)" in rc.stdout
    assert f"error: tiny: dropped {CELL} route fast: receipts/tiny/00-fast-decode.json was rewritten" in rc.stderr
    # the receipt put back: nothing lost, nothing to write
    p.write_text(json.dumps(old, indent=1))
    res = _lock(locked)
    assert not res.written and res.coverage.changes == ()


@pytest.mark.subprocess
def test_gained_and_changed_cells_are_listed(locked, tmp_path):
    lk = Lockfile.read(locked.lock_path)
    _write_receipt(locked, "03-solo-prefill.json", receipt_doc(lk, "solo", "prefill"))
    # fast/decode re-qualified: another receipt, same state, a better speedup
    _write_receipt(locked, "00-fast-decode.json", receipt_doc(lk, "fast", "decode", speedup=1.5))
    r = frt_process(["lock"], cwd=locked.root)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 lost, 0 dropped, 1 changed, 1 gained" in r.stdout
    assert f"gained   {PREFILL}  route solo (certified_fast): new in this lock (receipts/tiny/03-solo-prefill.json)" \
        in r.stdout
    assert f"changed  {CELL}  route fast (certified_fast): now rests on receipts/tiny/00-fast-decode.json" in r.stdout
    assert "speedup 1.25x -> 1.5x" in r.stdout


@pytest.mark.subprocess
def test_a_first_lock_has_nothing_to_lose(tmp_path):
    tp = tiny_project(tmp_path)
    r = frt_process(["lock"], cwd=tp.root)
    assert r.returncode == 0 and "first lock" in r.stdout
    doc = json.loads(frt_process(["lock", "--check", "--json"], cwd=tp.root).stdout)
    assert doc["lockfiles"][0]["coverage"] == {"first-lock": False, "counts": {"lost": 0, "dropped": 0, "changed": 0,
                                                                                "gained": 0}, "changes": []}


def test_the_winner_changing_is_named(locked):
    """solo outranks fast in decode once fast's receipt is slower: both routes stay (nothing lost),
    the cell's first route changes."""
    lk = Lockfile.read(locked.lock_path)
    _write_receipt(locked, "02-solo-decode.json", receipt_doc(lk, "solo", "decode", speedup=2.0))
    res = _lock(locked)
    kinds = [(c.kind, c.route, c.cause) for c in res.coverage.changes]
    assert ("changed", "solo", "winner") in kinds and not res.coverage.losses
    [w] = [c for c in res.coverage.changes if c.cause == "winner"]
    assert w.reason == "now ranked first in the cell (was fast)"


# ---------------------------------------------------------------------------
# a policy added over unsigned receipts, real keys


crypto = pytest.importorskip("cryptography")


@pytest.mark.subprocess
def test_a_policy_over_unsigned_receipts_is_a_loss_naming_the_signing_fix(locked):
    from test_receipt_signing import make_key

    priv, pub = make_key(locked.root.parent / "secrets", "ci")
    (locked.root / "keys").mkdir()
    (locked.root / "keys" / "ci.pub").write_bytes(pub.read_bytes())
    m = dict(locked.manifest, trust={"receipts": {"keys": ["keys/ci.pub"]}})
    (locked.root / "manifests" / "tiny.toml").write_text(tomli_w.dumps(m))
    before = locked.lock_path.read_bytes()
    r = frt_process(["lock"], cwd=locked.root)
    assert r.returncode == 1 and locked.lock_path.read_bytes() == before
    assert "3 lost, 0 dropped" in r.stdout
    assert f"error: tiny: lost {CELL} route fast: receipts/tiny/00-fast-decode.json is rejected: unsigned: no " \
           "receipts/tiny/00-fast-decode.json.sig or" in r.stderr
    assert "hint: sign it with a key the policy lists: `frt sign --key KEY receipts/tiny/00-fast-decode.json`, " \
           "then `frt lock --model tiny`" in r.stderr
    # signed: accepted again; nothing lost against the old lock (the same receipts, now with signers)
    assert frt_process(["sign", "--key", str(priv), *sorted(str(p) for p in (locked.root / "receipts" / "tiny").glob("*.json"))],
                   cwd=locked.root).returncode == 0
    r = frt_process(["lock"], cwd=locked.root)
    assert r.returncode == 0 and "3 receipts, 0 rejected, 2 cells; coverage unchanged" in r.stdout, r.stdout + r.stderr


def test_coverage_diff_is_pure_over_two_locks(locked):
    """The function another command (a release upgrade) reuses: two lockfiles in, the diff out."""
    old = Lockfile.read(locked.lock_path)
    (locked.root / "receipts" / "tiny" / "02-solo-decode.json").unlink()
    new = _lock(locked, allow_loss=True).lockfile
    d = coverage_diff(old, new)
    assert [(c.kind, "/".join(c.cell), c.route) for c in d.changes] == [("lost", CELL, "solo")]
    assert d.lines() == [f"lost     {CELL}  route solo (certified_fast): receipts/tiny/02-solo-decode.json is no "
                         "longer among the receipts (removed or renamed since the last lock)"]
    assert coverage_diff(None, new).first and coverage_diff(new, new).changes == ()


@pytest.mark.subprocess
def test_a_loss_in_one_model_leaves_its_lock_and_writes_the_others(locked):
    """Several models: the one that would lose coverage is refused (its lockfile as it was), the
    others are locked and written, and the run exits 1."""
    from helpers.factories import manifest_doc

    (locked.root / "manifests" / "other.toml").write_text(tomli_w.dumps(manifest_doc(model="other")))
    assert _lock_other(locked).written
    other_lock = Lockfile.read(locked.root / "lockfiles" / "other.lock")
    _write_receipt(locked, "../other/00-fast-decode.json", receipt_doc(other_lock, "fast", "decode"))
    (locked.root / "receipts" / "tiny" / "02-solo-decode.json").unlink()
    before = locked.lock_path.read_bytes()
    r = frt_process(["lock"], cwd=locked.root)
    assert r.returncode == 1, r.stdout + r.stderr
    assert locked.lock_path.read_bytes() == before
    assert "lockfiles/tiny.lock: not written, coverage would shrink" in r.stdout
    assert "lockfiles/other.lock: written (2 packages, 1 receipts, 0 rejected, 1 cells; 0 lost, 0 dropped, 0 changed, " \
           "1 gained)" in r.stdout
    assert f"error: tiny: lost {CELL} route solo: receipts/tiny/02-solo-decode.json is no longer among the receipts" \
        in r.stderr


def _lock_other(tp):
    return lock_model(tp.project, "other", warn=lambda m: None)
