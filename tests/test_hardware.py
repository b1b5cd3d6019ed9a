"""Hardware facts, the device-class rule and the arch rule."""

from __future__ import annotations

import json

import pytest

from frt_dist import Hardware, arch_admits, device_class
from frt_dist.errors import UsageError
from frt_dist.system.hardware import parse_software
from helpers.frt import frt_main
from helpers.paths import DATA

# real declarations: flashrt-project/FlashRT-HF-kernels@0823390 build.toml, via shared/data/flashrt-packages.json
ARCHS_FILE = DATA / "flashrt-archs.json"


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
    decls += [caps for _, caps in sorted(json.loads(ARCHS_FILE.read_text())["cuda_capabilities"].items())]
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
    assert hw.software["kernels"] == "0.17"  # major.minor (a cell's software identity), independent of the patch release
    assert hw.device_class and hw.device_name


@pytest.mark.parametrize("given, read", [("2.13.0+cpu", "2.13"), ("0.17.2", "0.17"), ("12", "12.0"), ("12.8", "12.8"),
                                         ("6.3.42131-fa1d09cbd", "6.3"), ("2.14.0.dev20260101", "2.14"), ("02.13", "2.13")])
def test_software_facts_are_major_minor_read_with_packaging(given, read):
    from packaging.version import Version

    from frt_dist.system.hardware import software_version

    assert software_version(given) == read
    if given[0].isdigit() and "-" not in given:  # the oracle: packaging's own release tuple
        assert read == ".".join(map(str, (*Version(given).release, 0)[:2]))
    hw = Hardware(arch="9.0", device_class="h200", software={"torch": given})
    assert hw.software == {"torch": read}


def test_software_that_is_not_a_version_is_a_usage_error():
    from frt_dist.errors import UsageError

    with pytest.raises(UsageError, match=r"hardware: software torch: 'latest' is not a version"):
        Hardware(arch="9.0", device_class="h200", software={"torch": "latest"})


# ---------------------------------------------------------------------------
# declared facts are checked


@pytest.mark.parametrize("arch, hint", [("sm_90", "9.0"), ("sm90", "9.0"), ("90", "9.0"), ("9", "9.0"),
                                        ("compute_90", "9.0"), ("sm_121", "12.1"), ("sm_120a", "12.0"),
                                        ("120", "12.0"), ("12", "12.0"), ("9.0a", "9.0"), ("10.0f+PTX", "10.0")])
def test_a_misspelt_capability_is_a_usage_error_naming_the_capability(arch, hint):
    with pytest.raises(UsageError) as exc:
        Hardware(arch=arch, device_class="h200")
    assert str(exc.value) == f"hardware: arch: {arch!r} is not a compute capability written major.minor"
    assert exc.value.hints[0].startswith(f"did you mean {hint!r}?")
    with pytest.raises(UsageError, match="not a compute capability written major.minor"):
        Hardware(arch=arch, device_class="h200", backend="cuda")


@pytest.mark.parametrize("kw, message", [
    (dict(arch="gfx942", backend="cuda"), "hardware: arch: 'gfx942' is not a CUDA compute capability (major.minor, e.g. 9.0, 12.1)"),
    (dict(arch="9.0", backend="rocm"), "hardware: arch: '9.0' is not a ROCm gfx name (e.g. gfx942)"),
    (dict(arch="banana"), "hardware: arch: 'banana' is not a compute capability (major.minor), a gfx name or, "
                          "on the cpu backend, a CPU (x86_64, aarch64)"),
    (dict(arch="x86_64", cpu="aarch64"), "hardware: arch 'x86_64' and cpu 'aarch64' differ; on the cpu backend the arch is the CPU"),
    (dict(arch="bad/name", backend="xpu"), "hardware: arch: 'bad/name' has a path separator"),
    (dict(arch="9.0", backend="vulkan"), "hardware: backend: 'vulkan' is not one of cuda, rocm, xpu, metal, cann, neuron, tpu, cpu"),
    (dict(arch="9.0", cpu="ppc64le"), "hardware: cpu: 'ppc64le' is not one of x86_64, aarch64"),
    (dict(arch="9.0", os="freebsd"), "hardware: os: 'freebsd' is not one of linux, darwin, windows"),
    (dict(arch="9.0", device_class="NVIDIA GeForce"), "hardware: device_class: 'NVIDIA GeForce' names no device once normalised"),
])
def test_declared_facts_are_checked(kw, message):
    with pytest.raises(UsageError) as exc:
        Hardware(**{"device_class": "h200", **kw})
    assert str(exc.value) == message


@pytest.mark.parametrize("field, given, meant", [("cpu", "arm64", "aarch64"), ("cpu", "AMD64", "x86_64"),
                                                 ("os", "macos", "darwin"), ("arch", "arm64", "aarch64")])
def test_a_platform_alias_hints_the_name_kernels_uses(field, given, meant):
    with pytest.raises(UsageError) as exc:
        Hardware(**{"arch": "9.0", "device_class": "h200", field: given})
    assert exc.value.hints == [f"did you mean {meant!r}?"]


def test_declared_facts_are_normalised():
    hw = Hardware(arch="09.0", device_class="NVIDIA H200", cpu="aarch64", os="darwin")
    assert (hw.arch, hw.device_class, hw.cpu, hw.os) == ("9.0", "h200", "aarch64", "darwin")
    assert Hardware(arch="9.0", device_class="NVIDIA-H200").device_class == "h200"
    # the device-class rule, applied once more, changes nothing: the class is a fixed point
    for name in ("NVIDIA GeForce RTX 5090", "AMD EPYC 7B13", "Intel(R) Xeon(R) CPU @ 2.20GHz"):
        assert Hardware(arch="9.0", device_class=name).device_class == device_class(name) == device_class(device_class(name))
    for backend, arch in (("xpu", "bmg"), ("metal", "m4"), ("cann", "ascend910b"), ("neuron", "trn2"), ("tpu", "v5e")):
        assert Hardware(arch=arch, device_class="d", backend=backend).arch == arch


def test_detected_facts_are_facts_not_declarations():
    """What detection reads on a machine kernels has no name for is kept as read."""
    hw = Hardware(arch="ppc64le", device_class="power9", backend="cpu", cpu="ppc64le", detected=True)
    assert (hw.arch, hw.cpu) == ("ppc64le", "ppc64le")


# ---------------------------------------------------------------------------
# the command line: --cpu/--os, --arch, --device-class (exit codes and messages)


@pytest.fixture(scope="module")
def aarch64_project(tmp_path_factory):
    """Packages with an x86_64 and an aarch64 CUDA 13.0 build; decode receipts measured on a
    Jetson Thor (11.0) and a DGX Spark (12.1), both aarch64, and a Thor prefill receipt that
    records two more software facts (kernels, tvm-ffi)."""
    from helpers.factories import tiny_project, write_package

    tp = tiny_project(tmp_path_factory.mktemp("aarch64"))
    for folder in ("scale", "norm"):
        for cpu in ("x86_64", "aarch64"):
            write_package(tp.root / "packages" / folder, folder, variant=f"torch213-cxx11-cu130-{cpu}-linux",
                          backend="cuda", archs=["11.0", "12.1"])
    tp.lock()
    from frt_dist.documents.lockfile import Lockfile
    from frt_dist.lock.build import lock_model
    from helpers.factories import receipt_doc

    lf = Lockfile.read(tp.lock_path)
    rdir = tp.root / "receipts" / tp.model
    rdir.mkdir(parents=True, exist_ok=True)
    soft = {"torch": "2.13", "cuda": "13.0"}
    for arch, dc, phase, more in (("11.0", "jetson-thor", "decode", {}), ("12.1", "gb10", "decode", {}),
                                  ("11.0", "jetson-thor", "prefill", {"kernels": "0.17.2", "tvm-ffi": "0.1"})):
        hw = Hardware(arch=arch, device_class=dc, cpu="aarch64", os="linux", software={**soft, **more})
        (rdir / f"{dc}-{phase}.json").write_text(json.dumps(receipt_doc(lf, "fast", phase, hw)), "utf-8")
    assert not lock_model(tp.project, tp.model, warn=lambda m: None).lockfile.rejected
    return tp


def _frt(tp, capsys, *argv, phase="decode"):
    """``frt resolve`` of the project's ``tiny`` model for one phase: (exit code, stdout, stderr)."""
    return frt_main("resolve", "--model", "tiny", "--project", str(tp.root), "--phase", phase, *argv)


@pytest.mark.parametrize("arch, dc", [("11.0", "jetson-thor"), ("12.1", "gb10")])
def test_an_aarch64_cell_resolves_on_any_workstation(aarch64_project, capsys, arch, dc):
    soft = ["--software", "torch=2.13,cuda=13.0"]
    rc, out, _ = _frt(aarch64_project, capsys, "--arch", arch, "--device-class", dc, "--cpu", "aarch64", "--os", "linux",
                      *soft, "--json", "--explain")
    doc = json.loads(out)
    assert rc == 0 and doc["decisions"][0]["route"] == "fast", doc["decisions"]
    won = [c for c in doc["candidates"] if c["won"]][0]
    assert {p["variant"] for p in won["packages"].values()} == {"torch213-cxx11-cu130-aarch64-linux"}
    # the same cell declared from an x86_64 host is not the cell the receipt measured
    rc, out, _ = _frt(aarch64_project, capsys, "--arch", arch, "--device-class", dc, "--cpu", "x86_64", *soft, "--json")
    [reason] = [r["reason"] for r in json.loads(out)["decisions"][0]["reasons"] if r["route"] == "fast"]
    assert rc == 1 and reason.startswith("receipt measured variant torch213-cxx11-cu130-aarch64-linux of t-org/")
    assert reason.endswith("this system selects torch213-cxx11-cu130-x86_64-linux")


@pytest.mark.parametrize("argv, error, hint", [
    (["--arch", "sm_90", "--device-class", "h200"], "hardware: arch: 'sm_90' is not a compute capability written major.minor",
     "did you mean '9.0'?"),
    (["--arch", "90", "--device-class", "h200"], "hardware: arch: '90' is not a compute capability written major.minor",
     "did you mean '9.0'?"),
    (["--arch", "11.0", "--device-class", "thor", "--cpu", "arm64"], "hardware: cpu: 'arm64' is not one of x86_64, aarch64",
     "did you mean 'aarch64'?"),
    (["--arch", "11.0", "--device-class", "thor", "--os", "Linux"], "hardware: os: 'Linux' is not one of linux, darwin, windows",
     None),
    (["--detect", "--cpu", "aarch64"], "--detect reads this machine; it cannot be combined with --cpu",
     "drop --detect to declare the machine, or drop the declared facts"),
    (["--detect", "--arch", "9.0", "--device-class", "h200"],
     "--detect reads this machine; it cannot be combined with --arch, --device-class", None),
    (["--cpu", "aarch64", "--os", "linux"], "declared hardware needs both --arch and --device-class", None),
])
def test_bad_declared_hardware_exits_2(aarch64_project, capsys, argv, error, hint):
    rc, out, err = _frt(aarch64_project, capsys, *argv)
    assert rc == 2 and out == ""
    lines = err.splitlines()
    assert lines[0] == f"error: {error}"
    if hint:
        assert lines[1].startswith(f"hint: {hint}")
    rc, out, _ = _frt(aarch64_project, capsys, *argv, "--json")
    doc = json.loads(out)
    assert (rc, doc["exit"], doc["error"]) == (2, 2, error)


def test_device_class_is_normalised_from_the_flag(aarch64_project, capsys):
    rc, out, _ = _frt(aarch64_project, capsys, "--arch", "12.1", "--device-class", "NVIDIA GB10", "--cpu", "aarch64",
                      "--os", "linux", "--software", "torch=2.13,cuda=13.0", "--json")
    doc = json.loads(out)
    assert rc == 0 and doc["hardware"] == {"backend": "cuda", "arch": "12.1", "device-class": "gb10"}


def test_missing_software_is_one_reason_and_one_hint(aarch64_project, capsys):
    thor = ["--arch", "11.0", "--device-class", "jetson-thor", "--cpu", "aarch64", "--os", "linux"]
    rc, out, err = _frt(aarch64_project, capsys, *thor, "--software", "torch=2.13,cuda=13.0", phase="prefill")
    assert rc == 1
    assert "    fast           software not declared: kernels (receipt: 0.17), tvm-ffi (receipt: 0.1)\n" in out
    assert err.splitlines() == ["hint: declare the software the receipt recorded: "
                                "--software cuda=13.0,kernels=0.17,torch=2.13,tvm-ffi=0.1"]
    # the hint's flag, used, serves the route
    rc, out, err = _frt(aarch64_project, capsys, *thor, "--software", "cuda=13.0,kernels=0.17,torch=2.13,tvm-ffi=0.1",
                        phase="prefill")
    assert rc == 0 and "route fast" in out and "hint:" not in err
    # a mismatch keeps its own wording and gives no hint
    rc, out, err = _frt(aarch64_project, capsys, *thor, "--software", "torch=2.13,cuda=13.0,kernels=0.16", phase="prefill")
    # a mismatch: no software hint (the generic next step only)
    assert rc == 1 and "    fast           receipt software kernels 0.17, declared 0.16\n" in out and "--software" not in err


@pytest.mark.parametrize("value", ["0.17.2", "012.8", "12", "1.2.3.4", "00.00", "2.13", "7.10.0",
                                   "2.13.0+cpu", "1.0a1", "v2.1", " 3.4 ", "6.3.42131-fa1d09cbd"])
def test_software_version_without_packaging_reads_as_packaging_does(value):
    """Plain release numbers are read without importing packaging (start-up): the
    result is packaging's major.minor for every input."""
    from packaging.version import InvalidVersion, Version

    from frt_dist.system.hardware import software_version

    try:
        rel = (*Version(value).release, 0)
        want = f"{rel[0]}.{rel[1]}"
    except InvalidVersion:
        want = "6.3"  # the build-suffix fallback: major.minor read off the front
    assert software_version(value) == want
