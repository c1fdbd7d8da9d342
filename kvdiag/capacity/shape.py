"""ModelShape: the KV-relevant architecture of a model, read from its HF ``config.json``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from kvdiag.errors import InputError

from .config_fields import FIELD_MAX, int_field, text_config_of
from .units import (
    ATTENTION_LAYERS, STATE_LAYERS, LAYER_FULL, LAYER_LINEAR, LAYER_MAMBA, LAYER_NONE, LAYER_SLIDING, dtype_bytes,
)

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
        qk_nope_head_dim: MLA non-rope part of the key head (None unless MLA; sizes pre-0.7.1 vLLM's K/V).
        mla_num_kv_heads: MLA models' ``num_key_value_heads`` (else ``num_attention_heads``): the per-head K/V
            that vLLM before 0.7.1 cached.
        mtp_layers: multi-token-prediction layers the checkpoint ships (``num_nextn_predict_layers`` or
            ``mtp_num_hidden_layers``), None when the config names none.
        mamba_chunk_size: ``mamba_chunk_size`` or ``chunk_size`` of a Mamba model's config (None when absent).
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
    qk_nope_head_dim: int | None = None
    mla_num_kv_heads: int | None = None
    mtp_layers: int | None = None
    mamba_chunk_size: int | None = None

    @property
    def num_attention_layers(self) -> int:
        """Layers that keep per-token K/V (full + sliding)."""
        return sum(1 for k in self.layer_kinds if k in ATTENTION_LAYERS)

    @property
    def num_sliding_layers(self) -> int:
        """Sliding-window attention layers."""
        return self.layer_kinds.count(LAYER_SLIDING)

    @property
    def num_state_layers(self) -> int:
        """Mamba / linear-attention layers (one state per request)."""
        return sum(1 for k in self.layer_kinds if k in STATE_LAYERS)

    @property
    def is_hybrid(self) -> bool:
        """True when vLLM V1 builds more than one kind of KV-cache group."""
        kinds = {k for k in self.layer_kinds if k != LAYER_NONE}
        return len(kinds) > 1

    def state_dim(self, name: str) -> int:
        """One of ``state_dims`` by name (elements); raises KeyError when absent."""
        return dict(self.state_dims)[name]

def _layer_kinds(cfg: Mapping[str, Any], num_layers: int, notes: list[str]) -> tuple[list[str], int | None]:
    """Per-layer kinds and sliding window from the forms HF configs use."""
    model_type = str(cfg.get("model_type") or "")
    window = cfg.get("sliding_window")
    if window is not None and (isinstance(window, bool) or not isinstance(window, int)):
        raise InputError(f"config: field sliding_window = {window!r}: expected an integer or null")
    if window is not None and not 0 < window <= FIELD_MAX["sliding_window"]:
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
    cfg = text_config_of(config)
    notes: list[str] = []
    num_layers = int_field(cfg, "num_hidden_layers", "n_layer", "num_layers", "n_layers")
    if num_layers <= 0:
        raise InputError(f"config: field num_hidden_layers = {num_layers}: expected a positive integer")
    n_heads = int_field(cfg, "num_attention_heads", "n_head", required=False)
    hidden = int_field(cfg, "hidden_size", "d_model", "n_embd", required=False)
    vocab = int_field(cfg, "vocab_size", required=False)

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
        heads = int_field(cfg, "mamba_num_heads", "mamba_n_heads", required=False)
        hdim = int_field(cfg, "mamba_head_dim", "mamba_d_head", required=False)
        inter = int_field(cfg, "mamba_intermediate_size", required=False)
        if inter is None and heads is not None and hdim is not None:
            inter = heads * hdim
        if inter is None and hidden is not None and cfg.get("mamba_expand") is not None:
            inter = int(cfg["mamba_expand"] * hidden)
        state = int_field(cfg, "ssm_state_size", "mamba_d_state", required=False)
        groups = int_field(cfg, "n_groups", "mamba_n_groups", required=False)
        conv = int_field(cfg, "conv_kernel", "mamba_d_conv", required=False)
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
                                  conv_kernel=int_field({"short_conv_kernel_size": conv}, "short_conv_kernel_size"))
            else:
                notes.append("KDA state dims missing (linear_attn_config.num_heads/head_dim): give --block-size")
        elif gdn is not None:
            state_kind = "gated_delta_net"
            purpose = "the Gated DeltaNet state size"
            state_dims = dict(
                num_k_heads=int_field(gdn, "linear_num_key_heads", purpose=purpose),
                num_v_heads=int_field(gdn, "linear_num_value_heads", purpose=purpose),
                head_k_dim=int_field(gdn, "linear_key_head_dim", purpose=purpose),
                head_v_dim=int_field(gdn, "linear_value_head_dim", purpose=purpose),
                conv_kernel=int_field(gdn, "linear_conv_kernel_dim", purpose=purpose),
            )
        else:
            notes.append("linear-attention layers without state dims: give --block-size")
            state_kind = "linear"

    has_attention = any(k in ATTENTION_LAYERS for k in kinds)
    if kv_lora_rank is not None:
        attention_kind = "mla"
        kv_lora_rank = int_field(cfg, "kv_lora_rank")
        rope = int_field(cfg, "qk_rope_head_dim", zero_ok=True)
        kv_heads = 1
        head_dim = kv_lora_rank + rope
    elif has_attention:
        attention_kind = "mha_gqa"
        rope = None
        kv_heads = int_field(cfg, "num_key_value_heads", "num_kv_heads", "multi_query_group_num", required=False)
        if kv_heads is None:
            if cfg.get("multi_query") is True:
                kv_heads = 1
            elif n_heads is not None:
                kv_heads = n_heads  # HF default: no GQA field means MHA
            else:
                raise InputError("config: missing field num_key_value_heads (and no num_attention_heads)")
        head_dim = int_field(cfg, "head_dim", "kv_channels", required=False)
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
        qk_nope_head_dim=(int_field(cfg, "qk_nope_head_dim", required=False, zero_ok=True)
                          if attention_kind == "mla" else None),
        mla_num_kv_heads=(int_field(cfg, "num_key_value_heads", "num_attention_heads", required=False)
                          if attention_kind == "mla" else None),
        mtp_layers=int_field(cfg, "num_nextn_predict_layers", "mtp_num_hidden_layers", required=False, zero_ok=True),
        mamba_chunk_size=(int_field(cfg, "mamba_chunk_size", "chunk_size", required=False)
                          if LAYER_MAMBA in kinds else None),
    )
