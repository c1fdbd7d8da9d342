"""Report formats: the JSON output validates against kvdiag/report/report.schema.json for every incident; golden text,
JSON and Markdown reports of three incidents, and their text reports at 80 and 120 columns (``--width``; regenerate
with KVDIAG_UPDATE_GOLDEN=1 and read the diff)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import jsonschema
import pytest

from conftest import FIXTURES, incident_cases

import kvdiag

SCHEMA = json.loads((Path(kvdiag.__file__).parent / "report" / "report.schema.json").read_text())
GOLDEN = Path(__file__).parent / "golden"
INCIDENTS = incident_cases()  # bundled + the tuned corpus (never held-out)
GOLDEN_CASES = ["029", "007", "005"]  # capacity pressure at runtime, sampler warm-up OOM, a co-tenant on the GPU
FORMATS = {"text": "txt", "json": "json", "markdown": "md"}


def test_schema_is_a_valid_schema():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


@pytest.mark.parametrize("case", INCIDENTS, ids=[c.name[:3] for c in INCIDENTS])
def test_json_report_validates_against_schema(case, kvdiag):
    res = kvdiag("analyze", "--log", str(case / "vllm.log"), "--format", "json")
    report = res.json()
    jsonschema.validate(report, SCHEMA)
    # every number of every finding (firing or counter-evidence) names its log line, directly or in its derivation
    for f in report["findings"]:
        for e in f["evidence"]:
            assert re.search(r"log:vllm\.log:\d+", e["source"]), (f["rule_id"], e)


def test_schema_rejects_a_broken_report(kvdiag):
    case = INCIDENTS[0]
    report = kvdiag("analyze", "--log", str(case / "vllm.log"), "--format", "json").json()
    report["verdict"]["primary"] = "fragmentation"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(report, SCHEMA)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("num", GOLDEN_CASES)
def test_golden_report(num, fmt, kvdiag):
    case = next(c for c in INCIDENTS if c.name.startswith(num))
    # a path relative to the checkout (the CLI runs there): the report does not depend on where it is checked out
    res = kvdiag("analyze", "--log", f"fixtures/incidents/{case.name}/vllm.log", "--format", fmt)
    out = _without_inputs(res.out.replace(kvdiag_version(), "VERSION"), fmt)
    path = GOLDEN / f"{case.name[:3]}.{FORMATS[fmt]}"
    if os.environ.get("KVDIAG_UPDATE_GOLDEN"):
        path.write_text(out)
    assert out == path.read_text(), f"{path} differs; review, then KVDIAG_UPDATE_GOLDEN=1"


@pytest.mark.parametrize("width", [80, 120])
@pytest.mark.parametrize("num", GOLDEN_CASES)
def test_golden_text_at_width(num, width, kvdiag):
    case = next(c for c in INCIDENTS if c.name.startswith(num))
    res = kvdiag("analyze", "--log", f"fixtures/incidents/{case.name}/vllm.log", "--width", str(width))
    out = _without_inputs(res.out.replace(kvdiag_version(), "VERSION"), "text")
    long = [line for line in out.splitlines() if len(line) > width]
    assert not long, long
    path = GOLDEN / f"{case.name[:3]}.w{width}.txt"
    if os.environ.get("KVDIAG_UPDATE_GOLDEN"):
        path.write_text(out)
    assert out == path.read_text(), f"{path} differs; review, then KVDIAG_UPDATE_GOLDEN=1"


def _without_inputs(out: str, fmt: str) -> str:
    """The collectors' input notes (line counts, detected formats) belong to the log collector's tests; the golden
    files pin the diagnosis: verdict, evidence with sources, fix, ruled out."""
    if fmt == "json":
        data = json.loads(out)
        data.pop("inputs", None)
        return json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    marker = "\nInputs:\n" if fmt == "text" else "\n## Inputs\n"
    return out.split(marker)[0] + "\n"


def kvdiag_version() -> str:
    return kvdiag.__version__
