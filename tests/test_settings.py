"""Every environment variable frt reads is declared in ``frt_dist.settings`` and read through it.

The oracle is the source itself, parsed with ``ast``: a read of ``os.environ``/``os.getenv`` by a
literal name anywhere in ``frt_dist`` other than settings.py is a variable that escaped the table.
Writing a variable (handing it to a process frt starts) and copying the whole environment are
not reads by name and are allowed.
"""

from __future__ import annotations

import ast
import os

import pytest

from frt_dist import settings
from helpers.paths import PKG


def _env_reads(tree: ast.AST):
    """(line, name) for each os.environ.get("X") / os.environ["X"] (load) / os.getenv("X") / "X" in os.environ."""
    def is_environ(node):
        return isinstance(node, ast.Attribute) and node.attr == "environ" and \
            isinstance(node.value, ast.Name) and node.value.id == "os"

    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            f = node.func
            if isinstance(f, ast.Attribute) and f.attr in ("get", "pop") and is_environ(f.value) and f.attr == "get":
                yield node.lineno, node.args[0].value
            elif isinstance(f, ast.Attribute) and f.attr == "getenv" and isinstance(f.value, ast.Name) \
                    and f.value.id == "os":
                yield node.lineno, node.args[0].value
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and is_environ(node.value) \
                and isinstance(node.slice, ast.Constant):
            yield node.lineno, node.slice.value
        elif isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.In) \
                and isinstance(node.left, ast.Constant) and is_environ(node.comparators[0]):
            yield node.lineno, node.left.value


def _modules():
    return sorted(p for p in PKG.rglob("*.py") if p.name != "settings.py")


def test_no_module_reads_the_environment_by_name_outside_settings():
    found = []
    for path in _modules():
        for line, name in _env_reads(ast.parse(path.read_text(), str(path))):
            found.append(f"{path.relative_to(PKG.parent)}:{line}: {name}")
    assert found == [], "read through frt_dist.settings instead: " + "; ".join(found)


def test_every_name_read_through_settings_is_declared():
    used = set()
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr in ("value", "flag", "number", "raw") and node.args \
                    and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str) \
                    and node.args[0].value.isupper():
                used.add(node.args[0].value)
    assert used, "the scan found no settings reads: the oracle is broken"
    assert sorted(n for n in used if n not in settings.SETTINGS) == []


def test_reads_follow_the_declared_defaults(monkeypatch):
    monkeypatch.delenv("FRT_STORE_DEADLINE", raising=False)
    assert settings.number("FRT_STORE_DEADLINE") == float(settings.SETTINGS["FRT_STORE_DEADLINE"].default) == 600.0
    monkeypatch.setenv("FRT_STORE_DEADLINE", "")  # empty is unset
    assert settings.number("FRT_STORE_DEADLINE") == 600.0
    monkeypatch.setenv("FRT_STORE_DEADLINE", "12.5")
    assert settings.number("FRT_STORE_DEADLINE") == 12.5
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # empty means "no device": raw keeps it
    assert settings.raw("CUDA_VISIBLE_DEVICES") == "" and settings.value("CUDA_VISIBLE_DEVICES") is None
    for off in ("", "0", "false", "No", "OFF"):
        monkeypatch.setenv("FRT_STORE_REHASH", off)
        assert settings.flag("FRT_STORE_REHASH") is False
    monkeypatch.setenv("FRT_STORE_REHASH", "1")
    assert settings.flag("FRT_STORE_REHASH") is True


@pytest.mark.parametrize("bad", ["0", "-3", "soon", "nan"])
def test_a_bad_number_is_a_usage_error_naming_the_variable(monkeypatch, bad):
    from frt_dist.errors import UsageError

    monkeypatch.setenv("FRT_STORE_ATTEMPTS", bad)
    with pytest.raises(UsageError) as e:
        settings.number("FRT_STORE_ATTEMPTS", int)
    assert e.value.exit_code == 2
    assert f"FRT_STORE_ATTEMPTS={bad!r}: expected a positive whole number" in str(e.value)
    assert any("unset FRT_STORE_ATTEMPTS" in h for h in e.value.hints)


def test_an_undeclared_name_is_refused():
    with pytest.raises(KeyError, match="FRT_NOT_A_THING is not declared"):
        settings.value("FRT_NOT_A_THING")
    assert settings.declared("FRT_KERNEL_REV_ORG_NAME").name == "FRT_KERNEL_REV_<REPO>"


def test_importing_settings_imports_nothing_of_frts(tmp_path):
    import subprocess
    import sys

    code = "import sys, frt_dist.settings; print(sorted(m for m in sys.modules if m.startswith('frt_dist')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(PKG.parent)}, check=True).stdout
    assert out.strip() == "['frt_dist', 'frt_dist.errors', 'frt_dist.settings']"
