"""Releases on the Hub (frt_dist/release/, lock/release.py, distribution/release_files.py): ``frt release
push``, ``frt init --from``, ``frt lock`` of a project that names a ``[release]``,
``--upgrade-release``, ``frt release trust``, own receipts
beside a release's, ``frt mirror`` / offline lock / ``frt verify``.

Everything goes through the real ``huggingface_hub`` client against the loopback Hub of
``tests/helpers/hubserver.py`` (its create-repo, branch, preupload and commit endpoints), with real keys
and ``frt sign`` envelopes, and the CLI in this process (``helpers.frt.frt_main``).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
import tomli_w

from frt_dist.documents.lockfile import Lockfile
from frt_dist.documents.schema import parse_toml
from frt_dist.system.hardware import Hardware
from helpers.factories import NORM_SRC, SCALE_SRC, TinyProject, ed25519_keypair, impl_doc, manifest_doc, receipt_doc
from helpers.frt import frt_main

crypto = pytest.importorskip("cryptography")

REL = "acme/tiny-release"
TOKEN = "hf_write_token"
H200 = Hardware(arch="x86_64", device_class="h200", backend="cpu", software={"torch": "2.13"})
RTX = Hardware(arch="x86_64", device_class="rtx-5090", backend="cpu", software={"torch": "2.13"})


def make_key(folder: Path, name: str):
    return ed25519_keypair(folder, name)


def frt(*argv, cwd=None) -> tuple[int, str, str]:
    """``frt argv`` in this process, for the project at ``cwd`` (``--project``, not a working folder)."""
    args = list(argv)
    if cwd is not None:
        args = ["--project", str(cwd), *args]
    return frt_main(args)


def hub_manifest_doc() -> dict:
    """``tiny`` with both seams served by Hub packages (a release can carry no path package)."""
    seams = {"act": {"structure": "scale@1", "impls": {"scale": impl_doc("remote-org/scale", "scale")}},
             "norm": {"structure": "norm@1", "impls": {"norm": impl_doc("remote-org/norm", "norm")}}}
    return manifest_doc(packages={"remote-org/scale": {"version": 1, "trust": True},
                                  "remote-org/norm": {"version": 1, "trust": True}}, seams=seams)


@pytest.fixture
def env(hub, monkeypatch, tmp_path):
    """The loopback Hub serving two kernel packages, writable with ``TOKEN``; HF_ENDPOINT/HF_TOKEN set."""
    from helpers.hubserver import kernel_variant_files

    for name, src in (("scale", SCALE_SRC), ("norm", NORM_SRC)):
        hub.commit(f"remote-org/{name}", kernel_variant_files(name=name, variant="torch-cpu",
                                                              module_files={"__init__.py": src.encode()}), branch="v1")
    hub.write_tokens = {TOKEN}
    from huggingface_hub import constants

    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    # read at import by huggingface_hub: the in-process CLI needs them as a fresh process would set them
    monkeypatch.setattr(constants, "ENDPOINT", hub.url)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", hub.url + "/{repo_id}/resolve/{revision}/{filename}")
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    return hub


class Publisher:
    """The qualifying team's project: Hub packages, receipts signed by ``key``, a policy naming it."""

    def __init__(self, root: Path, key_name: str = "qualify-a"):
        self.tp = TinyProject(root, manifest=hub_manifest_doc(), packages={})
        self.root = self.tp.root
        self.priv, self.pub = make_key(self.root / "keys", key_name)
        doc = hub_manifest_doc()
        doc["trust"] = {"receipts": {"keys": [f"keys/{key_name}.pub"]}}
        self.write_manifest(doc)
        rc, out, err = frt("lock", cwd=self.root)
        assert rc == 0, err

    def write_manifest(self, doc: dict) -> None:
        (self.root / "manifests" / "tiny.toml").write_text(tomli_w.dumps(doc), "utf-8")

    @property
    def lock(self) -> Lockfile:
        return Lockfile.read(self.root / "lockfiles" / "tiny.lock")

    def receipt(self, name: str, route: str, phase: str, hw: Hardware = H200, *, sign: bool = True, **kw) -> Path:
        p = self.root / "receipts" / "tiny" / f"{name}.json"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(receipt_doc(self.lock, route, phase, hw, **kw), indent=1), "utf-8")
        if sign:
            assert frt("sign", "--key", str(self.priv), str(p))[0] == 0
        return p

    def publish(self, *extra, version=None, lock_args=()) -> dict:
        rc, out, err = frt("lock", *lock_args, cwd=self.root)
        assert rc == 0, err
        at = "" if version is None else f"@v{version}"
        rc, out, err = frt("release", "push", f"hf://{REL}{at}", "--json", *extra, cwd=self.root)
        assert rc == 0, err
        return json.loads(out)


@pytest.fixture
def published(env, tmp_path):
    """A publisher whose v1 release holds two signed receipts (fast/decode, solo/prefill on h200)."""
    pub = Publisher(tmp_path / "pub")
    pub.receipt("fast-decode", "fast", "decode")
    pub.receipt("solo-prefill", "solo", "prefill")
    pub.res = pub.publish()
    return pub


def consumer(tmp_path: Path, *extra) -> Path:
    dest = tmp_path / "cons"
    rc, out, err = frt("init", "--from", f"hf://{REL}@v1", str(dest), *extra)
    assert rc == 0, err
    return dest


def lock_of(root: Path) -> Lockfile:
    return Lockfile.read(root / "lockfiles" / "tiny.lock")


# ---------------------------------------------------------------------------
# push


def test_push_uploads_one_commit_on_the_version_branch(published, env):
    res = published.res
    files = env.files(REL, "v1", repo_type="model")
    assert res["commit"] == env.branch(REL, "v1", repo_type="model")
    assert sorted(p for p in files if p != ".gitattributes") == [
        "lockfiles/tiny.lock", "manifests/tiny.toml", "receipts/tiny/fast-decode.json",
        "receipts/tiny/fast-decode.json.sig", "receipts/tiny/solo-prefill.json", "receipts/tiny/solo-prefill.json.sig"]
    assert files["lockfiles/tiny.lock"] == (published.root / "lockfiles" / "tiny.lock").read_bytes()
    assert files["manifests/tiny.toml"] == (published.root / "manifests" / "tiny.toml").read_bytes()
    # the parent is the branch made from main's first commit; pushing again changes nothing
    again = published.publish()
    assert again["unchanged"] and again["commit"] == res["commit"]


def test_a_push_whose_tree_equals_the_head_makes_no_commit(published, env):
    """frt compares the head's tree with what it would upload itself (git blob ids, LFS sha256s): an
    unchanged release asks the Hub for no commit at all, and says so."""
    head = env.branch(REL, "v1", repo_type="model")
    env.reset_counts()
    rc, out, err = frt("release", "push", f"hf://{REL}", cwd=published.root)
    assert rc == 0, err
    assert f"release {REL} v1: nothing changed: the head of v1 ({head[:12]}) already holds these files; no commit " \
           "made" in out
    assert [p for m, p in env.requests if m == "POST"] == ["/api/repos/create"]  # (exist_ok) no preupload, no commit
    assert env.branch(REL, "v1", repo_type="model") == head
    # one byte of one file differs: a commit
    published.receipt("late", "fast", "prefill")
    again = published.publish()
    assert not again["unchanged"] and again["parent"] == head and env.branch(REL, "v1", repo_type="model") == again["commit"]


def test_receipts_with_one_name_in_different_folders_do_not_collide(published, env):
    """receipts/fast-decode.json (a receipt of the model outside its folder) and receipts/tiny/fast-decode.json
    would both be receipts/tiny/fast-decode.json in the release: the second gets its digest in its name."""
    other = published.receipt("other", "fast", "prefill")
    top = published.root / "receipts" / "fast-decode.json"
    other.rename(top)
    other.with_name("other.json.sig").rename(top.with_name("fast-decode.json.sig"))
    res = published.publish()
    files = env.files(REL, "v1", repo_type="model")
    (dest,) = res["renamed"].values()
    assert res["renamed"] == {"receipts/fast-decode.json": dest}
    assert dest.startswith("receipts/tiny/fast-decode--") and dest.endswith(".json") and len(dest) == len(
        "receipts/tiny/fast-decode--") + 12 + len(".json")
    assert files[dest] == top.read_bytes() and files[dest + ".sig"] == top.with_name("fast-decode.json.sig").read_bytes()
    assert files["receipts/tiny/fast-decode.json"] == (published.root / "receipts" / "tiny" / "fast-decode.json").read_bytes()
    # a consumer accepts all three
    env.set_trusted("remote-org", True)
    from pathlib import Path as _P

    dest_dir = _P(str(published.root) + "-consumer")
    rc, out, err = frt("init", "--from", f"hf://{REL}@v1", str(dest_dir), "--trust")
    assert rc == 0, err
    rc, out, err = frt("lock", cwd=dest_dir)
    assert rc == 0, err
    assert len(lock_of(dest_dir).receipts) == 3


@pytest.mark.parametrize("method, pattern, body, what", [
    ("POST", "/api/repos/create", b'{"name": "tiny-release"}', "create repo: the field 'url' is missing"),
    ("GET", "/refs", b"<html>not json</html>", "refs: JSONDecodeError"),
    ("POST", "/commit/", b"{}", "commit to v1: the field 'commitUrl' is missing"),
])
def test_an_unexpected_hub_answer_is_an_error_naming_the_endpoint(published, env, method, pattern, body, what):
    published.receipt("late", "fast", "prefill")
    assert frt("lock", cwd=published.root)[0] == 0
    head = env.branch(REL, "v1", repo_type="model")
    env.answer(pattern, 200, body, method=method)
    rc, out, err = frt("release", "push", f"hf://{REL}", cwd=published.root)
    assert rc == 1, err
    (line,) = [ln for ln in err.splitlines() if ln.startswith("error: ")]
    assert line.startswith(f"error: release '{REL}': the Hub at {env.url} gave an answer frt cannot use ({what}")
    assert "hint: check HF_ENDPOINT names a Hugging Face Hub" in err
    env.clear_faults()
    if pattern != "/commit/":  # (a commit whose answer was lost may have landed: the branch is looked at again)
        assert env.branch(REL, "v1", repo_type="model") == head
    rc, out, err = frt("release", "push", f"hf://{REL}", "--json", cwd=published.root)
    assert rc == 0, err


def test_an_http_error_names_the_endpoint(published, env):
    published.receipt("late", "fast", "prefill")
    assert frt("lock", cwd=published.root)[0] == 0
    env.fail("/preupload/", 422)  # (a 4xx: huggingface_hub retries a 5xx for seconds)
    rc, out, err = frt("release", "push", f"hf://{REL}", cwd=published.root)
    assert rc == 1 and "the Hub answered HTTP 422" in err and f"[Hub {env.url}]" in err, err


def test_push_deletes_a_receipt_the_lock_no_longer_accepts(published, env):
    (published.root / "receipts" / "tiny" / "solo-prefill.json").unlink()
    res = published.publish(lock_args=("--allow-loss",))  # the publisher drops a cell on purpose
    assert res["deleted"] == ["receipts/tiny/solo-prefill.json", "receipts/tiny/solo-prefill.json.sig"]
    assert "receipts/tiny/solo-prefill.json" not in env.files(REL, "v1", repo_type="model")


def test_push_refuses_a_stale_lock(published):
    published.receipt("late", "fast", "prefill")
    rc, out, err = frt("release", "push", f"hf://{REL}", cwd=published.root)
    assert rc == 1
    assert "error: lockfiles/tiny.lock is stale" in err and "receipt added: receipts/tiny/late.json" in err
    assert "hint: frt lock --model tiny" in err


def test_push_refuses_a_receipt_measured_on_a_local_path(env, tmp_path):
    tp = TinyProject(tmp_path / "p")  # the factories' project: both packages are path packages
    tp.lock(receipts=[("fast", "decode")])
    rc, out, err = frt("release", "push", f"hf://{REL}", "--json", cwd=tp.root)
    doc = json.loads(out)
    assert rc == 2 and doc["exit"] == 2
    assert "local path(s) cannot be published" in doc["error"]
    assert any(r["field"] == "cell.impls.act" and "path package 't-org/scale'" in r["reason"] for r in doc["reasons"])
    assert env.branch(REL, "v1", repo_type="model") is None  # nothing was created


def test_push_without_write_access(published, monkeypatch, env):
    monkeypatch.setenv("HF_TOKEN", "hf_read_only")
    published.receipt("late", "fast", "prefill")
    assert frt("lock", cwd=published.root)[0] == 0
    before = env.branch(REL, "v1", repo_type="model")
    rc, out, err = frt("release", "push", f"hf://{REL}", cwd=published.root)
    assert rc == 2, err
    assert f"error: release '{REL}': no write access" in err and "HTTP 403" in err
    assert "hint: use a token that may write" in err
    assert env.branch(REL, "v1", repo_type="model") == before


def test_push_refuses_when_the_branch_moved_under_it(published, env):
    published.receipt("late", "fast", "prefill")
    assert frt("lock", cwd=published.root)[0] == 0
    head = env.branch(REL, "v1", repo_type="model")
    env.reset_counts()
    env.hold("/preupload/", count=1)
    box = {}
    t = threading.Thread(target=lambda: box.update(r=frt("release", "push", f"hf://{REL}", cwd=published.root)))
    t.start()
    try:
        assert env.wait_for_request("/preupload/", timeout=60)
        other = env.commit(REL, {**env.files(REL, "v1", repo_type="model"), "NOTES.md": b"someone else\n"},
                           branch="v1", parent=head, repo_type="model")
    finally:
        env.release()
        t.join(60)
    rc, out, err = box["r"]
    assert rc == 1, err
    assert "the branch moved under you" in err and "nothing was committed" in err
    assert env.branch(REL, "v1", repo_type="model") == other


# ---------------------------------------------------------------------------
# init --from, lock with and without a policy, the trust step


def test_init_from_writes_the_release_manifest_plus_its_table(published, tmp_path):
    dest = consumer(tmp_path)
    text = (dest / "manifests" / "tiny.toml").read_text()
    data = parse_toml(text.encode(), ValueError, "m")
    assert data["release"] == {"repo": REL, "version": 1}
    assert "receipts" not in data.get("trust", {})  # the publisher's signers are not the consumer's
    want = hub_manifest_doc()
    for t in want["packages"].values():  # nor is the publisher's trust in the packages' code
        del t["trust"]
    assert {k: v for k, v in data.items() if k not in ("release", "trust")} == want
    assert "`frt release trust` adds it" in text  # a comment where the trust was
    assert (dest / "pyproject.toml").is_file() and (dest / "receipts" / "tiny").is_dir()


def test_init_from_copies_no_code_trust_and_says_so(published, env, tmp_path):
    """The release's manifest trusts both packages (``trust = true``) and has a publisher policy:
    `frt init --from` copies neither, names each package, and the first lock refuses the packages
    with `frt release trust` as the hint; that step prints and adds each package's trust."""
    doc = hub_manifest_doc()
    doc["trust"] = {"receipts": {"keys": ["keys/qualify-a.pub"]},
                    "publishers": {"remote-org": {"signature": "optional"}}}
    doc["packages"]["remote-org/norm"]["signature"] = "optional"
    published.write_manifest(doc)
    published.publish()
    dest = tmp_path / "c"
    rc, out, err = frt("init", "--from", f"hf://{REL}@v1", str(dest), "--json")
    assert rc == 0, err
    got = json.loads(out)
    assert got["code-trust"] == [
        {"kind": "package", "repo": "remote-org/norm", "keys": {"trust": True, "signature": "optional"}},
        {"kind": "package", "repo": "remote-org/scale", "keys": {"trust": True}},
        {"kind": "publisher", "org": "remote-org", "keys": {"signature": "optional"}}]
    data = parse_toml((dest / "manifests" / "tiny.toml").read_bytes(), ValueError, "m")
    assert all(set(t) == {"version"} for t in data["packages"].values())
    assert "publishers" not in data.get("trust", {})
    import shutil

    shutil.rmtree(dest)
    rc, out, err = frt("init", "--from", f"hf://{REL}@v1", str(dest))
    assert rc == 0, err
    assert "the release's manifest trusts the code of (not copied; none is trusted yet):" in out
    assert "  package remote-org/scale (trust = true)" in out
    assert '  package remote-org/norm (trust = true, signature = "optional")' in out
    assert 'note: the release\'s manifest has [trust.publishers."remote-org"]' in out
    # the Hub does not flag remote-org as a trusted publisher: the packages are refused, the hint says how
    rc, out, err = frt("lock", cwd=dest)
    assert rc == 1 and "publisher 'remote-org' is not a trusted kernel publisher" in err
    assert f"hint: the release {REL} may trust it: `frt release trust --model tiny`" in err
    rc, out, err = frt("release", "trust", cwd=dest)
    assert rc == 0, err
    assert f"trusted: package remote-org/scale (trust = true) (as the release's manifest at {REL}@" in out
    assert 'trusted: package remote-org/norm (trust = true, signature = "optional")' in out
    data = parse_toml((dest / "manifests" / "tiny.toml").read_bytes(), ValueError, "m")
    assert data["packages"]["remote-org/scale"] == {"version": 1, "trust": True}
    assert data["packages"]["remote-org/norm"] == {"version": 1, "trust": True, "signature": "optional"}
    rc, out, err = frt("lock", cwd=dest)
    assert rc == 0, err
    assert len(lock_of(dest).receipts) == 2
    assert {p.trust for p in lock_of(dest).packages.values()} == {"manifest"}
    rc, out, err = frt("release", "trust", cwd=dest)
    assert rc == 0 and "already trusted: package remote-org/scale" in out


def test_trust_prints_a_signer_identity_safely(published, env, tmp_path, monkeypatch):
    """A Sigstore identity from a release's lockfile is printed with its control characters as
    escapes: a carriage return or an ESC sequence cannot rewrite what the terminal shows."""
    from frt_dist.cli import release as cli_release

    row = {"kind": "sigstore", "identity": "ci@acme\r\x1b[2Kevil@x", "issuer": "https://issuer\x07", "receipts": 1,
           "added": True}
    (line,) = cli_release.trust_lines([row], REL, "a" * 40)
    assert "\r" not in line and "\x1b" not in line and "\x07" not in line
    assert "identity ci@acme\\x0d\\x1b[2Kevil@x (issuer https://issuer\\x07)" in line
    lines = cli_release.signer_lines([row], REL, "a" * 40)
    assert all(c.isprintable() for ln in lines for c in ln)


def test_init_from_names_the_signers_without_trusting_them(published, tmp_path):
    dest = tmp_path / "c2"
    rc, out, err = frt("init", "--from", f"hf://{REL}@v1", str(dest))
    assert rc == 0
    keyid = published.lock.receipt_keys["keys/qualify-a.pub"]["keyid"]
    assert f"key {keyid} (2 receipt(s))" in out and "none is trusted yet" in out
    assert not (dest / "keys").exists()


def test_lock_without_a_policy_rejects_every_release_receipt(published, env, tmp_path):
    env.set_trusted("remote-org", True)  # the packages' code is trusted (the Hub's flag): only the receipts are not
    dest = consumer(tmp_path)
    # nothing accepted: no empty lock by accident (exit 1, nothing written, each rejection named once)
    rc, out, err = frt("lock", cwd=dest)
    assert rc == 1, err
    assert not (dest / "lockfiles" / "tiny.lock").exists()
    assert "error: tiny: none of its 2 receipt(s) is accepted: the lock would route no cell; lockfiles/tiny.lock " \
           "is not written" in err
    for name in ("fast-decode", "solo-prefill"):
        line = next(ln for ln in err.splitlines() if f"receipts/tiny/{name}.json" in ln and ln.startswith("error:"))
        assert line.startswith(f"error: tiny: rejected release/{REL}/receipts/tiny/{name}.json (receipt digest sha256:")
        assert line.endswith("): a release's receipts need a policy naming their signers: the manifest has no "
                             "[trust.receipts] (review the release's signers, then `frt release trust`)")
        assert len(line.split("receipt digest ")[1].split(")")[0]) == len("sha256:") + 12  # shortened for a person
        assert sum(f"{name}.json" in ln for ln in err.splitlines()) == 1  # said once, not as a warning as well
    assert "hint: the release's receipts need a signer your policy in manifests/tiny.toml names: review the " \
           "release's signers, then `frt release trust --model tiny`" in err
    assert "hint: to write a lock that routes no cell on purpose: `frt lock --model tiny --allow-loss`" in err
    rc, out, err = frt("lock", "--json", cwd=dest)
    doc = json.loads(out)
    assert rc == 1 and doc["lockfiles"][0]["refused"] == "nothing-accepted"
    assert {len(f["digest"]) for f in doc["failures"]} == {len("sha256:") + 64}  # whole in --json
    assert all(f["kind"] == "rejected" and f["reason"].startswith("rejected release/") for f in doc["failures"])
    rc, out, err = frt("lock", "--allow-loss", cwd=dest)
    assert rc == 0, err
    lf = lock_of(dest)
    assert lf.release["repo"] == REL and lf.release["version"] == 1 and lf.release["commit"] == published.res["commit"]
    assert not lf.receipts and len(lf.rejected) == 2
    for r in lf.rejected:
        assert r["file"].startswith(f"release/{REL}/receipts/tiny/")
        assert r["reason"].startswith("a release's receipts need a policy naming their signers")
    assert "pinned at commit" in out
    # the lock uses the release lock's package pins: the commits the receipts were measured on
    assert {r: p.revision for r, p in lf.packages.items()} == {r: p.revision for r, p in published.lock.packages.items()}


def test_trust_is_an_explicit_step_then_the_receipts_are_accepted(published, tmp_path):
    dest = consumer(tmp_path)
    rc, out, err = frt("release", "trust", cwd=dest)
    assert rc == 0, err
    keyid = published.lock.receipt_keys["keys/qualify-a.pub"]["keyid"]
    assert out.startswith(f"trusted: key {keyid} -> keys/acme/tiny-release/")
    assert "trusted: package remote-org/scale (trust = true)" in out and "trusted: package remote-org/norm" in out
    m = parse_toml((dest / "manifests" / "tiny.toml").read_bytes(), ValueError, "m")
    (keyfile,) = m["trust"]["receipts"]["keys"]
    assert (dest / keyfile).read_text() == published.lock.receipt_keys["keys/qualify-a.pub"]["pem"]
    rc, out, err = frt("lock", cwd=dest)
    assert rc == 0, err
    lf = lock_of(dest)
    assert len(lf.receipts) == 2 and not lf.rejected
    assert {row["signer"] for row in lf.signatures.values()} == {keyid}
    doc = parse_toml((dest / "lockfiles" / "tiny.lock").read_bytes(), ValueError, "l")
    assert doc["schema"] == "frt.lock/1.2"
    assert set(doc["release"]["cells"].values()) == {"release"}
    # a second trust adds nothing
    rc, out, err = frt("release", "trust", cwd=dest)
    assert rc == 0 and all(ln.startswith("already trusted:") for ln in out.splitlines())
    # and verify re-derives every release receipt's acceptance from the lock alone
    rc, out, err = frt("verify", cwd=dest)
    assert rc == 0, out + err


def test_init_from_trust_flag(published, tmp_path):
    dest = consumer(tmp_path, "--trust")
    assert frt("lock", cwd=dest)[0] == 0
    assert len(lock_of(dest).receipts) == 2


# ---------------------------------------------------------------------------
# a later commit: pinned until --upgrade-release, which reports what changed


@pytest.fixture
def trusted(published, tmp_path):
    dest = consumer(tmp_path, "--trust")
    assert frt("lock", cwd=dest)[0] == 0
    return dest


def test_a_pinned_release_is_kept_and_upgrade_rejects_an_edited_receipt(published, trusted, env):
    before = (trusted / "lockfiles" / "tiny.lock").read_bytes()
    # the publisher's release branch gets a commit that edits a receipt after it was signed
    files = env.files(REL, "v1", repo_type="model")
    edited = json.loads(files["receipts/tiny/fast-decode.json"])
    edited["evidence"]["timing"]["speedup-median"] = 1.26
    files["receipts/tiny/fast-decode.json"] = json.dumps(edited, indent=1).encode()
    new = env.commit(REL, files, branch="v1", repo_type="model")
    rc, out, err = frt("lock", cwd=trusted)
    assert rc == 0 and (trusted / "lockfiles" / "tiny.lock").read_bytes() == before
    assert frt("lock", "--check", cwd=trusted)[0] == 0
    # the upgrade would lose the decode cell: exit 1, the lock as it was, the release's change and the
    # lost cell both named (coverage never shrinks silently)
    rc, out, err = frt("lock", "--upgrade-release", "--json", cwd=trusted)
    assert rc == 1 and (trusted / "lockfiles" / "tiny.lock").read_bytes() == before
    doc = json.loads(out)
    (entry,) = doc["lockfiles"]
    assert entry["refused"] == "coverage-loss" and entry["release"]["edited"]
    (loss,) = doc["failures"]
    assert loss["kind"] == "lost" and loss["route"] == "fast" and "edited after signing" in loss["reason"]
    assert any("frt release trust" in h for h in doc["hints"]) and any("--allow-loss" in h for h in doc["hints"])
    rc, out, err = frt("lock", "--upgrade-release", "--allow-loss", "--json", cwd=trusted)
    assert rc == 0, err
    doc = json.loads(out)
    (entry,) = doc["lockfiles"]
    ch = entry["release"]
    assert ch["from"] == published.res["commit"] and ch["to"] == new
    (it,) = ch["edited"]
    assert it["file"] == "receipts/tiny/fast-decode.json" and it["from"] != it["to"]
    assert it["verdict"].startswith("rejected: signature: ")
    assert f"release/{REL}/receipts/tiny/fast-decode.json.sig" in it["verdict"]
    assert "edited after signing" in it["verdict"]
    assert lock_of(trusted).release["commit"] == new and len(lock_of(trusted).receipts) == 1


def test_upgrade_reports_a_removed_receipt(published, trusted, env):
    files = env.files(REL, "v1", repo_type="model")
    del files["receipts/tiny/solo-prefill.json"], files["receipts/tiny/solo-prefill.json.sig"]
    env.commit(REL, files, branch="v1", repo_type="model")
    rc, out, err = frt("lock", "--upgrade-release", cwd=trusted)
    assert rc == 1 and "lost" in out and "solo" in err, (out, err)  # the prefill cell would go: refused first
    rc, out, err = frt("lock", "--upgrade-release", "--allow-loss", cwd=trusted)
    assert rc == 0, err
    assert "  - receipts/tiny/solo-prefill.json (file sha256 sha256:" in out and "removed from the release" in out
    assert len(lock_of(trusted).receipts) == 1


def test_a_new_key_is_not_accepted_until_the_consumer_trusts_it(published, trusted, env):
    # the publisher rotates its key: new receipts signed by key B, pushed on the same branch
    priv_b, pub_b = make_key(published.root / "keys", "qualify-b")
    doc = hub_manifest_doc()
    doc["trust"] = {"receipts": {"keys": ["keys/qualify-a.pub", "keys/qualify-b.pub"]}}
    published.write_manifest(doc)
    published.priv = priv_b
    published.receipt("fast-prefill", "fast", "prefill")
    published.publish()
    rc, out, err = frt("lock", "--upgrade-release", cwd=trusted)
    assert rc == 0, err
    lf = lock_of(trusted)
    kid_b = published.lock.receipt_keys["keys/qualify-b.pub"]["keyid"]
    (rej,) = lf.rejected
    assert rej["file"].endswith("fast-prefill.json") and f"signed by {kid_b}, which the policy does not list" in rej["reason"]
    (added,) = [ln for ln in out.splitlines() if ln.startswith("  + receipts/tiny/fast-prefill.json")]
    assert added.startswith("  + receipts/tiny/fast-prefill.json (file sha256 sha256:") and "rejected: signature: " in added
    assert kid_b[:19] in added and kid_b not in added  # labelled, and 12 hex where a person reads it
    assert (out + err).count("which the policy does not list") == 1  # on its report line, not warned again
    text = (trusted / "manifests" / "tiny.toml").read_text()
    now = lock_of(trusted).release["commit"]
    rc, out, err = frt("release", "trust", cwd=trusted)
    assert rc == 0 and f"trusted: key {kid_b}" in out and "already trusted: key" in out
    # the comment above [trust.receipts] names the latest trust, not only the first
    text = (trusted / "manifests" / "tiny.toml").read_text()
    notes = [ln for ln in text.splitlines() if "added by `frt release trust`" in ln]
    assert notes == [f"# Receipt signers this project accepts, added by `frt release trust`; last from "
                     f"{REL}@{now[:12]}'s lockfile:"], text
    assert frt("lock", cwd=trusted)[0] == 0
    assert len(lock_of(trusted).receipts) == 3


def test_release_receipts_for_another_route_digest_are_rejected(published, tmp_path):
    dest = consumer(tmp_path, "--trust")
    mpath = dest / "manifests" / "tiny.toml"
    data = parse_toml(mpath.read_bytes(), ValueError, "m")
    data["routes"]["fast"]["assembly"] = "compile"  # the consumer runs the route another way
    mpath.write_text(tomli_w.dumps(data))
    assert frt("lock", cwd=dest)[0] == 0
    lf = lock_of(dest)
    (rej,) = [r for r in lf.rejected if r["route"] == "fast"]
    assert "route-digest" in rej["reason"] and "does not match the route's definition" in rej["reason"]
    assert [r.route for r in lf.receipts.values()] == ["solo"]


# ---------------------------------------------------------------------------
# own evidence beside the release's


def test_own_receipts_beside_the_release_show_whose_evidence_serves_each_cell(published, trusted):
    own_priv, own_pub = make_key(trusted / "keys", "ours")
    m = parse_toml((trusted / "manifests" / "tiny.toml").read_bytes(), ValueError, "m")
    text = (trusted / "manifests" / "tiny.toml").read_text()
    (old_key,) = m["trust"]["receipts"]["keys"]
    text = text.replace(f'keys = ["{old_key}"]', f'keys = ["{old_key}", "keys/ours.pub"]')
    (trusted / "manifests" / "tiny.toml").write_text(text)
    assert frt("lock", cwd=trusted)[0] == 0
    p = trusted / "receipts" / "tiny" / "rtx.json"
    p.write_text(json.dumps(receipt_doc(lock_of(trusted), "fast", "decode", RTX), indent=1))
    assert frt("sign", "--key", str(own_priv), str(p))[0] == 0
    rc, out, err = frt("lock", cwd=trusted)
    assert rc == 0, err
    lf = lock_of(trusted)
    doc = parse_toml((trusted / "lockfiles" / "tiny.lock").read_bytes(), ValueError, "l")
    cells = doc["release"]["cells"]
    assert cells["decode/fp32/cpu/x86_64/rtx-5090"] == "project"
    assert cells["decode/fp32/cpu/x86_64/h200"] == "release"
    signers = {row["file"]: row["signer"] for row in lf.signatures.values()}
    assert signers["receipts/tiny/rtx.json"] != signers[f"release/{REL}/receipts/tiny/fast-decode.json"]
    assert frt("verify", cwd=trusted)[0] == 0


# ---------------------------------------------------------------------------
# mirror, offline lock, verify without the Hub


def test_mirror_carries_the_release_and_an_offline_lock_reads_it(published, trusted, env, monkeypatch, tmp_path):
    mirror = tmp_path / "mirror"
    rc, out, err = frt("mirror", str(mirror), "--all-variants", cwd=trusted)
    assert rc == 0, err
    commit = lock_of(trusted).release["commit"]
    folder = mirror / "models--acme--tiny-release"
    assert (folder / "refs" / "v1").read_text() == commit
    assert (folder / "snapshots" / commit / "receipts" / "tiny" / "fast-decode.json.sig").is_file()
    assert frt("verify", "--mirror", str(mirror), "--all-variants", cwd=trusted)[0] == 0
    # a node without the Hub and without any cache: the mirror alone
    env.stop()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-home"))
    monkeypatch.setenv("FRT_MIRROR", str(mirror))
    (trusted / "lockfiles" / "tiny.lock").unlink()
    rc, out, err = frt("lock", cwd=trusted)
    assert rc == 0, err
    lf = lock_of(trusted)
    assert lf.release["commit"] == commit and len(lf.receipts) == 2
    assert frt("verify", cwd=trusted)[0] == 0


@pytest.mark.parametrize("kind", ["file", "s3"])
def test_an_object_store_carries_the_release_as_a_folder_mirror_does(published, trusted, env, monkeypatch, tmp_path,
                                                                      kind, request):
    """frt publish URL uploads the release's files (by their sha256, before the lockfile); frt mirror DIR
    --from URL writes them into the folder's hub-cache layout, reported; the folder then verifies and
    locks offline as one `frt mirror DIR` made does. A folder store (file://) and S3 (moto)."""
    if kind == "s3":
        bucket = request.getfixturevalue("bucket")
        url = f"s3://{bucket}/fleet"

        def stored(hexd):
            return request.getfixturevalue("s3").client().get_object(Bucket=bucket, Key=f"fleet/sha256/{hexd}")[
                "Body"].read()
    else:
        url = f"file://{tmp_path / 'store'}"

        def stored(hexd):
            return (tmp_path / "store" / "sha256" / hexd).read_bytes()
    rc, out, err = frt("publish", url, "--all-variants", "--json", cwd=trusted)
    assert rc == 0, err
    doc = json.loads(out)
    rel = lock_of(trusted).release
    assert sorted(doc["models"][0]["release-files"]) == sorted({f"sha256/{sha[7:]}" for sha in rel["files"].values()})
    for path, sha in rel["files"].items():
        assert stored(sha[7:]) == env.files(REL, "v1", repo_type="model")[path]
    rc, out, err = frt("publish", url, "--all-variants", cwd=trusted)  # again: nothing more to send
    assert rc == 0 and f"release {REL} @ {rel['commit'][:12]}: {len(rel['files'])} file(s) by their sha256, 0 uploaded" \
        in out, out
    env.stop()  # the node: no Hub, no cache, the store alone
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-home"))
    mirror = tmp_path / "mirror"
    rc, out, err = frt("mirror", str(mirror), "--from", url, "--all-variants", cwd=trusted)
    assert rc == 0, err
    assert f"  release {REL} @ {rel['commit'][:12]}: {len(rel['files'])} file(s) in models--acme--tiny-release/ " \
           "(refs/v1)" in out
    folder = mirror / "models--acme--tiny-release"
    assert (folder / "refs" / "v1").read_text() == rel["commit"]
    assert frt("verify", "--mirror", str(mirror), "--all-variants", cwd=trusted)[0] == 0
    monkeypatch.setenv("FRT_MIRROR", str(mirror))
    (trusted / "lockfiles" / "tiny.lock").unlink()
    rc, out, err = frt("lock", cwd=trusted)
    assert rc == 0, err
    assert lock_of(trusted).release["commit"] == rel["commit"] and len(lock_of(trusted).receipts) == 2


def test_a_store_missing_a_release_file_is_named(published, trusted, tmp_path):
    store = tmp_path / "store"
    assert frt("publish", f"file://{store}", "--all-variants", cwd=trusted)[0] == 0
    rel = lock_of(trusted).release
    sha = rel["files"]["receipts/tiny/fast-decode.json"]
    (store / "sha256" / sha[7:]).unlink()
    rc, out, err = frt("mirror", str(tmp_path / "m"), "--from", f"file://{store}", "--all-variants", cwd=trusted)
    assert rc == 1 and f"release {REL} receipts/tiny/fast-decode.json: no object sha256/{sha[7:]} in the store" in err


def test_verify_flags_a_release_receipt_accepted_without_a_policy(published, trusted):
    """A hand-edited lock that keeps the release receipts but drops the policy: verify re-derives the
    release rule from the lock alone."""
    from frt_dist.documents.lockfile import Lockfile as L
    from frt_dist.documents.manifest import Manifest

    lf = lock_of(trusted)
    raw = dict(lf.manifest.raw)
    raw["trust"] = {k: v for k, v in raw["trust"].items() if k != "receipts"}
    if not raw["trust"]:
        del raw["trust"]
    forged = L(model=lf.model, manifest_file=lf.manifest_file, manifest=Manifest.from_dict(raw, file=lf.manifest_file),
               packages=lf.packages, receipts={d: lf.receipts[d] for d in lf.receipts}, rejected=[], index=dict(lf.index),
               release=lf.release)
    (trusted / "lockfiles" / "tiny.lock").write_bytes(forged.render())
    rc, out, err = frt("verify", "--json", cwd=trusted)
    doc = json.loads(out)
    assert rc == 1
    assert any(p["kind"] == "receipt" and "a release's receipts need a policy" in p["message"] for p in doc["problems"])


def test_sbom_names_the_release_as_the_evidence_supplier(published, trusted):
    rc, out, err = frt("lock", "--export", "cyclonedx", cwd=trusted)
    assert rc == 0, err
    bom = json.loads(out)
    commit = lock_of(trusted).release["commit"]
    props = {p["name"]: p["value"] for p in bom["metadata"]["component"].get("properties", [])}
    assert props["frt:release"] == f"hf://{REL}@{commit}"
    assert bom["metadata"]["supplier"]["name"] == REL or any(
        c.get("supplier", {}).get("name") == REL for c in bom.get("components", []))


# ---------------------------------------------------------------------------
# refusals and edges


def test_a_policy_scoped_to_other_device_classes_does_not_exempt_release_receipts(published, env, tmp_path):
    """``device-classes`` scopes the policy over the project's own receipts; a release's receipt is
    always judged: an h200 release receipt signed by a key the policy does not list stays rejected."""
    env.set_trusted("remote-org", True)  # (the packages' code trusted by the Hub's flag)
    dest = consumer(tmp_path)
    _, other = make_key(dest / "keys", "ours")
    mpath = dest / "manifests" / "tiny.toml"
    mpath.write_text(mpath.read_text() + '\n[trust.receipts]\nkeys = ["keys/ours.pub"]\ndevice-classes = ["rtx-5090"]\n')
    rc, out, err = frt("lock", cwd=dest)  # none accepted: refused, each rejection named
    assert rc == 1 and err.count("which the policy does not list") == 2, err
    assert "hint: the release's receipts need a signer your policy in manifests/tiny.toml names" in err
    assert frt("lock", "--allow-loss", cwd=dest)[0] == 0
    lf = lock_of(dest)
    assert not lf.receipts and len(lf.rejected) == 2
    assert all("which the policy does not list" in r["reason"] for r in lf.rejected)


def test_trust_facts_are_the_consumers_own_not_the_release_locks(env, tmp_path):
    """The release's lockfile records the Hub's trusted-publisher fact it read; the consumer asks the
    Hub itself (a release cannot vouch for a publisher)."""
    env.set_trusted("remote-org", True)
    doc = hub_manifest_doc()
    for t in doc["packages"].values():
        del t["trust"]
    pub = Publisher(tmp_path / "pub")
    doc["trust"] = {"receipts": {"keys": ["keys/qualify-a.pub"]}}
    pub.write_manifest(doc)
    pub.receipt("fast-decode", "fast", "decode")
    pub.publish()
    assert all(p.publisher_trusted for p in pub.lock.packages.values())
    dest = consumer(tmp_path, "--trust")
    env.set_trusted("remote-org", False)
    rc, out, err = frt("lock", cwd=dest)
    assert rc == 1
    assert "publisher 'remote-org' is not a trusted kernel publisher" in err


def test_init_from_refusals(env, tmp_path):
    rc, out, err = frt("init", "--from", f"hf://{REL}", str(tmp_path / "a"))
    assert rc == 2 and f"error: --from 'hf://{REL}': name the version: hf://{REL}@v<N>" in err
    rc, out, err = frt("init", "--from", "https://example/x", str(tmp_path / "a"))
    assert rc == 2 and "expected hf://ORG/NAME@vN" in err
    rc, out, err = frt("init", "--from", f"hf://{REL}@v1", str(tmp_path / "a"))
    assert rc == 1 and f"release '{REL}': no such model repo on the Hub" in err
    rc, out, err = frt("init", "--trust", str(tmp_path / "b"))
    assert rc == 2 and "it needs --from" in err


def test_init_from_an_unpublished_version_and_an_unknown_model(published, tmp_path):
    rc, out, err = frt("init", "--from", f"hf://{REL}@v7", str(tmp_path / "a"))
    assert rc == 1 and f"release '{REL}': no branch v7" in err
    rc, out, err = frt("init", "--from", f"hf://{REL}@v1", str(tmp_path / "a"), "--model", "other")
    assert rc == 2 and "--model other: release acme/tiny-release v1 publishes tiny" in err
    assert not (tmp_path / "a").exists()


def test_manifest_release_table_is_checked_by_field(env, tmp_path):
    tp = TinyProject(tmp_path / "p", manifest=hub_manifest_doc(), packages={})
    doc = hub_manifest_doc()
    doc["release"] = {"repo": "acme/x", "version": "1"}
    (tp.root / "manifests" / "tiny.toml").write_text(tomli_w.dumps(doc))
    rc, out, err = frt("lock", cwd=tp.root)
    assert rc == 2 and "release.version" in err
    doc["release"] = {"repo": "acme/x", "version": 1, "commit": "abc"}
    (tp.root / "manifests" / "tiny.toml").write_text(tomli_w.dumps(doc))
    rc, out, err = frt("lock", cwd=tp.root)
    assert rc == 2 and "release" in err and "commit" in err


def test_trust_needs_a_release_and_signed_receipts(published, env, tmp_path):
    rc, out, err = frt("release", "trust", cwd=published.root)
    assert rc == 2 and "names no [release] to trust" in err
    # a release whose receipts are unsigned: nothing to trust, said so
    env.set_trusted("remote-org", True)  # no package trust in the release either: nothing at all to trust
    pub2 = Publisher(tmp_path / "pub2")
    doc = hub_manifest_doc()
    for t in doc["packages"].values():
        del t["trust"]
    pub2.write_manifest(doc)
    pub2.receipt("u", "fast", "decode", sign=False)
    pub2.publish(version=2)
    rc, out, err = frt("init", "--from", f"hf://{REL}@v2", str(tmp_path / "c"), "--trust")
    assert rc == 1 and "records no receipt signature: there is no signer to trust" in err


def test_lock_offline_without_a_mirror_says_where_the_release_must_come_from(published, tmp_path, monkeypatch):
    dest = consumer(tmp_path, "--trust")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-home"))
    rc, out, err = frt("lock", cwd=dest)
    assert rc == 1
    assert f"release '{REL}': no branch v1 in the mirror or the hub cache (offline)" in err
    assert "frt mirror DIR" in err


def test_a_damaged_mirror_is_refused(published, trusted, env, monkeypatch, tmp_path):
    mirror = tmp_path / "mirror"
    assert frt("mirror", str(mirror), "--all-variants", cwd=trusted)[0] == 0
    commit = lock_of(trusted).release["commit"]
    link = mirror / "models--acme--tiny-release" / "snapshots" / commit / "receipts" / "tiny" / "fast-decode.json"
    blob = link.resolve()
    blob.write_bytes(blob.read_bytes().replace(b"1.25", b"1.35"))
    rc, out, err = frt("verify", "--mirror", str(mirror), "--all-variants", "--json", cwd=trusted)
    doc = json.loads(out)
    assert rc == 1 and [p["kind"] for p in doc["problems"]] == ["mismatched"]
    assert doc["problems"][0]["path"].endswith("receipts/tiny/fast-decode.json")
    env.stop()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-home"))
    monkeypatch.setenv("FRT_MIRROR", str(mirror))
    before = (trusted / "lockfiles" / "tiny.lock").read_bytes()
    rc, out, err = frt("lock", cwd=trusted)
    assert rc == 1 and "receipts/tiny/fast-decode.json differ from the sha256 the lock records" in err
    assert (trusted / "lockfiles" / "tiny.lock").read_bytes() == before


def test_a_pinned_relock_asks_the_hub_nothing_for_the_release(published, trusted, env):
    """The pinned commit's files, each checked against the sha256 the lock records, come from the
    hub cache: a re-lock (a policy change, own receipts) costs no release request."""
    env.reset_counts()
    rc, out, err = frt("lock", cwd=trusted)
    assert rc == 0, err
    asked = [p for _, p in env.requests if REL in p]
    assert len(asked) == 1 and "/refs" in asked[0], asked  # only whether a newer commit or version exists
    env.reset_counts()
    assert frt("lock", "--upgrade-release", cwd=trusted)[0] == 0
    assert env.request_count(REL) >= 1  # the branch's head is read again


# ---------------------------------------------------------------------------
# another version: frt release upgrade (SPEC 45), and what frt lock says about newer ones


def _publish_v2(published, *, version: str = "2"):
    """The publisher adds a seam to route solo, re-qualifies it, signs it with a new key B, pushes."""
    priv_b, _ = make_key(published.root / "keys", "qualify-b")
    doc = hub_manifest_doc()
    doc["routes"]["solo"]["seams"] = {"act": "scale", "norm": "norm"}
    doc["trust"] = {"receipts": {"keys": ["keys/qualify-a.pub", "keys/qualify-b.pub"]}}
    published.write_manifest(doc)
    for f in ("solo-prefill.json", "solo-prefill.json.sig"):
        (published.root / "receipts" / "tiny" / f).unlink()
    rc, out, err = frt("lock", "--allow-loss", cwd=published.root)  # the old solo receipt's cell goes, on purpose
    assert rc == 0, err
    published.priv = priv_b
    published.receipt("solo-prefill", "solo", "prefill")
    published.publish(version=version)
    return published.lock.receipt_keys["keys/qualify-b.pub"]["keyid"]


def test_release_upgrade_reports_applies_and_locks_under_the_coverage_rule(published, trusted, env):
    kid_b = _publish_v2(published)
    # frt lock (online) says a newer version exists; the pinned lock stays
    before = (trusted / "lockfiles" / "tiny.lock").read_bytes()
    rc, out, err = frt("lock", cwd=trusted)
    assert rc == 0 and (trusted / "lockfiles" / "tiny.lock").read_bytes() == before
    assert "note: release acme/tiny-release has a newer version, v2: `frt release upgrade @v2`" in err
    # a dry run shows the change and writes nothing
    mtext = (trusted / "manifests" / "tiny.toml").read_text()
    rc, out, err = frt("release", "upgrade", "--dry-run", cwd=trusted)
    assert rc == 0, err
    assert out.startswith(f"release {REL}: v1 -> v2 (commit {published.res['commit'][:12]} -> ")
    assert "    ~ route solo: seams {act = scale} -> {act = scale, norm = norm} (route digest sha256:" in out
    assert f"  signer key {kid_b}: 1 receipt(s), NEW: not in your [trust.receipts]; review it\n" in out
    assert "to apply: `frt release upgrade --model tiny @v2` (with --trust to trust what is marked NEW)" in out
    kid_a = published.lock.receipt_keys["keys/qualify-a.pub"]["keyid"]
    assert f"  signer key {kid_a}: 1 receipt(s), trusted\n" in out
    assert (trusted / "manifests" / "tiny.toml").read_text() == mtext
    # the upgrade: everything or nothing; refused by the coverage rule until the new signer is trusted
    rc, out, err = frt("release", "upgrade", cwd=trusted)
    assert rc == 1, err
    assert (trusted / "manifests" / "tiny.toml").read_text() == mtext
    assert (trusted / "lockfiles" / "tiny.lock").read_bytes() == before
    assert "error: tiny: the new lock loses coverage (1 lost" in err
    assert f"signed by {kid_b[:19]}" in err and "which the policy does not list" in err
    assert "error: tiny: the upgrade to v2 is not applied: manifests/tiny.toml and the lockfile are as they were" in err
    assert "hint: review the signers and packages marked NEW above, then `frt release upgrade --model tiny @v2 " \
           "--trust`" in err
    assert "frt lock --model tiny" not in err  # the lock's own hints name steps for a lock, not for this upgrade
    assert (out + err).count("which the policy does not list") == 1  # the rejection said once
    # following the hint
    rc, out, err = frt("release", "upgrade", "--model", "tiny", "@v2", "--trust", cwd=trusted)
    assert rc == 0, err
    assert f"trusted: key {kid_b}" in out and "manifests/tiny.toml: now the release's v2 manifest" in out
    m = parse_toml((trusted / "manifests" / "tiny.toml").read_bytes(), ValueError, "m")
    assert m["release"] == {"repo": REL, "version": 2}
    assert m["routes"]["solo"]["seams"] == {"act": "scale", "norm": "norm"}
    mine = parse_toml(mtext.encode(), ValueError, "m")["trust"]["receipts"]["keys"]
    assert m["trust"]["receipts"]["keys"][:len(mine)] == mine and len(m["trust"]["receipts"]["keys"]) == len(mine) + 1
    assert all(t.get("trust") for t in m["packages"].values())  # the project's package trust kept
    lf = lock_of(trusted)
    assert lf.release["version"] == 2 and lf.release["commit"] == env.branch(REL, "v2", repo_type="model")
    assert sorted(r.route for r in lf.receipts.values()) == ["fast", "solo"] and not lf.rejected
    assert frt("lock", "--check", cwd=trusted)[0] == 0 and frt("verify", cwd=trusted)[0] == 0


def test_the_old_version_flag_still_works_says_it_is_deprecated_and_is_out_of_help(published, trusted, env):
    """``--version N`` was the release version in push and upgrade (and read like ``frt --version``):
    ``@vN`` now, the old flag kept, hidden, with a warning."""
    from frt_dist.cli.parser import build_parser

    rc, out, err = frt("release", "push", f"hf://{REL}", "--version", "2", cwd=published.root)
    assert rc == 0 and f"release {REL} v2: commit " in out, err
    assert err.splitlines()[-1] == (f"warning: '--version 2' is deprecated and will be removed in the next release; use "
                                    f"'frt release push hf://{REL}@v2'")
    rc, out, err = frt("release", "push", f"hf://{REL}@v1", "--version", "2", cwd=published.root)
    assert rc == 2 and err == "error: @v1 and --version 2 name two versions; give one (@vN)\n"
    rc, out, err = frt("release", "upgrade", "--version", "2", "--dry-run", cwd=trusted)
    assert rc == 0 and "to apply: `frt release upgrade --model tiny @v2`" in out, err
    assert err.splitlines()[-1].endswith("use 'frt release upgrade @v2'")
    release = build_parser()._subparsers._group_actions[0].choices["release"]
    for action, sub in release._subparsers._group_actions[0].choices.items():
        assert "--version" not in sub.format_help(), action


def test_release_upgrade_json_and_an_unknown_version(published, trusted, env):
    rc, out, err = frt("release", "upgrade", "@v7", cwd=trusted)
    assert rc == 1 and f"release '{REL}': no branch v7" in err
    rc, out, err = frt("release", "upgrade", "hf://acme/other@v2", cwd=trusted)
    assert rc == 2 and err.startswith(f"error: frt release upgrade hf://acme/other@v2: the manifest consumes release "
                                      f"'{REL}', not 'acme/other'")
    _publish_v2(published)
    rc, out, err = frt("release", "upgrade", "--json", "--allow-loss", cwd=trusted)
    doc = json.loads(out)
    assert rc == 0 and doc["upgrade"]["applied"] and doc["upgrade"]["version"] == 2
    assert {(r["what"], r["name"], r["change"]) for r in doc["upgrade"]["manifest"]} == {("route", "solo", "changed")}
    assert [s["new"] for s in doc["upgrade"]["signers"] if s["kind"] == "key"].count(True) == 1
    assert doc["lock"]["lockfiles"][0]["written"]


def test_a_route_the_release_changed_is_worded_as_the_releases_with_the_upgrade_as_hint(published, trusted, env):
    _publish_v2(published, version="1")  # the same branch: --upgrade-release's case
    rc, out, err = frt("lock", cwd=trusted)
    assert rc == 0 and f"note: release {REL} v1 has a newer commit (" in err and "`frt lock --upgrade-release`" in err
    rc, out, err = frt("lock", "--upgrade-release", cwd=trusted)
    assert rc == 1
    assert "measured on the release's definition of route 'solo' (route digest sha256:" in err
    assert "the release changed the route" in err and "the route changed since it was measured" not in err
    hint = f"hint: the release {REL} changed route solo: review its change, then apply the release's manifest " \
           "(your trust tables and your own receipts are kept): `frt release upgrade --model tiny @v1`"
    assert hint in err, err
    assert "frt release trust" not in err  # the route is the release's; trust is not what is missing yet
    # following the hint: the new signer is what remains, and the hint says so; following that one locks
    rc, out, err = frt("release", "upgrade", "--model", "tiny", "@v1", cwd=trusted)
    assert rc == 1
    again = "`frt release upgrade --model tiny @v1 --trust`"
    assert f"hint: review the signers and packages marked NEW above, then {again}" in err, err
    rc, out, err = frt("release", "upgrade", "--model", "tiny", f"hf://{REL}@v1", "--trust", cwd=trusted)
    assert rc == 0, err
    assert sorted(r.route for r in lock_of(trusted).receipts.values()) == ["fast", "solo"]
    assert frt("lock", "--check", cwd=trusted)[0] == 0


def test_init_from_a_manifest_with_inline_package_tables_leaves_their_trust_out(published, env, tmp_path):
    """A release whose manifest writes its packages inline (``"org/x" = { version = 1, trust = true }``):
    the lines cannot be taken apart, so the manifest is written again without the publisher's trust."""
    doc = hub_manifest_doc()
    doc["trust"] = {"receipts": {"keys": ["keys/qualify-a.pub"]}}
    text = tomli_w.dumps({k: v for k, v in doc.items() if k != "packages"})
    inline = "".join(f'"{r}" = {{ version = 1, trust = true }}\n' for r in doc["packages"])
    text = text.replace("[phases.", f"[packages]\n{inline}\n[phases.", 1)
    (published.root / "manifests" / "tiny.toml").write_text(text)
    published.publish()
    dest = tmp_path / "inline"
    rc, out, err = frt("init", "--from", f"hf://{REL}@v1", str(dest))
    assert rc == 0, err
    data = parse_toml((dest / "manifests" / "tiny.toml").read_bytes(), ValueError, "m")
    assert data["packages"] == {r: {"version": 1} for r in doc["packages"]}
    assert "receipts" not in data.get("trust", {}) and data["release"] == {"repo": REL, "version": 1}
    assert "package remote-org/scale (trust = true)" in out


def test_the_newer_version_note_is_advice_a_failing_hub_does_not_stop_the_lock(published, trusted, env):
    _publish_v2(published)
    env.fail("/refs", 422)  # the one request the note needs; a pinned relock asks nothing else
    rc, out, err = frt("lock", cwd=trusted)
    assert rc == 0, err
    assert "newer version" not in err


# ---------------------------------------------------------------------------
# a hostile release (issue 35): what its lockfile, its files and its Hub say is checked before it is
# printed, trusted, written or locked


def _push_lock_edit(env, published, edit) -> str:
    """Commit to branch v1 the release's files with its lockfile edited by ``edit(Lockfile)`` (as a
    publisher's tool, or an attacker holding the repo, could); returns the commit."""
    files = env.files(REL, "v1", repo_type="model")
    lf = published.lock
    edit(lf)
    files["lockfiles/tiny.lock"] = lf.render()
    return env.commit(REL, files, branch="v1", repo_type="model")


def _printable(text: str) -> bool:
    return all(c.isprintable() for ln in text.splitlines() for c in ln)


SPOOF = "ci@acme\r\x1b[2K\x1b[8mkey sha256:" + "0" * 64 + " (2 receipt(s))"


def _sigstore_row(row: dict, identity: str, issuer: str) -> dict:
    return {"receipt": row["receipt"], "file": row["file"], "kind": "sigstore", "signer": identity, "issuer": issuer,
            "bundle": {}}


def test_a_signer_identity_with_control_characters_is_escaped_everywhere_and_never_trusted(published, env, tmp_path):
    """The release's lockfile names a Sigstore identity holding ``\\r`` and ESC sequences that would
    hide its own line and show a fake ``key`` line; and a signature row for a receipt the release
    does not hold. Every command prints the identity escaped; `frt release trust` refuses it with
    nothing written; the counts are the release's own receipts."""
    keyid = published.lock.receipt_keys["keys/qualify-a.pub"]["keyid"]

    def edit(lf):
        rows = sorted(lf.signatures.values(), key=lambda r: r["file"])
        lf.signatures[rows[1]["receipt"]] = _sigstore_row(rows[1], SPOOF, "https://issuer\x1b]8;;x\x07")
        lf.signatures[rows[0]["receipt"]] = {**rows[0], "signer": "sha256:\x1b[2K" + "1" * 64}  # a "keyid", no pin
        ghost = "sha256:" + "ab" * 32  # a receipt the release does not publish, "signed" by the real key
        lf.signatures[ghost] = {**rows[0], "receipt": ghost, "file": "receipts/tiny/ghost.json"}

    _push_lock_edit(env, published, edit)
    dest = tmp_path / "c"
    rc, out, err = frt("init", "--from", f"hf://{REL}@v1", str(dest))
    assert rc == 0, err
    assert _printable(out + err), out
    assert keyid not in out  # it signs no receipt of the release: the ghost row counts for nothing
    assert "  key sha256:\\x1b[2K1111" in out and "refused: its lockfile pins no public key" in out
    line = next(ln for ln in out.splitlines() if "identity ci@acme" in ln)
    assert line.startswith("  identity ci@acme\\x0d\\x1b[2K\\x1b[8mkey sha256:")
    assert "refused: it holds a control character" in line
    before = (dest / "manifests" / "tiny.toml").read_bytes()
    rc, out, err = frt("release", "trust", cwd=dest)
    assert rc == 1 and _printable(out + err)
    assert "a Sigstore identity or issuer with a control character" in err and "ci@acme\\x0d\\x1b[2K" in err
    assert "nothing was written" in err
    assert (dest / "manifests" / "tiny.toml").read_bytes() == before and not (dest / "keys").exists()
    rc, out, err = frt("release", "upgrade", "--dry-run", cwd=dest)
    assert rc == 0 and _printable(out + err), out
    assert keyid not in out and "  signer key sha256:\\x1b[2K1111" in out
    rc, out, err = frt("release", "upgrade", "--trust", cwd=dest)
    assert rc == 1 and "a Sigstore identity or issuer with a control character" in err and _printable(out + err)
    assert (dest / "manifests" / "tiny.toml").read_bytes() == before and not (dest / "keys").exists()
    rc, out, err = frt("init", "--from", f"hf://{REL}@v1", str(tmp_path / "d"), "--trust")
    assert rc == 1 and _printable(out + err) and "a Sigstore identity or issuer with a control character" in err
    assert not (tmp_path / "d").exists()


def test_trust_validates_everything_before_it_writes(published, env, tmp_path):
    """A signer row with ``issuer = ""`` (a manifest no frt command could read afterwards) and a
    pinned PEM that is not the key its keyid names: each refused, naming what is wrong, with nothing
    written; the project still locks afterwards."""
    dest = consumer(tmp_path)
    before = (dest / "manifests" / "tiny.toml").read_bytes()

    def empty_issuer(lf):
        row = sorted(lf.signatures.values(), key=lambda r: r["file"])[1]
        lf.signatures[row["receipt"]] = _sigstore_row(row, "ci@acme.example", "")

    _push_lock_edit(env, published, empty_issuer)
    rc, out, err = frt("release", "trust", cwd=dest)
    assert rc == 1, (out, err)
    assert "identity 'ci@acme.example' with an empty issuer" in err and "nothing was written" in err
    assert (dest / "manifests" / "tiny.toml").read_bytes() == before and not (dest / "keys").exists()
    _, other = make_key(tmp_path / "other-keys", "other")

    def wrong_pem(lf):
        pin = lf.receipt_keys["keys/qualify-a.pub"]
        lf.receipt_keys["keys/qualify-a.pub"] = {"keyid": pin["keyid"], "pem": other.read_text()}

    _push_lock_edit(env, published, wrong_pem)
    keyid = published.lock.receipt_keys["keys/qualify-a.pub"]["keyid"]
    rc, out, err = frt("release", "trust", cwd=dest)
    assert rc == 1, (out, err)
    assert f"the PEM its lockfile pins for keys/qualify-a.pub is not the key {keyid} its signatures name" in err
    assert "records no receipt signature" not in err and "nothing was written" in err
    assert (dest / "manifests" / "tiny.toml").read_bytes() == before and not (dest / "keys").exists()
    env.set_trusted("remote-org", True)
    assert frt("lock", "--allow-loss", cwd=dest)[0] == 0  # the project is not broken by a refused trust


def test_a_failing_trust_write_puts_back_what_it_wrote(tmp_path):
    """`frt release trust` writes key files, then the manifest: when the manifest cannot be written,
    the key files written before it are put back as they were and the folders made for them removed."""
    from frt_dist.release.trust import _write_all

    root = tmp_path / "p"
    (root / "keys").mkdir(parents=True)
    (root / "keys" / "old.pub").write_bytes(b"old")
    (root / "manifests").write_text("a file where the manifest's folder should be")
    with pytest.raises(OSError):
        _write_all(root, {"keys/acme/rel/k.pub": b"new key", "keys/old.pub": b"replaced"},
                   root / "manifests" / "tiny.toml", b"manifest")
    assert sorted(p.relative_to(root).as_posix() for p in (root / "keys").rglob("*")) == ["keys/old.pub"]
    assert (root / "keys" / "old.pub").read_bytes() == b"old"


def _drop_hub_caches(repo: str) -> None:
    """Forget every hub-cache copy of the release repo (this process's), so the next read asks the Hub."""
    import shutil

    from huggingface_hub import constants

    from frt_dist.distribution.release_files import cache_folder
    from frt_dist.distribution.sources import cache_dirs

    for d in {*cache_dirs(), Path(constants.HF_HUB_CACHE)}:
        shutil.rmtree(d / cache_folder(repo), ignore_errors=True)


def test_at_the_pinned_commit_the_lock_takes_only_the_files_it_recorded(published, trusted, env, monkeypatch, tmp_path):
    """A receipt the release removed, planted back into the mirror's snapshot of the pinned commit
    (offline), or listed by a Hub at that commit: ignored and named, never accepted without an
    upgrade."""
    old = env.files(REL, "v1", repo_type="model")
    files = dict(old)
    del files["receipts/tiny/solo-prefill.json"], files["receipts/tiny/solo-prefill.json.sig"]
    pinned = env.commit(REL, files, branch="v1", repo_type="model")
    assert frt("lock", "--upgrade-release", "--allow-loss", cwd=trusted)[0] == 0
    lpath = trusted / "lockfiles" / "tiny.lock"
    before = lpath.read_bytes()
    assert lock_of(trusted).release["commit"] == pinned and len(lock_of(trusted).receipts) == 1
    # a Hub that lists the removed receipt again at the pinned commit
    env.rewrite(REL, pinned, old, repo_type="model")
    _drop_hub_caches(REL)
    rc, out, err = frt("lock", cwd=trusted)
    assert rc == 0, err
    assert lpath.read_bytes() == before and "gained" not in out + err
    warn = [ln for ln in err.splitlines() if ln.startswith("warning: ")]
    assert any(f"release {REL} at {pinned[:12]}" in ln and "receipts/tiny/solo-prefill.json" in ln
               and "the lock does not record" in ln for ln in warn), err.splitlines()
    # a mirror whose snapshot of the pinned commit has the receipt planted back (offline)
    mirror = tmp_path / "mirror"
    assert frt("mirror", str(mirror), "--all-variants", cwd=trusted)[0] == 0
    snap = mirror / "models--acme--tiny-release" / "snapshots" / pinned / "receipts" / "tiny"
    for name in ("solo-prefill.json", "solo-prefill.json.sig"):
        (snap / name).write_bytes(old[f"receipts/tiny/{name}"])
    env.stop()
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-home"))
    monkeypatch.setenv("FRT_MIRROR", str(mirror))
    rc, out, err = frt("lock", cwd=trusted)
    assert rc == 0, err
    assert lpath.read_bytes() == before and "gained" not in out + err
    assert "receipts/tiny/solo-prefill.json" in err and "the lock does not record" in err


@pytest.mark.parametrize("name", ["receipts/tiny/../../manifests/evil.json", "/receipts/tiny/absolute.json",
                                  "receipts/tiny/new\nline.json"])
def test_a_release_file_named_outside_the_release_layout_is_refused(published, env, tmp_path, name):
    """A Hub that lists, at the release's commit, a file whose name leaves the layout (``..``), is
    absolute or holds a newline: `frt init --from` ends in an ``error:`` naming it, nothing written."""
    import httpx2

    commit = published.res["commit"]
    url = f"{env.url}/api/models/{REL}/tree/{commit}?recursive=true&expand=false"
    listing = httpx2.get(url).json()
    listing.append({**next(e for e in listing if e["path"].endswith(".json")), "path": name})
    env.answer(f"tree/{commit}?recursive=true", 200, json.dumps(listing).encode(), method="GET")
    dest = tmp_path / "c"
    rc, out, err = frt("init", "--from", f"hf://{REL}@v1", str(dest))
    assert rc == 1, (out, err)
    (line,) = [ln for ln in err.splitlines() if ln.startswith("error: ")]
    assert line.startswith(f"error: release '{REL}' at {commit[:12]}: the Hub lists a file ")
    assert repr(name.replace("\n", "\\x0a")) in line and "not a file of the release layout" in line
    assert "cannot reach the Hub" not in err and not dest.exists()


def test_a_fifo_at_the_mirrors_ref_is_refused_not_waited_on(published, trusted, monkeypatch, tmp_path):
    """The first offline lock reads the mirror's ``refs/v1``: a FIFO there is refused with an
    ``error:`` naming it (it would block a reader for ever); so is a FIFO for a pinned release file."""
    import os

    from test_hostile_files import bounded

    mirror = tmp_path / "mirror"
    assert frt("mirror", str(mirror), "--all-variants", cwd=trusted)[0] == 0
    ref = mirror / "models--acme--tiny-release" / "refs" / "v1"
    commit = ref.read_text()
    ref.unlink()
    os.mkfifo(ref)
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-home"))
    monkeypatch.setenv("FRT_MIRROR", str(mirror))
    (trusted / "lockfiles" / "tiny.lock").rename(tmp_path / "tiny.lock")
    rc, out, err = bounded(lambda: frt("lock", cwd=trusted), ref)  # a reader stuck on the FIFO fails the test
    assert rc == 1, (out, err)
    assert f"error: release '{REL}': {ref}: is a FIFO (named pipe), not a regular file" in err, err
    ref.unlink()
    ref.write_text(commit)
    (tmp_path / "tiny.lock").rename(trusted / "lockfiles" / "tiny.lock")
    sig = mirror / "models--acme--tiny-release" / "snapshots" / commit / "receipts" / "tiny" / "fast-decode.json.sig"
    sig.unlink()
    os.mkfifo(sig)
    rc, out, err = bounded(lambda: frt("lock", cwd=trusted), sig)
    assert rc == 1 and f"{REL}@{commit[:12]}/receipts/tiny/fast-decode.json.sig: is a FIFO (named pipe), not a regular file" in err, err


def test_a_re_signed_receipt_is_reported_with_the_signature_files_digests(published, trusted, env):
    """The publisher re-signs a receipt (same bytes, a new key): the upgrade report's line names the
    signature file and its sha256 before and after, not the receipt's digest twice."""
    before = env.files(REL, "v1", repo_type="model")["receipts/tiny/fast-decode.json.sig"]
    priv_b, _ = make_key(published.root / "keys", "qualify-b")
    doc = hub_manifest_doc()
    doc["trust"] = {"receipts": {"keys": ["keys/qualify-a.pub", "keys/qualify-b.pub"]}}
    published.write_manifest(doc)
    assert frt("sign", "--key", str(priv_b), str(published.root / "receipts" / "tiny" / "fast-decode.json"))[0] == 0
    published.publish()
    after = env.files(REL, "v1", repo_type="model")["receipts/tiny/fast-decode.json.sig"]
    assert after != before
    rc, out, err = frt("lock", "--upgrade-release", "--allow-loss", cwd=trusted)
    assert rc == 0, err
    import hashlib

    (line,) = [ln for ln in out.splitlines() if ln.startswith("  ~ receipts/tiny/fast-decode.json")]
    old, new = (hashlib.sha256(b).hexdigest()[:12] for b in (before, after))
    assert (f"(signature fast-decode.json.sig changed: file sha256 sha256:{old} -> file sha256 sha256:{new}): "
            "rejected") in line, line


@pytest.mark.subprocess
def test_a_trickling_hub_stops_at_the_commands_deadline(published, env, tmp_path):
    """A Hub that sends the release's receipts one byte every 1.5 s (several files at once: the
    download is parallel) never trips a per-read timeout; `frt init --from` stops at
    ``FRT_HUB_DEADLINE`` with an ``error:`` naming a file and the setting, exit 1, nothing written.
    (Each trickled file is ~1 kB: without the deadline the command would run for hours; the
    process's own timeout is only the hang guard.)"""
    from helpers.frt import frt_process

    env.trickle(f"/{REL}/resolve/{published.res['commit']}/receipts/tiny/", 1.5)
    dest = tmp_path / "c"
    r = frt_process("init", "--from", f"hf://{REL}@v1", str(dest), timeout=60,
                    env={"HF_ENDPOINT": env.url, "HF_HOME": str(tmp_path / "home"), "HF_HUB_DISABLE_PROGRESS_BARS": "1",
                         "FRT_HUB_DEADLINE": "4", "FRT_HUB_TIMEOUT": "5"})
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    (line,) = [ln for ln in r.stderr.splitlines() if ln.startswith("error: ")]
    assert f"{REL} receipts/tiny/" in line and "not received within FRT_HUB_DEADLINE=4s" in line, line
    assert "hint: a large download on a slow link: raise FRT_HUB_DEADLINE" in r.stderr
    assert not dest.exists()
    rc, out, err = frt_main(["init", "--from", f"hf://{REL}@v1", str(dest)], env={"FRT_HUB_DEADLINE": "0"})
    assert rc == 2 and "error: FRT_HUB_DEADLINE='0': expected a positive number" in err and not dest.exists()


def test_upgrade_carries_the_projects_trust_whatever_valid_toml_form_it_has(published, trusted, env):
    """A ``[trust]`` header after ``[trust.receipts]`` (valid TOML: the table was only implied before)
    holding the publisher policy as dotted keys: `frt release upgrade` keeps it as it reads, as
    tomllib reads it, instead of refusing the project's manifest."""
    import tomllib

    mpath = trusted / "manifests" / "tiny.toml"
    mpath.write_text(mpath.read_text() + '\n[trust]\npublishers.remote-org.signature = "optional"\n')
    mine = tomllib.loads(mpath.read_text())["trust"]
    assert set(mine) == {"receipts", "publishers"}
    assert frt("lock", cwd=trusted)[0] == 0  # the manifest reads, as tomllib reads it
    _publish_v2(published)
    rc, out, err = frt("release", "upgrade", "--trust", cwd=trusted)
    assert rc == 0, err
    got = tomllib.loads(mpath.read_text())
    assert got["release"]["version"] == 2 and got["trust"]["publishers"] == mine["publishers"]
    assert got["trust"]["receipts"]["keys"][:len(mine["receipts"]["keys"])] == mine["receipts"]["keys"]
