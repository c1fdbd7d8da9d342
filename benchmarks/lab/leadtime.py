"""Lead time of kvdiag's capacity-pressure warning on twin-lab cases (issue 13, must show 2).

    python benchmarks/lab/leadtime.py CASE_DIR... [--json OUT.json] [--markdown OUT.md] [--window SECONDS]

Each CASE_DIR is a twin case folder (``metrics/NNNN.prom``, ``times.csv``, ``truth.json``; see shared/twin/README.md).
Its pages are replayed instant by instant in this process: at page k, kvdiag judges the pages 0..k (or the last
``--window`` seconds of them) with their scrape times from ``times.csv`` — exactly what ``kvdiag analyze`` does
with a recording of those pages (the same parser, ``add_page``, derive, rules and verdict), without a subprocess per
instant.

Per case it reports the first instant the verdict is ``capacity_pressure`` (the CAP002 forecast at severity warning,
or CAP001 critical), the first preemption, and the lead time between them. The first preemption is taken as the
earliest moment the data allows: the page *before* the first page where ``vllm:num_preemptions_total`` increased
(the increase happened after that page), or the start of the first ``truth.json`` window with preemptions, whichever
is earlier (vLLM counts a preemption only when the preempted request next emits output, so the counter can trail).
A warning counts as *before* the preemption only at or before that moment; the lead time is that moment minus the
warning's page time.

Cases whose ``truth.json`` counts preemptions are ramps (lead time measured); cases without are steady (any
forecast warning there is a false alarm), except those of a family meant to run out (``family=ramp;`` … in the
description, :data:`RAMP_FAMILIES`) that did not: they are listed apart, with no lead time. Summary: share of ramps warned before the first preemption, lead time
median and p10, steady cases with a warning. JSON on stdout (or ``--json``), a Markdown table with ``--markdown``.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from pathlib import Path

import numpy as np

from kvdiag.analyze import _judge
from kvdiag.bundle import Bundle
from kvdiag.collect.metrics import PageInfo, add_page, parse_page
from kvdiag.engine.model import load_rules


RAMP_FAMILIES = ("ramp", "overload", "closed_over")
"""Families of benchmarks/lab/families.py meant to run out of KV; one that did not preempt has no lead time."""


def _family(truth: dict) -> str | None:
    """``family=NAME;`` at the start of the scenario's description (benchmarks/lab/families.py), else None."""
    desc = str(truth.get("description") or "")
    return desc.split(";", 1)[0].removeprefix("family=") if desc.startswith("family=") else None


def _times(case: Path) -> dict[int, float]:
    with open(case / "times.csv", newline="", encoding="utf-8") as fh:
        return {int(r["sample"]): float(r["unix_time"]) for r in csv.DictReader(fh)}


def _preemptions(families: list) -> float | None:
    for fam in families:
        if fam.name in ("vllm:num_preemptions", "vllm_num_preemptions"):
            vals = [s.value for s in fam.samples if s.name.endswith("_total")]
            if vals:
                return float(sum(vals))
    return None


def replay(case: Path, rules, window: float | None = None) -> dict:
    """Judge ``case`` at every page; returns the per-case record (see the module docstring)."""
    truth = json.loads((case / "truth.json").read_text(encoding="utf-8"))
    times = _times(case)
    pages = []
    for path in sorted((case / "metrics").glob("*.prom")):
        k = int(path.stem)
        if k in times:
            pages.append((times[k], str(path), parse_page(path.read_text(encoding="utf-8"), str(path))))
    pages.sort(key=lambda p: p[0])
    first_warn = first_crit = first_any = None
    forecast_seen = None
    pre_page = None
    prev = None
    eta_at_warn = None
    for k, (t, origin, fams) in enumerate(pages):
        n = _preemptions(fams)
        if pre_page is None and prev is not None and n is not None and n > prev:
            pre_page = k
        prev = n if n is not None else prev
        b = Bundle()
        info = PageInfo()
        for t_i, o_i, f_i in pages[:k + 1]:
            if window is None or t_i >= t - window:
                add_page(b, f_i, o_i, t_i, info)
        v, findings = _judge(rules, b)
        if v.primary == "capacity_pressure":
            if first_any is None:
                first_any = k
            if v.forecast and first_warn is None:
                first_warn = k
                cap2 = next((f for f in findings if f.rule_id == "CAP002"), None)
                eta_at_warn = next((e.value for e in (cap2.evidence if cap2 else [])
                                    if e.signal == "kv_full_eta_seconds"), None)
                forecast_seen = v.summary
            if v.severity == "critical" and first_crit is None:
                first_crit = k
    serve0 = float(truth["clock"]["serving_start_unix"])
    truth_first = next((w["t_start_s"] for w in truth["windows"] if (w.get("preemptions") or 0) > 0), None)
    bounds = []
    if pre_page is not None:
        bounds.append(pages[pre_page - 1][0])
    if truth_first is not None:
        bounds.append(serve0 + float(truth_first))
    first_pre = min(bounds) if bounds else None
    family = _family(truth)
    preempted = (truth["totals"].get("preemptions") or 0) > 0
    ramp = preempted
    kind = "ramp" if preempted else ("ramp without preemption" if family in RAMP_FAMILIES else "steady")
    t_any = pages[first_any][0] if first_any is not None else None
    rec = {
        "case": case.name, "scenario": truth.get("scenario", case.name), "family": family, "kind": kind,
        "truth_class": truth.get("class"), "pages": len(pages),
        "first_capacity_pressure_s": None if t_any is None else round(t_any - serve0, 1),
        "first_verdict": None if first_any is None else ("warning (forecast)" if first_any == first_warn
                                                         else "critical"),
        "first_forecast_s": None if first_warn is None else round(pages[first_warn][0] - serve0, 1),
        "eta_at_first_forecast_s": None if eta_at_warn is None else round(float(eta_at_warn), 0),
        "first_critical_s": None if first_crit is None else round(pages[first_crit][0] - serve0, 1),
        "first_preemption_counter_page_s": None if pre_page is None else round(pages[pre_page][0] - serve0, 1),
        "first_preemption_counter_prev_page_s": None if pre_page is None else round(pages[pre_page - 1][0] - serve0, 1),
        "first_preemption_truth_window_s": truth_first,
        "first_preemption_bound_s": None if first_pre is None else round(first_pre - serve0, 1),
        "forecast_summary": forecast_seen,
    }
    if ramp:
        warned = t_any is not None and first_pre is not None and t_any <= first_pre
        rec["warned_before_preemption"] = bool(warned)
        rec["lead_time_s"] = round(first_pre - t_any, 1) if warned else None
        prev_t = pages[pre_page - 1][0] if pre_page is not None else None  # by the counter alone
        by_counter = t_any is not None and prev_t is not None and t_any <= prev_t
        rec["warned_before_counter"] = bool(by_counter)
        rec["lead_time_counter_s"] = round(prev_t - t_any, 1) if by_counter else None
    else:
        rec["forecast_warning"] = first_warn is not None
        rec["capacity_pressure_verdict"] = first_any is not None
    return rec


def summarize(records: list[dict]) -> dict:
    ramps = [r for r in records if r["kind"] == "ramp"]
    steady = [r for r in records if r["kind"] == "steady"]
    leads = [r["lead_time_s"] for r in ramps if r.get("lead_time_s") is not None]
    counted = [r for r in ramps if r.get("first_preemption_counter_prev_page_s") is not None]
    cleads = [r["lead_time_counter_s"] for r in counted if r.get("lead_time_counter_s") is not None]
    return {
        "ramps": len(ramps),
        "ramps_warned_before_first_preemption": sum(r["warned_before_preemption"] for r in ramps),
        "share_warned": round(sum(r["warned_before_preemption"] for r in ramps) / len(ramps), 3) if ramps else None,
        "lead_time_median_s": float(np.median(leads)) if leads else None,
        "lead_time_p10_s": float(np.percentile(leads, 10)) if leads else None,
        "by_counter_alone": {
            "ramps": len(counted), "warned": sum(r["warned_before_counter"] for r in counted),
            "share_warned": round(sum(r["warned_before_counter"] for r in counted) / len(counted), 3) if counted else None,
            "lead_time_median_s": float(np.median(cleads)) if cleads else None,
            "lead_time_p10_s": float(np.percentile(cleads, 10)) if cleads else None},
        "steady": len(steady),
        "steady_with_forecast_warning": sum(r["forecast_warning"] for r in steady),
        "steady_warned": [r["case"] for r in steady if r["forecast_warning"]],
        "ramps_missed": [r["case"] for r in ramps if not r["warned_before_preemption"]],
        "ramps_without_preemption": [r["case"] for r in records if r["kind"] == "ramp without preemption"],
    }


def markdown(records: list[dict], summary: dict) -> str:
    def f(v):
        return "—" if v is None else (f"{v:g}" if isinstance(v, (int, float)) else str(v))

    lines = ["| case | kind | first capacity_pressure (s) | as | forecast ETA then (s) | first preemption ≥ (s) | "
             "lead (s) | warned before / steady warning |", "|---|---|---|---|---|---|---|---|"]
    for r in records:
        ok = r.get("warned_before_preemption") if r["kind"] == "ramp" else r.get("forecast_warning")
        lines.append(f"| {r['case']} | {r['kind']} | {f(r['first_capacity_pressure_s'])} | {f(r['first_verdict'])} | "
                     f"{f(r['eta_at_first_forecast_s'])} | {f(r['first_preemption_bound_s'])} | "
                     f"{f(r.get('lead_time_s'))} | {'yes' if ok else 'no'} |")
    s = summary
    lines += ["", f"Ramps warned before the first preemption: {s['ramps_warned_before_first_preemption']} of "
                  f"{s['ramps']} ({f(s['share_warned'])}); lead time median {f(s['lead_time_median_s'])} s, p10 "
                  f"{f(s['lead_time_p10_s'])} s (first preemption: the earlier of the page before the counter rose and "
                  f"the start of the first truth minute with one). By the counter alone: "
                  f"{s['by_counter_alone']['warned']} of {s['by_counter_alone']['ramps']} "
                  f"({f(s['by_counter_alone']['share_warned'])}); median {f(s['by_counter_alone']['lead_time_median_s'])} s, "
                  f"p10 {f(s['by_counter_alone']['lead_time_p10_s'])} s. Steady cases with a forecast warning: "
                  f"{s['steady_with_forecast_warning']} of {s['steady']}.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cases", nargs="+", type=Path, help="twin case folders")
    ap.add_argument("--json", type=Path, help="write the JSON here (default: stdout)")
    ap.add_argument("--markdown", type=Path, help="write a Markdown table here")
    ap.add_argument("--window", type=float, default=None, help="judge only the last SECONDS at each instant")
    ap.add_argument("--rules", action="append", help="rule folders (default: the shipped rules)")
    a = ap.parse_args(argv)
    rules = load_rules(a.rules)
    records = []
    for case in a.cases:
        if not (case / "truth.json").is_file() or not (case / "times.csv").is_file():
            print(f"{case}: not a twin case folder (truth.json, times.csv, metrics/ expected)", file=sys.stderr)
            return 2
        records.append(replay(case, rules, a.window))
        r = records[-1]
        print(f"{r['case']}: {r['kind']} first capacity_pressure {r['first_capacity_pressure_s']} s "
              f"({r['first_verdict']}), first preemption ≥ {r['first_preemption_bound_s']} s, lead "
              f"{r.get('lead_time_s')}", file=sys.stderr)
    summary = summarize(records)
    out = json.dumps({"summary": summary, "cases": records}, indent=1)
    if a.json:
        a.json.write_text(out + "\n", encoding="utf-8")
    else:
        print(out)
    if a.markdown:
        a.markdown.write_text(markdown(records, summary), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
