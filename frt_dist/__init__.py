"""frt-dist: the distribution layer between qualified kernel work and serving.

``import frt_dist`` is cheap (the error types only; every other name is
imported on first use) and imports neither torch nor kernels; the loader,
``load`` and the qualification door import them when called.
"""

from __future__ import annotations

from .errors import (
    ContractViolation,
    FrtError,
    HubError,
    KernelUnavailable,
    LockfileError,
    ManifestError,
    NoProject,
    ReceiptInvalid,
    RouteRefused,
    UsageError,
)

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "load",
    "Plan",
    "resolve",
    "Decision",
    "hub_kernel",
    "unavailable_report",
    "Hardware",
    "arch_admits",
    "device_class",
    "Lockfile",
    "Manifest",
    "Receipt",
    "FrtError",
    "UsageError",
    "NoProject",
    "ManifestError",
    "LockfileError",
    "ReceiptInvalid",
    "HubError",
    "KernelUnavailable",
    "RouteRefused",
    "ContractViolation",
]

_LAZY = {
    "load": ("serve.load", "load"),
    "Plan": ("serve.plan", "Plan"),
    "resolve": ("routes.resolver", "resolve"),
    "Decision": ("routes.resolver", "Decision"),
    "hub_kernel": ("loader.core", "hub_kernel"),
    "unavailable_report": ("loader.core", "unavailable_report"),
    "Lockfile": ("documents.lockfile", "Lockfile"),
    "Manifest": ("documents.manifest", "Manifest"),
    "Receipt": ("documents.receipt", "Receipt"),
    "Hardware": ("system.hardware", "Hardware"),
    "arch_admits": ("system.hardware", "arch_admits"),
    "device_class": ("system.hardware", "device_class"),
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib  # noqa: PLC0415 - on first use: `import frt_dist` stays free

        mod, attr = _LAZY[name]
        value = getattr(importlib.import_module(f"{__name__}.{mod}"), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'frt_dist' has no attribute {name!r}")
