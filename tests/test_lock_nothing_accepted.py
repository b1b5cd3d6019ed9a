"""No empty lock by accident (SPEC item 47): a model that has receipts and none accepted is `frt lock`
exit 1, each rejection named on one line, the lockfile left as it was (or not written), unless
``--allow-loss``. A model with no receipts at all still locks (a first project has none yet).
The release's own case (every receipt rejected before `frt release trust`) is in test_release.py.
"""

from __future__ import annotations

import json

from frt_dist.documents.lockfile import Lockfile
from frt_dist.errors import NothingAccepted
from frt_dist.lock.build import lock_model
from helpers.factories import receipt_doc, tiny_project
from helpers.frt import frt_main


def _frt(tp, *args):
    return frt_main(["--project", str(tp.root), *args])


def _receipt(tp, name: str, doc: dict):
    p = tp.root / "receipts" / tp.model / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(doc, indent=1), "utf-8")
    return p


def test_no_receipts_locks_with_no_cells(tmp_path):
    tp = tiny_project(tmp_path)
    r = _frt(tp, "lock")
    assert r.code == 0, r.err
    assert len(Lockfile.read(tp.lock_path).index) == 0


def test_every_receipt_rejected_is_exit_1_naming_each_and_writes_nothing(tmp_path):
    tp = tiny_project(tmp_path)
    assert _frt(tp, "lock").code == 0  # no receipts yet: a lock with no cells, on purpose
    before = tp.lock_path.read_bytes()
    lf = Lockfile.read(tp.lock_path)
    good = receipt_doc(lf, "fast", "decode")
    bad_state = dict(good, state="certified_fast")
    bad_state["evidence"] = dict(good["evidence"], fallbacks=3)  # certified_fast with fallbacks: invalid
    _receipt(tp, "fallbacks.json", bad_state)
    other = receipt_doc(lf, "solo", "prefill")
    other["cell"] = dict(other["cell"], **{"route-digest": "sha256:" + "0" * 64})
    _receipt(tp, "old-route.json", other)
    (tp.root / "receipts" / tp.model / "broken.json").write_text("{not json", "utf-8")
    r = _frt(tp, "lock")
    assert r.code == 1, r.err
    assert tp.lock_path.read_bytes() == before  # the lock it would replace stays
    assert "lockfiles/tiny.lock: not written, no receipt accepted" in r.out
    assert "error: tiny: none of its 3 receipt(s) is accepted: the lock would route no cell; lockfiles/tiny.lock " \
           "is unchanged" in r.err
    errors = [ln for ln in r.err.splitlines() if ln.startswith("error: tiny: rejected ")]
    assert len(errors) == 3 and not any(ln.startswith("warning: receipts/") for ln in r.err.splitlines())
    by_file = {ln.split()[3]: ln for ln in errors}
    assert set(by_file) == {"receipts/tiny/broken.json", "receipts/tiny/fallbacks.json", "receipts/tiny/old-route.json"}
    assert "fallbacks" in by_file["receipts/tiny/fallbacks.json"]
    assert "route-digest" in by_file["receipts/tiny/old-route.json"]
    assert "(receipt digest sha256:" in by_file["receipts/tiny/old-route.json"]
    assert "hint: re-qualify on device class test: `frt qualify --model tiny --route solo --phase prefill`, then " \
           "`frt lock --model tiny`" in r.err
    assert "hint: to write a lock that routes no cell on purpose: `frt lock --model tiny --allow-loss`" in r.err
    # --allow-loss writes it, the rejections recorded
    r = _frt(tp, "lock", "--allow-loss")
    assert r.code == 0, r.err
    assert len(Lockfile.read(tp.lock_path).rejected) == 3


def test_one_accepted_receipt_is_enough(tmp_path):
    tp = tiny_project(tmp_path)
    assert _frt(tp, "lock").code == 0
    lf = Lockfile.read(tp.lock_path)
    _receipt(tp, "ok.json", receipt_doc(lf, "fast", "decode"))
    (tp.root / "receipts" / tp.model / "broken.json").write_text("{not json", "utf-8")
    r = _frt(tp, "lock")
    assert r.code == 0, r.err
    assert "warning: receipts/tiny/broken.json: " in r.err  # a rejection beside an accepted receipt stays a warning


def test_a_first_lock_with_only_rejected_receipts_is_refused_too(tmp_path):
    tp = tiny_project(tmp_path)
    (tp.root / "receipts" / tp.model).mkdir(parents=True)
    (tp.root / "receipts" / tp.model / "broken.json").write_text("{not json", "utf-8")
    try:
        lock_model(tp.project, tp.model, warn=lambda m: None)
    except NothingAccepted as exc:
        assert exc.exit_code == 1 and [r["file"] for r in exc.reasons] == ["receipts/tiny/broken.json"]
        assert "is not written" in str(exc)
    else:
        raise AssertionError("a lock with only rejected receipts was written")
    assert not tp.lock_path.exists()
    assert lock_model(tp.project, tp.model, warn=lambda m: None, allow_loss=True).written
