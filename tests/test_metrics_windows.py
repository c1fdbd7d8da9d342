"""Window maths (Prometheus semantics) and the coverage of the /metrics name registry."""

from __future__ import annotations

import math
import pytest

from kvdiag.bundle import Bundle
from kvdiag.collect.metrics import add_page, parse_page
from kvdiag.derive.core import increase
from kvdiag.signals import IGNORED_METRICS, METRIC_TO_SIGNAL, WINDOW_HISTOGRAMS, classify_metric
from kvdiag.derive.windows import derive_windows, histogram_quantile, resets, time_above

from conftest import FIXTURES

# the names of shared/reference/vllm-observability.md, copied with provenance (CI has no shared/ folder)
REFERENCE_NAMES = FIXTURES / "metrics" / "reference_metric_names.txt"


def test_increase_counts_a_reset_as_a_restart_from_zero():
    # 10 → 14 (+4), falls to 3 (restart: +3), → 5 (+2)
    assert increase(__import__("pandas").Series([10.0, 14.0, 3.0, 5.0])) == 9.0
    assert resets([10, 14, 3, 5, 1]) == 2
    assert resets([1, 2, 3]) == 0


@pytest.mark.parametrize("q, expected", [(0.5, 1.5), (0.95, 3.6), (0.25, 1.0), (0.0, 0.0)])
def test_histogram_quantile_interpolates_like_promql(q, expected):
    # 1 obs ≤ 1, 2 more ≤ 2, 1 more ≤ 4, none above
    assert histogram_quantile(q, [1, 2, 4, math.inf], [1, 3, 4, 4]) == pytest.approx(expected)


def test_histogram_quantile_in_the_inf_bucket_returns_the_highest_finite_bound():
    assert histogram_quantile(0.99, [1, 5, math.inf], [0, 1, 10]) == 5.0
    assert math.isnan(histogram_quantile(0.5, [1, 5], [1, 2]))         # no +Inf bucket
    assert math.isnan(histogram_quantile(0.5, [1, math.inf], [0, 0]))  # no observation


def test_time_above_threshold_each_sample_holds_until_the_next():
    above, window = time_above([0, 10, 20, 30, 40], [0.5, 0.96, 0.97, 0.5, 0.99], 0.95)
    assert (above, window) == (20.0, 40.0)
    assert math.isnan(time_above([0], [1.0], 0.95)[0])


def _page(t_usage, n, q_sum, buckets):
    b = "\n".join(f'vllm:request_queue_time_seconds_bucket{{engine="0",le="{le}",model_name="m"}} {c}'
                  for le, c in buckets)
    return (f"# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{{engine=\"0\",model_name=\"m\"}} {t_usage}\n"
            f"# TYPE vllm:request_queue_time_seconds histogram\n{b}\n"
            f'vllm:request_queue_time_seconds_count{{engine="0",model_name="m"}} {n}\n'
            f'vllm:request_queue_time_seconds_sum{{engine="0",model_name="m"}} {q_sum}\n')


def test_histogram_window_uses_bucket_increases_across_a_restart():
    """Before the restart 100 short waits; the window then sees a restart and 10 long waits only."""
    b = Bundle()
    pages = [(0.5, 100, 10.0, [("1.0", 100), ("10.0", 100), ("+Inf", 100)]),
             (0.96, 0, 0.0, [("1.0", 0), ("10.0", 0), ("+Inf", 0)]),          # restart: everything at 0
             (0.97, 10, 80.0, [("1.0", 0), ("10.0", 10), ("+Inf", 10)])]
    for i, p in enumerate(pages):
        add_page(b, parse_page(_page(*p), "t"), "t", 100.0 + 10 * i)
    derive_windows(b)
    assert b.signal("request_queue_time_mean")["value"].tolist() == [pytest.approx(8.0)]   # 80 s / 10
    assert b.signal("request_queue_time_p50")["value"].tolist() == [pytest.approx(5.5)]    # within (1, 10]
    assert b.signal("kv_cache_usage_high_seconds")["value"].tolist() == [10.0]
    assert b.signal("kv_cache_usage_high_ratio")["value"].tolist() == [0.5]


def test_prefix_hit_rate_over_the_window_is_delta_hits_over_delta_queries():
    b = Bundle()
    for i, (q, h) in enumerate([(1000, 900), (2000, 1000), (3000, 1100)]):   # cumulative 37 %, window 10 %
        page = (f"# TYPE vllm:prefix_cache_queries counter\nvllm:prefix_cache_queries_total{{engine=\"0\"}} {q}\n"
                f"# TYPE vllm:prefix_cache_hits counter\nvllm:prefix_cache_hits_total{{engine=\"0\"}} {h}\n")
        add_page(b, parse_page(page, "t"), "t", 10.0 * i)
    derive_windows(b)
    assert b.signal("prefix_cache_hit_rate_window")["value"].tolist() == [pytest.approx(0.1)]


def test_old_and_new_names_on_one_page_are_not_summed():
    """V1 0.9-0.10 expose both prefix-cache counter pairs and both usage gauges (same values)."""
    page = ("# TYPE vllm:prefix_cache_queries counter\nvllm:prefix_cache_queries_total{engine=\"0\"} 500\n"
            "# TYPE vllm:gpu_prefix_cache_queries counter\nvllm:gpu_prefix_cache_queries_total{engine=\"0\"} 500\n"
            "# TYPE vllm:gpu_cache_usage_perc gauge\nvllm:gpu_cache_usage_perc{engine=\"0\"} 0.7\n"
            "# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{engine=\"0\"} 0.7\n")
    b = Bundle()
    add_page(b, parse_page(page, "t"), "t", 1.0)
    assert b.signal("prefix_cache_queries")["value"].tolist() == [500.0]
    assert "vllm:prefix_cache_queries_total" in b.signal("prefix_cache_queries")["source"].iloc[0]
    assert b.signal("kv_cache_usage")["value"].tolist() == [0.7]


def test_v1_08_prefix_counters_in_blocks_are_scaled_to_tokens():
    page = ('# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{block_size="16",num_gpu_blocks="None"} 1\n'
            "# TYPE vllm:gpu_cache_usage_perc gauge\nvllm:gpu_cache_usage_perc{engine=\"0\"} 0.7\n"
            "# TYPE vllm:gpu_prefix_cache_queries counter\nvllm:gpu_prefix_cache_queries_total{engine=\"0\"} 50\n")
    b = Bundle()
    add_page(b, parse_page(page, "t"), "t", 1.0)
    assert b.signal("prefix_cache_queries")["value"].tolist() == [800.0]
    assert "blocks in vLLM 0.7-0.8" in b.signal("prefix_cache_queries")["source"].iloc[0]


def test_waiting_by_reason_keeps_only_capacity():
    page = ("# TYPE vllm:num_requests_waiting_by_reason gauge\n"
            'vllm:num_requests_waiting_by_reason{engine="0",reason="capacity"} 4\n'
            'vllm:num_requests_waiting_by_reason{engine="0",reason="deferred"} 9\n')
    b = Bundle()
    add_page(b, parse_page(page, "t"), "t", 1.0)
    assert b.signal("num_requests_waiting_capacity")["value"].tolist() == [4.0]


def test_every_metric_of_the_reference_is_read_or_ignored_with_a_reason():
    names = [line.removeprefix("vllm:") for line in REFERENCE_NAMES.read_text(encoding="utf-8").splitlines()
             if line.startswith("vllm:")]
    assert len(names) > 60
    unknown = [n for n in names if classify_metric("vllm:" + n)[0] == "unknown"]
    assert unknown == []
    for n in names:   # the same for the vllm_ spelling and the Ray prefix
        assert classify_metric("vllm_" + n) == classify_metric("vllm:" + n) == classify_metric("ray_vllm:" + n)


def test_ignored_and_read_tables_do_not_overlap():
    assert not set(IGNORED_METRICS) & set(METRIC_TO_SIGNAL)
    assert not set(IGNORED_METRICS) & set(WINDOW_HISTOGRAMS)


def test_several_engines_and_model_names_are_combined_and_noted(tmp_path):
    from kvdiag.collect.metrics import read_metrics_file

    page = tmp_path / "dp.prom"
    page.write_text("# TYPE vllm:kv_cache_usage_perc gauge\n"
                    'vllm:kv_cache_usage_perc{engine="0",model_name="a"} 0.5\n'
                    'vllm:kv_cache_usage_perc{engine="1",model_name="a"} 0.9\n'
                    'vllm:kv_cache_usage_perc{engine="0",model_name="b"} 0.2\n'
                    "# TYPE vllm:num_requests_waiting gauge\n"
                    'vllm:num_requests_waiting{engine="0",model_name="a"} 1\n'
                    'vllm:num_requests_waiting{engine="1",model_name="a"} 2\n'
                    'vllm:num_requests_waiting{engine="0",model_name="b"} 4\n'
                    "# TYPE vllm:num_preemptions_created gauge\n"
                    'vllm:num_preemptions_created{engine="0",model_name="a"} 1.7e9\n')
    b = Bundle()
    info = read_metrics_file(b, str(page))
    assert b.signal("kv_cache_usage")["value"].tolist() == [0.9]
    assert b.signal("num_requests_waiting")["value"].tolist() == [7.0]
    assert not b.has("num_preemptions")   # *_created is not the counter
    assert any("2 data-parallel engines" in n for n in info.notes)
    assert any("2 model names (a, b)" in n for n in info.notes)
