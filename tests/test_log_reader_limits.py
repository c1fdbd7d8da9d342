"""The log reader's limits found by the breaker of issue 12: malformed numbers in a known message, many OOM lines, one
huge line repeating a message's first words, and traceback frames naming CUDA-graph capture without an exception line.
Each case runs the real CLI on a real file (or the real collector and derive on a real bundle)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import kvdiag.derive.core as derive_mod
from kvdiag.bundle import Bundle
from kvdiag.collect.logs import LogCollector
from kvdiag.derive import derive_all
from kvdiag.derive.core import oom_phase
from kvdiag.errors import ExitStatus

GIB = 2**30
# a start-up that fails on KV capacity (vLLM 0.10.2, gpu_worker.py / core.py wording): startup_kv_capacity
BASE = [
    "INFO 10-15 00:02:38 [api_server.py:1805] vLLM API server version 0.10.2",
    "(EngineCore_DP0 pid=812) INFO 10-15 00:02:50 [gpu_model_runner.py:2007] Model loading took 14.25 GiB and 3.2 "
    "seconds",
    "(EngineCore_DP0 pid=812) INFO 10-15 00:03:10 [gpu_worker.py:276] Available KV cache memory: 1.20 GiB",
    "(EngineCore_DP0 pid=812) ERROR 10-15 00:03:10 [core.py:708] ValueError: To serve at least one request with the "
    "model's max seq len (32768), (1.75 GiB KV cache is needed, which is larger than the available KV cache memory "
    "(1.20 GiB). Based on the available memory, the estimated maximum model length is 22432. Try increasing "
    "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.",
]


def _run(tmp_path, text: str, timeout: float = 120) -> subprocess.CompletedProcess:
    p = tmp_path / "x.log"
    p.write_text(text)
    return subprocess.run([sys.executable, "-m", "kvdiag", "analyze", "--format", "json", "--log", str(p)],
                          capture_output=True, timeout=timeout)


# --- malformed numbers: one skipped line with a file:line note, never 'internal error' ------------------------------
@pytest.mark.parametrize("msg, bad", [
    ("Available KV cache memory: 1.2.3 GiB", "'1.2.3'"),
    ("Model loading took 1.2.3 GiB and 3 seconds", "'1.2.3'"),
    ("Model loading took ... GiB and 3 seconds", "'...'"),
    ("GPU KV cache size: ,,, tokens", "',,,'"),
    ("Maximum concurrency for 3,,2,768 tokens per request: 1.2.3x", "'1.2.3'"),
    ("Memory profiling results: total_gpu_memory=1.2.3GiB kv_cache_size=1GiB", "'1.2.3'"),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.2.3 GiB. GPU 0 has a total capacity of 8 GiB "
     "of which 1 MiB is free.", "'1.2.3'"),
])
def test_malformed_number_skips_its_line_with_a_note(tmp_path, msg, bad):
    r = _run(tmp_path, f"(EngineCore_DP0 pid=812) INFO 10-15 00:03:00 [gpu_worker.py:276] {msg}\n" + "\n".join(BASE)
             + "\n")
    assert b"internal error" not in r.stderr, r.stderr
    assert r.returncode != ExitStatus.UNKNOWN, r.stderr
    out = json.loads(r.stdout)
    assert out["verdict"]["primary"] == "startup_kv_capacity"   # the good lines after it are still read
    log = out["inputs"][0]
    assert f"x.log:1: a number kvdiag cannot read: {bad} (line skipped)" in log["notes"], log["notes"]
    assert log["skipped"] == 1
    assert not any("editorial" in n for n in log["notes"])


def test_a_line_with_a_bad_number_leaves_no_half_of_its_numbers(tmp_path):
    """The M2b line carries four numbers: the good one read before the bad one is dropped with the line."""
    p = tmp_path / "x.log"
    p.write_text("INFO 10-15 00:03:00 [worker.py:1] model weights take 14.25GiB; non_torch_memory takes 1.2.3GiB; "
                 "PyTorch activation peak memory takes 1.40GiB; the rest of the memory reserved for KV Cache is "
                 "52.20GiB.\n")
    b = Bundle()
    info = LogCollector(b).read(str(p))
    assert len(b) == 0 and info.skipped == 1


# --- many OOM lines: the phases in one pass --------------------------------------------------------------------------
def _mixed_bundle() -> Bundle:
    b = Bundle()
    b.add("cuda_oom", GIB, "log:x:1", text="unknown")                      # nothing before: stays unknown
    b.add("weights_bytes", 60 * GIB, "log:x:2")
    b.add("cuda_oom", GIB, "log:x:3", text="unknown")                      # after weights: profile
    b.add("cudagraph_bytes", 2 * GIB, "log:x:4")
    b.add("cuda_oom", GIB, "log:x:5", text="unknown")                      # after graphs, nothing served: sampler
    b.add("kv_cache_usage", 0.5, "log:x:6")
    b.add("cuda_oom", GIB, "log:x:7", text="unknown")                      # served: stays unknown
    b.add("cuda_oom", GIB, "log:x:8", text="load")                         # frames decide
    b.add("weights_bytes", 60 * GIB, "log:x:9", segment=1)
    b.add("cuda_oom", GIB, "log:x:10", text="unknown", segment=1)          # new segment: profile again
    b.add("mm_profile_warning", 180224, "log:x:11", segment=1)
    b.add("cuda_oom", GIB, "log:x:12", text="profile", segment=1)          # multimodal: encoder
    return b


def test_one_pass_phases_equal_the_per_oom_rule():
    b = _mixed_bundle()
    df = b.frame()
    want = [oom_phase(df, row) for _, row in df[df["signal"] == "cuda_oom"].iterrows()]
    got = [(p, w) for _, p, w in derive_mod._oom_phase_rows(df)]
    assert got == want
    assert [p for p, _ in got] == ["unknown", "profile", "sampler", "unknown", "load", "profile", "encoder"]


def test_many_oom_lines_do_not_filter_the_frame_per_oom(tmp_path, monkeypatch):
    """3,000 OOM lines: the phases come without one whole-frame filter per OOM (that was 10^4 lines: 34 s)."""
    p = tmp_path / "x.log"
    p.write_text("\n".join(BASE) + "\n"
                 + "ERROR 10-15 00:03:10 [core.py:708] RuntimeError: CUDA error: out of memory\n" * 3000)
    b = Bundle()
    LogCollector(b).read(str(p))
    calls = []
    real = derive_mod._before
    monkeypatch.setattr(derive_mod, "_before", lambda *a, **k: calls.append(1) or real(*a, **k))
    derive_all(b)
    assert len(b.signal("cuda_oom_phase")) == len(b.signal("cuda_oom")) == 3000
    assert len(calls) < 100, len(calls)


# --- one huge line repeating a pattern's first literal ---------------------------------------------------------------
@pytest.mark.parametrize("line", [
    "x CUDA out of memory. " * 50000,                                                      # oom_others: 57 s before
    "Sequence group 1 is preempted by PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. "
    * 10000 + "KV cache usage",                                                            # preemption
    "Iteration(1): " * 80000 + "KV cache usage",                                           # stats, 0.33
])
def test_a_line_repeating_a_first_literal_is_read_in_linear_time(tmp_path, line):
    r = _run(tmp_path, line + "\n" + "\n".join(BASE) + "\n", timeout=20)
    assert json.loads(r.stdout)["verdict"]["primary"], r.stderr


def test_the_tempered_patterns_still_read_their_lines(tmp_path):
    p = tmp_path / "x.log"
    p.write_text(
        "WARNING 10-15 00:03:10 [scheduler.py:1] Sequence group 7 is preempted by PreemptionMode.RECOMPUTE mode "
        "because there is not enough KV cache space. This can affect the end-to-end performance. Increase "
        "gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. "
        "total_num_cumulative_preemption=51\n"
        "ERROR 10-15 00:03:11 [core.py:1] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 "
        "has a total capacity of 79.15 GiB of which 1.00 GiB is free. Process 4242 has 20.00 GiB memory in use. "
        "Process 812 has 58.00 GiB memory in use. Of the allocated memory 57.00 GiB is allocated by PyTorch\n")
    b = Bundle()
    LogCollector(b).read(str(p))
    assert b.signal("num_preemptions")["value"].tolist() == [50.0, 51.0]  # the counter stood at n − 1 just before (issue 24)
    assert b.signal("oom_other_processes_bytes")["value"].tolist() == [20.0 * GIB]


# --- frames naming CUDA-graph capture, no exception line -------------------------------------------------------------
def test_frames_naming_capture_are_not_judged_the_profile_run(tmp_path):
    h = "(EngineCore_DP0 pid=812) ERROR 10-15 00:03:10 [core.py:708]"
    r = _run(tmp_path, "INFO 10-15 00:02:50 [gpu_model_runner.py:2007] Model loading took 14.25 GiB and 3.2 seconds\n"
             f"{h} Traceback (most recent call last):\n"
             f'{h}   File "/x/vllm/v1/worker/gpu_model_runner.py", line 2400, in capture_model\n'
             f"{h}     self._dummy_run(num_tokens)\n")
    v = json.loads(r.stdout)["verdict"]
    assert v["primary"] != "activation_peak_oom"
    assert "profile run is the step that failed" not in v["summary"]


def test_frames_naming_the_profile_run_still_are(tmp_path):
    h = "(EngineCore_DP0 pid=812) ERROR 10-15 00:03:10 [core.py:708]"
    r = _run(tmp_path, "INFO 10-15 00:02:50 [gpu_model_runner.py:2007] Model loading took 14.25 GiB and 3.2 seconds\n"
             f"{h} Traceback (most recent call last):\n"
             f'{h}   File "/x/vllm/v1/worker/gpu_model_runner.py", line 2400, in profile_run\n'
             f"{h}     self._dummy_run(num_tokens)\n")
    assert json.loads(r.stdout)["verdict"]["primary"] == "activation_peak_oom"
