"""``kvdiag watch``: judge live /metrics endpoints every interval, in a terminal view (rich's Live) and/or as an
exporter (:mod:`kvdiag.exporter`).

Each server is scraped by its own thread every ``interval``; each page goes into two bundles: the window (the last
``window`` seconds, judged after every page: what the view and the exporter show) and the whole run (judged once,
when the watch ends: the final report, the same as ``analyze`` on what was watched). A failing scrape never ends
the watch: the server is shown as down with the reason, and retried after ``interval`` × 2, 4, 8, … (at most
:data:`MAX_BACKOFF` seconds, and at most 8 intervals), until it answers again.
"""

from __future__ import annotations

import math
import os
import re
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field

from .bundle import Bundle, InputInfo
from .collect.metrics import HttpOptions, PageInfo, add_page, make_session, safe_url, scrape_once
from .errors import ScrapeError
from .report.model import InstanceReport, Report

MAX_BACKOFF = 60.0
SPARK = "▁▂▃▄▅▆▇█"
SEVERITY_STYLE = {"critical": "bold white on red", "warning": "bold black on yellow", "info": "bold black on cyan",
                  "ok": "bold black on green"}
SEVERITY_WORD = {"critical": "CRITICAL", "warning": "WARNING", "info": "INFO", "ok": "OK"}


def backoff(failures: int, interval: float) -> float:
    """Seconds before the next try after ``failures`` failed scrapes in a row: interval × 2^failures, at most 8
    intervals and at most :data:`MAX_BACKOFF` (never below one interval)."""
    return max(interval, min(interval * 2 ** failures, 8 * interval, MAX_BACKOFF))


@dataclass
class Server:
    """One watched /metrics endpoint and what is known of it."""

    url: str  # shown (no credentials)
    fetch_url: str
    window: float
    pages: deque = field(default_factory=deque)  # (t, families) of the window
    whole: Bundle = field(default_factory=Bundle)
    info: InputInfo = None  # type: ignore[assignment]
    page_info: PageInfo = field(default_factory=PageInfo)
    up: bool | None = None  # None: not tried yet
    error: str = ""
    failures: int = 0
    retry_at: float = 0.0  # time.monotonic() of the next try
    last_ok: float | None = None  # time.time() of the last good page
    report: InstanceReport | None = None
    bundle: Bundle | None = None
    changes: list = field(default_factory=list)  # (time, class, severity) each time the verdict changed
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        if self.info is None:
            self.info = InputInfo(kind="metrics-url", name=self.url)


def judge_pages(rules, name: str, pages) -> tuple[InstanceReport, Bundle]:
    """The verdict of one server on ``pages`` (``(t, families)``): a fresh bundle, the rules, as analyze does."""
    from .analyze import judge_one

    bundle = Bundle()
    info = PageInfo()
    for t, families in pages:
        add_page(bundle, families, name, t, info)
    bundle.inputs.append(InputInfo(kind="metrics-url", name=name, records=len(pages)))
    return judge_one(rules, name, bundle), bundle


class Watch:
    """The servers, their scrape threads and the latest verdicts; :meth:`final_report` when it ends."""

    def __init__(self, urls: list[str], interval: float, window: float, rules, http: HttpOptions | None = None,
                 on_judged=None) -> None:
        self.interval, self.window, self.rules = interval, window, rules
        self.http = http or HttpOptions()
        self.servers = [Server(url=safe_url(u), fetch_url=u, window=window) for u in urls]
        self.stop = threading.Event()
        self.started = time.time()
        self.on_judged = on_judged
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        for s in self.servers:
            th = threading.Thread(target=self._loop, args=(s,), daemon=True, name=f"watch {s.url}")
            th.start()
            self._threads.append(th)

    def _loop(self, s: Server) -> None:
        session = make_session(retries=0, opts=self.http)
        while not self.stop.is_set():
            began = time.monotonic()
            try:
                families, t = scrape_once(session, s.fetch_url, self.http.timeout)
            except Exception as exc:  # noqa: BLE001 - a failing scrape is shown and retried, never a crash
                msg = str(exc) if isinstance(exc, ScrapeError) else f"{s.url}: scrape failed ({exc.__class__.__name__})"
                with s.lock:
                    s.up, s.error = False, msg
                    s.failures += 1
                    s.info.skipped += 1
                    wait = backoff(s.failures, self.interval)
                    s.retry_at = time.monotonic() + wait
                self.stop.wait(wait)
                continue
            with s.lock:
                s.up, s.error, s.failures, s.last_ok = True, "", 0, t
                s.pages.append((t, families))
                while s.pages and s.pages[0][0] < t - self.window:
                    s.pages.popleft()
                s.info.observations += add_page(s.whole, families, s.url, t, s.page_info)
                s.info.records += 1
                pages = list(s.pages)
            try:
                report, bundle = judge_pages(self.rules, s.url, pages)
            except Exception as exc:  # noqa: BLE001 - shown, not a crash; the next page is judged again
                with s.lock:
                    s.error = f"could not judge ({exc.__class__.__name__}: {exc})"
            else:
                with s.lock:
                    old = s.report
                    s.report, s.bundle = report, bundle
                    v = report.verdict
                    if old is None or (old.verdict.primary, old.verdict.severity) != (v.primary, v.severity):
                        s.changes.append((t, v.primary, v.severity))
                if self.on_judged is not None:
                    self.on_judged(s)
            self.stop.wait(max(0.0, began + self.interval - time.monotonic()))

    def close(self) -> None:
        self.stop.set()
        for th in self._threads:
            th.join(timeout=self.http.timeout + 1)

    def final_report(self) -> Report:
        """The report on everything watched (every page of the run, not only the window): what ``analyze`` gives on
        the same pages; one section per server when there are several."""
        from .analyze import judge_one
        from .engine.evaluate import Verdict

        instances = []
        for s in self.servers:
            with s.lock:
                info = InputInfo(kind="metrics-url", name=s.url, records=s.info.records,
                                 observations=s.info.observations, skipped=s.info.skipped,
                                 notes=list(s.info.notes) + s.page_info.notes())
                if s.info.skipped:
                    info.notes.append(f"{s.info.skipped} scrape(s) failed while watching"
                                      + (f" (last: {s.error})" if s.error else ""))
                if s.info.records == 0:
                    err = s.error or "no scrape finished before the watch ended"
                    instances.append(InstanceReport(s.url, Verdict("inconclusive", "ok", "low", f"Not judged: {err}"),
                                                    [], inputs=[info.to_dict()], error=err))
                    continue
                bundle = s.whole
                bundle.inputs = [info]
            inst = judge_one(self.rules, s.url, bundle)
            if s.info.skipped:
                inst.notes.append(f"{s.info.skipped} scrape(s) failed while watching (the server was down or did not "
                                  "answer; retried with back-off)")
            if s.changes:
                inst.notes.append("verdict while watching (window " + _fmt_eta(self.window) + "): " + ", ".join(
                    f"{_hms(t)} {c} ({sev})" for t, c, sev in s.changes[-12:]))
            instances.append(inst)
        instances.sort(key=InstanceReport.rank)
        worst = instances[0]
        if len(instances) == 1:
            return Report(verdict=worst.verdict, findings=worst.findings, inputs=worst.inputs, window=worst.window,
                          notes=list(worst.notes), charts=worst.charts)
        starts = [i.window["start"] for i in instances if i.window.get("start")]
        ends = [i.window["end"] for i in instances if i.window.get("end")]
        return Report(verdict=worst.verdict, findings=worst.findings,
                      inputs=[d for i in instances for d in i.inputs],
                      window={"start": min(starts) if starts else None, "end": max(ends) if ends else None},
                      instances=instances)


def _hms(t: float) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(t)) + "Z"


# --- what the view shows ------------------------------------------------------------------------------------------
def _series(bundle: Bundle | None, signal: str) -> list[float]:
    """The window's values of a signal, the highest of every instant (several engines), in time order."""
    if bundle is None or not bundle.has(signal):
        return []
    df = bundle.signal(signal)
    df = df[df["t"].notna()]
    if df.empty:
        return []
    return [float(v) for v in df.groupby("t")["value"].max().tolist()]


def _rate(values_t: list[tuple[float, float]]) -> list[float]:
    out = []
    for (t0, v0), (t1, v1) in zip(values_t, values_t[1:]):
        if t1 > t0:
            out.append(max(0.0, v1 - v0) / (t1 - t0))  # a fall is a restart: counted from zero, never negative
    return out


def _counter(bundle: Bundle | None, signal: str) -> list[tuple[float, float]]:
    if bundle is None or not bundle.has(signal):
        return []
    df = bundle.signal(signal)
    df = df[df["t"].notna()]
    return [(float(t), float(v)) for t, v in df.groupby("t")["value"].sum().items()]


def hit_rate_series(bundle: Bundle | None) -> list[float]:
    """Prefix-cache hit rate between consecutive pages (hits / queries of the interval)."""
    hits = dict(_counter(bundle, "prefix_cache_hits"))
    queries = _counter(bundle, "prefix_cache_queries")
    out = []
    for (t0, q0), (t1, q1) in zip(queries, queries[1:]):
        if t0 in hits and t1 in hits and q1 > q0:
            out.append(min(1.0, max(0.0, (hits[t1] - hits[t0]) / (q1 - q0))))
    return out


def sparkline(values: list[float], width: int = 40, top: float | None = None) -> str:
    """Unicode bars of the last ``width`` values, scaled to ``top`` (default: their maximum)."""
    values = [v for v in values if v is not None and math.isfinite(v)][-width:]
    if not values:
        return "–"
    hi = top if top is not None else max(values)
    if hi <= 0:
        return SPARK[0] * len(values)
    return "".join(SPARK[min(len(SPARK) - 1, int(v / hi * (len(SPARK) - 1) + 0.5))] for v in values)


def derived_values(bundle: Bundle | None) -> dict[str, float]:
    """The derived signals vLLM does not export, of the window (those present): token occupancy, empty-slot share,
    prefix-cache hits/s and queries/s, the forecast's ETA to a full pool, demand vs pool."""
    out: dict[str, float] = {}
    if bundle is None:
        return out
    for key, signal in (("kv_token_occupancy_ratio", "kv_token_occupancy"),
                        ("kv_empty_slots_ratio", "kv_empty_slots_ratio"),
                        ("kv_full_eta_seconds", "kv_full_eta_seconds"),
                        ("kv_demand_ratio", "kv_demand_ratio")):
        if bundle.has(signal):
            v = bundle.signal(signal)["value"].dropna()
            if len(v) and math.isfinite(float(v.iloc[-1])):
                out[key] = float(v.iloc[-1])
    for key, signal in (("prefix_cache_hits_per_second", "prefix_cache_hits"),
                        ("prefix_cache_queries_per_second", "prefix_cache_queries")):
        c = _counter(bundle, signal)
        if len(c) >= 2 and c[-1][0] > c[0][0]:
            rates = _rate(c)
            span = c[-1][0] - c[0][0]
            out[key] = sum(r * (b[0] - a[0]) for r, a, b in zip(rates, c, c[1:])) / span
    return out


def _fmt_eta(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f}s"
    if seconds < 5400:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def server_panel(s: Server, interval: float, width: int = 100):
    """One server's panel: state, verdict in its severity colour, firing findings with their first fix, sparklines,
    forecast."""
    from rich.console import Group
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    with s.lock:
        up, error, report, bundle = s.up, s.error, s.report, s.bundle
        failures, retry_at, records, last_ok = s.failures, s.retry_at, s.info.records, s.last_ok
    rows = []
    if up is None:
        state = Text("connecting…", style="dim")
    elif up:
        age = time.time() - (last_ok or time.time())
        state = Text(f"up · {records} scrape(s) · last {age:.0f}s ago", style="green")
    else:
        wait = max(0.0, retry_at - time.monotonic())
        state = Text(f"DOWN · try {failures + 1} in {wait:.0f}s", style="bold red")
        rows.append(Text(f"DOWN: {error}", style="red"))
    if report is not None:
        v = report.verdict
        line = Text()
        line.append(f" {SEVERITY_WORD.get(v.severity, v.severity.upper())} ", style=SEVERITY_STYLE.get(v.severity, ""))
        line.append(f" {v.primary}", style="bold")
        line.append(f" (confidence {v.confidence})" + ("  [last verdict, server down]" if up is False else ""),
                    style="dim" if up is False else "")
        rows.append(line)
        rows.append(Text(v.summary, style="dim" if up is False else ""))
        for f in [f for f in report.findings if f.status == "fires" and f.severity != "ok"][:4]:
            t = Text(f"● {f.rule_id} {f.title}", style="bold")
            if f.remedy:
                fix = re.split(r"(?<=[.;:])\s", f.remedy[0], maxsplit=1)[0]
                t.append("\n    → " + (fix if len(fix) <= width - 12 else fix[:width - 13] + "…"), style="")
            rows.append(t)
    if report is None and bundle is None and up:  # the Prometheus server of --prometheus-url: its state only
        rows.append(Text("queried every interval; its instances below", style="dim"))
        title = Text.assemble((s.url, "bold"), "  ", state)
        return Panel(Group(*rows), title=title, title_align="left", border_style="blue")
    table = Table.grid(padding=(0, 1))
    table.add_column(style="cyan", no_wrap=True)
    table.add_column(no_wrap=True)
    table.add_column(no_wrap=True, justify="right")
    spark_w = max(10, min(60, width - 30))
    usage = _series(bundle, "kv_cache_usage")
    waiting = _series(bundle, "num_requests_waiting")
    preempt = _rate(_counter(bundle, "num_preemptions"))
    hits = hit_rate_series(bundle)
    for name, vals, top, fmt in (("KV usage", usage, 1.0, "{:.1%}"), ("waiting", waiting, None, "{:.0f}"),
                                 ("preemptions/s", preempt, None, "{:.2f}"), ("prefix hit rate", hits, 1.0, "{:.1%}")):
        table.add_row(name, sparkline(vals, spark_w, top), fmt.format(vals[-1]) if vals else "no data")
    rows.append(table)
    d = derived_values(bundle)
    if d.get("kv_full_eta_seconds", 0) >= 1 and (not usage or usage[-1] < 0.98):
        rows.append(Text(f"forecast: pool full in ~{_fmt_eta(d['kv_full_eta_seconds'])} at the current trend",
                         style="yellow"))
    title = Text.assemble((s.url, "bold"), "  ", state)
    return Panel(Group(*rows), title=title, title_align="left", border_style="red" if up is False else "blue")


def view(watch: Watch, width: int = 100, footer: str = ""):
    from rich.console import Group
    from rich.text import Text

    head = Text(f"kvdiag watch · every {watch.interval:g}s · window {_fmt_eta(watch.window)} · "
                f"{time.strftime('%H:%M:%S')} · q or Ctrl-C: quit with a report" + (f" · {footer}" if footer else ""),
                style="bold")
    return Group(head, *(server_panel(s, watch.interval, width) for s in watch.servers))


class Keys:
    """Read single keys from a terminal's standard input (cbreak mode) in a thread; ``q`` sets ``quit``."""

    def __init__(self) -> None:
        self.quit = threading.Event()
        self._old = None
        self._fd = None

    def __enter__(self) -> "Keys":
        try:
            if not sys.stdin.isatty():
                return self
            import termios
            import tty

            self._fd = sys.stdin.fileno()
            self._old = termios.tcgetattr(self._fd)
            tty.setcbreak(self._fd)
        except (OSError, ValueError, ImportError):
            self._fd = None
            return self
        threading.Thread(target=self._read, daemon=True, name="watch keys").start()
        return self

    def _read(self) -> None:
        import select

        while not self.quit.is_set():
            try:
                ready, _, _ = select.select([self._fd], [], [], 0.2)
                if ready:
                    ch = os.read(self._fd, 1)
                    if ch in (b"q", b"Q") or not ch:
                        self.quit.set()
            except (OSError, ValueError):
                return

    def __exit__(self, *exc) -> bool:
        self.quit.set()
        if self._fd is not None and self._old is not None:
            import termios

            try:
                termios.tcsetattr(self._fd, termios.TCSADRAIN, self._old)
            except (OSError, ValueError):
                pass
        return False


def run_tui(watch: Watch, refresh: float | None = None, footer: str = "") -> str:
    """Show the live view until ``q``, Ctrl-C or SIGTERM; returns how it ended ('q' or 'interrupt')."""
    from rich.console import Console
    from rich.live import Live

    console = Console()
    refresh = refresh or min(0.5, watch.interval / 4)  # a new verdict is on screen within a quarter interval
    how = "q"
    with Keys() as keys:
        try:
            with Live(view(watch, console.width, footer), console=console, screen=True, auto_refresh=False,
                      redirect_stderr=False) as live:
                while not keys.quit.wait(refresh):
                    live.update(view(watch, console.width, footer), refresh=True)
        except KeyboardInterrupt:
            how = "interrupt"
    return how


def run_headless(watch: Watch, echo) -> str:
    """No view (``--no-tui``): one line on stderr per verdict change or server going down / up, until SIGINT/SIGTERM."""
    seen: dict[str, tuple] = {}
    try:
        while not watch.stop.wait(0.5):
            for s in watch.servers:
                with s.lock:
                    key = (s.up, s.report and s.report.verdict.primary, s.report and s.report.verdict.severity)
                    err = s.error
                if key != seen.get(s.url) and s.up is not None:
                    seen[s.url] = key
                    if s.up:
                        echo(f"kvdiag watch: {s.url}: up, {key[1]} ({key[2]})" if key[1] else
                             f"kvdiag watch: {s.url}: up")
                    else:
                        echo(f"kvdiag watch: {s.url}: down: {err}")
    except KeyboardInterrupt:
        pass
    return "interrupt"


class FleetWatch(Watch):
    """``kvdiag watch --prometheus-url``: every interval, each vLLM instance a Prometheus-API server holds, judged on
    the last ``window`` of its series (PromQL computes the rates); a Prometheus that does not answer is shown as down
    (one line for the server itself) and retried with back-off. The final report is ``analyze --prometheus-url`` over
    the whole watch."""

    def __init__(self, url: str, selector: str, step: float, interval: float, window: float, rules,
                 http: HttpOptions | None = None) -> None:
        super().__init__([], interval, window, rules, http)
        self.url, self.selector, self.step = url, selector, step
        self.source = Server(url=safe_url(url), fetch_url=url, window=window)  # the Prometheus server itself
        self.servers = [self.source]
        self._by_name: dict[str, Server] = {}
        self.rules_dirs: list[str] | None = None  # for the final report (the rules given to the live verdicts)

    def start(self) -> None:
        th = threading.Thread(target=self._fleet_loop, daemon=True, name="watch fleet")
        th.start()
        self._threads.append(th)

    def _fleet_loop(self) -> None:
        from .analyze import judge_one
        from .collect.prometheus import iter_fleet

        src = self.source
        while not self.stop.is_set():
            began = time.monotonic()
            end = time.time()
            try:
                found = []
                for name, bundle in iter_fleet(self.url, self.selector, end - self.window, end, self.step,
                                               http=self.http, notes=[]):
                    found.append((name, bundle, judge_one(self.rules, name, bundle)))
                    if self.stop.is_set():
                        return
            except Exception as exc:  # noqa: BLE001 - shown and retried, never a crash
                with src.lock:
                    src.up, src.error = False, str(exc) or exc.__class__.__name__
                    src.failures += 1
                    src.info.skipped += 1
                    wait = backoff(src.failures, self.interval)
                    src.retry_at = time.monotonic() + wait
                self.stop.wait(wait)
                continue
            with src.lock:
                src.up, src.error, src.failures, src.last_ok = True, "", 0, end
                src.info.records += 1
            for name, bundle, report in found:
                s = self._by_name.get(name)
                if s is None:
                    s = self._by_name[name] = Server(url=name, fetch_url="", window=self.window)
                    self.servers = [self.source] + sorted(self._by_name.values(), key=lambda x: x.url)
                with s.lock:
                    old = s.report
                    s.up, s.last_ok, s.report, s.bundle = True, end, report, bundle
                    s.info.records += 1
                    v = report.verdict
                    if old is None or (old.verdict.primary, old.verdict.severity) != (v.primary, v.severity):
                        s.changes.append((end, v.primary, v.severity))
            self.stop.wait(max(0.0, began + self.interval - time.monotonic()))

    def final_report(self) -> Report:
        from .analyze import analyze

        report = analyze(prometheus={"url": self.url, "selector": self.selector, "start": self.started,
                                     "end": time.time(), "step": self.step}, rules_dirs=self.rules_dirs, http=self.http)
        for inst in report.instances:
            s = self._by_name.get(inst.instance)
            if s is not None and s.changes:
                inst.notes.append("verdict while watching (window " + _fmt_eta(self.window) + "): " + ", ".join(
                    f"{_hms(t)} {c} ({sev})" for t, c, sev in s.changes[-12:]))
        if self.source.info.skipped:
            report.notes.append(f"{self.source.info.skipped} query round(s) of {self.source.url} failed while watching")
        return report
