"""Issue 25: never "healthy" on a server in trouble.

Must show 1: on every page of both shared vLLM 0.33 series and every lab fixture (V1 and V0 names), and every window
of 1-10 consecutive pages ending there, no ``healthy`` verdict while, in that window, the waiting queue grew (more
waiting at the end than at the start, waiting on the last two pages — or waiting on every page of 3+), a page had
requests waiting at KV usage at or above vLLM's near-full admission level, or a preemption was counted; and the
``check`` status honours the perfdata thresholds it prints. The level is computed here from the facts on the pages
(vLLM 0.33 ``Scheduler.schedule`` / ``KVCacheManager.allocate_slots`` arithmetic, re-derived in this file), not read
from kvdiag's output. The whole pipeline runs in-process, as ``analyze`` runs it.
"""

from __future__ import annotations

import csv
import gzip
import math
import os

import pytest

from conftest import FIXTURES

from kvdiag.analyze import judge as _judge
from kvdiag.bundle import Bundle
from kvdiag.check import SEVERITY_CODE, perfdata, status_of, usage_max
from kvdiag.collect.metrics import add_page, parse_page, split_by_time
from kvdiag.engine.model import load_rules
from kvdiag.report.model import Report

RULES = load_rules(None)
MAX_PAGES = 10
FULL = bool(os.environ.get("KVDIAG_FULL_SWEEP"))
"""KVDIAG_FULL_SWEEP=1: every window of 1-10 pages ending at every page of every case (about 6,000 windows, ~20 min
of CPU). Without it: every such window of the quiet shared series, those ending at every second page of the
pressure series (issue 36), and on the lab fixtures the windows ending at every
third page (and the last) for V1 names, every fifth for V0 names (2,289 windows; docs/keeping-up.md)."""


def _series_pages(case):
    times = {}
    with open(case / "times.csv", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            times[int(row["sample"])] = float(row["unix_time"])
    pages = []
    for path in sorted((case / "metrics").glob("*.prom")):
        n = int(path.stem)
        pages.append((times[n], parse_page(path.read_text(encoding="utf-8"), path.name)))
    return pages


def _recording_pages(path):
    raw = path.read_bytes()
    text = (gzip.decompress(raw) if path.suffix == ".gz" else raw).decode("utf-8")
    return [(t, parse_page(page, f"{path.name}@{t:.0f}", openmetrics=True)) for t, page in split_by_time(text)]


def _cases():
    # the pressure series every second page in the suite (its every page took 70 s); KVDIAG_FULL_SWEEP: every page
    out = [pytest.param(FIXTURES / "series" / n, 1 if FULL or n == "vllm033_quiet" else 2, id=n)
           for n in ("vllm033_pressure", "vllm033_quiet")]
    for truth in sorted((FIXTURES / "lab").glob("*/truth.json")):
        for folder, tag, stride in ((truth.parent, "v1", 3), (truth.parent / "v0", "v0", 5)):
            rec = next((p for p in (folder / "recording.om", folder / "recording.om.gz") if p.exists()), None)
            if rec is not None:
                out.append(pytest.param(rec, 1 if FULL else stride, id=f"{truth.parent.name}-{tag}"))
    return out


def _window(pages):
    b = Bundle()
    for t, families in pages:
        add_page(b, families, f"page@{t:.0f}", t)
    return b


def _values(b, name):
    rows = b.signal(name).dropna(subset=["value"])
    return rows.groupby("t", sort=True)["value"].max()


def _level(b) -> float:
    """vLLM's admission level from the page facts (the arithmetic of the scheduler, not kvdiag's code)."""
    blocks = b.last("num_gpu_blocks")
    bs = b.last("block_size")
    p95 = b.last("request_prompt_tokens_p95") or b.last("request_prompt_tokens_mean")
    if not (blocks and bs and blocks[0] > 1):
        return 0.95
    running = _values(b, "num_requests_running")
    r = float(running.max()) if len(running) else 0.0
    if p95 is None:  # one page: the cumulative histogram since start
        rows = b.signal("request_prompt_tokens_bucket").dropna(subset=["value"])
        last = rows.groupby("text")["value"].last()
        bounds = sorted((float(k), v) for k, v in last.items() if k)
        total = max(v for _, v in bounds) if bounds else 0
        p95 = next(((k, "") for k, v in bounds if total and v >= 0.95 * total), None)
        if p95 is None:
            return 0.95
    chunk = p95[0]
    budget = b.last("max_num_batched_tokens")
    if budget:
        chunk = min(chunk, max(1.0, budget[0] - r))
    return 1 - (math.ceil(chunk / bs[0]) + r) / (blocks[0] - 1)


def _trouble(b) -> list[str]:
    waiting = _values(b, "num_requests_waiting").to_numpy()
    usage = _values(b, "kv_cache_usage")
    out = []
    if len(waiting) >= 3 and ((waiting > 0).all() or (waiting[-1] > waiting[0] and (waiting[-2:] > 0).all())):
        out.append(f"waiting grew {waiting.tolist()}")
    w = _values(b, "num_requests_waiting")
    level = _level(b)
    both = [(usage[t], w[t]) for t in w.index if t in usage.index]
    if any(u >= level and n > 0 for u, n in both):
        out.append(f"waiting at usage >= {level:.3f}")
    pre = _values(b, "num_preemptions").to_numpy()
    if len(pre) >= 2 and (pre[1:] > pre[:-1]).any():
        out.append("preempted")
    if len(pre) == 1 and pre[0] > 0:
        out.append("one page with preemptions since start")
    if len(waiting) and waiting.max() > 0 and len(waiting) < 3 and waiting[-1] > waiting[0]:
        out.append("a queue whose growth two pages cannot tell")
    return out


def _thresholds_honoured(perf: str, code: int) -> str:
    """'' when every perfdata value past its printed warning/critical threshold has a status at least as bad."""
    for item in perf.split():
        label, _, rest = item.partition("=")
        parts = rest.split(";")
        value = float("".join(ch for ch in parts[0] if ch in "0123456789.-"))
        for i, need in ((1, 1), (2, 2)):
            th = parts[i] if len(parts) > i else ""
            if not th or th.startswith("@"):
                continue
            if value >= float(th) and code < need and code != 3:
                return f"{label}={value} past {th} but status {code}"
    return ""


@pytest.mark.parametrize("case,stride", _cases())
def test_no_healthy_on_a_window_in_trouble(case, stride):
    pages = _series_pages(case) if case.is_dir() else _recording_pages(case)
    assert len(pages) >= MAX_PAGES
    bad, judged = [], 0
    ends = sorted(set(range(1, len(pages) + 1, stride)) | {len(pages)})
    for end in ends:
        for n in range(1, min(MAX_PAGES, end) + 1):
            b = _window(pages[end - n:end])
            v, findings = _judge(RULES, b)
            judged += 1
            trouble = _trouble(b)
            if v.primary == "healthy" and trouble:
                bad.append(f"pages {end - n}..{end - 1}: healthy with {trouble}")
            report = Report(verdict=v, findings=findings, inputs=[], window={})
            code = status_of(report, (), (), usage_max(b))
            assert code == 3 if v.primary == "inconclusive" else code >= SEVERITY_CODE[v.severity]
            why = _thresholds_honoured(perfdata(b, report), code)
            if why:
                bad.append(f"pages {end - n}..{end - 1}: {why}")
    assert judged >= len(ends)
    print(f"{case.name}: {judged} windows judged, {len(bad)} bad")
    assert not bad, f"{len(bad)} of {judged} windows: " + "; ".join(bad[:5])


def test_the_trouble_test_can_fail():
    """The checker above flags a window kvdiag must not call healthy: the pressure series' pages 56-59 (waiting
    6 → 20 on every page) are trouble, and the quiet series' first pages are not."""
    press = _series_pages(FIXTURES / "series" / "vllm033_pressure")
    assert _trouble(_window(press[55:59]))
    quiet = _series_pages(FIXTURES / "series" / "vllm033_quiet")
    assert not _trouble(_window(quiet[10:20]))
    v, _ = _judge(RULES, _window(quiet[10:20]))
    assert v.primary == "healthy"
