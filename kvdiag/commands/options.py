"""What several commands share: click types (durations, finite numbers), the exit-code epilogs' form, the judging
verbs' sources (:func:`source_options`) and how kvdiag reaches HTTP servers (:func:`http_options`,
:func:`http_opts`)."""

from __future__ import annotations

import math
import re
import textwrap

import click

from ..durations import parse_duration


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


def finite(ctx, param, value):
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


def source_options(f):
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
                     callback=finite,
                     help="Total memory of one GPU, GiB (with --model-config: do the weights fit?)."),
        click.option("--tensor-parallel-size", type=click.IntRange(min=1), default=None, metavar="N",
                     help="Tensor parallel size of the deployment (when the log does not say)."),
        click.option("--gpu-memory-utilization", type=click.FloatRange(0, 1, min_open=True), default=None,
                     callback=finite,
                     metavar="RATIO", help="gpu_memory_utilization of the deployment (when the inputs do not say)."),
        click.option("--rules", "rules_dirs", multiple=True, metavar="DIR", help="Extra folder of rule files."),
        click.option("--year", type=click.IntRange(1970, 2100), default=None, metavar="YEAR",
                     help="Year of log timestamps (vLLM prints none), 1970..2100."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def http_options(f):
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
    from ..inputs.files import header_value_problem

    return header_value_problem(value)


def http_opts(headers, bearer_token_file, ca_cert, insecure, timeout):
    """The command-line HTTP options → :class:`kvdiag.collect.metrics.HttpOptions`."""
    from ..collect.metrics import HttpOptions
    from ..errors import InputError

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
        from ..inputs.files import bearer_token

        hdrs["Authorization"] = f"Bearer {bearer_token(bearer_token_file)}"
    if insecure and ca_cert:
        raise click.UsageError("--insecure and --ca-cert contradict each other; give one")
    if ca_cert:
        from ..inputs.files import ca_bundle

        ca_cert = ca_bundle(ca_cert)
    return HttpOptions(timeout=timeout, headers=hdrs, verify=False if insecure else (ca_cert or True))
