"""What the simulator's outputs share: the ``--step-cost`` parser (``kvdiag simulate`` and ``kvdiag analyze
--trace``) and the per-setting table's columns and labels (the text, Markdown and HTML renderers of the outcome
document, :func:`kvdiag.commands.simulate.build_document`)."""

from __future__ import annotations

import dataclasses
import math

import click

from .model import StepCost

STEP_COST_KEYS = ("overhead_ms", "weights_ms", "compute_us_per_token", "kv_read_ns_per_token", "jitter", "seed")


def parse_step_cost(text: str | None, base: StepCost | None) -> StepCost:
    """``overhead_ms=4,weights_ms=45,compute_us_per_token=230,kv_read_ns_per_token=500[,jitter=0.03,seed=1076]``
    → :class:`StepCost`; keys not given come from ``base`` (a lab case's constants)."""
    vals: dict[str, float] = dataclasses.asdict(base) if base else {}
    if text:
        for part in text.split(","):
            if not part.strip():
                continue
            k, sep, v = part.partition("=")
            k = k.strip()
            if not sep or k not in STEP_COST_KEYS:
                raise click.BadParameter(f"{part.strip()!r}: expected key=value with keys {', '.join(STEP_COST_KEYS)}",
                                         param_hint="--step-cost")
            try:
                x = float(v)
            except ValueError:
                raise click.BadParameter(f"{k}={v.strip()!r}: expected a number", param_hint="--step-cost") from None
            hi = 1.0 if k == "jitter" else (2**63 if k == "seed" else 1e6)
            if not math.isfinite(x) or not 0 <= x <= hi or (k == "seed" and x != int(x)):
                raise click.BadParameter(f"{k}={v.strip()}: expected a finite number from 0 to {hi:g}",
                                         param_hint="--step-cost")
            vals[k] = x
    missing = [k for k in STEP_COST_KEYS[:4] if k not in vals]
    if missing:
        raise click.BadParameter(f"missing {', '.join(missing)}: the step-time model is a parameter "
                                 "(overhead_ms, weights_ms, compute_us_per_token, kv_read_ns_per_token)",
                                 param_hint="--step-cost")
    if vals["overhead_ms"] + vals["weights_ms"] <= 0 and vals["compute_us_per_token"] <= 0:
        raise click.BadParameter("a step would take no time: expected overhead_ms, weights_ms or "
                                 "compute_us_per_token above 0", param_hint="--step-cost")
    return StepCost(float(vals["overhead_ms"]), float(vals["weights_ms"]), float(vals["compute_us_per_token"]),
                    float(vals["kv_read_ns_per_token"]), float(vals.get("jitter", 0.0)), int(vals.get("seed", 0)))


_COLS = [("preemptions", "preempt", "{:d}"), ("kv_cache_usage_peak", "usage peak", "{:.3f}"),
         ("kv_cache_usage_mean", "usage mean", "{:.3f}"), ("num_requests_waiting_mean", "wait mean", "{:.2f}"),
         ("num_requests_waiting_p95", "wait p95", "{:.0f}"), ("num_requests_waiting_max", "wait max", "{:d}"),
         ("queue_time_p50_s", "queue p50 s", "{:.2f}"), ("queue_time_p95_s", "queue p95 s", "{:.2f}"),
         ("throughput_tokens_per_s", "tok/s", "{:.1f}"),
         ("prefix_cache_hit_rate", "hit rate", "{:.3f}"), ("requests_unfinished", "unfinished", "{:d}")]


def _setting_label(s: dict, varied: list[str]) -> str:
    keys = varied or ["num_gpu_blocks"]
    return " ".join(f"{k}={'on' if v is True else 'off' if v is False else v}" for k, v in s.items() if k in keys)


def _cells(row: dict) -> list[str]:
    out = []
    for key, _, f in _COLS:
        v = row.get(key)
        out.append("-" if v is None else f.format(v))
    return out


def _cost_line(c: dict) -> str:
    """The step-time formula in words (``key=value`` with a ``token`` key would read as a secret to redact)."""
    jit = f", jitter ±{c['jitter']:g} seed {c['seed']}" if c.get("jitter") else ""
    return (f"step time: {c['overhead_ms']:g} ms + max({c['weights_ms']:g} ms, {c['compute_us_per_token']:g} us x "
            f"scheduled tokens) + {c['kv_read_ns_per_token']:g} ns x context tokens{jit}")
