"""Optional parts of kvdiag: what needs an extra installed, and the one line that says so when it is missing."""

from __future__ import annotations

import importlib.util

from .errors import InputError

HTML_HINT = "pip install 'kvdiag[html]' (or pipx inject kvdiag matplotlib / uv tool install 'kvdiag[html]')"


def require_html(fmt: str) -> None:
    """``--format html`` draws its charts with matplotlib, the ``kvdiag[html]`` extra.

    Raises:
        InputError: ``fmt`` is html and matplotlib is not installed (before any input is read).
    """
    if fmt == "html" and importlib.util.find_spec("matplotlib") is None:
        raise InputError(f"--format html needs matplotlib, which is not installed: {HTML_HINT}; "
                         "the text, json and markdown formats work without it")
