"""Bad log input: secrets in unusual shapes, truncated compressed files, binary garbage, files that are no vLLM log."""

from __future__ import annotations

import re

import pytest

from conftest import FIXTURES
from kvdiag.redaction import redact

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


def _inputs_line(res) -> dict:
    import json

    assert "Traceback" not in res.err, res.err
    return json.loads(res.out)["inputs"][0]


def test_truncated_gz_keeps_the_lines_before_the_cut(kvdiag, tmp_path):
    import gzip

    data = gzip.compress(open(LOG, "rb").read())
    p = tmp_path / "cut.log.gz"
    p.write_bytes(data[: len(data) * 2 // 3])
    res = kvdiag("analyze", "--log", str(p), "--format", "json")
    assert res.code in (1, 2), (res.code, res.err)             # a verdict from the lines read
    inp = _inputs_line(res)
    assert inp["observations"] > 0
    notes = " ".join(inp["notes"])
    assert f"truncated after {inp['records']} lines (gzip stream ends before its end-of-stream marker)" in notes


def test_truncated_zst_keeps_lines_and_is_never_called_empty(kvdiag, tmp_path):
    import zstandard

    text = open(LOG, "rb").read()
    # several frames (as zstd --rsyncable / log shippers write): the cut falls in the last one
    frames = b"".join(zstandard.ZstdCompressor().compress(text[i:i + 1024]) for i in range(0, len(text), 1024))
    p = tmp_path / "cut.log.zst"
    p.write_bytes(frames[:-20])
    res = kvdiag("analyze", "--log", str(p), "--format", "json")
    assert res.code in (1, 2), (res.code, res.err)
    notes = " ".join(_inputs_line(res)["notes"])
    assert "truncated after" in notes and "zstd stream ends before its end-of-stream marker" in notes
    # one frame cut in its only block: nothing decodable, and it is not "empty"
    one = zstandard.ZstdCompressor().compress(text)
    p.write_bytes(one[: len(one) // 2])
    res = kvdiag("analyze", "--log", str(p))
    assert res.code == 3 and "empty" not in res.err
    assert res.err.strip() == (f"kvdiag: error: {p}: cannot decompress (zstd stream ends before its end-of-stream "
                               "marker): nothing readable before the damage, expected vLLM log lines")


def test_binary_garbage_inside_a_log_is_noted(kvdiag, tmp_path):
    import random

    rnd = random.Random(7)
    p = tmp_path / "mixed.log"
    p.write_bytes(open(LOG, "rb").read() + bytes(rnd.randrange(256) for _ in range(5000)))
    res = kvdiag("analyze", "--log", str(p), "--format", "json")
    inp = _inputs_line(res)
    assert inp["observations"] > 0
    assert any("line(s) hold binary data (control bytes), not log text" in n for n in inp["notes"]), inp["notes"]


def test_compressed_binary_garbage_is_binary_data(kvdiag, tmp_path):
    import gzip
    import random

    rnd = random.Random(8)
    p = tmp_path / "bin.gz"
    p.write_bytes(gzip.compress(bytes(rnd.randrange(256) for _ in range(20000))))
    res = kvdiag("analyze", "--log", str(p))
    assert res.code == 3 and res.err.strip() == f"kvdiag: error: {p}:1: binary data, expected text log lines"


@pytest.mark.parametrize("name, content", [
    ("json.log", '{"level": "info", "msg": "request done", "latency_ms": 12}\n'),
    ("config.json", '{\n  "num_hidden_layers": 32,\n  "hidden_size": 4096\n}\n'),
])
def test_a_file_with_no_vllm_line_says_so(kvdiag, tmp_path, name, content):
    p = tmp_path / name
    p.write_text(content)
    res = kvdiag("analyze", "--log", str(p), "--format", "json")
    assert res.code == 3
    notes = _inputs_line(res)["notes"]
    assert f"no line of {name} looked like a vLLM log line (expected 'INFO MM-DD HH:MM:SS [file.py:N] ...'): " \
           "nothing taken from it" in notes


def test_a_real_log_gets_none_of_these_notes(kvdiag):
    res = kvdiag("analyze", "--log", LOG, "--format", "json")
    notes = " ".join(_inputs_line(res)["notes"])
    assert "truncated" not in notes and "binary" not in notes and "looked like" not in notes


def test_an_over_long_line_is_cut_with_a_note(kvdiag, tmp_path):
    from kvdiag.collect.logread import MAX_LINE_BYTES

    p = tmp_path / "long.log"
    p.write_bytes(open(LOG, "rb").read() + b"x" * (MAX_LINE_BYTES * 2 + 100) + b"\n")
    res = kvdiag("analyze", "--log", str(p), "--format", "json")
    notes = _inputs_line(res)["notes"]
    assert [n for n in notes if re.fullmatch(r"over-long line\(s\) \(no newline within 8 MiB\) cut [12] time\(s\), "
                                             r"each piece counted as a record", n)], notes
