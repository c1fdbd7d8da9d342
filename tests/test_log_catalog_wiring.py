"""The vLLM message catalogue wired into the log parser (issue 12, Must show 2), and the EVENTS wordings the catalogue
found against the wheels.

Lines are written as the cited wheel's source prints them (file @ version; the wheels are in the package index,
``pip download --no-deps --only-binary :all: vllm==X``, read as zip files).
"""

from __future__ import annotations

import pytest

import ahocorasick_rs

from kvdiag import catalog
from kvdiag.bundle import Bundle
from kvdiag.collect import logread
from kvdiag.collect.logs import LogCollector, event_needles, prefilter_needles, read_logs

GIB = 2 ** 30


def parse(tmp_path, text: str) -> tuple[Bundle, list[str]]:
    p = tmp_path / "vllm.log"
    p.write_text(text)
    b = Bundle()
    info = read_logs(b, [str(p)], year=2025, progress=False)[0]
    return b, info.notes


def values(b: Bundle, signal: str) -> list[float]:
    return b.signal(signal)["value"].tolist()


def texts(b: Bundle, signal: str) -> list[str]:
    return b.signal(signal)["text"].tolist()


# --- the EVENTS wordings the catalogue found --------------------------------------------------------------------------

def test_w1_gib_wording_of_the_xpu_runner(tmp_path):
    """vllm/worker/xpu_model_runner.py @ 0.8.5.post1, XPUModelRunner.load_model:
    ``logger.info("Loading model weights took %.4f GiB", self.model_memory_usage / GiB_bytes)`` (0.4-0.7 print
    'GB'). Read by W1 itself: one weights figure, one start-up segment, not the 0.4-0.7 format guess."""
    b, notes = parse(tmp_path, "INFO 05-06 12:00:00 [xpu_model_runner.py:414] Loading model weights took 4.3345 GiB\n")
    assert values(b, "weights_bytes") == [pytest.approx(4.3345 * GIB)]
    assert texts(b, "startup_segments") == ["weights_loaded"]
    assert texts(b, "vllm_message") == ["W1:2852ca9a7f"]
    assert not any("0.4-0.7" in n for n in notes), notes


def test_w1_gb_wording_still_read(tmp_path):
    """vllm/worker/model_runner.py @ 0.6.6, GPUModelRunnerBase.load_model: '... took %.4f GB'."""
    b, notes = parse(tmp_path, "INFO 05-06 12:00:00 model_runner.py:1072] Loading model weights took 14.9888 GB\n")
    assert values(b, "weights_bytes") == [pytest.approx(14.9888 * GIB)]
    assert any("W1 'GB' (0.4-0.7)" in n for n in notes), notes


def test_m6_of_0_10_prints_the_kv_memory_in_bytes(tmp_path):
    """vllm/v1/worker/gpu_worker.py @ 0.10.2, Worker.compile_or_warm_up_model (logger.info of an f-string):
    '... Current kv cache memory in use is {int(self.available_kv_cache_memory_bytes)} bytes.' (GiB from 0.11)."""
    line = ("INFO 05-06 12:00:04 [gpu_worker.py:298] Free memory on device (78.5/79.19 GiB) on startup. Desired GPU "
            "memory utilization is (0.9, 71.27 GiB). Actual usage is 15.27 GiB for weight, 1.45 GiB for peak "
            "activation, 0.21 GiB for non-torch memory, and 0.54 GiB for CUDAGraph memory. Replace "
            "gpu_memory_utilization config with `--kv-cache-memory=58394619494` to fit into requested memory, or "
            "`--kv-cache-memory=66543245312` to fully utilize gpu memory. Current kv cache memory in use is "
            "58394619494 bytes.\n")
    b, _ = parse(tmp_path, line)
    assert values(b, "kv_cache_memory_bytes") == [58394619494.0]
    assert values(b, "gpu_memory_utilization") == [0.9]
    assert values(b, "kv_cache_memory_suggested_bytes") == [58394619494.0]
    assert texts(b, "vllm_message") == ["M6:1d169b41f6"]


@pytest.mark.parametrize("line, entry", [
    # vllm/worker/worker.py @ 0.4.3, Worker.determine_num_available_blocks: assert without numbers
    ("AssertionError: Error in memory profiling. This happens when the GPU memory was not properly cleaned up before "
     "initializing the vLLM instance.", "72bb340772"),
    # vllm/worker/worker.py @ 0.8.5.post1, Worker.determine_num_available_blocks: 'Initial used memory'
    ("AssertionError: Error in memory profiling. Initial used memory 1234567, currently used memory 7654321. This "
     "happens when the GPU memory was not properly cleaned up before initializing the vLLM instance.", "d41606908d"),
])
def test_e5_wordings_once(tmp_path, line, entry):
    b, notes = parse(tmp_path, f"ERROR 05-06 12:00:01 [engine.py:160] {line}\n")
    assert values(b, "memory_profiling_error") == [1.0]  # E5's handler, not again from the catalogue's marker
    assert texts(b, "vllm_message") == [f"E5:{entry}"]
    assert not any(n.startswith("seen, not understood") for n in notes)


def test_k9_wordings_of_0_14(tmp_path):
    """vllm/v1/core/kv_cache_utils.py @ 0.14.1 (logger.info_once): 'Auto-fit max_model_len: reduced from %d to %d to
    fit in available GPU memory (%s GiB available for KV cache)' and '... full model context length %d fits in
    available GPU memory'."""
    b, _ = parse(tmp_path,
                 "INFO 05-06 12:00:03 [kv_cache_utils.py:1443] Auto-fit max_model_len: reduced from 131072 to 40960 "
                 "to fit in available GPU memory (12.34 GiB available for KV cache)\n"
                 "INFO 05-06 12:10:03 [kv_cache_utils.py:1434] Auto-fit max_model_len: full model context length 32768 "
                 "fits in available GPU memory\n")
    assert values(b, "max_model_len") == [40960.0, 32768.0]
    assert values(b, "kv_cache_memory_bytes") == [pytest.approx(12.34 * GIB)]
    assert values(b, "max_model_len_autofit") == [40960.0]
    assert texts(b, "vllm_message") == ["K9:27490096d5", "K9:380f6b19ae"]


# --- the wiring -------------------------------------------------------------------------------------------------------

def test_catalogue_only_message_is_recorded_and_understood(tmp_path):
    """A memory message no EVENTS pattern reads (vllm/v1/core/kv_cache_utils.py, 'Add N padding layers, may waste at
    most X% KV cache memory', WARNING): on record as vllm_message, never listed 'seen, not understood'."""
    b, notes = parse(tmp_path, "WARNING 05-06 12:00:00 [kv_cache_utils.py:900] Add 2 padding layers, may waste at "
                               "most 6.25% KV cache memory\n")
    assert [t.split(":")[0] for t in texts(b, "vllm_message")] == ["kv_capacity_warning"]
    assert not any(n.startswith("seen, not understood") for n in notes)


def test_unknown_trouble_still_listed(tmp_path):
    """The catalogue does not swallow text it does not hold: a made-up line with 'KV cache' stays listed."""
    b, notes = parse(tmp_path, "ERROR 06-10 10:00:01 [worker.py:10] RuntimeError: the frobnicator ran out of KV "
                               "cache pages on rank 3\n")
    assert len(b.signal("vllm_message")) == 0
    assert any(n.startswith("seen, not understood: RuntimeError: the frobnicator") for n in notes), notes


def test_number_read_by_an_event_is_not_counted_twice(tmp_path):
    """'Available KV cache memory: X GiB' (M3) is read by EVENTS and by the catalogue: one number, plus the record."""
    b, _ = parse(tmp_path, "INFO 05-06 12:00:00 [gpu_worker.py:276] Available KV cache memory: 61.02 GiB\n")
    assert values(b, "kv_cache_memory_bytes") == [pytest.approx(61.02 * GIB)]
    assert [t.split(":")[0] for t in texts(b, "vllm_message")] == ["M3"]


def test_stats_line_numbers_once(tmp_path):
    b, _ = parse(tmp_path, "INFO 05-06 12:00:10 [loggers.py:123] Engine 000: Avg prompt throughput: 120.0 tokens/s, "
                           "Avg generation throughput: 30.0 tokens/s, Running: 4 reqs, Waiting: 0 reqs, GPU KV cache "
                           "usage: 55.0%, Prefix cache hit rate: 3.0%\n")
    assert values(b, "kv_cache_usage") == [pytest.approx(0.55)]
    assert values(b, "num_requests_running") == [4.0]


def test_m7_of_0_10_without_the_space(tmp_path):
    """vllm/worker/worker.py and vllm/v1/worker/gpu_worker.py @ 0.10.2 (--kv-cache-memory set): f"Initial free memory
    {GiB(...):.2f} GiB, reserved {GiB(kv_cache_memory_bytes):.2f}GiB memory for KV Cache as specified by
    kv_cache_memory_bytes config and skipped memory profiling. ..." (no space before the second GiB)."""
    b, _ = parse(tmp_path, "INFO 05-06 12:00:00 [gpu_worker.py:242] Initial free memory 78.12 GiB, reserved "
                           "20.00GiB memory for KV Cache as specified by kv_cache_memory_bytes config and skipped "
                           "memory profiling. This does does not respect the gpu_memory_utilization config.\n")
    assert values(b, "kv_cache_memory_bytes") == [pytest.approx(20.0 * GIB)]
    assert values(b, "gpu_free_at_startup_bytes") == [pytest.approx(78.12 * GIB)]
    assert [t.split(":")[0] for t in texts(b, "vllm_message")] == ["M7"]


def test_cut_line_keeps_its_template_prefix(tmp_path):
    """A pasted line cut mid-message (ending '…') is still the catalogued message; the number before the cut is read,
    the one cut through is not (vllm/v1/worker/gpu_model_runner.py 0.16+ W3 'Model loading took X GiB memory and S
    seconds')."""
    b, _ = parse(tmp_path, "INFO 05-06 12:00:00 [gpu_model_runner.py:2000] Model loading took 12.…\n")
    assert texts(b, "startup_segments") == ["weights_loaded"]
    assert values(b, "weights_bytes") == []
    b, _ = parse(tmp_path, "INFO 05-06 12:00:00 [gpu_model_runner.py:2000] Model loading took 12.5 GiB memory and "
                           "3.2…\n")
    assert values(b, "weights_bytes") == [pytest.approx(12.5 * GIB)]


def test_docker_json_line_with_an_emoji(tmp_path):
    """json-file lines may escape non-ASCII (\\ud83d\\udea7): the prefilter still finds the catalogued text."""
    import json
    line = json.dumps({"log": "WARNING 05-06 12:00:00 [connector.py:1] \U0001F6A7kv_cache is None, req-1\n",
                       "stream": "stdout", "time": "2025-05-06T12:00:00.1Z"})
    b, _ = parse(tmp_path, line + "\n")
    assert [t.split(":")[0] for t in texts(b, "vllm_message")] == ["kv_capacity_warning"]


def test_quote_mark_inside_a_wrapped_paste_is_text(tmp_path):
    """Wrapped at 120 columns with the template's own '>' starting a piece (v1/worker/... 'when P TP > D TP.')."""
    head = "ERROR 05-06 12:00:00 [base_worker.py:123] "
    other = [f"INFO 05-06 12:00:0{k} [x.py:1] {'filler text ' * 9}".rstrip()[:119] for k in range(3)]
    msg = "AssertionError: Different local/remote block sizes are not supported when P TP > D TP."
    flat = head + msg
    at = flat.index("> D TP")
    text = "\n".join(other + [flat[:at].rstrip(), flat[at:]]) + "\n"
    b, notes = parse(tmp_path, text)
    assert [t.split(":")[0] for t in texts(b, "vllm_message")] == ["kv_capacity_error"], notes


# --- speed: the prefilter stays a small DFA ---------------------------------------------------------------------------

def test_prefilter_holds_every_needle_and_stays_a_dfa():
    """Every event needle and every catalogue needle contains a prefilter needle (a line holding one is decoded), the
    set is minimal (no needle contains another) and the reader's automaton is a DFA built once per process."""
    pre = prefilter_needles()
    ac = ahocorasick_rs.AhoCorasick(pre)
    for n in set(event_needles()) | set(catalog.needles()):
        plain = n.encode("ascii", "ignore").decode()
        assert ac.find_matches_as_indexes(n) or ac.find_matches_as_indexes(plain), n
    for n in pre:
        assert [pre[i] for i, _s, _e in ac.find_matches_as_indexes(n, overlapping=True)] == [n], n
    c = LogCollector(Bundle())
    r1 = logread.RecordReader(c.needles, "a")
    r2 = logread.RecordReader(c.needles, "b")
    assert r1._ac is r2._ac
    assert logread._automaton.cache_info().currsize >= 1
    import inspect
    assert "Implementation.DFA" in inspect.getsource(logread._automaton)
