"""Tests of the ``estimate`` click command, invoked directly through CliRunner."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from kvdiag.errors import InputError
from kvdiag.commands.estimate import estimate

CONFIGS = Path(__file__).resolve().parent.parent / "fixtures" / "capacity" / "configs"
KEYS = {
    "kv_bytes_per_token", "block_size", "block_bytes", "num_gpu_blocks", "kv_capacity_tokens",
    "max_concurrency", "weights_bytes", "groups", "notes", "starts",
}


def run(*args: str):
    return CliRunner().invoke(estimate, list(args))


def run_json(*args: str) -> dict:
    result = run(*args, "--format", "json")
    assert result.exit_code == 0, (result.output, result.exception)
    return json.loads(result.output)


def test_is_a_click_command_named_estimate():
    assert isinstance(estimate, click.Command) and estimate.name == "estimate"


def test_json_keys_and_r04_numbers():
    # pairs.csv R04: Qwen3-14B, 6.51 GiB, "GPU KV cache size: 42,656 tokens", 1.30x at 32,768
    out = run_json("--model-config", str(CONFIGS / "qwen3-14b.json"), "--kv-cache-memory", "6.51",
                   "--max-model-len", "32768", "--vllm-version", "0.10.2")
    assert set(out) == KEYS
    assert out["kv_bytes_per_token"] == 2 * 40 * 8 * 128 * 2  # 163,840
    assert out["block_size"] == 16
    assert out["block_bytes"] == 163_840 * 16
    # 6.51 GiB = 6,990,013,071 B // 2,621,440 = 2,666 blocks -> 42,656 tokens
    assert out["num_gpu_blocks"] == 2_666
    assert out["kv_capacity_tokens"] == 42_656
    assert out["max_concurrency"] == pytest.approx(1.30, abs=0.005)
    assert out["groups"] == [{"kind": "full_attention", "layers": 40, "bytes_per_token": 163_840}]
    assert isinstance(out["notes"], list)
    assert isinstance(out["weights_bytes"], int)


def test_tp_and_pp_options_mla_r23():
    # pairs.csv R23: DeepSeek-V2-Lite TP2 x PP2, 12.13 GiB on stage 0 -> 807,792 tokens
    out = run_json("--model-config", str(CONFIGS / "deepseek-v2-lite.json"), "--kv-cache-memory", "12.13",
                   "--tensor-parallel-size", "2", "--pipeline-parallel-size", "2", "--max-model-len", "1024",
                   "--vllm-version", "0.9.2")
    assert out["kv_bytes_per_token"] == 14 * 576 * 2  # stage 0 holds 14 layers
    assert abs(out["kv_capacity_tokens"] - 807_792) / 807_792 < 0.005


def test_fp8_and_block_size_options():
    base = ["--model-config", str(CONFIGS / "llama-3.1-8b-instruct.json"), "--kv-cache-memory", "4",
            "--max-model-len", "8192"]
    bf16 = run_json(*base)
    fp8 = run_json(*base, "--kv-cache-dtype", "fp8")
    assert fp8["kv_bytes_per_token"] * 2 == bf16["kv_bytes_per_token"]
    assert fp8["num_gpu_blocks"] == 2 * bf16["num_gpu_blocks"]  # 4 GiB / 1 MiB vs / 2 MiB
    big = run_json(*base, "--block-size", "32")
    assert big["block_size"] == 32 and big["block_bytes"] == 2 * bf16["block_bytes"]


def test_hybrid_model_groups_and_forced_block():
    # pairs.csv R26: Gemma-3-27B, 0.11: 7 groups, 205,696 tokens, 50.05x
    out = run_json("--model-config", str(CONFIGS / "gemma-3-27b-it.json"), "--kv-cache-memory", "109.86",
                   "--max-model-len", "4096", "--max-num-batched-tokens", "8192", "--vllm-version", "0.11.0")
    assert len(out["groups"]) == 7
    assert sorted(g["layers"] for g in out["groups"]) == [2, 10, 10, 10, 10, 10, 10]
    assert out["kv_capacity_tokens"] == 205_696
    assert out["max_concurrency"] == pytest.approx(50.05, abs=0.01)
    assert any("not the physical pool" in n for n in out["notes"])


def test_gpu_memory_path_estimates():
    out = run_json("--model-config", str(CONFIGS / "llama-3.1-8b-instruct.json"), "--gpu-memory", "80",
                   "--gpu-memory-utilization", "0.9", "--max-model-len", "8192")
    # 72 GiB budget minus ~15 GiB weights and some GiB of overhead: between 50 and 57 GiB of KV
    kv_gib = out["num_gpu_blocks"] * out["block_bytes"] / 1024**3
    assert 50 < kv_gib < 57
    assert any("estimated" in n for n in out["notes"])


def test_text_format():
    result = run("--model-config", str(CONFIGS / "qwen3-8b.json"), "--kv-cache-memory", "10",
                 "--max-model-len", "4096")
    assert result.exit_code == 0
    assert "GPU KV cache size:" in result.output and "Maximum concurrency for 4,096" in result.output


@pytest.mark.parametrize(
    "args",
    [
        [],  # neither memory option
        ["--kv-cache-memory", "4", "--gpu-memory", "80"],  # both
        ["--kv-cache-memory", "4", "--gpu-memory-utilization", "0.9"],  # util without --gpu-memory
        ["--gpu-memory", "80", "--gpu-memory-utilization", "1.5"],
        ["--kv-cache-memory", "4", "--vllm-version", "latest"],
        ["--kv-cache-memory", "4", "--kv-cache-dtype", "int3"],
        ["--kv-cache-memory", "4", "--pipeline-parallel-size", "99"],
    ],
)
def test_bad_option_combinations_are_usage_errors(args):
    result = run("--model-config", str(CONFIGS / "qwen3-8b.json"), *args)
    assert result.exit_code == 2, result.output  # click usage error
    assert "Usage" in result.output or "Error" in result.output


def test_missing_model_config_option():
    assert run("--kv-cache-memory", "4").exit_code == 2


def test_unreadable_config_is_input_error(tmp_path):
    result = run("--model-config", str(tmp_path / "nope.json"), "--kv-cache-memory", "4")
    assert isinstance(result.exception, InputError)
    assert str(tmp_path / "nope.json") in str(result.exception)


def test_invalid_json_is_input_error_with_line(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text('{\n  "num_hidden_layers": 32,\n  oops\n}')
    result = run("--model-config", str(bad), "--kv-cache-memory", "4")
    assert isinstance(result.exception, InputError)
    assert str(result.exception).startswith(f"{bad}:3:")
    assert "\n" not in str(result.exception)


def test_config_missing_field_is_input_error(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"num_key_value_heads": 8, "head_dim": 128}))
    result = run("--model-config", str(cfg), "--kv-cache-memory", "4")
    assert isinstance(result.exception, InputError)
    assert str(result.exception).startswith(f"{cfg}: ") and "num_hidden_layers" in str(result.exception)


def test_json_array_config_is_input_error(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text("[1, 2]")
    result = run("--model-config", str(cfg), "--kv-cache-memory", "4")
    assert isinstance(result.exception, InputError)


# --- issue 16 options (numbers hand-computed in tests/test_capacity_kinds.py) --------------------------------------

def test_speculative_mtp_on_qwen3_next():
    out = run_json("--model-config", str(CONFIGS / "qwen3-next-80b-a3b.json"), "--tensor-parallel-size", "4",
                   "--kv-cache-memory", "20", "--max-model-len", "32768", "--vllm-version", "0.11.0",
                   "--speculative-method", "mtp", "--num-speculative-tokens", "2")
    assert (out["block_size"], out["num_gpu_blocks"], out["kv_capacity_tokens"]) == (288, 5_601, 403_200)
    assert [g["layers"] for g in out["groups"]] == [13, 13, 13, 10]


def test_eagle_and_dcp_options():
    out = run_json("--model-config", str(CONFIGS / "deepseek-v2-lite.json"), "--tensor-parallel-size", "4",
                   "--decode-context-parallel-size", "4", "--kv-cache-memory", "10", "--max-model-len", "32768",
                   "--vllm-version", "0.11.0")
    assert out["kv_capacity_tokens"] == 1_380_800 and out["max_concurrency"] == 42.14
    bad = run("--model-config", str(CONFIGS / "deepseek-v2-lite.json"), "--tensor-parallel-size", "2",
              "--decode-context-parallel-size", "4", "--kv-cache-memory", "10")
    assert bad.exit_code == 2 and "must divide" in bad.output


def test_speculative_method_needs_tokens_and_mtp_needs_layers():
    r = run("--model-config", str(CONFIGS / "llama-3.1-8b-instruct.json"), "--kv-cache-memory", "10",
            "--speculative-method", "eagle")
    assert r.exit_code == 2 and "--num-speculative-tokens" in r.output
    r = run("--model-config", str(CONFIGS / "llama-3.1-8b-instruct.json"), "--kv-cache-memory", "10",
            "--speculative-method", "mtp", "--num-speculative-tokens", "1")
    assert r.exit_code != 0 and "num_nextn_predict_layers" in str(r.exception or r.output)


def test_mamba_ssm_dtype_and_prefix_caching_options():
    base = ["--model-config", str(CONFIGS / "qwen3.6-35b-a3b.json"), "--kv-cache-memory", "2.95",
            "--kv-cache-dtype", "fp8_e4m3", "--max-model-len", "65536", "--vllm-version", "0.20.0",
            "--mamba-ssm-cache-dtype", "float32"]
    on, off = run_json(*base), run_json(*base, "--no-prefix-caching")
    # U01 (hand-computed in test_capacity_kinds): 147 blocks of 2,096; 3.87x with prefix caching, 4.20x without
    assert (on["block_size"], on["num_gpu_blocks"], on["max_concurrency"]) == (2096, 147, 3.87)
    assert off["max_concurrency"] == 4.20
