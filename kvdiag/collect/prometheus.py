"""Read a fleet of vLLM servers from a Prometheus HTTP API server (Prometheus, Thanos, Mimir, VictoriaMetrics).

Rates, increases and quantiles are computed by the server with PromQL, never by pulling raw
samples: counters come as ``increase()`` over the window (counter resets handled by Prometheus),
histograms as ``histogram_quantile()`` of bucket increases and Δsum/Δcount, the prefix-cache hit
rate as Δhits/Δqueries; only the gauges the rules judge over time (KV usage, running, waiting)
come as ``query_range`` series at ``step``. Every query matches both spellings of a name
(``vllm:x`` as vLLM writes it, ``vllm_x`` as a Prometheus 2.x server stores a current
prometheus-client's output, and ``ray_vllm:x``), and prefers the new name of a renamed metric
(``A or B`` per instance, :data:`kvdiag.signals.METRIC_ALIASES`). Results are grouped by the
``instance`` label: one :class:`~kvdiag.bundle.Bundle` per instance.

API: ``GET /api/v1/query`` and ``/api/v1/query_range`` (prometheus.io/docs/prometheus/latest/querying/api/).
"""

from __future__ import annotations

from datetime import datetime, timezone
import json
import math
import re
import time

from ..bundle import Bundle, InputInfo, iso
from ..durations import parse_duration
from ..errors import InputError, ScrapeError
from ..redaction import redact
from ..signals import SIGNALS, WINDOW_HISTOGRAMS
from .. import vllm_metrics as vm
from ..thresholds import HIGH_LOAD, HIGH_USAGE, LOW_LOAD, MIN_SHARE
from .metrics import HttpOptions, cache_config_facts, http_get, make_session, out_of_domain, safe_url

MAX_RESPONSE_BYTES = 64 * 2**20
"""The cap on one answer, checked while it streams (issue 28: a gzip bomb or an endless answer is refused at 64 MiB,
~160 MB of RSS): a range query over 1,000 instances x 6 h at 15 s is ~45 MB of JSON; a larger answer would take GBs
once parsed (narrow --selector or raise --step)."""
_PREFIX = "(?:ray_)?vllm[:_]"

#: The signals read as gauge series at ``step``; ``prefix_cache_hit_rate_cumulative`` (V0's cumulative gauge) is read
#: only through its rate (below), ``process_start_time`` not at all.
_RANGE_GAUGES = ("kv_cache_usage", "num_requests_running", "num_requests_waiting", "num_requests_swapped",
                 "cpu_cache_usage", "num_requests_waiting_capacity")
# signal -> (aggregation across an instance's series, metric names best first, extra matchers), from the one table
GAUGES: dict[str, tuple[str, tuple[str, ...], str]] = {
    s: (vm.TABLE[s].across_series, vm.names(s), vm.promql_matcher(s)) for s in _RANGE_GAUGES}
_EVICTIONS = "kv_block_idle_before_evict"  # sampled evictions of cached blocks (--kv-cache-metrics, 0.16+): PFX003
COUNTERS: dict[str, tuple[str, ...]] = {
    **{s: vm.wire(s) for s, row in vm.TABLE.items() if row.type == "counter"},
    f"{_EVICTIONS}_count": (vm.histogram_base(_EVICTIONS) + "_count",),
}
#: Window facts a fleet query asks for, where not all three (mean, p50, p95): the residency histograms are evidence
#: beside PFX003, which needs only the idle median (and the count, a counter above).
_FLEET_HISTOGRAM_FACTS = {vm.histogram_base(stem): facts for stem, facts in (
    ("kv_block_lifetime", ("p50",)), ("kv_block_reuse_gap", ("p50",)), (_EVICTIONS, ("p50", "p95")))}
_HIT_PAIRS = tuple(zip(vm.wire("prefix_cache_hits"), vm.wire("prefix_cache_queries")))
_USAGE = vm.names("kv_cache_usage")[0]


# --- time ---------------------------------------------------------------------------------------
def parse_time(value: str) -> float:
    """RFC 3339 (``2026-01-02T03:04:05Z``, offsets allowed) or Unix seconds → Unix seconds.

    Raises:
        InputError: neither form.
    """
    v = value.strip()
    try:
        return float(v)
    except ValueError:
        pass
    try:
        dt = datetime.fromisoformat(v.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise InputError(f"{value!r} is not a time: expected RFC 3339 (2026-01-02T03:04:05Z) or Unix seconds") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.timestamp()


MAX_WINDOW_SECONDS = 366 * 86400
"""Longest --since window kvdiag asks a Prometheus server for."""
MAX_POINTS_PER_SERIES = 11000
"""Prometheus refuses range queries of more than 11,000 points per series; --step is raised to stay below."""


def effective_step(start: float, end: float, step: float) -> float:
    """``step`` raised so that a range query over ``[start, end]`` stays within 11,000 points per series."""
    return max(step, (end - start) / (MAX_POINTS_PER_SERIES - 1))


def parse_window(since: str, until: str | None, now: float | None = None) -> tuple[float, float]:
    """``--since`` / ``--until`` → ``(start, end)`` Unix seconds.

    ``until``: RFC 3339 or Unix seconds, default now. ``since``: a duration back from ``until``
    (``6h``, ``90m``) or an absolute time.

    Raises:
        InputError: unreadable values, or a window that does not run forward.
    """
    end = parse_time(until) if until else (time.time() if now is None else now)
    if not (0 <= end <= 4102444800):  # 1970 .. 2100
        raise InputError(f"--until {until}: expected a time between 1970 and 2100")
    try:
        start = end - parse_duration(since)
    except ValueError:
        start = parse_time(since)
    if not (0 <= start <= 4102444800) or end - start > MAX_WINDOW_SECONDS:
        raise InputError(f"--since {since}: expected a window of at most {MAX_WINDOW_SECONDS // 86400} days "
                         "(a duration like 6h or a time after 1970)")
    if start >= end:
        raise InputError(f"--since {since} is not before --until {until or 'now'}: the window must run forward")
    return start, end


def _dur(seconds: float) -> str:
    return f"{max(1, int(round(seconds)))}s"


def _res(seconds: float) -> str:
    """A subquery resolution PromQL accepts: whole seconds, or whole milliseconds below / between them."""
    return f"{int(seconds)}s" if seconds == int(seconds) else f"{max(1, int(round(seconds * 1000)))}ms"


# --- PromQL -------------------------------------------------------------------------------------
_MATCHER = re.compile(r'\s*[a-zA-Z_][a-zA-Z0-9_]*\s*(=~|!~|!=|=)\s*"(?:[^"\\]|\\.)*"\s*')


def matchers(selector: str) -> str:
    """``'{job="vllm"}'`` → ``'job="vllm"'`` (validated), ``''`` for no selector.

    Raises:
        InputError: not a list of ``name op "value"`` matchers in braces.
    """
    s = (selector or "").strip()
    if not s:
        return ""
    if not (s.startswith("{") and s.endswith("}")):
        raise InputError(f"--selector {selector!r}: expected label matchers in braces, e.g. '{{job=\"vllm\"}}'")
    body = s[1:-1].strip().rstrip(",")
    if not body:
        return ""
    pos = 0
    while pos < len(body):
        m = _MATCHER.match(body, pos)
        if not m:
            raise InputError(f"--selector {selector!r}: cannot read the matcher at {body[pos:][:30]!r}")
        pos = m.end()
        if pos < len(body):
            if body[pos] != ",":
                raise InputError(f"--selector {selector!r}: expected ',' between matchers")
            pos += 1
    if "__name__" in body:
        raise InputError(f"--selector {selector!r}: do not match __name__; kvdiag picks the vLLM metrics itself")
    return body


def series(name: str, sel: str, extra: str = "") -> str:
    """A selector for one vLLM metric in every spelling: ``{__name__=~"(?:ray_)?vllm[:_]NAME",SEL}``."""
    parts = [f'__name__=~"{_PREFIX}{re.escape(name)}"'] + [p for p in (sel, extra) if p]
    return "{" + ",".join(parts) + "}"


def _alternatives(exprs: list[str]) -> str:
    return " or ".join(f"({e})" for e in exprs) if len(exprs) > 1 else exprs[0]


class PromClient:
    """A small Prometheus HTTP API client over a requests session (retries, headers, TLS of ``opts``)."""

    def __init__(self, url: str, opts: HttpOptions | None = None) -> None:
        self.base = url.rstrip("/")
        for suffix in ("/api/v1/query", "/api/v1", "/graph"):
            if self.base.endswith(suffix):
                self.base = self.base[: -len(suffix)]
        self.shown = safe_url(self.base)
        self.opts = opts or HttpOptions()
        self.session = make_session(opts=self.opts)
        self.queries = 0
        self.seconds = 0.0

    def _get(self, path: str, params: dict, need: str = "value") -> list:
        """One API call → ``data.result``, checked: a list of ``{"metric": {labels}, "value": [t, "number"]}``
        (vector) or ``{"metric": …, "values": [[t, "number"], …]}`` (matrix).

        Raises:
            ScrapeError: unreachable, not JSON, an error answer (its text redacted and cut short), or a
                malformed answer (the message names the URL and what was expected).
        """
        url = f"{self.base}{path}"
        shown = f"{self.shown}{path}"
        t0 = time.monotonic()
        body, _ctype, status = http_get(self.session, url, self.opts.timeout, params=params, accept="application/json",
                                        max_bytes=MAX_RESPONSE_BYTES, what="a Prometheus API answer")
        self.seconds += time.monotonic() - t0
        self.queries += 1
        from ..inputs.promapi import answer

        data = answer(body, shown, status)  # the input layer: JSON with depth and number bounds
        if not isinstance(data, dict) or "status" not in data:
            raise ScrapeError(f"{shown}: HTTP {status}, not a Prometheus API answer (expected a JSON object with "
                              "\"status\")")
        if data["status"] != "success":
            err = redact(" ".join(str(data.get("error", "?")).split()))
            err = err if len(err) <= 160 else err[:160] + "…"
            raise ScrapeError(f"{shown}: query failed ({str(data.get('errorType', 'error'))[:40]}: {err}) "
                              f"for: {params.get('query', '')[:200]}")
        inner = data.get("data")
        result = inner.get("result") if isinstance(inner, dict) else None
        if not isinstance(result, list):
            raise ScrapeError(f"{shown}: HTTP {status}, malformed Prometheus API answer: expected data.result "
                              "to be a list")
        for i, r in enumerate(result):
            problem = _bad_item(r) or ("" if need in r else f"\"{need}\"")
            if problem:
                raise ScrapeError(f"{shown}: HTTP {status}, malformed Prometheus API answer: data.result[{i}]: "
                                  f"expected {problem}")
        return result

    def query(self, q: str, t: float) -> list:
        """Instant query at Unix time ``t``; the ``result`` list (vector)."""
        return self._get("/api/v1/query", {"query": q, "time": f"{t:.3f}"})

    def query_range(self, q: str, start: float, end: float, step: float) -> list:
        """Range query; the ``result`` list (matrix)."""
        return self._get("/api/v1/query_range", {"query": q, "start": f"{start:.3f}", "end": f"{end:.3f}",
                                                  "step": f"{step:g}"}, need="values")


def _bad_point(p) -> bool:
    if not isinstance(p, (list, tuple)) or len(p) != 2 or isinstance(p[0], bool):
        return True
    from ..inputs.promapi import timestamp

    try:
        float(p[1])
    except (TypeError, ValueError, OverflowError):
        return True
    return timestamp(p[0]) is None  # the one timestamp range of every input (1970 .. 2200)


def _bad_item(r) -> str:
    """What one ``data.result`` item should have been ('' when it is well formed)."""
    if not isinstance(r, dict):
        return "an object with \"metric\" and \"value\"/\"values\""
    metric = r.get("metric", {})
    if not isinstance(metric, dict) or not all(isinstance(v, str) for v in metric.values()):
        return "\"metric\" to be an object of label names to strings"
    if "value" in r and _bad_point(r["value"]):
        return "\"value\" to be [unix_time, \"number\"]"
    if "values" in r and (not isinstance(r["values"], list) or any(_bad_point(p) for p in r["values"])):
        return "\"values\" to be a list of [unix_time, \"number\"]"
    if "value" not in r and "values" not in r:
        return "\"value\" or \"values\""
    return ""


# --- the fleet ----------------------------------------------------------------------------------
def _inst(r: dict) -> str:
    return r.get("metric", {}).get("instance", "")


def _re_literal(value: str) -> str:
    """A label value as an RE2 literal inside a PromQL double-quoted string."""
    lit = re.sub(r"([.^$*+?()\[\]{}|\\])", r"\\\1", value)
    return lit.replace("\\", "\\\\").replace('"', '\\"')


def collect_fleet(url: str, selector: str, start: float, end: float, step: float, http: HttpOptions | None = None,
                  notes: list | None = None, batch: int = 50) -> list[tuple[str, Bundle]]:
    """All of :func:`iter_fleet` as a list."""
    return list(iter_fleet(url, selector, start, end, step, http, notes, batch))


def iter_fleet(url: str, selector: str, start: float, end: float, step: float, http: HttpOptions | None = None,
               notes: list | None = None, batch: int = 50):
    """Query a Prometheus server for every vLLM instance ``selector`` matches over ``[start, end]``.

    Yields ``(instance, bundle)`` sorted by instance. The instances are found first (any vLLM gauge
    in the window), then queried ``batch`` at a time (``instance=~"a|b|…"``), so memory stays
    bounded however large the fleet. Each bundle holds: the gauges of :data:`GAUGES` at ``step``
    (source ``promql:…@TIME``); each counter of :data:`COUNTERS` as two rows, 0 at ``start`` and
    ``increase(X[window])`` at ``end`` (so a rule's ``increase`` is the server's);
    ``counter_resets`` from ``resets()``; window facts (``*_mean``, ``*_p50``, ``*_p95``,
    ``prefix_cache_hit_rate_window`` / ``_early`` / ``_late`` / ``_drop``); the ``cache_config_info``
    labels as facts. ``notes`` (a list) receives one summary line at the end.

    Raises:
        ScrapeError: the server is unreachable, answers with an error, or holds no vLLM series.
        InputError: a bad ``selector``.
    """
    sel = matchers(selector)
    client = PromClient(url, http)
    w = _dur(end - start)
    names = "|".join(re.escape(n) for _agg, ns, _x in GAUGES.values() for n in ns)
    found = client.query(f'count by (instance) (last_over_time({{__name__=~"{_PREFIX}(?:{names})"'
                         + (f",{sel}" if sel else "") + f"}}[{w}]))", end)
    instances = sorted({_inst(r) for r in found})
    if not instances:
        kv = series(_USAGE, sel)
        raise ScrapeError(f"{client.shown}: no vLLM series for {selector or 'any instance'} between {iso(start)} and "
                          f"{iso(end)} (looked for {kv} and the other vLLM gauges, both vllm: and vllm_ names)")
    points = 0
    for i in range(0, len(instances), batch):
        part = instances[i:i + batch]
        inst_sel = f'instance=~"{"|".join(_re_literal(x) for x in part)}"' if any(part) else 'instance=""'
        dropped: dict = {}
        bundles, n = _collect_batch(client, ",".join(x for x in (sel, inst_sel) if x), start, end, step, dropped)
        points += n
        for inst in sorted(bundles):
            b = bundles.pop(inst)
            info = InputInfo(kind="prometheus", name=f"{client.shown} instance={inst}", records=1,
                             observations=len(b))
            why = dropped.get(inst)
            if why:
                info.notes.append(f"{sum(why.values())} value(s) out of their domain skipped ("
                                  + "; ".join(f"{k} ×{v}" for k, v in sorted(why.items())) + ")")
            b.inputs.append(info)
            yield inst or "(no instance label)", b
    if notes is not None:
        notes.append(f"prometheus {client.shown}: {len(instances)} instance(s), {client.queries} PromQL queries, "
                     f"{points:,} gauge points at step {step:g}s, window {iso(start)} .. {iso(end)}; server time "
                     f"{client.seconds:.2f}s")


def _collect_batch(client: PromClient, sel: str, start: float, end: float, step: float,
                   dropped: dict | None = None) -> tuple[dict, int]:
    """The queries of :func:`iter_fleet` for the instances ``sel`` matches → ``({instance: bundle}, points)``.

    Gauge points and counter increases out of their signal's domain (NaN, ±Inf, negative, a ratio
    above 1) are skipped and counted in ``dropped`` (``{instance: {"signal: why": n}}``)."""
    window = end - start
    w = _dur(window)
    step = min(step, max(1.0, window))  # a step beyond the window would reach before it
    bundles: dict[str, Bundle] = {}
    n_points = 0
    dropped = {} if dropped is None else dropped

    def bundle(inst: str) -> Bundle:
        b = bundles.get(inst)
        if b is None:
            b = bundles[inst] = Bundle()
        return b

    def bad(inst: str, signal: str, v: float) -> bool:
        why = out_of_domain(signal, v)
        if why:
            per = dropped.setdefault(inst, {})
            per[f"{signal}: {why}"] = per.get(f"{signal}: {why}", 0) + 1
            key_lost = bundle(inst).__dict__.setdefault("dropped_values", {})
            key_lost[signal] = key_lost.get(signal, 0) + 1
        return bool(why)

    for signal, (agg, names, extra) in GAUGES.items():
        q = _alternatives([f"{agg} by (instance) ({series(n, sel, extra)})" for n in names])
        src_q = f"promql:{agg} by (instance) ({'|'.join(names)})@"
        sources: dict[float, str] = {}
        for r in client.query_range(q, start, end, step):
            inst = _inst(r)
            points = []
            for t, v in r.get("values", []):
                t, v = float(t), float(v)
                if (math.isnan(v) or v < 0 or v > 1e18 or (v > 1 + 1e-9 and SIGNALS[signal].unit == "ratio")) \
                        and bad(inst, signal, v):
                    continue
                src = sources.get(t)
                if src is None:  # one string per step, shared by every instance
                    src = sources[t] = src_q + iso(t)
                points.append((t, v, src))
            bundle(inst).extend(signal, points)
            n_points += len(points)
    at_end, at_start = iso(end), iso(start)
    usage = _alternatives([f"max by (instance) ({series(n, sel)})" for n in GAUGES["kv_cache_usage"][1]])
    q = f"avg_over_time(((({usage}) >= bool {HIGH_USAGE}))[{w}:{_res(step)}])"
    for r in client.query(q, end):
        v = float(r["value"][1])
        if not math.isnan(v):
            src = f"promql:avg_over_time((kv_cache_usage >= bool {HIGH_USAGE})[{w}:{_res(step)}])@{at_end}"
            bundle(_inst(r)).add("kv_cache_usage_high_ratio", v, src, t=end)
            bundle(_inst(r)).add("kv_cache_usage_high_seconds", v * window, src + f" × {window:.0f}s", t=end)
    for signal, names in COUNTERS.items():
        q = _alternatives([f"sum by (instance) (increase({series(n, sel)}[{w}]))" for n in names])
        src = f"promql:sum by (instance) (increase({names[0]}[{w}]))"
        for r in client.query(q, end):
            v = float(r["value"][1])
            if math.isnan(v) or bad(_inst(r), signal, v):  # NaN: no samples in the window, not a fault
                continue
            b = bundle(_inst(r))
            b.add(signal, 0.0, f"{src} start@{at_start}", t=start)
            b.add(signal, v, f"{src}@{at_end}", t=end)
    preemptions = vm.wire("num_preemptions")[0]
    q = f"sum by (instance) (resets({series(preemptions, sel)}[{w}]))"
    for r in client.query(q, end):
        v = float(r["value"][1])
        if math.isnan(v) or v == 0:  # NaN: no samples in the window
            continue
        if not bad(_inst(r), "counter_resets", v) and math.isfinite(v) and v > 0:  # 1e400 → inf: dropped, counted
            bundle(_inst(r)).add("counter_resets", v, f"promql:resets({preemptions}[{w}])@{at_end}", t=end,
                                 text="num_preemptions")
    for base, (stem, _unit, _what) in WINDOW_HISTOGRAMS.items():
        wanted = _FLEET_HISTOGRAM_FACTS.get(base, ("mean", "p50", "p95"))
        q = (f"sum by (instance) (increase({series(base + '_sum', sel)}[{w}])) / "
             f"sum by (instance) (increase({series(base + '_count', sel)}[{w}]))")
        if "mean" in wanted:
            _facts(client.query(q, end), bundle, f"{stem}_mean", f"promql:Δ{base}_sum/Δ{base}_count[{w}]@{at_end}",
                   end)
        for qv, suffix in ((0.5, "p50"), (0.95, "p95")):
            if suffix not in wanted:
                continue
            q = f"histogram_quantile({qv}, sum by (instance, le) (increase({series(base + '_bucket', sel)}[{w}])))"
            _facts(client.query(q, end), bundle, f"{stem}_{suffix}",
                   f"promql:histogram_quantile({qv}, {base}_bucket[{w}])@{at_end}", end)

    def hit_rate(at: float, rng: str) -> list:
        return client.query(_alternatives([
            f"sum by (instance) (increase({series(h, sel)}[{rng}])) / sum by (instance) (increase({series(q_, sel)}[{rng}]))"
            for h, q_ in _HIT_PAIRS]), at)

    _facts(hit_rate(end, w), bundle, "prefix_cache_hit_rate_window", f"promql:Δhits/Δqueries[{w}]@{at_end}", end)
    third = _dur(window / 3)
    early_at = start + window / 3
    early = {(_inst(r)): float(r["value"][1]) for r in hit_rate(early_at, third)}
    late = {(_inst(r)): float(r["value"][1]) for r in hit_rate(end, third)}
    for inst, e in early.items():
        lt = late.get(inst)
        if lt is None or math.isnan(e) or math.isnan(lt):
            continue
        b = bundle(inst)
        b.add("prefix_cache_hit_rate_early", e, f"promql:Δhits/Δqueries[{third}]@{iso(early_at)}", t=early_at)
        b.add("prefix_cache_hit_rate_late", lt, f"promql:Δhits/Δqueries[{third}]@{at_end}", t=end)
        if 0 <= e <= 1 and 0 <= lt <= 1:
            b.add("prefix_cache_hit_rate_drop", e - lt, "derived: early − late, promql hit rates", t=end)
    # hit and query tokens per second in the first and last third (kvdiag/derive/dynamics.py; PFX004 / OK006): V1
    # counters as rate(); V0's cumulative hit rate × prompt_tokens_total (queries ∝ prompt tokens) as deriv() of the
    # product over a subquery
    third_s = _dur(window / 3)
    sub_res = _res(step)

    def per_second(at: float, which: str) -> dict:
        v1 = [f"sum by (instance) (rate({series(h if which == 'hits' else q_, sel)}[{third_s}]))" for h, q_ in _HIT_PAIRS]
        v0_q = series(vm.wire("prompt_tokens")[0], sel)
        v0_rate = series(vm.names("prefix_cache_hit_rate_cumulative")[0], sel)
        v0 = (f"sum by (instance) (deriv(({v0_rate} * {v0_q})[{third_s}:{sub_res}]))"
              if which == "hits" else f"sum by (instance) (rate({v0_q}[{third_s}]))")
        expr = _alternatives(v1) + f" or ({v0} unless on (instance) ({series(_HIT_PAIRS[0][0], sel)} or "\
               f"{series(_HIT_PAIRS[1][0], sel)}))"
        return {_inst(r): float(r["value"][1]) for r in client.query(expr, at)}

    rates = {(w_, k): per_second(at, w_) for w_ in ("hits", "queries") for k, at in (("early", early_at), ("late", end))}
    for inst in rates[("hits", "late")]:
        vals = {key: rates[key].get(inst) for key in rates}
        if any(v is None or not math.isfinite(v) or v < 0 for v in vals.values()):
            continue
        b = bundle(inst)
        for (w_, k), v in vals.items():
            at = iso(early_at) if k == "early" else at_end
            b.add(f"prefix_cache_{w_}_per_second_{k}", v, f"promql:{w_} tokens/s over [{third_s}]@{at}", t=end)
        he, hl, qe, ql = (vals[("hits", "early")], vals[("hits", "late")], vals[("queries", "early")],
                          vals[("queries", "late")])
        if not b.has("prefix_cache_hit_rate_early") and qe > 0 and ql > 0 and he <= qe and hl <= ql:
            # no hit counters (V0): the thirds' hit rates from the same per-second figures (the de-cumulated gauge)
            b.add("prefix_cache_hit_rate_early", he / qe, f"derived: hits/s / queries/s, first third (promql)", t=end)
            b.add("prefix_cache_hit_rate_late", hl / ql, f"derived: hits/s / queries/s, last third (promql)", t=end)
            b.add("prefix_cache_hit_rate_drop", he / qe - hl / ql, "derived: early − late (promql)", t=end)
        for w_ in ("hits", "queries"):
            if vals[(w_, "early")] > 0:
                b.add(f"prefix_cache_{w_}_per_second_ratio", vals[(w_, "late")] / vals[(w_, "early")],
                      f"derived: {w_}/s late {vals[(w_, 'late')]:,.1f} / early {vals[(w_, 'early')]:,.1f} (promql)", t=end)
    # the hit rate split by KV usage (PFX002): per-step increases summed where usage was low / high
    # at most ~500 sub-steps: the split needs minutes, not the gauge resolution; each increase window spans four
    # sub-steps (always two samples), and the overlap cancels in the ratios
    sub_step = max(step, math.ceil(window / 500))
    s_rng = _dur(max(4 * sub_step, 60.0))
    sub = f"[{w}:{_res(sub_step)}]"

    def summed(name: str, cond: str = "") -> str:
        inc = f"sum by (instance) (increase({series(name, sel)}[{s_rng}]))"
        if cond:
            inc = f"({inc} and on (instance) (({usage}) {cond}))"
        return f"sum_over_time({inc}{sub})"

    def sums(kind: int, cond: str = "") -> dict[str, float]:  # kind 0: hits, 1: queries
        expr = _alternatives([summed(pair[kind], cond) for pair in _HIT_PAIRS])
        return {_inst(r): float(r["value"][1]) for r in client.query(expr, end)}

    q_all = sums(1)  # five subqueries; the ratios are taken here
    sides = {}
    for key, cond in (("low", f"< {LOW_LOAD}"), ("high", f">= {HIGH_LOAD}")):
        h_side, q_side = sums(0, cond), sums(1, cond)
        sides[key] = {i: (h_side.get(i, math.nan) / q if q > 0 else math.nan,
                          q / q_all[i] if q_all.get(i, 0) > 0 else math.nan) for i, q in q_side.items()}
    for inst, (lo, lo_share) in sides["low"].items():
        b = bundle(inst)
        hi_share = sides["high"].get(inst, (math.nan, 0.0))[1]
        if lo_share + (0.0 if math.isnan(hi_share) else hi_share) > 1.01:  # sides hold more queries than the whole
            b.skipped_derived.append(f"prefix-cache hit rate by load not used: the low- and high-load query sums "
                                     f"({lo_share:.0%} + {hi_share:.0%}) exceed the window's queries")
            continue
        if math.isnan(lo) or not lo_share >= MIN_SHARE:
            continue
        src = (f"promql:Σincrease(hits)/Σincrease(queries) where kv_cache_usage < {LOW_LOAD:.0%} "
               f"({lo_share:.0%} of the queries){sub}@{at_end}")
        b.add("prefix_cache_hit_rate_low_load", lo, src, t=end)
        hi, hi_share = sides["high"].get(inst, (math.nan, math.nan))
        if math.isnan(hi) or not hi_share >= MIN_SHARE:
            continue
        if not (0 <= lo <= 1 and 0 <= hi <= 1):  # hits above queries: the rates are refused (and noted) below
            b.add("prefix_cache_hit_rate_high_load", hi, "promql:hit rate at high load", t=end)
            continue
        b.add("prefix_cache_hit_rate_high_load", hi,
              f"promql:Σincrease(hits)/Σincrease(queries) where kv_cache_usage ≥ {HIGH_LOAD:.0%} "
              f"({hi_share:.0%} of the queries){sub}@{at_end}", t=end)
        b.add("prefix_cache_hit_rate_load_drop", lo - hi, f"derived: {lo:.1%} at low load − {hi:.1%} at high load, "
                                                          "promql", t=end)
    # the usage gauge split across API-server processes (label pid; vLLM PR 28792): series per engine at the end
    usage_sel = series(_USAGE, sel)
    n_series = {_inst(r): float(r["value"][1]) for r in client.query(
        f"max by (instance) (count by (instance, engine) (group by (instance, engine, pid) ({usage_sel})))", end)}
    split_mean = {_inst(r): float(r["value"][1]) for r in client.query(
        f"max by (instance) (avg by (instance, engine) (max by (instance, engine, pid) ({usage_sel})))", end)}
    for inst, n in n_series.items():
        src = f"promql:count by (instance, engine) ({_USAGE} per pid)@{at_end}"
        if not (math.isfinite(n) and n == int(n) and 1 <= n <= 100_000):
            bundle(inst).skipped_derived.append(f"kv_cache_usage_series = {n:.6g} not used: not a count of series")
            continue
        bundle(inst).add("kv_cache_usage_series", n, src, t=end)
        if n > 1 and inst in split_mean and 0 <= split_mean[inst] <= 1:
            bundle(inst).add("kv_cache_usage_split_mean", split_mean[inst],
                             f"promql:avg by (instance, engine) ({_USAGE} per pid)@{at_end}", t=end)
    for r in client.query(f"last_over_time({series(vm.INFO_NAME, sel)}[{w}])", end):
        cache_config_facts(bundle(_inst(r)), r["metric"],
                           f"promql:{vm.INFO_NAME}{{instance=\"{_inst(r)}\"}}@{at_end}", end)
    return bundles, n_points


def _facts(result: list, bundle, signal: str, src: str, t: float) -> None:
    assert signal in SIGNALS, signal
    for r in result:
        v = float(r["value"][1])
        if math.isnan(v) or math.isinf(v):
            continue
        bundle(_inst(r)).add(signal, v, src, t=t)
