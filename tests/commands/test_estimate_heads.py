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
