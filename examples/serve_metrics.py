"""Serving with frt-dist: bind at start-up, serve the ledger on ``/metrics``.

    python examples/serve_metrics.py [--port 8000] [--model demo-decoder] [--project DIR | --demo]

At start-up the server calls ``frt_dist.load`` once: every phase band is resolved
from the lockfile, the chosen packages are verified and imported, each seam's impl
passes its bind-time smoke, and a refusal stops the server before it listens (the
exception names every reason). Then:

- ``POST /forward?rows=N``: runs the demo decoder block on ``N`` seeded rows in the
  phase band that admits ``N``, through the guarded entries (the host path serves a
  band whose decision is ``host`` and any contract miss, counted);
- ``GET /metrics``: the ledger in Prometheus text exposition (``frt_*`` names), or,
  when ``prometheus_client`` is installed and ``--registry`` is given, that library's
  exposition of a collector reading the same ledger (with whatever else is registered);
- ``GET /ledger``: the ledger as JSON; ``GET /healthz``: ``ok``.

The demo block stands for your model: bind each seam of your own binding to
``plan.entry(seam, phase, host=...)`` the same way.
"""

from __future__ import annotations

import argparse
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import frt_dist

PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"


class LedgerCollector:
    """A ``prometheus_client`` collector over ``plan.ledger()``: the same numbers as
    ``plan.ledger(format="prometheus")``, read at each scrape (no second counter)."""

    def __init__(self, plan):
        self.plan = plan

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        snap = self.plan.ledger()
        labels = ["model", "seam", "phase", "route", "state"]
        families = {
            key: CounterMetricFamily(name, text, labels=labels)
            for name, text, key in (
                ("frt_seam_calls", "Calls that entered the frt guard, per seam and phase band.", "calls"),
                ("frt_seam_fallbacks", "Contract misses that ran the caller's host path.", "fallbacks"),
                ("frt_seam_host_calls", "Calls served by the host path by decision.", "host-calls"),
                ("frt_seam_contract_refusals", "Contract misses that raised ContractViolation.", "contract-refusals"),
                ("frt_seam_bind_refusals", "plan.entry requests refused (RouteRefused).", "bind-refusals"),
            )
        }
        observed = GaugeMetricFamily("frt_seam_observed", "1 when the guard's counters saw every call.",
                                     labels=["model", "seam", "phase"])
        for seam, entry in snap["seams"].items():
            for phase, v in entry["phases"].items():
                values = [snap["model"], seam, phase, v["route"] or "", v["state"] or ""]
                for key, fam in families.items():
                    fam.add_metric(values, v[key])
                observed.add_metric([snap["model"], seam, phase], int(v["observed"]))
        yield from families.values()
        yield observed


def build_app(model: str = "demo-decoder", **load_kwargs):
    """(plan, {phase: bound block}): what a server holds after start-up."""
    from frt_dist.demo.decoder import build_host

    plan = frt_dist.load(model, **load_kwargs)
    blocks = {}
    for phase in plan.decisions:
        block = build_host(phase)
        for seam in block.seam_names:
            block.bind(seam, plan.entry(seam, phase, host=block.host_seams[seam]))
        blocks[phase] = block
    return plan, blocks


def make_server(plan, blocks, host: str = "127.0.0.1", port: int = 0, registry=None) -> ThreadingHTTPServer:
    import torch

    phases = plan.lockfile.manifest.phases

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # quiet: metrics are the record
            pass

        def _send(self, code: int, body: bytes, ctype: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _json(self, code: int, doc) -> None:
            self._send(code, json.dumps(doc, sort_keys=True).encode(), "application/json")

        def do_GET(self):  # noqa: N802 - http.server's name
            path = urlsplit(self.path).path
            if path == "/metrics":
                if registry is not None:
                    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

                    return self._send(200, generate_latest(registry), CONTENT_TYPE_LATEST)
                return self._send(200, plan.ledger(format="prometheus").encode(), PROMETHEUS_TEXT)
            if path == "/ledger":
                return self._json(200, plan.ledger())
            if path == "/healthz":
                return self._send(200, b"ok\n", "text/plain")
            return self._json(404, {"error": f"no such path {path}"})

        def do_POST(self):  # noqa: N802
            url = urlsplit(self.path)
            if url.path != "/forward":
                return self._json(404, {"error": f"no such path {url.path}"})
            try:
                rows = int(parse_qs(url.query).get("rows", ["1"])[0])
            except ValueError:
                return self._json(400, {"error": "rows must be an integer"})
            phase = next((p for p in blocks if phases[p].admits(rows)), None)
            if phase is None:
                bands = ", ".join(f"{p} {phases[p].rows[0]}..{phases[p].rows[1]}" for p in blocks)
                return self._json(400, {"error": f"rows {rows} is in no phase band ({bands})"})
            block = blocks[phase]
            with torch.inference_mode():
                out = block(block.make_inputs(rows))
            self._json(200, {"rows": rows, "phase": phase, "route": plan.decisions[phase].route,
                             "sum": float(out.double().sum())})

    return ThreadingHTTPServer((host, port), Handler)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="demo-decoder")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--registry", action="store_true", help="expose through prometheus_client (must be installed)")
    where = ap.add_mutually_exclusive_group()
    where.add_argument("--project", metavar="DIR", help="the project (default: found as `frt` finds it)")
    where.add_argument("--demo", action="store_true", help="the bundled demo project")
    args = ap.parse_args(argv)
    if args.demo:
        from frt_dist.project.discover import bundled_root

        args.project = bundled_root()
    try:
        # the demo's evidence is CPU evidence: supported_correct routes accepted, host where none qualifies
        plan, blocks = build_app(args.model, accept=("certified_fast", "supported_correct"), fallback="host",
                                 project=args.project)
    except frt_dist.FrtError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    registry = None
    if args.registry:
        from prometheus_client import CollectorRegistry

        registry = CollectorRegistry()
        registry.register(LedgerCollector(plan))
    server = make_server(plan, blocks, args.host, args.port, registry)
    for phase, d in plan.decisions.items():
        print(f"{phase}: {d.decision} {d.route or ''} {d.state or ''}".rstrip())
    print(f"serving on http://{args.host}:{server.server_address[1]} (/forward?rows=N, /metrics, /ledger)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
