"""Parallelism: how vLLM splits layers over pipeline stages."""

from __future__ import annotations

from .units import check_positive

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
    check_positive(num_layers=num_layers, pipeline_parallel_size=pipeline_parallel_size)
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
