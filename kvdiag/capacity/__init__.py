"""Capacity model (package): how much KV cache a vLLM server has and what it prints about it.

Pure functions over a Hugging Face ``config.json`` dict (multimodal configs with a nested
``text_config`` are supported). No I/O happens here; callers read files.

Sources (see ``/work/shared/reference/vllm-observability.md`` §3 for the file @ version
citations): ``v1/kv_cache_interface.py`` (page sizes, per-request worst case),
``v1/core/kv_cache_utils.py`` (KV-cache groups, number of blocks, the "GPU KV cache size" and
"Maximum concurrency" lines), ``model_executor/models/config.py`` (hybrid block-size alignment,
K10), ``model_executor/layers/mamba/mamba_utils.py`` (Mamba / linear-attention state shapes),
``model_executor/models/utils.py`` (pipeline-parallel layer split), ``worker/cache_engine.py``
(V0 block size). Paged attention itself: Kwon et al., "Efficient Memory Management for Large
Language Model Serving with PagedAttention", SOSP 2023.

Units: bytes are plain ``int`` bytes; ``GIB`` = 2**30 bytes (vLLM prints "GiB"); tokens are
token positions of one sequence. Every number is *per worker* (one TP rank of one PP stage)
unless a docstring says otherwise.

Package layout (one file per thing, so the next attention kind is a new file):

* ``units``: GiB, defaults, dtype sizes, layer-kind names.
* ``config_fields``: reading and bounding ``config.json`` numbers.
* ``shape``: :class:`ModelShape` and :func:`model_shape` (layer maps of every family).
* ``attention``: full attention (MHA / GQA / MQA) bytes per token; ``mla``: latent attention;
  ``sliding_window``: the blocks a sliding layer needs; ``state``: Mamba-2 / Gated DeltaNet / KDA state
  pages and the forced hybrid block size.
* ``parallel``: pipeline stages (and decode context parallel).
* ``groups``: vLLM V1's KV-cache groups and the block pool.
* ``versions``: version strings and every version-dependent rule's range.
* ``printing``: what vLLM prints ("GPU KV cache size", "Maximum concurrency"), per version.
* ``estimate``: the one-call estimate; ``remedies``: the inverse questions; ``weights``: checkpoint bytes;
  ``modules``: the checkpoint's modules by name; ``quantization``: each scheme's per-module rule and ignore lists.

Every public name of the former single module ``kvdiag/capacity.py`` is importable from here.
"""

from __future__ import annotations

from .units import (  # noqa: F401
    DEFAULT_BLOCK_SIZE, DEFAULT_MAX_NUM_BATCHED_TOKENS, GIB, KV_CACHE_DTYPES, LAYER_FULL, LAYER_LINEAR,
    LAYER_MAMBA, LAYER_NONE, LAYER_SLIDING, ATTENTION_LAYERS, _DTYPE_BYTES, STATE_LAYERS, check_positive,
    dtype_bytes, kv_cache_dtype_bytes,
)
from .loader import load_model_config  # noqa: F401
from .config_fields import (  # noqa: F401
    MAX_CONFIG_INT, FIELD_MAX, int_field, text_config_of, check_config_numbers,
)
from .shape import (  # noqa: F401
    ModelShape, _QWEN_TYPES, _gdn_dims, _layer_kinds, model_shape,
)
from .mla import (  # noqa: F401
    FP8_DS_MLA_BYTES_PER_TOKEN,
)
from .attention import (  # noqa: F401
    attention_bytes_per_token_per_layer, kv_bytes_per_token, kv_heads_per_rank,
)
from .parallel import (  # noqa: F401
    pipeline_stage_layers,
)
from .state import (  # noqa: F401
    hybrid_attention_block_size, state_bytes_per_layer,
)
from .sliding_window import sliding_window_blocks_per_request  # noqa: F401
from .groups import (  # noqa: F401
    KVCacheGroup, KVCacheLayout, _stage_layout, block_bytes, kv_cache_layout, num_gpu_blocks_from_kv_memory,
)
from .versions import (  # noqa: F401
    MAMBA_ALIGN_DEFAULT_FROM, TOKEN_LINE_GROUP_AWARE_FROM, as_version, default_mamba_cache_mode,
    parse_vllm_version, uses_v0_engine,
)
from .printing import (  # noqa: F401
    blocks_per_request, capacity_notes, group_blocks_per_request, kv_capacity_tokens, max_concurrency,
    pool_token_slots,
)
from .estimate import (  # noqa: F401
    CapacityEstimate, estimate_capacity,
)
from .remedies import (  # noqa: F401
    block_size_waste_saved, fp8_kv_gain, gpu_memory_utilization_for, kv_memory_needed, max_model_len_that_fits,
    max_num_seqs_for, partial_block_waste_bytes, tensor_parallel_kv_gain,
)
from .weights import (  # noqa: F401
    MXFP4_BACKEND_PADDING, NON_TORCH_BYTES_ESTIMATE, _GROUP_SCALE_OVERHEAD, _QUANT_BYTES, non_kv_bytes_estimate,
    parameter_count, weights_breakdown, weights_bytes, weights_bytes_per_gpu, weights_bytes_per_worker,
    weights_missing_reason,
)
from .modules import Module, checkpoint_modules, tied_embeddings  # noqa: F401
from .quantization import Scheme, scheme_of  # noqa: F401

from .speculative import EAGLE_HEAD_LAYERS, SPECULATIVE_METHODS, drafter_layers  # noqa: F401
from .versions import (  # noqa: F401
    DCP_TOKEN_LINE_MULTIPLIED, DEEPSEEK_HEAD_192_FROM, GDN_SSM_DTYPE_FROM, MAMBA_SPEC_BLOCKS_FROM, MAMBA_SPEC_CONV_FROM,
    MLA_FROM, VllmVersion, parse_vllm_version_full, prerelease_note, version_at_least, GROUP_SIZE_CLOSE_RULES,
    group_size_close_factor,
)
from .mla import caches_mla_latent, mla_bytes_per_token_per_layer, pre_mla_head_size  # noqa: F401

__all__ = [
    "GIB",
    "ModelShape",
    "KVCacheGroup",
    "KVCacheLayout",
    "CapacityEstimate",
    "model_shape",
    "dtype_bytes",
    "kv_cache_dtype_bytes",
    "kv_heads_per_rank",
    "attention_bytes_per_token_per_layer",
    "pipeline_stage_layers",
    "kv_bytes_per_token",
    "state_bytes_per_layer",
    "hybrid_attention_block_size",
    "kv_cache_layout",
    "block_bytes",
    "num_gpu_blocks_from_kv_memory",
    "parse_vllm_version",
    "uses_v0_engine",
    "default_mamba_cache_mode",
    "group_blocks_per_request",
    "blocks_per_request",
    "max_concurrency",
    "kv_capacity_tokens",
    "pool_token_slots",
    "capacity_notes",
    "estimate_capacity",
    "gpu_memory_utilization_for",
    "kv_memory_needed",
    "max_model_len_that_fits",
    "max_num_seqs_for",
    "fp8_kv_gain",
    "tensor_parallel_kv_gain",
    "partial_block_waste_bytes",
    "block_size_waste_saved",
    "parameter_count",
    "weights_bytes",
    "weights_bytes_per_gpu",
    "weights_bytes_per_worker",
    "weights_breakdown",
    "checkpoint_modules",
    "scheme_of",
    "non_kv_bytes_estimate",
    "VllmVersion",
    "parse_vllm_version_full",
    "drafter_layers",
    "SPECULATIVE_METHODS",
]
