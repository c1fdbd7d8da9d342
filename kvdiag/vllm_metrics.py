"""The one table of vLLM's /metrics names per kvdiag signal (``vllm_metrics.yaml``, loaded once).

For each signal: the names vLLM has exported it under, best first, the versions of each, how an instant's series
combine (``sum`` over engines and models, ``max`` for ratios), an optional label filter, and each old name's
deprecation as vLLM's stat-logger source writes it. Everything that reads or writes a vLLM metric name derives from
here: :mod:`kvdiag.signals` (``METRIC_TO_SIGNAL``, ``METRIC_ALIASES``, ``CACHE_CONFIG_LABELS``,
``WINDOW_HISTOGRAMS``, the ``metrics`` prose of each signal), the page reader (:mod:`kvdiag.collect.metrics`), the
PromQL reader (:mod:`kvdiag.collect.prometheus`), the rule exporter (:mod:`kvdiag.export`) and the dashboard
(:mod:`kvdiag.dashboards`). This module imports nothing from kvdiag.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

TABLE_PATH = Path(__file__).with_name("vllm_metrics.yaml")
SPELLINGS = ("vllm:", "vllm_")
"""The two spellings of a vLLM name in PromQL: as vLLM writes it, as a Prometheus 2.x server may store it."""


@dataclass(frozen=True)
class MetricName:
    """One name a signal had on /metrics."""

    name: str                 # without the ``vllm:`` prefix and without ``_total``
    versions: str
    deprecated: str = ""      # vLLM's own deprecation note, where it deprecated this name
    blocks: str = ""          # the versions whose counter counted blocks instead of tokens


@dataclass(frozen=True)
class MetricSource:
    """How vLLM exports one signal."""

    signal: str
    type: str                 # gauge | counter | histogram
    across_series: str        # sum | max
    names: tuple[MetricName, ...]
    labels: dict = field(default_factory=dict)
    prefixed: bool = True
    unit: str = ""            # histograms: unit of an observation
    counts: str = "requests"  # histograms: what one observation counts
    description: str = ""     # histograms: what they measure


@dataclass(frozen=True)
class InfoLabel:
    """One label of ``vllm:cache_config_info`` read as a fact."""

    label: str
    signal: str
    versions: str


def _load() -> tuple[dict[str, MetricSource], dict]:
    data = yaml.load(TABLE_PATH.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    table = {}
    for signal, row in data["signals"].items():
        names = tuple(MetricName(n["name"], n["versions"], n.get("deprecated", ""), n.get("blocks", ""))
                      for n in row["names"])
        table[signal] = MetricSource(signal, row["type"], row["across_series"], names, dict(row.get("labels", {})),
                                     row.get("prefixed", True), row.get("unit", ""), row.get("counts", "requests"),
                                     row.get("description", ""))
    return table, data["info"]


TABLE, _INFO = _load()
"""signal -> :class:`MetricSource`, in the table's order."""

INFO_NAME: str = _INFO["name"]
"""``cache_config_info``: the gauge whose labels are the cache configuration."""
INFO_FAMILIES: tuple[str, ...] = tuple(_INFO["families"])
INFO_VERSIONS: str = _INFO["versions"]
INFO_LABELS: tuple[InfoLabel, ...] = tuple(InfoLabel(k, v["signal"], v["versions"]) for k, v in _INFO["labels"].items())


def names(signal: str) -> tuple[str, ...]:
    """The bare /metrics names of ``signal``, best first (``KeyError`` for a signal vLLM does not export)."""
    return tuple(n.name for n in TABLE[signal].names)


def wire(signal: str) -> tuple[str, ...]:
    """The names as they stand on /metrics without the prefix: a counter's with ``_total``."""
    suffix = "_total" if TABLE[signal].type == "counter" else ""
    return tuple(n + suffix for n in names(signal))


def spelled(signal: str) -> list[str]:
    """Every PromQL name of ``signal``: each name in both spellings (``vllm:x``, ``vllm_x``), best name first."""
    return [f"{sep}{n}" for n in wire(signal) for sep in SPELLINGS]


def histogram_base(signal: str) -> str:
    """The metric base name of the histogram whose signal stem is ``signal`` (``kv_block_lifetime`` ->
    ``kv_block_lifetime_seconds``)."""
    if TABLE[signal].type != "histogram":
        raise KeyError(f"{signal} is not a histogram")
    return TABLE[signal].names[0].name


def across_series_max() -> set[str]:
    """The signals whose series of one instant combine by ``max`` (ratios), not ``sum``."""
    return {s for s, row in TABLE.items() if row.across_series == "max" and row.type != "histogram"}


def block_counted_names() -> set[str]:
    """Names of counters that counted blocks, not tokens, in some versions (``gpu_prefix_cache_*`` in V1 0.7-0.8)."""
    return {n.name for row in TABLE.values() for n in row.names if n.blocks}


def label_filters() -> dict[str, dict]:
    """name -> the label values a series of that name must carry to be read (``reason="capacity"``)."""
    return {n.name: row.labels for row in TABLE.values() if row.labels for n in row.names}


def promql_matcher(signal: str) -> str:
    """The label filter of ``signal`` as PromQL matchers (``reason="capacity"``), '' for none."""
    return ",".join(f'{k}="{v}"' for k, v in TABLE[signal].labels.items())


def prose(signal: str) -> tuple[str, ...]:
    """What :attr:`kvdiag.signals.Signal.metrics` says of ``signal``: each name with its versions."""
    row = TABLE[signal]
    if row.type == "histogram":
        return (f"{row.names[0].name}_bucket / _sum / _count (histogram; {row.names[0].versions})",)
    return tuple(f"{w} ({n.versions})" for w, n in zip(wire(signal), row.names))


def info_prose(signal: str) -> tuple[str, ...]:
    """The ``metrics`` prose of a fact read from ``cache_config_info`` labels."""
    return tuple(f"{INFO_NAME}{{{i.label}}} ({i.versions})" for i in INFO_LABELS if i.signal == signal)


def all_names() -> set[str]:
    """Every bare name of the table (with the info gauge's families)."""
    return {n.name for row in TABLE.values() for n in row.names} | set(INFO_FAMILIES)
