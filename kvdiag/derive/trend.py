"""Trend signals: how fast KV usage, the waiting queue and KV demand are moving, and when the pool would fill.

Least squares over the recent part of the window (the last :data:`TREND_SECONDS` of timestamped samples), with the
slope's standard error, so a rule can ask for a rise that noise does not explain. Only timestamped samples count
(a recording, a live window, a Prometheus range): a saved page or a log without times gives no trend, and the
forecast rule (CAP002) is then ``unknown``.

The forecast is what Prometheus's ``predict_linear`` computes — the fitted line at the last sample, extended to
``kv_cache_usage = 1.0`` — with a range from the slope ± 2 standard errors.

Sources: ordinary least squares, slope standard error ``sqrt(SSR / (n − 2) / Sxx)`` (any regression text, e.g.
NIST/SEMATECH e-Handbook §4.1.4.1); Prometheus ``deriv()`` / ``predict_linear()`` (promql/functions.go: simple linear
regression over the range's samples, intercept at the evaluation time).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..bundle import Bundle

TREND_SECONDS = 300.0
"""The trend is fitted over the samples of the last 5 minutes of the window (``[5m]`` in the exported alert)."""
ETA_CAP_SECONDS = 7 * 86400.0
"""A forecast further out than a week is not a forecast: ``kv_full_eta_seconds`` is not given beyond it."""
T_CAP = 1e6
"""|slope / stderr| is capped here (a perfectly straight synthetic line has stderr 0)."""


def linear_trend(t: np.ndarray, y: np.ndarray) -> dict | None:
    """Least-squares line through ``(t, y)``.

    Args:
        t: sample times, Unix seconds, shape (n,), any order, no NaN.
        y: values at those times, shape (n,), no NaN.

    Returns:
        ``{"slope", "stderr", "n", "span", "level"}``: slope in y-units per second, its standard error (NaN with
        fewer than 3 samples), the sample count, ``max(t) − min(t)`` in seconds, and the fitted value at the last
        time (what ``predict_linear(v[W], 0)`` gives); ``None`` with fewer than 2 samples or all at one time.
    """
    t = np.asarray(t, dtype=float)
    y = np.asarray(y, dtype=float)
    n = len(t)
    if n < 2:
        return None
    tm, ym = t.mean(), y.mean()
    sxx = float(((t - tm) ** 2).sum())
    if not sxx > 0:
        return None
    slope = float(((t - tm) * (y - ym)).sum() / sxx)
    intercept = ym - slope * tm
    resid = y - (intercept + slope * t)
    stderr = math.sqrt(float((resid ** 2).sum()) / (n - 2) / sxx) if n > 2 else math.nan
    t_last = float(t.max())
    return {"slope": slope, "stderr": stderr, "n": n, "span": float(t.max() - t.min()),
            "level": float(intercept + slope * t_last), "t_last": t_last, "t_first": float(t.min())}


def eta_to_full(level: float, slope: float, full: float = 1.0) -> float:
    """Seconds until a line at ``level`` rising at ``slope`` (per second) reaches ``full``.

    0 when it is already there; ``inf`` when the slope is not positive.
    """
    if level >= full:
        return 0.0
    if not slope > 0:
        return math.inf
    return (full - level) / slope


def _series(bundle: Bundle, name: str, combine: str = "max") -> pd.DataFrame:
    """Timestamped samples of ``name``, one per instant (several engines or pids combined by ``combine``), sorted
    by time; columns ``t``, ``value``, ``source``."""
    rows = bundle.signal(name)
    rows = rows[rows["t"].notna() & rows["value"].notna()]
    rows = rows[~rows["source"].astype(str).str.startswith("state:")]
    if rows.empty:
        return rows
    g = rows.groupby("t", sort=True)
    out = pd.DataFrame({"value": g["value"].max() if combine == "max" else g["value"].sum(),
                        "source": g["source"].last()}).reset_index()
    return out


def _restart_time(bundle: Bundle) -> float:
    """The time of the last restart seen (a counter fell, or the process start time changed); -inf without one."""
    last = -math.inf
    for r in bundle.signal("counter_resets").itertuples():
        if not pd.isna(r.t):
            last = max(last, float(r.t))
    pst = bundle.signal("process_start_time")
    pst = pst[pst["t"].notna() & pst["value"].notna()].sort_values("t")
    if len(pst) >= 2:
        v = pst["value"].to_numpy()
        changed = np.flatnonzero(np.diff(v) != 0)
        if len(changed):
            last = max(last, float(pst["t"].iloc[changed[-1] + 1]))
    return last


def _recent(df: pd.DataFrame, since: float) -> pd.DataFrame:
    if df.empty:
        return df
    end = float(df["t"].max())
    return df[(df["t"] >= max(end - TREND_SECONDS, since))]


def _span_text(df: pd.DataFrame) -> str:
    return f"{df['source'].iloc[0]} .. {df['source'].iloc[-1]}"


def _add_slope(bundle: Bundle, name: str, df: pd.DataFrame, what: str) -> dict | None:
    fit = linear_trend(df["t"].to_numpy(), df["value"].to_numpy())
    if fit is None:
        return None
    src = (f"derived: least squares of {what} over {fit['n']} timestamped samples, {fit['span']:.0f} s "
           f"({_span_text(df)})")
    bundle.add(name, fit["slope"], src, t=fit["t_last"])
    return fit


def derive_trend(bundle: Bundle) -> None:
    """Add the trend and forecast signals to ``bundle`` (in place), where timestamped samples exist.

    Over the last :data:`TREND_SECONDS` of the window, after the last restart (a counter reset or a new process start
    time: usage before it belongs to another process):

    * ``kv_cache_usage_slope`` (ratio/s), ``kv_cache_usage_slope_stderr`` (ratio/s), ``kv_cache_usage_slope_t``
      (slope / stderr), ``kv_cache_usage_trend_samples`` (count), ``kv_cache_usage_trend_seconds`` (span, s),
      ``kv_cache_usage_trend_level`` (fitted usage at the last sample), ``kv_cache_usage_trend_rise`` (slope × span:
      the rise the line explains) and ``kv_cache_usage_slope_recent`` (the slope over the later half of those
      samples: a rise that stopped or turned shows there first);
    * ``kv_full_eta_seconds`` = (1 − level) / slope, with ``kv_full_eta_low_seconds`` / ``_high_seconds`` at slope
      ± 2 stderr (the high end only while slope − 2 stderr > 0), when the slope is positive (seconds);
    * ``num_requests_waiting_slope`` (requests/s) and ``kv_demand_tokens_slope`` (tokens/s, the demand estimate
      running × (mean prompt + mean output / 2) + waiting × mean prompt at each instant, when the length histograms
      gave the means).
    """
    if bundle.has("kv_cache_usage_slope"):
        return
    since = _restart_time(bundle)
    usage = _recent(_series(bundle, "kv_cache_usage"), since)
    usage = usage[(usage["value"] >= 0) & (usage["value"] <= 1)] if not usage.empty else usage
    if len(usage) >= 2:
        fit = _add_slope(bundle, "kv_cache_usage_slope", usage, "kv_cache_usage")
        if fit is not None:
            base = f"derived: kv_cache_usage over {_span_text(usage)}"
            bundle.add("kv_cache_usage_trend_samples", fit["n"], base, t=fit["t_last"])
            bundle.add("kv_cache_usage_trend_seconds", fit["span"], base, t=fit["t_last"])
            level = min(1.0, max(0.0, fit["level"]))
            bundle.add("kv_cache_usage_trend_level", level, f"{base}: the fitted line at the last sample",
                       t=fit["t_last"])
            bundle.add("kv_cache_usage_trend_rise", fit["slope"] * fit["span"],
                       f"{base}: slope {fit['slope'] * 60:+.2%}/min × {fit['span']:.0f} s", t=fit["t_last"])
            se = fit["stderr"]
            if math.isfinite(se):
                bundle.add("kv_cache_usage_slope_stderr", se, f"{base}: sqrt(SSR / (n − 2) / Sxx)", t=fit["t_last"])
                tstat = fit["slope"] / se if se > 0 else math.copysign(T_CAP, fit["slope"]) if fit["slope"] else 0.0
                bundle.add("kv_cache_usage_slope_t", max(-T_CAP, min(T_CAP, tstat)),
                           f"{base}: slope / stderr", t=fit["t_last"])
            half = usage[usage["t"] >= fit["t_last"] - fit["span"] / 2]
            if len(half) >= 3:
                _add_slope(bundle, "kv_cache_usage_slope_recent", half, "kv_cache_usage (later half)")
            eta = eta_to_full(level, fit["slope"])
            if eta <= ETA_CAP_SECONDS:
                bundle.add("kv_full_eta_seconds", eta,
                           f"derived: (1 − {level:.1%}) / {fit['slope'] * 60:+.2%}/min, least squares over {fit['n']} "
                           f"samples ({_span_text(usage)})", t=fit["t_last"])
                if math.isfinite(se):
                    lo = eta_to_full(level, fit["slope"] + 2 * se)
                    hi = eta_to_full(level, fit["slope"] - 2 * se)
                    bundle.add("kv_full_eta_low_seconds", lo, f"derived: at slope + 2 stderr ({(fit['slope'] + 2 * se) * 60:+.2%}/min) of "
                               f"kv_cache_usage over {_span_text(usage)}",
                               t=fit["t_last"])
                    if hi <= ETA_CAP_SECONDS:
                        bundle.add("kv_full_eta_high_seconds", hi,
                                   f"derived: at slope − 2 stderr ({(fit['slope'] - 2 * se) * 60:+.2%}/min) of "
                                   f"kv_cache_usage over {_span_text(usage)}",
                                   t=fit["t_last"])
    waiting = _recent(_series(bundle, "num_requests_waiting", "sum"), since)
    if len(waiting) >= 3:
        _add_slope(bundle, "num_requests_waiting_slope", waiting, "num_requests_waiting")
    _demand_slope(bundle, since)


def _demand_slope(bundle: Bundle, since: float) -> None:
    from .prefix import demand_tokens

    p, g = bundle.signal("request_prompt_tokens_mean"), bundle.signal("request_generation_tokens_mean")
    p, g = p[p["value"].notna()], g[g["value"].notna()]
    if p.empty or g.empty:
        return
    pm, gm = float(p["value"].iloc[-1]), float(g["value"].iloc[-1])
    if not (pm >= 0 and gm >= 0):
        return
    run = _series(bundle, "num_requests_running", "sum")
    wait = _series(bundle, "num_requests_waiting", "sum")
    if run.empty:
        return
    df = run.merge(wait, on="t", how="left", suffixes=("_r", "_w")).fillna({"value_w": 0.0})
    df = _recent(df.rename(columns={"source_r": "source"}), since)
    if len(df) < 3:
        return
    d = demand_tokens(df["value_r"].to_numpy(), df["value_w"].to_numpy(), pm, gm)
    fit = linear_trend(df["t"].to_numpy(), d)
    if fit is None:
        return
    bundle.add("kv_demand_tokens_slope", fit["slope"],
               f"derived: least squares of running × ({pm:,.0f} + {gm:,.0f}/2) + waiting × {pm:,.0f} tokens over "
               f"{fit['n']} timestamped samples, {fit['span']:.0f} s ({_span_text(df)}; mean prompt from "
               f"{p['source'].iloc[-1]})", t=fit["t_last"])
