"""``frt matrix``: the cell × route state matrix, read from the lockfiles (docs/reference.md#frt-matrix).

One table per model. Rows are cells — phase band, precision, hardware (backend,
arch, device class) and, where receipts of one cell differ in it, the software
they measured (software that affects dispatch is part of the cell: docs/reference.md#cells-and-software).
Columns are the manifest's routes, in manifest order. A table cell shows the
state of the route there — ``certified_fast``, ``supported_correct`` or
``unknown`` (``n/a`` when the route's precision is not the row's) — with the
receipt's key figures: median speedup with its min–max and the worst parity
error (max-abs). ``★`` marks the row's winner: the first receipt of the lock's
ranking (certified_fast first, then higher median speedup), which is what
``resolve`` takes when its state is accepted and the system matches. A receipt whose
measured variants do not admit the row's arch (``admissible.admission_problems``, docs/reference.md#admissibility)
is left out, as ``frt lock`` and resolve leave it out, even from a lock written before that
rule: the matrix never shows a winner that resolve refuses.

Unknown rows: a cell with no receipt would otherwise be invisible, so the matrix also shows, for
every phase band × every precision of the manifest's routes × every hardware cell (backend, arch,
device class) that any accepted receipt of the lock measured on, a row where that combination has
no accepted receipt at all: every route of that precision ``unknown``, the others ``n/a``. The
hardware set comes from accepted receipts only, because the lock records a rejected receipt's
device class but not its backend and arch. A lock with no accepted receipt shows one ``unknown``
row per (phase, precision) with hardware ``—``.

Plain text (``--format text``, the default on a terminal) is an aligned table for people;
Markdown is for reviews; JSON (``--json``, keys in ``docs/matrix.md``) is for tools; HTML is
one self-contained page (inline CSS, no script, no external asset) with the states as colours, a
legend, the figures in the cell and the full detail as ``title`` hover text. Output is a pure
function of the lockfiles: no timestamps, no absolute paths.
"""

from __future__ import annotations

import html
import json
import re

from ..base.canonical import short_digest
from ..base.record import dataclass, field
from ..documents.lockfile import Lockfile
from ..documents.manifest import route_gate
from ..documents.receipt import Receipt
from ..errors import FrtError, UsageError
from ..system.admissible import admission_problems

__all__ = ["render_matrix", "STATE_CLASSES"]

STATES = ("certified_fast", "supported_correct", "unknown")
STATE_CLASSES = STATES + ("na",)
LEGEND = {
    "certified_fast": "correct, and clears the route's declared net-win gate",
    "supported_correct": "correct, no speed claim: used only when the caller accepts supported_correct",
    "unknown": "no valid receipt: refused unless the caller asks for the host fallback",
    "na": "not applicable: the route's precision is not this row's (a precision is never substituted)",
}
WINNER_NOTE = "★ winner: first in the lock's ranking for the cell (certified_fast first, then higher median speedup)"


# ---------------------------------------------------------------------------
# model


@dataclass
class Cell:
    route: str
    state: str  # one of STATE_CLASSES
    receipt: Receipt | None = None
    winner: bool = False
    rank: int = 0  # 1-based position in the row's ranking (0: no receipt)
    ranked: int = 0  # how many receipts the row ranks
    others: int = 0  # further (lower-ranked) receipts of this route in the row
    note: str = ""


@dataclass
class Row:
    phase: str
    rows: tuple[int, int] | None
    precision: str
    backend: str
    arch: str
    device_class: str
    software: tuple[tuple[str, str], ...]
    device_name: str = ""
    cells: list[Cell] = field(default_factory=list)

    @property
    def hardware_text(self) -> str:
        return f"{self.backend} {self.arch}" if self.backend else "—"

    @property
    def software_text(self) -> str:
        return ", ".join(f"{k} {v}" for k, v in self.software) or "—"

    @property
    def band_text(self) -> str:
        return f"{self.rows[0]}–{self.rows[1]}" if self.rows else "?"


@dataclass
class Table:
    lock: Lockfile
    label: str
    routes: list[str]
    rows: list[Row]


def _natural(s: str) -> tuple:
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.findall(r"\d+|\D+", s))


def _table(lock: Lockfile, label: str) -> Table:
    m = lock.manifest
    routes = list(m.routes)
    phase_order = {p: i for i, p in enumerate(m.phases)}
    rows: list[Row] = []
    for key, entry in lock.index.items():
        groups: dict[tuple, list] = {}
        for cand in entry.candidates:
            rec = lock.receipts[cand.receipt]
            if admission_problems(lock.packages, rec.cell):
                continue  # the lock rejects such a receipt and resolve refuses it (docs/reference.md#admissibility): never a winner here
            sw = tuple(sorted(rec.software.items()))
            groups.setdefault(sw, []).append((cand, rec))
        for sw, cands in groups.items():
            ph = m.phases.get(key.phase)
            names = sorted({rec.cell["hardware"].get("device-name", "") for _, rec in cands} - {""})
            row = Row(key.phase, tuple(ph.rows) if ph else None, key.precision, key.backend, key.arch,
                      key.device_class, sw, device_name=", ".join(names))
            for rname in routes:
                mine = [(i, c, r) for i, (c, r) in enumerate(cands) if c.route == rname]
                if mine:
                    i, cand, rec = mine[0]
                    row.cells.append(Cell(rname, cand.state, rec, winner=(i == 0), rank=i + 1, ranked=len(cands),
                                          others=len(mine) - 1))
                else:
                    row.cells.append(_no_receipt(rname, m.routes[rname].precision, key.precision))
            rows.append(row)
    rows += _unknown_rows(lock, {(r.phase, r.precision, r.backend, r.arch, r.device_class) for r in rows})
    rows.sort(key=lambda r: (phase_order.get(r.phase, len(phase_order)), r.phase, r.precision, not r.backend,
                             r.backend, _natural(r.arch), r.device_class, r.software))
    return Table(lock, label, routes, rows)


def _no_receipt(route: str, route_precision: str, precision: str) -> Cell:
    if route_precision != precision:
        return Cell(route, "na", note=f"route precision is {route_precision}")
    return Cell(route, "unknown", note="no receipt for this cell")


def _unknown_rows(lock: Lockfile, shown: set[tuple]) -> list[Row]:
    """The rows for cells no accepted receipt covers (the module docstring says which): without
    them a cell nobody measured is invisible, and a reviewer cannot tell it from one never asked."""
    m = lock.manifest
    hardware = sorted({r.key[2:] for r in lock.receipts.values()}) or [("", "", "")]  # (backend, arch, class)
    out = []
    for phase, band in m.phases.items():
        for precision in m.precisions:
            for backend, arch, dc in hardware:
                if (phase, precision, backend, arch, dc) in shown:
                    continue
                row = Row(phase, tuple(band.rows), precision, backend, arch, dc, ())
                row.cells = [_no_receipt(rn, rt.precision, precision) for rn, rt in m.routes.items()]
                out.append(row)
    return out


def _load(project, model: str | None) -> list[Table]:
    if model is not None:
        paths = [project.existing_lockfile(model)]
    else:
        d = project.lockfiles_dir
        paths = sorted(d.glob("*.lock")) if d.is_dir() else []
        if not paths:
            raise FrtError(f"no lockfiles in {project.describe()} ({project.rel(d)}/)", hints=["run `frt lock` first"])
    tables = []
    for p in paths:
        label = project.rel(p)
        tables.append(_table(Lockfile.read(p, label=label), label))
    tables.sort(key=lambda t: (t.lock.model, t.label))
    return tables


# ---------------------------------------------------------------------------
# figures and detail text


def _num(x: float) -> str:
    if x != x:  # NaN never comes from a valid receipt, but a report must not crash on it
        return "nan"
    if abs(x) >= 1000:
        return f"{x:.0f}"
    return f"{x:.3g}" if abs(x) >= 10 else f"{x:.2f}"


def _sci(x: float) -> str:
    return f"{x:.1e}"


def _speed(rec: Receipt) -> str:
    t = rec.timing
    if not t:
        return "no timing"
    return f"{_num(t['speedup-median'])}× ({_num(t['speedup-min'])}–{_num(t['speedup-max'])})"


def _figures(cell: Cell) -> str:
    """The one-line figures shown in the table cell."""
    if cell.receipt is None:
        return ""
    return f"{_speed(cell.receipt)} · max-abs {_sci(cell.receipt.worst_error)}"


def _detail(lock: Lockfile, row: Row, cell: Cell) -> list[str]:
    """Full detail of one table cell (HTML hover text; Markdown footnote-free)."""
    head = (f"route {cell.route} — {row.phase} (rows {row.band_text}), {row.precision}, "
            f"{row.hardware_text} {row.device_class or '—'}, software {row.software_text}")
    if cell.receipt is None:
        return [head, f"state {cell.state}: {cell.note}"]
    rec = cell.receipt
    c, ev = rec.cell, rec.data["evidence"]
    rank = "winner" if cell.winner else f"runner-up, rank {cell.rank}"
    lines = [head, f"state {cell.state} ({rank} of {cell.ranked} in this cell)",
             f"receipt {rec.digest}", f"file {rec.file}"]
    t = rec.timing
    if t:
        lines.append(f"speedup median {_num(t['speedup-median'])}, min {_num(t['speedup-min'])}, max "
                     f"{_num(t['speedup-max'])}; {t.get('rounds')} rounds, {t.get('method')}; host "
                     f"{t.get('host-median-ms')} ms, route {t.get('route-median-ms')} ms")
    else:
        lines.append("no timing evidence (no speed claim)")
    par = ev["parity"]
    tol = par.get("tolerance", {})
    worst = ", ".join(f"{k}={v}" for k, v in sorted(par.get("worst-case", {}).items()))
    lines.append(f"parity max-abs {_sci(par['max-abs'])}, max-rel {_sci(par['max-rel'])} (tolerance abs "
                 f"{tol.get('abs')}, rel {tol.get('rel')}); worst case {worst or '—'}")
    calls = ", ".join(f"{k} {v}" for k, v in sorted(ev.get("target-calls", {}).items()))
    lines.append(f"target calls {calls}; fallbacks {ev.get('fallbacks')}")
    for seam, it in sorted(c["impls"].items()):
        lines.append(f"impl {seam} = {it['impl']}: {it['package']} @ {short_digest(it['revision'])} [{it['variant']}]")
    lines.append(f"assembly {c['assembly']}, layout {c['layout']}, route-digest {short_digest(c['route-digest'])}")
    if c["hardware"].get("device-name"):
        lines.append(f"device {c['hardware']['device-name']}")
    if c.get("calibration"):
        lines.append(f"calibration {c['calibration'].get('method')} ({c['calibration'].get('provenance')})")
    if cell.others:
        lines.append(f"{cell.others} lower-ranked receipt(s) of this route in this cell")
    lines.append(f"verdict {rec.data.get('verdict')}")
    return lines


def _rejected(lock: Lockfile) -> list[dict]:
    return sorted(lock.rejected, key=lambda x: (x.get("file", ""), x.get("digest", "")))


def _route_line(lock: Lockfile, rname: str) -> str:
    m = lock.manifest
    rt = m.routes[rname]
    seams = ", ".join(f"{s} = {i} ({m.impl(s, i).package})" for s, i in sorted(rt.seams.items()))
    g = route_gate(rt)
    gate = f"; gate min-speedup {_num(g.min_speedup)}" + (" (default)" if g.is_default else "")
    return f"{rname}: {rt.assembly}, {rt.precision}; {seams}{gate}; route-digest {short_digest(rt.digest)}"


def _counts(t: Table) -> str:
    n = len(t.lock.receipts)
    rj = len(t.lock.rejected)
    return (f"{len(t.rows)} cell row(s) × {len(t.routes)} route(s) · {n} receipt(s)"
            + (f", {rj} rejected at lock time" if rj else ""))


# ---------------------------------------------------------------------------
# Markdown


def _md_escape(s: str) -> str:
    s = str(s).replace("\\", "\\\\").replace("|", "\\|").replace("\r", " ").replace("\n", " ")
    for ch in "*_`[]<>":
        s = s.replace(ch, "\\" + ch)
    return s


def _md_cell(cell: Cell) -> str:
    if cell.state == "na":
        return "n/a"
    if cell.receipt is None:
        return "unknown"
    label = {"certified_fast": "**certified_fast**", "supported_correct": "*supported\\_correct*"}[cell.state]
    star = "★ " if cell.winner else ""
    return f"{star}{label} {_md_escape(_figures(cell))}"


def _markdown(tables: list[Table]) -> str:
    out = ["# frt route matrix", ""]
    labels = {"certified_fast": "**certified_fast**", "supported_correct": "*supported\\_correct*",
              "unknown": "unknown", "na": "n/a"}
    out.append("States: " + " · ".join(f"{labels[s]}: {_md_escape(LEGEND[s])}" for s in STATE_CLASSES) + ".")
    out.append(f"{_md_escape(WINNER_NOTE)}. Figures: median speedup (min–max) · worst parity error (max-abs).")
    for t in tables:
        lk, m = t.lock, t.lock.manifest
        out += ["", f"## {_md_escape(lk.model)}", ""]
        out.append(f"`{t.label}` · binding `{m.binding}` · family `{m.family}` · lock-digest `{short_digest(lk.lock_digest)}` · "
                   + _md_escape(_counts(t)))
        out.append("")
        head = ["phase", "rows", "precision", "hardware", "device class", "software"] + t.routes
        out.append("| " + " | ".join(_md_escape(h) for h in head) + " |")
        out.append("|" + "---|" * len(head))
        for r in t.rows:
            vals = [_md_escape(r.phase), r.band_text, _md_escape(r.precision), _md_escape(r.hardware_text),
                    _md_escape(r.device_class or "—"), _md_escape(r.software_text)]
            vals += [_md_cell(c) for c in r.cells]
            out.append("| " + " | ".join(vals) + " |")
        out += ["", "Routes:", ""]
        out += [f"- {_md_escape(_route_line(lk, rn))}" for rn in t.routes]
        if lk.rejected:
            out += ["", "Rejected receipts (the cell stays unknown):", ""]
            for rj in _rejected(lk):
                out.append(f"- `{rj.get('file')}`: {_md_escape(rj.get('reason', ''))}")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------
# text (a terminal)


def _text_cell(cell: Cell) -> str:
    if cell.state == "na":
        return "n/a"
    if cell.receipt is None:
        return "unknown"
    return f"{'★ ' if cell.winner else ''}{cell.state} {_figures(cell)}"


def _text(tables: list[Table]) -> str:
    """The matrix for a person at a terminal: columns aligned with spaces, no markup."""
    out = ["frt route matrix"]
    for t in tables:
        lk, m = t.lock, t.lock.manifest
        out += ["", f"{lk.model}  ({t.label}, binding {m.binding}, family {m.family}, "
                    f"lock-digest {short_digest(lk.lock_digest)}; {_counts(t)})", ""]
        grid = [["phase", "rows", "precision", "hardware", "device class", "software"] + t.routes]
        for r in t.rows:
            grid.append([r.phase, r.band_text, r.precision, r.hardware_text, r.device_class or "—", r.software_text]
                        + [_text_cell(c) for c in r.cells])
        grid = [[" ".join(str(v).split()) for v in line] for line in grid]  # one line per row, whatever a name holds
        widths = [max(len(line[i]) for line in grid) for i in range(len(grid[0]))]
        for n, line in enumerate(grid):
            out.append("  ".join(v.ljust(w) for v, w in zip(line, widths, strict=False)).rstrip())
            if n == 0:
                out.append("  ".join("-" * w for w in widths))
        out += ["", "routes:"] + [f"  {_route_line(lk, rn)}" for rn in t.routes]
        if lk.rejected:
            out += ["", "rejected receipts (the cell stays unknown):"]
            out += [f"  {rj.get('file')}: {rj.get('reason', '')}" for rj in _rejected(lk)]
    out += ["", "states:"] + [f"  {s if s != 'na' else 'n/a'}: {LEGEND[s]}" for s in STATE_CLASSES]
    out.append(f"{WINNER_NOTE}. Figures: median speedup (min–max) · worst parity error (max-abs).")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------
# HTML

_CSS = """
:root { color-scheme: light; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1f2328; margin: 24px; background: #fff; }
h1 { font-size: 22px; margin: 0 0 8px; }
h2 { font-size: 18px; margin: 28px 0 4px; }
h3 { font-size: 14px; margin: 16px 0 4px; }
.meta { color: #59636e; margin: 0 0 10px; }
code { font: 12px ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
.legend { display: flex; flex-wrap: wrap; gap: 8px 18px; align-items: center; margin: 8px 0 4px; padding: 8px 10px; border: 1px solid #d1d9e0; border-radius: 6px; background: #f6f8fa; }
.legend .item { display: inline-flex; align-items: center; gap: 6px; }
.swatch { display: inline-block; min-width: 9.5em; padding: 2px 6px; border-radius: 4px; border: 1px solid; font-weight: 600; text-align: center; }
.note { color: #59636e; margin: 4px 0 0; }
table.matrix { border-collapse: separate; border-spacing: 0; margin-top: 6px; }
table.matrix th, table.matrix td { border-right: 1px solid #d1d9e0; border-bottom: 1px solid #d1d9e0; padding: 6px 8px; vertical-align: top; text-align: left; }
table.matrix tr > :first-child { border-left: 1px solid #d1d9e0; }
table.matrix thead th { background: #eef1f4; border-top: 1px solid #d1d9e0; position: sticky; top: 0; white-space: nowrap; }
table.matrix thead th.route { text-align: center; min-width: 12em; }
table.matrix tbody th { background: #f6f8fa; font-weight: normal; white-space: nowrap; }
td.cell { min-width: 12em; }
td.cell .state { display: block; font-weight: 600; }
td.cell .fig { display: block; font-size: 12px; font-variant-numeric: tabular-nums; }
.certified_fast { background: #d1f4dc; color: #0b5d25; border-color: #4ac26b; }
.supported_correct { background: #fff1c2; color: #6f4e00; border-color: #d4a72c; }
.unknown { background: #f3f4f6; color: #6e7781; border-color: #c8ced6; }
.na { background: repeating-linear-gradient(135deg, #fafbfc 0 6px, #eef0f3 6px 12px); color: #8c959f; border-color: #d1d9e0; }
td.cell.unknown .state, td.cell.na .state { font-weight: normal; }
td.winner { box-shadow: inset 0 0 0 2px #1a7f37; }
td.supported_correct.winner { box-shadow: inset 0 0 0 2px #9a6700; }
.star { color: #1a7f37; }
td.supported_correct .star { color: #9a6700; }
ul.routes, ul.rejected { margin: 4px 0; padding-left: 20px; }
ul.rejected li { color: #82071e; }
""".strip()


def _e(s) -> str:
    return html.escape(str(s), quote=True)


def _title(lines: list[str]) -> str:
    return _e("\n".join(lines)).replace("\n", "&#10;")


def _html_cell(lock: Lockfile, row: Row, cell: Cell) -> str:
    classes = ["cell", cell.state] + (["winner"] if cell.winner else [])
    label = "n/a" if cell.state == "na" else cell.state
    star = '<span class="star" aria-label="winner">★</span> ' if cell.winner else ""
    fig = f'<span class="fig">{_e(_figures(cell))}</span>' if cell.receipt is not None else ""
    return (f'<td class="{" ".join(classes)}" data-route="{_e(cell.route)}" title="{_title(_detail(lock, row, cell))}">'
            f'<span class="state">{star}{_e(label)}</span>{fig}</td>')


def _html(tables: list[Table]) -> str:
    out = ['<!DOCTYPE html>', '<html lang="en">', "<head>", '<meta charset="utf-8">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           "<title>frt route matrix</title>", f"<style>\n{_CSS}\n</style>", "</head>", "<body>",
           "<h1>frt route matrix</h1>", '<div class="legend" role="list" aria-label="legend">']
    for s in STATE_CLASSES:
        out.append(f'<span class="item" role="listitem"><span class="swatch {s}">{_e("n/a" if s == "na" else s)}'
                   f"</span> {_e(LEGEND[s])}</span>")
    out.append("</div>")
    out.append(f'<p class="note">{_e(WINNER_NOTE)}. In each cell: median speedup (min–max) · worst parity error '
               "(max-abs); hover a cell for the full receipt detail.</p>")
    for t in tables:
        lk, m = t.lock, t.lock.manifest
        out.append(f'<section class="model" id="model-{_e(lk.model)}">')
        out.append(f"<h2>{_e(lk.model)}</h2>")
        out.append(f'<p class="meta"><code>{_e(t.label)}</code> · binding <code>{_e(m.binding)}</code> · family '
                   f"<code>{_e(m.family)}</code> · lock-digest <code title=\"{_e(lk.lock_digest)}\">"
                   f"{_e(short_digest(lk.lock_digest))}</code> · {_e(_counts(t))}</p>")
        out.append('<table class="matrix">')
        out.append("<thead><tr>" + "".join(f'<th scope="col">{_e(h)}</th>' for h in
                                             ("phase", "rows", "precision", "hardware", "device class", "software")))
        for rn in t.routes:
            rt = m.routes[rn]
            out.append(f'<th scope="col" class="route" title="{_title([_route_line(lk, rn)])}">'
                       f'<span class="rname">{_e(rn)}</span><br><small>{_e(rt.assembly)} · {_e(rt.precision)}</small></th>')
        out.append("</tr></thead>")
        out.append("<tbody>")
        for r in t.rows:
            dev = f' title="{_e(r.device_name)}"' if r.device_name else ""
            cells = [f'<th scope="row">{_e(r.phase)}</th>', f"<th>{_e(r.band_text)}</th>",
                     f"<th>{_e(r.precision)}</th>", f"<th>{_e(r.hardware_text)}</th>",
                     f"<th{dev}>{_e(r.device_class or '—')}</th>", f"<th>{_e(r.software_text)}</th>"]
            cells += [_html_cell(lk, r, c) for c in r.cells]
            out.append("<tr>" + "".join(cells) + "</tr>")
        out.append("</tbody></table>")
        out.append("<h3>Routes</h3>")
        out.append('<ul class="routes">' + "".join(f"<li>{_e(_route_line(lk, rn))}</li>" for rn in t.routes) + "</ul>")
        if lk.rejected:
            out.append("<h3>Rejected receipts (the cell stays unknown)</h3>")
            out.append('<ul class="rejected">' + "".join(
                f"<li><code>{_e(rj.get('file'))}</code>: {_e(rj.get('reason', ''))}</li>"
                for rj in _rejected(lk)) + "</ul>")
        out.append("</section>")
    out += ["</body>", "</html>"]
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------
# JSON (keys documented in docs/matrix.md)


def _json_cell(cell: Cell) -> dict:
    rec = cell.receipt
    timing = rec.timing if rec is not None else None
    return {"state": cell.state, "receipt": rec.digest if rec is not None else None, "winner": cell.winner,
            "rank": cell.rank or None, "speedup-median": timing["speedup-median"] if timing else None,
            "max-abs": rec.worst_error if rec is not None else None}


def _json_row(r: Row) -> dict:
    # receipts record no CPU or OS; on the cpu backend the arch is the CPU (as ``Hardware`` has it)
    return {"phase": r.phase, "rows": list(r.rows) if r.rows else None, "precision": r.precision,
            "backend": r.backend or None, "arch": r.arch or None, "device-class": r.device_class or None,
            "device-name": r.device_name or None, "cpu": r.arch if r.backend == "cpu" else None, "os": None,
            "software": dict(r.software), "routes": {c.route: _json_cell(c) for c in r.cells}}


def _json(tables: list[Table]) -> dict:
    out = []
    for t in tables:
        lk, m = t.lock, t.lock.manifest
        out.append({"model": lk.model, "path": t.label, "lock-digest": lk.lock_digest, "binding": m.binding,
                    "family": m.family,
                    "routes": [{"name": rn, "assembly": m.routes[rn].assembly, "precision": m.routes[rn].precision,
                                "min-speedup": m.routes[rn].min_speedup, "route-digest": m.routes[rn].digest}
                               for rn in t.routes],
                    "rows": [_json_row(r) for r in t.rows],
                    "rejected-receipts": _rejected(lk)})
    return {"lockfiles": out}


# ---------------------------------------------------------------------------


def render_matrix(project, *, model: str | None = None, fmt: str = "md") -> str:
    """The state matrix of one model's lockfile (or of every ``lockfiles/*.lock``) as plain text (a
    terminal's aligned table), Markdown, HTML or JSON (the same document ``--json`` prints everywhere: sorted keys, two-space indent)."""
    if fmt not in ("md", "html", "json", "text"):
        raise UsageError(f"matrix format must be text, md, html or json, got {fmt!r}")
    tables = _load(project, model)
    if fmt == "json":
        return json.dumps(_json(tables), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    return {"md": _markdown, "html": _html, "text": _text}[fmt](tables)
