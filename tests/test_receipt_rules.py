"""Receipt rules: evidence that contradicts itself, or does not
support its state, is invalid.

Every rule of ``receipt.EVIDENCE_RULES`` has cases here: a valid receipt (real evidence, the
demo's own receipts) has no problems, and one mutation makes it invalid with exactly one,
exact reason. A rule with no case fails ``test_every_rule_has_a_case``.
"""

from __future__ import annotations

import copy
import json
import shutil

import pytest

from frt_dist.documents.manifest import Manifest
from frt_dist.documents.receipt import EVIDENCE_RULES, MIN_CERT_ROUNDS, Receipt
from frt_dist.lock.build import lock_model
from frt_dist.project.discover import Project
from helpers.paths import BUNDLED

MANIFEST = Manifest.read(BUNDLED / "manifests" / "demo-decoder.toml", label="manifests/demo-decoder.toml")
RECEIPTS = BUNDLED / "receipts" / "demo-decoder"
# certified_fast, 30 rounds, speedups 1.5838 / 1.7323 / 2.1153, p25 1.6836, p75 1.8184,
# host 17.829 ms, route 10.2917 ms; parity max-abs 2.15e-06, max-rel 0.0035 (above rel 1e-3)
CERTIFIED = json.loads((RECEIPTS / "fused--decode--fp32--amd-epyc.json").read_text())
# supported_correct, 30 rounds, speedups 0.6885 / 1.0113 / 1.2407 (under the gate 1.05)
SUPPORTED = json.loads((RECEIPTS / "split--decode--fp32--amd-epyc.json").read_text())


def reasons(doc: dict) -> list[str]:
    return Receipt.parse(doc, file="r.json").problems(MANIFEST)


def ev(d):
    return d["evidence"]


def timing(d):
    return d["evidence"]["timing"]


def parity(d):
    return d["evidence"]["parity"]


def no_quartiles(d):
    timing(d).pop("speedup-p25")
    timing(d).pop("speedup-p75")


def relabel_certified(d):
    d["state"] = "certified_fast"


def with_margin(d, error=2.1457672119140625e-06, host=1.0):
    """The parity fields frt qualify records: the worst element under the combined
    rule, its error and |host|; the margin computed as a test oracle, not by the product."""
    tol = parity(d)["tolerance"]
    parity(d).update({"worst-margin": error - (tol["abs"] + tol["rel"] * host), "worst-margin-error": error,
                      "worst-margin-host": host})
    return d


def with_ci(d, low=1.65, high=1.80):
    timing(d)["speedup-ci"] = {"level": 0.95, "low": low, "high": high, "method": "sign-test-median",
                               "ranks": [10, 21], "coverage": 0.9572}
    timing(d)["adaptive"] = {"initial-rounds": 30, "max-rounds": 120, "stopped": "decided"}
    return d


# the demo's certified receipt as frt qualify writes it now: worst element and speedup interval recorded
CERTIFIED_NEW = with_ci(with_margin(copy.deepcopy(CERTIFIED)))


# (rule, case id, base, mutation, the exact reasons)
CASES = [
    ("_verdict_pass", "fail", CERTIFIED, lambda d: d.update(verdict="FAIL"), ["verdict is 'FAIL', not PASS"]),
    ("_parity_passed", "false", CERTIFIED, lambda d: parity(d).update({"pass": False}), ["parity did not pass"]),
    ("_parity_numbers_finite", "max-abs-inf", CERTIFIED, lambda d: parity(d).update({"max-abs": float("inf")}),
     ["evidence.parity.max-abs is inf: not a finite non-negative number"]),
    ("_parity_numbers_finite", "max-rel-nan", CERTIFIED, lambda d: parity(d).update({"max-rel": float("nan")}),
     ["evidence.parity.max-rel is nan: not a finite non-negative number"]),
    ("_parity_numbers_finite", "tolerance-negative", CERTIFIED, lambda d: parity(d)["tolerance"].update(abs=-1e-4),
     ["evidence.parity.tolerance.abs is -0.0001: not a finite non-negative number"]),
    ("_parity_consistent", "max-abs-5-with-pass", CERTIFIED, lambda d: parity(d).update({"max-abs": 5.0}),
     ["parity says pass, but max-abs 5 exceeds the tolerance's abs 0.0001 and max-rel 0.003509 exceeds its rel "
      "0.001: the evidence contradicts itself"]),
    ("_tolerance_not_looser", "abs-1e-3", CERTIFIED, lambda d: parity(d)["tolerance"].update(abs=1e-3),
     ["parity tolerance {'abs': 0.001, 'rel': 0.001} is looser than the manifest's {'abs': 0.0001, 'rel': 0.001}"]),
    ("_target_calls", "zero", CERTIFIED, lambda d: ev(d)["target-calls"].update(ffn=0),
     ["target-calls for seam 'ffn' is 0; the route was not exercised"]),
    ("_target_calls", "seam-missing", CERTIFIED, lambda d: ev(d)["target-calls"].pop("norm"),
     ["target-calls for seam 'norm' is 0; the route was not exercised"]),
    ("_no_fallbacks", "three", CERTIFIED, lambda d: ev(d).update(fallbacks=3), ["fallbacks is 3; a qualified route has none"]),
    ("_null_check", "false", CERTIFIED, lambda d: ev(d).update({"null-check": False}), ["null-check is false"]),
    ("_negative_control", "false", CERTIFIED, lambda d: ev(d).update({"negative-control": False}),
     ["negative-control is false"]),
    ("_detach_restores_host", "false", CERTIFIED, lambda d: ev(d).update({"detach-restores-host": False}),
     ["detach-restores-host is false"]),
    ("_timing_rounds", "zero", SUPPORTED, lambda d: timing(d).update(rounds=0),
     ["timing rounds is 0; timing needs at least 1 paired round"]),
    ("_timing_warmup", "negative", CERTIFIED, lambda d: timing(d).update(warmup=-1),
     ["timing warmup is -1; expected a non-negative integer of warm-up rounds"]),
    ("_timing_warmup", "fraction", CERTIFIED, lambda d: timing(d).update(warmup=1.5),
     ["timing warmup is 1.5; expected a non-negative integer of warm-up rounds"]),
    ("_speedup_order", "median-above-max", CERTIFIED, lambda d: (no_quartiles(d), timing(d).update({"speedup-median": 2.2})),
     ["speedup-min 1.5838, speedup-median 2.2, speedup-max 2.1153 are not in order (min <= median <= max): "
      "the statistics contradict each other"]),
    ("_speedup_order", "median-below-min", SUPPORTED, lambda d: (no_quartiles(d), timing(d).update({"speedup-median": 0.6})),
     ["speedup-min 0.6885, speedup-median 0.6, speedup-max 1.2407 are not in order (min <= median <= max): "
      "the statistics contradict each other"]),
    ("_speedup_quartiles", "p25-above-median", CERTIFIED, lambda d: timing(d).update({"speedup-p25": 1.75}),
     ["speedup-p25 1.75 <= speedup-median 1.7323 <= speedup-p75 1.8184 does not hold"]),
    ("_speedup_quartiles", "p75-above-max", CERTIFIED, lambda d: timing(d).update({"speedup-p75": 2.2}),
     ["speedup quartiles 1.6836..2.2 lie outside the recorded range 1.5838..2.1153"]),
    ("_speedup_quartiles", "p25-not-a-number", CERTIFIED, lambda d: timing(d).update({"speedup-p25": "1.7"}),
     ["evidence.timing.speedup-p25 is '1.7': not a finite non-negative number"]),
    ("_medians_vs_speedups", "host-median-inflated", CERTIFIED, lambda d: timing(d).update({"host-median-ms": 30.0}),
     ["host-median-ms / route-median-ms is 2.915, outside the recorded per-round speedups 1.5838..2.1153: "
      "the timing contradicts itself"]),
    ("_medians_vs_speedups", "route-median-zero", CERTIFIED, lambda d: timing(d).update({"route-median-ms": 0.0}),
     ["host-median-ms 17.829 and route-median-ms 0 must both be positive: no timed round takes 0 ms"]),
    ("_certified_has_timing", "no-timing", CERTIFIED, lambda d: ev(d).pop("timing"),
     ["certified_fast without timing evidence"]),
    ("_certified_paired", "single-shot", CERTIFIED, lambda d: timing(d).update(method="single-shot"),
     ["certified_fast needs paired-alternating timing, got 'single-shot'"]),
    ("_timing_clock_fits_backend", "cuda-events-on-cpu", CERTIFIED, lambda d: timing(d).update(clock="cuda-events"),
     ["timing clock 'cuda-events' does not fit a cpu cell (needs 'perf-counter'): no GPU ran"]),
    ("_timing_clock_fits_backend", "host-clock-on-cuda", CERTIFIED,
     lambda d: (timing(d).update(clock="perf-counter"), d["cell"]["hardware"].update(backend="cuda", arch="9.0")),
     ["timing clock 'perf-counter' does not fit a cuda cell (needs 'cuda-events'): it timed kernel launches, not kernels"]),
    ("_certified_rounds", "below-minimum", CERTIFIED, lambda d: timing(d).update(rounds=MIN_CERT_ROUNDS - 1),
     [f"certified_fast needs at least {MIN_CERT_ROUNDS} timing rounds, got {MIN_CERT_ROUNDS - 1}"]),
    ("_certified_gate", "supported-relabelled", SUPPORTED, relabel_certified,
     ["certified_fast but speedup-median 1.011 is under the route's gate 1.05",
      "certified_fast with speedup-median 1.011, but route-median-ms 20.8756 is not below host-median-ms 20.8553: "
      "the route is not faster in the median, the timing contradicts itself"]),
    # a receipt that records the worst element is decided exactly
    ("_parity_consistent", "margin-above-zero-with-pass", CERTIFIED_NEW,
     lambda d: (with_margin(d, error=5.0, host=1.0), parity(d).update({"max-abs": 5.0, "max-rel": 5.0})),
     ["parity says pass, but the worst element's margin 4.999 is above 0 (|route - host| 5 > abs + rel * |host| = "
      "0.0001 + 0.001 * 1): the evidence contradicts itself"]),
    ("_parity_margin", "margin-not-its-element", CERTIFIED_NEW, lambda d: parity(d).update({"worst-margin": -0.5}),
     ["worst-margin -0.5 is not worst-margin-error - (abs + rel * worst-margin-host) = -0.00109785: "
      "the margin does not belong to its element"]),
    ("_parity_margin", "error-above-max-abs", CERTIFIED_NEW, lambda d: with_margin(d, error=1e-3, host=1.0),
     ["worst-margin-error 0.001 is above max-abs 2.146e-06: the maxima contradict the worst element"]),
    ("_parity_margin", "rel-above-max-rel", CERTIFIED_NEW, lambda d: with_margin(d, host=0.0),
     ["the worst element's relative error 0.02146 is above max-rel 0.003509: the maxima contradict the worst element"]),
    # the interval of the speedup
    ("_speedup_ci", "low-below-min", CERTIFIED_NEW, lambda d: timing(d)["speedup-ci"].update(low=1.5),
     ["speedup-ci 1.5..1.8 does not bracket speedup-median 1.7323 within the recorded range 1.5838..2.1153: "
      "the statistics contradict each other"]),
    ("_speedup_ci", "median-outside", CERTIFIED_NEW, lambda d: timing(d)["speedup-ci"].update(high=1.7),
     ["speedup-ci 1.65..1.7 does not bracket speedup-median 1.7323 within the recorded range 1.5838..2.1153: "
      "the statistics contradict each other"]),
    ("_certified_ci_gate", "low-under-gate", CERTIFIED_NEW,
     lambda d: (timing(d).update({"speedup-min": 1.0}), timing(d)["speedup-ci"].update(low=1.04)),
     ["certified_fast but the 95% interval of the speedup starts at 1.04, under the route's gate 1.05 (or not "
      "above 1): the speed claim is not supported with confidence"]),
    # a certified median speedup of 5.0 while the route's median time is slower than the host's
    ("_certified_medians_agree", "median-5-route-slower", CERTIFIED,
     lambda d: (no_quartiles(d), timing(d).update({"speedup-median": 5.0, "speedup-max": 6.0, "speedup-min": 0.5,
                                                    "host-median-ms": 10.0})),
     ["certified_fast with speedup-median 5, but route-median-ms 10.2917 is not below host-median-ms 10: "
      "the route is not faster in the median, the timing contradicts itself"]),
    # a number no float holds is no finite number
    ("_speedup_quartiles", "p25-10-to-the-400", CERTIFIED, lambda d: timing(d).update({"speedup-p25": 10**400}),
     ["evidence.timing.speedup-p25 is an integer of 401 digits: not a finite non-negative number"]),
]


@pytest.mark.parametrize("base", [CERTIFIED, SUPPORTED, CERTIFIED_NEW], ids=["certified", "supported", "certified-new"])
def test_the_valid_bases_have_no_problems(base):
    assert reasons(copy.deepcopy(base)) == []


@pytest.mark.parametrize("rule, base, mutate, expected", [(c[0], c[2], c[3], c[4]) for c in CASES],
                         ids=[f"{c[0].lstrip('_')}-{c[1]}" for c in CASES])
def test_one_mutation_one_exact_reason(rule, base, mutate, expected):
    d = copy.deepcopy(base)
    assert reasons(copy.deepcopy(d)) == []
    mutate(d)
    assert reasons(d) == expected


def test_every_rule_has_a_case():
    assert {c[0] for c in CASES} == {f.__name__ for f in EVIDENCE_RULES}


# the other side of the rules: what they must not refuse

@pytest.mark.parametrize("base, mutate", [
    (CERTIFIED, lambda d: parity(d).update({"max-abs": 5.0, "max-rel": 1e-4})),  # large outputs: max-rel within rel
    (CERTIFIED, lambda d: parity(d).update({"max-abs": 1e-4, "max-rel": 0.5})),  # at abs exactly: near-zero outputs
    (SUPPORTED, lambda d: timing(d).update({"rounds": 2, "speedup-p25": 0.6})),  # under 3 rounds a quartile may extrapolate
    (CERTIFIED, lambda d: timing(d).update({"host-median-ms": 10.2917 * 2.1153 * 1.005})),  # at max, within the slack
    (CERTIFIED, lambda d: timing(d).pop("warmup")),
    # the legitimate mixed case (largest absolute error on large outputs, largest relative
    # error near zero) stands when the worst element's margin is recorded and not above 0
    (CERTIFIED_NEW, lambda d: (parity(d).update({"max-abs": 5.0, "max-rel": 0.5}), with_margin(d, error=0.01, host=20.0))),
    (CERTIFIED_NEW, lambda d: (parity(d).update({"max-abs": 1.1e-3}), with_margin(d, error=1.1e-3, host=1.0))),  # at the bound
    (CERTIFIED_NEW, lambda d: (timing(d).update({"speedup-min": 1.0}), timing(d)["speedup-ci"].update(low=1.05))),
], ids=["abs-over-rel-within", "abs-at-limit", "two-rounds-quartile", "ratio-within-slack", "no-warmup",
        "mixed-case-with-margin", "margin-at-bound", "ci-low-at-gate"])
def test_consistent_evidence_stays_valid(base, mutate):
    d = copy.deepcopy(base)
    mutate(d)
    assert reasons(d) == []


def test_supported_correct_claims_nothing_about_speed():
    d = copy.deepcopy(SUPPORTED)
    assert timing(d)["speedup-median"] < MANIFEST.routes["split"].min_speedup
    assert reasons(d) == []
    ev(d).pop("timing")
    assert reasons(d) == []


def test_the_median_of_ratios_may_differ_from_the_ratio_of_medians():
    """Different statistics of the same rounds: a receipt is not refused for the gap (a loaded
    machine measured 62% at 5 rounds), only for a ratio of medians outside the per-round range."""
    d = copy.deepcopy(CERTIFIED)
    timing(d).update({"host-median-ms": 10.2917 * 1.6, "speedup-median": 1.7323})
    assert reasons(d) == []


def test_invalid_receipts_never_stop_frt_lock(tmp_path):
    """Invalid receipts do not stop `frt lock`: a receipt whose evidence contradicts itself is recorded under
    [[rejected-receipts]] with the reason; the lock is written and the cell keeps its other evidence."""
    root = tmp_path / "demo"
    root.mkdir()
    for d in ("manifests", "lockfiles", "receipts", "packages"):
        shutil.copytree(BUNDLED / d, root / d, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    bad = copy.deepcopy(CERTIFIED)
    parity(bad)["max-abs"] = 5.0
    (root / "receipts" / "demo-decoder" / "tampered.json").write_text(json.dumps(bad))
    warnings = []
    res = lock_model(Project(root, "project", {}), "demo-decoder", warn=warnings.append)
    assert res.written
    [rj] = res.lockfile.rejected
    assert rj["file"] == "receipts/demo-decoder/tampered.json"
    assert rj["reason"] == ("parity says pass, but max-abs 5 exceeds the tolerance's abs 0.0001 and max-rel 0.003509 "
                            "exceeds its rel 0.001: the evidence contradicts itself")
    assert warnings == [f"receipts/demo-decoder/tampered.json: {rj['reason']}"]
    assert len(res.lockfile.receipts) == 4 and rj["digest"] not in res.lockfile.receipts
