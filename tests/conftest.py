"""Shared helpers: run the real CLI in a subprocess, serve /metrics pages on loopback."""

from __future__ import annotations

import http.server
import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
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


#: KVDIAG_TEST_SUBPROCESS=1: every :func:`run_kvdiag` starts a new interpreter (``python -m kvdiag``), as before
#: issue 36; by default it forks the test process, where kvdiag and its imports are already loaded.
SUBPROCESS = os.environ.get("KVDIAG_TEST_SUBPROCESS", "") not in ("", "0")


def run_kvdiag(*args: str, timeout: float = 120) -> Result:
    """Run the kvdiag CLI with ``ARGS`` in a process of its own, from the repository root, stdin /dev/null; capture
    exit code, stdout and stderr (text).

    The process is a fork of the test process running :func:`kvdiag.__main__.entry` (what ``python -m kvdiag``
    runs): the same exit code, streams, signal handling and environment, without a new interpreter's 1 s of
    imports each call (issue 36). Tests of what only a new interpreter shows (the installed script, import-time
    signals, the wheel) start one themselves with :mod:`subprocess`; ``KVDIAG_TEST_SUBPROCESS=1`` makes this
    helper start one too. Raises :class:`subprocess.TimeoutExpired` (after killing the child) past ``timeout``."""
    if SUBPROCESS:
        proc = subprocess.run([sys.executable, "-m", "kvdiag", *args], capture_output=True, text=True,
                              timeout=timeout, cwd=ROOT, stdin=subprocess.DEVNULL)
        return Result(proc)
    return Result(_forked(list(args), timeout))


def _forked(args: list[str], timeout: float) -> subprocess.CompletedProcess:
    """Fork, run the CLI in the child with fds 0/1/2 on /dev/null and two pipes, collect both pipes and the exit
    status. The child never returns into pytest: it leaves by ``os._exit``."""
    import kvdiag.__main__ as kv_main  # loaded once per test process, before the fork
    import kvdiag.cli  # noqa: F401  (the CLI's imports too: the child's start is then a fork, nothing more)

    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        code = 1
        try:
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.dup2(out_w, 1)
            os.dup2(err_w, 2)
            for fd in (null, out_r, out_w, err_r, err_w):
                os.close(fd)
            os.chdir(ROOT)
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGALRM, signal.SIGPIPE, signal.SIGHUP):
                signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT
                              else (signal.SIG_IGN if sig == signal.SIGPIPE else signal.SIG_DFL))
            signal.alarm(0)
            signal.setitimer(signal.ITIMER_REAL, 0)
            sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
            sys.stdout = io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, "w", closefd=False)))
            sys.stderr = io.TextIOWrapper(io.BufferedWriter(io.FileIO(2, "w", closefd=False)),
                                          errors="backslashreplace", line_buffering=True)
            sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr
            sys.argv = [str(ROOT / "kvdiag" / "__main__.py"), *args]
            sys.excepthook = sys.__excepthook__
            sys.unraisablehook = sys.__unraisablehook__
            try:
                kv_main.entry()
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
                if exc.code is not None and not isinstance(exc.code, int):
                    print(exc.code, file=sys.stderr)
            except KeyboardInterrupt:
                code = 130
            except BaseException:  # what an interpreter prints for an uncaught exception, and its exit code
                import traceback

                traceback.print_exc()
                code = 1
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except BaseException:
                    pass
        finally:
            os._exit(code & 0xFF)
    os.close(out_w)
    os.close(err_w)
    chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}

    def drain(fd: int) -> None:
        while True:
            data = os.read(fd, 65536)
            if not data:
                break
            chunks[fd].append(data)

    readers = [threading.Thread(target=drain, args=(fd,), daemon=True) for fd in (out_r, err_r)]
    for t in readers:
        t.start()
    deadline = time.monotonic() + timeout
    status = None
    while status is None:
        done, st = os.waitpid(pid, os.WNOHANG)
        if done:
            status = st
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            for t in readers:
                t.join(5)
            os.close(out_r)
            os.close(err_r)
            raise subprocess.TimeoutExpired(["kvdiag", *args], timeout)
        time.sleep(0.005)
    for t in readers:
        t.join()
    os.close(out_r)
    os.close(err_r)
    code = os.waitstatus_to_exitcode(status)
    text = lambda fd: b"".join(chunks[fd]).decode("utf-8", "replace").replace("\r\n", "\n").replace("\r", "\n")  # noqa: E731 (as text=True)
    return subprocess.CompletedProcess(["kvdiag", *args], code, text(out_r), text(err_r))


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
