"""metadata.json as kernel teams publish it: no ``digest`` (older
kernel-builder output) is locked with digests frt computes; metadata without
``name``/``id`` and a variant without metadata.json are refused as kernels refuses them."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import pytest
from kernels._rust import Metadata  # the oracle: kernels' own metadata parser

from frt_dist import KernelUnavailable, loader
from frt_dist.distribution.hub import HubClient
from frt_dist.documents.lockfile import Lockfile
from frt_dist.documents.metadata import parse_variant_metadata
from helpers.factories import CPU, REMOTE, hub_manifest, start_hub, tiny_project

SCALE = "t-org/scale"


@pytest.fixture(autouse=True)
def fresh(fresh_loader, monkeypatch, tmp_path):
    monkeypatch.setenv("FRT_STORE", str(tmp_path / "store"))


def _strip(meta_path: Path, *fields: str) -> dict:
    meta = json.loads(meta_path.read_bytes())
    for f in fields:
        meta.pop(f)
    meta_path.write_text(json.dumps(meta, indent=2), "utf-8")
    return meta


def _recomputed(vdir: Path) -> dict[str, str]:
    """kernels' digest rule recomputed here: base64 sha256 of every file but metadata.json."""
    return {p.relative_to(vdir).as_posix(): base64.b64encode(hashlib.sha256(p.read_bytes()).digest()).decode()
            for p in sorted(vdir.rglob("*")) if p.is_file() and p.name != "metadata.json"}


def test_path_package_without_digest_locks_with_frt_digests_and_loads_checked(tmp_path):
    tp = tiny_project(tmp_path)
    vdir = tp.root / "packages" / "scale" / "build" / "torch-cpu"
    meta = _strip(vdir / "metadata.json", "digest")
    Metadata.from_bytes(json.dumps(meta).encode())  # kernels accepts it: digest is optional upstream
    lock = tp.lock()
    v = lock.packages[SCALE].variants["torch-cpu"]
    assert v.digest_source == "frt" and v.algorithm == "sha256" and v.files == _recomputed(vdir)
    text = tp.lock_path.read_text()
    assert text.count('digest-source = "frt"') == 1  # recorded for this variant only (norm has a digest)
    assert Lockfile.read(tp.lock_path).packages[SCALE].variants["torch-cpu"] == v  # read back the same
    assert loader.load_locked(lock, SCALE, hardware=CPU).module.scale is not None
    # the computed digests are enforced like published ones
    loader._forget_all()
    (vdir / "scale" / "__init__.py").write_text("def scale(x, w):\n    return x\n")
    with pytest.raises(KernelUnavailable, match="do not match the locked digests"):
        loader.load_locked(lock, SCALE, hardware=CPU)


def test_unlocked_load_of_a_variant_without_digest_is_refused(tmp_path, monkeypatch):
    tp = tiny_project(tmp_path)
    vdir = tp.root / "packages" / "scale" / "build" / "torch-cpu"
    _strip(vdir / "metadata.json", "digest")
    from frt_dist.loader import core

    want = core._Want(SCALE, 1, "x", "torch-cpu", "path", "project-path", "test")
    with pytest.raises(KernelUnavailable) as ei:
        core._self_declared(want, vdir)
    assert "declares no digest" in str(ei.value) and "frt lock" in ei.value.hints[0]


def test_hub_package_without_digest_is_locked_from_its_files(monkeypatch, tmp_path):
    server, _ = start_hub(monkeypatch, tmp_path)
    try:
        from helpers.hubserver import kernel_variant_files

        files = kernel_variant_files(name="scale", variant="torch-cpu",
                                     module_files={"__init__.py": b"def scale(x, w):\n    return x * w\n",
                                                   "ops.py": b"X = 1\n"})
        meta = json.loads(files["build/torch-cpu/metadata.json"])
        declared = meta.pop("digest")["files"]
        files["build/torch-cpu/metadata.json"] = json.dumps(meta).encode()
        commit = server.commit(REMOTE, files, branch="v1")
        tp = tiny_project(tmp_path, "hubproj", manifest=hub_manifest())
        tp.hub = HubClient(endpoint=server.url)
        lock = tp.lock()
        v = lock.packages[REMOTE].variants["torch-cpu"]
        assert lock.packages[REMOTE].revision == commit
        # what frt computed equals what kernel-builder would have declared
        assert v.digest_source == "frt" and v.files == declared
        assert loader.load_locked(lock, REMOTE, hardware=CPU).module.scale(2, 3) == 6
    finally:
        server.stop()


BASE = {"name": "addone", "id": "_addone_1", "version": 1, "license": "mit", "python-depends": [],
        "backend": {"type": "cpu"}}


@pytest.mark.parametrize("missing", ["name", "id"])
def test_metadata_without_name_or_id_is_refused_with_a_hint_as_kernels_refuses_it(missing):
    meta = {k: v for k, v in BASE.items() if k != missing}
    raw = json.dumps(meta).encode()
    with pytest.raises(ValueError, match=f"missing field `{missing}`"):
        Metadata.from_bytes(raw)  # the oracle refuses it too
    with pytest.raises(KernelUnavailable) as ei:
        parse_variant_metadata(raw, repo=SCALE, variant="torch-universal")
    assert f"metadata.json: {missing}: missing" in str(ei.value)
    assert ei.value.reasons[0]["field"] == missing and "older kernel-builder" in ei.value.hints[0]
    Metadata.from_bytes(json.dumps(BASE).encode())
    assert parse_variant_metadata(json.dumps(BASE).encode(), repo=SCALE, variant="torch-universal").module_id == "_addone_1"


def test_universal_variant_without_metadata_json_is_refused_with_a_hint(tmp_path):
    tp = tiny_project(tmp_path)
    build = tp.root / "packages" / "scale" / "build"
    (build / "torch-cpu").rename(build / "torch-universal")
    (build / "torch-universal" / "metadata.json").unlink()
    from frt_dist.lock.build import lock_model

    with pytest.raises(KernelUnavailable) as ei:
        lock_model(tp.project, tp.model, warn=lambda m: None)
    assert "build/torch-universal/metadata.json not found" in str(ei.value)
    assert "pre-0.17 torch-universal" in ei.value.hints[0]
    assert not tp.lock_path.exists()  # nothing half-written
