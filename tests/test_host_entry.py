"""The manifest's ``host-entry`` is found from the project root without ``PYTHONPATH``, and nothing in
the project shadows an installed module (``frt_dist.project.discover.import_entry``, docs/first-project.md §6)."""

from __future__ import annotations

import sys

import pytest

from frt_dist.errors import UsageError
from frt_dist.project.discover import import_entry


@pytest.fixture
def clean_modules():
    before = set(sys.modules)
    path = list(sys.path)
    yield
    for name in set(sys.modules) - before:
        del sys.modules[name]
    assert sys.path == path  # nothing was added to the import path


def test_a_module_in_the_project_root_is_imported_without_touching_sys_path(tmp_path, clean_modules):
    (tmp_path / "zz_host_one.py").write_text("def build_host(phase=None, *, seed=0):\n    return ('host', seed)\n")
    (tmp_path / "zz_sibling.py").write_text("X = 1\n")
    factory = import_entry("zz_host_one:build_host", tmp_path)
    assert factory(seed=3) == ("host", 3)
    assert sys.modules["zz_host_one"].__file__ == str(tmp_path / "zz_host_one.py")
    with pytest.raises(ImportError):  # only the host-entry's own module came from the project
        __import__("zz_sibling")


def test_a_host_package_imports_its_parts_relatively(tmp_path, clean_modules):
    pkg = tmp_path / "zz_host_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "parts.py").write_text("SEAMS = ('norm',)\n")
    (pkg / "block.py").write_text("from .parts import SEAMS\n\ndef build_host(phase=None, *, seed=0):\n    return SEAMS\n")
    assert import_entry("zz_host_pkg.block:build_host", tmp_path)() == ("norm",)


@pytest.mark.parametrize("name", ["json", "kernels", "pytest"])
def test_a_project_module_named_like_an_installed_one_is_refused(tmp_path, clean_modules, name):
    (tmp_path / f"{name}.py").write_text("def build_host(phase=None, *, seed=0):\n    raise SystemExit('shadowed')\n")
    with pytest.raises(UsageError) as ei:
        import_entry(f"{name}:build_host", tmp_path)
    msg = str(ei.value)
    assert msg.startswith(f"host-entry '{name}:build_host': module '{name}' is both in the project "
                          f"({tmp_path / (name + '.py')}) and installed (")
    assert msg.endswith("); frt will not guess which one is meant"), msg
    assert ei.value.hints == [f"rename the project's '{name}' (e.g. {name}_host) and the host-entry with it"]


def test_a_name_not_in_the_project_is_imported_as_usual(tmp_path, clean_modules):
    (tmp_path / "zz_folder").mkdir()  # a folder without __init__.py is not a module
    import json

    assert import_entry("json:dumps", tmp_path) is json.dumps
    with pytest.raises(ImportError):
        import_entry("zz_folder:x", tmp_path)
