"""kvdiag: diagnose KV-cache and GPU-memory trouble of vLLM servers from /metrics and logs."""

__version__ = "0.1.0"


def _interrupted_while_loading(signum, frame):  # noqa: ARG001 - signal handler signature
    """Ctrl-C or SIGTERM while the CLI is still loading (nothing read, nothing written yet): one line and 130."""
    import os

    os.write(2, b"kvdiag: interrupted\n")
    os._exit(130)


def _cover_startup() -> None:
    """When this import starts the ``kvdiag`` program (``python -m kvdiag``, whose ``sys.argv[0]`` is ``-m`` while
    the package loads, or the ``kvdiag`` console script), a signal from this first line on is ``kvdiag:
    interrupted`` and 130, never a traceback from the import machinery nor a silent death by SIGTERM;
    :func:`kvdiag.__main__.entry` hands over to the CLI's own handlers once it is loaded. A library import (tests,
    ``import kvdiag`` in a notebook) leaves the handlers alone."""
    import os
    import signal
    import sys
    import threading

    argv0 = sys.argv[0] if sys.argv else ""
    orig = list(getattr(sys, "orig_argv", []))
    other_module = "-m" in orig and orig[orig.index("-m") + 1:orig.index("-m") + 2] != ["kvdiag"]
    if (argv0 != "-m" and os.path.basename(argv0) != "kvdiag") or other_module \
            or threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            if signal.getsignal(sig) in (signal.default_int_handler, signal.SIG_DFL):
                signal.signal(sig, _interrupted_while_loading)
        except (ValueError, OSError):
            pass


_cover_startup()
