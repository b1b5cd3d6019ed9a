"""Data-driven resolver tests: one TOML file per case under ``tests/resolver_cases/``.

Each case is built into a real project (manifest, Hub-layout path packages,
full receipts), locked with the real ``lock_model``, read back with
``Lockfile.read`` and resolved; see ``resolver_support`` for the format.
Package arch lists are the real FlashRT declarations
(flashrt-project/FlashRT-HF-kernels@0823390 build.toml, via
shared/data/flashrt-packages.json) unless a case says "illustrative".
"""

from __future__ import annotations

import json
import random

import pytest

from frt_dist import errors as frt_errors
from frt_dist.base.canonical import digest
from frt_dist.documents.receipt import CellKey
from frt_dist.routes.resolver import Reporter
from helpers.resolver_support import build_case, case_files, cell_key, copy_case, load_case, make_hardware, queries

CASES = {p.stem: load_case(p) for p in case_files()}


def _params():
    out = []
    for stem, case in CASES.items():
        for i, q in enumerate(queries(case)):
            label = q.get("name") or ("main" if i == 0 and "expect" in case else f"q{i}")
            out.append(pytest.param(stem, i, id=f"{stem}::{label}"))
    return out


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    cache = {}

    def get(stem):
        if stem not in cache:
            cache[stem] = build_case(CASES[stem], tmp_path_factory.mktemp(stem[:20]))
        return cache[stem]

    return get


def _match(text: str, want: dict, where: str) -> None:
    if "is" in want:
        assert text == want["is"], f"{where}: expected exactly {want['is']!r}, got {text!r}"
    if "has" in want:
        assert want["has"] in text, f"{where}: expected to contain {want['has']!r}, got {text!r}"


def check_query(b, q: dict) -> None:
    exp = q["expect"]
    if "error" in exp:
        with pytest.raises(frt_errors.FrtError) as ei:
            b.resolve(q["hardware"], q["policy"])
        assert type(ei.value).__name__ == exp["error"]["type"], repr(ei.value)
        _match(str(ei.value), exp["error"], "error")
    else:
        d = b.resolve(q["hardware"], q["policy"])
        got = {"decision": d.decision, "route": d.route, "state": d.state, "receipt": b.name_of(d.receipt),
               "reasons": [(r.route, r.reason) for r in d.reasons]}
        if "decision" in exp:
            assert d.decision == exp["decision"], got
        if "route" in exp:
            assert d.route == exp["route"], got
        if "state" in exp:
            assert d.state == exp["state"], got
        if "receipt" in exp:
            assert b.name_of(d.receipt) == exp["receipt"], got
            assert d.receipt in b.lock.receipts
        if d.decision == "route":
            assert d.state in ("certified_fast", "supported_correct") and d.receipt
            assert d.state in tuple(q["policy"].get("accept", ("certified_fast",)))
        else:
            assert d.route is None and d.receipt is None and d.state == "unknown"
            assert d.reasons, "a refusal or host decision always says why"
        if "speedup" in exp:
            assert d.speedup == pytest.approx(exp["speedup"])
        if "variants" in exp:
            for repo, v in exp["variants"].items():
                assert d.variants.get(repo) == v, d.variants
        if "reasons" in exp:
            want = exp["reasons"]
            assert [r.route for r in d.reasons] == [w["route"] for w in want], got
            for r, w in zip(d.reasons, want, strict=True):
                _match(r.reason, w, f"reason for route {r.route}")
        # one reason per route not chosen, in manifest order
        routes = [r for r in b.lock.manifest.routes if r != d.route]
        assert [r.route for r in d.reasons] == routes
    for rj in exp.get("rejected", []):
        file = b.files[rj["receipt"]]
        entries = [e for e in b.lock.rejected if e["file"] == file]
        assert len(entries) == 1, (file, b.lock.rejected)
        _match(entries[0]["reason"], rj, f"rejected {rj['receipt']}")
        assert b.names[rj["receipt"]] not in b.lock.receipts
        assert any(w.startswith(file + ": ") for w in b.warnings), b.warnings
    for ix in exp.get("index", []):
        entry = b.lock.index.get(cell_key(ix["cell"]))
        names = [b.name_of(c.receipt) for c in entry.candidates] if entry else []
        assert names == ix["candidates"]
        if entry:
            assert entry.candidates[0].route == b.lock.receipts[entry.candidates[0].receipt].route


@pytest.mark.parametrize("stem,qi", _params())
def test_case(built, stem, qi):
    b = built(stem)
    check_query(b, queries(CASES[stem])[qi])


def test_enough_cases_and_each_is_described():
    assert len(CASES) >= 30
    for stem, case in CASES.items():
        assert case.get("description"), stem
        assert queries(case), f"{stem}: no query"


def test_no_unexpected_rejections(built):
    """Receipts a case does not declare as rejected must have been accepted by the lock."""
    for stem, case in CASES.items():
        b = built(stem)
        declared = {rj["receipt"] for q in queries(case) for rj in q["expect"].get("rejected", [])}
        by_file = {f: n for n, f in b.files.items()}
        got = {by_file.get(e["file"], e["file"]) for e in b.lock.rejected}
        assert got == declared, (stem, b.lock.rejected)


def test_host_fallback_keeps_every_refusal_reason(built):
    """Across all cases: every refused query, asked again with fallback=host, reads
    'host' with the very same reasons in the same order (and a route stays a route)."""
    n = 0
    for stem, case in CASES.items():
        b = built(stem)
        for q in queries(case):
            if "error" in q["expect"]:
                continue
            d = b.resolve(q["hardware"], q["policy"])
            h = b.resolve(q["hardware"], {**q["policy"], "fallback": "host"})
            if d.decision in ("refused", "host"):
                assert h.decision == "host" and h.route is None and h.state == "unknown", (stem, h)
                assert h.reasons == d.reasons, stem
                n += 1
            else:
                assert (h.decision, h.route, h.receipt, h.reasons) == (d.decision, d.route, d.receipt, d.reasons)
    assert n >= 20


# ---------------------------------------------------------------------------
# Reporter hook


class Recorder(Reporter):
    def __init__(self):
        self.events = []

    def considering(self, phase, route, receipt):
        self.events.append(("considering", phase, route, receipt))

    def rejecting(self, phase, route, reason):
        self.events.append(("rejecting", phase, route, reason))

    def choosing(self, phase, route, decision):
        self.events.append(("choosing", phase, route, decision))


REPORTER_QUERIES = [
    ("05_ranking_by_speedup", 0),
    ("07_runner_up_wins_when_winner_does_not_match", 0),
    ("21_arch_12_0a_package_on_sm121", 0),
    ("37_supported_runner_up_when_certified_fails", 0),
    ("37_supported_runner_up_when_certified_fails", 1),
    ("17_fallback_host_same_reasons", 0),
    ("38_runner_up_reason_is_its_own", 0),
    ("08_same_route_receipt_per_software", 0),
]


@pytest.mark.parametrize("stem,qi", REPORTER_QUERIES)
def test_reporter_sees_every_candidate(built, stem, qi):
    b = built(stem)
    q = queries(CASES[stem])[qi]
    rec = Recorder()
    d = b.resolve(q["hardware"], q["policy"], reporter=rec)
    phase = q["policy"]["phase"]
    assert all(e[1] == phase for e in rec.events)
    # exactly one choosing event, last, matching the decision
    assert [e for e in rec.events if e[0] == "choosing"] == [("choosing", phase, d.route, d.decision)]
    assert rec.events[-1][0] == "choosing"
    # every route not chosen is rejected exactly once, with the decision's reason
    rejected = [(e[2], e[3]) for e in rec.events if e[0] == "rejecting"]
    assert sorted(rejected) == sorted((r.route, r.reason) for r in d.reasons)
    # considered receipts are index candidates of this cell, in ranking order; the winner is among them
    hw = make_hardware(q["hardware"])
    prec = q["policy"].get("precision") or b.lock.manifest.default_precision
    entry = b.lock.index.get(CellKey(phase, prec, hw.backend, hw.arch, hw.device_class))
    considered = [e[3] for e in rec.events if e[0] == "considering"]
    ranked = [c.receipt for c in entry.candidates] if entry else []
    assert considered == [r for r in ranked if r in considered]
    if d.decision == "route":
        assert d.receipt in considered
    # every route with a receipt in this cell had (at least) its best receipt considered
    if entry:
        assert {b.lock.receipts[r].route for r in considered} == {c.route for c in entry.candidates}
    # a considered candidate of a route that was not chosen ends in that route's rejection
    for r in considered:
        route = b.lock.receipts[r].route
        if route != d.route:
            assert route in dict(rejected)


def test_reporter_is_optional_and_changes_nothing(built):
    b = built("05_ranking_by_speedup")
    q = queries(CASES["05_ranking_by_speedup"])[0]
    assert b.resolve(q["hardware"], q["policy"]) == b.resolve(q["hardware"], q["policy"], reporter=Recorder())


# ---------------------------------------------------------------------------
# determinism


def _summary(b, q):
    try:
        d = b.resolve(q["hardware"], q["policy"])
    except frt_errors.FrtError as exc:
        return ("error", type(exc).__name__, str(exc))
    return (d.decision, d.route, d.state, b.name_of(d.receipt), tuple((r.route, r.reason) for r in d.reasons))


def _unprefixed(summary: tuple, prefixes) -> tuple:
    """A ``_summary`` whose reasons name receipt files without the given file-name prefixes."""
    def strip(text: str) -> str:
        for p in prefixes:
            text = text.replace("/" + p, "/")
        return text

    return (*summary[:-1], tuple((route, strip(reason)) for route, reason in summary[-1])) \
        if summary[0] != "error" else summary


@pytest.mark.parametrize("stem", ["05_ranking_by_speedup", "06_ranking_tie_break_min_speedup",
                                  "07_runner_up_wins_when_winner_does_not_match", "31_invalid_receipts_shape_and_gate",
                                  "26_arch_gated_delta_attention_list"])
def test_deterministic_over_runs_and_shuffled_receipt_files(built, tmp_path, stem):
    case = CASES[stem]
    b = built(stem)
    base = [_summary(b, q) for q in queries(case)]
    # repeated runs on one lock
    for _ in range(3):
        assert [_summary(b, q) for q in queries(case)] == base
    base_index = {k: [b.name_of(c.receipt) for c in e.candidates] for k, e in b.lock.index.items()}
    # the same receipts under other file names (so another directory order) and in another list order
    for seed in (1, 2):
        rng = random.Random(seed)
        shuffled = copy_case(case)
        rng.shuffle(shuffled.get("receipts", []))
        prefixes = {}

        def prefix(i, name, rng=rng, prefixes=prefixes):
            return prefixes.setdefault(name, f"{rng.randrange(10**6):06d}-")

        b2 = build_case(shuffled, tmp_path / f"s{seed}", file_prefix=prefix)
        # a reason may name a receipt file (a rejection's): compared without the prefixes given here
        assert [_unprefixed(_summary(b2, q), prefixes.values()) for q in queries(case)] == base
        idx2 = {k: [b2.name_of(c.receipt) for c in e.candidates] for k, e in b2.lock.index.items()}
        assert idx2 == base_index
        assert sorted(b2.names.values()) == sorted(b.names.values())  # same receipts, byte for byte


def test_lockfile_is_byte_identical_when_rebuilt(built, tmp_path):
    stem = "05_ranking_by_speedup"
    b = built(stem)
    b2 = build_case(CASES[stem], tmp_path / "again")
    first = (b.root / "lockfiles" / "case-model.lock").read_bytes()
    assert (b2.root / "lockfiles" / "case-model.lock").read_bytes() == first
    assert b.lock.lock_digest == b2.lock.lock_digest


def test_receipts_are_full_and_valid_per_spec(built):
    """The builders write the receipt shape `frt qualify` writes (sanity for the support code)."""
    b = built("01_certified_pick")
    data = json.loads((b.root / b.files["fused-decode"]).read_text())
    assert digest(data) == b.names["fused-decode"]
    cell = data["cell"]
    m = b.lock.manifest
    assert cell["route-digest"] == m.routes["fused"].digest
    assert cell["impls"]["gemm"]["revision"] == b.lock.packages["flashrt/fp8-gemm"].revision
    assert cell["band"] == {"rows": [1, 16]}
    assert data["evidence"]["timing"]["speedup-median"] == 1.31
    assert b.lock.receipts[b.names["fused-decode"]].problems(m) == []
