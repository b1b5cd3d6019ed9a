"""Which build variant a (declared) system accepts, without importing `kernels`.

The grammar and ordering follow `kernels` 0.17.2 (`variants.py`): a pure function
of the variant names and the system's facts, so a lock, a resolve or a refusal
can be computed for hardware we are not running on. A differential test keeps
it equal to ``kernels.variants._resolve_variant_for_system``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from . import names
from .hardware import Hardware

__all__ = ["ParsedVariant", "parse_variant", "select_variants", "VariantChoice", "valid_variant_name"]

_STABLE_ABI = re.compile(r"torch-stable-abi(\d)(\d+)")
_TORCH_VER = re.compile(r"torch(\d)(\d+)")
_FFI_VER = re.compile(r"ffi(\d+?)(\d+)")
_MAJOR_MINOR = re.compile(r"^(\d+)\.(\d+)")
_CUDA_VER = re.compile(r"cu(\d+)(\d)")
_OTHER_BACKEND = re.compile(r"^(rocm|xpu|cann)\d*?(\d)$")



def valid_variant_name(name: str) -> bool:
    """A variant name is one safe path component (``frt_dist.names``)."""
    return names.problem("variant", name) is None


@dataclass(frozen=True)
class ParsedVariant:
    """A build variant directory name, taken apart (``parse_variant``)."""

    name: str
    kind: str  # "stable-abi" | "torch" | "tvm-ffi" | "noarch"
    framework_version: tuple[int, int] | None = None
    cxx11: bool | None = None
    backend: str = ""  # "cpu", "cu128", "rocm71", ... or for noarch: "cpu", "cuda", "universal"
    cpu: str = ""
    os: str = ""


def _ver(major: str, minor: str) -> tuple[int, int]:
    return int(major), int(minor)


def parse_variant(name: str) -> ParsedVariant | None:
    """Parse a variant directory name; ``None`` when it is not a known form."""
    parts = name.split("-")
    try:
        if name.startswith("torch-stable-abi"):
            m = _STABLE_ABI.fullmatch("-".join(parts[:3]))
            if not m or len(parts) != 6:
                return None
            return ParsedVariant(name, "stable-abi", _ver(m.group(1), m.group(2)), None, parts[3], parts[4], parts[5])
        if parts[0] == "torch":
            if len(parts) < 2:
                return None
            return ParsedVariant(name, "noarch", backend="-".join(parts[1:]))
        if parts[0].startswith("torch"):
            m = _TORCH_VER.fullmatch(parts[0])
            if not m:
                return None
            rest = parts[1:]
            cxx11 = None
            if rest and rest[0] in ("cxx11", "cxx98"):
                cxx11 = rest[0] == "cxx11"
                rest = rest[1:]
            if len(rest) != 3:
                return None
            return ParsedVariant(name, "torch", _ver(m.group(1), m.group(2)), cxx11, rest[0], rest[1], rest[2])
        if parts[0] == "tvm" and len(parts) == 5 and parts[1].startswith("ffi"):
            m = _FFI_VER.fullmatch(parts[1])
            if not m:
                return None
            return ParsedVariant(name, "tvm-ffi", _ver(m.group(1), m.group(2)), None, parts[2], parts[3], parts[4])
    except ValueError:
        return None
    return None


def _system_backend(hw: Hardware) -> str:
    """The variant backend string of the system: ``cpu``, ``cu128``, ``rocm71``..."""
    if hw.backend == "cuda":
        cuda = hw.software.get("cuda")
        return "cu" + cuda.replace(".", "") if cuda else "cu"
    if hw.backend == "rocm":
        rocm = hw.software.get("rocm")
        return "rocm" + rocm.replace(".", "") if rocm else "rocm"
    return hw.backend


def _torch_version(hw: Hardware) -> tuple[int, int] | None:
    t = hw.software.get("torch")
    m = _MAJOR_MINOR.match(t or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


@dataclass(frozen=True)
class VariantChoice:
    """The outcome of variant selection: the winner (or ``None``) and a reason per variant."""

    selected: str | None
    accepted: tuple[str, ...]
    rejected: tuple[tuple[str, str], ...]


def _check(v: ParsedVariant, hw: Hardware) -> str | None:
    """``None`` when the system accepts ``v``, else the reason it does not."""
    sys_backend = _system_backend(hw)
    if v.kind == "noarch":
        if v.backend not in (hw.backend, "universal"):
            return f"backend ({v.backend}) does not match system backend ({hw.backend}) and is not universal"
        return None
    if v.cpu != hw.cpu:
        return f"CPU ({v.cpu}) does not match system CPU ({hw.cpu})"
    if v.os != hw.os:
        return f"OS ({v.os}) does not match system OS ({hw.os})"
    tv = _torch_version(hw)
    if v.kind == "torch":
        if v.framework_version != tv:
            return f"torch version ({_fmt(v.framework_version)}) does not match system torch ({_fmt(tv)})"
        if v.cxx11 is not None and v.cxx11 != hw.cxx11_abi:
            return f"torch C++11 ABI ({v.cxx11}) does not match system ({hw.cxx11_abi})"
    elif v.kind == "stable-abi":
        if tv is None or v.framework_version > tv:
            return f"torch stable ABI ({_fmt(v.framework_version)}) is too new for system torch ({_fmt(tv)})"
    elif v.kind == "tvm-ffi":
        tvm = hw.software.get("tvm-ffi")
        if tvm is None or _fmt(v.framework_version) != tvm:
            return f"tvm-ffi version ({_fmt(v.framework_version)}) does not match system tvm-ffi ({tvm})"
    if hw.backend == "cuda" and v.backend.startswith("cu"):
        vb, sb = _cuda_mm(v.backend), _cuda_mm(sys_backend)
        if vb is None or sb is None or vb[0] != sb[0] or vb[1] > sb[1]:
            return f"CUDA version ({v.backend}) is not compatible with system CUDA ({sys_backend})"
        return None
    if v.backend != sys_backend:
        return f"backend ({v.backend}) does not match system backend ({sys_backend})"
    return None


def _cuda_mm(s: str) -> tuple[int, int] | None:
    m = _CUDA_VER.fullmatch(s)
    return (int(m.group(1)), int(m.group(2))) if m else None


def _fmt(v: tuple[int, int] | None) -> str:
    return f"{v[0]}.{v[1]}" if v else "none"


def _sort_key(v: ParsedVariant) -> tuple:
    if v.kind == "noarch":
        return (3, 0, 0, 1 if v.backend == "universal" else 0, v.name)
    backend_minor = 0
    mm = _cuda_mm(v.backend)
    if mm:
        backend_minor = -mm[1]
    else:
        m = _OTHER_BACKEND.match(v.backend)
        if m:
            backend_minor = -int(m.group(2))
    if v.kind == "stable-abi":
        return (0, -v.framework_version[0], -v.framework_version[1], backend_minor, v.name)
    if v.kind == "torch":
        return (1, 0, 1 if v.cxx11 is not None else 0, backend_minor, v.name)
    return (2, 0, 0, backend_minor, v.name)


def select_variants(names, hw: Hardware) -> VariantChoice:
    """Accepted variants in preference order, and a reason for each rejected one."""
    accepted: list[ParsedVariant] = []
    rejected: list[tuple[str, str]] = []
    for name in sorted(names):
        v = parse_variant(name)
        if v is None:
            rejected.append((name, "not a known variant name"))
            continue
        why = _check(v, hw)
        if why is None:
            accepted.append(v)
        else:
            rejected.append((name, why))
    accepted.sort(key=_sort_key)
    return VariantChoice(accepted[0].name if accepted else None, tuple(v.name for v in accepted), tuple(rejected))
