"""Derived signals of the diagnosis catalog (kvdiag/derive.py): OOM phase from the order of start-up steps, start-up
crashes without an OOM text, memory shares, the hybrid KV-size check, utilization that fits an OOM."""

from __future__ import annotations

import pytest

from kvdiag.bundle import Bundle
from kvdiag.derive import derive

GIB = 2**30


def _phase(b: Bundle) -> list[str]:
    derive(b)
    return b.signal("cuda_oom_phase")["text"].tolist()


def test_frames_decide_when_they_name_a_phase():
    b = Bundle()
    b.add("weights_bytes", 60 * GIB, "log:x:1")
    b.add("cuda_oom", GIB, "log:x:9", text="load")
    assert _phase(b) == ["load"]
    assert b.signal("cuda_oom_phase")["source"].iloc[0] == "log:x:9"


@pytest.mark.parametrize("before, text, phase", [
    ([("cudagraph_bytes", 2 * GIB)], "unknown", "sampler"),          # V1: sampler warm-up follows graph capture
    ([("weights_bytes", 60 * GIB)], "unknown", "profile"),            # the profile run follows model loading
    ([("mm_profile_warning", 180224)], "profile", "encoder"),          # multimodal worst case in the profile run
    ([("weights_bytes", 10 * GIB), ("mm_profile_run", 1)], "unknown", "encoder"),
    ([("weights_bytes", 60 * GIB), ("num_gpu_blocks", 4000)], "unknown", "unknown"),  # pool sized, no capture seen
    ([], "unknown", "unknown"),
])
def test_phase_from_the_order_of_startup_steps(before, text, phase):
    b = Bundle()
    for i, (sig, v) in enumerate(before):
        b.add(sig, v, f"log:x:{i + 1}")
    b.add("cuda_oom", GIB, "log:x:9", text=text)
    assert _phase(b) == [phase]
    if phase != text:
        assert "log:x:9" in b.signal("cuda_oom_phase")["source"].iloc[0]


def test_serving_before_the_oom_blocks_the_sampler_inference():
    b = Bundle()
    b.add("cudagraph_bytes", 2 * GIB, "log:x:1")
    b.add("kv_cache_usage", 0.4, "log:x:5")
    b.add("cuda_oom", GIB, "log:x:9", text="unknown")
    assert _phase(b) == ["unknown"]


def test_startup_crash_after_weights_only_without_other_evidence():
    b = Bundle()
    b.add("weights_bytes", 15 * GIB, "log:x:6")
    b.add("python_traceback", 1, "log:x:7")
    derive(b)
    assert b.signal("startup_crash")["text"].tolist() == ["after_weights_before_kv"]
    for extra in ("cuda_oom", "num_gpu_blocks", "kv_capacity_error"):
        c = Bundle()
        c.add("weights_bytes", 15 * GIB, "log:x:6")
        c.add("python_traceback", 1, "log:x:7")
        c.add(extra, 1, "log:x:8", text="load" if extra == "cuda_oom" else "")
        derive(c)
        assert c.signal("startup_crash").empty, extra


def test_other_processes_share_and_the_utilization_that_fits():
    b = Bundle()
    b.add("gpu_total_bytes", 23.69 * GIB, "log:x:23")
    b.add("oom_other_processes_bytes", 8.57 * GIB, "log:x:23")
    derive(b)
    assert b.signal("oom_other_processes_ratio")["value"].iloc[0] == pytest.approx(8.57 / 23.69)
    assert b.signal("other_processes_free_ratio")["value"].iloc[0] == 0.58   # floor(1 − 0.362 − 0.05, 2 dp)


def test_cudagraph_and_activation_share_of_the_budget():
    b = Bundle()
    b.add("gpu_total_bytes", 80 * GIB, "log:x:1")
    b.add("gpu_memory_utilization", 0.9, "log:x:1")
    b.add("cudagraph_estimate_bytes", 36 * GIB, "log:x:2")
    b.add("activation_peak_bytes", 7.2 * GIB, "log:x:3")
    derive(b)
    assert b.signal("cudagraph_estimate_ratio")["value"].iloc[0] == pytest.approx(0.5)
    assert b.signal("activation_peak_ratio")["value"].iloc[0] == pytest.approx(0.1)


def test_hybrid_kv_size_line_against_concurrency():
    b = Bundle()
    b.add("kv_cache_size_tokens", 290_864, "log:x:3")
    b.add("max_model_len", 32_768, "log:x:4")
    b.add("max_concurrency", 33.04, "log:x:4")
    derive(b)
    assert b.signal("kv_tokens_from_concurrency")["value"].iloc[0] == pytest.approx(1_082_654.72)
    assert b.signal("kv_size_line_ratio")["value"].iloc[0] == pytest.approx(290_864 / 1_082_654.72)


def test_utilization_that_leaves_the_failed_allocation_outside_the_pool():
    b = Bundle()
    b.add("gpu_total_bytes", 79.18 * GIB, "log:x:1")
    b.add("gpu_memory_utilization", 0.95, "log:x:1")
    b.add("oom_free_bytes", 544.31 * 2**20, "log:x:4")
    b.add("cuda_oom", 594 * 2**20, "log:x:4", text="sampler")
    derive(b)
    # 0.95 − (594 − 544.31) MiB / 79.18 GiB − 0.01 = 0.9394 → 0.93
    assert b.signal("gpu_memory_utilization_for_oom")["value"].iloc[0] == 0.93


def test_sampler_rows_from_the_model_config():
    b = Bundle()
    b.model_config, b.model_config_source = {"vocab_size": 151936}, "config.json"
    b.add("cuda_oom", 594 * 2**20, "log:x:4", text="sampler")
    from kvdiag.derive import _shares  # only the share maths: the capacity model needs a full config
    _shares(b)
    assert b.signal("sampler_warmup_rows")["value"].iloc[0] == pytest.approx(1025, abs=1)   # max_num_seqs 1024
