"""Rule files: the closed YAML grammar (see ``rules/README.md``), loaded and schema-checked.

A rule is data, never code: conditions compare one aggregated signal with a number; ``all``,
``any`` and ``not`` combine them. There is no ``eval``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
import math
import os
import re

import yaml

from ..durations import parse_duration  # noqa: F401  (rules, cases and collectors share it)
from ..errors import RuleFileError
from ..signals import SIGNALS

CLASSES = ("capacity_pressure", "partial_block_waste", "prefix_cache_eviction", "weights_dont_fit",
           "startup_kv_capacity", "activation_peak_oom", "cuda_graph_oom", "sampler_oom", "encoder_cache_oom",
           "external_memory_pressure", "queueing", "healthy", "inconclusive")
SEVERITIES = ("ok", "warning", "critical")
CONFIDENCES = ("low", "medium", "high")
AGGS = ("last", "first", "min", "max", "mean", "p95", "count", "present", "increase", "rate")
OPS = (">", ">=", "<", "<=", "==", "!=")
_RULE_KEYS = {"id", "name", "class", "title", "severity", "priority", "confidence", "requires", "uses", "params",
              "when", "message", "quiet", "evidence", "remedy", "doc", "references", "forecast", "alert"}
_DOC_KEYS = ("meaning", "impact", "diagnosis", "false_positives", "remedy")
_ID = re.compile(r"^[A-Z][A-Z0-9_-]{0,31}$")
_ALERT = re.compile(r"^[A-Z][A-Za-z0-9]{0,63}$")
PRIORITY_RANGE = (0, 1000)
MAX_DEPTH = 32  # nesting of all/any/not in a `when:` tree
MAX_SPEC_NUMBER = 64  # largest width or precision a template's format spec may ask for
# a template field: {param}, {param:spec}, {signal.agg}, {signal.agg:spec}, {signal.text}
FIELD = re.compile(r"\{([a-z_][a-z0-9_]*)(?:\.([a-z0-9]+))?(?::([^{}]*))?\}")
# the small part of Python's format-spec mini-language templates need: [[fill]align][sign][0][width][,|_][.prec][type]
_SPEC = re.compile(r"^(?:[^{}]?[<>=^])?[-+ ]?0?(?P<width>\d+)?[,_]?(?:\.(?P<prec>\d+))?[eEfFgGn%ds]?$")


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
    forecast: bool = False  # the rule predicts a problem that has not happened yet (CAP002); said so in the report
    alert: str = ""  # the exported Prometheus alert's name (VllmKvCachePoolExhausted); '' = from the rule's name


def _err(path: str, msg: str) -> RuleFileError:
    return RuleFileError(f"{path}: {msg}")


def spec_ok(spec: str) -> bool:
    """Whether ``spec`` is a template format spec kvdiag accepts: ``gib``, ``min``, ``pctmin``, or a Python format spec made of
    fill/align, sign, ``0``, width, ``,``/``_``, precision and one of ``eEfFgGn%ds``, with width and precision
    at most ``MAX_SPEC_NUMBER`` (so rendering never builds a huge string)."""
    if spec in ("", "gib", "min", "pctmin"):
        return True
    m = _SPEC.match(spec)
    if not m:
        return False
    return all(len(m.group(g) or "") <= 4 and int(m.group(g) or 0) <= MAX_SPEC_NUMBER for g in ("width", "prec"))


def check_template(template: str, path: str, key: str, params: dict) -> None:
    """Check every ``{...}`` field and ``[[ … ]]`` clause of a message/quiet/remedy template.

    Raises:
        RuleFileError: a field names an unknown signal, agg or param, has a format spec that is not small and
            valid (``spec_ok``), a brace is not part of a ``{signal.agg:spec}`` / ``{param}`` field, a clause is
            unbalanced or names no number, or a clause condition (``?signal.agg`` / ``!signal.agg``) names an
            unknown signal or agg (``kvdiag/engine/template.py``).
    """
    from .template import Branch, Clause, TemplateSyntaxError, leading_conditions, parse, walk

    conds, body = leading_conditions(template)
    try:
        pieces = parse(body)
    except TemplateSyntaxError as exc:
        raise _err(path, f"{key}: {exc}") from None
    for item in [Clause("", (Branch(conds, ()),))] + list(walk(pieces)):
        if isinstance(item, Clause):
            for branch in item.branches:
                for _want, name, agg in branch.conds:
                    if name not in SIGNALS:
                        raise _err(path, f"{key}: clause condition {name}.{agg}: unknown signal {name!r}")
                    if agg not in AGGS + ("text",):
                        raise _err(path, f"{key}: clause condition {name}.{agg}: unknown agg {agg!r}; expected one of "
                                         f"{', '.join(AGGS + ('text',))}")
    for m in FIELD.finditer(template):
        name, agg, spec = m.group(1), m.group(2), m.group(3) or ""
        if agg is None:
            if name not in params:
                raise _err(path, f"{key}: field {m.group(0)!r} names no param (params: "
                                 f"{', '.join(sorted(params)) or 'none'}); a signal needs an agg, e.g. "
                                 f"{{{name}.max}}")
        else:
            if name not in SIGNALS:
                raise _err(path, f"{key}: field {m.group(0)!r}: unknown signal {name!r}")
            if agg not in AGGS + ("text",):
                raise _err(path, f"{key}: field {m.group(0)!r}: unknown agg {agg!r}; expected one of "
                                 f"{', '.join(AGGS + ('text',))}")
        if not spec_ok(spec):
            raise _err(path, f"{key}: field {m.group(0)!r}: format spec {spec!r} is not a small valid one "
                             f"(e.g. .1%, ,.0f, .2f, gib; width and precision at most {MAX_SPEC_NUMBER})")
    rest = FIELD.sub("", template)
    if "{" in rest or "}" in rest:
        bad = rest[max(0, rest.find("{" if "{" in rest else "}") - 20):][:40]
        raise _err(path, f"{key}: a brace that is not a {{signal.agg:spec}} or {{param}} field near {bad!r}")


def _finite(value, path: str, what: str) -> float:
    """``value`` as a finite float (``bool`` is not a number here)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _err(path, f"{what} {value!r} is not a number")
    try:
        out = float(value)
    except OverflowError:
        raise _err(path, f"{what} is too large to be a number") from None
    if not math.isfinite(out):
        raise _err(path, f"{what} {value!r} is not a finite number")
    return out


def _parse_node(raw, path: str, params: dict, depth: int = 0) -> Node:
    if depth > MAX_DEPTH:
        raise _err(path, f"when: conditions nested deeper than {MAX_DEPTH} levels of all/any/not")
    if not isinstance(raw, dict) or len(raw) == 0:
        raise _err(path, f"condition must be a mapping, got {str(raw)[:80]!r}")
    if set(raw) == {"all"} or set(raw) == {"any"}:
        kind = next(iter(raw))
        items = raw[kind]
        if not isinstance(items, list) or not items:
            raise _err(path, f"'{kind}' needs a non-empty list")
        return Node(kind, tuple(_parse_node(i, path, params, depth + 1) for i in items))
    if set(raw) == {"not"}:
        return Node("not", (_parse_node(raw["not"], path, params, depth + 1),))
    unknown = set(raw) - {"signal", "agg", "op", "value", "text_in", "for", "if_missing"}
    if unknown:
        raise _err(path, f"unknown condition key(s) {sorted(unknown)}; expected signal, agg, op, value, text_in, "
                         "for, if_missing")
    if_missing = raw.get("if_missing")
    if if_missing not in (None, True, False):
        raise _err(path, f"if_missing must be true or false, got {if_missing!r}")
    sig = raw.get("signal")
    if not isinstance(sig, str) or sig not in SIGNALS:
        raise _err(path, f"unknown signal {sig!r} in condition")
    agg = raw.get("agg", "last")
    if not isinstance(agg, str) or agg not in AGGS:
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
    value = _finite(value, path, f"condition value on {sig}")
    for_s = raw.get("for")
    if isinstance(for_s, str) and for_s.startswith("$"):
        for_s = params.get(for_s[1:])
    try:
        for_seconds = parse_duration(for_s) if for_s is not None else None
    except ValueError as exc:
        raise _err(path, str(exc)) from None
    text_in = raw.get("text_in") or []
    if not isinstance(text_in, list) or not all(isinstance(x, str) for x in text_in):
        raise _err(path, "text_in must be a list of strings")
    return Node("cond", cond=Condition(sig, agg, op, value, tuple(str(x) for x in text_in), for_seconds, if_missing))


def _alternatives(raw, path: str, key: str) -> list[str]:
    """A template or a list of variants (the first whose numbers outside ``[[ … ]]`` clauses are all known is used;
    ``tests/test_rule_templates.py`` holds the shipped rules to at most two)."""
    if isinstance(raw, str):
        return [raw]
    if isinstance(raw, list) and raw and all(isinstance(x, str) for x in raw):
        return list(raw)
    raise _err(path, f"{key} must be a string or a list of alternative strings")


def _str_list(raw, path: str, key: str) -> list[str]:
    """An optional list of strings (``None`` = empty)."""
    if raw is None:
        return []
    if not isinstance(raw, list) or not all(isinstance(x, str) for x in raw):
        raise _err(path, f"{key} must be a list of strings, got {str(raw)[:80]!r}")
    return list(raw)


_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present: the same nodes, 10x faster
MAX_YAML_BYTES = 1024 * 1024  # a rule or case file is a few KB; more is not a rule file
MAX_YAML_NODES = 100_000  # YAML nodes after alias expansion (a rule has a few hundred)
MAX_YAML_DEPTH = 64  # nesting of YAML collections


def bounded_yaml(path: str, text: str | None = None, what: str = "a YAML rule file"):
    """Parse one YAML file of kvdiag's (rules, rule cases) with bounds checked *before* anything is built.

    The file must be a regular file of at most ``MAX_YAML_BYTES`` (a FIFO or ``/dev/zero`` is refused, never read);
    the composed document, with every alias counted as often as it is used, may have at most ``MAX_YAML_NODES``
    nodes and ``MAX_YAML_DEPTH`` levels (a "billion laughs" file of nested aliases is refused in milliseconds instead
    of expanding when a message quotes it). A recursive alias is refused.

    Raises:
        RuleFileError: not a regular file, too large, not UTF-8, not valid YAML, or beyond the bounds above.
    """
    from ..errors import InputError
    from ..fileio import read_bounded

    if text is None:
        try:
            raw_bytes = read_bounded(path, MAX_YAML_BYTES, what)
        except InputError as exc:
            raise RuleFileError(str(exc)) from None
        try:
            text = raw_bytes.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _err(path, f"not UTF-8 text (byte {exc.start}); expected {what}") from None
    elif len(text) > MAX_YAML_BYTES:
        raise _err(path, f"larger than the {MAX_YAML_BYTES // 1024} KiB kvdiag reads for {what}")
    try:
        loader = _YAML_LOADER(text)
    except yaml.YAMLError as exc:  # the reader refuses control characters before parsing starts
        raise _err(path, f"not valid YAML: {str(exc).splitlines()[0]}") from None
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _yaml_size(node, path)
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise _err(path, f"not valid YAML: {str(exc).splitlines()[0]}") from None
    except RecursionError:
        raise _err(path, "YAML nested too deeply") from None
    except (ValueError, OverflowError) as exc:  # an integer of 4,300+ digits, a date out of range
        raise _err(path, f"a value YAML cannot build: {str(exc).split(':')[0][:80]}") from None
    finally:
        loader.dispose()


def _yaml_size(root, path: str) -> int:
    """Nodes of ``root`` with aliases expanded (memoised per node, so counting is linear in the file)."""
    sizes: dict[int, int] = {}
    busy: set[int] = set()

    def size(node, depth: int) -> int:
        if depth > MAX_YAML_DEPTH:
            raise _err(path, f"YAML nested deeper than {MAX_YAML_DEPTH} levels")
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in busy:
            raise _err(path, "a YAML alias refers to itself (a recursive structure is not a rule)")
        busy.add(key)
        n = 1
        if isinstance(node, yaml.SequenceNode):
            n += sum(size(child, depth + 1) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            n += sum(size(k, depth + 1) + size(v, depth + 1) for k, v in node.value)
        busy.discard(key)
        if n > MAX_YAML_NODES:
            raise _err(path, f"YAML expands to more than {MAX_YAML_NODES:,} nodes (aliases repeating aliases?); "
                             "a rule file has a few hundred")
        sizes[key] = n
        return n

    return size(root, 0)


def load_rule(path: str | Path, text: str | None = None) -> Rule:
    """Load and check one rule file.

    Raises:
        RuleFileError: YAML error, unknown key, unknown signal/class/severity, missing docs.
    """
    path = str(path)
    raw = bounded_yaml(path, text)
    if not isinstance(raw, dict):
        raise _err(path, "a rule file must be a YAML mapping")
    unknown = set(raw) - _RULE_KEYS
    if unknown:
        raise _err(path, f"unknown key(s) {sorted(unknown)}")
    for key in ("id", "name", "class", "title", "severity", "when", "message", "doc"):
        if key not in raw:
            raise _err(path, f"missing required key '{key}'")
    if not isinstance(raw["id"], str) or not _ID.match(raw["id"]):
        raise _err(path, f"id must be a string like CAP001 (capital letter, then A-Z 0-9 _ -, at most 32), "
                         f"got {str(raw['id'])[:40]!r}")
    for key in ("name", "title"):
        if not isinstance(raw[key], str) or not raw[key].strip():
            raise _err(path, f"{key} must be a non-empty string")
    if "alert" in raw and (not isinstance(raw["alert"], str) or not _ALERT.match(raw["alert"])):
        raise _err(path, f"alert must be a Prometheus alert name in CamelCase (capital letter, then letters and "
                         f"digits, at most 64), got {str(raw['alert'])[:40]!r}")
    priority = raw.get("priority", 50)
    if isinstance(priority, bool) or not isinstance(priority, int) \
            or not PRIORITY_RANGE[0] <= priority <= PRIORITY_RANGE[1]:
        raise _err(path, f"priority must be a whole number {PRIORITY_RANGE[0]}..{PRIORITY_RANGE[1]}, "
                         f"got {str(priority)[:40]!r}")
    if raw["class"] not in CLASSES:
        raise _err(path, f"unknown class {raw['class']!r}")
    allowed = SEVERITIES if raw["class"] == "healthy" else SEVERITIES[1:]
    if raw["severity"] not in allowed:
        raise _err(path, f"severity must be {' or '.join(allowed)} for class {raw['class']}, got {raw['severity']!r}")
    forecast = raw.get("forecast", False)
    if not isinstance(forecast, bool):
        raise _err(path, f"forecast must be true or false, got {str(forecast)[:40]!r}")
    confidence = raw.get("confidence", "medium")
    if confidence not in CONFIDENCES:
        raise _err(path, f"confidence must be low, medium or high, got {confidence!r}")
    params = raw.get("params") or {}
    if not isinstance(params, dict):
        raise _err(path, "params must be a mapping of name: number")
    for k, v in params.items():
        if not isinstance(k, str):
            raise _err(path, f"params: key {k!r} is not a name")
        if not isinstance(v, str):
            _finite(v, path, f"params.{k}")
    requires: list[tuple[str, ...]] = []
    raw_requires = raw.get("requires") or []
    if not isinstance(raw_requires, list):
        raise _err(path, f"requires must be a list of signal names (or lists of them), got {raw_requires!r}")
    for item in raw_requires:
        group = tuple(item) if isinstance(item, list) else (item,)
        for s in group:
            if not isinstance(s, str) or s not in SIGNALS:
                raise _err(path, f"unknown signal {str(s)[:40]!r} in requires")
        requires.append(group)
    uses = _str_list(raw.get("uses"), path, "uses")
    for s in uses:
        if s not in SIGNALS:
            raise _err(path, f"unknown signal {s!r} in uses")
    doc = raw["doc"]
    if not isinstance(doc, dict) or any(not doc.get(k) for k in _DOC_KEYS):
        raise _err(path, f"doc must give {', '.join(_DOC_KEYS)}")
    evidence = _str_list(raw.get("evidence"), path, "evidence")
    for item in evidence:
        sig, _, agg = item.partition(".")
        if sig not in SIGNALS:
            raise _err(path, f"unknown signal {sig!r} in evidence")
        if agg and agg not in AGGS:
            raise _err(path, f"evidence {item!r}: unknown agg {agg!r}; expected one of {', '.join(AGGS)}")
    raw_remedy = raw.get("remedy") or []
    if not isinstance(raw_remedy, list):
        raise _err(path, "remedy must be a list (one item per fix, each a template or a list of alternatives)")
    message = _alternatives(raw["message"], path, "message")
    quiet = _alternatives(raw.get("quiet") or f"Not firing: {raw['title']}", path, "quiet")
    remedy = [_alternatives(r, path, f"remedy[{i}]") for i, r in enumerate(raw_remedy)]
    for key, alts in [("message", message), ("quiet", quiet)] + [(f"remedy[{i}]", a) for i, a in enumerate(remedy)]:
        for template in alts:
            check_template(template, path, key, params)
    return Rule(id=raw["id"], name=raw["name"], cls=raw["class"], title=raw["title"],
                severity=raw["severity"], priority=priority, confidence=confidence,
                requires=requires, uses=uses, params=params, when=_parse_node(raw["when"], path, params),
                message=message, quiet=quiet, evidence=evidence, remedy=remedy,
                doc=doc, references=_str_list(raw.get("references"), path, "references"), path=path,
                forecast=forecast, alert=raw.get("alert", ""))


def builtin_rules_dir() -> Path:
    """Where the shipped rules are: ``kvdiag/rules`` inside an installed wheel, else ``rules/`` of a checkout."""
    try:
        packaged = resources.files("kvdiag") / "rules"
        if packaged.is_dir():
            return Path(str(packaged))
    except (ModuleNotFoundError, TypeError):
        pass
    return Path(__file__).resolve().parent.parent.parent / "rules"


def yaml_files(folder: Path, what: str = "rules") -> list[Path]:
    """Every ``*.yaml`` and ``*.yml`` under ``folder`` (recursively, sorted).

    Raises:
        RuleFileError: ``folder`` is missing, is a file, or it or a folder inside cannot be read.
    """
    folder = Path(folder)
    if not folder.exists():
        raise RuleFileError(f"{folder}: {what} folder not found")
    if not folder.is_dir():
        raise RuleFileError(f"{folder}: is a file, expected a folder of {what.rstrip('s')} files (*.yaml)")

    def fail(exc: OSError) -> None:
        raise RuleFileError(f"{exc.filename or folder}: cannot read {what} folder: {exc.strerror}")

    out: list[Path] = []
    seen: set[str] = set()
    for root, dirs, files in os.walk(folder, onerror=fail, followlinks=True):
        real = os.path.realpath(root)
        if real in seen:  # a symlink loop
            dirs[:] = []
            continue
        seen.add(real)
        out += [Path(root) / f for f in files if f.endswith((".yaml", ".yml"))]
    return sorted(out)


def load_rules(extra_dirs: list[str] | None = None) -> list[Rule]:
    """Load the shipped rules plus any user rule folders (``*.yaml`` found recursively).

    Raises:
        RuleFileError: a rule file is invalid, a folder is missing, or two rules share an id.
    """
    dirs = [builtin_rules_dir()] + [Path(d) for d in (extra_dirs or [])]
    rules: list[Rule] = []
    seen: dict[str, str] = {}
    for d in dirs:
        found = 0
        for path in yaml_files(d, "rules"):
            if path.parent.name == "cases" or path.name.startswith("_"):
                continue
            found += 1
            rule = load_rule(path)
            if rule.id in seen:
                raise RuleFileError(f"{path}: rule id {rule.id} already defined in {seen[rule.id]}")
            seen[rule.id] = str(path)
            rules.append(rule)
        if not found:  # --rules DIR that holds no rule: a wrong folder, never silently nothing
            raise RuleFileError(f"{d}: no rule files (*.yaml, *.yml) in this folder")
    return rules
