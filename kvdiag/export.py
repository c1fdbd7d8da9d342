"""``kvdiag rules export --format prometheus``: the rules that PromQL can express, as Prometheus alerting rules.

A rule is exported only when every condition reads a raw /metrics signal with an aggregation PromQL has
(``max min mean last increase rate p95``), or one of the trend signals of :mod:`kvdiag.derive.trend` (below), and the
tree uses ``all``/``any`` (a ``not`` child of an ``all`` becomes ``unless``); its selectors match both the
``vllm:`` names vLLM writes and the ``vllm_`` names a Prometheus 2.x server may store, and every metric name
the signal had across versions (``{__name__=~"vllm[:_](kv|gpu)_cache_usage_perc"}``). Conditions that read
log events are dropped from an ``any`` (PromQL cannot see logs) and named in a comment; rules that need logs,
derived signals or the capacity model are listed in comments instead of being exported wrongly.

Semantics match kvdiag's engine for a window ``W`` (default 5m): ``agg_over_time(metric[W])``, series combined
by ``max`` for ratios and ``sum`` for counts, ``by (job, instance, model_name, engine)`` (:data:`IDENTITY`: the
alert keeps the labels an Alertmanager routes on; an instance with several engines is judged per engine, where
kvdiag combines them), thresholds as in the rule's ``params``. A missing series makes a PromQL comparison empty
(false), which matches ``if_missing: false``; ``if_missing: true`` becomes ``unless`` of the opposite comparison;
where kvdiag would say *unknown*, Prometheus stays quiet.

Window facts (``prefix_cache_hit_rate_early``/``_late``/``_drop``, hits and queries per second and their ratios,
the hit rate at low / high load) are recording rules (:func:`recording_rules`, ``level:metric:operations``) with the
PromQL :mod:`kvdiag.collect.prometheus` asks at the window's end: the last third ``[W/3]``, the first third
``[W/3] offset 2W/3``; V0's cumulative hit-rate gauge × prompt tokens through ``deriv`` over a subquery.
Healthy look-alike notes become ``severity="info"`` alerts.

Trend signals (rule CAP002, the forecast of a full pool) map onto PromQL's own regression over the trend window
``T`` = :data:`kvdiag.derive.trend.TREND_SECONDS` (5m, whatever ``--window`` says): ``kv_cache_usage_slope`` →
``deriv(u[T])``, ``kv_full_eta_seconds <= H`` → ``predict_linear(u[T], H) >= 1``, ``kv_cache_usage_trend_samples``
→ ``count_over_time(u[T])``, ``kv_cache_usage_trend_seconds`` → the span of the samples' timestamps (a subquery),
``kv_cache_usage_trend_rise`` → slope × that span, ``kv_cache_usage_slope_recent`` → ``deriv(u[T/2])``, and
``kv_cache_usage_slope_t >= k`` → ``deriv² · var(t) · (n − 2 + k²) >= k² · stdvar_over_time(u[T])`` (slope / its
standard error ≥ k, squared), with ``var(t)`` of ``n`` regularly spaced samples filling ``T``: ``(T/n)² (n² − 1)/12``.
Two differences from kvdiag: Prometheus does not cut the fit at a restart, and ``var(t)`` assumes regular scrapes.
"""

from __future__ import annotations

import math
import re

import yaml

from .engine.model import Node, Rule
from .errors import InputError
from .derive.trend import TREND_SECONDS
from .signals import METRIC_TO_SIGNAL, SIGNALS
from . import vllm_metrics as vm

_AGG_FN = {"max": "max_over_time", "min": "min_over_time", "mean": "avg_over_time", "last": "last_over_time",
           "increase": "increase", "rate": "rate"}
_MAX_COMBINED = vm.across_series_max() - {"process_start_time"}
_OP = {">": ">", ">=": ">=", "<": "<", "<=": "<=", "==": "==", "!=": "!="}


class NotExportable(Exception):
    """The rule (or a condition) cannot be written in PromQL; the message says why."""


def metric_names(signal: str) -> list[str]:
    """Every /metrics name of ``signal`` in both spellings, the current vLLM name first.

    Raises:
        NotExportable: the signal has no /metrics source (log-only, derived, or a fact).
    """
    if signal not in set(METRIC_TO_SIGNAL.values()) or SIGNALS[signal].kind not in ("gauge", "counter"):
        raise NotExportable(f"{signal} is not a /metrics series")
    return vm.spelled(signal)


def _fmt(value: float) -> str:
    if not math.isfinite(value):  # the loader rejects these; never write `nan`/`inf` into PromQL
        raise NotExportable(f"threshold {value} is not a finite number")
    return f"{value:g}"


def write_output(path: str, text: str, option: str) -> None:
    """Write ``text`` to ``path`` whole or not at all (a temporary file in the same folder, then renamed).

    Raises:
        InputError: ``path`` is a folder, its folder is missing, or it cannot be written
            (``option: path: what was expected``).
    """
    from .fileio import atomic_write, check_output_target

    target = check_output_target(path, option)
    folder = target.parent
    if not folder.is_dir():
        raise InputError(f"{option} {path}: folder {folder} does not exist")
    try:
        atomic_write(target, text)
    except OSError as exc:
        raise InputError(f"{option} {path}: cannot write: {exc.strerror or exc}") from None


#: the labels that name one vLLM engine of one server; every aggregation keeps them, every join matches on them
IDENTITY = ("job", "instance", "model_name", "engine")
_BY = "by (" + ", ".join(IDENTITY) + ")"
_ON = "on (" + ", ".join(IDENTITY) + ")"
#: recording-rule level (Prometheus convention ``level:metric:operations``): per engine of an instance, keeping
#: the labels of :data:`IDENTITY`
LEVEL = "instance_engine"
_SEVERITY = {"critical": "critical", "warning": "warning", "ok": "info"}
_NEGATE = {">": "<=", ">=": "<", "<": ">=", "<=": ">", "==": "!=", "!=": "=="}

_T = f"{TREND_SECONDS:g}s"
_HALF = f"{TREND_SECONDS / 2:g}s"
_SPAN = f"(max_over_time(timestamp({{m}})[{_T}:]) - min_over_time(timestamp({{m}})[{_T}:]))"
#: trend signals (kvdiag/derive/trend.py) as PromQL over one kv_cache_usage series ``{m}``
_TREND_PROMQL = {
    "kv_cache_usage_slope": f"deriv({{m}}[{_T}])",
    "kv_cache_usage_slope_recent": f"deriv({{m}}[{_HALF}])",
    "kv_cache_usage_trend_samples": f"count_over_time({{m}}[{_T}])",
    "kv_cache_usage_trend_seconds": _SPAN,
    "kv_cache_usage_trend_rise": f"(deriv({{m}}[{_T}]) * {_SPAN})",
}
_TREND_SIGNALS = set(_TREND_PROMQL) | {"kv_full_eta_seconds", "kv_cache_usage_slope_t"}


def _seconds(text: str) -> float:
    from .durations import parse_duration

    return parse_duration(text)


def _dur(seconds: float) -> str:
    """A PromQL duration: whole seconds, or milliseconds when the value has a fraction (``100s``, ``96667ms``)."""
    return f"{int(seconds)}s" if float(seconds).is_integer() else f"{int(round(seconds * 1000))}ms"


class Window:
    """The ranges one export reads: the window ``W``, its third ``T`` (the thirds of the prefix-cache rules: the
    last third ``[T]``, the first ``[T] offset 2T``, as :mod:`kvdiag.collect.prometheus` asks at the window's end)
    and the subquery resolution ``res`` (V0's hit rate × prompt tokens)."""

    def __init__(self, window: str = "5m", res: str = "15s") -> None:
        self.window = window
        self.seconds = _seconds(window)
        self.third = _dur(round(self.seconds / 3))          # collect/prometheus.py: _dur(window / 3)
        self.offset = _dur(round(self.seconds * 2 / 3, 3))  # early third ends at start + W/3 = end - 2W/3
        self.res = res


#: the metric part of the recording rules' names (``level:metric:operations``): kvdiag's names, not vLLM's
_RECORDED = "vllm_prefix_cache"
_HITS = vm.spelled("prefix_cache_hits")
_QUERIES = vm.spelled("prefix_cache_queries")
#: histogram counts read as counters: signal -> the /metrics name without the prefix
_HISTOGRAM_COUNTS = {"kv_block_idle_before_evict_count": vm.histogram_base("kv_block_idle_before_evict") + "_count"}


def _any_of(names: list[str]) -> str:
    return "{__name__=~\"" + "|".join(re.escape(n) for n in names) + "\"}"


def _per_name(template: str, names: list[str]) -> str:
    """``template`` (with ``{m}``) once per metric name, aggregated by the identity labels, joined by ``or``."""
    terms = [f"sum {_BY} ({template.format(m=m)})" for m in names]
    return terms[0] if len(terms) == 1 else "(" + " or ".join(terms) + ")"


def _rate_expr(which: str, w: Window, early: bool) -> str:
    """Prefix-cache hit or query tokens per second over a third (V1 counters; V0: the cumulative hit-rate gauge ×
    prompt tokens, de-cumulated with ``deriv`` over a subquery; prompt tokens for the queries)."""
    off = f" offset {w.offset}" if early else ""
    v1 = _per_name(f"rate({{m}}[{w.third}]{off})", _HITS if which == "hits" else _QUERIES)
    prompt = metric_names("prompt_tokens")  # V0: one name, in both spellings
    if which == "hits":
        v0 = " or ".join(f"sum {_BY} (deriv(({r} * {p})[{w.third}:{w.res}]{off}))"
                         for r, p in zip(metric_names("prefix_cache_hit_rate_cumulative"), prompt))
    else:
        v0 = " or ".join(f"sum {_BY} (rate({p}[{w.third}]{off}))" for p in prompt)
    return f"{v1} or (({v0}) unless {_ON} {_any_of(_HITS)})"


def _load_records(w: Window) -> list[dict]:
    """PFX002's split of the hit rate by KV usage, as :mod:`kvdiag.collect.prometheus` computes it: per-step
    increases (range ``s``: four sub-steps, at least 60 s) summed over the window where usage was below
    :data:`~kvdiag.derive.prefix.LOW_LOAD` / at least :data:`~kvdiag.derive.prefix.HIGH_LOAD`; a side's hit rate
    only when it holds :data:`~kvdiag.derive.prefix.MIN_SHARE` of the window's queries."""
    from .thresholds import HIGH_LOAD, LOW_LOAD, MIN_SHARE

    sub_step = max(_seconds(w.res), math.ceil(w.seconds / 500))
    rng = _dur(max(4 * sub_step, 60.0))
    sub = f"[{w.window}:{_dur(sub_step)}]"
    usage = "(" + " or ".join(f"max {_BY} ({m})" for m in metric_names("kv_cache_usage")) + ")"
    ops = f"sum_over_time{w.window}_increase{rng}"
    out = []

    def summed(names: list[str], cond: str) -> str:
        terms = []
        for m in names:
            inc = f"sum {_BY} (increase({m}[{rng}]))"
            if cond:
                inc = f"({inc} and {_ON} ({usage} {cond}))"
            terms.append(f"sum_over_time({inc}{sub})")
        return "(" + " or ".join(terms) + ")"

    out.append({"record": f"{LEVEL}:{_RECORDED}_queries:{ops}", "expr": summed(_QUERIES, "")})
    for side, cond in (("low_load", f"< {_fmt(LOW_LOAD)}"), ("high_load", f">= {_fmt(HIGH_LOAD)}")):
        for which, names in (("hits", _HITS), ("queries", _QUERIES)):
            out.append({"record": f"{LEVEL}:{_RECORDED}_{which}_{side}:{ops}", "expr": summed(names, cond)})
        q_side = f"{LEVEL}:{_RECORDED}_queries_{side}:{ops}"
        out.append({"record": f"{LEVEL}:{_RECORDED}_hit_ratio_{side}:{ops}",
                    "expr": f"({LEVEL}:{_RECORDED}_hits_{side}:{ops} / {q_side}) and {_ON} "
                            f"({q_side} / {LEVEL}:{_RECORDED}_queries:{ops} >= {_fmt(MIN_SHARE)})"})
    return out


def _load_record(side: str, w: Window) -> str:
    return next(r["record"] for r in _load_records(w)
                if r["record"].startswith(f"{LEVEL}:{_RECORDED}_hit_ratio_{side}:"))


def recording_rules(w: Window) -> list[dict]:
    """The shared maths of the prefix-cache alerts as recording rules (``level:metric:operations``).

    Hit and query tokens per second in the last third (``rate{T}``) and the first third (``rate{T}_offset{2T}``) of
    the window, and their ratio, the hit rate (``Δhits/Δqueries`` = ``rate/rate`` over one range).
    """
    out = []
    for which in ("hits", "queries"):
        for early in (False, True):
            out.append({"record": _record(which, w, early), "expr": _rate_expr(which, w, early)})
    for early in (False, True):
        out.append({"record": _record("hit_ratio", w, early),
                    "expr": f"{_record('hits', w, early)} / {_record('queries', w, early)}"})
    return out + _load_records(w)


def _record(which: str, w: Window, early: bool) -> str:
    metric = f"{_RECORDED}_{which}"  # vllm_prefix_cache_hits / _queries / _hit_ratio
    return f"{LEVEL}:{metric}:rate{w.third}" + (f"_offset{w.offset}" if early else "")


def _derived(signal: str, w: Window) -> str | None:
    """PromQL for a derived signal of one instant (``agg: last``) over window ``w``, or None."""
    r = lambda which, early=False: _record(which, w, early)  # noqa: E731
    table = {
        "prefix_cache_hit_rate_early": r("hit_ratio", True),
        "prefix_cache_hit_rate_late": r("hit_ratio"),
        "prefix_cache_hit_rate_drop": f"({r('hit_ratio', True)} - {r('hit_ratio')})",
        "prefix_cache_hits_per_second_early": r("hits", True),
        "prefix_cache_hits_per_second_late": r("hits"),
        "prefix_cache_queries_per_second_early": r("queries", True),
        "prefix_cache_queries_per_second_late": r("queries"),
        "prefix_cache_hits_per_second_ratio": f"({r('hits')} / {r('hits', True)})",
        "prefix_cache_queries_per_second_ratio": f"({r('queries')} / {r('queries', True)})",
    }
    if signal.startswith("prefix_cache_hit_rate_") and "_load" in signal:
        table.update({"prefix_cache_hit_rate_low_load": _load_record("low_load", w),
                      "prefix_cache_hit_rate_high_load": _load_record("high_load", w),
                      "prefix_cache_hit_rate_load_drop": f"({_load_record('low_load', w)} - "
                                                         f"{_load_record('high_load', w)})"})
    return table.get(signal)


def _trend_expr(c) -> str:
    """PromQL for a condition on a trend signal (see the module docstring), one term per metric name."""
    names = metric_names("kv_cache_usage")
    if c.signal == "kv_full_eta_seconds":
        if c.op not in ("<", "<="):
            raise NotExportable("kv_full_eta_seconds is exported only as an upper bound (predict_linear >= 1)")
        terms = [f"predict_linear({m}[{_T}], {_fmt(c.value)}) >= 1" for m in names]
    elif c.signal == "kv_cache_usage_slope_t":
        if c.op not in (">", ">=") or not c.value > 0:
            raise NotExportable("kv_cache_usage_slope_t is exported only as a positive lower bound")
        k2 = _fmt(c.value ** 2)
        terms = []
        for m in names:
            n = f"count_over_time({m}[{_T}])"
            var_t = f"(({_fmt(TREND_SECONDS)} / {n}) ^ 2 * ({n} ^ 2 - 1) / 12)"
            terms.append(f"deriv({m}[{_T}]) > 0 and deriv({m}[{_T}]) ^ 2 * {var_t} * ({n} - 2 + {k2}) "
                         f">= {k2} * stdvar_over_time({m}[{_T}])")
    else:
        terms = [f"{_TREND_PROMQL[c.signal].format(m=m)} {_OP[c.op]} {_fmt(c.value)}" for m in names]
    per_name = [f"max {_BY} ({t})" for t in terms]
    return "(" + " or ".join(per_name) + ")"


def condition_expr(node: Node, window: Window | str) -> str:
    """PromQL for one condition: a filtered instant vector by the identity labels (non-empty = true).

    Raises:
        NotExportable: the condition reads logs, a fact or a derived signal PromQL cannot compute here.
    """
    w = window if isinstance(window, Window) else Window(window)
    c = node.cond
    if c.text_in or c.for_seconds:
        raise NotExportable(f"condition on {c.signal} uses text_in/for")
    if c.signal in _TREND_SIGNALS:
        if c.agg != "last":
            raise NotExportable(f"agg {c.agg} on the trend signal {c.signal}")
        return _trend_expr(c)
    derived = _derived(c.signal, w)
    if derived is not None:
        if c.agg != "last":
            raise NotExportable(f"agg {c.agg} on the window fact {c.signal}")
        return f"{derived} {_OP[c.op]} {_fmt(c.value)}"
    if c.signal == "kv_cache_usage_series":  # OK004: usage series per engine (one per API-server process, label pid)
        if c.agg not in ("max", "last"):
            raise NotExportable(f"agg {c.agg} on kv_cache_usage_series")
        terms = [f"count {_BY} (group by ({', '.join(IDENTITY)}, pid) ({m}))" for m in metric_names("kv_cache_usage")]
        return "(" + " or ".join(terms) + f") {_OP[c.op]} {_fmt(c.value)}"
    if c.signal == "kv_block_idle_before_evict_count":  # PFX003: sampled evictions (--kv-cache-metrics), a counter
        if c.agg != "increase":
            raise NotExportable(f"agg {c.agg} on {c.signal}")
        names = [f"{sep}{_HISTOGRAM_COUNTS[c.signal]}" for sep in vm.SPELLINGS]
        return f"{_per_name(f'increase({{m}}[{w.window}])', names)} {_OP[c.op]} {_fmt(c.value)}"
    if c.signal == "kv_cache_usage_over_level":  # kvdiag/derive/queue.py; PromQL has no block arithmetic: the 95 %
        # level kvdiag itself uses when the pool's size is not known
        from .derive.queue import FALLBACK_NEAR_FULL

        if c.agg != "last":
            raise NotExportable(f"agg {c.agg} on kv_cache_usage_over_level")
        per_name = [f"max {_BY} (max_over_time({name}[{w.window}]))" for name in metric_names("kv_cache_usage")]
        joined = per_name[0] if len(per_name) == 1 else "(" + " or ".join(per_name) + ")"
        return f"{joined} - {_fmt(FALLBACK_NEAR_FULL)} {_OP[c.op]} {_fmt(c.value)}"
    if c.signal in ("num_requests_waiting_when_full", "num_requests_waiting_near_full"):
        # waiting at an instant of usage at the level (derive/dynamics 90 %; derive/queue's near-full level, 95 % here)
        if c.agg != "max":
            raise NotExportable(f"agg {c.agg} on {c.signal}")
        from .derive.dynamics import WAITING_FULL_USAGE
        from .derive.queue import FALLBACK_NEAR_FULL

        level = WAITING_FULL_USAGE if c.signal == "num_requests_waiting_when_full" else FALLBACK_NEAR_FULL
        terms = [f"max {_BY} (max_over_time(({wn} and {u} >= {_fmt(level)})[{w.window}:]))"
                 for wn in metric_names("num_requests_waiting") for u in metric_names("kv_cache_usage")
                 if wn[len("vllm")] == u[len("vllm")]]  # vllm: with vllm:, vllm_ with vllm_ (one exposition)
        joined = terms[0] if len(terms) == 1 else "(" + " or ".join(terms) + ")"
        return f"{joined} {_OP[c.op]} {_fmt(c.value)}"
    if c.agg not in _AGG_FN:
        raise NotExportable(f"agg {c.agg} on {c.signal} has no PromQL equivalent here")
    combine = "max" if c.signal in _MAX_COMBINED else "sum"
    # one aggregation per metric name, joined by `or` (first present wins): a range function over a regex on
    # __name__ would fail with "vector cannot contain metrics with the same labelset" when two names coexist
    per_name = [f"{combine} {_BY} ({_AGG_FN[c.agg]}({name}[{w.window}]))" for name in metric_names(c.signal)]
    joined = per_name[0] if len(per_name) == 1 else "(" + " or ".join(per_name) + ")"
    return f"{joined} {_OP[c.op]} {_fmt(c.value)}"


def tree_expr(node: Node, window: Window | str, dropped: list[str], first: list | None = None) -> str:
    """PromQL for a condition tree.

    ``all`` joins with ``and on (identity)``, ``any`` with ``or on (identity)``; a ``not`` child of an ``all`` and a
    condition with ``if_missing: true`` (absence is true) become ``unless`` of the opposite comparison. A branch of an
    ``any`` that PromQL cannot express (log events, facts) is left out and named in ``dropped``: the alert is then
    narrower than the rule, never wider. ``first`` receives the first exported condition (the alert's ``$value``).
    """
    first = [] if first is None else first
    if node.kind == "cond":
        if not first:
            first.append(node.cond)
        return condition_expr(node, window)
    if node.kind == "not":
        raise NotExportable("'not' is exported only as a condition of an 'all' (unless)")
    parts, unless = [], []
    for child in node.children:
        if node.kind == "all" and child.kind == "not" and child.children[0].kind == "cond":
            unless.append(condition_expr(child.children[0], window))
            continue
        if node.kind == "all" and child.kind == "cond" and child.cond.if_missing is True:
            c = child.cond
            neg = Node("cond", cond=type(c)(c.signal, c.agg, _NEGATE[c.op], c.value, c.text_in, c.for_seconds, None))
            unless.append(condition_expr(neg, window))
            continue
        try:
            parts.append(tree_expr(child, window, dropped, first))
        except NotExportable as exc:
            if node.kind == "any":
                what = child.cond.signal if child.kind == "cond" else f"an '{child.kind}' branch"
                dropped.append(f"{what} ({exc})")
                continue
            raise
    if not parts:
        raise NotExportable("no condition left to export")
    joiner = f" and {_ON} " if node.kind == "all" else f" or {_ON} "
    out = parts[0] if len(parts) == 1 else "(" + joiner.join(f"({p})" for p in parts) + ")"
    for u in unless:
        out = f"({out} unless {_ON} ({u}))"
    return out


def _uses_thirds(node: Node) -> bool:
    if node.kind == "cond":
        return _derived(node.cond.signal, Window()) is not None
    return any(_uses_thirds(c) for c in node.children)


def _uses_load_split(node: Node) -> bool:
    if node.kind == "cond":
        return "_load" in node.cond.signal
    return any(_uses_load_split(c) for c in node.children)


def _uses_trend(node: Node) -> bool:
    if node.kind == "cond":
        return node.cond.signal in _TREND_SIGNALS
    return any(_uses_trend(c) for c in node.children)


def default_for(rule: Rule, w: Window) -> str:
    """``for:`` from the rule's own window: the shortest range its expression reads (the trend's half window for
    the forecast, a third of the window for the prefix-cache thirds, else the window): a condition must hold that
    long, so one scrape at a threshold does not page."""
    if _uses_trend(rule.when):
        return _dur(TREND_SECONDS / 2)
    if _uses_thirds(rule.when):
        return w.third
    return w.window


def _cond_text(c, w: Window) -> str:
    agg = {"last": "", "increase": f"increase over {w.window}", "rate": f"rate over {w.window}"}.get(
        c.agg, f"{c.agg} over {w.window}")
    return f"{c.signal}{' (' + agg + ')' if agg else ''}"


GO_OPEN = '{{ "{{" }}'
"""``{{`` as Go template text: an action printing the two braces (Prometheus expands every annotation as a Go
template; ``}}`` alone is plain text)."""


def go_literal(text: str) -> str:
    """``text`` from a rule file as Go-template text that renders as itself: every ``{{`` becomes an action printing
    ``{{`` (a title holding ``{{ query "up" | first | value }}`` would otherwise run PromQL at every alert)."""
    return str(text).replace("{{", GO_OPEN)


def go_rendered(text: str) -> str:
    """What Prometheus shows for :func:`go_literal` text (for the exported promtool tests' expected annotations)."""
    return text.replace(GO_OPEN, "{{")


def _annotation(rule: Rule) -> str:
    text = go_literal(" ".join(rule.title.split()))
    return (f"{text} on {{{{ $labels.instance }}}} (model {{{{ $labels.model_name }}}}, engine "
            f"{{{{ $labels.engine }}}}; kvdiag {go_literal(rule.id)})")


def _fix(rule: Rule) -> str:
    doc = rule.doc.get("remedy")
    if isinstance(doc, list):
        doc = " ".join(str(x) for x in doc)
    return go_literal(" ".join(str(doc).split()))


#: where ``runbook_url`` points by default: the runbooks of this repository (``docs/runbooks/<class>.md``);
#: ``kvdiag rules export --runbook-base URL`` gives the address they are published at
RUNBOOK_BASE = "docs/runbooks/"


def alert_name(rule: Rule) -> str:
    """The alert's name: the rule's ``alert`` (``VllmKvCachePoolExhausted``: what is wrong), else ``Vllm`` and its
    name in CamelCase (``kv-pool-full`` → ``VllmKvPoolFull``)."""
    return rule.alert or "Vllm" + "".join(w[:1].upper() + w[1:] for w in re.split(r"[^A-Za-z0-9]+", rule.name) if w)


def runbook_url(rule: Rule, base: str = RUNBOOK_BASE) -> str:
    return f"{base.rstrip('/')}/{rule.cls}.md" if base else f"{rule.cls}.md"


def exportable_alerts(rules: list[Rule], window: str = "5m", for_: str | None = None,
                      res: str = "15s", runbook_base: str = RUNBOOK_BASE) -> tuple[list[dict], list[str]]:
    """Alerting rules for the rules PromQL can express, and one line per rule it cannot (with the reason).

    ``for_`` None: each alert's :func:`default_for`. Healthy look-alike notes (severity ``ok``) become ``info``
    alerts (``kvdiag_class: healthy``): what kvdiag would add to a healthy verdict's summary. Each alert carries the
    identity labels of :data:`IDENTITY` (from its ``by``), ``severity``, ``kvdiag_rule``, ``kvdiag_class``.
    """
    w = Window(window, res)
    alerts, skipped = [], []
    for rule in sorted(rules, key=lambda r: r.id):
        if rule.cls == "inconclusive":
            continue
        dropped: list[str] = []
        first: list = []
        try:
            expr = tree_expr(rule.when, w, dropped, first)
        except NotExportable as exc:
            skipped.append(f"{rule.id} ({rule.cls}): not exported, needs kvdiag itself: {exc}")
            continue
        value = _cond_text(first[0], w) if first else "the first condition"
        shown = f"{go_literal(value)} = {{{{ $value | printf \"%.4g\" }}}}"
        alert = {
            "alert": alert_name(rule),
            "expr": expr,
            "for": for_ if for_ is not None else default_for(rule, w),
            "labels": {"severity": _SEVERITY[rule.severity], "kvdiag_rule": rule.id, "kvdiag_class": rule.cls},
            "annotations": {"summary": _annotation(rule),
                            "value": shown,
                            "description": f"On {{{{ $labels.instance }}}}: {shown}. "
                                           + go_literal(" ".join(str(rule.doc["meaning"]).split())),
                            "fix": _fix(rule),
                            "runbook_url": runbook_url(rule, runbook_base)},
        }
        if dropped:
            alert["annotations"]["kvdiag_not_exported"] = go_literal("conditions PromQL cannot see (the alert is "
                                                                     "narrower than the rule): " + "; ".join(dropped))
        alerts.append(alert)
    return alerts, skipped


def expand_records(expr: str, records: list[dict]) -> str:
    """``expr`` with every recording-rule name replaced by its expression (to evaluate an alert at a past time,
    where the recorded series do not exist)."""
    by_name = {r["record"]: r["expr"] for r in records}
    pattern = re.compile("|".join(re.escape(n) for n in sorted(by_name, key=len, reverse=True)) + r"(?![\w:])")
    for _ in range(4):  # records may use records
        new = pattern.sub(lambda m: "(" + by_name[m.group(0)] + ")", expr)
        if new == expr:
            break
        expr = new
    return expr


def export_document(rules: list[Rule], window: str = "5m", for_: str | None = None,
                    res: str = "15s", runbook_base: str = RUNBOOK_BASE) -> tuple[dict, list[str]]:
    """The rule file as a dict (``groups:`` recording rules first, then the alerts) and the skip notes."""
    w = Window(window, res)
    alerts, skipped = exportable_alerts(rules, window, for_, res, runbook_base)
    records = recording_rules(w)
    used = [r for r in records if any(r["record"] in a["expr"] for a in alerts)]
    # a hit-ratio record reads the rate records: keep those too
    used = [r for r in records if r in used or any(r["record"] in u["expr"] for u in used)]
    groups = []
    if used:
        groups.append({"name": "kvdiag-records", "rules": used})
    groups.append({"name": "kvdiag", "rules": alerts})
    return {"groups": groups}, skipped


def export_prometheus(rules: list[Rule], window: str = "5m", for_: str | None = None, res: str = "15s",
                      runbook_base: str = RUNBOOK_BASE) -> str:
    """A Prometheus rule file (``groups:``; also the ``spec`` of a PrometheusRule) for the exportable rules.

    Rules that cannot be exported are listed in a leading comment with the reason.
    """
    doc, skipped = export_document(rules, window, for_, res, runbook_base)
    w = Window(window, res)
    header = ["# Generated by `kvdiag rules export --format prometheus`; do not edit by hand.",
              f"# Window {window} (thirds {w.third}, the first one at offset {w.offset}); each signal reads every "
              "vLLM name it had, in the vllm: and vllm_ spellings;",
              f"# every alert keeps {', '.join(IDENTITY)}."]
    header += [f"# {s}" for s in skipped]
    body = yaml.safe_dump(doc, sort_keys=False, width=1000)
    return "\n".join(header) + "\n" + body


def _kvdiag_value(rule: Rule, case, window: str) -> float:
    """kvdiag's own value of the rule's first exported condition on ``case`` (the alert's ``$value``), from the
    engine's derive and aggregation: the promtool test then checks Prometheus computes the same number."""
    from .derive import derive_all
    from .engine.evaluate import _aggregate_signal

    first: list = []
    tree_expr(rule.when, Window(window), [], first)
    bundle = case.bundle()
    derive_all(bundle)
    return _aggregate_signal(bundle, first[0].signal, first[0].agg)[0]


def _rendered_annotations(alert: dict, labels: dict) -> dict:
    """The alert's annotations with the identity labels filled in (``$value`` is left to the caller)."""
    out = {}
    for k, v in alert["annotations"].items():
        for name, val in labels.items():
            v = v.replace("{{ $labels.%s }}" % name, val)
        out[k] = go_rendered(v)
    return out


def _metric_name(signal: str, spelling: str) -> str:
    """The best /metrics name of ``signal`` (a histogram count's too) in one spelling (``:`` or ``_``)."""
    if signal in _HISTOGRAM_COUNTS:
        return f"vllm{spelling}{_HISTOGRAM_COUNTS[signal]}"
    return f"vllm{spelling}{vm.wire(signal)[0]}"


def _values(samples: list) -> str:
    return " ".join("_" if v is None else f"{v:g}" for v in samples)


def promtool_tests(rules: list[Rule], cases: list, rule_file: str, window: str = "5m",
                   res: str = "15s", runbook_base: str = RUNBOOK_BASE) -> tuple[str, list[str]]:
    """A ``promtool test rules`` file built from the rule cases, one test per case and spelling (``vllm:``/``vllm_``).

    ``rule_file`` must hold the rules of :func:`export_prometheus` with ``for: 0m`` (the tests check the
    expressions at the case's last sample; ``for:`` only delays an alert). Only cases of exported rules whose inputs
    are all /metrics series, whose outcome is ``fires`` or ``quiet`` (Prometheus has no *unknown*) and whose series
    fit inside ``window`` are used; the others are returned as skip notes. A ``fires`` case expects the alert at the
    last sample with the identity labels ``job``, ``instance``, ``model_name``, ``engine``; a ``quiet`` case expects
    none. A case of a rule that compares the window's thirds (prefix-cache hit rates, hits per second: ratios only,
    whatever the time scale) is stretched to fill the window (its samples spread over ``window`` − 1 s), so the
    alert's thirds are the case's thirds.
    """
    alerts, _ = exportable_alerts(rules, window, "0m", res, runbook_base)
    by_rule = {a["labels"]["kvdiag_rule"]: a for a in alerts}
    rule_by_id = {r.id: r for r in rules}
    win = _seconds(window)
    tests, notes, values = [], [], {}
    for case in cases:
        alert = by_rule.get(case.rule_id)
        if alert is None:
            continue
        why = ""
        stretch = _uses_thirds(rule_by_id[case.rule_id].when)
        if case.expect == "unknown":
            why = "expects unknown"
        elif case.facts or case.events:
            why = "needs facts or log events"
        elif any(s not in set(METRIC_TO_SIGNAL.values()) and s not in _HISTOGRAM_COUNTS for s in case.series):
            why = "reads a signal that is not a /metrics series"
        elif case.duration >= win and not stretch:
            why = f"longer than the {window} window"
        elif case.expect == "fires" and _uses_load_split(rule_by_id[case.rule_id].when):
            why = ("its $value cannot be compared: the load split sums overlapping increases at each sub-step, as "
                   "kvdiag's Prometheus collector does, where kvdiag's engine splits the raw samples")
        if why:
            notes.append(f"{case.rule_id} {case.name}: not in the promtool tests ({why})")
            continue
        if case.expect == "fires":
            values[case.name] = _kvdiag_value(rule_by_id[case.rule_id], case, window)
        interval, duration = float(case.interval), float(case.duration)
        if stretch and case.duration > 0:
            steps = case.duration / case.interval
            interval = math.floor((win - 1) * 1000 / steps) / 1000
            duration = interval * steps
        for spelling in (":", "_"):
            instance = f"case-{case.name}"
            ident = {"job": "vllm", "instance": instance, "model_name": "m", "engine": "0"}
            lab = ",".join(f'{k}="{v}"' for k, v in ident.items())
            series = [{"series": f'{_metric_name(sig, spelling)}{{{lab}}}', "values": _values(vals)}
                      for sig, vals in case.series.items()]
            exp = []
            if case.expect == "fires":
                labels = {**alert["labels"], **ident}
                annotations = _rendered_annotations(alert, ident)
                for key in ("value", "description"):
                    annotations[key] = annotations[key].replace('{{ $value | printf "%.4g" }}',
                                                                f"{values[case.name]:.4g}")
                exp = [{"exp_labels": labels, "exp_annotations": annotations}]
            tests.append({
                "name": f"{case.rule_id} {case.name} (vllm{spelling} names)",
                "interval": _dur(interval),
                "input_series": series,
                "alert_rule_test": [{"eval_time": _dur(duration), "alertname": alert["alert"], "exp_alerts": exp}],
            })
    doc = {"rule_files": [rule_file], "evaluation_interval": "15s", "tests": tests}
    head = "# Generated by `kvdiag rules export --format prometheus --tests`; run: promtool test rules FILE\n"
    return head + yaml.safe_dump(doc, sort_keys=False, width=1000), notes
