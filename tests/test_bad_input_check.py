"""Bad input to ``kvdiag check``: --warn-on/--fail-on values, --state files that are not ours, missing folders."""

from __future__ import annotations

import json

import pytest

from conftest import FIXTURES
from test_check import nagios

PRESS = str(FIXTURES / "metrics" / "vllm033_pressure_0054.prom")


@pytest.mark.parametrize("option, value", [
    ("--warn-on", "banana"), ("--fail-on", "capacity_presure"), ("--fail-on", ""), ("--warn-on", "Capacity_Pressure"),
])
def test_unknown_warn_on_fail_on_value_is_refused(kvdiag, option, value):
    # without the check a typo turned this CRITICAL into OK (rc 0)
    res = kvdiag("check", "--metrics-file", PRESS, option, value)
    status, details = nagios(res)  # a status line of at most 200 characters; the rest of the error below it
    assert res.code == 3 and status.startswith(f"KVDIAG UNKNOWN - {option} {value!r}: expected a severity")
    assert status.endswith("…") and details[-1].startswith("…") and details[-1].endswith("weights_dont_fit)")
    err = res.err.strip()
    assert err.startswith(f"kvdiag: error: {option} {value!r}: expected a severity (ok|warning|critical) "
                          "or a verdict class (")
    assert "capacity_pressure" in err and "Traceback" not in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("value, code", [("CRITICAL", 2), ("Warning", 0), ("capacity_pressure", 2)])
def test_severity_is_case_insensitive_class_is_exact(kvdiag, value, code):
    assert kvdiag("check", "--metrics-file", PRESS, "--fail-on", value).code == code


@pytest.mark.parametrize("name, content", [
    ("victim.log", "(APIServer pid=1) INFO 05-19 10:12:03 [api_server.py:1] vLLM API server version 0.9.0\n"),
    ("config.json", '{"num_hidden_layers": 32, "num_attention_heads": 32}'),
    ("list.json", "[]"),
    ("binary.bin", "\x00\x01\x02"),
])
def test_state_never_overwrites_a_file_that_is_not_a_state_file(kvdiag, tmp_path, name, content):
    victim = tmp_path / name
    victim.write_text(content)
    res = kvdiag("check", "--metrics-file", PRESS, "--state", str(victim))
    status, _ = nagios(res)
    assert res.code == 3 and status.startswith(f"KVDIAG UNKNOWN - --state {victim}: not a kvdiag state file")
    assert res.err.strip() == (f'kvdiag: error: --state {victim}: not a kvdiag state file (expected a JSON object '
                               'with a "version" key); refusing to overwrite it')
    assert victim.read_text() == content
    assert [p.name for p in tmp_path.iterdir()] == [name]      # no temporary file left either


def test_state_empty_file_is_a_fresh_state(kvdiag, tmp_path):
    state = tmp_path / "state.json"
    state.write_text("")
    res = kvdiag("check", "--metrics-file", PRESS, "--state", str(state), "--instance", "x")
    assert res.code == 2
    assert json.loads(state.read_text())["version"] == 1


def test_state_with_a_future_time_starts_fresh_and_is_rewritten(kvdiag, tmp_path):
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"version": 1, "instances": {"x": {"t": 1e12, "counters": {"num_preemptions": 9}}}}))
    res = kvdiag("check", "--metrics-file", PRESS, "--state", str(state), "--instance", "x")
    assert res.code == 2 and "Traceback" not in res.err and res.err == ""
    assert "unreadable (t 1000000000000 is not between 1970 and a day from now), starting fresh" in res.out
    assert json.loads(state.read_text())["instances"]["x"]["t"] < 1e11       # rewritten with a sane time
    res = kvdiag("check", "--metrics-file", PRESS, "--state", str(state), "--instance", "x")
    assert res.code == 2 and "starting fresh" not in res.out


def test_textfile_folder_is_not_created(kvdiag, tmp_path):
    out = tmp_path / "missing" / "tf"
    res = kvdiag("check", "--metrics-file", PRESS, "--textfile", str(out))
    assert res.code == 2
    assert f"textfile {out} not written (no such folder)" in res.out
    assert not (tmp_path / "missing").exists()


def test_textfile_failure_turns_ok_into_unknown(kvdiag, tmp_path):
    """A healthy verdict that never reached node_exporter is not OK (exit 3); a CRITICAL one stays CRITICAL above."""
    out = tmp_path / "missing" / "tf"
    res = kvdiag("check", "--metrics-file", str(FIXTURES / "metrics" / "vllm033_quiet_0030.prom"),
                 "--textfile", str(out))
    status, details = nagios(res)
    assert res.code == 3 and status.startswith("KVDIAG UNKNOWN - healthy:")
    assert ".;" not in status and "; textfile not written" in status                 # the short form up there,
    assert f"textfile {out} not written (no such folder)" in details                 # why, in the long output
