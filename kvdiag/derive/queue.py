"""Is the server keeping up? The admission level of vLLM's scheduler, queue growth, arrival and completion rates,
and replica sizing from those rates (issue 25).

What vLLM 0.33's V1 scheduler needs to admit a waiting request (``vllm/v1/core/sched/scheduler.py``,
``Scheduler.schedule``; ``vllm/v1/core/kv_cache_manager.py``, ``KVCacheManager.allocate_slots``):

* the running requests are scheduled first, each with the blocks its next tokens need;
* then, while the step's token budget (``max_num_batched_tokens``) is not spent and fewer than ``max_num_seqs``
  requests run, the head of the waiting queue gets ``min(remaining prompt, remaining budget)`` tokens if
  ``allocate_slots`` finds that many blocks free (plus the watermark, 0 by default); else admission stops
  for this step.

So the pool is *near full* — KV is what blocks admission — when the free blocks are fewer than one waiting request's
first chunk plus one block per running request: usage ≥ 1 − (⌈min(prompt, budget) / block_size⌉ + running) / usable
blocks (vLLM's usage gauge is 1 − free / (num_gpu_blocks − 1), ``BlockPool.get_usage``). The prompt taken is the
window's 95th percentile (a head-of-line request that large is refused 1 time in 20 at that level).

A server keeping up admits every arrival within a step or two, so a scrape sees a queue only briefly. The queue
*grows* when arrivals outrun admissions: more waiting at the last sample than at the first, and requests waiting on
the last two samples (not one blip); a queue that never empties (waiting on every one of 3+ samples) is held back too.

Rates (Little's law): completions = Δ ``request_prompt_tokens_count`` (one observation per finished request), arrivals
= completions + Δ(running + waiting), each over the same span after the last restart of one run; a range of ±2
Poisson standard errors (√n) for short windows.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..bundle import Bundle
from .core import increase
from .trend import _restart_time, _series

FALLBACK_NEAR_FULL = 0.95
"""The level used when the pool's size in blocks is not in the input (no vLLM admission arithmetic is possible)."""
TARGET_UTILISATION = 0.9
"""Replicas are sized so that each gets at most this share of what one saturated server completes per second."""
CAP_SHARE = 0.8
"""running at its window maximum (±1) on this share of the queued instants reads as a cap (max_num_seqs)."""


def _last(bundle: Bundle, name: str) -> tuple[float, str] | None:
    got = bundle.last(name)
    return got if got and math.isfinite(got[0]) else None


def near_full_level(num_gpu_blocks: float, block_size: float, prompt_tokens: float, running: float,
                    budget: float | None = None) -> float:
    """Usage at which the free blocks no longer hold one waiting request's first chunk plus a block per running
    request (see the module docstring). ``budget`` caps the chunk (chunked prefill); at least 0."""
    usable = num_gpu_blocks - 1
    if not usable > 0 or not block_size > 0:
        raise ValueError("need a pool of at least 2 blocks and a positive block size")
    chunk = prompt_tokens if not budget or budget <= 0 else min(prompt_tokens, max(1.0, budget - running))
    need = math.ceil(max(chunk, 1.0) / block_size) + max(running, 0.0)
    return max(0.0, 1.0 - need / usable)


def grows(waiting: np.ndarray) -> bool | None:
    """True when the waiting counts (in time order) show a queue that grows or never empties, False when they show
    one that does not, None when they cannot tell (one sample with a queue, or two whose last rose)."""
    w = np.asarray(waiting, dtype=float)
    if len(w) == 0:
        return None
    if (w <= 0).all():
        return False
    if len(w) >= 3 and (w > 0).all():
        return True
    if len(w) >= 3 and w[-1] > w[0] and w[-1] > 0 and w[-2] > 0:
        return True
    if len(w) >= 3:
        return False
    return None if w[-1] > w[0] or len(w) == 1 else False


def poisson_range(n: float, span: float) -> tuple[float, float]:
    """(low, high) rate of ``n`` events over ``span`` seconds at ±2 standard errors (√n), low at least 0."""
    sd = 2 * math.sqrt(max(n, 0.0))
    return max(0.0, n - sd) / span, (n + sd) / span


def replicas_for(arrivals: float, completions: float, saturated: bool, kv_per_server: float | None = None) -> int:
    """Replicas so that each gets at most :data:`TARGET_UTILISATION` of one saturated server's completion rate (when
    the window shows it saturated; else the arrivals are what it served: 1), and at least ``kv_per_server`` (Little's
    law on the pool, already a ratio of pools)."""
    n = 1
    if saturated and completions > 0:
        n = max(n, math.ceil(arrivals / (completions * TARGET_UTILISATION) - 1e-9))
    if kv_per_server and kv_per_server > 0:
        n = max(n, math.ceil(kv_per_server - 1e-9))
    return n


def _p95_prompt(bundle: Bundle) -> tuple[float, str] | None:
    got = _last(bundle, "request_prompt_tokens_p95")
    if got:
        return got
    b = bundle.signal("request_prompt_tokens_bucket")
    if b.empty:
        return _last(bundle, "request_prompt_tokens_mean")
    from .windows import histogram_quantile

    b = b[~b["source"].astype(str).str.startswith("state:") & b["value"].notna()]
    last = b.groupby("text", sort=False)["value"].last()  # cumulative since start: one page
    bounds, counts = [], []
    for k, v in last.items():
        try:
            bounds.append(float(k))
        except (TypeError, ValueError):
            continue
        counts.append(float(v))
    if not bounds:
        return _last(bundle, "request_prompt_tokens_mean")
    val = histogram_quantile(0.95, bounds, counts)
    if math.isnan(val):
        return None
    return val, f"histogram_quantile(0.95) of request_prompt_tokens buckets since start ({b['source'].iloc[-1]})"


def _level(bundle: Bundle) -> float:
    blocks, bs = _last(bundle, "num_gpu_blocks"), _last(bundle, "block_size")
    running = bundle.signal("num_requests_running").dropna(subset=["value"])
    r = float(running["value"].max()) if not running.empty else 0.0
    prompt = _p95_prompt(bundle)
    budget = _last(bundle, "max_num_batched_tokens")
    if blocks and bs and blocks[0] > 1 and bs[0] > 0 and (prompt or budget):
        chunk = prompt[0] if prompt else budget[0]
        level = near_full_level(blocks[0], bs[0], chunk, r, budget[0] if budget else None)
        what = (f"p95 prompt {prompt[0]:,.0f} tokens ({prompt[1]})" if prompt else
                f"the step's token budget {budget[0]:,.0f}")
        if budget and prompt and budget[0] - r < prompt[0]:
            what += f", capped by max_num_batched_tokens {budget[0]:,.0f} − {r:.0f} running"
        src = (f"derived: vLLM admits a waiting request only if free blocks ≥ its first chunk + the running requests' "
               f"next blocks: 1 − (⌈{what} / block_size {bs[0]:.0f}⌉ + {r:.0f} running) / "
               f"{blocks[0] - 1:,.0f} usable blocks ({blocks[1]})")
        bundle.add("kv_near_full_level", level, src)
        return level
    have = [f"{n} ({got[1]})" for n in ("num_gpu_blocks", "block_size", "kv_cache_size_tokens")
            if (got := _last(bundle, n))]
    usage = bundle.signal("kv_cache_usage").dropna(subset=["value"])
    read = f"; usage read from {usage['source'].iloc[-1]}" if not usage.empty else ""
    bundle.add("kv_near_full_level", FALLBACK_NEAR_FULL,
               f"assumed {FALLBACK_NEAR_FULL:.0%}: the pool's blocks, block size or the request lengths are not all in "
               f"the input (given: {', '.join(have) or 'none'}{read}), so vLLM's admission level cannot be computed")
    return FALLBACK_NEAR_FULL


def _one_run(df: pd.DataFrame, since: float) -> pd.DataFrame:
    return df[df["t"] >= since] if not df.empty and math.isfinite(since) else df


def derive_queue(bundle: Bundle) -> None:
    """Add ``kv_near_full_level``, ``kv_cache_usage_over_level``, ``num_requests_waiting_near_full``,
    ``queue_grows`` / ``queue_growth_rate`` / ``queue_limit``, ``window_seconds`` / ``window_samples``, the arrival
    and completion rates and ``replicas_from_rates`` (+ ``_low`` / ``_high``), where their inputs exist."""
    if bundle.has("kv_near_full_level") or not bundle.has("kv_cache_usage") and not bundle.has("num_requests_waiting"):
        return
    level = _level(bundle)
    usage = bundle.signal("kv_cache_usage").dropna(subset=["value"])
    if not usage.empty:
        i = int(usage["value"].to_numpy().argmax())
        peak = float(usage["value"].iloc[i])
        bundle.add("kv_cache_usage_over_level", peak - level,
                   f"derived: peak usage {peak:.1%} ({usage['source'].iloc[i]}) − near-full level {level:.1%}")
    from .prefix import _aligned

    both = _aligned(bundle, ("kv_cache_usage", "num_requests_waiting"))
    if not both.empty:
        full = both[both["kv_cache_usage"] >= level]
        if full.empty:
            bundle.add("num_requests_waiting_near_full", 0.0,
                       f"derived: KV usage below {level:.1%} at every instant with a waiting count ({len(both)}, "
                       f"{both['_src'].iloc[0]} .. {both['_src'].iloc[-1]})")
        else:
            j = int(full["num_requests_waiting"].to_numpy().argmax())
            bundle.add("num_requests_waiting_near_full", float(full["num_requests_waiting"].iloc[j]),
                       f"derived: most requests waiting at an instant with KV usage ≥ {level:.1%} "
                       f"({full['kv_cache_usage'].iloc[j]:.1%}, {full['_src'].iloc[j]}; {len(full)} of {len(both)} "
                       "instant(s))")
    since = _restart_time(bundle)
    w = _one_run(_series(bundle, "num_requests_waiting"), since)
    u = _one_run(_series(bundle, "kv_cache_usage"), since)
    ref = w if len(w) >= len(u) else u
    if len(ref) >= 1:
        span = float(ref["t"].iloc[-1] - ref["t"].iloc[0]) if len(ref) > 1 else 0.0
        bundle.add("window_seconds", span, f"derived: timestamped runtime samples {ref['source'].iloc[0]} .. "
                                           f"{ref['source'].iloc[-1]}")
        bundle.add("window_samples", float(len(ref)), "derived: timestamped runtime samples in the window")
    elif not bundle.signal("kv_cache_usage").empty or not bundle.signal("num_requests_waiting").empty:
        bundle.add("window_seconds", 0.0, "derived: no timestamped runtime sample (one page, or a log without times)")
        bundle.add("window_samples", 0.0, "derived: no timestamped runtime sample")
    raw = bundle.signal("num_requests_waiting").dropna(subset=["value"])
    values = w["value"].to_numpy() if len(w) else (raw["value"].to_numpy()[-1:] if not raw.empty else np.array([]))
    g = grows(values)
    if g is not None:
        bundle.add("queue_grows", 1.0 if g else 0.0,
                   f"derived: waiting {values[0]:.0f} → {values[-1]:.0f} over {len(values)} sample(s)"
                   + (f", {w['source'].iloc[0]} .. {w['source'].iloc[-1]}" if len(w) else
                      (f", {raw['source'].iloc[-1]}" if not raw.empty and "source" in raw else "")))
    if len(w) >= 2 and w["t"].iloc[-1] > w["t"].iloc[0]:
        span = float(w["t"].iloc[-1] - w["t"].iloc[0])
        bundle.add("queue_growth_rate", float(w["value"].iloc[-1] - w["value"].iloc[0]) / span,
                   f"derived: (waiting {w['value'].iloc[-1]:.0f} ({w['source'].iloc[-1]}) − {w['value'].iloc[0]:.0f} "
                   f"({w['source'].iloc[0]})) / {span:.0f} s")
    _rates(bundle, since, bool(g))
    if g:
        _limit(bundle, level)


def _rates(bundle: Bundle, since: float, saturated: bool) -> None:
    c = _one_run(_series(bundle, "request_prompt_tokens_count"), since)
    r = _one_run(_series(bundle, "num_requests_running"), since)
    w = _one_run(_series(bundle, "num_requests_waiting"), since)
    if len(c) < 2 or r.empty or w.empty:
        return
    t0, t1 = float(c["t"].iloc[0]), float(c["t"].iloc[-1])
    span = t1 - t0
    if not span > 0:
        return

    def at(df: pd.DataFrame, t: float) -> float:
        i = int(np.abs(df["t"].to_numpy() - t).argmin())
        return float(df["value"].iloc[i])

    done = increase(c["value"])
    delta = (at(r, t1) + at(w, t1)) - (at(r, t0) + at(w, t0))
    arrived = max(done + delta, 0.0)
    where = f"{span:.0f} s, {c['source'].iloc[0]} .. {c['source'].iloc[-1]}"
    bundle.add("request_completion_rate", done / span, f"derived: {done:,.0f} requests finished / {where}")
    bundle.add("request_arrival_rate", arrived / span,
               f"derived: ({done:,.0f} finished + {delta:+,.0f} in the server) / {where}")
    lo, hi = poisson_range(arrived, span)
    clo, chi = poisson_range(done, span)
    bundle.add("request_arrival_rate_low", lo, f"derived: ({arrived:,.0f} − 2√{arrived:,.0f}) / {span:.0f} s")
    bundle.add("request_arrival_rate_high", hi, f"derived: ({arrived:,.0f} + 2√{arrived:,.0f}) / {span:.0f} s")
    # Little's law on the pool: requests in service = arrivals/s × time in service; each holds its prompt and, on
    # average over its life, half its output
    kv, kv_text = None, ""
    inf = _last(bundle, "request_inference_time_mean")
    p, gen = _last(bundle, "request_prompt_tokens_mean"), _last(bundle, "request_generation_tokens_mean")
    pool = _last(bundle, "kv_capacity_tokens") or _last(bundle, "kv_cache_size_tokens")
    level = _last(bundle, "kv_near_full_level")
    if inf and p and gen and pool and pool[0] > 0:
        usable = pool[0] * (level[0] if level and level[0] > 0 else 1.0)
        kv_per = lambda lam: lam * inf[0] * (p[0] + gen[0] / 2) / usable  # noqa: E731
        kv = kv_per(arrived / span)
        kv_text = (f"; Little's law on the pool: {arrived / span:.2f}/s × {inf[0]:.1f} s in service × "
                   f"({p[0]:,.0f} + {gen[0]:,.0f}/2) tokens / {usable:,.0f} tokens below the near-full level = "
                   f"{kv:.2f} pools")
    else:
        kv_per = None
    n = replicas_for(arrived / span, done / span, saturated, kv)
    n_lo = replicas_for(lo, chi, saturated, kv_per(lo) if kv_per else None)
    n_hi = replicas_for(hi, max(clo, 1e-9), saturated, kv_per(hi) if kv_per else None)
    basis = (f"arrivals {arrived / span:.2f}/s ({lo:.2f}-{hi:.2f}) vs {done / span:.2f}/s completed "
             f"{'by the saturated server' if saturated else '(the server kept up)'} over {span:.0f} s, at most "
             f"{TARGET_UTILISATION:.0%} of that per replica" + kv_text)
    basis += f" (requests finished: {c['source'].iloc[0]} .. {c['source'].iloc[-1]})"
    bundle.add("replicas_from_rates", float(n), f"derived: {basis}", text=basis)
    bundle.add("replicas_from_rates_low", float(min(n_lo, n)), f"derived: at the rates' ±2 standard error ends; {basis}")
    bundle.add("replicas_from_rates_high", float(max(n_hi, n)), f"derived: at the rates' ±2 standard error ends; {basis}")


def _limit(bundle: Bundle, level: float) -> None:
    """Name what holds a growing queue back when the pool is not near full."""
    from .prefix import _aligned

    df = _aligned(bundle, ("num_requests_running", "num_requests_waiting"))
    queued = df[df["num_requests_waiting"] > 0] if not df.empty else df
    cap = _last(bundle, "max_num_seqs")
    if not queued.empty:
        top = float(queued["num_requests_running"].max())
        held = float((queued["num_requests_running"] >= top - 1).mean())
        if cap and top >= cap[0] - 1e-9:
            bundle.add("queue_limit", cap[0], f"derived: {top:.0f} running (max_num_seqs {cap[0]:.0f}, {cap[1]}) on "
                                              f"{held:.0%} of the {len(queued)} instant(s) with a queue",
                       text="max_num_seqs")
            return
        if len(queued) >= 3 and held >= CAP_SHARE and top >= 2:
            run_src = _last(bundle, "num_requests_running")
            bundle.add("queue_limit", top, f"derived: running held at {top:.0f} on {held:.0%} of the {len(queued)} "
                                           "instant(s) with a queue while the pool had room: a cap (max_num_seqs); "
                                           f"running from {run_src[1] if run_src else 'the running count'}",
                       text="max_num_seqs")
            return
    budget = _last(bundle, "max_num_batched_tokens")
    p = _last(bundle, "request_prompt_tokens_mean")
    if budget and p and p[0] >= budget[0] / 2:
        bundle.add("queue_limit", budget[0], f"derived: mean prompt {p[0]:,.0f} tokens against a step budget of "
                                             f"{budget[0]:,.0f} ({budget[1]}): prefill admits few requests per step",
                   text="token_budget")
        return
    done = _last(bundle, "request_completion_rate")
    if done:
        bundle.add("queue_limit", done[0], f"derived: the server completes {done[0]:.2f} requests/s ({done[1]})",
                   text="throughput")
