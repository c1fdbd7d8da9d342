"""Full attention (MHA / GQA / MQA): bytes per token of one layer and of one worker.

MLA layers are sized in :mod:`.mla`; sliding-window layers cost the same per token as full ones
(their saving is in the blocks a request needs, :mod:`.sliding_window`).
"""

from __future__ import annotations

from kvdiag.errors import InputError

from .mla import caches_mla_latent, mla_bytes_per_token_per_layer, pre_mla_head_size
from .parallel import pipeline_stage_layers
from .shape import ModelShape
from .units import ATTENTION_LAYERS, check_positive, kv_cache_dtype_bytes

def kv_heads_per_rank(num_kv_heads: int, tensor_parallel_size: int = 1) -> int:
    """KV heads held by one tensor-parallel rank: ``max(1, kv_heads // tp)``.

    When ``tp > num_kv_heads`` heads are replicated, so a rank never holds less than one
    (``config/model.py get_num_kv_heads`` @ v0.11.0; reference §3.1).

    Args:
        num_kv_heads: KV heads of the whole model.
        tensor_parallel_size: TP size.

    Returns:
        Heads per rank.

    Raises:
        ValueError: ``tensor_parallel_size`` not positive.
    """
    check_positive(tensor_parallel_size=tensor_parallel_size)
    return max(1, num_kv_heads // tensor_parallel_size)


def attention_bytes_per_token_per_layer(
    shape: ModelShape, kv_cache_dtype: str = "auto", tensor_parallel_size: int = 1,
    vllm_version: tuple[int, int, int] | None = None,
) -> int:
    """Bytes one attention layer stores per token on one TP rank.

    MHA/GQA/MQA: ``2 × H_kv_per_rank × head_dim × s`` (K and V). MLA: ``(kv_lora_rank +
    qk_rope_head_dim) × s``, one latent, not split by TP; ``fp8_ds_mla`` is a fixed 656 bytes.
    Source: ``v1/kv_cache_interface.py`` ``AttentionSpec`` / ``MLAAttentionSpec`` @ v0.11.0. DeepSeek-V2/V3 on
    vLLM before 0.7.1 (``vllm_version``): ``2 × max(1, kv_heads // tp) × head × s`` with head 256 (< 0.7.0) or
    ``qk_nope + qk_rope`` (0.7.0), ``config.py get_head_size`` @ v0.6.4 / v0.7.0 (:mod:`.mla`).

    Args:
        shape: from :func:`model_shape`.
        kv_cache_dtype: vLLM ``--kv-cache-dtype``.
        tensor_parallel_size: TP size.

    Returns:
        Bytes per token per layer (0 for attention-free models).

    Raises:
        ValueError: unknown ``kv_cache_dtype`` or non-positive ``tensor_parallel_size``.
    """
    check_positive(tensor_parallel_size=tensor_parallel_size)
    if shape.attention_kind == "none":
        return 0
    if shape.attention_kind == "mla":
        if caches_mla_latent(shape.model_type, vllm_version):
            return mla_bytes_per_token_per_layer(shape.head_dim, kv_cache_dtype, shape.dtype_bytes)
        # Before MLA support (< 0.7.1): full per-head K and V (mla.py, versions.MLA_FROM).
        if shape.qk_nope_head_dim is None or shape.mla_num_kv_heads is None:
            raise InputError("config: missing field qk_nope_head_dim (pre-0.7.1 vLLM caches per-head K/V of "
                             "qk_nope_head_dim + qk_rope_head_dim)")
        head = pre_mla_head_size(shape.qk_nope_head_dim, shape.qk_rope_head_dim or 0, vllm_version)
        s = kv_cache_dtype_bytes(kv_cache_dtype, shape.dtype_bytes)
        return 2 * kv_heads_per_rank(shape.mla_num_kv_heads, tensor_parallel_size) * head * s
    s = kv_cache_dtype_bytes(kv_cache_dtype, shape.dtype_bytes)
    return 2 * kv_heads_per_rank(shape.num_kv_heads, tensor_parallel_size) * shape.head_dim * s


def kv_bytes_per_token(
    shape: ModelShape,
    kv_cache_dtype: str = "auto",
    tensor_parallel_size: int = 1,
    pipeline_parallel_size: int = 1,
    vllm_version: tuple[int, int, int] | None = None,
) -> int:
    """Plain per-token KV bytes of one worker (the "seed formula").

    ``attention_layers × bytes_per_token_per_layer`` where MHA/GQA/MQA use
    ``2 × max(1, kv_heads // tp) × head_dim × dtype_bytes`` and MLA uses
    ``(kv_lora_rank + qk_rope_head_dim) × dtype_bytes`` (no ×2, not split by TP). With PP the
    layers of the largest stage count. Sliding-window layers are charged like full attention
    here; Mamba / linear-attention layers are left out (their state is per request, not per
    token) — see :func:`kv_cache_layout` for what vLLM actually allocates.
    Example: Llama-3-8B bf16 → ``2 × 32 × 8 × 128 × 2 = 131072`` bytes (reference §3.1).

    Args:
        shape: from :func:`model_shape`.
        kv_cache_dtype: vLLM ``--kv-cache-dtype`` (``auto`` = model dtype).
        tensor_parallel_size: TP size.
        pipeline_parallel_size: PP size.

    Returns:
        Bytes per token per worker.

    Raises:
        ValueError: unknown ``kv_cache_dtype`` or non-positive parallel sizes.
    """
    per_layer = attention_bytes_per_token_per_layer(shape, kv_cache_dtype, tensor_parallel_size, vllm_version)
    return per_layer * max(
        sum(1 for i in stage if shape.layer_kinds[i] in ATTENTION_LAYERS)
        for stage in pipeline_stage_layers(shape.num_layers, pipeline_parallel_size)
    )
