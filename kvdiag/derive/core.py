"""Derived signals: the maths rules need, computed once from a bundle's raw observations.

Rules only compare signals to thresholds; every formula lives here, with its own unit test.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd

from ..bundle import Bundle

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
        if u * p > float(row["value"]):
            bundle.add("block_overhead_tokens", u * p - float(row["value"]),
                       f"derived: usage {u:.1%} ({usage['source'].iloc[0]}) × pool {p:,.0f} tokens "
                       f"({pool['source'].iloc[0]}) − {row['value']:,.0f} tokens ({row['source']})")


# ---------------------------------------------------------------------------------------------
# Failure phases and memory shares for the catalog rules (issue 6)
_MM_SIGNALS = ("mm_profile_warning", "mm_profile_run")
_POOL_SIGNALS = ("num_gpu_blocks", "kv_cache_size_tokens", "kv_cache_memory_bytes", "activation_peak_bytes",
                 "peak_torch_memory_bytes")
_SERVING_SIGNALS = ("kv_cache_usage", "num_requests_running", "num_requests_waiting", "prompt_throughput")
_FAILURE_SIGNALS = ("cuda_oom", "kv_capacity_error", "weights_load_failed", "sampler_warmup_oom",
                    "free_memory_below_request")


def _before(df: pd.DataFrame, seq: int, names: tuple[str, ...], segment: int | None = None) -> pd.DataFrame:
    rows = df[(df["signal"].isin(names)) & (df["seq"] < seq)]
    if segment is not None:
        rows = rows[rows["segment"] == segment]
    return rows


def oom_phase(df: pd.DataFrame, oom: pd.Series) -> tuple[str, str]:
    """Settle the phase of one ``cuda_oom`` row from what the log shows happened before it.

    The collector names the phase from the traceback frames (reference §2.7); this refines it with the
    order of start-up steps, which is fixed per engine:

    * a ``profile`` or ``unknown`` OOM after a multimodal profiling line (``mm_profile_warning`` 0.9+,
      ``mm_profile_run`` V0 enc-dec) → ``encoder``: the profile run feeds the worst-case dummy images
      through the vision encoder first;
    * an ``unknown`` OOM in a start-up segment whose CUDA graphs are already captured (``cudagraph_bytes``:
      K12, or M6 which V1 prints after capture) and that served nothing yet → ``sampler``: in V1
      ``compile_or_warm_up_model`` runs ``_dummy_sampler_run`` right after capture (``v1/worker/gpu_worker.py``);
    * an ``unknown`` OOM after the weights loaded (W1-W3) and before any pool size or serving line →
      ``profile``: the step after ``load_model`` is the profile run (``determine_num_available_blocks`` /
      ``determine_available_memory``).

    Args:
        df: the bundle frame (:meth:`Bundle.frame`).
        oom: one row of it with ``signal == "cuda_oom"``.

    Returns:
        ``(phase, why)``: ``why`` is ``""`` when the collector's phase stands, else the reason naming the
        log lines it rests on.
    """
    phase, seq, seg = str(oom["text"] or "unknown"), int(oom["seq"]), int(oom["segment"])
    mm = _before(df, seq, _MM_SIGNALS)
    served = _before(df, seq, _SERVING_SIGNALS, seg)
    graphs = _before(df, seq, ("cudagraph_bytes",), seg)
    weights = _before(df, seq, ("weights_bytes",), seg)
    return _settle_phase(phase, mm["source"].iloc[-1] if not mm.empty else None, not served.empty,
                         graphs["source"].iloc[-1] if not graphs.empty else None,
                         weights["source"].iloc[-1] if not weights.empty else None,
                         not _before(df, seq, _POOL_SIGNALS, seg).empty)


def _settle_phase(phase: str, mm: str | None, served: bool, graphs: str | None, weights: str | None,
                  pool: bool) -> tuple[str, str]:
    """:func:`oom_phase`'s rules on what came before the OOM: the source of the last multimodal profiling line (any
    segment), whether its segment served, the sources of its last CUDA-graph and weights lines, whether it sized a
    pool (``None`` / ``False``: none)."""
    if phase in ("profile", "unknown") and mm is not None:
        return "encoder", f"after the multimodal profiling line {mm}"
    if phase != "unknown":
        return phase, ""
    if graphs is not None and not served:
        return "sampler", (f"after the CUDA-graph accounting {graphs} and before any request "
                           "was served: the sampler warm-up follows graph capture")
    if weights is not None and not pool and not served:
        return "profile", (f"after the weights loaded ({weights}) and before a KV pool was "
                           "sized: the profile run follows model loading")
    return phase, ""


def _oom_phase_rows(df: pd.DataFrame) -> list[tuple[dict, str, str]]:
    """Every ``cuda_oom`` row of ``df`` with its :func:`oom_phase` ``(phase, why)``, in one pass over the rows in
    ``seq`` order (the same answer as calling :func:`oom_phase` per OOM, linear in the rows, not quadratic)."""
    names = set(_MM_SIGNALS) | set(_SERVING_SIGNALS) | set(_POOL_SIGNALS) | {"cudagraph_bytes", "weights_bytes",
                                                                               "cuda_oom"}
    rows = df[df["signal"].isin(names)].sort_values("seq")
    mm: str | None = None
    served: set[int] = set()
    pool: set[int] = set()
    graphs: dict[int, str] = {}
    weights: dict[int, str] = {}
    out = []
    for row in rows.itertuples(index=False):
        sig, seg = row.signal, int(row.segment)
        if sig == "cuda_oom":
            out.append((row._asdict(), *_settle_phase(str(row.text or "unknown"), mm, seg in served, graphs.get(seg),
                                            weights.get(seg), seg in pool)))
        if sig in _MM_SIGNALS:
            mm = row.source
        if sig in _SERVING_SIGNALS:
            served.add(seg)
        if sig in _POOL_SIGNALS:
            pool.add(seg)
        if sig == "cudagraph_bytes":
            graphs[seg] = row.source
        if sig == "weights_bytes":
            weights[seg] = row.source
    return out


def activation_from_peak_torch(peak_torch: float, weights: float) -> float:
    """Activation peak of an M1 profile: ``peak_torch_memory − weights`` (bytes).

    Early 0.6.x ``worker.py`` measured ``peak_torch_memory`` as PyTorch's peak allocation during the profile run, with
    the weights already loaded, and sized the KV cache as ``total × utilization − peak_torch − non_torch`` (001:
    23.58 × 0.90 − 17.98 − 0.35 = 2.89 GiB, its ``kv_cache_size``). Raises ``ValueError`` if the weights exceed the
    peak (then the two lines are not of one start-up).
    """
    if weights > peak_torch:
        raise ValueError(f"weights {weights!r} above the peak torch memory {peak_torch!r}")
    return peak_torch - weights


def _split_peak_torch(bundle: Bundle) -> None:
    """``activation_peak_bytes`` from each M1 ``peak_torch_memory_bytes`` and the weights loaded before it in the
    same start-up (:func:`activation_from_peak_torch`); without a weights line it stays weights + activations."""
    if not bundle.has("peak_torch_memory_bytes"):
        return
    df = bundle.frame()
    for _, row in df[df["signal"] == "peak_torch_memory_bytes"].dropna(subset=["value"]).iterrows():
        w = _before(df, int(row["seq"]), ("weights_bytes",), int(row["segment"])).dropna(subset=["value"])
        if w.empty or float(w["value"].iloc[-1]) > float(row["value"]):
            continue
        wv = float(w["value"].iloc[-1])
        bundle.add("activation_peak_bytes", activation_from_peak_torch(float(row["value"]), wv),
                   f"derived: peak_torch_memory {float(row['value']) / 2**30:.2f} GiB ({row['source']}, weights + "
                   f"activations) − weights {wv / 2**30:.2f} GiB ({w['source'].iloc[-1]})",
                   t=None if pd.isna(row["t"]) else float(row["t"]), segment=int(row["segment"]))


def _oom_phases(bundle: Bundle) -> None:
    """``cuda_oom_phase``: every ``cuda_oom`` again, with the phase settled by :func:`oom_phase`; and
    ``oom_tried_bytes``, the same rows under the name of what their value is (the bytes the failed allocation asked
    for), so evidence reads "oom_tried_bytes (max) = 3.82 GiB", never a phase in GiB."""
    if not bundle.has("cuda_oom"):
        return
    for row, phase, why in _oom_phase_rows(bundle.frame()):
        src = row["source"] if not why else f"derived: OOM at {row['source']} {why}"
        bundle.add("cuda_oom_phase", row["value"], src, t=None if pd.isna(row["t"]) else float(row["t"]),
                   text=phase, segment=int(row["segment"]))
        bundle.add("oom_tried_bytes", row["value"], src, t=None if pd.isna(row["t"]) else float(row["t"]),
                   text=phase, segment=int(row["segment"]))


def _mm_worst_case(bundle: Bundle) -> None:
    """``mm_worst_case_tokens``: each multimodal profiling warning's value under the name of what it is (the tokens of
    the multimodal worst case per prompt), so evidence never reads "mm_profile_warning (max) = 180,224 tokens"."""
    for _, row in bundle.signal("mm_profile_warning").dropna(subset=["value"]).iterrows():
        bundle.add("mm_worst_case_tokens", float(row["value"]), str(row["source"]),
                   t=None if pd.isna(row["t"]) else float(row["t"]), segment=int(row["segment"]))


_FRAME_PHASE = re.compile(r" \[(\w+)\]$")


def _frames_name_another_step(rows: pd.DataFrame) -> bool:
    """Whether an ``exception`` row of ``rows`` (text ``TYPE in FUNC (FILE) [PHASE]``, the collector's reading of the
    traceback frames) names a phase other than the profile run: then the frames say which step died (e.g.
    ``capture_model`` → CUDA-graph capture) and the order of start-up steps must not claim the profile run."""
    for text in rows.loc[rows["signal"] == "exception", "text"]:
        m = _FRAME_PHASE.search(str(text or ""))
        if m and m.group(1) != "profile":
            return True
    return False


def _startup_crashes(bundle: Bundle) -> None:
    """``startup_crash`` (text ``after_weights_before_kv``): a traceback in a start-up segment that loaded its
    weights, sized no KV pool, served nothing and printed no failure kvdiag knows (no OOM text, no KV-capacity
    error). In every vLLM version the step after loading the weights is the profile run, so that is where it died.
    """
    if not bundle.has("python_traceback"):
        return
    df = bundle.frame()
    for seg, rows in df[df["signal"] == "python_traceback"].groupby("segment"):
        in_seg = df[df["segment"] == seg]
        first = rows.iloc[0]
        weights = _before(df, int(first["seq"]), ("weights_bytes",), int(seg))
        if weights.empty or in_seg["signal"].isin(_FAILURE_SIGNALS + _POOL_SIGNALS + _SERVING_SIGNALS).any():
            continue
        if _frames_name_another_step(in_seg):
            continue
        bundle.add("startup_crash", 1, f"derived: traceback at {first['source']} after the weights loaded "
                                       f"({weights['source'].iloc[-1]}), no KV pool sized, no OOM text",
                   text="after_weights_before_kv", segment=int(seg))


def _shares(bundle: Bundle) -> None:
    """Memory shares: other processes at the OOM, CUDA-graph estimate and activation peak vs the budget, and the
    hybrid-model check of the printed KV size against the concurrency line."""
    total = bundle.last("gpu_total_bytes")
    other = bundle.signal("oom_other_processes_bytes").dropna(subset=["value"])
    if total and total[0] > 0 and not other.empty:
        i = other["value"].idxmax()
        r = float(other.loc[i, "value"]) / total[0]
        src = f"{float(other.loc[i, 'value']) / 2**30:.2f} GiB ({other.loc[i, 'source']}) / GPU {total[0] / 2**30:.2f} GiB ({total[1]})"
        bundle.add("oom_other_processes_ratio", r, f"derived: {src}")
        bundle.add("other_processes_free_ratio", math.floor((1 - r - 0.05) * 100) / 100,
                   f"derived: 1 − {src} − 0.05 margin, rounded down")
    budget = bundle.last("gpu_budget_bytes")
    if budget is None:
        util = bundle.last("gpu_memory_utilization")
        if total and util and util[0] > 0:
            budget = (total[0] * util[0], f"GPU {total[0] / 2**30:.2f} GiB ({total[1]}) × {util[0]:.2f} ({util[1]})")
    if budget and budget[0] > 0:
        for sig, out in (("cudagraph_estimate_bytes", "cudagraph_estimate_ratio"),
                         ("activation_peak_bytes", "activation_peak_ratio")):
            v = bundle.last(sig)
            if v:
                bundle.add(out, v[0] / budget[0], f"derived: {v[0] / 2**30:.2f} GiB ({v[1]}) / budget "
                                                  f"{budget[0] / 2**30:.2f} GiB ({budget[1]})")
    size, conc, mml = (bundle.last(n) for n in ("kv_cache_size_tokens", "max_concurrency", "max_model_len"))
    if size and conc and mml and conc[0] > 0 and mml[0] > 0:
        tokens = conc[0] * mml[0]
        bundle.add("kv_tokens_from_concurrency", tokens,
                   f"derived: max concurrency {conc[0]:.2f}x ({conc[1]}) × max_model_len {mml[0]:,.0f} ({mml[1]})")
        bundle.add("kv_size_line_ratio", size[0] / tokens,
                   f"derived: KV cache size {size[0]:,.0f} tokens ({size[1]}) / {tokens:,.0f} tokens "
                   f"(concurrency {conc[1]})")
    util = bundle.last("gpu_memory_utilization")
    ooms = bundle.signal("cuda_oom").dropna(subset=["value"])
    free = bundle.last("oom_free_bytes")
    if util and total and total[0] > 0 and not ooms.empty and free:
        tried = float(ooms["value"].iloc[-1])
        need = util[0] - max(0.0, tried - free[0]) / total[0] - 0.01
        bundle.add("gpu_memory_utilization_for_oom", math.floor(need * 100) / 100,
                   f"derived: {util[0]:.2f} ({util[1]}) − (tried {tried / 2**30:.2f} GiB − free {free[0] / 2**30:.2f} "
                   f"GiB, {ooms['source'].iloc[-1]}) / GPU {total[0] / 2**30:.2f} GiB − 0.01, rounded down")
    if not ooms.empty and free and free[0] > 0:
        tried, tsrc = float(ooms["value"].iloc[-1]), ooms["source"].iloc[-1]
        if tried > 0:
            bundle.add("oom_free_to_tried_ratio", free[0] / tried,
                       f"derived: free {free[0] / 2**30:.2f} GiB / tried {tried / 2**30:.2f} GiB ({tsrc})")
        seqs = bundle.last("max_num_seqs")
        if seqs and seqs[0] >= 1 and tried > free[0]:
            bundle.add("max_num_seqs_for_oom", max(1, math.floor(seqs[0] * free[0] / tried)),
                       f"derived: max_num_seqs {seqs[0]:.0f} ({seqs[1]}) × free {free[0] / 2**30:.2f} GiB / tried "
                       f"{tried / 2**30:.2f} GiB ({tsrc}), rounded down")
        if total and total[0] > 0:
            drop = math.ceil(round((max(0.0, tried - free[0]) / total[0] + 0.01) * 100, 6)) / 100
            bundle.add("gpu_memory_utilization_drop_for_oom", drop,
                       f"derived: (tried {tried / 2**30:.2f} GiB − free {free[0] / 2**30:.2f} GiB, {tsrc}) / GPU "
                       f"{total[0] / 2**30:.2f} GiB ({total[1]}) + 0.01, rounded up")
    cfg = bundle.model_config or {}
    vocab = (cfg.get("text_config") or {}).get("vocab_size") or cfg.get("vocab_size")
    phases = bundle.signal("cuda_oom")
    if vocab and not phases.empty:
        row = phases.iloc[-1]
        bundle.add("sampler_warmup_rows", float(row["value"]) / (int(vocab) * 4),
                   f"derived: OOM {float(row['value']) / 2**20:,.0f} MiB ({row['source']}) / (vocab {int(vocab):,} × "
                   f"4 B) from {bundle.model_config_source}")


def utilization_for_tokens(util: float, kv_bytes: float, pool_tokens: float, need_tokens: float,
                           total_bytes: float) -> float:
    """gpu_memory_utilization whose KV memory holds ``need_tokens``, from a pool vLLM sized itself, rounded up to 0.01.

    The pool's own bytes per token (``kv_bytes / pool_tokens``) prices the missing tokens, and raising the
    utilization by ``Δ`` adds ``Δ × total_bytes`` to the KV memory (weights, activation peak and non-torch memory do
    not change with it): ``util + (need − pool) × kv_bytes / pool / total``. Raises ``ValueError`` for a pool,
    KV memory or GPU that is not positive.
    """
    if not (kv_bytes > 0 and pool_tokens > 0 and total_bytes > 0):
        raise ValueError("KV memory, pool tokens and GPU total must be positive")
    need = util + (need_tokens - pool_tokens) * (kv_bytes / pool_tokens) / total_bytes
    return math.ceil(round(need * 100, 6)) / 100


def _util_needed_from_log(bundle: Bundle) -> None:
    """``gpu_memory_utilization_needed`` without a model config: when vLLM refused a max_model_len larger than the pool
    it sized, the pool's own bytes per token give the utilization that holds one request
    (:func:`utilization_for_tokens`); the rows are those of the start-up that printed the pool."""
    if bundle.has("gpu_memory_utilization_needed"):
        return
    pools = bundle.signal("kv_cache_size_tokens").dropna(subset=["value"])
    pools = pools[pools["value"] > 0]
    if pools.empty:
        return
    seg = int(pools["segment"].iloc[-1])
    got = {}
    for name in ("kv_cache_memory_bytes", "max_model_len", "gpu_total_bytes", "gpu_memory_utilization"):
        rows = bundle.signal(name).dropna(subset=["value"])
        rows = rows[rows["segment"] == seg]
        if rows.empty:
            return
        got[name] = (float(rows["value"].iloc[-1]), str(rows["source"].iloc[-1]))
    pool = (float(pools["value"].iloc[-1]), str(pools["source"].iloc[-1]))
    kv, mml, total, util = (got[n] for n in ("kv_cache_memory_bytes", "max_model_len", "gpu_total_bytes",
                                               "gpu_memory_utilization"))
    if not (mml[0] > pool[0] and kv[0] > 0 and total[0] > 0):
        return
    u = utilization_for_tokens(util[0], kv[0], pool[0], mml[0], total[0])
    bundle.add("gpu_memory_utilization_needed", u,
               f"derived: {util[0]:.2f} ({util[1]}) + (max_model_len {mml[0]:,.0f} ({mml[1]}) − pool {pool[0]:,.0f} "
               f"tokens ({pool[1]})) × KV {kv[0] / 2**30:.2f} GiB ({kv[1]}) / {pool[0]:,.0f} tokens / GPU "
               f"{total[0] / 2**30:.2f} GiB ({total[1]}), rounded up", segment=seg,
               text="priced at the pool's own KV bytes per token")


def derive_pool(bundle: Bundle) -> None:
    """Add ``kv_capacity_tokens`` = last ``num_gpu_blocks`` (> 0) × last ``block_size`` (tokens) to ``bundle``."""
    blocks = bundle.signal("num_gpu_blocks")
    blocks = blocks[blocks["value"] > 0]
    bs = bundle.last("block_size")
    if not blocks.empty and bs:
        nb = float(blocks["value"].iloc[-1])
        bundle.add("kv_capacity_tokens", nb * bs[0],
                   f"derived: num_gpu_blocks {nb:,.0f} ({blocks['source'].iloc[-1]}) × block_size {bs[0]:.0f} ({bs[1]})")


def derive_memory(bundle: Bundle) -> None:
    """Add the capacity model's signals when a model config was given (:func:`kvdiag.derive.capacity.derive_capacity`:
    ``kv_bytes_per_token``, ``kv_capacity_tokens_from_config``, ...), then ``gpu_memory_utilization_needed`` from the
    log when the model gave none (:func:`_util_needed_from_log`)."""
    if bundle.model_config is not None:
        from .capacity import derive_capacity  # the capacity model's signals (kvdiag/capacity/)

        derive_capacity(bundle)
    _util_needed_from_log(bundle)


def derive_startup(bundle: Bundle) -> None:
    """Add the block and start-up facts to ``bundle`` (in place).

    Adds, when their inputs exist:

    * ``partial_block_waste_bound_tokens`` = max running × (block_size − 1) and its share of the
      pool, ``partial_block_waste_bound_ratio`` (reference §3.2: each sequence leaves at most
      ``block_size − 1`` empty slots in its last block);
    * the block overhead, the activation peak, the multimodal worst case, the OOM phases, start-up crashes and the
      memory shares an OOM's remedies quote.
    """
    bs = bundle.last("block_size")
    pool = bundle.last("kv_capacity_tokens") or bundle.last("kv_cache_size_tokens")
    running = bundle.signal("num_requests_running")
    running = running[running["value"].notna()]
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
    _split_peak_torch(bundle)
    _mm_worst_case(bundle)
    _oom_phases(bundle)
    _startup_crashes(bundle)
    _shares(bundle)


def derive_hit_rate_thirds(bundle: Bundle) -> None:
    """Add ``prefix_cache_hit_rate_early`` / ``_late`` / ``_drop`` over the window (:func:`_thirds_rate`)."""
    rates = _thirds_rate(bundle)
    if rates:
        early, late, src = rates
        bundle.add("prefix_cache_hit_rate_early", early, f"derived: first third of window, {src}")
        bundle.add("prefix_cache_hit_rate_late", late, f"derived: last third of window, {src}")
        if 0 <= early <= 1 and 0 <= late <= 1:  # else the two above were refused (hits above queries) and noted
            bundle.add("prefix_cache_hit_rate_drop", early - late, f"derived: early − late, {src}")
