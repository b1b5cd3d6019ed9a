"""``frt resolve --explain``: for every candidate route the
variant this system selects for each package, every failing package of a route, archs
in numeric order, and the full variant lists only under ``-v``."""

from __future__ import annotations

import json

import pytest

from frt_dist.cli.main import main
from frt_dist.system.hardware import parse_cuda_arch
from frt_dist.system.variants import select_variants
from helpers.factories import CPU, tiny_project, write_package

ARCHS = ["12.0a", "9.0", "10.0", "8.0"]  # as declared: not in order
CPU_FLAGS = ["--arch", "x86_64", "--device-class", "test-cpu", "--software", "torch=2.13"]
OLD_GPU = ["--arch", "7.5", "--device-class", "t4", "--software", "torch=2.13,cuda=12.8"]


@pytest.fixture(scope="module")
def proj(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("explain")
    tp = tiny_project(tmp)
    for folder in ("scale", "norm"):  # a CUDA build next to the CPU one, in both packages
        write_package(tp.root / "packages" / folder, folder, variant="torch-cuda", backend="cuda", archs=ARCHS)
    lock = tp.lock(receipts=[("fast", "decode"), ("solo", "decode", "supported_correct")])
    return tp, lock


def _resolve(tp, capsys, *argv):
    rc = main(["resolve", "--model", "tiny", "--project", str(tp.root), "--phase", "decode", *argv])
    out = capsys.readouterr().out
    return rc, out


def test_every_candidate_shows_the_variant_this_system_selects(proj, capsys):
    tp, lock = proj
    rc, out = _resolve(tp, capsys, *CPU_FLAGS, "--explain", "--json")
    assert rc == 0
    cands = {c["route"]: c for c in json.loads(out)["candidates"]}
    assert (cands["fast"]["won"], cands["solo"]["won"]) == (True, False)
    want = {repo: select_variants(p.variants, CPU).selected for repo, p in lock.packages.items()}
    assert want == {"t-org/scale": "torch-cpu", "t-org/norm": "torch-cpu"}  # the oracle picks something
    for c in cands.values():  # the loser too (it used to read null)
        assert {r: p["variant"] for r, p in c["packages"].items()} == {r: want[r] for r in c["packages"]}
        assert all(p["problem"] is None for p in c["packages"].values()) and c["problems"] == []
        assert set(next(iter(c["packages"].values()))) == {"revision", "variants", "variant", "problem"}
    assert cands["solo"]["reason"] == "receipt is supported_correct; accept is certified_fast"
    rc, text = _resolve(tp, capsys, *CPU_FLAGS, "--explain")
    rev = lock.packages["t-org/scale"].revision[:19]
    assert text.count(f"           t-org/scale @ {rev}  selects torch-cpu\n") == 2  # fast and solo
    assert "accepted:" not in text and "rejected:" not in text and "variants" not in text


def test_every_failing_package_is_named_with_archs_in_numeric_order(proj, capsys):
    tp, lock = proj
    rc, out = _resolve(tp, capsys, *OLD_GPU, "--explain", "--json")
    assert rc == 1
    doc = json.loads(out)
    ordered = sorted(ARCHS, key=lambda a: parse_cuda_arch(a)[:2])  # recomputed here: 8.0, 9.0, 10.0, 12.0a
    assert ordered == ["8.0", "9.0", "10.0", "12.0a"]
    why = {s: f"package {s} declares {','.join(ordered)}; device is 7.5" for s in ("scale", "norm")}
    cands = {c["route"]: c for c in doc["candidates"]}
    order = [r.split("/")[1] for r in lock.manifest.route_packages("fast")]
    assert sorted(order) == ["norm", "scale"]
    assert cands["fast"]["problems"] == [why[s] for s in order]  # both packages, in the route's order
    assert cands["solo"]["problems"] == [why["scale"]]
    assert {r: (p["variant"], p["problem"]) for r, p in cands["fast"]["packages"].items()} == {
        "t-org/scale": ("torch-cuda", why["scale"]), "t-org/norm": ("torch-cuda", why["norm"])}
    # the decision's reason stays one line: the first failing package
    reasons = {r["route"]: r["reason"] for r in doc["decisions"][0]["reasons"]}
    assert reasons == {"fast": why[order[0]], "solo": why["scale"]}
    rc, text = _resolve(tp, capsys, *OLD_GPU, "--explain")
    assert f"t-org/norm @ {lock.packages['t-org/norm'].revision[:19]}  selects torch-cuda  FAILS: {why['norm']}" in text
    assert f"FAILS: {why['scale']}" in text


def test_full_variant_lists_only_under_verbose(proj, capsys):
    tp, lock = proj
    rc, out = _resolve(tp, capsys, *CPU_FLAGS, "-v", "--json")  # -v implies --explain
    pk = json.loads(out)["candidates"][0]["packages"]["t-org/scale"]
    oracle = select_variants(lock.packages["t-org/scale"].variants, CPU)
    assert pk["accepted"] == list(oracle.accepted) == ["torch-cpu"]
    assert pk["rejected"] == [{"variant": v, "reason": r} for v, r in oracle.rejected]
    assert pk["rejected"] == [{"variant": "torch-cuda",
                               "reason": "backend (cuda) does not match system backend (cpu) and is not universal"}]
    rc, text = _resolve(tp, capsys, *CPU_FLAGS, "--explain", "--verbose")
    assert ("             accepted: torch-cpu\n             rejected: torch-cuda: backend (cuda) does not match "
            "system backend (cpu) and is not universal") in text
