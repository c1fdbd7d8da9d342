"""vLLM version strings and the version-dependent defaults of the capacity model."""

from __future__ import annotations

import re
from dataclasses import dataclass

_VERSION_RE = re.compile(
    r"v?(?P<release>\d+\.\d+(?:\.\d+)*)(?:rc(?P<rc>\d+))?(?:\.post(?P<post>\d+))?(?:\.dev(?P<dev>\d+))?"
    r"(?:\+(?P<local>[0-9A-Za-z.]+))?"
)


@dataclass(frozen=True)
class VllmVersion:
    """A vLLM version string taken apart (PEP 440, as vLLM's setuptools-scm builds name themselves).

    Attributes:
        text: the string as given.
        release: ``(major, minor, patch)``; a fourth component (``0.10.1.1``) is kept in ``extra``.
        extra: release components after the third (``(1,)`` for ``0.10.1.1``).
        rc: N of ``rcN`` (a release candidate of ``release``), else None.
        dev: N of ``.devN`` (N commits after the last tag), else None.
        local: text after ``+`` (``g393de22d2`` git sha, ``cu130``, ``faa43dbf.nv26.01`` NGC), else None.
    """

    text: str
    release: tuple[int, int, int]
    extra: tuple[int, ...] = ()
    rc: int | None = None
    dev: int | None = None
    local: str | None = None

    @property
    def is_prerelease(self) -> bool:
        """True for ``rcN`` and ``.devN`` builds: code on the way to ``release``, not the release itself."""
        return self.rc is not None or self.dev is not None

    @property
    def git_sha(self) -> str | None:
        """The ``g<sha>`` part of a nightly's local version, else None."""
        if self.local:
            m = re.match(r"g([0-9a-f]{7,40})", self.local)
            if m:
                return m.group(1)
        return None


def parse_vllm_version_full(text: str) -> VllmVersion:
    """Take a vLLM version string apart: ``0.11.0rc2.dev98+g393de22d2``, ``0.10.1.dev101+gbda9d0535``,
    ``0.13.0+faa43dbf.nv26.01``, ``v0.20.0``, ``0.10.1.1`` (the first version-looking run in free text).

    Raises:
        ValueError: no ``X.Y`` version in the text.
    """
    m = _VERSION_RE.search(str(text))
    if not m:
        raise ValueError(f"vLLM version {text!r}: expected a version such as 0.11.0, 0.11.0rc2 or 0.10.1.dev101+gbda9d0535")
    parts = [int(x) for x in m.group("release").split(".")]
    parts += [0] * (3 - len(parts))
    return VllmVersion(
        text=str(text), release=(parts[0], parts[1], parts[2]), extra=tuple(parts[3:]),
        rc=int(m.group("rc")) if m.group("rc") else None,
        dev=int(m.group("dev")) if m.group("dev") else None,
        local=m.group("local"),
    )


def prerelease_note(text: str | None) -> str | None:
    """A note for pre-release builds: which release's rules the capacity model applies to them.

    Rule (this model's, stated in every rule's range): an ``rcN`` or ``.devN`` build of X.Y.Z is built on the way
    to X.Y.Z and already carries its sizing and printing rules (vLLM cuts release candidates from the release
    branch, and nightlies named X.Y.Z.devN are main after the previous tag), so rules that start at X.Y.Z apply.
    A nightly between two verified releases may carry either rule: the note says so.
    """
    if text is None:
        return None
    v = parse_vllm_version_full(text)
    if not v.is_prerelease:
        return None
    kind = f"rc{v.rc}" if v.rc is not None else "nightly"
    sha = f" (git {v.git_sha})" if v.git_sha else ""
    return (f"vLLM {text} is a {kind} build{sha} of {'.'.join(map(str, v.release))}: that release's sizing and "
            "printing rules are applied; a nightly may predate a rule that changed in that release")


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


def as_version(v: str | tuple[int, int, int] | None) -> tuple[int, int, int] | None:
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
    v = as_version(vllm_version)
    return v is not None and v < (0, 8, 0)


TOKEN_LINE_GROUP_AWARE_FROM = (0, 21, 0)
"""First version assumed to print ``int(max_concurrency × max_model_len)`` as "GPU KV cache
size". Observed: 0.20.0 still prints ``num_blocks // groups × block`` (U01), 0.24.0 prints the
group-aware number (R17; reference K4). The release in between is not verified."""

MAMBA_ALIGN_DEFAULT_FROM = (0, 20, 0)
"""First version assumed to default ``mamba_cache_mode='align'`` with prefix caching (two
state pages per request). Absent at 0.13.0 (R35 reproduces with one page), seen at 0.20.0
(U01 log line "Mamba cache mode is set to 'align'"). The exact release is not verified."""


MAMBA_PREFIX_ALL_FROM = (0, 13, 0)
"""From this version (read @ v0.13.0; 0.12 not read, 0.11.0 forces prefix caching off for hybrids) until
:data:`MAMBA_ALIGN_DEFAULT_FROM`, an explicit ``--enable-prefix-caching`` on a model that supports Mamba prefix
caching keeps one state page per attention block of the request (``MambaSpec.max_memory_usage_bytes`` =
``cdiv(max_model_len, mamba_block_size)`` pages, ``v1/kv_cache_interface.py @ v0.13.0``) and aligns the attention
block to the Mamba chunk size (``HybridAttentionMambaModelConfig``, ``model_executor/models/config.py @ v0.13.0``)."""

MAMBA_PREFIX_CACHING_MODEL_TYPES = ("bamba", "falcon_h1", "granitemoehybrid", "jamba", "mamba", "mamba2",
                                    "nemotron_h", "zamba2")
"""``model_type`` of the 0.13.0 models with ``supports_mamba_prefix_caching`` (``model_executor/models/*.py``)."""


def default_mamba_cache_mode(vllm_version: str | tuple[int, int, int] | None, prefix_caching: bool | None = True,
                             model_type: str | None = None) -> str:
    """``"align"`` or ``"none"``: how many state pages vLLM keeps per request by default.

    See :data:`MAMBA_ALIGN_DEFAULT_FROM` (``config/cache.py`` / ``MambaSpec`` in
    ``v1/kv_cache_interface.py``: ``align`` keeps 2 pages per request, ``none`` 1). Earlier releases, read:
    0.11.0 switches prefix caching off for every hybrid model (``MambaModelConfig.verify_and_update_config``,
    ``model_executor/models/config.py``); 0.13.0 leaves it off by default (``ModelConfig.is_prefix_caching_supported``
    is False for ``attn_type == "hybrid"``, ``config/model.py``; ``engine/arg_utils.py``), so both keep one state page
    per request. An explicit ``--enable-prefix-caching`` on 0.13 with a model that supports Mamba prefix caching
    (Bamba, Falcon-H1, Granite-4 hybrid, Jamba, Mamba, Mamba-2, Nemotron-H, Zamba2) keeps
    ``ceil(max_model_len / block)`` state pages with a Mamba-chunk-aligned block: not modelled here.

    Args:
        vllm_version: version string or tuple; None → ``"none"``.
        prefix_caching: True when on (explicitly, or the V1 default from 0.20), False when off, None for the
            version's default for hybrid models (off before 0.20, on from 0.20).
        model_type: the model's ``model_type`` (the 0.13 opt-in applies to :data:`MAMBA_PREFIX_CACHING_MODEL_TYPES`).

    Returns:
        The mode name.

    Raises:
        ValueError: unparseable version string.
    """
    v = as_version(vllm_version)
    if prefix_caching is False or v is None:
        return "none"
    if v >= MAMBA_ALIGN_DEFAULT_FROM:
        return "align"
    if prefix_caching and v >= MAMBA_PREFIX_ALL_FROM and (model_type or "") in MAMBA_PREFIX_CACHING_MODEL_TYPES:
        return "all"
    return "none"


MLA_FROM = (0, 7, 1)
"""First version that caches DeepSeek-V2/V3 attention as one MLA latent (``ModelConfig.use_mla``,
``config.py @ v0.7.1``). Before it (``config.py @ v0.6.4``, ``@ v0.7.0``) every layer cached full per-head K and V
of ``num_key_value_heads`` heads (see :data:`DEEPSEEK_HEAD_192_FROM` for the head size)."""

DEEPSEEK_HEAD_192_FROM = (0, 7, 0)
"""Head size of pre-MLA DeepSeek-V2: ``config.py get_head_size @ v0.6.4`` returns 256 (192 padded for
FlashAttention); ``@ v0.7.0`` returns ``qk_nope_head_dim + qk_rope_head_dim`` (192) for deepseek_v2 and deepseek_v3.
0.6.5 – 0.6.6 were not read: 256 is assumed there."""

DCP_TOKEN_LINE_MULTIPLIED = ((0, 10, 2), (0, 20, 99))
"""Versions whose "GPU KV cache size" line is ``num_blocks // groups × block × dcp`` ("Multiplying the GPU KV
cache size by the dcp_world_size", ``v1/core/kv_cache_utils.py @ v0.11.0``; ``× pcp × dcp`` ``@ v0.13.0``). From
:data:`TOKEN_LINE_GROUP_AWARE_FROM` the line is ``int(max_concurrency × max_model_len)`` and the context-parallel
factor enters through the per-request blocks, ``cdiv(max_model_len, dcp × pcp)`` (``FullAttentionSpec
.max_memory_usage_bytes``, ``v1/kv_cache_interface.py @ v0.11.0 / v0.24.0``). The first DCP release (0.10.2) is
from the reference (K8: 0.10+), not read."""

GDN_SSM_DTYPE_FROM = (0, 20, 0)
"""First version whose Gated-DeltaNet SSM state takes ``mamba_ssm_cache_dtype``: ``gated_delta_net_state_dtype``
(``model_executor/layers/mamba/mamba_utils.py``) gives both GDN states the ``mamba_cache_dtype`` @ v0.11.0 and
@ v0.13.0, and takes ``mamba_ssm_cache_dtype`` for the SSM state @ v0.24.0; U01 (0.20.0) reproduces only with an
fp32 SSM state. 0.14 – 0.19 were not read."""

MAMBA_SPEC_CONV_FROM = (0, 24, 0)
"""First version read whose Mamba-2 conv state grows with ``num_speculative_tokens`` (``mamba2_state_shape``
``conv_kernel − 1 + num_spec`` @ v0.24.0; absent @ v0.11.0 and v0.13.0). The Gated-DeltaNet conv state grows
with it in every version read (0.11.0, 0.13.0, 0.24.0)."""

MAMBA_SPEC_BLOCKS_FROM = (0, 23, 1)
"""First version whose state groups reserve ``num_speculative_tokens`` extra pages per request
(``MambaSpec.max_memory_usage_bytes`` ``(1 | 2) + num_speculative_blocks`` @ v0.24.0; the field exists but is
unused in the worst case @ v0.13.0; absent @ v0.11.0). A 0.23.1rc1 dev build already does it: capacity row N12
(Qwen3.6-27B, MTP 2, align mode) prints 5.32x = 936 / (164 + 3 groups x (2 + 2)) and 1,394,129 tokens exactly,
which the 2-page rule (5.51x) does not give; 0.14 - 0.23.0 were not read."""


def version_at_least(v: tuple[int, int, int] | None, since: tuple[int, int, int]) -> bool:
    """``v >= since`` for a parsed version; pre-releases of ``since`` count as ``since`` (:func:`prerelease_note`).

    None (unknown version) is False: the older rule applies and callers say the version is unknown.
    """
    return v is not None and v >= since


GROUP_SIZE_CLOSE_RULES = (((0, 13, 0), 1.25), ((0, 24, 0), 1.5))
"""How vLLM picks the KV-cache group size (``_get_kv_cache_groups_uniform_page_size``,
``v1/core/kv_cache_utils.py``): the smallest layer-type count @ v0.9.2, v0.10.1.1, v0.11.0; the largest when it is
below 1.25 x the smallest @ v0.13.0; below 1.5 x @ v0.24.0 ("gpt-oss-20b + eagle, with 12 sw + 13 full. We pad it
to (13 sw, 13 full)"). 0.12 and 0.14 – 0.23 were not read: the rule of the release before them is applied."""


def group_size_close_factor(v: tuple[int, int, int] | None) -> float | None:
    """The "largest count when below factor x smallest" factor of version ``v`` (None: always the smallest).

    Unknown version: 1.25 (the rule this model used before it was versioned).
    """
    if v is None:
        return 1.25
    factor = None
    for since, f in GROUP_SIZE_CLOSE_RULES:
        if v >= since:
            factor = f
    return factor


PP_WHOLE_MODEL_GROUPS_FROM = (0, 11, 0)
"""First version read that builds KV-cache groups from the whole model under pipeline parallelism
(``get_kv_cache_configs`` merges every worker's specs, ``v1/core/kv_cache_utils.py @ v0.11.0``; also @ v0.13.0,
v0.24.0). 0.9.2 and 0.10.1.1 group each worker's own layers (``v1/engine/core.py``: ``get_kv_cache_config`` per
worker, then ``unify_kv_cache_configs``). 0.10.2 was not read. Unknown version: the whole-model rule."""
