"""SIGNALS: the one vocabulary that logs and metrics both feed, and that rules read.

Every observation kvdiag collects is stored under a signal name from this registry, in base units
(ratios 0–1, tokens, blocks, bytes, seconds, requests). Collectors translate each vLLM version's
metric names and log wordings into these names; rules never see a vLLM metric name.

Sources are cited as in ``shared/reference/vllm-observability.md`` (§1 metrics, §2 log lines).
"""

from __future__ import annotations

import math

from dataclasses import dataclass, field

from . import vllm_metrics as _vm


@dataclass(frozen=True)
class Signal:
    """One named quantity.

    Attributes:
        name: the signal name rules use (vLLM's / Prometheus's own term where one exists).
        kind: ``gauge`` (instant value), ``counter`` (monotonic, resets on restart), ``fact``
            (configuration or start-up figure), ``event`` (something that happened; value is
            a count or a size, ``text`` carries a category).
        unit: base unit: ``ratio``, ``tokens``, ``blocks``, ``bytes``, ``requests``,
            ``tokens/s``, ``ratio/s``, ``requests/s``, ``seconds``, ``x`` (multiplier), ``count``, ``text``, ``bool``.
        description: one line.
        metrics: vLLM metric names (without the ``vllm:`` prefix, without ``_total``) that
            feed it, with the versions that expose them.
        logs: log-line ids of the reference (§2) that feed it.
    """

    name: str
    kind: str
    unit: str
    description: str
    metrics: tuple[str, ...] = field(default_factory=tuple)
    logs: tuple[str, ...] = field(default_factory=tuple)


def _fed(*signals: str) -> tuple[str, ...]:
    """The ``metrics`` prose of a signal read from (or derived from) these signals' /metrics names."""
    return tuple(p for s in signals for p in _vm.prose(s))


def _info(signal: str) -> tuple[str, ...]:
    """The ``metrics`` prose of a fact read from a ``cache_config_info`` label."""
    return _vm.info_prose(signal)


_SIGNALS = [
    # --- KV pool and scheduler state (gauges) -------------------------------------------------
    Signal("kv_cache_usage", "gauge", "ratio",
           "share of usable KV blocks pinned by live requests (cached-but-free prefix blocks count as free)",
           _fed("kv_cache_usage"),
           ("periodic stats line 'GPU KV cache usage: X%' (V0 and V1, all versions)",)),
    Signal("cpu_cache_usage", "gauge", "ratio", "V0 CPU swap pool usage",
           _fed("cpu_cache_usage"), ("V0 stats line 'CPU KV cache usage: X%'",)),
    Signal("num_requests_running", "gauge", "requests", "requests in the running batch",
           _fed("num_requests_running"), ("stats line 'Running: N reqs'",)),
    Signal("num_requests_waiting", "gauge", "requests", "requests queued, not yet scheduled",
           _fed("num_requests_waiting"), ("stats line 'Waiting: N reqs' (V1) / 'Pending: N reqs' (V0)",)),
    Signal("num_requests_swapped", "gauge", "requests", "V0 sequence groups swapped to CPU (SWAP preemption)",
           _fed("num_requests_swapped"), ("V0 stats line 'Swapped: N reqs'",)),
    Signal("prompt_throughput", "gauge", "tokens/s", "average prompt (prefill) throughput of the last log interval",
           (), ("stats line 'Avg prompt throughput: X tokens/s'",)),
    Signal("generation_throughput", "gauge", "tokens/s", "average generation throughput of the last log interval",
           (), ("stats line 'Avg generation throughput: X tokens/s'",)),
    # --- counters -------------------------------------------------------------------------------
    Signal("num_preemptions", "counter", "requests", "cumulative preemptions (recompute or swap)",
           _fed("num_preemptions"),
           ("V0 WARNING 'Sequence group ... is preempted ... total_num_cumulative_preemption=N' (every 50th)",
            "V1 0.16+ stats line 'Preemptions: N' (per interval)")),
    Signal("prefix_cache_queries", "counter", "tokens", "prefix-cache lookups (tokens; blocks in V1 0.7-0.8)",
           _fed("prefix_cache_queries")),
    Signal("prefix_cache_hits", "counter", "tokens", "prefix-cache hits (tokens; blocks in V1 0.7-0.8)",
           _fed("prefix_cache_hits")),
    Signal("prefix_cache_hit_rate", "gauge", "ratio",
           "prefix-cache hit rate as the V1 log reports it: over the most recent 1000 requests (a rolling window)",
           (), ("V1 stats line 'Prefix cache hit rate: X%' (0.7+)",)),
    Signal("prefix_cache_hit_rate_cumulative", "gauge", "ratio",
           "V0 prefix-cache block hit rate, cumulative since the engine started: a fall in the window shows damped",
           _fed("prefix_cache_hit_rate_cumulative"),
           ("V0 record 'Prefix cache hit rate: GPU: X%, CPU: Y%' (0.5-0.10)",)),
    Signal("prompt_tokens", "counter", "tokens", "prompt tokens processed", _fed("prompt_tokens")),
    Signal("generation_tokens", "counter", "tokens", "generation tokens processed", _fed("generation_tokens")),
    # --- pool facts -----------------------------------------------------------------------------
    Signal("num_gpu_blocks", "fact", "blocks", "KV blocks in the GPU pool",
           _info("num_gpu_blocks"),
           ("K1/K2/K3 '# GPU blocks: N'", "K11 'num_gpu_blocks is: N'")),
    Signal("num_cpu_blocks", "fact", "blocks", "V0 CPU swap blocks", _info("num_cpu_blocks"),
           ("K1/K2 '# CPU blocks: N'",)),
    Signal("block_size", "fact", "tokens", "tokens per KV block", _info("block_size"),
           ("K10 'Setting attention block size to N tokens'", "engine args block_size=N")),
    Signal("gpu_memory_utilization", "fact", "ratio", "share of GPU memory vLLM may use",
           _info("gpu_memory_utilization"), ("M1/M2 profiling lines", "engine args")),
    Signal("cache_dtype", "fact", "text", "KV cache dtype", _info("cache_dtype"), ("engine args",)),
    Signal("enable_prefix_caching", "fact", "bool", "prefix caching on", _info("enable_prefix_caching"),
           ("engine args",)),
    Signal("max_model_len", "fact", "tokens", "longest context one request may have", (),
           ("K5 'Maximum concurrency for N tokens per request'", "E2 errors", "engine args")),
    Signal("kv_cache_size_tokens", "fact", "tokens", "token capacity vLLM printed ('GPU KV cache size: N tokens')",
           _info("kv_cache_size_tokens"), ("K4/K6",)),
    Signal("max_concurrency", "fact", "x", "how many max_model_len requests fit, as vLLM printed",
           _info("max_concurrency"), ("K5/K6",)),
    Signal("context_tokens", "gauge", "tokens",
           "sum of context lengths of the running requests, where a report states it (no vLLM metric has it)",
           (), ("operator measurement lines: 'one ~36k-token request: ...'",)),
    Signal("num_blocks_used", "gauge", "blocks", "KV blocks held by live requests, where a report states it",
           (), ("operator measurement lines: '(~297 of 665 blocks)'",)),
    Signal("block_overhead_ratio", "fact", "ratio",
           "block occupancy − token occupancy: share of the pool held by live requests beyond their tokens "
           "(partly filled or per-request floor blocks) (derived)"),
    Signal("kv_capacity_tokens", "fact", "tokens", "physical pool in tokens: num_gpu_blocks × block_size (derived)"),
    Signal("kv_bytes_per_token", "fact", "bytes",
           "KV bytes per token from the model config: 2 × layers × kv_heads × head_dim × dtype_bytes (derived)"),
    Signal("kv_capacity_tokens_from_config", "fact", "tokens",
           "KV memory / kv_bytes_per_token: the pool the model config implies (derived, planning estimate)"),
    Signal("kv_capacity_tokens_modelled", "fact", "tokens",
           "the 'GPU KV cache size' line the capacity model predicts from the model config, the logged KV memory, "
           "version, parallel sizes, speculative config and state dtypes (derived)"),
    Signal("weights_estimate_bytes", "fact", "bytes",
           "weights per GPU from the model config: parameter count × dtype bytes / tensor_parallel_size (derived)"),
    Signal("weights_budget_ratio", "fact", "ratio",
           "weights per GPU / (GPU total × gpu_memory_utilization); above 1 the weights cannot fit (derived)"),
    Signal("min_tensor_parallel_for_weights", "fact", "count",
           "smallest tensor_parallel_size (1, 2, 4, 8) whose weight share fits 90 % of the budget (derived)"),
    Signal("gpu_memory_utilization_needed", "fact", "ratio",
           "gpu_memory_utilization that leaves KV memory for one max_model_len request: from the capacity model, or "
           "(no model config) priced at the refused pool's own KV bytes per token; text = which (derived)"),
    Signal("kv_capacity_tokens_fp8", "fact", "tokens", "the pool in tokens with an fp8 KV cache (derived)"),
    Signal("partial_block_waste_bound_ratio", "fact", "ratio",
           "upper bound of tokens lost in partly filled last blocks: max running × (block_size − 1) / pool (derived)"),
    Signal("partial_block_waste_bound_tokens", "fact", "tokens",
           "max running × (block_size − 1): most token slots partly filled last blocks can hold (derived)"),
    Signal("prefix_cache_hit_rate_early", "fact", "ratio",
           "prefix-cache hit rate over the first third of the window, Δhits/Δqueries or mean of the gauge (derived)"),
    Signal("prefix_cache_hit_rate_late", "fact", "ratio",
           "prefix-cache hit rate over the last third of the window (derived)"),
    Signal("prefix_cache_hit_rate_drop", "fact", "ratio", "early − late prefix-cache hit rate (derived)"),
    # --- memory accounting facts (start-up) -----------------------------------------------------
    Signal("weights_bytes", "fact", "bytes", "memory the model weights took",
           (), ("W1 'Loading model weights took X GB'", "W2/W3 'Model loading took X GiB'", "M2", "M6")),
    Signal("gpu_total_bytes", "fact", "bytes", "total memory of the GPU",
           (), ("M1/M2 total_gpu_memory", "M6", "CUDA OOM 'total capacity of X'")),
    Signal("gpu_budget_bytes", "fact", "bytes", "total × gpu_memory_utilization", (), ("M2", "M6")),
    Signal("activation_peak_bytes", "fact", "bytes",
           "activation peak of the profiling run, without the weights (M1: peak_torch_memory − weights, derived)",
           (), ("M2 'PyTorch activation peak memory takes A GiB'", "M4", "M6 'A GiB for peak activation'")),
    Signal("peak_torch_memory_bytes", "fact", "bytes",
           "PyTorch's peak allocation in the profiling run: weights + activation peak (early 0.6.x M1)",
           (), ("M1 peak_torch_memory",)),
    Signal("non_torch_bytes", "fact", "bytes", "non-torch memory (CUDA context, NCCL, ...)", (), ("M1", "M2", "M6")),
    Signal("kv_cache_memory_bytes", "fact", "bytes", "memory given to the KV cache",
           _info("kv_cache_memory_bytes"), ("M1 kv_cache_size", "M2", "M3", "M7")),
    Signal("cudagraph_bytes", "fact", "bytes", "CUDA-graph memory", (), ("K12", "M6", "M9")),
    Signal("cudagraph_estimate_bytes", "fact", "bytes", "CUDA-graph memory estimated before sizing the pool (0.21+)",
           (), ("M9 'Estimated CUDA graph memory: X GiB total'",)),
    Signal("gpu_free_at_startup_bytes", "fact", "bytes", "free GPU memory when the worker started", (), ("M6", "E4")),
    Signal("process_start_time", "fact", "seconds",
           "Unix start time of the serving process; a change between scrapes means a restart",
           _fed("process_start_time")),
    Signal("vllm_version", "fact", "text", "vLLM version", (), ("banner / 'vLLM API server version' / engine config",)),
    Signal("tensor_parallel_size", "fact", "count", "tensor parallel size", (), ("engine args",)),
    Signal("max_num_seqs", "fact", "requests", "scheduler max_num_seqs", (), ("engine args", "Mamba blocks error")),
    Signal("max_num_batched_tokens", "fact", "tokens", "scheduler max_num_batched_tokens (tokens per step; the "
           "profile run's size)", (), ("engine args", "'Chunked prefill is enabled with max_num_batched_tokens=N'")),
    Signal("engine_args", "fact", "text", "the 'non-default args:' dict as vLLM printed it (0.10+), redacted",
           (), ("'non-default args: {...}' (entrypoints/utils.py)",)),
    Signal("engine_generation", "fact", "text", "V0 or V1, where the engine config line says it",
           (), ("'Initializing a V0|V1 LLM engine (vX) with config: ...'",)),
    Signal("mamba_cache_blocks", "fact", "blocks", "Mamba / linear-attention state blocks (one per running sequence)",
           (), ("'max_num_seqs (S) exceeds available Mamba cache blocks (B)' (2026)",)),
    # --- events (log only) ----------------------------------------------------------------------
    Signal("kv_capacity_error", "event", "count",
           "start-up refused: KV pool smaller than one request or no memory for it; text = which check",
           (), ("E1", "E2a", "E2b", "E2c", "E2d", "E3", "Mamba blocks ValueError (2026)")),
    Signal("cuda_oom", "event", "bytes",
           "CUDA out of memory; value = bytes it tried to allocate, text = phase (load, profile, kv_alloc, "
           "cudagraph, sampler, runtime, unknown)", (), ("PyTorch OOM text §2.7", "traceback frames")),
    Signal("oom_torch_allocated_bytes", "event", "bytes", "memory allocated by PyTorch at the OOM", (), ("§2.7",)),
    Signal("oom_free_bytes", "event", "bytes", "free GPU memory at the OOM", (), ("§2.7",)),
    Signal("oom_process_in_use_bytes", "event", "bytes", "memory in use by the failing process at the OOM",
           (), ("§2.7",)),
    Signal("weights_load_failed", "event", "count", "vLLM said the weights do not fit (W4, 0.16+)", (), ("W4",)),
    Signal("free_memory_below_request", "event", "count",
           "free GPU memory at start below total × utilization: another process holds memory", (), ("E4",)),
    Signal("sampler_warmup_oom", "event", "count", "OOM warming up the sampler after KV allocation", (), ("E6",)),
    Signal("preemption_warning", "event", "count", "V0 preemption WARNING (logged every 50th); text = mode",
           (), ("§2.6",)),
    Signal("startup_segments", "event", "count", "start-up blocks seen in a log (weights loaded / engine init)"),
    # --- log events of the log collector (issue 3) -----------------------------------------------
    Signal("exception", "event", "count",
           "a Python traceback closed by its exception line; value = frames, text = 'Type in function (file) "
           "[phase]' naming the frame that decides the phase (load, profile, kv_alloc, cudagraph, sampler, encoder, "
           "runtime)", (), ("traceback frames + exception line, any process",)),
    Signal("max_model_len_autofit", "event", "tokens", "max_model_len vLLM reduced to fit the KV memory (0.16+)",
           (), ("K9 'Auto-fit max_model_len: reduced from A to B'",)),
    Signal("startup_seconds", "fact", "seconds", "engine start-up took (profile, KV cache, warm-up)",
           (), ("M10 'init engine (profile, create kv cache, warmup model) took S seconds'",)),
    Signal("engine_start_failed", "event", "count", "V1 engine core failed to start (wrapper; cause logged above)",
           (), ("E0",)),
    Signal("memory_profiling_error", "event", "count",
           "free memory changed during profiling (another process released memory); not a KV problem", (), ("E5",)),
    Signal("request_rejected", "event", "tokens",
           "V0 dropped a request the pool cannot hold; value = prompt tokens (1 when not printed), text = why",
           (), ("'Failing the request ...'", "'Input prompt (N tokens) is too long and exceeds ...'")),
    Signal("stats_logging_disabled", "event", "count",
           "several API servers: vLLM logs no periodic stats line (0.10+)", (), ("'... disabling stats logging'",)),
    # --- log events of the diagnosis catalog (issue 6; parsed by the log collector) --------------
    Signal("oom_other_processes_bytes", "event", "bytes",
           "memory of the other processes an OOM text lists ('Process N has X memory in use', §2.7)", (), ("§2.7",)),
    Signal("oom_other_processes_count", "event", "count", "how many other processes an OOM text lists", (),
           ("§2.7",)),
    Signal("mm_profile_warning", "event", "tokens",
           "the multimodal worst case does not fit the profiling sequence; value = worst-case tokens (0.9+)", (),
           ("'The sequence length used for profiling (...) is too short to hold the multi-modal embeddings'",)),
    Signal("mm_profile_run", "event", "count", "V0 encoder-decoder profile run with dummy images started", (),
           ("'Starting profile run for multi-modal models.' (enc_dec_model_runner.py, V0)",)),
    Signal("python_traceback", "event", "count", "a Python traceback began ('Traceback (most recent call last):')",
           (), ("any uncaught exception",)),
    # --- log events and facts of issue 12 (kvdiag/collect/logs.py) -----------------------------------
    Signal("cuda_error", "event", "count",
           "a CUDA / cuBLAS / NCCL error that is not a memory problem (illegal memory access, device-side assert, "
           "stream capture, NCCL ...); text = the error", (), ("'CUDA error: X' (c10 CUDA runtime check)",
                                                              "'NCCL error'", "'CUBLAS_STATUS_X'")),
    Signal("kv_blocks_exhausted", "event", "count",
           "V0 block manager ran out of free KV blocks at runtime (an exception, not a preemption)", (),
           ("'Out of memory! No free blocks are available.' (core/block_manager_v1.py)",
            "'No usable cache memory left' (core/evictor*.py)")),
    Signal("unrecognised_memory_line", "event", "count",
           "log lines that look like memory trouble but match no event; value = how many (one row per input)", (),
           ("any line with OOM / out of memory / KV cache / CUDA error / preempt / blocks wording",)),
    Signal("vllm_message", "event", "count",
           "a vLLM memory-related message of the catalogue (kvdiag/catalog/vllm_messages.json, read from vLLM's own "
           "source 0.4-0.33); value 1, text = 'EVENT:ENTRY_ID' (the event of kvdiag/catalog/event_map.yaml and the "
           "entry's id)", (), ("any catalogued raise / assert / logger message, every version that prints it",)),
    Signal("model_architecture", "fact", "text", "model architecture vLLM resolved",
           (), ("'Resolved architecture: X' (0.10+)", "engine config / args lines")),
    Signal("model_name", "fact", "text", "model served (path or Hugging Face id)",
           (), ("engine config line model='X'", "'non-default args: {'model': X}'", "args Namespace(model=X)")),
    Signal("model_multimodal", "fact", "count",
           "1 when the model takes images / audio / video (architecture or multimodal args), else 0", (),
           ("architecture name", "'limit_mm_per_prompt' / 'mm_processor_kwargs' args",
            "'Encoder cache will be initialized with a budget' (V1 0.8+)")),
    Signal("quantization", "fact", "text", "weight quantization method (awq, gptq, fp8, bitsandbytes, ...)",
           (), ("engine config line quantization=X", "args")),
    Signal("speculative_method", "fact", "text", "speculative decoding method (eagle, eagle3, mtp, ngram, ...)",
           (), ("'non-default args: {'speculative_config': {'method': X}}'", "engine config speculative_config=")),
    Signal("num_speculative_tokens", "fact", "tokens", "speculative tokens proposed per step",
           (), ("'non-default args' speculative_config num_speculative_tokens", "engine config num_spec_tokens=")),
    Signal("decode_context_parallel_size", "fact", "count", "decode context parallel size (DCP)",
           (), ("'non-default args: {'decode_context_parallel_size': N}'", "engine config line")),
    Signal("pipeline_parallel_size", "fact", "count", "pipeline parallel size",
           (), ("'non-default args'", "engine config line pipeline_parallel_size=N")),
    Signal("mamba_ssm_cache_dtype", "fact", "text", "dtype of hybrid models' recurrent (SSM) state",
           (), ("'non-default args: {'mamba_ssm_cache_dtype': X}'", "engine config line")),
    # --- derived by kvdiag/derive.py for the catalog rules (issue 6) --------------------------------
    Signal("cuda_oom_phase", "event", "bytes",
           "each CUDA OOM with its phase settled from the log's order of start-up steps when the traceback does not "
           "name it (rules count it by phase: text_in); value = bytes tried (quoted as oom_tried_bytes), text = load, profile, kv_alloc, cudagraph, sampler, encoder, runtime, "
           "unknown (derived)"),
    Signal("oom_tried_bytes", "event", "bytes",
           "bytes the failed CUDA allocation asked for (PyTorch 'Tried to allocate X'), one per OOM; text = its phase "
           "as cuda_oom_phase settles it (derived; the value the OOM rules quote)"),
    Signal("mm_worst_case_tokens", "fact", "tokens",
           "tokens of the multimodal worst case per prompt that vLLM's profiling warning printed (derived: the value "
           "of mm_profile_warning, named for what it is)"),
    Signal("startup_crash", "event", "count",
           "a start-up that died without an OOM text; text = the step it died in (after_weights_before_kv) (derived)"),
    Signal("oom_other_processes_ratio", "fact", "ratio",
           "memory other processes held at the OOM / GPU total (derived)"),
    Signal("cudagraph_estimate_ratio", "fact", "ratio",
           "estimated CUDA-graph memory / the GPU budget (total × gpu_memory_utilization) (derived)"),
    Signal("activation_peak_ratio", "fact", "ratio", "profiling activation peak / the GPU budget (derived)"),
    Signal("kv_size_line_ratio", "fact", "ratio",
           "printed 'KV cache size' tokens / (max concurrency × max_model_len); far below 1 on hybrid models whose "
           "token line is not the physical pool (derived)"),
    Signal("kv_tokens_from_concurrency", "fact", "tokens",
           "max concurrency × max_model_len: the tokens the pool holds per vLLM's concurrency line (derived)"),
    Signal("sampler_warmup_rows", "fact", "requests",
           "OOM bytes / (vocab_size × 4): how many fp32 logit rows the failed allocation was (needs --model-config) "
           "(derived)"),
    Signal("other_processes_free_ratio", "fact", "ratio",
           "(GPU total − other processes' memory) / GPU total − 0.05, rounded down: the gpu_memory_utilization "
           "that fits next to them (derived)"),
    Signal("oom_free_to_tried_ratio", "fact", "ratio",
           "bytes free at the OOM / bytes the failed allocation asked for: the share of it that fits, so the factor an "
           "allocation linear in a setting (max_num_seqs, multimodal tokens) must shrink by (derived)"),
    Signal("max_num_seqs_for_oom", "fact", "requests",
           "max_num_seqs × free / tried at the OOM, rounded down: the max_num_seqs whose warm-up allocation (linear in "
           "it) fits the free memory (derived)"),
    Signal("gpu_memory_utilization_drop_for_oom", "fact", "ratio",
           "(OOM bytes tried − free) / GPU total + 0.01, rounded up: how far to lower gpu_memory_utilization so the "
           "failed allocation fits outside the KV pool, when the current value is not known (derived)"),
    Signal("block_overhead_tokens", "fact", "tokens",
           "usage × pool − the running set's tokens: token slots live requests hold beyond their tokens (derived)"),
    Signal("kv_cache_memory_suggested_bytes", "fact", "bytes",
           "the --kv-cache-memory vLLM printed as fitting the requested memory (M6 'Replace gpu_memory_utilization "
           "config with --kv-cache-memory=N')", (), ("M6",)),
    Signal("gpu_memory_utilization_for_oom", "fact", "ratio",
           "gpu_memory_utilization − (OOM bytes tried − free) / GPU total − 0.01: the setting that leaves the failed "
           "allocation outside the KV pool (derived)"),
]

SIGNALS: dict[str, Signal] = {s.name: s for s in _SIGNALS}


def unit_of(name: str) -> str:
    """Unit of a signal; raises ``KeyError`` for a name not in :data:`SIGNALS`."""
    return SIGNALS[name].unit


# ---------------------------------------------------------------------------------------------
# Metric names on /metrics → signals, from the one table (kvdiag/vllm_metrics.yaml). Keys are the metric family name
# after removing the ``vllm:`` / ``vllm_`` / ``ray_vllm:`` prefix and a trailing ``_total`` (counters are exposed as
# ``<name>_total``, §1.0); histograms are in WINDOW_HISTOGRAMS, process_start_time_seconds (no vLLM prefix) in neither.
METRIC_TO_SIGNAL: dict[str, str] = {n.name: row.signal for row in _vm.TABLE.values()
                                    if row.type != "histogram" and row.prefixed for n in row.names}

# cache_config_info labels → signal. Label values are Python str() of the field (§1.0).
CACHE_CONFIG_LABELS: dict[str, str] = {i.label: i.signal for i in _vm.INFO_LABELS}

VLLM_PREFIXES = ("ray_vllm:", "vllm:", "vllm_")


def metric_signal(family: str) -> str | None:
    """Map a /metrics family or sample name to a signal name, or ``None`` when kvdiag ignores it.

    Accepts the ``vllm:`` spelling, the ``vllm_`` spelling a Prometheus 2.x server stores, and the
    ``ray_vllm:`` prefix of Ray Serve; drops ``_total``; ignores ``*_created`` (§1.0).
    """
    name = family
    for prefix in VLLM_PREFIXES:
        if name.startswith(prefix):
            name = name[len(prefix):]
            break
    else:
        return None
    if name.endswith("_created"):
        return None
    if name.endswith("_total"):
        name = name[: -len("_total")]
    return METRIC_TO_SIGNAL.get(name)


# ---------------------------------------------------------------------------------------------
# /metrics coverage and window signals (issue 4). Appended as a block so the registry above stays
# as it is; every name is registered in SIGNALS below.

#: Histograms kvdiag reads over a window: metric base name (no prefix) → signal stem. The raw
#: series land in ``<stem>_bucket`` (text = the ``le`` bound), ``<stem>_sum`` and ``<stem>_count``
#: (cumulative counters, reset on restart); the window facts are ``<stem>_mean`` and
#: ``<stem>_p50`` / ``<stem>_p95`` (Prometheus ``histogram_quantile`` over the window's bucket
#: increases). Source: ``v1/metrics/loggers.py`` and ``engine/metrics.py`` (reference §1.2, §1.3).
WINDOW_HISTOGRAMS: dict[str, tuple[str, str, str]] = {
    # metric base name: (signal stem, unit, description)
    _vm.histogram_base(stem): (stem, row.unit, row.description) for stem, row in _vm.TABLE.items()
    if row.type == "histogram"}

#: What one observation of a WINDOW_HISTOGRAMS histogram counts (default: finished requests).
HISTOGRAM_COUNT_UNIT: dict[str, str] = {_vm.histogram_base(stem): row.counts for stem, row in _vm.TABLE.items()
                                        if row.type == "histogram" and row.counts != "requests"}

_WINDOW_SIGNALS: list[Signal] = []
for _base, (_stem, _unit, _what) in WINDOW_HISTOGRAMS.items():
    _src = _fed(_stem)
    _cu = HISTOGRAM_COUNT_UNIT.get(_base, "requests")
    _WINDOW_SIGNALS += [
        Signal(f"{_stem}_bucket", "counter", _cu,
               f"histogram bucket of {_what}: cumulative count of {_cu} ≤ the bound in ``text`` (``le``)", _src),
        Signal(f"{_stem}_sum", "counter", _unit, f"histogram sum of {_what} (cumulative)", _src),
        Signal(f"{_stem}_count", "counter", _cu, f"histogram count of {_what} (cumulative)", _src),
        Signal(f"{_stem}_mean", "fact", _unit,
               f"mean {_what} over the window: Δsum / Δcount with counter resets (derived)", _src),
        Signal(f"{_stem}_p50", "fact", _unit,
               f"median {_what} over the window: histogram_quantile(0.5) of the bucket increases (derived)", _src),
        Signal(f"{_stem}_p95", "fact", _unit,
               f"95th percentile {_what} over the window: histogram_quantile(0.95) of the bucket increases "
               "(derived)", _src),
    ]
_WINDOW_SIGNALS += [
    Signal("prefix_cache_hit_rate_window", "fact", "ratio",
           "prefix-cache hit rate over the whole window: Δprefix_cache_hits / Δprefix_cache_queries with counter "
           "resets, never the cumulative ratio (derived)",
           _fed("prefix_cache_hits", "prefix_cache_queries")),
    Signal("kv_cache_usage_high_seconds", "fact", "seconds",
           "time kv_cache_usage spent at or above 95 % in the window (each sample holds until the next) (derived)"),
    Signal("kv_cache_usage_high_ratio", "fact", "ratio",
           "share of the window kv_cache_usage spent at or above 95 % (derived)"),
    Signal("counter_resets", "event", "count",
           "a counter fell between two samples: the server (or one of its processes) restarted; text = counter "
           "(derived; PromQL resets())"),
    Signal("num_requests_waiting_capacity", "gauge", "requests",
           "waiting requests held back by scheduling capacity (KV), not deferred by LoRA / KV transfer",
           _fed("num_requests_waiting_capacity")),
]
_WINDOW_SIGNALS += [
    # --- prefix cache against load, eviction evidence and traps (issue 6; kvdiag/derive_prefix.py) ---------------
    Signal("prefix_cache_hit_rate_low_load", "fact", "ratio",
           "prefix-cache hit rate over the intervals where kv_cache_usage was below 50 %: ΣΔhits / ΣΔqueries, or the "
           "mean of the V1 log's rolling rate there (derived)"),
    Signal("prefix_cache_hit_rate_high_load", "fact", "ratio",
           "prefix-cache hit rate over the intervals where kv_cache_usage was at or above 80 % (derived)"),
    Signal("prefix_cache_hit_rate_load_drop", "fact", "ratio",
           "prefix_cache_hit_rate_low_load − prefix_cache_hit_rate_high_load: how much the hit rate falls under load "
           "(derived)"),
    Signal("prefix_cache_retention_seconds", "fact", "seconds",
           "how long an unreferenced cached block survives in the LRU free queue, estimated: free pool tokens "
           "(pool × (1 − mean usage)) / KV tokens written per second (prompt − prefix hits + generation) (derived)"),
    Signal("kv_block_alloc_tokens_per_second", "fact", "tokens/s",
           "KV slots written per second over the window: Δprompt_tokens − Δprefix_cache_hits + Δgeneration_tokens, "
           "or the log's prompt + generation throughput (derived)"),
    Signal("prefix_cache_readmission_preemptions", "fact", "requests",
           "preemptions in the window of a vLLM 0.9-0.11 server, whose re-admissions count as prefix-cache hits and "
           "inflate the hit rate (reference §1.3) (derived)"),
    Signal("kv_demand_tokens", "fact", "tokens",
           "peak KV demand estimated from the length histograms: running × (mean prompt + mean output / 2) + "
           "waiting × mean prompt (derived; shared prefixes counted per request, so an upper estimate)"),
    Signal("kv_demand_ratio", "fact", "x", "kv_demand_tokens / the pool in tokens, times the pool (derived; 1.0x = the "
                                          "pool exactly)"),
    Signal("hybrid_block_size", "fact", "tokens",
           "block_size when it is above 128 tokens: only hybrid models' page alignment raises it that far (MLA forces "
           "64 or 128), so a shared prefix shorter than this is never cached (derived; reference §3, K10)"),
    Signal("kv_fit_requests", "fact", "requests",
           "how many requests of the mean length the pool holds: pool / (mean prompt + mean output / 2) (derived)"),
    Signal("max_num_seqs_fit", "fact", "requests",
           "the max_num_seqs one pool holds without preempting: kv_fit_requests (demand estimate), else running / "
           "kv_cache_usage at the instant of peak usage (observed peak), rounded down; text = which (derived)"),
    Signal("kv_demand_requests", "fact", "requests",
           "most requests in the server at one instant: running + waiting (+ swapped, V0) (derived)"),
    Signal("replicas_needed", "fact", "count",
           "replicas of this pool that hold the peak demand at once: kv_demand_tokens / pool, else kv_demand_requests "
           "/ (running / usage at the peak), rounded up; only when above 1 (one pool cannot hold it at any "
           "max_num_seqs without queueing); text = the basis (derived)"),
    Signal("replicas_needed_fp8", "fact", "count",
           "replicas_needed with an fp8 KV cache: the same demand / kv_capacity_tokens_fp8, rounded up (derived; needs "
           "--model-config)"),
    # --- dynamics: what a full pool holds, whether cached prefixes stopped hitting (kvdiag/derive_dynamics.py) ----
    Signal("kv_token_occupancy", "fact", "ratio",
           "tokens the running requests hold / token slots their blocks reserve, median over full-pool instants "
           "(usage ≥ 90%): running × (mean prompt + mean output / 2) / (usage × pool tokens); above 1 with shared "
           "prefix blocks (derived)"),
    Signal("kv_empty_slots_ratio", "fact", "ratio",
           "share of the pool reserved by running requests' blocks but holding no token, at the median full-pool "
           "instant: usage − tokens held / pool tokens (derived)"),
    Signal("block_size_suggested", "fact", "tokens", "the block size the partial-block remedy proposes: vLLM's CUDA "
           "default 16 (derived)"),
    Signal("kv_slots_freed_tokens", "fact", "tokens",
           "token slots the running set would stop reserving with block_size_suggested (derived)"),
    Signal("kv_slots_freed_blocks", "fact", "blocks", "kv_slots_freed_tokens in blocks of the current block size "
           "(derived)"),
    Signal("kv_extra_requests_fit", "fact", "requests",
           "more requests of the mean size the freed slots hold with block_size_suggested (derived)"),
    Signal("num_requests_waiting_when_full", "fact", "requests",
           "most requests waiting at one instant whose KV usage was at least 90% (the plain waiting count when no "
           "usage of the same instant exists) (derived)",
           _fed("num_requests_waiting", "kv_cache_usage")),
    Signal("prefix_cache_hits_per_second_early", "fact", "tokens/s",
           "prefix-cache hit tokens per second in the first third of the window (derived)",
           _fed("prefix_cache_hits", "prefix_cache_hit_rate_cumulative", "prompt_tokens")),
    Signal("prefix_cache_hits_per_second_late", "fact", "tokens/s",
           "prefix-cache hit tokens per second in the last third of the window (derived)"),
    Signal("prefix_cache_hits_per_second_ratio", "fact", "x",
           "hits per second late / early: below 1 when cached prefixes stopped hitting (derived)"),
    Signal("prefix_cache_queries_per_second_early", "fact", "tokens/s",
           "prefix-cache query tokens per second in the first third of the window (derived)",
           _fed("prefix_cache_queries", "prompt_tokens")),
    Signal("prefix_cache_queries_per_second_late", "fact", "tokens/s",
           "prefix-cache query tokens per second in the last third of the window (derived)"),
    Signal("prefix_cache_queries_per_second_ratio", "fact", "x",
           "queries per second late / early: above 1 when traffic grew (derived)"),
    # --- a metrics artifact: the usage gauge split across API-server processes (vLLM PR 28792) -----------------
    Signal("kv_cache_usage_series", "gauge", "series",
           "how many kv_cache_usage_perc series (one per API-server process, label pid) one instant had; text = how "
           "many read 0 (multiprocess mode without 'mostrecent', vLLM 0.11.x before PR 28792)",
           _fed("kv_cache_usage")),
    Signal("kv_cache_usage_split_mean", "gauge", "ratio",
           "the mean of those per-process usage series: what a dashboard averaging them shows",
           _fed("kv_cache_usage")),
]
_WINDOW_SIGNALS += [
    # --- trends and the forecast of a full pool (issue 13; kvdiag/derive_trend.py) -----------------------------------
    Signal("kv_cache_usage_slope", "fact", "ratio/s",
           "trend of kv_cache_usage: least-squares slope over the last 5 minutes of timestamped samples, after the last "
           "restart (PromQL deriv(kv_cache_usage_perc[5m])) (derived)", _fed("kv_cache_usage")),
    Signal("kv_cache_usage_slope_stderr", "fact", "ratio/s",
           "standard error of kv_cache_usage_slope: sqrt(SSR / (n − 2) / Sxx) of the same fit (derived)"),
    Signal("kv_cache_usage_slope_t", "fact", "x",
           "kv_cache_usage_slope / its standard error: how many standard errors the rise is above 0 (derived)"),
    Signal("kv_cache_usage_slope_recent", "fact", "ratio/s",
           "least-squares slope of kv_cache_usage over the later half of the trend's samples: a rise that stopped or "
           "turned shows here first (derived)"),
    Signal("kv_cache_usage_trend_samples", "fact", "count", "timestamped kv_cache_usage samples the trend is fitted "
                                                             "on (derived)"),
    Signal("kv_cache_usage_trend_seconds", "fact", "seconds", "time the trend's samples span (derived)"),
    Signal("kv_cache_usage_trend_level", "fact", "ratio",
           "the fitted line at the last sample: the usage the forecast starts from (predict_linear(…, 0)) (derived)"),
    Signal("kv_cache_usage_trend_rise", "fact", "ratio",
           "kv_cache_usage_slope × the trend's span: the rise of usage the fitted line explains (derived)"),
    Signal("kv_full_eta_seconds", "fact", "seconds",
           "forecast time until kv_cache_usage reaches 1.0 at the current trend: (1 − level) / slope, 0 when already "
           "full; absent when usage is not rising or the forecast is beyond a week (derived)"),
    Signal("kv_full_eta_low_seconds", "fact", "seconds",
           "the early end of kv_full_eta_seconds: at slope + 2 standard errors (derived)"),
    Signal("kv_full_eta_high_seconds", "fact", "seconds",
           "the late end of kv_full_eta_seconds: at slope − 2 standard errors; absent when that slope is not positive "
           "(the rise could be noise) (derived)"),
    Signal("num_requests_waiting_slope", "fact", "requests/s",
           "trend of num_requests_waiting: least-squares slope over the last 5 minutes of timestamped samples "
           "(derived)", _fed("num_requests_waiting")),
    Signal("kv_demand_tokens_slope", "fact", "tokens/s",
           "trend of KV demand: least-squares slope of running × (mean prompt + mean output / 2) + waiting × mean "
           "prompt over the last 5 minutes (derived; needs the length histograms' means)"),
]
_WINDOW_SIGNALS += [
    # --- is the server keeping up? (issue 25; kvdiag/derive_queue.py) -------------------------------------------------
    Signal("kv_near_full_level", "fact", "ratio",
           "KV usage above which vLLM's scheduler cannot admit a waiting request: 1 − (blocks of one request's first "
           "prefill chunk, p95 prompt capped by the step's token budget, + one block per running request) / usable "
           "blocks (derived)"),
    Signal("kv_cache_usage_over_level", "fact", "ratio",
           "peak kv_cache_usage − kv_near_full_level: ≥ 0 when the pool reached the level at which admission stalls "
           "(derived)"),
    Signal("num_requests_waiting_near_full", "fact", "requests",
           "most requests waiting at an instant whose KV usage was at or above kv_near_full_level (derived)"),
    Signal("queue_grows", "fact", "bool",
           "1 when the waiting queue grew (arrivals outran admissions: more waiting at the end than at the start and "
           "waiting on the last two samples) or never emptied (waiting on every one of 3+ samples); 0 when judged "
           "not growing; absent when the window cannot tell (derived)"),
    Signal("queue_growth_rate", "fact", "requests/s",
           "(waiting at the last sample − at the first) / the time between them (derived)"),
    Signal("queue_limit", "fact", "requests",
           "what holds the queue back when the pool is not near full: text max_num_seqs (value = the cap), "
           "token_budget (value = max_num_batched_tokens) or throughput (value = requests completed per second) "
           "(derived)"),
    Signal("window_seconds", "fact", "seconds",
           "time spanned by the timestamped runtime samples (KV usage, waiting) of the window (derived)"),
    Signal("window_samples", "fact", "count", "timestamped runtime samples in the window (derived)"),
    Signal("request_completion_rate", "fact", "requests/s",
           "requests finished per second over the window: Δ request_prompt_tokens_count / span (derived)"),
    Signal("request_arrival_rate", "fact", "requests/s",
           "requests arriving per second: completions + Δ(running + waiting), over the span (derived)"),
    Signal("request_arrival_rate_low", "fact", "requests/s",
           "arrival rate at −2 Poisson standard errors (√arrivals / span) (derived)"),
    Signal("request_arrival_rate_high", "fact", "requests/s",
           "arrival rate at +2 Poisson standard errors (derived)"),
    Signal("replicas_from_rates", "fact", "count",
           "replicas of this server that keep up with the arrivals: arrival rate / the rate one saturated server "
           "completes, or Little's law on the KV pool (arrival rate × time in service × tokens held per request / "
           "pool), the larger, rounded up (derived)"),
    Signal("replicas_from_rates_low", "fact", "count", "replicas_from_rates at the low end of the rates (derived)"),
    Signal("replicas_from_rates_high", "fact", "count", "replicas_from_rates at the high end of the rates (derived)"),
]
for _s in _WINDOW_SIGNALS:
    SIGNALS.setdefault(_s.name, _s)

#: Alternative names of one quantity, best first (the table's order). When a page (or a Prometheus instance) has
#: several, only the best is read: V1 0.9-0.10 expose both ``kv_cache_usage_perc`` and
#: ``gpu_cache_usage_perc`` and both prefix-cache counter pairs (reference §5 Renames); summing
#: them would double the counters.
METRIC_ALIASES: dict[str, tuple[str, ...]] = {s: _vm.names(s) for s, row in _vm.TABLE.items() if len(row.names) > 1}

#: Every other vLLM metric of reference §1, with why kvdiag does not read it. A name that is in
#: neither this table nor METRIC_TO_SIGNAL / WINDOW_HISTOGRAMS / cache_config_info is new to
#: kvdiag; tests check the reference's list against these tables.
IGNORED_METRICS: dict[str, str] = {
    "lora_requests_info": "LoRA adapter bookkeeping, not KV",
    "engine_sleep_state": "sleep mode, not KV pressure",
    "num_requests_kv_fetch_by_stage": "KV-connector consumer state (0.33), out of scope",
    "iteration_tokens": "batch size in tokens per step, not KV occupancy",
    "request_max_num_generation_tokens": "requested budget; the finished lengths are read instead",
    "request_params_max_tokens": "requested budget; the finished lengths are read instead",
    "request_params_n": "n per request",
    "request_params_best_of": "best_of per request (0.4-0.5)",
    "request_success": "finished requests by reason, not KV",
    "time_per_output_token_seconds": "decode latency, not KV (renamed inter_token_latency_seconds)",
    "inter_token_latency_seconds": "decode latency, not KV",
    "request_time_per_output_token_seconds": "decode latency, not KV",
    "request_prefill_time_seconds": "latency symptom; queue time is read instead",
    "request_decode_time_seconds": "latency symptom; queue time is read instead",
    "time_in_queue_requests": "V0 0.6-0.7 duplicate of request_queue_time_seconds",
    "model_forward_time_milliseconds": "V0 0.6-0.7 forward time, not KV",
    "model_execute_time_milliseconds": "V0 0.6-0.7 execute time, not KV",
    "avg_prompt_throughput_toks_per_s": "V0 0.4-0.6 gauge; the log line gives the same",
    "avg_generation_throughput_toks_per_s": "V0 0.4-0.6 gauge; the log line gives the same",
    "cpu_prefix_cache_hit_rate": "V0 CPU-side prefix cache, not the GPU pool",
    "spec_decode_draft_acceptance_rate": "speculative decoding, not KV",
    "spec_decode_efficiency": "speculative decoding, not KV",
    "spec_decode_num_accepted_tokens": "speculative decoding, not KV",
    "spec_decode_num_draft_tokens": "speculative decoding, not KV",
    "spec_decode_num_emitted_tokens": "speculative decoding, not KV",
    "tokens": "V0 0.6-0.7 counter declared but never incremented",
    "request_num_preemptions": "per-request preemption histogram (0.33); num_preemptions_total is read",
    "external_prefix_cache_queries": "KV-connector (cross-instance) cache, not the local pool",
    "external_prefix_cache_hits": "KV-connector (cross-instance) cache, not the local pool",
    "prompt_tokens_cached": "local + external cached tokens; prefix_cache_hits is read",
    "prompt_tokens_by_source": "split of prompt_tokens by source; prefix_cache_hits is read",
    "prompt_tokens_cached_by_source": "tier of cache hits (0.33)",
    "prompt_tokens_recomputed": "0.16 only; cached tokens recomputed",
    "request_prefill_kv_computed_tokens": "prompt minus cached tokens per request",
    "mm_cache_queries": "multimodal cache, not KV",
    "mm_cache_hits": "multimodal cache, not KV",
    "corrupted_requests": "NaN logits (VLLM_COMPUTE_NANS_IN_LOGITS), not KV",
    "admission_rejections": "front-end queue-limit rejections (0.33), not KV",
    "estimated_flops_per_gpu": "performance estimate, not KV",
    "estimated_read_bytes_per_gpu": "performance estimate, not KV",
    "estimated_write_bytes_per_gpu": "performance estimate, not KV",
}


def metric_base(name: str) -> str | None:
    """The bare vLLM metric name: prefix (``vllm:``, ``vllm_``, ``ray_vllm:``) and ``_total`` /
    histogram suffixes removed; ``None`` for a non-vLLM name.

    ``vllm:iteration_tokens_total_bucket`` → ``iteration_tokens``; ``vllm_num_preemptions_total`` →
    ``num_preemptions``; ``vllm:x_created`` → ``x_created`` (callers skip ``_created``).
    """
    for prefix in VLLM_PREFIXES:
        if name.startswith(prefix):
            name = name[len(prefix):]
            break
    else:
        return None
    for suffix in ("_bucket", "_sum", "_count"):
        if name.endswith(suffix) and name[: -len(suffix)] and not name.endswith("_total_count"):
            stem = name[: -len(suffix)]
            if stem in WINDOW_HISTOGRAMS or stem in IGNORED_METRICS or stem.removesuffix("_total") in IGNORED_METRICS:
                name = stem
                break
    if name.endswith("_total"):
        name = name[: -len("_total")]
    return name


def classify_metric(name: str) -> tuple[str, str]:
    """How kvdiag treats one vLLM metric name: ``("signal", SIGNAL)``, ``("histogram", STEM)``,
    ``("facts", "cache_config_info")``, ``("ignored", REASON)`` or ``("unknown", "")``.

    Accepts every spelling :func:`metric_signal` accepts, with or without ``_total`` / ``_bucket``.
    """
    base = metric_base(name)
    if base is None:
        return "unknown", ""
    if base.endswith("_created"):
        return "ignored", "creation time of a counter or histogram (§1.0)"
    if base in _vm.INFO_FAMILIES:
        return "facts", _vm.INFO_NAME
    if base in WINDOW_HISTOGRAMS:
        return "histogram", WINDOW_HISTOGRAMS[base][0]
    if base in METRIC_TO_SIGNAL:
        return "signal", METRIC_TO_SIGNAL[base]
    if base in IGNORED_METRICS:
        return "ignored", IGNORED_METRICS[base]
    return "unknown", ""


_CHECKED_DERIVED = {"prefix_cache_retention_seconds", "kv_block_alloc_tokens_per_second", "kv_demand_tokens",
                    "kv_demand_ratio", "kv_fit_requests", "max_num_seqs_fit", "kv_demand_requests",
                    "hybrid_block_size", "prefix_cache_readmission_preemptions", "kv_token_occupancy",
                    "kv_empty_slots_ratio", "kv_slots_freed_tokens", "kv_slots_freed_blocks", "kv_extra_requests_fit",
                    "prefix_cache_hits_per_second_early", "prefix_cache_hits_per_second_late",
                    "prefix_cache_queries_per_second_early", "prefix_cache_queries_per_second_late",
                    "num_requests_waiting_when_full"}


def checks_derived_domain(name: str) -> bool:
    """Is ``name`` a derived signal whose value :func:`derived_domain_error` vets before it is stored?"""
    return (name.startswith("prefix_cache_hit_rate") and name != "prefix_cache_hit_rate"
            and name != "prefix_cache_hit_rate_cumulative") or name.endswith(("_p50", "_p95", "_mean")) \
        or name in _CHECKED_DERIVED


def derived_domain_error(name: str, value: float) -> str:
    """Why a derived value cannot be a value of signal ``name`` ('' when it can).

    Non-finite values never; a hit rate (``prefix_cache_hit_rate*`` except the ``*_drop`` differences, which may be
    negative) must lie in 0..1 — hits above queries mean the counters are not what vLLM exports; seconds, tokens,
    blocks, requests and tokens/s are not negative.
    """
    if not math.isfinite(value):
        return "not a finite number"
    if name.startswith("prefix_cache_hit_rate") and not name.endswith("_drop") and not -1e-9 <= value <= 1 + 1e-9:
        return "a hit rate outside 0-100% (hits above queries, or a falling counter)"
    spec = SIGNALS.get(name)
    if spec is not None and spec.unit in ("seconds", "tokens", "blocks", "requests", "tokens/s") and value < 0:
        return f"negative {spec.unit}"
    if spec is not None and spec.unit == "seconds" and value > 1e9:
        return "more than 30 years"
    return ""
