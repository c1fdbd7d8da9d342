"""``kvdiag rules export --format prometheus``: the rules that PromQL can express, as Prometheus alerting rules.

A rule is exported only when every condition reads a raw /metrics signal with an aggregation PromQL has
(``max min mean last increase rate p95``) and the tree uses ``all``/``any``; its selectors match both the
``vllm:`` names vLLM writes and the ``vllm_`` names a Prometheus 2.x server may store, and every metric name
the signal had across versions (``{__name__=~"vllm[:_](kv|gpu)_cache_usage_perc"}``). Conditions that read
log events are dropped from an ``any`` (PromQL cannot see logs) and named in a comment; rules that need logs,
derived signals or the capacity model are listed in comments instead of being exported wrongly.

Semantics match kvdiag's engine for a window ``W`` (default 5m): ``agg_over_time(metric[W])``, engines
combined by ``max`` for ratios and ``sum`` for counts (as the collector does), thresholds as in the rule's
``params``. A missing series makes a PromQL comparison empty (false), which matches ``if_missing: false``;
where kvdiag would say *unknown*, Prometheus stays quiet.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
import tempfile

import yaml

from .engine.model import Node, Rule
from .errors import InputError
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


def condition_expr(node: Node, window: str) -> str:
    """PromQL for one condition: a filtered instant vector by ``instance`` (non-empty = true)."""
    c = node.cond
    if c.text_in or c.for_seconds:
        raise NotExportable(f"condition on {c.signal} uses text_in/for")
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
        raise NotExportable("'not' is not exported")
    parts = []
    for child in node.children:
        try:
            parts.append(tree_expr(child, window, dropped))
        except NotExportable as exc:
            if node.kind == "any" and child.kind == "cond" and SIGNALS[child.cond.signal].kind == "event":
                dropped.append(f"{child.cond.signal} ({exc})")
                continue
            raise
    if not parts:
        raise NotExportable("no condition left to export")
    if len(parts) == 1:
        return parts[0]
    joiner = " and on (instance) " if node.kind == "all" else " or on (instance) "
    return "(" + joiner.join(f"({p})" for p in parts) + ")"


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
    from .engine.model import parse_duration

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
