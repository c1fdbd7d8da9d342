"""weights_dont_fit from the capacity model: the model config and the GPU size alone (issue 5, cases 019 and 021)."""

from __future__ import annotations

import pytest

from conftest import FIXTURES

MODELS = FIXTURES / "models"
GIB = 2**30


@pytest.mark.parametrize("config, gpu_gib, case", [
    ("qwen1.5-72b-chat.json", 79.33, "019"),         # 8x A800 node, no --tensor-parallel-size: GPU 0 gets all
    ("llama-3.1-8b-instruct.json", 15.59, "021"),    # bf16 8B on a "16 GB" card
])
def test_weights_dont_fit_from_config_and_gpu_size_alone(kvdiag, config, gpu_gib, case):
    res = kvdiag("analyze", "--model-config", str(MODELS / config), "--gpu-memory", str(gpu_gib), "--format", "json")
    report = res.json()
    assert report["verdict"]["primary"] == "weights_dont_fit", report["verdict"]
    assert res.code == 2
    f = next(f for f in report["findings"] if f["class"] == "weights_dont_fit")
    ev = {e["signal"]: e for e in f["evidence"]}
    assert ev["weights_budget_ratio"]["value"] > 1.0
    assert "gpu_memory_utilization 0.9 (vLLM default)" in ev["weights_budget_ratio"]["source"]
    assert "option --gpu-memory" in ev["gpu_total_bytes"]["source"]


def test_019_numbers_and_tp_remedy(kvdiag):
    res = kvdiag("analyze", "--model-config", str(MODELS / "qwen1.5-72b-chat.json"), "--gpu-memory", "79.33",
                 "--format", "json")
    f = next(f for f in res.json()["findings"] if f["class"] == "weights_dont_fit")
    ev = {e["signal"]: e["value"] for e in f["evidence"]}
    # ~145 GB = ~135 GiB of bf16 weights (the maintainers' figure), vs 79.33 GiB x 0.9
    assert 130 * GIB < ev["weights_estimate_bytes"] < 140 * GIB
    assert ev["weights_budget_ratio"] == pytest.approx(ev["weights_estimate_bytes"] / (79.33 * GIB * 0.9))
    assert any("--tensor-parallel-size 4" in r for r in f["remedy"])
    assert not any("max_model_len" in r or "block" in r for r in f["remedy"])  # never a paging remedy


def test_weights_fit_on_a_big_gpu_is_counter_evidence(kvdiag):
    res = kvdiag("analyze", "--model-config", str(MODELS / "llama-3.1-8b-instruct.json"), "--gpu-memory", "79.2",
                 "--format", "json")
    f = next(f for f in res.json()["findings"] if f["class"] == "weights_dont_fit")
    assert f["status"] == "quiet"
    assert "they fit" in f["message"] and "79.20 GiB" in f["message"]


def test_tensor_parallel_option_splits_the_weights(kvdiag):
    res = kvdiag("analyze", "--model-config", str(MODELS / "qwen1.5-72b-chat.json"), "--gpu-memory", "79.33",
                 "--tensor-parallel-size", "4", "--format", "json")
    f = next(f for f in res.json()["findings"] if f["class"] == "weights_dont_fit")
    assert f["status"] == "quiet"


@pytest.mark.parametrize("config, case", [("qwen1.5-72b-chat.json", "019"), ("llama-3.1-8b-instruct.json", "021")])
def test_real_oom_log_with_config(kvdiag, config, case):
    """With the log too, the config's estimate and the OOM's GPU size (79.33 / 15.59 GiB from the OOM text) agree."""
    log = next((FIXTURES / "incidents").glob(f"{case}-*")) / "vllm.log"
    res = kvdiag("analyze", "--log", str(log), "--model-config", str(MODELS / config), "--format", "json")
    report = res.json()
    assert report["verdict"]["primary"] == "weights_dont_fit"
    f = next(f for f in report["findings"] if f["class"] == "weights_dont_fit")
    ev = {e["signal"]: e for e in f["evidence"]}
    assert ev["weights_budget_ratio"]["value"] > 1.0
    assert "log:vllm.log:" in ev["weights_budget_ratio"]["source"]
