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
    # the whole checkpoint: 4,437,806,592 parameters (Hugging Face lists the model as 4.44 B)
    assert cap.parameter_count(cfg)["total"] == 4_437_806_592


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
