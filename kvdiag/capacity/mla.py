"""Multi-head latent attention (DeepSeek-V2/V3, Kimi): bytes per token of one MLA layer.

Source: ``v1/kv_cache_interface.py`` ``MLAAttentionSpec`` @ v0.11.0; before 0.7.1 vLLM had no MLA and cached
DeepSeek-V2/V3 as per-head K/V (``config.py`` @ v0.6.4, v0.7.0; :data:`.versions.MLA_FROM`).
"""

from __future__ import annotations

from .units import kv_cache_dtype_bytes
from .versions import DEEPSEEK_HEAD_192_FROM, MLA_FROM

FP8_DS_MLA_BYTES_PER_TOKEN = 656
"""Bytes per token per layer of ``kv_cache_dtype=fp8_ds_mla`` (sparse FlashMLA),
``v1/kv_cache_interface.py @ v0.11.0``."""

PRE_MLA_MODEL_TYPES = ("deepseek_v2", "deepseek_v3")
"""``model_type`` values vLLM served with per-head K/V before :data:`~.versions.MLA_FROM`."""


def caches_mla_latent(model_type: str | None, vllm_version: tuple[int, int, int] | None) -> bool:
    """Whether an MLA model's layers cache one latent (True) or full per-head K/V (False, pre-0.7.1 DeepSeek).

    Unknown version: True (every release since 0.7.1). Source: ``config.py use_mla @ v0.7.1``; ``get_head_size``
    @ v0.6.4 / v0.7.0 (per-head K/V).
    """
    if vllm_version is None or vllm_version >= MLA_FROM:
        return True
    return (model_type or "") not in PRE_MLA_MODEL_TYPES


def pre_mla_head_size(qk_nope_head_dim: int, qk_rope_head_dim: int, vllm_version: tuple[int, int, int]) -> int:
    """Head size pre-MLA vLLM cached for DeepSeek K and V: 256 before 0.7.0, ``nope + rope`` (192) in 0.7.0.

    Source: ``config.py get_head_size`` @ v0.6.4 ("we need to pad head_size 192 to 256") and @ v0.7.0.
    """
    if vllm_version >= DEEPSEEK_HEAD_192_FROM:
        return qk_nope_head_dim + qk_rope_head_dim
    return 256


def mla_bytes_per_token_per_layer(latent_dim: int, kv_cache_dtype: str, model_dtype_bytes: int) -> int:
    """Bytes one MLA layer caches per token: ``(kv_lora_rank + qk_rope_head_dim) × s``, one latent, not split by
    TP (``MLAAttentionSpec``, ``v1/kv_cache_interface.py @ v0.11.0``); ``fp8_ds_mla`` a fixed 656 bytes."""
    if str(kv_cache_dtype).lower() == "fp8_ds_mla":
        return FP8_DS_MLA_BYTES_PER_TOKEN
    return latent_dim * kv_cache_dtype_bytes(kv_cache_dtype, model_dtype_bytes)
