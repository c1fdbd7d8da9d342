"""Rule case files: compact input series and the expected outcome, run by ``kvdiag rules test`` and the test suite,
and turned into ``promtool test rules`` files by ``kvdiag rules export``.

A case file (``rules/<class>/cases/<ID>.yaml``)::

    rule: CAP001
    interval: 15s
    cases:
      fires_when_full_and_preempting:
        series: {kv_cache_usage: '0.80+0.05x3 0.98x12', num_preemptions: '0x4 1+2x11'}
        facts: {block_size: 16, num_gpu_blocks: 2048}          # one observation each, at the start
        events: {cuda_oom: [{value: 1.0e9, text: load}]}       # log events, at the start (value: null: no number)
        expect: fires                                          # fires | quiet | unknown
        remedy_has: ["Add replicas: 4 in all"]                 # optional: texts the remedies must contain
        message_has: ["with up to 3 request(s) waiting"]       # optional: texts the message (or quiet text) must contain

``series`` use promtool's expanding notation (Prometheus docs, "Unit testing for rules"): ``a+bxn`` is
``a, a+b, …, a+n·b`` (n+1 samples), ``axn`` repeats ``a`` n+1 times, ``_`` is a missing sample.
"""

from __future__ import annotations

from dataclasses import dataclass, field
import math
from pathlib import Path
import re

import yaml

from ..bundle import Bundle
from ..errors import RuleFileError
from ..signals import SIGNALS
from .model import parse_duration, yaml_files

_TERM = re.compile(r"^(?P<a>_|[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)"
                   r"(?:(?P<sign>[-+])(?P<b>(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?))?(?:x(?P<n>\d+))?$")
OUTCOMES = ("fires", "quiet", "unknown")
T0 = 1_700_000_000.0
MAX_SAMPLES = 10_000  # per series of a case (a day at 15 s is 5 760)
MAX_INTERVAL = 86_400.0  # seconds between a case's samples


def expand_series(text: str) -> list[float | None]:
    """Expand promtool series notation into samples (``None`` = missing).

    Raises:
        ValueError: a term is not ``a``, ``axn``, ``a+bxn``, ``a-bxn``, ``_`` or ``_xn``; a value is not
            finite; or the series would have more than ``MAX_SAMPLES`` samples (checked before expanding).
    """
    out: list[float | None] = []
    for term in str(text).split():
        m = _TERM.match(term)
        if not m:
            raise ValueError(f"series term {term[:40]!r} is not promtool notation (a, axn, a+bxn, _)")
        digits = m.group("n") or "0"
        if len(digits) > 6 or len(out) + int(digits) + 1 > MAX_SAMPLES:
            raise ValueError(f"series term {term[:40]!r}: count too large (a series holds at most "
                             f"{MAX_SAMPLES:,} samples)")
        n = int(digits)
        if m.group("a") == "_":
            if m.group("b"):
                raise ValueError(f"series term {term!r}: '_' takes no increment")
            out += [None] * (n + 1)
            continue
        a = float(m.group("a"))
        b = float(m.group("b") or 0) * (-1 if m.group("sign") == "-" else 1)
        if m.group("b") and not m.group("n"):
            raise ValueError(f"series term {term!r}: an increment needs a count (a+bxn)")
        if not (math.isfinite(a) and math.isfinite(b) and math.isfinite(a + n * b)):
            raise ValueError(f"series term {term[:40]!r}: values must be finite numbers")
        out += [a + i * b for i in range(n + 1)]
    return out


def _number(value, where: str) -> float:
    """A finite number from a case file (``bool`` is not one; a numeric string like ``1.0e9``, which YAML 1.1
    reads as text, is)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"{where}: {str(value)[:40]!r} is not a number")
    try:
        out = float(value)
    except OverflowError:
        raise ValueError(f"{where}: number too large") from None
    except ValueError:
        raise ValueError(f"{where}: {str(value)[:40]!r} is not a number") from None
    if not math.isfinite(out):
        raise ValueError(f"{where}: {value!r} is not a finite number")
    return out


def _facts(raw) -> dict[str, float | str]:
    if not isinstance(raw, dict):
        raise ValueError(f"facts must be a mapping of signal: number or text, got {str(raw)[:40]!r}")
    out: dict[str, float | str] = {}
    for sig, value in raw.items():
        if sig not in SIGNALS:
            raise ValueError(f"unknown signal {sig!r} in facts")
        out[sig] = value if isinstance(value, str) else _number(value, f"facts.{sig}")
    return out


def _events(raw) -> dict[str, list[dict]]:
    if not isinstance(raw, dict):
        raise ValueError(f"events must be a mapping of signal: list of {{value, text}}, got {str(raw)[:40]!r}")
    out: dict[str, list[dict]] = {}
    for sig, items in raw.items():
        if sig not in SIGNALS:
            raise ValueError(f"unknown signal {sig!r} in events")
        if not isinstance(items, list) or not all(isinstance(ev, dict) for ev in items):
            raise ValueError(f"events.{sig} must be a list of {{value: number, text: string}}, "
                             f"got {str(items)[:40]!r}")
        evs = []
        for i, ev in enumerate(items):
            unknown = set(ev) - {"value", "text"}
            if unknown:
                raise ValueError(f"events.{sig}[{i}]: unknown key(s) {sorted(map(str, unknown))}; expected value, text")
            text = ev.get("text", "")
            if not isinstance(text, (str, int, float)) or isinstance(text, bool):
                raise ValueError(f"events.{sig}[{i}].text must be a string")
            value = None if "value" in ev and ev["value"] is None else _number(ev.get("value", 1),
                                                                                f"events.{sig}[{i}].value")
            evs.append({"value": value, "text": str(text)})  # value: null, a line that states no number
        out[sig] = evs
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
    remedy_has: tuple[str, ...] = ()
    """Texts each of which one remedy of the firing finding must contain (``remedy_has:`` in the file)."""
    message_has: tuple[str, ...] = ()
    """Texts the finding's message (its quiet text when quiet) must contain (``message_has:``)."""

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
    from .model import bounded_yaml

    raw = bounded_yaml(path, what="a YAML rule case file")
    if not isinstance(raw, dict) or "rule" not in raw or not isinstance(raw.get("cases"), dict):
        raise RuleFileError(f"{path}: a case file needs 'rule' and a 'cases' mapping")
    if not isinstance(raw["rule"], str):
        raise RuleFileError(f"{path}: rule must be a rule id string like CAP001, got {str(raw['rule'])[:40]!r}")
    try:
        interval = parse_duration(raw.get("interval", "15s"))
    except ValueError as exc:
        raise RuleFileError(f"{path}: interval: {exc}") from None
    if not 0 < interval <= MAX_INTERVAL:
        raise RuleFileError(f"{path}: interval: must be more than 0s and at most 24h, got {raw.get('interval')!r}")
    out = []
    for name, c in raw["cases"].items():
        if not isinstance(c, dict):
            raise RuleFileError(f"{path}: case {name} must be a mapping")
        unknown = set(c) - {"series", "facts", "events", "expect", "doc", "remedy_has", "message_has"}
        if unknown:
            raise RuleFileError(f"{path}: case {name}: unknown key(s) {sorted(unknown)}")
        expect = c.get("expect")
        if expect not in OUTCOMES:
            raise RuleFileError(f"{path}: case {name}: expect must be fires, quiet or unknown")
        series = {}
        raw_series = c.get("series") or {}
        if not isinstance(raw_series, dict):
            raise RuleFileError(f"{path}: case {name}: series must be a mapping of signal: 'promtool series', "
                                f"got {str(raw_series)[:40]!r}")
        for sig, text in raw_series.items():
            if sig not in SIGNALS:
                raise RuleFileError(f"{path}: case {name}: unknown signal {sig!r}")
            if not isinstance(text, (str, int, float)) or isinstance(text, bool):
                raise RuleFileError(f"{path}: case {name}: series {sig}: expected a string like '0.5x10', "
                                    f"got {str(text)[:40]!r}")
            try:
                series[sig] = expand_series(text)
            except ValueError as exc:
                raise RuleFileError(f"{path}: case {name}: series {sig}: {exc}") from None
        try:
            facts = _facts(c.get("facts") or {})
            events = _events(c.get("events") or {})
        except ValueError as exc:
            raise RuleFileError(f"{path}: case {name}: {exc}") from None
        remedy_has = c.get("remedy_has") or []
        if not isinstance(remedy_has, list) or not all(isinstance(t, str) and t for t in remedy_has):
            raise RuleFileError(f"{path}: case {name}: remedy_has must be a list of non-empty strings")
        if remedy_has and expect != "fires":
            raise RuleFileError(f"{path}: case {name}: remedy_has needs expect: fires (only a firing rule has remedies)")
        message_has = c.get("message_has") or []
        if not isinstance(message_has, list) or not all(isinstance(t, str) and t for t in message_has):
            raise RuleFileError(f"{path}: case {name}: message_has must be a list of non-empty strings")
        out.append(Case(raw["rule"], str(name), interval, series, facts, events, expect, path, tuple(remedy_has),
                        tuple(message_has)))
    return out


def find_case_files(dirs: list[Path]) -> list[Path]:
    """Every ``cases/*.yaml`` under the given folders (rules folders or a folder of case files)."""
    files: list[Path] = []
    for d in dirs:
        files += [p for p in yaml_files(d, "cases") if p.parent.name == "cases" or Path(d).name == "cases"]
    return sorted(set(files))
