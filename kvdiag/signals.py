"""SIGNALS: the one vocabulary that logs and metrics both feed, and that rules read.

Every observation kvdiag collects is stored under a signal name from this registry, in base units
(ratios 0–1, tokens, blocks, bytes, seconds, requests). Collectors translate each vLLM version's
metric names and log wordings into these names; rules never see a vLLM metric name.

The registry itself is data, ``kvdiag/signals.yaml`` (kind, unit, description and sources of each signal); the
vLLM /metrics names that feed a signal come from the one table ``kvdiag/vllm_metrics.yaml``
(:mod:`kvdiag.vllm_metrics`). Sources are cited as in ``shared/reference/vllm-observability.md`` (§1 metrics,
§2 log lines).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from . import vllm_metrics as _vm


@dataclass(frozen=True)
class Signal:
    """One named quantity.

    Attributes:
        name: the signal name rules use (vLLM's / Prometheus's own term where one exists).
        kind: ``gauge`` (instant value), ``counter`` (monotonic, resets on restart), ``fact``
            (configuration or start-up figure), ``event`` (something that happened; value is
            a count or a size, ``text`` carries a category).
        unit: base unit: ``ratio``, ``tokens``, ``blocks``, ``bytes``, ``requests``,
            ``tokens/s``, ``ratio/s``, ``requests/s``, ``seconds``, ``x`` (multiplier), ``count``, ``text``, ``bool``.
        description: one line.
        metrics: vLLM metric names (without the ``vllm:`` prefix, without ``_total``) that
            feed it, with the versions that expose them.
        logs: log-line ids of the reference (§2) that feed it.
    """

    name: str
    kind: str
    unit: str
    description: str
    metrics: tuple[str, ...] = field(default_factory=tuple)
    logs: tuple[str, ...] = field(default_factory=tuple)


def _fed(*signals: str) -> tuple[str, ...]:
    """The ``metrics`` prose of a signal read from (or derived from) these signals' /metrics names."""
    return tuple(p for s in signals for p in _vm.prose(s))


def _info(signal: str) -> tuple[str, ...]:
    """The ``metrics`` prose of a fact read from a ``cache_config_info`` label."""
    return _vm.info_prose(signal)


SIGNALS_PATH = Path(__file__).with_name("signals.yaml")


def _load_signals() -> tuple[list[Signal], list[Signal]]:
    """The registry of ``signals.yaml``: (its ``signals``, its ``window_signals``), each in the file's order."""
    data = yaml.load(SIGNALS_PATH.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))

    def make(name: str, e: dict) -> Signal:
        if "metrics_of" in e:
            metrics = _fed(*e["metrics_of"])
        elif "info_label_of" in e:
            metrics = _info(e["info_label_of"])
        else:
            metrics = tuple(e.get("metrics", ()))
        return Signal(name, e["kind"], e["unit"], e["description"], metrics, tuple(e.get("logs", ())))

    return ([make(n, e) for n, e in data["signals"].items()],
            [make(n, e) for n, e in data["window_signals"].items()])


_SIGNALS, _WINDOW_LISTED = _load_signals()

SIGNALS: dict[str, Signal] = {s.name: s for s in _SIGNALS}


def unit_of(name: str) -> str:
    """Unit of a signal; raises ``KeyError`` for a name not in :data:`SIGNALS`."""
    return SIGNALS[name].unit


# ---------------------------------------------------------------------------------------------
# Metric names on /metrics → signals, from the one table (kvdiag/vllm_metrics.yaml). Keys are the metric family name
# after removing the ``vllm:`` / ``vllm_`` / ``ray_vllm:`` prefix and a trailing ``_total`` (counters are exposed as
# ``<name>_total``, §1.0); histograms are in WINDOW_HISTOGRAMS, process_start_time_seconds (no vLLM prefix) in neither.
METRIC_TO_SIGNAL: dict[str, str] = {n.name: row.signal for row in _vm.TABLE.values()
                                    if row.type != "histogram" and row.prefixed for n in row.names}

# cache_config_info labels → signal. Label values are Python str() of the field (§1.0).
CACHE_CONFIG_LABELS: dict[str, str] = {i.label: i.signal for i in _vm.INFO_LABELS}

VLLM_PREFIXES = ("ray_vllm:", "vllm:", "vllm_")


def metric_signal(family: str) -> str | None:
    """Map a /metrics family or sample name to a signal name, or ``None`` when kvdiag ignores it.

    Accepts the ``vllm:`` spelling, the ``vllm_`` spelling a Prometheus 2.x server stores, and the
    ``ray_vllm:`` prefix of Ray Serve; drops ``_total``; ignores ``*_created`` (§1.0).
    """
    base = metric_base(family)  # histogram and ignored stems are never keys of METRIC_TO_SIGNAL
    if base is None or base.endswith("_created"):
        return None
    return METRIC_TO_SIGNAL.get(base)


# ---------------------------------------------------------------------------------------------
# /metrics coverage and window signals (issue 4). Appended as a block so the registry above stays
# as it is; every name is registered in SIGNALS below.

#: Histograms kvdiag reads over a window: metric base name (no prefix) → signal stem. The raw
#: series land in ``<stem>_bucket`` (text = the ``le`` bound), ``<stem>_sum`` and ``<stem>_count``
#: (cumulative counters, reset on restart); the window facts are ``<stem>_mean`` and
#: ``<stem>_p50`` / ``<stem>_p95`` (Prometheus ``histogram_quantile`` over the window's bucket
#: increases). Source: ``v1/metrics/loggers.py`` and ``engine/metrics.py`` (reference §1.2, §1.3).
WINDOW_HISTOGRAMS: dict[str, tuple[str, str, str]] = {
    # metric base name: (signal stem, unit, description)
    _vm.histogram_base(stem): (stem, row.unit, row.description) for stem, row in _vm.TABLE.items()
    if row.type == "histogram"}

#: What one observation of a WINDOW_HISTOGRAMS histogram counts (default: finished requests).
HISTOGRAM_COUNT_UNIT: dict[str, str] = {_vm.histogram_base(stem): row.counts for stem, row in _vm.TABLE.items()
                                        if row.type == "histogram" and row.counts != "requests"}

_WINDOW_SIGNALS: list[Signal] = []
for _base, (_stem, _unit, _what) in WINDOW_HISTOGRAMS.items():
    _src = _fed(_stem)
    _cu = HISTOGRAM_COUNT_UNIT.get(_base, "requests")
    _WINDOW_SIGNALS += [
        Signal(f"{_stem}_bucket", "counter", _cu,
               f"histogram bucket of {_what}: cumulative count of {_cu} ≤ the bound in ``text`` (``le``)", _src),
        Signal(f"{_stem}_sum", "counter", _unit, f"histogram sum of {_what} (cumulative)", _src),
        Signal(f"{_stem}_count", "counter", _cu, f"histogram count of {_what} (cumulative)", _src),
        Signal(f"{_stem}_mean", "fact", _unit,
               f"mean {_what} over the window: Δsum / Δcount with counter resets (derived)", _src),
        Signal(f"{_stem}_p50", "fact", _unit,
               f"median {_what} over the window: histogram_quantile(0.5) of the bucket increases (derived)", _src),
        Signal(f"{_stem}_p95", "fact", _unit,
               f"95th percentile {_what} over the window: histogram_quantile(0.95) of the bucket increases "
               "(derived)", _src),
    ]
_WINDOW_SIGNALS += _WINDOW_LISTED  # signals.yaml: window_signals
for _s in _WINDOW_SIGNALS:
    SIGNALS.setdefault(_s.name, _s)

#: Alternative names of one quantity, best first (the table's order). When a page (or a Prometheus instance) has
#: several, only the best is read: V1 0.9-0.10 expose both ``kv_cache_usage_perc`` and
#: ``gpu_cache_usage_perc`` and both prefix-cache counter pairs (reference §5 Renames); summing
#: them would double the counters.
METRIC_ALIASES: dict[str, tuple[str, ...]] = {s: _vm.names(s) for s, row in _vm.TABLE.items() if len(row.names) > 1}

#: Every other vLLM metric of reference §1, with why kvdiag does not read it. A name that is in
#: neither this table nor METRIC_TO_SIGNAL / WINDOW_HISTOGRAMS / cache_config_info is new to
#: kvdiag; tests check the reference's list against these tables.
IGNORED_METRICS: dict[str, str] = {
    "lora_requests_info": "LoRA adapter bookkeeping, not KV",
    "engine_sleep_state": "sleep mode, not KV pressure",
    "num_requests_kv_fetch_by_stage": "KV-connector consumer state (0.33), out of scope",
    "iteration_tokens": "batch size in tokens per step, not KV occupancy",
    "request_max_num_generation_tokens": "requested budget; the finished lengths are read instead",
    "request_params_max_tokens": "requested budget; the finished lengths are read instead",
    "request_params_n": "n per request",
    "request_params_best_of": "best_of per request (0.4-0.5)",
    "request_success": "finished requests by reason, not KV",
    "time_per_output_token_seconds": "decode latency, not KV (renamed inter_token_latency_seconds)",
    "inter_token_latency_seconds": "decode latency, not KV",
    "request_time_per_output_token_seconds": "decode latency, not KV",
    "request_prefill_time_seconds": "latency symptom; queue time is read instead",
    "request_decode_time_seconds": "latency symptom; queue time is read instead",
    "time_in_queue_requests": "V0 0.6-0.7 duplicate of request_queue_time_seconds",
    "model_forward_time_milliseconds": "V0 0.6-0.7 forward time, not KV",
    "model_execute_time_milliseconds": "V0 0.6-0.7 execute time, not KV",
    "avg_prompt_throughput_toks_per_s": "V0 0.4-0.6 gauge; the log line gives the same",
    "avg_generation_throughput_toks_per_s": "V0 0.4-0.6 gauge; the log line gives the same",
    "cpu_prefix_cache_hit_rate": "V0 CPU-side prefix cache, not the GPU pool",
    "spec_decode_draft_acceptance_rate": "speculative decoding, not KV",
    "spec_decode_efficiency": "speculative decoding, not KV",
    "spec_decode_num_accepted_tokens": "speculative decoding, not KV",
    "spec_decode_num_draft_tokens": "speculative decoding, not KV",
    "spec_decode_num_emitted_tokens": "speculative decoding, not KV",
    "tokens": "V0 0.6-0.7 counter declared but never incremented",
    "request_num_preemptions": "per-request preemption histogram (0.33); num_preemptions_total is read",
    "external_prefix_cache_queries": "KV-connector (cross-instance) cache, not the local pool",
    "external_prefix_cache_hits": "KV-connector (cross-instance) cache, not the local pool",
    "prompt_tokens_cached": "local + external cached tokens; prefix_cache_hits is read",
    "prompt_tokens_by_source": "split of prompt_tokens by source; prefix_cache_hits is read",
    "prompt_tokens_cached_by_source": "tier of cache hits (0.33)",
    "prompt_tokens_recomputed": "0.16 only; cached tokens recomputed",
    "request_prefill_kv_computed_tokens": "prompt minus cached tokens per request",
    "mm_cache_queries": "multimodal cache, not KV",
    "mm_cache_hits": "multimodal cache, not KV",
    "corrupted_requests": "NaN logits (VLLM_COMPUTE_NANS_IN_LOGITS), not KV",
    "admission_rejections": "front-end queue-limit rejections (0.33), not KV",
    "estimated_flops_per_gpu": "performance estimate, not KV",
    "estimated_read_bytes_per_gpu": "performance estimate, not KV",
    "estimated_write_bytes_per_gpu": "performance estimate, not KV",
}


def metric_base(name: str) -> str | None:
    """The bare vLLM metric name: prefix (``vllm:``, ``vllm_``, ``ray_vllm:``) and ``_total`` /
    histogram suffixes removed; ``None`` for a non-vLLM name.

    ``vllm:iteration_tokens_total_bucket`` → ``iteration_tokens``; ``vllm_num_preemptions_total`` →
    ``num_preemptions``; ``vllm:x_created`` → ``x_created`` (callers skip ``_created``).
    """
    for prefix in VLLM_PREFIXES:
        if name.startswith(prefix):
            name = name[len(prefix):]
            break
    else:
        return None
    for suffix in ("_bucket", "_sum", "_count"):
        if name.endswith(suffix) and name[: -len(suffix)] and not name.endswith("_total_count"):
            stem = name[: -len(suffix)]
            if stem in WINDOW_HISTOGRAMS or stem in IGNORED_METRICS or stem.removesuffix("_total") in IGNORED_METRICS:
                name = stem
                break
    if name.endswith("_total"):
        name = name[: -len("_total")]
    return name


def classify_metric(name: str) -> tuple[str, str]:
    """How kvdiag treats one vLLM metric name: ``("signal", SIGNAL)``, ``("histogram", STEM)``,
    ``("facts", "cache_config_info")``, ``("ignored", REASON)`` or ``("unknown", "")``.

    Accepts every spelling :func:`metric_signal` accepts, with or without ``_total`` / ``_bucket``.
    """
    base = metric_base(name)
    if base is None:
        return "unknown", ""
    if base.endswith("_created"):
        return "ignored", "creation time of a counter or histogram (§1.0)"
    if base in _vm.INFO_FAMILIES:
        return "facts", _vm.INFO_NAME
    if base in WINDOW_HISTOGRAMS:
        return "histogram", WINDOW_HISTOGRAMS[base][0]
    if base in METRIC_TO_SIGNAL:
        return "signal", METRIC_TO_SIGNAL[base]
    if base in IGNORED_METRICS:
        return "ignored", IGNORED_METRICS[base]
    return "unknown", ""


_CHECKED_DERIVED = {"prefix_cache_retention_seconds", "kv_block_alloc_tokens_per_second", "kv_demand_tokens",
                    "kv_demand_ratio", "kv_fit_requests", "max_num_seqs_fit", "kv_demand_requests",
                    "hybrid_block_size", "prefix_cache_readmission_preemptions", "kv_token_occupancy",
                    "kv_empty_slots_ratio", "kv_slots_freed_tokens", "kv_slots_freed_blocks", "kv_extra_requests_fit",
                    "prefix_cache_hits_per_second_early", "prefix_cache_hits_per_second_late",
                    "prefix_cache_queries_per_second_early", "prefix_cache_queries_per_second_late",
                    "num_requests_waiting_when_full"}


def checks_derived_domain(name: str) -> bool:
    """Is ``name`` a derived signal whose value :func:`derived_domain_error` vets before it is stored?"""
    return (name.startswith("prefix_cache_hit_rate") and name != "prefix_cache_hit_rate"
            and name != "prefix_cache_hit_rate_cumulative") or name.endswith(("_p50", "_p95", "_mean")) \
        or name in _CHECKED_DERIVED


def derived_domain_error(name: str, value: float) -> str:
    """Why a derived value cannot be a value of signal ``name`` ('' when it can).

    Non-finite values never; a hit rate (``prefix_cache_hit_rate*`` except the ``*_drop`` differences, which may be
    negative) must lie in 0..1 — hits above queries mean the counters are not what vLLM exports; seconds, tokens,
    blocks, requests and tokens/s are not negative.
    """
    if not math.isfinite(value):
        return "not a finite number"
    if name.startswith("prefix_cache_hit_rate") and not name.endswith("_drop") and not -1e-9 <= value <= 1 + 1e-9:
        return "a hit rate outside 0-100% (hits above queries, or a falling counter)"
    spec = SIGNALS.get(name)
    if spec is not None and spec.unit in ("seconds", "tokens", "blocks", "requests", "tokens/s") and value < 0:
        return f"negative {spec.unit}"
    if spec is not None and spec.unit == "seconds" and value > 1e9:
        return "more than 30 years"
    return ""
