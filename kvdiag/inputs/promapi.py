"""Answers of a Prometheus-API server (``--prometheus-url``: Prometheus, Thanos, Mimir, VictoriaMetrics).

Guards: the body is bounded and deadline-bound (:mod:`.http`), parsed as JSON with the depth and number bounds of
:mod:`.jsondoc`, its values and timestamps read with :func:`value` / :func:`timestamp` (a finite number; Unix seconds
in the one range), error texts redacted and cut short.
"""

from __future__ import annotations

from ..errors import ScrapeError
from ..numbers import finite_float, unix_seconds
from ..redaction import redact
from .jsondoc import JsonError, loads


def answer(body: bytes, shown: str, status: int):
    """The JSON document of one answer.

    Raises:
        ScrapeError: not JSON (the body's start quoted, redacted), nested too deeply, a number of too many digits.
    """
    try:
        return loads(body.decode("utf-8", "replace"), shown, "a Prometheus API answer")
    except JsonError:
        head = redact(body[:80].decode("utf-8", "replace").strip().replace("\n", " "))
        raise ScrapeError(f"{shown}: HTTP {status}, not a Prometheus API answer (body starts {head!r})") from None


def value(raw) -> float | None:
    """A sample value of an answer (``"1.5"``, ``"NaN"``) as a finite float, else ``None``."""
    return finite_float(raw)


def timestamp(raw) -> float | None:
    """A sample timestamp of an answer as Unix seconds in the one range (1970 .. 2200), else ``None``."""
    return unix_seconds(raw)
