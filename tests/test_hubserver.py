"""Tests for tests/helpers/hubserver.py against the real huggingface_hub client and the real kernels library."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import httpx2  # huggingface_hub 2.x transport
import pytest
from huggingface_hub import HfApi, constants
from huggingface_hub.errors import (
    EntryNotFoundError,
    HfHubHTTPError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

from helpers.hubserver import HubServer, kernel_variant_files

REPO = "testorg/addone"
META = "build/torch-cpu/metadata.json"


@pytest.fixture
def server(hub):
    """The loopback Hub of conftest.py (conftest's autouse fixture keeps HF hermetic)."""
    return hub


@pytest.fixture
def api(server):
    return HfApi(endpoint=server.url, token=False)


@pytest.fixture
def repo(server):
    """testorg/addone with a v1 branch (cpu variant) and main pointing to an older commit."""
    first = server.commit(REPO, {"README.md": b"hello\n"}, message="init")
    files = kernel_variant_files(name="add-one", variant="torch-cpu")
    files["README.md"] = b"hello\n"
    v1 = server.commit(REPO, files, branch="v1", parent=first, message="v1 build")
    return {"first": first, "v1": v1, "files": files}


# ---------------------------------------------------------------------------
# huggingface_hub client
# ---------------------------------------------------------------------------


def test_refs(api, server, repo):
    refs = api.list_repo_refs(REPO, repo_type="kernel")
    branches = {b.name: (b.ref, b.target_commit) for b in refs.branches}
    assert branches == {"main": ("refs/heads/main", repo["first"]), "v1": ("refs/heads/v1", repo["v1"])}
    assert refs.tags == [] and refs.converts == []

    server.set_branch(REPO, "v2", repo["first"])
    server.delete_branch(REPO, "v1")
    names = {b.name for b in api.list_repo_refs(REPO, repo_type="kernel").branches}
    assert names == {"main", "v2"}


def test_commit_sha_is_deterministic(repo):
    other = HubServer()  # no need to start it
    first = other.commit(REPO, {"README.md": b"hello\n"}, message="whatever")
    assert first == repo["first"]
    assert other.commit(REPO, repo["files"], branch="v1", parent=first) == repo["v1"]
    # Same tree on top of a different parent -> different commit.
    assert other.commit(REPO, repo["files"], branch="v1") != repo["v1"]
    assert len(repo["v1"]) == 40 and int(repo["v1"], 16) >= 0


def test_tree(api, repo):
    # What kernels.variants.get_variants does.
    tree = list(api.list_repo_tree(REPO, path_in_repo="build", repo_type="kernel", revision="v1"))
    assert [(type(e).__name__, e.path) for e in tree] == [("RepoFolder", "build/torch-cpu")]

    # Non-recursive root listing: direct children only.
    root = list(api.list_repo_tree(REPO, repo_type="kernel", revision=repo["v1"]))
    assert sorted(e.path for e in root) == ["README.md", "build"]

    # Recursive under a path: all directories and files below it.
    rec = list(
        api.list_repo_tree(REPO, path_in_repo="build/torch-cpu", recursive=True, repo_type="kernel", revision="v1")
    )
    files = {e.path: e for e in rec if type(e).__name__ == "RepoFile"}
    dirs = {e.path for e in rec if type(e).__name__ == "RepoFolder"}
    assert dirs == {"build/torch-cpu/add_one"}
    assert set(files) == {"build/torch-cpu/add_one/__init__.py", META}
    assert files[META].size == len(repo["files"][META])
    assert len(files[META].blob_id) == 40 and files[META].lfs is None

    # The older commit has no build/ at all.
    with pytest.raises(EntryNotFoundError):
        list(api.list_repo_tree(REPO, path_in_repo="build", repo_type="kernel", revision="main"))


def test_lfs_like_files(api, server, tmp_path):
    so = "build/torch-cpu/add_one/_ops.so"
    module_files = {"__init__.py": b"", "_ops.so": b"\x7fELF" * 10}
    sha = server.commit(REPO, kernel_variant_files(name="add-one", variant="torch-cpu", module_files=module_files))
    (entry,) = [e for e in api.list_repo_tree(REPO, recursive=True, repo_type="kernel", revision=sha) if e.path == so]
    assert entry.lfs is not None and entry.lfs.size == 40 and len(entry.lfs.sha256) == 64
    path = api.hf_hub_download(REPO, so, repo_type="kernel", revision=sha, cache_dir=tmp_path)
    assert Path(path).read_bytes() == b"\x7fELF" * 10
    # The cache blob is named after the sha256 (X-Linked-Etag), like real LFS files.
    assert (tmp_path / "kernels--testorg--addone" / "blobs" / entry.lfs.sha256).exists()


def test_repo_info(api, repo):
    info = api.repo_info(REPO, repo_type="kernel", revision="v1")
    assert info.id == REPO and info.sha == repo["v1"]
    assert "build/torch-cpu/metadata.json" in {s["rfilename"] for s in info.siblings}
    assert api.kernel_info(REPO).sha == repo["first"]


def test_download_at_branch_and_commit(api, repo, tmp_path):
    p1 = api.hf_hub_download(REPO, META, repo_type="kernel", revision="v1", cache_dir=tmp_path)
    assert Path(p1).read_bytes() == repo["files"][META]
    assert repo["v1"] in p1
    assert (tmp_path / "kernels--testorg--addone" / "refs" / "v1").read_text() == repo["v1"]

    p2 = api.hf_hub_download(REPO, META, repo_type="kernel", revision=repo["v1"], cache_dir=tmp_path / "other")
    assert Path(p2).read_bytes() == repo["files"][META]


def test_snapshot_download(api, repo, tmp_path):
    path = api.snapshot_download(
        REPO, repo_type="kernel", revision="v1", cache_dir=tmp_path, allow_patterns=["build/torch-cpu/*"]
    )
    got = sorted(str(p.relative_to(path)) for p in Path(path).rglob("*") if p.is_file())
    assert got == ["build/torch-cpu/add_one/__init__.py", META]


def test_range_request(server, repo):
    url = f"{server.url}/kernels/{REPO}/resolve/v1/{META}"
    req = urllib.request.Request(url, headers={"Range": "bytes=2-5"})
    with urllib.request.urlopen(req) as r:
        assert r.status == 206
        assert r.read() == repo["files"][META][2:6]
        assert r.headers["Content-Range"] == f"bytes 2-5/{len(repo['files'][META])}"


def test_not_found_errors(api, repo, tmp_path):
    with pytest.raises(EntryNotFoundError):
        api.hf_hub_download(REPO, "build/torch-cpu/nope.json", repo_type="kernel", revision="v1", cache_dir=tmp_path)
    with pytest.raises(RevisionNotFoundError):
        api.hf_hub_download(REPO, META, repo_type="kernel", revision="v9", cache_dir=tmp_path)
    with pytest.raises(RepositoryNotFoundError):
        api.hf_hub_download("testorg/missing", META, repo_type="kernel", revision="v1", cache_dir=tmp_path)
    with pytest.raises(RepositoryNotFoundError):
        api.list_repo_refs("testorg/missing", repo_type="kernel")
    with pytest.raises(RevisionNotFoundError):
        list(api.list_repo_tree(REPO, repo_type="kernel", revision="0" * 40))
    with pytest.raises(RevisionNotFoundError):
        api.kernel_info(REPO, revision="nope")


def test_org_overview(api, server, repo):
    assert api.get_organization_overview("testorg").trustedKernelPublisher is False
    server.set_trusted("testorg", True)
    assert api.get_organization_overview("testorg").trustedKernelPublisher is True
    server.set_trusted("otherorg", False)  # registers the org
    assert api.get_organization_overview("otherorg").trustedKernelPublisher is False
    with pytest.raises(HfHubHTTPError) as exc:
        api.get_organization_overview("unknownorg")
    assert exc.value.response.status_code == 404


def test_fail_injection(api, server, repo, tmp_path):
    server.fail("/refs", 500)  # list_repo_refs does not retry
    with pytest.raises(HfHubHTTPError) as exc:
        api.list_repo_refs(REPO, repo_type="kernel")
    assert exc.value.response.status_code == 500

    server.fail("/overview", 503)
    with pytest.raises(HfHubHTTPError) as exc:
        api.get_organization_overview("testorg")
    assert exc.value.response.status_code == 503

    # A bare 404 (no X-Error-Code) on a tree listing: not retried, generic HTTP error.
    server.fail("build/torch-cpu", 404)
    with pytest.raises(HfHubHTTPError) as exc:
        list(api.list_repo_tree(REPO, path_in_repo="build/torch-cpu", repo_type="kernel", revision="v1"))
    assert exc.value.response.status_code == 404
    assert not isinstance(exc.value, (EntryNotFoundError, RepositoryNotFoundError))

    server.clear_faults()
    assert api.list_repo_refs(REPO, repo_type="kernel").branches


def test_delay_timeout(api, server, repo, tmp_path, monkeypatch):
    # A held request is not answered until release (30 s hang guard), so the client's 0.2 s timeout
    # fires however busy this machine is; no wall-clock bound is needed (a client that ignored its
    # timeout would get the answer after the guard and no TimeoutException).
    server.hold("/api/kernels/", ceiling=30)
    with pytest.raises(httpx2.TimeoutException):
        api.repo_info(REPO, repo_type="kernel", timeout=0.2)
    server.clear_faults()  # releases the held request too

    # delay(): answered, never sooner than the delay (a lower bound holds on a busy machine too)
    server.delay("/api/kernels/", 0.3)
    t0 = time.monotonic()
    api.repo_info(REPO, repo_type="kernel", timeout=120)
    assert time.monotonic() - t0 >= 0.3
    server.clear_faults()

    # hf_hub_download: the HEAD uses HF_HUB_ETAG_TIMEOUT (read from the constants module at call time);
    # on a timeout the client retries the HEAD once with a 60 s timeout, so a slow first answer only
    # costs one extra HEAD instead of failing. Only the first HEAD is held.
    monkeypatch.setattr(constants, "HF_HUB_ETAG_TIMEOUT", 0.2)
    server.hold("/resolve/", count=1, ceiling=30)
    server.reset_counts()
    try:
        path = api.hf_hub_download(REPO, META, repo_type="kernel", revision="v1", cache_dir=tmp_path)
    finally:
        server.release()
    assert Path(path).exists()
    assert [m for m, _ in server.requests] == ["HEAD", "HEAD", "GET"]


def test_request_counting(api, server, repo, tmp_path):
    server.commit("otherorg/thing", {"a.txt": b"a"})
    server.reset_counts()
    assert server.request_count() == 0
    api.list_repo_refs(REPO, repo_type="kernel")
    list(api.list_repo_tree(REPO, path_in_repo="build", repo_type="kernel", revision="v1"))
    api.hf_hub_download(REPO, META, repo_type="kernel", revision="v1", cache_dir=tmp_path)
    api.list_repo_refs("otherorg/thing", repo_type="kernel")
    assert server.request_count(REPO) == 4  # refs + tree + HEAD + GET
    assert server.request_count("otherorg/thing") == 1
    assert server.request_count() == 5
    assert ("GET", f"/api/kernels/{REPO}/tree/v1/build?recursive=false&expand=false") in server.requests
    # Cached file at a commit sha: no request at all.
    api.hf_hub_download(REPO, META, repo_type="kernel", revision=repo["v1"], cache_dir=tmp_path)
    assert server.request_count() == 5


# ---------------------------------------------------------------------------
# kernels library helpers and end-to-end
# ---------------------------------------------------------------------------


def test_variant_files_metadata_is_valid(tmp_path):
    from kernels import Metadata, get_local_kernel
    from kernels._rust import Backend, Digest

    files = kernel_variant_files(name="add-one", variant="torch-cpu")
    files.update(kernel_variant_files(name="add-one", variant="torch-cuda", backend="cuda", archs=["8.0", "9.0"]))
    assert set(files) == {
        "build/torch-cpu/add_one/__init__.py",
        "build/torch-cpu/metadata.json",
        "build/torch-cuda/add_one/__init__.py",
        "build/torch-cuda/metadata.json",
    }
    for path, data in files.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_bytes(data)

    md = Metadata.read_from_file(tmp_path / "build/torch-cuda/metadata.json")
    assert md.backend.backend_type == Backend.CUDA and md.backend.archs == ["8.0", "9.0"]
    md = Metadata.read_from_file(tmp_path / "build/torch-cpu/metadata.json")
    assert str(md.name) == "add-one" and md.version == 1 and md.license == "apache-2.0"
    assert md.backend.archs is None and md.id.startswith("_add_one_")
    md.digest.validate(Digest.hash_variant(md.digest.algorithm, tmp_path / "build/torch-cpu"))

    raw = json.loads(files["build/torch-cpu/metadata.json"])
    assert raw["digest"]["algorithm"] == "sha256" and list(raw["digest"]["files"]) == ["add_one/__init__.py"]

    module = get_local_kernel(tmp_path, backend="cpu")
    assert module.add_one(41) == 42


_KERNELS_SCRIPT = textwrap.dedent(
    """
    import kernels
    from kernels import get_kernel

    # backend="cpu": the served variants are torch-cpu, whatever GPU this machine has
    k = get_kernel("testorg/addone", version=1, backend="cpu", trust_remote_code=True)
    assert k.add_one(41) == 42, k.add_one(41)

    k2 = get_kernel("trustedorg/addtwo", version=1, backend="cpu")  # trusted publisher, no trust_remote_code
    assert k2.add_two(40) == 42

    try:
        get_kernel("testorg/addone", version=1, backend="cpu")  # testorg is not trusted
    except ValueError as e:
        assert "not from a trusted publisher" in str(e), e
    else:
        raise AssertionError("untrusted kernel was loaded")
    print("KERNELS-OK")
    """
)


def _clean_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("HF_", "HUGGINGFACE_", "KERNELS_")) and k not in ("TRANSFORMERS_OFFLINE", "LOCAL_KERNELS")
    }
    env.update(extra)
    return env


@pytest.mark.subprocess
def test_kernels_get_kernel_subprocess(server, tmp_path):
    server.commit(REPO, {"README.md": b"x"})
    server.commit(REPO, kernel_variant_files(name="add-one", variant="torch-cpu"), branch="v1")
    server.commit(
        "trustedorg/addtwo",
        kernel_variant_files(
            name="add-two", variant="torch-cpu", module_files={"__init__.py": b"def add_two(x):\n    return x + 2\n"}
        ),
        branch="v1",
    )
    server.set_trusted("trustedorg", True)

    env = _clean_env(
        HF_ENDPOINT=server.url,
        HF_HOME=str(tmp_path / "hf_home"),
        KERNELS_CACHE=str(tmp_path / "kernels_cache"),
        # NOT HF_HUB_DISABLE_TELEMETRY=1: see test_quirk_kernels_breaks_with_telemetry_disabled. Telemetry
        # only adds fields to the User-Agent header here; no extra requests are made.
        HF_HUB_DISABLE_XET="1",
        HF_HUB_DISABLE_PROGRESS_BARS="1",
    )
    proc = subprocess.run(
        [sys.executable, "-c", _KERNELS_SCRIPT], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0 and "KERNELS-OK" in proc.stdout, proc.stdout + proc.stderr

    reqs = list(server.requests)
    # trust_remote_code=True skips the org check; the trusted org is checked; so is the last (untrusted) call.
    assert ("GET", "/api/organizations/trustedorg/overview") in reqs
    assert ("GET", "/api/organizations/testorg/overview") in reqs
    assert any(m == "GET" and p.startswith(f"/kernels/{REPO}/resolve/") and p.endswith("/__init__.py") for m, p in reqs)
    # kernels resolves version=1 to the v1 commit sha and downloads by sha (so no refs/ are written).
    v1_sha = next(b["targetCommit"] for b in _refs_json(server, REPO)["branches"] if b["name"] == "v1")
    snap = tmp_path / "kernels_cache" / "kernels--testorg--addone" / "snapshots" / v1_sha / "build" / "torch-cpu"
    assert (snap / "add_one" / "__init__.py").is_file() and (snap / "metadata.json").is_file()


def _refs_json(server: HubServer, repo_id: str) -> dict:
    with urllib.request.urlopen(f"{server.url}/api/kernels/{repo_id}/refs") as r:
        return json.loads(r.read())


def test_quirk_kernels_breaks_with_telemetry_disabled(api, server, repo, monkeypatch):
    """kernels 0.17.2 + huggingface_hub 2.4.0: with HF_HUB_DISABLE_TELEMETRY=1, kernels passes
    user_agent="" to HfApi, huggingface_hub appends "; " + "" and the User-Agent ends with a space,
    which httpx2 refuses to send. So every kernels Hub call fails before reaching any server.
    If this test starts failing, the libraries fixed it and the env var becomes usable."""
    from kernels.hf_hub import _get_hf_api

    monkeypatch.setattr(constants, "HF_HUB_DISABLE_TELEMETRY", True)
    monkeypatch.setattr(constants, "HF_HUB_USER_AGENT_ORIGIN", None)
    monkeypatch.setattr(constants, "ENDPOINT", server.url)
    kapi = _get_hf_api()
    kapi.endpoint = server.url
    server.reset_counts()
    with pytest.raises(httpx2.LocalProtocolError, match="Illegal header value"):
        kapi.list_repo_refs(REPO, repo_type="kernel")
    assert server.request_count() == 0


# ---------------------------------------------------------------------------
# model repos and writes (frt release push): HfApi.create_repo, create_branch, create_commit


def test_writes_through_huggingface_hub(server):
    from huggingface_hub import CommitOperationAdd, CommitOperationDelete

    server.write_tokens = {"hf_w"}
    api = HfApi(endpoint=server.url, token="hf_w")
    url = api.create_repo("acme/rel", repo_type="model", exist_ok=True)
    assert str(url) == f"{server.url}/acme/rel"
    assert str(api.create_repo("acme/rel", repo_type="model", exist_ok=True)) == str(url)  # 409 names the url
    api.create_branch("acme/rel", branch="v1")
    head = server.branch("acme/rel", "v1", repo_type="model")
    assert head == server.branch("acme/rel", "main", repo_type="model")
    one = api.create_commit("acme/rel", [CommitOperationAdd("a/x.json", b"{}"), CommitOperationAdd("b.txt", b"b")],
                            commit_message="one", revision="v1", parent_commit=head).oid
    assert server.files("acme/rel", "v1", repo_type="model") == {
        ".gitattributes": server.files("acme/rel", head, repo_type="model")[".gitattributes"], "a/x.json": b"{}",
        "b.txt": b"b"}
    # preupload returns each file's oid: an unchanged file is skipped, an empty commit is no commit
    same = api.create_commit("acme/rel", [CommitOperationAdd("b.txt", b"b")], commit_message="same", revision="v1")
    assert same.oid == one
    api.create_commit("acme/rel", [CommitOperationDelete("a/x.json")], commit_message="del", revision="v1",
                      parent_commit=one)
    assert "a/x.json" not in server.files("acme/rel", "v1", repo_type="model")
    # a parent that is no longer the head: 412, nothing committed
    with pytest.raises(HfHubHTTPError) as e:
        api.create_commit("acme/rel", [CommitOperationAdd("c", b"c")], commit_message="late", revision="v1",
                          parent_commit=one)
    assert e.value.response.status_code == 412
    # the file reads back through hf_hub_download (a model repo's resolve URL has no prefix)
    from huggingface_hub import hf_hub_download

    path = hf_hub_download("acme/rel", "b.txt", revision="v1", endpoint=server.url, token=False)
    assert Path(path).read_bytes() == b"b"
    # no token: 401; a token that may not write: 403
    for token, status in ((False, 401), ("hf_read", 403)):
        with pytest.raises(HfHubHTTPError) as e:
            HfApi(endpoint=server.url, token=token).create_branch("acme/rel", branch="v2")
        assert e.value.response.status_code == status
