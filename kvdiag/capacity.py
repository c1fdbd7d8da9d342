"""Capacity model: how much KV cache a vLLM server has and what it prints about it.

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
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from kvdiag.errors import InputError

GIB = 1024**3
"""Bytes in one GiB (vLLM's "GiB" in log lines)."""

DEFAULT_BLOCK_SIZE = 16
"""vLLM's default KV block size on CUDA, tokens (V0 and V1)."""

DEFAULT_MAX_NUM_BATCHED_TOKENS = 2048
"""Assumed ``max_num_batched_tokens`` when unknown: vLLM's online-serving default on GPUs
below 70 GiB and on A100 (``engine/arg_utils.py``); H100-class servers use 8192."""

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

FP8_DS_MLA_BYTES_PER_TOKEN = 656
"""Bytes per token per layer of ``kv_cache_dtype=fp8_ds_mla`` (sparse FlashMLA),
``v1/kv_cache_interface.py @ v0.11.0``."""

LAYER_FULL = "full"
LAYER_SLIDING = "sliding"
LAYER_MAMBA = "mamba"
LAYER_LINEAR = "linear"
LAYER_NONE = "none"
_ATTENTION_LAYERS = (LAYER_FULL, LAYER_SLIDING)
_STATE_LAYERS = (LAYER_MAMBA, LAYER_LINEAR)


# --------------------------------------------------------------------------------------------
# Model shape
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelShape:
    """Architecture facts that decide KV-cache size, read from a HF config.

    Attributes:
        model_type: ``model_type`` of the (text) config, or None.
        num_layers: decoder layers (``num_hidden_layers``), all kinds.
        num_attention_heads: query heads, or None when the config omits them.
        num_kv_heads: KV heads of the attention layers (whole model, before TP).
        head_dim: attention head size, elements.
        hidden_size: model width, elements (None when absent).
        vocab_size: vocabulary size (None when absent).
        dtype: model dtype name (``torch_dtype``), ``"bfloat16"`` when absent.
        dtype_bytes: bytes per element of ``dtype``.
        attention_kind: ``"mha_gqa"`` (MHA, GQA and MQA), ``"mla"`` (DeepSeek-style latent)
            or ``"none"`` (attention-free).
        layer_kinds: one entry per decoder layer: ``"full"``, ``"sliding"``, ``"mamba"``
            (Mamba-2 state), ``"linear"`` (linear attention: Gated DeltaNet, KDA) or
            ``"none"`` (no cache, e.g. Nemotron-H MLP/MoE layers).
        sliding_window: window of the sliding layers, tokens (None when no sliding layer).
        kv_lora_rank: MLA latent rank (None unless MLA).
        qk_rope_head_dim: MLA rope part of the key (None unless MLA).
        state_kind: ``"mamba2"``, ``"gated_delta_net"`` or ``"kda"`` when state layers exist.
        state_dims: the dimensions the state size is computed from, as ``(name, value)``.
        ssm_dtype: dtype of the recurrent (SSM) state when the config names one.
        notes: assumptions made while reading the config.
    """

    model_type: str | None
    num_layers: int
    num_attention_heads: int | None
    num_kv_heads: int
    head_dim: int
    hidden_size: int | None
    vocab_size: int | None
    dtype: str
    dtype_bytes: int
    attention_kind: str
    layer_kinds: tuple[str, ...]
    sliding_window: int | None = None
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    state_kind: str | None = None
    state_dims: tuple[tuple[str, int], ...] = ()
    ssm_dtype: str | None = None
    notes: tuple[str, ...] = ()

    @property
    def num_attention_layers(self) -> int:
        """Layers that keep per-token K/V (full + sliding)."""
        return sum(1 for k in self.layer_kinds if k in _ATTENTION_LAYERS)

    @property
    def num_sliding_layers(self) -> int:
        """Sliding-window attention layers."""
        return self.layer_kinds.count(LAYER_SLIDING)

    @property
    def num_state_layers(self) -> int:
        """Mamba / linear-attention layers (one state per request)."""
        return sum(1 for k in self.layer_kinds if k in _STATE_LAYERS)

    @property
    def is_hybrid(self) -> bool:
        """True when vLLM V1 builds more than one kind of KV-cache group."""
        kinds = {k for k in self.layer_kinds if k != LAYER_NONE}
        return len(kinds) > 1

    def state_dim(self, name: str) -> int:
        """One of ``state_dims`` by name (elements); raises KeyError when absent."""
        return dict(self.state_dims)[name]


# Largest integer a config field may hold: beyond 2**53 a JSON number is no longer an exact count.
MAX_CONFIG_INT = 2**53
# Upper bounds of the fields that size the KV cache (far beyond any published model; catch 1e18-style typos).
_FIELD_MAX = {"num_hidden_layers": 100_000, "num_attention_heads": 1_000_000, "num_key_value_heads": 1_000_000,
              "head_dim": 65_536, "kv_lora_rank": 65_536, "qk_rope_head_dim": 65_536, "hidden_size": 10_000_000,
              "sliding_window": 1 << 40, "max_position_embeddings": 1 << 40}


def _int_text(value: int) -> str:
    from .numbers import int_text

    return int_text(value)


def _num_text(value: float) -> str:
    """``%.6g`` of a field value, without turning an integer too large for a float into an OverflowError."""
    return _int_text(value) if isinstance(value, int) and abs(value) >= 10 ** 18 else "%.6g" % value


def check_config_numbers(config: Any) -> None:
    """Reject numbers no config.json field can mean: NaN, ±Infinity (also ``1e400``, which JSON parsers read as
    infinity) and integers beyond 2**53 anywhere in the document, and a ``text_config`` that is not an object.

    Walks the document without recursion (any nesting depth).

    Raises:
        InputError: ``config: field <dotted.path> = <value>: expected a finite number`` (the caller puts the file
            name in place of ``config``).
    """
    stack: list[tuple[str, Any]] = [("", config)]
    while stack:
        where, node = stack.pop()
        if isinstance(node, Mapping):
            stack.extend((f"{where}.{k}" if where else str(k), v) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((f"{where}[{i}]", v) for i, v in enumerate(node))
        elif isinstance(node, float) and not math.isfinite(node):
            raise InputError(f"config: field {where} = {node!r}: expected a finite number")
        elif isinstance(node, int) and not isinstance(node, bool) and abs(node) > MAX_CONFIG_INT:
            raise InputError(f"config: field {where} = {_int_text(node)}: expected a number below 2**53")
    if isinstance(config, Mapping):
        text = config.get("text_config")
        if text is not None and not isinstance(text, Mapping):
            raise InputError(f"config: field text_config = {type(text).__name__}: expected an object (or null)")


def _text_config(config: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(config, Mapping):
        raise InputError("config: expected a JSON object (HF config.json)")
    merged = dict(config)
    text = config.get("text_config")
    if text is not None and not isinstance(text, Mapping):
        raise InputError(f"config: field text_config = {type(text).__name__}: expected an object (or null)")
    if isinstance(text, Mapping):
        # Text fields win; top-level fields (torch_dtype, quantization_config) stay as fallback.
        merged.update({k: v for k, v in text.items() if v is not None})
    return merged


def _int_field(
    cfg: Mapping[str, Any], *names: str, required: bool = True, purpose: str = "the KV-cache size",
    zero_ok: bool = False,
) -> int | None:
    """The first of ``names`` present in ``cfg`` as an int: finite, whole, positive (or 0 with ``zero_ok``) and
    at most the field's bound; else InputError naming the field."""
    for name in names:
        if name in cfg and cfg[name] is not None:
            value = cfg[name]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or value != int(value):
                raise InputError(f"config: field {name} = {str(value)[:40]!r}: expected an integer")
            hi = _FIELD_MAX.get(names[0], MAX_CONFIG_INT)
            if not (0 <= value if zero_ok else 0 < value) or value > hi:
                raise InputError(f"config: field {name} = {_num_text(value)}: expected a "
                                 f"{'non-negative' if zero_ok else 'positive'} integer"
                                 + (f" up to {hi:,}" if value > 0 else ""))
            return int(value)
    if required:
        raise InputError(f"config: missing field {names[0]} (needed for {purpose})")
    return None


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


def _layer_kinds(cfg: Mapping[str, Any], num_layers: int, notes: list[str]) -> tuple[list[str], int | None]:
    """Per-layer kinds and sliding window from the forms HF configs use."""
    model_type = str(cfg.get("model_type") or "")
    window = cfg.get("sliding_window")
    if window is not None and (isinstance(window, bool) or not isinstance(window, int)):
        raise InputError(f"config: field sliding_window = {window!r}: expected an integer or null")
    if window is not None and not 0 < window <= _FIELD_MAX["sliding_window"]:
        raise InputError(f"config: field sliding_window = {window}: expected a positive integer or null")

    # 1. Explicit per-layer list (transformers >= 4.5x: gpt-oss, Gemma 3, Qwen3-Next, ...).
    layer_types = cfg.get("layer_types")
    if isinstance(layer_types, list):
        if len(layer_types) != num_layers:
            raise InputError(
                f"config: layer_types has {len(layer_types)} entries, expected num_hidden_layers = {num_layers}"
            )
        table = {
            "full_attention": LAYER_FULL,
            "attention": LAYER_FULL,
            "sliding_attention": LAYER_SLIDING,
            "chunked_attention": LAYER_FULL,
            "linear_attention": LAYER_LINEAR,
            "mamba": LAYER_MAMBA,
        }
        kinds = []
        for t in layer_types:
            if t not in table:
                raise InputError(f"config: layer_types entry {t!r}: expected one of {', '.join(table)}")
            kinds.append(table[t])
        if "chunked_attention" in layer_types:
            notes.append("chunked local attention layers are counted as full attention (upper bound)")
        if LAYER_SLIDING in kinds and window is None:
            raise InputError("config: missing field sliding_window (layer_types names sliding_attention layers)")
        return kinds, (window if LAYER_SLIDING in kinds else None)

    # 2. Nemotron-H: one character per layer.
    pattern = cfg.get("hybrid_override_pattern")
    if isinstance(pattern, str):
        if len(pattern) != num_layers:
            raise InputError(
                f"config: hybrid_override_pattern has {len(pattern)} layers, expected {num_layers}"
            )
        table = {"M": LAYER_MAMBA, "*": LAYER_FULL, "-": LAYER_NONE, "E": LAYER_NONE}
        try:
            return [table[c] for c in pattern], None
        except KeyError as exc:
            raise InputError(f"config: hybrid_override_pattern character {exc.args[0]!r}: expected M, *, - or E") from None

    # 3. Jamba / Granite-4 hybrid style list.
    block_types = cfg.get("layers_block_type")
    if isinstance(block_types, list) and len(block_types) == num_layers:
        return [LAYER_MAMBA if t == "mamba" else LAYER_FULL for t in block_types], None

    # 4. Kimi-Linear: 1-based layer lists.
    lin = cfg.get("linear_attn_config")
    if isinstance(lin, Mapping) and lin.get("kda_layers"):
        if not isinstance(lin["kda_layers"], list) or not all(
                isinstance(i, int) and not isinstance(i, bool) for i in lin["kda_layers"]):
            raise InputError("config: field linear_attn_config.kda_layers: expected a list of layer numbers")
        kda = set(lin["kda_layers"])
        return [LAYER_LINEAR if (i + 1) in kda else LAYER_FULL for i in range(num_layers)], None

    # 5. Qwen3-Next / Qwen3.5: every n-th layer is full attention, the rest Gated DeltaNet.
    interval = cfg.get("full_attention_interval")
    if isinstance(interval, int) and interval > 0 and _gdn_dims(cfg) is not None:
        return [LAYER_FULL if (i + 1) % interval == 0 else LAYER_LINEAR for i in range(num_layers)], None

    # 6. Sliding-window patterns by model family. Qwen configs carry a sliding_window value
    # but switch it off with use_sliding_window (HF default False for the Qwen family).
    use_sw = cfg.get("use_sliding_window", model_type not in _QWEN_TYPES)
    if window is not None and use_sw is not False:
        if model_type.startswith("gemma3") or model_type == "cohere2":
            every = cfg.get("sliding_window_pattern") or (6 if model_type.startswith("gemma3") else 4)
            if not isinstance(every, int) or every <= 0:
                raise InputError(f"config: field sliding_window_pattern = {every!r}: expected a positive integer")
            return [LAYER_FULL if (i + 1) % every == 0 else LAYER_SLIDING for i in range(num_layers)], window
        if model_type == "gemma2":
            return [LAYER_SLIDING if i % 2 == 0 else LAYER_FULL for i in range(num_layers)], window
        notes.append(f"sliding_window {window} with no layer pattern: every layer treated as sliding")
        return [LAYER_SLIDING] * num_layers, window

    if model_type.startswith("nemotron_h") or model_type in ("jamba", "falcon_h1", "zamba2"):
        raise InputError(
            f"config: model_type {model_type} is hybrid but the layer map is missing "
            "(expected hybrid_override_pattern or layers_block_type)"
        )
    return [LAYER_FULL] * num_layers, None


_QWEN_TYPES = ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "qwen2_vl", "qwen2_5_vl")


def _gdn_dims(cfg: Mapping[str, Any]) -> dict[str, Any] | None:
    src: Mapping[str, Any] = cfg
    if "linear_num_value_heads" not in cfg and isinstance(cfg.get("hybrid_state_dims"), Mapping):
        src = cfg["hybrid_state_dims"]
    if "linear_num_value_heads" not in src:
        return None
    return dict(src)


def model_shape(config: Mapping[str, Any]) -> ModelShape:
    """Read the KV-relevant architecture of a model from its HF ``config.json`` dict.

    Supports MHA/GQA/MQA (Llama, Qwen, Mistral, ...), MLA (DeepSeek-V2/V3, Kimi: a
    ``kv_lora_rank`` field), sliding-window layer maps (``layer_types``, Gemma 2/3 patterns,
    all-sliding Mistral-style), Nemotron-H (``hybrid_override_pattern``), Jamba-style
    ``layers_block_type``, Qwen3-Next/3.5 Gated DeltaNet (``full_attention_interval`` +
    ``linear_*`` dims) and Kimi-Linear KDA (``linear_attn_config``). A nested ``text_config``
    (multimodal models) is read first, top-level fields are the fallback.

    Source of the field semantics: transformers config classes; how vLLM consumes them:
    ``config/model.py`` (``get_num_kv_heads``, ``get_head_size``, ``use_mla``) @ v0.11.0.

    Args:
        config: the parsed ``config.json`` (a dict).

    Returns:
        The ModelShape.

    Raises:
        InputError: a field needed for the KV size is missing or malformed; the message is one
            line naming the field (``config: missing field num_hidden_layers ...``).
    """
    cfg = _text_config(config)
    notes: list[str] = []
    num_layers = _int_field(cfg, "num_hidden_layers", "n_layer", "num_layers", "n_layers")
    if num_layers <= 0:
        raise InputError(f"config: field num_hidden_layers = {num_layers}: expected a positive integer")
    n_heads = _int_field(cfg, "num_attention_heads", "n_head", required=False)
    hidden = _int_field(cfg, "hidden_size", "d_model", "n_embd", required=False)
    vocab = _int_field(cfg, "vocab_size", required=False)

    dtype_name = cfg.get("torch_dtype") or cfg.get("dtype")
    if dtype_name is None:
        dtype_name = "bfloat16"
        notes.append("config has no torch_dtype: assumed bfloat16 (2 bytes)")
    dtype_name = str(dtype_name).removeprefix("torch.")
    dbytes = dtype_bytes(dtype_name)
    if dbytes == 4:
        # vLLM's dtype="auto" serves fp32 checkpoints in bf16 (config/model.py _get_and_verify_dtype).
        notes.append("fp32 checkpoint: vLLM dtype=auto serves it in bfloat16 (2 bytes)")
        dtype_name, dbytes = "bfloat16", 2

    kinds, window = _layer_kinds(cfg, num_layers, notes)

    kv_lora_rank = cfg.get("kv_lora_rank")
    state_kind = None
    state_dims: dict[str, int] = {}
    ssm_dtype = cfg.get("mamba_ssm_cache_dtype") or cfg.get("mamba_ssm_dtype")

    if LAYER_MAMBA in kinds:
        state_kind = "mamba2"
        heads = _int_field(cfg, "mamba_num_heads", "mamba_n_heads", required=False)
        hdim = _int_field(cfg, "mamba_head_dim", "mamba_d_head", required=False)
        inter = _int_field(cfg, "mamba_intermediate_size", required=False)
        if inter is None and heads is not None and hdim is not None:
            inter = heads * hdim
        if inter is None and hidden is not None and cfg.get("mamba_expand") is not None:
            inter = int(cfg["mamba_expand"] * hidden)
        state = _int_field(cfg, "ssm_state_size", "mamba_d_state", required=False)
        groups = _int_field(cfg, "n_groups", "mamba_n_groups", required=False)
        conv = _int_field(cfg, "conv_kernel", "mamba_d_conv", required=False)
        if None not in (heads, hdim, inter, state, groups, conv):
            state_dims = dict(
                num_heads=heads, head_dim=hdim, intermediate_size=inter,
                state_size=state, n_groups=groups, conv_kernel=conv,
            )
        else:
            notes.append(
                "Mamba state dims incomplete (need mamba_num_heads, mamba_head_dim, ssm_state_size, "
                "n_groups, conv_kernel): state page unknown, give --block-size"
            )
    elif LAYER_LINEAR in kinds:
        lin = cfg.get("linear_attn_config")
        gdn = _gdn_dims(cfg)
        if isinstance(lin, Mapping) and lin.get("kda_layers"):
            state_kind = "kda"
            heads, hdim = lin.get("num_heads"), lin.get("head_dim")
            conv = lin.get("short_conv_kernel_size", 4)
            if isinstance(heads, int) and isinstance(hdim, int):
                state_dims = dict(num_heads=heads, head_dim=hdim,
                                  conv_kernel=_int_field({"short_conv_kernel_size": conv}, "short_conv_kernel_size"))
            else:
                notes.append("KDA state dims missing (linear_attn_config.num_heads/head_dim): give --block-size")
        elif gdn is not None:
            state_kind = "gated_delta_net"
            purpose = "the Gated DeltaNet state size"
            state_dims = dict(
                num_k_heads=_int_field(gdn, "linear_num_key_heads", purpose=purpose),
                num_v_heads=_int_field(gdn, "linear_num_value_heads", purpose=purpose),
                head_k_dim=_int_field(gdn, "linear_key_head_dim", purpose=purpose),
                head_v_dim=_int_field(gdn, "linear_value_head_dim", purpose=purpose),
                conv_kernel=_int_field(gdn, "linear_conv_kernel_dim", purpose=purpose),
            )
        else:
            notes.append("linear-attention layers without state dims: give --block-size")
            state_kind = "linear"

    has_attention = any(k in _ATTENTION_LAYERS for k in kinds)
    if kv_lora_rank is not None:
        attention_kind = "mla"
        kv_lora_rank = _int_field(cfg, "kv_lora_rank")
        rope = _int_field(cfg, "qk_rope_head_dim", zero_ok=True)
        kv_heads = 1
        head_dim = kv_lora_rank + rope
    elif has_attention:
        attention_kind = "mha_gqa"
        rope = None
        kv_heads = _int_field(cfg, "num_key_value_heads", "num_kv_heads", "multi_query_group_num", required=False)
        if kv_heads is None:
            if cfg.get("multi_query") is True:
                kv_heads = 1
            elif n_heads is not None:
                kv_heads = n_heads  # HF default: no GQA field means MHA
            else:
                raise InputError("config: missing field num_key_value_heads (and no num_attention_heads)")
        head_dim = _int_field(cfg, "head_dim", "kv_channels", required=False)
        if head_dim is None:
            if hidden is None or n_heads is None:
                raise InputError("config: missing field head_dim (and no hidden_size / num_attention_heads to derive it)")
            head_dim = hidden // n_heads
            if head_dim <= 0:
                raise InputError(f"config: hidden_size {hidden} / num_attention_heads {n_heads} = {head_dim}: "
                                 "expected a positive head_dim")
    else:
        attention_kind, kv_heads, head_dim, rope = "none", 0, 0, None

    return ModelShape(
        model_type=(str(cfg["model_type"]) if cfg.get("model_type") is not None else None),
        num_layers=num_layers,
        num_attention_heads=n_heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        hidden_size=hidden,
        vocab_size=vocab,
        dtype=dtype_name,
        dtype_bytes=dbytes,
        attention_kind=attention_kind,
        layer_kinds=tuple(kinds),
        sliding_window=window,
        kv_lora_rank=kv_lora_rank if attention_kind == "mla" else None,
        qk_rope_head_dim=rope if attention_kind == "mla" else None,
        state_kind=state_kind,
        state_dims=tuple(sorted(state_dims.items())),
        ssm_dtype=(str(ssm_dtype).removeprefix("torch.") if ssm_dtype else None),
        notes=tuple(notes),
    )


# --------------------------------------------------------------------------------------------
# Per-token bytes
# --------------------------------------------------------------------------------------------


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


def kv_heads_per_rank(num_kv_heads: int, tensor_parallel_size: int = 1) -> int:
    """KV heads held by one tensor-parallel rank: ``max(1, kv_heads // tp)``.

    When ``tp > num_kv_heads`` heads are replicated, so a rank never holds less than one
    (``config/model.py get_num_kv_heads`` @ v0.11.0; reference §3.1).

    Args:
        num_kv_heads: KV heads of the whole model.
        tensor_parallel_size: TP size.

    Returns:
        Heads per rank.

    Raises:
        ValueError: ``tensor_parallel_size`` not positive.
    """
    _check_positive(tensor_parallel_size=tensor_parallel_size)
    return max(1, num_kv_heads // tensor_parallel_size)


def attention_bytes_per_token_per_layer(
    shape: ModelShape, kv_cache_dtype: str = "auto", tensor_parallel_size: int = 1
) -> int:
    """Bytes one attention layer stores per token on one TP rank.

    MHA/GQA/MQA: ``2 × H_kv_per_rank × head_dim × s`` (K and V). MLA: ``(kv_lora_rank +
    qk_rope_head_dim) × s``, one latent, not split by TP; ``fp8_ds_mla`` is a fixed 656 bytes.
    Source: ``v1/kv_cache_interface.py`` ``AttentionSpec`` / ``MLAAttentionSpec`` @ v0.11.0.

    Args:
        shape: from :func:`model_shape`.
        kv_cache_dtype: vLLM ``--kv-cache-dtype``.
        tensor_parallel_size: TP size.

    Returns:
        Bytes per token per layer (0 for attention-free models).

    Raises:
        ValueError: unknown ``kv_cache_dtype`` or non-positive ``tensor_parallel_size``.
    """
    _check_positive(tensor_parallel_size=tensor_parallel_size)
    if shape.attention_kind == "none":
        return 0
    if shape.attention_kind == "mla":
        if str(kv_cache_dtype).lower() == "fp8_ds_mla":
            return FP8_DS_MLA_BYTES_PER_TOKEN
        return shape.head_dim * kv_cache_dtype_bytes(kv_cache_dtype, shape.dtype_bytes)
    s = kv_cache_dtype_bytes(kv_cache_dtype, shape.dtype_bytes)
    return 2 * kv_heads_per_rank(shape.num_kv_heads, tensor_parallel_size) * shape.head_dim * s


def pipeline_stage_layers(num_layers: int, pipeline_parallel_size: int = 1) -> list[range]:
    """Decoder layers of each pipeline stage, as vLLM splits them.

    Even split; the remainder goes one layer each to the stages before the last, starting
    with the second-to-last (``model_executor/models/utils.py get_pp_indices``; R23 in the
    capacity fixtures: 27 layers over PP2 → 14 + 13). ``VLLM_PP_LAYER_PARTITION`` is not
    modelled.

    Args:
        num_layers: decoder layers.
        pipeline_parallel_size: PP size.

    Returns:
        One ``range`` of layer indices per stage.

    Raises:
        ValueError: non-positive sizes or more stages than layers.
    """
    _check_positive(num_layers=num_layers, pipeline_parallel_size=pipeline_parallel_size)
    if pipeline_parallel_size > num_layers:
        raise ValueError(f"pipeline_parallel_size {pipeline_parallel_size} > num_layers {num_layers}")
    sizes = [num_layers // pipeline_parallel_size] * pipeline_parallel_size
    for i in range(num_layers % pipeline_parallel_size):
        sizes[-(i + 2)] += 1
    out, start = [], 0
    for n in sizes:
        out.append(range(start, start + n))
        start += n
    return out


def kv_bytes_per_token(
    shape: ModelShape,
    kv_cache_dtype: str = "auto",
    tensor_parallel_size: int = 1,
    pipeline_parallel_size: int = 1,
) -> int:
    """Plain per-token KV bytes of one worker (the "seed formula").

    ``attention_layers × bytes_per_token_per_layer`` where MHA/GQA/MQA use
    ``2 × max(1, kv_heads // tp) × head_dim × dtype_bytes`` and MLA uses
    ``(kv_lora_rank + qk_rope_head_dim) × dtype_bytes`` (no ×2, not split by TP). With PP the
    layers of the largest stage count. Sliding-window layers are charged like full attention
    here; Mamba / linear-attention layers are left out (their state is per request, not per
    token) — see :func:`kv_cache_layout` for what vLLM actually allocates.
    Example: Llama-3-8B bf16 → ``2 × 32 × 8 × 128 × 2 = 131072`` bytes (reference §3.1).

    Args:
        shape: from :func:`model_shape`.
        kv_cache_dtype: vLLM ``--kv-cache-dtype`` (``auto`` = model dtype).
        tensor_parallel_size: TP size.
        pipeline_parallel_size: PP size.

    Returns:
        Bytes per token per worker.

    Raises:
        ValueError: unknown ``kv_cache_dtype`` or non-positive parallel sizes.
    """
    per_layer = attention_bytes_per_token_per_layer(shape, kv_cache_dtype, tensor_parallel_size)
    return per_layer * max(
        sum(1 for i in stage if shape.layer_kinds[i] in _ATTENTION_LAYERS)
        for stage in pipeline_stage_layers(shape.num_layers, pipeline_parallel_size)
    )


def state_bytes_per_layer(
    shape: ModelShape,
    tensor_parallel_size: int = 1,
    ssm_dtype: str | None = None,
    conv_dtype: str | None = None,
) -> int | None:
    """Bytes of one Mamba / linear-attention layer's state for one request on one TP rank.

    Shapes as ``MambaStateShapeCalculator`` (``model_executor/layers/mamba/mamba_utils.py``):

    * Mamba-2: conv ``(conv_kernel − 1) × (intermediate + 2 × n_groups' × state) / tp`` plus
      SSM ``heads/tp × head_dim × state`` (``n_groups`` rounded up to a multiple of tp when it
      does not divide).
    * Gated DeltaNet: conv ``(conv_kernel − 1) × (2 × k_heads × k_dim + v_heads × v_dim) / tp``
      plus ``v_heads/tp × k_dim × v_dim``.
    * KDA: conv ``3 × (conv_kernel − 1) × heads × dim / tp`` plus ``heads/tp × dim × dim``.

    The conv state uses the model dtype; the SSM state uses ``ssm_dtype`` (else the config's
    ``mamba_ssm_dtype``, else fp32 for KDA and the model dtype otherwise).

    Args:
        shape: from :func:`model_shape`.
        tensor_parallel_size: TP size.
        ssm_dtype: override of the recurrent-state dtype (vLLM ``--mamba-ssm-cache-dtype``).
        conv_dtype: override of the conv-state dtype (vLLM ``--mamba-cache-dtype``).

    Returns:
        Bytes, or None when the model has no state layers or the dims are unknown.

    Raises:
        InputError: unknown dtype name.
    """
    if not shape.state_dims or shape.state_kind is None:
        return None
    tp = tensor_parallel_size
    d = dict(shape.state_dims)
    conv_b = dtype_bytes(conv_dtype) if conv_dtype else shape.dtype_bytes
    default_ssm = "float32" if shape.state_kind == "kda" else shape.dtype
    ssm_b = dtype_bytes(ssm_dtype or shape.ssm_dtype or default_ssm)
    if shape.state_kind == "mamba2":
        groups = d["n_groups"]
        if groups % tp:
            groups += tp - groups % tp if groups > 1 else tp - groups
        conv = (d["conv_kernel"] - 1) * (d["intermediate_size"] + 2 * groups * d["state_size"]) // tp
        ssm = d["num_heads"] // tp * d["head_dim"] * d["state_size"]
    elif shape.state_kind == "gated_delta_net":
        conv_dim = 2 * d["num_k_heads"] * d["head_k_dim"] + d["num_v_heads"] * d["head_v_dim"]
        conv = (d["conv_kernel"] - 1) * conv_dim // tp
        ssm = d["num_v_heads"] // tp * d["head_k_dim"] * d["head_v_dim"]
    elif shape.state_kind == "kda":
        proj = d["num_heads"] * d["head_dim"]
        conv = 3 * (d["conv_kernel"] - 1) * proj // tp
        ssm = d["num_heads"] // tp * d["head_dim"] * d["head_dim"]
    else:
        return None
    return conv * conv_b + ssm * ssm_b


# --------------------------------------------------------------------------------------------
# KV-cache groups (vLLM V1)
# --------------------------------------------------------------------------------------------


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


def hybrid_attention_block_size(
    state_page_bytes: int, attention_page_bytes_per_token: int, mla: bool = False, cutlass_mla: bool = False
) -> int:
    """Attention block size vLLM forces so one attention page ≥ one Mamba / linear state page.

    ``align × ceil(state_page / (align × attention_bytes_per_token))`` with ``align`` = 16,
    64 for MLA, 128 for CUTLASS MLA (``model_executor/models/config.py
    HybridAttentionMambaModelConfig`` @ v0.11.0; log line K10 "Setting attention block size to
    N tokens"). The state page is then padded up to the attention page.

    Args:
        state_page_bytes: one layer's state for one request, bytes.
        attention_page_bytes_per_token: bytes per token of one attention layer.
        mla: attention layers are MLA.
        cutlass_mla: the CUTLASS MLA backend is used (alignment 128).

    Returns:
        Block size, tokens.

    Raises:
        ValueError: non-positive inputs.
    """
    _check_positive(state_page_bytes=state_page_bytes, attention_page_bytes_per_token=attention_page_bytes_per_token)
    align = 128 if cutlass_mla else (64 if mla else 16)
    return align * math.ceil(state_page_bytes / (align * attention_page_bytes_per_token))


def kv_cache_layout(
    shape: ModelShape,
    kv_cache_dtype: str = "auto",
    tensor_parallel_size: int = 1,
    pipeline_parallel_size: int = 1,
    block_size: int | None = None,
    *,
    hybrid_allocator: bool = True,
    mamba_ssm_dtype: str | None = None,
) -> KVCacheLayout:
    """KV-cache groups, effective block size and block bytes of the limiting worker.

    V1 (``v1/core/kv_cache_utils.py`` ``_get_kv_cache_groups_uniform_page_size`` @ v0.11.0):
    layers are grouped by spec (full, sliding, state); the group size is the smallest type's
    layer count, or the largest when it is < 1.25× the smallest; every type is cut into groups
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
        mamba_ssm_dtype: override of the recurrent-state dtype.

    Returns:
        The KVCacheLayout.

    Raises:
        InputError: hybrid model whose state size is unknown and no ``block_size`` given.
        ValueError: bad dtype or non-positive sizes.
    """
    user_block = block_size
    block = block_size or DEFAULT_BLOCK_SIZE
    _check_positive(block_size=block)
    notes: list[str] = []
    per_tok = attention_bytes_per_token_per_layer(shape, kv_cache_dtype, tensor_parallel_size)
    best: KVCacheLayout | None = None
    for stage in pipeline_stage_layers(shape.num_layers, pipeline_parallel_size):
        kinds = [shape.layer_kinds[i] for i in stage]
        layout = _stage_layout(
            shape, kinds, per_tok, block, user_block, tensor_parallel_size,
            hybrid_allocator, mamba_ssm_dtype, notes,
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
) -> KVCacheLayout:
    n_full = kinds.count(LAYER_FULL)
    n_slide = kinds.count(LAYER_SLIDING)
    n_state = sum(1 for k in kinds if k in _STATE_LAYERS)
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
        state_bytes = state_bytes_per_layer(shape, tp, ssm_dtype)
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
            if ssm_dtype or shape.ssm_dtype:
                notes.append(f"{shape.state_kind} SSM state dtype {ssm_dtype or shape.ssm_dtype}")
            else:
                default = "float32" if shape.state_kind == "kda" else shape.dtype
                notes.append(
                    f"{shape.state_kind} SSM state dtype assumed {default} (config has no mamba_ssm_dtype; "
                    "vLLM --mamba-ssm-cache-dtype changes the state page and the forced block size)"
                )
            forced = hybrid_attention_block_size(state_bytes, per_tok, mla=shape.attention_kind == "mla")
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
    group_size = largest if largest < smallest * 1.25 else smallest
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
    _check_positive(block_bytes=block_bytes)
    if kv_memory_bytes <= 0:
        return 0
    return int(kv_memory_bytes // block_bytes)


# --------------------------------------------------------------------------------------------
# What vLLM prints
# --------------------------------------------------------------------------------------------


def parse_vllm_version(text: str | None) -> tuple[int, int, int] | None:
    """``(major, minor, patch)`` from a vLLM version string, None when absent.

    Accepts ``"0.10.1.1"``, ``"v0.11.0"``, ``"0.13.0+faa43dbf.nv26.01"``,
    ``"0.11.0rc2.dev98+g393de22d2"`` and free text containing such a version (the first
    ``X.Y[.Z]`` wins). Version semantics: reference "How this was verified".

    Args:
        text: version string, or None.

    Returns:
        The version tuple, or None for None.

    Raises:
        ValueError: the text holds no ``X.Y`` version.
    """
    if text is None:
        return None
    m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", str(text))
    if not m:
        raise ValueError(f"vLLM version {text!r}: expected a version such as 0.11.0")
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def _version(v: str | tuple[int, int, int] | None) -> tuple[int, int, int] | None:
    return v if isinstance(v, tuple) or v is None else parse_vllm_version(v)


def uses_v0_engine(vllm_version: str | tuple[int, int, int] | None) -> bool:
    """Whether that vLLM version runs the V0 engine by default (< 0.8).

    Source: reference "How this was verified" (``VLLM_USE_V1`` defaults to 1 from 0.8).

    Args:
        vllm_version: version string or tuple; None = unknown.

    Returns:
        True for V0, False for V1 or unknown.

    Raises:
        ValueError: unparseable version string.
    """
    v = _version(vllm_version)
    return v is not None and v < (0, 8, 0)


TOKEN_LINE_GROUP_AWARE_FROM = (0, 21, 0)
"""First version assumed to print ``int(max_concurrency × max_model_len)`` as "GPU KV cache
size". Observed: 0.20.0 still prints ``num_blocks // groups × block`` (U01), 0.24.0 prints the
group-aware number (R17; reference K4). The release in between is not verified."""

MAMBA_ALIGN_DEFAULT_FROM = (0, 20, 0)
"""First version assumed to default ``mamba_cache_mode='align'`` with prefix caching (two
state pages per request). Absent at 0.13.0 (R35 reproduces with one page), seen at 0.20.0
(U01 log line "Mamba cache mode is set to 'align'"). The exact release is not verified."""


def default_mamba_cache_mode(vllm_version: str | tuple[int, int, int] | None, prefix_caching: bool = True) -> str:
    """``"align"`` or ``"none"``: how many state pages vLLM keeps per request by default.

    See :data:`MAMBA_ALIGN_DEFAULT_FROM` (``config/cache.py`` / ``MambaSpec`` in
    ``v1/kv_cache_interface.py``: ``align`` keeps 2 pages per request, ``none`` 1).

    Args:
        vllm_version: version string or tuple; None → ``"none"``.
        prefix_caching: prefix caching on (V1 default).

    Returns:
        The mode name.

    Raises:
        ValueError: unparseable version string.
    """
    v = _version(vllm_version)
    if prefix_caching and v is not None and v >= MAMBA_ALIGN_DEFAULT_FROM:
        return "align"
    return "none"


def group_blocks_per_request(
    group: KVCacheGroup,
    block_size: int,
    max_model_len: int,
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
    mamba_cache_mode: str = "none",
) -> int:
    """Blocks one max-length request needs in one group (worst case).

    Full attention ``ceil(max_model_len / B)``; sliding window
    ``ceil(min(W − 1 + max_num_batched_tokens, max_model_len) / B) + 1``; state groups 1 page
    (``"none"``), 2 (``"align"``) or ``ceil(max_model_len / B)`` (``"all"``).
    Source: ``max_memory_usage_bytes`` of the specs in ``v1/kv_cache_interface.py``
    (@ v0.11.0; the ``align`` / ``all`` modes @ v0.24.0).

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
    _check_positive(block_size=block_size, max_model_len=max_model_len)
    if group.kind == "full_attention":
        return math.ceil(max_model_len / block_size)
    if group.kind == "sliding_window":
        w = group.sliding_window or max_model_len
        return math.ceil(min(w - 1 + max_num_batched_tokens, max_model_len) / block_size) + 1
    if mamba_cache_mode == "none":
        return 1
    if mamba_cache_mode == "align":
        return 2
    if mamba_cache_mode == "all":
        return math.ceil(max_model_len / block_size)
    raise ValueError(f"mamba_cache_mode {mamba_cache_mode!r}: expected none, align or all")


def blocks_per_request(
    layout: KVCacheLayout,
    max_model_len: int,
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
    mamba_cache_mode: str = "none",
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
        group_blocks_per_request(g, layout.block_size, max_model_len, max_num_batched_tokens, mamba_cache_mode)
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
    _check_positive(max_model_len=max_model_len)
    v = _version(vllm_version)
    if v is not None and v < (0, 8, 0):
        return num_gpu_blocks * layout.block_size / max_model_len
    return num_gpu_blocks / blocks_per_request(layout, max_model_len, max_num_batched_tokens, mamba_cache_mode)


def kv_capacity_tokens(
    num_gpu_blocks: int,
    layout: KVCacheLayout,
    *,
    vllm_version: str | tuple[int, int, int] | None = None,
    max_model_len: int | None = None,
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
    mamba_cache_mode: str = "none",
) -> int:
    """The token count vLLM prints as "GPU KV cache size: N tokens" (K4/K6).

    * V0 (< 0.8): ``num_gpu_blocks × block_size`` (``# GPU blocks`` × B).
    * V1 0.8 – 0.20: ``num_blocks // num_groups × block_size`` (all layers charged as full
      attention, padding layers included; one group → ``num_blocks × B``).
    * V1 ≥ 0.21 (0.24 verified): ``int(max_concurrency × max_model_len)``, which folds in the
      sliding-window and Mamba savings (:data:`TOKEN_LINE_GROUP_AWARE_FROM`).
    * Unknown version: the 0.8–0.20 formula.

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
    v = _version(vllm_version)
    if v is not None and v < (0, 8, 0):
        return num_gpu_blocks * layout.block_size
    if v is not None and v >= TOKEN_LINE_GROUP_AWARE_FROM and max_model_len:
        conc = max_concurrency(
            num_gpu_blocks, layout, max_model_len,
            max_num_batched_tokens=max_num_batched_tokens, mamba_cache_mode=mamba_cache_mode,
        )
        return int(conc * max_model_len)
    return num_gpu_blocks // layout.num_groups * layout.block_size


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
    v = _version(vllm_version)
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


# --------------------------------------------------------------------------------------------
# One-call estimate
# --------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------
# Inverse questions (remedies)
# --------------------------------------------------------------------------------------------


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
    _check_positive(total_gpu_bytes=total_gpu_bytes)
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
    _check_positive(num_seqs=num_seqs)
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
    _check_positive(block_size=block_size)
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


# --------------------------------------------------------------------------------------------
# Weights
# --------------------------------------------------------------------------------------------

_QUANT_BYTES = {
    None: None,
    "fp8": 1.0,
    "fbgemm_fp8": 1.0,
    "modelopt": 1.0,
    "compressed-tensors": None,  # depends on the scheme
    "awq": 0.5,
    "awq_marlin": 0.5,
    "gptq": 0.5,
    "gptq_marlin": 0.5,
    "bitsandbytes": 0.5,
    "mxfp4": 0.5,
    "nvfp4": 0.5,
    "modelopt_fp4": 0.5,
    "int8": 1.0,
    "w8a8": 1.0,
}

_GROUP_SCALE_OVERHEAD = (2 + 0.5) / 128
"""4-bit group quantization (group 128): one fp16 scale + one 4-bit zero point per 128
weights, bytes per weight."""


def parameter_count(config: Mapping[str, Any]) -> dict[str, int]:
    """Parameter count of a decoder-only transformer from its config, by part (unit: parameters).

    Source: the Hugging Face modelling code's layer shapes for Llama/Qwen2/Mistral (dense), Mixtral/Qwen-MoE
    (experts) and DeepSeek-V2/V3 (MLA); vLLM loads the same tensors (``model_executor/models/*.py``).

    Architecture formula: embeddings ``V × h``; LM head ``V × h`` unless
    ``tie_word_embeddings``; per layer attention (q, k, v, o — MLA: q or q-LoRA, kv_a, kv_b,
    o), norms, optional qkv bias (Qwen2), dense MLP ``3 × h × i`` (gated) or MoE
    ``experts × 3 × h × moe_i`` + shared experts + router. Mamba / linear layers are not
    counted (they are reported in ``"uncounted_layers"``).

    Args:
        config: HF config dict.

    Returns:
        Dict with ``embeddings``, ``lm_head``, ``attention``, ``mlp``, ``experts``, ``norms``,
        ``total`` and ``uncounted_layers``.

    Raises:
        InputError: a needed field is missing (hidden_size, vocab_size, intermediate_size ...).
    """
    cfg = _text_config(config)
    shape = model_shape(config)
    w = "the weights estimate"
    h = _int_field(cfg, "hidden_size", "d_model", "n_embd", purpose=w)
    vocab = _int_field(cfg, "vocab_size", purpose=w)
    n_heads = _int_field(cfg, "num_attention_heads", "n_head", purpose=w)
    tied = bool(cfg.get("tie_word_embeddings", False))
    embeddings = vocab * h
    lm_head = 0 if tied else vocab * h

    if shape.attention_kind == "mla":
        rope = shape.qk_rope_head_dim or 0
        nope = _int_field(cfg, "qk_nope_head_dim", required=False, zero_ok=True)
        v_dim = _int_field(cfg, "v_head_dim", required=False, zero_ok=True)
        if nope is None:
            nope = 128
        if v_dim is None:
            v_dim = 128
        q_lora = cfg.get("q_lora_rank")
        if q_lora:
            q = h * q_lora + q_lora * n_heads * (nope + rope)
        else:
            q = h * n_heads * (nope + rope)
        attn = q + h * (shape.kv_lora_rank + rope) + shape.kv_lora_rank * n_heads * (nope + v_dim) + n_heads * v_dim * h
    else:
        head_dim = shape.head_dim or h // n_heads
        q_out = n_heads * head_dim
        kv_out = shape.num_kv_heads * head_dim
        attn = h * q_out + 2 * h * kv_out + q_out * h
        # q/k/v biases: attention_bias=true, or Qwen / Qwen2 (always biased, no config flag).
        if cfg.get("attention_bias") or str(cfg.get("model_type", "")) in ("qwen", "qwen2", "qwen2_moe"):
            attn += q_out + 2 * kv_out

    n_experts = _int_field(cfg, "num_experts", "num_local_experts", "n_routed_experts", required=False, zero_ok=True)
    moe_i = _int_field(cfg, "moe_intermediate_size", required=False, zero_ok=True)
    dense_i = _int_field(cfg, "intermediate_size", "ffn_hidden_size", required=False)
    attn_layers = shape.num_attention_layers
    state_layers = shape.num_state_layers
    layers = shape.num_layers
    mlp = experts = 0
    if n_experts:
        if moe_i is None:
            raise InputError("config: missing field moe_intermediate_size (MoE model)")
        first_dense = _int_field(cfg, "first_k_dense_replace", required=False, zero_ok=True) or 0
        n_shared = _int_field(cfg, "n_shared_experts", required=False, zero_ok=True) or 0
        shared_i = _int_field(cfg, "shared_expert_intermediate_size", required=False, zero_ok=True) or n_shared * moe_i
        moe_layers = layers - first_dense
        experts = moe_layers * (n_experts * 3 * h * moe_i + h * n_experts + 3 * h * shared_i)
        if first_dense:
            if dense_i is None:
                raise InputError("config: missing field intermediate_size (dense layers of a MoE model)")
            mlp = first_dense * 3 * h * dense_i
    else:
        if dense_i is None:
            raise InputError("config: missing field intermediate_size (needed for the weights estimate)")
        mlp = layers * 3 * h * dense_i
    attention = attn * attn_layers
    norms = (2 * layers + 1) * h
    total = embeddings + lm_head + attention + mlp + experts + norms
    return {
        "embeddings": embeddings,
        "lm_head": lm_head,
        "attention": attention,
        "mlp": mlp,
        "experts": experts,
        "norms": norms,
        "total": total,
        "uncounted_layers": state_layers,
    }


def weights_bytes(
    config: Mapping[str, Any],
    quantization: str | None = None,
    *,
    safetensors_index: Mapping[str, Any] | None = None,
) -> int:
    """Estimated bytes of the whole model's weights (all GPUs together).

    If ``safetensors_index`` (a parsed ``model.safetensors.index.json``) is given, or
    ``config`` itself is such an index, its ``metadata.total_size`` is returned: the checkpoint
    bytes, exact for the stored format. Otherwise from :func:`parameter_count`: bf16/fp16 2
    bytes per parameter, fp8 1, 4-bit AWQ/GPTQ/NVFP4 0.5 + group scales (≈0.52); embeddings and
    LM head stay in the model dtype. This is an estimate (vLLM's "Model loading took X GiB"
    also counts buffers; Llama-3.1-8B bf16: 14.96 GiB here, 14.99 GiB logged).

    Args:
        config: HF config dict (``quantization_config.quant_method`` is used when
            ``quantization`` is None), or a safetensors index dict.
        quantization: vLLM ``--quantization`` value (``fp8``, ``awq``, ``gptq`` ...).
        safetensors_index: optional parsed ``model.safetensors.index.json``.

    Returns:
        Bytes (int).

    Raises:
        InputError: a needed config field is missing or ``metadata.total_size`` is malformed.
    """
    for idx in (safetensors_index, config):
        if isinstance(idx, Mapping) and isinstance(idx.get("metadata"), Mapping) and "total_size" in idx["metadata"]:
            size = idx["metadata"]["total_size"]
            if isinstance(size, bool) or not isinstance(size, (int, float, str)) or not str(size).isdigit():
                raise InputError(f"safetensors index: metadata.total_size = {size!r}: expected an integer")
            return int(size)
    cfg = _text_config(config)
    if quantization is None:
        qc = cfg.get("quantization_config")
        if isinstance(qc, Mapping):
            quantization = qc.get("quant_method")
            if quantization in ("awq", "gptq") and qc.get("bits", 4) == 8:
                quantization = "int8"
    counts = parameter_count(config)
    dbytes = model_shape(config).dtype_bytes
    q = str(quantization).lower() if quantization else None
    per_param = _QUANT_BYTES.get(q, None) if q else None
    if q and q not in _QUANT_BYTES:
        raise ValueError(f"quantization {quantization!r}: expected one of {', '.join(k for k in _QUANT_BYTES if k)}")
    if per_param is None:
        per_param = float(dbytes)
    elif per_param < 1:
        per_param += _GROUP_SCALE_OVERHEAD
    linear = counts["attention"] + counts["mlp"] + counts["experts"]
    kept = counts["embeddings"] + counts["lm_head"] + counts["norms"]
    return int(round(linear * per_param + kept * dbytes))


def weights_bytes_per_gpu(total_weights_bytes: int, tensor_parallel_size: int = 1, pipeline_parallel_size: int = 1) -> int:
    """One worker's share of the weights, bytes: ``total / (tp × pp)`` (estimate).

    vLLM shards linear layers and the vocabulary by TP and layers by PP; norms and some small
    tensors are replicated, so the real share is slightly larger (estimate; compare with the
    "Model loading took X GiB" line, reference §2.2 W2/W3).

    Args:
        total_weights_bytes: whole-model weights, bytes (:func:`weights_bytes`).
        tensor_parallel_size: TP size.
        pipeline_parallel_size: PP size.

    Returns:
        Bytes per worker.

    Raises:
        ValueError: non-positive parallel sizes.
    """
    _check_positive(tensor_parallel_size=tensor_parallel_size, pipeline_parallel_size=pipeline_parallel_size)
    return math.ceil(total_weights_bytes / (tensor_parallel_size * pipeline_parallel_size))


NON_TORCH_BYTES_ESTIMATE = int(0.5 * GIB)
"""Assumed non-torch memory per worker (CUDA context, NCCL), bytes; an estimate."""


def non_kv_bytes_estimate(
    shape: ModelShape,
    weights_per_gpu_bytes: int,
    *,
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
    tensor_parallel_size: int = 1,
    intermediate_size: int | None = None,
    cuda_graph_bytes: int = 0,
) -> int:
    """Rough non-KV memory of one worker, bytes: weights + activation peak + non-torch (+ graphs).

    Activation peak ≈ ``max_num_batched_tokens × (4 × hidden + 2 × intermediate / tp) × 2``
    bytes plus sampler logits ``256 × vocab × 4`` bytes; non-torch 0.5 GiB. An estimate only:
    the startup log's "Available KV cache memory" is authoritative (reference §2.2 M3/M6,
    §3.2 for the budget formula).

    Args:
        shape: from :func:`model_shape`.
        weights_per_gpu_bytes: weights of one worker, bytes.
        max_num_batched_tokens: scheduler token budget (profile run size).
        tensor_parallel_size: TP size.
        intermediate_size: MLP width (default 4 × hidden).
        cuda_graph_bytes: CUDA-graph reservation, bytes (0.21+ budgets it).

    Returns:
        Bytes.
    """
    hidden = shape.hidden_size or 4096
    inter = intermediate_size or 4 * hidden
    act = max_num_batched_tokens * (4 * hidden + 2 * inter // max(1, tensor_parallel_size)) * 2
    act += 256 * (shape.vocab_size or 128_000) * 4
    return weights_per_gpu_bytes + act + NON_TORCH_BYTES_ESTIMATE + cuda_graph_bytes


def _check_positive(**values: float) -> None:
    for name, value in values.items():
        if value is None or value <= 0:
            raise ValueError(f"{name} must be positive, got {value!r}")


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
    "non_kv_bytes_estimate",
]
