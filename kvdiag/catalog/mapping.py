"""Apply the hand-written event table ``event_map.yaml`` to catalogue entries.

The table is the one reviewable place that says which kvdiag event a vLLM message is and which numbers it
carries. It is read by ``tools/vllm_catalog.py`` (which bakes the result into ``vllm_messages.json``) and by the
tests (which check that every rule still matches a catalogued template and every field is a kvdiag signal).
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import yaml

MAP_PATH = Path(__file__).with_name("event_map.yaml")

#: unit of a printed value → factor to kvdiag's base unit (bytes, tokens, blocks, seconds, ratio 0-1, count)
UNITS: dict[str, float] = {"bytes": 1.0, "KiB": 1024.0, "MiB": 1024.0 ** 2, "GiB": 1024.0 ** 3, "GB": 1024.0 ** 3,
                           "tokens": 1.0, "blocks": 1.0, "count": 1.0, "tokens/s": 1.0, "seconds": 1.0, "ms": 1e-3,
                           "ratio": 1.0, "percent": 0.01}


@functools.lru_cache(maxsize=1)
def table() -> dict:
    """The parsed ``event_map.yaml``: ``{"markers": {...}, "proposed": {...}, "rules": [...], "progress": [...]}``.

    Raises:
        ValueError: a rule's regex does not compile, a unit is unknown, or a rule names an event with no marker
            and no numbers (its recognition could not be checked).
    """
    data = yaml.load(MAP_PATH.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # libyaml: 10x faster
    markers = data.get("markers") or {}
    for i, rule in enumerate(data.get("rules") or []):
        try:
            rule["_re"] = re.compile(rule["match"])
            if rule.get("kind"):
                rule["_kind"] = re.compile(rule["kind"])
        except (re.error, KeyError) as e:
            raise ValueError(f"{MAP_PATH.name}: rule {i + 1} ({rule.get('event')}): bad 'match': {e}") from None
        nums = []
        for key, (field, unit) in (rule.get("numbers") or {}).items():
            if unit not in UNITS:
                raise ValueError(f"{MAP_PATH.name}: rule {i + 1} ({rule['event']}): unknown unit {unit!r}")
            nums.append((re.compile(str(key)), field, unit))
        rule["_numbers"] = nums
        if rule["event"] not in markers and not nums and rule["event"] not in (data.get("proposed") or {}):
            raise ValueError(f"{MAP_PATH.name}: rule {i + 1}: event {rule['event']!r} has no marker and no numbers")
    for i, rule in enumerate(data.get("progress") or []):
        rule["_re"] = re.compile(rule["match"])
    return data


def severity(entry: dict) -> str:
    """``error`` (raised, asserted, ERROR/CRITICAL), ``warning`` or ``info`` (INFO/DEBUG, a logged ``__repr__``)."""
    if entry["kind"] == "repr":
        return "info"
    if entry["kind"] != "log":
        return "error"
    lvl = entry.get("level", "info")
    return "error" if lvl in ("error", "critical") else "warning" if lvl == "warning" else "info"


def map_entry(entry: dict) -> dict:
    """``{"event", "rule", "numbers": [{"placeholder": i, "field", "unit"}]}`` for one catalogue message.

    The first rule whose ``match`` regex is found in the template (and whose optional ``kind`` regex matches
    ``kind:level-or-exception``) decides; numbers are assigned to placeholders whose name the key regex finds,
    each placeholder and each field at most once (the first key wins). Without a rule the event is the generic ``{topic}_{severity}``.
    """
    t = table()
    kind = entry["kind"] + ":" + (entry.get("level") or entry.get("exception") or "")
    for rule in t["rules"]:
        if not rule["_re"].search(entry["template"]):
            continue
        if "_kind" in rule and not rule["_kind"].search(kind):
            continue
        numbers, used = [], set()
        fields: set[str] = set()
        for key, field, unit in rule["_numbers"]:
            if field in fields:
                continue  # an earlier key gave this field already (e.g. 'reduced to' before 'from')
            for i, ph in enumerate(entry["placeholders"]):
                if i not in used and ph["type"] == "number" and key.search(ph["name"]):
                    fields.add(field)
                    numbers.append({"placeholder": i, "field": field, "unit": unit})
                    used.add(i)
                    break
        return {"event": rule["event"], "rule": rule["match"], "numbers": numbers}
    return {"event": f"{entry['topic']}_{severity(entry)}", "rule": "", "numbers": []}


def map_progress(entry: dict) -> dict:
    """``{"phase": ...}`` for a progress-bar text (first ``progress`` rule that matches), else ``""``."""
    for rule in table().get("progress") or []:
        if rule["_re"].search(entry["template"]):
            return {"phase": rule["phase"]}
    return {"phase": ""}


def marker(event: str) -> dict | None:
    """How the log parser shows ``event``: ``{"signal": name[, "text": value]}`` from the table's ``markers``
    (existing EVENTS) or ``proposed`` (catalogue-only events: signal ``vllm_message``, text = the event); ``None``
    for an event the table does not know."""
    t = table()
    if event in (t.get("markers") or {}):
        return t["markers"][event]
    if event in (t.get("proposed") or {}) or re.match(r"^[a-z_]+_(?:error|warning|info)$", event):
        return {"signal": "vllm_message", "text": event}
    return None
