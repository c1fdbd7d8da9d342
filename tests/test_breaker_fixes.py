"""Breaks found by a bad-input pass on diff, simulate and the renderers (2026-12-01), each fixed and tested here."""

import json
import shutil

import click
import pytest

from conftest import FIXTURES, run_kvdiag
from kvdiag import cli as cli_mod
from kvdiag.redaction import redact

STEP_COST = "overhead_ms=4,weights_ms=45,compute_us_per_token=230,kv_read_ns_per_token=500"
LAB_CASE = FIXTURES / "series" / "vllm033_pressure"


def test_a_truncated_gzip_recording_in_diff_is_an_error_not_an_interrupt(tmp_path):
    """click turns an EOFError into Abort; a cut .om.gz read 'kvdiag: interrupted', exit 130."""
    cut = tmp_path / "cut.om.gz"
    cut.write_bytes((FIXTURES / "diff" / "lab-block-size" / "before" / "recording.om.gz").read_bytes()[:5000])
    r = run_kvdiag("diff", str(cut), str(LAB_CASE / "vllm.log"))
    assert r.code == 3, (r.code, r.err)
    assert "interrupted" not in r.err and str(cut) in r.err and len(r.err.strip().splitlines()) == 1


def test_an_eoferror_anywhere_is_one_error_line_exit_3(capsys):
    @click.command("_eof_probe")
    def probe():
        raise EOFError("stream ended")

    cli_mod.cli.add_command(probe)
    try:
        rc = cli_mod._main(["_eof_probe"])
    finally:
        cli_mod.cli.commands.pop("_eof_probe", None)
    err = capsys.readouterr().err
    assert rc == 3 and "interrupted" not in err and "ended early (stream ended)" in err


def _trace(path):
    path.write_text("arrival_s,prompt_tokens,output_tokens\n0,100,10\n1,50,5\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("argv", [
    lambda t, d: ["simulate", "--trace", str(t), "--num-gpu-blocks", "100", "--step-cost", STEP_COST,
                  "--format", "html", "--output", str(t)],
    lambda t, d: ["analyze", "--log", str(LAB_CASE / "vllm.log"), "--trace", str(t), "--step-cost", STEP_COST,
                  "--output", str(t)],
    lambda t, d: ["simulate", "--lab-case", str(d), "--output", str(d / "workload.json")],
], ids=["simulate-trace", "analyze-trace", "simulate-lab-case"])
def test_output_never_overwrites_an_input(tmp_path, argv):
    trace = _trace(tmp_path / "t.csv")
    case = tmp_path / "case"
    shutil.copytree(LAB_CASE, case)
    before = {p: p.read_bytes() for p in (trace, case / "workload.json")}
    r = run_kvdiag(*argv(trace, case))
    assert r.code == 3 and "never overwrites its input" in r.err, (r.code, r.err)
    assert all(p.read_bytes() == b for p, b in before.items())


@pytest.mark.parametrize("path, value, field", [
    (("block_size",), 0, "block_size"),
    (("num_gpu_blocks",), -5, "num_gpu_blocks"),
    (("deployment", "enable_prefix_caching"), "maybe", "deployment.enable_prefix_caching"),
    (("deployment", "max_num_seqs"), 0, "deployment.max_num_seqs"),
    (("step_cost_model", "overhead_ms"), -1000, "step_cost_model.overhead_ms"),
    (("clock", "duration_s"), -10, "clock.duration_s"),
])
def test_a_lab_case_truth_out_of_domain_is_named(tmp_path, path, value, field):
    case = tmp_path / "case"
    shutil.copytree(LAB_CASE, case)
    truth = json.loads((case / "truth.json").read_text(encoding="utf-8"))
    node = truth
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    (case / "truth.json").write_text(json.dumps(truth), encoding="utf-8")
    r = run_kvdiag("simulate", "--lab-case", str(case))
    assert r.code == 3 and f"truth.json: {field} = " in r.err and "Error" not in r.err, r.err


def test_redaction_keeps_a_markdown_row_and_a_default_marker():
    row = "| --api-key | (default) | ['sk-abcdefghijklmnopqrstuv'] | changed |"
    out = redact(row)
    assert out.count("|") == row.count("|") and "(default)" in out and "sk-abc" not in out
    assert redact("--api-key s3cret|tail") == "--api-key ***"


def test_bidirectional_controls_never_reach_a_report():
    assert redact("model \u202eevil\u2066x") == "model ?evil?x"


def test_waiting_max_is_never_below_its_mean(tmp_path):
    """One request that never fits waits for the whole run: the max read 0 under a mean of 1."""
    trace = tmp_path / "big.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,1000,10\n", encoding="utf-8")
    r = run_kvdiag("simulate", "--trace", str(trace), "--num-gpu-blocks", "10", "--step-cost", STEP_COST,
                   "--format", "json")
    row = json.loads(r.out)["settings"][0]
    assert r.code == 0 and row["requests_never_fit"] == 1
    assert row["num_requests_waiting_max"] >= row["num_requests_waiting_p95"] >= row["num_requests_waiting_mean"] > 0


@pytest.mark.parametrize("value", ["nan", "inf", "-1e12"])
def test_from_metrics_times_out_of_domain_are_named(tmp_path, value):
    case = tmp_path / "pages"
    shutil.copytree(LAB_CASE, case)
    lines = (case / "times.csv").read_text(encoding="utf-8").splitlines()
    lines[5] = lines[5].split(",")[0] + "," + value
    (case / "times.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    r = run_kvdiag("simulate", "--from-metrics", str(case))
    assert r.code == 3 and "times.csv:6: unix_time" in r.err, r.err


def test_a_pool_from_kv_memory_too_large_names_that_option(tmp_path):
    r = run_kvdiag("simulate", "--trace", str(_trace(tmp_path / "t.csv")), "--kv-cache-memory", "1000000",
                   "--model-config", str(FIXTURES / "simulate" / "qwen2.5-7b-instruct.config.json"),
                   "--step-cost", STEP_COST)
    assert r.code == 3 and "--kv-cache-memory" in r.err and "--num-gpu-blocks" not in r.err, r.err


@pytest.mark.parametrize("argv, expected", [
    (["--window", "1ms"], "too short"),
    (["--out", "{d}/s.yml", "--tests", "{d}/s.yml"], "is also where --tests"),
    (["--out", "{d}/s.rules.yml", "--tests", "{d}/s.yml"], "is also where --tests"),
])
def test_rules_export_refuses_a_window_promtool_cannot_read_and_colliding_files(tmp_path, argv, expected):
    r = run_kvdiag("rules", "export", *[a.format(d=tmp_path) for a in argv])
    assert r.code == 3 and expected in r.err, r.err
    assert not list(tmp_path.iterdir())


def test_a_nan_or_negative_counter_sample_is_skipped_not_the_whole_recording(tmp_path):
    """OpenMetrics forbids them and prometheus-client refused the whole instant with a misleading message."""
    import gzip

    lines = gzip.decompress((FIXTURES / "lab" / "overload_000" / "recording.om.gz").read_bytes()).decode().splitlines(True)
    hits = [i for i, ln in enumerate(lines) if ln.startswith("vllm:num_preemptions_total{")]
    for i, bad in ((hits[3], "NaN"), (hits[5], "-1")):
        parts = lines[i].split(" ")
        parts[-2] = bad
        lines[i] = " ".join(parts)
    rec = tmp_path / "c.om"
    rec.write_text("".join(lines), encoding="utf-8")
    r = run_kvdiag("analyze", "--metrics-file", str(rec), "--format", "json")
    doc = json.loads(r.out)
    assert r.code == 2 and doc["verdict"]["primary"] == "capacity_pressure", r.err
    assert any("vllm:num_preemptions_total: counter NaN or negative ×2" in n for n in doc["inputs"][0]["notes"])


def test_diff_reads_the_model_of_a_page_from_its_model_name_label(tmp_path):
    """A log against a page of another model was compared (model '?' on the page side) instead of refused."""
    page = tmp_path / "llama.prom"
    page.write_text((FIXTURES / "metrics" / "vllm033_pressure_0054.prom").read_text(encoding="utf-8")
                    .replace("Qwen/Qwen2.5-7B-Instruct", "meta-llama/Llama-3.1-8B"), encoding="utf-8")
    r = run_kvdiag("diff", str(LAB_CASE / "vllm.log"), str(page))
    assert r.code == 3 and "different models" in r.err and "meta-llama/Llama-3.1-8B" in r.err, (r.code, r.err)
    same = run_kvdiag("diff", str(LAB_CASE / "vllm.log"), str(FIXTURES / "metrics" / "vllm033_pressure_0054.prom"))
    assert same.code != 3 and "Qwen/Qwen2.5-7B-Instruct → Qwen/Qwen2.5-7B-Instruct" in same.out, same.err
