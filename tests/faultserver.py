"""Hostile answers on loopback for the bounded-input tests (issue 28): a gzip bomb, an endless chunked body and a
1 GiB body, served by a real ``http.server`` in a daemon thread on 127.0.0.1 that stops with the test (and never
serves longer than ``max_seconds`` per answer, so a client that does not hang up cannot keep it busy).

Compressed bodies are built as gzip members in a row (RFC 1952 allows it; every HTTP client and ``gzip -d`` read
them): one member of 16 MiB compresses to ~16 KiB, 64 copies of it are a 1 GiB body in ~1 MiB.
"""

from __future__ import annotations

import functools
import gzip
import http.server
import threading
import time

GIB = 1 << 30
MEMBER_BYTES = 16 << 20


@functools.lru_cache(maxsize=8)
def gzip_member(fill: bytes) -> bytes:
    """One gzip member holding :data:`MEMBER_BYTES` bytes of ``fill`` repeated."""
    reps = MEMBER_BYTES // len(fill)
    return gzip.compress(fill * reps, compresslevel=9)


def gzip_bomb(total: int = GIB, fill: bytes = b" ", head: bytes = b"") -> bytes:
    """A gzip stream (members in a row) that inflates to ``head`` and then ≥ ``total`` bytes of ``fill``."""
    member = gzip_member(fill)
    n = -(-total // (MEMBER_BYTES // len(fill) * len(fill)))
    return (gzip.compress(head) if head else b"") + member * n


class _Hostile(http.server.BaseHTTPRequestHandler):
    mode = "bomb"
    max_seconds = 20.0
    protocol_version = "HTTP/1.1"
    HEAD = b'{"status":"success","data":{"resultType":"matrix","result":['

    def log_message(self, *args):
        pass

    def _stream(self, block: bytes, total: int | None, chunked: bool) -> None:
        start = time.monotonic()
        end = start + self.max_seconds
        sent = 0
        try:
            while (total is None or sent < total) and time.monotonic() < end:
                piece = block if total is None else block[:total - sent]
                if chunked:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                else:
                    self.wfile.write(piece)
                sent += len(piece)
        except OSError:  # the client hung up: what a bounded client does
            self.hangups.append(time.monotonic() - self.started)
        self.close_connection = True

    def do_GET(self):  # noqa: N802
        self.started = time.monotonic()
        if self.mode == "bomb":
            body = gzip_bomb(head=self.HEAD)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self._stream(body, len(body), chunked=False)
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        block = b" " * (1 << 16)  # JSON white space: no parser can end the answer early
        if self.mode == "drip":  # chunked, 1 KiB every 20 ms: never near a cap, never ending
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            end = time.monotonic() + self.max_seconds
            try:
                while time.monotonic() < end:
                    self.wfile.write(b"400\r\n%s\r\n" % block[:1024])
                    self.wfile.flush()
                    time.sleep(0.02)
            except OSError:
                self.hangups.append(time.monotonic() - self.started)
            self.close_connection = True
            return
        if self.mode == "chunked":
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self._stream(block, None, chunked=True)
        else:  # "big": a declared 1 GiB body
            self.send_header("Content-Length", str(GIB))
            self.end_headers()
            self._stream(block, GIB, chunked=False)


class HostileServer:
    """``with HostileServer("bomb") as url:`` — a loopback server answering every GET the hostile way: ``bomb`` (a
    1 MiB gzip body inflating to 1 GiB), ``chunked`` (64 KiB chunks without end), ``drip`` (1 KiB chunks every
    20 ms without end), ``big`` (a declared and sent 1 GiB body)."""

    def __init__(self, mode: str, max_seconds: float = 20.0) -> None:
        self.hangups: list[float] = []  # seconds from a request to the client hanging up, per answer cut short
        handler = type("H", (_Hostile,), {"mode": mode, "max_seconds": max_seconds, "hangups": self.hangups})
        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.srv.daemon_threads = True

    def __enter__(self) -> str:
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self.srv.server_address[1]}"

    def __exit__(self, *exc) -> None:
        self.srv.shutdown()
        self.srv.server_close()
