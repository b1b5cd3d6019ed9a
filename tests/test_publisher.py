"""Publisher signatures: ``metadata.json.sigstore``.

What is tested with **real Sigstore signatures** (``tests/data/sigstore``, see its README:
a production bundle made by trailofbits/rfc8785.py's release workflow, and a staging one):

- ``verify_bundle`` itself, offline under the pinned production trusted root, with the network
  refused: the wheel verifies and matches a GitHub-workflow policy for its repository; one changed
  byte, another repository, another issuer, another workflow ref, and the staging-signed file under
  the production root are each refused with the reason;
- ``frt lock`` on packages that carry that real bundle as their ``metadata.json.sigstore``: the
  bundle is genuine, but it signs the wheel, not the ``metadata.json`` beside it, so the lock
  refuses it ("the bundle is for other bytes than metadata.json") naming the real signer; under
  `kernels`' default policy (a ``kernels-community/*`` package) the same genuine bundle is refused
  as the wrong signer, before its bytes are compared;
- ``signature = "required"`` refuses an unsigned variant; ``"off"`` reads no bundle.

What cannot be real here: a production bundle over a ``metadata.json`` of ours (only the
publisher's workflow can make one). The tests that need a variant whose bundle **verifies** —
the signer recorded in the lock, ``frt mirror`` carrying the bundle, ``frt verify --mirror``
re-checking it and naming a missing one, ``frt verify`` re-judging a recorded signer — replace
only sigstore's ``Verifier`` (``_SigstoreStandIn``): it checks the bundle's **real certificate**
against the policy through sigstore's own policy interface, and accepts the signature over the
bytes the test declares signed. Everything else (frt's policy, recording, mirror, verify) runs
as in production.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tomllib

import pytest
import tomli_w

from frt_dist.base.canonical import digest
from frt_dist.documents.lockfile import Lockfile
from frt_dist.documents.publisher_policy import KERNELS_COMMUNITY, SignerPolicy
from frt_dist.errors import UsageError
from frt_dist.provenance import sigstore_root
from frt_dist.provenance.publisher import SignatureRefused, verify_bundle
from helpers.factories import NORM_SRC, SCALE_SRC, NetworkTripwire, manifest_doc, tiny_project
from helpers.frt import frt_main as _run
from helpers.paths import DATA, ROOT

SIGSTORE = DATA / "sigstore"  # real Sigstore test vectors (see its README)
WHEEL = SIGSTORE / "rfc8785-0.1.2-py3-none-any.whl"
REPO = "https://github.com/trailofbits/rfc8785.py"
WORKFLOW = f"{REPO}/.github/workflows/release.yml"
SAN = f"{WORKFLOW}@refs/tags/v0.1.2"
ISSUER = "https://token.actions.githubusercontent.com"
TRAILOFBITS = SignerPolicy(REPO, (WORKFLOW,))

def _bundle() -> bytes:
    return (SIGSTORE / "rfc8785-0.1.2-py3-none-any.whl.sigstore").read_bytes()


# --- verify_bundle with the real bundles ---------------------------------------------------


def test_the_production_signed_wheel_verifies_offline_and_matches_its_workflow_policy(monkeypatch):
    trip = NetworkTripwire(monkeypatch)
    sigstore_root._verifier.cache_clear()
    facts = verify_bundle(WHEEL.read_bytes(), _bundle(), TRAILOFBITS, what="the wheel")
    assert (facts.identity, facts.issuer, facts.repository, facts.build_signer) == (SAN, ISSUER, REPO, SAN)
    assert verify_bundle(WHEEL.read_bytes(), _bundle(), SignerPolicy(REPO, (SAN,))) == facts  # exact ref
    assert verify_bundle(WHEEL.read_bytes(), _bundle(), None) == facts  # no signer policy: any identity
    assert trip.attempts == []  # no TUF refresh, no Rekor request


def test_one_changed_byte_is_refused():
    data = bytearray(WHEEL.read_bytes())
    data[100] ^= 1
    with pytest.raises(SignatureRefused) as e:
        verify_bundle(bytes(data), _bundle(), TRAILOFBITS, what="the wheel")
    assert e.value.reason.startswith("the bundle is for other bytes than the wheel (sigstore: ")
    assert SAN in str(e.value)  # the signer found is named


@pytest.mark.parametrize("policy, clause", [
    (SignerPolicy("https://github.com/trailofbits/other", (WORKFLOW,)),
     f"source repository is {REPO}, the policy accepts https://github.com/trailofbits/other"),
    (SignerPolicy(REPO, (WORKFLOW,), issuer="https://accounts.google.com"),
     f"OIDC issuer is {ISSUER}, the policy accepts https://accounts.google.com"),
    (SignerPolicy(REPO, (f"{WORKFLOW}@refs/heads/main",)),
     f"build signer is {SAN}, the policy accepts {WORKFLOW}@refs/heads/main"),
    (SignerPolicy(REPO, (f"{REPO}/.github/workflows/release.yaml",)),  # .yaml is another file than .yml
     f"build signer is {SAN}, the policy accepts {REPO}/.github/workflows/release.yaml"),
    (KERNELS_COMMUNITY, f"source repository is {REPO}, the policy accepts https://github.com/huggingface/kernels-community"),
])
def test_a_signer_the_policy_does_not_name_is_refused_naming_the_clause(policy, clause):
    with pytest.raises(SignatureRefused) as e:
        verify_bundle(WHEEL.read_bytes(), _bundle(), policy)
    assert e.value.reason.startswith("wrong signer: ") and clause in e.value.reason
    assert f"signed by {SAN} (issuer {ISSUER})" in str(e.value)
    assert e.value.reasons[0]["signer"] == SAN


def test_the_staging_signed_file_is_refused_under_the_production_root():
    with pytest.raises(SignatureRefused) as e:
        verify_bundle((SIGSTORE / "staging-signed.txt").read_bytes(), (SIGSTORE / "staging-signed.txt.sigstore").read_bytes(), None)
    assert e.value.reason.startswith("the signature does not verify under the pinned Sigstore trusted root")
    assert "william@yossarian.net" in str(e.value)


def test_not_a_bundle_and_an_unreadable_trusted_root_are_named(tmp_path, monkeypatch):
    with pytest.raises(SignatureRefused, match="not a Sigstore bundle"):
        verify_bundle(b"{}", b'{"mediaType": "nope"}', None)
    monkeypatch.setenv("FRT_SIGSTORE_TRUSTED_ROOT", str(tmp_path / "missing.json"))
    with pytest.raises(UsageError, match=r"missing.json: the Sigstore trusted root cannot be read"):
        verify_bundle(WHEEL.read_bytes(), _bundle(), None)


def test_receipt_bundles_are_checked_under_the_same_trusted_root(tmp_path, monkeypatch):
    """One pinned root for every Sigstore check: FRT_SIGSTORE_TRUSTED_ROOT governs a receipt's
    bundle as it governs a publisher's (frt_dist.provenance.sigstore_root)."""
    import hashlib

    from frt_dist.provenance import signing

    monkeypatch.setenv("FRT_SIGSTORE_TRUSTED_ROOT", str(tmp_path / "missing.json"))
    with pytest.raises(UsageError, match=r"missing.json: the Sigstore trusted root cannot be read"):
        signing.check_bundle(json.loads(_bundle()), hashlib.sha256(WHEEL.read_bytes()).hexdigest(), [])


def test_a_missing_sigstore_is_one_error_for_publisher_and_receipt_signatures(monkeypatch):
    import sys

    from frt_dist.errors import SigningUnavailable
    from frt_dist.provenance import signing

    monkeypatch.setitem(sys.modules, "sigstore", None)  # as if the provenance extra were not installed
    with pytest.raises(SigningUnavailable) as pub:
        verify_bundle(WHEEL.read_bytes(), _bundle(), None)
    with pytest.raises(SigningUnavailable) as rec:
        signing.check_bundle(json.loads(_bundle()), "00" * 32, [])
    assert str(pub.value) == ("checking a publisher signature (metadata.json.sigstore) needs the 'sigstore' package, "
                              "which is not installed")
    assert str(rec.value) == "checking a Sigstore signature needs the 'sigstore' package, which is not installed"
    assert pub.value.exit_code == rec.value.exit_code == 2
    assert pub.value.hints[0] == rec.value.hints[0] == "pip install 'frt-dist[provenance]'"
    assert 'signature = "off"' in pub.value.hints[1]


def test_the_kernels_community_default_is_kernels_own_default_policy():
    """Fails loudly when `kernels` changes its curated signers (kernels/verify.py DEFAULT_POLICIES)."""
    from kernels.verify import DEFAULT_POLICIES, GitHubWorkflowPolicy

    [p] = DEFAULT_POLICIES
    assert isinstance(p, GitHubWorkflowPolicy)
    assert f"https://github.com/{p.repo_id}" == KERNELS_COMMUNITY.repository
    assert tuple(p.signer_uris) == KERNELS_COMMUNITY.workflows
    assert KERNELS_COMMUNITY.issuer == ISSUER


# --- frt lock on packages carrying the real bundle ------------------------------------------


def _project(tmp_path, *, org="t-org", scale: dict | None = None, trust: dict | None = None, bundle: bytes | None = None):
    """The tiny project with its ``scale`` package under ``org`` (a path package), the package's
    table extended by ``scale``, a ``[trust.publishers]`` table ``trust``, and ``bundle`` written as
    ``build/torch-cpu/metadata.json.sigstore``."""
    repo = f"{org}/scale"
    doc = manifest_doc(packages={repo: {"path": "packages/scale", **(scale or {})}, "t-org/norm": {"path": "packages/norm"}})
    doc["seams"]["act"]["impls"]["scale"]["package"] = repo
    if trust:
        doc["trust"] = {"publishers": trust}
    tp = tiny_project(tmp_path, manifest=doc, packages={"scale": {"name": "scale", "source": SCALE_SRC},
                                                        "norm": {"name": "norm", "source": NORM_SRC}})
    if bundle is not None:
        (tp.root / "packages/scale/build/torch-cpu/metadata.json.sigstore").write_bytes(bundle)
    return tp, repo


def test_lock_refuses_a_real_bundle_over_other_bytes_than_metadata_json(tmp_path):
    signer = {"repository": REPO, "workflows": [WORKFLOW]}
    tp, repo = _project(tmp_path, scale={"signer": signer}, bundle=_bundle())
    rc, _, err = _run(["lock", "--project", str(tp.root)])
    assert rc == 1
    assert (f"error: tiny: t-org/scale: variant 'torch-cpu': metadata.json.sigstore: the bundle is for other bytes than "
            "metadata.json (sigstore: Bundle message digest mismatch); signer named in the bundle: "
            f"{SAN} (issuer {ISSUER})") in err
    assert not tp.lock_path.exists()  # nothing written
    # with no signer policy at all the bundle is still checked: a signature over other bytes is no signature
    tp2, _ = _project(tmp_path / "b", bundle=_bundle())
    rc, out, _ = _run(["lock", "--project", str(tp2.root), "--json"])
    [failure] = json.loads(out)["failures"]
    assert rc == 1 and failure["package"] == "t-org/scale"
    assert failure["reason"].startswith("variant 'torch-cpu': metadata.json.sigstore: the bundle is for other bytes than "
                                        "metadata.json")


def test_kernels_default_policy_refuses_a_genuine_bundle_from_another_signer(tmp_path):
    tp, repo = _project(tmp_path, org="kernels-community", bundle=_bundle())
    rc, _, err = _run(["lock", "--project", str(tp.root)])
    assert rc == 1
    assert (f"kernels-community/scale: variant 'torch-cpu': metadata.json.sigstore: signed by {SAN} "
            f"(issuer {ISSUER}), not by a signer the policy accepts (kernels-default): source repository is {REPO}, "
            "the policy accepts https://github.com/huggingface/kernels-community") in err


def test_required_refuses_an_unsigned_variant_and_off_reads_no_bundle(tmp_path):
    tp, _ = _project(tmp_path, scale={"signature": "required"})
    rc, _, err = _run(["lock", "--project", str(tp.root)])
    assert rc == 1
    assert ("t-org/scale: variant 'torch-cpu': unsigned (no metadata.json.sigstore), and the manifest requires "
            "a publisher signature (signature = \"required\"); signer found: none") in err
    # the organisation's table sets it for every package of the org
    tp2, _ = _project(tmp_path / "org", trust={"t-org": {"signature": "required"}})
    rc, _, err = _run(["lock", "--project", str(tp2.root)])
    assert rc == 1 and "t-org/norm: variant 'torch-cpu': unsigned" in err
    # off: the (foreign) bundle is not read, nothing is recorded
    tp3, _ = _project(tmp_path / "off", scale={"signature": "off"}, bundle=_bundle())
    assert _run(["lock", "--project", str(tp3.root), "-q"])[0] == 0
    assert "signature" not in tomllib.loads(tp3.lock_path.read_text())["packages"]["t-org/scale"]["variants"]["torch-cpu"]


def test_a_symlinked_bundle_is_refused_not_followed(tmp_path):
    outside = tmp_path / "outside.sigstore"
    outside.write_bytes(_bundle())
    tp, _ = _project(tmp_path)
    (tp.root / "packages/scale/build/torch-cpu/metadata.json.sigstore").symlink_to(outside)
    rc, _, err = _run(["lock", "--project", str(tp.root)])
    assert rc == 1
    assert "packages/scale/build/torch-cpu/metadata.json.sigstore is not a regular file" in err


@pytest.mark.parametrize("table, where", [
    ({"signature": "maybe"}, "packages.\"t-org/scale\".signature: expected one of optional, required, off, got 'maybe'"),
    ({"signer": {"repository": REPO}}, "packages.\"t-org/scale\".signer.workflows: missing"),
    ({"signer": {"repository": REPO, "workflows": []}}, "packages.\"t-org/scale\".signer.workflows: at least one"),
    ({"signer": {"repository": "github.com/x", "workflows": [WORKFLOW]}},
     "packages.\"t-org/scale\".signer.repository: expected an https:// URI"),
    ({"signer": {"repository": REPO, "workflows": [WORKFLOW], "who": 1}}, "packages.\"t-org/scale\".signer"),
])
def test_a_bad_policy_in_the_manifest_is_bad_input_naming_the_field(tmp_path, table, where):
    tp, _ = _project(tmp_path, scale=table)
    rc, _, err = _run(["lock", "--project", str(tp.root)])
    assert rc == 2 and "manifests/tiny.toml" in err and where in err, err


def test_a_bad_organisation_table_is_bad_input(tmp_path):
    tp, _ = _project(tmp_path, trust={"t-org": {"signature": "always"}})
    rc, _, err = _run(["lock", "--project", str(tp.root)])
    assert rc == 2 and "trust.publishers.t-org.signature: expected one of optional, required, off" in err


# --- a variant whose bundle verifies: sigstore's Verifier stood in for -----------------------


class _SigstoreStandIn:
    """Stands in for ``sigstore.verify.Verifier`` (see the module docstring): the bundle's real
    certificate goes through the policy, and the signature holds over the ``signed`` bytes only."""

    def __init__(self, signed: set[bytes]):
        self.signed = {hashlib.sha256(b).digest() for b in signed}

    def verify_artifact(self, artifact, bundle, policy):
        from sigstore.errors import VerificationError

        policy.verify(bundle.signing_certificate)
        if hashlib.sha256(artifact).digest() not in self.signed:
            raise VerificationError("Bundle message digest mismatch")


@pytest.fixture
def signed(tmp_path, monkeypatch):
    """A project whose ``t-org/scale`` variant carries the trailofbits bundle, accepted as a
    signature over its metadata.json, under a package policy naming trailofbits' workflow."""
    tp, repo = _project(tmp_path, scale={"signer": {"repository": REPO, "workflows": [WORKFLOW]}}, bundle=_bundle())
    meta = (tp.root / "packages/scale/build/torch-cpu/metadata.json").read_bytes()
    monkeypatch.setattr(sigstore_root, "verifier", lambda root=None: _SigstoreStandIn({meta}))
    return tp


def test_lock_records_the_signer_and_the_bundle_digest(signed):
    assert _run(["lock", "--project", str(signed.root), "-q"])[0] == 0
    doc = tomllib.loads(signed.lock_path.read_text())  # an independent read
    sig = doc["packages"]["t-org/scale"]["variants"]["torch-cpu"]["signature"]
    assert sig == {"bundle-sha256": "sha256:" + hashlib.sha256(_bundle()).hexdigest(), "identity": SAN, "issuer": ISSUER,
                   "repository": REPO, "build-signer": SAN, "policy": "package"}
    assert "signature" not in doc["packages"]["t-org/norm"]["variants"]["torch-cpu"]  # unsigned, optional: unchanged
    assert Lockfile.read(signed.lock_path).packages["t-org/scale"].variants["torch-cpu"].signature == sig
    assert _run(["verify", "--project", str(signed.root)])[0] == 0
    assert _run(["lock", "--check", "--project", str(signed.root)])[0] == 0


def test_mirror_carries_the_bundle_and_verify_names_one_missing_or_replaced(signed, tmp_path):
    assert _run(["lock", "--project", str(signed.root), "-q"])[0] == 0
    mirror = tmp_path / "mirror"
    assert _run(["mirror", str(mirror), "--project", str(signed.root), "--all-variants", "-q"])[0] == 0
    lp = Lockfile.read(signed.lock_path).packages["t-org/scale"]
    rel = f"kernels--t-org--scale/snapshots/{lp.snapshot}/build/torch-cpu/metadata.json.sigstore"
    assert (mirror / rel).read_bytes() == _bundle()
    rc, out, _ = _run(["verify", "--project", str(signed.root), "--mirror", str(mirror), "--all-variants", "--json"])
    assert rc == 0, out
    (mirror / rel).unlink()
    rc, out, _ = _run(["verify", "--project", str(signed.root), "--mirror", str(mirror), "--all-variants", "--json"])
    problems = json.loads(out)["problems"]
    assert rc == 1 and [p["kind"] for p in problems] == ["missing"]
    assert problems[0]["path"] == rel and problems[0]["expected"] == lp.variants["torch-cpu"].signature["bundle-sha256"]
    assert f"t-org/scale variant torch-cpu: the publisher signature (signed by {SAN}) is missing from the mirror" \
        in problems[0]["reason"]
    (mirror / rel).write_bytes(_bundle() + b" ")
    rc, out, _ = _run(["verify", "--project", str(signed.root), "--mirror", str(mirror), "--all-variants", "--json"])
    problems = json.loads(out)["problems"]
    assert rc == 1 and [p["kind"] for p in problems] == ["mismatched"] and "is not the locked bundle" in problems[0]["reason"]
    # a link to the right bytes outside the package's folder is not read
    outside = tmp_path / "outside.sigstore"
    outside.write_bytes(_bundle())
    (mirror / rel).unlink()
    (mirror / rel).symlink_to(outside)
    rc, out, _ = _run(["verify", "--project", str(signed.root), "--mirror", str(mirror), "--all-variants", "--json"])
    problems = json.loads(out)["problems"]
    assert rc == 1 and [p["kind"] for p in problems] == ["mismatched"]
    assert "is not a regular file inside the mirror" in problems[0]["reason"]
    # and a mirror run puts the locked bundle back
    assert _run(["mirror", str(mirror), "--project", str(signed.root), "--all-variants", "-q"])[0] == 0
    assert (mirror / rel).read_bytes() == _bundle() and not (mirror / rel).resolve() == outside


def test_verify_mirror_verifies_each_mirrored_bundle_again(signed, tmp_path, monkeypatch):
    assert _run(["lock", "--project", str(signed.root), "-q"])[0] == 0
    mirror = tmp_path / "mirror"
    assert _run(["mirror", str(mirror), "--project", str(signed.root), "--all-variants", "-q"])[0] == 0
    shutil.rmtree(signed.root / "packages/scale")  # the source is gone: only the mirror holds the bundle
    rc, out, _ = _run(["verify", "--project", str(signed.root), "--mirror", str(mirror), "--all-variants", "--json"])
    assert rc == 0, out
    # the same bytes, but the verifier now says no (as a changed trusted root would)
    monkeypatch.setattr(sigstore_root, "verifier", lambda root=None: _SigstoreStandIn(set()))
    rc, out, _ = _run(["verify", "--project", str(signed.root), "--mirror", str(mirror), "--all-variants", "--json"])
    problems = json.loads(out)["problems"]
    assert rc == 1 and [p["kind"] for p in problems] == ["signature"], problems
    assert problems[0]["path"].endswith('packages."t-org/scale".variants.torch-cpu.signature')
    assert problems[0]["message"].startswith(f"t-org/scale variant torch-cpu: the mirrored publisher signature (recorded "
                                             f"signer {SAN}) does not verify: ")
    assert "the bundle is for other bytes than metadata.json" in problems[0]["message"]


def test_verify_rejudges_a_recorded_signer_against_the_embedded_policy(signed):
    assert _run(["lock", "--project", str(signed.root), "-q"])[0] == 0
    doc = tomllib.loads(signed.lock_path.read_text())
    other = "https://github.com/mallory/evil/.github/workflows/x.yml@refs/heads/main"
    doc["packages"]["t-org/scale"]["variants"]["torch-cpu"]["signature"]["build-signer"] = other
    body = {k: v for k, v in doc.items() if k != "lock-digest"}
    signed.lock_path.write_text(tomli_w.dumps({"schema": doc["schema"], "lock-digest": digest(body), **body}))
    rc, out, _ = _run(["verify", "--project", str(signed.root), "--json"])
    problems = [p for p in json.loads(out)["problems"] if p["kind"] == "signature"]
    assert rc == 1 and problems, out
    assert problems[0]["path"].endswith('packages."t-org/scale".variants.torch-cpu.signature')
    assert f"t-org/scale variant torch-cpu: publisher signature (signer {SAN}): signed by {SAN} (issuer {ISSUER}): " \
           f"build signer is {other}, the policy accepts {WORKFLOW}" in problems[0]["message"]


def test_a_policy_changed_after_lock_is_applied_at_the_next_lock(signed):
    assert _run(["lock", "--project", str(signed.root), "-q"])[0] == 0
    mpath = signed.root / "manifests/tiny.toml"
    m = tomllib.loads(mpath.read_text())
    m["packages"]["t-org/scale"]["signer"]["repository"] = "https://github.com/t-org/scale"
    m["packages"]["t-org/scale"]["signer"]["workflows"] = ["https://github.com/t-org/scale/.github/workflows/b.yml"]
    mpath.write_text(tomli_w.dumps(m))
    rc, _, err = _run(["lock", "--project", str(signed.root)])
    assert rc == 1 and f"signed by {SAN} (issuer {ISSUER}), not by a signer the policy accepts (package)" in err


# --- Hub packages ---------------------------------------------------------------------------

KC = "kernels-community/scale"
SECRET = "hf_frtPublisherTestSecret0123456789"


@pytest.fixture
def sig_hub(monkeypatch, tmp_path):
    """A loopback Hub with ``kernels-community/scale`` v1 (one variant, carrying the trailofbits
    bundle) and a project whose ``act`` seam uses it."""
    from frt_dist.distribution.hub import HubClient
    from helpers.factories import start_hub
    from helpers.hubserver import kernel_variant_files

    for var in ("FRT_MIRROR", "FRT_LOCK", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("KERNELS_CACHE", str(tmp_path / "kcache"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hfcache"))
    server, _ = start_hub(monkeypatch, tmp_path)
    files = kernel_variant_files(name="scale", variant="torch-cpu", module_files={"__init__.py": SCALE_SRC.encode()})
    files["build/torch-cpu/metadata.json.sigstore"] = _bundle()
    server.commit(KC, files, branch="v1")
    server.set_trusted("kernels-community", True)
    doc = manifest_doc(packages={KC: {"version": 1}, "t-org/norm": {"path": "packages/norm"}})
    doc["seams"]["act"]["impls"]["scale"]["package"] = KC
    tp = tiny_project(tmp_path, "hubproj", manifest=doc, packages={"norm": {"name": "norm", "source": NORM_SRC}})
    tp.hub = HubClient(endpoint=server.url)
    monkeypatch.setenv("HF_TOKEN", SECRET)  # a credential in the environment must appear in no output
    yield server, tp, files
    server.stop()


def _lock_in_process(tp):
    from frt_dist.lock.build import lock_model

    return lock_model(tp.project, tp.model, hub=tp.hub, warn=lambda msg: None)


def test_a_hub_variant_signed_by_another_workflow_is_refused_under_kernels_default_policy(sig_hub):
    from frt_dist.lock.build import LockFailed

    server, tp, _ = sig_hub
    with pytest.raises(LockFailed) as e:
        _lock_in_process(tp)
    assert SECRET not in str(e.value) and SECRET not in json.dumps(e.value.reasons)
    assert e.value.reasons == [{"model": "tiny", "package": KC, "reason": (
        f"variant 'torch-cpu': metadata.json.sigstore: signed by {SAN} (issuer {ISSUER}), not by a signer the policy "
        f"accepts (kernels-default): source repository is {REPO}, the policy accepts "
        "https://github.com/huggingface/kernels-community; build signer is "
        f"{SAN}, the policy accepts {' | '.join(KERNELS_COMMUNITY.workflows)}")}]
    # the budget: refs, one recursive listing of build/, metadata.json, and the bundle the listing showed
    assert server.request_count(KC) == 4
    assert not tp.lock_path.exists()


def test_a_signed_hub_variant_is_locked_mirrored_and_verified(sig_hub, monkeypatch, tmp_path):
    server, tp, files = sig_hub
    m = tomllib.loads((tp.root / "manifests/tiny.toml").read_text())
    m["trust"] = {"publishers": {"kernels-community": {"signer": {"repository": REPO, "workflows": [WORKFLOW]}}}}
    (tp.root / "manifests/tiny.toml").write_text(tomli_w.dumps(m))
    monkeypatch.setattr(sigstore_root, "verifier", lambda root=None: _SigstoreStandIn({files["build/torch-cpu/metadata.json"]}))
    _lock_in_process(tp)
    sig = Lockfile.read(tp.lock_path).packages[KC].variants["torch-cpu"].signature
    assert (sig["identity"], sig["policy"]) == (SAN, "organisation")
    mirror = tmp_path / "mirror"
    rc, _, err = _run(["mirror", str(mirror), "--project", str(tp.root), "--all-variants", "-q"])
    assert rc == 0, err
    lp = Lockfile.read(tp.lock_path).packages[KC]
    assert (mirror / f"kernels--kernels-community--scale/snapshots/{lp.revision}/build/torch-cpu/metadata.json.sigstore"
            ).read_bytes() == _bundle()
    server.reset_counts()
    rc, out, _ = _run(["verify", "--project", str(tp.root), "--mirror", str(mirror), "--all-variants", "--json"])
    assert rc == 0, out
    assert server.request_count() == 0  # verify asks nobody
    rc, sbom, err = _run(["lock", "--export", "cyclonedx", "--project", str(tp.root)])
    assert rc == 0 and SAN in sbom
    assert not any(SECRET in t for t in (sbom, err, out, tp.lock_path.read_text()))
    # a re-lock with nothing changed keeps the pin and asks the Hub nothing
    _lock_in_process(tp)
    assert server.request_count() == 0
    # the organisation's policy now names another repository: the pin is judged again, and refused
    from frt_dist.lock.build import LockFailed

    m["trust"]["publishers"]["kernels-community"]["signer"]["repository"] = "https://github.com/huggingface/kernels-community"
    (tp.root / "manifests/tiny.toml").write_text(tomli_w.dumps(m))
    with pytest.raises(LockFailed) as e:
        _lock_in_process(tp)
    assert (f"signed by {SAN} (issuer {ISSUER}), not by a signer the policy accepts (organisation): source repository "
            f"is {REPO}") in e.value.reasons[0]["reason"]


def test_without_bundles_or_policies_existing_lockfiles_keep_their_bytes():
    """The repository's own lockfiles (no bundle, no policy) are what `frt lock` writes now."""
    root = ROOT
    rc, out, err = _run(["lock", "--check", "--project", str(root)])
    assert rc == 0 and "up to date" in out + err, (out, err)
    assert "signature" not in (root / "lockfiles/demo-decoder.lock").read_text().split("[packages", 1)[1]


@pytest.mark.parametrize("signed_by, ok", [
    ("release.yml@refs/tags/v1", True),
    ("release.yml-evil@refs/tags/v1", False),
    ("release.yml.evil@refs/tags/v1", False),
    ("release.yml/x@refs/tags/v1", False),
    ("release.yml", True),
    ("release.ym@refs/tags/v1", False),
])
def test_a_publisher_workflow_is_matched_as_a_whole_name_never_a_prefix(signed_by, ok):
    """Planted defect this catches: the workflow matched as a bare prefix (``release.yml`` accepting ``release.yml-evil``)."""
    from frt_dist.documents.publisher_policy import SignerPolicy
    from frt_dist.provenance.publisher import SignerFacts, signer_problems

    repo = "https://github.com/org/kernels"
    policy = SignerPolicy(repo, (f"{repo}/.github/workflows/release.yml",))
    facts = SignerFacts(identity=f"{repo}/.github/workflows/{signed_by}", issuer=policy.issuer, repository=repo,
                        build_signer=f"{repo}/.github/workflows/{signed_by}")
    problems = signer_problems(facts, policy)
    if ok:
        assert problems == []
    else:
        assert problems == [f"build signer is {facts.build_signer}, the policy accepts {repo}/.github/workflows/release.yml"]
