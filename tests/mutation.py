"""The mutation harness of issue 24 (Must show 3): every catalogued vLLM template rendered (with the render harness
of ``tests/test_catalog_render.py``), then damaged the ways people's pastes damage it, and read by the real log
collector. An entry counts as recognised under a damage when its event shows and every number it carries that the
damage left whole is there with the rendered value (:func:`test_catalog_render.judge`).

Damage kinds (:data:`KINDS`), each drawn per entry from ``random.Random(SEED + kind + entry id)`` (deterministic):

* ``char_changed``: one letter of the template's literal text replaced by another letter;
* ``char_dropped``: one character of the literal text (letter, blank or punctuation) removed;
* ``cut_end``: the line cut at a random point 35-95 % into the message (no ``…``), keeping at least :data:`KEEP`
  characters of the message;
* ``cut_start``: the header and a random 5-50 % of the message's start removed, leaving at least :data:`KEEP`;
* ``wrap``: the headed line wrapped at a random column 40-200 (hard cut or at word boundaries, drawn), the header
  on the first piece only;
* ``exception_wrap``: ``ExceptionName: message`` with no header (the last line of a traceback) wrapped at a random
  column 40-200, so the first piece begins with the exception name (exceptions and asserts; a log message is
  preceded by ``RuntimeError: Worker failed with error '...'``-style ``RuntimeError: ``);
* ``envelope``: the headed line inside a drawn envelope: Docker json-file, CRI, journald
  (``Dec 01 12:00:00 host vllm[812]: ``), ``kubectl logs --prefix`` (``[pod/vllm-0/vllm] ``) or
  ``kubectl logs --timestamps``.

Numbers are expected only where the damage left them whole: a changed / dropped character is always in literal
text (never in a number); a cut keeps the numbers printed wholly on its side (not touching the cut).

``python tools/mutation_figures.py`` measures every entry under every kind and writes docs/mutation.md;
``tests/test_mutation.py`` runs a seeded sample of entries.
"""

from __future__ import annotations

import json
import random
import re
import sys
import textwrap
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import test_catalog_render as R  # noqa: E402  (render, judge: the issue-12 harness)

from kvdiag import catalog  # noqa: E402
from kvdiag.bundle import Bundle  # noqa: E402
from kvdiag.collect.logs import read_logs  # noqa: E402

SEED = "kvdiag-issue24-mutation:"
KINDS = ["char_changed", "char_dropped", "cut_end", "cut_start", "wrap", "exception_wrap", "envelope"]
TARGET = 0.95
KEEP = 30  # a cut leaves at least this many characters of the message (a shorter stub names no message to anyone)
_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def _spans(entry: dict) -> tuple[str, str, list[tuple[int, int, int | None]]]:
    """``(header, text, spans)``: the V1 header, the message text as logged (exception name first for raises),
    and the character spans of ``text`` that are literal (``None``) or placeholder ``i`` values."""
    msg, vals = R.render(entry)
    pre = "" if entry["kind"] in ("log", "repr") else f"{entry['exception']}: "
    spans: list[tuple[int, int, int | None]] = [(0, len(pre), None)] if pre else []
    pos = len(pre)
    for p in catalog.split_template(entry["template"]):
        if isinstance(p, str):
            spans.append((pos, pos + len(p), None))
            pos += len(p)
        else:
            spans.append((pos, pos + len(vals[p][0]), p))
            pos += len(vals[p][0])
    text = (pre + msg).replace("\n", " ")
    src = entry["sources"][0]["file"].rsplit("/", 1)[-1]
    header = f"{R._level(entry)} {R.TS} [{src}:123] "
    return header, text, spans


def _literal_positions(text: str, spans, pre_len: int, letters_only: bool) -> list[int]:
    out = []
    for a, b, ph in spans:
        if ph is not None:
            continue
        for k in range(max(a, pre_len), b):
            ch = text[k]
            if letters_only and not ch.isalpha():
                continue
            out.append(k)
    return out


def damage(entry: dict, kind: str) -> tuple[list[str], set[int] | None] | None:
    """The damaged physical lines of ``entry`` under ``kind`` and the placeholders whose numbers must be read (None =
    all), or None when the kind does not apply (nothing literal to damage)."""
    rng = random.Random(SEED + kind + entry["id"])
    header, text, spans = _spans(entry)
    pre_len = 0 if entry["kind"] in ("log", "repr") else len(entry["exception"]) + 2
    if kind in ("char_changed", "char_dropped"):
        pos = _literal_positions(text, spans, pre_len, kind == "char_changed")
        # never next to a number: a letter glued to a digit changes what the number reads as ('12.34GiB' is fine,
        # '12.34x' is a different token) — the damage is to the phrase, the numbers are still expected
        ph_edges = {a - 1 for a, b, ph in spans if ph is not None} | {b for a, b, ph in spans if ph is not None}
        pos = [k for k in pos if k not in ph_edges]
        if not pos:
            return None
        k = rng.choice(pos)
        if kind == "char_changed":
            old = text[k]
            new = rng.choice([c for c in _LETTERS if c != old.lower()])
            text = text[:k] + (new.upper() if old.isupper() else new) + text[k + 1:]
        else:
            text = text[:k] + text[k + 1:]
        return [header + text], None
    if kind == "cut_end":
        cut = max(int(len(text) * rng.uniform(0.35, 0.95)), min(len(text), pre_len + KEEP))
        keep = {ph for a, b, ph in spans if ph is not None and b < cut}
        return [header + text[:cut]], keep
    if kind == "cut_start":
        cut = min(int(len(text) * rng.uniform(0.05, 0.5)), max(0, len(text) - KEEP))
        keep = {ph for a, b, ph in spans if ph is not None and a > cut}
        return [text[cut:]], keep
    if kind == "wrap":
        width = rng.randint(40, 200)
        flat = header + text
        if rng.random() < 0.5:
            lines = [flat[k:k + width] for k in range(0, len(flat), width)]
        else:
            lines = textwrap.wrap(flat, width, break_long_words=True, break_on_hyphens=False)
        return lines, None
    if kind == "exception_wrap":
        flat = text if pre_len else "RuntimeError: " + text
        width = rng.randint(40, 200)
        if rng.random() < 0.5:
            lines = [flat[k:k + width] for k in range(0, len(flat), width)]
        else:
            lines = textwrap.wrap(flat, width, break_long_words=True, break_on_hyphens=False)
        return lines, None
    if kind == "envelope":
        line = header + text
        form = rng.choice(["docker_json", "cri", "journald", "kubectl_prefix", "kubectl_ts"])
        if form == "docker_json":
            return [json.dumps({"log": line + "\n", "stream": "stdout", "time": "2025-05-06T12:00:00.123456789Z"})], \
                None
        if form == "cri":
            return ["2025-05-06T12:00:00.123456789Z stdout F " + line], None
        if form == "journald":
            return ["May 06 12:00:00 gpu-node-1 vllm[812]: " + line], None
        if form == "kubectl_prefix":
            return ["[pod/vllm-7d9f8b6c5-x2x9q/vllm] " + line], None
        return ["2025-05-06T12:00:00.123456789Z " + line], None
    raise ValueError(kind)


def run_kind(kind: str, entries: list[dict], tmp: Path) -> dict[str, str]:
    """Entry id → reason ('' = recognised) for one damage kind: each damaged entry is one paste (its own log file,
    as a thread quotes one message), read by the real collector."""
    out = {}
    path = tmp / f"mutation-{kind}.log"
    for e in entries:
        got = damage(e, kind)
        if got is None:
            continue
        body, which = got
        path.write_text("\n".join(body) + "\n")
        b = Bundle()
        read_logs(b, [str(path)], year=2025, progress=False)
        obs = [(row[0], row[3], row[4]) for row in b._rows if row[5].startswith("log:")]
        out[e["id"]] = R.judge(e, obs, which)
    return out


def sample_entries(n: int, seed: str = SEED) -> list[dict]:
    cat = catalog.load()
    rng = random.Random(seed + "sample")
    return rng.sample(cat.entries, min(n, len(cat.entries)))


def figures(results: dict[str, dict[str, str]]) -> dict[str, tuple[int, int]]:
    return {k: (sum(1 for v in r.values() if not v), len(r)) for k, r in results.items()}


__all__ = ["KINDS", "TARGET", "damage", "run_kind", "sample_entries", "figures"]
_ = re
