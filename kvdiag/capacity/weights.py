"""Weights: parameter count and bytes of a checkpoint from its config, one worker's share, non-KV memory."""

from __future__ import annotations

import math
from typing import Any, Mapping

from kvdiag.errors import InputError

from .config_fields import _int_field, _text_config
from .shape import ModelShape, model_shape
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
    total = embeddings + lm_head + attention + mlp + experts + norms
    return {
        "embeddings": embeddings,
        "lm_head": lm_head,
        "attention": attention,
        "mlp": mlp,
        "experts": experts,
        "norms": norms,
        "total": total,
        "uncounted_layers": state_layers,
    }


def weights_bytes(
    config: Mapping[str, Any],
    quantization: str | None = None,
    *,
    safetensors_index: Mapping[str, Any] | None = None,
) -> int:
    """Estimated bytes of the whole model's weights (all GPUs together).

    If ``safetensors_index`` (a parsed ``model.safetensors.index.json``) is given, or
    ``config`` itself is such an index, its ``metadata.total_size`` is returned: the checkpoint
    bytes, exact for the stored format. Otherwise from :func:`parameter_count`: bf16/fp16 2
    bytes per parameter, fp8 1, 4-bit AWQ/GPTQ/NVFP4 0.5 + group scales (≈0.52); embeddings and
    LM head stay in the model dtype. This is an estimate (vLLM's "Model loading took X GiB"
    also counts buffers; Llama-3.1-8B bf16: 14.96 GiB here, 14.99 GiB logged).

    Args:
        config: HF config dict (``quantization_config.quant_method`` is used when
            ``quantization`` is None), or a safetensors index dict.
        quantization: vLLM ``--quantization`` value (``fp8``, ``awq``, ``gptq`` ...).
        safetensors_index: optional parsed ``model.safetensors.index.json``.

    Returns:
        Bytes (int).

    Raises:
        InputError: a needed config field is missing or ``metadata.total_size`` is malformed.
    """
    for idx in (safetensors_index, config):
        if isinstance(idx, Mapping) and isinstance(idx.get("metadata"), Mapping) and "total_size" in idx["metadata"]:
            size = idx["metadata"]["total_size"]
            if isinstance(size, bool) or not isinstance(size, (int, float, str)) or not str(size).isdigit():
                raise InputError(f"safetensors index: metadata.total_size = {size!r}: expected an integer")
            return int(size)
    cfg = _text_config(config)
    if quantization is None:
        qc = cfg.get("quantization_config")
        if isinstance(qc, Mapping):
            quantization = qc.get("quant_method")
            if quantization in ("awq", "gptq") and qc.get("bits", 4) == 8:
                quantization = "int8"
    counts = parameter_count(config)
    dbytes = model_shape(config).dtype_bytes
    q = str(quantization).lower() if quantization else None
    per_param = _QUANT_BYTES.get(q, None) if q else None
    if q and q not in _QUANT_BYTES:
        raise ValueError(f"quantization {quantization!r}: expected one of {', '.join(k for k in _QUANT_BYTES if k)}")
    if per_param is None:
        per_param = float(dbytes)
    elif per_param < 1:
        per_param += _GROUP_SCALE_OVERHEAD
    linear = counts["attention"] + counts["mlp"] + counts["experts"]
    kept = counts["embeddings"] + counts["lm_head"] + counts["norms"]
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
