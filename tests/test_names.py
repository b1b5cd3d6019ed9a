"""The one name validator (SPEC §21): the vectors an attacker would try, through every kind of name."""

from __future__ import annotations

import pytest

from frt_dist.errors import ManifestError
from frt_dist.names import check, problem

# (vector, why it is dangerous)
BAD = [
    ("..", "parent directory"),
    ("../x", "parent directory"),
    ("a/../../etc", "traversal"),
    ("/etc/passwd", "absolute"),
    ("C:\\Windows", "drive + backslash"),
    ("a\\b", "backslash"),
    ("a\x00b", "NUL"),
    ("~", "home expansion"),
    ("~root", "home expansion"),
    ("%2e%2e", "URL-encoded .."),
    ("..%2f", "URL-encoded traversal"),
    ("\u0430dmin", "Cyrillic look-alike a"),
    ("a\u202etxt.exe", "RTL override"),
    ("x" * 300, "300 characters"),
    ("x" * 3000, "3,000 characters"),
    ("CON", "Windows device name"),
    ("nul.txt", "Windows device name with an extension"),
    ("com1", "Windows device name"),
    ("name\n", "trailing newline"),
    ("name\r", "carriage return"),
    (".", "current directory"),
    ("", "empty"),
    ("name.", "trailing dot (Windows strips it)"),
    ("name ", "trailing space"),
    ("a\tb", "tab"),
    ("na\u0301me", "combining accent"),
    ("ｆｕｌｌ", "full-width letters"),
    ("a:b", "colon (NTFS stream)"),
    ("*", "glob"),
]

KINDS_SINGLE = ["name", "variant"]


@pytest.mark.parametrize("vector, why", BAD, ids=[w for _, w in BAD])
@pytest.mark.parametrize("kind", ["name", "variant", "repo", "path"])
def test_every_vector_is_refused_for_every_kind(kind, vector, why):
    value = f"org/{vector}" if kind == "repo" and "/" not in vector else vector
    assert problem(kind, value) is not None, (kind, value, why)


@pytest.mark.parametrize("kind, value", [
    ("name", "demo-decoder"), ("name", "fp8"), ("name", "rtx-5090"), ("name", "decode"), ("name", "v1.2"),
    ("repo", "flashrt/fp8-gemm"), ("repo", "kernels-community/activation"), ("repo", "frt-demo/rms_norm"),
    ("variant", "torch213-cxx11-cu128-x86_64-linux"), ("variant", "torch-universal"), ("variant", "tvm-ffi01-cu130-aarch64-linux"),
    ("path", "rmsnorm/__init__.py"), ("path", "_ops.py"), ("path", "fp8_gemm/_fp8_gemm_cuda_8d3f.abi3.so"),
    ("path", "lib/libfoo.so.1+cu128"),
])
def test_real_names_pass(kind, value):
    assert problem(kind, value) is None


@pytest.mark.parametrize("value", ["org/a--b", "org/-a", "org/a-", "org/.a", "a/b/c", "org", "/org/a", "org/"])
def test_repo_id_rules(value):
    assert problem("repo", value) is not None


def test_check_names_the_file_and_field_and_is_exit_2():
    with pytest.raises(ManifestError) as ei:
        check("name", "../x", "phases.\"../x\"", ManifestError, file="manifests/m.toml")
    assert str(ei.value).startswith("manifests/m.toml: phases.\"../x\": '../x' ")
    assert ei.value.exit_code == 2 and ei.value.reasons[0]["field"] == "phases.\"../x\""
    with pytest.raises(ManifestError) as ei:
        check("name", "y" * 3000, "model", ManifestError)
    assert len(str(ei.value)) < 300  # a 3,000-character name is not echoed whole
