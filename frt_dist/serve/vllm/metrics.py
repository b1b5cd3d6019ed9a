"""The ledger in ``vllm serve``'s ``/metrics``, summed over the engine's processes.

The model runs in the engine-core (or worker) processes; ``/metrics`` is served by the
API server, which runs no model. Each process that bound a plan writes its ledger,
atomically, to ``<ledger dir>/<pid>.json`` (at bind, then once a second while its counts
change); the API server's Prometheus registry holds a collector that reads every such
file at scrape time and exposes the ``frt_seam_*`` families summed over them. The ledger
dir is ``FRT_LEDGER_DIR`` when set, else a temporary folder the first process makes and
hands to the processes vLLM starts (they inherit its environment); it is removed when
that process exits.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

from ... import settings
from ..prometheus import SEAM_COUNTERS

__all__ = ["ledger_dir", "start_writer", "install_collector", "read_ledgers", "FAMILIES"]

# The families Plan.ledger(format="prometheus") exports, their help in vLLM's words where the host is vLLM's own
# op, and one family more: the calls made during vLLM's dummy runs.
_VLLM_HELP = {
    "fallbacks": "Contract misses that ran vLLM's own op.",
    "host-calls": "Calls served by vLLM's own op by decision (host band, detached).",
    "bind-refusals": "Entry requests refused (RouteRefused).",
    "captures": "Calls made while a CUDA graph was captured.",
}
FAMILIES = tuple((name, kind, _VLLM_HELP.get(key, text), key) for name, kind, text, key in SEAM_COUNTERS) + (
    ("frt_seam_warmup_calls_total", "counter", "Calls during vLLM's dummy runs (profiling, warm-up, capture).",
     "warmup-calls"),
)

_made_here = None


def ledger_dir() -> Path:
    global _made_here
    d = settings.value("FRT_LEDGER_DIR")
    if not d:
        d = tempfile.mkdtemp(prefix="frt-ledger-")
        os.environ["FRT_LEDGER_DIR"] = d  # inherited by the engine processes vLLM starts
        _made_here = d
        atexit.register(shutil.rmtree, d, True)
    return Path(d)


def _write(path: Path, snap: dict) -> None:
    tmp = path.with_name(f".{path.name}.{threading.get_ident()}.tmp")
    tmp.write_text(json.dumps(snap, sort_keys=True), "utf-8")
    os.replace(tmp, path)


def start_writer(engine, interval: float = 1.0) -> None:
    """Write this process's ledger now and, from a daemon thread, whenever it changed."""
    path = ledger_dir() / f"{os.getpid()}.json"
    last = [None]

    def once():
        try:
            snap = engine.ledger()
            text = json.dumps(snap, sort_keys=True)
            if text != last[0]:
                _write(path, snap)
                last[0] = text
        except OSError:
            pass  # the dir went away (the API server exited): nothing left to report to

    once()

    def loop():
        while True:
            time.sleep(interval)
            once()

    threading.Thread(target=loop, name="frt-ledger", daemon=True).start()
    atexit.register(once)


def read_ledgers(d: Path | None = None) -> list[dict]:
    d = Path(d) if d is not None else ledger_dir()
    out = []
    for p in sorted(d.glob("*.json")):
        try:
            out.append(json.loads(p.read_text("utf-8")))
        except (OSError, ValueError):
            continue  # being replaced: the next scrape reads it
    return out


class LedgerCollector:
    """A prometheus_client collector: the ``frt_seam_*`` families summed over every ledger file."""

    def __init__(self, d: Path):
        self.dir = d

    def describe(self):
        return []  # no description at registration: the families exist once an engine bound a plan

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily  # noqa: PLC0415

        snaps = read_ledgers(self.dir)
        sums: dict = {}
        observed: dict = {}
        for snap in snaps:
            for seam, s in snap["seams"].items():
                for phase, v in s["phases"].items():
                    key = (snap["model"], seam, phase, v.get("route") or "", v.get("state") or "")
                    row = sums.setdefault(key, {})
                    for _, _, _, k in FAMILIES:
                        row[k] = row.get(k, 0) + int(v.get(k, 0))
                    okey = (snap["model"], seam, phase)
                    observed[okey] = observed.get(okey, 1) and int(bool(v.get("observed", True)))
        labels = ["model", "seam", "phase", "route", "state"]
        for name, _kind, text, k in FAMILIES:
            fam = CounterMetricFamily(name.removesuffix("_total"), text, labels=labels)
            for key, row in sorted(sums.items()):
                fam.add_metric(list(key), row[k])
            yield fam
        g = GaugeMetricFamily("frt_seam_observed", "1 when the counters saw every call; 0 when the seam ran inside a "
                              "compiled graph, whose calls are not counted.", labels=["model", "seam", "phase"])
        for key, v in sorted(observed.items()):
            g.add_metric(list(key), v)
        yield g
        g = GaugeMetricFamily("frt_engine_processes", "Engine processes whose frt ledger is summed here.",
                              labels=["model"])
        for model in sorted({s["model"] for s in snaps}):
            g.add_metric([model], sum(1 for s in snaps if s["model"] == model))
        yield g


_installed = False


def install_collector() -> None:
    """Register the collector in prometheus_client's default registry (what ``vllm serve``'s
    ``/metrics`` exposes with one API server). Once per process."""
    global _installed
    if _installed:
        return
    from prometheus_client import REGISTRY  # noqa: PLC0415

    REGISTRY.register(LedgerCollector(ledger_dir()))
    _installed = True
