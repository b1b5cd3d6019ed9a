"""A default gate that means something (SPEC item 40): a route with no declared ``gate``
needs the speedup interval's low end at or above ``DEFAULT_MIN_SPEEDUP`` (1.02) for ``certified_fast``;
``frt qualify`` records the gate it applied in the receipt and prints it; ``frt lock`` judges every receipt
by the route's gate as the manifest defines it now, and warns once per route that relies on the default."""

from __future__ import annotations

import json

import pytest

from frt_dist.documents.lockfile import Lockfile
from frt_dist.documents.manifest import DEFAULT_MIN_SPEEDUP, Gate, route_gate
from frt_dist.documents.receipt import CellKey, Receipt
from frt_dist.qualify.stats import speed_state
from helpers.factories import CPU, TinyProject, manifest_doc, receipt_doc
from helpers.gpu import needs_no_gpu

# "plain" declares no gate, "tuned" a gate below the default
ROUTES = {"plain": {"assembly": "eager", "seams": {"act": "scale", "norm": "norm"}},
          "tuned": {"assembly": "eager", "seams": {"act": "scale"}, "gate": {"min-speedup": 1.005}},
          "loose": {"assembly": "eager", "seams": {"norm": "norm"}}}
WARNING = "route 'plain' declares no gate: its certified_fast receipts are judged against the default min-speedup 1.02"


def _with_interval(doc: dict, low: float, *, state: str = "certified_fast", gate: dict | None = None) -> dict:
    """``doc`` (a ``receipt_doc``) with paired timing whose 95% interval starts at ``low``: median 1.05,
    every other figure consistent with it, as frt qualify records them."""
    doc["state"] = state
    t = doc["evidence"]["timing"]
    t.update({"rounds": 20, "host-median-ms": 1.05, "route-median-ms": 1.0, "speedup-median": 1.05,
              "speedup-min": 0.99, "speedup-max": 1.12,
              "speedup-ci": {"level": 0.95, "low": low, "high": 1.08, "method": "sign-test-median"}})
    if gate is not None:
        t["gate"] = gate
    return doc


@pytest.fixture
def tp(tmp_path):
    p = TinyProject(tmp_path / "proj", manifest=manifest_doc(routes=ROUTES))
    p.lock()
    return p


def _write(tp, name: str, doc: dict):
    rdir = tp.root / "receipts" / tp.model
    rdir.mkdir(parents=True, exist_ok=True)
    (rdir / name).write_text(json.dumps(doc, indent=1), "utf-8")


def _relock(tp, frt):
    r = frt("lock", "--allow-loss", cwd=tp.root)
    assert r.code == 0, r.err
    return Lockfile.read(tp.lock_path), r


def _decode_candidates(lock):
    entry = lock.index.get(CellKey("decode", "fp32", "cpu", "x86_64", CPU.device_class))
    return [(c.route, c.state) for c in entry.candidates] if entry else []


def test_one_gate_rule():
    doc = manifest_doc(routes=ROUTES)
    from frt_dist.documents.manifest import Manifest

    m = Manifest.from_dict(doc, file="manifests/tiny.toml")
    assert DEFAULT_MIN_SPEEDUP == 1.02
    assert route_gate(m.routes["plain"]) == Gate(1.02, "default") and m.routes["plain"].min_speedup is None
    assert route_gate(m.routes["tuned"]) == Gate(1.005, "declared")
    assert route_gate(m.routes["plain"]).to_json() == {"min-speedup": 1.02, "source": "default"}
    assert route_gate(m.routes["plain"]).describe() == "min-speedup 1.02 (the default: the route declares no gate)"
    assert route_gate(m.routes["tuned"]).describe() == "min-speedup 1.005 (declared)"


def test_qualify_decides_with_the_default_gate():
    """What frt qualify writes for an interval starting at 1.01 / 1.03 on a route with no gate."""
    doc = _with_interval({"evidence": {"timing": {}}}, 1.01)
    state, why = speed_state(doc["evidence"]["timing"], DEFAULT_MIN_SPEEDUP)
    assert state == "supported_correct" and "does not clear the gate 1.02" in why
    doc = _with_interval({"evidence": {"timing": {}}}, 1.03)
    assert speed_state(doc["evidence"]["timing"], DEFAULT_MIN_SPEEDUP) == ("certified_fast", None)


def test_lock_judges_a_route_without_a_gate_against_the_default(tp, frt):
    lf = Lockfile.read(tp.lock_path)
    _write(tp, "plain-decode.json", _with_interval(receipt_doc(lf, "plain", "decode"), 1.01))
    _write(tp, "plain-decode-correct.json", _with_interval(receipt_doc(lf, "plain", "decode"), 1.01,
                                                           state="supported_correct"))
    _write(tp, "plain-prefill.json", _with_interval(receipt_doc(lf, "plain", "prefill"), 1.03))
    _write(tp, "tuned-decode.json", _with_interval(receipt_doc(lf, "tuned", "decode"), 1.01))
    lock, r = _relock(tp, frt)
    # 1.01 under the default gate: the certified_fast claim is rejected, naming the gate; the same
    # figures claimed as supported_correct stand, as supported_correct
    [rej] = lock.rejected
    assert rej["file"] == "receipts/tiny/plain-decode.json"
    assert ("certified_fast but the 95% interval of the speedup starts at 1.01, under the route's gate 1.02 "
            "(or not above 1): the speed claim is not supported with confidence; 1.02 is the default gate "
            "(route 'plain' declares none)") == rej["reason"]
    assert f"warning: receipts/tiny/plain-decode.json: {rej['reason']}" in r.err
    # a declared gate of 1.005 lets 1.01 through; tuned outranks plain's supported_correct in decode
    assert _decode_candidates(lock) == [("tuned", "certified_fast"), ("plain", "supported_correct")]
    # 1.03 clears the default gate
    prefill = lock.index.get(CellKey("prefill", "fp32", "cpu", "x86_64", CPU.device_class))
    assert [(c.route, c.state) for c in prefill.candidates] == [("plain", "certified_fast")]
    res = frt("resolve", "--model", "tiny", "--arch", "x86_64", "--device-class", CPU.device_class, "--backend",
              "cpu", "--software", "torch=2.13", "--json", cwd=tp.root).json()
    assert {d["phase"]: (d["route"], d["state"]) for d in res["decisions"]} == {
        "decode": ("tuned", "certified_fast"), "prefill": ("plain", "certified_fast")}


def test_a_receipt_claiming_a_lower_gate_is_judged_by_the_routes_gate(tp, frt):
    """A receipt recording that it was judged against a gate of 1.005 (declared when it was written) is
    judged again against the route's gate now: no gate declared, so the default 1.02."""
    lf = Lockfile.read(tp.lock_path)
    _write(tp, "plain-decode.json", _with_interval(receipt_doc(lf, "plain", "decode"), 1.01,
                                                   gate={"min-speedup": 1.005, "source": "declared"}))
    lock, _ = _relock(tp, frt)
    [rej] = lock.rejected
    assert "under the route's gate 1.02" in rej["reason"]
    assert rej["reason"].endswith("; 1.02 is the default gate (route 'plain' declares none); the receipt was judged "
                                  "against the declared gate 1.005 when it was written")
    assert _decode_candidates(lock) == []
    # frt verify re-derives the same verdict from the lock
    v = frt("verify", "--json", cwd=tp.root).json()
    assert v["ok"], v


def test_a_median_under_the_default_gate_is_not_certified(tp, frt):
    """A receipt without an interval (written before intervals were recorded) is held to its median."""
    lf = Lockfile.read(tp.lock_path)
    doc = receipt_doc(lf, "plain", "decode", speedup=1.01)
    _write(tp, "old.json", doc)
    lock, _ = _relock(tp, frt)
    [rej] = lock.rejected
    assert rej["reason"] == ("certified_fast but speedup-median 1.01 is under the route's gate 1.02; "
                             "1.02 is the default gate (route 'plain' declares none)")


def test_lock_warns_once_per_route_that_relies_on_the_default(tp, frt):
    lf = Lockfile.read(tp.lock_path)
    # plain: three certified_fast claims in two bands (one rejected) -> one warning
    _write(tp, "a.json", _with_interval(receipt_doc(lf, "plain", "decode"), 1.03))
    _write(tp, "b.json", _with_interval(receipt_doc(lf, "plain", "decode"), 1.01))
    _write(tp, "c.json", _with_interval(receipt_doc(lf, "plain", "prefill"), 1.04))
    # tuned declares its gate; loose has no gate but only supported_correct receipts: no warning for either
    _write(tp, "d.json", _with_interval(receipt_doc(lf, "tuned", "decode"), 1.03))
    _write(tp, "e.json", receipt_doc(lf, "loose", "decode", state="supported_correct", speedup=1.0))
    _, r = _relock(tp, frt)
    lines = [ln for ln in r.err.splitlines() if "declares no gate" in ln]
    assert lines == [f"warning: manifests/tiny.toml: {WARNING} (the speedup interval's low end must reach it); "
                     "declare `gate = { min-speedup = X }` in [routes.plain] to choose the effect it must show"]
    # --check judges the same receipts the same way, and says so once too
    r = frt("lock", "--check", cwd=tp.root)
    assert r.code == 0 and [ln for ln in r.err.splitlines() if "declares no gate" in ln] == lines
    # --strict counts rejected receipts, not this warning
    (tp.root / "receipts" / "tiny" / "b.json").unlink()
    r = frt("lock", "--strict", cwd=tp.root)
    assert r.code == 0 and r.err.count("declares no gate") == 1, r.err


def test_no_warning_without_a_certified_claim_on_a_default_gate(tp, frt):
    r = frt("lock", cwd=tp.root)
    assert r.code == 0 and "declares no gate" not in r.err


@needs_no_gpu  # qualifies CPU-only packages on the detected hardware
def test_qualify_prints_and_records_the_gate(qproject, frt):
    """frt qualify says which gate it applies (and when it is the default), and the receipt records it;
    `frt lock` accepts what it wrote."""
    mpath = qproject / "manifests" / "toyq.toml"
    text = mpath.read_text()
    head, sep, tail = text.partition("[routes.fastscale]")
    mpath.write_text(head + sep + tail.replace("gate = { min-speedup = 1.05 }\n", "", 1))
    assert frt("lock", cwd=qproject).code == 0
    r = frt("qualify", "--model", "toyq", "--route", "fastscale", "--rounds", "6", cwd=qproject)
    assert r.code == 0, r.err
    said = [ln for ln in r.err.splitlines() if "gate:" in ln]
    assert said == ["  gate: certified_fast needs the speedup interval's low end at or above min-speedup 1.02 "
                    "(the default: the route declares no gate)"]
    [path] = (qproject / "receipts" / "toyq").glob("fastscale--*.json")
    rec = Receipt.read(path)
    assert rec.timing["gate"] == {"min-speedup": 1.02, "source": "default"}
    r = frt("lock", cwd=qproject)
    assert r.code == 0 and "0 rejected" in r.out, (r.out, r.err)
    if rec.state == "certified_fast":
        assert r.err.count("declares no gate") == 1
    # a declared gate is printed as declared, and recorded so
    r = frt("qualify", "--model", "toyq", "--route", "slowscale", "--rounds", "6", "--json", cwd=qproject)
    assert r.code == 0, r.err
    doc = r.json()
    assert doc["gate"] == {"min-speedup": 1.05, "source": "declared"}
    rec = Receipt.read(qproject / doc["results"][0]["receipt"])
    assert rec.timing["gate"] == {"min-speedup": 1.05, "source": "declared"} and rec.state == "supported_correct"


def test_certified_fast_under_a_gate_below_1_needs_the_interval_to_clear_1():
    """Planted defect this catches: ``certified_fast`` decided on the interval's low end clearing a gate below 1 alone:
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
