"""Shared helpers: run the real CLI in a subprocess, serve /metrics pages on loopback."""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"


def incident_cases(bundled_only: bool = False) -> list[Path]:
    """The fixtures/incidents case folders a test may read: the 21 bundled cases (001-032) and the *tuned* side of
    issue 24's corpus (``tools/corpus_split.py``). Held-out cases are never read by a test: they are scored once,
    by ``tools/score_incidents.py --held-out``. ``bundled_only``: cases 001-099 alone (the strict verdict set, and
    the tests too slow to run per corpus case)."""
    sys.path.insert(0, str(ROOT / "tools"))
    import corpus_split

    out = []
    for case in corpus_split.cases(FIXTURES / "incidents"):
        number = int(case.name.split("-", 1)[0])
        if number < 100 or (not bundled_only and corpus_split.side(case) == "tuned"):
            out.append(case)
    return out


class Result:
    def __init__(self, proc: subprocess.CompletedProcess):
        self.code = proc.returncode
        self.out = proc.stdout
        self.err = proc.stderr

    def json(self) -> dict:
        return json.loads(self.out)


def run_kvdiag(*args: str, timeout: float = 120) -> Result:
    """Run ``python -m kvdiag ARGS`` and capture exit code, stdout and stderr."""
    proc = subprocess.run([sys.executable, "-m", "kvdiag", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)
    return Result(proc)


@pytest.fixture
def kvdiag():
    return run_kvdiag


class _Handler(http.server.BaseHTTPRequestHandler):
    body = b""
    ctype = "text/plain; version=0.0.4"
    status = 200

    def do_GET(self):  # noqa: N802
        self.send_response(self.status)
        self.send_header("Content-Type", self.ctype)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args):
        pass


@pytest.fixture
def static_server():
    """Start a loopback HTTP server that answers every GET with a fixed body; yields a setter."""
    servers = []

    def start(body: bytes, ctype: str = "text/plain; version=0.0.4", status: int = 200) -> str:
        handler = type("H", (_Handler,), {"body": body, "ctype": ctype, "status": status})
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return f"http://127.0.0.1:{srv.server_address[1]}/metrics"

    yield start
    for srv in servers:
        srv.shutdown()
        srv.server_close()
