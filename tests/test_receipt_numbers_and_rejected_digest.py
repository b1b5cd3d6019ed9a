"""Receipts whose numbers no float holds, the digest of a rejected receipt,
and the same refusals through `frt lock` and `frt verify` (no traceback, file and field named)."""

from __future__ import annotations

import copy
import hashlib
import json
import shutil

import pytest

from frt_dist.documents.receipt import Receipt
from frt_dist.errors import ReceiptInvalid
from helpers.frt import frt_process
from helpers.paths import BUNDLED

RECEIPTS = BUNDLED / "receipts" / "demo-decoder"
CERTIFIED = json.loads((RECEIPTS / "fused--decode--fp32--amd-epyc.json").read_text())
HUGE = 10**400  # JSON holds it (401 digits < Python's 4,300-digit limit); no float does


def oracle_digest(value) -> str:
    """The canonical-JSON digest, written out here rather than taken from frt_dist."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


@pytest.fixture
def demo(tmp_path):
    root = tmp_path / "demo"
    root.mkdir()
    for d in ("manifests", "lockfiles", "receipts", "packages"):
        shutil.copytree(BUNDLED / d, root / d, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return root


@pytest.mark.parametrize("where, field", [
    (("evidence", "timing"), "speedup-min"),
    (("evidence", "timing"), "host-median-ms"),
    (("evidence", "parity"), "max-abs"),
    (("evidence", "parity", "tolerance"), "rel"),
])
def test_an_integer_no_float_holds_is_a_receipt_error_naming_the_field(where, field):
    d = copy.deepcopy(CERTIFIED)
    t = d
    for k in where:
        t = t[k]
    t[field] = HUGE
    with pytest.raises(ReceiptInvalid) as exc:
        Receipt.parse(d, file="r.json")
    assert str(exc.value) == (f"r.json: {'.'.join(where)}.{field}: an integer of 401 digits is out of range for a "
                              "number (at most about 1.8e308)")


@pytest.mark.parametrize("field, value, why", [
    ("speedup-median", True, "expected an integer or a number, got a boolean"),
    ("route-median-ms", -1.0, "must be a finite non-negative number"),
    ("host-median-ms", float("nan"), "must be a finite non-negative number"),
    ("speedup-max", float("inf"), "must be a finite non-negative number"),
])
def test_bools_negative_and_non_finite_times_are_receipt_errors(field, value, why):
    d = copy.deepcopy(CERTIFIED)
    d["evidence"]["timing"][field] = value
    with pytest.raises(ReceiptInvalid) as exc:
        Receipt.parse(d, file="r.json")
    assert str(exc.value) == f"r.json: evidence.timing.{field}: {why}"


def _lock(root, *extra):
    return frt_process(["lock", "--json", *extra], cwd=root)


def _rejected(root) -> list[dict]:
    from frt_dist.documents.lockfile import Lockfile

    return Lockfile.read(root / "lockfiles" / "demo-decoder.lock").rejected


@pytest.mark.subprocess
def test_frt_lock_records_a_huge_number_as_a_rejected_receipt_naming_file_and_field(demo):
    d = copy.deepcopy(CERTIFIED)
    d["evidence"]["timing"]["speedup-min"] = HUGE
    path = demo / "receipts" / "demo-decoder" / "huge.json"
    path.write_text(json.dumps(d, indent=1))  # not canonical formatting: the digest must not depend on it
    r = frt_process(["lock"], cwd=demo)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    assert ("warning: receipts/demo-decoder/huge.json: evidence.timing.speedup-min: an integer of 401 digits is out "
            "of range for a number (at most about 1.8e308)") in r.stderr
    [rj] = _rejected(demo)
    assert rj["file"] == "receipts/demo-decoder/huge.json"
    # a rejected receipt that is JSON is filed under its canonical-JSON digest, not its bytes'
    assert rj["digest"] == oracle_digest(json.loads(path.read_text()))
    assert rj["digest"] != "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
    r = frt_process(["lock", "--strict"], cwd=demo)
    assert r.returncode == 1 and "Traceback" not in r.stderr


@pytest.mark.parametrize("content, kind", [
    (b"{not json", "bytes"),
    (b"\xff\xfe not utf-8", "bytes"),
    (json.dumps({"schema": "frt.receipt/1", "cell": {"model": "demo-decoder"}}).encode(), "json"),
])
@pytest.mark.subprocess
def test_a_rejected_receipts_digest_is_canonical_when_json_else_its_bytes(demo, content, kind):
    path = demo / "receipts" / "demo-decoder" / "bad.json"
    path.write_bytes(content)
    r = frt_process(["lock"], cwd=demo)
    assert r.returncode == 0 and "warning: receipts/demo-decoder/bad.json: " in r.stderr, r.stderr
    [rj] = _rejected(demo)
    want = oracle_digest(json.loads(content)) if kind == "json" else "sha256:" + hashlib.sha256(content).hexdigest()
    assert rj["digest"] == want


@pytest.mark.subprocess
def test_a_folder_named_like_a_receipt_is_rejected_without_a_traceback(demo):
    (demo / "receipts" / "demo-decoder" / "folder.json").mkdir()
    r = frt_process(["lock"], cwd=demo)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert "warning: receipts/demo-decoder/folder.json: is a directory, not a regular file" in r.stderr
    [rj] = _rejected(demo)
    assert rj["digest"] == "unreadable"


@pytest.mark.subprocess
def test_frt_verify_names_a_huge_number_in_an_embedded_receipt(demo):
    from frt_dist.lock.build import lock_model
    from frt_dist.project.discover import Project

    from test_verify import Edit, lockpath

    lock_model(Project(demo, "project", {}), "demo-decoder", warn=lambda m: None)
    e = Edit(lockpath(demo))
    row = e.receipt("fused", "decode")
    row["receipt"]["evidence"]["parity"]["max-abs"] = HUGE
    e.redigest(row)
    e.save()
    r = frt_process(["verify"], cwd=demo)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert ("fused--decode--fp32--amd-epyc.json: evidence.parity.max-abs: an integer of 401 digits is out of range "
            "for a number (at most about 1.8e308)") in r.stdout + r.stderr
