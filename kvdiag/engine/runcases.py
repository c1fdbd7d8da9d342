"""Run rule case files (``kvdiag/engine/cases.py`` format) through the real derive + evaluate path.

Used by ``kvdiag rules test [CASES_DIR]`` and by ``tests/test_rule_cases.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..derive import derive_all
from ..errors import RuleFileError
from .cases import Case, find_case_files, load_cases
from .evaluate import evaluate_rule
from .model import Rule, builtin_rules_dir


@dataclass
class CaseResult:
    """One case's outcome; ``ok`` when the rule's status equals the case's ``expect``."""

    case: Case
    got: str
    message: str
    remedy: tuple[str, ...] = ()
    rendered: str = ""  # the finding's message as rendered (``message`` may get a failure note appended)

    @property
    def missing_remedy(self) -> list[str]:
        """The case's ``remedy_has`` texts no remedy contains."""
        return [t for t in self.case.remedy_has if not any(t in r for r in self.remedy)]

    @property
    def missing_message(self) -> list[str]:
        """The case's ``message_has`` texts the message does not contain."""
        return [t for t in self.case.message_has if t not in self.rendered]

    @property
    def ok(self) -> bool:
        return self.got == self.case.expect and not self.missing_remedy and not self.missing_message


def run_case(case: Case, rules: list[Rule]) -> CaseResult:
    """Build the case's bundle, derive signals, evaluate its rule.

    Raises:
        RuleFileError: the case names a rule id that is not loaded.
    """
    rule = next((r for r in rules if r.id == case.rule_id), None)
    if rule is None:
        raise RuleFileError(f"{case.path}: no rule {case.rule_id!r} (see 'kvdiag rules list')")
    bundle = case.bundle()
    derive_all(bundle)
    f = evaluate_rule(rule, bundle)
    res = CaseResult(case, f.status, f.message if f.status != "unknown" else f.reason, tuple(f.remedy), f.message)
    if res.got == case.expect and res.missing_remedy:
        res.message += (f" — but no remedy contains {res.missing_remedy[0]!r} "
                        f"(remedies: {' | '.join(res.remedy) or 'none'})")
    if res.got == case.expect and res.missing_message:
        res.message += f" — but the message does not contain {res.missing_message[0]!r}"
    return res


def all_cases(dirs: list[str | Path] | None = None) -> list[Case]:
    """Every case under ``dirs`` (default: the shipped rules' ``cases/`` folders).

    Raises:
        RuleFileError: a folder is missing or a case file is invalid.
    """
    folders = [Path(d) for d in dirs] if dirs else [builtin_rules_dir()]
    out: list[Case] = []
    for path in find_case_files(folders):
        out += load_cases(path)
    return out


def template_parts(rules: list[Rule]) -> dict[tuple, str]:
    """Every part of every rule's texts a case can render: each variant of ``message``, ``quiet`` and each
    ``remedy[i]`` as ``(rule id, key, variant, "")``, and each branch of its ``[[ … ]]`` clauses as
    ``(rule id, key, variant, "clause/branch")``; the value is the text of the variant."""
    from .template import branch_ids

    out: dict[tuple, str] = {}
    for r in rules:
        keys = [("message", r.message), ("quiet", r.quiet)] + [(f"remedy[{i}]", a) for i, a in enumerate(r.remedy)]
        for key, variants in keys:
            for v, text in enumerate(variants):
                out[(r.id, key, v, "")] = text
                for b in branch_ids(text):
                    out[(r.id, key, v, b)] = text
    return out


def rendered_parts(cases: list[Case], rules: list[Rule]) -> set[tuple]:
    """The :func:`template_parts` keys the cases render (run through :func:`run_case`)."""
    from . import evaluate

    seen: set[tuple] = set()
    old, evaluate.TRACE = evaluate.TRACE, seen
    try:
        for case in cases:
            run_case(case, rules)
    finally:
        evaluate.TRACE = old
    return seen
