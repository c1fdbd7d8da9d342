"""Prefix-cache and demand signals: the hit rate against load, how long cached blocks survive, the hit-rate traps,
KV demand from the length histograms, and the usage-gauge split.

Every function here is pure arithmetic on arrays (unit-tested on hand-computed numbers); :func:`derive_prefix` reads
the bundle and adds the results as derived signals with sources.

Sources (``shared/reference/vllm-observability.md``):

* §4.2-4.5: a cached block is evicted only when an allocation pops it from the LRU free queue (``get_new_blocks`` /
  ``_maybe_evict_cached_block``, ``v1/core/block_pool.py``), so how long an idle cached prefix survives is the free
  pool divided by the rate new KV slots are written — the LRU "characteristic time" (Che et al., 2002: an item
  survives until that many distinct newer items have passed it).
* §1.3: ``prefix_cache_{queries,hits}_total`` count tokens per newly admitted request; in 0.9-0.11 re-admissions of
  preempted requests are counted too (they re-hit their own blocks), from 0.16 they are excluded.
* §5: the V0 ``gpu_prefix_cache_hit_rate`` gauge and the V0 log record are cumulative since start; the V1 log's rate
  is over the most recent 1000 requests.
* §3 (KV sizing): ``num_gpu_blocks × block_size`` tokens is the pool; a request holds about its context length.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd

from ..bundle import Bundle
from ..vllm_defaults import MAX_CHOSEN_BLOCK_SIZE
from ..thresholds import HIGH_LOAD, LOW_LOAD, MIN_SHARE  # noqa: F401 - derive.prefix.HIGH_LOAD … as before
from .core import increase

MAX_MEAN_TOKENS = 1e8
"""Mean request length beyond which the length histograms are not believed when max_model_len is unknown."""
MIN_FOOTPRINT_USAGE = 0.25
"""kv_cache_usage at or above this at the peak before running / usage is read as the requests a full pool holds."""
MAX_PLAIN_REPLICAS = 10
"""Above this many pools' worth of peak demand, ``replicas_needed`` says the number is more likely a backlog (a
batch submitted at once, clients retrying) than a load to provision for: a queue of a million requests is not a
million-replica fleet."""


def counter_deltas(values: np.ndarray) -> np.ndarray:
    """Per-interval increases of a counter with Prometheus reset semantics (a drop counts the new value in full).

    Args:
        values: samples in time order, shape (n,).

    Returns:
        Shape (n − 1,): ``v[i] − v[i−1]``, or ``v[i]`` where the counter fell (a restart).
    """
    v = np.asarray(values, dtype=float)
    if len(v) < 2:
        return np.zeros(0)
    d = np.diff(v)
    return np.where(d >= 0, d, v[1:])


def hit_rate_by_load(queries: np.ndarray, hits: np.ndarray, usage: np.ndarray,
                     low: float = LOW_LOAD, high: float = HIGH_LOAD,
                     min_share: float = MIN_SHARE) -> tuple[float, float, float, float]:
    """Prefix-cache hit rate when the pool was mostly free vs when it was busy.

    Each interval between two samples is classed by the mean of its two usage samples; its Δhits and Δqueries go to
    the low-load side (< ``low``), the high-load side (≥ ``high``) or neither.

    Args:
        queries, hits: cumulative counters (tokens), shape (n,), same instants.
        usage: kv_cache_usage at those instants (0..1), shape (n,).

    Returns:
        ``(low_rate, high_rate, low_share, high_share)``: hit rates (0..1, NaN when a side has no queries or less
        than ``min_share`` of them) and each side's share of the window's queries.
    """
    dq, dh = counter_deltas(queries), counter_deltas(hits)
    u = np.asarray(usage, dtype=float)
    if len(dq) == 0:
        return math.nan, math.nan, 0.0, 0.0
    mid = (u[:-1] + u[1:]) / 2
    ok = ~np.isnan(mid) & ~np.isnan(dq) & ~np.isnan(dh)
    total = dq[ok].sum()
    out = []
    for mask in (ok & (mid < low), ok & (mid >= high)):
        q = dq[mask].sum()
        share = q / total if total > 0 else 0.0
        out.append((dh[mask].sum() / q if q > 0 and share >= min_share else math.nan, share))
    return out[0][0], out[1][0], out[0][1], out[1][1]


def rolling_rate_by_load(rate: np.ndarray, usage: np.ndarray, low: float = LOW_LOAD,
                         high: float = HIGH_LOAD) -> tuple[float, float]:
    """Mean of a reported rolling hit rate (the V1 log's last-1000-requests rate) at low and at high usage.

    Returns ``(low_rate, high_rate)``; NaN for a side with fewer than two samples.
    """
    r, u = np.asarray(rate, dtype=float), np.asarray(usage, dtype=float)
    ok = ~np.isnan(r) & ~np.isnan(u)
    lo, hi = r[ok & (u < low)], r[ok & (u >= high)]
    return (float(lo.mean()) if len(lo) >= 2 else math.nan, float(hi.mean()) if len(hi) >= 2 else math.nan)


def decumulate(cumulative_rate: np.ndarray, cumulative_queries: np.ndarray,
               min_growth: float = 0.002) -> tuple[np.ndarray, np.ndarray]:
    """Window hit rates from a hit rate that is cumulative since start (V0).

    With ``r(t) = H(t) / Q(t)``, the rate between two samples is ``(r_b·Q_b − r_a·Q_a) / (Q_b − Q_a)``. ``Q`` may be
    anything proportional to the queries: V0 queries blocks of the prompt, so the prompt-token counter (or the log's
    integrated prompt throughput) stands in for it.

    Args:
        cumulative_rate: r at each sample (0..1), shape (n,).
        cumulative_queries: Q at each sample (any unit, non-decreasing), shape (n,).

    Returns:
        ``(rates, weights)``, shape (n − 1,): the hit rate of each interval and its ΔQ. An interval is unusable
        (rate NaN, weight 0) when Q did not grow, when it grew by less than ``min_growth`` of Q (the gauge's
        rounding would dominate), or when the implied Δhits falls outside 0..ΔQ by more than 1 % (the two series do
        not belong together: a restart of one, or a gauge that is not cumulative).
    """
    r, q = np.asarray(cumulative_rate, dtype=float), np.asarray(cumulative_queries, dtype=float)
    hq = r * q
    dq = np.diff(q)
    dh = np.diff(hq)
    usable = (dq > 0) & (dq >= min_growth * q[1:]) & (dh >= -0.01 * dq) & (dh <= 1.01 * dq)
    with np.errstate(divide="ignore", invalid="ignore"):
        rates = np.where(usable, np.clip(dh / dq, 0.0, 1.0), np.nan)
    return rates, np.where(usable, dq, 0.0)


def retention_seconds(pool_tokens: float, mean_usage: float, alloc_tokens_per_s: float) -> float:
    """How long an idle cached block survives in the free queue: free tokens / KV tokens written per second.

    An unreferenced cached block joins the tail of the LRU free queue (§4.5) and is evicted once allocations have
    consumed every free block ahead of it, so its expected idle lifetime is about ``pool × (1 − usage) / rate``.
    A shared prefix re-sent less often than that misses even though nothing is "full".

    Returns:
        Seconds; ``inf`` when nothing is written; NaN when an input is missing.
    """
    if not all(map(math.isfinite, (pool_tokens, mean_usage, alloc_tokens_per_s))) or pool_tokens <= 0:
        return math.nan
    if alloc_tokens_per_s <= 0:
        return math.inf
    return pool_tokens * max(0.0, 1.0 - mean_usage) / alloc_tokens_per_s


def demand_tokens(running: np.ndarray, waiting: np.ndarray, mean_prompt: float, mean_output: float) -> np.ndarray:
    """KV demand at each instant from the request counts and the finished requests' mean lengths.

    A running request holds its prompt plus the output so far — on average half its final output over a decode —
    and a waiting one needs at least its prompt to be admitted: ``running × (P + G/2) + waiting × P`` tokens.
    Shared prefix blocks are counted once per request, so with prefix hits this is an upper estimate.
    """
    r = np.nan_to_num(np.asarray(running, dtype=float))
    w = np.nan_to_num(np.asarray(waiting, dtype=float))
    return r * (mean_prompt + mean_output / 2.0) + w * mean_prompt


def replicas_needed(demand: float, per_replica: float) -> int:
    """How many replicas of one pool hold ``demand`` at once: ``ceil(demand / per_replica)``, at least 1.

    Both in one unit (tokens, or requests of one mean size). A ratio within 1e-9 of a whole number counts as that
    number (float noise of an exact fit is not one more replica). Raises ``ValueError`` for ``per_replica`` ≤ 0.
    """
    if not per_replica > 0:
        raise ValueError(f"per-replica capacity must be positive, got {per_replica!r}")
    r = demand / per_replica
    return max(1, math.ceil(r - 1e-9))


def fit_requests_observed(running: float, usage: float) -> float:
    """Requests the pool holds at the footprint observed at one instant: ``running / usage``.

    ``running`` requests pinned the share ``usage`` (0-1) of the blocks, so each pinned ``usage / running`` of the
    pool and a full pool holds ``running / usage`` of them (unrounded; callers round down for a setting). Raises
    ``ValueError`` unless ``running`` > 0 and 0 < ``usage`` ≤ 1.
    """
    if not (running > 0 and 0 < usage <= 1):
        raise ValueError(f"need running > 0 and 0 < usage <= 1, got {running!r}, {usage!r}")
    return running / usage


_VERSION = re.compile(r"(?:^|[^\d.])v?(\d+)\.(\d+)(?:\.\d+)?")


def readmissions_counted(version: str) -> bool | None:
    """Does this vLLM version count re-admitted preempted requests in the prefix-cache counters (0.9-0.11)?

    ``None`` when the version cannot be read (the trap is then not flagged: kvdiag does not guess a version).
    """
    m = _VERSION.search(version or "")
    if not m:
        return None
    major, minor = int(m.group(1)), int(m.group(2))
    return major == 0 and 9 <= minor <= 11


# ---------------------------------------------------------------------------------------------------------------------
def _instant(rows: pd.DataFrame) -> pd.Series:
    """The instant of each row: its time, or for a saved page without timestamps the page it came from (the
    ``… in FILE`` end of its source), so the samples of one page line up."""
    page = rows["source"].str.rpartition(" in ")[2]
    return rows["t"].where(rows["t"].notna(), page)


def _aligned(bundle: Bundle, names: tuple[str, ...]) -> pd.DataFrame:
    """The named signals side by side on their common instants (columns = names, plus ``_t`` = time or NaN and
    ``_src`` = the first name's source), in arrival order. Instants are times, or pages for timeless pages."""
    out = None
    frames = [bundle.signal(n).dropna(subset=["value"]) for n in names]
    if any(f.empty for f in frames):
        return pd.DataFrame(columns=[*names, "_t", "_src"])
    timed = all(f["t"].notna().all() for f in frames)  # one kind of key for every column, or nothing joins
    if timed:
        fast = _aligned_unique_times(names, frames)
        if fast is not None:
            return fast
    for n, rows in zip(names, frames):
        key = rows["t"] if timed else _instant(rows).astype(str)
        last = rows.assign(_key=key).groupby("_key", sort=False).last()
        col = last["value"].rename(n)
        if out is None:
            out = col.to_frame()
            out["_t"], out["_src"], out["_seq"] = last["t"], last["source"], last["seq"]
        else:
            out = out.join(col, how="inner")
    if out is None:
        return pd.DataFrame(columns=[*names, "_t", "_src"])
    return out.sort_values("_seq").drop(columns="_seq")


def _aligned_unique_times(names: tuple[str, ...], frames: list[pd.DataFrame]) -> pd.DataFrame | None:
    """:func:`_aligned` for signals whose rows have strictly increasing times (a Prometheus range query, a recording):
    the same frame from sorted-array intersections instead of a group-by and joins per signal. None when some
    signal's times repeat or go back (the general path then keeps the last row per instant)."""
    times = [f["t"].to_numpy() for f in frames]
    if any(len(t) > 1 and not (np.diff(t) > 0).all() for t in times):
        return None
    common = times[0]
    for t in times[1:]:
        common = common[np.isin(common, t, assume_unique=True)]
    base = frames[0]
    pos0 = np.searchsorted(times[0], common)
    index = pd.Index(common, name="_key")
    cols = {names[0]: base["value"].to_numpy()[pos0], "_t": base["t"].to_numpy()[pos0],
            "_src": pd.Series(base["source"].to_numpy()[pos0], index=index, dtype=object)}
    for n, f, t in zip(names[1:], frames[1:], times[1:]):
        cols[n] = f["value"].to_numpy()[np.searchsorted(t, common)]
    return pd.DataFrame(cols, index=index)


def _span(df: pd.DataFrame, bundle: Bundle, name: str) -> str:
    return f"{df['_src'].iloc[0]} .. {df['_src'].iloc[-1]}" if len(df) else name


def _load_split(bundle: Bundle) -> None:
    if bundle.has("prefix_cache_hit_rate_low_load") or not bundle.has("kv_cache_usage"):
        return
    counters = len(bundle.signal("prefix_cache_queries")) >= 3 and len(bundle.signal("prefix_cache_hits")) >= 3
    if not counters and len(bundle.signal("prefix_cache_hit_rate")) < 4:
        return  # a Prometheus window gives start/end increases only; its load split comes from PromQL
    df = _aligned(bundle, ("prefix_cache_queries", "prefix_cache_hits", "kv_cache_usage"))
    if len(df) >= 3:
        lo, hi, s_lo, s_hi = hit_rate_by_load(df["prefix_cache_queries"].to_numpy(),
                                              df["prefix_cache_hits"].to_numpy(), df["kv_cache_usage"].to_numpy())
        how = "ΣΔprefix_cache_hits / ΣΔprefix_cache_queries"
        span = _span(df, bundle, "prefix_cache_queries")
    else:
        df = _aligned(bundle, ("prefix_cache_hit_rate", "kv_cache_usage"))
        if len(df) < 4:
            return
        lo, hi = rolling_rate_by_load(df["prefix_cache_hit_rate"].to_numpy(), df["kv_cache_usage"].to_numpy())
        s_lo = s_hi = math.nan
        how = "mean of the logged 'Prefix cache hit rate' (last 1000 requests)"
        span = _span(df, bundle, "prefix_cache_hit_rate")
    share = (lambda s: "" if math.isnan(s) else f", {s:.0%} of the queries")
    if not math.isnan(lo):
        bundle.add("prefix_cache_hit_rate_low_load", lo,
                   f"derived: {how} where kv_cache_usage < {LOW_LOAD:.0%}{share(s_lo)}, {span}")
    if not math.isnan(hi):
        bundle.add("prefix_cache_hit_rate_high_load", hi,
                   f"derived: {how} where kv_cache_usage ≥ {HIGH_LOAD:.0%}{share(s_hi)}, {span}")
    if 0 <= lo <= 1 and 0 <= hi <= 1:  # NaN, or a rate refused as impossible: no difference either
        bundle.add("prefix_cache_hit_rate_load_drop", lo - hi,
                   f"derived: {lo:.1%} at low load − {hi:.1%} at high load, {span}")


def _cumulative_thirds(bundle: Bundle) -> None:
    """Early / late hit rate from the V0 cumulative gauge, de-cumulated when the queries can be stood in for."""
    if bundle.has("prefix_cache_hit_rate_early"):
        return
    g = bundle.signal("prefix_cache_hit_rate_cumulative").dropna(subset=["value"]).sort_values("seq")
    if len(g) < 3:
        return
    src = f"prefix_cache_hit_rate_cumulative {g['source'].iloc[0]} .. {g['source'].iloc[-1]}"
    q = None
    df = _aligned(bundle, ("prefix_cache_hit_rate_cumulative", "prompt_tokens"))
    if len(df) >= 3 and (np.diff(df["prompt_tokens"].to_numpy()) >= 0).all():
        q, rate = df["prompt_tokens"].to_numpy(), df["prefix_cache_hit_rate_cumulative"].to_numpy()
        how = "de-cumulated with prompt_tokens_total (V0 queries ∝ prompt tokens)"
    else:
        df = _aligned(bundle, ("prefix_cache_hit_rate_cumulative", "prompt_throughput"))
        t = df["_t"].to_numpy(dtype=float) if len(df) else np.zeros(0)
        if len(df) >= 3 and not np.isnan(t).any():
            dt = np.diff(t, prepend=t[0])
            q = np.cumsum(df["prompt_throughput"].to_numpy() * dt) + 1e-9
            rate = df["prefix_cache_hit_rate_cumulative"].to_numpy()
            how = "de-cumulated with the logged prompt throughput × interval (V0 queries ∝ prompt tokens)"
    if q is not None:
        rates, w = decumulate(rate, q)
        n = len(rates)
        k = max(1, n // 3)
        parts = []
        for sl in (slice(0, k), slice(n - k, n)):
            ww, rr = w[sl], rates[sl]
            ok = ~np.isnan(rr) & (ww > 0)
            parts.append(float((rr[ok] * ww[ok]).sum() / ww[ok].sum()) if ok.any() else math.nan)
        early, late = parts
        if not (math.isnan(early) or math.isnan(late)):
            bundle.add("prefix_cache_hit_rate_early", early, f"derived: first third of window, {how}, {src}")
            bundle.add("prefix_cache_hit_rate_late", late, f"derived: last third of window, {how}, {src}")
            bundle.add("prefix_cache_hit_rate_drop", early - late, f"derived: early − late, {how}, {src}")
        else:  # the gauge and the queries disagree (or barely moved): no rate from them, and none from the raw gauge
            bundle.skipped_derived.append(
                f"prefix_cache_hit_rate_early/late not derived: the V0 cumulative hit rate and the prompt tokens do "
                f"not fit together in the first or last third of the window ({src})")
        return
    v = g["value"].to_numpy(dtype=float)
    k = max(1, len(v) // 3)
    early, late = float(v[k - 1]), float(v[-1])
    note = "cumulative since start (V0) and no prompt-token series to de-cumulate it: a fall shows damped"
    bundle.add("prefix_cache_hit_rate_early", early, f"derived: value at the end of the first third, {note}, {src}")
    bundle.add("prefix_cache_hit_rate_late", late, f"derived: last value, {note}, {src}")
    bundle.add("prefix_cache_hit_rate_drop", early - late, f"derived: early − late (a lower bound), {note}, {src}")


def _alloc_rate(bundle: Bundle) -> tuple[float, float, str] | None:
    """(KV tokens written per second, window seconds, how) from the counters, else from the logged throughputs."""
    rows = {n: bundle.signal(n).dropna(subset=["t", "value"]).sort_values("t")
            for n in ("prompt_tokens", "generation_tokens", "prefix_cache_hits")}
    p, g = rows["prompt_tokens"], rows["generation_tokens"]
    if len(p) >= 2 and len(g) >= 2:
        window = float(p["t"].iloc[-1] - p["t"].iloc[0])
        if window > 0:
            dp, dg = increase(p["value"]), increase(g["value"])
            h = rows["prefix_cache_hits"]
            dh = increase(h["value"]) if len(h) >= 2 else 0.0
            dh = 0.0 if math.isnan(dh) else dh
            return ((max(0.0, dp - dh) + dg) / window, window,
                    f"(Δprompt_tokens {dp:,.0f} − Δprefix_cache_hits {dh:,.0f} + Δgeneration_tokens {dg:,.0f}) / "
                    f"{window:,.0f} s, {p['source'].iloc[0]} .. {p['source'].iloc[-1]}")
    df = _aligned(bundle, ("prompt_throughput", "generation_throughput"))
    if len(df) >= 2:
        t = df["_t"].to_numpy(dtype=float)
        window = float(t[-1] - t[0]) if not np.isnan(t).any() else math.nan
        rate = float((df["prompt_throughput"] + df["generation_throughput"]).mean())
        return rate, window, (f"mean logged prompt + generation throughput ({len(df)} stats lines, "
                              f"{df['_src'].iloc[0]} .. {df['_src'].iloc[-1]}; before 0.16 the prompt part includes "
                              "cached tokens, so this is an upper bound)")
    return None


def _retention(bundle: Bundle) -> None:
    if bundle.has("prefix_cache_retention_seconds"):
        return
    pool = bundle.last("kv_capacity_tokens") or bundle.last("kv_cache_size_tokens")
    usage = bundle.signal("kv_cache_usage").dropna(subset=["value"])
    alloc = _alloc_rate(bundle)
    if alloc is None:
        return
    rate, _window, how = alloc
    bundle.add("kv_block_alloc_tokens_per_second", rate, f"derived: {how}")
    if not pool or usage.empty:
        return
    mean_u = float(usage["value"].mean())
    sec = retention_seconds(pool[0], mean_u, rate)
    if math.isfinite(sec):
        bundle.add("prefix_cache_retention_seconds", sec,
                   f"derived: pool {pool[0]:,.0f} tokens ({pool[1]}) × (1 − mean usage {mean_u:.1%}) / "
                   f"{rate:,.1f} KV tokens/s written")


def _readmissions(bundle: Bundle) -> None:
    ver = bundle.signal("vllm_version")
    if ver.empty or bundle.has("prefix_cache_readmission_preemptions"):
        return
    text = str(ver["text"].iloc[-1])
    if not readmissions_counted(text):
        return
    pre = bundle.signal("num_preemptions").dropna(subset=["value"]).sort_values("seq")
    n = increase(pre["value"]) if len(pre) >= 2 else math.nan
    if not n > 0:
        return
    bundle.add("prefix_cache_readmission_preemptions", n,
               f"derived: vLLM {text} ({ver['source'].iloc[-1]}) counts re-admitted preempted requests as prefix "
               f"hits; {n:,.0f} preemption(s) over {pre['source'].iloc[0]} .. {pre['source'].iloc[-1]}",
               text=text)


def _demand(bundle: Bundle) -> None:
    if bundle.has("kv_demand_tokens"):
        return
    p, g = bundle.last("request_prompt_tokens_mean"), bundle.last("request_generation_tokens_mean")
    pool = bundle.last("kv_capacity_tokens") or bundle.last("kv_cache_size_tokens")
    if not (p and g) or not bundle.has("num_requests_running"):
        return
    mml = bundle.last("max_model_len")
    limit = mml[0] if mml and mml[0] > 0 else MAX_MEAN_TOKENS
    if not (0 <= p[0] <= limit and 0 <= g[0] <= limit):
        bundle.skipped_derived.append(f"kv_demand_tokens not estimated: mean prompt {p[0]:.6g} / output {g[0]:.6g} "
                                      f"tokens is not a length one request can have (at most {limit:,.0f})")
        return
    df = _aligned(bundle, ("num_requests_running", "num_requests_waiting"))
    if df.empty:
        return
    d = demand_tokens(df["num_requests_running"].to_numpy(), df["num_requests_waiting"].to_numpy(), p[0], g[0])
    i = int(np.argmax(d))
    at = df["_t"].iloc[i]
    at = None if pd.isna(at) else float(at)
    r, w = df["num_requests_running"].iloc[i], df["num_requests_waiting"].iloc[i]
    src = (f"derived: {r:.0f} running × ({p[0]:,.0f} + {g[0]:,.0f}/2) + {w:.0f} waiting × {p[0]:,.0f} tokens "
           f"({df['_src'].iloc[i]}; mean prompt from {p[1]}, mean output from {g[1]})")
    bundle.add("kv_demand_tokens", float(d[i]), src, t=at)
    if pool and pool[0] > 0 and p[0] + g[0] / 2 > 0:
        bundle.add("kv_fit_requests", math.floor(pool[0] / (p[0] + g[0] / 2)),
                   f"derived: pool {pool[0]:,.0f} tokens ({pool[1]}) / ({p[0]:,.0f} + {g[0]:,.0f}/2) tokens per request, "
                   "rounded down")
    if pool and pool[0] > 0:
        bundle.add("kv_demand_ratio", float(d[i]) / pool[0], f"derived: {d[i]:,.0f} tokens / pool {pool[0]:,.0f} "
                                                             f"tokens ({pool[1]})", t=at)


def _sizing(bundle: Bundle) -> None:
    """``max_num_seqs_fit``, ``kv_demand_requests``, ``replicas_needed`` (+ ``_fp8``): the numbers a capacity remedy
    quotes. From the demand estimate (length histograms: :func:`demand_tokens`) when there is one, else from the
    observed peak (the running count and KV usage of one instant: :func:`fit_requests_observed`)."""
    if bundle.has("max_num_seqs_fit"):
        return
    pool = bundle.last("kv_capacity_tokens") or bundle.last("kv_cache_size_tokens")
    fp8 = bundle.last("kv_capacity_tokens_fp8")
    demand, fit = bundle.last("kv_demand_tokens"), bundle.last("kv_fit_requests")
    ratio = None  # demand / one pool, and where both came from
    if fit and fit[0] < 1:  # a mean request larger than the pool: no max_num_seqs (nor replica count) from it
        bundle.skipped_derived.append(f"max_num_seqs_fit not taken from the demand estimate: the mean request "
                                      f"does not fit the pool once ({fit[1]})")
        fit = None
    if demand and fit and pool and pool[0] > 0:
        basis = "demand estimate from the length histograms"
        bundle.add("max_num_seqs_fit", fit[0], f"derived: = kv_fit_requests ({fit[1]})", text=basis)
        ratio = demand[0] / pool[0], (f"peak demand {demand[0]:,.0f} tokens ({demand[1]}) / pool {pool[0]:,.0f} "
                                      f"tokens ({pool[1]})"), basis
    else:
        df = _aligned(bundle, ("kv_cache_usage", "num_requests_running"))
        df = df[(df["num_requests_running"] > 0) & (df["kv_cache_usage"] >= MIN_FOOTPRINT_USAGE)
                & (df["kv_cache_usage"] <= 1)]
        if df.empty:
            return
        peak = df.iloc[int(np.flatnonzero(df["kv_cache_usage"].to_numpy() == df["kv_cache_usage"].max())[-1])]
        r, u = float(peak["num_requests_running"]), float(peak["kv_cache_usage"])
        per = fit_requests_observed(r, u)
        basis = f"observed peak: {r:.0f} running held {u:.1%} of the pool"
        bundle.add("max_num_seqs_fit", math.floor(per), f"derived: {r:.0f} running / usage {u:.1%} ({peak['_src']}), "
                                                        "rounded down", text=basis)
        names = [n for n in ("num_requests_running", "num_requests_waiting", "num_requests_swapped") if bundle.has(n)]
        if "num_requests_waiting" not in names:
            return
        segs = {int(x) for n in names for x in bundle.signal(n)["segment"].unique()}
        if len(segs) > 1:  # never one run's requests over another run's pool (issue 25)
            bundle.skipped_derived.append(f"replicas_needed not sized: the running and waiting counts come from "
                                          f"{len(segs)} runs (start-ups) of the server, and one run's queue is not "
                                          "another's load")
            return
        cols = _aligned(bundle, tuple(names))
        if cols.empty:
            return
        total = cols[names].sum(axis=1).to_numpy()
        i = int(np.argmax(total))
        parts = " + ".join(f"{cols[n].iloc[i]:.0f} {n.removeprefix('num_requests_')}" for n in names)
        bundle.add("kv_demand_requests", float(total[i]), f"derived: {parts} ({cols['_src'].iloc[i]})")
        ratio = total[i] / per, (f"{total[i]:,.0f} requests in the server ({cols['_src'].iloc[i]}) / {per:,.1f} the "
                                 f"pool holds ({r:.0f} running / usage {u:.1%}, {peak['_src']})"), basis
    rates = bundle.last("replicas_from_rates")
    if rates:  # sized from rates (arrivals vs completions, Little's law): the same for a longer window
        lo, hi = bundle.last("replicas_from_rates_low"), bundle.last("replicas_from_rates_high")
        if rates[0] < 2:
            return
        text = bundle.signal("replicas_from_rates")["text"].iloc[-1]
        if lo and hi and lo[0] != hi[0]:
            text = f"{lo[0]:.0f}-{hi[0]:.0f} at the rates' ±2 standard errors (a short window); {text}"
        bundle.add("replicas_needed", rates[0], f"derived: = replicas_from_rates ({rates[1]})", text=text)
        if fp8 and pool and pool[0] > 0 and fp8[0] > pool[0] and ratio is not None:
            bundle.add("replicas_needed_fp8", replicas_needed(ratio[0] * pool[0], fp8[0]),
                       f"derived: {ratio[0]:.2f} pools × {pool[0]:,.0f} tokens / fp8 pool {fp8[0]:,.0f} tokens "
                       f"({fp8[1]}), rounded up", text=ratio[2])
        return
    if ratio is None or ratio[0] <= 1 + 1e-9:
        return  # one pool holds the peak: no replica to add
    n = replicas_needed(ratio[0], 1.0)
    basis = ratio[2]
    if n > MAX_PLAIN_REPLICAS:
        basis += (f"; {ratio[0]:,.0f}x one pool is more likely a backlog (a batch submitted at once, clients "
                  "retrying) than a load to provision for: check the arrival rate before adding that many")
    bundle.add("replicas_needed", n, f"derived: {ratio[1]} = {ratio[0]:,.2f}, rounded up", text=basis)
    if fp8 and pool and pool[0] > 0 and fp8[0] > pool[0]:
        bundle.add("replicas_needed_fp8", replicas_needed(ratio[0] * pool[0], fp8[0]),
                   f"derived: {ratio[0]:.2f} pools × {pool[0]:,.0f} tokens / fp8 pool {fp8[0]:,.0f} tokens ({fp8[1]}), "
                   "rounded up", text=ratio[2])


def _hybrid_floor(bundle: Bundle) -> None:
    bs = bundle.last("block_size")
    if bs and bs[0] > MAX_CHOSEN_BLOCK_SIZE and not bundle.has("hybrid_block_size"):
        bundle.add("hybrid_block_size", bs[0], f"derived: block_size {bs[0]:,.0f} ({bs[1]}) > {MAX_CHOSEN_BLOCK_SIZE}: raised for a "
                                                "hybrid model's state pages")


def derive_prefix(bundle: Bundle) -> None:
    """Add the prefix-cache, demand and retention signals to ``bundle`` (in place), where their inputs exist:

    * ``prefix_cache_hit_rate_low_load`` / ``_high_load`` / ``_load_drop`` (:func:`hit_rate_by_load`; from the V1
      log's rolling rate when there are no counters);
    * ``kv_block_alloc_tokens_per_second`` and ``prefix_cache_retention_seconds`` (:func:`retention_seconds`);
    * ``prefix_cache_readmission_preemptions`` for a 0.9-0.11 server that preempted (the hit rate is inflated);
    * ``kv_demand_tokens`` / ``kv_demand_ratio`` / ``kv_fit_requests`` (:func:`demand_tokens`; needs the length
      histograms' means);
    * ``max_num_seqs_fit``, ``kv_demand_requests``, ``replicas_needed`` / ``replicas_needed_fp8`` (:func:`_sizing`:
      :func:`replicas_needed`, :func:`fit_requests_observed`);
    * ``hybrid_block_size`` when block_size is above 128 tokens (the hybrid block floor of the prefix cache).
    """
    _load_split(bundle)
    _retention(bundle)
    _readmissions(bundle)
    _demand(bundle)
    _sizing(bundle)
    _hybrid_floor(bundle)
