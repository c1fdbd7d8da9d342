"""A Prometheus-API server that answers nonsense (loopback, bounded): the fleet path refuses impossible numbers with a
note instead of judging on them (second breaker pass, issue 6). A real Prometheus cannot produce these answers, so
a small HTTP server speaking the same API stands in for a broken or hostile one."""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest

END = 1_700_003_600


class FakePromAPI:
    """``rules``: list of (substring of the PromQL, value) answered for instance ``a:8000``; first match wins;
    range queries get the value at three steps. Every query is kept in ``queries``."""

    def __init__(self, rules: list[tuple[str, object]]):
        self.rules, self.queries = rules, []
        outer = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):  # noqa: N802
                u = urlsplit(self.path)
                p = {k: v[0] for k, v in parse_qs(u.query).items()}
                q = p.get("query", "")
                outer.queries.append(q)
                val = next((v for s, v in outer.rules if s in q), None)
                res = []
                if val is not None and "query_range" in u.path:
                    s, e = float(p["start"]), float(p["end"])
                    res = [{"metric": {"instance": "a:8000"}, "values": [[t, str(val)] for t in (s, (s + e) / 2, e)]}]
                    rt = "matrix"
                else:
                    rt = "vector"
                    if val is not None:
                        res = [{"metric": {"instance": "a:8000"}, "value": [float(p.get("time", END)), str(val)]}]
                body = json.dumps({"status": "success", "data": {"resultType": rt, "result": res}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.server.server_port}"

    def __enter__(self):
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


USAGE = ("max by (instance) ({__name__=~", 0.5)  # answers the usage gauge (range) and the other max-by queries
FIND = ("count by (instance) (last_over_time(", 1)  # instance discovery


def _run(kvdiag, api, *extra):
    res = kvdiag("analyze", "--prometheus-url", api.url, "--until", str(END), "--since", "1h", "--format", "json",
                 *extra)
    assert "Traceback" not in res.err and res.code in (0, 1, 2, 3), res.err
    return res.json()


def test_load_split_whose_sides_exceed_the_whole_is_refused(kvdiag):
    rules = [("and on (instance)", 5000.0),        # every side-sum (hits and queries, low and high): 5,000
             ("sum_over_time", 1000.0),             # the whole window's queries: 1,000
             USAGE]
    with FakePromAPI([FIND] + rules) as api:
        rep = _run(kvdiag, api)
    status = {f["rule_id"]: f["status"] for f in rep["findings"]}
    assert status["PFX002"] == "unknown"
    assert any("exceed the window's queries" in n for n in rep["notes"]), rep["notes"]


@pytest.mark.parametrize("count", [2.5, "+Inf", -3, 1e9])
def test_a_pid_count_that_is_not_a_count_is_refused(kvdiag, count):
    with FakePromAPI([FIND, ("group by (instance, engine, pid)", count), USAGE]) as api:
        rep = _run(kvdiag, api)
    status = {f["rule_id"]: f["status"] for f in rep["findings"]}
    assert status["OK004"] == "unknown"
    assert any("kv_cache_usage_series" in n and "not a count of series" in n for n in rep["notes"]), rep["notes"]


def test_absurd_eviction_counts_and_quantiles_are_not_readings(kvdiag):
    rules = [FIND, ("kv_block_idle_before_evict_seconds_count", 1e308),
             ("histogram_quantile(0.5, sum by (instance, le) (increase({__name__=~\"(?:ray_)?vllm[:_]kv_block_idle", 1e12),
             USAGE]
    with FakePromAPI(rules) as api:
        rep = _run(kvdiag, api)
    text = json.dumps(rep)
    assert not re.search(r"\d{16,}", text)                        # no 300-digit numbers anywhere
    status = {f["rule_id"]: f["status"] for f in rep["findings"]}
    assert status["PFX003"] == "unknown"
    assert any("more than 30 years" in n for n in rep["notes"]), rep["notes"]


def test_a_step_longer_than_the_window_is_capped_and_written_as_promql_reads_it(kvdiag):
    with FakePromAPI([FIND, USAGE]) as api:
        _run(kvdiag, api, "--step", "7d")
        subs = [q for q in api.queries if re.search(r"\[\d+s:", q)]
        _run(kvdiag, api, "--step", "1500ms")
        subs_ms = [q for q in api.queries if "avg_over_time" in q][-1]
    assert subs and all(re.search(r"\[3600s:3600s\]", q) or "sum_over_time" in q for q in subs if "avg_over" in q)
    assert "604800s]" not in " ".join(api.queries)
    assert "[3600s:1500ms]" in subs_ms
