"""Hardware facts as a value, the device-class name rule and the arch rule.

``Hardware`` is what every decision reads: declared by a caller (``frt resolve
--arch 12.0 --device-class rtx-5090``) or read from the running system with
``Hardware.detect()``. Nothing here imports torch at module import time.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from ..base.record import dataclass, field
from ..errors import UsageError

__all__ = ["Hardware", "device_class", "arch_admits", "parse_cuda_arch", "backend_for_arch", "BACKENDS", "CPUS", "OSES"]

_FREQ = re.compile(r"\s*@\s*[^@]*$")
_NON_ALNUM = re.compile(r"[^a-z0-9]+")
_MAJOR_MINOR = re.compile(r"^(\d+)\.(\d+)")

# ---------------------------------------------------------------------------
# device class (docs/reference.md#digests-and-names)

_DROP_WORDS = {"nvidia", "geforce", "cpu", "processor"}


def device_class(name: str) -> str:
    """Normalise a device name: ``NVIDIA GeForce RTX 5090`` → ``rtx-5090``.

    Lower-cased; ``(r)``, ``(tm)``, a trailing ``@ <freq>`` and the words
    nvidia/geforce/cpu/processor dropped; every run of other characters → ``-``.
    """
    s = name.lower()
    s = _FREQ.sub("", s)  # trailing "@ 2.20GHz"
    s = s.replace("(r)", " ").replace("(tm)", " ")
    words = [w for w in _NON_ALNUM.split(s) if w and w not in _DROP_WORDS]
    return "-".join(words)


# ---------------------------------------------------------------------------
# arch rule (docs/reference.md#admissibility)

_CUDA_ARCH = re.compile(r"^(\d+)\.(\d+)([af]?)(\+PTX)?$")
_ROCM_ARCH = re.compile(r"^gfx[0-9a-f]+$")
_CUDA_CAP = re.compile(r"^(\d+)\.(\d+)$")


def parse_cuda_arch(entry: str) -> tuple[int, int, str, bool] | None:
    """``"12.0a+PTX"`` → ``(12, 0, "a", True)``; ``None`` when it does not parse."""
    m = _CUDA_ARCH.match(entry)
    if not m:
        return None
    return int(m.group(1)), int(m.group(2)), m.group(3), bool(m.group(4))


def _cuda_entry_admits(entry: str, cap: tuple[int, int]) -> bool | None:
    parsed = parse_cuda_arch(entry)
    if parsed is None:
        return None
    major, minor, suffix, ptx = parsed
    if suffix == "a":
        return cap == (major, minor)
    if suffix == "f":
        return cap[0] == major and cap[1] >= minor
    if ptx:
        return cap >= (major, minor)
    return cap[0] == major and cap[1] >= minor


def arch_admits(archs: Iterable[str] | None, device: str) -> bool:
    """Would a build declaring ``archs`` run on ``device``?

    ``device`` is a CUDA capability (``"12.0"``), a ROCm gfx name (``"gfx942"``)
    or a CPU machine name (``"x86_64"``).

    - An empty (or absent) declaration makes no claim: ``True`` (callers note it).
    - CUDA ``M.m``: major M, minor ≥ m. ``M.ma``: exactly M.m. ``M.mf``: major M,
      minor ≥ m. ``M.m+PTX``: any capability ≥ M.m; an ``a``/``f`` suffix decides
      even when ``+PTX`` follows.
    - ROCm ``gfxNNN``: exact match (feature flags after ``:`` ignored on the device).
    - An entry that does not parse is not evidence of support. Unlike ``kernels``
      0.17.2, a declaration none of whose entries parses admits nothing.
    - A CPU device is admitted by a declaration with no entries only.
    """
    entries = [str(a) for a in (archs or [])]
    if not entries:
        return True
    m = _CUDA_CAP.match(device)
    if m:
        cap = (int(m.group(1)), int(m.group(2)))
        return any(_cuda_entry_admits(e, cap) for e in entries)
    dev = device.split(":", 1)[0]
    if _ROCM_ARCH.match(dev):
        return dev in entries
    return False


def backend_for_arch(arch: str) -> str:
    """Default backend of a declared arch: ``cuda`` for ``M.m``, ``rocm`` for ``gfx…``, else ``cpu``."""
    if _CUDA_CAP.match(arch):
        return "cuda"
    if arch.startswith("gfx"):
        return "rocm"
    return "cpu"


# ---------------------------------------------------------------------------
# declared facts: the names `kernels` 0.17.2 uses for a system

BACKENDS = ("cuda", "rocm", "xpu", "metal", "cann", "neuron", "tpu", "cpu")  # kernels.backends
CPUS = ("x86_64", "aarch64")  # platform.machine(), arm64 -> aarch64, AMD64 -> x86_64
OSES = ("linux", "darwin", "windows")  # platform.system().lower()
_ALIASES = {"amd64": "x86_64", "x64": "x86_64", "x86-64": "x86_64", "arm64": "aarch64",
            "macos": "darwin", "osx": "darwin", "win32": "windows"}
# a capability spelt as a compiler target or a bare number: sm_90, sm90, compute_90, 90, 9, 12
_CAP_SPELLING = re.compile(r"^(sm|compute|cc)?_?([0-9]+)[af]?$", re.IGNORECASE)
_CAP_WITH_SUFFIX = re.compile(r"^([0-9]+)\.([0-9]+)[af]?(\+ptx)?$", re.IGNORECASE)


def _capability_hint(arch: str) -> str | None:
    """The ``M.m`` a misspelt capability most likely means: ``sm_90``/``90``/``compute_90`` →
    ``9.0``, ``sm_121`` → ``12.1`` (the compiler's digits: the last is the minor), a bare
    major (``9``, ``12``) → ``9.0``/``12.0``, ``9.0a`` → ``9.0``."""
    m = _CAP_WITH_SUFFIX.match(arch)
    if m:
        return f"{int(m.group(1))}.{int(m.group(2))}"
    m = _CAP_SPELLING.match(arch)
    if not m:
        return None
    digits = m.group(2)
    if len(digits) == 1 or (not m.group(1) and int(digits) <= 13):
        return f"{int(digits)}.0"
    return f"{int(digits[:-1])}.{digits[-1]}"


def _alias_hint(value: str, allowed: tuple[str, ...]) -> list[str]:
    alias = _ALIASES.get(value.lower())
    return [f"did you mean {alias!r}?"] if alias in allowed else []


def _one_of(field_name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise UsageError(f"hardware: {field_name}: {value!r} is not one of {', '.join(allowed)}",
                         hints=_alias_hint(value, allowed))


def _check_arch(arch: str, backend: str, cpu: str) -> str:
    """The declared ``arch`` for ``backend``, canonical (``09.0`` → ``9.0``), or a
    ``UsageError``: CUDA takes ``M.m``, ROCm a ``gfx…`` name, the CPU backend its machine
    (``cpu``); other backends (no arch rule in `kernels`) any plain name."""
    cap = _CUDA_CAP.match(arch)
    if backend == "cuda" and cap:
        return f"{int(cap.group(1))}.{int(cap.group(2))}"
    if backend == "rocm" and _ROCM_ARCH.match(arch):
        return arch
    hint = _capability_hint(arch)
    if hint and hint != arch and backend in ("cuda", "cpu"):
        raise UsageError(f"hardware: arch: {arch!r} is not a compute capability written major.minor",
                         hints=[f"did you mean {hint!r}? (a compute capability, e.g. 9.0 for sm_90, 12.1 for sm_121)"])
    if backend == "cuda":
        raise UsageError(f"hardware: arch: {arch!r} is not a CUDA compute capability (major.minor, e.g. 9.0, 12.1)")
    if backend == "rocm":
        raise UsageError(f"hardware: arch: {arch!r} is not a ROCm gfx name (e.g. gfx942)")
    if backend == "cpu":
        if arch not in CPUS:
            raise UsageError(f"hardware: arch: {arch!r} is not a compute capability (major.minor), a gfx name "
                             f"or, on the cpu backend, a CPU ({', '.join(CPUS)})", hints=_alias_hint(arch, CPUS))
        if arch != cpu:
            raise UsageError(f"hardware: arch {arch!r} and cpu {cpu!r} differ; on the cpu backend the arch is the CPU")
        return arch
    from ..base import names  # noqa: PLC0415 - the one name validator

    why = names.problem("name", arch)
    if why:
        raise UsageError(f"hardware: arch: {arch!r} {why}")
    return arch


# ---------------------------------------------------------------------------
# Hardware


_CANONICAL_MM = re.compile(r"^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$")
_NUMERIC = re.compile(r"^[0-9]+(?:\.[0-9]+)*$")


def software_version(value: str | None) -> str | None:
    """A dispatch-relevant software version as ``major.minor`` (docs/reference.md#cells-and-software), read with
    ``packaging``: ``2.13.0+cpu`` → ``2.13``, ``0.17.2`` → ``0.17``, ``12`` → ``12.0``.
    ``None`` when it is not a version. A cell's software facts (torch, CUDA/ROCm,
    `kernels`) are compared in this form, so a patch release never splits a cell."""
    if not value:
        return None
    if _CANONICAL_MM.match(value):  # already what packaging would print
        return value
    if _NUMERIC.match(value):  # plain release numbers (0.17.2, 012.8): what packaging reads, without importing it
        parts = value.split(".")
        return f"{int(parts[0])}.{int(parts[1]) if len(parts) > 1 else 0}"
    from packaging.version import InvalidVersion, Version  # noqa: PLC0415 - only for non-canonical input

    try:
        release = Version(value).release
    except InvalidVersion:
        m = _MAJOR_MINOR.match(value)  # e.g. HIP's 6.3.42131-fa1d09cbd: a build suffix packaging does not read
        if not m:
            return None
        release = Version(f"{m.group(1)}.{m.group(2)}").release
    release = (*release, 0)
    return f"{release[0]}.{release[1]}"


@dataclass(frozen=True)
class Hardware:
    """The facts about one machine that decisions depend on (docs/reference.md#hardware-and-detection: every
    machine can be declared on any machine).

    - ``arch``: CUDA capability ``M.m`` (``"12.0"``; ``sm_90`` or ``90`` is a ``UsageError``
      whose hint names ``9.0``), a ROCm ``gfx…`` name, or for ``backend="cpu"`` the CPU
      itself (``"x86_64"``); other backends take a plain name.
    - ``device_class``: normalised by ``device_class()`` (``"NVIDIA H200"`` → ``h200``).
    - ``backend``: one of ``BACKENDS`` (`kernels`' names); default from ``arch``.
    - ``cpu``/``os``: the host platform variant selection matches (``CPUS``: ``x86_64``,
      ``aarch64``; ``OSES``: ``linux``, ``darwin``, ``windows``); default this machine's.
    - ``software``: dispatch-relevant versions, each read as ``major.minor``
      (``software_version``: ``kernels`` 0.17.2 is 0.17). Keys decisions read: ``torch``,
      ``kernels``, the backend's runtime (``cuda``, ``rocm``, ``xpu`` as oneAPI's
      ``2025.3``, ``cann``), ``tvm-ffi``, and ``macos`` (Metal builds need macOS 26).
    - ``cxx11_abi``: torch's C++11 ABI; variant selection reads it on Linux only, as `kernels` does.

    Declared values are checked (``UsageError`` naming the field); detected ones are facts.
    """

    arch: str
    device_class: str
    backend: str = ""
    device_name: str = ""
    cpu: str = ""
    os: str = ""
    software: Mapping[str, str] = field(default_factory=dict)
    cxx11_abi: bool | None = True
    detected: bool = False
    fingerprint: tuple = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        if not self.arch:
            raise UsageError("hardware: `arch` is required (e.g. 12.0, gfx942, x86_64)")
        if not self.device_class:
            raise UsageError("hardware: `device_class` is required (e.g. rtx-5090)")
        dc = device_class(self.device_class)
        if not dc:
            raise UsageError(f"hardware: device_class: {self.device_class!r} names no device once normalised",
                             hints=["name the device, e.g. rtx-5090, h200, gb10"])
        object.__setattr__(self, "device_class", dc)
        if not self.backend:
            object.__setattr__(self, "backend", backend_for_arch(self.arch))
        if not self.detected:
            _one_of("backend", self.backend, BACKENDS)
            if self.cpu:
                _one_of("cpu", self.cpu, CPUS)
            if self.os:
                _one_of("os", self.os, OSES)
        if not self.cpu:
            object.__setattr__(self, "cpu", self.arch if self.backend == "cpu" else _machine())
        if not self.os:
            object.__setattr__(self, "os", _system())
        if not self.detected:
            object.__setattr__(self, "arch", _check_arch(self.arch, self.backend, self.cpu))
        soft = {}
        for k, v in dict(self.software).items():
            mm = software_version(str(v))
            if mm is None:
                raise UsageError(f"hardware: software {k}: {v!r} is not a version",
                                 hints=["software facts are versions, e.g. torch=2.13,cuda=12.8,kernels=0.17"])
            soft[str(k)] = mm
        object.__setattr__(self, "software", dict(sorted(soft.items())))
        # every fact a decision can depend on, hashable (a memo key)
        object.__setattr__(self, "fingerprint", (self.backend, self.arch, self.device_class, self.cpu, self.os,
                                                 self.cxx11_abi, self.detected, tuple(self.software.items())))

    # -- derived ----------------------------------------------------------
    @property
    def torch(self) -> str | None:
        return self.software.get("torch")

    def to_dict(self) -> dict:
        return {"backend": self.backend, "arch": self.arch, "device-class": self.device_class}

    def describe(self) -> str:
        return f"{self.device_class} ({self.backend} {self.arch})"

    @classmethod
    def from_flags(cls, *, arch: str, device_class: str, backend: str | None = None,
                   software: Mapping[str, str] | str | None = None, device_name: str = "",
                   cpu: str | None = None, os: str | None = None) -> Hardware:
        if isinstance(software, str):
            software = parse_software(software)
        return cls(arch=arch, device_class=device_class, backend=backend or "",
                   software=software or {}, device_name=device_name, cpu=cpu or "", os=os or "")

    @classmethod
    def detect(cls, nvml=None) -> Hardware:
        """Read the running system without importing torch (docs/reference.md#hardware-and-detection): the
        NVIDIA device NVML sees, else the CPU. The facts come from ``frt_dist.system.detect.read_system`` (``nvml``: a
        stand-in for the ``pynvml`` module, for tests)."""
        from .detect import read_system  # noqa: PLC0415 - NVML is opened on use only

        facts = read_system(nvml)
        if facts.gpu is not None:
            name, arch, backend = facts.gpu["name"], facts.gpu["capability"], "cuda"
        else:
            name, arch, backend = cpu_name(), _machine(), "cpu"
        return cls(arch=arch, device_class=device_class(name), backend=backend, device_name=name,
                   software=facts.software, cxx11_abi=facts.cxx11_abi, detected=True)


def _uname():
    """``os.uname()`` where the platform has it (what ``platform.system()`` and ``machine()``
    read there), else ``None``: `frt resolve` need not import ``platform``."""
    import os  # noqa: PLC0415

    return os.uname() if hasattr(os, "uname") else None


def _system() -> str:
    u = _uname()
    if u is not None:
        return u.sysname.lower() or "linux"
    import platform  # noqa: PLC0415 - lazy: `import frt_dist` stays cheap

    return platform.system().lower() or "linux"


def _machine() -> str:
    u = _uname()
    if u is None:
        import platform  # noqa: PLC0415

        m = platform.machine()
    else:
        m = u.machine
    return {"AMD64": "x86_64", "arm64": "aarch64"}.get(m, m)


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else the machine name."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform  # noqa: PLC0415

    return platform.processor() or _machine()


def parse_software(text: str) -> dict[str, str]:
    """``"torch=2.11,cuda=12.8"`` → ``{"torch": "2.11", "cuda": "12.8"}``."""
    out: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, val = part.partition("=")
        if not sep or not key.strip() or not val.strip():
            raise UsageError(f"--software: expected KEY=VALUE pairs separated by commas, got {part!r}")
        out[key.strip()] = val.strip()
    return out
