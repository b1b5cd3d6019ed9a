"""``tests/README.md``'s module → tests table is held to the tree: every module of ``frt_dist`` has a
row, every row names a module that exists, and every test file it names exists. A module added,
moved or renamed fails here until the table says where its tests are."""

from __future__ import annotations

import re

from helpers.paths import PKG, TESTS


def _rows() -> dict[str, list[str]]:
    text = (TESTS / "README.md").read_text("utf-8")
    section = text.split("## Module → tests", 1)[1].split("\n## ", 1)[0]
    return {m.group(1): re.findall(r"`(test_[\w]+\.py)`", m.group(2))
            for m in re.finditer(r"^\| `([\w/]+\.py)` \| (.*) \|$", section, re.M)}


def test_every_module_has_a_row_and_every_named_file_exists():
    rows = _rows()
    modules = {p.relative_to(PKG).as_posix() for p in PKG.rglob("*.py")
               if p.name != "__init__.py" and "_bundled" not in p.parts}
    assert len(rows) > 50  # the table was found and read
    assert sorted(modules - set(rows)) == [], "modules with no row in tests/README.md's module → tests table"
    assert sorted(set(rows) - modules) == [], "rows naming no module of frt_dist"
    missing = sorted({f for files in rows.values() for f in files if not (TESTS / f).is_file()})
    assert missing == [], "test files the table names that do not exist"
    assert all(rows.values()), [m for m, files in rows.items() if not files]
