"""Real Prometheus and Pushgateway processes (Debian's packages) for tests: loopback, temp dirs, bounded, stopped.

Both binaries come from Debian (`apt-get install prometheus prometheus-pushgateway`, done by .ci/run).
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from pathlib import Path

import requests

PROMETHEUS = shutil.which("prometheus")
PUSHGATEWAY = shutil.which("prometheus-pushgateway") or shutil.which("pushgateway")
PROMTOOL = shutil.which("promtool")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_ready(url: str, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited with {proc.returncode}")
        try:
            if requests.get(url, timeout=1).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} not ready after {timeout}s")


@contextlib.contextmanager
def pushgateway(tmp: Path):
    """Start a Pushgateway on 127.0.0.1; yields its base URL."""
    if not PUSHGATEWAY:
        raise RuntimeError("prometheus-pushgateway not installed (apt-get install prometheus-pushgateway)")
    port = free_port()
    log = open(tmp / "pushgateway.log", "w")
    # persistence inside the test's temp folder: Debian's build defaults to /var/lib/prometheus/pushgateway.data,
    # which would carry pushed groups from one run (and one test) to the next
    proc = subprocess.Popen([PUSHGATEWAY, f"--web.listen-address=127.0.0.1:{port}",
                             f"--persistence.file={tmp / 'pushgateway.data'}"], stdout=log, stderr=log)
    try:
        _wait_ready(f"http://127.0.0.1:{port}/-/ready", proc)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@contextlib.contextmanager
def prometheus(tmp: Path, scrape_targets: list[str] | None = None, data_dir: Path | None = None,
               extra_args: list[str] | None = None, honor_labels: bool = True):
    """Start Prometheus on 127.0.0.1 scraping ``scrape_targets`` (host:port, honor_labels unless told) every second.

    ``data_dir`` may hold blocks made by ``promtool tsdb create-blocks-from openmetrics``. Yields the base URL.
    """
    if not PROMETHEUS:
        raise RuntimeError("prometheus not installed (apt-get install prometheus)")
    port = free_port()
    cfg = tmp / "prometheus.yml"
    jobs = ""
    for i, target in enumerate(scrape_targets or []):
        jobs += (f"  - job_name: target{i}\n    honor_labels: {str(honor_labels).lower()}\n    scrape_interval: 1s\n"
                 f"    static_configs:\n      - targets: ['{target}']\n")
    cfg.write_text("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n" + (jobs or "  []\n"))
    data = data_dir or (tmp / "prom-data")
    log = open(tmp / "prometheus.log", "w")
    proc = subprocess.Popen([PROMETHEUS, f"--config.file={cfg}", f"--storage.tsdb.path={data}",
                             f"--web.listen-address=127.0.0.1:{port}", *(extra_args or [])], stdout=log, stderr=log)
    try:
        _wait_ready(f"http://127.0.0.1:{port}/-/ready", proc)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def query(base: str, promql: str) -> list[dict]:
    """Instant query; returns the result vector (list of {metric, value})."""
    r = requests.get(f"{base}/api/v1/query", params={"query": promql}, timeout=5)
    r.raise_for_status()
    return r.json()["data"]["result"]


def wait_for(base: str, promql: str, timeout: float = 30.0) -> list[dict]:
    """Poll an instant query until it returns a non-empty vector (bounded)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        res = query(base, promql)
        if res:
            return res
        time.sleep(0.5)
    raise AssertionError(f"{promql} returned nothing within {timeout}s")
