"""The finished report that renderers consume (renderers do nothing else)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import __version__
from ..engine.evaluate import SEVERITY_RANK, Finding, Verdict

SCHEMA_VERSION = 1


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
        """The JSON contract (``schema_version`` 1) of ``kvdiag analyze --format json``."""
        return {"schema_version": SCHEMA_VERSION, "kvdiag_version": __version__,
                "verdict": self.verdict.to_dict(), "findings": [f.to_dict() for f in self.findings],
                "inputs": self.inputs, "window": self.window, "notes": list(self.notes),
                "instances": [i.to_dict() for i in self.instances] or [self._as_instance()]}

    def _as_instance(self) -> dict:
        """One server: ``instances`` holds it too (named by its URL or first input)."""
        name = next((i["name"] for i in self.inputs if i.get("kind") == "metrics-url"),
                    self.inputs[0]["name"] if self.inputs else "")
        return {"instance": name, "verdict": self.verdict.to_dict(), "findings": [f.to_dict() for f in self.findings],
                "window": self.window, "error": None, "notes": list(self.notes)}
