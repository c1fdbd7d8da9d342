"""Multi-head latent attention (DeepSeek-V2/V3, Kimi): bytes per token of one MLA layer.

Source: ``v1/kv_cache_interface.py`` ``MLAAttentionSpec`` @ v0.11.0.
"""

from __future__ import annotations

FP8_DS_MLA_BYTES_PER_TOKEN = 656
"""Bytes per token per layer of ``kv_cache_dtype=fp8_ds_mla`` (sparse FlashMLA),
``v1/kv_cache_interface.py @ v0.11.0``."""
