"""Mixed precision: an impl may serve several route precisions
(``precision = ["fp32", "fp8"]``); a route runs at the precision it declares or at the
one precision all its impls serve."""

from __future__ import annotations

import copy

import pytest
import torch

from frt_dist.documents.manifest import Manifest
from frt_dist.errors import ManifestError
from frt_dist.routes.resolver import resolve
from frt_dist.serve.load import load
from helpers.factories import CPU, impl_doc, manifest_doc, tiny_project

pytestmark = pytest.mark.usefixtures("fresh_loader")


def mixed_doc() -> dict:
    """``act`` has one impl serving fp32 and fp8; ``norm`` an fp32 and an fp8 impl; route
    ``fast`` runs at fp32, route ``eight`` at fp8 sharing the act impl."""
    doc = manifest_doc()
    doc["seams"]["act"]["impls"]["scale"]["precision"] = ["fp32", "fp8"]
    norm8 = impl_doc("t-org/norm", "norm")
    norm8["precision"] = "fp8"
    doc["seams"]["norm"]["impls"]["norm8"] = norm8
    doc["routes"] = {"fast": {"assembly": "eager", "seams": {"act": "scale", "norm": "norm"}},
                     "eight": {"assembly": "eager", "seams": {"act": "scale", "norm": "norm8"}}}
    return doc


def _manifest(doc: dict) -> Manifest:
    return Manifest.from_dict(doc, file="m.toml")


def test_an_fp8_route_with_a_shared_fp32_fp8_impl_resolves_and_loads(tmp_path):
    m = _manifest(mixed_doc())
    assert (m.routes["fast"].precision, m.routes["eight"].precision) == ("fp32", "fp8")
    assert m.precisions == ["fp32", "fp8"]
    tp = tiny_project(tmp_path, manifest=mixed_doc())
    lock = tp.lock(receipts=[("eight", "decode"), ("eight", "prefill")])
    d = resolve(lock, hardware=CPU, precision="fp8", phase="decode")
    assert (d.decision, d.route) == ("route", "eight")
    # the fp32 band has no receipt: refused for that reason, and eight is out for its precision
    d32 = resolve(lock, hardware=CPU, precision="fp32", phase="decode")
    assert d32.decision == "refused"
    assert ("eight", "route precision is fp8; requested fp32") in d32.reasons
    plan = load("tiny", lockfile=lock.path, hardware=CPU, precision="fp8")
    x, w = torch.randn(4, 8), torch.randn(8)
    assert torch.equal(plan.entry("act", "decode")(x, w), x * w)


def test_a_plain_string_precision_keeps_route_digests():
    plain = _manifest(manifest_doc())
    listed_doc = manifest_doc()
    listed_doc["seams"]["act"]["impls"]["scale"]["precision"] = ["fp32", "fp8"]
    listed_doc["routes"]["solo"]["precision"] = "fp32"  # its one impl serves two: it must say which
    listed = _manifest(listed_doc)
    # a manifest without lists is read as before; the list is part of what a receipt measured
    assert plain.routes["fast"].precision == listed.routes["fast"].precision == "fp32"
    assert plain.routes["solo"].digest != listed.routes["solo"].digest
    again = _manifest(copy.deepcopy(manifest_doc()))
    assert again.routes["fast"].digest == plain.routes["fast"].digest


def test_a_route_with_no_common_precision_is_an_error_naming_the_route():
    doc = mixed_doc()
    doc["seams"]["act"]["impls"]["scale"]["precision"] = "bf16"
    doc["default-precision"] = "bf16"
    with pytest.raises(ManifestError) as ei:
        _manifest(doc)
    assert "m.toml: routes.fast.seams: the route's impls share no precision (act: bf16; norm: fp32)" in str(ei.value)


def test_several_common_precisions_need_the_route_to_declare_one():
    doc = mixed_doc()
    doc["seams"]["norm"]["impls"]["norm"]["precision"] = ["fp32", "fp8"]
    with pytest.raises(ManifestError, match=r"routes\.fast\.precision: the route's impls share several "
                                            r"precisions \(fp32, fp8\): declare which one"):
        _manifest(doc)
    doc["routes"]["fast"]["precision"] = "fp32"
    assert _manifest(doc).routes["fast"].precision == "fp32"
    doc["routes"]["eight"]["precision"] = "fp32"
    with pytest.raises(ManifestError, match=r"routes\.eight\.precision: 'fp32' is not served by the impl of seam "
                                            r"'norm' \(it serves fp8\)"):
        _manifest(doc)


@pytest.mark.parametrize("value, why", [
    ([], "precision: at least one precision is required"),
    (["fp8", "fp8"], "precision: lists a precision twice"),
    (8, "precision: expected"),
])
def test_bad_impl_precision_names_the_field(value, why):
    doc = mixed_doc()
    doc["seams"]["act"]["impls"]["scale"]["precision"] = value
    with pytest.raises(ManifestError, match="seams.act.impls.scale." + why):
        _manifest(doc)
