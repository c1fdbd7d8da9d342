"""Exported alerts people can route (issue 30): names that say what is wrong, a runbook_url per class to a page
that exists in docs/runbooks/, summary/description with the instance and $value; promtool test rules passes."""

from __future__ import annotations

import re
import shutil
import subprocess

import yaml

from conftest import ROOT, run_kvdiag

from kvdiag.engine.model import CLASSES, load_rules


def _alerts(*args: str) -> list[dict]:
    res = run_kvdiag("rules", "export", *args)
    assert res.code == 0, res.err
    return [r for g in yaml.safe_load(res.out)["groups"] for r in g["rules"] if "alert" in r]


def test_every_alert_names_the_problem_and_links_a_runbook_that_exists():
    alerts = _alerts()
    assert len(alerts) >= 10
    names = [a["alert"] for a in alerts]
    assert len(set(names)) == len(names)
    assert "VllmKvCachePoolExhausted" in names
    for a in alerts:
        assert re.fullmatch(r"Vllm[A-Z][A-Za-z0-9]+", a["alert"]) and "Rule" not in a["alert"], a["alert"]
        url = a["annotations"]["runbook_url"]
        assert url == f"docs/runbooks/{a['labels']['kvdiag_class']}.md"
        page = (ROOT / url).read_text()
        assert a["alert"] in page, (a["alert"], url)  # the page names the alerts that link to it
        for part in ("## What it means", "## How to confirm", "## What to change"):
            assert part in page, (url, part)
        for key in ("summary", "description"):
            assert "{{ $labels.instance }}" in a["annotations"][key], key
        assert "$value" in a["annotations"]["description"]


def test_every_class_has_a_runbook_and_every_rule_an_alert_name():
    for cls in CLASSES:
        if cls != "inconclusive":
            assert (ROOT / "docs" / "runbooks" / f"{cls}.md").is_file(), cls
    rules = load_rules([])
    assert all(r.alert for r in rules)
    assert len({r.alert for r in rules}) == len(rules)


def test_runbook_base_gives_the_published_address():
    alerts = _alerts("--runbook-base", "https://runbooks.example/kvdiag/")
    assert {a["annotations"]["runbook_url"] for a in alerts} == {
        f"https://runbooks.example/kvdiag/{c}.md" for c in ("capacity_pressure", "healthy", "prefix_cache_eviction")}


def test_a_bad_alert_name_in_a_rule_file_is_one_line(tmp_path):
    src = next((ROOT / "rules" / "capacity_pressure").glob("CAP001-*.yaml")).read_text()
    (tmp_path / "X.yaml").write_text(src.replace("id: CAP001", "id: XCAP9").replace(
        "alert: VllmKvCachePoolExhausted", "alert: 'kv pool!'"))
    res = run_kvdiag("rules", "list", "--rules", str(tmp_path))
    assert res.code == 3 and "alert must be" in res.err and len(res.err.strip().splitlines()) == 1


def test_promtool_test_rules_passes_with_the_new_names(tmp_path):
    assert shutil.which("promtool"), "promtool must be installed (Debian's prometheus package; .ci/run installs it)"
    rules, tests = tmp_path / "kvdiag.rules.yml", tmp_path / "kvdiag.test.yml"
    res = run_kvdiag("rules", "export", "--out", str(rules), "--tests", str(tests))
    assert res.code == 0, res.err
    body = yaml.safe_load(tests.read_text())
    alertnames = {t["alertname"] for case in body["tests"] for t in case["alert_rule_test"]}
    assert "VllmKvCachePoolExhausted" in alertnames
    fired = [e for case in body["tests"] for t in case["alert_rule_test"] for e in t["exp_alerts"]]
    assert fired and all(e["exp_annotations"]["runbook_url"].startswith("docs/runbooks/") for e in fired)
    check = subprocess.run(["promtool", "check", "rules", str(rules)], capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stdout + check.stderr
    run = subprocess.run(["promtool", "test", "rules", str(tests)], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
