"""kvdiag/vllm_metrics.py: the one table of vLLM's /metrics names (issue 26, "each vLLM name declared once").

Every metric name a reader (the page reader, the PromQL reader) or an exporter (alert rules, promtool tests, the
Grafana dashboard, kvdiag's own /metrics) uses comes from ``kvdiag/vllm_metrics.yaml``: the readers' and exporters'
source spells no vLLM name itself, and every name in what they send or write is in the table. Each check is shown
to fail on a planted name.
"""

from __future__ import annotations

import ast
import http.server
import json
import re
import threading
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from kvdiag import signals, vllm_metrics as vm

PKG = Path(__file__).resolve().parent.parent / "kvdiag"
#: the modules that read or write vLLM's metric names
READERS_AND_EXPORTERS = ["collect/metrics.py", "collect/prometheus.py", "export.py", "dashboards.py", "exporter.py"]


# --- the table's shape ---------------------------------------------------------------------------------------------
def test_every_row_is_well_formed():
    seen: set[str] = set()
    for signal, row in vm.TABLE.items():
        assert row.type in ("gauge", "counter", "histogram"), signal
        assert row.across_series in ("sum", "max"), signal
        assert row.names, signal
        for n in row.names:
            assert n.versions, (signal, n.name)
            assert not n.name.endswith("_total") and not n.name.startswith("vllm"), (signal, n.name)
            assert n.name not in seen, f"{n.name} is declared twice"
            seen.add(n.name)
        if row.type == "histogram":
            assert row.unit and row.description and f"{signal}_p95" in signals.SIGNALS, signal
        else:
            assert signal in signals.SIGNALS, signal
    assert not seen & set(signals.IGNORED_METRICS)


def test_every_replaced_name_carries_vllms_deprecation():
    """A name that is not a signal's best one (a rename) says how vLLM deprecated it, in vLLM's words."""
    old = [(s, n) for s, row in vm.TABLE.items() for n in row.names[1:]]
    assert old
    for signal, n in old:
        assert "Deprecated in" in n.deprecated and "loggers.py" in n.deprecated, (signal, n.name)
        best = vm.names(signal)[0]
        assert f"vllm:{best}" in n.deprecated, (signal, n.name)


def test_the_signal_tables_are_the_table():
    expect = {n.name: s for s, row in vm.TABLE.items() if row.type != "histogram" and row.prefixed for n in row.names}
    assert signals.METRIC_TO_SIGNAL == expect
    assert signals.METRIC_ALIASES == {s: vm.names(s) for s, row in vm.TABLE.items() if len(row.names) > 1}
    assert signals.CACHE_CONFIG_LABELS == {i.label: i.signal for i in vm.INFO_LABELS}
    assert set(signals.WINDOW_HISTOGRAMS) == {vm.histogram_base(s) for s, r in vm.TABLE.items() if r.type == "histogram"}
    for signal in vm.TABLE:
        if vm.TABLE[signal].type != "histogram":
            assert signals.SIGNALS[signal].metrics == vm.prose(signal)
    for info in vm.INFO_LABELS:
        assert signals.SIGNALS[info.signal].metrics == vm.info_prose(info.signal)


def test_the_promql_readers_tables_are_the_table():
    from kvdiag.collect import prometheus

    for signal, (agg, names, extra) in prometheus.GAUGES.items():
        assert (agg, names, extra) == (vm.TABLE[signal].across_series, vm.names(signal), vm.promql_matcher(signal))
    for signal, names in prometheus.COUNTERS.items():
        stem = signal.removesuffix("_count")
        assert names == (vm.wire(signal) if signal in vm.TABLE else (vm.histogram_base(stem) + "_count",)), signal


# --- no reader or exporter spells a vLLM name itself ---------------------------------------------------------------
def _vllm_words() -> set[str]:
    """Names that can only be vLLM metric names: each name of the table that is not also a signal's name, and every
    name's ``_total`` form."""
    names = vm.all_names()
    return {n for n in names if n not in signals.SIGNALS} | {n + "_total" for n in names}


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
        if isinstance(node, ast.Assign) or isinstance(node, ast.AnnAssign):
            pass
    # attribute docstrings: a string statement right after an assignment
    for node in ast.walk(tree):
        for field in ("body", "orelse"):
            body = getattr(node, field, None)
            if isinstance(body, list):
                for a, b in zip(body, body[1:]):
                    if isinstance(a, (ast.Assign, ast.AnnAssign)) and isinstance(b, ast.Expr) \
                            and isinstance(b.value, ast.Constant):
                        out.add(id(b.value))
    return out


def _prose_args(tree: ast.AST) -> set[int]:
    """String constants inside the description argument of a dashboard ``_panel(title, description, ...)``: prose
    shown to a reader, not a name the code uses."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "_panel" and len(node.args) > 1:
            out |= {id(c) for c in ast.walk(node.args[1]) if isinstance(c, ast.Constant)}
    return out


def _base(name: str) -> str:
    for sfx in ("_bucket", "_sum", "_count"):
        if name.endswith(sfx):
            name = name[: -len(sfx)]
            break
    return name.removesuffix("_total")


def spelled_names(source: str) -> list[str]:
    """The vLLM metric names a module's code spells itself (docstrings and dashboard prose aside): a name of the
    table or of IGNORED_METRICS behind a ``vllm:`` / ``vllm_`` prefix, or a table name no signal shares."""
    tree = ast.parse(source)
    skip = _docstrings(tree) | _prose_args(tree)
    words = _vllm_words()
    known = vm.all_names() | set(signals.IGNORED_METRICS)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]*(?::[A-Za-z_][A-Za-z0-9_]*)?", node.value):
                m = re.fullmatch(r"(?:ray_)?vllm[:_]([a-z][a-z0-9_]*)", w)
                if (m and (m.group(1) in known or _base(m.group(1)) in known)) or w in words:
                    found.append(w)
    return sorted(found)


@pytest.mark.parametrize("module", READERS_AND_EXPORTERS)
def test_readers_and_exporters_spell_no_vllm_name(module):
    found = spelled_names((PKG / module).read_text(encoding="utf-8"))
    assert not found, f"{module} spells vLLM metric names itself (take them from kvdiag.vllm_metrics): {found}"


def test_the_source_check_finds_a_spelled_name():
    planted = 'GAUGES = {"kv_cache_usage": ("max", ("kv_cache_usage_perc", "gpu_cache_usage_perc"), "")}\n' \
              'q = f"rate(vllm:num_preemptions_total[5m])"\nc = "prompt_tokens_total"\n'
    assert spelled_names(planted) == sorted(["kv_cache_usage_perc", "gpu_cache_usage_perc",
                                             "vllm:num_preemptions_total", "prompt_tokens_total"])
    assert spelled_names('"""vllm:kv_cache_usage_perc in a docstring"""\nx = metric_names("kv_cache_usage")\n') == []


# --- every name in what they send or write is in the table ---------------------------------------------------------
_NAME = re.compile(r"(?<![A-Za-z0-9_:])(?:ray_)?vllm[:_]([a-z][a-z0-9_]*)")
_SUFFIXES = ("_bucket", "_sum", "_count", "_total")


def unknown_names(text: str) -> set[str]:
    """vLLM names in ``text`` (PromQL, a regex of names) that the table does not hold."""
    known = vm.all_names()
    out = set()
    for m in _NAME.finditer(text):
        name = m.group(1)
        if name in known:
            continue
        stem = name
        for sfx in _SUFFIXES:
            if stem.endswith(sfx) and stem[: -len(sfx)] in known | {n + "_total" for n in known}:
                stem = stem[: -len(sfx)]
                break
        if stem.removesuffix("_total") not in known:
            out.add(name)
    return out


def _names_in_regex(text: str) -> str:
    """``vllm[:_](kv|gpu)_cache_usage_perc`` → ``vllm:kv_cache_usage_perc vllm:gpu_cache_usage_perc``."""
    def expand(m):
        heads, tail = m.group(1).split("|"), m.group(2)
        return " ".join(f"vllm:{h}{tail}" for h in heads)
    text = re.sub(r"vllm\[:_\]\(([a-z_|]+)\)([a-z0-9_]*)", expand, text)
    return text.replace("(?:ray_)?vllm[:_]", "vllm:").replace("vllm[:_]", "vllm:")


def test_exported_rules_and_dashboard_use_only_table_names(tmp_path):
    from kvdiag import dashboards, export
    from kvdiag.engine.model import load_rules

    rules = load_rules()
    alerts, _ = export.exportable_alerts(rules, "5m")
    exprs = [a["expr"] for a in alerts] + [r["expr"] for r in export.recording_rules(export.Window("5m"))]
    board = dashboards.export_json(rules)
    targets = [t["expr"] for p in json.loads(board)["panels"] for t in p.get("targets", [])]
    variables = [v.get("query") for v in json.loads(board)["templating"]["list"] if v.get("query")]
    texts = exprs + targets + [json.dumps(v) for v in variables]
    assert any("kv_cache_usage_perc" in t for t in texts) and any("_total" in t for t in texts)
    bad = {n for t in texts for n in unknown_names(_names_in_regex(t))}
    assert not bad, f"names not in kvdiag/vllm_metrics.yaml: {sorted(bad)}"


def test_promtool_tests_use_only_table_names(tmp_path):
    from kvdiag import export
    from kvdiag.engine.cases import find_case_files, load_cases
    from kvdiag.engine.model import builtin_rules_dir, load_rules

    rules = load_rules()
    cases = [c for f in find_case_files([builtin_rules_dir()]) for c in load_cases(f)]
    text, _skipped = export.promtool_tests(rules, cases, "rules.yml")
    assert "input_series" in text
    assert not unknown_names(text), sorted(unknown_names(text))


class _Recorder(http.server.BaseHTTPRequestHandler):
    """A Prometheus HTTP API on loopback that answers every query with one series of instance "a" and keeps the
    queries."""

    queries: list[str] = []

    def log_message(self, *args):
        pass

    def do_GET(self):
        url = urlsplit(self.path)
        q = parse_qs(url.query).get("query", [""])[0]
        type(self).queries.append(q)
        metric = {"instance": "a", "block_size": "16", "num_gpu_blocks": "100"}
        if url.path.endswith("query_range"):
            data = {"resultType": "matrix", "result": [{"metric": metric, "values": [[1000, "0.5"], [1015, "0.6"]]}]}
        else:
            data = {"resultType": "vector", "result": [{"metric": metric, "value": [1000, "0.5"]}]}
        body = json.dumps({"status": "success", "data": data}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_the_promql_reader_asks_only_for_table_names():
    from kvdiag.collect.prometheus import collect_fleet

    _Recorder.queries = []
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        out = collect_fleet(f"http://127.0.0.1:{srv.server_address[1]}", "", 1000.0, 4600.0, 15.0)
    finally:
        srv.shutdown()
        srv.server_close()
    assert out and len(_Recorder.queries) > 20
    text = "\n".join(_Recorder.queries)
    names = set(re.findall(r'vllm\[:_\]([a-z0-9_|()?:]+)', text))
    assert names, text[:300]
    expanded = _names_in_regex(text)
    for alt in re.findall(r'vllm:\(\?:([a-z0-9_|]+)\)', expanded):  # the instance finder: one regex of every gauge
        expanded += " " + " ".join(f"vllm:{n}" for n in alt.split("|"))
    expanded = re.sub(r'vllm:\(\?:[a-z0-9_|]+\)', " ", expanded)
    assert not unknown_names(expanded), sorted(unknown_names(expanded))
    for signal in ("kv_cache_usage", "num_requests_waiting", "num_requests_running"):
        assert all(n in text for n in vm.names(signal)), signal


def test_the_output_check_finds_a_name_the_table_lacks():
    assert unknown_names("rate(vllm:num_preemptions_total[5m]) + vllm_kv_cache_usage_perc") == set()
    assert unknown_names("histogram_quantile(0.5, vllm:request_queue_time_seconds_bucket)") == set()
    assert unknown_names("vllm:kv_cache_usage_percent + vllm_num_preempted_total") == {"kv_cache_usage_percent",
                                                                                       "num_preempted_total"}
    assert unknown_names(_names_in_regex('{__name__=~"vllm[:_](kv|gpux)_cache_usage_perc"}')) == \
        {"gpux_cache_usage_perc"}


def test_the_page_reader_reads_every_table_name():
    """Each name of the table lands on its signal through the page reader (both spellings)."""
    from kvdiag.bundle import Bundle
    from kvdiag.collect.metrics import add_page, parse_page

    for signal, row in vm.TABLE.items():
        if row.type == "histogram" or not row.prefixed:
            continue
        for name in vm.wire(signal):
            for sep in vm.SPELLINGS:
                labels = ",".join(f'{k}="{v}"' for k, v in row.labels.items())
                page = f"# TYPE {sep}{name.removesuffix('_total')} {row.type}\n{sep}{name}{{{labels}}} 0.5\n"
                b = Bundle()
                add_page(b, parse_page(page, "p"), "p", 1.0)
                assert b.has(signal), (signal, sep, name)
