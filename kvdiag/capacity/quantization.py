"""Bytes per weight of a quantised checkpoint, from ``quantization_config`` or ``--quantization``.

What each scheme stores per weight of a quantised linear layer (scales included), from the vLLM method that
loads it (``model_executor/layers/quantization/*.py`` @ v0.11.0):

* ``fp8`` (``fp8.py``): 1 byte; per-tensor fp32 scale, or with ``weight_block_size [b0, b1]`` one fp32 scale per
  block (``4 / (b0 × b1)`` bytes per weight). ``fbgemm_fp8``: 1 byte + one fp32 scale per output channel.
* ``awq`` / ``gptq`` (``awq.py``, ``gptq.py``): ``bits / 8`` bytes, plus per group of ``group_size`` weights an
  fp16 scale and a ``bits``-bit zero point (GPTQ ``group_size -1`` = one group per column).
* ``bitsandbytes`` (``bitsandbytes.py``): 4-bit: 0.5 byte + one fp32 absmax per 64 weights (8-bit absmax per 64 and
  fp32 per 256 with ``bnb_4bit_use_double_quant``); 8-bit: 1 byte + fp32 per row (≈ 0).
* ``modelopt`` (``modelopt.py``): ``quant_algo FP8`` 1 byte; ``NVFP4`` 0.5 byte + one fp8 scale per 16 weights.
* ``compressed-tensors`` (``compressed_tensors/``): from ``config_groups.*.weights``: ``num_bits / 8`` bytes, plus
  a scale per group (``group_size``; fp8 scales for ``nvfp4-pack-quantized``, else the model dtype) or per
  channel (≈ 0 per weight).
* ``mxfp4`` (``mxfp4.py``): 0.5 byte + one 1-byte scale per 32 weights.

Embeddings, the LM head, norms and modules in the scheme's ignore list stay in the model dtype.
"""

from __future__ import annotations

from typing import Any, Mapping

from kvdiag.errors import InputError

QUANT_METHODS = ("fp8", "fbgemm_fp8", "awq", "awq_marlin", "gptq", "gptq_marlin", "bitsandbytes", "modelopt",
                 "modelopt_fp4", "nvfp4", "compressed-tensors", "mxfp4", "int8", "w8a8")
"""``--quantization`` / ``quant_method`` values whose bytes per weight this module knows."""


def bytes_per_weight(quantization: str | None, qc: Mapping[str, Any] | None, dtype_bytes: int) -> tuple[float, str]:
    """Bytes one weight of a quantised linear layer takes, scales included, and a one-line description.

    Args:
        quantization: ``--quantization`` value (wins over the config's ``quant_method``), or None.
        qc: the config's ``quantization_config`` (may be None).
        dtype_bytes: bytes of the model dtype (the unquantised case, and group scales of int schemes).

    Returns:
        ``(bytes_per_weight, description)``.

    Raises:
        InputError: unknown method, or a ``quantization_config`` lacking the field the method needs (named).
    """
    qc = qc if isinstance(qc, Mapping) else {}
    method = (quantization or qc.get("quant_method") or "").lower() or None
    if method is None:
        return float(dtype_bytes), f"unquantised ({dtype_bytes} B per weight)"
    if method in ("fp8",):
        block = qc.get("weight_block_size")
        if isinstance(block, list) and len(block) == 2 and all(isinstance(b, int) and b > 0 for b in block):
            return 1.0 + 4 / (block[0] * block[1]), f"fp8, fp32 scale per {block[0]}x{block[1]} block"
        return 1.0, "fp8 (1 B per weight, per-tensor scale)"
    if method in ("fbgemm_fp8", "int8", "w8a8"):
        return 1.0, f"{method} (1 B per weight, per-channel scale)"
    if method in ("awq", "awq_marlin", "gptq", "gptq_marlin"):
        bits = qc.get("bits", qc.get("w_bit"))
        group = qc.get("group_size", qc.get("q_group_size"))
        if bits is None:
            raise InputError(f"config: missing field quantization_config.bits (needed for the {method} weights)")
        if group is None:
            raise InputError(f"config: missing field quantization_config.group_size (needed for the {method} weights)")
        per = bits / 8
        if group and group > 0:
            per += (2 + bits / 8) / group  # fp16 scale + packed zero point per group
        return per, f"{method} {bits}-bit, group {group}"
    if method == "bitsandbytes":
        if qc.get("load_in_8bit"):
            return 1.0, "bitsandbytes 8-bit"
        if qc.get("bnb_4bit_use_double_quant"):
            return 0.5 + 1 / 64 + 4 / (64 * 256), "bitsandbytes 4-bit, double quant"
        return 0.5 + 4 / 64, "bitsandbytes 4-bit (fp32 absmax per 64)"
    if method in ("modelopt", "modelopt_fp4", "nvfp4"):
        algo = str(qc.get("quant_algo") or (qc.get("quantization") or {}).get("quant_algo") or "").upper()
        if method == "modelopt" and not algo:
            raise InputError("config: missing field quantization_config.quant_algo (modelopt: FP8 or NVFP4)")
        if method == "modelopt" and algo.startswith("FP8"):
            return 1.0, "modelopt FP8"
        return 0.5 + 1 / 16, "NVFP4 (0.5 B + fp8 scale per 16 weights)"
    if method == "mxfp4":
        return 0.5 + 1 / 32, "mxfp4 (0.5 B + 1 B scale per 32 weights)"
    if method == "compressed-tensors":
        groups = qc.get("config_groups")
        if not isinstance(groups, Mapping) or not groups:
            raise InputError("config: missing field quantization_config.config_groups (compressed-tensors scheme)")
        w = next(iter(groups.values())).get("weights") if isinstance(next(iter(groups.values())), Mapping) else None
        if not isinstance(w, Mapping) or w.get("num_bits") is None:
            raise InputError("config: missing field quantization_config.config_groups.*.weights.num_bits")
        bits = w["num_bits"]
        per = bits / 8
        fmt = str(qc.get("format") or "")
        group = w.get("group_size")
        if w.get("strategy") == "group" or (group and group > 0):
            if not group:
                raise InputError("config: missing field quantization_config.config_groups.*.weights.group_size")
            scale = 1 if "nvfp4" in fmt or (bits == 4 and w.get("type") == "float") else dtype_bytes
            per += scale / group
        return per, f"compressed-tensors {bits}-bit {w.get('type', 'int')} ({fmt or 'format not named'})"
    raise InputError(f"quantization {method!r}: expected one of {', '.join(QUANT_METHODS)}")
