"""Hand-computed cases for the deployment kinds of the capacity model's second pass (issue 16).

Every expected number is worked out in the comments from the vLLM rule it tests (source file @ version named);
none is read back from the code under test.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvdiag import capacity as cap
from kvdiag.errors import InputError

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "capacity" / "configs"
GIB = 1024**3

LLAMA31_8B = {
    "model_type": "llama", "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
    "hidden_size": 4096, "intermediate_size": 14336, "vocab_size": 128256, "torch_dtype": "bfloat16",
}


def _config(name: str, **overrides) -> dict:
    return {**json.loads((FIXTURES / name).read_text()), **overrides}


# --- EAGLE / EAGLE3: the head's decoder layer joins the target's full-attention group ------------------------
# Source: v1/worker/gpu_model_runner.py get_kv_cache_spec + v1/spec_decode/eagle.py load_model @ v0.11.0.

@pytest.mark.parametrize("method", ["eagle", "eagle3"])
def test_eagle_layer_joins_the_full_attention_group(method):
    shape = cap.model_shape(LLAMA31_8B)
    # page 16 x 2 x 8 x 128 x 2 B = 65,536 B; 32 + 1 layers in one group -> block 33 x 65,536 = 2,162,688 B.
    # 10 GiB = 10,737,418,240 B // 2,162,688 = 4,964 (4,964 x 2,162,688 = 10,735,583,232; 4,965 x = 10,737,745,920).
    est = cap.estimate_capacity(shape, 10 * GIB, max_model_len=8192, vllm_version="0.11.0",
                                speculative_method=method, num_speculative_tokens=3)
    assert [(g.kind, g.layers) for g in est.layout.groups] == [("full_attention", 33)]
    assert est.layout.block_bytes == 2_162_688
    assert est.num_gpu_blocks == 4_964
    assert est.kv_capacity_tokens == 4_964 * 16 == 79_424
    # 8192 / 16 = 512 blocks per request -> 4,964 / 512 = 9.695
    assert round(est.max_concurrency, 3) == 9.695
    # without the drafter: 10 GiB // (32 x 65,536) = 5,120 blocks = 81,920 tokens
    plain = cap.estimate_capacity(shape, 10 * GIB, max_model_len=8192, vllm_version="0.11.0")
    assert plain.kv_capacity_tokens == 81_920
    assert any("drafter" in n for n in est.notes)


def test_ngram_adds_no_layer():
    shape = cap.model_shape(LLAMA31_8B)
    est = cap.estimate_capacity(shape, 10 * GIB, vllm_version="0.11.0", speculative_method="ngram",
                                num_speculative_tokens=4)
    assert est.kv_capacity_tokens == 81_920


# --- MTP on a Gated-DeltaNet hybrid (Qwen3-Next-80B-A3B, TP4, vLLM 0.11.0) ------------------------------------
# Sources @ v0.11.0: qwen3_next_mtp.py (num_mtp_layers = getattr(config, "num_nextn_predict_layers", 1), a
# full-attention layer); mamba_utils.py gated_delta_net_state_shape (conv rows conv_kernel - 1 + num_spec) and
# gated_delta_net_state_dtype (both states in the conv dtype); models/config.py HybridAttentionMambaModelConfig
# (block 16 x cdiv(state, 16 x attention page per token)); kv_cache_utils.py (groups, token line).

def test_mtp_on_gdn_hybrid_grows_the_conv_state_and_the_block():
    shape = cap.model_shape(_config("qwen3-next-80b-a3b.json"))
    # conv_dim 2 x 16 x 128 + 32 x 128 = 8,192 / TP4 = 2,048; conv rows 3 + 2 = 5 -> 10,240 x 2 B = 20,480 B;
    # SSM 32/4 x 128 x 128 = 131,072 x 2 B = 262,144 B -> state 282,624 B (274,432 B without speculation).
    assert cap.state_bytes_per_layer(shape, 4, num_speculative_tokens=2, vllm_version=(0, 11, 0)) == 282_624
    assert cap.state_bytes_per_layer(shape, 4, vllm_version=(0, 11, 0)) == 274_432
    # attention 1 KV head per rank x 256 x 2 x 2 B = 1,024 B/token; block 16 x ceil(282,624 / 16,384) = 16 x 18 = 288
    # (16 x ceil(274,432 / 16,384) = 272 without). Groups: 12 + 1 MTP full = 13, 36 GDN -> 13 + 13 + 10 (pad 3):
    # 4 groups of 13; page 288 x 1,024 = 294,912 B; block 13 x 294,912 = 3,833,856 B.
    # 20 GiB = 21,474,836,480 // 3,833,856 = 5,601 blocks (5,601 x = 21,473,427,456; 5,602 x = 21,477,261,312).
    est = cap.estimate_capacity(shape, 20 * GIB, tensor_parallel_size=4, max_model_len=32768, vllm_version="0.11.0",
                                speculative_method="mtp", num_speculative_tokens=2)
    assert est.layout.block_size == 288
    assert est.layout.group_size == 13 and est.layout.num_groups == 4 and est.layout.padding_layers == 3
    assert est.layout.block_bytes == 3_833_856
    assert est.num_gpu_blocks == 5_601
    assert est.kv_capacity_tokens == 5_601 // 4 * 288 == 403_200
    # per request: ceil(32,768 / 288) = 114 full-attention blocks + 3 GDN groups x 1 page = 117 -> 5,601 / 117 = 47.87
    assert round(est.max_concurrency, 2) == 47.87
    # no speculation: 4 groups of 12, page 272 x 1,024, block 3,342,336 B -> 6,425 blocks, 6,425 // 4 x 272 = 436,832
    plain = cap.estimate_capacity(shape, 20 * GIB, tensor_parallel_size=4, max_model_len=32768, vllm_version="0.11.0")
    assert (plain.layout.block_size, plain.num_gpu_blocks, plain.kv_capacity_tokens) == (272, 6_425, 436_832)


def test_mtp_without_mtp_layers_names_the_field():
    with pytest.raises(InputError, match="num_nextn_predict_layers"):
        cap.estimate_capacity(cap.model_shape(LLAMA31_8B), GIB, speculative_method="mtp", num_speculative_tokens=1)


def test_mtp_deepseek_layer_joins_the_mla_group():
    # DeepSeek-V2-Lite with num_nextn_predict_layers 1 (deepseek_mtp.py @ v0.11.0: config.num_nextn_predict_layers
    # MTP layers, each an MLA layer): 28 layers x 16 x 576 x 2 B = 516,096 B per block;
    # 10 GiB // 516,096 = 20,805 blocks (20,805 x 516,096 = 10,737,377,280; 20,806 x = 10,737,893,376).
    shape = cap.model_shape(_config("deepseek-v2-lite.json", num_nextn_predict_layers=1))
    est = cap.estimate_capacity(shape, 10 * GIB, vllm_version="0.11.0", speculative_method="mtp",
                                num_speculative_tokens=1)
    assert est.layout.block_bytes == 516_096
    assert est.num_gpu_blocks == 20_805 and est.kv_capacity_tokens == 332_880


# --- Decode context parallel (DeepSeek-V2-Lite MLA, TP4 x DCP4) ------------------------------------------------
# kv_cache_utils.py @ v0.11.0: num_tokens = num_blocks // groups x block; "if decode_context_parallel_size > 1:
# num_tokens *= decode_context_parallel_size"; kv_cache_interface.py FullAttentionSpec.max_memory_usage_bytes
# @ v0.11.0: cdiv(max_model_len, dcp) tokens per rank.

def test_decode_context_parallel_multiplies_the_printed_tokens():
    shape = cap.model_shape(_config("deepseek-v2-lite.json"))
    # MLA 576 x 2 B = 1,152 B/token/layer, not split by TP; block 16 x 1,152 x 27 = 497,664 B;
    # 10 GiB // 497,664 = 21,575 (21,575 x = 10,737,100,800; 21,576 x = 10,737,598,464).
    est = cap.estimate_capacity(shape, 10 * GIB, tensor_parallel_size=4, max_model_len=32768, vllm_version="0.11.0",
                                decode_context_parallel_size=4)
    assert est.num_gpu_blocks == 21_575
    assert est.kv_capacity_tokens == 21_575 * 16 * 4 == 1_380_800
    # per request ceil(ceil(32,768 / 4) / 16) = 512 blocks -> 21,575 / 512 = 42.14
    assert round(est.max_concurrency, 2) == 42.14
    plain = cap.estimate_capacity(shape, 10 * GIB, tensor_parallel_size=4, max_model_len=32768, vllm_version="0.11.0")
    assert plain.kv_capacity_tokens == 345_200 and round(plain.max_concurrency, 2) == 10.53


def test_decode_context_parallel_on_the_group_aware_line():
    # 0.24.0: the line is int(max_concurrency x max_model_len) (get_kv_cache_capacity, kv_cache_utils.py @ v0.24.0)
    # with cdiv(32,768, 4) = 8,192 tokens per rank per request: 21,575 / 512 x 32,768 = 1,380,800, the same figure
    # as 0.11's num_blocks x 16 x dcp for a one-group model.
    shape = cap.model_shape(_config("deepseek-v2-lite.json"))
    est = cap.estimate_capacity(shape, 10 * GIB, tensor_parallel_size=4, max_model_len=32768, vllm_version="0.24.0",
                                decode_context_parallel_size=4)
    assert est.kv_capacity_tokens == 1_380_800


def test_decode_context_parallel_must_divide_tp():
    with pytest.raises(ValueError, match="divide"):
        cap.estimate_capacity(cap.model_shape(LLAMA31_8B), GIB, tensor_parallel_size=2, decode_context_parallel_size=4)


# --- --mamba-ssm-cache-dtype float32 (Nemotron-H 4B of R35, vLLM 0.13.0, fp8 KV) -------------------------------
# mamba_utils.py @ v0.13.0 _mamba_state_dtype: conv in mamba_cache_dtype (model dtype), SSM in mamba_ssm_cache_dtype.

def _nemotron_4b() -> dict:
    # the R35 dims (see tests/test_capacity.py _nemotron_4b_overrides): 21 Mamba + 4 attention layers
    return _config("nvidia-nemotron-3-nano-4b.json", num_hidden_layers=25, hybrid_override_pattern="M" * 21 + "*" * 4,
                   num_key_value_heads=8, head_dim=128, mamba_num_heads=96, mamba_head_dim=80, n_groups=8,
                   ssm_state_size=128, conv_kernel=4, mamba_ssm_cache_dtype="float16", torch_dtype="bfloat16")


def test_fp32_ssm_state_doubles_the_ssm_part_and_the_block():
    shape = cap.model_shape(_nemotron_4b())
    # conv 3 x (7,680 + 2 x 8 x 128) = 29,184 x 2 B = 58,368 B; SSM 96 x 80 x 128 = 983,040 x 4 B = 3,932,160 B
    # -> 3,990,528 B (fp16 SSM: 2,024,448 B). Attention fp8 2 x 8 x 128 x 1 B = 2,048 B/token.
    assert cap.state_bytes_per_layer(shape, ssm_dtype="float32") == 3_990_528
    # block 16 x ceil(3,990,528 / 32,768) = 16 x 122 = 1,952 (992 with fp16); 7 groups of 4;
    # block bytes 1,952 x 2,048 x 4 = 15,990,784; 11.15 GiB = 11,972,237,721 B // 15,990,784 = 748
    # (748 x = 11,961,106,432; 749 x = 11,977,097,216); 748 // 7 x 1,952 = 206,912 tokens;
    # per request ceil(8,192 / 1,952) = 5 + 6 Mamba groups = 11 -> 748 / 11 = 68.00
    est = cap.estimate_capacity(shape, 11.15 * GIB, kv_cache_dtype="fp8", max_model_len=8192, vllm_version="0.13.0",
                                mamba_ssm_cache_dtype="float32")
    assert est.layout.block_size == 1_952
    assert est.num_gpu_blocks == 748
    assert est.kv_capacity_tokens == 206_912
    assert round(est.max_concurrency, 2) == 68.00
    # fp16 (as logged in R35): block 992, 1,473 blocks, 208,320 tokens
    base = cap.estimate_capacity(shape, 11.15 * GIB, kv_cache_dtype="fp8", max_model_len=8192, vllm_version="0.13.0")
    assert (base.layout.block_size, base.num_gpu_blocks, base.kv_capacity_tokens) == (992, 1_473, 208_320)


def test_gdn_ssm_dtype_ignored_before_0_20():
    # gated_delta_net_state_dtype @ v0.13.0 returns (state_dtype, state_dtype): fp32 SSM request has no effect;
    # @ v0.24.0 it takes mamba_ssm_cache_dtype. Qwen3-Next TP4: SSM 131,072 elements, conv 6,144.
    shape = cap.model_shape(_config("qwen3-next-80b-a3b.json"))
    assert cap.state_bytes_per_layer(shape, 4, ssm_dtype="float32", vllm_version=(0, 13, 0)) == 274_432
    # 6,144 x 2 + 131,072 x 4 = 536,576
    assert cap.state_bytes_per_layer(shape, 4, ssm_dtype="float32", vllm_version=(0, 24, 0)) == 536_576


# --- Prefix caching on/off for hybrid state pages (U01 row, Qwen3.6 on vLLM 0.20.0) -----------------------------
# config/cache.py mamba_cache_mode 'align' with prefix caching (U01 log line), MambaSpec.max_memory_usage_bytes
# (kv_cache_interface.py @ v0.24.0): 'align' 2 pages per request, 'none' 1.

def test_prefix_caching_off_keeps_one_state_page():
    shape = cap.model_shape(_config("qwen3.6-35b-a3b.json", mamba_ssm_dtype="float32"))
    on = cap.estimate_capacity(shape, 2.95 * GIB, kv_cache_dtype="fp8_e4m3", max_model_len=65536,
                               vllm_version="0.20.0")
    off = cap.estimate_capacity(shape, 2.95 * GIB, kv_cache_dtype="fp8_e4m3", max_model_len=65536,
                                vllm_version="0.20.0", prefix_caching=False)
    # U01: 147 blocks of 2,096 tokens, 4 groups: full ceil(65,536 / 2,096) = 32 blocks + 3 GDN groups x 2 = 38
    # -> 147 / 38 = 3.87 (logged); prefix caching off: 32 + 3 x 1 = 35 -> 147 / 35 = 4.20
    assert on.num_gpu_blocks == off.num_gpu_blocks == 147
    assert round(on.max_concurrency, 2) == 3.87
    assert round(off.max_concurrency, 2) == 4.20


# --- DeepSeek-V2 before MLA support (vLLM < 0.7.1) --------------------------------------------------------------
# config.py get_head_size @ v0.6.4: 256 for deepseek_v2 ("pad head_size 192 to 256"); @ v0.7.0: qk_nope + qk_rope;
# @ v0.7.1: use_mla -> kv_lora_rank + qk_rope_head_dim latent. get_num_kv_heads: num_key_value_heads // tp.

@pytest.mark.parametrize("version,per_token,blocks", [
    # 0.6.4: 2 x 16 x 256 x 2 B x 27 = 442,368 B/token; block 7,077,888; 20 GiB // = 3,034
    # (3,034 x = 21,474,312,192; 3,035 x = 21,481,390,080)
    ("0.6.4", 442_368, 3_034),
    # 0.7.0: 2 x 16 x 192 x 2 B x 27 = 331,776; block 5,308,416; 20 GiB // = 4,045 (4,045 x = 21,472,542,720)
    ("0.7.0", 331_776, 4_045),
    # 0.7.1: 576 x 2 B x 27 = 31,104; block 497,664; 20 GiB // = 43,151 (43,151 x = 21,474,699,264)
    ("0.7.1", 31_104, 43_151),
])
def test_deepseek_v2_before_mla_caches_per_head_kv(version, per_token, blocks):
    shape = cap.model_shape(_config("deepseek-v2-lite.json", qk_nope_head_dim=128))  # _source: qk_head_dim 128
    est = cap.estimate_capacity(shape, 20 * GIB, vllm_version=version)
    assert est.kv_bytes_per_token == per_token
    assert est.num_gpu_blocks == blocks
    assert est.kv_capacity_tokens == blocks * 16  # V0 (< 0.8): # GPU blocks x block size


def test_pre_mla_needs_qk_nope_head_dim():
    shape = cap.model_shape(_config("deepseek-v2-lite.json"))
    with pytest.raises(InputError, match="qk_nope_head_dim"):
        cap.estimate_capacity(shape, GIB, vllm_version="0.6.4")


# --- Exact version strings ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("text,release,rc,dev,sha", [
    ("0.11.0rc2.dev98+g393de22d2", (0, 11, 0), 2, 98, "393de22d2"),
    ("0.10.1.dev101+gbda9d0535", (0, 10, 1), None, 101, "bda9d0535"),
    ("0.13.0+faa43dbf.nv26.01", (0, 13, 0), None, None, None),
    ("v0.20.0", (0, 20, 0), None, None, None),
    ("0.10.1.1", (0, 10, 1), None, None, None),
    ("0.21.0rc1", (0, 21, 0), 1, None, None),
])
def test_version_strings(text, release, rc, dev, sha):
    v = cap.parse_vllm_version_full(text)
    assert (v.release, v.rc, v.dev, v.git_sha) == (release, rc, dev, sha)
    assert v.is_prerelease == (rc is not None or dev is not None)


def test_release_candidate_already_prints_the_newer_line():
    # 0.21.0rc1 is cut for 0.21.0 and takes its group-aware token line (TOKEN_LINE_GROUP_AWARE_FROM = 0.21.0):
    # Gemma-3-27B-like sliding model, the line is int(max_concurrency x max_model_len), not num_blocks // groups x B.
    shape = cap.model_shape(_config("gemma-3-27b-it.json"))
    rc = cap.estimate_capacity(shape, 109.86 * GIB, max_model_len=4096, max_num_batched_tokens=8192,
                               vllm_version="0.21.0rc1")
    old = cap.estimate_capacity(shape, 109.86 * GIB, max_model_len=4096, max_num_batched_tokens=8192,
                                vllm_version="0.20.0")
    assert old.kv_capacity_tokens == 205_696  # R26's line, 89,994 // 7 x 16
    assert rc.kv_capacity_tokens == int(rc.max_concurrency * 4096) != old.kv_capacity_tokens
    assert any("rc1 build" in n for n in rc.notes)


# --- EAGLE on a sliding-window model: the group-size rule per version ---------------------------------------------
# _get_kv_cache_groups_uniform_page_size (v1/core/kv_cache_utils.py): group size = smallest type count @ v0.11.0;
# the largest when < 1.25 x smallest @ v0.13.0; < 1.5 x @ v0.24.0 ("gpt-oss-20b + eagle, 12 sw + 13 full").

def _gpt_oss_120b() -> dict:
    return _config("gpt-oss-120b.json",
                   layer_types=["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(36)])


@pytest.mark.parametrize("version,groups,group_size,blocks,tokens", [
    # 18 sliding + 18 full + 1 EAGLE full = 19 full. TP4: 2 KV heads x 64 x 2 x 2 B = 512 B/token, page 8,192 B.
    # 0.11.0: size 18 -> sliding 1 group, full 18 + 1 (17 padding) -> 3 groups; block 18 x 8,192 = 147,456 B;
    # 40 GiB = 42,949,672,960 // 147,456 = 291,271 (x = 42,949,656,576); line 291,271 // 3 x 16 = 1,553,440
    ("0.11.0", 3, 18, 291_271, 1_553_440),
    # 0.13.0: 19 < 18 x 1.25 -> size 19: 2 groups (sliding padded by 1); block 19 x 8,192 = 155,648 B;
    # 40 GiB // 155,648 = 275,941 (x = 42,949,664,768); line 275,941 // 2 x 16 = 2,207,520
    ("0.13.0", 2, 19, 275_941, 2_207_520),
])
def test_eagle_on_sliding_model_group_size_by_version(version, groups, group_size, blocks, tokens):
    shape = cap.model_shape(_gpt_oss_120b())
    est = cap.estimate_capacity(shape, 40 * GIB, tensor_parallel_size=4, vllm_version=version,
                                speculative_method="eagle3", num_speculative_tokens=3)
    assert (est.layout.num_groups, est.layout.group_size) == (groups, group_size)
    assert est.num_gpu_blocks == blocks
    assert est.kv_capacity_tokens == tokens


def test_group_size_rule_versions():
    assert cap.group_size_close_factor((0, 11, 0)) is None
    assert cap.group_size_close_factor((0, 13, 0)) == 1.25
    assert cap.group_size_close_factor((0, 24, 0)) == 1.5


# --- Pipeline parallel on a sliding-window model: per-worker groups (0.10.1.1) vs whole-model groups (0.11.0) ----
# v1/engine/core.py @ v0.10.1.1: get_kv_cache_config per worker (each stage groups its own layers);
# v1/core/kv_cache_utils.py get_kv_cache_configs @ v0.11.0: groups of the merged specs, layers[i::num_groups].

@pytest.mark.parametrize("version,groups,group_size,tokens", [
    # Gemma-3-27B, PP4: stages of 15/16/16/15 layers (remainder to the stages before the last); full layers
    # 5, 11 | 17, 23, 29 | 35, 41 | 47, 53, 59. Page 16 x 2 x 16 x 128 x 2 B = 131,072 B.
    # 0.10.1.1: stage 1 has 3 full + 13 sliding -> size 3, 1 + 5 groups, block 3 pages = 393,216 B (stage 0's 2-page
    # block gives more blocks); 40 GiB // 393,216 = 109,226; line 109,226 // 6 x 16 = 291,264.
    ("0.10.1.1", 6, 3, 291_264),
    # 0.11.0: whole model 10 full + 52 sliding -> size 10: 1 + 6 groups; sliding group j = positions j, j+6, ...;
    # stage 0's 13 sliding layers put 3 in group 0 -> 3 layers per worker group, block 393,216 B, 109,226 blocks;
    # line 109,226 // 7 x 16 = 249,648.
    ("0.11.0", 7, 3, 249_648),
])
def test_pipeline_parallel_groups_by_version(version, groups, group_size, tokens):
    shape = cap.model_shape(_config("gemma-3-27b-it.json"))
    est = cap.estimate_capacity(shape, 40 * GIB, pipeline_parallel_size=4, vllm_version=version)
    assert (est.layout.num_groups, est.layout.group_size) == (groups, group_size)
    assert est.layout.block_bytes == 393_216 and est.num_gpu_blocks == 109_226
    assert est.kv_capacity_tokens == tokens


# --- Explicit prefix caching on a Mamba hybrid, vLLM 0.13.0 ----------------------------------------------------
# model_executor/models/config.py HybridAttentionMambaModelConfig @ v0.13.0 (prefix caching: block =
# lcm(chunk, 16) x cdiv(cdiv(mamba_page, attention page per token), lcm)); kv_cache_interface.py MambaSpec
# @ v0.13.0 (cdiv(max_model_len, mamba_block_size) pages per request); config/model.py (hybrid default: off).

def test_explicit_prefix_caching_on_013_hybrid_aligns_the_block_to_the_mamba_chunk():
    shape = cap.model_shape({**_nemotron_4b(), "chunk_size": 256})
    # state 2,024,448 B / 2,048 B per token = 988.5 -> 989 tokens; lcm(256, 16) = 256 -> block 256 x 4 = 1,024;
    # block bytes 1,024 x 2,048 x 4 = 8,388,608; 11.15 GiB // = 1,427 (x = 11,970,543,616; 1,428 x = 11,978,932,224);
    # line 1,427 // 7 x 1,024 = 207,872; per request 8 attention blocks + 6 Mamba groups x cdiv(8,192, 1,024) = 56
    # -> 1,427 / 56 = 25.48
    on = cap.estimate_capacity(shape, 11.15 * GIB, kv_cache_dtype="fp8", max_model_len=8192, vllm_version="0.13.0",
                               prefix_caching=True)
    assert on.layout.block_size == 1_024
    assert on.num_gpu_blocks == 1_427
    assert on.kv_capacity_tokens == 207_872
    assert round(on.max_concurrency, 2) == 25.48
    # the 0.13 default for hybrids (prefix caching off): R35 as logged, 992 tokens, 98.20x
    default = cap.estimate_capacity(shape, 11.15 * GIB, kv_cache_dtype="fp8", max_model_len=8192,
                                    vllm_version="0.13.0")
    assert (default.layout.block_size, round(default.max_concurrency, 2)) == (992, 98.20)


# --- Gated-DeltaNet hybrid under each SSM state dtype and prefix-caching mode, vLLM 0.24.0 (issue 32) ------------
# mamba_utils.py @ v0.24.0 gated_delta_net_state_dtype (SSM state in mamba_ssm_cache_dtype); config/cache.py
# mamba_cache_mode ('align' with prefix caching, 'none' without); MambaSpec.max_memory_usage_bytes ('align' 2 pages,
# 'none' 1); kv_cache_utils.py get_kv_cache_capacity (printed tokens = int(max_concurrency x max_model_len)).

@pytest.mark.parametrize("ssm,prefix,block,blocks,tokens", [
    # fp32 SSM: conv 3 x 8,192 x 2 B = 49,152 + SSM 32 x 128 x 128 x 4 B = 2,097,152 -> 2,146,304 B; fp8 attention
    # 2 x 2 x 256 x 1 B = 1,024 B/token -> block 16 x ceil(2,146,304 / 16,384) = 2,096; 4 groups of 10 -> block bytes
    # 2,096 x 1,024 x 10 = 21,463,040; 5.98 GiB // = 299. Prefix caching off ('none'): per request ceil(131,072 /
    # 2,096) = 63 + 3 x 1 = 66 -> 299 / 66 x 131,072 = 593,795.9 -> 593,795
    ("float32", False, 2_096, 299, 593_795),
    # on ('align'): 63 + 3 x 2 = 69 -> 299 / 69 x 131,072 = 567,978.7 -> 567,978 (row N10 as logged)
    ("float32", True, 2_096, 299, 567_978),
    # bf16 SSM: 49,152 + 1,048,576 = 1,097,728 B -> block 16 x 67 = 1,072; block bytes 10,977,280; 584 blocks;
    # 'none': ceil(131,072 / 1,072) = 123 + 3 = 126 -> 584 / 126 x 131,072 = 607,508.1 -> 607,508
    ("bfloat16", False, 1_072, 584, 607_508),
])
def test_gdn_state_dtype_and_prefix_mode_set_the_printed_line_and_the_pool(ssm, prefix, block, blocks, tokens):
    shape = cap.model_shape(_config("qwen3.6-35b-a3b.json"))
    est = cap.estimate_capacity(shape, 5.98 * GIB, kv_cache_dtype="fp8", max_model_len=131_072, vllm_version="0.24.0",
                                mamba_ssm_cache_dtype=ssm, prefix_caching=prefix)
    assert (est.layout.block_size, est.num_gpu_blocks, est.kv_capacity_tokens) == (block, blocks, tokens)
    assert est.pool_token_slots == blocks * block  # the physical pool: every block holds `block` token slots
