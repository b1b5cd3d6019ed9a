"""Variant selection for a declared system, kept equal to `kernels` 0.17.2's pure resolver."""

from __future__ import annotations

import itertools

import pytest
from packaging.version import Version

from frt_dist import Hardware
from frt_dist.variants import select_variants, valid_variant_name

NAMES = [
    "torch213-cxx11-cpu-x86_64-linux", "torch213-cpu-x86_64-linux", "torch212-cxx11-cpu-x86_64-linux",
    "torch-stable-abi29-cpu-x86_64-linux", "torch-stable-abi214-cpu-x86_64-linux",
    "torch213-cxx11-cu128-x86_64-linux", "torch213-cxx11-cu126-x86_64-linux", "torch213-cxx11-cu130-x86_64-linux",
    "torch213-cxx11-cu128-aarch64-linux", "torch211-cxx11-cu128-x86_64-linux",
    "torch213-cxx11-rocm71-x86_64-linux", "torch-cpu", "torch-cuda", "torch-rocm", "torch-universal",
]

SYSTEMS = [
    dict(arch="x86_64", device_class="epyc", backend="cpu", software={"torch": "2.13"}),
    dict(arch="x86_64", device_class="epyc", backend="cpu", software={"torch": "2.12"}),
    dict(arch="12.0", device_class="rtx-5090", backend="cuda", software={"torch": "2.13", "cuda": "12.8"}, cpu="x86_64"),
    dict(arch="12.0", device_class="rtx-5090", backend="cuda", software={"torch": "2.13", "cuda": "12.6"}, cpu="x86_64"),
    dict(arch="11.0", device_class="thor", backend="cuda", software={"torch": "2.13", "cuda": "13.0"}, cpu="aarch64"),
    dict(arch="gfx942", device_class="mi300x", backend="rocm", software={"torch": "2.13", "rocm": "7.1"}, cpu="x86_64"),
]


def _kernels_choice(names, hw: Hardware):
    from kernels.backends import parse_backend
    from kernels.variants import _resolve_variant_for_system, parse_variant

    if hw.backend == "cuda":
        backend = parse_backend("cu" + hw.software["cuda"].replace(".", ""))
    elif hw.backend == "rocm":
        backend = parse_backend("rocm" + hw.software["rocm"].replace(".", ""))
    else:
        backend = parse_backend("cpu")
    accepted, _ = _resolve_variant_for_system(
        variants=[parse_variant(n) for n in names], selected_backend=backend, cpu=hw.cpu, os="linux",
        torch_version=Version(hw.software["torch"]), torch_cxx11_abi=True, tvm_ffi_version=None)
    return [v.variant_str for v in accepted]


@pytest.mark.parametrize("system", SYSTEMS, ids=lambda s: f"{s['backend']}-{s['arch']}-{s['software']}")
def test_selection_matches_kernels(system):
    hw = Hardware(os="linux", **system)
    for k in (1, 2, 3):
        for subset in itertools.combinations(NAMES, k):
            ours = select_variants(subset, hw)
            assert list(ours.accepted) == _kernels_choice(subset, hw), subset
    full = select_variants(NAMES, hw)
    assert list(full.accepted) == _kernels_choice(NAMES, hw)
    assert {n for n, _ in full.rejected} | set(full.accepted) == set(NAMES)


def test_this_machine_prefers_arch_build_then_noarch():
    hw = Hardware(arch="x86_64", device_class="epyc", backend="cpu", os="linux", software={"torch": "2.13"})
    c = select_variants(["torch-universal", "torch-cpu", "torch213-cxx11-cpu-x86_64-linux"], hw)
    assert c.selected == "torch213-cxx11-cpu-x86_64-linux"
    c = select_variants(["torch-universal", "torch-cpu"], hw)
    assert c.selected == "torch-cpu"
    c = select_variants(["torch-cuda"], hw)
    assert c.selected is None and "does not match system backend (cpu)" in c.rejected[0][1]


@pytest.mark.parametrize("name, ok", [("torch-cpu", True), ("..", False), ("../x", False), ("a/b", False),
                                      ("", False), ("torch213-cxx11-cu128-x86_64-linux", True)])
def test_variant_name_is_one_component(name, ok):
    assert valid_variant_name(name) is ok
