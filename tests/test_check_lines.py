"""``kvdiag check`` output for a phone (issue 11, "Must show" 3): one status line of at most 200 characters before
the perfdata, the details as Nagios long-output lines, no phrase twice — after a restart, with several servers,
for every class (the real incidents' logs, and a live /metrics endpoint for prefix-cache eviction)."""

from __future__ import annotations

import re

import pytest

from conftest import FIXTURES, incident_cases
from kvdiag import check as chk
from kvdiag.analyze import analyze
from kvdiag.engine.model import load_rules
from test_check import Endpoint, nagios
from test_prefix_catalog import ResidencyServer

INCIDENTS = [c / "vllm.log" for c in incident_cases()]  # bundled + the tuned corpus (never held-out)
RESTART = "server restarted since the last check"


def _words(text: str) -> list[str]:
    return [w for w in re.split(r"[\s…]+", text) if w.strip(".,;:")]


def _notes(kind: str) -> list[str]:
    long_path = "/var/lib/kvdiag/" + "very-long-folder-name/" * 6 + "state.json"
    prev = chk.CheckState(1.7e9, {"num_preemptions": 50.0}, 1_700_000_000)
    cur = chk.CheckState(1.7e9 + 60, {"num_preemptions": 2.0}, 1_700_000_600)
    restart = chk.restart_notes(prev, cur)
    if kind == "none":
        return []
    if kind == "restart":
        return restart
    return restart + [chk.Note(f"state file {long_path} unreadable (t is not finite), starting fresh",
                               "state file unreadable, starting fresh"),
                      f"textfile {long_path} not written (no such folder)",
                      f"push to http://pushgateway.monitoring.svc.cluster.local:9091 failed (connection refused)",
                      chk.Note("window cut short at 7.0 s of 60 s by an interrupt (SIGINT); judged on the 14 scrape(s) "
                               "taken", "window cut short by an interrupt")]


@pytest.mark.parametrize("kind", ["none", "restart", "many"])
def test_status_output_fits_says_everything_once(kind):
    """Every incident's verdict with no note, a restart, and five long notes: the status line fits, the summary's
    words all appear once across the status line and the long output, each note's full text once."""
    notes = _notes(kind)
    for log in INCIDENTS:
        report = analyze(logs=[str(log)])
        code = chk.status_of(report, (), ())
        out = chk.status_output(code, report, "kv_cache_usage=0.984;0.90;0.95;0;1", notes)
        status, *details = out.split("\n")
        text = status.split(" | ", 1)[0]
        assert len(text) <= chk.MAX_STATUS_CHARS, (log.parent.name, kind, status)
        assert status.startswith(f"KVDIAG {chk.STATUS[code]} - {report.verdict.primary}: ")
        assert all(d and "|" not in d for d in details), out
        said = text.split(": ", 1)[1]
        for n in notes:
            said = said.replace("; " + chk.short_note(n), "")
        said = re.sub(r"; \d+ (more )?note\(s\) below$", "", said)
        summary = " ".join(report.verdict.summary.split()).replace("|", "/")
        rest = [d for d in details if d not in notes]
        assert len(rest) <= 1, (log.parent.name, details)
        got = _words(said + " " + " ".join(rest))
        want = _words(summary)
        assert [w.strip(".,;:") for w in got] == [w.strip(".,;:") for w in want], (log.parent.name, out)
        for n in notes:  # the full text of every note once; the short form on the status line at most once
            assert out.count(str(n)) <= 1 and text.count(chk.short_note(n)) <= 1, out
            assert str(n) in details or (str(n) == chk.short_note(n) and str(n) in text), (n, out)
        assert out.count(RESTART) == (1 + (RESTART in text and kind != "none")) if notes else RESTART not in out


def test_every_class_through_the_real_cli_fits():
    """``kvdiag check`` on every real incident's log, and on a live endpoint whose prefix hits fall, covers every
    class the rules can give (and healthy, inconclusive); each output is a valid status line ≤ 200 characters."""
    from conftest import run_kvdiag

    seen = {}
    for log in INCIDENTS:
        res = run_kvdiag("check", "--log", str(log))
        status, details = nagios(res)
        seen.setdefault(status.split(" - ", 1)[1].split(":", 1)[0], log.parent.name)
        assert len(" ".join(details)) < 2000
    # the hit rate falls 6 s after the server starts: kvdiag's window (10 s) sees it before and after, even when
    # a busy machine takes a few seconds to start kvdiag
    with ResidencyServer(early=0.9, late=0.05, fall_after=30, idle=2.0, evict_per_step=4) as srv:
        res = run_kvdiag("check", "--metrics-url", srv.url, "--duration", "10s", "--interval", "500ms")
    status, _ = nagios(res)
    assert res.code == 1 and status.startswith("KVDIAG WARNING - prefix_cache_eviction: "), res.out
    seen.setdefault("prefix_cache_eviction", "live")
    # queueing: the lab pair's max_num_seqs 64 run (a queue that grows with room in the pool)
    import gzip
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        rec = f"{tmp}/after.om"
        with open(rec, "wb") as fh:
            fh.write(gzip.decompress((FIXTURES / "diff" / "lab-max-num-seqs" / "after" / "recording.om.gz").read_bytes()))
        res = run_kvdiag("check", "--metrics-file", rec)
    status, _ = nagios(res)
    assert res.code == 1 and status.startswith("KVDIAG WARNING - queueing: "), res.out
    seen.setdefault("queueing", "lab max-num-seqs after")
    every = {r.cls for r in load_rules([])} | {"healthy", "inconclusive"}
    assert set(seen) == every, sorted(every - set(seen))


def test_restart_is_said_once_and_fits(kvdiag, tmp_path):
    """A new process start time and a counter that fell: one restart note (both reasons in the long output)."""
    endpoint = Endpoint()
    try:
        state = str(tmp_path / ("a-long-state-file-name-" * 4 + "state.json"))
        endpoint.set_preemptions(50)
        nagios(kvdiag("check", "--metrics-url", endpoint.url, "--state", state))
        endpoint.set_preemptions(2)
        endpoint.start.set(1_700_000_600)
        res = kvdiag("check", "--metrics-url", endpoint.url, "--state", state)
    finally:
        endpoint.close()
    status, details = nagios(res)
    assert res.out.count(RESTART) == 2 and status.count(RESTART) == 1, res.out  # short up, one full line below
    (why,) = [d for d in details if d.startswith(RESTART)]
    assert why == (f"{RESTART}: process start time changed; num_preemptions reset 50 → 2, counted from zero, not as "
                   "a negative rate")


def test_several_servers_fit(kvdiag, tmp_path):
    """Several --metrics-url: one status line ≤ 200 characters, also when one of them cannot be read."""
    endpoints = [Endpoint(), Endpoint()]
    try:
        urls = [a for e in endpoints for a in ("--metrics-url", e.url)]
        res = kvdiag("check", *urls, "--state", str(tmp_path / "s.json"), "--duration", "1s", "--interval", "500ms")
        status, _ = nagios(res)
        assert res.code in (0, 1, 2, 3) and status.startswith("KVDIAG ")
        refused = [a for i in range(3) for a in ("--metrics-url", f"http://127.0.0.1:9/metrics/{'x' * 40}{i}")]
        res = kvdiag("check", *urls, *refused)
        status, details = nagios(res)
        assert res.code == 3 and status.startswith("KVDIAG UNKNOWN - ")
        assert "connection refused" in status + " ".join(details)
    finally:
        for e in endpoints:
            e.close()
