"""Dynamics signals (kvdiag/derive/dynamics.py): token occupancy of a full pool, prefix hits per second."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kvdiag.bundle import Bundle
from kvdiag.collect.metrics import parse_page, add_page, PageInfo
from kvdiag.derive import derive_all
from kvdiag.derive.dynamics import thirds_per_second, token_occupancy


def test_token_occupancy_is_tokens_over_reserved_slots():
    occ = token_occupancy(np.array([60.0, 10.0, 5.0]), np.array([1.0, 0.5, 0.0]), 16384, 55.0)
    assert occ[0] == pytest.approx(60 * 55 / 16384)
    assert occ[1] == pytest.approx(10 * 55 / (0.5 * 16384))
    assert math.isnan(occ[2])  # nothing reserved: no ratio


def test_thirds_per_second_and_resets():
    t = np.arange(0, 91, 10.0)  # 0..90 s, thirds 0-30 and 60-90
    c = np.array([0, 10, 20, 30, 40, 50, 60, 70, 80, 90.0]) * 10
    early, late = thirds_per_second(t, c)
    assert early == pytest.approx(10.0) and late == pytest.approx(10.0)
    c2 = c.copy()
    c2[8:] = [5, 105]  # a restart at t=80: the increase restarts from the value
    early, late = thirds_per_second(t, c2)
    assert late == pytest.approx((100 + 5 + 100) / 30)  # 600→700, reset to 5, 5→105
    # a rebuilt cumulative series (V0 rate × prompt tokens) that dips by rounding: no increase, not a reset
    c3 = c.copy()
    c3[8] = c3[7] - 1
    _, late = thirds_per_second(t, c3, resets=False)
    assert late == pytest.approx((100 + 0 + 201) / 30)  # 600→700, dip to 699 (no increase), 699→900


def _page(usage: float, running: int, waiting: int, hits: float, queries: float, prompt_sum: float,
          gen_sum: float, count: float, block_size: int = 256, blocks: int = 64) -> str:
    lab = 'engine="0",model_name="m"'
    return "\n".join([
        "# TYPE vllm:kv_cache_usage_perc gauge", f"vllm:kv_cache_usage_perc{{{lab}}} {usage}",
        "# TYPE vllm:num_requests_running gauge", f"vllm:num_requests_running{{{lab}}} {running}",
        "# TYPE vllm:num_requests_waiting gauge", f"vllm:num_requests_waiting{{{lab}}} {waiting}",
        "# TYPE vllm:prefix_cache_hits_total counter", f"vllm:prefix_cache_hits_total{{{lab}}} {hits}",
        "# TYPE vllm:prefix_cache_queries_total counter", f"vllm:prefix_cache_queries_total{{{lab}}} {queries}",
        "# TYPE vllm:request_prompt_tokens histogram",
        f'vllm:request_prompt_tokens_bucket{{{lab},le="+Inf"}} {count}',
        f"vllm:request_prompt_tokens_sum{{{lab}}} {prompt_sum}", f"vllm:request_prompt_tokens_count{{{lab}}} {count}",
        "# TYPE vllm:request_generation_tokens histogram",
        f'vllm:request_generation_tokens_bucket{{{lab},le="+Inf"}} {count}',
        f"vllm:request_generation_tokens_sum{{{lab}}} {gen_sum}",
        f"vllm:request_generation_tokens_count{{{lab}}} {count}",
        "# TYPE vllm:cache_config_info gauge",
        f'vllm:cache_config_info{{block_size="{block_size}",num_gpu_blocks="{blocks}",engine="0"}} 1.0', ""])


def _bundle(pages: list[str], interval: float = 15.0) -> Bundle:
    b = Bundle()
    info = PageInfo()
    for i, text in enumerate(pages):
        add_page(b, parse_page(text, f"page{i}"), f"page{i}", 1.7e9 + i * interval, info)
    derive_all(b)
    return b


def _last(b: Bundle, name: str) -> float:
    return float(b.signal(name)["value"].iloc[-1])


def test_full_pool_of_short_sequences_reads_low_occupancy_and_frees_slots():
    # 60 running requests of 40 prompt + 30 output tokens in 256-token blocks, pool 64 blocks, usage 99%
    pages = [_page(0.99, 60, 5, 0, 1000 * i, 40 * 10 * i, 30 * 10 * i, 10 * i) for i in range(1, 13)]
    b = _bundle(pages)
    want = 60 * (40 + 30 / 2) / (0.99 * 64 * 256)
    assert _last(b, "kv_token_occupancy") == pytest.approx(want, rel=1e-6)
    assert _last(b, "block_size_suggested") == 16
    # with 16-token blocks each request reserves about 55 + 8 slots instead of 0.99 × 16384 / 60
    freed = 0.99 * 64 * 256 - 60 * (55 + 8)
    assert _last(b, "kv_slots_freed_tokens") == pytest.approx(freed, rel=1e-6)
    assert _last(b, "kv_extra_requests_fit") == math.floor(freed / 63)


def test_occupancy_needs_full_instants():
    pages = [_page(0.5, 30, 0, 0, 1000 * i, 400 * i, 300 * i, 10 * i) for i in range(1, 13)]
    assert not _bundle(pages).has("kv_token_occupancy")


def test_hits_per_second_fall_versus_new_traffic():
    # eviction: queries hold at 1000/step, hits go from 800 to 200 per step
    hits, q = [0.0], [0.0]
    for i in range(23):
        hits.append(hits[-1] + (800 if i < 8 else 200))
        q.append(q[-1] + 1000)
    b = _bundle([_page(0.3, 4, 0, h, qq, 100 * k, 50 * k, k + 1) for k, (h, qq) in enumerate(zip(hits, q))])
    assert _last(b, "prefix_cache_hits_per_second_ratio") == pytest.approx(0.25, rel=0.05)
    assert _last(b, "prefix_cache_queries_per_second_ratio") == pytest.approx(1.0, rel=0.05)
    # new unshared traffic: queries double, hits hold
    hits, q = [0.0], [0.0]
    for i in range(23):
        hits.append(hits[-1] + 800)
        q.append(q[-1] + (1000 if i < 8 else 2000))
    b = _bundle([_page(0.3, 4, 0, h, qq, 100 * k, 50 * k, k + 1) for k, (h, qq) in enumerate(zip(hits, q))])
    assert _last(b, "prefix_cache_hits_per_second_ratio") == pytest.approx(1.0, rel=0.05)
    assert _last(b, "prefix_cache_queries_per_second_ratio") == pytest.approx(2.0, rel=0.05)


def test_v0_hit_rate_gauge_is_not_scaled_by_block_size():
    """vLLM 0.7 V0: gpu_prefix_cache_hit_rate is hits / queries (a ratio); only V1 0.7-0.8's gpu_prefix_cache_*
    counters count blocks."""
    text = "\n".join(["# TYPE vllm:gpu_cache_usage_perc gauge", 'vllm:gpu_cache_usage_perc{model_name="m"} 0.4',
                      "# TYPE vllm:gpu_prefix_cache_hit_rate gauge", 'vllm:gpu_prefix_cache_hit_rate{model_name="m"} 0.27',
                      "# TYPE vllm:cache_config_info gauge",
                      'vllm:cache_config_info{block_size="16",num_gpu_blocks="2203"} 1.0', ""])
    b = Bundle()
    add_page(b, parse_page(text, "p"), "p", 1.7e9, PageInfo())
    assert float(b.signal("prefix_cache_hit_rate_cumulative")["value"].iloc[-1]) == pytest.approx(0.27)


def test_millisecond_timestamps_are_a_clear_input_error(tmp_path, kvdiag):
    rec = tmp_path / "ms.om"
    rec.write_text("# TYPE vllm:kv_cache_usage_perc gauge\n"
                   'vllm:kv_cache_usage_perc{engine="0"} 0.5 1778491854300\n'
                   'vllm:kv_cache_usage_perc{engine="0"} 0.6 1778491869300\n# EOF\n')
    res = kvdiag("check", "--metrics-file", str(rec))
    assert res.code == 3 and "Traceback" not in res.err + res.out
    assert "milliseconds" in res.err + res.out and "internal error" not in res.err + res.out


def test_perfdata_is_plain_decimal():
    from kvdiag.check import _plain
    assert _plain(16000.0) == "16000" and _plain(1e9) == "1000000000" and _plain(1.038e-05) == "0.00001"
    assert _plain(0.984) == "0.984" and "e" not in _plain(123456.789)
