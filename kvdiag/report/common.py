"""What every renderer shares: value formatting, the headline label, the split of firing findings into problems
and side notes. Renderers import this, never each other."""

from __future__ import annotations

import math

from .model import Report


def _fmt_value(value, unit: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and (math.isinf(value) or abs(value) >= 1e15) and unit != "bytes":
        return f"{value:.3g}" + ("" if unit in ("ratio", "count") else f" {unit}")
    if unit == "ratio":
        return f"{value:.1%}"
    if unit == "bytes":
        return f"{value / 2**30:,.2f} GiB"
    if unit in ("tokens", "blocks", "requests", "count"):
        return f"{value:,.0f}" + ("" if unit == "count" else f" {unit}")
    if unit == "x":
        return f"{value:.2f}x"
    return f"{value:,.4g} {unit}"


def headline_label(verdict) -> str:
    """``UNKNOWN`` for an inconclusive verdict (exit 3; the JSON keeps severity ``ok`` as its schema says),
    else the severity in capitals."""
    return "UNKNOWN" if verdict.primary == "inconclusive" else verdict.severity.upper()


def split_notes(report: Report) -> tuple[list, list]:
    """Firing findings to show in full, and the firing ``healthy`` notes to show as one line each.

    Under a problem verdict a note ("the workload shares no prefix", "the usage gauge is split") is context, not
    a second diagnosis: it goes to one line under the evidence. Under a ``healthy`` verdict the notes are the
    finding and are shown in full.
    """
    fired = [f for f in report.findings if f.status == "fires"]
    if report.verdict.primary == "healthy":
        return fired, []
    return [f for f in fired if f.severity != "ok"], [f for f in fired if f.severity == "ok"]
