"""Renderers of :class:`kvdiag.report.diff_model.DiffResult`: text, JSON, Markdown (by name, with the HTML page of
:mod:`kvdiag.report.diff_html`: ``DIFF_RENDERERS[fmt](result)`` in :mod:`kvdiag.report.diff_formats`).

They consume the finished result and nothing else; every output passes :func:`kvdiag.redaction.redact`.
"""

from __future__ import annotations

import json
import textwrap

from ..redaction import redact
from .common import _fmt_value, headline_label
from .diff_model import DiffResult, DiffRow, Explanation
from .formats import _redact_values

_TITLES = {"budget": "Start-up memory budget", "config": "Configuration", "run": "The run"}


def short_source(src: str) -> str:
    """An aggregate's source ``A .. B`` of one series written once: ``A .. TIME_OF_B``."""
    a, sep, b = src.partition(" .. ")
    if sep and "@" in a and "@" in b and a.rsplit("@", 1)[0] == b.rsplit("@", 1)[0]:
        return f"{a} .. {b.rsplit('@', 1)[1]}"
    return src


def _v(value, unit: str) -> str:
    if unit == "bool" and isinstance(value, (int, float)):
        return "True" if value else "False"
    return "—" if value is None else _fmt_value(value, unit)


def _change(r: DiffRow) -> str:
    d = r.delta
    if not r.changed:
        return "="
    if d is None:
        if r.before is None:
            return "new"
        if r.after is None:
            return "gone"
        return "changed"
    if r.unit == "bytes":
        s = f"{d / 2**30:+,.2f} GiB"
    elif r.unit == "ratio":
        s = f"{d * 100:+.1f} pt"
    elif r.unit in ("tokens", "blocks", "requests", "count"):
        s = f"{d:+,.0f}" if abs(d) >= 1 or d == 0 else f"{d:+.3g}"
    elif r.unit == "x":
        s = f"{d:+.2f}x"
    else:
        s = f"{d:+.4g}"
    base = r.before
    if isinstance(base, (int, float)) and base:
        s += f" ({d / abs(base):+.0%})"
    return s


def _amount(v: float, unit: str) -> str:
    if unit == "bytes":
        return f"{v / 2**30:+,.2f} GiB"
    if unit == "tokens":
        return f"{v:+,.0f} tokens"
    if unit == "ratio":
        return f"{v * 100:+.1f} pt"
    return f"{v:+.4g} {unit}"


def explanation_lines(e: Explanation) -> list[str]:
    """One explanation as lines: the headline, then one line per term (with its causes), then the residual."""
    if e.residual is None and all(t.amount == 0 for t in e.terms):  # a list of causes, no arithmetic
        head = f"{e.label}: " + ("; ".join(t.label for t in e.terms) if e.terms else
                                 "no configuration line that changed explains it")
        return [head]
    parts = [f"{t.label} {_amount(t.change, t.unit)} ({_amount(t.amount, t.unit)} of the {e.label})"
             if t.change is not None and t.change != t.amount else f"{t.label} {_amount(t.amount, t.unit)}"
             for t in e.terms]
    head = f"{e.label} {_amount(e.delta, e.unit)}: " + ("; ".join(parts) if parts else "no printed term moved")
    lines = [head]
    for t in e.terms:
        detail = f"  {t.label}: {t.why}" + (f" [{t.source}]" if t.source else "")
        lines.append(detail)
        lines += [f"    ← {c}" for c in t.causes]
    if e.residual is not None and abs(e.residual) >= (0.05 * 2**30 if e.unit == "bytes" else 1):
        lines.append(f"  not accounted for by the printed lines: {_amount(e.residual, e.unit)}")
    return lines


def _label(side) -> str:
    """UNKNOWN for a side kvdiag could not judge (exit 3), else the severity in capitals (as analyze's headline)."""
    from types import SimpleNamespace

    return headline_label(SimpleNamespace(primary=side.primary, severity=side.severity))


def render_diff_text(result: DiffResult, width: int = 100) -> str:
    """The side-by-side as plain text: headline, what explains the change, then each section most moved first."""
    b, a = result.before, result.after
    out = [f"kvdiag diff: BEFORE {b.name} ({b.kind}) → AFTER {a.name} ({a.kind})"]
    out.append(f"model: {b.model or '?'} → {a.model or '?'}; vLLM {b.version or '?'} → {a.version or '?'}")
    out.append(f"verdicts: BEFORE {b.primary} ({_label(b)}) → AFTER {a.primary} ({_label(a)})")
    for tag, side in (("BEFORE", b), ("AFTER", a)):
        if side.summary:
            out += textwrap.wrap(f"{tag}: {side.summary}", width=width, initial_indent="  ", subsequent_indent="    ")
    for w in result.warnings:
        out += textwrap.wrap(f"warning: {w}", width=width, subsequent_indent="  ")
    if result.identical:
        out.append("")
        out.append("No difference: both inputs give the same start-up budget, configuration, run and verdict.")
        return redact("\n".join(out) + "\n", controls=False)
    if result.regressions:
        out.append("")
        out.append("AFTER regressed:")
        out += [f"  - {r}" for r in result.regressions]
    if result.explanations:
        out.append("")
        out.append("What explains the difference:")
        for e in result.explanations:
            lines = explanation_lines(e)
            out += textwrap.wrap(lines[0], width=width, initial_indent="  ", subsequent_indent="    ")
            for ln in lines[1:]:
                out += textwrap.wrap(ln, width=width, initial_indent="  ", subsequent_indent="        ")
    for section in ("budget", "config", "run"):
        rows = result.section(section)
        if not rows:
            continue
        moved = [r for r in rows if r.changed]
        same = [r for r in rows if not r.changed]
        out.append("")
        out.append(f"{_TITLES[section]} (most moved first):" if moved else f"{_TITLES[section]}: no line moved")
        if moved:
            lw = min(40, max(len(r.label) for r in moved))
            vw = min(28, max(max(len(_v(r.before, r.unit)), len(_v(r.after, r.unit))) for r in moved))
            out.append(f"  {'line':<{lw}}  {'BEFORE':>{vw}}  {'AFTER':>{vw}}  change")
            for r in moved:
                out.append(f"  {r.label[:lw]:<{lw}}  {_v(r.before, r.unit)[:vw]:>{vw}}  {_v(r.after, r.unit)[:vw]:>{vw}}  "
                           f"{_change(r)}")
                src = "  ".join(s for s in (f"BEFORE {short_source(r.before_source)}" if r.before_source else "",
                                            f"AFTER {short_source(r.after_source)}" if r.after_source else "")
                                if s)
                if src:
                    out += textwrap.wrap(src, width=width, initial_indent="      ", subsequent_indent="        ")
                if r.note:
                    out += textwrap.wrap(r.note, width=width, initial_indent="      ", subsequent_indent="        ")
        if same:
            text = "unchanged: " + ", ".join(f"{r.label} {_v(r.before, r.unit)}" for r in same)
            out += textwrap.wrap(text, width=width, initial_indent="  ", subsequent_indent="    ")
    return redact("\n".join(out) + "\n", controls=False)


def _md(s: str) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def render_diff_markdown(result: DiffResult) -> str:
    """The side-by-side as Markdown: a headline list, the explanations, one table per section."""
    b, a = result.before, result.after
    out = ["# kvdiag diff", "",
           f"- BEFORE: `{_md(b.name)}` ({b.kind}), {b.model or '?'}, vLLM {b.version or '?'}: **{b.primary}** "
           f"({_label(b)}) — {_md(b.summary)}",
           f"- AFTER: `{_md(a.name)}` ({a.kind}), {a.model or '?'}, vLLM {a.version or '?'}: **{a.primary}** "
           f"({_label(a)}) — {_md(a.summary)}"]
    out += [f"- warning: {_md(w)}" for w in result.warnings]
    out.append("")
    if result.identical:
        out.append("**No difference**: both inputs give the same start-up budget, configuration, run and verdict.")
        return redact("\n".join(out) + "\n", controls=False)
    if result.regressions:
        out += ["## AFTER regressed", ""] + [f"- {_md(r)}" for r in result.regressions] + [""]
    if result.explanations:
        out += ["## What explains the difference", ""]
        for e in result.explanations:
            lines = explanation_lines(e)
            out.append(f"- **{_md(lines[0])}**")
            out += [f"  - {_md(ln.strip())}" for ln in lines[1:]]
        out.append("")
    for section in ("budget", "config", "run"):
        rows = result.section(section)
        if not rows:
            continue
        out += [f"## {_TITLES[section]}", "", "| line | BEFORE | AFTER | change | sources |", "| --- | ---: | ---: | ---: | --- |"]
        for r in rows:
            src = "; ".join(s for s in (r.before_source, r.after_source) if s)
            out.append(f"| {_md(r.label)} | {_md(_v(r.before, r.unit))} | {_md(_v(r.after, r.unit))} | {_md(_change(r))} "
                       f"| {_md(src)}{(' — ' + _md(r.note)) if r.note else ''} |")
        out.append("")
    return redact("\n".join(out).rstrip() + "\n", controls=False)


def render_diff_json(result: DiffResult) -> str:
    """One JSON object (``kvdiag/report/diff.schema.json``), every string redacted before it is serialised."""
    return json.dumps(_redact_values(result.to_dict()), indent=2, ensure_ascii=False, allow_nan=False) + "\n"
