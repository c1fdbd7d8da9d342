"""analyze --model-config takes the capacity facts from a log's 'non-default args' line (issue 16)."""

from __future__ import annotations

from conftest import FIXTURES

from kvdiag.analyze import analyze

LOGS = FIXTURES / "capacity" / "logs"
CONFIGS = FIXTURES / "capacity" / "configs"


def _bundle(log: str, config: str):
    kept = []
    analyze(logs=[str(LOGS / log)], model_config=str(CONFIGS / config), keep=kept)
    return kept[0]


def _last(bundle, name):
    rows = bundle.signal(name)
    return rows.iloc[-1]


def test_speculative_config_of_non_default_args_reaches_the_model():
    b = _bundle("mtp-qwen3-next-constructed.log", "qwen3-next-80b-a3b.json")
    assert _last(b, "speculative_method")["text"] == "mtp"
    assert _last(b, "num_speculative_tokens")["value"] == 2
    row = _last(b, "kv_capacity_tokens_modelled")
    # hand-computed in test_capacity_kinds.test_mtp_on_gdn_hybrid_grows_the_conv_state_and_the_block
    assert row["value"] == 403_200
    assert "speculative_method mtp" in row["source"] and "num_speculative_tokens 2" in row["source"]


def test_r33_log_line_reproduced_from_the_log_facts():
    # R33: fp8 KV 2 x 48 x 8 x 128 x 1 B = 98,304 B/token, block 1,572,864 B. vLLM printed 332,672 tokens
    # (20,792 blocks); the log's "30.46 GiB" is rounded to 0.01 GiB: 30.46 x 2**30 // 1,572,864 = 20,794 blocks
    # = 332,704 tokens, 2 blocks (0.01 %) over, inside the +-0.005 GiB the printed figure leaves open.
    b = _bundle("r33-non-default-args.log", "qwen2.5-14b-instruct.json")
    got = _last(b, "kv_capacity_tokens_modelled")["value"]
    assert got == 332_704
    assert abs(got - 332_672) <= 0.005 * 2**30 // 1_572_864 * 16


def test_pre_mla_deepseek_log_uses_per_head_kv():
    # vLLM 0.6.4 (no MLA): 442,368 B/token, 3,034 blocks of 16 -> 48,544 tokens (test_capacity_kinds); the
    # fixture config lacks qk_nope_head_dim, so it is given here as the config's _source states (qk_head_dim 128)
    import json
    import tempfile
    cfg = {**json.loads((CONFIGS / "deepseek-v2-lite.json").read_text()), "qk_nope_head_dim": 128}
    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/config.json"
        with open(path, "w") as fh:
            json.dump(cfg, fh)
        kept = []
        analyze(logs=[str(LOGS / "deepseek-v2-lite-v064-constructed.log")], model_config=path, keep=kept)
    b = kept[0]
    assert _last(b, "kv_bytes_per_token")["value"] == 442_368
    assert _last(b, "kv_capacity_tokens_modelled")["value"] == 48_544


def test_logged_quantization_reaches_the_weights_estimate():
    # R15: engine config 'quantization=fp8' on a bf16 checkpoint config: 3.41 GiB (logged 3.4244, -0.5 %;
    # tests/test_weights_loading.py) instead of the 6.3 GiB of bf16
    kept = []
    analyze(logs=[str(LOGS / "r15-engine-config.log")],
            model_config=str(FIXTURES / "capacity" / "weights" / "granite-4.0-micro.json"), keep=kept)
    got = _last(kept[0], "weights_estimate_bytes")["value"] / 2**30
    assert abs(got - 3.4244) / 3.4244 < 0.02
