"""Rejections say why, and what to run, where the user meets them (real keys, real locks):

- `frt resolve` names the rejected receipt of the very band asked for (its signature failed), not
  the phases the other receipts cover;
- a receipt signed by a key the policy no longer lists names that key's file, which the previous
  lock pinned, not a bare keyid;
- `frt sign` given a glob that matches signature files skips them with a note;
- `frt verify` reports a receipt file in the project that is not the receipt the lock embeds as stale.
"""

from __future__ import annotations

import json
import shutil

import pytest

from frt_dist.base.canonical import short_digests
from frt_dist.documents.lockfile import Lockfile
from frt_dist.lock.build import lock_model
from frt_dist.routes.resolver import resolve
from helpers.frt import frt_process

pytest.importorskip("cryptography")
from test_receipt_signing import H200, Proj, keyid_of


def test_resolve_names_the_rejected_receipt_of_the_band_not_the_other_phase(tmp_path):
    p = Proj(tmp_path, receipts=(("fast", "decode", H200), ("fast", "prefill", H200)))
    priv, pub = p.key("ci")
    p.policy(keys=[pub])
    p.sign(priv)
    doc = json.loads(p.receipts[0].read_text())
    doc["evidence"]["timing"]["speedup-max"] = 1.4  # the decode receipt edited after signing
    p.receipts[0].write_text(json.dumps(doc))
    lock = p.lock()
    assert [r.file.rsplit("/", 1)[-1] for r in lock.receipts.values()] == [p.receipts[1].name]
    d = resolve(Lockfile.read(p.tp.lock_path), hardware=H200, phase="decode")
    assert d.decision == "refused"
    [reason] = [r.reason for r in d.reasons if r.route == "fast"]
    assert "receipts cover phase" not in reason
    assert reason.startswith("no receipt for this cell: 1 rejected at lock time (receipts/tiny/00-fast-decode-h200.json: "
                             "signature: receipts/tiny/00-fast-decode-h200.json.sig: the signature is over receipt digest")
    assert "the receipt was edited after signing" in reason


@pytest.mark.subprocess
def test_an_unlisted_key_is_named_by_the_file_the_previous_lock_pinned(tmp_path):
    p = Proj(tmp_path)
    old, old_pub = p.key("ci-2025")
    _, new_pub = p.key("ci-2026")
    p.policy(keys=[old_pub])
    p.sign(old)
    assert p.lock().rejected == []
    p.policy(keys=[new_pub])  # the key rotated out before the receipt was signed again
    before = p.tp.lock_path.read_bytes()
    r = frt_process(["lock"], cwd=p.root)
    assert r.returncode == 1 and p.tp.lock_path.read_bytes() == before  # a lost cell
    want = (f"signed by {keyid_of(p.root / old_pub)} ({old_pub}, which the previous lock pinned), which the policy "
            f"does not list (listed keys: {keyid_of(p.root / new_pub)} ({new_pub}))")
    assert short_digests(want) in r.stderr, r.stderr  # a person reads 12 hex; the lockfile keeps the whole digest
    assert f"hint: {p.receipts[0].relative_to(p.root)}: sign it again with a key the policy lists" in r.stderr
    # without a previous lock to say which file it was, the keyid alone
    p.tp.lock_path.unlink()
    reason = p.rejected(p.lock())[p.receipts[0].name]
    assert f"signed by {keyid_of(p.root / old_pub)}, which the policy does not list" in reason


@pytest.mark.subprocess
def test_sign_skips_signature_files_a_glob_matched(tmp_path):
    p = Proj(tmp_path, receipts=(("fast", "decode", H200), ("fast", "prefill", H200)))
    priv, _ = p.key("ci")
    p.sign(priv)
    every = sorted(str(x) for x in (p.root / "receipts" / "tiny").iterdir())  # receipts/tiny/*
    assert len(every) == 4
    r = frt_process(["sign", "--key", str(priv), *every], cwd=p.root)
    assert r.returncode == 0, r.stderr
    sigs = [x for x in every if x.endswith(".sig")]
    for s in sigs:
        assert f"note: skipped {s}: a signature file, not a receipt" in r.stderr
    assert r.stdout.count(": signed sha256:") == 2
    assert not list((p.root / "receipts" / "tiny").glob("*.sig.sig"))
    doc = json.loads(frt_process(["sign", "--key", str(priv), "--json", *every], cwd=p.root).stdout)
    assert [s["file"] for s in doc["skipped"]] == sigs and len(doc["signed"]) == 2
    # nothing but signature files: nothing to sign is a usage error
    r = frt_process(["sign", "--key", str(priv), *sigs], cwd=p.root)
    assert r.returncode == 2
    assert r.stderr.startswith(f"error: no receipt to sign among the 2 file(s) given: {sigs[0]}: a signature file")
    assert "hint: name the receipts (*.json)" in r.stderr


@pytest.mark.subprocess
def test_verify_reports_a_receipt_file_that_differs_from_the_locked_one_as_stale(tmp_path):
    p = Proj(tmp_path)
    p.lock()
    rel = str(p.receipts[0].relative_to(p.root))
    assert frt_process(["verify"], cwd=p.root).returncode == 0
    doc = json.loads(p.receipts[0].read_text())
    p.receipts[0].write_text(json.dumps(doc, indent=4))  # another layout, the same receipt: not stale
    assert frt_process(["verify"], cwd=p.root).returncode == 0
    locked = Lockfile.read(p.tp.lock_path)
    [dig] = locked.receipts
    doc["evidence"]["timing"]["speedup-max"] = 1.4  # re-qualified, or edited, after the lock
    p.receipts[0].write_text(json.dumps(doc))
    r = frt_process(["verify", "--json"], cwd=p.root)
    assert r.returncode == 1
    [prob] = json.loads(r.stdout)["problems"]
    assert prob["kind"] == "stale" and prob["file"] == rel and prob["expected"] == dig
    assert prob["path"] == f"lockfiles/tiny.lock: receipts ({rel})"
    r = frt_process(["verify"], cwd=p.root)
    assert r.returncode == 1
    assert f"stale: {rel} in the project is not the receipt lockfiles/tiny.lock embeds (locked {dig[:19]}, the file " \
           "is sha256:" in r.stdout
    assert "it was re-qualified or edited after `frt lock`" in r.stdout
    assert "hint: lock the receipt now in the project with `frt lock --model tiny` (it is judged again), or restore " \
           "the locked one" in r.stderr
    # locked again: verify agrees (a receipt file that is not there is no problem: the lock carries it)
    assert lock_model(p.tp.project, "tiny", warn=lambda m: None).written
    assert frt_process(["verify"], cwd=p.root).returncode == 0
    shutil.rmtree(p.root / "receipts")
    assert frt_process(["verify"], cwd=p.root).returncode == 0
