"""vLLM's defaults and bounds that kvdiag assumes, each named once (reference: shared/reference/vllm-observability.md).

Every module that needs one of these numbers imports it from here.
"""

from __future__ import annotations

DEFAULT_BLOCK_SIZE = 16
"""vLLM's default KV block size on CUDA, tokens (V0 and V1; FlashAttention, ``vllm/platforms/cuda.py``). MLA
backends force 64 or 128, hybrid Mamba models raise it (reference §3.2)."""

MAX_CHOSEN_BLOCK_SIZE = 128
"""Largest block size a non-hybrid vLLM server runs with: ``--block-size`` is one of ``BlockSize = Literal[1, 8, 16,
32, 64, 128]`` (``config/cache.py`` to 0.10; 0.11 adds 256) and MLA backends force at most 128. Above it only the
hybrid page alignment has raised the block size (``hybrid_block_size``)."""

MAX_BLOCK_SIZE = 1 << 20
"""Largest block size kvdiag believes in a value vLLM reported (``cache_config_info``, a log, a lab setting). vLLM's
own bound on a chosen ``--block-size`` is 128 (256 from 0.11), but the hybrid page alignment
(``16 × ceil(mamba page / (16 × attention page per token))``, ``model_executor/models/config.py``) has none: the
resolved value is not validated (``block_size: SkipValidation[BlockSize]``). vLLM printed 992 and 2096 for Qwen3.5 /
3.6 models and gives 4176 for one of them with an fp8 KV cache (tests/test_capacity.py), so thousands, never a
million."""

MAX_BLOCK_SIZE_OPTION = 4096
"""Bound of the ``--block-size`` options of ``kvdiag estimate`` and ``kvdiag simulate``. Lower than a block size vLLM
can resolve for a hybrid model (4176 above); kept as it is because tests/test_bad_input_config.py pins 100000 as
refused and behaviour stays the same in this change. :data:`MAX_BLOCK_SIZE` is the right bound."""

DEFAULT_GPU_MEMORY_UTILIZATION = 0.9
"""vLLM's default ``gpu_memory_utilization`` through 0.16 (reference §1.4)."""

DEFAULT_GPU_MEMORY_UTILIZATION_FROM = ((0, 24, 0), 0.92)
"""(first version read with it, the default): 0.92 at 0.24 and 0.33 (0.16 still 0.9; the release between is not
verified)."""


def default_gpu_memory_utilization(version: tuple | None) -> float:
    """vLLM's default ``gpu_memory_utilization`` at ``version`` (``(major, minor, patch)``; ``None``: unknown, the
    older default)."""
    since, value = DEFAULT_GPU_MEMORY_UTILIZATION_FROM
    return value if version is not None and version >= since else DEFAULT_GPU_MEMORY_UTILIZATION


DEFAULT_MAX_NUM_SEQS = 256
"""vLLM's ``max_num_seqs`` default of the online server (V0; V1 on GPUs below 70 GiB), as kvdiag's simulator
assumes it."""

DEFAULT_MAX_NUM_BATCHED_TOKENS = 2048
"""Assumed ``max_num_batched_tokens`` when unknown: vLLM's online-serving default on GPUs
below 70 GiB and on A100 (``engine/arg_utils.py``); H100-class servers use 8192."""
