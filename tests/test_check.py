"""kvdiag check: the one-line Nagios output, exit codes, state between runs, textfile output."""

from __future__ import annotations

import json
import re
import threading
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, Gauge, make_wsgi_app
from prometheus_client.core import CounterMetricFamily
from prometheus_client.parser import text_string_to_metric_families
import pytest

from conftest import FIXTURES

INCIDENTS = FIXTURES / "incidents"
LINE = re.compile(r"^KVDIAG (OK|WARNING|CRITICAL|UNKNOWN) - [^|\n]+( \| [^\n]+)?$")


def case(prefix: str) -> str:
    return str(next(INCIDENTS.glob(f"{prefix}-*")) / "vllm.log")


def nagios(res) -> tuple[str, list[str]]:
    """Nagios plugin output: ``(status line, long-output lines)``. The status line is at most 200 characters
    before `` | perfdata``; long-output lines carry no ``|`` and no second status."""
    lines = res.out.splitlines()
    assert lines and LINE.match(lines[0]), res.out
    assert len(lines[0].split(" | ", 1)[0]) <= 200, lines[0]
    for extra in lines[1:]:
        assert extra.strip() and "|" not in extra and not extra.startswith("KVDIAG "), res.out
    assert "Traceback" not in res.err
    return lines[0], lines[1:]


def one_line(res) -> str:
    """The status line (see :func:`nagios`)."""
    return nagios(res)[0]


@pytest.mark.parametrize("args, code, status", [
    (["--log", case("029")], 2, "CRITICAL"),                                  # capacity_pressure, critical
    (["--log", case("017")], 1, "WARNING"),                                   # partial_block_waste, warning
    (["--metrics-file", str(FIXTURES / "metrics" / "vllm033_quiet_0030.prom")], 0, "OK"),
    (["--metrics-url", "http://127.0.0.1:9/metrics"], 3, "UNKNOWN"),          # refused: could not judge
    (["--log", str(FIXTURES / "models" / "README.md")], 3, "UNKNOWN"),        # nothing evaluable
])
def test_exit_code_and_line_per_severity(kvdiag, args, code, status):
    res = kvdiag("check", *args)
    line = one_line(res)
    assert res.code == code
    assert line.startswith(f"KVDIAG {status} - ")


def test_check_agrees_with_analyze(kvdiag):
    for prefix in ("001", "009", "019", "029", "032"):
        a = kvdiag("analyze", "--log", case(prefix), "--format", "json")
        c = kvdiag("check", "--log", case(prefix))
        verdict = a.json()["verdict"]
        assert one_line(c).startswith(f"KVDIAG {'CRITICAL' if verdict['severity'] == 'critical' else 'WARNING'} - "
                                      f"{verdict['primary']}:")
        assert a.code == c.code


def test_perfdata(kvdiag):
    line = one_line(kvdiag("check", "--log", case("029")))
    perf = dict(p.split("=", 1) for p in line.split(" | ", 1)[1].split())
    # fixed, distinct thresholds (warning 0.95, critical 1: kvdiag/check.py), the same on every run
    assert perf["kv_cache_usage"] == "0.965;0.95;1;0;1"  # the last run's peak (run 1 reached 98.4 %)
    assert perf["waiting"] == "56;;;0"
    assert line.startswith("KVDIAG CRITICAL")
    # a quiet server: the same thresholds, and the status is the verdict's (OK)
    quiet = one_line(kvdiag("check", "--metrics-file", str(FIXTURES / "metrics" / "vllm033_quiet_0030.prom")))
    perf = dict(p.split("=", 1) for p in quiet.split(" | ", 1)[1].split())
    assert perf["kv_cache_usage"].endswith(";0.95;1;0;1") and quiet.startswith("KVDIAG OK")


def test_warn_on_fail_on(kvdiag):
    res = kvdiag("check", "--log", case("029"), "--warn-on", "capacity_pressure")
    assert res.code == 1 and one_line(res).startswith("KVDIAG WARNING - capacity_pressure")
    res = kvdiag("check", "--log", case("017"), "--fail-on", "partial_block_waste")
    assert res.code == 2
    res = kvdiag("check", "--log", case("029"), "--fail-on", "weights_dont_fit")
    assert res.code == 0 and one_line(res).startswith("KVDIAG OK - capacity_pressure")


@pytest.mark.parametrize("content", [
    '{"version": 1, "instances": {"x": {"t": "soon"}}}',
    '{"version": 1, "instances": {"x": {"t": NaN}}}',
    '{"version": 1, "instances": {"x": {"t": 1e12}}}',                  # year 33658: far in the future
    '{"version": 1, "instances": {"x": {"t": 1.7e9, "counters": {"num_preemptions": Infinity}}}}',
    '{"version": 1, "instances": {"x": {"t": 1.7e9, "process_start_time": "x"}}}',
    '{"version": 1, "instances": []}',
])
def test_corrupt_state_file_never_crashes(kvdiag, tmp_path, content):
    state = tmp_path / "state.json"
    state.write_text(content)
    # a critical verdict still shows through a bad state file
    res = kvdiag("check", "--log", case("029"), "--state", str(state), "--instance", "x")
    line = one_line(res)
    assert res.code == 2
    assert "starting fresh" in line
    # an OK verdict with a bad state file is UNKNOWN (the window since the last check could not be judged) ...
    state.write_text(content)
    quiet = str(FIXTURES / "metrics" / "vllm033_quiet_0030.prom")
    res = kvdiag("check", "--metrics-file", quiet, "--state", str(state), "--instance", "x")
    assert res.code == 3 and one_line(res).startswith("KVDIAG UNKNOWN - healthy")
    # ... and the state was rewritten, so the next run is OK again
    res = kvdiag("check", "--metrics-file", quiet, "--state", str(state), "--instance", "x")
    assert res.code == 0 and one_line(res).startswith("KVDIAG OK - healthy")


def test_state_in_a_missing_folder_is_refused(kvdiag, tmp_path):
    state = tmp_path / "sub" / "state.json"
    res = kvdiag("check", "--log", case("009"), "--state", str(state))
    status, _ = nagios(res)
    assert res.code == 3 and status.startswith(f"KVDIAG UNKNOWN - --state {state}: folder ")  # Nagios line
    assert res.err.strip() == f"kvdiag: error: --state {state}: folder {state.parent} does not exist " \
                              "(kvdiag does not create it)"
    assert not state.parent.exists()
    (tmp_path / "sub").mkdir()
    one_line(kvdiag("check", "--log", case("009"), "--state", str(state)))
    assert json.loads(state.read_text())["instances"]


class Endpoint:
    """A vLLM-like /metrics endpoint whose counter and process start time a test sets between checks."""

    def __init__(self):
        self.reg = CollectorRegistry()
        lab = ["engine", "model_name"]
        self.usage = Gauge("vllm:kv_cache_usage_perc", "usage", lab, registry=self.reg)
        self.waiting = Gauge("vllm:num_requests_waiting", "waiting", lab, registry=self.reg)
        self.preemptions = 0.0
        endpoint = self

        class Preemptions:  # a counter whose value the test sets (a restart sets it back), via a custom collector
            def collect(self):
                fam = CounterMetricFamily("vllm:num_preemptions", "preemptions", labels=lab)
                fam.add_metric(["0", "m"], endpoint.preemptions)
                yield fam

        self.reg.register(Preemptions())
        self.start = Gauge("process_start_time_seconds", "start", registry=self.reg)
        self.usage.labels("0", "m").set(0.99)
        self.waiting.labels("0", "m").set(0)
        self.start.set(1_700_000_000)

        class Q(WSGIRequestHandler):
            def log_message(self, *a):
                pass
        self.srv = make_server("127.0.0.1", 0, make_wsgi_app(self.reg), handler_class=Q)
        self.url = f"http://127.0.0.1:{self.srv.server_port}/metrics"
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def set_preemptions(self, value: float):
        self.preemptions = float(value)

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()


@pytest.fixture
def endpoint():
    e = Endpoint()
    yield e
    e.close()


def _perf(line: str) -> dict:
    return dict(p.split("=", 1) for p in line.split(" | ", 1)[1].split()) if " | " in line else {}


def test_two_checks_judge_only_the_increase_between_them(kvdiag, endpoint, tmp_path):
    state = str(tmp_path / "state.json")
    endpoint.set_preemptions(100)
    first = kvdiag("check", "--metrics-url", endpoint.url, "--state", state)
    # one scrape, no previous run: the counter's increase cannot be judged, never read as 100 preemptions
    assert "preemptions" not in _perf(one_line(first))
    endpoint.set_preemptions(103)
    second = kvdiag("check", "--metrics-url", endpoint.url, "--state", state)
    line = one_line(second)
    assert _perf(line)["preemptions"].split(";")[0] == "3"
    assert second.code == 2 and "capacity_pressure" in line
    endpoint.set_preemptions(103)
    third = kvdiag("check", "--metrics-url", endpoint.url, "--state", state)
    line = one_line(third)
    assert _perf(line)["preemptions"].split(";")[0] == "0"
    # no preemption since: not capacity_pressure — but the pool stands at 99 %, past the perfdata's fixed warning
    # threshold (0.95), so the status is WARNING with the reason on the line (issue 39 item 8), never OK
    assert third.code == 1 and "capacity_pressure" not in line and "KV usage 99.0% ≥ 95%" in line


def test_restart_between_checks_is_reported_not_a_negative_rate(kvdiag, endpoint, tmp_path):
    state = str(tmp_path / "state.json")
    endpoint.set_preemptions(50)
    one_line(kvdiag("check", "--metrics-url", endpoint.url, "--state", state))
    endpoint.set_preemptions(2)               # the server restarted and preempted twice since
    endpoint.start.set(1_700_000_600)
    res = kvdiag("check", "--metrics-url", endpoint.url, "--state", state)
    line = one_line(res)
    assert "restarted since the last check" in line
    assert _perf(line)["preemptions"].split(";")[0] == "2"   # counted from zero, never 2 - 50


def test_textfile_is_written_atomically_with_the_series(kvdiag, tmp_path):
    out = tmp_path / "textfile"
    out.mkdir()
    res = kvdiag("check", "--log", case("029"), "--textfile", str(out), "--instance", "gpu-node-1")
    one_line(res)
    files = sorted(p.name for p in out.iterdir())
    assert files == ["kvdiag.prom"]                        # no temporary file left behind
    fams = {f.name: f for f in text_string_to_metric_families((out / "kvdiag.prom").read_text())}
    verdict = fams["kvdiag_verdict"].samples[0]
    assert verdict.labels == {"vllm_instance": "gpu-node-1", "class": "capacity_pressure", "severity": "critical"}
    assert fams["kvdiag_check_success"].samples[0].value == 1
    assert fams["kvdiag_last_run_timestamp_seconds"].samples[0].value > 1.7e9
    firing = [s for s in fams["kvdiag_finding"].samples if s.value == 1]
    problems = [s for s in firing if s.labels["severity"] != "ok"]
    assert [s.labels["rule_id"] for s in problems] == ["CAP001"]
    assert problems[0].labels["status"] == "fires"
    # notes ("not a KV problem") are series with class healthy and severity ok; on 029's last run (10 s of stats
    # lines) OK003 "prompts share no prefix" needs a hit-rate window of minutes, so it is unknown, not quiet
    assert not [s for s in firing if s.labels["severity"] == "ok"]
    ok003 = [s for s in fams["kvdiag_finding"].samples if s.labels["rule_id"] == "OK003"]
    assert [(s.labels["class"], s.labels["status"], s.value) for s in ok003] == [("healthy", "unknown", 0.0)]


def test_textfile_on_unknown_sets_success_zero(kvdiag, tmp_path):
    out = tmp_path / "tf"
    out.mkdir()
    res = kvdiag("check", "--metrics-url", "http://127.0.0.1:9/metrics", "--textfile", str(out), "--instance", "a")
    assert res.code == 3
    fams = {f.name: f for f in text_string_to_metric_families((out / "kvdiag.prom").read_text())}
    assert fams["kvdiag_check_success"].samples[0].value == 0
    assert "kvdiag_verdict" not in fams
