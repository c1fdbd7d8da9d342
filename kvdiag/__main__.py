"""``python -m kvdiag`` and the ``kvdiag`` console script: the CLI, with signals covered from the first instant."""

from __future__ import annotations


def entry() -> None:
    """Run the CLI (:func:`kvdiag.cli.main`) and exit with its code, signals covered while it loads and runs
    (:func:`kvdiag.commands.launch.run`)."""
    from .commands.launch import run

    run(_load_main)


def _load_main():
    """The CLI's :func:`kvdiag.cli.main`, loaded (a Ctrl-C or SIGTERM meanwhile is handled by the caller)."""
    from .cli import main

    return main


if __name__ == "__main__":
    entry()
