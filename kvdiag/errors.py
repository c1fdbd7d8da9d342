"""Errors kvdiag raises on purpose, each with the exit code the CLI maps it to.

Exit codes follow the Nagios plugin convention used by every judging verb:
0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN (could not judge). Ctrl-C is 130.
"""

from __future__ import annotations

from enum import IntEnum


class ExitStatus(IntEnum):
    """Process exit codes of ``kvdiag analyze`` / ``check`` (Nagios convention)."""

    OK = 0
    WARNING = 1
    CRITICAL = 2
    UNKNOWN = 3
    INTERRUPTED = 130


class KvdiagError(Exception):
    """Base of every error kvdiag reports as one line instead of a traceback.

    The message must name the file:line, URL or field and what was expected. It is redacted when the error is made
    (:func:`kvdiag.redaction.redact`: a message quoting input text never carries a token or password, whichever
    place shows it: stderr, a Nagios line, a ``--debug`` traceback, a report's error note).
    """

    exit_code: int = ExitStatus.UNKNOWN

    def __init__(self, *args) -> None:
        if args and isinstance(args[0], str):
            from .redaction import redact

            args = (redact(args[0]),) + args[1:]
        super().__init__(*args)


class InputError(KvdiagError):
    """An input (log file, metrics page, model config, option value) cannot be read or parsed.

    ``lineno`` (optional, 1-based) is the line of the input the message is about, for a caller that names the
    file (``FILE:LINE: …``) when the raiser knew only the text."""

    def __init__(self, *args, lineno: int = 0) -> None:
        super().__init__(*args)
        self.lineno = lineno


class ScrapeError(KvdiagError):
    """A /metrics endpoint or Prometheus server could not be reached or answered badly."""


class RuleFileError(KvdiagError):
    """A rule YAML file does not follow the rule grammar (rules/README.md)."""
