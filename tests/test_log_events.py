"""The EVENTS registry: every event has the versions it was seen in, literal needles the fast path can search
for, and a test on a real line (copied from fixtures/logs/real) or a version-faithful one (written from the
template of shared/reference/vllm-observability.md §2 with the version's header and process tag)."""

from __future__ import annotations

import re

import pytest

from kvdiag.bundle import Bundle
from kvdiag.collect.logs import EVENT_VERSIONS, EVENTS, needles_of, read_logs

GIB = 2**30
MIB = 2**20

# event id → (log text, {signal: expected values in base units (list) or texts (list of str)})
LINES: dict[str, tuple[str, dict]] = {
    # real, 009 (0.5.0.post1)
    "stats": ("Processed prompts:   0%|  | 34/10000 [00:29<3:36:54,  1.31s/it, est. speed input: 407.31 toks/s, output: "
              "7561.83 toks/s]INFO 06-16 21:24:15 metrics.py:341] Avg prompt throughput: 2706.1 tokens/s, Avg "
              "generation throughput: 13395.4 tokens/s, Running: 34 reqs, Swapped: 100 reqs, Pending: 9832 reqs, GPU KV"
              " cache usage: 99.2%, CPU KV cache usage: 70.4%.",
              {"kv_cache_usage": [0.992], "cpu_cache_usage": [0.704], "num_requests_running": [34],
               "num_requests_swapped": [100], "num_requests_waiting": [9832], "prompt_throughput": [2706.1],
               "generation_throughput": [13395.4]}),
    "v0_prefix_hit_rate": ("INFO 08-20 10:00:05 metrics.py:351] Prefix cache hit rate: GPU: 31.27%, CPU: 0.00%",
                           {"prefix_cache_hit_rate_cumulative": [0.3127]}),
    # real, 009
    "preemption": ("WARNING 06-16 21:24:15 scheduler.py:1089] Sequence group 165 is preempted by PreemptionMode.SWAP "
                   "mode because there is not enough KV cache space. This can affect the end-to-end performance. "
                   "Increase gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. "
                   "total_num_cumulative_preemption=151",
                   {"num_preemptions": [150, 151], "preemption_warning": ["SWAP"]}),
    # real, 022 (0.4.0.post1)
    "W1": ("INFO 05-24 22:18:27 model_runner.py:104] Loading model weights took 15.2075 GB",
           {"weights_bytes": [15.2075 * GIB]}),
    "W2": ("(EngineCore_DP0 pid=270) INFO 02-27 10:00:00 [gpu_model_runner.py:4100] Model loading took 61.03 GiB "
           "memory and 12.480116 seconds", {"weights_bytes": [61.03 * GIB]}),
    # real, 001 (0.6.4)
    "M1": ("INFO 11-21 10:00:00 worker.py:232] Memory profiling results: total_gpu_memory=23.58GiB "
           "initial_memory_usage=15.34GiB peak_torch_memory=17.98GiB memory_usage_post_profile=15.35GiB "
           "non_torch_memory=0.35GiB kv_cache_size=2.89GiB gpu_memory_utilization=0.90",
           {"gpu_total_bytes": [23.58 * GIB], "peak_torch_memory_bytes": [17.98 * GIB],
            "kv_cache_memory_bytes": [2.89 * GIB], "non_torch_bytes": [0.35 * GIB], "gpu_memory_utilization": [0.9]}),
    # real, 004 (0.7.3)
    "M2a": ("INFO 02-26 09:54:05 worker.py:267] the current vLLM instance can use total_gpu_memory (8.00GiB) x "
            "gpu_memory_utilization (0.70) = 5.60GiB", {"gpu_total_bytes": [8 * GIB], "gpu_budget_bytes": [5.6 * GIB]}),
    "M2b": ("INFO 02-26 09:54:05 worker.py:267] model weights take 5.20GiB; non_torch_memory takes 0.03GiB; PyTorch "
            "activation peak memory takes 1.42GiB; the rest of the memory reserved for KV Cache is -1.05GiB.",
            {"weights_bytes": [5.2 * GIB], "kv_cache_memory_bytes": [-1.05 * GIB]}),
    "M3": ("(EngineCore pid=812) INFO 11-02 09:15:07 [gpu_worker.py:770] Available KV cache memory: 61.02 GiB",
           {"kv_cache_memory_bytes": [61.02 * GIB]}),
    "M4": ("(EngineCore_DP0 pid=270) DEBUG 10-04 12:00:00 [gpu_worker.py:290] Memory profiling takes 8.51 seconds. "
           "Total non KV cache memory: 63.10GiB; torch peak memory increase: 1.48GiB; non-torch forward increase "
           "memory: 0.21GiB; weights memory: 61.03GiB.",
           {"activation_peak_bytes": [1.48 * GIB], "non_torch_bytes": [0.21 * GIB], "weights_bytes": [61.03 * GIB]}),
    "M5": ("(EngineCore_DP0 pid=270) DEBUG 10-04 12:00:00 [gpu_worker.py:250] Initial free memory: 78.66 GiB; "
           "Requested memory: 0.95 (util), 75.22 GiB",
           {"gpu_free_at_startup_bytes": [78.66 * GIB], "gpu_budget_bytes": [75.22 * GIB]}),
    # real, 007
    "M6": ("(EngineCore pid=208) INFO 08-12 23:21:14 [v1/worker/gpu_worker.py:857] Free memory on device "
           "(78.66/79.18 GiB) on startup. Desired GPU memory utilization is (0.95, 75.22 GiB). Actual usage is 61.03 "
           "GiB for weight, 1.48 GiB for peak activation, 0.21 GiB for non-torch memory, and 1.86 GiB for CUDAGraph "
           "memory.", {"gpu_free_at_startup_bytes": [78.66 * GIB], "weights_bytes": [61.03 * GIB],
                       "cudagraph_bytes": [1.86 * GIB], "gpu_memory_utilization": [0.95]}),
    "M7": ("(EngineCore_DP0 pid=270) INFO 10-04 12:00:00 [gpu_worker.py:262] Initial free memory 78.66 GiB, reserved "
           "10.00 GiB memory for KV Cache as specified by kv_cache_memory_bytes config and skipped memory profiling. "
           "This does not respect the gpu_memory_utilization config.",
           {"kv_cache_memory_bytes": [10 * GIB], "gpu_free_at_startup_bytes": [78.66 * GIB]}),
    # real, 013
    "M9": ("(Worker_DP1_TP1_EP3 pid=3585771) INFO 08-19 05:56:57 [gpu_model_runner.py:6936] Estimated CUDA graph "
           "memory: 118.65 GiB total", {"cudagraph_estimate_bytes": [118.65 * GIB]}),
    "M9_pool": ("(EngineCore pid=272) INFO 06-30 10:00:00 [gpu_worker.py:600] CUDA graph pool memory: 1.86 GiB "
                "(actual), 1.75 GiB (estimated), difference: 0.11 GiB (6.3%).",
                {"cudagraph_bytes": [1.86 * GIB], "cudagraph_estimate_bytes": [1.75 * GIB]}),
    "M10": ("(EngineCore_DP0 pid=270) INFO 10-04 12:00:31 [core.py:214] init engine (profile, create kv cache, warmup "
            "model) took 31.20 seconds", {"startup_seconds": [31.2]}),
    "E4": ("(EngineCore_DP0 pid=270) ERROR 02-27 10:00:00 [core.py:708] ValueError: Free memory on device cuda:0 "
           "(14.50/79.18 GiB) on startup is less than desired GPU memory utilization (0.9, 71.26 GiB). Decrease GPU "
           "memory utilization or reduce GPU memory used by other processes.",
           {"free_memory_below_request": [1], "gpu_free_at_startup_bytes": [14.5 * GIB]}),
    # real, 004 (K2 of 0.7)
    "K1": ("INFO 02-26 09:54:05 executor_base.py:111] # cuda blocks: 0, # CPU blocks: 4681",
           {"num_gpu_blocks": [0], "num_cpu_blocks": [4681]}),
    "K4": ("(EngineCore_DP0 pid=270) INFO 10-04 12:00:01 [kv_cache_utils.py:1087] GPU KV cache size: 38,752 tokens",
           {"kv_cache_size_tokens": [38752]}),
    "K5": ("(EngineCore_DP0 pid=270) INFO 10-04 12:00:01 [kv_cache_utils.py:1091] Maximum concurrency for 40,000 "
           "tokens per request: 0.97x", {"max_model_len": [40000], "max_concurrency": [0.97]}),
    "K7": ("(EngineCore_DP0 pid=270) INFO 10-04 12:00:01 [kv_cache_utils.py:700] Overriding num_gpu_blocks=27776 with "
           "num_gpu_blocks_override=512", {"num_gpu_blocks": [512]}),
    "K9": ("(EngineCore pid=272) INFO 02-27 10:00:01 [kv_cache_utils.py:900] Auto-fit max_model_len: reduced from "
           "131072 to 37376 to fit in available KV cache memory (1.71 GiB GPU)",
           {"max_model_len": [37376], "kv_cache_memory_bytes": [1.71 * GIB], "max_model_len_autofit": [37376]}),
    # real, 027
    "K10": ("INFO [interface.py:931] Setting attention block size to 7808 tokens to ensure", {"block_size": [7808]}),
    "K11": ("(APIServer pid=1) INFO 10-04 12:00:40 [loggers.py:220] Engine 000: vllm cache_config_info with "
            "initialization after num_gpu_blocks is: 2422", {"num_gpu_blocks": [2422]}),
    "K12": ("INFO 12-06 11:40:12 model_runner.py:1430] Graph capturing finished in 14 secs, took 0.85 GiB",
            {"cudagraph_bytes": [0.85 * GIB]}),
    "K13": ("INFO 12-06 11:39:58 model_runner.py:1300] Capturing cudagraphs for decoding. This may lead to unexpected "
            "consequences if the model is not static.\n"
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of "
            "23.69 GiB of which 3.06 MiB is free.", {"cuda_oom": ["cudagraph"]}),
    "E0": ("(EngineCore_DP0 pid=270) ERROR 10-04 12:00:05 [core.py:708] EngineCore failed to start.\n"
           "(APIServer pid=1) RuntimeError: Engine core initialization failed. See root cause above. Failed core "
           "proc(s): {'EngineCore_DP0': 1}", {"engine_start_failed": [1, 1]}),
    "E1": ("ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
           "initializing the engine.", {"kv_capacity_error": ["no_kv_memory"]}),
    # real, 001
    "E2a": ("The model's max seq len (29000) is larger than the maximum number of tokens that can be stored in KV cache "
            "(23648). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the "
            "engine.", {"max_model_len": [29000], "kv_cache_size_tokens": [23648]}),
    "E2bcd": ("(EngineCore pid=272) ERROR 06-30 10:00:05 [core.py:900] ValueError: To serve at least one request with "
              "the model's max seq len (131072), (16 GiB KV cache is needed, which is larger than the available KV "
              "cache memory (1.71 GiB). Based on the available memory, the estimated maximum model length is 13952.",
              {"max_model_len": [131072], "kv_cache_memory_bytes": [1.71 * GIB]}),
    "E3": ("ValueError: Cannot auto-fit max_model_len: not enough GPU memory available to serve even a single token. "
           "Try increasing `gpu_memory_utilization`.", {"kv_capacity_error": ["no_kv_memory"]}),
    "E5": ("AssertionError: Error in memory profiling. Initial free memory 31.2 GiB, current free memory 35.9 GiB. "
           "This happens when other processes sharing the same container release GPU memory while vLLM is profiling "
           "during initialization.", {"memory_profiling_error": [1]}),
    # real, 032
    "mamba_blocks": ("ValueError: max_num_seqs (1024) exceeds available Mamba cache blocks (856). Each decode sequence "
                     "requires one Mamba cache block, so CUDA graph capture cannot proceed.",
                     {"max_num_seqs": [1024], "mamba_cache_blocks": [856]}),
    "E6": ("(EngineCore_DP0 pid=8884) RuntimeError: CUDA out of memory occurred when warming up sampler with 1024 dummy "
           "requests. Please try lowering `max_num_seqs` or `gpu_memory_utilization` when initializing the engine.",
           {"sampler_warmup_oom": [1]}),
    "W4": ("(EngineCore pid=272) ERROR 02-27 10:00:00 [gpu_model_runner.py:4000] Failed to load model - not enough GPU "
           "memory. Try lowering --gpu-memory-utilization to free memory for weights, increasing "
           "--tensor-parallel-size, or using --quantization.", {"weights_load_failed": [1]}),
    "traceback": ("Traceback (most recent call last):", {"python_traceback": [1]}),
    # real, 005 (two of the five other processes shown)
    "oom_others": ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 418.00 MiB. GPU 0 has a total "
                   "capacity of 23.69 GiB of which 193.25 MiB is free. Process 3016 has 14.90 GiB memory in use. "
                   "Process 6172 has 4.00 GiB memory in use. Including non-PyTorch memory, this process has 4.61 GiB "
                   "memory in use.", {"oom_other_processes_bytes": [18.9 * GIB], "oom_other_processes_count": [2]}),
    # real, 021
    "oom": ("[rank0]:   File \"/x/vllm/model_executor/layers/vocab_parallel_embedding.py\", line 28, in create_weights\n"
            "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1002.00 MiB. GPU 0 has a total "
            "capacity of 15.59 GiB of which 940.12 MiB is free. Including non-PyTorch memory, this process has 14.30 GiB"
            " memory in use. Of the allocated memory 14.01 GiB is allocated by PyTorch, and 15.49 MiB is reserved",
            {"cuda_oom": [1002 * MIB], "oom_free_bytes": [940.12 * MIB], "exception": [1]}),
    "oom_old": ("RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 23.69 GiB total capacity; 22.80 "
                "GiB already allocated; 3.06 MiB free; 22.89 GiB reserved in total by PyTorch)",
                {"cuda_oom": [20 * MIB], "oom_torch_allocated_bytes": [22.8 * GIB]}),
    # real, 022 (V0 0.4)
    "version": ("INFO 05-24 22:18:09 llm_engine.py:74] Initializing an LLM engine (v0.4.0.post1) with config: "
                "model='gradientai/Llama-3-8B-Instruct-Gradient-1048k', max_seq_len=1048576, tensor_parallel_size=1",
                {"vllm_version": ["0.4.0.post1"], "max_model_len": [1048576], "tensor_parallel_size": [1]}),
    # real, 0.33 series
    "args": ("(APIServer pid=12) INFO 05-11 09:30:00 [startup.py:96] non-default args: {'model_tag': "
             "'Qwen/Qwen2.5-7B-Instruct', 'disable_uvicorn_access_log': True, 'model': 'Qwen/Qwen2.5-7B-Instruct', "
             "'max_model_len': 32768}", {"max_model_len": [32768]}),
    "chunked_prefill": ("(APIServer pid=1671) INFO 09-04 01:02:38 [scheduler.py:222] Chunked prefill is enabled with "
                        "max_num_batched_tokens=2048.", {"max_num_batched_tokens": [2048]}),
    "max_len": ("(APIServer pid=12) INFO 05-11 09:30:01 [model.py:2170] Using max model len 32768",
                {"max_model_len": [32768]}),
    "failing_request": ("WARNING 06-16 21:30:00 scheduler.py:1200] Failing the request 17 because there's not enough "
                        "kv cache blocks to run the entire sequence.", {"request_rejected": ["not_enough_kv_blocks"]}),
    "prompt_too_long": ("WARNING 06-16 21:30:00 scheduler.py:900] Input prompt (200000 tokens) + lookahead slots (0) is "
                        "too long and exceeds the capacity of block_manager",
                        {"request_rejected": [200000], }),
    "stats_disabled": ("(APIServer pid=1) WARNING 10-04 12:00:00 [async_llm.py:150] AsyncLLM created with "
                       "api_server_count more than 1; disabling stats logging to avoid incomplete stats.",
                       {"stats_logging_disabled": [1]}),
    # real, 011
    "context_limit": ("ValueError: 'max_tokens' or 'max_completion_tokens' is too large: 14000. This model's maximum "
                      "context length is 40000 tokens and your request has 36378 input tokens (14000 > 40000 - 36378).",
                      {"max_model_len": [40000]}),
    # real, 018
    "worker_method": ("(VllmWorkerProcess pid=67) ERROR 11-05 03:21:52 multiproc_worker_utils.py:233] Exception in "
                      "worker VllmWorkerProcess while processing method determine_num_available_blocks: CUDA out of "
                      "memory. Tried to allocate 1.95 GiB. GPU 1 has a total capacity of 22.09 GiB of which 758.44 MiB "
                      "is free.", {"cuda_oom": ["profile"]}),
    # real, 014 / 018
    "mm_profile_warning": ("WARNING 08-04 16:54:49 [profiling.py:247] The sequence length used for profiling "
                           "(max_num_batched_tokens / max_num_seqs = 8192) is too short to hold the multi-modal "
                           "embeddings in the worst case (180224 tokens in total, out of which {'image': 163840, "
                           "'video': 16384} are reserved for multi-modal embeddings).",
                           {"mm_profile_warning": [180224]}),
    "mm_profile_run": ("INFO 11-05 03:21:41 enc_dec_model_runner.py:297] Starting profile run for multi-modal models.",
                       {"mm_profile_run": [1]}),
    # --- issue 12: written from vLLM's source (file @ version) with that version's header and process tag ---
    # v1/worker/utils.py @ 0.33.0 (ValueError, the 0.33 variant of E4)
    "E4_external": ("(EngineCore pid=812) ERROR 11-02 09:15:07 [core.py:1100] ValueError: Externally held weights on "
                    "device cuda:0 (20.5/79.19 GiB) exceed the desired GPU memory utilization (0.9, 71.27 GiB). "
                    "Increase GPU memory utilization or reduce GPU memory used by other processes.",
                    {"free_memory_below_request": ["external_weights"], "gpu_total_bytes": [79.19 * GIB],
                     "gpu_budget_bytes": [71.27 * GIB], "gpu_memory_utilization": [0.9]}),
    # core/block_manager_v1.py @ 0.4.3 (ValueError)
    "kv_blocks_exhausted": ("ValueError: Out of memory! No free blocks are available.",
                            {"kv_blocks_exhausted": ["Out of memory! No free blocks are available"]}),
    # engine/arg_utils.py @ 0.8.5 (WARNING; 'causeOOM' as printed there)
    "long_context": ("WARNING 04-28 04:07:51 [arg_utils.py:1536] The model has a long context length (131072). This may "
                     "causeOOM during the initial memory profiling phase, or result in low performance due to small KV "
                     "cache size. Consider setting --max-model-len to a smaller value.", {"max_model_len": [131072]}),
    # torch c10 CUDA check, wrapped by v1/executor/multiproc_executor.py (0.10+) 'Worker failed with error'
    "oom_other_form": ("(EngineCore_DP0 pid=270) ERROR 10-04 12:00:00 [core.py:700] RuntimeError: Worker failed with "
                       "error 'CUDA error: out of memory", {"cuda_oom": ["unknown"]}),
    "cuda_error": ("(EngineCore_DP0 pid=270) ERROR 10-04 12:00:00 [core.py:700] RuntimeError: CUDA error: an illegal "
                   "memory access was encountered", {"cuda_error": ["CUDA error: an illegal memory access was encountered"],
                                                     "cuda_oom": []}),
    # config/model.py @ 0.33.0 / config/__init__.py @ 0.10.2 (INFO)
    "architecture": ("(APIServer pid=1) INFO 10-04 12:00:00 [model.py:744] Resolved architecture: "
                     "Qwen2VLForConditionalGeneration",
                     {"model_architecture": ["Qwen2VLForConditionalGeneration"], "model_multimodal": [1.0]}),
    # v1/worker/gpu_model_runner.py @ 0.10.2 profile_run (INFO)
    "encoder_budget": ("(EngineCore_DP0 pid=270) INFO 10-04 12:00:00 [gpu_model_runner.py:3000] Encoder cache will be "
                       "initialized with a budget of 16384 tokens, and profiled with 1 image items of the maximum "
                       "feature size.", {"model_multimodal": [1.0]}),
    "mm_profile_skip": ("(EngineCore_DP0 pid=270) INFO 10-04 12:00:00 [gpu_model_runner.py:3010] Skipping memory "
                        "profiling for multimodal encoder and encoder cache.", {"model_multimodal": []}),
    # v1/worker/gpu_model_runner.py @ 0.10.2 load_model (INFO)
    "step_load": ("(EngineCore_DP0 pid=270) INFO 10-04 12:00:00 [gpu_model_runner.py:2338] Starting to load model "
                  "Qwen/Qwen2.5-VL-7B-Instruct...", {"model_name": ["Qwen/Qwen2.5-VL-7B-Instruct"],
                                                      "model_multimodal": [1.0]}),
    # worker/model_runner.py @ 0.4.3 (K12 without a size)
    "K12_nosize": ("INFO 06-10 10:00:00 model_runner.py:1000] Graph capturing finished in 12 secs.", {"cudagraph_bytes": []}),
    # operator measurements (real, 017 write-up)
    "measure_pool": ("#   logged pool: 1,096,153 tokens (1.22x at 900k) / 665 GPU blocks",
                     {"kv_cache_size_tokens": [1096153], "num_gpu_blocks": [665]}),
    "measure_request": ("#   one ~36k-token request: GPU KV cache usage 44.6% (~297 of 665 blocks)",
                        {"num_requests_running": [1], "context_tokens": [36000]}),
    "measure_usage": ("#   one ~36k-token request: GPU KV cache usage 44.6% (~297 of 665 blocks)",
                      {"kv_cache_usage": [0.446], "num_blocks_used": [297]}),
}


def parse(tmp_path, text: str, year: int = 2025) -> Bundle:
    p = tmp_path / "vllm.log"
    p.write_text(text + "\n")
    b = Bundle()
    read_logs(b, [str(p)], year=year, progress=False)
    return b


def test_every_event_has_versions_needles_and_a_line():
    ids = [e[0] for e in EVENTS]
    assert len(ids) == len(set(ids)), "event ids are unique"
    assert sorted(set(ids) - set(EVENT_VERSIONS)) == [], "every event states the versions it was seen in"
    assert sorted(set(ids) - set(LINES)) == [], "every event has a test line below"
    for eid, pattern, _handler in EVENTS:
        assert needles_of(pattern), eid


@pytest.mark.parametrize("eid", sorted(LINES))
def test_event_on_its_line(tmp_path, eid):
    pattern = next(p for i, p, _h in EVENTS if i == eid)
    text, expect = LINES[eid]
    assert pattern.search(text), f"{eid} does not match its line"
    # every match contains one of the needles the fast path searches for
    assert any(n in pattern.search(text).group(0) or n in text for n in needles_of(pattern))
    b = parse(tmp_path, text)
    for signal, want in expect.items():
        rows = b.signal(signal)
        if want and isinstance(want[0], str):
            assert rows["text"].tolist() == want, (signal, rows["text"].tolist())
        else:
            assert rows["value"].tolist() == pytest.approx(want, rel=1e-6), (signal, rows["value"].tolist())


@pytest.mark.parametrize("eid", sorted(LINES))
def test_needles_hold_for_every_match(eid):
    """A needle must be inside the matched text itself, or the prefilter could drop a line the event matches."""
    pattern = next(p for i, p, _h in EVENTS if i == eid)
    for line in LINES[eid][0].splitlines():
        m = pattern.search(line)
        if m:
            assert any(n in m.group(0) for n in needles_of(pattern)), (eid, needles_of(pattern))


def test_needles_of_alternatives_and_scoped_case():
    assert sorted(needles_of(re.compile(r"EngineCore failed to start|Engine core initialization failed"))) == \
        ["Core failed to start", "core initialization failed"]
    assert needles_of(re.compile(r"\b((?i:one|two)|\d+) ~?(\d+)-token requests?")) == ["-token request"]
    with pytest.raises(ValueError):
        needles_of(re.compile(r"(?i)anything"))
