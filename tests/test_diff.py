"""``kvdiag diff``: real public pairs (the explaining lines are named), lab pairs (the run's preemptions and usage
move the way the simulation measured, with the changed flag named), identical inputs, different models, exit codes,
the JSON schema. Fixtures: fixtures/diff/ (README.md there lists the pairs and their provenance)."""

from __future__ import annotations

import gzip
import json
import re
import shutil
from pathlib import Path

import jsonschema
import pytest

from conftest import FIXTURES, ROOT, run_kvdiag
from kvdiag.diff import DiffRefused, diff_inputs, fact, read_side, sniff
from kvdiag.report.diff_model import worse_exit
from kvdiag.report.diff_render import render_diff_json, render_diff_markdown, render_diff_text

GIB = 2 ** 30
D = FIXTURES / "diff"
SCHEMA = json.loads((ROOT / "kvdiag" / "report" / "diff.schema.json").read_text())


def _gib(line: str, pattern: str) -> float:
    return float(re.search(pattern, line).group(1)) * GIB


def _log_value(path: Path, pattern: str) -> float:
    """A number read straight from the fixture's own text (the expected values are never typed in by hand)."""
    m = re.search(pattern, path.read_text())
    assert m, (path, pattern)
    return float(m.group(1).replace(",", ""))


def _explanation(result, key):
    found = [e for e in result.explanations if e.key == key]
    assert found, f"no explanation of {key}: {[e.key for e in result.explanations]}"
    return found[0]


def _lab_side(name: str, side: str) -> list[str]:
    return [str(D / name / side / "recording.om.gz"), str(D / name / side / "vllm.log")]


# --- must show 1: real pairs ---------------------------------------------------------------------------------------------
def test_real_gpu_memory_utilization_pair_names_the_budget_and_the_flag():
    pair = D / "real-qwen2-7b-gpu-memory-utilization"
    res = diff_inputs([str(pair / "before.log")], [str(pair / "after.log")])
    kv_b = _log_value(pair / "before.log", r"Available KV cache memory: ([\d.]+) GiB") * GIB
    kv_a = _log_value(pair / "after.log", r"Available KV cache memory: ([\d.]+) GiB") * GIB
    e = _explanation(res, "kv_cache_memory_bytes")
    assert e.delta == pytest.approx(kv_a - kv_b)
    top = e.terms[0]
    assert top.key == "gpu_budget_bytes" and top.amount == pytest.approx(kv_a - kv_b, abs=0.01 * GIB)
    assert any(c.startswith("gpu_memory_utilization 25.0% → 50.0%") for c in top.causes)
    # the implied GPU size: (ΔKV − Σ printed terms) / Δutil; an A100 80GB reports ~79.2 GiB to torch
    implied = float(re.search(r"GPU of ([\d.]+) GiB", top.why).group(1))
    assert 78.5 < implied < 80.0
    assert res.regressions == []
    text = render_diff_text(res)
    assert "KV pool memory +19.82 GiB: budget (total × gpu_memory_utilization, not printed) +19.82 GiB" in text
    assert "← gpu_memory_utilization 25.0% → 50.0%" in text


def test_real_tensor_parallel_pair_names_the_weights_and_bytes_per_token():
    pair = D / "real-qwen2-7b-tensor-parallel"
    res = diff_inputs([str(pair / "before.log")], [str(pair / "after.log")])
    w_b = _log_value(pair / "before.log", r"Model loading took ([\d.]+) GiB") * GIB
    w_a = _log_value(pair / "after.log", r"Model loading took ([\d.]+) GiB") * GIB
    pool = _explanation(res, "kv_cache_memory_bytes")
    assert pool.terms[0].key == "weights_bytes"
    assert pool.terms[0].change == pytest.approx(w_a - w_b) and pool.terms[0].amount == pytest.approx(w_b - w_a)
    assert any("tensor_parallel_size" in c for c in pool.terms[0].causes)
    assert abs(pool.residual) < 0.2 * GIB  # activation / non-torch are not printed by 0.10 at INFO
    tokens = _explanation(res, "kv_cache_size_tokens")
    t_b = _log_value(pair / "before.log", r"GPU KV cache size: ([\d,]+) tokens")
    t_a = _log_value(pair / "after.log", r"GPU KV cache size: ([\d,]+) tokens")
    assert tokens.delta == pytest.approx(t_a - t_b)
    assert tokens.terms[0].key == "bytes_per_token"  # each GPU holds half the KV heads
    assert sum(t.amount for t in tokens.terms) == pytest.approx(t_a - t_b)
    assert any("tensor_parallel_size" in c for c in tokens.terms[0].causes)


def test_real_max_model_len_pair_names_the_profile_peak_and_a_new_failure():
    pair = D / "real-llama31-8b-max-model-len"
    res = diff_inputs([str(pair / "before.log")], [str(pair / "after.log")])
    e = _explanation(res, "kv_cache_memory_bytes")
    peak_b = _log_value(pair / "before.log", r"peak_torch_memory=([\d.]+)GiB") * GIB
    peak_a = _log_value(pair / "after.log", r"peak_torch_memory=([\d.]+)GiB") * GIB
    assert e.terms[0].key == "peak_torch_memory_bytes"
    assert e.terms[0].change == pytest.approx(peak_a - peak_b)
    assert e.residual == pytest.approx(0.0, abs=0.011 * GIB)  # the printed lines account for the whole change
    assert any(c.startswith("max_model_len 20,000 tokens → 29,000 tokens") for c in e.terms[0].causes)
    assert any(r.startswith("a new failure: start-up refused") for r in res.regressions)
    assert res.after.primary == "startup_kv_capacity"


def test_real_pair_through_the_cli_text_and_fail_on_regression():
    pair = D / "real-llama31-8b-max-model-len"
    r = run_kvdiag("diff", str(pair / "before.log"), str(pair / "after.log"))
    assert r.code == 0, r.err  # a comparison made (AFTER's critical verdict is in the output, not the exit code)
    assert "What explains the difference:" in r.out and "PyTorch peak of the profile run" in r.out
    r = run_kvdiag("diff", str(pair / "before.log"), str(pair / "after.log"), "--fail-on-regression")
    assert r.code == 1 and "AFTER regressed:" in r.out
    r = run_kvdiag("diff", str(pair / "after.log"), str(pair / "before.log"), "--fail-on-regression")
    assert r.code == 0, r.out  # the other way round gains KV memory and loses the failure


# --- must show 2: lab pairs ----------------------------------------------------------------------------------------------
def _truth(name, side):
    return json.loads((D / name / side / "truth.json").read_text())


def test_lab_block_size_pair_names_preemptions_usage_and_block_size():
    res = diff_inputs(_lab_side("lab-block-size", "before"), _lab_side("lab-block-size", "after"))
    rows = {r.key: r for r in res.rows}
    tb, ta = _truth("lab-block-size", "before"), _truth("lab-block-size", "after")
    assert rows["block_size"].before == tb["block_size"] and rows["block_size"].after == ta["block_size"]
    pre = rows["run.preemptions"]
    assert pre.before == 0 and pre.after > 0 and ta["totals"]["preemptions"] > tb["totals"]["preemptions"]
    usage = rows["run.kv_cache_usage_mean"]
    assert usage.delta > 0.03 and ta["block_usage"]["mean_time_weighted"] > tb["block_usage"]["mean_time_weighted"]
    e = _explanation(res, "run.preemptions_per_s")
    assert e.label.startswith(f"preemptions 0 requests → {pre.after:,.0f} requests")
    assert any(t.label.startswith("block_size 16 tokens → 128 tokens") for t in e.terms)
    assert any(t.label.startswith("block_size") for t in _explanation(res, "run.kv_cache_usage_mean").terms)
    text = render_diff_text(res)
    assert "preemptions 0 requests → " in text and "block_size 16 tokens → 128 tokens" in text
    assert rows["kv_cache_size_tokens"].changed is False  # the same memory holds the same tokens


def test_lab_max_num_seqs_pair_names_preemptions_waiting_and_max_num_seqs():
    res = diff_inputs(_lab_side("lab-max-num-seqs", "before"), _lab_side("lab-max-num-seqs", "after"))
    rows = {r.key: r for r in res.rows}
    tb, ta = _truth("lab-max-num-seqs", "before"), _truth("lab-max-num-seqs", "after")
    assert (rows["max_num_seqs"].before, rows["max_num_seqs"].after) == (256, 64)
    pre = rows["run.preemptions"]
    assert pre.before > 0 and pre.after == 0 and ta["totals"]["preemptions"] == 0 < tb["totals"]["preemptions"]
    assert rows["run.kv_cache_usage_mean"].delta < -0.1 and ta["block_usage"]["mean_time_weighted"] < tb["block_usage"]["mean_time_weighted"]
    assert rows["run.num_requests_waiting_mean"].delta > 0
    for key in ("run.preemptions_per_s", "run.kv_cache_usage_mean", "run.num_requests_waiting_mean"):
        assert any(t.label.startswith("max_num_seqs 256 requests → 64 requests") for t in _explanation(res, key).terms)
    # AFTER trades preemptions for a queue held at max_num_seqs 64 with room in the pool: queueing, not healthy
    assert res.before.primary == "capacity_pressure" and res.after.primary == "queueing"
    assert res.after.severity == "warning" and "max_num_seqs" in res.after.summary
    assert res.exit_code == 0  # a comparison made
    # the run regressed: the mean queue 9 → 152 and throughput -26 % (the lab's truth agrees: more waiting after)
    assert any(r.startswith("a longer queue: mean waiting") for r in res.regressions), res.regressions
    assert any(r.startswith("less throughput:") for r in res.regressions), res.regressions
    before, after = _lab_side("lab-max-num-seqs", "before"), _lab_side("lab-max-num-seqs", "after")
    r = run_kvdiag("diff", before[0], after[0], *sum((["--before-also", p] for p in before[1:]), []),
                   *sum((["--after-also", p] for p in after[1:]), []), "--fail-on-regression")
    assert r.code == 1 and "AFTER regressed:" in r.out and "a longer queue" in r.out, r.out


# --- must show 3: identical inputs, different models -------------------------------------------------------------------
@pytest.mark.parametrize("inputs", [["real-qwen2-7b-tensor-parallel/after.log"],
                                    ["lab-max-num-seqs/after/recording.om.gz", "lab-max-num-seqs/after/vllm.log"]])
def test_identical_inputs_say_no_difference_and_exit_0(inputs):
    paths = [str(D / p) for p in inputs]
    res = diff_inputs(paths, list(paths))
    assert res.identical and not res.explanations and not res.regressions
    assert "No difference" in render_diff_text(res) and "**No difference**" in render_diff_markdown(res)
    assert res.exit_code == 0  # a comparison made, whatever each side's verdict
    r = run_kvdiag("diff", paths[0], paths[0], *sum((["--before-also", p, "--after-also", p] for p in paths[1:]), []))
    assert r.code == 0 and "No difference" in r.out
    r = run_kvdiag("diff", paths[0], paths[0], *sum((["--before-also", p, "--after-also", p] for p in paths[1:]), []),
                   "--fail-on-regression")
    assert r.code == 0, r.out  # nothing regressed


def test_different_models_are_refused_in_one_line(tmp_path):
    before = D / "real-qwen2-7b-tensor-parallel" / "before.log"
    after = D / "lab-max-num-seqs" / "after" / "vllm.log"
    with pytest.raises(DiffRefused, match="BEFORE serves Qwen2-7B-Instruct .* AFTER serves mistralai/Mistral-7B"):
        diff_inputs([str(before)], [str(after)])
    r = run_kvdiag("diff", str(before), str(after))
    assert r.code == 3 and r.out == ""
    assert len(r.err.strip().splitlines()) == 1 and "--allow-different-models" in r.err
    r = run_kvdiag("diff", str(before), str(after), "--allow-different-models", "--format", "json")
    assert r.code in (0, 1, 2, 3)
    assert any("different models" in w for w in r.json()["warnings"])


def test_a_local_path_and_the_hub_id_of_one_model_are_the_same_model(tmp_path):
    src = (D / "lab-max-num-seqs" / "after" / "vllm.log").read_text()
    local = tmp_path / "local.log"
    local.write_text(src.replace("'model': 'mistralai/Mistral-7B-Instruct-v0.3'", "'model': '/models/Mistral-7B-Instruct-v0.3'"))
    res = diff_inputs([str(D / "lab-max-num-seqs" / "after" / "vllm.log")], [str(local)])
    assert not any("different models" in w for w in res.warnings)


# --- formats, reading --------------------------------------------------------------------------------------------------
def test_json_validates_and_markdown_has_a_table_per_section():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    for pair in ("real-qwen2-7b-gpu-memory-utilization", "real-llama31-8b-max-model-len"):
        res = diff_inputs([str(D / pair / "before.log")], [str(D / pair / "after.log")])
        doc = json.loads(render_diff_json(res))
        jsonschema.validate(doc, SCHEMA)
        assert doc["explanations"][0]["key"] == "kv_cache_memory_bytes"
    res = diff_inputs(_lab_side("lab-block-size", "before"), _lab_side("lab-block-size", "after"))
    jsonschema.validate(json.loads(render_diff_json(res)), SCHEMA)
    md = render_diff_markdown(res)
    for title in ("## Start-up memory budget", "## Configuration", "## The run", "## What explains the difference"):
        assert title in md
    assert "| line | BEFORE | AFTER | change | sources |" in md


def test_rows_are_ordered_by_how_much_they_moved():
    pair = D / "real-qwen2-7b-tensor-parallel"
    res = diff_inputs([str(pair / "before.log")], [str(pair / "after.log")])
    for section in ("budget", "config"):
        moved = [r.moved for r in res.section(section)]
        assert moved == sorted(moved, reverse=True)
    assert res.section("budget")[0].changed and not res.section("budget")[-1].changed


def test_content_not_the_name_tells_a_page_from_a_log(tmp_path):
    rec = D / "lab-block-size" / "before" / "recording.om.gz"
    assert sniff(str(rec)) == "metrics-file"
    renamed = tmp_path / "capture.txt"
    renamed.write_bytes(gzip.decompress(rec.read_bytes()))
    assert sniff(str(renamed)) == "metrics-file"
    page = tmp_path / "page.log"  # a page without HELP/TYPE lines, under a log's name
    page.write_text('vllm:num_requests_running{engine="0"} 3\nvllm:kv_cache_usage_perc{engine="0"} 0.5\n')
    assert sniff(str(page)) == "metrics-file"
    assert sniff(str(D / "real-llama31-8b-max-model-len" / "before.log")) == "log"
    shutil.copy(D / "real-llama31-8b-max-model-len" / "before.log", tmp_path / "x.prom")
    assert sniff(str(tmp_path / "x.prom")) == "log"


def test_bad_inputs_give_one_error_line(tmp_path):
    empty = tmp_path / "empty.log"
    empty.write_text("")
    log = str(D / "real-llama31-8b-max-model-len" / "before.log")
    for args in ([str(tmp_path / "missing.log"), log], [str(empty), log], [str(tmp_path), log]):
        r = run_kvdiag("diff", *args)
        assert r.code == 3 and r.out == "" and len(r.err.strip().splitlines()) == 1, (args, r.err)
        assert r.err.startswith("kvdiag: error: ") and "Traceback" not in r.err


def test_non_default_args_and_engine_lines_reach_the_bundle():
    side = read_side([str(D / "real-qwen2-7b-tensor-parallel" / "after.log")])
    text, src = fact(side.bundle, "engine_args")
    assert "'tensor_parallel_size': 2" in text and src.endswith(":3")
    assert fact(side.bundle, "engine_generation")[0] == "V1"
    assert fact(side.bundle, "max_num_batched_tokens")[0] == 2048


def test_worse_exit_ranks_critical_over_warning_over_unknown():
    assert worse_exit(0, 3) == 3 and worse_exit(3, 1) == 1 and worse_exit(1, 2) == 2 and worse_exit(0, 0) == 0


# --- two windows of one Prometheus -----------------------------------------------------------------------------------
def _raw(om: str, metric: str, t0: float, t1: float) -> list[float]:
    pat = re.compile(r"^" + re.escape(metric) + r"\{[^}]*\} (\S+) (\S+)$")
    return [float(m.group(1)) for m in map(pat.match, om.splitlines()) if m and t0 <= float(m.group(2)) <= t1]


def test_two_windows_of_one_prometheus(tmp_path):
    from promserver import PROMETHEUS, PROMTOOL, PrometheusServer, backfill

    assert PROMETHEUS and PROMTOOL, "needs Debian's prometheus package (apt-get install prometheus; see .ci/run)"
    om = gzip.decompress((D / "lab-max-num-seqs" / "before" / "recording.om.gz").read_bytes()).decode()
    om = re.sub(r"^([A-Za-z_:][\w:]*)\{", r'\1{instance="lab:8000",job="lab",', om, flags=re.M)
    (tmp_path / "lab.om").write_text(om)
    backfill(tmp_path / "lab.om", tmp_path / "data")
    times = sorted({float(t) for t in re.findall(r"^vllm:kv_cache_usage_perc\{[^}]*\} \S+ (\S+)$", om, flags=re.M)})
    mid = times[len(times) // 2]
    w1, w2 = (times[0], mid), (mid + 10, times[-1])
    with PrometheusServer(tmp_path / "data") as prom:
        r = run_kvdiag("diff", "--prometheus-url", prom.url, "--selector", '{job="lab"}', "--step", "10s",
                       "--before-window", f"{w1[0]:.3f}..{w1[1]:.3f}", "--after-window", f"{w2[0]:.3f}..{w2[1]:.3f}",
                       "--format", "json")
        bad = run_kvdiag("diff", "--prometheus-url", prom.url, "--selector", '{job="nothing"}',
                         "--before-window", f"{w1[0]:.3f}..{w1[1]:.3f}", "--after-window", f"{w2[0]:.3f}..{w2[1]:.3f}")
    assert r.code in (0, 1, 2), r.err
    doc = r.json()
    jsonschema.validate(doc, SCHEMA)
    rows = {row["key"]: row for row in doc["rows"]}
    for side, (t0, t1) in (("before", w1), ("after", w2)):
        counter = _raw(om, "vllm:num_preemptions_total", t0, t1)
        raw = counter[-1] - counter[0]
        got = rows["run.preemptions"][side]
        assert got == pytest.approx(raw, rel=0.25, abs=3), (side, got, raw)  # PromQL increase() extrapolates
        usage = _raw(om, "vllm:kv_cache_usage_perc", t0, t1)
        assert rows["run.kv_cache_usage_mean"][side] == pytest.approx(sum(usage) / len(usage), abs=0.03)
    assert doc["before"]["kind"] == "prometheus" and "lab:8000" in doc["before"]["name"]
    assert bad.code == 3 and len(bad.err.strip().splitlines()) == 1


# --- the rules behind the explanations, on small logs ------------------------------------------------------------------
def _side_of(tmp_path, name: str, text: str):
    p = tmp_path / name
    p.write_text(text)
    return read_side([str(p)])


BANNER = "(APIServer pid=1) INFO 05-01 20:44:30 [api_server.py:1805] vLLM API server version {v}\n"
M9 = "(EngineCore pid=187) INFO 05-01 20:47:46 [gpu_model_runner.py:6042] Estimated CUDA graph memory: {g} GiB total\n"


@pytest.mark.parametrize("version, counted", [("0.20.0", False), ("0.21.0", True), ("0.33.0", True)])
def test_cuda_graph_estimate_counts_in_the_budget_from_0_21(tmp_path, version, counted):
    """vLLM prints the M9 estimate before 0.21 too (0.20.0 in shared/fixtures/capacity U01), but subtracts it from the
    KV budget only from 0.21 ('CUDA graph memory profiling is enabled (default since v0.21.0)')."""
    from kvdiag.diff import _cudagraph_budgeted

    side = _side_of(tmp_path, "v.log", BANNER.format(v=version) + M9.format(g="0.36"))
    value, _src, why = _cudagraph_budgeted(side.bundle)
    assert value == (pytest.approx(0.36 * GIB) if counted else 0.0), why


def test_an_upgrade_that_starts_counting_cuda_graphs_names_them(tmp_path):
    """0.20 → 0.21 with the same estimate and everything else equal: the pool shrinks by the estimate, and the
    explanation names the CUDA-graph term and the version."""
    kv = "(EngineCore pid=187) INFO 05-01 20:47:46 [gpu_worker.py:440] Available KV cache memory: {kv} GiB\n"
    w = "(EngineCore pid=187) INFO 05-01 20:45:53 [gpu_model_runner.py:3659] Model loading took 14.25 GiB memory and 9.1 seconds\n"
    before = _side_of(tmp_path, "b.log", BANNER.format(v="0.20.0") + w + M9.format(g="3.20") + kv.format(kv="40.00"))
    after = _side_of(tmp_path, "a.log", BANNER.format(v="0.21.0") + w + M9.format(g="3.20") + kv.format(kv="36.80"))
    from kvdiag.diff import compare

    res = compare(before, after)
    e = _explanation(res, "kv_cache_memory_bytes")
    assert e.terms[0].key == "cudagraph" and e.terms[0].amount == pytest.approx(-3.2 * GIB)
    assert e.residual == pytest.approx(0.0, abs=0.01 * GIB)
    assert any(c.startswith("vLLM version 0.20.0 → 0.21.0") for c in e.terms[0].causes)
    assert any(r.startswith("less KV memory") for r in res.regressions)


def test_a_value_neither_side_sets_is_called_a_default(tmp_path):
    """The lab's 0.33 log with the scheduler line of a version whose default is 2048 tokens: neither 'non-default
    args' sets max_num_batched_tokens, so the row says the versions' defaults differ."""
    src = (D / "lab-max-num-seqs" / "before" / "vllm.log").read_text()
    older = src.replace("max_num_batched_tokens=8192", "max_num_batched_tokens=2048").replace("version 0.33.0",
                                                                                              "version 0.32.0")
    res = diff_inputs([str(_write(tmp_path, "older.log", older))], [str(D / "lab-max-num-seqs" / "before" / "vllm.log")])
    row = {r.key: r for r in res.rows}["max_num_batched_tokens"]
    assert (row.before, row.after) == (2048, 8192) and row.note.startswith("a default on both sides")
    seqs = {r.key: r for r in res.rows}["max_num_seqs"]
    assert not seqs.changed  # set on both sides to the same value


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_a_secret_in_non_default_args_reaches_no_output(tmp_path):
    src = (D / "lab-max-num-seqs" / "after" / "vllm.log").read_text()
    leaky = src.replace("'max_num_seqs': 64}", "'max_num_seqs': 64, 'api_key': ['sk-live-0123456789abcdef']}")
    assert leaky != src
    p = _write(tmp_path, "leaky.log", leaky)
    res = diff_inputs([str(D / "lab-max-num-seqs" / "after" / "vllm.log")], [str(p)])
    assert any(r.key == "engine_args.api_key" and r.changed for r in res.rows)  # the key is compared, not its value
    for out in (render_diff_text(res), render_diff_markdown(res), render_diff_json(res)):
        assert "sk-live-0123456789abcdef" not in out


def test_a_log_of_two_start_ups_gives_the_last_one_and_says_so(tmp_path):
    pair = D / "real-qwen2-7b-gpu-memory-utilization"
    both = _write(tmp_path, "restarted.log", (pair / "before.log").read_text() + (pair / "after.log").read_text())
    res = diff_inputs([str(pair / "before.log")], [str(both)])
    rows = {r.key: r for r in res.rows}
    assert rows["kv_cache_memory_bytes"].after == pytest.approx(
        _log_value(pair / "after.log", r"Available KV cache memory: ([\d.]+) GiB") * GIB)
    assert rows["gpu_memory_utilization"].after == 0.5
    # issue 24: a log is cut into server runs; the last is compared and the warning says so
    assert any(w.startswith("AFTER holds 2 server runs") and "run 2 is compared" in w for w in res.warnings), \
        res.warnings


def test_max_concurrency_splits_into_pool_and_max_model_len():
    pair = D / "real-llama31-8b-max-model-len"
    res = diff_inputs([str(pair / "before.log")], [str(pair / "after.log")])
    e = _explanation(res, "max_concurrency")
    labels = [t.label for t in e.terms]
    assert any(lb.startswith("GPU blocks ×0.76 (1,952 → 1,478)") for lb in labels)
    assert any(lb.startswith("max_model_len ×1.45 (20,000 → 29,000)") for lb in labels)
    new = [r for r in res.regressions if r.startswith("a new failure")]
    assert new and new[0].endswith("changed: max_model_len 20,000 tokens → 29,000 tokens")


def test_a_line_one_side_does_not_print_is_not_named_as_a_cause():
    """A recording (no start-up lines) against a log: the run's change names block_size (on both sides, from
    cache_config_info and the log), never the settings only the log prints."""
    res = diff_inputs([str(D / "lab-block-size" / "before" / "recording.om.gz")],
                      [str(D / "lab-block-size" / "after" / "vllm.log")])
    e = _explanation(res, "run.kv_cache_usage_mean")
    assert [t.label.split(" ")[0] for t in e.terms] == ["block_size"]
    assert not any(x.key == "run.num_requests_waiting_mean" for x in res.explanations)  # 0.0 → 0.3 is no move
