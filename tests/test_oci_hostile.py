"""Issue 37 item 4, SPEC §16 item 51: nothing a registry says is trusted. Against a real registry
(tests/helpers/ociregistry.py) and a hostile one in front of it (``HostileRegistry``): a tag moved to
another artefact, a blob swapped in the registry's storage, a registry that redirects to another host
with credentials, trickles, lies about sizes, or answers with malformed manifests. Each is refused with
an ``error:`` naming the registry and the file (or bounded), never a traceback or a hang: every wait
here is bounded by FRT_STORE_TIMEOUT / FRT_STORE_DEADLINE."""

from __future__ import annotations

import hashlib
import json
import sys

import pytest

import frt_dist
from frt_dist.distribution.objstore import open_store, parse_location
from frt_dist.errors import KernelUnavailable
from helpers.factories import CPU, SCALE_SRC, tiny_project, variant_files, write_variant
from helpers.frt import frt_main
from helpers.ociregistry import HostileRegistry

pytestmark = [pytest.mark.usefixtures("fresh_loader")]

RECEIPTS = [("solo", "decode"), ("solo", "prefill")]
SCALE = "build/torch-cpu/scale/__init__.py"
SCALE_ID = "_frt_test_scale_v1"


@pytest.fixture
def pub(tmp_path, oci_registry, monkeypatch):
    cfg = tmp_path / "docker-config"
    cfg.mkdir()
    monkeypatch.setenv("DOCKER_CONFIG", str(cfg))
    monkeypatch.setenv("FRT_STORE_TIMEOUT", "2")
    monkeypatch.setenv("FRT_STORE_ATTEMPTS", "2")
    tp = tiny_project(tmp_path)
    lock = tp.lock(receipts=RECEIPTS)
    url = f"oci://{oci_registry.repo()}:prod"
    r = frt_main(["publish", url, "--variant", "torch-cpu", "--json"], cwd=tp.root)
    assert r.code == 0, r.err
    return tp, lock, url, json.loads(r.out)["models"][0]["artefact"]


def _scale_digest(tp) -> str:
    return "sha256:" + hashlib.sha256((tp.root / "packages/scale" / SCALE).read_bytes()).hexdigest()


def _refused_load(tp, mirror: str) -> KernelUnavailable:
    with pytest.raises(KernelUnavailable) as ei:
        frt_dist.load("tiny", project=tp.root, hardware=CPU, mirror=mirror)
    assert SCALE_ID not in sys.modules  # nothing imported
    return ei.value


def test_a_tag_moved_to_another_locks_artefact_loses_this_locks_files_and_a_pinned_digest_does_not_move(
        pub, tmp_path):
    tp, lock, url, art = pub
    other = tiny_project(tmp_path, name="other")  # a new release of the package, locked and published to the same tag
    write_variant(other.root / "packages/scale/build/torch-cpu",
                  variant_files("scale", source=SCALE_SRC + "# v2\n"))
    other.lock(receipts=RECEIPTS)
    r = frt_main(["publish", url, "--variant", "torch-cpu"], cwd=other.root)
    assert r.code == 0, r.err
    exc = _refused_load(tp, url)  # the node's own lock: the tag now names an artefact without its file
    scale = next(r["reason"] for r in exc.reasons if r.get("path") == SCALE)
    assert scale.startswith(f"t-org/scale {SCALE}: object {url} (sha256:") and scale.endswith("is not in the store")
    plan = frt_dist.load("tiny", project=tp.root, hardware=CPU, mirror=art["reference"])  # the pinned one
    assert plan.packages["t-org/scale"].location == art["reference"]


def test_a_blob_swapped_in_the_registrys_storage_is_refused_naming_registry_and_file(pub, oci_registry, tmp_path):
    tp, lock, url, art = pub
    blob = oci_registry.blob_path(_scale_digest(tp))
    good = blob.read_bytes()
    blob.write_bytes(b"raise SystemExit('pwned')\n" + b"#" * (len(good) - 26))  # same size, other bytes
    try:
        _swapped(tp, url, tmp_path)
    finally:
        blob.write_bytes(good)  # the registry's blob store is shared by every repository of the session


def _swapped(tp, url, tmp_path):
    exc = _refused_load(tp, url)
    assert "does not match the lock" in str(exc) and f"{url}" in str(exc) and f"t-org/scale {SCALE}" in str(exc)
    r = frt_main(["mirror", str(tmp_path / "m"), "--from", url, "--variant", "torch-cpu"], cwd=tp.root)
    assert r.code == 1 and r.err.startswith("error:") and "Traceback" not in r.err
    assert url in r.err and SCALE in r.err and "do not match the lock" in r.err
    assert not list((tmp_path / "m").rglob("scale/__init__.py"))  # nothing unverified became visible
    r = frt_main(["verify", "--mirror", url], cwd=tp.root)
    assert r.code == 1 and "mismatched:" in r.out and SCALE in r.out and url in r.out
    assert "frt publish" in r.err and "Traceback" not in r.err


def test_a_redirect_to_another_host_carries_no_credentials_and_the_bytes_are_still_checked(pub, oci_registry,
                                                                                          tmp_path, monkeypatch):
    tp, lock, url, art = pub
    bad = HostileRegistry(oci_registry.host, mode="redirect").start()
    try:
        bad.docker_config(tmp_path / "creds")
        monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "creds"))
        via = url.replace(oci_registry.host, bad.host)
        plan = frt_dist.load("tiny", project=tp.root, hardware=CPU, mirror=via)
        assert plan.packages["t-org/scale"].location == via
        assert any(auth for m, p, auth in bad.log if "/manifests/" in p)  # the registry itself got them
        assert len(bad.side_log) == 2 and not any("Authorization" in h or "authorization" in h for h in bad.side_log)
        assert all(bad.password not in json.dumps(h) for h in bad.side_log)
        # no credentials at all: an exit-2 refusal naming the registry, never the secret
        monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "empty"))
        r = frt_main(["verify", "--mirror", via], cwd=tp.root)
        assert r.code == 2 and f"error: {via}: the registry wants credentials (401)" in r.err
        assert "docker login" in r.err and bad.password not in r.err + r.out
    finally:
        bad.stop()


def test_a_token_service_gets_the_credentials_the_registry_only_its_token_and_a_plain_http_realm_is_refused(
        pub, oci_registry, tmp_path, monkeypatch):
    tp, lock, url, art = pub
    bad = HostileRegistry(oci_registry.host, mode="token").start()
    try:
        bad.docker_config(tmp_path / "creds")
        monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "creds"))
        via = url.replace(oci_registry.host, bad.host)
        plan = frt_dist.load("tiny", project=tp.root, hardware=CPU, mirror=via)
        assert plan.packages["t-org/scale"].location == via
        tokens = [h for h in bad.side_log if h["path"].startswith("/token")]
        assert len(tokens) == 1 and "service=hostile" in tokens[0]["path"]  # asked once, for the challenge's scope
        assert all(auth for m, p, auth in bad.log[1:])  # then every request carries the token
        bad.realm = "http://token.example.invalid/token"  # a token service that would see the password in clear
        r = frt_main(["verify", "--mirror", via], cwd=tp.root)
        assert r.code == 2 and "token service http://token.example.invalid is not HTTPS; refused" in r.err
        assert bad.password not in r.err + r.out and "Traceback" not in r.err
    finally:
        bad.stop()


def test_a_registry_that_trickles_is_stopped_at_the_deadline(pub, oci_registry, tmp_path, monkeypatch):
    tp, lock, url, art = pub
    bad = HostileRegistry(oci_registry.host, mode="trickle").start()
    monkeypatch.setenv("FRT_STORE_DEADLINE", "1")  # each byte comes well inside FRT_STORE_TIMEOUT
    try:
        exc = _refused_load(tp, url.replace(oci_registry.host, bad.host))
        assert "FRT_STORE_DEADLINE=1s" in str(exc) and bad.host in str(exc) and "build/torch-cpu/" in str(exc)
        assert exc.reasons[0]["kind"] == "store"
    finally:
        bad.stop()


@pytest.mark.parametrize("mode", ["longer", "unsized"])
def test_a_registry_that_lies_about_a_blobs_size_is_refused(pub, oci_registry, tmp_path, mode):
    tp, lock, url, art = pub
    bad = HostileRegistry(oci_registry.host, mode=mode).start()
    try:
        via = url.replace(oci_registry.host, bad.host)
        r = frt_main(["mirror", str(tmp_path / "m"), "--from", via, "--variant", "torch-cpu"], cwd=tp.root)
        assert r.code == 1 and r.err.startswith("error:") and "Traceback" not in r.err, r.err
        assert bad.host in r.err and "/build/torch-cpu/" in r.err and " layer kernels--t-org--" in r.err  # registry, file
        assert ("the registry says the blob is" if mode == "longer" else "sent more than the") in r.err
        assert not list((tmp_path / "m").rglob("*.py"))
    finally:
        bad.stop()


def _manifest_of(reg, url) -> dict:
    loc = parse_location(url)
    return json.loads(reg.get(f"/v2/{loc.repository}/manifests/{loc.reference}",
                              accept="application/vnd.oci.image.manifest.v1+json")[2])


@pytest.mark.parametrize("spoil, says", [
    (lambda d: b"{not json", "not JSON"),
    (lambda d: {**d, "layers": "x"}, "layers is not a list"),
    (lambda d: {**d, "schemaVersion": 1}, "schemaVersion is not 2"),
    (lambda d: {**d, "artifactType": "application/vnd.oci.image.config.v1+json"}, "not an artefact frt pushed"),
    (lambda d: {**d, "layers": [{**la, "digest": "sha256:zz"} for la in d["layers"]]}, "layers[0].digest"),
    (lambda d: {**d, "layers": [{**la, "size": -1} for la in d["layers"]]}, "layers[0].size"),
    (lambda d: {**d, "layers": [{**la, "annotations": {"org.opencontainers.image.title": "../../etc/x"}}
                                for la in d["layers"]]}, "no plain relative title"),
    (lambda d: {**d, "layers": d["layers"] + d["layers"][:1]}, "twice"),
])
def test_a_malformed_manifest_is_refused_naming_the_registry_and_the_field(pub, oci_registry, tmp_path, spoil, says):
    tp, lock, url, art = pub
    bad = HostileRegistry(oci_registry.host, mode="manifest").start()
    try:
        got = spoil(_manifest_of(oci_registry, url))
        bad.manifest_body = got if isinstance(got, bytes) else json.dumps(got).encode()
        via = url.replace(oci_registry.host, bad.host)
        r = frt_main(["mirror", str(tmp_path / "m"), "--from", via, "--variant", "torch-cpu"], cwd=tp.root)
        assert r.code == 1 and r.err.startswith(f"error: {via}") and says in r.err and "Traceback" not in r.err, r.err
        # a pinned digest is not taken from the registry's word: the bytes must hash to it
        pinned = f"{parse_location(via).repo_url}@{art['digest']}"
        with pytest.raises(Exception) as ei:
            with open_store(pinned, reading=True) as store:
                store.manifest()
        assert "not the pinned one" in str(ei.value) and ei.value.exit_code == 1
    finally:
        bad.stop()
