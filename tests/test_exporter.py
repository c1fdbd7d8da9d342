"""kvdiag watch --listen (issue 30): a real Prometheus scrapes kvdiag's own /metrics while the lab's replay server
plays a recorded run; the verdict series it stores are analyze's verdicts on the same pages (healthy on the first
half, capacity pressure at the end), the server is named by ``vllm_instance`` (the target keeps ``instance``), and
the derived signals vLLM does not export are there."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import requests

from conftest import FIXTURES, ROOT, run_kvdiag
from replay import Replay
from services import free_port, prometheus, query

SERIES = FIXTURES / "series" / "vllm033_pressure"
MS_PER_PAGE = 250


def _range(base: str, promql: str, start: float, end: float) -> list[dict]:
    r = requests.get(f"{base}/api/v1/query_range", params={"query": promql, "start": start, "end": end, "step": 1},
                     timeout=10)
    r.raise_for_status()
    return r.json()["data"]["result"]


def err_of(proc) -> str:
    if proc.poll() is None:
        return "kvdiag watch served no verdict within 30 s"
    return proc.stderr.read()


def test_prometheus_scrapes_the_exporter_and_agrees_with_analyze(tmp_path):
    whole = run_kvdiag("analyze", "--metrics-file", str(SERIES), "--format", "json").json()["verdict"]
    first_half = run_kvdiag("analyze", "--metrics-file", *[str(SERIES / "metrics" / f"{i:04d}.prom")
                                                           for i in range(0, 31)], "--format", "json").json()["verdict"]
    assert (whole["primary"], first_half["primary"]) == ("capacity_pressure", "healthy")
    port = free_port()
    with prometheus(tmp_path, [f"127.0.0.1:{port}"], honor_labels=False) as prom:
        began = time.time()
        with Replay(SERIES, MS_PER_PAGE) as rep:
            proc = subprocess.Popen([sys.executable, "-m", "kvdiag", "watch", rep.url, "--interval", "0.25s",
                                     "--window", "1h", "--listen", f"127.0.0.1:{port}", "--no-tui"], cwd=ROOT,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            try:
                deadline, page = time.monotonic() + 30, None
                while time.monotonic() < deadline and (page is None or "kvdiag_verdict{" not in page.text):
                    time.sleep(0.2)
                    try:
                        page = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
                    except requests.ConnectionError:  # kvdiag still starting
                        continue
                assert page is not None and "kvdiag_verdict{" in page.text, err_of(proc)
                assert page.headers["Content-Type"].startswith("text/plain")  # prometheus-client's exposition
                time.sleep(60 * MS_PER_PAGE / 1000 + 3)  # every page played, the last judged and scraped
                got = query(prom, "kvdiag_verdict")
                derived = {r["metric"]["__name__"] for r in query(prom, '{__name__=~"kvdiag_.+"}')}
                cap = query(prom, 'kvdiag_finding{rule_id="CAP001"}')
            finally:
                proc.send_signal(signal.SIGTERM)
                out, err = proc.communicate(timeout=60)
        history = _range(prom, "kvdiag_verdict", began, time.time())
    assert proc.returncode == 0, err
    assert len(got) == 1, got
    m = got[0]["metric"]
    assert (m["class"], m["severity"]) == (whole["primary"], whole["severity"])
    assert m["vllm_instance"] == rep.url and m["instance"] == f"127.0.0.1:{port}" and "exported_instance" not in m
    classes = [r["metric"]["class"] for r in sorted(history, key=lambda r: float(r["values"][0][0]))]
    assert classes[0] == first_half["primary"] and classes[-1] == whole["primary"], classes
    assert {"kvdiag_finding", "kvdiag_target_up", "kvdiag_kv_token_occupancy_ratio", "kvdiag_kv_empty_slots_ratio",
            "kvdiag_prefix_cache_queries_per_second", "kvdiag_prefix_cache_hits_per_second",
            "kvdiag_kv_demand_ratio"} <= derived, derived
    assert cap and cap[0]["value"][1] == "1" and cap[0]["metric"]["status"] == "fires"
    assert out.startswith(f"CRITICAL: {whole['primary']}")
