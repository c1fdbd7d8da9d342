"""Window maths over scraped series: Prometheus semantics, computed by kvdiag when no Prometheus does it.

When the series come from a live scrape, a recording or saved pages, kvdiag holds the raw samples
and computes here what PromQL would: ``increase`` with counter resets, ``histogram_quantile`` over
the window's bucket increases, means as Δsum/Δcount, the prefix-cache hit rate as Δhits/Δqueries
(never the cumulative ratio), and the time a gauge spent above a threshold. With
``--prometheus-url`` the same signals come from PromQL instead (:mod:`kvdiag.collect.prometheus`).

Sources: PromQL ``increase``/``resets``/``histogram_quantile`` (prometheus/promql/functions.go,
quantile.go: linear interpolation inside the bucket, the lower bound of the first bucket is 0, a
rank in the ``+Inf`` bucket returns the highest finite bound).
"""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd

from ..bundle import Bundle
from .core import increase
from ..signals import WINDOW_HISTOGRAMS
from ..thresholds import HIGH_USAGE  # noqa: F401 - derive.windows.HIGH_USAGE as before


def resets(values: pd.Series | list[float]) -> int:
    """How many times a counter fell between consecutive samples (PromQL ``resets()``)."""
    v = pd.Series(values, dtype=float).dropna().to_numpy()
    return int((np.diff(v) < 0).sum()) if len(v) >= 2 else 0


def histogram_quantile(q: float, bounds: list[float], counts: list[float]) -> float:
    """Quantile ``q`` (0..1) of a cumulative histogram, as PromQL ``histogram_quantile``.

    Args:
        q: the quantile, 0..1.
        bounds: upper bounds (``le``) in any order; ``inf`` for ``+Inf``.
        counts: cumulative counts per bound (same order as ``bounds``), e.g. increases over a window.

    Returns:
        The estimated value in the histogram's unit; NaN when there is no ``+Inf`` bucket or no
        observation.
    """
    pairs = sorted(zip(bounds, counts))
    if not pairs or not math.isinf(pairs[-1][0]):
        return math.nan
    b = np.array([p[0] for p in pairs], dtype=float)
    c = np.maximum.accumulate(np.array([p[1] for p in pairs], dtype=float))  # monotonic, as Prometheus fixes it
    total = c[-1]
    if not total > 0:
        return math.nan
    if q <= 0:
        return 0.0 if b[0] > 0 else float(b[0])
    if q >= 1:
        return float(b[-2]) if len(b) > 1 else math.nan
    rank = q * total
    i = int(np.searchsorted(c, rank, side="left"))
    if i == len(b) - 1:
        return float(b[-2]) if len(b) > 1 else math.nan
    lo = 0.0 if i == 0 else float(b[i - 1])
    lo_count = 0.0 if i == 0 else float(c[i - 1])
    if i == 0 and b[0] <= 0:
        return float(b[0])
    width = c[i] - lo_count
    return lo + (float(b[i]) - lo) * ((rank - lo_count) / width if width > 0 else 1.0)


def time_above(t: list[float] | np.ndarray, values: list[float] | np.ndarray, threshold: float) -> tuple[float, float]:
    """Seconds a gauge spent at or above ``threshold``, and the window length.

    Each sample holds until the next one (the last sample holds for nothing), so the window is
    ``t[-1] − t[0]`` seconds. Returns ``(seconds_above, window_seconds)``; ``(nan, 0)`` with fewer
    than two timed samples.
    """
    t = np.asarray(t, dtype=float)
    v = np.asarray(values, dtype=float)
    ok = ~np.isnan(t) & ~np.isnan(v)
    t, v = t[ok], v[ok]
    if len(t) < 2:
        return math.nan, 0.0
    order = np.argsort(t, kind="stable")
    t, v = t[order], v[order]
    dt = np.diff(t)
    return float(dt[v[:-1] >= threshold].sum()), float(t[-1] - t[0])


_LE = re.compile(r'le="[^"]*",?')


def _span(rows: pd.DataFrame) -> str:
    return f"{rows['source'].iloc[0]} .. {rows['source'].iloc[-1]}"


def _bucket_span(rows: pd.DataFrame) -> str:
    """The span of a histogram's bucket series, named once: ``NAME_bucket{labels without le}@FIRST .. @LAST``."""
    first, last = _LE.sub("", rows["source"].iloc[0]), _LE.sub("", rows["source"].iloc[-1])
    at = last.rfind("@")
    return f"{first} .. {last[at:]}" if at > 0 and first.rfind("@") > 0 else f"{first} .. {last}"


def derive_windows(bundle: Bundle) -> None:
    """Add the window signals of raw scraped series to ``bundle`` (in place).

    Adds, when their inputs exist and were not already given (a Prometheus server gives them itself):

    * ``<stem>_mean`` = Δ``<stem>_sum`` / Δ``<stem>_count``, ``<stem>_p50`` / ``_p95`` from the
      per-bucket increases, for each histogram of :data:`kvdiag.signals.WINDOW_HISTOGRAMS`;
    * ``prefix_cache_hit_rate_window`` = Δhits / Δqueries over the whole window;
    * ``kv_cache_usage_high_seconds`` / ``_ratio``: time at or above 95 % usage;
    * ``counter_resets``: one event per counter that fell (text = the signal), value = the count.

    The queue, prefix-cache, dynamics and trend steps after it (:data:`kvdiag.derive.STEPS`) need the window means
    and the restarts above.
    """
    for _base, (stem, _unit, _what) in WINDOW_HISTOGRAMS.items():
        if bundle.has(f"{stem}_mean") or bundle.has(f"{stem}_p95"):
            continue
        s_rows = bundle.signal(f"{stem}_sum").sort_values("seq")
        c_rows = bundle.signal(f"{stem}_count").sort_values("seq")
        if len(c_rows) >= 2 and len(s_rows) >= 2:
            dc, ds = increase(c_rows["value"]), increase(s_rows["value"])
            if dc > 0:
                bundle.add(f"{stem}_mean", ds / dc,
                           f"derived: Δsum {ds:,.6g} / Δcount {dc:,.0f} over {_span(c_rows)}")
        b_rows = bundle.signal(f"{stem}_bucket").sort_values("seq")
        if len(b_rows) >= 2:
            bounds, incs = [], []
            for le, grp in b_rows.groupby("text", sort=False):
                inc = increase(grp["value"])
                if not math.isnan(inc):
                    bounds.append(float(le))
                    incs.append(inc)
            for q, suffix in ((0.5, "p50"), (0.95, "p95")):
                val = histogram_quantile(q, bounds, incs)
                if not math.isnan(val):
                    bundle.add(f"{stem}_{suffix}", val,
                               f"derived: histogram_quantile({q}) of bucket increases over {_bucket_span(b_rows)}")
    if not bundle.has("prefix_cache_hit_rate_window"):
        q = bundle.signal("prefix_cache_queries").sort_values("seq")
        h = bundle.signal("prefix_cache_hits").sort_values("seq")
        if len(q) >= 2 and len(h) >= 2:
            dq, dh = increase(q["value"]), increase(h["value"])
            if dq > 0:
                bundle.add("prefix_cache_hit_rate_window", dh / dq,
                           f"derived: Δhits {dh:,.0f} / Δqueries {dq:,.0f} over {_span(q)}")
    if not bundle.has("kv_cache_usage_high_seconds"):
        u = bundle.signal("kv_cache_usage").dropna(subset=["t", "value"])
        above, window = time_above(u["t"].to_numpy(), u["value"].to_numpy(), HIGH_USAGE)
        if window > 0:
            src = f"derived: kv_cache_usage ≥ {HIGH_USAGE:.0%} over {_span(u.sort_values('t'))}"
            bundle.add("kv_cache_usage_high_seconds", above, src)
            bundle.add("kv_cache_usage_high_ratio", above / window, src)
    if not bundle.has("counter_resets"):
        for sig in ("num_preemptions", "prefix_cache_queries", "prompt_tokens", "generation_tokens"):
            rows = bundle.signal(sig).sort_values("seq")
            n = resets(rows["value"])
            if n:
                v = rows["value"].to_numpy()
                i = int(np.argmax(np.diff(v) < 0)) + 1
                bundle.add("counter_resets", float(n), f"derived: {sig} fell at {rows['source'].iloc[i]}",
                           t=rows["t"].iloc[i], text=sig)
