"""The modules of a checkpoint, by checkpoint name: what the weights estimate prices one by one.

A quantisation scheme decides per module (its own rule and the checkpoint's ignore list name modules, not parameter
totals), so the weights estimate needs the modules vLLM builds, named as the checkpoint names them
(``model.layers.3.self_attn.q_proj``). Shapes follow the Hugging Face modelling code that writes the checkpoint and
vLLM's model files that load it (``model_executor/models/{llama,qwen2,qwen3_moe,qwen3_next,deepseek_v2,
nemotron_h,qwen2_5_vl}.py`` @ v0.11.0 and the lab's v0.33.0):

* attention: ``q_proj``/``k_proj``/``v_proj``/``o_proj`` (biases for Qwen/Qwen2 and ``attention_bias``); MLA
  ``q_a_proj``/``q_b_proj`` (or ``q_proj``), ``kv_a_proj_with_mqa``, ``kv_b_proj``, ``o_proj``;
* MLP ``gate_proj``/``up_proj``/``down_proj``; MoE ``mlp.experts`` (``num_experts`` x gate/up/down, one entry per
  layer), the router ``mlp.gate`` and shared experts (``shared_expert`` Qwen, ``shared_experts`` DeepSeek);
* Gated DeltaNet ``linear_attn.*`` (Qwen3-Next ``in_proj_qkvz``/``in_proj_ba``, Qwen3.5 ``in_proj_qkv``/
  ``in_proj_z``/``in_proj_b``/``in_proj_a``), Mamba-2 ``mixer.in_proj``/``conv1d``/``out_proj``;
* MTP layers the checkpoint ships (``mtp.*``: one decoder layer plus its ``eh_proj`` per layer; vLLM loads them
  only with ``--speculative-config`` method ``mtp``, so they count only when asked);
* vision / audio towers and projectors, family by family (:mod:`.towers`);
* embeddings, LM head (none when tied), norms, and the rotary ``cos_sin_cache`` buffer vLLM allocates at load
  (``layers/rotary_embedding``: ``max_position_embeddings x rotary_dim`` in the model dtype, one per distinct
  rope; it is part of ``Model loading took``).
"""

from __future__ import annotations

from typing import Any, Mapping

from kvdiag.errors import InputError

from .config_fields import int_field, text_config_of
from .module import Module
from .shape import ModelShape, model_shape

# Language-model prefixes checkpoints use (transformers < 4.52 wrote ``model.layers`` for Qwen2.5-VL, later
# ``model.language_model.layers``; Nemotron-H writes ``backbone``).
_LM_PREFIXES = ("model", "model.language_model", "language_model.model", "backbone")

# transformers' per-model default of ``tie_word_embeddings`` when config.json leaves it out (PretrainedConfig
# defaults to True; these model configs pass their own default): configuration_<model>.py.
_UNTIED_BY_DEFAULT = ("llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "qwen3_next",
                      "deepseek_v2", "deepseek_v3", "gpt_oss", "nemotron_h", "phi3", "glm4", "glm4_moe", "kimi_linear")


def tied_embeddings(config: Mapping[str, Any]) -> bool:
    """Whether the LM head shares the embedding matrix: the config's ``tie_word_embeddings``, else the model's
    transformers default (True for Gemma / Granite-style configs, False for Llama / Qwen / DeepSeek / Mistral)."""
    cfg = text_config_of(config)
    for src in (cfg, config):
        if "tie_word_embeddings" in src:
            return bool(src["tie_word_embeddings"])
    mt = str(cfg.get("model_type") or config.get("model_type") or "").split()[0]
    return not any(mt == m or mt.startswith(m + "_") for m in _UNTIED_BY_DEFAULT) and bool(mt)


def _lm(i: int | None, rest: str) -> tuple[str, tuple[str, ...]]:
    tail = rest if i is None else f"layers.{i}.{rest}"
    names = tuple(f"{p}.{tail}" for p in _LM_PREFIXES)
    return names[0], names[1:]


def _lin(i: int | None, rest: str, out_f: int, in_f: int, part: str, bias: int = 0) -> Module:
    name, aliases = _lm(i, rest)
    return Module(name, "linear", out_f, in_f, part, bias=bias, aliases=aliases)


def _dense(i: int | None, rest: str, n: int, part: str) -> Module:
    name, aliases = _lm(i, rest)
    return Module(name, "dense", n, 1, part, aliases=aliases)


def _attention_modules(cfg: Mapping[str, Any], shape: ModelShape, i: int, h: int, n_heads: int,
                       prefix: str = "self_attn", part: str = "attention") -> list[Module]:
    p = prefix
    if shape.attention_kind == "mla":
        rope = shape.qk_rope_head_dim or 0
        nope = int_field(cfg, "qk_nope_head_dim", required=False, zero_ok=True)
        v_dim = int_field(cfg, "v_head_dim", required=False, zero_ok=True)
        nope = 128 if nope is None else nope
        v_dim = 128 if v_dim is None else v_dim
        q_lora = cfg.get("q_lora_rank")
        mods = []
        if q_lora:
            mods += [_lin(i, f"{p}.q_a_proj", q_lora, h, part), _lin(i, f"{p}.q_b_proj", n_heads * (nope + rope), q_lora, part)]
        else:
            mods.append(_lin(i, f"{p}.q_proj", n_heads * (nope + rope), h, part))
        mods += [_lin(i, f"{p}.kv_a_proj_with_mqa", shape.kv_lora_rank + rope, h, part),
                 _lin(i, f"{p}.kv_b_proj", n_heads * (nope + v_dim), shape.kv_lora_rank, part),
                 _lin(i, f"{p}.o_proj", h, n_heads * v_dim, part)]
        return mods
    head_dim = shape.head_dim or h // n_heads
    q_out, kv_out = n_heads * head_dim, shape.num_kv_heads * head_dim
    biased = bool(cfg.get("attention_bias")) or str(cfg.get("model_type", "")) in ("qwen", "qwen2", "qwen2_moe",
                                                                                    "qwen2_5_vl", "qwen2_vl")
    # Qwen3-Next / Qwen3.5 gated attention: q_proj doubles (query and gate), qwen3_next.py @ v0.11.0
    q_rows = 2 * q_out if cfg.get("attn_output_gate", str(cfg.get("model_type", "")).startswith(("qwen3_next", "qwen3_5"))) else q_out
    mods = [_lin(i, f"{p}.q_proj", q_rows, h, part, bias=q_out if biased else 0),
            _lin(i, f"{p}.k_proj", kv_out, h, part, bias=kv_out if biased else 0),
            _lin(i, f"{p}.v_proj", kv_out, h, part, bias=kv_out if biased else 0),
            _lin(i, f"{p}.o_proj", h, q_out, part)]
    if str(cfg.get("model_type", "")).startswith(_QK_NORM_TYPES):  # per-head RMSNorm of q and k (head_dim each)
        mods.append(_dense(i, f"{p}.q_norm+k_norm", 2 * head_dim, part))
    return mods


_QK_NORM_TYPES = ("qwen3", "gemma3")
"""Families whose attention normalises q and k per head (``q_norm`` / ``k_norm`` of ``head_dim``: qwen3.py,
qwen3_moe.py, qwen3_next.py, qwen3_5.py, gemma3.py @ v0.33.0)."""


def _state_modules(shape: ModelShape, i: int, h: int, model_type: str) -> list[Module]:
    d = dict(shape.state_dims)
    if shape.state_kind == "mamba2":
        inter, groups, st, heads, k = (d["intermediate_size"], d["n_groups"], d["state_size"], d["num_heads"],
                                       d["conv_kernel"])
        conv_dim = inter + 2 * groups * st
        return [_lin(i, "mixer.in_proj", 2 * inter + 2 * groups * st + heads, h, "state_layers"),
                _dense(i, "mixer.conv1d", conv_dim * (k + 1), "state_layers"),
                _lin(i, "mixer.out_proj", h, inter, "state_layers"),
                _dense(i, "mixer.A_log+D+dt_bias", 3 * heads, "state_layers"),
                _dense(i, "mixer.norm", inter, "state_layers")]
    if shape.state_kind == "gated_delta_net":
        kh, vh, kd, vd, k = (d["num_k_heads"], d["num_v_heads"], d["head_k_dim"], d["head_v_dim"], d["conv_kernel"])
        conv_dim = 2 * kh * kd + vh * vd
        if model_type.startswith("qwen3_5"):
            proj = [_lin(i, "linear_attn.in_proj_qkv", conv_dim, h, "state_layers"),
                    _lin(i, "linear_attn.in_proj_z", vh * vd, h, "state_layers"),
                    _lin(i, "linear_attn.in_proj_b", vh, h, "state_layers"),
                    _lin(i, "linear_attn.in_proj_a", vh, h, "state_layers")]
        else:
            proj = [_lin(i, "linear_attn.in_proj_qkvz", 2 * kh * kd + 2 * vh * vd, h, "state_layers"),
                    _lin(i, "linear_attn.in_proj_ba", 2 * vh, h, "state_layers")]
        return proj + [_dense(i, "linear_attn.conv1d", conv_dim * k, "state_layers"),
                       _lin(i, "linear_attn.out_proj", h, vh * vd, "state_layers"),
                       _dense(i, "linear_attn.A_log+dt_bias", 2 * vh, "state_layers"),
                       _dense(i, "linear_attn.norm", vd, "state_layers")]
    return []


def _mlp_modules(cfg: Mapping[str, Any], i: int, h: int, moe_layer: bool, part: str = "") -> list[Module]:
    if not moe_layer:
        inter = int_field(cfg, "intermediate_size", "ffn_hidden_size", required=False)
        if inter is None:
            raise InputError("config: missing field intermediate_size (needed for the weights estimate)")
        p = part or "mlp"
        return [_lin(i, "mlp.gate_proj", inter, h, p), _lin(i, "mlp.up_proj", inter, h, p),
                _lin(i, "mlp.down_proj", h, inter, p)]
    n_exp = int_field(cfg, "num_experts", "num_local_experts", "n_routed_experts", required=False, zero_ok=True)
    moe_i = int_field(cfg, "moe_intermediate_size", required=False, zero_ok=True)
    if moe_i is None:
        moe_i = int_field(cfg, "intermediate_size", required=False) if cfg.get("model_type") in ("mixtral", "gpt_oss") else None
    if moe_i is None:
        raise InputError("config: missing field moe_intermediate_size (needed for the weights of the MoE experts)")
    p = part or "experts"
    n_shared = int_field(cfg, "n_shared_experts", required=False, zero_ok=True) or 0
    shared_i = int_field(cfg, "shared_expert_intermediate_size", required=False, zero_ok=True) or n_shared * moe_i
    name, aliases = _lm(i, "mlp.experts")
    mods = [Module(f"{name}.gate_up_proj", "experts", 2 * moe_i, h, p, count=n_exp,
                   aliases=tuple(f"{a}.gate_up_proj" for a in aliases),
                   fused=(f"{name}.0.gate_proj", f"{name}.0.up_proj")),
            Module(f"{name}.down_proj", "experts", h, moe_i, p, count=n_exp,
                   aliases=tuple(f"{a}.down_proj" for a in aliases), fused=(f"{name}.0.down_proj",)),
            _dense(i, "mlp.gate", n_exp * h, p)]  # router: GateLinear / ReplicatedLinear(quant_config=None)
    if str(cfg.get("model_type", "")) == "gpt_oss":  # w13 / w2 biases per expert, the router's bias
        mods.append(_dense(i, "mlp.experts.biases", n_exp * (2 * moe_i + h) + n_exp, p))
    if shared_i:
        sp = "mlp.shared_experts" if n_shared else "mlp.shared_expert"
        mods += [_lin(i, f"{sp}.gate_proj", shared_i, h, p), _lin(i, f"{sp}.up_proj", shared_i, h, p),
                 _lin(i, f"{sp}.down_proj", h, shared_i, p)]
        if not n_shared and "shared_expert_intermediate_size" in cfg:  # Qwen2-MoE / Qwen3-Next sigmoid gate
            mods.append(_dense(i, "mlp.shared_expert_gate", h, p))  # ReplicatedLinear(quant_config=None)
    return mods


def _nemotron_h_block(cfg: Mapping[str, Any], i: int, h: int, char: str) -> list[Module]:
    """Nemotron-H MLP ('-': ``mixer.up_proj``/``down_proj``, squared ReLU, not gated) and MoE ('E': routed experts
    up/down, ``shared_experts``, router) layers (``nemotron_h.py`` @ v0.33.0); Mamba / attention layers carry none."""
    if char == "-":
        inter = int_field(cfg, "intermediate_size", purpose="the weights estimate")
        return [_lin(i, "mixer.up_proj", inter, h, "mlp"), _lin(i, "mixer.down_proj", h, inter, "mlp")]
    if char == "E":
        n_exp = int_field(cfg, "n_routed_experts", "num_experts", purpose="the weights estimate")
        moe_i = int_field(cfg, "moe_intermediate_size", purpose="the weights estimate")
        shared_i = int_field(cfg, "moe_shared_expert_intermediate_size", required=False, zero_ok=True) or 0
        name, aliases = _lm(i, "mixer.experts")
        mods = [Module(f"{name}.up_proj", "experts", moe_i, h, "experts", count=n_exp,
                       aliases=tuple(f"{a}.up_proj" for a in aliases), fused=(f"{name}.0.up_proj",)),
                Module(f"{name}.down_proj", "experts", h, moe_i, "experts", count=n_exp,
                       aliases=tuple(f"{a}.down_proj" for a in aliases), fused=(f"{name}.0.down_proj",)),
                _dense(i, "mixer.gate", n_exp * h + n_exp, "experts")]
        if shared_i:
            mods += [_lin(i, "mixer.shared_experts.up_proj", shared_i, h, "experts"),
                     _lin(i, "mixer.shared_experts.down_proj", h, shared_i, "experts")]
        return mods
    return []


def _rope_buffer(cfg: Mapping[str, Any], shape: ModelShape) -> list[Module]:
    """``cos_sin_cache``: ``max_position_embeddings x rotary_dim`` (cos and sin halves), one per distinct rope."""
    max_pos = int_field(cfg, "max_position_embeddings", required=False)
    if not max_pos or shape.attention_kind == "none":
        return []
    if shape.attention_kind == "mla":
        rot = shape.qk_rope_head_dim or 0
    else:
        rp = cfg.get("rope_parameters") if isinstance(cfg.get("rope_parameters"), Mapping) else {}
        factor = cfg.get("partial_rotary_factor") or rp.get("partial_rotary_factor") or 1.0
        rot = int((shape.head_dim or 0) * float(factor))
    if not rot:
        return []
    ropes = 2 if cfg.get("rope_local_base_freq") else 1  # Gemma-3: local and global rope
    return [Module("rotary_emb.cos_sin_cache", "buffer", max_pos * rot * ropes, 1, "buffers")]


def _mtp_modules(cfg: Mapping[str, Any], shape: ModelShape, h: int, n_heads: int, moe: bool,
                 model_type: str) -> list[Module]:
    """The checkpoint's MTP layers as vLLM's drafter builds them; its embedding and LM head are the target's
    (``_maybe_share_embeddings`` / ``_maybe_share_lm_head`` of ``v1/spec_decode/llm_base_proposer.py`` @ v0.33.0: the
    drafter's copies are deleted before ``Model loading took`` is measured).

    * Qwen3-Next / Qwen3.5 (``qwen3_next_mtp.py``, ``qwen3_5_mtp.py``): ``mtp.fc`` (2h -> h, a quantisable
      ColumnParallelLinear; vLLM keeps it 16-bit under ``modelopt_fp4``), ``mtp.norm`` + ``pre_fc_norm_hidden`` +
      ``pre_fc_norm_embedding``, and ``mtp.layers.J`` full-attention decoder layers.
    * DeepSeek-V3 / GLM-4.x MoE (``deepseek_mtp.py``): ``model.layers.L+J.eh_proj`` (a plain ``nn.Linear``, never
      quantised), ``enorm``, ``hnorm``, ``shared_head.norm`` and the decoder layer itself.
    """
    mods: list[Module] = []
    qwen = model_type.startswith(("qwen3_next", "qwen3_5"))
    for j in range(shape.mtp_layers or 0):
        i = shape.num_layers + j
        layer = _attention_modules(cfg, shape, i, h, n_heads, part="mtp") + _mlp_modules(cfg, i, h, moe, part="mtp")
        if qwen:
            old = f"layers.{i}."
            layer = [Module(m.name.replace(f"model.{old}", f"mtp.layers.{j}.", 1), m.kind, m.out_features,
                            m.in_features, "mtp", m.count, m.bias, (f"model.mtp.layers.{j}." + m.name.split(old, 1)[1],),
                            tuple(f.replace(f"model.{old}", f"mtp.layers.{j}.", 1) for f in m.fused))
                     for m in layer]
            mods += [Module("mtp.fc", "linear", h, 2 * h, "mtp", aliases=("model.mtp.fc",)),
                     Module("mtp.norms", "dense", 5 * h, 1, "mtp")]
        else:
            layer = [Module(m.name, m.kind, m.out_features, m.in_features, "mtp", m.count, m.bias, m.aliases, m.fused)
                     for m in layer]
            eh, eh_alias = _lm(i, "eh_proj")
            mods += [Module(eh, "dense", h * 2 * h, 1, "mtp", aliases=eh_alias), _dense(i, "mtp_norms", 5 * h, "mtp")]
        mods += layer
    return mods


def checkpoint_modules(config: Mapping[str, Any], *, include_mtp: bool = False) -> list[Module]:
    """Every weight of the checkpoint vLLM builds, by checkpoint name (see the module docstring).

    Args:
        config: HF config dict (multimodal: the towers from ``vision_config`` / ``audio_config``).
        include_mtp: count the checkpoint's MTP layers (vLLM loads them with ``--speculative-config`` ``mtp``).

    Raises:
        InputError: a needed field is missing (named).
    """
    cfg = text_config_of(config)
    shape = model_shape(config)
    w = "the weights estimate"
    h = int_field(cfg, "hidden_size", "d_model", "n_embd", purpose=w)
    vocab = int_field(cfg, "vocab_size", purpose=w)
    n_heads = int_field(cfg, "num_attention_heads", "n_head", purpose=w)
    model_type = str(cfg.get("model_type") or "")
    padded_vocab = -(-vocab // 64) * 64  # VocabParallelEmbedding pads to DEFAULT_VOCAB_PADDING_SIZE 64
    emb, emb_alias = _lm(None, "embed_tokens")
    mods = [Module(emb, "embedding", padded_vocab, h, "embeddings", aliases=emb_alias)]
    if not tied_embeddings(config):
        mods.append(Module("lm_head", "lm_head", padded_vocab, h, "lm_head", aliases=("model.lm_head",)))
    n_exp = int_field(cfg, "num_experts", "num_local_experts", "n_routed_experts", required=False, zero_ok=True)
    first_dense = int_field(cfg, "first_k_dense_replace", required=False, zero_ok=True) or 0
    for i, kind in enumerate(shape.layer_kinds):
        if kind in ("full", "sliding"):
            mods += _attention_modules(cfg, shape, i, h, n_heads)
        elif kind in ("mamba", "linear"):
            st = _state_modules(shape, i, h, model_type)
            if not st:
                mods.append(Module(f"model.layers.{i}.uncounted_state_layer", "dense", 0, 1, "state_layers"))
            mods += st
        if model_type.startswith("nemotron_h"):
            mods += _nemotron_h_block(cfg, i, h, str(cfg.get("hybrid_override_pattern") or "")[i:i + 1])
            continue
        mods += _mlp_modules(cfg, i, h, bool(n_exp) and i >= first_dense)
    layers = shape.num_layers
    mods.append(_dense(None, "norms", (2 * layers + 1) * h, "norms"))
    if include_mtp and shape.mtp_layers:
        mods += _mtp_modules(cfg, shape, h, n_heads, bool(n_exp), model_type)
    mods += _rope_buffer(cfg, shape)
    from .towers import tower_modules  # (towers builds Module: imported here, not at the top)

    mods += tower_modules(config)
    return mods
