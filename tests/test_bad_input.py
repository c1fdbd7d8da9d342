"""Bad input: one clear line on stderr naming what was wrong, exit 3, never a traceback."""

from __future__ import annotations

import socket

import pytest


def _refused_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    return port


def _one_clear_line(res, *needles: str):
    assert res.code == 3, (res.code, res.out, res.err)
    assert "Traceback" not in res.err + res.out
    lines = [line for line in res.err.strip().splitlines() if line.strip()]
    assert len(lines) == 1, lines
    err = lines[0]
    assert err.startswith("kvdiag: error: ")
    for n in needles:
        assert n in err, err
    return err


def test_missing_file(kvdiag, tmp_path):
    res = kvdiag("analyze", "--log", str(tmp_path / "nope.log"))
    _one_clear_line(res, "nope.log", "no such file")


def test_directory(kvdiag, tmp_path):
    res = kvdiag("analyze", "--log", str(tmp_path))
    _one_clear_line(res, str(tmp_path), "directory")


def test_empty_file(kvdiag, tmp_path):
    p = tmp_path / "empty.log"
    p.write_text("")
    _one_clear_line(kvdiag("analyze", "--log", str(p)), "empty.log", "empty")


def test_binary_garbage_log(kvdiag, tmp_path):
    p = tmp_path / "garbage.log"
    p.write_bytes(bytes(range(256)) * 64)
    _one_clear_line(kvdiag("analyze", "--log", str(p)), "garbage.log", "binary")


def test_binary_garbage_metrics_file(kvdiag, tmp_path):
    p = tmp_path / "garbage.prom"
    p.write_bytes(bytes(range(256)) * 64)
    _one_clear_line(kvdiag("analyze", "--metrics-file", str(p)), "garbage.prom")


def test_text_that_is_not_a_vllm_log_is_inconclusive(kvdiag, tmp_path):
    p = tmp_path / "notes.txt"
    p.write_text("shopping list\neggs\nmilk\n")
    res = kvdiag("analyze", "--log", str(p), "--format", "json")
    assert res.code == 3
    assert res.json()["verdict"]["primary"] == "inconclusive"


def test_non_prometheus_http_body(kvdiag, static_server):
    url = static_server(b"<!DOCTYPE html><html><body>hello</body></html>", ctype="text/html")
    err = _one_clear_line(kvdiag("analyze", "--metrics-url", url, "--duration", "1s"), url, "HTML")
    assert "text/html" in err


def test_http_error_status(kvdiag, static_server):
    url = static_server(b"unauthorized", ctype="text/plain", status=401)
    _one_clear_line(kvdiag("analyze", "--metrics-url", url, "--duration", "1s"), url, "HTTP 401")


def test_refused_port(kvdiag):
    url = f"http://127.0.0.1:{_refused_port()}/metrics"
    _one_clear_line(kvdiag("analyze", "--metrics-url", url, "--duration", "1s"), url, "refused")


def test_unknown_option(kvdiag):
    _one_clear_line(kvdiag("analyze", "--frobnicate"), "--frobnicate")


def test_no_source(kvdiag):
    _one_clear_line(kvdiag("analyze"), "at least one source")


@pytest.mark.parametrize("value", ["30", "abc", "5 m", "-1s"])
def test_bad_duration(kvdiag, value, tmp_path):
    _one_clear_line(kvdiag("analyze", "--metrics-url", "http://127.0.0.1:9/metrics", "--duration", value),
                    "duration")


def test_bad_model_config(kvdiag, tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text("{not json")
    log = tmp_path / "v.log"
    log.write_text("INFO 01-01 00:00:00 [x.py:1] GPU KV cache size: 1,000 tokens\n")
    _one_clear_line(kvdiag("analyze", "--log", str(log), "--model-config", str(cfg)), "config.json", "JSON")


def test_debug_shows_the_traceback(kvdiag, tmp_path):
    res = kvdiag("analyze", "--debug", "--log", str(tmp_path / "nope.log"))
    assert res.code != 0
    assert "Traceback" in res.err


def test_bare_kvdiag_and_bare_rules_show_their_help_and_exit_0(kvdiag):
    for args in ((), ("rules",)):
        res = kvdiag(*args)
        assert res.code == 0 and res.err == "", (args, res.err)
        assert res.out.startswith("Usage: kvdiag") and "Commands:" in res.out


def test_durations_take_days_up_to_the_limit(kvdiag):
    from kvdiag.engine.model import parse_duration

    assert parse_duration("7d") == 7 * 86400 and parse_duration("1.5d") == 129600
    res = kvdiag("analyze", "--log", "fixtures/incidents/029-mtp-benchmark-queueing-kv-95pct-ttft-214s/vllm.log",
                 "--duration", "8d")
    assert res.code == 3 and "too long: at most 7d" in res.err


def test_check_help_shows_its_own_duration_default(kvdiag):
    out = " ".join(kvdiag("check", "--help").out.split())
    assert "[default: (1s: one scrape; with --state, since the last check)]" in out


def test_empty_output_path_is_a_usage_error_not_stdout(kvdiag):
    res = kvdiag("analyze", "--log", "fixtures/incidents/029-mtp-benchmark-queueing-kv-95pct-ttft-214s/vllm.log",
                 "--output", "")
    assert res.code == 3 and res.out == "" and "--output '': expected a file path" in res.err
