#!/usr/bin/env python3
"""Speed of ``kvdiag simulate``'s model against the twin lab, both in one run, on the same workloads.

    nice -n 10 python benchmarks/simulate_speed.py [--n 8] [--twin-python $TWIN_PYTHON] [--keep DIR]

Runs ``--n`` scenarios of benchmarks/simulate/validation.yaml (spread over the table) in the lab with
``benchmarks/lab/forkrun.py`` (one worker: vLLM imported once, then one fork per scenario), then the model on each
case's workload.json with the same setting and step-time constants, and prints per case the lab's own wall time
(``truth.json`` ``generation.wall_seconds``: the simulation, not the import), the model's, and the ratio; last line:
the totals and the overall ratio (target: >= 50). The lab's process wall time (imports included) is printed too, and
CPU times (the lab's process and children, imports included, vs the model's), which a shared machine's load
disturbs less than wall times.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kvdiag.simulate.model import simulate  # noqa: E402
from kvdiag.simulate.workload import load_lab_case  # noqa: E402

TABLE = ROOT / "benchmarks" / "simulate" / "validation.yaml"
FORKRUN = ROOT / "benchmarks" / "lab" / "forkrun.py"
TWIN = Path(os.environ.get("TWIN_PY", ROOT.parent.parent / "shared" / "twin" / "twin.py"))


def main() -> int:
    import yaml

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--twin-python", default=os.environ.get("TWIN_PYTHON", "python3"))
    ap.add_argument("--twin", default=str(TWIN if TWIN.exists() else "/work/shared/twin/twin.py"))
    ap.add_argument("--keep", default=None, help="lab output folder to keep (default: a temporary one)")
    ap.add_argument("--timeout", type=float, default=1200)
    a = ap.parse_args()
    names = list(yaml.safe_load(TABLE.read_text())["scenarios"])
    step = max(1, len(names) // max(1, a.n))
    pick = names[::step][: a.n]
    tmp = None if a.keep else tempfile.TemporaryDirectory(prefix="simspeed-")  # removed at exit
    out = Path(a.keep or tmp.name)
    env = dict(os.environ, VLLM_TARGET_DEVICE="cpu")
    import resource

    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run([a.twin_python, str(FORKRUN), "--twin", a.twin, "--scenarios", str(TABLE), "--out", str(out),
                           "--jobs", "1", *pick], env=env, capture_output=True, text=True, timeout=a.timeout)
    lab_process = time.perf_counter() - t0
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    lab_cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    if proc.returncode not in (0, 1):
        print(proc.stderr[-2000:], file=sys.stderr)
        return 1
    tot_lab = tot_sim = tot_cpu = 0.0
    print(f"{'case':34s} {'lab s':>8s} {'model s':>9s} {'ratio':>7s}")
    for n in pick:
        case = out / n
        if not (case / "truth.json").is_file():
            print(f"{n}: the lab did not finish it", file=sys.stderr)
            continue
        c = load_lab_case(str(case))
        t, tc = time.perf_counter(), time.process_time()
        simulate(c["requests"], c["setting"], c["step_cost"], duration_s=c["duration_s"], start_s=c["start_s"])
        sim = time.perf_counter() - t
        tot_cpu += time.process_time() - tc
        lab = float(c["truth"]["generation"]["wall_seconds"])
        tot_lab += lab
        tot_sim += sim
        print(f"{n:34s} {lab:8.2f} {sim:9.3f} {lab / sim:7.0f}x")
    print(f"total: lab {tot_lab:.1f} s (its process, imports included: {lab_process:.1f} s), model {tot_sim:.2f} s: "
          f"{tot_lab / tot_sim:.0f}x the lab's speed")
    print(f"CPU time (the machine is shared: wall times depend on the load): lab {lab_cpu:.1f} s (its process and "
          f"children, vLLM's import included), model {tot_cpu:.2f} s: {lab_cpu / tot_cpu:.0f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
