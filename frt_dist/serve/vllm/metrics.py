"""The ledger in ``vllm serve``'s ``/metrics``, summed over the engine's live processes.

The model runs in the engine-core (or worker) processes; ``/metrics`` is served by the
API server, which runs no model. Each process that bound a plan writes its ledger,
atomically, to ``<ledger dir>/<pid>.json`` (at bind, then once a second while its counts
change), with the lock it runs; a collector in the API server reads every such file at
scrape time (skipping those whose process is gone and any that is not a ledger) and exposes
the ``frt_seam_*`` families summed over them, and ``frt_lock_info``. The ledger dir is
``FRT_LEDGER_DIR`` when set, else a temporary folder the first process makes and hands to
the processes vLLM starts (they inherit its environment); it is removed when that process
exits.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

from ... import settings
from ..prometheus import SEAM_COUNTERS

__all__ = ["ledger_dir", "start_writer", "install_collector", "read_ledgers", "lock_info", "FAMILIES"]

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


def lock_info(lock) -> dict:
    """The lock a process runs, as its ledger snapshot carries it (``frt_lock_info``'s labels):
    its digest, and the Hub release its receipts come from (``hf://ORG/NAME@vN`` and the locked
    commit; empty strings when the lock consumes none)."""
    rel = lock.release or {}
    return {"lock-digest": lock.lock_digest or "",
            "release": f"hf://{rel['repo']}@v{rel['version']}" if rel else "",
            "release-commit": (rel.get("commit") or "") if rel else ""}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, as another user
    return True


def read_ledgers(d: Path | None = None, *, live: bool = True) -> list[dict]:
    """The ledger snapshots in ``d`` that are JSON objects; with ``live``, only those whose
    process (the file's name, ``<pid>.json``) is still running."""
    d = Path(d) if d is not None else ledger_dir()
    out = []
    for p in sorted(d.glob("*.json")):
        if live and not (p.stem.isdigit() and int(p.stem) > 0 and _alive(int(p.stem))):
            continue  # not an engine process's ledger, or its process exited
        try:
            snap = json.loads(p.read_text("utf-8"))
        except (OSError, ValueError):
            continue  # being replaced: the next scrape reads it
        if isinstance(snap, dict):
            out.append(snap)
    return out


def _label(v) -> str:
    if v is None:
        return ""
    if not isinstance(v, str):
        raise ValueError(f"label {v!r} is not a string")
    return v


def _count(v: dict, key: str) -> int:
    n = v.get(key, 0)
    if type(n) is not int or n < 0:
        raise ValueError(f"{key}: {n!r} is not a count")
    return n


def _tally(snap: dict):
    """One ledger snapshot as (model, counter rows, observed, lock info); ValueError (or the
    KeyError, TypeError or AttributeError of a missing or mistyped field) when it is not one."""
    model = _label(snap["model"])
    if not model:
        raise ValueError("no model")
    rows, observed = {}, {}
    for seam, s in snap["seams"].items():
        for phase, v in s["phases"].items():
            key = (model, _label(seam), _label(phase), _label(v.get("route")), _label(v.get("state")))
            rows[key] = {k: _count(v, k) for _, _, _, k in FAMILIES}
            observed[key[:3]] = int(bool(v.get("observed", True)))
    lock = (model, _label(snap.get("lock-digest")), _label(snap.get("release")), _label(snap.get("release-commit")))
    return model, rows, observed, lock


_said_bad: set = set()


class LedgerCollector:
    """A prometheus_client collector: the ``frt_seam_*`` families summed over the ledger files of
    the live engine processes, and ``frt_lock_info``."""

    def __init__(self, d: Path):
        self.dir = d

    def describe(self):
        return []  # no description at registration: the families exist once an engine bound a plan

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily  # noqa: PLC0415

        sums: dict = {}
        observed: dict = {}
        processes: dict = {}
        locks: set = set()
        for snap in read_ledgers(self.dir):
            try:
                model, rows, seen, lock = _tally(snap)
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                # not a ledger this frt writes: skipped whole (never half-counted), said once
                if repr(exc) not in _said_bad:
                    _said_bad.add(repr(exc))
                    logging.getLogger("vllm.frt").warning("frt: a file in %s is not an engine's ledger; skipped "
                                                          "(%s: %s)", self.dir, type(exc).__name__, exc)
                continue
            for key, row in rows.items():
                total = sums.setdefault(key, dict.fromkeys(row, 0))
                for k, n in row.items():
                    total[k] += n
            for key, v in seen.items():
                observed[key] = observed.get(key, 1) and v
            processes[model] = processes.get(model, 0) + 1
            locks.add(lock)
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
        for model, n in sorted(processes.items()):
            g.add_metric([model], n)
        yield g
        g = GaugeMetricFamily("frt_lock_info", "The lock the engine processes run (value 1): its digest, and the Hub "
                              "release its receipts come from (empty when none).",
                              labels=["model", "lock_digest", "release", "commit"])
        for lock in sorted(locks):
            g.add_metric(list(lock), 1)
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
