"""Numbers read from /metrics pages, recordings and config.json files, each with its domain.

A value that is no number, has thousands of digits, or lies outside what a field can mean is refused here (``None``
or :class:`NumberError`), never turned into an exception inside a collector. (Log numbers are checked where the log
collector adds them: ``kvdiag.collect.logs``, ``MAX_LOG_VALUE``.)
"""

from __future__ import annotations

import json
import math

MAX_DIGITS = 40  # digits of a number kvdiag reads from a log, page or config (a float has 17 significant ones)


class NumberError(ValueError):
    """A number an input gave that kvdiag cannot use (the message says why)."""


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
