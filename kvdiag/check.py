"""``kvdiag check``: the unattended form of ``analyze`` for cron, Kubernetes CronJobs and Prometheus.

It runs the same pipeline as ``analyze`` (so the verdicts cannot disagree), then

* prints one Nagios plugin status line of at most 200 characters before the perfdata
  (``KVDIAG CRITICAL - capacity_pressure: … | kv_cache_usage=…``), then the details as long-output lines (the
  full summary, each note once), and exits 0/1/2/3 (OK/WARNING/CRITICAL/UNKNOWN) — Nagios Plugin Development
  Guidelines, "Plugin Output" (first line ``STATUS - text | perfdata``, further lines long text);
* with ``--state FILE`` remembers each counter's last value and time, and the server's process start time, so
  the next run judges only the increase since this one and reports a restart (counter reset, new process start)
  instead of a negative rate;
* with ``--textfile DIR`` writes a node_exporter textfile-collector file (prometheus-client's
  ``write_to_textfile``: written to a temporary file, then renamed), and with ``--pushgateway URL`` pushes the
  same series.
"""

from __future__ import annotations

from dataclasses import dataclass, field
import json
import math
import os
from pathlib import Path
import tempfile
import time

from prometheus_client import CollectorRegistry, Gauge, push_to_gateway, write_to_textfile

from .bundle import Bundle
from .errors import InputError
from .report.model import Report
from .signals import SIGNALS
from .thresholds import HIGH_USAGE

STATE_VERSION = 1
STATUS = {0: "OK", 1: "WARNING", 2: "CRITICAL", 3: "UNKNOWN"}
SEVERITY_CODE = {"ok": 0, "warning": 1, "critical": 2}
COUNTERS = [name for name, s in SIGNALS.items() if s.kind == "counter"]
TEXTFILE_NAME = "kvdiag.prom"
MAX_STATUS_CHARS = 200  # the status line before " | perfdata": what a phone shows of a Nagios/Icinga alert


class Note(str):
    """A note of a check: the full text (a long-output line) and ``short``, its few words on the status line.

    A plain ``str`` works wherever a note does (its short form is then cut from it by :func:`short_note`)."""

    short: str

    def __new__(cls, text: str, short: str) -> "Note":
        obj = super().__new__(cls, text)
        obj.short = short
        return obj


def short_note(note: str) -> str:
    """The status-line form of a note: its ``short`` when it is a :class:`Note`, else the text before the first
    " (" (the details in brackets go to the long output)."""
    return getattr(note, "short", None) or note.split(" (", 1)[0]


@dataclass
class CheckState:
    """What one run leaves for the next, per instance.

    Attributes:
        t: Unix time of the last observation, seconds.
        counters: last value of each counter signal (base units).
        process_start_time: the server's ``process_start_time_seconds`` when it exposes it.
    """

    t: float
    counters: dict[str, float] = field(default_factory=dict)
    process_start_time: float | None = None


def _is_state_file(data: object) -> bool:
    """True for what :func:`save_state` writes: a JSON object with kvdiag's ``"version"`` key."""
    return isinstance(data, dict) and "version" in data


class _Corrupt(ValueError):
    """A state entry that parses but cannot be right (its message names the field)."""


def _finite(value: object, name: str) -> float:
    """``value`` as a finite float, else ``ValueError`` naming ``name`` (a corrupt state entry)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise _Corrupt(f"{name} is not a number")
    x = float(value)
    if not math.isfinite(x):
        raise _Corrupt(f"{name} is not finite")
    return x


STATE_BYTES = 16 * 1024 * 1024


def _read_state(path: str):
    """The JSON document of a state file, through the input layer (bounded read, depth and number bounds).

    Raises:
        InputError: unreadable, not UTF-8, not JSON, too deep, a number of too many digits.
    """
    from .inputs.jsondoc import load

    return load(path, STATE_BYTES, "a kvdiag state file")


def check_state_path(path: str) -> None:
    """Refuse a ``--state`` path kvdiag must not write to.

    Raises:
        InputError: the folder does not exist (kvdiag does not create it), the path is a folder, or the file
            exists and is not a kvdiag state file (a JSON object with a ``"version"`` key): kvdiag never
            overwrites a log or config given by mistake. An empty file is accepted (a fresh state).
    """
    p = Path(path)
    parent = p.parent if str(p.parent) else Path(".")
    if p.is_dir():
        raise InputError(f"--state {path}: is a folder, expected a state file")
    if not parent.is_dir():
        raise InputError(f"--state {path}: folder {parent} does not exist (kvdiag does not create it)")
    if not p.exists():
        return
    from .inputs.files import read_bytes
    from .inputs.jsondoc import loads

    raw = read_bytes(path, STATE_BYTES, "a kvdiag state file", label="--state")
    if not raw.strip():
        return
    try:
        data = loads(raw.decode("utf-8"), path, "a kvdiag state file")
    except (InputError, ValueError):
        data = None
    if not _is_state_file(data):
        raise InputError(f"--state {path}: not a kvdiag state file (expected a JSON object with a \"version\" "
                         "key); refusing to overwrite it")


def load_state(path: str, instance: str, now: float | None = None) -> tuple[CheckState | None, str]:
    """Read the previous run's state for ``instance``.

    A missing, unreadable or corrupt entry never stops a check: returns ``(None, note)`` with a note that the
    window starts fresh (the file is rewritten by :func:`save_state`). A time that is not finite, not positive
    or more than a day ahead of ``now`` (Unix s, default the clock), and counters that are not finite, count as
    corrupt.
    """
    p = Path(path)
    if not p.exists():
        return None, ""
    now = time.time() if now is None else now
    try:
        data = _read_state(path)
        entry = data["instances"][instance]
        if data.get("version") != STATE_VERSION:
            return None, Note(f"state file {path}: version {data.get('version')!r} not understood, starting fresh",
                              "state file not understood, starting fresh")
        t = _finite(entry["t"], "t")
        if not 0 < t <= now + 86400:
            raise _Corrupt(f"t {t:.0f} is not between 1970 and a day from now")
        counters = {k: _finite(v, k) for k, v in entry.get("counters", {}).items() if k in COUNTERS}
        pst = entry.get("process_start_time")
        return CheckState(t, counters, _finite(pst, "process_start_time") if pst is not None else None), ""
    except KeyError:
        return None, ""
    except (OSError, ValueError, TypeError, AttributeError, OverflowError, RecursionError, InputError) as exc:
        why = str(exc) if isinstance(exc, _Corrupt) else (
            "not a kvdiag state file" if isinstance(exc, InputError) else exc.__class__.__name__)
        return None, Note(f"state file {path} unreadable ({why}), starting fresh",
                          "state file unreadable, starting fresh")


def save_state(path: str, instance: str, state: CheckState) -> str:
    """Write ``state`` for ``instance`` (other instances' entries are kept); atomic (temp file, rename).

    Returns a note when the file could not be written (the check still reports its verdict).
    """
    p = Path(path)
    data: dict = {"version": STATE_VERSION, "instances": {}}
    try:
        old = _read_state(path) if p.exists() else None
        if old is None:
            raise FileNotFoundError(path)
        if isinstance(old, dict) and old.get("version") == STATE_VERSION and isinstance(old.get("instances"), dict):
            data = old
        elif not _is_state_file(old):
            return Note(f"state file {path} not written (not a kvdiag state file)", "state file not written")
    except FileNotFoundError:
        pass
    except (OSError, ValueError, RecursionError, InputError):
        if p.exists() and p.stat().st_size > 0:
            return Note(f"state file {path} not written (not a kvdiag state file)", "state file not written")
    data["instances"][instance] = {"t": state.t, "counters": state.counters,
                                   "process_start_time": state.process_start_time}
    from .fileio import atomic_write

    try:
        atomic_write(p, json.dumps(data, indent=1, sort_keys=True))
    except OSError as exc:
        return Note(f"state file {path} not written ({exc.strerror or exc})", "state file not written")
    return ""


def seed_from_state(bundle: Bundle, state: CheckState) -> None:
    """Put the previous run's counters into ``bundle`` at their old time, so increases span both runs."""
    for name, value in state.counters.items():
        bundle.add(name, value, f"state: previous check @{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(state.t))}",
                   t=state.t)


def state_from_bundle(bundle: Bundle) -> CheckState | None:
    """The last counter values and process start time of a run, or ``None`` when it saw no counter."""
    df = bundle.frame()
    if df.empty:
        return None
    counters: dict[str, float] = {}
    t_last = math.nan
    for name in COUNTERS:
        rows = df[(df["signal"] == name) & df["value"].notna()]
        rows = rows[~rows["source"].str.startswith("state:")]
        if rows.empty:
            continue
        counters[name] = float(rows["value"].iloc[-1])
        if not math.isnan(rows["t"].iloc[-1]):
            t_last = float(rows["t"].iloc[-1]) if math.isnan(t_last) else max(t_last, float(rows["t"].iloc[-1]))
    pst_rows = df[df["signal"] == "process_start_time"]
    pst = float(pst_rows["value"].iloc[-1]) if len(pst_rows) else None
    if not counters and pst is None:
        return None
    return CheckState(t_last if not math.isnan(t_last) else time.time(), counters, pst)


def restart_notes(previous: CheckState | None, current: CheckState | None) -> list[str]:
    """Describe a restart between two runs (a new process start time, a counter lower than before) in one note:
    what showed it, in full for the long output; "server restarted since the last check" once on the status
    line."""
    if previous is None or current is None:
        return []
    why = []
    if previous.process_start_time and current.process_start_time and \
            current.process_start_time != previous.process_start_time:
        why.append("process start time changed")
    for name, old in previous.counters.items():
        new = current.counters.get(name)
        if new is not None and new < old:
            why.append(f"{name} reset {old:g} → {new:g}, counted from zero, not as a negative rate")
            break
    if not why:
        return []
    short = "server restarted since the last check"
    return [Note(f"{short}: {'; '.join(why)}", short)]


SEVERITIES = ("ok", "warning", "critical")


def normalize_on(option: str, values: tuple[str, ...], classes: set[str]) -> tuple[str, ...]:
    """Check ``--warn-on`` / ``--fail-on`` values: each a verdict class (exact) or a severity (any case).

    Returns the values with severities lower-cased.

    Raises:
        InputError: a value is neither, naming the option and the allowed values (a typo must not turn a
            CRITICAL into OK).
    """
    out = []
    for value in values:
        if value.strip().lower() in SEVERITIES:
            out.append(value.strip().lower())
        elif value in classes:
            out.append(value)
        else:
            raise InputError(f"{option} {value!r}: expected a severity ({'|'.join(SEVERITIES)}) or a verdict class "
                             f"({'|'.join(sorted(classes))})")
    return tuple(out)


def status_of(report: Report, warn_on: tuple[str, ...], fail_on: tuple[str, ...], usage: float | None = None) -> int:
    """Nagios status of a report.

    Without ``--warn-on`` / ``--fail-on`` the verdict's severity decides (ok 0, warning 1, critical 2), raised to the
    perfdata thresholds it prints: a window whose peak KV usage ``usage`` (ratio 0-1) reached :data:`USAGE_WARN` is
    at least WARNING, :data:`USAGE_CRIT` at least CRITICAL. With them, a verdict whose class or severity is listed in
    ``fail_on`` is CRITICAL, in ``warn_on`` WARNING, and any other OK. ``inconclusive`` is always UNKNOWN (3).
    """
    v = report.verdict
    if v.primary == "inconclusive":
        return 3
    if not warn_on and not fail_on:
        code = SEVERITY_CODE[v.severity]
        if usage is not None and usage >= USAGE_CRIT:
            return 2
        if usage is not None and usage >= USAGE_WARN:
            return max(code, 1)
        return code
    keys = {v.primary, v.severity}
    if keys & set(fail_on):
        return 2
    if keys & set(warn_on):
        return 1
    return 0


USAGE_WARN = HIGH_USAGE
"""kv_cache_usage warning threshold (perfdata, and the least status of a run that reached it): a pool this full
queues or preempts the next request (:mod:`kvdiag.thresholds`)."""
USAGE_CRIT = 1.0
"""kv_cache_usage critical threshold: every block of the pool in use, no free block for a new request's first chunk
or a running request's next block."""


def usage_max(bundle: Bundle) -> float | None:
    """The window's peak ``kv_cache_usage`` (ratio 0-1), ``None`` without one."""
    rows = bundle.signal("kv_cache_usage").dropna(subset=["value"])
    return float(rows["value"].max()) if not rows.empty else None


def perfdata(bundle: Bundle, report: Report, thresholds: bool = True) -> str:
    """Nagios perfdata ``label=value[unit];warn;crit;min;max`` for the numbers a dashboard would plot.

    kv_cache_usage (max over the window; warning threshold :data:`USAGE_WARN`, critical :data:`USAGE_CRIT`, the same
    on every run, and honoured by :func:`status_of`; none with ``thresholds=False``, when ``--warn-on`` /
    ``--fail-on`` make the status the verdict's class alone), preemptions and waiting
    (increase / max over the window), prefix-cache hit rate (late window) when present, and
    ``kv_full_eta_seconds`` (the forecast time until the pool is full at the current usage trend, seconds; warning
    threshold = rule CAP002's horizon) when usage is rising.
    """
    from .engine.evaluate import aggregate

    parts = []

    def one(label: str, signal: str, agg: str, tail: str, fmt: str = "") -> None:
        rows = bundle.signal(signal).sort_values("seq")
        if rows.empty:
            return
        value, _ = aggregate(rows, agg, SIGNALS[signal].kind)
        if isinstance(value, float) and not math.isfinite(value):
            return
        parts.append(f"{label}={_plain(value, fmt)}{tail}")

    # fixed, distinct thresholds (issue 39 item 8): a graph's threshold lines must not move from run to run, so not
    # the near-full level derived from each window; status_of honours them
    one("kv_cache_usage", "kv_cache_usage", "max",
        f";{_plain(USAGE_WARN)};{_plain(USAGE_CRIT)};0;1" if thresholds else ";;;0;1")
    one("preemptions", "num_preemptions", "increase", ";;;0")
    one("waiting", "num_requests_waiting", "max", ";;;0")
    one("running", "num_requests_running", "max", ";;;0")
    one("prefix_cache_hit_rate", "prefix_cache_hit_rate_late", "last", ";;;0;1")
    # the forecast only when CAP002 made it (a slope it refused — too few samples, noise, a step — is no forecast);
    # warning range "@0:H": alert while the time left is inside 0..H (Nagios range syntax; plain "H" means above H)
    forecast = next((f for f in report.findings if getattr(f, "status", "") == "fires"
                     and f.rule_id in {r.id for r in _forecast_rules()}), None)
    if forecast is not None:
        horizon = next((r.params.get("horizon") for r in _forecast_rules() if r.id == forecast.rule_id), None)
        one("kv_full_eta_seconds", "kv_full_eta_seconds", "last", f"s;@0:{horizon:g};;0" if horizon else "s;;;0", ".0f")
    return " ".join(parts)


def _plain(value: float, fmt: str = "") -> str:
    """A perfdata number in plain decimal notation (Nagios perfdata values are ``[-0-9.]``, no exponent)."""
    if fmt:
        return f"{value:{fmt}}"
    if float(value).is_integer():
        return f"{value:.0f}"
    text = f"{value:.6f}".rstrip("0").rstrip(".")
    return text if text not in ("", "-0") else "0"


def _forecast_rules() -> list:
    """The shipped forecast rules (CAP002), for the horizon its perfdata threshold shows; [] if they cannot load."""
    from .engine.model import load_rules
    from .errors import RuleFileError

    try:
        return [r for r in load_rules(None) if r.forecast]
    except RuleFileError:
        return []


def _split(sentences: list[str], room: int, clauses: bool = True) -> tuple[str, str]:
    """``sentences`` (a summary's :meth:`~kvdiag.engine.summary.Summary.sentences`, or one error message) as
    ``(shown, rest)`` with ``shown`` at most ``room`` characters and nothing said twice: whole sentences when they fit,
    else the first sentence up to a ``:`` or ``;`` (or else a ``,``; the rest goes on), else cut at a word (or after a
    ``/``) with "…" (the rest starts with "…"). ``clauses=False`` (an error message, which starts with the file or
    option it is about) skips the sentence and clause steps."""
    import re

    text = " ".join(sentences).strip()
    if len(text) <= room:
        return text, ""
    sentences = sentences if clauses else [text]
    shown = ""
    for i, sentence in enumerate(sentences if clauses else []):
        candidate = f"{shown} {sentence}".strip()
        if len(candidate) > room:
            break
        shown = candidate
    if shown:
        return shown, " ".join(sentences[i:])
    first = sentences[0]
    for marks in (":;", ",") if clauses else ():  # a clause before a list's comma
        for m in reversed(list(re.finditer(rf"[{marks}] ", first))):
            if m.start() <= room and m.start() >= room // 3:
                return first[:m.start()], (first[m.end():] + " " + " ".join(sentences[1:])).strip()
    cut = first[:max(1, room - 1)]
    breaks = [m.end() for m in re.finditer(r"[ /|]", cut) if m.end() >= room // 2]
    if breaks:
        cut = cut[:breaks[-1]]
    cut = cut.rstrip(" ,;:")
    return cut + "…", "…" + text[len(cut):].lstrip()


def status_output(code: int, report: Report | None, perf: str, notes: list[str], error: str = "") -> str:
    """The Nagios plugin output of a check (without the final newline).

    First line ``KVDIAG <STATUS> - <class>: <summary>[; <short notes>] | <perfdata>``, at most
    :data:`MAX_STATUS_CHARS` characters before `` | ``: the summary's first sentences or clause when it does not
    fit (:func:`_split`), and each note by its short form (:func:`short_note`), each once. Then the long
    output, one line each: the rest of the summary, and every note whose full text says more than its short
    form (each once). ``|`` in any text becomes ``/`` (Nagios reads it as perfdata).
    """
    notes = list(dict.fromkeys(n for n in notes if n))
    shorts = list(dict.fromkeys(short_note(n) for n in notes))
    if report is None:
        head, sentences = "KVDIAG UNKNOWN - ", [" ".join(error.split())]
    else:
        v = report.verdict
        head, sentences = f"KVDIAG {STATUS[code]} - {v.primary}: ", v.parts.sentences()
    tail = "; " + "; ".join(shorts) if shorts else ""
    if len(head) + len(tail) + 60 > MAX_STATUS_CHARS:  # many notes: name the first, count the rest
        tail = f"; {shorts[0]}; {len(shorts) - 1} more note(s) below" if len(shorts) > 1 else tail
        if len(head) + len(tail) + 60 > MAX_STATUS_CHARS:
            tail = f"; {len(shorts)} note(s) below"
    shown, rest = _split(sentences, MAX_STATUS_CHARS - len(head) - len(tail), clauses=report is not None)
    if tail:
        shown = shown.rstrip(".")
    first = (head + shown + tail).replace("|", "/")[:MAX_STATUS_CHARS]
    long_lines = [rest] if rest else []
    long_lines += [n for n in notes if str(n) != short_note(n) or short_note(n) not in tail]
    out = first + (f" | {perf}" if perf else "")
    return "\n".join([out] + [" ".join(str(line).split()).replace("|", "/") for line in long_lines])


def status_line(code: int, report: Report | None, perf: str, extra: list[str], error: str = "") -> str:
    """The first line of :func:`status_output` (kept for callers that want the status line only)."""
    return status_output(code, report, perf, extra, error).split("\n", 1)[0]


LABEL = "vllm_instance"  # the same label as kvdiag watch --listen (kvdiag/exporter.py)


def build_registry(instance: str, report: Report | None, success: bool, now: float) -> CollectorRegistry:
    """The series ``--textfile`` writes and ``--pushgateway`` pushes (prometheus-client renders them), the server
    named by ``vllm_instance``: ``instance`` is the label of the target Prometheus scrapes (node_exporter, the
    Pushgateway), which would turn ours into ``exported_instance``."""
    reg = CollectorRegistry()
    ok = Gauge("kvdiag_check_success", "1 when the last kvdiag check could judge the server", [LABEL],
               registry=reg)
    ok.labels(instance).set(1 if success else 0)
    last = Gauge("kvdiag_last_run_timestamp_seconds", "Unix time of the last kvdiag check", [LABEL],
                 registry=reg)
    last.labels(instance).set(now)
    if report is not None:
        v = Gauge("kvdiag_verdict", "The verdict of the last kvdiag check (always 1; read the labels)",
                  [LABEL, "class", "severity"], registry=reg)
        v.labels(instance, report.verdict.primary, report.verdict.severity).set(1)
        f = Gauge("kvdiag_finding", "1 when the rule fires (severity ok: a not-a-KV-problem note), 0 when quiet or unknown",
                  [LABEL, "rule_id", "class", "severity", "status"], registry=reg)
        for finding in report.findings:
            sev = finding.severity if finding.status == "fires" else "ok"
            f.labels(instance, finding.rule_id, finding.cls, sev, finding.status).set(
                1 if finding.status == "fires" else 0)
    return reg


def write_textfile(directory: str, registry: CollectorRegistry) -> str:
    """Write ``DIR/kvdiag.prom`` atomically (prometheus-client writes a temp file and renames it).

    ``DIR`` must exist (node_exporter reads a folder it was configured with; a mistyped one is not created).
    Returns a note (:class:`Note`) when the file could not be written.
    """
    if Path(directory).exists() and not Path(directory).is_dir():
        return Note(f"textfile {directory} not written (a file, not a folder: --textfile takes the folder "
                    "node_exporter reads, and kvdiag writes kvdiag.prom in it)", "textfile not written")
    if not Path(directory).is_dir():
        return Note(f"textfile {directory} not written (no such folder)", "textfile not written")
    try:
        write_to_textfile(str(Path(directory) / TEXTFILE_NAME), registry)
    except OSError as exc:
        return Note(f"textfile {directory} not written ({exc.strerror or exc})", "textfile not written")
    return ""


def push(url: str, job: str, instance: str, registry: CollectorRegistry, timeout: float = 10.0) -> str:
    """Push the series to a Pushgateway, grouped by ``instance``, within ``timeout`` seconds in all
    (a gateway that answers byte by byte is abandoned). ``user:password@`` in ``url`` is sent as
    HTTP basic auth, never shown. Returns a note on failure (the URL without credentials)."""
    from urllib.parse import urlsplit, urlunsplit

    from prometheus_client.exposition import basic_auth_handler, default_handler

    from .collect.metrics import run_with_deadline, safe_url

    from .inputs.http import url_problem

    shown = safe_url(url)
    problem = url_problem(url)  # a password holding '#' is told as such, not as "not an http:// URL"
    if problem:
        return Note(f"push to {shown} failed ({problem})", "push failed")
    try:
        parts = urlsplit(url)
        user, password = parts.username, parts.password
        plain = urlunsplit((parts.scheme, parts.netloc.rsplit("@", 1)[-1], parts.path, parts.query, ""))
    except ValueError:
        return Note(f"push to {shown} failed (not a URL)", "push failed")
    if parts.scheme not in ("http", "https"):
        return Note(f"push to {shown} failed (expected an http:// or https:// URL)", "push failed")

    def handler(url, method, timeout, headers, data):  # prometheus-client passes these by name
        if user is not None:
            return basic_auth_handler(url, method, timeout, headers, data, username=user, password=password)
        return default_handler(url, method, timeout, headers, data)

    try:
        run_with_deadline(lambda: push_to_gateway(plain, job=job, registry=registry,
                                                  grouping_key={LABEL: instance}, timeout=timeout,
                                                  handler=handler),
                          timeout, f"no complete answer within {timeout:g}s")
    except Exception as exc:  # noqa: BLE001 - urllib errors of several kinds; the check still reports
        return Note(f"push to {shown} failed ({push_reason(exc, timeout)})", "push failed")
    return ""


def push_reason(exc: BaseException, timeout: float) -> str:
    """Why a push failed, in words (not urllib's ``<urlopen error [Errno 111] …>``): ``connection refused``,
    ``HTTP 500 Internal Server Error``, ``no answer within 10s``, the OS's words for other socket errors, or
    kvdiag's own message (a deadline). The URL pushed to holds no credentials, so what is shown is safe."""
    import socket
    from urllib.error import HTTPError, URLError

    if exc.__class__.__name__ == "ScrapeError":
        return str(exc)
    if isinstance(exc, HTTPError):
        return f"HTTP {exc.code} {exc.reason}"[:160]
    reason = exc.reason if isinstance(exc, URLError) else exc
    if isinstance(reason, ConnectionRefusedError):
        return "connection refused"
    if isinstance(reason, (TimeoutError, socket.timeout)):
        return f"no answer within {timeout:g}s"
    if isinstance(reason, socket.gaierror):
        return "host name not found"
    if isinstance(reason, OSError) and reason.strerror:
        return reason.strerror.lower()[:160]
    text = " ".join(str(reason).split())
    return f"{reason.__class__.__name__}: {text[:160]}" if not isinstance(reason, str) else text[:160]
