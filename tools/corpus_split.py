#!/usr/bin/env python3
"""The held-out split of the public-incident corpus (issue 24), fixed before any change to the reader or rules.

A case (a folder ``fixtures/incidents/NNN-slug`` with an ``expected.yaml``) is *held-out* when the SHA-256 of
``SEED + its thread`` (the ``source`` URL without its ``#fragment`` or query, lower-cased, no trailing slash)
falls in the lowest third of the hash space. Hashing the thread, not the folder, puts every paste from one thread
on the same side, so a held-out case never shares its thread with a case fixed on. Cases numbered below 100 (the
21 bundled before issue 24, already tuned on) are always ``tuned``.

The seed was chosen on 2026-12-01 before the corpus was gathered; never change it.

Usage: ``python tools/corpus_split.py [--side held-out|tuned] [DIR]`` prints one case folder per line;
``--summary`` prints the counts.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

import yaml

SEED = "kvdiag-issue24-heldout-2026-12-01:"
HELD_OUT_SHARE = 1 / 3
DEFAULT_DIR = Path(__file__).resolve().parent.parent / "fixtures" / "incidents"


def thread_key(url: str) -> str:
    """The thread a source URL points into: no fragment, no query, lower case, no trailing slash."""
    url = url.split("#", 1)[0].split("?", 1)[0].strip().lower().rstrip("/")
    return url


def side(case: Path) -> str:
    """``held-out`` or ``tuned`` for a case folder (see the module docstring)."""
    try:
        number = int(case.name.split("-", 1)[0])
    except ValueError:
        number = 0
    if number < 100:
        return "tuned"
    expected = yaml.safe_load((case / "expected.yaml").read_text(encoding="utf-8")) or {}
    digest = hashlib.sha256((SEED + thread_key(str(expected.get("source", case.name)))).encode()).digest()
    return "held-out" if int.from_bytes(digest[:8], "big") < HELD_OUT_SHARE * 2**64 else "tuned"


def cases(root: Path) -> list[Path]:
    return sorted(p.parent for p in root.glob("*/expected.yaml"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", nargs="?", type=Path, default=DEFAULT_DIR)
    ap.add_argument("--side", choices=("held-out", "tuned"))
    ap.add_argument("--summary", action="store_true")
    args = ap.parse_args(argv)
    rows = [(c, side(c)) for c in cases(args.dir)]
    if args.summary:
        for s in ("tuned", "held-out"):
            print(f"{s}\t{sum(1 for _, x in rows if x == s)}")
        return 0
    for c, s in rows:
        if args.side is None or s == args.side:
            print(c if args.side else f"{s}\t{c}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
