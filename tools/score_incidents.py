#!/usr/bin/env python3
"""Score kvdiag on the public-incident corpus (issue 24): one ``kvdiag analyze`` run per case, its verdict against
the case's ``expected.yaml``.

A case is a folder holding ``vllm.log`` and ``expected.yaml``. The verdict is right when it is the case's
``primary`` or one of its ``accept`` list (the 21 cases bundled before issue 24 may give ``primary`` as a list);
``primary: not_oom`` (a look-alike) is right for ``healthy``, ``inconclusive`` and any verdict that says "not a KV
problem" (:data:`NOT_KV`).

The held-out third (``tools/corpus_split.py``, never changed here) is refused unless ``--held-out`` is given: a
directory contributes only its tuned cases (the held-out ones are counted, never run or read past the split's
``source`` field), a held-out case folder named on the command line is an error (exit 2). With ``--held-out`` only
the held-out cases are scored — the once-at-the-end measurement.

Usage::

    python tools/score_incidents.py fixtures/incidents /work/wt/c1/fixtures/incidents      # tuned side
    python tools/score_incidents.py --held-out fixtures/incidents                          # the owner, once

Prints one line per class (right / cases) and each miss with the verdict and its confidence; ``--json FILE`` writes
the rows. Exit 0 when every case ran (misses are figures, not failures), 2 on bad arguments.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
import json
import os
from pathlib import Path
import subprocess
import sys

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import corpus_split  # noqa: E402  (tools/corpus_split.py: the split, its seed and rule untouched)
import fresh_split  # noqa: E402  (tools/fresh_split.py: the split of fixtures/incidents-fresh, issue 37)


def side_of(case: Path) -> str:
    """The case's side: fresh_split's for a case under an ``incidents-fresh`` folder, corpus_split's otherwise."""
    if case.resolve().parent.name == "incidents-fresh":
        return fresh_split.side(case)
    return corpus_split.side(case)

#: verdicts that say "no KV / GPU-memory failure here" (a right answer for ``primary: not_oom``)
NOT_KV = {"healthy", "inconclusive", "queueing", "not_oom", "not_kv_problem", "throughput_limited",
          "scheduler_limited"}


def expected_of(case: Path) -> tuple[str, set[str]]:
    """``(primary label, verdicts that count as right)`` of a case."""
    data = yaml.safe_load((case / "expected.yaml").read_text(encoding="utf-8")) or {}
    primary = data.get("primary")
    accept = data.get("accept") or []
    if isinstance(accept, str):
        accept = [accept]
    prim = list(primary) if isinstance(primary, list) else [primary]
    ok = {str(p) for p in prim if p} | {str(a) for a in accept if a}
    if "not_oom" in ok:
        ok |= NOT_KV
    return "/".join(str(p) for p in prim), ok


def verdict_of(case: Path, python: str, timeout: float) -> tuple[str, str, str]:
    """``(verdict, confidence, error)`` of ``kvdiag analyze`` on the case's log."""
    env = dict(os.environ)
    root = str(HERE.parent)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    try:
        proc = subprocess.run([python, "-m", "kvdiag", "analyze", "--log", str(case / "vllm.log"), "--format",
                               "json"], capture_output=True, text=True, timeout=timeout, env=env, cwd=root)
    except subprocess.TimeoutExpired:
        return "error", "", f"timed out after {timeout:g} s"
    try:
        v = json.loads(proc.stdout)["verdict"]
        return str(v["primary"]), str(v.get("confidence", "")), ""
    except (ValueError, KeyError, TypeError):
        err = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return "error", "", f"exit {proc.returncode}: {err[:160]}"


def select(paths: list[Path], held_out: bool) -> tuple[list[Path], int, str]:
    """The cases to score from the command line's folders, the count of held-out cases left out, an error."""
    want = "held-out" if held_out else "tuned"
    out: list[Path] = []
    left = 0
    for p in paths:
        if (p / "expected.yaml").is_file():
            s = side_of(p)
            if s != want:
                if not held_out:
                    return [], 0, f"{p}: a held-out case; it is measured once, with --held-out, by the owner"
                continue
            out.append(p)
        elif p.is_dir():
            for c in corpus_split.cases(p):
                if side_of(c) == want:
                    out.append(c)
                else:
                    left += 1
        else:
            return [], 0, f"{p}: not a case folder (no expected.yaml) nor a directory of cases"
    # one case once: the same case folder name in several checkouts (each worktree carries the bundled cases) is
    # the first one given
    seen: dict[str, Path] = {}
    for c in out:
        seen.setdefault(c.name, c)
    return list(seen.values()), left, ""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="+", type=Path, help="case folders or directories of case folders")
    ap.add_argument("--held-out", action="store_true", help="score the held-out third (and only it)")
    ap.add_argument("--python", default=sys.executable, help="interpreter that runs kvdiag")
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--json", type=Path, help="write the per-case rows here")
    args = ap.parse_args(argv)
    cases, left, err = select(args.paths, args.held_out)
    if err:
        print(f"score_incidents: {err}", file=sys.stderr)
        return 2
    if not cases:
        print("score_incidents: no case to score", file=sys.stderr)
        return 2
    rows = []
    per: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for case in cases:
        label, ok = expected_of(case)
        verdict, conf, error = verdict_of(case, args.python, args.timeout)
        right = verdict in ok
        rows.append({"case": str(case), "expected": label, "accept": sorted(ok), "verdict": verdict,
                     "confidence": conf, "right": right, "error": error})
        per[label][1] += 1
        per[label][0] += right
    side = "held-out" if args.held_out else "tuned"
    total = sum(r["right"] for r in rows)
    print(f"{side}: {total}/{len(rows)} right ({100.0 * total / len(rows):.1f} %)"
          + (f"; {left} held-out case(s) left out" if left and not args.held_out else ""))
    for label in sorted(per):
        r, n = per[label]
        print(f"  {label:<28} {r:>3}/{n:<3} {100.0 * r / n:5.1f} %")
    misses = [r for r in rows if not r["right"]]
    if misses:
        print("misses:")
    for r in misses:
        why = f" ({r['error']})" if r["error"] else ""
        print(f"  {Path(r['case']).name}: expected {r['expected']}, got {r['verdict']}"
              f"{' [' + r['confidence'] + ']' if r['confidence'] else ''}{why}")
    high_wrong = [r for r in misses if r["confidence"] == "high"]
    print(f"wrong at confidence high: {len(high_wrong)}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
