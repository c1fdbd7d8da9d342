"""``--rules DIR`` (kvdiag.engine.model.yaml_files / load_rules): rule files end in ``.yaml`` or ``.yml`` (both are
YAML's names, and Prometheus's own rule files are usually ``.yml``); a folder with no rule file at all is a wrong
folder, one line and exit 3, never silently nothing (breaker pass, session 7: a ``.yml`` rule was ignored and an
invalid one accepted with exit 0)."""

from __future__ import annotations

from conftest import ROOT, run_kvdiag

SRC = next((ROOT / "rules" / "capacity_pressure").glob("CAP001-*.yaml")).read_text()


def test_a_yml_rule_is_loaded(tmp_path):
    (tmp_path / "my.yml").write_text(SRC.replace("id: CAP001", "id: MYX001"))
    res = run_kvdiag("rules", "list", "--rules", str(tmp_path))
    assert res.code == 0, res.err
    assert any(line.startswith("MYX001") for line in res.out.splitlines()), res.out[-400:]


def test_an_invalid_yml_rule_is_refused(tmp_path):
    (tmp_path / "x.yml").write_text("id: [unclosed\n")
    res = run_kvdiag("rules", "list", "--rules", str(tmp_path))
    assert res.code == 3 and "x.yml" in res.err and len(res.err.strip().splitlines()) == 1, (res.code, res.err)


def test_a_folder_without_rules_is_one_line_and_3(tmp_path):
    (tmp_path / "notes.txt").write_text("not a rule\n")
    res = run_kvdiag("rules", "list", "--rules", str(tmp_path))
    assert res.code == 3, (res.code, res.out[-300:])
    assert res.err.strip() == f"kvdiag: error: {tmp_path}: no rule files (*.yaml, *.yml) in this folder"
