"""Issue 24: one verdict per server run. A log is cut into runs (banners, a new API-server pid, start-up after
serving); the report judges the last run by default, ``--run N`` or ``--run all``, and no number mixes two runs."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from kvdiag.analyze import analyze
from kvdiag.bundle import Bundle
from kvdiag.collect.logs import read_logs

ROOT = Path(__file__).resolve().parent.parent
TWO_RUNS = next((ROOT / "fixtures" / "incidents").glob("029-*")) / "vllm.log"   # a real log of two runs
INTERLEAVED = next((ROOT / "fixtures" / "incidents").glob("024-*")) / "vllm.log"  # one server, two API pids


def _lines(report) -> set[int]:
    out = set()
    for f in report.findings:
        for ev in f.to_dict().get("evidence", []):
            out |= {int(n) for n in re.findall(r"log:vllm\.log:(\d+)", json.dumps(ev))}
    return out


def test_real_two_run_log_is_cut_at_the_new_pid():
    b = Bundle()
    read_logs(b, [str(TWO_RUNS)], progress=False)
    runs = b.log_runs
    assert [r["line"] for r in runs] == [1, 10]
    assert runs[1]["why"] == "a new API-server process id"


def test_each_run_judged_on_its_own_numbers():
    last = analyze(logs=[str(TWO_RUNS)])
    first = analyze(logs=[str(TWO_RUNS)], run="1")
    assert last.verdict.primary == first.verdict.primary == "capacity_pressure"
    assert _lines(last) and min(_lines(last)) >= 10, _lines(last)
    assert _lines(first) and max(_lines(first)) < 10, _lines(first)
    # the whole log read as one window said "98.4% with up to 56 waiting": run 1's peak usage with run 2's queue
    assert "98.4%" in first.verdict.summary and "43 request" in first.verdict.summary
    assert "96.5%" in last.verdict.summary and "56 request" in last.verdict.summary
    assert any("judged run 2 of 2" in n for n in last.notes)
    assert any("judged run 1 of 2" in n for n in first.notes)


def test_run_all_and_bad_run():
    rep = analyze(logs=[str(TWO_RUNS)], run="all")
    assert len(rep.instances) == 2
    assert {i.instance.split(" (")[0] for i in rep.instances} == {"run 1 of 2", "run 2 of 2"}
    r = subprocess.run([sys.executable, "-m", "kvdiag", "analyze", "--log", str(TWO_RUNS), "--run", "3"],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode != 0 and "holds 2 server run(s)" in r.stderr and "Traceback" not in r.stderr


def test_interleaved_api_pids_are_one_run():
    b = Bundle()
    read_logs(b, [str(INTERLEAVED)], progress=False)
    assert len(getattr(b, "log_runs", [])) <= 1


def test_banner_after_serving_starts_a_run(tmp_path):
    stats = ("INFO 05-06 12:00:{s:02d} [loggers.py:1] Engine 000: Avg prompt throughput: 1.0 tokens/s, Avg generation "
             "throughput: 1.0 tokens/s, Running: {r} reqs, Waiting: 0 reqs, GPU KV cache usage: {u}%, Prefix cache "
             "hit rate: 0.0%")
    lines = ["INFO 05-06 11:59:00 [api_server.py:1] vLLM API server version 0.10.2",
             stats.format(s=1, r=30, u=99.0), stats.format(s=2, r=30, u=99.5),
             "INFO 05-06 12:10:00 [api_server.py:1] vLLM API server version 0.10.2",
             stats.format(s=3, r=1, u=2.0)]
    p = tmp_path / "vllm.log"
    p.write_text("\n".join(lines) + "\n")
    b = Bundle()
    read_logs(b, [str(p)], progress=False)
    assert [r["line"] for r in b.log_runs] == [1, 4]
    rep = analyze(logs=[str(p)])
    ev = [e for f in rep.findings for e in f.to_dict().get("evidence", []) if e.get("signal") == "kv_cache_usage"]
    assert all(e["value"] < 0.5 for e in ev), ev  # the first run's 99 % never reaches the second run's judgement
