"""One test per checkpoint kind, each from a real public config.json (issue 43, must-show 2).

Configs with their provenance (``_source``) in fixtures/capacity/kinds/ and fixtures/capacity/weights/. Where a kind
has a row of vLLM's own ``Model loading took`` (fixtures/capacity/weights.csv) the test says so; the other numbers
are worked out by hand from the vLLM 0.33.0 model file named in kvdiag/capacity/towers.py, modules.py and
quantization.py, or taken from Hugging Face's own parameter counts where the source prints them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvdiag import capacity as cap
from kvdiag.capacity.modules import checkpoint_modules
from kvdiag.capacity.weights import weights_breakdown, weights_bytes_per_worker

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "capacity"
GIB = 2**30


def _cfg(rel: str) -> dict:
    return json.loads((FIX / rel).read_text())


def _tower(cfg: dict) -> dict[str, int]:
    return {m.name: m.params for m in checkpoint_modules(cfg) if m.part == "towers"}


# --- vision towers and projectors ---------------------------------------------------------------------------

def test_qwen25_vl_tower_matches_hugging_faces_own_parameter_counts():
    # the source prints torchinfo of the real architecture: one Qwen2_5_VLVisionBlock 19,702,200 parameters, the
    # Conv3d patch embedding 1,505,280, the merger's ln_q 1,280 and its MLP 36,707,328
    cfg = _cfg("kinds/qwen2.5-vl-3b-instruct.json")
    hf = cfg["_torchinfo_3_layers"]
    t = _tower(cfg)
    block0 = sum(v for k, v in t.items() if k.startswith("visual.blocks.0."))
    assert block0 == hf["Qwen2_5_VLVisionBlock"]
    assert t["visual.patch_embed.proj"] == hf["Conv3d"]
    assert t["visual.merger.ln_q"] == hf["merger.ln_q"]
    assert t["visual.merger.mlp.0"] + t["visual.merger.mlp.2"] == hf["merger.mlp"]
    assert sum(t.values()) == 32 * 19_702_200 + 1_505_280 + 1_280 + 36_707_328
    # the text decoder layer too (torchinfo's Qwen2_5_VLDecoderLayer: attention with q/k/v biases, MLP, 2 norms)
    layer0 = sum(m.params for m in checkpoint_modules(cfg) if ".layers.0." in m.name and m.part != "towers")
    assert layer0 + 2 * 2048 == hf["Qwen2_5_VLDecoderLayer"]


def test_qwen3_vl_deepstack_mergers_position_embedding_and_buffers():
    # qwen3_vl.py @ v0.33.0: block = qkv 3,148,800 + proj 1,049,600 + linear_fc1 4,198,400 + linear_fc2 4,195,328 +
    # 2 LayerNorms 4,096 = 12,596,224 x 24; patch Conv3d with bias 1,573,888; pos_embed 2,304 x 1,024 = 2,359,296;
    # merger LayerNorm 2,048 + fc1 16,781,312 + fc2 10,488,320; 3 deepstack mergers (LayerNorm over 4,096: 8,192)
    cfg = _cfg("kinds/qwen3-vl-4b-instruct.json")
    t = _tower(cfg)
    assert t["visual.pos_embed"] == 2_359_296
    assert sum(v for k, v in t.items() if k.startswith("visual.deepstack_merger_list.")) == 3 * 27_277_824
    assert sum(t.values()) == 24 * 12_596_224 + 1_573_888 + 2_359_296 + 27_271_680 + 3 * 27_277_824 == 415_347_712
    # deepstack_input_embeds: 3 levels x max_num_batched_tokens (2,048) x text hidden 2,560 elements, model dtype
    buf = next(m for m in checkpoint_modules(cfg) if m.name == "deepstack_input_embeds")
    assert buf.params == 3 * 2_048 * 2_560 and buf.kind == "buffer"
    # the whole checkpoint: 4,437,806,592 parameters + q_norm / k_norm (36 x 2 x 128) = 4,437,815,808 (Hugging Face
    # lists the model as 4.44 B)
    assert cap.parameter_count(cfg)["total"] == 4_437_815_808


def test_llava_next_clip_tower_and_projector_row():
    # weights.csv W24 (vLLM 0.10.2, 'Model loading took 14.0786 GiB'): CLIP ViT-L/14-336 cut at vision_feature_layer
    # -2 (23 of 24 layers, no post_layernorm), projector linear_1 1,024 -> 4,096 and linear_2, image_newline
    cfg = _cfg("weights/llava-v1.6-mistral-7b-hf.json")
    t = _tower(cfg)
    assert "vision_tower.vision_model.encoder.layers.22.mlp.fc2" in t
    assert "vision_tower.vision_model.encoder.layers.23.mlp.fc2" not in t
    assert "vision_tower.vision_model.post_layernorm" not in t
    assert t["multi_modal_projector.linear_1"] == 4_096 * 1_024 + 4_096
    got = weights_bytes_per_worker(cfg) / GIB
    assert abs(got - 14.0786) / 14.0786 < 0.001


def test_mistral3_pixtral_tower_and_patch_merger_row():
    # weights.csv W14 (vLLM 0.11.0, 44.76 GiB): Pixtral encoder (gated MLP, no biases) + merging_layer 4d -> d
    cfg = _cfg("weights/mistral-small-3.2-24b-instruct-2506.json")
    t = _tower(cfg)
    d = cfg["vision_config"]["hidden_size"]
    assert t["multi_modal_projector.patch_merger.merging_layer"] == d * 4 * d
    assert "vision_tower.transformer.layers.0.feed_forward.gate_proj" in t
    got = weights_bytes_per_worker(cfg) / GIB
    assert abs(got - 44.76) / 44.76 < 0.01


def test_tied_embeddings_leave_no_lm_head():
    # Qwen2.5-VL-3B: tie_word_embeddings true -> the head is the embedding (one 151,936 x 2,048 matrix)
    cfg = _cfg("kinds/qwen2.5-vl-3b-instruct.json")
    pc = cap.parameter_count(cfg)
    assert pc["lm_head"] == 0 and pc["embeddings"] == 151_936 * 2_048
    assert cap.parameter_count({**cfg, "tie_word_embeddings": False})["lm_head"] == 151_936 * 2_048


# --- MTP heads ----------------------------------------------------------------------------------------------

def test_qwen35_mtp_head_counts_only_with_mtp_and_shares_embedding_and_head():
    # Qwen3.5-27B: one MTP layer (qwen3_5_mtp.py @ v0.33.0): mtp.fc 10,240 -> 5,120 = 52,428,800; a full-attention
    # layer with gated q (2 x 24 x 256 rows) 62,914,560 + k, v 5,242,880 each + o 31,457,280 + q/k norms 512; MLP
    # 3 x 5,120 x 17,408 = 267,386,880; 5 norms 25,600 -> 424,699,392; the drafter's embedding and lm_head are the
    # target's (llm_base_proposer.py _maybe_share_embeddings / _maybe_share_lm_head: "Detected MTP model")
    cfg = _cfg("kinds/qwen3.5-27b.json")
    assert cap.parameter_count(cfg)["mtp"] == 0
    with_mtp = cap.parameter_count(cfg, include_mtp=True)
    assert with_mtp["mtp"] == 424_699_392
    assert with_mtp["embeddings"] == cap.parameter_count(cfg)["embeddings"]
    names = {m.name for m in checkpoint_modules(cfg, include_mtp=True) if m.part == "mtp"}
    assert {"mtp.fc", "mtp.layers.0.self_attn.q_proj", "mtp.layers.0.mlp.down_proj"} <= names


# --- quantisation schemes from real checkpoint configs ---------------------------------------------------------

def test_compressed_tensors_int8_group_scheme_with_a_name_by_name_ignore_list():
    # llm-compressor W8A16 group 32 (symmetric) of Qwen3-VL-30B-A3B: every vision linear, merger, router and lm_head
    # is named in 'ignore' and stays bf16; the experts are 1 B + a bf16 scale per 32 = 1.0625 B per weight
    cfg = _cfg("kinds/qwen3-vl-30b-a3b-instruct-awq-w8a16.json")
    s = cap.scheme_of(None, cfg["quantization_config"], 2)
    mods = checkpoint_modules(cfg)
    tower_linear = [m for m in mods if m.part == "towers" and m.kind == "linear"]
    assert len(tower_linear) == 27 * 4 + 2 + 3 * 2 and all(s.format_of(m) is None for m in tower_linear)
    head = next(m for m in mods if m.kind == "lm_head")
    assert s.format_of(head) is None
    experts = next(m for m in mods if m.name.endswith("layers.0.mlp.experts.gate_up_proj"))
    # gate_up 1,536 x 2,048 per expert: 3,145,728 B + 3,145,728 / 32 x 2 B = 3,342,336 B; x 128 experts
    assert s.module_bytes(experts) == 128 * 3_342_336
    q = next(m for m in mods if m.name.endswith("layers.0.self_attn.q_proj"))
    assert s.module_bytes(q) == 4_096 * 2_048 * 1.0625


def test_gptq_4bit_checkpoint_of_a_hybrid():
    # GPTQModel 4-bit group 128 of Qwen3.5-27B (text only): o_proj of a full-attention layer 5,120 x 6,144 ->
    # qweight 15,728,640 B + qzeros 48 x 5,120 x 0.5 B = 122,880 + fp16 scales 48 x 5,120 x 2 B = 491,520;
    # lm_head false: the head stays fp16 (248,320 x 5,120 x 2 B)
    cfg = _cfg("kinds/qwen3.5-27b-gptq-4bit.json")
    s = cap.scheme_of(None, cfg["quantization_config"], 2)
    mods = {m.name: m for m in checkpoint_modules(cfg)}
    assert s.module_bytes(mods["model.layers.3.self_attn.o_proj"]) == 15_728_640 + 122_880 + 491_520
    assert s.module_bytes(mods["lm_head"]) == 248_320 * 5_120 * 2
    b = weights_breakdown(cfg)
    assert b["scheme"] == "gptq 4-bit, group 128" and b["parts"]["lm_head"] == 248_320 * 5_120 * 2


def test_awq_modules_to_not_convert_are_substrings_layer_zero_included():
    # auto_awq.py @ v0.33.0 is_layer_skipped_awq: any listed string inside the module name. QuantTrio's list keeps
    # attention, Gated DeltaNet, shared experts, routers and all of layer 0 in bf16; layer 1's experts are AWQ:
    # per expert gate_up 1,024 x 2,048 -> qweight 1,048,576 + fp16 scales 16 x 1,024 x 2 = 32,768 + 4-bit zeros 8,192;
    # down 2,048 x 512 -> 524,288 + 16,384 + 4,096 -> 1,634,304 B per expert x 256
    cfg = _cfg("kinds/qwen3.6-35b-a3b-awq-quanttrio.json")
    s = cap.scheme_of(None, cfg["quantization_config"], 2)
    mods = {m.name: m for m in checkpoint_modules(cfg)}
    assert s.format_of(mods["model.layers.0.mlp.experts.gate_up_proj"]) is None       # "layers.0."
    assert s.module_bytes(mods["model.layers.0.mlp.experts.gate_up_proj"]) == 256 * 1_024 * 2_048 * 2
    e1 = s.module_bytes(mods["model.layers.1.mlp.experts.gate_up_proj"]) + \
        s.module_bytes(mods["model.layers.1.mlp.experts.down_proj"])
    assert e1 == 256 * 1_634_304
    for name in ("model.layers.3.self_attn.q_proj", "model.layers.1.linear_attn.in_proj_qkv",
                 "model.layers.1.mlp.shared_expert.down_proj", "model.layers.10.mlp.shared_expert.gate_proj"):
        assert s.format_of(mods[name]) is None, name
    # "layers.0." is not "layers.10.": layer 10's experts are quantised
    assert s.format_of(mods["model.layers.10.mlp.experts.down_proj"]) is not None
