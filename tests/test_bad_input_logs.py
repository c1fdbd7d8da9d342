"""Bad log input: secrets in unusual shapes, truncated compressed files, binary garbage, files that are no vLLM log."""

from __future__ import annotations

import pytest

from conftest import FIXTURES
from kvdiag.collect.logread import redact

LOG = str(next((FIXTURES / "incidents").glob("029-*")) / "vllm.log")


@pytest.mark.parametrize("text, hidden", [
    ("non-default args: {'model': 'm', 'api_key': ['SECRETLIST1', 'SECRETLIST2'], 'max_model_len': 32768}",
     ["SECRETLIST1", "SECRETLIST2"]),
    ("cmd: ['vllm', 'serve', 'm', '--api-key', 'SECRETARGV5', '--max-model-len', '32768']", ["SECRETARGV5"]),
    ("args: Namespace(port=8000, api_key='SECRETSQ3 with space', block_size=16)", ["SECRETSQ3", "with space"]),
    ('"api_key": "SECRET DQ, with comma"', ["SECRET", "with comma"]),
    ("Engine config api_key=SECRET,COMMA10 next", ["SECRET", "COMMA10"]),
    ("url=https://user:SECRETURLPW12@hub.example/x", ["SECRETURLPW12"]),
])
def test_redact_more_forms(text, hidden):
    out = redact(text)
    assert "***" in out
    assert not [h for h in hidden if h in out], out


def test_redact_keeps_the_shape_and_the_settings():
    assert redact("{'api_key': ['a', 'b'], 'x': 1}") == "{'api_key': ['***', '***'], 'x': 1}"
    assert redact("Namespace(api_key=None, port=8000, tokenizer='m')") == "Namespace(api_key=None, port=8000, tokenizer='m')"
    assert redact("Namespace(api_key='k', port=8000)") == "Namespace(api_key='***', port=8000)"
    assert redact("api_key=abc, port=1") == "api_key=***, port=1"
    assert redact("https://user:pw@host/x and https://host/y") == "https://user:***@host/x and https://host/y"


@pytest.mark.parametrize("year", ["0", "-5", "1", "1969", "2101", "99999"])
def test_year_out_of_range_is_refused(kvdiag, year):
    res = kvdiag("analyze", "--log", LOG, "--year", year)
    assert res.code == 3 and res.out == ""
    lines = res.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kvdiag: error: Invalid value for '--year'"), lines
    assert "1970<=x<=2100" in lines[0]


def test_year_in_range_is_used(kvdiag):
    res = kvdiag("analyze", "--log", LOG, "--year", "2024", "--format", "json")
    assert res.code in (0, 1, 2) and '"2024-' in res.out
