"""tools/score_incidents.py: verdicts against expected.yaml, per-class figures, held-out cases refused."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import corpus_split  # noqa: E402
import score_incidents  # noqa: E402

LOG_E1 = "ERROR 05-06 12:00:01 [core.py:1] ValueError: No available memory for the cache blocks. Try increasing " \
         "`gpu_memory_utilization` when initializing the engine.\n"


def _case(root: Path, name: str, source: str, primary: str, accept=()) -> Path:
    d = root / name
    d.mkdir(parents=True)
    (d / "vllm.log").write_text(LOG_E1)
    (d / "expected.yaml").write_text(f"primary: {primary}\naccept: {list(accept)}\nsource: {source}\n")
    return d


def _sources(want: str, n: int) -> list[str]:
    """Thread URLs the split puts on side ``want`` (found by the split's own rule, not a copy of it)."""
    out, i = [], 0
    while len(out) < n:
        url = f"https://github.com/example/repo/issues/{i}"
        h = __import__("hashlib").sha256((corpus_split.SEED + corpus_split.thread_key(url)).encode()).digest()
        if (int.from_bytes(h[:8], "big") < corpus_split.HELD_OUT_SHARE * 2 ** 64) == (want == "held-out"):
            out.append(url)
        i += 1
    return out


def _run(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "tools" / "score_incidents.py"), *map(str, args)],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)


def test_expected_accepts_primary_accept_and_not_oom(tmp_path):
    a = _case(tmp_path, "101-a", "https://x/1", "startup_kv_capacity", ["activation_peak_oom"])
    assert score_incidents.expected_of(a)[1] == {"startup_kv_capacity", "activation_peak_oom"}
    b = _case(tmp_path, "102-b", "https://x/2", "not_oom")
    ok = score_incidents.expected_of(b)[1]
    assert {"healthy", "inconclusive", "queueing"} <= ok and "capacity_pressure" not in ok


def test_held_out_refused_and_left_out(tmp_path):
    tuned = _sources("tuned", 1)[0]
    held = _sources("held-out", 1)[0]
    t = _case(tmp_path, "101-tuned", tuned, "startup_kv_capacity")
    h = _case(tmp_path, "102-held", held, "activation_peak_oom")  # a label the log would not give: must not be run
    assert corpus_split.side(h) == "held-out" and corpus_split.side(t) == "tuned"
    r = _run(h)
    assert r.returncode == 2 and "held-out" in r.stderr
    r = _run(tmp_path)
    assert r.returncode == 0, r.stderr
    assert "tuned: 1/1 right" in r.stdout and "1 held-out case(s) left out" in r.stdout
    assert "102-held" not in r.stdout
    cases, left, err = score_incidents.select([tmp_path], held_out=True)
    assert cases == [h] and not err


def test_a_miss_is_printed_with_verdict_and_confidence(tmp_path):
    tuned = _sources("tuned", 1)[0]
    _case(tmp_path, "103-wrong", tuned, "weights_dont_fit")
    r = _run(tmp_path)
    assert r.returncode == 0, r.stderr
    assert "tuned: 0/1 right" in r.stdout
    assert "103-wrong: expected weights_dont_fit, got startup_kv_capacity [" in r.stdout


def test_not_a_case(tmp_path):
    r = _run(tmp_path / "nope")
    assert r.returncode == 2 and "not a case folder" in r.stderr
