"""The HTML renderer: :class:`~kvdiag.report.model.Report` → one self-contained page for a post-mortem.

No script, no external style, font or image: the charts are matplotlib figures written as inline SVG with their text
as SVG text (``svg.fonttype`` ``none``: labels are in the DOM, searchable and copyable), the style sheet is inline
(with an ``@media print`` part for paper). So the page opens offline and asks no host for anything.

Every text of the report passes :func:`kvdiag.redaction.redact`, then :func:`html.escape` (a log line holding
``<script>`` shows as text); texts that go into a chart are redacted too and their ``$`` escaped (matplotlib would
read ``$…$`` as mathtext). It reads the finished report (``report.charts``, :mod:`kvdiag.timeline`) and nothing else.
"""

from __future__ import annotations

import math
from datetime import timezone

from .common import _fmt_value, changes, evidence_items, headline_label, nothing_judged, sources, split_notes
from .htmlpage import _RC, CSS, _e, _m, _svg, page  # noqa: F401 (CSS: the page's style sheet, named here too)
from .model import Charts, Report, not_judged, ruled_out

SEVERITY_COLOURS = {"critical": "#c62828", "warning": "#e08a00", "ok": "#2e7d32", "unknown": "#7b1fa2"}
LINE = "#1f5fa8"
SECOND = "#d1495b"
THIRD = "#6a994e"
LEGEND = {"loc": "lower right", "bbox_to_anchor": (1.0, 1.0), "ncol": 4, "borderaxespad": 0.2}
"""Legends above the plot on the right, on the title's line: never over the data."""


def format_bytes(n: float | None, gib: bool = False) -> str:
    """Bytes as the log line they came from prints them: PyTorch's OOM text two decimals in GiB from 1 GiB up, else
    MiB (``786.00 MiB``); vLLM's memory lines always GiB with two decimals (``gib``: ``0.03 GiB``)."""
    if n is None or not math.isfinite(n):
        return "n/a"
    sign = "-" if n < 0 else ""
    a = abs(n)
    if a >= 2**30 or gib:
        return f"{sign}{a / 2**30:.2f} GiB"
    if a >= 2**20:
        return f"{sign}{a / 2**20:.2f} MiB"
    return f"{sign}{a / 2**10:.2f} KiB"


# ------------------------------------------------------------------------------------------------
# Charts (matplotlib → inline SVG)
def _dates(ts):
    import numpy as np

    return (np.asarray(ts, dtype=float) * 1000).astype("datetime64[ms]")


def _time_axis(ax, lo: float, hi: float, show: bool = True) -> None:
    import matplotlib.dates as mdates

    pad = max(1.0, (hi - lo) * 0.02)
    ax.set_xlim(_dates([lo - pad])[0], _dates([hi + pad])[0])
    loc = mdates.AutoDateLocator(minticks=4, maxticks=9)
    ax.xaxis.set_major_locator(loc)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(loc, tz=timezone.utc, show_offset=False))
    if not show:
        ax.tick_params(labelbottom=False)


def _marks(ax, charts: Charts, label: bool) -> None:
    """Rule, restart and cut-short markers as vertical lines (labelled on the first chart)."""
    lo, hi = ax.get_xlim()
    gap = (hi - lo) * 0.025  # labels closer than this to the last one are left out (the line stays)
    last = -math.inf
    for m in charts.markers:
        x = _dates([m.t])[0]
        near = abs(_num(x) - last) < gap
        if label and not near:
            last = _num(x)
        if m.kind == "rule":
            colour = SEVERITY_COLOURS.get(m.severity, "#555")
            ax.axvline(x, color=colour, lw=1.0, ls="-", alpha=0.75, zorder=1)
            if label and not near:
                ax.annotate(_m(m.label), (x, 1.0), xycoords=("data", "axes fraction"), xytext=(2, -2),
                            textcoords="offset points", va="top", ha="left", fontsize=7.5, color=colour,
                            rotation=90)
        else:
            ax.axvline(x, color="#444", lw=1.0, ls=(0, (4, 3)), zorder=1)
            if label and not near:
                ax.annotate(_m(m.label), (x, 0.0), xycoords=("data", "axes fraction"), xytext=(2, 2),
                            textcoords="offset points", va="bottom", ha="left", fontsize=7.5, color="#444",
                            rotation=90)


def _num(x) -> float:
    import matplotlib.dates as mdates

    return float(mdates.date2num(x))


def _gapped(t: list[float], v: list[float]):
    """Times and values with a NaN where samples are far apart (more than 3 × the median interval and 30 s): a line
    does not bridge a gap in the input (lines missing from a log excerpt, a scrape outage) as if it were data."""
    import numpy as np

    t, v = np.asarray(t, dtype=float), np.asarray(v, dtype=float)
    if len(t) < 3:
        return t, v
    dt = np.diff(t)
    med = float(np.median(dt))
    cut = np.flatnonzero(dt > max(30.0, 3 * med))
    if not len(cut):
        return t, v
    # the break one usual interval after the last sample before the gap (a step line holds its value that long)
    return np.insert(t, cut + 1, t[cut] + med), np.insert(v, cut + 1, np.nan)


def _plot(ax, s, colour: str, label: str | None = None, step: bool = False, **kw):
    style = {"marker": "o", "ms": 3.5} if len(s.t) < 40 else {}
    t, v = _gapped(s.t, s.v)
    if step and len(s.t) > 1:
        ax.step(_dates(t), v, where="post", color=colour, lw=1.4, label=label or _m(s.label), **style, **kw)
    else:
        ax.plot(_dates(t), v, color=colour, lw=1.4, label=label or _m(s.label), **style, **kw)


def _span(charts: Charts) -> tuple[float, float] | None:
    ts = [t for s in charts.series.values() for t in (s.t[0], s.t[-1]) if s.t]
    ts += [m.t for m in charts.markers]
    if charts.forecast:
        ts += [charts.forecast["t0"], charts.forecast["t1"]]
    return (min(ts), max(ts)) if ts else None


def timeline_figures(charts: Charts, window: dict) -> list[tuple[str, list[str], str, str]]:
    """``(chart id, series keys drawn, caption, svg)`` per timeline chart, in reading order; only charts with a
    series in the input."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import PercentFormatter

    ser = charts.series
    span = _span(charts)
    if span is None:
        return []
    lo, hi = span
    out = []
    first = [True]

    def fig(title: str):
        # fixed margins, not a constrained layout: every timeline chart has its plot at the same x, so the charts
        # read as one timeline (room on the right for a second axis)
        f = Figure(figsize=(9.0, 2.2), dpi=72)
        f.subplots_adjust(left=0.085, right=0.915, top=0.84, bottom=0.14)
        ax = f.add_subplot()
        ax.set_title(_m(title))
        return f, ax

    def finish(f, ax, cid, keys, caption):
        _time_axis(ax, lo, hi)
        _marks(ax, charts, first[0])
        first[0] = False
        if ax.get_legend() is None and ax.get_legend_handles_labels()[0]:
            ax.legend(**LEGEND)
        out.append((cid, keys, caption, _svg(f)))

    if "kv_cache_usage" in ser:
        f, ax = fig("KV cache usage of the pool")
        s = ser["kv_cache_usage"]
        _plot(ax, s, LINE)
        ax.axhline(1.0, color="#333", lw=1.0, ls="--", label="pool full (100 %)")
        ax.set_ylim(0, 1.08)
        ax.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
        fc = charts.forecast
        keys = ["kv_cache_usage"]
        if fc:
            ax.plot(_dates([fc["t0"], fc["t1"]]), [fc["v0"], fc["v1"]], color=SEVERITY_COLOURS["warning"], lw=1.6,
                    ls=(0, (5, 3)), label=_m(f"CAP002 forecast: full in ~{fc['eta_seconds'] / 60:.1f} min"))
            keys.append("forecast")
        finish(f, ax, "chart-kv_cache_usage", keys, f"source: {s.source}")
    if "num_requests_running" in ser or "num_requests_waiting" in ser:
        f, ax = fig("Requests running and waiting")
        keys = []
        for key, colour in (("num_requests_running", LINE), ("num_requests_waiting", SECOND)):
            if key in ser:
                _plot(ax, ser[key], colour, step=True)
                keys.append(key)
        ax.set_ylim(bottom=0)
        ax.set_ylabel("requests")
        finish(f, ax, "chart-requests", keys, "source: " + "; ".join(ser[k].source for k in keys))
    if "preemptions_per_second" in ser:
        f, ax = fig("Preemption rate")
        _plot(ax, ser["preemptions_per_second"], SECOND, step=True)
        ax.set_ylim(bottom=0)
        ax.set_ylabel("preemptions/s")
        finish(f, ax, "chart-preemptions_per_second", ["preemptions_per_second"],
               f"source: {ser['preemptions_per_second'].source}")
    pfx = [k for k in ("prefix_cache_hit_rate", "prefix_cache_hits_per_second", "prefix_cache_queries_per_second")
           if k in ser]
    if pfx:
        f, ax = fig("Prefix cache: hit rate, hits/s and queries/s")
        if "prefix_cache_hit_rate" in ser:
            _plot(ax, ser["prefix_cache_hit_rate"], LINE)
            ax.set_ylim(0, 1.05)
            ax.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
        rates = [k for k in pfx if k != "prefix_cache_hit_rate"]
        if rates:
            ax2 = ax.twinx() if "prefix_cache_hit_rate" in ser else ax
            for k, colour in zip(rates, (THIRD, SECOND)):
                _plot(ax2, ser[k], colour, ls="-" if k.endswith("hits_per_second") else "--")
            ax2.set_ylabel("tokens/s")
            ax2.set_ylim(bottom=0)
            ax2.grid(False)
            if ax2 is not ax:
                ax2.spines["right"].set_visible(True)
                h1, l1 = ax.get_legend_handles_labels()
                h2, l2 = ax2.get_legend_handles_labels()
                ax.legend(h1 + h2, l1 + l2, **LEGEND)
        finish(f, ax, "chart-prefix", pfx, "source: " + "; ".join(ser[k].source for k in pfx))
    if "kv_demand_tokens" in ser:
        f, ax = fig("Estimated KV demand vs the pool")
        _plot(ax, ser["kv_demand_tokens"], SECOND)
        if charts.pool_tokens:
            ax.axhline(charts.pool_tokens, color="#333", lw=1.0, ls="--",
                       label=_m(f"pool {charts.pool_tokens:,.0f} tokens"))
        ax.set_ylim(bottom=0)
        ax.set_ylabel("tokens")
        ax.yaxis.set_major_formatter(lambda v, _: f"{v:,.0f}")
        finish(f, ax, "chart-kv_demand_tokens", ["kv_demand_tokens"], f"source: {ser['kv_demand_tokens'].source}")
    return out


def startup_figure(charts: Charts) -> str | None:
    """The start-up memory budget as horizontal bars, top to bottom in the order vLLM spends it, then the OOM:
    what was allocated, what was free and the allocation that failed, against the GPU's total."""
    from matplotlib.figure import Figure

    steps, oom = charts.startup, charts.oom
    if not steps and not oom:
        return None
    rows: list[tuple[str, float, float, str, str]] = []  # label, left, width, colour, hatch
    cursor = 0.0
    vals = {s.key: s.bytes for s in steps}
    for s in steps:
        label = f"{s.label}: {format_bytes(s.bytes, gib=True)}"
        if s.key == "kv_cache" and s.bytes < 0:
            label += " (over the budget)"
        if s.key in ("gpu_total", "budget"):
            rows.append((label, 0.0, s.bytes, "#9e9e9e" if s.key == "gpu_total" else "#90caf9", ""))
        elif s.key == "left_over":
            rows.append((label, cursor, s.bytes, "#c8e6c9" if s.bytes >= 0 else SEVERITY_COLOURS["critical"], ""))
        else:
            colour = {"weights": "#5c6bc0", "activation_peak": "#ffb74d", "non_torch": "#bdbdbd",
                      "cudagraph": "#ba68c8", "kv_cache": "#26a69a"}.get(s.key, "#888")
            if s.bytes < 0:
                colour = SEVERITY_COLOURS["critical"]
            rows.append((label, cursor, s.bytes, colour, "//" if s.bytes < 0 else ""))
            cursor += s.bytes
    total = vals.get("gpu_total")
    if oom:
        total = oom.get("total") or total
        phase = f" ({oom['phase']})" if oom.get("phase") else ""
        if oom.get("allocated") is not None:
            rows.append((f"OOM{phase}: allocated by PyTorch {format_bytes(oom['allocated'])}", 0.0, oom["allocated"],
                         "#7986cb", ""))
        if oom.get("in_use") is not None:
            rows.append((f"OOM: this process has {format_bytes(oom['in_use'])} in use", 0.0, oom["in_use"],
                         "#5c6bc0", ""))
        if oom.get("other_processes"):
            start = oom.get("in_use") or 0.0
            rows.append((f"OOM: other processes {format_bytes(oom['other_processes'])}", start,
                         oom["other_processes"], "#8d6e63", ""))
        free_at = None
        if oom.get("free") is not None and total:
            free_at = total - oom["free"]
            rows.append((f"OOM: free {format_bytes(oom['free'])}", free_at, oom["free"], "#a5d6a7", ""))
        start = free_at if free_at is not None else (oom.get("in_use") or oom.get("allocated") or 0.0)
        rows.append((f"OOM: tried to allocate {format_bytes(oom['tried'])}", start, oom["tried"],
                     SEVERITY_COLOURS["critical"], "xx"))
    f = Figure(figsize=(9.0, 0.42 * len(rows) + 1.1), dpi=72, layout="constrained")
    ax = f.add_subplot()
    ax.set_title("From the log's memory lines")
    g = 2**30
    for i, (label, left, width, colour, hatch) in enumerate(rows):
        ax.barh(i, width / g, left=left / g, color=colour, hatch=hatch, edgecolor="#333" if hatch else colour,
                height=0.62)
    ax.set_yticks(range(len(rows)), [_m(r[0]) for r in rows])
    ax.invert_yaxis()
    ax.set_xlabel("GiB")
    ax.grid(axis="y", visible=False)
    ends = [(r[1] + max(r[2], 0)) / g for r in rows] + [r[1] / g for r in rows]
    if total:
        ax.axvline(total / g, color="#222", lw=1.2, ls="--")
    if "budget" in vals:
        ax.axvline(vals["budget"] / g, color="#1565c0", lw=1.0, ls=":")
    if oom and rows:
        i = len(rows) - 1
        x = (rows[i][1] + rows[i][2]) / g
        ax.plot([x], [i], marker="X", ms=9, color="#000", zorder=5)
        ax.annotate("OOM", (x, i), xytext=(6, 0), textcoords="offset points", va="center", fontsize=8.5,
                    fontweight="bold", color=SEVERITY_COLOURS["critical"])
    ax.set_xlim(min(0.0, min(ends)) * 1.05, max(ends + [(total or 0) / g]) * 1.08 or 1)
    return _svg(f)


def usage_multiple(name: str, verdict, charts: Charts | None, span: tuple[float, float] | None) -> str:
    """One small chart of a server's KV usage for the fleet's small multiples (the same time axis for all)."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import PercentFormatter

    f = Figure(figsize=(4.4, 1.7), dpi=72, layout="constrained")
    ax = f.add_subplot()
    colour = SEVERITY_COLOURS["unknown" if verdict.primary == "inconclusive" else verdict.severity]
    ax.set_title(_m(f"{name} — {verdict.primary}"), fontsize=8.5, color=colour)
    s = charts.series.get("kv_cache_usage") if charts else None
    if s is not None:
        _plot(ax, s, colour, label="KV usage")
    else:
        ax.text(0.5, 0.5, "no KV usage series", transform=ax.transAxes, ha="center", va="center", color="#777")
    ax.axhline(1.0, color="#333", lw=0.8, ls="--")
    for m in charts.markers if charts else []:
        if m.kind != "rule":  # restarts and a cut-short window; the rules are in the ranking table
            ax.axvline(_dates([m.t])[0], color="#444", lw=0.9, ls=(0, (4, 3)))
    ax.set_ylim(0, 1.08)
    ax.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
    if span:
        _time_axis(ax, *span)
    return _svg(f)


# ------------------------------------------------------------------------------------------------
# The page
def _evidence_table(f, index: dict[str, int]) -> str:
    rows = []
    for e in evidence_items(f):
        agg = "" if e.agg == "last" else f" ({e.agg})"
        n = index[e.source]
        rows.append(f"<tr><td><code>{_e(e.signal)}</code>{_e(agg)}</td><td class=\"num\">"
                    f"{_e(_fmt_value(e.value, e.unit))}</td><td class=\"src\"><a href=\"#source-{n}\">[{n}]</a></td></tr>")
    return ("<table class=\"evidence\"><thead><tr><th>signal</th><th>value</th><th>source</th></tr></thead><tbody>"
            + "".join(rows) + "</tbody></table>")


def _findings(report: Report) -> list[str]:
    out: list[str] = []
    fired, side_notes = split_notes(report)
    index, srcs = sources(report)
    if fired:
        out.append("<h2>Evidence</h2>")
    for f in fired:
        out.append(f"<article class=\"finding sev-{_e(f.severity)}\" id=\"finding-{_e(f.rule_id)}\" "
                   f"data-rule=\"{_e(f.rule_id)}\">")
        fc = " <em>(a forecast: not yet happened)</em>" if f.forecast else ""
        out.append(f"<h3><span class=\"badge {_e(f.severity)}\">{_e(f.severity)}</span> {_e(f.rule_id)} "
                   f"<code>{_e(f.cls)}</code>: {_e(f.title)}{fc}</h3><p>{_e(f.message)}</p>")
        if f.evidence:
            out.append(_evidence_table(f, index))
        out.append("</article>")
    if srcs:
        out.append("<h3>Sources</h3><ol class=\"sources\">" + "".join(
            f"<li id=\"source-{i}\" class=\"src\">{_e(src)}</li>" for i, src in enumerate(srcs, 1)) + "</ol>")
    if side_notes:
        out.append("<h2>Also noted (not a KV problem)</h2><ul>" +
                   "".join(f"<li id=\"finding-{_e(f.rule_id)}\"><b>{_e(f.rule_id)}</b>: {_e(f.message)}</li>"
                           for f in side_notes) + "</ul>")
    shown = ruled_out(report.verdict, report.findings)
    if shown:
        out.append("<h2>Ruled out</h2><ul class=\"ruled-out\">" +
                   "".join(f"<li><b>{_e(f.rule_id)}</b> <code>{_e(f.cls)}</code>: {_e(f.message)}</li>"
                           for f in shown) + "</ul>")
    absent = not_judged(report.findings)
    if absent and nothing_judged(report):
        out.append(f"<p class=\"not-judged\">Not judged: none of the {len(report.findings)} rules found its signals in "
                   "the input (is it a vLLM log or /metrics page?).</p>")
    elif absent:
        out.append("<h2>Not judged (the input lacks their signals)</h2><ul class=\"not-judged\">" +
                   "".join(f"<li><b>{_e(f.rule_id)}</b> <code>{_e(f.cls)}</code>: {_e(f.reason)}</li>"
                           for f in absent) + "</ul>")
    rows = "".join(f"<tr data-rule=\"{_e(f.rule_id)}\"><td>{_e(f.rule_id)}</td><td><code>{_e(f.cls)}</code></td>"
                   f"<td>{_e(f.status)}</td><td>{_e(f.severity if f.status == 'fires' else 'ok')}</td></tr>"
                   for f in report.findings)
    out.append("<details class=\"all-rules\"><summary>Every rule and its status</summary><table><thead><tr>"
               "<th>rule</th><th>class</th><th>status</th><th>severity</th></tr></thead><tbody>" + rows +
               "</tbody></table></details>")
    return out


def _inputs(report: Report) -> str:
    items = []
    for i in report.inputs:
        text = f"{i['kind']} {i['name']}: {i['records']} record(s), {i['observations']} observation(s)"
        if i.get("skipped"):
            text += f", {i['skipped']} skipped"
        notes = "".join(f"<li>{_e(n)}</li>" for n in i.get("notes") or [])
        items.append(f"<li>{_e(text)}" + (f"<ul>{notes}</ul>" if notes else "") + "</li>")
    w = report.window
    if w.get("start"):
        items.append(f"<li>window: {_e(w['start'])} .. {_e(w['end'])}</li>")
    return "<h2>Inputs</h2><ul class=\"inputs\">" + "".join(items) + "</ul>"


def _headline(v, tag: str = "h1", where: str = "") -> str:
    label = headline_label(v)
    cls = "unknown" if label == "UNKNOWN" else v.severity
    kind = ", a forecast: not yet happened" if v.forecast else ""
    return (f"<{tag} class=\"verdict\" data-primary=\"{_e(v.primary)}\"><span class=\"badge {cls}\">{_e(label)}"
            f"</span> {_e(v.primary)} <span class=\"meta\">(confidence {_e(v.confidence)}{_e(kind)}){_e(where)}"
            f"</span></{tag}>")


def _charts_html(charts: Charts | None, window: dict) -> list[str]:
    if charts is None:
        return []
    out = []
    figs = timeline_figures(charts, window)
    if figs:
        marks = " ".join(dict.fromkeys(f"{m.kind}:{m.label}" if m.kind == "rule" else m.kind for m in charts.markers))
        out.append(f"<h2 class=\"timeline\" data-markers=\"{_e(marks)}\">Timeline</h2>")
        legend = ("<p class=\"meta\">Times in UTC. Vertical lines: firing rules where their evidence lies (coloured by "
                  "severity), restarts and a cut-short window (dashed).</p>")
        out.append(legend)
        for cid, keys, caption, svg in figs:
            out.append(f"<figure id=\"{cid}\" class=\"chart\" data-series=\"{' '.join(keys)}\">{svg}"
                       f"<figcaption>{_e(caption)}</figcaption></figure>")
    svg = startup_figure(charts)
    if svg:
        note = f" ({_e(charts.startup_note)})" if charts.startup_note else ""
        out.append(f"<h2>Start-up memory budget{note}</h2>")
        keys = " ".join([s.key for s in charts.startup] + (["oom"] if charts.oom else []))
        rows = "".join(f"<tr><td>{_e(s.label)}</td><td class=\"num\">{_e(format_bytes(s.bytes, gib=True))}</td>"
                       f"<td class=\"src\">{_e(s.source)}</td></tr>" for s in charts.startup)
        if charts.oom:
            o = charts.oom
            for label, key in (("OOM: tried to allocate", "tried"), ("OOM: free", "free"),
                               ("OOM: allocated by PyTorch", "allocated"), ("OOM: in use by this process", "in_use"),
                               ("OOM: other processes", "other_processes"), ("OOM: GPU total", "total")):
                if o.get(key) is not None and (key != "other_processes" or o[key] > 0):
                    rows += (f"<tr><td>{_e(label)}</td><td class=\"num\">{_e(format_bytes(o[key]))}</td>"
                             f"<td class=\"src\">{_e(o['source'])}</td></tr>")
        crossed = (" The crossed bar is the allocation that failed, drawn where free memory began; the dashed line is "
                   "the GPU's total.") if charts.oom else ""
        out.append(f"<figure id=\"chart-startup\" class=\"chart\" data-series=\"{keys}\">{svg}<figcaption>"
                   f"Each bar is a number of the log's own memory lines (sources below).{crossed}</figcaption>"
                   "</figure>")
        out.append("<table class=\"memory\"><thead><tr><th>line</th><th>bytes</th><th>source</th></tr></thead>"
                   f"<tbody>{rows}</tbody></table>")
    return out


def _one(report: Report, tag: str = "h1", where: str = "", charts: bool = True) -> list[str]:
    v = report.verdict
    out = [f"<section class=\"server\">{_headline(v, tag, where)}", f"<p class=\"summary\">{v.parts.html(_e)}</p>"]
    if report.notes:
        out.append("<ul class=\"notes\">" + "".join(f"<li>note: {_e(n)}</li>" for n in report.notes) + "</ul>")
    flags, fixes = changes(report)
    if fixes:
        out.append("<h2>What to change</h2>" + (f"<pre class=\"flags\">{_e(' '.join(flags))}</pre>" if flags else "")
                   + "<ol class=\"fixes\">" + "".join(f"<li>{_e(r)} <span class=\"rule\">({_e(rid)})</span></li>"
                                                     for rid, r in fixes) + "</ol>")
    if charts:
        out += _charts_html(report.charts, report.window)
    out += _findings(report)
    out.append(_inputs(report))
    out.append("</section>")
    return out


def _fleet(report: Report) -> list[str]:
    insts = report.instances
    bad = [i for i in insts if i.verdict.severity != "ok"]
    out = [_headline(report.verdict, "h1", f" on {insts[0].instance}"),
           f"<p class=\"summary\">{len(bad)} of {len(insts)} server(s) with a problem; worst first.</p>",
           "<h2>Ranking</h2><table class=\"ranking\"><thead><tr><th>#</th><th>server</th><th>severity</th>"
           "<th>verdict</th><th>peak KV usage</th><th>findings</th></tr></thead><tbody>"]
    for n, i in enumerate(insts, 1):
        label = headline_label(i.verdict)
        s = i.charts.series.get("kv_cache_usage") if i.charts else None
        peak = f"{max(s.v):.1%}" if s and s.v else "n/a"
        fired = ", ".join(f.rule_id for f in i.findings if f.status == "fires")
        err = f" ({i.error})" if i.error else ""
        out.append(f"<tr><td>{n}</td><td><a href=\"#server-{n}\"><code>{_e(i.instance)}</code></a></td>"
                   f"<td><span class=\"badge {'unknown' if label == 'UNKNOWN' else _e(i.verdict.severity)}\">"
                   f"{_e(label)}</span></td><td>{_e(i.verdict.primary)}{_e(err)}</td><td class=\"num\">{peak}</td>"
                   f"<td>{_e(fired)}</td></tr>")
    out.append("</tbody></table>")
    spans = [_span(i.charts) for i in insts if i.charts and i.charts.series]
    span = (min(s[0] for s in spans if s), max(s[1] for s in spans if s)) if any(spans) else None
    out.append("<h2>KV usage per server, worst first</h2><div class=\"multiples\">")
    for n, i in enumerate(insts, 1):
        marks = " ".join(sorted({m.kind for m in i.charts.markers if m.kind != "rule"})) if i.charts else ""
        out.append(f"<figure id=\"multiple-{n}\" class=\"chart multiple\" data-instance=\"{_e(i.instance)}\" "
                   f"data-markers=\"{marks}\">"
                   f"{usage_multiple(i.instance, i.verdict, i.charts, span)}</figure>")
    out.append("</div>")
    for n, i in enumerate(insts, 1):
        sub = Report(verdict=i.verdict, findings=i.findings, inputs=i.inputs, window=i.window, notes=i.notes,
                     charts=i.charts)
        out.append(f"<div id=\"server-{n}\" data-instance=\"{_e(i.instance)}\"><h2>{n}. <code>{_e(i.instance)}"
                   "</code></h2>")
        out += _one(sub, "h3", charts=False)  # its usage is in the small multiples: the page stays small
        out.append("</div>")
    if report.notes:
        out.append("<h2>Notes</h2><ul>" + "".join(f"<li>{_e(n)}</li>" for n in report.notes) + "</ul>")
    return out


def render_html(report: Report) -> str:
    """The report as one HTML document (UTF-8, no script, no external resource); one server, or a fleet (ranking,
    small multiples of KV usage worst first, then a section per server)."""
    import matplotlib

    with matplotlib.rc_context(_RC):
        body = _fleet(report) if len(report.instances) > 1 else _one(report)
    return page(f"kvdiag: {headline_label(report.verdict)} {report.verdict.primary}", body)
