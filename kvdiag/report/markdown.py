"""Markdown renderer for incident tickets: :class:`~kvdiag.report.model.Report` → str.

Layout, for a reader who has ten seconds: a title with the verdict, one paragraph of what happened, what to change
(the primary finding's remedies), then the evidence table with sources, what was ruled out (counter-evidence of the
look-alikes: ``verdict.ruled_out``, as text and JSON), what could not be judged (or was quiet only because its
inputs were absent), and the inputs. Consumes the finished report and nothing else.
"""

from __future__ import annotations

import re

from .common import _fmt_value, changes, evidence_items, headline_label, nothing_judged, sources, split_notes
from .model import Report, not_judged, ruled_out


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _code(text: str, table: bool = True) -> str:
    """``text`` as an inline code span that no character of it can end early: the fence is one backtick longer
    than the longest run inside (CommonMark 6.1), newlines flattened, pipes escaped when the span stands in a table
    cell (``table``; elsewhere a backslash inside a code span would show). Inside a code span ``<script>`` is
    literal text."""
    text = _cell(text) if table else str(text).replace("\n", " ")
    run = longest = 0
    for ch in text:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    fence = "`" * (longest + 1)
    pad = " " if longest else ""  # CommonMark strips one space on each side of a padded span
    return f"{fence}{pad}{text}{pad}{fence}"


def _text(text: str) -> str:
    """Free text (summaries, notes) with HTML tag starts neutralised (``<`` before a letter, ``/``, ``!`` or
    ``?`` becomes ``&lt;``), so a label value cannot inject markup into the ticket."""
    return re.sub(r"<(?=[A-Za-z/!?])", "&lt;", str(text))


def render_markdown(report: Report) -> str:
    """The report as GitHub-flavoured Markdown (one table per firing finding's evidence)."""
    v = report.verdict
    fired, side_notes = split_notes(report)
    primary = next((f for f in fired if f.cls == v.primary), None)
    out = [f"# kvdiag: {headline_label(v)} — `{v.primary}` (confidence {v.confidence}"
           f"{', a forecast: not yet happened' if v.forecast else ''})", "",
           f"**What happened.** {v.parts.markdown(_text)}", ""]
    out += [f"- note: {_text(n)}" for n in report.notes] + ([""] if report.notes else [])
    flags, fixes = changes(report)
    if fixes:
        out += ["## What to change", ""]
        if flags:
            out += ["```", " ".join(flags), "```", ""]
        out += [f"{i}. {_text(r)} ({rule_id})" for i, (rule_id, r) in enumerate(fixes, 1)] + [""]
    index, srcs = sources(report)
    if fired:
        out += ["## Evidence", ""]
    for f in fired:
        out += [f"### {f.rule_id} `{f.cls}` ({f.severity}): {f.title}", "", _text(f.message), ""]
        items = evidence_items(f)
        if items:
            out += ["| signal | value | source |", "|---|---|---|"]
            for e in items:
                agg = "" if e.agg == "last" else f" ({e.agg})"
                out.append(f"| `{e.signal}`{agg} | {_cell(_text(_fmt_value(e.value, e.unit)))} | [{index[e.source]}] |")
            out.append("")
    if srcs:
        out += ["Sources:", ""] + [f"{i}. {_code(src, table=False)}" for i, src in enumerate(srcs, 1)] + [""]
    if side_notes:
        out += ["## Also noted (not a KV problem)", ""] + [f"- {f.rule_id}: {_text(f.message)}" for f in side_notes]
        out += [""]
    shown = ruled_out(v, report.findings)  # the engine's one meaning of "ruled out", as in text and JSON
    if shown:
        out += ["## Ruled out", ""] + [f"- **{f.cls}** ({f.rule_id}): {_text(f.message)}" for f in shown] + [""]
    unknown = not_judged(report.findings)  # could not be judged, or quiet only because their inputs were absent
    if unknown and nothing_judged(report):
        out += [f"Not judged: none of the {len(report.findings)} rules found its signals in the input (is it a vLLM "
                "log or /metrics page?).", ""]
    elif unknown:
        out += ["<details><summary>Not judged (missing signals)</summary>", ""]
        out += [f"- {f.rule_id} `{f.cls}`: {_text(f.reason)}" for f in unknown] + ["", "</details>", ""]
    out += ["## Inputs", ""]
    for i in report.inputs:
        line = f"- {i['kind']} {_code(i['name'])}: {i['records']} record(s), {i['observations']} observation(s)"
        if i.get("notes"):
            line += "; " + "; ".join(_text(n) for n in i["notes"])
        out.append(line)
    w = report.window
    if w.get("start"):
        out.append(f"- window: {w['start']} .. {w['end']}")
    return "\n".join(out).rstrip("\n") + "\n"
