"""`kvdiag rules export --format prometheus`: real promtool checks the rules and runs the tests built from the cases;
each exported rule's fires/quiet cases agree with kvdiag's own engine."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from kvdiag.engine.cases import find_case_files, load_cases
from kvdiag.engine.runcases import run_case
from kvdiag.engine.model import builtin_rules_dir, load_rules
from kvdiag.export import exportable_alerts
from services import PROMTOOL

IDENTITY = ("job", "instance", "model_name", "engine")


def _alerts(text: str) -> list[dict]:
    return [r for g in yaml.safe_load(text)["groups"] for r in g["rules"] if "alert" in r]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    from conftest import run_kvdiag
    d = tmp_path_factory.mktemp("export")
    res = run_kvdiag("rules", "export", "--format", "prometheus", "--out", str(d / "kvdiag-rules.yml"),
                     "--tests", str(d / "kvdiag-rules.test.yml"))
    assert res.code == 0, res.err
    return d


def test_promtool_checks_the_rules(exported):
    out = subprocess.run([PROMTOOL, "check", "rules", str(exported / "kvdiag-rules.yml")], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout


def test_promtool_runs_the_generated_tests(exported):
    tests = yaml.safe_load((exported / "kvdiag-rules.test.yml").read_text())
    names = [t["name"] for t in tests["tests"]]
    assert any("(vllm: names)" in n for n in names) and any("(vllm_ names)" in n for n in names)
    assert any(t["alert_rule_test"][0]["exp_alerts"] for t in tests["tests"])       # some fire
    assert any(not t["alert_rule_test"][0]["exp_alerts"] for t in tests["tests"])   # some stay quiet
    out = subprocess.run([PROMTOOL, "test", "rules", "kvdiag-rules.test.yml"], capture_output=True, text=True,
                         cwd=exported, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr


def test_a_wrong_expectation_makes_promtool_fail(exported, tmp_path):
    """The generated tests can fail: flip one quiet case to expect an alert."""
    tests = yaml.safe_load((exported / "kvdiag-rules.test.yml").read_text())
    quiet = next(t for t in tests["tests"] if not t["alert_rule_test"][0]["exp_alerts"])
    quiet["alert_rule_test"][0]["exp_alerts"] = [{"exp_labels": {"severity": "critical"}}]
    bad = tmp_path / "bad.test.yml"
    bad.write_text(yaml.safe_dump(tests, sort_keys=False))
    out = subprocess.run([PROMTOOL, "test", "rules", str(bad)], capture_output=True, text=True, timeout=300)
    assert out.returncode != 0


def test_exported_rules_cases_agree_with_the_engine():
    rules = {r.id: r for r in load_rules()}
    alerts, skipped = exportable_alerts(list(rules.values()))
    exported_ids = {a["labels"]["kvdiag_rule"] for a in alerts}
    assert "CAP001" in exported_ids
    cases = [c for f in find_case_files([builtin_rules_dir()]) for c in load_cases(f)]
    checked = 0
    for case in cases:
        if case.rule_id in exported_ids and case.expect in ("fires", "quiet"):
            assert run_case(case, list(rules.values())).got == case.expect, case.name  # derive + windows first
            checked += 1
    assert checked >= 2


def test_log_only_rules_are_named_in_comments_not_exported(exported):
    text = (exported / "kvdiag-rules.yml").read_text()
    assert "# WGT001 (weights_dont_fit): not exported" in text
    assert "# START001 (startup_kv_capacity): not exported" in text
    rules = _alerts(text)
    assert all(r["labels"]["kvdiag_class"] not in ("weights_dont_fit", "startup_kv_capacity") for r in rules)
    cap = next(r for r in rules if r["labels"]["kvdiag_rule"] == "CAP001")
    assert "vllm:kv_cache_usage_perc" in cap["expr"] and "vllm_kv_cache_usage_perc" in cap["expr"]
    assert "vllm:gpu_cache_usage_perc" in cap["expr"]                      # V0 / V1 <= 0.10 name too


def test_export_durations_are_whole_promql_units_and_bounded(kvdiag):
    res = kvdiag("rules", "export", "--format", "prometheus", "--for", "1.5d", "--window", "1.5d")
    assert res.code == 0 and "for: 36h" in res.out and "[36h]" in res.out and "1.5d" not in res.out
    res = kvdiag("rules", "export", "--format", "prometheus", "--for", "99999999999d")
    assert res.code == 3 and "at most 366d" in res.err


def test_at_least_six_rules_keep_the_identity_labels_and_wait_their_window(exported):
    """Every alert aggregates by job, instance, model_name, engine (so an Alertmanager can route on them), 'for:'
    comes from the rule's own window, annotations carry $value and the fix; the prefix rules read the recording
    rules, named level:metric:operations."""
    text = (exported / "kvdiag-rules.yml").read_text()
    doc = yaml.safe_load(text)
    alerts = _alerts(text)
    ids = {a["labels"]["kvdiag_rule"] for a in alerts}
    assert {"CAP001", "CAP002", "PFX001", "PFX002", "PFX003", "PFX004", "OK002", "OK003", "OK004", "OK006"} <= ids, ids
    assert sum(1 for a in alerts if a["labels"]["severity"] != "info") >= 6
    for a in alerts:
        assert "by (instance)" not in a["expr"] and "on (instance)" not in a["expr"], a["alert"]
        assert "by (job, instance, model_name, engine)" in a["expr"] or "instance_engine:" in a["expr"], a["alert"]
        assert "$value" in a["annotations"]["value"] and a["annotations"]["fix"], a["alert"]
        assert "vllm:" in a["expr"] or "instance_engine:" in a["expr"], a["alert"]
    by_id = {a["labels"]["kvdiag_rule"]: a for a in alerts}
    assert by_id["CAP001"]["for"] == "5m" and by_id["CAP002"]["for"] == "150s" and by_id["PFX001"]["for"] == "100s"
    assert by_id["OK006"]["labels"]["severity"] == "info" and by_id["OK006"]["labels"]["kvdiag_class"] == "healthy"
    records = [r for g in doc["groups"] for r in g["rules"] if "record" in r]
    names = {r["record"] for r in records}
    assert "instance_engine:vllm_prefix_cache_hit_ratio:rate100s_offset200s" in names
    assert all(len(n.split(":")) == 3 for n in names)
    assert all(("vllm:" in r["expr"] and "vllm_" in r["expr"]) or "instance_engine:" in r["expr"] for r in records)
    assert "instance_engine:vllm_prefix_cache_hit_ratio:rate100s" in by_id["PFX001"]["expr"]
    # the promtool tests expect the identity labels on every firing alert
    tests = yaml.safe_load((exported / "kvdiag-rules.test.yml").read_text())
    fired = [e for t in tests["tests"] for e in t["alert_rule_test"][0]["exp_alerts"]]
    assert fired and all(set(IDENTITY) <= set(e["exp_labels"]) for e in fired)
    tested = {t["name"].split()[0] for t in tests["tests"] if t["alert_rule_test"][0]["exp_alerts"]}
    assert {"CAP001", "CAP002", "PFX001", "PFX004", "OK002", "OK006"} <= tested, tested
    quiet = {t["name"].split()[0] for t in tests["tests"] if not t["alert_rule_test"][0]["exp_alerts"]}
    assert {"PFX002", "PFX003", "OK003"} <= quiet, quiet


def test_for_can_be_set_for_every_alert(kvdiag):
    res = kvdiag("rules", "export", "--format", "prometheus", "--for", "2m")
    assert res.code == 0
    assert {a["for"] for a in _alerts(res.out)} == {"2m"}
