"""Log collector on real lines (copied from the shared real incidents and vLLM 0.33's own logger output)."""

from __future__ import annotations

import gzip
import math

import pytest

from kvdiag.bundle import Bundle
from kvdiag.collect.logs import phase_of, read_logs, size_bytes
from kvdiag.errors import InputError

GIB = 2**30


def parse(tmp_path, text: str | bytes, name: str = "vllm.log", year: int | None = 2025) -> Bundle:
    p = tmp_path / name
    if isinstance(text, bytes):
        p.write_bytes(text)
    else:
        p.write_text(text)
    b = Bundle()
    read_logs(b, [str(p)], year=year)
    return b


def values(b: Bundle, signal: str) -> list[float]:
    return b.signal(signal)["value"].tolist()


# V0 0.5 stats line glued behind a tqdm bar (real, incident 009)
V0_GLUED = ("Processed prompts:   0%|  | 34/10000 [00:29<3:36:54,  1.31s/it, est. speed input: 407.31 toks/s, output: "
            "7561.83 toks/s]INFO 06-16 21:24:15 metrics.py:341] Avg prompt throughput: 2706.1 tokens/s, Avg generation "
            "throughput: 13395.4 tokens/s, Running: 34 reqs, Swapped: 100 reqs, Pending: 9832 reqs, GPU KV cache usage: "
            "99.2%, CPU KV cache usage: 70.4%.\n")
V0_PREEMPT = ("WARNING 06-16 21:24:15 scheduler.py:1089] Sequence group 165 is preempted by PreemptionMode.SWAP mode "
              "because there is not enough KV cache space. This can affect the end-to-end performance. Increase "
              "gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. "
              "total_num_cumulative_preemption=151\n")


def test_v0_stats_line_behind_progress_bar(tmp_path):
    b = parse(tmp_path, V0_GLUED + V0_PREEMPT)
    assert values(b, "kv_cache_usage") == [pytest.approx(0.992)]
    assert values(b, "cpu_cache_usage") == [pytest.approx(0.704)]
    assert values(b, "num_requests_running") == [34]
    assert values(b, "num_requests_swapped") == [100]
    assert values(b, "num_requests_waiting") == [9832]
    assert values(b, "prompt_throughput") == [pytest.approx(2706.1)]
    # issue 24: the warning's count includes its own preemption, so the counter stood at 150 just before
    assert values(b, "num_preemptions") == [150, 151]
    assert b.signal("preemption_warning")["text"].tolist() == ["SWAP"]
    # timestamp: no year in the line, taken from --year; UTC
    assert b.signal("kv_cache_usage")["t"].iloc[0] == pytest.approx(1750109055.0)
    assert b.signal("kv_cache_usage")["source"].iloc[0] == "log:vllm.log:1"


def test_v1_010_stats_line_with_container_timestamp_and_wrap(tmp_path):
    """0.10.2 in docker: `docker logs -t` timestamps, (APIServer pid=1) tag, line wrapped mid-word (incident 011)."""
    text = ("2025-10-15T00:02:38.756689123Z (APIServer pid=1) INFO 10-14 17:02:38 [loggers.py:123] Engine 000: Avg "
            "prompt throughput: 0.0 tokens/s, Avg generation throughpu\n"
            "t: 843.6 tokens/s, Running: 38 reqs, Waiting: 0 reqs, GPU KV cache usage: 88.5%, Prefix cache hit rate: "
            "42.4%\n"
            "2025-10-15T00:02:43.157050784Z (APIServer pid=1) INFO:     10.0.0.11:50840 - \"GET /metrics HTTP/1.1\" "
            "200 OK\n")
    b = parse(tmp_path, text, year=None)
    assert values(b, "kv_cache_usage") == [pytest.approx(0.885)]
    assert values(b, "generation_throughput") == [pytest.approx(843.6)]
    assert values(b, "prefix_cache_hit_rate") == [pytest.approx(0.424)]
    assert values(b, "num_requests_running") == [38]
    # the container's UTC timestamp wins over the local, yearless header time
    assert b.signal("kv_cache_usage")["t"].iloc[0] == pytest.approx(1760486558.756689, abs=1e-3)


def test_v033_merged_capacity_line_and_banner(tmp_path):
    """vLLM 0.33's own logger output (shared/fixtures/vllm033-series)."""
    text = ("(APIServer pid=12) INFO 05-11 09:30:00 [startup.py:38]  ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.33.0\n"
            "(EngineCore pid=272) INFO 05-11 09:30:38 [kv_cache_utils.py:1147] GPU KV cache size: 56,160 tokens, "
            "Maximum concurrency for 32,768 tokens per request: 1.71x\n"
            "(APIServer pid=12) INFO 05-11 09:45:42 [loggers.py:335] Engine 000: Avg prompt throughput: 927.6 tokens/s,"
            " Avg generation throughput: 152.2 tokens/s, Running: 14 reqs, Waiting: 20 reqs, GPU KV cache usage: 98.6%,"
            " Prefix cache hit rate: 0.0%\n")
    b = parse(tmp_path, text)
    assert b.signal("vllm_version")["text"].tolist() == ["0.33.0"]
    assert values(b, "kv_cache_size_tokens") == [56160]
    assert values(b, "max_model_len") == [32768]
    assert values(b, "max_concurrency") == [pytest.approx(1.71)]
    assert values(b, "num_requests_waiting") == [20]


def test_v0_memory_profile_lines(tmp_path):
    """V0 0.7.3 M2 block and K2 (incident 004): negative KV budget, 0 blocks."""
    text = ("INFO 02-26 09:54:02 model_runner.py:1115] Loading model weights took 5.2032 GB\n"
            "INFO 02-26 09:54:05 worker.py:267] the current vLLM instance can use total_gpu_memory (8.00GiB) x "
            "gpu_memory_utilization (0.70) = 5.60GiB\n"
            "INFO 02-26 09:54:05 worker.py:267] model weights take 5.20GiB; non_torch_memory takes 0.03GiB; PyTorch "
            "activation peak memory takes 1.42GiB; the rest of the memory reserved for KV Cache is -1.05GiB.\n"
            "INFO 02-26 09:54:05 executor_base.py:111] # cuda blocks: 0, # CPU blocks: 4681\n"
            "INFO 02-26 09:54:05 executor_base.py:116] Maximum concurrency for 4096 tokens per request: 0.00x\n")
    b = parse(tmp_path, text)
    assert values(b, "gpu_total_bytes") == [8 * GIB]
    assert values(b, "gpu_memory_utilization") == [pytest.approx(0.70)]
    assert values(b, "gpu_budget_bytes") == [pytest.approx(5.60 * GIB)]
    assert values(b, "kv_cache_memory_bytes") == [pytest.approx(-1.05 * GIB)]
    assert values(b, "activation_peak_bytes") == [pytest.approx(1.42 * GIB)]
    assert values(b, "num_gpu_blocks") == [0]
    assert values(b, "num_cpu_blocks") == [4681]
    assert values(b, "weights_bytes") == [pytest.approx(5.2032 * GIB), pytest.approx(5.20 * GIB)]
    assert values(b, "max_model_len") == [4096]


def test_m1_profiling_line_and_e2a_error_without_header(tmp_path):
    """0.6.4 lines quoted without headers (incident 001)."""
    text = ("Memory profiling results: total_gpu_memory=23.58GiB initial_memory_usage=15.34GiB "
            "peak_torch_memory=17.98GiB memory_usage_post_profile=15.35GiB non_torch_memory=0.35GiB "
            "kv_cache_size=2.89GiB gpu_memory_utilization=0.90\n"
            "# GPU blocks: 1478, # CPU blocks: 2048\n"
            "The model's max seq len (29000) is larger than the maximum number of tokens that can be stored in KV cache "
            "(23648). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the "
            "engine.\n")
    b = parse(tmp_path, text)
    assert values(b, "kv_cache_memory_bytes") == [pytest.approx(2.89 * GIB)]
    assert values(b, "num_gpu_blocks") == [1478]
    assert b.signal("kv_capacity_error")["text"].tolist() == ["max_model_len_exceeds_pool"]
    assert values(b, "kv_cache_size_tokens") == [23648]
    assert math.isnan(b.signal("kv_cache_usage")["t"].max()) if b.has("kv_cache_usage") else True


def test_v1_e2c_error_and_m3(tmp_path):
    text = ("(EngineCore_0 pid=1) INFO 04-28 04:07:51 [gpu_worker.py:200] Available KV cache memory: 1.71 GiB\n"
            "(EngineCore_0 pid=1) ERROR 04-28 04:07:51 [core.py:400] ValueError: To serve at least one request with "
            "the models's max seq len (131072), (6.00 GiB KV cache is needed, which is larger than the available KV "
            "cache memory (1.71 GiB). Based on the available memory, the estimated maximum model length is 37376. "
            "Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.\n")
    b = parse(tmp_path, text)
    assert values(b, "kv_cache_memory_bytes") == [pytest.approx(1.71 * GIB)] * 2
    assert values(b, "max_model_len") == [131072]
    assert b.signal("kv_capacity_error")["text"].tolist() == ["max_model_len_exceeds_pool"]


def test_mamba_blocks_error(tmp_path):
    text = ("ValueError: max_num_seqs (1024) exceeds available Mamba cache blocks (856). Each decode sequence requires "
            "one Mamba cache block, so CUDA graph capture cannot proceed.\n")
    b = parse(tmp_path, text)
    assert values(b, "max_num_seqs") == [1024]
    assert values(b, "mamba_cache_blocks") == [856]


def test_cuda_oom_numbers_and_load_phase_from_frames(tmp_path):
    """Incident 021: OOM while constructing lm_head (torch 2.4 wording)."""
    text = ("[rank0]:   File \"/x/vllm/model_executor/model_loader/loader.py\", line 155, in build_model\n"
            "[rank0]:   File \"/x/vllm/model_executor/layers/vocab_parallel_embedding.py\", line 28, in create_weights\n"
            "[rank0]:   File \"/x/torch/utils/_device.py\", line 79, in __torch_function__\n"
            "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1002.00 MiB. GPU 0 has a total "
            "capacity of 15.59 GiB of which 940.12 MiB is free. Including non-PyTorch memory, this process has 14.30 GiB"
            " memory in use. Of the allocated memory 14.01 GiB is allocated by PyTorch, and 15.49 MiB is reserved\n")
    b = parse(tmp_path, text)
    oom = b.signal("cuda_oom")
    assert oom["text"].tolist() == ["load"]
    assert oom["value"].tolist() == [1002 * 2**20]
    assert values(b, "gpu_total_bytes") == [pytest.approx(15.59 * GIB)]
    assert values(b, "oom_free_bytes") == [pytest.approx(940.12 * 2**20)]
    assert values(b, "oom_torch_allocated_bytes") == [pytest.approx(14.01 * GIB)]
    assert values(b, "oom_process_in_use_bytes") == [pytest.approx(14.30 * GIB)]


def test_cuda_oom_torch21_typo_without_frames(tmp_path):
    """Incident 019: torch 2.1 'capacty', only the final line: PyTorch holds 98.7 % before anything loaded."""
    text = ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 384.00 MiB. GPU 0 has a total capacty "
            "of 79.33 GiB of which 351.81 MiB is free. Including non-PyTorch memory, this process has 78.97 GiB memory "
            "in use. Of the allocated memory 78.33 GiB is allocated by PyTorch, and 12.36 MiB is reserved by PyTorch\n")
    b = parse(tmp_path, text)
    assert b.signal("cuda_oom")["text"].tolist() == ["load"]


def test_oom_after_kv_sizing_is_not_inferred_as_load(tmp_path):
    text = ("INFO 05-24 22:18:27 model_runner.py:104] Loading model weights took 15.2075 GB\n"
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.82 GiB. GPU 0 has a total capacity of "
            "79.14 GiB of which 3.02 GiB is free. Of the allocated memory 75.34 GiB is allocated by PyTorch\n")
    b = parse(tmp_path, text)
    # issue 24: the last marker (weights loaded) names the next step, the profile run (derive said so before)
    assert b.signal("cuda_oom")["text"].tolist() == ["profile"]


@pytest.mark.parametrize("frames, phase", [
    ([("/v/worker/model_runner.py", "profile_run")], "profile"),
    ([("/v/v1/worker/gpu_model_runner.py", "_dummy_sampler_run")], "sampler"),
    ([("/v/v1/worker/gpu_model_runner.py", "capture_model")], "cudagraph"),
    ([("/v/worker/cache_engine.py", "_allocate_kv_cache")], "kv_alloc"),
    ([("/v/worker/worker.py", "load_model"), ("/v/torch/nn/module.py", "_call_impl")], "load"),
    ([("/v/torch/nn/module.py", "_call_impl")], ""),
])
def test_phase_of_frames(frames, phase):
    assert phase_of(frames) == phase


def test_editorial_notes_skipped_and_counted(tmp_path):
    b = parse(tmp_path, "# [a note]\nINFO 01-01 00:00:00 [x.py:1] GPU KV cache size: 1,000 tokens\n")
    assert b.inputs[0].skipped == 1
    assert values(b, "kv_cache_size_tokens") == [1000]


def test_ansi_colour_codes_stripped(tmp_path):
    text = ("\x1b[1;36m(VllmWorker rank=0 pid=7)\x1b[0;0m INFO 04-28 04:07:51 [gpu_worker.py:200] Available KV cache "
            "memory: 3.50 GiB\n")
    b = parse(tmp_path, text)
    assert values(b, "kv_cache_memory_bytes") == [pytest.approx(3.5 * GIB)]


def test_new_year_is_monotonic(tmp_path):
    text = ("INFO 12-31 23:59:50 metrics.py:1] Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: 1.0 "
            "tokens/s, Running: 1 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 1.0%, CPU KV cache usage:"
            " 0.0%.\n"
            "INFO 01-01 00:00:05 metrics.py:1] Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: 1.0 "
            "tokens/s, Running: 1 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 2.0%, CPU KV cache usage:"
            " 0.0%.\n")
    t = parse(tmp_path, text, year=2024).signal("kv_cache_usage")["t"].tolist()
    assert t[1] - t[0] == pytest.approx(15.0)


def test_gzip_log(tmp_path):
    data = gzip.compress(b"INFO 01-01 00:00:00 [x.py:1] GPU KV cache size: 2,048 tokens\n")
    b = parse(tmp_path, data, name="vllm.log.gz")
    assert values(b, "kv_cache_size_tokens") == [2048]


@pytest.mark.parametrize("content, message", [
    ("", "empty"),
    (b"\x00\x01\x02\x03\n\x00\xff\xfe\n\x00\x00\x00\n", "binary"),
])
def test_bad_logs_raise_input_error(tmp_path, content, message):
    with pytest.raises(InputError, match=message):
        parse(tmp_path, content)


def test_size_bytes_units():
    assert size_bytes("1.5", "GiB") == 1.5 * GIB
    assert size_bytes("940.12", "MiB") == pytest.approx(940.12 * 2**20)
    assert size_bytes("12", "bytes") == 12
