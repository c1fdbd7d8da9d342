"""kvdiag's own /metrics (``kvdiag watch --listen HOST:PORT``): the latest verdict of every watched server for
Prometheus to scrape, rendered by prometheus-client.

The series are those ``check --textfile`` writes (``kvdiag_verdict``, ``kvdiag_finding``), plus the derived signals
vLLM does not export (:func:`kvdiag.watch.derived_values`) and whether the last scrape of the server worked. The
server is named by ``vllm_instance``, never ``instance``: that label is the scrape target's own (Prometheus would
rename ours to ``exported_instance``).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import GaugeMetricFamily

from .errors import InputError

from .check import LABEL  # vllm_instance, as check --textfile writes

DERIVED_HELP = {
    "kv_token_occupancy_ratio": "Tokens held in the referenced KV blocks / their slots (derived by kvdiag)",
    "kv_empty_slots_ratio": "Share of the KV pool's slots reserved but empty (derived by kvdiag)",
    "prefix_cache_hits_per_second": "Prefix-cache hit tokens per second over the window (derived by kvdiag)",
    "prefix_cache_queries_per_second": "Prefix-cache queried tokens per second over the window (derived by kvdiag)",
    "kv_full_eta_seconds": "Forecast: seconds until the KV pool is full at the current trend (derived by kvdiag)",
    "kv_demand_ratio": "Estimated live KV demand / pool size (derived by kvdiag; above 1 the pool cannot hold it)",
}


class WatchCollector:
    """A prometheus-client collector over a :class:`kvdiag.watch.Watch` (read at every scrape)."""

    def __init__(self, watch) -> None:
        self.watch = watch

    def describe(self):
        return []

    def collect(self):
        from .watch import derived_values

        up = GaugeMetricFamily("kvdiag_target_up", "1 when kvdiag's last scrape of the vLLM server worked", labels=[LABEL])
        last = GaugeMetricFamily("kvdiag_last_run_timestamp_seconds", "Unix time of kvdiag's last verdict",
                                 labels=[LABEL])
        verdict = GaugeMetricFamily("kvdiag_verdict", "The verdict of the last kvdiag check (always 1; read the labels)",
                                    labels=[LABEL, "class", "severity"])
        finding = GaugeMetricFamily("kvdiag_finding", "1 when the rule fires (severity ok: a not-a-KV-problem note), "
                                    "0 when quiet or unknown", labels=[LABEL, "rule_id", "class", "severity", "status"])
        derived = {k: GaugeMetricFamily(f"kvdiag_{k}", h, labels=[LABEL]) for k, h in DERIVED_HELP.items()}
        for s in self.watch.servers:
            with s.lock:
                ok, report, bundle, t = s.up, s.report, s.bundle, s.last_ok
            if ok is None:
                continue
            up.add_metric([s.url], 1 if ok else 0)
            if report is None:
                continue
            if t is not None:
                last.add_metric([s.url], t)
            verdict.add_metric([s.url, report.verdict.primary, report.verdict.severity], 1)
            for f in report.findings:
                sev = f.severity if f.status == "fires" else "ok"
                finding.add_metric([s.url, f.rule_id, f.cls, sev, f.status], 1 if f.status == "fires" else 0)
            for k, v in derived_values(bundle).items():
                derived[k].add_metric([s.url], v)
        yield from (up, last, verdict, finding, *derived.values())


def parse_listen(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``127.0.0.1:9464``, ``[::1]:9464``, ``:9464`` = every address) → (host, port).

    Raises:
        InputError: not HOST:PORT with a port 0..65535.
    """
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise InputError(f"--listen {value!r}: expected HOST:PORT, e.g. 127.0.0.1:9464")
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port)


def serve(watch, listen: str):
    """Start the exporter on ``listen`` (a thread); returns ``(server, actual_port)``.

    Raises:
        InputError: the address cannot be bound (in use, not this machine's).
    """
    host, port = parse_listen(listen)
    reg = CollectorRegistry(auto_describe=False)
    reg.register(WatchCollector(watch))
    try:
        server, _thread = start_http_server(port, addr=host, registry=reg)
    except OSError as exc:
        raise InputError(f"--listen {listen}: cannot listen there ({exc.strerror or exc})") from None
    return server, server.server_address[1]
