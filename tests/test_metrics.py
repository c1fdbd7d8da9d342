"""Metrics collector on real pages (vLLM 0.33's own exposition; the real 0.11 usage-split excerpt)."""

from __future__ import annotations

import pytest

from conftest import FIXTURES
from kvdiag.bundle import Bundle
from kvdiag.collect.metrics import add_page, parse_page, read_metrics_file
from kvdiag.errors import InputError
from kvdiag.signals import metric_signal

METRICS = FIXTURES / "metrics"
SERIES = FIXTURES / "series"


def test_v033_page_signals_and_cache_config_facts():
    b = Bundle()
    read_metrics_file(b, str(METRICS / "vllm033_pressure_0054.prom"))
    assert b.signal("kv_cache_usage")["value"].tolist() == [pytest.approx(0.9960102593331434)]
    assert b.signal("num_requests_waiting")["value"].tolist() == [7.0]
    assert b.signal("num_preemptions")["value"].tolist() == [9.0]
    # cache_config_info labels become typed facts
    assert b.signal("num_gpu_blocks")["value"].tolist() == [3510.0]
    assert b.signal("block_size")["value"].tolist() == [16.0]
    assert b.signal("kv_cache_size_tokens")["value"].tolist() == [56160.0]
    assert b.signal("cache_dtype")["text"].tolist() == ["auto"]
    src = b.signal("kv_cache_usage")["source"].iloc[0]
    assert src.startswith('metric:vllm:kv_cache_usage_perc{engine="0",model_name="Qwen/Qwen2.5-7B-Instruct"}')


def test_usage_split_across_api_server_processes_takes_the_real_value():
    """0.11 with --api-server-count 8: seven series read 0.0, one carries 0.653 (vllm PR 28792)."""
    b = Bundle()
    read_metrics_file(b, str(METRICS / "v011_usage_split_across_api_servers.prom"))
    assert b.signal("kv_cache_usage")["value"].tolist() == [pytest.approx(0.6530455880475035)]
    assert 'pid="273"' in b.signal("kv_cache_usage")["source"].iloc[0]


@pytest.mark.parametrize("name, signal", [
    ("vllm:kv_cache_usage_perc", "kv_cache_usage"),
    ("vllm_kv_cache_usage_perc", "kv_cache_usage"),          # stored by a Prometheus 2.x server
    ("vllm:gpu_cache_usage_perc", "kv_cache_usage"),         # V0 and V1 <= 0.10
    ("ray_vllm:num_requests_waiting", "num_requests_waiting"),
    ("vllm:num_preemptions_total", "num_preemptions"),
    ("vllm:gpu_prefix_cache_hits_total", "prefix_cache_hits"),
    ("vllm:prefix_cache_queries_total", "prefix_cache_queries"),
    ("vllm:num_preemptions_created", None),
    ("http_requests_total", None),
])
def test_metric_names_map_to_signals(name, signal):
    assert metric_signal(name) == signal


def test_v0_page_with_vllm_underscore_spelling():
    page = ("# TYPE vllm_gpu_cache_usage_perc gauge\n"
            'vllm_gpu_cache_usage_perc{model_name="m"} 0.97\n'
            "# TYPE vllm_num_requests_swapped gauge\n"
            'vllm_num_requests_swapped{model_name="m"} 3\n'
            "# TYPE vllm_gpu_prefix_cache_hit_rate gauge\n"
            'vllm_gpu_prefix_cache_hit_rate{model_name="m"} -1\n')
    b = Bundle()
    add_page(b, parse_page(page, "test"), "test", 100.0)
    assert b.signal("kv_cache_usage")["value"].tolist() == [0.97]
    assert b.signal("num_requests_swapped")["value"].tolist() == [3.0]
    assert not b.has("prefix_cache_hit_rate")  # -1 means prefix caching is off
    assert b.signal("kv_cache_usage")["t"].tolist() == [100.0]


def test_data_parallel_engines_are_combined():
    page = ("# TYPE vllm:kv_cache_usage_perc gauge\n"
            'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.40\n'
            'vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.90\n'
            "# TYPE vllm:num_requests_waiting gauge\n"
            'vllm:num_requests_waiting{engine="0",model_name="m"} 2\n'
            'vllm:num_requests_waiting{engine="1",model_name="m"} 5\n')
    b = Bundle()
    add_page(b, parse_page(page, "test"), "test", None)
    assert b.signal("kv_cache_usage")["value"].tolist() == [0.90]   # worst engine
    assert b.signal("num_requests_waiting")["value"].tolist() == [7.0]  # whole server


@pytest.mark.parametrize("text, message", [
    ("", "empty"),
    ("<html><body>Not Found</body></html>", "HTML"),
    ("this is { not metrics", "not Prometheus"),
    ("\x00\x01binary", "binary"),
])
def test_bad_pages(text, message):
    with pytest.raises(InputError, match=message):
        parse_page(text, "page")


@pytest.mark.parametrize("run, expected", [("vllm033_pressure", "capacity_pressure"), ("vllm033_quiet", "healthy")])
def test_vllm033_series_pages_and_log_agree_with_truth(run, expected, kvdiag):
    """Every /metrics page of a run (in scrape order), and the same run's log, give the run's truth."""
    import json
    truth = json.loads((SERIES / run / "truth.json").read_text())
    assert truth["class"] == expected  # the run's own truth, written by its generator
    pages = sorted((SERIES / run / "metrics").glob("*.prom"))
    args = [a for p in pages for a in ("--metrics-file", str(p))]
    res_m = kvdiag("analyze", *args, "--format", "json")
    res_l = kvdiag("analyze", "--log", str(SERIES / run / "vllm.log"), "--format", "json")
    for res in (res_m, res_l):
        assert res.json()["verdict"]["primary"] == expected, res.out[:2000]
    if expected == "capacity_pressure":
        cap = next(f for f in res_m.json()["findings"] if f["class"] == "capacity_pressure")
        ev = {e["signal"]: e["value"] for e in cap["evidence"]}
        # the window's preemptions: the counter's increase over the pages, as truth counts them (±2: vLLM bumps
        # the counter only when the preempted request next produces output)
        assert ev["num_preemptions"] == pytest.approx(truth["totals"]["preemptions"], abs=2)
        assert ev["kv_capacity_tokens"] == truth["num_gpu_blocks"] * truth["block_size"]
