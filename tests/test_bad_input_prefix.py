"""Impossible inputs to the prefix-cache, demand and usage-split signals (found by a breaker pass, issue 6): each
gives no verdict on the impossible number, a note naming it, and never a traceback."""

from __future__ import annotations

import json

import pytest

from kvdiag.bundle import Bundle
from kvdiag.collect.metrics import add_page, parse_page
from kvdiag.derive import derive_all


def _page(metrics: dict, labels: str = 'engine="0",model_name="m"', extra: str = "") -> str:
    out = []
    for name, value in metrics.items():
        kind = "counter" if name.endswith("_total") else "gauge"
        out += [f"# TYPE {name.removesuffix('_total')} {kind}", f"{name}{{{labels}}} {value}"]
    return "\n".join(out) + "\n" + extra


def _write(tmp_path, pages: list[str]) -> list[str]:
    args = []
    for i, text in enumerate(pages):
        p = tmp_path / f"p{i}.prom"
        p.write_text(text)
        args += ["--metrics-file", str(p)]
    return args


def _analyze(kvdiag, *args):
    res = kvdiag("analyze", *args, "--format", "json")
    assert "Traceback" not in res.err and res.code in (0, 1, 2, 3), res.err
    return res, res.json()


def test_prefix_hits_above_queries_are_refused_with_a_note(kvdiag, tmp_path):
    pages = [_page({"vllm:prefix_cache_queries_total": 1000 * i, "vllm:prefix_cache_hits_total": 2500 * i,
                    "vllm:kv_cache_usage_perc": 0.2 if i < 3 else 0.9, "vllm:num_requests_waiting": 0})
             for i in range(6)]
    _, rep = _analyze(kvdiag, *_write(tmp_path, pages))
    assert rep["verdict"]["primary"] != "prefix_cache_eviction"
    status = {f["rule_id"]: f["status"] for f in rep["findings"]}
    assert status["PFX001"] == status["PFX002"] == "unknown"
    assert any("prefix_cache_hit_rate_early = 2.5 not used: a hit rate outside 0-100%" in n for n in rep["notes"])
    assert rep["verdict"]["confidence"] == "low"
    text = json.dumps(rep["findings"])
    assert "250.0%" not in text


@pytest.mark.parametrize("line, why", [
    ("Prefix cache hit rate: 150.0%", "above 100"),
    ("Prefix cache hit rate: -50.0%", "negative"),
    ("GPU KV cache usage: 150.0%", "above 100"),
    ("Prefix cache hit rate: " + "9" * 320 + ".0%", "huge"),
])
def test_impossible_stats_line_values_are_skipped(kvdiag, tmp_path, line, why):
    rows = [f"INFO 05-11 09:3{i}:00 [loggers.py:248] Engine 000: Avg prompt throughput: 10.0 tokens/s, Avg generation "
            f"throughput: 5.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 10.0%, "
            f"Prefix cache hit rate: 60.0%" for i in range(3)]
    rows.append(f"INFO 05-11 09:34:00 [loggers.py:248] Engine 000: Avg prompt throughput: 10.0 tokens/s, Avg "
                f"generation throughput: 5.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, "
                + (line if "usage" in line else f"GPU KV cache usage: 90.0%, {line}"))
    log = tmp_path / "vllm.log"
    log.write_text("\n".join(rows) + "\n")
    _, rep = _analyze(kvdiag, "--log", str(log))
    notes = " ".join(rep["inputs"][0]["notes"])
    assert "stats-line value(s) out of their domain (negative, or a percentage above 100) skipped" in notes, why
    for f in rep["findings"]:
        for e in f["evidence"]:
            if e["unit"] == "ratio" and e["signal"].startswith(("kv_cache_usage", "prefix_cache_hit_rate")) \
                    and not e["signal"].endswith(("drop", "over_level")) and e["value"] is not None:  # signed differences
                assert 0 <= e["value"] <= 1, (f["rule_id"], e)


def test_negative_residency_bounds_give_no_negative_seconds():
    b = Bundle()
    for i in range(4):
        n = 10 * i
        text = ("# TYPE vllm:kv_block_idle_before_evict_seconds histogram\n"
                f'vllm:kv_block_idle_before_evict_seconds_bucket{{engine="0",le="-10"}} {n}\n'
                f'vllm:kv_block_idle_before_evict_seconds_bucket{{engine="0",le="+Inf"}} {n}\n'
                f'vllm:kv_block_idle_before_evict_seconds_count{{engine="0"}} {n}\n'
                f'vllm:kv_block_idle_before_evict_seconds_sum{{engine="0"}} {-10 * n}\n')
        add_page(b, parse_page(text, "p"), "p", 1_700_000_000.0 + 15 * i)
    derive_all(b)
    assert not b.has("kv_block_idle_before_evict_p50") and not b.has("kv_block_idle_before_evict_mean")
    assert any("kv_block_idle_before_evict_p50 = -10 not used: negative seconds" in n for n in b.skipped_derived)


@pytest.mark.parametrize("prompt_sum", [1e17, 1e308])
def test_absurd_length_means_give_no_demand(prompt_sum):
    """1e17 tokens of prompts over two requests: a mean no request can have; 1e308: not a reading at all (dropped
    with the page's other out-of-domain values)."""
    b = Bundle()
    for i in range(3):
        text = _page({"vllm:num_requests_running": 5, "vllm:num_requests_waiting": 1},
                     extra="# TYPE vllm:request_prompt_tokens histogram\n"
                           f'vllm:request_prompt_tokens_sum{{engine="0"}} {prompt_sum * (i > 0)}\n'
                           f'vllm:request_prompt_tokens_count{{engine="0"}} {2 * i}\n'
                           "# TYPE vllm:request_generation_tokens histogram\n"
                           f'vllm:request_generation_tokens_sum{{engine="0"}} {100 * i}\n'
                           f'vllm:request_generation_tokens_count{{engine="0"}} {2 * i}\n')
        add_page(b, parse_page(text, "p"), "p", 1_700_000_000.0 + 15 * i)
    b.add("kv_capacity_tokens", 16_000, "test")
    derive_all(b)
    assert not b.has("kv_demand_tokens") and not b.has("kv_demand_ratio")
    if prompt_sum < 1e18:
        assert any("kv_demand_tokens not estimated" in n for n in b.skipped_derived)
    else:
        assert b.dropped_values["request_prompt_tokens_sum"] == 2


@pytest.mark.parametrize("raw", ["inf", "nan", "0", "-16", "1e9", "abc", "16.5"])
def test_impossible_block_size_labels_are_not_facts(raw):
    b = Bundle()
    text = ("# TYPE vllm:cache_config_info gauge\n"
            f'vllm:cache_config_info{{block_size="{raw}",num_gpu_blocks="1000",engine="0"}} 1\n'
            "# TYPE vllm:gpu_prefix_cache_queries counter\n"
            'vllm:gpu_prefix_cache_queries_total{engine="0"} 100\n')
    add_page(b, parse_page(text, "p"), "p", 1.0)
    assert not b.has("block_size")
    assert b.signal("prefix_cache_queries")["value"].tolist() == [100.0]   # left in blocks, not scaled by nonsense
    assert b.signal("num_gpu_blocks")["value"].tolist() == [1000.0]


def test_v0_cumulative_rate_that_disagrees_with_the_prompt_counter_is_not_used():
    b = Bundle()
    for i, (rate, prompt) in enumerate([(0.6, 0), (0.6, 1000), (0.6, 2000), (0.6, 3000), (0.6, 4000), (0.59, 4001)]):
        text = _page({"vllm:gpu_prefix_cache_hit_rate": rate, "vllm:prompt_tokens_total": prompt,
                      "vllm:gpu_cache_usage_perc": 0.9}, labels='model_name="m"')
        add_page(b, parse_page(text, "p"), "p", 1_700_000_000.0 + 15 * i)
    derive_all(b)
    assert not b.has("prefix_cache_hit_rate_drop")          # one token of growth cannot carry a 1-point fall
    assert any("do not fit together" in n for n in b.skipped_derived)


def test_pid_labels_are_escaped_and_shortened_in_sources():
    pids = ['a\nINJECT: healthy "x', "<script>alert(1)</script>", "y" * 3000]
    def esc(v: str) -> str:  # exposition-format escaping of a label value
        return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

    text = "# TYPE vllm:kv_cache_usage_perc gauge\n" + "".join(
        f'vllm:kv_cache_usage_perc{{engine="0",pid="{esc(p)}"}} {0.5 if k == 0 else 0.0}\n'
        for k, p in enumerate(pids))
    b = Bundle()
    add_page(b, parse_page(text, "p"), "p", 1.0)
    src = b.signal("kv_cache_usage_series")["source"].iloc[0]
    assert "\n" not in src and '\\"x' in src and len(src) < 300
    assert b.signal("kv_cache_usage_series")["value"].tolist() == [3.0]


def test_demand_ratio_is_shown_as_times_the_pool(kvdiag):
    from kvdiag.report.render import _fmt_value
    from kvdiag.signals import SIGNALS

    assert _fmt_value(4.9375, SIGNALS["kv_demand_ratio"].unit) == "4.94x"
