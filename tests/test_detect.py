"""Detection without torch (`--detect` imports none): NVML facts, CPU fallback with its reason, torch facts from metadata.

NVML's *facts* are faked (an object with pynvml's functions); the decision code is the real one.
torch's facts come from a real dist-info folder put first on ``sys.path`` (importlib.metadata reads it).
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from types import SimpleNamespace

import pytest

from frt_dist.system import detect as det
from frt_dist.system.hardware import Hardware
from helpers.paths import ROOT


class FakeNVML:
    """pynvml's surface as detection uses it, answering with one machine's facts."""

    NVML_CLOCK_SM, NVML_CLOCK_MEM = 1, 2

    def __init__(self, name="NVIDIA H200", cc=(9, 0), driver="580.159.03", cuda=13000, mem=143771 << 20,
                 count=2, fail_init=None, fail_read=None):
        self.facts = dict(name=name, cc=cc, driver=driver, cuda=cuda, mem=mem, count=count)
        self.fail_init, self.fail_read = fail_init, fail_read
        self.handles, self.calls = [], []

    def nvmlInit(self):
        if self.fail_init:
            raise self.fail_init
        self.calls.append("init")

    def nvmlShutdown(self):
        self.calls.append("shutdown")

    def nvmlDeviceGetCount(self):
        return self.facts["count"]

    def nvmlDeviceGetHandleByIndex(self, i):
        self.handles.append(("index", i))
        return ("h", i)

    def nvmlDeviceGetHandleByUUID(self, uuid):
        self.handles.append(("uuid", uuid))
        return ("h", uuid)

    def nvmlDeviceGetName(self, h):
        return self.facts["name"]

    def nvmlDeviceGetCudaComputeCapability(self, h):
        if self.fail_read:
            raise self.fail_read
        return self.facts["cc"]

    def nvmlSystemGetDriverVersion(self):
        return self.facts["driver"]

    def nvmlSystemGetCudaDriverVersion(self):
        return self.facts["cuda"]

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(total=self.facts["mem"], free=0, used=0)

    def nvmlDeviceGetClockInfo(self, h, which):
        return {1: 1980, 2: 3201}[which]


@pytest.fixture(autouse=True)
def _all_gpus_visible(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def detect(nvml=None):
    """The ``Hardware`` that ``Hardware.detect`` builds, beside the facts it was built from."""
    hw = Hardware.detect(nvml)
    facts = det.read_system(nvml)
    return SimpleNamespace(hardware=hw, gpu=facts.gpu, reason=facts.reason, notes=facts.notes)


def _fake_torch_dist(tmp_path, monkeypatch, version, requires=()):
    """A real ``torch`` dist-info ahead of the installed one: what metadata says, torch-free."""
    d = tmp_path / "site" / f"torch-{version}.dist-info"
    d.mkdir(parents=True)
    lines = ["Metadata-Version: 2.1", "Name: torch", f"Version: {version}", *(f"Requires-Dist: {r}" for r in requires)]
    (d / "METADATA").write_text("\n".join(lines) + "\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))


def test_nvml_present_gives_the_gpu_cell(tmp_path, monkeypatch):
    _fake_torch_dist(tmp_path, monkeypatch, "2.11.0+cu130")
    nvml = FakeNVML()
    d = detect(nvml)
    hw = d.hardware
    assert (hw.backend, hw.arch, hw.device_class, hw.device_name) == ("cuda", "9.0", "h200", "NVIDIA H200")
    assert hw.software["cuda"] == "13.0" and hw.software["torch"] == "2.11" and hw.cxx11_abi is True
    assert hw.detected and hw.cpu == platform.machine() and d.reason is None
    assert d.gpu == {"name": "NVIDIA H200", "capability": "9.0", "driver": "580.159.03", "cuda-driver": "13.0",
                     "memory-bytes": 143771 << 20}
    assert nvml.handles == [("index", 0)] * 2 and nvml.calls == ["init", "shutdown"] * 2  # NVML is left shut


def test_nvml_bytes_names_and_two_digit_minor(monkeypatch):
    # older pynvml returns bytes; NVML encodes CUDA 12.8 as 12080
    d = detect(FakeNVML(name=b"NVIDIA GeForce RTX 5090", cc=(12, 0), cuda=12080))
    assert d.hardware.device_class == "rtx-5090" and d.hardware.arch == "12.0"
    assert d.gpu["cuda-driver"] == "12.8" and d.gpu["name"] == "NVIDIA GeForce RTX 5090"


def test_without_pynvml_the_cpu_is_detected_with_the_reason(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # `import pynvml` raises ImportError
    d = detect()
    assert d.hardware.backend == "cpu" and d.hardware.arch == d.hardware.cpu and d.gpu is None
    assert d.reason == "nvidia-ml-py (pynvml) is not installed"
    assert "cuda" not in d.hardware.software


def test_nvml_init_failure_is_the_reason():
    d = detect(FakeNVML(fail_init=RuntimeError("NVML Shared Library Not Found")))
    assert d.hardware.backend == "cpu" and d.reason == "NVML unavailable: NVML Shared Library Not Found"


def test_nvml_read_failure_is_the_reason_and_nvml_is_shut_down():
    nvml = FakeNVML(fail_read=RuntimeError("GPU is lost"))
    d = detect(nvml)
    assert d.hardware.backend == "cpu" and d.reason == "NVML could not read the device: GPU is lost"
    assert nvml.calls == ["init", "shutdown"] * 2


def test_no_device_is_the_reason():
    d = detect(FakeNVML(count=0))
    assert d.hardware.backend == "cpu" and d.reason == "NVML reports no NVIDIA device"


@pytest.mark.parametrize("visible, handle, reason", [
    ("1,0", ("index", 1), None),
    ("GPU-8f2e1c3a-0000", ("uuid", "GPU-8f2e1c3a-0000"), None),
    ("", None, "CUDA_VISIBLE_DEVICES='' hides every GPU"),
    ("-1", None, "CUDA_VISIBLE_DEVICES='-1' hides every GPU"),
])
def test_cuda_visible_devices_picks_the_device(monkeypatch, visible, handle, reason):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    nvml = FakeNVML()
    d = detect(nvml)
    assert d.reason == reason
    assert nvml.handles == ([handle] * 2 if handle else [])
    assert d.hardware.backend == ("cuda" if handle else "cpu")


def test_clocks_from_nvml():
    assert det.nvml_clocks(FakeNVML()) == {"sm-mhz": 1980, "memory-mhz": 3201}
    assert det.nvml_clocks(FakeNVML(fail_init=RuntimeError("no driver"))) is None


@pytest.mark.parametrize("version, requires, want", [
    ("2.11.0+cu130", (), {"torch": "2.11.0+cu130", "cuda": "13.0", "cxx11": True}),
    ("2.8.0+cu128", (), {"torch": "2.8.0+cu128", "cuda": "12.8", "cxx11": True}),
    ("2.9.1", ("nvidia-cuda-runtime-cu12==12.8.90; platform_system == \"Linux\"", "filelock"),
     {"torch": "2.9.1", "cuda": "12.8", "cxx11": True}),
    ("2.11.0", ("nvidia-cuda-runtime==13.0.96",), {"torch": "2.11.0", "cuda": "13.0", "cxx11": True}),
    ("2.13.0+cpu", ("nvidia-cuda-runtime==13.0.96",), {"torch": "2.13.0+cpu", "cxx11": True}),
    ("2.7.1+cu126", (), {"torch": "2.7.1+cu126", "cuda": "12.6"}),  # below 2.8 the ABI is not implied
])
def test_torch_facts_from_metadata(tmp_path, monkeypatch, version, requires, want):
    monkeypatch.setattr(det, "_system_linux", lambda: True)
    _fake_torch_dist(tmp_path, monkeypatch, version, requires)
    assert det.torch_facts() == want


def test_torch_facts_without_torch():
    assert det.torch_facts("frt-no-such-dist") == {}


def test_cpu_torch_facts_on_a_gpu_machine_leave_cuda_out_with_a_note(tmp_path, monkeypatch):
    _fake_torch_dist(tmp_path, monkeypatch, "2.13.0+cpu")
    d = detect(FakeNVML())
    assert d.hardware.backend == "cuda" and "cuda" not in d.hardware.software
    assert d.notes == ("torch 2.13.0+cpu names no CUDA version it was built for: the cell has no cuda fact",)


@pytest.mark.subprocess
def test_hardware_detect_reads_nvml_and_imports_no_torch():
    code = ("import sys, json; from frt_dist.system.hardware import Hardware;"
            "hw = Hardware.detect(); print(json.dumps([hw.detected, 'torch' in sys.modules, 'pynvml' in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == [True, False, True]


@pytest.mark.subprocess
def test_frt_resolve_with_default_detection_imports_neither_torch_nor_kernels():
    code = ("import sys, json\nfrom frt_dist.cli.main import main\n"
            "try:\n    rc = main(['resolve', '--model', 'demo-decoder', '--json'])\nexcept SystemExit as e:\n    rc = e.code\n"
            "print(json.dumps({'rc': rc, 'torch': 'torch' in sys.modules, 'kernels': 'kernels' in sys.modules,"
            " 'detected': 'frt_dist.system.detect' in sys.modules}), file=sys.stderr)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)  # the demo project
    facts = json.loads(proc.stderr.strip().splitlines()[-1])
    # exit 1 is the resolver's "no" (no receipt for this CPU): still a decision, reached without torch
    assert facts["rc"] in (0, 1) and json.loads(proc.stdout), proc.stderr
    assert facts == {"rc": facts["rc"], "torch": False, "kernels": False, "detected": True}


def test_macos_version_is_a_software_fact_on_macos_only(monkeypatch):
    import platform

    from frt_dist.system import detect

    monkeypatch.setattr(platform, "mac_ver", lambda: ("15.1.2", ("", "", ""), "arm64"))
    assert detect.macos_version() == "15.1"
    monkeypatch.setattr(platform, "mac_ver", lambda: ("26", ("", "", ""), "arm64"))
    assert detect.macos_version() == "26.0"
    monkeypatch.setattr(platform, "mac_ver", lambda: ("", ("", "", ""), ""))
    assert detect.macos_version() is None
