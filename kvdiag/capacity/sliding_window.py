"""Sliding-window attention: the blocks one request needs in a sliding-window group.

A sliding layer stores as many bytes per token as a full-attention layer (:mod:`.attention`); its saving is
that a request never holds more than the window (plus one chunk of prefill) in it.
"""

from __future__ import annotations

import math


def sliding_window_blocks_per_request(
    sliding_window: int | None, block_size: int, max_model_len: int, max_num_batched_tokens: int
) -> int:
    """Worst-case blocks of one max-length request in one sliding-window group.

    ``ceil(min(W − 1 + max_num_batched_tokens, max_model_len) / B) + 1``: the window, one scheduler
    step of new tokens, and one block for the unaligned start. Source: ``SlidingWindowSpec.max_memory_usage_bytes``
    in ``v1/kv_cache_interface.py`` (0.9 – 0.24, unchanged in that range).

    Args:
        sliding_window: W, tokens (None: no window, the full length counts).
        block_size: tokens per block.
        max_model_len: tokens of the request.
        max_num_batched_tokens: scheduler token budget.

    Returns:
        Blocks.
    """
    w = sliding_window or max_model_len
    return math.ceil(min(w - 1 + max_num_batched_tokens, max_model_len) / block_size) + 1
