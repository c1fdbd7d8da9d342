"""What vLLM prints: the "GPU KV cache size: N tokens" and "Maximum concurrency" lines, per version."""

from __future__ import annotations

import math

from .groups import KVCacheGroup, KVCacheLayout
from .sliding_window import sliding_window_blocks_per_request
from .units import DEFAULT_MAX_NUM_BATCHED_TOKENS, check_positive
from .versions import DCP_TOKEN_LINE_MULTIPLIED, TOKEN_LINE_GROUP_AWARE_FROM, as_version  # noqa: F401

def group_blocks_per_request(
    group: KVCacheGroup,
    block_size: int,
    max_model_len: int,
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
    mamba_cache_mode: str = "none",
    *,
    context_parallel_size: int = 1,
    num_speculative_blocks: int = 0,
) -> int:
    """Blocks one max-length request needs in one group (worst case).

    Full attention ``ceil(max_model_len / B)``; sliding window
    ``ceil(min(W − 1 + max_num_batched_tokens, max_model_len) / B) + 1``; state groups 1 page
    (``"none"``), 2 (``"align"``) or ``ceil(max_model_len / B)`` (``"all"``).
    Source: ``max_memory_usage_bytes`` of the specs in ``v1/kv_cache_interface.py``
    (@ v0.11.0; the ``align`` / ``all`` modes @ v0.24.0). Decode context parallel: a full-attention group keeps
    ``cdiv(max_model_len, dcp × pcp)`` tokens per rank (``FullAttentionSpec`` @ v0.11.0, v0.24.0). Speculative
    decoding adds ``num_speculative_blocks`` pages to a state group (``MambaSpec`` @ v0.24.0, callers pass 0
    before :data:`~.versions.MAMBA_SPEC_BLOCKS_FROM`).

    Args:
        group: one KV-cache group.
        block_size: effective block size, tokens.
        max_model_len: tokens of the request.
        max_num_batched_tokens: scheduler token budget (sliding windows).
        mamba_cache_mode: ``none``/``align``/``all``.

    Returns:
        Blocks.

    Raises:
        ValueError: unknown ``mamba_cache_mode`` or non-positive lengths.
    """
    check_positive(block_size=block_size, max_model_len=max_model_len)
    if group.kind == "full_attention":
        return math.ceil(math.ceil(max_model_len / max(1, context_parallel_size)) / block_size)
    if group.kind == "sliding_window":
        return sliding_window_blocks_per_request(group.sliding_window, block_size, max_model_len, max_num_batched_tokens)
    if mamba_cache_mode == "none":
        return 1 + num_speculative_blocks
    if mamba_cache_mode == "align":
        return 2 + num_speculative_blocks
    if mamba_cache_mode == "all":
        return math.ceil(max_model_len / block_size) + num_speculative_blocks
    raise ValueError(f"mamba_cache_mode {mamba_cache_mode!r}: expected none, align or all")


def blocks_per_request(
    layout: KVCacheLayout,
    max_model_len: int,
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
    mamba_cache_mode: str = "none",
    *,
    context_parallel_size: int = 1,
    num_speculative_blocks: int = 0,
) -> int:
    """Pool blocks one max-length request needs: the sum over groups (padding included).

    Source: ``get_max_concurrency_for_kv_cache_config`` in ``v1/core/kv_cache_utils.py``
    (0.9–0.20): per-request worst-case bytes ÷ (page × group_size), which is this sum.

    Args:
        layout: from :func:`kv_cache_layout`.
        max_model_len: tokens per request.
        max_num_batched_tokens: scheduler token budget (sliding windows).
        mamba_cache_mode: ``none``/``align``/``all``.

    Returns:
        Blocks per request.

    Raises:
        ValueError: as :func:`group_blocks_per_request`.
    """
    return sum(
        group_blocks_per_request(g, layout.block_size, max_model_len, max_num_batched_tokens, mamba_cache_mode,
                                 context_parallel_size=context_parallel_size,
                                 num_speculative_blocks=num_speculative_blocks)
        for g in layout.groups
    )


def max_concurrency(
    num_gpu_blocks: int,
    layout: KVCacheLayout,
    max_model_len: int,
    *,
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
    mamba_cache_mode: str = "none",
    vllm_version: str | tuple[int, int, int] | None = None,
    context_parallel_size: int = 1,
    num_speculative_blocks: int = 0,
) -> float:
    """How many ``max_model_len`` requests fit at once: the "Maximum concurrency" number (K5/K6).

    V0 and V1 0.7: ``num_blocks × B / max_model_len``. V1 0.8+: ``num_blocks /
    blocks_per_request`` (group aware: sliding windows and Mamba state cost less than full
    attention).

    Args:
        num_gpu_blocks: pool blocks of one worker.
        layout: from :func:`kv_cache_layout`.
        max_model_len: tokens per request.
        max_num_batched_tokens: scheduler budget (sliding-window worst case).
        mamba_cache_mode: ``none``/``align``/``all``.
        vllm_version: selects the formula; None = V1.

    Returns:
        Concurrency (float, vLLM prints it with 2 decimals).

    Raises:
        ValueError: non-positive ``max_model_len``.
    """
    check_positive(max_model_len=max_model_len)
    v = as_version(vllm_version)
    if v is not None and v < (0, 8, 0):
        return num_gpu_blocks * layout.block_size / max_model_len
    return num_gpu_blocks / blocks_per_request(layout, max_model_len, max_num_batched_tokens, mamba_cache_mode,
                                               context_parallel_size=context_parallel_size,
                                               num_speculative_blocks=num_speculative_blocks)


def kv_capacity_tokens(
    num_gpu_blocks: int,
    layout: KVCacheLayout,
    *,
    vllm_version: str | tuple[int, int, int] | None = None,
    max_model_len: int | None = None,
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
    mamba_cache_mode: str = "none",
    context_parallel_size: int = 1,
    num_speculative_blocks: int = 0,
) -> int:
    """The token count vLLM prints as "GPU KV cache size: N tokens" (K4/K6).

    * V0 (< 0.8): ``num_gpu_blocks × block_size`` (``# GPU blocks`` × B).
    * V1 0.8 – 0.20: ``num_blocks // num_groups × block_size`` (all layers charged as full
      attention, padding layers included; one group → ``num_blocks × B``).
    * V1 ≥ 0.21 (0.24 verified): ``int(max_concurrency × max_model_len)``, which folds in the
      sliding-window and Mamba savings (:data:`TOKEN_LINE_GROUP_AWARE_FROM`).
    * Unknown version: the 0.8–0.20 formula.
    * Decode (and prefill) context parallel, ``context_parallel_size`` = dcp × pcp: 0.10.2 – 0.20 multiply the
      line by it ("Multiplying the GPU KV cache size by the dcp_world_size", ``v1/core/kv_cache_utils.py``
      @ v0.11.0, v0.13.0); from 0.21 it enters through the per-request blocks (:data:`DCP_TOKEN_LINE_MULTIPLIED`).

    For hybrid models none of these is the number of token slots in the pool; see
    :func:`capacity_notes`.

    Args:
        num_gpu_blocks: pool blocks of one worker.
        layout: from :func:`kv_cache_layout`.
        vllm_version: version string or tuple.
        max_model_len: needed for ≥ 0.21; without it the older formula is used.
        max_num_batched_tokens: scheduler budget (sliding-window worst case).
        mamba_cache_mode: ``none``/``align``/``all``.

    Returns:
        Tokens.
    """
    v = as_version(vllm_version)
    if v is not None and v < (0, 8, 0):
        return num_gpu_blocks * layout.block_size
    if v is not None and v >= TOKEN_LINE_GROUP_AWARE_FROM and max_model_len:
        conc = max_concurrency(
            num_gpu_blocks, layout, max_model_len,
            max_num_batched_tokens=max_num_batched_tokens, mamba_cache_mode=mamba_cache_mode,
            context_parallel_size=context_parallel_size, num_speculative_blocks=num_speculative_blocks,
        )
        return int(conc * max_model_len)
    return num_gpu_blocks // layout.num_groups * layout.block_size * max(1, context_parallel_size)


def pool_token_slots(num_gpu_blocks: int, layout: KVCacheLayout) -> int:
    """Token slots of one layer tensor of the pool: ``num_blocks × block_size``.

    Every layer of a group writes one slot per cached token; groups share the blocks, so this
    is an upper bound on the tokens any single group can hold (``KVCacheTensor`` sizes in
    ``v1/core/kv_cache_utils.py`` @ v0.11.0). For one-group models it equals the printed line.

    Args:
        num_gpu_blocks: pool blocks of one worker.
        layout: from :func:`kv_cache_layout`.

    Returns:
        Tokens.
    """
    return num_gpu_blocks * layout.block_size


def capacity_notes(
    num_gpu_blocks: int,
    layout: KVCacheLayout,
    printed_tokens: int,
    vllm_version: str | tuple[int, int, int] | None = None,
) -> list[str]:
    """Human notes on what the printed token line means for this layout and version.

    Source: the K4/K6 rows of reference §2.3 and :func:`kv_capacity_tokens`.

    Args:
        num_gpu_blocks: pool blocks of one worker.
        layout: from :func:`kv_cache_layout`.
        printed_tokens: the "GPU KV cache size" tokens.
        vllm_version: version string or tuple; None = unknown.

    Returns:
        Notes (one line each; empty for a one-group model of a known version).
    """
    notes: list[str] = []
    v = as_version(vllm_version)
    if layout.num_groups > 1:
        notes.append(
            f"'GPU KV cache size: {printed_tokens:,} tokens' is not the physical pool: "
            f"{num_gpu_blocks} blocks x {layout.block_size} tokens are shared by {layout.num_groups} "
            f"KV-cache groups of {layout.group_size} layers "
            f"({pool_token_slots(num_gpu_blocks, layout):,} token slots per layer tensor)"
        )
        if v is None or v < TOKEN_LINE_GROUP_AWARE_FROM:
            notes.append(
                "this vLLM version prints num_blocks // groups x block_size, i.e. charges every group "
                "(sliding, Mamba and padding layers too) as full attention; use Maximum concurrency instead"
            )
        else:
            notes.append("this vLLM version prints max_concurrency x max_model_len (group aware)")
    if v is None:
        notes.append("vLLM version unknown: token line computed as in 0.8-0.20")
    return notes
