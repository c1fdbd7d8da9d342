"""Accuracy sweep: kvdiag on every scenario of a twin-lab table, four ways, on V1 and V0 names.

Run by hand (never by the test suite)::

    export TWIN_PYTHON=/work/twin-venv/bin/python VLLM_TARGET_DEVICE=cpu
    python benchmarks/lab/sweep.py --scenarios TABLE.yaml --out DIR [--jobs 2] [--only NAME ...]
        [--modes recording,live,prometheus,log] [--report docs/accuracy.md] [--rejudge]
    python benchmarks/lab/sweep.py --out DIR --export-fixtures NAME ... --fixtures fixtures/lab

Stages (each resumable; a re-run does only what is missing):

1. **generate**: every scenario not yet in DIR (a case is complete when ``DIR/NAME/truth.json`` exists) through
   ``benchmarks/lab/forkrun.py`` (vLLM imported once per job; ``--runner twin``: one ``twin.py run NAME`` per
   scenario, ``--jobs`` at a time, each with its own timeout); then ``convert_v0.py`` (``DIR/NAME-v0``, complete
   when its ``NOTICE.txt`` exists). A twin exit of 3 means the scenario's ``checks`` failed: the case is kept and
   the failure noted in ``DIR/generate.jsonl`` (and, from truth.json, in the report).
2. **recording**: ``metrics/NNNN.prom`` + ``times.csv`` → ``recording.om`` (OpenMetrics, every sample stamped
   with its page's Unix time, ``# EOF``), parsed with prometheus-client and written by kvdiag's own
   :class:`kvdiag.record.Recorder`, so the file is what ``kvdiag record`` would have written;
   ``kvdiag analyze --metrics-file recording.om --format json``.
3. **live**: ``serve.py CASE 0 MS`` replays the pages on loopback, one page every ``--page-ms`` (100 ms: time
   compressed 150x for 15 s scrapes), ``kvdiag analyze --metrics-url URL --duration D --interval 100ms``.
4. **prometheus**: every case's recording with ``scenario``/``names`` (and ``instance``/``job``) labels, loaded
   with ``promtool tsdb create-blocks-from openmetrics`` into one TSDB, one ``prometheus`` on 127.0.0.1, then
   ``kvdiag analyze --prometheus-url URL --selector '{scenario="NAME",names="v1"}' --since T0 --until T1 --step S``
   (T0, T1: the first and last page's times; S: the case's scrape interval, so the query grid is on the samples).
5. **log**: ``kvdiag analyze --log vllm.log --format json``.

kvdiag runs in-process (``kvdiag.cli.main``) in a pool of ``--jobs`` worker processes (``--live-jobs`` for the
live mode, which mostly waits), so Python and kvdiag start once per worker, not once per case. Each run's full
JSON report is kept in ``DIR/_reports/``; a summary line per case × mode × names in ``DIR/results.jsonl``
(``--rejudge`` redoes the kvdiag runs of the selected modes after a code change, without regenerating).

The true class comes from ``benchmarks/lab/labeller.py`` (``label(truth) -> (class, reason)``), applied when the
report is written; without that module the sweep falls back to the table's ``truth_class`` and says so.

Bounded: every subprocess has a timeout, every server is stopped (also on Ctrl-C / SIGTERM).
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import contextlib
import csv
import importlib.util
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402  (kvdiag's own dependency)

TWIN_DIR = Path(os.environ.get("TWIN_DIR", "/work/shared/twin"))
LABELLER = ROOT / "benchmarks" / "lab" / "labeller.py"
MODES = ("recording", "live", "prometheus", "log")
NAMES = ("v1", "v0")
CLASSES = ("capacity_pressure", "partial_block_waste", "prefix_cache_eviction", "healthy")
NOT_INCIDENT = ("healthy", "inconclusive")
FAMILY_RE = r"family[=:]\s*([A-Za-z0-9_.-]+)"
LOOKALIKE_RE = r"look-?alike"

TWIN_TIMEOUT = 1800.0     # one scenario (15 simulated minutes of a busy server can take ~100 s; 2 jobs share 2 cores)
CONVERT_TIMEOUT = 120.0
PROMTOOL_TIMEOUT = 900.0
KVDIAG_TIMEOUT = 300.0    # one in-process kvdiag run, enforced by the parent (the worker is killed)
SERVE_READY_TIMEOUT = 20.0


# --- small helpers ---------------------------------------------------------------------------------
def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def case_dir(out: Path, name: str, names: str) -> Path:
    return out / (name if names == "v1" else f"{name}-v0")


def read_times(case: Path) -> list[tuple[int, float]]:
    with open(case / "times.csv", newline="") as f:
        return [(int(r["sample"]), float(r["unix_time"])) for r in csv.DictReader(f)]


def sample_interval(case: Path) -> float:
    """Seconds between the case's pages (truth.json ``clock.sample_interval_s``, else from times.csv)."""
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        return float(json.loads((case / "truth.json").read_text())["clock"]["sample_interval_s"])
    t = read_times(case)
    return round(t[1][1] - t[0][1], 3) if len(t) > 1 else 15.0


def load_table(path: Path, with_defaults: bool = False):
    """The table's ``scenarios`` mapping (and its ``defaults`` with ``with_defaults``)."""
    doc = yaml.safe_load(path.read_text())
    if not isinstance(doc, dict) or not isinstance(doc.get("scenarios"), dict):
        raise SystemExit(f"{path}: expected a twin scenario table (a 'scenarios' mapping)")
    return (doc["scenarios"], doc.get("defaults") or {}) if with_defaults else doc["scenarios"]


def append_jsonl(path: Path, rec: dict, lock=threading.Lock()) -> None:
    with lock, open(path, "a") as f:
        f.write(json.dumps(rec, sort_keys=True) + "\n")


def read_jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if line:
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a line cut by an interrupt
    return out


def load_labeller():
    """``(label, doc, note)``: the labeller's ``label`` and module docstring, or the fallback and why."""
    if LABELLER.exists():
        spec = importlib.util.spec_from_file_location("lab_labeller", LABELLER)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        doc = (mod.__doc__ or mod.label.__doc__ or "").strip()
        return mod.label, doc, ""
    note = (f"{LABELLER.relative_to(ROOT)} is missing: the true class is the scenario table's truth_class "
            "(truth.json 'class'), not a labeller's")
    return (lambda truth: (truth["class"], "truth_class of the scenario table")), "", note


# --- stage 1: generate --------------------------------------------------------------------------------
_RUNNING: set[subprocess.Popen] = set()  # bounded subprocesses of the generate stage, killed on an interrupt
_RUNNING_LOCK = threading.Lock()


_INTERRUPTED = threading.Event()


def _kill_group(proc: subprocess.Popen, wait: bool = True) -> None:
    """SIGKILL a child's whole process group (it was started in its own session), then reap it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    if wait:
        proc.wait()


def _kill_running() -> None:
    _INTERRUPTED.set()
    with _RUNNING_LOCK:
        for proc in list(_RUNNING):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)


def _run_bounded(cmd: list[str], timeout: float, env: dict | None = None, cwd: Path | None = None) -> tuple[int, str, str, float]:
    """Run ``cmd`` in its own session (killed whole on timeout or interrupt) → ``(rc, stdout, stderr, seconds)``."""
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd,
                            start_new_session=True)
    with _RUNNING_LOCK:
        _RUNNING.add(proc)
    try:
        so, se = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc, wait=False)
        so, se = proc.communicate()
        return -9, so, (se or "") + f"\n(timeout after {timeout:.0f} s: killed)", time.monotonic() - t0
    except BaseException:
        _kill_group(proc)
        raise
    finally:
        with _RUNNING_LOCK:
            _RUNNING.discard(proc)
    return proc.returncode, so, se, time.monotonic() - t0


FORKRUN = ROOT / "benchmarks" / "lab" / "forkrun.py"
FORKRUN_LINE = re.compile(r"^\s*\[(\d+)\] (\S+) exit (-?\d+) in ([\d.]+)s")
FORKRUN_PER_CASE_S = 600.0  # the bound of a forkrun batch: this many seconds per case and job, at least an hour


def generate_forkrun(table: Path, todo: list[str], out: Path, jobs: int, twin_python: str) -> None:
    """All ``todo`` scenarios through ``benchmarks/lab/forkrun.py`` (vLLM imported once per job, one fork per
    scenario); its per-case lines go to ``DIR/generate.jsonl``. Bounded as a whole (a hung case stalls its job)."""
    genlog = out / "generate.jsonl"
    bound = max(3600.0, FORKRUN_PER_CASE_S * len(todo) / max(1, jobs))
    cmd = [twin_python, str(FORKRUN), "--scenarios", str(table), "--out", str(out), "--jobs", str(jobs),
           "--twin", str(TWIN_DIR / "twin.py"), *todo]
    env = {**os.environ, "VLLM_TARGET_DEVICE": os.environ.get("VLLM_TARGET_DEVICE", "cpu")}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    with _RUNNING_LOCK:
        _RUNNING.add(proc)
    summaries: dict[str, str] = {}
    failures: dict[str, str] = {}

    def read_stdout():
        for line in proc.stdout:
            name = line.split(":", 1)[0]
            summaries[name] = line.strip()

    th = threading.Thread(target=read_stdout, daemon=True)
    th.start()
    timer = threading.Timer(bound, lambda: os.killpg(proc.pid, signal.SIGKILL))
    timer.start()
    done = 0
    try:
        for line in proc.stderr:
            m = FORKRUN_LINE.match(line)
            if m:
                name, rc, wall = m.group(2), int(m.group(3)), float(m.group(4))
                done += 1
                ok = (out / name / "truth.json").exists()
                rec = {"stage": "twin", "runner": "forkrun", "case": name, "rc": rc, "wall_s": wall, "kept": ok,
                       "summary": summaries.get(name, "")}
                if name in failures:
                    rec["stderr_tail"] = failures[name][-1500:]
                append_jsonl(genlog, rec)
                what = {0: "ok", 3: "checks failed"}.get(rc, f"FAILED rc={rc}")
                log(f"  twin {name}: {what} ({wall:.1f} s) [{done}/{len(todo)}]"
                    f"{'' if ok else ' - no truth.json, case dropped'}")
            elif ": FAILED (" in line:
                failures[line.split(":", 1)[0]] = line.strip()
        proc.wait()
    except BaseException:
        _kill_group(proc)
        raise
    finally:
        timer.cancel()
        with _RUNNING_LOCK:
            _RUNNING.discard(proc)
    if proc.returncode not in (0,) and done < len(todo):
        log(f"  forkrun ended with rc {proc.returncode} after {done} of {len(todo)} case(s)")


def generate(table: Path | None, names: list[str], out: Path, jobs: int, twin_python: str, runner: str = "auto",
             twin: bool = True) -> None:
    """Run the twin for the cases not in ``out`` (unless ``twin`` is false), then convert_v0 where missing."""
    env = {**os.environ, "VLLM_TARGET_DEVICE": os.environ.get("VLLM_TARGET_DEVICE", "cpu")}
    todo = [n for n in names if not (out / n / "truth.json").exists()] if twin else []
    if twin:
        log(f"generate: {len(names) - len(todo)} of {len(names)} case(s) already there, {len(todo)} to run")
    genlog = out / "generate.jsonl"
    if todo and (runner == "forkrun" or (runner == "auto" and FORKRUN.exists())):
        generate_forkrun(table, todo, out, jobs, twin_python)
        todo = []

    def one(name: str) -> None:
        cmd = [twin_python, str(TWIN_DIR / "twin.py"), "--scenarios", str(table), "run", name, "--out", str(out)]
        rc, so, se, wall = _run_bounded(cmd, TWIN_TIMEOUT, env=env)
        if _INTERRUPTED.is_set():
            return  # killed by the interrupt: nothing to record, a re-run makes it again
        ok = (out / name / "truth.json").exists()
        failed = [ln.strip() for ln in se.splitlines() if "CHECK FAILED" in ln]
        rec = {"stage": "twin", "case": name, "rc": rc, "wall_s": round(wall, 1), "kept": ok,
               "summary": (so.strip().splitlines() or [""])[-1], "checks_failed": failed}
        if rc not in (0, 3):
            rec["stderr_tail"] = se[-1500:]
        append_jsonl(genlog, rec)
        what = "ok" if rc == 0 else (f"checks failed: {'; '.join(failed)}" if rc == 3 else f"FAILED rc={rc}")
        log(f"  twin {name}: {what} ({wall:.0f} s){'' if ok else ' - no truth.json, case dropped'}")

    _thread_map(one, todo, jobs)
    conv = [n for n in names if (out / n / "truth.json").exists() and not (out / f"{n}-v0" / "NOTICE.txt").exists()]
    if conv:
        log(f"convert_v0: {len(conv)} case(s)")

    def convert(name: str) -> None:
        rc, so, se, wall = _run_bounded([twin_python, str(TWIN_DIR / "convert_v0.py"), str(out / name)],
                                        CONVERT_TIMEOUT)
        rec = {"stage": "convert_v0", "case": name, "rc": rc, "wall_s": round(wall, 2)}
        if rc != 0:
            rec["stderr_tail"] = se[-1500:]
            log(f"  convert_v0 {name}: FAILED rc={rc}: {se.strip().splitlines()[-1:] }")
        append_jsonl(genlog, rec)

    _thread_map(convert, conv, jobs)


def _thread_map(fn, items: list, jobs: int) -> None:
    """Run ``fn`` over ``items`` with ``jobs`` threads (each call starts a bounded subprocess)."""
    if not items:
        return
    with cf.ThreadPoolExecutor(max_workers=max(1, jobs)) as ex:
        futs = [ex.submit(fn, it) for it in items]
        try:
            for f in cf.as_completed(futs):
                f.result()
        except BaseException:
            for f in futs:
                f.cancel()
            _kill_running()  # the threads' subprocesses end, so the pool's exit does not wait for them
            raise


# --- stage 2: recordings ------------------------------------------------------------------------------
def build_recording(case: Path, extra: dict[str, str] | None = None) -> str:
    """The case's pages as one OpenMetrics text (``kvdiag.record.Recorder``: HELP/TYPE kept, every sample
    stamped with its page's Unix time from times.csv, ``*_created`` left out, ``# EOF``). ``extra`` labels are
    added to every sample (for the shared Prometheus)."""
    from prometheus_client.parser import text_string_to_metric_families

    from kvdiag.record import Recorder

    rec = Recorder()
    for i, t in read_times(case):
        text = (case / "metrics" / f"{i:04d}.prom").read_text()
        fams = list(text_string_to_metric_families(text))
        if extra:
            for fam in fams:
                fam.samples = [s._replace(labels={**s.labels, **extra}) for s in fam.samples]
        rec.add(fams, t)
    return rec.text()


def recording_fresh(case: Path) -> bool:
    path = case / "recording.om"
    return path.exists() and path.stat().st_mtime >= (case / "times.csv").stat().st_mtime


def task_build(case: str) -> dict:
    try:
        ensure_recording(Path(case))
        return {}
    except Exception as exc:  # noqa: BLE001 - reported by the parent
        return {"error": f"{type(exc).__name__}: {exc}"}


def ensure_recording(case: Path) -> Path:
    path = case / "recording.om"
    if not recording_fresh(case):
        tmp = path.with_suffix(".om.tmp")
        tmp.write_text(build_recording(case))
        tmp.replace(path)
    return path


# --- kvdiag in a worker process ---------------------------------------------------------------------------
def _worker_init() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides; a cut-short window must not be cached
    # everything a run imports lazily, once per worker: a live run's first scrape must not wait for pandas
    import kvdiag.analyze  # noqa: F401
    import kvdiag.cli  # noqa: F401
    import kvdiag.collect.metrics  # noqa: F401
    import kvdiag.collect.prometheus  # noqa: F401
    import kvdiag.export  # noqa: F401
    import kvdiag.report.render  # noqa: F401


def _kvdiag(argv: list[str], report_path: str) -> dict:
    """Run ``kvdiag ARGV --output report_path`` in this process; a summary of the result."""
    from kvdiag.cli import main

    err = io.StringIO()
    t0 = time.monotonic()
    Path(report_path).unlink(missing_ok=True)
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            rc = main([*argv, "--output", report_path])
    except BaseException as exc:  # noqa: BLE001 - a crash is a result here
        import traceback

        rc = -1
        err.write("".join(traceback.format_exception(exc))[-3000:])
    res = {"rc": rc, "seconds": round(time.monotonic() - t0, 3), "stderr": err.getvalue()[-2000:]}
    try:
        rep = json.loads(Path(report_path).read_text())
    except (OSError, ValueError):
        res.update(primary="(error)", severity="", confidence="", secondary=[], message="", fired=[])
        return res
    v = rep.get("verdict", {})
    fired = [f for f in rep.get("findings", []) if f.get("status") == "fires"]
    msg = next((f.get("message", "") for f in fired if f.get("class") == v.get("primary")), "")
    res.update(primary=v.get("primary", ""), severity=v.get("severity", ""), confidence=v.get("confidence", ""),
               secondary=v.get("secondary", []), summary=v.get("summary", "")[:300], message=msg[:400],
               fired=[f"{f.get('rule_id')}:{f.get('class')}:{f.get('severity')}" for f in fired],
               kvdiag_version=rep.get("kvdiag_version", ""),
               records=sum(int(i.get("records") or 0) for i in rep.get("inputs", [])))
    if rep.get("instances"):
        res["instances"] = len(rep["instances"])
        errs = [i.get("error") for i in rep["instances"] if i.get("error")]
        if errs:
            res["instance_errors"] = errs[:3]
    return res


def task_recording(case: str, report: str) -> dict:
    return _kvdiag(["analyze", "--metrics-file", str(Path(case) / "recording.om"), "--format", "json"], report)


def task_log(case: str, report: str) -> dict:
    return _kvdiag(["analyze", "--log", str(Path(case) / "vllm.log"), "--format", "json"], report)


def task_prometheus(case: str, report: str, url: str, selector: str, since: str, until: str, step: str) -> dict:
    return _kvdiag(["analyze", "--prometheus-url", url, "--selector", selector, "--since", since, "--until", until,
                    "--step", step, "--format", "json"], report)


def task_live(case: str, report: str, page_ms: float, tries: int = 3) -> dict:
    """Replay the case with serve.py and scrape it live; when kvdiag fell behind the page clock (fewer scrapes
    than pages: a loaded machine), again with pages twice as long, up to ``tries`` times."""
    res: dict = {}
    for k in range(tries):
        res = _live_once(case, report, page_ms * 2 ** k)
        res["page_ms"] = page_ms * 2 ** k
        res["tries"] = k + 1
        if res.get("primary") == "(error)" or res.get("records", 0) >= res.get("pages", 0):
            break
    return res


def _live_once(case: str, report: str, page_ms: float) -> dict:
    """Replay the case with serve.py (free loopback port, one page every ``page_ms``) and scrape it live."""
    import select

    n_pages = len(list((Path(case) / "metrics").glob("*.prom")))
    proc = subprocess.Popen([sys.executable, str(TWIN_DIR / "serve.py"), case, "0", str(page_ms), "--grace", "15"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + SERVE_READY_TIMEOUT
        line = ""
        while time.monotonic() < deadline and not line.startswith("ready"):
            r, _, _ = select.select([proc.stdout], [], [], 0.5)
            if r:
                line = proc.stdout.readline()
                if not line:
                    break
        if not line.startswith("ready"):
            return {"rc": -1, "seconds": 0.0, "stderr": f"serve.py not ready: {line!r} {proc.poll()}",
                    "primary": "(error)", "severity": "", "confidence": "", "secondary": [], "message": "",
                    "fired": []}
        url = line.split()[1].rstrip("/") + "/metrics"
        time.sleep(page_ms / 5000.0)  # scrape k lands a fifth into page k: 80 % of a page of slack for lateness
        # exactly n_pages scrapes: kvdiag stops when the next one would pass the window (tolerates 90 % lateness)
        duration = (n_pages - 1) * page_ms / 1000.0 + 0.9 * page_ms / 1000.0
        res = _kvdiag(["analyze", "--metrics-url", url, "--duration", f"{duration * 1000:.0f}ms",
                       "--interval", f"{page_ms:.0f}ms", "--format", "json"], report)
        res["pages"] = n_pages
        return res
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        for s in (proc.stdout, proc.stderr):
            s.close()


def _error(rc: int, why: str) -> dict:
    return {"rc": rc, "seconds": 0.0, "stderr": why, "primary": "(error)", "severity": "", "confidence": "",
            "secondary": [], "message": "", "fired": []}


class Pool:
    """A process pool of kvdiag workers with a per-task deadline (a stuck worker is killed and replaced)."""

    def __init__(self, workers: int) -> None:
        self.workers = max(1, workers)
        self.ex = self._new()

    def _new(self) -> cf.ProcessPoolExecutor:
        return cf.ProcessPoolExecutor(max_workers=self.workers, initializer=_worker_init, max_tasks_per_child=200)

    def kill(self) -> None:
        procs = list((getattr(self.ex, "_processes", None) or {}).values())
        self.ex.shutdown(wait=False, cancel_futures=True)
        for p in procs:  # SIGTERM first: kvdiag ends its run and task_live stops its replay server
            with contextlib.suppress(Exception):
                p.terminate()
        deadline = time.monotonic() + 3.0
        for p in procs:
            with contextlib.suppress(Exception):
                p.join(max(0.0, deadline - time.monotonic()))
                if p.is_alive():
                    p.kill()

    def run(self, jobs: list[tuple], on_done, timeout: float = KVDIAG_TIMEOUT, isolate: bool = False) -> None:
        """``jobs``: ``(key, fn, args)``; ``on_done(key, result)`` in the parent as each finishes.

        A run over ``timeout`` gets an error result (its worker is killed, the pool replaced). When a worker dies
        (crash, OOM kill) every run the pool held fails: the ones it had started (the first unfinished, in submission
        order) are run again one at a time in a pool of one (``isolate``), where a run that kills its worker again
        gets an error result; the others go to a new pool."""
        pending = list(jobs)
        suspects: list[tuple] = []
        while pending:
            futs = {self.ex.submit(fn, *args): (key, fn, args) for key, fn, args in pending}
            pending = []
            started: dict = {}
            not_done = set(futs)
            try:
                while not_done:
                    done, not_done = cf.wait(not_done, timeout=1.0, return_when=cf.FIRST_COMPLETED)
                    now = time.monotonic()
                    broken, broken_alone = [], False
                    for f in done:
                        key, fn, args = futs[f]
                        try:
                            res = f.result()
                        except cf.process.BrokenProcessPool as exc:  # a worker died (crash, OOM kill)
                            if not isolate:
                                broken.append((key, fn, args))
                                continue
                            res = _error(-1, f"the worker died on this run alone: {exc}")
                            broken_alone = True
                        on_done(key, res)
                    if isolate and broken_alone:
                        self.kill()
                        self.ex = self._new()
                        pending = [futs[f] for f in not_done]
                        break
                    if broken:  # runs go to the workers in submission order: the first few unfinished are suspects
                        left = [job for f, job in futs.items() if f in not_done or job in broken]
                        n_sus = self.workers + 1  # the executor's workers + its one queued call
                        suspects += left[:n_sus]
                        pending = left[n_sus:]
                        self.kill()
                        self.ex = self._new()
                        break
                    for f in not_done:
                        if f.running():
                            started.setdefault(f, now)
                    stuck = [f for f, t in started.items() if f in not_done and now - t > timeout]
                    if stuck:
                        for f in stuck:
                            on_done(futs[f][0], _error(-9, f"timeout after {timeout:.0f} s"))
                        pending = [futs[f] for f in not_done if f not in stuck]
                        self.kill()
                        self.ex = self._new()
                        break
            except BaseException:
                self.kill()
                raise
        if suspects:
            log(f"  a worker died: {len(suspects)} run(s) again, one at a time")
            solo = Pool(1)
            try:
                for job in suspects:
                    solo.run([job], on_done, timeout, isolate=True)
            finally:
                solo.kill()

    def close(self) -> None:
        self.ex.shutdown(wait=True, cancel_futures=True)


# --- stage 4: Prometheus --------------------------------------------------------------------------------
def labelled_families(recording: Path, extra: dict[str, str]) -> list[tuple[str, list[str], list[str]]]:
    """A recording written by :class:`kvdiag.record.Recorder` (one block per family: ``# HELP``/``# TYPE``/``# UNIT``
    lines, then its samples) as ``[(family, header lines, sample lines)]``, ``extra`` labels put first on every
    sample. Only our own writer's layout is read here; the pages themselves were parsed by prometheus-client."""
    lab = ",".join(f'{k}="{v}"' for k, v in extra.items())
    fams: list[tuple[str, list[str], list[str]]] = []
    for line in recording.read_text().splitlines():
        if not line:
            continue
        if line.startswith("#"):
            parts = line.split(" ", 3)
            if parts[1] == "EOF":
                break
            if not fams or fams[-1][0] != parts[2] or fams[-1][2]:
                fams.append((parts[2], [], []))
            fams[-1][1].append(line)
            continue
        cut = min((i for i in (line.find("{"), line.find(" ")) if i >= 0))
        if line[cut] == "{":
            fams[-1][2].append(f"{line[:cut]}{{{lab},{line[cut + 1:]}" if line[cut + 1] != "}" else
                               f"{line[:cut]}{{{lab}{line[cut + 1:]}")
        else:
            fams[-1][2].append(f"{line[:cut]}{{{lab}}}{line[cut:]}")
    return fams


def prometheus_load(out: Path, cases: list[tuple[str, str]], batch: int = 50) -> Path:
    """Backfill ``(name, names)`` recordings not yet loaded into ``DIR/_prom/tsdb``; returns the TSDB path.

    Each batch is one OpenMetrics file (every family once, its samples from all the batch's cases), labels
    ``scenario``, ``names``, ``instance``, ``job`` added, loaded with ``promtool tsdb create-blocks-from openmetrics``.
    """
    sys.path.insert(0, str(ROOT / "tests"))
    from promserver import PROMTOOL

    pdir = out / "_prom"
    tsdb = pdir / "tsdb"
    tsdb.mkdir(parents=True, exist_ok=True)
    loaded_path = pdir / "loaded.txt"
    loaded = set(loaded_path.read_text().split()) if loaded_path.exists() else set()
    todo = [(n, nm) for n, nm in cases if f"{n}/{nm}" not in loaded]
    log(f"prometheus: {len(cases) - len(todo)} recording(s) already loaded, {len(todo)} to backfill")
    for i in range(0, len(todo), batch):
        part = todo[i:i + batch]
        merged: dict[str, tuple[list[str], list[str]]] = {}
        for name, names in part:
            extra = {"scenario": name, "names": names, "instance": f"twin-{name}:8000", "job": "vllm"}
            for fam, header, samples in labelled_families(ensure_recording(case_dir(out, name, names)), extra):
                entry = merged.setdefault(fam, (header, []))
                entry[1].extend(samples)
        om = pdir / "batch.om"
        with open(om, "w") as f:
            for header, samples in merged.values():
                f.write("\n".join(header) + "\n")
                if samples:
                    f.write("\n".join(samples) + "\n")
            f.write("# EOF\n")
        rc, so, se, wall = _run_bounded([PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", str(om), str(tsdb)],
                                        PROMTOOL_TIMEOUT)
        if rc != 0:
            raise SystemExit(f"promtool failed on {om}: {se[-2000:]}")
        with open(loaded_path, "a") as f:
            f.write("".join(f"{n}/{nm}\n" for n, nm in part))
        log(f"  backfilled {i + len(part)}/{len(todo)} ({wall:.1f} s of promtool for {len(part)})")
        om.unlink()
    return tsdb


# --- the sweep ---------------------------------------------------------------------------------------------
def result_key(r: dict) -> tuple[str, str, str]:
    return r["case"], r["mode"], r["names"]


def truth_mtime(out: Path, name: str, names: str) -> float | None:
    p = case_dir(out, name, names) / "truth.json"
    return round(p.stat().st_mtime, 3) if p.exists() else None


def current(out: Path, r: dict) -> bool:
    """A result still describes its case (not made before the case was generated again)."""
    return r.get("truth_mtime") is None or r["truth_mtime"] == truth_mtime(out, r["case"], r["names"])


def run_modes(out: Path, names: list[str], modes: list[str], jobs: int, live_jobs: int, page_ms: float,
              rejudge: bool, stages: dict) -> None:
    results_path = out / "results.jsonl"
    last = {result_key(r): r for r in read_jsonl(results_path)}
    have = {k for k, r in last.items() if current(out, r)} if not rejudge else set()
    rep_dir = out / "_reports"
    rep_dir.mkdir(exist_ok=True)
    present = [(n, nm) for n in names for nm in NAMES if (case_dir(out, n, nm) / "truth.json").exists()
               and (nm == "v1" or (case_dir(out, n, nm) / "NOTICE.txt").exists())]

    def done(key, res):
        name, mode, nm = key
        res.update(case=name, mode=mode, names=nm, at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                   truth_mtime=truth_mtime(out, name, nm))
        append_jsonl(results_path, res)
        if res.get("primary") == "(error)":
            log(f"  {mode} {name} {nm}: ERROR rc={res['rc']}: {res['stderr'].strip().splitlines()[-1:]}")

    def todo(mode):
        return [(n, nm) for n, nm in present if (n, mode, nm) not in have]

    pool = Pool(jobs)
    try:
        if "recording" in modes or "prometheus" in modes:
            t0 = time.monotonic()
            build = [(n, nm) for n, nm in present if not recording_fresh(case_dir(out, n, nm))]
            log(f"recordings: {len(present) - len(build)} there, {len(build)} to build")

            def built(key, res):
                if res.get("error"):
                    log(f"  recording of {key[0]} {key[2]}: {res['error']}")
            pool.run([((n, "build", nm), task_build, (str(case_dir(out, n, nm)),)) for n, nm in build], built)
            stages["build recordings"] = (time.monotonic() - t0, len(build))
        for mode, fn in (("log", task_log), ("recording", task_recording)):
            if mode not in modes:
                continue
            items = todo(mode)
            log(f"{mode}: {len(items)} run(s)")
            t0 = time.monotonic()
            pool.run([((n, mode, nm), fn, (str(case_dir(out, n, nm)), str(rep_dir / f"{n}.{nm}.{mode}.json")))
                      for n, nm in items], done)
            stages[mode] = (time.monotonic() - t0, len(items))
        if "prometheus" in modes and todo("prometheus"):
            items = todo("prometheus")
            t0 = time.monotonic()
            tsdb = prometheus_load(out, present)
            stages["prometheus backfill"] = (time.monotonic() - t0, len(present))
            from promserver import PrometheusServer

            log(f"prometheus: starting on {tsdb}")
            t0 = time.monotonic()
            with PrometheusServer(tsdb, ready_timeout=300) as prom:
                stages["prometheus start"] = (time.monotonic() - t0, 1)
                log(f"prometheus: {prom.url} ready ({time.monotonic() - t0:.1f} s); {len(items)} run(s)")
                t0 = time.monotonic()
                jobs_ = []
                for n, nm in items:
                    times = read_times(case_dir(out, n, nm))
                    # the query_range grid on the samples: from the first page to the last, step = the scrape
                    # interval (a grid off the samples reads each point's predecessor and never the last page)
                    since, until = f"{times[0][1]:.3f}", f"{times[-1][1]:.3f}"
                    step = f"{sample_interval(case_dir(out, n, nm)):g}s"
                    sel = f'{{scenario="{n}",names="{nm}"}}'
                    jobs_.append(((n, "prometheus", nm), task_prometheus,
                                  (str(case_dir(out, n, nm)), str(rep_dir / f"{n}.{nm}.prometheus.json"),
                                   prom.url, sel, since, until, step)))
                pool.run(jobs_, done)
                stages["prometheus"] = (time.monotonic() - t0, len(items))
            log("prometheus: stopped")
    finally:
        pool.kill()
    if "live" in modes:
        items = todo("live")
        log(f"live: {len(items)} run(s), {live_jobs} at a time, one page every {page_ms:g} ms")
        t0 = time.monotonic()
        lpool = Pool(live_jobs)
        try:
            lpool.run([((n, "live", nm), task_live, (str(case_dir(out, n, nm)),
                                                     str(rep_dir / f"{n}.{nm}.live.json"), page_ms))
                       for n, nm in items], done)
        finally:
            lpool.kill()
        stages["live"] = (time.monotonic() - t0, len(items))


# --- report ------------------------------------------------------------------------------------------------
def family_of(truth: dict, family_re: str) -> str:
    if truth.get("family"):
        return str(truth["family"])
    m = re.search(family_re, truth.get("description", "") or "")
    if m:
        return m.group(1)
    return re.sub(r"(?:[_-](?:s(?:eed)?)?\d+)+$", "", truth.get("scenario", "?"))  # name without its seed/index


def is_lookalike(truth: dict, lookalike_re: str) -> bool:
    if isinstance(truth.get("lookalike"), bool):
        return truth["lookalike"]
    return bool(re.search(lookalike_re, truth.get("description", "") or "", re.IGNORECASE))


def truth_figures(truth: dict) -> dict:
    t = truth.get("totals", {})
    q = t.get("prefix_cache_queries_tokens") or 0
    miss = t.get("prefix_tokens_missed_after_eviction")
    return {"usage_peak": truth.get("block_usage", {}).get("peak"),
            "occupancy": truth.get("token_occupancy", {}).get("mean"),
            "preemptions": t.get("preemptions"),
            "waiting_peak": truth.get("peaks", {}).get("waiting"),
            "hit_rate": t.get("prefix_cache_hit_rate"),
            "evict_miss_share": (miss / q) if (miss is not None and q) else (0.0 if miss is not None else None)}


def _f(v, nd=2) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.{nd}f}"
    return str(v)


def _md(s: str) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def _pct(a: int, b: int) -> str:
    return f"{100.0 * a / b:.1f} %" if b else "–"


def _quantile(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def write_report(out: Path, names: list[str], path: Path, family_re: str, lookalike_re: str, table: str,
                 argv: list[str]) -> dict:
    label, label_doc, label_note = load_labeller()
    cases = {}
    for n in names:
        tp = out / n / "truth.json"
        if not tp.exists():
            continue
        truth = json.loads(tp.read_text())
        try:
            cls, why = label(truth)
        except Exception as exc:  # noqa: BLE001 - say which case the labeller could not judge
            cls, why = "(labeller error)", f"{type(exc).__name__}: {exc}"
        cases[n] = {"truth": truth, "class": cls, "reason": why, "family": family_of(truth, family_re),
                    "lookalike": is_lookalike(truth, lookalike_re), "figures": truth_figures(truth),
                    "checks_failed": [f"{c.get('check')} (value {c.get('lhs_value')})"
                                      for c in truth.get("checks", []) if not c.get("ok")]}
    latest: dict[tuple, dict] = {}
    for r in read_jsonl(out / "results.jsonl"):
        if r.get("case") in cases:
            latest[result_key(r)] = r
    latest = {k: r for k, r in latest.items() if current(out, r)}
    gen = {}
    for r in read_jsonl(out / "generate.jsonl"):
        if r.get("stage") == "twin" and r.get("case") in cases:
            gen[r["case"]] = r
    combos = [(m, nm) for m in MODES for nm in NAMES if any(k[1] == m and k[2] == nm for k in latest)]
    L: list[str] = []
    w = L.append
    w("# kvdiag accuracy on the twin lab")
    w("")
    w("Written by `benchmarks/lab/sweep.py` (run by hand; regenerated whole on every run). "
      f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; scenario table `{table}`; "
      f"{len(cases)} scenario(s) with a truth.json in `{out}`.")
    versions = sorted({r.get("kvdiag_version", "") for r in latest.values() if r.get("kvdiag_version")})
    w(f"kvdiag version(s) judged: {', '.join(versions) or '–'}. Command: `python benchmarks/lab/sweep.py "
      f"{' '.join(argv)}`.")
    w("")
    w("Cases come from the twin lab (`shared/twin/`: vLLM 0.33.0's own V1 scheduler, KV-cache manager, stat "
      "loggers and Prometheus exposition, in simulated time); `V0` is the same case renamed by the lab's "
      "`convert_v0.py` (our transformation, not vLLM output). Modes:")
    w("")
    w("- **recording**: the pages as one OpenMetrics file (written by kvdiag's own `Recorder`, as `kvdiag record` "
      "would), `kvdiag analyze --metrics-file`.")
    w("- **live**: the lab's `serve.py` replays the pages on loopback, one page every 100 ms, and "
      "`kvdiag analyze --metrics-url --interval 100ms` scrapes them: **time is compressed** (a 15 s scrape "
      "interval becomes 100 ms, 150x), so rates per second seen live are 150x the simulated ones.")
    w("- **prometheus**: all recordings backfilled with `promtool tsdb create-blocks-from openmetrics` into one "
      "real Prometheus (labels `scenario`, `names`, `instance`, `job`), "
      "`kvdiag analyze --prometheus-url --selector '{scenario=\"NAME\",names=\"v1\"}' --since T0 --until T1 --step S`, "
      "T0 and T1 the first and last page's times and S the case's scrape interval, so the query grid falls on the "
      "samples.")
    w("- **log**: `kvdiag analyze --log vllm.log` alone (a post-mortem without metrics; reported separately).")
    w("")
    w("## How the true class is decided")
    w("")
    if label_note:
        w(f"**{label_note}.**")
        w("")
    if label_doc:
        w("From `benchmarks/lab/labeller.py`:")
        w("")
        w("```text")
        w(label_doc)
        w("```")
        w("")
    w("## Scenarios")
    w("")
    by_class = Counter(c["class"] for c in cases.values())
    w("| true class | scenarios |")
    w("| --- | ---: |")
    for cls in sorted(by_class, key=lambda c: (CLASSES.index(c) if c in CLASSES else 99, c)):
        w(f"| {cls} | {by_class[cls]} |")
    w(f"| look-alikes (healthy truth, incident shape) | {sum(c['lookalike'] for c in cases.values())} |")
    w("")
    fams: dict[str, list[str]] = defaultdict(list)
    for n, c in cases.items():
        fams[c["family"]].append(n)
    w("| family | scenarios | true classes | look-alike | twin checks failed |")
    w("| --- | ---: | --- | --- | ---: |")
    for fam in sorted(fams):
        ns = fams[fam]
        cl = Counter(cases[n]["class"] for n in ns)
        failed = sum(1 for n in ns if cases[n]["checks_failed"])
        look = sum(cases[n]["lookalike"] for n in ns)
        w(f"| {fam} | {len(ns)} | {', '.join(f'{k} {v}' for k, v in sorted(cl.items()))} | "
          f"{look if look else ''} | {failed if failed else ''} |")
    w("")
    bad_checks = sorted(n for n, c in cases.items() if c["checks_failed"])
    if bad_checks:
        w("Scenarios whose own `checks` failed (truth.json; the twin exits 3): the truth did not show what the table "
          "claims. The case is kept and judged by the labeller from its truth:")
        w("")
        for n in bad_checks:
            w(f"- `{n}` (labelled {cases[n]['class']}): {_md('; '.join(cases[n]['checks_failed']))}")
        w("")
    crashed = sorted((n, r) for n, r in gen.items() if r.get("rc") not in (0, 3, None))
    if crashed:
        w("Twin runs that failed (kept only if they wrote truth.json):")
        w("")
        for n, r in crashed:
            w(f"- `{n}`: rc {r['rc']}; {_md(r.get('stderr_tail', '')[-200:])}")
        w("")
    # --- summary
    w("## Results")
    w("")
    w("| mode | names | judged | right | share right | wrong at confidence ≥ medium | look-alikes called incidents "
      "| kvdiag errors |")
    w("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    summary = {}
    misses = []
    for mode, nm in combos:
        rs = [(n, latest[(n, mode, nm)]) for n in cases if (n, mode, nm) in latest]
        right = sum(1 for n, r in rs if r.get("primary") == cases[n]["class"])
        wrong_conf = sum(1 for n, r in rs if r.get("primary") != cases[n]["class"]
                         and r.get("confidence") in ("medium", "high"))
        look_inc = [n for n, r in rs if cases[n]["lookalike"] and r.get("primary") not in NOT_INCIDENT]
        errs = sum(1 for n, r in rs if r.get("primary") == "(error)")
        summary[(mode, nm)] = {"judged": len(rs), "right": right, "wrong_conf": wrong_conf,
                               "lookalike_incidents": len(look_inc), "errors": errs}
        w(f"| {mode} | {nm.upper()} | {len(rs)} | {right} | {_pct(right, len(rs))} | {wrong_conf} | "
          f"{len(look_inc)} | {errs} |")
        for n, r in rs:
            if r.get("primary") != cases[n]["class"]:
                misses.append((n, mode, nm, r))
    w("")
    for mode, nm in combos:
        rs = [(n, latest[(n, mode, nm)]) for n in cases if (n, mode, nm) in latest]
        cols = [c for c in (*CLASSES, "inconclusive")] + sorted({r.get("primary", "") for _, r in rs}
                                                                 - set(CLASSES) - {"inconclusive"})
        rows = [c for c in CLASSES if any(cases[n]["class"] == c for n, _ in rs)] + sorted(
            {cases[n]["class"] for n, _ in rs} - set(CLASSES))
        m = Counter((cases[n]["class"], r.get("primary", "")) for n, r in rs)
        w(f"### {mode}, {nm.upper()} names")
        w("")
        w("| true \\ kvdiag | " + " | ".join(cols) + " |")
        w("| --- | " + " | ".join("---:" for _ in cols) + " |")
        for row in rows:
            w(f"| **{row}** | " + " | ".join(str(m[(row, c)]) if m[(row, c)] else "·" for c in cols) + " |")
        w("")
    # --- per family
    if combos:
        w("### Share right per family")
        w("")
        w("| family | scenarios | " + " | ".join(f"{m} {nm.upper()}" for m, nm in combos) + " |")
        w("| --- | ---: | " + " | ".join("---:" for _ in combos) + " |")
        for fam in sorted(fams):
            cells = []
            for mode, nm in combos:
                rs = [latest[(n, mode, nm)] for n in fams[fam] if (n, mode, nm) in latest]
                ok = sum(1 for n in fams[fam] if (n, mode, nm) in latest
                         and latest[(n, mode, nm)].get("primary") == cases[n]["class"])
                cells.append(f"{ok}/{len(rs)}" if rs else "–")
            w(f"| {fam} | {len(fams[fam])} | " + " | ".join(cells) + " |")
        w("")
    # --- look-alikes
    looks = [(n, mode, nm, r) for n, mode, nm, r in misses if cases[n]["lookalike"] and r.get("primary")
             not in NOT_INCIDENT]
    w("## Look-alikes called incidents")
    w("")
    if looks:
        w("| scenario | family | mode | names | kvdiag primary | confidence |")
        w("| --- | --- | --- | --- | --- | --- |")
        for n, mode, nm, r in looks:
            w(f"| {n} | {cases[n]['family']} | {mode} | {nm.upper()} | {r.get('primary')} | {r.get('confidence')} |")
    else:
        w("None.")
    w("")
    # --- misses
    w("## Every miss")
    w("")
    w("Truth figures: usage peak and token occupancy (mean) measured inside the block pool; preemptions counted by "
      "the scheduler; waiting peak; prefix hit rate (tokens); eviction-miss share = prefix tokens lost to eviction / "
      "prefix-cache queries.")
    w("")
    if misses:
        w("One row per scenario and wrong verdict; *where* lists every mode and names that gave it (the message is "
          "the first of those runs').")
        w("")
        w("| scenario | family | where | truth (labeller's reason) | kvdiag primary (confidence) | kvdiag's "
          "primary finding | usage peak | occupancy | preemptions | waiting peak | hit rate | eviction-miss share |")
        w("| --- | --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
        grouped: dict[tuple, list] = defaultdict(list)
        for n, mode, nm, r in misses:
            grouped[(n, r.get("primary"), r.get("confidence") or "–")].append((mode, nm, r))
        for (n, prim, conf), runs in sorted(grouped.items(), key=lambda x: (cases[x[0][0]]["family"], x[0])):
            runs.sort(key=lambda x: (MODES.index(x[0]), NAMES.index(x[1])))
            where = "; ".join(f"{m} {'/'.join(nm.upper() for mm, nm, _ in runs if mm == m)}"
                              for m in MODES if any(mm == m for mm, _, _ in runs))
            r = runs[0][2]
            c, fg = cases[n], cases[n]["figures"]
            msg = r.get("message") or r.get("summary") or r.get("stderr", "").strip()[-200:]
            w(f"| {n} | {c['family']} | {where} | {c['class']} ({_md(c['reason'])}) | {prim} ({conf}) | "
              f"{_md(msg[:200])} | {_f(fg['usage_peak'], 3)} | {_f(fg['occupancy'], 3)} | {_f(fg['preemptions'])} | "
              f"{_f(fg['waiting_peak'])} | {_f(fg['hit_rate'], 3)} | {_f(fg['evict_miss_share'], 3)} |")
    else:
        w("None.")
    w("")
    # --- modes that disagree on one case
    split = []
    for n in cases:
        got = {(m, nm): latest[(n, m, nm)].get("primary") for m, nm in combos if (n, m, nm) in latest and m != "log"}
        if len(set(got.values())) > 1:
            split.append((n, got))
    w("## Where the metrics modes disagree")
    w("")
    w("The same pages judged from the recording, live and through Prometheus (V1 and V0) should get one verdict; "
      "these did not (the log mode, which reads other evidence, is left out here).")
    w("")
    if split:
        mcols = [(m, nm) for m, nm in combos if m != "log"]
        w("| scenario | truth | " + " | ".join(f"{m} {nm.upper()}" for m, nm in mcols) + " |")
        w("| --- | --- | " + " | ".join("---" for _ in mcols) + " |")
        for n, got in sorted(split):
            w(f"| {n} | {cases[n]['class']} | " + " | ".join(str(got.get(c, "–")) for c in mcols) + " |")
    else:
        w("None.")
    w("")
    # --- kvdiag errors
    errs = [(k, r) for k, r in latest.items() if r.get("primary") == "(error)" or "Traceback" in r.get("stderr", "")
            or r.get("instance_errors")]
    w("## kvdiag errors on lab input")
    w("")
    if errs:
        w("| scenario | mode | names | exit | message |")
        w("| --- | --- | --- | ---: | --- |")
        for (n, mode, nm), r in sorted(errs):
            text = (r.get("stderr", "").strip().splitlines() or [""])[-1] or "; ".join(r.get("instance_errors", []))
            w(f"| {n} | {mode} | {nm.upper()} | {r.get('rc')} | {_md(text[:300])} |")
    else:
        w("None.")
    w("")
    short = [(k, r) for k, r in latest.items() if k[1] == "live" and r.get("pages") and r.get("records") is not None
             and r["records"] < r["pages"]]
    w("## Live replays that saw fewer scrapes than the case has pages")
    w("")
    w("A live run scrapes once per page against a page clock that started with the replay server; on a loaded "
      "machine a scrape can land late and skip a page (or see one twice). A run that fell behind is repeated with "
      "pages twice as long (at most twice); these are the ones still short.")
    w("")
    if short:
        w("| scenario | names | pages | scrapes | ms per page | kvdiag primary |")
        w("| --- | --- | ---: | ---: | ---: | --- |")
        for (n, _m, nm), r in sorted(short):
            w(f"| {n} | {nm.upper()} | {r['pages']} | {r['records']} | {r.get('page_ms', '')} | {r.get('primary')} |")
    else:
        w("None.")
    w("")
    slow = Counter(r.get("page_ms") for k, r in latest.items() if k[1] == "live" and r.get("tries", 1) > 1)
    if slow:
        w("Live runs repeated with longer pages because kvdiag fell behind the page clock: "
          + ", ".join(f"{v} at {k:g} ms per page" for k, v in sorted(slow.items())) + ".")
        w("")
    # --- timing
    w("## Wall time")
    w("")
    w("Per case (median / p90 / max, seconds; kvdiag in-process in a worker, so no Python start-up per case):")
    w("")
    w("| stage | cases | median | p90 | max |")
    w("| --- | ---: | ---: | ---: | ---: |")
    gw = [r["wall_s"] for r in gen.values() if r.get("wall_s") is not None]
    if gw:
        w(f"| twin (generate one scenario) | {len(gw)} | {_f(_quantile(gw, .5), 1)} | {_f(_quantile(gw, .9), 1)} | "
          f"{_f(max(gw), 1)} |")
    for mode in MODES:
        xs = [r["seconds"] for k, r in latest.items() if k[1] == mode and r.get("seconds") is not None]
        if xs:
            w(f"| kvdiag {mode} | {len(xs)} | {_f(_quantile(xs, .5))} | {_f(_quantile(xs, .9))} | {_f(max(xs))} |")
    w("")
    runs = read_jsonl(out / "stages.jsonl")
    if runs:
        last = runs[-1]
        w(f"Stages of the last run ({last.get('at', '')}, jobs {last.get('jobs')}, live jobs {last.get('live_jobs')}):")
        w("")
        w("| stage | wall s | items |")
        w("| --- | ---: | ---: |")
        for st, (secs, n) in last.get("stages", {}).items():
            w(f"| {st} | {secs:.1f} | {n} |")
        w("")
    notes = path.with_name(path.stem + "-notes.md")  # the hand-written analysis of the misses, kept across runs
    if notes.exists():
        w(f"<!-- from {notes.name} (hand-written, not regenerated) -->")
        w(notes.read_text().rstrip())
        w("")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(L) + "\n")
    return summary


# --- checked-in subset ---------------------------------------------------------------------------------------
def _copy_recording(src: Path, dst_dir: Path, gz: bool) -> None:
    if gz:  # kvdiag's --metrics-file reads plain text only: the test decompresses it into a temporary file
        import gzip

        (dst_dir / "recording.om.gz").write_bytes(gzip.compress(src.read_bytes(), compresslevel=9, mtime=0))
    else:
        shutil.copyfile(src, dst_dir / "recording.om")


def export_fixtures(out: Path, names: list[str], dest: Path, table: dict[str, dict], table_path: str,
                    gz: bool = False, defaults: dict | None = None) -> None:
    """Copy each case's recording (V1 and V0), vllm.log and truth.json into ``dest/NAME/`` with a README."""
    label, _doc, note = load_labeller()
    defaults = defaults or {}
    dest.mkdir(parents=True, exist_ok=True)
    for n in names:
        src = out / n
        if not (src / "truth.json").exists():
            raise SystemExit(f"{src}: no truth.json (generate it first)")
        truth = json.loads((src / "truth.json").read_text())
        d = dest / n
        if d.exists():
            shutil.rmtree(d)
        d.mkdir()
        _copy_recording(ensure_recording(src), d, gz)
        shutil.copyfile(src / "vllm.log", d / "vllm.log")
        shutil.copyfile(src / "truth.json", d / "truth.json")
        v0 = out / f"{n}-v0"
        if (v0 / "NOTICE.txt").exists():
            (d / "v0").mkdir()
            _copy_recording(ensure_recording(v0), d / "v0", gz)
            shutil.copyfile(v0 / "vllm.log", d / "v0" / "vllm.log")
            shutil.copyfile(v0 / "NOTICE.txt", d / "v0" / "NOTICE.txt")
        cls, why = label(truth)
        entry = table.get(n)
        checks = truth.get("checks", [])
        checks_line = (f"{sum(c.get('ok', False) for c in checks)}/{len(checks)} passed"
                       + "".join(f"; failed: `{c.get('check')}` (value {c.get('lhs_value')})"
                                 for c in checks if not c.get("ok")))
        dep = truth.get("deployment", {})
        readme = [
            f"# {n}", "",
            "Made by the team's twin lab (`shared/twin/`, not part of kvdiag): vLLM "
            f"{dep.get('vllm_version', '0.33.0')}'s own V1 scheduler, KV-cache manager (block pool, prefix caching, "
            "recompute preemption), stat loggers and Prometheus exposition, driven on a CPU in simulated time; only "
            "the GPU is modelled (one token per step, a step-time formula). Exported by "
            f"`python benchmarks/lab/sweep.py --export-fixtures {n}` on {time.strftime('%Y-%m-%d', time.gmtime())}.",
            "",
            f"- `recording.om{'.gz' if gz else ''}`: the case's `/metrics` pages (one per scrape, every "
            f"{truth.get('clock', {}).get('sample_interval_s', '?')} s of simulated time) as one OpenMetrics file, "
            "each sample stamped with its page's Unix time (the lab's `times.csv`), written by kvdiag's `Recorder` "
            "(`*_created` left out, as `kvdiag record` does).",
            "- `vllm.log`: the start-up and periodic stats lines vLLM's own loggers printed.",
            "- `truth.json`: what the simulation measured inside the block pool (the lab's file, unchanged).",
            "- `v0/`: the same case renamed to V0-era (vLLM 0.7.x) names by the lab's `convert_v0.py` — our "
            "transformation, not vLLM output (see `v0/NOTICE.txt`)." if (d / "v0").exists() else "",
            "",
            f"Model {dep.get('model')}, GPU {dep.get('gpu')}, {truth.get('num_gpu_blocks')} blocks x "
            f"{truth.get('block_size')} tokens; `{dep.get('serve_command')}`.",
            "",
            f"True class (benchmarks/lab/labeller.py): **{cls}** — {why}" if not note else
            f"True class: **{cls}** ({note}).",
            "",
            f"Twin checks of the scenario: {checks_line}.",
            "",
            f"Scenario table entry (from `{table_path}`, seed {entry.get('seed', defaults.get('seed')) if entry else '?'}), "
            f"with the table's defaults: a one-scenario table (`twin.py --scenarios THIS.yaml run {n}` remakes its "
            "log and its pages byte for byte, but for the `python_gc_*` series of the simulating process):",
            "",
            "```yaml",
            yaml.safe_dump({"defaults": defaults, "scenarios": {n: entry}}, sort_keys=False, width=110).rstrip()
            if entry else
            f"# {n}: not in {table_path}; the description from truth.json: {truth.get('description')}",
            "```",
        ]
        (d / "README.md").write_text("\n".join(x for x in readme if x is not None) + "\n")
        log(f"exported {n} -> {d} ({cls})")
    write_fixtures_readme(dest)


def write_fixtures_readme(dest: Path) -> None:
    """``dest/README.md``: what the subset is, where it came from, and one line per case."""
    label, _doc, note = load_labeller()
    rows = []
    for tp in sorted(dest.glob("*/truth.json")):
        truth = json.loads(tp.read_text())
        cls, why = label(truth)
        dep = truth.get("deployment", {})
        rows.append(f"| [{tp.parent.name}]({tp.parent.name}/README.md) | {cls} | {_md(why)} | {dep.get('model')} | "
                    f"{truth.get('num_gpu_blocks')} x {truth.get('block_size')} | "
                    f"{truth.get('clock', {}).get('duration_s')} | {'yes' if (tp.parent / 'v0').exists() else ''} |")
    text = [
        "# Twin-lab subset: recordings with a measured truth",
        "",
        "A few cases of the accuracy sweep (`benchmarks/lab/sweep.py`, results in `docs/accuracy.md`), checked in "
        "so that `tests/test_lab_subset.py` runs without the lab. Each was made by the team's twin lab "
        "(`shared/twin/`, not part of kvdiag): vLLM 0.33.0's own V1 scheduler, KV-cache manager, stat loggers and "
        "Prometheus exposition driven on a CPU in simulated time, the GPU replaced by a one-token-per-step stand-in "
        "and a step-time formula. The `v0/` copies are the lab's `convert_v0.py` renaming (our transformation, not "
        "vLLM output). Each case's README holds its scenario table entry (with the seed) and its true class.",
        "",
        "The test asserts kvdiag's primary class on each recording equals `label(truth)` of "
        "`benchmarks/lab/labeller.py`." + (f" ({note}.)" if note else ""),
        "",
        "Regenerate: `python benchmarks/lab/sweep.py --scenarios TABLE.yaml --out DIR --only NAME ...` then "
        "`python benchmarks/lab/sweep.py --scenarios TABLE.yaml --out DIR --export-fixtures NAME ... "
        "--fixtures fixtures/lab`.",
        "",
        "| case | true class | labeller's reason | model | blocks x size | simulated s | V0 copy |",
        "| --- | --- | --- | --- | --- | ---: | --- |",
        *rows,
    ]
    (dest / "README.md").write_text("\n".join(text) + "\n")


# --- main ----------------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenarios", type=Path, help="the twin scenario table (YAML)")
    ap.add_argument("--out", type=Path, required=True, help="where the cases and results live")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--live-jobs", type=int, default=None, help="parallel live replays (default --jobs)")
    ap.add_argument("--page-ms", type=float, default=100.0, help="live replay: ms per page (default 100)")
    ap.add_argument("--only", nargs="+", metavar="NAME")
    ap.add_argument("--modes", default="recording,live,prometheus,log")
    ap.add_argument("--report", type=Path)
    ap.add_argument("--rejudge", action="store_true", help="redo the kvdiag runs of --modes (no regeneration)")
    ap.add_argument("--no-generate", action="store_true", help="run no twin: judge the cases already in --out "
                    "(their V0 copies are still made where missing)")
    ap.add_argument("--runner", choices=("auto", "forkrun", "twin"), default="auto",
                    help="generate with benchmarks/lab/forkrun.py (auto: when it exists) or one twin.py run per case")
    ap.add_argument("--family-regex", default=FAMILY_RE, help=f"family name in a description (default {FAMILY_RE!r})")
    ap.add_argument("--lookalike-regex", default=LOOKALIKE_RE,
                    help=f"a description matching this marks a look-alike (default {LOOKALIKE_RE!r})")
    ap.add_argument("--export-fixtures", nargs="+", metavar="NAME")
    ap.add_argument("--fixtures", type=Path, default=ROOT / "fixtures" / "lab")
    ap.add_argument("--gzip", action="store_true", help="--export-fixtures: store recording.om.gz (about 20x smaller)")
    a = ap.parse_args(argv)
    out = a.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    table, defaults = load_table(a.scenarios, with_defaults=True) if a.scenarios else ({}, {})
    if a.export_fixtures:
        export_fixtures(out, a.export_fixtures, a.fixtures, table, str(a.scenarios or ""), gz=a.gzip,
                        defaults=defaults)
        return 0
    if not table and not a.no_generate:
        ap.error("--scenarios is required (or --no-generate to judge what --out holds)")
    names = list(table) if table else sorted(p.parent.name for p in out.glob("*/truth.json")
                                             if not p.parent.name.endswith("-v0"))
    if a.only:
        unknown = [n for n in a.only if table and n not in table]
        if unknown:
            ap.error(f"not in {a.scenarios}: {', '.join(unknown)}")
        names = [n for n in names if n in a.only]
    modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    bad = [m for m in modes if m not in MODES]
    if bad:
        ap.error(f"--modes: unknown {bad}; expected some of {','.join(MODES)}")

    def on_term(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # also when started with SIGINT ignored
    stages: dict[str, tuple[float, int]] = {}
    t_all = time.monotonic()
    try:
        t0 = time.monotonic()
        generate(a.scenarios.resolve() if a.scenarios else None, names, out, a.jobs,
                 os.environ.get("TWIN_PYTHON", "/work/twin-venv/bin/python"), a.runner, twin=not a.no_generate)
        stages["generate (twin + convert_v0)" if not a.no_generate else "convert_v0"] = (time.monotonic() - t0,
                                                                                         len(names))
        run_modes(out, names, modes, a.jobs, a.live_jobs or a.jobs, a.page_ms, a.rejudge, stages)
    except KeyboardInterrupt:
        log("interrupted: servers and workers stopped; finished results are kept, re-run to resume")
        return 130
    finally:
        stages["total"] = (time.monotonic() - t_all, len(names))
        append_jsonl(out / "stages.jsonl", {"at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                             "jobs": a.jobs, "live_jobs": a.live_jobs or a.jobs,
                                             "modes": modes, "stages": stages})
    if a.report:
        summary = write_report(out, names, a.report, a.family_regex, a.lookalike_regex, str(a.scenarios or out),
                               sys.argv[1:] if argv is None else argv)
        for (mode, nm), s in summary.items():
            log(f"{mode:10s} {nm}: {s['right']}/{s['judged']} right, {s['wrong_conf']} wrong at >= medium, "
                f"{s['lookalike_incidents']} look-alikes called incidents, {s['errors']} errors")
        log(f"report: {a.report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
