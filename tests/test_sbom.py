"""``frt lock --export cyclonedx`` (issue 19 item 5): the lock as a CycloneDX 1.6 SBOM.

The output is validated with cyclonedx-python-lib's own strict JSON-schema validator, and its
content is checked against the lockfile read independently (``tomllib`` and ``json``, not frt's
reader): one component per package at its commit (purl), every locked file's hash, the publisher
signer, the route index and the receipts."""

from __future__ import annotations

import base64
import hashlib
import json
import sys
import tomllib
from pathlib import Path

import pytest

from factories import NORM_SRC, hub_manifest, tiny_project
from frt_dist import publisher
from conftest import run_main as _run

DATA = Path(__file__).parent / "data" / "sigstore"  # real Sigstore test vectors (see its README)
BUNDLE = DATA / "rfc8785-0.1.2-py3-none-any.whl.sigstore"
REPO = "https://github.com/trailofbits/rfc8785.py"
SAN = f"{REPO}/.github/workflows/release.yml@refs/tags/v0.1.2"


@pytest.fixture
def project(monkeypatch, tmp_path):
    """A project with a Hub package (``remote-org/scale`` on a loopback Hub), a path package
    carrying a publisher bundle (sigstore's Verifier stood in for, as in test_publisher.py), and
    accepted receipts."""
    from factories import start_hub
    from frt_dist.hub import HubClient
    from test_publisher import _SigstoreStandIn

    for var in ("FRT_MIRROR", "FRT_LOCK", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    server, _ = start_hub(monkeypatch, tmp_path)
    doc = hub_manifest()
    doc["packages"]["t-org/norm"]["signer"] = {"repository": REPO, "workflows": [f"{REPO}/.github/workflows/release.yml"]}
    tp = tiny_project(tmp_path, manifest=doc, packages={"norm": {"name": "norm", "source": NORM_SRC}})
    tp.hub = HubClient(endpoint=server.url)
    vdir = tp.root / "packages/norm/build/torch-cpu"
    (vdir / "metadata.json.sigstore").write_bytes(BUNDLE.read_bytes())
    monkeypatch.setattr(publisher, "_verifier", lambda path: _SigstoreStandIn({(vdir / "metadata.json").read_bytes()}))
    tp.lock(receipts=[("fast", "decode"), ("solo", "decode", "supported_correct"), ("fast", "prefill")])
    yield tp
    server.stop()


def test_the_sbom_validates_and_holds_what_the_lock_holds(project, tmp_path):
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    out = tmp_path / "sbom.json"
    rc, _, err = _run(["lock", "--export", "cyclonedx", "--project", str(project.root), "-o", str(out)])
    assert rc == 0 and f"wrote {out} (CycloneDX 1.6, 2 package(s)" in err
    text = out.read_text()
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(text) is None  # the library's own schema check
    rc, stdout, _ = _run(["lock", "--export", "cyclonedx", "--project", str(project.root)])
    assert rc == 0 and stdout == text  # byte-deterministic: no timestamp, no random serial

    lock = tomllib.loads(project.lock_path.read_text())
    sbom = json.loads(text)
    assert sbom["specVersion"] == "1.6" and "timestamp" not in sbom["metadata"]
    root = sbom["metadata"]["component"]
    assert (root["name"], root["version"], root["type"]) == ("tiny", lock["lock-digest"], "application")
    comps = {c["bom-ref"]: c for c in sbom["components"]}
    assert len(comps) == len(lock["packages"]) == 2
    for repo, pkg in lock["packages"].items():
        org, name = repo.split("/")
        c = comps[f"{repo}@{pkg['revision']}"]
        if pkg["source"] == "hub":
            assert c["purl"] == f"pkg:huggingface/{org}/{name}@{pkg['revision']}"
        else:
            snap = pkg["revision"].split(":")[1][:40]
            assert c["purl"] == f"pkg:generic/{org}/{name}@{snap}?checksum={pkg['revision']}"
        for vname, v in pkg["variants"].items():
            [vc] = [x for x in c["components"] if x["name"] == f"{name}/{vname}"]
            hashes = {f["name"]: (f["hashes"][0]["alg"], f["hashes"][0]["content"]) for f in vc["components"]}
            want = {f"build/{vname}/metadata.json": ("SHA-256", v["metadata-sha256"].split(":")[1])}
            want.update({f"build/{vname}/{rel}": ("SHA-256", base64.b64decode(b64).hex()) for rel, b64 in v["files"].items()})
            props = {p["name"]: p["value"] for p in vc["properties"]}
            if "signature" in v:
                want[f"build/{vname}/metadata.json.sigstore"] = ("SHA-256", v["signature"]["bundle-sha256"].split(":")[1])
                assert props["frt:signer-identity"] == v["signature"]["identity"] == SAN
                assert props["frt:signer-issuer"] == v["signature"]["issuer"]
                assert props["frt:signature-bundle-sha256"] == "sha256:" + hashlib.sha256(BUNDLE.read_bytes()).hexdigest()
            else:
                assert "frt:signer-identity" not in props
            assert hashes == want
    assert any("signature" in v for p in lock["packages"].values() for v in p["variants"].values())
    # the route index and every receipt, as properties of the model
    props = [(p["name"], p["value"]) for p in root["properties"]]
    index = json.loads(lock["index"])
    routes = sorted(v for k, v in props if k == "frt:route")
    assert routes == sorted(f"{e['phase']}/{e['precision']}/{e['backend']}/{e['arch']}/{e['device-class']} -> "
                            f"{e['route']} {e['state']} {e['receipt']}" for e in index)
    receipts = [json.loads(v) for k, v in props if k == "frt:receipt"]
    embedded = json.loads(lock["receipts"])
    assert sorted((r["digest"], r["route"], r["state"], r["file"]) for r in receipts) == \
        sorted((r["digest"], r["route"], r["state"], r["file"]) for r in embedded)
    assert len(receipts) == 3
    # the dependency graph: the model on every package
    deps = {d["ref"]: d.get("dependsOn", []) for d in sbom["dependencies"]}
    assert sorted(deps[root["bom-ref"]]) == sorted(comps)


def test_the_demo_project_exports_a_valid_sbom(tmp_path):
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    rc, out, _ = _run(["lock", "--export", "cyclonedx"])  # the bundled demo
    assert rc == 0 and JsonStrictValidator(SchemaVersion.V1_6).validate_str(out) is None
    assert json.loads(out)["metadata"]["component"]["name"] == "demo-decoder"


def test_several_models_need_model_and_a_missing_library_is_named(tmp_path, monkeypatch):
    tp = tiny_project(tmp_path)
    tp.lock()
    (tp.root / "manifests/other.toml").write_text((tp.root / "manifests/tiny.toml").read_text().replace(
        'model = "tiny"', 'model = "other"'))
    rc, _, err = _run(["lock", "--project", str(tp.root), "-q"])
    assert rc == 0, err
    rc, _, err = _run(["lock", "--export", "cyclonedx", "--project", str(tp.root)])
    assert rc == 2 and "describes one model; this project has 2 (other, tiny)" in err and "--model MODEL" in err
    monkeypatch.setitem(sys.modules, "cyclonedx", None)  # as if not installed
    rc, out, err = _run(["lock", "--export", "cyclonedx", "--project", str(tp.root), "--model", "tiny",
                         "-o", str(tmp_path / "x.json")])
    assert rc == 2 and "needs the cyclonedx-python-lib library" in err and "frt-dist[provenance]" in err
    assert not (tmp_path / "x.json").exists()


def test_a_receipt_signer_the_lock_records_is_in_the_sbom(tmp_path):
    """A lock made under a [trust.receipts] policy records each accepted receipt's signer
    (``Lockfile.signatures``, SPEC §26); the SBOM carries it beside the receipt."""
    from frt_dist.sbom import cyclonedx_json

    tp = tiny_project(tmp_path)
    lock = tp.lock(receipts=[("fast", "decode")])
    [dig] = list(lock.receipts)
    lock.signatures = {dig: {"receipt": dig, "kind": "sigstore", "signer": SAN, "issuer": "https://token.actions.githubusercontent.com"}}
    root = json.loads(cyclonedx_json(lock))["metadata"]["component"]
    [row] = [json.loads(p["value"]) for p in root["properties"] if p["name"] == "frt:receipt"]
    assert (row["digest"], row["signer"], row["signature"]) == (dig, SAN, "sigstore")
