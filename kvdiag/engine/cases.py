"""Rule case files: compact input series and the expected outcome, run by ``kvdiag rules test`` and the test suite,
and turned into ``promtool test rules`` files by ``kvdiag rules export``.

A case file (``rules/<class>/cases/<ID>.yaml``)::

    rule: CAP001
    interval: 15s
    cases:
      fires_when_full_and_preempting:
        series: {kv_cache_usage: '0.80+0.05x3 0.98x12', num_preemptions: '0x4 1+2x11'}
        facts: {block_size: 16, num_gpu_blocks: 2048}          # one observation each, at the start
        events: {cuda_oom: [{value: 1.0e9, text: load}]}       # log events, at the start
        expect: fires                                          # fires | quiet | unknown

``series`` use promtool's expanding notation (Prometheus docs, "Unit testing for rules"): ``a+bxn`` is
``a, a+b, …, a+n·b`` (n+1 samples), ``axn`` repeats ``a`` n+1 times, ``_`` is a missing sample.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
import re

import yaml

from ..bundle import Bundle
from ..errors import RuleFileError
from ..signals import SIGNALS
from .model import parse_duration

_TERM = re.compile(r"^(?P<a>_|[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)"
                   r"(?:(?P<sign>[-+])(?P<b>(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?))?(?:x(?P<n>\d+))?$")
OUTCOMES = ("fires", "quiet", "unknown")
T0 = 1_700_000_000.0


def expand_series(text: str) -> list[float | None]:
    """Expand promtool series notation into samples (``None`` = missing).

    Raises:
        ValueError: a term is not ``a``, ``axn``, ``a+bxn``, ``a-bxn``, ``_`` or ``_xn``.
    """
    out: list[float | None] = []
    for term in str(text).split():
        m = _TERM.match(term)
        if not m:
            raise ValueError(f"series term {term!r} is not promtool notation (a, axn, a+bxn, _)")
        n = int(m.group("n")) if m.group("n") else 0
        if m.group("a") == "_":
            if m.group("b"):
                raise ValueError(f"series term {term!r}: '_' takes no increment")
            out += [None] * (n + 1)
            continue
        a = float(m.group("a"))
        b = float(m.group("b") or 0) * (-1 if m.group("sign") == "-" else 1)
        if m.group("b") and not m.group("n"):
            raise ValueError(f"series term {term!r}: an increment needs a count (a+bxn)")
        out += [a + i * b for i in range(n + 1)]
    return out


@dataclass
class Case:
    """One case of a rule: inputs and the expected outcome."""

    rule_id: str
    name: str
    interval: float
    series: dict[str, list[float | None]]
    facts: dict[str, float | str] = field(default_factory=dict)
    events: dict[str, list[dict]] = field(default_factory=dict)
    expect: str = "fires"
    path: str = ""

    def bundle(self) -> Bundle:
        """The case as a bundle: series sampled every ``interval`` from a fixed start; facts/events at the start."""
        b = Bundle()
        for name, value in self.facts.items():
            if isinstance(value, str):
                b.add(name, None, f"case:{self.name}:fact", t=T0, text=value)
            else:
                b.add(name, value, f"case:{self.name}:fact", t=T0)
        for name, items in self.events.items():
            for i, ev in enumerate(items):
                b.add(name, ev.get("value", 1), f"case:{self.name}:event{i}", t=T0, text=str(ev.get("text", "")))
        length = max((len(v) for v in self.series.values()), default=0)
        for i in range(length):
            t = T0 + i * self.interval
            for name, values in self.series.items():
                if i < len(values) and values[i] is not None:
                    b.add(name, values[i], f"case:{self.name}:{name}[{i}]", t=t)
        return b

    @property
    def duration(self) -> float:
        """Seconds from the first to the last sample."""
        length = max((len(v) for v in self.series.values()), default=1)
        return (length - 1) * self.interval


def load_cases(path: str | Path) -> list[Case]:
    """Load one case file.

    Raises:
        RuleFileError: not YAML, unknown keys or signals, bad series notation, bad ``expect``.
    """
    path = str(path)
    try:
        raw = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise RuleFileError(f"{path}: cannot read case file: {str(exc).splitlines()[0]}") from None
    if not isinstance(raw, dict) or "rule" not in raw or not isinstance(raw.get("cases"), dict):
        raise RuleFileError(f"{path}: a case file needs 'rule' and a 'cases' mapping")
    try:
        interval = parse_duration(raw.get("interval", "15s"))
    except ValueError as exc:
        raise RuleFileError(f"{path}: {exc}") from None
    out = []
    for name, c in raw["cases"].items():
        if not isinstance(c, dict):
            raise RuleFileError(f"{path}: case {name} must be a mapping")
        unknown = set(c) - {"series", "facts", "events", "expect", "doc"}
        if unknown:
            raise RuleFileError(f"{path}: case {name}: unknown key(s) {sorted(unknown)}")
        expect = c.get("expect")
        if expect not in OUTCOMES:
            raise RuleFileError(f"{path}: case {name}: expect must be fires, quiet or unknown")
        series = {}
        for sig, text in (c.get("series") or {}).items():
            if sig not in SIGNALS:
                raise RuleFileError(f"{path}: case {name}: unknown signal {sig!r}")
            try:
                series[sig] = expand_series(text)
            except ValueError as exc:
                raise RuleFileError(f"{path}: case {name}: {exc}") from None
        for key in ("facts", "events"):
            for sig in (c.get(key) or {}):
                if sig not in SIGNALS:
                    raise RuleFileError(f"{path}: case {name}: unknown signal {sig!r} in {key}")
        out.append(Case(str(raw["rule"]), str(name), interval, series, dict(c.get("facts") or {}),
                        {k: list(v) for k, v in (c.get("events") or {}).items()}, expect, path))
    return out


def find_case_files(dirs: list[Path]) -> list[Path]:
    """Every ``cases/*.yaml`` under the given folders (rules folders or a folder of case files)."""
    files: list[Path] = []
    for d in dirs:
        if not d.is_dir():
            raise RuleFileError(f"{d}: cases folder not found")
        files += sorted(p for p in d.rglob("*.yaml") if p.parent.name == "cases" or d.name == "cases")
    return sorted(set(files))
