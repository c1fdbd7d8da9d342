"""``kvdiag dashboards export``: a Grafana dashboard of vLLM's KV cache and kvdiag's rules (:mod:`kvdiag.dashboards`)."""

from __future__ import annotations

import click

from ..engine.model import load_rules
from ..errors import InputError
from .options import Duration, exit_codes


@click.group(epilog=exit_codes(("0", "written"), ("3", "bad usage, an invalid rule file, --out not writable")))
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
        from ..dashboards import export_json
    except ImportError as exc:  # pragma: no cover - a dependency of the package; said in one line if it is missing
        raise InputError(f"the Grafana Foundation SDK is not installed ({exc.name}): "
                         "pip install grafana-foundation-sdk") from None
    from ..export import write_output
    from ..fileio import check_output_target

    if out is not None:
        from ..inputs.files import folder_files

        check_output_target(out, "--out", folder_files(rules_dirs))
    seconds = int(window)
    text = export_json(load_rules(list(rules_dirs)), window=f"{seconds // 60}m" if seconds % 60 == 0 else f"{seconds}s")
    if out:
        write_output(out, text, "--out")
    else:
        click.echo(text, nl=False)
