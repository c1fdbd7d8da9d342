"""Live scrape of a real HTTP /metrics endpoint (prometheus-client on 127.0.0.1) whose values change while
kvdiag scrapes it. Bounded: a few seconds, loopback only, the server stops itself."""

from __future__ import annotations

import threading
import time
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, Counter, Gauge, make_wsgi_app
import pytest

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


class _Quiet(WSGIRequestHandler):
    def log_message(self, *args):
        pass


class FakeVllm:
    """A registry with vLLM 0.33 metric names, served over HTTP, mutated by a background thread."""

    def __init__(self, usage: list[float], preempt_step: int, waiting: int):
        self.registry = CollectorRegistry()
        labels = ["engine", "model_name"]
        self.usage_g = Gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", labels,
                             registry=self.registry)
        self.running = Gauge("vllm:num_requests_running", "running", labels, registry=self.registry)
        self.waiting = Gauge("vllm:num_requests_waiting", "waiting", labels, registry=self.registry)
        self.preempt = Counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.", labels,
                               registry=self.registry)
        info = Gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig",
                     ["block_size", "num_gpu_blocks", "gpu_memory_utilization", "engine"], registry=self.registry)
        info.labels("16", "27776", "0.9", "0").set(1)
        self.usage, self.step, self.wait_n = usage, preempt_step, waiting
        self.stop = threading.Event()
        self.server = make_server("127.0.0.1", 0, make_wsgi_app(self.registry), handler_class=_Quiet)
        self.url = f"http://127.0.0.1:{self.server.server_port}/metrics"

    def _mutate(self):
        i = 0
        lab = ("0", MODEL)
        while not self.stop.is_set() and i < 200:
            self.usage_g.labels(*lab).set(self.usage[i % len(self.usage)])
            self.running.labels(*lab).set(40)
            self.waiting.labels(*lab).set(self.wait_n)
            if self.step:
                self.preempt.labels(*lab).inc(self.step)
            i += 1
            time.sleep(0.2)

    def __enter__(self):
        self.preempt.labels("0", MODEL).inc(0)
        self.usage_g.labels("0", MODEL).set(self.usage[0])
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        threading.Thread(target=self._mutate, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()


def test_live_full_pool_with_rising_preemptions_is_capacity_pressure(kvdiag):
    with FakeVllm(usage=[0.96, 0.98, 0.99, 0.97], preempt_step=2, waiting=0) as srv:
        res = kvdiag("analyze", "--metrics-url", srv.url, "--duration", "3s", "--interval", "500ms",
                     "--format", "json")
    report = res.json()
    assert report["verdict"]["primary"] == "capacity_pressure"
    assert res.code == 2
    cap = next(f for f in report["findings"] if f["class"] == "capacity_pressure")
    ev = {e["signal"]: e for e in cap["evidence"]}
    assert ev["num_preemptions"]["value"] > 0            # increase over the window, not the cumulative count
    assert ev["kv_cache_usage"]["value"] >= 0.96
    assert ev["kv_cache_usage"]["source"].startswith(f"metric:vllm:kv_cache_usage_perc{{engine=\"0\"")
    assert ev["kv_capacity_tokens"]["value"] == 27776 * 16
    assert report["inputs"][0]["records"] >= 5             # it really scraped repeatedly
    assert report["window"]["start"] and report["window"]["end"] > report["window"]["start"]


def test_live_high_usage_without_preemption_or_queue_is_not_capacity_pressure(kvdiag):
    with FakeVllm(usage=[0.97, 0.98], preempt_step=0, waiting=0) as srv:
        res = kvdiag("analyze", "--metrics-url", srv.url, "--duration", "2s", "--interval", "500ms",
                     "--format", "json")
    report = res.json()
    assert report["verdict"]["primary"] != "capacity_pressure"
    cap = next(f for f in report["findings"] if f["class"] == "capacity_pressure")
    assert cap["status"] == "quiet"
    assert res.code == 0


def test_live_single_scrape_cannot_judge_preemption_increase(kvdiag):
    """One scrape gives no window: the counter's increase is unknown, never read as cumulative."""
    with FakeVllm(usage=[0.99], preempt_step=5, waiting=0) as srv:
        res = kvdiag("analyze", "--metrics-url", srv.url, "--duration", "1s", "--interval", "5s", "--format", "json")
    cap = next(f for f in res.json()["findings"] if f["class"] == "capacity_pressure")
    assert cap["status"] == "unknown"
    assert "num_preemptions" in cap["reason"]
