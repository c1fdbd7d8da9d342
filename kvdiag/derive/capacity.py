"""Derived signals from the capacity model (the ``kvdiag/capacity/`` package): weights vs the GPU, and the numbers
remedies quote (the gpu_memory_utilization that fits, the fp8 pool, the tensor parallel size that fits).

Runs only when ``--model-config`` is given. Every value is per worker (one TP rank) unless named otherwise.
"""

from __future__ import annotations

import math

from .. import capacity
from ..bundle import Bundle
from ..errors import InputError

from ..vllm_defaults import DEFAULT_GPU_MEMORY_UTILIZATION  # noqa: E402


def derive_capacity(bundle: Bundle) -> None:
    """Add the capacity-model signals to ``bundle`` (in place); no-op without a model config.

    Adds (each with a ``derived: ...`` source naming its inputs):

    * ``kv_bytes_per_token`` — ``capacity.kv_bytes_per_token`` (seed formula ``2 × L × H_kv × D × s`` for
      MHA/GQA, MLA latent, KV heads split by the logged tensor_parallel_size), bytes;
    * ``kv_capacity_tokens_from_config`` — logged KV memory / bytes per token, tokens;
    * ``weights_estimate_bytes`` — ``capacity.weights_bytes_per_worker`` (every module priced by its quantisation
      scheme, one worker's share), bytes per GPU; the log's measured ``Model loading took`` instead when the two
      differ by more than :data:`WEIGHTS_DISAGREE_RATIO` (a report note says the config may be another model's);
    * ``weights_budget_ratio`` — weights per GPU / (GPU total × gpu_memory_utilization) (> 1: they do not fit);
    * ``min_tensor_parallel_for_weights`` — smallest TP in 1, 2, 4, 8 with weights per GPU ≤ 90 % of the budget;
    * ``gpu_memory_utilization_needed`` — utilization that gives one ``max_model_len`` request its KV
      (``capacity.gpu_memory_utilization_for``; non-KV memory = budget − logged KV memory);
    * ``kv_capacity_tokens_fp8`` — the pool in tokens with ``--kv-cache-dtype fp8`` (``capacity.fp8_kv_gain``);
    * ``kv_capacity_tokens_modelled`` — the "GPU KV cache size" line ``capacity.estimate_capacity`` predicts from
      the logged KV memory, version, parallel sizes, speculative config, DCP size, SSM dtype and prefix caching
      (the ``non-default args`` / engine config line facts).

    Raises:
        InputError: the model config lacks a field the model needs (names it).
    """
    cfg = bundle.model_config
    if cfg is None:
        return
    src_cfg = bundle.model_config_source
    shape = capacity.model_shape(cfg)
    tp_row = bundle.last("tensor_parallel_size")
    tp = int(tp_row[0]) if tp_row and tp_row[0] >= 1 else 1
    tp_src = tp_row[1] if tp_row else "tensor_parallel_size 1 (vLLM default; none logged)"
    dtype_row = bundle.signal("cache_dtype")
    kv_dtype = str(dtype_row["text"].iloc[-1]) if len(dtype_row) else "auto"
    if kv_dtype not in capacity.KV_CACHE_DTYPES:
        kv_dtype = "auto"
    version_text = _text_last(bundle, "vllm_version")
    try:
        version = capacity.parse_vllm_version(version_text)
    except ValueError:
        version = None
    try:
        bpt = capacity.kv_bytes_per_token(shape, kv_dtype, tensor_parallel_size=tp, vllm_version=version)
    except InputError:  # e.g. pre-0.7.1 DeepSeek without qk_nope_head_dim: the latent size, as before
        bpt = capacity.kv_bytes_per_token(shape, kv_dtype, tensor_parallel_size=tp)
    bundle.add("kv_bytes_per_token", bpt,
               f"derived: capacity model of {src_cfg} (kv_cache_dtype {kv_dtype}, TP {tp}: {tp_src})")
    kv = bundle.last("kv_cache_memory_bytes")
    if kv and kv[0] > 0:
        bundle.add("kv_capacity_tokens_from_config", math.floor(kv[0] / bpt),
                   f"derived: KV memory {kv[0] / 2**30:.2f} GiB ({kv[1]}) / {bpt:,} B per token")
    _modelled_token_line(bundle, shape, kv, kv_dtype, tp, src_cfg)
    total_w, per_gpu, w_src = _weights_per_worker(bundle, cfg, src_cfg, tp)
    total = bundle.last("gpu_total_bytes")
    util_row = bundle.last("gpu_memory_utilization")
    util = util_row[0] if util_row else DEFAULT_GPU_MEMORY_UTILIZATION
    util_src = util_row[1] if util_row else f"gpu_memory_utilization {DEFAULT_GPU_MEMORY_UTILIZATION} (vLLM default)"
    if per_gpu:
        bundle.add("weights_estimate_bytes", per_gpu, w_src)
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
    mml = bundle.last("max_model_len")
    budget_row = bundle.last("gpu_budget_bytes")
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
    pool = bundle.last("kv_capacity_tokens") or bundle.last("kv_cache_size_tokens")
    if pool and pool[0] > 0:
        gain = capacity.fp8_kv_gain(shape, kv_dtype)
        if gain > 1 and math.isfinite(pool[0] * gain):  # a log's 1e308-token pool × 2 is no number of tokens
            bundle.add("kv_capacity_tokens_fp8", math.floor(pool[0] * gain),
                       f"derived: pool {pool[0]:,.0f} tokens ({pool[1]}) × {gain:g} (fp8 KV cache)")


WEIGHTS_DISAGREE_RATIO = 0.05
"""A log's measured weights (``Model loading took X GiB``) that differ from the config's estimate by more than this
share of the measured figure replace the estimate: the config is likely another model's (or another quantisation's).
The estimate itself is within 1 % on the capacity rows (``docs/capacity-calculators.md``), so 5 % is no rounding."""


def _weights_per_worker(bundle: Bundle, cfg: dict, src_cfg: str, tp: int) -> tuple[float | None, float | None, str]:
    """``(whole-model bytes, bytes per worker, source)`` of the weights for the WGT001 signals, or ``(None, None, "")``.

    The config's estimate (:func:`kvdiag.capacity.weights_bytes_per_worker`, the log's ``--quantization`` when the
    checkpoint config names none), unless the log measured the weights (``weights_bytes``: ``Model loading took``)
    and the two differ by more than :data:`WEIGHTS_DISAGREE_RATIO`: then the measured figure, and a note in the
    report saying the config may be another model's. No estimate and no measured figure: a note naming what the
    config lacks (``no weights estimate: missing field vocab_size ...``).
    """
    pp_row = bundle.last("pipeline_parallel_size")
    pp = int(pp_row[0]) if pp_row and pp_row[0] >= 1 else 1
    logged_q = _text_last(bundle, "quantization")
    has_qc = isinstance(capacity.text_config_of(cfg).get("quantization_config"), dict)
    # the log's --quantization (engine config line) when the checkpoint config names none (online fp8, bnb)
    quant = None if has_qc or not logged_q else logged_q
    measured = bundle.last("weights_bytes")
    measured = measured if measured and measured[0] > 0 else None
    mtp = _text_last(bundle, "speculative_method") == "mtp"  # the drafter's MTP layers load with the model
    try:
        total_w = capacity.weights_bytes(cfg, quant, include_mtp=mtp)
        per_w = capacity.weights_bytes_per_worker(cfg, quant, tp, pp, include_mtp=mtp)
    except (InputError, ValueError) as exc:
        why = capacity.weights_missing_reason(exc)
        if measured:
            bundle.model_notes.append(f"no weights estimate from {src_cfg}: {why}; the log's measured "
                                      f"{measured[0] / 2**30:.2f} GiB per worker ({measured[1]}) stands")
        else:
            bundle.model_notes.append(f"no weights estimate from {src_cfg}: {why}")
        return None, None, ""
    src = (f"derived: every module of {src_cfg} priced by its quantisation scheme = {total_w / 2**30:.2f} GiB, "
           f"one worker's share of TP {tp}" + (f" × PP {pp}" if pp > 1 else ""))
    if measured and abs(per_w - measured[0]) > WEIGHTS_DISAGREE_RATIO * measured[0]:
        off = (per_w - measured[0]) / measured[0]
        bundle.model_notes.append(
            f"weights: the log measured {measured[0] / 2**30:.2f} GiB per worker ({measured[1]}) but {src_cfg} "
            f"gives {per_w / 2**30:.2f} GiB ({off:+.0%}): the measured figure is used; the config may be another "
            "model's (or another quantisation's), so its KV figures may be off too")
        return measured[0] * tp * pp, measured[0], (f"{measured[1]} (measured; the config's {per_w / 2**30:.2f} GiB "
                                                    f"differs by {off:+.0%})")
    return total_w, per_w, src


def _text_last(bundle: Bundle, name: str) -> str | None:
    rows = bundle.signal(name)
    return str(rows["text"].iloc[-1]) if len(rows) and rows["text"].iloc[-1] else None


def _modelled_token_line(bundle: Bundle, shape, kv, kv_dtype: str, tp: int, src_cfg: str) -> None:
    """Add ``kv_capacity_tokens_modelled`` when the log gave the KV memory; silent when the model cannot say."""
    if not kv or kv[0] <= 0:
        return
    version = _text_last(bundle, "vllm_version")
    pp = bundle.last("pipeline_parallel_size")
    dcp = bundle.last("decode_context_parallel_size")
    spec_n = bundle.last("num_speculative_tokens")
    method = _text_last(bundle, "speculative_method")
    if method not in capacity.SPECULATIVE_METHODS:
        method = None
    ssm = _text_last(bundle, "mamba_ssm_cache_dtype")
    pc = bundle.last("enable_prefix_caching")
    mml = bundle.last("max_model_len")
    facts = {"vllm_version": version, "pipeline_parallel_size": int(pp[0]) if pp else 1,
             "decode_context_parallel_size": int(dcp[0]) if dcp else 1,
             "speculative_method": method, "num_speculative_tokens": int(spec_n[0]) if spec_n and method else 0,
             "mamba_ssm_cache_dtype": ssm if ssm in ("float16", "bfloat16", "float32") else None,
             "prefix_caching": (pc[0] != 0) if pc else None}
    try:
        est = capacity.estimate_capacity(
            shape, kv[0], kv_cache_dtype=kv_dtype, tensor_parallel_size=tp,
            max_model_len=int(mml[0]) if mml else None,
            **facts,
        )
    except (InputError, ValueError):
        return
    said = ", ".join(f"{k} {v}" for k, v in facts.items() if v is not None and v is not True and v not in (0, 1))
    bundle.add("kv_capacity_tokens_modelled", est.kv_capacity_tokens,
               f"derived: capacity model of {src_cfg} with KV memory {kv[0] / 2**30:.2f} GiB ({kv[1]}), "
               f"kv_cache_dtype {kv_dtype}, TP {tp}" + (f", {said}" if said else ""))
