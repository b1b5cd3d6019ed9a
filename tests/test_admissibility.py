"""One admissibility rule: a receipt stands for its cell only when every
variant it measured would run there. `frt lock` rejects the others, `frt verify` re-derives that,
resolve refuses such a package, and the matrix never shows such a receipt as a winner, so the
matrix's winner is resolve's decision in every cell (the property test below, on real FlashRT archs).
Also the device-class rule: a receipt's device class is normalised where it is read."""

from __future__ import annotations

import json
import tomllib

import pytest

from frt_dist.base.canonical import digest
from frt_dist.documents.lockfile import LockedVariant, Lockfile
from frt_dist.documents.receipt import Receipt
from frt_dist.lock.build import derive_index, lock_model
from frt_dist.routes.matrix import _table, render_matrix
from frt_dist.routes.resolver import ACCEPTABLE, resolve
from frt_dist.system.admissible import admission_problems, variant_problem
from frt_dist.system.hardware import Hardware
from helpers.factories import (
    SCALE_SRC,
    cuda_hw,
    impl_doc,
    manifest_doc,
    receipt_doc,
    tiny_project,
    variant_files,
    write_variant,
)
from helpers.frt import frt_process
from helpers.paths import DATA

ARCHS = json.loads((DATA / "flashrt-archs.json").read_text("utf-8"))["cuda_capabilities"]
SOFTWARE = {"torch": "2.13", "cuda": "12.8"}


def _hw(arch: str, dc: str, cpu: str = "x86_64") -> Hardware:
    return Hardware(arch=arch, device_class=dc, backend="cuda", cpu=cpu, os="linux", software=SOFTWARE)


CELLS = [_hw("9.0", "h200"), _hw("10.0", "b200"), _hw("12.0", "rtx-5090"), _hw("8.9", "l40s"), _hw("8.0", "a100"),
         _hw("12.1", "gb10", "aarch64"), _hw("11.0", "thor", "aarch64")]


def _v(name="torch-cuda", backend="cuda", archs=()) -> LockedVariant:
    return LockedVariant(name, backend, tuple(archs), "sha256:" + "0" * 64, "m", "m", "sha256", {})


# ---------------------------------------------------------------------------
# the rule itself


@pytest.mark.parametrize("variant,backend,arch,why", [
    (_v(archs=("12.0a", "8.9", "11.0a")), "cuda", "9.0", "declares 8.9,11.0a,12.0a"),  # fp8-gemm on an H200: sorted
    (_v(archs=("8.9", "11.0a", "12.0a")), "cuda", "8.9", None),
    (_v(archs=("8.9", "11.0a", "12.0a")), "cuda", "12.0", None),
    (_v(archs=("8.9", "11.0a", "12.0a")), "cuda", "12.1", "declares 8.9,11.0a,12.0a"),  # 12.0a is exactly 12.0
    (_v(archs=("11.0a", "12.0a")), "cuda", "10.0", "declares 11.0a,12.0a"),  # nvfp4 on a B200
    (_v(archs=()), "cuda", "9.0", None),  # no declaration: no claim to check
    (_v(backend="rocm", archs=("gfx942",)), "rocm", "gfx90a", "declares gfx942"),
    (_v(backend="rocm", archs=("gfx942",)), "rocm", "gfx942", None),
    (_v("torch-cpu", "cpu"), "cpu", "x86_64", None),
    (_v("torch-cpu", "cpu"), "cuda", "9.0", "is a cpu build"),
    (_v(archs=()), "cpu", "x86_64", "is a cuda build"),  # a CUDA build on a CPU cell, even without archs
    (_v("torch-cpu", "cpu", ("x86_64",)), "cpu", "x86_64", "declares x86_64"),  # an arch list on CPU: no evidence
    (_v("torch-universal", "cpu"), "cuda", "9.0", None),  # pure Python runs anywhere, whatever type it names
    (_v("torch-universal", "cuda"), "cpu", "x86_64", None),
    (_v("torch-universal", "cpu", ("9.0",)), "cuda", "8.0", "declares 9.0"),
])
def test_variant_problem(variant, backend, arch, why):
    assert variant_problem(variant, backend, arch) == why


@pytest.mark.parametrize("repo", sorted(ARCHS))
def test_the_cuda_rule_agrees_with_kernels_on_real_archs(repo):
    """Oracle: `kernels`' own capability check, on every real package's archs and every cell."""
    from kernels.archs import _supports_cuda_capability

    for hw in CELLS:
        cap = tuple(int(x) for x in hw.arch.split("."))
        ours = variant_problem(_v(archs=ARCHS[repo]), "cuda", hw.arch) is None
        assert ours == _supports_cuda_capability(list(ARCHS[repo]), cap), (repo, hw.arch)


def test_admission_problems_names_seam_package_variant_archs_and_arch():
    class P:
        variants = {"torch-cuda": _v(archs=("12.0a", "11.0a"))}

    cell = {"hardware": {"backend": "cuda", "arch": "10.0"},
            "impls": {"gemm": {"package": "flashrt/fp4-gemm", "variant": "torch-cuda"},
                      "act": {"package": "flashrt/fp4-gemm", "variant": "torch-cpu"},
                      "out": {"package": "flashrt/gone", "variant": "torch-cuda"}}}
    assert admission_problems({"flashrt/fp4-gemm": P}, cell) == [
        "cell.impls.act: variant 'torch-cpu' of flashrt/fp4-gemm is not locked",
        "cell.impls.gemm: package flashrt/fp4-gemm variant torch-cuda declares 11.0a,12.0a; "
        "the cell's cuda arch 10.0 is not admitted",
        "cell.impls.out: variant 'torch-cuda' of flashrt/gone is not locked",
    ]


# ---------------------------------------------------------------------------
# frt lock / verify on a project


def cuda_project(tmp_path, archs=("8.9",)):
    pk = {"variant": "torch-cuda", "backend": "cuda", "archs": list(archs)}
    return tiny_project(tmp_path, packages={"scale": {"name": "scale", "source": SCALE_SRC, **pk},
                                            "norm": {"name": "norm", "source": SCALE_SRC, **pk}})


def write_receipt(tp, lf, route, phase, hw, name, **kw) -> dict:
    doc = receipt_doc(lf, route, phase, hw, **kw)
    d = tp.root / "receipts" / tp.model
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_text(json.dumps(doc, indent=1), "utf-8")
    return doc


@pytest.mark.subprocess
def test_lock_rejects_a_receipt_whose_variant_does_not_admit_its_arch(tmp_path):
    tp = cuda_project(tmp_path)
    lf = tp.lock()
    write_receipt(tp, lf, "solo", "decode", cuda_hw("8.9", "l40s"), "ok.json")
    bad = write_receipt(tp, lf, "solo", "decode", cuda_hw("9.0", "h200"), "h200.json")
    r = frt_process(["lock"], cwd=tp.root)
    assert r.returncode == 0, r.stderr
    why = ("cell.impls.act: package t-org/scale variant torch-cuda declares 8.9; "
           "the cell's cuda arch 9.0 is not admitted")
    assert f"warning: receipts/tiny/h200.json: {why}" in r.stderr
    doc = tomllib.loads(tp.lock_path.read_text("utf-8"))
    assert doc["rejected-receipts"] == [{"digest": digest(bad), "file": "receipts/tiny/h200.json", "reason": why,
                                         "route": "solo", "phase": "decode", "device-class": "h200"}]
    lock = Lockfile.read(tp.lock_path)
    assert [k.device_class for k in lock.index] == ["l40s"] and len(lock.receipts) == 1
    r = frt_process(["lock", "--strict"], cwd=tp.root)
    assert r.returncode == 1 and "1 receipt(s) rejected under --strict" in r.stderr, r.stderr
    assert frt_process(["verify"], cwd=tp.root).returncode == 0  # the rejection is what verify derives too


@pytest.mark.subprocess
def test_verify_fails_a_lock_edited_to_admit_one(tmp_path):
    from test_verify import Edit, problem, run_verify

    tp = cuda_project(tmp_path)
    tp.lock(receipts=[("solo", "decode")], hardware=cuda_hw("8.9", "l40s"))
    e = Edit(tp.lock_path)
    row = e.receipt("solo", "decode")
    row["receipt"]["cell"]["hardware"].update({"arch": "9.0", "device-class": "h200"})
    e.redigest(row)
    e.cell("decode").update({"arch": "9.0", "device-class": "h200"})
    e.save()
    rc, doc, _ = run_verify(tp.root)
    assert rc == 1
    p = problem(doc, "receipt", "(receipts/tiny/00-solo-decode.json)")
    assert p["recorded"] == "accepted as certified_fast"
    assert p["derived"] == ("rejected: cell.impls.act: package t-org/scale variant torch-cuda declares 8.9; "
                            "the cell's cuda arch 9.0 is not admitted")


def test_a_receipt_device_class_is_normalised(tmp_path):
    tp = cuda_project(tmp_path, archs=("9.0",))
    lf = tp.lock()
    docs = {}
    for i, name in enumerate(("NVIDIA H200", "NVIDIA-H200", "h200")):
        doc = receipt_doc(lf, "solo", "decode", cuda_hw("9.0", "h200"), speedup=1.2 + i / 10)
        doc["cell"]["hardware"]["device-class"] = name
        (tp.root / "receipts" / "tiny").mkdir(parents=True, exist_ok=True)
        (tp.root / "receipts" / "tiny" / f"r{i}.json").write_text(json.dumps(doc), "utf-8")
        docs[name] = doc
    empty = receipt_doc(lf, "solo", "prefill", cuda_hw("9.0", "h200"))
    empty["cell"]["hardware"]["device-class"] = "NVIDIA"
    (tp.root / "receipts" / "tiny" / "empty.json").write_text(json.dumps(empty), "utf-8")
    res = lock_model(tp.project, tp.model, warn=lambda m: None)
    lock = res.lockfile
    assert list(lock.index) == [("decode", "fp32", "cuda", "9.0", "h200")]
    assert len(lock.index[("decode", "fp32", "cuda", "9.0", "h200")].candidates) == 3
    # the digest is still of the receipt as written
    assert sorted(lock.receipts) == sorted(digest(d) for d in docs.values())
    assert {r.cell["hardware"]["device-class"] for r in lock.receipts.values()} == set(docs)
    [rj] = lock.rejected
    assert rj["file"] == "receipts/tiny/empty.json" and rj["reason"].startswith(
        "cell.hardware.device-class 'NVIDIA' (normalised: '') ")
    md = render_matrix(tp.project, model="tiny")
    assert "h200" in md and "NVIDIA H200" not in md and "NVIDIA-H200" not in md
    d = resolve(lock, hardware=cuda_hw("9.0", "h200"), phase="decode", precision="fp32")
    assert d.decision == "route" and lock.receipts[d.receipt].cell["hardware"]["device-class"] == "h200"


# ---------------------------------------------------------------------------
# property: on real declarations, the matrix's winner is resolve's decision in every cell


REAL = {  # package -> the precision its route serves
    "flashrt/fp8-gemm": "fp8", "flashrt/fp8-cross-attention-blackwell": "fp8", "flashrt/fp8-kv-attention": "fp8",
    "flashrt/flashrt-nvfp4": "nvfp4", "flashrt/fp4-gemm": "nvfp4", "flashrt/fa2-seqused-runtime": "bf16",
    "flashrt/audio-codebook-primitives": "bf16", "flashrt/flashrt-smallm-gemm": "bf16",
    "flashrt/MiniMaxAI-msa-blackwell": "bf16", "flashrt/adaptive-layernorm-producers": "bf16",
}


def real_project(tmp_path):
    packages, impls, routes = {}, {}, {}
    for repo, prec in REAL.items():
        name = repo.split("/")[1].lower()
        folder = f"packages/{name}"
        for cpu in ("x86_64", "aarch64"):
            write_variant(tmp_path / "p" / folder / "build" / f"torch213-cxx11-cu128-{cpu}-linux",
                          variant_files(name, backend="cuda", archs=ARCHS[repo]))
        packages[repo] = {"path": folder}
        impls[name] = {**impl_doc(repo, "scale"), "precision": prec}
        routes[name] = {"assembly": "eager", "seams": {"op": name}}
    doc = manifest_doc(model="real", packages=packages, seams={"op": {"structure": "op@1", "impls": impls}},
                       routes=routes)
    doc["default-precision"] = "bf16"
    tp = tiny_project(tmp_path, "p", manifest=doc, packages={})
    lf = tp.lock()
    n = 0
    for hw in CELLS:
        for phase in ("decode", "prefill"):
            for j, route in enumerate(routes):
                n += 1
                state = "supported_correct" if (j + n) % 5 == 0 else "certified_fast"
                write_receipt(tp, lf, route, phase, hw, f"{route}-{hw.device_class}-{phase}.json",
                              state=state, speedup=1.1 + ((7 * j + 3 * n) % 11) / 10)
    res = lock_model(tp.project, tp.model, warn=lambda m: None)
    return tp, res.lockfile


def _winners(lock) -> dict:
    table = _table(lock, "real")
    return {(r.phase, r.precision, r.backend, r.arch, r.device_class): next((c.route for c in r.cells if c.winner), None)
            for r in table.rows}


def _decisions(lock) -> dict:
    out = {}
    for hw in CELLS:
        for prec in lock.manifest.precisions:
            for phase in lock.manifest.phases:
                d = resolve(lock, hardware=hw, precision=prec, phase=phase, accept=ACCEPTABLE)
                out[(phase, prec, "cuda", hw.arch, hw.device_class)] = d.route if d.decision == "route" else None
    return out


def test_matrix_winner_is_resolve_decision_on_real_archs(tmp_path):
    from kernels.archs import _supports_cuda_capability

    tp, lock = real_project(tmp_path)
    # the lock accepted exactly the receipts whose variant `kernels` would load on the cell's arch
    files = sorted((tp.root / "receipts" / "real").glob("*.json"))
    recs = [Receipt.read(p, label=f"receipts/real/{p.name}") for p in files]
    admitted = {r.digest for r in recs if _supports_cuda_capability(
        list(ARCHS[next(iter(r.cell["impls"].values()))["package"]]),
        tuple(int(x) for x in r.cell["hardware"]["arch"].split(".")))}
    assert set(lock.receipts) == admitted
    assert {rj["digest"] for rj in lock.rejected} == {r.digest for r in recs} - admitted
    assert all(rj["reason"].endswith("is not admitted") for rj in lock.rejected)
    assert 20 < len(admitted) < len(recs) - 20  # both kinds, plenty of each

    winners, decisions = _winners(lock), _decisions(lock)
    assert set(winners) <= set(decisions)
    for key, got in decisions.items():
        assert winners.get(key) == got, key
    assert sum(v is not None for v in decisions.values()) > 20

    # a lock whose index still ranks the inadmissible receipts (written before the rule, or edited):
    # they would have won cells; the matrix leaves them out, as resolve does, so the two still agree
    old = Lockfile.read(tp.lock_path)
    old.receipts = {r.digest: r for r in recs}
    old.index = derive_index(recs)
    old.cache.clear()
    before = {k: e.candidates[0].route for k, e in old.index.items()}
    assert sum(before[k] != decisions[k] for k in before) >= 5
    winners = _winners(old)
    for key, got in _decisions(old).items():
        assert winners.get(key) == got, key
