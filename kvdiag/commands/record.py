"""``kvdiag record``: a /metrics endpoint recorded to OpenMetrics (:mod:`kvdiag.record`)."""

from __future__ import annotations

import click

from ..errors import InputError
from .options import SCRAPE_DURATION, SCRAPE_INTERVAL, exit_codes, http_options, http_opts

RECORD_CODES = exit_codes(("0", "recording written"),
                          ("3", "nothing recorded (the first scrape failed), bad usage, --out not writable"),
                          ("130", "interrupted (what was recorded so far is written first)"))


@click.command(epilog=RECORD_CODES)
@click.option("--metrics-url", required=True, metavar="URL", help="The /metrics endpoint to record.")
@click.option("--interval", type=SCRAPE_INTERVAL, default="5s", show_default=True,
              help="Time between scrapes (at least 100ms).")
@click.option("--duration", type=SCRAPE_DURATION, default="10m", show_default=True,
              help="How long to record (at most 7d).")
@click.option("--out", required=True, type=click.Path(dir_okay=False), metavar="FILE",
              help="OpenMetrics file to write (a timestamp on every sample, '# EOF').")
@http_options
@click.option("--progress/--no-progress", default=None, help="Progress line while recording (default: on a terminal).")
@click.option("--debug", is_flag=True, help="Show tracebacks.")
def record(metrics_url, interval, duration, out, headers, bearer_token_file, ca_cert, insecure, timeout, progress,
           debug):
    """Record a /metrics endpoint to OpenMetrics for 'analyze --metrics-file' or 'promtool tsdb create-blocks-from
    openmetrics'."""
    from ..record import record as rec

    from ..collect.metrics import safe_url

    from ..fileio import check_output_target

    target = check_output_target(out, "--out", [bearer_token_file or "", ca_cert or ""])
    if target.exists() and target.stat().st_size > 0:
        with open(target, "rb") as fh:
            head = fh.read(64)
        if not head.startswith((b"# HELP", b"# TYPE", b"# UNIT", b"# EOF")):
            raise InputError(f"--out {out}: exists and is not an OpenMetrics recording; kvdiag does not overwrite it")
    http = http_opts(headers, bearer_token_file, ca_cert, insecure, timeout)
    n, samples = rec(metrics_url, out, duration=duration, interval=interval, http=http, progress=progress)
    click.echo(f"kvdiag: recorded {n} scrape(s), {samples} sample(s) of {safe_url(metrics_url)} to {out}", err=True)
