"""``kvdiag analyze``: one server (or a fleet) judged from its logs and /metrics; the pipeline is
:func:`kvdiag.analyze.analyze`."""

from __future__ import annotations

import click

from .options import DURATION, INTERRUPT_ROW, exit_codes, http_options, http_opts, source_options

JUDGE_CODES = exit_codes(("0", "no problem found"), ("1", "warning"), ("2", "critical"),
                         ("3", "could not judge: bad usage, unreadable input, unreachable URL, nothing evaluable"),
                         INTERRUPT_ROW)


@click.command(epilog=JUDGE_CODES)
@source_options
@click.option("--prometheus-url", default=None, metavar="URL",
              help="Judge every vLLM instance a Prometheus-API server (Prometheus, Thanos, Mimir, VictoriaMetrics) "
                   "holds; PromQL computes the rates, increases and quantiles.")
@click.option("--selector", default=None, metavar="'{job=\"vllm\"}'", help="Label matchers that pick the instances.")
@click.option("--since", default="1h", show_default=True, metavar="DURATION|TIME",
              help="Window start: a duration back from --until, or RFC 3339 / Unix seconds.")
@click.option("--until", default=None, metavar="TIME", help="Window end: RFC 3339 or Unix seconds (default: now).")
@click.option("--step", type=DURATION, default="15s", show_default=True, help="Resolution of the range queries.")
@http_options
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
    from ..extras import require_html

    require_html(fmt)  # the kvdiag[html] extra: one line when matplotlib is missing, before any input is read
    if not (logs or metrics_files or metrics_urls or prometheus_url or (model_config and gpu_memory)):
        raise click.UsageError("give at least one source: --log, --metrics-file, --metrics-url or --prometheus-url "
                               "(or --model-config with --gpu-memory for a pre-flight check)")
    if output is not None and not output.strip():
        raise click.UsageError("--output '': expected a file path (leave --output out to write to standard output)")
    if output:  # before any work: never write the report over an input, a folder or a device
        from ..fileio import check_output_target

        from ..inputs.files import folder_files

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
        from ..simulate.remedies import prepare

        sim = prepare(trace, step_cost, several=bool(prometheus_url) or len(metrics_urls) > 1)
    from ..analyze import analyze as run
    from ..report.formats import RENDERERS
    from ..report.render import terminal_layout

    http = http_opts(headers, bearer_token_file, ca_cert, insecure, timeout)
    fleet = None
    if prometheus_url:
        from ..collect.prometheus import parse_window

        from ..collect.prometheus import effective_step

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
        from ..export import write_output

        write_output(output, text, "--output")
    else:
        click.echo(text, nl=False)
    ctx.exit(report.exit_code)
