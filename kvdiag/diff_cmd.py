"""The ``kvdiag diff`` command (registered by :mod:`kvdiag.cli`): wiring only; the work is in :mod:`kvdiag.diff`."""

from __future__ import annotations

import click

@click.command("diff")  # its exit codes: the epilog kvdiag.cli sets
@click.argument("before", metavar="BEFORE")
@click.argument("after", metavar="AFTER")
@click.option("--before-also", "before_also", multiple=True, metavar="FILE",
              help="Another input of the BEFORE side (e.g. its log next to a recording; repeatable).")
@click.option("--after-also", "after_also", multiple=True, metavar="FILE",
              help="Another input of the AFTER side (repeatable).")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "markdown"]), default="text", show_default=True)
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
def diff(ctx, before, after, before_also, after_also, fmt, output, fail_on_regression, allow_different_models,
         rules_dirs, year, width, debug):
    """What changed between BEFORE and AFTER (a vLLM log, a saved /metrics page or a recording each, told apart by
    content): the start-up memory budget line by line, the configuration, the run, both verdicts, the most moved
    first, and the lines that explain the change."""
    from .diff import diff_inputs
    from .report.diff_render import DIFF_RENDERERS

    if output is not None and not output.strip():
        raise click.UsageError("--output '': expected a file path (leave --output out to write to standard output)")
    inputs = [before, *before_also, after, *after_also]
    if output:
        from .fileio import check_output_target

        check_output_target(output, "--output", inputs)
    result = diff_inputs([before, *before_also], [after, *after_also], year=year, rules_dirs=list(rules_dirs),
                         allow_different_models=allow_different_models, fail_on_regression=fail_on_regression)
    text = DIFF_RENDERERS[fmt](result, width=width) if fmt == "text" else DIFF_RENDERERS[fmt](result)
    if output:
        from .export import write_output

        write_output(output, text, "--output")
    else:
        click.echo(text, nl=False)
    ctx.exit(result.exit_code)
