"""Hardware facts, the device-class rule and the arch rule (SPEC §3, §6)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from frt_dist import Hardware, arch_admits, device_class
from frt_dist.errors import UsageError
from frt_dist.hardware import parse_software

# real declarations: flashrt-project/FlashRT-HF-kernels@0823390 build.toml, via shared/data/flashrt-packages.json
DATA = Path(__file__).resolve().parent / "data" / "flashrt-archs.json"


@pytest.mark.parametrize("name, expected", [
    ("NVIDIA GeForce RTX 5090", "rtx-5090"),
    ("NVIDIA H200", "h200"),
    ("AMD EPYC 7B13", "amd-epyc-7b13"),
    ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "rtx-pro-6000-blackwell-server-edition"),
    ("Intel(R) Xeon(R) CPU @ 2.20GHz", "intel-xeon"),
    ("NVIDIA GB10", "gb10"),
    ("AMD Instinct MI300X", "amd-instinct-mi300x"),
])
def test_device_class(name, expected):
    assert device_class(name) == expected


# (archs, device, admitted) — every suffix, the same-major boundary, PTX, ROCm, malformed, CPU
ARCH_TABLE = [
    (["12.0"], "12.0", True),
    (["12.0"], "12.1", True),          # plain: same major, minor >=
    (["12.1"], "12.0", False),
    (["12.0"], "13.0", False),         # plain never crosses a major
    (["9.0"], "10.0", False),
    (["12.0a"], "12.0", True),
    (["12.0a"], "12.1", False),        # a: exactly that capability
    (["11.0a"], "11.0", True),
    (["10.0f"], "10.3", True),         # f: family, minor >=
    (["10.3f"], "10.0", False),
    (["10.0f"], "11.0", False),
    (["9.0+PTX"], "12.0", True),       # PTX: any capability >=
    (["9.0+PTX"], "8.9", False),
    (["9.0a+PTX"], "10.0", False),     # a decides even with +PTX
    (["9.0a+PTX"], "9.0", True),
    (["10.0f+PTX"], "12.0", False),    # f decides even with +PTX
    (["8.9", "11.0a", "12.0a"], "9.0", False),
    (["8.9", "11.0a", "12.0a"], "12.0", True),
    (["gfx942"], "gfx942", True),
    (["gfx942"], "gfx90a", False),
    (["gfx90a"], "gfx90a:sramecc+:xnack-", True),
    (["gfx942"], "9.0", False),
    (["sm_90"], "9.0", False),         # malformed: not evidence of support
    (["banana", "12.0"], "12.0", True),
    (["12"], "12.0", False),
    ([], "12.0", True),                # no declaration: no claim
    (None, "gfx942", True),
    ([], "x86_64", True),              # CPU builds declare nothing
    (["12.0"], "x86_64", False),
]


@pytest.mark.parametrize("archs, device, admitted", ARCH_TABLE)
def test_arch_admits_table(archs, device, admitted):
    assert arch_admits(archs, device) is admitted


def _declarations():
    decls = [["12.0"], ["12.0a"], ["10.0f"], ["9.0+PTX"], ["9.0a+PTX"], ["10.0f+PTX"], ["12.0a", "12.1"],
             ["banana"], ["sm_90", "gfx942"], ["8.0", "foo"], ["11.0a+PTX", "8.6"]]
    decls += [caps for _, caps in sorted(json.loads(DATA.read_text())["cuda_capabilities"].items())]
    return decls


def test_arch_rule_agrees_with_kernels_0_17_2():
    """Differential: our rule vs the one inside `kernels` over declarations × capabilities.
    They agree everywhere except a declaration none of whose entries parses
    (kernels: 'supported'; frt: not evidence of support)."""
    from kernels.archs import _parse_cuda_arch, _supports_cuda_capability

    caps = [(major, minor) for major in (7, 8, 9, 10, 11, 12, 13) for minor in (0, 1, 3, 5, 6, 7, 9)]
    checked = disagreements = 0
    for decl in _declarations():
        none_parse = all(_parse_cuda_arch(a) is None for a in decl)
        for cap in caps:
            ours = arch_admits(decl, f"{cap[0]}.{cap[1]}")
            theirs = _supports_cuda_capability(decl, cap)
            checked += 1
            if none_parse:
                assert theirs is True and ours is False
                disagreements += 1
            else:
                assert ours == theirs, (decl, cap)
    assert checked > 1000 and disagreements > 0


def test_hardware_declared_defaults():
    hw = Hardware(arch="12.0", device_class="rtx-5090", software={"torch": "2.13", "cuda": "12.8"})
    assert hw.backend == "cuda" and hw.to_dict() == {"backend": "cuda", "arch": "12.0", "device-class": "rtx-5090"}
    assert Hardware(arch="gfx942", device_class="mi300x").backend == "rocm"
    cpu = Hardware(arch="x86_64", device_class="amd-epyc-7b13")
    assert cpu.backend == "cpu" and cpu.cpu == "x86_64"


def test_hardware_requires_arch_and_class():
    with pytest.raises(UsageError, match="arch"):
        Hardware(arch="", device_class="h200")
    with pytest.raises(UsageError, match="device_class"):
        Hardware(arch="9.0", device_class="")


def test_parse_software():
    assert parse_software("torch=2.11, cuda=12.8") == {"torch": "2.11", "cuda": "12.8"}
    with pytest.raises(UsageError, match="KEY=VALUE"):
        parse_software("torch")


def test_detect_this_machine():
    import torch

    hw = Hardware.detect()
    # what torch sees decides the backend: CPU on a machine without a GPU (CI), CUDA/ROCm on one with
    if torch.cuda.is_available():
        expected = "rocm" if getattr(torch.version, "hip", None) else "cuda"
        assert hw.software[expected] and hw.arch and hw.arch != hw.cpu
    else:
        expected = "cpu"
        assert hw.arch == hw.cpu and "cuda" not in hw.software and "rocm" not in hw.software
    assert hw.detected and hw.backend == expected
    assert hw.software["torch"] == ".".join(torch.__version__.split(".")[:2])
    assert hw.software["kernels"] == "0.17"  # major.minor (SPEC §16), independent of the patch release
    assert hw.device_class and hw.device_name


@pytest.mark.parametrize("given, read", [("2.13.0+cpu", "2.13"), ("0.17.2", "0.17"), ("12", "12.0"), ("12.8", "12.8"),
                                         ("6.3.42131-fa1d09cbd", "6.3"), ("2.14.0.dev20260101", "2.14"), ("02.13", "2.13")])
def test_software_facts_are_major_minor_read_with_packaging(given, read):
    from packaging.version import Version

    from frt_dist.hardware import software_version

    assert software_version(given) == read
    if given[0].isdigit() and "-" not in given:  # the oracle: packaging's own release tuple
        assert read == ".".join(map(str, (*Version(given).release, 0)[:2]))
    hw = Hardware(arch="9.0", device_class="h200", software={"torch": given})
    assert hw.software == {"torch": read}


def test_software_that_is_not_a_version_is_a_usage_error():
    from frt_dist.errors import UsageError

    with pytest.raises(UsageError, match=r"hardware: software torch: 'latest' is not a version"):
        Hardware(arch="9.0", device_class="h200", software={"torch": "latest"})
