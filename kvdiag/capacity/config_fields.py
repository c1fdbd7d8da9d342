"""Reading numbers out of a Hugging Face ``config.json``: bounds, the nested ``text_config``, one field.

Errors are :class:`kvdiag.errors.InputError` lines naming the field.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from kvdiag.errors import InputError

# Largest integer a config field may hold: beyond 2**53 a JSON number is no longer an exact count.
MAX_CONFIG_INT = 2**53
# Upper bounds of the fields that size the KV cache (far beyond any published model; catch 1e18-style typos).
FIELD_MAX = {"num_hidden_layers": 100_000, "num_attention_heads": 1_000_000, "num_key_value_heads": 1_000_000,
              "head_dim": 65_536, "kv_lora_rank": 65_536, "qk_rope_head_dim": 65_536, "hidden_size": 10_000_000,
              "sliding_window": 1 << 40, "max_position_embeddings": 1 << 40}


def _int_text(value: int) -> str:
    from ..numbers import int_text

    return int_text(value)


def _num_text(value: float) -> str:
    """``%.6g`` of a field value, without turning an integer too large for a float into an OverflowError."""
    return _int_text(value) if isinstance(value, int) and abs(value) >= 10 ** 18 else "%.6g" % value


def check_config_numbers(config: Any) -> None:
    """Reject numbers no config.json field can mean: NaN, ±Infinity (also ``1e400``, which JSON parsers read as
    infinity) and integers beyond 2**53 anywhere in the document, and a ``text_config`` that is not an object.

    Walks the document without recursion (any nesting depth).

    Raises:
        InputError: ``config: field <dotted.path> = <value>: expected a finite number`` (the caller puts the file
            name in place of ``config``).
    """
    stack: list[tuple[str, Any]] = [("", config)]
    while stack:
        where, node = stack.pop()
        if isinstance(node, Mapping):
            stack.extend((f"{where}.{k}" if where else str(k), v) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((f"{where}[{i}]", v) for i, v in enumerate(node))
        elif isinstance(node, float) and not math.isfinite(node):
            raise InputError(f"config: field {where} = {node!r}: expected a finite number")
        elif isinstance(node, int) and not isinstance(node, bool) and abs(node) > MAX_CONFIG_INT:
            raise InputError(f"config: field {where} = {_int_text(node)}: expected a number below 2**53")
    if isinstance(config, Mapping):
        text = config.get("text_config")
        if text is not None and not isinstance(text, Mapping):
            raise InputError(f"config: field text_config = {type(text).__name__}: expected an object (or null)")


def text_config_of(config: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(config, Mapping):
        raise InputError("config: expected a JSON object (HF config.json)")
    merged = dict(config)
    text = config.get("text_config")
    if text is not None and not isinstance(text, Mapping):
        raise InputError(f"config: field text_config = {type(text).__name__}: expected an object (or null)")
    if isinstance(text, Mapping):
        # Text fields win; top-level fields (torch_dtype, quantization_config) stay as fallback.
        merged.update({k: v for k, v in text.items() if v is not None})
    return merged


def int_field(
    cfg: Mapping[str, Any], *names: str, required: bool = True, purpose: str = "the KV-cache size",
    zero_ok: bool = False,
) -> int | None:
    """The first of ``names`` present in ``cfg`` as an int: finite, whole, positive (or 0 with ``zero_ok``) and
    at most the field's bound; else InputError naming the field."""
    for name in names:
        if name in cfg and cfg[name] is not None:
            value = cfg[name]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or value != int(value):
                raise InputError(f"config: field {name} = {str(value)[:40]!r}: expected an integer")
            hi = FIELD_MAX.get(names[0], MAX_CONFIG_INT)
            if not (0 <= value if zero_ok else 0 < value) or value > hi:
                raise InputError(f"config: field {name} = {_num_text(value)}: expected a "
                                 f"{'non-negative' if zero_ok else 'positive'} integer"
                                 + (f" up to {hi:,}" if value > 0 else ""))
            return int(value)
    if required:
        raise InputError(f"config: missing field {names[0]} (needed for {purpose})")
    return None
