"""Stage 2 of the log reader, messages: the EVENTS registry (id, pattern, handler), the needles that let a line be
decoded only when an event or a catalogue entry can match it, the catalogue / anchor matchers, and the "seen, not
understood" wording (:data:`TROUBLE_NEEDLES`) of lines no event read."""

from __future__ import annotations

import functools
import re
from typing import Callable

import ahocorasick_rs

from ... import catalog
from .envelope import Line
from .handlers import (_architecture, _args, _blocks, _blocks_exhausted, _chunked_prefill, _context_limit, _cuda_error,
                       _e0, _e1, _e2a, _e2bcd, _e3, _e4_budget, _e5_any, _e6, _encoder_budget, _failing_request, _k10,
                       _k11, _k12, _k13, _k4, _k5, _k7, _k9, _long_context, _m1, _m10, _m2_budget, _m2_split, _m3, _m4,
                       _m5, _m6, _m7, _m9, _m9_pool, _mamba_blocks, _max_len, _measure_pool, _measure_request,
                       _measure_usage, _mm_run, _mm_skip, _mm_warning, _oom_other_form, _oom_others, _preempt,
                       _prompt_too_long, _stats, _stats_disabled, _v0_prefix_rate, _version, _weights, _worker_method)
from .phases import _WORKER_METHOD, _oom, _oom_old, _step_clear, _step_load, _traceback, _w4


# ------------------------------------------------------------------------------------------------
# The EVENTS registry: (id, pattern, handler). Handlers receive the match, the Line and the
# collector, and add observations. Ids follow shared/reference/vllm-observability.md §2.
_num = r"(-?\d+(?:\.\d+)?)"

# count at any level; weak ones (KV cache, blocks, memory) only on WARNING/ERROR/CRITICAL lines or text printed outside
# the logger (exception lines), never on INFO/DEBUG progress talk.
UNSEEN_LISTED = 10
TROUBLE_NEEDLES = ["out of memory", "Out of memory", "OutOfMemory", "OOM", "CUDA error", "CUBLAS_STATUS", "NCCL",
                   "preempt", "Preempt", "not enough", "Not enough", "insufficient", "Insufficient", "No available",
                   "no available", "KV cache", "kv cache", "KV Cache", "blocks", "memory", "Memory"]
# matched on the lower-cased message (a case-insensitive regex costs 3x more per line); OOM on the original
_TROUBLE_STRONG = re.compile(r"out of memory|outofmemory|cuda error|cublas_status|nccl (?:error|warn)|\bpreempt|"
                             r"no (?:free|available) (?:\w+ )?(?:blocks?|memory)|not enough (?:\w+ )?"
                             r"(?:memory|blocks?|kv cache)|insufficient (?:\w+ )?memory|cannot allocate|failed to allocate")
_OOM_WORD = re.compile(r"\bOOM\b")
_TROUBLE_WEAK = re.compile(r"kv cache|cache blocks|gpu blocks|free blocks|\bmemory\b")
_SETTING_WORDS = re.compile(r"gpu[-_]memory[-_]utili[sz]ation|kv[-_]cache[-_](?:dtype|memory)|swap[-_]space")


# vLLM's own WARNING/INFO texts that mention KV cache / memory / CUDA graphs but report a setting, not trouble
# (read: nothing to list). Sources: v1/core/kv_cache_utils.py / kv_cache_planning.py (hybrid manager, padding layers,
# page sizes, fine-grained prefix hits, draft group; 0.9-0.33), v1/worker/gpu_model_runner.py (skipping capture,
# 0.9-0.33), v1/worker/gpu_worker.py (CUDA graph memory profiling disabled, 0.24-0.33), config.py (CUDA graph not
# supported, fallback to eager, 0.4-0.10), platforms/interface.py and cpu.py (pin memory, fp8 KV on CPU).
_KNOWN_NOT_TROUBLE = re.compile(
    r"Hybrid KV cache manager is disabled|KV cache page sizes cannot be unified|Add \d+ padding layers, may waste|"
    r"Disabling fine-grained prefix-cache hits|no KV cache group could be identified as the draft|"
    r"Skipping (?:encoder and decoder )?CUDA graph capture|CUDA graph memory profiling is (?:disabled|enabled)|"
    r"CUDA graph is not supported|fallback to (?:the )?eager mode|Pinned memory is not available|pin_memory=False|"
    r"doesn't support fp8_e4m3 KV cache|Memory profiling takes|Sleep mode freed")
_SHELL = re.compile(r"^\s*(?:#|\$ |vllm serve |python3? -m vllm)")


def _matches(text: str) -> int:
    """How many events read ``text``, plus one when it is a whole catalogued message (the catalogue knows wordings the
    events do not, e.g. M7 0.11 'reserved 5.67GiB memory' without the space)."""
    return sum(1 for e in _events_for(text) if e[1].search(text)) + \
        (1 if _catalog_needle_in(text) and catalog.match(text, partial=False) else 0)


def _better_joining(first: bytes, other: bytes) -> bytes:
    """Of the two joinings of a wrapped pasted record (pieces glued as cut / with the dropped space put back), the one
    more events match; ``first`` (the reader's guess from the wrap widths) on a tie."""
    a, b = first.decode("utf-8", "replace"), other.decode("utf-8", "replace")
    return other if _matches(b) > _matches(a) else first


def _looks_like_trouble(line: Line) -> bool:
    """Memory-trouble wording on a line no event read (see :data:`TROUBLE_NEEDLES`). Shell commands and comments
    (``# vllm serve … --gpu-memory-utilization 0.75``) are a setting, not trouble."""
    msg = line.msg
    if _SHELL.match(msg):
        return False
    low = msg.lower()
    if _TROUBLE_STRONG.search(low) or ("OOM" in msg and _OOM_WORD.search(msg)):
        return True
    return line.level not in ("INFO", "DEBUG") and bool(_TROUBLE_WEAK.search(low)) and \
        bool(_TROUBLE_WEAK.search(_SETTING_WORDS.sub("", low)))


_SZ = r"([\d.]+) (GiB|MiB|KiB|bytes|GB|MB)"

# A '.*' between two literals is tempered ('(?:(?!FIRST).)*'): it never runs past the next start of the first literal,
# so a line repeating that literal is searched in linear time, not quadratic (a 1.1 MB line of 'CUDA out of
# memory. ' took 57 s); every line the plain '.*' matched still matches (from the last start before the second).
EVENTS: list[tuple[str, re.Pattern, Callable]] = [
    ("stats", re.compile(r"Avg prompt throughput: [\d.]+ tokens/s|"
                         r"Iteration\(\d+\):(?:(?!Iteration\(\d).)*?KV cache usage|"
                         r"Throughput: [\d.]+ tokens/s, Running: \d+ reqs"), _stats),
    ("v0_prefix_hit_rate", re.compile(r"Prefix cache hit rate: GPU: ([\d.]+)%"), _v0_prefix_rate),
    ("preemption", re.compile(r"is preempted by PreemptionMode\.(\w+) mode because there is not enough KV cache "
                              r"space"), _preempt),
    ("W1", re.compile(r"Loading model weights took ([\d.]+) Gi?B"), _weights),
    ("W2", re.compile(r"Model loading took ([\d.]+) GiB"), _weights),
    ("M1", re.compile(r"Memory profiling results:"), _m1),
    ("M2a", re.compile(r"total_gpu_memory \(([\d.]+)GiB\) x gpu_memory_utilization \(([\d.]+)\) = ([\d.]+)GiB"),
     _m2_budget),
    ("M2b", re.compile(r"model weights take (-?[\d.]+)GiB; non_torch_memory takes (-?[\d.]+)GiB; PyTorch activation "
                       r"peak memory takes (-?[\d.]+)GiB; the rest of the memory reserved for KV Cache is (-?[\d.]+)GiB"),
     _m2_split),
    ("M3", re.compile(r"Available KV cache memory: (-?[\d.]+) GiB"), _m3),
    ("M6", re.compile(r"Free memory on device (?:\S+ )?\((?P<free>[\d.]+)/(?P<total>[\d.]+) GiB\) on startup\. Desired "
                      r"GPU memory utilization is \((?P<util>[\d.]+), (?P<req>[\d.]+) GiB\)\. Actual usage"), _m6),
    ("E4", re.compile(r"Free memory on device (?:\S+ )?\((?P<free>[\d.]+)/(?P<total>[\d.]+) GiB\) on startup is less "
                      r"than (?:desired GPU memory utilization|the engine's budget after excluding external process's "
                      r"weights)(?: \((?P<util>[\d.]+), (?P<req>[\d.]+) GiB\))?"), _e4_budget),
    ("E4_external", re.compile(r"Externally held weights on device (?:\S+ )?\((?P<ext>[\d.]+)/(?P<total>[\d.]+) GiB\) "
                               r"exceed the desired GPU memory utilization(?: \((?P<util>[\d.]+), (?P<req>[\d.]+) "
                               r"GiB\))?"), _e4_budget),
    ("K1", re.compile(r"(?:#\s*)?(?<!\w)(?:GPU|cuda|\w+) blocks: (\d+)(?:, # CPU blocks: (\d+))?"), _blocks),
    ("K4", re.compile(r"KV cache size: ([\d,]+) tokens"), _k4),
    ("K5", re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x"), _k5),
    ("K10", re.compile(r"Setting attention block size to (\d+) tokens"), _k10),
    ("K11", re.compile(r"cache_config_info with initialization after num_gpu_blocks is: (\d+)"), _k11),
    ("K12", re.compile(r"Graph capturing finished in \d+ secs, took ([\d.]+) GiB"), _k12),
    ("M9", re.compile(r"Estimated CUDA graph memory: ([\d.]+) GiB total"), _m9),
    ("E1", re.compile(r"No available memory for the cache blocks"), _e1),
    ("E2a", re.compile(r"max seq len \((\d+)\) is larger than the maximum number of tokens that can be stored in "
                       r"KV cache \((\d+)\)"), _e2a),
    ("E2bcd", re.compile(r"To serve at least one request with the models?'s max seq len \((\d+)\), \((-?[\d.]+) "
                         r"Gi?B KV cache is needed, which is larger than the available KV cache memory \((-?[\d.]+) "
                         r"Gi?B\)"), _e2bcd),
    ("E3", re.compile(r"Cannot auto-fit max_model_len: not enough GPU memory"), _e3),
    ("mamba_blocks", re.compile(r"max_num_seqs \((\d+)\) exceeds available Mamba cache blocks \((\d+)\)"),
     _mamba_blocks),
    ("E6", re.compile(r"CUDA out of memory occurred when warming up (?:sampler|pooler)"), _e6),
    ("W4", re.compile(r"Failed to load model - not enough GPU memory"), _w4),
    ("traceback", re.compile(r"^\s*Traceback \(most recent call last\):"), _traceback),
    ("oom_others", re.compile(r"CUDA out of memory\.(?:(?!CUDA out of memory\.).)*?Process \d+ has [\d.]+ \w+ memory in use"),
     _oom_others),
    ("mm_profile_warning", re.compile(r"is too short to hold the multi-modal embeddings in the worst case \((\d+) "
                                      r"tokens in total"), _mm_warning),
    ("mm_profile_run", re.compile(r"Starting profile run for multi-modal models"), _mm_run),
    ("oom", re.compile(r"(?:CUDA out of memory\. )?Tried to allocate " + _SZ + r"\. GPU (?:\d+ )?has a total capac?i?ty of "
                       + _SZ + r" of which " + _SZ + r" is free"), _oom),
    ("oom_old", re.compile(r"CUDA out of memory\. Tried to allocate " + _SZ + r" \(GPU \d+; " + _SZ +
                           r" total capacity; " + _SZ + r" already allocated; " + _SZ + r" free"), _oom_old),
    ("version", re.compile(r"(?:vLLM API server version |Initializing an? (?:V[01] )?LLM engine \(v|"
                           r"█\s+version\s+)(\d+\.\d+[\w.+-]*)"), _version),
    ("args", re.compile(r"args: Namespace\(|with config: |non-default args: |max_parallel_loading_workers="), _args),
    ("max_len", re.compile(r"Using max model len (\d+)"), _max_len),
    ("chunked_prefill", re.compile(r"Chunked prefill is enabled with max_num_batched_tokens=(\d+)"), _chunked_prefill),
    ("K7", re.compile(r"Overriding num_gpu_blocks=(\d+) with num_gpu_blocks_override=(\d+)"), _k7),
    ("K9", re.compile(r"Auto-fit max_model_len: (?:reduced from (?P<from>\d+) to (?P<reduced>\d+)|full model context "
                      r"length (?P<full>\d+) fits) (?:to fit )?in available (?:KV cache|GPU) memory(?: \((?P<kv>[\d.]+) "
                      r"GiB)?"), _k9),
    ("K13", re.compile(r"Capturing (?:the model for CUDA graphs|cudagraphs for decoding|CUDA graphs? )"), _k13),
    ("M4", re.compile(r"Memory profiling takes [\d.]+ seconds\. Total non KV cache memory"), _m4),
    ("M5", re.compile(r"Initial free memory: ([\d.]+) GiB; Requested memory: ([\d.]+) \(util\), ([\d.]+) GiB"), _m5),
    ("M7", re.compile(r"Initial free memory ([\d.]+) GiB, reserved ([\d.]+) ?GiB memory for KV Cache"), _m7),
    ("M9_pool", re.compile(r"CUDA graph pool memory: (-?[\d.]+) GiB \(actual\), (-?[\d.]+) GiB \(estimated\)"),
     _m9_pool),
    ("M10", re.compile(r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s"), _m10),
    ("E0", re.compile(r"EngineCore failed to start|Engine core initialization failed"), _e0),
    ("E5", re.compile(r"Error in memory profiling\.|Free memory grew by [\d.]+ GiB during profiling"), _e5_any),
    ("failing_request", re.compile(r"Failing the request \S+ because there's not enough kv cache blocks"),
     _failing_request),
    ("prompt_too_long", re.compile(r"Input prompt \((\d+) tokens\)(?: \+ lookahead slots \(\d+\))? is too long and "
                                   r"exceeds"), _prompt_too_long),
    ("worker_method", _WORKER_METHOD, _worker_method),
    ("context_limit", re.compile(r"This model's maximum context length is (\d+) tokens"), _context_limit),
    ("stats_disabled", re.compile(r"api_server_count more than 1; disabling stats logging"), _stats_disabled),
    ("kv_blocks_exhausted", re.compile(r"Out of memory! No free blocks are available|No usable cache memory left"),
     _blocks_exhausted),
    ("long_context", re.compile(r"The model has a long context length \((\d+)\)\. This may ?cause ?OOM"), _long_context),
    ("oom_other_form", re.compile(r"OutOfMemoryError|CUDA out of memory|CUDA error: out of memory|"
                                  r"Tried to allocate [\d.]+ ?(?:GiB|MiB|KiB|bytes|GB|MB)\. GPU (?:\d+ )?has a total|"
                                  r"CUBLAS_STATUS_ALLOC_FAILED|cudaErrorMemoryAllocation|HIP out of memory"),
     _oom_other_form),
    ("cuda_error", re.compile(r"CUDA error: [A-Za-z][\w ,.()/-]*|CUBLAS_STATUS_(?!ALLOC_FAILED)[A-Z_]+|"
                              r"NCCL error[:\w ,.()/-]*|nccl(?:UnhandledCudaError|SystemError|InternalError|InvalidUsage|"
                              r"RemoteError)|cudaErrorStreamCaptureUnsupported"), _cuda_error),
    ("architecture", re.compile(r"Resolved architecture: (\w+)"), _architecture),
    ("encoder_budget", re.compile(r"Encoder cache will be initialized with a budget of \d+ tokens, and profiled with"),
     _encoder_budget),
    ("mm_profile_skip", re.compile(r"Skipping memory profiling for multimodal encoder"), _mm_skip),
    ("step_load", re.compile(r"Starting to load model (\S+?)(?:\.\.\.|$)|Loading (?:safetensors|pt|np_cache) "
                             r"checkpoint shards()|Multi-thread loading shards()"), _step_load),
    ("K12_nosize", re.compile(r"Graph capturing finished in \d+ secs\.?$"), _step_clear),
    # measurements an operator reported next to the log (incident write-ups), not vLLM lines
    ("measure_pool", re.compile(r"\bpool: ([\d,]+) tokens\b(?:.*?/ ([\d,]+) GPU blocks)?"), _measure_pool),
    ("measure_request", re.compile(r"\b((?i:one|two|three|four|single|a)|\d+) ~?([\d,.]+)(k?)-token requests?\b"),
     _measure_request),
    ("measure_usage", re.compile(r"KV cache usage:? ([\d.]+)% \(~?(\d+) of (\d+) blocks\)"), _measure_usage),
]


# The vLLM versions each event's line was seen in (reference §2, read versions; "all" = 0.4 - 0.33).
EVENT_VERSIONS: dict[str, str] = {
    "stats": "V0 0.1 'Throughput: X tokens/s, Running: ...' (core/scheduler.py), V0 0.4-0.10 ('Pending', 'Swapped', 'CPU KV cache usage'); V1 0.7 (no prefix), 0.8-0.33 'Engine NNN:' "
             "prefix, 'Preemptions' 0.16+, 'Deferred' 0.24+, '{DEV} KV cache usage' and 'Iteration(N):' 0.33",
    "v0_prefix_hit_rate": "V0 0.5-0.10",
    "preemption": "V0 0.4-0.10 (every 50th preemption)",
    "W1": "0.4-0.7 'GB' (V0 and V1), 0.8-0.9 'GiB' (worker/xpu_model_runner.py)",
    "W2": "0.8-0.11 ('GiB and S seconds'); 0.16+ W3 ('GiB memory and S seconds')",
    "M1": "0.6.x early releases",
    "M2a": "V0 0.6.6-0.10", "M2b": "V0 0.6.6-0.10",
    "M3": "V1 0.9+ ('{kv:.2f}' to 0.11, rounded from 0.16)",
    "M4": "V1 0.9+ (DEBUG); 0.33 wording 'total consumed'",
    "M5": "V1 0.11+ (DEBUG)",
    "M6": "V1 0.10+ (0.10 KV memory in bytes; DEBUG 0.11-0.24, INFO 0.33; 0.33 'consumed memory')",
    "M7": "0.10 ('KGiB' without the space, V0 and V1) and V1 0.11+ (with --kv-cache-memory)",
    "M9": "0.24+", "M9_pool": "0.24+",
    "M10": "0.6+ ('seconds'; 0.24+ 's')",
    "E4": "V1 0.9+ ('on device {device}' 0.16+; 0.33 'the engine's budget after excluding external process's "
          "weights')",
    "E4_external": "0.33 (v1/worker/utils.py)",
    "kv_blocks_exhausted": "V0 0.4-0.10 (core/block_manager_v1.py, core/evictor*.py)",
    "long_context": "0.6-0.8 (engine/arg_utils.py)",
    "oom_other_form": "all (CUDA runtime / cuBLAS texts from torch; a cut PyTorch OOM line)",
    "cuda_error": "all (torch c10 CUDA / cuBLAS / NCCL texts)",
    "architecture": "0.10+ (config/__init__.py 0.10, config/model.py 0.11+)",
    "encoder_budget": "V1 0.8+ (v1/worker/gpu_model_runner.py profile_run)",
    "mm_profile_skip": "V1 0.9+",
    "step_load": "'Starting to load model' 0.6+; checkpoint-shard progress bars 0.4+",
    "K12_nosize": "0.4-0.5",
    "K1": "V0 0.4-0.6 K1 '# GPU blocks', V0 0.7-0.10 K2 '# cuda blocks', V1 0.6.6-0.7 K3",
    "K4": "V1 0.8-0.24 (K4); 0.33 merged K6 '... tokens, Maximum concurrency ...'",
    "K5": "V0 0.6-0.10, V1 0.7-0.24 (K5); 0.33 merged K6",
    "K7": "V1 0.7+", "K9": "0.14+ ('in available GPU memory' 0.14-0.31, 'KV cache memory' 0.32+)", "K10": "0.10+", "K11": "0.9+",
    "K12": "0.6+ ('took G GiB'; 0.4-0.5 print no size)",
    "K13": "V0 0.4-0.10; V1 capture progress",
    "E0": "V1 0.8+", "E1": "all", "E2a": "V0 0.4-0.10, V1 0.6.6",
    "E2bcd": "V1 0.7 ('GB', \"models's\"), 0.8-0.16 (GiB), 0.24+ (\"model's\")",
    "E3": "0.16+", "E5": "all ('Initial used memory' V0 0.8; 'Free memory grew by' 0.33 WARNING)", "E6": "V1 0.8+ (pooler variant 0.10+)",
    "mamba_blocks": "2026 releases after vLLM PR 38270",
    "W4": "0.16+",
    "traceback": "all",
    "oom": "torch 2.1+ (vLLM 0.4+; 'capacty' in torch 2.1)",
    "oom_old": "torch <= 2.0 (vLLM <= 0.3)",
    "version": "'vLLM API server version' 0.4+, 'Initializing an LLM engine (vX)' V0, banner 0.33",
    "args": "all ('args: Namespace(' to 0.9, 'non-default args:' 0.10+, 'with config:' all)",
    "max_len": "V1 0.8+",
    "chunked_prefill": "0.6+ (config.py; config/scheduler.py 0.33, read in the 0.33 wheel)",
    "failing_request": "V0 0.4-0.10", "prompt_too_long": "V0 0.4-0.10",
    "stats_disabled": "0.10+",
    "worker_method": "V0 0.5-0.10 (multiproc workers)",
    "oom_others": "torch 2.1+ OOM text (vLLM 0.4+)",
    "mm_profile_warning": "0.9+ (profiling.py)",
    "mm_profile_run": "V0 0.6 encoder-decoder models (enc_dec_model_runner.py)",
    "context_limit": "all (OpenAI-compatible server request errors)",
    "measure_pool": "operator write-ups", "measure_request": "operator write-ups", "measure_usage": "operator write-ups",
}


_COMMON_WORDS = {"Engine", "Engines", "tokens", "tokens/s", "Error", "version", "seconds", "GiB", "INFO", "reqs"}


def _literal_needles(items, flags: int) -> list[str] | None:
    """Literal substrings one of which every match of the parsed pattern ``items`` contains (the longest
    top-level literal run, or one run per alternative of a group/alternation), or ``None`` when none is found."""
    try:
        from re import _constants as C, _parser as P  # Python 3.11+
    except ImportError:  # pragma: no cover - Python 3.10
        import sre_constants as C  # type: ignore
        import sre_parse as P  # type: ignore  # noqa: F401
    options: list[list[str]] = []
    run: list[str] = []
    ignore = bool(flags & re.IGNORECASE)

    def end_run():
        if len(run) >= 3 and not ignore:
            options.append(["".join(run)])
        run.clear()

    for op, av in items:
        if op is C.LITERAL and not ignore:
            run.append(chr(av))
            continue
        end_run()
        if op is C.BRANCH:
            alts = [_literal_needles(list(b), flags) for b in av[1]]
            if all(alts):
                options.append([n for alt in alts for n in alt])
        elif op is C.SUBPATTERN:
            add_flags = av[1]
            sub = _literal_needles(list(av[3]), flags | add_flags)
            if sub:
                options.append(sub)
    end_run()
    if not options:
        return None
    # the most specific option: longest shortest needle, words that every stats or request line holds
    # count as nothing (any substring of a needle is a needle too, so leading blanks are dropped)
    options = [[n.lstrip(" ") if len(n.lstrip(" ")) >= 3 else n for n in ns] for ns in options]

    def score(ns: list[str]) -> int:
        return 0 if any(n.strip(" :.,") in _COMMON_WORDS for n in ns) else min(len(n) for n in ns)

    return max(options, key=score)


def needles_of(pattern: re.Pattern) -> list[str]:
    """Literal needles of an event pattern: every string the pattern matches contains one of them.

    Raises:
        ValueError: the pattern has no literal run of 3+ characters outside case-insensitive parts
            (an event must name at least one literal, or the fast path could skip its lines).
    """
    try:
        from re import _parser as P  # Python 3.11+
    except ImportError:  # pragma: no cover
        import sre_parse as P  # type: ignore
    found = _literal_needles(list(P.parse(pattern.pattern, pattern.flags)), pattern.flags)
    if not found:
        raise ValueError(f"event pattern {pattern.pattern!r} has no literal needle")
    return found


# text the collector reads besides the events: traceback frames, exception lines, editorial notes
EXTRA_NEEDLES = [", line ", "Error", "Exception", "# ["]


def _compile_events() -> list[tuple[str, re.Pattern, Callable, tuple[str, ...]]]:
    return [(eid, pattern, handler, tuple(needles_of(pattern))) for eid, pattern, handler in EVENTS]


_EVENTS_COMPILED = _compile_events()


_NEEDLE_LIST = sorted({n for e in _EVENTS_COMPILED for n in e[3]})
_NEEDLE_EVENTS: list[list[int]] = [[i for i, e in enumerate(_EVENTS_COMPILED) if n in e[3]] for n in _NEEDLE_LIST]
_MATCHER = ahocorasick_rs.AhoCorasick(_NEEDLE_LIST)


def _events_for(msg: str) -> list[tuple]:
    """The events whose needles occur in ``msg``, in registry order (one automaton pass over the message)."""
    hits = _MATCHER.find_matches_as_indexes(msg, overlapping=True)
    if not hits:
        return []
    idx = {i for n, _s, _e in hits for i in _NEEDLE_EVENTS[n]}
    return [_EVENTS_COMPILED[i] for i in sorted(idx)]


def event_needles() -> list[str]:
    """Every needle of the EVENTS registry plus :data:`EXTRA_NEEDLES` and :data:`TROUBLE_NEEDLES` (the fast path's
    search set: a line with trouble wording is decoded even when no event names it, to be listed if none matches)."""
    return sorted({n for e in _EVENTS_COMPILED for n in e[3]} | set(EXTRA_NEEDLES) | set(TROUBLE_NEEDLES))


def _minimal_needles(needles: set[str]) -> list[str]:
    """``needles`` without those that contain another one (a line holding the longer holds the shorter: the
    prefilter finds the same lines with a smaller automaton)."""
    ordered = sorted(needles, key=lambda n: (len(n), n))
    ac = ahocorasick_rs.AhoCorasick(ordered)
    return sorted(n for n in ordered if all(ordered[i] == n for i, _s, _e in
                                            ac.find_matches_as_indexes(n, overlapping=True)))


# short words most catalogue needles hold ('... KV cache ...', '... blocks ...', 'CUDA graph'): searched instead of the
# ~1,300 needles they cover, the prefilter's DFA stays small and fast (measured on 64 MiB of
# benchmarks/log_throughput.py's log: 1,370 needles 226 MB/s, these + the ~550 uncovered needles 319 MB/s, the
# EVENTS needles alone 436 MB/s). Each is rare in request / access lines (a line that holds one is only decoded and
# matched, never misread).
CATALOG_ANCHORS = ["cache", "Cache", "CACHE", "block", "Block", "graph", "Graph", "CUDA", "cuda", "kv_", "KV", "mamba",
                   "Mamba", "profil", "Profil", "warmup", "Warmup", "warm up", "Warming", "encoder", "Encoder",
                   "preempt", "swap", "Swap", "alloc", "Alloc", "max_model_len", "max_num", "gpu_mem", "page", "Page",
                   "tensor", "Tensor", "buffer", "Buffer", "pool", "Pool", "GiB", "MiB", " GB", "bytes", "slot",
                   "layer", "Layer", "attention", "Attention", "backend", "sampler", "Sampler", "capture", "Capture",
                   "shape", "device", "Device", "dtype", "xpected"]


@functools.lru_cache(maxsize=1)
def prefilter_needles() -> list[str]:
    """The fast path's search set: :func:`event_needles`, and for the catalogue (:func:`kvdiag.catalog.needles`, so a
    catalogued message no event names is decoded too) :data:`CATALOG_ANCHORS` plus every catalogue needle no anchor or
    event needle is part of; minus needles that contain another. A line holding a catalogue needle holds one of
    these."""
    base = set(event_needles()) | set(CATALOG_ANCHORS)
    ac = ahocorasick_rs.AhoCorasick(sorted(base))
    rest = {n for n in map(_plain, catalog.needles()) if not ac.find_matches_as_indexes(n)}
    return _minimal_needles(base | rest)


_UNPLAIN = re.compile(r'[^\x20-\x7e]+|["\\]+')


def _plain(needle: str) -> str:
    """The longest run of ``needle`` that reads the same in raw bytes and in a Docker json-file ``log`` string (which
    may escape non-ASCII as ``\\uXXXX`` and always escapes quotes and backslashes): ``"🚧kv_cache is None, "`` →
    ``"kv_cache is None, "``; the needle itself when no run of 4+ characters is left."""
    if not _UNPLAIN.search(needle):
        return needle
    best = max(_UNPLAIN.split(needle), key=len)
    return best if len(best.strip()) >= 4 else needle


@functools.lru_cache(maxsize=1)
def _catalog_matcher() -> ahocorasick_rs.AhoCorasick:
    # an NFA: it only runs on the few decoded lines, and a DFA of the catalogue's needles would take ~23 MB
    return ahocorasick_rs.AhoCorasick(_minimal_needles(set(catalog.needles())),
                                      implementation=ahocorasick_rs.Implementation.ContiguousNFA)


def _catalog_needle_in(msg: str) -> bool:
    """Does ``msg`` hold a needle of the catalogue (a whole template's longest literal or a cut line's prefix)?
    Only then is :func:`kvdiag.catalog.match` worth calling."""
    return bool(_catalog_matcher().find_matches_as_indexes(msg[:catalog.MAX_MESSAGE]))


# events whose lines are no catalogued memory message (banners, args, identity, write-ups): never phrase-matched
_NO_PHRASES = {"version", "args", "architecture", "measure_pool", "measure_request", "measure_usage",
               "v0_prefix_hit_rate", "stats_disabled"}


@functools.lru_cache(maxsize=1)
def _anchor_matcher() -> ahocorasick_rs.AhoCorasick:
    return ahocorasick_rs.AhoCorasick(CATALOG_ANCHORS + ["memory", "Memory", "MEMORY", "OOM", "token", "max_seq",
                                                         "allocat", "preempt", "Preempt"])


def _anchor_in(msg: str) -> bool:
    """Does ``msg`` hold a word most catalogued memory messages hold (:data:`CATALOG_ANCHORS`, memory, token, ...)?
    Such a line, or one of five words or more, is worth a phrase match; a bare exception name (a cancelled request's
    'asyncio.exceptions.CancelledError') is not."""
    return bool(_anchor_matcher().find_matches_as_indexes(msg[:catalog.MAX_MESSAGE]))


_RANGE = re.compile(r"\((\d+\.\d+)(?:-(\d+\.\d+)|\+)\)")


def version_from_formats(formats: set[str]) -> str:
    """The vLLM version range every seen line format allows (``"0.8-0.9"``, ``"0.24+"``), or ``""`` when the
    formats name no range or contradict each other (e.g. logs of two servers)."""
    lo, hi = (0, 0), (99, 99)
    seen = False
    for f in formats:
        for m in _RANGE.finditer(f):
            seen = True
            a = tuple(int(x) for x in m.group(1).split("."))
            lo = max(lo, a)
            if m.group(2):
                hi = min(hi, tuple(int(x) for x in m.group(2).split(".")))
    if not seen or lo > hi:
        return ""
    fmt = "{}.{}".format
    return f"{fmt(*lo)}+" if hi == (99, 99) else (fmt(*lo) if lo == hi else f"{fmt(*lo)}-{fmt(*hi)}")

