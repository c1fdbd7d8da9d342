"""The analysis pipeline: collectors → bundle → derived signals → rules → report. No printing here."""

from __future__ import annotations

import json
from pathlib import Path

from .bundle import Bundle, InputInfo
from .collect.logs import read_logs
from .collect.metrics import (STOPPED_ANSWERING, HttpOptions, WindowInterrupt, merge_target, read_metrics_file,
                              scrape_targets)
from .derive import derive_all
from .engine.evaluate import evaluate, require_keeping_up, short_window, unexplained_failures, verdict
from .engine.model import load_rules
from .errors import InputError
from .report.model import InstanceReport, Report
from .timeline import build_charts


def analyze(logs: list[str] = (), metrics_files: list[str] = (), metrics_urls: list[str] = (),
            duration: float = 30.0, interval: float = 5.0, model_config: str | None = None,
            rules_dirs: list[str] | None = None, year: int | None = None, progress: bool | None = None,
            deployment: dict | None = None, seed=None, keep: list | None = None,
            http: HttpOptions | None = None, prometheus: dict | None = None,
            interrupt: WindowInterrupt | None = None, run: str | None = None) -> Report:
    """Collect every source into one bundle, derive signals, run the rules, and build the report.

    Raises:
        InputError: an input cannot be read or parsed.
        ScrapeError: a /metrics URL failed on its first scrape.
        RuleFileError: a rule file is invalid.

    Several ``metrics_urls`` (scraped at once), or ``prometheus`` (a dict of
    :func:`kvdiag.collect.prometheus.collect_fleet` arguments), give one verdict per server; the
    report's verdict is the worst server's and ``instances`` lists them worst first. A server that
    cannot be read is listed with its error, unless no server could be read (then ScrapeError).

    ``seed(bundle)``, when given, runs before any input is read (``kvdiag check --state`` adds the previous
    run's counters there); ``keep``, when given, receives the bundle (to save state after the run).

    SIGINT / SIGTERM while the ``metrics_urls`` are scraped ends the window early and judges what was scraped,
    with a note in ``report.notes`` ("window cut short at 7 s of 60 s by an interrupt"); a second signal, or
    one before any scrape succeeded, raises ``KeyboardInterrupt`` (:class:`WindowInterrupt`; pass one as
    ``interrupt`` to read its ``note`` afterwards).
    """
    rules = load_rules(rules_dirs)
    interrupt = interrupt if interrupt is not None else WindowInterrupt()
    if prometheus is not None or (len(metrics_urls) > 1 and seed is None and keep is None):
        # (kvdiag check, which seeds and keeps one bundle, still reads several URLs into that one bundle)
        return _analyze_many(rules, metrics_urls, duration, interval, http, progress, prometheus, interrupt)
    bundle = Bundle()
    if keep is not None:
        keep.append(bundle)
    if model_config:
        from .capacity import load_model_config

        bundle.model_config = load_model_config(model_config)
        bundle.model_config_source = model_config
    for signal, value in (deployment or {}).items():
        if value is not None:  # facts the operator gave on the command line, before what the inputs say
            opt = signal.replace("gpu_total_bytes", "gpu_memory").replace("_", "-")
            bundle.add(signal, value, f"option --{opt}")
    if seed is not None:
        seed(bundle)
    if logs:
        read_logs(bundle, list(logs), year=year)
    from .pages import expand

    pages = list(expand(metrics_files))  # files, folders, globs, times.csv
    unread: list[InputError] = []
    for path, at, at_source in pages:
        try:
            read_metrics_file(bundle, path, at=at, at_source=at_source)
        except InputError as exc:  # one of several inputs: listed as not read, the others judged
            if len(pages) + len(logs) + len(metrics_urls) == 1:
                raise
            unread.append(exc)
            bundle.inputs.append(InputInfo(kind="metrics-file", name=path, notes=[f"not read: {exc}"]))
    if unread and len(unread) == len(pages) and not logs and not metrics_urls:
        raise unread[0]
    if metrics_urls:  # all at once, each into its own bundle, then into this one in the order given
        with interrupt:
            targets = scrape_targets(list(metrics_urls), duration, interval, http or HttpOptions(), progress,
                                     interrupt=interrupt)
        for target in targets:
            merge_target(bundle, target)
    runs = getattr(bundle, "log_runs", None) or []
    run_notes: list[str] = []
    if len(runs) > 1 or run not in (None, "last"):
        bundle, report = _pick_run(rules, bundle, runs, run or "last", run_notes)
        if report is not None:
            return report
        if keep is not None:  # check's perfdata and state come from the run judged, never from another run
            keep[:] = [bundle]
    derive_all(bundle)
    findings = evaluate(rules, bundle)
    window_note = short_window(findings, rules, bundle)
    start, end = bundle.window()
    judged = require_keeping_up(_guard(verdict(findings, unexplained_failures(bundle)), bundle), bundle, window_note)
    report = Report(verdict=judged, findings=findings, inputs=[i.to_dict() for i in bundle.inputs],
                    window={"start": start, "end": end})
    if window_note:
        report.notes.append(window_note)
    if model_config and bundle.has("kv_bytes_per_token"):
        bpt = bundle.signal("kv_bytes_per_token")["value"].iloc[-1]
        report.notes.append(f"model config {model_config}: {bpt:,.0f} bytes of KV per token "
                            "(2 × layers × kv_heads × head_dim × dtype_bytes; planning estimate)")
    report.notes += run_notes
    report.notes += restart_notes(bundle)
    report.notes += [f"input not read, judged without it: {n.removeprefix('not read: ')}" for i in bundle.inputs
                     for n in i.notes if n.startswith("not read: ")]
    report.notes += [f"{i.name}: {n}" for i in bundle.inputs for n in i.notes if n.startswith(STOPPED_ANSWERING)]
    if interrupt.note:
        report.notes.append(interrupt.note)
    report.charts = build_charts(bundle, findings, report.notes)
    return report


def run_label(runs: list[dict], k: int) -> str:
    """'run 2 of 2 (vllm.log from line 10: a new API-server process id)'."""
    r = runs[k]
    return f"run {k + 1} of {len(runs)} ({r['file']} from line {r['line']}: {r['why']})"


def split_runs(bundle: Bundle, runs: list[dict]) -> list[Bundle]:
    """One bundle per server run of the logs (``bundle.log_runs``, cut by the log collector at banners, new API-server
    pids and start-ups after serving): a run's bundle holds the log observations of its stretch of the log and every
    observation that is not from a log (options, /metrics pages) — no log number of one run reaches another."""
    starts = [r["start_seq"] for r in runs] + [float("inf")]
    out = []
    for k in range(len(runs)):
        b = Bundle()
        b.inputs = bundle.inputs
        b.runs_in_log = (k, list(runs))  # which run of how many (diff says so; never its numbers)
        b.model_config, b.model_config_source = bundle.model_config, bundle.model_config_source
        b.skipped_derived = list(bundle.skipped_derived)
        b.dropped_values = bundle.dropped_values
        lo, hi = starts[k], starts[k + 1]
        for sig, t, seq, v, text, src, seg in bundle._rows:
            if src.startswith("log:") and not lo <= seq < hi:
                continue
            b.add(sig, None if v != v else v, src, t=None if t != t else t, text=text, segment=seg)
        out.append(b)
    return out


def _pick_run(rules, bundle: Bundle, runs: list[dict], run: str, notes: list[str]):
    """``(bundle of the run to judge, None)``, or ``(None, report)`` for ``run == "all"`` (every run judged on its own,
    the report's instances worst first, as for several servers; the verdict is the worst run's).

    Raises:
        InputError: ``run`` names a run the logs do not hold.
    """
    if not runs:
        runs = [{"start_seq": 0, "file": bundle.inputs[0].name if bundle.inputs else "log", "line": 1,
                 "why": "the log's start"}]
    bundles = split_runs(bundle, runs)
    if run == "all":
        instances = sorted((judge_one(rules, run_label(runs, k), b) for k, b in enumerate(bundles)),
                           key=InstanceReport.rank)
        worst = instances[0]
        report = Report(verdict=worst.verdict, findings=worst.findings, inputs=[i.to_dict() for i in bundle.inputs],
                        window=worst.window, instances=instances)
        report.notes.append(f"the log holds {len(runs)} server run(s); each judged on its own lines (--run all), "
                            f"the worst first")
        report.charts = worst.charts
        return None, report
    if run == "last":
        k = len(runs) - 1
    else:
        try:
            k = int(run) - 1
        except ValueError:
            raise InputError(f"--run {run}: expected a run number, 'last' or 'all'") from None
        if not 0 <= k < len(runs):
            raise InputError(f"--run {run}: the log holds {len(runs)} server run(s) (1..{len(runs)})")
    if len(runs) > 1:
        others = ", ".join(f"{j + 1} from line {r['line']}" for j, r in enumerate(runs) if j != k)
        notes.append(f"judged {run_label(runs, k)}; no number of the other run(s) ({others}) is used: "
                     f"--run N or --run all for them")
    return bundles[k], None


def restart_notes(bundle: Bundle) -> list[str]:
    """The capacity model's notes (what it could not estimate, a measured figure it took over the config's), one note
    per counter that fell in the window (a restart): increases were counted from zero after it; and one per derived
    value refused as impossible (hits above queries, negative seconds, …)."""
    rows = bundle.signal("counter_resets")
    return list(dict.fromkeys(bundle.model_notes)) + [f"{r.text or 'a counter'} fell {r.value:.0f} time(s) in the window (server restarted?); its increase "
            f"counts from zero after each fall, never last − first ({r.source})" for r in rows.itertuples()] + \
        list(dict.fromkeys(bundle.skipped_derived))[:20]


def judge(rules, bundle: Bundle):
    """Derived signals, window signals, rules → (verdict, findings) of one server's bundle."""
    derive_all(bundle)
    findings = evaluate(rules, bundle)
    window_note = short_window(findings, rules, bundle)
    return require_keeping_up(_guard(verdict(findings, unexplained_failures(bundle)), bundle), bundle,
                              window_note), findings


def _guard(v, bundle: Bundle):
    """No ``healthy`` verdict on values the collectors had to drop (NaN, ±Inf, negative, ratio above 1):
    every value of a key runtime signal dropped → ``inconclusive``; some dropped → confidence low."""
    from dataclasses import replace

    from .collect.metrics import KEY_SIGNALS
    from .engine.summary import Summary

    dropped = bundle.dropped_values
    if v.primary == "healthy" and bundle.skipped_derived and not any(s in dropped for s in KEY_SIGNALS):
        return replace(v, confidence="low", summary=v.parts.plus("Some derived values were impossible (e.g. prefix "
                                                                 "hits above queries) and not used (see the notes)."))
    if v.primary != "healthy" or not any(s in dropped for s in KEY_SIGNALS):
        return v
    lost = [s for s in KEY_SIGNALS if s in dropped and not bundle.has(s)]
    if lost:
        return replace(v, primary="inconclusive", confidence="low",
                       summary=Summary("Not judged healthy", (f"every value of {', '.join(lost)} was out of its domain "
                                                              "(NaN, Inf, negative or a ratio above 1) and was skipped; "
                                                              "see the input notes",)))
    return replace(v, confidence="low",
                   summary=v.parts.plus("Some input values were out of their domain and skipped (see the input notes)."))


def judge_one(rules, name: str, b: Bundle) -> InstanceReport:
    v, findings = judge(rules, b)
    start, end = b.window()
    notes = restart_notes(b)
    return InstanceReport(name, v, findings, [i.to_dict() for i in b.inputs], {"start": start, "end": end},
                          notes=notes, charts=build_charts(b, findings, notes))


_POOL_RULES: list = []


def _pool_job(item: tuple[str, Bundle]) -> InstanceReport:
    return judge_one(_POOL_RULES, *item)


def _judge_parallel(rules, items, workers: int | None = None):
    """Judge ``(name, bundle)`` items on ``workers`` forked processes (default: the CPUs), at most a few
    bundles per worker in flight; yields :class:`InstanceReport` in completion order. One CPU (or no
    ``fork``): in this process."""
    import multiprocessing
    import os
    from collections import deque
    from concurrent.futures import ProcessPoolExecutor

    workers = workers or min(8, os.cpu_count() or 1)
    if workers < 2 or "fork" not in multiprocessing.get_all_start_methods():
        for name, b in items:
            yield judge_one(rules, name, b)
        return
    _POOL_RULES[:] = rules  # inherited by the forked workers
    pending: deque = deque()
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("fork")) as pool:
        for item in items:
            pending.append(pool.submit(_pool_job, item))
            while len(pending) >= 4 * workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def _analyze_many(rules, metrics_urls, duration, interval, http, progress, prometheus,
                  interrupt: WindowInterrupt | None = None) -> Report:
    """One report over several servers: each judged alone, the worst first."""
    from .engine.evaluate import Verdict
    from .errors import ScrapeError

    instances: list[InstanceReport] = []
    inputs: list[dict] = []

    def judge(name: str, b: Bundle | None, err: str | None) -> None:
        if b is None:
            inst = InstanceReport(name, Verdict("inconclusive", "ok", "low", f"Not judged: {err}"), [], error=err,
                                  inputs=[{"kind": "metrics-url", "name": name, "records": 0, "observations": 0,
                                           "skipped": 0, "notes": [err]}])
        else:
            inst = judge_one(rules, name, b)
        instances.append(inst)
        inputs.extend(inst.inputs)

    fleet_notes: list[str] = []
    if prometheus is not None:
        from .collect.prometheus import iter_fleet

        # judged as they come (the fleet's raw series are never all in memory), on every CPU
        for inst in _judge_parallel(rules, iter_fleet(**prometheus, http=http, notes=fleet_notes)):
            instances.append(inst)
            inputs.extend(inst.inputs)
    else:
        interrupt = interrupt if interrupt is not None else WindowInterrupt()
        with interrupt:
            targets = scrape_targets(list(metrics_urls), duration, interval, http, progress, interrupt=interrupt)
        if all(tg.error for tg in targets):
            raise ScrapeError("no server could be read: " + "; ".join(tg.error for tg in targets))
        for tg in targets:
            judge(tg.url, None if tg.error else tg.bundle, tg.error)
    instances.sort(key=InstanceReport.rank)
    worst = instances[0]
    starts = [i.window["start"] for i in instances if i.window.get("start")]
    ends = [i.window["end"] for i in instances if i.window.get("end")]
    report = Report(verdict=worst.verdict, findings=worst.findings, inputs=inputs,
                    window={"start": min(starts) if starts else None, "end": max(ends) if ends else None},
                    instances=instances)
    if len(instances) == 1:  # one server: its report is the text report, so its notes must show there too
        report.notes += instances[0].notes
        report.charts = instances[0].charts
    failed = [i.instance for i in instances if i.error]
    if failed:
        report.notes.append(f"{len(failed)} of {len(instances)} server(s) could not be read: {', '.join(failed)}")
    report.notes += fleet_notes
    if interrupt is not None and interrupt.note:
        report.notes.append(interrupt.note)
    return report
