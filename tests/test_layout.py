"""The package layout keeps its two start-up rules: ``import frt_dist`` imports nothing of frt's
beyond its error types, and every subpackage ``__init__`` is empty of imports (a docstring, ``__all__`` and at most a
module ``__getattr__`` that imports a public name on first use), so importing one module never
drags its siblings in."""

from __future__ import annotations

import ast
import os
import subprocess
import sys

import pytest

from helpers.paths import PKG


def test_every_subpackage_init_is_empty_of_imports():
    inits = sorted(p for p in PKG.rglob("__init__.py") if p.parent != PKG and "_bundled" not in p.parts)
    assert len(inits) >= 12, inits  # base, documents, system, project, lock, provenance, distribution, ...
    busy = []
    for p in inits:
        for node in ast.parse(p.read_text()).body:  # module level only: a lazy import inside __getattr__ is fine
            if isinstance(node, (ast.Import, ast.ImportFrom)) and getattr(node, "module", None) != "__future__":
                busy.append(f"{p.relative_to(PKG.parent)}:{node.lineno}")
    assert busy == [], f"a subpackage __init__ imports at load time (import on first use instead): {busy}"


def test_import_frt_dist_loads_only_the_error_types():
    code = "import sys, frt_dist; print(sorted(m for m in sys.modules if m.startswith('frt_dist')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(PKG.parent)}, check=True).stdout
    assert out.strip() == "['frt_dist', 'frt_dist.errors']"


def test_the_public_names_resolve_to_their_new_homes():
    import frt_dist

    for name, (mod, attr) in frt_dist._LAZY.items():
        obj = getattr(frt_dist, name)
        assert obj is getattr(__import__(f"frt_dist.{mod}", fromlist=[attr]), attr), name


def test_the_lazy_package_names_still_resolve():
    from frt_dist import loader, routes
    from frt_dist.loader import core
    from frt_dist.routes import resolver

    for name in loader.__all__:
        assert getattr(loader, name) is getattr(core, name), name
    for name in routes.__all__:
        assert getattr(routes, name) is getattr(resolver, name), name
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        loader.nope  # noqa: B018
