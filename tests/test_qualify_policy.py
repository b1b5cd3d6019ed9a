"""Qualifying under a receipt-signing policy, and re-qualifying without losing the old receipt.

Where the manifest's ``[trust.receipts]`` covers this machine, `frt qualify` without ``--sign`` is
exit 2 before it measures (``--unsigned`` proceeds on purpose), and so is a ``--sign`` key the
policy does not list. A receipt already at the name a new one is written under is kept: its
signature files and then the receipt move aside (``qualify.superseded_path``), so no signature
over the old bytes is left beside the new ones. Real keys, made with ``cryptography``.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import tomli_w

from frt_dist.base.canonical import digest
from frt_dist.documents.lockfile import Lockfile
from frt_dist.documents.manifest import Manifest
from frt_dist.documents.receipt import superseded_path
from frt_dist.errors import UsageError
from frt_dist.lock.build import lock_model
from frt_dist.provenance import signing
from frt_dist.qualify.receipts import check_signing_policy, keep_previous, write_receipt
from helpers.factories import receipt_doc, tiny_project
from helpers.frt import frt_process
from helpers.gpu import needs_no_gpu
from helpers.paths import HELPERS, ROOT

pytest.importorskip("cryptography")
from test_receipt_signing import H200, make_key

ENV = {"PYTHONPATH": f"{ROOT}{os.pathsep}{HELPERS}"}  # this checkout's frt_dist, and the toy host


# ---------------------------------------------------------------------------
# re-qualifying keeps the previous receipt, and never leaves its signature beside a new one


@pytest.fixture
def signed(tmp_path):
    """A tiny project under a key policy with one signed h200 receipt written as qualify names it."""
    tp = tiny_project(tmp_path)
    tp.lock()
    priv, pub = make_key(tmp_path / "secrets", "ci")
    (tp.root / "keys").mkdir()
    shutil.copy(pub, tp.root / "keys" / "ci.pub")
    (tp.root / "manifests" / "tiny.toml").write_text(tomli_w.dumps(dict(tp.manifest, trust={"receipts": {"keys": ["keys/ci.pub"]}})))
    lk = Lockfile.read(tp.lock_path)
    folder = tp.root / "receipts" / "tiny"
    doc = receipt_doc(lk, "fast", "decode", H200)
    path = write_receipt(doc, folder)
    key = signing.load_private_key(priv)
    signing.sign_receipt(path, key)
    lock = lock_model(tp.project, "tiny", warn=lambda m: None).lockfile
    assert lock.rejected == [] and len(lock.receipts) == 1
    return tp, lk, folder, path, key, doc


def test_a_rewritten_receipt_leaves_no_old_signature_beside_it(signed):
    tp, lk, folder, path, key, old = signed
    assert path.name == "fast--decode--fp32--h200.json"
    old_bytes, old_sig = path.read_bytes(), Path(str(path) + ".sig").read_bytes()
    new = receipt_doc(lk, "fast", "decode", H200, speedup=1.4)
    kept: list = []
    assert write_receipt(new, folder, kept=kept) == path
    aside = superseded_path(path, digest(old))
    assert aside.name == f"fast--decode--fp32--h200.json.superseded-{digest(old)[7:19]}"
    assert kept == [Path(str(aside) + ".sig"), aside]
    assert aside.read_bytes() == old_bytes and Path(str(aside) + ".sig").read_bytes() == old_sig
    assert not Path(str(path) + ".sig").exists()  # the old signature is not beside the new receipt
    assert json.loads(path.read_text()) == new
    # the lock says what is true: unsigned, not "edited after signing"; the kept receipt is not read
    lock = lock_model(tp.project, "tiny", warn=lambda m: None, allow_loss=True).lockfile
    [rj] = lock.rejected
    assert rj["file"] == "receipts/tiny/fast--decode--fp32--h200.json"
    assert rj["reason"].startswith("unsigned: no receipts/tiny/fast--decode--fp32--h200.json.sig"), rj["reason"]
    assert "edited after signing" not in rj["reason"]
    # signed again: accepted, and the lock's diff calls it a change of receipt
    signing.sign_receipt(path, key)
    res = lock_model(tp.project, "tiny", warn=lambda m: None)
    assert res.lockfile.rejected == [] and digest(new) in res.lockfile.receipts
    assert [c.kind for c in res.coverage.changes] == ["gained"]  # (against the lock --allow-loss wrote)


@pytest.mark.subprocess
def test_the_kept_receipt_is_named_by_the_loss_it_would_undo(signed):
    """Re-qualified as supported_correct: `frt lock` refuses the drop and says where the previous
    receipt was kept and how to put it back."""
    tp, lk, folder, path, key, old = signed
    write_receipt(receipt_doc(lk, "fast", "decode", H200, state="supported_correct", speedup=1.0), folder)
    signing.sign_receipt(path, key)
    r = frt_process(["lock"], cwd=tp.root)
    assert r.returncode == 1
    aside = f"receipts/tiny/fast--decode--fp32--h200.json.superseded-{digest(old)[7:19]}"
    assert "dropped  decode/fp32/cpu/x86_64/h200  route fast (certified_fast -> supported_correct)" in r.stdout
    assert f"hint: re-qualifying kept the previous receipt as {aside}: to publish it again, move it back to " \
           "receipts/tiny/fast--decode--fp32--h200.json (with its .sig), then `frt lock --model tiny`" in r.stderr


def test_the_same_receipt_again_moves_nothing_and_keeps_its_signature(signed):
    tp, lk, folder, path, key, old = signed
    sig = Path(str(path) + ".sig").read_bytes()
    kept: list = []
    write_receipt(old, folder, kept=kept)
    assert kept == [] and Path(str(path) + ".sig").read_bytes() == sig
    assert sorted(p.name for p in folder.iterdir()) == [path.name, path.name + ".sig"]


def test_a_signature_without_its_receipt_is_moved_aside(tmp_path):
    folder = tmp_path / "r"
    folder.mkdir()
    target = folder / "x.json"
    orphan = folder / "x.json.sig"
    orphan.write_bytes(b'{"payloadType": "old"}')
    moved = keep_previous(target, "sha256:" + "a" * 64)
    [dest] = moved
    assert not orphan.exists() and dest.read_bytes() == b'{"payloadType": "old"}'
    assert dest.name.startswith("x.json.superseded-") and dest.name.endswith(".sig")


def test_lock_and_push_pass_a_kept_receipt_by(signed):
    """The kept name does not end in .json: neither `frt lock` nor any *.json glob reads it."""
    tp, lk, folder, path, key, old = signed
    write_receipt(receipt_doc(lk, "fast", "decode", H200, speedup=1.4), folder)
    assert [p.name for p in folder.glob("*.json")] == [path.name]
    from frt_dist.lock.build import _Locker

    found = _Locker(tp.project).receipts_for(Manifest.read(tp.root / "manifests" / "tiny.toml"))
    assert [label for label, _, _ in found] == ["receipts/tiny/fast--decode--fp32--h200.json"]


# ---------------------------------------------------------------------------
# qualify under a policy: refused before anything is measured


def _policy(root: Path, model: str, keys=("keys/ci.pub",), **extra) -> None:
    m = root / "manifests" / f"{model}.toml"
    body = "keys = [" + ", ".join(f'"{k}"' for k in keys) + "]\n"
    body += "".join(f"{k} = {json.dumps(v)}\n" for k, v in extra.items())
    m.write_text(m.read_text() + "\n[trust.receipts]\n" + body)


@pytest.mark.subprocess
def test_qualify_without_sign_under_a_policy_is_exit_2_before_measuring(qproject, tmp_path):
    priv, pub = make_key(tmp_path / "secrets", "ci")
    (qproject / "keys").mkdir()
    shutil.copy(pub, qproject / "keys" / "ci.pub")
    _policy(qproject, "toyq")
    r = frt_process(["qualify", "--model", "toyq", "--route", "fastscale"], cwd=qproject, env=ENV)
    assert r.returncode == 2, r.stdout + r.stderr
    first = r.stderr.splitlines()[0]
    assert first.startswith("error: manifests/toyq.toml: [trust.receipts] covers device class ")
    assert first.endswith("(this machine): an unsigned receipt would be rejected by `frt lock`; nothing was measured")
    assert "hint: sign as you qualify: frt qualify --model toyq --route fastscale --sign KEY" in r.stderr
    assert "listed: keys/ci.pub" in r.stderr and "hint: or pass --unsigned" in r.stderr
    assert "qualifying" not in r.stderr and "Traceback" not in r.stderr
    assert not list((qproject / "receipts").rglob("*.json"))
    # --json: the error document
    r = frt_process(["qualify", "--model", "toyq", "--route", "fastscale", "--json"], cwd=qproject, env=ENV)
    doc = json.loads(r.stdout)
    assert r.returncode == 2 and doc["exit"] == 2 and "[trust.receipts] covers device class" in doc["error"]
    # a key the policy does not list: refused the same way, naming both keys
    other, _ = make_key(tmp_path / "secrets", "other")
    r = frt_process(["qualify", "--model", "toyq", "--route", "fastscale", "--sign", str(other)], cwd=qproject, env=ENV)
    assert r.returncode == 2
    assert r.stderr.startswith(f"error: --sign: key {signing.keyid(signing.load_private_key(other).public_key())} is "
                               "not one manifests/toyq.toml: [trust.receipts] lists (listed: keys/ci.pub (sha256:")
    assert "`frt lock` would reject the receipts it signs; nothing was measured" in r.stderr
    # both flags at once is a usage error
    r = frt_process(["qualify", "--model", "toyq", "--route", "fastscale", "--sign", str(priv), "--unsigned"],
                cwd=qproject, env=ENV)
    assert r.returncode == 2 and "not allowed with argument" in r.stderr


def test_check_signing_policy_rules(tmp_path):
    priv, pub = make_key(tmp_path / "keys", "ci")
    from frt_dist.documents.manifest import ReceiptPolicy

    policy = ReceiptPolicy(keys=("keys/ci.pub",), device_classes=("h200",))
    key = signing.load_private_key(priv)
    # not covered, or --unsigned, or a listed key: nothing to say
    check_signing_policy(policy, "rtx-5090", manifest_file="m.toml")
    check_signing_policy(policy, "h200", manifest_file="m.toml", unsigned=True)
    check_signing_policy(policy, "h200", manifest_file="m.toml", key=key, root=tmp_path)
    check_signing_policy(None, "h200", manifest_file="m.toml")
    with pytest.raises(UsageError, match=r"^m.toml: \[trust.receipts\] covers device class 'h200' \(this machine\)"):
        check_signing_policy(policy, "h200", manifest_file="m.toml")


@needs_no_gpu  # qualifies CPU-only packages on the detected hardware
@pytest.mark.subprocess
@pytest.mark.slow
def test_requalifying_keeps_the_previous_receipt_and_its_signature(qproject, tmp_path):
    priv, pub = make_key(tmp_path / "secrets", "ci")
    (qproject / "keys").mkdir()
    shutil.copy(pub, qproject / "keys" / "ci.pub")
    _policy(qproject, "toyq")
    args = ["qualify", "--model", "toyq", "--route", "fastscale", "--rounds", "6", "--json"]
    r = frt_process([*args, "--unsigned"], cwd=qproject, env=ENV)  # on purpose: signed afterwards
    assert r.returncode == 0, r.stdout + r.stderr
    [res] = json.loads(r.stdout)["results"]
    first = qproject / res["receipt"]
    assert res["signature"] is None and not Path(str(first) + ".sig").exists()
    assert frt_process(["sign", "--key", str(priv), str(first)], cwd=qproject).returncode == 0
    old_bytes = first.read_bytes()
    r = frt_process([*args, "--sign", str(priv)], cwd=qproject, env=ENV)
    assert r.returncode == 0, r.stdout + r.stderr
    [res] = json.loads(r.stdout)["results"]
    assert qproject / res["receipt"] == first and first.read_bytes() != old_bytes
    aside = superseded_path(first, digest(json.loads(old_bytes)))
    assert res["kept"] == [str(aside.relative_to(qproject)) + ".sig", str(aside.relative_to(qproject))]
    assert aside.read_bytes() == old_bytes and Path(str(aside) + ".sig").is_file()
    lock = lock_model(_project(qproject), "toyq", warn=lambda m: None, allow_loss=True).lockfile
    assert lock.rejected == [], lock.rejected  # signed by a listed key over its own bytes
    assert [r.file for r in lock.receipts.values()] == [res["receipt"]]


def _project(root):
    from frt_dist.project.discover import Project

    return Project(root, "project", {})
