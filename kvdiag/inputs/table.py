"""CSV tables: ``--trace`` files in CSV and the ``times.csv`` of a series folder or a lab case.

Guards: a bounded read of a regular file (:mod:`.files`), UTF-8, a field of at most :data:`MAX_FIELD` characters
(csv's own limit is 128 KiB per field), the header's columns checked, every row with its line number, numbers through
:func:`number` (a domain, no 4,300-digit integer built), one message form ``file:line: …: expected …``.
"""

from __future__ import annotations

import csv
import io
import math

from ..errors import InputError
from ..numbers import MAX_DIGITS
from . import where
from .files import read_text

MAX_FIELD = 4096


def rows(path: str, limit: int, required: tuple[str, ...], expected: str, label: str = ""):
    """``(header, iterator of (line number, row dict))`` of the CSV file ``path``.

    Raises:
        InputError: unreadable, larger than ``limit``, not UTF-8, a header without ``required``, a row with another
            number of columns, a field longer than :data:`MAX_FIELD`, or a CSV syntax error (all with the line).
    """
    text = read_text(path, limit, expected, label)
    return rows_of_text(text, str(path), required, expected)


def rows_of_text(text: str, origin: str, required: tuple[str, ...], expected: str):
    """As :func:`rows`, for text already read."""
    rd = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(rd, None)
    except csv.Error as exc:
        raise InputError(f"{where(origin, 1)}: {exc}: expected {expected}") from None
    if not header or not set(required) <= set(header):
        shown = ", ".join(h[:40] for h in (header or [])[:12])
        raise InputError(f"{where(origin, 1)}: header [{shown}]: expected columns {', '.join(required)}"
                         f" ({expected})")

    def gen():
        try:
            for row in rd:
                if not row:
                    continue
                ln = rd.line_num
                if len(row) != len(header):
                    raise InputError(f"{where(origin, ln)}: {len(row)} columns: expected {len(header)} "
                                     f"({', '.join(header)[:200]})")
                if any(len(v) > MAX_FIELD for v in row):
                    raise InputError(f"{where(origin, ln)}: a field of more than {MAX_FIELD:,} characters: "
                                     f"expected {expected}")
                yield ln, dict(zip(header, row))
        except csv.Error as exc:
            raise InputError(f"{where(origin, rd.line_num)}: {exc}: expected {expected}") from None

    return header, gen()


def number(origin: str, name: str, raw, lo: float, hi: float, integer: bool = False) -> float | int:
    """A CSV (or JSON) field as a number in ``[lo, hi]``; an int when ``integer``.

    Raises:
        InputError: ``origin: name is …: expected a number from lo to hi`` (the value cut to 40 characters).
    """
    kind = "an integer" if integer else "a number"
    text = str(raw)
    shown = repr(text if len(text) <= 40 else text[:40] + "…")
    bad = InputError(f"{origin}: {name} is {shown}: expected {kind} from {lo:,g} to {hi:,g}")
    if isinstance(raw, bool) or len(text.strip().lstrip("+-").lstrip("0")) > MAX_DIGITS + 8:
        raise bad
    try:
        x = float(raw)
    except (TypeError, ValueError, OverflowError):
        raise bad from None
    if not math.isfinite(x) or not lo <= x <= hi:
        raise bad
    if integer:
        if x != int(x):
            raise bad
        return int(x)
    return x
