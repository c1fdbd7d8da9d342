"""The finished report that renderers consume (renderers do nothing else)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import __version__
from ..engine.evaluate import SEVERITY_RANK, Finding, Verdict

SCHEMA_VERSION = 1


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

    @property
    def exit_code(self) -> int:
        if self.verdict.primary == "inconclusive":
            return 3
        return SEVERITY_RANK[self.verdict.severity]

    def to_dict(self) -> dict:
        """The JSON contract (``schema_version`` 1) of ``kvdiag analyze --format json``."""
        return {"schema_version": SCHEMA_VERSION, "kvdiag_version": __version__,
                "verdict": self.verdict.to_dict(), "findings": [f.to_dict() for f in self.findings],
                "inputs": self.inputs, "window": self.window, "notes": list(self.notes)}
