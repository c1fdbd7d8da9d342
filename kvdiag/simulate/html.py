"""``kvdiag simulate --format html``: the outcome document (:func:`kvdiag.commands.simulate.build_document`) as one
self-contained page in the shell every kvdiag page shares (:mod:`kvdiag.report.htmlpage`: no script, CSP
``default-src 'none'``, every text redacted then escaped).

The page holds the per-setting table (the text renderer's columns, the recommended row marked, every figure
labelled simulated) and one matplotlib chart (inline SVG): preemptions and p95 queue time per setting, two bar
panels side by side. Each number cell carries the document's value in ``data-value``.
"""

from __future__ import annotations

import json

from ..report.html import LINE, SECOND, SEVERITY_COLOURS
from ..report.htmlpage import _RC, _e, _m, _svg, page
from .document import _COLS, _cells, _cost_line, _setting_label


def _varied(runs: list[dict]) -> list[str]:
    return [k for k in (runs[0]["setting"] if runs else {}) if len({json.dumps(r["setting"][k]) for r in runs}) > 1]


def settings_figure(doc: dict) -> str | None:
    """Preemptions (left) and p95 queue time in seconds (right) per setting, one bar each, the recommended one in
    green; ``None`` without settings. A setting with no finished request has no p95 queue time: no bar, ``-``."""
    runs = doc["settings"]
    if not runs:
        return None
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    varied = _varied(runs)
    labels = [_m(_setting_label(r["setting"], varied)) for r in runs]
    f = Figure(figsize=(9.0, 0.45 * len(runs) + 1.4), dpi=72, layout="constrained")
    f.suptitle("Simulated per setting (not measured)", x=0.01, ha="left", fontsize=10)
    axes = f.subplots(1, 2, sharey=True)
    for ax, key, title, colour, fmt in ((axes[0], "preemptions", "preemptions (simulated)", SECOND, "{:d}"),
                                        (axes[1], "queue_time_p95_s", "p95 queue time, s (simulated)", LINE,
                                         "{:.2f}")):
        vals = [r.get(key) for r in runs]
        colours = [SEVERITY_COLOURS["ok"] if r["recommended"] else colour for r in runs]
        ax.barh(range(len(runs)), [0 if v is None else v for v in vals], color=colours, height=0.6)
        for y, v in enumerate(vals):
            ax.annotate("-" if v is None else fmt.format(v), (0 if v is None else v, y), xytext=(3, 0),
                        textcoords="offset points", va="center", ha="left", fontsize=7.5, color="#333")
        ax.set_title(title)
        ax.grid(axis="y", visible=False)
        top = max([v for v in vals if v is not None] or [0])
        ax.set_xlim(0, top * 1.18 or 1)
        if key == "preemptions":
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes[0].set_yticks(range(len(runs)), labels)
    axes[0].invert_yaxis()
    return _svg(f)


def render_html(doc: dict) -> str:
    """The simulate outcome as one HTML document (UTF-8, no script, no external resource)."""
    import matplotlib

    runs = doc["settings"]
    varied = _varied(runs)
    span = "until drained" if doc["duration_s"] is None else f"{doc['duration_s']:g} s"
    src = doc["source"]
    out = [f"<h1>kvdiag simulate: {_e(doc['workload']['requests'])} requests <span class=\"simulated\">(simulated)"
           "</span></h1>",
           f"<p class=\"meta\">{_e(src['kind'])} <code>{_e(src['path'])}</code>, {_e(span)}</p><ul class=\"meta\">",
           "<li>fixed: " + _e(", ".join(f"{k}={v}" for k, v in (runs[0]["setting"] if runs else {}).items()
                                        if k not in varied)) + "</li>",
           f"<li>{_e(_cost_line(doc['step_cost']))}</li>",
           *[f"<li>{_e(src[k])}</li>" for k in ("about", "step_cost") if src.get(k)], "</ul>"]
    if doc["recommended"] is not None:
        best = next(r for r in runs if r["recommended"])
        q = best.get("queue_time_p95_s")
        out.append(f"<p class=\"summary recommended\"><span class=\"badge ok\">recommended</span> "
                   f"{_e(_setting_label(best['setting'], varied))}: {_e(best['preemptions'])} preemptions, p95 queue "
                   f"{'-' if q is None else _e(f'{q:.2f} s')}, simulated on this workload</p>")
    with matplotlib.rc_context(_RC):
        svg = settings_figure(doc)
    if svg:
        out.append(f"<figure id=\"chart-settings\" class=\"chart\" data-series=\"preemptions queue_time_p95_s\">{svg}"
                   "<figcaption>Simulated with kvdiag's scheduler model, one bar per setting; the recommended one in "
                   "green.</figcaption></figure>")
    heads = "".join(f"<th>{_e(h)}</th>" for _, h, _ in _COLS)
    body = []
    for r in runs:
        mark = (" <span class=\"badge ok\">recommended</span>" if r["recommended"] else "") + \
            (" (as run)" if r["baseline"] else "")
        cells = "".join(f"<td class=\"num\" data-key=\"{key}\" data-value=\"{_e(json.dumps(r.get(key)))}\">{_e(c)}"
                        "</td>" for (key, _, _), c in zip(_COLS, _cells(r)))
        body.append(f"<tr class=\"setting{' recommended' if r['recommended'] else ''}\" "
                    f"data-setting=\"{_e(json.dumps(r['setting'], sort_keys=True))}\">"
                    f"<td>{_e(_setting_label(r['setting'], varied))}{mark}</td>{cells}</tr>")
    out.append("<h2>Settings <span class=\"simulated\">(simulated)</span></h2><table class=\"settings\"><caption "
               "class=\"meta\">Every number in this table is simulated, not measured.</caption><thead><tr>"
               "<th>setting (simulated)</th>" + heads +
               "</tr></thead><tbody>" + "".join(body) + "</tbody></table>")
    out.append("<ul class=\"notes\">" + "".join(f"<li>note: {_e(n)}</li>" for n in doc["notes"]) + "</ul>")
    return page(f"kvdiag simulate: {doc['workload']['requests']} requests (simulated)", out)
