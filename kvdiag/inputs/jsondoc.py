"""JSON documents: traces (the lab's ``workload.json``, JSON Lines rows), lab cases' ``truth.json``, Hugging Face
``config.json`` files, ``check --state`` files, and the JSON bodies of Prometheus answers (:mod:`.promapi`).

Guards: a bounded read of a regular file (:mod:`.files`), UTF-8, nesting at most :data:`kvdiag.inputs.MAX_DEPTH`
levels (checked before the document is built: no RecursionError), every number parsed once with
:func:`kvdiag.numbers.json_loads` (no integer of 4,300 digits is built, no 1e400 spelled in 5,000 digits), and one
message form: ``file:line: what was found: expected …``.
"""

from __future__ import annotations

import json
import re

from ..errors import InputError
from ..numbers import MAX_DIGITS, NumberError, json_loads
from . import MAX_DEPTH, where
from .files import read_text

_TOKENS = re.compile(r'"(?:[^"\\\n]|\\.)*"|[\[\]{}]')
_LONG_NUMBER = re.compile(r"[-+]?(?:\d[\d.eE+-]{%d,})" % MAX_DIGITS)


class JsonError(InputError):
    """A JSON text kvdiag cannot use; ``line`` is its line (1-based) when known."""

    def __init__(self, message: str, line: int | None = None):
        super().__init__(message)
        self.line = line


def _depth_problem(text: str, limit: int) -> int | None:
    """The line where ``text`` nests deeper than ``limit`` (strings skipped), else ``None``."""
    if text.count("[") + text.count("{") <= limit:
        return None
    depth = 0
    for m in _TOKENS.finditer(text):
        c = m.group(0)
        if c in "[{":
            depth += 1
            if depth > limit:
                return text.count("\n", 0, m.start()) + 1
        elif c in "]}":
            depth -= 1
    return None


def loads(text: str, origin: str, expected: str, line: int | None = None, max_depth: int = MAX_DEPTH):
    """``text`` as JSON, guarded. ``origin`` names the input (a path, ``path:line``, a URL); ``line`` is the line
    of ``text`` within it (JSON Lines), else the line is found in ``text``.

    Raises:
        JsonError: ``origin:line: invalid JSON (why): expected …``, ``…: nested deeper than N levels: expected …``,
            ``…: a number of N digits: expected …``.
    """
    deep = _depth_problem(text, max_depth)
    if deep is not None:
        ln = line or deep
        raise JsonError(f"{where(origin, ln)}: nested too deeply (more than {max_depth} levels): expected {expected}",
                        ln)
    try:
        return json_loads(text)
    except NumberError as exc:
        m = _LONG_NUMBER.search(text)
        ln = line or (text.count("\n", 0, m.start()) + 1 if m else None)
        raise JsonError(f"{where(origin, ln)}: {exc} (in {expected})", ln) from None
    except json.JSONDecodeError as exc:
        ln = line or exc.lineno
        raise JsonError(f"{where(origin, ln)}: invalid JSON ({exc.msg}): expected {expected}", ln) from None
    except RecursionError:  # a shape the scan above did not count (never seen): still one line
        raise JsonError(f"{where(origin, line)}: nested too deeply: expected {expected}", line) from None
    except ValueError as exc:  # a lone surrogate and the like
        raise JsonError(f"{where(origin, line)}: invalid JSON ({str(exc)[:60]}): expected {expected}", line) from None


def load(path: str, limit: int, expected: str, label: str = ""):
    """The JSON document in the file ``path`` (at most ``limit`` bytes), guarded as :func:`loads`."""
    text = read_text(path, limit, expected, label)
    return loads(text, str(path), expected)  # file:line first, the one message form


def lines(path: str, limit: int, expected: str, label: str = ""):
    """JSON Lines: ``(line number, value)`` for every non-blank line of the file ``path``, each guarded as
    :func:`loads`."""
    text = read_text(path, limit, expected, label)
    origin = str(path)
    for ln, row in enumerate(text.splitlines(), 1):
        if row.strip():
            yield ln, loads(row, origin, expected, line=ln)


MAX_CONFIG_BYTES = 64 * 1024 * 1024


def config(path: str, label: str = "") -> dict:
    """A Hugging Face ``config.json`` (``--model-config``): a JSON object, guarded as :func:`load`; the fields'
    domains are checked by the capacity model (``kvdiag.capacity.check_config_numbers``).

    Raises:
        InputError: as :func:`load`, or ``path: top level is a list: expected a HF config.json object``.
    """
    data = load(path, MAX_CONFIG_BYTES, "a Hugging Face config.json object", label)
    if not isinstance(data, dict):
        raise InputError(f"{path}: top level is {type(data).__name__}: expected a HF config.json object")
    return data


def number(origin: str, name: str, value, lo: float, hi: float, integer: bool = False):
    """A number field of a JSON document in ``[lo, hi]`` (an int when ``integer``), never converting a huge integer
    to float (no OverflowError).

    Raises:
        InputError: ``origin: name is …: expected a number from lo to hi``.
    """
    kind = "an integer" if integer else "a number"
    bad = InputError(f"{origin}: {name} is {_shown(value)}: expected {kind} from {lo:,g} to {hi:,g}")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise bad
    if isinstance(value, int):
        if not lo <= value <= hi:
            raise bad
        return value
    if value != value or not lo <= value <= hi:
        raise bad
    if integer:
        if value != int(value):
            raise bad
        return int(value)
    return float(value)


def _shown(value) -> str:
    from ..numbers import int_text

    if isinstance(value, int) and not isinstance(value, bool):
        return int_text(value)
    text = repr(value)
    return text if len(text) <= 40 else text[:40] + "…"
