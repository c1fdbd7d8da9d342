"""Simulated outcomes for the verdict's remedies (``kvdiag analyze --trace FILE --step-cost …``).

When the operator gives the window's request trace, the remedies of the firing ``capacity_pressure`` and
``partial_block_waste`` findings get one more line: what the scheduler model (:mod:`kvdiag.simulate.model`)
says that traffic would have done as the server ran and under the remedy's settings, labelled as simulated.
The server's setting comes from what kvdiag read (``num_gpu_blocks``, ``block_size``, ``max_num_seqs``,
``enable_prefix_caching``, ``max_model_len``); a value the inputs did not give is vLLM's default and the line says
it was assumed.
"""

from __future__ import annotations

import dataclasses

from ..vllm_defaults import DEFAULT_BLOCK_SIZE, DEFAULT_MAX_NUM_BATCHED_TOKENS, DEFAULT_MAX_NUM_SEQS
from .model import DEFAULT_MAX_MODEL_LEN, Setting, SimulationLimit, StepCost, simulate

CLASSES = ("capacity_pressure", "partial_block_waste")


def _fact(bundle, name):
    got = bundle.last(name)
    return None if got is None else got[0]


def setting_from_bundle(bundle) -> tuple[Setting | None, list[str]]:
    """The server's setting from the bundle's facts → ``(Setting or None, assumed)``; None without a pool size."""
    blocks = _fact(bundle, "num_gpu_blocks")
    if blocks is None or not float(blocks) >= 2:
        return None, []
    assumed = []
    vals = {}
    for name, default in (("block_size", DEFAULT_BLOCK_SIZE), ("max_num_seqs", DEFAULT_MAX_NUM_SEQS),
                          ("max_num_batched_tokens", DEFAULT_MAX_NUM_BATCHED_TOKENS),
                          ("max_model_len", DEFAULT_MAX_MODEL_LEN)):
        v = _fact(bundle, name)
        if v is None:
            assumed.append(f"{name} {default}")
            v = default
        vals[name] = int(float(v))
    pc = _fact(bundle, "enable_prefix_caching")
    if pc is None:
        assumed.append("prefix caching on")
        pc = True
    return Setting(num_gpu_blocks=int(float(blocks)), enable_prefix_caching=bool(pc), **vals), assumed


def _describe(r) -> str:
    q = r.queue_time_p95_s
    return (f"{r.preemptions} preemption{'' if r.preemptions == 1 else 's'}, mean KV usage {r.kv_cache_usage_mean:.0%}, "
            f"p95 queue {'-' if q is None else f'{q:.1f} s'}")


def cite(report, bundle, requests, cost: StepCost, duration_s: float | None, source: str) -> list[str]:
    """Append simulated outcomes to the remedies of the firing findings of :data:`CLASSES`; returns notes (why
    nothing was simulated, or what was assumed)."""
    firing = [f for f in report.findings if f.status == "fires" and f.cls in CLASSES]
    if not firing:
        return []
    base, assumed = setting_from_bundle(bundle)
    if base is None:
        return [f"--trace {source}: not simulated: the inputs do not give num_gpu_blocks (cache_config_info or the "
                "'GPU KV cache size' log line)"]
    too_long = next((r for r in requests if r.prompt_tokens >= base.max_model_len), None)
    if too_long is not None:  # as `kvdiag simulate` refuses it: vLLM never schedules such a prompt
        return [f"--trace {source}: not simulated: request {too_long.id}: prompt_tokens {too_long.prompt_tokens:,} "
                f"is not below max_model_len {base.max_model_len:,} (vLLM rejects it)"]
    try:
        ran = simulate(requests, base, cost, duration_s=duration_s)
        label = ("kvdiag's scheduler model on the --trace workload, run until its requests are done; not "
                 "measured")
        lines = {}
        for f in firing:
            alts: list[tuple[str, Setting]] = []
            if f.cls == "capacity_pressure":
                peak = max(2, ran.num_requests_running_max)
                fit = _fact(bundle, "max_num_seqs_fit")  # the cap CAP001's own remedy proposes
                cands = {max(1, peak * 3 // 4), max(1, peak // 2)} | ({int(float(fit))} if fit and fit >= 1 else set())
                for m in sorted(cands, reverse=True):
                    if m < base.max_num_seqs:
                        alts.append((f"max_num_seqs {m}", dataclasses.replace(base, max_num_seqs=m)))
                for k, why in ((1.5, "1.5x the KV pool (higher gpu_memory_utilization)"),
                               (2.0, "2x the KV pool (--kv-cache-dtype fp8)")):
                    alts.append((why, dataclasses.replace(base, num_gpu_blocks=int((base.num_gpu_blocks - 1) * k) + 1)))
            else:
                if base.block_size > DEFAULT_BLOCK_SIZE:
                    nb = (base.num_gpu_blocks - 1) * base.block_size // DEFAULT_BLOCK_SIZE + 1
                    alts.append((f"block_size {DEFAULT_BLOCK_SIZE} (same KV memory)",
                                 dataclasses.replace(base, block_size=DEFAULT_BLOCK_SIZE, num_gpu_blocks=nb)))
            parts = [f"as run ({base.num_gpu_blocks} blocks x {base.block_size}, max_num_seqs "
                     f"{base.max_num_seqs}): {_describe(ran)}"]
            for what, s in alts:
                parts.append(f"{what}: {_describe(simulate(requests, s, cost, duration_s=duration_s))}")
            lines[f.rule_id] = f"Simulated ({label}): " + "; ".join(parts) + "."
    except SimulationLimit as exc:
        return [f"--trace {source}: not simulated: {exc}"]
    for f in firing:
        f.remedy.append(lines[f.rule_id])
    notes = []
    if assumed:
        notes.append(f"--trace {source}: simulated with vLLM defaults the inputs did not give: {', '.join(assumed)}")
    return notes


def prepare(trace: str | None, step_cost: str | None, several: bool) -> dict:
    """Check ``analyze``'s ``--trace`` / ``--step-cost`` before any work → ``{"keep": [], "cite": f(report)}``
    (``keep`` receives the analysed bundle). Raises click.UsageError / InputError (one line)."""
    import click

    from .document import parse_step_cost
    from .workload import load_trace

    if not trace or not step_cost:
        raise click.UsageError("--trace and --step-cost go together: the trace is simulated with that step time")
    if several:
        raise click.UsageError("--trace belongs to one server: not with several --metrics-url or --prometheus-url")
    cost = parse_step_cost(step_cost, None)
    requests, _ = load_trace(trace)
    if not requests:
        from ..errors import InputError

        raise InputError(f"{trace}: no requests: expected at least one")
    keep: list = []

    def run(report) -> list[str]:
        return cite(report, keep[0], requests, cost, None, trace) if keep else []

    return {"keep": keep, "cite": run}
