"""Record → replay: ``kvdiag record`` of a live endpoint whose values change, run beside a live
``kvdiag analyze --metrics-url`` over the same window; the replay of the recording reaches the live
verdict, and promtool loads the file."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import ROOT
from promserver import PROMTOOL
from test_live import FakeVllm


def _popen(*args):
    return subprocess.Popen([sys.executable, "-m", "kvdiag", *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("preempt, waiting, expected", [(2, 0, "capacity_pressure"), (0, 0, "healthy")])
def test_record_then_replay_gives_the_live_verdict(tmp_path, preempt, waiting, expected):
    out = tmp_path / "rec.om"
    with FakeVllm(usage=[0.96, 0.98, 0.99, 0.97], preempt_step=preempt, waiting=waiting) as srv:
        rec = _popen("record", "--metrics-url", srv.url, "--interval", "500ms", "--duration", "3s", "--out", str(out))
        live = _popen("analyze", "--metrics-url", srv.url, "--interval", "500ms", "--duration", "3s",
                      "--format", "json")
        rec_out, rec_err = rec.communicate(timeout=60)
        live_out, _ = live.communicate(timeout=60)
    assert rec.returncode == 0, rec_err
    assert "recorded" in rec_err
    text = out.read_text()
    assert text.endswith("# EOF\n")
    samples = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert samples and all(len(line.rsplit(" ", 2)) == 3 for line in samples)   # a timestamp on every sample
    replay = subprocess.run([sys.executable, "-m", "kvdiag", "analyze", "--metrics-file", str(out), "--format", "json"],
                            cwd=ROOT, capture_output=True, text=True, timeout=60)
    live_r, replay_r = json.loads(live_out), json.loads(replay.stdout)
    assert live_r["verdict"]["primary"] == replay_r["verdict"]["primary"] == expected
    assert replay_r["inputs"][0]["records"] >= 5   # several instants, not one page

    def ev(r):
        cap = next(f for f in r["findings"] if f["class"] == "capacity_pressure")
        return {(e["signal"], e["agg"]): e["value"] for e in cap["evidence"]}

    live_ev, replay_ev = ev(live_r), ev(replay_r)
    assert replay_ev[("kv_cache_usage", "max")] == live_ev[("kv_cache_usage", "max")]
    if preempt:   # same window ± one scrape
        assert replay_ev[("num_preemptions", "increase")] == pytest.approx(live_ev[("num_preemptions", "increase")],
                                                                           abs=3 * preempt * 3)
        assert replay_ev[("num_preemptions", "increase")] > 0
    assert replay_ev[("kv_capacity_tokens", "last")] == 27776 * 16
    # promtool loads the recording into a TSDB
    assert PROMTOOL, "needs Debian's prometheus package (promtool); see .ci/run"
    proc = subprocess.run([PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", str(out), str(tmp_path / "tsdb")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "vllm:kv_cache_usage_perc" in text


def test_recorder_writes_histograms_per_point_and_drops_created():
    from kvdiag.collect.metrics import parse_page, split_by_time
    from kvdiag.record import Recorder

    page = ("# TYPE vllm:request_queue_time_seconds histogram\n"
            'vllm:request_queue_time_seconds_bucket{le="1.0",model_name="m"} %d\n'
            'vllm:request_queue_time_seconds_bucket{le="+Inf",model_name="m"} %d\n'
            'vllm:request_queue_time_seconds_count{model_name="m"} %d\n'
            'vllm:request_queue_time_seconds_sum{model_name="m"} 3.0\n'
            "# TYPE vllm:request_queue_time_seconds_created gauge\n"
            'vllm:request_queue_time_seconds_created{model_name="m"} 1.7e9\n'
            "# TYPE vllm:num_preemptions_total counter\n"
            'vllm:num_preemptions_total{model_name="m"} %d\n')
    r = Recorder()
    for i, t in enumerate((100.0, 105.0)):
        r.add(parse_page(page % (i, i + 2, i + 2, i), "p"), t)
    text = r.text()
    assert "_created" not in text
    assert text.splitlines()[-1] == "# EOF"
    instants = split_by_time(text)
    assert [ts for ts, _ in instants] == [100.0, 105.0]
    fams = {f.name: f for f in parse_page(instants[1][1], "x", openmetrics=True)}
    assert [s.value for s in fams["vllm:request_queue_time_seconds"].samples][:3] == [1, 3, 3]
    assert [s.value for s in fams["vllm:num_preemptions"].samples] == [1]


def test_record_unreachable_is_one_line(kvdiag, tmp_path):
    from test_metrics_faults import refused_url

    res = kvdiag("record", "--metrics-url", refused_url(), "--duration", "1s", "--out", str(tmp_path / "x.om"))
    assert res.code == 3 and res.err.startswith("kvdiag: error: ") and "connection refused" in res.err
    assert not (tmp_path / "x.om").exists()


def test_a_failed_write_keeps_the_previous_recording_and_leaves_no_temp_file(tmp_path, monkeypatch):
    """A full disk mid-write (ENOSPC from the write) must not replace the old recording with a cut one."""
    import errno
    import os

    from kvdiag import record
    from kvdiag.errors import InputError

    out = tmp_path / "incident.om"
    old = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 1 1.0\n# EOF\n"
    out.write_text(old)
    real_fdopen = os.fdopen

    class FullDisk:
        def __init__(self, fh):
            self.fh = fh

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()

        def write(self, text):
            self.fh.write(text[: len(text) // 2])
            self.fh.flush()
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fdopen", lambda fd, *a, **k: FullDisk(real_fdopen(fd, *a, **k)))
    with pytest.raises(InputError, match="No space left on device"):
        record._write(str(out), old.replace("1 1.0", "2 2.0") * 100)
    assert out.read_text() == old
    assert [p.name for p in tmp_path.iterdir()] == ["incident.om"]
