"""Where an OpenMetrics recording ends (kvdiag.collect.metrics.read_metrics_file, ``_recording_ends``): a recording
without ``# EOF`` (a recorder killed, a copy cut short), cut inside a line, or followed by lines after ``# EOF``
is read as the recording it is, with a note, never as one page of 1970 instants with the verdict flipped.

Found by the breaker pass of session 7 (a recording without ``# EOF`` gave ``OK: healthy`` with a 1970 window where
the whole file gives ``capacity_pressure``)."""

from __future__ import annotations

import json

from conftest import FIXTURES, run_kvdiag

REC = FIXTURES / "series" / "forecast" / "dev_ramp_7_first_120s.om"


def _report(path):
    res = run_kvdiag("analyze", "--metrics-file", str(path), "--format", "json")
    assert res.code in (0, 1, 2), (res.code, res.err[-500:])
    return json.loads(res.out), res.code


def _notes(doc) -> str:
    return json.dumps(doc.get("inputs", doc))


def test_a_recording_without_eof_reads_as_the_whole_one(tmp_path):
    whole, code = _report(REC)
    cut = tmp_path / "noeof.om"
    cut.write_text("".join(ln for ln in REC.read_text().splitlines(keepends=True) if not ln.startswith("# EOF")))
    doc, code_cut = _report(cut)
    assert code_cut == code and doc["verdict"]["primary"] == whole["verdict"]["primary"], (doc["verdict"], whole["verdict"])
    assert "no '# EOF' at the end" in _notes(doc)
    assert "1970" not in json.dumps(doc.get("window", "")), doc.get("window")


def test_lines_after_eof_are_skipped_and_counted(tmp_path):
    whole, code = _report(REC)
    rec = tmp_path / "after.om"
    rec.write_text(REC.read_text() + 'vllm:num_requests_running{model_name="m"} 3 1700000000.0\n')
    doc, code_after = _report(rec)
    assert code_after == code and doc["verdict"]["primary"] == whole["verdict"]["primary"]
    assert "1 line(s) after '# EOF' skipped" in _notes(doc)


def test_a_recording_cut_inside_a_line_drops_only_the_family_it_cut(tmp_path):
    whole, code = _report(REC)
    rec = tmp_path / "cut.om"
    rec.write_bytes(REC.read_bytes()[:-300])
    doc, code_cut = _report(rec)
    assert code_cut == code and doc["verdict"]["primary"] == whole["verdict"]["primary"]
    notes = _notes(doc)
    assert "which is dropped" in notes and "the recording was cut" in notes


def test_a_text_page_with_millisecond_timestamps_is_still_a_page(tmp_path):
    page = tmp_path / "ms.prom"
    page.write_text("# TYPE vllm:num_requests_running gauge\n"
                    'vllm:num_requests_running{model_name="m"} 3 1700000000000\n')
    res = run_kvdiag("analyze", "--metrics-file", str(page), "--format", "json")
    assert res.code in (0, 1, 2, 3), res.err
    assert "the recording was cut" not in res.out + res.err
