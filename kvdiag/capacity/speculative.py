"""Speculative decoding: the attention layers a drafter adds to the KV pool, and the state rows it adds.

Sources (vLLM 0.11.0 unless named): ``v1/worker/gpu_model_runner.py get_kv_cache_spec`` gives every ``Attention``
layer of the forward context a spec, the drafter's included (``v1/spec_decode/eagle.py load_model`` loads the EAGLE /
EAGLE3 / MTP drafter into the same context and keeps its layer names); ``config/speculative.py hf_config_override``
sizes an MTP drafter by the checkpoint's ``num_nextn_predict_layers`` (DeepSeek-V3, GLM-4.x MoE, MiMo, ERNIE,
Qwen3-Next); ``model_executor/layers/mamba/mamba_utils.py gated_delta_net_state_shape`` grows the conv state by
``num_speculative_tokens`` (:mod:`.state`). ngram proposes from the prompt and adds no layer.
"""

from __future__ import annotations

from kvdiag.errors import InputError

from .shape import ModelShape

SPECULATIVE_METHODS = ("eagle", "eagle3", "mtp", "ngram")
"""``--speculative-config`` methods this model sizes."""

EAGLE_HEAD_LAYERS = 1
"""Decoder layers of a published EAGLE / EAGLE3 head (the draft checkpoint's ``num_hidden_layers``; every
EAGLE-1/EAGLE-3 head on the Hub that vLLM documents has one). Give ``draft_layers`` for another head."""


def drafter_layers(shape: ModelShape, method: str | None, draft_layers: int | None = None) -> int:
    """Attention layers the drafter adds to the last pipeline stage's full-attention (or MLA) group.

    * ``eagle`` / ``eagle3``: the head's decoder layers, ``draft_layers`` or :data:`EAGLE_HEAD_LAYERS`. vLLM
      builds the head's attention like the target's (same KV heads and head size for the heads it serves), so
      each layer is charged the target's bytes per token.
    * ``mtp``: the checkpoint's MTP layers (``num_nextn_predict_layers`` / ``mtp_num_hidden_layers``; more
      speculative tokens than layers reuse them, adding none).
    * ``ngram`` or None: 0.

    Raises:
        InputError: ``mtp`` on a config without MTP layers (names the field), unknown method.
    """
    if method is None or method == "ngram":
        return 0
    if method in ("eagle", "eagle3"):
        n = EAGLE_HEAD_LAYERS if draft_layers is None else draft_layers
        if n < 0:
            raise InputError(f"draft layers {n}: expected >= 0")
        return n
    if method == "mtp":
        if draft_layers is not None:
            return draft_layers
        if shape.mtp_layers:
            return shape.mtp_layers
        if (shape.model_type or "") == "qwen3_next":
            return 1  # Qwen3NextMTP: getattr(config, "num_nextn_predict_layers", 1) (qwen3_next_mtp.py @ v0.11.0)
        if not shape.mtp_layers:
            raise InputError("config: missing field num_nextn_predict_layers (or mtp_num_hidden_layers): "
                             "the checkpoint names no MTP layer for --speculative-method mtp")
        return shape.mtp_layers
    raise InputError(f"speculative method {method!r}: expected one of {', '.join(SPECULATIVE_METHODS)}")
