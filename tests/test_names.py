"""The one name validator (names are checked where they are read): the vectors an attacker would try, through every kind of name."""

from __future__ import annotations

import pytest

from frt_dist.base.names import check, problem
from frt_dist.errors import ManifestError

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


# ---------------------------------------------------------------------------
# the validator itself, held to its own rule: other layers (the regexes, the
# loader's realpath checks) may also stop an escape, so these pin *which* rule refuses a name, and
# check every short name the validator accepts against the rule written independently here


RULES = [  # (kind, value, the reason names.problem gives)
    ("name", "..", "is '..'"), ("name", ".", "is '.'"), ("name", "", "is empty"),
    ("name", "a..b", "has '..'"), ("name", "a/b", "has a path separator"), ("name", "a\\b", "has a path separator"),
    ("name", "a\x00b", "has a control character"), ("name", "x.", "ends with a dot or a space"),
    ("name", "CON", "is a Windows device name"), ("name", "x" * 129, "is 129 characters long (at most 128)"),
    ("variant", "..", "is '..'"), ("variant", ".", "is '.'"), ("variant", "a..b", "has '..'"),
    ("variant", "/abs", "has a path separator"), ("variant", "a\x00b", "has a control character"),
    ("path", "..", "component '..' is '..'"), ("path", "a/../b", "component '..' is '..'"),
    ("path", "../x", "component '..' is '..'"), ("path", "a/..", "component '..' is '..'"),
    ("path", "a/./b", "component '.' is '.'"), ("path", ".", "component '.' is '.'"),
    ("path", "a/b..c", "component 'b..c' has '..'"), ("path", "", "is empty"), ("path", "a//b", "has an empty component"),
    ("path", "a/", "has an empty component"), ("path", "/etc/passwd", "is absolute"), ("path", "C:/x", "is absolute"),
    ("path", "a\\..\\b", "component 'a\\\\..\\\\b' has a path separator"),
    ("path", "a/b\x00", "component 'b\\x00' has a control character"),
    ("path", "a/nul.txt", "component 'nul.txt' is a Windows device name"),
    ("path", "a/b ", "component 'b ' ends with a dot or a space"),
    ("repo", "org/..", "part '..' is '..'"), ("repo", "../x", "part '..' is '..'"), ("repo", "org/a..b", "part 'a..b' has '..'"),
    ("repo", "org/a/../b", "is not a repo id: a repo id is 'org/name'"), ("repo", "org/", "part '' is empty"),
]


@pytest.mark.parametrize("kind, value, why", RULES, ids=[f"{k}:{v!r}" for k, v, _ in RULES])
def test_each_rule_refuses_its_names_by_itself(kind, value, why):
    assert problem(kind, value) == why


_DEVICES = {"con", "prn", "aux", "nul", *(f"com{i}" for i in range(1, 10)), *(f"lpt{i}" for i in range(1, 10))}


def _component_ok(c: str) -> bool:
    """The module docstring's rule for one name, written out again."""
    return (bool(c) and c.isascii() and c not in (".", "..") and ".." not in c and "/" not in c and "\\" not in c
            and not any(ord(ch) < 32 or ord(ch) == 127 for ch in c) and not c.endswith((".", " "))
            and c.split(".", 1)[0].lower() not in _DEVICES)


def _obeys_rule(kind: str, value: str) -> bool:
    if kind in ("name", "variant"):
        return _component_ok(value)
    if kind == "repo":
        parts = value.split("/")
        return len(parts) == 2 and all(_component_ok(p) for p in parts)
    return not value.startswith("/") and all(_component_ok(p) for p in value.split("/"))


def test_every_short_name_the_validator_accepts_obeys_the_rule_and_stays_under_its_root():
    """Every string of up to 6 characters over an alphabet of the dangerous ones (dot, slash,
    backslash, NUL, space) plus a letter: what ``problem`` accepts obeys the rule, and joined
    to a root it stays strictly below that root."""
    import itertools
    import posixpath

    alphabet = "a./\\\x00 "
    accepted = dict.fromkeys(("name", "variant", "repo", "path"), 0)
    for n in range(0, 7):
        for chars in itertools.product(alphabet, repeat=n):
            value = "".join(chars)
            for kind in accepted:
                if problem(kind, value) is None:
                    accepted[kind] += 1
                    assert _obeys_rule(kind, value), (kind, value)
                    joined = posixpath.normpath(posixpath.join("/root", value))
                    assert joined.startswith("/root/") and "\\" not in value and "\x00" not in value, (kind, value)
    assert all(accepted.values()), accepted  # the enumeration reaches names the validator accepts (a.a, a/a ...)
