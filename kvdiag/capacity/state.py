"""Hybrid state layers (Mamba-2, Gated DeltaNet, KDA): one state page per request, and the attention
block size vLLM forces so an attention page holds one state page."""

from __future__ import annotations

import math

from .shape import ModelShape
from .units import check_positive, dtype_bytes
from .versions import GDN_SSM_DTYPE_FROM, MAMBA_SPEC_CONV_FROM

def state_bytes_per_layer(
    shape: ModelShape,
    tensor_parallel_size: int = 1,
    ssm_dtype: str | None = None,
    conv_dtype: str | None = None,
    *,
    num_speculative_tokens: int = 0,
    vllm_version: tuple[int, int, int] | None = None,
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
    ``mamba_ssm_dtype``, else fp32 for KDA and the model dtype otherwise). Version rules
    (:mod:`.versions`): a Gated-DeltaNet SSM state takes that dtype only from :data:`GDN_SSM_DTYPE_FROM`
    (before, both GDN states use the conv dtype); speculative decoding adds ``num_speculative_tokens`` rows to
    the Gated-DeltaNet conv state (``gated_delta_net_state_shape`` ``conv_kernel − 1 + num_spec`` @ v0.11.0,
    v0.13.0, v0.24.0) and, from :data:`MAMBA_SPEC_CONV_FROM`, to the Mamba-2 conv state; the KDA conv state
    does not grow (``kda_state_shape`` takes ``num_spec`` but ignores it @ v0.13.0).
    Unknown version: the newest rules.

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
    if shape.state_kind == "gated_delta_net" and vllm_version is not None and vllm_version < GDN_SSM_DTYPE_FROM:
        ssm_b = conv_b
    spec = max(0, int(num_speculative_tokens))
    if shape.state_kind == "mamba2" and vllm_version is not None and vllm_version < MAMBA_SPEC_CONV_FROM:
        spec = 0
    if shape.state_kind == "mamba2":
        groups = d["n_groups"]
        if groups % tp:
            groups += tp - groups % tp if groups > 1 else tp - groups
        conv = (d["conv_kernel"] - 1 + spec) * (d["intermediate_size"] + 2 * groups * d["state_size"]) // tp
        ssm = d["num_heads"] // tp * d["head_dim"] * d["state_size"]
    elif shape.state_kind == "gated_delta_net":
        conv_dim = 2 * d["num_k_heads"] * d["head_k_dim"] + d["num_v_heads"] * d["head_v_dim"]
        conv = (d["conv_kernel"] - 1 + spec) * conv_dim // tp
        ssm = d["num_v_heads"] // tp * d["head_k_dim"] * d["head_v_dim"]
    elif shape.state_kind == "kda":
        proj = d["num_heads"] * d["head_dim"]
        conv = 3 * (d["conv_kernel"] - 1) * proj // tp
        ssm = d["num_heads"] // tp * d["head_dim"] * d["head_dim"]
    else:
        return None
    return conv * conv_b + ssm * ssm_b

def hybrid_attention_block_size(
    state_page_bytes: int, attention_page_bytes_per_token: int, mla: bool = False, cutlass_mla: bool = False
) -> int:
    """Attention block size vLLM forces so one attention page ≥ one Mamba / linear state page.

    ``align × ceil(state_page / (align × attention_bytes_per_token))`` (``model_executor/models/config.py
    HybridAttentionMambaModelConfig``; log line K10 "Setting attention block size to N tokens"). ``align``:
    16 @ v0.11.0 for every attention kind; @ v0.13.0 ``kernel_block_alignment_size`` 64 for MLA, 128 for
    CUTLASS MLA, 16 otherwise (32 on Blackwell with head size 256 under FlashInfer, not modelled). MLA hybrids
    (Kimi-Linear) run only on releases after 0.11.0; R29 (0.11.x, Nov 2025) reproduces with 64, so 64 is used
    for MLA in every version. With prefix caching on a model that supports Mamba prefix caching, 0.13.0 aligns
    the block to the Mamba chunk size instead (not modelled: a note asks for ``--block-size``). The state page is
    then padded up to the attention page.

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
    check_positive(state_page_bytes=state_page_bytes, attention_page_bytes_per_token=attention_page_bytes_per_token)
    align = 128 if cutlass_mla else (64 if mla else 16)
    return align * math.ceil(state_page_bytes / (align * attention_page_bytes_per_token))
