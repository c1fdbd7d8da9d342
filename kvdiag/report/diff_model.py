"""The finished result of ``kvdiag diff`` that its renderers consume (text, JSON, Markdown in
:mod:`kvdiag.report.diff_render`, HTML in :mod:`kvdiag.report.diff_html`): they need nothing but :class:`DiffResult`
and its ``to_dict()``.

Built by :func:`kvdiag.diff.diff_inputs`; imports nothing from ``collect/``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .. import __version__

DIFF_SCHEMA_VERSION = 1
"""Version of the JSON contract ``kvdiag/report/diff.schema.json`` describes."""

SECTIONS = ("budget", "config", "run")
"""Row sections in display order: the start-up memory budget, the configuration, the run (runtime data)."""

# worse-of-two order of the exit codes (Nagios: OK < UNKNOWN < WARNING < CRITICAL, as check_multi and Icinga rank
# an aggregate): a side that could not be judged never hides a warning or a critical verdict of the other
_EXIT_RANK = {0: 0, 3: 1, 1: 2, 2: 3}


def worse_exit(a: int, b: int) -> int:
    """The worse of two Nagios exit codes (0 OK < 3 UNKNOWN < 1 WARNING < 2 CRITICAL)."""
    return a if _EXIT_RANK.get(a, 1) >= _EXIT_RANK.get(b, 1) else b


@dataclass
class DiffRow:
    """One line of the side-by-side.

    Attributes:
        section: ``budget``, ``config`` or ``run``.
        key: the signal name (or ``engine_args.NAME`` for a key of the ``non-default args`` dict, ``run.*`` for an
            aggregate of the run).
        label: what the line is, in vLLM's terms.
        unit: base unit of the signal (``bytes``, ``tokens``, ``ratio``, ``text``, ...).
        before, after: the value on each side (number in the base unit, text, or ``None`` when that side lacks it).
        before_source, after_source: where each value comes from (``log:FILE:LINE``, ``metric:NAME{..}@TIME``, or
            the first .. last source of an aggregate); ``""`` when absent.
        moved: how much the line moved, 0..1 (bytes: share of the larger GPU budget, or of the larger value when no
            budget is known; other numbers: |after − before| / max(|before|, |after|); a changed text, or a line
            present on one side only: 1). Rows are ordered by it, most moved first.
        note: a remark on the line (e.g. "a default: neither side sets it").
    """

    section: str
    key: str
    label: str
    unit: str
    before: float | str | None
    after: float | str | None
    before_source: str = ""
    after_source: str = ""
    moved: float = 0.0
    note: str = ""

    @property
    def changed(self) -> bool:
        return self.moved > 0

    @property
    def delta(self) -> float | None:
        """after − before for numbers on both sides, else ``None``."""
        if isinstance(self.before, (int, float)) and isinstance(self.after, (int, float)) \
                and not isinstance(self.before, bool) and not isinstance(self.after, bool):
            return float(self.after) - float(self.before)
        return None

    def to_dict(self) -> dict:
        return {"section": self.section, "key": self.key, "label": self.label, "unit": self.unit,
                "before": _num(self.before), "after": _num(self.after), "delta": _num(self.delta),
                "before_source": self.before_source, "after_source": self.after_source,
                "moved": round(self.moved, 6), "changed": self.changed, "note": self.note}


@dataclass
class Term:
    """One term of an explanation: a line that moved and how much of the explained change it accounts for.

    ``amount`` is in the explained line's unit and sign (a term that shrank the KV pool by 3 GiB is −3 GiB);
    ``causes`` name the configuration lines that changed and are known to move this term.
    """

    key: str
    label: str
    amount: float
    unit: str
    source: str = ""
    why: str = ""
    causes: list[str] = field(default_factory=list)
    change: float | None = None
    """The term's own change (after − before, its unit); ``None`` when it is the amount itself. Weights that fell
    by 7 GiB have change −7 GiB and amount +7 GiB of KV pool."""

    def to_dict(self) -> dict:
        return {"key": self.key, "label": self.label, "amount": _num(self.amount), "unit": self.unit,
                "change": _num(self.change), "source": self.source, "why": self.why, "causes": list(self.causes)}


@dataclass
class Explanation:
    """Why one line moved: ``key`` moved by ``delta`` (its unit), decomposed into ``terms`` (most first) and what
    the terms leave unexplained (``residual``, ``None`` when the decomposition is not arithmetic but a list of
    causes). ``model`` names the arithmetic and the vLLM versions it holds for."""

    key: str
    label: str
    delta: float
    unit: str
    model: str
    terms: list[Term] = field(default_factory=list)
    residual: float | None = None

    def to_dict(self) -> dict:
        return {"key": self.key, "label": self.label, "delta": _num(self.delta), "unit": self.unit,
                "model": self.model, "terms": [t.to_dict() for t in self.terms], "residual": _num(self.residual)}


@dataclass
class SideInfo:
    """One side of the diff: the input, its kind, model, version and the verdict ``kvdiag analyze`` gives it."""

    name: str
    kind: str
    model: str | None
    version: str | None
    primary: str
    severity: str
    summary: str
    exit_code: int
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"name": self.name, "kind": self.kind, "model": self.model, "vllm_version": self.version,
                "verdict": {"primary": self.primary, "severity": self.severity, "summary": self.summary},
                "exit_code": self.exit_code, "notes": list(self.notes)}


@dataclass
class DiffResult:
    """Everything ``kvdiag diff`` found, for any renderer.

    ``rows`` hold every line of both sides (changed first within a section, most moved first); ``explanations``
    the lines whose change kvdiag can attribute; ``regressions`` what AFTER lost (fewer KV tokens, a new failure,
    a worse verdict); ``warnings`` what makes the comparison weaker (different models compared on request, a side
    without start-up lines).
    """

    before: SideInfo
    after: SideInfo
    rows: list[DiffRow]
    explanations: list[Explanation] = field(default_factory=list)
    regressions: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    fail_on_regression: bool = False

    @property
    def identical(self) -> bool:
        """No line moved and both verdicts are the same."""
        return not any(r.changed for r in self.rows) and \
            (self.before.primary, self.before.severity) == (self.after.primary, self.after.severity)

    @property
    def exit_code(self) -> int:
        """0: the comparison was made (whatever the two verdicts; each side's own code is in ``before`` /
        ``after``). With ``fail_on_regression``: 1 when AFTER regressed (:func:`kvdiag.diff.regressions`). A diff that
        could not compare never gets here (the command exits 3)."""
        if self.fail_on_regression:
            return 1 if self.regressions else 0
        return 0

    def section(self, name: str) -> list[DiffRow]:
        return [r for r in self.rows if r.section == name]

    def to_dict(self) -> dict:
        """The JSON contract (``schema_version`` 1, ``kvdiag/report/diff.schema.json``)."""
        return {"schema_version": DIFF_SCHEMA_VERSION, "kvdiag_version": __version__, "kind": "diff",
                "before": self.before.to_dict(), "after": self.after.to_dict(), "identical": self.identical,
                "exit_code": self.exit_code, "rows": [r.to_dict() for r in self.rows],
                "explanations": [e.to_dict() for e in self.explanations], "regressions": list(self.regressions),
                "warnings": list(self.warnings)}


def _num(v):
    """A JSON-safe value: NaN / ±Inf → ``None``."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v
