"""A real Prometheus server for tests and benchmarks: history written as OpenMetrics, loaded with
``promtool tsdb create-blocks-from openmetrics``, served by Debian's ``prometheus`` on 127.0.0.1.

Everything is bounded: the server gets a temporary data dir and port, waits at most ``ready_timeout``
seconds to become ready, and is terminated (then killed) when the context exits.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import requests

PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def backfill(om_path: Path, data_dir: Path, timeout: float = 600) -> None:
    """Load an OpenMetrics file into a TSDB directory with promtool (raises on failure)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", str(om_path), str(data_dir)],
                          capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"promtool failed: {proc.stderr[-2000:]}")


class PrometheusServer:
    """``with PrometheusServer(data_dir) as prom: prom.url``: a Prometheus over an existing TSDB dir."""

    def __init__(self, data_dir: Path, ready_timeout: float = 60) -> None:
        self.data_dir = Path(data_dir)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.ready_timeout = ready_timeout
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> "PrometheusServer":
        cfg = self.data_dir.parent / f"prometheus-{self.port}.yml"
        cfg.write_text("global:\n  scrape_interval: 1h\nscrape_configs: []\n")
        self.log = open(self.data_dir.parent / f"prometheus-{self.port}.log", "w")
        self.proc = subprocess.Popen(
            [PROMETHEUS, f"--config.file={cfg}", f"--storage.tsdb.path={self.data_dir}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--storage.tsdb.retention.time=3650d",
             "--query.max-samples=200000000", "--web.enable-admin-api"],
            stdout=self.log, stderr=subprocess.STDOUT, cwd=self.data_dir.parent, env={**os.environ})
        deadline = time.monotonic() + self.ready_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited: {Path(self.log.name).read_text()[-2000:]}")
            try:
                if requests.get(f"{self.url}/-/ready", timeout=1).status_code == 200:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.2)
        self.__exit__(None, None, None)
        raise RuntimeError("prometheus not ready in time")

    def __exit__(self, *exc) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.log.close()


# --- synthetic vLLM history -------------------------------------------------------------------
QUEUE_BUCKETS = (0.3, 1.0, 5.0, 30.0, float("inf"))
EVICT_BUCKETS = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0, float("inf"))  # a subset of vLLM 0.33's


def vllm_history(instances: dict[str, dict], start: float, steps: int, step: float, spelling: str = "vllm:",
                 job: str = "vllm") -> str:
    """OpenMetrics text with the vLLM series of several instances (one family block per metric).

    ``instances`` maps an instance label to a behaviour: ``usage`` (list cycled), ``waiting`` (int),
    ``running`` (int), ``preempt_per_step`` (float), ``preempt_start`` (float), ``restart_at``
    (step index where every counter falls back to 0), ``preempt_after_restart`` (per step after it),
    ``hit_rate`` (list of (fraction of window, rate)), ``queue_s`` (typical queue seconds), ``evict_idle_s``
    (the server has ``--kv-cache-metrics``: four sampled evictions per step, each idle that many seconds),
    ``api_server_pids`` (the usage gauge exported once per API-server process, only the first carrying the value).
    Names use ``spelling`` (``vllm:`` as vLLM writes them or ``vllm_`` as a Prometheus 2.x server
    stores them).
    """
    p = spelling
    lines: list[str] = []
    ts = [start + i * step for i in range(steps)]

    def lab(inst: str, extra: str = "") -> str:
        base = f'engine="0",instance="{inst}",job="{job}",model_name="m"'
        return "{" + base + ("," + extra if extra else "") + "}"

    def gauge(name: str, fn) -> None:
        lines.append(f"# TYPE {p}{name} gauge")
        for inst, beh in instances.items():
            for i, t in enumerate(ts):
                lines.append(f"{p}{name}{lab(inst)} {fn(beh, i)} {t:.3f}")

    def counter(name: str, fn) -> None:
        lines.append(f"# TYPE {p}{name} counter")
        for inst, beh in instances.items():
            for i, t in enumerate(ts):
                lines.append(f"{p}{name}_total{lab(inst)} {fn(beh, i)} {t:.3f}")

    lines.append(f"# TYPE {p}kv_cache_usage_perc gauge")
    for inst, beh in instances.items():
        pids = beh.get("api_server_pids", 0)
        for i, t in enumerate(ts):
            u = beh["usage"][i % len(beh["usage"])]
            if not pids:
                lines.append(f"{p}kv_cache_usage_perc{lab(inst)} {u} {t:.3f}")
            for k in range(pids):  # multiprocess mode without 'mostrecent': one process carries the value
                pid = 'pid="' + str(100 + k) + '"'
                lines.append(f"{p}kv_cache_usage_perc{lab(inst, pid)} {u if k == 0 else 0.0} {t:.3f}")
    gauge("num_requests_running", lambda b, i: b.get("running", 40))
    gauge("num_requests_waiting", lambda b, i: b.get("waiting", 0))

    def preempt(b, i):
        r = b.get("restart_at")
        if r is not None and i >= r:
            return (i - r) * b.get("preempt_after_restart", 0.0)
        return b.get("preempt_start", 0.0) + i * b.get("preempt_per_step", 0.0)

    counter("num_preemptions", preempt)

    def queries(b, i):
        r = b.get("restart_at")
        return 1000.0 * ((i - r) if r is not None and i >= r else i)

    def hits(b, i):
        r = b.get("restart_at")
        k0 = r if r is not None and i >= r else 0
        total = 0.0
        for k in range(k0, i):
            frac = k / steps
            rate = [hr for f, hr in b.get("hit_rate", [(0.0, 0.5)]) if f <= frac][-1]
            total += 1000.0 * rate
        return total

    counter("prefix_cache_queries", queries)
    counter("prefix_cache_hits", hits)
    lines.append(f"# TYPE {p}request_queue_time_seconds histogram")
    for inst, b in instances.items():
        q = b.get("queue_s", 0.1)
        for i, t in enumerate(ts):
            r = b.get("restart_at")
            n = (i - r) if r is not None and i >= r else i
            below = [n * 10 if q <= le else 0 for le in QUEUE_BUCKETS]
            for le, c in zip(QUEUE_BUCKETS, below):
                les = "+Inf" if le == float("inf") else repr(le)
                series = lab(inst, 'le="' + les + '"')
                lines.append(f"{p}request_queue_time_seconds_bucket{series} {c} {t:.3f}")
            lines.append(f"{p}request_queue_time_seconds_count{lab(inst)} {n * 10} {t:.3f}")
            lines.append(f"{p}request_queue_time_seconds_sum{lab(inst)} {n * 10 * q} {t:.3f}")
    evicting = {inst: b for inst, b in instances.items() if "evict_idle_s" in b}
    if evicting:  # only servers run with --kv-cache-metrics have the residency histograms (reference §1.4)
        lines.append(f"# TYPE {p}kv_block_idle_before_evict_seconds histogram")
        for inst, b in evicting.items():
            idle = b["evict_idle_s"]
            for i, t in enumerate(ts):
                n = i * 4  # four sampled evictions per step
                for le in EVICT_BUCKETS:
                    les = "+Inf" if le == float("inf") else repr(le)
                    series = lab(inst, 'le="' + les + '"')
                    lines.append(f"{p}kv_block_idle_before_evict_seconds_bucket{series} {n if idle <= le else 0} "
                                 f"{t:.3f}")
                lines.append(f"{p}kv_block_idle_before_evict_seconds_count{lab(inst)} {n} {t:.3f}")
                lines.append(f"{p}kv_block_idle_before_evict_seconds_sum{lab(inst)} {n * idle} {t:.3f}")
    lines.append(f"# TYPE {p}cache_config_info gauge")
    for inst in instances:
        for t in ts[:: max(1, steps // 20)]:
            lines.append(f'{p}cache_config_info{{block_size="16",engine="0",instance="{inst}",job="{job}",'
                         f'num_gpu_blocks="27776"}} 1 {t:.3f}')
    lines.append("# EOF")
    return "\n".join(lines) + "\n"
