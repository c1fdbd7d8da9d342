"""``kvdiag check`` as a pager would read it (issue 39 item 8): a run that judged nothing is UNKNOWN (exit 3, the
README's table), never "OK … 0 rule(s) judged quiet"; the perfdata thresholds of kv_cache_usage are fixed and
distinct (warning below critical, the same on every run and input), so a graph's threshold lines do not move.

Inputs: fixtures/metrics/v011_usage_split_across_api_servers.prom (a real 0.11 page: only OK004's note can be
judged), incident 029's log (capacity pressure), fixtures/metrics/vllm033_quiet_0030.prom (a quiet lab server).
In-process (click's CliRunner)."""

from __future__ import annotations

from click.testing import CliRunner

from conftest import FIXTURES

from kvdiag.cli import cli

SPLIT = FIXTURES / "metrics" / "v011_usage_split_across_api_servers.prom"
QUIET = FIXTURES / "metrics" / "vllm033_quiet_0030.prom"
LOG_029 = next((FIXTURES / "incidents").glob("029-*")) / "vllm.log"


def _check(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(cli, ["check", *args])
    return res.exit_code, res.output.splitlines()[0]


def _thresholds(line: str) -> tuple[str, str]:
    perf = dict(p.split("=", 1) for p in line.split(" | ", 1)[1].split())
    value, warn, crit, *_ = perf["kv_cache_usage"].split(";")
    return warn, crit


def test_nothing_judged_is_unknown_exit_3():
    code, line = _check("--metrics-file", str(SPLIT))
    assert code == 3, line
    assert line.startswith("KVDIAG UNKNOWN - "), line
    assert "0 rule(s) judged quiet" not in line, line


def test_perfdata_thresholds_are_fixed_and_distinct():
    seen = set()
    for args in (["--log", str(LOG_029)], ["--metrics-file", str(QUIET)], ["--metrics-file", str(SPLIT)]):
        for _run in range(2):
            _code, line = _check(*args)
            warn, crit = _thresholds(line)
            assert warn and crit and float(warn) < float(crit), line
            seen.add((warn, crit))
    assert len(seen) == 1, seen
