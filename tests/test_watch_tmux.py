"""``kvdiag watch`` in a real terminal (tmux, read with capture-pane) on the lab's replay server (issue 30):
the verdict turns from healthy to capacity pressure within two intervals of the page where the pool fills, a killed
server shows as down and comes back when it answers again, and ``q`` leaves with exit 0 and the final report."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from conftest import FIXTURES, ROOT
from replay import Replay

SERIES = FIXTURES / "series" / "vllm033_pressure"
TMUX = shutil.which("tmux")
INTERVAL = 2.0  # judging a window takes up to ~1 s on a loaded 2-core machine: two intervals leave room
MS_PER_PAGE = 1000
START = 22  # pages 22..31 are healthy (analyze says so on every window), page 32 is where the pool fills
FULL = 32



class Pane:
    def __init__(self, tmp: Path, command: str) -> None:
        self.sock = f"kvdiag-test-{os.getpid()}-{time.monotonic_ns()}"
        env = {**os.environ, "PYTHONPATH": str(ROOT), "TERM": "xterm-256color"}
        env.pop("NO_COLOR", None)
        subprocess.run([TMUX, "-L", self.sock, "-f", "/dev/null", "new-session", "-d", "-s", "w", "-x", "120",
                        "-y", "50", command], check=True, env=env, cwd=ROOT, timeout=30)

    def text(self, history: bool = False) -> str:
        args = ["-S", "-5000"] if history else []
        return subprocess.run([TMUX, "-L", self.sock, "capture-pane", "-p", "-J", *args, "-t", "w"],
                              capture_output=True, text=True, timeout=30).stdout

    def keys(self, *keys: str) -> None:
        subprocess.run([TMUX, "-L", self.sock, "send-keys", "-t", "w", *keys], check=True, timeout=30)

    def wait(self, pred, timeout: float, what: str) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.text()
            if pred(text):
                return time.monotonic()
            time.sleep(0.1)
        raise AssertionError(f"{what} not seen within {timeout:g}s; the pane:\n{self.text()}")

    def close(self) -> None:
        subprocess.run([TMUX, "-L", self.sock, "kill-server"], capture_output=True, timeout=30)


def test_watch_live_verdict_down_recover_and_q(tmp_path):
    assert TMUX, "tmux must be installed (Debian's package; .ci/run installs it)"
    rc_file = tmp_path / "rc"
    with Replay(SERIES, MS_PER_PAGE, start_page=START) as rep:
        cmd = (f"{sys.executable} -m kvdiag watch {rep.url} --interval {INTERVAL:g}s --width 118; "
               f"echo $? > {rc_file}; sleep 600")
        pane = Pane(tmp_path, cmd)
        try:
            t_ok = pane.wait(lambda s: " OK  healthy" in s, 20, "the healthy verdict")
            full_at = rep.t0 + (FULL - START) * MS_PER_PAGE / 1000
            assert t_ok < full_at, "the healthy pages were not shown before the pool filled"
            t_cp = pane.wait(lambda s: "CRITICAL  capacity_pressure" in s, 30, "capacity_pressure")
            print(f"healthy -> capacity_pressure on screen {t_cp - full_at:.2f}s after page {FULL} became current")
            assert t_cp - full_at <= 2 * INTERVAL, f"pressure shown {t_cp - full_at:.2f}s after the page changed"
            screen = pane.text()
            assert "CAP001" in screen and "→ " in screen  # the firing finding and its one-line fix
            assert "KV usage" in screen and "waiting" in screen and "preemptions/s" in screen
            assert "prefix hit rate" in screen
            # the server dies: shown as down with the reason, never a crash
            rep.kill()
            pane.wait(lambda s: "DOWN" in s and "refused" in s.lower(), 15, "the server shown as down")
            time.sleep(2.5)
            assert "DOWN" in pane.text()
            with Replay(SERIES, MS_PER_PAGE, start_page=59, port=rep.port):
                pane.wait(lambda s: "DOWN" not in s and " up · " in s, 4 * INTERVAL + 8, "the server back up")
                assert "CRITICAL  capacity_pressure" in pane.text()
                pane.keys("q")
                deadline = time.monotonic() + 60
                while not rc_file.exists() and time.monotonic() < deadline:
                    time.sleep(0.2)
                assert rc_file.read_text().strip() == "0"
                out = pane.text(history=True)
                assert "CRITICAL: capacity_pressure" in out  # the final report, as analyze prints it
                assert "verdict while watching" in out and "healthy (ok)" in out
                assert "scrape(s) failed while watching" in out
                assert "Traceback" not in out
        finally:
            pane.close()


def test_ctrl_c_leaves_with_the_report_too(tmp_path):
    assert TMUX, "tmux must be installed (Debian's package; .ci/run installs it)"
    rc_file = tmp_path / "rc"
    with Replay(SERIES, MS_PER_PAGE, start_page=40) as rep:
        pane = Pane(tmp_path, f"{sys.executable} -m kvdiag watch {rep.url} --interval 1s --width 118; "
                              f"echo $? > {rc_file}; sleep 600")
        try:
            pane.wait(lambda s: "CRITICAL  capacity_pressure" in s, 30, "the verdict")
            pane.keys("C-c")
            deadline = time.monotonic() + 60
            while not rc_file.exists() and time.monotonic() < deadline:
                time.sleep(0.2)
            assert rc_file.read_text().strip() == "0"
            out = pane.text(history=True)
            assert "CRITICAL: capacity_pressure" in out and "Traceback" not in out
        finally:
            pane.close()
