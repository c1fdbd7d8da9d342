"""The ``kvdiag diff`` command (registered by :mod:`kvdiag.cli`): wiring only; the work is in :mod:`kvdiag.diff`."""

from __future__ import annotations

import click

from .options import DURATION, INTERRUPT_ROW, exit_codes, http_opts

DIFF_CODES = exit_codes(("0", "the comparison was made (--fail-on-regression: and AFTER did not regress); each "
                              "side's verdict is in the output"),
                        ("1", "--fail-on-regression only: AFTER regressed (a longer queue, less throughput, more "
                              "preemptions, fewer KV tokens, a failure BEFORE did not have, a worse verdict)"),
                        ("3", "could not compare: bad usage, unreadable input, or different models (without "
                              "--allow-different-models)"), INTERRUPT_ROW)


@click.command("diff", epilog=DIFF_CODES)
@click.argument("before", metavar="BEFORE", required=False)
@click.argument("after", metavar="AFTER", required=False)
@click.option("--before-also", "before_also", multiple=True, metavar="FILE",
              help="Another input of the BEFORE side (e.g. its log next to a recording; repeatable).")
@click.option("--after-also", "after_also", multiple=True, metavar="FILE",
              help="Another input of the AFTER side (repeatable).")
@click.option("--prometheus-url", default=None, metavar="URL",
              help="Compare two windows (or two selectors) of one Prometheus-API server instead of two files.")
@click.option("--before-window", default=None, metavar="TIME..TIME",
              help="BEFORE's window: start..end, each RFC 3339 or Unix seconds (with --prometheus-url).")
@click.option("--after-window", default=None, metavar="TIME..TIME", help="AFTER's window (default: BEFORE's).")
@click.option("--selector", default=None, metavar="'{job=\"vllm\"}'",
              help="Label matchers of both sides' instance (with --prometheus-url).")
@click.option("--before-selector", default=None, metavar="'{job=\"vllm\"}'", help="BEFORE's matchers (default --selector).")
@click.option("--after-selector", default=None, metavar="'{job=\"vllm\"}'", help="AFTER's matchers (default --selector).")
@click.option("--instance", default=None, metavar="NAME", help="The instance label to compare when a selector "
              "matches several.")
@click.option("--step", default="15s", show_default=True, metavar="DURATION", help="Resolution of the range queries.")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "markdown", "html"]), default="text",
              show_default=True)
@click.option("--output", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Write the diff here instead of standard output.")
@click.option("--fail-on-regression", is_flag=True,
              help="Exit 1 when AFTER regressed (fewer KV tokens, a new failure, a worse verdict), else 0.")
@click.option("--allow-different-models", is_flag=True,
              help="Compare two different models anyway (with a warning) instead of refusing.")
@click.option("--rules", "rules_dirs", multiple=True, metavar="DIR", help="Extra folder of rule files.")
@click.option("--year", type=click.IntRange(1970, 2100), default=None, metavar="YEAR",
              help="Year of log timestamps (vLLM prints none), 1970..2100.")
@click.option("--width", type=click.IntRange(40, 1000), default=100, show_default=True, metavar="N",
              help="Wrap the text at N columns.")
@click.option("--debug", is_flag=True, help="Show tracebacks.")
@click.pass_context
def diff(ctx, before, after, before_also, after_also, prometheus_url, before_window, after_window, selector,
         before_selector, after_selector, instance, step, fmt, output, fail_on_regression, allow_different_models,
         rules_dirs, year, width, debug):
    """What changed between BEFORE and AFTER (a vLLM log, a saved /metrics page or a recording each, told apart by
    content): the start-up memory budget line by line, the configuration, the run, both verdicts, the most moved
    first, and the lines that explain the change."""
    from ..diff import compare, diff_inputs
    from ..extras import require_html
    from ..report.diff_formats import DIFF_RENDERERS

    require_html(fmt)  # the kvdiag[html] extra: one line when matplotlib is missing, before any input is read

    if output is not None and not output.strip():
        raise click.UsageError("--output '': expected a file path (leave --output out to write to standard output)")
    prom_only = [f"--{n.replace('_', '-')}" for n in ("before_window", "after_window", "selector", "before_selector",
                                                      "after_selector", "instance", "step")
                 if (src := ctx.get_parameter_source(n)) is not None and src.name != "DEFAULT"]
    if prometheus_url:
        if before or after or before_also or after_also:
            raise click.UsageError("--prometheus-url compares two windows of one server; it does not mix with "
                                   "BEFORE / AFTER files")
        if not before_window:
            raise click.UsageError("--prometheus-url needs --before-window START..END (and --after-window, or "
                                   "--before-selector / --after-selector for two instances of one window)")
        if not after_window and not (before_selector or after_selector):
            raise click.UsageError("give --after-window, or --before-selector / --after-selector: otherwise both "
                                   "sides are the same series")
    else:
        if prom_only:
            verb = "applies" if len(prom_only) == 1 else "apply"
            raise click.UsageError(f"{', '.join(prom_only)} only {verb} to --prometheus-url")
        if not (before and after):
            raise click.UsageError("give BEFORE and AFTER (two files), or --prometheus-url with --before-window "
                                   "and --after-window")
    from ..inputs.files import folder_files

    inputs = ([before, *before_also, after, *after_also] if not prometheus_url else []) + folder_files(rules_dirs)
    if output:
        from ..fileio import check_output_target

        check_output_target(output, "--output", inputs)
    if prometheus_url:
        from ..collect.prometheus import parse_window
        from ..diff import read_prometheus_side

        def window(opt: str, text: str) -> tuple[float, float]:
            a, sep, b = text.partition("..")
            if not sep or not a.strip() or not b.strip():
                raise click.BadParameter(f"{text!r}: expected START..END (RFC 3339 or Unix seconds)", param_hint=opt)
            return parse_window(a.strip(), b.strip())

        step = DURATION.convert(step, None, ctx)
        bw = window("--before-window", before_window)
        aw = window("--after-window", after_window) if after_window else bw
        http = http_opts((), None, None, False, 10.0)
        sides = [read_prometheus_side(prometheus_url, sel or selector or "", w[0], w[1], step, instance, http,
                                      list(rules_dirs))
                 for sel, w in ((before_selector, bw), (after_selector, aw))]
        result = compare(sides[0], sides[1], allow_different_models, fail_on_regression)
    else:
        result = diff_inputs([before, *before_also], [after, *after_also], year=year, rules_dirs=list(rules_dirs),
                             allow_different_models=allow_different_models, fail_on_regression=fail_on_regression)
    text = DIFF_RENDERERS[fmt](result, width=width) if fmt == "text" else DIFF_RENDERERS[fmt](result)
    if output:
        from ..export import write_output

        write_output(output, text, "--output")
    else:
        click.echo(text, nl=False)
    ctx.exit(result.exit_code)
