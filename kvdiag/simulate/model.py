"""A fast model of vLLM V1's scheduler over the KV block pool, in simulated time.

What it reproduces, from vLLM 0.33.0's source (``vllm/v1/core/sched/scheduler.py`` ``Scheduler.schedule`` /
``update_from_output``, ``vllm/v1/core/kv_cache_manager.py`` ``KVCacheManager.allocate_slots`` /
``get_computed_blocks``, ``vllm/v1/core/block_pool.py`` ``BlockPool``), for one full-attention KV cache group
(decoder-only model, no speculative decoding, no KV connector, synchronous scheduling, FCFS policy):

* **Running first.** Each step walks ``running`` in order with the token budget ``max_num_batched_tokens``;
  a request gets ``num_tokens - num_computed_tokens`` tokens (its remaining prefill chunk, or 1 when decoding),
  capped by the budget (chunked prefill) and by ``max_model_len - num_computed_tokens - 1``.
* **Allocation on demand, recompute preemption.** ``allocate_slots`` needs ``cdiv(computed + new, block_size)
  - held`` blocks; if the free queue has fewer, the *last* running request is preempted (its blocks freed,
  ``num_computed_tokens`` reset to 0, put at the *front* of ``waiting``), repeatedly, until it fits or the
  request itself was the victim (then the running loop stops). A step that preempted admits nothing new.
* **Admission.** Then ``waiting`` is served in order while budget is left and ``len(running) < max_num_seqs``:
  prefix-cache lookup (full blocks only, at most ``(num_tokens - 1) // block_size`` of them, chained so the
  first miss ends the hit), the full-sequence fit check of ``scheduler_reserve_full_isl`` (default on in 0.33:
  ``cdiv(num_tokens) - hit blocks + hit blocks sitting in the free queue <= free blocks``), then the first chunk's
  allocation; the first request that does not fit stops admission (head-of-line, FCFS).
* **The block pool.** Free queue in vLLM's order: freed blocks of a request go back tail first
  (``reversed``); a freed block without a hash (or with caching off) is put at the *front* (LIFO reuse), one
  with a hash at the *back* (LRU); allocation pops from the front, evicting the popped block's hash; a prefix hit
  on a free block (``touch``) takes it out of the queue. Full blocks get a hash when their tokens are scheduled
  (``cache_blocks`` up to ``min(computed + new, num_tokens)``). Blocks inside the shared prefix of the same
  ``prefix_id`` have the same hash in every request; every other block (unique prompt part, generated tokens) is
  the request's own, so it can only be hit by that request again after a preemption (as in vLLM, where the
  recomputed request looks its own blocks up).
* **The usage gauge** ``1 - free / (num_gpu_blocks - 1)`` (``BlockPool.get_usage``; the null block is not
  counted); **prefix-cache stats** as ``PrefixCacheStats.record``: queries = prompt tokens, hits = hit tokens,
  counted at admission, requests admitted again after a preemption counted apart (not in the hit rate).
* **Output.** After each step every scheduled request whose prefill is complete gets one token; a request
  finishes at its planned output length, at ``max_tokens``, or at ``max_model_len`` tokens, and its blocks are
  freed before the next step. One extra empty step follows the step that finished the last request (vLLM's
  ``has_finished_requests``).

Time: the step duration is a parameter (:class:`StepCost`), the same formula the twin lab uses:
``overhead + max(weights_read, scheduled_tokens x compute_per_token) + context_tokens x kv_read_per_token``
(context = ``num_computed_tokens`` of the scheduled requests after the step), optionally with the lab's ±jitter
drawn from ``random.Random(seed)``. Requests reach the scheduler between steps, when their arrival time has passed;
an idle engine jumps to the next arrival.

Departures from vLLM (documented, not hidden): one KV cache group (no sliding window / hybrid models); FCFS only
(``--scheduling-policy priority`` is not modelled); no watermark (0.33's default 0.0); no speculative decoding,
async scheduling (one step of lookahead on CUDA: KV accounting differs by at most one token per running request),
KV connectors or LoRA limits; block identities are not kept, only what decides outcomes (free-queue order of
hashed blocks, reference counts).
"""

from __future__ import annotations

import math
import random
from collections import OrderedDict, deque
from dataclasses import asdict, dataclass, field
from typing import Sequence

from ..vllm_defaults import DEFAULT_BLOCK_SIZE, DEFAULT_MAX_NUM_BATCHED_TOKENS, DEFAULT_MAX_NUM_SEQS

__all__ = ["StepCost", "Setting", "Request", "SimResult", "simulate"]


MAX_BLOCKS = 1 << 22
"""Largest pool simulated: 4,194,304 blocks (67M tokens at block size 16, far above any GPU's pool; the model keeps
about 55 bytes per block, ~230 MB here)."""

@dataclass(frozen=True)
class StepCost:
    """Duration of one engine step (milliseconds): ``overhead_ms + max(weights_ms, tokens x compute_us_per_token
    / 1000) + context_tokens x kv_read_ns_per_token / 1e6``, times ``1 + jitter x U(-1, 1)`` drawn from
    ``random.Random(seed)`` when ``jitter > 0`` (the twin lab's ``StepCostModel``, its seed is the scenario's + 99)."""

    overhead_ms: float
    weights_ms: float
    compute_us_per_token: float
    kv_read_ns_per_token: float
    jitter: float = 0.0
    seed: int = 0


DEFAULT_MAX_MODEL_LEN = 32768
"""The simulator's ``max_model_len`` when neither the lab case nor an option gives one (vLLM takes the model's)."""


@dataclass(frozen=True)
class Setting:
    """One deployment setting to simulate (vLLM names): pool size in blocks (``num_gpu_blocks``, the null block
    included, as vLLM reports it), ``block_size`` in tokens, ``max_num_seqs``, ``max_num_batched_tokens``,
    ``enable_prefix_caching``, ``max_model_len`` in tokens."""

    num_gpu_blocks: int
    block_size: int = DEFAULT_BLOCK_SIZE
    max_num_seqs: int = DEFAULT_MAX_NUM_SEQS
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS
    enable_prefix_caching: bool = True
    max_model_len: int = DEFAULT_MAX_MODEL_LEN

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(slots=True)
class Request:
    """One request of the workload: ``arrival_s`` seconds after the start, ``prompt_tokens`` in total of which the
    first ``prefix_tokens`` are the shared prefix ``prefix_id`` (None: nothing shared), ``output_tokens`` the model
    generates before it stops, ``max_tokens`` the client's cap (None: no cap)."""

    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    prefix_id: int | None = None
    prefix_tokens: int = 0
    max_tokens: int | None = None
    id: int = 0


class _Req:
    __slots__ = ("idx", "arrival", "prompt", "target", "pid", "plen", "n_out", "computed", "blocks", "n_cached",
                 "preempts", "submitted", "scheduled", "finished_at", "running", "pfull", "kp", "ku")

    def __init__(self, idx: int, r: Request, max_model_len: int) -> None:
        self.idx = idx
        self.arrival = r.arrival_s
        self.prompt = r.prompt_tokens
        t = r.output_tokens if r.max_tokens is None else min(r.output_tokens, r.max_tokens)
        self.target = max(1, t)
        self.pid = r.prefix_id
        self.plen = r.prefix_tokens if r.prefix_id is not None else 0
        self.n_out = 0
        self.computed = 0
        self.blocks: list[int] = []
        self.n_cached = 0
        self.preempts = 0
        self.submitted = math.nan
        self.scheduled = math.nan
        self.finished_at = math.nan


@dataclass
class SimResult:
    """Outcome of one simulated run (units: seconds, tokens, ratios 0-1). Usage and waiting means are weighted by
    time over the run (idle time included), as the twin lab's truth measures them; ``*_peak`` and
    ``num_requests_waiting_max`` are read after every step."""

    setting: dict
    preemptions: int = 0
    kv_cache_usage_mean: float = 0.0
    kv_cache_usage_peak: float = 0.0
    num_requests_waiting_mean: float = 0.0
    num_requests_waiting_p50: float = 0.0
    num_requests_waiting_p95: float = 0.0
    num_requests_waiting_max: int = 0
    num_requests_running_mean: float = 0.0
    num_requests_running_max: int = 0
    queue_time_p50_s: float | None = None
    queue_time_p95_s: float | None = None
    queue_time_max_s: float | None = None
    prefix_cache_queries_tokens: int = 0
    prefix_cache_hits_tokens: int = 0
    prefix_cache_hit_rate: float | None = None
    prefix_cache_blocks_evicted: int = 0
    requests_submitted: int = 0
    requests_finished: int = 0
    requests_unfinished: int = 0
    requests_never_fit: int = 0
    engine_steps: int = 0
    simulated_seconds: float = 0.0
    generation_tokens: int = 0
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("extra")
        return d


class SimulationLimit(Exception):
    """The run would exceed ``max_steps`` engine steps."""


def _wpct(pairs: list[tuple[float, float]], q: float) -> float:
    """Time-weighted percentile of (value, weight) pairs."""
    tot = sum(w for _, w in pairs)
    if tot <= 0:
        return 0.0
    acc = 0.0
    for v, w in sorted(pairs):
        acc += w
        if acc >= q * tot:
            return float(v)
    return float(max(v for v, _ in pairs))


def _pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    return float(s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))])


def simulate(requests: Sequence[Request], setting: Setting, cost: StepCost, *, duration_s: float | None = None,
             start_s: float = 0.0, max_steps: int = 20_000_000, lab_ticks: Sequence[float] | None = None,
             window_s: float | None = None, fast_forward: bool = True,
             _trace: list | None = None) -> SimResult:
    """Run ``requests`` (sorted by ``arrival_s``) through the model under ``setting``; time starts at
    ``start_s`` (the absolute origin the arrivals are added to: the lab's ``serving_start_unix``, so its float
    arithmetic is the lab's); ``duration_s`` None runs until every request is done.

    ``lab_ticks`` (validation only): the twin lab's scrape and log times (absolute, sorted). The lab's truth
    integrates a step from the last such tick inside it (rendering a page moves its clock), so its time-weighted
    means leave out the part of each step before a tick; given the ticks, the means here are taken the same way.

    ``fast_forward`` (default on) advances stretches of decode-only steps in which nothing but block allocation can
    happen (every running request decoding, none finishing, admission impossible or nobody waiting and no
    arrival) in one pass per step instead of one per request; the outcome is the same as step by step.

    ``window_s``: also keep per-window sums (``extra["windows"]``: start, measured seconds, usage x seconds,
    waiting x seconds, preemptions), windows keyed by the start of each measured interval as in the lab's truth.

    Raises :class:`SimulationLimit` past ``max_steps`` engine steps."""
    bs = int(setting.block_size)
    nb = int(setting.num_gpu_blocks)
    total_usable = nb - 1
    caching = bool(setting.enable_prefix_caching)
    max_seqs = int(setting.max_num_seqs)
    budget0 = int(setting.max_num_batched_tokens)
    mml = int(setting.max_model_len)
    oh, wms = cost.overhead_ms, cost.weights_ms
    cpt = cost.compute_us_per_token / 1000.0
    kvr = cost.kv_read_ns_per_token / 1e6
    jit = cost.jitter
    rng = random.Random(cost.seed)

    # ---- block pool: refcounts, hashes, free queue = [unhashed (stack, top = front)] + [hashed, LRU order]
    ref = [0] * nb
    bhash: list = [None] * nb
    free_plain: list[int] = list(range(nb - 1, 0, -1))  # pop() -> 1, 2, 3 ... (block 0 is the null block)
    free_hashed: OrderedDict[int, None] = OrderedDict()
    # hash -> block id, or [block ids] when several blocks hold it (first inserted first, as
    # BlockHashToBlockMap.get_one_block). Hashes are ints: block j of shared prefix p is -((p + 1) << 32) - j (the same
    # in every request), block j of request i's own tokens (i + 1) << 32 + j.
    cached: dict = {}
    evicted = 0

    def key(r: _Req, j: int) -> int:
        return r.kp - j if j < r.pfull else r.ku + j

    def lookup(h: int):
        v = cached.get(h)
        if v is None or v.__class__ is int:
            return v
        return v[0]

    def pop_blocks(n: int, out: list[int]) -> None:
        nonlocal evicted
        k = n if n <= len(free_plain) else len(free_plain)
        if k:
            seg = free_plain[-k:]
            del free_plain[-k:]
            seg.reverse()
            for b in seg:
                ref[b] = 1
            out.extend(seg)
        for _ in range(n - k):
            b, _ = free_hashed.popitem(last=False)
            h = bhash[b]
            v = cached[h]
            if v.__class__ is int:
                del cached[h]
            else:
                v.remove(b)
                if len(v) == 1:
                    cached[h] = v[0]
            bhash[b] = None
            evicted += 1
            ref[b] = 1
            out.append(b)

    def free_req(r: _Req) -> None:
        front = []
        for b in reversed(r.blocks):
            c = ref[b] - 1
            ref[b] = c
            if c == 0:
                if bhash[b] is None or not caching:
                    front.append(b)
                else:
                    free_hashed[b] = None
        if front:
            free_plain.extend(reversed(front))
        r.blocks = []
        r.n_cached = 0

    def cache_upto(r: _Req, ntok: int) -> None:
        n_full = ntok // bs
        j0 = r.n_cached
        if n_full <= j0:
            return
        blocks = r.blocks
        cut = r.pfull if r.pfull < n_full else n_full
        for base, lo, hi, sign in ((r.kp, j0, cut, -1), (r.ku, cut if cut > j0 else j0, n_full, 1)):
            for j in range(lo, hi):
                b = blocks[j]
                h = base + sign * j
                bhash[b] = h
                v = cached.get(h)
                if v is None:
                    cached[h] = b
                elif v.__class__ is int:
                    cached[h] = [v, b]
                else:
                    v.append(b)
        r.n_cached = n_full

    reqs = [_Req(i, r, mml) for i, r in enumerate(requests)]
    n_req = len(reqs)
    for r in reqs:
        r.pfull = r.plen // bs if r.pid is not None else 0
        r.kp = -((r.pid + 1) << 32) if r.pid is not None else 0
        r.ku = (r.idx + 1) << 32
    waiting: deque[_Req] = deque()
    running: list[_Req] = []
    now = float(start_s)
    end_t = math.inf if duration_s is None else start_s + float(duration_s)
    pend = 0
    finished_flag = False  # vLLM's finished_req_ids: one more (empty) step after a finish

    res = SimResult(setting=setting.to_dict())
    usage_time = wait_time = run_time = total_time = 0.0
    wait_pairs: dict[int, float] = {}
    peak = 0.0
    wait_max = run_max = 0
    steps = 0
    preempt = 0
    q_tok = h_tok = 0
    gen = 0
    finished = 0
    queue_times: list[float] = []
    never_fit = set()
    ticks = list(lab_ticks or ())
    ti = 0
    n_ticks = len(ticks)
    sim_time = 0.0
    wins: dict[int, list[float]] = {}

    def head_blocked(r: _Req) -> bool:
        """Whether the head of ``waiting`` fails vLLM's admission checks now (prefix lookup, full-sequence fit,
        first chunk); with blocks only being taken (no frees) it keeps failing."""
        ntok = r.prompt + r.n_out
        nh = evictable = 0
        if caching:
            lim = (ntok - 1) // bs
            while nh < lim:
                b = lookup(key(r, nh))
                if b is None:
                    break
                if ref[b] == 0:
                    evictable += 1
                nh += 1
        nfree = len(free_plain) + len(free_hashed)
        full_tok = ntok if ntok < mml else mml
        return -(-full_tok // bs) - nh + evictable > nfree

    def _ff() -> int:
        """Fast-forward decode-only steps (see ``fast_forward``); returns how many were taken (0: none)."""
        nonlocal now, steps, usage_time, wait_time, run_time, total_time, sim_time, ti, peak, wait_max, run_max
        nonlocal gen, pend, finished_flag, running, finished
        R = len(running)
        mrem = 1 << 62
        maxc = 0
        for r in running:
            c = r.computed
            if c != r.prompt + r.n_out - 1:
                return 0
            x = r.target - r.n_out
            if x < mrem:
                mrem = x
            if c > maxc:
                maxc = c
        fin_step = mrem - 1  # the step in which the first requests finish (the window's last: admission waits)
        if mml - 3 - maxc < mrem:
            mrem = mml - 3 - maxc
            fin_step = -1
        if mrem < 3:
            return 0
        has_wait = bool(waiting)
        if has_wait and R < max_seqs and R < budget0 and not head_blocked(waiting[0]):
            return 0
        cnt = [0] * bs
        c0 = 0
        for r in running:
            cnt[r.computed % bs] += 1
            c0 += r.computed
        free_now = len(free_plain) + len(free_hashed)
        used0 = total_usable - free_now
        alloc = 0
        m = 0
        ntoks = R
        tok_ms = max(wms, ntoks * cpt)
        while m < mrem and now < end_t:
            if pend < n_req and start_s + reqs[pend].arrival <= now:
                if not has_wait:
                    break
                while pend < n_req and start_s + reqs[pend].arrival <= now:
                    r = reqs[pend]
                    pend += 1
                    r.submitted = now
                    waiting.append(r)
            a = cnt[(-m) % bs]
            if alloc + a > free_now:
                break
            steps += 1
            if steps > max_steps:
                raise SimulationLimit(f"more than {max_steps:,} engine steps")
            alloc += a
            ms = oh + tok_ms + (c0 + R * (m + 1)) * kvr
            if jit:
                t_end = now + ms / 1000.0 * (1.0 + jit * (2 * rng.random() - 1))
            else:
                t_end = now + ms / 1000.0
            sim_time += t_end - now
            s0 = now
            while ti < n_ticks and ticks[ti] < t_end:
                if ticks[ti] > s0:
                    s0 = ticks[ti]
                ti += 1
            dt = t_end - s0
            used = used0 + alloc
            if _trace is not None:
                _trace.append((ntoks, R, used, 0, R, len(waiting)))
            u = used / total_usable if total_usable else 0.0
            usage_time += u * dt
            nw = len(waiting)
            wait_time += nw * dt
            if window_s:
                w = wins.setdefault(int((s0 - start_s) // window_s), [0.0, 0.0, 0.0, 0])
                w[0] += dt
                w[1] += u * dt
                w[2] += nw * dt
            run_time += R * dt
            wait_pairs[nw] = wait_pairs.get(nw, 0.0) + dt
            total_time += dt
            now = t_end
            if m != fin_step:  # (after the finishing step: once its requests are freed, below)
                if u > peak:
                    peak = u
                if nw > wait_max:
                    wait_max = nw
            m += 1
        if not m:
            return 0
        finished_flag = False
        if R > run_max:
            run_max = R
        gen += R * m
        for r in running:
            c = r.computed + m
            r.computed = c
            r.n_out += m
            need = -(-c // bs) - len(r.blocks)
            if need > 0:
                pop_blocks(need, r.blocks)
            if caching and c // bs > r.n_cached:
                cache_upto(r, c)
        if m - 1 == fin_step:  # update_from_output of the last step: the finished requests free their blocks
            done = [r for r in running if r.n_out >= r.target]
            for r in done:
                free_req(r)
                r.finished_at = now
            finished += len(done)
            running = [r for r in running if r.n_out < r.target]
            finished_flag = True
            u = (total_usable - len(free_plain) - len(free_hashed)) / total_usable if total_usable else 0.0
            if u > peak:
                peak = u
            if len(waiting) > wait_max:
                wait_max = len(waiting)
        return m

    while now < end_t:
        while pend < n_req and start_s + reqs[pend].arrival <= now:
            r = reqs[pend]
            pend += 1
            r.submitted = now
            waiting.append(r)
        if fast_forward and running and len(running) <= budget0:
            m = _ff()
            if m:
                continue
        if running or waiting or finished_flag:
            finished_flag = False
            steps += 1
            if steps > max_steps:
                raise SimulationLimit(f"more than {max_steps:,} engine steps")
            budget = budget0
            sched: list[tuple[_Req, int]] = []
            n_pre = 0
            i = 0
            # ---------------- running requests
            while i < len(running) and budget > 0:
                r = running[i]
                comp = r.computed
                new = r.prompt + r.n_out - comp
                if new > budget:
                    new = budget
                if new > mml - comp - 1:
                    new = mml - comp - 1
                if new <= 0:
                    i += 1
                    continue
                end = comp + new
                need = -(-end // bs) - len(r.blocks)
                if need > 0:
                    ok = True
                    while need > len(free_plain) + len(free_hashed):
                        victim = running.pop()
                        free_req(victim)
                        victim.computed = 0
                        victim.preempts += 1
                        waiting.appendleft(victim)
                        n_pre += 1
                        if victim is r:
                            ok = False
                            break
                    if not ok:
                        break
                    pop_blocks(need, r.blocks)
                if caching and end // bs > r.n_cached:  # end <= num_tokens: cache_blocks' cap holds
                    cache_upto(r, end)
                sched.append((r, new))
                budget -= new
                i += 1
            # ---------------- waiting requests (only when nobody was preempted)
            if not n_pre:
                while budget > 0 and waiting and len(running) < max_seqs:
                    r = waiting[0]
                    ntok = r.prompt + r.n_out
                    hits: list[int] = []
                    if caching:
                        lim = (ntok - 1) // bs
                        j = 0
                        while j < lim:
                            b = lookup(key(r, j))
                            if b is None:
                                break
                            hits.append(b)
                            j += 1
                    nh = len(hits)
                    evictable = 0
                    for b in hits:
                        if ref[b] == 0:
                            evictable += 1
                    nfree = len(free_plain) + len(free_hashed)
                    full_tok = ntok if ntok < mml else mml
                    if -(-full_tok // bs) - nh + evictable > nfree:
                        if -(-full_tok // bs) > total_usable:
                            never_fit.add(r.idx)
                        break
                    comp = nh * bs
                    new = ntok - comp
                    if new > budget:
                        new = budget
                    slots = comp + new
                    if slots > mml:
                        slots = mml
                    need = -(-slots // bs) - nh
                    if need + evictable > nfree:
                        break
                    waiting.popleft()
                    for b in hits:
                        if ref[b] == 0:
                            del free_hashed[b]
                        ref[b] += 1
                    r.blocks = hits
                    r.n_cached = nh
                    if need > 0:
                        pop_blocks(need, r.blocks)
                    if caching:
                        cache_upto(r, min(comp + new, ntok))
                        if r.preempts == 0:
                            q_tok += ntok
                            h_tok += comp
                    r.computed = comp
                    if math.isnan(r.scheduled):
                        r.scheduled = now
                        queue_times.append(now - r.submitted)
                    running.append(r)
                    sched.append((r, new))
                    budget -= new
            preempt += n_pre
            # ---------------- _update_after_schedule; the output (one token per request whose prefill is complete)
            ntoks = 0
            ctx = 0
            done = None
            for r, n in sched:
                c = r.computed + n
                r.computed = c
                ntoks += n
                ctx += c
                nt = r.prompt + r.n_out
                if c >= nt:
                    r.n_out += 1
                    gen += 1
                    if r.n_out >= r.target or nt + 1 >= mml:
                        if done is None:
                            done = []
                        done.append(r)
            ms = oh + max(wms, ntoks * cpt) + ctx * kvr
            if jit:  # the lab's float order: ms / 1000 * (1 + jitter * (2u - 1))
                t_end = now + ms / 1000.0 * (1.0 + jit * (2 * rng.random() - 1))
            else:
                t_end = now + ms / 1000.0
            sim_time += t_end - now
            s0 = now
            while ti < n_ticks and ticks[ti] < t_end:
                if ticks[ti] > s0:
                    s0 = ticks[ti]
                ti += 1
            dt = t_end - s0
            used = total_usable - len(free_plain) - len(free_hashed)
            if _trace is not None:
                _trace.append((ntoks, len(sched), used, n_pre, len(running), len(waiting)))
            u = used / total_usable if total_usable else 0.0
            usage_time += u * dt
            nw = len(waiting)
            wait_time += nw * dt
            if window_s:
                w = wins.setdefault(int((s0 - start_s) // window_s), [0.0, 0.0, 0.0, 0])
                w[0] += dt
                w[1] += u * dt
                w[2] += nw * dt
                w[3] += n_pre
            run_time += len(running) * dt
            wait_pairs[nw] = wait_pairs.get(nw, 0.0) + dt
            total_time += dt
            now = t_end
            # ---------------- update_from_output: finished requests free their blocks
            if done:
                for r in done:
                    free_req(r)
                    r.finished_at = now
                    finished += 1
                ds = set(id(r) for r in done)
                running = [r for r in running if id(r) not in ds]
                finished_flag = True
            if not running and not done and not ntoks and pend >= n_req and end_t == math.inf:
                break  # drain mode: only requests that can never fit are left; nothing can change any more
            used = total_usable - len(free_plain) - len(free_hashed)
            u = used / total_usable if total_usable else 0.0
            if u > peak:
                peak = u
            nw = len(waiting)
            if nw > wait_max:
                wait_max = nw
            if len(running) > run_max:
                run_max = len(running)
        else:
            t_end = start_s + reqs[pend].arrival if pend < n_req else end_t
            if t_end == math.inf:
                break
            t_end = max(t_end, now + 1e-6)
            t_end = min(t_end, end_t)
            sim_time += t_end - now
            s0 = now
            while ti < n_ticks and ticks[ti] < t_end:
                if ticks[ti] > s0:
                    s0 = ticks[ti]
                ti += 1
            dt = t_end - s0
            if window_s:
                wins.setdefault(int((s0 - start_s) // window_s), [0.0, 0.0, 0.0, 0])[0] += dt
            wait_pairs[0] = wait_pairs.get(0, 0.0) + dt
            total_time += dt
            now = t_end

    res.preemptions = preempt
    res.kv_cache_usage_mean = usage_time / total_time if total_time else 0.0
    res.kv_cache_usage_peak = peak
    res.num_requests_waiting_mean = wait_time / total_time if total_time else 0.0
    pairs = list(wait_pairs.items())
    res.num_requests_waiting_p50 = _wpct(pairs, 0.5)
    res.num_requests_waiting_p95 = _wpct(pairs, 0.95)
    # (the max is at least every level the queue held for some time: a run that ends in the drain break holds its
    # last queue without a step to read it)
    res.num_requests_waiting_max = max([wait_max] + [k for k, v in wait_pairs.items() if v > 0])
    res.num_requests_running_mean = run_time / total_time if total_time else 0.0
    res.num_requests_running_max = run_max
    res.queue_time_p50_s = _pct(queue_times, 0.5)
    res.queue_time_p95_s = _pct(queue_times, 0.95)
    res.queue_time_max_s = max(queue_times) if queue_times else None
    res.prefix_cache_queries_tokens = q_tok
    res.prefix_cache_hits_tokens = h_tok
    res.prefix_cache_hit_rate = (h_tok / q_tok) if (caching and q_tok) else None
    res.prefix_cache_blocks_evicted = evicted
    res.requests_submitted = pend
    res.requests_finished = finished
    res.requests_unfinished = pend - finished
    # a request whose whole sequence (prompt + output but the last token, which is sampled and never cached) needs more
    # blocks than the pool has can never finish there, even when its prompt was admitted: it decodes until the pool is
    # full, is preempted and comes back (vLLM livelocks on it the same way); it counts as never fitting
    for r in reqs[:pend]:
        if r.finished_at != r.finished_at and -(-min(r.prompt + r.target - 1, mml) // bs) > total_usable:
            never_fit.add(r.idx)
    res.requests_never_fit = len(never_fit)
    res.engine_steps = steps
    res.simulated_seconds = sim_time
    res.generation_tokens = gen
    if window_s:
        res.extra["windows"] = [[k * window_s] + v for k, v in sorted(wins.items())]
    return res
