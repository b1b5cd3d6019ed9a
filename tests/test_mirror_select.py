"""``frt mirror DIR`` for the machines you ship to: declared machines
(the resolve hardware flags for one, ``--machine`` for each further one), ``--cells``,
a machine that selects nothing refused before anything is written, and ``frt verify
--mirror``'s hint naming the command that fixes what it found. Against the loopback Hub."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import pytest

from frt_dist.distribution.hub import HubClient
from frt_dist.distribution.mirror import mirror_lock, verify_mirror
from frt_dist.documents.lockfile import Lockfile
from frt_dist.errors import KernelUnavailable
from frt_dist.lock.build import lock_model
from frt_dist.system.hardware import Hardware
from frt_dist.system.variants import select_variants
from helpers.factories import (
    CPU,
    NORM_SRC,
    REMOTE,
    SCALE_SRC,
    TinyProject,
    hub_manifest,
    manifest_doc,
    receipt_doc,
    start_hub,
    tiny_project,
)
from helpers.frt import frt_main

ARM = "torch213-cxx11-cu128-aarch64-linux"  # a build for GH200's Grace CPU
SW = {"torch": "2.13", "cuda": "12.8"}
H200 = ["--arch", "9.0", "--device-class", "h200", "--cpu", "x86_64", "--software", "torch=2.13,cuda=12.8"]
CPU_MACHINE = "arch=x86_64,device-class=epyc-7b13,software=torch=2.13"
GH200 = Hardware(arch="9.0", device_class="gh200", backend="cuda", cpu="aarch64", os="linux", software=SW)


@pytest.fixture
def hub(monkeypatch, tmp_path):
    for var in ("FRT_MIRROR", "FRT_LOCK", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("KERNELS_CACHE", str(tmp_path / "kcache"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hfcache"))
    server, _ = start_hub(monkeypatch, tmp_path)
    from helpers.hubserver import kernel_variant_files

    files = {}
    for variant, backend, archs in (("torch-cpu", "cpu", None), ("torch-cuda", "cuda", ["9.0"]), (ARM, "cuda", ["9.0"])):
        files.update(kernel_variant_files(name="scale", variant=variant, backend=backend, archs=archs,
                                          module_files={"__init__.py": SCALE_SRC.encode()}))
    server.commit(REMOTE, files, branch="v1")
    tp = tiny_project(tmp_path, "hubproj", manifest=hub_manifest())
    tp.hub = HubClient(endpoint=server.url)
    yield tp, tp.lock()
    server.stop()


def _mirrored(doc) -> dict:
    return {p["repo"]: p["variants"] for m in doc["models"] for p in m["packages"]}


def _on_disk(mirror: Path, lock) -> dict:
    from frt_dist.loader import repo_folder

    out = {}
    for repo, pkg in lock.packages.items():
        build = mirror / repo_folder(repo) / "snapshots" / pkg.snapshot / "build"
        if build.is_dir():
            out[repo] = sorted(p.name for p in build.iterdir())
    return out


def test_two_machines_mirror_the_union_of_what_each_selects(hub, capsys, tmp_path):
    tp, lock = hub
    assert sorted(lock.packages[REMOTE].variants) == sorted(["torch-cpu", "torch-cuda", ARM])
    mirror = tmp_path / "m"
    rc, out, err = frt_main("mirror", str(mirror), "--project", str(tp.root), "--json", *H200,
                        "--machine", CPU_MACHINE)
    assert rc == 0, err
    # the oracle: what each machine selects, recomputed here, united per package
    machines = [Hardware(arch="9.0", device_class="h200", cpu="x86_64", software=SW),
                Hardware(arch="x86_64", device_class="epyc-7b13", software={"torch": "2.13"})]
    want: dict = {}
    for hw in machines:
        for repo, pkg in lock.packages.items():
            sel = select_variants(pkg.variants, hw).selected
            if sel:
                want.setdefault(repo, set()).add(sel)
    want = {repo: sorted(vs) for repo, vs in want.items()}
    assert want == {REMOTE: ["torch-cpu", "torch-cuda"], "t-org/norm": ["torch-cpu"]}  # ARM is nobody's
    assert _mirrored(json.loads(out)) == want == _on_disk(mirror, lock)
    assert verify_mirror(lock, mirror) == []


def test_a_machine_declares_its_cpu_and_os(hub, capsys, tmp_path):
    tp, lock = hub
    rc, out, err = frt_main("mirror", str(tmp_path / "m"), "--project", str(tp.root), "--json", "--machine",
                        "arch=9.0,device-class=gh200,cpu=aarch64,os=linux,software=torch=2.13;cuda=12.8")
    assert rc == 0, err
    assert select_variants(lock.packages[REMOTE].variants, GH200).selected == ARM
    doc = json.loads(out)
    assert _mirrored(doc) == {REMOTE: [ARM]}
    assert doc["models"][0]["skipped"] == [{"repo": "t-org/norm", "reason": "no locked variant runs on gh200 (cuda 9.0)"}]


def test_cells_mirror_what_every_locked_cell_selects(hub, capsys, tmp_path):
    tp, lock = hub
    rdir = tp.root / "receipts" / "tiny"
    rdir.mkdir(parents=True)
    for i, (route, hw) in enumerate((("fast", CPU), ("solo", GH200))):
        (rdir / f"{i}.json").write_text(json.dumps(receipt_doc(lock, route, "decode", hw)), "utf-8")
    lock_model(tp.project, "tiny", hub=tp.hub, warn=lambda m: None)
    lock = Lockfile.read(tp.lock_path)
    assert len(lock.index) == 2
    mirror = tmp_path / "m"
    rc, out, err = frt_main("mirror", str(mirror), "--project", str(tp.root), "--json", "--cells")
    assert rc == 0, err
    # the oracle: the variants the receipts measured (GH200's cpu comes from its variant's name)
    measured: dict = {}
    for rec in lock.receipts.values():
        for it in rec.cell["impls"].values():
            measured.setdefault(it["package"], set()).add(it["variant"])
    assert measured == {REMOTE: {"torch-cpu", ARM}, "t-org/norm": {"torch-cpu"}}
    assert _mirrored(json.loads(out)) == {r: sorted(v) for r, v in measured.items()} == _on_disk(mirror, lock)


def test_cells_without_receipts_is_a_no(hub, capsys, tmp_path):
    tp, _ = hub
    rc, out, err = frt_main("mirror", str(tmp_path / "m"), "--project", str(tp.root), "--cells")
    assert rc == 1
    assert ("error: --cells: the lock for model 'tiny' has no cells (no receipts), so no cell selects a variant"
            in err)
    assert not (tmp_path / "m").exists()


def test_a_machine_that_selects_nothing_exits_1_and_writes_nothing(hub, capsys, tmp_path):
    tp, lock = hub
    mirror = tmp_path / "m"
    rc, out, err = frt_main("mirror", str(mirror), "--project", str(tp.root), "--machine", CPU_MACHINE,
                        "--machine", "arch=gfx942,device-class=mi300x,software=torch=2.13;rocm=6.3")
    assert rc == 1
    has = "; ".join(f"{r} has {', '.join(sorted(p.variants))}" for r, p in sorted(lock.packages.items()))
    assert err.startswith(f"error: mirror: model 'tiny' selects no locked variant for machine(s) "
                          f"mi300x (rocm gfx942) rocm=6.3,torch=2.13 ({has}); nothing would be mirrored for them\n")
    assert "hint: declare the machine's software too" in err
    assert not mirror.exists()  # the CPU machine's variants were not mirrored either


def test_the_api_refuses_before_it_creates_the_folder(hub, tmp_path):
    _, lock = hub
    rocm = Hardware(arch="gfx942", device_class="mi300x", software={"torch": "2.13", "rocm": "6.3"})
    with pytest.raises(KernelUnavailable, match=r"^mirror: model 'tiny' selects no locked variant for machine\(s\) mi300x"):
        mirror_lock(lock, tmp_path / "m", machines=[CPU, rocm])
    assert not (tmp_path / "m").exists()


def test_every_model_is_checked_before_anything_is_written(capsys, tmp_path):
    tp = tiny_project(tmp_path)  # model tiny: CPU builds
    tp.lock()
    doc = manifest_doc(model="zeta", packages={"t-org/zs": {"path": "packages/zs"}, "t-org/zn": {"path": "packages/zn"}})
    doc["seams"]["act"]["impls"]["scale"]["package"] = "t-org/zs"
    doc["seams"]["norm"]["impls"]["norm"]["package"] = "t-org/zn"
    zeta = TinyProject(tp.root, manifest=doc, packages={  # model zeta (locked after tiny): CUDA builds only
        "zs": {"name": "scale", "variant": "torch-cuda", "backend": "cuda"},
        "zn": {"name": "norm", "source": NORM_SRC, "variant": "torch-cuda", "backend": "cuda"}})
    zeta.lock()
    mirror = tmp_path / "m"
    rc, out, err = frt_main("mirror", str(mirror), "--project", str(tp.root), "--machine", CPU_MACHINE)
    assert rc == 1
    assert "error: mirror: model 'zeta' selects no locked variant for machine(s) epyc-7b13 (cpu x86_64)" in err
    assert not mirror.exists()  # tiny, which selects, was not mirrored first


@pytest.mark.parametrize("argv, message", [
    (["--cells", "--all-variants"], "--all-variants and --cells exclude each other"),
    (["--cells", "--machine", CPU_MACHINE], "declared machines (--arch/--machine) and --cells exclude each other"),
    (["--variant", "torch-cpu", *H200], "--variant and declared machines (--arch/--machine) exclude each other"),
    (["--machine", "arch=9.0"], "--machine 'arch=9.0': a machine needs arch= and device-class="),
    (["--machine", "arch=9.0,gpu=h200"],
     "--machine 'arch=9.0,gpu=h200': 'gpu=h200' is not KEY=VALUE with KEY one of arch, device-class, backend, "),
    (["--machine", "arch=9.0,arch=8.0,device-class=h200"], "--machine 'arch=9.0,arch=8.0,device-class=h200': 'arch=8.0' repeats"),
    (["--machine", "arch=9.0,device-class=h200,backend=cuba"], "--machine: argument --backend: invalid choice: 'cuba'"),
    (["--machine", "arch=9.0,device-class=h200,software=torch"], "--software: expected KEY=VALUE pairs separated by commas, got 'torch'"),
])
def test_conflicting_or_malformed_selections_exit_2(hub, capsys, tmp_path, argv, message):
    tp, _ = hub
    rc, out, err = frt_main("mirror", str(tmp_path / "m"), "--project", str(tp.root), *argv)
    assert rc == 2, err
    assert f"error: {message}" in err
    assert not (tmp_path / "m").exists()


def _run_hint(hint: str, capsys, project: Path) -> int:
    cmd = shlex.split(hint.split("`")[1])
    if cmd[0] == "rm":
        for path in cmd[2:]:
            os.remove(path)
        return 0
    assert cmd[0] == "frt"
    rc, out, err = frt_main(*cmd[1:], "--project", str(project))
    assert rc == 0, err
    return rc


def test_verify_hints_name_the_commands_that_fix_the_mirror(hub, capsys, tmp_path):
    tp, lock = hub
    mirror = tmp_path / "m"
    assert frt_main("mirror", str(mirror), "--project", str(tp.root), "--machine", CPU_MACHINE)[0] == 0
    from frt_dist.loader import repo_folder

    snap = mirror / repo_folder(REMOTE) / "snapshots" / lock.packages[REMOTE].snapshot / "build" / "torch-cpu"
    (snap / "scale" / "__init__.py").unlink()
    (snap / "scale" / "extra.py").write_text("evil = 1\n")
    rc, out, err = frt_main("verify", "--project", str(tp.root), "--model", "tiny", "--mirror", str(mirror))
    assert rc == 1
    hints = [line[len("hint: "):] for line in err.splitlines() if line.startswith("hint: ")]
    assert hints == [f"refill the mirror with `frt mirror {mirror} --model tiny --variant torch-cpu`",
                     f"remove what the lock does not know with `rm -- {snap / 'scale' / 'extra.py'}`"]
    for hint in hints:  # the hints are the fix
        assert _run_hint(hint, capsys, tp.root) == 0
    assert frt_main("verify", "--project", str(tp.root), "--model", "tiny", "--mirror", str(mirror))[0] == 0
    (mirror / repo_folder(REMOTE) / "refs" / "v1").unlink()  # a ref only: the variants the mirror holds
    rc, out, err = frt_main("verify", "--project", str(tp.root), "--mirror", str(mirror))
    [hint] = [line for line in err.splitlines() if line.startswith("hint: ")]
    assert hint == f"hint: refill the mirror with `frt mirror {mirror} --variant torch-cpu`"
    assert _run_hint(hint, capsys, tp.root) == 0
    assert frt_main("verify", "--project", str(tp.root), "--mirror", str(mirror))[0] == 0


def test_verify_hint_names_the_lockfile_to_regenerate(capsys, tmp_path):
    tp = tiny_project(tmp_path)  # path packages: `frt lock` runs here without a Hub
    tp.lock()
    text = tp.lock_path.read_text("utf-8")
    tp.lock_path.write_text(text.replace('lock-digest = "sha256:', 'lock-digest = "sha256:0', 1), "utf-8")
    rc, out, err = frt_main("verify", "--project", str(tp.root))
    assert rc == 1
    [hint] = [line for line in err.splitlines() if line.startswith("hint: ")]
    assert hint == "hint: regenerate the lockfile with `frt lock --model tiny`"
    assert _run_hint(hint, capsys, tp.root) == 0
    assert frt_main("verify", "--project", str(tp.root))[0] == 0
