"""Builders for the data-driven resolver cases (``tests/resolver_cases/*.toml``).

A case file is a lock fragment in short form plus one or more queries, in the
spirit of resolvelib's functional tests. ``build_case`` turns it into a real
project folder — a manifest, Hub-layout path packages (``build/<variant>/
metadata.json`` with ``backend.archs`` and a ``digest``), full receipts — runs
the real ``frt lock`` code (``locker.lock_model``), reads the written lockfile
back with ``Lockfile.read`` and hands out ``resolve`` calls against it.

Case file keys (everything not named here is an error, so typos fail loudly):

``description``
    one line: what the case shows.
``[manifest]``
    ``default-precision`` (default: the first route's precision; ``""`` = none),
    ``phases = { decode = [1, 16], prefill = [64, 2048] }`` (the default).
``[packages."org/name"]``
    ``variants = { "<variant>" = ["12.0a", ...] }`` — the list is the variant's
    ``backend.archs``; or ``{ backend = "rocm", archs = [...] }`` to name the
    backend type (default: from the variant name: ``cuNNN``/``torch-cuda`` →
    cuda, ``rocmNN`` → rocm, else cpu). ``source`` = where the archs come from.
``[routes.<name>]``
    ``seams = { <seam> = "org/name" }`` (one impl per seam, named after the
    route), ``precision`` (default ``bf16``), ``assembly`` (default ``eager``),
    ``gate`` (min-speedup, optional). Routes keep file order (= manifest order).
``[hardware]``
    the declared system of the queries: ``arch``, ``device-class``,
    optional ``backend``, ``cpu`` (default x86_64), ``software = {...}``.
``[policy]``
    ``phase``, ``precision`` (omit for the manifest default), ``fallback``,
    ``accept`` (list; default certified_fast).
``[receipt-defaults]``
    fields every receipt takes unless it names its own.
``[[receipts]]``
    ``name`` (how expectations refer to it), ``route``, ``phase``,
    ``hardware`` (``"cuda 12.0 rtx-5090"`` or a table; default: ``[hardware]``),
    ``software`` (default: ``[hardware].software``), ``cpu`` (for variant
    selection, default ``[hardware].cpu``), ``state``, ``speedup`` (median, or
    ``[median, min, max]``), ``max-abs``, ``variants = {repo = variant}``
    (default: what the receipt's system selects), ``revisions = {repo = rev}``
    (default: the package's content digest), ``precision`` (default: the
    route's), ``set = {"dotted.path" = value}`` and ``drop = ["dotted.path"]``
    to damage a receipt on purpose.
``[expect]`` (and ``[[query]]``)
    ``decision``, ``route``, ``state``, ``receipt`` (a receipt name),
    ``speedup``, ``variants``, ``reasons = [{route=..., is=...|has=...}]``
    (every unchosen route, in manifest order), ``error = {type=..., has=...}``,
    ``rejected = [{receipt=..., has=...}]`` (lock time), ``index = [{cell =
    {...}, candidates = [names]}]`` (lock-time ranking: winner first, then
    runner-ups). Each ``[[query]]`` may override ``hardware``/``policy``
    (merged over the top-level tables) and carries its own ``expect``.
"""

from __future__ import annotations

import copy
import json
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from frt_dist.base.canonical import digest, file_digest_b64, tree_digests
from frt_dist.documents.lockfile import Lockfile
from frt_dist.documents.manifest import Manifest
from frt_dist.documents.receipt import CellKey
from frt_dist.lock.build import lock_model
from frt_dist.project.discover import Project
from frt_dist.routes.resolver import resolve
from frt_dist.system.hardware import Hardware
from frt_dist.system.variants import select_variants

CASES_DIR = Path(__file__).resolve().parents[1] / "resolver_cases"
MODEL = "case-model"

_TOP_KEYS = {"description", "manifest", "packages", "routes", "hardware", "policy", "receipt-defaults",
             "receipts", "expect", "query"}
_RECEIPT_KEYS = {"name", "route", "phase", "hardware", "software", "cpu", "state", "speedup", "max-abs",
                 "variants", "revisions", "precision", "set", "drop"}
_EXPECT_KEYS = {"decision", "route", "state", "receipt", "speedup", "variants", "reasons", "error", "rejected",
                "index"}
_HW_KEYS = {"arch", "device-class", "backend", "cpu", "software", "device-name"}
_POLICY_KEYS = {"phase", "precision", "fallback", "accept"}


class CaseError(Exception):
    """A case file that does not follow the format above."""


def _only(table: dict, allowed: set, where: str) -> None:
    extra = set(table) - allowed
    if extra:
        raise CaseError(f"{where}: unknown key(s) {sorted(extra)} (allowed: {sorted(allowed)})")


def load_case(path: Path) -> dict:
    case = tomllib.loads(Path(path).read_text("utf-8"))
    _only(case, _TOP_KEYS, path.name)
    for i, r in enumerate(case.get("receipts", [])):
        _only(r, _RECEIPT_KEYS, f"{path.name}: receipts[{i}]")
    _only(case.get("hardware", {}), _HW_KEYS, f"{path.name}: hardware")
    _only(case.get("policy", {}), _POLICY_KEYS, f"{path.name}: policy")
    for i, q in enumerate(queries(case)):
        _only(q["expect"], _EXPECT_KEYS, f"{path.name}: query {i} expect")
        _only(q["hardware"], _HW_KEYS, f"{path.name}: query {i} hardware")
        _only(q["policy"], _POLICY_KEYS, f"{path.name}: query {i} policy")
    return case


def case_files() -> list[Path]:
    return sorted(CASES_DIR.glob("*.toml"))


def queries(case: dict) -> list[dict]:
    """The case's queries: the top-level one (when it has ``[expect]``) then each ``[[query]]``."""
    base_hw, base_pol = case.get("hardware", {}), case.get("policy", {})
    out = []
    if "expect" in case:
        out.append({"hardware": dict(base_hw), "policy": dict(base_pol), "expect": case["expect"]})
    for q in case.get("query", []):
        _only(q, {"hardware", "policy", "expect", "name"}, "query")
        hw = {**base_hw, **q.get("hardware", {})}
        if "software" in q.get("hardware", {}):
            hw["software"] = q["hardware"]["software"]  # replaced whole, never merged
        out.append({"hardware": hw, "policy": {**base_pol, **q.get("policy", {})}, "expect": q.get("expect", {}),
                    "name": q.get("name")})
    return out


# ---------------------------------------------------------------------------
# hardware


def parse_hw(spec) -> dict:
    """``"cuda 12.0 rtx-5090"`` or a table → ``{"backend", "arch", "device-class"}``."""
    if isinstance(spec, str):
        parts = spec.split()
        if len(parts) != 3:
            raise CaseError(f"hardware string must read 'BACKEND ARCH DEVICE-CLASS', got {spec!r}")
        return {"backend": parts[0], "arch": parts[1], "device-class": parts[2]}
    out = {k: spec[k] for k in ("backend", "arch", "device-class", "device-name") if k in spec}
    if "backend" not in out:
        out["backend"] = Hardware(arch=spec["arch"], device_class=spec["device-class"]).backend
    return out


def make_hardware(spec: dict) -> Hardware:
    hw = parse_hw(spec)
    # cpu/os are pinned so that a case reads the same on any build machine
    cpu = spec.get("cpu") or (hw["arch"] if hw["backend"] == "cpu" else "x86_64")
    return Hardware(arch=hw["arch"], device_class=hw["device-class"], backend=hw["backend"], cpu=cpu, os="linux",
                    software=spec.get("software", {}))


# ---------------------------------------------------------------------------
# project building


def _variant_backend(name: str, given: str | None) -> str:
    if given:
        return given
    if re.search(r"-cu\d+-", name) or name in ("torch-cuda",):
        return "cuda"
    if re.search(r"-rocm\d+-", name) or name == "torch-rocm":
        return "rocm"
    return "cpu"


def _package_dir(repo: str) -> str:
    return "packages/" + repo.replace("/", "--")


def _write_package(root: Path, repo: str, spec: dict) -> None:
    _only(spec, {"variants", "source"}, f"packages.{repo}")
    name = repo.split("/", 1)[1].lower()
    module = re.sub(r"[^a-z0-9_]", "_", name)
    for vname, vspec in spec["variants"].items():
        if isinstance(vspec, list):
            vspec = {"archs": vspec}
        backend = _variant_backend(vname, vspec.get("backend"))
        vdir = root / _package_dir(repo) / "build" / vname
        (vdir / module).mkdir(parents=True, exist_ok=True)
        init = vdir / module / "__init__.py"
        init.write_text(f"# {repo} {vname}\ndef forward(x):\n    return x\n", encoding="utf-8")
        backend_table = {"type": backend}
        if vspec.get("archs") is not None:
            backend_table["archs"] = list(vspec["archs"])
        meta = {"name": name, "id": f"_{module}_case", "version": 1, "python-depends": [],
                "backend": backend_table,
                "digest": {"algorithm": "sha256", "files": {f"{module}/__init__.py": file_digest_b64(init)}}}
        (vdir / "metadata.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def _toml_str(s: str) -> str:
    return json.dumps(s)  # a JSON string is a valid TOML basic string for our plain ASCII names


def manifest_text(case: dict, model: str = MODEL) -> str:
    m = case.get("manifest", {})
    _only(m, {"default-precision", "phases"}, "manifest")
    routes = case["routes"]
    first_prec = next(iter(routes.values())).get("precision", "bf16")
    default_prec = m.get("default-precision", first_prec)
    lines = ['schema = "frt.manifest/1"', f'model = "{model}"', 'binding = "case_binding"', 'host = "torch"',
             'family = "case-family"']
    if default_prec:
        lines.append(f"default-precision = {_toml_str(default_prec)}")
    lines.append("")
    for repo in case.get("packages", {}):
        lines += [f"[packages.{_toml_str(repo)}]", f"path = {_toml_str(_package_dir(repo))}", ""]
    for ph, rows in m.get("phases", {"decode": [1, 16], "prefill": [64, 2048]}).items():
        lines += [f"[phases.{ph}]", f"rows = [{rows[0]}, {rows[1]}]", ""]
    seams: dict[str, list[tuple[str, str, str]]] = {}
    for rname, rt in routes.items():
        _only(rt, {"seams", "precision", "assembly", "gate"}, f"routes.{rname}")
        for seam, repo in rt["seams"].items():
            seams.setdefault(seam, []).append((rname, repo, rt.get("precision", "bf16")))
    for seam, impls in seams.items():
        lines += [f"[seams.{seam}]", f'structure = "{seam}@1"', ""]
        for rname, repo, prec in impls:
            lines += [f"[seams.{seam}.impls.{rname}]", f"package = {_toml_str(repo)}", 'entry = "forward"',
                      f"precision = {_toml_str(prec)}",
                      'contract = { device = "cuda", dtypes = ["bfloat16"], layout = "contiguous" }',
                      'smoke = { inputs = [{ shape = ["rows", 64], dtype = "bfloat16" }] }', ""]
    for rname, rt in routes.items():
        seam_map = ", ".join(f"{s} = {_toml_str(rname)}" for s in rt["seams"])
        lines += [f"[routes.{rname}]", f"assembly = {_toml_str(rt.get('assembly', 'eager'))}",
                  f"seams = {{ {seam_map} }}"]
        if "gate" in rt:
            lines.append(f"gate = {{ min-speedup = {float(rt['gate'])} }}")
        lines.append("")
    return "\n".join(lines)


def _set_path(obj: dict, dotted: str, value, *, drop: bool = False) -> None:
    parts = dotted.split(".")
    for p in parts[:-1]:
        obj = obj[p]
    if drop:
        del obj[parts[-1]]
    else:
        obj[parts[-1]] = value


def full_receipt(case: dict, spec: dict, manifest: Manifest, revisions: dict[str, str],
                 package_variants: dict[str, list[str]]) -> dict:
    """Expand one short receipt into a complete, valid ``frt.receipt/1`` object."""
    spec = {**case.get("receipt-defaults", {}), **spec}
    rname = spec["route"]
    route = manifest.routes[rname]
    phase = spec["phase"]
    top_hw = case.get("hardware", {})
    hw = parse_hw(spec.get("hardware", top_hw))
    software = dict(spec.get("software", top_hw.get("software", {})))
    cpu = spec.get("cpu", top_hw.get("cpu", hw["arch"] if hw["backend"] == "cpu" else "x86_64"))
    sys_hw = Hardware(arch=hw["arch"], device_class=hw["device-class"], backend=hw["backend"], cpu=cpu,
                      os="linux", software=software)
    chosen = dict(spec.get("variants", {}))
    impls = {}
    for seam, impl_name in sorted(route.seams.items()):
        repo = manifest.impl(seam, impl_name).package
        if repo not in chosen:
            names = package_variants[repo]
            sel = select_variants(names, sys_hw).selected
            if sel is None and len(names) == 1:
                sel = names[0]
            if sel is None:
                raise CaseError(f"receipt {spec.get('name')}: no variant of {repo} for its system; name one in `variants`")
            chosen[repo] = sel
        impls[seam] = {"impl": impl_name, "package": repo,
                       "revision": spec.get("revisions", {}).get(repo, revisions[repo]), "variant": chosen[repo]}
    state = spec.get("state", "certified_fast")
    sp = spec.get("speedup", 1.2 if state == "certified_fast" else None)
    timing = None
    if sp is not None:
        med, lo, hi = (sp, round(sp - 0.05, 6), round(sp + 0.05, 6)) if not isinstance(sp, list) else sp
        timing = {"method": "paired-alternating", "rounds": 40, "host-median-ms": 1.0,
                  "route-median-ms": round(1.0 / med, 6), "speedup-median": med, "speedup-min": lo,
                  "speedup-max": hi}
    band = list(manifest.phases[phase].rows) if phase in manifest.phases else [1, 1]
    max_abs = spec.get("max-abs", 1e-6)
    cell_hw = {"backend": hw["backend"], "arch": hw["arch"], "device-class": hw["device-class"]}
    if "device-name" in hw:
        cell_hw["device-name"] = hw["device-name"]
    data = {
        "schema": "frt.receipt/1",
        "cell": {
            "model": manifest.model, "binding": manifest.binding, "family": manifest.family,
            "route": rname, "route-digest": route.digest, "hardware": cell_hw,
            "precision": spec.get("precision", route.precision), "layout": "contiguous",
            "phase": phase, "band": {"rows": band}, "software": software, "assembly": route.assembly,
            "impls": impls, "calibration": None,
            "inputs": {"source": "synthetic", "seed": 0, "note": "seeded normal(0, 1)"},
        },
        "state": state,
        "evidence": {
            "parity": {"max-abs": max_abs, "max-rel": max_abs * 2, "tolerance": {"abs": 1e-4, "rel": 1e-3},
                       "worst-case": {"rows": band[1]}, "pass": True},
            "target-calls": {seam: 64 for seam in sorted(route.seams)},
            "fallbacks": 0,
            "null-check": True, "negative-control": True, "detach-restores-host": True,
        },
        "verdict": "PASS",
    }
    if timing is not None:
        data["evidence"]["timing"] = timing
    for dotted, value in spec.get("set", {}).items():
        _set_path(data, dotted, value)
    for dotted in spec.get("drop", []):
        _set_path(data, dotted, None, drop=True)
    return data


@dataclass
class BuiltCase:
    root: Path
    lock: Lockfile
    names: dict[str, str]  # receipt name -> digest (valid receipts)
    files: dict[str, str]  # receipt name -> project-relative file
    warnings: list[str] = field(default_factory=list)

    def name_of(self, digest_: str | None) -> str | None:
        for n, d in self.names.items():
            if d == digest_:
                return n
        return None

    def resolve(self, hardware: dict, policy: dict, reporter=None):
        pol = dict(policy)
        return resolve(self.lock, hardware=make_hardware(hardware), precision=pol.get("precision"),
                       phase=pol.get("phase"), fallback=pol.get("fallback", "refuse"),
                       accept=tuple(pol.get("accept", ("certified_fast",))), reporter=reporter)


def build_case(case: dict, root: Path, *, file_prefix=None, model: str = MODEL) -> BuiltCase:
    """Write the project for ``case`` under ``root``, lock it, and read the lock back.

    ``file_prefix(i, name)`` renames receipt files (determinism tests shuffle them).
    """
    root = Path(root)
    for d in ("manifests", "receipts", "lockfiles"):
        (root / d).mkdir(parents=True, exist_ok=True)
    for repo, spec in case.get("packages", {}).items():
        _write_package(root, repo, spec)
    mpath = root / "manifests" / f"{model}.toml"
    mpath.write_text(manifest_text(case, model), encoding="utf-8")
    manifest = Manifest.read(mpath, label=f"manifests/{model}.toml")
    revisions = {repo: digest(tree_digests((root / _package_dir(repo)).resolve())) for repo in case.get("packages", {})}
    pvariants = {repo: sorted(spec["variants"]) for repo, spec in case.get("packages", {}).items()}
    names, files = {}, {}
    rdir = root / "receipts" / model
    rdir.mkdir(parents=True, exist_ok=True)
    for i, spec in enumerate(case.get("receipts", [])):
        name = spec.get("name", f"r{i}")
        data = full_receipt(case, spec, manifest, revisions, pvariants)
        fname = (file_prefix(i, name) if file_prefix else "") + f"{name}.json"
        (rdir / fname).write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        names[name] = digest(data)
        files[name] = f"receipts/{model}/{fname}"
    warnings: list[str] = []
    # a case may hold only receipts the lock rejects (its point is the refusal they give): written on purpose
    res = lock_model(Project(root, "project"), model, warn=warnings.append, allow_loss=True)
    lock = Lockfile.read(res.path, label=f"lockfiles/{model}.lock")
    return BuiltCase(root, lock, names, files, warnings)


def cell_key(cell: dict) -> CellKey:
    hw = parse_hw(cell["hardware"]) if "hardware" in cell else cell
    return CellKey(cell["phase"], cell["precision"], hw["backend"], hw["arch"], hw["device-class"])


def copy_case(case: dict) -> dict:
    return copy.deepcopy(case)
