"""``kvdiag diff``: what an upgrade or a flag change did to the start-up memory budget and to the run.

Each side is read and judged exactly as ``kvdiag analyze`` reads and judges it (:func:`kvdiag.analyze.analyze`,
one bundle of signals per side); this module only compares the two bundles and the two finished reports. It parses
no log line itself.

The attribution of the KV pool follows vLLM's own arithmetic (``determine_available_memory``, reference §3.2):

* V0 0.6.6-0.10 (M2) and V1 0.9-0.20: ``KV = total × gpu_memory_utilization − weights − activation peak −
  non-torch``; CUDA graphs are captured after the pool is sized and are not in it.
* V1 0.21+ (``CUDA graph memory profiling is enabled (default since v0.21.0)``, M8; read in the 0.33 wheel,
  ``v1/worker/gpu_worker.py``: ``requested_memory − non_kv_cache_memory − cudagraph_memory_estimate_applied``):
  the CUDA-graph estimate (M9) is subtracted as well.

So ΔKV = Δbudget − Δweights − Δactivation − Δnon-torch − Δ(CUDA graphs counted in the budget) + residual, each term
from its own log line; the residual is what the printed lines do not account for (rounding, memory other lines do
not print). A change of the pool in tokens splits into the memory part and the bytes-per-token part.
"""

from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass

from .bundle import Bundle
from .engine.evaluate import aggregate
from .errors import InputError
from .report.diff_model import DiffResult, DiffRow, Explanation, SideInfo, Term
from .report.model import Report
from .signals import SIGNALS

GIB = 2 ** 30
_ABS_FLOOR = {"requests": 0.5, "ratio": 0.005}  # a mean of 0.1 → 0.3 waiting requests, or 0.2 points of usage, did not move
MOVE_THRESHOLD = 0.005
"""A number that moved by less than this share of its larger value did not move (rounding of printed values,
the jitter of a gauge's mean)."""

BUDGET_LINES: list[tuple[str, str]] = [
    ("gpu_total_bytes", "GPU total memory"),
    ("gpu_memory_utilization", "gpu_memory_utilization"),
    ("gpu_budget_bytes", "budget (total × gpu_memory_utilization)"),
    ("weights_bytes", "weights"),
    ("non_torch_bytes", "non-torch memory"),
    ("activation_peak_bytes", "activation / profile peak"),
    ("peak_torch_memory_bytes", "PyTorch peak (weights + activation, M1)"),
    ("cudagraph_estimate_bytes", "CUDA graphs, estimate (reserved before the pool, 0.21+)"),
    ("cudagraph_bytes", "CUDA graphs, capture"),
    ("kv_cache_memory_bytes", "KV pool memory"),
    ("num_gpu_blocks", "GPU blocks"),
    ("kv_cache_size_tokens", "KV pool tokens (as printed)"),
    ("kv_capacity_tokens", "KV pool tokens (blocks × block size)"),
    ("max_concurrency", "max concurrency"),
]
"""The start-up budget, line by line: (signal, label)."""

CONFIG_LINES: list[tuple[str, str]] = [
    ("model_name", "model"),
    ("vllm_version", "vLLM version"),
    ("engine_generation", "engine"),
    ("quantization", "quantization"),
    ("cache_dtype", "KV cache dtype"),
    ("tensor_parallel_size", "tensor_parallel_size"),
    ("max_model_len", "max_model_len"),
    ("block_size", "block_size"),
    ("max_num_seqs", "max_num_seqs"),
    ("max_num_batched_tokens", "max_num_batched_tokens"),
    ("enable_prefix_caching", "enable_prefix_caching"),
]
"""Configuration lines from signals: (signal, label). The ``non-default args`` keys follow as ``engine_args.KEY``."""

# the 'non-default args' keys a signal line already shows (not repeated as an engine_args row)
_ARG_OF_SIGNAL = {"max_model_len": "max_model_len", "block_size": "block_size", "max_num_seqs": "max_num_seqs",
                  "max_num_batched_tokens": "max_num_batched_tokens", "tensor_parallel_size": "tensor_parallel_size",
                  "gpu_memory_utilization": "gpu_memory_utilization", "cache_dtype": "kv_cache_dtype",
                  "enable_prefix_caching": "enable_prefix_caching", "quantization": "quantization",
                  "model_name": "model"}
_ARGS_SKIPPED = {"model_tag", "model"}

# what moves each budget term (vLLM's code paths): config keys whose change is named as a cause of the term
_CAUSES = {
    "gpu_budget_bytes": ("gpu_memory_utilization", "gpu_total_bytes"),
    "weights_bytes": ("quantization", "model_name", "tensor_parallel_size", "vllm_version"),
    "activation_peak_bytes": ("max_num_batched_tokens", "max_num_seqs", "max_model_len", "vllm_version"),
    "non_torch_bytes": ("tensor_parallel_size", "vllm_version"),
    "cudagraph": ("vllm_version", "max_num_seqs", "engine_args.compilation_config", "engine_args.enforce_eager",
                  "engine_args.cuda_graph_sizes", "engine_args.max_cudagraph_capture_size"),
    "bytes_per_token": ("cache_dtype", "vllm_version", "model_name", "tensor_parallel_size", "engine_args.kv_cache_dtype"),
    "max_model_len": ("max_model_len",),
}
_WHY = {
    "max_num_batched_tokens": "the profile run processes max_num_batched_tokens dummy tokens",
    "max_num_seqs": "the sampler warm-up in the profile allocates logits for max_num_seqs dummy requests, and "
                    "CUDA graphs are captured for batch sizes up to it",
    "max_model_len": "the profile run processes max_num_batched_tokens dummy tokens, and without chunked prefill "
                     "(V0 below 32k context) max_num_batched_tokens defaults to max(max_model_len, 2048)",
    "gpu_memory_utilization": "the budget is total × gpu_memory_utilization",
    "vllm_version": "the accounting differs between versions (CUDA graphs are counted in the budget from 0.21)",
    "cache_dtype": "the KV dtype sets the bytes per token",
    "block_size": "larger blocks leave more of each request's last block empty (partial-block waste)",
}

RUN_LINES: list[tuple[str, str, str]] = [
    ("run.kv_cache_usage_mean", "KV cache usage, mean", "ratio"),
    ("run.kv_cache_usage_max", "KV cache usage, max", "ratio"),
    ("run.preemptions", "preemptions", "requests"),
    ("run.preemptions_per_s", "preemption rate", "requests/s"),
    ("run.num_requests_waiting_mean", "waiting requests, mean", "requests"),
    ("run.num_requests_waiting_max", "waiting requests, max", "requests"),
    ("run.num_requests_running_mean", "running requests, mean", "requests"),
    ("run.prefix_cache_hit_rate", "prefix-cache hit rate", "ratio"),
    ("run.generation_tokens_per_s", "generation throughput", "tokens/s"),
    ("run.prompt_tokens_per_s", "prompt throughput", "tokens/s"),
]

_FAILURES = ("cuda_oom", "kv_capacity_error", "weights_load_failed", "sampler_warmup_oom", "engine_start_failed",
             "startup_crash", "memory_profiling_error", "free_memory_below_request")
_SEVERITY_RANK = {"ok": 0, "warning": 1, "critical": 2}


class DiffRefused(InputError):
    """The two inputs cannot be compared line by line (different models, without ``--allow-different-models``)."""


@dataclass
class Side:
    """One side as read: the inputs, their kinds, the bundle and the finished report of ``kvdiag analyze``."""

    paths: list[str]
    kinds: list[str]
    bundle: Bundle
    report: Report


# --- reading a side: the kinds analyze reads, told apart by content ---------------------------------------------------
_SAMPLE = re.compile(r"^[A-Za-z_:][A-Za-z0-9_:]*(?:\{.*\})?\s+[-+]?(?:[0-9.eE+-]+|NaN|[+-]?Inf)(?:\s+[0-9.eE+-]+)?$")


def sniff(path: str) -> str:
    """``metrics-file`` (a saved /metrics page or an OpenMetrics recording) or ``log``, from the first 64 KiB
    (gzip / zstandard decompressed first).

    Raises:
        InputError: missing, a folder, unreadable, or empty.
    """
    from .collect.logread import open_log
    from .fileio import read_stream_bounded

    with open_log(path) as (stream, _pos, _size):
        try:
            head = read_stream_bounded(stream, 65536)
        except (OSError, EOFError, ValueError) as exc:
            raise InputError(f"{path}: cannot read: {exc}") from None
    text = head.decode("utf-8", errors="replace")
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()][:40]
    if not lines:
        raise InputError(f"{path}: empty, expected a vLLM log, a saved /metrics page or a recording")
    if lines[0].startswith(("# HELP ", "# TYPE ", "# UNIT ", "# EOF")):
        return "metrics-file"
    body = [ln for ln in lines if not ln.startswith("#")]
    if body and sum(bool(_SAMPLE.match(ln)) for ln in body) >= 0.8 * len(body):
        return "metrics-file"
    return "log"


def read_side(paths: list[str], year: int | None = None, rules_dirs: list[str] | None = None) -> Side:
    """Read and judge one side as ``kvdiag analyze`` does (logs with ``--log``, pages and recordings with
    ``--metrics-file``, each told apart by content).

    Raises:
        InputError: an input cannot be read or parsed (the message names it).
        RuleFileError: a rule file under ``rules_dirs`` is invalid.
    """
    from .analyze import analyze

    kinds = [sniff(p) for p in paths]
    logs = [p for p, k in zip(paths, kinds) if k == "log"]
    pages = [p for p, k in zip(paths, kinds) if k == "metrics-file"]
    kept: list[Bundle] = []
    # pages and recordings, gzip / zstandard too (read_metrics_file decompresses them)
    report = analyze(logs=logs, metrics_files=pages, keep=kept, year=year, rules_dirs=list(rules_dirs or []),
                     progress=False)
    return Side(list(paths), kinds, kept[0], report)


def read_prometheus_side(url: str, selector: str, start: float, end: float, step: float, instance: str | None = None,
                         http=None, rules_dirs: list[str] | None = None) -> Side:
    """One side from a Prometheus-API server: the window ``[start, end]`` of the instance ``selector`` matches (or
    ``instance`` among them), read by :func:`kvdiag.collect.prometheus.iter_fleet` and judged as ``analyze
    --prometheus-url`` judges one instance.

    Raises:
        ScrapeError: the server is unreachable, answers with an error, or holds no vLLM series in the window.
        InputError: a bad selector, no such instance, or several instances and no ``instance`` to pick one.
    """
    from .analyze import judge
    from .bundle import iso
    from .collect.prometheus import iter_fleet
    from .engine.model import load_rules

    notes: list[str] = []
    found = list(iter_fleet(url, selector, start, end, step, http=http, notes=notes))
    names = [n for n, _b in found]
    if instance is not None:
        found = [(n, b) for n, b in found if n == instance]
        if not found:
            raise InputError(f"{url}: no instance {instance!r} in {iso(start)} .. {iso(end)} (found: "
                             f"{', '.join(names[:10]) or 'none'})")
    if len(found) > 1:
        raise InputError(f"{url}: the selector {selector or '{}'} matches {len(found)} instances in {iso(start)} .. "
                         f"{iso(end)} ({', '.join(names[:10])}): give --instance, or a selector that picks one")
    name, bundle = found[0]
    verdict, findings = judge(load_rules(list(rules_dirs or [])), bundle)
    window = {"start": iso(start), "end": iso(end)}
    report = Report(verdict=verdict, findings=findings, inputs=[i.to_dict() for i in bundle.inputs], window=window,
                    notes=notes)
    return Side([f"{name} {iso(start)} .. {iso(end)}"], ["prometheus"], bundle, report)


# --- values of a side ---------------------------------------------------------------------------------------------------
def fact(bundle: Bundle, name: str) -> tuple[float | str | None, str]:
    """The last value of a fact signal (its text for a text signal) and its source; ``(None, "")`` when absent."""
    rows = bundle.signal(name)
    if rows.empty:
        return None, ""
    if SIGNALS[name].unit == "text":
        rows = rows[rows["text"].astype(str) != ""]
        if rows.empty:
            return None, ""
        return str(rows["text"].iloc[-1]), str(rows["source"].iloc[-1])
    return bundle.last(name) or (None, "")


def _series(rows):
    """Rows of one signal split per series (the labels of a metric source; one series for log lines)."""
    keys = rows["source"].astype(str).str.replace(r"@[^@]*$", "", regex=True)
    keys = keys.where(keys.str.startswith("metric:"), "log")
    return [g for _, g in rows.groupby(keys, sort=False)]


def _increase(bundle: Bundle, name: str) -> tuple[float | None, float | None, str]:
    """(increase summed over the series, the time span in seconds, source) of a counter; Nones when absent."""
    rows = bundle.signal(name)
    if rows.empty:
        return None, None, ""
    total, spans, srcs = 0.0, [], []
    for g in _series(rows):
        v, src = aggregate(g, "increase", "counter")
        if math.isnan(v):
            continue
        total += v
        ts = g["t"].dropna()
        if len(ts) >= 2:
            spans.append(float(ts.max() - ts.min()))
        srcs.append(src)
    if not srcs:
        return None, None, ""
    return total, (max(spans) if spans else None), srcs[0] + (f" (+{len(srcs) - 1} series)" if len(srcs) > 1 else "")


def run_values(bundle: Bundle) -> dict[str, tuple[float | None, str]]:
    """The run's aggregates (keys of :data:`RUN_LINES`) → (value, source), from the runtime signals of the bundle."""
    out: dict[str, tuple[float | None, str]] = {}

    def gauge(key, name, agg):
        rows = bundle.signal(name)
        rows = rows[rows["value"].notna()] if not rows.empty else rows
        scraped = rows[rows["source"].astype(str).str.startswith("metric:")] if len(rows) else rows
        if len(scraped):  # a page or recording beside its log: the scrapes, not both mixed
            rows = scraped
        if len(rows) >= 1:
            v, src = aggregate(rows, agg, "gauge")
            out[key] = (None if math.isnan(v) else v, src)

    gauge("run.kv_cache_usage_mean", "kv_cache_usage", "mean")
    gauge("run.kv_cache_usage_max", "kv_cache_usage", "max")
    gauge("run.num_requests_waiting_mean", "num_requests_waiting", "mean")
    gauge("run.num_requests_waiting_max", "num_requests_waiting", "max")
    gauge("run.num_requests_running_mean", "num_requests_running", "mean")
    inc, span, src = _increase(bundle, "num_preemptions")
    if inc is not None:
        out["run.preemptions"] = (inc, src)
        if span:
            out["run.preemptions_per_s"] = (inc / span, src)
    hits, _, hsrc = _increase(bundle, "prefix_cache_hits")
    queries, _, _ = _increase(bundle, "prefix_cache_queries")
    if hits is not None and queries:
        out["run.prefix_cache_hit_rate"] = (hits / queries, hsrc)
    else:
        gauge("run.prefix_cache_hit_rate", "prefix_cache_hit_rate", "mean")
    for key, counter, gauge_name in (("run.generation_tokens_per_s", "generation_tokens", "generation_throughput"),
                                     ("run.prompt_tokens_per_s", "prompt_tokens", "prompt_throughput")):
        inc, span, src = _increase(bundle, counter)
        if inc is not None and span:
            out[key] = (inc / span, src)
        else:
            gauge(key, gauge_name, "mean")
    return out


def _version_tuple(v: str | None) -> tuple[int, ...] | None:
    m = re.match(r"v?(\d+)\.(\d+)(?:\.(\d+))?", v or "")
    return tuple(int(x or 0) for x in m.groups()) if m else None


def engine_of(bundle: Bundle) -> tuple[str | None, str]:
    """V0 or V1, and from what: the engine config line, else the lines only one engine prints, else the version."""
    text, src = fact(bundle, "engine_generation")
    if text:
        return str(text), src
    cpu, csrc = fact(bundle, "num_cpu_blocks")
    if cpu is not None and csrc.startswith("log:"):
        return "V0", f"{csrc} ('# GPU blocks: N, # CPU blocks: M' is printed by the V0 executor only)"
    conc, ksrc = fact(bundle, "max_concurrency")
    tokens, tsrc = fact(bundle, "kv_cache_size_tokens")
    if tokens is not None and conc is not None and tsrc.startswith("log:") and ksrc.startswith("log:") \
            and not bundle.has("num_cpu_blocks"):
        return "V1", f"{tsrc} ('GPU KV cache size' with a concurrency line: v1/core/kv_cache_utils.py)"
    version, vsrc = fact(bundle, "vllm_version")
    vt = _version_tuple(version if isinstance(version, str) else None)
    if vt and vt >= (0, 11):
        return "V1", f"{vsrc} (vLLM 0.11+ has only the V1 engine)"
    return None, ""


def engine_args(bundle: Bundle) -> tuple[dict | None, str]:
    """The ``non-default args`` dict of the last start-up (``ast.literal_eval`` of the printed text; ``None`` when
    absent or not a Python literal, e.g. cut at its length limit)."""
    text, src = fact(bundle, "engine_args")
    if not text:
        return None, ""
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None, src
    return (value, src) if isinstance(value, dict) else (None, src)


def _same_model(a: str, b: str) -> bool:
    """One model served under two spellings (a Hugging Face id and a local path ending in its name)."""
    def norm(s):
        return s.rstrip("/").split("/")[-1].lower()
    return norm(a) == norm(b)


# --- the rows --------------------------------------------------------------------------------------------------------------
def _moved(before, after, unit: str, scale: float | None) -> float:
    if before is None and after is None:
        return 0.0
    if before is None or after is None:
        return 1.0
    if isinstance(before, str) or isinstance(after, str):
        return 0.0 if str(before) == str(after) else 1.0
    a, b = float(before), float(after)
    if a == b or abs(b - a) < MOVE_THRESHOLD * max(abs(a), abs(b)) or abs(b - a) < _ABS_FLOOR.get(unit, 0.0):
        return 0.0
    if unit == "bytes" and scale:
        return min(1.0, abs(b - a) / scale)
    den = max(abs(a), abs(b))
    return min(1.0, abs(b - a) / den) if den else 0.0


def _row(section, key, label, unit, bv, bs, av, as_, scale=None, note="") -> DiffRow:
    if unit not in ("text",) and isinstance(bv, float) and isinstance(av, float) and \
            abs(av - bv) <= 1e-9 * max(1.0, abs(av), abs(bv)):
        av = bv
    return DiffRow(section, key, label, unit, bv, av, bs, as_, _moved(bv, av, unit, scale), note)


def _arg_text(v) -> str:
    return repr(v) if not isinstance(v, str) else v


def build_rows(before: Side, after: Side) -> list[DiffRow]:
    """Every line of both sides, per section, the most moved first (unchanged lines last, in their table order)."""
    bb, ab = before.bundle, after.bundle
    budgets = [fact(b, "gpu_budget_bytes")[0] for b in (bb, ab)]
    scale = max([x for x in budgets if isinstance(x, float)], default=None)
    rows: list[DiffRow] = []
    for name, label in BUDGET_LINES:
        (bv, bs), (av, as_) = fact(bb, name), fact(ab, name)
        if bv is None and av is None:
            continue
        rows.append(_row("budget", name, label, SIGNALS[name].unit, bv, bs, av, as_, scale))
    b_args, _ = engine_args(bb)
    a_args, _ = engine_args(ab)
    for name, label in CONFIG_LINES:
        if name == "engine_generation":
            (bv, bs), (av, as_) = engine_of(bb), engine_of(ab)
        else:
            (bv, bs), (av, as_) = fact(bb, name), fact(ab, name)
        if bv is None and av is None:
            continue
        note = ""
        arg = _ARG_OF_SIGNAL.get(name)
        if arg and b_args is not None and a_args is not None and bv != av:
            inb, ina = arg in b_args, arg in a_args
            if not inb and not ina:
                note = "a default on both sides (neither 'non-default args' sets it): the versions' defaults differ"
            elif inb != ina:
                note = f"set on {'BEFORE' if inb else 'AFTER'} only; the other side's value is its version's default"
        unit = "text" if SIGNALS[name].unit in ("text",) else SIGNALS[name].unit
        rows.append(_row("config", name, label, unit, bv, bs, av, as_, note=note))
    if b_args is not None or a_args is not None:
        covered = set(_ARG_OF_SIGNAL.values()) | _ARGS_SKIPPED
        bsrc, asrc = fact(bb, "engine_args")[1], fact(ab, "engine_args")[1]
        for key in sorted(set(b_args or {}) | set(a_args or {})):
            if key in covered:
                continue
            bv = _arg_text(b_args[key]) if b_args and key in b_args else None
            av = _arg_text(a_args[key]) if a_args and key in a_args else None
            note = "" if (b_args is not None and a_args is not None) else "one side prints no 'non-default args'"
            rows.append(_row("config", f"engine_args.{key}", f"--{key.replace('_', '-')}", "text",
                             bv if bv is not None else ("(default)" if b_args is not None else None),
                             bsrc if bv is not None else "",
                             av if av is not None else ("(default)" if a_args is not None else None),
                             asrc if av is not None else "", note=note))
    brun, arun = run_values(bb), run_values(ab)
    both_ran = bool(brun) and bool(arun)
    for key, label, unit in RUN_LINES:
        (bv, bs), (av, as_) = brun.get(key, (None, "")), arun.get(key, (None, ""))
        if bv is None and av is None:
            continue
        note = "" if both_ran else "runtime data on one side only"
        rows.append(_row("run", key, label, unit, bv, bs, av, as_, note=note))
    order = {"budget": 0, "config": 1, "run": 2}
    pos = {id(r): i for i, r in enumerate(rows)}
    rows.sort(key=lambda r: (order[r.section], -r.moved, pos[id(r)]))
    return rows


# --- the explanations -------------------------------------------------------------------------------------------------
def _cudagraph_budgeted(bundle: Bundle) -> tuple[float | None, str, str]:
    """CUDA-graph memory counted in this side's KV budget: (bytes, source, why). 0 before 0.21 (captured after
    the pool is sized); the M9 estimate from 0.21 (``None`` when the log prints none)."""
    version, _ = fact(bundle, "vllm_version")
    vt = _version_tuple(version if isinstance(version, str) else None)
    est, src = fact(bundle, "cudagraph_estimate_bytes")
    if est is not None and (vt is None or vt >= (0, 21)):
        return float(est), src, "estimated and reserved before the pool (0.21+)"
    if vt is not None and vt < (0, 21):
        return 0.0, "", f"not in the budget in {version} (captured after the pool is sized, before 0.21)"
    return None, "", "not printed"


def _changed_config(rows: list[DiffRow]) -> dict[str, DiffRow]:
    """The lines that moved, by key (configuration, and the budget's own settings such as gpu_memory_utilization):
    a value on both sides, or one that 'non-default args' sets on one side only (the other side then has its
    version's default). A line one side simply does not print is not a change."""
    return {r.key: r for r in rows if r.section in ("config", "budget") and r.changed
            and ((r.before is not None and r.after is not None) or r.note.startswith("set on"))}


def _fmt(v: float, unit: str) -> str:
    if unit == "bytes":
        return f"{v / GIB:+.2f} GiB"
    if unit == "tokens":
        return f"{v:+,.0f} tokens"
    return f"{v:+.4g} {unit}"


def _causes(term_key: str, changed: dict[str, DiffRow]) -> list[str]:
    out = []
    for k in _CAUSES.get(term_key, ()):
        r = changed.get(k)
        if r is None:
            continue
        why = _WHY.get(k, "")
        out.append(f"{r.label} {_show(r.before, r.unit)} → {_show(r.after, r.unit)}" + (f" ({r.note})" if r.note else "")
                   + (f": {why}" if why else ""))
    return out


def _show(v, unit: str) -> str:
    from .report.common import _fmt_value

    if unit == "bool" and isinstance(v, (int, float)):
        return "True" if v else "False"
    return "(absent)" if v is None else _fmt_value(v, unit)


def explain(before: Side, after: Side, rows: list[DiffRow]) -> list[Explanation]:
    """The changes kvdiag can attribute: the KV pool's memory, its tokens, the run's preemptions and usage."""
    bb, ab = before.bundle, after.bundle
    changed = _changed_config(rows)
    out: list[Explanation] = []
    (kb, _), (ka, _) = fact(bb, "kv_cache_memory_bytes"), fact(ab, "kv_cache_memory_bytes")
    if isinstance(kb, float) and isinstance(ka, float) and abs(ka - kb) >= 0.01 * GIB:
        out.append(_explain_pool(bb, ab, kb, ka, changed))
    tok = _explain_tokens(bb, ab, changed)
    if tok is not None:
        out.append(tok)
    conc = _explain_concurrency(bb, ab, changed)
    if conc is not None:
        out.append(conc)
    out += _explain_run(rows, changed)
    return out


def _explain_concurrency(bb: Bundle, ab: Bundle, changed: dict[str, DiffRow]) -> Explanation | None:
    """Max concurrency ≈ pool tokens / max_model_len (V0, V1 uniform models): its ratio splits into the two
    factors' ratios (a hybrid model's worst case per request differs; the factors are then only the printed
    lines')."""
    (cb, _), (ca, _) = fact(bb, "max_concurrency"), fact(ab, "max_concurrency")
    if not (isinstance(cb, float) and isinstance(ca, float)) or cb <= 0 or ca <= 0 or abs(ca / cb - 1) < 0.005:
        return None
    terms = []
    (tb, _), (ta, _) = _pool_tokens(bb), _pool_tokens(ab)
    if isinstance(tb, float) and isinstance(ta, float) and tb > 0 and abs(ta / tb - 1) >= 0.005:
        terms.append(Term("kv_cache_size_tokens", f"KV pool tokens ×{ta / tb:.2f} ({tb:,.0f} → {ta:,.0f})", 0.0, "x"))
    elif not (isinstance(tb, float) and isinstance(ta, float)):
        (nb, _), (na, _) = fact(bb, "num_gpu_blocks"), fact(ab, "num_gpu_blocks")
        (sb, _), (sa, _) = fact(bb, "block_size"), fact(ab, "block_size")
        if isinstance(nb, float) and isinstance(na, float) and nb > 0 and sb == sa and abs(na / nb - 1) >= 0.005:
            terms.append(Term("num_gpu_blocks", f"GPU blocks ×{na / nb:.2f} ({nb:,.0f} → {na:,.0f})", 0.0, "x"))
    (mb, _), (ma, _) = fact(bb, "max_model_len"), fact(ab, "max_model_len")
    if isinstance(mb, float) and isinstance(ma, float) and mb > 0 and abs(ma / mb - 1) >= 0.005:
        terms.append(Term("max_model_len", f"max_model_len ×{ma / mb:.2f} ({mb:,.0f} → {ma:,.0f}): each request may "
                                           "need that many more tokens", 0.0, "x"))
    return Explanation("max_concurrency", f"max concurrency {cb:.2f}x → {ca:.2f}x (×{ca / cb:.2f})", ca - cb, "x",
                       "max concurrency ≈ pool tokens / max_model_len (uniform models; hybrid models count a "
                       "request's worst case per KV group)", terms, None)


def _explain_pool(bb: Bundle, ab: Bundle, kb: float, ka: float, changed: dict[str, DiffRow]) -> Explanation:
    delta = ka - kb
    terms: list[Term] = []
    accounted = 0.0
    for name, label, sign in (("gpu_budget_bytes", "budget (total × gpu_memory_utilization)", +1),
                              ("weights_bytes", "weights", -1), ("activation_peak_bytes", "activation / profile peak", -1),
                              ("non_torch_bytes", "non-torch memory", -1)):
        (vb, sb), (va, sa) = fact(bb, name), fact(ab, name)
        if not (isinstance(vb, float) and isinstance(va, float)):
            continue
        amount = sign * (va - vb)
        accounted += amount
        if abs(amount) >= 0.005 * GIB:
            terms.append(Term(name, label, amount, "bytes", f"{sb} → {sa}",
                              f"{_show(vb, 'bytes')} → {_show(va, 'bytes')}", _causes(name, changed), va - vb))
    split = all(isinstance(fact(b, n)[0], float) for b in (bb, ab) for n in ("weights_bytes", "activation_peak_bytes"))
    (pb, spb), (pa, spa) = fact(bb, "peak_torch_memory_bytes"), fact(ab, "peak_torch_memory_bytes")
    if not split and isinstance(pb, float) and isinstance(pa, float):  # M1 (early 0.6): KV = budget − peak − non-torch
        amount = -(pa - pb)
        accounted += amount
        if abs(amount) >= 0.005 * GIB:
            terms.append(Term("peak_torch_memory_bytes", "PyTorch peak of the profile run (weights + activation)",
                              amount, "bytes", f"{spb} → {spa}", f"{_show(pb, 'bytes')} → {_show(pa, 'bytes')}",
                              _causes("activation_peak_bytes", changed), pa - pb))
    (cb, csb, whyb), (ca, csa, whya) = _cudagraph_budgeted(bb), _cudagraph_budgeted(ab)
    if cb is not None and ca is not None:
        amount = -(ca - cb)
        accounted += amount
        if abs(amount) >= 0.005 * GIB:
            terms.append(Term("cudagraph", "CUDA graph memory counted in the budget", amount, "bytes",
                              " → ".join(s for s in (csb, csa) if s),
                              f"BEFORE {_show(cb, 'bytes')} ({whyb}); AFTER {_show(ca, 'bytes')} ({whya})",
                              _causes("cudagraph", changed), ca - cb))
    residual = delta - accounted
    has_budget = any(t.key == "gpu_budget_bytes" for t in terms) or all(
        isinstance(fact(b, "gpu_budget_bytes")[0], float) for b in (bb, ab))
    util = changed.get("gpu_memory_utilization")
    if not has_budget and util is not None and isinstance(util.delta, float) and abs(residual) >= 0.005 * GIB:
        # the log prints no total: what the printed terms leave is the budget's change, total × Δutil
        total = residual / util.delta
        terms.append(Term("gpu_budget_bytes", "budget (total × gpu_memory_utilization, not printed)", residual,
                          "bytes", f"{util.before_source} → {util.after_source}",
                          f"what the printed terms leave; it implies a GPU of {total / GIB:,.2f} GiB total "
                          f"(ΔKV − Σ printed terms) / Δgpu_memory_utilization",
                          _causes("gpu_budget_bytes", changed)))
        residual = 0.0
    terms.sort(key=lambda t: -abs(t.amount))
    return Explanation("kv_cache_memory_bytes", "KV pool memory", delta, "bytes",
                       "KV = total × gpu_memory_utilization − weights − activation peak − non-torch − CUDA graphs "
                       "counted in the budget (0.21+: the M9 estimate; before 0.21: none) (vLLM "
                       "determine_available_memory)", terms, residual)


def _pool_tokens(bundle: Bundle) -> tuple[float | None, str]:
    v, s = fact(bundle, "kv_cache_size_tokens")
    if v is None:
        v, s = fact(bundle, "kv_capacity_tokens")
    return v, s


def _explain_tokens(bb: Bundle, ab: Bundle, changed: dict[str, DiffRow]) -> Explanation | None:
    (tb, tbs), (ta, tas) = _pool_tokens(bb), _pool_tokens(ab)
    if not (isinstance(tb, float) and isinstance(ta, float)) or tb <= 0 or ta == tb:
        return None
    delta = ta - tb
    (kb, kbs), (ka, kas) = fact(bb, "kv_cache_memory_bytes"), fact(ab, "kv_cache_memory_bytes")
    terms: list[Term] = []
    residual = None
    if isinstance(kb, float) and isinstance(ka, float) and kb > 0 and ka > 0:
        bpt_b, bpt_a = kb / tb, ka / ta
        memory_part = (ka - kb) / bpt_b
        per_token_part = delta - memory_part
        if abs(memory_part) >= 0.005 * tb:
            terms.append(Term("kv_cache_memory_bytes", "KV pool memory", memory_part, "tokens", f"{kbs} → {kas}",
                              f"{_show(kb, 'bytes')} → {_show(ka, 'bytes')} at BEFORE's {bpt_b:,.0f} bytes per token"))
        if abs(per_token_part) >= 0.005 * tb:
            terms.append(Term("bytes_per_token", "bytes per token of the pool", per_token_part, "tokens",
                              f"{tbs} → {tas}", f"{bpt_b:,.0f} → {bpt_a:,.0f} bytes per token (KV memory / tokens)",
                              _causes("bytes_per_token", changed)))
        residual = 0.0
    else:
        (nb, _), (na, _) = fact(bb, "num_gpu_blocks"), fact(ab, "num_gpu_blocks")
        (bsb, _), (bsa, _) = fact(bb, "block_size"), fact(ab, "block_size")
        causes = _causes("bytes_per_token", changed)
        r = changed.get("block_size")
        if r is not None:
            causes.append(f"block_size {_show(r.before, r.unit)} → {_show(r.after, r.unit)}: the same memory in "
                          "fewer, larger blocks")
        if isinstance(nb, float) and isinstance(na, float):
            terms.append(Term("num_gpu_blocks", "GPU blocks", delta, "tokens", "",
                              f"{nb:,.0f} × {bsb or '?'} → {na:,.0f} × {bsa or '?'} tokens; the log prints no KV "
                              "memory to split it further", causes))
    terms.sort(key=lambda t: -abs(t.amount))
    return Explanation("kv_cache_size_tokens", "KV pool tokens", delta, "tokens",
                       "tokens = KV memory / bytes per token: a change splits into the memory part and the "
                       "bytes-per-token part (KV dtype, model layout, the version's accounting)", terms, residual)


def _explain_run(rows: list[DiffRow], changed: dict[str, DiffRow]) -> list[Explanation]:
    by = {r.key: r for r in rows if r.section == "run"}
    out = []
    causes = []
    for key in ("block_size", "max_num_seqs", "max_num_batched_tokens", "enable_prefix_caching", "max_model_len",
                "cache_dtype", "vllm_version"):
        r = changed.get(key)
        if r is not None:
            why = {"max_num_seqs": "at most max_num_seqs requests run at once: fewer run, more wait, fewer are "
                                   "preempted",
                   "block_size": _WHY["block_size"] + ": the same requests hold more blocks"}.get(key, _WHY.get(key, ""))
            causes.append(f"{r.label} {_show(r.before, r.unit)} → {_show(r.after, r.unit)}" + (f": {why}" if why else ""))
    pool = next((r for r in rows if r.key in ("kv_cache_size_tokens", "kv_capacity_tokens") and r.changed), None)
    if pool is not None and isinstance(pool.delta, float):
        causes.append(f"{pool.label} {_show(pool.before, pool.unit)} → {_show(pool.after, pool.unit)}")
    for key in ("run.preemptions_per_s", "run.kv_cache_usage_mean", "run.num_requests_waiting_mean"):
        r = by.get(key)
        if r is None or not r.changed or r.delta is None:
            continue
        if key == "run.preemptions_per_s" and by.get("run.preemptions") is not None:
            p = by["run.preemptions"]
            label = f"preemptions {_show(p.before, p.unit)} → {_show(p.after, p.unit)}"
        else:
            label = f"{r.label} {_show(r.before, r.unit)} → {_show(r.after, r.unit)}"
        out.append(Explanation(key, label, r.delta, r.unit,
                               "the same traffic on both sides is assumed; the configuration lines that changed and "
                               "move this (no arithmetic split)",
                               [Term(c.split(" ")[0], c, 0.0, r.unit, "", "", []) for c in causes], None))
    return out


# --- regressions, identity -------------------------------------------------------------------------------------------
_FAILURE_CAUSES = {  # the configuration lines known to bring on each failure (vLLM's code paths)
    "sampler_warmup_oom": ("max_num_seqs", "gpu_memory_utilization", "vllm_version"),
    "kv_capacity_error": ("max_model_len", "gpu_memory_utilization", "max_num_seqs", "vllm_version"),
    "cuda_oom": ("gpu_memory_utilization", "max_num_seqs", "max_num_batched_tokens", "max_model_len", "vllm_version"),
    "engine_start_failed": ("gpu_memory_utilization", "max_model_len", "max_num_seqs", "vllm_version"),
    "startup_crash": ("gpu_memory_utilization", "max_model_len", "max_num_seqs", "vllm_version"),
}


QUEUE_RISE = (1.0, 0.20)
"""A run's mean waiting queue regressed when it rose by more than 1 request and more than 20 %."""
THROUGHPUT_FALL = 0.10
"""Throughput (generation tokens/s, else requests/s finished) regressed when it fell by more than 10 %."""


def _window_value(bundle: Bundle, signal: str, agg: str) -> float | None:
    rows = bundle.signal(signal)
    rows = rows[rows["value"].notna()] if not rows.empty else rows
    if rows.empty or (agg in ("rate", "increase") and len(rows) < 2):
        return None
    value, _ = aggregate(rows.sort_values("seq"), agg, SIGNALS[signal].kind)
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def run_regressions(before: Bundle, after: Bundle) -> list[str]:
    """What the AFTER run did worse while serving, each side over its own window (rates, so windows of different
    lengths compare): a longer queue, less throughput, more preemptions per minute."""
    out = []
    wb, wa = _window_value(before, "num_requests_waiting", "mean"), _window_value(after, "num_requests_waiting", "mean")
    if wb is not None and wa is not None and wa - wb > QUEUE_RISE[0] and wa > wb * (1 + QUEUE_RISE[1]):
        out.append(f"a longer queue: mean waiting {wb:,.1f} → {wa:,.1f} requests")
    for sig, what, unit in (("generation_tokens", "throughput", "generated tokens/s"),
                            ("request_prompt_tokens_count", "throughput", "requests finished/s")):
        tb, ta = _window_value(before, sig, "rate"), _window_value(after, sig, "rate")
        if tb is not None and ta is not None and tb > 0:
            if ta < tb * (1 - THROUGHPUT_FALL):
                out.append(f"less {what}: {tb:,.2f} → {ta:,.2f} {unit} ({ta / tb - 1:+.0%})")
            break
    pb, pa = _window_value(before, "num_preemptions", "rate"), _window_value(after, "num_preemptions", "rate")
    if pb is not None and pa is not None and pa > pb and pa * 60 >= 0.5 + pb * 60:
        out.append(f"more preemptions: {pb * 60:,.1f} → {pa * 60:,.1f} per minute")
    return out


def regressions(before: Side, after: Side, rows: list[DiffRow] | None = None) -> list[str]:
    """What AFTER lost: fewer KV tokens (or KV memory), a failure BEFORE did not have (with the changed lines known
    to bring it on), a worse run (:func:`run_regressions`: queue, throughput, preemptions), a worse verdict."""
    changed = _changed_config(rows or [])
    out = []
    (tb, _), (ta, tas) = _pool_tokens(before.bundle), _pool_tokens(after.bundle)
    if isinstance(tb, float) and isinstance(ta, float) and ta < tb:
        out.append(f"fewer KV tokens: {tb:,.0f} → {ta:,.0f} ({tas})")
    elif tb is None or ta is None:
        (kb, _), (ka, kas) = fact(before.bundle, "kv_cache_memory_bytes"), fact(after.bundle, "kv_cache_memory_bytes")
        if isinstance(kb, float) and isinstance(ka, float) and ka < kb:
            out.append(f"less KV memory: {kb / GIB:.2f} → {ka / GIB:.2f} GiB ({kas})")
    for name in _FAILURES:
        if after.bundle.has(name) and not before.bundle.has(name):
            src = str(after.bundle.signal(name)["source"].iloc[0])
            causes = [f"{r.label} {_show(r.before, r.unit)} → {_show(r.after, r.unit)}"
                      for k in _FAILURE_CAUSES.get(name, ()) if (r := changed.get(k)) is not None]
            out.append(f"a new failure: {SIGNALS[name].description} ({src})"
                       + (f"; changed: {', '.join(causes)}" if causes else ""))
    out += run_regressions(before.bundle, after.bundle)
    vb, va = before.report.verdict, after.report.verdict
    if _SEVERITY_RANK.get(va.severity, 0) > _SEVERITY_RANK.get(vb.severity, 0):
        def show(v):
            return "could not judge" if v.primary == "inconclusive" else f"{v.primary} ({v.severity})"
        out.append(f"a worse verdict: {show(vb)} → {show(va)}")
    return out


def _side_info(side: Side) -> SideInfo:
    model, _ = fact(side.bundle, "model_name")
    version, _ = fact(side.bundle, "vllm_version")
    v = side.report.verdict
    name = " + ".join(side.paths)
    kind = " + ".join(side.kinds)
    return SideInfo(name, kind, model if isinstance(model, str) else None,
                    version if isinstance(version, str) else None, v.primary, v.severity, v.summary,
                    side.report.exit_code, list(side.report.notes))


def compare(before: Side, after: Side, allow_different_models: bool = False,
            fail_on_regression: bool = False) -> DiffResult:
    """The diff of two sides already read.

    Raises:
        DiffRefused: the sides serve different models and ``allow_different_models`` is false.
    """
    bi, ai = _side_info(before), _side_info(after)
    warnings = []
    if bi.model and ai.model and not _same_model(bi.model, ai.model):
        msg = (f"BEFORE serves {bi.model} ({fact(before.bundle, 'model_name')[1]}), AFTER serves {ai.model} "
               f"({fact(after.bundle, 'model_name')[1]}): different models have different budgets")
        if not allow_different_models:
            raise DiffRefused(msg + "; kvdiag compares one model before and after a change (give "
                                    "--allow-different-models to compare anyway)")
        warnings.append(msg + " (compared on request: the lines are not like for like)")
    elif not (bi.model and ai.model):
        warnings.append("the model is not known on " + ("either side" if not (bi.model or ai.model) else
                        "BEFORE" if not bi.model else "AFTER") + ": not checked that both serve the same model")
    rows = build_rows(before, after)
    for side, info in (("BEFORE", before), ("AFTER", after)):
        starts = info.bundle.signal("startup_segments")
        k_runs = getattr(info.bundle, "runs_in_log", None)
        if k_runs and len(k_runs[1]) > 1:
            k, runs = k_runs
            warnings.append(f"{side} holds {len(runs)} server runs (from lines "
                            f"{', '.join(str(r['line']) for r in runs[:4])}): run {k + 1} is compared, no number of "
                            "another run is used")
        elif len(starts) > 1:
            warnings.append(f"{side} holds {len(starts)} start-ups ({', '.join(starts['source'].astype(str)[:4])}): "
                            "each line shows its last value, from the last start-up that printed it")
        if not any(info.bundle.has(n) for n, _ in BUDGET_LINES if n not in ("max_concurrency",)):
            warnings.append(f"{side} has no start-up memory lines (a page or recording without the log?)")
    return DiffResult(bi, ai, rows, explain(before, after, rows), regressions(before, after, rows), warnings,
                      fail_on_regression)


def diff_inputs(before: list[str], after: list[str], year: int | None = None, rules_dirs: list[str] | None = None,
                allow_different_models: bool = False, fail_on_regression: bool = False) -> DiffResult:
    """Read, judge and compare two sides (each: one or more files of the kinds ``kvdiag analyze`` reads).

    Raises:
        InputError: an input cannot be read or parsed.
        DiffRefused: different models (see :func:`compare`).
        RuleFileError: a rule file is invalid.
    """
    b = read_side(before, year=year, rules_dirs=rules_dirs)
    a = read_side(after, year=year, rules_dirs=rules_dirs)
    return compare(b, a, allow_different_models, fail_on_regression)
