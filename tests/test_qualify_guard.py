"""`frt qualify` says what is wrong before it measures —
a host object missing part of its interface, a receipts folder it cannot write — and a write that
fails at the end (a full disk) is one clean error with nothing partial left."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest

from helpers.frt import frt_main, frt_process
from helpers.gpu import needs_no_gpu
from helpers.paths import HELPERS

TOYHOST = (HELPERS / "toyhost.py").read_text()


def broken_host(tmp_path, patch: str):
    """A `toyhost` module (found first on PYTHONPATH) whose block has ``patch`` applied."""
    d = tmp_path / f"host-{uuid.uuid4().hex[:8]}"
    d.mkdir()
    (d / "toyhost.py").write_text(TOYHOST + "\n" + patch)
    return {"PYTHONPATH": f"{d}{os.pathsep}{HELPERS}"}


def qualify(project, *extra, env=None):
    return frt_process(["qualify", "--model", "toyq", "--route", "fastscale", *extra], cwd=project,
                   env=env or {"PYTHONPATH": str(HELPERS)})


@pytest.fixture
def qualify_in_process(monkeypatch, capsys):
    """``frt qualify`` through ``frt_dist.cli.main.main`` in this process (torch is already imported here:
    a subprocess spends ~2 s importing it again), with ``env["PYTHONPATH"]``'s first folder put
    first on ``sys.path`` and any ``toyhost`` already imported set aside, as a fresh process with
    that PYTHONPATH would see it. The real-process path (exit code of the console command) is
    covered by ``test_a_factory_with_the_wrong_signature_is_named``, which still uses ``qualify``."""
    def run(project, *extra, env):
        monkeypatch.syspath_prepend(env["PYTHONPATH"].split(os.pathsep)[0])
        monkeypatch.delitem(sys.modules, "toyhost", raising=False)
        r = frt_main("qualify", "--model", "toyq", "--route", "fastscale", *extra, cwd=project)
        sys.modules.pop("toyhost", None)  # the broken one; monkeypatch puts any earlier one back
        return r

    return run


@pytest.mark.parametrize("patch, missing", [
    ("del ToyBlock.__init__\n"
     "def _init(self, seed=0):\n"
     "    g = torch.Generator().manual_seed(seed)\n"
     "    self.w = torch.randn(8, generator=g)\n"
     "    self.seams = {'norm': host_scale}\n"
     "ToyBlock.__init__ = _init\n", "host_seams (a mapping)"),
    ("del ToyBlock.bind\n", "bind() (a method)"),
    ("del ToyBlock.detach\ndel ToyBlock.make_inputs\n", "detach() (a method), make_inputs() (a method)"),
    ("build_host = lambda phase=None, *, seed=0: object()\n",
     "__call__ (it is not callable), seams (a mapping), host_seams (a mapping), bind() (a method), "
     "detach() (a method), make_inputs() (a method)"),
])
def test_a_host_object_missing_part_of_its_interface_is_named(qproject, tmp_path, patch, missing,
                                                             qualify_in_process):
    r = qualify_in_process(qproject, env=broken_host(tmp_path, patch))
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and "AttributeError" not in r.stderr
    kind = "object" if "object()" in patch else "ToyBlock"
    assert (f"error: host-entry 'toyhost:build_host': the host object it returned ({kind}) is missing {missing}"
            in r.stderr)
    assert "hint: a host-entry is a factory (phase, *, seed) -> block; the block provides" in r.stderr
    assert "timing" not in r.stderr  # refused before measuring
    assert not (qproject / "receipts" / "toyq").exists()


def test_host_seams_without_the_routes_seam_is_named(qproject, tmp_path, qualify_in_process):
    patch = ("_orig = ToyBlock.__init__\n"
             "def _init(self, seed=0):\n"
             "    _orig(self, seed)\n"
             "    self.host_seams = {'other': host_scale}\n"
             "ToyBlock.__init__ = _init\n")
    r = qualify_in_process(qproject, env=broken_host(tmp_path, patch))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert ("error: host-entry 'toyhost:build_host': the host object's host_seams (ToyBlock) has no seam 'norm' "
            "that the route binds (it has: other)") in r.stderr


@pytest.mark.subprocess
def test_a_factory_with_the_wrong_signature_is_named(qproject, tmp_path):
    r = qualify(qproject, env=broken_host(tmp_path, "def build_host(phase):\n    return ToyBlock()\n"))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert ("error: host-entry 'toyhost:build_host': calling it as factory('decode', seed=0) raised TypeError: "
            in r.stderr)


def test_make_inputs_returning_no_tensor_is_named(qproject, tmp_path, qualify_in_process):
    r = qualify_in_process(qproject, env=broken_host(tmp_path, "ToyBlock.make_inputs = lambda self, rows, seed=0: [rows]\n"))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "error: host-entry 'toyhost:build_host': make_inputs(1, seed=1) returned a list, not a tensor" in r.stderr


# ---------------------------------------------------------------------------
# the receipts folder: read-only (a tmpfs mounted ro: root ignores permission bits), not a folder,
# and a disk that fills up


def _mount(path, opts: str):
    path.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(path)], capture_output=True, text=True)
    if r.returncode:
        pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip() or 'mount failed'}); "
                    "the read-only and full-disk cases need one (root in CI)")
    return path


@pytest.fixture
def mounts():
    made = []

    def mount(path, opts):
        made.append(_mount(path, opts))
        return path

    yield mount
    for p in reversed(made):
        subprocess.run(["umount", "-l", str(p)], capture_output=True)


@needs_no_gpu
@pytest.mark.subprocess
def test_a_read_only_receipts_folder_is_refused_before_measuring(qproject, mounts):
    ro = mounts(qproject / "ro", "ro,size=1m")
    r = qualify(qproject, "--out", str(ro / "receipts"))
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    assert ("error: receipts folder ro/receipts (its nearest existing folder ro) cannot be written: "
            "Read-only file system") in r.stderr
    assert "hint: qualification writes one receipt per band there" in r.stderr
    assert "parity" not in r.stderr and "timing" not in r.stderr  # nothing was measured


@needs_no_gpu
@pytest.mark.subprocess
def test_the_projects_own_read_only_receipts_folder_is_refused_before_measuring(qproject, mounts):
    (qproject / "receipts" / "toyq").mkdir(parents=True)
    mounts(qproject / "receipts" / "toyq", "ro,size=1m")
    r = qualify(qproject)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "error: receipts folder receipts/toyq cannot be written: Read-only file system" in r.stderr
    assert "timing" not in r.stderr


@pytest.mark.subprocess
def test_a_receipts_path_that_is_a_file_is_refused(qproject):
    (qproject / "afile").write_text("x")
    r = qualify(qproject, "--out", str(qproject / "afile" / "receipts"))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "error: receipts folder afile/receipts: afile is not a folder" in r.stderr


@needs_no_gpu
@pytest.mark.subprocess
def test_a_full_disk_at_the_end_is_a_clean_error_with_nothing_partial(qproject, mounts):
    full = mounts(qproject / "full", "size=64k")
    out = full / "receipts"
    out.mkdir()
    fd = os.open(full / "filler", os.O_WRONLY | os.O_CREAT)  # fill the tmpfs: an empty probe file still fits
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError:
        pass
    finally:
        os.close(fd)
    r = qualify(qproject, "--out", str(out))
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    assert "error: cannot write the receipt full/receipts/fastscale--decode--fp32--" in r.stderr
    assert ": No space left on device" in r.stderr
    assert "hint: nothing partial was left" in r.stderr
    assert os.listdir(out) == []  # no receipt, no temp file


@needs_no_gpu
def test_both_sides_of_the_timing_run_on_one_block_with_its_seams_switched(qproject, monkeypatch):
    """Two block objects (the same weights, in different memory) timed 2x apart in one run and
    ~1.0x in the next (bench/RESULTS.md): the host side and the route side of each round must be
    the one block, the host's seam callable bound for one and the route's for the other."""
    import toyhost

    from frt_dist.qualify import run as q

    from test_qualify import _lock

    seen = []
    real_timing = q.device_timing

    def spy(torch, host, route, inputs, **kw):
        x = next(iter(inputs.values()))
        calls = []
        orig = toyhost.ToyBlock.__call__
        monkeypatch.setattr(toyhost.ToyBlock, "__call__",
                            lambda self, x: (calls.append((id(self), self.seams["norm"])), orig(self, x))[1])
        host(x)
        route(x)
        monkeypatch.setattr(toyhost.ToyBlock, "__call__", orig)
        seen.append(calls)
        return real_timing(torch, host, route, inputs, **kw)

    monkeypatch.setattr(q, "device_timing", spy)
    [res] = q.qualify(_lock(qproject), "fastscale", root=qproject)
    assert res.passed, res.failures
    [[(host_block, host_fn), (route_block, route_fn)]] = seen
    assert host_block == route_block  # one object
    assert host_fn is toyhost.host_scale and route_fn is not toyhost.host_scale  # only the seam differs
