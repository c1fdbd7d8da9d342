"""The defects of issue 19, one test each (each failed before its fix): a hang on rule files, FIFOs and /dev/zero,
odd numbers in /metrics pages, recordings and config.json, an unknown evidence aggregation, URL secrets, a state
write that fails, and "connected, reply not HTTP" told from "cannot connect"."""

from __future__ import annotations

import json
import os
import resource
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from conftest import FIXTURES, ROOT, run_kvdiag
from kvdiag.collect.metrics import safe_url
from kvdiag.redaction import redact

PAGE = FIXTURES / "metrics" / "vllm033_quiet_0030.prom"
LLAMA = FIXTURES / "models" / "llama-3.1-8b-instruct.json"
RULE_HEAD = ['id: X1', 'name: x', 'class: healthy', 'title: t', 'severity: ok', 'message: m',
             'when: {signal: kv_cache_usage, agg: max, op: ">", value: 1}']
DOC = 'doc: {meaning: a, impact: a, diagnosis: a, false_positives: a, remedy: a}'


def _one_error(res, *needles, code=3):
    assert res.code == code, (res.code, res.out[-500:], res.err[-500:])
    assert "internal error" not in res.err and "Traceback" not in res.err, res.err[-1000:]
    for n in needles:
        assert n in res.err, res.err[-500:]


# --- the hang ---------------------------------------------------------------------------------------------------

def test_yaml_alias_bomb_in_a_rule_file_is_refused_fast(tmp_path):
    lines = RULE_HEAD + ['doc: {meaning: a, impact: a, diagnosis: a, false_positives: a, '
                         'remedy: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]}', 'references:']
    prev = "a"
    for c in "bcdefghi":
        lines.append(f"  - &{c} [" + ",".join([f"*{prev}"] * 9) + "]")
        prev = c
    (tmp_path / "bomb.yaml").write_text("\n".join(lines) + "\n")
    assert (tmp_path / "bomb.yaml").stat().st_size < 5000
    t0 = time.monotonic()
    for verb in (["rules", "list"], ["analyze", "--metrics-file", str(PAGE)]):
        res = run_kvdiag(*verb, "--rules", str(tmp_path), timeout=30)
        _one_error(res, "bomb.yaml", "expands to more than")
    assert time.monotonic() - t0 < 20


def test_fifo_named_yaml_in_a_rules_folder_is_refused(tmp_path):
    os.mkfifo(tmp_path / "pipe.yaml")
    res = run_kvdiag("rules", "list", "--rules", str(tmp_path), timeout=20)
    _one_error(res, "pipe.yaml", "not a regular file")


@pytest.mark.parametrize("which", ["fifo", "/dev/zero"])
def test_estimate_model_config_fifo_or_dev_zero_is_refused(tmp_path, which):
    path = "/dev/zero"
    if which == "fifo":
        path = str(tmp_path / "config.json")
        os.mkfifo(path)
    res = run_kvdiag("estimate", "--model-config", path, "--gpu-memory", "80", timeout=20)
    _one_error(res, "not a regular file")


# --- odd numbers -------------------------------------------------------------------------------------------------

def _page_with(tmp_path, old: str, new: str, name: str = "p.prom"):
    text = PAGE.read_text()
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith(old):
            lines[i] = new(line)
            break
    else:
        raise AssertionError(old)
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n")
    return p


@pytest.mark.parametrize("ts", ["1e20", "NaN", "-1e17", "1e400"])
def test_metrics_sample_timestamp_out_of_range_is_skipped_with_a_note(tmp_path, ts):
    p = _page_with(tmp_path, "vllm:kv_cache_usage_perc{", lambda line: f"{line} {ts}")
    res = run_kvdiag("analyze", "--metrics-file", str(p), "--format", "json")
    assert res.code in (0, 1, 2, 3) and "internal error" not in res.err, res.err
    assert "sample timestamp: not Unix seconds" in res.out


def test_histogram_le_that_is_no_number_is_skipped(tmp_path):
    p = _page_with(tmp_path, "vllm:request_prompt_tokens_bucket{",
                   lambda line: line.replace('le="1.0"', 'le="1.2.3"'))
    res = run_kvdiag("analyze", "--metrics-file", str(p), "--format", "json")
    assert "internal error" not in res.err, res.err
    assert "le label not a number" in res.out


def test_openmetrics_integer_too_large_for_a_float_is_out_of_domain(tmp_path):
    lines = [line + " 1700000000" for line in PAGE.read_text().splitlines() if line and not line.startswith("#")]
    for i, line in enumerate(lines):
        if line.startswith("vllm:num_requests_running{"):
            series = line.rsplit(" ", 2)[0]
            lines[i] = f"{series} {'9' * 400} 1700000000"
    p = tmp_path / "rec.prom"
    p.write_text("\n".join(lines) + "\n# EOF\n")
    res = run_kvdiag("analyze", "--metrics-file", str(p), "--format", "json")
    assert "internal error" not in res.err, res.err
    assert "num_requests_running: +Inf" in res.out


@pytest.mark.parametrize("digits", [400, 5000])
@pytest.mark.parametrize("verb", ["estimate", "analyze"])
def test_config_integer_with_hundreds_or_thousands_of_digits_is_refused(tmp_path, digits, verb):
    text = LLAMA.read_text()
    cfg = json.loads(text)
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg).replace(f'"num_hidden_layers": {cfg["num_hidden_layers"]}',
                                         '"num_hidden_layers": ' + "9" * digits))
    args = ["--model-config", str(p)] + (["--gpu-memory", "80"] if verb == "estimate" else
                                         ["--metrics-file", str(PAGE)])
    res = run_kvdiag(verb, *args)
    _one_error(res, f"an integer of {digits:,} digits")


@pytest.mark.parametrize("bad", ["x", [1], 1.5])
def test_gated_deltanet_linear_fields_of_the_wrong_type_are_refused(tmp_path, bad):
    cfg = json.loads(LLAMA.read_text())
    cfg.update(model_type="qwen3_next", full_attention_interval=4, num_hidden_layers=32, linear_num_value_heads=32,
               linear_num_key_heads=bad, linear_key_head_dim=128, linear_value_head_dim=128,
               linear_conv_kernel_dim=4)
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    res = run_kvdiag("estimate", "--model-config", str(p), "--gpu-memory", "80")
    _one_error(res, "linear_num_key_heads", "expected an integer")


def test_rule_evidence_with_an_unknown_aggregation_is_refused_at_load(tmp_path):
    (tmp_path / "r.yaml").write_text("\n".join(RULE_HEAD + [DOC, "evidence: [kv_cache_usage.median]"]) + "\n")
    res = run_kvdiag("analyze", "--metrics-file", str(PAGE), "--rules", str(tmp_path))
    _one_error(res, "r.yaml", "unknown agg 'median'")


# --- secrets ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("url,shown", [
    ("http://h:9090/metrics?jwt=SeKr1t", "http://h:9090/metrics?jwt=***"),
    ("http://h/m?page=2&x=SeKr1t;y=SeKr1t", "http://h/m?page=***&x=***;y=***"),
    ("http://u:pa#SeKr1t@h:8000/metrics", "http://h:8000/metrics"),
    ("http://u:pa?SeKr1t@h:8000/metrics", "http://h:8000/metrics"),
    ("http://u:pa/SeKr1t@h:8000/metrics", "http://h:8000/metrics"),
])
def test_safe_url_hides_every_query_value_and_odd_userinfo(url, shown):
    assert safe_url(url) == shown
    assert "SeKr1t" not in redact(f"error at {url}: refused")


@pytest.mark.parametrize("line", ["AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE", "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7",
                                  "SECRET_KEY=SeKr1t", "https://b/k?X-Amz-Signature=SeKr1t&X-Amz-Date=1"])
def test_log_redactor_knows_cloud_key_forms(line):
    out = redact(line)
    assert "SeKr1t" not in out and "AKIAIOSFODNN7EXAMPLE" not in out and "wJalrXUtnFEMI" not in out, out


def test_metrics_url_query_secret_reaches_no_output_and_no_state_key(tmp_path, static_server):
    url = static_server(PAGE.read_bytes()) + "?jwt=SeKr1tJwt"
    state = tmp_path / "state.json"
    tf = tmp_path / "tf"
    tf.mkdir()
    res = run_kvdiag("check", "--metrics-url", url, "--state", str(state), "--textfile", str(tf))
    assert res.code in (0, 1, 2), res.err
    texts = [res.out, res.err, state.read_text(), (tf / "kvdiag.prom").read_text()]
    for fmt in ("text", "json", "markdown"):
        r = run_kvdiag("analyze", "--metrics-url", url, "--duration", "0.2s", "--interval", "0.1s", "--format", fmt)
        texts += [r.out, r.err]
    rec = tmp_path / "r.prom"
    r = run_kvdiag("record", "--metrics-url", url, "--out", str(rec), "--duration", "0.2s", "--interval", "0.1s")
    texts += [r.out, r.err]
    assert not [t for t in texts if "SeKr1tJwt" in t]
    assert "jwt=***" in state.read_text()


# --- writes -----------------------------------------------------------------------------------------------------

def _limit_file_size():
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (16, 16))


def test_check_state_write_failure_leaves_no_temp_file_and_the_old_state(tmp_path, static_server):
    url = static_server(PAGE.read_bytes())
    state = tmp_path / "state.json"
    res = run_kvdiag("check", "--metrics-url", url, "--state", str(state))
    assert res.code in (0, 1, 2) and state.exists()
    before = state.read_text()
    proc = subprocess.run([sys.executable, "-m", "kvdiag", "check", "--metrics-url", url, "--state", str(state)],
                          capture_output=True, text=True, cwd=ROOT, timeout=60, preexec_fn=_limit_file_size)
    assert "state file not written" in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    assert state.read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]


# --- connected, but not HTTP ------------------------------------------------------------------------------------

def _raw_server(payload: bytes) -> str:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(8)

    def loop():
        while True:
            try:
                c, _ = s.accept()
            except OSError:
                return
            try:
                c.recv(65536)
                c.sendall(payload)
            except OSError:
                pass
            c.close()

    threading.Thread(target=loop, daemon=True).start()
    return f"http://127.0.0.1:{s.getsockname()[1]}/metrics"


@pytest.mark.parametrize("payload,words", [
    (b"SSH-2.0-OpenSSH_9.6\r\n", "connected, but the reply is not HTTP"),
    (b"HTTP/1.1 200 OK\r\nX-A: " + b"a" * 200_000 + b"\r\n\r\n", "connected, but a reply header line is too long"),
    (b"HTTP/1.1 99999 WAT\r\nContent-Length: 0\r\n\r\n", "connected, but the reply is not HTTP"),
    (b"", "connected, but the server closed the connection"),
])
def test_a_reply_that_is_not_http_is_not_cannot_connect(payload, words):
    res = run_kvdiag("analyze", "--metrics-url", _raw_server(payload), "--duration", "0.2s", "--interval", "0.1s",
                     "--timeout", "3s")
    _one_error(res, words)


def test_refused_is_still_refused():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    res = run_kvdiag("analyze", "--metrics-url", f"http://127.0.0.1:{port}/metrics", "--timeout", "2s")
    _one_error(res, "connection refused")


@pytest.mark.parametrize("label", ["jwt", "token", "note", "url"])
def test_recording_parse_error_quotes_no_label_value_secret(tmp_path, label):
    p = tmp_path / "rec.prom"
    p.write_text('vllm:num_requests_running{engine="0",%s="SeKr1tLbl"} oops 1700000001\n# EOF\n' % label)
    res = run_kvdiag("analyze", "--metrics-file", str(p))
    _one_error(res, "not Prometheus OpenMetrics", f'{label}="***"')
    assert "SeKr1tLbl" not in res.err + res.out


@pytest.mark.parametrize("line", [
    # a stats line ending in a run of 150,000 digits: the engine-tag pattern was quadratic in it (fuzz campaign find)
    "INFO 01-01 00:00:00 [loggers.py:1] Avg prompt throughput: 1.0 tokens/s, Running: 1 reqs, GPU KV cache usage: "
    "1.0%, " + "9" * 150_000,
    # a word of 150,000 characters before ' blocks: ' (the K1 '# GPU blocks' pattern)
    "INFO 01-01 00:00:00 [x.py:1] " + "9" * 150_000 + "x blocks: 12",
])
def test_a_long_line_of_digits_is_read_in_linear_time(tmp_path, line):
    from kvdiag.bundle import Bundle
    from kvdiag.collect.logs import read_logs

    p = tmp_path / "vllm.log"
    p.write_text(line + "\n")
    t0 = time.process_time()
    read_logs(Bundle(), [str(p)], year=2025, progress=False)
    assert time.process_time() - t0 < 2.0


def test_a_line_repeating_one_message_is_matched_in_linear_time(tmp_path):
    """The catalogue's template of ~30 lazy placeholders ('Initializing a V0 LLM engine ... with config: model=...')
    backtracked polynomially on a line holding the message ten times (campaign find: 96 s on 8 kB)."""
    from kvdiag.bundle import Bundle
    from kvdiag.collect.logs import read_logs

    src = next(line for p in sorted((FIXTURES / "logs" / "real").glob("*/evidence.log"))
               for line in p.read_text(errors="replace").splitlines() if "Initializing a V0 LLM engine" in line)
    p = tmp_path / "vllm.log"
    p.write_text(src + src * 12 + "\n")
    t0 = time.process_time()
    read_logs(Bundle(), [str(p)], year=2025, progress=False)
    assert time.process_time() - t0 < 3.0
