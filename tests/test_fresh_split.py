"""tools/fresh_split.py: the fresh corpus (issue 37) is well formed, new, and split half and half by thread."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
import fresh_split  # noqa: E402
from corpus_split import cases, thread_key  # noqa: E402


def _case(root: Path, name: str, source: str, primary: str = "queueing", log: str = "INFO x\n") -> Path:
    c = root / name
    c.mkdir(parents=True)
    (c / "expected.yaml").write_text(f"primary: {primary}\nsource: {source}\n")
    (c / "vllm.log").write_text(log)
    return c


def test_the_fresh_corpus_has_no_fault():
    assert fresh_split.check(fresh_split.DEFAULT_DIR) == []


def test_check_finds_a_thread_of_the_old_corpus(tmp_path):
    old = tmp_path / "old"
    _case(old, "101-a", "https://github.com/vllm-project/vllm/issues/1")
    new = tmp_path / "new"
    _case(new, "401-a", "https://github.com/vllm-project/vllm/issues/1#issuecomment-9")
    _case(new, "402-b", "https://github.com/vllm-project/vllm/issues/2", primary="nonsense")
    _case(new, "403-c", "https://github.com/vllm-project/vllm/issues/3", log="  \n")
    faults = fresh_split.check(new, old)
    assert len(faults) == 3
    assert "already in" in faults[0] and "not a class" in faults[1] and "empty" in faults[2]


def test_the_split_is_about_half_deterministic_and_by_thread(tmp_path):
    for i in range(200):
        _case(tmp_path, f"{400 + i}-x", f"https://github.com/vllm-project/vllm/issues/{i % 100}#c{i}")
    sides = {c: fresh_split.side(c) for c in cases(tmp_path)}
    assert sides == {c: fresh_split.side(c) for c in cases(tmp_path)}
    held = sum(1 for s in sides.values() if s == "held-out")
    assert 0.35 * len(sides) <= held <= 0.65 * len(sides)
    by_thread = {}
    for c, s in sides.items():
        by_thread.setdefault(thread_key(fresh_split.source_of(c)), set()).add(s)
    assert all(len(v) == 1 for v in by_thread.values())
