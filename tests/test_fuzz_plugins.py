"""The fuzz campaign's plug-in interface (docs/fuzz-plugins.md, benchmarks/fuzz_plugins.py): a generator module is
loaded and checked, its cases run through the real CLI in-process, a planted secret that comes out is a ``leak``,
``--debug`` and every ``--format`` are run as variants, and the campaign itself runs plug-in families end to end.
The cases here are fixed inputs that exercise the runner, not generators (those are written by someone who has not
read the input layer)."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FIXTURES, ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import fuzz_plugins  # noqa: E402

PAGE = FIXTURES / "metrics" / "vllm033_quiet_0030.prom"
SECRET = "sk-plantedSECRETabcdef0123456789"

PLUGIN = f'''
SECRET = {SECRET!r}

RULE = """id: Z9
name: z
class: capacity_pressure
title: 'Pool full x{{}}'
severity: warning
message: m
quiet: q
when: {{{{signal: kv_cache_usage, agg: max, op: ">", value: 0.9}}}}
doc: {{{{meaning: a, impact: a, diagnosis: a, false_positives: a, remedy: a}}}}
"""

def leaky(rng):  # 'rules list' prints a rule's own title as written: a planted secret there must be caught
    return {{"files": {{"r/z.yaml": RULE.format(SECRET).encode()}}, "argv": ["rules", "list", "--rules", "{{dir}}/r"],
            "secrets": [SECRET]}}

def refused(rng):
    return {{"files": {{"t.jsonl": b'{{"arrival_s": 0, "prompt_tokens": 1' + b"0" * 400 + b', "output_tokens": 5}}\\n'}},
            "argv": ["simulate", "--trace", "{{t.jsonl}}", "--num-gpu-blocks", "64", "--step-cost",
                     "overhead_ms=1,weights_ms=1,compute_us_per_token=1,kv_read_ns_per_token=1"],
            "secrets": ["api_key_never_in_the_input"]}}

def served(rng):
    body = open({str(PAGE)!r}, "rb").read() + b'vllm:num_requests_running{{model_name="m",x="password=' + SECRET.encode() + b'"}} 1\\n'
    return {{"serve": {{"/metrics": body}}, "argv": ["analyze", "--metrics-url", "{{url}}/metrics", "--duration", "1s"],
            "secrets": [SECRET]}}

FAMILIES = {{
    "t-leaky": {{"command": "rules list", "kind": "rules", "generate": leaky}},
    "t-refused": {{"command": "simulate", "kind": "trace", "generate": refused}},
    "t-served": {{"command": "analyze", "kind": "url", "generate": served}},
}}
'''


@pytest.fixture
def plugin(tmp_path) -> Path:
    p = tmp_path / "gen_plugin.py"
    p.write_text(PLUGIN)
    return p


def test_a_plugin_loads_and_its_cases_are_judged(plugin, tmp_path):
    fams = fuzz_plugins.load_plugins([str(plugin)])
    assert {f: (v["command"], v["kind"]) for f, v in fams.items()} == {
        "t-leaky": ("rules list", "rules"), "t-refused": ("simulate", "trace"), "t-served": ("analyze", "url")}
    outcomes = {}
    for name, fam in fams.items():
        case = fam["generate"](random.Random(1))
        outcomes[name] = fuzz_plugins.run_case(case, tmp_path, name, variants=True)
    assert outcomes["t-leaky"][0] == "leak", outcomes
    assert outcomes["t-refused"][0] == "refused", outcomes
    assert outcomes["t-served"][0] in ("ok", "refused"), outcomes
    # variants: analyze takes 4 formats (html included) and --debug: 1 + 4 + 1 runs
    assert outcomes["t-served"][2] == 6, outcomes


def test_a_module_off_the_interface_is_refused(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("FAMILIES = {'x': {'command': 'nosuch', 'kind': 'log', 'generate': print}}\n")
    with pytest.raises(fuzz_plugins.PluginError, match="nosuch"):
        fuzz_plugins.load_plugins([str(bad)])
    bad.write_text("FAMILIES = {'x': {'command': 'analyze'}}\n")
    with pytest.raises(fuzz_plugins.PluginError, match="lacks kind, generate"):
        fuzz_plugins.load_plugins([str(bad)])


def test_the_campaign_runs_plugin_families_and_writes_the_counts(plugin, tmp_path):
    md = tmp_path / "counts.md"
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "fuzz_campaign.py"), "--plugins", str(plugin),
                          "--families", "t-leaky,t-refused", "--total", "4", "--variants", "2",
                          "--state", str(tmp_path / "st.json"), "--keep", str(tmp_path / "finds"),
                          "--markdown", str(md)], capture_output=True, text=True, timeout=600, cwd=ROOT)
    st = json.loads((tmp_path / "st.json").read_text())
    assert st["families"]["t-leaky"]["inputs"] == 2 and st["families"]["t-leaky"]["leak"] == 2, st
    assert st["families"]["t-refused"]["refused"] == 2, (st, res.stderr[-800:])
    assert res.returncode == 1  # a leak fails the campaign
    text = md.read_text()
    assert "### Per command" in text and "| rules list |" in text and "| simulate |" in text
    assert "### Per input kind" in text and "| trace |" in text
    assert SECRET not in text and SECRET not in res.stdout
