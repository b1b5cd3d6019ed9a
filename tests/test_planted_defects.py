"""Defects a reviewer planted that the rest of the suite let through (issue 26 item 7).

Each test names the defect it catches; each was seen to fail with that defect planted in the code
(the report of the change that added it says how it was planted). The symlinked ``receipts/<model>``
folder that ``frt receipts pull`` must not write through is held by
``test_hostile_files.test_pull_writes_nothing_through_a_linked_model_folder``.
"""

from __future__ import annotations

import io
import json
import os
import statistics

import pytest

from helpers.s3server import FAKE_KEY_ID, FAKE_SECRET, FaultProxy

# ---------------------------------------------------------------------------
# object-store clients


def test_a_client_configuration_error_never_shows_the_credentials(monkeypatch):
    """Defect: the configuration error's text no longer scrubbed of credentials (``_scrub`` dropped)."""
    from frt_dist.distribution.objstore import StoreAccess, open_store

    for var, value in {"AWS_ACCESS_KEY_ID": FAKE_KEY_ID, "AWS_SECRET_ACCESS_KEY": FAKE_SECRET,
                       "AWS_CONFIG_FILE": os.devnull,
                       "AWS_SHARED_CREDENTIALS_FILE": os.devnull, "AWS_EC2_METADATA_DISABLED": "true",
                       "FRT_STORE_CLIENT": "boto3",
                       # a region botocore refuses and quotes, carrying both credentials (a pasted line gone
                       # wrong); an endpoint URL with user:password@ is refused before any client sees it
                       # (tests/test_store_hostile.py), so this is the way left to reach botocore's own text
                       "AWS_DEFAULT_REGION": f"{FAKE_KEY_ID}/{FAKE_SECRET}"}.items():
        monkeypatch.setenv(var, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_REGION", raising=False)
    with pytest.raises(StoreAccess) as e:
        open_store("s3://bucket-x/p").head("k")
    text = str(e.value) + " ".join(e.value.hints)
    assert "the object-store configuration is not usable" in text, text
    assert FAKE_SECRET not in text and FAKE_KEY_ID not in text, text


@pytest.mark.parametrize("client", ["boto3", "auto"])
@pytest.mark.subprocess
def test_a_resumed_read_never_splices_an_object_replaced_after_the_cut(s3, bucket, monkeypatch, client):
    """Defect: the resumed ranged GET no longer pinned to the object's ETag. The object is replaced
    between the cut and the resume: the read must fail (or return one whole object), never the
    first object's head joined to the second's tail."""
    from frt_dist.distribution.objstore import open_store
    from frt_dist.errors import FrtError

    key = "sha256/" + "cd" * 32
    old, new = os.urandom(1 << 20), os.urandom(1 << 20)
    s3.client().put_object(Bucket=bucket, Key=f"p/{key}", Body=old)
    proxy = FaultProxy(s3.url).start()
    try:
        for var, value in s3.env(endpoint=proxy.url).items():
            monkeypatch.setenv(var, value)
        monkeypatch.setenv("FRT_STORE_CLIENT", client)
        st = open_store(f"s3://{bucket}/p", reading=True)
        proxy.cut_first = 1
        proxy.on_cut = lambda: s3.client().put_object(Bucket=bucket, Key=f"p/{key}", Body=new)
        out = io.BytesIO()
        try:
            st.get(key, out)
        except FrtError:
            return  # refused: the object changed under the read
        assert proxy.cut_first == 0  # the cut happened
        assert out.getvalue() in (old, new), "a resumed read spliced two versions of the object"
    finally:
        proxy.stop()


# ---------------------------------------------------------------------------
# receipt signatures: frt verify trusts the policy's keys, not the lock's pins


@pytest.mark.subprocess
def test_verify_refuses_a_signature_by_a_key_the_lock_pins_but_the_policy_does_not_list(tmp_path):
    """Defect: ``frt verify`` builds its keys from the lock's pins instead of the policy's list, so a
    lock edited to pin an intruder's key (and to embed the intruder's envelope) verifies the receipt."""
    from frt_dist.documents.receipt import Receipt
    from frt_dist.provenance import signing

    from test_receipt_signing import _locked, edit_lock, sig_problems, verify_json

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


# ---------------------------------------------------------------------------
# publisher signatures: a workflow is a whole file name, never a prefix


@pytest.mark.parametrize("signed_by, ok", [
    ("release.yml@refs/tags/v1", True),
    ("release.yml-evil@refs/tags/v1", False),
    ("release.yml.evil@refs/tags/v1", False),
    ("release.yml/x@refs/tags/v1", False),
    ("release.yml", True),
    ("release.ym@refs/tags/v1", False),
])
def test_a_publisher_workflow_is_matched_as_a_whole_name_never_a_prefix(signed_by, ok):
    """Defect: the workflow matched as a bare prefix (``release.yml`` accepting ``release.yml-evil``)."""
    from frt_dist.documents.publisher_policy import SignerPolicy
    from frt_dist.provenance.publisher import SignerFacts, signer_problems

    repo = "https://github.com/org/kernels"
    policy = SignerPolicy(repo, (f"{repo}/.github/workflows/release.yml",))
    facts = SignerFacts(identity=f"{repo}/.github/workflows/{signed_by}", issuer=policy.issuer, repository=repo,
                        build_signer=f"{repo}/.github/workflows/{signed_by}")
    problems = signer_problems(facts, policy)
    if ok:
        assert problems == []
    else:
        assert problems == [f"build signer is {facts.build_signer}, the policy accepts {repo}/.github/workflows/release.yml"]


# ---------------------------------------------------------------------------
# qualification figures


def _clock(host_times, route_times):
    """A ``measure(block, xs)`` that answers the given seconds, in turn, for each side."""
    it = {"host": iter(host_times), "route": iter(route_times)}
    return lambda block, xs: next(it[block])


def test_the_recorded_speedup_median_is_the_median_not_the_mean():
    """Defect: the mean of the per-round speedups recorded as ``speedup-median``. The ratios here
    are skewed (one round 10x) so that the two differ."""
    from frt_dist.qualify.timing import paired_timing as _timing

    host = [1.0] * 7 + [10.0]
    route = [1.0, 0.8, 0.9, 1.0, 0.5, 0.8, 1.0, 1.0]
    t = _timing("host", "route", {"64": None}, rounds=8, warmup=0, measure=_clock(host, route))
    ratios = [h / r for h, r in zip(host, route, strict=True)]
    assert statistics.median(ratios) != pytest.approx(statistics.mean(ratios), abs=1e-3)
    assert t["speedup-median"] == round(statistics.median(ratios), 4)
    assert t["host-median-ms"] == round(statistics.median(host) * 1e3, 4)
    assert t["route-median-ms"] == round(statistics.median(route) * 1e3, 4)


def test_certified_fast_under_a_gate_below_1_needs_the_interval_to_clear_1():
    """Defect: ``certified_fast`` decided on the interval's low end clearing a gate below 1 alone:
    a route whose speedup may be 0.95x (the interval's low end) is not certified as fast, whatever
    the gate; qualify's decision and the lock's rule agree."""
    from frt_dist.qualify.stats import ci_decision as _ci_decision
    from frt_dist.qualify.stats import speed_state

    ci = {"level": 0.95, "low": 0.95, "high": 1.4, "method": "sign-test-median", "ranks": [2, 9], "coverage": 0.96}
    timing = {"rounds": 10, "speedup-median": 1.2, "speedup-ci": ci, "host-median-ms": 1.2, "route-median-ms": 1.0}
    assert _ci_decision(ci, 0.9) is None  # straddles 1: undecided, not fast
    state, why = speed_state(timing, 0.9)
    assert state == "supported_correct" and "does not clear the gate 0.9" in why, why
    ci_ok = dict(ci, low=1.05)
    assert speed_state(dict(timing, **{"speedup-ci": ci_ok}), 0.9) == ("certified_fast", None)


def test_the_lock_rejects_certified_fast_whose_interval_starts_under_1_with_a_gate_below_1(tmp_path):
    from frt_dist.documents.lockfile import Lockfile
    from frt_dist.lock.build import lock_model
    from helpers.factories import manifest_doc, receipt_doc, tiny_project

    doc = manifest_doc()
    doc["routes"]["fast"]["gate"] = {"min-speedup": 0.9}
    tp = tiny_project(tmp_path, manifest=doc)
    tp.lock()
    r = receipt_doc(Lockfile.read(tp.lock_path), "fast", "decode", speedup=1.2)
    r["evidence"]["timing"]["speedup-ci"] = {"level": 0.95, "low": 0.95, "high": 1.25, "method": "sign-test-median",
                                             "ranks": [2, 9], "coverage": 0.96}
    r["evidence"]["timing"]["speedup-min"], r["evidence"]["timing"]["speedup-max"] = 0.9, 1.3
    (tp.root / "receipts" / "tiny").mkdir(parents=True)
    (tp.root / "receipts" / "tiny" / "r.json").write_text(json.dumps(r))
    lock = lock_model(tp.project, "tiny", warn=lambda m: None, allow_loss=True).lockfile  # (its only receipt)
    [rej] = lock.rejected
    assert "interval of the speedup starts at 0.95, under the route's gate 0.9 (or not above 1)" in rej["reason"], rej
