"""Ctrl-C (SIGINT) or SIGTERM during a live window (issue 11, "Must show" 2): the window ends early and what was
scraped is judged, with a "cut short" note and the verdict's exit code; a second signal aborts at once (130);
a signal before any scrape succeeded is 130 as before. Also the progress line's named peak and last reading.

Real parts: a prometheus-client /metrics server on 127.0.0.1 (scripted: the n-th scrape shows the n-th value),
``python -m kvdiag`` in a subprocess, real signals."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
import pytest

from conftest import ROOT
from test_check import nagios

LAB = ["engine", "model_name"]


class _Quiet(WSGIRequestHandler):
    def log_message(self, *args):
        pass


class _Threading(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class Scripted:
    """vLLM 0.33 /metrics (prometheus-client's registry and WSGI app) whose n-th scrape shows ``usage[n]`` (the
    last value after that), 2 more preemptions each scrape and ``waiting`` requests waiting. From scrape
    ``stall_from`` on (1-based) the server holds every request until the test ends: a scrape in flight."""

    def __init__(self, usage: list[float], waiting: int = 5, stall_from: int | None = None):
        self.usage, self.waiting, self.stall_from = usage, waiting, stall_from
        self.hits = 0
        self.lock = threading.Lock()
        self.release = threading.Event()
        self.served = threading.local()
        reg = CollectorRegistry()
        reg.register(self)
        app = make_wsgi_app(reg)

        def counting(environ, start_response):
            with self.lock:
                self.hits += 1
                n = self.hits
            self.served.n = n
            if self.stall_from is not None and n >= self.stall_from:
                self.release.wait(60)
            return app(environ, start_response)

        self.server = make_server("127.0.0.1", 0, counting, server_class=_Threading, handler_class=_Quiet)
        self.url = f"http://127.0.0.1:{self.server.server_port}/metrics"

    def describe(self):
        return []

    def collect(self):
        n = getattr(self.served, "n", 1)
        g = GaugeMetricFamily("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", labels=LAB)
        g.add_metric(["0", "m"], self.usage[min(n, len(self.usage)) - 1])
        yield g
        for name, value in (("vllm:num_requests_running", 40), ("vllm:num_requests_waiting", self.waiting)):
            fam = GaugeMetricFamily(name, name, labels=LAB)
            fam.add_metric(["0", "m"], value)
            yield fam
        c = CounterMetricFamily("vllm:num_preemptions", "Cumulative number of preemption from the engine.",
                                labels=LAB)
        c.add_metric(["0", "m"], 2.0 * n)
        yield c
        info = GaugeMetricFamily("vllm:cache_config_info", "Information of the LLMEngine CacheConfig",
                                 labels=["block_size", "num_gpu_blocks", "engine"])
        info.add_metric(["16", "27776", "0"], 1)
        yield info

    def wait_hits(self, n: int, timeout: float = 60) -> None:
        """Until ``n`` scrapes arrived (kvdiag started, its window is running)."""
        end = time.monotonic() + timeout
        while self.hits < n:
            assert time.monotonic() < end, f"only {self.hits} scrape(s) in {timeout}s"
            time.sleep(0.05)

    def __enter__(self):
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


def start(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "kvdiag", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT)


def finish(proc: subprocess.Popen, timeout: float = 30) -> tuple[int, str, str, float]:
    """Wait for ``proc``; ``(code, stdout, stderr, seconds it took)``."""
    t0 = time.monotonic()
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    return proc.returncode, out, err, time.monotonic() - t0


LIVE = ["--duration", "60s", "--interval", "500ms"]
CUT = r"window cut short at (\d+(?:\.\d)?) s of 60 s by an interrupt \((SIGINT|SIGTERM)\); judged on the (\d+) scrape\(s\) taken"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_one_signal_ends_the_window_and_judges_what_was_scraped(sig):
    import re

    with Scripted(usage=[0.97, 0.99, 0.98]) as srv:
        t0 = time.monotonic()
        proc = start("analyze", "--metrics-url", srv.url, *LIVE, "--format", "json")
        srv.wait_hits(4)
        proc.send_signal(sig)
        code, out, err, took = finish(proc)
    report = json.loads(out)
    assert report["verdict"]["primary"] == "capacity_pressure", report["verdict"]
    assert code == report_code(report) == 2, err                   # the verdict's code, not 130
    assert took < 5 and time.monotonic() - t0 < 45, took            # well under the 60 s asked for
    notes = [n for n in report["notes"] if "cut short" in n]
    assert len(notes) == 1, report["notes"]
    m = re.fullmatch(CUT, notes[0])
    assert m and m.group(2) == sig.name, notes[0]
    scrapes = int(m.group(3))
    assert scrapes == report["inputs"][0]["records"] >= 4            # every scrape taken is judged
    assert 1.0 <= float(m.group(1)) < 40
    cap = next(f for f in report["findings"] if f["class"] == "capacity_pressure")
    ev = {e["signal"]: e["value"] for e in cap["evidence"]}
    assert ev["kv_cache_usage"] == 0.99 and ev["num_preemptions"] == 2 * (scrapes - 1)
    assert "interrupted" not in err and "Traceback" not in err


def report_code(report: dict) -> int:
    v = report["verdict"]
    return 3 if v["primary"] == "inconclusive" else {"ok": 0, "warning": 1, "critical": 2}[v["severity"]]


def test_text_report_says_the_window_was_cut_short():
    with Scripted(usage=[0.98]) as srv:
        proc = start("analyze", "--metrics-url", srv.url, *LIVE)
        srv.wait_hits(3)
        proc.send_signal(signal.SIGINT)
        code, out, err, took = finish(proc)
    assert code == 2 and out.startswith("CRITICAL: capacity_pressure"), out + err
    assert "note: window cut short at " in out and " s of 60 s by an interrupt (SIGINT)" in out


def test_a_scrape_in_flight_does_not_hold_the_interrupt():
    """The server stops answering after 3 scrapes: the first Ctrl-C still ends the window within a second's
    grace and the 3 pages are judged (the page in flight is dropped)."""
    with Scripted(usage=[0.98], stall_from=4) as srv:
        proc = start("analyze", "--metrics-url", srv.url, *LIVE, "--format", "json", "--timeout", "30s")
        srv.wait_hits(4)
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        code, out, err, took = finish(proc)
    report = json.loads(out)
    assert code == 2 and took < 5, (code, took, err)
    assert report["inputs"][0]["records"] == 3
    assert any("judged on the 3 scrape(s) taken" in n for n in report["notes"]), report["notes"]


@pytest.mark.parametrize("verb", ["analyze", "check"])
def test_second_signal_aborts_at_once_with_130(verb):
    with Scripted(usage=[0.98], stall_from=4) as srv:   # a scrape in flight keeps the window open after the 1st
        proc = start(verb, "--metrics-url", srv.url, *LIVE, "--timeout", "30s")
        srv.wait_hits(4)
        proc.send_signal(signal.SIGINT)
        time.sleep(0.2)
        t1 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        code, out, err, _ = finish(proc)
        took = time.monotonic() - t1
    assert code == 130, (code, out, err)
    assert took < 2, took
    assert out == "" and err.strip().endswith("kvdiag: interrupted") and "Traceback" not in err


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_before_any_scrape_succeeded_is_130(sig):
    with Scripted(usage=[0.98], stall_from=1) as srv:   # the first scrape never gets an answer
        proc = start("analyze", "--metrics-url", srv.url, *LIVE, "--timeout", "30s")
        srv.wait_hits(1)
        time.sleep(0.3)
        proc.send_signal(sig)
        code, out, err, took = finish(proc)
    assert code == 130 and took < 5, (code, took, err)
    assert out == "" and "kvdiag: interrupted" in err and "Traceback" not in err


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_check_duration_cut_short_gives_the_verdict(sig):
    with Scripted(usage=[0.97, 0.99, 0.98]) as srv:
        proc = start("check", "--metrics-url", srv.url, *LIVE)
        srv.wait_hits(4)
        proc.send_signal(sig)
        code, out, err, took = finish(proc)
    res = type("R", (), {"out": out, "err": err})
    status, details = nagios(res)
    assert code == 2 and status.startswith("KVDIAG CRITICAL - capacity_pressure: "), out + err
    assert took < 5
    assert status.count("window cut short by an interrupt") == 1          # the short form, once
    assert sum("window cut short at" in d for d in details) == 1          # the numbers in the long output
    assert f"by an interrupt ({sig.name})" in "\n".join(details)


def test_progress_line_names_the_peak_and_the_last_reading():
    """Scrapes read 50 %, 99 %, then 97.6 %: the line shows the peak so far and the last reading, and its peak is
    the report's."""
    import re

    with Scripted(usage=[0.50, 0.99, 0.976]) as srv:
        proc = start("analyze", "--metrics-url", srv.url, "--duration", "3s", "--interval", "1s", "--progress",
                     "--format", "json")
        code, out, err, _ = finish(proc, timeout=60)
    lines = [ln.strip() for ln in err.replace("\r", "\n").splitlines() if ln.strip()]
    assert lines and all(ln.startswith("kvdiag: 1 server(s), ") for ln in lines), err
    states = [re.search(r"KV usage peak (\S+)%, last (\S+)%$", ln) for ln in lines if "KV usage" in ln]
    assert states and all(states), lines
    pairs = [(float(m.group(1)), float(m.group(2))) for m in states]
    # after scrape 1, 2, 3: (50, 50), (99, 99), (99, 97.6): the peak so far, and the reading just taken
    assert set(pairs) <= {(50.0, 50.0), (99.0, 99.0), (99.0, 97.6)}, pairs
    assert pairs[-1] == (99.0, 97.6) and pairs == sorted(pairs, key=lambda p: (p[0], -p[1])), pairs
    report = json.loads(out)
    cap = next(f for f in report["findings"] if f["class"] == "capacity_pressure")
    assert {e["signal"]: e["value"] for e in cap["evidence"]}["kv_cache_usage"] == 0.99


def test_several_servers_cut_short_each_judged_on_its_scrapes():
    import re

    with Scripted(usage=[0.98]) as busy, Scripted(usage=[0.20], waiting=0) as quiet:
        proc = start("analyze", "--metrics-url", busy.url, "--metrics-url", quiet.url, *LIVE, "--format", "json")
        busy.wait_hits(3)
        quiet.wait_hits(3)
        proc.send_signal(signal.SIGINT)
        code, out, err, took = finish(proc)
    report = json.loads(out)
    assert code == 2 and took < 5, (code, err)
    assert [i["verdict"]["primary"] for i in report["instances"]][0] == "capacity_pressure"
    assert len(report["instances"]) == 2
    (note,) = [n for n in report["notes"] if "cut short" in n]
    m = re.fullmatch(CUT, note)
    assert m and int(m.group(3)) == sum(i["records"] for i in report["inputs"]) >= 6, (note, report["inputs"])


# --- outside a live window: SIGTERM is Ctrl-C too, and a Ctrl-C while the CLI loads is no traceback ---------------
def _reading_stdin(proc: subprocess.Popen, timeout: float = 60) -> None:
    """Feed one log line on ``proc``'s stdin and wait until kvdiag has read it from the pipe (``FIONREAD`` of the
    pipe falls to 0): the CLI is loaded and ``--log -`` is being read, waiting for more."""
    import fcntl
    import struct
    import termios

    proc.stdin.write("(APIServer pid=1) INFO 05-19 10:13:11 [loggers.py:271] Engine 000: Avg prompt throughput: "
                     "0.0 tokens/s, Avg generation throughput: 1.0 tokens/s, Running: 18 reqs, Waiting: 43 reqs, "
                     "GPU KV cache usage: 95.9%, Prefix cache hit rate: 0.0%\n")
    proc.stdin.flush()
    end = time.monotonic() + timeout
    while struct.unpack("i", fcntl.ioctl(proc.stdin.fileno(), termios.FIONREAD, b"\0\0\0\0"))[0]:
        assert time.monotonic() < end and proc.poll() is None, "kvdiag never read its stdin"
        time.sleep(0.05)
    time.sleep(0.2)


@pytest.mark.parametrize("verb", ["analyze", "check"])
def test_sigterm_while_reading_a_log_is_130_not_a_kill(verb):
    """Before, only the live window handled SIGTERM: elsewhere the process died of it at once (143, nothing said),
    although --help promises 130 for SIGTERM before anything was judged."""
    proc = subprocess.Popen([sys.executable, "-m", "kvdiag", verb, "--log", "-"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        _reading_stdin(proc)
        proc.send_signal(signal.SIGTERM)
        code, out, err, took = finish(proc)
    finally:
        proc.stdin.close()
    assert code == 130, (code, out, err)
    assert took < 5 and err.strip().endswith("kvdiag: interrupted") and "Traceback" not in err, err


def test_sigterm_during_record_writes_what_was_recorded(tmp_path):
    """'record' promises the scrapes so far are written on an interrupt; a SIGTERM (systemd, Kubernetes) lost them."""
    out_file = tmp_path / "rec.om"
    with Scripted(usage=[0.5, 0.6, 0.7]) as srv:
        proc = start("record", "--metrics-url", srv.url, "--duration", "60s", "--interval", "200ms",
                     "--out", str(out_file), "--no-progress")
        srv.wait_hits(3)
        time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)
        code, out, err, took = finish(proc)
    assert code == 130 and took < 5, (code, err)
    text = out_file.read_text()
    assert text.startswith("# ") and text.endswith("# EOF\n") and "kv_cache_usage_perc" in text, text[-200:]


def test_ctrl_c_while_the_cli_is_still_loading_is_130_without_a_traceback():
    """A Ctrl-C in the first ~0.2 s (while click and the rules engine are imported) printed a traceback: the
    KeyboardInterrupt is raised here exactly where a real one lands, inside the import of click."""
    code = ("import runpy, sys\n"
            "class Interrupt:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name == 'click':\n"
            "            raise KeyboardInterrupt\n"
            "sys.meta_path.insert(0, Interrupt())\n"
            "sys.argv = ['kvdiag', 'analyze', '--log', 'x.log']\n"
            "runpy.run_module('kvdiag', run_name='__main__')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert (proc.returncode, proc.stdout, proc.stderr) == (130, "", "kvdiag: interrupted\n")
