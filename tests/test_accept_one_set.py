"""``accept`` is one set (SPEC item 41): ``frt resolve --accept``, ``frt_dist.load(accept=)``
and the vLLM plugin's ``FRT_ACCEPT`` decide the same route for the same settings on one lock, and accepting
``supported_correct`` accepts ``certified_fast`` too.

The lock is a vLLM binding with a cell where the rule matters (the demo's fused/split shape): in ``decode``
route ``fused`` is ``certified_fast`` and route ``split`` ``supported_correct``; in ``prefill`` only ``split``
has a receipt (``supported_correct``). Each setting is run three ways:

- ``frt resolve --json`` in a real process (declared hardware);
- ``frt_dist.load(model, accept=...)``'s ``plan.decisions``;
- the plugin's path without vLLM: ``Engine.from_env`` reads ``FRT_ACCEPT``/``FRT_FALLBACK`` with
  ``plugin.parse_accept``, and ``Engine._bind`` hands them to ``load`` exactly as called here (its other
  work, the engine's form and the layers' smoke on vLLM's ops, needs vLLM and follows the decisions).
"""

from __future__ import annotations

import pytest

from frt_dist.documents.receipt import CellKey
from frt_dist.errors import UsageError
from frt_dist.routes.resolver import accepted_states
from frt_dist.system.hardware import Hardware
from helpers import vllm_support as vs
from helpers.factories import TinyProject

MODEL = "tiny-qwen2"
HW = Hardware.from_flags(arch="x86_64", device_class="test-cpu", backend="cpu", software={"torch": "2.13"})
HW_FLAGS = ["--arch", "x86_64", "--device-class", "test-cpu", "--backend", "cpu", "--software", "torch=2.13"]


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    doc = vs.binding_manifest()
    doc["routes"] = {"fused": {"assembly": "eager", "seams": {"norm": "rms", "act": "silu"}},
                     "split": {"assembly": "eager", "seams": {"norm": "rms"}}}
    tp = TinyProject(tmp_path_factory.mktemp("accept") / "proj", manifest=doc, packages=vs.package_specs())
    lock = tp.lock(receipts=[("fused", "decode", "certified_fast"), ("split", "decode", "supported_correct"),
                             ("split", "prefill", "supported_correct")], hardware=HW)
    cands = lock.index.get(CellKey("decode", "fp32", "cpu", "x86_64", HW.device_class)).candidates
    assert [(c.route, c.state) for c in cands] == [("fused", "certified_fast"), ("split", "supported_correct")]
    return tp


def _view(decisions) -> list[dict]:
    return [{k: d[k] for k in ("phase", "decision", "route", "state", "receipt", "reasons")} for d in decisions]


def _cli(project, accept: list[str], fallback: str) -> list[dict]:
    from helpers.frt import frt_process

    flags = [w for a in accept for w in ("--accept", a)]
    r = frt_process("resolve", "--model", MODEL, *HW_FLAGS, *flags, "--fallback", fallback, "--json", cwd=project.root)
    assert r.code == 0, r.err
    doc = r.json()
    assert doc["hardware"] == HW.to_dict()
    return _view(doc["decisions"])


def _load(project, accept: tuple, fallback: str) -> list[dict]:
    from frt_dist.serve.load import load

    plan = load(MODEL, accept=accept, fallback=fallback, hardware=HW, project=project.project)
    return _view(d.to_dict() for d in plan.decisions.values())


def _plugin(project, monkeypatch, frt_accept: str, fallback: str) -> list[dict]:
    from frt_dist.serve.load import load
    from frt_dist.serve.vllm.plugin import Engine

    monkeypatch.setenv("FRT_PROJECT", str(project.root))
    monkeypatch.setenv("FRT_ACCEPT", frt_accept)
    monkeypatch.setenv("FRT_FALLBACK", fallback)
    eng = Engine.from_env(MODEL)
    # Engine._bind's call, on the declared hardware instead of Engine.hardware() (this machine plus vLLM's version)
    plan = load(eng.model, fallback=eng.fallback, accept=eng.accept, lockfile=eng.lock, mirror=eng.mirror,
                hardware=HW, project=eng.project)
    return _view(d.to_dict() for d in plan.decisions.values())


@pytest.mark.subprocess
@pytest.mark.usefixtures("fresh_loader")
@pytest.mark.parametrize("accept, served", [
    # the rule matters in decode: supported_correct accepts fused (certified_fast, ranked first) too
    (["supported_correct"], {"decode": "fused", "prefill": "split"}),
    (["certified_fast"], {"decode": "fused", "prefill": None}),
    (["certified_fast", "supported_correct"], {"decode": "fused", "prefill": "split"}),
])
def test_resolve_load_and_the_plugin_decide_alike(project, monkeypatch, accept, served):
    cli = _cli(project, accept, "host")
    loaded = _load(project, tuple(accept), "host")
    plugin = _plugin(project, monkeypatch, ",".join(accept), "host")
    assert cli == loaded == plugin
    assert {d["phase"]: d["route"] for d in cli} == served
    decode = next(d for d in cli if d["phase"] == "decode")
    assert decode["state"] == "certified_fast"
    # split lost decode on the lock's ranking, not on the caller's accept
    split = next(r for r in decode["reasons"] if r["route"] == "split")
    assert split["kind"] == ("outranked" if "supported_correct" in accept else "state-below-accept"), split
    if "supported_correct" not in accept:
        prefill = next(d for d in cli if d["phase"] == "prefill")
        assert prefill["decision"] == "host"
        assert {"route": "split", "reason": "receipt is supported_correct; accept is certified_fast",
                "kind": "state-below-accept"} in prefill["reasons"]


def test_accepting_supported_correct_accepts_certified_fast():
    assert accepted_states(("supported_correct",)) == ("certified_fast", "supported_correct")
    assert accepted_states("supported_correct") == ("certified_fast", "supported_correct")
    assert accepted_states(("supported_correct", "certified_fast")) == ("certified_fast", "supported_correct")
    assert accepted_states(("certified_fast",)) == ("certified_fast",)
    assert accepted_states(()) == ()
    with pytest.raises(UsageError, match="accept: unknown state 'fast'"):
        accepted_states(("fast",))


def test_frt_accept_is_parsed_by_one_function():
    from frt_dist.serve.vllm.plugin import parse_accept

    assert parse_accept(" supported_correct ") == ("supported_correct",)
    assert parse_accept("certified_fast,supported_correct") == ("certified_fast", "supported_correct")
    for bad in ("", ",", "fast", "certified_fast,unknown"):
        with pytest.raises(UsageError, match="FRT_ACCEPT: expected states among certified_fast, supported_correct"):
            parse_accept(bad)
