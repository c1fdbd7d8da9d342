"""One-call estimate: blocks, printed token line and concurrency from a worker's KV budget."""

from __future__ import annotations

from dataclasses import dataclass

from .attention import kv_bytes_per_token
from .groups import KVCacheLayout, kv_cache_layout, num_gpu_blocks_from_kv_memory
from .printing import capacity_notes, kv_capacity_tokens, max_concurrency, pool_token_slots
from .remedies import max_model_len_that_fits
from .shape import ModelShape
from .units import DEFAULT_BLOCK_SIZE, DEFAULT_MAX_NUM_BATCHED_TOKENS
from .mla import caches_mla_latent
from .speculative import drafter_layers
from .versions import MAMBA_ALIGN_DEFAULT_FROM, MAMBA_SPEC_BLOCKS_FROM, as_version, default_mamba_cache_mode, prerelease_note, version_at_least

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
    speculative_method: str | None = None,
    num_speculative_tokens: int = 0,
    draft_layers: int | None = None,
    decode_context_parallel_size: int = 1,
    mamba_ssm_cache_dtype: str | None = None,
    prefix_caching: bool | None = None,
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
        mamba_cache_mode: None = the version default (:func:`default_mamba_cache_mode`, from ``prefix_caching``).
        speculative_method: ``eagle``, ``eagle3``, ``mtp``, ``ngram`` or None (:mod:`.speculative`).
        num_speculative_tokens: ``num_speculative_tokens`` of the speculative config.
        draft_layers: the drafter's decoder layers when not the default (EAGLE head 1, MTP from the config).
        decode_context_parallel_size: ``--decode-context-parallel-size`` (printed tokens x it; :mod:`.printing`).
        mamba_ssm_cache_dtype: ``--mamba-ssm-cache-dtype`` (None/``auto``: the config's or the model dtype).
        prefix_caching: None = the version's default; True for ``--enable-prefix-caching``, False for
            ``--no-enable-prefix-caching`` (hybrid state pages per request, and the 0.13 chunk-aligned block).

    Returns:
        CapacityEstimate.

    Raises:
        InputError: hybrid layout cannot be derived (see :func:`kv_cache_layout`).
        ValueError: bad dtype / sizes.
    """
    v = as_version(vllm_version)
    v0 = v is not None and v < (0, 8, 0)
    if decode_context_parallel_size < 1:
        raise ValueError(f"decode_context_parallel_size must be positive, got {decode_context_parallel_size!r}")
    if tensor_parallel_size % decode_context_parallel_size:
        raise ValueError(f"decode_context_parallel_size {decode_context_parallel_size} must divide "
                         f"tensor_parallel_size {tensor_parallel_size} (vLLM runs DCP inside the TP group)")
    if num_speculative_tokens < 0:
        raise ValueError(f"num_speculative_tokens must be >= 0, got {num_speculative_tokens!r}")
    if speculative_method not in (None, "ngram") and num_speculative_tokens == 0:
        raise ValueError(f"speculative method {speculative_method}: give num_speculative_tokens >= 1")
    n_draft = drafter_layers(shape, speculative_method, draft_layers)
    spec_tokens = num_speculative_tokens if speculative_method else 0
    ssm = None if mamba_ssm_cache_dtype in (None, "auto") else mamba_ssm_cache_dtype
    mode = mamba_cache_mode or default_mamba_cache_mode(v, prefix_caching, shape.model_type)
    chunk = None
    if mode == "all" and shape.num_state_layers and v is not None and v < MAMBA_ALIGN_DEFAULT_FROM:
        chunk = shape.mamba_chunk_size or 2048  # get_mamba_chunk_size @ v0.13.0: 2048 when the config names none
    layout = kv_cache_layout(
        shape, kv_cache_dtype, tensor_parallel_size, pipeline_parallel_size, block_size,
        hybrid_allocator=not v0, mamba_ssm_dtype=ssm, drafter_layers=n_draft,
        num_speculative_tokens=spec_tokens, vllm_version=v, mamba_chunk_size=chunk,
    )
    spec_blocks = spec_tokens if version_at_least(v, MAMBA_SPEC_BLOCKS_FROM) or v is None else 0
    cp = decode_context_parallel_size
    blocks = num_gpu_blocks_from_kv_memory(kv_memory_bytes, layout.block_bytes)
    tokens = kv_capacity_tokens(
        blocks, layout, vllm_version=v, max_model_len=max_model_len,
        max_num_batched_tokens=max_num_batched_tokens, mamba_cache_mode=mode,
        context_parallel_size=cp, num_speculative_blocks=spec_blocks,
    )
    conc = None
    if max_model_len:
        conc = max_concurrency(
            blocks, layout, max_model_len, max_num_batched_tokens=max_num_batched_tokens,
            mamba_cache_mode=mode, vllm_version=v, context_parallel_size=cp, num_speculative_blocks=spec_blocks,
        )
    notes = list(shape.notes) + list(layout.notes) + capacity_notes(blocks, layout, tokens, v)
    pre = prerelease_note(vllm_version) if isinstance(vllm_version, str) else None
    if pre:
        notes.append(pre)
    if n_draft:
        notes.append(f"{speculative_method} drafter: {n_draft} attention layer(s) join the target's "
                     f"{'MLA' if shape.attention_kind == 'mla' else 'full-attention'} group on the last stage, "
                     "charged the target's bytes per token")
    if cp > 1:
        notes.append(f"decode context parallel {cp}: each rank keeps 1/{cp} of every request's tokens; the printed "
                     f"token line counts all {cp} ranks")
    if shape.attention_kind == "mla" and not caches_mla_latent(shape.model_type, v):
        notes.append(f"vLLM {'.'.join(map(str, v))} predates MLA support (0.7.1): {shape.model_type} caches full "
                     "per-head K and V")
    if shape.num_state_layers and spec_blocks:
        notes.append(f"each request reserves {spec_blocks} more state page(s) per state group for the speculative tokens")
    if shape.num_state_layers and not v0:
        pages = {"align": "2 state pages", "all": "one state page per block of the request"}.get(mode, "1 state page")
        notes.append(f"mamba_cache_mode assumed {mode!r} ({pages} per request per state group)")
    if shape.attention_kind == "mla" and block_size is None:
        notes.append(f"MLA: block size {DEFAULT_BLOCK_SIZE} assumed; FlashMLA / FlashInfer-MLA force 64, CUTLASS MLA 128")
    if any(g.kind == "sliding_window" for g in layout.groups) and max_model_len:
        notes.append(f"sliding-window worst case uses max_num_batched_tokens = {max_num_batched_tokens}")
    if conc is not None and conc < 1:
        notes.append(
            f"max_model_len {max_model_len} does not fit one request: vLLM refuses to start "
            f"(fits {max_model_len_that_fits(shape, kv_memory_bytes=kv_memory_bytes, kv_cache_dtype=kv_cache_dtype, tensor_parallel_size=tensor_parallel_size, pipeline_parallel_size=pipeline_parallel_size, block_size=block_size, max_num_batched_tokens=max_num_batched_tokens, mamba_cache_mode=mode):,} tokens)"
        )
    return CapacityEstimate(
        kv_bytes_per_token=kv_bytes_per_token(shape, kv_cache_dtype, tensor_parallel_size, pipeline_parallel_size, v),
        layout=layout,
        num_gpu_blocks=blocks,
        kv_capacity_tokens=tokens,
        max_concurrency=conc,
        pool_token_slots=pool_token_slots(blocks, layout),
        notes=tuple(dict.fromkeys(notes)),
    )
