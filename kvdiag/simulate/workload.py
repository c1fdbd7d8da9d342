"""Workload input of ``kvdiag simulate``: a request trace (the twin lab's ``workload.json``, CSV or JSON Lines),
checked row by row, and the deployment of a lab case (``truth.json``).

Trace rows (CSV header / JSONL keys; the lab's ``workload.json`` has its own ``columns``):

* ``arrival_s`` (seconds from the start of the trace, non-decreasing in CSV/JSONL; ``workload.json`` rows are
  replayed in arrival order, as the lab lists closed-loop runs in planned order), ``prompt_tokens`` (>= 1, the whole
  prompt), ``output_tokens`` (>= 1, tokens generated before the request stops);
* optional ``prefix_id`` (requests with the same id share their first ``prefix_tokens`` prompt tokens, token for
  token), ``prefix_tokens`` (0 .. prompt_tokens), ``max_tokens`` (the client's cap).

In ``workload.json`` the prompt is ``prefix_tokens + unique_tokens`` (the lab's columns). Every error names the
file, the row (line for CSV/JSONL) and the field, and says what was expected: :class:`kvdiag.errors.InputError`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Iterable

from ..errors import InputError
from ..inputs import jsondoc, table
from ..inputs.files import read_text
from ..vllm_defaults import MAX_BLOCK_SIZE
from .model import MAX_BLOCKS, Request, Setting, StepCost

MAX_REQUESTS = 200_000  # default cap (~120 MB, about a minute): a longer trace is refused; --max-requests raises it
MAX_TOKENS_PER_REQUEST = 10_000_000
MAX_ARRIVAL_S = 366 * 86400.0


def _shown(v: Any) -> str:
    """A field's value for a message: at most 40 characters (a 5,000-digit number is not echoed whole)."""
    text = repr(v) if not isinstance(v, int) or isinstance(v, bool) or abs(v) < 10 ** 40 else repr(str(v))
    return text if len(text) <= 40 else text[:40] + "…"


def _as_float(v: Any) -> float | None:
    """``v`` (a CSV string or a JSON number, already bounded by :mod:`kvdiag.inputs`) as a float, else ``None``."""
    if isinstance(v, bool) or (isinstance(v, str) and len(v.strip()) > 48):
        return None
    try:
        return float(v)
    except (TypeError, ValueError, OverflowError):
        return None


def _int_field(where: str, name: str, v: Any, lo: int, hi: int, optional: bool = False) -> int | None:
    if v is None or v == "":
        if optional:
            return None
        raise InputError(f"{where}: {name} is missing: expected an integer from {lo:,} to {hi:,}")
    f = _as_float(v)
    if f is None or not math.isfinite(f) or f != int(f) or not lo <= f <= hi:
        raise InputError(f"{where}: {name} is {_shown(v)}: expected an integer from {lo:,} to {hi:,}")
    return int(f)


def _arrival(where: str, v: Any) -> float:
    f = _as_float(v)
    if f is None:
        raise InputError(f"{where}: arrival_s is {_shown(v)}: expected seconds (a number >= 0)")
    if not math.isfinite(f) or not 0 <= f <= MAX_ARRIVAL_S:
        raise InputError(f"{where}: arrival_s is {_shown(v)}: expected seconds from 0 to {MAX_ARRIVAL_S:,.0f}")
    return f


def _row(where: str, d: dict, prev_arrival: float, idx: int) -> Request:
    arr = _arrival(where, d.get("arrival_s"))
    if arr < prev_arrival:
        raise InputError(f"{where}: arrival_s {arr:g} is before the previous row's {prev_arrival:g}: "
                         "expected rows sorted by arrival_s")
    prompt = _int_field(where, "prompt_tokens", d.get("prompt_tokens"), 1, MAX_TOKENS_PER_REQUEST)
    out = _int_field(where, "output_tokens", d.get("output_tokens"), 1, MAX_TOKENS_PER_REQUEST)
    pid = _int_field(where, "prefix_id", d.get("prefix_id"), 0, 2**62, optional=True)
    plen = _int_field(where, "prefix_tokens", d.get("prefix_tokens"), 0, MAX_TOKENS_PER_REQUEST, optional=True) or 0
    if plen > prompt:
        raise InputError(f"{where}: prefix_tokens {plen} is more than prompt_tokens {prompt}: "
                         "expected the shared prefix to be part of the prompt")
    if plen and pid is None:
        raise InputError(f"{where}: prefix_tokens {plen} without a prefix_id: expected both or neither")
    mt = _int_field(where, "max_tokens", d.get("max_tokens"), 1, MAX_TOKENS_PER_REQUEST, optional=True)
    rid = d.get("id", idx)
    return Request(arrival_s=arr, prompt_tokens=prompt, output_tokens=out, prefix_id=pid, prefix_tokens=plen,
                   max_tokens=mt, id=rid if isinstance(rid, int) else idx)


def _check_count(path: str, n: int, cap: int) -> None:
    if n > cap:
        raise InputError(f"{path}: more than {cap:,} requests: expected at most {cap:,} "
                         "(a window of traffic; raise the cap with --max-requests)")


def load_trace(path: str, max_requests: int = MAX_REQUESTS) -> tuple[list[Request], dict]:
    """Requests of a trace file, sorted check included → ``(requests, meta)``; ``meta`` has ``format`` and,
    for the lab's ``workload.json``, ``serving_start_unix`` and ``mode``. Raises :class:`InputError`."""
    p = Path(path)
    if p.is_dir():
        raise InputError(f"{path}: is a folder: expected a trace file (workload.json, .csv or .jsonl)")
    # a trace row takes at most ~60 bytes (CSV/JSONL) and the lab's ~70: refuse a file that cannot be under the
    # cap before reading it (the input layer reads at most that much)
    limit = max(64, max_requests) * 96
    try:
        size = p.stat().st_size
    except OSError as exc:
        raise InputError(f"{path}: cannot read the trace ({exc.strerror or exc.__class__.__name__})") from None
    if size > limit:
        raise InputError(f"{path}: {size:,} bytes is too large for {max_requests:,} requests: expected a window of "
                         "traffic (raise the cap with --max-requests)")
    text = read_text(path, limit, "a trace file (workload.json, .csv or .jsonl)")
    head = text[:4096]
    stripped = head.lstrip()
    if p.suffix.lower() == ".csv" or (stripped and stripped[0] not in "{["):
        return _load_csv(path, text, max_requests), {"format": "csv"}
    if p.suffix.lower() in (".jsonl", ".ndjson") or (stripped.startswith("{") and "\n{" in head
                                                      and '"requests"' not in head):
        return _load_jsonl(path, text, max_requests), {"format": "jsonl"}
    return _load_workload_json(path, text, max_requests)


def _load_csv(path: str, text: str, cap: int) -> list[Request]:
    header, rows = table.rows_of_text(text, path, ("arrival_s", "prompt_tokens", "output_tokens"),
                                      "CSV rows of arrival_s, prompt_tokens, output_tokens (optional prefix_id, "
                                      "prefix_tokens, max_tokens)")
    out: list[Request] = []
    prev = 0.0
    for i, (ln, d) in enumerate(rows):
        _check_count(path, i + 1, cap)
        r = _row(f"{path}:{ln}", d, prev, i)
        prev = r.arrival_s
        out.append(r)
    return out


def _load_jsonl(path: str, text: str, cap: int) -> list[Request]:
    out: list[Request] = []
    prev = 0.0
    for ln, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        d = jsondoc.loads(line, path, "one request object per line", line=ln)
        if not isinstance(d, dict):
            raise InputError(f"{path}:{ln}: a {type(d).__name__}: expected one request object per line")
        _check_count(path, len(out) + 1, cap)
        r = _row(f"{path}:{ln}", d, prev, len(out))
        prev = r.arrival_s
        out.append(r)
    return out


def _sort_key(row: Any, cols: list) -> float:
    try:
        v = float(row[cols.index("arrival_s")])
        return v if math.isfinite(v) else 0.0
    except (TypeError, ValueError, IndexError, KeyError):
        return 0.0  # the row check below names the problem


def _load_workload_json(path: str, text: str, cap: int) -> tuple[list[Request], dict]:
    doc = jsondoc.loads(text, path, "the lab's workload.json")
    if not isinstance(doc, dict) or not isinstance(doc.get("requests"), list) or not isinstance(doc.get("columns"), list):
        raise InputError(f"{path}: expected the lab's workload.json (an object with 'columns' and 'requests')")
    cols = doc["columns"]
    need = {"arrival_s", "prefix_id", "prefix_tokens", "unique_tokens", "output_tokens"}
    if not need <= set(cols):
        raise InputError(f"{path}: columns {cols}: expected {sorted(need)}")
    rows = doc["requests"]
    _check_count(path, len(rows), cap)
    out: list[Request] = []
    prev = 0.0
    # a closed-loop run lists its requests as the clients planned them, not by arrival: replay them in arrival
    # order (ties: planned order, as the lab's queue of pending requests keeps them)
    order = sorted(range(len(rows)), key=lambda i: (_sort_key(rows[i], cols), i))
    for i in order:
        row = rows[i]
        where = f"{path}: requests[{i}]"
        if not isinstance(row, list) or len(row) != len(cols):
            raise InputError(f"{where}: expected a list of {len(cols)} values ({', '.join(cols)})")
        d = dict(zip(cols, row))
        uniq = _int_field(where, "unique_tokens", d.get("unique_tokens"), 0, MAX_TOKENS_PER_REQUEST)
        plen = _int_field(where, "prefix_tokens", d.get("prefix_tokens"), 0, MAX_TOKENS_PER_REQUEST) or 0
        d = dict(d, prompt_tokens=uniq + plen)
        r = _row(where, d, prev, i)
        prev = r.arrival_s
        out.append(r)
    start = doc.get("serving_start_unix", 0.0)
    if not isinstance(start, (int, float)) or isinstance(start, bool) or not math.isfinite(start):
        start = 0.0
    return out, {"format": "workload.json", "serving_start_unix": float(start), "mode": doc.get("mode", "open")}


def _check_truth(path: Path, t: dict, setting: Setting, cost: StepCost, duration: float, start: float) -> None:
    """The values of a lab case's ``truth.json`` in the domains the command-line options have.

    Raises:
        InputError: the first field out of its domain, named with its allowed range.
    """
    def bad(field: str, value, expected: str):
        raise InputError(f"{path}: {field} = {str(value)[:40]}: expected {expected}")

    for field, value, lo, hi in (("num_gpu_blocks", setting.num_gpu_blocks, 2, MAX_BLOCKS),
                                 ("block_size", setting.block_size, 1, MAX_BLOCK_SIZE),
                                 ("deployment.max_num_seqs", setting.max_num_seqs, 1, 1 << 20),
                                 ("deployment.max_num_batched_tokens", setting.max_num_batched_tokens, 1, 1 << 30),
                                 ("deployment.max_model_len", setting.max_model_len, 1, 1 << 30)):
        if not lo <= value <= hi:
            bad(field, value, f"an integer from {lo:,} to {hi:,}")
    if not isinstance(t["deployment"]["enable_prefix_caching"], bool):
        bad("deployment.enable_prefix_caching", t["deployment"]["enable_prefix_caching"], "true or false")
    for name in ("overhead_ms", "weights_ms", "compute_us_per_token", "kv_read_ns_per_token"):
        v = getattr(cost, name)
        if not (math.isfinite(v) and 0 <= v <= 1e6):
            bad(f"step_cost_model.{name}", v, "a finite number from 0 to 1e6")
    if not (math.isfinite(duration) and 0 < duration <= 1e8):
        bad("clock.duration_s", duration, "seconds, more than 0 and at most 1e8")
    from ..numbers import MAX_UNIX_S

    if not (math.isfinite(start) and 0 <= start <= MAX_UNIX_S):
        bad("clock.serving_start_unix", start, "Unix seconds from 1970 to 2200")


def load_lab_case(folder: str) -> dict:
    """A twin-lab case folder → ``{"requests", "setting", "step_cost", "duration_s", "start_s", "mode"}`` from its
    ``workload.json`` and ``truth.json`` (pool, block size, max_num_seqs, max_num_batched_tokens, prefix
    caching, max_model_len, step-cost constants and run length). Jitter is left out (0): the scenario's seed is
    not in the case; give ``jitter=…,seed=…`` in ``--step-cost`` to draw it."""
    d = Path(folder)
    truth_p = d / "truth.json"
    if not (d / "workload.json").is_file() or not truth_p.is_file():
        raise InputError(f"{folder}: expected a twin-lab case folder with workload.json and truth.json")
    reqs, meta = load_trace(str(d / "workload.json"))
    t = jsondoc.load(str(truth_p), 16 * 1024 * 1024, "the lab's truth.json")
    try:
        dep = t["deployment"]
        sc = t["step_cost_model"]
        setting = Setting(num_gpu_blocks=int(t["num_gpu_blocks"]), block_size=int(t["block_size"]),
                          max_num_seqs=int(dep["max_num_seqs"]), max_num_batched_tokens=int(dep["max_num_batched_tokens"]),
                          enable_prefix_caching=bool(dep["enable_prefix_caching"]), max_model_len=int(dep["max_model_len"]))
        cost = StepCost(float(sc["overhead_ms"]), float(sc["weights_ms"]), float(sc["compute_us_per_token"]),
                        float(sc["kv_read_ns_per_token"]))
        duration = float(t["clock"]["duration_s"])
        start = float(t["clock"]["serving_start_unix"])
        kv_bytes = int(dep.get("kv_bytes_per_token") or 0)
    except (OSError, ValueError, KeyError, TypeError, AttributeError, OverflowError) as exc:
        what = f"field {exc.args[0]!r} missing" if isinstance(exc, KeyError) else "a field of the wrong type"
        raise InputError(f"{truth_p}: {what}: expected the lab's truth.json (num_gpu_blocks, block_size, deployment, "
                         "step_cost_model, clock)") from None
    _check_truth(truth_p, t, setting, cost, duration, start)
    return {"requests": reqs, "setting": setting, "step_cost": cost, "duration_s": duration, "start_s": start,
            "mode": meta.get("mode", "open"), "kv_bytes_per_token": kv_bytes, "truth": t}


def summarize(requests: Iterable[Request]) -> dict:
    """Counts and length percentiles of a workload (tokens)."""
    rs = list(requests)
    if not rs:
        return {"requests": 0}
    p = sorted(r.prompt_tokens for r in rs)
    o = sorted(r.output_tokens for r in rs)

    def q(s, x):
        return s[min(len(s) - 1, int(x * (len(s) - 1) + 0.5))]

    return {"requests": len(rs), "span_s": rs[-1].arrival_s - rs[0].arrival_s,
            "prompt_tokens_p50": q(p, .5), "prompt_tokens_p95": q(p, .95),
            "output_tokens_p50": q(o, .5), "output_tokens_p95": q(o, .95),
            "with_shared_prefix": sum(1 for r in rs if r.prefix_id is not None)}


def times_csv(path: str) -> list[tuple[int, float]]:
    """``(sample, unix_time)`` rows of a series folder's or lab case's ``times.csv``, through the input layer (the
    one timestamp range, 1970 .. 2200).

    Raises:
        InputError: ``times.csv:line: …: expected sample,unix_time``.
    """
    from ..numbers import MAX_UNIX_S

    _header, rows = table.rows(path, 64 * 1024 * 1024, ("sample", "unix_time"), "sample,unix_time")
    out = []
    for ln, row in rows:
        k = table.number(f"{path}:{ln}", "sample", row["sample"], 0, 10 ** 9, integer=True)
        t = table.number(f"{path}:{ln}", "unix_time", row["unix_time"], 0, MAX_UNIX_S)
        out.append((int(k), float(t)))
    return out


def lab_ticks(folder: str, truth: dict, seed: int | None) -> list[float]:
    """The times (absolute, sorted) at which the twin lab moved its clock inside a step: every scrape
    (``times.csv``) and every periodic log line (every ``log_interval_s`` plus the lab's drift, drawn from
    ``random.Random(seed + 5)``; left out when ``seed`` is None). Validation only: see ``simulate(lab_ticks=…)``."""
    import random

    out: list[float] = []
    tp = Path(folder) / "times.csv"
    if tp.is_file():
        out += [t for _ln, t in times_csv(str(tp))]
    clock = truth["clock"]
    start, dur = float(clock["serving_start_unix"]), float(clock["duration_s"])
    if seed is not None:
        rng = random.Random(int(seed) + 5)
        t = start
        while True:
            t += float(clock.get("log_interval_s", 10.0)) + rng.uniform(0.0005, 0.004)
            if t > start + dur:
                break
            out.append(t)
    return sorted(out)
