"""Read vLLM logs (V0 0.4–0.10 and V1 0.7–0.33 line formats) into a :class:`~kvdiag.bundle.Bundle`.

The file is read as a stream of 4 MiB blocks (:mod:`kvdiag.collect.logread`): only physical lines
holding one of the events' *needles* (literal text every match contains, taken from each
pattern) are decoded. Each such record is cleaned (Docker json-file envelope, ``docker logs -t`` /
CRI timestamps, ANSI colour codes, ``(EngineCore_DP0 pid=N)`` / ``(VllmWorker rank=N pid=N)``
process tags, ``[rankN]:``), its header ``LEVEL MM-DD HH:MM:SS [file:line]`` parsed when present
(the header moved from ``file:line]`` to ``[file:line]`` at 0.8, §2.1 of the reference), and the
message matched against the EVENTS registry below. Patterns are searched anywhere in the line, so
headerless excerpts and lines glued behind a ``\\r`` progress bar are read too. Traceback frames
are collected per process and closed by the exception line into one ``exception`` event naming
the frame that decides the phase (``load_model``, ``profile_run``, ``capture_model``, ...).

Text taken from a log is redacted (:func:`~kvdiag.redaction.redact`) before it is stored.

Lines starting ``# [`` are editorial notes in the shared fixtures and are skipped (counted).

Issue 12 additions: the start-up checks of every version (E1-E5 with their 0.8 / 0.16 / 0.24 / 0.33 wordings, taken
from the wheels' ``v1/core/kv_cache_utils.py``, ``kv_cache_planning.py``, ``v1/worker/gpu_worker.py``,
``v1/worker/utils.py``, ``worker/worker.py``), CUDA runtime / cut OOM lines (``oom_other_form``), non-memory CUDA
errors (``cuda_error``), phase markers (:func:`_phase_for`), model identity (``architecture``, engine config / args
lines, ``architectures.tsv``), and the "seen, not understood" list (:data:`TROUBLE_NEEDLES`, capped at
:data:`UNSEEN_LISTED` excerpts plus a count, so memory stays bounded).

The catalogue of vLLM's memory messages (:mod:`kvdiag.catalog`, 1,903 templates from the wheels 0.4-0.33) is read
after the EVENTS: its needles join the prefilter (:func:`prefilter_needles`), a line holding one is matched against
the templates (:meth:`LogCollector._catalog`) and a hit adds ``vllm_message`` (``EVENT:ENTRY_ID``), the event's marker
and the entry's numbers, except signals an EVENTS handler already added from the same line.

The reader is a package, one stage per module: :mod:`.envelope` (what wraps a record: container timestamps, process
tags, the header, paste quoting), :mod:`.messages` and :mod:`.handlers` (the EVENTS registry, its needles and what each
event adds), :mod:`.phases` (tracebacks and the start-up phase), :mod:`.identity` (the model's identity),
:mod:`.collector` (runs and assembly) and :mod:`.reader` (:func:`read_logs`).
"""

from __future__ import annotations

from .collector import LogCollector
from .envelope import GIB, MAX_LOG_VALUE, Line, size_bytes
from .identity import is_multimodal_architecture
from .messages import (EVENT_VERSIONS, EVENTS, TROUBLE_NEEDLES, UNSEEN_LISTED, event_needles, needles_of,
                       prefilter_needles, version_from_formats)
from .phases import _phase_for, deciding_frame, generic_only, phase_of
from .reader import _progress_bar, read_logs

__all__ = ["LogCollector", "read_logs", "phase_of", "deciding_frame", "size_bytes", "EVENTS", "EVENT_VERSIONS",
           "needles_of", "event_needles", "version_from_formats", "prefilter_needles", "is_multimodal_architecture",
           "UNSEEN_LISTED", "TROUBLE_NEEDLES", "MAX_LOG_VALUE", "GIB", "Line", "generic_only", "_phase_for",
           "_progress_bar"]
