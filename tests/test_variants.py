"""Variant selection for a declared system, kept equal to `kernels` 0.17.2's pure resolver.

The oracle is `kernels` itself: ``parse_backend``/``parse_variant``/``_resolve_variant_for_system``
fed the system written out in `kernels`' own terms (next to, not derived from, the frt
``Hardware`` of the same machine)."""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass

import pytest
from packaging.version import Version

from frt_dist import Hardware
from frt_dist.system.variants import parse_variant, select_variants, valid_variant_name

# every variant name flashrt-project/FlashRT-HF-kernels@0823390 publishes (shared/data/flashrt-packages.json)
FLASHRT = ["torch211-cxx11-cu128-x86_64-linux", "torch211-cxx11-cu130-aarch64-linux", "torch211-cxx11-cu130-x86_64-linux",
           "torch213-cxx11-cu130-aarch64-linux", "torch213-cxx11-cu130-x86_64-linux"]

ZOO = sorted({*FLASHRT,
    # CUDA, x86_64 and aarch64 (Thor / GB10 builds), tagged and untagged, every minor relation
    "torch213-cxx11-cu128-x86_64-linux", "torch213-cxx11-cu126-x86_64-linux", "torch213-cxx11-cu130-x86_64-linux",
    "torch213-cu130-x86_64-linux", "torch213-cu128-x86_64-linux", "torch213-cxx98-cu128-x86_64-linux",
    "torch212-cxx11-cu128-x86_64-linux", "torch211-cxx11-cu128-x86_64-linux", "torch211-cxx11-cu130-aarch64-linux",
    "torch213-cxx11-cu130-aarch64-linux", "torch213-cxx11-cu129-aarch64-linux", "torch213-cu130-aarch64-linux",
    "torch213-cxx11-cu1210-x86_64-linux",  # kernels reads cu1210 as CUDA 121.0
    "torch209-cxx11-cu128-x86_64-linux",  # torch209 is torch 2.9, like torch29
    # stable ABI
    "torch-stable-abi29-cu128-x86_64-linux", "torch-stable-abi213-cu130-aarch64-linux",
    "torch-stable-abi214-cu130-x86_64-linux", "torch-stable-abi210-cpu-x86_64-linux",
    "torch-stable-abi29-cpu-aarch64-darwin", "torch-stable-abi29-rocm71-x86_64-linux",
    "torch-stable-abi29-xpu20253-x86_64-linux", "torch-stable-abi212-metal-aarch64-darwin",
    # ROCm
    "torch213-cxx11-rocm71-x86_64-linux", "torch213-cxx11-rocm70-x86_64-linux", "torch213-rocm64-x86_64-linux",
    # XPU (versioned: oneAPI 2025.3 is xpu20253)
    "torch213-xpu20253-x86_64-linux", "torch213-cxx11-xpu20252-x86_64-linux", "torch213-xpu20253-x86_64-windows",
    # Metal
    "torch213-metal-aarch64-darwin", "torch212-metal-aarch64-darwin", "torch213-cxx11-metal-aarch64-darwin",
    # CPU on every OS
    "torch213-cxx11-cpu-x86_64-linux", "torch213-cpu-x86_64-linux", "torch213-cpu-aarch64-linux",
    "torch213-cpu-aarch64-darwin", "torch213-cpu-x86_64-windows", "torch212-cxx98-cpu-x86_64-linux",
    # CANN, Neuron, TPU
    "torch213-cann80-aarch64-linux", "torch213-cxx11-cann81-aarch64-linux", "torch213-neuron-x86_64-linux",
    "torch213-tpu-x86_64-linux",
    # tvm-ffi (minor 0 of a backend ties with noarch in kernels' ranking)
    "tvm-ffi01-cu128-x86_64-linux", "tvm-ffi01-cu130-aarch64-linux", "tvm-ffi01-cpu-x86_64-linux",
    "tvm-ffi012-cu126-x86_64-linux", "tvm-ffi01-metal-aarch64-darwin", "tvm-ffi01-xpu20250-x86_64-linux",
    "tvm-ffi01-rocm70-x86_64-linux",
    # noarch
    "torch-cpu", "torch-cuda", "torch-rocm", "torch-xpu", "torch-metal", "torch-npu", "torch-neuron", "torch-tpu",
    "torch-universal",
    # not variants kernels knows (rejected by both)
    "torch29-cuda-x86_64-linux", "torch213-cu128-x86_64", "tvm-ffi-cu128-x86_64-linux",
    "torch213-cxx11-cu128-x86_64-linux-extra", "flash_attn", "torch213-vulkan-x86_64-linux",
    "torch-stable-abi29-cu128", "torch2-cpu-x86_64-linux",
})


@dataclass(frozen=True)
class System:
    """One machine, as frt declares it and as `kernels` sees it (written separately)."""

    id: str
    hw: dict  # Hardware(**hw)
    backend: str  # kernels' variant string of the selected backend
    cpu: str
    os: str
    torch: str | None = "2.13"
    cxx11: bool | None = True
    tvm_ffi: str | None = None
    macos: str | None = None


def _hw(arch, backend, cpu, os, device_class="dev", **software):
    return dict(arch=arch, device_class=device_class, backend=backend, cpu=cpu, os=os, software=software)


SYSTEMS = [
    System("h200-cu128", _hw("9.0", "cuda", "x86_64", "linux", torch="2.13", cuda="12.8"), "cu128", "x86_64", "linux"),
    System("rtx5090-cu126", _hw("12.0", "cuda", "x86_64", "linux", torch="2.13", cuda="12.6"), "cu126", "x86_64", "linux"),
    System("thor-cu130", _hw("11.0", "cuda", "aarch64", "linux", torch="2.13", cuda="13.0"), "cu130", "aarch64", "linux"),
    System("gb10-torch211", _hw("12.1", "cuda", "aarch64", "linux", torch="2.11", cuda="13.0"), "cu130", "aarch64",
           "linux", torch="2.11"),
    System("h200-tvm", _hw("9.0", "cuda", "x86_64", "linux", **{"torch": "2.13", "cuda": "12.8", "tvm-ffi": "0.1"}),
           "cu128", "x86_64", "linux", tvm_ffi="0.1"),
    System("b200-cu130-tvm", _hw("10.0", "cuda", "x86_64", "linux", **{"torch": "2.13", "cuda": "13.0", "tvm-ffi": "0.1.4"}),
           "cu130", "x86_64", "linux", tvm_ffi="0.1"),
    System("h200-cxx98", {**_hw("9.0", "cuda", "x86_64", "linux", torch="2.12", cuda="12.8"), "cxx11_abi": False},
           "cu128", "x86_64", "linux", torch="2.12", cxx11=False),
    System("mi300x-rocm71", _hw("gfx942", "rocm", "x86_64", "linux", torch="2.13", rocm="7.1"), "rocm71", "x86_64", "linux"),
    System("mi250-rocm70-tvm", _hw("gfx90a", "rocm", "x86_64", "linux", **{"torch": "2.13", "rocm": "7.0", "tvm-ffi": "0.1"}),
           "rocm70", "x86_64", "linux", tvm_ffi="0.1"),
    System("xpu-2025.3", _hw("bmg", "xpu", "x86_64", "linux", torch="2.13", xpu="2025.3"), "xpu20253", "x86_64", "linux"),
    System("xpu-2025.3-windows", _hw("bmg", "xpu", "x86_64", "windows", torch="2.13", xpu="2025.3.1"), "xpu20253",
           "x86_64", "windows", cxx11=None),
    System("xpu-2025.0-tvm", _hw("pvc", "xpu", "x86_64", "linux", **{"torch": "2.13", "xpu": "2025.0", "tvm-ffi": "0.1"}),
           "xpu20250", "x86_64", "linux", tvm_ffi="0.1"),
    System("metal-macos15", _hw("m3", "metal", "aarch64", "darwin", torch="2.13", macos="15.1"), "metal", "aarch64",
           "darwin", cxx11=None, macos="15.1"),
    System("metal-macos26-tvm", _hw("m4", "metal", "aarch64", "darwin", **{"torch": "2.13", "macos": "26.0.1", "tvm-ffi": "0.1"}),
           "metal", "aarch64", "darwin", cxx11=None, macos="26.0.1", tvm_ffi="0.1"),
    System("metal-macos-undeclared", _hw("m4", "metal", "aarch64", "darwin", torch="2.13"), "metal", "aarch64", "darwin",
           cxx11=None),
    System("cpu-linux-tvm", _hw("x86_64", "cpu", "x86_64", "linux", **{"torch": "2.13", "tvm-ffi": "0.1"}), "cpu", "x86_64",
           "linux", tvm_ffi="0.1"),
    System("cpu-linux-aarch64", _hw("aarch64", "cpu", "aarch64", "linux", torch="2.13"), "cpu", "aarch64", "linux"),
    System("cpu-linux-no-torch", _hw("x86_64", "cpu", "x86_64", "linux"), "cpu", "x86_64", "linux", torch=None, cxx11=None),
    System("cpu-darwin", _hw("aarch64", "cpu", "aarch64", "darwin", torch="2.13"), "cpu", "aarch64", "darwin", cxx11=None),
    System("cpu-windows", _hw("x86_64", "cpu", "x86_64", "windows", torch="2.13"), "cpu", "x86_64", "windows", cxx11=None),
    System("cann80", _hw("ascend910b", "cann", "aarch64", "linux", torch="2.13", cann="8.0"), "cann80", "aarch64", "linux"),
    System("neuron", _hw("trn2", "neuron", "x86_64", "linux", torch="2.13"), "neuron", "x86_64", "linux"),
    System("tpu", _hw("v5e", "tpu", "x86_64", "linux", torch="2.13"), "tpu", "x86_64", "linux"),
]


@functools.cache
def _kernels_parse(name: str):
    from kernels.variants import parse_variant as kparse

    try:
        return kparse(name)
    except ValueError:
        return None


def _kernels_select(names, s: System) -> tuple[list[str], dict[str, str]]:
    """(accepted in order, {rejected name: reason}) by `kernels`, given the variants in name
    order (frt breaks kernels' ties by name; kernels keeps the order it was given)."""
    from kernels.backends import parse_backend
    from kernels.variants import _resolve_variant_for_system

    parsed = {n: _kernels_parse(n) for n in sorted(names)}
    version = lambda v: Version(v) if v else None  # noqa: E731
    torch = version(s.torch)
    tvm = version(s.tvm_ffi)
    accepted, trace = _resolve_variant_for_system(
        variants=[v for v in parsed.values() if v is not None], selected_backend=parse_backend(s.backend), cpu=s.cpu,
        os=s.os, torch_version=torch and Version(f"{torch.major}.{torch.minor}"), torch_cxx11_abi=s.cxx11,
        tvm_ffi_version=tvm and Version(f"{tvm.major}.{tvm.minor}"), macos_version=version(s.macos))
    name_of = {id(v): n for n, v in parsed.items() if v is not None}  # the very objects kernels hands back
    rejected = {name_of[id(d.variant)]: d.reason for d in trace if hasattr(d, "reason")}
    rejected |= {n: "unknown" for n, v in parsed.items() if v is None}
    return [name_of[id(v)] for v in accepted], rejected


# which check a reason comes from, on each side
_OURS = [("CPU (", "cpu"), ("OS (", "os"), ("torch version", "torch"), ("torch C++11 ABI", "abi"),
         ("torch stable ABI", "stable-abi"), ("tvm-ffi version", "tvm-ffi"), ("CUDA version", "cuda"),
         ("Metal builds need macOS", "macos"), ("backend (", "backend"), ("not a known variant name", "unknown")]
_THEIRS = [("CPU (", "cpu"), ("OS (", "os"), ("Torch version", "torch"), ("Torch CXX11 ABI", "abi"),
           ("Torch stable ABI", "stable-abi"), ("tvm-ffi version", "tvm-ffi"), ("CUDA version", "cuda"),
           ("Metal kernels require macOS", "macos"), ("backend (", "backend"), ("unknown", "unknown")]


def _check_of(reason: str, table) -> str:
    return next(kind for prefix, kind in table if reason.startswith(prefix))


def test_the_zoo_is_big():
    assert len(ZOO) >= 40 and len(SYSTEMS) >= 12
    assert {s.os for s in SYSTEMS} == {"linux", "darwin", "windows"}
    assert {s.hw["backend"] for s in SYSTEMS} == {"cuda", "rocm", "xpu", "metal", "cpu", "cann", "neuron", "tpu"}


def test_parse_agrees_with_kernels():
    """A name is a variant for frt exactly when `kernels` parses it, with the same pieces."""
    from kernels.variants import NoarchVariant, Torch, TorchStableAbi

    def pieces(v):
        if isinstance(v, NoarchVariant):
            return ("noarch", v.arch.backend_name)
        fw = v.framework
        kind = "stable-abi" if isinstance(fw, TorchStableAbi) else "torch" if isinstance(fw, Torch) else "tvm-ffi"
        return (kind, (fw.version.major, fw.version.minor), getattr(fw, "cxx11_abi", None),
                v.arch.backend.variant_str, v.arch.platform, v.arch.os)

    for name in ZOO:
        ours, theirs = parse_variant(name), _kernels_parse(name)
        assert (ours is None) == (theirs is None), name
        if theirs is not None:
            assert pieces(theirs) == (("noarch", ours.backend) if ours.kind == "noarch" else (
                ours.kind, ours.framework_version, ours.cxx11, ours.backend_str, ours.cpu, ours.os)), name
    unknown = [n for n in ZOO if parse_variant(n) is None]
    assert len(unknown) == 8, unknown


@pytest.mark.parametrize("system", SYSTEMS, ids=lambda s: s.id)
def test_selection_equals_kernels(system):
    """Every subset of size 1 and 2 of the zoo, and the whole zoo: frt accepts the same
    variants in the same order as `kernels`, and rejects each other one for the same check."""
    hw = Hardware(**system.hw)
    subsets = [*itertools.combinations(ZOO, 1), *itertools.combinations(ZOO, 2), tuple(ZOO)]
    for subset in subsets:
        ours = select_variants(subset, hw)
        accepted, _ = _kernels_select(subset, system)
        assert list(ours.accepted) == accepted, subset
        assert ours.selected == (accepted[0] if accepted else None)
    full = select_variants(ZOO, hw)
    accepted, rejected = _kernels_select(ZOO, system)
    assert {n: _check_of(r, _OURS) for n, r in full.rejected} == {n: _check_of(r, _THEIRS) for n, r in rejected.items()}
    assert len(subsets) > 1800


def test_every_kind_is_selected_somewhere():
    """The zoo exercises every kind: each system kind selects something, and the cases
    the old implementation got wrong are now right."""
    chosen = {s.id: select_variants(ZOO, Hardware(**s.hw)).accepted for s in SYSTEMS}
    assert chosen["xpu-2025.3"][:2] == ("torch-stable-abi29-xpu20253-x86_64-linux", "torch213-xpu20253-x86_64-linux")
    assert chosen["metal-macos15"] == ("torch-metal", "torch-universal")  # Metal arch builds need macOS 26
    assert chosen["metal-macos26-tvm"][:3] == ("torch-stable-abi212-metal-aarch64-darwin", "torch213-metal-aarch64-darwin",
                                               "torch-metal")  # tvm-ffi ties with noarch: the name decides
    assert chosen["thor-cu130"][:2] == ("torch-stable-abi213-cu130-aarch64-linux", "torch213-cu130-aarch64-linux")
    assert chosen["cann80"] == ("torch213-cann80-aarch64-linux", "torch-npu", "torch-universal")
    assert chosen["cpu-windows"] == ("torch213-cpu-x86_64-windows", "torch-cpu", "torch-universal")
    assert chosen["cpu-linux-no-torch"] == ("torch-cpu", "torch-universal")


REASONS = [  # (system id, variant, the reason frt gives)
    ("h200-cu128", "torch213-cxx11-cu128-aarch64-linux", "CPU (aarch64) does not match system CPU (x86_64)"),
    ("cpu-windows", "torch213-cpu-x86_64-linux", "OS (linux) does not match system OS (windows)"),
    ("gb10-torch211", "torch213-cxx11-cu130-aarch64-linux", "torch version (2.13) does not match system torch (2.11)"),
    ("h200-cxx98", "torch212-cxx11-cu128-x86_64-linux", "torch C++11 ABI (True) does not match system (False)"),
    ("cpu-darwin", "torch213-cxx11-cpu-aarch64-darwin", "torch C++11 ABI (True) does not match system (None)"),
    ("thor-cu130", "torch-stable-abi214-cu130-aarch64-linux",
     "torch stable ABI (2.14) is too new for system torch (2.13)"),
    ("cpu-linux-no-torch", "torch-stable-abi29-cpu-x86_64-linux", "torch stable ABI (2.9) is too new for system torch (none)"),
    ("h200-cu128", "tvm-ffi01-cu128-x86_64-linux", "tvm-ffi version (0.1) does not match system tvm-ffi (none)"),
    ("h200-cu128", "torch213-cxx11-cu130-x86_64-linux", "CUDA version (cu130) is not compatible with system CUDA (cu128)"),
    ("thor-cu130", "torch213-cxx11-cu128-aarch64-linux", "CUDA version (cu128) is not compatible with system CUDA (cu130)"),
    ("xpu-2025.3", "torch213-cxx11-xpu20252-x86_64-linux", "backend (xpu20252) does not match system backend (xpu20253)"),
    ("mi300x-rocm71", "torch213-cxx11-cu128-x86_64-linux", "backend (cu128) does not match system backend (rocm71)"),
    ("metal-macos15", "torch213-metal-aarch64-darwin", "Metal builds need macOS 26.0 or later, system macOS 15.1"),
    ("metal-macos-undeclared", "torch213-metal-aarch64-darwin",
     "Metal builds need macOS 26.0 or later, system macOS not declared (software macos=X.Y)"),
    ("cann80", "torch-cuda", "backend (cuda) does not match system backend (npu) and is not universal"),
    ("h200-cu128", "torch29-cuda-x86_64-linux", "not a known variant name"),
]


@pytest.mark.parametrize("sid, name, reason", REASONS, ids=[f"{r[0]}:{r[1]}" for r in REASONS])
def test_every_refusal_says_why(sid, name, reason):
    [system] = [s for s in SYSTEMS if s.id == sid]
    choice = select_variants([name], Hardware(**system.hw))
    assert choice.selected is None and choice.rejected == ((name, reason),)


@pytest.mark.parametrize("backend, arch, variant", [("cuda", "9.0", "torch213-cxx11-cu128-x86_64-linux"),
                                                    ("rocm", "gfx942", "torch213-cxx11-rocm71-x86_64-linux"),
                                                    ("xpu", "bmg", "torch213-xpu20253-x86_64-linux")])
def test_a_backend_version_not_declared_is_the_reason(backend, arch, variant):
    hw = Hardware(arch=arch, device_class="dev", backend=backend, cpu="x86_64", os="linux", software={"torch": "2.13"})
    [(_, why)] = select_variants([variant], hw).rejected
    if backend == "cuda":
        assert why == "CUDA version (cu128) is not compatible with system CUDA (cuda, version not declared)"
    else:
        assert why == f"backend ({variant.split('-')[-3]}) does not match system backend ({backend}, version not declared)"


def test_this_machine_prefers_arch_build_then_noarch():
    hw = Hardware(arch="x86_64", device_class="epyc", backend="cpu", os="linux", software={"torch": "2.13"})
    c = select_variants(["torch-universal", "torch-cpu", "torch213-cxx11-cpu-x86_64-linux"], hw)
    assert c.selected == "torch213-cxx11-cpu-x86_64-linux"
    c = select_variants(["torch-universal", "torch-cpu"], hw)
    assert c.selected == "torch-cpu"


@pytest.mark.parametrize("name, ok", [("torch-cpu", True), ("..", False), ("../x", False), ("a/b", False),
                                      ("", False), ("torch213-cxx11-cu128-x86_64-linux", True)])
def test_variant_name_is_one_component(name, ok):
    assert valid_variant_name(name) is ok

