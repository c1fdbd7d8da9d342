"""``kvdiag dashboards export``: a Grafana dashboard for vLLM's KV cache, built with the Grafana Foundation SDK.

Rows: vLLM's pool, queue, preemptions and prefix-cache hit rate (every name the series had across versions, V0 and
V1, in the ``vllm:`` and ``vllm_`` spellings); then one row per diagnosis class that has exported alerts, one
panel per rule showing the value of the condition that decides it (the alert's ``$value``, the recording rules
inlined) with the rule's threshold as a line, the whole alert expression in the panel's description. kvdiag's
verdicts (``kvdiag_verdict`` from ``watch --listen`` or ``check --textfile``) and the firing exported alerts
(``ALERTS``) are annotations. Variables: the Prometheus data source and the ``instance``.
"""

from __future__ import annotations

import json
import os
import re
from types import SimpleNamespace

from grafana_foundation_sdk.builders import dashboard as gd
from grafana_foundation_sdk.builders import prometheus as gp
from grafana_foundation_sdk.builders import timeseries as gt
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import dashboard as dm

from .engine.model import Rule
from .export import (Window, alert_name, condition_expr, expand_records, exportable_alerts, metric_names,
                     recording_rules, tree_expr)
from . import vllm_metrics as vm

UID = "kvdiag-vllm-kv"
DS = dm.DataSourceRef(type_val="prometheus", uid="${datasource}")
SCOPE = 'instance=~"$instance"'
_NAME = re.compile(r'(?<![\w:"|\\])(vllm[:_][A-Za-z0-9_:]+)(?![\w:{"])')
_COMPARISON = re.compile(r"\s(>=|<=|==|!=|>|<)\s(-?[0-9][0-9.e+-]*)$")


def scoped(expr: str) -> str:
    """``expr`` with every bare vLLM metric name limited to the dashboard's ``$instance``."""
    return _NAME.sub(lambda m: f"{m.group(1)}{{{SCOPE}}}", expr)


def _either(template: str, signal: str, combine: str = "max") -> str:
    """``template`` (with ``{m}``) once per /metrics name of ``signal``, combined per server, joined by ``or``."""
    terms = [f"{combine} by (instance, model_name, engine) ({template.format(m=f'{m}{{{SCOPE}}}')})"
             for m in metric_names(signal)]
    return " or ".join(terms)


def _hit_rate() -> str:
    v1 = list(zip(metric_names("prefix_cache_hits"), metric_names("prefix_cache_queries")))
    terms = [f"sum by (instance, model_name, engine) (rate({h}{{{SCOPE}}}[$__rate_interval])) / "
             f"sum by (instance, model_name, engine) (rate({q}{{{SCOPE}}}[$__rate_interval])) > -1" for h, q in v1]
    v0 = [f"max by (instance, model_name, engine) ({m}{{{SCOPE}}})" for m in metric_names("prefix_cache_hit_rate_cumulative")]
    return "(" + ") or (".join(terms + v0) + ")"


def _name_regex(signal: str) -> str:
    """A regex matching every /metrics name of ``signal`` in both spellings, the names' shared end factored out:
    ``vllm[:_](kv|gpu)_cache_usage_perc``."""
    names = vm.wire(signal)
    tail = os.path.commonprefix([n[::-1] for n in names])[::-1] if len(names) > 1 else ""
    tail = tail[tail.find("_"):] if "_" in tail else ""
    heads = [n[:len(n) - len(tail)] for n in names]
    alt = heads[0] if len(heads) == 1 else "(" + "|".join(heads) + ")"
    return f"vllm[:_]{alt}{tail}"


def _panel(title: str, description: str, queries: list[tuple[str, str]], unit: str = "", *,
           threshold: float | None = None, maximum: float | None = None, width: int = 8):
    p = gt.Panel().title(title).description(description).datasource(DS).height(8).span(width)
    for ref, (expr, legend) in zip("ABCDEFGH", queries):
        p = p.with_target(gp.Dataquery().expr(expr).legend_format(legend).range().ref_id(ref))
    if unit:
        p = p.unit(unit)
    if maximum is not None:
        p = p.min(0).max(maximum)
    if threshold is not None:
        p = p.thresholds(gd.ThresholdsConfig().mode(dm.ThresholdsMode.ABSOLUTE).steps(
            [dm.Threshold(value=None, color="green"), dm.Threshold(value=threshold, color="red")]))
    return p


LEGEND = "{{instance}} {{model_name}} engine {{engine}}"


def vllm_panels() -> list:
    """vLLM's own series: the pool, the queue, preemptions, the prefix cache."""
    return [
        _panel("KV cache usage", "vllm:kv_cache_usage_perc (V0 and 0.7-0.8: gpu_cache_usage_perc): the share of the "
               "KV block pool held by requests. 1.0 = no free block: preemptions and a queue follow.",
               [(_either("{m}", "kv_cache_usage"), LEGEND)], "percentunit", threshold=0.95, maximum=1),
        _panel("Requests running and waiting", "vllm:num_requests_running and vllm:num_requests_waiting. A queue "
               "with a full pool is capacity pressure; with a mostly free pool it is batch-token bound.",
               [(_either("{m}", "num_requests_running", "sum"), "running " + LEGEND),
                (_either("{m}", "num_requests_waiting", "sum"), "waiting " + LEGEND)], "short"),
        _panel("Preemptions per second", "rate(vllm:num_preemptions_total): running requests evicted from the pool "
               "(each redoes its prefill).", [(_either("rate({m}[$__rate_interval])", "num_preemptions", "sum"),
                                              LEGEND)], "short"),
        _panel("Prefix-cache hit rate", "Δhits / Δqueries of vllm:prefix_cache_* (V0: gpu_prefix_cache_hit_rate). "
               "A fall under load is prefix-cache eviction.", [(_hit_rate(), LEGEND)], "percentunit", maximum=1),
        _panel("Prefix-cache tokens per second", "Queried and hit prompt tokens per second (vllm:prefix_cache_"
               "queries_total, vllm:prefix_cache_hits_total; 0.7-0.8: gpu_prefix_cache_*, in blocks).",
               [(_either("rate({m}[$__rate_interval])", "prefix_cache_queries", "sum"), "queries " + LEGEND),
                (_either("rate({m}[$__rate_interval])", "prefix_cache_hits", "sum"), "hits " + LEGEND)], "short"),
        _panel("Prompt and generation tokens per second", "rate of vllm:prompt_tokens_total and "
               "vllm:generation_tokens_total: the load the pool serves.",
               [(_either("rate({m}[$__rate_interval])", "prompt_tokens", "sum"), "prompt " + LEGEND),
                (_either("rate({m}[$__rate_interval])", "generation_tokens", "sum"), "generation " + LEGEND)],
               "short"),
    ]


def deciding_query(rule: Rule, window: str = "5m") -> tuple[str, float | None, str]:
    """(the value of the rule's first exported condition as PromQL, its threshold, the whole alert expression),
    recording rules inlined and limited to ``$instance``."""
    w = Window(window)
    records = recording_rules(w)
    first: list = []
    whole = tree_expr(rule.when, w, [], first)
    expr = condition_expr(SimpleNamespace(cond=first[0]), w)
    m = _COMPARISON.search(expr)
    threshold = float(m.group(2)) if m else None
    value = expr[:m.start()] if m else expr
    return scoped(expand_records(value, records)), threshold, scoped(expand_records(whole, records))


def build(rules: list[Rule], window: str = "5m"):
    """The dashboard builder (``.build()`` gives the SDK's Dashboard model)."""
    alerts, _skipped = exportable_alerts(rules, window)
    by_id = {r.id: r for r in rules}
    board = (gd.Dashboard("vLLM KV cache (kvdiag)").uid(UID).tags(["vllm", "kvdiag", "kv-cache"])
             .description("vLLM's KV-cache pool, queue and prefix cache, and the conditions kvdiag's rules decide on "
                          "(generated by 'kvdiag dashboards export').")
             .time("now-3h", "now").refresh("30s").timezone("utc")
             .with_variable(gd.DatasourceVariable("datasource").label("Prometheus").type("prometheus"))
             .with_variable(gd.QueryVariable("instance").label("vLLM instance").datasource(DS)
                            .query(f'label_values({{__name__=~"{_name_regex("kv_cache_usage")}"}}, instance)')
                            .multi(True).include_all(True).all_value(".*")
                            .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED))
             .annotation(gd.AnnotationQuery().name("kvdiag verdict").datasource(DS).enable(True).icon_color("red")
                         .expr('kvdiag_verdict{severity!="ok"} == 1'))
             .annotation(gd.AnnotationQuery().name("kvdiag findings").datasource(DS).enable(True)
                         .icon_color("yellow").expr('kvdiag_finding{status="fires", severity!="ok"} == 1'))
             .annotation(gd.AnnotationQuery().name("kvdiag alerts firing").datasource(DS).enable(True)
                         .icon_color("orange").expr('ALERTS{alertstate="firing", kvdiag_rule!=""}')))
    board = board.with_row(gd.Row("vLLM: pool, queue, preemptions, prefix cache"))
    for p in vllm_panels():
        board = board.with_panel(p)
    classes: dict[str, list[dict]] = {}
    for a in alerts:
        classes.setdefault(a["labels"]["kvdiag_class"], []).append(a)
    for cls, group in classes.items():
        board = board.with_row(gd.Row(f"{cls} (docs/runbooks/{cls}.md)"))
        for a in group:
            rule = by_id[a["labels"]["kvdiag_rule"]]
            value, threshold, whole = deciding_query(rule, window)
            needs = (" This series exists only when vLLM runs with --kv-cache-metrics (0.16+)."
                     if "kv_block_idle_before_evict" in value else "")
            board = board.with_panel(_panel(
                f"{rule.id} {alert_name(rule)}: {a['annotations']['value'].split(' = ')[0]}",
                f"{' '.join(rule.title.split())}.{needs} Alert {alert_name(rule)} ({a['labels']['severity']}) fires "
                f"when: {whole}", [(value, LEGEND)], threshold=threshold, width=12))
    return board


def export_json(rules: list[Rule], window: str = "5m") -> str:
    """The dashboard as Grafana JSON (import it, or provision it from a file)."""
    model = build(rules, window).build()
    return json.dumps(model, cls=JSONEncoder, indent=2, sort_keys=False) + "\n"


def panel_queries(doc: dict) -> list[tuple[str, str]]:
    """(panel title, PromQL) of every panel target of a dashboard JSON."""
    out = []
    for p in doc.get("panels", []):
        for t in p.get("targets", []) or []:
            out.append((p.get("title", ""), t["expr"]))
    return out
