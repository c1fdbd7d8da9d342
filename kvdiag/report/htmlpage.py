"""The page shell every HTML output of kvdiag shares (``analyze``, ``diff``, ``simulate``): one self-contained
document with an inline style sheet (a print part for paper), a Content-Security-Policy of ``default-src 'none'``
(no script, no request: inline styles and ``data:`` images only), and the escaping every text passes.

:func:`_e` is how a text reaches the page (:func:`kvdiag.redaction.redact`, then :func:`html.escape`, quotes too);
:func:`_m` how it reaches a matplotlib chart (redacted, ``$`` escaped against mathtext); :func:`_svg` turns a figure
into an inline ``<svg>`` with its text as SVG text; :data:`_RC` is the matplotlib style of every chart.
"""

from __future__ import annotations

import html
import io
import re

from .. import __version__
from ..redaction import redact

CSS = """
:root { --crit: #c62828; --warn: #b26a00; --ok: #2e7d32; --unk: #7b1fa2; --ink: #1b1b1b; --soft: #5a5a5a; }
* { box-sizing: border-box; }
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; color: var(--ink);
       margin: 0 auto; max-width: 1100px; padding: 1.2em 1.5em 3em; background: #fff; }
h1 { font-size: 1.5em; margin: 0.2em 0 0.3em; } h2 { font-size: 1.2em; margin: 1.6em 0 0.4em;
     border-bottom: 1px solid #ddd; padding-bottom: 0.15em; } h3 { font-size: 1.05em; margin: 1.1em 0 0.3em; }
.badge { display: inline-block; padding: 0.05em 0.5em; border-radius: 4px; color: #fff; font-weight: 700;
         letter-spacing: 0.03em; }
.critical { background: var(--crit); } .warning { background: var(--warn); } .ok { background: var(--ok); }
.unknown { background: var(--unk); }
.summary { font-size: 1.05em; margin: 0.4em 0 0.8em; }
.meta { color: var(--soft); font-size: 0.9em; }
code, .src { font: 0.86em/1.35 ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace; overflow-wrap: anywhere; }
table { border-collapse: collapse; width: 100%; margin: 0.4em 0 0.8em; font-size: 0.92em; }
th, td { text-align: left; vertical-align: top; border-bottom: 1px solid #e4e4e4; padding: 0.25em 0.5em; }
th { background: #f4f4f4; }
td.num { text-align: right; white-space: nowrap; }
table.evidence td:first-child code { overflow-wrap: normal; white-space: nowrap; }  /* a signal name is one word */
table.evidence td.src { width: 55%; }
figure { margin: 0.6em 0 1em; page-break-inside: avoid; break-inside: avoid; }
figure svg { width: 100%; height: auto; display: block; }
figcaption { color: var(--soft); font-size: 0.85em; }
caption { text-align: left; caption-side: top; padding: 0.1em 0; }
.finding { border-left: 4px solid #ccc; padding: 0.1em 0 0.1em 0.9em; margin: 1em 0; }
.finding.sev-critical { border-color: var(--crit); } .finding.sev-warning { border-color: var(--warn); }
.finding.sev-ok { border-color: var(--ok); }
.multiples { display: grid; grid-template-columns: repeat(auto-fill, minmax(320px, 1fr)); gap: 0.6em; }
.multiples figure { margin: 0; }
details summary { cursor: pointer; }
tr.recommended td { background: #e8f5e9; font-weight: 600; } tr.unchanged td { color: var(--soft); }
.simulated { font-variant: small-caps; color: var(--soft); }
@media print {
  body { max-width: none; padding: 0; font-size: 10.5pt; }
  .badge { color: #000; background: none !important; border: 1.5px solid #000; }
  a { color: inherit; text-decoration: none; }
  h2 { break-after: avoid; page-break-after: avoid; }
  .finding, tr { break-inside: avoid; page-break-inside: avoid; }
  .multiples { grid-template-columns: 1fr 1fr; }
  details { display: block; } details > * { display: block; }
  @page { margin: 14mm 12mm; }
}
"""


def _e(text) -> str:
    """Report text for the page: redacted, then escaped (quotes too: safe in an attribute)."""
    return html.escape(redact(str(text)), quote=True)


def _m(text) -> str:
    """Report text for a chart: redacted, ``$`` escaped against matplotlib's mathtext."""
    return redact(str(text)).replace("$", r"\$")


_RC = {"svg.fonttype": "none", "svg.hashsalt": "kvdiag", "font.size": 9, "axes.titlesize": 10,
       "axes.titlelocation": "left", "axes.spines.top": False, "axes.spines.right": False, "axes.grid": True,
       "grid.color": "#e6e6e6", "grid.linewidth": 0.6, "legend.fontsize": 8, "legend.frameon": False,
       "font.family": "DejaVu Sans", "svg.image_inline": True, "path.simplify": True}


def _svg(fig) -> str:
    """A figure as an ``<svg>`` element to inline: no XML prolog, doctype or metadata block, sized by CSS."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": f"kvdiag {__version__} (matplotlib)"})
    text = buf.getvalue()
    text = text[text.index("<svg"):]
    text = re.sub(r"<metadata>.*?</metadata>\s*", "", text, count=1, flags=re.S)
    text = re.sub(r'(<svg[^>]*?) width="[\d.]+pt" height="[\d.]+pt"', r'\1', text, count=1)
    return text.strip()


def page(title: str, body: list[str]) -> str:
    """One HTML document (UTF-8, no script, no external resource): ``title`` (escaped here), the ``body`` parts
    (already escaped HTML) one a line, kvdiag's version in the footer. Matplotlib figures drawn inside
    ``matplotlib.rc_context(_RC)``."""
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
            "img-src data:\">"
            f"<title>{_e(title)}</title><style>{CSS}</style></head><body>\n" + "\n".join(body) +
            f"\n<footer class=\"meta\"><p>kvdiag {_e(__version__)}</p></footer>"
            "\n</body></html>\n")
