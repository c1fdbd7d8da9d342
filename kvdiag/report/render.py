"""Renderers: :class:`~kvdiag.report.model.Report` → str. Plain text (fixed width, no colour) and JSON."""

from __future__ import annotations

import json
import math
import textwrap

from .model import Report

WIDTH = 100


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


def _wrap(text: str, indent: str) -> list[str]:
    return textwrap.wrap(text, width=WIDTH, initial_indent=indent, subsequent_indent=indent + "  ") or [indent]


def render_text(report: Report) -> str:
    """Verdict line first, then the evidence with sources, the fix, and what was ruled out.

    Several servers: the worst server's verdict, a ranking of all servers, then one section per server.
    """
    if len(report.instances) > 1:
        return _render_servers(report)
    v = report.verdict
    lines = [f"{headline_label(v)}: {v.primary} (confidence {v.confidence})"]
    lines += _wrap(v.summary, "  ")
    fired, side_notes = split_notes(report)
    for f in fired:
        lines.append("")
        lines.append(f"[{f.severity}] {f.rule_id} {f.cls}: {f.title}")
        lines += _wrap(f.message, "  ")
        if f.evidence:
            lines.append("  Evidence:")
            for e in f.evidence:
                agg = "" if e.agg == "last" else f" ({e.agg})"
                lines += _wrap(f"- {e.signal}{agg} = {_fmt_value(e.value, e.unit)}   <- {e.source}", "    ")
        if f.remedy:
            lines.append("  Fix:")
            for r in f.remedy:
                lines += _wrap(f"- {r}", "    ")
    if side_notes:
        lines += ["", "Also noted (not a KV problem):"]
        for f in side_notes:
            lines += _wrap(f"- {f.rule_id}: {f.message}", "  ")
    lines += _ruled_out_lines(report.findings)
    lines.append("")
    lines.append("Inputs:")
    for i in report.inputs:
        text = f"{i['kind']} {i['name']}: {i['records']} record(s), {i['observations']} observation(s)"
        if i.get("skipped"):
            text += f", {i['skipped']} skipped"
        if i.get("notes"):
            text += "; " + "; ".join(i["notes"])
        lines += _wrap(text, "  ")
    w = report.window
    if w.get("start"):
        lines.append(f"  window: {w['start']} .. {w['end']}")
    for n in report.notes:
        lines += _wrap(f"note: {n}", "  ")
    return "\n".join(lines) + "\n"


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


def _ruled_out_lines(findings) -> list[str]:
    """Counter-evidence first and only where it has numbers; the rest folded into two lines.

    A quiet finding whose message quotes a number ("partial-block waste ≤ 0.1 % of the pool") is shown in
    full: it is why a look-alike was ruled out. Quiet findings without numbers ("no OOM in the sampler
    warm-up") and the rules that could not be judged are listed by id on one line each (``--format json``
    has every message and reason).
    """
    quiet = [f for f in findings if f.status == "quiet"]
    unknown = [f for f in findings if f.status == "unknown"]
    shown = [f for f in quiet if f.cls != "healthy" and any(ch.isdigit() for ch in f.message)]  # notes rule out nothing
    folded = [f for f in quiet if f not in shown]
    out: list[str] = []
    if shown:
        out += ["", "Ruled out:"]
        for f in shown:
            out += _wrap(f"- {f.rule_id} {f.cls}: {f.message}", "  ")
    if folded or unknown:
        out.append("")
    if folded:
        out += _wrap("Also checked, nothing found: " + ", ".join(f"{f.rule_id} ({f.cls})" for f in folded), "")
    if unknown:
        out += _wrap(f"Not judged (the input lacks their signals; --format json says which): "
                     f"{', '.join(f.rule_id for f in unknown)}", "")
    return out


def _render_servers(report: Report) -> str:
    v = report.verdict
    insts = report.instances
    bad = [i for i in insts if i.verdict.severity != "ok"]
    lines = [f"{headline_label(v)}: {v.primary} (confidence {v.confidence}) on {insts[0].instance}",
             f"  {len(bad)} of {len(insts)} server(s) with a problem; worst first:"]
    width = min(60, max(len(i.instance) for i in insts))
    for i in insts:
        label = headline_label(i.verdict)
        lines.append(f"  {label:8} {i.instance:{width}}  {i.verdict.primary}"
                     + (f" ({i.error})" if i.error else ""))
    for i in insts:
        lines.append("")
        lines.append(f"=== {i.instance} " + "=" * max(3, WIDTH - len(i.instance) - 5))
        one = Report(verdict=i.verdict, findings=i.findings, inputs=i.inputs, window=i.window, notes=i.notes)
        lines += render_text(one).rstrip("\n").splitlines()
    if report.notes:
        lines.append("")
        for n in report.notes:
            lines += _wrap(f"note: {n}", "")
    return "\n".join(lines) + "\n"


def render_json(report: Report) -> str:
    """One JSON object (schema_version 1), NaN written as null."""
    return json.dumps(report.to_dict(), indent=2, ensure_ascii=False, allow_nan=False) + "\n"


from .markdown import render_markdown  # noqa: E402  (issue 6: incident tickets)


def _redacted(render):
    """A renderer whose output passes :func:`kvdiag.collect.logread.redact` last: no secret in any report."""
    from ..collect.logread import redact

    def run(report: Report) -> str:
        return redact(render(report))

    run.__doc__ = render.__doc__
    return run


RENDERERS = {"text": _redacted(render_text), "json": _redacted(render_json), "markdown": _redacted(render_markdown)}
