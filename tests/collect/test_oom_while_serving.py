"""A CUDA OOM without traceback frames after the run's own stats lines (kvdiag.collect.logs._phase_for) happened
while serving: phase ``runtime``, judged by SAMPLER002 — never "Ruled out: No OOM while serving requests" beside it
(breaker pass, session 7: the OOM was phase "unknown" and the report said no OOM had happened while serving)."""

from __future__ import annotations

import json

from conftest import FIXTURES, run_kvdiag

LOG = FIXTURES / "incidents" / "029-mtp-benchmark-queueing-kv-95pct-ttft-214s" / "vllm.log"
OOM = ("(EngineCore_DP0 pid=5100) ERROR 05-19 10:27:25 [core.py:710] torch.OutOfMemoryError: CUDA out of memory. "
       "Tried to allocate 1.95 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.02 GiB is free. Process 5100 "
       "has 78.16 GiB memory in use.\n")


def test_a_frameless_oom_after_stats_lines_is_an_oom_while_serving(tmp_path):
    head = "".join(LOG.read_text().splitlines(keepends=True)[:13])
    log = tmp_path / "oom.log"
    log.write_text(head + OOM)
    res = run_kvdiag("analyze", "--log", str(log), "--format", "json")
    doc = json.loads(res.out)
    classes = [doc["verdict"]["primary"]] + list(doc["verdict"].get("secondary", []))
    assert "sampler_oom" in json.dumps(classes), doc["verdict"]
    quiet = [r["message"] for r in doc["verdict"].get("ruled_out", []) if r["rule_id"] == "SAMPLER002"]
    assert not quiet, quiet


def test_the_same_oom_before_any_stats_line_is_not_called_runtime(tmp_path):
    log = tmp_path / "oom.log"
    log.write_text(OOM)
    doc = json.loads(run_kvdiag("analyze", "--log", str(log), "--format", "json").out)
    assert doc["verdict"]["primary"] != "sampler_oom", doc["verdict"]
