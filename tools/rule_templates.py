"""Count the rules' text variants and ``[[ … ]]`` clause branches, and which of them the shipped rule cases render.

    PYTHONPATH=. python tools/rule_templates.py [--rules DIR] [--cases DIR]

Prints one row per rule (message / quiet variants, the most variants of one remedy item, all texts, clause branches,
parts rendered by a case of all parts), then the totals (issue 26: at most 2 variants per text, every part rendered).
"""

from __future__ import annotations

import argparse

from kvdiag.engine.model import load_rules
from kvdiag.engine.runcases import all_cases, rendered_parts, template_parts


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rules", default=None)
    ap.add_argument("--cases", default=None)
    args = ap.parse_args()
    rules = sorted(load_rules(args.rules), key=lambda r: r.id)
    cases = all_cases([args.cases or args.rules] if (args.cases or args.rules) else None)
    parts = template_parts(rules)
    seen = rendered_parts(cases, rules)
    print("| rule | message | quiet | remedy items (most variants) | texts | clause branches | rendered / parts |")
    print("|---|---|---|---|---|---|---|")
    tot = [0, 0, 0, 0]
    for r in rules:
        mine = [k for k in parts if k[0] == r.id]
        texts = len(r.message) + len(r.quiet) + sum(len(a) for a in r.remedy)
        branches = sum(1 for k in mine if k[3])
        got = sum(1 for k in mine if k in seen)
        tot = [tot[0] + texts, tot[1] + branches, tot[2] + got, tot[3] + len(mine)]
        print(f"| {r.id} | {len(r.message)} | {len(r.quiet)} | {len(r.remedy)} ({max(map(len, r.remedy), default=0)})"
              f" | {texts} | {branches} | {got} / {len(mine)} |")
    print(f"| all {len(rules)} | | | | {tot[0]} | {tot[1]} | {tot[2]} / {tot[3]} |")
    for k in sorted(set(parts) - seen):
        print("not rendered:", *k)


if __name__ == "__main__":
    main()
