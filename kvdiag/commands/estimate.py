"""``kvdiag estimate``: KV-cache capacity of a model on one vLLM worker, from its config.json.

The CLI group registers this command with ``cli.add_command(estimate)``. All arithmetic lives
in :mod:`kvdiag.capacity`; this module reads the file, checks option combinations and prints.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import click

from kvdiag import capacity as cap
from kvdiag.errors import InputError

from .options import exit_codes

ESTIMATE_CODES = exit_codes(("0", "estimate printed: vLLM would start"),
                            ("2", "vLLM would refuse to start (no KV memory, or a pool smaller than one max_model_len "
                                  "request); the first line says so with the smallest TP or memory that starts"),
                            ("3", "bad usage, unreadable or invalid --model-config"))

_KV_DTYPES = click.Choice(list(cap.KV_CACHE_DTYPES), case_sensitive=False)


class _Finite(click.ParamType):
    """A finite float in ``[lo, hi]`` (``nan``, ``inf`` and ``1e308`` are refused naming the option)."""

    name = "number"

    def __init__(self, lo: float, hi: float, unit: str = "") -> None:
        self.lo, self.hi, self.unit = lo, hi, unit

    def convert(self, value, param, ctx):
        try:
            x = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r}: expected a number{self.unit}", param, ctx)
        if not math.isfinite(x) or not self.lo <= x <= self.hi:
            self.fail(f"{value!r}: expected a finite number from {self.lo:,g} to {self.hi:,g}{self.unit}", param, ctx)
        return x


GIB_OPTION = _Finite(0, 1 << 20, " GiB")          # up to 1 PiB per GPU
MAX_PARALLEL = 4096                               # GPUs in one tensor / pipeline group
from ..vllm_defaults import MAX_BLOCK_SIZE_OPTION as MAX_BLOCK_SIZE, DEFAULT_BLOCK_SIZE, default_gpu_memory_utilization, DEFAULT_GPU_MEMORY_UTILIZATION as _U0, DEFAULT_GPU_MEMORY_UTILIZATION_FROM as _U1  # noqa: E402,I001,E501
MAX_TOKENS = 1 << 31


def _load_config(path: str) -> dict[str, Any]:
    """Read a HF config.json (:func:`kvdiag.capacity.load_model_config`, the one loader)."""
    return cap.load_model_config(path)


def _relabel(exc: InputError, path: str) -> InputError:
    msg = str(exc)
    if msg.startswith("config: "):
        msg = msg[len("config: "):]
    return InputError(f"{path}: {msg}")


@click.command("estimate", epilog=ESTIMATE_CODES)
@click.option("--model-config", "model_config", required=True, type=click.Path(dir_okay=False), metavar="FILE",
              help="Hugging Face config.json of the model.")
@click.option("--kv-cache-dtype", default="auto", show_default=True, type=_KV_DTYPES,
              help="vLLM --kv-cache-dtype (auto = model dtype).")
@click.option("--tensor-parallel-size", default=1, show_default=True, type=click.IntRange(1, MAX_PARALLEL), metavar="N",
              help="vLLM --tensor-parallel-size.")
@click.option("--pipeline-parallel-size", default=1, show_default=True, type=click.IntRange(1, MAX_PARALLEL),
              metavar="N", help="vLLM --pipeline-parallel-size.")
@click.option("--block-size", default=None, type=click.IntRange(1, MAX_BLOCK_SIZE), metavar="TOKENS",
              help=f"vLLM --block-size, tokens (default {DEFAULT_BLOCK_SIZE}; raised for hybrid Mamba models).")
@click.option("--max-model-len", default=None, type=click.IntRange(1, MAX_TOKENS), metavar="TOKENS",
              help="Tokens per request (default: the config's max_position_embeddings).")
@click.option("--max-num-batched-tokens", default=None, type=click.IntRange(1, MAX_TOKENS), metavar="TOKENS",
              help=f"Scheduler token budget (default {cap.DEFAULT_MAX_NUM_BATCHED_TOKENS}); sizes sliding windows.")
@click.option("--vllm-version", default=None, metavar="VERSION", help="vLLM version, e.g. 0.11.0; selects what the log prints.")
@click.option("--kv-cache-memory", "kv_cache_memory", default=None, type=GIB_OPTION, metavar="GiB",
              help="vLLM's 'Available KV cache memory' of one worker, GiB.")
@click.option("--gpu-memory", "gpu_memory", default=None, type=GIB_OPTION, metavar="GiB",
              help="Total memory of one GPU, GiB (KV memory is then estimated).")
@click.option("--gpu-memory-utilization", default=None, type=_Finite(0, 1), metavar="RATIO",
              help=f"vLLM --gpu-memory-utilization (with --gpu-memory; default {_U0}, {_U1[1]} from {_U1[0][0]}.{_U1[0][1]}).")
@click.option("--speculative-method", default=None, type=click.Choice(list(cap.SPECULATIVE_METHODS)),
              help="speculative_config method: eagle/eagle3 add the head's layer, mtp the checkpoint's MTP layers.")
@click.option("--num-speculative-tokens", default=0, type=click.IntRange(0, 64), metavar="N",
              help="speculative_config num_speculative_tokens (grows Gated-DeltaNet conv state).")
@click.option("--draft-layers", default=None, type=click.IntRange(0, 1024), metavar="N",
              help="Decoder layers of the drafter when not the default (EAGLE head 1, MTP from the config).")
@click.option("--decode-context-parallel-size", default=1, show_default=True, type=click.IntRange(1, MAX_PARALLEL),
              metavar="N", help="vLLM --decode-context-parallel-size (must divide --tensor-parallel-size).")
@click.option("--mamba-ssm-cache-dtype", default=None, type=click.Choice(["auto", "float16", "bfloat16", "float32"]),
              help="vLLM --mamba-ssm-cache-dtype (hybrid models' recurrent state).")
@click.option("--no-prefix-caching", "no_prefix_caching", is_flag=True,
              help="vLLM --no-enable-prefix-caching (hybrid models keep one state page per request).")
@click.option("--enable-prefix-caching", "enable_prefix_caching", is_flag=True,
              help="vLLM --enable-prefix-caching given explicitly (hybrid models on 0.13-0.19 change block and pages).")
@click.option("--quantization", default=None, metavar="METHOD",
              help="vLLM --quantization (weights estimate; default: the config's quantization_config).")
@click.option("--format", "fmt", default="text", show_default=True, type=click.Choice(["text", "json"]))
def estimate(
    model_config: str,
    kv_cache_dtype: str,
    tensor_parallel_size: int,
    pipeline_parallel_size: int,
    block_size: int | None,
    max_model_len: int | None,
    max_num_batched_tokens: int | None,
    vllm_version: str | None,
    kv_cache_memory: float | None,
    gpu_memory: float | None,
    gpu_memory_utilization: float | None,
    speculative_method: str | None,
    num_speculative_tokens: int,
    draft_layers: int | None,
    decode_context_parallel_size: int,
    mamba_ssm_cache_dtype: str | None,
    no_prefix_caching: bool,
    enable_prefix_caching: bool,
    quantization: str | None,
    fmt: str,
) -> None:
    """Estimate KV-cache blocks, token capacity and concurrency of one vLLM worker.

    Give either --kv-cache-memory (the "Available KV cache memory: X GiB" startup line; the
    result then matches what that vLLM version prints) or --gpu-memory (a rough estimate of
    weights and activations is subtracted).
    """
    if (kv_cache_memory is None) == (gpu_memory is None):
        raise click.UsageError("give exactly one of --kv-cache-memory GiB or --gpu-memory GiB")
    if gpu_memory_utilization is not None and gpu_memory is None:
        raise click.UsageError("--gpu-memory-utilization needs --gpu-memory")
    if gpu_memory_utilization is not None and not 0 < gpu_memory_utilization <= 1:
        raise click.UsageError(f"--gpu-memory-utilization {gpu_memory_utilization}: expected a fraction in (0, 1]")
    if kv_cache_memory is not None and kv_cache_memory < 0:
        raise click.UsageError(f"--kv-cache-memory {kv_cache_memory}: expected GiB >= 0")
    if gpu_memory is not None and gpu_memory <= 0:
        raise click.UsageError(f"--gpu-memory {gpu_memory}: expected GiB > 0")
    try:
        version = cap.parse_vllm_version(vllm_version)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    if speculative_method and speculative_method != "ngram" and num_speculative_tokens == 0:
        raise click.UsageError(f"--speculative-method {speculative_method} needs --num-speculative-tokens N (N >= 1)")
    if num_speculative_tokens and not speculative_method:
        raise click.UsageError("--num-speculative-tokens needs --speculative-method")
    if no_prefix_caching and enable_prefix_caching:
        raise click.UsageError("give at most one of --no-prefix-caching and --enable-prefix-caching")
    if tensor_parallel_size % decode_context_parallel_size:
        raise click.UsageError(f"--decode-context-parallel-size {decode_context_parallel_size} must divide "
                               f"--tensor-parallel-size {tensor_parallel_size}")

    config = _load_config(model_config)
    notes: list[str] = []
    try:
        shape = cap.model_shape(config)
    except InputError as exc:
        raise _relabel(exc, model_config) from None
    if pipeline_parallel_size > shape.num_layers:
        raise click.UsageError(
            f"--pipeline-parallel-size {pipeline_parallel_size} exceeds the model's {shape.num_layers} layers"
        )

    if max_model_len is None:
        mpe = _text(config).get("max_position_embeddings")
        if mpe is not None and (isinstance(mpe, bool) or not isinstance(mpe, int) or mpe <= 0):
            raise InputError(f"{model_config}: field max_position_embeddings = {mpe!r}: expected a positive integer "
                             "(or give --max-model-len)")
        if isinstance(mpe, int) and mpe > 0:
            max_model_len = mpe
            notes.append(f"max_model_len not given: using max_position_embeddings {mpe}")
        else:
            notes.append("max_model_len unknown (no --max-model-len, no max_position_embeddings): no concurrency")
    mnbt = max_num_batched_tokens or cap.DEFAULT_MAX_NUM_BATCHED_TOKENS
    if max_num_batched_tokens is None and any(k == "sliding" for k in shape.layer_kinds):
        notes.append(
            f"max_num_batched_tokens not given: assumed {mnbt} (vLLM server default below 70 GiB GPUs and on A100; 8192 on H100-class)"
        )

    def run(tensor_parallel_size: int, gpu_memory: float | None, kv_cache_memory: float | None,
            notes: list[str]):
        """KV memory and the capacity estimate for one deployment (the refusal search re-runs it)."""
        weights_total: int | None
        weights_why = ""
        try:
            weights_total = cap.weights_bytes(config, quantization, include_mtp=speculative_method == "mtp")
        except (InputError, ValueError) as exc:
            weights_total = None
            weights_why = cap.weights_missing_reason(exc)
            notes.append(f"weights not estimated: {weights_why}")
        weights_worker = (
            cap.weights_bytes_per_gpu(weights_total, tensor_parallel_size, pipeline_parallel_size)
            if weights_total is not None else None
        )

        if kv_cache_memory is not None:
            kv_bytes = kv_cache_memory * cap.GIB
        else:
            util = gpu_memory_utilization
            if util is None:
                util = default_gpu_memory_utilization(version)
                notes.append(f"gpu_memory_utilization not given: vLLM default {util} assumed")
            if weights_worker is None:
                raise InputError(f"{model_config}: no weights estimate: {weights_why}; without it the KV memory "
                                 "cannot be estimated from --gpu-memory: give --kv-cache-memory GiB (the 'Available "
                                 "KV cache memory' start-up line)")
            graphs = int(0.5 * cap.GIB) if version is None or version >= (0, 21, 0) else 0
            inter = _text(config).get("intermediate_size")
            non_kv = cap.non_kv_bytes_estimate(
                shape, weights_worker, max_num_batched_tokens=mnbt, tensor_parallel_size=tensor_parallel_size,
                intermediate_size=inter if isinstance(inter, int) else None, cuda_graph_bytes=graphs,
            )
            kv_bytes = gpu_memory * cap.GIB * util - non_kv
            notes.append(
                f"KV memory estimated as {gpu_memory} GiB x {util} - {non_kv / cap.GIB:.2f} GiB non-KV "
                "(weights share + activation + non-torch" + (" + CUDA graphs" if graphs else "")
                + "); the startup line 'Available KV cache memory' is authoritative"
            )
            if kv_bytes <= 0:
                notes.append("no memory left for the KV cache: vLLM fails with 'No available memory for the cache blocks'")
                kv_bytes = 0.0

        try:
            est = cap.estimate_capacity(
                shape, kv_bytes, kv_cache_dtype=kv_cache_dtype, tensor_parallel_size=tensor_parallel_size,
                pipeline_parallel_size=pipeline_parallel_size, block_size=block_size, max_model_len=max_model_len,
                max_num_batched_tokens=mnbt, vllm_version=vllm_version,
                speculative_method=speculative_method, num_speculative_tokens=num_speculative_tokens,
                draft_layers=draft_layers, decode_context_parallel_size=decode_context_parallel_size,
                mamba_ssm_cache_dtype=mamba_ssm_cache_dtype, prefix_caching=(False if no_prefix_caching else True if enable_prefix_caching else None),
            )
        except InputError as exc:
            raise _relabel(exc, model_config) from None
        except ValueError as exc:
            raise click.UsageError(str(exc)) from None
        return weights_total, weights_worker, kv_bytes, est

    weights_total, weights_worker, kv_bytes, est = run(tensor_parallel_size, gpu_memory, kv_cache_memory, notes)
    refusal = _refusal(kv_bytes, est, max_model_len)
    smallest: dict[str, Any] = {}
    if refusal:
        smallest = _smallest_that_starts(run, tensor_parallel_size, gpu_memory, kv_cache_memory, max_model_len)
    heads = shape.num_attention_heads
    if heads and heads % tensor_parallel_size:  # vLLM's ModelConfig.verify_with_parallel_config, before any memory
        refusal = (f"{heads} attention heads do not divide by tensor_parallel_size {tensor_parallel_size} (vLLM: "
                   f"'Total number of attention heads ({heads}) must be divisible by tensor parallel size "
                   f"({tensor_parallel_size}).')")
        smallest = {}
        for d in range(tensor_parallel_size + 1, 65):  # the next size that divides the heads and fits
            if heads % d == 0 and not _refusal(*run(d, gpu_memory, kv_cache_memory, [])[2:], max_model_len):
                smallest = {"tensor_parallel_size": d}
                break

    if tensor_parallel_size > shape.num_kv_heads and shape.attention_kind == "mha_gqa":
        notes.append(
            f"tensor_parallel_size {tensor_parallel_size} > {shape.num_kv_heads} KV heads: heads replicated, one per rank"
        )
    if weights_total is not None:
        notes.append(
            f"weights_bytes is one worker's share of an estimated {weights_total / cap.GIB:.2f} GiB model "
            "(parameter count x dtype bytes)"
        )
    if kv_bytes > 0 and est.num_gpu_blocks == 0:
        notes.append("KV memory is smaller than one block")

    result = {
        "kv_bytes_per_token": est.kv_bytes_per_token,
        "block_size": est.layout.block_size,
        "block_bytes": est.layout.block_bytes,
        "num_gpu_blocks": est.num_gpu_blocks,
        "kv_capacity_tokens": est.kv_capacity_tokens,
        "max_concurrency": (round(est.max_concurrency, 2) if est.max_concurrency is not None else None),
        "weights_bytes": weights_worker,
        "groups": [
            {"kind": g.kind, "layers": g.layers, "bytes_per_token": g.bytes_per_token} for g in est.layout.groups
        ],
        "notes": list(dict.fromkeys(list(est.notes) + notes)),
        "starts": not refusal,
    }
    if refusal:
        result["refusal"] = refusal
        result["smallest_that_starts"] = smallest
    if fmt == "json":
        click.echo(json.dumps(result, indent=2))
    else:
        click.echo(_render_text(result, max_model_len))
    if refusal:
        click.get_current_context().exit(REFUSES_EXIT)


REFUSES_EXIT = 2
"""``estimate``'s exit code when vLLM would refuse to start with these settings."""


def _refusal(kv_bytes: float, est, max_model_len: int | None) -> str:
    """Why vLLM would refuse to start ('' when it starts): no KV memory, or a pool smaller than one max_model_len
    request (vLLM's start-up check: 'max seq len ... larger than the maximum number of tokens that can be stored in
    KV cache')."""
    if kv_bytes <= 0:
        return "no memory left for the KV cache (vLLM: 'No available memory for the cache blocks')"
    if est.num_gpu_blocks == 0:
        return "the KV memory is smaller than one block"
    if max_model_len and est.max_concurrency is not None and est.max_concurrency < 1:
        return (f"the pool holds {est.kv_capacity_tokens:,} tokens, less than one request of max_model_len "
                f"{max_model_len:,} (concurrency {est.max_concurrency:.2f}x; vLLM: the model's max seq len is larger "
                "than the maximum number of tokens that can be stored in KV cache)")
    return ""


def _smallest_that_starts(run, tp: int, gpu_memory: float | None, kv_cache_memory: float | None,
                          max_model_len: int | None) -> dict[str, Any]:
    """The smallest tensor_parallel_size (doubling, up to 64) and the smallest memory (GiB, to 0.1) with which the
    same estimate starts; keys absent when none in range does."""
    out: dict[str, Any] = {}

    def starts(tp_: int, gm: float | None, km: float | None) -> bool:
        try:
            _, _, kv, est = run(tp_, gm, km, [])
        except (click.UsageError, InputError, ValueError):
            return False
        return not _refusal(kv, est, max_model_len)

    t = tp * 2
    while t <= 64:
        if starts(t, gpu_memory, kv_cache_memory):
            out["tensor_parallel_size"] = t
            break
        t *= 2
    key, cur = ("gpu_memory_gib", gpu_memory) if gpu_memory is not None else ("kv_cache_memory_gib", kv_cache_memory)
    hi = max(cur or 0.0, 1.0)
    while hi < 1e5 and not (starts(tp, hi, None) if key == "gpu_memory_gib" else starts(tp, None, hi)):
        hi *= 2
    if hi < 1e5:
        lo = cur or 0.0
        for _ in range(40):
            mid = (lo + hi) / 2
            if (starts(tp, mid, None) if key == "gpu_memory_gib" else starts(tp, None, mid)):
                hi = mid
            else:
                lo = mid
            if hi - lo < 0.05:
                break
        out[key] = math.ceil(hi * 10) / 10
    return out


def _text(config: dict[str, Any]) -> dict[str, Any]:
    merged = dict(config)
    if isinstance(config.get("text_config"), dict):
        merged.update(config["text_config"])
    return merged


def _render_text(r: dict[str, Any], max_model_len: int | None) -> str:
    lines = []
    if r.get("refusal"):
        fix = r.get("smallest_that_starts") or {}
        parts = []
        if "tensor_parallel_size" in fix:
            parts.append(f"--tensor-parallel-size {fix['tensor_parallel_size']}")
        if "gpu_memory_gib" in fix:
            parts.append(f"--gpu-memory {fix['gpu_memory_gib']:g} (GiB per GPU)")
        if "kv_cache_memory_gib" in fix:
            parts.append(f"{fix['kv_cache_memory_gib']:g} GiB of KV memory (--kv-cache-memory)")
        lines.append(f"vLLM would refuse to start: {r['refusal']}. Smallest that starts: "
                     + (" or ".join(parts) if parts else "none found (up to tensor_parallel_size 64)") + ".")
    lines += [
        f"KV bytes per token:   {r['kv_bytes_per_token']:,} B",
        f"Block size:           {r['block_size']} tokens ({r['block_bytes']:,} B per block)",
        f"GPU blocks:           {r['num_gpu_blocks']:,}",
        f"GPU KV cache size:    {r['kv_capacity_tokens']:,} tokens",
    ]
    if r["max_concurrency"] is not None:
        lines.append(f"Maximum concurrency for {max_model_len:,} tokens per request: {r['max_concurrency']:.2f}x")
    if r["weights_bytes"] is not None:
        lines.append(f"Weights per worker:   {r['weights_bytes'] / cap.GIB:.2f} GiB (estimate)")
    lines.append("KV-cache groups:")
    for g in r["groups"]:
        lines.append(f"  {g['kind']:<17} {g['layers']:>3} layers  {g['bytes_per_token']:,} B/token")
    if r["notes"]:
        lines.append("Notes:")
        lines.extend(f"  - {n}" for n in r["notes"])
    return "\n".join(lines)
