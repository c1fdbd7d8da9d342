#!/usr/bin/env python3
"""Writes the table of the public-incident corpus into fixtures/incidents/README.md (issue 24, must-show 1).

Reads every ``fixtures/incidents/*/expected.yaml`` (the labeller's fields: primary, accept, label_basis,
label_confidence, vllm_version, era, source) and ``tools/corpus_split.py``'s side of each case. The part of the
README above the marker line is kept; the table and the counts below it are written anew.

Usage: ``python tools/incident_table.py [--check]`` (``--check``: exit 1 when the README is not up to date).
"""

from __future__ import annotations

import collections
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import corpus_split  # noqa: E402

ROOT = corpus_split.DEFAULT_DIR
README = ROOT / "README.md"
MARKER = "<!-- table: written by tools/incident_table.py; edit above this line only -->"
RUNTIME = ("capacity_pressure", "partial_block_waste", "prefix_cache_eviction")


def _classes(primary) -> list[str]:
    return list(primary) if isinstance(primary, list) else [str(primary)]


def rows() -> list[dict]:
    out = []
    for case in corpus_split.cases(ROOT):
        e = yaml.safe_load((case / "expected.yaml").read_text(encoding="utf-8")) or {}
        out.append({
            "id": case.name.split("-", 1)[0], "folder": case.name, "class": " / ".join(_classes(e.get("primary"))),
            "accept": ", ".join(str(a) for a in (e.get("accept") or [])),
            "version": str(e.get("vllm_version") or "?").replace("|", "/").replace("\n", " "),
            "era": str(e.get("era") or "?"),
            "confidence": f"{e.get('label_confidence') or e.get('confidence') or '?'} ({e.get('label_basis') or '?'})",
            "source": str(e.get("source") or "?"), "side": corpus_split.side(case),
        })
    return out


def render(rs: list[dict]) -> str:
    lines = [MARKER, "", f"{len(rs)} cases ({sum(r['side'] == 'held-out' for r in rs)} held-out).", ""]
    by_class = collections.Counter(r["class"] for r in rs)
    by_era = collections.Counter(r["era"] for r in rs)
    lines += ["| class | cases |", "|---|---|"] + [f"| `{c}` | {n} |" for c, n in sorted(by_class.items())]
    lines += ["", "| era | cases |", "|---|---|"] + [f"| {c} | {n} |" for c, n in sorted(by_era.items())]
    lines += ["", "| id | class | also accepted | vLLM version | era | label confidence (basis) | split | source |",
              "|---|---|---|---|---|---|---|---|"]
    for r in rs:
        lines.append(f"| [{r['id']}]({r['folder']}/source.md) | `{r['class']}` | {r['accept']} | {r['version']} | "
                     f"{r['era']} | {r['confidence']} | {r['side']} | <{r['source']}> |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    head = README.read_text(encoding="utf-8").split(MARKER, 1)[0] if README.exists() else ""
    text = head + render(rows())
    if "--check" in argv:
        return 0 if README.exists() and README.read_text(encoding="utf-8") == text else 1
    README.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
