"""Log lines: ``--log`` files (plain, gzip, zstandard, ``-`` for stdin) and diff's log sides.

The reading and matching themselves live in :mod:`kvdiag.collect.logread` (the bounded streaming reader: a line of at
most ``MAX_LINE`` bytes, records re-joined, container formats told apart) and :mod:`kvdiag.collect.logs` (the
matchers). They open files only through :func:`open_binary` and date container timestamps only through
:func:`rfc3339_seconds` (the one range, 1970 .. 2200: a year-1 or year-9999 timestamp is no date a report can draw).
Numbers a log line gives are bounded by ``kvdiag.collect.logs.MAX_LOG_VALUE``.
"""

from __future__ import annotations

import re
from datetime import datetime

from ..numbers import unix_seconds
from .files import open_binary  # noqa: F401 - the one place a log file is opened

_RFC3339 = re.compile(r"(.*\d\d:\d\d:\d\d)(\.\d+)?(.*)")


def rfc3339_seconds(ts: str) -> float | None:
    """An RFC 3339 container timestamp (``2025-10-15T00:02:38.756689123Z``, an offset instead of ``Z``) as Unix
    seconds in the one range, else ``None`` (not a date, or outside 1970 .. 2200)."""
    ts = ts.replace("Z", "+00:00")
    m = _RFC3339.match(ts)
    if not m:
        return None
    frac = (m.group(2) or "")[:7]
    try:
        return unix_seconds(datetime.fromisoformat(m.group(1) + frac + m.group(3)).timestamp())
    except (ValueError, OverflowError, OSError):
        return None
