"""Every diff format, by name: ``DIFF_RENDERERS[fmt](result)`` (text, JSON and Markdown are
:mod:`kvdiag.report.diff_render`, the HTML page :mod:`kvdiag.report.diff_html`, which reuses their labels)."""

from __future__ import annotations

from .diff_model import DiffResult
from .diff_render import render_diff_json, render_diff_markdown, render_diff_text


def render_diff_html(result: DiffResult) -> str:
    """One self-contained HTML page (:mod:`kvdiag.report.diff_html`; matplotlib is loaded only for it)."""
    from .diff_html import render_diff_html as render

    return render(result)


DIFF_RENDERERS = {"text": render_diff_text, "json": render_diff_json, "markdown": render_diff_markdown,
                  "html": render_diff_html}
"""``DIFF_RENDERERS[fmt](result)``; the text renderer also takes ``width``."""
