"""``kvdiag estimate --tensor-parallel-size N`` where N does not divide the attention heads
(kvdiag.commands.estimate): vLLM refuses to start (``ModelConfig.verify_with_parallel_config``: "Total number of
attention heads (32) must be divisible by tensor parallel size (3)."), so estimate exits 2 with that reason and the
next size that divides and fits (breaker pass, session 7: TP 3 on Llama-3.1-8B printed an estimate and exit 0)."""

from __future__ import annotations

import json

from conftest import FIXTURES, run_kvdiag

LLAMA = FIXTURES / "models" / "llama-3.1-8b-instruct.json"


def test_heads_not_divisible_by_tp_is_a_refusal():
    res = run_kvdiag("estimate", "--model-config", str(LLAMA), "--kv-cache-memory", "10",
                     "--tensor-parallel-size", "3", "--format", "json")
    assert res.code == 2, (res.code, res.err[-300:])
    doc = json.loads(res.out)
    assert not doc["starts"] and "must be divisible by tensor parallel size (3)" in doc["refusal"]
    assert doc["smallest_that_starts"] == {"tensor_parallel_size": 4}


def test_a_dividing_tp_still_starts():
    res = run_kvdiag("estimate", "--model-config", str(LLAMA), "--kv-cache-memory", "10",
                     "--tensor-parallel-size", "2", "--format", "json")
    assert res.code == 0, (res.code, res.err[-300:])
    assert json.loads(res.out)["starts"]


def test_rules_export_with_tests_says_what_it_left_out_in_one_line(tmp_path):
    """``rules export --tests`` (kvdiag.commands.rules): the cases left out of the promtool tests are one line on
    stderr with a count per reason, not one line per case (new-user pass, session 6: 22 lines on a success)."""
    res = run_kvdiag("rules", "export", "--out", str(tmp_path / "r.yml"), "--tests", str(tmp_path / "t.yml"))
    assert res.code == 0, res.err
    lines = res.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kvdiag: ") and "left out of the promtool tests" in lines[0], lines
    assert "needs facts or log events ×" in lines[0]
