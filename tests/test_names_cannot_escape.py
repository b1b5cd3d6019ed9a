"""Names cannot escape, end to end: every hostile name vector through every field of a
manifest, a receipt and a lockfile (lock-digest recomputed, as an author would) and through the CLI
arguments that name things, run through every command that touches a path — `frt lock`, `resolve`,
`verify --mirror`, `mirror`, `matrix`, `qualify` and `frt_dist.load`. A Python audit hook records
every file-system operation: nothing is read or written outside the project, the mirror and the
verified store, and no command raises anything but a documented ``FrtError`` (exit 1 or 2)."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tomllib
from pathlib import Path

import pytest
import tomli_w

from frt_dist.base.canonical import digest
from frt_dist.cli import main as cli  # noqa: F401 - imported before any command runs under the audit hook
from helpers.frt import frt_main
from helpers.paths import BUNDLED

from test_names import BAD

MODEL = "demo-decoder"
VECTORS = [v for v, _ in BAD] + ["../outside/secret.txt", "../../outside"]

_EVENTS = {"open", "os.listdir", "os.scandir", "os.mkdir", "os.rename", "os.replace", "os.symlink", "os.remove",
           "os.rmdir", "os.chmod", "os.truncate", "shutil.copyfile", "shutil.rmtree", "os.link"}
_TRACE: list | None = None


def _hook(event, args):
    if _TRACE is None or event not in _EVENTS or not args:
        return
    if event in ("os.symlink", "os.link"):  # (target, link): the link is what is created
        paths, mode = [args[1]], "w"
    elif event in ("os.rename", "os.replace", "shutil.copyfile"):
        paths, mode = [args[0], args[1]], "w"
    else:
        paths, mode = [args[0]], args[1] if len(args) > 1 else None
    for path in paths:
        if isinstance(path, (str, bytes, os.PathLike)):
            _TRACE.append((event, os.fsdecode(path), mode))


sys.addaudithook(_hook)


@pytest.fixture
def box(tmp_path, monkeypatch):
    """box/proj (the demo project), box/mirror, box/store; box/outside holds a canary."""
    proj = tmp_path / "proj"
    for d in ("manifests", "lockfiles", "receipts", "packages"):
        shutil.copytree(BUNDLED / d, proj / d)
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text("canary")
    (tmp_path / "mirror").mkdir()  # `verify --mirror` refuses a missing directory (exit 2) before reading anything
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("FRT_STORE", str(tmp_path / "store"))
    monkeypatch.chdir(proj)
    return tmp_path


_WRITES = _EVENTS - {"open", "os.listdir", "os.scandir"}


def _writes(event, mode) -> bool:
    if event == "open":
        return isinstance(mode, str) and any(c in mode for c in "wax+")
    return event in _WRITES


def _outside(box: Path, trace) -> list:
    """Accesses that leave their roots: anything in the box but outside the project, the mirror
    and the store (the canary's folder, the box itself), anything naming /etc/passwd, and any
    write outside those roots and the hermetic Hugging Face home."""
    roots = [box / "proj", box / "mirror", box / "store"]
    hf_home = Path(os.environ.get("HF_HOME", "/nonexistent"))
    bad = []
    for event, path, mode in trace:
        p = Path(os.path.normpath(os.path.join(os.getcwd(), path)))
        under = any(p == r or r in p.parents for r in roots)
        if "passwd" in path or (p == box or box in p.parents) and not under:
            bad.append((event, path))
        elif _writes(event, mode) and not under and hf_home not in p.parents:
            bad.append((event, path))
    return bad


def _frt(argv, box: Path) -> tuple[int, list]:
    """Run one command in-process under the audit hook: (exit code, outside accesses)."""
    global _TRACE
    _TRACE = []
    try:
        rc = frt_main(argv).code
    finally:
        trace, _TRACE = _TRACE, None
    return rc, _outside(box, trace)


def _relock_digest(doc: dict) -> str:
    body = {k: v for k, v in doc.items() if k != "lock-digest"}
    return tomli_w.dumps({**{"schema": doc["schema"], "lock-digest": digest(body)}, **body})


def _lock_doc(proj: Path) -> dict:
    return tomllib.loads((proj / "lockfiles" / f"{MODEL}.lock").read_text("utf-8"))


def _edit_lock(proj: Path, edit) -> None:
    doc = _lock_doc(proj)
    edit(doc)
    (proj / "lockfiles" / f"{MODEL}.lock").write_text(_relock_digest(doc), "utf-8", errors="surrogatepass")


def _rename(d: dict, old: str, new: str) -> None:
    d[new] = d.pop(old)


RM = "frt-demo/rmsnorm"
LOCK_EDITS = {
    "packages key (repo id)": lambda doc, v: _rename(doc["packages"], RM, v),
    "packages.path": lambda doc, v: doc["packages"][RM].__setitem__("path", v),
    "variants key": lambda doc, v: _rename(doc["packages"][RM]["variants"], "torch-cpu", v),
    "files key": lambda doc, v: _rename(doc["packages"][RM]["variants"]["torch-cpu"]["files"], "rmsnorm/__init__.py", v),
    "module-id": lambda doc, v: doc["packages"][RM]["variants"]["torch-cpu"].__setitem__("module-id", v),
    "model": lambda doc, v: doc.__setitem__("model", v),
    "manifest-file": lambda doc, v: doc.__setitem__("manifest-file", v),
    "embedded manifest path": lambda doc, v: doc.__setitem__(
        "manifest", doc["manifest"].replace('"path": "packages/rmsnorm"', json.dumps({"path": v})[1:-1])),
}
LOCK_COMMANDS = [["verify", "--mirror", "../mirror", "--all-variants"], ["mirror", "../mirror", "--all-variants"],
                 ["resolve", "--model", MODEL, "--arch", "x86_64", "--device-class", "amd-epyc", "--software",
                  "torch=2.13,kernels=0.17"], ["matrix"]]


@pytest.mark.slow
def test_hostile_names_in_lockfiles_never_reach_outside(box):
    proj = box / "proj"
    pristine = (proj / "lockfiles" / f"{MODEL}.lock").read_bytes()
    runs, refused, leaks = 0, 0, []
    for field, edit in LOCK_EDITS.items():
        for v in VECTORS:
            (proj / "lockfiles" / f"{MODEL}.lock").write_bytes(pristine)
            try:
                _edit_lock(proj, lambda doc, edit=edit, v=v: edit(doc, v))
            except (ValueError, KeyError, UnicodeEncodeError):
                continue  # a value TOML cannot hold is not a lockfile
            for argv in LOCK_COMMANDS:
                rc, outside = _frt(argv, box)
                runs += 1
                refused += rc != 0
                leaks += [(field, v[:40], argv[0], o) for o in outside]
            shutil.rmtree(box / "mirror", ignore_errors=True)
            (box / "mirror").mkdir()
    print(f"\nlockfile name vectors: {runs} command runs, {refused} refused, {len(leaks)} outside accesses")
    assert leaks == [], leaks[:10]
    assert runs > 600 and refused > runs // 2, (runs, refused)


MANIFEST_FIELDS = {
    "phase": ("[phases.decode]", "[phases.{q}]"),
    "route": ("[routes.split]", "[routes.{q}]"),
    "package repo": ('[packages."frt-demo/silu-mul"]', "[packages.{q}]"),
    "package path": ('path = "packages/silu-mul"', "path = {q}"),
    "model": ('model = "demo-decoder"', "model = {q}"),
    "precision": ('precision = "fp32"', "precision = {q}"),
}


@pytest.mark.slow
def test_hostile_names_in_manifests_and_receipts_never_reach_outside(box):
    proj = box / "proj"
    mpath = proj / "manifests" / f"{MODEL}.toml"
    pristine = mpath.read_text("utf-8")
    runs, leaks, codes = 0, [], {}
    for field, (old, new) in MANIFEST_FIELDS.items():
        assert old in pristine, old
        for v in VECTORS:
            q = json.dumps(v)
            mpath.write_text(pristine.replace(old, new.format(q=q), 1), "utf-8", errors="surrogatepass")
            before = (proj / "lockfiles" / f"{MODEL}.lock").read_bytes()
            for argv in (["lock", "--model", MODEL], ["lock", "--check"]):
                rc, outside = _frt(argv, box)
                runs += 1
                codes[rc] = codes.get(rc, 0) + 1
                leaks += [(field, v[:40], argv[0], o) for o in outside]
                assert rc == 2, (field, v, argv, rc)  # a bad name is bad input
            assert (proj / "lockfiles" / f"{MODEL}.lock").read_bytes() == before
    mpath.write_text(pristine, "utf-8")
    # receipts: each cell field, through `frt lock` (an invalid receipt is rejected, never fatal)
    src = json.loads((proj / "receipts" / MODEL / "split--decode--fp32--amd-epyc.json").read_text("utf-8"))
    setters = {
        "cell.route": lambda c, v: c.__setitem__("route", v),
        "cell.phase": lambda c, v: c.__setitem__("phase", v),
        "cell.precision": lambda c, v: c.__setitem__("precision", v),
        "cell.model": lambda c, v: c.__setitem__("model", v),
        "cell.hardware.device-class": lambda c, v: c["hardware"].__setitem__("device-class", v),
        "cell.impls.norm.package": lambda c, v: c["impls"]["norm"].__setitem__("package", v),
        "cell.impls.norm.variant": lambda c, v: c["impls"]["norm"].__setitem__("variant", v),
    }
    for field, setter in setters.items():
        for v in VECTORS:
            doc = json.loads(json.dumps(src))
            setter(doc["cell"], v)
            (proj / "receipts" / MODEL / "zz.json").write_text(json.dumps(doc), "utf-8")
            # (each vector replaces zz.json: a cell the previous one was accepted on is lost on purpose)
            rc, outside = _frt(["lock", "--model", MODEL, "--allow-loss"], box)
            runs += 1
            assert rc == 0, (field, v, rc)  # an invalid receipt does not stop `frt lock`
            leaks += [(field, v[:40], "lock", o) for o in outside]
    print(f"\nmanifest and receipt name vectors: {runs} command runs, exit codes {codes}, {len(leaks)} outside accesses")
    assert leaks == [], leaks[:10]
    assert runs > 400


@pytest.mark.parametrize("argv", [
    ["resolve", "--model", "{v}", "--arch", "x86_64", "--device-class", "amd-epyc"],
    ["resolve", "--model", MODEL, "--phase", "{v}", "--arch", "x86_64", "--device-class", "amd-epyc"],
    ["verify", "--model", "{v}"],
    ["lock", "--model", "{v}"],
    ["mirror", "../mirror", "--model", "{v}"],
    ["mirror", "../mirror", "--variant", "{v}"],
    ["verify", "--mirror", "../mirror", "--variant", "{v}"],
    ["matrix", "--model", "{v}"],
    ["qualify", "--model", MODEL, "--route", "{v}", "--out", "../mirror/r"],
    ["qualify", "--model", MODEL, "--route", "split", "--phase", "{v}", "--out", "../mirror/r"],
])
def test_hostile_names_as_arguments_are_usage_errors(box, argv):
    leaks = []
    for v in VECTORS:
        if "\x00" in v:
            continue  # an OS argument vector cannot hold NUL
        rc, outside = _frt([a.replace("{v}", v) for a in argv], box)
        leaks += [(v[:40], o) for o in outside]
        assert rc in (1, 2), (argv, v, rc)
    assert leaks == [], leaks[:10]
