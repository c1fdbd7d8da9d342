"""Derived signals of a running server's dynamics: what the full pool holds, and whether cached prefixes stopped
hitting.

Two questions the usage gauge alone cannot answer:

* **Tokens or slots?** ``vllm:kv_cache_usage_perc`` counts referenced *blocks*. A full pool can hold
  ``num_gpu_blocks × block_size`` tokens (capacity pressure) or far fewer, when each short sequence pins a
  mostly empty last block (partial-block waste: vLLM's ``KVCacheManager`` allocates whole blocks of
  ``block_size`` tokens, ``vllm/v1/core/kv_cache_manager.py``). :func:`token_occupancy` estimates the tokens
  the running requests hold (running × (mean prompt + half the mean output), from the length histograms) over
  the slots the referenced blocks reserve (usage × pool tokens).
* **Evicted, or nothing to share?** The hit *rate* falls both when cached prefixes are recycled (vLLM's
  ``BlockPool`` hands the least recently freed cached block to each new allocation, ``block_pool.py``) and when
  new traffic with nothing to share joins. Eviction loses hits: absolute hit tokens per second fall while the
  queries hold. New unshared traffic adds queries: hits per second hold. :func:`thirds_per_second` gives both
  rates in the first and last third of the window.

Sources: ``vllm:request_prompt_tokens`` / ``vllm:request_generation_tokens`` histograms (``*_mean``),
``vllm:num_requests_running``, ``vllm:kv_cache_usage_perc`` (``gpu_cache_usage_perc`` before 0.9),
``vllm:prefix_cache_{hits,queries}_total`` (0.9+; ``gpu_prefix_cache_*`` 0.7-0.10), the V0 cumulative
``vllm:gpu_prefix_cache_hit_rate`` × ``vllm:prompt_tokens_total`` (V0 counts queries in prompt tokens).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..bundle import Bundle
from .core import increase
from .prefix import _aligned

#: usage at or above which an instant counts as "the pool is full" for the occupancy estimate
FULL_USAGE = 0.90
#: vLLM's default block size on CUDA (FlashAttention; ``vllm/platforms/cuda.py``) — the remedy's target
from ..vllm_defaults import DEFAULT_BLOCK_SIZE  # noqa: E402
#: fewest full-pool instants the occupancy estimate is taken from
MIN_FULL_INSTANTS = 2


def token_occupancy(running: np.ndarray, usage: np.ndarray, pool_tokens: float, tokens_per_request: float) -> np.ndarray:
    """Estimated tokens held / token slots reserved, per instant.

    Args:
        running: requests running at each instant (shape (n,)).
        usage: KV usage 0-1 at the same instants (shape (n,)).
        pool_tokens: the pool in tokens (num_gpu_blocks × block_size).
        tokens_per_request: mean tokens a running request holds (mean prompt + half the mean output).
    Returns:
        shape (n,): running × tokens_per_request / (usage × pool_tokens); NaN where usage is 0. Above 1 when
        requests share prefix blocks (the running requests' tokens count a shared block once per request).
    """
    slots = usage * pool_tokens
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(slots > 0, running * tokens_per_request / slots, np.nan)


def thirds_per_second(t: np.ndarray, counter: np.ndarray, resets: bool = True) -> tuple[float, float]:
    """Increase per second of a counter in the first and the last third of the window (by time).

    Args:
        t: sample times, seconds (shape (n,), increasing).
        counter: the counter's values (shape (n,)); a fall is a reset (the increase restarts from the value).
        resets: False for a cumulative series rebuilt from a rounded ratio (V0 hit rate × prompt tokens), where a
            small fall is rounding, not a restart: falls count as no increase.
    Returns:
        (early rate, late rate) in counter units per second; NaN when a third spans no time.
    """
    span = t[-1] - t[0]
    out = []
    for lo, hi in ((t[0], t[0] + span / 3), (t[-1] - span / 3, t[-1])):
        m = (t >= lo - 1e-9) & (t <= hi + 1e-9)
        tt, cc = t[m], counter[m]
        dt = tt[-1] - tt[0] if len(tt) >= 2 else 0.0
        inc = increase(pd.Series(cc)) if resets else float(np.clip(np.diff(cc), 0, None).sum()) if len(cc) >= 2 else 0.0
        out.append(inc / dt if dt > 0 else math.nan)
    return out[0], out[1]


def _occupancy(bundle: Bundle) -> None:
    if bundle.has("kv_token_occupancy"):
        return
    p, g = bundle.last("request_prompt_tokens_mean"), bundle.last("request_generation_tokens_mean")
    pool = bundle.last("kv_capacity_tokens") or bundle.last("kv_cache_size_tokens")
    bs = bundle.last("block_size")
    if not (p and g and pool and pool[0] > 0):
        return
    per_req = p[0] + g[0] / 2
    if per_req <= 0:
        return
    df = _aligned(bundle, ("kv_cache_usage", "num_requests_running"))
    df = df[(df["kv_cache_usage"] >= FULL_USAGE) & (df["kv_cache_usage"] <= 1 + 1e-9) & (df["num_requests_running"] >= 1)]
    if len(df) < MIN_FULL_INSTANTS:
        return
    occ = token_occupancy(df["num_requests_running"].to_numpy(float), df["kv_cache_usage"].to_numpy(float),
                          pool[0], per_req)
    i = int(np.argsort(occ)[len(occ) // 2])  # the median instant (upper median), quoted with its figures
    r, u = float(df["num_requests_running"].iloc[i]), float(df["kv_cache_usage"].iloc[i])
    src = (f"derived: median over {len(df)} instant(s) with KV usage ≥ {FULL_USAGE:.0%}; at {df['_src'].iloc[i]}: "
           f"{r:.0f} running × ({p[0]:,.0f} + {g[0]:,.0f}/2) tokens / (usage {u:.1%} × pool {pool[0]:,.0f} tokens) "
           f"(mean prompt from {p[1]}, mean output from {g[1]})")
    o = float(np.median(occ))
    bundle.add("kv_token_occupancy", o, src)
    held = r * per_req
    slots = u * pool[0]
    bundle.add("kv_empty_slots_ratio", max(0.0, u - held / pool[0]),
               f"derived: usage {u:.1%} − {held:,.0f} tokens held / pool {pool[0]:,.0f} tokens ({df['_src'].iloc[i]})")
    if bs and bs[0] > DEFAULT_BLOCK_SIZE and r >= 1:
        # with block_size 16 a request of L tokens holds about L + 16/2 slots (whole blocks, the last one half full
        # on average), never less than one block
        new_per_req = max(float(DEFAULT_BLOCK_SIZE), per_req + DEFAULT_BLOCK_SIZE / 2)
        freed = slots - r * new_per_req
        if freed > 0:
            bundle.add("block_size_suggested", DEFAULT_BLOCK_SIZE,
                       f"derived: vLLM's default block size on CUDA (FlashAttention); now {bs[0]:.0f} ({bs[1]})")
            bundle.add("kv_slots_freed_tokens", freed,
                       f"derived: {r:.0f} running hold {slots:,.0f} slots now (usage {u:.1%} × pool {pool[0]:,.0f}); "
                       f"with block_size {DEFAULT_BLOCK_SIZE} about {r:.0f} × ({per_req:,.0f} + {DEFAULT_BLOCK_SIZE}/2) = "
                       f"{r * new_per_req:,.0f} ({df['_src'].iloc[i]})")
            bundle.add("kv_slots_freed_blocks", freed / bs[0],
                       f"derived: {freed:,.0f} token slots / block_size {bs[0]:.0f}")
            bundle.add("kv_extra_requests_fit", math.floor(freed / new_per_req),
                       f"derived: {freed:,.0f} freed slots / {new_per_req:,.0f} per request with block_size "
                       f"{DEFAULT_BLOCK_SIZE}, rounded down")


def _hits_series(bundle: Bundle) -> tuple[np.ndarray, np.ndarray, np.ndarray, str, bool] | None:
    """(t, hits, queries, how, counters): cumulative prefix-cache hit and query tokens at timed instants; counters
    False when the hits are rebuilt from V0's cumulative rate (falls are rounding, not resets)."""
    df = _aligned(bundle, ("prefix_cache_hits", "prefix_cache_queries"))
    if len(df) >= 4 and df["_t"].notna().all():
        return (df["_t"].to_numpy(float), df["prefix_cache_hits"].to_numpy(float),
                df["prefix_cache_queries"].to_numpy(float),
                f"prefix_cache_hits / prefix_cache_queries counters, {df['_src'].iloc[0]} .. {df['_src'].iloc[-1]}", True)
    df = _aligned(bundle, ("prefix_cache_hit_rate_cumulative", "prompt_tokens"))
    if len(df) >= 4 and df["_t"].notna().all():
        q = df["prompt_tokens"].to_numpy(float)
        if (np.diff(q) >= 0).all():
            return (df["_t"].to_numpy(float), df["prefix_cache_hit_rate_cumulative"].to_numpy(float) * q, q,
                    f"V0 cumulative hit rate × prompt_tokens_total (V0 queries ∝ prompt tokens), "
                    f"{df['_src'].iloc[0]} .. {df['_src'].iloc[-1]}", False)
    return None


def _prefix_rates(bundle: Bundle) -> None:
    if bundle.has("prefix_cache_hits_per_second_early"):
        return
    got = _hits_series(bundle)
    if got is None:
        return
    t, hits, queries, how, counters = got
    if t[-1] - t[0] <= 0:
        return
    he, hl = thirds_per_second(t, hits, resets=counters)
    qe, ql = thirds_per_second(t, queries)
    if any(math.isnan(x) for x in (he, hl, qe, ql)):
        return
    bundle.add("prefix_cache_hits_per_second_early", he, f"derived: Δhits / Δt, first third of the window, {how}")
    bundle.add("prefix_cache_hits_per_second_late", hl, f"derived: Δhits / Δt, last third of the window, {how}")
    bundle.add("prefix_cache_queries_per_second_early", qe, f"derived: Δqueries / Δt, first third, {how}")
    bundle.add("prefix_cache_queries_per_second_late", ql, f"derived: Δqueries / Δt, last third, {how}")
    if he > 0:
        bundle.add("prefix_cache_hits_per_second_ratio", hl / he,
                   f"derived: hits/s late {hl:,.1f} / early {he:,.1f} ({how})")
    if qe > 0:
        bundle.add("prefix_cache_queries_per_second_ratio", ql / qe,
                   f"derived: queries/s late {ql:,.1f} / early {qe:,.1f} ({how})")


#: usage at or above which a waiting request counts as waiting for the pool (not for a sequence slot or the prefill
#: budget): a request waits for KV when its next chunk does not fit, which is near a full pool
WAITING_FULL_USAGE = 0.90


def _waiting_when_full(bundle: Bundle) -> None:
    if bundle.has("num_requests_waiting_when_full"):
        return
    # not vllm:num_requests_waiting_by_reason{reason="capacity"}: in 0.33 that is every waiting request that is not
    # deferred (vllm/v1/metrics/loggers.py: "waiting for scheduling capacity"), max_num_seqs and token budget included
    df = _aligned(bundle, ("kv_cache_usage", "num_requests_waiting"))
    if df.empty:
        w = bundle.signal("num_requests_waiting").dropna(subset=["value"])
        if w.empty or not bundle.has("kv_cache_usage"):
            return
        i = int(w["value"].to_numpy().argmax())
        bundle.add("num_requests_waiting_when_full", float(w["value"].iloc[i]),
                   f"derived: most requests waiting, {w['source'].iloc[i]} (no KV usage of the same instant in the input: "
                   "taken as waiting for the pool)", t=w["t"].iloc[i])
        return
    full = df[df["kv_cache_usage"] >= WAITING_FULL_USAGE]
    if full.empty:
        bundle.add("num_requests_waiting_when_full", 0.0,
                   f"derived: KV usage never reached {WAITING_FULL_USAGE:.0%} at an instant with a waiting count "
                   f"({len(df)} instant(s), {df['_src'].iloc[0]} .. {df['_src'].iloc[-1]})")
        return
    i = int(full["num_requests_waiting"].to_numpy().argmax())
    bundle.add("num_requests_waiting_when_full", float(full["num_requests_waiting"].iloc[i]),
               f"derived: most requests waiting at an instant with KV usage ≥ {WAITING_FULL_USAGE:.0%} "
               f"({full['kv_cache_usage'].iloc[i]:.1%}, {full['_src'].iloc[i]}; {len(full)} such instant(s))",
               t=None if pd.isna(full["_t"].iloc[i]) else float(full["_t"].iloc[i]))


def derive_dynamics(bundle: Bundle) -> None:
    """Add, where their inputs exist (in place):

    * ``kv_token_occupancy`` (ratio; tokens held / slots reserved at full-pool instants, median) and
      ``kv_empty_slots_ratio`` (share of the pool reserved but empty), with the block-size remedy's numbers
      ``block_size_suggested``, ``kv_slots_freed_tokens`` / ``_blocks``, ``kv_extra_requests_fit``;
    * ``prefix_cache_hits_per_second_early`` / ``_late`` / ``_ratio`` and ``prefix_cache_queries_per_second_*``
      (tokens/s; thirds of the window by time; needs timestamped counters, or a V0 cumulative rate with the
      prompt-token counter);
    * ``num_requests_waiting_when_full`` (requests): the most requests waiting at an instant whose KV usage was
      ≥ 90 %, so a queue at one instant and a full pool at another are
      not taken for capacity pressure.
    """
    _occupancy(bundle)
    _prefix_rates(bundle)
    _waiting_when_full(bundle)
