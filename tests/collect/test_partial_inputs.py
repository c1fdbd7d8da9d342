"""Partial input still yields a report (kvdiag.collect.logs.read_logs, kvdiag.analyze.analyze): of several logs or
saved pages, one that cannot be read (empty, binary, missing) is listed as not read — in the report's notes and its
Inputs — and the others are judged; the only input, or every input, unreadable is still one error line and exit 3.

Found by the breaker pass of session 7 (``--log good --log empty.log`` exited 3 with only the empty file's error)."""

from __future__ import annotations

import json

from conftest import FIXTURES, run_kvdiag

LOG = FIXTURES / "incidents" / "029-mtp-benchmark-queueing-kv-95pct-ttft-214s" / "vllm.log"
PAGE = FIXTURES / "metrics" / "vllm033_pressure_0054.prom"


def test_one_unreadable_log_of_two_is_listed_and_the_other_judged(tmp_path):
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    alone = run_kvdiag("analyze", "--log", str(LOG), "--format", "json")
    both = run_kvdiag("analyze", "--log", str(LOG), "--log", str(empty), "--format", "json")
    assert both.code == alone.code, (both.code, both.err[-400:])
    doc, ref = json.loads(both.out), json.loads(alone.out)
    assert doc["verdict"]["primary"] == ref["verdict"]["primary"]
    assert any("input not read" in n and "empty.log" in n for n in doc["notes"]), doc["notes"]
    assert [i["notes"] for i in doc["inputs"] if i["name"] == str(empty)] == [[f"not read: {empty}: empty file, "
                                                                               "expected vLLM log lines"]]


def test_a_binary_page_beside_a_good_one_is_listed(tmp_path):
    bad = tmp_path / "bad.prom"
    bad.write_bytes(b"\x00\x01\x02" * 100)
    res = run_kvdiag("analyze", "--metrics-file", str(PAGE), "--metrics-file", str(bad))
    assert res.code in (0, 1, 2), (res.code, res.err[-400:])
    assert "input not read, judged without it" in res.out and "bad.prom" in res.out


def test_every_input_unreadable_is_one_error_and_3(tmp_path):
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_bytes(b"")
    b.write_bytes(b"\x00" * 64)
    for args in (["--log", str(a)], ["--log", str(a), "--log", str(b)]):
        res = run_kvdiag("analyze", *args)
        assert res.code == 3, (args, res.code)
        assert res.err.startswith("kvdiag: error: ") and len(res.err.strip().splitlines()) == 1, res.err
