"""/metrics pages and OpenMetrics recordings: ``--metrics-file``, diff's sides, ``simulate --from-metrics`` pages, and
the bodies ``--metrics-url`` returns (:mod:`.http`).

Guards: a bounded read of a regular file (:mod:`.files`; gzip and zstandard decompressed within the same bound), the
guarded parse of :func:`kvdiag.collect.metrics.parse_page` (empty, binary, HTML and lines that are no exposition
format refused with ``file:line``, the refused line redacted and its label values hidden), every value through
:func:`kvdiag.numbers.finite_float` and every ``le`` bound through the collector's check (``le="1.2.3"`` is no
number: the sample is left out, never a ValueError), sample timestamps in the one range (1970 .. 2200).
"""

from __future__ import annotations

from ..errors import InputError
from ..numbers import finite_float
from .files import read_bytes

MAX_PAGE_BYTES = 512 * 1024 * 1024
WHAT = "a saved /metrics page or an OpenMetrics recording"


def read_text(path: str, what: str = WHAT) -> str:
    """The text of a saved page or recording (decompressed when it is gzip or zstandard), invalid UTF-8 replaced.

    Raises:
        InputError: not a regular file, larger than the bound (also once decompressed), a broken compressed stream.
    """
    from ..collect.logread import MAGIC_GZIP, MAGIC_ZSTD

    raw = read_bytes(path, MAX_PAGE_BYTES, what)
    if raw.startswith((MAGIC_GZIP, MAGIC_ZSTD)):
        raw = _inflated(path)
    return raw.decode("utf-8", errors="replace")


def _inflated(path: str) -> bytes:
    from ..collect.logread import open_log
    from ..fileio import read_stream_bounded

    try:
        with open_log(path) as (stream, _pos, _size):
            data = read_stream_bounded(stream, MAX_PAGE_BYTES + 1)
    except (OSError, EOFError, ValueError) as exc:
        raise InputError(f"{path}: cannot decompress ({exc}), expected a gzip or zstandard /metrics page or "
                         "recording") from None
    if len(data) > MAX_PAGE_BYTES:
        raise InputError(f"{path}: more than {MAX_PAGE_BYTES // 2**20} MiB decompressed, larger than kvdiag "
                         "reads for a saved /metrics page or a recording")
    return data


def families(text: str, origin: str, openmetrics: bool = False, dropped: dict | None = None) -> list:
    """The guarded parse of one page (:func:`kvdiag.collect.metrics.parse_page`)."""
    from ..collect.metrics import parse_page

    return parse_page(text, origin, openmetrics=openmetrics, dropped=dropped)


def samples(path: str, what: str = "a Prometheus /metrics page (text format)"):
    """Every sample of the saved page ``path`` as ``(name, labels, value, le)``: ``value`` a finite float or
    ``None`` (NaN, ±Inf, a 400-digit number, no number), ``le`` the bucket bound as a float (``inf`` for +Inf),
    ``None`` without an ``le`` label or with one that is no number. ``vllm_`` names are spelled ``vllm:``.

    Raises:
        InputError: as :func:`read_text` and :func:`families` (``path:line: not Prometheus text format …``).
    """
    from ..collect.metrics import le_bound

    for fam in families(read_text(path, what), str(path)):
        for s in fam.samples:
            name = "vllm:" + s.name[5:] if s.name.startswith("vllm_") else s.name
            le = None
            if "le" in s.labels:
                text = le_bound(str(s.labels["le"]))
                le = None if text is None else float(text)
            yield name, dict(s.labels), finite_float(_plain(s.value)), le


def _plain(value):
    """A parser's value as something :func:`finite_float` reads without an OverflowError (a huge int as text)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value if abs(value) < 10 ** 40 else None
    return value
