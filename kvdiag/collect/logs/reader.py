"""The log reader's entry point: :func:`read_logs` reads several files, rotated sets in time order."""

from __future__ import annotations

import sys
from typing import Callable

from ...bundle import Bundle, InputInfo
from ...errors import InputError
from ..logread import order_paths
from .collector import LogCollector


def read_logs(bundle: Bundle, paths: list[str], year: int | None = None,
              progress: bool | None = None) -> list[InputInfo]:
    """Read several logs into ``bundle``, rotated sets put in time order (:func:`order_paths`).

    Args:
        bundle: where observations go.
        paths: files (plain, ``.gz``, ``.zst``) or ``-`` for standard input.
        year: year of the first yearless timestamp (default: each file's date).
        progress: show a progress bar on stderr for inputs over 64 MiB; ``None`` = only on a terminal.

    Of several logs, one that cannot be read (missing, empty, binary, unreadable) is listed in ``bundle.inputs``
    with ``not read: <why>`` as its note and the others are read: a partial input still gives a report.

    Raises:
        InputError: the only path, or every path, is missing, a directory, empty, binary or a broken archive.
    """
    collector = LogCollector(bundle, year=year)
    show = sys.stderr.isatty() if progress is None else progress
    infos = []
    ordered = order_paths(list(paths))
    failed: list[InputError] = []
    for path in ordered:
        try:
            infos.append(collector.read(path, progress=_progress_bar(path) if show else None))
        except InputError as exc:
            if len(ordered) == 1:
                raise
            failed.append(exc)
            info = InputInfo(kind="log", name=path, notes=[f"not read: {exc}"])
            bundle.inputs.append(info)
            infos.append(info)
    if failed and len(failed) == len(ordered):
        raise failed[0]
    return infos


def _progress_bar(path: str) -> Callable[[int, int | None], None]:
    """A stderr progress line for one input, drawn only for inputs over 64 MiB."""
    state = {"last": -1}

    def update(done: int, size: int | None) -> None:
        if not size or size < 64 << 20:
            return
        pct = min(100, done * 100 // size)
        if pct != state["last"]:
            state["last"] = pct
            bar = "#" * (pct // 4)
            sys.stderr.write(f"\rkvdiag: reading {path}: [{bar:<25}] {pct:3d}% ")
            if pct >= 100:
                sys.stderr.write("\n")
            sys.stderr.flush()

    return update

