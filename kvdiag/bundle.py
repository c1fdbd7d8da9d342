"""The in-memory bundle every collector fills and every rule reads.

Rules do no I/O: whatever the source (a live scrape, a saved page, a log), the collectors append
:class:`Observation` rows here, keyed by a signal name of :data:`kvdiag.signals.SIGNALS`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
import math

import pandas as pd

from .signals import SIGNALS

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
        self._groups: dict[str, pd.DataFrame] = {}
        self._names: set[str] = set()
        self._memo: dict = {}

    def add(self, signal: str, value: float | None, source: str, *, t: float | None = None,
            text: str = "", segment: int = 0) -> None:
        """Append one observation.

        Raises:
            KeyError: ``signal`` is not in ``SIGNALS`` (a programming error, not bad input).
        """
        if signal not in SIGNALS:
            raise KeyError(f"unknown signal {signal!r}")
        v = math.nan if value is None else float(value)
        self._rows.append((signal, math.nan if t is None else float(t), self._seq, v, text, source, segment))
        self._seq += 1
        self._frame = None
        self._names.add(signal)

    def __len__(self) -> int:
        return len(self._rows)

    def frame(self) -> pd.DataFrame:
        """All observations as a DataFrame (see the class docstring for the shape)."""
        if self._frame is None:
            df = pd.DataFrame.from_records(self._rows, columns=OBS_COLUMNS)
            df = df.astype({"signal": object, "t": "float64", "seq": "int64", "value": "float64",
                            "text": object, "source": object, "segment": "int64"})
            self._frame = df
            self._groups = {}  # per-signal rows, built once per frame (rules ask for each signal many times)
            self._memo = {}
        return self._frame

    def memo(self) -> dict:
        """A scratch dict valid until the next :meth:`add` (the rules engine memoises aggregations in it)."""
        self.frame()
        return self._memo

    def signal(self, name: str) -> pd.DataFrame:
        """Rows of one signal, in arrival order (same columns as :meth:`frame`)."""
        df = self.frame()
        if not self._groups and len(df):
            self._groups = dict(tuple(df.groupby("signal", sort=False)))
        rows = self._groups.get(name)
        return rows if rows is not None else df.iloc[0:0]

    def has(self, name: str) -> bool:
        return name in self._names

    def window(self) -> tuple[str | None, str | None]:
        """First and last observation time as RFC 3339 UTC strings, or ``(None, None)``."""
        if not self._rows:
            return None, None
        ts = self.frame()["t"].dropna()
        if ts.empty:
            return None, None
        return iso(ts.min()), iso(ts.max())


def iso(t: float) -> str:
    """Unix seconds → RFC 3339 UTC with a ``Z`` (second precision)."""
    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
