"""``kvdiag simulate``: the scheduler model against vLLM's own scheduler (the lab cases in fixtures/simulate/, run
without the lab), hand-checkable behaviours of the model, the CLI's table and JSON schema, and bad input."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import jsonschema
import pytest
import yaml

from kvdiag.simulate.model import Request, Setting, StepCost, simulate
from kvdiag.simulate.workload import lab_ticks, load_lab_case

from conftest import FIXTURES, run_kvdiag

CASES = FIXTURES / "simulate"
SCHEMA = json.loads((Path(__file__).resolve().parents[1] / "kvdiag" / "simulate" / "simulate.schema.json").read_text())
PRESSURE = FIXTURES / "series" / "vllm033_pressure"
COST = StepCost(overhead_ms=4, weights_ms=45, compute_us_per_token=230, kv_read_ns_per_token=500)


def case_names() -> list[str]:
    return sorted(p.name for p in CASES.iterdir() if (p / "truth.json").is_file())


def seed_of(case: Path) -> int:
    doc = yaml.safe_load((case / "scenario.yaml").read_text())
    return int(next(iter(doc.values()))["seed"])


@pytest.mark.parametrize("name", case_names())
def test_model_meets_the_targets_against_vllms_scheduler(name):
    """Same workload.json, setting and step-time constants (with the lab's jitter, its seed + 99) as the lab run:
    preemptions within 10 % or ±2, mean usage and hit rate within 0.02 of what vLLM's scheduler did."""
    case = CASES / name
    c = load_lab_case(str(case))
    t = c["truth"]
    seed = seed_of(case)
    cost = dataclasses.replace(c["step_cost"], jitter=t["step_cost_model"]["jitter"], seed=seed + 99)
    r = simulate(c["requests"], c["setting"], cost, duration_s=c["duration_s"], start_s=c["start_s"],
                 lab_ticks=lab_ticks(str(case), t, seed))
    lp = t["totals"]["preemptions"]
    assert abs(r.preemptions - lp) <= max(2, 0.1 * lp), (r.preemptions, lp)
    assert abs(r.kv_cache_usage_mean - t["block_usage"]["mean_time_weighted"]) <= 0.02
    assert abs(r.kv_cache_usage_peak - t["block_usage"]["peak"]) <= 0.02
    lh = t["totals"]["prefix_cache_hit_rate"]
    if lh is None:
        assert r.prefix_cache_hit_rate is None
    else:
        assert abs(r.prefix_cache_hit_rate - lh) <= 0.02
    # the replay is step for step: same number of engine steps within a few (arrivals are rounded to 1 ms)
    assert abs(r.engine_steps - t["totals"]["engine_steps"]) <= 3


@pytest.mark.parametrize("name", ["ramp_000", "evict_load_011", "closed_over_004", "look_bigblock_long_000",
                                  "waste_bigblock_011", "evict_growing_set_000_bs32"])
def test_fast_forward_changes_nothing(name):
    c = load_lab_case(str(CASES / name))
    kw = dict(duration_s=c["duration_s"], start_s=c["start_s"])
    fast = simulate(c["requests"], c["setting"], c["step_cost"], **kw).to_dict()
    slow = simulate(c["requests"], c["setting"], c["step_cost"], fast_forward=False, **kw).to_dict()
    assert fast == slow


def test_shared_prefix_hits_full_blocks_only_and_never_the_last_token():
    # prompt 64 tokens, all of them the shared prefix, block size 16: the second request can hit at most
    # (64 - 1) // 16 = 3 blocks = 48 tokens (vLLM recomputes the last token); queries count whole prompts
    reqs = [Request(0.0, 64, 4, prefix_id=7, prefix_tokens=64), Request(5.0, 64, 4, prefix_id=7, prefix_tokens=64)]
    r = simulate(reqs, Setting(num_gpu_blocks=100, block_size=16), COST)
    assert (r.prefix_cache_queries_tokens, r.prefix_cache_hits_tokens) == (128, 48)
    # a 70-token prefix: the block holding tokens 64-79 mixes prefix and own tokens: 4 blocks shared
    reqs = [Request(0.0, 90, 4, prefix_id=1, prefix_tokens=70), Request(5.0, 90, 4, prefix_id=1, prefix_tokens=70)]
    r = simulate(reqs, Setting(num_gpu_blocks=100, block_size=16), COST)
    assert r.prefix_cache_hits_tokens == 64
    off = simulate(reqs, Setting(num_gpu_blocks=100, block_size=16, enable_prefix_caching=False), COST)
    assert off.prefix_cache_hit_rate is None and off.prefix_cache_hits_tokens == 0


def test_lru_evicts_the_oldest_freed_prefix_first():
    # pool of 9 usable blocks of 16; prefixes A and B (4 blocks each) used once, then a 6-block request evicts
    # the oldest hashed free blocks: A's tail first (freed in reverse) ... then A again hits less than B does
    S = Setting(num_gpu_blocks=10, block_size=16)
    reqs = [Request(0.0, 64 + 8, 1, prefix_id=1, prefix_tokens=64), Request(1.0, 64 + 8, 1, prefix_id=2, prefix_tokens=64),
            Request(2.0, 16 * 4, 1), Request(3.0, 64 + 8, 1, prefix_id=2, prefix_tokens=64),
            Request(4.0, 64 + 8, 1, prefix_id=1, prefix_tokens=64)]
    r = simulate(reqs, S, COST)
    # request 3 (B) hits all 4 prefix blocks; request 4 (A) lost blocks to the 4-block request: fewer hits
    assert r.prefix_cache_blocks_evicted > 0
    b_only = simulate(reqs[:4], S, COST)
    assert b_only.prefix_cache_hits_tokens == 64  # B's 4 blocks survived (A's were older in the LRU)
    assert r.prefix_cache_hits_tokens - b_only.prefix_cache_hits_tokens < 64


def test_pool_too_small_preempts_the_last_running_request_and_more_blocks_do_not():
    # two requests of 16 + 40 tokens need 4 blocks each at the end; 4 usable blocks cannot hold both
    reqs = [Request(0.0, 16, 40), Request(0.01, 16, 40)]
    small = simulate(reqs, Setting(num_gpu_blocks=5, block_size=16), COST)
    big = simulate(reqs, Setting(num_gpu_blocks=9, block_size=16), COST)
    assert small.preemptions >= 1 and small.requests_finished == 2 and small.kv_cache_usage_peak == 1.0
    assert big.preemptions == 0 and big.requests_finished == 2
    # the one that was preempted is the later one: it waited again, so its queue time is the only positive one
    assert small.queue_time_max_s == pytest.approx(small.queue_time_p50_s) or small.num_requests_waiting_max >= 1


def test_max_num_seqs_caps_running_and_queues_the_rest():
    reqs = [Request(0.0, 100, 50) for _ in range(10)]
    r = simulate(reqs, Setting(num_gpu_blocks=1000, max_num_seqs=4), COST)
    assert r.num_requests_running_max == 4 and r.num_requests_waiting_max == 6 and r.requests_finished == 10


def test_a_request_that_can_never_fit_is_reported_not_looped_on():
    reqs = [Request(0.0, 16 * 20, 5)]
    r = simulate(reqs, Setting(num_gpu_blocks=10, block_size=16), COST)
    assert r.requests_never_fit == 1 and r.requests_finished == 0 and r.engine_steps < 5


# ------------------------------------------------------------------------------------------------- the CLI


def test_cli_json_follows_the_schema_and_recommends_a_setting_without_preemptions():
    res = run_kvdiag("simulate", "--lab-case", str(PRESSURE), "--max-num-seqs", "12,256", "--format", "json")
    assert res.code == 0, res.err
    doc = res.json()
    jsonschema.validate(doc, SCHEMA)
    rows = {r["setting"]["max_num_seqs"]: r for r in doc["settings"]}
    truth = json.loads((PRESSURE / "truth.json").read_text())
    assert rows[256]["baseline"] and abs(rows[256]["preemptions"] - truth["totals"]["preemptions"]) <= 2
    assert rows[12]["preemptions"] == 0
    # issue 25: 12 trades the preemptions for a longer p95 queue (73 s against 47 s as run), so the default objective
    # (no preemption and no worse queue or throughput) recommends neither, and says so; --objective preemptions does
    assert rows[12]["queue_time_p95_s"] > rows[256]["queue_time_p95_s"]
    assert doc["objective"] == "balanced" and doc["recommended"] is None and not any(r["recommended"] for r in rows.values())
    assert any("No setting meets --objective balanced" in n for n in doc["notes"])
    res = run_kvdiag("simulate", "--lab-case", str(PRESSURE), "--max-num-seqs", "12,256", "--format", "json",
                     "--objective", "preemptions")
    doc = res.json()
    jsonschema.validate(doc, SCHEMA)
    assert doc["recommended"]["max_num_seqs"] == 12 and doc["objective"] == "preemptions"
    res = run_kvdiag("simulate", "--lab-case", str(PRESSURE), "--max-num-seqs", "12,256", "--format", "json",
                     "--objective", "queue")
    assert res.json()["recommended"]["max_num_seqs"] == 256


def test_cli_text_and_markdown_tables():
    res = run_kvdiag("simulate", "--lab-case", str(PRESSURE), "--num-gpu-blocks", "3510,7020", "--objective",
                     "preemptions")
    assert res.code == 0, res.err
    assert "num_gpu_blocks=7020" in res.out and "simulated" in res.out and "* recommended (preemptions)" in res.out
    assert "tok/s" in res.out  # the table shows all three: preemptions, queue time, throughput
    assert "230 us x scheduled tokens" in res.out  # the step-time constants, not redacted
    md = run_kvdiag("simulate", "--lab-case", str(PRESSURE), "--block-size", "16,32", "--format", "markdown")
    # another block size at the same KV memory: (3510 - 1) x 16 / 32 + 1 blocks
    assert md.code == 0 and "| num_gpu_blocks=1755 block_size=32 |" in md.out


def test_cli_trace_csv_with_kv_cache_memory(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens,prefix_id,prefix_tokens\n"
                     + "".join(f"{i * 0.5},{600},{100},{i % 2},{512}\n" for i in range(40)))
    cfg = FIXTURES / "capacity" / "configs" / "qwen3-14b.json"
    res = run_kvdiag("simulate", "--trace", str(trace), "--kv-cache-memory", "0.5,2", "--model-config", str(cfg),
                     "--step-cost", "overhead_ms=4,weights_ms=45,compute_us_per_token=230,kv_read_ns_per_token=500",
                     "--format", "json")
    assert res.code == 0, res.err
    doc = res.json()
    jsonschema.validate(doc, SCHEMA)
    small, big = doc["settings"]
    assert big["setting"]["num_gpu_blocks"] > 3.9 * small["setting"]["num_gpu_blocks"]
    assert big["prefix_cache_hit_rate"] > 0.5 and big["requests_finished"] == 40 and doc["duration_s"] is None


# ------------------------------------------------------------------------------------------------- bad input

STEP = "overhead_ms=4,weights_ms=45,compute_us_per_token=230,kv_read_ns_per_token=500"


@pytest.mark.parametrize("body, expect", [
    ("arrival_s,prompt_tokens,output_tokens\n0,100,10\n1,-5,10\n", "t.csv:3: prompt_tokens is '-5'"),
    ("arrival_s,prompt_tokens,output_tokens\n0,100,10\n1,1e12,10\n", "t.csv:3: prompt_tokens is '1e12'"),
    ("arrival_s,prompt_tokens,output_tokens\n0,100,10\n1,100,nan\n", "t.csv:3: output_tokens is 'nan'"),
    ("arrival_s,prompt_tokens,output_tokens\n5,100,10\n1,100,10\n", "t.csv:3: arrival_s 1 is before"),
    ("arrival_s,prompt_tokens,output_tokens\n-1,100,10\n", "t.csv:2: arrival_s is '-1'"),
    ("arrival_s,prompt_tokens,output_tokens,prefix_id,prefix_tokens\n0,100,10,1,200\n", "prefix_tokens 200 is more"),
    ("when,prompt\n0,100\n", "t.csv:1: header"),
])
def test_bad_trace_rows_get_one_clear_line(tmp_path, body, expect):
    (tmp_path / "t.csv").write_text(body)
    res = run_kvdiag("simulate", "--trace", str(tmp_path / "t.csv"), "--num-gpu-blocks", "100", "--step-cost", STEP)
    assert res.code == 3 and expect in res.err, res.err
    assert len(res.err.strip().splitlines()) == 1 and "Traceback" not in res.err


def test_bad_jsonl_and_options(tmp_path):
    (tmp_path / "t.jsonl").write_text('{"arrival_s": 0, "prompt_tokens": 10, "output_tokens": 5}\n{"arrival_s": 1,\n')
    res = run_kvdiag("simulate", "--trace", str(tmp_path / "t.jsonl"), "--num-gpu-blocks", "100", "--step-cost", STEP)
    assert res.code == 3 and "t.jsonl:2: invalid JSON" in res.err
    (tmp_path / "ok.csv").write_text("arrival_s,prompt_tokens,output_tokens\n0,100,10\n")
    for args, expect in [(["--num-gpu-blocks", "100"], "missing overhead_ms"),
                         (["--num-gpu-blocks", "1", "--step-cost", STEP], "expected integers from 2"),
                         (["--num-gpu-blocks", "100", "--step-cost", STEP + ",jitter=5"], "jitter=5"),
                         (["--num-gpu-blocks", "100", "--step-cost", STEP, "--max-num-seqs", "1,2,3,4,5,6,7,8,9",
                           "--block-size", "16,32,64,128", "--max-num-batched-tokens", "512,2048"], "at most 64"),
                         (["--num-gpu-blocks", "100", "--step-cost", STEP, "--max-model-len", "50"], "not below max_model_len")]:
        res = run_kvdiag("simulate", "--trace", str(tmp_path / "ok.csv"), *args)
        assert res.code == 3 and expect in res.err, (args, res.err)
        assert len(res.err.strip().splitlines()) == 1


def test_ten_million_requests_are_refused_in_bounded_time(tmp_path):
    """10**7 rows: refused before reading (size) or at the cap, in a second, with one line."""
    big = tmp_path / "huge.csv"
    with open(big, "wb") as f:  # a sparse file of 10**7 x 20 bytes: no disk, no time
        f.write(b"arrival_s,prompt_tokens,output_tokens\n")
        f.truncate(10**7 * 16)  # '12345.678,1234,56' and a newline: 18 bytes a row
    t0 = time.monotonic()
    res = run_kvdiag("simulate", "--trace", str(big), "--num-gpu-blocks", "100", "--step-cost", STEP)
    assert res.code == 3 and "too large for 200,000 requests" in res.err and time.monotonic() - t0 < 30
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"arrival_s": i, "prompt_tokens": 10, "output_tokens": 2}) + "\n"
                            for i in range(1001)))
    res = run_kvdiag("simulate", "--trace", str(rows), "--num-gpu-blocks", "100", "--step-cost", STEP,
                     "--max-requests", "1000")
    assert res.code == 3 and "more than 1,000 requests" in res.err


def test_step_cap_bounds_a_run(tmp_path):
    (tmp_path / "t.csv").write_text("arrival_s,prompt_tokens,output_tokens\n0,100,100000\n")
    res = run_kvdiag("simulate", "--trace", str(tmp_path / "t.csv"), "--num-gpu-blocks", "10000",
                     "--step-cost", STEP, "--max-steps", "500", "--max-model-len", "200000")
    assert res.code == 3 and "more than 500 engine steps" in res.err and len(res.err.strip().splitlines()) == 1


def test_the_recommended_remedy_for_the_pressure_series_removes_the_preemptions_in_vllms_scheduler():
    """kvdiag simulate's recommended setting for the shared pressure series, run in the lab (fixtures/simulate/
    remedy/): vLLM's scheduler had 0 preemptions there (16 as the series ran), as simulated."""
    res = run_kvdiag("simulate", "--lab-case", str(PRESSURE), "--kv-cache-memory", "3,4.5,6", "--model-config",
                     str(CASES / "qwen2.5-7b-instruct.config.json"), "--max-num-seqs", "12,14,16,256", "--format", "json")
    assert res.code == 0, res.err
    doc = res.json()
    rec = doc["recommended"]
    labs = {}
    for d in (CASES / "remedy").iterdir():
        t = json.loads((d / "truth.json").read_text())
        labs[(t["num_gpu_blocks"], t["deployment"]["max_num_seqs"])] = t
    truth = labs[(rec["num_gpu_blocks"], rec["max_num_seqs"])]  # the recommended setting was run in the lab
    assert truth["totals"]["preemptions"] == 0
    assert json.loads((PRESSURE / "truth.json").read_text())["totals"]["preemptions"] > 0
    # and every lab-run setting of the table: simulated preemptions as vLLM's scheduler counted them
    for row in doc["settings"]:
        t = labs.get((row["setting"]["num_gpu_blocks"], row["setting"]["max_num_seqs"]))
        if t is not None:
            assert abs(row["preemptions"] - t["totals"]["preemptions"]) <= 2
            assert abs(row["kv_cache_usage_peak"] - t["block_usage"]["peak"]) <= 0.02


def test_analyze_remedies_cite_simulated_outcomes_with_a_trace():
    step = "overhead_ms=4,weights_ms=45,compute_us_per_token=230,kv_read_ns_per_token=500"
    res = run_kvdiag("analyze", "--metrics-file", str(PRESSURE / "metrics" / "0059.prom"), "--log",
                     str(PRESSURE / "vllm.log"), "--trace", str(PRESSURE / "workload.json"), "--step-cost", step,
                     "--format", "json")
    assert res.code == 2, res.err
    doc = res.json()
    cap = next(f for f in doc["findings"] if f["rule_id"] == "CAP001")
    sim = [r for r in cap["remedy"] if r.startswith("Simulated (")]
    assert len(sim) == 1 and "not measured" in sim[0] and "max_num_seqs 15:" in sim[0]
    assert "as run (3510 blocks x 16, max_num_seqs 256)" in sim[0]
    # the same numbers as 'kvdiag simulate' on that trace and setting
    direct = run_kvdiag("simulate", "--trace", str(PRESSURE / "workload.json"), "--num-gpu-blocks", "3510",
                        "--max-num-seqs", "15", "--step-cost", step, "--format", "json").json()["settings"][0]
    assert f"max_num_seqs 15: {direct['preemptions']} preemption" in sim[0]
    assert any("assumed" in n or "defaults the inputs did not give" in n for n in doc["notes"])
    bad = run_kvdiag("analyze", "--log", str(PRESSURE / "vllm.log"), "--trace", str(PRESSURE / "workload.json"))
    assert bad.code == 3 and "--trace and --step-cost go together" in bad.err


def test_from_metrics_synthesis_reproduces_the_series():
    """The workload synthesised from the pages alone (arrivals per scrape, length histograms, hit rate), with the
    series' step-time constants, gives the series' usage and hit rate (quiet) and its preemptions (pressure)."""
    quiet = FIXTURES / "series" / "vllm033_quiet"
    t = json.loads((quiet / "truth.json").read_text())
    res = run_kvdiag("simulate", "--from-metrics", str(quiet), "--step-cost",
                     "overhead_ms=3,weights_ms=10,compute_us_per_token=84,kv_read_ns_per_token=80", "--format", "json")
    assert res.code == 0, res.err
    doc = res.json()
    jsonschema.validate(doc, SCHEMA)
    row = doc["settings"][0]
    assert row["setting"]["num_gpu_blocks"] == t["num_gpu_blocks"] and row["preemptions"] == 0
    assert abs(row["kv_cache_usage_mean"] - t["block_usage"]["mean_time_weighted"]) <= 0.02
    assert abs(row["prefix_cache_hit_rate"] - t["totals"]["prefix_cache_hit_rate"]) <= 0.02
    assert abs(doc["workload"]["requests"] - t["totals"]["requests_arrived"]) <= 0.05 * t["totals"]["requests_arrived"]
    tp = json.loads((PRESSURE / "truth.json").read_text())
    res = run_kvdiag("simulate", "--from-metrics", str(PRESSURE), "--step-cost", STEP, "--format", "json")
    row = res.json()["settings"][0]
    assert abs(row["preemptions"] - tp["totals"]["preemptions"]) <= 0.3 * tp["totals"]["preemptions"]
    assert abs(row["kv_cache_usage_mean"] - tp["block_usage"]["mean_time_weighted"]) <= 0.03


def test_from_metrics_bad_folder(tmp_path):
    res = run_kvdiag("simulate", "--from-metrics", str(tmp_path), "--step-cost", STEP)
    assert res.code == 3 and "expected saved /metrics pages" in res.err and len(res.err.strip().splitlines()) == 1


def test_from_metrics_fits_the_step_time_when_none_is_given():
    tp = json.loads((PRESSURE / "truth.json").read_text())
    res = run_kvdiag("simulate", "--from-metrics", str(PRESSURE))
    assert res.code == 0, res.err
    assert "step time fitted on" in res.out and "synthesised from 60 pages" in res.out
    doc = run_kvdiag("simulate", "--from-metrics", str(PRESSURE), "--format", "json").json()
    jsonschema.validate(doc, SCHEMA)
    c = doc["step_cost"]  # the lab ran 4 ms + max(45 ms, 230 us x tokens) + 500 ns x context
    assert 40 <= c["overhead_ms"] + c["weights_ms"] <= 60 and 100 <= c["compute_us_per_token"] <= 300
    assert 300 <= c["kv_read_ns_per_token"] <= 700
    row = doc["settings"][0]
    assert abs(row["preemptions"] - tp["totals"]["preemptions"]) <= 0.3 * tp["totals"]["preemptions"]


from hypothesis import example, given, settings, strategies as st  # noqa: E402


@st.composite
def workloads(draw):
    n = draw(st.integers(1, 40))
    t = 0.0
    reqs = []
    for i in range(n):
        t += draw(st.floats(0, 3))
        prompt = draw(st.integers(1, 600))
        pid = draw(st.sampled_from([None, 0, 1]))
        plen = draw(st.integers(0, prompt)) if pid is not None else 0
        reqs.append(Request(t, prompt, draw(st.integers(1, 120)), prefix_id=pid, prefix_tokens=plen, id=i))
    s = Setting(num_gpu_blocks=draw(st.integers(2, 120)), block_size=draw(st.sampled_from([1, 16, 32, 256])),
                max_num_seqs=draw(st.integers(1, 12)), max_num_batched_tokens=draw(st.integers(8, 1024)),
                enable_prefix_caching=draw(st.booleans()), max_model_len=draw(st.integers(700, 2000)))
    return reqs, s, draw(st.sampled_from([None, 30.0]))


@settings(max_examples=150, deadline=None, derandomize=True)
@given(workloads())
# found by a random run: a prompt of one token admitted to a pool too small for its whole sequence (never fits)
@example(([Request(0.0, 1, 2, id=0)], Setting(num_gpu_blocks=2, block_size=1, max_num_seqs=1, max_num_batched_tokens=8,
                                              enable_prefix_caching=False, max_model_len=700), None))
def test_fast_forward_is_the_step_by_step_run_and_outcomes_are_sane(w):
    reqs, s, dur = w
    fast = simulate(reqs, s, COST, duration_s=dur)
    slow = simulate(reqs, s, COST, duration_s=dur, fast_forward=False)
    assert fast.to_dict() == slow.to_dict()
    # (the mean is read after each schedule, the peak after each step's frees, as the lab's truth reads them: a
    # request finishing in the step that allocated can put the mean above the peak)
    assert 0.0 <= fast.kv_cache_usage_mean <= 1.0 and 0.0 <= fast.kv_cache_usage_peak <= 1.0
    assert fast.requests_finished + fast.requests_unfinished == fast.requests_submitted <= len(reqs)
    if dur is None:  # drained: everything that can fit finishes
        assert fast.requests_unfinished == fast.requests_never_fit or fast.requests_never_fit > 0
    if not s.enable_prefix_caching:
        assert fast.prefix_cache_hit_rate is None
