"""Tests that assert the CPU detection path.

``Hardware.detect()`` (and `kernels`' own variant choice) read ``torch.cuda.is_available()``: on a
machine where torch sees a GPU they take the CUDA/ROCm path. A test that asserts what the CPU path
does is marked ``@needs_no_gpu`` and is skipped there, saying why (``tests/conftest.py``). The check
is lazy (at the marked test's setup, never at import) and cheap first: with no NVIDIA or AMD driver
on the machine, torch is not imported at all.
"""

from __future__ import annotations

import functools
import os
import shutil

import pytest

_GPU_DRIVER_PATHS = ("/proc/driver/nvidia", "/dev/nvidiactl", "/dev/nvidia0", "/dev/kfd")


def _gpu_driver_present() -> bool:
    return any(os.path.exists(p) for p in _GPU_DRIVER_PATHS) or any(
        shutil.which(tool) for tool in ("nvidia-smi", "rocm-smi", "amd-smi"))


@functools.cache
def gpu_visible() -> bool:
    """Whether ``Hardware.detect()`` would report a GPU here (torch sees a CUDA or ROCm device)."""
    if not _gpu_driver_present():
        return False
    try:
        import torch  # only where a GPU driver is present
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


NO_GPU_REASON = "asserts the CPU detection path (Hardware.detect() reports backend 'cpu'); torch sees a GPU here"
needs_no_gpu = pytest.mark.needs_no_gpu
