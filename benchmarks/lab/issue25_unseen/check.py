"""Issue 25 must-show 5: kvdiag on lab scenarios generated after the rule was written."""
import csv, json, sys
from pathlib import Path
from kvdiag.analyze import _judge
from kvdiag.bundle import Bundle
from kvdiag.collect.metrics import add_page, parse_page
from kvdiag.engine.model import load_rules
RULES = load_rules(None)
out_dir = Path(sys.argv[1])
rows = []
for case in sorted(p for p in out_dir.iterdir() if (p / "truth.json").exists()):
    truth = json.loads((case / "truth.json").read_text())
    w = truth["windows"]
    wmax = [x["waiting_max"] for x in w]; wmean = [x["waiting_mean"] for x in w]
    pre = truth["totals"]["preemptions"]
    if wmean[-1] >= 5 and wmean[-1] > 2 * wmean[0] and wmax[-1] > wmax[0]:
        lab = "grows"
    elif max(wmax) <= 5 and pre == 0:
        lab = "keeps_up"
    else:
        lab = "between"
    times = {int(r["sample"]): float(r["unix_time"]) for r in csv.DictReader(open(case / "times.csv"))}
    pages = [(times[int(p.stem)], parse_page(p.read_text(), p.name)) for p in sorted((case / "metrics").glob("*.prom"))]
    verdicts = {}
    for name, sel in (("whole", pages), ("last 6 pages", pages[-6:]), ("first 6 pages", pages[:6])):
        b = Bundle()
        for t, f in sel:
            add_page(b, f, f"page@{t:.0f}", t)
        v, _ = _judge(RULES, b)
        verdicts[name] = f"{v.primary}/{v.severity}"
    whole = verdicts["whole"].split("/")[0]
    bad = (lab == "grows" and whole == "healthy") or (lab == "keeps_up" and whole in ("queueing", "capacity_pressure"))
    rows.append((case.name, lab, wmax, pre, verdicts, "BAD" if bad else "ok"))
for r in rows:
    print(f"{r[0]:24} lab={r[1]:9} waiting_max/min={r[2]} preemptions={r[3]} {r[4]} {r[5]}")
print(f"{len(rows)} scenarios, {sum(r[5] == 'BAD' for r in rows)} bad")
