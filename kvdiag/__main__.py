"""``python -m kvdiag`` and the ``kvdiag`` console script: the CLI, with signals covered from the first instant."""

from __future__ import annotations

import sys


def entry() -> None:
    """Run the CLI (:func:`kvdiag.cli.main`) and exit with its code.

    While the package and the CLI load, a Ctrl-C or SIGTERM is ``kvdiag: interrupted`` and 130 (the handler
    :func:`kvdiag._cover_startup` installed); once loaded, SIGINT raises KeyboardInterrupt again and
    :func:`kvdiag.cli.main` maps it (and SIGTERM) to the same line and code, cleaning up what it was writing.
    A further signal that lands while ``main`` is already reporting the first one is 130 too.
    """
    import signal

    from . import _interrupted_while_loading

    try:
        from .cli import main
    except KeyboardInterrupt:
        sys.stderr.write("kvdiag: interrupted\n")
        sys.exit(130)
    try:
        if signal.getsignal(signal.SIGINT) is _interrupted_while_loading:
            signal.signal(signal.SIGINT, signal.default_int_handler)
        code = main()
    except KeyboardInterrupt:  # a second signal while main was reporting the first: it already said so
        code = 130
    sys.exit(code)


if __name__ == "__main__":
    entry()
