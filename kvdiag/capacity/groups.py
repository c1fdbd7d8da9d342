"""KV-cache groups (vLLM V1): layers grouped by spec, padded to one size, sharing one block pool."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

from kvdiag.errors import InputError

from .attention import attention_bytes_per_token_per_layer
from .parallel import pipeline_stage_layers
from .shape import ModelShape
from .state import hybrid_attention_block_size, state_bytes_per_layer
from .versions import GDN_SSM_DTYPE_FROM, PP_WHOLE_MODEL_GROUPS_FROM, group_size_close_factor
from .units import (
    STATE_LAYERS, DEFAULT_BLOCK_SIZE, LAYER_FULL, LAYER_LINEAR, LAYER_MAMBA, LAYER_NONE, LAYER_SLIDING, check_positive,
)

@dataclass(frozen=True)
class KVCacheGroup:
    """One KV-cache group as vLLM V1 builds it.

    Attributes:
        kind: ``"full_attention"``, ``"sliding_window"``, ``"mamba"`` or ``"linear_attention"``.
        layers: real layers in the group.
        padding_layers: padding layers added to reach the common group size.
        bytes_per_token: KV bytes per token of the group's real layers (0 for state groups:
            they hold one page per request, not per token).
        sliding_window: window, tokens (sliding groups only).
    """

    kind: str
    layers: int
    padding_layers: int = 0
    bytes_per_token: int = 0
    sliding_window: int | None = None


@dataclass(frozen=True)
class KVCacheLayout:
    """How one worker's KV memory is cut into blocks.

    Attributes:
        groups: the KV-cache groups (one for uniform models).
        block_size: effective attention block size, tokens (raised for hybrid Mamba models).
        page_bytes: bytes of one layer's page (one block of one layer).
        group_size: layers per group including padding; the pool has ``group_size`` tensors,
            each shared by one layer of every group.
        block_bytes: bytes one pool block takes, ``page_bytes × group_size`` (equals V0's
            block size ``s × B × L × 2 × H_kv × D`` for uniform models).
        state_bytes: per-layer Mamba / linear state per request before padding (None if n/a).
        notes: assumptions and warnings.
    """

    groups: tuple[KVCacheGroup, ...]
    block_size: int
    page_bytes: int
    group_size: int
    block_bytes: int
    state_bytes: int | None = None
    notes: tuple[str, ...] = field(default=())

    @property
    def num_groups(self) -> int:
        """Number of KV-cache groups."""
        return len(self.groups)

    @property
    def padding_layers(self) -> int:
        """Padding layers over all groups (vLLM's 'Add N padding layers' warning)."""
        return sum(g.padding_layers for g in self.groups)


def kv_cache_layout(
    shape: ModelShape,
    kv_cache_dtype: str = "auto",
    tensor_parallel_size: int = 1,
    pipeline_parallel_size: int = 1,
    block_size: int | None = None,
    *,
    hybrid_allocator: bool = True,
    mamba_ssm_dtype: str | None = None,
    drafter_layers: int = 0,
    num_speculative_tokens: int = 0,
    vllm_version: tuple[int, int, int] | None = None,
    mamba_chunk_size: int | None = None,
) -> KVCacheLayout:
    """KV-cache groups, effective block size and block bytes of the limiting worker.

    V1 (``v1/core/kv_cache_utils.py`` ``_get_kv_cache_groups_uniform_page_size`` @ v0.11.0; the group size
    rule per version: :data:`~.versions.GROUP_SIZE_CLOSE_RULES`):
    layers are grouped by spec (full, sliding, state); the group size is the smallest type's
    layer count (from 0.13 the largest when it is < 1.25× the smallest, from 0.24 < 1.5×); every type is cut into groups
    of that size, the last padded ("Add N padding layers, may waste at most P%"). All groups
    share one pool of blocks: ``group_size`` tensors each shared by one layer of every group.
    Hybrid Mamba / linear models raise the block size (:func:`hybrid_attention_block_size`).
    With ``hybrid_allocator=False`` (V0, or ``--disable-hybrid-kv-cache-manager``) every
    attention layer is one full-attention group and state layers are not in the pool.

    With PP the stage with the most KV bytes per block is used (the minimum number of blocks
    over workers is what vLLM keeps).

    Args:
        shape: from :func:`model_shape`.
        kv_cache_dtype: vLLM ``--kv-cache-dtype``.
        tensor_parallel_size: TP size.
        pipeline_parallel_size: PP size.
        block_size: ``--block-size`` tokens; None = 16. For hybrid models vLLM raises it to the
            state-aligned size; when the state size is unknown this value is used as the
            effective block size.
        hybrid_allocator: False for V0 / disabled hybrid KV-cache manager.
        mamba_ssm_dtype: override of the recurrent-state dtype (``--mamba-ssm-cache-dtype``).
        drafter_layers: attention layers a speculative drafter adds (EAGLE / EAGLE3 head, MTP layers; see
            :mod:`.speculative`). They join the full-attention group of the last pipeline stage with the target's
            page size (``get_kv_cache_spec`` walks every ``Attention`` layer of the forward context, drafter
            included: ``v1/worker/gpu_model_runner.py`` and ``v1/spec_decode/eagle.py load_model`` @ v0.11.0).
        num_speculative_tokens: speculative tokens per step; grows hybrid conv states (:func:`state_bytes_per_layer`).
        vllm_version: selects the version rules (pre-0.7.1 MLA, state dtypes).
        mamba_chunk_size: align the hybrid block to this Mamba chunk (0.13 – 0.19 with prefix caching opted in,
            :data:`~.versions.MAMBA_PREFIX_ALL_FROM`): ``lcm(chunk, align) × cdiv(cdiv(state, per_token), lcm)``.

    Returns:
        The KVCacheLayout.

    Raises:
        InputError: hybrid model whose state size is unknown and no ``block_size`` given.
        ValueError: bad dtype or non-positive sizes.
    """
    user_block = block_size
    block = block_size or DEFAULT_BLOCK_SIZE
    check_positive(block_size=block)
    notes: list[str] = []
    per_tok = attention_bytes_per_token_per_layer(shape, kv_cache_dtype, tensor_parallel_size, vllm_version)
    check_positive(pipeline_parallel_size=pipeline_parallel_size)
    if drafter_layers < 0 or num_speculative_tokens < 0:
        raise ValueError("drafter_layers and num_speculative_tokens must be >= 0")
    if drafter_layers and shape.attention_kind == "none":
        raise InputError("config: attention-free model: a drafter's attention layers have no group to join")
    stages = pipeline_stage_layers(shape.num_layers, pipeline_parallel_size)
    all_kinds = list(shape.layer_kinds) + [LAYER_FULL] * drafter_layers
    if (hybrid_allocator and len(stages) > 1 and len({k for k in all_kinds if k != LAYER_NONE}) > 1
            and (vllm_version is None or vllm_version >= PP_WHOLE_MODEL_GROUPS_FROM)):
        return _whole_model_layout(shape, stages, all_kinds, per_tok, block, user_block, tensor_parallel_size,
                                   mamba_ssm_dtype, notes, num_speculative_tokens, vllm_version, mamba_chunk_size)
    best: KVCacheLayout | None = None
    for n, stage in enumerate(stages):
        kinds = [shape.layer_kinds[i] for i in stage]
        if n == len(stages) - 1:
            kinds += [LAYER_FULL] * drafter_layers  # the drafter runs on the last PP rank
        layout = _stage_layout(
            shape, kinds, per_tok, block, user_block, tensor_parallel_size,
            hybrid_allocator, mamba_ssm_dtype, notes, num_speculative_tokens, vllm_version, mamba_chunk_size,
        )
        if best is None or layout.block_bytes / layout.block_size > best.block_bytes / best.block_size:
            best = layout
    assert best is not None
    return KVCacheLayout(
        groups=best.groups,
        block_size=best.block_size,
        page_bytes=best.page_bytes,
        group_size=best.group_size,
        block_bytes=best.block_bytes,
        state_bytes=best.state_bytes,
        notes=tuple(dict.fromkeys(notes)),
    )


_KIND_OF_GROUP = {"full_attention": (LAYER_FULL,), "sliding_window": (LAYER_SLIDING,),
                  "mamba": (LAYER_MAMBA,), "linear_attention": (LAYER_LINEAR,)}


def _whole_model_layout(
    shape: ModelShape, stages: list[range], all_kinds: list[str], per_tok: int, block: int, user_block: int | None,
    tp: int, ssm_dtype: str | None, notes: list[str], num_spec: int, vllm_version: tuple[int, int, int] | None,
    chunk: int | None = None,
) -> KVCacheLayout:
    """Pipeline parallel from 0.11.0: groups built from the whole model's layers, then cut per worker.

    ``get_kv_cache_configs`` (``v1/core/kv_cache_utils.py @ v0.11.0``) merges every worker's specs, groups them
    (``layers[i::num_groups]`` per type, so each group spreads over the stages), and gives each worker the groups'
    members it holds; a worker's blocks are ``memory // (page × its largest group)`` and every worker keeps the
    minimum. The printed line divides by the number of global groups (empty ones on a worker included).
    """
    glob = _stage_layout(shape, all_kinds, per_tok, block, user_block, tp, True, ssm_dtype, notes, num_spec,
                         vllm_version, chunk)
    stage_of = [n for n, st in enumerate(stages) for _ in st] + [len(stages) - 1] * (len(all_kinds) - shape.num_layers)
    members: list[tuple[KVCacheGroup, list[int]]] = []
    by_kind: dict[str, list[KVCacheGroup]] = {}
    for g in glob.groups:
        by_kind.setdefault(g.kind, []).append(g)
    for kind, gs in by_kind.items():
        idx = [i for i, k in enumerate(all_kinds) if k in _KIND_OF_GROUP[kind]]
        for j, g in enumerate(gs):
            members.append((g, idx[j::len(gs)]))
    best_stage, best_size = 0, -1
    for s in range(len(stages)):
        size = max(sum(1 for i in m if stage_of[i] == s) for _, m in members)
        if size > best_size:
            best_stage, best_size = s, size
    groups = []
    for g, m in members:
        real = sum(1 for i in m if stage_of[i] == best_stage)
        groups.append(KVCacheGroup(g.kind, real, best_size - real,
                                   per_tok * real if g.kind in ("full_attention", "sliding_window") else 0,
                                   g.sliding_window))
    notes.append(f"pipeline parallel: {len(groups)} KV-cache groups of the whole model; stage {best_stage} holds at "
                 f"most {best_size} layers of one group (its blocks are the fewest)")
    return KVCacheLayout(tuple(groups), glob.block_size, glob.page_bytes, best_size, glob.page_bytes * best_size,
                         glob.state_bytes, tuple(dict.fromkeys(notes)))


def _stage_layout(
    shape: ModelShape,
    kinds: Sequence[str],
    per_tok: int,
    block: int,
    user_block: int | None,
    tp: int,
    hybrid_allocator: bool,
    ssm_dtype: str | None,
    notes: list[str],
    num_spec: int = 0,
    vllm_version: tuple[int, int, int] | None = None,
    chunk: int | None = None,
) -> KVCacheLayout:
    n_full = kinds.count(LAYER_FULL)
    n_slide = kinds.count(LAYER_SLIDING)
    n_state = sum(1 for k in kinds if k in STATE_LAYERS)
    state_kind = LAYER_MAMBA if LAYER_MAMBA in kinds else LAYER_LINEAR

    if not hybrid_allocator:
        n_att = n_full + n_slide
        if n_att == 0:
            raise InputError("config: no attention layers on this worker: nothing goes into the KV pool")
        if n_slide:
            notes.append("hybrid allocator off: sliding-window layers are charged as full attention")
        page = per_tok * block
        groups = (KVCacheGroup("full_attention", n_att, 0, per_tok * n_att),)
        return KVCacheLayout(groups, block, page, n_att, page * n_att)

    state_bytes = None
    if n_state:
        state_bytes = state_bytes_per_layer(shape, tp, ssm_dtype, num_speculative_tokens=num_spec,
                                            vllm_version=vllm_version)
        if n_full + n_slide == 0:
            raise InputError("config: attention-free model: the KV pool holds only Mamba state (not modelled)")
        if state_bytes is None:
            if user_block is None:
                raise InputError(
                    "config: Mamba/linear-attention state dims missing: cannot derive the hybrid "
                    "attention block size (give --block-size as printed by vLLM)"
                )
            notes.append(
                f"state size unknown: block size {block} taken as given; state page assumed padded to the attention page"
            )
        else:
            if (shape.state_kind == "gated_delta_net" and vllm_version is not None
                    and vllm_version < GDN_SSM_DTYPE_FROM):
                notes.append(f"gated_delta_net SSM state in the conv dtype {shape.dtype}: vLLM before "
                             f"{'.'.join(map(str, GDN_SSM_DTYPE_FROM))} ignores mamba_ssm_cache_dtype for GDN layers")
            elif ssm_dtype or shape.ssm_dtype:
                notes.append(f"{shape.state_kind} SSM state dtype {ssm_dtype or shape.ssm_dtype}")
            else:
                default = "float32" if shape.state_kind == "kda" else shape.dtype
                notes.append(
                    f"{shape.state_kind} SSM state dtype assumed {default} (config has no mamba_ssm_dtype; "
                    "vLLM --mamba-ssm-cache-dtype changes the state page and the forced block size)"
                )
            if num_spec:
                notes.append(f"{shape.state_kind} conv state holds {num_spec} more rows for the speculative tokens")
            forced = hybrid_attention_block_size(state_bytes, per_tok, mla=shape.attention_kind == "mla")
            if chunk:
                align = 64 if shape.attention_kind == "mla" else 16
                step = math.lcm(chunk, align)
                forced = step * math.ceil(math.ceil(state_bytes / per_tok) / step)
                notes.append(f"prefix caching on a Mamba model (0.13 - 0.19): block aligned to the Mamba chunk "
                             f"({chunk} tokens), one state page per {forced} tokens of a request")
            if block < forced:
                notes.append(
                    f"attention block size raised from {block} to {forced} tokens so one attention page "
                    f"({forced} x {per_tok} B) holds one {shape.state_kind} state page ({state_bytes} B)"
                )
                block = forced
    page = per_tok * block
    if state_bytes is not None and page > state_bytes:
        pct = (page - state_bytes) / state_bytes * 100
        notes.append(f"state page padded by {pct:.2f}% to equal the attention page")

    counts = [("full_attention", n_full), ("sliding_window", n_slide),
              ("mamba" if state_kind == LAYER_MAMBA else "linear_attention", n_state)]
    counts = [(k, n) for k, n in counts if n]
    if len(counts) == 1:
        kind, n = counts[0]
        g = KVCacheGroup(kind, n, 0, per_tok * n, shape.sliding_window if kind == "sliding_window" else None)
        return KVCacheLayout((g,), block, page, n, page * n, state_bytes)

    smallest = min(n for _, n in counts)
    largest = max(n for _, n in counts)
    close = group_size_close_factor(vllm_version)
    group_size = largest if close is not None and largest < smallest * close else smallest
    groups: list[KVCacheGroup] = []
    for kind, n in counts:
        full_groups, rest = divmod(n, group_size)
        sizes = [group_size] * full_groups + ([rest] if rest else [])
        pad = group_size - rest if rest else 0
        if pad:
            notes.append(f"Add {pad} padding layers to the {kind} layers, may waste at most {pad / n * 100:.2f}% KV cache memory")
        for i, real in enumerate(sizes):
            is_attention = kind in ("full_attention", "sliding_window")
            groups.append(
                KVCacheGroup(
                    kind,
                    real,
                    group_size - real,
                    per_tok * real if is_attention else 0,
                    shape.sliding_window if kind == "sliding_window" else None,
                )
            )
    return KVCacheLayout(tuple(groups), block, page, group_size, page * group_size, state_bytes)


def block_bytes(layout: KVCacheLayout) -> int:
    """Bytes one pool block takes on one worker: ``page_bytes × group_size``.

    Source: ``v1/core/kv_cache_utils.py`` @ v0.11.0 (``available_memory // page_size //
    group_size``); for uniform models equal to V0's ``get_cache_block_size``.

    Args:
        layout: from :func:`kv_cache_layout`.

    Returns:
        Bytes per block.
    """
    return layout.block_bytes


def num_gpu_blocks_from_kv_memory(kv_memory_bytes: float, block_bytes: int) -> int:
    """Blocks vLLM allocates from the KV budget: ``floor(kv_memory / block_bytes)``.

    ``kv_memory_bytes`` is the worker's "Available KV cache memory" (M3 line, GiB × 2**30) or
    V0's ``kv_cache_size``. Source: ``v1/core/kv_cache_utils.py`` @ v0.11.0 /
    ``worker/worker.py determine_num_available_blocks`` (V0). The null block (id 0) is
    included in the count, as vLLM's own numbers include it.

    Args:
        kv_memory_bytes: KV budget of one worker, bytes.
        block_bytes: from :func:`block_bytes`.

    Returns:
        Number of blocks (0 when the budget is not positive).

    Raises:
        ValueError: ``block_bytes`` not positive.
    """
    check_positive(block_bytes=block_bytes)
    if kv_memory_bytes <= 0:
        return 0
    return int(kv_memory_bytes // block_bytes)
