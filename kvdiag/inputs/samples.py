"""The samples of a saved /metrics page (``simulate --from-metrics``): the page read by :mod:`.pages`, parsed by the
collector's guarded parser (:func:`kvdiag.collect.metrics.parse_page`), every value through
:func:`kvdiag.numbers.finite_float`. Apart from :mod:`.pages` because the collector reads its pages through that
module: one module both imported and importing the collector would be an import circle."""

from __future__ import annotations

from ..numbers import finite_float
from .pages import read_text


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
