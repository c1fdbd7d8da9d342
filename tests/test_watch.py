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


def watch_until(args: list[str], seen, timeout: float = 60) -> tuple[int, str, str]:
    """Run ``kvdiag watch ARGS`` until ``seen(stderr so far)`` holds (or ``timeout``), then SIGTERM it; returns
    (exit code, stdout, stderr)."""
    import threading

    proc = subprocess.Popen([sys.executable, "-m", "kvdiag", "watch", *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stderr.readline, "")), daemon=True)
    reader.start()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not seen("".join(lines)) and proc.poll() is None:
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    out = proc.stdout.read()
    proc.wait(timeout=60)
    reader.join(timeout=10)
    return proc.returncode, out, "".join(lines)


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
        code, out, err = watch_until([rep.url, "--interval", "0.5s", "--no-tui"],
                                     lambda e: "capacity_pressure" in e)
    assert code == 0, err
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


def test_several_servers_one_down_and_the_final_report_has_both():
    from services import free_port

    dead = f"http://127.0.0.1:{free_port()}/metrics"
    with Replay(SERIES, 300, start_page=40) as rep:
        code, out, err = watch_until([rep.url, dead, "--interval", "0.5s", "--no-tui"],
                                     lambda e: "capacity_pressure" in e and "down:" in e)
    assert code == 0, err
    assert f"{dead}: down:" in err and "refused" in err
    assert f"{rep.url}: up, capacity_pressure (critical)" in err
    assert rep.url in out and dead in out  # one section per server, the one never read said so


def test_prometheus_url_watches_the_instances_it_holds(tmp_path):
    from services import prometheus

    with Replay(SERIES, 1000, start_page=30) as rep:
        target = rep.url.removeprefix("http://").removesuffix("/metrics")
        with prometheus(tmp_path, [target]) as prom:
            time.sleep(6)  # a few scrapes in Prometheus, pages 30..35 (the pool fills at page 32)
            code, out, err = watch_until(["--prometheus-url", prom, "--interval", "1s", "--window", "2m", "--step",
                                          "1s", "--no-tui"], lambda e: "capacity_pressure" in e, timeout=90)
    assert code == 0, err
    assert f"{target}: up, capacity_pressure (critical)" in err, err
    assert "capacity_pressure" in out and target in out
