"""Units, defaults, dtype sizes and layer-kind names shared by the capacity model.

Sources: PyTorch dtype sizes; vLLM ``config/cache.py`` (``--kv-cache-dtype`` values) and
``engine/arg_utils.py`` (defaults), as cited per name.
"""

from __future__ import annotations

from kvdiag.errors import InputError

GIB = 1024**3
"""Bytes in one GiB (vLLM's "GiB" in log lines)."""

from ..vllm_defaults import DEFAULT_BLOCK_SIZE, DEFAULT_MAX_NUM_BATCHED_TOKENS  # noqa: F401 (capacity's names too)

# Element sizes, bytes.
_DTYPE_BYTES = {
    "bfloat16": 2,
    "bf16": 2,
    "float16": 2,
    "fp16": 2,
    "half": 2,
    "float32": 4,
    "fp32": 4,
    "float": 4,
    "float8": 1,
    "fp8": 1,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
}

KV_CACHE_DTYPES = (
    "auto",
    "bfloat16",
    "float16",
    "half",
    "float32",
    "fp8",
    "fp8_e4m3",
    "fp8_e5m2",
    "fp8_inc",
    "fp8_ds_mla",
)
"""``--kv-cache-dtype`` values this model understands."""
LAYER_FULL = "full"
LAYER_SLIDING = "sliding"
LAYER_MAMBA = "mamba"
LAYER_LINEAR = "linear"
LAYER_NONE = "none"
ATTENTION_LAYERS = (LAYER_FULL, LAYER_SLIDING)
STATE_LAYERS = (LAYER_MAMBA, LAYER_LINEAR)
def dtype_bytes(name: str) -> int:
    """Bytes per element of a torch / HF dtype name.

    Source: PyTorch dtype sizes; vLLM stores fp8 KV as uint8 (reference §3, ``s``).

    Args:
        name: e.g. ``"bfloat16"``, ``"torch.float16"``, ``"float32"``, ``"fp8"``.

    Returns:
        Element size in bytes.

    Raises:
        InputError: unknown dtype name.
    """
    key = str(name).lower().removeprefix("torch.")
    if key not in _DTYPE_BYTES:
        raise InputError(f"config: dtype {name!r}: expected one of bfloat16, float16, float32, fp8")
    return _DTYPE_BYTES[key]

def kv_cache_dtype_bytes(kv_cache_dtype: str, model_dtype_bytes: int) -> int:
    """Bytes per element of the KV cache.

    ``auto`` is the model dtype; every fp8 flavour is stored as one byte (reference §3).

    Args:
        kv_cache_dtype: vLLM ``--kv-cache-dtype`` value.
        model_dtype_bytes: bytes per element of the model dtype.

    Returns:
        Bytes per element.

    Raises:
        ValueError: unknown ``kv_cache_dtype``.
    """
    d = str(kv_cache_dtype).lower()
    if d == "auto":
        return model_dtype_bytes
    if d.startswith("fp8"):
        return 1
    if d in ("bfloat16", "float16", "half"):
        return 2
    if d == "float32":
        return 4
    raise ValueError(f"kv_cache_dtype {kv_cache_dtype!r}: expected one of {', '.join(KV_CACHE_DTYPES)}")

def check_positive(**values: float) -> None:
    for name, value in values.items():
        if value is None or value <= 0:
            raise ValueError(f"{name} must be positive, got {value!r}")
