"""Faults of live /metrics endpoints: each a clear one-line error (or, with several servers, a partial
report naming the server that failed), never a hang past --timeout. All servers are loopback and stop
themselves; the 200 MB body is generated, not held in memory."""

from __future__ import annotations

import http.server
import socket
import threading
import time

import pytest

from conftest import FIXTURES

GOOD_PAGE = (FIXTURES / "metrics" / "vllm033_pressure_0054.prom").read_bytes()


def refused_url() -> str:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}/metrics"


class _Faulty(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):  # noqa: N802
        kind = self.path.strip("/").split("/")[0]
        if kind == "good":
            self._send(200, GOOD_PAGE)
        elif kind == "slow":          # headers only after 30 s
            time.sleep(30)
            self._send(200, GOOD_PAGE)
        elif kind == "drip":          # a valid start, then one byte every 0.3 s for a minute
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(10**6))
            self.end_headers()
            for _ in range(200):
                self.wfile.write(b"#")
                self.wfile.flush()
                time.sleep(0.3)
        elif kind in ("401", "500"):
            self._send(int(kind), b"nope\n")
        elif kind == "truncated":     # promises 100 000 bytes, sends 1 000 and closes
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", "100000")
            self.end_headers()
            self.wfile.write(GOOD_PAGE[:1000])
            self.wfile.flush()
            self.close_connection = True
        elif kind == "html":
            self._send(200, b"<!DOCTYPE html><html><body>Grafana login</body></html>", "text/html")
        elif kind == "huge":          # 200 MB of valid-looking lines, generated on the fly
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(200 * 10**6))
            self.end_headers()
            line = b'vllm:num_requests_running{engine="0",model_name="m"} 1.0\n' * 1000
            try:
                for _ in range(200 * 10**6 // len(line)):
                    self.wfile.write(line)
            except (BrokenPipeError, ConnectionResetError):
                pass

    def _send(self, status, body, ctype="text/plain; version=0.0.4"):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def faulty():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Faulty)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def _one_line(res, *needles):
    assert res.code == 3, (res.code, res.out[:500], res.err)
    assert "Traceback" not in res.err + res.out
    lines = [line for line in res.err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert lines[0].startswith("kvdiag: error: ")
    for n in needles:
        assert n in lines[0], lines[0]


@pytest.mark.parametrize("path, needles", [
    ("slow", ["no answer within 2s"]),
    ("drip", ["within 2s"]),
    ("401", ["HTTP 401 Unauthorized", "--bearer-token-file"]),
    ("500", ["HTTP 500 Internal Server Error"]),
    ("truncated", ["body cut off"]),
    ("html", ["HTML"]),
    ("huge", ["larger than 64 MiB"]),
])
def test_fault_is_one_line_within_the_timeout(kvdiag, faulty, path, needles):
    t0 = time.monotonic()
    res = kvdiag("analyze", "--metrics-url", f"{faulty}/{path}/metrics", "--duration", "1s", "--timeout", "2s")
    elapsed = time.monotonic() - t0
    _one_line(res, f"{faulty}/{path}/metrics", *needles)
    assert elapsed < 2 + 8, elapsed   # the timeout, plus interpreter start-up


def test_refused_port_is_one_line(kvdiag):
    url = refused_url()
    _one_line(kvdiag("analyze", "--metrics-url", url, "--duration", "1s"), url, "connection refused")


def test_several_servers_one_failing_gives_a_partial_report(kvdiag, faulty):
    bad = refused_url()
    res = kvdiag("analyze", "--metrics-url", f"{faulty}/good/metrics", "--metrics-url", bad,
                 "--metrics-url", f"{faulty}/401/metrics", "--duration", "1s", "--format", "json")
    report = res.json()
    got = {i["instance"]: i for i in report["instances"]}
    assert got[f"{faulty}/good/metrics"]["verdict"]["primary"] == "capacity_pressure"
    assert got[bad]["verdict"]["primary"] == "inconclusive" and "connection refused" in got[bad]["error"]
    assert "HTTP 401" in got[f"{faulty}/401/metrics"]["error"]
    assert report["instances"][0]["instance"] == f"{faulty}/good/metrics"    # worst first
    assert report["verdict"]["primary"] == "capacity_pressure" and res.code == 2
    assert any("2 of 3 server(s) could not be read" in n for n in report["notes"])


def test_several_servers_all_failing_is_one_line(kvdiag):
    a, b = refused_url(), refused_url()
    _one_line(kvdiag("analyze", "--metrics-url", a, "--metrics-url", b, "--duration", "1s"), "no server could be read")


def test_headers_and_bearer_token_are_sent(kvdiag, tmp_path):
    seen = []

    class H(_Faulty):
        def do_GET(self):  # noqa: N802
            seen.append((self.headers.get("Authorization"), self.headers.get("X-Tenant")))
            self._send(200, GOOD_PAGE)

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        token = tmp_path / "token"
        token.write_text("s3cret\n")
        url = f"http://127.0.0.1:{srv.server_address[1]}/metrics"
        res = kvdiag("analyze", "--metrics-url", url, "--duration", "1s", "--header", "X-Tenant: blue",
                     "--bearer-token-file", str(token), "--format", "json")
    finally:
        srv.shutdown()
        srv.server_close()
    assert res.code == 2
    assert seen and seen[0] == ("Bearer s3cret", "blue")
    assert "s3cret" not in res.out + res.err


def test_bad_header_and_tls_options_are_usage_errors(kvdiag, tmp_path):
    _one_line(kvdiag("analyze", "--metrics-url", "http://127.0.0.1:1/metrics", "--header", "nocolon"), "--header")
    _one_line(kvdiag("analyze", "--metrics-url", "https://127.0.0.1:1/metrics", "--insecure", "--ca-cert",
                     str(tmp_path / "ca.pem")), "contradict")


def test_tls_verification_is_on_by_default(kvdiag, tmp_path):
    """A self-signed HTTPS endpoint is refused unless --insecure (or its CA) is given."""
    import ssl

    key, cert = FIXTURES / "tls" / "loopback-key.pem", FIXTURES / "tls" / "loopback-cert.pem"

    class H(_Faulty):
        def do_GET(self):  # noqa: N802
            self._send(200, GOOD_PAGE)

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(cert), str(key))
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"https://127.0.0.1:{srv.server_address[1]}/metrics"
    try:
        _one_line(kvdiag("analyze", "--metrics-url", url, "--duration", "1s"), "certificate verify failed")
        assert kvdiag("analyze", "--metrics-url", url, "--duration", "1s", "--insecure").code == 2
        assert kvdiag("analyze", "--metrics-url", url, "--duration", "1s", "--ca-cert", str(cert)).code == 2
    finally:
        srv.shutdown()
        srv.server_close()


def test_openmetrics_page_is_parsed_by_content_type(kvdiag, static_server):
    """An OpenMetrics answer (Content-Type application/openmetrics-text) goes to the OpenMetrics parser."""
    body = ("# TYPE vllm:kv_cache_usage_perc gauge\n"
            'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.99\n'
            "# TYPE vllm:num_requests_waiting gauge\n"
            'vllm:num_requests_waiting{engine="0",model_name="m"} 4\n'
            "# TYPE vllm:num_preemptions counter\n"
            'vllm:num_preemptions_total{engine="0",model_name="m"} 3\n'
            "# EOF\n").encode()
    url = static_server(body, ctype="application/openmetrics-text; version=1.0.0; charset=utf-8")
    res = kvdiag("analyze", "--metrics-url", url, "--duration", "1s", "--format", "json")
    assert res.json()["verdict"]["primary"] == "capacity_pressure" and res.code == 2
    # an OpenMetrics-only construct (an exemplar) that the text-format parser would reject
    om_only = body.replace(b'model_name="m"} 3\n', b'model_name="m"} 3 # {trace_id="abc"} 1.0\n')
    assert om_only != body
    assert kvdiag("analyze", "--metrics-url", static_server(om_only, ctype="application/openmetrics-text"),
                  "--duration", "1s").code == 2


def test_progress_line_while_the_window_runs(kvdiag, faulty):
    res = kvdiag("analyze", "--metrics-url", f"{faulty}/good/metrics", "--metrics-url", f"{faulty}/good/b",
                 "--duration", "2s", "--interval", "500ms", "--progress")
    assert res.code == 2
    assert "kvdiag: 2 server(s), " in res.err and "KV usage peak 99.6%, last " in res.err  # both named
    assert res.out.startswith("CRITICAL: capacity_pressure")
