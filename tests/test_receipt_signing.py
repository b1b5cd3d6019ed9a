"""Signed receipts and the receipt-signer policy.

Real keys (made here with ``cryptography``), real envelopes written by ``frt sign``, real
locks. Oracles frt did not write: ``openssl`` for the keyid, the DSSE spec's own PAE vector
and ``sigstore``'s PAE for the encoding, ``cryptography`` verifying an envelope the test
reads itself, and the real Sigstore bundles in ``tests/data/sigstore`` for keyless checks.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import tomli_w

from frt_dist.base.canonical import canonical_json, digest
from frt_dist.documents.lockfile import Lockfile, render
from frt_dist.documents.schema import parse_toml
from frt_dist.errors import LockfileError, ManifestError, UsageError
from frt_dist.lock.build import lock_model
from frt_dist.provenance import signing
from frt_dist.provenance.signing import PAYLOAD_TYPE, PREDICATE_TYPE, STATEMENT_TYPE, check_bundle, pae
from frt_dist.system.hardware import Hardware
from helpers.factories import receipt_doc, tiny_project
from helpers.frt import frt_process
from helpers.gpu import needs_no_gpu
from helpers.paths import BUNDLED, DATA, HELPERS, ROOT

crypto = pytest.importorskip("cryptography")
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa  # noqa: E402

SIGSTORE_DATA = DATA / "sigstore"  # the real bundles (its README says whence)
H200 = Hardware(arch="x86_64", device_class="h200", backend="cpu", software={"torch": "2.13"})
RTX = Hardware(arch="x86_64", device_class="rtx-5090", backend="cpu", software={"torch": "2.13"})
# (device classes on a cpu backend: the policy judges the class name only; a CPU cell keeps the test fast)


# ---------------------------------------------------------------------------
# helpers


def make_key(folder: Path, name: str, kind: str = "ed25519"):
    """A private key file ``<name>.pem`` and its public key ``<name>.pub`` under ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    key = ed25519.Ed25519PrivateKey.generate() if kind == "ed25519" else ec.generate_private_key(ec.SECP256R1())
    priv = folder / f"{name}.pem"
    priv.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    pub = folder / f"{name}.pub"
    pub.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                  serialization.PublicFormat.SubjectPublicKeyInfo))
    return priv, pub


def keyid_of(pub: Path) -> str:
    der = serialization.load_pem_public_key(pub.read_bytes()).public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return "sha256:" + hashlib.sha256(der).hexdigest()


class Proj:
    """A tiny project with receipts on disk (``receipts/tiny/*.json``) and a policy editor."""

    def __init__(self, tmp_path: Path, receipts=(("fast", "decode", H200),)):
        self.tp = tiny_project(tmp_path)
        self.root = self.tp.root
        self.tp.lock()
        lf = Lockfile.read(self.tp.lock_path)
        self.receipts = []
        rdir = self.root / "receipts" / "tiny"
        rdir.mkdir(parents=True, exist_ok=True)
        for i, (route, phase, hw) in enumerate(receipts):
            p = rdir / f"{i:02d}-{route}-{phase}-{hw.device_class}.json"
            p.write_text(json.dumps(receipt_doc(lf, route, phase, hw), indent=1), "utf-8")
            self.receipts.append(p)

    def policy(self, **trust) -> None:
        m = dict(self.tp.manifest)
        m["trust"] = {"receipts": trust}
        (self.root / "manifests" / "tiny.toml").write_text(tomli_w.dumps(m), "utf-8")

    def key(self, name: str, kind: str = "ed25519") -> tuple[Path, str]:
        """(private key path outside the project, public key path relative to the project)."""
        priv, pub = make_key(self.root.parent / "secrets", name, kind)
        (self.root / "keys").mkdir(exist_ok=True)
        shutil.copy(pub, self.root / "keys" / pub.name)
        return priv, f"keys/{pub.name}"

    def sign(self, priv: Path, *receipts: Path) -> None:
        key = signing.load_private_key(priv)
        for r in receipts or self.receipts:
            signing.sign_receipt(r, key)

    def lock(self):
        # the lock is written whatever it accepts: these tests read its rejections (a lock that accepts
        # nothing is refused without --allow-loss: test_lock_nothing_accepted.py)
        return lock_model(self.tp.project, "tiny", warn=lambda m: None, allow_loss=True).lockfile

    def rejected(self, lock) -> dict:
        return {r["file"].rsplit("/", 1)[-1]: r["reason"] for r in lock.rejected}


def verify_json(root: Path) -> tuple[int, dict]:
    r = frt_process(["verify", "--json"], cwd=root)
    assert "Traceback" not in r.stderr, r.stderr
    return r.returncode, json.loads(r.stdout)


def sig_problems(doc: dict) -> list[dict]:
    return [p for p in doc["problems"] if p["kind"] == "signature"]


def edit_lock(path: Path, change) -> None:
    """Edit a lockfile as an author with an editor would, recomputing its lock-digest."""
    doc = parse_toml(path.read_bytes(), LockfileError, str(path))
    doc.pop("lock-digest")
    rows = json.loads(doc["receipt-signatures"])
    change(doc, rows)
    doc["receipt-signatures"] = "[\n" + ",\n".join(json.dumps(r, sort_keys=True) for r in rows) + "\n]\n"
    path.write_bytes(render(doc, digest(doc)))
    Lockfile.read(path)  # reads as an undamaged lockfile


# ---------------------------------------------------------------------------
# the envelope, against oracles frt did not write


def test_pae_matches_the_dsse_spec_vector_and_sigstore():
    # the example in the DSSE protocol specification (secure-systems-lab/dsse, protocol.md)
    assert pae("http://example.com/HelloWorld", b"hello world") == b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    from sigstore.dsse import _pae  # sigstore-python's own encoding, as a second oracle

    body = canonical_json({"_type": STATEMENT_TYPE, "x": "é"})
    assert pae(PAYLOAD_TYPE, body) == _pae(PAYLOAD_TYPE, body)


@pytest.mark.parametrize("kind", ["ed25519", "ec"])
@pytest.mark.subprocess
def test_keyid_is_what_openssl_prints(tmp_path, kind):
    if not shutil.which("openssl"):
        pytest.skip("no openssl on PATH")
    priv, pub = make_key(tmp_path, "k", kind)
    der = subprocess.run(["openssl", "pkey", "-pubin", "-in", str(pub), "-outform", "DER"], capture_output=True,
                         check=True).stdout
    want = "sha256:" + hashlib.sha256(der).hexdigest()
    assert signing.keyid(signing.load_private_key(priv).public_key()) == want
    # and from the private key, as openssl derives the public half itself
    der2 = subprocess.run(["openssl", "pkey", "-in", str(priv), "-pubout", "-outform", "DER"], capture_output=True,
                          check=True).stdout
    assert "sha256:" + hashlib.sha256(der2).hexdigest() == want


@pytest.mark.parametrize("kind", ["ed25519", "ec"])
@pytest.mark.subprocess
def test_frt_sign_writes_a_dsse_envelope_over_the_receipt_digest(tmp_path, kind):
    p = Proj(tmp_path)
    priv, pub = p.key("ci", kind)
    r = frt_process(["sign", "--key", str(priv), str(p.receipts[0]), "--json"], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    env_path = Path(str(p.receipts[0]) + ".sig")
    assert out["signed"][0]["signature"] == str(env_path)
    env = json.loads(env_path.read_text())
    assert env["payloadType"] == "application/vnd.in-toto+json"
    [s] = env["signatures"]
    assert s["keyid"] == keyid_of(p.root / pub) == out["signed"][0]["keyid"]
    payload = base64.b64decode(env["payload"])
    st = json.loads(payload)
    receipt = json.loads(p.receipts[0].read_text())
    assert st["_type"] == "https://in-toto.io/Statement/v1"
    assert st["subject"] == [{"name": p.receipts[0].name,
                              "digest": {"sha256": hashlib.sha256(canonical_json(receipt)).hexdigest()}}]
    assert st["predicateType"] == PREDICATE_TYPE and st["predicate"]["device-class"] == "h200"
    # the signature is over DSSE's PAE, checked with cryptography and sigstore's PAE (not frt's)
    from sigstore.dsse import _pae

    pubkey = serialization.load_pem_public_key((p.root / pub).read_bytes())
    sig = base64.b64decode(s["sig"])
    msg = _pae("application/vnd.in-toto+json", payload)
    pubkey.verify(sig, msg, ec.ECDSA(hashes.SHA256())) if kind == "ec" else pubkey.verify(sig, msg)


# ---------------------------------------------------------------------------
# frt lock under a policy


@pytest.mark.parametrize("kind", ["ed25519", "ec"])
@pytest.mark.subprocess
def test_signed_receipt_is_accepted_and_its_signer_recorded(tmp_path, kind):
    p = Proj(tmp_path)
    priv, pub = p.key("ci", kind)
    p.policy(keys=[pub])
    p.sign(priv)
    lock = p.lock()
    assert lock.rejected == []
    [dig] = lock.receipts
    assert lock.signatures[dig]["signer"] == keyid_of(p.root / pub)
    assert lock.signatures[dig]["kind"] == "key"
    assert lock.receipt_keys == {pub: {"keyid": keyid_of(p.root / pub), "pem": (p.root / pub).read_text()}}
    code, doc = verify_json(p.root)
    assert code == 0 and doc["ok"], doc
    # deterministic: locking again writes the same bytes (an ECDSA envelope is read, not made, at lock)
    before = p.tp.lock_path.read_bytes()
    assert p.lock() and p.tp.lock_path.read_bytes() == before
    assert frt_process(["lock", "--check"], cwd=p.root).returncode == 0


def test_without_a_policy_signatures_change_nothing(tmp_path):
    p = Proj(tmp_path)
    p.lock()
    before = p.tp.lock_path.read_bytes()
    priv, _ = p.key("ci")
    p.sign(priv)
    p.lock()
    after = p.tp.lock_path.read_bytes()
    assert after == before  # byte-identical: no signature section, no keys
    assert b"receipt-signatures" not in after and b"receipt-keys" not in after


@pytest.mark.subprocess
def test_the_bundled_demo_lock_is_still_up_to_date():
    r = frt_process(["--project", str(BUNDLED), "lock", "--check"], cwd=BUNDLED)
    assert r.returncode == 0, r.stdout + r.stderr


def test_unsigned_receipt_is_rejected_under_a_policy(tmp_path):
    p = Proj(tmp_path)
    _, pub = p.key("ci")
    p.policy(keys=[pub])
    lock = p.lock()
    assert lock.receipts == {} and lock.index == {}
    reason = p.rejected(lock)[p.receipts[0].name]
    assert reason.startswith("unsigned: no receipts/tiny/00-fast-decode-h200.json.sig or ")
    assert "covers device class 'h200'" in reason and f"key {pub}" in reason


def test_receipt_edited_after_signing_is_rejected(tmp_path):
    p = Proj(tmp_path)
    priv, pub = p.key("ci")
    p.policy(keys=[pub])
    p.sign(priv)
    doc = json.loads(p.receipts[0].read_text())
    doc["evidence"]["timing"]["speedup-max"] = 1.4  # still a valid receipt, but not the one signed
    p.receipts[0].write_text(json.dumps(doc))
    lock = p.lock()
    reason = p.rejected(lock)[p.receipts[0].name]
    assert reason.startswith("signature: receipts/tiny/00-fast-decode-h200.json.sig: the signature is over receipt digest")
    assert "the receipt was edited after signing" in reason
    assert digest(doc)[:19] in reason


def test_receipt_signed_by_an_unlisted_key_is_rejected(tmp_path):
    p = Proj(tmp_path)
    _, pub = p.key("ci")
    other, other_pub = p.key("intruder")
    p.policy(keys=[pub])
    p.sign(other)
    reason = p.rejected(p.lock())[p.receipts[0].name]
    assert f"signed by {keyid_of(p.root / other_pub)}, which the policy does not list" in reason
    assert keyid_of(p.root / pub) in reason  # the listed keys are named


def test_envelope_altered_after_signing_is_rejected(tmp_path):
    """A listed key's signature over another payload: the payload is swapped for one naming the
    receipt's new digest after an edit, the signature kept (the signature check, not the digest check)."""
    p = Proj(tmp_path)
    priv, pub = p.key("ci")
    p.policy(keys=[pub])
    p.sign(priv)
    sig = Path(str(p.receipts[0]) + ".sig")
    env = json.loads(sig.read_text())
    st = json.loads(base64.b64decode(env["payload"]))
    doc = json.loads(p.receipts[0].read_text())
    doc["evidence"]["timing"]["speedup-max"] = 1.4
    p.receipts[0].write_text(json.dumps(doc))
    st["subject"][0]["digest"]["sha256"] = digest(doc).removeprefix("sha256:")
    env["payload"] = base64.b64encode(canonical_json(st)).decode()
    sig.write_text(json.dumps(env))
    reason = p.rejected(p.lock())[p.receipts[0].name]
    assert "does not verify: the envelope was altered after signing" in reason


def _sign_statement(priv: Path, st: dict, payload_type: str = PAYLOAD_TYPE) -> dict:
    """A DSSE envelope made here (not by frt) over any statement, with a real signature."""
    key = serialization.load_pem_private_key(priv.read_bytes(), password=None)
    payload = canonical_json(st)
    sig = key.sign(pae(payload_type, payload))
    return {"payloadType": payload_type, "payload": base64.b64encode(payload).decode(),
            "signatures": [{"keyid": signing.keyid(key.public_key()), "sig": base64.b64encode(sig).decode()}]}


@pytest.mark.parametrize("change,want", [
    ({"predicateType": "https://slsa.dev/provenance/v1"}, "predicateType is 'https://slsa.dev/provenance/v1', not frt's"),
    ({"_type": "https://in-toto.io/Statement/v0.1"}, "not an in-toto Statement v1"),
    ({"payloadType": "application/json"}, "payloadType is 'application/json'"),
])
def test_a_signature_over_another_kind_of_statement_is_rejected(tmp_path, change, want):
    """A listed key's valid signature does not make any statement a receipt signature: the
    payload type, the statement type and frt's predicate type are each checked."""
    p = Proj(tmp_path)
    priv, pub = p.key("ci")
    p.policy(keys=[pub])
    p.sign(priv)
    sig = Path(str(p.receipts[0]) + ".sig")
    st = json.loads(base64.b64decode(json.loads(sig.read_text())["payload"]))
    ptype = change.pop("payloadType", PAYLOAD_TYPE)
    st.update(change)
    sig.write_text(json.dumps(_sign_statement(priv, st, ptype)))
    reason = p.rejected(p.lock())[p.receipts[0].name]
    assert want in reason, reason


def test_the_keyid_in_an_envelope_is_only_a_hint(tmp_path):
    """DSSE does not authenticate ``keyid``: an envelope by a listed key whose keyid is missing or
    wrong still verifies (with every listed key tried), and the signer recorded is the key that
    verified, not the hint."""
    p = Proj(tmp_path)
    priv, pub = p.key("ci")
    _, other_pub = p.key("other")
    p.policy(keys=[other_pub, pub])
    p.sign(priv)
    sig = Path(str(p.receipts[0]) + ".sig")
    env = json.loads(sig.read_text())
    env["signatures"][0]["keyid"] = "sha256:" + "ab" * 32
    sig.write_text(json.dumps(env))
    lock = p.lock()
    assert lock.rejected == []
    assert [r["signer"] for r in lock.signatures.values()] == [keyid_of(p.root / pub)]


@pytest.mark.subprocess
def test_two_keys_at_once_rotation(tmp_path):
    p = Proj(tmp_path, receipts=(("fast", "decode", H200), ("fast", "prefill", H200)))
    old, old_pub = p.key("ci-2025")
    new, new_pub = p.key("ci-2026", "ec")
    p.policy(keys=[old_pub, new_pub])
    p.sign(old, p.receipts[0])
    p.sign(new, p.receipts[1])
    lock = p.lock()
    assert lock.rejected == []
    signers = {row["file"].rsplit("/", 1)[-1]: row["signer"] for row in lock.signatures.values()}
    assert signers == {p.receipts[0].name: keyid_of(p.root / old_pub), p.receipts[1].name: keyid_of(p.root / new_pub)}
    assert verify_json(p.root)[0] == 0


@pytest.mark.subprocess
def test_policy_restricted_to_h200_covers_only_h200(tmp_path):
    """``device-classes = ["NVIDIA H200"]`` (normalised to h200) covers h200 receipts only: an
    unsigned rtx-5090 receipt is read as without a policy (accepted, no signer recorded); an
    unsigned h200 receipt is rejected; a signed h200 one is accepted with its signer."""
    p = Proj(tmp_path, receipts=(("fast", "decode", H200), ("fast", "decode", RTX), ("solo", "decode", H200)))
    priv, pub = p.key("ci")
    p.policy(keys=[pub], **{"device-classes": ["NVIDIA H200"]})
    p.sign(priv, p.receipts[0])
    lock = p.lock()
    assert set(p.rejected(lock)) == {p.receipts[2].name}
    assert p.rejected(lock)[p.receipts[2].name].startswith("unsigned:")
    accepted = {r.file.rsplit("/", 1)[-1]: d for d, r in lock.receipts.items()}
    assert set(accepted) == {p.receipts[0].name, p.receipts[1].name}
    assert set(lock.signatures) == {accepted[p.receipts[0].name]}  # the rtx-5090 receipt has no signer
    assert verify_json(p.root)[0] == 0
    # a signed rtx-5090 receipt is not judged either: a key outside the policy does not reject it
    other, _ = p.key("other")
    p.sign(other, p.receipts[1])
    lock = p.lock()
    assert p.receipts[1].name not in p.rejected(lock)


# ---------------------------------------------------------------------------
# frt verify re-checks offline


def _locked(tmp_path, n=1):
    receipts = (("fast", "decode", H200), ("fast", "prefill", H200))[:n]
    p = Proj(tmp_path, receipts=receipts)
    priv, pub = p.key("ci")
    p.policy(keys=[pub])
    p.sign(priv)
    p.lock()
    return p, priv, pub


@pytest.mark.subprocess
def test_verify_catches_a_sig_swapped_after_lock(tmp_path):
    p, _, _ = _locked(tmp_path)
    other, _ = p.key("intruder")
    p.sign(other)  # the .sig beside the receipt now holds another signer's envelope
    code, doc = verify_json(p.root)
    assert code == 1
    [prob] = sig_problems(doc)
    assert prob["path"].endswith("receipts/tiny/00-fast-decode-h200.json.sig")
    assert "replaced after `frt lock`" in prob["message"]
    assert "another envelope" in prob["derived"]


@pytest.mark.subprocess
def test_verify_catches_a_lock_edited_to_claim_another_signer(tmp_path):
    p, _, _ = _locked(tmp_path)
    _, other_pub = p.key("intruder")
    claimed = keyid_of(p.root / other_pub)

    def claim(doc, rows):
        rows[0]["signer"] = claimed

    edit_lock(p.tp.lock_path, claim)
    code, doc = verify_json(p.root)
    assert code == 1
    prob = [x for x in sig_problems(doc) if x["path"].endswith(".signer")][0]
    assert prob["recorded"] == claimed and prob["derived"] == keyid_of(p.root / "keys/ci.pub")
    assert "00-fast-decode-h200.json" in prob["path"]
    assert any(x["kind"] == "index" for x in doc["problems"])  # the receipt's cell is derived without it


@pytest.mark.subprocess
def test_verify_catches_an_embedded_envelope_moved_to_another_receipt(tmp_path):
    p, _, _ = _locked(tmp_path, n=2)

    def swap(doc, rows):
        rows[0]["envelope"], rows[1]["envelope"] = rows[1]["envelope"], rows[0]["envelope"]

    edit_lock(p.tp.lock_path, swap)
    code, doc = verify_json(p.root)
    assert code == 1
    probs = sig_problems(doc)
    assert len([x for x in probs if "is another receipt's" in x["derived"]]) == 2, probs


@pytest.mark.subprocess
def test_verify_catches_an_unsigned_receipt_in_a_lock_under_policy(tmp_path):
    p, _, _ = _locked(tmp_path)
    edit_lock(p.tp.lock_path, lambda doc, rows: rows.clear())
    code, doc = verify_json(p.root)
    assert code == 1
    [prob] = sig_problems(doc)
    assert prob["derived"].startswith("rejected: unsigned: the lock embeds no signature")


@pytest.mark.subprocess
def test_verify_and_check_catch_a_key_file_changed_after_lock(tmp_path):
    p, _, pub = _locked(tmp_path)
    _, other_pub = p.key("intruder")
    shutil.copy(p.root / other_pub, p.root / pub)
    code, doc = verify_json(p.root)
    assert code == 1
    [prob] = sig_problems(doc)
    assert prob["path"].endswith('receipt-keys."keys/ci.pub"') and "not the key the lock pinned" in prob["message"]
    assert prob["computed"] == keyid_of(p.root / pub)
    r = frt_process(["lock", "--check"], cwd=p.root)
    assert r.returncode == 1 and "keys/ci.pub" in r.stdout and "receipt signers' keys" in r.stdout


@pytest.mark.subprocess
def test_verify_catches_a_pinned_key_edited_in_the_lock(tmp_path):
    p, _, pub = _locked(tmp_path)
    (p.root / pub).unlink()  # the project's key file is gone: verify relies on the pinned PEM alone
    _, other_pub = p.key("intruder")

    def repin(doc, rows):
        doc["receipt-keys"][pub]["pem"] = (p.root / other_pub).read_text()

    edit_lock(p.tp.lock_path, repin)
    code, doc = verify_json(p.root)
    assert code == 1
    pin, rec = sig_problems(doc)
    assert pin["path"].endswith('receipt-keys."keys/ci.pub"') and "the pinned key's keyid is" in pin["message"]
    assert "which the policy does not list" in rec["derived"]  # and the receipt has no listed key left


@pytest.mark.subprocess
def test_verify_catches_a_signature_row_for_no_accepted_receipt(tmp_path):
    p, _, _ = _locked(tmp_path)

    def extra(doc, rows):
        rows.append({**rows[0], "receipt": "sha256:" + "0" * 64, "file": "receipts/tiny/gone.json"})

    edit_lock(p.tp.lock_path, extra)
    code, doc = verify_json(p.root)
    assert code == 1
    [prob] = sig_problems(doc)
    assert "gone.json" in prob["path"] and prob["derived"] == "no accepted receipt the policy covers"


@pytest.mark.subprocess
def test_a_malformed_signature_row_is_bad_input_naming_the_field(tmp_path):
    p, _, _ = _locked(tmp_path)

    def pgp(doc, rows):
        rows[0]["kind"] = "pgp"

    with pytest.raises(LockfileError, match=r"receipt-signatures\[0\]\.kind: expected one of key, sigstore, got 'pgp'"):
        edit_lock(p.tp.lock_path, pgp)
    r = frt_process(["verify"], cwd=p.root)
    assert r.returncode == 2 and "receipt-signatures[0].kind" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.subprocess
def test_signatures_travel_in_the_lock_so_verify_needs_no_sig_files(tmp_path):
    p, _, _ = _locked(tmp_path)
    Path(str(p.receipts[0]) + ".sig").unlink()
    code, doc = verify_json(p.root)
    assert code == 0, doc


# ---------------------------------------------------------------------------
# bad input: exit 2, naming the file and the field; nothing half-written; no secret shown


@pytest.mark.parametrize("what,want", [
    ("public", "not a PEM private key"),
    ("garbage", "not a PEM private key"),
    ("rsa", "RSA key; frt signs with EC P-256"),
    ("p384", "EC key on curve secp384r1"),
    ("encrypted", "the private key is encrypted"),
    ("missing", "file not found"),
])
@pytest.mark.subprocess
def test_frt_sign_refuses_a_bad_key(tmp_path, what, want):
    p = Proj(tmp_path)
    priv, pub = p.key("ci")
    bad = tmp_path / "bad.pem"
    if what == "public":
        shutil.copy(p.root / pub, bad)
    elif what == "garbage":
        bad.write_text("not a key\n")
    elif what in ("rsa", "p384", "encrypted"):
        k = rsa.generate_private_key(public_exponent=65537, key_size=2048) if what == "rsa" else \
            ec.generate_private_key(ec.SECP384R1() if what == "p384" else ec.SECP256R1())
        enc = serialization.BestAvailableEncryption(b"pw") if what == "encrypted" else serialization.NoEncryption()
        bad.write_bytes(k.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, enc))
    r = frt_process(["sign", "--key", str(bad), str(p.receipts[0])], cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith(f"error: {bad}: ") and want in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    assert not Path(str(p.receipts[0]) + ".sig").exists()


@pytest.mark.subprocess
def test_frt_sign_refuses_a_receipt_that_does_not_parse(tmp_path):
    p = Proj(tmp_path)
    priv, _ = p.key("ci")
    bad = p.root / "receipts" / "tiny" / "bad.json"
    bad.write_text('{"schema": "frt.receipt/1"}')
    r = frt_process(["sign", "--key", str(priv), str(bad), "--json"], cwd=tmp_path)
    assert r.returncode == 2
    out = json.loads(r.stdout)
    assert out["exit"] == 2 and str(bad) in out["error"] and "cell" in out["error"]
    assert not Path(str(bad) + ".sig").exists()


@pytest.mark.subprocess
def test_frt_sign_into_an_unwritable_place_leaves_nothing(tmp_path):
    p = Proj(tmp_path)
    priv, _ = p.key("ci")
    blocker = Path(str(p.receipts[0]) + ".sig")
    blocker.mkdir()  # the .sig path is taken by a folder: the atomic rename fails
    r = frt_process(["sign", "--key", str(priv), str(p.receipts[0])], cwd=tmp_path)
    assert r.returncode == 2 and f"{p.receipts[0]}.sig: cannot be written" in r.stderr, r.stderr
    assert sorted(x.name for x in p.receipts[0].parent.iterdir()) == sorted([p.receipts[0].name, blocker.name])


@pytest.mark.subprocess
def test_qualify_sign_refuses_a_bad_key_before_measuring(tmp_path):
    p = Proj(tmp_path)
    bad = tmp_path / "bad.pem"
    bad.write_text("nope")
    r = frt_process(["qualify", "--route", "fast", "--sign", str(bad)], cwd=p.root)
    assert r.returncode == 2 and f"error: {bad}: not a PEM private key" in r.stderr, r.stderr
    assert "qualifying" not in r.stderr


@pytest.mark.parametrize("trust,field,want", [
    ({"keys": "keys/ci.pub"}, "trust.receipts.keys", "expected an array"),
    ({"keys": ["../outside.pub"]}, "trust.receipts.keys[0]", "'..'"),
    ({"keys": []}, "trust.receipts", "needs at least one signer"),
    ({"keys": ["keys/ci.pub"], "device-classes": []}, "trust.receipts.device-classes", "lists no device class"),
    ({"identities": [{"identity": "x"}]}, "trust.receipts.identities[0].issuer", "missing required field"),
    ({"identities": [{"issuer": "github", "identity": "x"}]}, "trust.receipts.identities[0].issuer", "OIDC issuer URL"),
    ({"keys": ["keys/ci.pub"], "signers": []}, "trust.receipts.signers", "unknown field"),
    ({"keys": ["keys/none.pub"]}, "trust.receipts.keys[0]", "key file keys/none.pub not found"),
    ({"keys": ["keys/bad.pub"]}, "trust.receipts.keys[0]", "is not a PEM public key"),
    ({"keys": ["keys/priv.pem"]}, "trust.receipts.keys[0]", "is a private key"),
    ({"keys": ["keys/rsa.pub"]}, "trust.receipts.keys[0]", "RSA key; a receipt signer's key is EC P-256"),
])
@pytest.mark.subprocess
def test_a_bad_policy_is_exit_2_naming_file_and_field(tmp_path, trust, field, want):
    p = Proj(tmp_path)
    priv, _ = p.key("ci")
    (p.root / "keys" / "bad.pub").write_text("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n")
    shutil.copy(priv, p.root / "keys" / "priv.pem")
    (p.root / "keys" / "rsa.pub").write_bytes(rsa.generate_private_key(public_exponent=65537, key_size=2048)
                                              .public_key().public_bytes(serialization.Encoding.PEM,
                                                                          serialization.PublicFormat.SubjectPublicKeyInfo))
    p.policy(**trust)
    before = p.tp.lock_path.read_bytes()
    with pytest.raises(ManifestError) as exc:
        p.lock()
    assert str(exc.value).startswith(f"manifests/tiny.toml: {field}") and want in str(exc.value), str(exc.value)
    r = frt_process(["lock"], cwd=p.root)
    assert r.returncode == 2 and f"error: manifests/tiny.toml: {field}" in r.stderr and "Traceback" not in r.stderr
    assert p.tp.lock_path.read_bytes() == before  # the previous lockfile is untouched


def test_a_key_link_leaving_the_project_is_refused(tmp_path):
    p = Proj(tmp_path)
    _, pub = p.key("ci")
    (p.root / "keys" / "link.pub").symlink_to(tmp_path / "secrets" / "ci.pub")
    p.policy(keys=["keys/link.pub"])
    with pytest.raises(ManifestError, match=r"trust.receipts.keys\[0\]: key file keys/link.pub leaves the project"):
        p.lock()


@pytest.mark.subprocess
def test_no_private_key_material_in_any_output(tmp_path):
    p = Proj(tmp_path)
    priv, pub = p.key("ci", "ec")
    p.policy(keys=[pub])
    secret_lines = [ln for ln in priv.read_text().splitlines() if ln and not ln.startswith("-----")]
    outs = [frt_process(["sign", "--key", str(priv), *map(str, p.receipts)], cwd=tmp_path),
            frt_process(["sign", "--key", str(priv), *map(str, p.receipts), "--json"], cwd=tmp_path),
            frt_process(["lock", "--json"], cwd=p.root), frt_process(["verify", "--json"], cwd=p.root),
            frt_process(["verify"], cwd=p.root)]
    texts = [o.stdout + o.stderr for o in outs]
    texts += [p.tp.lock_path.read_text(), Path(str(p.receipts[0]) + ".sig").read_text()]
    # a key refused as bad input is not echoed either
    broken = tmp_path / "broken.pem"
    broken.write_text(priv.read_text().replace("PRIVATE KEY", "PRIVATE KEX"))
    texts.append(frt_process(["sign", "--key", str(broken), str(p.receipts[0]), "--json"], cwd=tmp_path).stdout)
    for t in texts:
        for ln in secret_lines:
            assert ln not in t


# ---------------------------------------------------------------------------
# keyless: the real Sigstore bundles, offline, against the pinned production root


WHEEL = SIGSTORE_DATA / "rfc8785-0.1.2-py3-none-any.whl"
WORKFLOW = "https://github.com/trailofbits/rfc8785.py/.github/workflows/release.yml@refs/tags/v0.1.2"
GITHUB = "https://token.actions.githubusercontent.com"
needs_data = pytest.mark.skipif(not WHEEL.is_file(), reason="tests/data/sigstore is not here")


def _bundle(name: str) -> dict:
    return json.loads((SIGSTORE_DATA / name).read_text())


@needs_data
def test_sigstore_bundle_with_the_listed_identity_is_accepted():
    ident, why = check_bundle(_bundle(WHEEL.name + ".sigstore"), hashlib.sha256(WHEEL.read_bytes()).hexdigest(),
                              [signing.Identity("https://accounts.google.com", "someone@example.com"),
                               signing.Identity(GITHUB, WORKFLOW)])
    assert why is None and ident == signing.Identity(GITHUB, WORKFLOW)


@needs_data
def test_sigstore_bundle_of_another_identity_is_refused_naming_the_signer():
    other = WORKFLOW.replace("trailofbits/rfc8785.py", "someone/else")
    ident, why = check_bundle(_bundle(WHEEL.name + ".sigstore"), hashlib.sha256(WHEEL.read_bytes()).hexdigest(),
                              [signing.Identity(GITHUB, other)])
    assert ident is None
    assert why.startswith(f"signed by identity {WORKFLOW}, which the policy does not list")
    # the right identity under another issuer is another signer too
    ident, why = check_bundle(_bundle(WHEEL.name + ".sigstore"), hashlib.sha256(WHEEL.read_bytes()).hexdigest(),
                              [signing.Identity("https://accounts.google.com", WORKFLOW)])
    assert ident is None and "which the policy does not list" in why


@needs_data
def test_sigstore_bundle_over_one_changed_byte_is_refused():
    data = WHEEL.read_bytes() + b"\0"
    ident, why = check_bundle(_bundle(WHEEL.name + ".sigstore"), hashlib.sha256(data).hexdigest(),
                              [signing.Identity(GITHUB, WORKFLOW)])
    assert ident is None and why.startswith("the Sigstore bundle does not verify against the pinned trusted root")


@needs_data
def test_staging_bundle_is_refused_under_the_production_root():
    data = (SIGSTORE_DATA / "staging-signed.txt").read_bytes()
    ident, why = check_bundle(_bundle("staging-signed.txt.sigstore"), hashlib.sha256(data).hexdigest(),
                              [signing.Identity("https://github.com/login/oauth", "william@yossarian.net")])
    assert ident is None and why.startswith("the Sigstore bundle does not verify against the pinned trusted root")


@needs_data
def test_lock_judges_a_sigstore_bundle_beside_a_receipt_under_an_identity_policy(tmp_path):
    """A real bundle beside a receipt it was not made for: refused at lock, naming the bundle."""
    p = Proj(tmp_path)
    p.policy(identities=[{"issuer": GITHUB, "identity": WORKFLOW}])
    shutil.copy(SIGSTORE_DATA / (WHEEL.name + ".sigstore"), str(p.receipts[0]) + ".sigstore")
    reason = p.rejected(p.lock())[p.receipts[0].name]
    assert reason.startswith("signature: receipts/tiny/00-fast-decode-h200.json.sigstore: the Sigstore bundle does "
                             "not verify against the pinned trusted root")


def test_trusted_root_is_the_file_the_sigstore_wheel_ships():
    from frt_dist.provenance.sigstore_root import trusted_root_path

    root = trusted_root_path()
    assert root.name == "trusted_root.json" and "tuf-repo-cdn.sigstore.dev" in str(root)
    assert "sigstage" not in str(root)


@pytest.mark.subprocess
def test_a_lock_without_a_policy_imports_no_cryptography(tmp_path):
    p = Proj(tmp_path)
    code = ("import sys\nfrom frt_dist.cli.main import main\nrc = main(['lock', '--quiet'])\n"
            "print('CRYPTO=' + str('cryptography' in sys.modules or 'sigstore' in sys.modules))")
    import sys

    r = subprocess.run([sys.executable, "-c", code], cwd=p.root, capture_output=True, text=True, timeout=120)
    assert "CRYPTO=False" in r.stdout, r.stdout + r.stderr


def test_signing_errors_are_usage_errors():
    assert issubclass(signing.SigningUnavailable, UsageError)


@needs_no_gpu  # qualifies CPU-only packages on the detected hardware
@pytest.mark.subprocess
@pytest.mark.slow
def test_qualify_sign_signs_what_it_writes_and_lock_accepts_it(qproject, tmp_path):
    priv, pub = make_key(tmp_path / "secrets", "ci", "ec")
    (qproject / "keys").mkdir()
    shutil.copy(pub, qproject / "keys" / "ci.pub")
    r = frt_process(["qualify", "--model", "toyq", "--route", "fastscale", "--rounds", "6", "--sign", str(priv), "--json"],
                cwd=qproject, env={"PYTHONPATH": f"{ROOT}{os.pathsep}{HELPERS}"})  # this checkout's frt_dist first
    assert r.returncode == 0, r.stdout + r.stderr
    [res] = json.loads(r.stdout)["results"]
    assert res["signature"] == res["receipt"] + ".sig" and (qproject / res["signature"]).is_file()
    m = qproject / "manifests" / "toyq.toml"
    m.write_text(m.read_text() + '\n[trust.receipts]\nkeys = ["keys/ci.pub"]\n')
    lock = lock_model(TinyRoot(qproject), "toyq", warn=lambda msg: None).lockfile
    assert lock.rejected == [] and len(lock.receipts) == 1
    [row] = lock.signatures.values()
    assert row["signer"] == keyid_of(pub) and row["file"] == res["receipt"]


def TinyRoot(root):
    from frt_dist.project.discover import Project

    return Project(root, "project", {})


@pytest.mark.subprocess
def test_keyless_signing_without_an_identity_token_is_exit_2_writing_nothing(tmp_path):
    """``frt sign --sigstore`` needs a CI's OIDC token (and the network): without one it says so,
    before any Sigstore service is asked, and writes nothing."""
    p = Proj(tmp_path)
    env = {k: "" for k in ("GITHUB_ACTIONS", "ACTIONS_ID_TOKEN_REQUEST_URL", "ACTIONS_ID_TOKEN_REQUEST_TOKEN",
                           "SIGSTORE_ID_TOKEN", "GITLAB_CI", "BUILDKITE", "CIRCLECI", "GOOGLE_SERVICE_ACCOUNT_NAME")}
    r = frt_process(["sign", "--sigstore", str(p.receipts[0])], cwd=tmp_path, env=env)
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("error: --sigstore: no OIDC identity token in this environment"), r.stderr
    assert "id-token: write" in r.stderr
    assert not Path(str(p.receipts[0]) + ".sigstore").exists()
    r = frt_process(["sign", str(p.receipts[0])], cwd=tmp_path)  # neither --key nor --sigstore
    assert r.returncode == 2 and "one of the arguments --key --sigstore is required" in r.stderr


@needs_data
@pytest.mark.subprocess
def test_verify_rechecks_an_embedded_sigstore_bundle_offline(tmp_path):
    """A lock edited to claim a Sigstore identity signed the receipt, with a real bundle (the
    wheel's) embedded: verify re-checks the bundle against the pinned root over the receipt's
    digest and refuses it."""
    p = Proj(tmp_path)
    priv, pub = p.key("ci")
    p.policy(keys=[pub], identities=[{"issuer": GITHUB, "identity": WORKFLOW}])
    p.sign(priv)
    p.lock()

    def claim(doc, rows):
        rows[0].pop("envelope")
        rows[0].update(kind="sigstore", signer=WORKFLOW, issuer=GITHUB, bundle=_bundle(WHEEL.name + ".sigstore"))

    edit_lock(p.tp.lock_path, claim)
    code, doc = verify_json(p.root)
    assert code == 1
    [prob] = sig_problems(doc)
    assert prob["derived"].startswith("rejected: the Sigstore bundle does not verify against the pinned trusted root")


def test_signing_without_cryptography_installed_says_which_extra(monkeypatch, tmp_path):
    import sys

    monkeypatch.setitem(sys.modules, "cryptography", None)  # as if the provenance extra were not installed
    with pytest.raises(signing.SigningUnavailable) as exc:
        signing.load_private_key(tmp_path / "k.pem")
    assert "needs the 'cryptography' package" in str(exc.value) and exc.value.exit_code == 2
    assert exc.value.hints == ["pip install 'frt-dist[provenance]'"]


@needs_data
def test_verify_accepts_a_bundle_by_its_recorded_identity_and_refuses_another(tmp_path):
    """verify's comparison of a Sigstore signer, on a real bundle: the wheel stands in for the
    signed artefact (its sha256 as the 'receipt digest'), so the bundle verifies and the recorded
    identity and issuer are compared with the certificate's."""
    from types import SimpleNamespace

    from frt_dist.documents.manifest import ReceiptPolicy
    from frt_dist.lock.verify import _check_receipt_signatures, _Findings

    dig = "sha256:" + hashlib.sha256(WHEEL.read_bytes()).hexdigest()
    rec = SimpleNamespace(device_class="h200", file="receipts/w.json", state="certified_fast")
    policy = ReceiptPolicy(identities=(signing.Identity(GITHUB, WORKFLOW),))
    row = {"receipt": dig, "file": "receipts/w.json", "kind": "sigstore", "signer": WORKFLOW, "issuer": GITHUB,
           "bundle": _bundle(WHEEL.name + ".sigstore")}
    lock = SimpleNamespace(manifest=SimpleNamespace(receipt_policy=policy), receipt_keys={}, signatures={dig: row},
                           release=None)
    f = _Findings("x.lock")
    signatures, _ = _check_receipt_signatures(f, lock, {dig: rec}, {}, None)
    assert f.problems == [] and signatures == {dig: row}
    row["issuer"] = "https://accounts.google.com"  # a lock that claims another issuer for the same identity
    f = _Findings("x.lock")
    accepted = {dig: rec}
    _check_receipt_signatures(f, lock, accepted, {}, None)
    [prob] = f.problems
    assert prob["path"].endswith(".signer") and prob["derived"] == f"{WORKFLOW} {GITHUB}" and accepted == {}


@pytest.mark.subprocess
def test_the_sbom_of_a_signed_lock_names_each_receipt_signer(tmp_path):
    """The SBOM meets receipt signing: `frt lock --export cyclonedx` on a lock made under a
    policy carries each receipt's signer and signature kind (frt_dist.export.sbom reads Lockfile.signatures)."""
    pytest.importorskip("cyclonedx")
    p, _, pub = _locked(tmp_path)
    r = frt_process(["lock", "--export", "cyclonedx", "--model", "tiny"], cwd=p.root)
    assert r.returncode == 0, r.stderr
    bom = json.loads(r.stdout)
    [rec] = [c for c in bom["components"] if c["type"] == "data"]  # each receipt is a component of its own
    row = {x["name"]: x["value"] for x in rec["properties"]}
    assert row["frt:signer"] == keyid_of(p.root / pub) and row["frt:signature"] == "key"
    assert row["frt:signer-key-file"] == pub and rec["authors"] == [{"name": f"key {pub} ({row['frt:signer']})"}]


@pytest.mark.subprocess
def test_verify_refuses_a_signature_by_a_key_the_lock_pins_but_the_policy_does_not_list(tmp_path):
    """Planted defect this catches: ``frt verify`` builds its keys from the lock's pins instead of the policy's list, so a
    lock edited to pin an intruder's key (and to embed the intruder's envelope) verifies the receipt."""
    from frt_dist.documents.receipt import Receipt
    from frt_dist.provenance import signing


    p, _, pub = _locked(tmp_path)
    intruder, intruder_pub = p.key("intruder")
    rec = Receipt.read(p.receipts[0])
    env = signing.envelope_for(rec, p.receipts[0].name, signing.load_private_key(intruder))
    pin = signing.read_policy_keys(p.root, signing.ReceiptPolicy(keys=(intruder_pub,)),
                                   manifest_file="manifests/tiny.toml")[intruder_pub]

    def pin_intruder(doc, rows):
        doc["receipt-keys"][intruder_pub] = pin.to_toml()
        rows[0]["envelope"], rows[0]["signer"] = env, pin.keyid

    edit_lock(p.tp.lock_path, pin_intruder)
    code, doc = verify_json(p.root)
    assert code == 1
    probs = sig_problems(doc)
    assert any(pr["path"].endswith(f'receipt-keys."{intruder_pub}"') and pr["derived"] == "not listed by [trust.receipts] keys"
               for pr in probs), probs
    [rec_prob] = [pr for pr in probs if "receipt-signatures (" in pr["path"]]
    assert "which the policy does not list" in rec_prob["derived"] and pin.keyid in rec_prob["derived"], rec_prob
