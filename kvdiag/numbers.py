"""Numbers read from inputs, parsed in one place per input kind, each with its domain.

A number that is not one (``1.2.3``, ``.``, ``,``), has thousands of digits, or lies outside what a field can mean is
refused here (``None`` or :class:`NumberError`), never turned into an exception inside a collector.
"""

from __future__ import annotations

import json
import math
import re

MAX_DIGITS = 40  # digits of a number kvdiag reads from a log, page or config (a float has 17 significant ones)
# one decimal number as logs and pages print it: 12, -3, 1.5, .5, 1e9, 1,234 (thousands separators), 12%
_DECIMAL = re.compile(r"[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)?(?:\.\d+)?(?:[eE][+-]?\d{1,3})?")


class NumberError(ValueError):
    """A number an input gave that kvdiag cannot use (the message says why)."""


def log_number(text: str, lo: float = -math.inf, hi: float = math.inf) -> float | None:
    """A number printed in a log line as a finite float in ``[lo, hi]``, else ``None``.

    Accepts ``12``, ``-3``, ``1.5``, ``.5``, ``1e9``, ``1,234.5`` (thousands separators) and a trailing ``%`` is
    *not* stripped (the caller's pattern owns units). Refuses ``1.2.3``, ``.``, ``,``, empty text, more than
    ``MAX_DIGITS`` digits, NaN/Inf and values outside ``[lo, hi]``.
    """
    if not isinstance(text, str):
        return None
    s = text.strip()
    if not s or len(s) > MAX_DIGITS + 8 or not _DECIMAL.fullmatch(s) or not any(c.isdigit() for c in s):
        return None
    try:
        x = float(s.replace(",", ""))
    except (ValueError, OverflowError):
        return None
    if not math.isfinite(x) or not lo <= x <= hi:
        return None
    return x


def log_int(text: str, lo: int = 0, hi: int = 1 << 62) -> int | None:
    """A whole number printed in a log line (``1234`` / ``1,234``) in ``[lo, hi]``, else ``None``."""
    x = log_number(text, lo, hi)
    if x is None or x != int(x):
        return None
    return int(x)


def finite_float(value, lo: float = -math.inf, hi: float = math.inf) -> float | None:
    """``value`` (a str or number from a page or recording) as a finite float in ``[lo, hi]``, else ``None``."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        s = value.strip()
        if len(s) > MAX_DIGITS + 8:
            return None
        value = s
    try:
        x = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    if not math.isfinite(x) or not lo <= x <= hi:
        return None
    return x


# Unix seconds a sample's timestamp may carry: 1970 .. 2200 (a datetime formats these; 1e20 or -1e17 it cannot)
MIN_UNIX_S, MAX_UNIX_S = 0.0, 7_258_118_400.0


def unix_seconds(value) -> float | None:
    """A timestamp in Unix seconds that can be formatted as a date (1970..2200), else ``None``."""
    return finite_float(value, MIN_UNIX_S, MAX_UNIX_S)


def _json_int(text: str) -> int:
    digits = len(text.lstrip("+-"))
    if digits > MAX_DIGITS:
        raise NumberError(f"an integer of {digits:,} digits: expected a number below 2**53")
    return int(text)


def _json_float(text: str) -> float:
    if len(text) > MAX_DIGITS + 8:
        raise NumberError(f"a number written with {len(text):,} characters: expected a finite number")
    return float(text)


def json_loads(text: str):
    """``json.loads`` whose integers and floats are bounded (no 4,300-digit integer, no 1e400 spelled in 5,000 digits).

    Raises:
        NumberError: a number beyond ``MAX_DIGITS`` digits.
        json.JSONDecodeError, RecursionError: as ``json.loads``.
    """
    return json.loads(text, parse_int=_json_int, parse_float=_json_float)


def int_text(value: int) -> str:
    """An integer for a message, without converting a huge one to float or to 4,300+ digits."""
    if abs(value) < 10 ** 18:
        return str(value)
    return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"
