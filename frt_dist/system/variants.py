"""Which build variant a (declared) system accepts, without importing `kernels`.

A pure re-statement of `kernels` 0.17.2's ``variants._resolve_variant_for_system``
(and the ``backends.parse_backend`` grammar it uses), so that a lock, a resolve or a
refusal can be computed for hardware we are not running on, and so that the serving
and lock paths never import `kernels`. A differential test (``tests/test_variants.py``)
keeps it equal to `kernels`' own selection over a zoo of names × systems.

The system facts `kernels` reads are ``Hardware`` fields: ``backend`` with its version
(``software`` ``cuda``/``rocm``/``xpu``/``cann``), ``cpu``, ``os``, ``software`` ``torch``,
``tvm-ffi`` and ``macos``, and ``cxx11_abi`` (a Linux fact: `kernels` passes none
elsewhere, so neither do we). Two deliberate differences: accepted variants whose
preference ties are ordered by name (`kernels` keeps the order the Hub listed them in,
which is a set's), and the free-threaded-Python prefilter is not applied (frt serves
from the interpreter it runs in; `kernels` checks that at load).
"""

from __future__ import annotations

import re

from ..base import names
from ..base.record import dataclass
from .hardware import Hardware, software_version

__all__ = ["ParsedVariant", "parse_variant", "select_variants", "VariantChoice", "valid_variant_name",
           "METAL_MIN_MACOS"]

_STABLE_ABI = re.compile(r"torch-stable-abi([0-9])([0-9]+)")
_TORCH = re.compile(r"torch([0-9])([0-9]+)")
_TVM_FFI = re.compile(r"tvm-ffi([0-9]+?)([0-9]+)")
# versioned backends: prefix -> backend name; the version is "<major><minor>" with a
# one-digit minor (kernels' greedy `(\d+)(\d+)`: cu1210 is 121.0, not 12.10)
_VERSIONED = {"cu": "cuda", "rocm": "rocm", "xpu": "xpu", "cann": "cann"}
_PREFIX = {name: prefix for prefix, name in _VERSIONED.items()}
_VERSIONED_BACKEND = re.compile(r"(cu|rocm|xpu|cann)([0-9]+)([0-9])")
_PLAIN_BACKENDS = ("cpu", "metal", "neuron", "tpu")
# Metal builds use -std=metal4.0, which needs macOS 26 (kernels' _METAL_MIN_MACOS_VERSION)
METAL_MIN_MACOS = (26, 0)


def valid_variant_name(name: str) -> bool:
    """A variant name is one safe path component (``frt_dist.base.names``)."""
    return names.problem("variant", name) is None


@dataclass(frozen=True)
class ParsedVariant:
    """A build variant directory name, taken apart (``parse_variant``).

    ``backend`` is the backend's name (``cuda``, ``rocm``, ``xpu``, ``cann``, ``cpu``,
    ``metal``, ``neuron``, ``tpu``) with ``backend_version`` for the versioned ones; for a
    noarch variant it is the text after ``torch-`` (``cpu``, ``cuda``, ``npu``, ``universal``).
    """

    name: str
    kind: str  # "stable-abi" | "torch" | "tvm-ffi" | "noarch"
    framework_version: tuple[int, int] | None = None
    cxx11: bool | None = None
    backend: str = ""
    backend_version: tuple[int, int] | None = None
    cpu: str = ""
    os: str = ""

    @property
    def backend_str(self) -> str:
        return _backend_str(self.backend, self.backend_version)


def _backend_str(name: str, version: tuple[int, int] | None) -> str:
    """A backend as a variant names it: ``cu128``, ``xpu20253``, ``metal``."""
    return f"{_PREFIX.get(name, name)}{version[0]}{version[1]}" if version else name


def _parse_backend(s: str) -> tuple[str, tuple[int, int] | None] | None:
    if s in _PLAIN_BACKENDS:
        return s, None
    m = _VERSIONED_BACKEND.fullmatch(s)
    return (_VERSIONED[m.group(1)], (int(m.group(2)), int(m.group(3)))) if m else None


def _arch(name: str, kind: str, version: tuple[int, int], cxx11: bool | None,
          parts: list[str]) -> ParsedVariant | None:
    """An arch variant, from the ``<backend>-<cpu>-<os>`` parts after its framework part."""
    backend = _parse_backend(parts[0]) if len(parts) == 3 else None
    if backend is None:
        return None
    return ParsedVariant(name, kind, version, cxx11, backend[0], backend[1], parts[1], parts[2])


def _mm(m: re.Match) -> tuple[int, int]:
    return int(m.group(1)), int(m.group(2))


def parse_variant(name: str) -> ParsedVariant | None:
    """Parse a variant directory name; ``None`` where `kernels`' ``parse_variant`` raises."""
    parts = name.split("-")
    if name.startswith("torch-stable-abi"):
        m = _STABLE_ABI.fullmatch("-".join(parts[:3]))
        return _arch(name, "stable-abi", _mm(m), None, parts[3:]) if m else None
    if parts[0] == "torch":
        return ParsedVariant(name, "noarch", backend="-".join(parts[1:]))
    if parts[0].startswith("torch"):
        m = _TORCH.fullmatch(parts[0])
        if not m:
            return None
        tagged = len(parts) >= 2 and parts[1] in ("cxx11", "cxx98")
        cxx11 = parts[1] == "cxx11" if tagged else None
        return _arch(name, "torch", _mm(m), cxx11, parts[2:] if tagged else parts[1:])
    if parts[0] == "tvm" and len(parts) >= 2 and parts[1].startswith("ffi"):
        m = _TVM_FFI.fullmatch(f"tvm-{parts[1]}")
        return _arch(name, "tvm-ffi", _mm(m), None, parts[2:]) if m else None
    return None


@dataclass(frozen=True)
class VariantChoice:
    """The outcome of variant selection: the winner (or ``None``) and a reason per variant."""

    selected: str | None
    accepted: tuple[str, ...]
    rejected: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class _System:
    """The facts of ``Hardware`` that `kernels`' resolver reads, in its terms."""

    backend: str
    backend_version: tuple[int, int] | None
    cpu: str
    os: str
    torch: tuple[int, int] | None
    cxx11: bool | None
    tvm_ffi: tuple[int, int] | None
    macos: tuple[int, int] | None

    @classmethod
    def of(cls, hw: Hardware) -> _System:
        def version(key: str) -> tuple[int, int] | None:
            v = software_version(hw.software.get(key))
            return tuple(int(x) for x in v.split(".")) if v else None

        return cls(hw.backend, version(hw.backend) if hw.backend in _PREFIX else None, hw.cpu, hw.os,
                   version("torch"), hw.cxx11_abi if hw.os == "linux" else None, version("tvm-ffi"),
                   version("macos"))

    @property
    def backend_str(self) -> str:
        if self.backend in _PREFIX and self.backend_version is None:
            return f"{self.backend}, version not declared"
        return _backend_str(self.backend, self.backend_version)

    @property
    def noarch(self) -> str:
        return "npu" if self.backend == "cann" else self.backend


def _fmt(v: tuple[int, int] | None) -> str:
    return f"{v[0]}.{v[1]}" if v else "none"


def _check(v: ParsedVariant, s: _System) -> str | None:
    """``None`` when the system accepts ``v``, else the reason it does not (kernels' order of checks)."""
    if v.kind == "noarch":
        if v.backend not in (s.noarch, "universal"):
            return f"backend ({v.backend}) does not match system backend ({s.noarch}) and is not universal"
        return None
    if v.cpu != s.cpu:
        return f"CPU ({v.cpu}) does not match system CPU ({s.cpu})"
    if v.os != s.os:
        return f"OS ({v.os}) does not match system OS ({s.os})"
    if v.kind == "torch":
        if v.framework_version != s.torch:
            return f"torch version ({_fmt(v.framework_version)}) does not match system torch ({_fmt(s.torch)})"
        if v.cxx11 is not None and v.cxx11 != s.cxx11:
            return f"torch C++11 ABI ({v.cxx11}) does not match system ({s.cxx11})"
    elif v.kind == "stable-abi":
        if s.torch is None or v.framework_version > s.torch:
            return f"torch stable ABI ({_fmt(v.framework_version)}) is too new for system torch ({_fmt(s.torch)})"
    elif v.framework_version != s.tvm_ffi:
        return f"tvm-ffi version ({_fmt(v.framework_version)}) does not match system tvm-ffi ({_fmt(s.tvm_ffi)})"
    if s.backend == v.backend == "cuda":
        sv, vv = s.backend_version, v.backend_version
        if sv is None or vv[0] != sv[0] or vv[1] > sv[1]:
            return f"CUDA version ({v.backend_str}) is not compatible with system CUDA ({s.backend_str})"
    elif v.backend_str != s.backend_str:
        return f"backend ({v.backend_str}) does not match system backend ({s.backend_str})"
    elif v.backend == "metal" and (s.macos is None or s.macos < METAL_MIN_MACOS):
        return (f"Metal builds need macOS {_fmt(METAL_MIN_MACOS)} or later, system macOS "
                f"{_fmt(s.macos) if s.macos else 'not declared (software macos=X.Y)'}")
    return None


def _sort_key(v: ParsedVariant) -> tuple:
    """`kernels`' ``_sort_variants`` key, then the name: stable-ABI (newest first) > torchXY
    (untagged first) > tvm-ffi > noarch > ``torch-universal``, each by the backend's minor
    version, highest first. As in `kernels`, tvm-ffi and noarch share a rank, so a tvm-ffi
    build of minor 0 ties with the noarch variant (the name decides)."""
    if v.kind == "noarch":
        return (2, 0, 0, 1 if v.backend == "universal" else 0, v.name)
    minor = -v.backend_version[1] if v.backend_version else 0
    if v.kind == "stable-abi":
        return (0, -v.framework_version[0], -v.framework_version[1], minor, v.name)
    if v.kind == "torch":
        return (1, 0, 1 if v.cxx11 is not None else 0, minor, v.name)
    return (2, 0, 0, minor, v.name)


def select_variants(names, hw: Hardware) -> VariantChoice:
    """Accepted variants in preference order, and a reason for each rejected one."""
    system = _System.of(hw)
    accepted: list[ParsedVariant] = []
    rejected: list[tuple[str, str]] = []
    for name in sorted(names):
        v = parse_variant(name)
        why = "not a known variant name" if v is None else _check(v, system)
        if why is None:
            accepted.append(v)
        else:
            rejected.append((name, why))
    accepted.sort(key=_sort_key)
    return VariantChoice(accepted[0].name if accepted else None, tuple(v.name for v in accepted), tuple(rejected))
