"""Inputs and outputs that are not ordinary files: devices, pipes, the input itself (second bad-input pass)."""

from __future__ import annotations

import os
import stat

import pytest

from conftest import FIXTURES

LOG = str(next((FIXTURES / "incidents").glob("029-*")) / "vllm.log")


@pytest.mark.parametrize("args", [
    ["analyze", "--metrics-file", "/dev/zero"],
    ["analyze", "--model-config", "/dev/zero", "--gpu-memory", "80"],
    ["analyze", "--metrics-url", "http://127.0.0.1:9/metrics", "--bearer-token-file", "/dev/zero"],
    ["check", "--log", LOG, "--state", "/dev/zero"],
])
def test_endless_devices_are_refused_at_once(kvdiag, args):
    res = kvdiag(*args, timeout=60)
    assert res.code == 3
    assert "not a regular file" in res.err and "Traceback" not in res.err


def test_output_never_overwrites_an_input(kvdiag, tmp_path):
    log = tmp_path / "vllm.log"
    log.write_bytes(open(LOG, "rb").read())
    before = log.read_bytes()
    res = kvdiag("analyze", "--log", str(log), "--output", str(log))
    assert res.code == 3 and "is also an input" in res.err
    assert log.read_bytes() == before


def test_output_is_written_whole(kvdiag, tmp_path):
    out = tmp_path / "report.json"
    res = kvdiag("analyze", "--log", LOG, "--format", "json", "--output", str(out))
    assert res.code == 2 and res.out == ""
    assert out.read_text().startswith("{") and not list(tmp_path.glob(".*.tmp"))


def test_export_to_a_pipe_is_refused_and_the_pipe_survives(kvdiag, tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    res = kvdiag("rules", "export", "--out", str(fifo), timeout=60)
    assert res.code == 3 and "not a regular file" in res.err
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_record_never_overwrites_a_log(kvdiag, tmp_path):
    log = tmp_path / "vllm.log"
    log.write_text("INFO 01-01 00:00:00 [x.py:1] hello\n")
    res = kvdiag("record", "--metrics-url", "http://127.0.0.1:9/metrics", "--out", str(log), "--duration", "1s")
    assert res.code == 3 and "not an OpenMetrics recording" in res.err
    assert log.read_text().startswith("INFO")


def test_check_speaks_nagios_even_on_bad_options(kvdiag):
    res = kvdiag("check", "--log", LOG, "--fail-on", "banana")
    assert res.code == 3
    status, *details = res.out.splitlines()  # one status line of at most 200 characters, the rest of the error below
    assert status.startswith("KVDIAG UNKNOWN - --fail-on 'banana'") and len(status) <= 200
    assert all(not d.startswith("KVDIAG") and "|" not in d for d in details)


@pytest.mark.parametrize("since", ["99999999999999999999999s", "9600h"])
def test_fleet_window_is_bounded(kvdiag, since):
    res = kvdiag("analyze", "--prometheus-url", "http://127.0.0.1:9", "--since", since, timeout=60)
    assert res.code == 3 and "at most 366 days" in res.err


def test_fleet_step_is_raised_for_long_windows(kvdiag):
    res = kvdiag("analyze", "--prometheus-url", "http://127.0.0.1:9", "--since", "8760h", timeout=60)
    assert "--step raised from 15s to 2868s" in res.err


def test_fleet_window_options_without_prometheus_are_refused(kvdiag):
    res = kvdiag("analyze", "--log", LOG, "--since", "6h")
    assert res.code == 3 and "--since only applies to --prometheus-url" in res.err
