"""Every report format, by name: ``RENDERERS[fmt](report)``. Each renderer's output passes
:func:`kvdiag.redaction.redact` (JSON: every string before it is serialised; HTML: every text before it is escaped)."""

from __future__ import annotations

import json

from ..redaction import redact
from .html import render_html
from .markdown import render_markdown
from .model import Report
from .render import render_text


def _redact_values(value):
    """``value`` (the report's dict) with every string in it, keys too, passed through
    :func:`kvdiag.redaction.redact`."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {_redact_values(k): _redact_values(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_redact_values(v) for v in value]
    return value


def render_json(report: Report) -> str:
    """One JSON object (schema_version 1), NaN written as null. Every string value is redacted before it is
    serialised (redacting the serialised text would eat the backslash of an escaped quote: not JSON)."""
    return json.dumps(_redact_values(report.to_dict()), indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def _redacted(render):
    """A renderer whose output passes :func:`kvdiag.redaction.redact` last: no secret in any report (its
    control characters are kept: the text renderer's colours; each text was cleaned of them on its way in)."""
    def run(report: Report, **layout) -> str:
        return redact(render(report, **layout), controls=False)

    run.__doc__ = render.__doc__
    return run


RENDERERS = {"text": _redacted(render_text), "json": render_json, "markdown": _redacted(render_markdown),
             "html": render_html}
"""``RENDERERS[fmt](report)``; the text renderer also takes ``width`` and ``color`` (see :func:`terminal_layout`)."""
