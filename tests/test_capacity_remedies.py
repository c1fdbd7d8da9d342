"""Remedies quote numbers from the capacity model when a model config is given (issue 5)."""

from __future__ import annotations

import pytest

from conftest import FIXTURES

GIB = 2**30


def test_startup_remedies_for_001_with_config(kvdiag):
    """001: Llama-3.1-8B, 23.58 GiB GPU at 0.90, 2.89 GiB of KV for 23,648 tokens, max_model_len 29,000.

    Hand check: 29,000 tokens × 131,072 B = 3.54 GiB of KV needed; non-KV = 23.58 × 0.90 − 2.89 = 18.33 GiB;
    (18.33 + 3.54) / 23.58 = 0.93. fp8 halves the bytes per token: 23,648 × 2 = 47,296 tokens.
    """
    log = next((FIXTURES / "incidents").glob("001-*")) / "vllm.log"
    res = kvdiag("analyze", "--log", str(log), "--model-config", str(FIXTURES / "models" / "llama-3.1-8b-instruct.json"),
                 "--format", "json")
    f = next(f for f in res.json()["findings"] if f["class"] == "startup_kv_capacity")
    assert f["status"] == "fires"
    remedies = " | ".join(f["remedy"])
    assert "from 0.90 to 0.93" in remedies
    assert "47,296 tokens" in remedies
    assert "at most 23,648 tokens" in remedies
    ev = {e["signal"]: e["value"] for e in f["evidence"]}
    # the config's arithmetic agrees with the server's own pool to within the GiB rounding of the log line
    assert ev["kv_capacity_tokens_from_config"] == pytest.approx(23648, rel=0.005)
