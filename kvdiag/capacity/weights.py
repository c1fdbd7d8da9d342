"""Weights: parameter count and bytes of a checkpoint from its config, one worker's share, non-KV memory."""

from __future__ import annotations

import math
from typing import Any, Mapping

from kvdiag.errors import InputError

from .config_fields import int_field, text_config_of
from .shape import ModelShape, model_shape
from .modules import checkpoint_modules
from .quantization import scheme_of
from .units import DEFAULT_MAX_NUM_BATCHED_TOKENS, GIB, check_positive

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


def weights_missing_reason(exc: Exception) -> str:
    """What the config lacks for a weights estimate, from the error :func:`weights_bytes` raised: one line naming the
    field (``missing field vocab_size (needed for the weights estimate)``) or the scheme (``quantization_config lists
    scheme 'hqq' ...``), without the ``config: `` prefix. Never empty."""
    text = str(exc).removeprefix("config: ").strip()
    return text or f"{type(exc).__name__} with no message"


def parameter_count(config: Mapping[str, Any], *, include_mtp: bool = False) -> dict[str, int]:
    """Parameter count of a checkpoint from its config, by part (unit: parameters).

    The sum of :func:`~.modules.checkpoint_modules` (attention incl. MLA, dense MLP, MoE experts with shared
    experts and router, Mamba-2 / Gated-DeltaNet mixers, vision / audio towers, embeddings, the LM head unless tied
    (the config's ``tie_word_embeddings`` or the model's transformers default), norms; MTP layers with
    ``include_mtp``). State layers of a kind not modelled (KDA) are reported in ``uncounted_layers``.

    Returns:
        Dict with ``embeddings``, ``lm_head``, ``attention``, ``mlp``, ``experts``, ``norms``, ``state_layers``,
        ``towers``, ``mtp``, ``total`` (parameters, buffers excluded), ``buffers`` (the rotary cache, elements)
        and ``uncounted_layers``.

    Raises:
        InputError: a needed field is missing (hidden_size, vocab_size, intermediate_size ...).
    """
    parts = dict.fromkeys(("embeddings", "lm_head", "attention", "mlp", "experts", "norms", "state_layers",
                           "towers", "mtp", "buffers"), 0)
    uncounted = 0
    for m in checkpoint_modules(config, include_mtp=include_mtp):
        if m.name.endswith("uncounted_state_layer"):
            uncounted += 1
        parts[m.part] += m.params
    total = sum(v for k, v in parts.items() if k != "buffers")
    return {**parts, "total": total, "uncounted_layers": uncounted}


def weights_breakdown(
    config: Mapping[str, Any],
    quantization: str | None = None,
    *,
    include_mtp: bool = False,
    mxfp4_pad: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """Bytes of the checkpoint's weights by part, as vLLM holds them, and the modules left in the model dtype.

    Each module is priced by the scheme's rule (:mod:`.quantization`, vLLM file @ version per scheme), honouring
    the scheme's own exclusions and the checkpoint's ignore list (``ignore``, ``exclude_modules``,
    ``modules_to_not_convert``, ``llm_int8_skip_modules``, GPTQ ``dynamic``).

    Returns:
        ``{"parts": {part: bytes}, "total": bytes, "scheme": description, "kept_16bit": [names of quantisable
        linear modules the scheme leaves in the model dtype, at most 12], "kept_16bit_count": n}``.

    Raises:
        InputError: a needed config field is missing; unknown quantisation method.
    """
    cfg = text_config_of(config)
    qc = cfg.get("quantization_config") if isinstance(cfg.get("quantization_config"), Mapping) else None
    if qc is None and isinstance(config.get("quantization_config"), Mapping):
        qc = config["quantization_config"]
    dbytes = model_shape(config).dtype_bytes
    scheme = scheme_of(quantization, qc, dbytes, mxfp4_pad=mxfp4_pad)
    parts: dict[str, float] = {}
    kept: list[str] = []
    for m in checkpoint_modules(config, include_mtp=include_mtp):
        b = scheme.module_bytes(m)
        parts[m.part] = parts.get(m.part, 0) + b
        if scheme.method and m.kind in ("linear", "experts", "lm_head") and scheme.format_of(m) is None:
            kept.append(m.name)
    return {"parts": {k: int(round(v)) for k, v in parts.items()}, "total": int(round(sum(parts.values()))),
            "scheme": scheme.description, "kept_16bit": kept[:12], "kept_16bit_count": len(kept)}


def weights_bytes(
    config: Mapping[str, Any],
    quantization: str | None = None,
    *,
    safetensors_index: Mapping[str, Any] | None = None,
    include_mtp: bool = False,
    mxfp4_pad: tuple[int, int] | None = None,
) -> int:
    """Estimated bytes of the whole model's weights (all GPUs together), as vLLM's ``Model loading took`` counts.

    If ``safetensors_index`` (a parsed ``model.safetensors.index.json``) is given, or ``config`` itself is such an
    index, its ``metadata.total_size`` is returned: the checkpoint bytes, exact for the stored format. Otherwise
    :func:`weights_breakdown`'s total: every module priced by its scheme's rule, plus the rotary ``cos_sin_cache``
    buffer vLLM allocates while loading. A field the estimate needs and the config lacks raises InputError naming
    it; nothing is guessed.

    Args:
        config: HF config dict (``quantization_config`` is used when ``quantization`` is None), or a safetensors
            index dict.
        quantization: vLLM ``--quantization`` value (``fp8``, ``awq``, ``gptq`` ...).
        safetensors_index: optional parsed ``model.safetensors.index.json``.
        include_mtp: count the checkpoint's MTP layers (served with ``--speculative-config`` method ``mtp``).
        mxfp4_pad: MXFP4 MoE backend's ``(hidden, intermediate)`` rounding (default: the CUDA default path).

    Returns:
        Bytes (int).

    Raises:
        InputError: a needed config field is missing or ``metadata.total_size`` is malformed; unknown
            quantization method.
    """
    for idx in (safetensors_index, config):
        if isinstance(idx, Mapping) and isinstance(idx.get("metadata"), Mapping) and "total_size" in idx["metadata"]:
            size = idx["metadata"]["total_size"]
            if isinstance(size, bool) or not isinstance(size, (int, float, str)) or not str(size).isdigit():
                raise InputError(f"safetensors index: metadata.total_size = {size!r}: expected an integer")
            return int(size)
    return weights_breakdown(config, quantization, include_mtp=include_mtp, mxfp4_pad=mxfp4_pad)["total"]


MXFP4_BACKEND_PADDING = {
    "default": (1, 64),
    "triton": (256, 64),
    "marlin": (256, 128),
}
"""``(hidden, intermediate)`` multiples the MXFP4 MoE backend rounds the experts to. ``default`` and ``marlin``:
``fused_moe/oracle/mxfp4.py mxfp4_round_up_hidden_size_and_intermediate_size`` @ v0.33.0 (the fallback branch
rounds the intermediate size to 64; Marlin the intermediate to 128 and the hidden size to 256). ``triton``: the
Hopper Triton-kernels path of 0.10-0.11, hidden size to 256 and the intermediate size kept: inferred from the
gpt-oss-20b / -120b rows of 0.11.0 on H100 (fixtures/capacity/weights.csv W08, W09), not read from that
release's file."""


def weights_bytes_per_worker(
    config: Mapping[str, Any],
    quantization: str | None = None,
    tensor_parallel_size: int = 1,
    pipeline_parallel_size: int = 1,
    *,
    include_mtp: bool = False,
    mxfp4_backend: str | None = None,
) -> int:
    """One worker's weights, bytes, as its ``Model loading took`` line counts them.

    Linear layers, experts and the vocabulary are split ``tp x pp`` ways; norms and the rotary buffer are
    replicated on every worker (``RMSNorm`` and ``get_rope`` are not sharded).

    Raises:
        InputError: as :func:`weights_breakdown`; an unknown ``mxfp4_backend``.
    """
    check_positive(tensor_parallel_size=tensor_parallel_size, pipeline_parallel_size=pipeline_parallel_size)
    pad = None
    if mxfp4_backend:
        if mxfp4_backend not in MXFP4_BACKEND_PADDING:
            raise InputError(f"mxfp4 backend {mxfp4_backend!r}: expected one of {', '.join(MXFP4_BACKEND_PADDING)}")
        pad = MXFP4_BACKEND_PADDING[mxfp4_backend]
    b = weights_breakdown(config, quantization, include_mtp=include_mtp, mxfp4_pad=pad)
    replicated = b["parts"].get("norms", 0) + b["parts"].get("buffers", 0)
    return math.ceil((b["total"] - replicated) / (tensor_parallel_size * pipeline_parallel_size)) + replicated


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
    check_positive(tensor_parallel_size=tensor_parallel_size, pipeline_parallel_size=pipeline_parallel_size)
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
