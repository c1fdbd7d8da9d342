"""kvdiag watch without a terminal: back-off, sparklines, headless (--no-tui) until SIGTERM with the final report,
and bad usage as one line, exit 3."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from conftest import FIXTURES, ROOT, run_kvdiag
from replay import Replay

from kvdiag.watch import backoff, sparkline

SERIES = FIXTURES / "series" / "vllm033_pressure"


def test_backoff_doubles_and_is_bounded():
    assert [backoff(n, 1.0) for n in range(1, 6)] == [2.0, 4.0, 8.0, 8.0, 8.0]
    assert backoff(10, 30.0) == 60.0  # never more than a minute
    assert backoff(0, 5.0) == 5.0


def test_sparkline_scales():
    assert sparkline([0, 0.5, 1.0], top=1.0) == "▁▅█"
    assert sparkline([]) == "–"
    assert len(sparkline(list(range(100)), width=20)) == 20


def test_headless_until_sigterm_prints_the_report():
    with Replay(SERIES, 300, start_page=28) as rep:
        proc = subprocess.Popen([sys.executable, "-m", "kvdiag", "watch", rep.url, "--interval", "0.5s", "--no-tui"],
                                cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(4)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "up, healthy (ok)" in err and "up, capacity_pressure (critical)" in err
    assert out.startswith("CRITICAL: capacity_pressure")
    assert "Traceback" not in err


def test_bad_usage_is_one_line_exit_3():
    for args, needle in ((["watch"], "give at least one"),
                         (["watch", "127.0.0.1:9/metrics"], "expected an http"),
                         (["watch", "http://127.0.0.1:9/metrics", "--listen", "nowhere"], "HOST:PORT"),
                         (["watch", "http://127.0.0.1:9/metrics", "--listen", "192.0.2.1:9464", "--no-tui"],
                          "cannot listen")):
        res = run_kvdiag(*args, timeout=60)
        assert res.code == 3, (args, res.err)
        assert needle in res.err and len(res.err.strip().splitlines()) == 1, res.err
