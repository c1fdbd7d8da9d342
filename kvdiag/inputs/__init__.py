"""The one input layer: every file, page, answer and trace a kvdiag command reads comes in through one module of
this package, one module per input kind, with the same guards.

=====================  =====================================================  ==========================================
kind                   module                                                 read by
=====================  =====================================================  ==========================================
any file               :mod:`kvdiag.inputs.files` (over :mod:`kvdiag.fileio`) every option naming a file
log lines              :mod:`kvdiag.inputs.logfile`                           ``--log``, diff's BEFORE / AFTER
/metrics pages,        :mod:`kvdiag.inputs.pages`                             ``--metrics-file``, ``--metrics-url``,
recordings                                                                    ``simulate --from-metrics``, diff
Prometheus answers     :mod:`kvdiag.inputs.promapi`                           ``--prometheus-url``
JSON documents         :mod:`kvdiag.inputs.jsondoc`                           ``--trace`` (JSON / JSONL), lab cases'
(traces, truth files,                                                         ``truth.json``, ``--model-config``,
configs, state)                                                               ``--state``
CSV tables             :mod:`kvdiag.inputs.table`                             ``--trace`` (CSV), ``times.csv``
YAML rules and cases   :mod:`kvdiag.inputs.rules`                             ``--rules``, ``rules test CASES_DIR``
URLs (HTTP bodies)     :mod:`kvdiag.inputs.http`                              ``--metrics-url``, ``--prometheus-url``
=====================  =====================================================  ==========================================

The guards every kind shares:

* **size**: a file is a regular file of at most its kind's bound (a FIFO, ``/dev/zero`` or a folder is refused, never
  read); an HTTP body is bounded and deadline-bound, both checked while it streams (a gzip bomb or an endless chunked
  answer is cut at the cap or at ``--timeout``, whichever comes first: 64 MiB for a page or a Prometheus answer); a
  gzip / zstandard file inflates in bounded steps and is refused as a bomb past 200x / 1000x its compressed size;
* **depth**: JSON nested deeper than :data:`MAX_DEPTH` and YAML deeper than its bound are refused before they are
  built (no RecursionError);
* **numbers** parsed once, with their domain (:mod:`kvdiag.numbers`): no integer of more than ``MAX_DIGITS`` digits
  is ever built, no NaN / Inf reaches a field that cannot hold it, no Python advice reaches a user;
* **one timestamp range**: Unix seconds 1970 .. 2200 (:data:`kvdiag.numbers.MIN_UNIX_S` ..
  :data:`kvdiag.numbers.MAX_UNIX_S`) for every dated input — page and recording timestamps, log container
  timestamps, Prometheus answers, trace and lab times;
* **one message form**: ``file:line: what was found: expected …`` (:func:`where`, :func:`refuse`), built from input
  text only through :func:`kvdiag.redaction.redact` (every :class:`kvdiag.errors.KvdiagError` redacts its message).

``tests/test_input_layer.py`` walks every click command, lists every option that takes a file or a URL, runs it
on a real file or a loopback server and fails when a read of that file or a connection to that URL is made anywhere
but here.
"""

from __future__ import annotations

from ..errors import InputError
from ..numbers import MAX_UNIX_S, MIN_UNIX_S, unix_seconds  # noqa: F401 - the one timestamp range, re-exported

MAX_DEPTH = 64
"""Deepest nesting of a JSON document kvdiag reads (a trace row, a config.json, a state file: a handful)."""

#: input kind -> the module that reads it (for the documentation, the walk test and the fuzz campaign's plug-ins)
KINDS = {
    "file": "kvdiag.inputs.files",
    "log": "kvdiag.inputs.logfile",
    "page": "kvdiag.inputs.pages",
    "recording": "kvdiag.inputs.pages",
    "prometheus-answer": "kvdiag.inputs.promapi",
    "trace": "kvdiag.inputs.jsondoc",
    "truth": "kvdiag.inputs.jsondoc",
    "config": "kvdiag.inputs.jsondoc",
    "state": "kvdiag.inputs.jsondoc",
    "csv": "kvdiag.inputs.table",
    "rules": "kvdiag.inputs.rules",
    "url": "kvdiag.inputs.http",
}


def where(path, line: int | None = None) -> str:
    """``path:line`` (or ``path`` alone) for a message."""
    return f"{path}:{line}" if line else str(path)


def refuse(path, line: int | None, found: str, expected: str) -> InputError:
    """The one message form: ``path:line: found: expected …`` (``found`` may be empty)."""
    return InputError(f"{where(path, line)}: {found + ': ' if found else ''}expected {expected}")
