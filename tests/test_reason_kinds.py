"""A refusal reason carries a kind (a short stable identifier, like resolvelib's criteria), and
`frt resolve` chooses its hints by that kind, never by the wording of the reason."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from frt_dist.routes import resolver
from frt_dist.routes.resolver import REASON_KINDS, Decision, Reason
from helpers.factories import tiny_project

HW = ["--arch", "x86_64", "--device-class", "test-cpu", "--backend", "cpu", "--software", "torch=2.13"]
ACCEPT_HINT = ("hint: the qualified routes here are supported_correct (correct, no speed claim): `--accept "
               "supported_correct` serves them; only certified_fast is accepted by default")


def _frt(capsys, root, *argv):
    from frt_dist.cli.main import main

    rc = main(["resolve", "--project", str(root), *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def _reworded(monkeypatch):
    """Every reason the resolver gives reads differently from now on; its kind stays."""
    real = resolver.Reason
    monkeypatch.setattr(resolver, "Reason", lambda route, reason, kind: real(route, f"(reworded) {reason[::-1]}", kind))


def test_every_reason_has_a_declared_kind_and_the_json_carries_it(tmp_path, capsys):
    tp = tiny_project(tmp_path)
    tp.lock(receipts=[("fast", "decode", "supported_correct")])
    rc, out, _ = _frt(capsys, tp.root, *HW, "--json")
    reasons = [r for d in json.loads(out)["decisions"] for r in d["reasons"]]
    assert rc == 1 and reasons
    assert all(set(r) == {"route", "reason", "kind"} and r["kind"] in REASON_KINDS for r in reasons), reasons
    kinds = {(r["route"], r["kind"]) for r in reasons}
    assert ("fast", "state-below-accept") in kinds and ("solo", "no-receipt") in kinds
    rc, out, _ = _frt(capsys, tp.root, *HW, "--json", "--explain")
    cands = json.loads(out)["candidates"]
    assert {(c["route"], c["kind"]) for c in cands if c["phase"] == "decode"} == {
        ("fast", "state-below-accept"), ("solo", "no-receipt")}


def test_the_accept_hint_is_chosen_by_kind_not_wording(tmp_path, capsys, monkeypatch):
    tp = tiny_project(tmp_path)
    tp.lock(receipts=[(route, phase, "supported_correct") for route in ("fast", "solo") for phase in ("decode", "prefill")])
    _reworded(monkeypatch)
    rc, out, err = _frt(capsys, tp.root, *HW)
    assert rc == 1 and "(reworded)" in out and "receipt is supported_correct" not in out
    assert err.splitlines()[-1] == ACCEPT_HINT


def test_state_hint_reads_kinds_only():
    from frt_dist.cli.resolve import _state_hints

    def refused(*reasons):
        return {"decode": Decision("decode", "refused", None, "unknown", None, tuple(reasons))}

    assert _state_hints(refused(Reason("fast", "any words at all", "state-below-accept")), ["decode"],
                        ("certified_fast",)) == [ACCEPT_HINT.removeprefix("hint: ")]
    # the old wording under another kind is not a state loss
    assert _state_hints(refused(Reason("fast", "receipt is supported_correct; accept is certified_fast", "no-receipt")),
                        ["decode"], ("certified_fast",)) == []


@pytest.mark.parametrize("text", ["software not declared: kernels (receipt: 0.17)", "lorem ipsum"])
def test_software_hint_reads_the_kind_and_the_receipt_not_the_text(text):
    from frt_dist.cli.resolve import _software_hints

    hw = SimpleNamespace(backend="cuda", arch="11.0", device_class="jetson-thor", software={"torch": "2.13"})
    cand = SimpleNamespace(route="fast", receipt="sha256:r")
    lock = SimpleNamespace(index={}, receipts={"sha256:r": SimpleNamespace(software={"torch": "2.13", "kernels": "0.17"})})
    lock.index = SimpleNamespace(get=lambda key: SimpleNamespace(candidates=[cand]))

    def hints(kind):
        d = Decision("decode", "refused", None, "unknown", None, (Reason("fast", text, kind),))
        return _software_hints(lock, {"decode": d}, hw, "bf16")

    assert hints("software-not-declared") == [
        "declare the software the receipt recorded: --software kernels=0.17,torch=2.13"]
    assert hints("software-mismatch") == []


def test_reason_kinds_are_short_stable_identifiers():
    assert all(k == k.lower() and " " not in k and REASON_KINDS[k] for k in REASON_KINDS)
    assert Reason("r", "why", "no-receipt").to_dict() == {"route": "r", "reason": "why", "kind": "no-receipt"}
