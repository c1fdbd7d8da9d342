#!/usr/bin/env python3
"""Write the lab sweep's scenario table: families of KV-cache incidents and their look-alikes.

Run by hand (no kvdiag import; PyYAML only):

    python benchmarks/lab/families.py --out benchmarks/lab/families.yaml [--per-family-scale 1.0]

The table is read by the twin lab (``shared/twin/twin.py --scenarios benchmarks/lab/families.yaml``), which
drives vLLM 0.33.0's own scheduler and block pool. Each scenario's ``description`` starts with
``family=<name>;`` and, for the look-alikes, contains ``look-alike``; ``truth_class`` is the class the family
*aims* at. The class a case is judged against is not that intent but what the simulation measured, decided by
``labeller.label(truth)`` (benchmarks/lab/labeller.py): a scenario that aimed at "fits, high usage" and
preempted anyway is capacity pressure.

Families (pools are sized in tokens; ``kv_cache_gib`` = tokens x bytes per token of the model):

- ``ramp``: open-loop rate ramping from ~30% to ~1.3-1.6x the pool over the run (crossing it 55-70% of the way);
  long prompts. Pressure, and the forecast's test bed (usage climbs for minutes before the first preemption).
- ``overload``: a steady open-loop rate above what the pool holds.
- ``closed_over``: a closed loop of more clients than the pool holds.
- ``waste_bigblock``: block size 128/256, short sequences (well under a block), many clients: the pool fills
  with mostly empty blocks and requests wait.
- ``evict_growing_set``: shared prefixes whose active set grows past the free pool part-way: the LRU free queue
  recycles them at moderate usage.
- ``evict_load``: a fixed prefix set that fits while the load is low; a heavier phase leaves too few free
  blocks to keep it.
- ``healthy_quiet``: moderate load, roomy pool, prefixes reused.
- ``evict_flatten``: a fixed prefix set 3-6x the pool whose Zipf popularity flattens part-way (a traffic-mix
  change): the hot few fitted, the flat set does not.
- look-alikes (intended healthy): ``look_fits_high`` (closed loop holding usage high without running out),
  ``look_burst`` (short arrival bursts queue on the prefill budget, roomy pool), ``look_max_num_seqs`` (a
  low --max-num-seqs queues requests with the pool half empty), ``look_no_reuse`` (no shared prefixes at all:
  hit rate 0 from the start, usage up to high), ``look_new_traffic`` (a second tenant without shared prefixes
  joins: the hit rate falls but hits per second do not; the pool keeps the prefixes), ``look_bigblock_long``
  (block size 128/256 with long sequences: blocks fill).
"""

from __future__ import annotations

import argparse
import random

import yaml

MODELS = {  # model id -> (KV bytes per token in bf16, layers x kv heads x head dim x 2 x 2)
    "Qwen/Qwen2.5-7B-Instruct": 57344,
    "meta-llama/Llama-3.1-8B-Instruct": 131072,
    "mistralai/Mistral-7B-Instruct-v0.3": 131072,
    "Qwen/Qwen2.5-14B-Instruct": 196608,
}
GPUS = [  # name, default max_num_seqs, default max_num_batched_tokens (vLLM's table for that class)
    ("NVIDIA A10G 24GB", 256, 2048),
    ("NVIDIA L4 24GB", 256, 2048),
    ("NVIDIA A100-SXM4-40GB", 256, 2048),
    ("NVIDIA H100 80GB HBM3", 1024, 8192),
]
DEFAULTS = {
    "start": "2026-05-11T09:30:00Z",
    "timezone": "UTC",
    "engine_kv_init_after_s": 38,
    "serving_after_s": 52,
    "sample_interval_s": 15,
    "scrape_offset_s": 2.3,
    "log_interval_s": 10,
    "truth_window_s": 60,
    "occupancy_sample_s": 1.0,
    "prometheus_mode": "single",
    "seed": 1,
    "workload": {"mode": "open", "stop_fraction": 0.85, "client_max_tokens": 4096},
}


def gib(tokens: float, model: str) -> float:
    """GiB of KV memory that hold ``tokens`` tokens of ``model`` (bf16), plus one block of slack."""
    return round((tokens + 256) * MODELS[model] / 2**30, 4)


STEP_S = 0.15  # about one engine step: one output token per running request


def life_s(out_mean: float, prompt_mean: float = 0.0, batched: int = 2048) -> float:
    """About how long a request stays in the pool: its prefill chunks and one step per output token."""
    return (out_mean + prompt_mean / batched + 1) * STEP_S


def rate_for(pool_share_tokens: float, ctx_tokens: float, life: float) -> float:
    """The arrival rate (req/s) that keeps ``pool_share_tokens`` tokens live (Little's law)."""
    return round(pool_share_tokens / (ctx_tokens * life), 4)


def lognormal(median: float, sigma: float, lo: int, hi: int) -> dict:
    return {"dist": "lognormal", "median": int(median), "sigma": sigma, "min": lo, "max": hi}


def uniform(lo: int, hi: int) -> dict:
    return {"dist": "uniform", "min": int(lo), "max": int(hi)}


class Maker:
    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.out: dict[str, dict] = {}

    def base(self, family: str, i: int, intent: str, not_classes: list[str], text: str, *, pool_tokens: float,
             model: str | None = None, block_size: int | None = None, max_num_seqs: int | None = None,
             duration: int | None = None, lookalike: bool = False) -> dict:
        r = self.rng
        model = model or r.choice(list(MODELS))
        gpu, seqs, batched = r.choice(GPUS)
        # the pool must hold one max_model_len request (vLLM refuses to start otherwise)
        lens = [n for n in (4096, 8192, 16384, 32768) if n <= pool_tokens] or [2048]
        mml = r.choice(lens[-2:])
        if mml >= pool_tokens:  # a pool of exactly max_model_len tokens still misses the block vLLM keeps back
            mml = max(n for n in (1024, 2048, 4096, 8192, 16384) if n < pool_tokens)
        args = ["--max-model-len", str(mml), "--disable-uvicorn-access-log"]
        if block_size:
            args += ["--block-size", str(block_size)]
        if max_num_seqs:
            args += ["--max-num-seqs", str(max_num_seqs)]
        # slow steps keep the simulation cheap (fewer engine steps per simulated second): a large model on a
        # modest GPU; the constants vary so step times and throughputs differ between scenarios
        # (~0.15 s per step: STEP_S); the constants vary so step times and throughputs differ between scenarios
        step = {"overhead_ms": round(r.uniform(20, 40), 1), "weights_ms": round(r.uniform(100, 130), 1),
                "compute_us_per_token": round(r.uniform(50, 70), 1), "kv_read_ns_per_token": round(r.uniform(80, 300), 1)}
        name = f"{family}_{i:03d}"
        spec = {
            "truth_class": intent,
            "not_classes": not_classes,
            "description": f"family={family};{' look-alike;' if lookalike else ''} {text}",
            "model": model,
            "serve_args": args,
            "gpu": {"name": gpu, "kv_cache_gib": gib(pool_tokens, model), "default_max_num_seqs": seqs,
                    "default_max_num_batched_tokens": batched},
            "step_cost": step,
            "duration_s": duration or 300,
            "sample_interval_s": r.choice([10, 15, 15]),
            "seed": r.randrange(1, 10**6),
            "checks": [],
        }
        self.out[name] = spec
        return spec


OTHERS = ["capacity_pressure", "partial_block_waste", "prefix_cache_eviction"]


def not_(cls: str) -> list[str]:
    return [c for c in OTHERS if c != cls]


def make(scale: float = 1.0, seed: int = 20261201) -> dict:
    m = Maker(seed)
    r = m.rng

    def n(k: int) -> int:
        return max(1, round(k * scale))

    # --- capacity pressure -------------------------------------------------------------------------------
    for i in range(n(30)):  # ramps: ~30% of the pool for the first minutes, ~2x the pool by the end
        pool = r.choice([20000, 30000, 45000, 60000])
        med = r.choice([1500, 2500, 4000])
        out_hi = r.choice([300, 500, 800])
        dur = r.choice([360, 420, 480])
        s = m.base("ramp", i, "capacity_pressure", not_("capacity_pressure"),
                   f"open-loop ramp above a {pool}-token pool, prompts ~{med}", pool_tokens=pool, duration=dur)
        life = life_s(out_hi / 2, med)
        ctx = med * 1.1 + out_hi / 4  # lognormal mean + half the mean output
        s["workload"] = {
            "prompt_tokens": lognormal(med, 0.4, 200, 12000),
            "output_tokens": uniform(50, out_hi),
            # the offered load crosses the pool about 55-70% of the way through the ramp: usage climbs for minutes
            # before the first preemption, as in the incidents the forecast is for (faster rises are bursts)
            "phases": [{"start_s": 0, "end_s": 60, "rate_rps": rate_for(pool * r.uniform(0.15, 0.3), ctx, life)},
                       {"start_s": 60, "end_s": dur, "rate_rps": rate_for(pool * r.uniform(0.3, 0.45), ctx, life),
                        "rate_end_rps": rate_for(pool * r.uniform(1.3, 1.6), ctx, life)}],
        }
        if r.random() < 0.3:  # some ramps share prefixes too: pressure still explains them
            s["workload"]["prefixes"] = {"count": 4, "tokens": uniform(500, 1200), "zipf_s": 1.0, "share": 0.5}
            s["workload"]["unique_tokens"] = s["workload"].pop("prompt_tokens")
    for i in range(n(14)):  # steady overload
        pool = r.choice([15000, 25000, 40000])
        med = r.choice([2000, 3000])
        s = m.base("overload", i, "capacity_pressure", not_("capacity_pressure"),
                   f"steady open-loop rate above a {pool}-token pool", pool_tokens=pool)
        life = life_s(250, med)
        s["workload"] = {"prompt_tokens": lognormal(med, 0.4, 300, 10000), "output_tokens": uniform(100, 400),
                         "phases": [{"start_s": 0, "end_s": s["duration_s"],
                                     "rate_rps": rate_for(pool * r.uniform(1.5, 2.5), med * 1.1 + 125, life)}]}
    for i in range(n(12)):  # closed loop: more clients than fit
        pool = r.choice([12000, 20000, 30000])
        ctx = r.choice([1500, 2500, 3500])
        clients = int(pool / ctx * r.uniform(1.8, 3.0)) + 2
        s = m.base("closed_over", i, "capacity_pressure", not_("capacity_pressure"),
                   f"{clients} closed-loop clients of ~{ctx} tokens on a {pool}-token pool", pool_tokens=pool)
        s["workload"] = {"mode": "closed", "concurrency": clients, "ramp_s": 60, "think_time_s": 0.5,
                         "prompt_tokens": lognormal(ctx * 0.8, 0.3, 200, 9000), "output_tokens": uniform(100, int(ctx * 0.3)),
                         "phases": [{"start_s": 0, "end_s": s["duration_s"], "rate_rps": 1.0}]}

    # --- partial-block waste -----------------------------------------------------------------------------
    for i in range(n(50)):
        bs = r.choice([64, 128, 256, 256])
        blocks = r.choice([24, 32, 48, 64])
        pool = blocks * bs
        # sequences well under one block: most of each block stays empty
        prompt_med = int(bs * r.uniform(0.12, 0.3))
        out_hi = max(8, int(bs * r.uniform(0.15, 0.4)))
        s = m.base("waste_bigblock", i, "partial_block_waste", ["prefix_cache_eviction"],
                   f"block_size {bs}, ~{blocks} blocks, prompts ~{prompt_med} tokens: short sequences in big blocks",
                   pool_tokens=pool, block_size=bs, model=r.choice(["Qwen/Qwen2.5-7B-Instruct", "meta-llama/Llama-3.1-8B-Instruct"]))
        wl = {"prompt_tokens": lognormal(prompt_med, 0.4, 4, max(8, bs - out_hi - 4)), "output_tokens": uniform(4, out_hi)}
        if r.random() < 0.7:
            wl.update({"mode": "closed", "concurrency": int(blocks * r.uniform(1.3, 2.2)), "ramp_s": 40,
                       "think_time_s": round(r.uniform(0.2, 2.0), 2),
                       "phases": [{"start_s": 0, "end_s": s["duration_s"], "rate_rps": 1.0}]})
        else:  # open loop a little above what the blocks hold: one block per sequence
            rate = blocks / life_s(out_hi / 2) * r.uniform(1.15, 1.5)
            wl["phases"] = [{"start_s": 0, "end_s": s["duration_s"], "rate_rps": round(rate, 3)}]
        s["workload"] = wl

    # --- prefix-cache eviction ---------------------------------------------------------------------------
    for i in range(n(26)):  # the active prefix set grows past the free part of the pool
        pool = r.choice([20000, 30000, 40000])
        plen = r.choice([(800, 1600), (1500, 3000), (2500, 4000)])
        mean_p = sum(plen) / 2
        start_active = max(2, int(pool * 0.25 / mean_p))
        end_active = int(pool * r.uniform(2.5, 5.0) / mean_p) + start_active
        dur = r.choice([360, 420])
        t1 = r.choice([120, 150, 180])
        s = m.base("evict_growing_set", i, "prefix_cache_eviction", ["capacity_pressure", "partial_block_waste"],
                   f"{start_active} -> {end_active} active prefixes of {plen[0]}-{plen[1]} tokens on a {pool}-token pool",
                   pool_tokens=pool, duration=dur)
        # running requests pin 15-40% of the pool; the rest is the free queue the prefixes live in
        rate = rate_for(pool * r.uniform(0.15, 0.4), mean_p + 200, life_s(60, mean_p))
        s["workload"] = {
            "prefixes": {"count": end_active, "tokens": uniform(*plen), "zipf_s": round(r.uniform(0.0, 0.6), 2),
                         "share": 0.95, "active": start_active},
            "unique_tokens": lognormal(120, 0.6, 10, 1500), "output_tokens": lognormal(50, 0.6, 4, 300),
            "phases": [{"start_s": 0, "end_s": t1, "rate_rps": rate},
                       {"start_s": t1, "end_s": dur, "rate_rps": rate, "prefixes_active": end_active}],
        }
    for i in range(n(26)):  # a fixed set that fits at low load; a heavier phase leaves too few free blocks
        pool = r.choice([25000, 35000, 50000])
        plen = r.choice([(1000, 2000), (2000, 3500)])
        mean_p = sum(plen) / 2
        count = max(3, int(pool * r.uniform(0.45, 0.65) / mean_p))
        dur = r.choice([360, 420])
        t1 = r.choice([120, 150])
        s = m.base("evict_load", i, "prefix_cache_eviction", ["partial_block_waste"],
                   f"{count} prefixes of {plen[0]}-{plen[1]} tokens fit a {pool}-token pool at low load, not under load",
                   pool_tokens=pool, duration=dur)
        low = rate_for(pool * 0.1, mean_p + 200, life_s(50, mean_p))
        heavy_ctx = r.choice([2000, 3000])
        # the heavy phase: unprefixed requests that pin ~40-60% of the pool while they run
        heavy = rate_for(pool * r.uniform(0.4, 0.6), heavy_ctx * 1.05 + 100, life_s(200, heavy_ctx))
        share = round(0.95 * low / (low + heavy), 3)
        s["workload"] = {
            "prefixes": {"count": count, "tokens": uniform(*plen), "zipf_s": round(r.uniform(0.0, 0.5), 2), "share": 0.95},
            "unique_tokens": lognormal(120, 0.5, 10, 1500), "output_tokens": lognormal(50, 0.5, 4, 300),
            "unprefixed_tokens": lognormal(heavy_ctx, 0.3, 500, 8000),
            "phases": [{"start_s": 0, "end_s": t1, "rate_rps": low},
                       {"start_s": t1, "end_s": dur, "rate_rps": round(low + heavy, 4), "prefix_share": share,
                        "output_tokens": uniform(50, 350)}],
        }

    # --- healthy -----------------------------------------------------------------------------------------
    for i in range(n(44)):
        pool = r.choice([40000, 60000, 100000])
        med = r.choice([200, 500, 1000])
        out = r.choice([60, 120])
        s = m.base("healthy_quiet", i, "healthy", OTHERS, f"moderate load on a roomy {pool}-token pool",
                   pool_tokens=pool)
        plen = 0
        wl = {"output_tokens": lognormal(out, 0.6, 4, 800)}
        if r.random() < 0.7:
            wl["prefixes"] = {"count": r.choice([1, 2, 4]), "tokens": uniform(400, 1500), "zipf_s": 0.5, "share": 0.9}
            wl["unique_tokens"] = lognormal(med, 0.8, 10, 6000)
            plen = 950
        else:
            wl["prompt_tokens"] = lognormal(med, 0.8, 10, 6000)
        ctx = plen + med * 1.4 + out * 0.6
        wl["phases"] = [{"start_s": 0, "end_s": s["duration_s"],
                         "rate_rps": rate_for(pool * r.uniform(0.1, 0.4), ctx, life_s(out * 1.2, ctx))}]
        s["workload"] = wl

    # --- look-alikes (intended healthy) ------------------------------------------------------------------
    for i in range(n(20)):  # usage high but it fits: a closed loop sized to ~75-90% of the pool
        pool = r.choice([20000, 30000, 50000])
        ctx = r.choice([1000, 2000, 3000])
        out_hi = int(ctx * 0.2)
        clients = max(2, int(pool * r.uniform(0.75, 0.88) / (ctx * 1.01 + out_hi / 2)))
        s = m.base("look_fits_high", i, "healthy", OTHERS, f"{clients} closed-loop clients holding most of a {pool}-token pool",
                   pool_tokens=pool, lookalike=True)
        s["workload"] = {"mode": "closed", "concurrency": clients, "ramp_s": 30, "think_time_s": 0.0,
                         "prompt_tokens": lognormal(ctx, 0.1, int(ctx * 0.8), int(ctx * 1.2)),
                         "output_tokens": uniform(out_hi // 2, out_hi), "stop_fraction": 0.0,
                         "phases": [{"start_s": 0, "end_s": s["duration_s"], "rate_rps": 1.0}]}
    for i in range(n(16)):  # bursts queue on the prefill budget; the pool is roomy
        pool = r.choice([80000, 120000])
        s = m.base("look_burst", i, "healthy", OTHERS, f"arrival bursts on a roomy {pool}-token pool", pool_tokens=pool,
                   lookalike=True)
        dur = s["duration_s"]
        phases, t = [], 0
        while t < dur:
            calm = r.randint(40, 80)
            phases.append({"start_s": t, "end_s": min(dur, t + calm), "rate_rps": round(r.uniform(0.2, 0.5), 3)})
            t += calm
            if t >= dur:
                break
            burst = r.randint(3, 6)
            phases.append({"start_s": t, "end_s": min(dur, t + burst), "rate_rps": round(r.uniform(4, 7), 2)})
            t += burst
        s["workload"] = {"prompt_tokens": lognormal(r.choice([800, 1500]), 0.4, 100, 5000),
                         "output_tokens": lognormal(30, 0.5, 4, 150), "phases": phases}
    for i in range(n(16)):  # a low max_num_seqs queues requests while the pool is half empty
        pool = r.choice([60000, 100000])
        seqs = r.choice([4, 8, 12])
        s = m.base("look_max_num_seqs", i, "healthy", OTHERS, f"--max-num-seqs {seqs} queues requests; pool {pool} tokens",
                   pool_tokens=pool, max_num_seqs=seqs, lookalike=True)
        s["workload"] = {"prompt_tokens": lognormal(800, 0.5, 50, 4000), "output_tokens": uniform(40, 160),
                         "phases": [{"start_s": 0, "end_s": s["duration_s"],
                                     "rate_rps": round(seqs / life_s(100, 800) * r.uniform(1.1, 1.5), 3)}]}
    for i in range(n(16)):  # no shared prefixes at all: a hit rate near 0 from the first minute, usage up to high
        pool = r.choice([30000, 50000, 80000])
        med = r.choice([1000, 2000])
        s = m.base("look_no_reuse", i, "healthy", OTHERS, f"no shared prefixes; {pool}-token pool, prompts ~{med}",
                   pool_tokens=pool, lookalike=True)
        s["workload"] = {"prompt_tokens": lognormal(med, 0.4, 50, 8000), "output_tokens": uniform(30, 200),
                         "phases": [{"start_s": 0, "end_s": s["duration_s"],
                                     "rate_rps": rate_for(pool * r.uniform(0.3, 0.6), med * 1.1 + 60, life_s(115, med))}]}
    for i in range(n(18)):  # a second tenant without shared prefixes: hit rate falls, hits/s do not; prefixes stay
        pool = r.choice([60000, 100000])
        count = r.choice([2, 3, 4])
        dur = r.choice([360, 420])
        t1 = r.choice([120, 150, 180])
        s = m.base("look_new_traffic", i, "healthy", OTHERS,
                   f"{count} shared prefixes; an unshared tenant joins at {t1}s; roomy {pool}-token pool",
                   pool_tokens=pool, duration=dur, lookalike=True)
        rate = rate_for(pool * 0.08, 1600, life_s(60, 1400))
        extra = round(rate * r.uniform(1.0, 2.5), 4)
        share = round(0.95 * rate / (rate + extra), 3)
        s["workload"] = {
            "prefixes": {"count": count, "tokens": uniform(800, 2000), "zipf_s": 0.5, "share": 0.95},
            "unique_tokens": lognormal(150, 0.5, 10, 1500), "output_tokens": lognormal(50, 0.5, 4, 300),
            "unprefixed_tokens": lognormal(r.choice([600, 1200]), 0.5, 50, 6000),
            "phases": [{"start_s": 0, "end_s": t1, "rate_rps": rate},
                       {"start_s": t1, "end_s": dur, "rate_rps": round(rate + extra, 4), "prefix_share": share}],
        }
    for i in range(n(14)):  # big blocks, long sequences: blocks fill, no waste
        bs = r.choice([128, 256])
        pool = r.choice([60000, 100000])
        s = m.base("look_bigblock_long", i, "healthy", OTHERS, f"block_size {bs} with long sequences; {pool}-token pool",
                   pool_tokens=pool, block_size=bs, lookalike=True)
        med = r.choice([2000, 4000])
        s["workload"] = {"prompt_tokens": lognormal(med, 0.4, 600, 12000), "output_tokens": uniform(40, 200),
                         "phases": [{"start_s": 0, "end_s": s["duration_s"],
                                     "rate_rps": rate_for(pool * r.uniform(0.25, 0.45), med * 1.1 + 60, life_s(120, med))}]}
    # --- (added last, so the draws of every family above are unchanged) ------------------------------------------
    for i in range(n(18)):  # a traffic-mix change: the popularity of a fixed prefix set flattens past the pool
        pool = r.choice([20000, 30000, 40000])
        plen = r.choice([(800, 1600), (1500, 3000)])
        mean_p = sum(plen) / 2
        count = int(pool * r.uniform(3.0, 6.0) / mean_p)
        dur = r.choice([360, 420])
        t1 = r.choice([120, 150, 180])
        s = m.base("evict_flatten", i, "prefix_cache_eviction", ["capacity_pressure", "partial_block_waste"],
                   f"{count} prefixes of {plen[0]}-{plen[1]} tokens, Zipf popularity flattening at {t1}s; "
                   f"{pool}-token pool", pool_tokens=pool, duration=dur)
        rate = rate_for(pool * r.uniform(0.15, 0.35), mean_p + 200, life_s(60, mean_p))
        s["workload"] = {
            "prefixes": {"count": count, "tokens": uniform(*plen), "zipf_s": round(r.uniform(1.6, 2.2), 2), "share": 0.95},
            "unique_tokens": lognormal(120, 0.6, 10, 1500), "output_tokens": lognormal(50, 0.6, 4, 300),
            "phases": [{"start_s": 0, "end_s": t1, "rate_rps": rate},
                       {"start_s": t1, "end_s": dur, "rate_rps": rate, "prefix_zipf_s": round(r.uniform(0.0, 0.5), 2)}],
        }
    return {"defaults": DEFAULTS, "scenarios": m.out}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="benchmarks/lab/families.yaml")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every family's count (0.1 for a quick try)")
    ap.add_argument("--seed", type=int, default=20261201)
    a = ap.parse_args()
    doc = make(a.scale, a.seed)
    with open(a.out, "w") as f:
        f.write("# Generated by benchmarks/lab/families.py (do not edit by hand; change the generator).\n")
        yaml.safe_dump(doc, f, sort_keys=False, width=120)
    fams: dict[str, int] = {}
    for spec in doc["scenarios"].values():
        fam = spec["description"].split(";")[0].split("=")[1]
        fams[fam] = fams.get(fam, 0) + 1
    print(f"{len(doc['scenarios'])} scenarios -> {a.out}: " + ", ".join(f"{k} {v}" for k, v in fams.items()))


if __name__ == "__main__":
    main()
