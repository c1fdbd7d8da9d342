"""Command line: wiring only. Exit codes are mapped in one place, :func:`main`.

0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN (bad usage, unreadable input, unreachable URL, nothing
evaluable), 130 on Ctrl-C or SIGTERM before anything was judged (one during a live window ends it and judges what
was scraped, :class:`kvdiag.collect.metrics.WindowInterrupt`). No traceback unless ``--debug``.
"""

from __future__ import annotations

import sys

import click

from . import __version__
from .commands.analyze import analyze
from .commands.check import check
from .commands.dashboards import dashboards
from .commands.diff import diff
from .commands.estimate import estimate
from .commands.options import exit_codes
from .commands.record import record
from .commands.rules import rules
from .commands.simulate import simulate_cmd
from .commands.watch import watch
from .errors import ExitStatus, KvdiagError

GROUP_CODES = exit_codes(("0", "analyze, check: no problem found; the other commands: done"),
                         ("1", "analyze, check: warning; diff --fail-on-regression: AFTER regressed; rules test: a "
                               "case failed"),
                         ("2", "analyze, check: critical; estimate: vLLM would refuse to start"),
                         ("3", "could not judge: bad usage, unreadable input, unreachable URL, nothing evaluable"),
                         ("130", "interrupted (see 'kvdiag analyze --help')"))


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
             epilog=GROUP_CODES)
@click.version_option(__version__, prog_name="kvdiag")
@click.option("--debug", is_flag=True, help="Show tracebacks.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Diagnose KV-cache and GPU-memory trouble of vLLM servers from /metrics and logs."""
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug


for _command in (analyze, check, record, rules, watch, dashboards, estimate, diff, simulate_cmd):  # kvdiag/commands/
    cli.add_command(_command)


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
        if _stdout_failed(exc):  # a full disk or a closed terminal behind '> file': one line, not a traceback
            trace()
            click.echo(f"kvdiag: error: cannot write the report to standard output: {exc.strerror or exc}", err=True)
            return ExitStatus.UNKNOWN
        from .redaction import redact

        trace()
        text = redact(str(exc))
        text = text if len(text) <= 200 else text[:200] + "…"
        click.echo(f"kvdiag: internal error: {exc.__class__.__name__}: {text}"
                   f"{'' if debug else ' (run with --debug for the traceback)'}", err=True)
        nagios(f"internal error: {exc.__class__.__name__}")
        return ExitStatus.UNKNOWN


def _stdout_failed(exc: BaseException) -> bool:
    """Whether ``exc`` is standard output refusing the report (ENOSPC of ``> /dev/full``, EIO of a terminal that
    went away, a quota): an OSError naming no file, raised by the write of an ``echo``. Standard output is then
    pointed at the null device, so neither an error line for ``check`` nor the interpreter's exit flush writes to
    it again."""
    import errno
    import os

    if not isinstance(exc, OSError) or exc.filename is not None or exc.errno not in (
            errno.ENOSPC, errno.EIO, errno.EDQUOT, errno.EFBIG, errno.EBADF):
        return False
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None or tb.tb_frame.f_code.co_name not in ("echo", "write", "flush", "print"):
        return False
    try:
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - lives until exit
    except OSError:
        pass
    return True


def entry() -> None:
    """The console-script entry point of earlier installs (``kvdiag.cli:entry``): as :func:`kvdiag.__main__.entry`
    (:func:`kvdiag.commands.launch.run`)."""
    from .commands.launch import run

    run(lambda: main)
