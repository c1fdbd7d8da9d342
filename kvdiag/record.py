"""``kvdiag record``: scrape a /metrics endpoint for a while and write it as one OpenMetrics file.

The file carries a timestamp (Unix seconds, millisecond precision) on every sample and ends with
``# EOF``, so ``promtool tsdb create-blocks-from openmetrics FILE DIR`` loads it into a
Prometheus TSDB, and ``kvdiag analyze --metrics-file FILE`` replays it instant by instant
(:func:`kvdiag.collect.metrics.split_by_time`) and reaches the verdict the live window would.

Layout (OpenMetrics 1.0, §"MetricFamily"): one block per metric family (``# HELP``, ``# TYPE``,
then every sample of the family); within a family the series (label sets, ``le`` aside) one
after another, each in time order; a histogram point is its buckets by bound, then ``_count``
and ``_sum``. ``*_created`` series are left out (they clash with OpenMetrics' own ``_created``
and kvdiag ignores them, reference §1.0).
"""

from __future__ import annotations

import math

from .collect.metrics import HttpOptions, scrape_targets
from .errors import InputError, ScrapeError

_OM_TYPES = {"counter", "gauge", "histogram", "summary", "info", "stateset", "gaugehistogram", "unknown"}
_SUFFIX_ORDER = {"_bucket": 0, "_count": 1, "_sum": 2, "_total": 0, "": 0}


def _esc_label(v: str) -> str:
    return str(v).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _esc_help(v: str) -> str:
    return str(v).replace("\\", "\\\\").replace("\n", "\\n")


def _num(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v))


def _le_key(labels: dict) -> float:
    le = labels.get("le", labels.get("quantile"))
    if le is None:
        return 0.0
    try:
        return float(le.replace("+Inf", "inf"))
    except ValueError:
        return 0.0


class Recorder:
    """Collects parsed pages (prometheus-client families) and writes them as one OpenMetrics text."""

    def __init__(self) -> None:
        # family name -> [type, help, unit, {series key -> {ts -> [(sample name, labels, value)]}}]
        self.families: dict[str, list] = {}
        self.scrapes = 0
        self.samples = 0

    def add(self, families: list, t: float) -> None:
        """Add one scrape taken at Unix time ``t`` (a sample's own timestamp wins)."""
        self.scrapes += 1
        for fam in families:
            name, typ = fam.name, fam.type if fam.type in _OM_TYPES else "unknown"
            if name.endswith("_created") or (typ == "counter" and name.endswith("_total")):
                continue
            entry = self.families.setdefault(name, [typ, fam.documentation, getattr(fam, "unit", ""), {}])
            for s in fam.samples:
                if s.name.endswith("_created") or s.name.endswith("_gsum") or s.name.endswith("_gcount"):
                    continue
                sname = s.name
                if typ == "counter" and not sname.endswith("_total"):
                    sname += "_total"
                ts = round(float(s.timestamp) if s.timestamp is not None else t, 3)
                key = tuple(sorted((k, v) for k, v in s.labels.items() if k not in ("le", "quantile")))
                entry[3].setdefault(key, {}).setdefault(ts, []).append((sname, s.labels, float(s.value)))
                self.samples += 1

    def text(self) -> str:
        """The OpenMetrics text (ends with ``# EOF``)."""
        out: list[str] = []
        for name, (typ, doc, unit, series) in self.families.items():
            if doc:
                out.append(f"# HELP {name} {_esc_help(doc)}")
            out.append(f"# TYPE {name} {typ}")
            if unit:
                out.append(f"# UNIT {name} {unit}")
            for _key, points in series.items():
                for ts in sorted(points):
                    rows = sorted(points[ts], key=lambda r: (_SUFFIX_ORDER.get(r[0][len(name):], 3), _le_key(r[1])))
                    for sname, labels, value in rows:
                        lab = ",".join(f'{k}="{_esc_label(v)}"' for k, v in labels.items())
                        out.append(f"{sname}{{{lab}}} {_num(value)} {ts:.3f}" if lab else
                                   f"{sname} {_num(value)} {ts:.3f}")
        out.append("# EOF")
        return "\n".join(out) + "\n"


def record(url: str, out: str, duration: float, interval: float, http: HttpOptions | None = None,
           progress: bool | None = None) -> tuple[int, int]:
    """Scrape ``url`` every ``interval`` s for ``duration`` s and write ``out`` (OpenMetrics).

    Ctrl-C ends the recording early; what was scraped so far is written before the interrupt goes on.

    Returns:
        ``(scrapes, samples)`` written.

    Raises:
        ScrapeError: the first scrape failed, or no scrape succeeded (nothing is written then).
        InputError: ``out`` cannot be written.
    """
    rec = Recorder()
    try:
        (target,) = scrape_targets([url], duration, interval, http, progress, on_page=rec.add)
        if target.error:
            raise ScrapeError(target.error)
    finally:
        if rec.scrapes:
            _write(out, rec.text())
    if not rec.scrapes:
        why = "; ".join(target.info.notes[:1]) or "no scrape succeeded"
        raise ScrapeError(f"{target.url}: nothing recorded, {out} not written ({why})")
    return rec.scrapes, rec.samples


def _write(out: str, text: str) -> None:
    """Write the recording whole or not at all: a full disk or a second signal mid-write leaves the previous file
    (or none) in place, never a cut recording without ``# EOF``."""
    from .export import write_output

    write_output(out, text, "--out")
