"""Demo host binding (frt_dist.demo.decoder) and the bundled CPU kernel packages."""

import ast
import base64
import hashlib
import json

import pytest

from helpers.paths import ROOT

torch = pytest.importorskip("torch")

from frt_dist.demo import decoder  # noqa: E402 - after the torch check
from frt_dist.demo.decoder import DecoderBlock, build_host, host_gated_mlp, host_rms_norm  # noqa: E402

PACKAGES = ROOT / "packages"
PACKAGE_SPECS = {
    # dir: (kernel name, python package dir, entries)
    "rmsnorm": ("rmsnorm", "rmsnorm", ("rms_norm",)),
    "silu-mul": ("silu-mul", "silu_mul", ("silu_and_mul", "gated_mlp")),
    "fused-ffn": ("fused-ffn", "fused_ffn", ("gated_mlp", "gated_mlp_out")),
}
ATOL, RTOL = 1e-4, 1e-3
ROWS = (1, 16, 64)


@pytest.fixture(scope="module", autouse=True)
def _hub_offline():
    """Offline while this module runs (its module-scoped fixtures included), restored after it:
    a module-level ``os.environ`` write would leak into every later module of the same run.
    ``kernels`` reads ``huggingface_hub.constants.HF_HUB_OFFLINE`` (set from the environment
    once, at import), so both are set. Per test, conftest's ``_hermetic`` still applies."""
    from huggingface_hub import constants

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setattr(constants, "HF_HUB_OFFLINE", True)
        yield


@pytest.fixture(scope="module")
def block():
    return DecoderBlock(seed=0)


@pytest.fixture(scope="module")
def packages():
    kernels = pytest.importorskip("kernels")
    # the bundled packages are CPU kernels: ask for that variant, whatever GPU this machine has
    return {d: kernels.get_local_kernel(PACKAGES / d, backend="cpu") for d in PACKAGE_SPECS}


def _close(actual, expected):
    torch.testing.assert_close(actual, expected, atol=ATOL, rtol=RTOL)


# --- host binding -----------------------------------------------------------


def test_demo_package_does_not_import_torch():
    tree = ast.parse((ROOT / "frt_dist" / "demo" / "__init__.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            assert not any(a.name.split(".")[0] == "torch" for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            assert not (node.level == 0 and module.split(".")[0] == "torch")
            # pulling in .decoder (or frt_dist.demo.decoder) would import torch too
            assert "decoder" not in module.split(".") and "decoder" not in {a.name for a in node.names}


def test_host_forward_shape_and_determinism(block):
    x = block.make_inputs(4, seed=3)
    assert x.shape == (4, decoder.HIDDEN) and x.dtype == torch.float32
    y = block(x)
    assert y.shape == x.shape and y.dtype == torch.float32
    assert torch.isfinite(y).all()
    other = DecoderBlock(seed=0)
    assert torch.equal(other.make_inputs(4, seed=3), x)
    assert torch.equal(other(x), y)
    assert torch.equal(build_host(seed=0)(x), y)
    assert torch.equal(build_host("serve", seed=0).w_down, block.w_down)
    assert not torch.equal(DecoderBlock(seed=1).w_gate_up, block.w_gate_up)


def test_weight_shapes(block):
    h, i = decoder.HIDDEN, decoder.INTERMEDIATE
    assert block.norm_weight.shape == (h,)
    assert block.w_gate_up.shape == (2 * i, h)
    assert block.w_down.shape == (h, i)
    assert block.seam_names == ("norm", "ffn")


def test_host_reference_matches_formula(block):
    x = block.make_inputs(3, seed=5)
    var = (x * x).mean(-1, keepdim=True)
    _close(host_rms_norm(x, block.norm_weight), x / torch.sqrt(var + decoder.EPS) * block.norm_weight)
    h = host_rms_norm(x, block.norm_weight)
    gu = h @ block.w_gate_up.T
    g, u = gu[:, : decoder.INTERMEDIATE], gu[:, decoder.INTERMEDIATE :]
    _close(host_gated_mlp(h, block.w_gate_up, block.w_down), (g * torch.sigmoid(g) * u) @ block.w_down.T)


def test_bind_detach_restores_bit_exact():
    blk = DecoderBlock(seed=0)
    x = blk.make_inputs(8, seed=2)
    before = blk(x)
    blk.bind("norm", lambda x, w, eps=decoder.EPS: host_rms_norm(x, w, eps) * 2.0)
    blk.bind("ffn", lambda h, a, b: torch.zeros(h.shape[0], b.shape[0]))
    changed = blk(x)
    assert not torch.equal(changed, before)
    assert torch.equal(changed, x)  # ffn bound to zeros -> residual only
    blk.detach()
    assert blk.seams == blk.host_seams
    assert torch.equal(blk(x), before)


def test_bind_unknown_seam_names_valid_ones(block):
    with pytest.raises(KeyError, match="norm.*ffn"):
        block.bind("attn", host_rms_norm)


def test_seam_args(block):
    x = block.make_inputs(2, seed=9)
    xa, wa = block.seam_args("norm", x)
    assert xa is x and wa is block.norm_weight
    h, wgu, wd = block.seam_args("ffn", x)
    assert torch.equal(h, host_rms_norm(x, block.norm_weight))
    assert wgu is block.w_gate_up and wd is block.w_down
    assert torch.equal(x + host_gated_mlp(h, wgu, wd), block(x))


# --- kernel packages --------------------------------------------------------


def test_packages_load_and_export(packages):
    for d, (_, _, entries) in PACKAGE_SPECS.items():
        for entry in entries:
            assert callable(getattr(packages[d], entry)), (d, entry)


@pytest.mark.parametrize("rows", ROWS)
def test_rmsnorm_matches_host(packages, block, rows):
    x = block.make_inputs(rows, seed=rows)
    _close(packages["rmsnorm"].rms_norm(x, block.norm_weight), host_rms_norm(x, block.norm_weight))
    _close(packages["rmsnorm"].rms_norm(x, block.norm_weight, 1e-3), host_rms_norm(x, block.norm_weight, 1e-3))


@pytest.mark.parametrize("rows", ROWS)
def test_silu_and_mul_matches_host(packages, block, rows):
    h, wgu, _ = block.seam_args("ffn", block.make_inputs(rows, seed=rows))
    gu = torch.nn.functional.linear(h, wgu)
    g, u = gu.chunk(2, dim=-1)
    out = packages["silu-mul"].silu_and_mul(gu)
    assert out.shape == (rows, decoder.INTERMEDIATE)
    _close(out, torch.nn.functional.silu(g) * u)


@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("pkg", ["silu-mul", "fused-ffn"])
def test_gated_mlp_matches_host(packages, block, pkg, rows):
    args = block.seam_args("ffn", block.make_inputs(rows, seed=rows))
    _close(packages[pkg].gated_mlp(*args), host_gated_mlp(*args))


@pytest.mark.parametrize("rows", ROWS)
def test_fused_gated_mlp_out_writes_into_out(packages, block, rows):
    args = block.seam_args("ffn", block.make_inputs(rows, seed=rows))
    expected = packages["fused-ffn"].gated_mlp(*args)
    out = torch.full((rows, decoder.HIDDEN), float("nan"))
    ret = packages["fused-ffn"].gated_mlp_out(*args, out)
    assert ret.data_ptr() == out.data_ptr()
    _close(out, expected)
    _close(out, host_gated_mlp(*args))


def test_fused_ffn_large_rows_and_batched(packages, block):
    # the transposed (rows > SMALL_ROWS) path and a 3-D input
    ffn = packages["fused-ffn"]
    args = block.seam_args("ffn", block.make_inputs(ffn.SMALL_ROWS + 8, seed=11))
    _close(ffn.gated_mlp(*args), host_gated_mlp(*args))
    h3 = args[0][:12].reshape(3, 4, -1)
    _close(ffn.gated_mlp(h3, *args[1:]), host_gated_mlp(h3, *args[1:]))


@pytest.mark.parametrize("route", ["fused", "split"])
def test_routed_block_matches_host(packages, route):
    blk = DecoderBlock(seed=0)
    x = blk.make_inputs(16, seed=4)
    ref = blk(x)
    blk.bind("norm", packages["rmsnorm"].rms_norm)
    blk.bind("ffn", packages["fused-ffn" if route == "fused" else "silu-mul"].gated_mlp)
    _close(blk(x), ref)
    blk.detach()
    assert torch.equal(blk(x), ref)


# --- metadata / digests -----------------------------------------------------


def _variant(d):
    return PACKAGES / d / "build" / "torch-cpu"


def _recompute_digest(variant):
    files = {}
    for p in sorted(variant.rglob("*")):
        rel = p.relative_to(variant)
        if not p.is_file() or "__pycache__" in rel.parts or p.suffix == ".pyc":
            continue
        if rel.as_posix() in ("metadata.json", "metadata.json.sigstore"):
            continue
        files[rel.as_posix()] = base64.b64encode(hashlib.sha256(p.read_bytes()).digest()).decode()
    return files


@pytest.mark.parametrize("d", list(PACKAGE_SPECS))
def test_metadata_and_digest(d):
    name, pyname, _ = PACKAGE_SPECS[d]
    variant = _variant(d)
    meta = json.loads((variant / "metadata.json").read_text())
    assert meta["name"] == name
    assert meta["id"] == f"_frt_demo_{pyname}_v1"
    assert meta["version"] == 1
    assert meta["backend"] == {"type": "cpu"}
    assert meta["python-depends"] == []
    assert meta["digest"]["algorithm"] == "sha256"
    assert (variant / pyname / "__init__.py").is_file()
    assert f"{pyname}/__init__.py" in meta["digest"]["files"]
    assert meta["digest"]["files"] == _recompute_digest(variant)
    assert not list((PACKAGES / d).rglob("__pycache__"))


@pytest.mark.parametrize("d", list(PACKAGE_SPECS))
def test_metadata_digest_validates_with_kernels(d):
    rust = pytest.importorskip("kernels._rust")
    variant = _variant(d)
    meta = rust.Metadata.read_from_file(variant / "metadata.json")
    assert str(meta.name) == PACKAGE_SPECS[d][0]
    assert meta.backend.backend_type == rust.Backend.CPU
    meta.digest.validate(rust.Digest.hash_variant(rust.DigestAlgorithm.SHA256, variant))


@pytest.mark.parametrize("d", list(PACKAGE_SPECS))
def test_package_sources_import_only_torch(d):
    _, pyname, _ = PACKAGE_SPECS[d]
    src = (_variant(d) / pyname / "__init__.py").read_text()
    for line in src.splitlines():
        s = line.strip()
        if s.startswith(("import ", "from ")) and not line.startswith((" ", "\t")):
            mod = s.split()[1]
            assert mod == "torch" or mod.startswith("torch."), (d, s)
