"""Strict parsing of manifests, receipts and lockfiles: each error names file and field."""

from __future__ import annotations

import dataclasses
import json

import pytest

from frt_dist.base.canonical import digest
from frt_dist.documents.lockfile import Lockfile, render
from frt_dist.documents.manifest import Manifest, validate_repo_id
from frt_dist.documents.receipt import Receipt
from frt_dist.errors import LockfileError, ManifestError, ReceiptInvalid
from helpers.factories import toy_manifest
from helpers.paths import BUNDLED


def _m(tmp_path, text, name="toy.toml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_bundled_manifest_parses():
    m = Manifest.read(BUNDLED / "manifests" / "demo-decoder.toml")
    assert list(m.routes) == ["fused", "split"] and list(m.phases) == ["decode", "prefill"]
    assert m.routes["fused"].digest.startswith("sha256:") and m.routes["fused"].digest != m.routes["split"].digest
    assert m.route_packages("fused") == ["frt-demo/fused-ffn", "frt-demo/rmsnorm"]


def test_route_digest_ignores_gate_and_smoke_but_not_contract(tmp_path):
    base = Manifest.read(_m(tmp_path, toy_manifest())).routes["fast"].digest
    no_gate = toy_manifest().replace("gate = { min-speedup = 1.05 }", "gate = { min-speedup = 2.0 }")
    assert Manifest.read(_m(tmp_path, no_gate)).routes["fast"].digest == base
    smoke = toy_manifest().replace('shape = ["rows", 8]', 'shape = ["rows", 16]')
    assert Manifest.read(_m(tmp_path, smoke)).routes["fast"].digest == base
    contract = toy_manifest().replace('layout = "contiguous"', 'layout = "any"')
    assert Manifest.read(_m(tmp_path, contract)).routes["fast"].digest != base


@pytest.mark.parametrize("edit, field, message", [
    (lambda t: t.replace('model = "toy"', 'model = "toy"\ncolour = "red"'), "colour", "unknown field"),
    (lambda t: t.replace('schema = "frt.manifest/1"', 'schema = "frt.manifest/2"'), "schema", "unknown schema major version 2"),
    (lambda t: t.replace('binding = "toy_binding"\n', ''), "binding", "missing required field"),
    (lambda t: t.replace('rows = [1, 16]', 'rows = [16, 1]'), "phases.decode.rows", "low <= high"),
    (lambda t: t.replace('rows = [1, 16]', 'rows = "1-16"'), "phases.decode.rows", "expected an array"),
    (lambda t: t.replace('seams = { norm = "fast" }', 'seams = { norm = "slow" }'), "routes.fast.seams.norm", "unknown impl 'slow'"),
    (lambda t: t.replace('assembly = "eager"', 'assembly = "warp"'), "routes.fast.assembly", "expected one of"),
    (lambda t: t.replace('entry = "add_one"', 'entry = 3'), "seams.norm.impls.fast.entry", "expected a string, got an integer"),
    (lambda t: t.replace('[packages."testorg/addone"]\nversion = 1', '[packages."testorg/addone"]\nversion = 1\npath = "p"'),
     'packages."testorg/addone"', "exactly one of `version` or `path`"),
    (lambda t: t.replace('version = 1\ntrust = true', 'path = "../outside"'), 'packages."testorg/addone".path', "'..'"),
    (lambda t: t.replace('version = 1\ntrust = true', 'path = "/abs/pkg"'), 'packages."testorg/addone".path', "is absolute"),
])
def test_manifest_errors_name_file_and_field(tmp_path, edit, field, message):
    p = _m(tmp_path, edit(toy_manifest()))
    with pytest.raises(ManifestError) as ei:
        Manifest.read(p, label="manifests/toy.toml")
    assert str(ei.value).startswith(f"manifests/toy.toml: {field}: ")
    assert message in str(ei.value)
    assert ei.value.exit_code == 2 and ei.value.reasons[0]["field"] == field


@pytest.mark.parametrize("repo, why", [("../evil", "is '..'"), ("/abs/name", "'org/name'"),
                                       ("org/na..me", "has '..'"), ("justname", "'org/name'"),
                                       ("a/b/c", "'org/name'")])
def test_repo_id_rules(tmp_path, repo, why):
    assert why in validate_repo_id(repo)
    with pytest.raises(ManifestError, match="packages"):
        Manifest.read(_m(tmp_path, toy_manifest(repo=repo)))


def test_malformed_toml_is_exit_2(tmp_path):
    p = _m(tmp_path, "schema = \n")
    with pytest.raises(ManifestError, match="not valid TOML") as ei:
        Manifest.read(p)
    assert ei.value.exit_code == 2


# --- receipts ---------------------------------------------------------------

def receipt_for(manifest: Manifest, *, route="fast", phase="decode", state="certified_fast", speedup=1.2,
                revision="0" * 40, variant="torch-cpu", hardware=None) -> dict:
    rt = manifest.routes[route]
    return {
        "schema": "frt.receipt/1",
        "cell": {
            "model": manifest.model, "binding": manifest.binding, "family": manifest.family,
            "route": route, "route-digest": rt.digest,
            "hardware": hardware or {"backend": "cpu", "arch": "x86_64", "device-class": "amd-epyc-7b13"},
            "precision": rt.precision, "layout": "contiguous", "phase": phase,
            "band": {"rows": list(manifest.phases[phase].rows)},
            "software": {"torch": "2.13"}, "assembly": rt.assembly,
            "impls": {seam: {"impl": impl, "package": manifest.impl(seam, impl).package, "revision": revision,
                             "variant": variant} for seam, impl in rt.seams.items()},
            "calibration": None,
            "inputs": {"source": "synthetic", "seed": 0, "note": "seeded normal(0, 1)"},
        },
        "state": state,
        "evidence": {
            "parity": {"max-abs": 1e-6, "max-rel": 1e-6, "tolerance": {"abs": 1e-4, "rel": 1e-3},
                       "worst-case": {"rows": 16}, "pass": True},
            "target-calls": {seam: 10 for seam in rt.seams},
            "fallbacks": 0,
            "timing": {"method": "paired-alternating", "rounds": 20, "host-median-ms": 1.0,
                       "route-median-ms": 1.0 / speedup, "speedup-median": speedup,
                       "speedup-min": speedup - 0.05, "speedup-max": speedup + 0.05},
            "null-check": True, "negative-control": True, "detach-restores-host": True,
        },
        "verdict": "PASS",
    }


@pytest.fixture
def toy(tmp_path):
    return Manifest.read(_m(tmp_path, toy_manifest()))


STEPS = {"kind": "decode", "rows": [1, 16], "per-sample": 8, "form": "compile", "host": "vLLM's own ops"}


def test_valid_receipt_has_no_problems(toy):
    r = Receipt.parse(receipt_for(toy), file="r.json")
    assert r.problems(toy) == [] and r.digest.startswith("sha256:")
    d = receipt_for(toy)
    d["evidence"]["timing"]["steps"] = dict(STEPS, **{"shared-with": []})
    assert Receipt.parse(d, file="r.json").problems(toy) == []


@pytest.mark.parametrize("mutate, problem", [
    (lambda d: d["evidence"].update(fallbacks=2), "fallbacks is 2"),
    (lambda d: d["evidence"]["target-calls"].update(norm=0), "target-calls for seam 'norm' is 0"),
    (lambda d: d["evidence"].pop("timing"), "certified_fast without timing evidence"),
    (lambda d: d["evidence"]["timing"].update({"speedup-median": 1.01}), "under the route's gate 1.05"),
    (lambda d: d["evidence"]["timing"].update(method="single-shot"), "needs paired-alternating timing"),
    (lambda d: d["evidence"]["parity"].update({"pass": False}), "parity did not pass"),
    (lambda d: d["evidence"].update({"negative-control": False}), "negative-control is false"),
    (lambda d: d["cell"].update(route="turbo"), "route 'turbo' is not defined by the manifest"),
    (lambda d: d["cell"].update({"route-digest": "sha256:" + "1" * 64}), "the route changed since it was measured"),
    (lambda d: d["cell"]["band"].update(rows=[1, 32]), "differ from the manifest's decode band"),
    (lambda d: d["cell"].update(phase="verify"), "phase 'verify' is not a phase band"),
    (lambda d: d.update(verdict="FAIL"), "verdict is 'FAIL'"),
])
def test_receipt_evidence_must_support_state(toy, mutate, problem):
    d = receipt_for(toy)
    mutate(d)
    probs = Receipt.parse(d, file="r.json").problems(toy)
    assert any(problem in p for p in probs), probs


@pytest.mark.parametrize("gate", [None, {"min-speedup": 1.05, "source": "declared"},
                                  {"min-speedup": 1.02, "source": "default"}])
def test_a_receipt_reads_with_or_without_the_gate_it_was_judged_by(toy, gate):
    d = receipt_for(toy)
    if gate is not None:
        d["evidence"]["timing"]["gate"] = gate
    r = Receipt.parse(d, file="r.json")
    assert r.problems(toy) == [] and r.timing.get("gate") == gate


def test_supported_correct_needs_no_speed(toy):
    d = receipt_for(toy, state="supported_correct", speedup=0.8)
    assert Receipt.parse(d, file="r.json").problems(toy) == []


@pytest.mark.parametrize("mutate, field, message", [
    (lambda d: d["cell"].pop("hardware"), "cell.hardware", "missing required field"),
    (lambda d: d["cell"].update(extra=1), "cell.extra", "unknown field"),
    (lambda d: d.update(schema="frt.receipt/9"), "schema", "unknown schema major version 9"),
    (lambda d: d["evidence"].update(fallbacks="0"), "evidence.fallbacks", "expected an integer"),
    (lambda d: d.update(state="fast"), "state", "expected one of"),
    (lambda d: d["cell"].pop("calibration"), "cell.calibration", "missing required field"),
    (lambda d: d["cell"]["inputs"].pop("seed"), "cell.inputs.seed", "missing required field"),
    (lambda d: d["cell"]["software"].update(torch="two"), "cell.software.torch", "expected a version string"),
    (lambda d: d["cell"]["software"].update(torch=2.13), "cell.software.torch", "expected a version string"),
    # an in-engine band's figure is measured on steps whose rows lie in that band (SPEC item 39)
    (lambda d: d["evidence"]["timing"].update(steps=dict(STEPS, rows=[16, 40])), "evidence.timing.steps.rows",
     "expected rows within the cell's band 1..16, got [16, 40]"),
    (lambda d: d["evidence"]["timing"].update(steps=dict(STEPS, kind="mixed")), "evidence.timing.steps.kind",
     "expected one of decode, prefill"),
    (lambda d: d["evidence"]["timing"].update(steps=dict(STEPS, extra=1)), "evidence.timing.steps.extra",
     "unknown field"),
    # the gate frt qualify applied (evidence.timing.gate)
    (lambda d: d["evidence"]["timing"].update(gate={"min-speedup": 1.02}), "evidence.timing.gate.source",
     "missing required field"),
    (lambda d: d["evidence"]["timing"].update(gate={"min-speedup": 1.02, "source": "guessed"}),
     "evidence.timing.gate.source", "expected one of declared, default, got 'guessed'"),
    (lambda d: d["evidence"]["timing"].update(gate={"min-speedup": 0, "source": "default"}),
     "evidence.timing.gate.min-speedup", "must be a finite positive number"),
    (lambda d: d["evidence"]["timing"].update(gate={"min-speedup": "1.02", "source": "default"}),
     "evidence.timing.gate.min-speedup", "expected an integer or a number, got a string"),
    (lambda d: d["evidence"]["timing"].update(gate={"min-speedup": 1.02, "source": "default", "by": "me"}),
     "evidence.timing.gate.by", "unknown field"),
    (lambda d: d["evidence"]["timing"].update(gate=1.02), "evidence.timing.gate", "got a number"),
])
def test_receipt_shape_errors(toy, mutate, field, message):
    d = receipt_for(toy)
    mutate(d)
    with pytest.raises(ReceiptInvalid) as ei:
        Receipt.parse(d, file="receipts/toy/r.json")
    assert str(ei.value).startswith(f"receipts/toy/r.json: {field}: ") and message in str(ei.value)


def test_receipt_malformed_json(tmp_path):
    p = tmp_path / "r.json"
    p.write_text("{nope")
    with pytest.raises(ReceiptInvalid, match="not valid JSON"):
        Receipt.read(p)


# --- lockfiles --------------------------------------------------------------

def test_lockfile_unknown_major_and_malformed(tmp_path):
    p = tmp_path / "x.lock"
    p.write_text('schema = "frt.lock/2"\nlock-digest = "sha256:00"\n')
    with pytest.raises(LockfileError, match="unknown schema major version 2") as ei:
        Lockfile.read(p)
    assert ei.value.exit_code == 2
    p.write_text("schema = [\n")
    with pytest.raises(LockfileError, match="not valid TOML") as ei:
        Lockfile.read(p)
    assert ei.value.exit_code == 2


def _bundled_lock() -> Lockfile:
    return Lockfile.read(BUNDLED / "lockfiles" / "demo-decoder.lock")


def test_lockfile_embeds_the_manifest_as_one_json_literal_in_manifest_order():
    text = (BUNDLED / "lockfiles" / "demo-decoder.lock").read_text("utf-8")
    assert "\nmanifest = '''\n{\n" in text and "\n[manifest" not in text  # no TOML tables for it
    lock = _bundled_lock()
    assert list(lock.manifest.routes) == ["fused", "split"]  # the manifest file's order, not sorted
    assert lock.manifest.digest == Manifest.read(BUNDLED / "manifests" / "demo-decoder.toml").digest


@pytest.mark.parametrize("description", ["a ''' b", "del \x7f here"])
def test_lockfile_manifest_text_no_literal_can_hold_still_round_trips(tmp_path, description):
    lock = _bundled_lock()
    raw = {**lock.manifest.raw, "description": description}
    new = dataclasses.replace(lock, manifest=Manifest.from_dict(raw, file="m.toml"), path=None)  # (a fresh cache: replace never copies it)
    p = tmp_path / "x.lock"
    p.write_bytes(new.render())
    assert "\nmanifest = '''" not in p.read_text("utf-8")  # the escaped basic-string form instead
    back = Lockfile.read(p)
    assert back.manifest.raw["description"] == description
    assert back.manifest.digest == new.manifest.digest and back.lock_digest == new.lock_digest
    assert new.render() == p.read_bytes()  # still byte-deterministic


@pytest.mark.parametrize("value, message", [
    ("{nope", "manifest: not valid JSON"),
    ("[1, 2]", "manifest: expected the manifest as a JSON object"),
    (5, "manifest: expected the manifest as a JSON object"),
])
def test_lockfile_embedded_manifest_errors_name_the_field(tmp_path, value, message):
    doc = _bundled_lock().document()
    doc["manifest"] = value
    p = tmp_path / "x.lock"
    p.write_bytes(render(doc, digest(doc)))  # a lock-digest that verifies: the manifest itself is bad
    with pytest.raises(LockfileError) as ei:
        Lockfile.read(p, label="lockfiles/x.lock")
    assert str(ei.value).startswith(f"lockfiles/x.lock: {message}"), str(ei.value)
    assert ei.value.exit_code == 2


def test_lockfile_index_is_one_json_line_per_cell_and_the_table_form_still_reads(tmp_path):
    text = (BUNDLED / "lockfiles" / "demo-decoder.lock").read_text("utf-8")
    assert "\nindex = '''\n[\n{" in text and "[[index]]" not in text
    lock = _bundled_lock()
    doc = lock.document()
    assert len(doc["index"].splitlines()) == len(lock.index) + 2  # "[", one line per cell, "]"
    doc["index"] = json.loads(doc["index"])  # the same cells as [[index]] tables
    p = tmp_path / "tables.lock"
    p.write_bytes(render(doc, digest(doc)))
    assert "[[index]]" in p.read_text("utf-8")
    assert Lockfile.read(p).index == lock.index


@pytest.mark.parametrize("value, field, message", [
    ("[nope", "index", "not valid JSON"),
    ('{"a": 1}', "index", "expected a JSON array"),
    ("[5]", "index[0]", "expected an object, got int"),
])
def test_lockfile_index_errors_name_the_field(tmp_path, value, field, message):
    doc = _bundled_lock().document()
    doc["index"] = value
    p = tmp_path / "x.lock"
    p.write_bytes(render(doc, digest(doc)))
    with pytest.raises(LockfileError) as ei:
        Lockfile.read(p, label="lockfiles/x.lock")
    assert str(ei.value).startswith(f"lockfiles/x.lock: {field}: {message}"), str(ei.value)


def test_lockfile_index_candidate_must_be_an_object(tmp_path):
    doc = _bundled_lock().document()
    cells = json.loads(doc["index"])
    cells[1]["candidates"][0] = "fused"
    doc["index"] = json.dumps(cells)
    p = tmp_path / "x.lock"
    p.write_bytes(render(doc, digest(doc)))
    with pytest.raises(LockfileError, match=r"^lockfiles/x.lock: index\[1\].candidates\[0\]: expected an object"):
        Lockfile.read(p, label="lockfiles/x.lock")


def test_lockfile_receipts_are_one_json_line_each_and_the_table_form_still_reads(tmp_path):
    lock = _bundled_lock()
    doc = lock.document()
    assert len(doc["receipts"].splitlines()) == len(lock.receipts) + 2
    want = {d: lock.receipts[d].data for d in lock.receipts}
    rows = json.loads(doc["receipts"])
    doc["receipts"] = [{"digest": x["digest"], "file": x["file"], "route": x["route"], "state": x["state"],
                        "json": json.dumps(x["receipt"])} for x in rows]  # as [[receipts]] tables
    p = tmp_path / "tables.lock"
    p.write_bytes(render(doc, digest(doc)))
    assert "[[receipts]]" in p.read_text("utf-8")
    back = Lockfile.read(p)
    assert {d: back.receipts[d].data for d in back.receipts} == want


@pytest.mark.parametrize("mutate, field, message", [
    (lambda rows: "[nope", "receipts", "not valid JSON"),
    (lambda rows: "5", "receipts", "expected a JSON array"),
    (lambda rows: json.dumps([7]), "receipts[0]", "expected an object, got int"),
    (lambda rows: json.dumps([{**rows[0], "receipt": "text"}]), "receipts[0].receipt", "expected"),
    (lambda rows: json.dumps([{**rows[0], "extra": 1}]), "receipts[0]", "unknown"),
])
def test_lockfile_receipt_errors_name_the_field(tmp_path, mutate, field, message):
    doc = _bundled_lock().document()
    doc["receipts"] = mutate(json.loads(doc["receipts"]))
    p = tmp_path / "x.lock"
    p.write_bytes(render(doc, digest(doc)))
    with pytest.raises(LockfileError) as ei:
        Lockfile.read(p, label="lockfiles/x.lock")
    assert str(ei.value).startswith(f"lockfiles/x.lock: {field}"), str(ei.value)
    assert message in str(ei.value)


def test_an_embedded_receipt_that_does_not_match_its_digest_is_refused_on_use(tmp_path):
    doc = _bundled_lock().document()
    rows = json.loads(doc["receipts"])
    rows[0]["receipt"]["evidence"]["fallbacks"] += 1  # the lock-digest is recomputed: only the receipt digest catches it
    doc["receipts"] = json.dumps(rows)
    p = tmp_path / "x.lock"
    p.write_bytes(render(doc, digest(doc)))
    lock = Lockfile.read(p, label="lockfiles/x.lock")
    with pytest.raises(LockfileError, match=r"receipts\[0\]\.digest does not match the embedded receipt"):
        lock.receipts[rows[0]["digest"]]


def test_a_damaged_receipt_line_is_refused_when_first_used_naming_it(tmp_path):
    """Reading a lock parses no receipt line (a large lock is mostly receipts); the line is
    checked, like the table form was, when a decision or `frt verify` first looks at it."""
    doc = _bundled_lock().document()
    lines = doc["receipts"].split("\n")
    digest1 = json.loads(lines[2].rstrip(","))["digest"]
    lines[2] = lines[2].replace('"receipt": {', '"receipt": {,', 1)
    doc["receipts"] = "\n".join(lines)
    p = tmp_path / "x.lock"
    p.write_bytes(render(doc, digest(doc)))
    lock = Lockfile.read(p, label="lockfiles/x.lock")
    assert digest1 in lock.receipts and len(lock.receipts) == 4
    with pytest.raises(LockfileError, match=r"^lockfiles/x.lock: receipts\[1\]: not valid JSON"):
        lock.receipts[digest1]
    # `frt verify` (receipt_problems) reports it as a problem with the others instead of stopping
    [(where, why)] = lock.receipt_problems()
    assert where == "receipts[1]" and "not valid JSON" in why


def test_embedded_receipts_compare_by_content():
    """A lockfile's lazily parsed receipts compare as the mapping they are (two different
    sets of receipts are not equal, whatever class holds them)."""
    from frt_dist.documents.lock_index import _LazyReceipts

    path = BUNDLED / "lockfiles" / "demo-decoder.lock"
    a, b = Lockfile.read(path), Lockfile.read(path)
    assert a.receipts is not b.receipts and a.receipts == b.receipts
    some = {d: (f"receipts[{i}]", a.receipts[d].file, a.receipts[d].data, "object")
            for i, d in enumerate(a.receipts) if i}
    fewer = _LazyReceipts("fewer.lock", some, True)
    assert len(fewer) == 3 and fewer != a.receipts and _LazyReceipts("none.lock", {}, True) != a.receipts
    assert fewer == {d: a.receipts[d] for d in some}


# --- the one TOML reader (rtoml), held to the stdlib's tomllib as an independent oracle


@pytest.mark.parametrize("rel", ["lockfiles/demo-decoder.lock", "manifests/demo-decoder.toml", "pyproject.toml"])
def test_toml_reader_equals_tomllib_with_key_order(rel):
    import tomllib

    from frt_dist.documents.schema import parse_toml

    raw = (BUNDLED / rel).read_bytes()
    got, want = parse_toml(raw, LockfileError, rel), tomllib.loads(raw.decode("utf-8"))
    assert got == want

    def keys(v):  # every table's key order, recursively
        if isinstance(v, dict):
            return [(k, keys(x)) for k, x in v.items()]
        if isinstance(v, list):
            return [keys(x) for x in v]
        return None

    assert keys(got) == keys(want)


@pytest.mark.parametrize("text, where", [
    (b"a = 1\na = 2\n", "line 2"),                      # duplicate key
    (b"[t]\nx = 1\n[t]\ny = 2\n", "line 3"),            # table opened twice
    (b"s = \"unterminated\n", "line 1"),
    (b"\xff\xfe = 1\n", "utf-8"),                       # not UTF-8
    (b"x = 1979-05-27T07:32:00Z\ny = [1, 'a'\n", "line 2"),
])
def test_damaged_lockfile_is_a_lockfile_error_naming_the_file(tmp_path, text, where):
    import tomllib

    with pytest.raises((tomllib.TOMLDecodeError, UnicodeDecodeError)):
        tomllib.loads(text.decode("utf-8"))  # the oracle agrees it is damaged
    p = tmp_path / "bad.lock"
    p.write_bytes(text)
    with pytest.raises(LockfileError) as ei:
        Lockfile.read(p, label="lockfiles/bad.lock")
    msg = str(ei.value)
    assert msg.startswith("lockfiles/bad.lock: not valid TOML: ") and where in msg.lower(), msg
    assert ei.value.exit_code == 2 and ei.value.reasons[0]["file"] == "lockfiles/bad.lock"


def test_receipt_software_is_read_as_major_minor_and_kept_as_recorded(toy):
    d = receipt_for(toy)
    d["cell"]["software"] = {"torch": "2.13.0+cpu", "kernels": "0.17.2", "cuda": "12.8"}
    r = Receipt.parse(d, file="receipts/toy/r.json")
    assert r.software == {"torch": "2.13", "kernels": "0.17", "cuda": "12.8"}  # software identity as major.minor
    assert r.cell["software"]["kernels"] == "0.17.2" and r.digest == digest(d)  # the evidence itself is untouched
