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

Which registry answers ``/metrics`` is vLLM's choice, per API server process
(``vllm/entrypoints/serve/instrumentator/metrics.py`` ``attach_router``). Without
``PROMETHEUS_MULTIPROC_DIR`` it is prometheus_client's default ``REGISTRY``, where
``install_collector`` puts the collector. With it (set by the operator, or by ``vllm serve``
itself for ``--api-server-count`` > 1, ``vllm/entrypoints/cli/serve.py``), ``GET /metrics`` is
prometheus_fastapi_instrumentator's handler, which builds a new registry holding only a
``prometheus_client.multiprocess.MultiProcessCollector`` at every scrape, and vLLM's own
``get_prometheus_registry`` (``vllm/v1/metrics/prometheus.py``) builds the same for its
``/metrics`` mount: a collector of the default registry is not read. Neither offers a hook, so
in the processes that serve HTTP the plugin puts a subclass of ``MultiProcessCollector`` that
also yields the ledger's families where both look the class up (once per process). Each API
server reads the ledger files itself: a scrape, answered by one of them, counts every engine
process once.
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
import weakref
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


class _AtExit:
    """What this module's exit work hangs on (``weakref.finalize``: run at exit, newest first)."""


AT_EXIT = _AtExit()


def ledger_dir() -> Path:
    global _made_here
    d = settings.value("FRT_LEDGER_DIR")
    if not d:
        d = tempfile.mkdtemp(prefix="frt-ledger-")
        os.environ["FRT_LEDGER_DIR"] = d  # inherited by the engine processes vLLM starts
        _made_here = d
        # a finalizer, not an atexit handler: it runs after the refusal printer (refusal.arm), made after it
        weakref.finalize(AT_EXIT, shutil.rmtree, d, True)
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
    """Put the collector where ``/metrics`` reads: prometheus_client's default registry (what
    an API server serves without ``PROMETHEUS_MULTIPROC_DIR``) and, in a process that serves
    vLLM's HTTP API, every ``MultiProcessCollector`` (what it serves with it). Once per process."""
    global _installed
    if _installed:
        return
    from prometheus_client import REGISTRY  # noqa: PLC0415

    REGISTRY.register(LedgerCollector(ledger_dir()))
    _installed = True
    if _serves_http():
        _extend_multiprocess_collector()


def _serves_http() -> bool:
    """Whether this process may answer ``/metrics``: the first process (``vllm serve`` or
    ``python -m vllm.entrypoints.openai.api_server`` with one API server; a program running an
    engine in-process), or one of the API servers ``vllm serve --api-server-count N`` starts
    (``vllm/v1/utils.py`` ``APIServerProcessManager`` names them ``ApiServer_<i>``). vLLM's
    engine-core and worker processes are neither."""
    import multiprocessing  # noqa: PLC0415

    return multiprocessing.parent_process() is None or multiprocessing.current_process().name.startswith("ApiServer")


_missing_said = False


def _extend_multiprocess_collector() -> bool:
    """Make prometheus_client's ``MultiProcessCollector`` in this process also yield the frt
    families. Under ``PROMETHEUS_MULTIPROC_DIR`` both registries that serve vLLM's ``/metrics``
    are made of one: ``GET /metrics`` is prometheus_fastapi_instrumentator's ``expose()``
    handler, which builds a ``CollectorRegistry`` and ``multiprocess.MultiProcessCollector`` at
    every scrape (``instrumentation.py``), and ``get_prometheus_registry`` builds the same for
    vLLM's ``/metrics`` mount; both look the class up in ``prometheus_client.multiprocess`` when
    they call it, so a subclass put there reaches both and nothing else changes. Idempotent;
    where the class is missing, says so once and changes nothing."""
    global _missing_said
    try:
        from prometheus_client import multiprocess  # noqa: PLC0415
    except ImportError:
        multiprocess = None
    base = getattr(multiprocess, "MultiProcessCollector", None)
    if base is None:
        if not _missing_said:
            _missing_said = True
            logging.getLogger("vllm.frt").warning(
                "frt: prometheus_client has no multiprocess.MultiProcessCollector: with PROMETHEUS_MULTIPROC_DIR set, "
                "/metrics will not show the frt_seam_* families")
        return False
    if getattr(base, "_frt_ledger", False):
        return True
    ledger = LedgerCollector(ledger_dir())

    class MultiProcessCollector(base):
        """prometheus_client's collector of ``PROMETHEUS_MULTIPROC_DIR``, and the frt ledger's
        families summed over the live engine processes (frt_dist.serve.vllm.metrics)."""

        _frt_ledger = True

        def collect(self):
            yield from super().collect()
            yield from ledger.collect()

    MultiProcessCollector.__module__ = base.__module__
    multiprocess.MultiProcessCollector = MultiProcessCollector
    logging.getLogger("vllm.frt").debug("frt: prometheus_client's MultiProcessCollector serves the frt families in "
                                        "this process")
    return True
