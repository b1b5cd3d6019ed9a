"""`frt matrix`: the cell x route state matrix from the lockfiles (Markdown and one self-contained HTML page).

The HTML is checked structurally with html.parser always, and in a real headless
Chromium when one is installed (DOM after parsing, and a screenshot).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from html.parser import HTMLParser

import pytest

from frt_dist.errors import FrtError, UsageError
from frt_dist.project.discover import Project
from frt_dist.routes.matrix import STATE_CLASSES, render_matrix
from helpers.frt import frt_process
from helpers.resolver_support import build_case

V128 = "torch213-cxx11-cu128-x86_64-linux"
WEIRD_NAME = 'NVIDIA GB10 <"DGX" Spark> | dev & co'

CASE = {
    "description": "matrix fixture",
    "manifest": {"default-precision": "bf16"},
    "packages": {
        "flashrt/fp8-gemm": {"variants": {V128: ["8.9", "11.0a", "12.0a"]}},
        "flashrt/flashrt-smallm-gemm": {"variants": {V128: ["12.0"]}},
        "flashrt/gated-delta-attention": {"variants": {V128: ["8.0", "8.6", "8.9", "9.0", "10.0", "11.0a", "12.0",
                                                                "12.0a", "12.1"]}},
    },
    "routes": {
        "fused": {"seams": {"attn": "flashrt/gated-delta-attention"}, "gate": 1.02},
        "split": {"seams": {"gemm": "flashrt/flashrt-smallm-gemm"}},
        "fp8": {"seams": {"gemm": "flashrt/fp8-gemm"}, "precision": "fp8"},
    },
    "hardware": {"arch": "12.0", "device-class": "rtx-5090", "software": {"torch": "2.13", "cuda": "12.8"}},
    "receipts": [
        {"name": "fused-5090", "route": "fused", "phase": "decode", "speedup": [1.31, 1.22, 1.40], "max-abs": 1e-6},
        {"name": "split-5090", "route": "split", "phase": "decode", "state": "supported_correct",
         "speedup": [0.98, 0.95, 1.01], "max-abs": 2.5e-5},
        {"name": "fp8-5090", "route": "fp8", "phase": "decode", "speedup": [2.0, 1.9, 2.1], "max-abs": 3e-5},
        {"name": "split-gb10", "route": "split", "phase": "decode", "speedup": [1.5, 1.4, 1.6],
         "hardware": {"backend": "cuda", "arch": "12.1", "device-class": "gb10", "device-name": WEIRD_NAME}},
        {"name": "fused-h200-211", "route": "fused", "phase": "prefill", "hardware": "cuda 9.0 h200",
         "software": {"torch": "2.11", "cuda": "12.8"}, "speedup": [1.1, 1.05, 1.12]},
        {"name": "fused-h200-213", "route": "fused", "phase": "prefill", "hardware": "cuda 9.0 h200",
         "state": "supported_correct"},
        {"name": "bad-b200", "route": "fused", "phase": "decode", "hardware": "cuda 10.0 b200",
         "set": {"evidence.fallbacks": 2}},
    ],
}

# rows in their rendered order: (phase, precision, arch, device class, software) -> route -> state.
# Rows with software "—" have no receipt: every phase x precision x hardware cell measured by any
# accepted receipt (h200, rtx-5090, gb10; b200's receipt was rejected) appears, unmeasured ones unknown.
BF16_UNKNOWN = {"fused": "unknown", "split": "unknown", "fp8": "na"}
FP8_UNKNOWN = {"fused": "na", "split": "na", "fp8": "unknown"}
EXPECTED_ROWS = [
    (("decode", "bf16", "9.0", "h200", "—"), BF16_UNKNOWN),
    (("decode", "bf16", "12.0", "rtx-5090", "cuda 12.8, torch 2.13"),
     {"fused": "certified_fast", "split": "supported_correct", "fp8": "na"}),
    (("decode", "bf16", "12.1", "gb10", "cuda 12.8, torch 2.13"),
     {"fused": "unknown", "split": "certified_fast", "fp8": "na"}),
    (("decode", "fp8", "9.0", "h200", "—"), FP8_UNKNOWN),
    (("decode", "fp8", "12.0", "rtx-5090", "cuda 12.8, torch 2.13"),
     {"fused": "na", "split": "na", "fp8": "certified_fast"}),
    (("decode", "fp8", "12.1", "gb10", "—"), FP8_UNKNOWN),
    (("prefill", "bf16", "9.0", "h200", "cuda 12.8, torch 2.11"),
     {"fused": "certified_fast", "split": "unknown", "fp8": "na"}),
    (("prefill", "bf16", "9.0", "h200", "cuda 12.8, torch 2.13"),
     {"fused": "supported_correct", "split": "unknown", "fp8": "na"}),
    (("prefill", "bf16", "12.0", "rtx-5090", "—"), BF16_UNKNOWN),
    (("prefill", "bf16", "12.1", "gb10", "—"), BF16_UNKNOWN),
    (("prefill", "fp8", "9.0", "h200", "—"), FP8_UNKNOWN),
    (("prefill", "fp8", "12.0", "rtx-5090", "—"), FP8_UNKNOWN),
    (("prefill", "fp8", "12.1", "gb10", "—"), FP8_UNKNOWN),
]
ROUTES = ["fused", "split", "fp8"]


@pytest.fixture(scope="module")
def proj(tmp_path_factory):
    b = build_case(CASE, tmp_path_factory.mktemp("matrix"))
    assert len(b.lock.rejected) == 1
    return b


def _project(b) -> Project:
    return Project(b.root, "project")


# ---------------------------------------------------------------------------
# Markdown


def _md_rows(text: str) -> list[list[str]]:
    rows = []
    for line in text.splitlines():
        if line.startswith("| ") and not line.startswith("|---"):
            cells = re.split(r"(?<!\\)\|", line.strip())[1:-1]
            rows.append([c.strip() for c in cells])
    return rows


def test_markdown_table_content(proj):
    md = render_matrix(_project(proj), fmt="md")
    assert md.startswith("# frt route matrix\n")
    assert "## case-model" in md
    rows = _md_rows(md)
    header, body = rows[0], rows[1:]
    assert header == ["phase", "rows", "precision", "hardware", "device class", "software", *ROUTES]
    assert len(body) == len(EXPECTED_ROWS)
    for got, ((phase, prec, arch, dev, sw), states) in zip(body, EXPECTED_ROWS, strict=True):
        assert got[:6] == [phase, "1–16" if phase == "decode" else "64–2048", prec, f"cuda {arch}", dev, sw]
        for cell, route in zip(got[6:], ROUTES, strict=True):
            st = states[route]
            if st == "na":
                assert cell == "n/a"
            elif st == "unknown":
                assert cell == "unknown"
            else:
                assert (("**certified_fast**" if st == "certified_fast" else "*supported\\_correct*") in cell), cell
    # a cell no receipt covers: its own row, every route of its precision unknown, the others n/a
    assert body[0] == ["decode", "1–16", "bf16", "cuda 9.0", "h200", "—", "unknown", "unknown", "n/a"]
    # key figures and the winner mark
    first = body[1]
    assert first[6] == "★ **certified_fast** 1.31× (1.22–1.40) · max-abs 1.0e-06"
    assert first[7] == "*supported\\_correct* 0.98× (0.95–1.01) · max-abs 2.5e-05"  # runner-up: no star
    assert body[2][7].startswith("★ **certified_fast** 1.50×")
    assert body[7][6] == "★ *supported\\_correct* no timing · max-abs 1.0e-06"  # a receipt without timing
    # routes and rejected receipts are listed for review
    assert "- fused: eager, bf16; attn = fused (flashrt/gated-delta-attention); gate min-speedup 1.02" in md
    assert "Rejected receipts" in md and "`receipts/case-model/bad-b200.json`: fallbacks is 2" in md
    assert "States: **certified_fast**:" in md and "n/a:" in md


def test_markdown_escapes_and_is_deterministic(proj, tmp_path):
    p = _project(proj)
    md = render_matrix(p, fmt="md")
    assert render_matrix(p, fmt="md") == md
    assert render_matrix(p, model="case-model", fmt="md") == md
    assert str(proj.root) not in md and str(tmp_path.parent) not in md
    assert not re.search(r"\d{4}-\d{2}-\d{2}|\d{2}:\d{2}:\d{2}", md)  # no timestamps
    # every table line has the same column count (nothing unescaped broke a row)
    widths = {len(r) for r in _md_rows(md)}
    assert widths == {6 + len(ROUTES)}


# ---------------------------------------------------------------------------
# HTML: structure (always)


class _Dom(HTMLParser):
    """A tiny DOM: every element as (tag, attrs, text, path of parent tags)."""

    VOID = {"meta", "br", "link", "img", "input", "hr"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, dict, list]] = []
        self.elements: list[dict] = []
        self.errors: list[str] = []

    def handle_starttag(self, tag, attrs):
        el = {"tag": tag, "attrs": dict(attrs), "text": [], "parents": [s["tag"] for s in self.stack], "children": []}
        if self.stack:
            self.stack[-1]["children"].append(el)
        self.elements.append(el)
        if tag not in self.VOID:
            self.stack.append(el)

    def handle_endtag(self, tag):
        if tag in self.VOID:
            return
        if not self.stack or self.stack[-1]["tag"] != tag:
            self.errors.append(f"unbalanced </{tag}> (open: {[s['tag'] for s in self.stack]})")
            return
        self.stack.pop()

    def handle_data(self, data):
        for s in self.stack:
            s["text"].append(data)

    def find(self, tag, cls=None):
        return [e for e in self.elements if e["tag"] == tag
                and (cls is None or cls in e["attrs"].get("class", "").split())]


def _text(el) -> str:
    return "".join(el["text"])


def _parse(doc: str) -> _Dom:
    d = _Dom()
    d.feed(doc)
    d.close()
    assert not d.errors, d.errors
    assert not d.stack, [s["tag"] for s in d.stack]
    return d


def check_html_structure(doc: str) -> _Dom:
    assert doc.startswith("<!DOCTYPE html>")
    d = _parse(doc)
    # self-contained: inline CSS, no script, no external asset
    assert d.find("style") and not d.find("script") and not d.find("link") and not d.find("img")
    for el in d.elements:
        for k, v in el["attrs"].items():
            assert not k.startswith("on"), (el["tag"], k)
            assert not (k in ("src", "href") and v), (el["tag"], k, v)
    assert "url(" not in doc and "@import" not in doc and "http://" not in doc and "https://" not in doc
    # legend: a swatch for every state
    legend = d.find("div", "legend")
    assert len(legend) == 1
    swatches = [e for e in d.find("span", "swatch") if "div" in e["parents"]]
    assert sorted(c for e in swatches for c in e["attrs"]["class"].split() if c != "swatch") == sorted(STATE_CLASSES)
    # the matrix: one header row (6 row-header columns + the routes), cells x routes body
    tables = d.find("table", "matrix")
    assert len(tables) == 1
    (table,) = tables
    thead = [c for c in table["children"] if c["tag"] == "thead"][0]
    header = thead["children"][0]["children"]
    assert [_text(h).strip() for h in header[:6]] == ["phase", "rows", "precision", "hardware", "device class",
                                                      "software"]
    route_heads = [h for h in header if "route" in h["attrs"].get("class", "").split()]
    assert route_heads and all(len(h["children"]) >= 1 and h["children"][0]["tag"] == "span" for h in route_heads)
    tbody = [c for c in table["children"] if c["tag"] == "tbody"][0]
    body_rows = [r for r in tbody["children"] if r["tag"] == "tr"]
    for r in body_rows:
        tds = [c for c in r["children"] if c["tag"] == "td"]
        ths = [c for c in r["children"] if c["tag"] == "th"]
        assert len(ths) == 6 and len(tds) == len(route_heads)
        for td in tds:
            cls = td["attrs"]["class"].split()
            assert "cell" in cls and len(set(cls) & set(STATE_CLASSES)) == 1, cls
            assert td["attrs"].get("title"), "every cell has hover detail"
    return d


def test_html_structure_states_shape_and_detail(proj):
    doc = render_matrix(_project(proj), fmt="html")
    d = check_html_structure(doc)
    table = d.find("table", "matrix")[0]
    tbody = [c for c in table["children"] if c["tag"] == "tbody"][0]
    rows = [r for r in tbody["children"] if r["tag"] == "tr"]
    assert len(rows) == len(EXPECTED_ROWS)
    route_heads = [h for h in d.find("th", "route")]
    assert [_text(h["children"][0]) for h in route_heads] == ROUTES
    present = set()
    for r, ((phase, prec, arch, dev, sw), states) in zip(rows, EXPECTED_ROWS, strict=True):
        ths = [_text(c) for c in r["children"] if c["tag"] == "th"]
        assert ths == [phase, "1–16" if phase == "decode" else "64–2048", prec, f"cuda {arch}", dev, sw]
        tds = [c for c in r["children"] if c["tag"] == "td"]
        for td, route in zip(tds, ROUTES, strict=True):
            cls = set(td["attrs"]["class"].split())
            assert states[route] in cls and td["attrs"]["data-route"] == route
            present |= cls & set(STATE_CLASSES)
    assert present == set(STATE_CLASSES)  # every state appears as a class in the matrix
    # a row no receipt covers: hover text says so
    td = [c for c in rows[0]["children"] if c["tag"] == "td"][0]
    assert td["attrs"]["title"] == ("route fused — decode (rows 1–16), bf16, cuda 9.0 h200, software —\n"
                                   "state unknown: no receipt for this cell")
    # the winner of the rtx-5090 row: star, figures in the cell, full detail on hover
    td = [c for c in rows[1]["children"] if c["tag"] == "td"][0]
    assert "winner" in td["attrs"]["class"].split()
    assert _text(td) == "★ certified_fast1.31× (1.22–1.40) · max-abs 1.0e-06"
    title = td["attrs"]["title"]
    assert proj.names["fused-5090"] in title and "receipts/case-model/fused-5090.json" in title
    assert "40 rounds, paired-alternating" in title and "flashrt/gated-delta-attention" in title
    assert "\n" in title  # multi-line hover text
    runner = [c for c in rows[1]["children"] if c["tag"] == "td"][1]
    assert "winner" not in runner["attrs"]["class"].split() and "runner-up, rank 2 of 2" in runner["attrs"]["title"]
    # rejected receipts are shown
    assert any("bad-b200.json" in _text(li) for li in d.find("li"))


def test_html_escapes_untrusted_text(proj):
    doc = render_matrix(_project(proj), fmt="html")
    assert WEIRD_NAME not in doc and '<"DGX"' not in doc and "<RTX" not in doc
    assert "&lt;&quot;DGX&quot; Spark&gt; | dev &amp; co" in doc
    d = _parse(doc)
    titles = [e["attrs"].get("title", "") for e in d.elements]
    assert any(WEIRD_NAME in t for t in titles)  # round-trips through the parser intact


def test_html_is_deterministic_and_has_no_paths_or_times(proj):
    p = _project(proj)
    doc = render_matrix(p, fmt="html")
    assert render_matrix(p, fmt="html") == doc
    assert str(proj.root) not in doc
    assert not re.search(r"\d{4}-\d{2}-\d{2}|\d{2}:\d{2}:\d{2}", doc)


# HTML in a real browser: tests/test_matrix_browser.py (DOM and rendered pixels; required under CI)


# ---------------------------------------------------------------------------
# CLI and boundaries


@pytest.mark.subprocess
def test_cli_matrix_writes_the_same_text(proj, tmp_path):
    out = tmp_path / "m.html"
    r = frt_process(["matrix", "--project", str(proj.root), "--format", "html", "-o", str(out)], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert out.read_text("utf-8") == render_matrix(_project(proj), fmt="html")
    r = frt_process(["matrix", "--project", str(proj.root)], cwd=tmp_path)
    assert r.returncode == 0 and r.stdout == render_matrix(_project(proj), fmt="md")


# ---------------------------------------------------------------------------
# JSON

ROW_KEYS = {"phase", "rows", "precision", "backend", "arch", "device-class", "device-name", "cpu", "os", "software",
            "routes"}
CELL_KEYS = {"state", "receipt", "winner", "rank", "speedup-median", "max-abs"}
NOTHING = {"receipt": None, "winner": False, "rank": None, "speedup-median": None, "max-abs": None}


@pytest.mark.subprocess
def test_json_document_keys_and_values(proj, tmp_path):
    r = frt_process(["matrix", "--project", str(proj.root), "--json"], cwd=tmp_path)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    doc = json.loads(r.stdout)
    assert r.stdout == render_matrix(_project(proj), fmt="json")
    assert list(doc) == ["lockfiles"] and len(doc["lockfiles"]) == 1
    (lk,) = doc["lockfiles"]
    assert set(lk) == {"model", "path", "lock-digest", "binding", "family", "routes", "rows", "rejected-receipts"}
    recorded = tomllib.loads((proj.root / "lockfiles" / "case-model.lock").read_text("utf-8"))
    assert (lk["model"], lk["path"], lk["lock-digest"]) == ("case-model", "lockfiles/case-model.lock",
                                                            recorded["lock-digest"])
    assert [(x["name"], x["precision"], x["min-speedup"]) for x in lk["routes"]] == [
        ("fused", "bf16", 1.02), ("split", "bf16", None), ("fp8", "fp8", None)]
    assert [x["route-digest"] for x in lk["routes"]] == [proj.lock.manifest.routes[n].digest for n in ROUTES]
    assert [x["file"] for x in lk["rejected-receipts"]] == ["receipts/case-model/bad-b200.json"]
    # the rows: the same cells, in the same order, as Markdown and HTML show
    assert len(lk["rows"]) == len(EXPECTED_ROWS)
    for row, ((phase, prec, arch, dev, sw), states) in zip(lk["rows"], EXPECTED_ROWS, strict=True):
        assert set(row) == ROW_KEYS and sorted(row["routes"]) == sorted(ROUTES)
        assert (row["phase"], row["precision"], row["backend"], row["arch"], row["device-class"]) == (
            phase, prec, "cuda", arch, dev)
        assert row["rows"] == ([1, 16] if phase == "decode" else [64, 2048])
        assert (", ".join(f"{k} {v}" for k, v in sorted(row["software"].items())) or "—") == sw
        assert (row["cpu"], row["os"]) == (None, None)  # receipts record neither; not the cpu backend
        for route, cell in row["routes"].items():
            assert set(cell) == CELL_KEYS and cell["state"] == states[route], (row, route)
            if cell["state"] in ("na", "unknown"):
                assert {k: cell[k] for k in NOTHING} == NOTHING
    # figures: the winner and the runner-up of the rtx-5090 decode row, recomputed from the receipts' values
    winner, runner = lk["rows"][1]["routes"]["fused"], lk["rows"][1]["routes"]["split"]
    assert winner == {"state": "certified_fast", "receipt": proj.names["fused-5090"], "winner": True, "rank": 1,
                      "speedup-median": 1.31, "max-abs": 1e-6}
    assert runner == {"state": "supported_correct", "receipt": proj.names["split-5090"], "winner": False, "rank": 2,
                      "speedup-median": 0.98, "max-abs": 2.5e-5}
    gb10 = lk["rows"][2]
    assert gb10["device-name"] == WEIRD_NAME and gb10["routes"]["split"]["winner"] is True
    assert lk["rows"][7]["routes"]["fused"]["speedup-median"] is None  # a receipt without timing
    assert lk["rows"][7]["routes"]["fused"]["receipt"] == proj.names["fused-h200-213"]
    # -o FILE gets the same document
    out = tmp_path / "m.json"
    r = frt_process(["matrix", "--project", str(proj.root), "--json", "-o", str(out)], cwd=tmp_path)
    assert r.returncode == 0 and r.stdout == "" and out.read_text("utf-8") == render_matrix(_project(proj), fmt="json")


@pytest.mark.subprocess
def test_json_and_format_together_is_a_usage_error(proj, tmp_path):
    r = frt_process(["matrix", "--project", str(proj.root), "--json", "--format", "html"], cwd=tmp_path)
    assert r.returncode == 2
    assert json.loads(r.stdout) == {"error": "--json and --format html each choose the output; give one",
                                    "hints": [], "exit": 2, "reasons": []}


@pytest.mark.subprocess
def test_missing_lockfile_is_a_no_in_text_and_json(proj, tmp_path):
    """A missing lockfile is a "no" (exit 1), as `frt lock --check` has it; an unknown model is bad input."""
    root = tmp_path / "p"
    build_case(CASE, root)
    (root / "lockfiles" / "case-model.lock").unlink()
    r = frt_process(["matrix", "--project", str(root), "--model", "case-model"], cwd=tmp_path)
    assert (r.returncode, r.stdout) == (1, "")
    assert r.stderr == ("error: no lockfile for model 'case-model' (lockfiles/case-model.lock)\n"
                        "hint: frt lock --model case-model\n")
    r = frt_process(["matrix", "--project", str(root), "--model", "case-model", "--json"], cwd=tmp_path)
    assert r.returncode == 1 and r.stderr == ""
    assert json.loads(r.stdout) == {"error": "no lockfile for model 'case-model' (lockfiles/case-model.lock)",
                                    "hints": ["frt lock --model case-model"], "exit": 1, "reasons": []}
    r = frt_process(["matrix", "--project", str(root), "--model", "nope"], cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.startswith("error: unknown model 'nope'"), r.stderr


@pytest.mark.subprocess
def test_missing_lockfiles_and_unknown_model(tmp_path, proj):
    empty = tmp_path / "empty"
    (empty / "manifests").mkdir(parents=True)
    with pytest.raises(FrtError) as ei:
        render_matrix(Project(empty, "project"))
    assert "no lockfiles" in str(ei.value) and ei.value.exit_code == 1
    with pytest.raises(UsageError):
        render_matrix(_project(proj), model="nope")
    with pytest.raises(UsageError):
        render_matrix(_project(proj), fmt="pdf")
    r = frt_process(["matrix", "--project", str(empty)], cwd=tmp_path)
    assert r.returncode == 1 and r.stderr.startswith("error: no lockfiles") and "hint: run `frt lock`" in r.stderr


@pytest.mark.subprocess
def test_output_file_is_readable_like_any_report(proj, tmp_path):
    """`frt matrix -o FILE` writes a report for others to read: not a 0600 file (the temp file's mode)."""
    out = tmp_path / "m.md"
    r = frt_process(["matrix", "--project", str(proj.root), "-o", str(out)], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask, oct(out.stat().st_mode)


def test_several_models_one_section_each(tmp_path):
    root = tmp_path / "two"
    build_case(CASE, root, model="zeta-model")
    build_case({**CASE, "receipts": CASE["receipts"][:1]}, root, model="alpha-model")
    p = Project(root, "project")
    md = render_matrix(p)
    assert md.index("## alpha-model") < md.index("## zeta-model")
    # two headers; alpha: its one measured cell and the three other phase x precision cells on that hardware
    assert len(_md_rows(md)) == 2 + 4 + len(EXPECTED_ROWS)
    only = render_matrix(p, model="alpha-model")
    assert "## alpha-model" in only and "zeta-model" not in only
    doc = render_matrix(p, fmt="html")
    d = check_html_structure_multi(doc)
    assert [e["attrs"]["id"] for e in d.find("section", "model")] == ["model-alpha-model", "model-zeta-model"]


def check_html_structure_multi(doc: str) -> _Dom:
    d = _parse(doc)
    assert len(d.find("div", "legend")) == 1 and len(d.find("table", "matrix")) == 2
    return d


def test_lock_without_receipts_renders_every_cell_unknown(tmp_path):
    """No receipt on any hardware: one unknown row per (phase, precision) of the manifest, hardware "—"."""
    case = {**CASE, "receipts": []}
    b = build_case(case, tmp_path)
    md = render_matrix(Project(b.root, "project"))
    assert _md_rows(md)[1:] == [[ph, band, prec, "—", "—", "—", *states] for ph, band in
                                (("decode", "1–16"), ("prefill", "64–2048")) for prec, states in
                                (("bf16", ["unknown", "unknown", "n/a"]), ("fp8", ["n/a", "n/a", "unknown"]))]
    doc = render_matrix(Project(b.root, "project"), fmt="html")
    d = check_html_structure(doc)
    assert len(d.find("td", "unknown")) == 6 and len(d.find("td", "na")) == 6


@pytest.mark.subprocess
def test_matrix_imports_neither_torch_nor_kernels(proj):
    code = ("import sys; from frt_dist.routes.matrix import render_matrix; from frt_dist.project.discover import Project; "
            f"render_matrix(Project(__import__('pathlib').Path({str(proj.root)!r}), 'project'), fmt='html'); "
            "bad = [m for m in ('torch', 'kernels') if m in sys.modules]; assert not bad, bad")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
