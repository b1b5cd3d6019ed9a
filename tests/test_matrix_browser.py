"""The HTML matrix in a real browser: headless Chromium parses it (the DOM it built holds the
table, states and legend) and renders it (the screenshot's pixels show the state colours of the
cells and the legend, and the winners' outlines). Under CI a missing browser is a failure, not a
skip: ``.ci/run`` installs Debian's ``chromium`` when it is absent."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from frt_dist.project.discover import Project
from frt_dist.routes.matrix import STATE_CLASSES, render_matrix
from helpers.pngread import count_colours, read_png
from helpers.resolver_support import build_case

from test_matrix import CASE, EXPECTED_ROWS, ROUTES, check_html_structure

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
if CHROMIUM is None and os.environ.get("CI"):
    pytest.fail("CI: chromium is not installed (.ci/run installs Debian's chromium); the HTML matrix must be "
                "checked in a real browser", pytrace=False)
pytestmark = [pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (CI installs it and fails without)"),
              pytest.mark.subprocess]

# the stylesheet's colours (frt_dist/routes/matrix.py): cell states, the legend box, winners' outlines
COLOURS = {"certified_fast": "#d1f4dc", "supported_correct": "#fff1c2", "unknown": "#f3f4f6",
           "winner": "#1a7f37", "supported-winner": "#9a6700"}


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("browser")
    b = build_case(CASE, tmp)
    path = tmp / "matrix.html"
    path.write_text(render_matrix(Project(b.root, "project"), fmt="html"), encoding="utf-8")
    return path


def _chromium(args, tmp_path, timeout=120):
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--no-first-run", "--disable-dev-shm-usage", "--hide-scrollbars",
           "--force-color-profile=srgb", f"--user-data-dir={tmp_path / 'chrome-profile'}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def test_the_browser_builds_the_table_states_and_legend(page, tmp_path):
    r = _chromium(["--dump-dom", page.as_uri()], tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    dom = r.stdout
    d = check_html_structure(dom if dom.lstrip().startswith("<!DOCTYPE") else "<!DOCTYPE html>" + dom)
    assert len(d.find("td", "cell")) == len(EXPECTED_ROWS) * len(ROUTES)
    for state in STATE_CLASSES:
        assert d.find("td", state), state
    assert d.find("div", "legend")


@pytest.mark.slow
def test_the_screenshot_shows_state_colours_legend_and_winners(page, tmp_path):
    shot = tmp_path / "matrix.png"
    r = _chromium([f"--screenshot={shot}", "--window-size=1400,900", page.as_uri()], tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    width, height, rows = read_png(shot.read_bytes())
    assert (width, height) == (1400, 900)
    got = count_colours(rows, COLOURS)
    # every state is painted: its cells and its legend swatch (a swatch alone is a few hundred pixels)
    for state in ("certified_fast", "supported_correct", "unknown"):
        assert got[state] > 2000, (state, got)
    # winners' 2 px outlines (measured: 4,619 and 1,154 pixels; 75 and 18 with the outline rule removed)
    assert got["winner"] > 1000 and got["supported-winner"] > 300, got
    # the legend is painted above the table: each state's colour first appears above the table header
    header = next(y for y, row in enumerate(rows) if count_colours([row], {"thead": "#eef1f4"})["thead"] > 200)
    for state in ("certified_fast", "supported_correct", "unknown"):
        first = next(y for y, row in enumerate(rows) if count_colours([row], {state: COLOURS[state]})[state] > 0)
        assert first < header, (state, first, header)
    if os.environ.get("MATRIX_SCREENSHOT_OUT"):
        shutil.copy(shot, os.environ["MATRIX_SCREENSHOT_OUT"])
