"""Receipts: measured evidence for one route in one cell (SPEC §3, §7).

``Receipt.parse`` checks the shape (every required field, its type, no unknown
key); ``Receipt.check_against(manifest)`` checks that the evidence supports the
claimed state and that the cell is one the manifest defines. Both raise
``ReceiptInvalid`` naming file and field.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from ._schema import Reader, load_json
from .canonical import digest
from .errors import ReceiptInvalid
from .hardware import software_version

__all__ = ["Receipt", "STATES", "CellKey", "MIN_CERT_ROUNDS"]

SCHEMA_FAMILY, SCHEMA_MAJOR = "frt.receipt", 1
STATES = ("certified_fast", "supported_correct")
MIN_CERT_ROUNDS = 5  # a speed claim needs at least this many paired timing rounds
TIMING_KEYS = {"method", "rounds", "warmup", "rows", "host-median-ms", "route-median-ms",
               "speedup-median", "speedup-min", "speedup-max", "speedup-p25", "speedup-p75"}


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


@dataclass(frozen=True)
class Receipt:
    """A qualification receipt, validated, with its digest (``Receipt.read``, ``Receipt.parse``)."""

    data: dict = field(repr=False)
    file: str
    digest: str

    # -- parsing --------------------------------------------------------------
    @classmethod
    def read(cls, path: Path, *, label: str | None = None) -> "Receipt":
        label = label or str(path)
        return cls.parse(load_json(Path(path), ReceiptInvalid, label), file=label)

    @classmethod
    def parse(cls, data: Any, *, file: str) -> "Receipt":
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
        r.only(par, {"max-abs", "max-rel", "tolerance", "worst-case", "pass"}, "evidence.parity")
        r.number(par, "max-abs", "evidence.parity")
        r.number(par, "max-rel", "evidence.parity")
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
        return CellKey(c["phase"], c["precision"], hw["backend"], hw["arch"], hw["device-class"])

    @functools.cached_property
    def software(self) -> dict:
        """The cell's software facts as ``major.minor`` (SPEC §16); the receipt itself keeps what it recorded."""
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
        """Every reason this receipt cannot stand for its cell under ``manifest``."""
        out: list[str] = []
        c, ev = self.cell, self.data["evidence"]
        for k, want in (("model", manifest.model), ("binding", manifest.binding), ("family", manifest.family)):
            if c[k] != want:
                out.append(f"cell.{k} is {c[k]!r}; the manifest's is {want!r}")
        route = manifest.routes.get(c["route"])
        if route is None:
            out.append(f"route {c['route']!r} is not defined by the manifest (routes: {', '.join(manifest.routes)})")
            return out
        if c["route-digest"] != route.digest:
            out.append(f"route-digest {c['route-digest']} does not match the route's definition {route.digest} (the route changed since it was measured)")
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
        # evidence supports state
        if self.data["verdict"] != "PASS":
            out.append(f"verdict is {self.data['verdict']!r}, not PASS")
        par = ev["parity"]
        if not par["pass"]:
            out.append("parity did not pass")
        tol = manifest.tolerance
        if par["tolerance"]["abs"] > tol["abs"] or par["tolerance"]["rel"] > tol["rel"]:
            out.append(f"parity tolerance {par['tolerance']} is looser than the manifest's {tol}")
        for seam in sorted(route.seams):
            n = ev["target-calls"].get(seam, 0)
            if n <= 0:
                out.append(f"target-calls for seam {seam!r} is {n}; the route was not exercised")
        if ev["fallbacks"] != 0:
            out.append(f"fallbacks is {ev['fallbacks']}; a qualified route has none")
        for k in ("null-check", "negative-control", "detach-restores-host"):
            if not ev[k]:
                out.append(f"{k} is false")
        if self.state == "certified_fast":
            t = ev.get("timing")
            gate = route.min_speedup if route.min_speedup is not None else 1.0
            if t is None:
                out.append("certified_fast without timing evidence")
            else:
                if t["method"] != "paired-alternating":
                    out.append(f"certified_fast needs paired-alternating timing, got {t['method']!r}")
                if t["rounds"] < MIN_CERT_ROUNDS:
                    out.append(f"certified_fast needs at least {MIN_CERT_ROUNDS} timing rounds, got {t['rounds']}")
                if t["speedup-median"] < gate or t["speedup-median"] <= 1.0:
                    out.append(f"certified_fast but speedup-median {t['speedup-median']:.4g} is under the route's gate {gate:.4g}")
        return out
