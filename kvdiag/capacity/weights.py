"""Weights: parameter count and bytes of a checkpoint from its config, one worker's share, non-KV memory."""

from __future__ import annotations

import math
from typing import Any, Mapping

from kvdiag.errors import InputError

from .config_fields import _int_field, _text_config
from .shape import ModelShape, model_shape
from .quantization import bytes_per_weight
from .units import DEFAULT_MAX_NUM_BATCHED_TOKENS, GIB, _check_positive

_QUANT_BYTES = {
    None: None,
    "fp8": 1.0,
    "fbgemm_fp8": 1.0,
    "modelopt": 1.0,
    "compressed-tensors": None,  # depends on the scheme
    "awq": 0.5,
    "awq_marlin": 0.5,
    "gptq": 0.5,
    "gptq_marlin": 0.5,
    "bitsandbytes": 0.5,
    "mxfp4": 0.5,
    "nvfp4": 0.5,
    "modelopt_fp4": 0.5,
    "int8": 1.0,
    "w8a8": 1.0,
}

_GROUP_SCALE_OVERHEAD = (2 + 0.5) / 128
"""4-bit group quantization (group 128): one fp16 scale + one 4-bit zero point per 128
weights, bytes per weight."""


def parameter_count(config: Mapping[str, Any]) -> dict[str, int]:
    """Parameter count of a decoder-only transformer from its config, by part (unit: parameters).

    Source: the Hugging Face modelling code's layer shapes for Llama/Qwen2/Mistral (dense), Mixtral/Qwen-MoE
    (experts) and DeepSeek-V2/V3 (MLA); vLLM loads the same tensors (``model_executor/models/*.py``).

    Architecture formula: embeddings ``V × h``; LM head ``V × h`` unless
    ``tie_word_embeddings``; per layer attention (q, k, v, o — MLA: q or q-LoRA, kv_a, kv_b,
    o), norms, optional qkv bias (Qwen2), dense MLP ``3 × h × i`` (gated) or MoE
    ``experts × 3 × h × moe_i`` + shared experts + router. Mamba / linear layers are not
    counted (they are reported in ``"uncounted_layers"``).

    Args:
        config: HF config dict.

    Returns:
        Dict with ``embeddings``, ``lm_head``, ``attention``, ``mlp``, ``experts``, ``norms``,
        ``total`` and ``uncounted_layers``.

    Raises:
        InputError: a needed field is missing (hidden_size, vocab_size, intermediate_size ...).
    """
    cfg = _text_config(config)
    shape = model_shape(config)
    w = "the weights estimate"
    h = _int_field(cfg, "hidden_size", "d_model", "n_embd", purpose=w)
    vocab = _int_field(cfg, "vocab_size", purpose=w)
    n_heads = _int_field(cfg, "num_attention_heads", "n_head", purpose=w)
    tied = bool(cfg.get("tie_word_embeddings", False))
    embeddings = vocab * h
    lm_head = 0 if tied else vocab * h

    if shape.attention_kind == "mla":
        rope = shape.qk_rope_head_dim or 0
        nope = _int_field(cfg, "qk_nope_head_dim", required=False, zero_ok=True)
        v_dim = _int_field(cfg, "v_head_dim", required=False, zero_ok=True)
        if nope is None:
            nope = 128
        if v_dim is None:
            v_dim = 128
        q_lora = cfg.get("q_lora_rank")
        if q_lora:
            q = h * q_lora + q_lora * n_heads * (nope + rope)
        else:
            q = h * n_heads * (nope + rope)
        attn = q + h * (shape.kv_lora_rank + rope) + shape.kv_lora_rank * n_heads * (nope + v_dim) + n_heads * v_dim * h
    else:
        head_dim = shape.head_dim or h // n_heads
        q_out = n_heads * head_dim
        kv_out = shape.num_kv_heads * head_dim
        attn = h * q_out + 2 * h * kv_out + q_out * h
        # q/k/v biases: attention_bias=true, or Qwen / Qwen2 (always biased, no config flag).
        if cfg.get("attention_bias") or str(cfg.get("model_type", "")) in ("qwen", "qwen2", "qwen2_moe"):
            attn += q_out + 2 * kv_out

    n_experts = _int_field(cfg, "num_experts", "num_local_experts", "n_routed_experts", required=False, zero_ok=True)
    moe_i = _int_field(cfg, "moe_intermediate_size", required=False, zero_ok=True)
    dense_i = _int_field(cfg, "intermediate_size", "ffn_hidden_size", required=False)
    attn_layers = shape.num_attention_layers
    state_layers = shape.num_state_layers
    layers = shape.num_layers
    mlp = experts = 0
    if n_experts:
        if moe_i is None:
            raise InputError("config: missing field moe_intermediate_size (MoE model)")
        first_dense = _int_field(cfg, "first_k_dense_replace", required=False, zero_ok=True) or 0
        n_shared = _int_field(cfg, "n_shared_experts", required=False, zero_ok=True) or 0
        shared_i = _int_field(cfg, "shared_expert_intermediate_size", required=False, zero_ok=True) or n_shared * moe_i
        moe_layers = layers - first_dense
        experts = moe_layers * (n_experts * 3 * h * moe_i + h * n_experts + 3 * h * shared_i)
        if first_dense:
            if dense_i is None:
                raise InputError("config: missing field intermediate_size (dense layers of a MoE model)")
            mlp = first_dense * 3 * h * dense_i
    else:
        if dense_i is None:
            raise InputError("config: missing field intermediate_size (needed for the weights estimate)")
        mlp = layers * 3 * h * dense_i
    attention = attn * attn_layers
    norms = (2 * layers + 1) * h
    state = 0
    uncounted = 0
    if state_layers:
        per_state = _state_layer_params(shape, h)
        if per_state is None:
            uncounted = state_layers
        else:
            state = per_state * state_layers
    towers = _tower_params(config)
    total = embeddings + lm_head + attention + mlp + experts + norms + state + towers
    return {
        "embeddings": embeddings,
        "lm_head": lm_head,
        "attention": attention,
        "mlp": mlp,
        "experts": experts,
        "norms": norms,
        "state_layers": state,
        "towers": towers,
        "total": total,
        "uncounted_layers": uncounted,
    }


def _state_layer_params(shape: ModelShape, h: int) -> int | None:
    """Parameters of one Mamba-2 or Gated-DeltaNet mixer, None for kinds not modelled (KDA, unknown dims).

    Mamba-2 (``model_executor/layers/mamba/mamba_mixer2.py`` @ v0.11.0): in_proj ``h × (2·inter + 2·groups·state +
    heads)``, conv1d ``(inter + 2·groups·state) × conv_kernel`` (+ bias), out_proj ``inter × h``, A / D / dt_bias
    per head, gated norm ``inter``. Gated DeltaNet (``qwen3_next.py Qwen3NextGatedDeltaNet`` @ v0.11.0):
    in_proj_qkvz ``h × (2·k_heads·k_dim + 2·v_heads·v_dim)``, in_proj_ba ``h × 2·v_heads``, conv1d
    ``conv_dim × conv_kernel``, out_proj ``v_heads·v_dim × h``, A_log / dt_bias per value head, norm ``v_dim``.
    """
    if not shape.state_dims:
        return None
    d = dict(shape.state_dims)
    if shape.state_kind == "mamba2":
        inter, groups, st, heads, k = (d["intermediate_size"], d["n_groups"], d["state_size"], d["num_heads"],
                                       d["conv_kernel"])
        conv_dim = inter + 2 * groups * st
        return h * (2 * inter + 2 * groups * st + heads) + conv_dim * (k + 1) + inter * h + 3 * heads + inter
    if shape.state_kind == "gated_delta_net":
        kh, vh, kd, vd, k = (d["num_k_heads"], d["num_v_heads"], d["head_k_dim"], d["head_v_dim"], d["conv_kernel"])
        conv_dim = 2 * kh * kd + vh * vd
        return h * (2 * kh * kd + 2 * vh * vd) + h * 2 * vh + conv_dim * k + vh * vd * h + 2 * vh + vd
    return None


_TOWER_KEYS = ("vision_config", "audio_config", "visual")


def _tower_params(config: Mapping[str, Any]) -> int:
    """Parameters of vision / audio encoders named in the config (``vision_config``, ``audio_config``).

    A ViT-style encoder: ``depth × (4·d² + 4·d + mlp + 2·2d)`` with ``mlp = 3·d·i`` for gated (SiLU) and ``2·d·i``
    otherwise, a patch embedding ``channels × patch² × (temporal) × d``, and a projector into the text width
    (``d_merge × text_hidden + text_hidden²`` with ``spatial_merge_size²`` patches merged, Qwen2-VL style; a
    2-layer MLP ``d × text + text²`` otherwise). An estimate of the encoder's own config; towers stay in the model
    dtype under every quantisation scheme this module knows (their ignore lists name them).

    Raises:
        InputError: a tower config without its width or depth (names the field).
    """
    total = 0
    text_h = _text_config(config).get("hidden_size")
    for key in _TOWER_KEYS:
        tc = config.get(key)
        if not isinstance(tc, Mapping):
            continue
        d = _int_field(tc, "hidden_size", "embed_dim", "d_model", "width", purpose=f"the {key} weights")
        depth = _int_field(tc, "depth", "num_hidden_layers", "encoder_layers", "num_layers", "layers",
                           purpose=f"the {key} weights")
        inter = _int_field(tc, "intermediate_size", "encoder_ffn_dim", required=False)
        if inter is None:
            ratio = tc.get("mlp_ratio", 4)
            inter = int(d * ratio)
        gated = str(tc.get("hidden_act", "")).lower() in ("silu", "swiglu")
        mlp = (3 if gated else 2) * d * inter + inter + d
        layer = 4 * d * d + 4 * d + mlp + 4 * d
        patch = int(tc.get("patch_size") or 14)
        chans = int(tc.get("in_channels") or tc.get("in_chans") or tc.get("num_channels") or 3)
        temporal = int(tc.get("temporal_patch_size") or 1)
        embed = chans * patch * patch * temporal * d if key != "audio_config" else 0
        out = int(tc.get("out_hidden_size") or text_h or d)
        merge = int(tc.get("spatial_merge_size") or 1)
        proj = d * merge * merge * (d * merge * merge) + d * merge * merge * out if merge > 1 else d * out + out * out
        total += depth * layer + embed + proj
    return total


def weights_bytes(
    config: Mapping[str, Any],
    quantization: str | None = None,
    *,
    safetensors_index: Mapping[str, Any] | None = None,
) -> int:
    """Estimated bytes of the whole model's weights (all GPUs together).

    If ``safetensors_index`` (a parsed ``model.safetensors.index.json``) is given, or
    ``config`` itself is such an index, its ``metadata.total_size`` is returned: the checkpoint
    bytes, exact for the stored format. Otherwise from :func:`parameter_count` (attention, MLP / experts,
    Mamba-2 and Gated-DeltaNet mixers, vision / audio towers) with the quantised linear layers at
    :func:`~.quantization.bytes_per_weight` of the scheme (fp8, AWQ, GPTQ, bitsandbytes, modelopt FP8 / NVFP4,
    compressed-tensors, mxfp4; scales included); embeddings, LM head, norms and towers stay in the model dtype.
    This is an estimate of vLLM's "Model loading took X GiB" (which also counts buffers; within 2 % on the
    capacity fixtures' rows that print it: tests/test_weights_loading.py). A field the estimate needs and the
    config lacks raises InputError naming it; nothing is guessed.

    Args:
        config: HF config dict (``quantization_config.quant_method`` is used when
            ``quantization`` is None), or a safetensors index dict.
        quantization: vLLM ``--quantization`` value (``fp8``, ``awq``, ``gptq`` ...).
        safetensors_index: optional parsed ``model.safetensors.index.json``.

    Returns:
        Bytes (int).

    Raises:
        InputError: a needed config field is missing or ``metadata.total_size`` is malformed; unknown
            quantization method.
    """
    for idx in (safetensors_index, config):
        if isinstance(idx, Mapping) and isinstance(idx.get("metadata"), Mapping) and "total_size" in idx["metadata"]:
            size = idx["metadata"]["total_size"]
            if isinstance(size, bool) or not isinstance(size, (int, float, str)) or not str(size).isdigit():
                raise InputError(f"safetensors index: metadata.total_size = {size!r}: expected an integer")
            return int(size)
    cfg = _text_config(config)
    qc = cfg.get("quantization_config")
    counts = parameter_count(config)
    dbytes = model_shape(config).dtype_bytes
    per_param, _ = bytes_per_weight(quantization, qc if isinstance(qc, Mapping) else None, dbytes)
    linear = counts["attention"] + counts["mlp"] + counts["experts"] + counts["state_layers"]
    kept = counts["embeddings"] + counts["lm_head"] + counts["norms"] + counts["towers"]
    return int(round(linear * per_param + kept * dbytes))


def weights_bytes_per_gpu(total_weights_bytes: int, tensor_parallel_size: int = 1, pipeline_parallel_size: int = 1) -> int:
    """One worker's share of the weights, bytes: ``total / (tp × pp)`` (estimate).

    vLLM shards linear layers and the vocabulary by TP and layers by PP; norms and some small
    tensors are replicated, so the real share is slightly larger (estimate; compare with the
    "Model loading took X GiB" line, reference §2.2 W2/W3).

    Args:
        total_weights_bytes: whole-model weights, bytes (:func:`weights_bytes`).
        tensor_parallel_size: TP size.
        pipeline_parallel_size: PP size.

    Returns:
        Bytes per worker.

    Raises:
        ValueError: non-positive parallel sizes.
    """
    _check_positive(tensor_parallel_size=tensor_parallel_size, pipeline_parallel_size=pipeline_parallel_size)
    return math.ceil(total_weights_bytes / (tensor_parallel_size * pipeline_parallel_size))


NON_TORCH_BYTES_ESTIMATE = int(0.5 * GIB)
"""Assumed non-torch memory per worker (CUDA context, NCCL), bytes; an estimate."""


def non_kv_bytes_estimate(
    shape: ModelShape,
    weights_per_gpu_bytes: int,
    *,
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
    tensor_parallel_size: int = 1,
    intermediate_size: int | None = None,
    cuda_graph_bytes: int = 0,
) -> int:
    """Rough non-KV memory of one worker, bytes: weights + activation peak + non-torch (+ graphs).

    Activation peak ≈ ``max_num_batched_tokens × (4 × hidden + 2 × intermediate / tp) × 2``
    bytes plus sampler logits ``256 × vocab × 4`` bytes; non-torch 0.5 GiB. An estimate only:
    the startup log's "Available KV cache memory" is authoritative (reference §2.2 M3/M6,
    §3.2 for the budget formula).

    Args:
        shape: from :func:`model_shape`.
        weights_per_gpu_bytes: weights of one worker, bytes.
        max_num_batched_tokens: scheduler token budget (profile run size).
        tensor_parallel_size: TP size.
        intermediate_size: MLP width (default 4 × hidden).
        cuda_graph_bytes: CUDA-graph reservation, bytes (0.21+ budgets it).

    Returns:
        Bytes.
    """
    hidden = shape.hidden_size or 4096
    inter = intermediate_size or 4 * hidden
    act = max_num_batched_tokens * (4 * hidden + 2 * inter // max(1, tensor_parallel_size)) * 2
    act += 256 * (shape.vocab_size or 128_000) * 4
    return weights_per_gpu_bytes + act + NON_TORCH_BYTES_ESTIMATE + cuda_graph_bytes
