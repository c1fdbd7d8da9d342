"""Running the CLI with signals covered from the first instant: :func:`run`, for ``python -m kvdiag`` and the
``kvdiag`` console script (:func:`kvdiag.__main__.entry`) and for the entry point of earlier installs
(:func:`kvdiag.cli.entry`). Light on purpose: it loads before the CLI and imports none of it."""

from __future__ import annotations

import sys


def run(load_main) -> None:
    """Load the CLI (``load_main()`` → :func:`kvdiag.cli.main`), run it and exit with its code.

    While the package and the CLI load, a Ctrl-C or SIGTERM is ``kvdiag: interrupted`` and 130 (the handler
    :func:`kvdiag._cover_startup` installed); once loaded, SIGINT raises KeyboardInterrupt again and
    :func:`kvdiag.cli.main` maps it (and SIGTERM) to the same line and code, cleaning up what it was writing.
    A further signal that lands while ``main`` is already reporting the first one is 130 too.

    A KeyboardInterrupt that lands inside a callback Python cannot raise from (a weakref callback of the import
    lock, a ``__del__``) would be printed as "Exception ignored in" and lost, and the command would go on to its
    ordinary end; :func:`_redeliver` silences it and raises it again moments later, in the CLI's own code.
    """
    import signal

    sys.unraisablehook = _redeliver

    from .. import _interrupted_while_loading

    try:
        main = load_main()
    except KeyboardInterrupt:
        sys.stderr.write("kvdiag: interrupted\n")
        sys.exit(130)
    try:
        if signal.getsignal(signal.SIGINT) is _interrupted_while_loading:
            signal.signal(signal.SIGINT, signal.default_int_handler)
        code = main()
        if _PENDING:  # main ended before the swallowed interrupt could be raised again: it still counts
            signal.setitimer(signal.ITIMER_REAL, 0)
            sys.stderr.write("kvdiag: interrupted\n")
            code = 130
    except KeyboardInterrupt:  # a second signal while main was reporting the first: it already said so
        code = 130
    sys.exit(code)


_PENDING: list[bool] = []  # an interrupt swallowed by a callback, not yet raised again


def _raise_interrupt(signum, frame) -> None:  # noqa: ARG001 - signal handler signature
    import signal

    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    _PENDING.clear()
    raise KeyboardInterrupt


def _redeliver(unraisable) -> None:
    """``sys.unraisablehook``: an interrupt swallowed by a callback is raised again, 1 ms later from a one-shot
    SIGALRM, by then in ordinary code, which :func:`kvdiag.cli.main` maps to ``kvdiag: interrupted`` and 130.
    (A signal raised from inside this hook would land in the hook itself and be swallowed once more.) Anything
    else goes to Python's own hook."""
    import signal

    if isinstance(unraisable.exc_value, KeyboardInterrupt) and hasattr(signal, "setitimer"):
        _PENDING.append(True)
        signal.signal(signal.SIGALRM, _raise_interrupt)
        signal.setitimer(signal.ITIMER_REAL, 0.001)
        return
    sys.__unraisablehook__(unraisable)
