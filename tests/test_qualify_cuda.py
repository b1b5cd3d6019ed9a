"""Qualification's device timing, checked on CPU: the clock chosen by device, the CUDA-event clock's
order of operations (with a recording stand-in for ``torch.cuda``), the receipt fields a CUDA run
fills, and receipt validation of both timing methods. The real CUDA run is ``scripts/gpu-check``."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest

from frt_dist.documents.lockfile import Lockfile
from frt_dist.documents.receipt import Receipt
from frt_dist.errors import ReceiptInvalid, UsageError
from frt_dist.qualify import timing as q
from frt_dist.qualify.run import qualify
from frt_dist.system import detect as det
from helpers.factories import CPU, TinyProject, receipt_doc

from test_detect import FakeNVML
from test_qualify import _lock


@pytest.mark.parametrize("backend, device, clock", [("cpu", "cpu", "perf-counter"), ("cuda", "cuda", "cuda-events"),
                                                    ("rocm", "cuda", "cuda-events")])
def test_clock_is_chosen_by_device(backend, device, clock):
    assert q.clock_for(backend, device) == clock


@pytest.mark.parametrize("backend, device", [("cuda", "cpu"), ("cpu", "cuda"), ("cuda", "meta")])
def test_cell_and_input_device_must_agree(backend, device):
    with pytest.raises(UsageError) as exc:
        q.clock_for(backend, device)
    assert str(exc.value) == (f"the cell's hardware is {backend}, but the host-entry builds inputs on {device!r}: "
                              "qualification must run where the cell says")


def test_timing_warms_up_then_alternates():
    seen = []

    def measure(block, xs):
        seen.append(block)
        return {"H": 2.0, "R": 1.0}[block]

    t = q.paired_timing("H", "R", {1: "x1", 16: "x16"}, rounds=4, warmup=2, measure=measure)
    assert seen == ["H", "R", "H", "R"] + ["H", "R", "R", "H", "H", "R", "R", "H"]
    assert t["speedup-median"] == 2.0 and t["host-median-ms"] == 2000.0 and t["rows"] == [1, 16]


class RecordingCuda:
    """``torch.cuda`` as the event clock uses it, logging each call in order."""

    def __init__(self, log, ms=3.0):
        self.log, self.ms = log, ms
        cuda = self

        class Event:
            made = 0

            def __init__(self, enable_timing=False):
                assert enable_timing
                self.name = ("start", "end")[Event.made % 2]  # the clock makes them in this order
                Event.made += 1

            def record(self):
                log.append(f"record-{self.name}")

            def elapsed_time(self, other):
                assert log[-1] == "synchronize", "elapsed time read before synchronising"
                return cuda.ms

        self.Event = Event

    def synchronize(self):
        self.log.append("synchronize")


def test_cuda_event_clock_records_around_the_calls_and_syncs_before_reading():
    log = []
    torch = SimpleNamespace(cuda=RecordingCuda(log, ms=3.0))
    flush = SimpleNamespace(zero_=lambda: log.append("flush"))
    measure = q.cuda_event_clock(torch, flush)
    seconds = measure(lambda x: log.append(f"call-{x}"), [1, 16])
    assert seconds == pytest.approx(0.003)
    assert log == ["flush", "record-start", "call-1", "call-16", "record-end",
                                                    "synchronize"]
    log.clear()
    q.cuda_event_clock(torch)(lambda x: log.append("call"), [1])
    assert "flush" not in log


def test_l2_flush_buffer_is_twice_l2():
    asked = {}
    torch = SimpleNamespace(uint8="u8", cuda=SimpleNamespace(
        get_device_properties=lambda d: SimpleNamespace(L2_cache_size=60 << 20)),
        empty=lambda n, dtype, device: asked.update(n=n, dtype=dtype, device=device))
    q.l2_flush_buffer(torch, "cuda:0")
    assert asked == {"n": 120 << 20, "dtype": "u8", "device": "cuda:0"}


def test_cuda_timing_records_gpu_clocks_and_method(monkeypatch):
    monkeypatch.setattr(det, "_load_nvml", lambda: FakeNVML())
    log = []
    torch = SimpleNamespace(cuda=RecordingCuda(log, ms=2.0))
    x = SimpleNamespace(device=SimpleNamespace(type="cuda"))
    t = q.device_timing(torch, lambda x: None, lambda x: None, {1: x}, clock="cuda-events", l2_flush=False,
                         rounds=2, warmup=1)
    assert t["clock"] == "cuda-events" and t["l2-flush"] is False and t["method"] == "paired-alternating"
    assert t["device"] == {"name": "NVIDIA H200", "driver": "580.159.03", "cuda-driver": "13.0",
                           "clocks-start": {"sm-mhz": 1980, "memory-mhz": 3201},
                           "clocks-end": {"sm-mhz": 1980, "memory-mhz": 3201}}
    assert log.count("synchronize") == 2 * (2 + 1)  # one per measured side, warm-up included


def test_cpu_qualify_records_the_wall_clock(qproject):
    res = qualify_cpu(qproject)
    t = res.receipt["evidence"]["timing"]
    assert t["clock"] == "perf-counter" and "device" not in t and "l2-flush" not in t
    Receipt.parse(res.receipt, file="r.json")


def qualify_cpu(project):
    [res] = qualify(_lock(project), "fastscale", hardware=CPU)
    assert res.passed, res.failures
    return res


# -- receipt validation knows both methods -----------------------------------------------------

@pytest.fixture(scope="module")
def lock(tmp_path_factory) -> Lockfile:
    return TinyProject(tmp_path_factory.mktemp("p")).lock()


def _with_timing(doc, **timing):
    doc = copy.deepcopy(doc)
    if timing.pop("gpu", False):  # the same cell measured on an H200 (the arch rule is the lock's, not checked here)
        doc["cell"]["hardware"] = {"backend": "cuda", "arch": "9.0", "device-class": "h200"}
    doc["evidence"]["timing"].update(timing)
    return doc


GPU_DEVICE = {"name": "NVIDIA H200", "driver": "580.159.03", "cuda-driver": "13.0",
              "clocks-start": {"sm-mhz": 1980, "memory-mhz": 3201}, "clocks-end": None}


def test_cuda_receipt_with_event_timing_is_valid(lock):
    doc = _with_timing(receipt_doc(lock, "fast", "decode"), gpu=True, clock="cuda-events", **{"l2-flush": True},
                       device=GPU_DEVICE)
    assert Receipt.parse(doc, file="r.json").problems(lock.manifest) == []


def test_cuda_receipt_timed_with_the_host_clock_is_rejected(lock):
    doc = _with_timing(receipt_doc(lock, "fast", "decode"), gpu=True, clock="perf-counter")
    assert Receipt.parse(doc, file="r.json").problems(lock.manifest) == [
        "timing clock 'perf-counter' does not fit a cuda cell (needs 'cuda-events'): it timed kernel launches, not kernels"]


def test_cpu_receipt_with_cuda_events_is_rejected(lock):
    doc = _with_timing(receipt_doc(lock, "fast", "decode"), clock="cuda-events")
    assert Receipt.parse(doc, file="r.json").problems(lock.manifest) == [
        "timing clock 'cuda-events' does not fit a cpu cell (needs 'perf-counter'): no GPU ran"]


@pytest.mark.parametrize("timing, message", [
    ({"clock": "wall"}, "r.json: evidence.timing.clock: expected one of perf-counter, cuda-events, got 'wall'"),
    ({"l2-flush": "yes"}, "r.json: evidence.timing.l2-flush: expected a boolean, got a string"),
    ({"device": {**GPU_DEVICE, "power": 700}}, "r.json: evidence.timing.device.power: unknown field"),
    ({"device": {**GPU_DEVICE, "name": 7}}, "r.json: evidence.timing.device.name: expected a string, got an integer"),
    ({"device": {**GPU_DEVICE, "clocks-end": {"sm-mhz": -5}}},
     "r.json: evidence.timing.device.clocks-end.sm-mhz: expected a clock in MHz, got -5"),
])
def test_bad_timing_fields_name_the_field(lock, timing, message):
    with pytest.raises(ReceiptInvalid) as exc:
        Receipt.parse(_with_timing(receipt_doc(lock, "fast", "decode"), gpu=True, **timing), file="r.json")
    assert str(exc.value).startswith(message)
