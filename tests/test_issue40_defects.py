"""Issue 40, must-show 3: each defect the fourth reliability pass named, with a test that failed before its fix.

Every bad input gives one line naming the file / URL / field, the README's exit code, and no traceback."""

from __future__ import annotations

import socket

import pytest

from conftest import FIXTURES
from test_check import nagios

from kvdiag.cli import main


def run(capsys, *argv: str) -> tuple[int, str, str]:
    """kvdiag's entry point in-process (the exit-code mapping included): ``(exit code, stdout, stderr)``."""
    capsys.readouterr()
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err

PRESS = str(FIXTURES / "metrics" / "vllm033_pressure_0054.prom")
QUIET = str(FIXTURES / "metrics" / "v011_usage_split_across_api_servers.prom")


def test_textfile_naming_a_file_says_it_is_a_file(kvdiag, tmp_path):
    """--textfile takes the folder node_exporter reads; a file there was told as "no such folder"."""
    out = tmp_path / "kvdiag.prom"
    out.write_text("# kept\n")
    res = kvdiag("check", "--metrics-file", QUIET, "--textfile", str(out))
    status, details = nagios(res)
    assert res.code == 3 and "; textfile not written" in status
    assert f"textfile {out} not written (a file, not a folder: --textfile takes the folder node_exporter " \
           "reads, and kvdiag writes kvdiag.prom in it)" in details
    assert not any("no such folder" in d for d in details)
    assert out.read_text() == "# kept\n"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_pushgateway_down_is_told_without_urllib_words(kvdiag):
    """A refused push was shown as ``URLError: <urlopen error [Errno 111] Connection refused>``."""
    url = f"http://127.0.0.1:{_closed_port()}"
    res = kvdiag("check", "--metrics-file", QUIET, "--pushgateway", url)
    status, details = nagios(res)
    assert res.code == 3 and "; push failed" in status
    assert f"push to {url} failed (connection refused)" in details
    assert "URLError" not in res.out and "urlopen" not in res.out and "Errno" not in res.out


def test_push_reason_words():
    """The other urllib failures in words too: an HTTP status, a timeout, an unknown host."""
    import socket as s
    from urllib.error import HTTPError, URLError

    from kvdiag.check import push_reason

    assert push_reason(HTTPError("http://x/metrics/job/kvdiag", 500, "Internal Server Error", {}, None), 10) \
        == "HTTP 500 Internal Server Error"
    assert push_reason(URLError(s.timeout("timed out")), 2.5) == "no answer within 2.5s"
    assert push_reason(URLError(s.gaierror(-2, "Name or service not known")), 10) == "host name not found"


def _rule_folder(tmp_path):
    import shutil

    from kvdiag.engine.model import builtin_rules_dir

    src = next(iter(sorted(builtin_rules_dir().rglob("*.yaml"))))
    folder = tmp_path / "myrules"
    folder.mkdir()
    text = src.read_text()
    import re
    text = re.sub(r"(?m)^id: *(\S+)", "id: X\\1", text, count=1)
    (folder / "r0.yaml").write_text(text)
    return folder, text


@pytest.mark.parametrize("option, name", [("--out", "r0.yaml"), ("--tests", "r0.yaml"), ("--tests", "r0.json")])
def test_rules_export_never_writes_over_a_rule_file_it_reads(capsys, tmp_path, option, name):
    """``--out`` / ``--tests`` (or the ``.rules.yml`` beside the tests) on a rule file of ``--rules DIR`` overwrote
    it (the fuzz saw r0.yaml grow from 3 kB to 101 kB)."""
    folder, text = _rule_folder(tmp_path)
    if name == "r0.json":  # --tests r0.json writes its rules as r0.rules.yml: that one is a rule file too
        (folder / "r0.yaml").rename(folder / "r0.rules.yml")
    rc, out, err = run(capsys, "rules", "export", "--rules", str(folder), option, str(folder / name))
    victim = folder / ("r0.rules.yml" if name == "r0.json" else name)
    assert rc == 3 and out == "", err
    assert victim.read_text() == text
    assert err == f"kvdiag: error: {option} {victim}: is also an input ({folder}); kvdiag never overwrites its input\n"
    assert sorted(p.name for p in folder.iterdir()) == [victim.name]


def test_config_gain_on_a_huge_pool_is_no_overflow(capsys, tmp_path):
    """A log's pool of 1e308 tokens (finite) times the config's fp8 gain (2 for a bf16 cache) is infinite:
    ``math.floor`` raised OverflowError ("internal error") with --model-config. The fp8 row is left out now."""
    import json

    log = tmp_path / "vllm.log"
    log.write_text("INFO 05-11 09:31:12 api_server.py:1] The model's max seq len (4096) is larger than the maximum "
                   "number of tokens that can be stored in KV cache (1e308).\n")
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"],
                               "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4,
                               "head_dim": 128, "hidden_size": 2048, "num_experts": 128, "vocab_size": 151936,
                               "torch_dtype": "bfloat16"}))
    rc, out, err = run(capsys, "analyze", "--log", str(log), "--model-config", str(cfg), "--format", "json")
    assert "internal error" not in err and "Traceback" not in err, err
    assert rc in (0, 1, 2, 3) and json.loads(out)["verdict"]
    assert "inf" not in out.lower().replace("info", "")


@pytest.mark.parametrize("fmt", ["html", "text"])
def test_container_log_with_a_lone_surrogate_is_read(capsys, tmp_path, fmt):
    """A Docker / CRI JSON line whose ``log`` holds ``\\udcff`` (a JSON escape of an undecodable byte) gave
    "internal error: UnicodeEncodeError … surrogates not allowed" (the fuzz find wrote ``--format html
    --output``). The character is read as U+FFFD, as an undecodable byte of a plain log is."""
    lines = ['{"log":"(APIServer pid=1) INFO 05-19 10:12:03 [api_server.py:1] vLLM API server version 0.9.0\\n",'
             '"stream":"stderr","time":"2026-05-19T10:12:03.000000000Z"}',
             '{"log":"(EngineCore_DP0 pid=2) INFO 05-19 10:12:04 [kv_cache_utils.py:1] GPU KV cache size: 1,000 '
             'tokens \\udcff\\n","stream":"stderr","time":"2026-05-19T10:12:04.000000000Z"}']
    log = tmp_path / "vllm.log"
    log.write_text("\n".join(lines) + "\n")
    out_file = tmp_path / f"out.{fmt}"
    rc, out, err = run(capsys, "analyze", "--log", str(log), "--format", fmt, "--output", str(out_file))
    assert "internal error" not in err and "Traceback" not in err, err
    assert rc in (0, 1, 2, 3) and out_file.read_text(encoding="utf-8")


def test_analyze_trace_longer_than_the_logs_max_model_len_is_not_simulated(capsys, tmp_path):
    """``analyze --trace`` simulated prompts vLLM would reject (prompt_tokens ≥ the log's max_model_len) and the
    model ran past the blocks it had given a request: "internal error: IndexError". ``simulate`` itself refuses
    such a trace; ``analyze`` now says, in a note, why the trace was not simulated."""
    import json

    log = tmp_path / "vllm.log"
    log.write_text("(VllmWorker rank=0 pid=300) INFO 01-01 00:00:00 [gpu_worker.py:1] Maximum concurrency for "
                   "1,000 tokens per request: 3.5x\n")
    trace = tmp_path / "requests.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens,prefix_id,prefix_tokens,max_tokens\n"
                     "751.472,4591,222,,0,4096\n757.604,2828,1465,,0,4096\n757.953,2087,834,,0,834\n")
    rc, out, err = run(capsys, "analyze", "--log", str(log), "--trace", str(trace), "--step-cost",
                       "overhead_ms=4,weights_ms=45,compute_us_per_token=230,kv_read_ns_per_token=500",
                       "--metrics-file", PRESS, "--format", "json")
    assert "internal error" not in err and "Traceback" not in err, err
    notes = json.loads(out)["notes"]
    assert f"--trace {trace}: not simulated: request 0: prompt_tokens 4,591 is not below max_model_len 1,000 " \
           "(vLLM rejects it)" in notes, notes


def _cut_page() -> tuple[str, int]:
    """The pressure fixture page cut right after a number of its last sample line (no final line feed)."""
    from pathlib import Path

    lines = Path(PRESS).read_text().splitlines()
    n = max(i for i, line in enumerate(lines) if line.startswith("vllm:num_requests_running"))
    return "\n".join(lines[:n + 1])[:-1], n + 1     # '... 12' cut to '... 1'


def test_page_file_cut_mid_line_gets_a_note(capsys, tmp_path):
    """The text format ends every line with a line feed; a page cut right after a digit parsed clean, the cut
    value (12 read as 1) taken without a word."""
    import json

    text, lineno = _cut_page()
    page = tmp_path / "cut.prom"
    page.write_text(text)
    rc, out, err = run(capsys, "analyze", "--metrics-file", str(page), "--format", "json")
    assert "Traceback" not in err
    notes = [n for i in json.loads(out)["inputs"] for n in i["notes"]]
    assert any(n.startswith(f"{page}:{lineno}: the page ended mid-line (no line feed after its last line,")
               and "its last sample may be cut short" in n for n in notes), notes
    whole = tmp_path / "whole.prom"
    whole.write_text(text + "\n")
    rc, out, err = run(capsys, "analyze", "--metrics-file", str(whole), "--format", "json")
    assert not any("mid-line" in n for i in json.loads(out)["inputs"] for n in i["notes"])


def test_scraped_page_cut_mid_line_gets_a_note(capsys, static_server):
    import json

    text, _ = _cut_page()
    url = static_server(text.encode())
    rc, out, err = run(capsys, "analyze", "--metrics-url", url, "--duration", "1s", "--format", "json")
    assert "Traceback" not in err
    notes = [n for i in json.loads(out)["inputs"] for n in i["notes"]]
    assert any("the page ended mid-line (no line feed after its last line," in n for n in notes), notes


_OM_HEAD = '# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine="0"} 3 1700000000.000\n'


@pytest.mark.parametrize("tail, where, what", [
    ('# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{engine="0"} 1 1700000000.000\n'
     '# TYPE vllm:num_requests_running counter\nvllm:num_requests_running{engine="0"} 4 1700000015.000\n', 5,
     "# TYPE vllm:num_requests_running counter conflicts with its # TYPE gauge at line 1"),
    ('# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine="0"} 4 1700000015.000\n', 3,
     "# TYPE vllm:num_requests_running given again (first at line 1)"),
    ('vllm:num_requests_running{engine="0"} 4 253402300000.000\n', 3,
     "sample timestamp 253402300000.000 is not Unix seconds between 1970 and 2200"),
], ids=["type-conflict", "type-twice", "future-timestamp"])
def test_openmetrics_recording_faults_name_their_line(capsys, tmp_path, tail, where, what):
    """A TYPE clash was told as "FILE @ 1700000015.000: not Prometheus OpenMetrics" (the instant, no line), a
    timestamp of year 9999 as "FILE: sample timestamp …" (no line)."""
    rec = tmp_path / "rec.om"
    rec.write_text(_OM_HEAD + tail + "# EOF\n")
    rc, out, err = run(capsys, "analyze", "--metrics-file", str(rec))
    assert rc == 3 and "Traceback" not in err
    assert err.startswith(f"kvdiag: error: {rec}:{where}: {what}"), err
    assert len(err.strip().splitlines()) == 1


def test_openmetrics_page_type_conflict_names_its_line(capsys, tmp_path):
    """The same on one OpenMetrics page without timestamps (each line parses alone: the fault spans lines)."""
    page = tmp_path / "page.om"
    page.write_text('# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine="0"} 3\n'
                    '# TYPE vllm:num_requests_running counter\n# EOF\n')
    rc, out, err = run(capsys, "analyze", "--metrics-file", str(page))
    assert rc == 3 and err.startswith(f"kvdiag: error: {page}:3: # TYPE vllm:num_requests_running counter "
                                      "conflicts with its # TYPE gauge at line 1"), err
