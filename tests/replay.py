"""Replay a saved series' /metrics pages over loopback HTTP, one page per MS_PER_PAGE milliseconds, for live tests
(``kvdiag watch``): the lab's replay server (``shared/twin/serve.py``, beside the checkout) when it is there, else a
stand-in here with the same behaviour (GET /metrics = page floor(elapsed / MS_PER_PAGE), clamped to the last page;
``X-Twin-Page`` names it; the process ends GRACE seconds after the last page).

``with Replay(case_dir, ms_per_page, start_page=.., port=..) as r: r.url, r.t0`` (``t0``: time.monotonic() when page
``start_page`` became current); ``r.kill()`` ends it at once (a server that died).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
LAB_SERVE = [p for p in (HERE.parent.parent / "shared" / "twin" / "serve.py",
                         HERE.parent.parent.parent / "shared" / "twin" / "serve.py") if p.exists()]

STAND_IN = r'''
import os, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
case, port, ms, grace, start = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
names = sorted(n for n in os.listdir(os.path.join(case, "metrics")) if n.endswith(".prom"))
pages = [open(os.path.join(case, "metrics", n), "rb").read() for n in names]
t0 = time.monotonic()
def current():
    return min(len(pages) - 1, start + int((time.monotonic() - t0) * 1000 // ms))
class H(BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path.split("?")[0] not in ("/metrics", "/health"):
            self.send_response(404); self.end_headers(); return
        i = current(); body = pages[i] if self.path.startswith("/metrics") else b"ok"
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(body))); self.send_header("X-Twin-Page", str(i))
        self.end_headers(); self.wfile.write(body)
    def log_message(self, *a): pass
srv = ThreadingHTTPServer(("127.0.0.1", port), H)
print(f"ready http://127.0.0.1:{srv.server_address[1]}", flush=True)
srv.timeout = 0.2
deadline = t0 + (len(pages) - 1 - start) * ms / 1000 + grace
while time.monotonic() < deadline:
    srv.handle_request()
'''


class Replay:
    def __init__(self, case_dir: Path, ms_per_page: float, start_page: int = 0, port: int = 0,
                 grace: float = 120) -> None:
        self.case_dir, self.ms, self.start_page, self.port, self.grace = case_dir, ms_per_page, start_page, port, grace
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> "Replay":
        if LAB_SERVE:
            cmd = [sys.executable, str(LAB_SERVE[0]), str(self.case_dir), str(self.port), str(self.ms),
                   "--grace", str(self.grace), "--start-page", str(self.start_page)]
        else:
            cmd = [sys.executable, "-c", STAND_IN, str(self.case_dir), str(self.port), str(self.ms), str(self.grace),
                   str(self.start_page)]
        began = time.monotonic()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline()
        if not line.startswith("ready "):
            self.kill()
            raise RuntimeError(f"replay server did not start: {line!r}")
        self.t0 = began  # the page clock starts before 'ready' is printed: page times are at most this late
        self.ready = time.monotonic()
        self.url = line.split()[1] + "/metrics"
        self.port = int(self.url.rsplit(":", 1)[1].split("/")[0])
        return self

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def __exit__(self, *exc) -> None:
        self.kill()
