"""What every renderer shares: value formatting, the headline label, the split of firing findings into problems
and side notes. Renderers import this, never each other."""

from __future__ import annotations

import math

from .model import Report


def _fmt_value(value, unit: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and (math.isinf(value) or abs(value) >= 1e15) and unit != "bytes":
        return f"{value:.3g}" + ("" if unit in ("ratio", "count") else f" {unit}")
    if unit == "ratio":
        return f"{value:.1%}"
    if unit == "bytes":
        return f"{value / 2**30:,.2f} GiB"
    if unit in ("tokens", "blocks", "requests", "count"):
        return f"{value:,.0f}" + ("" if unit == "count" else f" {unit}")
    if unit == "x":
        return f"{value:.2f}x"
    return f"{value:,.4g} {unit}"


def headline_label(verdict) -> str:
    """``UNKNOWN`` for an inconclusive verdict (exit 3; the JSON keeps severity ``ok`` as its schema says),
    else the severity in capitals."""
    return "UNKNOWN" if verdict.primary == "inconclusive" else verdict.severity.upper()


def split_notes(report: Report) -> tuple[list, list]:
    """Firing findings to show in full, and the firing ``healthy`` notes to show as one line each.

    Under a problem verdict a note ("the workload shares no prefix", "the usage gauge is split") is context, not
    a second diagnosis: it goes to one line under the evidence. Under a ``healthy`` verdict the notes are the
    finding and are shown in full.
    """
    fired = [f for f in report.findings if f.status == "fires"]
    if report.verdict.primary == "healthy":
        return fired, []
    return [f for f in fired if f.severity != "ok"], [f for f in fired if f.severity == "ok"]


# --- the on-call order (issue 25): verdict, notes, what to change as flags, evidence with each source once ----------
import re  # noqa: E402

_SETTINGS = ("max_num_seqs", "max_num_batched_tokens", "gpu_memory_utilization", "block_size", "max_model_len",
             "tensor_parallel_size", "kv_cache_dtype")
_SETTING_AT = re.compile(r"\b(" + "|".join(_SETTINGS) + r")\b\s+(?:at|to)\s+(fp8|[0-9][0-9,]*(?:\.[0-9]+)?)\b")
_FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]+)(?:[ =](fp8|[0-9][0-9,]*(?:\.[0-9]+)?)\b)?")
_SERVE_FLAGS = {"--" + s.replace("_", "-") for s in _SETTINGS} | {"--enable-prefix-caching", "--no-enable-prefix-caching"}


def flags_of(text: str) -> list[str]:
    """The ``vllm serve`` flags a remedy text proposes, as they are pasted: ``--max-num-seqs 16`` from "cap
    max_num_seqs at 16" or from a quoted ``--max-num-seqs 16``; only flags with a value (a number or fp8), or the
    boolean prefix-caching flags."""
    out = []
    for m in _FLAG.finditer(text):
        flag, value = m.group(1), m.group(2)
        if flag in _SERVE_FLAGS and (value or "prefix-caching" in flag):
            out.append(f"{flag} {value.replace(',', '')}" if value else flag)
    for m in _SETTING_AT.finditer(text):
        out.append(f"--{m.group(1).replace('_', '-')} {m.group(2).replace(',', '')}")
    return list(dict.fromkeys(out))


def changes(report: Report) -> tuple[list[str], list[tuple[str, str]]]:
    """What to change: the flags to paste (the first proposal of each flag, the verdict's own finding first) and
    every remedy line of the firing problem findings as ``(rule_id, text)``, the verdict's finding first."""
    fired, _ = split_notes(report)
    primary = [f for f in fired if f.cls == report.verdict.primary][:1]
    ordered = primary + [f for f in fired if f not in primary]
    flags: dict[str, str] = {}
    lines = []
    for f in ordered:
        for r in f.remedy:
            lines.append((f.rule_id, r))
            for fl in flags_of(r):
                flags.setdefault(fl.split(" ", 1)[0], fl)
    return list(flags.values()), lines


def sources(report: Report) -> tuple[dict[str, int], list[str]]:
    """Every evidence source of the firing findings numbered once, in order of first use: ``({source: n}, [source,
    ...])`` (n from 1)."""
    fired, _ = split_notes(report)
    index: dict[str, int] = {}
    for f in fired:
        for e in f.evidence:
            if e.source not in index:
                index[e.source] = len(index) + 1
    return index, list(index)


def nothing_judged(report: Report) -> bool:
    """No rule fired or was quiet on evidence: the input held none of the signals (a non-vLLM file)."""
    return bool(report.findings) and not any(f.status == "fires" or (f.status == "quiet" and f.on_evidence)
                                             for f in report.findings)


def evidence_items(finding) -> list:
    """A finding's evidence with a repeated number shown once (the same signal and value under two aggregations)."""
    seen, out = set(), []
    for e in finding.evidence:
        key = (e.signal, _fmt_value(e.value, e.unit))
        if key not in seen:
            seen.add(key)
            out.append(e)
    return out
