"""docs/releases-publish.md, "Publishing a package": a package folder (kernel-builder's layout,
``build/<variant>/`` with its ``metadata.json``) uploaded with the ecosystem's own tool, ``hf upload
ORG/NAME packages/x . --repo-type kernel --revision v1``, against the loopback Hub
(tests/helpers/hubserver.py), then locked by a manifest naming it: refused until the publisher's own org
is trusted in the manifest (``trust = true``), pinned to the commit the upload made after.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomli_w

from frt_dist.documents.lockfile import Lockfile
from helpers.factories import NORM_SRC, impl_doc, manifest_doc, write_files
from helpers.frt import frt_process
from helpers.hubserver import kernel_variant_files

HF = shutil.which("hf") or str(Path(sys.executable).with_name("hf"))
TOKEN = "hf_write_token"


def hf_upload(hub, *args, cwd):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE"))}
    env.update(HF_ENDPOINT=hub.url, HF_TOKEN=TOKEN, HF_HUB_DISABLE_TELEMETRY="1", HF_HUB_DISABLE_PROGRESS_BARS="1",
               HF_HOME=str(Path(cwd) / ".hf-home"), NO_COLOR="1")
    return subprocess.run([HF, "upload", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.skipif(not Path(HF).exists(), reason="the hf CLI (huggingface_hub) is not installed")
@pytest.mark.subprocess
def test_a_package_uploaded_with_hf_upload_locks_once_its_org_is_trusted(hub, tmp_path):
    hub.write_tokens = {TOKEN}
    root = tmp_path / "team"
    write_files(root / "packages" / "rmsnorm", kernel_variant_files(
        name="rmsnorm", variant="torch-cpu", module_files={"__init__.py": NORM_SRC.encode()}))
    # the step the docs give, as written there
    r = hf_upload(hub, "acme/rmsnorm", "packages/rmsnorm", ".", "--repo-type", "kernel", "--revision", "v1", cwd=root)
    assert r.returncode == 0, r.stdout + r.stderr
    commit = hub.branch("acme/rmsnorm", "v1")
    assert commit and "build/torch-cpu/metadata.json" in hub.files("acme/rmsnorm", "v1")
    # a manifest that names it: the Hub does not flag acme as a trusted kernel publisher
    seams = {"norm": {"structure": "norm@1", "impls": {"norm": impl_doc("acme/rmsnorm", "norm")}}}
    doc = manifest_doc(packages={"acme/rmsnorm": {"version": 1}}, seams=seams,
                       routes={"fast": {"assembly": "eager", "seams": {"norm": "norm"}}})
    (root / "manifests").mkdir()
    (root / "manifests" / "tiny.toml").write_text(tomli_w.dumps(doc))
    env = {"HF_ENDPOINT": hub.url, "HF_HOME": str(tmp_path / "hf-home")}
    rc, out, err = frt_process(["lock"], cwd=root, env=env)
    assert rc == 1 and "publisher 'acme' is not a trusted kernel publisher" in err
    assert 'add `trust = true` under [packages."acme/rmsnorm"] in manifests/tiny.toml' in err
    doc["packages"]["acme/rmsnorm"]["trust"] = True  # the docs' trust step: the publisher's own org
    (root / "manifests" / "tiny.toml").write_text(tomli_w.dumps(doc))
    rc, out, err = frt_process(["lock"], cwd=root, env=env)
    assert rc == 0, err
    pin = Lockfile.read(root / "lockfiles" / "tiny.lock").packages["acme/rmsnorm"]
    assert pin.revision == commit and pin.trust == "manifest" and set(pin.variants) == {"torch-cpu"}
