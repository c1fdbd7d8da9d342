"""vLLM version strings and the version-dependent defaults of the capacity model."""

from __future__ import annotations

import re

def parse_vllm_version(text: str | None) -> tuple[int, int, int] | None:
    """``(major, minor, patch)`` from a vLLM version string, None when absent.

    Accepts ``"0.10.1.1"``, ``"v0.11.0"``, ``"0.13.0+faa43dbf.nv26.01"``,
    ``"0.11.0rc2.dev98+g393de22d2"`` and free text containing such a version (the first
    ``X.Y[.Z]`` wins). Version semantics: reference "How this was verified".

    Args:
        text: version string, or None.

    Returns:
        The version tuple, or None for None.

    Raises:
        ValueError: the text holds no ``X.Y`` version.
    """
    if text is None:
        return None
    m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", str(text))
    if not m:
        raise ValueError(f"vLLM version {text!r}: expected a version such as 0.11.0")
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def _version(v: str | tuple[int, int, int] | None) -> tuple[int, int, int] | None:
    return v if isinstance(v, tuple) or v is None else parse_vllm_version(v)


def uses_v0_engine(vllm_version: str | tuple[int, int, int] | None) -> bool:
    """Whether that vLLM version runs the V0 engine by default (< 0.8).

    Source: reference "How this was verified" (``VLLM_USE_V1`` defaults to 1 from 0.8).

    Args:
        vllm_version: version string or tuple; None = unknown.

    Returns:
        True for V0, False for V1 or unknown.

    Raises:
        ValueError: unparseable version string.
    """
    v = _version(vllm_version)
    return v is not None and v < (0, 8, 0)


TOKEN_LINE_GROUP_AWARE_FROM = (0, 21, 0)
"""First version assumed to print ``int(max_concurrency × max_model_len)`` as "GPU KV cache
size". Observed: 0.20.0 still prints ``num_blocks // groups × block`` (U01), 0.24.0 prints the
group-aware number (R17; reference K4). The release in between is not verified."""

MAMBA_ALIGN_DEFAULT_FROM = (0, 20, 0)
"""First version assumed to default ``mamba_cache_mode='align'`` with prefix caching (two
state pages per request). Absent at 0.13.0 (R35 reproduces with one page), seen at 0.20.0
(U01 log line "Mamba cache mode is set to 'align'"). The exact release is not verified."""


def default_mamba_cache_mode(vllm_version: str | tuple[int, int, int] | None, prefix_caching: bool = True) -> str:
    """``"align"`` or ``"none"``: how many state pages vLLM keeps per request by default.

    See :data:`MAMBA_ALIGN_DEFAULT_FROM` (``config/cache.py`` / ``MambaSpec`` in
    ``v1/kv_cache_interface.py``: ``align`` keeps 2 pages per request, ``none`` 1).

    Args:
        vllm_version: version string or tuple; None → ``"none"``.
        prefix_caching: prefix caching on (V1 default).

    Returns:
        The mode name.

    Raises:
        ValueError: unparseable version string.
    """
    v = _version(vllm_version)
    if prefix_caching and v is not None and v >= MAMBA_ALIGN_DEFAULT_FROM:
        return "align"
    return "none"
