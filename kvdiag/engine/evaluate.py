"""Evaluate rules over a bundle → findings → one verdict.

Three-valued logic (Kleene): a condition on a signal with no data is *unknown*; ``all`` is false
if any child is false, ``any`` is true if any child is true, otherwise unknown propagates. A rule
whose ``requires`` groups lack data is ``unknown`` with a reason, never silently ``quiet``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
import math
import operator

import numpy as np
import pandas as pd

from ..bundle import Bundle
from ..derive.core import increase
from ..signals import SIGNALS
from .model import Condition, Node, Rule, spec_ok
from .summary import Summary
from .template import Clause, TemplateSyntaxError, leading_conditions, parse

_OPS = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le, "==": operator.eq,
        "!=": operator.ne}
SEVERITY_RANK = {"ok": 0, "warning": 1, "critical": 2}


@dataclass
class Evidence:
    """One number behind a finding: ``value`` in ``unit``, and where it came from (``source``)."""

    signal: str
    value: float | str | None
    unit: str
    source: str
    agg: str = "last"

    def to_dict(self) -> dict:
        v = self.value
        if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
            v = None
        return {"signal": self.signal, "value": v, "unit": self.unit, "source": self.source, "agg": self.agg}


@dataclass
class Finding:
    """The outcome of one rule: ``status`` is ``fires``, ``quiet`` or ``unknown``."""

    rule_id: str
    cls: str
    status: str
    severity: str
    message: str
    evidence: list[Evidence] = field(default_factory=list)
    remedy: list[str] = field(default_factory=list)
    reason: str = ""
    title: str = ""
    priority: int = 50
    confidence: str = "medium"
    on_evidence: bool = True  # quiet on data that was present; False: quiet only because its inputs were absent
    forecast: bool = False  # from a rule that predicts (CAP002): when it fires, the problem has not happened yet

    def to_dict(self) -> dict:
        out = {"rule_id": self.rule_id, "class": self.cls, "status": self.status,
               "severity": self.severity if self.status == "fires" else "ok", "message": self.message,
               "evidence": [e.to_dict() for e in self.evidence], "remedy": list(self.remedy), "reason": self.reason}
        if self.forecast and self.status == "fires":
            out["forecast"] = True
        return out


@dataclass
class Verdict:
    """The one answer: ``primary`` class, its severity and confidence, a one-paragraph ``summary``, the other
    classes that also fired (``secondary``), and the counter-evidence of the judged look-alikes (``ruled_out``:
    ``{"rule_id", "class", "message"}`` of quiet findings, e.g. "partial-block waste ≤ 2 % of the pool")."""

    primary: str
    severity: str
    confidence: str
    summary: str  # given as a Summary (or a plain sentence), kept as its text; ``parts`` holds the Summary
    secondary: list[str] = field(default_factory=list)
    ruled_out: list[dict] = field(default_factory=list)
    forecast: bool = False  # the primary finding is a forecast (CAP002: the pool is filling, not yet full)
    parts: Summary | None = None

    def __post_init__(self) -> None:
        if isinstance(self.summary, Summary):
            self.parts, self.summary = self.summary, self.summary.text()
        elif self.parts is None or self.parts.text() != self.summary:
            self.parts = Summary(str(self.summary))

    def to_dict(self) -> dict:
        out = {"primary": self.primary, "severity": self.severity, "confidence": self.confidence,
               "summary": self.summary, "secondary": list(self.secondary), "ruled_out": list(self.ruled_out)}
        if self.forecast:
            out["forecast"] = True
        return out


# ---------------------------------------------------------------------------------------------
def _rows(bundle: Bundle, cond_signal: str, text_in: tuple[str, ...] = ()) -> pd.DataFrame:
    """One signal's rows in arrival order (``Bundle.signal`` keeps it), filtered by category; memoised per
    bundle state (rules ask for the same signal many times)."""
    memo = bundle.memo()
    key = ("rows", cond_signal, text_in)
    rows = memo.get(key)
    if rows is None:
        rows = bundle.signal(cond_signal)
        if text_in:
            rows = rows[rows["text"].isin(text_in)]
        memo[key] = rows
    return rows


def _aggregate_signal(bundle: Bundle, signal: str, agg: str, text_in: tuple[str, ...] = ()) -> tuple[float, str]:
    """:func:`aggregate` of one signal's rows, memoised per bundle state."""
    memo = bundle.memo()
    key = ("agg", signal, agg, text_in)
    hit = memo.get(key)
    if hit is None:
        hit = aggregate(_rows(bundle, signal, text_in), agg, SIGNALS[signal].kind)
        memo[key] = hit
    return hit


def aggregate(rows: pd.DataFrame, agg: str, kind: str) -> tuple[float, str]:
    """Aggregate one signal's rows (columns as :meth:`Bundle.frame`). Returns ``(value, source)``.

    ``count`` counts rows (events); ``present`` is 1.0 when any row exists; ``increase`` applies
    counter-reset semantics; ``rate`` is increase per second over the time span (needs ``t``).
    Returns NaN when the rows cannot give a value (no rows; fewer than two for ``increase``).
    """
    if agg == "count":
        return float(len(rows)), (rows["source"].iloc[-1] if len(rows) else "")
    if agg == "present":
        return (1.0 if len(rows) else 0.0), (rows["source"].iloc[0] if len(rows) else "")
    vals = rows[rows["value"].notna()]
    if vals.empty:
        return math.nan, ""
    v = vals["value"]
    if agg == "last":
        return float(v.iloc[-1]), vals["source"].iloc[-1]
    if agg == "first":
        return float(v.iloc[0]), vals["source"].iloc[0]
    if agg == "max":
        i = int(np.argmax(v.to_numpy()))
        return float(v.iloc[i]), vals["source"].iloc[i]
    if agg == "min":
        i = int(np.argmin(v.to_numpy()))
        return float(v.iloc[i]), vals["source"].iloc[i]
    if agg == "mean":
        return float(v.mean()), f"{vals['source'].iloc[0]} .. {vals['source'].iloc[-1]}"
    if agg == "p95":
        return float(np.percentile(v.to_numpy(), 95)), f"{vals['source'].iloc[0]} .. {vals['source'].iloc[-1]}"
    if agg in ("increase", "rate"):
        inc = increase(v)
        if math.isnan(inc):
            return math.nan, ""
        src = f"{vals['source'].iloc[0]} .. {vals['source'].iloc[-1]}"
        if agg == "increase":
            return inc, src
        ts = vals["t"].dropna()
        span = float(ts.max() - ts.min()) if len(ts) >= 2 else 0.0
        return (inc / span if span > 0 else math.nan), src
    raise ValueError(agg)


def _holds_for(rows: pd.DataFrame, cond: Condition) -> bool | None:
    vals = rows.dropna(subset=["value"])
    if vals.empty:
        return None
    if vals["t"].isna().any():
        return None  # no timestamps: a duration cannot be judged
    vals = vals.sort_values(["t", "seq"])
    ok = _OPS[cond.op](vals["value"].to_numpy(), cond.value)
    t = vals["t"].to_numpy()
    start = None
    for i, good in enumerate(ok):
        if good:
            start = t[i] if start is None else start
            if t[i] - start >= cond.for_seconds:
                return True
        else:
            start = None
    return False


def _eval_cond(bundle: Bundle, cond: Condition, used: dict, absent: list) -> tuple[bool | None, bool]:
    """``(result, on_evidence)`` of one comparison; ``absent`` collects the signals a result stood in for."""
    rows = _rows(bundle, cond.signal, cond.text_in)
    if cond.agg not in ("count", "present") and rows.empty:
        used[(cond.signal, cond.agg, cond.text_in)] = (math.nan, "")
        if cond.if_missing is not None:
            absent.append(cond.signal)
        return cond.if_missing, False
    if cond.for_seconds:
        return _holds_for(rows, cond), True
    value, src = _aggregate_signal(bundle, cond.signal, cond.agg, cond.text_in)
    used[(cond.signal, cond.agg, cond.text_in)] = (value, src)
    if math.isnan(value):
        return None, False  # data exists but cannot give a value (e.g. one sample for an increase): unknown
    on_evidence = not rows.empty or could_show(bundle, cond.signal)
    if not on_evidence:
        absent.append(cond.signal)
    return bool(_OPS[cond.op](value, cond.value)), on_evidence


def _eval(bundle: Bundle, node: Node, used: dict, absent: list) -> tuple[bool | None, bool]:
    """Kleene value of ``node`` and whether it rests on evidence: a leaf does when it compared data that was
    present, or counted no events in an input that would have shown them (:func:`could_show`); an ``all``/``any``
    does when one of the children that decide its value does."""
    if node.kind == "cond":
        return _eval_cond(bundle, node.cond, used, absent)
    results = [_eval(bundle, c, used, absent) for c in node.children]
    if node.kind == "not":
        r, grounded = results[0]
        return (None if r is None else not r), grounded
    values = [r for r, _ in results]
    if node.kind == "all":
        r = False if any(v is False for v in values) else (None if any(v is None for v in values) else True)
    else:
        r = True if any(v is True for v in values) else (None if any(v is None for v in values) else False)
    return r, r is not None and any(g for v, g in results if v is r)


_METRIC_KINDS = ("metrics-file", "metrics-url", "prometheus")
_DERIVED_EVENTS = {"cuda_oom_phase": "log", "startup_crash": "log", "startup_segments": "log",
                   "counter_resets": "metrics"}  # derive/ / collect/logs.py build these from log lines / counters


def could_show(bundle: Bundle, signal: str) -> bool:
    """Whether the bundle read an input that would have shown ``signal`` had it happened: a vLLM log (with at least
    one line) for the log's events, a /metrics page, scrape or Prometheus series for metrics. "No CUDA OOM" is
    evidence after reading a log; without a log it is only the absence of one."""
    kinds = _shown_by(signal)
    return any(i.kind in kinds and i.records > 0 for i in bundle.inputs)


def _shown_by(signal: str) -> set[str]:
    """The input kinds (``log``, ``metrics-file``, ...) that carry ``signal`` (or what it is derived from)."""
    sig = SIGNALS[signal]
    kinds = set()
    if sig.logs or _DERIVED_EVENTS.get(signal) == "log":
        kinds.add("log")
    if sig.metrics or _DERIVED_EVENTS.get(signal) == "metrics":
        kinds.update(_METRIC_KINDS)
    return kinds


def _leaf_signals(node: Node) -> list[str]:
    if node.kind == "cond":
        return [node.cond.signal]
    out: list[str] = []
    for c in node.children:
        out += _leaf_signals(c)
    return out


TRACE: set | None = None
"""When a set, :func:`render_first` adds ``(where, variant)`` and every shown clause branch ``(where, variant,
branch id)`` to it (``tools/rule_templates.py`` and ``tests/test_rule_templates.py`` count what the cases render)."""


def _field(f, bundle: Bundle, params: dict) -> tuple[str, bool]:
    """One field as text, and whether its number was missing (then the text is ``n/a``)."""
    name, agg, spec = f.name, f.agg, f.spec
    if agg is None:
        if name in params:
            val = params[name]
        else:
            return f.raw, False
    else:
        if name not in SIGNALS:
            return f.raw, False
        rows = _rows(bundle, name)
        if agg == "text":
            texts = [t for t in rows["text"] if t]
            if not texts:
                return "n/a", True
            return str(texts[-1]), False
        val, _ = _aggregate_signal(bundle, name, agg) if (len(rows) or agg in ("count", "present")) \
            else (math.nan, "")
        if isinstance(val, float) and math.isnan(val):
            return "n/a", True
    if spec == "gib":
        return f"{float(val) / 2**30:.2f} GiB", False
    if spec in ("min", "pctmin") and isinstance(val, (int, float)) and math.isinf(val):
        return ("inf" if val > 0 else "-inf"), False
    if spec == "min":
        m = float(val) / 60
        return (f"{m:.1f}" if abs(m) < 10 else f"{m:,.0f}"), False
    if spec == "pctmin":
        return f"{float(val) * 60:+.1%}", False
    if not spec_ok(spec):  # the loader rejects these; never let a template ask for a huge width
        return str(val), False
    if isinstance(val, (int, float)) and math.isinf(val):
        return ("inf" if val > 0 else "-inf"), False
    if isinstance(val, (int, float)) and abs(val) >= 1e15 and spec.rstrip("%").endswith(("f", "d", "n", "")):
        return format(float(val), ".3g"), False  # an absurd count stays one short token, not 300 digits
    try:
        return format(val, spec), False
    except (ValueError, TypeError):
        return str(val), False


def _has(bundle: Bundle, name: str, agg: str) -> bool:
    """Whether ``{name.agg}`` would print a number (a clause condition ``?name.agg`` / ``!name.agg``)."""
    if name not in SIGNALS:
        return False
    rows = _rows(bundle, name)
    if agg == "text":
        return any(t for t in rows["text"])
    if not len(rows) and agg not in ("count", "present"):
        return False
    val, _ = _aggregate_signal(bundle, name, agg)
    return not (isinstance(val, float) and math.isnan(val))


def _fill(pieces: tuple, bundle: Bundle, params: dict, shown: list) -> tuple[str, bool]:
    """Pieces as text, and whether a field directly among them lacked data; clauses pick their branch."""
    out: list[str] = []
    missing = False
    for p in pieces:
        if isinstance(p, str):
            out.append(p)
        elif isinstance(p, Clause):
            for i, b in enumerate(p.branches):
                if not all(_has(bundle, s, a) == want for want, s, a in b.conds):
                    continue
                inner: list = []
                text, gap = _fill(b.pieces, bundle, params, inner)
                if not gap:
                    out.append(text)
                    shown += [f"{p.path}/{i}"] + inner
                    break
        else:
            text, gap = _field(p, bundle, params)
            out.append(text)
            missing = missing or gap
    return "".join(out), missing


def render(template: str, bundle: Bundle, params: dict, strict: bool = False, shown: list | None = None) -> str | None:
    """Fill ``{signal.agg:fmt}`` and ``{param}`` fields and ``[[ … ]]`` clauses of a message or remedy template.

    Units follow the format spec: ``%`` for ratios, ``,.0f`` for tokens, ``gib`` (a kvdiag spec)
    prints bytes as GiB with two decimals, ``min`` seconds as minutes (one decimal below 10), ``pctmin`` a ratio per
    second as a signed percentage per minute (``+3.1%``). A template may start with conditions (``?signal.agg: ``):
    when one does not hold it counts as a missing number. A clause whose numbers are missing drops out
    (``kvdiag/engine/template.py``). A field outside every clause without data prints ``n/a``; with
    ``strict=True`` the whole template is dropped instead (returns ``None``), so a remedy never
    shows a number kvdiag does not have. A format spec that ``model.spec_ok`` refuses (unknown letters,
    width or precision above 64) prints the plain value, so rendering never builds a huge string.
    ``shown``, when a list, receives the ids of the clause branches shown.
    """
    conds, body = leading_conditions(template)
    try:
        pieces = parse(body)
    except TemplateSyntaxError:  # the loader refuses these; render such a text as it stands
        pieces = (body,)
    inner: list = []
    out, missing = _fill(pieces, bundle, params, inner)
    missing = missing or not all(_has(bundle, s, a) == want for want, s, a in conds)
    if strict and missing:
        return None
    if shown is not None:
        shown += inner
    return out


def render_first(alternatives: list[str], bundle: Bundle, params: dict, drop: bool = False,
                 where: tuple = ()) -> str | None:
    """Render the first variant whose fields outside clauses all have data; else the last one with ``n/a``
    (or ``None`` with ``drop=True``, used for remedies). ``where`` (rule id, key) names it in :data:`TRACE`."""
    chosen = None
    shown: list = []
    for i, template in enumerate(alternatives):
        out = render(template, bundle, params, strict=True, shown=shown)
        if out is not None:
            chosen = i
            break
    if chosen is None and not drop:
        chosen = len(alternatives) - 1
        out = render(alternatives[-1], bundle, params, shown=shown)
    if chosen is None:
        return None
    if TRACE is not None and where:
        TRACE.add((*where, chosen, ""))
        TRACE.update((*where, chosen, b) for b in shown)
    return out


def evaluate_rule(rule: Rule, bundle: Bundle) -> Finding:
    """Run one rule over a bundle (rules do no I/O)."""
    missing_groups = [g for g in rule.requires if not any(bundle.has(s) for s in g)]
    finding = Finding(rule_id=rule.id, cls=rule.cls, status="unknown", severity=rule.severity, message="",
                      title=rule.title, priority=rule.priority, confidence=rule.confidence, forecast=rule.forecast)
    if missing_groups:
        names = "; ".join(" or ".join(g) for g in missing_groups)
        finding.reason = f"missing signal: {names}"
        finding.message = f"{rule.title}: cannot judge (no {names})"
        return finding
    used: dict = {}
    absent: list[str] = []
    result, finding.on_evidence = _eval(bundle, rule.when, used, absent)
    status = {True: "fires", False: "quiet", None: "unknown"}[result]
    finding.status = status
    if status == "quiet" and not finding.on_evidence:
        names = ", ".join(dict.fromkeys(absent)) or "the rule's signals"
        no_log = any("log" in _shown_by(s) for s in absent) and not any(
            i.kind == "log" and i.records > 0 for i in bundle.inputs)
        finding.reason = (f"no evidence: quiet only because the inputs hold no {names}"
                          + (" (no vLLM log was read)" if no_log else "") + "; not ruled out")
    if status == "unknown":
        lacking = sorted({k[0] for k, (v, _) in used.items() if isinstance(v, float) and math.isnan(v)})
        finding.reason = "not enough data for: " + (", ".join(lacking) if lacking else "the rule's conditions")
    finding.message = render_first(rule.quiet if status == "quiet" else rule.message, bundle, rule.params,
                                   where=(rule.id, "quiet" if status == "quiet" else "message"))
    # evidence: declared items first, then every signal the conditions looked at
    items: list[tuple[str, str]] = []
    for item in rule.evidence:
        sig, _, agg = str(item).partition(".")
        items.append((sig, agg or "last"))
    for (sig, agg, _text), _val in used.items():
        if (sig, agg) not in items:
            items.append((sig, agg))
    for sig, agg in items:
        rows = _rows(bundle, sig)
        if rows.empty and agg not in ("count",):
            continue
        if agg == "count" and rows.empty:
            continue
        value, src = _aggregate_signal(bundle, sig, agg)
        if isinstance(value, float) and math.isnan(value):
            continue
        unit = SIGNALS[sig].unit
        if agg == "count":
            unit = "count"
            texts = sorted({t for t in rows["text"] if t})
            if texts:
                value = float(value)
                src = src + f" ({', '.join(texts)})"
        finding.evidence.append(Evidence(sig, value, unit, src, agg))
    if status == "fires":
        finding.remedy = [r for r in (render_first(alts, bundle, rule.params, drop=True, where=(rule.id, f"remedy[{i}]"))
                                      for i, alts in enumerate(rule.remedy)) if r]
    return finding


def evaluate(rules: list[Rule], bundle: Bundle) -> list[Finding]:
    """All findings, firing first (by severity, then priority), then quiet, then unknown."""
    findings = [evaluate_rule(r, bundle) for r in rules]
    order = {"fires": 0, "quiet": 1, "unknown": 2}
    findings.sort(key=lambda f: (order[f.status], -SEVERITY_RANK[f.severity], -f.priority, f.rule_id))
    return findings


def unexplained_failures(bundle: Bundle) -> list[str]:
    """Failure events in the bundle (CUDA OOMs, capacity errors, ...) as one-line descriptions with sources.

    Used to refuse a ``healthy`` verdict when the log shows a failure that no rule explains.
    """
    out = []
    for sig, label in (("cuda_oom", "CUDA out of memory"), ("sampler_warmup_oom", "OOM warming up the sampler"),
                       ("free_memory_below_request", "free GPU memory below the requested budget at start"),
                       ("kv_capacity_error", "KV-capacity start-up error"),
                       ("weights_load_failed", "weights failed to load"),
                       ("kv_blocks_exhausted", "the V0 block manager ran out of free KV blocks"),
                       ("memory_profiling_error", "memory profiling error (free GPU memory changed while vLLM profiled: "
                                                  "another process released memory; not a KV problem)"),
                       ("cuda_error", "CUDA error, not a memory problem")):
        rows = bundle.signal(sig)
        for _, r in rows.iterrows():
            phase = f" during {r['text']}" if sig == "cuda_oom" and r["text"] else ""
            what = f": {r['text']}" if sig == "cuda_error" and r["text"] else ""
            out.append(f"{label}{phase}{what} ({r['source']})")
    # lines that look like memory trouble but no event understood (the log collector lists them in its notes)
    for _, r in bundle.signal("unrecognised_memory_line").iterrows():
        out.append(f"{r['value']:,.0f} memory-related line(s) kvdiag does not understand, the first: "
                   f"'{r['text']}' ({r['source']})")
    return out


def rules_out(finding: Finding, primary: str) -> bool:
    """The one meaning of "ruled out", in every format (``verdict.ruled_out``; the text and Markdown renderers list
    that): the finding was judged quiet on evidence that was present (``on_evidence``), and its class is neither
    the verdict's own nor ``healthy`` (a quiet note rules out nothing). A rule quiet only because its inputs were
    absent ("no OOM while loading the weights" when no log was read) had no evidence: it is not ruled out."""
    return finding.status == "quiet" and finding.on_evidence and finding.cls not in (primary, "healthy")


RUNTIME_CLASSES = ("capacity_pressure", "prefix_cache_eviction", "partial_block_waste", "queueing")
"""Classes judged from a serving server's signals; ``healthy`` needs at least one of them judged."""


def verdict(findings: list[Finding], unexplained: list[str] | None = None) -> Verdict:
    """One primary class from the findings.

    * Some problem rule fires (severity warning or critical): the firing finding with the highest severity,
      then priority (more specific rules have higher priority: a start-up failure explains the runtime
      symptoms after it). The other firing classes become ``secondary``.
    * None fires but the input shows a failure (``unexplained``): ``inconclusive`` — never ``healthy``.
    * None fires and only start-up rules could be judged: ``inconclusive`` (a clean start says nothing of
      the serving state).
    * None fires, at least one runtime rule was judged: ``healthy`` (severity ok); firing ``healthy`` notes (severity
      ok, e.g. "the hybrid KV-size line is not the physical pool") are added to the summary.
    * Nothing could be judged: ``inconclusive``.

    ``ruled_out`` lists the findings :func:`rules_out` accepts, the counter-evidence for the look-alikes: those whose
    message quotes a number ("partial-block waste 0.4 % of the pool") first, then in the findings' order.
    """
    fired = [f for f in findings if f.status == "fires" and f.severity != "ok"]
    notes = [f for f in findings if f.status == "fires" and f.severity == "ok"]
    judged = [f for f in findings if f.status != "unknown"]

    def ruled_out(primary: str) -> list[dict]:
        out = [f for f in findings if rules_out(f, primary)]
        out.sort(key=lambda f: not any(ch.isdigit() for ch in f.message))  # messages that quote a number first
        return [{"rule_id": f.rule_id, "class": f.cls, "message": f.message} for f in out]

    if fired:
        top = max(fired, key=lambda f: (SEVERITY_RANK[f.severity], f.priority))
        others = list(dict.fromkeys(f.cls for f in fired if f is not top and f.cls != top.cls))
        summary = Summary(top.message, also_firing=tuple(others))
        return Verdict(top.cls, top.severity, top.confidence, summary, others, ruled_out(top.cls), forecast=top.forecast)
    if unexplained:
        more = f" and {len(unexplained) - 1} more" if len(unexplained) > 1 else ""
        return Verdict("inconclusive", "ok", "low",
                       Summary("The input shows a failure no rule explains", (f"{unexplained[0]}{more}",),
                               after=("Not judged healthy.",)), [], ruled_out("inconclusive"))
    if judged and not any(f.status == "quiet" and f.on_evidence for f in judged):
        # every quiet rule was quiet only because its inputs were absent: nothing was judged (Nagios UNKNOWN). A
        # firing note (severity ok: "the usage gauge is split across processes") judges no problem either; it is
        # kept beside the verdict
        if not notes:
            return Verdict("inconclusive", "ok", "low",
                           f"Nothing could be judged: {len(findings)} rule(s), none with the signals it needs in the "
                           "input.", [], [])
        return Verdict("inconclusive", "ok", "low",
                       Summary(f"Nothing could be judged: {len(findings) - len(notes)} rule(s), none with the "
                               "signals it needs in the input.", notes=tuple(n.message for n in notes)), [], [])
    runtime_judged = [f for f in judged if f.cls in RUNTIME_CLASSES and (f.status == "fires" or f.on_evidence)]
    if judged and not runtime_judged and not notes:
        return Verdict("inconclusive", "ok", "low",
                       f"Start-up looks sound ({len(judged)} start-up rule(s) quiet), but the input holds no runtime "
                       "signals (KV usage, waiting queue, preemptions), so the server is not judged healthy.",
                       [], ruled_out("inconclusive"))
    if judged:
        unknown = len(findings) - len(judged)
        conf = "high" if unknown == 0 else ("medium" if len(judged) >= unknown else "low")
        bare = sum(1 for f in judged if f.status == "quiet" and not f.on_evidence)  # shown as not judged
        counts = f"{len(judged) - len(notes) - bare} rule(s) judged quiet" + (
            f", {unknown + bare} could not be judged (missing signals)" if unknown or bare else "")
        summary = Summary("No KV-cache or GPU-memory problem found", (counts,), notes=tuple(n.message for n in notes))
        return Verdict("healthy", "ok", conf, summary, [], ruled_out("healthy"))
    return Verdict("inconclusive", "ok", "low",
                   "Nothing could be judged: the inputs hold none of the signals the rules need.")


# --- windows too short, and healthy only on positive evidence (issue 25) ------------------------------------------
_TREND = (180.0, "a hit-rate trend (three thirds of at least a minute each)")
_OCCUPANCY = (120.0, "a token-occupancy estimate (several full-pool instants over minutes)")
_USAGE_TREND = (120.0, "a usage trend (8 samples over 2 minutes)")
WINDOW_NEEDS: dict[str, tuple[float, str]] = {
    **{s: _TREND for s in ("prefix_cache_hit_rate_early", "prefix_cache_hit_rate_late", "prefix_cache_hit_rate_drop",
                           "prefix_cache_hit_rate_low_load", "prefix_cache_hit_rate_high_load",
                           "prefix_cache_hit_rate_load_drop", "prefix_cache_hits_per_second_early",
                           "prefix_cache_hits_per_second_late", "prefix_cache_hits_per_second_ratio",
                           "prefix_cache_queries_per_second_early", "prefix_cache_queries_per_second_late",
                           "prefix_cache_queries_per_second_ratio", "prefix_cache_retention_seconds",
                           "prefix_cache_hit_rate_window")},
    **{s: _OCCUPANCY for s in ("kv_token_occupancy", "kv_empty_slots_ratio")},
    **{s: _USAGE_TREND for s in ("kv_cache_usage_slope", "kv_cache_usage_slope_t", "kv_cache_usage_slope_recent",
                                 "kv_cache_usage_trend_samples", "kv_cache_usage_trend_seconds",
                                 "kv_cache_usage_trend_rise", "kv_full_eta_seconds")},
}
"""Signals a rule can only judge over a window at least this long (seconds), with what they estimate."""


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 120 else f"{seconds:.0f} s"


def short_window(findings: list[Finding], rules: list[Rule], bundle: Bundle) -> str:
    """Rules that need a longer window than the bundle's (``window_seconds``) are not judged on it: a quiet finding
    that reads a signal of :data:`WINDOW_NEEDS` becomes ``unknown`` (never ruled out), with the window it would need.
    Returns one note naming those classes and how long a window would judge them ('' when the window is long enough
    or has no runtime samples)."""
    got = bundle.last("window_seconds")
    if got is None:
        return ""
    window = got[0]
    by_id = {r.id: r for r in rules}
    needs: dict[str, tuple[float, str]] = {}
    for f in findings:
        rule = by_id.get(f.rule_id)
        if rule is None or f.status == "fires" or f.cls == "healthy":
            continue
        wanted = [WINDOW_NEEDS[s] for s in _leaf_signals(rule.when) if s in WINDOW_NEEDS]
        if not wanted:
            continue
        secs, what = max(wanted)
        if window >= secs:
            continue
        short = f"window {window:.0f} s too short: {what} needs at least {_minutes(secs)}"
        if f.status == "unknown":  # keep its own reason (the missing signal), and say the window would not do either
            f.reason = f"{f.reason}; {short}" if f.reason else short
        else:
            f.status, f.on_evidence = "unknown", False
            f.reason = f"{short}; not ruled out"
            f.message = f"{f.title}: cannot judge on a {window:.0f} s window ({what} needs at least {_minutes(secs)})"
        if f.cls not in needs or needs[f.cls][0] < secs:
            needs[f.cls] = (secs, what)
    if not needs:
        return ""
    parts = [f"{cls} ({what} needs at least {_minutes(secs)})" for cls, (secs, what) in needs.items()]
    longest = max(s for s, _ in needs.values())
    return (f"window {window:.0f} s too short to judge {', '.join(parts)}: not ruled out; a window of at least "
            f"{_minutes(longest)} judges them")


def not_keeping_up(bundle: Bundle) -> list[str]:
    """Why the window does not show the server keeping up (empty: it does): a preemption, a queue that rose, requests
    waiting at vLLM's near-full level, or a queue whose growth the window cannot tell."""
    out = []
    pre = bundle.signal("num_preemptions")
    if len(pre) >= 2:
        inc, _ = aggregate(pre.sort_values("seq"), "increase", "counter")
        if inc > 0:
            out.append(f"{inc:.0f} preemption(s) in the window")
    elif len(pre) == 1 and pre["value"].iloc[0] > 0:  # one page: only a counter still at 0 shows none happened
        out.append(f"{pre['value'].iloc[0]:.0f} preemption(s) since the server started, and one sample cannot tell "
                   "whether any fell in the window (2 samples are needed)")
    w = bundle.signal("num_requests_waiting").dropna(subset=["value"])
    if not w.empty:
        timed = w[w["t"].notna()].sort_values("t")
        w = timed if len(timed) else w.sort_values("seq")
        first, last = float(w["value"].iloc[0]), float(w["value"].iloc[-1])
        g = bundle.last("queue_grows")
        if g and g[0] >= 1:  # kvdiag/derive/queue.py grows(): rose and waiting on the last two samples, or never emptied
            out.append(f"the waiting queue grew {first:.0f} → {last:.0f} ({g[1]})")
        near = bundle.last("num_requests_waiting_near_full")
        level = bundle.last("kv_near_full_level")
        if near and near[0] > 0:
            out.append(f"{near[0]:.0f} request(s) waited with KV usage at or above {level[0]:.1%}, the level at which "
                       "vLLM stops admitting" if level else f"{near[0]:.0f} request(s) waited with the pool near full")
        if float(w["value"].max()) > 0 and not bundle.has("queue_grows"):
            out.append(f"{float(w['value'].max()):.0f} request(s) waiting, and the window is too short to tell whether "
                       "the queue grows (3 timestamped samples are needed)")
    return out


def require_keeping_up(v: Verdict, bundle: Bundle, window_note: str = "") -> Verdict:
    """``healthy`` only on positive evidence: a healthy verdict on a window that does not show the server keeping up
    (:func:`not_keeping_up`) becomes ``inconclusive``, saying why and which classes a short window could not judge."""
    if v.primary != "healthy":
        return v
    why = not_keeping_up(bundle)
    if not why:
        return v
    summary = Summary("Not judged healthy", tuple(why), after=(f"The {window_note}.",) if window_note else ())
    return Verdict("inconclusive", "ok", "low", summary, [], v.ruled_out)
