"""``python -m kvdiag``: the same as the ``kvdiag`` command."""

from .cli import entry

entry()
