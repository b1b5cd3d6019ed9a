"""The resolver's per-lockfile memo is invisible: same answers, reporters still see everything."""

from __future__ import annotations

import pytest

from frt_dist.routes.resolver import Reporter, resolve
from helpers.factories import CPU, tiny_project


@pytest.fixture
def lock(tmp_path):
    return tiny_project(tmp_path).lock(receipts=[("fast", "decode"), ("solo", "decode", "supported_correct")])


def test_memoised_decision_equals_computed_and_is_read_only(lock):
    first = resolve(lock, hardware=CPU, phase="decode")
    assert first.decision == "route" and first.route == "fast"
    again = resolve(lock, hardware=CPU, phase="decode")
    assert again is first
    lock.cache.clear()
    fresh = resolve(lock, hardware=CPU, phase="decode")
    assert fresh is not first and fresh == first
    with pytest.raises(TypeError):
        first.variants["t-org/scale"] = "torch-universal"


def test_policy_is_part_of_the_key(lock):
    a = resolve(lock, hardware=CPU, phase="decode")
    b = resolve(lock, hardware=CPU, phase="decode", accept=("certified_fast", "supported_correct"))
    c = resolve(lock, hardware=CPU, phase="prefill", fallback="host")
    assert a.route == "fast" and b.route == "fast" and c.decision == "host"
    solo = [r.reason for r in a.reasons if r.route == "solo"]
    assert solo == ["receipt is supported_correct; accept is certified_fast"]
    solo_b = [r.reason for r in b.reasons if r.route == "solo"]
    assert solo_b[0].startswith("ranked below fast in this cell at lock time")


def test_reporter_bypasses_the_memo(lock):
    resolve(lock, hardware=CPU, phase="decode")

    class Rec(Reporter):
        def __init__(self):
            self.events = []

        def considering(self, phase, route, receipt):
            self.events.append(("considering", route))

        def rejecting(self, phase, route, reason):
            self.events.append(("rejecting", route))

        def choosing(self, phase, route, decision):
            self.events.append(("choosing", route))

    rep = Rec()
    resolve(lock, hardware=CPU, phase="decode", reporter=rep)
    assert ("considering", "fast") in rep.events and ("choosing", "fast") in rep.events
    assert ("rejecting", "solo") in rep.events
