"""``kvdiag rules export --format prometheus``: the rules that PromQL can express, as Prometheus alerting rules.

A rule is exported only when every condition reads a raw /metrics signal with an aggregation PromQL has
(``max min mean last increase rate p95``), or one of the trend signals of :mod:`kvdiag.derive_trend` (below), and the
tree uses ``all``/``any`` (a ``not`` child of an ``all`` becomes ``unless``); its selectors match both the
``vllm:`` names vLLM writes and the ``vllm_`` names a Prometheus 2.x server may store, and every metric name
the signal had across versions (``{__name__=~"vllm[:_](kv|gpu)_cache_usage_perc"}``). Conditions that read
log events are dropped from an ``any`` (PromQL cannot see logs) and named in a comment; rules that need logs,
derived signals or the capacity model are listed in comments instead of being exported wrongly.

Semantics match kvdiag's engine for a window ``W`` (default 5m): ``agg_over_time(metric[W])``, engines
combined by ``max`` for ratios and ``sum`` for counts (as the collector does), thresholds as in the rule's
``params``. A missing series makes a PromQL comparison empty (false), which matches ``if_missing: false``;
where kvdiag would say *unknown*, Prometheus stays quiet.

Trend signals (rule CAP002, the forecast of a full pool) map onto PromQL's own regression over the trend window
``T`` = :data:`kvdiag.derive_trend.TREND_SECONDS` (5m, whatever ``--window`` says): ``kv_cache_usage_slope`` →
``deriv(u[T])``, ``kv_full_eta_seconds <= H`` → ``predict_linear(u[T], H) >= 1``, ``kv_cache_usage_trend_samples``
→ ``count_over_time(u[T])``, ``kv_cache_usage_trend_seconds`` → the span of the samples' timestamps (a subquery),
``kv_cache_usage_trend_rise`` → slope × that span, ``kv_cache_usage_slope_recent`` → ``deriv(u[T/2])``, and
``kv_cache_usage_slope_t >= k`` → ``deriv² · var(t) · (n − 2 + k²) >= k² · stdvar_over_time(u[T])`` (slope / its
standard error ≥ k, squared), with ``var(t)`` of ``n`` regularly spaced samples filling ``T``: ``(T/n)² (n² − 1)/12``.
Two differences from kvdiag: Prometheus does not cut the fit at a restart, and ``var(t)`` assumes regular scrapes.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
import tempfile

import yaml

from .engine.model import Node, Rule
from .errors import InputError
from .derive_trend import TREND_SECONDS
from .signals import METRIC_TO_SIGNAL, SIGNALS

_AGG_FN = {"max": "max_over_time", "min": "min_over_time", "mean": "avg_over_time", "last": "last_over_time",
           "increase": "increase", "rate": "rate"}
_MAX_COMBINED = {"kv_cache_usage", "cpu_cache_usage", "prefix_cache_hit_rate_cumulative"}
_OP = {">": ">", ">=": ">=", "<": "<", "<=": "<=", "==": "==", "!=": "!="}


class NotExportable(Exception):
    """The rule (or a condition) cannot be written in PromQL; the message says why."""


def metric_names(signal: str) -> list[str]:
    """Every /metrics name of ``signal`` in both spellings, the current vLLM name first.

    Raises:
        NotExportable: the signal has no /metrics source (log-only, derived, or a fact).
    """
    names = [m for m, s in METRIC_TO_SIGNAL.items() if s == signal]
    if not names or SIGNALS[signal].kind not in ("gauge", "counter"):
        raise NotExportable(f"{signal} is not a /metrics series")
    suffix = "_total" if SIGNALS[signal].kind == "counter" else ""
    return [f"vllm{sep}{n}{suffix}" for n in names for sep in (":", "_")]


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
    from .fileio import check_output_target

    target = check_output_target(path, option)
    folder = target.parent
    if not folder.is_dir():
        raise InputError(f"{option} {path}: folder {folder} does not exist")
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        if target.exists():
            os.chmod(tmp, target.stat().st_mode & 0o777)
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, target)
        tmp = None
    except OSError as exc:
        raise InputError(f"{option} {path}: cannot write: {exc.strerror or exc}") from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


_T = f"{TREND_SECONDS:g}s"
_HALF = f"{TREND_SECONDS / 2:g}s"
_SPAN = f"(max_over_time(timestamp({{m}})[{_T}:]) - min_over_time(timestamp({{m}})[{_T}:]))"
#: trend signals (kvdiag/derive_trend.py) as PromQL over one kv_cache_usage series ``{m}``
_TREND_PROMQL = {
    "kv_cache_usage_slope": f"deriv({{m}}[{_T}])",
    "kv_cache_usage_slope_recent": f"deriv({{m}}[{_HALF}])",
    "kv_cache_usage_trend_samples": f"count_over_time({{m}}[{_T}])",
    "kv_cache_usage_trend_seconds": _SPAN,
    "kv_cache_usage_trend_rise": f"(deriv({{m}}[{_T}]) * {_SPAN})",
}


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
    per_name = [f"max by (instance) ({t})" for t in terms]
    return "(" + " or ".join(per_name) + ")"


def condition_expr(node: Node, window: str) -> str:
    """PromQL for one condition: a filtered instant vector by ``instance`` (non-empty = true)."""
    c = node.cond
    if c.text_in or c.for_seconds:
        raise NotExportable(f"condition on {c.signal} uses text_in/for")
    if c.signal in _TREND_PROMQL or c.signal in ("kv_full_eta_seconds", "kv_cache_usage_slope_t"):
        if c.agg != "last":
            raise NotExportable(f"agg {c.agg} on the trend signal {c.signal}")
        return _trend_expr(c)
    if c.signal == "num_requests_waiting_when_full":  # kvdiag/derive_dynamics.py: waiting at an instant of usage >= 90%
        if c.agg != "max":
            raise NotExportable(f"agg {c.agg} on num_requests_waiting_when_full")
        from .derive_dynamics import WAITING_FULL_USAGE

        terms = [f"max by (instance) (max_over_time(({w} and {u} >= {_fmt(WAITING_FULL_USAGE)})[{window}:]))"
                 for w in metric_names("num_requests_waiting") for u in metric_names("kv_cache_usage")
                 if w[len("vllm")] == u[len("vllm")]]  # vllm: with vllm:, vllm_ with vllm_ (one exposition)
        joined = terms[0] if len(terms) == 1 else "(" + " or ".join(terms) + ")"
        return f"{joined} {_OP[c.op]} {_fmt(c.value)}"
    if c.agg not in _AGG_FN:
        raise NotExportable(f"agg {c.agg} on {c.signal} has no PromQL equivalent here")
    combine = "max" if c.signal in _MAX_COMBINED else "sum"
    # one aggregation per metric name, joined by `or` (first present wins): a range function over a regex on
    # __name__ would fail with "vector cannot contain metrics with the same labelset" when two names coexist
    per_name = [f"{combine} by (instance) ({_AGG_FN[c.agg]}({name}[{window}]))" for name in metric_names(c.signal)]
    joined = per_name[0] if len(per_name) == 1 else "(" + " or ".join(per_name) + ")"
    return f"{joined} {_OP[c.op]} {_fmt(c.value)}"


def tree_expr(node: Node, window: str, dropped: list[str]) -> str:
    """PromQL for a condition tree; log-event branches of an ``any`` are dropped (named in ``dropped``)."""
    if node.kind == "cond":
        return condition_expr(node, window)
    if node.kind == "not":
        raise NotExportable("'not' is exported only as a condition of an 'all' (unless)")
    parts, unless = [], []
    for child in node.children:
        if node.kind == "all" and child.kind == "not" and child.children[0].kind == "cond":
            unless.append(condition_expr(child.children[0], window))
            continue
        try:
            parts.append(tree_expr(child, window, dropped))
        except NotExportable as exc:
            if node.kind == "any" and child.kind == "cond" and SIGNALS[child.cond.signal].kind == "event":
                dropped.append(f"{child.cond.signal} ({exc})")
                continue
            raise
    if not parts:
        raise NotExportable("no condition left to export")
    joiner = " and on (instance) " if node.kind == "all" else " or on (instance) "
    out = parts[0] if len(parts) == 1 else "(" + joiner.join(f"({p})" for p in parts) + ")"
    for u in unless:
        out = f"({out} unless on (instance) ({u}))"
    return out


def _annotation(rule: Rule) -> str:
    text = " ".join(rule.title.split())
    return f"{text} on {{{{ $labels.instance }}}} (kvdiag {rule.id})"


def _rendered_annotations(alert: dict, instance: str) -> dict:
    return {k: v.replace("{{ $labels.instance }}", instance) for k, v in alert["annotations"].items()}


def exportable_alerts(rules: list[Rule], window: str = "5m", for_: str = "0m") -> tuple[list[dict], list[str]]:
    """Alerting rules for the rules PromQL can express, and one line per rule it cannot (with the reason)."""
    alerts, skipped = [], []
    for rule in sorted(rules, key=lambda r: r.id):
        if rule.cls in ("healthy", "inconclusive"):
            continue  # verdicts that say "not a KV problem" are not alerts
        dropped: list[str] = []
        try:
            expr = tree_expr(rule.when, window, dropped)
        except NotExportable as exc:
            skipped.append(f"{rule.id} ({rule.cls}): not exported, needs kvdiag itself: {exc}")
            continue
        alert = {
            "alert": f"KvdiagRule{rule.id}",
            "expr": expr,
            "for": for_,
            "labels": {"severity": rule.severity, "kvdiag_rule": rule.id, "kvdiag_class": rule.cls},
            "annotations": {"summary": _annotation(rule),
                            "description": " ".join(str(rule.doc["meaning"]).split())},
        }
        if dropped:
            alert["annotations"]["kvdiag_not_exported"] = "conditions that need logs: " + "; ".join(dropped)
        alerts.append(alert)
    return alerts, skipped


def export_prometheus(rules: list[Rule], window: str = "5m", for_: str = "0m") -> str:
    """A Prometheus rule file (``groups:``; also the ``spec`` of a PrometheusRule) for the exportable rules.

    Rules that cannot be exported are listed in a leading comment with the reason.
    """
    alerts, skipped = exportable_alerts(rules, window, for_)
    header = ["# Generated by `kvdiag rules export --format prometheus`; do not edit by hand.",
              f"# Window {window}; each signal reads every vLLM name it had, in the vllm: and vllm_ spellings."]
    header += [f"# {s}" for s in skipped]
    body = yaml.safe_dump({"groups": [{"name": "kvdiag", "rules": alerts}]}, sort_keys=False, width=1000)
    return "\n".join(header) + "\n" + body


def _metric_name(signal: str, spelling: str) -> str:
    names = [m for m, s in METRIC_TO_SIGNAL.items() if s == signal]
    base = names[0]  # the first listed is the current vLLM name (signals.METRIC_TO_SIGNAL order)
    suffix = "_total" if SIGNALS[signal].kind == "counter" else ""
    return f"vllm{spelling}{base}{suffix}"


def _values(samples: list) -> str:
    return " ".join("_" if v is None else f"{v:g}" for v in samples)


def promtool_tests(rules: list[Rule], cases: list, rule_file: str, window: str = "5m",
                   for_: str = "0m") -> tuple[str, list[str]]:
    """A ``promtool test rules`` file built from the rule cases, one test per case and spelling (``vllm:``/``vllm_``).

    Only cases of exported rules whose inputs are all /metrics series, whose outcome is ``fires`` or ``quiet``
    (Prometheus has no *unknown*) and whose series fit inside ``window`` are used; the others are returned as
    skip notes. A ``fires`` case expects the alert at the last sample; a ``quiet`` case expects none.
    """
    from .durations import parse_duration

    alerts, _ = exportable_alerts(rules, window, for_)
    by_rule = {a["labels"]["kvdiag_rule"]: a for a in alerts}
    win = parse_duration(window)
    tests, notes = [], []
    for case in cases:
        alert = by_rule.get(case.rule_id)
        if alert is None:
            continue
        why = ""
        if case.expect == "unknown":
            why = "expects unknown"
        elif case.facts or case.events:
            why = "needs facts or log events"
        elif any(not METRIC_TO_SIGNAL or s not in set(METRIC_TO_SIGNAL.values()) for s in case.series):
            why = "reads a signal that is not a /metrics series"
        elif case.duration >= win:
            why = f"longer than the {window} window"
        if why:
            notes.append(f"{case.rule_id} {case.name}: not in the promtool tests ({why})")
            continue
        for spelling in (":", "_"):
            instance = f"case-{case.name}"
            series = [{"series": f'{_metric_name(sig, spelling)}{{instance="{instance}",engine="0",model_name="m"}}',
                       "values": _values(vals)} for sig, vals in case.series.items()]
            exp = []
            if case.expect == "fires":
                labels = dict(alert["labels"])
                labels["instance"] = instance
                exp = [{"exp_labels": labels, "exp_annotations": _rendered_annotations(alert, instance)}]
            step = f"{int(case.interval)}s" if float(case.interval).is_integer() else f"{int(case.interval * 1000)}ms"
            tests.append({
                "name": f"{case.rule_id} {case.name} (vllm{spelling} names)",
                "interval": step,
                "input_series": series,
                "alert_rule_test": [{"eval_time": f"{int(case.duration)}s", "alertname": alert["alert"],
                                     "exp_alerts": exp}],
            })
    doc = {"rule_files": [rule_file], "evaluation_interval": "15s", "tests": tests}
    head = "# Generated by `kvdiag rules export --format prometheus --tests`; run: promtool test rules FILE\n"
    return head + yaml.safe_dump(doc, sort_keys=False, width=1000), notes
