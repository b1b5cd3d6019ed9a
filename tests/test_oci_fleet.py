"""Issue 37 items 1, 2 and 4, SPEC §16 items 49–50: ``oci://REGISTRY/REPOSITORY[:TAG]`` as a mirror location,
against a real OCI registry (Debian's docker-registry, its own process: tests/helpers/ociregistry.py), with
the ORAS project's own client (``oras``) as the independent oracle: what frt pushes, ``oras pull`` unpacks
into a folder that is a valid ``FRT_MIRROR``."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys

import pytest

import frt_dist
from frt_dist.distribution.mirror import verify_mirror
from frt_dist.distribution.objstore import StoreAccess, open_store, parse_location
from frt_dist.loader import remote
from helpers.factories import CPU, tiny_project
from helpers.frt import frt_main
from helpers.s3server import FaultProxy

pytestmark = [pytest.mark.usefixtures("fresh_loader")]

RECEIPTS = [("solo", "decode"), ("solo", "prefill")]


@pytest.fixture
def oci_env(tmp_path, monkeypatch):
    """An empty Docker config (no credentials from the machine), for this process and subprocesses."""
    cfg = tmp_path / "docker-config"
    cfg.mkdir()
    monkeypatch.setenv("DOCKER_CONFIG", str(cfg))
    return cfg


@pytest.fixture
def published(tmp_path, oci_registry, oci_env):
    """The tiny project (receipts for route ``solo``) published with `frt publish oci://…:prod --all-variants`."""
    tp = tiny_project(tmp_path)
    lock = tp.lock(receipts=RECEIPTS)
    url = f"oci://{oci_registry.repo()}:prod"
    r = frt_main(["publish", url, "--all-variants", "--json"], cwd=tp.root)
    assert r.code == 0, r.err
    art = json.loads(r.out)["models"][0]["artefact"]
    return tp, lock, url, art


def _oras():
    import oras.client

    return oras.client.OrasClient(insecure=True)  # plain HTTP: the registry is on loopback


def _manifest(reg, ref: str) -> dict:
    loc = parse_location(ref)
    status, _, body = reg.get(f"/v2/{loc.repository}/manifests/{loc.reference}",
                              accept="application/vnd.oci.image.manifest.v1+json")
    assert status == 200
    return json.loads(body)


def test_publish_pushes_one_artefact_per_lock_each_file_a_layer_titled_with_its_mirror_path(published, oci_registry):
    tp, lock, url, art = published
    assert art["tag"] == url and art["reference"] == f"{url.rsplit(':', 1)[0]}@{art['digest']}"
    doc = _manifest(oci_registry, url)
    titles = {la["annotations"]["org.opencontainers.image.title"]: la for la in doc["layers"]}
    want = {"lockfiles/tiny.lock"}
    for pkg in lock.packages.values():
        folder = "kernels--" + pkg.repo.replace("/", "--")
        want |= {f"{folder}/refs/v{pkg.version}", f"{folder}/refs/main"}
        for v in pkg.variants:
            base = tp.root / pkg.path / "build" / v
            for p in base.rglob("*"):
                if p.is_file():
                    rel = p.relative_to(base).as_posix()
                    title = f"{folder}/snapshots/{pkg.snapshot}/build/{v}/{rel}"
                    want.add(title)
                    assert titles[title]["digest"] == "sha256:" + hashlib.sha256(p.read_bytes()).hexdigest()
    assert set(titles) == want  # the lock's files, its refs and the lockfile: nothing else
    lock_layer = titles["lockfiles/tiny.lock"]
    status, _, body = oci_registry.get(f"/v2/{parse_location(url).repository}/blobs/{lock_layer['digest']}")
    assert status == 200 and body == tp.lock_path.read_bytes()
    assert doc["artifactType"] == "application/vnd.frt-dist.lock.v1"


@pytest.mark.slow
@pytest.mark.subprocess
def test_oras_pull_unpacks_a_valid_mirror_and_a_node_with_only_lockfiles_loads_from_it_offline(published, tmp_path,
                                                                                              monkeypatch):
    """The scenario of the issue: publisher → `oras pull` into a folder → a node with only lockfiles/ and
    HF_HUB_OFFLINE=1 loads from that folder; a second node loads from oci://…@sha256:… directly."""
    tp, lock, url, art = published
    pulled = tmp_path / "pulled"
    _oras().pull(target=url.removeprefix("oci://"), outdir=str(pulled))
    assert verify_mirror(lock, pulled, all_variants=True) == []  # a complete, valid mirror folder
    node = tmp_path / "node"
    (node / "lockfiles").mkdir(parents=True)
    shutil.copy(tp.lock_path, node / "lockfiles" / "tiny.lock")
    script = ("import json, frt_dist\nfrom frt_dist.system.hardware import Hardware\nfrom frt_dist.loader import remote\n"
              "hw = Hardware(arch='x86_64', device_class='test-cpu', backend='cpu', software={'torch': '2.13'})\n"
              "plan = frt_dist.load('tiny', hardware=hw)\nimport torch\n"
              "out = plan.entry('act', 'decode')(torch.ones(2, 8), torch.full((8,), 2.0)).sum().item()\n"
              "print(json.dumps({'packages': {r: [p.source, p.location] for r, p in plan.packages.items()}, "
              "'out': out, 'stats': remote.stats()}))\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FRT_", "HF_", "KERNELS_"))}
    env.update(HF_HUB_OFFLINE="1", FRT_MIRROR=str(pulled), PYTHONDONTWRITEBYTECODE="1",
               XDG_CACHE_HOME=str(tmp_path / "node-cache"), HF_HOME=str(tmp_path / "node-hf"))
    r = subprocess.run([sys.executable, "-c", script], cwd=node, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    (source, location), = doc["packages"].values()
    assert list(doc["packages"]) == ["t-org/scale"] and source == "mirror" and location.startswith(str(pulled))
    assert doc["out"] == 32.0 and doc["stats"]["objects"] == 0  # from the folder: nothing from any store
    # the second node: the same lockfiles/, straight from the pinned artefact (in this process: torch is here)
    remote.reset_stats()
    monkeypatch.setenv("FRT_MIRROR", art["reference"])
    plan = frt_dist.load("tiny", project=node, hardware=CPU)
    assert plan.packages["t-org/scale"].location == art["reference"]
    assert remote.stats()["objects"] == 2  # the bound variant's two files only, each hashed on its way in
    import torch

    assert plan.entry("act", "decode")(torch.ones(2, 8), torch.full((8,), 2.0)).sum().item() == 32.0


def test_a_second_publish_uploads_no_blob_and_gives_the_same_digest(published, oci_registry):
    tp, lock, url, art = published
    proxy = FaultProxy(f"http://{oci_registry.host}").start()
    try:
        via = url.replace(oci_registry.host, proxy.url.removeprefix("http://"))
        r = frt_main(["publish", via, "--all-variants", "--json"], cwd=tp.root)
        assert r.code == 0, r.err
        again = json.loads(r.out)["models"][0]
        assert again["artefact"]["digest"] == art["digest"] and again["uploaded"] == 0
        assert [p for m, p in proxy.log if m in ("POST", "PATCH")] == []  # no upload started: every blob HEADed first
        assert [p for m, p in proxy.log if m == "PUT"] == [f"/v2/{parse_location(url).repository}/manifests/prod"]
    finally:
        proxy.stop()


def test_load_mirror_from_and_verify_read_the_artefact_and_a_pinned_digest(published, tmp_path):
    tp, lock, url, art = published
    remote.reset_stats()
    plan = frt_dist.load("tiny", project=tp.root, hardware=CPU, mirror=url)
    assert plan.packages["t-org/scale"].location == url and remote.stats()["objects"] == 2
    r = frt_main(["mirror", str(tmp_path / "m"), "--from", url, "--all-variants"], cwd=tp.root)
    assert r.code == 0 and "4 blob(s) fetched" in r.out, r.err
    assert verify_mirror(lock, tmp_path / "m", all_variants=True) == []
    r = frt_main(["verify", "--mirror", art["reference"]], cwd=tp.root)
    assert r.code == 0 and "9 layer(s) unpacked and checked" in r.out, r.err


def test_addresses_plain_http_and_what_a_registry_reference_cannot_be(tmp_path, monkeypatch, oci_env):
    loc = parse_location("oci://reg.example.com:5000/team/frt/kernels:prod")
    assert (loc.registry, loc.repository, loc.tag, loc.digest) == ("reg.example.com:5000", "team/frt/kernels", "prod",
                                                                   "")
    pinned = parse_location("oci://reg.example.com/k@sha256:" + "a" * 64)
    assert pinned.reference == "sha256:" + "a" * 64 and pinned.url.endswith("@sha256:" + "a" * 64)
    for bad, says in [("oci://user:pw@reg.example.com/k", "user name or password"),
                      ("oci://reg.example.com/Upper/k", "not a repository name"),
                      ("oci://reg.example.com/k:bad:tag", "not a repository name"),
                      ("oci://reg.example.com/k@sha256:abc", "not a sha256"),
                      ("oci://reg.example.com", "not oci://REGISTRY/REPOSITORY")]:
        with pytest.raises(StoreAccess) as ei:
            parse_location(bad)
        assert says in str(ei.value) and "pw" not in str(ei.value) and ei.value.exit_code == 2
    # HTTPS unless loopback or FRT_OCI_PLAIN_HTTP=1
    assert open_store("oci://127.0.0.1:1/k").client.base == "http://127.0.0.1:1"
    assert open_store("oci://localhost:1/k").client.base == "http://localhost:1"
    assert open_store("oci://reg.example.com/k").client.base == "https://reg.example.com"
    monkeypatch.setenv("FRT_OCI_PLAIN_HTTP", "1")
    assert open_store("oci://reg.example.com/k").client.base == "http://reg.example.com"
    tp = tiny_project(tmp_path)
    tp.lock()
    r = frt_main(["publish", "oci://127.0.0.1:1/k@sha256:" + "a" * 64], cwd=tp.root)
    assert r.code == 2 and "publish to a tag" in r.err and "Traceback" not in r.err
    shutil.copy(tp.lock_path, tp.lock_path.with_name("second.lock"))  # two lockfiles: one reference holds one
    r = frt_main(["publish", "oci://127.0.0.1:1/k:prod", "--all-variants"], cwd=tp.root)
    assert r.code == 2 and "holds one lock's artefact" in r.err and "--model MODEL" in r.err, r.err
    tp.lock_path.with_name("second.lock").unlink()
    r = frt_main(["receipts", "pull", "oci://127.0.0.1:1/k:prod"], cwd=tp.root)  # receipts travel through a store
    assert r.code == 2 and "frt receipts push s3://" in r.err and "Traceback" not in r.err


def test_a_missing_artefact_is_an_exit_2_refusal_naming_the_reference(published, oci_registry, tmp_path):
    tp, lock, url, art = published
    gone = url.replace(":prod", ":nope")
    with pytest.raises(StoreAccess) as ei:  # as an S3 store with no such bucket: exit 2, the load stops
        frt_dist.load("tiny", project=tp.root, hardware=CPU, mirror=gone)
    assert "no such artefact" in str(ei.value) and gone in str(ei.value) and ei.value.exit_code == 2
    r = frt_main(["mirror", str(tmp_path / "m"), "--from", gone, "--all-variants"], cwd=tp.root)
    assert r.code == 2 and f"error: {gone}: no such artefact" in r.err and "Traceback" not in r.err


def test_a_loads_registry_client_follows_the_registry_settings(monkeypatch, tmp_path):
    """The loader keeps one client per store and environment: a process that points ``DOCKER_CONFIG`` (whose
    credentials the client sends) or ``FRT_OCI_PLAIN_HTTP`` elsewhere between two loads gets a client made
    with the new values, not the first one."""
    from frt_dist.loader import remote

    url = "oci://127.0.0.1:9/frt/kernels:t"  # nothing is asked of the registry to make a client
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "a"))
    first = remote._client(url)
    assert remote._client(url) is first
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "b"))
    second = remote._client(url)
    assert second is not first
    monkeypatch.setenv("FRT_OCI_PLAIN_HTTP", "1")
    assert remote._client(url) not in (first, second)
