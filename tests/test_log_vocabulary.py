"""Issue 12: vLLM's memory vocabulary in every version and every paste form, read by the log collector.

Lines are written from vLLM's own source (the wheel's ``.py`` member named in each case, read with ``zipfile``) with
that version's header (§2.1 of the reference: ``file.py:N]`` to 0.7, ``[file.py:N]`` from 0.8) and process tag, or
copied from the bundled real incidents (fixtures/incidents, fixtures/logs/real)."""

from __future__ import annotations

import textwrap

import pytest

from conftest import FIXTURES, incident_cases
from kvdiag.analyze import analyze
from kvdiag.bundle import Bundle
from kvdiag.collect.logs import UNSEEN_LISTED, is_multimodal_architecture, read_logs

GIB = 2**30
MIB = 2**20


def parse(tmp_path, text: str, name: str = "vllm.log") -> tuple[Bundle, list[str]]:
    p = tmp_path / name
    p.write_text(text if text.endswith("\n") else text + "\n")
    b = Bundle()
    infos = read_logs(b, [str(p)], year=2025, progress=False)
    return b, [n for i in infos for n in i.notes]


def verdict(tmp_path, text: str):
    p = tmp_path / "v.log"
    p.write_text(text if text.endswith("\n") else text + "\n")
    report = analyze(logs=[str(p)], year=2025, progress=False)
    return report.verdict, report


def values(b: Bundle, signal: str) -> list:
    return b.signal(signal)["value"].tolist()


def texts(b: Bundle, signal: str) -> list:
    return b.signal(signal)["text"].tolist()


# ------------------------------------------------------------------------------------------------------------------
# 1. start-up checks and their numbers, every wording (source file @ version)
STARTUP = {
    # v1/core/kv_cache_utils.py @ 0.7.3: "GB", "models's"
    "E2_0.7": ("ERROR 02-26 09:54:05 core.py:210] ValueError: To serve at least one request with the models's max seq "
               "len (32768), (4.00 GB KV cache is needed, which is larger than the available KV cache memory (2.50 GB)."
               " Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.",
               {"kv_capacity_error": ["max_model_len_exceeds_pool"], "max_model_len": [32768],
                "kv_cache_memory_bytes": [2.5 * GIB]}),
    # v1/core/kv_cache_utils.py @ 0.8.5: the broken estimate fragment and two spaces
    "E2_0.8": ("(EngineCore_0 pid=81) ERROR 04-28 04:07:51 [core.py:387] ValueError: To serve at least one request with "
               "the models's max seq len (131072), (16.00 GiB KV cache is needed, which is larger than the available KV "
               "cache memory (9.46 GiB). Based on the available memory,  Try increasing `gpu_memory_utilization` or "
               "decreasing `max_model_len` when initializing the engine.",
               {"kv_capacity_error": ["max_model_len_exceeds_pool"], "max_model_len": [131072],
                "kv_cache_memory_bytes": [9.46 * GIB]}),
    # v1/core/kv_cache_utils.py @ 0.16.0: rounded without fixed width, docs link
    "E2_0.16": ("(EngineCore_DP0 pid=270) ERROR 02-27 10:00:00 [core.py:900] ValueError: To serve at least one request "
                "with the models's max seq len (262144), (32 GiB KV cache is needed, which is larger than the available "
                "KV cache memory (12.5 GiB). Based on the available memory, the estimated maximum model length is 102400."
                " Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine. See "
                "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.",
                {"kv_capacity_error": ["max_model_len_exceeds_pool"], "max_model_len": [262144],
                 "kv_cache_memory_bytes": [12.5 * GIB]}),
    # v1/core/kv_cache_planning.py @ 0.33.0: "model's", CPU-backend remark
    "E2_0.33": ("(EngineCore pid=812) ERROR 11-02 09:15:07 [core.py:1100] ValueError: To serve at least one request with "
                "the model's max seq len (131072), (16 GiB KV cache is needed, which is larger than the available KV "
                "cache memory (6.02 GiB). Based on the available memory, the estimated maximum model length is 49296. "
                "Try increasing `gpu_memory_utilization` (which also controls CPU memory on the CPU backend) or "
                "decreasing `max_model_len` when initializing the engine.",
                {"kv_capacity_error": ["max_model_len_exceeds_pool"], "max_model_len": [131072],
                 "kv_cache_memory_bytes": [6.02 * GIB]}),
    # worker/worker.py @ 0.4.3 (V0)
    "E2a_0.4": ("ERROR 06-10 10:00:00 worker.py:350] ValueError: The model's max seq len (32768) is larger than the "
                "maximum number of tokens that can be stored in KV cache (23648). Try increasing "
                "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.",
                {"kv_capacity_error": ["max_model_len_exceeds_pool"], "kv_cache_size_tokens": [23648]}),
    # v1/core/kv_cache_planning.py @ 0.33.0
    "E1_0.33": ("(EngineCore pid=812) ERROR 11-02 09:15:07 [core.py:1100] ValueError: No available memory for the cache "
                "blocks. Try increasing `gpu_memory_utilization` when initializing the engine (this flag also controls "
                "CPU memory reservation on the CPU backend, despite its name). See "
                "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.",
                {"kv_capacity_error": ["no_kv_memory"]}),
    # v1/core/kv_cache_utils.py @ 0.16.0
    "E3_0.16": ("(EngineCore_DP0 pid=270) ERROR 02-27 10:00:00 [core.py:900] ValueError: Cannot auto-fit "
                "max_model_len: not enough GPU memory available to serve even a single token. Try increasing "
                "`gpu_memory_utilization`.", {"kv_capacity_error": ["no_kv_memory"]}),
    # v1/worker/gpu_worker.py @ 0.11.0 (ValueError)
    "E4_0.11": ("(EngineCore_DP0 pid=270) ERROR 10-04 12:00:00 [core.py:708] ValueError: Free memory on device "
                "(30.12/79.19 GiB) on startup is less than desired GPU memory utilization (0.9, 71.27 GiB). Decrease GPU "
                "memory utilization or reduce GPU memory used by other processes.",
                {"free_memory_below_request": ["free_below_budget"], "gpu_free_at_startup_bytes": [30.12 * GIB],
                 "gpu_budget_bytes": [71.27 * GIB], "gpu_memory_utilization": [0.9]}),
    # v1/worker/utils.py @ 0.16.0 (device named)
    "E4_0.16": ("(EngineCore_DP0 pid=270) ERROR 02-27 10:00:00 [core.py:900] ValueError: Free memory on device cuda:0 "
                "(30.12/79.19 GiB) on startup is less than desired GPU memory utilization (0.9, 71.27 GiB). Decrease "
                "GPU memory utilization or reduce GPU memory used by other processes.",
                {"free_memory_below_request": ["free_below_budget"], "gpu_total_bytes": [79.19 * GIB]}),
    # v1/worker/utils.py @ 0.33.0 (the budget after external weights)
    "E4_0.33": ("(EngineCore pid=812) ERROR 11-02 09:15:07 [core.py:1100] ValueError: Free memory on device cuda:0 "
                "(30.12/79.19 GiB) on startup is less than the engine's budget after excluding external process's "
                "weights (0.9, 50.77 GiB). Decrease GPU memory utilization or reduce GPU memory used by other "
                "processes.", {"free_memory_below_request": ["free_below_budget"],
                                "gpu_free_at_startup_bytes": [30.12 * GIB], "gpu_budget_bytes": [50.77 * GIB]}),
    # worker/worker.py @ 0.8.5 (V0, used memory)
    "E5_V0_0.8": ("ERROR 04-28 04:07:51 [engine.py:160] AssertionError: Error in memory profiling. Initial used memory "
                  "1234567, currently used memory 7654321. This happens when the GPU memory was not properly cleaned "
                  "up before initializing the vLLM instance.", {"memory_profiling_error": ["assert"]}),
    # worker/worker.py @ 0.6.6 (no numbers)
    "E5_V0_0.6": ("ERROR 12-06 11:39:36 engine.py:366] AssertionError: Error in memory profiling. This happens when the "
                  "GPU memory was not properly cleaned up before initializing the vLLM instance.",
                  {"memory_profiling_error": ["assert"]}),
    # v1/worker/gpu_worker.py @ 0.11.0 (GiB)
    "E5_V1_0.11": ("(EngineCore_DP0 pid=270) ERROR 10-04 12:00:00 [core.py:708] AssertionError: Error in memory "
                   "profiling. Initial free memory 70.1 GiB, current free memory 72.3 GiB. This happens when other "
                   "processes sharing the same container release GPU memory while vLLM is profiling during "
                   "initialization.", {"memory_profiling_error": ["assert"]}),
    # v1/worker/gpu_worker.py @ 0.33.0 (WARNING, handled by vLLM)
    "E5_grew_0.33": ("(EngineCore pid=812) WARNING 11-02 09:15:07 [gpu_worker.py:400] Free memory grew by 2.5 GiB during "
                     "profiling (initial 70.1 GiB, current 72.6 GiB). Sizing the KV cache from the 3.1 GiB torch "
                     "reserved instead of the profiling difference.", {"memory_profiling_error": ["free_memory_grew"]}),
    # v1/core/kv_cache_utils.py @ 0.16.0 and 0.24.0 (info_once)
    "K9_reduced_0.16": ("(EngineCore_DP0 pid=270) INFO 02-27 10:00:00 [kv_cache_utils.py:1300] Auto-fit max_model_len: "
                        "reduced from 262144 to 102400 to fit in available GPU memory (12.5 GiB available for KV cache)",
                        {"max_model_len": [102400], "kv_cache_memory_bytes": [12.5 * GIB],
                         "max_model_len_autofit": ["reduced from 262144"]}),
    "K9_full_0.24": ("(EngineCore pid=812) INFO 03-01 10:00:00 [kv_cache_utils.py:1310] Auto-fit max_model_len: full "
                     "model context length 32768 fits in available GPU memory", {"max_model_len": [32768]}),
    # core/evictor_v2.py @ 0.5.5 (ValueError)
    "evictor_0.5": ("ValueError: No usable cache memory left", {"kv_blocks_exhausted": ["No usable cache memory left"]}),
    # core/scheduler.py, early 0.1 releases: 'Throughput' stats line without averages
    "stats_0.1": ("INFO 07-01 10:00:00 scheduler.py:300] Throughput: 512.3 tokens/s, Running: 12 reqs, Swapped: 3 reqs, "
                  "Pending: 40 reqs, GPU KV cache usage: 98.4%, CPU KV cache usage: 12.0%",
                  {"kv_cache_usage": [0.984], "cpu_cache_usage": [0.12], "num_requests_waiting": [40],
                   "num_requests_swapped": [3], "num_requests_running": [12]}),
    # engine/metrics.py @ 0.4.3
    "stats_0.4": ("INFO 06-10 10:00:00 metrics.py:341] Avg prompt throughput: 1200.0 tokens/s, Avg generation "
                  "throughput: 300.5 tokens/s, Running: 34 reqs, Swapped: 0 reqs, Pending: 9 reqs, GPU KV cache usage: "
                  "99.2%, CPU KV cache usage: 0.0%.", {"kv_cache_usage": [0.992], "num_requests_waiting": [9]}),
}


def _check(b: Bundle, expect: dict) -> None:
    for signal, want in expect.items():
        if want and isinstance(want[0], str):
            assert texts(b, signal) == want, (signal, texts(b, signal))
        else:
            assert values(b, signal) == pytest.approx(want, rel=1e-6), (signal, values(b, signal))


@pytest.mark.parametrize("case", sorted(STARTUP))
def test_startup_check_every_version(tmp_path, case):
    text, expect = STARTUP[case]
    b, notes = parse(tmp_path, text)
    _check(b, expect)
    assert not [n for n in notes if n.startswith("seen, not understood")], notes


# ------------------------------------------------------------------------------------------------------------------
# 2. paste forms: every start-up line above, wrapped at 80 and 120 columns (at word boundaries and hard), quoted at
# any depth, indented, and with its prefix lost, gives the same event and numbers
def _forms(text: str) -> dict[str, str]:
    head = text.split("] ", 1)[1] if "] " in text[:120] else text
    out = {
        "quoted": "> " + text, "quoted_deep": ">> > " + text, "indented": "    " + text, "no_prefix": head,
    }
    for w in (80, 120):
        out[f"wrap{w}"] = "\n".join(textwrap.wrap(text, w))
        out[f"hard{w}"] = "\n".join(text[i:i + w] for i in range(0, len(text), w))
        out[f"quoted_wrap{w}"] = "\n".join("> " + ln for ln in textwrap.wrap(text, w))
    return out


FILLER = "INFO 06-10 10:00:00 api_server.py:100] Started server process\n"


@pytest.mark.parametrize("form", ["quoted", "quoted_deep", "indented", "no_prefix", "wrap80", "wrap120", "hard80",
                                  "hard120", "quoted_wrap80", "quoted_wrap120"])
@pytest.mark.parametrize("case", sorted(STARTUP))
def test_paste_forms(tmp_path, case, form):
    text, expect = STARTUP[case]
    pasted = _forms(text)[form]
    # wrapped pastes come with other wrapped records around them (detection looks at the whole excerpt)
    b, notes = parse(tmp_path, FILLER + pasted + "\n" + FILLER)
    _check(b, expect)


def test_hard_wrap_splitting_a_needle(tmp_path):
    """A hard wrap that cuts the needle itself ('No available memory for the ca' / 'che blocks') still reads."""
    text = ("(EngineCore_DP0 pid=270) ERROR 10-04 12:00:00 [core.py:708] ValueError: No available memory for the ca"
            "che blocks. Try increasing `gpu_memory_utilization` when initializing the engine.")
    cut = text.index("che blocks")
    width = cut
    pasted = "\n".join(text[i:i + width] for i in range(0, len(text), width))
    assert "cache blocks" not in pasted
    b, _ = parse(tmp_path, FILLER * 2 + pasted + "\n" + "INFO 10-04 12:00:01 [core.py:1] " + "x" * (width - 40))
    assert texts(b, "kv_capacity_error") == ["no_kv_memory"]


# ------------------------------------------------------------------------------------------------------------------
# 3. CUDA runtime OOMs, cut exception lines, phases from frames and markers
V1_PROFILE_FRAMES = """\
(EngineCore_DP0 pid=270) ERROR 10-04 12:00:00 [core.py:708] EngineCore failed to start.
(EngineCore_DP0 pid=270) ERROR 10-04 12:00:00 [core.py:708] Traceback (most recent call last):
(EngineCore_DP0 pid=270) ERROR 10-04 12:00:00 [core.py:708]   File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", line 699, in run_engine_core
(EngineCore_DP0 pid=270) ERROR 10-04 12:00:00 [core.py:708]   File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", line 150, in _initialize_kv_caches
(EngineCore_DP0 pid=270) ERROR 10-04 12:00:00 [core.py:708]   File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_worker.py", line 263, in determine_available_memory
(EngineCore_DP0 pid=270) ERROR 10-04 12:00:00 [core.py:708]   File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_model_runner.py", line 3051, in profile_run
(EngineCore_DP0 pid=270) ERROR 10-04 12:00:00 [core.py:708]   File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_model_runner.py", line 2688, in _dummy_run
"""
WEIGHTS = ("(EngineCore_DP0 pid=270) INFO 10-04 11:59:00 [gpu_model_runner.py:2007] Model loading took 15.2 GiB and "
           "12.48 seconds\n")


@pytest.mark.parametrize("last", [
    "(EngineCore_DP0 pid=270) ERROR 10-04 12:00:00 [core.py:708] torch.OutOfMemoryError: Error in model executi",
    "(EngineCore_DP0 pid=270) ERROR 10-04 12:00:00 [core.py:708] torch.OutOfMemoryError: CUDA out of memory. Tried to "
    "allocate 2.00 GiB. GPU 0 has a tot",
    "(EngineCore_DP0 pid=270) ERROR 10-04 12:00:00 [core.py:708] RuntimeError: CUDA error: out of memory",
])
def test_cut_or_runtime_oom_takes_the_phase_of_its_frames(tmp_path, last):
    b, _ = parse(tmp_path, WEIGHTS + V1_PROFILE_FRAMES + last)
    assert texts(b, "cuda_oom") == ["profile"]
    v, _ = verdict(tmp_path, WEIGHTS + V1_PROFILE_FRAMES + last)
    assert v.primary == "activation_peak_oom", v


def test_cut_line_keeps_the_size_it_printed(tmp_path):
    b, _ = parse(tmp_path, V1_PROFILE_FRAMES + "(EngineCore_DP0 pid=270) ERROR 10-04 12:00:00 [core.py:708] "
                 "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a tot")
    assert values(b, "cuda_oom") == [2 * GIB]


def test_worker_failed_wrapper_and_ray_wrapper(tmp_path):
    """V1 multiproc 'Worker failed with error ...' (v1/executor/multiproc_executor.py) and a Ray task error both give
    one OOM each, never a 'seen, not understood' line."""
    text = ("(EngineCore_DP0 pid=270) ERROR 10-04 12:00:00 [core.py:708] RuntimeError: Worker failed with error 'CUDA "
            "error: out of memory\n"
            "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might "
            "be incorrect.', please check the stack trace above for the root cause\n"
            "ERROR 06-10 10:00:00 worker_base.py:500] ray.exceptions.RayTaskError(OutOfMemoryError): "
            "ray::RayWorkerWrapper.execute_method() (pid=4242, ip=10.0.0.2)\n")
    b, notes = parse(tmp_path, text)
    assert len(texts(b, "cuda_oom")) == 2
    assert not [n for n in notes if n.startswith("seen, not understood")], notes


def test_capture_progress_bar_is_the_last_phase_marker(tmp_path):
    """No exception line at all: the last marker before the crash (the V1 capture progress bar) names the phase."""
    text = (WEIGHTS +
            "(EngineCore_DP0 pid=270) INFO 10-04 12:00:00 [gpu_worker.py:276] Available KV cache memory: 9.46 GiB\n"
            "(EngineCore_DP0 pid=270) INFO 10-04 12:00:00 [kv_cache_utils.py:864] GPU KV cache size: 38,752 tokens\n"
            "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE):   9%|▉   | 3/35 [00:01<00:12,  2.60it/s]\r"
            "Capturing CUDA graphs (decode, FULL):   9%|▉   | 3/35 [00:01<00:12,  2.60it/s]\n"
            "(EngineCore_DP0 pid=270) ERROR 10-04 12:00:05 [core.py:708] RuntimeError: CUDA error: out of memory\n")
    b, _ = parse(tmp_path, text)
    assert texts(b, "cuda_oom") == ["cudagraph"]
    v, _ = verdict(tmp_path, text)
    assert v.primary == "cuda_graph_oom", v


def test_loading_marker_before_weights(tmp_path):
    text = ("(EngineCore_DP0 pid=270) INFO 10-04 11:58:00 [gpu_model_runner.py:2338] Starting to load model "
            "Qwen/Qwen3-32B...\n"
            "Loading safetensors checkpoint shards:  41% Completed | 7/17 [00:10<00:14,  1.45s/it]\n"
            "(EngineCore_DP0 pid=270) ERROR 10-04 11:58:20 [core.py:708] torch.OutOfMemoryError: CUDA error: out of "
            "memory\n")
    b, _ = parse(tmp_path, text)
    assert texts(b, "cuda_oom") == ["load"]
    assert texts(b, "model_name") == ["Qwen/Qwen3-32B"]


def test_vision_tower_frame_is_the_encoder(tmp_path):
    text = (WEIGHTS + V1_PROFILE_FRAMES +
            '(EngineCore_DP0 pid=270) ERROR 10-04 12:00:00 [core.py:708]   File "/usr/local/lib/python3.12/'
            'dist-packages/vllm/model_executor/models/qwen2_5_vl.py", line 1100, in _process_image_input\n'
            "(EngineCore_DP0 pid=270) ERROR 10-04 12:00:00 [core.py:708] torch.OutOfMemoryError: Error in model exec")
    b, _ = parse(tmp_path, text)
    assert texts(b, "cuda_oom") == ["encoder"]


# ------------------------------------------------------------------------------------------------------------------
# 4. non-memory CUDA errors: a named note, never a KV class
@pytest.mark.parametrize("err", [
    "RuntimeError: CUDA error: an illegal memory access was encountered",
    "RuntimeError: CUDA error: operation not permitted when stream is capturing",
    "torch.AcceleratorError: CUDA error: device-side assert triggered",
    "RuntimeError: NCCL error: unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
    "RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasGemmEx( handle, opa, opb, m, n, k)`",
])
def test_cuda_error_is_not_a_memory_problem(tmp_path, err):
    text = WEIGHTS + V1_PROFILE_FRAMES + "(EngineCore_DP0 pid=270) ERROR 10-04 12:00:00 [core.py:708] " + err
    b, notes = parse(tmp_path, text)
    assert len(texts(b, "cuda_error")) == 1 and not texts(b, "cuda_oom")
    v, report = verdict(tmp_path, text)
    assert v.primary == "inconclusive", v
    assert "not a memory problem" in v.summary
    note = next(f for f in report.findings if f.rule_id == "OK005")
    assert note.status == "fires" and "Not a memory problem" in note.message
    assert not [n for n in notes if n.startswith("seen, not understood")], notes


# ------------------------------------------------------------------------------------------------------------------
# 5. model identity and the exact version
CONFIG_LINE = ("(EngineCore_DP0 pid=270) INFO 10-04 11:57:00 [core.py:76] Initializing a V1 LLM engine (v0.10.2) with "
               "config: model='Qwen/Qwen2.5-VL-72B-Instruct-AWQ', speculative_config=None, "
               "tokenizer='Qwen/Qwen2.5-VL-72B-Instruct-AWQ', skip_tokenizer_init=False, tokenizer_mode=auto, "
               "revision=None, trust_remote_code=False, dtype=torch.float16, max_seq_len=32768, "
               "download_dir=None, load_format=auto, tensor_parallel_size=2, pipeline_parallel_size=1, "
               "quantization=awq, enforce_eager=False, kv_cache_dtype=auto, served_model_name=qwen-vl\n")
ARCH_LINE = ("(APIServer pid=1) INFO 10-04 11:56:50 [__init__.py:742] Resolved architecture: "
             "Qwen2_5_VLForConditionalGeneration\n")


def test_engine_config_line_identity(tmp_path):
    b, notes = parse(tmp_path, ARCH_LINE + CONFIG_LINE)
    assert texts(b, "model_name") == ["Qwen/Qwen2.5-VL-72B-Instruct-AWQ"]
    assert texts(b, "quantization") == ["awq"]
    assert texts(b, "model_architecture") == ["Qwen2_5_VLForConditionalGeneration"]
    assert values(b, "model_multimodal") == [1.0]
    assert texts(b, "vllm_version") == ["0.10.2"]
    assert "vLLM version 0.10.2" in notes
    assert "model Qwen/Qwen2.5-VL-72B-Instruct-AWQ (Qwen2_5_VLForConditionalGeneration, multimodal, quantization awq)" \
        in notes


def test_multimodal_profile_oom_is_the_encoder(tmp_path):
    """A profile-phase OOM of a multimodal model (architecture line) is tied to its encoder (ENC001)."""
    text = ARCH_LINE + CONFIG_LINE + WEIGHTS + V1_PROFILE_FRAMES + \
        "(EngineCore_DP0 pid=270) ERROR 10-04 12:00:00 [core.py:708] torch.OutOfMemoryError: Error in model executi"
    v, _ = verdict(tmp_path, text)
    assert v.primary == "encoder_cache_oom", v
    # the same OOM of a text model is the activation peak
    text_model = text.replace("Qwen2_5_VLForConditionalGeneration", "Qwen2ForCausalLM").replace("-VL-", "-")
    v, _ = verdict(tmp_path, text_model)
    assert v.primary == "activation_peak_oom", v


def test_non_default_args_identity(tmp_path):
    b, _ = parse(tmp_path, "(APIServer pid=1) INFO 10-04 11:56:00 [utils.py:328] non-default args: {'model': "
                           "'meta-llama/Llama-3.1-8B-Instruct', 'quantization': 'fp8', 'max_model_len': 8192}")
    assert texts(b, "model_name") == ["meta-llama/Llama-3.1-8B-Instruct"]
    assert texts(b, "quantization") == ["fp8"]
    assert not values(b, "model_multimodal")


def test_architecture_table_from_vllm_registries():
    # keys of _MULTIMODAL_MODELS / _TEXT_GENERATION_MODELS in vllm/model_executor/models/registry.py
    assert is_multimodal_architecture("Qwen2VLForConditionalGeneration")        # 0.6+
    assert is_multimodal_architecture("MllamaForConditionalGeneration")         # 0.6-0.10
    assert is_multimodal_architecture("Phi4ForCausalLMV")                       # 0.33: no suffix, still multimodal
    assert not is_multimodal_architecture("LlamaForCausalLM")
    assert not is_multimodal_architecture("BartForConditionalGeneration")       # text encoder-decoder
    assert is_multimodal_architecture("SomeNewVLForCausalLM")                   # unknown: by name


# ------------------------------------------------------------------------------------------------------------------
# 6. nothing silently dropped
def test_unknown_memory_line_is_listed_and_never_none_of_the_signals(tmp_path):
    text = ("INFO 06-10 10:00:00 api_server.py:100] started\n"
            "ERROR 06-10 10:00:01 worker.py:10] RuntimeError: the frobnicator ran out of KV cache pages on rank 3\n")
    b, notes = parse(tmp_path, text)
    listed = [n for n in notes if n.startswith("seen, not understood")]
    assert listed == ["seen, not understood: RuntimeError: the frobnicator ran out of KV cache pages on rank 3 "
                      "(line 2)"]
    v, _ = verdict(tmp_path, text)
    assert v.primary == "inconclusive"
    assert "none of the signals" not in v.summary and "does not understand" in v.summary


def test_unseen_notes_are_capped_with_a_count_and_redacted(tmp_path):
    n = 5000
    lines = [f"WARNING 06-10 10:00:00 x.py:1] odd KV cache thing {i} token=hf_abcdefghijklmnopqrstu" for i in range(n)]
    b, notes = parse(tmp_path, "\n".join(lines))
    listed = [x for x in notes if x.startswith("seen, not understood")]
    assert len(listed) == UNSEEN_LISTED
    assert f"… and {n - UNSEEN_LISTED:,} more line(s) seen, not understood" in notes
    assert all("hf_abc" not in x for x in listed)
    assert values(b, "unrecognised_memory_line") == [n]


def test_info_talk_and_shell_commands_are_not_trouble(tmp_path):
    text = ("INFO 06-10 10:00:00 cache_engine.py:50] Using fp8 data type to store kv cache\n"
            "# vllm serve Qwen/Qwen2.5-7B --gpu-memory-utilization 0.95\n"
            "WARNING 06-10 10:00:00 config.py:50] Setting gpu_memory_utilization to 0.95\n")
    _, notes = parse(tmp_path, text)
    assert not [n for n in notes if n.startswith("seen, not understood")], notes


def test_no_real_incident_has_an_unexplained_line():
    """Must show 3: none of the bundled real logs reports a 'seen, not understood' line."""
    paths = [c / "vllm.log" for c in incident_cases(bundled_only=True)] + sorted((FIXTURES / "logs" / "real").glob("*/*.log"))
    assert len(paths) >= 21
    for p in paths:
        b = Bundle()
        infos = read_logs(b, [str(p)], progress=False)
        listed = [n for i in infos for n in i.notes if n.startswith("seen, not understood") or n.startswith("… and")]
        assert not listed, (p.parent.name, listed)


def test_report_shows_version_identity_and_unseen_lines(tmp_path, kvdiag):
    """The text report (input notes) shows the exact version, the model and the lines not understood."""
    p = tmp_path / "v.log"
    p.write_text(ARCH_LINE + CONFIG_LINE +
                 "(EngineCore_DP0 pid=270) ERROR 10-04 12:00:00 [core.py:708] RuntimeError: KV cache pages ran out\n")
    res = kvdiag("analyze", "--log", str(p))
    assert "Traceback" not in res.err and res.code == 3
    out = " ".join(res.out.split())  # the text report wraps long lines
    assert "vLLM version 0.10.2" in out
    assert "model Qwen/Qwen2.5-VL-72B-Instruct-AWQ" in out
    assert "seen, not understood: RuntimeError: KV cache pages ran out (line 3)" in out
    assert "none of the signals" not in out


@pytest.mark.parametrize("func,path,phase", [
    ("load_model", "vllm/v1/worker/gpu_model_runner.py", "load"),
    ("load_weights", "vllm/model_executor/models/llama.py", "load"),
    ("profile_run", "vllm/v1/worker/gpu_model_runner.py", "profile"),
    ("determine_available_memory", "vllm/v1/worker/gpu_worker.py", "profile"),
    ("determine_num_available_blocks", "vllm/worker/worker.py", "profile"),
    ("_dummy_sampler_run", "vllm/v1/worker/gpu_model_runner.py", "sampler"),
    ("_dummy_pooler_run", "vllm/v1/worker/gpu_model_runner.py", "sampler"),
    ("capture_model", "vllm/v1/worker/gpu_model_runner.py", "cudagraph"),
    ("initialize_kv_cache", "vllm/v1/worker/gpu_model_runner.py", "kv_alloc"),
    ("get_kv_cache_configs", "vllm/v1/core/kv_cache_utils.py", "kv_alloc"),
    ("_execute_mm_encoder", "vllm/v1/worker/gpu_model_runner.py", "encoder"),
    ("forward", "vllm/model_executor/models/siglip.py", "encoder"),
    ("forward", "vllm/model_executor/models/whisper.py", "encoder"),
    ("execute_model", "vllm/v1/worker/gpu_model_runner.py", "runtime"),
])
def test_phase_frames(func, path, phase):
    """Function names of the phases in vLLM 0.4-0.33 (files as in the wheels) give their phase."""
    from kvdiag.collect.logs import phase_of
    assert phase_of([("/usr/lib/python3/site-packages/vllm/entrypoints/x.py", "main"), (path, func)]) == phase


def test_ray_worker_tag_frames(tmp_path):
    """A Ray worker's traceback ('(RayWorkerWrapper pid=N, ip=A)' prefix) and the driver's cut OOM line."""
    text = ('(RayWorkerWrapper pid=4242, ip=10.0.0.2) ERROR 06-10 10:00:00 worker_base.py:500]   File '
            '"/usr/lib/python3/site-packages/vllm/worker/worker.py", line 200, in determine_num_available_blocks\n'
            "ERROR 06-10 10:00:01 engine.py:100] ray.exceptions.RayTaskError(OutOfMemoryError): "
            "ray::RayWorkerWrapper.execute_method() (pid=4242, ip=10.0.0.2)\n")
    b, _ = parse(tmp_path, text)
    assert texts(b, "cuda_oom") == ["profile"]


def test_vllm_setting_warnings_are_not_listed(tmp_path):
    """vLLM warnings that mention the KV cache but report a setting (v1/core/kv_cache_utils.py @ 0.16.0,
    v1/worker/gpu_model_runner.py @ 0.16.0) are read as such, not listed as 'seen, not understood'."""
    text = ("(EngineCore_DP0 pid=270) WARNING 02-27 10:00:00 [kv_cache_utils.py:1100] Hybrid KV cache manager is "
            "disabled for this hybrid model, This means we do not enable any optimizations for saving KV cache memory "
            "(e.g., dropping the KV cache outside the sliding window). The compute of layers like sliding window is "
            "still saved.\n"
            "(EngineCore_DP0 pid=270) WARNING 02-27 10:00:00 [gpu_model_runner.py:4000] Skipping CUDA graph capture. "
            "To turn on CUDA graph capture, ensure `cudagraph_mode` was not manually set to `NONE`\n")
    _, notes = parse(tmp_path, text)
    assert not [n for n in notes if n.startswith("seen, not understood")], notes


def test_traceback_source_line_is_not_an_oom(tmp_path):
    text = ('  File "/usr/lib/python3/site-packages/vllm/v1/worker/gpu_model_runner.py", line 2700, in _dummy_sampler_run\n'
            "    except torch.cuda.OutOfMemoryError as e:\n"
            "RuntimeError: CUDA out of memory occurred when warming up sampler with 256 dummy requests. Please try "
            "lowering `max_num_seqs` or `gpu_memory_utilization` when initializing the engine.\n")
    b, notes = parse(tmp_path, text)
    assert not texts(b, "cuda_oom") and values(b, "sampler_warmup_oom") == [1]
    assert not [n for n in notes if n.startswith("seen, not understood")], notes
