"""``frt init``: a new project, like ``uv init`` or ``git init``.

It writes a project that works end to end on the machine it is created on, so the
first ``frt lock``, ``frt qualify`` and ``frt_dist.load`` have something real to act
on, and every file explains itself:

- ``pyproject.toml`` with ``[tool.frt]`` (how commands find the project from any
  folder below it; an existing ``pyproject.toml`` is left untouched);
- ``manifests/<model>.toml``: a commented manifest with one seam, one impl, one
  route and the two phase bands;
- ``packages/rmsnorm/``: a kernel package in the `kernels` layout (a CPU RMSNorm,
  ``build/torch-cpu/`` with its ``metadata.json`` and file digests), made from the
  bundled demo's, renamed so it never collides with the demo in one process;
- empty ``receipts/<model>/`` and ``lockfiles/``.

Nothing is written when the folder already holds a project (``manifests/``), and
nothing is left half-written: files go to a temporary folder beside the target and
are moved into place one by one only when all were produced.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import tempfile
from pathlib import Path

from ..base import names
from ..errors import FrtError, UsageError
from ..project.discover import bundled_root

__all__ = ["init_project", "init_from_release"]

_PYPROJECT = """\
# Created by `frt init`. `frt` finds this project from any folder below it.
[tool.frt]
# manifests = "manifests"   # where manifests/<model>.toml live (default shown)
# receipts = "receipts"     # qualification receipts, embedded by `frt lock`
# lockfiles = "lockfiles"   # written only by `frt lock`
# mirror = "mirror"         # an offline mirror `load` reads first (`frt mirror DIR`)
"""

_MANIFEST = """\
# {model}: the manifest of one model binding (written by people, read by `frt lock`).
# Reference: frt-dist's docs/reference.md#manifest; `frt lock` names the file and field of any mistake.
schema = "frt.manifest/1"
model = "{model}"
binding = "{binding}"
host = "torch"
family = "example"
default-precision = "fp32"
# The factory that builds the unmodified host for a phase band: `frt qualify` measures routes
# against it. This starter uses the bundled demo decoder block (RMSNorm -> gated MLP); point it at
# your own model's block ("your_module:build_host") when you bind your own.
host-entry = "frt_dist.demo.decoder:build_host"

# Kernel packages: a Hub repo at a version (`version = 1`, `trust = true` for a publisher the Hub
# does not mark trusted) or a folder in this project in the `kernels` layout (`path = ...`).
[packages."{org}/rmsnorm"]
path = "packages/rmsnorm"

# Phase bands: the row counts a route is qualified for, each on its own evidence.
[phases.decode]
rows = [1, 16]

[phases.prefill]
rows = [64, 2048]

# A seam is one place in the host where a kernel can stand in; an impl is one kernel for it.
[seams.norm]
structure = "rms_norm@1"

[seams.norm.impls.rmsnorm]
package = "{org}/rmsnorm"
entry = "rms_norm"
precision = "fp32"
# What the guard checks on every call while serving, and the bind-time smoke launch's shapes.
contract = {{ device = "cpu", dtypes = ["float32"], layout = "contiguous", width = 896 }}
smoke = {{ inputs = [{{ shape = ["rows", 896], dtype = "float32" }}, {{ shape = [896], dtype = "float32" }}] }}

# A route is a set of impls that runs together; its gate decides certified_fast vs supported_correct.
[routes.fast-norm]
assembly = "eager"
seams = {{ norm = "rmsnorm" }}
gate = {{ min-speedup = 1.05 }}

# How `frt qualify` measures: the parity tolerance, paired rounds, and the rows per band.
[qualify]
tolerance = {{ abs = 1e-4, rel = 1e-3 }}
rounds = 10
warmup = 3
rows = {{ decode = [1, 16], prefill = [64, 256] }}
"""


def _b64_sha256(data: bytes) -> str:
    return base64.b64encode(hashlib.sha256(data).digest()).decode("ascii")


_LAYERS = '''"""Layers for `kernels.kernelize`: `plan.kernel_mapping({"norm": "RMSNorm"})` serves them.

A layer replaces the forward of a model's module that declares
`@kernels.use_kernel_forward_from_hub("RMSNorm")` and holds `weight` and `variance_epsilon`
(as transformers' `LlamaRMSNorm` does); the forward runs this package's `rms_norm`.
"""

import torch.nn as nn

from . import rms_norm


class RMSNorm(nn.Module):
    def forward(self, hidden_states):
        return rms_norm(hidden_states, self.weight, self.variance_epsilon)
'''


def _package(dest: Path, model: str) -> None:
    """The demo's RMSNorm package under a new import id, with a ``layers`` module for
    ``kernels.kernelize`` (``plan.kernel_mapping``), its digests recomputed."""
    src = bundled_root() / "packages" / "rmsnorm" / "build" / "torch-cpu"
    vdir = dest / "packages" / "rmsnorm" / "build" / "torch-cpu"
    sources = {path.relative_to(src).as_posix(): path.read_bytes() for path in sorted((src / "rmsnorm").rglob("*"))
               if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"}
    sources["rmsnorm/__init__.py"] += b"\nfrom . import layers  # noqa: E402 - kernels.kernelize layers (frt init)\n"
    sources["rmsnorm/layers.py"] = _LAYERS.encode("utf-8")
    files = {}
    for rel, data in sorted(sources.items()):
        (vdir / rel).parent.mkdir(parents=True, exist_ok=True)
        (vdir / rel).write_bytes(data)
        files[rel] = _b64_sha256(data)
    meta = json.loads((src / "metadata.json").read_text("utf-8"))
    meta["id"] = f"_{re.sub(r'[^A-Za-z0-9_]', '_', model)}_rmsnorm_v1"  # a Python identifier for any model name
    meta["digest"] = {"algorithm": "sha256", "files": files}
    (vdir / "metadata.json").write_text(json.dumps(meta, indent=2) + "\n", "utf-8")


_ITEMS = ("lockfiles", "manifests", "packages", "pyproject.toml", "receipts")


def _refuse_links_and_clashes(dest: Path, model: str) -> None:
    """What is already in ``dest`` under the names init writes must be what init would keep:
    no symlink (dangling or not: its target is not the project), a folder where init makes a
    folder, and no ``packages/rmsnorm`` or ``receipts/<model>`` of the user's to write over."""
    for name in _ITEMS:
        p = dest / name
        if p.is_symlink():
            target = os.readlink(p)
            state = "" if p.exists() else ", which does not exist"
            raise UsageError(f"frt init: {p} is a symlink to {target}{state}; frt init writes real folders",
                             hints=[f"remove the link (rm {p}) or pick another folder"])
        if p.exists() and name != "pyproject.toml" and not p.is_dir():
            raise UsageError(f"frt init: {p} exists and is not a folder", hints=["move it away or pick another folder"])
    for sub in (dest / "packages" / "rmsnorm", dest / "receipts" / model):
        if os.path.lexists(sub):
            raise UsageError(f"frt init: {sub} already exists; frt init would write its own there",
                             hints=["move it away or pick another folder"])


def _validate(staging: Path, model: str) -> None:
    """The project in ``staging`` as `frt lock` reads it: its manifest and its path package,
    with the validators lock uses, so init never writes a project lock refuses."""
    from ..documents.manifest import Manifest  # noqa: PLC0415
    from ..errors import FrtError  # noqa: PLC0415
    from ..lock.build import derive_path_package  # noqa: PLC0415
    from ..project.discover import Project  # noqa: PLC0415

    try:
        m = Manifest.read(staging / "manifests" / f"{model}.toml", label=f"manifests/{model}.toml")
        for pkg in m.packages.values():
            derive_path_package(Project(staging, "project", {}), pkg)
    except FrtError as exc:
        raise UsageError(f"frt init: --model {model!r} makes a project `frt lock` refuses: {exc}") from None


def _not_written(exc: OSError, dest: Path) -> FrtError:
    where = exc.filename or dest
    why = exc.strerror or str(exc)
    return UsageError(f"frt init: {where}: cannot be written: {why}; nothing was written",
                      reasons=[{"path": str(where), "reason": why}],
                      hints=[f"create the project in a folder you can write, with free space (tried {dest})"])


def init_project(dest: str | os.PathLike, *, model: str = "my-model", org: str = "my-org") -> list[Path]:
    """Create a project in ``dest`` (created if missing); the files written, in order. Raises
    ``UsageError`` (exit 2) for a folder that holds a project, a symlink or a clash, and
    ``UsageError`` (exit 2) naming the path and the cause when the folder cannot be written
    (read-only, full, no permission); nothing is left behind then."""
    names.check("name", model, "--model", UsageError)
    names.check("name", org, "--org", UsageError)
    dest = Path(dest).resolve()
    if dest.exists() and not dest.is_dir():
        raise UsageError(f"frt init: {dest} exists and is not a folder")
    if os.path.lexists(dest / "manifests") and not (dest / "manifests").is_symlink():
        raise UsageError(f"frt init: {dest} is already a project (it has manifests/)",
                         hints=[f"frt lock --project {dest}"])
    _refuse_links_and_clashes(dest, model)

    def fill(staging: Path) -> None:
        (staging / "manifests").mkdir()
        (staging / "manifests" / f"{model}.toml").write_text(
            _MANIFEST.format(model=model, org=org, binding=model.replace("-", "_") + "_block"), "utf-8")
        (staging / "receipts" / model).mkdir(parents=True)
        (staging / "lockfiles").mkdir()
        _package(staging, model)
        if not (dest / "pyproject.toml").exists():
            (staging / "pyproject.toml").write_text(_PYPROJECT, "utf-8")
        _validate(staging, model)

    return _write_staged(dest, fill)


def _write_staged(dest: Path, fill) -> list[Path]:
    """Build a project in a staging folder inside ``dest`` (``fill(staging)``), then move each item
    into ``dest``; the paths written, in order. A folder already in ``dest`` (receipts/, packages/)
    keeps the user's files and gets ours beside them (clashes were refused before); lockfiles/ (or
    anything else) already there is kept as it is. On ``OSError`` what was moved is removed and the
    folders made for ``dest`` go: ``UsageError`` (exit 2) naming the path and the cause."""
    made = [d for d in (dest, *dest.parents) if not d.exists()]  # what mkdir creates, removed on failure
    staging = None
    written: list[Path] = []
    done = False
    try:
        dest.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".frt-init-", dir=dest))
        fill(staging)
        for item in sorted(staging.iterdir()):
            target = dest / item.name
            if target.is_dir() and item.is_dir():  # receipts/ or packages/ already there: keep the user's,
                for child in sorted(item.iterdir()):  # add ours beside (clashes were refused above)
                    os.replace(child, target / child.name)
                    written.append(target / child.name)
                continue
            if os.path.lexists(target):  # lockfiles/ already there: kept as it is
                continue
            os.replace(item, target)
            written.append(target)
        done = True
        return written
    except OSError as exc:
        for p in reversed(written):
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
        raise _not_written(exc, dest) from None
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        if not done:
            for d in made:  # folders init created for a project it did not write
                try:
                    d.rmdir()
                except OSError:
                    break


def init_from_release(dest: str | os.PathLike, model: str, manifest_text: str) -> list[Path]:
    """A project made from a Hub release (``frt init --from``): ``pyproject.toml`` (unless one is
    there), ``manifests/<model>.toml`` = ``manifest_text`` (the release's manifest plus its
    ``[release]`` table, built by ``frt_dist.release.trust.release_manifest``), empty ``receipts/<model>/``
    (the project's own evidence goes there) and ``lockfiles/``. The same refusals as ``init_project``;
    nothing is left half-written."""
    names.check("name", model, "--model", UsageError)
    dest = Path(dest).resolve()
    if dest.exists() and not dest.is_dir():
        raise UsageError(f"frt init: {dest} exists and is not a folder")
    if os.path.lexists(dest / "manifests"):
        raise UsageError(f"frt init: {dest} is already a project (it has manifests/)", hints=[f"frt lock --project {dest}"])
    for name in ("lockfiles", "receipts", "pyproject.toml"):
        p = dest / name
        if p.is_symlink() or (p.exists() and name != "pyproject.toml" and not p.is_dir()):
            raise UsageError(f"frt init: {p} is a symlink or not a folder; frt init writes real folders",
                             hints=["move it away or pick another folder"])
    if os.path.lexists(dest / "receipts" / model):
        raise UsageError(f"frt init: {dest / 'receipts' / model} already exists; frt init would write its own there",
                         hints=["move it away or pick another folder"])

    def fill(staging: Path) -> None:
        (staging / "manifests").mkdir()
        (staging / "manifests" / f"{model}.toml").write_text(manifest_text, "utf-8")
        (staging / "receipts" / model).mkdir(parents=True)
        (staging / "lockfiles").mkdir()
        if not (dest / "pyproject.toml").exists():
            (staging / "pyproject.toml").write_text(_PYPROJECT, "utf-8")

    return _write_staged(dest, fill)
