"""``python -m kvdiag`` and the ``kvdiag`` console script: the CLI, with Ctrl-C covered from the first instant."""

from __future__ import annotations

import sys


def entry() -> None:
    """Run the CLI (:func:`kvdiag.cli.main`) and exit with its code.

    The CLI is imported here, not at module level, so a Ctrl-C while it is still loading (the first ~0.2 s) is
    ``kvdiag: interrupted`` and 130 like any other, never a traceback; so is a further signal that lands while
    ``main`` is already reporting the first one.
    """
    try:
        from .cli import main
    except KeyboardInterrupt:
        sys.stderr.write("kvdiag: interrupted\n")
        sys.exit(130)
    try:
        code = main()
    except KeyboardInterrupt:  # a second signal while main was reporting the first: it already said so
        code = 130
    sys.exit(code)


if __name__ == "__main__":
    entry()
