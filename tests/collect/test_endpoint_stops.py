"""A /metrics endpoint that stops answering mid-window (kvdiag.collect.metrics.scrape_targets): the report says so
in its top notes, with the time of the last good scrape — not only "N skipped" under Inputs (breaker pass, session
7: a server killed 10 s into a 20 s window gave a CRITICAL verdict with no word that the endpoint went down)."""

from __future__ import annotations

import http.server
import json
import threading

from conftest import FIXTURES, run_kvdiag

PAGE = (FIXTURES / "metrics" / "vllm033_pressure_0054.prom").read_bytes()


def _server(good: int):
    count = {"n": 0}

    class H(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):  # noqa: N802
            count["n"] += 1
            ok = count["n"] <= good
            body = PAGE if ok else b"down\n"
            self.send_response(200 if ok else 503)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def _run(good: int):
    srv = _server(good)
    try:
        res = run_kvdiag("analyze", "--metrics-url", f"http://127.0.0.1:{srv.server_address[1]}/metrics",
                         "--duration", "5s", "--interval", "1s", "--format", "json", timeout=120)
    finally:
        srv.shutdown()
        srv.server_close()
    assert res.code in (0, 1, 2), (res.code, res.err[-400:])
    return json.loads(res.out)


def test_an_endpoint_that_stops_answering_is_a_top_note():
    doc = _run(good=2)
    notes = [n for n in doc["notes"] if "the endpoint stopped answering" in n]
    assert len(notes) == 1, doc["notes"]
    assert "after its last good scrape at" in notes[0] and "scrape(s) of the window failed" in notes[0]


def test_an_endpoint_that_answers_throughout_has_no_such_note():
    doc = _run(good=100)
    assert not [n for n in doc["notes"] if "stopped answering" in n], doc["notes"]
