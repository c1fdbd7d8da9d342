"""The HTML report (``--format html``) in a real headless browser: Debian's chromium, driven by Playwright.

For every real incident with a log and both vLLM 0.33 series (their log and their /metrics pages as an OpenMetrics
recording at the scrape times of ``times.csv``), ``kvdiag analyze --format html --output FILE`` writes a page that
chromium renders with no console message and no request but the file itself; the screenshot is not blank; the DOM
holds the verdict, every finding's rule id and one chart per series the input has (counted from the collectors, not
from the renderer). The start-up budget chart of the OOM incidents shows the log's own numbers; a fleet page comes
from a real Prometheus on loopback. One browser for the module; each page is bounded to a few seconds.
"""

from __future__ import annotations

import csv
import html
import re
import time
from pathlib import Path

import pytest

from browser import PAGE_TIMEOUT_MS, Shown, assert_clean, browser  # noqa: F401 (browser: the module's fixture)
from conftest import FIXTURES, run_kvdiag, incident_cases

INCIDENTS = [c for c in incident_cases(bundled_only=True) if (c / "vllm.log").exists()]  # chromium per case: the 21
SERIES = ("vllm033_pressure", "vllm033_quiet")


def show(browser, path: Path) -> Shown:
    page = browser.new_page()
    try:
        shown = Shown(page, path)
        shown.dom = {"verdict": shown.attrs(".verdict", "data-primary"),
                     "rules": set(shown.attrs("[data-rule]", "data-rule")),
                     "charts": shown.attrs("figure.chart", "id"),
                     "series": {i: s for i, s in zip(shown.attrs("figure.chart", "id"),
                                                     shown.attrs("figure.chart", "data-series"))},
                     "svg_text": "\n".join(shown.texts("figure.chart svg text"))}
        shown.multiples = shown.attrs("figure.multiple", "data-instance")
        shown.ranking = shown.texts("table.ranking tbody tr td:nth-child(2)")
    finally:
        page.close()
    return shown


def _kvdiag_in_process(*args: str) -> int:
    from kvdiag.cli import main

    return main(list(args))


def recording(run: str, out: Path) -> Path:
    """The run's /metrics pages as one OpenMetrics recording, each page at its scrape time (``times.csv``)."""
    from kvdiag.collect.metrics import parse_page
    from kvdiag.record import Recorder

    rec = Recorder()
    times = {int(r["sample"]): float(r["unix_time"]) for r in csv.DictReader(open(FIXTURES / "series" / run /
                                                                                 "times.csv"))}
    for p in sorted((FIXTURES / "series" / run / "metrics").glob("*.prom")):
        rec.add(parse_page(p.read_text(), str(p)), times[int(p.name[:4])])
    out.write_text(rec.text())
    return out


def expected_charts(inputs: list[tuple[str, str]]) -> set[str]:
    """The charts an input must get, from what the collectors read (timestamped samples per signal)."""
    from kvdiag.bundle import Bundle
    from kvdiag.collect.logs import read_logs
    from kvdiag.collect.metrics import read_metrics_file

    b = Bundle()
    for kind, path in inputs:
        read_logs(b, [path]) if kind == "--log" else read_metrics_file(b, path)

    def instants(name: str) -> int:
        rows = b.signal(name)
        return rows[rows["t"].notna() & rows["value"].notna()]["t"].nunique() if len(rows) else 0

    out = set()
    if instants("kv_cache_usage"):
        out.add("chart-kv_cache_usage")
    if instants("num_requests_running") or instants("num_requests_waiting"):
        out.add("chart-requests")
    if instants("num_preemptions") >= 2:
        out.add("chart-preemptions_per_second")
    if (instants("prefix_cache_hits") >= 2 and instants("prefix_cache_queries") >= 2) or \
            instants("prefix_cache_hit_rate") or instants("prefix_cache_hit_rate_cumulative"):
        out.add("chart-prefix")
    if instants("request_prompt_tokens_sum") >= 2 and instants("num_requests_running"):
        out.add("chart-kv_demand_tokens")
    if any(b.has(s) for s in ("weights_bytes", "kv_cache_memory_bytes", "gpu_total_bytes", "cudagraph_bytes",
                              "cudagraph_estimate_bytes", "oom_tried_bytes", "cuda_oom")):
        out.add("chart-startup")
    return out


CASES = [pytest.param([("--log", str(p / "vllm.log"))], id=p.name[:3]) for p in INCIDENTS] + \
    [pytest.param(run, id=run) for run in SERIES]


@pytest.mark.parametrize("case", CASES)
def test_html_renders_offline_in_chromium(browser, tmp_path, case):
    if isinstance(case, str):  # a 0.33 series: its log and its pages, as one server
        inputs = [("--log", str(FIXTURES / "series" / case / "vllm.log")),
                  ("--metrics-file", str(recording(case, tmp_path / "pages.om")))]
    else:
        inputs = case
    args = [a for pair in inputs for a in pair]
    out = tmp_path / "report.html"
    rc = _kvdiag_in_process("analyze", *args, "--format", "html", "--output", str(out))
    from kvdiag.analyze import analyze

    data = analyze(logs=[p for k, p in inputs if k == "--log"],
                   metrics_files=[p for k, p in inputs if k == "--metrics-file"]).to_dict()
    assert rc in (0, 1, 2, 3) and out.stat().st_size < 400_000, out.stat().st_size
    shown = show(browser, out)
    assert_clean(shown)
    assert shown.dom["verdict"] == [data["verdict"]["primary"]]
    assert {f["rule_id"] for f in data["findings"]} <= shown.dom["rules"]
    assert set(shown.dom["charts"]) == expected_charts(inputs), shown.dom["charts"]
    assert len(shown.dom["charts"]) == len(set(shown.dom["charts"]))  # one chart each
    if "chart-kv_cache_usage" in shown.dom["charts"]:
        assert "KV cache usage" in shown.dom["svg_text"]  # labels are text in the DOM (svg.fonttype none)
    if isinstance(case, str):
        assert set(shown.dom["charts"]) >= {"chart-kv_cache_usage", "chart-requests", "chart-prefix",
                                            "chart-kv_demand_tokens"}
        if case == "vllm033_pressure":  # preempted: the rate chart, and CAP001 marked on the timeline
            assert "chart-preemptions_per_second" in shown.dom["charts"]
            assert "CAP001" in shown.dom["svg_text"]


# --- the start-up budget shows the numbers of the log's own memory lines ----------------------------------------------
OOM_NUMBERS = [r"Tried to allocate ([\d.]+ [GM]iB)", r"total capacity of ([\d.]+ [GM]iB)",
               r"of which ([\d.]+ [GM]iB) is free", r"this process has ([\d.]+ [GM]iB) memory in use",
               r"([\d.]+ [GM]iB) is allocated by PyTorch"]
VLLM_NUMBERS = [r"total_gpu_memory \(([\d.]+)GiB\)", r"gpu_memory_utilization \([\d.]+\) = ([\d.]+)GiB",
                r"model weights take ([\d.]+)GiB", r"activation peak memory takes ([\d.]+)GiB",
                r"reserved for KV Cache is (-?[\d.]+)GiB", r"utilization is \([\d.]+, ([\d.]+) GiB\)",
                r"Actual usage is ([\d.]+) GiB for weight", r"([\d.]+) GiB for peak activation",
                r"([\d.]+) GiB for non-torch memory", r"([\d.]+) GiB for CUDAGraph memory"]
BUDGET_CASES = [p for p in INCIDENTS if re.search("Tried to allocate|reserved for KV Cache is",
                                                  (p / "vllm.log").read_text(errors="replace"))]


def _chart_text(page_html: str, chart_id: str) -> str:
    m = re.search(rf'<figure id="{chart_id}".*?</figure>', page_html, re.S)
    assert m, f"no {chart_id}"
    return "\n".join(html.unescape(t) for t in re.findall(r"<text[^>]*>(.*?)</text>", m.group(0), re.S))


@pytest.mark.parametrize("case", BUDGET_CASES, ids=lambda p: p.name[:3])
def test_startup_budget_chart_shows_the_log_numbers(tmp_path, case):
    """Every number of the OOM text (tried, total, free, in use, allocated) and of vLLM's memory-profiling lines,
    read from the log here, is a label of the start-up chart, written as the log wrote it."""
    log = (case / "vllm.log").read_text(errors="replace")
    want = []
    for line in log.splitlines():
        if "Tried to allocate" in line:
            want += [m.group(1) for rx in OOM_NUMBERS if (m := re.search(rx, line))]
            break
    for rx in VLLM_NUMBERS:
        m = re.search(rx, log)
        if m:
            want.append(m.group(1) + ("" if "iB" in m.group(1) else " GiB"))
    assert want
    out = tmp_path / "r.html"
    _kvdiag_in_process("analyze", "--log", str(case / "vllm.log"), "--format", "html", "--output", str(out))
    text = _chart_text(out.read_text(), "chart-startup")
    for number in want:
        assert number in text, (number, text)
    if "Tried to allocate" in log:
        assert "OOM" in text and "tried to allocate" in text


# --- a fleet from a real Prometheus ----------------------------------------------------------------------------------
def test_fleet_html_from_prometheus(browser, tmp_path):
    from promserver import PROMETHEUS, PROMTOOL, PrometheusServer, backfill, vllm_history
    from test_prometheus import FLEET, STEP, STEPS

    assert PROMETHEUS and PROMTOOL, "needs Debian's prometheus package (apt-get install prometheus; see .ci/run)"
    import json

    start = (time.time() - STEPS * STEP - 120) // 60 * 60
    om = tmp_path / "history.om"
    om.write_text(vllm_history({f"{k}:8000": v for k, v in FLEET.items()}, start, STEPS, STEP, "vllm:", "colon"))
    backfill(om, tmp_path / "data")
    out = tmp_path / "fleet.html"
    with PrometheusServer(tmp_path / "data") as prom:
        args = ["analyze", "--prometheus-url", prom.url, "--selector", '{job="colon"}', "--since", str(start),
                "--until", str(start + (STEPS - 1) * STEP)]
        res = run_kvdiag(*args, "--format", "html", "--output", str(out))
        assert res.code == 2, res.err
        data = json.loads(run_kvdiag(*args, "--format", "json").out)
    order = [i["instance"] for i in data["instances"]]
    assert len(order) == len(FLEET)
    shown = show(browser, out)
    assert_clean(shown)
    assert shown.ranking == order                       # the ranking table, worst first
    assert shown.multiples == order                     # one small chart of usage per server, same order
    assert shown.dom["verdict"][0] == data["verdict"]["primary"] == "capacity_pressure"
    assert {f["rule_id"] for i in data["instances"] for f in i["findings"]} <= shown.dom["rules"]
    page = out.read_text()
    assert page.count('class="chart multiple"') == len(FLEET) and "no KV usage series" not in page
    marks = dict(re.findall(r'data-instance="([^"]+)" data-markers="([^"]*)"', page))
    assert "restart" in marks["restart-pressure:8000"] and "restart" not in marks["pressure:8000"]  # the counter fell
    assert len(page) < 250_000, len(page)


def test_forecast_line_on_the_usage_chart(tmp_path):
    """CAP002 fires on the ramp recording: its line (to a full pool, with the minutes) is on the usage chart and the
    rule is marked; a steady recording has no forecast line."""
    out = tmp_path / "r.html"
    _kvdiag_in_process("analyze", "--metrics-file", str(FIXTURES / "series" / "forecast" / "dev_ramp_7_first_120s.om"),
                       "--format", "html", "--output", str(out))
    page = out.read_text()
    assert 'id="chart-kv_cache_usage" class="chart" data-series="kv_cache_usage forecast"' in page
    eta = re.search(r"full in ~([\d.]+) min at", page).group(1)           # the finding's own minutes
    assert f"CAP002 forecast: full in ~{eta} min" in _chart_text(page, "chart-kv_cache_usage")
    assert "rule:CAP002" in re.search(r'class="timeline" data-markers="([^"]*)"', page).group(1)
    _kvdiag_in_process("analyze", "--metrics-file", str(FIXTURES / "series" / "forecast" / "dev_steady_1.om"),
                       "--format", "html", "--output", str(out))
    page = out.read_text()
    assert "chart-kv_cache_usage" in page and "CAP002 forecast" not in page


# --- a log line cannot inject markup, a secret never reaches the page -------------------------------------------------
def test_log_text_is_inert_and_redacted(browser, tmp_path):
    log = tmp_path / "vllm.log"
    log.write_text("INFO 05-19 10:00:00 [api_server.py:1] vLLM API server version 0.11.0\n"
                   "ERROR 05-19 10:00:01 [x.py:1] ran out of memory in the frobnicator <script>alert(1)</script><img "
                   "src=x onerror=alert(2)> --api-key sk-abcdefghijklmnopqrstuvwx\n")
    out = tmp_path / "r.html"
    _kvdiag_in_process("analyze", "--log", str(log), "--format", "html", "--output", str(out))
    page = out.read_text()
    assert "<script" not in page.lower() and "<img" not in page.lower()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page            # shown, as text
    assert "sk-abcdefghijklmnopqrstuvwx" not in page and "***" in page
    shown = show(browser, out)
    assert_clean(shown)  # no dialog, no request for "x"
    # the renderer redacts on its own too: a secret put into a finished report never reaches the page
    from kvdiag.analyze import analyze
    from kvdiag.report.formats import RENDERERS

    report = analyze(logs=[str(log)])
    report.notes.append("launched with HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz and <b onmouseover=x>")
    report.findings[0].message += " password='hunter2hunter2'"
    page = RENDERERS["html"](report)
    assert "hf_abcdefghijklmnopqrstuvwxyz" not in page and "hunter2hunter2" not in page and "<b onmouseover" not in page


def test_print_stylesheet_and_pdf(browser, tmp_path):
    """Readable on paper: an @media print part, and chromium prints the page to a PDF of a few pages."""
    case = next(p for p in INCIDENTS if p.name.startswith("007"))
    out = tmp_path / "r.html"
    _kvdiag_in_process("analyze", "--log", str(case / "vllm.log"), "--format", "html", "--output", str(out))
    assert "@media print" in out.read_text()
    page = browser.new_page()
    try:
        page.goto(out.as_uri(), wait_until="load", timeout=PAGE_TIMEOUT_MS)
        page.emulate_media(media="print")
        pdf = page.pdf(format="A4")
    finally:
        page.close()
    assert pdf[:5] == b"%PDF-" and 10_000 < len(pdf) < 3_000_000
    assert 1 <= len(re.findall(rb"/Type\s*/Page[^s]", pdf)) <= 8


def test_text_sparklines_fit_the_width_and_are_plain(tmp_path):
    """The trend lines under the verdict: never wider than --width, no escape code when piped, and the values
    (first and last KV usage with their times) are the series' own."""
    log = str(FIXTURES / "series" / "vllm033_pressure" / "vllm.log")
    for width in (40, 60, 100, 160):
        res = run_kvdiag("analyze", "--log", log, "--width", str(width))
        lines = res.out.splitlines()
        trend = [ln for ln in lines if ln.startswith(("  KV usage ", "  waiting ", "  hit rate "))]
        assert len(trend) == 3, res.out[:800]
        assert all(len(ln) <= width for ln in lines[:12] if "fixtures/" not in ln), width
        assert "\x1b" not in res.out
    stats = re.findall(r"INFO \d\d-\d\d (\S+) .*GPU KV cache usage: ([\d.]+)%", Path(log).read_text())
    first, last = stats[0], stats[-1]
    peak = max(float(u) for _, u in stats)
    usage = [ln for ln in lines if ln.startswith("  KV usage ")][0]
    assert usage.endswith(f"  {first[1]}% {first[0]} → {last[1]}% {last[0]} (peak {peak:.1f}%)"), usage
    assert re.search(r"  KV usage  [▁▂▃▄▅▆▇█ ]{20,}  ", usage), usage


def test_json_report_has_no_series(kvdiag):
    """The series stay out of --format json (the schema has none): a log of 88 stats lines gives the same keys."""
    res = kvdiag("analyze", "--log", str(FIXTURES / "series" / "vllm033_pressure" / "vllm.log"), "--format", "json")
    assert set(res.json()) == {"schema_version", "kvdiag_version", "verdict", "findings", "inputs", "window", "notes"}
    assert len(res.out) < 60_000


def test_long_series_are_thinned_and_keep_their_spike():
    """A day at 5 s (17,280 samples) becomes at most MAX_POINTS points per series, the one-sample spike to 100 % and
    the restart's fall kept; the page stays small."""
    import math

    from kvdiag.bundle import Bundle
    from kvdiag.engine.evaluate import Verdict
    from kvdiag.report.formats import RENDERERS
    from kvdiag.report.model import MAX_POINTS, Report
    from kvdiag.timeline import build_charts

    b = Bundle()
    t0, n = 1_780_000_000.0, 17_280
    spike = 9_001
    b.extend("kv_cache_usage", [(t0 + 5 * i, 1.0 if i == spike else 0.4 + 0.1 * math.sin(i / 500), f"m@{i}")
                                for i in range(n)])
    b.extend("num_preemptions", [(t0 + 5 * i, float(i // 10 if i < 12_000 else (i - 12_000) // 10), f"p@{i}")
                                 for i in range(n)])
    charts = build_charts(b, [])
    usage = charts.series["kv_cache_usage"]
    assert len(usage.t) <= MAX_POINTS and max(usage.v) == 1.0 and t0 + 5 * spike in usage.t
    rate = charts.series["preemptions_per_second"]
    assert len(rate.t) <= MAX_POINTS and min(rate.v) >= 0   # the fall at the restart is no negative rate
    page = RENDERERS["html"](Report(Verdict("healthy", "ok", "low", "synthetic"), [], [], {}, charts=charts))
    assert 'id="chart-kv_cache_usage"' in page and 'id="chart-preemptions_per_second"' in page
    assert len(page.encode()) < 200_000, len(page.encode())


def test_restart_and_cut_short_window_are_marked():
    """A counter that falls mid-window (the derivation's counter_resets) and a window cut short by an interrupt are
    dashed markers of the timeline, named in its data-markers."""
    from kvdiag.bundle import Bundle
    from kvdiag.derive import derive_all
    from kvdiag.engine.evaluate import Verdict
    from kvdiag.report.formats import RENDERERS
    from kvdiag.report.model import Report
    from kvdiag.timeline import build_charts

    b = Bundle()
    t0 = 1_780_000_000.0
    b.extend("kv_cache_usage", [(t0 + 5 * i, 0.5, f"u@{i}") for i in range(40)])
    b.extend("num_preemptions", [(t0 + 5 * i, float(100 + i if i < 20 else i - 20), f"metric:p@{i}")
                                 for i in range(40)])
    derive_all(b)
    note = "window cut short at 7.0 s of 60 s by an interrupt (SIGINT)"
    charts = build_charts(b, [], [note])
    kinds = [(m.kind, m.t) for m in charts.markers]
    assert ("restart", t0 + 5 * 20) in kinds and ("cut", t0 + 5 * 39) in kinds
    page = RENDERERS["html"](Report(Verdict("healthy", "ok", "low", "synthetic"), [], [], {}, [note], charts=charts))
    marks = re.search(r'class="timeline" data-markers="([^"]*)"', page).group(1).split()
    assert "restart" in marks and "cut" in marks
    text = _chart_text(page, "chart-kv_cache_usage")
    assert "restart (num_preemptions fell)" in text and "window cut short" in text
