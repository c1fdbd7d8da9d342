"""Prometheus-style durations (``30s``, ``5m``): one parser for the rules, the rule cases, the CLI and the
Prometheus collector (a module of its own so that collectors import nothing from ``engine/``)."""

from __future__ import annotations

import re

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h|d)$")


def parse_duration(text: str) -> float:
    """``500ms``, ``30s``, ``5m``, ``1h``, ``7d`` → seconds (float); the units of Prometheus durations up to a day.

    Raises:
        ValueError: not a number followed by ms, s, m, h or d.
    """
    m = _DURATION.match(str(text).strip())
    if not m:
        raise ValueError(f"{text!r} is not a duration like 500ms, 30s, 5m, 1h or 7d")
    n = float(m.group(1))
    return n * {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}[m.group(2)]
