"""Stage 1 of the log reader, the envelope: what wraps a vLLM record on its line — container timestamps, ANSI
colour, process tags (``(EngineCore_DP0 pid=N)``, ``[rankN]:``), the header ``LEVEL MM-DD HH:MM:SS [file:line]``, paste
quoting — and the cleaned :class:`Line` the later stages read. Sizes in bytes (:func:`size_bytes`)."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass


GIB = 1024 ** 3
_UNITS = {"B": 1, "BYTES": 1, "KIB": 1024, "MIB": 1024 ** 2, "GIB": GIB, "TIB": 1024 ** 4,
          "KB": 1024, "MB": 1024 ** 2, "GB": GIB}

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# `docker logs -t` / CRI timestamp in front of a line: 2025-10-15T00:02:38.756689123Z [stdout F ]
CONTAINER_TS = re.compile(
    r"^(?P<ts>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d))\s+(?:(?:stdout|stderr)\s+[FP]\s+)?")
# '(EngineCore_DP0 pid=N)', '(VllmWorker rank=R pid=N)', Ray's '(RayWorkerWrapper pid=N, ip=A.B.C.D)'
PROC_TAG = re.compile(r"^\((?P<proc>[A-Za-z_][\w]*(?: rank=\d+)? pid=\d+)(?:, ip=[\w.:-]+)?\)\s*")
RANK_TAG = re.compile(r"^\[rank(\d+)\]:\s?")
HEADER = re.compile(
    r"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+(?:(?P<mon>\d\d)-(?P<day>\d\d)\s+"
    r"(?P<time>\d\d:\d\d:\d\d)\s+)?(?:\[(?P<file1>[\w./-]+):(?P<line1>\d+)\]|(?P<file2>[\w.-]+\.py):(?P<line2>\d+)\])\s?")
FRAME = re.compile(r'File "(?P<path>[^"]+)", line \d+, in (?P<func>[\w<>]+)')
# last line of a traceback: 'torch.OutOfMemoryError: CUDA out of memory...', 'ValueError: ...'
EXC_LINE = re.compile(r"^\s*(?:[A-Za-z_][\w]*\.)*(?P<type>[A-Z]\w*(?:Error|Exception))(?::|$)")


MAX_LOG_VALUE = 1e30
"""Largest magnitude a number read from a log may have (bytes of any GPU fleet, any count): beyond it, or NaN/Inf,
the line is skipped with a note."""


def size_bytes(number: str, unit: str) -> float:
    """``"1002.00", "MiB"`` → bytes. Units as PyTorch and vLLM print them (GiB, MiB, KiB, bytes, GB)."""
    x = float(number)
    if not -MAX_LOG_VALUE <= x <= MAX_LOG_VALUE:  # NaN, ±Inf, 400 digits: no memory size
        raise ValueError(f"{number[:40]!r} is not a size kvdiag can use")
    scale = _UNITS.get(unit.upper())
    if scale is None:  # a case-insensitive pattern also matches look-alikes ('ı', 'K' Kelvin): not a unit kvdiag knows
        raise ValueError(f"unit {unit!r}")
    return x * scale


@dataclass
class Line:
    """One cleaned log record.

    Attributes:
        lineno: 1-based line number of its first physical line.
        t: Unix seconds (UTC) when known, else ``None``.
        proc: process tag (``EngineCore pid=812``) or ``""``.
        level: log level or ``""`` for text printed outside the logger.
        msg: the message (whole cleaned line when there is no header).
    """

    lineno: int
    t: float | None
    proc: str
    level: str
    msg: str

# paste forms: '> ' quotes at any depth and indentation in front of a record (kept: a traceback frame's own indent
# does not matter, FRAME searches anywhere)
QUOTE_PREFIX = re.compile(r"^[ \t]*(?:>[ \t]?)+[ \t]*|^[ \t]+")
_PASTE_LEAD = (" ", "\t", ">")

def _excerpt(msg: str, width: int = 160) -> str:
    """``msg`` with its blanks folded, cut to ``width`` characters (``…`` last). Redact before cutting: a cut
    inside a quoted secret leaves a value the redactor no longer sees whole."""
    msg = " ".join(msg.split())
    return msg if len(msg) <= width else msg[:width - 1] + "…"


IDENTITY_CHARS = 200
"""At most this many characters of a model name, quantisation, architecture or version taken from a log."""


def _bounded(text: str) -> str:
    """``text`` cut to :data:`IDENTITY_CHARS` characters (``…`` last)."""
    return text if len(text) <= IDENTITY_CHARS else text[:IDENTITY_CHARS - 1] + "…"

# process tags (§2.1) → the versions that print them
_PROC_VERSIONS = [
    (re.compile(r"^VllmWorkerProcess "), "(0.4-0.10)"), (re.compile(r"^VllmWorker rank="), "(0.6-0.9)"),
    (re.compile(r"^EngineCore_\d+ "), "(0.8-0.9)"), (re.compile(r"^EngineCore_DP\d+ "), "(0.10+)"),
    (re.compile(r"^EngineCore pid"), "(0.24+)"), (re.compile(r"^APIServer "), "(0.10+)"),
    (re.compile(r"^MainProcess "), "(0.33+)"), (re.compile(r"^Worker(?:_\w+)? pid"), "(0.10+)"),
]


@functools.lru_cache(maxsize=256)
def _proc_format(proc: str) -> str:
    label = "process tag (" + re.sub(r"\d+", "N", proc) + ")"
    for pattern, versions in _PROC_VERSIONS:
        if pattern.match(proc):
            return f"{label} {versions}"
    return label


def _parse_rfc3339(ts: str) -> float | None:
    from ...inputs.logfile import rfc3339_seconds  # the one timestamp range (1970 .. 2200) of every input

    return rfc3339_seconds(ts)


