"""Every shipped rule's case file (rules/<class>/cases/<ID>.yaml), run through derive + evaluate; `pytest -k CAP001`
runs one rule. Plus the catalog lint over rules/ and the `kvdiag rules test` command on a user's folder."""

from __future__ import annotations

import re
import shutil

import pytest

from kvdiag.engine.cases import load_cases
from kvdiag.engine.model import CLASSES, builtin_rules_dir, load_rules
from kvdiag.engine.runcases import all_cases, run_case
from kvdiag.signals import SIGNALS

RULES = load_rules()
CASES = all_cases()


@pytest.mark.parametrize("case", CASES, ids=[f"{c.rule_id}-{c.name}" for c in CASES])
def test_rule_case(case):
    res = run_case(case, RULES)
    assert res.got == case.expect, res.message
    assert not res.missing_remedy, (res.missing_remedy, res.remedy)
    assert not res.missing_message, (res.missing_message, res.message)


def test_catalog_covers_every_class_with_both_case_kinds():
    """Catalog lint: unique ids, class folder, known signals, docs, every contract class has a rule, and every rule
    has a firing and a quiet case (and an unknown case where `requires` is non-trivial)."""
    ids = [r.id for r in RULES]
    assert len(ids) == len(set(ids))
    assert {r.cls for r in RULES} == set(CLASSES) - {"inconclusive"}
    for r in RULES:
        assert r.path.split("/")[-2] == r.cls, r.path
        for key in ("meaning", "impact", "diagnosis", "false_positives", "remedy"):
            assert str(r.doc[key]).strip(), (r.id, key)
        assert r.remedy and r.references, r.id
        for group in r.requires:
            assert all(s in SIGNALS for s in group)
        for template in r.message + r.quiet + [t for alts in r.remedy for t in alts]:
            for name, agg in re.findall(r"\{([a-z_][a-z0-9_]*)\.([a-z0-9]+)", template):
                assert name in SIGNALS, (r.id, name)
        case_file = builtin_rules_dir() / r.cls / "cases" / f"{r.id}.yaml"
        assert case_file.is_file(), f"{r.id} needs {case_file}"
        kinds = {c.expect for c in load_cases(case_file)}
        assert {"fires", "quiet"} <= kinds, (r.id, kinds)
        if r.requires:
            assert "unknown" in kinds, f"{r.id} has requires, so it needs an unknown case"


def test_every_class_has_a_look_alike_that_is_not_chosen():
    """Must-show 2 of issue 6: for every problem class, a quiet case marked '# look-alike: …' (the look-alike that
    the rule correctly does not take for its class), and that case passes."""
    by_name = {(c.rule_id, c.name): c for c in CASES}
    marked: dict[str, list] = {}
    for r in RULES:
        text = (builtin_rules_dir() / r.cls / "cases" / f"{r.id}.yaml").read_text(encoding="utf-8")
        for name in re.findall(r"^  ([a-z0-9_]+):[^\n]*#\s*look-alike", text, flags=re.M):
            case = by_name[(r.id, name)]
            assert case.expect == "quiet", (r.id, name)
            assert run_case(case, RULES).got == "quiet", (r.id, name)
            marked.setdefault(r.cls, []).append(name)
    missing = set(CLASSES) - {"inconclusive", "healthy"} - set(marked)
    assert not missing, f"classes without a look-alike case: {sorted(missing)}"


def test_no_paging_remedy_for_weights_verdict():
    """A weights-don't-fit verdict must never suggest paging / KV settings."""
    for r in RULES:
        if r.cls == "weights_dont_fit":
            text = " ".join(t for alts in r.remedy for t in alts).lower()
            for word in ("block_size", "max_num_seqs", "kv-cache-dtype", "fp8 kv", "max_model_len", "prefix"):
                assert word not in text, (r.id, word)


def test_rules_test_command_on_a_user_folder(kvdiag, tmp_path):
    cases = tmp_path / "mine" / "cases"
    cases.mkdir(parents=True)
    shutil.copy(builtin_rules_dir() / "healthy" / "cases" / "OK001.yaml", cases / "OK001.yaml")
    ok = kvdiag("rules", "test", str(tmp_path / "mine"))
    assert ok.code == 0 and "3 passed, 0 failed" in ok.out
    text = (cases / "OK001.yaml").read_text().replace("expect: quiet", "expect: fires")
    (cases / "OK001.yaml").write_text(text)
    bad = kvdiag("rules", "test", str(tmp_path / "mine"))
    assert bad.code == 1 and "FAIL OK001 quiet_on_a_uniform_model" in bad.out
    (cases / "OK001.yaml").write_text("rule: OK001\ncases: {x: {expect: maybe}}\n")
    broken = kvdiag("rules", "test", str(tmp_path / "mine"))
    assert broken.code == 3 and broken.err.startswith("kvdiag: error:")


def test_a_case_fails_when_no_remedy_has_the_text(kvdiag, tmp_path):
    """remedy_has (issue 11): the case fails, naming the missing text and the remedies it got; a bad list is a bad file."""
    cases = tmp_path / "mine" / "cases"
    cases.mkdir(parents=True)
    case = ("rule: CAP001\ncases:\n  q:\n    series: {kv_cache_usage: '0.932 0.989', num_requests_running: '39 26', "
            "num_requests_waiting: '0 64'}\n    expect: fires\n    remedy_has: [%s]\n")
    (cases / "CAP001.yaml").write_text(case % '"4 in all"')
    assert kvdiag("rules", "test", str(tmp_path / "mine")).code == 0
    (cases / "CAP001.yaml").write_text(case % '"5 in all"')
    bad = kvdiag("rules", "test", str(tmp_path / "mine"))
    assert bad.code == 1 and "no remedy contains '5 in all'" in bad.out and "Add replicas" in bad.out
    (cases / "CAP001.yaml").write_text(case % "3")
    broken = kvdiag("rules", "test", str(tmp_path / "mine"))
    assert broken.code == 3 and "remedy_has must be a list of non-empty strings" in broken.err
