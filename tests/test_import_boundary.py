"""`import frt_dist` and the lock/resolve/verify/matrix commands import neither torch nor kernels."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from helpers.factories import toy_manifest, write_files
from helpers.hubserver import kernel_variant_files
from helpers.paths import SRC

PROBE = """
import sys, runpy
{body}
heavy = sorted(m for m in ("torch", "kernels") if m in sys.modules)
print("HEAVY=" + ",".join(heavy))
"""


def _env(home) -> dict:
    """A bare environment whose frt_dist is the one under test (this checkout's, not whatever an
    editable install of another checkout points at)."""


    return {"PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1", "HOME": str(home),
            "PYTHONPATH": str(SRC)}


def _run(body: str, cwd) -> str:
    r = subprocess.run([sys.executable, "-c", PROBE.format(body=body)], cwd=cwd, capture_output=True, text=True,
                       timeout=120, env=_env(cwd))
    assert "HEAVY=" in r.stdout, r.stderr
    return r.stdout.rsplit("HEAVY=", 1)[1].strip()


@pytest.mark.subprocess
def test_import_frt_dist_is_light(tmp_path):
    body = "import frt_dist; frt_dist.Hardware(arch='12.0', device_class='h200'); frt_dist.arch_admits(['9.0'], '9.0')"
    assert _run(body, tmp_path) == ""


@pytest.mark.parametrize("argv", [["lock", "--help"], ["verify", "--help"], ["resolve", "--help"], ["matrix", "--help"]])
@pytest.mark.subprocess
def test_help_is_light(tmp_path, argv):
    body = f"from frt_dist.cli.main import main\ntry:\n    main({argv!r})\nexcept SystemExit:\n    pass"
    assert _run(body, tmp_path) == ""


@pytest.mark.subprocess
def test_lock_resolve_verify_matrix_are_light(tmp_path):
    write_files(tmp_path / "packages" / "addone", kernel_variant_files(name="addone", variant="torch-cpu"))
    (tmp_path / "manifests").mkdir()
    (tmp_path / "manifests" / "toy.toml").write_text(
        toy_manifest(package_toml='[packages."testorg/addone"]\npath = "packages/addone"'))
    body = "\n".join([
        "from frt_dist.cli.main import main",
        "import contextlib, io",
        "codes = []",
        "for argv in (['lock'], ['lock', '--check'], ['verify'],"
        " ['resolve', '--model', 'toy', '--arch', '12.0', '--device-class', 'h200', '--json'], ['matrix', '--format', 'html']):",
        "    with contextlib.redirect_stdout(io.StringIO()):",
        "        codes.append(main(argv))",
        "print('CODES=' + repr(codes))",
    ])
    r = subprocess.run([sys.executable, "-c", PROBE.format(body=body)], cwd=tmp_path, capture_output=True, text=True,
                       timeout=120, env=_env(tmp_path))
    assert "CODES=[0, 0, 0, 1, 0]" in r.stdout, r.stdout + r.stderr  # resolve: refused (no receipts) is exit 1
    assert r.stdout.rsplit("HEAVY=", 1)[1].strip() == ""


# --- layers point one way: the order written in docs/design.md, against the import graph read from the source

DESIGN = Path(__file__).resolve().parents[1] / "docs" / "design.md"


def _layer_order(text: str) -> dict[str, int]:
    """``{"base": 0, "errors": 0, "settings": 1, ...}`` from design.md's one order line
    (``base, errors, __init__ < settings < ...``)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip().startswith("base, errors, __init__ <")]
    assert len(lines) == 1, "docs/design.md states the layer order on one line starting 'base, errors, __init__ <'"
    return {name.strip(): height for height, group in enumerate(lines[0].split("<")) for name in group.split(",")}


def _imports(pkg_root: Path):
    """Every import of a frt module by a frt module, at module level or inside a function:
    ``(module, file, line, imported module)``."""
    import ast

    mods = {}
    for p in sorted(pkg_root.rglob("*.py")):
        parts = list(p.relative_to(pkg_root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = p
    out = []
    for m, p in mods.items():
        here = m if p.name == "__init__.py" else m.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(p.read_text("utf-8"))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here.split(".")[: len(here.split(".")) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                # `from .. import settings` imports the module frt_dist.settings; `from .. import x`
                # of a name that is no module imports from the package's __init__ itself
                names = {f"{target}.{a.name}" if f"{target}.{a.name}" in mods else target for a in node.names}
            elif isinstance(node, ast.Import):
                names = {a.name for a in node.names}
            else:
                continue
            for n in sorted(names):
                if n in mods and n != m:
                    out.append((m, p.relative_to(pkg_root.parent).as_posix(), node.lineno, n))
    return mods, out


def _layer_of(module: str) -> str:
    parts = module.split(".")
    return "__init__" if len(parts) == 1 else parts[1]


def upward_imports(pkg_root: Path, order: dict[str, int]) -> list[str]:
    """Each import against ``order``, as ``file:line imports module: layer (height) -> layer (height)``;
    a module whose layer the order does not place is reported as such."""
    mods, edges = _imports(pkg_root)
    out = [f"{p.relative_to(pkg_root.parent).as_posix()}: layer {_layer_of(m)!r} is not in the order"
           for m, p in mods.items() if _layer_of(m) not in order]
    for m, file, line, n in edges:
        a, b = _layer_of(m), _layer_of(n)
        if a in order and b in order and order[b] > order[a]:
            out.append(f"{file}:{line} imports {n}: {a} ({order[a]}) -> {b} ({order[b]}) points upward")
    return out


def _import_graph() -> dict[str, set[str]]:
    """module -> the frt_dist modules it imports, at module level or inside functions."""
    import frt_dist

    mods, edges = _imports(Path(frt_dist.__file__).parent)
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for m, _, _, n in edges:
        graph[m].add(n)
    return graph


def _reachable(graph, start) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for n in graph[todo.pop()]:
            if n not in seen:
                seen.add(n)
                todo.append(n)
    return seen


def test_no_import_cycles_between_frt_modules():
    graph = _import_graph()
    assert {"frt_dist.cli.main", "frt_dist.qualify.run", "frt_dist.loader.core", "frt_dist.routes.resolver"} <= set(graph)
    cycles = sorted(m for m in graph if m in _reachable(graph, m))
    assert cycles == [], f"import cycles through {cycles}"


def test_serving_does_not_reach_the_matrix():
    """Within the order, a start-up rule: loading for serving never imports the matrix renderer."""
    assert "frt_dist.routes.matrix" not in _reachable(_import_graph(), "frt_dist.serve.load")


def test_no_import_points_up_the_written_layer_order():
    import frt_dist

    order = _layer_order(DESIGN.read_text("utf-8"))
    assert order["base"] == order["errors"] == 0 and order["documents"] < order["lock"] < order["cli"]
    found = upward_imports(Path(frt_dist.__file__).parent, order)
    assert found == [], "imports against docs/design.md's layer order:\n" + "\n".join(found)


def test_the_layer_check_names_an_upward_import_hidden_in_a_function(tmp_path):
    """The check reads function-level imports and ignores ``# noqa``: a planted upward import in a
    lower layer is named with its file, line and both layers; a module outside the order is named."""
    pkg = tmp_path / "frt_dist"
    write_files(pkg, {"__init__.py": b"", "base/__init__.py": b"", "lock/__init__.py": b"", "extra/__init__.py": b"",
                      "lock/build.py": b"from ..base import names\n",
                      "base/names.py": b"def f():\n    from ..lock.build import x  # noqa: PLC0415\n    return x\n"})
    order = {"base": 0, "__init__": 0, "lock": 1}
    assert upward_imports(pkg, order) == [
        "frt_dist/extra/__init__.py: layer 'extra' is not in the order",
        "frt_dist/base/names.py:2 imports frt_dist.lock.build: base (0) -> lock (1) points upward"]
    assert _layer_order("x\n    base, errors, __init__ < settings < a, b < cli\n") == {
        "base": 0, "errors": 0, "__init__": 0, "settings": 1, "a": 2, "b": 2, "cli": 3}


def test_only_public_huggingface_hub_and_kernels_names_are_used():
    """frt stands on huggingface_hub's public API: no private module or name is imported
    (the one private `kernels` adapter, if any, would be listed here by name)."""
    import ast
    from pathlib import Path

    import frt_dist

    private = []
    for p in Path(frt_dist.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(p.read_text("utf-8"))):
            if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] in (
                    "huggingface_hub", "kernels"):
                parts = node.module.split(".") + [a.name for a in node.names]
                if any(x.startswith("_") for x in parts):
                    private.append(f"{p.name}:{node.lineno} from {node.module} import {', '.join(a.name for a in node.names)}")
            if isinstance(node, ast.Attribute) and node.attr in ("_build_hf_headers", "_http", "_get_session"):
                private.append(f"{p.name}:{node.lineno} .{node.attr}")
    assert private == []


# --- the import set of each read-only command, end to end in a fresh process

# what no read-only command may import: the machinery that loads and runs kernels, the Hub
# client, and the standard-library pieces only other commands need (each costs start-up time)
NEVER = ("torch", "kernels", "huggingface_hub", "frt_dist.loader", "frt_dist.serve.load", "frt_dist.qualify",
         "frt_dist.distribution.mirror", "frt_dist.serve.kernelize", "frt_dist.system.detect", "frt_dist.demo", "numpy", "requests",
         "httpx", "packaging", "platform", "tempfile", "threading", "subprocess",
         # the object-store, fleet, signing and SBOM layers and their clients (none of them reads a lock)
         "boto3", "botocore", "obstore", "sigstore", "cryptography", "cyclonedx", "frt_dist.distribution.objstore",
         "frt_dist.distribution.fleet", "frt_dist.provenance.signing", "frt_dist.export.sbom",
         # value classes come from frt_dist.base.record: `dataclasses` would import `inspect` (~8 ms)
         "dataclasses", "inspect")
# and per command, what it does not use either
NOT_FOR = {
    "resolve": ("frt_dist.lock.build", "frt_dist.lock.verify", "frt_dist.distribution.hub", "frt_dist.routes.matrix",
                "frt_dist.routes.explain", "tomli_w", "datetime", "importlib.util",
                # a manifest without signature/signer keys needs no policy classes
                "frt_dist.provenance.publisher", "frt_dist.documents.publisher_policy"),
    "verify": ("frt_dist.distribution.hub", "frt_dist.routes.matrix", "tomli_w", "datetime", "importlib.util"),
    "lock": ("frt_dist.lock.verify", "frt_dist.routes", "frt_dist.routes.matrix"),
    "matrix": ("frt_dist.lock.build", "frt_dist.lock.verify", "frt_dist.distribution.hub", "tomli_w", "datetime", "importlib.util",
               "frt_dist.provenance.publisher", "frt_dist.documents.publisher_policy"),
}
IMPORT_SET = """
import atexit, sys
atexit.register(lambda: sys.__stderr__.write("MODULES=" + " ".join(sorted(sys.modules)) + "\\n"))
from frt_dist._entry import main
sys.argv[0] = "frt"
sys.exit(main())
"""


@pytest.mark.parametrize("argv", [
    ["resolve", "--model", "demo-decoder", "--arch", "x86_64", "--device-class", "amd-epyc",
     "--software", "torch=2.13,kernels=0.17.2", "--json"],
    ["verify", "--model", "demo-decoder", "--json"],
    ["lock", "--model", "demo-decoder", "--check"],
    ["matrix", "--model", "demo-decoder", "--json"],
], ids=lambda a: a[0])
@pytest.mark.subprocess
def test_each_command_imports_only_what_it_uses(tmp_path, argv):
    """`frt resolve|verify|lock --check|matrix` on the bundled demo, as the console script runs them:
    the modules loaded when the process exits hold none of the forbidden ones."""
    from frt_dist.project.discover import bundled_root

    r = subprocess.run([sys.executable, "-c", IMPORT_SET, *argv, "--project", str(bundled_root())], cwd=tmp_path,
                       capture_output=True, text=True, timeout=120, env=_env(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "MODULES=" in r.stderr, r.stderr
    loaded = set(r.stderr.rsplit("MODULES=", 1)[1].split())
    assert {"frt_dist.cli.main", "frt_dist.documents.lockfile"} <= loaded  # the probe saw the command run
    banned = NEVER + NOT_FOR[argv[0]]
    bad = sorted(m for m in loaded if any(m == b or m.startswith(b + ".") for b in banned))
    assert bad == [], f"frt {argv[0]} imported {bad}"


def test_only_the_named_subcommands_flags_are_built_and_nothing_else_changes(capsys):
    """Start-up builds the parser for the one subcommand being run; `frt --help` and each
    subcommand's flags, errors and suggestions are what the whole parser gives."""
    from frt_dist.cli import main as cli

    assert cli._named_command(["resolve", "--json"]) == "resolve"
    assert cli._named_command(["--project", "resolve", "lock"]) == "lock"  # a project folder named like a command
    assert cli._named_command(["--project=x", "verify"]) == "verify"
    assert cli._named_command(["--proj", "x", "verify"]) is None  # an abbreviation: build everything
    assert cli._named_command(["resolv"]) is None and cli._named_command([]) is None
    assert cli._named_command(["-q", "--json", "-v", "--demo", "lock"]) == "lock"  # the global flags before it
    full = cli.build_parser()
    for name in cli.COMMANDS:
        only = cli.build_parser(only=name)
        assert only.format_usage() == full.format_usage()  # what a top-level usage error prints
        sub, whole = (p._subparsers._group_actions[0].choices for p in (only, full))
        assert sub[name].format_help() == whole[name].format_help()
        argv = [name] + {"mirror": ["DIR"], "init": ["DIR"], "qualify": ["--route", "r"], "digest": ["p"],
                         "receipts": ["pull", "s3://b/p"], "publish": ["s3://b/p"], "sign": ["--key", "k.pem", "r.json"],
                         "release": ["trust"]}.get(name, [])
        assert vars(only.parse_args(argv)) == vars(full.parse_args(argv))
    with pytest.raises(SystemExit):
        cli.main(["resolve", "--archh", "9.0"])
    assert "--archh: did you mean --arch?" in capsys.readouterr().err
