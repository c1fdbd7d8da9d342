#!/usr/bin/env python3
"""Issue 24, Must show 3: the mutation figure per damage kind on every catalogued template (tests/mutation.py).

Usage: ``python tools/mutation_figures.py [--baseline ROOT] [--write docs/mutation.md]``. ``--baseline ROOT`` also
measures the kvdiag tree at ROOT (e.g. ``git archive`` of the commit before the change, unpacked) in a child
process, for an old/new table from the same run. Seeded and deterministic; ~2 minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def measure() -> dict[str, list]:
    sys.path.insert(0, str(ROOT / "tests"))
    import mutation as M
    from kvdiag import catalog

    entries = catalog.load().entries
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for kind in M.KINDS:
            res = M.run_kind(kind, entries, Path(tmp))
            ok = sum(1 for v in res.values() if not v)
            out[kind] = [ok, len(res), sorted((i, v) for i, v in res.items() if v)[:12]]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", type=Path, help="kvdiag tree to measure too (old code)")
    ap.add_argument("--write", type=Path, help="write the Markdown here")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(measure()))
        return 0
    new = measure()
    old = None
    if args.baseline:
        env = dict(os.environ, PYTHONPATH=str(args.baseline))
        proc = subprocess.run([sys.executable, __file__, "--child"], capture_output=True, text=True, env=env,
                              cwd=ROOT)
        old = json.loads(proc.stdout.strip().splitlines()[-1])
    import mutation as M

    rows = ["| damage | recognised | of | fraction |" + (" before issue 24 |" if old else ""),
            "|---|---:|---:|---:|" + ("---:|" if old else "")]
    for kind in M.KINDS:
        ok, n, _ = new[kind]
        cell = f" {old[kind][0] / old[kind][1]:.3f} |" if old else ""
        rows.append(f"| {kind} | {ok} | {n} | {ok / n:.3f} |{cell}")
    text = "\n".join(rows)
    print(text)
    if args.write:
        doc = args.write.read_text() if args.write.exists() else ""
        start, end = "<!-- figures -->", "<!-- /figures -->"
        if start in doc and end in doc:
            doc = doc[:doc.index(start) + len(start)] + "\n" + text + "\n" + doc[doc.index(end):]
            args.write.write_text(doc)
        examples = ["", "Unrecognised examples (first by id, per kind):", ""]
        for kind in M.KINDS:
            for i, why in new[kind][2][:4]:
                examples.append(f"- {kind} `{i}`: {why}")
        print("\n".join(examples))
    return 0


if __name__ == "__main__":
    sys.exit(main())
