"""The in-memory bundle every collector fills and every rule reads.

Rules do no I/O: whatever the source (a live scrape, a saved page, a log), the collectors append
:class:`Observation` rows here, keyed by a signal name of :data:`kvdiag.signals.SIGNALS`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
import math

import numpy as np
import pandas as pd

from .signals import SIGNALS, checks_derived_domain, derived_domain_error

OBS_COLUMNS = ["signal", "t", "seq", "value", "text", "source", "segment"]


@dataclass
class InputInfo:
    """What one input contributed, for the report's ``inputs`` list.

    Attributes:
        kind: ``log``, ``metrics-file`` or ``metrics-url``.
        name: path or URL as given.
        records: log lines read, or pages / scrapes parsed.
        observations: observations it produced.
        skipped: lines or pages skipped (editorial notes, unparsable pages, failed scrapes).
        notes: human-readable remarks (what was skipped and why, detected version).
    """

    kind: str
    name: str
    records: int = 0
    observations: int = 0
    skipped: int = 0
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"kind": self.kind, "name": self.name, "records": self.records,
                "observations": self.observations, "skipped": self.skipped, "notes": list(self.notes)}


class Bundle:
    """Observations of one server (or one post-mortem), plus what was read.

    ``frame()`` gives a DataFrame with one row per observation:

    ========  =========  ==========================================================================
    column    dtype      meaning
    ========  =========  ==========================================================================
    signal    object     signal name (key of ``SIGNALS``)
    t         float64    Unix time in seconds (UTC); NaN when the source has no time (log lines
                         without a header, a saved page without timestamps)
    seq       int64      arrival order over all inputs (sort key when ``t`` is NaN)
    value     float64    value in the signal's base unit; NaN for text-only facts
    text      object     category or text value (e.g. OOM phase, ``cache_dtype``), else ``""``
    source    object     where it came from: ``log:FILE:LINE`` or ``metric:NAME{labels}@TIME``
    segment   int64      start-up segment of a log (a new one begins at each engine start), else 0
    ========  =========  ==========================================================================

    Rows are in arrival order (``seq``).
    """

    def __init__(self) -> None:
        self._rows: list[tuple] = []
        self._seq = 0
        self.inputs: list[InputInfo] = []
        self.model_config: dict | None = None
        self.model_config_source: str = ""
        self._frame: pd.DataFrame | None = None
        self._by_signal: dict[str, list[tuple]] = {}
        self._sig_frames: dict[str, pd.DataFrame] = {}
        self._memo: dict = {}
        self.skipped_derived: list[str] = []  # derived values refused as impossible (a note each in the report)
        self.dropped_values: dict[str, int] = {}  # per signal: values the collectors dropped (not finite, out of range)
        self.model_notes: list[str] = []  # what the capacity model could not estimate or overrode (a report note each)

    def add(self, signal: str, value: float | None, source: str, *, t: float | None = None,
            text: str = "", segment: int = 0) -> None:
        """Append one observation.

        Raises:
            KeyError: ``signal`` is not in ``SIGNALS`` (a programming error, not bad input).
        """
        if signal not in SIGNALS:
            raise KeyError(f"unknown signal {signal!r}")
        v = math.nan if value is None else float(value)
        if value is not None and checks_derived_domain(signal):
            why = derived_domain_error(signal, v)
            if why:  # impossible inputs made an impossible result: say so, never judge on it
                self.skipped_derived.append(f"{signal} = {v:.6g} not used: {why} ({source[:300]})")
                return
        row = (signal, math.nan if t is None else float(t), self._seq, v, text, source, segment)
        self._rows.append(row)
        rows = self._by_signal.get(signal)
        if rows is None:
            rows = self._by_signal[signal] = []
        rows.append(row)
        self._seq += 1
        self._frame = None
        if self._sig_frames:
            self._sig_frames.pop(signal, None)
        if self._memo:
            self._memo = {}

    def discard_from(self, mark: int) -> None:
        """Drop the observations added since ``len(self) == mark`` (a line whose handler failed part-way)."""
        for row in reversed(self._rows[mark:]):
            self._by_signal[row[0]].pop()
        del self._rows[mark:]
        self._frame = None
        self._sig_frames = {}
        self._memo = {}

    def extend(self, signal: str, points: list[tuple[float, float, str]]) -> None:
        """Append many observations of one signal at once: ``points`` = ``[(t, value, source), ...]`` in order.

        The same rows as calling :meth:`add` for each point (segment 0, no text), without the per-call checks; the
        caller has vetted the values (the fleet collector drops out-of-domain points before).

        Raises:
            KeyError: ``signal`` is not in ``SIGNALS``.
        """
        if signal not in SIGNALS:
            raise KeyError(f"unknown signal {signal!r}")
        if not points:
            return
        seq = self._seq
        rows = [(signal, float(t), seq + i, float(v), "", src, 0) for i, (t, v, src) in enumerate(points)]
        self._seq += len(rows)
        self._rows.extend(rows)
        self._by_signal.setdefault(signal, []).extend(rows)
        self._frame = None
        self._sig_frames.pop(signal, None)
        if self._memo:
            self._memo = {}

    def __len__(self) -> int:
        return len(self._rows)

    def frame(self) -> pd.DataFrame:
        """All observations as a DataFrame (see the class docstring for the shape)."""
        if self._frame is None:
            self._frame = _to_frame(self._rows)
        return self._frame

    def memo(self) -> dict:
        """A scratch dict valid until the next :meth:`add` (the rules engine memoises aggregations in it)."""
        return self._memo

    def signal(self, name: str) -> pd.DataFrame:
        """Rows of one signal, in arrival order (same columns as :meth:`frame`; index 0..n−1 of that signal).

        Built per signal and cached until that signal gets a new row, so deriving signals one after the other
        does not rebuild the whole table.
        """
        df = self._sig_frames.get(name)
        if df is None:
            rows = self._by_signal.get(name)
            if rows is None:
                return _EMPTY
            df = self._sig_frames[name] = _to_frame(rows)
        return df

    def last(self, name: str) -> tuple[float, str] | None:
        """``(value, source)`` of the signal's last row with a value (not NaN), in arrival order; None without one.
        The same as the last row of ``signal(name).dropna(subset=["value"])``, without building the frame."""
        for row in reversed(self._by_signal.get(name, ())):
            v = row[3]
            if v == v:
                return float(v), str(row[5])
        return None

    def has(self, name: str) -> bool:
        return name in self._by_signal

    def window(self) -> tuple[str | None, str | None]:
        """First and last observation time as RFC 3339 UTC strings, or ``(None, None)``."""
        if not self._rows:
            return None, None
        ts = self.frame()["t"].dropna()
        if ts.empty:
            return None, None
        return iso(ts.min()), iso(ts.max())


def _to_frame(rows: list[tuple]) -> pd.DataFrame:
    """Rows (tuples in ``OBS_COLUMNS`` order) → a DataFrame with the documented dtypes, column by column
    (several times faster than ``from_records`` + ``astype`` on the many small per-signal tables)."""
    cols = list(zip(*rows)) if rows else [()] * len(OBS_COLUMNS)
    return pd.DataFrame({
        "signal": pd.Series(cols[0], dtype=object), "t": np.asarray(cols[1], dtype="float64"),
        "seq": np.asarray(cols[2], dtype="int64"), "value": np.asarray(cols[3], dtype="float64"),
        "text": pd.Series(cols[4], dtype=object), "source": pd.Series(cols[5], dtype=object),
        "segment": np.asarray(cols[6], dtype="int64")})


_EMPTY = _to_frame([])


def iso(t: float) -> str:
    """Unix seconds → RFC 3339 UTC with a ``Z`` (second precision)."""
    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
