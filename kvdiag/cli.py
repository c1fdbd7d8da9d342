"""Command line: wiring only. Exit codes are mapped in one place, :func:`main`.

0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN (bad usage, unreadable input, unreachable URL, nothing
evaluable), 130 on Ctrl-C or SIGTERM before anything was judged (one during a live window ends it and judges what
was scraped, :class:`kvdiag.collect.metrics.WindowInterrupt`). No traceback unless ``--debug``.
"""

from __future__ import annotations

import math
import re
import sys
import textwrap

import click

from . import __version__
from .errors import ExitStatus, InputError, KvdiagError
from .durations import parse_duration
from .engine.model import load_rules


class Duration(click.ParamType):
    """``500ms``, ``30s``, ``5m``, ``1h`` → seconds (float)."""

    name = "duration"

    def __init__(self, min_seconds: float = 0.0, max_seconds: float = float("inf")) -> None:
        self.min_seconds, self.max_seconds = min_seconds, max_seconds

    def convert(self, value, param, ctx):
        if isinstance(value, (int, float)):
            return float(value)
        try:
            seconds = parse_duration(value)
        except (ValueError, OverflowError) as exc:
            self.fail(str(exc), param, ctx)
        if seconds <= 0:
            self.fail(f"{value!r} must be longer than zero", param, ctx)
        if not math.isfinite(seconds) or seconds > self.max_seconds:
            self.fail(f"{value!r} is too long: at most {_fmt_seconds(self.max_seconds)}", param, ctx)
        if seconds < self.min_seconds:
            self.fail(f"{value!r} is too short: at least {_fmt_seconds(self.min_seconds)}", param, ctx)
        return seconds


def _fmt_seconds(s: float) -> str:
    for unit, n in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if s >= n and s % n == 0:
            return f"{s / n:g}{unit}"
    return f"{s * 1000:g}ms"


DURATION = Duration()
SCRAPE_DURATION = Duration(max_seconds=7 * 86400)  # a scrape window of more than a week is a typo
SCRAPE_INTERVAL = Duration(min_seconds=0.1, max_seconds=86400)  # below 100 ms it would hammer the endpoint
HTTP_TIMEOUT = Duration(max_seconds=3600)


def _finite(ctx, param, value):
    """Reject NaN and ±Inf, which pass click's FloatRange checks."""
    if value is not None and not math.isfinite(value):
        raise click.BadParameter(f"{value!r} is not a finite number", ctx=ctx, param=param)
    return value


def exit_codes(*rows: tuple[str, str]) -> str:
    """A command's ``--help`` epilog listing its exit codes, one per line, wrapped to the help's width (click keeps
    a ``\\b`` paragraph as it is)."""
    width = max(len(code) for code, _ in rows)
    lines = []
    for code, text in rows:
        lines += textwrap.wrap(text, width=92 - width, initial_indent=f"{code:<{width}}  ",
                               subsequent_indent=" " * (width + 2)) or [code]
    return "\b\nExit codes:\n" + "\n".join(lines)


INTERRUPT_ROW = ("130", "interrupted: Ctrl-C or SIGTERM before anything was judged, or a second one (one during a "
                        "--metrics-url window ends it early and judges what was scraped)")
JUDGE_CODES = exit_codes(("0", "no problem found"), ("1", "warning"), ("2", "critical"),
                         ("3", "could not judge: bad usage, unreadable input, unreachable URL, nothing evaluable"),
                         INTERRUPT_ROW)
CHECK_CODES = exit_codes(("0", "OK"), ("1", "WARNING"), ("2", "CRITICAL"),
                         ("3", "UNKNOWN: could not judge, or an OK verdict whose --state, --textfile or --pushgateway "
                               "failed"), INTERRUPT_ROW)
RECORD_CODES = exit_codes(("0", "recording written"),
                          ("3", "nothing recorded (the first scrape failed), bad usage, --out not writable"),
                          ("130", "interrupted (what was recorded so far is written first)"))
ESTIMATE_CODES = exit_codes(("0", "estimate printed: vLLM would start"),
                            ("2", "vLLM would refuse to start (no KV memory, or a pool smaller than one max_model_len "
                                  "request); the first line says so with the smallest TP or memory that starts"),
                            ("3", "bad usage, unreadable or invalid --model-config"))
LIST_CODES = exit_codes(("0", "listed"), ("3", "bad usage, an invalid rule file under --rules"))
EXPLAIN_CODES = exit_codes(("0", "explained"), ("3", "no such rule, bad usage, an invalid rule file under --rules"))
EXPORT_CODES = exit_codes(("0", "written"), ("3", "bad usage, an invalid rule file, --out or --tests not writable"))
RULES_TEST_CODES = exit_codes(("0", "every case passed"), ("1", "a case failed"),
                              ("3", "bad usage, invalid rule or case files"))
RULES_CODES = exit_codes(("0", "done (rules test: every case passed)"), ("1", "rules test: a case failed"),
                         ("3", "bad usage, an invalid rule or case file, an unknown rule id"))
GROUP_CODES = exit_codes(("0", "analyze, check: no problem found; the other commands: done"),
                         ("1", "analyze, check: warning; diff --fail-on-regression: AFTER regressed; rules test: a "
                               "case failed"),
                         ("2", "analyze, check: critical; estimate: vLLM would refuse to start"),
                         ("3", "could not judge: bad usage, unreadable input, unreachable URL, nothing evaluable"),
                         ("130", "interrupted (see 'kvdiag analyze --help')"))


class GreedyOption(click.Option):
    """A repeatable option that also takes the values after it, up to the next option: ``--metrics-file *.prom``
    (the shell's 59 names after one flag). Only for commands without positional arguments."""

    def add_to_parser(self, parser, ctx) -> None:
        super().add_to_parser(parser, ctx)
        for opt in self.opts:
            entry = parser._long_opt.get(opt) or parser._short_opt.get(opt)
            if entry is None or getattr(entry, "_greedy", False):
                continue
            plain = entry.process

            def process(value, state, plain=plain):
                plain(value, state)
                while state.rargs and not state.rargs[0].startswith("-"):
                    state.opts[self.name].append(state.rargs.pop(0))

            entry.process, entry._greedy = process, True


def _source_options(f):
    """The sources shared by the judging verbs."""
    options = [
        click.option("--log", "logs", multiple=True, metavar="FILE",
                     help="vLLM log: file, .gz or .zst, '-' for stdin (repeatable; rotated sets read oldest first)."),
        click.option("--metrics-file", "metrics_files", multiple=True, metavar="FILE…", cls=GreedyOption,
                     help="Saved /metrics pages or recordings: files (several after one flag), a folder, a glob, a "
                          "saved series' times.csv (numbered pages take their times from it; repeatable)."),
        click.option("--metrics-url", "metrics_urls", multiple=True, metavar="URL",
                     help="Live /metrics endpoint to scrape (repeatable)."),
        click.option("--duration", type=SCRAPE_DURATION, default="30s", show_default=True,
                     help="How long to scrape a --metrics-url (at most 7d)."),
        click.option("--interval", type=SCRAPE_INTERVAL, default="5s", show_default=True,
                     help="Time between scrapes (at least 100ms)."),
        click.option("--model-config", type=str, default=None, metavar="FILE",
                     help="Hugging Face config.json of the served model (capacity arithmetic)."),
        click.option("--gpu-memory", type=click.FloatRange(min=0, min_open=True), default=None, metavar="GiB",
                     callback=_finite,
                     help="Total memory of one GPU, GiB (with --model-config: do the weights fit?)."),
        click.option("--tensor-parallel-size", type=click.IntRange(min=1), default=None, metavar="N",
                     help="Tensor parallel size of the deployment (when the log does not say)."),
        click.option("--gpu-memory-utilization", type=click.FloatRange(0, 1, min_open=True), default=None,
                     callback=_finite,
                     metavar="RATIO", help="gpu_memory_utilization of the deployment (when the inputs do not say)."),
        click.option("--rules", "rules_dirs", multiple=True, metavar="DIR", help="Extra folder of rule files."),
        click.option("--year", type=click.IntRange(1970, 2100), default=None, metavar="YEAR",
                     help="Year of log timestamps (vLLM prints none), 1970..2100."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def _http_options(f):
    """How kvdiag reaches /metrics endpoints and Prometheus servers (analyze, record)."""
    options = [
        click.option("--header", "headers", multiple=True, metavar="'Name: value'",
                     help="Extra HTTP request header (repeatable), e.g. 'Authorization: Bearer ...'."),
        click.option("--bearer-token-file", type=click.Path(dir_okay=False), default=None, metavar="FILE",
                     help="Send 'Authorization: Bearer <contents of FILE>'."),
        click.option("--ca-cert", type=click.Path(dir_okay=False), default=None, metavar="FILE",
                     help="CA bundle to verify TLS servers with (verification is on by default)."),
        click.option("--insecure", is_flag=True, help="Do not verify TLS certificates."),
        click.option("--timeout", type=HTTP_TIMEOUT, default="10s", show_default=True,
                     help="Longest time one HTTP request may take in all (connect, headers and body; at most 1h)."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def _header_value_problem(value: str) -> str:
    """Why ``value`` cannot be sent as an HTTP header value ('' when it can): :mod:`kvdiag.inputs.files`."""
    from .inputs.files import header_value_problem

    return header_value_problem(value)


def _http_opts(headers, bearer_token_file, ca_cert, insecure, timeout):
    """The command-line HTTP options → :class:`kvdiag.collect.metrics.HttpOptions`."""
    from .collect.metrics import HttpOptions
    from .errors import InputError

    hdrs = {}
    for h in headers:
        name, sep, value = h.partition(":")
        name = name.strip()
        if not sep or not re.fullmatch(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+", name):
            shown = name if re.fullmatch(r"[\x21-\x7e]{1,64}", name) else "(not shown)"
            raise click.BadParameter(f"{shown!r}: expected 'Name: value' with a header name of letters, digits "
                                     "and -", param_hint="--header")
        problem = _header_value_problem(value.strip())
        if problem:  # the value is never echoed: it is usually a secret
            raise click.BadParameter(f"{name}: the value {problem} (value not shown)", param_hint="--header")
        hdrs[name] = value.strip()
    if bearer_token_file:
        from .inputs.files import bearer_token

        hdrs["Authorization"] = f"Bearer {bearer_token(bearer_token_file)}"
    if insecure and ca_cert:
        raise click.UsageError("--insecure and --ca-cert contradict each other; give one")
    if ca_cert:
        from .inputs.files import ca_bundle

        ca_cert = ca_bundle(ca_cert)
    return HttpOptions(timeout=timeout, headers=hdrs, verify=False if insecure else (ca_cert or True))


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
             epilog=GROUP_CODES)
@click.version_option(__version__, prog_name="kvdiag")
@click.option("--debug", is_flag=True, help="Show tracebacks.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Diagnose KV-cache and GPU-memory trouble of vLLM servers from /metrics and logs."""
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug


@cli.command(epilog=JUDGE_CODES)
@_source_options
@click.option("--prometheus-url", default=None, metavar="URL",
              help="Judge every vLLM instance a Prometheus-API server (Prometheus, Thanos, Mimir, VictoriaMetrics) "
                   "holds; PromQL computes the rates, increases and quantiles.")
@click.option("--selector", default=None, metavar="'{job=\"vllm\"}'", help="Label matchers that pick the instances.")
@click.option("--since", default="1h", show_default=True, metavar="DURATION|TIME",
              help="Window start: a duration back from --until, or RFC 3339 / Unix seconds.")
@click.option("--until", default=None, metavar="TIME", help="Window end: RFC 3339 or Unix seconds (default: now).")
@click.option("--step", type=DURATION, default="15s", show_default=True, help="Resolution of the range queries.")
@_http_options
@click.option("--progress/--no-progress", default=None, help="Progress line while scraping (default: on a terminal).")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "markdown", "html"]), default="text", show_default=True)
@click.option("--output", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Write the report here instead of standard output.")
@click.option("--width", type=click.IntRange(40, 1000), default=None, metavar="N", help="Wrap the text report at N "
              "columns (default: the terminal's width on a terminal, else 100).")
@click.option("--trace", default=None, type=click.Path(dir_okay=False), metavar="FILE", help="The window's request "
              "trace (as for 'kvdiag simulate'): the remedies get simulated outcomes. Needs --step-cost.")
@click.option("--step-cost", default=None, metavar="K=V,...", help="Step-time constants for --trace "
              "(see 'kvdiag simulate --help').")
@click.option("--run", "run_sel", default=None, metavar="N|last|all", help="Which server run of the log to judge (a log "
              "is cut into runs at banners, new process ids and restarts): N (from 1), last (default) or all.")
@click.option("--debug", is_flag=True, help="Show tracebacks.")
@click.pass_context
def analyze(ctx, logs, metrics_files, metrics_urls, duration, interval, model_config, gpu_memory, tensor_parallel_size,
            gpu_memory_utilization, rules_dirs, year, prometheus_url, selector, since, until, step, headers,
            bearer_token_file, ca_cert, insecure, timeout, progress, fmt, output, width, trace, step_cost, run_sel, debug):
    """Diagnose a server from its logs and /metrics; verdict first, evidence under it.

    Several --metrics-url, or --prometheus-url: one verdict per server, the worst first.
    """
    if debug:
        ctx.obj["debug"] = True
    from .extras import require_html

    require_html(fmt)  # the kvdiag[html] extra: one line when matplotlib is missing, before any input is read
    if not (logs or metrics_files or metrics_urls or prometheus_url or (model_config and gpu_memory)):
        raise click.UsageError("give at least one source: --log, --metrics-file, --metrics-url or --prometheus-url "
                               "(or --model-config with --gpu-memory for a pre-flight check)")
    if output is not None and not output.strip():
        raise click.UsageError("--output '': expected a file path (leave --output out to write to standard output)")
    if output:  # before any work: never write the report over an input, a folder or a device
        from .fileio import check_output_target

        from .inputs.files import folder_files

        check_output_target(output, "--output", [*logs, *metrics_files, model_config or "", trace or "",
                                                 bearer_token_file or "", ca_cert or "", *folder_files(rules_dirs)])
    if prometheus_url and (logs or metrics_files or metrics_urls):
        raise click.UsageError("--prometheus-url judges the instances it holds; it does not mix with --log, "
                               "--metrics-file or --metrics-url")
    if not prometheus_url:
        given = [f"--{name}" for name in ("selector", "since", "until", "step")
                 if (src := ctx.get_parameter_source(name)) is not None and src.name != "DEFAULT"]
        if given:  # they would be silently ignored: the window of a log or a scrape is its own
            verb = "apply" if len(given) > 1 else "applies"
            raise click.UsageError(f"{', '.join(given)} only {verb} to --prometheus-url")
    if len(metrics_urls) > 1 and (logs or metrics_files):
        raise click.UsageError("with several --metrics-url kvdiag cannot tell which server a --log or "
                               "--metrics-file belongs to; analyze them one server at a time")
    if run_sel is not None and not logs:
        raise click.UsageError("--run picks a server run of a --log; give --log")
    if run_sel is not None and run_sel not in ("last", "all") and not (run_sel.isdigit() and int(run_sel) >= 1):
        raise click.UsageError(f"--run {run_sel}: expected a run number from 1, 'last' or 'all'")
    sim = None
    if trace or step_cost:  # simulated remedies (kvdiag/simulate/remedies.py): one server, a trace and its step cost
        from .simulate.remedies import prepare

        sim = prepare(trace, step_cost, several=bool(prometheus_url) or len(metrics_urls) > 1)
    from .analyze import analyze as run
    from .report.formats import RENDERERS
    from .report.render import terminal_layout

    http = _http_opts(headers, bearer_token_file, ca_cert, insecure, timeout)
    fleet = None
    if prometheus_url:
        from .collect.prometheus import parse_window

        from .collect.prometheus import effective_step

        start, end = parse_window(since, until)
        if effective_step(start, end, step) > step:  # Prometheus refuses more than 11,000 points per series
            new_step = float(int(effective_step(start, end, step)) + 1)
            click.echo(f"kvdiag: --step raised from {step:g}s to {new_step:g}s to stay within Prometheus' 11,000 "
                       "points per series", err=True)
            step = new_step
        fleet = {"url": prometheus_url, "selector": selector or "", "start": start, "end": end, "step": step}
    report = run(logs=list(logs), metrics_files=list(metrics_files), metrics_urls=list(metrics_urls),
                 duration=duration, interval=interval, model_config=model_config, rules_dirs=list(rules_dirs),
                 year=year, deployment={"gpu_total_bytes": gpu_memory and gpu_memory * 2**30,
                                        "tensor_parallel_size": tensor_parallel_size,
                                        "gpu_memory_utilization": gpu_memory_utilization},
                 progress=progress, http=http, prometheus=fleet, keep=sim and sim["keep"], run=run_sel)
    if sim:
        report.notes += sim["cite"](report)
    width, color = terminal_layout(None if output else click.get_text_stream("stdout"), width)
    text = RENDERERS[fmt](report, width=width, color=color) if fmt == "text" else RENDERERS[fmt](report)
    if output:
        from .export import write_output

        write_output(output, text, "--output")
    else:
        click.echo(text, nl=False)
    ctx.exit(report.exit_code)


@cli.command(epilog=CHECK_CODES)
@_source_options
@click.option("--warn-on", multiple=True, metavar="CLASS|SEVERITY", help="WARNING when the verdict is this class "
              "or severity (repeatable). With --warn-on/--fail-on, other verdicts are OK.")
@click.option("--fail-on", multiple=True, metavar="CLASS|SEVERITY", help="CRITICAL when the verdict is this class "
              "or severity (repeatable).")
@click.option("--state", "state_file", default=None, metavar="FILE",
              help="Remember counters between runs: judge the increase since the last check, notice restarts.")
@click.option("--textfile", default=None, metavar="DIR", help="Write DIR/kvdiag.prom for node_exporter.")
@click.option("--pushgateway", default=None, metavar="URL", help="Push the verdict series to a Pushgateway.")
@click.option("--job", default="kvdiag", show_default=True, metavar="NAME", help="Pushgateway job name.")
@click.option("--instance", default=None, metavar="NAME", help="vllm_instance label of the series (default: the URL or file checked).")
@_http_options
@click.option("--debug", is_flag=True, help="Show tracebacks.")
@click.pass_context
def check(ctx, logs, metrics_files, metrics_urls, duration, interval, model_config, gpu_memory, tensor_parallel_size,
          gpu_memory_utilization, rules_dirs, year, warn_on, fail_on, state_file, textfile, pushgateway, job, instance,
          headers, bearer_token_file, ca_cert, insecure, timeout, debug):
    """A Nagios status line (at most 200 characters) with perfdata, details below it (for cron and CronJobs).

    By default one scrape of each --metrics-url (--duration 1s); with --state the window runs from the previous
    check to this one.
    """
    import time as _time

    from . import check as chk
    from .analyze import analyze as run
    from .collect.metrics import WindowInterrupt
    from .errors import KvdiagError

    if not (logs or metrics_files or metrics_urls or (model_config and gpu_memory)):
        raise click.UsageError("give at least one source: --log, --metrics-file or --metrics-url")
    src = ctx.get_parameter_source("duration")
    if src is not None and src.name == "DEFAULT":
        duration = 1.0
    from .collect.metrics import safe_url

    if state_file:  # before anything is read: --state is written, never over an input (a token, a CA bundle)
        from .fileio import check_output_target

        from .inputs.files import folder_files

        check_output_target(state_file, "--state", [*logs, *metrics_files, model_config or "",
                                                    bearer_token_file or "", ca_cert or "", *folder_files(rules_dirs)])
    http = _http_opts(headers, bearer_token_file, ca_cert, insecure, timeout)
    inst = instance or (safe_url(metrics_urls[0]) if metrics_urls else
                        (logs[0] if logs else (metrics_files or [model_config])[0]))
    if warn_on or fail_on:
        try:
            classes = {r.cls for r in load_rules(list(rules_dirs))}
        except KvdiagError:  # the run reports the broken rule folder in the Nagios line
            classes = {r.cls for r in load_rules([])}
        classes |= {"healthy"}
        warn_on = chk.normalize_on("--warn-on", tuple(warn_on), classes)
        fail_on = chk.normalize_on("--fail-on", tuple(fail_on), classes)
    notes: list[str] = []
    previous = None
    state_note = ""
    if state_file:
        chk.check_state_path(state_file)
        previous, state_note = chk.load_state(state_file, inst)
        if state_note:
            notes.append(state_note)
    kept: list = []
    now = _time.time()
    interrupt = WindowInterrupt()
    try:
        report = run(logs=list(logs), metrics_files=list(metrics_files), metrics_urls=list(metrics_urls),
                     duration=duration, interval=interval, model_config=model_config, rules_dirs=list(rules_dirs),
                     year=year, progress=False, http=http,
                     deployment={"gpu_total_bytes": gpu_memory and gpu_memory * 2**30,
                                 "tensor_parallel_size": tensor_parallel_size,
                                 "gpu_memory_utilization": gpu_memory_utilization},
                     seed=(lambda b: chk.seed_from_state(b, previous)) if previous else None, keep=kept,
                     interrupt=interrupt)
    except KvdiagError as exc:
        if debug or ctx.obj.get("debug"):
            raise
        reg = chk.build_registry(inst, None, False, now)
        notes += [n for n in ((textfile and chk.write_textfile(textfile, reg)),
                              (pushgateway and chk.push(pushgateway, job, inst, reg, timeout=timeout))) if n]
        click.echo(chk.status_output(3, None, "", notes, error=str(exc)))
        ctx.exit(3)
    if interrupt.note:
        notes.append(chk.Note(interrupt.note, "window cut short by an interrupt"))
    notes += [chk.Note(n, "window too short for some classes") for n in report.notes if n.startswith("window ")
              and "too short to judge" in n]
    bundle = kept[0]
    current = chk.state_from_bundle(bundle)
    notes += chk.restart_notes(previous, current)
    if state_file and current is not None:
        note = chk.save_state(state_file, inst, current)
        if note:
            notes.append(note)
    code = chk.status_of(report, tuple(warn_on), tuple(fail_on))
    if state_note and code == 0:
        code = 3  # the window since the last check could not be judged; a WARNING/CRITICAL verdict still shows
    reg = chk.build_registry(inst, report, code != 3, now)
    for note in ((textfile and chk.write_textfile(textfile, reg)), (pushgateway and chk.push(pushgateway, job, inst, reg, timeout=timeout))):
        if note:
            notes.append(note)
            if code == 0:
                code = 3  # the verdict did not reach the monitoring it was meant for: not OK, never hides CRITICAL
    click.echo(chk.status_output(code, report, chk.perfdata(bundle, report), notes))
    ctx.exit(code)


@cli.command(epilog=RECORD_CODES)
@click.option("--metrics-url", required=True, metavar="URL", help="The /metrics endpoint to record.")
@click.option("--interval", type=SCRAPE_INTERVAL, default="5s", show_default=True,
              help="Time between scrapes (at least 100ms).")
@click.option("--duration", type=SCRAPE_DURATION, default="10m", show_default=True,
              help="How long to record (at most 7d).")
@click.option("--out", required=True, type=click.Path(dir_okay=False), metavar="FILE",
              help="OpenMetrics file to write (a timestamp on every sample, '# EOF').")
@_http_options
@click.option("--progress/--no-progress", default=None, help="Progress line while recording (default: on a terminal).")
@click.option("--debug", is_flag=True, help="Show tracebacks.")
def record(metrics_url, interval, duration, out, headers, bearer_token_file, ca_cert, insecure, timeout, progress,
           debug):
    """Record a /metrics endpoint to OpenMetrics for 'analyze --metrics-file' or 'promtool tsdb create-blocks-from
    openmetrics'."""
    from .record import record as rec

    from .collect.metrics import safe_url

    from .fileio import check_output_target

    target = check_output_target(out, "--out", [bearer_token_file or "", ca_cert or ""])
    if target.exists() and target.stat().st_size > 0:
        with open(target, "rb") as fh:
            head = fh.read(64)
        if not head.startswith((b"# HELP", b"# TYPE", b"# UNIT", b"# EOF")):
            raise InputError(f"--out {out}: exists and is not an OpenMetrics recording; kvdiag does not overwrite it")
    http = _http_opts(headers, bearer_token_file, ca_cert, insecure, timeout)
    n, samples = rec(metrics_url, out, duration=duration, interval=interval, http=http, progress=progress)
    click.echo(f"kvdiag: recorded {n} scrape(s), {samples} sample(s) of {safe_url(metrics_url)} to {out}", err=True)


for _p in check.params:  # check's --duration default is one scrape, not the shared 30s (see its docstring)
    if _p.name == "duration":
        _p.show_default = "1s: one scrape; with --state, since the last check"

@cli.group(epilog=RULES_CODES)
def rules() -> None:
    """List, explain, test and export the diagnosis rules."""


@rules.command("list", epilog=LIST_CODES)
@click.option("--rules", "rules_dirs", multiple=True, metavar="DIR", help="Extra folder of rule files.")
def rules_list(rules_dirs) -> None:
    """One line per rule: id, class, severity, title."""
    for r in sorted(load_rules(list(rules_dirs)), key=lambda r: r.id):
        click.echo(f"{r.id:10} {r.cls:24} {r.severity:9} {r.title}")


@rules.command("export", epilog=EXPORT_CODES)
@click.option("--format", "fmt", type=click.Choice(["prometheus"]), default="prometheus", show_default=True)
@click.option("--out", default=None, metavar="FILE", help="Write the rule file here (default: standard output).")
@click.option("--tests", "tests_out", default=None, metavar="FILE",
              help="Also write a 'promtool test rules' file built from the rules' cases.")
@click.option("--window", type=Duration(min_seconds=60, max_seconds=366 * 86400), default="5m", show_default=True,
              help="Range of the *_over_time windows (1m to 366d: a third of it still spans several scrapes).")
@click.option("--for", "for_", type=str, default="auto", show_default=True, metavar="DURATION",
              help="'for:' of every alert (at most 366d); auto: each rule's own window (the shortest range it "
                   "reads).")
@click.option("--runbook-base", default="docs/runbooks/", show_default=True, metavar="URL",
              help="Where the runbooks (docs/runbooks/<class>.md) are published: each alert's runbook_url is "
                   "URL/<class>.md.")
@click.option("--rules", "rules_dirs", multiple=True, metavar="DIR", help="Extra folder of rule files.")
def rules_export(fmt, out, tests_out, window, for_, runbook_base, rules_dirs) -> None:
    """Prometheus alerting rules for the rules PromQL can express (both vllm: and vllm_ names)."""
    from pathlib import Path

    from .engine.cases import find_case_files, load_cases
    from .engine.model import builtin_rules_dir
    from .export import export_prometheus, promtool_tests, write_output

    try:
        for_seconds = None if for_ == "auto" else parse_duration(for_)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--for") from None
    if for_seconds is not None and for_seconds > 366 * 86400:
        raise click.BadParameter(f"{for_!r} is too long: at most 366d", param_hint="--for")

    def promql_duration(seconds: float) -> str:  # whole units Prometheus reads: 36h, not 1.5d
        if float(seconds).is_integer() and seconds % 3600 == 0 and seconds:
            return f"{int(seconds // 3600)}h"
        if float(seconds).is_integer() and seconds % 60 == 0 and seconds:
            return f"{int(seconds // 60)}m"
        return f"{int(seconds)}s" if float(seconds).is_integer() else f"{int(round(seconds * 1000))}ms"

    win = promql_duration(window)
    for_ = None if for_seconds is None else promql_duration(for_seconds) if for_seconds else "0m"
    # build everything, then check and write the files, and only then print: an error leaves no half output
    for option, target in (("--out", out), ("--tests", tests_out)):
        if target and Path(target).is_dir():
            raise click.BadParameter(f"{target}: is a folder, expected a file path", param_hint=option)
        if target and not Path(target).parent.is_dir():
            raise click.BadParameter(f"{target}: folder {Path(target).parent} does not exist", param_hint=option)
    if out and tests_out:
        written = {Path(tests_out).resolve(), Path(tests_out).with_suffix(".rules.yml").resolve()}
        if Path(out).resolve() in written:
            raise click.BadParameter(f"{out}: is also where --tests {tests_out} writes (its tests, and the rules they "
                                     f"read as {Path(tests_out).with_suffix('.rules.yml').name}); give another file",
                                     param_hint="--out")
    loaded = load_rules(list(rules_dirs))
    text = export_prometheus(loaded, window=win, for_=for_, runbook_base=runbook_base)
    body, notes = None, []
    if tests_out:
        dirs = [builtin_rules_dir()] + [Path(d) for d in rules_dirs]
        cases = [c for f in find_case_files(dirs) for c in load_cases(f)]
        # the tests check the expressions at a case's last sample: they read a copy of the rules with 'for: 0m'
        test_rules = Path(tests_out).with_suffix(".rules.yml")
        body, notes = promtool_tests(loaded, cases, str(test_rules.resolve()), window=win, runbook_base=runbook_base)
        test_rules_text = export_prometheus(loaded, window=win, for_="0m", runbook_base=runbook_base)
    if out:
        write_output(out, text, "--out")
    if tests_out:
        write_output(str(test_rules), test_rules_text, "--tests")
        write_output(tests_out, body, "--tests")
    if not out:
        click.echo(text, nl=False)
    for note in notes:
        click.echo(f"kvdiag: {note}", err=True)


@rules.command("test", epilog=RULES_TEST_CODES)
@click.argument("cases_dir", required=False, type=click.Path(file_okay=False))
@click.option("--rules", "rules_dirs", multiple=True, metavar="DIR", help="Extra folder of rule files.")
@click.option("-v", "--verbose", is_flag=True, help="Print every case, not only failures.")
@click.pass_context
def rules_test(ctx, cases_dir, rules_dirs, verbose) -> None:
    """Run rule case files (default: the shipped rules' cases)."""
    from .engine.runcases import all_cases, run_case

    rules = load_rules(list(rules_dirs))
    failed = 0
    cases = all_cases([cases_dir] if cases_dir else None)
    if not cases:
        raise click.UsageError(f"no case files under {cases_dir or 'the shipped rules'} (expected cases/*.yaml)")
    for case in cases:
        res = run_case(case, rules)
        if not res.ok:
            failed += 1
        if verbose or not res.ok:
            mark = "ok  " if res.ok else "FAIL"
            click.echo(f"{mark} {case.rule_id} {case.name}: expected {case.expect}, got {res.got} — {res.message}")
    click.echo(f"{len(cases) - failed} passed, {failed} failed ({len(cases)} cases)")
    ctx.exit(1 if failed else 0)


@rules.command("explain", epilog=EXPLAIN_CODES)
@click.argument("rule_id")
@click.option("--rules", "rules_dirs", multiple=True, metavar="DIR", help="Extra folder of rule files.")
def rules_explain(rule_id, rules_dirs) -> None:
    """Meaning, impact, diagnosis, false positives and remedy of one rule."""
    found = [r for r in load_rules(list(rules_dirs)) if r.id.lower() == rule_id.lower() or r.name == rule_id]
    if not found:
        raise click.BadParameter(f"no rule {rule_id!r}; see 'kvdiag rules list'", param_hint="RULE_ID")
    r = found[0]
    click.echo(f"{r.id} {r.name} ({r.cls}, {r.severity})\n{r.title}\n")
    for key in ("meaning", "impact", "diagnosis", "false_positives", "remedy"):
        click.echo(key.replace("_", " ").capitalize() + ":")
        click.echo(textwrap.fill(" ".join(str(r.doc[key]).split()), width=96, initial_indent="  ",
                                 subsequent_indent="  "))
    click.echo(f"\nSignals required: {', '.join(' or '.join(g) for g in r.requires) or '-'}")
    click.echo(f"File: {r.path}")


WATCH_CODES = exit_codes(("0", "ended by q, Ctrl-C or SIGTERM: the final report printed"),
                         ("3", "bad usage, an invalid rule file, a --listen address that cannot be bound"))


@cli.command(epilog=WATCH_CODES)
@click.argument("urls", nargs=-1, metavar="URL…")
@click.option("--interval", type=SCRAPE_INTERVAL, default="5s", show_default=True,
              help="Time between scrapes and verdicts (at least 100ms).")
@click.option("--window", type=Duration(min_seconds=1, max_seconds=7 * 86400), default="5m", show_default=True,
              help="The verdict shown is judged on the pages of this last stretch (the final report on all of them).")
@click.option("--listen", default=None, metavar="HOST:PORT",
              help="Serve kvdiag's own /metrics there (verdict, findings, derived signals) for Prometheus.")
@click.option("--no-tui", is_flag=True, help="No terminal view (a sidecar): a line on stderr per change.")
@click.option("--prometheus-url", default=None, metavar="URL",
              help="Watch every vLLM instance a Prometheus-API server holds instead of /metrics URLs.")
@click.option("--selector", default=None, metavar="'{job=\"vllm\"}'",
              help="With --prometheus-url: label matchers that pick the instances.")
@click.option("--step", type=DURATION, default="15s", show_default=True,
              help="With --prometheus-url: resolution of the range queries.")
@click.option("--rules", "rules_dirs", multiple=True, metavar="DIR", help="Extra folder of rule files.")
@click.option("--width", type=click.IntRange(40, 1000), default=None, metavar="N",
              help="Wrap the final report at N columns.")
@_http_options
@click.option("--debug", is_flag=True, help="Show tracebacks.")
@click.pass_context
def watch(ctx, urls, interval, window, listen, no_tui, prometheus_url, selector, step, rules_dirs, width, headers,
          bearer_token_file, ca_cert, insecure, timeout, debug):
    """Watch vLLM /metrics endpoints live: the verdict, firing findings and sparklines, refreshed every interval.

    A server that stops answering is shown as down and retried with back-off. q or Ctrl-C leaves with the final
    report (as 'kvdiag analyze' on every page watched). --listen HOST:PORT serves the verdicts for Prometheus.
    """
    from .report.formats import RENDERERS
    from .report.render import terminal_layout
    from .watch import Watch, run_headless, run_tui

    if debug:
        ctx.obj["debug"] = True
    if not urls and not prometheus_url:
        raise click.UsageError("give at least one /metrics URL to watch, or --prometheus-url")
    if urls and prometheus_url:
        raise click.UsageError("--prometheus-url watches the instances it holds; it does not mix with /metrics URLs")
    if not prometheus_url and (selector or ctx.get_parameter_source("step").name != "DEFAULT"):
        raise click.UsageError("--selector and --step only apply to --prometheus-url")
    for u in [*urls, *([prometheus_url] if prometheus_url else [])]:
        if not re.match(r"https?://", u):
            raise click.BadParameter(f"{u!r}: expected an http:// or https:// URL", param_hint="URL")
    http = _http_opts(headers, bearer_token_file, ca_cert, insecure, timeout)
    loaded = load_rules(list(rules_dirs))
    if prometheus_url:
        from .watch import FleetWatch

        w = FleetWatch(prometheus_url, selector or "", step, interval, window, loaded, http)
        w.rules_dirs = list(rules_dirs)
    else:
        w = Watch(list(urls), interval, window, loaded, http)
    footer = ""
    if listen:
        from .exporter import serve

        server, port = serve(w, listen)
        footer = f"/metrics on {listen.rpartition(':')[0] or '0.0.0.0'}:{port}"
        click.echo(f"kvdiag watch: serving /metrics on {footer.split(' on ', 1)[1]}", err=True)
    w.start()
    try:
        if no_tui or not sys.stdout.isatty():
            run_headless(w, lambda line: click.echo(line, err=True))
        else:
            run_tui(w, footer=footer)
    finally:
        w.close()
        if listen:
            server.shutdown()
    report = w.final_report()
    width, color = terminal_layout(click.get_text_stream("stdout"), width)
    click.echo(RENDERERS["text"](report, width=width, color=color), nl=False)
    ctx.exit(0)


@cli.group(epilog=exit_codes(("0", "written"), ("3", "bad usage, an invalid rule file, --out not writable")))
def dashboards() -> None:
    """Grafana dashboards for vLLM's KV cache and kvdiag's rules."""


@dashboards.command("export", epilog=exit_codes(("0", "written"),
                                                ("3", "bad usage, an invalid rule file, --out not writable")))
@click.option("--out", default=None, metavar="FILE", help="Write the dashboard JSON here (default: standard output).")
@click.option("--window", type=Duration(min_seconds=60, max_seconds=366 * 86400), default="5m", show_default=True,
              help="Range of the rule panels' *_over_time windows (as for 'kvdiag rules export').")
@click.option("--rules", "rules_dirs", multiple=True, metavar="DIR", help="Extra folder of rule files.")
def dashboards_export(out, window, rules_dirs) -> None:
    """A Grafana dashboard (JSON, Grafana Foundation SDK): vLLM's pool, queue, preemptions and prefix cache, one
    row per diagnosis class with the queries that decide it, kvdiag's verdicts and alerts as annotations."""
    try:
        from .dashboards import export_json
    except ImportError as exc:  # pragma: no cover - a dependency of the package; said in one line if it is missing
        raise InputError(f"the Grafana Foundation SDK is not installed ({exc.name}): "
                         "pip install grafana-foundation-sdk") from None
    from .export import write_output
    from .fileio import check_output_target

    if out is not None:
        from .inputs.files import folder_files

        check_output_target(out, "--out", folder_files(rules_dirs))
    seconds = int(window)
    text = export_json(load_rules(list(rules_dirs)), window=f"{seconds // 60}m" if seconds % 60 == 0 else f"{seconds}s")
    if out:
        write_output(out, text, "--out")
    else:
        click.echo(text, nl=False)


from .estimate_cmd import estimate  # noqa: E402  (the capacity model's command)

estimate.epilog = ESTIMATE_CODES
cli.add_command(estimate)

from .diff_cmd import diff  # noqa: E402  (two inputs compared: kvdiag/diff.py)

diff.epilog = exit_codes(("0", "the comparison was made (--fail-on-regression: and AFTER did not regress); each "
                               "side's verdict is in the output"),
                         ("1", "--fail-on-regression only: AFTER regressed (a longer queue, less throughput, more "
                               "preemptions, fewer KV tokens, a failure BEFORE did not have, a worse verdict)"),
                         ("3", "could not compare: bad usage, unreadable input, or different models (without "
                               "--allow-different-models)"), INTERRUPT_ROW)
cli.add_command(diff)

from .simulate.cmd import simulate_cmd  # noqa: E402  (the what-if scheduler model's command)

simulate_cmd.epilog = exit_codes(("0", "table printed"), ("3", "bad usage, an unreadable or invalid trace, lab case "
                                                          "or --model-config, a run past --max-steps"))
cli.add_command(simulate_cmd)


def _terminated(signum, frame) -> None:  # noqa: ARG001 - signal handler signature
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the CLI and map every outcome to an exit code (the only place that does).

    SIGTERM (``kill``, systemd, Kubernetes) is handled as Ctrl-C is, for every command and at every moment, not
    only during a live window: ``kvdiag: interrupted`` and 130, ``record`` writes what it recorded first, and
    ``--output`` / ``--state`` files are left whole (their temporary file removed) instead of the process
    dying at once with 143. The previous handler is restored on return.
    """
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return _main(argv)
    old = signal.signal(signal.SIGTERM, _terminated)
    try:
        return _main(argv)
    finally:
        signal.signal(signal.SIGTERM, old if old is not None else signal.SIG_DFL)


def _main(argv: list[str] | None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args

    def trace() -> None:
        """``--debug``: the traceback, redacted, on stderr; what is shown changes, never the exit code."""
        if debug:
            import traceback

            from .redaction import redact

            sys.stderr.write(redact(traceback.format_exc()))
    verb = next((a for a in args if not a.startswith("-")), "")

    def nagios(message: str) -> None:
        """``kvdiag check`` speaks Nagios: a failure before the verdict is still one UNKNOWN line on stdout."""
        if verb == "check":
            from .check import status_output

            click.echo(status_output(3, None, "", [], error=message))
    try:
        if not [a for a in args if a != "--debug"]:  # bare 'kvdiag': what it does, not an error
            click.echo(cli.get_help(click.Context(cli, info_name="kvdiag")))
            return ExitStatus.OK
        rc = cli.main(args=args, prog_name="kvdiag", standalone_mode=False)
        return rc if isinstance(rc, int) else ExitStatus.OK
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.exceptions.Abort as exc:
        cause = exc.__cause__ or exc.__context__
        if isinstance(cause, EOFError):  # click turns any EOFError into Abort: an input ended early, not a ^C
            trace()
            click.echo(f"kvdiag: error: an input ended early ({cause or 'end of file'})", err=True)
            nagios(f"an input ended early ({cause or 'end of file'})")
            return ExitStatus.UNKNOWN
        click.echo("kvdiag: interrupted", err=True)
        return ExitStatus.INTERRUPTED
    except click.exceptions.NoArgsIsHelpError as exc:  # 'kvdiag rules' alone: its help, on stdout
        click.echo(exc.ctx.get_help() if exc.ctx is not None else exc.format_message())
        return ExitStatus.OK
    except click.ClickException as exc:  # usage errors, bad option values: UNKNOWN, not click's 2
        trace()
        hint = ""
        ctx = getattr(exc, "ctx", None)
        if isinstance(exc, click.UsageError) and ctx is not None:
            hint = f" (see '{ctx.command_path} --help')"
        click.echo(f"kvdiag: error: {exc.format_message()}{hint}", err=True)
        nagios(exc.format_message())
        return ExitStatus.UNKNOWN
    except KvdiagError as exc:
        trace()
        click.echo(f"kvdiag: error: {exc}", err=True)
        nagios(str(exc))
        return exc.exit_code
    except KeyboardInterrupt:
        click.echo("kvdiag: interrupted", err=True)
        return ExitStatus.INTERRUPTED
    except BrokenPipeError:
        return ExitStatus.UNKNOWN
    except Exception as exc:  # noqa: BLE001 - the promise is: one line, never a traceback without --debug
        from .redaction import redact

        trace()
        text = redact(str(exc))
        text = text if len(text) <= 200 else text[:200] + "…"
        click.echo(f"kvdiag: internal error: {exc.__class__.__name__}: {text}"
                   f"{'' if debug else ' (run with --debug for the traceback)'}", err=True)
        nagios(f"internal error: {exc.__class__.__name__}")
        return ExitStatus.UNKNOWN


def entry() -> None:
    """The console-script entry point of earlier installs (``kvdiag.cli:entry``): see :func:`kvdiag.__main__.entry`."""
    from .__main__ import entry as run

    run()
