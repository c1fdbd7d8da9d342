"""Fleet analysis against a real Prometheus server (Debian's ``prometheus``, started here on 127.0.0.1).

History: four instances over 30 minutes at 15 s, written as OpenMetrics and loaded with
``promtool tsdb create-blocks-from openmetrics``, once with ``vllm:`` names (job "colon") and once
with the ``vllm_`` names a Prometheus 2.x server stores (job "underscore"):

* ``pressure``: usage 97-99 %, 5 waiting, 2 preemptions per step → capacity_pressure;
* ``healthy-high``: usage 96-97 %, nothing waiting, the preemption counter flat at 120 → healthy;
* ``restart-pressure``: usage 99 %, counter at 5000 falls to 0 mid-window (restart), then +3 per step →
  capacity_pressure (last − first would be negative);
* ``restart-quiet``: usage 96 %, counter 5000 falls to 0 and stays → healthy (the cumulative value 5000
  would wrongly say "preempting");
* ``prefix-evict``: usage 30 %, hit rate 80 % then 5 %, sampled evictions after 3 s idle (--kv-cache-metrics) →
  prefix_cache_eviction from the residency histogram, which PromQL reads;
* ``split-usage``: the usage gauge exported by 4 API-server processes, one carrying 65 % → healthy with the note;
* ``busy-misses``: usage 30 % then 90 %, hit rate 70 % then 10 % → prefix_cache_eviction, the split by load from PromQL.
"""

from __future__ import annotations

import time

import pytest

from promserver import PROMETHEUS, PROMTOOL, PrometheusServer, backfill, vllm_history

STEPS, STEP = 120, 15.0
FLEET = {
    "pressure": {"usage": [0.97, 0.99, 0.98], "waiting": 5, "preempt_per_step": 2, "queue_s": 20,
                 "hit_rate": [(0.0, 0.6), (0.5, 0.1)]},
    "healthy-high": {"usage": [0.96, 0.97], "waiting": 0, "preempt_start": 120, "hit_rate": [(0.0, 0.6)]},
    "restart-pressure": {"usage": [0.99], "waiting": 0, "preempt_start": 5000, "preempt_per_step": 1,
                         "restart_at": 60, "preempt_after_restart": 3},
    "restart-quiet": {"usage": [0.96], "waiting": 0, "preempt_start": 5000, "restart_at": 60,
                      "preempt_after_restart": 0},
    "prefix-evict": {"usage": [0.30], "waiting": 0, "running": 8, "hit_rate": [(0.0, 0.8), (0.5, 0.05)],
                     "evict_idle_s": 3.0},
    "split-usage": {"usage": [0.65], "waiting": 0, "running": 8, "api_server_pids": 4},
    "busy-misses": {"usage": [0.3] * 60 + [0.9] * 60, "waiting": 0, "running": 8,
                    "hit_rate": [(0.0, 0.7), (0.5, 0.1)]},
}
EXPECTED = {"pressure": "capacity_pressure", "healthy-high": "healthy", "restart-pressure": "capacity_pressure",
            "restart-quiet": "healthy", "prefix-evict": "prefix_cache_eviction", "split-usage": "healthy",
            "busy-misses": "prefix_cache_eviction"}


@pytest.fixture(scope="module")
def prom(tmp_path_factory):
    assert PROMETHEUS and PROMTOOL, "needs Debian's prometheus package (apt-get install prometheus; see .ci/run)"
    tmp = tmp_path_factory.mktemp("prom")
    start = (time.time() - STEPS * STEP - 120) // 60 * 60
    colon = vllm_history({f"{k}:8000": v for k, v in FLEET.items()}, start, STEPS, STEP, "vllm:", "colon")
    under = vllm_history({f"{k}:9000": v for k, v in FLEET.items()}, start, STEPS, STEP, "vllm_", "underscore")
    om = tmp / "history.om"
    om.write_text(colon.removesuffix("# EOF\n") + under)
    backfill(om, tmp / "data")
    with PrometheusServer(tmp / "data") as server:
        server.start, server.end = start, start + (STEPS - 1) * STEP
        yield server


def _fleet(kvdiag, prom, job, *extra):
    return kvdiag("analyze", "--prometheus-url", prom.url, "--selector", f'{{job="{job}"}}',
                  "--since", str(prom.start), "--until", str(prom.end), *extra)


@pytest.mark.parametrize("job, port", [("colon", 8000), ("underscore", 9000)])
def test_fleet_each_instance_classified(kvdiag, prom, job, port):
    res = _fleet(kvdiag, prom, job, "--format", "json")
    report = res.json()
    got = {i["instance"]: i for i in report["instances"]}
    assert sorted(got) == sorted(f"{k}:{port}" for k in FLEET)
    for name, cls in EXPECTED.items():
        inst = got[f"{name}:{port}"]
        assert inst["verdict"]["primary"] == cls, (name, inst["verdict"])
        cap = next(f for f in inst["findings"] if f["class"] == "capacity_pressure")
        ev = {(e["signal"], e["agg"]): e for e in cap["evidence"]}
        pre = ev[("num_preemptions", "increase")]
        assert pre["source"].startswith("promql:sum by (instance) (increase(num_preemptions_total[")
        if name == "pressure":
            assert pre["value"] == pytest.approx(2 * (STEPS - 1), rel=0.05)
        if name == "restart-pressure":   # 59 before the restart + 3 × 59 after, never last − first
            assert pre["value"] == pytest.approx(59 + 3 * 59, rel=0.05)
        if name in ("healthy-high", "restart-quiet"):
            assert pre["value"] == 0
        notes = {f["rule_id"] for f in inst["findings"] if f["status"] == "fires" and f["severity"] == "ok"}
        assert ("OK004" in notes) == (name == "split-usage"), (name, notes)
        status = {f["rule_id"]: f["status"] for f in inst["findings"]}
        assert (status["PFX002"] == "fires") == (name == "busy-misses"), (name, status["PFX002"])
        assert (status["PFX003"] == "fires") == (name == "prefix-evict"), (name, status["PFX003"])
        restarted = [n for n in inst["notes"] if "num_preemptions fell 1 time(s)" in n]
        assert bool(restarted) == name.startswith("restart-"), inst["notes"]
    # the top-level verdict is the worst server's; instances worst first
    assert report["verdict"]["primary"] == "capacity_pressure" and res.code == 2
    sev = [i["verdict"]["severity"] for i in report["instances"]]
    assert sev == sorted(sev, key=lambda s: {"critical": 0, "warning": 1, "ok": 2}[s])
    assert report["findings"] == report["instances"][0]["findings"]


def test_fleet_window_signals_come_from_promql(prom):
    from kvdiag.collect.prometheus import collect_fleet

    notes = []
    got = dict(collect_fleet(prom.url, '{job="colon"}', prom.start, prom.end, STEP, notes=notes))
    p = got["pressure:8000"]
    # queue time: every request waits 20 s → bucket (5, 30]; the mean is exact
    assert p.signal("request_queue_time_mean")["value"].iloc[0] == pytest.approx(20.0)
    assert 5.0 < p.signal("request_queue_time_p95")["value"].iloc[0] <= 30.0
    # hit rate 60 % in the first half, 10 % in the second: windowed, not cumulative
    assert p.signal("prefix_cache_hit_rate_early")["value"].iloc[0] == pytest.approx(0.6, abs=0.02)
    assert p.signal("prefix_cache_hit_rate_late")["value"].iloc[0] == pytest.approx(0.1, abs=0.02)
    assert p.signal("prefix_cache_hit_rate_window")["value"].iloc[0] == pytest.approx(0.35, abs=0.03)
    # restarts are seen; cache_config_info labels become facts
    assert got["restart-quiet:8000"].signal("counter_resets")["value"].tolist() == [1.0]
    assert not got["pressure:8000"].has("counter_resets")
    assert p.signal("num_gpu_blocks")["value"].iloc[-1] == 27776
    assert len(p.signal("kv_cache_usage")) == STEPS   # the gauge at every step
    # time at or above 95 % usage, computed by PromQL: always for pressure, never below for healthy-high
    assert p.signal("kv_cache_usage_high_ratio")["value"].iloc[0] == pytest.approx(1.0)
    assert p.signal("kv_cache_usage_high_seconds")["value"].iloc[0] == pytest.approx(prom.end - prom.start, rel=0.01)
    assert "PromQL queries" in notes[0]
    # sampled evictions (--kv-cache-metrics): the count's increase and the idle median, both from PromQL
    e = got["prefix-evict:8000"]
    assert e.signal("kv_block_idle_before_evict_count")["value"].iloc[-1] == pytest.approx(4 * (STEPS - 1), rel=0.05)
    assert 2.0 < e.signal("kv_block_idle_before_evict_p50")["value"].iloc[0] <= 5.0   # the (2, 5] bucket holds 3 s
    assert e.signal("kv_block_idle_before_evict_p50")["source"].iloc[0].startswith(
        "promql:histogram_quantile(0.5, kv_block_idle_before_evict_seconds_bucket[")
    assert not p.has("kv_block_idle_before_evict_count")             # no --kv-cache-metrics there
    # the usage gauge split over 4 API-server pids: counted and averaged by PromQL, the max is the usage
    s = got["split-usage:8000"]
    assert s.signal("kv_cache_usage_series")["value"].tolist() == [4.0]
    assert s.signal("kv_cache_usage_split_mean")["value"].tolist() == [pytest.approx(0.65 / 4)]
    assert set(s.signal("kv_cache_usage")["value"]) == {0.65}
    assert p.signal("kv_cache_usage_series")["value"].tolist() == [1.0]
    # the hit rate split by KV usage, by PromQL: 70 % while usage was 30 %, 10 % while it was 90 %
    m = got["busy-misses:8000"]
    assert m.signal("prefix_cache_hit_rate_low_load")["value"].iloc[0] == pytest.approx(0.7, abs=0.03)
    assert m.signal("prefix_cache_hit_rate_high_load")["value"].iloc[0] == pytest.approx(0.1, abs=0.03)
    assert "where kv_cache_usage < 50%" in m.signal("prefix_cache_hit_rate_low_load")["source"].iloc[0]
    assert not p.has("prefix_cache_hit_rate_low_load")               # pressure: always busy, no low-load side


def test_fleet_text_report_ranks_servers_and_has_a_section_each(kvdiag, prom):
    res = _fleet(kvdiag, prom, "colon")
    lines = res.out.splitlines()
    assert lines[0].startswith("CRITICAL: capacity_pressure")
    assert "4 of 7 server(s) with a problem" in lines[1]
    ranking = lines[2:9]
    assert [r.split()[0] for r in ranking] == ["CRITICAL", "CRITICAL", "WARNING", "WARNING", "OK", "OK", "OK"]
    assert sorted(tuple(r.split()[1:]) for r in ranking[2:4]) == [("busy-misses:8000", "prefix_cache_eviction"),
                                                                   ("prefix-evict:8000", "prefix_cache_eviction")]
    for name in FLEET:
        assert any(line.startswith(f"=== {name}:8000 ") for line in lines)


def test_since_as_duration_before_until_in_rfc3339(kvdiag, prom):
    from kvdiag.bundle import iso

    res = kvdiag("analyze", "--prometheus-url", prom.url, "--selector", '{job="colon",instance="pressure:8000"}',
                 "--since", "20m", "--until", iso(prom.end), "--format", "json")
    report = res.json()
    assert [i["instance"] for i in report["instances"]] == ["pressure:8000"]
    assert report["verdict"]["primary"] == "capacity_pressure"


@pytest.mark.parametrize("selector, needle", [
    ('{job=~"("}', "query failed (bad_data"),
    ('{job="nobody"}', "no vLLM series"),
    ('job="x"', "expected label matchers in braces"),
])
def test_prometheus_errors_are_one_line(kvdiag, prom, selector, needle):
    res = kvdiag("analyze", "--prometheus-url", prom.url, "--selector", selector, "--since", str(prom.start),
                 "--until", str(prom.end))
    assert res.code == 3 and "Traceback" not in res.err
    lines = [line for line in res.err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("kvdiag: error: ") and needle in lines[0], lines


def test_prometheus_url_that_is_not_prometheus(kvdiag, static_server):
    url = static_server(b"<html>login</html>", ctype="text/html")
    res = kvdiag("analyze", "--prometheus-url", url.removesuffix("/metrics"), "--since", "1h")
    assert res.code == 3 and "not a Prometheus API answer" in res.err and len(res.err.strip().splitlines()) == 1


def test_parse_window():
    from kvdiag.collect.prometheus import parse_window
    from kvdiag.errors import InputError

    assert parse_window("6h", "1700000000") == (1700000000 - 6 * 3600, 1700000000)
    assert parse_window("2023-11-14T20:00:00Z", "2023-11-14T22:13:20+00:00") == (1699992000.0, 1700000000.0)
    assert parse_window("1h", None, now=5000.0) == (1400.0, 5000.0)
    with pytest.raises(InputError, match="run forward"):
        parse_window("1700000001", "1700000000")
    with pytest.raises(InputError, match="not a time"):
        parse_window("yesterday", None)


def test_batches_of_instances_give_the_same_numbers(prom):
    """The fleet is queried a batch of instances at a time (instance=~"a|b"); batch size changes nothing."""
    from kvdiag.collect.prometheus import collect_fleet

    def numbers(batch):
        out = {}
        for inst, b in collect_fleet(prom.url, '{job="underscore"}', prom.start, prom.end, STEP, batch=batch):
            out[inst] = (b.signal("num_preemptions")["value"].tolist(), b.signal("kv_cache_usage")["value"].max(),
                         len(b.signal("kv_cache_usage")))
        return out

    one, all_ = numbers(1), numbers(50)
    assert sorted(one) == sorted(f"{k}:9000" for k in FLEET)
    assert one == all_
