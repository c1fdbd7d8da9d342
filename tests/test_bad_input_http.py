"""Bad input on the network side: hostile or broken HTTP servers, bad HTTP options, credentials in URLs,
malformed Prometheus API answers, out-of-domain /metrics values. Every server here is on loopback and
stops with the test; every CLI run is bounded by a subprocess timeout."""

from __future__ import annotations

import base64
import http.server
import json
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from kvdiag.collect.metrics import HttpOptions, safe_url, scrape_targets
from kvdiag.errors import ScrapeError

ROOT = Path(__file__).resolve().parent.parent
PRESS = (ROOT / "fixtures" / "metrics" / "vllm033_pressure_0054.prom").read_bytes()


class _Srv(http.server.BaseHTTPRequestHandler):
    """Answers by ``mode``: page, trickle (headers one byte per 0.2 s), redirect, need_header, prom, push."""

    mode = "page"
    body = PRESS
    location = ""
    seen: list = []

    def log_message(self, *args):
        pass

    def _send(self, status, body, ctype="text/plain; version=0.0.4"):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):  # noqa: N802
        self.seen.append((self.path, dict(self.headers)))
        if self.mode == "trickle":
            try:
                self.wfile.write(b"HTTP/1.1 200 OK\r\n")
                for _ in range(400):  # 80 s at most, the client hangs up long before
                    self.wfile.write(b"X")
                    self.wfile.flush()
                    time.sleep(0.2)
            except OSError:
                pass
            self.close_connection = True
            return
        if self.mode == "redirect" and self.path != self.location:
            self.send_response(302)
            self.send_header("Location", self.location)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if self.mode == "need_header" and self.headers.get("X-A") != "b":
            self._send(401, b"unauthorized")
            return
        if self.mode == "status500":
            self._send(500, b"boom")
            return
        if self.mode == "prom":
            self._send(200, self.body, "application/json")
            return
        self._send(200, self.body)

    def do_PUT(self):  # noqa: N802  (a Pushgateway)
        self.seen.append((self.path, dict(self.headers)))
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.mode == "trickle":
            return self.do_GET()
        self._send(200, b"")

    do_POST = do_PUT


@pytest.fixture
def server():
    started = []

    def start(mode="page", body=PRESS, location="", host="127.0.0.1"):
        handler = type("H", (_Srv,), {"mode": mode, "body": body, "location": location, "seen": []})
        srv = http.server.ThreadingHTTPServer((host, 0), handler)
        srv.daemon_threads = True
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        started.append(srv)
        return f"http://{host}:{srv.server_address[1]}", handler.seen

    yield start
    for srv in started:
        srv.shutdown()
        srv.server_close()


def _one_line(res, *needles, code=3):
    assert res.code == code, (res.code, res.out, res.err)
    assert "Traceback" not in res.err + res.out, res.err
    lines = [line for line in res.err.strip().splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert lines[0].startswith("kvdiag: error: "), lines[0]
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


# --- finding 1: a total deadline, headers included --------------------------------------------------
@pytest.mark.parametrize("verb", ["analyze", "check", "record", "prometheus"])
def test_header_trickle_is_cut_at_the_timeout(kvdiag, server, tmp_path, verb):
    base, _ = server("trickle")
    t0 = time.monotonic()
    if verb == "prometheus":
        res = kvdiag("analyze", "--prometheus-url", base, "--timeout", "1s", timeout=40)
    elif verb == "record":
        res = kvdiag("record", "--metrics-url", base + "/metrics", "--timeout", "1s", "--duration", "1s",
                     "--out", str(tmp_path / "r.om"), timeout=40)
    else:
        res = kvdiag(verb, "--metrics-url", base + "/metrics", "--timeout", "1s", "--duration", "1s",
                     "--interval", "500ms", timeout=40)
    took = time.monotonic() - t0
    assert took < 12, took
    assert res.code == 3, (res.code, res.out, res.err)
    assert "no complete answer within 1s" in res.out + res.err
    assert "Traceback" not in res.err
    if verb == "record":
        assert not (tmp_path / "r.om").exists()


def test_pushgateway_trickle_is_cut_at_the_timeout(kvdiag, server):
    base, _ = server("trickle")
    t0 = time.monotonic()
    res = kvdiag("check", "--metrics-file", "fixtures/metrics/vllm033_pressure_0054.prom", "--pushgateway", base,
                 "--timeout", "1s", timeout=40)
    assert time.monotonic() - t0 < 12
    assert res.code == 2, (res.code, res.out, res.err)  # the verdict still shows; the push failure is a note
    assert "no complete answer within 1s" in res.out


# --- findings 5, 6, 7, 14: option values checked up front, never echoed -------------------------------
@pytest.mark.parametrize("verb", ["analyze", "record", "check"])
def test_non_latin1_header_is_one_line_and_not_echoed(kvdiag, server, tmp_path, verb):
    base, seen = server()
    extra = ["--out", str(tmp_path / "r.om")] if verb == "record" else []
    res = kvdiag(verb, "--metrics-url", base + "/metrics", "--header", "X-Token: €SECRET", "--duration", "1s",
                 *extra, timeout=40)
    _one_line(res, "--header", "latin-1")
    assert "SECRET" not in res.out + res.err
    assert not seen
    assert not (tmp_path / "r.om").exists()


def test_bearer_token_with_a_line_break_is_not_echoed(kvdiag, server, tmp_path):
    base, _ = server()
    tok = tmp_path / "tok.txt"
    tok.write_text("SECRETTOK8\nsecond\n")
    res = kvdiag("analyze", "--metrics-url", base + "/metrics", "--bearer-token-file", str(tok), "--duration", "1s")
    _one_line(res, "tok.txt", "line break")
    assert "SECRET" not in res.out + res.err


def test_bearer_token_not_utf8_names_the_file(kvdiag, server, tmp_path):
    base, _ = server()
    tok = tmp_path / "tok4.txt"
    tok.write_bytes(b"\xff\xfeSECRET")
    res = kvdiag("analyze", "--metrics-url", base + "/metrics", "--bearer-token-file", str(tok), "--duration", "1s")
    _one_line(res, "tok4.txt", "UTF-8")


def test_header_with_newline_is_not_echoed(kvdiag, server):
    base, _ = server()
    res = kvdiag("analyze", "--metrics-url", base + "/metrics", "--header", "Authorization: Bearer SECRET\nHDR6",
                 "--duration", "1s")
    _one_line(res, "--header", "line break")
    assert "SECRET" not in res.err and "HDR6" not in res.err


@pytest.mark.parametrize("args, needle", [
    (["--timeout", "99999999999999999999s"], "--timeout"),
    (["--duration", "99999999999999999999s"], "--duration"),
    (["--duration", "999999999999999999999999999999999999999999999h"], "--duration"),
    (["--duration", "200h"], "at most 7d"),
    (["--interval", "1ms"], "at least 100ms"),
])
def test_absurd_durations_are_rejected(kvdiag, args, needle):
    res = kvdiag("analyze", "--metrics-url", "http://127.0.0.1:9/metrics", *args, timeout=30)
    _one_line(res, needle)


@pytest.mark.parametrize("opt", ["--gpu-memory", "--gpu-memory-utilization"])
@pytest.mark.parametrize("value", ["nan", "inf"])
def test_nan_and_inf_gpu_options_are_rejected(kvdiag, opt, value):
    res = kvdiag("analyze", "--log", "fixtures/metrics/vllm033_pressure_0054.prom", opt, value)
    _one_line(res, opt, value)  # NaN passes click's range checks; it must not pass ours


def test_no_exception_escapes_a_scrape_thread(server):
    """An error that is not a ScrapeError (here: a header the HTTP library cannot encode) becomes the
    target's error, not a thread traceback and a silent 'inconclusive'."""
    base, _ = server()
    escaped = []
    old = threading.excepthook
    threading.excepthook = lambda args: escaped.append(args.exc_type)
    try:
        (tg,) = scrape_targets([base + "/metrics"], 0.2, 0.1, HttpOptions(timeout=2, headers={"X-T": "€x"}),
                               progress=False)
    finally:
        threading.excepthook = old
    assert not escaped
    assert tg.error and tg.url in tg.error and "€" not in tg.error


def test_record_writes_nothing_and_exits_3_when_no_scrape_succeeds(server, tmp_path):
    from kvdiag.record import record

    base, _ = server()
    out = tmp_path / "r.om"
    with pytest.raises(ScrapeError):
        record(base + "/metrics", str(out), 0.2, 0.1, HttpOptions(timeout=2, headers={"X-T": "€x"}), progress=False)
    assert not out.exists()


# --- findings 13, 14: credentials in URLs ---------------------------------------------------------------
def test_safe_url_strips_userinfo_and_secret_parameters():
    shown = safe_url("https://admin:PW@host:9090/metrics?token=T1&job=vllm&api_key=K&sig=S#frag")
    assert shown == "https://host:9090/metrics?token=***&job=***&api_key=***&sig=***"  # every value (issue 19)


@pytest.mark.parametrize("url, shown", [
    # urlsplit refuses these (an unclosed IPv6 bracket): the secrets were shown as typed
    ("http://admin:SECRETPW@[127.0.0.1/metrics?sig=SECRETS&token=SECRETT", "http://[127.0.0.1/metrics?sig=***&token=***"),
    ("http://[::1/metrics?session=SECRETS&pwd=SECRETP", "http://[::1/metrics?session=***&pwd=***"),
    # no scheme: urlsplit reads 'admin' as the scheme and the password as the path
    ("admin:SECRETPW@127.0.0.1:9090/metrics?key=SECRETK", "127.0.0.1:9090/metrics?key=***"),
    ("//admin:SECRETPW@h/metrics", "//h/metrics"),
    # ';' separates parameters for many servers
    ("http://h/metrics?job=vllm;api_key=SECRETK", "http://h/metrics?job=***;api_key=***"),
])
def test_safe_url_hides_secrets_of_urls_that_do_not_parse(url, shown):
    assert safe_url(url) == shown


def test_secrets_of_a_url_without_scheme_never_reach_the_output(kvdiag):
    """A forgotten 'http://' made the password part of the error line (stdout for check: the monitoring's log)."""
    for verb in ("analyze", "check"):
        res = kvdiag(verb, "--metrics-url", "admin:SECRETPW@127.0.0.1:9/metrics?token=SECRETQ", "--duration", "1s")
        assert res.code == 3, res.err
        assert "127.0.0.1:9/metrics?token=***" in res.out + res.err
        assert "SECRET" not in res.out + res.err


def test_url_credentials_never_reach_the_report(kvdiag, server):
    base, seen = server()
    host = urlsplit(base).netloc
    url = f"http://admin:SECRETPW2@{host}/metrics?token=SECRETQ3"
    res = kvdiag("analyze", "--metrics-url", url, "--format", "json", "--duration", "1s", "--interval", "500ms")
    assert res.code == 2, res.err
    assert "SECRET" not in res.out + res.err
    assert res.json()["inputs"][0]["name"] == f"http://{host}/metrics?token=***"
    assert seen[0][1].get("Authorization") == "Basic " + base64.b64encode(b"admin:SECRETPW2").decode()


def test_url_credentials_never_reach_an_error_or_the_textfile(kvdiag, server, tmp_path):
    base, _ = server("status500")
    host = urlsplit(base).netloc
    res = kvdiag("analyze", "--metrics-url", f"http://admin:SECRETPW1@{host}/metrics", "--duration", "1s")
    _one_line(res, f"http://{host}/metrics: HTTP 500")
    assert "SECRET" not in res.err
    ok, _ = server()
    res = kvdiag("check", "--metrics-url", f"http://admin:SECRETPW4@{urlsplit(ok).netloc}/metrics",
                 "--textfile", str(tmp_path))
    assert res.code == 2, res.out
    assert "SECRET" not in res.out + (tmp_path / "kvdiag.prom").read_text()


def test_pushgateway_userinfo_is_basic_auth_and_never_shown(kvdiag, server):
    base, seen = server("push")
    host = urlsplit(base).netloc
    res = kvdiag("check", "--metrics-file", "fixtures/metrics/vllm033_pressure_0054.prom",
                 "--pushgateway", f"http://admin:SECRETPG@{host}")
    assert res.code == 2 and "push to" not in res.out, res.out
    assert seen and seen[0][1].get("Authorization") == "Basic " + base64.b64encode(b"admin:SECRETPG").decode()
    res = kvdiag("check", "--metrics-file", "fixtures/metrics/vllm033_pressure_0054.prom",
                 "--pushgateway", "http://admin:SECRETPG@127.0.0.1:9")
    assert "push to http://127.0.0.1:9 failed" in res.out and "SECRET" not in res.out


# --- finding 28: redirects --------------------------------------------------------------------------
def test_redirect_to_another_host_is_refused_and_headers_stay(kvdiag, server):
    other, other_seen = server(host="127.0.0.2")
    base, _ = server("redirect", location=other + "/metrics")
    res = kvdiag("analyze", "--metrics-url", base + "/metrics", "--header", "X-Secret: SECRETH", "--duration", "1s")
    _one_line(res, "redirected to " + other + "/metrics", "not followed")
    assert not other_seen
    assert "SECRETH" not in res.err


def test_redirect_on_the_same_host_is_followed_another_port_is_not(kvdiag, server):
    target, _ = server()
    base, _ = server("redirect", location=target + "/metrics")  # 127.0.0.1 but another port: another origin
    res = kvdiag("analyze", "--metrics-url", base + "/metrics", "--duration", "1s")
    _one_line(res, "redirected to")
    same, seen = server("redirect", location="/metrics")
    res = kvdiag("analyze", "--metrics-url", same + "/start", "--header", "X-A: b", "--duration", "1s")
    assert res.code == 2, res.err
    assert [p for p, _h in seen] == ["/start", "/metrics"] and seen[1][1].get("X-A") == "b"


# --- finding 27: check has the HTTP options ----------------------------------------------------------
def test_check_sends_headers(kvdiag, server):
    base, _ = server("need_header")
    res = kvdiag("check", "--metrics-url", base + "/metrics")
    assert res.code == 3 and "HTTP 401" in res.out
    res = kvdiag("check", "--metrics-url", base + "/metrics", "--header", "X-A: b", "--timeout", "3s")
    assert res.code == 2, res.out


# --- findings 12, 20: --metrics-file parse errors -------------------------------------------------------
def test_metrics_file_parse_error_says_line_redacted_and_short(kvdiag, tmp_path):
    f = tmp_path / "sm3.log"
    f.write_text("vllm:num_requests_running 1\n(APIServer pid=1) INFO 05-19 10:12:03 [api_server.py:1] args: "
                 "Namespace(api_key='abc123SECRET', hf_token='hf_SECRETabcdefghijklmnop', model='x' "
                 + "y" * 300 + ")\n")
    for verb in ("analyze", "check"):
        res = kvdiag(verb, "--metrics-file", str(f))
        assert res.code == 3
        assert "SECRET" not in res.out + res.err
        msg = res.err if verb == "analyze" else res.out
        assert "sm3.log:2: not Prometheus text format" in msg, msg
        assert len(msg) < 400


def test_metrics_file_label_newline_names_the_line(kvdiag, tmp_path):
    f = tmp_path / "lblnl.prom"
    f.write_text('vllm:num_requests_running{model_name="a\nb"} 1\n')
    _one_line(kvdiag("analyze", "--metrics-file", str(f)), "lblnl.prom:1:")


# --- findings 11, 30: out-of-domain values and duplicates -----------------------------------------------
def _page(value: str) -> str:
    return "\n".join(line if not line.startswith(("vllm:kv_cache_usage_perc", "vllm:num_requests_waiting{",
                                                    "vllm:num_preemptions_total"))
                     else line.rsplit(" ", 1)[0] + " " + value for line in PRESS.decode().splitlines()) + "\n"


@pytest.mark.parametrize("value", ["NaN", "-5", "-Inf", "+Inf", "2.5"])
def test_out_of_domain_values_are_skipped_with_a_note_and_not_healthy(kvdiag, tmp_path, value):
    f = tmp_path / "v.prom"
    f.write_text(_page(value))
    res = kvdiag("analyze", "--metrics-file", str(f), "--format", "json")
    rep = res.json()
    assert rep["verdict"]["primary"] != "healthy" and res.code == 3, rep["verdict"]
    notes = " ".join(rep["inputs"][0]["notes"])
    assert "out of their domain skipped" in notes and "kv_cache_usage" in notes, notes
    assert "inf%" not in res.out and "-500" not in res.out


def test_duplicate_series_are_noted(kvdiag, tmp_path):
    text = PRESS.decode()
    dup = [line.rsplit(" ", 1)[0] + " 0.1" for line in text.splitlines() if line.startswith("vllm:kv_cache_usage_perc")]
    f = tmp_path / "dup.prom"
    f.write_text(text + "\n".join(dup) + "\n")
    rep = kvdiag("analyze", "--metrics-file", str(f), "--format", "json").json()
    assert any("duplicate sample" in n for n in rep["inputs"][0]["notes"]), rep["inputs"]


# --- findings 8, 14, 31: the Prometheus API ------------------------------------------------------------
@pytest.mark.parametrize("answer, needle", [
    ({"status": "success", "data": {"resultType": "vector", "result": [{"metric": 5, "value": [1, "1"]}]}},
     'expected "metric" to be an object'),
    ({"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}, "value": [1, "abc"]}]}},
     'expected "value" to be [unix_time, "number"]'),
    ({"status": "success", "data": "x"}, "expected data.result to be a list"),
    ({"status": "error", "errorType": "bad_data", "error": "too long Authorization: Bearer SECRETPROM"}, "bad_data"),
])
def test_malformed_prometheus_answers_are_one_line(kvdiag, server, answer, needle):
    base, _ = server("prom", body=json.dumps(answer).encode())
    err = _one_line(kvdiag("analyze", "--prometheus-url", base, "--timeout", "3s"), base + "/api/v1/query", needle)
    assert "SECRET" not in err


def _fleet_of(handler):
    """``collect_fleet`` against a loopback Prometheus API served by ``handler``: its ``[(instance, bundle)]``."""
    from kvdiag.collect.prometheus import collect_fleet

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        return collect_fleet(f"http://127.0.0.1:{srv.server_address[1]}", "", 0.0, 600.0, 60.0,
                             HttpOptions(timeout=3))
    finally:
        srv.shutdown()
        srv.server_close()


def test_prometheus_nan_points_are_noted(server):

    class Prom(_Srv):
        def do_GET(self):  # noqa: N802
            if "query_range" in self.path:
                res = {"resultType": "matrix", "result": [{"metric": {"instance": "a"},
                                                            "values": [[1, "NaN"], [2, "+Inf"]]}]}
            else:
                res = {"resultType": "vector", "result": [{"metric": {"instance": "a"}, "value": [2, "1"]}]}
            self._send(200, json.dumps({"status": "success", "data": res}).encode(), "application/json")

    ((inst, b),) = _fleet_of(Prom)
    assert inst == "a" and not b.has("kv_cache_usage")
    notes = " ".join(b.inputs[0].notes)
    assert "kv_cache_usage: NaN ×1" in notes and "kv_cache_usage: +Inf ×1" in notes, notes


def test_prometheus_infinite_resets_never_reach_a_note(server):
    """A ``resets()`` answer of 1e400 (+Inf as a float) is an out-of-domain value, dropped and counted, never
    "num_preemptions fell inf time(s)" (breaker pass, session 7)."""
    from kvdiag.analyze import restart_notes

    class Prom(_Srv):
        def do_GET(self):  # noqa: N802
            if "query_range" in self.path:
                res = {"resultType": "matrix", "result": [{"metric": {"instance": "a"}, "values": [[1, "0.5"]]}]}
            else:
                value = "1e400" if "resets" in self.path else "1"
                res = {"resultType": "vector", "result": [{"metric": {"instance": "a"}, "value": [2, value]}]}
            self._send(200, json.dumps({"status": "success", "data": res}).encode(), "application/json")

    ((inst, b),) = _fleet_of(Prom)
    assert not b.has("counter_resets")
    assert not any("inf" in n for n in restart_notes(b)), restart_notes(b)
    assert "counter_resets: +Inf ×1" in " ".join(b.inputs[0].notes), b.inputs[0].notes
