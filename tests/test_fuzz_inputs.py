"""Hypothesis fuzz suite over every input family and every CLI entry point (issue 19).

Bounded and seeded: the ``kvdiag-fuzz`` profile derandomizes (the same examples every run, no example database),
so the file runs in well under a minute and a failure reproduces. Inputs are mutated real ones
(:mod:`fuzzgen`): odd numbers (``1.2.3``, ``.``, 5,000 digits, 1e20 timestamps, ``le="1.2.3"``), junk characters,
aliases repeating aliases, wrong-typed config fields, secrets in URLs. Every input must end in a report or one
clean ``KvdiagError`` — never another exception, never "internal error", never a planted secret.
The long campaign over the same generators is ``benchmarks/fuzz_campaign.py``."""

from __future__ import annotations

import contextlib
import io
import os
import random

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import fuzzgen
from conftest import FIXTURES, run_kvdiag
from kvdiag.cli import main

settings.register_profile("kvdiag-fuzz", derandomize=True, database=None, deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
FUZZ = settings.get_profile("kvdiag-fuzz")
RNG = st.randoms(use_true_random=False)
EXAMPLES = {"log": 15, "page": 30, "recording": 30, "config": 60, "rule": 25, "state": 60, "url": 300}


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz")


def _family_test(family: str):
    gen, run = fuzzgen.FAMILIES[family]

    @settings(FUZZ, max_examples=EXAMPLES[family])
    @given(rng=RNG)
    def test(rng: random.Random, scratch):
        assert run(gen(rng), scratch) in ("ok", "refused")

    test.__name__ = f"test_{family}_inputs_end_in_a_report_or_a_clean_refusal"
    return test


test_log = _family_test("log")
test_page = _family_test("page")
test_recording = _family_test("recording")
test_config = _family_test("config")
test_rule = _family_test("rule")
test_state = _family_test("state")
test_url = _family_test("url")


@settings(FUZZ, max_examples=40)
@given(data=st.binary(max_size=2000), family=st.sampled_from(["log", "page", "config", "rule", "state"]))
def test_arbitrary_bytes_in_any_family(data, family, scratch):
    assert fuzzgen.FAMILIES[family][1](data, scratch, judge=False) in ("ok", "refused")


def _cli(args: list[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(args)
    return rc, out.getvalue() + err.getvalue()


CLI_FAMILIES = {
    "analyze-log": ("log", lambda p, d: ["analyze", "--log", p, "--format", "json"]),
    "analyze-metrics": ("page", lambda p, d: ["analyze", "--metrics-file", p, "--format", "markdown"]),
    "analyze-recording": ("recording", lambda p, d: ["analyze", "--metrics-file", p]),
    "analyze-config": ("config", lambda p, d: ["analyze", "--model-config", p, "--metrics-file",
                                               str(FIXTURES / "metrics" / "vllm033_quiet_0030.prom")]),
    "estimate": ("config", lambda p, d: ["estimate", "--model-config", p, "--gpu-memory", "80"]),
    "check-state": ("state", lambda p, d: ["check", "--metrics-file",
                                           str(FIXTURES / "metrics" / "vllm033_pressure_0054.prom"), "--state", p]),
    "check-log": ("log", lambda p, d: ["check", "--log", p]),
    "rules-list": ("rule", lambda p, d: ["rules", "list", "--rules", d]),
    "rules-explain": ("rule", lambda p, d: ["rules", "explain", "CAP001", "--rules", d]),
    "rules-export": ("rule", lambda p, d: ["rules", "export", "--rules", d]),
    "rules-test": ("rule", lambda p, d: ["rules", "test", "--rules", d]),
    "record": ("url", lambda p, d: ["record", "--metrics-url", open(p).read(), "--out", os.path.join(d, "r.prom"),
                                    "--duration", "0.2s", "--interval", "0.1s", "--timeout", "0.5s"]),
}


@settings(FUZZ, max_examples=24)
@given(rng=RNG, entry=st.sampled_from(sorted(CLI_FAMILIES)))
def test_every_cli_entry_point_gives_a_verdict_or_one_error_line(rng, entry, tmp_path_factory):
    family, argv = CLI_FAMILIES[entry]
    folder = tmp_path_factory.mktemp("cli")
    name = {"rule": "R.yaml", "state": "state.json", "config": "config.json", "url": "url.txt"}.get(family, "in.prom")
    if family == "log":
        name = "vllm.log"
    path = folder / name
    path.write_bytes(fuzzgen.FAMILIES[family][0](rng))
    if family == "url":
        path.write_text(path.read_text().replace("h/", "127.0.0.1:9/").replace("host.example:443", "127.0.0.1:9"))
    rc, text = _cli(argv(str(path), str(folder)))
    assert rc in (0, 1, 2, 3), (rc, text[-2000:])
    assert "internal error" not in text and "Traceback" not in text, text[-2000:]
    assert fuzzgen.SECRET not in text, text[-2000:]


@pytest.mark.parametrize("family,argv", [
    ("log", ["analyze", "--log", "{p}"]),
    ("page", ["check", "--metrics-file", "{p}"]),
    ("config", ["estimate", "--model-config", "{p}", "--gpu-memory", "80"]),
    ("rule", ["rules", "list", "--rules", "{d}"]),
])
def test_real_subprocess_on_fuzzed_inputs(family, argv, tmp_path):
    rng = random.Random(19)
    for k in range(1):
        path = tmp_path / ("R.yaml" if family == "rule" else f"in{k}.txt")
        path.write_bytes(fuzzgen.FAMILIES[family][0](rng))
        res = run_kvdiag(*[a.format(p=path, d=tmp_path) for a in argv], timeout=60)
        assert res.code in (0, 1, 2, 3), res.err[-1000:]
        assert "internal error" not in res.err and "Traceback" not in res.err, res.err[-1000:]
