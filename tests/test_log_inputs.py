"""Log format variants per vLLM version, and every input form: compressed, rotated, stdin, Docker json-file,
CRI partial lines, ANSI colour, \\r progress bars, process tags, data-parallel engines, yearless timestamps."""

from __future__ import annotations

import gzip
import json
import os
from datetime import datetime, timezone

import pytest
import zstandard

from conftest import FIXTURES
from kvdiag.bundle import Bundle
from kvdiag.collect import logread
from kvdiag.collect.logread import order_paths
from kvdiag.collect.logs import _progress_bar, read_logs, version_from_formats
from kvdiag.errors import InputError

GIB = 2**30
REAL = FIXTURES / "logs" / "real"


def read(*paths, year=2025) -> tuple[Bundle, list]:
    b = Bundle()
    infos = read_logs(b, [str(p) for p in paths], year=year, progress=False)
    return b, infos


def write(tmp_path, text: str, name="vllm.log"):
    p = tmp_path / name
    p.write_text(text)
    return p


def values(b: Bundle, signal: str) -> list[float]:
    return b.signal(signal)["value"].tolist()


def notes(info) -> str:
    return "; ".join(info.notes)


# ---- format variants, one per version family ----------------------------------------------------------------
def test_v0_04_format_and_version(tmp_path):
    """Real 0.4.0.post1 lines (case 022): 'file.py:N]' header, V0 engine banner."""
    b, [info] = read(REAL / "022-llama3-8b-1m-context-profile-run-oom" / "evidence.log")
    assert "V0 'file.py:N]' (0.4-0.7)" in notes(info)
    assert "vLLM version 0.4.0.post1" in notes(info)
    assert values(b, "weights_bytes")[0] == pytest.approx(15.2075 * GIB)
    assert values(b, "max_model_len") == [1048576]


def test_v0_07_memory_block(tmp_path):
    """Real 0.7.3 V0 lines (case 004): M2 three-line record, K2 '# cuda blocks'."""
    b, [info] = read(REAL / "004-qwen25-7b-bnb-rtx4060-negative-kv" / "evidence.log")
    assert values(b, "kv_cache_memory_bytes") == [pytest.approx(-1.05 * GIB)]
    assert values(b, "num_gpu_blocks") == [0]
    assert values(b, "num_cpu_blocks") == [4681]
    assert "V0 'file.py:N]' (0.4-0.7)" in notes(info)


def test_version_from_formats():
    assert version_from_formats({"a (0.8+)", "b (0.8-0.9)"}) == "0.8-0.9"
    assert version_from_formats({"a (0.16+)", "b (0.10+)"}) == "0.16+"
    assert version_from_formats({"a (0.4-0.7)", "b (0.16+)"}) == ""  # two servers' logs mixed
    assert version_from_formats({"no range"}) == ""


def test_v1_08_to_011(tmp_path):
    """0.8.5 / 0.9: '[file:N]' header, (EngineCore_0 pid=N) tag, W2, M3, 'Engine 000:' stats line."""
    text = ("(EngineCore_0 pid=61) INFO 04-28 04:07:40 [gpu_model_runner.py:1347] Model loading took 14.9889 GiB and "
            "4.120374 seconds\n"
            "(EngineCore_0 pid=61) INFO 04-28 04:07:51 [gpu_worker.py:200] Available KV cache memory: 54.30 GiB\n"
            "(EngineCore_0 pid=61) INFO 04-28 04:07:51 [kv_cache_utils.py:634] GPU KV cache size: 444,800 tokens\n"
            "INFO 04-28 04:09:00 [loggers.py:111] Engine 000: Avg prompt throughput: 12.0 tokens/s, Avg generation "
            "throughput: 88.1 tokens/s, Running: 4 reqs, Waiting: 0 reqs, GPU KV cache usage: 2.5%, Prefix cache hit "
            "rate: 51.3%\n")
    b, [info] = read(write(tmp_path, text))
    assert values(b, "weights_bytes") == [pytest.approx(14.9889 * GIB)]
    assert values(b, "kv_cache_size_tokens") == [444800]
    assert values(b, "kv_cache_usage") == [pytest.approx(0.025)]
    assert values(b, "prefix_cache_hit_rate") == [pytest.approx(0.513)]
    assert "vLLM version from the line format: 0.8-0.9" in notes(info)


def test_v1_016_preemptions_accumulate(tmp_path):
    """0.16: W3 wording, (EngineCore_DP0) and (APIServer) tags, per-interval 'Preemptions: N' summed."""
    stats = ("(APIServer pid=1) INFO 02-27 10:00:{s} [loggers.py:250] Engine 000: Avg prompt throughput: 0.0 tokens/s, "
             "Avg generation throughput: 900.0 tokens/s, Running: 40 reqs, Waiting: 12 reqs, Preemptions: {n}, GPU KV "
             "cache usage: 99.1%, Prefix cache hit rate: 10.0%\n")
    text = ("(EngineCore_DP0 pid=270) INFO 02-27 09:59:00 [gpu_model_runner.py:4100] Model loading took 61.03 GiB "
            "memory and 12.480116 seconds\n" + stats.format(s="10", n=3) + stats.format(s="20", n=5))
    b, [info] = read(write(tmp_path, text))
    assert values(b, "num_preemptions") == [3, 8]
    assert values(b, "weights_bytes") == [pytest.approx(61.03 * GIB)]
    assert "vLLM version from the line format: 0.16+" in notes(info)


def test_v033_series_log():
    """vLLM 0.33's own logger output (fixtures/series): banner, merged K6 line, stats every 10 s."""
    b, [info] = read(FIXTURES / "series" / "vllm033_pressure" / "vllm.log")
    assert "vLLM version 0.33.0" in notes(info)
    assert "merged KV size + concurrency line K6 (0.33+)" in notes(info)
    assert values(b, "kv_cache_size_tokens") == [56160]
    usage = values(b, "kv_cache_usage")
    assert len(usage) > 50 and max(usage) == pytest.approx(1.0, abs=0.01)
    t = b.signal("kv_cache_usage")["t"].tolist()
    assert all(b2 - a == pytest.approx(10, abs=1) for a, b2 in zip(t, t[1:]))


def test_v033_other_devices_and_iteration_line(tmp_path):
    text = ("(EngineCore pid=9) INFO 11-02 09:15:07 [loggers.py:335] Engine 000: Avg prompt throughput: 1.0 tokens/s, Avg"
            " generation throughput: 2.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, XPU KV cache usage: 40.0%\n"
            "(EngineCore pid=9) DEBUG 11-02 09:15:08 [loggers.py:400] Engine 000: Iteration(5): 1 context requests, 10 "
            "context tokens, 1 generation requests, 1 generation tokens, iteration elapsed time: 3.10 ms, GPU KV cache "
            "usage: 41.0%\n")
    b, _ = read(write(tmp_path, text))
    assert values(b, "kv_cache_usage") == [pytest.approx(0.40), pytest.approx(0.41)]
    assert not b.has("prefix_cache_hit_rate")  # omitted by 0.33 when no prefix-cache query was seen


# ---- input forms ------------------------------------------------------------------------------------------------
LINE = "INFO 01-01 0{h}:00:00 [loggers.py:1] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation " \
       "throughput: 1.0 tokens/s, Running: {r} reqs, Waiting: 0 reqs, GPU KV cache usage: {r}.0%\n"


def test_gzip_zstd_and_rotated_order(tmp_path):
    """vllm.log.2.gz (oldest), vllm.log.1.zst, vllm.log (live): read oldest first whatever the order given."""
    (tmp_path / "vllm.log.2.gz").write_bytes(gzip.compress(LINE.format(h=1, r=1).encode()))
    (tmp_path / "vllm.log.1.zst").write_bytes(zstandard.ZstdCompressor().compress(LINE.format(h=2, r=2).encode()))
    write(tmp_path, LINE.format(h=3, r=3))
    given = [tmp_path / "vllm.log", tmp_path / "vllm.log.1.zst", tmp_path / "vllm.log.2.gz"]
    b, infos = read(*given)
    assert values(b, "num_requests_running") == [1, 2, 3]
    assert [os.path.basename(i.name) for i in infos] == ["vllm.log.2.gz", "vllm.log.1.zst", "vllm.log"]


def test_order_paths_dateext_and_unrelated():
    assert order_paths(["a.log", "b.log-20250102", "a.log.1", "b.log-20250101.gz", "-"]) == \
        ["a.log.1", "a.log", "b.log-20250101.gz", "b.log-20250102", "-"]


def test_compressed_by_magic_not_name(tmp_path):
    p = tmp_path / "vllm.txt"
    p.write_bytes(zstandard.ZstdCompressor().compress(LINE.format(h=1, r=7).encode()))
    b, _ = read(p)
    assert values(b, "num_requests_running") == [7]


def test_broken_archive_is_input_error(tmp_path):
    p = tmp_path / "vllm.log.gz"
    p.write_bytes(gzip.compress(LINE.format(h=1, r=1).encode() * 50)[:12])   # the header only: nothing decodable
    with pytest.raises(InputError, match="cannot decompress"):
        read(p)


def test_cut_archive_keeps_the_lines_before_the_cut(tmp_path):
    p = tmp_path / "vllm.log.gz"
    data = gzip.compress("".join(LINE.format(h=1, r=r) for r in range(50)).encode())
    p.write_bytes(data[: len(data) * 2 // 3])
    b, infos = read(p)
    assert 0 < len(values(b, "num_requests_running")) < 50
    assert f"truncated after {infos[0].records} lines" in notes(infos[0])


def test_stdin(kvdiag, tmp_path):
    import subprocess
    import sys

    log = (REAL / "001-llama31-8b-3090-maxlen-vs-kv" / "evidence.log").read_bytes()
    proc = subprocess.run([sys.executable, "-m", "kvdiag", "analyze", "--log", "-", "--format", "json"], input=log,
                          capture_output=True, timeout=120)
    report = json.loads(proc.stdout)
    assert report["inputs"][0]["name"] == "-"
    assert report["verdict"]["primary"] == "startup_kv_capacity"
    assert b"Traceback" not in proc.stderr


def test_docker_json_file_with_partial_lines(tmp_path):
    """docker json-file: each record a JSON object; a record over 16 KiB is split in parts without '\\n'."""
    first = ("\u001b[1;36m(APIServer pid=1)\u001b[0;0m INFO 10-14 17:02:38 [loggers.py:123] Engine 000: Avg prompt "
             "throughput: 0.0 tokens/s, Avg generation throughpu")
    rest = "t: 843.6 tokens/s, Running: 38 reqs, Waiting: 0 reqs, GPU KV cache usage: 88.5%, Prefix cache hit rate: 42.4%\n"
    lines = [json.dumps({"log": "INFO:     10.0.0.1:1 - \"GET /metrics HTTP/1.1\" 200 OK\n", "stream": "stdout",
                         "time": "2025-10-15T00:02:37.1Z"}),
             json.dumps({"log": first, "stream": "stdout", "time": "2025-10-15T00:02:38.756689123Z"}),
             json.dumps({"log": rest, "stream": "stdout", "time": "2025-10-15T00:02:38.756689999Z"}),
             json.dumps({"log": "Traceback (most recent call last):\n", "stream": "stderr", "time": "2025-10-15T00:02:39Z"}),
             json.dumps({"log": "  File \"/v/vllm/worker/model_runner.py\", line 9, in profile_run\n",
                         "stream": "stderr", "time": "2025-10-15T00:02:39Z"}),
             json.dumps({"log": "ValueError: boom\n", "stream": "stderr", "time": "2025-10-15T00:02:39Z"})]
    b, [info] = read(write(tmp_path, "\n".join(lines) + "\n"), year=None)
    assert values(b, "kv_cache_usage") == [pytest.approx(0.885)]
    assert values(b, "generation_throughput") == [pytest.approx(843.6)]
    assert b.signal("kv_cache_usage")["t"].iloc[0] == pytest.approx(1760486558.756689, abs=1e-3)
    assert b.signal("kv_cache_usage")["source"].iloc[0] == "log:vllm.log:2"
    assert b.signal("exception")["text"].tolist() == ["ValueError in profile_run (model_runner.py) [profile]"]
    assert "Docker json-file lines" in notes(info)


def test_cri_partial_and_full_lines(tmp_path):
    text = ("2025-01-01T06:00:00.123456789Z stdout F (APIServer pid=1) INFO 01-01 06:00:00 [api_server.py:1] vLLM API "
            "server version 0.10.2\n"
            "2025-01-01T06:00:10.123456789Z stdout P (APIServer pid=1) INFO 01-01 06:00:10 [loggers.py:123] Engine 000: "
            "Avg prompt throughput: 5.0 tokens/s, Avg generation thr\n"
            "2025-01-01T06:00:10.123456789Z stdout F oughput: 7.0 tokens/s, Running: 3 reqs, Waiting: 2 reqs, GPU KV cache "
            "usage: 12.5%, Prefix cache hit rate: 0.0%\n")
    b, [info] = read(write(tmp_path, text), year=None)
    assert values(b, "num_requests_waiting") == [2]
    assert values(b, "kv_cache_usage") == [pytest.approx(0.125)]
    assert b.signal("kv_cache_usage")["t"].iloc[0] == pytest.approx(
        datetime(2025, 1, 1, 6, 0, 10, 123456, tzinfo=timezone.utc).timestamp(), abs=1e-3)
    assert "vLLM version 0.10.2" in notes(info)


def test_progress_bars_glued_with_carriage_returns(tmp_path):
    """tqdm writes '\\r'-separated updates; two log records glued into one physical line both count."""
    text = ("Loading safetensors checkpoint shards:  50% Completed | 1/2 [00:01<00:01,  1.2it/s]\r"
            "(EngineCore_DP0 pid=7) INFO 10-04 12:00:01 [gpu_model_runner.py:2007] Model loading took 14.99 GiB and "
            "4.12 seconds\r"
            "Capturing CUDA graphs (decode, FULL): 100%|██████████| 67/67 [00:04<00:00, 14.9it/s]\r"
            "(EngineCore_DP0 pid=7) INFO 10-04 12:00:09 [gpu_model_runner.py:2708] Graph capturing finished in 6 secs, "
            "took 0.49 GiB\n")
    b, _ = read(write(tmp_path, text))
    assert values(b, "weights_bytes") == [pytest.approx(14.99 * GIB)]
    assert values(b, "cudagraph_bytes") == [pytest.approx(0.49 * GIB)]


def test_tracebacks_of_two_workers_interleaved(tmp_path):
    """TP=2 workers fail at once; frames are grouped per process tag, each with its own raising frame."""
    w0, w1 = "(VllmWorker rank=0 pid=10)", "(VllmWorker rank=1 pid=11)"
    text = "\n".join([
        f"{w0} Traceback (most recent call last):",
        f"{w1} Traceback (most recent call last):",
        f'{w0}   File "/v/vllm/v1/worker/gpu_worker.py", line 1, in load_model',
        f'{w1}   File "/v/vllm/v1/worker/gpu_model_runner.py", line 2, in capture_model',
        f'{w1}   File "/v/torch/cuda/graphs.py", line 3, in __exit__',
        f"{w0} torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total capacity of "
        "79.18 GiB of which 0.50 GiB is free.",
        f"{w1} torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity of "
        "79.18 GiB of which 0.25 GiB is free.",
    ]) + "\n"
    b, _ = read(write(tmp_path, text))
    assert b.signal("cuda_oom")["text"].tolist() == ["load", "cudagraph"]
    assert b.signal("exception")["text"].tolist() == [
        "OutOfMemoryError in load_model (gpu_worker.py) [load]",
        "OutOfMemoryError in capture_model (gpu_model_runner.py) [cudagraph]"]
    assert values(b, "exception") == [1, 2]


def test_data_parallel_engines_combined(tmp_path):
    """Two DP engines log one stats line each per interval: usage by max, counts by sum (as for /metrics)."""
    line = ("(APIServer pid=1) INFO 10-04 12:00:{s} [loggers.py:123] Engine 00{e}: Avg prompt throughput: 10.0 tokens/s"
            ", Avg generation throughput: 100.0 tokens/s, Running: {r} reqs, Waiting: {w} reqs, GPU KV cache usage: "
            "{u}%, Prefix cache hit rate: {h}%\n")
    text = (line.format(s="10", e=0, r=5, w=1, u="90.0", h="20.0") + line.format(s="10", e=1, r=7, w=2, u="40.0", h="40.0")
            + line.format(s="20", e=0, r=6, w=0, u="50.0", h="20.0") + line.format(s="20", e=1, r=8, w=0, u="95.0", h="40.0"))
    b, [info] = read(write(tmp_path, text))
    assert values(b, "kv_cache_usage") == [pytest.approx(0.90), pytest.approx(0.95)]
    assert b.signal("kv_cache_usage")["source"].tolist() == ["log:vllm.log:1", "log:vllm.log:4"]
    assert values(b, "num_requests_running") == [12, 14]
    assert values(b, "num_requests_waiting") == [3, 0]
    assert values(b, "generation_throughput") == [200, 200]
    assert values(b, "prefix_cache_hit_rate") == [pytest.approx(0.3)] * 2
    assert "2 engines (data parallel)" in notes(info)


# ---- yearless timestamps --------------------------------------------------------------------------------------
def test_year_from_file_date_across_new_year(tmp_path):
    """A log written 12-31 → 01-01 and last modified in January: December lines get the year before."""
    text = LINE.replace("01-01 0{h}", "12-31 2{h}").format(h=3, r=1) + LINE.format(h=0, r=2) + LINE.format(h=1, r=3)
    p = write(tmp_path, text)
    mtime = datetime(2026, 1, 1, 2, 0, tzinfo=timezone.utc).timestamp()
    os.utime(p, (mtime, mtime))
    b, _ = read(p, year=None)
    t = b.signal("kv_cache_usage")["t"].tolist()
    assert datetime.fromtimestamp(t[0], tz=timezone.utc) == datetime(2025, 12, 31, 23, 0, tzinfo=timezone.utc)
    assert t == sorted(t) and t[1] - t[0] == 3600


def test_explicit_year_carries_across_files(tmp_path):
    a = write(tmp_path, LINE.replace("01-01 0{h}", "12-31 2{h}").format(h=3, r=1), "vllm.log.1")
    c = write(tmp_path, LINE.format(h=0, r=2), "vllm.log")
    b, _ = read(a, c, year=2024)
    t = b.signal("kv_cache_usage")["t"].tolist()
    assert datetime.fromtimestamp(t[1], tz=timezone.utc).year == 2025 and t[1] - t[0] == 3600


# ---- robustness and progress ------------------------------------------------------------------------------------
def test_over_long_line_is_cut_not_buffered(tmp_path, monkeypatch):
    monkeypatch.setattr(logread, "MAX_LINE_BYTES", 1 << 16)
    monkeypatch.setattr(logread, "BLOCK_BYTES", 1 << 14)
    text = "x" * 200_000 + LINE.format(h=1, r=4)
    b, [info] = read(write(tmp_path, text))
    assert info.records >= 2


def test_block_boundaries_do_not_lose_lines(tmp_path, monkeypatch):
    monkeypatch.setattr(logread, "BLOCK_BYTES", 97)
    text = "".join(LINE.format(h=h % 10, r=h) for h in range(1, 30))
    b, [info] = read(write(tmp_path, text))
    assert values(b, "num_requests_running") == list(range(1, 30))
    assert info.records == 29
    assert b.signal("num_requests_running")["source"].tolist()[-1] == "log:vllm.log:29"


def test_progress_bar_only_for_large_inputs(capsys):
    update = _progress_bar("big.log")
    update(10, 1000)  # small input: nothing
    assert capsys.readouterr().err == ""
    update(50 << 20, 100 << 20)
    update(100 << 20, 100 << 20)
    err = capsys.readouterr().err
    assert "big.log" in err and " 50%" in err and "100%" in err


def test_no_progress_when_not_a_terminal(tmp_path, capsys):
    b = Bundle()
    read_logs(b, [str(write(tmp_path, LINE.format(h=1, r=1)))])  # progress=None: stderr is not a TTY here
    assert capsys.readouterr().err == ""
