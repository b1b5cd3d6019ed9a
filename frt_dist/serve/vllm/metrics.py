"""The ledger in ``vllm serve``'s ``/metrics``, summed over the engine's live processes.

The model runs in the engine-core (or worker) processes; ``/metrics`` is served by the
API server, which runs no model. Each process that bound a plan writes its ledger,
atomically, to ``<ledger dir>/<pid>.json`` (at bind, then once a second while its counts
change), with the lock it runs and its identity (pid, start time); a collector in the API
server reads every such file at scrape time and exposes the ``frt_seam_*`` families summed
over them, and ``frt_lock_info``. The ledger dir is ``FRT_LEDGER_DIR`` when set, else a
temporary folder the first process makes and hands to the processes vLLM starts (they
inherit its environment); it is removed when that process exits.

The folder is an input ``/metrics`` must survive. A folder another user can write to is
refused (``folder_problem``; a sticky one is taken, and only this user's files in it are
read). Files are made without following a link (``write_new``: a new ``O_EXCL|O_NOFOLLOW``
file renamed into place) and read without following one or blocking on a FIFO
(``read_file``: ``O_NONBLOCK``, ``fstat``, at most ``MAX_BYTES``); each is checked whole
against the ledger's schema (``_parse``: nesting, types, counts 0..2**63-1) before it is
added, and one that fails is skipped with one warning per file. A file whose process is
gone, or whose pid was reused (the recorded start time differs), is not counted, and the
next engine that writes there removes it (``_sweep``).

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
import errno
import json
import logging
import os
import re
import shutil
import stat
import tempfile
import threading
import time
import weakref
from pathlib import Path

from ... import settings
from ...base.safedir import SafeDir
from ..prometheus import SEAM_COUNTERS

__all__ = ["ledger_dir", "open_ledger_dir", "start_writer", "install_collector", "read_ledgers", "scan", "lock_info",
           "FAMILIES"]

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


# -- the folder: who may write in it, how files are made and read there -----------------------------------------------

MAX_BYTES = 1 << 20  # a ledger is a few KiB; a larger file is not read
MAX_DEPTH = 16  # a ledger nests 5 deep; deeper JSON is not parsed (10**5-deep JSON would exhaust the stack)
MAX_COUNT = (1 << 63) - 1
_LEDGER_NAME = re.compile(r"(\d{1,10})\.json")
_TEMP_NAME = re.compile(r"\.(\d{1,10})\.json\.[0-9a-f]{32}")  # SafeDir.new_file's names for a ledger being written


def folder_problem(folder: SafeDir) -> str | None:
    """Why ``folder`` (the ledger dir) is not safe to write ledgers in and sum them from, or None.
    Another user who can write there (its owner, when that is neither this user nor root; anyone,
    through a group or other write bit, unless the folder is sticky as /tmp is) could plant, replace
    or remove the files ``/metrics`` sums. In a sticky folder each user's files are their own: the
    reader sums only this user's."""
    st = os.fstat(folder.fd)
    me = os.geteuid()
    if st.st_uid not in (me, 0):
        return f"it is owned by another user (uid {st.st_uid}; this process runs as uid {me})"
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        who = "other users" if st.st_mode & 0o002 else "its group"
        return f"{who} can write to it (mode {stat.S_IMODE(st.st_mode):04o}, not sticky)"
    return None


def open_ledger_dir() -> SafeDir:
    """The ledger dir, opened (links inside it are never followed), or a ``UsageError`` naming it
    and the fix when another user could write the files in it (``folder_problem``)."""
    from ...errors import UsageError  # noqa: PLC0415

    d = ledger_dir()
    try:
        folder = SafeDir.root(d)
    except OSError as exc:
        raise UsageError(f"FRT_LEDGER_DIR {d}: cannot open it ({exc.strerror or exc})",
                         hints=["point FRT_LEDGER_DIR at a folder of this user's, or unset it (the plugin then makes "
                                "a private one)"]) from None
    why = folder_problem(folder)
    if why:
        folder.close()
        raise UsageError(f"FRT_LEDGER_DIR {d}: {why}; another user could plant or replace the ledger files "
                         "/metrics sums",
                         hints=[f"make it private (chmod go-w {d}, owned by this user), or sticky (chmod +t {d}, as "
                                "/tmp is), or unset FRT_LEDGER_DIR (the plugin then makes a private one)"])
    return folder


def write_new(folder: SafeDir, name: str, data: bytes) -> None:
    """Make ``name`` in ``folder`` hold ``data``, atomically: a new file (``O_EXCL|O_NOFOLLOW``, a
    random name: a link planted under any name is never written through) renamed over it (a link
    there is replaced, not followed)."""
    tmp, w = folder.new_file(f".{name}.")
    try:
        with w:
            w.write(data)
        folder.replace(tmp, folder, name)
    except BaseException:
        folder.unlink(tmp)
        raise


def read_file(folder: SafeDir, name: str, limit: int = MAX_BYTES) -> tuple[bytes | None, str | None]:
    """(the bytes of ``name``, None), or (None, why not): never through a link, never blocking on a
    FIFO or a device (``O_NONBLOCK``, then ``fstat``), only a regular file of this user's, at most
    ``limit`` bytes (a larger one is not read). What is checked is what was opened, so a file
    swapped for a FIFO or a link between a listing and the open changes nothing."""
    from ...base.regular import file_kind  # noqa: PLC0415

    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=folder.fd)
    except FileNotFoundError:
        return None, None  # replaced or removed meanwhile: nothing to say
    except OSError as exc:
        return None, "a symbolic link" if exc.errno == errno.ELOOP else f"cannot be opened ({exc.strerror or exc})"
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None, f"not a regular file: {file_kind(st.st_mode)}"
        if st.st_uid != os.geteuid():
            return None, f"owned by another user (uid {st.st_uid})"
        if st.st_size > limit:
            return None, f"{st.st_size} bytes, more than the {limit} a ledger may hold"
        os.set_blocking(fd, True)
        chunks, n = [], 0
        while n <= limit:
            b = os.read(fd, limit + 1 - n)
            if not b:
                break
            chunks.append(b)
            n += len(b)
        if n > limit:
            return None, f"more than the {limit} bytes a ledger may hold"
        return b"".join(chunks), None
    except OSError as exc:
        return None, f"cannot be read ({exc.strerror or exc})"
    finally:
        os.close(fd)


def _write(folder: SafeDir, snap: dict) -> None:
    write_new(folder, f"{os.getpid()}.json", json.dumps(snap, sort_keys=True).encode())


def process_start(pid: int) -> str | None:
    """The start time of process ``pid`` (``/proc/<pid>/stat`` field 22, clock ticks since boot):
    with the pid, the process's identity (a pid is reused; a pid and its start time are not). None
    where there is no /proc or the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read(4096)
        return text[text.rindex(b")") + 2:].split()[19].decode()
    except (OSError, ValueError, IndexError):
        return None


def _sweep(folder: SafeDir) -> None:
    """Remove the ledgers (and half-written ledgers) of engine processes that have exited: a pid that
    is gone, or reused by a process that started at another time than the ledger records. Only this
    user's regular files; a file that cannot be read is left (the reader skips it)."""
    try:
        names = folder.listdir()
    except OSError:
        return
    for name in names:
        m = _LEDGER_NAME.fullmatch(name) or _TEMP_NAME.fullmatch(name)
        if not m or int(m.group(1)) == os.getpid():
            continue
        st = folder.lstat(name)
        if st is None or not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            continue
        pid = int(m.group(1))
        stale = not _alive(pid)
        if not stale and name.endswith(".json"):
            snap, _why = _parse(*read_file(folder, name))
            stale = snap is not None and not _same_process(pid, snap)
        if stale:
            try:
                folder.unlink(name)
            except OSError:
                pass


def start_writer(engine, interval: float = 1.0) -> None:
    """Write this process's ledger now and, from a daemon thread, whenever it changed; the ledgers
    of exited engine processes in the folder are removed first (``_sweep``). Each snapshot records
    the process's identity (``pid``, ``process-start``) so a reader never counts it for a later
    process that got the same pid."""
    folder = open_ledger_dir()
    _sweep(folder)
    ident = {"pid": os.getpid(), "process-start": process_start(os.getpid())}
    last = [None]
    said = [False]

    def once():
        try:
            snap = {**engine.ledger(), **ident}
            text = json.dumps(snap, sort_keys=True)
            if text != last[0]:
                _write(folder, snap)
                last[0] = text
        except FileNotFoundError:
            pass  # the dir went away (the API server exited): nothing left to report to
        except OSError as exc:
            if not said[0]:
                said[0] = True
                logging.getLogger("vllm.frt").warning("frt: cannot write this process's ledger in %s (%s); /metrics "
                                                      "will not count it", folder.path, exc)

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
    except (OverflowError, OSError):
        return False
    return True


def _same_process(pid: int, snap: dict) -> bool:
    """Whether the live process ``pid`` is the one that wrote ``snap`` (its recorded start time;
    a snapshot that records none, or a system without /proc, cannot tell: taken as the same)."""
    recorded = snap.get("process-start")
    if recorded is None:
        return True
    now = process_start(pid)
    return now is None or now == recorded


def _depth(data: bytes) -> int:
    """How deep the arrays and objects of the JSON text ``data`` nest, counted without parsing (each
    string skipped whole, by a regular expression that never backtracks: linear in ``data``); stops
    counting past ``MAX_DEPTH``, and at a string that does not end (not JSON: the parser says so)."""
    depth = top = pos = 0
    while True:
        m = _JSON_SPECIAL.search(data, pos)
        if m is None:
            return top
        c = m.group()
        if c == b'"':
            end = _JSON_STRING_REST.match(data, m.end())
            if end is None:
                return top
            pos = end.end()
            continue
        pos = m.end()
        if c in (b"[", b"{"):
            depth += 1
            if depth > top:
                top = depth
                if top > MAX_DEPTH:
                    return top
        else:
            depth -= 1


_JSON_SPECIAL = re.compile(rb'[\[\]{}"]')
_JSON_STRING_REST = re.compile(rb'(?:[^"\\]++|\\.)*+"', re.S)  # possessive: no backtracking


def _parse(data: bytes | None, why: str | None) -> tuple[dict | None, str | None]:
    """(the snapshot, None) when ``data`` is a ledger (``_tally``'s schema), else (None, why not)."""
    if data is None:
        return None, why
    if _depth(data) > MAX_DEPTH:
        return None, f"JSON nested more than {MAX_DEPTH} deep"
    try:
        snap = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError) as exc:
        return None, f"not JSON ({str(exc)[:80]})"
    try:
        _tally(snap)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        return None, f"not a ledger ({type(exc).__name__}: {str(exc)[:120]})"
    return snap, None


_rejected: dict = {}  # (folder, name, inode, mtime, size, mode) -> why a file was not a ledger


def scan(folder: SafeDir) -> tuple[list[dict], list[tuple[str, str]]]:
    """The ledgers in ``folder`` of live engine processes, each validated whole: (snapshots,
    [(file name, why it was skipped)]). A ``<pid>.json`` whose process is gone, or whose pid now
    belongs to another process (``process-start``), is passed over silently (the next engine that
    writes there removes it); one that is not a ledger (``read_file``, ``_parse``) is skipped and
    named; other names are not ledgers and not looked at."""
    out, skipped = [], []
    for name in folder.listdir():
        m = _LEDGER_NAME.fullmatch(name)
        if not m or int(m.group(1)) <= 0 or not _alive(int(m.group(1))):
            continue
        pid = int(m.group(1))
        st = folder.lstat(name)
        seen = (folder.path, name, st.st_ino, st.st_mtime_ns, st.st_size, st.st_mode) if st is not None else None
        why = _rejected.get(seen)
        if why is None:
            snap, why = _parse(*read_file(folder, name))
        else:
            snap = None  # judged before, unchanged since: not read again at every scrape
        if snap is None:
            if why:
                skipped.append((name, why))
                if seen is not None:
                    if len(_rejected) > 4096:
                        _rejected.clear()
                    _rejected[seen] = why
            continue
        if snap.get("pid", pid) != pid:
            skipped.append((name, f"it records pid {snap.get('pid')!r}, not {pid}"))
            continue
        if not _same_process(pid, snap):
            continue  # a process that exited; its pid was reused
        out.append(snap)
    return out, skipped


def read_ledgers(d: Path | None = None) -> list[dict]:
    """The valid ledger snapshots of live engine processes in ``d`` (``scan``)."""
    with SafeDir.root(d if d is not None else ledger_dir()) as folder:
        return scan(folder)[0]


def _label(v) -> str:
    if v is None:
        return ""
    if not isinstance(v, str):
        raise ValueError(f"label {v!r} is not a string")
    return v


def _count(v: dict, key: str) -> int:
    n = v.get(key, 0)
    if type(n) is not int or not 0 <= n <= MAX_COUNT:
        raise ValueError(f"{key}: {n!r} is not a count (an integer 0..2**63-1)")
    return n


def _tally(snap: dict):
    """One ledger snapshot as (model, counter rows, observed, lock info); ValueError (or the
    KeyError, TypeError or AttributeError of a missing or mistyped field) when it is not one."""
    if not isinstance(snap, dict):
        raise TypeError(f"a ledger is a JSON object, not {type(snap).__name__}")
    model = _label(snap["model"])
    if not model:
        raise ValueError("no model")
    if not isinstance(snap["seams"], dict):
        raise TypeError("seams: not an object")
    for key in ("pid",):
        if key in snap and (type(snap[key]) is not int or snap[key] <= 0):
            raise ValueError(f"{key}: {snap[key]!r} is not a pid")
    _label(snap.get("process-start"))
    rows, observed = {}, {}
    for seam, s in snap["seams"].items():
        if not isinstance(s["phases"], dict):
            raise TypeError(f"seams.{seam}.phases: not an object")
        for phase, v in s["phases"].items():
            if not isinstance(v, dict):
                raise TypeError(f"seams.{seam}.phases.{phase}: not an object")
            key = (model, _label(seam), _label(phase), _label(v.get("route")), _label(v.get("state")))
            rows[key] = {k: _count(v, k) for _, _, _, k in FAMILIES}
            seen = v.get("observed", True)
            if type(seen) is not bool:
                raise ValueError(f"seams.{seam}.phases.{phase}.observed: {seen!r} is not true or false")
            observed[key[:3]] = int(seen)
    lock = (model, _label(snap.get("lock-digest")), _label(snap.get("release")), _label(snap.get("release-commit")))
    return model, rows, observed, lock


_said: set = set()


def _say_once(log, key, msg, *args) -> None:
    if key not in _said:
        _said.add(key)
        log.warning(msg, *args)


class LedgerCollector:
    """A prometheus_client collector: the ``frt_seam_*`` families summed over the ledger files of
    the live engine processes, and ``frt_lock_info``."""

    def __init__(self, d: Path):
        self.dir = d

    def describe(self):
        return []  # no description at registration: the families exist once an engine bound a plan

    def _snapshots(self) -> list[dict]:
        """The valid ledgers of the live engine processes; each file skipped is said once (per file,
        not per scrape). Never raises: vLLM's own series are served whatever the folder holds."""
        log = logging.getLogger("vllm.frt")
        try:
            with SafeDir.root(self.dir) as folder:
                why = folder_problem(folder)
                if why:
                    _say_once(log, (str(self.dir), ""), "frt: the ledger dir %s is not summed: %s", self.dir, why)
                    return []
                snaps, skipped = scan(folder)
        except Exception as exc:  # the folder is gone or unreadable (or a fault here): no frt series this scrape
            _say_once(log, (str(self.dir), type(exc).__name__), "frt: cannot read the ledger dir %s (%s: %s)",
                      self.dir, type(exc).__name__, exc)
            return []
        for name, why in skipped:
            _say_once(log, (str(self.dir), name), "frt: %s in %s is not an engine's ledger; skipped: %s", name,
                      self.dir, why)
        return snaps

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily  # noqa: PLC0415

        sums: dict = {}
        observed: dict = {}
        processes: dict = {}
        locks: set = set()
        for snap in self._snapshots():
            model, rows, seen, lock = _tally(snap)  # scan validated each one whole: never half-counted
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
