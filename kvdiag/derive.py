"""Derived signals: the maths rules need, computed once from a bundle's raw observations.

Rules only compare signals to thresholds; every formula lives here, with its own unit test.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from .bundle import Bundle

def increase(values: pd.Series) -> float:
    """Increase of a counter over its samples, with Prometheus counter-reset semantics.

    A drop between two samples means the process restarted and the counter began again from
    zero, so the later value counts in full (as PromQL ``increase()`` without extrapolation).

    Args:
        values: counter samples in time order (any unit).

    Returns:
        The increase in the counter's unit; NaN with fewer than two samples.
    """
    v = values.dropna().to_numpy(dtype=float)
    if len(v) < 2:
        return math.nan
    d = np.diff(v)
    return float(np.where(d >= 0, d, v[1:]).sum())


def _last(bundle: Bundle, name: str) -> tuple[float, str] | None:
    rows = bundle.signal(name).dropna(subset=["value"])
    if rows.empty:
        return None
    r = rows.iloc[-1]
    return float(r["value"]), str(r["source"])


def _thirds_rate(bundle: Bundle) -> tuple[float, float, str] | None:
    """Windowed prefix-cache hit rate, first third vs last third of the samples.

    From the counters as Δhits/Δqueries (never cumulative), else from the reported hit-rate gauge
    (mean per third). Returns ``(early, late, source)`` or ``None`` with fewer than 3 samples.
    """
    q = bundle.signal("prefix_cache_queries").sort_values("seq")
    h = bundle.signal("prefix_cache_hits").sort_values("seq")
    if len(q) >= 3 and len(q) == len(h):
        n = len(q)
        k = max(2, n // 3)
        dq1, dh1 = increase(q["value"].iloc[:k]), increase(h["value"].iloc[:k])
        dq2, dh2 = increase(q["value"].iloc[-k:]), increase(h["value"].iloc[-k:])
        if dq1 > 0 and dq2 > 0:
            return dh1 / dq1, dh2 / dq2, f"Δprefix_cache_hits/Δprefix_cache_queries from {q['source'].iloc[0]}"
    g = bundle.signal("prefix_cache_hit_rate").dropna(subset=["value"]).sort_values("seq")
    if len(g) >= 3:
        k = max(1, len(g) // 3)
        return (float(g["value"].iloc[:k].mean()), float(g["value"].iloc[-k:].mean()),
                f"prefix_cache_hit_rate series {g['source'].iloc[0]} .. {g['source'].iloc[-1]}")
    return None


def _block_overhead(bundle: Bundle) -> None:
    """``block_overhead_ratio`` = usage − context_tokens / pool tokens, for each stated running set.

    Block occupancy is what the usage gauge measures; token occupancy is the running set's tokens over
    the pool's tokens. The gap is held by live requests without holding tokens: partly filled last
    blocks, or one page per KV-cache group per request when pages are huge (hybrid models). Pairs each
    ``context_tokens`` observation with the nearest usage at or after it and the pool size before it.
    """
    ctx = bundle.signal("context_tokens").dropna(subset=["value"])
    if ctx.empty:
        return
    df = bundle.frame()
    for _, row in ctx.iterrows():
        usage = df[(df["signal"] == "kv_cache_usage") & (df["seq"] >= row["seq"])].head(1)
        pool = df[(df["signal"].isin(["kv_cache_size_tokens", "kv_capacity_tokens"])) & (df["seq"] < row["seq"])
                  & (df["value"] > 0)].tail(1)
        if usage.empty or pool.empty:
            continue
        u, p = float(usage["value"].iloc[0]), float(pool["value"].iloc[0])
        tok = float(row["value"]) / p
        bundle.add("block_overhead_ratio", u - tok,
                   f"derived: usage {u:.1%} ({usage['source'].iloc[0]}) − {row['value']:,.0f} tokens "
                   f"({row['source']}) / pool {p:,.0f} tokens ({pool['source'].iloc[0]}) = {tok:.1%}")


def derive(bundle: Bundle) -> None:
    """Add derived facts to ``bundle`` (in place).

    Adds, when their inputs exist:

    * ``kv_capacity_tokens`` = last ``num_gpu_blocks`` (> 0) × last ``block_size`` (tokens);
    * ``kv_bytes_per_token`` and ``kv_capacity_tokens_from_config`` (= KV memory / bytes per
      token) when a model config was given;
    * ``partial_block_waste_bound_tokens`` = max running × (block_size − 1) and its share of the
      pool, ``partial_block_waste_bound_ratio`` (reference §3.2: each sequence leaves at most
      ``block_size − 1`` empty slots in its last block);
    * ``prefix_cache_hit_rate_early`` / ``_late`` / ``_drop`` over the window.
    """
    blocks = bundle.signal("num_gpu_blocks")
    blocks = blocks[blocks["value"] > 0]
    bs = _last(bundle, "block_size")
    if not blocks.empty and bs:
        nb = float(blocks["value"].iloc[-1])
        bundle.add("kv_capacity_tokens", nb * bs[0],
                   f"derived: num_gpu_blocks {nb:,.0f} ({blocks['source'].iloc[-1]}) × block_size {bs[0]:.0f} ({bs[1]})")
    if bundle.model_config is not None:
        from .derive_capacity import derive_capacity  # the capacity model's signals (kvdiag/capacity.py)

        derive_capacity(bundle)
    pool = _last(bundle, "kv_capacity_tokens") or _last(bundle, "kv_cache_size_tokens")
    running = bundle.signal("num_requests_running").dropna(subset=["value"])
    if bs and not running.empty:
        idx = running["value"].idxmax()
        r = float(running.loc[idx, "value"])
        waste = r * (bs[0] - 1)
        bundle.add("partial_block_waste_bound_tokens", waste,
                   f"derived: {r:.0f} running ({running.loc[idx, 'source']}) × (block_size {bs[0]:.0f} − 1)")
        if pool and pool[0] > 0:
            bundle.add("partial_block_waste_bound_ratio", waste / pool[0],
                       f"derived: {waste:,.0f} tokens / pool {pool[0]:,.0f} tokens ({pool[1]})")
    _block_overhead(bundle)
    rates = _thirds_rate(bundle)
    if rates:
        early, late, src = rates
        bundle.add("prefix_cache_hit_rate_early", early, f"derived: first third of window, {src}")
        bundle.add("prefix_cache_hit_rate_late", late, f"derived: last third of window, {src}")
        bundle.add("prefix_cache_hit_rate_drop", early - late, f"derived: early − late, {src}")
