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
