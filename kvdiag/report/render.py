"""The text renderer: :class:`~kvdiag.report.model.Report` → str, wrapped to a width, colour on request. The other
formats are in their own modules (``markdown.py``, ``formats.py`` for JSON and the table of all of them); it reads the
finished report and nothing else."""

from __future__ import annotations

import re

import os
import shutil
import unicodedata

import click

from ..redaction import redact
from .common import _fmt_value, changes, evidence_items, headline_label, nothing_judged, sources, split_notes  # noqa: F401
from .model import Report, not_judged, ruled_out

WIDTH = 100


# ------------------------------------------------------------------------------------------------
# Lines, wrapping and colour. A line is a list of (text, style) segments; style None is plain. The text is laid out
# on the plain characters, so colour never changes where a line breaks.
STYLES = {"critical": {"fg": "red", "bold": True}, "warning": {"fg": "yellow", "bold": True},
          "ok": {"fg": "green", "bold": True}, "unknown": {"fg": "magenta", "bold": True}, "head": {"bold": True}}
"""click.style arguments per style: severity labels (``unknown`` for an inconclusive verdict) and headings."""
MIN_WIDTH = 40
MAX_WIDTH = 1000  # the most --width takes; a terminal's COLUMNS=100000 is held to it too


def terminal_layout(stream, width: int | None = None) -> tuple[int, bool]:
    """``(width, colour)`` for a text report written to ``stream``.

    On a terminal: its width (``shutil.get_terminal_size``, which honours ``COLUMNS``; kept within
    ``MIN_WIDTH``..``MAX_WIDTH`` like ``--width``), colour unless ``NO_COLOR`` is set to a non-empty value
    (https://no-color.org) or ``TERM`` is ``dumb`` (a terminal that shows escape codes as text: Emacs shell, some
    CI log viewers). Not a terminal (a pipe, a file): ``WIDTH`` columns and no colour, so the output is the same
    everywhere. ``width`` (``--width``) overrides the width in both cases.
    """
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        tty = False
    if width is None:
        width = shutil.get_terminal_size((WIDTH, 24)).columns if tty else WIDTH
    color = tty and not os.environ.get("NO_COLOR") and os.environ.get("TERM", "") != "dumb"
    return min(MAX_WIDTH, max(MIN_WIDTH, int(width))), color


def cells(text: str) -> int:
    """Terminal columns ``text`` takes: East Asian wide and fullwidth characters two (Unicode UAX #11), combining
    marks and zero-width characters none, every other one. Line lengths are measured in these, not in ``len``, so a
    CJK model name does not run past the width."""
    n = 0
    for ch in text:
        if unicodedata.combining(ch) or unicodedata.category(ch) in ("Mn", "Me", "Cf"):
            continue
        n += 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1
    return n


def _split(text: str, level: int) -> list[tuple[str, str]]:
    """``text`` cut into ``(separator, piece)`` at the break points of ``level``, never inside a label value:

    * 0: spaces outside parentheses, braces and quotes ("metric:X{...} in FILE" → the series, "in", the file);
    * 1: spaces outside braces and quotes (inside a derived source's parentheses);
    * 2: after the comma between two labels of a label set (no separator is added: the text is unchanged).
    """
    out: list[tuple[str, str]] = []
    paren = brace = 0
    quote = escape = False
    sep, cur = "", ""
    for ch in text:
        if quote:
            cur += ch
            if escape:
                escape = False
            elif ch == "\\":
                escape = True
            elif ch == '"':
                quote = False
            continue
        if ch == " " and brace == 0 and (paren == 0 or level >= 1):
            if cur:
                out.append((sep, cur))
                sep, cur = "", ""
            sep += " "
            continue
        cur += ch
        if ch == '"' and brace:
            quote = True
        elif ch == "{":
            brace += 1
        elif ch == "}":
            brace = max(0, brace - 1)
        elif ch == "(":
            paren += 1
        elif ch == ")":
            paren = max(0, paren - 1)
        elif ch == "," and brace == 1 and level >= 2:
            out.append((sep, cur))
            sep, cur = "", ""
    if cur:
        out.append((sep, cur))
    return out


def _source_atoms(source: str, room: int) -> list[tuple[str, str]]:
    """An evidence source as unbreakable pieces: the whole source when it fits in ``room`` columns, else cut at the
    coarsest break points of :func:`_split` that make its pieces fit (a label longer than a line stays whole)."""
    pieces = [("", source)]
    for level in range(3):
        if all(cells(p) <= room for _, p in pieces):
            break
        finer: list[tuple[str, str]] = []
        for sep, p in pieces:
            parts = _split(p, level) if cells(p) > room else [("", p)]
            finer += [(sep if i == 0 else s, q) for i, (s, q) in enumerate(parts)]
        pieces = finer
    return pieces


def _words(text: str) -> list[tuple[str, str]]:
    return [(" ", w) for w in text.split()]


def _fill(atoms: list[tuple[str, str]], width: int, indent: str, more: str | None = None) -> list[str]:
    """Greedy fill of unbreakable ``(separator, atom)`` pieces: a piece that does not fit moves whole to the next
    line (indented ``more``, default ``indent`` + two spaces); a piece longer than a line stands alone on its
    line rather than being cut."""
    more = indent + "  " if more is None else more
    lines: list[str] = []
    cur, empty = indent, True
    for sep, atom in atoms:
        if not empty and cells(cur) + cells(sep) + cells(atom) > width:
            lines.append(cur)
            cur = more + atom
        else:
            cur += ("" if empty else sep) + atom
        empty = False
    lines.append(cur)
    return lines


def _plain(lines: list[str], style: str | None = None) -> list[list[tuple[str, str | None]]]:
    return [[(t, style)] for t in lines]


class _Text:
    """The text report's lines at one width (segments with styles; rendered plain or coloured at the end)."""

    def __init__(self, width: int) -> None:
        self.width = width
        self.lines: list[list[tuple[str, str | None]]] = []

    def blank(self) -> None:
        self.lines.append([("", None)])

    def line(self, *segments: tuple[str, str | None]) -> None:
        self.lines.append(list(segments))

    def labelled(self, label: str, style: str, rest: str, more: str = "  ") -> None:
        """A heading that starts with a severity ``label`` (coloured ``style``), the rest in bold, wrapped. ``rest``
        starting with a space: the label is a word of its own; else its first word is glued to the label."""
        rest = redact(rest)
        words = rest.split()
        if rest.startswith(" ") or not words:
            atoms = [("", label)] + _words(rest)
        else:
            atoms = [("", label + words[0])] + [(" ", w) for w in words[1:]]
        lines = _fill(atoms, self.width, "", more)
        self.lines.append([(label, style), (lines[0][len(label):], "head")])
        self.lines += _plain(lines[1:], "head")

    def para(self, text: str, indent: str, style: str | None = None) -> None:
        self.lines += _plain(_fill(_words(redact(text)), self.width, indent), style)

    def evidence(self, head: str, value: str, source: str, indent: str) -> None:
        """``- signal (agg) = value   <- SOURCE``: the value (``56,160 tokens``) and the source each kept whole if
        they fit a line, the arrow moving with the source."""
        more = indent + "  "
        source = redact(source)
        room = self.width - len(more) - 3
        atoms = _source_atoms(source, room)
        atoms = _words(redact(head)) + [(" ", redact(value)), ("   ", "<- " + atoms[0][1])] + atoms[1:]
        atoms[0] = ("", atoms[0][1])
        self.lines += _plain(_fill(atoms, self.width, indent, more))

    def source(self, tag: str, source: str, indent: str) -> None:
        """``[n] SOURCE``: the source whole when it fits a line, else cut only at its label and token boundaries
        (:func:`_source_atoms`), as the evidence lines cut theirs."""
        more = indent + "    "
        source = redact(source)
        room = self.width - len(more)
        atoms = []
        for sep, piece in _source_atoms(source, room):
            if cells(piece) <= room or " " not in piece:
                atoms.append((sep, piece))
                continue
            # prose of a derived source: cut at spaces outside quoted label values
            words = re.findall(r'(?:[^\s"]|"(?:[^"\\]|\\.)*")+', piece)
            atoms += [(sep if i == 0 else " ", w) for i, w in enumerate(words)]
        atoms = [("", tag), (" ", atoms[0][1])] + atoms[1:]
        self.lines += _plain(_fill(atoms, self.width, indent, more))

    def items(self, head: str, items: list[str], indent: str = "") -> None:
        """``head item, item, ...``: each item (``ID (class)``) kept whole."""
        atoms = _words(head) + [(" ", it + ("," if i < len(items) - 1 else "")) for i, it in enumerate(items)]
        self.lines += _plain(_fill(atoms, self.width, indent))

    def render(self, color: bool) -> str:
        out = []
        for segs in self.lines:
            out.append("".join(click.style(t, **STYLES[st]) if color and st and t else t for t, st in segs).rstrip())
        return "\n".join(out) + "\n"


def render_text(report: Report, width: int = WIDTH, color: bool = False) -> str:
    """Verdict line first, then the evidence with sources, the fix, and what was ruled out; ``width`` columns
    (evidence sources are never cut inside a label value or token, a source that does not fit moves whole to the
    next line), severity in colour with ``color`` (ANSI through ``click.style``; the caller decides, see
    :func:`terminal_layout`). Secrets are redacted before wrapping, and again in the whole output.

    Several servers: the worst server's verdict, a ranking of all servers, then one section per server.
    """
    out = _Text(max(MIN_WIDTH, width))
    if len(report.instances) > 1:
        _servers(out, report)
    else:
        _one(out, report)
    return out.render(color)


def _one(out: _Text, report: Report) -> None:
    """The on-call order: the verdict and its notes, what to change (the flags to paste, then every fix), the evidence
    (each source numbered once, listed under it), then what else was noted, ruled out, not judged, and the inputs."""
    v = report.verdict
    label = headline_label(v)
    kind = ", a forecast: not yet happened" if v.forecast else ""
    out.labelled(label, label.lower(), f": {v.primary} (confidence {v.confidence}{kind})")
    out.para(v.parts.text(), "  ")
    for n in report.notes:
        out.para(f"note: {n}", "  ")
    for line in trend_lines(report.charts, out.width):
        out.line((line, None))
    flags, fixes = changes(report)
    if fixes:
        out.blank()
        out.line(("What to change:", "head"))
        if flags:
            out.para("paste: " + " ".join(flags), "  ")
        for rule_id, r in fixes:
            out.para(f"- {r} ({rule_id})", "  ")
    fired, side_notes = split_notes(report)
    index, srcs = sources(report)
    if fired:
        out.blank()
        out.line(("Evidence:", "head"))
    for f in fired:
        out.labelled(f"[{f.severity}]", f.severity, f" {f.rule_id} {f.cls}: {f.title}", "    ")
        out.para(f.message, "  ")
        for e in evidence_items(f):
            agg = "" if e.agg == "last" else f" ({e.agg})"
            out.para(f"- {e.signal}{agg} = {_fmt_value(e.value, e.unit)}  [{index[e.source]}]", "    ")
    if srcs:
        out.line(("Sources:", None))
        for i, src in enumerate(srcs, 1):
            out.source(f"[{i}]", src, "  ")
    if side_notes:
        out.blank()
        out.line(("Also noted (not a KV problem):", "head"))
        for f in side_notes:
            out.para(f"- {f.rule_id}: {f.message}", "  ")
    _ruled_out(out, report)
    out.blank()
    out.line(("Inputs:", "head"))
    for i in report.inputs:
        text = f"{i['kind']} {i['name']}: {i['records']} record(s), {i['observations']} observation(s)"
        if i.get("skipped"):
            text += f", {i['skipped']} skipped"
        if i.get("notes"):
            text += "; " + "; ".join(i["notes"])
        out.para(text, "  ")
    w = report.window
    if w.get("start"):
        out.para(f"window: {w['start']} .. {w['end']}", "  ")


SPARK = "▁▂▃▄▅▆▇█"
"""Eight levels, lowest to highest (U+2581..U+2588: one column each, also where ``cells`` measures)."""
SPARK_MAX = 48  # characters of one sparkline at most: a trend, not a chart
TRENDS = (("kv_cache_usage", "KV usage", "max"), ("num_requests_waiting", "waiting", "max"),
          ("prefix_cache_hit_rate", "hit rate", "mean"))
"""The series with a sparkline under the verdict: key, label, how points that share a character combine (peaks of
usage and queue survive; the hit rate is averaged)."""


def sparkline(t: list[float], v: list[float], n: int, combine: str = "max", top: float | None = None) -> str:
    """``v`` as at most ``n`` characters of :data:`SPARK`: one per point when they fit, else the window cut into
    ``n`` equal stretches of time (a stretch with no sample is a space: a gap, a restart), scaled 0 .. ``top``
    (default the largest value; ratios pass 1)."""
    if not v:
        return ""
    if len(v) <= n:
        cells_ = [[x] for x in v]
    else:
        lo, hi = t[0], t[-1]
        cells_ = [[] for _ in range(n)]
        for ti, x in zip(t, v):
            cells_[min(n - 1, int((ti - lo) / (hi - lo) * n)) if hi > lo else 0].append(x)
    top = max(v) if top is None else top
    out = []
    for c in cells_:
        if not c:
            out.append(" ")
            continue
        x = max(c) if combine == "max" else sum(c) / len(c)
        k = 0 if top <= 0 else int(round(max(0.0, min(1.0, x / top)) * (len(SPARK) - 1)))
        out.append(SPARK[k])
    return "".join(out)


def _clock(t: float, day: bool) -> str:
    from datetime import datetime, timezone

    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%m-%d %H:%M:%S" if day else "%H:%M:%S")


def trend_lines(charts, width: int) -> list[str]:
    """One line per key series of the window (:data:`TRENDS`, with at least two timestamped points): label,
    sparkline, then the first and last value with their UTC times and the peak. At most ``width`` columns: when the
    values do not fit beside the sparkline they go to the next line."""
    if charts is None:
        return []
    rows = []
    for key, label, combine in TRENDS:
        s = charts.series.get(key)
        if s is None or len(s.v) < 2:
            continue
        ratio = s.unit == "ratio"
        fmt = (lambda x: f"{x:.1%}") if ratio else (lambda x: f"{x:,.0f}")
        day = _clock(s.t[0], True)[:5] != _clock(s.t[-1], True)[:5]
        peak = max(s.v) if combine == "max" else min(s.v)
        vals = (f"{fmt(s.v[0])} {_clock(s.t[0], day)} → {fmt(s.v[-1])} {_clock(s.t[-1], day)}"
                f" ({'peak' if combine == 'max' else 'low'} {fmt(peak)})")
        rows.append((f"  {label:<9} ", s, combine, 1.0 if ratio else None, vals))
    if not rows:
        return []
    # one sparkline width for all (they share the window's time axis), the values beside them if they fit
    room = width - max(cells(h) + 2 + cells(vals) for h, _, _, _, vals in rows)
    n = min(SPARK_MAX, room) if room >= 12 else min(SPARK_MAX, width - max(cells(r[0]) for r in rows))
    out = []
    for head, s, combine, top, vals in rows:
        spark = sparkline(s.t, s.v, max(1, n), combine, top)
        if room >= 12:
            out.append(f"{head}{spark}  {vals}")
        else:
            out.append(f"{head}{spark}")
            out += _fill(_words(vals), width, " " * 12, " " * 12)
    return out


def _ruled_out(out: _Text, report: Report) -> None:
    """What was ruled out (``verdict.ruled_out``, each with its counter-evidence), the other quiet findings on one
    line (notes and the verdict's own class: nothing found, nothing ruled out), and the rules not judged on one
    line (``--format json`` has every message and reason)."""
    shown = ruled_out(report.verdict, report.findings)
    absent = not_judged(report.findings)
    other = [f for f in report.findings if f.status == "quiet" and f.on_evidence and all(f is not g for g in shown)]
    if shown:
        out.blank()
        out.line(("Ruled out:", "head"))
        for f in shown:
            out.para(f"- {f.rule_id} {f.cls}: {f.message}", "  ")
    if other or absent:
        out.blank()
    if other:
        out.items("Also checked, nothing found:", [f"{f.rule_id} ({f.cls})" for f in other])
    if absent and nothing_judged(report):  # not a vLLM input: one line, not a list of rules
        out.para(f"Not judged: none of the {len(report.findings)} rules found its signals in the input (is it a vLLM "
                 "log or /metrics page?).", "")
    elif absent:
        out.items("Not judged (the input lacks their signals; --format json says which):", [f.rule_id for f in absent])


def _servers(out: _Text, report: Report) -> None:
    v = report.verdict
    insts = report.instances
    bad = [i for i in insts if i.verdict.severity != "ok"]
    label = headline_label(v)
    kind = ", a forecast" if v.forecast else ""
    out.labelled(label, label.lower(), f": {v.primary} (confidence {v.confidence}{kind}) on {insts[0].instance}")
    out.para(f"{len(bad)} of {len(insts)} server(s) with a problem; worst first:", "  ")
    width = min(60, max(cells(i.instance) for i in insts))
    for i in insts:
        label = headline_label(i.verdict)
        rest = _fill([("", f"{i.instance:{width}}  {i.verdict.primary}")] + (_words(f"({i.error})") if i.error else []),
                     out.width, " " * 11, " " * 13)
        out.line(("  ", None), (label, label.lower()), (" " * (9 - len(label)) + rest[0][11:], None))
        out.lines += _plain(rest[1:])
    for i in insts:
        out.blank()
        out.line((f"=== {i.instance} " + "=" * max(3, out.width - cells(i.instance) - 5), "head"))
        _one(out, Report(verdict=i.verdict, findings=i.findings, inputs=i.inputs, window=i.window, notes=i.notes,
                         charts=i.charts))
    if report.notes:
        out.blank()
        for n in report.notes:
            out.para(f"note: {n}", "")
