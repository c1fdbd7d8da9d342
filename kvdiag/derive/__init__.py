"""Derived signals: what kvdiag computes from the collected ones, in the order of :data:`STEPS`.

:func:`derive_all` is the one entry: analyze (and through it check, watch, diff and the exporter), the rule cases
and the alert export's own value run the same steps in the same order. Each :class:`Step` names the signals it
``READS`` and ``WRITES``; ``tests/derive/test_steps.py`` checks that each written name is a declared signal with
exactly one writer, that no step reads what only a later step writes, and that the steps, run on the rule cases and
fixtures, read and write nothing they do not declare.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..bundle import Bundle
from ..signals import WINDOW_HISTOGRAMS
from .core import derive_hit_rate_thirds, derive_memory, derive_pool, derive_startup
from .dynamics import derive_dynamics
from .prefix import _cumulative_thirds, derive_prefix
from .queue import derive_queue
from .trend import derive_trend
from .windows import derive_windows


@dataclass(frozen=True)
class Step:
    """One step of the chain: ``run(bundle)`` adds the signals of ``WRITES``, reading only those of ``READS`` (its
    own among them, where it adds a value only when none was collected)."""

    name: str
    run: Callable[[Bundle], None]
    READS: frozenset[str]
    WRITES: frozenset[str]


def _hit_rate_thirds(bundle: Bundle) -> None:
    """Early / late / drop of the prefix-cache hit rate: from the counters or the V1 rolling gauge, else from a V0
    cumulative gauge (de-cumulated; only when the first gave none)."""
    derive_hit_rate_thirds(bundle)
    _cumulative_thirds(bundle)


def _names(*groups) -> frozenset[str]:
    return frozenset(n for g in groups for n in (g.split() if isinstance(g, str) else g))


_HIST = [stem for stem, _unit, _what in WINDOW_HISTOGRAMS.values()]

STEPS: tuple[Step, ...] = (
    Step("pool", derive_pool,
         READS=_names("block_size num_gpu_blocks"),
         WRITES=_names("kv_capacity_tokens")),
    Step("memory", derive_memory,
         READS=_names("""cache_dtype decode_context_parallel_size enable_prefix_caching gpu_budget_bytes
             gpu_memory_utilization gpu_memory_utilization_needed gpu_total_bytes kv_cache_memory_bytes
             kv_cache_size_tokens kv_capacity_tokens mamba_ssm_cache_dtype max_model_len num_speculative_tokens
             pipeline_parallel_size quantization speculative_method tensor_parallel_size vllm_version
             weights_bytes"""),
         WRITES=_names("""gpu_memory_utilization_needed kv_bytes_per_token kv_capacity_tokens_fp8
             kv_capacity_tokens_from_config kv_capacity_tokens_modelled min_tensor_parallel_for_weights
             weights_budget_ratio weights_estimate_bytes""")),
    Step("startup", derive_startup,
         READS=_names("""activation_peak_bytes block_size context_tokens cuda_oom cudagraph_bytes
             cudagraph_estimate_bytes exception free_memory_below_request gpu_budget_bytes gpu_memory_utilization
             gpu_total_bytes kv_cache_memory_bytes kv_cache_size_tokens kv_cache_usage kv_capacity_error
             kv_capacity_tokens max_concurrency max_model_len max_num_seqs mm_profile_run mm_profile_warning
             num_gpu_blocks num_requests_running num_requests_waiting oom_free_bytes oom_other_processes_bytes
             peak_torch_memory_bytes prompt_throughput python_traceback sampler_warmup_oom weights_bytes
             weights_load_failed"""),
         WRITES=_names("""activation_peak_bytes activation_peak_ratio block_overhead_ratio block_overhead_tokens
             cuda_oom_phase cudagraph_estimate_ratio gpu_memory_utilization_drop_for_oom gpu_memory_utilization_for_oom
             kv_size_line_ratio kv_tokens_from_concurrency max_num_seqs_for_oom mm_worst_case_tokens
             oom_free_to_tried_ratio oom_other_processes_ratio oom_tried_bytes other_processes_free_ratio
             partial_block_waste_bound_ratio partial_block_waste_bound_tokens sampler_warmup_rows startup_crash""")),
    Step("hit_rate_thirds", _hit_rate_thirds,
         READS=_names("""prefix_cache_hit_rate prefix_cache_hit_rate_cumulative prefix_cache_hit_rate_early
             prefix_cache_hits prefix_cache_queries prompt_throughput prompt_tokens"""),
         WRITES=_names("prefix_cache_hit_rate_drop prefix_cache_hit_rate_early prefix_cache_hit_rate_late")),
    Step("windows", derive_windows,
         READS=_names([f"{h}_{s}" for h in _HIST for s in ("sum", "count", "bucket", "mean", "p95")],
                      """counter_resets generation_tokens kv_cache_usage kv_cache_usage_high_seconds num_preemptions
             prefix_cache_hit_rate_window prefix_cache_hits prefix_cache_queries prompt_tokens"""),
         WRITES=_names([f"{h}_{s}" for h in _HIST for s in ("mean", "p50", "p95")],
                       """counter_resets kv_cache_usage_high_ratio kv_cache_usage_high_seconds
             prefix_cache_hit_rate_window""")),
    # before prefix: replicas_needed is sized from the queue's rates when it has them
    Step("queue", derive_queue,
         READS=_names("""block_size counter_resets kv_cache_size_tokens kv_cache_usage kv_capacity_tokens
             kv_near_full_level max_num_batched_tokens max_num_seqs num_gpu_blocks num_requests_running
             num_requests_waiting process_start_time request_completion_rate request_generation_tokens_mean
             request_inference_time_mean request_prompt_tokens_bucket request_prompt_tokens_count
             request_prompt_tokens_mean request_prompt_tokens_p95"""),
         WRITES=_names("""kv_cache_usage_over_level kv_near_full_level num_requests_waiting_near_full queue_grows
             queue_growth_rate queue_limit replicas_from_rates replicas_from_rates_high replicas_from_rates_low
             request_arrival_rate request_arrival_rate_high request_arrival_rate_low request_completion_rate
             window_samples window_seconds""")),
    Step("prefix", derive_prefix,
         READS=_names("""block_size generation_throughput generation_tokens hybrid_block_size kv_cache_size_tokens
             kv_cache_usage kv_capacity_tokens kv_capacity_tokens_fp8 kv_demand_tokens kv_fit_requests max_model_len
             max_num_seqs_fit num_preemptions num_requests_running num_requests_swapped num_requests_waiting
             prefix_cache_hit_rate prefix_cache_hit_rate_low_load prefix_cache_hits prefix_cache_queries
             prefix_cache_readmission_preemptions prefix_cache_retention_seconds prompt_throughput prompt_tokens
             replicas_from_rates replicas_from_rates_high replicas_from_rates_low request_generation_tokens_mean
             request_prompt_tokens_mean vllm_version"""),
         WRITES=_names("""hybrid_block_size kv_block_alloc_tokens_per_second kv_demand_ratio kv_demand_requests
             kv_demand_tokens kv_fit_requests max_num_seqs_fit prefix_cache_hit_rate_high_load
             prefix_cache_hit_rate_load_drop prefix_cache_hit_rate_low_load prefix_cache_readmission_preemptions
             prefix_cache_retention_seconds replicas_needed replicas_needed_fp8""")),
    Step("dynamics", derive_dynamics,
         READS=_names("""block_size kv_cache_size_tokens kv_cache_usage kv_capacity_tokens kv_token_occupancy
             num_requests_running num_requests_waiting num_requests_waiting_when_full prefix_cache_hit_rate_cumulative
             prefix_cache_hits prefix_cache_hits_per_second_early prefix_cache_queries prompt_tokens
             request_generation_tokens_mean request_prompt_tokens_mean"""),
         WRITES=_names("""block_size_suggested kv_empty_slots_ratio kv_extra_requests_fit kv_slots_freed_blocks
             kv_slots_freed_tokens kv_token_occupancy num_requests_waiting_when_full prefix_cache_hits_per_second_early
             prefix_cache_hits_per_second_late prefix_cache_hits_per_second_ratio
             prefix_cache_queries_per_second_early prefix_cache_queries_per_second_late
             prefix_cache_queries_per_second_ratio""")),
    Step("trend", derive_trend,
         READS=_names("""counter_resets kv_cache_usage kv_cache_usage_slope num_requests_running num_requests_waiting
             process_start_time request_generation_tokens_mean request_prompt_tokens_mean"""),
         WRITES=_names("""kv_cache_usage_slope kv_cache_usage_slope_recent kv_cache_usage_slope_stderr
             kv_cache_usage_slope_t kv_cache_usage_trend_level kv_cache_usage_trend_rise kv_cache_usage_trend_samples
             kv_cache_usage_trend_seconds kv_demand_tokens_slope kv_full_eta_high_seconds kv_full_eta_low_seconds
             kv_full_eta_seconds num_requests_waiting_slope""")),
)


def derive_all(bundle: Bundle) -> None:
    """Add every derived signal to ``bundle`` (in place): each step of :data:`STEPS`, in order."""
    for step in STEPS:
        step.run(bundle)
