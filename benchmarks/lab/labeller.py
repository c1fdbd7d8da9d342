"""The one labeller of the lab sweep: the true class of a twin case, from what the simulation measured.

``label(truth) -> (class, reason)`` reads a case's ``truth.json`` (shared/twin/README.md: per-minute windows
measured inside vLLM 0.33's block pool) and never the scenario's intent (``truth["class"]``), so a scenario that
aimed at "high usage that fits" and preempted anyway is labelled capacity pressure.

The rule, in order (the first that holds):

1. **The pool ran out.** A *pressured minute* is a truth window with a preemption, or with requests waiting while
   block usage reached ``FULL`` (0.97) in that minute (a capacity wait, not a ``max_num_seqs`` or prefill-budget
   queue, which waits with blocks free). The pool ran out when there was at least one preemption or at least
   ``MIN_WAIT_MINUTES`` (2) pressured minutes. Then:

   - **partial_block_waste** if the tokens stored fill under ``OCCUPANCY_WASTE`` (0.5) of the slots of the
     referenced blocks over those minutes (token occupancy, shared blocks counted once): the pool is full of
     empty slots, and the block size, not the load, is what to change;
   - else **capacity_pressure**.
2. **prefix_cache_eviction** if, over the second half of the run (the state at the end of the window, which is
   what an on-call engineer asks about; the first half holds the cache warming up), the prefix tokens lost to
   eviction (``eviction_miss_tokens``: the full blocks after a request's cache hit whose hashes the pool had
   cached and since evicted) are at least ``EVICT_MISS_SHARE`` (0.05) of the prefix-cache query tokens and at
   least ``EVICT_MISS_OF_HITS`` (0.15) of the hit tokens an unbounded cache would have given (hits + eviction
   misses): the cache lost a real part of what it would have saved. (On the 2026-12-01 sweep the cases without
   eviction sit at 0.00-0.01 on both, the eviction families at 0.06 and above.) Cold misses of prefixes seen
   for the first time are not eviction.
3. **healthy** otherwise (also high usage that fits, queues without a full pool, no reuse, a hit rate that fell
   because the new traffic shares nothing).
"""

from __future__ import annotations

FULL = 0.97
MIN_WAIT_MINUTES = 2
OCCUPANCY_WASTE = 0.5
EVICT_MISS_SHARE = 0.05
EVICT_MISS_OF_HITS = 0.15


def _pressured(w: dict) -> bool:
    return (w.get("preemptions") or 0) > 0 or ((w.get("waiting_max") or 0) > 0 and (w.get("usage_max") or 0) >= FULL)


def figures(truth: dict) -> dict:
    """The measured figures the label rests on (also shown in the accuracy report's miss table)."""
    wins = truth.get("windows") or []
    tot = truth.get("totals") or {}
    pressured = [w for w in wins if _pressured(w)]
    occ_p = [w["token_occupancy"] for w in pressured if w.get("token_occupancy") is not None]
    late = wins[len(wins) // 2:]
    queries = float(sum(w.get("prefix_queries") or 0 for w in late))
    hits = float(sum(w.get("prefix_hits") or 0 for w in late))
    miss = float(sum(w.get("eviction_miss_tokens") or 0 for w in late))
    return {
        "usage_peak": (truth.get("block_usage") or {}).get("peak"),
        "usage_mean": (truth.get("block_usage") or {}).get("mean_time_weighted"),
        "token_occupancy": (truth.get("token_occupancy") or {}).get("mean"),
        "occupancy_pressured": sum(occ_p) / len(occ_p) if occ_p else None,
        "preemptions": int(tot.get("preemptions") or 0),
        "pressured_minutes": len(pressured),
        "waiting_peak": (truth.get("peaks") or {}).get("waiting"),
        "hit_rate": tot.get("prefix_cache_hit_rate"),
        "evict_miss_share": miss / queries if queries else 0.0,
        "evict_miss_of_hits": miss / (hits + miss) if hits + miss else 0.0,
    }


def label(truth: dict) -> tuple[str, str]:
    """The true class of a twin case and a one-line reason with the figures.

    Args:
        truth: a case's ``truth.json`` as a dict (keys ``windows``, ``totals``, ``block_usage``,
            ``token_occupancy``, ``peaks``; shared/twin/README.md).
    Returns:
        (class, reason): class one of ``capacity_pressure``, ``partial_block_waste``, ``prefix_cache_eviction``,
        ``healthy``.
    """
    f = figures(truth)
    if f["preemptions"] > 0 or f["pressured_minutes"] >= MIN_WAIT_MINUTES:
        why = f"{f['preemptions']} preemption(s), {f['pressured_minutes']} minute(s) with a full pool and a queue"
        occ = f["occupancy_pressured"]
        if occ is not None and occ < OCCUPANCY_WASTE:
            return "partial_block_waste", f"{why}; tokens fill {occ:.0%} of the referenced blocks' slots"
        return "capacity_pressure", why + (f"; token occupancy {occ:.0%}" if occ is not None else "")
    if f["evict_miss_share"] >= EVICT_MISS_SHARE and f["evict_miss_of_hits"] >= EVICT_MISS_OF_HITS:
        return ("prefix_cache_eviction", f"prefix tokens lost to eviction in the second half: {f['evict_miss_share']:.0%} of the queries, "
                f"{f['evict_miss_of_hits']:.0%} of what an unbounded cache would have hit")
    return "healthy", (f"usage peak {f['usage_peak']:.0%}, no preemption, {f['pressured_minutes']} full-pool minute(s) "
                       f"with a queue, eviction lost {f['evict_miss_share']:.0%} of the queries")
