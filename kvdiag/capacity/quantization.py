"""What a quantisation scheme stores for each module of a checkpoint, and which modules it leaves in 16 bits.

One rule per scheme, from the vLLM method that creates the module's tensors (``create_weights``) and decides whether
a module is quantised (``get_quant_method``); file @ version named per rule. ``v0.33.0`` is the lab's installed vLLM
(``/tmp/twin-venv/.../vllm``, ``_version.py`` 0.33.0); the earlier pass read the same files @ v0.11.0 and the
rules below did not change between them except where a rule says so.

Bytes of one quantised ``out x in`` matrix (``g`` = group size along ``in``; scales in the model dtype ``s`` unless
named):

* ``fp8`` (``layers/quantization/fp8.py``): ``out·in`` fp8 + a fp32 ``weight_scale`` and ``input_scale`` per
  matrix, or with ``weight_block_size [b0, b1]`` fp32 ``ceil(out/b0)·ceil(in/b1)`` scales. Skips the checkpoint's
  ``ignored_layers`` / ``modules_to_not_convert`` (exact names, ``is_layer_skipped``). ``--quantization fp8`` on a
  16-bit checkpoint (online) quantises every linear the same way. Embeddings and the LM head stay 16-bit.
* ``fbgemm_fp8`` (``fbgemm_fp8.py``): ``out·in`` fp8 + fp32 per output channel; skips ``modules_to_not_convert``.
* ``compressed-tensors`` (``compressed_tensors/compressed_tensors.py``, ``utils.py should_ignore_layer``): each
  ``config_groups`` entry applies to its ``targets`` (``Linear`` = every linear layer and the fused MoE experts, or
  names / ``re:`` regexes; the LM head only when a target names it); ``ignore`` (names or ``re:`` regexes) wins.
  Weights ``num_bits/8`` per element; scales: ``tensor`` one fp32, ``channel`` ``out`` fp32 (fp8) / ``s`` (int),
  ``group`` ``out·in/g`` in ``s`` (fp8 ``E4M3`` for ``nvfp4-pack-quantized``, plus two fp32 global scales),
  ``block`` like fp8; ``symmetric: false`` adds ``out·in/g`` packed ``num_bits`` zero points.
* ``modelopt`` (``modelopt.py``): one ``quant_algo`` for every linear, expert and the LM head (``ParallelLMHead``,
  quantised unless excluded): ``FP8`` fp8 per tensor; ``FP8_PER_CHANNEL_PER_TOKEN`` fp32 per row; ``FP8_PB_WO`` fp32
  per 128x128 block; ``NVFP4`` ``out·in/2`` + fp8 scale per 16 + ``weight_scale_2`` and ``input_scale`` fp32
  (``W4A16_NVFP4`` without ``input_scale``); ``MXFP8`` fp8 + e8m0 per 32. ``exclude_modules`` (``hf_quant_config.json``)
  / ``ignore`` (config.json) matched exactly, as substrings and as ``fnmatch`` wildcards (``is_layer_excluded``);
  names with ``vision_tower`` / ``vision_model`` are never quantised. ``MIXED_PRECISION``: each layer's algo from
  ``quantized_layers`` (its name, its packed vLLM name, or keys under it for the experts), every layer not listed
  left in the model dtype (``ModelOptMixedPrecisionConfig``).
* ``awq`` / ``awq_marlin`` (``auto_awq.py``): ``qweight`` ``out·in·bits/8``, ``qzeros`` ``(in/g)·out·bits/8``,
  ``scales`` ``(in/g)·out`` in ``s``; skips ``modules_to_not_convert`` as substrings.
* ``gptq`` / ``gptq_marlin`` (``auto_gptq.py``): the same three tensors (``group_size -1``: ``g = in``); the LM
  head only with ``lm_head: true``; ``dynamic`` entries ``-:regex`` skip the modules they match.
* ``bitsandbytes`` (``model_loader/bitsandbytes_loader.py``): 4-bit ``out·in/2`` + fp32 absmax per 64 (with
  ``bnb_4bit_use_double_quant``: uint8 absmax per 64 + fp32 per 256 blocks); 8-bit ``out·in`` + fp32 per row;
  skips ``llm_int8_skip_modules`` as substrings.
* ``mxfp4`` (``mxfp4.py`` ``Mxfp4Config.get_quant_method``): only the fused MoE experts are MXFP4 (linear layers
  fall back to ``UnquantizedLinearMethod``): ``out·in/2`` + a uint8 scale per 32, on sizes rounded up per backend
  (``fused_moe/oracle/mxfp4.py mxfp4_round_up_hidden_size_and_intermediate_size``: the default CUDA path rounds the
  intermediate size to 64; the Triton / FlashInfer paths of Hopper and Blackwell to 128-256 and the hidden size to
  256, selectable with ``mxfp4_pad``).

Every scheme keeps the MoE router (``GateLinear`` / ``ReplicatedLinear(quant_config=None)`` in ``qwen3_moe.py``,
``qwen3_next.py``, ``deepseek_v2.py`` @ v0.33.0), norms, conv1d and per-head parameters, biases and the rotary
buffer in the model dtype.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from fnmatch import fnmatch
from typing import Any, Mapping

from kvdiag.errors import InputError

from .modules import Module

QUANT_METHODS = ("fp8", "fbgemm_fp8", "awq", "awq_marlin", "gptq", "gptq_marlin", "bitsandbytes", "modelopt",
                 "modelopt_fp4", "modelopt_mxfp8", "modelopt_mixed", "nvfp4", "compressed-tensors", "mxfp4", "int8", "w8a8")
"""``--quantization`` / ``quant_method`` values whose per-module bytes this module knows."""


@dataclass(frozen=True)
class _Format:
    """How one quantised matrix is stored."""

    bits: float
    scale: str  # "tensor", "channel", "group", "block", "none"
    group: int = 0
    scale_bytes: float = 4.0
    zero_bits: float = 0.0
    block: tuple[int, int] = (0, 0)
    per_matrix_bytes: float = 0.0  # global scales of the matrix (fp32 weight_scale_2, input_scale ...)

    def bytes(self, out_f: int, in_f: int) -> float:
        w = out_f * in_f * self.bits / 8
        if self.scale == "tensor":
            s = self.scale_bytes
        elif self.scale == "channel":
            s = out_f * self.scale_bytes
        elif self.scale == "group":
            g = self.group if self.group > 0 else in_f
            n = out_f * math.ceil(in_f / g)
            s = n * self.scale_bytes + n * self.zero_bits / 8
        elif self.scale == "block":
            s = math.ceil(out_f / self.block[0]) * math.ceil(in_f / self.block[1]) * self.scale_bytes
        else:
            s = 0.0
        return w + s + self.per_matrix_bytes


@dataclass(frozen=True)
class Scheme:
    """A checkpoint's quantisation: which modules it quantises and how they are stored.

    Attributes:
        method: vLLM method name (``fp8``, ``awq`` ...), None for a 16-bit checkpoint.
        description: one line for notes.
        dtype_bytes: bytes of the model dtype (unquantised modules, biases, int schemes' scales).
        formats: list of ``(targets, format)``; the first whose targets match the module applies.
        ignore: the checkpoint's ignore list (names, ``re:`` regexes or wildcards, per ``match``).
        match: ``exact``, ``substring``, ``ct`` (compressed-tensors names / ``re:``), ``modelopt``.
        experts_only: only fused MoE experts are quantised (mxfp4).
        lm_head: the LM head is quantised when not ignored.
        mxfp4_pad: ``(hidden multiple, intermediate multiple)`` the MoE backend rounds experts to.
        forced_16bit: name parts vLLM never quantises under the scheme (ModelOpt's vision towers).
        per_layer: ModelOpt MIXED_PRECISION ``quantized_layers`` as ``(name, format)``; unlisted layers stay 16-bit.
    """

    method: str | None
    description: str
    dtype_bytes: int
    formats: tuple[tuple[tuple[str, ...], _Format], ...] = ()
    ignore: tuple[str, ...] = ()
    match: str = "exact"
    experts_only: bool = False
    lm_head: bool = False
    mxfp4_pad: tuple[int, int] = (1, 64)
    forced_16bit: tuple[str, ...] = field(default=())
    per_layer: tuple[tuple[str, "_Format"], ...] = field(default=())

    def _ignored(self, m: Module) -> bool:
        names = (m.name,) + m.aliases + m.fused
        if any(f in m.name for f in self.forced_16bit):  # vLLM's own prefix, not the checkpoint's aliases
            return True
        for entry in self.ignore:
            for n in names:
                if self.match == "substring" and entry in n:
                    return True
                if self.match == "ct" and (n == entry or (entry.startswith("re:") and re.match(entry[3:], n))):
                    return True
                if self.match == "modelopt" and (n == entry or entry in n or fnmatch(n, entry)):
                    return True
                if self.match == "exact" and (n == entry or n.startswith(entry + ".")):
                    return True
        return False

    def format_of(self, m: Module) -> _Format | None:
        """The storage of module ``m``, or None when it stays in the model dtype."""
        if self.method is None or m.kind in ("dense", "buffer", "embedding"):
            return None
        if m.kind == "lm_head" and not self.lm_head:
            return None
        if self.experts_only and m.kind != "experts":
            return None
        if self._ignored(m):
            return None
        if self.per_layer:
            return _mixed_format(self.per_layer, m)
        for targets, fmt in self.formats:
            if _targeted(m, targets):
                return fmt
            if m.kind == "lm_head" and self.method != "compressed-tensors" and "Linear" in targets:
                return fmt  # GPTQ lm_head: true, modelopt's ParallelLMHead: the linear scheme
        return None

    def module_bytes(self, m: Module) -> float:
        """Bytes of module ``m`` as vLLM holds it (all experts of an ``experts`` entry; biases in the model dtype)."""
        fmt = self.format_of(m)
        if fmt is None:
            return m.params * self.dtype_bytes
        out_f, in_f = m.out_features, m.in_features
        if self.experts_only and self.method == "mxfp4":
            hp, ip = self.mxfp4_pad
            # gate_up: (2·inter) x hidden; down: hidden x inter
            if m.name.endswith("gate_up_proj"):
                out_f, in_f = 2 * _round_up(out_f // 2, ip), _round_up(in_f, hp)
            else:
                out_f, in_f = _round_up(out_f, hp), _round_up(in_f, ip)
        return m.count * fmt.bytes(out_f, in_f) + m.bias * self.dtype_bytes


def _round_up(x: int, k: int) -> int:
    return -(-x // k) * k if k > 1 else x


def _targeted(m: Module, targets: tuple[str, ...]) -> bool:
    names = (m.name,) + m.aliases + m.fused
    for t in targets:
        if t == "*":
            return True
        if t == "Linear" and m.kind in ("linear", "experts"):
            return True
        if t.startswith("re:") and any(re.match(t[3:], n) for n in names):
            return True
        if any(n == t or n.endswith("." + t) for n in names):
            return True
    return False


def _ct_format(w: Mapping[str, Any], fmt_name: str, dtype_bytes: int) -> _Format:
    bits = w.get("num_bits")
    if bits is None:
        raise InputError("config: missing field quantization_config.config_groups.*.weights.num_bits")
    strategy = str(w.get("strategy") or ("group" if w.get("group_size") else "tensor"))
    is_float = w.get("type") == "float"
    zero = 0.0 if w.get("symmetric", True) else float(bits)
    if strategy in ("group", "tensor_group"):
        group = w.get("group_size")
        if not group:
            raise InputError("config: missing field quantization_config.config_groups.*.weights.group_size")
        if "nvfp4" in fmt_name or (bits == 4 and is_float):
            return _Format(bits, "group", group, 1.0, per_matrix_bytes=8.0)  # fp8 scales + 2 fp32 globals
        return _Format(bits, "group", group, float(dtype_bytes), zero_bits=zero)
    if strategy == "channel":
        return _Format(bits, "channel", scale_bytes=4.0 if is_float else float(dtype_bytes))
    if strategy == "block":
        block = w.get("block_structure") or [128, 128]
        return _Format(bits, "block", block=(int(block[0]), int(block[1])))
    return _Format(bits, "tensor", scale_bytes=8.0)  # weight_scale + input_scale, fp32


def scheme_of(quantization: str | None, qc: Mapping[str, Any] | None, dtype_bytes: int, *,
              mxfp4_pad: tuple[int, int] | None = None) -> Scheme:
    """The checkpoint's scheme from ``--quantization`` (wins) and ``quantization_config``.

    Raises:
        InputError: unknown method, or a ``quantization_config`` lacking the field the method needs (named).
    """
    qc = qc if isinstance(qc, Mapping) else {}
    method = (quantization or qc.get("quant_method") or "").lower() or None
    if method is None and qc:
        raise InputError("config: missing field quantization_config.quant_method (the checkpoint is quantised but "
                         "names no scheme; give --quantization)")
    lin = ("Linear",)
    if method is None:
        return Scheme(None, f"unquantised ({dtype_bytes} B per weight)", dtype_bytes)
    if method == "fp8":
        ignore = tuple(qc.get("ignored_layers") or qc.get("modules_to_not_convert") or ())
        block = qc.get("weight_block_size")
        if isinstance(block, list) and len(block) == 2 and all(isinstance(b, int) and b > 0 for b in block):
            fmt = _Format(8, "block", block=(block[0], block[1]))
            return Scheme(method, f"fp8, fp32 scale per {block[0]}x{block[1]} block", dtype_bytes, ((lin, fmt),),
                          ignore)
        return Scheme(method, "fp8 (1 B per weight, per-tensor scale)", dtype_bytes,
                      ((lin, _Format(8, "tensor", scale_bytes=8.0)),), ignore)
    if method in ("fbgemm_fp8", "int8", "w8a8"):
        return Scheme(method, f"{method} (1 B per weight, per-channel scale)", dtype_bytes,
                      ((lin, _Format(8, "channel")),), tuple(qc.get("modules_to_not_convert") or ()), "substring")
    if method in ("awq", "awq_marlin", "gptq", "gptq_marlin"):
        bits = qc.get("bits", qc.get("w_bit"))
        group = qc.get("group_size", qc.get("q_group_size"))
        if bits is None:
            raise InputError(f"config: missing field quantization_config.bits (needed for the {method} weights)")
        if group is None:
            raise InputError(f"config: missing field quantization_config.group_size (needed for the {method} weights)")
        fmt = _Format(bits, "group", int(group), float(dtype_bytes), zero_bits=float(bits))
        if method.startswith("awq"):
            return Scheme(method, f"{method} {bits}-bit, group {group}", dtype_bytes, ((lin, fmt),),
                          tuple(qc.get("modules_to_not_convert") or ()), "substring")
        dyn = qc.get("dynamic") if isinstance(qc.get("dynamic"), Mapping) else {}
        ignore = tuple("re:" + k[2:] for k in dyn if str(k).startswith("-:"))
        return Scheme(method, f"{method} {bits}-bit, group {group}", dtype_bytes, ((lin, fmt),), ignore, "ct",
                      lm_head=bool(qc.get("lm_head")))
    if method == "bitsandbytes":
        skip = tuple(qc.get("llm_int8_skip_modules") or ())
        if qc.get("load_in_8bit"):
            return Scheme(method, "bitsandbytes 8-bit", dtype_bytes, ((lin, _Format(8, "channel")),), skip,
                          "substring")
        if qc.get("bnb_4bit_use_double_quant"):
            fmt = _Format(4, "group", 64, 1.0 + 4 / 256)
            return Scheme(method, "bitsandbytes 4-bit, double quant", dtype_bytes, ((lin, fmt),), skip, "substring")
        return Scheme(method, "bitsandbytes 4-bit (fp32 absmax per 64)", dtype_bytes,
                      ((lin, _Format(4, "group", 64, 4.0)),), skip, "substring")
    if method in ("modelopt", "modelopt_fp4", "modelopt_mxfp8", "modelopt_mixed", "nvfp4"):
        return _modelopt_scheme(method, qc, dtype_bytes)
    if method == "mxfp4":
        return Scheme(method, "mxfp4 experts (0.5 B + 1 B scale per 32 weights), other layers 16-bit", dtype_bytes,
                      ((lin, _Format(4, "group", 32, 1.0)),), tuple(qc.get("modules_to_not_convert") or ()),
                      experts_only=True, mxfp4_pad=mxfp4_pad or (1, 64))
    if method == "compressed-tensors":
        groups = qc.get("config_groups")
        if not isinstance(groups, Mapping) or not groups:
            raise InputError("config: missing field quantization_config.config_groups (compressed-tensors scheme)")
        fmt_name = str(qc.get("format") or "")
        formats = []
        for g in groups.values():
            w = g.get("weights") if isinstance(g, Mapping) else None
            if not isinstance(w, Mapping):
                raise InputError("config: missing field quantization_config.config_groups.*.weights.num_bits")
            targets = tuple(g.get("targets") or ("Linear",))
            formats.append((targets, _ct_format(w, str(g.get("format") or fmt_name), dtype_bytes)))
        lm = any("lm_head" in t for t, _ in formats)
        first = next(iter(groups.values()))["weights"]
        return Scheme(method, f"compressed-tensors {first['num_bits']}-bit {first.get('type', 'int')} "
                      f"({fmt_name or 'format not named'})", dtype_bytes, tuple(formats),
                      tuple(qc.get("ignore") or ()), "ct", lm_head=lm)
    if quantization:
        raise InputError(f"quantization {method!r}: expected one of {', '.join(QUANT_METHODS)}")
    raise InputError(f"config: quantization_config lists scheme {method!r} (quant_method) that kvdiag does not size "
                     f"(it sizes {', '.join(QUANT_METHODS)}); give --quantization for the method vLLM serves it with")


def _modelopt_format(algo: str, group: int) -> _Format | None:
    """Storage of one ModelOpt ``quant_algo`` (``modelopt.py`` @ v0.33.0 ``resolve`` and the ``QuantKeyScheme``
    ``create_weights``): FP8 per tensor (fp8 + fp32 ``weight_scale`` and ``input_scale``); FP8_PER_CHANNEL_PER_TOKEN
    (fp8 + fp32 per output row); FP8_PB_WO / FP8_BLOCK_SCALES (fp8 + fp32 per 128x128 block); NVFP4 (uint8 of two
    values + fp8 E4M3 scale per ``group`` + fp32 ``weight_scale_2`` and ``input_scale``); W4A16_NVFP4 (the same without
    ``input_scale``); MXFP8 (fp8 + e8m0 uint8 scale per 32). None for an algo vLLM does not serve."""
    algo = algo.upper()
    if algo == "FP8":
        return _Format(8, "tensor", scale_bytes=8.0)
    if algo == "FP8_PER_CHANNEL_PER_TOKEN":
        return _Format(8, "channel", scale_bytes=4.0)
    if algo in ("FP8_PB_WO", "FP8_BLOCK_SCALES"):
        return _Format(8, "block", block=(128, 128))
    if algo == "NVFP4":
        return _Format(4, "group", group, 1.0, per_matrix_bytes=8.0)
    if algo == "W4A16_NVFP4":
        return _Format(4, "group", group, 1.0, per_matrix_bytes=4.0)
    if algo == "MXFP8":
        return _Format(8, "group", 32, 1.0)
    return None


MODELOPT_ALGOS = ("FP8", "FP8_PER_CHANNEL_PER_TOKEN", "FP8_PB_WO", "NVFP4", "W4A16_NVFP4", "MXFP8", "MIXED_PRECISION")
"""ModelOpt ``quant_algo`` values vLLM 0.33.0 serves (``modelopt.py`` ``LINEAR_ALGOS`` + ``MIXED_PRECISION``)."""


def _modelopt_scheme(method: str, qc: Mapping[str, Any], dtype_bytes: int) -> "Scheme":
    """ModelOpt checkpoints (``modelopt.py`` @ v0.33.0): ``quantization_config`` of config.json (``quant_algo``,
    ``ignore``, ``group_size``, ``quantized_layers``) or the legacy ``hf_quant_config.json`` shape (``quantization``:
    ``quant_algo``, ``exclude_modules``). One algo for every linear layer, the LM head and the experts (excluded
    modules and vision towers stay 16-bit), or ``MIXED_PRECISION``: each layer's algo from ``quantized_layers``,
    every layer it does not list left unquantised (``ModelOptMixedPrecisionConfig.get_quant_method``).

    Raises:
        InputError: no ``quant_algo``, an algo vLLM does not serve, MIXED_PRECISION without ``quantized_layers``.
    """
    inner = qc.get("quantization") if isinstance(qc.get("quantization"), Mapping) else {}
    src = inner or qc
    algo = str(src.get("quant_algo") or qc.get("quant_algo") or "").upper()
    if not algo:
        if method in ("modelopt_fp4", "nvfp4"):
            algo = "NVFP4"
        elif method == "modelopt_mxfp8":
            algo = "MXFP8"
        else:
            raise InputError("config: missing field quantization_config.quant_algo (modelopt: one of "
                             f"{', '.join(MODELOPT_ALGOS)})")
    exclude = tuple(src.get("exclude_modules") or qc.get("ignore") or qc.get("exclude_modules") or ())
    group = src.get("group_size") or qc.get("group_size")
    forced = ("vision_tower", "vision_model", "vit_large_projector")
    if algo == "MIXED_PRECISION":
        layers = src.get("quantized_layers") or qc.get("quantized_layers")
        if not isinstance(layers, Mapping) or not layers:
            raise InputError("config: missing field quantization_config.quantized_layers (modelopt MIXED_PRECISION "
                             "names each layer's quant_algo there)")
        if group is None:  # the first NVFP4-family entry's group_size, else 16 (_from_config)
            group = next((v.get("group_size", 16) for v in layers.values() if isinstance(v, Mapping)
                          and str(v.get("quant_algo", "")).upper() in ("NVFP4", "W4A16_NVFP4")), 16)
        per_layer = []
        algos = set()
        for name, info in layers.items():
            a = str(info.get("quant_algo", "")).upper() if isinstance(info, Mapping) else ""
            fmt = _modelopt_format(a, int(info.get("group_size") or group) if isinstance(info, Mapping) else 16)
            if fmt is None:
                raise InputError(f"config: quantization_config.quantized_layers.{name}.quant_algo = {a or None!r}: "
                                 f"expected one of {', '.join(MODELOPT_ALGOS[:-1])}")
            per_layer.append((str(name), fmt))
            algos.add(a)
        return Scheme("modelopt_mixed", f"modelopt MIXED_PRECISION ({' + '.join(sorted(algos))} per layer, "
                      f"{len(per_layer)} layers listed; the rest 16-bit)", dtype_bytes, (), exclude, "modelopt",
                      lm_head=True, per_layer=tuple(per_layer))
    fmt = _modelopt_format(algo, int(group or 16))
    if fmt is None:
        raise InputError(f"config: quantization_config lists scheme 'modelopt {algo}' (quant_algo) that kvdiag does "
                         f"not size (vLLM 0.33 serves {', '.join(MODELOPT_ALGOS)})")
    if algo == "NVFP4" and isinstance(qc.get("config_groups"), Mapping) and qc["config_groups"] and all(
            isinstance(g, Mapping) and g.get("input_activations") is None for g in qc["config_groups"].values()):
        fmt = _modelopt_format("W4A16_NVFP4", int(group or 16))  # ModelOptNvFp4Config._from_config
    desc = {"FP8": "modelopt FP8", "NVFP4": "NVFP4 (0.5 B + fp8 scale per 16 weights)"}.get(algo, f"modelopt {algo}")
    if "NVFP4" in algo:  # qwen3_5_mtp.py @ v0.33.0: mtp.fc is bf16 in NVFP4 checkpoints, built unquantised
        forced = forced + ("mtp.fc",)
    return Scheme(method, desc, dtype_bytes, (((("Linear",), fmt)),), exclude, "modelopt", lm_head=True,
                  forced_16bit=forced)


_FUSED_OF = {"q_proj": "qkv_proj", "k_proj": "qkv_proj", "v_proj": "qkv_proj", "gate_proj": "gate_up_proj",
             "up_proj": "gate_up_proj", "in_proj_qkv": "in_proj_qkvz", "in_proj_z": "in_proj_qkvz",
             "in_proj_b": "in_proj_ba", "in_proj_a": "in_proj_ba"}
"""vLLM's packed module of a checkpoint shard (``packed_modules_mapping`` of llama.py, qwen3_5.py @ v0.33.0):
a MIXED_PRECISION table may name either."""


def _mixed_format(per_layer: tuple[tuple[str, "_Format"], ...], m: Module) -> "_Format | None":
    """The layer's format under MIXED_PRECISION, looked up as ``_resolve_quant_algo`` does (``modelopt.py``
    @ v0.33.0): the module's name (or its ``language_model.model.`` / ``model.language_model.`` twin, ``lm_head``),
    its packed vLLM name, then any listed key under it (the experts: ``...mlp.experts.0.up_proj`` under
    ``...mlp.experts``), then for experts any key under the MLP (``...mlp.``)."""
    table = dict(per_layer)
    names = (m.name,) + m.aliases
    if m.kind == "experts":
        names = tuple(dict.fromkeys(n.rsplit(".", 1)[0] for n in names))  # vLLM's RoutedExperts prefix
    for n in names:
        if n in table:
            return table[n]
    if m.kind == "lm_head" and "lm_head" in table:
        return table["lm_head"]
    for n in names:
        base, _, leaf = n.rpartition(".")
        fused = _FUSED_OF.get(leaf)
        if fused and f"{base}.{fused}" in table:
            return table[f"{base}.{fused}"]
    for n in names:
        for key, fmt in per_layer:
            if key.startswith(n + "."):
                return fmt
    if m.kind == "experts":
        for n in names:
            parent = n.rsplit(".experts", 1)[0] + "."
            for key, fmt in per_layer:
                if key.startswith(parent):
                    return fmt
    return None



def bytes_per_weight(quantization: str | None, qc: Mapping[str, Any] | None, dtype_bytes: int) -> tuple[float, str]:
    """Bytes one weight of a large quantised linear layer takes, scales included, and a one-line description.

    The per-element figure of :func:`scheme_of`'s storage on a 4096 x 4096 matrix, rounded to its limit (per-tensor
    scales vanish); the weights estimate itself prices every module (:meth:`Scheme.module_bytes`).

    Raises:
        InputError: unknown method, or a ``quantization_config`` lacking the field the method needs (named).
    """
    s = scheme_of(quantization, qc, dtype_bytes)
    if s.method is None:
        return float(dtype_bytes), s.description
    fmt = s.formats[0][1] if s.formats else s.per_layer[0][1]
    n = 1 << 14
    per = (fmt.bytes(n, n) - (fmt.per_matrix_bytes + (fmt.scale_bytes if fmt.scale == "tensor" else 0))) / (n * n)
    if fmt.scale == "channel" or (fmt.scale == "group" and fmt.group <= 0):
        per = fmt.bits / 8  # one scale per output channel / column: nothing per weight
    return per, s.description
