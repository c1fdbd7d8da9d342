"""``kvdiag check``: a Nagios status line with perfdata, for cron and CronJobs; the status, state and
exports are :mod:`kvdiag.check`."""

from __future__ import annotations

import click

from ..engine.model import load_rules
from .options import INTERRUPT_ROW, exit_codes, http_options, http_opts, source_options

CHECK_CODES = exit_codes(("0", "OK"), ("1", "WARNING"), ("2", "CRITICAL"),
                         ("3", "UNKNOWN: could not judge, or an OK verdict whose --state, --textfile or --pushgateway "
                               "failed"), INTERRUPT_ROW)


@click.command(epilog=CHECK_CODES)
@source_options
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
@http_options
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

    from .. import check as chk
    from ..analyze import analyze as run
    from ..collect.metrics import WindowInterrupt
    from ..errors import KvdiagError

    if not (logs or metrics_files or metrics_urls or (model_config and gpu_memory)):
        raise click.UsageError("give at least one source: --log, --metrics-file or --metrics-url")
    src = ctx.get_parameter_source("duration")
    if src is not None and src.name == "DEFAULT":
        duration = 1.0
    from ..collect.metrics import safe_url

    if state_file:  # before anything is read: --state is written, never over an input (a token, a CA bundle)
        from ..fileio import check_output_target

        from ..inputs.files import folder_files

        check_output_target(state_file, "--state", [*logs, *metrics_files, model_config or "",
                                                    bearer_token_file or "", ca_cert or "", *folder_files(rules_dirs)])
    http = http_opts(headers, bearer_token_file, ca_cert, insecure, timeout)
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
    usage = chk.usage_max(bundle)
    code = chk.status_of(report, tuple(warn_on), tuple(fail_on), usage)
    if not warn_on and not fail_on and usage is not None and code > chk.SEVERITY_CODE.get(report.verdict.severity, 3):
        level = chk.USAGE_CRIT if code == 2 else chk.USAGE_WARN
        notes.append(chk.Note(f"KV cache usage peaked at {usage:.1%}, at or above the {level:.0%} "
                              f"{'critical' if code == 2 else 'warning'} threshold of the perfdata",
                              f"KV usage {usage:.1%} ≥ {level:.0%}"))
    if state_note and code == 0:
        code = 3  # the window since the last check could not be judged; a WARNING/CRITICAL verdict still shows
    reg = chk.build_registry(inst, report, code != 3, now)
    for note in ((textfile and chk.write_textfile(textfile, reg)), (pushgateway and chk.push(pushgateway, job, inst, reg, timeout=timeout))):
        if note:
            notes.append(note)
            if code == 0:
                code = 3  # the verdict did not reach the monitoring it was meant for: not OK, never hides CRITICAL
    click.echo(chk.status_output(code, report, chk.perfdata(bundle, report, not warn_on and not fail_on), notes))
    ctx.exit(code)


for _p in check.params:  # check's --duration default is one scrape, not the shared 30s (see its docstring)
    if _p.name == "duration":
        _p.show_default = "1s: one scrape; with --state, since the last check"
