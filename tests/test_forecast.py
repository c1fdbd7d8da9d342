"""Issue 13, forecast: the KV usage trend (least squares with its standard error), rule CAP002 (a warning before the
pool is full), ``analyze`` / ``check`` through the real CLI on twin-lab recordings, and the exported
``predict_linear`` alert under real promtool."""

from __future__ import annotations

import json
import math
import re
import subprocess

import jsonschema
import pytest
import yaml

from conftest import FIXTURES, ROOT
from kvdiag.bundle import Bundle
from kvdiag.derive import derive_all
from kvdiag.derive.trend import eta_to_full, linear_trend
from kvdiag.engine.cases import load_cases
from kvdiag.engine.evaluate import evaluate_rule
from kvdiag.engine.model import load_rule, load_rules
from kvdiag.export import exportable_alerts, promtool_tests
from services import PROMTOOL

SERIES = FIXTURES / "series" / "forecast"
RAMP = str(SERIES / "dev_ramp_7_first_120s.om")
STEADY = str(SERIES / "dev_steady_1.om")
SCHEMA = json.loads((ROOT / "kvdiag" / "report" / "report.schema.json").read_text())
CASES = ROOT / "rules" / "capacity_pressure" / "cases" / "CAP002.yaml"


def test_linear_trend_hand_computed():
    # t = 0, 15, 30, 45 s; y = .50 .60 .65 .75: Sxx = 1125, Sxy = 6.0 → slope 6 / 1125 = 0.0053333 /s;
    # residuals -.005 .015 -.015 .005 → SSR 5e-4, stderr sqrt(5e-4 / 2 / 1125) = 4.714e-4; line at 45 s = 0.745
    fit = linear_trend([0, 15, 30, 45], [0.50, 0.60, 0.65, 0.75])
    assert fit["slope"] == pytest.approx(6 / 1125)
    assert fit["stderr"] == pytest.approx(math.sqrt(5e-4 / 2 / 1125))
    assert fit["level"] == pytest.approx(0.745)
    assert (fit["n"], fit["span"]) == (4, 45)
    assert eta_to_full(fit["level"], fit["slope"]) == pytest.approx(0.255 / (6 / 1125))
    assert linear_trend([0, 15], [0.5, 0.6])["stderr"] != linear_trend([0, 15], [0.5, 0.6])["stderr"]  # NaN: n = 2
    assert linear_trend([5, 5, 5], [0.1, 0.2, 0.3]) is None                                             # one instant


def test_eta_edges():
    assert eta_to_full(1.0, 0.01) == 0.0          # already full
    assert eta_to_full(0.9, 0.0) == math.inf      # flat never fills
    assert eta_to_full(0.9, -0.001) == math.inf   # falling never fills
    assert eta_to_full(0.4, 0.001) == pytest.approx(600)


def _usage_bundle(values, t0=1.8e9, step=15.0, reset_at=None):
    b = Bundle()
    for i, v in enumerate(values):
        b.add("kv_cache_usage", v, f"test@{i}", t=t0 + i * step)
        b.add("num_preemptions", 0 if reset_at is not None and i >= reset_at else 5, f"test@{i}", t=t0 + i * step)
    derive_all(b)
    return b


def _last(b, name):
    rows = b.signal(name)
    return float(rows["value"].iloc[-1]) if len(rows) else None


def test_trend_is_cut_at_a_restart():
    """Usage before a counter reset belongs to the old process: the fit starts at the restart."""
    values = [0.2 + 0.05 * i for i in range(10)] + [0.05, 0.06, 0.05, 0.06, 0.05]
    whole = _usage_bundle(values)
    cut = _usage_bundle(values, reset_at=10)
    assert _last(whole, "kv_cache_usage_trend_samples") == 15
    assert _last(cut, "kv_cache_usage_trend_samples") == 5
    assert abs(_last(cut, "kv_cache_usage_slope")) < 1e-4 < abs(_last(whole, "kv_cache_usage_slope"))


def test_trend_uses_only_the_last_five_minutes():
    b = _usage_bundle([0.1] * 20 + [0.1 + 0.02 * i for i in range(21)])   # 10 min: flat, then 5 min rising
    assert _last(b, "kv_cache_usage_trend_samples") == 21
    assert _last(b, "kv_cache_usage_slope") == pytest.approx(0.02 / 15)


def _loose_cap002(tmp_path):
    """CAP002 from its shipped file with min_t 2 instead of 4 (loaded by the real loader from a copy)."""
    src = (ROOT / "rules" / "capacity_pressure" / "CAP002-pool-filling.yaml").read_text()
    assert "min_t: 4," in src
    folder = tmp_path / "loose"
    folder.mkdir()
    (folder / "CAP002-pool-filling.yaml").write_text(src.replace("min_t: 4,", "min_t: 2,"))
    return load_rule(folder / "CAP002-pool-filling.yaml")


def test_the_t_condition_alone_keeps_the_noisy_rise_quiet(tmp_path):
    """The noisy-rise case passes every other condition: with min_t 2 instead of 4 it fires."""
    rule = next(r for r in load_rules() if r.id == "CAP002")
    case = next(c for c in load_cases(CASES) if c.name == "quiet_on_a_noisy_rise")

    def run(r):
        b = case.bundle()
        derive_all(b)
        return evaluate_rule(r, b).status

    assert run(rule) == "quiet"
    assert run(_loose_cap002(tmp_path)) == "fires"


def test_analyze_says_forecast_on_a_rising_ramp(kvdiag):
    res = kvdiag("analyze", "--metrics-file", RAMP, "--format", "json")
    report = res.json()
    jsonschema.validate(report, SCHEMA)
    v = report["verdict"]
    assert (v["primary"], v["severity"], v.get("forecast")) == ("capacity_pressure", "warning", True)
    assert res.code == 1
    cap2 = next(f for f in report["findings"] if f["rule_id"] == "CAP002")
    assert cap2["status"] == "fires" and cap2["forecast"] is True
    m = re.search(r"full in ~([\d.]+) min at \+([\d.]+)%/min \(([\d.]+)-([\d.]+) min", v["summary"])
    assert m, v["summary"]
    eta = next(e["value"] for e in cap2["evidence"] if e["signal"] == "kv_full_eta_seconds")
    assert float(m.group(1)) == pytest.approx(eta / 60, abs=0.05)
    assert float(m.group(3)) <= float(m.group(1)) <= float(m.group(4))
    assert v["summary"].startswith("Forecast:") and "Nothing preempted yet" in v["summary"]
    cap1 = next(f for f in report["findings"] if f["rule_id"] == "CAP001")
    assert cap1["status"] == "quiet"
    text = kvdiag("analyze", "--metrics-file", RAMP).out
    assert text.startswith("WARNING: capacity_pressure (confidence medium, a forecast: not yet happened)")


def test_check_shows_the_forecast_with_minutes_and_perfdata(kvdiag):
    res = kvdiag("check", "--metrics-file", RAMP)
    line = res.out.splitlines()[0]
    assert res.code == 1
    status, perf = line.split(" | ", 1)
    assert status.startswith("KVDIAG WARNING - capacity_pressure: Forecast:") and len(status) <= 200
    minutes = float(re.search(r"full in ~([\d.]+) min", status).group(1))
    eta = int(re.search(r"\bkv_full_eta_seconds=(\d+)s;@0:1800;;0\b", perf).group(1))
    assert minutes == pytest.approx(eta / 60, abs=0.05)
    assert 60 < eta < 1800


def test_steady_high_usage_gets_no_forecast(kvdiag):
    report = kvdiag("analyze", "--metrics-file", STEADY, "--format", "json").json()
    jsonschema.validate(report, SCHEMA)
    cap2 = next(f for f in report["findings"] if f["rule_id"] == "CAP002")
    assert cap2["status"] == "quiet" and "forecast" not in cap2
    assert report["verdict"]["primary"] != "capacity_pressure" and "forecast" not in report["verdict"]
    assert re.search(r"No full pool forecast: KV usage moves [-+][\d.]+%/min", cap2["message"])
    usage = next(e["value"] for e in cap2["evidence"] if e["signal"] == "kv_cache_usage_trend_level")
    assert usage > 0.7                                         # high usage, and still no warning


def test_a_page_without_timestamps_leaves_the_forecast_unknown(kvdiag):
    report = kvdiag("analyze", "--metrics-file", str(FIXTURES / "metrics" / "vllm033_quiet_0030.prom"),
                    "--format", "json").json()
    cap2 = next(f for f in report["findings"] if f["rule_id"] == "CAP002")
    assert cap2["status"] == "unknown"
    assert "kv_cache_usage_slope" in cap2["reason"]


def test_exported_alert_uses_predict_linear_on_both_names():
    alerts, skipped = exportable_alerts(load_rules())
    cap2 = next(a for a in alerts if a["labels"]["kvdiag_rule"] == "CAP002")
    assert cap2["labels"]["severity"] == "warning"
    for name in ("vllm:kv_cache_usage_perc", "vllm_kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"):
        assert f"predict_linear({name}[300s], 1800) >= 1" in cap2["expr"]
    assert "unless on (job, instance, model_name, engine)" in cap2["expr"]
    assert "increase(vllm:num_preemptions_total[5m])" in cap2["expr"]
    assert not any(s.startswith("CAP002") for s in skipped)


def test_promtool_runs_the_cap002_cases_and_the_t_condition_decides(tmp_path):
    rules = load_rules()
    cases = load_cases(CASES)

    def run(rule_list):
        alerts, _ = exportable_alerts(rule_list, for_="0m")  # the tests check the expression at the last sample
        (tmp_path / "r.yml").write_text(yaml.safe_dump({"groups": [{"name": "kvdiag", "rules": alerts}]}))
        text, _ = promtool_tests(rule_list, cases, "r.yml")
        (tmp_path / "t.yml").write_text(text)
        out = subprocess.run([PROMTOOL, "test", "rules", "t.yml"], capture_output=True, text=True, cwd=tmp_path,
                             timeout=300)
        return out.returncode, out.stdout + out.stderr, yaml.safe_load(text)

    code, out, tests = run(rules)
    names = [t["name"] for t in tests["tests"]]
    assert sum(n.startswith("CAP002 fires") for n in names) == 4 and sum(n.startswith("CAP002 quiet") for n in names) >= 14
    assert code == 0, out
    loose = [_loose_cap002(tmp_path) if r.id == "CAP002" else r for r in rules]
    code, out, _ = run(loose)
    assert code != 0 and "quiet_on_a_noisy_rise" in out          # only the t condition kept it quiet in PromQL too


class _RisingPool:
    """A real prometheus-client /metrics endpoint on 127.0.0.1 whose every scrape is the next instant of a server
    whose KV usage climbs +1.5 points per 15 s (each sample carries its own timestamp, 15 s after the last one, so a
    check of a couple of seconds sees minutes of simulated time), nothing waiting or preempted."""

    def __init__(self, start=0.40, step=0.015, t0=1.8e9):
        from wsgiref.simple_server import WSGIRequestHandler, make_server
        import threading

        from prometheus_client import CollectorRegistry, make_wsgi_app
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        self.scrapes = 0
        me = self
        lab = ["engine", "model_name"]

        class Pool:
            def collect(self):
                i = me.scrapes
                me.scrapes += 1
                ts = t0 + 15.0 * i
                for name, value in (("vllm:kv_cache_usage_perc", min(1.0, start + step * i)),
                                    ("vllm:num_requests_waiting", 0.0), ("vllm:num_requests_running", 10.0 + i)):
                    fam = GaugeMetricFamily(name, name, labels=lab)
                    fam.add_metric(["0", "m"], value, timestamp=ts)
                    yield fam
                fam = CounterMetricFamily("vllm:num_preemptions", "preemptions", labels=lab)
                fam.add_metric(["0", "m"], 0.0, timestamp=ts)
                yield fam

        reg = CollectorRegistry()
        reg.register(Pool())

        class Q(WSGIRequestHandler):
            def log_message(self, *a):
                pass

        self.srv = make_server("127.0.0.1", 0, make_wsgi_app(reg), handler_class=Q)
        self.url = f"http://127.0.0.1:{self.srv.server_port}/metrics"
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()


@pytest.fixture
def rising_pool():
    e = _RisingPool()
    yield e
    e.close()


def test_check_live_endpoint_warns_with_the_minutes_left(kvdiag, rising_pool):
    res = kvdiag("check", "--metrics-url", rising_pool.url, "--duration", "3s", "--interval", "0.2s")
    line = res.out.splitlines()[0]
    n = rising_pool.scrapes
    assert n >= 9, res.out                              # 8 samples over 2 minutes (simulated) are the minimum
    assert res.code == 1 and line.startswith("KVDIAG WARNING - capacity_pressure: Forecast:"), res.out
    # +1.5 points per 15 s = +6.0 %/min; the last sample is 0.40 + 0.015 (n - 1): full in (1 - that) / 0.001 s
    # (the endpoint may have answered one more scrape than kvdiag kept: accept n - 1 or n samples)
    eta = int(re.search(r"\bkv_full_eta_seconds=(\d+)s", line).group(1))
    assert "+6.0%/min" in line
    assert eta in {round((1 - 0.40 - 0.015 * (k - 1)) / 0.001) for k in (n - 1, n)}, (eta, n)
    minutes = float(re.search(r"full in ~([\d.]+) min", line).group(1))
    assert minutes == pytest.approx(eta / 60, abs=0.05)


def test_forecast_key_must_be_a_boolean(tmp_path):
    from kvdiag.errors import RuleFileError

    src = (ROOT / "rules" / "capacity_pressure" / "CAP002-pool-filling.yaml").read_text()
    bad = tmp_path / "CAP002-pool-filling.yaml"
    bad.write_text(src.replace("forecast: true", "forecast: 'yes'"))
    with pytest.raises(RuleFileError, match=r"forecast must be true or false"):
        load_rule(bad)
