"""``kvdiag rules list | export | test | explain``: the diagnosis rules (:mod:`kvdiag.engine`), their Prometheus
export (:mod:`kvdiag.export`) and their cases."""

from __future__ import annotations

import textwrap

import click

from ..durations import parse_duration
from ..engine.model import load_rules
from .options import Duration, exit_codes

LIST_CODES = exit_codes(("0", "listed"), ("3", "bad usage, an invalid rule file under --rules"))
EXPLAIN_CODES = exit_codes(("0", "explained"), ("3", "no such rule, bad usage, an invalid rule file under --rules"))
EXPORT_CODES = exit_codes(("0", "written"), ("3", "bad usage, an invalid rule file, --out or --tests not writable"))
RULES_TEST_CODES = exit_codes(("0", "every case passed"), ("1", "a case failed"),
                              ("3", "bad usage, invalid rule or case files"))
RULES_CODES = exit_codes(("0", "done (rules test: every case passed)"), ("1", "rules test: a case failed"),
                         ("3", "bad usage, an invalid rule or case file, an unknown rule id"))


@click.group(epilog=RULES_CODES)
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

    from ..engine.cases import find_case_files, load_cases
    from ..engine.model import builtin_rules_dir
    from ..export import export_prometheus, promtool_tests, write_output

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
    from ..fileio import check_output_target

    read = [str(builtin_rules_dir()), *rules_dirs]  # folders read whole: no output over one of their rule files
    for option, target in (("--out", out), ("--tests", tests_out),
                           ("--tests", tests_out and str(Path(tests_out).with_suffix(".rules.yml")))):
        if target:
            check_output_target(target, option, read)
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
    if notes:  # one line, not one per case: a successful export is not a wall of warnings
        from collections import Counter

        why = Counter(n.rsplit("(", 1)[-1].rstrip(")").split(":")[0] for n in notes)
        click.echo(f"kvdiag: {len(notes)} rule case(s) left out of the promtool tests: "
                   + "; ".join(f"{k} ×{v}" for k, v in why.most_common()), err=True)


@rules.command("test", epilog=RULES_TEST_CODES)
@click.argument("cases_dir", required=False, type=click.Path(file_okay=False))
@click.option("--rules", "rules_dirs", multiple=True, metavar="DIR", help="Extra folder of rule files.")
@click.option("-v", "--verbose", is_flag=True, help="Print every case, not only failures.")
@click.pass_context
def rules_test(ctx, cases_dir, rules_dirs, verbose) -> None:
    """Run rule case files (default: the shipped rules' cases)."""
    from ..engine.runcases import all_cases, run_case

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
