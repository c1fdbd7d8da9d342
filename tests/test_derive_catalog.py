"""Derived signals of the diagnosis catalog (kvdiag/derive/core.py): OOM phase from the order of start-up steps, start-up
crashes without an OOM text, memory shares, the hybrid KV-size check, utilization that fits an OOM; the numbers remedies
and evidence quote (issue 11)."""

from __future__ import annotations

import pytest

from kvdiag.bundle import Bundle
from kvdiag.derive import derive_all
from kvdiag.derive.core import activation_from_peak_torch, utilization_for_tokens
from kvdiag.signals import SIGNALS

GIB = 2**30


def _phase(b: Bundle) -> list[str]:
    derive_all(b)
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
    derive_all(b)
    assert b.signal("startup_crash")["text"].tolist() == ["after_weights_before_kv"]
    for extra in ("cuda_oom", "num_gpu_blocks", "kv_capacity_error"):
        c = Bundle()
        c.add("weights_bytes", 15 * GIB, "log:x:6")
        c.add("python_traceback", 1, "log:x:7")
        c.add(extra, 1, "log:x:8", text="load" if extra == "cuda_oom" else "")
        derive_all(c)
        assert c.signal("startup_crash").empty, extra


def test_other_processes_share_and_the_utilization_that_fits():
    b = Bundle()
    b.add("gpu_total_bytes", 23.69 * GIB, "log:x:23")
    b.add("oom_other_processes_bytes", 8.57 * GIB, "log:x:23")
    derive_all(b)
    assert b.signal("oom_other_processes_ratio")["value"].iloc[0] == pytest.approx(8.57 / 23.69)
    assert b.signal("other_processes_free_ratio")["value"].iloc[0] == 0.58   # floor(1 − 0.362 − 0.05, 2 dp)


def test_cudagraph_and_activation_share_of_the_budget():
    b = Bundle()
    b.add("gpu_total_bytes", 80 * GIB, "log:x:1")
    b.add("gpu_memory_utilization", 0.9, "log:x:1")
    b.add("cudagraph_estimate_bytes", 36 * GIB, "log:x:2")
    b.add("activation_peak_bytes", 7.2 * GIB, "log:x:3")
    derive_all(b)
    assert b.signal("cudagraph_estimate_ratio")["value"].iloc[0] == pytest.approx(0.5)
    assert b.signal("activation_peak_ratio")["value"].iloc[0] == pytest.approx(0.1)


def test_hybrid_kv_size_line_against_concurrency():
    b = Bundle()
    b.add("kv_cache_size_tokens", 290_864, "log:x:3")
    b.add("max_model_len", 32_768, "log:x:4")
    b.add("max_concurrency", 33.04, "log:x:4")
    derive_all(b)
    assert b.signal("kv_tokens_from_concurrency")["value"].iloc[0] == pytest.approx(1_082_654.72)
    assert b.signal("kv_size_line_ratio")["value"].iloc[0] == pytest.approx(290_864 / 1_082_654.72)


def test_utilization_that_leaves_the_failed_allocation_outside_the_pool():
    b = Bundle()
    b.add("gpu_total_bytes", 79.18 * GIB, "log:x:1")
    b.add("gpu_memory_utilization", 0.95, "log:x:1")
    b.add("oom_free_bytes", 544.31 * 2**20, "log:x:4")
    b.add("cuda_oom", 594 * 2**20, "log:x:4", text="sampler")
    derive_all(b)
    # 0.95 − (594 − 544.31) MiB / 79.18 GiB − 0.01 = 0.9394 → 0.93
    assert b.signal("gpu_memory_utilization_for_oom")["value"].iloc[0] == 0.93


def test_sampler_rows_from_the_model_config():
    b = Bundle()
    b.model_config, b.model_config_source = {"vocab_size": 151936}, "config.json"
    b.add("cuda_oom", 594 * 2**20, "log:x:4", text="sampler")
    from kvdiag.derive.core import _shares  # only the share maths: the capacity model needs a full config
    _shares(b)
    assert b.signal("sampler_warmup_rows")["value"].iloc[0] == pytest.approx(1025, abs=1)   # max_num_seqs 1024


# --- issue 11: numbers the remedies and evidence quote -------------------------------------------------------------
def test_oom_tried_bytes_names_the_number_cuda_oom_phase_carries():
    """The phase is a category; the bytes it carries are the failed allocation: evidence quotes them by that name."""
    b = Bundle()
    b.add("cuda_oom", 3.82 * GIB, "log:x:7", text="runtime")
    derive_all(b)
    tried = b.signal("oom_tried_bytes")
    assert tried["value"].tolist() == [pytest.approx(3.82 * GIB)] and tried["text"].tolist() == ["runtime"]
    assert SIGNALS["oom_tried_bytes"].unit == "bytes" and "phase" not in SIGNALS["oom_tried_bytes"].name


def test_activation_peak_is_peak_torch_memory_minus_the_weights():
    """001 (0.6.4 M1): peak_torch_memory 17.98 GiB after weights of 14.99 GiB → activation 2.99 GiB; the KV size it
    printed checks out: 23.58 × 0.90 − 17.98 − 0.35 = 2.89 GiB."""
    assert activation_from_peak_torch(17.98 * GIB, 14.99 * GIB) == pytest.approx(2.99 * GIB)
    assert 23.58 * 0.90 - 17.98 - 0.35 == pytest.approx(2.89, abs=0.005)
    with pytest.raises(ValueError):
        activation_from_peak_torch(10 * GIB, 14.99 * GIB)
    b = Bundle()
    b.add("weights_bytes", 14.99 * GIB, "log:x:8", segment=1)
    b.add("peak_torch_memory_bytes", 17.98 * GIB, "log:x:9", segment=1)
    b.add("peak_torch_memory_bytes", 17.06 * GIB, "log:x:3", segment=0)   # no weights line in its start-up: not split
    derive_all(b)
    act = b.signal("activation_peak_bytes")
    assert act["value"].tolist() == [pytest.approx(2.99 * GIB)]
    assert "log:x:9, weights + activations" in act["source"].iloc[0] and "log:x:8" in act["source"].iloc[0]


def test_utilization_that_holds_one_request_priced_at_the_pools_own_bytes_per_token():
    """001 without a model config: 2.89 GiB hold 23,648 tokens; 29,000 need 5,352 more × 2.89 GiB / 23,648 = 0.654 GiB
    = 0.0277 of the 23.58 GiB GPU: 0.90 + 0.0277 = 0.928 → 0.93 (the capacity model of test_capacity_remedies agrees)."""
    assert utilization_for_tokens(0.90, 2.89 * GIB, 23_648, 29_000, 23.58 * GIB) == 0.93
    assert utilization_for_tokens(0.90, 2.89 * GIB, 23_648, 23_648, 23.58 * GIB) == 0.90   # exact: no float step up
    with pytest.raises(ValueError):
        utilization_for_tokens(0.90, 0, 23_648, 29_000, 23.58 * GIB)
    b = Bundle()
    for sig, v, line in (("gpu_total_bytes", 23.58 * GIB, 9), ("gpu_memory_utilization", 0.90, 9),
                         ("kv_cache_memory_bytes", 2.89 * GIB, 9), ("max_model_len", 29_000, 12),
                         ("kv_cache_size_tokens", 23_648, 12)):
        b.add(sig, v, f"log:x:{line}", segment=1)
    b.add("max_model_len", 20_000, "log:x:4", segment=0)                 # another start-up's value is not used
    derive_all(b)
    need = b.signal("gpu_memory_utilization_needed")
    assert need["value"].tolist() == [0.93] and need["text"].iloc[0] == "priced at the pool's own KV bytes per token"


def test_oom_shares_the_remedies_quote():
    """003: 786 MiB tried, 140.75 MiB free of 79.11 GiB: 17.9 % of it fits; lower utilization by
    (786 − 140.75) MiB / 79.11 GiB + 0.01 = 0.018 → 0.02; with max_num_seqs 1024: 1024 × 140.75 / 786 = 183."""
    b = Bundle()
    b.add("gpu_total_bytes", 79.11 * GIB, "log:x:1")
    b.add("max_num_seqs", 1024, "log:x:2")
    b.add("oom_free_bytes", 140.75 * 2**20, "log:x:4")
    b.add("cuda_oom", 786 * 2**20, "log:x:4", text="sampler")
    derive_all(b)
    assert b.signal("oom_free_to_tried_ratio")["value"].iloc[0] == pytest.approx(140.75 / 786)
    assert b.signal("gpu_memory_utilization_drop_for_oom")["value"].iloc[0] == 0.02
    assert b.signal("max_num_seqs_for_oom")["value"].iloc[0] == 183


def test_block_overhead_tokens_are_the_slots_held_beyond_the_tokens():
    """017's measurement: 44.6 % of 1,096,153 tokens held by one 36,000-token request → 452,884 slots beyond it."""
    b = Bundle()
    b.add("kv_cache_size_tokens", 1_096_153, "log:x:2")
    b.add("context_tokens", 36_000, "log:x:3")
    b.add("kv_cache_usage", 0.446, "log:x:3")
    derive_all(b)
    assert b.signal("block_overhead_tokens")["value"].iloc[0] == pytest.approx(0.446 * 1_096_153 - 36_000)
    assert b.signal("block_overhead_ratio")["value"].iloc[0] == pytest.approx(0.446 - 36_000 / 1_096_153)


def test_m6_suggested_kv_cache_memory_is_read_in_bytes():
    """007's M6 line prints '--kv-cache-memory=11259300148 (10.49 GiB) to fit into requested memory'."""
    from conftest import FIXTURES
    from kvdiag.collect.logs import read_logs

    b = Bundle()
    read_logs(b, [str(next((FIXTURES / "incidents").glob("007-*")) / "vllm.log")])
    assert b.signal("kv_cache_memory_suggested_bytes")["value"].tolist() == [11_259_300_148]
