"""Derived signals from the capacity model (``kvdiag/capacity.py``): weights vs the GPU, and the numbers
remedies quote (the gpu_memory_utilization that fits, the fp8 pool, the tensor parallel size that fits).

Runs only when ``--model-config`` is given. Every value is per worker (one TP rank) unless named otherwise.
"""

from __future__ import annotations

import math

from . import capacity
from .bundle import Bundle
from .errors import InputError

DEFAULT_GPU_MEMORY_UTILIZATION = 0.9
"""vLLM's default ``gpu_memory_utilization`` through 0.16 (0.92 from 0.24, reference §1.4)."""


def _last(bundle: Bundle, name: str) -> tuple[float, str] | None:
    """``(value, source)`` of the signal's last row with a value, or None (:meth:`Bundle.last`)."""
    return bundle.last(name)


def derive_capacity(bundle: Bundle) -> None:
    """Add the capacity-model signals to ``bundle`` (in place); no-op without a model config.

    Adds (each with a ``derived: ...`` source naming its inputs):

    * ``kv_bytes_per_token`` — ``capacity.kv_bytes_per_token`` (seed formula ``2 × L × H_kv × D × s`` for
      MHA/GQA, MLA latent, KV heads split by the logged tensor_parallel_size), bytes;
    * ``kv_capacity_tokens_from_config`` — logged KV memory / bytes per token, tokens;
    * ``weights_estimate_bytes`` — ``capacity.weights_bytes`` / tensor_parallel_size, bytes per GPU;
    * ``weights_budget_ratio`` — weights per GPU / (GPU total × gpu_memory_utilization) (> 1: they do not fit);
    * ``min_tensor_parallel_for_weights`` — smallest TP in 1, 2, 4, 8 with weights per GPU ≤ 90 % of the budget;
    * ``gpu_memory_utilization_needed`` — utilization that gives one ``max_model_len`` request its KV
      (``capacity.gpu_memory_utilization_for``; non-KV memory = budget − logged KV memory);
    * ``kv_capacity_tokens_fp8`` — the pool in tokens with ``--kv-cache-dtype fp8`` (``capacity.fp8_kv_gain``).

    Raises:
        InputError: the model config lacks a field the model needs (names it).
    """
    cfg = bundle.model_config
    if cfg is None:
        return
    src_cfg = bundle.model_config_source
    shape = capacity.model_shape(cfg)
    tp_row = _last(bundle, "tensor_parallel_size")
    tp = int(tp_row[0]) if tp_row and tp_row[0] >= 1 else 1
    tp_src = tp_row[1] if tp_row else "tensor_parallel_size 1 (vLLM default; none logged)"
    dtype_row = bundle.signal("cache_dtype")
    kv_dtype = str(dtype_row["text"].iloc[-1]) if len(dtype_row) else "auto"
    if kv_dtype not in capacity.KV_CACHE_DTYPES:
        kv_dtype = "auto"
    bpt = capacity.kv_bytes_per_token(shape, kv_dtype, tensor_parallel_size=tp)
    bundle.add("kv_bytes_per_token", bpt,
               f"derived: capacity model of {src_cfg} (kv_cache_dtype {kv_dtype}, TP {tp}: {tp_src})")
    kv = _last(bundle, "kv_cache_memory_bytes")
    if kv and kv[0] > 0:
        bundle.add("kv_capacity_tokens_from_config", math.floor(kv[0] / bpt),
                   f"derived: KV memory {kv[0] / 2**30:.2f} GiB ({kv[1]}) / {bpt:,} B per token")
    try:
        total_w = capacity.weights_bytes(cfg)
    except (InputError, ValueError):
        total_w = None
    total = _last(bundle, "gpu_total_bytes")
    util_row = _last(bundle, "gpu_memory_utilization")
    util = util_row[0] if util_row else DEFAULT_GPU_MEMORY_UTILIZATION
    util_src = util_row[1] if util_row else f"gpu_memory_utilization {DEFAULT_GPU_MEMORY_UTILIZATION} (vLLM default)"
    if total_w:
        per_gpu = capacity.weights_bytes_per_gpu(total_w, tp)
        bundle.add("weights_estimate_bytes", per_gpu,
                   f"derived: parameter count × dtype bytes of {src_cfg} = {total_w / 2**30:.2f} GiB / TP {tp}")
        if total:
            budget = total[0] * util
            bundle.add("weights_budget_ratio", per_gpu / budget,
                       f"derived: weights {per_gpu / 2**30:.2f} GiB per GPU / (GPU {total[0] / 2**30:.2f} GiB "
                       f"({total[1]}) × {util:.2f} ({util_src}))")
            need = next((n for n in (1, 2, 4, 8) if total_w / n <= 0.9 * budget), None)
            if need is not None:
                bundle.add("min_tensor_parallel_for_weights", need,
                           f"derived: smallest TP with weights ({total_w / 2**30:.1f} GiB) / TP ≤ 90 % of "
                           f"{budget / 2**30:.2f} GiB")
    mml = _last(bundle, "max_model_len")
    budget_row = _last(bundle, "gpu_budget_bytes")
    if mml and kv and total:
        budget = budget_row[0] if budget_row else total[0] * util
        non_kv = budget - kv[0]
        if non_kv > 0:
            need_kv = capacity.kv_memory_needed(shape, int(mml[0]), kv_cache_dtype=kv_dtype, tensor_parallel_size=tp)
            u = capacity.gpu_memory_utilization_for(need_kv, total[0], non_kv)
            bundle.add("gpu_memory_utilization_needed", u,
                       f"derived: (non-KV {non_kv / 2**30:.2f} GiB + KV for max_model_len {mml[0]:,.0f} = "
                       f"{need_kv / 2**30:.2f} GiB) / GPU {total[0] / 2**30:.2f} GiB",
                       text="capacity model of the model config")
    pool = _last(bundle, "kv_capacity_tokens") or _last(bundle, "kv_cache_size_tokens")
    if pool and pool[0] > 0:
        gain = capacity.fp8_kv_gain(shape, kv_dtype)
        if gain > 1:
            bundle.add("kv_capacity_tokens_fp8", math.floor(pool[0] * gain),
                       f"derived: pool {pool[0]:,.0f} tokens ({pool[1]}) × {gain:g} (fp8 KV cache)")
