"""Fleet benchmark: N vLLM instances × H hours at S seconds, backfilled into a real Prometheus.

Writes the history as OpenMetrics (streamed to disk), loads it with ``promtool tsdb
create-blocks-from openmetrics``, starts Debian's ``prometheus`` on 127.0.0.1, then runs
``kvdiag analyze --prometheus-url`` as a subprocess and prints its wall time and peak RSS next to
the time Prometheus itself needs for the same PromQL queries (replayed with plain HTTP, answers
read but not parsed). Run by hand, never in tests::

    python benchmarks/fleet.py --instances 1000 --hours 6 --step 15
    python benchmarks/fleet.py --instances 100 --hours 6 --keep /tmp/fleet   # keep the TSDB

Targets (issue 4): kvdiag ≤ 20 s and ≤ 1 GB for 1,000 instances × 6 h at 15 s.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from promserver import PrometheusServer, backfill  # noqa: E402

BUCKETS = (0.3, 1.0, 5.0, 30.0, float("inf"))


def behaviour(i: int) -> dict:
    """Every 10th instance in capacity pressure, every 20th restarts mid-window, the rest healthy."""
    if i % 10 == 0:
        return {"usage": 0.98, "waiting": 5, "preempt": 2.0, "queue_s": 20.0, "restart": False}
    if i % 20 == 5:
        return {"usage": 0.96, "waiting": 0, "preempt": 0.0, "queue_s": 0.2, "restart": True}
    return {"usage": 0.55 + (i % 7) * 0.05, "waiting": 0, "preempt": 0.0, "queue_s": 0.2, "restart": False}


def write_history(path: Path, n: int, start: float, steps: int, step: float) -> int:
    """Stream the OpenMetrics history to ``path``; return the number of samples."""
    ts = [f"{start + k * step:.3f}" for k in range(steps)]
    behs = [behaviour(i) for i in range(n)]
    labs = [f'engine="0",instance="vllm-{i:04d}:8000",job="vllm",model_name="m"' for i in range(n)]
    samples = 0
    with open(path, "w", buffering=1 << 22) as out:
        def family(name: str, typ: str, value_of):
            nonlocal samples
            out.write(f"# TYPE vllm:{name} {typ}\n")
            sample = f"vllm:{name}_total" if typ == "counter" else f"vllm:{name}"
            for i in range(n):
                b, lab = behs[i], labs[i]
                out.write("".join(f"{sample}{{{lab}}} {value_of(b, k)} {ts[k]}\n" for k in range(steps)))
                samples += steps

        def counted(b, k):
            return k - steps // 2 if b["restart"] and k >= steps // 2 else k + (steps if b["restart"] else 0)

        family("kv_cache_usage_perc", "gauge", lambda b, k: b["usage"])
        family("num_requests_running", "gauge", lambda b, k: 40)
        family("num_requests_waiting", "gauge", lambda b, k: b["waiting"])
        family("num_preemptions", "counter", lambda b, k: counted(b, k) * b["preempt"])
        family("prefix_cache_queries", "counter", lambda b, k: counted(b, k) * 1000)
        family("prefix_cache_hits", "counter", lambda b, k: counted(b, k) * 400)
        out.write("# TYPE vllm:request_queue_time_seconds histogram\n")
        for i in range(n):
            b, lab = behs[i], labs[i]
            q = b["queue_s"]
            rows = []
            for k in range(steps):
                c = counted(b, k) * 10
                for le in BUCKETS:
                    les = "+Inf" if le == float("inf") else repr(le)
                    rows.append(f'vllm:request_queue_time_seconds_bucket{{{lab},le="{les}"}} '
                                f"{c if q <= le else 0} {ts[k]}\n")
                rows.append(f"vllm:request_queue_time_seconds_count{{{lab}}} {c} {ts[k]}\n")
                rows.append(f"vllm:request_queue_time_seconds_sum{{{lab}}} {c * q} {ts[k]}\n")
            out.write("".join(rows))
            samples += steps * (len(BUCKETS) + 2)
        out.write("# TYPE vllm:cache_config_info gauge\n")
        for i in range(n):
            for k in range(0, steps, 40):
                out.write(f'vllm:cache_config_info{{block_size="16",{labs[i]},num_gpu_blocks="27776"}} 1 {ts[k]}\n')
                samples += 1
        out.write("# EOF\n")
    return samples


def _tree_rss_kib(pid: int) -> int:
    """Resident memory of a process and all its descendants (KiB), from /proc."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            status = (d / "status").read_text()
        except OSError:
            continue
        ppid = int(status.split("PPid:")[1].split()[0])
        children.setdefault(ppid, []).append(int(d.name))
        if "VmRSS:" in status:
            rss[int(d.name)] = int(status.split("VmRSS:")[1].split()[0])
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        total += rss.get(p, 0)
        todo += children.get(p, [])
    return total


def run_measured(cmd: list[str]) -> tuple[subprocess.CompletedProcess, float, int]:
    """Run ``cmd``; return (result, wall seconds, peak RSS of its process tree in KiB, sampled every 0.1 s)."""
    import threading

    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    peak = [0]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], _tree_rss_kib(proc.pid))
            done.wait(0.1)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    out, err = proc.communicate()
    wall = time.monotonic() - t0
    done.set()
    th.join()
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err), wall, peak[0]


def replay_queries(url: str, queries: list[tuple[str, dict]]) -> float:
    """Time the same PromQL queries with plain HTTP (answers read, not parsed)."""
    import requests

    t0 = time.monotonic()
    with requests.Session() as s:
        for path, params in queries:
            r = s.get(url + path, params=params, timeout=600)
            r.raise_for_status()
            _ = r.content
    return time.monotonic() - t0


def capture_queries(url: str, selector: str, start: float, end: float, step: float) -> list[tuple[str, dict]]:
    """The queries ``collect_fleet`` sends (recorded by running it against the server once)."""
    from kvdiag.collect import prometheus as prom

    seen: list[tuple[str, dict]] = []
    orig = prom.PromClient._get

    def spy(self, path, params, **kwargs):
        seen.append((path, dict(params)))
        return orig(self, path, params, **kwargs)

    prom.PromClient._get = spy
    try:
        prom.collect_fleet(url, selector, start, end, step)
    finally:
        prom.PromClient._get = orig
    return seen


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--instances", type=int, default=1000)
    ap.add_argument("--hours", type=float, default=6.0)
    ap.add_argument("--step", type=float, default=15.0)
    ap.add_argument("--keep", default=None, help="work directory to keep (default: a temporary one, removed)")
    args = ap.parse_args()
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="kvdiag-fleet-"))
    work.mkdir(parents=True, exist_ok=True)
    steps = int(args.hours * 3600 / args.step)
    end = (time.time() - 300) // 60 * 60
    start = end - (steps - 1) * args.step
    rows = []
    try:
        om, data = work / "history.om", work / "data"
        if not (data.exists() and any(data.iterdir())):
            t0 = time.monotonic()
            samples = write_history(om, args.instances, start, steps, args.step)
            rows.append(("write OpenMetrics history", f"{time.monotonic() - t0:.1f} s",
                         f"{samples:,} samples, {om.stat().st_size / 2**20:,.0f} MiB"))
            t0 = time.monotonic()
            backfill(om, data, timeout=7200)
            rows.append(("promtool create-blocks-from openmetrics", f"{time.monotonic() - t0:.1f} s", ""))
            om.unlink()
            (work / "window.json").write_text(json.dumps({"start": start, "end": end}))
        else:
            w = json.loads((work / "window.json").read_text())
            start, end = w["start"], w["end"]
        with PrometheusServer(data, ready_timeout=600) as server:
            cmd = [sys.executable, "-m", "kvdiag", "analyze", "--prometheus-url", server.url, "--selector",
                   '{job="vllm"}', "--since", str(start), "--until", str(end), "--step", f"{args.step:g}s",
                   "--timeout", "600s", "--format", "json"]
            proc, wall, peak_kib = run_measured(cmd)
            if proc.returncode not in (0, 1, 2):
                raise SystemExit(f"kvdiag failed ({proc.returncode}): {proc.stderr[-2000:]}")
            report = json.loads(proc.stdout)
            classes: dict[str, int] = {}
            for inst in report["instances"]:
                classes[inst["verdict"]["primary"]] = classes.get(inst["verdict"]["primary"], 0) + 1
            expected_pressure = sum(1 for i in range(args.instances) if i % 10 == 0)
            rows.append(("kvdiag analyze --prometheus-url (wall)", f"{wall:.1f} s", f"exit {proc.returncode}"))
            rows.append(("kvdiag peak RSS (process tree)", f"{peak_kib / 1024:,.0f} MiB",
                         "sum over kvdiag and its judging workers"))
            rows.append(("load average (1 min) at the end", f"{os.getloadavg()[0]:.1f}", "other work on the machine"))
            rows.append(("instances judged", f"{len(report['instances'])}",
                         ", ".join(f"{k} {v}" for k, v in sorted(classes.items()))
                         + f" (expected capacity_pressure {expected_pressure})"))
            queries = capture_queries(server.url, '{job="vllm"}', start, end, args.step)
            prom_time = replay_queries(server.url, queries)
            rows.append((f"Prometheus alone, same {len(queries)} queries", f"{prom_time:.1f} s", "HTTP, not parsed"))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(f"\nkvdiag fleet benchmark: {args.instances} instances × {args.hours:g} h at {args.step:g} s "
          f"({steps} points per series), {os.cpu_count()} CPUs")
    for what, value, note in rows:
        print(f"  {what:45} {value:>12}  {note}")


if __name__ == "__main__":
    main()
