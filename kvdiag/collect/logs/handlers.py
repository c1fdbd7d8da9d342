"""Stage 2 of the log reader, message handlers: what each EVENTS entry (:mod:`.messages`) adds to the bundle from a
matched line (signals in base units, text redacted and bounded). A handler receives the collector, the match and the
:class:`~.envelope.Line`."""

from __future__ import annotations

# ``LogCollector`` (:mod:`.collector`) is named in annotations only: the collector imports this module

import math
import re

from .envelope import _bounded, GIB, Line, MAX_LOG_VALUE, size_bytes
from .identity import _model_name, _set_multimodal, is_multimodal_architecture
from .phases import _phase_for, _set_step, _sized, phase_of

# ---- handlers ----------------------------------------------------------------------------------
# 'Name: number' parts of the stats line (§2.5 templates of all versions) → (signal, scale to base units)
_STATS_SIGNAL = {"Avg prompt throughput": ("prompt_throughput", 1.0),
                 "Avg generation throughput": ("generation_throughput", 1.0),
                 "Running": ("num_requests_running", 1.0), "Swapped": ("num_requests_swapped", 1.0),
                 "Pending": ("num_requests_waiting", 1.0), "Waiting": ("num_requests_waiting", 1.0),
                 "Preemptions": ("num_preemptions", 1.0), "Prefix cache hit rate": ("prefix_cache_hit_rate", 0.01)}
_STATS_NAMES = set(_STATS_SIGNAL) | {f"{d} KV cache usage" for d in ("GPU", "XPU", "CPU", "TPU", "HPU", "NPU",
                                                                  "GPU + host")}
# (?<!\d): a digit run is tried from its start only (a line of 100,000 digits stays linear, not quadratic)
_STATS_ENGINE = re.compile(r"(?:Engine (\d+)|(?<!\d)(\d+) Engines Aggregated): ")
# how several data-parallel engines' stats lines of one interval combine (as the metrics collector does)
_DP_COMBINE = {"kv_cache_usage": "max", "cpu_cache_usage": "max", "prefix_cache_hit_rate": "mean"}


def _stats(c: LogCollector, m: re.Match, line: Line) -> None:
    """Periodic stats line (V0 engine/metrics.py, V1 v1/metrics/loggers.py; §2.5).

    Percentages become 0–1 ratios; 'Preemptions: N' (0.16+, per interval) is accumulated into the
    ``num_preemptions`` counter. Lines of several engines (``Engine 000:``, ``Engine 001:``) with the
    same timestamp are one interval: usage by max, counts and throughput by sum, hit rate by mean.
    """
    msg = line.msg
    vals: dict[str, float] = {}
    v0_swap = "Swapped" in msg
    for part in msg.split(", "):
        name, sep, rest = part.rpartition(": ")
        if not sep:
            continue
        if ": " in name:  # 'Engine 000: Avg prompt throughput'
            name = name[name.rfind(": ") + 2:]
        if name not in _STATS_NAMES:
            continue
        try:
            x = float(rest.split(" ", 1)[0].rstrip("%."))
        except ValueError:
            continue
        if not math.isfinite(x) or x < 0 or x > MAX_LOG_VALUE \
                or (name.endswith(("KV cache usage", "hit rate")) and x > 100.0 + 1e-6):
            c._out_of_domain += 1  # a negative count, or a percentage above 100: not a value vLLM prints
            dropped = c.bundle.__dict__.setdefault("dropped_values", {})
            key = "kv_cache_usage" if name.endswith("KV cache usage") else _STATS_SIGNAL[name][0]
            dropped[key] = dropped.get(key, 0) + 1
            continue
        if name.endswith("KV cache usage"):
            if name.startswith("CPU") and v0_swap:
                vals["cpu_cache_usage"] = x / 100.0  # V0 swap pool; the GPU pool is the other part
            else:
                vals.setdefault("kv_cache_usage", x / 100.0)
        else:
            signal, scale = _STATS_SIGNAL[name]
            vals[signal] = x * scale
    if not vals:
        return
    if "Pending:" in msg and not c._v0_preempted and c._run_forms and "num_preemptions" not in vals:
        # V0 warns at the 1st, 51st, ... preemption (core/scheduler.py 0.4-0.10): in a run whose start is in the log
        # and that printed no such warning, nothing was preempted up to here — seen, not assumed
        vals["num_preemptions"] = 0.0
    me = _STATS_ENGINE.search(msg)
    engine = (me.group(1) or "agg") if me else ""
    if "Pending:" in msg:
        c.formats.add("V0 stats line 'Pending' (0.4-0.10)")
    elif engine:
        c.formats.add("stats line 'Engine NNN:' (0.8+)")
    if "Preemptions:" in msg:
        c.formats.add("stats line 'Preemptions' (0.16+)")
    if engine:
        c._engines.add(engine)
    c._step.clear()  # serving: no start-up phase marker applies any more
    c._run_served = True
    pending = c._stats_pending
    if pending and (pending[0][0].t != line.t or not engine or engine in c._pending_engines):
        c._flush_stats()
    c._stats_pending.append((line, vals))
    c._pending_engines.add(engine)
    if not engine:
        c._flush_stats()


def _v0_prefix_rate(c: LogCollector, m: re.Match, line: Line) -> None:
    """V0 separate record 'Prefix cache hit rate: GPU: x%, CPU: y%' (cumulative since start)."""
    x = float(m.group(1))
    if not 0.0 <= x <= 100.0:  # the regex admits digits and dots only; a percentage above 100 is not vLLM's
        c._out_of_domain += 1
        return
    c._add("prefix_cache_hit_rate_cumulative", x / 100.0, line)


_PREEMPT_COUNT = re.compile(r"total_(?:num_)?cumulative_preemption(?:_cnt)?=(\d+)")


def _preempt(c: LogCollector, m: re.Match, line: Line) -> None:
    """V0 WARNING, logged for the 1st, 51st, 101st ... preemption (§2.6); n is cumulative
    ('total_num_cumulative_preemption=N' 0.4-0.10, 'total_cumulative_preemption_cnt=N' in the 0.4.0 wording); a line
    cut before the count is still a preemption (the count is then unknown)."""
    c._add("preemption_warning", 1, line, text=m.group(1))
    c._v0_preempted = True
    mm = _PREEMPT_COUNT.search(line.msg, m.end())
    if mm:
        n = float(mm.group(1))
        if n >= 1:
            # the count printed includes this preemption (V0 logs num_cumulative_preemption + 1 before adding it,
            # core/scheduler.py 0.4-0.10): the counter stood at n - 1 just before, so one warning is an increase
            c._add("num_preemptions", n - 1, line)
        c._add("num_preemptions", n, line)


def _weights(c: LogCollector, m: re.Match, line: Line) -> None:
    """W1 'Loading model weights took X GB' (GiB despite the name) / W2, W3 'Model loading took X GiB'."""
    msg = line.msg
    if "Tried to allocate" in msg or "out of memory" in msg:
        # an OOM text quoting the weights ('(Model loading took 13.31 GiB)'): the weights loaded in this start-up;
        # no new start-up segment or run, the OOM handler reads the rest
        c._add("weights_bytes", float(m.group(1)) * GIB, line)
        if c._step.get(line.proc or "main", "") in ("", "load"):
            _set_step(c, line, "profile")
        return
    c._run_marker(line, "weights")
    c._new_segment(line, "weights")
    _set_step(c, line, "profile")  # the weights loaded: the profile run is the next step
    c.formats.add(("weights line W1 'GiB' (0.8-0.9, XPU)" if "GiB" in msg[m.start():m.end()] else
                   "weights line W1 'GB' (0.4-0.7)") if "weights took" in msg else
                  "weights line W3 'GiB memory and' (0.16+)" if "GiB memory and" in msg else
                  "weights line W2 'GiB and' (0.8-0.11)")
    c._add("weights_bytes", float(m.group(1)) * GIB, line)
    c._add("startup_segments", 1, line, text="weights_loaded")


def _m1(c: LogCollector, m: re.Match, line: Line) -> None:
    """M1 'Memory profiling results: total_gpu_memory=..GiB ... kv_cache_size=..GiB gpu_memory_utilization=..'."""
    kv = dict(re.findall(r"(\w+)=(-?[\d.]+)(?:Gi?B|GIB)?", line.msg[m.start():]))
    mapping = {"total_gpu_memory": "gpu_total_bytes", "non_torch_memory": "non_torch_bytes",
               "kv_cache_size": "kv_cache_memory_bytes", "peak_torch_memory": "peak_torch_memory_bytes"}
    for key, signal in mapping.items():
        if key in kv:
            c._add(signal, float(kv[key]) * GIB, line)
    if "gpu_memory_utilization" in kv:
        c._add("gpu_memory_utilization", float(kv["gpu_memory_utilization"]), line)


def _m2_budget(c: LogCollector, m: re.Match, line: Line) -> None:
    """M2 'total_gpu_memory (T GiB) x gpu_memory_utilization (U) = B GiB' (V0 0.6.6-0.10)."""
    c._add("gpu_total_bytes", float(m.group(1)) * GIB, line)
    c._add("gpu_memory_utilization", float(m.group(2)), line)
    c._add("gpu_budget_bytes", float(m.group(3)) * GIB, line)


def _m2_split(c: LogCollector, m: re.Match, line: Line) -> None:
    """M2 'model weights take W GiB; non_torch_memory takes N GiB; PyTorch activation peak memory takes A GiB;
    the rest of the memory reserved for KV Cache is K GiB.'"""
    c._add("weights_bytes", float(m.group(1)) * GIB, line)
    c._add("non_torch_bytes", float(m.group(2)) * GIB, line)
    c._add("activation_peak_bytes", float(m.group(3)) * GIB, line)
    c._add("kv_cache_memory_bytes", float(m.group(4)) * GIB, line)


def _m3(c: LogCollector, m: re.Match, line: Line) -> None:
    """M3 'Available KV cache memory: X GiB' (V1 0.9+)."""
    _sized(c, line)
    c._add("kv_cache_memory_bytes", float(m.group(1)) * GIB, line)


def _m6(c: LogCollector, m: re.Match, line: Line) -> None:
    """M6 'Free memory on device (F/T GiB) on startup. Desired GPU memory utilization is (U, R GiB). Actual usage
    is W GiB for weight, A GiB for peak activation, N GiB for non-torch memory, and G GiB for CUDAGraph memory.'"""
    g = m.groupdict()
    c._add("gpu_free_at_startup_bytes", float(g["free"]) * GIB, line)
    c._add("gpu_total_bytes", float(g["total"]) * GIB, line)
    c._add("gpu_memory_utilization", float(g["util"]), line)
    c._add("gpu_budget_bytes", float(g["req"]) * GIB, line)
    rest = line.msg[m.end():]
    for pat, signal in ((r"([\d.]+) GiB for weight", "weights_bytes"),
                        (r"([\d.]+) GiB for consumed memory", "weights_bytes"),
                        (r"([\d.]+) GiB for peak activation", "activation_peak_bytes"),
                        (r"([\d.]+) GiB for non-torch memory", "non_torch_bytes"),
                        (r"([\d.]+) GiB for CUDAGraph memory", "cudagraph_bytes"),
                        (r"Current kv cache memory in use is ([\d.]+) GiB", "kv_cache_memory_bytes"),
                        (r"Current kv cache memory in use is (\d+) bytes", "kv_cache_memory_bytes")):
        mm = re.search(pat, rest)
        if mm:  # GiB from 0.11; 0.10 prints the KV memory as int bytes ('... in use is N bytes.')
            c._add(signal, float(mm.group(1)) * (1 if pat.endswith("bytes") else GIB), line)
    mm = re.search(r"--kv-cache-memory=(\d+)`?(?: \([\d.]+ GiB\))? to fit into requested memory", rest)
    if mm:  # bytes, as vLLM prints them (0.10 without the '(X GiB)' after)
        c._add("kv_cache_memory_suggested_bytes", float(mm.group(1)), line)


def _blocks(c: LogCollector, m: re.Match, line: Line) -> None:
    """K1/K2/K3 '# GPU blocks: N, # CPU blocks: M' (V0; '# cuda blocks' 0.7-0.10)."""
    _sized(c, line)
    c._add("num_gpu_blocks", float(m.group(1)), line)
    if m.group(2) is not None:
        c._add("num_cpu_blocks", float(m.group(2)), line)


def _k4(c: LogCollector, m: re.Match, line: Line) -> None:
    """K4/K6 'GPU KV cache size: N tokens' (V1 0.8+)."""
    if "Maximum concurrency" in line.msg:
        c.formats.add("merged KV size + concurrency line K6 (0.33+)")
    _sized(c, line)
    c._add("kv_cache_size_tokens", float(m.group(1).replace(",", "")), line)


def _k5(c: LogCollector, m: re.Match, line: Line) -> None:
    """K5/K6 'Maximum concurrency for L tokens per request: X x'."""
    c._add("max_model_len", float(m.group(1).replace(",", "")), line)
    c._add("max_concurrency", float(m.group(2)), line)


def _k10(c: LogCollector, m: re.Match, line: Line) -> None:
    """K10 'Setting attention block size to N tokens to ensure that attention page size is >= mamba page size.'"""
    c._add("block_size", float(m.group(1)), line)


def _k11(c: LogCollector, m: re.Match, line: Line) -> None:
    """K11 '... vllm cache_config_info with initialization after num_gpu_blocks is: N' (sum over DP engines)."""
    c._add("num_gpu_blocks", float(m.group(1)), line)


def _k12(c: LogCollector, m: re.Match, line: Line) -> None:
    """K12 'Graph capturing finished in S secs, took G GiB'."""
    _set_step(c, line, "")
    c._add("cudagraph_bytes", float(m.group(1)) * GIB, line)


def _m9(c: LogCollector, m: re.Match, line: Line) -> None:
    """M9 'Estimated CUDA graph memory: G GiB total' (0.24+)."""
    c._add("cudagraph_estimate_bytes", float(m.group(1)) * GIB, line)


def _e1(c: LogCollector, m: re.Match, line: Line) -> None:
    """E1 'No available memory for the cache blocks.' (all versions)."""
    c._add("kv_capacity_error", 1, line, text="no_kv_memory")


def _e2a(c: LogCollector, m: re.Match, line: Line) -> None:
    """E2a "The model's max seq len (L) is larger than the maximum number of tokens that can be stored in KV
    cache (N)." (V0 0.4-0.10)."""
    c._add("kv_capacity_error", 1, line, text="max_model_len_exceeds_pool")
    c._add("max_model_len", float(m.group(1)), line)
    c._add("kv_cache_size_tokens", float(m.group(2)), line)


def _e2bcd(c: LogCollector, m: re.Match, line: Line) -> None:
    """E2b/c/d 'To serve at least one request with the model's max seq len (L), (N GiB KV cache is needed, which is
    larger than the available KV cache memory (A GiB).' (V1 0.7+)."""
    c._add("kv_capacity_error", 1, line, text="max_model_len_exceeds_pool")
    c._add("max_model_len", float(m.group(1)), line)
    c._add("kv_cache_memory_bytes", float(m.group(3)) * GIB, line)


def _e3(c: LogCollector, m: re.Match, line: Line) -> None:
    """E3 'Cannot auto-fit max_model_len: not enough GPU memory available to serve even a single token.' (0.16+)."""
    c._add("kv_capacity_error", 1, line, text="no_kv_memory")


def _mamba_blocks(c: LogCollector, m: re.Match, line: Line) -> None:
    """'max_num_seqs (S) exceeds available Mamba cache blocks (B).' (hybrid models, vLLM PR 38270, 2026)."""
    c._add("kv_capacity_error", 1, line, text="max_num_seqs_exceeds_mamba_blocks")
    c._add("max_num_seqs", float(m.group(1)), line)
    c._add("mamba_cache_blocks", float(m.group(2)), line)


def _e6(c: LogCollector, m: re.Match, line: Line) -> None:
    """E6 'CUDA out of memory occurred when warming up sampler with N dummy requests.' (V1 0.8+)."""
    c._add("sampler_warmup_oom", 1, line)


def _oom_others(c: LogCollector, m: re.Match, line: Line) -> None:
    """'Process N has X memory in use' entries of a PyTorch OOM text (§2.7): the other processes on that GPU.

    With 'this process has X memory in use' in the text every listed process is another one; without it the largest
    entry is the failing process itself (torch lists it too) and the rest are others. Adds
    ``oom_other_processes_bytes`` (sum) and ``oom_other_processes_count`` (issue 6)."""
    sizes = [size_bytes(n, u) for n, u in re.findall(r"Process \d+ has ([\d.]+) (GiB|MiB|KiB|bytes) memory in use",
                                                     line.msg)]
    if "this process has" not in line.msg and sizes:
        sizes.remove(max(sizes))
    c._add("oom_other_processes_bytes", float(sum(sizes)), line)
    c._add("oom_other_processes_count", float(len(sizes)), line)


def _mm_warning(c: LogCollector, m: re.Match, line: Line) -> None:
    """0.9+ WARNING 'The sequence length used for profiling (...) is too short to hold the multi-modal embeddings in
    the worst case (N tokens in total, ...)' (``multimodal/profiling.py``); value = N (issue 6)."""
    c._add("mm_profile_warning", float(m.group(1)), line)


def _mm_run(c: LogCollector, m: re.Match, line: Line) -> None:
    """V0 'Starting profile run for multi-modal models.' (``worker/enc_dec_model_runner.py``) (issue 6)."""
    c._add("mm_profile_run", 1, line)


def _version(c: LogCollector, m: re.Match, line: Line) -> None:
    """Version banner (0.33 'version 0.33.0'), 'vLLM API server version X', 'Initializing a V0 LLM engine (vX)'."""
    c._run_marker(line, "engine" if "LLM engine" in m.group(0) else "banner")
    c.version = _bounded(m.group(1))
    c._add("vllm_version", None, line, text=c.version)
    mm = re.search(r"Initializing an? (V[01]) LLM engine", line.msg)
    if mm:
        c._add("engine_generation", None, line, text=mm.group(1))
    c._new_segment(line, "version")


def _args(c: LogCollector, m: re.Match, line: Line) -> None:
    """Engine-config / args Namespace / non-default args lines: a few settings kvdiag needs."""
    msg = line.msg
    if "LLM engine" in msg and "with config" in msg:
        c._run_marker(line, "config")  # 'Initializing an LLM engine with config: ...' (0.1-0.3 print no version)
    pats = {
        "max_model_len": r"\bmax_(?:model|seq)_len['\"]?\s*[=:]\s*(\d+)",
        "gpu_memory_utilization": r"\bgpu_memory_utilization['\"]?\s*[=:]\s*([\d.]+)",
        "block_size": r"\bblock_size['\"]?\s*[=:]\s*(\d+)",
        "tensor_parallel_size": r"\btensor_parallel_size['\"]?\s*[=:]\s*(\d+)",
        "max_num_seqs": r"\bmax_num_seqs['\"]?\s*[=:]\s*(\d+)",
        "max_num_batched_tokens": r"\bmax_num_batched_tokens['\"]?\s*[=:]\s*(\d+)",
    }
    for signal, pat in pats.items():
        mm = re.search(pat, msg)
        if mm:
            c._add(signal, float(mm.group(1)), line)
    mm = re.search(r"\bkv_cache_dtype['\"]?\s*[=:]\s*'?([\w]+)", msg)
    if mm:
        c._add("cache_dtype", None, line, text=mm.group(1))
    nd = msg.find("non-default args: ")
    if nd >= 0:  # the whole dict as printed (entrypoints/utils.py 0.10+), for 'kvdiag diff'; secrets are redacted
        c._add("engine_args", None, line, text=msg[nd + len("non-default args: "):][:ENGINE_ARGS_CHARS])
    mm = re.search(r"\benable_prefix_caching['\"]?\s*[=:]\s*(True|False)", msg)
    if mm:
        c._add("enable_prefix_caching", 1.0 if mm.group(1) == "True" else 0.0, line)
    _capacity_args(c, msg, line)
    _identity(c, msg, line)


# Capacity-model facts of the same lines (issue 16): 'non-default args: {..., 'speculative_config': {'method':
# 'mtp', 'num_speculative_tokens': 2}, 'decode_context_parallel_size': 2, 'mamba_ssm_cache_dtype': 'float32'}'
# (entrypoints/utils.py 0.10+) and the engine config line's 'speculative_config=SpeculativeConfig(method='eagle',
# ..., num_spec_tokens=3)' (v1/engine/core.py @ v0.11.0, SpeculativeConfig.__repr__).
_CAPACITY_ARGS = (
    ("speculative_method", re.compile(r"""\bspeculative_config['"]?\s*[=:]\s*(?:SpeculativeConfig\(|\{)[^)}]*?"""
                                      r"""\bmethod['"]?\s*[=:]\s*['"](\w+)['"]"""), True),
    ("num_speculative_tokens", re.compile(r"""\bnum_spec(?:ulative)?_tokens['"]?\s*[=:]\s*(\d+)"""), False),
    ("decode_context_parallel_size", re.compile(r"""\bdecode_context_parallel_size['"]?\s*[=:]\s*(\d+)"""), False),
    ("pipeline_parallel_size", re.compile(r"""\bpipeline_parallel_size['"]?\s*[=:]\s*(\d+)"""), False),
    ("mamba_ssm_cache_dtype", re.compile(r"""\bmamba_ssm_cache_dtype['"]?\s*[=:]\s*['"]?(\w+)"""), True),
)


def _capacity_args(c: LogCollector, msg: str, line: Line) -> None:
    """Speculative config, decode context parallel, pipeline parallel and SSM cache dtype of an args line."""
    for signal, pat, is_text in _CAPACITY_ARGS:
        mm = pat.search(msg)
        if mm:
            if is_text:
                c._add(signal, None, line, text=_bounded(mm.group(1)))
            else:
                c._add(signal, float(mm.group(1)), line)


# model identity in the engine config line ('Initializing a V1 LLM engine (v0.10.2) with config: model='Qwen/…',
# …, quantization=awq, …', v1/engine/core.py; V0 engine/llm_engine.py), the 'non-default args: {'model': …}' dict
# (entrypoints/utils.py 0.10+) and 'args: Namespace(model=…)' (entrypoints/openai/cli_args 0.4-0.9)
_MODEL_ARG = re.compile(r"""(?:\bmodel=|['"]model['"]:\s*)(['"])([^'"\s]+)\1""")
_QUANT_ARG = re.compile(r"""\bquantization(?:=|['"]:\s*)['"]?([\w-]+)""")
_MM_ARGS = re.compile(r"\b(?:limit_mm_per_prompt|mm_processor_kwargs|mm_encoder_tp_mode|mm_processor_cache_gb|"
                      r"media_io_kwargs)\b['\"]?\s*[=:]\s*(?!None\b|\{\}|0\b)")
_ARCH_ARG = re.compile(r"""\barchitectures['"]?\s*[=:]\s*\[['"](\w+)['"]""")


def _identity(c: LogCollector, msg: str, line: Line) -> None:
    """Model name, quantisation, architecture and multimodal args of an engine-config / args line."""
    mm = _MODEL_ARG.search(msg)
    if mm:
        _model_name(c, line, mm.group(2))
    mm = _QUANT_ARG.search(msg)
    if mm and mm.group(1) not in ("None", "null"):
        c._add("quantization", None, line, text=_bounded(mm.group(1)))
    mm = _ARCH_ARG.search(msg)
    if mm:
        c._add("model_architecture", None, line, text=_bounded(mm.group(1)))
        _set_multimodal(c, line, is_multimodal_architecture(mm.group(1)))
    if _MM_ARGS.search(msg):
        _set_multimodal(c, line, True)


ENGINE_ARGS_CHARS = 4000
"""At most this many characters of a 'non-default args:' dict kept as the ``engine_args`` text."""


def _chunked_prefill(c: LogCollector, m: re.Match, line: Line) -> None:
    """'Chunked prefill is enabled with max_num_batched_tokens=N.' (config/scheduler.py 0.33; config.py before)."""
    c._add("max_num_batched_tokens", float(m.group(1)), line)


def _max_len(c: LogCollector, m: re.Match, line: Line) -> None:
    """'Using max model len N' (V1 config)."""
    c._add("max_model_len", float(m.group(1)), line)


MEASURED = "operator's measurement"
"""Source note of the values read from an operator's write-up next to the log (so a report never shows them as if
vLLM had printed them, e.g. a measured pool beside the pool of a vLLM capacity line)."""


def _measure_usage(c: LogCollector, m: re.Match, line: Line) -> None:
    """A reported measurement 'GPU KV cache usage 44.6% (~297 of 665 blocks)' (usage with the blocks behind it)."""
    c._add("kv_cache_usage", float(m.group(1)) / 100.0, line, note=MEASURED)
    c._add("num_blocks_used", float(m.group(2)), line, note=MEASURED)
    c._add("num_gpu_blocks", float(m.group(3)), line, note=MEASURED)


def _measure_pool(c: LogCollector, m: re.Match, line: Line) -> None:
    """A reported measurement 'pool: 1,096,153 tokens ... / 665 GPU blocks'."""
    c._add("kv_cache_size_tokens", float(m.group(1).replace(",", "")), line, note=MEASURED)
    if m.group(2):
        c._add("num_gpu_blocks", float(m.group(2).replace(",", "")), line, note=MEASURED)


def _measure_request(c: LogCollector, m: re.Match, line: Line) -> None:
    """A reported measurement 'one ~36k-token request: ...' / '3 ~8k-token requests: ...' (running set and its
    tokens)."""
    words = {"one": 1, "two": 2, "three": 3, "four": 4, "a": 1, "single": 1}
    n = words.get(m.group(1).lower()) or int(m.group(1))
    per = float(m.group(2).replace(",", "")) * (1000 if m.group(3) else 1)
    c._add("num_requests_running", n, line, note=MEASURED)
    c._add("context_tokens", n * per, line, note=MEASURED)


def _k7(c: LogCollector, m: re.Match, line: Line) -> None:
    """K7 'Overriding num_gpu_blocks=N with num_gpu_blocks_override=M' (V1 0.7+): the pool the user forced."""
    c._add("num_gpu_blocks", float(m.group(2)), line)


def _k9(c: LogCollector, m: re.Match, line: Line) -> None:
    """K9 'Auto-fit max_model_len: reduced from A to B to fit in available KV cache memory (K GiB GPU)' or
    '... full model context length N fits in available KV cache memory (K GiB GPU)' (0.16+)."""
    g = m.groupdict()
    c._add("max_model_len", float(g["reduced"] or g["full"]), line)
    if g["kv"]:  # 0.16-0.24 '(K GiB available for KV cache)' on reduce, nothing on full fit; 0.33 '(K GiB GPU)'
        c._add("kv_cache_memory_bytes", float(g["kv"]) * GIB, line)
    if g["reduced"]:
        c._add("max_model_len_autofit", float(g["reduced"]), line, text=f"reduced from {g['from']}")


def _k13(c: LogCollector, m: re.Match, line: Line) -> None:
    """K13 V0 'Capturing the model for CUDA graphs' (0.4) / 'Capturing cudagraphs for decoding' (0.6-0.10); V1
    'Capturing CUDA graphs (...)' progress: CUDA-graph capture began (an OOM right after is a capture OOM)."""
    _set_step(c, line, "cudagraph")


def _m4(c: LogCollector, m: re.Match, line: Line) -> None:
    """M4 (DEBUG, V1 0.9+) 'Memory profiling takes S seconds. Total non KV cache memory: X GiB; torch peak memory
    increase: A GiB; non-torch forward increase memory: N GiB; weights memory: W GiB.' (0.33: 'total consumed (from
    mem_get_info): C GiB' instead of the non-torch part)."""
    rest = line.msg[m.start():]
    for pat, signal in ((r"torch peak memory increase: (-?[\d.]+) ?GiB", "activation_peak_bytes"),
                        (r"non-torch forward increase memory: (-?[\d.]+) ?GiB", "non_torch_bytes"),
                        (r"weights memory: (-?[\d.]+) ?GiB", "weights_bytes")):
        mm = re.search(pat, rest)
        if mm:
            c._add(signal, float(mm.group(1)) * GIB, line)


def _m5(c: LogCollector, m: re.Match, line: Line) -> None:
    """M5 (DEBUG, 0.11+) 'Initial free memory: F GiB; Requested memory: U (util), R GiB'."""
    c._add("gpu_free_at_startup_bytes", float(m.group(1)) * GIB, line)
    c._add("gpu_memory_utilization", float(m.group(2)), line)
    c._add("gpu_budget_bytes", float(m.group(3)) * GIB, line)


def _m7(c: LogCollector, m: re.Match, line: Line) -> None:
    """M7 'Initial free memory F GiB, reserved K GiB memory for KV Cache as specified by kv_cache_memory_bytes
    config and skipped memory profiling.' (--kv-cache-memory set; 0.10 prints 'reserved K.KKGiB memory' without the
    space, ``worker/worker.py`` and ``v1/worker/gpu_worker.py`` @ 0.10.2)."""
    c._add("gpu_free_at_startup_bytes", float(m.group(1)) * GIB, line)
    c._add("kv_cache_memory_bytes", float(m.group(2)) * GIB, line)


def _m9_pool(c: LogCollector, m: re.Match, line: Line) -> None:
    """M9 'CUDA graph pool memory: A GiB (actual), E GiB (estimated), difference: D GiB (P%).' (0.24+)."""
    c._add("cudagraph_bytes", float(m.group(1)) * GIB, line)
    c._add("cudagraph_estimate_bytes", float(m.group(2)) * GIB, line)


def _m10(c: LogCollector, m: re.Match, line: Line) -> None:
    """M10 'init engine (profile, create kv cache, warmup model) took S seconds' (0.6+; 0.24+ '... took S s'):
    start-up finished."""
    c._step.clear()
    c._add("startup_seconds", float(m.group(1)), line)


def _e0(c: LogCollector, m: re.Match, line: Line) -> None:
    """E0 'EngineCore failed to start.' / 'Engine core initialization failed. See root cause above.' (V1 0.8+):
    a wrapper; the cause is in the EngineCore lines above it."""
    c._add("engine_start_failed", 1, line)


def _failing_request(c: LogCollector, m: re.Match, line: Line) -> None:
    """V0 'Failing the request R because there's not enough kv cache blocks to run the entire sequence.'"""
    c._add("request_rejected", 1, line, text="not_enough_kv_blocks")


def _prompt_too_long(c: LogCollector, m: re.Match, line: Line) -> None:
    """V0 'Input prompt (N tokens) [+ lookahead slots (K)] is too long and exceeds limit of L' / '... exceeds the
    capacity of block_manager'."""
    c._add("request_rejected", float(m.group(1)), line,
           text="prompt_exceeds_pool" if "block_manager" in line.msg else "prompt_exceeds_limit")


def _worker_method(c: LogCollector, m: re.Match, line: Line) -> None:
    """V0 'Exception in worker VllmWorkerProcess while processing method M' (multiproc_worker_utils.py, 0.5-0.10):
    the start-up step the worker failed in (``determine_num_available_blocks`` = profiling) for a later OOM line."""
    phase = phase_of([("", m.group(1))])
    if phase:
        c._step[line.proc or "main"] = phase


def _context_limit(c: LogCollector, m: re.Match, line: Line) -> None:
    """OpenAI server 400 error "This model's maximum context length is N tokens ..." (all versions): N is
    max_model_len."""
    c._add("max_model_len", float(m.group(1)), line)


def _stats_disabled(c: LogCollector, m: re.Match, line: Line) -> None:
    """'AsyncLLM created with api_server_count more than 1; disabling stats logging' (0.10+): no stats lines."""
    c._add("stats_logging_disabled", 1, line)


# ---- issue 12: vLLM's own start-up checks in every version, CUDA runtime errors, phase markers, model identity ----
def _e4_budget(c: LogCollector, m: re.Match, line: Line) -> None:
    """E4 and its 0.33 variants (``v1/worker/gpu_worker.py`` @ 0.9-0.11, ``v1/worker/utils.py`` @ 0.16-0.33,
    ValueError): 'Free memory on device [D ](F/T GiB) on startup is less than desired GPU memory utilization (U, R
    GiB).' / '... is less than the engine's budget after excluding external process's weights (U, R GiB).' (0.33) /
    'Externally held weights on device D (W/T GiB) exceed the desired GPU memory utilization (U, R GiB).' (0.33):
    other processes hold the memory vLLM planned to use."""
    g = m.groupdict()
    c._add("free_memory_below_request", 1, line, text="external_weights" if g.get("ext") else "free_below_budget")
    if g.get("free"):
        c._add("gpu_free_at_startup_bytes", float(g["free"]) * GIB, line)
    c._add("gpu_total_bytes", float(g["total"]) * GIB, line)
    if g.get("util"):
        c._add("gpu_memory_utilization", float(g["util"]), line)
        c._add("gpu_budget_bytes", float(g["req"]) * GIB, line)


def _e5_any(c: LogCollector, m: re.Match, line: Line) -> None:
    """E5 in every wording (AssertionError): 'Error in memory profiling. Initial free memory A[ GiB], current free
    memory B[ GiB]. ...' (``worker/worker.py`` 0.4-0.6, ``v1/worker/gpu_worker.py`` 0.7-0.33), '... Initial used
    memory A, currently used memory B. ...' (``worker/worker.py`` @ 0.8.5), '... This happens when the GPU memory
    was not properly cleaned up ...' (no numbers, ``worker/worker.py`` @ 0.6.6); and the 0.33 WARNING 'Free memory
    grew by G GiB during profiling (initial I GiB, current C GiB).' (``v1/worker/gpu_worker.py`` @ 0.33.0): another
    process released memory while vLLM profiled — not a KV problem."""
    c._add("memory_profiling_error", 1, line, text="free_memory_grew" if m.group(0).startswith("Free") else "assert")


def _blocks_exhausted(c: LogCollector, m: re.Match, line: Line) -> None:
    """V0 runtime 'Out of memory! No free blocks are available.' (``core/block_manager_v1.py``, ValueError, 0.4-0.6)
    / 'No usable cache memory left' (``core/evictor*.py``, ValueError, 0.4-0.10): the block manager had no block."""
    c._add("kv_blocks_exhausted", 1, line, text=m.group(0))


def _long_context(c: LogCollector, m: re.Match, line: Line) -> None:
    """WARNING 'The model has a long context length (L). This may cause OOM during the initial memory profiling phase,
    or result in low performance due to small KV cache size. Consider setting --max-model-len to a smaller value.'
    (``engine/arg_utils.py`` 0.6-0.8, printed 'causeOOM' in 0.8.5): L is the max_model_len in use."""
    c._add("max_model_len", float(m.group(1)), line)


_DIGITS = re.compile(r"\d+")


# a traceback's source line ('    except torch.OutOfMemoryError as e:'), never an exception line
_SOURCE_LINE = re.compile(r"^\s*(?:except|raise|if|elif|return|assert|with|for|while|try|def|class|catch)\b")
_CUDA_ERR_TAIL = re.compile(r"\s*(?:CUDA kernel errors|For debugging|Compile with|Search for|\\n|['\"]|$).*")
_OOM_ANY_SIZE = re.compile(r"Tried to allocate ([\d.]+) ?(GiB|MiB|KiB|bytes|GB|MB)")


def _oom_other_form(c: LogCollector, m: re.Match, line: Line) -> None:
    """An OOM in a form other than PyTorch's full allocator text (which ``oom``/``oom_old`` read): the CUDA runtime's
    'CUDA error: out of memory' (c10 ``C10_CUDA_CHECK``, often wrapped in ``RuntimeError: Worker failed with error
    '...'`` (V1 ``v1/executor/multiproc_executor.py``), a Ray ``RayTaskError(...)`` or a V0 multiprocessing worker
    exception), ``CUBLAS_STATUS_ALLOC_FAILED``, ``cudaErrorMemoryAllocation``, or an exception line cut before its
    numbers ('torch.OutOfMemoryError: Error in model executi…', 'CUDA out of memory. Tried to allocate 2.00 GiB. GPU
    0 has a tot…'). Value = bytes tried when printed (else unknown); the phase comes from the frames and markers
    (:func:`_phase_for`). One OOM per line: a line another OOM event read is skipped."""
    if c._oom_line == line.lineno or "occurred when warming up" in line.msg or _SOURCE_LINE.match(line.msg):
        return  # read by oom / oom_old, or E6 (sampler / pooler warm-up, its own event), or a traceback source line
    mm = _OOM_ANY_SIZE.search(line.msg)
    tried = size_bytes(mm.group(1), mm.group(2)) if mm else None
    phase = _phase_for(c, line)
    c._add("cuda_oom", tried, line, text=phase or "unknown")
    c._oom_line = line.lineno
    c._close_tb = True


def _cuda_error(c: LogCollector, m: re.Match, line: Line) -> None:
    """A CUDA runtime / cuBLAS / NCCL error that is not a memory problem: 'CUDA error: an illegal memory access was
    encountered', '... device-side assert triggered', '... operation not permitted when stream is capturing'
    (cudaErrorStreamCaptureUnsupported), '... misaligned address', '... no kernel image is available ...',
    'CUBLAS_STATUS_EXECUTION_FAILED', 'NCCL error: unhandled cuda error' (torch's c10 / ProcessGroupNCCL texts, any
    vLLM version). 'CUDA error: out of memory' and CUBLAS_STATUS_ALLOC_FAILED are OOMs (:func:`_oom_other_form`)."""
    if c._oom_line == line.lineno or _SOURCE_LINE.match(line.msg):
        return
    err = m.group(0)
    if err.startswith("CUDA error: "):
        err = _CUDA_ERR_TAIL.sub("", err)
        if "out of memory" in err:
            return
    if c._cuda_error_line == line.lineno:
        return
    c._cuda_error_line = line.lineno
    c._add("cuda_error", 1, line, text=err[:120])
    c._close_tb = True

def _architecture(c: LogCollector, m: re.Match, line: Line) -> None:
    """'Resolved architecture: X' (``config/__init__.py`` 0.10, ``config/model.py`` 0.11-0.33, INFO) and
    'architectures=[...]' / 'Architectures: [...]' forms: the model's architecture, multimodal or not."""
    arch = m.group(1)
    c._add("model_architecture", None, line, text=_bounded(arch))
    _set_multimodal(c, line, is_multimodal_architecture(arch))


def _encoder_budget(c: LogCollector, m: re.Match, line: Line) -> None:
    """V1 'Encoder cache will be initialized with a budget of N tokens, and profiled with K image items of the
    maximum feature size.' (``v1/worker/gpu_model_runner.py`` ``profile_run`` 0.8-0.33, INFO): a multimodal model
    whose encoder is being profiled now — a profile OOM right after is the encoder's."""
    _set_multimodal(c, line, True)
    _set_step(c, line, "profile")


def _mm_skip(c: LogCollector, m: re.Match, line: Line) -> None:
    """'Skipping memory profiling for multimodal encoder and encoder cache.' (V1 0.9-0.33): a multimodal model whose
    encoder is *not* profiled, so a profile OOM is not the encoder's."""
    c._mm_profile_skipped = True


