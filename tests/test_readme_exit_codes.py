"""Issue 25, must show 4: the README's exit-code table, every row run through the real CLI (``python -m kvdiag``).

The table is read from README.md; each (command, code) row has an invocation here that must exit with that code, and
every row of the table must have one (a row added without a test fails, as does a test for a row that is gone).
"""

from __future__ import annotations

import gzip
import re
import signal
import subprocess
import sys

import pytest

from conftest import FIXTURES, ROOT, run_kvdiag

README = (ROOT / "README.md").read_text(encoding="utf-8")
ROW = re.compile(r"^\| (analyze|check|diff|estimate|simulate|record|watch|dashboards|rules|any) \| (\d+) \| (.+) \|$", re.M)
ROWS = [(m.group(1), int(m.group(2))) for m in ROW.finditer(README)]
LAB = FIXTURES / "diff" / "lab-max-num-seqs"
LLAMA = str(FIXTURES / "models" / "llama-3.1-8b-instruct.json")
QUIET = str(FIXTURES / "metrics" / "vllm033_quiet_0030.prom")


def _plain(tmp_path, gz):
    out = tmp_path / f"{gz.parent.name}-{gz.name.removesuffix('.gz')}"
    out.write_bytes(gzip.decompress(gz.read_bytes()))
    return str(out)


def _incident(num):
    return str(next((FIXTURES / "incidents").glob(f"{num}-*/vllm.log")))


def _not_vllm(tmp_path):
    p = tmp_path / "other.prom"
    p.write_text("# TYPE node_load1 gauge\nnode_load1 0.5\n")
    return str(p)


def _sigterm_while_reading(verb):
    proc = subprocess.Popen([sys.executable, "-m", "kvdiag", verb, "--log", "-"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    import time

    time.sleep(3)  # the CLI is loaded and reads stdin
    proc.send_signal(signal.SIGTERM)
    try:
        proc.communicate(timeout=30)
    finally:
        proc.kill()
    return proc.returncode


INVOKE = {
    ("analyze", 0): lambda t: run_kvdiag("analyze", "--metrics-file", QUIET),
    ("analyze", 1): lambda t: run_kvdiag("analyze", "--metrics-file", _plain(t, LAB / "after" / "recording.om.gz")),
    ("analyze", 2): lambda t: run_kvdiag("analyze", "--log", _incident("029")),
    ("analyze", 3): lambda t: run_kvdiag("analyze", "--metrics-file", _not_vllm(t)),
    ("check", 0): lambda t: run_kvdiag("check", "--metrics-file", QUIET),
    ("check", 1): lambda t: run_kvdiag("check", "--metrics-file", _plain(t, LAB / "after" / "recording.om.gz")),
    ("check", 2): lambda t: run_kvdiag("check", "--log", _incident("029")),
    ("check", 3): lambda t: run_kvdiag("check", "--metrics-file", _not_vllm(t)),
    ("diff", 0): lambda t: run_kvdiag("diff", _incident("029"), _incident("029")),
    ("diff", 1): lambda t: run_kvdiag("diff", _plain(t, LAB / "before" / "recording.om.gz"),
                                      _plain(t, LAB / "after" / "recording.om.gz"), "--fail-on-regression"),
    ("diff", 3): lambda t: run_kvdiag("diff", _incident("029"), str(t / "missing.log")),
    ("estimate", 0): lambda t: run_kvdiag("estimate", "--model-config", LLAMA, "--gpu-memory", "80",
                                          "--max-model-len", "32768"),
    ("estimate", 2): lambda t: run_kvdiag("estimate", "--model-config", LLAMA, "--gpu-memory", "16",
                                          "--max-model-len", "131072"),
    ("estimate", 3): lambda t: run_kvdiag("estimate", "--model-config", str(t / "missing.json"), "--gpu-memory", "80"),
    ("simulate", 0): lambda t: run_kvdiag("simulate", "--lab-case", str(FIXTURES / "simulate" / "ramp_000"),
                                          "--max-num-seqs", "16,256"),
    ("simulate", 3): lambda t: run_kvdiag("simulate", "--trace", str(t / "missing.json")),
    ("record", 0): None,  # a loopback endpoint, below
    ("record", 3): lambda t: run_kvdiag("record", "--metrics-url", "http://127.0.0.1:9/metrics", "--duration", "1s",
                                        "--out", str(t / "r.om")),
    ("rules", 0): lambda t: run_kvdiag("rules", "list"),
    ("rules", 1): None,  # a failing case, below
    ("rules", 3): lambda t: run_kvdiag("rules", "explain", "NOPE999"),
    ("watch", 0): None,  # test_watch_0_left_with_ctrl_c
    ("watch", 3): lambda t: run_kvdiag("watch", "--interval", "1ms", "http://127.0.0.1:9/metrics"),
    ("dashboards", 0): lambda t: run_kvdiag("dashboards", "export", "--out", str(t / "d.json")),
    ("dashboards", 3): lambda t: run_kvdiag("dashboards", "export", "--window", "1s"),
    ("any", 130): lambda t: type("R", (), {"code": _sigterm_while_reading("analyze"), "out": "", "err": ""})(),
}


def test_every_row_has_a_test_and_every_test_a_row():
    assert len(ROWS) >= 20, ROWS
    assert set(ROWS) == set(INVOKE), (sorted(set(ROWS) - set(INVOKE)), sorted(set(INVOKE) - set(ROWS)))


@pytest.mark.parametrize("command,code", [r for r in ROWS if INVOKE.get(r) is not None],
                         ids=[f"{c}-{n}" for c, n in ROWS if INVOKE.get((c, n)) is not None])
def test_row(command, code, tmp_path):
    res = INVOKE[(command, code)](tmp_path)
    assert res.code == code, (command, code, res.code, res.out[-800:], res.err[-800:])
    assert "Traceback" not in res.err
    if (command, code) in (("check", 3), ("analyze", 3)):
        first = res.out.splitlines()[0]
        assert "inconclusive" in first or "UNKNOWN" in first, first
    if (command, code) == ("estimate", 2):
        assert res.out.startswith("vLLM would refuse to start:") and "Smallest that starts:" in res.out.splitlines()[0]
    if (command, code) == ("check", 1):
        assert res.out.startswith("KVDIAG WARNING - queueing:") and "max_num_seqs" in res.out.splitlines()[0]


def test_record_0_through_a_loopback_endpoint(tmp_path, static_server):
    url = static_server((FIXTURES / "metrics" / "vllm033_quiet_0030.prom").read_bytes())
    res = run_kvdiag("record", "--metrics-url", url, "--duration", "2s", "--interval", "1s",
                     "--out", str(tmp_path / "r.om"))
    assert res.code == 0, res.err
    assert (tmp_path / "r.om").stat().st_size > 0


def test_rules_1_on_a_failing_case(tmp_path):
    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "QUE001.yaml").write_text("rule: QUE001\ninterval: 10s\ncases:\n  wrong_on_purpose:\n"
                                       "    series: {kv_cache_usage: '0.40x10', num_requests_waiting: '0x10'}\n"
                                       "    expect: fires\n")
    res = run_kvdiag("rules", "test", str(cases))
    assert res.code == 1, (res.out, res.err)


def test_watch_0_left_with_ctrl_c(tmp_path, static_server):
    """watch --no-tui on a loopback endpoint, Ctrl-C once it has judged a page: exit 0 and the final report."""
    import signal
    import subprocess
    import sys
    import time

    url = static_server((FIXTURES / "metrics" / "vllm033_quiet_0030.prom").read_bytes())
    proc = subprocess.Popen([sys.executable, "-m", "kvdiag", "watch", url, "--no-tui", "--interval", "500ms"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(4)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, (out[-800:], err[-800:])
    assert "Traceback" not in err and out.strip(), err[-800:]
