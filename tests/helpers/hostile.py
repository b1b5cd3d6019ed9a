"""Hostile S3 endpoints on 127.0.0.1 for the store tests: small real HTTP servers (threads,
bounded) that do what a store must not be able to lead a node into.

``Hostile(mode)`` answers every request itself, and records each request's method, path and
headers (``requests``):

* ``redirect``: 307 to the same path on ``target`` (another ``Hostile``: another port, and
  ``localhost`` rather than ``127.0.0.1``), carrying the headers S3 puts on a region redirect;
* ``trickle``: 200 with the length of ``body`` promised, then one byte every ``every_s``;
* ``loop``: a ListObjectsV2 page that is truncated and names the same continuation token forever;
* ``badxml``: 200 to every request, with a body that is not XML;
* ``serve``: 200 with ``body`` (the target of a redirect).

Every handler stops when the server stops (``stop()``), so no test is left waiting on a thread.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

__all__ = ["Hostile"]


class Hostile:
    def __init__(self, mode: str, *, body: bytes = b"x" * 64, every_s: float = 0.2, target: Hostile | None = None,
                 host: str = "127.0.0.1"):
        self.mode, self.body, self.every_s, self.target, self.host = mode, body, every_s, target, host
        self.requests: list[tuple[str, str, dict]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        me = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = 30  # a client that goes quiet does not hold a thread for ever

            def log_message(self, *a):
                pass

            def _any(self):
                n = int(self.headers.get("Content-Length") or 0)
                if n:
                    self.rfile.read(n)
                with me._lock:
                    me.requests.append((self.command, self.path, {k.lower(): v for k, v in self.headers.items()}))
                getattr(me, "_" + me.mode)(self)

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _any

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server.handle_error = lambda request, address: None  # a client that hung up: not news
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    # -- modes -------------------------------------------------------------------
    def _send(self, h, status: int, body: bytes, headers: dict | None = None) -> None:
        h.send_response(status)
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        if h.command != "HEAD":
            h.wfile.write(body)

    def _serve(self, h) -> None:
        self._send(h, 200, self.body, {"ETag": '"e"', "Content-Type": "application/octet-stream"})

    def _redirect(self, h) -> None:
        where = f"{self.target.url}{h.path}"
        msg = (b"<Error><Code>TemporaryRedirect</Code><Message>Please re-send this request to the specified "
               b"temporary endpoint.</Message><Endpoint>" + self.target.url.split("://")[1].encode()
               + b"</Endpoint></Error>")
        self._send(h, 307, msg, {"Location": where, "Content-Type": "application/xml"})

    def _trickle(self, h) -> None:
        h.send_response(200)
        h.send_header("Content-Length", str(len(self.body)))
        h.send_header("ETag", '"e"')
        h.end_headers()
        if h.command == "HEAD":
            return
        try:
            for i in range(len(self.body)):
                if self._stop.wait(self.every_s):
                    return
                h.wfile.write(self.body[i:i + 1])
                h.wfile.flush()
        except OSError:
            return

    def _loop(self, h) -> None:
        if "list-type=2" not in h.path and h.command == "GET" and "?" not in h.path:
            self._send(h, 404, b"<Error><Code>NoSuchKey</Code></Error>")
            return
        page = (b'<?xml version="1.0" encoding="UTF-8"?>'
                b'<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>b</Name>'
                b"<Prefix>p/receipts/sha256/</Prefix><KeyCount>1</KeyCount><MaxKeys>1000</MaxKeys>"
                b"<IsTruncated>true</IsTruncated><ContinuationToken>again</ContinuationToken>"
                b"<NextContinuationToken>again</NextContinuationToken>"
                b"<Contents><Key>p/receipts/sha256/" + b"a" * 64 + b".json</Key><LastModified>"
                b"2026-01-01T00:00:00.000Z</LastModified><ETag>&quot;e&quot;</ETag><Size>2</Size>"
                b"<StorageClass>STANDARD</StorageClass></Contents></ListBucketResult>")
        self._send(h, 200, page, {"Content-Type": "application/xml"})

    def _badxml(self, h) -> None:
        self._send(h, 200, b"<ListBucketResult><Contents><Key>oops</Contents", {"Content-Type": "application/xml"})

    # -- life --------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.server.server_address[1]}"

    def start(self) -> Hostile:
        self.thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def headers_seen(self) -> list[dict]:
        with self._lock:
            return [h for _, _, h in self.requests]
