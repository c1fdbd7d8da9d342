"""Saved /metrics pages as users keep them: ``--metrics-file`` values → the files to read, each with its time.

A value is a page or recording, a folder of pages (``saved/metrics``: its ``*.prom`` files, and ``.om`` / ``.txt``
/ ``.openmetrics``, plain, ``.gz`` or ``.zst``, in name order), a glob (``'saved/*.prom'``, for when the shell did
not expand it), a lab case folder (``case/``, whose pages are in ``case/metrics/``) or a saved series'
``times.csv``. Pages named by their sample number (``0007.prom``) take their scrape time from the ``times.csv``
(``sample,unix_time``) of their folder or the folder above it, so a saved series without timestamps has a timeline.
"""

from __future__ import annotations

import csv
import glob
import io
import os
import re

from .errors import InputError

PAGE_SUFFIXES = (".prom", ".om", ".txt", ".openmetrics")
MAX_TIMES_BYTES = 16 * 2**20
MAX_UNIX = 1e10  # the year 2286: larger is milliseconds or garbage


def _is_page_name(name: str) -> bool:
    base = re.sub(r"\.(gz|zst)$", "", name.lower())
    return base.endswith(PAGE_SUFFIXES)


def read_times(path: str) -> dict[int, float]:
    """``times.csv`` (``sample,unix_time``) → {sample: Unix seconds}.

    Raises:
        InputError: unreadable, not that header, a sample that is not a whole number ≥ 0, a time that is not Unix
            seconds.
    """
    from .fileio import read_bounded

    text = read_bounded(path, MAX_TIMES_BYTES, "a times.csv (sample,unix_time)").decode("utf-8", errors="replace")
    reader = csv.reader(io.StringIO(text))
    header = [h.strip() for h in next(reader, [])]
    if header[:2] != ["sample", "unix_time"]:
        raise InputError(f"{path}: expected the header 'sample,unix_time', found {','.join(header)[:60]!r}")
    times: dict[int, float] = {}
    for n, row in enumerate(reader, start=2):
        if not row or not "".join(row).strip():
            continue
        try:
            sample, t = int(row[0]), float(row[1])
        except (ValueError, IndexError):
            raise InputError(f"{path}:{n}: expected 'sample,unix_time' (a whole number, Unix seconds), found "
                             f"{','.join(row)[:60]!r}") from None
        if sample < 0 or not 0 <= t < MAX_UNIX:
            raise InputError(f"{path}:{n}: sample {row[0]!r} at {row[1]!r}: expected a sample ≥ 0 at Unix seconds "
                             "between 1970 and 2286")
        times[sample] = t
    return times


def _times_beside(folder: str, cache: dict) -> tuple[str, dict[int, float]] | None:
    """The times.csv of a folder of numbered pages: in the folder, or beside it (case/times.csv for case/metrics)."""
    for cand in (os.path.join(folder, "times.csv"), os.path.join(os.path.dirname(os.path.abspath(folder)),
                                                                  "times.csv")):
        if os.path.isfile(cand):
            if cand not in cache:
                cache[cand] = read_times(cand)
            return cand, cache[cand]
    return None


def _pages_in(folder: str, label: str) -> list[str]:
    try:
        names = sorted(n for n in os.listdir(folder) if _is_page_name(n) and os.path.isfile(os.path.join(folder, n)))
    except OSError as exc:
        raise InputError(f"{label}: cannot list the folder: {exc.strerror}") from None
    if not names:
        raise InputError(f"{label}: a folder with no saved pages in it (expected *.prom, *.om or *.txt files, plain, "
                         ".gz or .zst)")
    return [os.path.join(folder, n) for n in names]


def expand(values: list[str] | tuple[str, ...]) -> list[tuple[str, float | None, str]]:
    """The ``--metrics-file`` values → ``[(path, time or None, where the time came from)]``, in the order given, each
    file once.

    Raises:
        InputError: a glob that matches nothing, a folder without pages, a times.csv without its pages or unreadable.
    """
    files: list[str] = []
    for value in values:
        if os.path.isdir(value):
            sub = os.path.join(value, "metrics")
            if os.path.isdir(sub) and not any(_is_page_name(n) for n in os.listdir(value)):
                files += _pages_in(sub, value)  # a lab case / saved series folder
            else:
                files += _pages_in(value, value)
        elif os.path.basename(value).lower() == "times.csv" or (value.lower().endswith(".csv")
                                                                and os.path.isfile(value)):
            folder = os.path.join(os.path.dirname(value) or ".", "metrics")
            if not os.path.isdir(folder):
                raise InputError(f"{value}: a times.csv is read with its pages, expected them in {folder}/")
            read_times(value)  # a broken one is an error here, not a page without a time later
            files += _pages_in(folder, value)
        elif not os.path.exists(value) and any(c in value for c in "*?["):
            found = sorted(p for p in glob.glob(value) if os.path.isfile(p))
            if not found:
                raise InputError(f"{value}: the pattern matches no file")
            files += found
        else:
            files.append(value)  # read_metrics_file says what is wrong with it, if anything
    seen: set[str] = set()
    out: list[tuple[str, float | None, str]] = []
    cache: dict = {}
    for path in files:
        key = os.path.realpath(path)
        if key in seen:
            continue
        seen.add(key)
        t, source = None, ""
        stem = re.sub(r"\.(gz|zst)$", "", os.path.basename(path))
        stem = os.path.splitext(stem)[0]
        if stem.isdigit() and os.path.isfile(path):
            found = _times_beside(os.path.dirname(path) or ".", cache)
            if found and int(stem) in found[1]:
                t, source = found[1][int(stem)], found[0]
        out.append((path, t, source))
    return out
