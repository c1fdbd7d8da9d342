"""Reports of odd input: an inconclusive headline says UNKNOWN, label values cannot break Markdown or quoting,
and the last pass of every renderer redacts secrets."""

from __future__ import annotations

import json
import re

from conftest import FIXTURES

PRESS = FIXTURES / "metrics" / "vllm033_pressure_0054.prom"


def test_inconclusive_headline_says_unknown(kvdiag, tmp_path):
    p = tmp_path / "notes.txt"
    p.write_text("shopping list\neggs\n")
    text = kvdiag("analyze", "--log", str(p))
    assert text.code == 3 and text.out.splitlines()[0] == "UNKNOWN: inconclusive (confidence low)"
    md = kvdiag("analyze", "--log", str(p), "--format", "markdown")
    assert md.out.splitlines()[0] == "# kvdiag: UNKNOWN — `inconclusive` (confidence low)"
    js = json.loads(kvdiag("analyze", "--log", str(p), "--format", "json").out)
    assert js["verdict"]["primary"] == "inconclusive" and js["verdict"]["severity"] == "ok"   # the schema's enum


def _page_with_label(tmp_path, value: str):
    text = PRESS.read_text()
    text = re.sub(r'model_name="[^"]*"', lambda m: f'model_name="{value}"', text)
    p = tmp_path / "lbl.prom"
    p.write_text(text)
    return p


def test_markdown_code_spans_hold_backticks_pipes_and_html(kvdiag, tmp_path):
    p = _page_with_label(tmp_path, r"a|b`c\nd<script>x</script>")
    res = kvdiag("analyze", "--metrics-file", str(p), "--format", "markdown")
    assert res.code == 2
    rows = [line for line in res.out.splitlines() if line.startswith("| `kv_cache_usage`")]
    assert rows, res.out
    row = rows[0]
    assert row.count("|") - row.count("\\|") == 4               # still three cells
    ref = re.search(r"\| \[(\d+)\] \|$", row)
    assert ref, row
    # the source, listed once under "Sources:", is one code span fenced by two backticks (its own text holds one);
    # outside a table the pipe stays as it is (a backslash would show inside the span)
    listed = res.out.split("Sources:", 1)[1].splitlines()
    src = [line for line in listed if line.startswith(f"{ref.group(1)}. ")]
    assert src and re.search(r'^\d+\. `` metric:vllm:kv_cache_usage_perc\{[^}]*?model_name="a\|b`c\\nd<script>x</script>"\} '
                             r'in \S*lbl\.prom ``$', src[0]), src
    # outside code spans no raw tag
    outside = re.sub(r"``.*?``|`[^`]*`", "", res.out)
    assert "<script>" not in outside


def test_text_source_escapes_quotes_in_label_values(kvdiag, tmp_path):
    p = _page_with_label(tmp_path, r'a\"b c\\d')
    res = kvdiag("analyze", "--metrics-file", str(p))
    assert 'model_name="a\\"b c\\\\d"' in res.out, res.out


def test_every_renderer_redacts_last(tmp_path):
    from kvdiag.report.formats import RENDERERS
    from kvdiag.report.model import Report
    from kvdiag.engine.evaluate import Verdict

    report = Report(verdict=Verdict("inconclusive", "ok", "low", "api_key='SECRETX1' https://u:SECRETPW2@h/x",
                                    [], []),
                    findings=[], inputs=[], window={}, notes=["--api-key SECRETX3"])
    for fmt, render in RENDERERS.items():
        out = render(report)
        assert "SECRET" not in out, (fmt, out)
