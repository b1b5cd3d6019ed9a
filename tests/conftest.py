"""Fixtures and hooks only: a hermetic Hugging Face environment (no token, no real cache, no real Hub), a
Hub-protocol server on 127.0.0.1, an empty project, and the `frt` runner. What tests import lives in
``tests/helpers/`` (tests/README.md)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.dont_write_bytecode = True  # for every test module: a __pycache__ inside a package source would break its digest
sys.path.insert(0, str(Path(__file__).resolve().parent))  # the one way tests find ``helpers``

from helpers.frt import Frt  # noqa: E402
from helpers.gpu import NO_GPU_REASON, gpu_visible  # noqa: E402
from helpers.hubserver import HubServer  # noqa: E402
from helpers.s3server import S3Server  # noqa: E402


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


@pytest.fixture
def project(tmp_path):
    """An empty project folder (manifests/, receipts/, lockfiles/)."""
    for d in ("manifests", "receipts", "lockfiles"):
        (tmp_path / d).mkdir()
    return tmp_path


@pytest.fixture
def qproject(project, monkeypatch):
    """A project ``frt qualify`` can measure (``helpers.factories.qualify_project``), with the toy host's
    folder on ``sys.path`` for in-process runs (subprocesses get it through ``PYTHONPATH``)."""
    from helpers.factories import qualify_project  # torch, only for the tests that qualify
    from helpers.paths import HELPERS

    monkeypatch.syspath_prepend(str(HELPERS))  # the host-entry ``toyhost:build_host``
    return qualify_project(project)


@pytest.fixture(scope="session")
def s3():
    """A real S3-protocol server (moto, its own process) on 127.0.0.1, one for the session; each test
    takes its own ``bucket``."""
    srv = S3Server().start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def bucket(s3, monkeypatch):
    """A fresh bucket on the session's S3 server, and the standard AWS environment pointing at it
    (in this process, for in-process calls; ``s3.env()`` for subprocesses). Yields the bucket name."""
    import uuid

    name = f"frt-{uuid.uuid4().hex[:12]}"
    s3.client().create_bucket(Bucket=name)
    for k in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(k)
    for k, v in s3.env().items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("FRT_STORE_TIMEOUT", "5")
    yield name


@pytest.fixture(scope="session")
def oci_registry():
    """A real OCI registry (Debian's docker-registry, its own process) on 127.0.0.1, one per test session
    (each xdist worker its own); each test takes its own repository (``oci_registry.repo()``). Skipped
    without the binary, failed under CI (tests/helpers/ociregistry.py)."""
    from helpers.ociregistry import Registry, require

    require()
    reg = Registry().start()
    try:
        yield reg
    finally:
        reg.stop()


@pytest.fixture
def frt():
    """The `frt` runner (``helpers.frt``): ``frt("lock", cwd=p)`` in this process, ``frt.process(...)`` as a
    subprocess; each returns ``.code``, ``.out``, ``.err`` and ``.json()``."""
    return Frt()


