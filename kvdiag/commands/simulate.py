"""``kvdiag simulate``: replay a workload under other vLLM settings with the scheduler model
(:mod:`kvdiag.simulate.model`) and print one row per setting. The CLI group registers it with
``cli.add_command(simulate)``; the outcome document is :func:`build_document` (schema: ``simulate.schema.json``)."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from pathlib import Path
from typing import Any

import click

from ..durations import parse_duration
from ..errors import InputError
from ..redaction import redact
from ..simulate.document import _COLS, _cells, _cost_line, _setting_label, parse_step_cost  # noqa: F401
from ..simulate.model import DEFAULT_MAX_MODEL_LEN, MAX_BLOCKS, Setting, SimulationLimit, StepCost, simulate
from ..simulate.workload import MAX_REQUESTS, load_lab_case, load_trace, summarize
from ..vllm_defaults import (DEFAULT_BLOCK_SIZE, DEFAULT_MAX_NUM_BATCHED_TOKENS, DEFAULT_MAX_NUM_SEQS,
                             MAX_BLOCK_SIZE_OPTION)
from .options import exit_codes

def _kv_dtypes() -> click.Choice:
    from .. import capacity as cap

    return click.Choice(list(cap.KV_CACHE_DTYPES), case_sensitive=False)


MAX_SETTINGS = 64
SCHEMA_PATH = Path(__file__).parents[1] / "simulate" / "simulate.schema.json"


def _int_list(opt: str, text: str | None, lo: int, hi: int) -> list[int] | None:
    """``"32,48,64"`` → ``[32, 48, 64]``; click.BadParameter naming the option otherwise."""
    if text is None:
        return None
    out = []
    for part in str(text).split(","):
        part = part.strip()
        try:
            v = int(part)
        except ValueError:
            raise click.BadParameter(f"{part!r}: expected integers from {lo:,} to {hi:,}, comma-separated",
                                     param_hint=opt) from None
        if not lo <= v <= hi:
            raise click.BadParameter(f"{v:,}: expected integers from {lo:,} to {hi:,}, comma-separated", param_hint=opt)
        if v not in out:
            out.append(v)
    if not out:
        raise click.BadParameter("empty: expected integers, comma-separated", param_hint=opt)
    return out


def _float_list(opt: str, text: str | None, lo: float, hi: float) -> list[float] | None:
    if text is None:
        return None
    out = []
    for part in str(text).split(","):
        try:
            v = float(part)
        except ValueError:
            raise click.BadParameter(f"{part.strip()!r}: expected numbers from {lo:g} to {hi:g}, comma-separated",
                                     param_hint=opt) from None
        if not math.isfinite(v) or not lo < v <= hi:
            raise click.BadParameter(f"{part.strip()}: expected numbers above {lo:g}, at most {hi:g}", param_hint=opt)
        out.append(v)
    return out


def _blocks_from_memory(gib: float, model_config: str, block_size: int, kv_cache_dtype: str) -> int:
    from .. import capacity as cap

    shape = cap.model_shape(cap.load_model_config(model_config))
    kinds = set(shape.layer_kinds)
    if not kinds <= {"full"}:
        raise InputError(f"{model_config}: layer kinds {sorted(kinds)}: the simulator models one full-attention KV "
                         "cache group; give --num-gpu-blocks for a hybrid or sliding-window model")
    bpt = cap.kv_bytes_per_token(shape, kv_cache_dtype)
    return cap.num_gpu_blocks_from_kv_memory(gib * cap.GIB, block_size * bpt)


OBJECTIVES = ("balanced", "preemptions", "queue", "throughput")
"""``--objective``: balanced (default) = no preemption and no worse p95 queue time and throughput than the setting
as run (the first row without one), then the shortest p95 queue; preemptions = fewest preemptions first; queue =
shortest p95 queue time first; throughput = most generated tokens per second first."""
OBJECTIVE_TEXT = {
    "balanced": "no preemption, and p95 queue time and throughput no worse than {ref}; among those the shortest p95 "
                "queue time, then the highest throughput",
    "preemptions": "fewest preemptions, then the shortest p95 queue time, then fewest unfinished requests, then the "
                   "fewest waiting on average",
    "queue": "shortest p95 queue time, then the highest throughput, then fewest preemptions",
    "throughput": "highest throughput (generated tokens per simulated second), then the shortest p95 queue time",
}
THROUGHPUT_TOLERANCE = 0.01
"""balanced: a throughput within 1 % of the reference's counts as no worse (simulated step-time jitter)."""


def throughput(row: dict) -> float | None:
    """Generated tokens per simulated second of one run (None without simulated time)."""
    secs = row.get("simulated_seconds") or 0.0
    return row.get("generation_tokens", 0) / secs if secs > 0 else None


def rank_key(row: dict, objective: str = "preemptions") -> tuple:
    """Order of preference among simulated settings under ``objective`` (see :data:`OBJECTIVE_TEXT`; balanced ranks
    the qualifying rows by queue time then throughput, :func:`recommend` applies its conditions)."""
    q = row.get("queue_time_p95_s")
    q = math.inf if q is None else round(q, 3)
    tp = throughput(row) or 0.0
    if objective == "queue" or objective == "balanced":
        return (q, -round(tp, 3), row["preemptions"])
    if objective == "throughput":
        return (-round(tp, 3), q, row["preemptions"])
    return (row["preemptions"], q, row["requests_unfinished"], round(row["num_requests_waiting_mean"], 3))


def recommend(runs: list[dict], objective: str, ref: int) -> int | None:
    """Index of the recommended run, or None when no run meets the balanced objective."""
    if not runs:
        return None
    candidates = list(range(len(runs)))
    if objective == "balanced":
        base = runs[ref]
        bq = base.get("queue_time_p95_s")
        bt = throughput(base)

        def meets(r: dict) -> bool:
            q, t = r.get("queue_time_p95_s"), throughput(r)
            return (r["preemptions"] == 0 and (bq is None or (q is not None and q <= bq + 1e-9))
                    and (bt is None or (t is not None and t >= bt * (1 - THROUGHPUT_TOLERANCE))))
        candidates = [i for i in candidates if meets(runs[i])]
        if not candidates:
            return None
    return min(candidates, key=lambda i: rank_key(runs[i], objective))


def build_document(source: dict, runs: list[dict], cost: StepCost, duration: float | None,
                   baseline: dict | None, objective: str = "balanced") -> dict:
    """The outcome document (``simulate.schema.json``): ``{"schema_version": 1, "kind": "kvdiag-simulate",
    "simulated": true, "source", "workload", "step_cost", "duration_s", "baseline_setting", "settings": [...],
    "recommended", "objective", "notes"}``; every number is simulated (seconds, tokens, ratios 0-1)."""
    ref = next((i for i, r in enumerate(runs) if baseline is not None and r["setting"] == baseline), 0)
    for r in runs:
        r["throughput_tokens_per_s"] = throughput(r)
    best = recommend(runs, objective, ref)
    for i, r in enumerate(runs):
        r["baseline"] = baseline is not None and r["setting"] == baseline
        r["recommended"] = i == best
    ref_text = "the setting as run" if baseline is not None and any(r["baseline"] for r in runs) else "the first row"
    rule = OBJECTIVE_TEXT[objective].format(ref=ref_text)
    notes = ["Simulated with kvdiag's model of vLLM V1's scheduler (validated against vLLM 0.33.0's own "
             "scheduler: docs/simulate-validation.md); not a measurement.",
             f"Recommended by --objective {objective}: {rule}."]
    if best is None and runs:
        notes.append(f"No setting meets --objective {objective} ({rule}); none is recommended. Choose by the table, "
                     "or name another objective (preemptions, queue, throughput).")
    return {"schema_version": 1, "kind": "kvdiag-simulate", "simulated": True, "source": source,
            "step_cost": dataclasses.asdict(cost), "duration_s": duration, "baseline_setting": baseline,
            "settings": runs, "recommended": None if best is None else runs[best]["setting"], "objective": objective,
            "notes": notes}


def _redact_strings(v):
    if isinstance(v, str):
        return redact(v)
    if isinstance(v, dict):
        return {k: _redact_strings(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_redact_strings(x) for x in v]
    return v


def render_text(doc: dict) -> str:
    runs = doc["settings"]
    varied = [k for k in (runs[0]["setting"] if runs else {}) if len({json.dumps(r["setting"][k]) for r in runs}) > 1]
    heads = ["setting (simulated)"] + [h for _, h, _ in _COLS]
    rows = []
    for r in runs:
        mark = (" *" if r["recommended"] else "") + (" (as run)" if r["baseline"] else "")
        rows.append([_setting_label(r["setting"], varied) + mark] + _cells(r))
    widths = [max(len(x) for x in col) for col in zip(heads, *rows)]
    span = "until drained" if doc["duration_s"] is None else f"{doc['duration_s']:g} s"
    lines = [f"kvdiag simulate: {doc['workload']['requests']} requests ({doc['source']['kind']} {doc['source']['path']}), "
             f"{span}",
             "fixed: " + ", ".join(f"{k}={v}" for k, v in (runs[0]["setting"] if runs else {}).items() if k not in varied),
             _cost_line(doc["step_cost"])]
    for key in ("about", "step_cost"):
        if doc["source"].get(key):
            lines.append(doc["source"][key])
    lines.append("")
    lines.append("  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(heads, widths))))
    for row in rows:
        lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))))
    if doc["recommended"] is not None:
        best = next(r for r in runs if r["recommended"])
        q = best.get("queue_time_p95_s")
        tp = best.get("throughput_tokens_per_s")
        lines += ["", f"* recommended ({doc.get('objective', 'balanced')}): {_setting_label(best['setting'], varied)}: "
                  f"{best['preemptions']} preemptions, p95 queue {'-' if q is None else f'{q:.2f} s'}, "
                  f"{'-' if tp is None else f'{tp:.1f}'} tokens/s, simulated on this workload"]
    lines += [""] + [f"note: {n}" for n in doc["notes"]]
    return "\n".join(lines) + "\n"


def render_markdown(doc: dict) -> str:
    runs = doc["settings"]
    varied = [k for k in (runs[0]["setting"] if runs else {}) if len({json.dumps(r["setting"][k]) for r in runs}) > 1]
    out = [f"## Simulated settings ({doc['workload']['requests']} requests, {doc['source']['kind']})", "",
           _cost_line(doc["step_cost"]) + ".", "",
           *[x for k in ("about", "step_cost") if doc["source"].get(k) for x in (doc["source"][k] + ".", "")],
           "| setting | " + " | ".join(h for _, h, _ in _COLS) + " |", "| --- |" + " --- |" * len(_COLS)]
    for r in runs:
        mark = (" **(recommended)**" if r["recommended"] else "") + (" (as run)" if r["baseline"] else "")
        out.append(f"| {_setting_label(r['setting'], varied)}{mark} | " + " | ".join(_cells(r)) + " |")
    out += ["", *[f"- {n}" for n in doc["notes"]], ""]
    return "\n".join(out)


def render(doc: dict, fmt: str) -> str:
    if fmt == "html":
        from ..simulate.html import render_html

        return render_html(doc)
    if fmt == "json":
        return json.dumps(_redact_strings(doc), indent=2, allow_nan=False) + "\n"
    return redact(render_markdown(doc) if fmt == "markdown" else render_text(doc))


SIMULATE_CODES = exit_codes(("0", "table printed"), ("3", "bad usage, an unreadable or invalid trace, lab case "
                                                     "or --model-config, a run past --max-steps"))


@click.command("simulate", epilog=SIMULATE_CODES)
@click.option("--trace", "trace", default=None, type=click.Path(dir_okay=False), metavar="FILE",
              help="Request trace: the lab's workload.json, CSV or JSONL (arrival_s, prompt_tokens, output_tokens, "
                   "optional prefix_id, prefix_tokens, max_tokens).")
@click.option("--lab-case", "lab_case", default=None, type=click.Path(file_okay=False), metavar="DIR",
              help="A twin-lab case folder: its workload.json and, from truth.json, the setting it ran with, the "
                   "step-time constants and the run length (each overridable).")
@click.option("--from-metrics", "from_metrics", default=None, type=click.Path(file_okay=False), metavar="DIR",
              help="Synthesise the workload from saved /metrics pages (DIR/metrics/NNNN.prom + times.csv): arrival "
                   "rate per scrape, length histograms, prefix hit rate (kvdiag/simulate/synth.py).")
@click.option("--num-gpu-blocks", default=None, metavar="N[,N...]", help="KV pool size in blocks (vLLM's "
              "num_gpu_blocks, null block included); several: one row each.")
@click.option("--kv-cache-memory", default=None, metavar="GiB",
              help="KV pool as GiB of memory, comma list allowed (needs --model-config): blocks = GiB / (block_size x KV bytes/token).")
@click.option("--model-config", default=None, type=click.Path(dir_okay=False), metavar="FILE",
              help="HF config.json (for --kv-cache-memory).")
@click.option("--kv-cache-dtype", default="auto", show_default=True, type=_kv_dtypes(),
              help="vLLM --kv-cache-dtype, with --kv-cache-memory (auto = model dtype).")
@click.option("--block-size", default=None, metavar="TOKENS", help=f"Tokens per block, comma list allowed (default {DEFAULT_BLOCK_SIZE} "
              "or the lab case's).")
@click.option("--max-num-seqs", default=None, metavar="N[,N...]", help=f"Comma list allowed (default {DEFAULT_MAX_NUM_SEQS} or the lab "
              "case's).")
@click.option("--max-num-batched-tokens", default=None, metavar="TOKENS", help=f"Comma list allowed (default {DEFAULT_MAX_NUM_BATCHED_TOKENS} or "
              "the lab case's).")
@click.option("--enable-prefix-caching/--no-enable-prefix-caching", "prefix_caching", default=None,
              help="Default on (vLLM V1) or the lab case's.")
@click.option("--max-model-len", default=None, type=click.IntRange(16, 1 << 24), metavar="TOKENS",
              help=f"Default {DEFAULT_MAX_MODEL_LEN} or the lab case's.")
@click.option("--step-cost", default=None, metavar="K=V,...",
              help="Step time: overhead_ms, weights_ms, compute_us_per_token, kv_read_ns_per_token [, jitter, seed] "
                   "(the lab's formula; required unless --lab-case gives them; --from-metrics fits them).")
@click.option("--duration", default=None, metavar="DURATION", help="Simulate this long from the first arrival's "
              "origin (e.g. 15m; default: the lab case's run length, or until every request is done).")
@click.option("--max-requests", default=MAX_REQUESTS, show_default=True, type=click.IntRange(1, 10**8),
              metavar="N", help="Refuse a longer trace.")
@click.option("--max-steps", default=20_000_000, show_default=True, type=click.IntRange(1, 10**9), metavar="N",
              help="Stop with an error past this many engine steps per setting.")
@click.option("--objective", default="balanced", show_default=True, type=click.Choice(list(OBJECTIVES)),
              help="What the recommendation optimises: balanced = no preemption and no worse p95 queue time and "
                   "throughput than the setting as run; or preemptions, queue (p95 queue time), throughput.")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "markdown", "html"]), default="text",
              show_default=True)
@click.option("--output", default=None, type=click.Path(dir_okay=False, writable=True), metavar="FILE",
              help="Write the table here instead of standard output.")
@click.option("--debug", is_flag=True, help="Show tracebacks.")
def simulate_cmd(trace, lab_case, from_metrics, num_gpu_blocks, kv_cache_memory, model_config, kv_cache_dtype, block_size,
                 max_num_seqs, max_num_batched_tokens, prefix_caching, max_model_len, step_cost, duration,
                 max_requests, max_steps, objective, fmt, output, debug) -> None:
    """What-if: replay a workload under other settings (pool, block size, max_num_seqs, ...) with a model of vLLM
    V1's scheduler and block pool; one row per setting: preemptions, KV usage, waiting queue, queue time,
    prefix-cache hit rate. All numbers are simulated."""
    from ..extras import require_html

    require_html(fmt)  # the kvdiag[html] extra: one line when matplotlib is missing
    if output is not None and not output.strip():
        raise click.UsageError("--output '': expected a file path (leave --output out to write to standard output)")
    if output:  # before any work: never write the table over an input (the trace, a lab case's files, the config)
        import os

        from ..fileio import check_output_target

        inputs = [trace or "", model_config or ""]
        for folder in (lab_case, from_metrics):
            if folder and os.path.isdir(folder):
                inputs += [os.path.join(dp, f) for dp, _dn, fs in os.walk(folder) for f in fs][:10000]
        check_output_target(output, "--output", inputs)
    if sum(x is not None for x in (trace, lab_case, from_metrics)) != 1:
        raise click.UsageError("give exactly one of --trace FILE, --lab-case DIR or --from-metrics DIR")
    base: Setting | None = None
    base_cost = None
    start_s = 0.0
    dur = None
    if lab_case:
        case = load_lab_case(lab_case)
        reqs, base, base_cost = case["requests"], case["setting"], case["step_cost"]
        start_s, dur = case["start_s"], case["duration_s"]
        if len(reqs) > max_requests:
            raise InputError(f"{lab_case}/workload.json: more than {max_requests:,} requests: expected at most "
                             f"{max_requests:,} (raise the cap with --max-requests)")
        source = {"kind": "lab-case", "path": str(lab_case), "mode": case["mode"]}
    elif from_metrics:
        from ..simulate.synth import synthesize

        syn = synthesize(from_metrics)
        reqs, dur = syn["requests"], syn["duration_s"]
        if len(reqs) > max_requests:
            raise InputError(f"{from_metrics}: {len(reqs):,} requests synthesised: expected at most {max_requests:,} "
                             "(raise the cap with --max-requests)")
        f = syn["facts"]
        if "num_gpu_blocks" in f:
            base = Setting(num_gpu_blocks=f["num_gpu_blocks"], block_size=f.get("block_size", DEFAULT_BLOCK_SIZE),
                           enable_prefix_caching=f.get("enable_prefix_caching", True))
        source = {"kind": "from-metrics", "path": str(from_metrics), "about": syn["about"]}
    else:
        reqs, meta = load_trace(trace, max_requests)
        source = {"kind": "trace", "path": str(trace), "format": meta["format"], "mode": meta.get("mode", "open")}
    if not reqs:
        raise InputError(f"{trace or lab_case or from_metrics}: no requests: expected at least one")
    if from_metrics and not step_cost:  # fitted from the pages' step counts and token counts (synth.py)
        from ..simulate.synth import fit_step_cost

        base_cost, fitted = fit_step_cost(from_metrics)
        source["step_cost"] = fitted
    cost = parse_step_cost(step_cost, base_cost)
    if duration is not None:
        try:
            dur = parse_duration(duration)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--duration") from None
        if not 0 < dur <= 366 * 86400:
            raise click.BadParameter(f"{duration!r}: expected a duration above 0, at most 366d", param_hint="--duration")
    bss = _int_list("--block-size", block_size, 1, MAX_BLOCK_SIZE_OPTION) or [base.block_size if base else DEFAULT_BLOCK_SIZE]
    seqs = _int_list("--max-num-seqs", max_num_seqs, 1, 1 << 20) or [base.max_num_seqs if base else DEFAULT_MAX_NUM_SEQS]
    mnbt = _int_list("--max-num-batched-tokens", max_num_batched_tokens, 1, 1 << 24) or \
        [base.max_num_batched_tokens if base else DEFAULT_MAX_NUM_BATCHED_TOKENS]
    pc = base.enable_prefix_caching if (prefix_caching is None and base) else (True if prefix_caching is None else prefix_caching)
    mml = max_model_len or (base.max_model_len if base else DEFAULT_MAX_MODEL_LEN)
    if num_gpu_blocks and kv_cache_memory:
        raise click.UsageError("give --num-gpu-blocks or --kv-cache-memory, not both")
    pools: list[tuple[str, Any]] = []
    if num_gpu_blocks:
        pools = [("blocks", n) for n in _int_list("--num-gpu-blocks", num_gpu_blocks, 2, MAX_BLOCKS)]
    elif kv_cache_memory:
        if not model_config:
            raise click.UsageError("--kv-cache-memory needs --model-config FILE (the KV bytes per token)")
        pools = [("gib", g) for g in _float_list("--kv-cache-memory", kv_cache_memory, 0, 1 << 20)]
    elif base:
        pools = [("blocks", base.num_gpu_blocks)]
    else:
        raise click.UsageError("give the pool: --num-gpu-blocks N or --kv-cache-memory GiB --model-config FILE")
    combos = list(itertools.product(pools, bss, seqs, mnbt))
    if len(combos) > MAX_SETTINGS:
        raise click.UsageError(f"{len(combos)} settings: at most {MAX_SETTINGS} per run (fewer values per option)")
    settings = []
    for (kind, val), bs, ms, nbt in combos:
        if kind == "blocks" and base and bs != base.block_size and not num_gpu_blocks:
            nb = max(2, (base.num_gpu_blocks - 1) * base.block_size // bs + 1)  # same KV memory, other block size
        elif kind == "blocks":
            nb = int(val)
        else:
            nb = _blocks_from_memory(val, model_config, bs, kv_cache_dtype)
            if nb < 2:
                raise click.BadParameter(f"{val:g} GiB holds {nb} blocks of {bs} tokens: expected room for at least "
                                         "2 (the null block and one)", param_hint="--kv-cache-memory")
        if nb > MAX_BLOCKS:
            given = f"{val:g} GiB holds {nb:,} blocks of {bs} tokens" if kind != "blocks" else f"{nb:,} blocks"
            raise click.BadParameter(f"{given}: at most {MAX_BLOCKS:,}",
                                     param_hint="--num-gpu-blocks" if kind == "blocks" else "--kv-cache-memory")
        settings.append(Setting(num_gpu_blocks=nb, block_size=bs, max_num_seqs=ms, max_num_batched_tokens=nbt,
                                enable_prefix_caching=pc, max_model_len=mml))
    too_long = [r for r in reqs if r.prompt_tokens >= mml]
    if too_long:
        r = too_long[0]
        raise InputError(f"{trace or lab_case or from_metrics}: request {r.id}: prompt_tokens {r.prompt_tokens:,} is not below "
                         f"max_model_len {mml:,}: vLLM rejects it (expected prompts shorter than --max-model-len)")
    runs = []
    for s in settings:
        try:
            res = simulate(reqs, s, cost, duration_s=dur, start_s=start_s, max_steps=max_steps)
        except SimulationLimit as exc:
            raise InputError(f"setting {s.to_dict()}: {exc} (--max-steps): expected a window of traffic that the "
                             "engine can serve; shorten it with --duration or raise --max-steps") from None
        runs.append(res.to_dict())
    doc = build_document(source, runs, cost, dur, base.to_dict() if base else None, objective)
    doc["workload"] = summarize(reqs)
    text = render(doc, fmt)
    if output:
        from ..export import write_output

        write_output(output, text, "--output")
    else:
        click.echo(text, nl=False)


simulate_cmd.name = "simulate"
