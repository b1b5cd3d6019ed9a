"""A real-data corpus: the 54 FlashRT Kernel Hub packages on the test Hub, a Qwen3-8B-style
manifest over 17 of them, receipts on seven real machines, and an oracle built only from
`kernels`' own functions.

The package facts (repo ids, version branches, backends, declared CUDA capabilities, CUDA
min/max versions, noarch) are the public ``build.toml`` declarations of
``flashrt-project/FlashRT-HF-kernels@0823390``, copied compactly into
``tests/data/flashrt-archs.json`` from ``../shared/data/flashrt-packages.json``. Binaries are
placeholders (a tiny Python module per variant); ``metadata.json`` carries real digests of them.

Why an oracle from `kernels`: the product re-implements variant choice and the arch rule so that
it can decide for machines it is not running on without importing `kernels`. The oracle decides
the same questions with `kernels.variants._resolve_variant_for_system` and
`kernels.archs._supports_cuda_capability` and ranks receipts from their recorded figures, so
a disagreement points at frt, not at a shared helper. Nothing in the oracle calls ``frt_dist``.

One assumption is ours, not the data's: a CUDA kernel that declares no capabilities is built
with kernel-builder's default list, which the built ``metadata.json`` then names; we take
``BUILDER_DEFAULT_CAPS`` for it (the real list is only visible in a built variant).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import tomli_w

DATA = Path(__file__).resolve().parents[1] / "data" / "flashrt-archs.json"
MODEL = "qwen3-8b"
TORCH = "2.13"
BUILDER_DEFAULT_CAPS = ("7.5", "8.0", "8.6", "8.9", "9.0", "10.0", "12.0")  # assumption, see the docstring
PRECISIONS = ("bf16", "fp16", "fp8", "nvfp4")
PHASES = {"decode": [1, 16], "prefill": [64, 2048]}
STATES = ("certified_fast", "supported_correct")  # best first: certified_fast > supported_correct


@dataclass(frozen=True)
class Machine:
    name: str
    arch: str
    device_class: str
    cpu: str
    cuda: str

    @property
    def software(self) -> dict[str, str]:
        return {"torch": TORCH, "cuda": self.cuda}

    def flags(self) -> list[str]:
        """Declared hardware for ``frt resolve|mirror`` (CPU and OS are declared too)."""
        return ["--arch", self.arch, "--device-class", self.device_class, "--backend", "cuda", "--cpu", self.cpu,
                "--os", "linux", "--software", f"torch={TORCH},cuda={self.cuda}"]


MACHINES = (
    Machine("H200", "9.0", "h200", "x86_64", "12.8"),
    Machine("B200", "10.0", "b200", "x86_64", "13.0"),
    Machine("RTX 5090", "12.0", "rtx-5090", "x86_64", "12.8"),
    Machine("L40S", "8.9", "l40s", "x86_64", "12.8"),
    Machine("A100", "8.0", "a100", "x86_64", "12.8"),
    Machine("DGX Spark (GB10)", "12.1", "gb10", "aarch64", "13.0"),
    Machine("Jetson Thor", "11.0", "jetson-thor", "aarch64", "13.0"),
)

# 7 routes over 5 seams and 4 precisions; 17 distinct packages (real ones, chosen by what they do)
ROUTES: dict[str, tuple[str, dict[str, str]]] = {
    "bf16-fa2": ("bf16", {"attention": "fa2-seqused-runtime", "rmsnorm": "flashrt-adaptive-norms",
                          "rope": "flashrt-qkv-cache-rope"}),
    "bf16-gated": ("bf16", {"attention": "gated-delta-attention", "mlp": "bf16-linear-gemv",
                            "rmsnorm": "transformer-fused-ops"}),
    "bf16-fa4": ("bf16", {"attention": "fa4-cute-runtime", "mlp": "smallm-ffn-megakernels-blackwell"}),
    "fp16-sage2": ("fp16", {"attention": "sageattention2-blackwell", "rope": "flashrt-qkv-cache-rope"}),
    "fp8-kv": ("fp8", {"attention": "fp8-kv-attention", "mlp": "fp8-gemm", "quant": "blockwise-fp8-producers",
                       "rmsnorm": "flashrt-residual-norm-quant"}),
    "fp8-blackwell": ("fp8", {"attention": "fp8-cross-attention-blackwell", "mlp": "fused-mlp-megakernels-blackwell",
                              "quant": "blockwise-fp8-producers"}),
    "nvfp4": ("nvfp4", {"mlp": "fp4-gemm", "quant": "flashrt-nvfp4", "attention": "fp8-kv-attention"}),
}


def _repo(short: str) -> str:
    return f"flashrt/{short}"


def route_repos(route: str) -> list[str]:
    return sorted({_repo(s) for s in ROUTES[route][1].values()})


def packages() -> list[dict]:
    """Every package with ``archs`` = what its built metadata.json declares (``None``: noarch)."""
    doc = json.loads(DATA.read_text(encoding="utf-8"))
    out = []
    for p in doc["packages"]:
        caps = list(doc["cuda_capabilities"].get(p["repo_id"], []))
        if p.get("builder-default-caps"):
            caps = sorted(set(caps) | set(BUILDER_DEFAULT_CAPS), key=lambda a: (int(a.split(".")[0]), a))
        out.append({**p, "archs": None if p.get("noarch") else caps})
    return out


def _cuda_builds(p: dict) -> list[str]:
    """The CUDA versions kernel-builder builds for the package's [general.cuda] min/max."""
    lo = float(p.get("cuda_minver") or "12.8")
    hi = float(p.get("cuda_maxver") or "99")
    return [cu for cu in ("12.8", "13.0") if lo <= float(cu) <= hi]


def variants_of(p: dict) -> dict[str, tuple[str, list[str] | None]]:
    """``{variant: (backend type, archs)}`` kernel-builder would publish for the declared backends:
    CUDA x86_64 for every CUDA version in range, aarch64 for CUDA 13 (Jetson Thor, GB10), ROCm
    x86_64, and ``torch-cuda`` for a noarch package."""
    if p.get("noarch"):
        return {"torch-cuda": ("cuda", None)}
    t = TORCH.replace(".", "")
    out = {}
    for cu in _cuda_builds(p):
        tag = "cu" + cu.replace(".", "")
        out[f"torch{t}-cxx11-{tag}-x86_64-linux"] = ("cuda", p["archs"])
        if cu.startswith("13"):
            out[f"torch{t}-cxx11-{tag}-aarch64-linux"] = ("cuda", p["archs"])
    if "rocm" in p["backends"]:
        out[f"torch{t}-cxx11-rocm71-x86_64-linux"] = ("rocm", list(p["rocm_archs"]))
    return out


def publish(server) -> dict[str, str]:
    """Commit every package to the test Hub on its version branch; ``{repo: commit}``."""
    from .hubserver import kernel_variant_files

    commits = {}
    for p in packages():
        name = p["repo_id"].split("/", 1)[1].lower()
        files: dict[str, bytes] = {}
        for variant, (backend, archs) in variants_of(p).items():
            init = f'"""placeholder for {p["repo_id"]} {variant}."""\n\n\ndef forward(x):\n    return x\n'.encode()
            files.update(kernel_variant_files(name=name, variant=variant, backend=backend, archs=archs,
                                              module_files={"__init__.py": init}, version=p["version"]))
        commits[p["repo_id"]] = server.commit(p["repo_id"], files, branch=f"v{p['version']}")
    return commits


def manifest_doc() -> dict:
    """The Qwen3-8B-style manifest: every corpus package pinned by version (so `frt lock` reads
    all 54 from the Hub), 5 seams, 7 routes, decode and prefill bands."""
    pkgs = {p["repo_id"]: {"version": p["version"], "trust": True} for p in packages()}
    dtype = {"bf16": "bfloat16", "fp16": "float16", "fp8": "bfloat16", "nvfp4": "bfloat16"}
    seams: dict[str, dict] = {}
    for rname, (prec, seam_map) in ROUTES.items():
        for seam, short in seam_map.items():
            impls = seams.setdefault(seam, {"structure": f"{seam}@1", "impls": {}})["impls"]
            impls[rname] = {"package": _repo(short), "entry": "forward", "precision": prec,
                            "contract": {"device": "cuda", "dtypes": [dtype[prec]], "layout": "contiguous"},
                            "smoke": {"inputs": [{"shape": ["rows", 64], "dtype": dtype[prec]}]}}
    routes = {r: {"assembly": "eager", "seams": {s: r for s in seam_map}} for r, (_, seam_map) in ROUTES.items()}
    return {"schema": "frt.manifest/1", "model": MODEL, "binding": "qwen3_decoder_layer", "host": "torch",
            "family": "qwen3", "default-precision": "bf16", "packages": pkgs,
            "phases": {ph: {"rows": rows} for ph, rows in PHASES.items()}, "seams": seams, "routes": routes}


def write_project(root: Path) -> Path:
    for d in ("manifests", "receipts", "lockfiles"):
        (root / d).mkdir(parents=True, exist_ok=True)
    (root / "manifests" / f"{MODEL}.toml").write_text(tomli_w.dumps(manifest_doc()), encoding="utf-8")
    return root


# ---------------------------------------------------------------------------
# the oracle: kernels' functions and the JSON data only


def kernels_variant(p: dict, m: Machine) -> str | None:
    """The variant `kernels` selects for package ``p`` on machine ``m``."""
    from kernels.backends import parse_backend
    from kernels.variants import _resolve_variant_for_system, parse_variant
    from packaging.version import Version

    applicable, _ = _resolve_variant_for_system(
        [parse_variant(v) for v in variants_of(p)], parse_backend("cu" + m.cuda.replace(".", "")), m.cpu, "linux",
        Version(TORCH), True, None)
    return applicable[0].variant_str if applicable else None


def kernels_admits(archs: list[str] | None, m: Machine) -> bool:
    from kernels.archs import _supports_cuda_capability

    major, minor = (int(x) for x in m.arch.split("."))
    return not archs or _supports_cuda_capability(archs, (major, minor))


@dataclass
class Spec:
    """One receipt the corpus writes, with the facts the oracle decides from."""

    machine: Machine
    route: str
    phase: str
    state: str
    speedup: float
    file: str = ""
    admitted: bool = True
    blocking: list[str] = field(default_factory=list)  # packages whose archs do not admit the device


def _h(*parts) -> int:
    return int.from_bytes(hashlib.sha256("\0".join(map(str, parts)).encode()).digest()[:4], "big")


def receipt_specs() -> list[Spec]:
    """Which cells have receipts: every (machine, route, phase) where `kernels` selects a variant of
    every package of the route, minus about one in six (left unmeasured). States and speedups are
    fixed pseudo-random draws, distinct within a cell so the ranking never needs a tie-break
    (``test_the_corpus_covers_routes_and_every_refusal_kind`` checks the draws stay informative)."""
    by_repo = {p["repo_id"]: p for p in packages()}
    specs = []
    for m in MACHINES:
        for ri, route in enumerate(ROUTES):
            pk = [by_repo[r] for r in route_repos(route)]
            if any(kernels_variant(p, m) is None for p in pk):
                continue
            blocking = [p["repo_id"] for p in pk if not kernels_admits(p["archs"], m)]
            for phase in PHASES:
                h = _h(m.name, route, phase)
                if h % 6 == 0:
                    continue
                state = STATES[0] if h % 3 else STATES[1]
                # supported_correct a little faster on average: state must outrank speed in some cell
                speedup = round(1.05 + (h % 50) / 100 + ri / 1000 + (0.1 if state == STATES[1] else 0), 3)
                specs.append(Spec(m, route, phase, state, speedup, admitted=not blocking, blocking=blocking))
    return specs


def write_receipts(root: Path, lock, specs: list[Spec]) -> None:
    """Receipts as another machine's `frt qualify` writes them (``factories.receipt_doc``), with each
    impl's variant set to the one `kernels` selects there."""
    from frt_dist.system.hardware import Hardware

    from .factories import receipt_doc

    by_repo = {p["repo_id"]: p for p in packages()}
    rdir = root / "receipts" / MODEL
    rdir.mkdir(parents=True, exist_ok=True)
    for i, s in enumerate(specs):
        m = s.machine
        hw = Hardware(arch=m.arch, device_class=m.device_class, backend="cuda", cpu=m.cpu, os="linux",
                      software=m.software)
        doc = receipt_doc(lock, s.route, s.phase, hw, state=s.state, speedup=s.speedup)
        for it in doc["cell"]["impls"].values():
            it["variant"] = kernels_variant(by_repo[it["package"]], m)
        s.file = f"{i:03d}-{m.device_class}-{s.route}-{s.phase}.json"
        (rdir / s.file).write_text(json.dumps(doc, indent=1), encoding="utf-8")


def expected_decision(specs: list[Spec], m: Machine, precision: str, phase: str, accept: tuple[str, ...]) -> dict:
    """The oracle's decision for one band: the route (with state and speedup) or ``None``, and for
    every other route the phrase its reason must contain."""
    by_repo = {p["repo_id"]: p for p in packages()}
    valid = [s for s in specs if s.machine == m and s.phase == phase and s.admitted
             and ROUTES[s.route][0] == precision]
    ranked = sorted((s for s in valid if s.state in accept),
                    key=lambda s: (STATES.index(s.state), -s.speedup, -(s.speedup - 0.05), s.route))
    win = ranked[0] if ranked else None
    reasons = {}
    for route, (prec, _) in ROUTES.items():
        if win and route == win.route:
            continue
        pk = [by_repo[r] for r in route_repos(route)]
        mine = [s for s in valid if s.route == route]
        if prec != precision:
            why = f"route precision is {prec}; requested {precision}"
        elif missing := [p["repo_id"] for p in pk if kernels_variant(p, m) is None]:
            why = f"variant for this system not locked: {missing[0]}"
        elif blocked := [p["repo_id"] for p in pk if not kernels_admits(p["archs"], m)]:
            why = f"package {blocked[0].split('/', 1)[1]} declares"
        elif mine and not any(s.state in accept for s in mine):
            why = f"receipt is {mine[0].state}; accept is {','.join(accept)}"
        elif mine:
            why = f"ranked below {win.route}"
        else:
            why = "no receipt for this cell"
        reasons[route] = why
    return {"route": win.route if win else None, "state": win.state if win else "unknown",
            "speedup": win.speedup if win else None, "reasons": reasons}


def expected_mirror(m: Machine) -> set[tuple[str, str]]:
    """``{(repo, variant)}`` a mirror for ``m`` holds: the variant `kernels` selects, per package."""
    return {(p["repo_id"], v) for p in packages() if (v := kernels_variant(p, m)) is not None}


# ---------------------------------------------------------------------------
# driving frt on the corpus (shared by tests/test_realdata.py and bench/bench_realdata.py)


@dataclass
class Corpus:
    root: Path
    server: object
    commits: dict[str, str]
    specs: list[Spec]
    lock_requests: int = 0  # Hub requests of the caller's cold `frt lock`
    lock_stderr: str = ""

    @property
    def lock_path(self) -> Path:
        return self.root / "lockfiles" / f"{MODEL}.lock"

    def env(self, hf_home: Path) -> dict[str, str]:
        return {"HF_ENDPOINT": self.server.url, "HF_HOME": str(hf_home), "HF_HUB_DISABLE_IMPLICIT_TOKEN": "1",
                "HF_HUB_DISABLE_PROGRESS_BARS": "1", "XDG_CACHE_HOME": str(hf_home / "cache")}


def build_corpus(root: Path, server) -> Corpus:
    """Publish the packages, write the project, lock it once (`frt lock`, a subprocess with its own
    HF_HOME) for the pins the receipts name, write the receipts, and remove that lockfile: the
    caller's `frt lock` is a cold one."""
    from frt_dist.documents.lockfile import Lockfile

    c = Corpus(root, server, publish(server), receipt_specs())
    write_project(root)
    p = frt(["lock", "--model", MODEL, "--project", str(root)], c.env(root.parent / "hf-pins"))
    if p.returncode:
        raise RuntimeError(f"frt lock failed: {p.stderr}")
    write_receipts(root, Lockfile.read(c.lock_path), c.specs)
    c.lock_path.unlink()
    return c


def frt(args: list[str], env: dict[str, str]):
    """`frt` in a subprocess (``helpers.frt.frt_process``), for commands that talk to the Hub."""
    from .frt import frt_process

    return frt_process(args, cwd=Path(env["HF_HOME"]).parent, env=env, timeout=600)


def cli(args: list[str]) -> tuple[int, str, str]:
    """``frt`` in this process (resolve and matrix touch no network): (exit, stdout, stderr)."""
    from .frt import frt_main

    return frt_main(args)


def resolve_cli(root: Path, m: Machine, precision: str, accept: tuple[str, ...]) -> tuple[int, dict]:
    """`frt resolve --json` for one machine and precision, every band: (exit, its JSON document)."""
    args = ["resolve", "--model", MODEL, "--project", str(root), "--json", "--precision", precision, *m.flags()]
    if "supported_correct" in accept:
        args += ["--accept", "supported_correct"]
    rc, out, err = cli(args)
    try:
        return rc, json.loads(out)
    except ValueError:
        return rc, {"error": err or out}


def compare(doc: dict, exp_by_phase: dict[str, dict]) -> list[str]:
    """Every difference between a resolve document and the oracle's decisions ([] = agreement)."""
    diffs = []
    for d in doc["decisions"]:
        exp = exp_by_phase[d["phase"]]
        got = {"route": d["route"], "state": d["state"]}
        if got != {"route": exp["route"], "state": exp["state"]}:
            diffs.append(f"{d['phase']}: decided {got}, oracle {exp['route']} {exp['state']}")
        reasons = {r["route"]: r["reason"] for r in d["reasons"]}
        for route, phrase in exp["reasons"].items():
            if phrase not in reasons.get(route, ""):
                diffs.append(f"{d['phase']}: {route}: reason {reasons.get(route)!r}, oracle expects {phrase!r}")
        if set(reasons) != set(exp["reasons"]):
            diffs.append(f"{d['phase']}: reasons for {sorted(reasons)}, oracle {sorted(exp['reasons'])}")
    return diffs


def mirrored(mirror: Path) -> set[tuple[str, str]]:
    """``{(repo, variant)}`` found in a mirror (hub-cache layout ``<kind>--org--name/snapshots/<rev>/build/<variant>``)."""
    out = set()
    for vdir in mirror.glob("*--*--*/snapshots/*/build/*"):
        _, org, name = vdir.parents[3].name.split("--", 2)
        out.add((f"{org}/{name}", vdir.name))
    return out



@dataclass
class Agreement:
    """`frt resolve --json` on every machine and precision, compared band by band with the oracle."""

    agree: int
    total: int
    diffs: list[str]
    docs: dict  # (machine, precision) -> resolve document


def agreement(root: Path, specs: list[Spec], accept: tuple[str, ...]) -> Agreement:
    res = Agreement(0, 0, [], {})
    for m in MACHINES:
        for prec in PRECISIONS:
            rc, doc = resolve_cli(root, m, prec, accept)
            exp = {ph: expected_decision(specs, m, prec, ph, accept) for ph in PHASES}
            res.total += len(exp)
            res.docs[(m, prec)] = doc
            if "decisions" not in doc:
                res.diffs.append(f"{m.name} {prec}: exit {rc}: {str(doc)[:300]}")
                continue
            if rc != (1 if any(e["route"] is None for e in exp.values()) else 0):  # resolve exits 1 when any requested band is refused
                res.diffs.append(f"{m.name} {prec}: exit {rc}")
            for d in doc["decisions"]:
                bad = compare({"decisions": [d]}, exp)
                res.agree += not bad
                res.diffs += [f"{m.name} {prec} {x}" for x in bad]
    return res
