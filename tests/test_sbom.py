"""``frt lock --export cyclonedx``: the lock as a CycloneDX 1.6 SBOM.

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

import pytest

from frt_dist.provenance import sigstore_root
from helpers.factories import NORM_SRC, hub_manifest, tiny_project
from helpers.frt import frt_main as _run
from helpers.paths import DATA

SIGSTORE = DATA / "sigstore"  # real Sigstore test vectors (see its README)
BUNDLE = SIGSTORE / "rfc8785-0.1.2-py3-none-any.whl.sigstore"
REPO = "https://github.com/trailofbits/rfc8785.py"
SAN = f"{REPO}/.github/workflows/release.yml@refs/tags/v0.1.2"


@pytest.fixture
def project(monkeypatch, tmp_path):
    """A project with a Hub package (``remote-org/scale`` on a loopback Hub), a path package
    carrying a publisher bundle (sigstore's Verifier stood in for, as in test_publisher.py), and
    accepted receipts."""
    from frt_dist.distribution.hub import HubClient
    from helpers.factories import start_hub

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
    monkeypatch.setattr(sigstore_root, "verifier", lambda root=None: _SigstoreStandIn({(vdir / "metadata.json").read_bytes()}))
    tp.lock(receipts=[("fast", "decode"), ("solo", "decode", "supported_correct"), ("fast", "prefill")])
    yield tp
    server.stop()


@pytest.mark.slow
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
    comps = {c["bom-ref"]: c for c in sbom["components"] if c["type"] == "library" and "purl" in c}
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
    assert not [k for k, _ in props if k == "frt:receipt"]  # receipts are components now, not JSON text
    # every embedded receipt, as a structured `data` component: its facts one property each
    receipts = {c["bom-ref"]: c for c in sbom["components"] if c["type"] == "data"}
    embedded = json.loads(lock["receipts"])
    assert len(receipts) == len(embedded) == 3
    for r in embedded:
        c = receipts[f"frt-receipt:{r['digest']}"]
        rp = {p["name"]: p["value"] for p in c["properties"]}
        assert (c["name"], c["version"], c["hashes"]) == (r["file"], r["digest"],
                                                          [{"alg": "SHA-256", "content": r["digest"][7:]}])
        cell = r["receipt"]["cell"]
        assert (rp["frt:route"], rp["frt:state"]) == (r["route"], r["state"])
        assert rp["frt:phase"] == cell["phase"] and rp["frt:device-class"] == cell["hardware"]["device-class"]
        assert {k[len("frt:software:"):]: v for k, v in rp.items() if k.startswith("frt:software:")} == \
            {k: str(v) for k, v in cell["software"].items()}
    # the runtime the receipts were measured on, as components the receipts depend on
    runtime = {c["bom-ref"]: c for c in sbom["components"] if c["bom-ref"].startswith("frt-runtime:")}
    assert runtime["frt-runtime:torch@2.13"]["type"] == "framework"
    deps = {d["ref"]: d.get("dependsOn", []) for d in sbom["dependencies"]}
    for ref in receipts:
        assert "frt-runtime:torch@2.13" in deps[ref] and any(d in comps for d in deps[ref]), deps[ref]
    # the dependency graph: the model on every package and every receipt
    assert sorted(deps[root["bom-ref"]]) == sorted([*comps, *receipts])
    # the generating tool, each package's supplier and licence (from its metadata.json)
    from frt_dist import __version__
    [tool] = sbom["metadata"]["tools"]["components"]
    assert (tool["name"], tool["version"]) == ("frt-dist", __version__)
    for c in comps.values():
        assert c["supplier"] == {"name": c["group"]}
    assert comps[[r for r in comps if r.startswith("t-org/norm@")][0]]["licenses"] == [{"license": {"id": "Apache-2.0"}}]


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
    (``Lockfile.signatures``); the SBOM carries it beside the receipt."""
    from frt_dist.export.sbom import cyclonedx_json

    tp = tiny_project(tmp_path)
    lock = tp.lock(receipts=[("fast", "decode")])
    [dig] = list(lock.receipts)
    lock.signatures = {dig: {"receipt": dig, "kind": "sigstore", "signer": SAN, "issuer": "https://token.actions.githubusercontent.com"}}
    sbom = json.loads(cyclonedx_json(lock))
    [c] = [c for c in sbom["components"] if c["bom-ref"] == f"frt-receipt:{dig}"]
    props = {p["name"]: p["value"] for p in c["properties"]}
    assert (props["frt:signer"], props["frt:signature"]) == (SAN, "sigstore")
    assert props["frt:signer-issuer"] == "https://token.actions.githubusercontent.com"
    assert c["authors"] == [{"name": SAN}]  # the identity, not a keyid


def test_a_key_signed_receipt_names_the_key_file_the_lock_pins_and_validates(tmp_path):
    """A receipt signed by a key: the SBOM names the signer by the project's key file the lock pins
    for that keyid (an identity a reader can look up), beside the keyid; the whole validates strictly."""
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    from frt_dist.documents.lockfile import Lockfile
    from frt_dist.export.sbom import cyclonedx_json

    from test_receipt_signing import _locked

    p, _, pub = _locked(tmp_path)
    lock = Lockfile.read(p.tp.lock_path)
    [(dig, row)] = lock.signatures.items()
    text = cyclonedx_json(lock, supplier={"name": "ACME kernels", "url": "https://example.org/acme"})
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(text) is None
    sbom = json.loads(text)
    [c] = [c for c in sbom["components"] if c["bom-ref"] == f"frt-receipt:{dig}"]
    props = {p["name"]: p["value"] for p in c["properties"]}
    assert (props["frt:signature"], props["frt:signer"], props["frt:signer-key-file"]) == ("key", row["signer"], pub)
    assert c["authors"] == [{"name": f"key {pub} ({row['signer']})"}]
    supplier = {"name": "ACME kernels", "url": ["https://example.org/acme"]}
    assert sbom["metadata"]["supplier"] == supplier and sbom["metadata"]["component"]["supplier"] == supplier


def test_source_date_epoch_gives_the_timestamp_and_a_bad_one_is_exit_2(tmp_path, monkeypatch):
    tp = tiny_project(tmp_path)
    tp.lock(receipts=[("fast", "decode")])
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    rc, out, err = _run(["lock", "--export", "cyclonedx", "--project", str(tp.root)])
    assert rc == 0, err
    assert json.loads(out)["metadata"]["timestamp"] == "2023-11-14T22:13:20Z"
    rc, again, _ = _run(["lock", "--export", "cyclonedx", "--project", str(tp.root)])
    assert again == out  # still byte-deterministic: the time is the variable's, not the clock's
    for bad in ("yesterday", "-5", "1e9", "99999999999999999999"):
        monkeypatch.setenv("SOURCE_DATE_EPOCH", bad)
        rc, out, err = _run(["lock", "--export", "cyclonedx", "--project", str(tp.root), "-o", str(tmp_path / "s.json")])
        assert rc == 2 and "error: SOURCE_DATE_EPOCH=" in err and "whole seconds since 1970-01-01 UTC" in err, (bad, err)
        assert not (tmp_path / "s.json").exists()
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "")
    rc, out, _ = _run(["lock", "--export", "cyclonedx", "--project", str(tp.root)])
    assert rc == 0 and "timestamp" not in json.loads(out)["metadata"]


def test_a_licence_is_taken_only_from_the_metadata_json_the_lock_pins(tmp_path):
    """``metadata.json`` edited after the lock (its sha256 no longer the locked one) gives no licence:
    the SBOM states only what the lock vouches for."""
    from frt_dist.documents.lockfile import Lockfile
    from frt_dist.export.sbom import package_licences

    tp = tiny_project(tmp_path)
    tp.lock()
    lock = Lockfile.read(tp.lock_path)
    got = package_licences(lock, tp.root)
    assert got and all(v == "apache-2.0" for v in got.values()), got
    meta = tp.root / "packages/norm/build/torch-cpu/metadata.json"
    doc = json.loads(meta.read_text())
    doc["license"] = "proprietary"
    meta.write_text(json.dumps(doc))
    assert [r for r in package_licences(lock, tp.root) if r.endswith("/norm")] == []
