"""Rule files: the closed YAML grammar (see ``rules/README.md``), loaded and schema-checked.

A rule is data, never code: conditions compare one aggregated signal with a number; ``all``,
``any`` and ``not`` combine them. There is no ``eval``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
import re

import yaml

from ..errors import RuleFileError
from ..signals import SIGNALS

CLASSES = ("capacity_pressure", "partial_block_waste", "prefix_cache_eviction", "weights_dont_fit",
           "startup_kv_capacity", "activation_peak_oom", "cuda_graph_oom", "sampler_oom", "encoder_cache_oom",
           "external_memory_pressure", "healthy", "inconclusive")
SEVERITIES = ("ok", "warning", "critical")
CONFIDENCES = ("low", "medium", "high")
AGGS = ("last", "first", "min", "max", "mean", "p95", "count", "present", "increase", "rate")
OPS = (">", ">=", "<", "<=", "==", "!=")
_RULE_KEYS = {"id", "name", "class", "title", "severity", "priority", "confidence", "requires", "uses", "params",
              "when", "message", "quiet", "evidence", "remedy", "doc", "references"}
_DOC_KEYS = ("meaning", "impact", "diagnosis", "false_positives", "remedy")
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h)$")


def parse_duration(text: str) -> float:
    """``500ms``, ``30s``, ``5m``, ``1h`` → seconds (float).

    Raises:
        ValueError: not a number followed by ms, s, m or h.
    """
    m = _DURATION.match(str(text).strip())
    if not m:
        raise ValueError(f"{text!r} is not a duration like 500ms, 30s, 5m or 1h")
    n = float(m.group(1))
    return n * {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}[m.group(2)]


@dataclass(frozen=True)
class Condition:
    """One comparison: ``agg(signal[text_in]) op value``, optionally holding ``for`` seconds."""

    signal: str
    agg: str
    op: str
    value: float
    text_in: tuple[str, ...] = ()
    for_seconds: float | None = None
    if_missing: bool | None = None  # None: a missing signal makes the condition unknown


@dataclass(frozen=True)
class Node:
    """``all`` / ``any`` / ``not`` over children, or a leaf condition."""

    kind: str  # "all" | "any" | "not" | "cond"
    children: tuple["Node", ...] = ()
    cond: Condition | None = None


@dataclass
class Rule:
    """A loaded rule. ``requires`` is a list of groups: each group is satisfied when any of its signals has data."""

    id: str
    name: str
    cls: str
    title: str
    severity: str
    priority: int
    confidence: str
    requires: list[tuple[str, ...]]
    uses: list[str]
    params: dict
    when: Node
    message: list[str]
    quiet: list[str]
    evidence: list[str]
    remedy: list[list[str]]
    doc: dict
    references: list[str] = field(default_factory=list)
    path: str = ""


def _err(path: str, msg: str) -> RuleFileError:
    return RuleFileError(f"{path}: {msg}")


def _parse_node(raw, path: str, params: dict) -> Node:
    if not isinstance(raw, dict) or len(raw) == 0:
        raise _err(path, f"condition must be a mapping, got {raw!r}")
    if set(raw) == {"all"} or set(raw) == {"any"}:
        kind = next(iter(raw))
        items = raw[kind]
        if not isinstance(items, list) or not items:
            raise _err(path, f"'{kind}' needs a non-empty list")
        return Node(kind, tuple(_parse_node(i, path, params) for i in items))
    if set(raw) == {"not"}:
        return Node("not", (_parse_node(raw["not"], path, params),))
    unknown = set(raw) - {"signal", "agg", "op", "value", "text_in", "for", "if_missing"}
    if unknown:
        raise _err(path, f"unknown condition key(s) {sorted(unknown)}; expected signal, agg, op, value, text_in, "
                         "for, if_missing")
    if_missing = raw.get("if_missing")
    if if_missing not in (None, True, False):
        raise _err(path, f"if_missing must be true or false, got {if_missing!r}")
    sig = raw.get("signal")
    if sig not in SIGNALS:
        raise _err(path, f"unknown signal {sig!r} in condition")
    agg = raw.get("agg", "last")
    if agg not in AGGS:
        raise _err(path, f"unknown agg {agg!r}; expected one of {', '.join(AGGS)}")
    op = str(raw.get("op", ">"))
    if op not in OPS:
        raise _err(path, f"unknown op {op!r}; expected one of {' '.join(OPS)}")
    value = raw.get("value", 0)
    if isinstance(value, str) and value.startswith("$"):
        key = value[1:]
        if key not in params:
            raise _err(path, f"condition uses ${key} but params has no {key}")
        value = params[key]
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise _err(path, f"condition value {value!r} is not a number") from None
    for_s = raw.get("for")
    if isinstance(for_s, str) and for_s.startswith("$"):
        for_s = params.get(for_s[1:])
    try:
        for_seconds = parse_duration(for_s) if for_s is not None else None
    except ValueError as exc:
        raise _err(path, str(exc)) from None
    text_in = raw.get("text_in") or []
    if not isinstance(text_in, list):
        raise _err(path, "text_in must be a list of strings")
    return Node("cond", cond=Condition(sig, agg, op, value, tuple(str(x) for x in text_in), for_seconds, if_missing))


def _alternatives(raw, path: str, key: str) -> list[str]:
    """A template or a list of alternative templates (the first whose numbers are all known is used)."""
    if isinstance(raw, str):
        return [raw]
    if isinstance(raw, list) and raw and all(isinstance(x, str) for x in raw):
        return list(raw)
    raise _err(path, f"{key} must be a string or a list of alternative strings")


def load_rule(path: str | Path, text: str | None = None) -> Rule:
    """Load and check one rule file.

    Raises:
        RuleFileError: YAML error, unknown key, unknown signal/class/severity, missing docs.
    """
    path = str(path)
    try:
        raw = yaml.safe_load(text if text is not None else Path(path).read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise _err(path, f"not valid YAML: {str(exc).splitlines()[0]}") from None
    except OSError as exc:
        raise _err(path, f"cannot read: {exc.strerror}") from None
    if not isinstance(raw, dict):
        raise _err(path, "a rule file must be a YAML mapping")
    unknown = set(raw) - _RULE_KEYS
    if unknown:
        raise _err(path, f"unknown key(s) {sorted(unknown)}")
    for key in ("id", "name", "class", "title", "severity", "when", "message", "doc"):
        if key not in raw:
            raise _err(path, f"missing required key '{key}'")
    if raw["class"] not in CLASSES:
        raise _err(path, f"unknown class {raw['class']!r}")
    allowed = SEVERITIES if raw["class"] == "healthy" else SEVERITIES[1:]
    if raw["severity"] not in allowed:
        raise _err(path, f"severity must be {' or '.join(allowed)} for class {raw['class']}, got {raw['severity']!r}")
    confidence = raw.get("confidence", "medium")
    if confidence not in CONFIDENCES:
        raise _err(path, f"confidence must be low, medium or high, got {confidence!r}")
    params = raw.get("params") or {}
    requires: list[tuple[str, ...]] = []
    for item in raw.get("requires") or []:
        group = tuple(item) if isinstance(item, list) else (item,)
        for s in group:
            if s not in SIGNALS:
                raise _err(path, f"unknown signal {s!r} in requires")
        requires.append(group)
    uses = list(raw.get("uses") or [])
    for s in uses:
        if s not in SIGNALS:
            raise _err(path, f"unknown signal {s!r} in uses")
    doc = raw["doc"]
    if not isinstance(doc, dict) or any(not doc.get(k) for k in _DOC_KEYS):
        raise _err(path, f"doc must give {', '.join(_DOC_KEYS)}")
    evidence = list(raw.get("evidence") or [])
    for item in evidence:
        sig = str(item).split(".")[0]
        if sig not in SIGNALS:
            raise _err(path, f"unknown signal {sig!r} in evidence")
    return Rule(id=str(raw["id"]), name=str(raw["name"]), cls=raw["class"], title=str(raw["title"]),
                severity=raw["severity"], priority=int(raw.get("priority", 50)), confidence=confidence,
                requires=requires, uses=uses, params=params, when=_parse_node(raw["when"], path, params),
                message=_alternatives(raw["message"], path, "message"),
                quiet=_alternatives(raw.get("quiet") or f"Not firing: {raw['title']}", path, "quiet"),
                evidence=evidence,
                remedy=[_alternatives(r, path, "remedy") for r in raw.get("remedy") or []],
                doc=doc, references=list(raw.get("references") or []), path=path)


def builtin_rules_dir() -> Path:
    """Where the shipped rules are: ``kvdiag/rules`` inside an installed wheel, else ``rules/`` of a checkout."""
    try:
        packaged = resources.files("kvdiag") / "rules"
        if packaged.is_dir():
            return Path(str(packaged))
    except (ModuleNotFoundError, TypeError):
        pass
    return Path(__file__).resolve().parent.parent.parent / "rules"


def load_rules(extra_dirs: list[str] | None = None) -> list[Rule]:
    """Load the shipped rules plus any user rule folders (``*.yaml`` found recursively).

    Raises:
        RuleFileError: a rule file is invalid, a folder is missing, or two rules share an id.
    """
    dirs = [builtin_rules_dir()] + [Path(d) for d in (extra_dirs or [])]
    rules: list[Rule] = []
    seen: dict[str, str] = {}
    for d in dirs:
        if not d.is_dir():
            raise RuleFileError(f"{d}: rules folder not found")
        for path in sorted(d.rglob("*.yaml")):
            if path.parent.name == "cases" or path.name.startswith("_"):
                continue
            rule = load_rule(path)
            if rule.id in seen:
                raise RuleFileError(f"{path}: rule id {rule.id} already defined in {seen[rule.id]}")
            seen[rule.id] = str(path)
            rules.append(rule)
    return rules
