"""Shared fixtures: a Hub-protocol server on 127.0.0.1, project builders, a
hermetic Hugging Face environment (no token, no real cache, no real Hub)."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.dont_write_bytecode = True
TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
sys.path.insert(0, str(TESTS))

from hubserver import HubServer, kernel_variant_files  # noqa: E402,F401 (re-exported to tests)

BUNDLED = ROOT


# --- tests that assert the CPU detection path -------------------------------
#
# ``Hardware.detect()`` (and `kernels`' own variant choice) read ``torch.cuda.is_available()``:
# on a machine where torch sees a GPU they take the CUDA/ROCm path. A test that asserts what the
# CPU path does is marked ``@needs_no_gpu`` and is skipped there, saying why. The check is lazy
# (at the marked test's setup, never at import) and cheap first: with no NVIDIA or AMD driver on
# the machine, torch is not imported at all.

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
        import torch  # noqa: PLC0415 - only where a GPU driver is present
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


NO_GPU_REASON = "asserts the CPU detection path (Hardware.detect() reports backend 'cpu'); torch sees a GPU here"
needs_no_gpu = pytest.mark.needs_no_gpu


def pytest_configure(config):
    config.addinivalue_line("markers", f"needs_no_gpu: skipped where torch sees a GPU ({NO_GPU_REASON})")


def pytest_runtest_setup(item):
    if item.get_closest_marker("needs_no_gpu") is not None and gpu_visible():
        pytest.skip(NO_GPU_REASON)


# The variables `_hermetic` controls, as they were before any test module was imported. A test
# module that writes one at import time (module level) changes it for every module after it;
# collection fails naming it (use monkeypatch in a fixture instead).
_HERMETIC_PREFIXES = ("HF_", "HUGGINGFACE_", "KERNELS_", "FRT_", "TRANSFORMERS_")
_HERMETIC_AT_IMPORT = {k: v for k, v in os.environ.items() if k.startswith(_HERMETIC_PREFIXES) or k == "LOCAL_KERNELS"}


def pytest_collection_finish(session):
    now = {k: v for k, v in os.environ.items() if k.startswith(_HERMETIC_PREFIXES) or k == "LOCAL_KERNELS"}
    changed = sorted(k for k in {*now, *_HERMETIC_AT_IMPORT} if now.get(k) != _HERMETIC_AT_IMPORT.get(k))
    if changed:
        raise pytest.UsageError(f"a test module changed os.environ at import ({', '.join(changed)}): that leaks "
                                "into every later module; set it with monkeypatch in a fixture instead")


@pytest.fixture(autouse=True)
def _hermetic(monkeypatch, tmp_path_factory):
    home = tmp_path_factory.mktemp("hfhome")
    for k in list(os.environ):
        if k.startswith(("HF_", "HUGGINGFACE_", "KERNELS_", "FRT_")) or k in ("LOCAL_KERNELS",):
            monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_DISABLE_IMPLICIT_TOKEN", "1")
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / "cache"))  # the loader's verified store (platformdirs), subprocesses too
    try:
        from huggingface_hub import constants
        from huggingface_hub.utils import _detect_agent

        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
        # telemetry would fetch <ENDPOINT>/api/agent-harnesses once per process: pre-seed it
        monkeypatch.setattr(_detect_agent, "_registry", {"standardEnvVars": [], "harnesses": {}}, raising=False)
    except ImportError:  # pragma: no cover
        pass


@pytest.fixture
def fresh_loader(monkeypatch, tmp_path):
    """A process with no package loaded and no mirror, lock or offline setting from outside; the
    hub caches in this test's folder. Tests that load packages use it (``usefixtures``)."""
    from frt_dist import loader

    loader._forget_all()
    for var in ("FRT_MIRROR", "FRT_LOCK", "HF_HUB_OFFLINE", "HF_ENDPOINT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("KERNELS_CACHE", str(tmp_path / "kcache"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hfcache"))
    yield
    loader._forget_all()


@pytest.fixture
def hub():
    srv = HubServer().start()
    try:
        yield srv
    finally:
        srv.stop()


def write_files(root: Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)


MANIFEST_TMPL = '''schema = "frt.manifest/1"
model = "{model}"
binding = "toy_binding"
host = "torch"
family = "toy"
default-precision = "fp32"

{packages}

[phases.decode]
rows = [1, 16]

[phases.prefill]
rows = [64, 2048]

[seams.norm]
structure = "norm@1"

[seams.norm.impls.fast]
package = "{repo}"
entry = "add_one"
precision = "fp32"
contract = {{ device = "cpu", dtypes = ["float32"], layout = "contiguous" }}
smoke = {{ inputs = [{{ shape = ["rows", 8], dtype = "float32" }}] }}

[routes.fast]
assembly = "eager"
seams = {{ norm = "fast" }}
gate = {{ min-speedup = 1.05 }}
'''


def toy_manifest(model="toy", repo="testorg/addone", package_toml=None) -> str:
    package_toml = package_toml or f'[packages."{repo}"]\nversion = 1\ntrust = true'
    return MANIFEST_TMPL.format(model=model, repo=repo, packages=package_toml)


@pytest.fixture
def project(tmp_path):
    """An empty project folder (manifests/, receipts/, lockfiles/)."""
    for d in ("manifests", "receipts", "lockfiles"):
        (tmp_path / d).mkdir()
    return tmp_path


def run_main(argv) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``frt argv`` through ``frt_dist.cli.main.main`` in this process,
    with no traceback on stderr."""
    import io
    from contextlib import redirect_stderr, redirect_stdout

    from frt_dist.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as exc:
            rc = exc.code
    assert "Traceback" not in err.getvalue()
    return rc, out.getvalue(), err.getvalue()


def run_frt(args, *, cwd, env=None, timeout=120, input=None):
    """`frt` in a real subprocess (the console script's module)."""
    e = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "FRT_", "KERNELS_"))}
    e["PYTHONDONTWRITEBYTECODE"] = "1"
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "frt_dist.cli", *args], cwd=cwd, env=e, capture_output=True,
                          text=True, timeout=timeout, input=input)
