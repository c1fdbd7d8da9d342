#!/usr/bin/env python3
"""The held-out split of the fresh public-incident corpus (issue 37), ``fixtures/incidents-fresh/``.

A case (a folder ``fixtures/incidents-fresh/NNN-slug`` with an ``expected.yaml``) is *held-out* when the SHA-256
of ``SEED + its thread`` (``corpus_split.thread_key`` of the ``source`` URL) has its first 8 bytes, read big-endian,
in the lower half of the hash space; otherwise it is *tuned*. Hashing the thread, not the folder, puts every paste
of one thread on one side. Unlike ``corpus_split`` there is no always-tuned number range: every fresh case is split.

The seed was chosen on 2026-12-04 before the fresh corpus was gathered; never change it.

Usage: ``python tools/fresh_split.py [--side held-out|tuned] [DIR]`` prints one case folder per line;
``--summary`` prints the counts. ``check(root, old_root)`` lists the corpus's faults (used by
tests/test_fresh_split.py).
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus_split import cases, thread_key  # noqa: E402

SEED = "kvdiag-issue37-fresh-heldout-2026-12-04:"
HELD_OUT_SHARE = 1 / 2
ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DIR = ROOT / "fixtures" / "incidents-fresh"
OLD_DIR = ROOT / "fixtures" / "incidents"
CLASSES = (
    "capacity_pressure", "partial_block_waste", "prefix_cache_eviction", "weights_dont_fit", "startup_kv_capacity",
    "activation_peak_oom", "cuda_graph_oom", "sampler_oom", "encoder_cache_oom", "external_memory_pressure",
    "queueing", "healthy", "not_oom",
)


def source_of(case: Path) -> str:
    expected = yaml.safe_load((case / "expected.yaml").read_text(encoding="utf-8")) or {}
    return str(expected.get("source", case.name))


def side(case: Path) -> str:
    """``held-out`` or ``tuned`` for a fresh case folder (see the module docstring)."""
    digest = hashlib.sha256((SEED + thread_key(source_of(case))).encode()).digest()
    return "held-out" if int.from_bytes(digest[:8], "big") < HELD_OUT_SHARE * 2**64 else "tuned"


def check(root: Path, old_root: Path = OLD_DIR) -> list[str]:
    """One line per fault: a bad expected.yaml, no source URL, an empty vllm.log, a thread of the old corpus."""
    old = {thread_key(source_of(c)) for c in cases(old_root)} if old_root.is_dir() else set()
    faults = []
    for c in cases(root):
        try:
            e = yaml.safe_load((c / "expected.yaml").read_text(encoding="utf-8")) or {}
        except yaml.YAMLError as err:
            faults.append(f"{c}/expected.yaml: not YAML ({err})")
            continue
        if e.get("primary") not in CLASSES:
            faults.append(f"{c}/expected.yaml: primary {e.get('primary')!r} not a class")
        src = str(e.get("source", ""))
        if not src.startswith("http"):
            faults.append(f"{c}/expected.yaml: source {src!r} not a URL")
        elif thread_key(src) in old:
            faults.append(f"{c}: thread {thread_key(src)} already in {old_root}")
        log = c / "vllm.log"
        if not log.is_file() or not log.read_text(encoding="utf-8", errors="replace").strip():
            faults.append(f"{c}/vllm.log: missing or empty")
    return faults


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
