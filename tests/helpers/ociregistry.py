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

from helpers.s3server import end_process, free_port

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
        end_process(self.proc)
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


class HostileRegistry:
    """A registry that lies, in front of a real one (``upstream``: host:port): every request is
    forwarded, and ``mode`` changes what comes back:

    - ``"pass"``: nothing (each request is logged in ``log``: method, path, Authorization sent or not);
    - ``"trickle"``: a blob's answer sends its promised length one byte every ``trickle_s`` seconds;
    - ``"longer"``: a blob's answer says and sends more bytes than the blob has;
    - ``"unsized"``: a blob's answer has no length and sends more bytes than the blob has, then closes;
    - ``"manifest"``: a manifest GET answers ``manifest_body`` (with its true digest in Docker-Content-Digest);
    - ``"redirect"``: every request needs Basic credentials (``user``/``password``; a 401 otherwise), and a
      blob GET is redirected (307) to another host (``localhost`` on another port), which serves the blob
      from upstream and records the headers it was sent in ``side_log``;
    - ``"token"``: every request needs a Bearer token from the token service (the other host, ``/token``,
      ``realm`` overrides its address), which hands one out for the Basic credentials only.
    """

    def __init__(self, upstream: str, mode: str = "pass"):
        import hashlib
        import http.client
        import json
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.upstream, self.mode = upstream, mode
        self.trickle_s, self.manifest_body = 0.05, b""
        self.user, self.password = "frt-ci", "oci-secret-DoNotLeak-7c1a"
        self.log: list[tuple[str, str, bool]] = []
        self.token, self.realm = "tok-" + "9" * 24, None
        self.side_log: list[dict] = []
        me = self

        def forward(h, method, path, body=b""):
            conn = http.client.HTTPConnection(me.upstream, timeout=30)
            headers = {k: v for k, v in h.headers.items() if k.lower() not in ("connection", "authorization", "host")}
            headers["Host"] = h.headers.get("Host", me.upstream)
            conn.request(method, path, body=body or None, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            conn.close()
            return resp, data

        def answer(h, status, headers, data, *, length=True):
            h.send_response(status)
            for k, v in headers:
                if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                    h.send_header(k, v)
            if length:
                h.send_header("Content-Length", str(len(data)))
            else:
                h.send_header("Connection", "close")
                h.close_connection = True
            h.end_headers()
            if h.command != "HEAD":
                h.wfile.write(data)

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _any(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                auth = self.headers.get("Authorization")
                me.log.append((self.command, self.path, auth is not None))
                if me.mode == "redirect":
                    import base64

                    good = "Basic " + base64.b64encode(f"{me.user}:{me.password}".encode()).decode()
                    if auth != good:
                        answer(self, 401, [("WWW-Authenticate", 'Basic realm="hostile"')], b"{}")
                        return
                if me.mode == "token" and auth != f"Bearer {me.token}":
                    realm = me.realm or f"http://127.0.0.1:{me.side_port}/token"
                    answer(self, 401, [("WWW-Authenticate", f'Bearer realm="{realm}",service="hostile",'
                                                             'scope="repository:x:pull"')], b"{}")
                    return
                blob = self.command == "GET" and "/blobs/sha256:" in self.path
                if me.mode == "redirect" and blob:
                    answer(self, 307, [("Location", f"http://localhost:{me.side_port}{self.path}")], b"")
                    return
                resp, data = forward(self, self.command, self.path, body)
                if me.mode == "manifest" and self.command == "GET" and "/manifests/" in self.path:
                    digest = "sha256:" + hashlib.sha256(me.manifest_body).hexdigest()
                    answer(self, 200, [("Content-Type", "application/vnd.oci.image.manifest.v1+json"),
                                       ("Docker-Content-Digest", digest)], me.manifest_body)
                    return
                if blob and resp.status == 200 and me.mode in ("longer", "unsized"):
                    answer(self, 200, resp.getheaders(), data + b"#" * 4096, length=me.mode == "longer")
                    return
                if blob and resp.status == 200 and me.mode == "trickle":
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    import time

                    try:
                        for i in range(len(data)):
                            self.wfile.write(data[i:i + 1])
                            self.wfile.flush()
                            time.sleep(me.trickle_s)
                    except OSError:
                        pass
                    self.close_connection = True
                    return
                answer(self, resp.status, resp.getheaders(), data)

            do_GET = do_PUT = do_POST = do_HEAD = do_PATCH = do_DELETE = _any

        class Side(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_GET(self):
                me.side_log.append({"path": self.path, **dict(self.headers.items())})
                if self.path.startswith("/token"):
                    import base64

                    good = "Basic " + base64.b64encode(f"{me.user}:{me.password}".encode()).decode()
                    ok = self.headers.get("Authorization") == good
                    answer(self, 200 if ok else 401, [], json.dumps({"token": me.token}).encode() if ok else b"{}")
                    return
                resp, data = forward(self, "GET", self.path)
                answer(self, resp.status, resp.getheaders(), data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.side = ThreadingHTTPServer(("127.0.0.1", 0), Side)
        for s in (self.server, self.side):
            s.daemon_threads = True
            s.handle_error = lambda request, address: None
        self.side_port = self.side.server_address[1]
        self.threads = [threading.Thread(target=s.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
                        for s in (self.server, self.side)]

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> HostileRegistry:
        for t in self.threads:
            t.start()
        return self

    def stop(self) -> None:
        for s in (self.server, self.side):
            s.shutdown()
            s.server_close()

    def docker_config(self, folder: Path) -> None:
        """Write ``folder/config.json`` with this registry's credentials (Docker's ``auths`` form)."""
        import base64
        import json

        folder.mkdir(parents=True, exist_ok=True)
        auth = base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
        (folder / "config.json").write_text(json.dumps({"auths": {self.host: {"auth": auth}}}))
