"""The pictures' data: a judged bundle → :class:`~kvdiag.report.model.Charts` (series of the window, rule markers,
the forecast line, the start-up memory budget). Built by the analysis next to the findings, so the renderers draw a
finished report and never read a bundle.

Series (Unix seconds, base units; several engines or pids at one instant combined as the rules combine them: usage
by max, counts by sum):

* ``kv_cache_usage``, ``num_requests_running``, ``num_requests_waiting``: the gauges (``/metrics`` or the periodic
  stats line);
* ``preemptions_per_second``: Δ``num_preemptions`` / Δt between samples (a fall is a restart: the increase counts
  from zero after it, as in :mod:`kvdiag.derive.windows`);
* ``prefix_cache_hit_rate``: Δhits / Δqueries per interval from the counters, else the V1 log's rolling rate, else
  V0's cumulative gauge (labelled so); ``prefix_cache_hits_per_second`` / ``prefix_cache_queries_per_second`` from
  the counters;
* ``kv_demand_tokens``: running × (mean prompt + mean output / 2) + waiting × mean prompt at each instant
  (:func:`kvdiag.derive.prefix.demand_tokens`, the rules' own estimate), when the length histograms gave the means.
"""

from __future__ import annotations


import numpy as np
import pandas as pd

from .bundle import Bundle
from .report.model import MAX_POINTS, Charts, Marker, MemoryStep, Series


def _series(bundle: Bundle, name: str, combine: str = "max") -> pd.DataFrame:
    """Timestamped finite samples of ``name``, one per instant, sorted by time: columns ``t``, ``value``,
    ``source``."""
    rows = bundle.signal(name)
    if rows.empty:
        return rows
    rows = rows[rows["t"].notna() & np.isfinite(rows["value"])]
    rows = rows[~rows["source"].astype(str).str.startswith("state:")]
    if rows.empty:
        return rows
    g = rows.groupby("t", sort=True)
    return pd.DataFrame({"value": g["value"].max() if combine == "max" else g["value"].sum(),
                         "source": g["source"].last()}).reset_index()


def thin(t: np.ndarray, v: np.ndarray, limit: int = MAX_POINTS) -> tuple[list[float], list[float]]:
    """At most ``limit`` points: the series cut into ``limit // 2`` buckets of consecutive samples, each kept as its
    minimum and maximum in time order (a one-sample spike survives, a flat stretch costs two points)."""
    n = len(t)
    if n <= limit:
        return [float(x) for x in t], [float(x) for x in v]
    buckets = np.array_split(np.arange(n), limit // 2)
    keep: list[int] = []
    for idx in buckets:
        if not len(idx):
            continue
        lo, hi = idx[np.argmin(v[idx])], idx[np.argmax(v[idx])]
        keep += sorted({int(lo), int(hi)})
    return [float(t[i]) for i in keep], [float(v[i]) for i in keep]


def _make(key: str, label: str, unit: str, df: pd.DataFrame, source: str | None = None) -> Series | None:
    if df is None or df.empty:
        return None
    t, v = thin(df["t"].to_numpy(dtype=float), df["value"].to_numpy(dtype=float))
    src = source or (df["source"].iloc[0] if len(df) == 1 else f"{df['source'].iloc[0]} .. {df['source'].iloc[-1]}")
    return Series(key, label, unit, t, v, str(src))


def _increases(df: pd.DataFrame) -> pd.DataFrame:
    """Per-interval increases of a counter series (``t`` = the interval's end, ``dt``); a fall counts from zero."""
    if len(df) < 2:
        return pd.DataFrame(columns=["t", "dt", "inc", "source"])
    v = df["value"].to_numpy(dtype=float)
    t = df["t"].to_numpy(dtype=float)
    d = np.diff(v)
    inc = np.where(d < 0, v[1:], d)
    return pd.DataFrame({"t": t[1:], "dt": np.diff(t), "inc": inc, "source": df["source"].iloc[1:].to_numpy()})


def _rate(bundle: Bundle, name: str, key: str, label: str, unit: str) -> tuple[Series | None, pd.DataFrame]:
    inc = _increases(_series(bundle, name, "sum"))
    inc = inc[inc["dt"] > 0] if not inc.empty else inc
    if inc.empty:
        return None, inc
    df = pd.DataFrame({"t": inc["t"], "value": inc["inc"] / inc["dt"], "source": inc["source"]})
    return _make(key, label, unit, df, f"derived: Δ{name} / Δt ({df['source'].iloc[0]} ..)"), inc


def _last(bundle: Bundle, name: str, rows: pd.DataFrame | None = None):
    rows = bundle.signal(name) if rows is None else rows
    rows = rows[rows["value"].notna()] if not rows.empty else rows
    return None if rows.empty else rows.iloc[-1]


def build_series(bundle: Bundle) -> dict:
    """The window's series by key (see the module docstring); series without a timestamped sample are absent."""
    out: dict = {}

    def put(s: Series | None) -> None:
        if s is not None:
            out[s.key] = s

    put(_make("kv_cache_usage", "KV cache usage", "ratio", _series(bundle, "kv_cache_usage")))
    put(_make("num_requests_running", "running", "requests", _series(bundle, "num_requests_running", "sum")))
    put(_make("num_requests_waiting", "waiting", "requests", _series(bundle, "num_requests_waiting", "sum")))
    put(_rate(bundle, "num_preemptions", "preemptions_per_second", "preemptions/s", "requests/s")[0])
    hits, hinc = _rate(bundle, "prefix_cache_hits", "prefix_cache_hits_per_second", "prefix hits/s", "tokens/s")
    queries, qinc = _rate(bundle, "prefix_cache_queries", "prefix_cache_queries_per_second", "prefix queries/s",
                          "tokens/s")
    put(hits)
    put(queries)
    if hits is not None and queries is not None:
        both = hinc.merge(qinc, on="t", suffixes=("_h", "_q"))
        both = both[both["inc_q"] > 0]
        if not both.empty:
            df = pd.DataFrame({"t": both["t"], "value": (both["inc_h"] / both["inc_q"]).clip(0, 1),
                               "source": both["source_q"]})
            put(_make("prefix_cache_hit_rate", "prefix-cache hit rate", "ratio", df,
                      "derived: Δprefix_cache_hits / Δprefix_cache_queries per interval"))
    if "prefix_cache_hit_rate" not in out:
        put(_make("prefix_cache_hit_rate", "prefix-cache hit rate (vLLM's rolling rate)", "ratio",
                  _series(bundle, "prefix_cache_hit_rate")))
    if "prefix_cache_hit_rate" not in out:
        put(_make("prefix_cache_hit_rate", "prefix-cache hit rate (cumulative since start)", "ratio",
                  _series(bundle, "prefix_cache_hit_rate_cumulative")))
    p, g = _last(bundle, "request_prompt_tokens_mean"), _last(bundle, "request_generation_tokens_mean")
    run = _series(bundle, "num_requests_running", "sum")
    if p is not None and g is not None and p.value >= 0 and g.value >= 0 and not run.empty:
        from .derive.prefix import demand_tokens

        wait = _series(bundle, "num_requests_waiting", "sum")
        df = run.merge(wait[["t", "value"]], on="t", how="left", suffixes=("", "_w")) if not wait.empty else \
            run.assign(value_w=0.0)
        d = demand_tokens(df["value"].to_numpy(), df["value_w"].fillna(0).to_numpy(), float(p.value), float(g.value))
        put(_make("kv_demand_tokens", "estimated KV demand", "tokens",
                  pd.DataFrame({"t": df["t"], "value": d, "source": df["source"]}),
                  f"derived: running × ({p.value:,.0f} + {g.value:,.0f}/2) + waiting × {p.value:,.0f} tokens "
                  f"(mean prompt from {p.source})"))
    return out


def _markers(bundle: Bundle, findings: list, notes: list[str], series: dict) -> list[Marker]:
    """Firing rules where their evidence lies (the times of the evidence's sources), restarts, a cut-short window."""
    out: list[Marker] = []
    when: dict = {}  # evidence source → its time, from the rows of the evidence's own signals (never the whole frame)
    for f in findings:
        for e in f.evidence if f.status == "fires" else ():
            rows = bundle.signal(e.signal)
            rows = rows[rows["t"].notna()] if not rows.empty else rows
            when.update(zip(rows["source"], rows["t"]))
    from .signals import SIGNALS

    for f in findings:
        if f.status != "fires":
            continue
        # where the evidence lies in time: gauges, counters and events (a start-up fact is not a moment of the window)
        timed_ev = [e for e in f.evidence if e.source in when and
                    getattr(SIGNALS.get(e.signal), "kind", "fact") != "fact"]
        if not timed_ev:
            timed_ev = [e for e in f.evidence if e.source in when]
        ts = sorted({float(when[e.source]) for e in timed_ev})
        for t in ts[:3] + ts[-1:] if len(ts) > 4 else ts:
            src = next(e.source for e in timed_ev if when.get(e.source) == t)
            out.append(Marker(t, "rule", f.rule_id, f.severity, src))
    for r in bundle.signal("counter_resets").itertuples():
        if not pd.isna(r.t):
            out.append(Marker(float(r.t), "restart", f"restart ({r.text or 'a counter'} fell)", source=r.source))
    pst = bundle.signal("process_start_time")
    pst = pst[pst["t"].notna() & pst["value"].notna()].sort_values("t") if not pst.empty else pst
    if len(pst) >= 2:
        v = pst["value"].to_numpy()
        for i in np.flatnonzero(np.diff(v) != 0):
            out.append(Marker(float(pst["t"].iloc[i + 1]), "restart", "restart (new process start time)",
                              source=str(pst["source"].iloc[i + 1])))
    seg = bundle.signal("startup_segments")
    seg = seg[seg["t"].notna()] if not seg.empty else seg
    starts = seg.groupby("segment")["t"].min() if not seg.empty else []
    for s, t in (starts.items() if len(starts) else []):
        if s > 0:
            out.append(Marker(float(t), "restart", f"engine start-up {s + 1}"))
    if any(n.startswith("window cut short") for n in notes):
        ends = [s.t[-1] for s in series.values() if s.t]
        if ends:
            out.append(Marker(float(max(ends)), "cut", "window cut short"))
    return sorted(out, key=lambda m: m.t)


def _forecast(bundle: Bundle, findings: list) -> dict | None:
    if not any(f.forecast and f.status == "fires" for f in findings):
        return None
    level, slope = _last(bundle, "kv_cache_usage_trend_level"), _last(bundle, "kv_cache_usage_slope")
    span, eta = _last(bundle, "kv_cache_usage_trend_seconds"), _last(bundle, "kv_full_eta_seconds")
    if level is None or slope is None or eta is None or pd.isna(level.t) or not slope.value > 0:
        return None
    t1 = float(level.t)
    s = float(span.value) if span is not None else 0.0
    s = min(s, float(level.value) / float(slope.value))  # the fitted line from the trend's start, or from 0 % usage
    return {"t0": t1 - s, "v0": float(level.value) - float(slope.value) * s, "t_last": t1,
            "t1": t1 + float(eta.value), "v1": 1.0, "eta_seconds": float(eta.value),
            "slope_per_second": float(slope.value), "source": str(eta.source)}


_STEPS = [("gpu_total", "GPU total", "gpu_total_bytes"), ("budget", "budget", "gpu_budget_bytes"),
          ("weights", "weights", "weights_bytes"), ("activation_peak", "activation / profile peak",
                                                    "activation_peak_bytes"),
          ("non_torch", "non-torch (CUDA context, NCCL)", "non_torch_bytes"),
          ("cudagraph", "CUDA graphs", "cudagraph_bytes"), ("kv_cache", "KV pool", "kv_cache_memory_bytes")]


def _startup(bundle: Bundle) -> tuple[list[MemoryStep], dict | None, str]:
    """The memory budget of one start-up, from the log's memory lines (see :class:`Charts`)."""
    oom = _last(bundle, "oom_tried_bytes")
    if oom is None:
        oom = _last(bundle, "cuda_oom")
    mem = ("weights_bytes", "kv_cache_memory_bytes", "gpu_budget_bytes", "cudagraph_bytes", "activation_peak_bytes",
           "cudagraph_estimate_bytes", "gpu_total_bytes")
    segs = [int(r.segment) for s in mem for r in bundle.signal(s).itertuples()]
    if oom is not None:
        seg = int(oom.segment)
    elif segs:  # the start-up with the most memory lines, the later one of a tie
        seg = max(set(segs), key=lambda k: (segs.count(k), k))
    else:
        return [], None, ""
    n_segs = len(set(segs) | ({seg}))

    def fact(name: str):
        rows = bundle.signal(name)
        here = rows[rows["segment"] == seg] if not rows.empty else rows
        r = _last(bundle, name, here)
        if r is None and name in ("gpu_total_bytes", "gpu_memory_utilization"):
            r = _last(bundle, name)
        return r

    steps: list[MemoryStep] = []
    values: dict = {}
    for key, label, name in _STEPS:
        r = fact(name)
        if r is None and key == "cudagraph":
            r = fact("cudagraph_estimate_bytes")
            label = "CUDA graphs (estimate)"
        if r is None and key == "budget":
            total, gmu = fact("gpu_total_bytes"), fact("gpu_memory_utilization")
            if total is not None and gmu is not None:
                steps.append(MemoryStep(key, f"budget (gpu_memory_utilization {gmu.value:.2f})",
                                        float(total.value) * float(gmu.value),
                                        f"derived: {total.source} × gpu_memory_utilization ({gmu.source})"))
                values[key] = steps[-1].bytes
            continue
        if r is None:
            continue
        if key == "budget":
            gmu = fact("gpu_memory_utilization")
            label = f"budget (gpu_memory_utilization {gmu.value:.2f})" if gmu is not None else label
        steps.append(MemoryStep(key, label, float(r.value), str(r.source)))
        values[key] = float(r.value)
    used = [values[k] for k in ("weights", "activation_peak", "non_torch", "cudagraph", "kv_cache") if k in values]
    if "budget" in values and "kv_cache" in values and len(used) >= 3 and \
            abs(values["budget"] - sum(used)) >= 0.005 * 2**30:  # vLLM's KV pool is the rest: left over is ~0
        steps.append(MemoryStep("left_over", "left over", values["budget"] - sum(used),
                                "derived: budget − the lines above"))
    oom_d = None
    if oom is not None:
        line = _last(bundle, "cuda_oom")  # the OOM text's own line (the tried bytes may carry a derived source)
        line = line if line is not None and int(line.segment) == seg else oom

        def at(name: str):
            rows = bundle.signal(name)
            here = rows[rows["segment"] == seg] if not rows.empty else rows
            r = _last(bundle, name, here)
            return None if r is None else float(r.value)

        phase = _last(bundle, "cuda_oom_phase")
        oom_d = {"tried": float(oom.value), "free": at("oom_free_bytes"), "total": at("gpu_total_bytes"),
                 "allocated": at("oom_torch_allocated_bytes"), "in_use": at("oom_process_in_use_bytes"),
                 "other_processes": at("oom_other_processes_bytes"),
                 "phase": str(phase.text) if phase is not None else "", "source": str(line.source),
                 "t": None if pd.isna(line.t) else float(line.t)}
        if oom_d["total"] is None and "gpu_total" in values:
            oom_d["total"] = values["gpu_total"]
    note = f"start-up {seg + 1} of the log's {n_segs}" if n_segs > 1 else ""
    return steps, oom_d, note


def build_charts(bundle: Bundle, findings: list, notes: list[str] = ()) -> Charts:
    """Everything the charts draw for one server's judged ``bundle`` and its ``findings``."""
    pool = _last(bundle, "kv_capacity_tokens")
    steps, oom, note = _startup(bundle)
    series = build_series(bundle)
    return Charts(series=series, pool_tokens=None if pool is None else float(pool.value),
                  markers=_markers(bundle, findings, list(notes), series), forecast=_forecast(bundle, findings),
                  startup=steps, oom=oom, startup_note=note)
