"""Text layout and the meaning of "ruled out", through the real CLI: the text report at a width (``--width``, a
pseudo-terminal's size, 100 columns piped), evidence sources never cut inside a label or token, colour only on a
terminal (``NO_COLOR`` honoured), the same rules ruled out in text, Markdown and JSON, and no rule ruled out whose
inputs were absent (a metrics-only input says nothing of the log's OOMs). Golden files at 80 and 120 columns are in
``test_reports.py``."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import shutil
import sys
import tempfile
import termios
from pathlib import Path

import pytest

from conftest import FIXTURES, ROOT, incident_cases

from kvdiag.bundle import Bundle, InputInfo
from kvdiag.engine.evaluate import evaluate_rule
from kvdiag.engine.model import load_rules
from kvdiag.signals import SIGNALS

ANSI = re.compile(r"\x1b\[[0-9;]*m")
METRICS_ONLY = "fixtures/metrics/vllm033_pressure_0054.prom"
INCIDENTS = {p.name[:3]: f"fixtures/incidents/{p.name}/vllm.log" for p in incident_cases(bundled_only=True)
             if (p / "vllm.log").exists()}
# rules whose `when` reads only what a vLLM log says (OOM texts, start-up crashes): with no log they have no evidence
LOG_ONLY_RULES = ("WGT001", "CG001", "ENC001", "SAMPLER001", "SAMPLER002", "ACT001", "ACT002", "EXT001")


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR")}
    env.update(extra)
    return env


def run_on_pty(args: list[str], cols: int = 80, **env) -> tuple[int, str]:
    """Run ``python -m kvdiag ARGS`` with standard output on a pseudo-terminal of ``cols`` columns; returns the exit
    code and everything written to the terminal (``\\r\\n`` as ``\\n``)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, cols, 0, 0))
    proc = subprocess.Popen([sys.executable, "-m", "kvdiag", *args], stdout=slave, stderr=subprocess.DEVNULL,
                            stdin=subprocess.DEVNULL, cwd=ROOT, env=_env(**env))
    os.close(slave)
    chunks = []
    while True:
        ready, _, _ = select.select([master], [], [], 60)
        if not ready:
            proc.kill()
            raise AssertionError("no output from the CLI on the pseudo-terminal for 60 s")
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    code = proc.wait(timeout=60)
    return code, b"".join(chunks).decode("utf-8").replace("\r\n", "\n")


def _piped(*args: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kvdiag", *args], capture_output=True, text=True, cwd=ROOT,
                          env=_env(**env), timeout=120)


# ------------------------------------------------------------------------------------------------ colour and width
def test_colour_and_terminal_width_on_a_pty():
    code, out = run_on_pty(["analyze", "--metrics-file", METRICS_ONLY], cols=80)
    assert code == 2
    assert "\x1b[31m" in out and "\x1b[1m" in out, out[:300]          # critical in red, headings bold
    first = out.splitlines()[0]
    assert first.startswith("\x1b[31m") and "CRITICAL" in first
    plain = ANSI.sub("", out)
    assert max(len(line) for line in plain.splitlines()) <= 80
    # the terminal's 80 columns give the same layout as --width 80 piped, less the colour
    assert plain == _piped("analyze", "--metrics-file", METRICS_ONLY, "--width", "80").stdout


def test_no_colour_when_piped():
    res = _piped("analyze", "--log", INCIDENTS["029"])
    assert res.returncode == 2
    assert "\x1b" not in res.stdout
    assert max(len(line) for line in res.stdout.splitlines()) <= 100     # the fixed width when not a terminal


@pytest.mark.parametrize("value", ["1", "0", "yes"])
def test_no_colour_is_honoured_on_a_pty(value):
    code, out = run_on_pty(["analyze", "--log", INCIDENTS["029"]], cols=120, NO_COLOR=value)
    assert code == 2
    assert "\x1b" not in out and out.startswith("CRITICAL: capacity_pressure")


def test_empty_no_colour_keeps_colour():
    """no-color.org: only a non-empty NO_COLOR disables colour."""
    code, out = run_on_pty(["analyze", "--log", INCIDENTS["029"]], cols=120, NO_COLOR="")
    assert "\x1b[31m" in out


def test_no_colour_on_a_dumb_terminal():
    """TERM=dumb (Emacs shell, CI log viewers) shows escape codes as text: no colour there, the width still the
    terminal's."""
    code, out = run_on_pty(["analyze", "--log", INCIDENTS["029"]], cols=80, TERM="dumb")
    assert code == 2 and "\x1b" not in out and out.startswith("CRITICAL: capacity_pressure")
    assert max(len(line) for line in out.splitlines()) <= 80


def _columns(line: str) -> int:
    """Terminal columns of ``line``: East Asian wide / fullwidth characters take two (UAX #11)."""
    import unicodedata

    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in line)


@pytest.mark.parametrize("width", [80, 120])
def test_wide_characters_in_label_values_stay_within_the_width(tmp_path, width):
    """A model name in CJK characters (two columns each) ran 10-25 columns past the width: lengths were counted in
    characters."""
    name = "通义千问模型测试" * 3
    # a short folder: the Inputs line names the page's path, which no width can wrap, and pytest's own temp paths
    # grow with the worker's name under pytest-xdist (…/popen-gw1/…, 87 columns)
    short = Path(tempfile.mkdtemp(prefix="kv"))
    page = short / "cjk.prom"
    page.write_text((ROOT / METRICS_ONLY).read_text().replace("Qwen/Qwen2.5-7B-Instruct", name))
    res = _piped("analyze", "--metrics-file", str(page), "--width", str(width))
    assert res.returncode == 2, res.stderr
    lines = res.stdout.splitlines()
    assert any(f'model_name="{name}"' in line for line in lines)          # the label stays whole on its line
    shutil.rmtree(short, ignore_errors=True)
    assert max(_columns(line) for line in lines) <= width, [ln for ln in lines if _columns(ln) > width]


def test_output_file_from_a_terminal_is_plain(tmp_path):
    target = tmp_path / "report.txt"
    code, out = run_on_pty(["analyze", "--log", INCIDENTS["029"], "--output", str(target)], cols=60)
    assert code == 2 and out == ""
    text = target.read_text()
    assert "\x1b" not in text
    assert max(len(line) for line in text.splitlines()) > 60             # 100 columns, not the terminal's 60


def test_json_and_markdown_have_no_colour_on_a_pty():
    for fmt in ("json", "markdown"):
        code, out = run_on_pty(["analyze", "--log", INCIDENTS["029"], "--format", fmt], cols=80)
        assert code == 2 and "\x1b" not in out, fmt


def test_width_is_a_bounded_number():
    res = _piped("analyze", "--log", INCIDENTS["029"], "--width", "10")
    assert res.returncode == 3 and "--width" in res.stderr and "Traceback" not in res.stderr  # usage error


# ------------------------------------------------------------------------------------------------ sources stay whole
def _labels_and_tokens(source: str) -> list[str]:
    """The pieces of a source no line may cut: each ``name="value"`` label, each ``log:FILE:LINE`` and each metric
    name; found by reading the source, not by the renderer's own splitter."""
    parts = re.findall(r'[A-Za-z_][A-Za-z0-9_]*="(?:[^"\\]|\\.)*"', source)
    parts += re.findall(r"log:[^\s():]+:\d+", source)
    parts += re.findall(r"metric:[A-Za-z_:][A-Za-z0-9_:]*", source)
    return parts


@pytest.mark.parametrize("width", [40, 80, 120])
@pytest.mark.parametrize("source", ["029", "007", "005", "001", "013", "metrics"])
def test_evidence_sources_are_never_cut(width, source):
    args = ["--metrics-file", METRICS_ONLY] if source == "metrics" else ["--log", INCIDENTS[source]]
    text = _piped("analyze", *args, "--width", str(width)).stdout
    report = _piped("analyze", *args, "--format", "json").stdout
    import json

    data = json.loads(report)
    lines = text.splitlines()
    checked = 0
    for f in data["findings"]:
        if f["status"] != "fires" or f["class"] == "healthy" and data["verdict"]["primary"] != "healthy":
            continue
        for e in f["evidence"]:
            src = e["source"]
            if len(src) + 9 <= width:  # fits a line after its number in the sources list: on one line, whole
                assert any(re.search(rf"\[\d+\] {re.escape(src)}$", line) for line in lines), (width, src)
            for part in _labels_and_tokens(src):
                assert any(part in line for line in lines), (width, part)
                checked += 1
    assert checked
    # every line within the width unless it is one unbreakable piece longer than the line (the arrow and a series)
    for line in lines:
        assert len(line) <= width or " " not in line.strip().removeprefix("<- "), (width, line)


# ------------------------------------------------------------------------------------------------ "ruled out"
def _text_ruled_out(text: str) -> list[str]:
    if "\nRuled out:\n" not in text:
        return []
    block = text.split("\nRuled out:\n", 1)[1].split("\n\n", 1)[0]
    return re.findall(r"^  - (\S+) ", block, re.M)


def _text_not_judged(text: str) -> list[str]:
    m = re.search(r"^Not judged \([^)]*\): (.*?)(?:\n\n|\n[A-Z]|\Z)", text, re.M | re.S)
    return re.findall(r"[A-Z]+[0-9]+", m.group(1)) if m else []


def _markdown_ruled_out(md: str) -> list[str]:
    if "\n## Ruled out\n" not in md:
        return []
    block = md.split("\n## Ruled out\n", 1)[1].split("\n## ", 1)[0].split("<details>", 1)[0]
    return re.findall(r"^- \*\*\w+\*\* \((\S+)\):", block, re.M)


def _markdown_not_judged(md: str) -> list[str]:
    block = md.split("<details><summary>Not judged", 1)[1].split("</details>", 1)[0] if "<details>" in md else ""
    return re.findall(r"^- (\S+) `", block, re.M)


def _all_formats(*args: str) -> tuple[dict, str, str]:
    import json

    data = json.loads(_piped("analyze", *args, "--format", "json").stdout)
    return data, _piped("analyze", *args).stdout, _piped("analyze", *args, "--format", "markdown").stdout


def test_metrics_only_input_rules_out_nothing_the_log_would_say():
    data, text, md = _all_formats("--metrics-file", METRICS_ONLY)
    ruled = [r["rule_id"] for r in data["verdict"]["ruled_out"]]
    assert ruled and _text_ruled_out(text) == ruled and _markdown_ruled_out(md) == ruled
    assert not set(ruled) & set(LOG_ONLY_RULES), ruled
    by_id = {f["rule_id"]: f for f in data["findings"]}
    for rid in LOG_ONLY_RULES:
        f = by_id[rid]
        assert f["status"] == "quiet" and f["reason"].startswith("no evidence:"), f
        assert "no vLLM log was read" in f["reason"]
        assert rid in _text_not_judged(text) and rid in _markdown_not_judged(md), rid
    # what is ruled out rests on numbers the page held
    for rid in ruled:
        assert by_id[rid]["evidence"], rid
    assert "No OOM while loading the weights" not in text.split("Not judged")[0]
    assert "No OOM while loading the weights" not in md


@pytest.mark.parametrize("num", ["029", "007", "005", "015", "024"])
def test_log_only_input_same_ruled_out_in_every_format(num):
    data, text, md = _all_formats("--log", INCIDENTS[num])
    ruled = [r["rule_id"] for r in data["verdict"]["ruled_out"]]
    assert _text_ruled_out(text) == ruled and _markdown_ruled_out(md) == ruled
    rules = load_rules()
    by_id = {f["rule_id"]: f for f in data["findings"]}
    for rid in ruled:
        f = by_id[rid]
        assert f["status"] == "quiet" and not f["reason"] and f["class"] not in ("healthy", data["verdict"]["primary"])
        # a log-only input: a rule whose conditions read only /metrics series had no evidence here
        leaves = _leaf_signals(rules, rid)
        assert any(not SIGNALS[s].metrics or SIGNALS[s].logs for s in leaves), (rid, leaves)
    expected = {f["rule_id"] for f in data["findings"] if f["status"] == "unknown" or f["reason"].startswith("no evidence:")}
    one_line = re.search(r"^Not judged: none of the (\d+) rules found its signals", text, re.M)
    if one_line:  # nothing judged at all (issue 25: a non-vLLM input says so in one line, not a list of rules)
        assert int(one_line.group(1)) == len(data["findings"]) == len(expected)
        assert f"Not judged: none of the {len(expected)} rules" in md
        return
    not_judged = set(_text_not_judged(text))
    assert not_judged == set(_markdown_not_judged(md))
    assert not_judged == expected


def _leaf_signals(rules, rule_id: str) -> list[str]:
    rule = next(r for r in rules if r.id == rule_id)
    out, todo = [], [rule.when]
    while todo:
        node = todo.pop()
        if node.kind == "cond":
            out.append(node.cond.signal)
        todo += list(node.children)
    return out


def test_the_engine_needs_a_read_log_to_rule_out_a_log_event():
    """The same rule (WGT001, "no OOM while loading the weights") on the same facts: quiet on evidence when a log
    with lines was read, quiet without evidence when none was (or the log was empty)."""
    wgt = next(r for r in load_rules() if r.id == "WGT001")

    def bundle(log_lines: int | None) -> Bundle:
        b = Bundle()
        b.add("kv_cache_usage", 0.5, "metric:vllm:kv_cache_usage_perc in page.prom")
        b.inputs.append(InputInfo("metrics-file", "page.prom", records=1, observations=1))
        if log_lines is not None:
            b.inputs.append(InputInfo("log", "vllm.log", records=log_lines))
        return b

    with_log = evaluate_rule(wgt, bundle(120))
    assert with_log.status == "quiet" and with_log.on_evidence and with_log.reason == ""
    for lines in (None, 0):
        without = evaluate_rule(wgt, bundle(lines))
        assert without.status == "quiet" and not without.on_evidence
        assert without.reason.startswith("no evidence:") and "cuda_oom" in without.reason


# ------------------------------------------------------------------------------------------------ JSON instances
@pytest.mark.parametrize("args", [["--log", "fixtures/incidents/029-mtp-benchmark-queueing-kv-95pct-ttft-214s/vllm.log"],
                                  ["--metrics-file", METRICS_ONLY]], ids=["log", "metrics-file"])
def test_single_server_json_has_no_instances_copy(args):
    import json

    data = json.loads(_piped("analyze", *args, "--format", "json").stdout)
    assert data["schema_version"] == 2
    assert "instances" not in data
    assert data["findings"] and data["verdict"]["primary"] == "capacity_pressure"


def test_several_servers_json_lists_instances(static_server):
    import json

    page = (ROOT / METRICS_ONLY).read_bytes()
    quiet = (FIXTURES / "metrics" / "vllm033_quiet_0030.prom").read_bytes()
    a, b = static_server(page), static_server(quiet)
    res = _piped("analyze", "--metrics-url", a, "--metrics-url", b, "--duration", "1s", "--interval", "500ms",
                 "--format", "json")
    data = json.loads(res.stdout)
    assert [i["instance"] for i in data["instances"]] == [a, b]            # worst first
    assert data["instances"][0]["verdict"] == data["verdict"]
    text = _piped("analyze", "--metrics-url", a, "--metrics-url", b, "--duration", "1s", "--interval", "500ms",
                  "--width", "80").stdout
    assert text.splitlines()[0].startswith("CRITICAL: capacity_pressure (confidence high) on ")
    assert max(len(line) for line in text.splitlines()) <= 80
    assert sum(line.startswith("=== ") for line in text.splitlines()) == 2


def test_healthy_summary_counts_what_the_report_lists():
    """A metrics-only healthy server: the summary's "could not be judged" counts the rules listed as not judged
    (the log-only rules among them), its "judged quiet" the rules ruled out or checked on evidence."""
    data, text, md = _all_formats("--metrics-file", "fixtures/metrics/vllm033_quiet_0030.prom")
    assert data["verdict"]["primary"] == "healthy"
    m = re.search(r"(\d+) rule\(s\) judged quiet, (\d+) could not be judged", data["verdict"]["summary"])
    assert m, data["verdict"]["summary"]
    not_judged = _text_not_judged(text)
    assert int(m.group(2)) == len(not_judged) and set(LOG_ONLY_RULES) <= set(not_judged)
    on_evidence = [f for f in data["findings"] if f["status"] == "quiet" and not f["reason"]]
    assert int(m.group(1)) == len(on_evidence)
