"""The derive chain (kvdiag/derive/__init__.py, issue 26): every name a step writes is a declared signal with exactly
one writer; no step reads what only a later step writes; and the steps, run on the rule cases and a few fixtures,
read and write nothing they do not declare (a new ``bundle.add`` in kvdiag/derive/ must be declared too)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from conftest import FIXTURES, incident_cases

import kvdiag.derive as derive_pkg
from kvdiag.bundle import Bundle
from kvdiag.derive import STEPS, Step, derive_all
from kvdiag.signals import SIGNALS

PKG = Path(derive_pkg.__file__).parent


# --- the checks, on any list of steps (the tests below run them on STEPS and on broken lists) ----------------------
def undeclared_writes(steps) -> list[str]:
    return [f"{s.name} writes {n!r}, not a signal of kvdiag/signals.py" for s in steps for n in sorted(s.WRITES)
            if n not in SIGNALS]


def shared_writes(steps) -> list[str]:
    writers: dict[str, list[str]] = {}
    for s in steps:
        for n in s.WRITES:
            writers.setdefault(n, []).append(s.name)
    return [f"{n!r} has {len(w)} writers: {', '.join(w)}" for n, w in sorted(writers.items()) if len(w) != 1]


def reads_ahead(steps) -> list[str]:
    """Names a step reads that only a later step writes (a step may read its own names: it fills them only when
    the collectors gave none)."""
    out = []
    for i, s in enumerate(steps):
        for n in sorted(s.READS):
            later = [t.name for t in steps[i + 1:] if n in t.WRITES]
            if later and not any(n in t.WRITES for t in steps[:i + 1]):
                out.append(f"{s.name} reads {n!r}, written only later by {', '.join(later)}")
    return out


def test_every_written_name_is_a_declared_signal_with_exactly_one_writer():
    assert not undeclared_writes(STEPS)
    assert not shared_writes(STEPS)


def test_no_step_reads_what_only_a_later_step_writes():
    assert not reads_ahead(STEPS)


def test_the_checks_see_a_broken_chain():
    """Each check fails on a list broken on purpose: queue before the windows whose p95 it reads, a second writer of
    the hit-rate thirds, a name that is no signal."""
    by = {s.name: s for s in STEPS}
    order = [s.name for s in STEPS]
    i, j = order.index("windows"), order.index("queue")
    swapped = list(STEPS)
    swapped[i], swapped[j] = swapped[j], swapped[i]
    assert any("queue reads 'request_prompt_tokens_p95'" in m for m in reads_ahead(swapped))
    twice = list(STEPS) + [Step("v0_thirds", lambda b: None, frozenset(), frozenset({"prefix_cache_hit_rate_early"}))]
    assert shared_writes(twice) == ["'prefix_cache_hit_rate_early' has 2 writers: hit_rate_thirds, v0_thirds"]
    typo = [Step("pool", by["pool"].run, by["pool"].READS, frozenset({"kv_capacity_token"}))]
    assert undeclared_writes(typo) == ["pool writes 'kv_capacity_token', not a signal of kvdiag/signals.py"]


def test_derive_all_runs_every_step_in_order(monkeypatch):
    ran = []
    steps = tuple(Step(s.name, (lambda name: lambda b: ran.append(name))(s.name), s.READS, s.WRITES) for s in STEPS)
    monkeypatch.setattr(derive_pkg, "STEPS", steps)
    derive_all(Bundle())
    assert ran == [s.name for s in STEPS]


# --- what the steps really do: traced on real bundles --------------------------------------------------------------
def _trace(bundles) -> dict[str, tuple[set, set]]:
    """Each step's reads (``signal``, ``last``, ``has``) and writes (``add``, ``extend``) on ``bundles``."""
    seen = {s.name: (set(), set()) for s in STEPS}
    current: list[str] = []
    orig = {m: getattr(Bundle, m) for m in ("signal", "last", "has", "add", "extend")}

    def wrap(name, f):
        def g(self, signal, *a, **k):
            if current:
                seen[current[-1]][1 if name in ("add", "extend") else 0].add(signal)
            return f(self, signal, *a, **k)
        return g

    mp = pytest.MonkeyPatch()
    try:
        for name, f in orig.items():
            mp.setattr(Bundle, name, wrap(name, f))
        for b in bundles:
            for s in STEPS:
                current.append(s.name)
                try:
                    s.run(b)
                finally:
                    current.pop()
    finally:
        mp.undo()
    return seen


def _bundles():
    from kvdiag.capacity import load_model_config
    from kvdiag.collect.logs import read_logs
    from kvdiag.collect.metrics import read_metrics_file
    from kvdiag.engine.runcases import all_cases

    for case in all_cases():
        yield case.bundle()
    for case in incident_cases(bundled_only=True)[:8]:
        b = Bundle()
        read_logs(b, [str(case / "vllm.log")])
        yield b
    for page in ("series/vllm033_pressure", "series/forecast"):
        b = Bundle()
        for p in sorted((FIXTURES / page).glob("*.om"))[:1]:
            read_metrics_file(b, str(p))
        yield b
    b = Bundle()  # the capacity model: a model config with the start-up log it was paired with
    read_logs(b, [str(FIXTURES / "capacity" / "logs" / "deepseek-v2-lite-v064-constructed.log")])
    b.model_config = load_model_config(str(FIXTURES / "capacity" / "configs" / "deepseek-v2-lite.json"))
    yield b


@pytest.fixture(scope="module")
def traced():
    return _trace(_bundles())


def test_steps_read_only_what_they_declare(traced):
    extra = {name: sorted(r - s.READS) for s in STEPS for name, (r, _w) in [(s.name, traced[s.name])] if r - s.READS}
    assert not extra, f"reads missing from READS: {extra}"


def test_steps_write_only_what_they_declare(traced):
    extra = {name: sorted(w - s.WRITES) for s in STEPS for name, (_r, w) in [(s.name, traced[s.name])] if w - s.WRITES}
    assert not extra, f"writes missing from WRITES: {extra}"


def test_the_trace_reaches_every_step(traced):
    """The corpus is not empty for any step: each one writes at least one of its signals."""
    assert [s.name for s in STEPS if not traced[s.name][1]] == []


def test_every_signal_named_in_an_add_of_the_package_is_some_steps_write():
    """A literal ``bundle.add("name", ...)`` anywhere in kvdiag/derive/ is declared, even where no fixture reaches it."""
    written = set().union(*(s.WRITES for s in STEPS))
    missing = []
    for path in sorted(PKG.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("add", "extend")
                    and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
                    and node.args[0].value not in written):
                missing.append(f"{path.name}:{node.lineno} {node.args[0].value}")
    assert not missing
