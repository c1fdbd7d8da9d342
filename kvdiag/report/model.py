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
