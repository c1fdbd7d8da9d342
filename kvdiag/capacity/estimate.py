"""One-call estimate: blocks, printed token line and concurrency from a worker's KV budget."""

from __future__ import annotations

from dataclasses import dataclass

from .attention import kv_bytes_per_token
from .groups import KVCacheLayout, kv_cache_layout, num_gpu_blocks_from_kv_memory
from .printing import capacity_notes, kv_capacity_tokens, max_concurrency, pool_token_slots
from .remedies import max_model_len_that_fits
from .shape import ModelShape
from .units import DEFAULT_MAX_NUM_BATCHED_TOKENS
from .versions import _version, default_mamba_cache_mode

@dataclass(frozen=True)
class CapacityEstimate:
    """Result of :func:`estimate_capacity` (all per worker).

    Attributes:
        kv_bytes_per_token: plain formula, bytes (attention layers of the largest stage).
        layout: groups, effective block size and block bytes.
        num_gpu_blocks: pool blocks.
        kv_capacity_tokens: what vLLM prints as "GPU KV cache size".
        max_concurrency: what vLLM prints as "Maximum concurrency" (None without max_model_len).
        pool_token_slots: ``num_blocks × block_size``.
        notes: assumptions and caveats.
    """

    kv_bytes_per_token: int
    layout: KVCacheLayout
    num_gpu_blocks: int
    kv_capacity_tokens: int
    max_concurrency: float | None
    pool_token_slots: int
    notes: tuple[str, ...]


def estimate_capacity(
    shape: ModelShape,
    kv_memory_bytes: float,
    *,
    kv_cache_dtype: str = "auto",
    tensor_parallel_size: int = 1,
    pipeline_parallel_size: int = 1,
    block_size: int | None = None,
    max_model_len: int | None = None,
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
    vllm_version: str | tuple[int, int, int] | None = None,
    mamba_cache_mode: str | None = None,
) -> CapacityEstimate:
    """Blocks, printed token capacity and concurrency from a worker's KV budget.

    Args:
        shape: from :func:`model_shape`.
        kv_memory_bytes: "Available KV cache memory" of the limiting worker, bytes.
        kv_cache_dtype: vLLM ``--kv-cache-dtype``.
        tensor_parallel_size: TP size.
        pipeline_parallel_size: PP size.
        block_size: ``--block-size`` tokens (None = 16, raised for hybrid models).
        max_model_len: tokens per request (None: no concurrency).
        max_num_batched_tokens: scheduler token budget.
        vllm_version: selects V0/V1 and the token-line formula.
        mamba_cache_mode: None = the version default (:func:`default_mamba_cache_mode`).

    Returns:
        CapacityEstimate.

    Raises:
        InputError: hybrid layout cannot be derived (see :func:`kv_cache_layout`).
        ValueError: bad dtype / sizes.
    """
    v = _version(vllm_version)
    v0 = v is not None and v < (0, 8, 0)
    layout = kv_cache_layout(
        shape, kv_cache_dtype, tensor_parallel_size, pipeline_parallel_size, block_size,
        hybrid_allocator=not v0,
    )
    mode = mamba_cache_mode or default_mamba_cache_mode(v)
    blocks = num_gpu_blocks_from_kv_memory(kv_memory_bytes, layout.block_bytes)
    tokens = kv_capacity_tokens(
        blocks, layout, vllm_version=v, max_model_len=max_model_len,
        max_num_batched_tokens=max_num_batched_tokens, mamba_cache_mode=mode,
    )
    conc = None
    if max_model_len:
        conc = max_concurrency(
            blocks, layout, max_model_len, max_num_batched_tokens=max_num_batched_tokens,
            mamba_cache_mode=mode, vllm_version=v,
        )
    notes = list(shape.notes) + list(layout.notes) + capacity_notes(blocks, layout, tokens, v)
    if shape.num_state_layers and not v0:
        notes.append(f"mamba_cache_mode assumed {mode!r} ({'2 state pages' if mode == 'align' else '1 state page'} per request per state group)")
    if shape.attention_kind == "mla" and block_size is None:
        notes.append("MLA: block size 16 assumed; FlashMLA / FlashInfer-MLA force 64, CUTLASS MLA 128")
    if any(g.kind == "sliding_window" for g in layout.groups) and max_model_len:
        notes.append(f"sliding-window worst case uses max_num_batched_tokens = {max_num_batched_tokens}")
    if conc is not None and conc < 1:
        notes.append(
            f"max_model_len {max_model_len} does not fit one request: vLLM refuses to start "
            f"(fits {max_model_len_that_fits(shape, kv_memory_bytes=kv_memory_bytes, kv_cache_dtype=kv_cache_dtype, tensor_parallel_size=tensor_parallel_size, pipeline_parallel_size=pipeline_parallel_size, block_size=block_size, max_num_batched_tokens=max_num_batched_tokens, mamba_cache_mode=mode):,} tokens)"
        )
    return CapacityEstimate(
        kv_bytes_per_token=kv_bytes_per_token(shape, kv_cache_dtype, tensor_parallel_size, pipeline_parallel_size),
        layout=layout,
        num_gpu_blocks=blocks,
        kv_capacity_tokens=tokens,
        max_concurrency=conc,
        pool_token_slots=pool_token_slots(blocks, layout),
        notes=tuple(dict.fromkeys(notes)),
    )
