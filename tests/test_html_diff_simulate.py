"""``kvdiag diff --format html`` and ``kvdiag simulate --format html`` in a real headless browser (Debian's chromium
via Playwright, the harness of ``tests/test_html.py``): no console message, no request but the file itself, a
screenshot that is not blank, and the DOM holding the numbers the JSON output of the same command gives (read from
that JSON, never typed in here): every row of the diff in the text renderer's order, the budget chart's bars, every
simulated setting with the recommended one marked.
"""

from __future__ import annotations

import json
import re
from html import unescape
from pathlib import Path

import pytest

from browser import Shown, assert_clean, browser  # noqa: F401 (browser: the module's fixture)
from conftest import FIXTURES, run_kvdiag

D = FIXTURES / "diff"
PRESSURE = FIXTURES / "series" / "vllm033_pressure"
GIB = 2**30


def _both(tmp_path: Path, *args: str) -> tuple[dict, Path, int]:
    """The JSON document and the HTML page of one command line, and its exit code (the same for both formats)."""
    js = run_kvdiag(*args, "--format", "json")
    assert js.code in (0, 1, 2, 3) and not js.err.strip(), js.err
    out = tmp_path / "page.html"
    res = run_kvdiag(*args, "--format", "html", "--output", str(out))
    assert res.code == js.code and res.out == "" and not res.err.strip(), (res.code, res.err)
    return js.json(), out, js.code


def _show(browser, path: Path, script: str):
    page = browser.new_page()
    try:
        shown = Shown(page, path)
        data = page.evaluate(script)
    finally:
        page.close()
    return shown, data


def _same(dom_value: str, value) -> bool:
    got = None if dom_value == "" else json.loads(dom_value)
    if isinstance(value, float) or isinstance(got, float):
        return got is not None and value is not None and got == pytest.approx(value, rel=1e-9)
    return got == value


DIFF_DOM = """() => ({
  verdicts: [...document.querySelectorAll('table.verdicts tbody tr')].map(r => [r.dataset.side, r.dataset.primary]),
  sections: [...document.querySelectorAll('table.diff')].map(t => t.dataset.section),
  rows: [...document.querySelectorAll('table.diff')].map(t => [t.dataset.section,
          [...t.querySelectorAll('tbody tr')].map(r => [r.dataset.key,
             ...[...r.querySelectorAll('td[data-value]')].map(c => c.dataset.value)])]),
  explanations: [...document.querySelectorAll('.explanation')].map(e => e.dataset.key),
  charts: [...document.querySelectorAll('figure.chart')].map(f => [f.id, f.dataset.series]),
  chart_text: [...document.querySelectorAll('#chart-budget svg text')].map(t => t.textContent),
  order: [...document.querySelectorAll('h2, table.diff, figure.chart')].map(e =>
          e.tagName === 'H2' ? 'h2:' + e.textContent : e.tagName === 'TABLE' ? 'table:' + e.dataset.section : e.id),
})"""


@pytest.mark.parametrize("pair", ["real-qwen2-7b-tensor-parallel", "lab-block-size"])
def test_diff_html_in_chromium_holds_every_row_and_the_budget_chart(browser, tmp_path, pair):
    sides = ([str(D / pair / "before.log")], [str(D / pair / "after.log")]) if pair.startswith("real") else \
        ([str(D / pair / "before" / "recording.om.gz"), str(D / pair / "before" / "vllm.log")],
         [str(D / pair / "after" / "recording.om.gz"), str(D / pair / "after" / "vllm.log")])
    args = ["diff", sides[0][0], sides[1][0]]
    if len(sides[0]) > 1:
        args += ["--before-also", sides[0][1], "--after-also", sides[1][1]]
    doc, out, _ = _both(tmp_path, *args)
    shown, dom = _show(browser, out, DIFF_DOM)
    assert_clean(shown)
    assert dom["verdicts"] == [["before", doc["before"]["verdict"]["primary"]],
                               ["after", doc["after"]["verdict"]["primary"]]]
    # the text renderer's order: budget, configuration, run; in each, the lines that moved (most first), then the rest
    present = [s for s in ("budget", "config", "run") if any(r["section"] == s for r in doc["rows"])]
    assert dom["sections"] == present
    for section, rows in dom["rows"]:
        want = [r for r in doc["rows"] if r["section"] == section]
        want = [r for r in want if r["changed"]] + [r for r in want if not r["changed"]]
        assert [r[0] for r in rows] == [r["key"] for r in want], section
        for (key, before, after), r in zip(rows, want):
            assert _same(before, r["before"]) and _same(after, r["after"]), (key, before, after, r)
    assert dom["explanations"] == [e["key"] for e in doc["explanations"]] and dom["explanations"]
    # one chart when both sides have start-up memory lines: a pair of bars per byte line both print, labelled in GiB
    terms = [r for r in doc["rows"] if r["section"] == "budget" and r["unit"] == "bytes"
             and isinstance(r["before"], (int, float)) and isinstance(r["after"], (int, float))]
    if pair.startswith("lab"):  # the lab prints no memory line: no chart, and the run compared instead
        assert not terms and dom["charts"] == [] and "run" in dom["sections"]
        return
    assert terms, "both real logs print start-up memory lines"
    assert dom["charts"] == [["chart-budget", " ".join(r["key"] for r in terms)]]
    for r in terms:
        assert f"{r['before'] / GIB:.2f}" in dom["chart_text"] and f"{r['after'] / GIB:.2f}" in dom["chart_text"]
        assert r["label"] in dom["chart_text"]
    budget_at = dom["order"].index("table:budget")
    assert dom["order"][budget_at - 1] == "chart-budget" and dom["order"][budget_at - 2].startswith("h2:Start-up")


def test_diff_html_has_no_budget_chart_when_one_side_has_no_memory_line(tmp_path):
    pair = D / "real-qwen2-7b-tensor-parallel"
    lines = (pair / "after.log").read_text().splitlines(keepends=True)
    first = next(i for i, ln in enumerate(lines) if "Model loading took" in ln)  # the first memory line
    cut = tmp_path / "after-cut.log"
    cut.write_text("".join(lines[:first]))
    doc, out, _ = _both(tmp_path, "diff", str(pair / "before.log"), str(cut))
    budget = [r for r in doc["rows"] if r["section"] == "budget" and r["unit"] == "bytes"]
    assert budget and all(r["after"] is None for r in budget) and any(r["before"] for r in budget)
    page = out.read_text()
    assert "<figure" not in page and 'data-section="budget"' in page
    text = unescape(re.sub(r"<[^>]+>", "", page))
    assert all(f"warning: {w}" in text for w in doc["warnings"])


def test_diff_html_escapes_and_redacts(tmp_path):
    src = (D / "lab-max-num-seqs" / "after" / "vllm.log").read_text()
    leaky = src.replace("'max_num_seqs': 64}", "'max_num_seqs': 64, 'api_key': ['sk-live-0123456789abcdef'], "
                                               "'chat_template': '<script>alert(1)</script>'}")
    assert leaky != src
    p = tmp_path / "leaky.log"
    p.write_text(leaky)
    out = tmp_path / "d.html"
    res = run_kvdiag("diff", str(D / "lab-max-num-seqs" / "after" / "vllm.log"), str(p), "--format", "html",
                     "--output", str(out))
    assert res.code in (0, 1, 2, 3), res.err
    page = out.read_text()
    assert "engine_args.api_key" in page and "sk-live-0123456789abcdef" not in page
    assert "<script" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page


SIM_DOM = """() => ({
  rows: [...document.querySelectorAll('table.settings tbody tr')].map(r => ({setting: r.dataset.setting,
          recommended: r.classList.contains('recommended'), label: r.querySelector('td').textContent,
          cells: Object.fromEntries([...r.querySelectorAll('td[data-key]')].map(c => [c.dataset.key,
                                                                                     c.dataset.value]))})),
  heads: [...document.querySelectorAll('table.settings th, h1, h2')].map(h => h.textContent).join(' | '),
  charts: [...document.querySelectorAll('figure.chart')].map(f => f.id),
  chart_text: [...document.querySelectorAll('#chart-settings svg text')].map(t => t.textContent),
})"""


def test_simulate_html_in_chromium_holds_every_setting_and_marks_the_recommended(browser, tmp_path):
    # --objective preemptions: the default (balanced) recommends neither of these two (issue 25)
    doc, out, code = _both(tmp_path, "simulate", "--lab-case", str(PRESSURE), "--max-num-seqs", "12,256",
                           "--objective", "preemptions")
    assert code == 0
    shown, dom = _show(browser, out, SIM_DOM)
    assert_clean(shown)
    assert len(dom["rows"]) == len(doc["settings"]) >= 2
    for row, s in zip(dom["rows"], doc["settings"]):
        assert json.loads(row["setting"]) == s["setting"]
        assert row["recommended"] == s["recommended"] and ("recommended" in row["label"]) == s["recommended"]
        assert ("(as run)" in row["label"]) == s["baseline"]
        assert row["cells"] and all(_same(v, s[k]) for k, v in row["cells"].items()), (row["cells"], s)
    assert [json.loads(r["setting"]) for r in dom["rows"] if r["recommended"]] == [doc["recommended"]]
    assert dom["heads"].count("simulated") >= 3  # the title, the table's heading and its setting column
    assert dom["charts"] == ["chart-settings"]
    for s in doc["settings"]:
        assert str(s["preemptions"]) in dom["chart_text"]
        q = s["queue_time_p95_s"]
        assert ("-" if q is None else f"{q:.2f}") in dom["chart_text"]
    assert any("simulated" in t for t in dom["chart_text"])
