"""Rules engine: grammar, three-valued logic, windows, templates, and a lint of the shipped rule corpus."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from kvdiag.bundle import Bundle
from kvdiag.derive import derive_all
from kvdiag.derive.core import increase
from kvdiag.engine.evaluate import evaluate_rule, render, verdict
from kvdiag.engine.model import builtin_rules_dir, load_rule, load_rules, parse_duration
from kvdiag.errors import RuleFileError
from kvdiag.signals import SIGNALS

DOC = ("doc: {meaning: m, impact: i, diagnosis: d, false_positives: f, remedy: r}\n")


def rule(when: str, requires: str = "[]", extra: str = "") -> object:
    text = (f"id: T1\nname: t\nclass: capacity_pressure\ntitle: T\nseverity: warning\nrequires: {requires}\n"
            f"message: 'usage {{kv_cache_usage.max:.0%}}'\nwhen: {when}\n{extra}" + DOC)
    return load_rule("test.yaml", text)


def bundle(**series: list[float]) -> Bundle:
    b = Bundle()
    for name, values in series.items():
        for i, v in enumerate(values):
            b.add(name, v, f"test:{name}:{i}", t=1000.0 + 15 * i)
    return b


@pytest.mark.parametrize("values, expected", [
    ([0, 1, 3, 6], 6.0),
    ([5, 7, 2, 4], 2 + 2 + 2),        # reset after 7: the 2 counts in full
    ([3], math.nan),
    ([0, 0, 0], 0.0),
])
def test_counter_increase_with_resets(values, expected):
    got = increase(pd.Series(values, dtype=float))
    assert (math.isnan(got) and math.isnan(expected)) or got == expected


@pytest.mark.parametrize("text, seconds", [("500ms", 0.5), ("30s", 30), ("5m", 300), ("1h", 3600)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


def test_three_valued_logic():
    r = rule("{all: [{signal: kv_cache_usage, agg: max, op: '>=', value: 0.95}, "
             "{signal: num_preemptions, agg: increase, op: '>', value: 0}]}")
    assert evaluate_rule(r, bundle(kv_cache_usage=[0.9, 0.99], num_preemptions=[1, 4])).status == "fires"
    assert evaluate_rule(r, bundle(kv_cache_usage=[0.9, 0.99], num_preemptions=[4, 4])).status == "quiet"
    assert evaluate_rule(r, bundle(kv_cache_usage=[0.5], num_preemptions=[4])).status == "quiet"  # false wins
    unknown = evaluate_rule(r, bundle(kv_cache_usage=[0.99]))
    assert unknown.status == "unknown" and "num_preemptions" in unknown.reason


def test_requires_gives_unknown_with_reason_never_quiet():
    r = rule("{signal: kv_cache_usage, agg: max, op: '>=', value: 0.95}", requires="[kv_cache_usage]")
    f = evaluate_rule(r, bundle(num_requests_waiting=[1]))
    assert f.status == "unknown"
    assert f.reason == "missing signal: kv_cache_usage"


def test_if_missing_false_lets_alternatives_decide():
    r = rule("{any: [{signal: num_requests_swapped, agg: max, op: '>', value: 0, if_missing: false}, "
             "{signal: num_requests_waiting, agg: max, op: '>', value: 0, if_missing: false}]}")
    assert evaluate_rule(r, bundle(num_requests_waiting=[0, 0])).status == "quiet"
    assert evaluate_rule(r, bundle(num_requests_waiting=[0, 3])).status == "fires"


def test_for_duration_needs_a_sustained_run():
    r = rule("{signal: kv_cache_usage, op: '>=', value: 0.95, for: 1m}")
    # samples every 15 s: 0.96 for 45 s only, then 0.96 for 60 s
    assert evaluate_rule(r, bundle(kv_cache_usage=[0.96, 0.96, 0.96, 0.96, 0.5])).status == "quiet"
    assert evaluate_rule(r, bundle(kv_cache_usage=[0.5, 0.96, 0.96, 0.96, 0.96, 0.96])).status == "fires"
    no_time = Bundle()
    for v in (0.99, 0.99, 0.99):
        no_time.add("kv_cache_usage", v, "x")
    assert evaluate_rule(r, no_time).status == "unknown"


def test_text_filter_on_events():
    r = rule("{signal: cuda_oom, agg: count, op: '>', value: 0, text_in: [load]}")
    b = Bundle()
    b.add("cuda_oom", 1e9, "log:x:1", text="profile")
    assert evaluate_rule(r, b).status == "quiet"
    b.add("cuda_oom", 1e9, "log:x:2", text="load")
    assert evaluate_rule(r, b).status == "fires"


def test_render_templates():
    b = bundle(kv_cache_usage=[0.5, 0.987], weights_bytes=[15 * 2**30])
    assert render("peak {kv_cache_usage.max:.1%}, weights {weights_bytes.last:gib}", b, {}) == \
        "peak 98.7%, weights 15.00 GiB"
    assert render("waiting {num_requests_waiting.max:.0f}", b, {}) == "waiting n/a"
    assert render("waiting {num_requests_waiting.max:.0f}", b, {}, strict=True) is None
    assert render("threshold {usage_min:.0%}", b, {"usage_min": 0.95}) == "threshold 95%"


@pytest.mark.parametrize("body, message", [
    ("id: X\n", "missing required key"),
    ("{", "not valid YAML"),
    ("id: X\nname: x\nclass: nope\ntitle: t\nseverity: warning\nmessage: m\nwhen: {signal: kv_cache_usage}\n" + DOC,
     "unknown class"),
    ("id: X\nname: x\nclass: healthy\ntitle: t\nseverity: warning\nmessage: m\nwhen: {signal: made_up}\n" + DOC,
     "unknown signal"),
    ("id: X\nname: x\nclass: healthy\ntitle: t\nseverity: warning\nmessage: m\n"
     "when: {signal: kv_cache_usage, agg: __import__}\n" + DOC, "unknown agg"),
    ("id: X\nname: x\nclass: healthy\ntitle: t\nseverity: warning\nmessage: m\nwhen: {signal: kv_cache_usage}\n"
     "doc: {meaning: m}\n", "doc must give"),
])
def test_bad_rule_files(body, message):
    with pytest.raises(RuleFileError, match=message):
        load_rule("bad.yaml", body)


def test_shipped_rule_corpus():
    """Catalog lint: unique ids, one class folder per rule, known signals, docs, every issue-2 class present."""
    rules = load_rules()
    ids = [r.id for r in rules]
    assert len(ids) == len(set(ids))
    assert {r.cls for r in rules} >= {"capacity_pressure", "partial_block_waste", "prefix_cache_eviction",
                                      "weights_dont_fit", "startup_kv_capacity"}
    for r in rules:
        assert r.path.split("/")[-2] == r.cls, f"{r.path} must sit in rules/{r.cls}/"
        assert r.doc["false_positives"] and r.remedy
        for group in r.requires:
            assert all(s in SIGNALS for s in group)
    assert (builtin_rules_dir() / "README.md").is_file()


def test_verdict_prefers_severity_then_priority_and_refuses_healthy_after_a_failure():
    from kvdiag.engine.evaluate import Finding
    a = Finding("A", "partial_block_waste", "fires", "warning", "a", priority=30)
    b = Finding("B", "capacity_pressure", "fires", "critical", "b", priority=60)
    c = Finding("C", "weights_dont_fit", "fires", "critical", "c", priority=90)
    assert verdict([a, b, c]).primary == "weights_dont_fit"
    assert verdict([a]).severity == "warning"
    q = Finding("Q", "capacity_pressure", "quiet", "critical", "q")
    assert verdict([q]).primary == "healthy"
    assert verdict([q], ["CUDA out of memory during profile (log:x:3)"]).primary == "inconclusive"
    u = Finding("U", "capacity_pressure", "unknown", "critical", "u")
    assert verdict([u]).primary == "inconclusive"


def test_derived_pool_and_partial_block_bound():
    b = bundle(num_gpu_blocks=[2048], block_size=[16], num_requests_running=[10, 100])
    derive_all(b)
    assert b.signal("kv_capacity_tokens")["value"].tolist() == [32768]
    assert b.signal("partial_block_waste_bound_tokens")["value"].tolist() == [1500]
    assert b.signal("partial_block_waste_bound_ratio")["value"].tolist() == [pytest.approx(1500 / 32768)]


def test_derived_windowed_hit_rate_from_counters_not_cumulative():
    # cumulative hits/queries at the end = 0.55, but the last third of the window hits 10 %
    b = bundle(prefix_cache_queries=[0, 1000, 2000, 3000, 4000, 5000],
               prefix_cache_hits=[0, 800, 1600, 2400, 2500, 2600])
    derive_all(b)
    assert b.signal("prefix_cache_hit_rate_early")["value"].iloc[0] == pytest.approx(0.8)
    assert b.signal("prefix_cache_hit_rate_late")["value"].iloc[0] == pytest.approx(0.1)


def test_derived_block_overhead():
    b = Bundle()
    b.add("kv_cache_size_tokens", 1_000_000, "log:x:1")
    b.add("context_tokens", 30_000, "log:x:2")
    b.add("kv_cache_usage", 0.40, "log:x:2")
    derive_all(b)
    assert b.signal("block_overhead_ratio")["value"].iloc[0] == pytest.approx(0.40 - 0.03)


def test_clean_start_up_alone_is_not_healthy():
    from kvdiag.engine.evaluate import Finding
    start = Finding("S", "startup_kv_capacity", "quiet", "critical", "pool holds a request")
    weights = Finding("W", "weights_dont_fit", "quiet", "critical", "weights fit")
    cap = Finding("C", "capacity_pressure", "unknown", "critical", "")
    v = verdict([start, weights, cap])
    assert v.primary == "inconclusive" and "no runtime signals" in v.summary
    cap_quiet = Finding("C", "capacity_pressure", "quiet", "critical", "usage 40 %")
    assert verdict([start, weights, cap_quiet]).primary == "healthy"
