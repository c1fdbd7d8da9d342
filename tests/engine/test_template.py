"""Issue 26, "one message per rule": a rule's message, quiet text and each remedy item have at most two variants,
written with ``[[ … ]]`` clauses that drop out when their numbers are missing (kvdiag/engine/template.py), and every
variant and every clause branch is rendered by at least one shipped rule case (rules/<class>/cases/)."""

from __future__ import annotations

import pytest

from kvdiag.engine.model import load_rules
from kvdiag.errors import RuleFileError
from kvdiag.engine.runcases import all_cases, rendered_parts, template_parts
from kvdiag.engine.template import TemplateSyntaxError, branch_ids, parse

RULES = load_rules()
MAX_VARIANTS = 2
# rules not yet converted (issue 26): a text with more than two variants, or a part no case renders; the tests below
# fail when one of them already is done (so the list only shrinks)
LEFT: set[str] = set()


def _texts(rule):
    return [("message", rule.message), ("quiet", rule.quiet)] + [(f"remedy[{i}]", a) for i, a in enumerate(rule.remedy)]


@pytest.fixture(scope="module")
def unrendered() -> dict[str, list[tuple]]:
    """Per rule, the parts (variant or clause branch) no shipped case renders."""
    parts = template_parts(RULES)
    seen = rendered_parts(all_cases(), RULES)
    out: dict[str, list[tuple]] = {r.id: [] for r in RULES}
    for k in sorted(set(parts) - seen):
        out[k[0]].append(k)
    return out


def _over(rule) -> list[tuple[str, int]]:
    return [(k, len(v)) for k, v in _texts(rule) if len(v) > MAX_VARIANTS]


def test_at_most_two_variants_per_text():
    bad = {r.id: _over(r) for r in RULES if _over(r) and r.id not in LEFT}
    assert not bad, f"texts with more than {MAX_VARIANTS} variants (write one template with [[ … ]] clauses): {bad}"


def test_every_variant_and_clause_is_rendered_by_a_case(unrendered):
    missing = [k for r in RULES if r.id not in LEFT for k in unrendered[r.id]]
    assert not missing, "parts no rule case renders (rule, text, variant, clause/branch): " + "; ".join(
        " ".join(map(str, k)) for k in missing[:20])


def test_left_lists_only_rules_not_done(unrendered):
    done = sorted(r.id for r in RULES if r.id in LEFT and not _over(r) and not unrendered[r.id])
    assert not done, f"converted, remove from LEFT: {done}"


def test_clauses_drop_out_choose_and_nest():
    from kvdiag.bundle import Bundle
    from kvdiag.engine.evaluate import render, render_first

    b = Bundle()
    b.add("kv_cache_usage", 0.97, "t")
    b.add("num_requests_waiting", 3, "t")
    t = ("usage {kv_cache_usage.max:.0%}[[ with {num_requests_waiting.max:.0f} waiting[[ and "
         "{num_preemptions.increase:.0f} preempted]]]][[ of {kv_capacity_tokens.last:,.0f} tokens]]")
    assert render(t, b, {}) == "usage 97% with 3 waiting"
    assert branch_ids(t) == ["0/0", "0.0.0/0", "1/0"]
    shown: list = []
    render(t, b, {}, shown=shown)
    assert shown == ["0/0"]
    choice = ("[[?num_preemptions.increase: preempted||!num_requests_waiting.max: idle||"
              "{num_requests_waiting.max:.0f} waiting]]; [[{num_requests_running.max:.0f} running||none running]]")
    assert render(choice, b, {}) == "3 waiting; none running"
    # a variant whose numbers outside clauses are missing is skipped; a clause's missing number never skips it
    assert render_first(["{num_requests_running.max:.0f} running", "usage[[ {num_gpu_blocks.last:.0f}]]"], b, {}) \
        == "usage"


@pytest.mark.parametrize("bad", ["a [[b", "a ]] b", "a || b", "a [[no number]] b", "[[x {kv_cache_usage.max}||]] [[y]]"])
def test_bad_clause_syntax_is_refused(bad):
    with pytest.raises(TemplateSyntaxError):
        parse(bad)


@pytest.mark.parametrize("bad, said", [("[[ no number here ]]", "names no number"),
                                       ("[[?not_a_signal.max: x]]", "unknown signal"),
                                       ("[[?kv_cache_usage.median: x]]", "unknown agg"),
                                       ("[[ {kv_cache_usage.max} ", "no closing")])
def test_bad_clause_in_a_rule_file_is_refused_at_load(tmp_path, bad, said):
    import yaml

    from kvdiag.engine.model import load_rule

    raw = yaml.safe_load(open(next(r.path for r in RULES if r.id == "OK001"), encoding="utf-8"))
    raw["message"] = "KV usage {kv_cache_usage.max:.1%}" + bad
    p = tmp_path / "OK001.yaml"
    p.write_text(yaml.safe_dump(raw), encoding="utf-8")
    with pytest.raises(RuleFileError, match=said):
        load_rule(str(p))
