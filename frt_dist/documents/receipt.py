"""Receipts: measured evidence for one route in one cell (docs/reference.md#receipt).

``Receipt.parse`` checks the shape (every required field, its type, no unknown
key) and raises ``ReceiptInvalid`` naming file and field. ``Receipt.problems(manifest)``
lists every reason the receipt cannot stand: its cell is not one the manifest defines,
or its evidence contradicts itself or does not support the claimed state (one function
per rule, ``EVIDENCE_RULES``). ``frt lock`` records a receipt with problems under
``[[rejected-receipts]]`` (docs/reference.md#frt-lock); ``frt verify`` applies the same rules again.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import Any, NamedTuple

from ..base import names
from ..base.canonical import digest
from ..base.record import dataclass, field
from ..errors import ReceiptInvalid
from ..system.hardware import device_class, software_version
from .manifest import GATE_SOURCES, route_gate
from .schema import Reader, load_json

__all__ = ["Receipt", "STATES", "CellKey", "cell_name", "MIN_CERT_ROUNDS", "EVIDENCE_RULES", "SUPERSEDED", "superseded_path"]

SCHEMA_FAMILY, SCHEMA_MAJOR = "frt.receipt", 1
STATES = ("certified_fast", "supported_correct")
MIN_CERT_ROUNDS = 5  # a speed claim needs at least this many paired timing rounds
SUPERSEDED = ".superseded-"  # in the name of a receipt re-qualifying kept aside (``superseded_path``)


def superseded_path(path: Path, digest_: str) -> Path:
    """Where re-qualifying keeps the receipt it replaces at ``path``: ``<name>.superseded-<the first
    12 hex digits of its digest>`` beside it. The name does not end in ``.json``, so `frt lock`, `frt
    receipts push` and every ``*.json`` glob pass it by; its signature files follow it
    (``<that>.sig``, ``<that>.sigstore``). Restoring it is moving the files back."""
    path = Path(path)
    return path.with_name(f"{path.name}{SUPERSEDED}{digest_.split(':', 1)[-1][:12]}")
TIMING_CLOCKS = ("perf-counter", "cuda-events")  # frt_dist.qualify.timing.CLOCKS: the host's clock on CPU, CUDA events on a GPU
TIMING_KEYS = {"method", "rounds", "warmup", "rows", "host-median-ms", "route-median-ms", "clock", "l2-flush", "device",
               "speedup-median", "speedup-min", "speedup-max", "speedup-p25", "speedup-p75", "speedup-ci", "adaptive",
               "steps", "gate"}
STEP_KINDS = ("decode", "prefill")  # what an in-engine band's timing ran (evidence.timing.steps.kind)
PARITY_KEYS = {"max-abs", "max-rel", "tolerance", "worst-case", "pass", "worst-margin", "worst-margin-error",
               "worst-margin-host"}
MARGIN_KEYS = ("worst-margin", "worst-margin-error", "worst-margin-host")
"""The worst element under the combined rule (``frt qualify`` records it): ``worst-margin`` is
``max(|route - host| - (abs + rel * |host|))`` over every element of every row count, ``worst-margin-error``
and ``worst-margin-host`` are ``|route - host|`` and ``|host|`` at that element. Parity passes iff
``worst-margin <= 0``. All three or none (a receipt written before them is read conservatively)."""
CI_METHODS = ("sign-test-median",)  # frt_dist.qualify.stats.median_ci: distribution-free interval of the median
ADAPTIVE_STOPS = ("decided", "narrow", "max-rounds")  # why frt qualify stopped adding rounds


class CellKey(NamedTuple):
    """What a route index is keyed by (software is matched per candidate).
    A named tuple: built and hashed on every decision, so it must be cheap."""

    phase: str
    precision: str
    backend: str
    arch: str
    device_class: str

    def as_dict(self) -> dict:
        return {"phase": self.phase, "precision": self.precision, "backend": self.backend,
                "arch": self.arch, "device-class": self.device_class}


def cell_name(key) -> str:
    """``phase/precision/backend/arch/device-class``, as every frt message names a cell (``key``: a
    ``CellKey`` or the same five strings)."""
    return "/".join(key)


@dataclass(frozen=True)
class Receipt:
    """A qualification receipt, validated, with its digest (``Receipt.read``, ``Receipt.parse``)."""

    data: dict = field(repr=False)
    file: str
    digest: str

    # -- parsing --------------------------------------------------------------
    @classmethod
    def read(cls, path: Path, *, label: str | None = None) -> Receipt:
        label = label or str(path)
        return cls.parse(load_json(Path(path), ReceiptInvalid, label), file=label)

    @classmethod
    def parse(cls, data: Any, *, file: str) -> Receipt:
        r = Reader(file, ReceiptInvalid)
        if not isinstance(data, dict):
            raise r.fail("", "a receipt is a JSON object")
        r.only(data, {"schema", "cell", "state", "evidence", "verdict"}, "")
        r.schema(data, SCHEMA_FAMILY, SCHEMA_MAJOR)
        cell = r.get(data, "cell", dict, "")
        r.only(cell, {"model", "binding", "family", "route", "route-digest", "hardware", "precision", "layout",
                      "phase", "band", "software", "assembly", "impls", "calibration", "inputs"}, "cell")
        for k in ("model", "binding", "family", "route", "route-digest", "precision", "layout", "phase", "assembly"):
            r.get(cell, k, str, "cell")
        hw = r.get(cell, "hardware", dict, "cell")
        r.only(hw, {"backend", "arch", "device-class", "device-name"}, "cell.hardware")
        for k in ("backend", "arch", "device-class"):
            if not r.get(hw, k, str, "cell.hardware"):
                raise r.fail(f"cell.hardware.{k}", "must not be empty")
        r.get(hw, "device-name", str, "cell.hardware", required=False)
        band = r.get(cell, "band", dict, "cell")
        r.only(band, {"rows"}, "cell.band")
        rows = r.get(band, "rows", list, "cell.band")
        if len(rows) != 2 or not all(isinstance(x, int) and not isinstance(x, bool) for x in rows):
            raise r.fail("cell.band.rows", "expected [low, high] integers")
        sw = r.get(cell, "software", dict, "cell")
        for k, v in sw.items():
            if not isinstance(v, str) or software_version(v) is None:
                raise r.fail(f"cell.software.{k}", f"expected a version string like \"2.13\", got {v!r}")
        impls = r.get(cell, "impls", dict, "cell")
        if not impls:
            raise r.fail("cell.impls", "at least one impl is required")
        for seam, it in impls.items():
            p = f"cell.impls.{seam}"
            if not isinstance(it, dict):
                raise r.fail(p, "expected an object")
            r.only(it, {"impl", "package", "revision", "variant"}, p)
            for k in ("impl", "package", "revision", "variant"):
                r.get(it, k, str, p)
        if "calibration" not in cell:
            raise r.fail("cell.calibration", "missing required field (null when no calibration is used)")
        cal = cell["calibration"]
        if cal is not None:
            if not isinstance(cal, dict):
                raise r.fail("cell.calibration", "expected null or an object")
            r.get(cal, "method", str, "cell.calibration")
            r.get(cal, "provenance", str, "cell.calibration")
        inputs = r.get(cell, "inputs", dict, "cell")
        r.get(inputs, "source", str, "cell.inputs")
        if inputs["source"] == "synthetic":
            r.get(inputs, "seed", int, "cell.inputs")

        state = r.get(data, "state", str, "")
        if state not in STATES:
            raise r.fail("state", f"expected one of {', '.join(STATES)}, got {state!r}")
        ev = r.get(data, "evidence", dict, "")
        r.only(ev, {"parity", "target-calls", "fallbacks", "timing", "null-check", "negative-control",
                    "detach-restores-host", "note"}, "evidence")
        par = r.get(ev, "parity", dict, "evidence")
        r.only(par, PARITY_KEYS, "evidence.parity")
        r.number(par, "max-abs", "evidence.parity")
        r.number(par, "max-rel", "evidence.parity")
        present = [k for k in MARGIN_KEYS if k in par]
        if present and len(present) != len(MARGIN_KEYS):
            missing = [k for k in MARGIN_KEYS if k not in par]
            raise r.fail(f"evidence.parity.{missing[0]}", f"missing: {', '.join(MARGIN_KEYS)} are recorded together")
        for k in present:
            v = r.number(par, k, "evidence.parity")
            if not math.isfinite(v) or (k != "worst-margin" and v < 0):
                raise r.fail(f"evidence.parity.{k}", "must be a finite" + ("" if k == "worst-margin" else " non-negative")
                             + " number")
        tol = r.get(par, "tolerance", dict, "evidence.parity")
        r.only(tol, {"abs", "rel"}, "evidence.parity.tolerance")
        r.number(tol, "abs", "evidence.parity.tolerance")
        r.number(tol, "rel", "evidence.parity.tolerance")
        r.get(par, "worst-case", dict, "evidence.parity")
        r.get(par, "pass", bool, "evidence.parity")
        tc = r.get(ev, "target-calls", dict, "evidence")
        for k, v in tc.items():
            if isinstance(v, bool) or not isinstance(v, int):
                raise r.fail(f"evidence.target-calls.{k}", "expected an integer")
        r.get(ev, "fallbacks", int, "evidence")
        for k in ("null-check", "negative-control", "detach-restores-host"):
            r.get(ev, k, bool, "evidence")
        timing = r.get(ev, "timing", dict, "evidence", required=False)
        if timing is not None:
            r.only(timing, TIMING_KEYS, "evidence.timing")
            r.get(timing, "method", str, "evidence.timing")
            r.get(timing, "rounds", int, "evidence.timing")
            for k in ("host-median-ms", "route-median-ms", "speedup-median", "speedup-min", "speedup-max"):
                v = r.number(timing, k, "evidence.timing")
                if not math.isfinite(v) or v < 0:
                    raise r.fail(f"evidence.timing.{k}", "must be a finite non-negative number")
            ci = r.get(timing, "speedup-ci", dict, "evidence.timing", required=False)
            if ci is not None:  # the confidence interval of the median paired speedup (frt qualify records it)
                p = "evidence.timing.speedup-ci"
                r.only(ci, {"level", "low", "high", "method", "ranks", "coverage"}, p)
                for k in ("level", "low", "high", "coverage"):
                    v = r.number(ci, k, p, required=k != "coverage")
                    if v is not None and (not math.isfinite(v) or v < 0):
                        raise r.fail(f"{p}.{k}", "must be a finite non-negative number")
                for k in ("level", "coverage"):
                    if k in ci and not 0 < ci[k] < 1:
                        raise r.fail(f"{p}.{k}", f"expected a probability between 0 and 1, got {ci[k]!r}")
                method = r.get(ci, "method", str, p)
                if method not in CI_METHODS:
                    raise r.fail(f"{p}.method", f"expected one of {', '.join(CI_METHODS)}, got {method!r}")
                ranks = r.get(ci, "ranks", list, p, required=False)
                if ranks is not None and (len(ranks) != 2 or not all(isinstance(x, int) and not isinstance(x, bool)
                                                                     and 1 <= x <= timing["rounds"] for x in ranks)):
                    raise r.fail(f"{p}.ranks", "expected [low, high] ranks among the rounds (1-based)")
            ad = r.get(timing, "adaptive", dict, "evidence.timing", required=False)
            if ad is not None:  # how many rounds frt qualify started with, its cap, and why it stopped
                p = "evidence.timing.adaptive"
                r.only(ad, {"initial-rounds", "max-rounds", "stopped"}, p)
                for k in ("initial-rounds", "max-rounds"):
                    if r.get(ad, k, int, p) < 1:
                        raise r.fail(f"{p}.{k}", "expected a positive number of rounds")
                stop = r.get(ad, "stopped", str, p)
                if stop not in ADAPTIVE_STOPS:
                    raise r.fail(f"{p}.stopped", f"expected one of {', '.join(ADAPTIVE_STOPS)}, got {stop!r}")
            gate = r.get(timing, "gate", dict, "evidence.timing", required=False)
            if gate is not None:  # the gate frt qualify judged the state with; lock judges anew
                p = "evidence.timing.gate"
                r.only(gate, {"min-speedup", "source"}, p)
                v = r.number(gate, "min-speedup", p)
                if not math.isfinite(v) or v <= 0:
                    raise r.fail(f"{p}.min-speedup", "must be a finite positive number")
                src = r.get(gate, "source", str, p)
                if src not in GATE_SOURCES:
                    raise r.fail(f"{p}.source", f"expected one of {', '.join(GATE_SOURCES)}, got {src!r}")
            clock = r.get(timing, "clock", str, "evidence.timing", required=False)
            if clock is not None and clock not in TIMING_CLOCKS:
                raise r.fail("evidence.timing.clock", f"expected one of {', '.join(TIMING_CLOCKS)}, got {clock!r}")
            r.get(timing, "l2-flush", bool, "evidence.timing", required=False)
            steps = r.get(timing, "steps", dict, "evidence.timing", required=False)
            if steps is not None:  # the engine steps an in-engine (vLLM) timing measured: rows in the cell's band
                p = "evidence.timing.steps"
                r.only(steps, {"kind", "rows", "per-sample", "form", "host", "shared-with"}, p)
                if r.get(steps, "kind", str, p) not in STEP_KINDS:
                    raise r.fail(f"{p}.kind", f"expected one of {', '.join(STEP_KINDS)}, got {steps['kind']!r}")
                srows = r.get(steps, "rows", list, p)
                lo, hi = rows
                if not srows or any(isinstance(x, bool) or not isinstance(x, int) or not lo <= x <= hi for x in srows):
                    raise r.fail(f"{p}.rows", f"expected rows within the cell's band {lo}..{hi}, got {srows!r}: a "
                                 "band's figure is measured on steps whose rows lie in it")
                if r.get(steps, "per-sample", int, p) < 1:
                    raise r.fail(f"{p}.per-sample", "expected a positive number of steps")
                r.get(steps, "form", str, p)
                r.get(steps, "host", str, p)
                shared = r.get(steps, "shared-with", list, p, required=False)
                if shared is not None and not all(isinstance(x, str) and x for x in shared):
                    raise r.fail(f"{p}.shared-with", "expected the names of the bands this measurement also covers")
            dev = r.get(timing, "device", dict, "evidence.timing", required=False)
            if dev is not None:  # the GPU as NVML saw it during timing (frt qualify on CUDA)
                r.only(dev, {"name", "driver", "cuda-driver", "clocks-start", "clocks-end"}, "evidence.timing.device")
                r.get(dev, "name", str, "evidence.timing.device")
                for k in ("driver", "cuda-driver"):
                    r.get(dev, k, (str, type(None)), "evidence.timing.device", required=False)
                for k in ("clocks-start", "clocks-end"):
                    for unit, mhz in (r.get(dev, k, (dict, type(None)), "evidence.timing.device", required=False) or {}).items():
                        if isinstance(mhz, bool) or not isinstance(mhz, int) or mhz < 0:
                            raise r.fail(f"evidence.timing.device.{k}.{unit}", f"expected a clock in MHz, got {mhz!r}")
        r.get(data, "verdict", str, "")
        return cls(data=data, file=file, digest=digest(data))

    # -- views ----------------------------------------------------------------
    @property
    def cell(self) -> dict:
        return self.data["cell"]

    @property
    def state(self) -> str:
        return self.data["state"]

    @property
    def route(self) -> str:
        return self.cell["route"]

    @property
    def key(self) -> CellKey:
        c, hw = self.cell, self.cell["hardware"]
        return CellKey(c["phase"], c["precision"], hw["backend"], hw["arch"], self.device_class)

    @functools.cached_property
    def device_class(self) -> str:
        """The cell's device class, normalised (docs/reference.md#digests-and-names: ``NVIDIA H200`` is
        ``h200``) as every other entry point normalises it; the receipt (and its digest) keeps what it recorded."""
        return device_class(self.cell["hardware"]["device-class"])

    @functools.cached_property
    def software(self) -> dict:
        """The cell's software facts as ``major.minor`` (docs/reference.md#cells-and-software); the receipt itself
        keeps what it recorded."""
        return {k: software_version(v) for k, v in self.cell["software"].items()}

    @property
    def timing(self) -> dict | None:
        return self.data["evidence"].get("timing")

    @property
    def speedup(self) -> float | None:
        t = self.timing
        return float(t["speedup-median"]) if t else None

    @property
    def worst_error(self) -> float:
        return float(self.data["evidence"]["parity"]["max-abs"])

    # -- evidence vs state vs manifest ---------------------------------------
    def problems(self, manifest) -> list[str]:
        """Every reason this receipt cannot stand for its cell under ``manifest``.

        First the cell (it must be a cell the manifest defines, measured on the route's
        current definition), then each rule of ``EVIDENCE_RULES`` in turn: the evidence
        must hold together and support the claimed state. An empty list means valid."""
        out: list[str] = []
        c = self.cell
        for k, want in (("model", manifest.model), ("binding", manifest.binding), ("family", manifest.family)):
            if c[k] != want:
                out.append(f"cell.{k} is {c[k]!r}; the manifest's is {want!r}")
        for k in ("backend", "arch", "device-class"):
            value = self.device_class if k == "device-class" else c["hardware"][k]
            why = names.problem("name", value)
            if why:
                shown = repr(value) if value == c["hardware"][k] else f"{c['hardware'][k]!r} (normalised: {value!r})"
                out.append(f"cell.hardware.{k} {shown} {why}")
        route = manifest.routes.get(c["route"])
        if route is None:
            out.append(f"route {c['route']!r} is not defined by the manifest (routes: {', '.join(manifest.routes)})")
            return out
        if c["route-digest"] != route.digest:
            out.append(f"route-digest {c['route-digest']} does not match the route's definition {route.digest} "
                       "(the route changed since it was measured)")
        phase = manifest.phases.get(c["phase"])
        if phase is None:
            out.append(f"phase {c['phase']!r} is not a phase band of the manifest (phases: {', '.join(manifest.phases)})")
        elif list(c["band"]["rows"]) != list(phase.rows):
            out.append(f"band rows {c['band']['rows']} differ from the manifest's {c['phase']} band {list(phase.rows)}")
        if c["precision"] != route.precision:
            out.append(f"precision {c['precision']!r} is not the route's precision {route.precision!r}")
        if c["assembly"] != route.assembly:
            out.append(f"assembly {c['assembly']!r} is not the route's assembly {route.assembly!r}")
        if set(c["impls"]) != set(route.seams):
            out.append(f"impls cover seams {sorted(c['impls'])}; the route binds {sorted(route.seams)}")
        for seam, it in sorted(c["impls"].items()):
            want = route.seams.get(seam)
            if want is None:
                continue
            if it["impl"] != want:
                out.append(f"cell.impls.{seam}.impl is {it['impl']!r}; the route binds {want!r}")
            elif it["package"] != manifest.impl(seam, want).package:
                out.append(f"cell.impls.{seam}.package is {it['package']!r}; the impl uses {manifest.impl(seam, want).package!r}")
        for rule in EVIDENCE_RULES:
            out += rule(self, route, manifest)
        return out


# ---------------------------------------------------------------------------
# Evidence rules (docs/reference.md#receipt, docs/reference.md#verification): each takes (receipt, route,
# manifest) and returns the reasons it finds, [] when the receipt keeps the rule. One function per rule, so each has
# its own test (tests/test_receipt_rules.py) and a rule cannot go missing unnoticed.

SPEEDUP_SLACK = 0.01
"""Relative slack for comparing ``host-median-ms / route-median-ms`` with the speedup range:
the recorded figures are rounded (frt qualify keeps 4 decimals), so a ratio recomputed from
them may sit just outside ``[speedup-min, speedup-max]``; 1% absorbs that and nothing more."""


def _num(v) -> float | None:
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return None
    try:
        return float(v)
    except OverflowError:  # an integer like 10**400 is no float: not a finite number either
        return math.inf


def _show(v) -> str:
    """``repr(v)``, an integer of hundreds of digits shortened to its size."""
    if isinstance(v, int) and not isinstance(v, bool) and abs(v) > 10**20:
        return f"an integer of {len(str(abs(v))) if abs(v).bit_length() < 14000 else 'thousands of'} digits"
    return repr(v)


def _finite_nonneg(v) -> bool:
    return v is not None and math.isfinite(v) and v >= 0


def _verdict_pass(rec: Receipt, route, manifest) -> list[str]:
    """The qualification's own verdict is PASS."""
    v = rec.data["verdict"]
    return [] if v == "PASS" else [f"verdict is {v!r}, not PASS"]


def _parity_passed(rec: Receipt, route, manifest) -> list[str]:
    """Parity at the output boundary passed."""
    return [] if rec.data["evidence"]["parity"]["pass"] else ["parity did not pass"]


_PARITY_NUMBERS = (("max-abs",), ("max-rel",), ("tolerance", "abs"), ("tolerance", "rel"))


def _parity_get(par: dict, path: tuple) -> float:
    v = par
    for k in path:
        v = v[k]
    return v


def _parity_numbers_finite(rec: Receipt, route, manifest) -> list[str]:
    """Every parity number (errors and tolerances) is finite and non-negative: ``inf`` or
    ``NaN`` is no measurement, and a negative error or tolerance means nothing."""
    par = rec.data["evidence"]["parity"]
    out = []
    for path in _PARITY_NUMBERS:
        v = _parity_get(par, path)
        if not _finite_nonneg(_num(v)):
            out.append(f"evidence.parity.{'.'.join(path)} is {_show(v)}: not a finite non-negative number")
    return out


def _parity_consistent(rec: Receipt, route, manifest) -> list[str]:
    """``pass: true`` must be possible given the recorded worst errors and tolerance.

    Parity passes when every element keeps ``|route - host| <= abs + rel * |host|``. A receipt
    that records the worst element's margin under that rule (``worst-margin``, recorded by frt
    qualify) is decided exactly: ``pass`` iff ``worst-margin <= 0`` (``_parity_margin`` holds
    the margin to its element and to ``max-abs``/``max-rel``); ``max-abs`` above ``abs`` with
    ``max-rel`` above ``rel`` is then a legitimate mixed case, not a contradiction.

    An older receipt does not carry the host's magnitude at the worst element, so whether
    ``max-abs`` fits cannot be decided exactly. For it the rule is the conservative one: a pass needs
    ``max-abs <= tolerance.abs`` OR ``max-rel <= tolerance.rel``. When both are exceeded the
    evidence contradicts its ``pass`` (e.g. ``max-abs`` 5.0 against ``abs`` 1e-4 with
    ``max-rel`` above ``rel`` too). It can reject a genuine pass in one corner (the largest
    absolute error on large outputs *and* the largest relative error on near-zero ones):
    qualify again; it accepts a pass whose ``max-rel`` is within ``rel``, which the numbers
    allow. Non-finite numbers are ``_parity_numbers_finite``'s to report."""
    par = rec.data["evidence"]["parity"]
    if not par["pass"] or not all(_finite_nonneg(_num(_parity_get(par, p))) for p in _PARITY_NUMBERS):
        return []
    tol = par["tolerance"]
    if "worst-margin" in par:
        m = par["worst-margin"]
        if m > 0:
            return [f"parity says pass, but the worst element's margin {m:.4g} is above 0 (|route - host| "
                    f"{par['worst-margin-error']:.4g} > abs + rel * |host| = {tol['abs']:.4g} + {tol['rel']:.4g} * "
                    f"{par['worst-margin-host']:.4g}): the evidence contradicts itself"]
        return []
    if par["max-abs"] > tol["abs"] and par["max-rel"] > tol["rel"]:
        return [f"parity says pass, but max-abs {par['max-abs']:.4g} exceeds the tolerance's abs {tol['abs']:.4g} "
                f"and max-rel {par['max-rel']:.4g} exceeds its rel {tol['rel']:.4g}: the evidence contradicts itself"]
    return []


MARGIN_SLACK = 1e-9
"""Relative slack for recomputing a recorded margin from its element: frt qualify computes it in
float64 and JSON keeps float64 exactly, so only the order of operations can differ."""


def _parity_margin(rec: Receipt, route, manifest) -> list[str]:
    """A recorded ``worst-margin`` is the margin of its own element,
    ``worst-margin-error - (abs + rel * worst-margin-host)`` (within ``MARGIN_SLACK``), and that
    element is within the recorded maxima: its error at most ``max-abs``, its relative error
    ``error / (|host| + abs)`` at most ``max-rel``. (Receipts without a margin are not judged here.)"""
    par = rec.data["evidence"]["parity"]
    if "worst-margin" not in par or not all(_finite_nonneg(_num(_parity_get(par, p))) for p in _PARITY_NUMBERS):
        return []
    tol, m, e, h = par["tolerance"], par["worst-margin"], par["worst-margin-error"], par["worst-margin-host"]
    bound = tol["abs"] + tol["rel"] * h
    out = []
    if abs(m - (e - bound)) > MARGIN_SLACK * max(bound, e, 1e-30):
        out.append(f"worst-margin {m:.6g} is not worst-margin-error - (abs + rel * worst-margin-host) = {e - bound:.6g}: "
                   "the margin does not belong to its element")
    if e > par["max-abs"] * (1 + MARGIN_SLACK):
        out.append(f"worst-margin-error {e:.4g} is above max-abs {par['max-abs']:.4g}: the maxima contradict the worst element")
    if (tol["abs"] + h) > 0 and e / (h + tol["abs"]) > par["max-rel"] * (1 + MARGIN_SLACK):
        out.append(f"the worst element's relative error {e / (h + tol['abs']):.4g} is above max-rel {par['max-rel']:.4g}: "
                   "the maxima contradict the worst element")
    return out


def _tolerance_not_looser(rec: Receipt, route, manifest) -> list[str]:
    """The receipt was judged with a tolerance no looser than the manifest's."""
    tol, got = manifest.tolerance, rec.data["evidence"]["parity"]["tolerance"]
    if got["abs"] > tol["abs"] or got["rel"] > tol["rel"]:
        return [f"parity tolerance {got} is looser than the manifest's {tol}"]
    return []


def _target_calls(rec: Receipt, route, manifest) -> list[str]:
    """Every seam of the route ran its target implementation (count > 0)."""
    tc = rec.data["evidence"]["target-calls"]
    return [f"target-calls for seam {seam!r} is {tc.get(seam, 0)}; the route was not exercised"
            for seam in sorted(route.seams) if tc.get(seam, 0) <= 0]


def _no_fallbacks(rec: Receipt, route, manifest) -> list[str]:
    """A qualified route fell back to the host zero times."""
    n = rec.data["evidence"]["fallbacks"]
    return [] if n == 0 else [f"fallbacks is {_show(n)}; a qualified route has none"]


def _null_check(rec: Receipt, route, manifest) -> list[str]:
    """The host rerun was bit-identical (the comparison itself is sound)."""
    return [] if rec.data["evidence"]["null-check"] else ["null-check is false"]


def _negative_control(rec: Receipt, route, manifest) -> list[str]:
    """A deliberately perturbed impl failed the same gate (the gate can fail)."""
    return [] if rec.data["evidence"]["negative-control"] else ["negative-control is false"]


def _detach_restores_host(rec: Receipt, route, manifest) -> list[str]:
    """Detaching the route restored the host bit-exactly."""
    return [] if rec.data["evidence"]["detach-restores-host"] else ["detach-restores-host is false"]


def _timing_rounds(rec: Receipt, route, manifest) -> list[str]:
    """Timing, when recorded, has at least one paired round."""
    t = rec.timing
    if t is not None and t["rounds"] < 1:
        return [f"timing rounds is {t['rounds']}; timing needs at least 1 paired round"]
    return []


def _timing_warmup(rec: Receipt, route, manifest) -> list[str]:
    """``warmup``, when recorded, is a non-negative integer."""
    t = rec.timing
    w = t.get("warmup") if t is not None else None
    if w is not None and (isinstance(w, bool) or not isinstance(w, int) or w < 0):
        return [f"timing warmup is {_show(w)}; expected a non-negative integer of warm-up rounds"]
    return []


def _speedup_order(rec: Receipt, route, manifest) -> list[str]:
    """``speedup-min <= speedup-median <= speedup-max``: statistics of one set of rounds."""
    t = rec.timing
    if t is None:
        return []
    lo, med, hi = t["speedup-min"], t["speedup-median"], t["speedup-max"]
    if not lo <= med <= hi:
        return [f"speedup-min {lo:g}, speedup-median {med:g}, speedup-max {hi:g} are not in order "
                "(min <= median <= max): the statistics contradict each other"]
    return []


def _speedup_quartiles(rec: Receipt, route, manifest) -> list[str]:
    """``speedup-p25``/``speedup-p75``, when recorded, are finite numbers with
    ``p25 <= median <= p75`` and, from 3 rounds on, within ``[speedup-min, speedup-max]``.
    (Under 3 rounds an extrapolating quantile method, Python's default ``exclusive``, may
    place a quartile outside the data; the order still holds.)"""
    t = rec.timing
    if t is None or ("speedup-p25" not in t and "speedup-p75" not in t):
        return []
    out = []
    for k in ("speedup-p25", "speedup-p75"):
        if k in t and not _finite_nonneg(_num(t[k])):
            out.append(f"evidence.timing.{k} is {_show(t[k])}: not a finite non-negative number")
    if out:
        return out
    lo, med, hi = t["speedup-min"], t["speedup-median"], t["speedup-max"]
    p25, p75 = t.get("speedup-p25", med), t.get("speedup-p75", med)
    if not p25 <= med <= p75:
        return [f"speedup-p25 {p25:g} <= speedup-median {med:g} <= speedup-p75 {p75:g} does not hold"]
    if t["rounds"] >= 3 and not lo <= p25 <= p75 <= hi:
        return [f"speedup quartiles {p25:g}..{p75:g} lie outside the recorded range {lo:g}..{hi:g}"]
    return []


def _medians_vs_speedups(rec: Receipt, route, manifest) -> list[str]:
    """``host-median-ms / route-median-ms`` lies within ``[speedup-min, speedup-max]`` (±
    ``SPEEDUP_SLACK`` for rounding), and both medians are positive.

    This is exact for paired rounds: when every round's ``host/route`` lies in ``[a, b]``,
    the k-th smallest host time lies between ``a`` and ``b`` times the k-th smallest route
    time, so the ratio of the medians does too. It is how the speedup statistics and the
    medians are held to each other. The median *of the ratios* (``speedup-median``) is not
    tied more tightly to the ratio *of the medians*: they are different statistics, and on a
    loaded machine at 5 rounds frt qualify measured them 11%, 29% and 62% apart on genuine
    runs (the demo's 30-round receipts: 0-2%). A tolerance tight enough to catch an inflated
    median would reject real evidence."""
    t = rec.timing
    if t is None:
        return []
    h, r = t["host-median-ms"], t["route-median-ms"]
    if h <= 0 or r <= 0:
        return [f"host-median-ms {h:g} and route-median-ms {r:g} must both be positive: no timed round takes 0 ms"]
    ratio, lo, hi = h / r, t["speedup-min"], t["speedup-max"]
    if not lo * (1 - SPEEDUP_SLACK) <= ratio <= hi * (1 + SPEEDUP_SLACK):
        return [f"host-median-ms / route-median-ms is {ratio:.4g}, outside the recorded per-round speedups "
                f"{lo:g}..{hi:g}: the timing contradicts itself"]
    return []


def _speedup_ci(rec: Receipt, route, manifest) -> list[str]:
    """A recorded ``speedup-ci`` (the confidence interval of the median paired speedup) brackets
    the median and lies within the rounds: ``speedup-min <= low <= speedup-median <= high <=
    speedup-max`` (frt qualify rounds all five the same way, so the order survives rounding)."""
    t = rec.timing
    ci = (t or {}).get("speedup-ci")
    if ci is None:
        return []
    lo, med, hi = t["speedup-min"], t["speedup-median"], t["speedup-max"]
    if not lo <= ci["low"] <= med <= ci["high"] <= hi:
        return [f"speedup-ci {ci['low']:g}..{ci['high']:g} does not bracket speedup-median {med:g} within the "
                f"recorded range {lo:g}..{hi:g}: the statistics contradict each other"]
    return []


def _certified_has_timing(rec: Receipt, route, manifest) -> list[str]:
    """A speed claim needs timing evidence (``supported_correct`` claims nothing about speed)."""
    if rec.state == "certified_fast" and rec.timing is None:
        return ["certified_fast without timing evidence"]
    return []


def _certified_paired(rec: Receipt, route, manifest) -> list[str]:
    """A speed claim rests on paired alternating rounds of route vs host."""
    t = rec.timing
    if rec.state == "certified_fast" and t is not None and t["method"] != "paired-alternating":
        return [f"certified_fast needs paired-alternating timing, got {t['method']!r}"]
    return []


def _timing_clock_fits_backend(rec: Receipt, route, manifest) -> list[str]:
    """The timer fits the device: a GPU cell timed with the host's clock measured kernel
    launches, not kernels (they run asynchronously); CUDA events on a CPU cell measured nothing.
    A receipt that names no clock (written before clocks were recorded) is not judged here."""
    t, backend = rec.timing, rec.cell["hardware"]["backend"]
    clock = (t or {}).get("clock")
    want = "perf-counter" if backend == "cpu" else "cuda-events"
    if clock is not None and clock != want:
        return [f"timing clock {clock!r} does not fit a {backend} cell (needs {want!r}): "
                + ("it timed kernel launches, not kernels" if backend != "cpu" else "no GPU ran")]
    return []


def _certified_rounds(rec: Receipt, route, manifest) -> list[str]:
    """A speed claim needs at least ``MIN_CERT_ROUNDS`` paired rounds."""
    t = rec.timing
    if rec.state == "certified_fast" and t is not None and t["rounds"] < MIN_CERT_ROUNDS:
        return [f"certified_fast needs at least {MIN_CERT_ROUNDS} timing rounds, got {t['rounds']}"]
    return []


def _gate_note(rec: Receipt, route) -> str:
    """What a gate reason adds about the gate: that it is the default, and the gate the receipt
    recorded when that was another (a receipt judged against a lower gate than the route's now is
    judged again, not believed)."""
    gate = route_gate(route)
    note = f"; {gate.min_speedup:g} is the default gate (route {route.name!r} declares none)" if gate.is_default else ""
    had = (rec.timing or {}).get("gate")
    if had is not None and had["min-speedup"] != gate.min_speedup:
        note += f"; the receipt was judged against the {had['source']} gate {had['min-speedup']:g} when it was written"
    return note


def _certified_gate(rec: Receipt, route, manifest) -> list[str]:
    """``certified_fast`` needs the median paired speedup at or above the route's gate
    (``manifest.route_gate``: the declared one, else ``DEFAULT_MIN_SPEEDUP``), and above 1 (a gate
    under 1 never certifies a slowdown). The gate is the route's as the manifest defines it now,
    not the one the receipt recorded. ``supported_correct`` is not held to the gate: it claims
    correctness only."""
    t = rec.timing
    if rec.state != "certified_fast" or t is None:
        return []
    gate = route_gate(route).min_speedup
    if t["speedup-median"] < gate or t["speedup-median"] <= 1.0:
        return [f"certified_fast but speedup-median {t['speedup-median']:.4g} is under the route's gate {gate:.4g}"
                + _gate_note(rec, route)]
    return []


def _certified_ci_gate(rec: Receipt, route, manifest) -> list[str]:
    """``certified_fast`` with a recorded ``speedup-ci`` needs its *low* bound at or above the
    route's gate (``manifest.route_gate``), and above 1: the claim is that the speedup clears the
    gate with confidence, not that one run's median happened to (one kernel measured
    1.088x, certified, then 0.849x). A receipt without an interval (written before it was recorded) is held
    to its median only."""
    t = rec.timing
    ci = (t or {}).get("speedup-ci")
    if rec.state != "certified_fast" or ci is None:
        return []
    gate = route_gate(route).min_speedup
    if ci["low"] < gate or ci["low"] <= 1.0:
        return [f"certified_fast but the {ci['level']:.0%} interval of the speedup starts at {ci['low']:.4g}, "
                f"under the route's gate {gate:.4g} (or not above 1): the speed claim is not supported with confidence"
                + _gate_note(rec, route)]
    return []


def _certified_medians_agree(rec: Receipt, route, manifest) -> list[str]:
    """``certified_fast`` needs the host's median time above the route's: a speed claim whose
    route is slower in the median than the host contradicts itself (a certified median
    speedup of 5.0 beside a route median slower than the host's).

    Only the side of 1 is checked, not a tolerance on the gap. The median *of ratios*
    (``speedup-median``) and the ratio *of medians* are different statistics of the same paired
    rounds and can lie far apart on a noisy machine (``_medians_vs_speedups``); but a route that
    is faster in a majority of rounds by the gate *and* slower in the median time is a sign of
    numbers that were not measured together, and frt qualify itself certifies only when both
    agree, so it never writes a receipt this rule refuses."""
    t = rec.timing
    if rec.state != "certified_fast" or t is None:
        return []
    h, r = t["host-median-ms"], t["route-median-ms"]
    if h <= r:
        return [f"certified_fast with speedup-median {t['speedup-median']:.4g}, but route-median-ms {r:g} is not "
                f"below host-median-ms {h:g}: the route is not faster in the median, the timing contradicts itself"]
    return []


EVIDENCE_RULES = (
    _verdict_pass,
    _parity_passed,
    _parity_numbers_finite,
    _parity_consistent,
    _parity_margin,
    _tolerance_not_looser,
    _target_calls,
    _no_fallbacks,
    _null_check,
    _negative_control,
    _detach_restores_host,
    _timing_rounds,
    _timing_warmup,
    _speedup_order,
    _speedup_quartiles,
    _medians_vs_speedups,
    _speedup_ci,
    _certified_has_timing,
    _certified_paired,
    _timing_clock_fits_backend,
    _certified_rounds,
    _certified_gate,
    _certified_ci_gate,
    _certified_medians_agree,
)
