"""Inverse questions behind the remedies: utilization for a KV target, lengths and sequences that fit, gains."""

from __future__ import annotations

from .attention import attention_bytes_per_token_per_layer
from .groups import kv_cache_layout, num_gpu_blocks_from_kv_memory
from .printing import blocks_per_request, group_blocks_per_request
from .shape import ModelShape
from .units import DEFAULT_MAX_NUM_BATCHED_TOKENS, check_positive

def gpu_memory_utilization_for(target_kv_bytes: float, total_gpu_bytes: float, non_kv_bytes: float) -> float:
    """``--gpu-memory-utilization`` that leaves ``target_kv_bytes`` for the KV cache.

    vLLM V1 (0.9–0.20): ``available_kv = total × util − non_kv`` (reference §3.2), so
    ``util = (target_kv + non_kv) / total``. From 0.21 ``non_kv`` should include the CUDA-graph
    estimate. A result above 1.0 means no utilization can reach the target.

    Args:
        target_kv_bytes: KV memory wanted per worker, bytes.
        total_gpu_bytes: total memory of one GPU, bytes.
        non_kv_bytes: weights + activation peak + non-torch (+ CUDA graphs), bytes.

    Returns:
        The utilization fraction (not rounded).

    Raises:
        ValueError: ``total_gpu_bytes`` not positive or a negative input.
    """
    check_positive(total_gpu_bytes=total_gpu_bytes)
    if target_kv_bytes < 0 or non_kv_bytes < 0:
        raise ValueError("target_kv_bytes and non_kv_bytes must be >= 0")
    return (target_kv_bytes + non_kv_bytes) / total_gpu_bytes


def kv_memory_needed(
    shape: ModelShape,
    max_model_len: int,
    num_seqs: int = 1,
    *,
    kv_cache_dtype: str = "auto",
    tensor_parallel_size: int = 1,
    pipeline_parallel_size: int = 1,
    block_size: int | None = None,
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
    mamba_cache_mode: str = "none",
) -> int:
    """KV bytes one worker needs for ``num_seqs`` requests of ``max_model_len`` tokens.

    Per request: the sum over real layers of each spec's worst case (what vLLM compares with
    the available memory before "To serve at least one request ... KV cache is needed", E2c/d;
    ``check_enough_kv_cache_memory`` in ``v1/core/kv_cache_utils.py`` @ v0.11.0), times
    ``num_seqs``. Padding layers are not counted (vLLM sums real layers here).

    Args:
        shape: from :func:`model_shape`.
        max_model_len: tokens per request.
        num_seqs: concurrent requests.
        kv_cache_dtype, tensor_parallel_size, pipeline_parallel_size, block_size: as
            :func:`kv_cache_layout`.
        max_num_batched_tokens, mamba_cache_mode: as :func:`group_blocks_per_request`.

    Returns:
        Bytes.

    Raises:
        InputError: as :func:`kv_cache_layout`.
        ValueError: bad dtype / sizes.
    """
    layout = kv_cache_layout(shape, kv_cache_dtype, tensor_parallel_size, pipeline_parallel_size, block_size)
    per_req = sum(
        (g.layers)
        * group_blocks_per_request(g, layout.block_size, max_model_len, max_num_batched_tokens, mamba_cache_mode)
        * layout.page_bytes
        for g in layout.groups
    )
    return per_req * num_seqs


def max_model_len_that_fits(
    shape: ModelShape,
    *,
    kv_memory_bytes: float | None = None,
    kv_capacity_tokens: int | None = None,
    num_seqs: int = 1,
    kv_cache_dtype: str = "auto",
    tensor_parallel_size: int = 1,
    pipeline_parallel_size: int = 1,
    block_size: int | None = None,
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
    mamba_cache_mode: str = "none",
    upper_bound: int = 1 << 24,
) -> int:
    """Largest ``max_model_len`` (tokens) for which ``num_seqs`` requests fit.

    From memory: vLLM's "estimated maximum model length" — the largest length whose
    per-request worst case (:func:`kv_memory_needed`) fits, found by binary search
    (``estimate_max_model_len`` in ``v1/core/kv_cache_utils.py`` @ 0.9+; R19 reproduces it).
    From a full-attention token capacity (a printed "GPU KV cache size"): whole blocks only,
    ``(tokens // B // num_seqs) × B``.

    Args:
        shape: from :func:`model_shape`.
        kv_memory_bytes: KV budget of one worker, bytes (give this or the next).
        kv_capacity_tokens: token capacity of a single-group pool.
        num_seqs: concurrent requests that must fit.
        kv_cache_dtype, tensor_parallel_size, pipeline_parallel_size, block_size,
        max_num_batched_tokens, mamba_cache_mode: as :func:`kv_cache_layout` /
            :func:`group_blocks_per_request`.
        upper_bound: search limit, tokens.

    Returns:
        Tokens (0 when not even one token fits).

    Raises:
        ValueError: neither or both of ``kv_memory_bytes`` / ``kv_capacity_tokens`` given, or
            ``num_seqs`` < 1.
    """
    if (kv_memory_bytes is None) == (kv_capacity_tokens is None):
        raise ValueError("give exactly one of kv_memory_bytes or kv_capacity_tokens")
    check_positive(num_seqs=num_seqs)
    layout = kv_cache_layout(shape, kv_cache_dtype, tensor_parallel_size, pipeline_parallel_size, block_size)
    if kv_capacity_tokens is not None:
        return kv_capacity_tokens // layout.block_size // num_seqs * layout.block_size

    def fits(n: int) -> bool:
        return kv_memory_needed(
            shape, n, num_seqs, kv_cache_dtype=kv_cache_dtype, tensor_parallel_size=tensor_parallel_size,
            pipeline_parallel_size=pipeline_parallel_size, block_size=block_size,
            max_num_batched_tokens=max_num_batched_tokens, mamba_cache_mode=mamba_cache_mode,
        ) <= kv_memory_bytes

    lo, hi = 0, upper_bound
    if fits(hi):
        return hi
    while lo < hi - 1:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo


def max_num_seqs_for(
    shape: ModelShape,
    kv_memory_bytes: float,
    max_model_len: int,
    *,
    kv_cache_dtype: str = "auto",
    tensor_parallel_size: int = 1,
    pipeline_parallel_size: int = 1,
    block_size: int | None = None,
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
    mamba_cache_mode: str = "none",
) -> int:
    """Largest ``--max-num-seqs`` whose requests can all reach ``max_model_len`` without preemption.

    ``floor(num_blocks / blocks_per_request)`` (the integer part of vLLM's "Maximum
    concurrency", V1). Requests shorter than ``max_model_len`` need fewer blocks, so this is
    the no-preemption worst case, not a throughput optimum. Source:
    ``get_max_concurrency_for_kv_cache_config`` in ``v1/core/kv_cache_utils.py`` @ v0.11.0.

    Args:
        shape: from :func:`model_shape`.
        kv_memory_bytes: KV budget of one worker, bytes.
        max_model_len: tokens per request.
        kv_cache_dtype, tensor_parallel_size, pipeline_parallel_size, block_size: as
            :func:`kv_cache_layout`.
        max_num_batched_tokens, mamba_cache_mode: as :func:`group_blocks_per_request`.

    Returns:
        Sequences (0 when not even one fits).

    Raises:
        InputError: as :func:`kv_cache_layout`.
        ValueError: bad dtype / sizes.
    """
    layout = kv_cache_layout(shape, kv_cache_dtype, tensor_parallel_size, pipeline_parallel_size, block_size)
    blocks = num_gpu_blocks_from_kv_memory(kv_memory_bytes, layout.block_bytes)
    return blocks // blocks_per_request(layout, max_model_len, max_num_batched_tokens, mamba_cache_mode)


def fp8_kv_gain(shape: ModelShape, current_kv_cache_dtype: str = "auto") -> float:
    """Factor by which token capacity grows with ``--kv-cache-dtype fp8``.

    Ratio of per-token attention bytes now vs. fp8 (2.0 from bf16/fp16, 1.0 when already
    fp8). Hybrid models gain less in blocks because the Mamba state (model dtype) does not
    shrink and forces a larger attention block. Source: reference §3.1 ("fp8 halves s").

    Args:
        shape: from :func:`model_shape`.
        current_kv_cache_dtype: the ``--kv-cache-dtype`` in use.

    Returns:
        Capacity ratio fp8 / current (tokens).

    Raises:
        ValueError: unknown ``current_kv_cache_dtype``.
    """
    now = attention_bytes_per_token_per_layer(shape, current_kv_cache_dtype)
    fp8 = attention_bytes_per_token_per_layer(shape, "fp8")
    return now / fp8 if fp8 else 1.0


def tensor_parallel_kv_gain(
    shape: ModelShape,
    current_tp: int,
    new_tp: int,
    *,
    kv_memory_bytes: float | None = None,
    weights_total_bytes: float | None = None,
) -> float:
    """Factor by which one worker's token capacity grows when moving from ``current_tp`` to ``new_tp``.

    Two effects: fewer KV heads per rank (``max(1, heads // tp)``; MLA latents do not shrink)
    and, when ``kv_memory_bytes`` and ``weights_total_bytes`` are given, the weight memory freed
    per GPU (``weights/current_tp − weights/new_tp``) that goes to the KV cache. Source:
    reference §3.1 (``H_kv = max(1, kv_heads // TP)``); activation changes are ignored.

    Args:
        shape: from :func:`model_shape`.
        current_tp: TP size now.
        new_tp: proposed TP size.
        kv_memory_bytes: KV budget per worker now, bytes (optional).
        weights_total_bytes: whole-model weights, bytes (optional, with the previous).

    Returns:
        Capacity ratio new / current (per worker, tokens).

    Raises:
        ValueError: non-positive TP sizes.
    """
    before = attention_bytes_per_token_per_layer(shape, "auto", current_tp)
    after = attention_bytes_per_token_per_layer(shape, "auto", new_tp)
    gain = before / after if after else 1.0
    if kv_memory_bytes and weights_total_bytes is not None:
        freed = weights_total_bytes / current_tp - weights_total_bytes / new_tp
        gain *= (kv_memory_bytes + freed) / kv_memory_bytes
    return gain


def partial_block_waste_bytes(block_size: int, num_seqs: int, bytes_per_token: int) -> float:
    """Expected KV bytes lost in the partly filled last blocks of ``num_seqs`` requests.

    Each request wastes 0 … B−1 token slots in its last block (≈ (B−1)/2 on average) in every
    layer (reference §3.2, class-2 waste); ``bytes_per_token`` covers the layers.

    Args:
        block_size: tokens per block.
        num_seqs: running requests.
        bytes_per_token: KV bytes per token (e.g. :func:`kv_bytes_per_token`).

    Returns:
        Expected wasted bytes (float).

    Raises:
        ValueError: ``block_size`` not positive.
    """
    check_positive(block_size=block_size)
    return num_seqs * (block_size - 1) / 2 * bytes_per_token


def block_size_waste_saved(from_block_size: int, to_block_size: int, num_seqs: int, bytes_per_token: int) -> float:
    """Bytes of partial-block waste saved by going from one block size to a smaller one.

    ``partial_block_waste_bytes(from) − partial_block_waste_bytes(to)``; negative when the new
    block is larger. Hybrid models cannot go below the state-aligned block size (K10).
    Source: reference §3.2 (partial-block waste).

    Args:
        from_block_size: block size now, tokens.
        to_block_size: proposed block size, tokens.
        num_seqs: running requests.
        bytes_per_token: KV bytes per token.

    Returns:
        Bytes saved (float, expected value).

    Raises:
        ValueError: a block size not positive.
    """
    return partial_block_waste_bytes(from_block_size, num_seqs, bytes_per_token) - partial_block_waste_bytes(
        to_block_size, num_seqs, bytes_per_token
    )
