"""A real S3-protocol server on 127.0.0.1 for the fleet tests: moto's standalone server in a
separate process (``python -m moto.server``), on a free port, plus a tiny fault proxy of our own
that sits in front of it (answers 500, stalls, or counts requests).

Tests talk to it through the production client path (``frt_dist.distribution.objstore``, boto3): the only
thing a test sets is the standard AWS environment (``S3Server.env()``).
"""

from __future__ import annotations

import http.client
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

__all__ = ["S3Server", "FaultProxy", "free_port", "start_moto", "FAKE_KEY_ID", "FAKE_SECRET", "run_traced", "connects_script"]

# distinctive fake credentials: tests assert neither ever appears in any output or written file
FAKE_KEY_ID = "AKIAFRTFLEETTESTKEY7"
FAKE_SECRET = "frtSecretDoNotLeak/9f3b2e7c1a4d8e6f0b5c2a7d9e1f3b4c"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def end_process(proc: subprocess.Popen | None) -> None:
    """Stop a test server's process: terminate, wait 10 s, then kill (every wait bounded)."""
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run_traced(cmd: list[str], log, **kw) -> tuple[subprocess.CompletedProcess, set[tuple[str, int]]]:
    """Run ``cmd`` under ``strace -f -e trace=connect``: every ``connect()`` of every process and
    thread, whatever language made it (a Python audit hook sees only Python's sockets, not those
    of obstore's Rust client). The peers are ``(address, port)`` of the IPv4/IPv6 connects, UDP
    (a DNS query) included. ``None`` in place of the set when strace is not installed."""
    import re
    import shutil

    strace = shutil.which("strace")
    if strace is None:
        return subprocess.run(cmd, **kw), None
    r = subprocess.run([strace, "-f", "--seccomp-bpf", "-qq", "-e", "trace=connect", "-e", "signal=none", "-o", str(log), *cmd], **kw)
    peers = set()
    for line in open(log).read().splitlines():
        if "AF_INET" not in line:
            continue
        port = re.search(r"sin6?_port=htons\((\d+)\)", line)
        addr = re.search(r'inet_addr\("([^"]+)"\)', line) or re.search(r'inet_pton\(AF_INET6, "([^"]+)"', line)
        peers.add((addr.group(1) if addr else line, int(port.group(1)) if port else -1))
    return r, peers


def connects_script(body: str, *, after: str = "") -> str:
    """A ``python -c`` script that runs ``body`` under an audit hook recording every Python
    ``socket.connect`` (``[host, port]``) and ``socket.getaddrinfo`` (``["resolve", host, port]``),
    and writes the list as JSON to ``sys.argv[1]`` however ``body`` ends; then runs ``after``.
    Python's sockets only: ``run_traced`` sees every process's and thread's."""
    indented = "".join(f"    {line}\n" for line in body.strip("\n").splitlines())
    return ("import json, sys\n"
            "seen = []\n"
            "def hook(event, args):\n"
            "    if event == 'socket.connect':\n"
            "        addr = args[1]\n"
            "        seen.append(list(addr) if isinstance(addr, tuple) else str(addr))\n"
            "    elif event == 'socket.getaddrinfo':\n"
            "        seen.append(['resolve', str(args[0]), args[1]])\n"
            "sys.addaudithook(hook)\n"
            f"try:\n{indented}"
            "finally:\n"
            "    open(sys.argv[1], 'w').write(json.dumps(seen))\n" + after)


def start_moto(port: int, env: dict | None = None, timeout: float = 30) -> tuple[subprocess.Popen, object]:
    """``python -m moto.server`` on 127.0.0.1:``port``, its output in a temporary file; returns once it
    answers. A server that exits or does not answer within ``timeout`` s is stopped, and the error
    carries its whole output (the cause: a port taken meanwhile, a missing module...)."""
    import tempfile

    env = env if env is not None else {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=log, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + timeout
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/moto-api/", timeout=1).read()
            return proc, log
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            why = f"exited with {proc.returncode}" if proc.poll() is not None else f"did not answer within {timeout} s"
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
            log.seek(0)
            raise RuntimeError(f"moto server on port {port} {why}; its output:\n"
                               + log.read().decode("utf-8", "replace"))
        time.sleep(0.1)


class S3Server:
    """``moto.server`` in its own process. ``start()`` waits until it answers; ``reset()`` drops
    every bucket (moto's ``/moto-api/reset``); ``requests()`` is the server's request count per
    method, from the fault proxy when one is in front (see ``FaultProxy``)."""

    def __init__(self):
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self.log = None  # the server's output (``start_moto``)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> S3Server:
        self.proc, self.log = start_moto(self.port)
        return self

    def stop(self) -> None:
        end_process(self.proc)
        if self.log is not None:
            self.log.close()
            self.log = None

    def reset(self) -> None:
        req = urllib.request.Request(self.url + "/moto-api/reset", method="POST")
        urllib.request.urlopen(req, timeout=10).read()

    def env(self, *, endpoint: str | None = None) -> dict:
        """The standard AWS environment pointing at this server, with the fake credentials."""
        return {"AWS_ENDPOINT_URL": endpoint or self.url, "AWS_ACCESS_KEY_ID": FAKE_KEY_ID,
                "AWS_SECRET_ACCESS_KEY": FAKE_SECRET, "AWS_DEFAULT_REGION": "us-east-1",
                "AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
                "AWS_EC2_METADATA_DISABLED": "true"}

    def client(self):
        """A boto3 client for test set-up and inspection (bucket creation, tampering)."""
        import boto3

        return boto3.client("s3", endpoint_url=self.url, aws_access_key_id=FAKE_KEY_ID,
                            aws_secret_access_key=FAKE_SECRET, region_name="us-east-1")


class FaultProxy:
    """An HTTP proxy on 127.0.0.1 in front of ``upstream`` that records every request
    (method, path) and can misbehave: ``mode = "pass" | "500" | "stall"``. ``fail_first = N``
    answers 500 to the first N requests, then passes (a transient fault); ``mode = "403"`` answers
    AccessDenied (moto does not check signatures)."""

    def __init__(self, upstream: str, *, mode: str = "pass", stall_s: float = 30.0):
        self.upstream = upstream.split("://", 1)[1]
        self.mode, self.stall_s, self.fail_first = mode, stall_s, 0
        self.log: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        # SIGKILL process ``kill_pid`` at the ``kill_at``-th request (1-based): before it reaches the
        # server, or (``kill_after``) once the server has acted on it but before the client hears back
        self.kill_pid: int | None = None
        # cut the next ``cut_first`` object GETs (paths containing ``cut_match``) after half their body
        self.cut_first, self.cut_match = 0, "/sha256/"
        # called after a cut's half body is sent, before the connection drops (the client has not yet resumed)
        self.on_cut = None
        self.kill_at, self.kill_after = 0, False
        # go away at the ``gone_at``-th request (1-based): it gets no answer, and the proxy stops listening
        # (every later connect is refused), as a store that goes down mid-run
        self.gone_at = 0
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):  # quiet
                pass

            def _any(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                with proxy._lock:
                    proxy.log.append((self.command, self.path))
                    fail = proxy.mode == "500" or proxy.fail_first > 0
                    if proxy.fail_first > 0:
                        proxy.fail_first -= 1
                    kill = proxy.kill_pid is not None and len(proxy.log) == proxy.kill_at
                if kill and not proxy.kill_after:
                    proxy._kill()
                    return
                if proxy.gone_at and len(proxy.log) >= proxy.gone_at:
                    if len(proxy.log) == proxy.gone_at:
                        threading.Thread(target=proxy.stop, daemon=True).start()
                    self.close_connection = True
                    return
                if proxy.mode == "stall":
                    time.sleep(proxy.stall_s)
                    return
                if proxy.mode == "403":
                    msg = b"<Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>"
                    self.send_response(403)
                    self.send_header("Content-Length", str(len(msg)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(msg)
                    return
                if fail:
                    msg = b"<Error><Code>InternalError</Code><Message>planted</Message></Error>"
                    self.send_response(500)
                    self.send_header("Content-Length", str(len(msg)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(msg)
                    return
                conn = http.client.HTTPConnection(proxy.upstream, timeout=60)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("connection",)}
                conn.request(self.command, self.path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                if kill:
                    proxy._kill()
                    return
                with proxy._lock:
                    cut = (self.command == "GET" and proxy.cut_first > 0 and proxy.cut_match in self.path
                           and resp.status in (200, 206) and len(data) > 1)
                    if cut:
                        proxy.cut_first -= 1
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                # HEAD: the upstream's length of the object (no body came)
                self.send_header("Content-Length", resp.getheader("Content-Length", "0") if self.command == "HEAD"
                                 else str(len(data)))
                self.end_headers()
                if cut:  # the promised length, half the bytes, then the connection drops
                    self.wfile.write(data[: len(data) // 2])
                    self.wfile.flush()
                    if proxy.on_cut is not None:
                        proxy.on_cut()
                    self.close_connection = True
                    conn.close()
                    return
                if self.command != "HEAD":
                    self.wfile.write(data)
                conn.close()

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _any

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server.handle_error = lambda request, address: None  # a client killed mid-request: not news
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def _kill(self) -> None:
        import signal

        try:
            os.kill(self.kill_pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.kill_pid = None

    def start(self) -> FaultProxy:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def count(self, method: str, path_part: str = "") -> int:
        with self._lock:
            return sum(1 for m, p in self.log if m == method and path_part in p)
