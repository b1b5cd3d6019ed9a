"""A real OCI registry on 127.0.0.1 for the oci:// tests: Debian's ``docker-registry`` (the CNCF
distribution registry, 2.8) in its own process, on a free port, storing into a scratch folder
(``Registry.storage``, where a test can swap a blob's bytes behind the registry's back).

``.ci/run`` installs it; under ``CI=true`` a missing registry fails the test run (``require``)
instead of skipping. Each test takes its own repository (``Registry.repo()``) on the one registry
of its test session (one per xdist worker: it starts in a fraction of a second).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from helpers.s3server import free_port

__all__ = ["Registry", "REGISTRY_BIN", "require"]

REGISTRY_BIN = shutil.which("docker-registry") or ("/usr/bin/docker-registry"
                                                  if os.access("/usr/bin/docker-registry", os.X_OK) else None)


def require() -> None:
    """Skip without a registry binary; under CI fail instead (``.ci/run`` installs it)."""
    if REGISTRY_BIN is None:
        if os.environ.get("CI"):
            pytest.fail("CI: docker-registry is not installed (.ci/run installs Debian's docker-registry); the "
                        "oci:// tests must run")
        pytest.skip("docker-registry not installed (apt-get install docker-registry; CI installs it and fails without)")


class Registry:
    """``docker-registry serve`` on a free loopback port with a scratch storage folder."""

    def __init__(self):
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="frt-oci-registry-"))
        self.storage = self.dir / "data"
        self.proc: subprocess.Popen | None = None

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> Registry:
        cfg = self.dir / "config.yml"
        cfg.write_text("version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\nstorage:\n"
                       f"  filesystem:\n    rootdirectory: {self.storage}\n  delete:\n    enabled: true\n"
                       f"http:\n  addr: {self.host}\n")
        log = open(self.dir / "log", "wb")
        self.proc = subprocess.Popen([REGISTRY_BIN, "serve", str(cfg)], stdout=log, stderr=log,
                                     stdin=subprocess.DEVNULL)
        log.close()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"docker-registry exited with {self.proc.returncode}: "
                                   f"{(self.dir / 'log').read_text(errors='replace')[-2000:]}")
            try:
                urllib.request.urlopen(f"http://{self.host}/v2/", timeout=1).read()
                return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError("docker-registry did not answer within 20 s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

    def repo(self, name: str = "kernels") -> str:
        """A fresh repository on this registry: ``127.0.0.1:PORT/t<hex>/<name>``."""
        return f"{self.host}/t{uuid.uuid4().hex[:10]}/{name}"

    def blob_path(self, digest: str) -> Path:
        """Where the registry keeps a blob's bytes (the filesystem driver's layout)."""
        hexd = digest.split(":", 1)[1]
        return self.storage / "docker/registry/v2/blobs/sha256" / hexd[:2] / hexd / "data"

    def get(self, path: str, accept: str | None = None) -> tuple[int, dict, bytes]:
        """A plain GET on the registry's API (for inspection)."""
        req = urllib.request.Request(f"http://{self.host}{path}", headers={"Accept": accept} if accept else {})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, dict(r.headers), r.read()
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), e.read()
