"""Shared test builders: tiny kernel packages, manifests, receipts, projects, lockfiles.

Everything writes real files in the layouts the product reads, so tests exercise
the same code paths as users:

``variant_files(name, ...)``
    ``{relpath: bytes}`` of one build variant: ``<pyname>/...`` module files and a
    ``metadata.json`` whose ``digest`` follows kernels 0.17 (base64 sha256 of every
    other file). ``write_variant`` / ``write_package`` put it on disk.
``manifest_doc(...)``
    a manifest as a dict (defaults: model ``tiny``, seams ``act`` and ``norm`` on
    width-8 fp32 CPU tensors, phases ``decode`` [1, 16] and ``prefill`` [64, 256],
    routes ``fast`` (both seams) and ``solo`` (``act`` only)).
``receipt_doc(lock, route, phase, hardware, ...)``
    a receipt that ``frt lock`` accepts for that cell.
``TinyProject``
    a project folder (``manifests/``, ``packages/``, ``receipts/``) with
    ``.lock(receipts=[...])`` → the ``Lockfile`` read back from ``lockfiles/``.

``CPU`` is a declared CPU ``Hardware`` (torch 2.13) that tests pass instead of
detecting the machine; ``cuda_hw(arch)`` declares a fake CUDA device.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import tomli_w

from frt_dist.documents.lockfile import Lockfile
from frt_dist.lock.build import lock_model
from frt_dist.project.discover import Project
from frt_dist.system.hardware import Hardware
from frt_dist.system.variants import select_variants

__all__ = ["CPU", "cuda_hw", "SCALE_SRC", "NORM_SRC", "variant_files", "write_variant", "write_package",
           "manifest_doc", "impl_doc", "receipt_doc", "TinyProject", "tiny_project", "sha256_b64",
           "REMOTE", "start_hub", "hub_manifest", "NetworkTripwire"]

CPU = Hardware(arch="x86_64", device_class="test-cpu", backend="cpu", software={"torch": "2.13"})


def cuda_hw(arch: str = "9.0", device_class: str = "h100") -> Hardware:
    """A declared (fake) CUDA device: only facts, no device."""
    return Hardware(arch=arch, device_class=device_class, backend="cuda", software={"torch": "2.13", "cuda": "12.8"})


# Tiny kernels: pure torch, width-agnostic, fast.
SCALE_SRC = '''"""tiny test kernel: scale."""


def scale(x, w):
    return x * w


def scale_out(x, w, out):
    return out.copy_(x * w)
'''

NORM_SRC = '''"""tiny test kernel: norm."""
import torch


def norm(x, w, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w
'''


def sha256_b64(data: bytes) -> str:
    return base64.b64encode(hashlib.sha256(data).digest()).decode("ascii")


def variant_files(name: str, *, module: dict[str, str | bytes] | None = None, source: str = SCALE_SRC,
                  id: str | None = None, version: int = 1, backend: str = "cpu",
                  archs: list[str] | None = None, extra: dict | None = None) -> dict[str, bytes]:
    """Files of one variant, keyed by path inside ``build/<variant>/``.

    ``module`` maps paths inside the Python package dir to contents (default:
    ``{"__init__.py": source}``); ``id`` defaults to ``_frt_test_<pyname>_v<version>``.
    """
    py = name.replace("-", "_")
    module = module if module is not None else {"__init__.py": source}
    files = {f"{py}/{rel}": (data.encode() if isinstance(data, str) else data) for rel, data in module.items()}
    be = {"type": backend}
    if archs is not None:
        be["archs"] = list(archs)
    meta = {"name": name, "id": id or f"_frt_test_{py}_v{version}", "version": version, "license": "apache-2.0",
            "python-depends": [], "backend": be,
            "digest": {"algorithm": "sha256", "files": {rel: sha256_b64(d) for rel, d in sorted(files.items())}}}
    meta.update(extra or {})
    files["metadata.json"] = (json.dumps(meta, indent=2, sort_keys=True) + "\n").encode()
    return files


def write_variant(variant_dir: Path, files: dict[str, bytes]) -> Path:
    for rel, data in files.items():
        p = Path(variant_dir) / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    return Path(variant_dir)


def write_package(root: Path, name: str, *, variant: str = "torch-cpu", **kw) -> Path:
    """A path package at ``root`` (``root/build/<variant>/...``); returns ``root``."""
    write_variant(Path(root) / "build" / variant, variant_files(name, **kw))
    return Path(root)


def impl_doc(package: str, entry: str, *, width: int = 8, probes=(), inputs=None, expect=None,
             dtypes=("float32",), device: str = "cpu") -> dict:
    inputs = inputs or [{"shape": ["rows", width], "dtype": "float32"}, {"shape": [width], "dtype": "float32"}]
    smoke = {"inputs": inputs}
    if expect is not None:
        smoke["expect"] = {"shape": expect}
    d = {"package": package, "entry": entry, "precision": "fp32",
         "contract": {"device": device, "dtypes": list(dtypes), "layout": "contiguous", "width": width},
         "smoke": smoke}
    if probes:
        d["probes"] = list(probes)
    return d


def manifest_doc(*, model: str = "tiny", packages: dict | None = None, seams: dict | None = None,
                 routes: dict | None = None, phases: dict | None = None) -> dict:
    """A manifest dict; ``packages`` values are tables (``{"path": ...}`` or ``{"version": 1, "trust": true}``)."""
    packages = packages or {"t-org/scale": {"path": "packages/scale"}, "t-org/norm": {"path": "packages/norm"}}
    seams = seams or {
        "act": {"structure": "scale@1", "impls": {"scale": impl_doc("t-org/scale", "scale", probes=["scale_out", "scale_fast"])}},
        "norm": {"structure": "norm@1", "impls": {"norm": impl_doc("t-org/norm", "norm")}},
    }
    routes = routes or {"fast": {"assembly": "eager", "seams": {"act": "scale", "norm": "norm"}, "gate": {"min-speedup": 1.02}},
                        "solo": {"assembly": "eager", "seams": {"act": "scale"}}}
    phases = phases or {"decode": {"rows": [1, 16]}, "prefill": {"rows": [64, 256]}}
    return {"schema": "frt.manifest/1", "model": model, "binding": f"{model}_block", "host": "torch",
            "family": "tiny", "default-precision": "fp32", "packages": packages, "phases": phases,
            "seams": seams, "routes": routes, "qualify": {"tolerance": {"abs": 1e-4, "rel": 1e-3}}}


def receipt_doc(lock: Lockfile, route: str, phase: str, hardware: Hardware = CPU, *,
                state: str = "certified_fast", speedup: float = 1.25) -> dict:
    """A receipt ``frt lock`` accepts for (route, phase, hardware) under ``lock``'s pins."""
    m = lock.manifest
    rt = m.routes[route]
    impls = {}
    for seam, name in sorted(rt.seams.items()):
        repo = m.impl(seam, name).package
        pkg = lock.packages[repo]
        impls[seam] = {"impl": name, "package": repo, "revision": pkg.revision,
                       "variant": select_variants(pkg.variants, hardware).selected}
    hw = {"backend": hardware.backend, "arch": hardware.arch, "device-class": hardware.device_class}
    return {
        "schema": "frt.receipt/1",
        "cell": {"model": m.model, "binding": m.binding, "family": m.family, "route": route,
                 "route-digest": rt.digest, "hardware": hw, "precision": rt.precision, "layout": "contiguous",
                 "phase": phase, "band": {"rows": list(m.phases[phase].rows)}, "software": dict(hardware.software),
                 "assembly": rt.assembly, "impls": impls, "calibration": None,
                 "inputs": {"source": "synthetic", "seed": 0}},
        "state": state,
        "evidence": {
            "parity": {"max-abs": 1e-7, "max-rel": 1e-6, "tolerance": {"abs": 1e-4, "rel": 1e-3},
                       "worst-case": {"rows": m.phases[phase].rows[1]}, "pass": True},
            "target-calls": {seam: 8 for seam in rt.seams}, "fallbacks": 0,
            "timing": {"method": "paired-alternating", "rounds": 10, "host-median-ms": 1.0,
                       "route-median-ms": round(1.0 / speedup, 6), "speedup-median": speedup,
                       "speedup-min": speedup - 0.05, "speedup-max": speedup + 0.05},
            "null-check": True, "negative-control": True, "detach-restores-host": True},
        "verdict": "PASS",
    }


@dataclass
class TinyProject:
    """A project folder for tests. ``packages`` maps a folder under ``packages/`` to
    ``variant_files`` keyword arguments (plus optional ``variant``)."""

    root: Path
    manifest: dict = field(default_factory=manifest_doc)
    packages: dict = field(default_factory=lambda: {"scale": {"name": "scale", "source": SCALE_SRC},
                                                    "norm": {"name": "norm", "source": NORM_SRC}})
    hub = None  # a frt_dist.distribution.hub.HubClient for manifests with Hub packages

    def __post_init__(self):
        self.root = Path(self.root)
        (self.root / "manifests").mkdir(parents=True, exist_ok=True)
        (self.root / "manifests" / f"{self.model}.toml").write_text(tomli_w.dumps(self.manifest), "utf-8")
        for folder, spec in self.packages.items():
            spec = dict(spec)
            write_package(self.root / "packages" / folder, spec.pop("name"), variant=spec.pop("variant", "torch-cpu"),
                          **spec)

    @property
    def model(self) -> str:
        return self.manifest["model"]

    @property
    def project(self) -> Project:
        return Project(self.root, "project", {})

    @property
    def lock_path(self) -> Path:
        return self.project.lockfile_path(self.model)

    def lock(self, receipts=(), hardware: Hardware = CPU) -> Lockfile:
        """Lock, write receipts for ``[(route, phase[, state])]`` at the locked pins, lock again.
        The first lock pins what is there now: losing the cells of receipts measured on earlier pins
        is the point (``allow_loss``), they are measured again next."""
        lock_model(self.project, self.model, hub=self.hub, warn=lambda msg: None, allow_loss=True)
        if receipts:
            lf = Lockfile.read(self.lock_path)
            rdir = self.root / "receipts" / self.model
            rdir.mkdir(parents=True, exist_ok=True)
            for i, r in enumerate(receipts):
                route, phase, state = (*r, "certified_fast")[:3]
                doc = receipt_doc(lf, route, phase, hardware, state=state)
                (rdir / f"{i:02d}-{route}-{phase}.json").write_text(json.dumps(doc, indent=1), "utf-8")
            result = lock_model(self.project, self.model, hub=self.hub, warn=lambda msg: None)
            assert not result.lockfile.rejected, result.lockfile.rejected
        return Lockfile.read(self.lock_path)

    @classmethod
    def existing(cls, root: Path, model: str) -> TinyProject:
        """Wrap a project folder that is already on disk (nothing is written)."""
        tp = object.__new__(cls)
        tp.root, tp.manifest, tp.packages = Path(root), {"model": model}, {}
        return tp

    def copy_to(self, dest: Path) -> TinyProject:
        shutil.copytree(self.root, dest, symlinks=True)
        clone = TinyProject.existing(dest, self.model)
        clone.manifest, clone.packages = self.manifest, self.packages
        return clone


def tiny_project(tmp_path: Path, name: str = "proj", **kw) -> TinyProject:
    return TinyProject(Path(tmp_path) / name, **kw)


# ---------------------------------------------------------------------------
# a Hub for tests (tests/helpers/hubserver.py) and a network tripwire

REMOTE = "remote-org/scale"


def start_hub(monkeypatch, tmp_path: Path, *, trusted: bool = True, archs=None):
    """A loopback Hub serving ``remote-org/scale`` (branch ``v1``: ``torch-cpu``,
    module ``scale``), with ``HF_ENDPOINT``/``HF_HOME`` pointed at test folders.
    Returns ``(server, commit)``; the caller stops the server."""
    from huggingface_hub import constants
    from huggingface_hub.utils import _detect_agent, disable_progress_bars

    from .hubserver import HubServer, kernel_variant_files

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    # telemetry would ask huggingface.co for its agent registry: pre-seed it (see test_hubserver.py)
    monkeypatch.setattr(_detect_agent, "_registry", {"standardEnvVars": [], "harnesses": {}})
    server = HubServer().start()
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    # disable_progress_bars() changes process-wide state: give it a copy that monkeypatch puts back
    import importlib

    hf_tqdm = importlib.import_module("huggingface_hub.utils.tqdm")  # the module (the package's `tqdm` is the class)
    monkeypatch.setattr(hf_tqdm, "progress_bar_states", dict(hf_tqdm.progress_bar_states))
    disable_progress_bars()
    files = kernel_variant_files(name="scale", variant="torch-cpu", archs=archs,
                                 module_files={"__init__.py": SCALE_SRC.encode()})
    commit = server.commit(REMOTE, files, branch="v1")
    server.set_trusted("remote-org", trusted)
    return server, commit


def hub_manifest() -> dict:
    """``tiny`` with seam ``act`` served by the Hub package ``remote-org/scale``."""
    doc = manifest_doc(packages={REMOTE: {"version": 1}, "t-org/norm": {"path": "packages/norm"}})
    doc["seams"]["act"]["impls"]["scale"]["package"] = REMOTE
    return doc


class NetworkTripwire:
    """Records (and refuses) every outgoing socket connection while installed."""

    def __init__(self, monkeypatch):
        import socket

        self.attempts: list = []
        orig_connect, orig_connect_ex = socket.socket.connect, socket.socket.connect_ex

        def connect(sock, address, *a, **k):
            if sock.family in (socket.AF_INET, socket.AF_INET6):
                self.attempts.append(address)
                raise ConnectionRefusedError(f"network is forbidden in this test: {address}")
            return orig_connect(sock, address, *a, **k)

        def connect_ex(sock, address, *a, **k):
            if sock.family in (socket.AF_INET, socket.AF_INET6):
                self.attempts.append(address)
                return 111
            return orig_connect_ex(sock, address, *a, **k)

        monkeypatch.setattr(socket.socket, "connect", connect)
        monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)


# --- a one-package toy project (the CLI and lock tests' smallest manifest) --------------------------

def write_files(root: Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)


MANIFEST_TMPL = '''schema = "frt.manifest/1"
model = "{model}"
binding = "toy_binding"
host = "torch"
family = "toy"
default-precision = "fp32"

{packages}

[phases.decode]
rows = [1, 16]

[phases.prefill]
rows = [64, 2048]

[seams.norm]
structure = "norm@1"

[seams.norm.impls.fast]
package = "{repo}"
entry = "add_one"
precision = "fp32"
contract = {{ device = "cpu", dtypes = ["float32"], layout = "contiguous" }}
smoke = {{ inputs = [{{ shape = ["rows", 8], dtype = "float32" }}] }}

[routes.fast]
assembly = "eager"
seams = {{ norm = "fast" }}
gate = {{ min-speedup = 1.05 }}
'''


def toy_manifest(model="toy", repo="testorg/addone", package_toml=None) -> str:
    package_toml = package_toml or f'[packages."{repo}"]\nversion = 1\ntrust = true'
    return MANIFEST_TMPL.format(model=model, repo=repo, packages=package_toml)




# --- a project `frt qualify` can measure: model ``toyq`` on the toy host (helpers/toyhost.py) ---------------

QUALIFY_KERNELS = {  # three routes for the toy host's norm seam: fast, correct but slow, wrong
    "fastscale": b"def scale(x, w):\n    return x * w\n",
    "slowscale": b"import time\n\ndef scale(x, w):\n    time.sleep(0.006)\n    return x * w\n",
    "badscale": b"def scale(x, w):\n    return x * w + 0.1\n",
}

QUALIFY_MANIFEST = '''schema = "frt.manifest/1"
model = "toyq"
binding = "toy_block"
host = "torch"
family = "toy"
default-precision = "fp32"
host-entry = "toyhost:build_host"
{packages}
[phases.decode]
rows = [1, 16]

[seams.norm]
structure = "scale@1"
{impls}
{routes}
[qualify]
tolerance = {{ abs = 1e-5, rel = 1e-4 }}
rounds = 6
warmup = 1
'''


def qualify_project(project: Path) -> Path:
    """``toyq`` in ``project`` (an empty project folder), locked: one seam, three path packages
    (``QUALIFY_KERNELS``), host-entry ``toyhost:build_host``, which needs ``helpers/`` on the path."""
    from .hubserver import kernel_variant_files

    pk = im = rt = ""
    for name, code in QUALIFY_KERNELS.items():
        write_files(project / "packages" / name, kernel_variant_files(
            name=name, variant="torch-cpu", module_files={"__init__.py": code}, id=f"_toyq_{name}"))
        pk += f'[packages."testorg/{name}"]\npath = "packages/{name}"\n'
        im += (f'[seams.norm.impls.{name}]\npackage = "testorg/{name}"\nentry = "scale"\nprecision = "fp32"\n'
               f'contract = {{ device = "cpu", dtypes = ["float32"], layout = "contiguous", width = 8 }}\n'
               f'smoke = {{ inputs = [{{ shape = ["rows", 8], dtype = "float32" }}, {{ shape = [8], dtype = "float32" }}] }}\n')
        rt += f'[routes.{name}]\nassembly = "eager"\nseams = {{ norm = "{name}" }}\ngate = {{ min-speedup = 1.05 }}\n'
    (project / "manifests" / "toyq.toml").write_text(QUALIFY_MANIFEST.format(packages=pk, impls=im, routes=rt))
    lock_model(Project(project, "project"), "toyq")
    return project


def ed25519_keypair(folder: Path, name: str) -> tuple[Path, Path]:
    """A fresh Ed25519 key pair written as ``folder/<name>.pem`` (PKCS#8 private) and ``folder/<name>.pub``
    (SubjectPublicKeyInfo): what `frt qualify --key` signs with and `[trust.receipts]` pins."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    folder.mkdir(parents=True, exist_ok=True)
    key = ed25519.Ed25519PrivateKey.generate()
    priv, pub = folder / f"{name}.pem", folder / f"{name}.pub"
    priv.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    pub.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                  serialization.PublicFormat.SubjectPublicKeyInfo))
    return priv, pub
