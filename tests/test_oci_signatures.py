"""Issue 37 item 3, SPEC §16 item 50: a lock's signatures as OCI 1.1 referrers of its artefact. The registry
(Debian's docker-registry 2.8, tests/helpers/ociregistry.py) has no referrers API, so they go through the
fallback tag schema (``sha256-<hex>`` holding an image index); `frt verify --mirror oci://…` re-checks each
offline with the keys the lock pins and refuses one signed by a key it does not pin."""

from __future__ import annotations

import json
import shutil

import pytest
import tomli_w

from frt_dist.distribution.objstore import open_store, parse_location
from frt_dist.distribution.oci_sign import DSSE, RECEIPT, RECEIPT_SIG, attach_referrer, fallback_tag
from frt_dist.documents.lockfile import Lockfile
from frt_dist.lock.build import lock_model
from frt_dist.provenance import signing
from helpers.factories import ed25519_keypair, tiny_project
from helpers.frt import frt_main

RECEIPTS = [("solo", "decode"), ("solo", "prefill")]


@pytest.fixture
def signed(tmp_path, oci_registry, monkeypatch):
    """The tiny project under a [trust.receipts] key policy, both receipts signed, locked, and published."""
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker-config"))
    tp = tiny_project(tmp_path)
    tp.lock(receipts=RECEIPTS)
    priv, pub = ed25519_keypair(tmp_path / "secrets", "ci")
    (tp.root / "keys").mkdir()
    shutil.copy(pub, tp.root / "keys" / "ci.pub")
    (tp.root / "manifests" / "tiny.toml").write_text(tomli_w.dumps({**tp.manifest,
                                                                    "trust": {"receipts": {"keys": ["keys/ci.pub"]}}}))
    key = signing.load_private_key(priv)
    for r in sorted((tp.root / "receipts" / "tiny").glob("*.json")):
        signing.sign_receipt(r, key)
    lock_model(tp.project, "tiny", warn=lambda m: None)
    lock = Lockfile.read(tp.lock_path)
    assert len(lock.signatures) == 2
    url = f"oci://{oci_registry.repo()}:prod"
    r = frt_main(["publish", url, "--variant", "torch-cpu", "--json"], cwd=tp.root)
    assert r.code == 0, r.err
    return tp, lock, url, json.loads(r.out)["models"][0]["artefact"]


def test_each_receipt_signature_is_a_referrer_through_the_fallback_tag_and_verify_rechecks_them(signed, oci_registry):
    tp, lock, url, art = signed
    assert sorted(r["annotations"][RECEIPT] for r in art["referrers"]) == sorted(lock.signatures)
    loc = parse_location(url)
    assert oci_registry.get(f"/v2/{loc.repository}/referrers/{art['digest']}")[0] == 404  # 2.8: no referrers API
    status, _, body = oci_registry.get(f"/v2/{loc.repository}/manifests/{fallback_tag(art['digest'])}",
                                       accept="application/vnd.oci.image.index.v1+json")
    index = json.loads(body)
    assert status == 200 and sorted(m["digest"] for m in index["manifests"]) == sorted(r["digest"] for r in
                                                                                         art["referrers"])
    for m in index["manifests"]:  # each a manifest whose subject is the artefact, its layer the locked envelope
        doc = json.loads(oci_registry.get(f"/v2/{loc.repository}/manifests/{m['digest']}",
                                          accept="application/vnd.oci.image.manifest.v1+json")[2])
        assert doc["subject"]["digest"] == art["digest"] and doc["layers"][0]["mediaType"] == DSSE
        env = json.loads(oci_registry.get(f"/v2/{loc.repository}/blobs/{doc['layers'][0]['digest']}")[2])
        assert env == lock.signatures[doc["annotations"][RECEIPT]]["envelope"]
    r = frt_main(["verify", "--mirror", art["reference"]], cwd=tp.root)
    assert r.code == 0, (r.out, r.err)
    # publishing again attaches nothing twice
    r = frt_main(["publish", url, "--variant", "torch-cpu", "--json"], cwd=tp.root)
    assert r.code == 0
    index2 = json.loads(oci_registry.get(f"/v2/{loc.repository}/manifests/{fallback_tag(art['digest'])}",
                                         accept="application/vnd.oci.image.index.v1+json")[2])
    assert index2 == index


def test_a_referrer_signed_by_a_key_the_lock_does_not_pin_is_refused(signed, tmp_path):
    tp, lock, url, art = signed
    other, _ = ed25519_keypair(tmp_path / "attacker", "other")
    receipt = sorted(lock.signatures)[0]
    rec = lock.receipts[receipt]
    env = signing.envelope_for(rec, rec.file, signing.load_private_key(other))
    with open_store(url) as store:  # someone with push access attaches their own signature
        attach_referrer(store, art["digest"], _size(store, art),
                        RECEIPT_SIG, json.dumps(env).encode(), DSSE, {RECEIPT: receipt})
    r = frt_main(["verify", "--mirror", url], cwd=tp.root)
    assert r.code == 1 and "Traceback" not in r.err, (r.out, r.err)
    assert "signature:" in r.out and url in r.out
    doc = json.loads(frt_main(["verify", "--mirror", url, "--json"], cwd=tp.root).out)
    bad = [p for p in doc["problems"] if p["kind"] == "signature"]
    assert len(bad) == 1 and "which the lock does not pin" in bad[0]["reason"] and "refused" in bad[0]["reason"]
    assert signing.keyid(signing.load_private_key(other).public_key()) in bad[0]["reason"]


def _size(store, art) -> int:
    with open_store(art["reference"], reading=True) as s:
        return len(s.manifest()[1])


def test_a_missing_signature_referrer_is_a_problem(signed, oci_registry):
    tp, lock, url, art = signed
    loc = parse_location(url)
    import urllib.request

    req = urllib.request.Request(f"http://{oci_registry.host}/v2/{loc.repository}/manifests/"
                                 f"{art['referrers'][0]['digest']}", method="DELETE")
    urllib.request.urlopen(req, timeout=10).read()  # the registry loses one referrer
    doc = json.loads(frt_main(["verify", "--mirror", art["reference"], "--json"], cwd=tp.root).out)
    bad = [p for p in doc["problems"] if p["kind"] == "signature"]
    assert len(bad) == 2 and "the referrer's manifest is not in the registry" in bad[0]["reason"]
    assert "no referrer carries the lock's signature of receipt" in bad[1]["reason"]
