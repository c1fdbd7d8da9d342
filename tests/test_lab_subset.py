"""The checked-in twin-lab subset (fixtures/lab/*): kvdiag's verdict on each recording is the labeller's class.

Each case folder holds ``recording.om`` (its /metrics pages as one OpenMetrics recording; or ``recording.om.gz``,
decompressed into a temporary file first, since ``--metrics-file`` reads plain text only), ``truth.json`` (what the
twin lab measured inside vLLM 0.33's block pool) and, when exported, ``v0/recording.om`` (the same case under
V0-era names). The true class is ``label(truth)`` from ``benchmarks/lab/labeller.py`` — the same labeller the
accuracy sweep (``benchmarks/lab/sweep.py``) uses, so this test fails on a real miss. The real CLI runs on each
recording: ``kvdiag analyze --metrics-file recording.om --format json``. See fixtures/lab/README.md.
"""

from __future__ import annotations

import gzip
import importlib.util
import json

import pytest

from conftest import FIXTURES, ROOT

LAB = FIXTURES / "lab"
EXIT_BY_SEVERITY = {"ok": 0, "warning": 1, "critical": 2}


def _labeller():
    spec = importlib.util.spec_from_file_location("lab_labeller", ROOT / "benchmarks" / "lab" / "labeller.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.label


def _recordings():
    out = []
    for truth in sorted(LAB.glob("*/truth.json")):
        case = truth.parent
        for names, folder in (("v1", case), ("v0", case / "v0")):
            rec = next((p for p in (folder / "recording.om", folder / "recording.om.gz") if p.exists()), None)
            if rec is not None:
                out.append(pytest.param(case, rec, id=f"{case.name}-{names}"))
    return out


RECORDINGS = _recordings()


def test_subset_is_there():
    """The subset exists and every case has its recording, log, truth and provenance."""
    cases = sorted(p.parent for p in LAB.glob("*/truth.json"))
    assert cases, f"no cases in {LAB}"
    for case in cases:
        for name in ("vllm.log", "README.md"):
            assert (case / name).is_file(), f"{case.name}: {name} missing"
        assert (case / "recording.om").is_file() or (case / "recording.om.gz").is_file(), case.name
    assert len(RECORDINGS) >= len(cases)


@pytest.mark.parametrize("case,recording", RECORDINGS)
def test_verdict_is_the_labellers_class(case, recording, kvdiag, tmp_path):
    truth = json.loads((case / "truth.json").read_text())
    expected, reason = _labeller()(truth)
    if recording.suffix == ".gz":
        plain = tmp_path / "recording.om"
        plain.write_bytes(gzip.decompress(recording.read_bytes()))
        recording = plain
    res = kvdiag("analyze", "--metrics-file", str(recording), "--format", "json")
    assert "Traceback" not in res.err
    report = res.json()
    got = report["verdict"]["primary"]
    assert got == expected, (f"{case.name}: kvdiag says {got} ({report['verdict']['confidence']}: "
                             f"{report['verdict']['summary']}); the labeller says {expected}: {reason}")
    assert res.code == (3 if got == "inconclusive" else EXIT_BY_SEVERITY[report["verdict"]["severity"]])
