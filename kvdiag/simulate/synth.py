"""A workload synthesised from what vLLM's /metrics pages observed (``kvdiag simulate --from-metrics DIR``).

Input: a folder of saved pages of one server, ``metrics/NNNN.prom`` (or ``*.prom``) with ``times.csv``
(``sample,unix_time``), as ``fixtures/series/`` and the twin lab store them (text format 0.0.4, vLLM V1 names).

The synthesis (documented, seeded, so that a run is repeatable):

* **Arrivals**: between two pages, ``Δ vllm:request_success_total`` (all finish reasons) ``+ Δ(num_requests_running
  + num_requests_waiting)`` requests arrived (what finished, plus what the server holds more of); before the first
  page, what it holds and had finished then. Each interval's count is spread uniformly over the interval
  (a Poisson process at the observed rate, per interval).
* **Lengths**: prompt and output lengths drawn from the window's ``vllm:request_prompt_tokens`` and
  ``vllm:request_generation_tokens`` histograms (a bucket by its share, then log-uniform inside it), then scaled so
  their mean is the histogram's ``_sum / _count``. Prompt and output are drawn independently.
* **Prefix sharing**: with an observed hit rate ``h = Δ prefix_cache_hits / Δ prefix_cache_queries`` > 0, every
  request shares its first ``h x prompt_tokens`` tokens (rounded up to a block) with the others (one prefix id):
  the simplest workload with that hit rate when the cache keeps the prefix.
* **Setting**: ``num_gpu_blocks``, ``block_size``, ``enable_prefix_caching`` from ``vllm:cache_config_info``.

What it cannot know: the arrival pattern inside a scrape interval, the correlation of prompt and output length,
how many distinct prefixes there were, ``max_num_seqs`` / ``max_num_batched_tokens`` (not on the page: give them).
"""

from __future__ import annotations

import math
import random
from pathlib import Path

from ..errors import InputError
from ..vllm_defaults import DEFAULT_BLOCK_SIZE, MAX_BLOCK_SIZE
from .model import Request

MAX_PAGES = 100_000


def _read_page(path: Path) -> dict:
    """The sums the synthesis needs from one saved page, read through the input layer
    (:func:`kvdiag.inputs.samples.samples`: a value that is no finite number and a bucket whose ``le`` is no number
    are left out, never a ValueError)."""
    from ..inputs.samples import samples

    out: dict = {"buckets": {}, "info": None}
    for n, labels, v, le in samples(str(path)):
        if n == "vllm:cache_config_info":
            if out["info"] is None:
                out["info"] = labels
            continue
        if v is None:
            continue
        if n in ("vllm:request_success_total", "vllm:num_requests_running", "vllm:num_requests_waiting",
                 "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
                 "vllm:request_prompt_tokens_sum", "vllm:request_prompt_tokens_count",
                 "vllm:request_generation_tokens_sum", "vllm:request_generation_tokens_count"):
            out[n] = out.get(n, 0.0) + v
        elif n in ("vllm:request_prompt_tokens_bucket", "vllm:request_generation_tokens_bucket"):
            if le is None:
                continue
            d = out["buckets"].setdefault(n, {})
            d[le] = d.get(le, 0.0) + v
    return out


def _pages(folder: str) -> list[tuple[float, Path]]:
    from .workload import times_csv

    d = Path(folder)
    tp = d / "times.csv"
    mdir = d / "metrics" if (d / "metrics").is_dir() else d
    files = sorted(mdir.glob("*.prom"))
    if not files or not tp.is_file():
        raise InputError(f"{folder}: expected saved /metrics pages (metrics/NNNN.prom) and times.csv "
                         "(sample,unix_time)")
    if len(files) > MAX_PAGES:
        raise InputError(f"{folder}: {len(files):,} pages: expected at most {MAX_PAGES:,}")
    times = dict(times_csv(str(tp)))
    out = []
    for p in files:
        try:
            k = int(p.stem) if len(p.stem) <= 12 else -1
        except ValueError:
            k = -1
        if k < 0:
            raise InputError(f"{p}: expected pages named by their sample number (NNNN.prom)")
        if k not in times:
            raise InputError(f"{p}: sample {k} is not in {tp}")
        out.append((times[k], p))
    out.sort()
    return out


def _draw(rng: random.Random, first: dict, last: dict, name: str, n: int, mean: float | None) -> list[int]:
    b1, b0 = last["buckets"].get(name, {}), first["buckets"].get(name, {})
    les = sorted(b1)
    counts, lo = [], 0.0
    prev = 0.0
    for le in les:
        c = b1[le] - b0.get(le, 0.0)
        counts.append((lo, le, max(0.0, c - prev)))
        prev = max(prev, c)
        lo = le
    tot = sum(c for *_, c in counts)
    if tot <= 0 or n <= 0:
        return []
    xs = []
    for _ in range(n):
        u, acc = rng.random() * tot, 0.0
        for lo, hi, c in counts:
            acc += c
            if u <= acc and c > 0:
                break
        hi = hi if math.isfinite(hi) else lo * 2
        a, b = max(1.0, lo), max(1.0, hi)
        xs.append(math.exp(rng.uniform(math.log(a), math.log(b))) if b > a else a)
    if mean and xs:
        k = mean / (sum(xs) / len(xs))
        xs = [x * k for x in xs]
    return [max(1, int(round(x))) for x in xs]


def synthesize(folder: str, seed: int = 0) -> dict:
    """Pages + times.csv → ``{"requests", "facts", "start_s", "duration_s", "hit_rate", "about"}`` (see the module
    docstring). Raises :class:`InputError`."""
    pages = _pages(folder)
    rng = random.Random(seed)
    parsed = [(t, _read_page(p)) for t, p in pages]
    first_t, first = parsed[0]
    last_t, last = parsed[-1]
    if "vllm:request_success_total" not in last:
        raise InputError(f"{pages[-1][1]}: no vllm:request_success_total: expected vLLM V1 /metrics pages")
    step = (parsed[1][0] - first_t) if len(parsed) > 1 else 15.0
    origin = first_t - step

    def held(pg):
        return pg.get("vllm:num_requests_running", 0.0) + pg.get("vllm:num_requests_waiting", 0.0)

    arrivals: list[float] = []
    prev_t, prev = origin, None
    carry = 0.0
    for t, pg in parsed:
        if prev is None:
            n = pg.get("vllm:request_success_total", 0.0) + held(pg)
        else:
            n = (pg.get("vllm:request_success_total", 0.0) - prev.get("vllm:request_success_total", 0.0)
                 + held(pg) - held(prev))
        n = max(0.0, n) + carry
        k = int(n)
        carry = n - k
        arrivals += sorted(rng.uniform(prev_t, t) for _ in range(k))
        prev_t, prev = t, pg
    n = len(arrivals)
    cnt = lambda pg, m: pg.get(m + "_count", 0.0)  # noqa: E731
    sm = lambda pg, m: pg.get(m + "_sum", 0.0)  # noqa: E731
    pm, gm = "vllm:request_prompt_tokens", "vllm:request_generation_tokens"
    pmean = sm(last, pm) / max(1.0, cnt(last, pm))
    gmean = sm(last, gm) / max(1.0, cnt(last, gm))
    prompts = _draw(rng, {"buckets": {}}, last, pm + "_bucket", n, sm(last, pm) / cnt(last, pm) if cnt(last, pm) else None)
    outs = _draw(rng, {"buckets": {}}, last, gm + "_bucket", n, gmean if cnt(last, gm) else None)
    if n and (not prompts or not outs):
        raise InputError(f"{folder}: no finished request in the length histograms: cannot synthesise lengths "
                         "(expected vllm:request_prompt_tokens / request_generation_tokens buckets)")
    info = last["info"] or {}
    facts = {}
    from ..numbers import finite_float

    for k, hi in (("num_gpu_blocks", 1 << 40), ("block_size", MAX_BLOCK_SIZE)):
        x = finite_float(info.get(k), 1, hi)
        if x is not None:
            facts[k] = int(x)
    if "enable_prefix_caching" in info:
        facts["enable_prefix_caching"] = str(info["enable_prefix_caching"]).lower() == "true"
    q = last.get("vllm:prefix_cache_queries_total", 0.0)  # counters since the server started
    h = last.get("vllm:prefix_cache_hits_total", 0.0) / q if q else 0.0
    bs = facts.get("block_size", DEFAULT_BLOCK_SIZE)
    reqs = []
    for i, a in enumerate(arrivals):
        p = prompts[i]
        plen = min(p, int(math.ceil(h * p / bs)) * bs) if h > 0 else 0
        reqs.append(Request(arrival_s=a - origin, prompt_tokens=p, output_tokens=outs[i],
                            prefix_id=0 if plen else None, prefix_tokens=plen, id=i))
    return {"requests": reqs, "facts": facts, "start_s": 0.0, "duration_s": last_t - origin, "hit_rate": h,
            "about": f"synthesised from {len(parsed)} pages: {n} arrivals, prompt mean {pmean:.0f}, output mean "
                     f"{gmean:.0f} tokens, prefix hit rate {h:.1%} (see kvdiag/simulate/synth.py)"}


def fit_step_cost(folder: str) -> tuple["StepCost", str]:
    """The step time fitted from the pages: for each scrape interval in which the engine was busy (requests running
    at both ends, at least 10 steps), the mean step time ``Δt / Δ vllm:iteration_tokens_total_count`` against the
    mean tokens per step (``Δ _sum / Δ _count``) and the context held (mean ``kv_cache_usage_perc`` x pool tokens);
    a least-squares line ``T = overhead + tokens x compute + context x kv_read`` (weights_ms 0: the max() of the lab's
    formula is not identifiable from means). Raises :class:`InputError` with fewer than 3 usable intervals.

    On the two shared series it finds 12.6 ms + 89 us/token + 50 ns/context token (the lab's constants: 3 + 10 ms,
    84 us, 80 ns) and 49.0 ms + 185 us + 476 ns (4 + 45 ms, 230 us, 500 ns)."""
    import numpy as np

    from .model import StepCost

    pages = _pages(folder)
    rows = []
    from ..inputs.samples import samples
    from ..numbers import finite_float

    for t, p in pages:
        v: dict = {}
        for n, labels, value, _le in samples(str(p)):
            if n in ("vllm:iteration_tokens_total_count", "vllm:iteration_tokens_total_sum",
                     "vllm:kv_cache_usage_perc", "vllm:num_requests_running"):
                if value is not None:
                    v[n] = v.get(n, 0.0) + value
            elif n == "vllm:cache_config_info" and "pool" not in v:
                blocks = finite_float(labels.get("num_gpu_blocks"), 1, 1 << 40)
                size = finite_float(labels.get("block_size"), 1, MAX_BLOCK_SIZE)
                if blocks is not None and size is not None:
                    v["pool"] = (int(blocks) - 1) * int(size)
        rows.append((t, v))
    X, Y = [], []
    for (t0, a), (t1, b) in zip(rows, rows[1:]):
        keys = ("vllm:iteration_tokens_total_count", "vllm:iteration_tokens_total_sum", "vllm:kv_cache_usage_perc",
                "vllm:num_requests_running", "pool")
        if not all(k in a and k in b for k in keys):
            continue
        steps = b[keys[0]] - a[keys[0]]
        if steps < 10 or a[keys[3]] < 1 or b[keys[3]] < 1 or t1 <= t0:
            continue
        ctx = (a[keys[2]] + b[keys[2]]) / 2 * b["pool"]
        X.append([1.0, (b[keys[1]] - a[keys[1]]) / steps, ctx])
        Y.append((t1 - t0) / steps * 1000.0)
    if len(Y) < 3:
        raise InputError(f"{folder}: {len(Y)} busy scrape interval(s) with vllm:iteration_tokens_total: cannot fit "
                         "the step time (expected 3 or more); give --step-cost")
    coef, *_ = np.linalg.lstsq(np.array(X), np.array(Y), rcond=None)
    a, c, k = (max(0.0, float(x)) for x in coef)
    cost = StepCost(overhead_ms=round(a, 3), weights_ms=0.0, compute_us_per_token=round(c * 1000.0, 3),
                    kv_read_ns_per_token=round(k * 1e6, 3))
    return cost, (f"step time fitted on {len(Y)} busy scrape intervals: {cost.overhead_ms:g} ms + "
                  f"{cost.compute_us_per_token:g} us x tokens + {cost.kv_read_ns_per_token:g} ns x context tokens")
