#!/usr/bin/env python3
"""Validate ``kvdiag simulate``'s scheduler model against the twin lab (vLLM 0.33's own scheduler) and write
docs/simulate-validation.md.

    nice -n 10 $TWIN_PYTHON benchmarks/lab/forkrun.py --twin ../shared/twin/twin.py \
        --scenarios benchmarks/simulate/validation.yaml --out /tmp/simlab --jobs 1     # the lab runs (~4 min)
    python benchmarks/simulate_validate.py --lab /tmp/simlab                          # the table

For every case folder of the table (``workload.json`` + ``truth.json``), the model runs the same requests with
the same pool, block size, max_num_seqs, max_num_batched_tokens, prefix caching, max_model_len, run length and
step-time constants (the lab's jitter too, from the scenario's seed + 99, so that the step times are the lab's);
its means are taken over the same time base as the lab's truth (see ``simulate(lab_ticks=…)``). Compared:
preemptions (target: within 10 % or ±2), peak and time-weighted mean KV usage (mean within 0.02), mean waiting
requests (mean of the per-minute means, as the truth's windows give them), prefix-cache hit rate (within 0.02).
``--no-jitter`` runs the model without the lab's jitter (constant step-time formula): the numbers an operator
gets without knowing the seed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kvdiag.simulate.model import simulate  # noqa: E402
from kvdiag.simulate.workload import lab_ticks, load_lab_case  # noqa: E402

TABLE = ROOT / "benchmarks" / "simulate" / "validation.yaml"
DOC = ROOT / "docs" / "simulate-validation.md"


def family(name: str) -> str:
    base = name.rsplit("_", 1)[0] if name.rsplit("_", 1)[-1].isdigit() else name.rsplit("_", 2)[0]
    return base


def compare_case(folder: Path, seed: int | None, jitter: bool = True) -> dict:
    """Model vs lab on one case folder → one row (numbers, and which targets are met)."""
    c = load_lab_case(str(folder))
    t = c["truth"]
    cost = c["step_cost"]
    if jitter and seed is not None:
        cost = dataclasses.replace(cost, jitter=float(t["step_cost_model"].get("jitter", 0.0)), seed=int(seed) + 99)
    t0 = time.perf_counter()
    r = simulate(c["requests"], c["setting"], cost, duration_s=c["duration_s"], start_s=c["start_s"],
                 lab_ticks=lab_ticks(str(folder), t, seed), window_s=float(t.get("truth_window_s", 60.0)))
    wall = time.perf_counter() - t0
    wins = [w for w in r.extra["windows"] if w[1] > 0]
    sim_wait = sum(w[3] / w[1] for w in wins) / len(wins) if wins else 0.0
    lab_wins = [w for w in t["windows"] if w.get("waiting_mean") is not None]
    lab_wait = sum(w["waiting_mean"] for w in lab_wins) / len(lab_wins) if lab_wins else 0.0
    lp = int(t["totals"]["preemptions"])
    lh = t["totals"]["prefix_cache_hit_rate"]
    sh = r.prefix_cache_hit_rate
    row = {
        "case": folder.name, "family": family(folder.name), "block_size": c["setting"].block_size,
        "prefix_caching": c["setting"].enable_prefix_caching, "requests": len(c["requests"]),
        "lab_preemptions": lp, "sim_preemptions": r.preemptions,
        "lab_usage_peak": t["block_usage"]["peak"], "sim_usage_peak": round(r.kv_cache_usage_peak, 4),
        "lab_usage_mean": t["block_usage"]["mean_time_weighted"], "sim_usage_mean": round(r.kv_cache_usage_mean, 4),
        "lab_waiting_mean": round(lab_wait, 3), "sim_waiting_mean": round(sim_wait, 3),
        "lab_hit_rate": lh, "sim_hit_rate": None if sh is None else round(sh, 4),
        "lab_steps": t["totals"]["engine_steps"], "sim_steps": r.engine_steps,
        "lab_wall_s": t.get("generation", {}).get("wall_seconds"), "sim_wall_s": round(wall, 3),
    }
    row["ok_preemptions"] = abs(r.preemptions - lp) <= max(2, 0.10 * lp)
    row["ok_usage_mean"] = abs(r.kv_cache_usage_mean - row["lab_usage_mean"]) <= 0.02
    if lh is None and sh is None:
        row["ok_hit_rate"] = True
    elif lh is None or sh is None:
        row["ok_hit_rate"] = (lh or 0.0) == 0.0 and (sh or 0.0) == 0.0
    else:
        row["ok_hit_rate"] = abs(sh - lh) <= 0.02
    return row


def seeds_of(table: Path) -> dict[str, int]:
    import yaml

    doc = yaml.safe_load(table.read_text())
    d = doc.get("defaults", {}).get("seed", 0)
    return {n: int(s.get("seed", d)) for n, s in doc["scenarios"].items()}


def fmt(v) -> str:
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "**no**"
    if isinstance(v, float):
        return f"{v:.4g}" if abs(v) < 1000 else f"{v:,.0f}"
    return str(v)


def render(rows: list[dict], lab: str, jitter: bool, rows_nj: list[dict] | None = None) -> str:
    n = len(rows)
    okp = sum(r["ok_preemptions"] for r in rows)
    oku = sum(r["ok_usage_mean"] for r in rows)
    okh = sum(r["ok_hit_rate"] for r in rows)
    exact = sum(r["sim_steps"] == r["lab_steps"] and r["sim_preemptions"] == r["lab_preemptions"] for r in rows)
    fams = sorted({r["family"] for r in rows})
    bss = sorted({r["block_size"] for r in rows})
    lab_wall = sum(r["lab_wall_s"] or 0 for r in rows)
    sim_wall = sum(r["sim_wall_s"] for r in rows)
    out = [
        "# `kvdiag simulate` against vLLM 0.33's scheduler (the twin lab)",
        "",
        "Generated by `python benchmarks/simulate_validate.py --lab DIR` (do not edit by hand); the lab runs come from",
        "`benchmarks/simulate/validation.yaml` (made by `benchmarks/simulate/make_table.py` from the lab families) run",
        "with `benchmarks/lab/forkrun.py`. Every row: the same `workload.json`, pool, block size, max_num_seqs,",
        "max_num_batched_tokens, prefix caching, max_model_len, run length and step-time constants"
        + (" (with the lab's ±3 % jitter drawn from the scenario's seed, so the step times are the lab's)." if jitter
           else " (without the lab's jitter: the constant formula)."),
        "",
        f"**{n} workloads** ({len(fams)} families: {', '.join(fams)}; block sizes {', '.join(map(str, bss))}; "
        f"{sum(not r['prefix_caching'] for r in rows)} with prefix caching off).",
        "",
        "| target | met |",
        "| --- | --- |",
        f"| preemptions within 10 % or ±2 | {okp}/{n} |",
        f"| mean KV usage within 0.02 | {oku}/{n} |",
        f"| prefix-cache hit rate within 0.02 | {okh}/{n} |",
        f"| identical engine step count and preemptions (step-for-step replay) | {exact}/{n} |",
        "",
        *([f"Without the jitter (the constant formula, what an operator runs without the lab's seed): preemptions "
           f"{sum(r['ok_preemptions'] for r in rows_nj)}/{len(rows_nj)}, mean usage "
           f"{sum(r['ok_usage_mean'] for r in rows_nj)}/{len(rows_nj)}, hit rate "
           f"{sum(r['ok_hit_rate'] for r in rows_nj)}/{len(rows_nj)} within the targets; largest differences: "
           f"preemptions {max(abs(r['sim_preemptions'] - r['lab_preemptions']) for r in rows_nj)}, mean usage "
           f"{max(abs(r['sim_usage_mean'] - r['lab_usage_mean']) for r in rows_nj):.4f}, hit rate "
           f"{max(abs((r['sim_hit_rate'] or 0) - (r['lab_hit_rate'] or 0)) for r in rows_nj):.4f}.", ""]
          if rows_nj else []),
        f"Wall time: lab {lab_wall:.1f} s (its own `generation.wall_seconds`, vLLM imported once), model "
        f"{sim_wall:.2f} s in this run (see `benchmarks/simulate_speed.py` for both in one run).",
        "",
        "How the means are taken: the lab's truth integrates each engine step from the last scrape or log tick inside",
        "it (rendering a page moves its clock), so its time-weighted means leave those slices out; the model is given",
        "the same ticks (`times.csv` and the log schedule) for this comparison. Mean waiting: the mean of the",
        "per-minute means (the truth's `windows`).",
        "",
        "What the model leaves out (kvdiag/simulate/model.py): hybrid and sliding-window models (one full-attention",
        "KV group), the priority policy, the watermark (0.33's default is 0), speculative decoding, async scheduling",
        "(on CUDA 0.33 schedules one step ahead: KV accounting differs by at most one token per running request), KV",
        "connectors and LoRA limits; block identities (only reference counts, hashes and the free queue's order are",
        "kept). A closed-loop workload is replayed with its recorded arrival times (the clients' reaction to a",
        "different setting is not modelled). The lab itself runs the synchronous scheduler, so these rows do not test",
        "async scheduling.",
        "",
        "| case | bs | prefix cache | requests | preemptions lab / sim | usage peak lab / sim | usage mean lab / sim "
        "| waiting mean lab / sim | hit rate lab / sim | steps lab / sim | ok |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        ok = all((r["ok_preemptions"], r["ok_usage_mean"], r["ok_hit_rate"]))
        out.append(f"| {r['case']} | {r['block_size']} | {'on' if r['prefix_caching'] else 'off'} | {r['requests']} "
                   f"| {r['lab_preemptions']} / {r['sim_preemptions']} | {fmt(r['lab_usage_peak'])} / {fmt(r['sim_usage_peak'])} "
                   f"| {fmt(r['lab_usage_mean'])} / {fmt(r['sim_usage_mean'])} "
                   f"| {fmt(r['lab_waiting_mean'])} / {fmt(r['sim_waiting_mean'])} "
                   f"| {fmt(r['lab_hit_rate'])} / {fmt(r['sim_hit_rate'])} | {r['lab_steps']} / {r['sim_steps']} "
                   f"| {'yes' if ok else '**no**'} |")
    out.append("")
    return "\n".join(out)


REMEDY_TABLE = ROOT / "benchmarks" / "simulate" / "remedy_pressure.yaml"
PRESSURE = ROOT / "fixtures" / "series" / "vllm033_pressure"
QWEN = ROOT / "fixtures" / "simulate" / "qwen2.5-7b-instruct.config.json"
REMEDY_ARGS = ["--kv-cache-memory", "3,4.5,6", "--model-config", str(QWEN), "--max-num-seqs", "12,14,16,256"]


def remedy_section(lab: Path) -> str:
    """The shared pressure series: kvdiag simulate's table, then the lab run with each checked setting."""
    import subprocess

    cmd = [sys.executable, "-m", "kvdiag", "simulate", "--lab-case", str(PRESSURE.relative_to(ROOT)), *REMEDY_ARGS,
           "--format", "markdown"]
    md = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, check=True).stdout
    md = md.replace("## Simulated settings", "### Simulated settings")
    seeds = seeds_of(REMEDY_TABLE)
    lines = ["", "## The pressure series (`fixtures/series/vllm033_pressure`, shared `example_pressure`): remedies", "",
             "`python -m kvdiag simulate --lab-case fixtures/series/vllm033_pressure " + " ".join(
                 a if not a.startswith(str(ROOT)) else str(Path(a).relative_to(ROOT)) for a in REMEDY_ARGS) + "`", "",
             md, "### The lab run with those settings (vLLM's scheduler)", "",
             "Each setting below was then run in the lab (`benchmarks/simulate/remedy_pressure.yaml`, the shared "
             "`example_pressure` entry with the setting changed) and compared with the model (with the lab's jitter "
             "seed) on the same workload:", "",
             "| lab run | num_gpu_blocks | max_num_seqs | preemptions lab / sim | usage peak lab / sim | "
             "usage mean lab / sim | waiting peak lab |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for name in seeds:
        folder = lab / name
        if not (folder / "truth.json").is_file():
            continue
        row = compare_case(folder, seeds[name])
        t = json.loads((folder / "truth.json").read_text())
        lines.append(f"| {name} | {t['num_gpu_blocks']} | {t['deployment']['max_num_seqs']} | {row['lab_preemptions']} / "
                     f"{row['sim_preemptions']} | {fmt(row['lab_usage_peak'])} / {fmt(row['sim_usage_peak'])} | "
                     f"{fmt(row['lab_usage_mean'])} / {fmt(row['sim_usage_mean'])} | {t['peaks']['waiting']} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lab", required=True, help="folder of lab case folders (forkrun --out)")
    ap.add_argument("--table", default=str(TABLE))
    ap.add_argument("--doc", default=str(DOC))
    ap.add_argument("--no-jitter", action="store_true")
    ap.add_argument("--json", default=None, help="also write the rows as JSON here")
    ap.add_argument("--remedy-lab", default=None, help="lab runs of benchmarks/simulate/remedy_pressure.yaml: adds "
                    "the pressure series' remedy table and its check against the lab")
    a = ap.parse_args()
    seeds = seeds_of(Path(a.table))
    rows = []
    rows_nj = []
    for name in seeds:
        folder = Path(a.lab) / name
        if not (folder / "truth.json").is_file():
            print(f"{name}: no lab run in {a.lab} (skipped)", file=sys.stderr)
            continue
        row = compare_case(folder, seeds[name], jitter=not a.no_jitter)
        rows.append(row)
        if not a.no_jitter:
            rows_nj.append(compare_case(folder, seeds[name], jitter=False))
        print(f"{name}: preemptions {row['lab_preemptions']}/{row['sim_preemptions']} usage mean "
              f"{row['lab_usage_mean']}/{row['sim_usage_mean']} hit {row['lab_hit_rate']}/{row['sim_hit_rate']} "
              f"steps {row['lab_steps']}/{row['sim_steps']}", file=sys.stderr)
    if not rows:
        print("no lab runs found", file=sys.stderr)
        return 1
    text = render(rows, a.lab, not a.no_jitter, rows_nj or None)
    if a.remedy_lab:
        text += remedy_section(Path(a.remedy_lab))
    Path(a.doc).write_text(text)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1) + "\n")
    n = len(rows)
    print(f"{n} workloads: preemptions {sum(r['ok_preemptions'] for r in rows)}/{n}, usage mean "
          f"{sum(r['ok_usage_mean'] for r in rows)}/{n}, hit rate {sum(r['ok_hit_rate'] for r in rows)}/{n} -> {a.doc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
