"""The release lifecycle end to end (on CPU: the toy host of test_qualify.py stands in
for the vLLM engine), every step a real ``frt`` process against the loopback Hub
(tests/helpers/hubserver.py):

publisher v1 (its package uploaded, qualified with ``frt qualify --key``, locked, pushed) -> consumer
``frt init --from``, lock refused until ``frt release trust`` (code and signers), lock, mirror, an offline
lock and verify from the mirror -> the publisher edits the route, re-qualifies following ``frt lock``'s
hint (no loop), signs with a new key, pushes v2 -> the consumer's ``frt lock`` notes v2, ``frt release
upgrade`` reports the route change and the new signer and is refused until trusted, ``--trust`` applies
it -> mirror and offline verify of v2.
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import pytest
import tomli_w

from frt_dist.documents.lockfile import Lockfile
from frt_dist.documents.schema import parse_toml
from helpers.factories import QUALIFY_KERNELS, ed25519_keypair
from helpers.frt import frt_process
from helpers.gpu import needs_no_gpu
from helpers.hubserver import kernel_variant_files
from helpers.paths import HELPERS

crypto = pytest.importorskip("cryptography")

REL = "acme/toyq-release"
PKG = "acme/fastscale"
TOKEN = "hf_write_token"


def _key(folder: Path, name: str) -> tuple[Path, Path]:
    return ed25519_keypair(folder, name)


def _manifest(keys: list[str]) -> dict:
    return {
        "schema": "frt.manifest/1", "model": "toyq", "binding": "toy_block", "host": "torch", "family": "toy",
        "default-precision": "fp32", "host-entry": "toyhost:build_host",
        "packages": {PKG: {"version": 1, "trust": True}},
        "phases": {"decode": {"rows": [1, 16]}},
        "seams": {"norm": {"structure": "scale@1", "impls": {"fastscale": {
            "package": PKG, "entry": "scale", "precision": "fp32",
            "contract": {"device": "cpu", "dtypes": ["float32"], "layout": "contiguous", "width": 8},
            "smoke": {"inputs": [{"shape": ["rows", 8], "dtype": "float32"}, {"shape": [8], "dtype": "float32"}]}}}}},
        "routes": {"fastscale": {"assembly": "eager", "seams": {"norm": "fastscale"}, "gate": {"min-speedup": 1.05}}},
        "qualify": {"tolerance": {"abs": 1e-5, "rel": 1e-4}, "rounds": 6, "warmup": 1},
        "trust": {"receipts": {"keys": keys}},
    }


class Actor:
    """One team's folder and its own hub cache; ``frt`` runs as a process there."""

    def __init__(self, hub, root: Path, name: str):
        self.root, self.hub = root, hub
        self.env = {"HF_ENDPOINT": hub.url, "HF_TOKEN": TOKEN, "HF_HOME": str(root.parent / f"hf-home-{name}"),
                    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
                    "PYTHONPATH": os.pathsep.join(p for p in (str(HELPERS), os.environ.get("PYTHONPATH", "")) if p)}

    def __call__(self, *args, ok: int | None = 0, cwd=None, **env):
        r = frt_process(list(args), cwd=cwd or self.root, env={**self.env, **env}, timeout=300)
        assert "Traceback" not in r.stderr, r.stderr
        if ok is not None:
            assert r.returncode == ok, f"frt {' '.join(args)}: exit {r.returncode}\n{r.stdout}\n{r.stderr}"
        return r

    def hints(self, r) -> list[list[str]]:
        """The commands (in backticks) of each hint line, in order."""
        return [re.findall(r"`(frt [^`]+)`", ln) for ln in r.stderr.splitlines() if ln.startswith("hint: ")]


@needs_no_gpu  # qualifies a CPU-only package on the detected hardware
@pytest.mark.subprocess
@pytest.mark.slow
def test_publish_consume_edit_requalify_upgrade(hub, tmp_path):
    hub.write_tokens = {TOKEN}
    hub.commit(PKG, kernel_variant_files(name="fastscale", variant="torch-cpu", id="_toyq_fastscale_hub",
                                         module_files={"__init__.py": QUALIFY_KERNELS["fastscale"]}), branch="v1")
    # -- the publisher, v1
    pub = Actor(hub, tmp_path / "pub", "pub")
    (pub.root / "manifests").mkdir(parents=True)
    a_priv, _ = _key(pub.root / "keys", "qualify-a")
    b_priv, _ = _key(pub.root / "keys", "qualify-b")
    (pub.root / "manifests" / "toyq.toml").write_text(tomli_w.dumps(_manifest(["keys/qualify-a.pub"])))
    pub("lock")
    pub("qualify", "--model", "toyq", "--route", "fastscale", "--key", str(a_priv))
    pub("lock")
    pub("release", "push", f"hf://{REL}@v1")
    # -- the consumer
    cons = Actor(hub, tmp_path / "cons", "cons")
    r = cons("init", "--from", f"hf://{REL}@v1", str(cons.root), cwd=tmp_path)
    assert "the release's manifest trusts the code of (not copied; none is trusted yet):" in r.stdout
    r = cons("lock", ok=1)  # the package's code is not trusted yet, and says how
    assert ["frt release trust --model toyq"] in cons.hints(r)
    r = cons("release", "trust")
    assert f"trusted: package {PKG} (trust = true)" in r.stdout and "trusted: key sha256:" in r.stdout
    cons("lock")
    lf = Lockfile.read(cons.root / "lockfiles" / "toyq.lock")
    assert [rc.route for rc in lf.receipts.values()] == ["fastscale"] and lf.release["version"] == 1
    mirror = tmp_path / "mirror"
    cons("mirror", str(mirror), "--all-variants")
    off = {"HF_HUB_OFFLINE": "1", "FRT_MIRROR": str(mirror), "HF_HOME": str(tmp_path / "empty-home")}
    cons("verify", "--mirror", str(mirror), "--all-variants", **off)
    cons("lock", **off)  # from the mirror alone: the same lock
    # -- the publisher edits the route and re-qualifies by following frt lock's hints: no loop
    m = _manifest(["keys/qualify-a.pub", "keys/qualify-b.pub"])  # a new key, B
    m["seams"]["norm"]["impls"]["fastscale"]["contract"]["arity"] = "fixed"  # what runs can change: a new route digest
    (pub.root / "manifests" / "toyq.toml").write_text(tomli_w.dumps(m))
    r = pub("lock", ok=1)
    steps = next(h for h in pub.hints(r) if h and "--allow-loss" not in h[-1])
    assert steps == ["frt qualify --model toyq --route fastscale --phase decode --key KEY", "frt lock --model toyq"]
    for cmd in steps:
        pub(*shlex.split(cmd.replace("KEY", str(b_priv)))[1:])
    r = pub("lock", "--check")
    lf = Lockfile.read(pub.root / "lockfiles" / "toyq.lock")
    (rec,) = lf.receipts.values()
    assert rec.cell["route-digest"] != Lockfile.read(cons.root / "lockfiles" / "toyq.lock").manifest.routes[
        "fastscale"].digest
    pub("release", "push", f"hf://{REL}@v2")
    # -- the consumer moves to v2
    r = cons("lock")
    assert f"note: release {REL} has a newer version, v2: `frt release upgrade @v2`" in r.stderr
    r = cons("release", "upgrade", ok=1)
    assert "    ~ route fastscale: an impl it runs changed (route digest sha256:" in r.stdout
    assert "1 receipt(s), NEW: not in your [trust.receipts]; review it" in r.stdout
    (again,) = [h for h in cons.hints(r) if h and h[0].endswith("--trust")]
    assert again == ["frt release upgrade --model toyq @v2 --trust"]
    r = cons(*shlex.split(again[0])[1:])
    assert "trusted: key sha256:" in r.stdout
    lf = Lockfile.read(cons.root / "lockfiles" / "toyq.lock")
    assert lf.release["version"] == 2 and len(lf.receipts) == 1 and not lf.rejected
    data = parse_toml((cons.root / "manifests" / "toyq.toml").read_bytes(), ValueError, "m")
    assert data["packages"][PKG].get("trust") is True and len(data["trust"]["receipts"]["keys"]) == 2
    mirror2 = tmp_path / "mirror2"
    cons("mirror", str(mirror2), "--all-variants")
    cons("verify", "--mirror", str(mirror2), "--all-variants", **{**off, "FRT_MIRROR": str(mirror2)})
    cons("lock", "--check", **{**off, "FRT_MIRROR": str(mirror2)})
