"""Issue 24: the phase of a start-up death from the last marker of any kind (frames override only where they say
more), OOM lines whose start was cut, tracebacks a paste folded into one line, and runtime from V0 / 0.1-era logs."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvdiag.analyze import analyze
from kvdiag.bundle import Bundle
from kvdiag.collect.logs import deciding_frame, read_logs


def _read(tmp_path: Path, text: str) -> Bundle:
    p = tmp_path / "vllm.log"
    p.write_text(text)
    b = Bundle()
    read_logs(b, [str(p)], year=2025, progress=False)
    return b


def _phases(b: Bundle) -> list[str]:
    return b.signal("cuda_oom")["text"].tolist()


E = "(EngineCore_DP0 pid=2741) "
WEIGHTS = E + "INFO 11-03 10:00:01 [gpu_model_runner.py:2602] Model loading took 13.31 GiB and 6.2 seconds\n"
SIZED = (E + "INFO 11-03 10:00:10 [gpu_worker.py:298] Available KV cache memory: 50.11 GiB\n" +
         E + "INFO 11-03 10:00:10 [kv_cache_utils.py:1087] GPU KV cache size: 410,480 tokens\n")
BAR = "Capturing CUDA graphs (decode, FULL):   9%|▉         | 3/35 [00:00<00:05,  5.87it/s]\n"
WORKER_OOM = E + "ERROR 11-03 10:00:12 [core.py:708] RuntimeError: Worker failed with error 'CUDA error: out of memory'\n"


@pytest.mark.parametrize("text, phase", [
    (WEIGHTS + SIZED + BAR + WORKER_OOM, "cudagraph"),     # a headerless tqdm bar is the last marker
    (WEIGHTS + SIZED + WORKER_OOM, "kv_alloc"),            # the sizing line: the profile run is over
    (WEIGHTS + WORKER_OOM, "profile"),                     # the weights loaded: the profile run is next
])
def test_phase_from_the_last_marker(tmp_path, text, phase):
    assert _phases(_read(tmp_path, text)) == [phase]


def test_generic_frame_yields_to_the_marker(tmp_path):
    """A cut traceback showing only `_dummy_run` (run by the profile run, capture and warm-ups) says less than the
    capture bar before it; a specific frame (profile_run) still decides."""
    tb = ("Traceback (most recent call last):\n"
          '  File "/v/vllm/v1/worker/gpu_model_runner.py", line 2100, in _dummy_run\n'
          "    outputs = self.model(...)\n"
          "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
          "79.19 GiB of which 1.00 GiB is free.\n")
    assert _phases(_read(tmp_path, WEIGHTS + SIZED + BAR + tb)) == ["cudagraph"]
    tb2 = tb.replace('  File "/v/vllm/v1/worker/gpu_model_runner.py", line 2100, in _dummy_run\n',
                     '  File "/v/vllm/v1/worker/gpu_model_runner.py", line 2000, in profile_run\n'
                     '  File "/v/vllm/v1/worker/gpu_model_runner.py", line 2100, in _dummy_run\n')
    assert _phases(_read(tmp_path, WEIGHTS + SIZED + BAR + tb2)) == ["profile"]
    assert deciding_frame([("a.py", "capture_model"), ("b.py", "_dummy_run")])[0] == "cudagraph"


def test_oom_line_with_its_start_cut(tmp_path):
    b = _read(tmp_path, "Tried to allocate 136.00 MiB. GPU 0 has a total capacity of 79.19 GiB of which 120.88 MiB "
                        "is free. Process 1 has 79.06 GiB memory in use. (Model loading took 13.31 GiB) "
                        "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0\n")
    oom = b.signal("cuda_oom")
    assert len(oom) == 1 and oom["value"].iloc[0] == pytest.approx(136 * 2**20)
    assert _phases(b) == ["profile"]  # its own '(Model loading took 13.31 GiB)': the weights were loaded
    assert b.signal("weights_bytes")["value"].tolist() == [pytest.approx(13.31 * 2**30)]
    assert len(b.signal("startup_segments")) == 0  # no second start-up read into the OOM text


def test_traceback_folded_into_one_line(tmp_path):
    line = ('File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_worker.py", line 381, in '
            "determine_available_memory cudagraph_memory_estimate = self.model_runner.profile_cudagraph_memory() ... "
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.53 GiB. GPU has a total capacity of "
            "23.00 GiB of which 1.49 GiB is free. Process has 21.59 GiB memory in use.\n")
    b = _read(tmp_path, line)
    assert _phases(b) == ["cudagraph"]
    assert b.signal("gpu_total_bytes")["value"].tolist() == [pytest.approx(23 * 2**30)]


V0 = ("INFO 03-10 10:00:00 api_server.py:149] vLLM API server version 0.4.2\n" +
      "".join(f"INFO 03-10 10:00:{10 * k:02d} metrics.py:229] Avg prompt throughput: 512.3 tokens/s, Avg generation "
              f"throughput: 88.1 tokens/s, Running: {20 + k} reqs, Swapped: 0 reqs, Pending: {42 + 8 * k} reqs, GPU KV "
              f"cache usage: {28 + 12 * k:.1f}%, CPU KV cache usage: 0.0%\n" for k in range(4)))


def test_v0_climb_with_a_queue_is_a_forecast_not_healthy(tmp_path):
    p = tmp_path / "vllm.log"
    p.write_text(V0)
    b = Bundle()
    read_logs(b, [str(p)], year=2025, progress=False)
    assert b.signal("num_preemptions")["value"].tolist() == [0, 0, 0, 0]  # the run's start is in the log
    rep = analyze(logs=[str(p)], year=2025)
    assert rep.verdict.primary == "capacity_pressure" and rep.verdict.forecast, rep.verdict.summary


def test_v0_excerpt_without_its_start_knows_no_preemption_count(tmp_path):
    b = _read(tmp_path, V0.split("\n", 1)[1])
    assert len(b.signal("num_preemptions")) == 0


@pytest.mark.parametrize("count, want", [("total_num_cumulative_preemption=51", [50, 51]),
                                         ("total_cumulative_preemption_cnt=1", [0, 1]), ("", [])])
def test_v0_preemption_wordings(tmp_path, count, want):
    b = _read(tmp_path, "WARNING 01-10 10:00:05 scheduler.py:737] Sequence group 7 is preempted by "
                        "PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. This can affect "
                        f"the end-to-end performance. {count}\n")
    assert b.signal("preemption_warning")["text"].tolist() == ["RECOMPUTE"]
    assert b.signal("num_preemptions")["value"].tolist() == want


def test_v01_throughput_line(tmp_path):
    b = _read(tmp_path, "INFO 07-04 12:00:00 scheduler.py:254] Throughput: 210.3 tokens/s, Running: 24 reqs, "
                        "Swapped: 3 reqs, Pending: 30 reqs, GPU KV cache usage: 99.2%, CPU KV cache usage: 4.0%\n")
    assert b.signal("kv_cache_usage")["value"].tolist() == [pytest.approx(0.992)]
    assert b.signal("num_requests_waiting")["value"].tolist() == [30]
    assert b.signal("num_requests_swapped")["value"].tolist() == [3]


def test_block_manager_capacity(tmp_path):
    b = _read(tmp_path, "WARNING 12-19 10:21:05 scheduler.py:161] Input prompt (1217 tokens) is too long and exceeds "
                        "the capacity of block_manager\n")
    assert b.signal("request_rejected")["text"].tolist() == ["prompt_exceeds_pool"]
