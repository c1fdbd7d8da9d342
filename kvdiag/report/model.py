"""The finished report that renderers consume (renderers do nothing else)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import __version__
from ..engine.evaluate import SEVERITY_RANK, Finding, Verdict

SCHEMA_VERSION = 2
"""2: ``instances`` only in a per-server analysis (several ``--metrics-url``, ``--prometheus-url``); version 1 also
wrote one entry repeating the whole report for a single server. ``verdict.ruled_out`` holds only findings judged
quiet on evidence that was present (:func:`kvdiag.engine.evaluate.rules_out`)."""


@dataclass
class Series:
    """One time series of the window, for the charts and the text sparklines (never in ``--format json``).

    ``t``: Unix seconds (UTC), increasing; ``v``: values in ``unit`` (``ratio`` 0-1, ``requests``, ``requests/s``,
    ``tokens``, ``tokens/s``), at most :data:`MAX_POINTS` of them (longer series are thinned to the minimum and
    maximum of each bucket, so a spike survives); ``source``: where the points came from (the first and last
    sample's sources, or ``derived: …``).
    """

    key: str
    label: str
    unit: str
    t: list[float]
    v: list[float]
    source: str = ""


MAX_POINTS = 600
"""Points kept per series (300 buckets × min and max): enough for a chart a page wide, a few kB of SVG each."""


@dataclass
class Marker:
    """A moment to mark on the timeline: ``kind`` ``rule`` (a firing rule's evidence: ``label`` is its id,
    ``severity`` its severity), ``restart`` (a counter fell, a new process start, a new engine start-up in a log),
    ``cut`` (the window was cut short) or ``forecast_full`` (where CAP002's line reaches a full pool)."""

    t: float
    kind: str
    label: str
    severity: str = ""
    source: str = ""


@dataclass
class MemoryStep:
    """One line of the start-up memory budget, from the log's own memory lines: ``key`` (``gpu_total``,
    ``budget``, ``weights``, ``activation_peak``, ``non_torch``, ``cudagraph``, ``kv_cache``, ``left_over``),
    ``bytes`` (may be negative: a KV pool the budget could not hold) and its ``source`` (``log:FILE:LINE`` or
    ``derived: …``)."""

    key: str
    label: str
    bytes: float
    source: str


@dataclass
class Charts:
    """What the pictures need, from the bundle the report was judged on (built by :mod:`kvdiag.timeline`):

    * ``series``: by key (``kv_cache_usage``, ``num_requests_running``, ``num_requests_waiting``,
      ``preemptions_per_second``, ``prefix_cache_hit_rate``, ``prefix_cache_hits_per_second``,
      ``prefix_cache_queries_per_second``, ``kv_demand_tokens``);
    * ``pool_tokens``: the pool in tokens (``kv_capacity_tokens``), for the demand chart; ``None`` if unknown;
    * ``markers``: :class:`Marker` list; ``forecast``: CAP002's line ``{"t0", "v0", "t1", "v1", "eta_seconds"}``
      (usage at ``t0`` → 1.0 at ``t1``) when CAP002 fires, else ``None``;
    * ``startup``: :class:`MemoryStep` list of one start-up (the OOM's, else the last with memory lines), in
      budget order; ``oom``: the CUDA OOM of that start-up, ``{"tried", "free", "total", "allocated",
      "in_use", "other_processes", "phase", "source", "t"}`` (bytes; a value the log did not print is ``None``);
      ``startup_note``: which start-up it is when the log had several.

    Not part of the JSON contract: ``--format json`` leaves it out (thousands of points would bury the diagnosis).
    """

    series: dict = field(default_factory=dict)
    pool_tokens: float | None = None
    markers: list = field(default_factory=list)
    forecast: dict | None = None
    startup: list = field(default_factory=list)
    oom: dict | None = None
    startup_note: str = ""


@dataclass
class InstanceReport:
    """The diagnosis of one server among several (several ``--metrics-url``, or a fleet).

    ``instance`` is the URL, or the Prometheus ``instance`` label; ``error`` says why a server
    could not be read (its verdict is then ``inconclusive``).
    """

    instance: str
    verdict: Verdict
    findings: list[Finding]
    inputs: list[dict] = field(default_factory=list)
    window: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    error: str | None = None
    charts: Charts | None = None  # the series and start-up budget for the pictures; not in to_dict (JSON)

    def rank(self) -> tuple:
        """Sort key, worst first: severity, then could-not-judge before healthy, then the name."""
        return (-SEVERITY_RANK[self.verdict.severity], self.verdict.primary != "inconclusive", self.instance)

    def to_dict(self) -> dict:
        return {"instance": self.instance, "verdict": self.verdict.to_dict(),
                "findings": [f.to_dict() for f in self.findings], "window": self.window,
                "error": self.error, "notes": list(self.notes)}


@dataclass
class Report:
    """Verdict, findings and what was read, for one analysis.

    ``exit_code`` follows the Nagios convention: 0 ok, 1 warning, 2 critical, 3 could not judge
    (verdict ``inconclusive``).
    """

    verdict: Verdict
    findings: list[Finding]
    inputs: list[dict]
    window: dict
    notes: list[str] = field(default_factory=list)
    instances: list[InstanceReport] = field(default_factory=list)
    charts: Charts | None = None  # the series and start-up budget for the pictures; not in to_dict (JSON)

    @property
    def exit_code(self) -> int:
        if self.verdict.primary == "inconclusive":
            return 3
        return SEVERITY_RANK[self.verdict.severity]

    def to_dict(self) -> dict:
        """The JSON contract (``schema_version`` 2) of ``kvdiag analyze --format json``: ``instances`` only when the
        analysis was per server (several ``--metrics-url``, or ``--prometheus-url`` even when it found one), never a
        copy of a single server's report."""
        out = {"schema_version": SCHEMA_VERSION, "kvdiag_version": __version__,
               "verdict": self.verdict.to_dict(), "findings": [f.to_dict() for f in self.findings],
               "inputs": self.inputs, "window": self.window, "notes": list(self.notes)}
        if self.instances:
            out["instances"] = [i.to_dict() for i in self.instances]
        return out


def ruled_out(verdict: Verdict, findings: list[Finding]) -> list[Finding]:
    """The findings ``verdict.ruled_out`` names (the engine's one decision, :func:`~kvdiag.engine.evaluate.rules_out`),
    in its order: what every renderer lists as ruled out."""
    by_id = {f.rule_id: f for f in findings}
    return [by_id[r["rule_id"]] for r in verdict.ruled_out if r["rule_id"] in by_id]


def not_judged(findings: list[Finding]) -> list[Finding]:
    """The rules that could not be judged (``unknown``), then those quiet only for want of input (``on_evidence``
    false: no evidence either way, ``reason`` says which inputs were absent): one list, shown alike in text and
    Markdown, never as ruled out."""
    return [f for f in findings if f.status == "unknown"] + \
        [f for f in findings if f.status == "quiet" and not f.on_evidence]
