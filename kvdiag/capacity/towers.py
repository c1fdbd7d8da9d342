"""Vision towers and projectors of multimodal checkpoints, by family, as vLLM 0.33.0 builds them.

Each family's modules are named as its checkpoints name them (ignore lists match them) and sized as the vLLM model
file creates them (``model_executor/models/<file>.py`` @ v0.33.0):

* ``qwen2_vl`` (``qwen2_vl.py``): ``vision_config.embed_dim`` d, MLP ``fc1``/``fc2`` of ``d x mlp_ratio`` with biases,
  LayerNorms, ``qkv`` / ``proj`` with biases, a bias-free Conv3d patch embedding, the merger ``ln_q`` + ``mlp.0``
  (d·m² square) + ``mlp.2`` (to ``vision_config.hidden_size``, the text width), both with biases.
* ``qwen2_5_vl`` / ``qwen2_5_omni`` (``qwen2_5_vl.py``): d = ``hidden_size``, gated ``gate_proj``/``up_proj``/
  ``down_proj`` all with biases, RMSNorms, the same merger to ``out_hidden_size``.
* ``qwen3_vl`` / ``qwen3_vl_moe`` / ``qwen3_5`` / ``qwen3_5_moe`` (``qwen3_vl.py Qwen3_VisionTransformer``):
  d = ``hidden_size``, ``linear_fc1``/``linear_fc2`` with biases, LayerNorms, a Conv3d patch embedding with bias, a
  learned ``pos_embed`` of ``num_position_embeddings x d``, the merger (LayerNorm d, ``linear_fc1`` d·m² square,
  ``linear_fc2`` to ``out_hidden_size``) and one more merger per ``deepstack_visual_indexes`` entry (LayerNorm over
  d·m²); the model also allocates ``deepstack_input_embeds``: one ``max_num_batched_tokens x text hidden`` buffer per
  deepstack level in the model dtype (``Qwen3VLForConditionalGeneration.__init__``), counted by ``Model loading took``.
* ``llava`` / ``llava_next`` / ``llava_onevision`` (``llava.py``, ``clip.py``, ``siglip.py``): a CLIP or SigLIP
  encoder (q/k/v/out and ``fc1``/``fc2`` with biases, LayerNorms, position embeddings, CLIP's class embedding and
  bias-free patch conv, SigLIP's patch conv with bias) cut at the deepest ``vision_feature_layer``; the projector
  ``linear_1`` (vision -> text) and ``linear_2`` (text -> text) with biases; LLaVA-NeXT's ``image_newline``.
* ``gemma3`` (``gemma3_mm.py``): a SigLIP encoder, ``mm_input_projection_weight`` (vision x text) and
  ``mm_soft_emb_norm``.
* ``mistral3`` (``mistral3.py``, ``pixtral.py``): a Pixtral encoder (q/k/v/o without biases, gated SiLU MLP,
  RMSNorms, bias-free patch conv), the projector's RMSNorm, ``patch_merger.merging_layer`` (d·m² -> d, no bias),
  ``linear_1`` / ``linear_2`` (with ``multimodal_projector_bias``).
* anything else with a ``vision_config`` / ``audio_config``: a generic ViT (the pre-issue-43 rule), named as Qwen2-VL.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from .config_fields import int_field, text_config_of
from .module import Module
from .units import DEFAULT_MAX_NUM_BATCHED_TOKENS

QWEN2_VL = ("qwen2_vl",)
QWEN25_VL = ("qwen2_5_vl", "qwen2_5_omni", "qwen2_5_omni_thinker")
QWEN3_VL = ("qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe", "qwen3_omni_moe")
LLAVA = ("llava", "llava_next", "llava_onevision", "llava_next_video")
FAMILIES = QWEN2_VL + QWEN25_VL + QWEN3_VL + LLAVA + ("gemma3", "mistral3")
"""Top-level ``model_type`` values whose tower this module builds family by family."""


def _maker(prefixes: tuple[str, ...]) -> Callable[..., Module]:
    pre, alias_pre = prefixes[0], prefixes[1:]

    def mk(rest: str, kind: str, out_f: int, in_f: int, bias: int = 0) -> Module:
        return Module(f"{pre}.{rest}", kind, out_f, in_f, "towers", bias=bias,
                      aliases=tuple(f"{a}.{rest}" for a in alias_pre))

    return mk


def _dims(tc: Mapping[str, Any], key: str, *hidden_names: str) -> tuple[int, int]:
    names = hidden_names or ("hidden_size", "embed_dim", "d_model", "width")
    d = int_field(tc, *names, purpose=f"the {key} weights")
    depth = int_field(tc, "depth", "num_hidden_layers", "encoder_layers", "num_layers", "layers",
                      purpose=f"the {key} weights")
    return d, depth


def _feature_depth(config: Mapping[str, Any], depth: int) -> int:
    """LLaVA-style towers are built only up to the deepest ``vision_feature_layer`` (llava.py
    ``_get_num_hidden_layers``, utils.py ``get_layer_index`` @ v0.33.0: a negative index -k keeps depth - k + 1)."""
    feature = config.get("vision_feature_layer")
    if isinstance(feature, int) or (isinstance(feature, (list, tuple)) and feature
                                    and all(isinstance(f, int) for f in feature)):
        idx = [feature] if isinstance(feature, int) else list(feature)
        return max(depth + f + 1 if f < 0 else f for f in idx)
    return depth


def _qwen_vl(config: Mapping[str, Any], tc: Mapping[str, Any], family: str, mnbt: int) -> list[Module]:
    mk = _maker(("visual", "model.visual"))
    text_h = int_field(text_config_of(config), "hidden_size", purpose="the vision projector weights")
    if family in QWEN2_VL:
        d = int_field(tc, "embed_dim", purpose="the vision_config weights")
        inter = int(d * float(tc.get("mlp_ratio", 4)))
        out = int(tc.get("hidden_size") or text_h)
    else:
        d = int_field(tc, "hidden_size", "embed_dim", purpose="the vision_config weights")
        inter = int_field(tc, "intermediate_size", purpose="the vision_config weights")
        out = int(tc.get("out_hidden_size") or text_h)
    depth = int_field(tc, "depth", "num_hidden_layers", purpose="the vision_config weights")
    patch = int(tc.get("patch_size") or 14)
    temporal = int(tc.get("temporal_patch_size") or 2)
    chans = int(tc.get("in_channels") or tc.get("in_chans") or 3)
    merge = int(tc.get("spatial_merge_size") or 2)
    dm = d * merge * merge
    mods: list[Module] = []
    norm = 2 * d if family in QWEN25_VL else 4 * d  # RMSNorm weight vs LayerNorm weight + bias, two per block
    for b in range(depth):
        mods += [mk(f"blocks.{b}.attn.qkv", "linear", 3 * d, d, bias=3 * d),
                 mk(f"blocks.{b}.attn.proj", "linear", d, d, bias=d)]
        if family in QWEN25_VL:
            mods += [mk(f"blocks.{b}.mlp.gate_proj", "linear", inter, d, bias=inter),
                     mk(f"blocks.{b}.mlp.up_proj", "linear", inter, d, bias=inter),
                     mk(f"blocks.{b}.mlp.down_proj", "linear", d, inter, bias=d)]
        elif family in QWEN2_VL:
            mods += [mk(f"blocks.{b}.mlp.fc1", "linear", inter, d, bias=inter),
                     mk(f"blocks.{b}.mlp.fc2", "linear", d, inter, bias=d)]
        else:
            mods += [mk(f"blocks.{b}.mlp.linear_fc1", "linear", inter, d, bias=inter),
                     mk(f"blocks.{b}.mlp.linear_fc2", "linear", d, inter, bias=d)]
        mods.append(mk(f"blocks.{b}.norms", "dense", norm, 1))
    conv = chans * temporal * patch * patch * d
    if family in QWEN3_VL:
        mods.append(mk("patch_embed.proj", "dense", conv + d, 1))  # Conv3dLayer(bias=True)
        pos = int(tc.get("num_position_embeddings") or 0)
        if pos:
            mods.append(mk("pos_embed", "dense", pos * d, 1))
        mods += [mk("merger.norm", "dense", 2 * d, 1), mk("merger.linear_fc1", "linear", dm, dm, bias=dm),
                 mk("merger.linear_fc2", "linear", out, dm, bias=out)]
        levels = tc.get("deepstack_visual_indexes") or ()
        for j in range(len(levels) if isinstance(levels, (list, tuple)) else 0):
            mods += [mk(f"deepstack_merger_list.{j}.norm", "dense", 2 * dm, 1),
                     mk(f"deepstack_merger_list.{j}.linear_fc1", "linear", dm, dm, bias=dm),
                     mk(f"deepstack_merger_list.{j}.linear_fc2", "linear", out, dm, bias=out)]
        if levels:
            mods.append(Module("deepstack_input_embeds", "buffer", len(levels) * mnbt * text_h, 1, "buffers"))
    else:
        mods.append(mk("patch_embed.proj", "dense", conv, 1))  # Conv3d(bias=False)
        ln_q = d if family in QWEN25_VL else 2 * d
        mods += [mk("merger.ln_q", "dense", ln_q, 1), mk("merger.mlp.0", "linear", dm, dm, bias=dm),
                 mk("merger.mlp.2", "linear", out, dm, bias=out)]
    return mods


def _encoder(mk: Callable[..., Module], pre: str, d: int, inter: int, depth: int, *, bias: bool, gated: bool,
             norm: int, attn: tuple[str, str, str, str], mlp: tuple[str, ...]) -> list[Module]:
    mods: list[Module] = []
    bd = d if bias else 0
    for b in range(depth):
        p = f"{pre}.{b}"
        mods += [mk(f"{p}.{attn[0]}", "linear", d, d, bias=bd), mk(f"{p}.{attn[1]}", "linear", d, d, bias=bd),
                 mk(f"{p}.{attn[2]}", "linear", d, d, bias=bd), mk(f"{p}.{attn[3]}", "linear", d, d, bias=bd)]
        if gated:
            mods += [mk(f"{p}.{mlp[0]}", "linear", inter, d, bias=inter if bias else 0),
                     mk(f"{p}.{mlp[1]}", "linear", inter, d, bias=inter if bias else 0),
                     mk(f"{p}.{mlp[2]}", "linear", d, inter, bias=bd)]
        else:
            mods += [mk(f"{p}.{mlp[0]}", "linear", inter, d, bias=inter if bias else 0),
                     mk(f"{p}.{mlp[1]}", "linear", d, inter, bias=bd)]
        mods.append(mk(f"{p}.norms", "dense", norm, 1))
    return mods


def _clip_or_siglip(mk: Callable[..., Module], tc: Mapping[str, Any], depth: int, full_depth: int) -> list[Module]:
    d = int_field(tc, "hidden_size", purpose="the vision_config weights")
    inter = int_field(tc, "intermediate_size", purpose="the vision_config weights")
    patch = int(tc.get("patch_size") or 14)
    image = int(tc.get("image_size") or 224)
    chans = int(tc.get("num_channels") or 3)
    patches = (image // patch) ** 2
    siglip = "siglip" in str(tc.get("model_type") or "")
    base = "vision_model"
    mods = _encoder(mk, f"{base}.encoder.layers", d, inter, depth, bias=True, gated=False, norm=4 * d,
                    attn=("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.out_proj"),
                    mlp=("mlp.fc1", "mlp.fc2"))
    if siglip:
        mods += [mk(f"{base}.embeddings.patch_embedding", "dense", chans * patch * patch * d + d, 1),
                 mk(f"{base}.embeddings.position_embedding", "dense", patches * d, 1)]
    else:
        mods += [mk(f"{base}.embeddings.patch_embedding", "dense", chans * patch * patch * d, 1),
                 mk(f"{base}.embeddings.position_embedding", "dense", (patches + 1) * d, 1),
                 mk(f"{base}.embeddings.class_embedding", "dense", d, 1),
                 mk(f"{base}.pre_layrnorm", "dense", 2 * d, 1)]
    if depth == full_depth:  # post_layernorm only when every layer is kept (require_post_norm)
        mods.append(mk(f"{base}.post_layernorm", "dense", 2 * d, 1))
    return mods


def _llava(config: Mapping[str, Any], tc: Mapping[str, Any], family: str) -> list[Module]:
    text_h = int_field(text_config_of(config), "hidden_size", purpose="the projector weights")
    d, full = _dims(tc, "vision_config")
    depth = _feature_depth(config, full)
    mk = _maker(("vision_tower", "model.vision_tower"))
    mods = _clip_or_siglip(mk, tc, depth, full)
    pk = _maker(("multi_modal_projector", "model.multi_modal_projector"))
    feats = config.get("vision_feature_layer")
    n_feat = len(feats) if isinstance(feats, (list, tuple)) else 1
    bias = bool(config.get("multimodal_projector_bias", True))
    mods += [pk("linear_1", "linear", text_h, d * n_feat, bias=text_h if bias else 0),
             pk("linear_2", "linear", text_h, text_h, bias=text_h if bias else 0)]
    if family != "llava":
        mods.append(Module("image_newline", "dense", text_h, 1, "towers", aliases=("model.image_newline",)))
    return mods


def _gemma3(config: Mapping[str, Any], tc: Mapping[str, Any]) -> list[Module]:
    text_h = int_field(text_config_of(config), "hidden_size", purpose="the projector weights")
    d, depth = _dims(tc, "vision_config")
    mods = _clip_or_siglip(_maker(("vision_tower", "model.vision_tower")), tc, depth, depth)
    pk = _maker(("multi_modal_projector", "model.multi_modal_projector"))
    return mods + [pk("mm_input_projection_weight", "dense", d * text_h, 1), pk("mm_soft_emb_norm", "dense", d, 1)]


def _mistral3(config: Mapping[str, Any], tc: Mapping[str, Any]) -> list[Module]:
    text_h = int_field(text_config_of(config), "hidden_size", purpose="the projector weights")
    d, full = _dims(tc, "vision_config")
    depth = _feature_depth(config, full)
    inter = int_field(tc, "intermediate_size", purpose="the vision_config weights")
    patch = int(tc.get("patch_size") or 16)
    chans = int(tc.get("num_channels") or 3)
    mk = _maker(("vision_tower", "model.vision_tower"))
    mods = _encoder(mk, "transformer.layers", d, inter, depth, bias=False, gated=True, norm=2 * d,
                    attn=("attention.q_proj", "attention.k_proj", "attention.v_proj", "attention.o_proj"),
                    mlp=("feed_forward.gate_proj", "feed_forward.up_proj", "feed_forward.down_proj"))
    mods += [mk("patch_conv", "dense", chans * patch * patch * d, 1), mk("ln_pre", "dense", d, 1)]
    pk = _maker(("multi_modal_projector", "model.multi_modal_projector"))
    merge = int(config.get("spatial_merge_size") or 2)
    bias = bool(config.get("multimodal_projector_bias", False))
    mods += [pk("norm", "dense", d, 1), pk("patch_merger.merging_layer", "linear", d, d * merge * merge),
             pk("linear_1", "linear", text_h, d, bias=text_h if bias else 0),
             pk("linear_2", "linear", text_h, text_h, bias=text_h if bias else 0)]
    return mods


_GENERIC_PREFIXES = {"vision_config": ("visual", "model.visual", "vision_tower", "model.vision_tower"),
                     "visual": ("visual", "model.visual"),
                     "audio_config": ("audio_tower", "model.audio_tower")}


def _generic(config: Mapping[str, Any], key: str, tc: Mapping[str, Any]) -> list[Module]:
    """A ViT of unknown family: per block ``attn.qkv`` (3d x d, bias), ``attn.proj`` (d x d, bias), MLP gated
    (``gate_proj``/``up_proj``/``down_proj``, SiLU) or not (``fc1``/``fc2``), two LayerNorms; ``patch_embed.proj``
    ``channels x patch² x temporal x d``; the merger ``mlp.0`` (d·m² x d·m²) and ``mlp.2`` (out x d·m²), or a two-layer
    projector d -> out -> out without merging."""
    mk = _maker(_GENERIC_PREFIXES[key])
    text_h = text_config_of(config).get("hidden_size")
    d, depth = _dims(tc, key)
    if key == "vision_config":
        depth = _feature_depth(config, depth)
    inter = int_field(tc, "intermediate_size", "encoder_ffn_dim", required=False)
    if inter is None:
        inter = int(d * tc.get("mlp_ratio", 4))
    gated = str(tc.get("hidden_act", "")).lower() in ("silu", "swiglu")
    mods: list[Module] = []
    for b in range(depth):
        mods += [mk(f"blocks.{b}.attn.qkv", "linear", 3 * d, d, bias=3 * d),
                 mk(f"blocks.{b}.attn.proj", "linear", d, d, bias=d)]
        if gated:
            mods += [mk(f"blocks.{b}.mlp.gate_proj", "linear", inter, d, bias=inter),
                     mk(f"blocks.{b}.mlp.up_proj", "linear", inter, d),
                     mk(f"blocks.{b}.mlp.down_proj", "linear", d, inter, bias=d)]
        else:
            mods += [mk(f"blocks.{b}.mlp.fc1", "linear", inter, d, bias=inter),
                     mk(f"blocks.{b}.mlp.fc2", "linear", d, inter, bias=d)]
        mods.append(mk(f"blocks.{b}.norms", "dense", 4 * d, 1))
    patch = int(tc.get("patch_size") or 14)
    chans = int(tc.get("in_channels") or tc.get("in_chans") or tc.get("num_channels") or 3)
    temporal = int(tc.get("temporal_patch_size") or 1)
    if key != "audio_config":
        mods.append(mk("patch_embed.proj", "dense", chans * patch * patch * temporal * d, 1))
    out = int(tc.get("out_hidden_size") or text_h or d)
    merge = int(tc.get("spatial_merge_size") or 1)
    if merge > 1:
        dm = d * merge * merge
        mods += [mk("merger.mlp.0", "linear", dm, dm), mk("merger.mlp.2", "linear", out, dm)]
    else:
        mods += [mk("merger.mlp.0", "linear", out, d), mk("merger.mlp.2", "linear", out, out)]
    return mods


def tower_modules(config: Mapping[str, Any], *, max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS
                  ) -> list[Module]:
    """The vision (and audio) encoders and projectors of ``config`` (see the module docstring), ``[]`` for a
    text-only config.

    Args:
        config: the checkpoint's config.json dict (``vision_config`` / ``audio_config`` at the top level).
        max_num_batched_tokens: sizes Qwen3-VL's deepstack buffers (tokens).

    Raises:
        InputError: a tower field the family needs is missing (named).
    """
    family = str(config.get("model_type") or "")
    mods: list[Module] = []
    tc = config.get("vision_config")
    if isinstance(tc, Mapping):
        if family in QWEN2_VL + QWEN25_VL + QWEN3_VL:
            mods += _qwen_vl(config, tc, family, max_num_batched_tokens)
        elif family in LLAVA and "vision" in str(tc.get("model_type") or "clip_vision_model"):
            mods += _llava(config, tc, family)
        elif family == "gemma3":
            mods += _gemma3(config, tc)
        elif family == "mistral3":
            mods += _mistral3(config, tc)
        else:
            mods += _generic(config, "vision_config", tc)
    for key in ("visual", "audio_config"):
        if isinstance(config.get(key), Mapping):
            mods += _generic(config, key, config[key])
    return mods
