"""``kvdiag watch``: live verdicts of /metrics endpoints or a Prometheus fleet (:mod:`kvdiag.watch`), optionally
served for Prometheus (:mod:`kvdiag.exporter`)."""

from __future__ import annotations

import re
import sys

import click

from ..engine.model import load_rules
from .options import DURATION, SCRAPE_INTERVAL, Duration, exit_codes, http_options, http_opts

WATCH_CODES = exit_codes(("0", "ended by q, Ctrl-C or SIGTERM: the final report printed"),
                         ("3", "bad usage, an invalid rule file, a --listen address that cannot be bound"))


@click.command(epilog=WATCH_CODES)
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
@http_options
@click.option("--debug", is_flag=True, help="Show tracebacks.")
@click.pass_context
def watch(ctx, urls, interval, window, listen, no_tui, prometheus_url, selector, step, rules_dirs, width, headers,
          bearer_token_file, ca_cert, insecure, timeout, debug):
    """Watch vLLM /metrics endpoints live: the verdict, firing findings and sparklines, refreshed every interval.

    A server that stops answering is shown as down and retried with back-off. q or Ctrl-C leaves with the final
    report (as 'kvdiag analyze' on every page watched). --listen HOST:PORT serves the verdicts for Prometheus.
    """
    from ..report.formats import RENDERERS
    from ..report.render import terminal_layout
    from ..watch import Watch, run_headless, run_tui

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
    http = http_opts(headers, bearer_token_file, ca_cert, insecure, timeout)
    loaded = load_rules(list(rules_dirs))
    if prometheus_url:
        from ..watch import FleetWatch

        w = FleetWatch(prometheus_url, selector or "", step, interval, window, loaded, http)
        w.rules_dirs = list(rules_dirs)
    else:
        w = Watch(list(urls), interval, window, loaded, http)
    footer = ""
    if listen:
        from ..exporter import serve

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
