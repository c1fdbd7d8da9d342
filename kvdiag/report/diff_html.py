"""The HTML renderer of :class:`kvdiag.report.diff_model.DiffResult` (``kvdiag diff --format html``).

One self-contained page in the shell every kvdiag page shares (:mod:`kvdiag.report.htmlpage`: no script, CSP
``default-src 'none'``, every text redacted then escaped): the headline and the verdicts side by side, the warnings,
what AFTER lost, the lines that explain the change, then the start-up budget, the configuration and the run, each a
table most moved first — the text renderer's order. When both sides have start-up memory lines, one matplotlib chart
(inline SVG) draws the budget's byte terms of BEFORE and AFTER as grouped horizontal bars. It reads the finished
result and nothing else; each value cell carries its number in ``data-value`` (the JSON's value) for a reader or a
test.
"""

from __future__ import annotations

import json

from .diff_model import DiffResult, DiffRow
from .diff_render import _TITLES, _change, _label, _v, explanation_lines, short_source
from .html import LINE, SECOND
from .htmlpage import _RC, _e, _m, _svg, page

GIB = 2**30


def _value_cell(value, unit: str) -> str:
    raw = "" if value is None else json.dumps(value)
    return f"<td class=\"num\" data-value=\"{_e(raw)}\">{_e(_v(value, unit))}</td>"


def budget_terms(result: DiffResult) -> list[DiffRow]:
    """The start-up budget's byte lines both sides print (the chart's bars), in the table's order."""
    return [r for r in result.section("budget") if r.unit == "bytes" and isinstance(r.before, (int, float))
            and isinstance(r.after, (int, float)) and not isinstance(r.before, bool)
            and not isinstance(r.after, bool)]


def budget_figure(result: DiffResult) -> str | None:
    """BEFORE vs AFTER of every budget byte line both sides have, in GiB, as grouped horizontal bars (each bar
    labelled with its value as the log prints it, two decimals); ``None`` when a side has no start-up lines."""
    terms = budget_terms(result)
    if not terms:
        return None
    from matplotlib.figure import Figure

    f = Figure(figsize=(9.0, 0.55 * len(terms) + 1.3), dpi=72, layout="constrained")
    ax = f.add_subplot()
    ax.set_title("Start-up memory budget: BEFORE vs AFTER")
    h = 0.38
    ys = range(len(terms))
    vals = [v / GIB for r in terms for v in (r.before, r.after)]
    for off, side, colour in ((-h / 2, "before", LINE), (h / 2, "after", SECOND)):
        xs = [getattr(r, side) / GIB for r in terms]
        ax.barh([y + off for y in ys], xs, height=h, color=colour, label=side.upper())
        for y, x in zip(ys, xs):
            ax.annotate(f"{x:.2f}", (max(x, 0.0), y + off), xytext=(3, 0), textcoords="offset points", va="center",
                        ha="left", fontsize=7.5, color="#333")
    ax.set_yticks(list(ys), [_m(r.label) for r in terms])
    ax.invert_yaxis()
    ax.set_xlabel("GiB")
    ax.grid(axis="y", visible=False)
    ax.axvline(0, color="#333", lw=0.8)
    ax.set_xlim(min(0.0, min(vals)) * 1.1, max(max(vals), 0.0) * 1.12 or 1)
    ax.legend(loc="lower right", bbox_to_anchor=(1.0, 1.0), ncol=2, borderaxespad=0.2)
    return _svg(f)


def _verdicts(result: DiffResult) -> str:
    rows = []
    for tag, s in (("BEFORE", result.before), ("AFTER", result.after)):
        label = _label(s)
        cls = "unknown" if label == "UNKNOWN" else _e(s.severity)
        rows.append(f"<tr data-side=\"{tag.lower()}\" data-primary=\"{_e(s.primary)}\"><td>{tag}</td>"
                    f"<td><code>{_e(s.name)}</code> ({_e(s.kind)})</td><td>{_e(s.model or '?')}</td>"
                    f"<td>{_e(s.version or '?')}</td><td><span class=\"badge {cls}\">{_e(label)}</span> "
                    f"{_e(s.primary)}</td><td>{_e(s.summary)}</td></tr>")
    return ("<h2>Verdicts</h2><table class=\"verdicts\"><thead><tr><th>side</th><th>input</th><th>model</th>"
            "<th>vLLM</th><th>verdict</th><th>summary</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>")


def _section(result: DiffResult, name: str) -> list[str]:
    rows = result.section(name)
    if not rows:
        return []
    moved = [r for r in rows if r.changed]
    same = [r for r in rows if not r.changed]
    title = f"{_TITLES[name]} (most moved first)" if moved else f"{_TITLES[name]}: no line moved"
    body = []
    for r in moved + same:
        src = "; ".join(s for s in (f"BEFORE {short_source(r.before_source)}" if r.before_source else "",
                                    f"AFTER {short_source(r.after_source)}" if r.after_source else "") if s)
        note = f"<br><em>{_e(r.note)}</em>" if r.note else ""
        body.append(f"<tr class=\"{'changed' if r.changed else 'unchanged'}\" data-key=\"{_e(r.key)}\">"
                    f"<td>{_e(r.label)}</td>{_value_cell(r.before, r.unit)}{_value_cell(r.after, r.unit)}"
                    f"<td class=\"num\">{_e(_change(r))}</td><td class=\"src\">{_e(src)}{note}</td></tr>")
    return [f"<h2 id=\"section-{name}\">{_e(title)}</h2>", f"<table class=\"diff\" data-section=\"{name}\"><thead><tr>"
            "<th>line</th><th>BEFORE</th><th>AFTER</th><th>change</th><th>source</th></tr></thead><tbody>"
            + "".join(body) + "</tbody></table>"]


def render_diff_html(result: DiffResult) -> str:
    """The side-by-side as one HTML document (UTF-8, no script, no external resource)."""
    import matplotlib

    b, a = result.before, result.after
    out = [f"<h1>kvdiag diff: BEFORE <code>{_e(b.name)}</code> → AFTER <code>{_e(a.name)}</code></h1>",
           f"<p class=\"meta\">model: {_e(b.model or '?')} → {_e(a.model or '?')}; vLLM {_e(b.version or '?')} → "
           f"{_e(a.version or '?')}</p>", _verdicts(result)]
    if result.warnings:
        out.append("<ul class=\"warnings\">" + "".join(f"<li>warning: {_e(w)}</li>" for w in result.warnings)
                   + "</ul>")
    if result.identical:
        out.append("<p class=\"summary identical\">No difference: both inputs give the same start-up budget, "
                   "configuration, run and verdict.</p>")
        return page("kvdiag diff: no difference", out)
    if result.regressions:
        out.append("<h2>AFTER regressed</h2><ul class=\"regressions\">" +
                   "".join(f"<li>{_e(r)}</li>" for r in result.regressions) + "</ul>")
    if result.explanations:
        out.append("<h2>What explains the difference</h2>")
        for e in result.explanations:
            lines = explanation_lines(e)
            rest = "".join(f"<li>{_e(ln.strip())}</li>" for ln in lines[1:])
            out.append(f"<div class=\"explanation\" data-key=\"{_e(e.key)}\"><p><b>{_e(lines[0])}</b></p>"
                       + (f"<ul>{rest}</ul>" if rest else "") + "</div>")
    for name in ("budget", "config", "run"):
        part = _section(result, name)
        if name == "budget" and part:
            with matplotlib.rc_context(_RC):
                svg = budget_figure(result)
            if svg:
                keys = " ".join(r.key for r in budget_terms(result))
                part.insert(1, f"<figure id=\"chart-budget\" class=\"chart\" data-series=\"{_e(keys)}\">{svg}"
                               "<figcaption>Each pair of bars is one start-up memory line of the two logs, in GiB "
                               "(BEFORE above, AFTER below; the table gives each line's source).</figcaption>"
                               "</figure>")
        out += part
    return page(f"kvdiag diff: {b.primary} → {a.primary}", out)
