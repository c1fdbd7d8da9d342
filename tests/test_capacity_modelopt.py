"""ModelOpt checkpoints as vLLM 0.33.0 holds them (issue 43, must-show 2): every ``quant_algo`` of ``modelopt.py``
(``LINEAR_ALGOS`` + ``MIXED_PRECISION``), hand-computed on the tiny Llama-shaped model of
tests/test_capacity_weights_modules.py (h 64, 1 layer, q 64x64, k/v 32x64, o 64x64, gate/up 128x64, down 64x128,
vocab 256 untied: embed and head 16,384 each, norms 192; bf16).

The NVFP4 checkpoints of NVIDIA's Qwen3.6 releases are MIXED_PRECISION (nvidia/Qwen3.6-27B-NVFP4: the MLP weight-only
NVFP4, attention and the Gated-DeltaNet in_proj FP8, the rest bf16 — as the code index's vLLM-fork test describes
it, file id 63479655252); pricing every layer NVFP4 was the 12.5 % / 19.5 % low of issue 43.
"""

from __future__ import annotations

import pytest

from kvdiag.capacity.quantization import scheme_of
from kvdiag.capacity.weights import weights_breakdown
from kvdiag.errors import InputError

TINY = {"model_type": "llama", "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
        "head_dim": 32, "hidden_size": 64, "intermediate_size": 128, "vocab_size": 256, "torch_dtype": "bfloat16",
        "tie_word_embeddings": False}
KEPT = 65_920  # embed + head + norms in bf16: (2 x 16,384 + 192) x 2 B


def _q(qc, cfg=TINY):
    return weights_breakdown({**cfg, "quantization_config": qc})["total"]


def _layer(rest: str, algo: str, **kw) -> dict:
    return {f"model.layers.0.{rest}": {"quant_algo": algo, **kw}}


MIXED = {"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION", "kv_cache_quant_algo": "FP8",
         "quantized_layers": {**_layer("self_attn.q_proj", "FP8"), **_layer("self_attn.k_proj", "FP8"),
                              **_layer("self_attn.v_proj", "FP8"), **_layer("self_attn.o_proj", "FP8"),
                              **_layer("mlp.gate_proj", "W4A16_NVFP4", group_size=16),
                              **_layer("mlp.up_proj", "W4A16_NVFP4", group_size=16),
                              **_layer("mlp.down_proj", "W4A16_NVFP4", group_size=16)}}


def test_mixed_precision_prices_each_layer_by_its_algo_and_leaves_the_rest_16_bit():
    # FP8 per tensor: q 4,096 + 8 (fp32 weight_scale + input_scale) = 4,104; k, v 2,056; o 4,104 -> 12,320.
    # W4A16_NVFP4: 8,192 weights x 0.5 B = 4,096 + fp8 scale per 16 = 512 + fp32 weight_scale_2 4 = 4,612 x 3 = 13,836.
    # lm_head is not listed: bf16 (in KEPT).
    assert _q(MIXED) == 12_320 + 13_836 + KEPT == 92_076
    # a layer the table leaves out stays bf16 (o_proj 8,192 B instead of 4,104)
    less = {**MIXED, "quantized_layers": {k: v for k, v in MIXED["quantized_layers"].items() if "o_proj" not in k}}
    assert _q(less) == 92_076 - 4_104 + 8_192


def test_mixed_precision_reads_vllm_packed_names_and_the_legacy_file_shape():
    # qkv_proj / gate_up_proj keys (vLLM's packed modules) price the q/k/v and gate/up shards the same
    fused = {**_layer("self_attn.qkv_proj", "FP8"), **_layer("self_attn.o_proj", "FP8"),
             **_layer("mlp.gate_up_proj", "W4A16_NVFP4"), **_layer("mlp.down_proj", "W4A16_NVFP4")}
    assert _q({**MIXED, "quantized_layers": fused}) == 92_076
    # hf_quant_config.json shape: {"quantization": {...}} with exclude_modules
    legacy = {"quant_method": "modelopt", "quantization": {"quant_algo": "MIXED_PRECISION",
                                                           "quantized_layers": MIXED["quantized_layers"]}}
    assert _q(legacy) == 92_076


def test_mixed_precision_experts_under_their_prefix():
    # MoE layer: 4 experts of 32; keys name per-expert projections under ...mlp.experts (NVIDIA's layout)
    moe = {**TINY, "model_type": "qwen3_moe", "num_experts": 4, "moe_intermediate_size": 32}
    layers = {**_layer("mlp.experts.0.gate_proj", "NVFP4"), **_layer("mlp.experts.0.up_proj", "NVFP4"),
              **_layer("mlp.experts.0.down_proj", "NVFP4")}
    b = weights_breakdown({**moe, "quantization_config": {**MIXED, "quantized_layers": layers}})
    # experts: gate_up 64 x 64 = 4,096 x 0.5625 + 8 = 2,312 per expert, down 64 x 32 = 2,048 -> 1,160: x 4 experts;
    # the router (4 x 64) stays bf16
    assert b["parts"]["experts"] == 4 * (2_312 + 1_160) + 256 * 2


@pytest.mark.parametrize("algo,linear_and_head", [
    # every linear and the LM head (ParallelLMHead is quantised unless excluded)
    ("FP8_PER_CHANNEL_PER_TOKEN", 36_864 + 512 * 4 + 16_384 + 256 * 4),      # fp32 per output row
    ("FP8_PB_WO", 36_864 + 7 * 4 + 16_384 + 2 * 4),                            # fp32 per 128x128 block
    ("W4A16_NVFP4", 18_432 + 2_304 + 7 * 4 + 8_192 + 1_024 + 4),              # 0.5 B + fp8 per 16 + one fp32
    ("MXFP8", 36_864 + 1_152 + 16_384 + 512),                                 # fp8 + e8m0 per 32
])
def test_single_algo_checkpoints(algo, linear_and_head):
    # FP8_PB_WO blocks: q 1x1, k 1x1, v 1x1, o 1x1, gate 1x1, up 1x1, down 1x1 = 7 (+ the head's 2 x 1 = 2)
    got = _q({"quant_method": "modelopt", "quant_algo": algo})
    assert got == linear_and_head + 16_384 * 2 + 192 * 2


def test_nvfp4_config_groups_without_activations_is_weight_only():
    # ModelOptNvFp4Config._from_config: NVFP4 whose config_groups quantise no input activations is W4A16_NVFP4
    qc = {"quant_method": "modelopt", "quant_algo": "NVFP4",
          "config_groups": {"g": {"weights": {"num_bits": 4, "type": "float", "group_size": 16},
                                  "input_activations": None, "targets": ["Linear"]}}}
    assert _q(qc) == _q({"quant_method": "modelopt", "quant_algo": "W4A16_NVFP4"})


def test_unknown_algo_and_missing_table_are_named():
    with pytest.raises(InputError, match="scheme 'modelopt W4A8_AWQ'"):
        scheme_of(None, {"quant_method": "modelopt", "quant_algo": "W4A8_AWQ"}, 2)
    with pytest.raises(InputError, match="missing field quantization_config.quantized_layers"):
        scheme_of(None, {"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION"}, 2)
    with pytest.raises(InputError, match=r"quantized_layers\.x\.quant_algo = 'INT8_SQ'"):
        scheme_of(None, {"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION",
                         "quantized_layers": {"x": {"quant_algo": "INT8_SQ"}}}, 2)
