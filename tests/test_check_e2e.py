"""End to end: a check pushes to a real Pushgateway, a real Prometheus scrapes it, the verdict is queried back."""

from __future__ import annotations

from conftest import FIXTURES
from services import prometheus, pushgateway, wait_for


def test_check_pushes_and_prometheus_scrapes_the_verdict(kvdiag, tmp_path):
    log = str(next((FIXTURES / "incidents").glob("029-*")) / "vllm.log")
    with pushgateway(tmp_path) as gw:
        res = kvdiag("check", "--log", log, "--pushgateway", gw, "--job", "kvdiag-test", "--instance", "vllm-a")
        assert res.code == 2, res.out + res.err
        assert "push" not in res.out  # no push failure note
        target = gw.removeprefix("http://")
        with prometheus(tmp_path, [target]) as prom:
            verdict = wait_for(prom, 'kvdiag_verdict{job="kvdiag-test"}')
            assert verdict[0]["metric"]["vllm_instance"] == "vllm-a"
            assert verdict[0]["metric"]["class"] == "capacity_pressure"
            assert verdict[0]["metric"]["severity"] == "critical"
            firing = wait_for(prom, 'kvdiag_finding{job="kvdiag-test",status="fires",severity!="ok"} == 1')
            assert {r["metric"]["rule_id"] for r in firing} == {"CAP001"}
            ok = wait_for(prom, 'kvdiag_check_success{vllm_instance="vllm-a"}')
            assert ok[0]["value"][1] == "1"


def test_push_failure_is_a_note_not_a_crash(kvdiag):
    log = str(next((FIXTURES / "incidents").glob("029-*")) / "vllm.log")
    res = kvdiag("check", "--log", log, "--pushgateway", "http://127.0.0.1:9", "--instance", "x")
    assert res.code == 2
    assert "push to http://127.0.0.1:9 failed" in res.out
    assert "Traceback" not in res.err
