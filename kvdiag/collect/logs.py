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
"""

from __future__ import annotations

import calendar
import functools
from dataclasses import dataclass
from datetime import datetime, timezone
import json
import math
from pathlib import Path
import re
import sys
from typing import Callable

import ahocorasick_rs

from .. import catalog
from ..bundle import Bundle, InputInfo
from ..errors import InputError
from ..signals import SIGNALS
from ..redaction import redact
from .logread import MAX_LINE_BYTES, RecordReader, open_log, order_paths

GIB = 1024 ** 3
_UNITS = {"B": 1, "BYTES": 1, "KIB": 1024, "MIB": 1024 ** 2, "GIB": GIB, "TIB": 1024 ** 4,
          "KB": 1024, "MB": 1024 ** 2, "GB": GIB}

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# `docker logs -t` / CRI timestamp in front of a line: 2025-10-15T00:02:38.756689123Z [stdout F ]
CONTAINER_TS = re.compile(
    r"^(?P<ts>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d))\s+(?:(?:stdout|stderr)\s+[FP]\s+)?")
# '(EngineCore_DP0 pid=N)', '(VllmWorker rank=R pid=N)', Ray's '(RayWorkerWrapper pid=N, ip=A.B.C.D)'
PROC_TAG = re.compile(r"^\((?P<proc>[A-Za-z_][\w]*(?: rank=\d+)? pid=\d+)(?:, ip=[\w.:-]+)?\)\s*")
RANK_TAG = re.compile(r"^\[rank(\d+)\]:\s?")
HEADER = re.compile(
    r"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+(?:(?P<mon>\d\d)-(?P<day>\d\d)\s+"
    r"(?P<time>\d\d:\d\d:\d\d)\s+)?(?:\[(?P<file1>[\w./-]+):(?P<line1>\d+)\]|(?P<file2>[\w.-]+\.py):(?P<line2>\d+)\])\s?")
FRAME = re.compile(r'File "(?P<path>[^"]+)", line \d+, in (?P<func>[\w<>]+)')
# last line of a traceback: 'torch.OutOfMemoryError: CUDA out of memory...', 'ValueError: ...'
EXC_LINE = re.compile(r"^\s*(?:[A-Za-z_][\w]*\.)*(?P<type>[A-Z]\w*(?:Error|Exception))(?::|$)")


MAX_LOG_VALUE = 1e30
"""Largest magnitude a number read from a log may have (bytes of any GPU fleet, any count): beyond it, or NaN/Inf,
the line is skipped with a note."""


def size_bytes(number: str, unit: str) -> float:
    """``"1002.00", "MiB"`` → bytes. Units as PyTorch and vLLM print them (GiB, MiB, KiB, bytes, GB)."""
    x = float(number)
    if not -MAX_LOG_VALUE <= x <= MAX_LOG_VALUE:  # NaN, ±Inf, 400 digits: no memory size
        raise ValueError(f"{number[:40]!r} is not a size kvdiag can use")
    scale = _UNITS.get(unit.upper())
    if scale is None:  # a case-insensitive pattern also matches look-alikes ('ı', 'K' Kelvin): not a unit kvdiag knows
        raise ValueError(f"unit {unit!r}")
    return x * scale


@dataclass
class Line:
    """One cleaned log record.

    Attributes:
        lineno: 1-based line number of its first physical line.
        t: Unix seconds (UTC) when known, else ``None``.
        proc: process tag (``EngineCore pid=812``) or ``""``.
        level: log level or ``""`` for text printed outside the logger.
        msg: the message (whole cleaned line when there is no header).
    """

    lineno: int
    t: float | None
    proc: str
    level: str
    msg: str


# ------------------------------------------------------------------------------------------------
# OOM phase: which traceback frame raised it (§2.7). The frame nearest the raise decides.
PHASE_FRAMES: list[tuple[str, re.Pattern]] = [
    ("sampler", re.compile(r"_dummy_sampler_run|_dummy_pooler_run|/sample/sampler\.py|sampler\.py$")),
    ("cudagraph", re.compile(r"capture_model|_capture_cudagraphs|cuda_graph|cudagraph", re.I)),
    ("kv_alloc", re.compile(r"_allocate_kv_cache|_init_cache_engine|initialize_kv_cache|cache_engine\.py|"
                            r"initialize_from_config|_reshape_kv_cache_tensors|initialize_cache|"
                            r"get_kv_cache_configs?\b|_initialize_kv_caches")),
    # a vision / audio tower's forward or the V1 encoder step (gpu_model_runner._execute_mm_encoder 0.9+,
    # embed_multimodal 0.11+, get_multimodal_embeddings 0.6+, _process_image_input / _process_audio_input)
    ("encoder", re.compile(r"get_multimodal_embeddings|embed_multimodal|_execute_mm_encoder|_process_image_input|"
                           r"_process_video_input|_process_audio_input|_process_multimodal|vision|visual|encoder|"
                           r"audio|siglip|clip\.py|whisper|pixtral|image_processing|_profile_encoder", re.I)),
    ("profile", re.compile(r"profile_run|_dummy_run|determine_available_memory|determine_num_available_blocks")),
    ("runtime", re.compile(r"execute_model")),
    ("load", re.compile(r"load_model|load_weights|_initialize_model|build_model|create_weights|weight_loader|"
                        r"initialize_model|_load_weights|safetensors_weights_iterator|"
                        r"model_loader|lm_head|ParallelLMHead|VocabParallelEmbedding")),
]


#: frames vLLM runs in more than one step (``_dummy_run`` serves the profile run, CUDA-graph capture and the warm-ups;
#: ``execute_model`` the profile run and serving): they name a phase only when no frame further out names another
GENERIC_FRAMES = re.compile(r"^(?:_dummy_run|execute_model|_model_forward|forward)$")


def _frame_phase(path: str, func: str) -> str:
    for phase, pattern in PHASE_FRAMES:
        if pattern.search(func) or pattern.search(path.rsplit("/", 1)[-1]):
            return phase
    return ""


def deciding_frame(frames: list[tuple[str, str]]) -> tuple[str, str, str]:
    """``(phase, function, path)`` of the frame that classifies a traceback: the innermost frame that names a phase
    (see :func:`phase_of`) — unless it is a frame several steps run (:data:`GENERIC_FRAMES`, ``_dummy_run`` under
    ``capture_model`` or ``profile_run``) and a frame further out names a phase: the outer one says more. Else the
    innermost frame with phase ``""``."""
    generic = None
    for path, func in reversed(frames):
        phase = _frame_phase(path, func)
        if not phase:
            continue
        if GENERIC_FRAMES.match(func):
            generic = generic or (phase, func, path)
            continue
        return phase, func, path
    if generic:
        return generic
    return ("", frames[-1][1], frames[-1][0]) if frames else ("", "", "")


def generic_only(frames: list[tuple[str, str]]) -> bool:
    """Do the frames name a phase only through a frame several steps run (a cut traceback showing ``_dummy_run``)?"""
    phase, func, _path = deciding_frame(frames)
    return bool(phase) and bool(GENERIC_FRAMES.match(func))


def phase_of(frames: list[tuple[str, str]]) -> str:
    """Classify an OOM by its traceback frames (list of ``(path, function)``, outermost first).

    Returns the phase of the deciding frame (:func:`deciding_frame`: ``load``, ``profile``, ``kv_alloc``,
    ``cudagraph``, ``sampler``, ``encoder``, ``runtime``), or ``""`` when none names one.
    """
    return deciding_frame(frames)[0]


# ------------------------------------------------------------------------------------------------
# The EVENTS registry: (id, pattern, handler). Handlers receive the match, the Line and the
# collector, and add observations. Ids follow shared/reference/vllm-observability.md §2.
_num = r"(-?\d+(?:\.\d+)?)"


# paste forms: '> ' quotes at any depth and indentation in front of a record (kept: a traceback frame's own indent
# does not matter, FRAME searches anywhere)
QUOTE_PREFIX = re.compile(r"^[ \t]*(?:>[ \t]?)+[ \t]*|^[ \t]+")
_PASTE_LEAD = (" ", "\t", ">")

# "Nothing silently dropped": a line that holds memory-trouble wording but matched no event is listed. Strong words
# count at any level; weak ones (KV cache, blocks, memory) only on WARNING/ERROR/CRITICAL lines or text printed outside
# the logger (exception lines), never on INFO/DEBUG progress talk.
UNSEEN_LISTED = 10
TROUBLE_NEEDLES = ["out of memory", "Out of memory", "OutOfMemory", "OOM", "CUDA error", "CUBLAS_STATUS", "NCCL",
                   "preempt", "Preempt", "not enough", "Not enough", "insufficient", "Insufficient", "No available",
                   "no available", "KV cache", "kv cache", "KV Cache", "blocks", "memory", "Memory"]
# matched on the lower-cased message (a case-insensitive regex costs 3x more per line); OOM on the original
_TROUBLE_STRONG = re.compile(r"out of memory|outofmemory|cuda error|cublas_status|nccl (?:error|warn)|\bpreempt|"
                             r"no (?:free|available) (?:\w+ )?(?:blocks?|memory)|not enough (?:\w+ )?"
                             r"(?:memory|blocks?|kv cache)|insufficient (?:\w+ )?memory|cannot allocate|failed to allocate")
_OOM_WORD = re.compile(r"\bOOM\b")
_TROUBLE_WEAK = re.compile(r"kv cache|cache blocks|gpu blocks|free blocks|\bmemory\b")
_SETTING_WORDS = re.compile(r"gpu[-_]memory[-_]utili[sz]ation|kv[-_]cache[-_](?:dtype|memory)|swap[-_]space")


# vLLM's own WARNING/INFO texts that mention KV cache / memory / CUDA graphs but report a setting, not trouble
# (read: nothing to list). Sources: v1/core/kv_cache_utils.py / kv_cache_planning.py (hybrid manager, padding layers,
# page sizes, fine-grained prefix hits, draft group; 0.9-0.33), v1/worker/gpu_model_runner.py (skipping capture,
# 0.9-0.33), v1/worker/gpu_worker.py (CUDA graph memory profiling disabled, 0.24-0.33), config.py (CUDA graph not
# supported, fallback to eager, 0.4-0.10), platforms/interface.py and cpu.py (pin memory, fp8 KV on CPU).
_KNOWN_NOT_TROUBLE = re.compile(
    r"Hybrid KV cache manager is disabled|KV cache page sizes cannot be unified|Add \d+ padding layers, may waste|"
    r"Disabling fine-grained prefix-cache hits|no KV cache group could be identified as the draft|"
    r"Skipping (?:encoder and decoder )?CUDA graph capture|CUDA graph memory profiling is (?:disabled|enabled)|"
    r"CUDA graph is not supported|fallback to (?:the )?eager mode|Pinned memory is not available|pin_memory=False|"
    r"doesn't support fp8_e4m3 KV cache|Memory profiling takes|Sleep mode freed")
_SHELL = re.compile(r"^\s*(?:#|\$ |vllm serve |python3? -m vllm)")


def _matches(text: str) -> int:
    """How many events read ``text``, plus one when it is a whole catalogued message (the catalogue knows wordings the
    events do not, e.g. M7 0.11 'reserved 5.67GiB memory' without the space)."""
    return sum(1 for e in _events_for(text) if e[1].search(text)) + \
        (1 if _catalog_needle_in(text) and catalog.match(text, partial=False) else 0)


def _better_joining(first: bytes, other: bytes) -> bytes:
    """Of the two joinings of a wrapped pasted record (pieces glued as cut / with the dropped space put back), the one
    more events match; ``first`` (the reader's guess from the wrap widths) on a tie."""
    a, b = first.decode("utf-8", "replace"), other.decode("utf-8", "replace")
    return other if _matches(b) > _matches(a) else first


def _looks_like_trouble(line: Line) -> bool:
    """Memory-trouble wording on a line no event read (see :data:`TROUBLE_NEEDLES`). Shell commands and comments
    (``# vllm serve … --gpu-memory-utilization 0.75``) are a setting, not trouble."""
    msg = line.msg
    if _SHELL.match(msg):
        return False
    low = msg.lower()
    if _TROUBLE_STRONG.search(low) or ("OOM" in msg and _OOM_WORD.search(msg)):
        return True
    return line.level not in ("INFO", "DEBUG") and bool(_TROUBLE_WEAK.search(low)) and \
        bool(_TROUBLE_WEAK.search(_SETTING_WORDS.sub("", low)))


def _excerpt(msg: str, width: int = 160) -> str:
    """``msg`` with its blanks folded, cut to ``width`` characters (``…`` last). Redact before cutting: a cut
    inside a quoted secret leaves a value the redactor no longer sees whole."""
    msg = " ".join(msg.split())
    return msg if len(msg) <= width else msg[:width - 1] + "…"


IDENTITY_CHARS = 200
"""At most this many characters of a model name, quantisation, architecture or version taken from a log."""


def _bounded(text: str) -> str:
    """``text`` cut to :data:`IDENTITY_CHARS` characters (``…`` last)."""
    return text if len(text) <= IDENTITY_CHARS else text[:IDENTITY_CHARS - 1] + "…"


class LogCollector:
    """Parse one or more logs into a bundle. Create once per bundle; call :meth:`read` per file, in time order.

    Args:
        bundle: where observations go (source ``log:FILE:LINE``, ``t`` in Unix seconds UTC).
        year: year of the first yearless header timestamp (``--year``); later lines roll over at New
            Year. Default: per file, the year that puts the first line at or before the file's
            modification date (so a log written across New Year gets the older year first).

    Attributes:
        version: vLLM version from a banner line, else ``None``.
        formats: line formats seen (for the report's notes).
    """

    def __init__(self, bundle: Bundle, year: int | None = None) -> None:
        self.bundle = bundle
        self.year = year
        self.segment = 0
        self._seen_startup = False
        self._frames: dict[str, list[tuple[str, str]]] = {}
        self._frames_line: dict[str, int] = {}
        self._name = ""
        self.version: str | None = None
        self.formats: set[str] = set()
        self._after_startup_events: set[str] = set()
        self._segment_signals: set[str] = set()
        self._preemptions = 0.0
        self._stats_pending: list[tuple[Line, dict[str, float]]] = []
        self._pending_engines: set[str] = set()
        self._engines: set[str] = set()
        self._year_now: int | None = year
        self._last_month: int | None = None
        self._year_end: datetime | None = None
        self._src_cache: tuple[int, str] = (-1, "")
        self._step: dict[str, str] = {}
        self._last_step_key = ""
        self.multimodal = False           # the model takes images / audio (architecture, args, encoder lines)
        self._mm_said = False
        self._mm_profile_skipped = False
        self._oom_line = -1               # line number of the last OOM event (one OOM per line)
        self._cuda_error_line = -1
        self._last_frame_line = -2        # line number of the last traceback frame (its source line follows)
        self._unseen: list[tuple[int, str]] = []  # lines that look like memory trouble but match no event
        self._unseen_count = 0
        self.needles = prefilter_needles()
        self._line_signals: set[str] = set()  # signals added while the current line is dispatched
        self._bad_number_notes: list[str] = []  # notes for lines skipped for a malformed number, this file
        self._pids: dict[str, list] = {}     # API-server pid -> [first line, bundle seq then, last line], this file
        self._run_forms: set[str] = set()     # version-line forms seen in the current server run
        self._run_served = False              # the current run printed stats lines (it served)
        self._v0_preempted = False            # a V0 preemption warning was seen in the current run
        self._line_seq = 0                    # the bundle's next seq when the current line began
        self._last_catalog_hit: tuple[str, int] = ("", -1)  # entry id and line of the last exact catalogue hit
        self._phrase_misses: set[str] = set()
        self._phrase_hit_ids: dict[str, str] = {}  # wording (digits as 0) -> the entry it was read as  # wordings (digits as 0) phrase matching found nothing in
        self._phrase_hits = 0                  # lines read by their phrases (not an exact catalogued wording), this file
        self._phrase_examples: list[str] = []

    # -- reading ---------------------------------------------------------------------------------
    def read(self, path: str, progress: Callable[[int, int | None], None] | None = None) -> InputInfo:
        """Read one log (plain, ``.gz``, ``.zst``, or ``-`` for stdin) and add its observations.

        Args:
            path: file path or ``-``.
            progress: called after each 4 MiB block with (stored bytes read, stored size or None).

        Raises:
            InputError: the path is missing, a directory, unreadable, empty, not text, or a broken archive.
        """
        info = InputInfo(kind="log", name=path)
        self._name = "stdin" if path == "-" else Path(path).name
        self._frames.clear()
        self._frames_line.clear()
        if self.year is None:  # per file, from its date
            self._year_now = None
            self._last_month = None
            try:
                mtime = Path(path).stat().st_mtime if path != "-" else datetime.now(timezone.utc).timestamp()
            except OSError:
                mtime = datetime.now(timezone.utc).timestamp()
            self._year_end = datetime.fromtimestamp(mtime, tz=timezone.utc)
        before = len(self.bundle)
        self._headers = 0
        with open_log(path) as (stream, position, size):
            on_block = (lambda: progress(position(), size)) if progress else None
            reader = RecordReader(self.needles, path, on_block=on_block)
            for lineno, lines in reader.read(stream):
                alt = reader.alternatives.get(lineno) if reader.paste else None
                if alt is not None:
                    lines = [_better_joining(lines[0], alt)]
                self._record(lineno, lines, reader.container)
            self._flush_stats()
            self._close_open_tracebacks()
        self._pid_runs()
        info.records = reader.lines
        if info.records == 0:
            raise InputError(f"{path}: empty file, expected vLLM log lines")
        info.skipped = self._skipped
        self._skipped = 0
        info.observations = len(self.bundle) - before
        if reader.binary_lines and info.observations == 0 and reader.binary_lines * 10 >= reader.lines * 9:
            raise InputError(f"{path}:1: binary data, expected text log lines")
        self._unseen_notes(info)
        if self._phrase_hits:
            info.notes.append(f"{self._phrase_hits} line(s) read by their phrases, not by the exact wording of a "
                              "catalogued vLLM release (a damaged paste, a nightly or a fork): "
                              + "; ".join(self._phrase_examples))
            self._phrase_hits = 0
            self._phrase_examples = []
        if reader.paste:
            info.notes.append("pasted text (" + reader.paste + "): lines re-joined before matching")
        if reader.truncated:
            info.notes.append(f"truncated after {reader.lines} lines ({redact(reader.truncated)}): "
                              "the lines before the cut were read, the rest is missing")
        if reader.cut_lines:
            info.notes.append(f"over-long line(s) (no newline within {MAX_LINE_BYTES >> 20} MiB) cut "
                              f"{reader.cut_lines} time(s), each piece counted as a record")
        if reader.binary_lines:
            info.notes.append(f"{reader.binary_lines} line(s) hold binary data (control bytes), not log text: "
                              "read as text, nothing taken from them")
        if not self._headers and info.observations == 0:
            info.notes.append(f"no line of {self._name} looked like a vLLM log line "
                              "(expected 'INFO MM-DD HH:MM:SS [file.py:N] ...'): nothing taken from it")
        if reader.container:
            info.notes.append({"json": "Docker json-file lines", "ts": "container timestamps (docker -t / CRI)"}
                              [reader.container])
        if self.version:
            info.notes.append(f"vLLM version {self.version}")
        ident = self._identity_note()
        if ident:
            info.notes.append(ident)
        if self.formats:
            info.notes.append("line format: " + ", ".join(sorted(self.formats)))
            guess = version_from_formats(self.formats)
            if guess and not self.version:
                info.notes.append(f"vLLM version from the line format: {guess}")
        if len(self._engines) > 1:
            info.notes.append(f"{len(self._engines)} engines (data parallel): KV usage by max, counts by sum")
        if info.skipped - self._bad_numbers:
            info.notes.append(f"skipped {info.skipped - self._bad_numbers} editorial note line(s) starting '# ['")
        info.notes.extend(self._bad_number_notes)
        if self._bad_numbers > len(self._bad_number_notes):
            info.notes.append(f"… and {self._bad_numbers - len(self._bad_number_notes):,} more line(s) with a "
                              "number kvdiag cannot read, skipped")
        self._bad_numbers = 0
        self._bad_number_notes = []
        if self._out_of_domain:
            info.notes.append(f"{self._out_of_domain} stats-line value(s) out of their domain (negative, or a "
                              "percentage above 100) skipped")
            self._out_of_domain = 0
        self.bundle.inputs.append(info)
        return info

    _skipped = 0
    _bad_numbers = 0  # lines of this file skipped for a number a handler could not read
    _out_of_domain = 0  # stats-line values skipped as impossible, this file
    _headers = 0  # lines of the current file with a vLLM log header
    _close_tb = False
    _day_key: tuple = ()
    _day_start = 0

    def _record(self, lineno: int, lines: list[bytes], container: str) -> None:
        """One candidate record (one or more physical lines) → cleaned :class:`Line` (s) → events."""
        t_container = None
        parts = []
        for raw in lines:
            text = raw.decode("utf-8", errors="replace")
            if container == "json" and text.startswith("{"):
                try:
                    obj = json.loads(text)
                except ValueError:
                    obj = None
                if isinstance(obj, dict) and isinstance(obj.get("log"), str):
                    if t_container is None and isinstance(obj.get("time"), str):
                        t_container = _parse_rfc3339(obj["time"])
                    parts.append(obj["log"].rstrip("\n"))
                    continue
            text = text.rstrip("\r")
            m = CONTAINER_TS.match(text) if container == "ts" or text[:1].isdigit() else None
            if m:
                if t_container is None:
                    t_container = _parse_rfc3339(m.group("ts"))
                text = text[m.end():]
            parts.append(text)
        text = "".join(parts).rstrip("\r\n")
        if text.startswith("# ["):
            self._skipped += 1
            return
        if "\x1b" in text:
            text = ANSI.sub("", text)
        # A progress bar glued with \r: every \r-separated piece that holds a log header is a record;
        # without any header the pieces are read as one text.
        if "\r" in text:
            pieces = [s for s in text.split("\r") if s.strip()]
            with_header = [s for s in pieces if HEADER.search(s)]
            for piece in with_header or [" ".join(pieces)]:
                self._one(lineno, piece, t_container)
        else:
            self._one(lineno, text, t_container)

    def _one(self, lineno: int, text: str, t: float | None) -> None:
        if text[:1] in _PASTE_LEAD:  # quoted ('> ', any depth) or indented paste
            text = QUOTE_PREFIX.sub("", text, count=1)
        proc = ""
        m = PROC_TAG.match(text)
        if m:
            proc = m.group("proc")
            text = text[m.end():]
            if proc.startswith(("APIServer pid=", "MainProcess pid=")):
                got = self._pids.get(proc)
                if got is None:
                    if self._pids:
                        self._flush_stats()  # the buffered stats line belongs to the run before this pid
                    self._pids[proc] = [lineno, self.bundle._seq, lineno]
                else:
                    got[2] = lineno
        m = RANK_TAG.match(text)
        if m:
            proc = proc or f"rank{m.group(1)}"
            text = text[m.end():]
        level = ""
        h = HEADER.search(text)
        if h:
            self._headers += 1
            level = h.group("level")
            self.formats.add("V0 'file.py:N]' (0.4-0.7)" if h.group("file2") else "'[file:N]' (0.8+)")
            if proc:
                self.formats.add(_proc_format(proc))
            if t is None and h.group("mon"):
                t = self._header_time(int(h.group("mon")), int(h.group("day")), h.group("time"))
            text = text[h.end():]  # anything before the header is a glued progress bar
        self._dispatch(Line(lineno, t, proc, level, text))

    def _header_time(self, month: int, day: int, hms: str) -> float | None:
        """Yearless ``MM-DD HH:MM:SS`` (UTC, vLLM prints no zone) → Unix seconds, monotonic across New Year."""
        if self._year_now is None:
            end = self._year_end or datetime.now(timezone.utc)
            self._year_now = end.year if (month, day) <= (end.month, end.day) else end.year - 1
        if self._last_month is not None and month < self._last_month and self._last_month - month >= 6:
            self._year_now += 1  # crossed New Year
        self._last_month = month
        try:
            hh, mm, ss = int(hms[0:2]), int(hms[3:5]), int(hms[6:8])
            if not (1 <= month <= 12 and 1 <= day <= 31 and hh < 24 and mm < 60 and ss < 62):
                return None
            key = (self._year_now, month, day)
            if key != self._day_key:
                self._day_key = key
                self._day_start = calendar.timegm((self._year_now, month, day, 0, 0, 0, 0, 0, 0))
            return float(self._day_start + hh * 3600 + mm * 60 + ss)
        except (ValueError, OverflowError):
            return None

    # -- matching --------------------------------------------------------------------------------
    def _src(self, line: Line) -> str:
        if self._src_cache[0] != line.lineno:
            self._src_cache = (line.lineno, f"log:{self._name}:{line.lineno}")
        return self._src_cache[1]

    def _add(self, signal: str, value, line: Line, text: str = "", note: str = "") -> None:
        self._segment_signals.add(signal)
        self._line_signals.add(signal)
        if value is not None and not isinstance(value, str) and not math.isfinite(value):
            # NaN, ±Inf ('1e999', a number of 400 digits): the line is skipped
            raise ValueError(f"{value!r} is not a finite number kvdiag can use")
        src = self._src(line) + (f" [{note}]" if note else "")
        self.bundle.add(signal, value, src, t=line.t, text=redact(text) if text else "", segment=self.segment)

    def _new_segment(self, line: Line, why: str) -> None:
        if self._seen_startup and why in self._after_startup_events:
            self.segment += 1
            self._after_startup_events.clear()
            self._segment_signals.clear()
        self._seen_startup = True
        self._after_startup_events.add(why)

    def _new_run(self, line: Line, why: str) -> None:
        """A new server run begins at ``line`` (a banner, or start-up lines after the last run served): the bundle's
        ``log_runs`` gets ``{"start_seq", "file", "line", "why"}``; observations from here on belong to it."""
        runs = self.bundle.__dict__.setdefault("log_runs", [])
        if not runs:
            runs.append({"start_seq": 0, "file": self._name, "line": 1, "why": "the log's start"})
        if self._line_seq == self.bundle._seq:
            self._flush_stats()  # a buffered stats line belongs to the run before
            self._line_seq = self.bundle._seq
        runs.append({"start_seq": self._line_seq, "file": self._name, "line": line.lineno, "why": why})
        self._run_forms.clear()
        self._run_served = False
        self._v0_preempted = False

    def _pid_runs(self) -> None:
        """Runs told apart by the API server's process id (end of a file): a pid first seen after every earlier pid was
        last seen is a new server (a restart with no banner in the paste); pids that interleave are one server's
        API processes (``--api-server-count``), never a new run."""
        pids = sorted(self._pids.values())
        self._pids = {}
        runs = self.bundle.__dict__.setdefault("log_runs", [])
        last = -1
        for k, (first, seq, end) in enumerate(pids):
            if k and first > last and not any(r["file"] == self._name and abs(r["line"] - first) <= 50 for r in runs):
                if not runs:
                    runs.append({"start_seq": 0, "file": self._name, "line": 1, "why": "the log's start"})
                runs.append({"start_seq": seq, "file": self._name, "line": first,
                             "why": "a new API-server process id"})
            last = max(last, end)
        runs.sort(key=lambda r: r["start_seq"])

    def _run_marker(self, line: Line, form: str) -> None:
        """A start-up line of kind ``form`` (``banner``, ``engine``, ``weights``, ``load``): a new run when the current
        one already served, or already printed this kind of version line (a second start)."""
        if self._run_served or (form in ("banner", "engine", "config") and form in self._run_forms):
            what = {"banner": "a new 'vLLM API server version' banner", "engine": "a new engine start line",
                    "config": "a new engine config line",
                    "weights": "weights loaded again after serving", "load": "a model load after serving"}[form]
            self._new_run(line, what)
        self._run_forms.add(form)

    def _dispatch(self, line: Line) -> None:
        msg = line.msg
        self._line_seq = self.bundle._seq
        key = line.proc or "main"
        if ", line " in msg:
            fms = list(FRAME.finditer(msg[:MAX_FRAME_LINE]))
            if fms:
                frames = self._frames.setdefault(key, [])
                frames.extend((fm.group("path"), fm.group("func")) for fm in fms)
                self._frames_line[key] = line.lineno
                self._last_frame_line = line.lineno
                tail = msg[fms[-1].end():]
                if tail.strip():
                    # a traceback a paste folded into one line ('File "…", line 381, in determine_available_memory
                    # x = self.model_runner.profile_cudagraph_memory() ... torch.OutOfMemoryError: …'): the source
                    # text's call is the next frame, and the exception line is read as a line of its own
                    call = _GLUED_CALL.match(tail)
                    if call:
                        frames.append(("", call.group(1)))
                    ex = _GLUED_EXC.search(tail)
                    if ex:
                        self._dispatch(Line(line.lineno, line.t, line.proc, line.level, tail[ex.start(1):]))
                return
        exc = EXC_LINE.match(msg) if ("Error" in msg or "Exception" in msg) else None
        understood = False
        self._line_signals.clear()
        stats = False
        fired: set[str] = set()
        mark = len(self.bundle)
        for event in _events_for(msg):
            m = event[1].search(msg)
            if m:
                try:
                    event[2](self, m, line)
                except (ValueError, OverflowError) as e:  # a malformed number ('1.2.3', ',,,'): skip the line
                    self.bundle.discard_from(mark)
                    self._bad_number(line, m, e)
                    self._close_tb = False
                    return
                understood = True
                fired.add(event[0])
                stats = stats or event[0] == "stats"
        catalogued = False
        if _catalog_needle_in(msg):
            try:
                catalogued = self._catalog(line, stats)
                understood = catalogued or understood
            except (ValueError, OverflowError) as e:  # a catalogue number out of its domain: skip the line
                self.bundle.discard_from(mark)
                self._bad_number(line, None, e)
                self._close_tb = False
                return
        if (not catalogued and not stats and not (fired & _NO_PHRASES) and line.lineno != self._last_frame_line + 1
                and (msg.count(" ") >= 4 or _anchor_in(msg) or _catalog_needle_in(msg))
                and not _SHELL.match(msg)):
            try:
                understood = self._phrases(line) or understood
            except (ValueError, OverflowError) as e:
                self.bundle.discard_from(mark)
                self._bad_number(line, None, e)
                self._close_tb = False
                return
        if not understood and line.lineno != self._last_frame_line + 1 and _looks_like_trouble(line) \
                and not _KNOWN_NOT_TROUBLE.search(msg):
            self._unseen_count += 1
            if len(self._unseen) < UNSEEN_LISTED:
                self._unseen.append((line.lineno, _excerpt(redact(msg))))
        if (exc or self._close_tb) and self._frames.get(key):
            frames = self._frames.pop(key)
            phase, func, path = deciding_frame(frames)
            where = f"{func} ({path.rsplit('/', 1)[-1]})" if func else "?"
            etype = exc.group("type") if exc else "OutOfMemoryError"
            self._add("exception", len(frames), line, text=f"{etype} in {where}" + (f" [{phase}]" if phase else ""))
        self._close_tb = False

    def _bad_number(self, line: Line, m: re.Match | None, e: Exception) -> None:
        """A handler's ``float()`` / ``int()`` refused a captured number: the line is skipped (counted, a note
        naming file:line and the text)."""
        self._skipped += 1
        self._bad_numbers += 1
        if len(self._bad_number_notes) < UNSEEN_LISTED:
            text = str(e).rsplit(": ", 1)[-1] if isinstance(e, ValueError) else "a number too large"
            for g in (m.groups() if m is not None else ()):  # the captured text that is no number, as written
                if g and any(ch.isdigit() or ch in ".," for ch in g):
                    try:
                        float(g.replace(",", ""))
                    except ValueError:
                        text = repr(g)
                        break
            self._bad_number_notes.append(f"{self._name}:{line.lineno}: a number kvdiag cannot read: "
                                          f"{redact(text[:80])} (line skipped)")

    def _catalog(self, line: Line, stats: bool) -> bool:
        """Match ``line`` against the catalogue of vLLM's memory messages (:mod:`kvdiag.catalog`); on a hit add
        ``vllm_message`` (text ``EVENT:ENTRY_ID``), the event's marker and the numbers the entry carries, in base
        units — except the signals an EVENTS handler already added from this line: the same number is never counted
        twice. ``stats``: the periodic stats handler read the line (its numbers are buffered): nothing is added, and
        a catalogue entry of event ``stats`` leaves no row either (one such line every few seconds, serving long).
        Returns whether the catalogue knew the line."""
        hit = catalog.match(line.msg, level=line.level)
        if hit is None:
            return False
        self._last_catalog_hit = (hit[0]["id"], line.lineno)
        if stats and hit[0]["event"] == "stats":
            return True
        done = set(self._line_signals)
        for k, (signal, value, text) in enumerate(catalog.observations(*hit)):
            if k == 0 or (not stats and signal in SIGNALS and signal not in done):
                self._add(signal, value, line, text=text)
        return True

    def _phrases(self, line: Line) -> bool:
        """A line neither the events nor an exact catalogue wording read: matched by the fixed phrases of a catalogued
        template in order (:meth:`kvdiag.catalog.Catalog.match_phrases`), tolerant of a changed or missing character,
        GB/GiB, a cut start or end, a wording of a version or nightly the catalogue lacks. A hit adds what an exact
        hit adds (the event, its marker, the numbers whose labels matched) and is counted for a note. Lines that
        matched nothing are remembered by their wording without digits (bounded), so a repeated line is tried once."""
        key = _DIGITS.sub("0", line.msg[:512])
        if key in self._phrase_misses:
            return False
        # a wording read before is aligned with the template it matched only (a repeated request error)
        hit = catalog.load().match_phrases(line.msg, level=line.level, only=self._phrase_hit_ids.get(key))
        if hit is not None and len(self._phrase_hit_ids) < 4096:
            self._phrase_hit_ids[key] = hit[0]["id"]
        if hit is None:
            if len(self._phrase_misses) < 4096:
                self._phrase_misses.add(key)
            return False
        last_id, last_line = self._last_catalog_hit
        if hit[0]["id"] == last_id and 0 < line.lineno - last_line <= 8:
            return True  # a piece of the message just read (a wrap the reader could not re-join): read once
        self._phrase_hits += 1
        if len(self._phrase_examples) < 3:
            e = hit[0]
            self._phrase_examples.append(f"line {line.lineno} as {e['event']} ({e['id']}, vLLM "
                                         f"{', '.join(e['versions'])})")
        done = set(self._line_signals)
        for k, (signal, value, text) in enumerate(catalog.observations(*hit)):
            if k == 0 or (signal in SIGNALS and signal not in done):
                self._add(signal, value, line, text=text)
        return True

    def _identity_note(self) -> str:
        """'model NAME (ARCH, multimodal, quantization Q)' from the facts this collector added, or ``""``."""
        def last(sig: str) -> str:
            rows = self.bundle.signal(sig)
            return str(rows["text"].iloc[-1]) if len(rows) else ""
        name, arch, quant = last("model_name"), last("model_architecture"), last("quantization")
        if not (name or arch):
            return ""
        parts = [p for p in (arch, "multimodal" if self.multimodal else "", f"quantization {quant}" if quant else "")
                 if p]
        return f"model {name or '?'}" + (f" ({', '.join(parts)})" if parts else "")

    def _unseen_notes(self, info: InputInfo) -> None:
        """'seen, not understood' notes (at most :data:`UNSEEN_LISTED`, then a count) and one
        ``unrecognised_memory_line`` row, so such an input is never judged as holding no signal."""
        if not self._unseen_count:
            return
        for lineno, text in self._unseen:
            info.notes.append(f"seen, not understood: {text} (line {lineno})")
        more = self._unseen_count - len(self._unseen)
        if more:
            info.notes.append(f"… and {more:,} more line(s) seen, not understood")
        first = self._unseen[0][0]
        self._add("unrecognised_memory_line", float(self._unseen_count), Line(first, None, "", "", ""),
                  text=self._unseen[0][1])
        self._unseen.clear()
        self._unseen_count = 0

    def _close_open_tracebacks(self) -> None:
        """Traceback frames never closed by an exception line (a cut log): one ``exception`` event each, type ``?``."""
        for key, frames in list(self._frames.items()):
            if frames:
                phase, func, path = deciding_frame(frames)
                line = Line(self._frames_line.get(key, 0), None, key, "", "")
                self._add("exception", len(frames), line,
                          text=f"? in {func} ({path.rsplit('/', 1)[-1]})" + (f" [{phase}]" if phase else ""))
        self._frames.clear()

    def _flush_stats(self) -> None:
        """Emit the buffered periodic stats of one interval; several DP engines are combined."""
        pending, self._stats_pending = self._stats_pending, []
        self._pending_engines.clear()
        if not pending:
            return
        if len(pending) == 1:
            line, vals = pending[0]
            for signal, value in vals.items():
                if signal == "num_preemptions":
                    self._preemptions += value
                    value = self._preemptions
                self._add(signal, value, line)
            return
        signals = dict.fromkeys(s for _, vals in pending for s in vals)
        for signal in signals:
            rows = [(line, vals[signal]) for line, vals in pending if signal in vals]
            how = _DP_COMBINE.get(signal, "sum")
            if how == "max":
                line, value = max(rows, key=lambda r: r[1])
            elif how == "mean":
                line, value = rows[0][0], sum(v for _, v in rows) / len(rows)
            else:
                line, value = rows[0][0], sum(v for _, v in rows)
            if signal == "num_preemptions":
                self._preemptions += value
                value = self._preemptions
            self._add(signal, value, line)


# process tags (§2.1) → the versions that print them
_PROC_VERSIONS = [
    (re.compile(r"^VllmWorkerProcess "), "(0.4-0.10)"), (re.compile(r"^VllmWorker rank="), "(0.6-0.9)"),
    (re.compile(r"^EngineCore_\d+ "), "(0.8-0.9)"), (re.compile(r"^EngineCore_DP\d+ "), "(0.10+)"),
    (re.compile(r"^EngineCore pid"), "(0.24+)"), (re.compile(r"^APIServer "), "(0.10+)"),
    (re.compile(r"^MainProcess "), "(0.33+)"), (re.compile(r"^Worker(?:_\w+)? pid"), "(0.10+)"),
]


@functools.lru_cache(maxsize=256)
def _proc_format(proc: str) -> str:
    label = "process tag (" + re.sub(r"\d+", "N", proc) + ")"
    for pattern, versions in _PROC_VERSIONS:
        if pattern.match(proc):
            return f"{label} {versions}"
    return label


def _parse_rfc3339(ts: str) -> float | None:
    from ..inputs.logfile import rfc3339_seconds  # the one timestamp range (1970 .. 2200) of every input

    return rfc3339_seconds(ts)


# ---- handlers ----------------------------------------------------------------------------------
# 'Name: number' parts of the stats line (§2.5 templates of all versions) → (signal, scale to base units)
_STATS_SIGNAL = {"Avg prompt throughput": ("prompt_throughput", 1.0),
                 "Avg generation throughput": ("generation_throughput", 1.0),
                 "Running": ("num_requests_running", 1.0), "Swapped": ("num_requests_swapped", 1.0),
                 "Pending": ("num_requests_waiting", 1.0), "Waiting": ("num_requests_waiting", 1.0),
                 "Preemptions": ("num_preemptions", 1.0), "Prefix cache hit rate": ("prefix_cache_hit_rate", 0.01)}
_STATS_NAMES = set(_STATS_SIGNAL) | {f"{d} KV cache usage" for d in ("GPU", "XPU", "CPU", "TPU", "HPU", "NPU",
                                                                  "GPU + host")}
# (?<!\d): a digit run is tried from its start only (a line of 100,000 digits stays linear, not quadratic)
_STATS_ENGINE = re.compile(r"(?:Engine (\d+)|(?<!\d)(\d+) Engines Aggregated): ")
# how several data-parallel engines' stats lines of one interval combine (as the metrics collector does)
_DP_COMBINE = {"kv_cache_usage": "max", "cpu_cache_usage": "max", "prefix_cache_hit_rate": "mean"}


def _stats(c: LogCollector, m: re.Match, line: Line) -> None:
    """Periodic stats line (V0 engine/metrics.py, V1 v1/metrics/loggers.py; §2.5).

    Percentages become 0–1 ratios; 'Preemptions: N' (0.16+, per interval) is accumulated into the
    ``num_preemptions`` counter. Lines of several engines (``Engine 000:``, ``Engine 001:``) with the
    same timestamp are one interval: usage by max, counts and throughput by sum, hit rate by mean.
    """
    msg = line.msg
    vals: dict[str, float] = {}
    v0_swap = "Swapped" in msg
    for part in msg.split(", "):
        name, sep, rest = part.rpartition(": ")
        if not sep:
            continue
        if ": " in name:  # 'Engine 000: Avg prompt throughput'
            name = name[name.rfind(": ") + 2:]
        if name not in _STATS_NAMES:
            continue
        try:
            x = float(rest.split(" ", 1)[0].rstrip("%."))
        except ValueError:
            continue
        if not math.isfinite(x) or x < 0 or x > MAX_LOG_VALUE \
                or (name.endswith(("KV cache usage", "hit rate")) and x > 100.0 + 1e-6):
            c._out_of_domain += 1  # a negative count, or a percentage above 100: not a value vLLM prints
            dropped = c.bundle.__dict__.setdefault("dropped_values", {})
            key = "kv_cache_usage" if name.endswith("KV cache usage") else _STATS_SIGNAL[name][0]
            dropped[key] = dropped.get(key, 0) + 1
            continue
        if name.endswith("KV cache usage"):
            if name.startswith("CPU") and v0_swap:
                vals["cpu_cache_usage"] = x / 100.0  # V0 swap pool; the GPU pool is the other part
            else:
                vals.setdefault("kv_cache_usage", x / 100.0)
        else:
            signal, scale = _STATS_SIGNAL[name]
            vals[signal] = x * scale
    if not vals:
        return
    if "Pending:" in msg and not c._v0_preempted and c._run_forms and "num_preemptions" not in vals:
        # V0 warns at the 1st, 51st, ... preemption (core/scheduler.py 0.4-0.10): in a run whose start is in the log
        # and that printed no such warning, nothing was preempted up to here — seen, not assumed
        vals["num_preemptions"] = 0.0
    me = _STATS_ENGINE.search(msg)
    engine = (me.group(1) or "agg") if me else ""
    if "Pending:" in msg:
        c.formats.add("V0 stats line 'Pending' (0.4-0.10)")
    elif engine:
        c.formats.add("stats line 'Engine NNN:' (0.8+)")
    if "Preemptions:" in msg:
        c.formats.add("stats line 'Preemptions' (0.16+)")
    if engine:
        c._engines.add(engine)
    c._step.clear()  # serving: no start-up phase marker applies any more
    c._run_served = True
    pending = c._stats_pending
    if pending and (pending[0][0].t != line.t or not engine or engine in c._pending_engines):
        c._flush_stats()
    c._stats_pending.append((line, vals))
    c._pending_engines.add(engine)
    if not engine:
        c._flush_stats()


def _v0_prefix_rate(c: LogCollector, m: re.Match, line: Line) -> None:
    """V0 separate record 'Prefix cache hit rate: GPU: x%, CPU: y%' (cumulative since start)."""
    x = float(m.group(1))
    if not 0.0 <= x <= 100.0:  # the regex admits digits and dots only; a percentage above 100 is not vLLM's
        c._out_of_domain += 1
        return
    c._add("prefix_cache_hit_rate_cumulative", x / 100.0, line)


_PREEMPT_COUNT = re.compile(r"total_(?:num_)?cumulative_preemption(?:_cnt)?=(\d+)")


def _preempt(c: LogCollector, m: re.Match, line: Line) -> None:
    """V0 WARNING, logged for the 1st, 51st, 101st ... preemption (§2.6); n is cumulative
    ('total_num_cumulative_preemption=N' 0.4-0.10, 'total_cumulative_preemption_cnt=N' in the 0.4.0 wording); a line
    cut before the count is still a preemption (the count is then unknown)."""
    c._add("preemption_warning", 1, line, text=m.group(1))
    c._v0_preempted = True
    mm = _PREEMPT_COUNT.search(line.msg, m.end())
    if mm:
        n = float(mm.group(1))
        if n >= 1:
            # the count printed includes this preemption (V0 logs num_cumulative_preemption + 1 before adding it,
            # core/scheduler.py 0.4-0.10): the counter stood at n - 1 just before, so one warning is an increase
            c._add("num_preemptions", n - 1, line)
        c._add("num_preemptions", n, line)


def _weights(c: LogCollector, m: re.Match, line: Line) -> None:
    """W1 'Loading model weights took X GB' (GiB despite the name) / W2, W3 'Model loading took X GiB'."""
    msg = line.msg
    if "Tried to allocate" in msg or "out of memory" in msg:
        # an OOM text quoting the weights ('(Model loading took 13.31 GiB)'): the weights loaded in this start-up;
        # no new start-up segment or run, the OOM handler reads the rest
        c._add("weights_bytes", float(m.group(1)) * GIB, line)
        if c._step.get(line.proc or "main", "") in ("", "load"):
            _set_step(c, line, "profile")
        return
    c._run_marker(line, "weights")
    c._new_segment(line, "weights")
    _set_step(c, line, "profile")  # the weights loaded: the profile run is the next step
    c.formats.add(("weights line W1 'GiB' (0.8-0.9, XPU)" if "GiB" in msg[m.start():m.end()] else
                   "weights line W1 'GB' (0.4-0.7)") if "weights took" in msg else
                  "weights line W3 'GiB memory and' (0.16+)" if "GiB memory and" in msg else
                  "weights line W2 'GiB and' (0.8-0.11)")
    c._add("weights_bytes", float(m.group(1)) * GIB, line)
    c._add("startup_segments", 1, line, text="weights_loaded")


def _m1(c: LogCollector, m: re.Match, line: Line) -> None:
    """M1 'Memory profiling results: total_gpu_memory=..GiB ... kv_cache_size=..GiB gpu_memory_utilization=..'."""
    kv = dict(re.findall(r"(\w+)=(-?[\d.]+)(?:Gi?B|GIB)?", line.msg[m.start():]))
    mapping = {"total_gpu_memory": "gpu_total_bytes", "non_torch_memory": "non_torch_bytes",
               "kv_cache_size": "kv_cache_memory_bytes", "peak_torch_memory": "peak_torch_memory_bytes"}
    for key, signal in mapping.items():
        if key in kv:
            c._add(signal, float(kv[key]) * GIB, line)
    if "gpu_memory_utilization" in kv:
        c._add("gpu_memory_utilization", float(kv["gpu_memory_utilization"]), line)


def _m2_budget(c: LogCollector, m: re.Match, line: Line) -> None:
    """M2 'total_gpu_memory (T GiB) x gpu_memory_utilization (U) = B GiB' (V0 0.6.6-0.10)."""
    c._add("gpu_total_bytes", float(m.group(1)) * GIB, line)
    c._add("gpu_memory_utilization", float(m.group(2)), line)
    c._add("gpu_budget_bytes", float(m.group(3)) * GIB, line)


def _m2_split(c: LogCollector, m: re.Match, line: Line) -> None:
    """M2 'model weights take W GiB; non_torch_memory takes N GiB; PyTorch activation peak memory takes A GiB;
    the rest of the memory reserved for KV Cache is K GiB.'"""
    c._add("weights_bytes", float(m.group(1)) * GIB, line)
    c._add("non_torch_bytes", float(m.group(2)) * GIB, line)
    c._add("activation_peak_bytes", float(m.group(3)) * GIB, line)
    c._add("kv_cache_memory_bytes", float(m.group(4)) * GIB, line)


def _m3(c: LogCollector, m: re.Match, line: Line) -> None:
    """M3 'Available KV cache memory: X GiB' (V1 0.9+)."""
    _sized(c, line)
    c._add("kv_cache_memory_bytes", float(m.group(1)) * GIB, line)


def _m6(c: LogCollector, m: re.Match, line: Line) -> None:
    """M6 'Free memory on device (F/T GiB) on startup. Desired GPU memory utilization is (U, R GiB). Actual usage
    is W GiB for weight, A GiB for peak activation, N GiB for non-torch memory, and G GiB for CUDAGraph memory.'"""
    g = m.groupdict()
    c._add("gpu_free_at_startup_bytes", float(g["free"]) * GIB, line)
    c._add("gpu_total_bytes", float(g["total"]) * GIB, line)
    c._add("gpu_memory_utilization", float(g["util"]), line)
    c._add("gpu_budget_bytes", float(g["req"]) * GIB, line)
    rest = line.msg[m.end():]
    for pat, signal in ((r"([\d.]+) GiB for weight", "weights_bytes"),
                        (r"([\d.]+) GiB for consumed memory", "weights_bytes"),
                        (r"([\d.]+) GiB for peak activation", "activation_peak_bytes"),
                        (r"([\d.]+) GiB for non-torch memory", "non_torch_bytes"),
                        (r"([\d.]+) GiB for CUDAGraph memory", "cudagraph_bytes"),
                        (r"Current kv cache memory in use is ([\d.]+) GiB", "kv_cache_memory_bytes"),
                        (r"Current kv cache memory in use is (\d+) bytes", "kv_cache_memory_bytes")):
        mm = re.search(pat, rest)
        if mm:  # GiB from 0.11; 0.10 prints the KV memory as int bytes ('... in use is N bytes.')
            c._add(signal, float(mm.group(1)) * (1 if pat.endswith("bytes") else GIB), line)
    mm = re.search(r"--kv-cache-memory=(\d+)`?(?: \([\d.]+ GiB\))? to fit into requested memory", rest)
    if mm:  # bytes, as vLLM prints them (0.10 without the '(X GiB)' after)
        c._add("kv_cache_memory_suggested_bytes", float(mm.group(1)), line)


def _blocks(c: LogCollector, m: re.Match, line: Line) -> None:
    """K1/K2/K3 '# GPU blocks: N, # CPU blocks: M' (V0; '# cuda blocks' 0.7-0.10)."""
    _sized(c, line)
    c._add("num_gpu_blocks", float(m.group(1)), line)
    if m.group(2) is not None:
        c._add("num_cpu_blocks", float(m.group(2)), line)


def _k4(c: LogCollector, m: re.Match, line: Line) -> None:
    """K4/K6 'GPU KV cache size: N tokens' (V1 0.8+)."""
    if "Maximum concurrency" in line.msg:
        c.formats.add("merged KV size + concurrency line K6 (0.33+)")
    _sized(c, line)
    c._add("kv_cache_size_tokens", float(m.group(1).replace(",", "")), line)


def _k5(c: LogCollector, m: re.Match, line: Line) -> None:
    """K5/K6 'Maximum concurrency for L tokens per request: X x'."""
    c._add("max_model_len", float(m.group(1).replace(",", "")), line)
    c._add("max_concurrency", float(m.group(2)), line)


def _k10(c: LogCollector, m: re.Match, line: Line) -> None:
    """K10 'Setting attention block size to N tokens to ensure that attention page size is >= mamba page size.'"""
    c._add("block_size", float(m.group(1)), line)


def _k11(c: LogCollector, m: re.Match, line: Line) -> None:
    """K11 '... vllm cache_config_info with initialization after num_gpu_blocks is: N' (sum over DP engines)."""
    c._add("num_gpu_blocks", float(m.group(1)), line)


def _k12(c: LogCollector, m: re.Match, line: Line) -> None:
    """K12 'Graph capturing finished in S secs, took G GiB'."""
    _set_step(c, line, "")
    c._add("cudagraph_bytes", float(m.group(1)) * GIB, line)


def _m9(c: LogCollector, m: re.Match, line: Line) -> None:
    """M9 'Estimated CUDA graph memory: G GiB total' (0.24+)."""
    c._add("cudagraph_estimate_bytes", float(m.group(1)) * GIB, line)


def _e1(c: LogCollector, m: re.Match, line: Line) -> None:
    """E1 'No available memory for the cache blocks.' (all versions)."""
    c._add("kv_capacity_error", 1, line, text="no_kv_memory")


def _e2a(c: LogCollector, m: re.Match, line: Line) -> None:
    """E2a "The model's max seq len (L) is larger than the maximum number of tokens that can be stored in KV
    cache (N)." (V0 0.4-0.10)."""
    c._add("kv_capacity_error", 1, line, text="max_model_len_exceeds_pool")
    c._add("max_model_len", float(m.group(1)), line)
    c._add("kv_cache_size_tokens", float(m.group(2)), line)


def _e2bcd(c: LogCollector, m: re.Match, line: Line) -> None:
    """E2b/c/d 'To serve at least one request with the model's max seq len (L), (N GiB KV cache is needed, which is
    larger than the available KV cache memory (A GiB).' (V1 0.7+)."""
    c._add("kv_capacity_error", 1, line, text="max_model_len_exceeds_pool")
    c._add("max_model_len", float(m.group(1)), line)
    c._add("kv_cache_memory_bytes", float(m.group(3)) * GIB, line)


def _e3(c: LogCollector, m: re.Match, line: Line) -> None:
    """E3 'Cannot auto-fit max_model_len: not enough GPU memory available to serve even a single token.' (0.16+)."""
    c._add("kv_capacity_error", 1, line, text="no_kv_memory")


def _mamba_blocks(c: LogCollector, m: re.Match, line: Line) -> None:
    """'max_num_seqs (S) exceeds available Mamba cache blocks (B).' (hybrid models, vLLM PR 38270, 2026)."""
    c._add("kv_capacity_error", 1, line, text="max_num_seqs_exceeds_mamba_blocks")
    c._add("max_num_seqs", float(m.group(1)), line)
    c._add("mamba_cache_blocks", float(m.group(2)), line)


def _e6(c: LogCollector, m: re.Match, line: Line) -> None:
    """E6 'CUDA out of memory occurred when warming up sampler with N dummy requests.' (V1 0.8+)."""
    c._add("sampler_warmup_oom", 1, line)


def _oom_others(c: LogCollector, m: re.Match, line: Line) -> None:
    """'Process N has X memory in use' entries of a PyTorch OOM text (§2.7): the other processes on that GPU.

    With 'this process has X memory in use' in the text every listed process is another one; without it the largest
    entry is the failing process itself (torch lists it too) and the rest are others. Adds
    ``oom_other_processes_bytes`` (sum) and ``oom_other_processes_count`` (issue 6)."""
    sizes = [size_bytes(n, u) for n, u in re.findall(r"Process \d+ has ([\d.]+) (GiB|MiB|KiB|bytes) memory in use",
                                                     line.msg)]
    if "this process has" not in line.msg and sizes:
        sizes.remove(max(sizes))
    c._add("oom_other_processes_bytes", float(sum(sizes)), line)
    c._add("oom_other_processes_count", float(len(sizes)), line)


def _mm_warning(c: LogCollector, m: re.Match, line: Line) -> None:
    """0.9+ WARNING 'The sequence length used for profiling (...) is too short to hold the multi-modal embeddings in
    the worst case (N tokens in total, ...)' (``multimodal/profiling.py``); value = N (issue 6)."""
    c._add("mm_profile_warning", float(m.group(1)), line)


def _mm_run(c: LogCollector, m: re.Match, line: Line) -> None:
    """V0 'Starting profile run for multi-modal models.' (``worker/enc_dec_model_runner.py``) (issue 6)."""
    c._add("mm_profile_run", 1, line)


def _traceback(c: LogCollector, m: re.Match, line: Line) -> None:
    """'Traceback (most recent call last):' — an uncaught exception (issue 6: a start-up that died without an OOM
    text)."""
    c._add("python_traceback", 1, line)


def _w4(c: LogCollector, m: re.Match, line: Line) -> None:
    """W4 'Failed to load model - not enough GPU memory.' (0.16+)."""
    c._add("weights_load_failed", 1, line)


_WORKER_METHOD = re.compile(r"while processing method (\w+)")
MAX_FRAME_LINE = 16384
# the source text glued after a frame: its outermost call ('x = self.model_runner.profile_cudagraph_memory()')
_GLUED_CALL = re.compile(r"\s+(?:[\w.\[\], ]+\s*=\s*)?(?:return\s+|await\s+)?(?:[\w\[\]]+\.)*(\w+)\(")
# an exception line glued after a frame's source text
_GLUED_EXC = re.compile(r"(?:^|[\s.:])((?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception):\s)")
_LOADED_IN_TEXT = re.compile(r"Model loading took ([\d.]+) ?GiB")


def _oom(c: LogCollector, m: re.Match, line: Line) -> None:
    """PyTorch 'CUDA out of memory. Tried to allocate X. GPU i has a total capacity of T of which F is free. ...'
    (torch 2.1+ wording; 'capacty' typo in 2.1), §2.7. The phase comes from the traceback frames seen in the same
    process just before (or, without frames, from what the log shows happened before the OOM)."""
    msg = line.msg
    tried = size_bytes(m.group(1), m.group(2))
    total = size_bytes(m.group(3), m.group(4))
    free = size_bytes(m.group(5), m.group(6))
    key = line.proc or "main"
    phase = _phase_for(c, line)
    c._add("gpu_total_bytes", total, line)
    mm = re.search(r"Of the allocated memory ([\d.]+) (\w+) is allocated by PyTorch", msg)
    torch_alloc = size_bytes(mm.group(1), mm.group(2)) if mm else None
    if torch_alloc is not None:
        c._add("oom_torch_allocated_bytes", torch_alloc, line)
    c._add("oom_free_bytes", free, line)
    mm = re.search(r"this process has ([\d.]+) (\w+) memory in use", msg)
    if mm:
        c._add("oom_process_in_use_bytes", size_bytes(mm.group(1), mm.group(2)), line)
    if not phase:
        phase = c._step.get(key, "") or _infer_phase(c, torch_alloc, total)
    c._add("cuda_oom", tried, line, text=phase or "unknown")
    c._oom_line = line.lineno
    c._close_tb = True


def _frames_for(c: LogCollector, line: Line) -> list[tuple[str, str]]:
    """The open traceback frames of ``line``'s process, else the most recent group within 200 lines (frames may
    sit under another tag: a rank prefix vs none, a Ray / multiprocessing wrapper)."""
    frames = c._frames.get(line.proc or "main") or []
    if not frames and c._frames_line:
        last_key = max(c._frames_line, key=c._frames_line.get)
        if line.lineno - c._frames_line[last_key] < 200:
            frames = c._frames.get(last_key, [])
    return frames


def _phase_for(c: LogCollector, line: Line) -> str:
    """Phase of an OOM on ``line``: the traceback frames (innermost naming frame), else 'Error in model execution'
    (runtime), a V0 worker method, the last phase marker of that process (a progress bar or start-up line, see
    :data:`STEP_MARKERS`), 'sampler' in the text; ``""`` when none says. A profile-phase OOM of a multimodal model
    (architecture, multimodal args or profiling lines) is the encoder's: the profile run feeds the worst-case
    dummy images / audio through the encoder first (V1 ``gpu_model_runner.profile_run``, V0
    ``enc_dec_model_runner.profile_run``)."""
    msg = line.msg
    key = line.proc or "main"
    frames = _frames_for(c, line)
    phase = phase_of(frames)
    marker = c._step.get(key, "") or (c._step.get(c._last_step_key, "") if c._last_step_key else "")
    if phase and marker and marker != phase and generic_only(frames):
        phase = marker  # '_dummy_run' alone: the last marker (capture bar, sizing line) says which step ran it
    if not phase and "Error in model execution" in msg:
        phase = "runtime"
    mm = _WORKER_METHOD.search(msg)
    if not phase and mm:  # V0 'Exception in worker ... while processing method determine_num_available_blocks'
        phase = phase_of([("", mm.group(1))])
    if not phase:
        phase = marker
    if phase == "load" and _LOADED_IN_TEXT.search(msg):
        phase = "profile"  # the OOM text itself says the weights were loaded ('(Model loading took 13.31 GiB)')
    if phase == "profile" and (c._segment_signals & {"mm_profile_run", "mm_profile_warning"} or
                               (c.multimodal and not c._mm_profile_skipped)):
        phase = "encoder"  # the profile run of a multimodal model runs the encoder on dummy images first
    if not phase and "sampler" in msg.lower():
        phase = "sampler"
    if not phase and c._segment_signals & {"kv_cache_usage", "num_requests_running", "prompt_throughput"}:
        phase = "runtime"  # no frame, no marker, but this run's stats lines show it serving: an OOM while serving
    return phase


def _infer_phase(c: LogCollector, torch_alloc: float | None, total: float) -> str:
    """No traceback frames: if nothing in this start-up segment shows the weights loaded, the KV pool sized or a
    request served, and PyTorch holds ≥ 90 % of the GPU, the only large allocation so far is the weights."""
    later = {"weights_bytes", "kv_cache_memory_bytes", "num_gpu_blocks", "kv_cache_size_tokens",
             "kv_cache_usage", "num_requests_running", "activation_peak_bytes", "peak_torch_memory_bytes",
             "cudagraph_bytes"}
    if c._segment_signals & later:
        return ""
    if torch_alloc is not None and total > 0 and torch_alloc / total >= 0.90:
        return "load"
    return ""


def _oom_old(c: LogCollector, m: re.Match, line: Line) -> None:
    """torch ≤ 2.0 'CUDA out of memory. Tried to allocate X (GPU i; T total capacity; A already allocated; F free;'."""
    total = size_bytes(m.group(3), m.group(4))
    c._add("gpu_total_bytes", total, line)
    alloc = size_bytes(m.group(5), m.group(6))
    c._add("oom_torch_allocated_bytes", alloc, line)
    c._add("oom_free_bytes", size_bytes(m.group(7), m.group(8)), line)
    key = line.proc or "main"
    phase = _phase_for(c, line) or _infer_phase(c, alloc, total)
    c._add("cuda_oom", size_bytes(m.group(1), m.group(2)), line, text=phase or "unknown")
    c._oom_line = line.lineno
    c._close_tb = True


def _version(c: LogCollector, m: re.Match, line: Line) -> None:
    """Version banner (0.33 'version 0.33.0'), 'vLLM API server version X', 'Initializing a V0 LLM engine (vX)'."""
    c._run_marker(line, "engine" if "LLM engine" in m.group(0) else "banner")
    c.version = _bounded(m.group(1))
    c._add("vllm_version", None, line, text=c.version)
    mm = re.search(r"Initializing an? (V[01]) LLM engine", line.msg)
    if mm:
        c._add("engine_generation", None, line, text=mm.group(1))
    c._new_segment(line, "version")


def _args(c: LogCollector, m: re.Match, line: Line) -> None:
    """Engine-config / args Namespace / non-default args lines: a few settings kvdiag needs."""
    msg = line.msg
    if "LLM engine" in msg and "with config" in msg:
        c._run_marker(line, "config")  # 'Initializing an LLM engine with config: ...' (0.1-0.3 print no version)
    pats = {
        "max_model_len": r"\bmax_(?:model|seq)_len['\"]?\s*[=:]\s*(\d+)",
        "gpu_memory_utilization": r"\bgpu_memory_utilization['\"]?\s*[=:]\s*([\d.]+)",
        "block_size": r"\bblock_size['\"]?\s*[=:]\s*(\d+)",
        "tensor_parallel_size": r"\btensor_parallel_size['\"]?\s*[=:]\s*(\d+)",
        "max_num_seqs": r"\bmax_num_seqs['\"]?\s*[=:]\s*(\d+)",
        "max_num_batched_tokens": r"\bmax_num_batched_tokens['\"]?\s*[=:]\s*(\d+)",
    }
    for signal, pat in pats.items():
        mm = re.search(pat, msg)
        if mm:
            c._add(signal, float(mm.group(1)), line)
    mm = re.search(r"\bkv_cache_dtype['\"]?\s*[=:]\s*'?([\w]+)", msg)
    if mm:
        c._add("cache_dtype", None, line, text=mm.group(1))
    nd = msg.find("non-default args: ")
    if nd >= 0:  # the whole dict as printed (entrypoints/utils.py 0.10+), for 'kvdiag diff'; secrets are redacted
        c._add("engine_args", None, line, text=msg[nd + len("non-default args: "):][:ENGINE_ARGS_CHARS])
    mm = re.search(r"\benable_prefix_caching['\"]?\s*[=:]\s*(True|False)", msg)
    if mm:
        c._add("enable_prefix_caching", 1.0 if mm.group(1) == "True" else 0.0, line)
    _capacity_args(c, msg, line)
    _identity(c, msg, line)


# Capacity-model facts of the same lines (issue 16): 'non-default args: {..., 'speculative_config': {'method':
# 'mtp', 'num_speculative_tokens': 2}, 'decode_context_parallel_size': 2, 'mamba_ssm_cache_dtype': 'float32'}'
# (entrypoints/utils.py 0.10+) and the engine config line's 'speculative_config=SpeculativeConfig(method='eagle',
# ..., num_spec_tokens=3)' (v1/engine/core.py @ v0.11.0, SpeculativeConfig.__repr__).
_CAPACITY_ARGS = (
    ("speculative_method", re.compile(r"""\bspeculative_config['"]?\s*[=:]\s*(?:SpeculativeConfig\(|\{)[^)}]*?"""
                                      r"""\bmethod['"]?\s*[=:]\s*['"](\w+)['"]"""), True),
    ("num_speculative_tokens", re.compile(r"""\bnum_spec(?:ulative)?_tokens['"]?\s*[=:]\s*(\d+)"""), False),
    ("decode_context_parallel_size", re.compile(r"""\bdecode_context_parallel_size['"]?\s*[=:]\s*(\d+)"""), False),
    ("pipeline_parallel_size", re.compile(r"""\bpipeline_parallel_size['"]?\s*[=:]\s*(\d+)"""), False),
    ("mamba_ssm_cache_dtype", re.compile(r"""\bmamba_ssm_cache_dtype['"]?\s*[=:]\s*['"]?(\w+)"""), True),
)


def _capacity_args(c: LogCollector, msg: str, line: Line) -> None:
    """Speculative config, decode context parallel, pipeline parallel and SSM cache dtype of an args line."""
    for signal, pat, is_text in _CAPACITY_ARGS:
        mm = pat.search(msg)
        if mm:
            if is_text:
                c._add(signal, None, line, text=_bounded(mm.group(1)))
            else:
                c._add(signal, float(mm.group(1)), line)


# model identity in the engine config line ('Initializing a V1 LLM engine (v0.10.2) with config: model='Qwen/…',
# …, quantization=awq, …', v1/engine/core.py; V0 engine/llm_engine.py), the 'non-default args: {'model': …}' dict
# (entrypoints/utils.py 0.10+) and 'args: Namespace(model=…)' (entrypoints/openai/cli_args 0.4-0.9)
_MODEL_ARG = re.compile(r"""(?:\bmodel=|['"]model['"]:\s*)(['"])([^'"\s]+)\1""")
_QUANT_ARG = re.compile(r"""\bquantization(?:=|['"]:\s*)['"]?([\w-]+)""")
_MM_ARGS = re.compile(r"\b(?:limit_mm_per_prompt|mm_processor_kwargs|mm_encoder_tp_mode|mm_processor_cache_gb|"
                      r"media_io_kwargs)\b['\"]?\s*[=:]\s*(?!None\b|\{\}|0\b)")
_ARCH_ARG = re.compile(r"""\barchitectures['"]?\s*[=:]\s*\[['"](\w+)['"]""")


def _identity(c: LogCollector, msg: str, line: Line) -> None:
    """Model name, quantisation, architecture and multimodal args of an engine-config / args line."""
    mm = _MODEL_ARG.search(msg)
    if mm:
        _model_name(c, line, mm.group(2))
    mm = _QUANT_ARG.search(msg)
    if mm and mm.group(1) not in ("None", "null"):
        c._add("quantization", None, line, text=_bounded(mm.group(1)))
    mm = _ARCH_ARG.search(msg)
    if mm:
        c._add("model_architecture", None, line, text=_bounded(mm.group(1)))
        _set_multimodal(c, line, is_multimodal_architecture(mm.group(1)))
    if _MM_ARGS.search(msg):
        _set_multimodal(c, line, True)


ENGINE_ARGS_CHARS = 4000
"""At most this many characters of a 'non-default args:' dict kept as the ``engine_args`` text."""


def _chunked_prefill(c: LogCollector, m: re.Match, line: Line) -> None:
    """'Chunked prefill is enabled with max_num_batched_tokens=N.' (config/scheduler.py 0.33; config.py before)."""
    c._add("max_num_batched_tokens", float(m.group(1)), line)


def _max_len(c: LogCollector, m: re.Match, line: Line) -> None:
    """'Using max model len N' (V1 config)."""
    c._add("max_model_len", float(m.group(1)), line)


MEASURED = "operator's measurement"
"""Source note of the values read from an operator's write-up next to the log (so a report never shows them as if
vLLM had printed them, e.g. a measured pool beside the pool of a vLLM capacity line)."""


def _measure_usage(c: LogCollector, m: re.Match, line: Line) -> None:
    """A reported measurement 'GPU KV cache usage 44.6% (~297 of 665 blocks)' (usage with the blocks behind it)."""
    c._add("kv_cache_usage", float(m.group(1)) / 100.0, line, note=MEASURED)
    c._add("num_blocks_used", float(m.group(2)), line, note=MEASURED)
    c._add("num_gpu_blocks", float(m.group(3)), line, note=MEASURED)


def _measure_pool(c: LogCollector, m: re.Match, line: Line) -> None:
    """A reported measurement 'pool: 1,096,153 tokens ... / 665 GPU blocks'."""
    c._add("kv_cache_size_tokens", float(m.group(1).replace(",", "")), line, note=MEASURED)
    if m.group(2):
        c._add("num_gpu_blocks", float(m.group(2).replace(",", "")), line, note=MEASURED)


def _measure_request(c: LogCollector, m: re.Match, line: Line) -> None:
    """A reported measurement 'one ~36k-token request: ...' / '3 ~8k-token requests: ...' (running set and its
    tokens)."""
    words = {"one": 1, "two": 2, "three": 3, "four": 4, "a": 1, "single": 1}
    n = words.get(m.group(1).lower()) or int(m.group(1))
    per = float(m.group(2).replace(",", "")) * (1000 if m.group(3) else 1)
    c._add("num_requests_running", n, line, note=MEASURED)
    c._add("context_tokens", n * per, line, note=MEASURED)


def _k7(c: LogCollector, m: re.Match, line: Line) -> None:
    """K7 'Overriding num_gpu_blocks=N with num_gpu_blocks_override=M' (V1 0.7+): the pool the user forced."""
    c._add("num_gpu_blocks", float(m.group(2)), line)


def _k9(c: LogCollector, m: re.Match, line: Line) -> None:
    """K9 'Auto-fit max_model_len: reduced from A to B to fit in available KV cache memory (K GiB GPU)' or
    '... full model context length N fits in available KV cache memory (K GiB GPU)' (0.16+)."""
    g = m.groupdict()
    c._add("max_model_len", float(g["reduced"] or g["full"]), line)
    if g["kv"]:  # 0.16-0.24 '(K GiB available for KV cache)' on reduce, nothing on full fit; 0.33 '(K GiB GPU)'
        c._add("kv_cache_memory_bytes", float(g["kv"]) * GIB, line)
    if g["reduced"]:
        c._add("max_model_len_autofit", float(g["reduced"]), line, text=f"reduced from {g['from']}")


def _k13(c: LogCollector, m: re.Match, line: Line) -> None:
    """K13 V0 'Capturing the model for CUDA graphs' (0.4) / 'Capturing cudagraphs for decoding' (0.6-0.10); V1
    'Capturing CUDA graphs (...)' progress: CUDA-graph capture began (an OOM right after is a capture OOM)."""
    _set_step(c, line, "cudagraph")


def _m4(c: LogCollector, m: re.Match, line: Line) -> None:
    """M4 (DEBUG, V1 0.9+) 'Memory profiling takes S seconds. Total non KV cache memory: X GiB; torch peak memory
    increase: A GiB; non-torch forward increase memory: N GiB; weights memory: W GiB.' (0.33: 'total consumed (from
    mem_get_info): C GiB' instead of the non-torch part)."""
    rest = line.msg[m.start():]
    for pat, signal in ((r"torch peak memory increase: (-?[\d.]+) ?GiB", "activation_peak_bytes"),
                        (r"non-torch forward increase memory: (-?[\d.]+) ?GiB", "non_torch_bytes"),
                        (r"weights memory: (-?[\d.]+) ?GiB", "weights_bytes")):
        mm = re.search(pat, rest)
        if mm:
            c._add(signal, float(mm.group(1)) * GIB, line)


def _m5(c: LogCollector, m: re.Match, line: Line) -> None:
    """M5 (DEBUG, 0.11+) 'Initial free memory: F GiB; Requested memory: U (util), R GiB'."""
    c._add("gpu_free_at_startup_bytes", float(m.group(1)) * GIB, line)
    c._add("gpu_memory_utilization", float(m.group(2)), line)
    c._add("gpu_budget_bytes", float(m.group(3)) * GIB, line)


def _m7(c: LogCollector, m: re.Match, line: Line) -> None:
    """M7 'Initial free memory F GiB, reserved K GiB memory for KV Cache as specified by kv_cache_memory_bytes
    config and skipped memory profiling.' (--kv-cache-memory set; 0.10 prints 'reserved K.KKGiB memory' without the
    space, ``worker/worker.py`` and ``v1/worker/gpu_worker.py`` @ 0.10.2)."""
    c._add("gpu_free_at_startup_bytes", float(m.group(1)) * GIB, line)
    c._add("kv_cache_memory_bytes", float(m.group(2)) * GIB, line)


def _m9_pool(c: LogCollector, m: re.Match, line: Line) -> None:
    """M9 'CUDA graph pool memory: A GiB (actual), E GiB (estimated), difference: D GiB (P%).' (0.24+)."""
    c._add("cudagraph_bytes", float(m.group(1)) * GIB, line)
    c._add("cudagraph_estimate_bytes", float(m.group(2)) * GIB, line)


def _m10(c: LogCollector, m: re.Match, line: Line) -> None:
    """M10 'init engine (profile, create kv cache, warmup model) took S seconds' (0.6+; 0.24+ '... took S s'):
    start-up finished."""
    c._step.clear()
    c._add("startup_seconds", float(m.group(1)), line)


def _e0(c: LogCollector, m: re.Match, line: Line) -> None:
    """E0 'EngineCore failed to start.' / 'Engine core initialization failed. See root cause above.' (V1 0.8+):
    a wrapper; the cause is in the EngineCore lines above it."""
    c._add("engine_start_failed", 1, line)


def _failing_request(c: LogCollector, m: re.Match, line: Line) -> None:
    """V0 'Failing the request R because there's not enough kv cache blocks to run the entire sequence.'"""
    c._add("request_rejected", 1, line, text="not_enough_kv_blocks")


def _prompt_too_long(c: LogCollector, m: re.Match, line: Line) -> None:
    """V0 'Input prompt (N tokens) [+ lookahead slots (K)] is too long and exceeds limit of L' / '... exceeds the
    capacity of block_manager'."""
    c._add("request_rejected", float(m.group(1)), line,
           text="prompt_exceeds_pool" if "block_manager" in line.msg else "prompt_exceeds_limit")


def _worker_method(c: LogCollector, m: re.Match, line: Line) -> None:
    """V0 'Exception in worker VllmWorkerProcess while processing method M' (multiproc_worker_utils.py, 0.5-0.10):
    the start-up step the worker failed in (``determine_num_available_blocks`` = profiling) for a later OOM line."""
    phase = phase_of([("", m.group(1))])
    if phase:
        c._step[line.proc or "main"] = phase


def _context_limit(c: LogCollector, m: re.Match, line: Line) -> None:
    """OpenAI server 400 error "This model's maximum context length is N tokens ..." (all versions): N is
    max_model_len."""
    c._add("max_model_len", float(m.group(1)), line)


def _stats_disabled(c: LogCollector, m: re.Match, line: Line) -> None:
    """'AsyncLLM created with api_server_count more than 1; disabling stats logging' (0.10+): no stats lines."""
    c._add("stats_logging_disabled", 1, line)


# ---- issue 12: vLLM's own start-up checks in every version, CUDA runtime errors, phase markers, model identity ----
def _e4_budget(c: LogCollector, m: re.Match, line: Line) -> None:
    """E4 and its 0.33 variants (``v1/worker/gpu_worker.py`` @ 0.9-0.11, ``v1/worker/utils.py`` @ 0.16-0.33,
    ValueError): 'Free memory on device [D ](F/T GiB) on startup is less than desired GPU memory utilization (U, R
    GiB).' / '... is less than the engine's budget after excluding external process's weights (U, R GiB).' (0.33) /
    'Externally held weights on device D (W/T GiB) exceed the desired GPU memory utilization (U, R GiB).' (0.33):
    other processes hold the memory vLLM planned to use."""
    g = m.groupdict()
    c._add("free_memory_below_request", 1, line, text="external_weights" if g.get("ext") else "free_below_budget")
    if g.get("free"):
        c._add("gpu_free_at_startup_bytes", float(g["free"]) * GIB, line)
    c._add("gpu_total_bytes", float(g["total"]) * GIB, line)
    if g.get("util"):
        c._add("gpu_memory_utilization", float(g["util"]), line)
        c._add("gpu_budget_bytes", float(g["req"]) * GIB, line)


def _e5_any(c: LogCollector, m: re.Match, line: Line) -> None:
    """E5 in every wording (AssertionError): 'Error in memory profiling. Initial free memory A[ GiB], current free
    memory B[ GiB]. ...' (``worker/worker.py`` 0.4-0.6, ``v1/worker/gpu_worker.py`` 0.7-0.33), '... Initial used
    memory A, currently used memory B. ...' (``worker/worker.py`` @ 0.8.5), '... This happens when the GPU memory
    was not properly cleaned up ...' (no numbers, ``worker/worker.py`` @ 0.6.6); and the 0.33 WARNING 'Free memory
    grew by G GiB during profiling (initial I GiB, current C GiB).' (``v1/worker/gpu_worker.py`` @ 0.33.0): another
    process released memory while vLLM profiled — not a KV problem."""
    c._add("memory_profiling_error", 1, line, text="free_memory_grew" if m.group(0).startswith("Free") else "assert")


def _blocks_exhausted(c: LogCollector, m: re.Match, line: Line) -> None:
    """V0 runtime 'Out of memory! No free blocks are available.' (``core/block_manager_v1.py``, ValueError, 0.4-0.6)
    / 'No usable cache memory left' (``core/evictor*.py``, ValueError, 0.4-0.10): the block manager had no block."""
    c._add("kv_blocks_exhausted", 1, line, text=m.group(0))


def _long_context(c: LogCollector, m: re.Match, line: Line) -> None:
    """WARNING 'The model has a long context length (L). This may cause OOM during the initial memory profiling phase,
    or result in low performance due to small KV cache size. Consider setting --max-model-len to a smaller value.'
    (``engine/arg_utils.py`` 0.6-0.8, printed 'causeOOM' in 0.8.5): L is the max_model_len in use."""
    c._add("max_model_len", float(m.group(1)), line)


_DIGITS = re.compile(r"\d+")


# a traceback's source line ('    except torch.OutOfMemoryError as e:'), never an exception line
_SOURCE_LINE = re.compile(r"^\s*(?:except|raise|if|elif|return|assert|with|for|while|try|def|class|catch)\b")
_CUDA_ERR_TAIL = re.compile(r"\s*(?:CUDA kernel errors|For debugging|Compile with|Search for|\\n|['\"]|$).*")
_OOM_ANY_SIZE = re.compile(r"Tried to allocate ([\d.]+) ?(GiB|MiB|KiB|bytes|GB|MB)")


def _oom_other_form(c: LogCollector, m: re.Match, line: Line) -> None:
    """An OOM in a form other than PyTorch's full allocator text (which ``oom``/``oom_old`` read): the CUDA runtime's
    'CUDA error: out of memory' (c10 ``C10_CUDA_CHECK``, often wrapped in ``RuntimeError: Worker failed with error
    '...'`` (V1 ``v1/executor/multiproc_executor.py``), a Ray ``RayTaskError(...)`` or a V0 multiprocessing worker
    exception), ``CUBLAS_STATUS_ALLOC_FAILED``, ``cudaErrorMemoryAllocation``, or an exception line cut before its
    numbers ('torch.OutOfMemoryError: Error in model executi…', 'CUDA out of memory. Tried to allocate 2.00 GiB. GPU
    0 has a tot…'). Value = bytes tried when printed (else unknown); the phase comes from the frames and markers
    (:func:`_phase_for`). One OOM per line: a line another OOM event read is skipped."""
    if c._oom_line == line.lineno or "occurred when warming up" in line.msg or _SOURCE_LINE.match(line.msg):
        return  # read by oom / oom_old, or E6 (sampler / pooler warm-up, its own event), or a traceback source line
    mm = _OOM_ANY_SIZE.search(line.msg)
    tried = size_bytes(mm.group(1), mm.group(2)) if mm else None
    phase = _phase_for(c, line)
    c._add("cuda_oom", tried, line, text=phase or "unknown")
    c._oom_line = line.lineno
    c._close_tb = True


def _cuda_error(c: LogCollector, m: re.Match, line: Line) -> None:
    """A CUDA runtime / cuBLAS / NCCL error that is not a memory problem: 'CUDA error: an illegal memory access was
    encountered', '... device-side assert triggered', '... operation not permitted when stream is capturing'
    (cudaErrorStreamCaptureUnsupported), '... misaligned address', '... no kernel image is available ...',
    'CUBLAS_STATUS_EXECUTION_FAILED', 'NCCL error: unhandled cuda error' (torch's c10 / ProcessGroupNCCL texts, any
    vLLM version). 'CUDA error: out of memory' and CUBLAS_STATUS_ALLOC_FAILED are OOMs (:func:`_oom_other_form`)."""
    if c._oom_line == line.lineno or _SOURCE_LINE.match(line.msg):
        return
    err = m.group(0)
    if err.startswith("CUDA error: "):
        err = _CUDA_ERR_TAIL.sub("", err)
        if "out of memory" in err:
            return
    if c._cuda_error_line == line.lineno:
        return
    c._cuda_error_line = line.lineno
    c._add("cuda_error", 1, line, text=err[:120])
    c._close_tb = True


# architectures that end in ForConditionalGeneration but take only text (vllm/model_executor/models/registry.py)
_TEXT_SEQ2SEQ = re.compile(r"^(?:M?Bart|T5|MT5|Marian|Pegasus|Mistral3Text)ForConditionalGeneration$")
_MM_ARCH = re.compile(r"VL|Vision|Llava|LLaVA|Omni|Audio|Whisper|Pixtral|Idefics|Mllama|InternVL|InternS1|MiniCPM[VO]|"
                      r"Phi3V|Phi4MM|Phi4Multimodal|Molmo|PaliGemma|Chameleon|Fuyu|Blip|Aria|Ultravox|Florence|"
                      r"Voxtral|Granite(?:Speech|Vision)|Kimi(?:VL|K25)|NVLM|H2OVL|Ovis|Skywork|Deepseek(?:VL|OCR)|"
                      r"Emu3|Step3VL|Glm4v|GLM4V|Keye|Tarsier|Aya(?:Vision)|SmolVLM|Lfm2Vl|Gemma3n?ForConditional")


@functools.lru_cache(maxsize=1)
def _architectures() -> dict[str, bool]:
    """``architectures.tsv``: every architecture of vLLM's model registry 0.4-0.33 → multimodal or not."""
    out = {}
    for row in (Path(__file__).with_name("architectures.tsv")).read_text().splitlines():
        if row and not row.startswith("#"):
            name, kind = row.split("\t")
            out[name] = kind == "multimodal"
    return out


def is_multimodal_architecture(arch: str) -> bool:
    """Does vLLM architecture ``arch`` take images / audio / video?

    Looked up in ``architectures.tsv`` (the keys of ``_MULTIMODAL_MODELS`` vs the text tables of
    ``vllm/model_executor/models/registry.py`` in the wheels 0.4-0.33); a name not listed there (a newer or
    out-of-tree model) is multimodal when it has a vision or audio marker (``VL``, ``Vision``, ``Llava``, ``Audio``,
    ``Omni``, ...) or ends in ``ForConditionalGeneration`` (the suffix vLLM's registry files its multimodal models
    under), except the text-only encoder-decoders (Bart, T5, ...)."""
    known = _architectures().get(arch)
    if known is not None:
        return known
    if _TEXT_SEQ2SEQ.match(arch):
        return False
    return bool(_MM_ARCH.search(arch)) or arch.endswith("ForConditionalGeneration")


# multimodal checkpoints by name (Hugging Face ids: Qwen2.5-VL-7B, Llama-3.2-11B-Vision, llava-1.5, Phi-3.5-vision,
# gemma-3n, Qwen2-Audio, Qwen2.5-Omni, pixtral, InternVL, MiniCPM-V/-o, idefics, molmo, paligemma, ...)
_MM_NAME = re.compile(r"(?i)(?:^|[-_./])(?:vl|vlm|vision|llava[\w.-]*|omni|audio|pixtral[\w.-]*|internvl[\w.-]*|"
                      r"minicpm-?[vo][\w.-]*|idefics\d*|molmo[\w.-]*|paligemma[\w.-]*|ultravox[\w.-]*|"
                      r"voxtral[\w.-]*|smolvlm[\w.-]*|qwen\d(?:\.\d)?-?vl[\w.-]*)(?=$|[-_./\d])")


def _model_name(c: LogCollector, line: Line, name: str) -> None:
    c._add("model_name", None, line, text=_bounded(name))
    if _MM_NAME.search(name):
        _set_multimodal(c, line, True)


def _set_multimodal(c: LogCollector, line: Line, value: bool) -> None:
    if value and not c.multimodal:
        c.multimodal = True
        c._add("model_multimodal", 1.0, line)
    elif not value and not c._mm_said:
        c._add("model_multimodal", 0.0, line)
    c._mm_said = True


def _architecture(c: LogCollector, m: re.Match, line: Line) -> None:
    """'Resolved architecture: X' (``config/__init__.py`` 0.10, ``config/model.py`` 0.11-0.33, INFO) and
    'architectures=[...]' / 'Architectures: [...]' forms: the model's architecture, multimodal or not."""
    arch = m.group(1)
    c._add("model_architecture", None, line, text=_bounded(arch))
    _set_multimodal(c, line, is_multimodal_architecture(arch))


def _encoder_budget(c: LogCollector, m: re.Match, line: Line) -> None:
    """V1 'Encoder cache will be initialized with a budget of N tokens, and profiled with K image items of the
    maximum feature size.' (``v1/worker/gpu_model_runner.py`` ``profile_run`` 0.8-0.33, INFO): a multimodal model
    whose encoder is being profiled now — a profile OOM right after is the encoder's."""
    _set_multimodal(c, line, True)
    _set_step(c, line, "profile")


def _mm_skip(c: LogCollector, m: re.Match, line: Line) -> None:
    """'Skipping memory profiling for multimodal encoder and encoder cache.' (V1 0.9-0.33): a multimodal model whose
    encoder is *not* profiled, so a profile OOM is not the encoder's."""
    c._mm_profile_skipped = True


def _sized(c: LogCollector, line: Line) -> None:
    """A KV sizing line (M3 'Available KV cache memory', K4 'GPU KV cache size', K1 '# GPU blocks'): the profile run
    is over; the pool is allocated next (then CUDA graphs, then the sampler warm-up, each with its own marker)."""
    if c._step.get(line.proc or "main", "") in ("", "load", "profile"):
        _set_step(c, line, "kv_alloc")


def _set_step(c: LogCollector, line: Line, phase: str) -> None:
    key = line.proc or "main"
    if phase:
        c._step[key] = phase
        c._last_step_key = key
    else:
        c._step.pop(key, None)


def _step_load(c: LogCollector, m: re.Match, line: Line) -> None:
    """Weight loading began: 'Starting to load model M...' (``worker/model_runner.py`` 0.6-0.10,
    ``v1/worker/gpu_model_runner.py`` 0.6.6-0.33) or a checkpoint progress bar ('Loading safetensors checkpoint
    shards: 40% …', 'Loading pt checkpoint shards', 'Multi-thread loading shards', ``model_executor/model_loader/
    weight_utils.py`` 0.4-0.33). An OOM before the weights-loaded line is a loading OOM."""
    if m.group(1):
        c._run_marker(line, "load")
    _set_step(c, line, "load")
    if m.group(1):
        _model_name(c, line, m.group(1))


def _step_clear(c: LogCollector, m: re.Match, line: Line) -> None:
    """A step finished: 'Graph capturing finished in S secs' (K12 0.4-0.5 form without a size) — the phase marker
    set by the capture progress no longer applies."""
    _set_step(c, line, "")


_SZ = r"([\d.]+) (GiB|MiB|KiB|bytes|GB|MB)"

# A '.*' between two literals is tempered ('(?:(?!FIRST).)*'): it never runs past the next start of the first literal,
# so a line repeating that literal is searched in linear time, not quadratic (a 1.1 MB line of 'CUDA out of
# memory. ' took 57 s); every line the plain '.*' matched still matches (from the last start before the second).
EVENTS: list[tuple[str, re.Pattern, Callable]] = [
    ("stats", re.compile(r"Avg prompt throughput: [\d.]+ tokens/s|"
                         r"Iteration\(\d+\):(?:(?!Iteration\(\d).)*?KV cache usage|"
                         r"Throughput: [\d.]+ tokens/s, Running: \d+ reqs"), _stats),
    ("v0_prefix_hit_rate", re.compile(r"Prefix cache hit rate: GPU: ([\d.]+)%"), _v0_prefix_rate),
    ("preemption", re.compile(r"is preempted by PreemptionMode\.(\w+) mode because there is not enough KV cache "
                              r"space"), _preempt),
    ("W1", re.compile(r"Loading model weights took ([\d.]+) Gi?B"), _weights),
    ("W2", re.compile(r"Model loading took ([\d.]+) GiB"), _weights),
    ("M1", re.compile(r"Memory profiling results:"), _m1),
    ("M2a", re.compile(r"total_gpu_memory \(([\d.]+)GiB\) x gpu_memory_utilization \(([\d.]+)\) = ([\d.]+)GiB"),
     _m2_budget),
    ("M2b", re.compile(r"model weights take (-?[\d.]+)GiB; non_torch_memory takes (-?[\d.]+)GiB; PyTorch activation "
                       r"peak memory takes (-?[\d.]+)GiB; the rest of the memory reserved for KV Cache is (-?[\d.]+)GiB"),
     _m2_split),
    ("M3", re.compile(r"Available KV cache memory: (-?[\d.]+) GiB"), _m3),
    ("M6", re.compile(r"Free memory on device (?:\S+ )?\((?P<free>[\d.]+)/(?P<total>[\d.]+) GiB\) on startup\. Desired "
                      r"GPU memory utilization is \((?P<util>[\d.]+), (?P<req>[\d.]+) GiB\)\. Actual usage"), _m6),
    ("E4", re.compile(r"Free memory on device (?:\S+ )?\((?P<free>[\d.]+)/(?P<total>[\d.]+) GiB\) on startup is less "
                      r"than (?:desired GPU memory utilization|the engine's budget after excluding external process's "
                      r"weights)(?: \((?P<util>[\d.]+), (?P<req>[\d.]+) GiB\))?"), _e4_budget),
    ("E4_external", re.compile(r"Externally held weights on device (?:\S+ )?\((?P<ext>[\d.]+)/(?P<total>[\d.]+) GiB\) "
                               r"exceed the desired GPU memory utilization(?: \((?P<util>[\d.]+), (?P<req>[\d.]+) "
                               r"GiB\))?"), _e4_budget),
    ("K1", re.compile(r"(?:#\s*)?(?<!\w)(?:GPU|cuda|\w+) blocks: (\d+)(?:, # CPU blocks: (\d+))?"), _blocks),
    ("K4", re.compile(r"KV cache size: ([\d,]+) tokens"), _k4),
    ("K5", re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x"), _k5),
    ("K10", re.compile(r"Setting attention block size to (\d+) tokens"), _k10),
    ("K11", re.compile(r"cache_config_info with initialization after num_gpu_blocks is: (\d+)"), _k11),
    ("K12", re.compile(r"Graph capturing finished in \d+ secs, took ([\d.]+) GiB"), _k12),
    ("M9", re.compile(r"Estimated CUDA graph memory: ([\d.]+) GiB total"), _m9),
    ("E1", re.compile(r"No available memory for the cache blocks"), _e1),
    ("E2a", re.compile(r"max seq len \((\d+)\) is larger than the maximum number of tokens that can be stored in "
                       r"KV cache \((\d+)\)"), _e2a),
    ("E2bcd", re.compile(r"To serve at least one request with the models?'s max seq len \((\d+)\), \((-?[\d.]+) "
                         r"Gi?B KV cache is needed, which is larger than the available KV cache memory \((-?[\d.]+) "
                         r"Gi?B\)"), _e2bcd),
    ("E3", re.compile(r"Cannot auto-fit max_model_len: not enough GPU memory"), _e3),
    ("mamba_blocks", re.compile(r"max_num_seqs \((\d+)\) exceeds available Mamba cache blocks \((\d+)\)"),
     _mamba_blocks),
    ("E6", re.compile(r"CUDA out of memory occurred when warming up (?:sampler|pooler)"), _e6),
    ("W4", re.compile(r"Failed to load model - not enough GPU memory"), _w4),
    ("traceback", re.compile(r"^\s*Traceback \(most recent call last\):"), _traceback),
    ("oom_others", re.compile(r"CUDA out of memory\.(?:(?!CUDA out of memory\.).)*?Process \d+ has [\d.]+ \w+ memory in use"),
     _oom_others),
    ("mm_profile_warning", re.compile(r"is too short to hold the multi-modal embeddings in the worst case \((\d+) "
                                      r"tokens in total"), _mm_warning),
    ("mm_profile_run", re.compile(r"Starting profile run for multi-modal models"), _mm_run),
    ("oom", re.compile(r"(?:CUDA out of memory\. )?Tried to allocate " + _SZ + r"\. GPU (?:\d+ )?has a total capac?i?ty of "
                       + _SZ + r" of which " + _SZ + r" is free"), _oom),
    ("oom_old", re.compile(r"CUDA out of memory\. Tried to allocate " + _SZ + r" \(GPU \d+; " + _SZ +
                           r" total capacity; " + _SZ + r" already allocated; " + _SZ + r" free"), _oom_old),
    ("version", re.compile(r"(?:vLLM API server version |Initializing an? (?:V[01] )?LLM engine \(v|"
                           r"█\s+version\s+)(\d+\.\d+[\w.+-]*)"), _version),
    ("args", re.compile(r"args: Namespace\(|with config: |non-default args: |max_parallel_loading_workers="), _args),
    ("max_len", re.compile(r"Using max model len (\d+)"), _max_len),
    ("chunked_prefill", re.compile(r"Chunked prefill is enabled with max_num_batched_tokens=(\d+)"), _chunked_prefill),
    ("K7", re.compile(r"Overriding num_gpu_blocks=(\d+) with num_gpu_blocks_override=(\d+)"), _k7),
    ("K9", re.compile(r"Auto-fit max_model_len: (?:reduced from (?P<from>\d+) to (?P<reduced>\d+)|full model context "
                      r"length (?P<full>\d+) fits) (?:to fit )?in available (?:KV cache|GPU) memory(?: \((?P<kv>[\d.]+) "
                      r"GiB)?"), _k9),
    ("K13", re.compile(r"Capturing (?:the model for CUDA graphs|cudagraphs for decoding|CUDA graphs? )"), _k13),
    ("M4", re.compile(r"Memory profiling takes [\d.]+ seconds\. Total non KV cache memory"), _m4),
    ("M5", re.compile(r"Initial free memory: ([\d.]+) GiB; Requested memory: ([\d.]+) \(util\), ([\d.]+) GiB"), _m5),
    ("M7", re.compile(r"Initial free memory ([\d.]+) GiB, reserved ([\d.]+) ?GiB memory for KV Cache"), _m7),
    ("M9_pool", re.compile(r"CUDA graph pool memory: (-?[\d.]+) GiB \(actual\), (-?[\d.]+) GiB \(estimated\)"),
     _m9_pool),
    ("M10", re.compile(r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s"), _m10),
    ("E0", re.compile(r"EngineCore failed to start|Engine core initialization failed"), _e0),
    ("E5", re.compile(r"Error in memory profiling\.|Free memory grew by [\d.]+ GiB during profiling"), _e5_any),
    ("failing_request", re.compile(r"Failing the request \S+ because there's not enough kv cache blocks"),
     _failing_request),
    ("prompt_too_long", re.compile(r"Input prompt \((\d+) tokens\)(?: \+ lookahead slots \(\d+\))? is too long and "
                                   r"exceeds"), _prompt_too_long),
    ("worker_method", _WORKER_METHOD, _worker_method),
    ("context_limit", re.compile(r"This model's maximum context length is (\d+) tokens"), _context_limit),
    ("stats_disabled", re.compile(r"api_server_count more than 1; disabling stats logging"), _stats_disabled),
    ("kv_blocks_exhausted", re.compile(r"Out of memory! No free blocks are available|No usable cache memory left"),
     _blocks_exhausted),
    ("long_context", re.compile(r"The model has a long context length \((\d+)\)\. This may ?cause ?OOM"), _long_context),
    ("oom_other_form", re.compile(r"OutOfMemoryError|CUDA out of memory|CUDA error: out of memory|"
                                  r"Tried to allocate [\d.]+ ?(?:GiB|MiB|KiB|bytes|GB|MB)\. GPU (?:\d+ )?has a total|"
                                  r"CUBLAS_STATUS_ALLOC_FAILED|cudaErrorMemoryAllocation|HIP out of memory"),
     _oom_other_form),
    ("cuda_error", re.compile(r"CUDA error: [A-Za-z][\w ,.()/-]*|CUBLAS_STATUS_(?!ALLOC_FAILED)[A-Z_]+|"
                              r"NCCL error[:\w ,.()/-]*|nccl(?:UnhandledCudaError|SystemError|InternalError|InvalidUsage|"
                              r"RemoteError)|cudaErrorStreamCaptureUnsupported"), _cuda_error),
    ("architecture", re.compile(r"Resolved architecture: (\w+)"), _architecture),
    ("encoder_budget", re.compile(r"Encoder cache will be initialized with a budget of \d+ tokens, and profiled with"),
     _encoder_budget),
    ("mm_profile_skip", re.compile(r"Skipping memory profiling for multimodal encoder"), _mm_skip),
    ("step_load", re.compile(r"Starting to load model (\S+?)(?:\.\.\.|$)|Loading (?:safetensors|pt|np_cache) "
                             r"checkpoint shards()|Multi-thread loading shards()"), _step_load),
    ("K12_nosize", re.compile(r"Graph capturing finished in \d+ secs\.?$"), _step_clear),
    # measurements an operator reported next to the log (incident write-ups), not vLLM lines
    ("measure_pool", re.compile(r"\bpool: ([\d,]+) tokens\b(?:.*?/ ([\d,]+) GPU blocks)?"), _measure_pool),
    ("measure_request", re.compile(r"\b((?i:one|two|three|four|single|a)|\d+) ~?([\d,.]+)(k?)-token requests?\b"),
     _measure_request),
    ("measure_usage", re.compile(r"KV cache usage:? ([\d.]+)% \(~?(\d+) of (\d+) blocks\)"), _measure_usage),
]


# The vLLM versions each event's line was seen in (reference §2, read versions; "all" = 0.4 - 0.33).
EVENT_VERSIONS: dict[str, str] = {
    "stats": "V0 0.1 'Throughput: X tokens/s, Running: ...' (core/scheduler.py), V0 0.4-0.10 ('Pending', 'Swapped', 'CPU KV cache usage'); V1 0.7 (no prefix), 0.8-0.33 'Engine NNN:' "
             "prefix, 'Preemptions' 0.16+, 'Deferred' 0.24+, '{DEV} KV cache usage' and 'Iteration(N):' 0.33",
    "v0_prefix_hit_rate": "V0 0.5-0.10",
    "preemption": "V0 0.4-0.10 (every 50th preemption)",
    "W1": "0.4-0.7 'GB' (V0 and V1), 0.8-0.9 'GiB' (worker/xpu_model_runner.py)",
    "W2": "0.8-0.11 ('GiB and S seconds'); 0.16+ W3 ('GiB memory and S seconds')",
    "M1": "0.6.x early releases",
    "M2a": "V0 0.6.6-0.10", "M2b": "V0 0.6.6-0.10",
    "M3": "V1 0.9+ ('{kv:.2f}' to 0.11, rounded from 0.16)",
    "M4": "V1 0.9+ (DEBUG); 0.33 wording 'total consumed'",
    "M5": "V1 0.11+ (DEBUG)",
    "M6": "V1 0.10+ (0.10 KV memory in bytes; DEBUG 0.11-0.24, INFO 0.33; 0.33 'consumed memory')",
    "M7": "0.10 ('KGiB' without the space, V0 and V1) and V1 0.11+ (with --kv-cache-memory)",
    "M9": "0.24+", "M9_pool": "0.24+",
    "M10": "0.6+ ('seconds'; 0.24+ 's')",
    "E4": "V1 0.9+ ('on device {device}' 0.16+; 0.33 'the engine's budget after excluding external process's "
          "weights')",
    "E4_external": "0.33 (v1/worker/utils.py)",
    "kv_blocks_exhausted": "V0 0.4-0.10 (core/block_manager_v1.py, core/evictor*.py)",
    "long_context": "0.6-0.8 (engine/arg_utils.py)",
    "oom_other_form": "all (CUDA runtime / cuBLAS texts from torch; a cut PyTorch OOM line)",
    "cuda_error": "all (torch c10 CUDA / cuBLAS / NCCL texts)",
    "architecture": "0.10+ (config/__init__.py 0.10, config/model.py 0.11+)",
    "encoder_budget": "V1 0.8+ (v1/worker/gpu_model_runner.py profile_run)",
    "mm_profile_skip": "V1 0.9+",
    "step_load": "'Starting to load model' 0.6+; checkpoint-shard progress bars 0.4+",
    "K12_nosize": "0.4-0.5",
    "K1": "V0 0.4-0.6 K1 '# GPU blocks', V0 0.7-0.10 K2 '# cuda blocks', V1 0.6.6-0.7 K3",
    "K4": "V1 0.8-0.24 (K4); 0.33 merged K6 '... tokens, Maximum concurrency ...'",
    "K5": "V0 0.6-0.10, V1 0.7-0.24 (K5); 0.33 merged K6",
    "K7": "V1 0.7+", "K9": "0.14+ ('in available GPU memory' 0.14-0.31, 'KV cache memory' 0.32+)", "K10": "0.10+", "K11": "0.9+",
    "K12": "0.6+ ('took G GiB'; 0.4-0.5 print no size)",
    "K13": "V0 0.4-0.10; V1 capture progress",
    "E0": "V1 0.8+", "E1": "all", "E2a": "V0 0.4-0.10, V1 0.6.6",
    "E2bcd": "V1 0.7 ('GB', \"models's\"), 0.8-0.16 (GiB), 0.24+ (\"model's\")",
    "E3": "0.16+", "E5": "all ('Initial used memory' V0 0.8; 'Free memory grew by' 0.33 WARNING)", "E6": "V1 0.8+ (pooler variant 0.10+)",
    "mamba_blocks": "2026 releases after vLLM PR 38270",
    "W4": "0.16+",
    "traceback": "all",
    "oom": "torch 2.1+ (vLLM 0.4+; 'capacty' in torch 2.1)",
    "oom_old": "torch <= 2.0 (vLLM <= 0.3)",
    "version": "'vLLM API server version' 0.4+, 'Initializing an LLM engine (vX)' V0, banner 0.33",
    "args": "all ('args: Namespace(' to 0.9, 'non-default args:' 0.10+, 'with config:' all)",
    "max_len": "V1 0.8+",
    "chunked_prefill": "0.6+ (config.py; config/scheduler.py 0.33, read in the 0.33 wheel)",
    "failing_request": "V0 0.4-0.10", "prompt_too_long": "V0 0.4-0.10",
    "stats_disabled": "0.10+",
    "worker_method": "V0 0.5-0.10 (multiproc workers)",
    "oom_others": "torch 2.1+ OOM text (vLLM 0.4+)",
    "mm_profile_warning": "0.9+ (profiling.py)",
    "mm_profile_run": "V0 0.6 encoder-decoder models (enc_dec_model_runner.py)",
    "context_limit": "all (OpenAI-compatible server request errors)",
    "measure_pool": "operator write-ups", "measure_request": "operator write-ups", "measure_usage": "operator write-ups",
}


_COMMON_WORDS = {"Engine", "Engines", "tokens", "tokens/s", "Error", "version", "seconds", "GiB", "INFO", "reqs"}


def _literal_needles(items, flags: int) -> list[str] | None:
    """Literal substrings one of which every match of the parsed pattern ``items`` contains (the longest
    top-level literal run, or one run per alternative of a group/alternation), or ``None`` when none is found."""
    try:
        from re import _constants as C, _parser as P  # Python 3.11+
    except ImportError:  # pragma: no cover - Python 3.10
        import sre_constants as C  # type: ignore
        import sre_parse as P  # type: ignore  # noqa: F401
    options: list[list[str]] = []
    run: list[str] = []
    ignore = bool(flags & re.IGNORECASE)

    def end_run():
        if len(run) >= 3 and not ignore:
            options.append(["".join(run)])
        run.clear()

    for op, av in items:
        if op is C.LITERAL and not ignore:
            run.append(chr(av))
            continue
        end_run()
        if op is C.BRANCH:
            alts = [_literal_needles(list(b), flags) for b in av[1]]
            if all(alts):
                options.append([n for alt in alts for n in alt])
        elif op is C.SUBPATTERN:
            add_flags = av[1]
            sub = _literal_needles(list(av[3]), flags | add_flags)
            if sub:
                options.append(sub)
    end_run()
    if not options:
        return None
    # the most specific option: longest shortest needle, words that every stats or request line holds
    # count as nothing (any substring of a needle is a needle too, so leading blanks are dropped)
    options = [[n.lstrip(" ") if len(n.lstrip(" ")) >= 3 else n for n in ns] for ns in options]

    def score(ns: list[str]) -> int:
        return 0 if any(n.strip(" :.,") in _COMMON_WORDS for n in ns) else min(len(n) for n in ns)

    return max(options, key=score)


def needles_of(pattern: re.Pattern) -> list[str]:
    """Literal needles of an event pattern: every string the pattern matches contains one of them.

    Raises:
        ValueError: the pattern has no literal run of 3+ characters outside case-insensitive parts
            (an event must name at least one literal, or the fast path could skip its lines).
    """
    try:
        from re import _parser as P  # Python 3.11+
    except ImportError:  # pragma: no cover
        import sre_parse as P  # type: ignore
    found = _literal_needles(list(P.parse(pattern.pattern, pattern.flags)), pattern.flags)
    if not found:
        raise ValueError(f"event pattern {pattern.pattern!r} has no literal needle")
    return found


# text the collector reads besides the events: traceback frames, exception lines, editorial notes
EXTRA_NEEDLES = [", line ", "Error", "Exception", "# ["]


def _compile_events() -> list[tuple[str, re.Pattern, Callable, tuple[str, ...]]]:
    return [(eid, pattern, handler, tuple(needles_of(pattern))) for eid, pattern, handler in EVENTS]


_EVENTS_COMPILED = _compile_events()


_NEEDLE_LIST = sorted({n for e in _EVENTS_COMPILED for n in e[3]})
_NEEDLE_EVENTS: list[list[int]] = [[i for i, e in enumerate(_EVENTS_COMPILED) if n in e[3]] for n in _NEEDLE_LIST]
_MATCHER = ahocorasick_rs.AhoCorasick(_NEEDLE_LIST)


def _events_for(msg: str) -> list[tuple]:
    """The events whose needles occur in ``msg``, in registry order (one automaton pass over the message)."""
    hits = _MATCHER.find_matches_as_indexes(msg, overlapping=True)
    if not hits:
        return []
    idx = {i for n, _s, _e in hits for i in _NEEDLE_EVENTS[n]}
    return [_EVENTS_COMPILED[i] for i in sorted(idx)]


def event_needles() -> list[str]:
    """Every needle of the EVENTS registry plus :data:`EXTRA_NEEDLES` and :data:`TROUBLE_NEEDLES` (the fast path's
    search set: a line with trouble wording is decoded even when no event names it, to be listed if none matches)."""
    return sorted({n for e in _EVENTS_COMPILED for n in e[3]} | set(EXTRA_NEEDLES) | set(TROUBLE_NEEDLES))


def _minimal_needles(needles: set[str]) -> list[str]:
    """``needles`` without those that contain another one (a line holding the longer holds the shorter: the
    prefilter finds the same lines with a smaller automaton)."""
    ordered = sorted(needles, key=lambda n: (len(n), n))
    ac = ahocorasick_rs.AhoCorasick(ordered)
    return sorted(n for n in ordered if all(ordered[i] == n for i, _s, _e in
                                            ac.find_matches_as_indexes(n, overlapping=True)))


# short words most catalogue needles hold ('... KV cache ...', '... blocks ...', 'CUDA graph'): searched instead of the
# ~1,300 needles they cover, the prefilter's DFA stays small and fast (measured on 64 MiB of
# benchmarks/log_throughput.py's log: 1,370 needles 226 MB/s, these + the ~550 uncovered needles 319 MB/s, the
# EVENTS needles alone 436 MB/s). Each is rare in request / access lines (a line that holds one is only decoded and
# matched, never misread).
CATALOG_ANCHORS = ["cache", "Cache", "CACHE", "block", "Block", "graph", "Graph", "CUDA", "cuda", "kv_", "KV", "mamba",
                   "Mamba", "profil", "Profil", "warmup", "Warmup", "warm up", "Warming", "encoder", "Encoder",
                   "preempt", "swap", "Swap", "alloc", "Alloc", "max_model_len", "max_num", "gpu_mem", "page", "Page",
                   "tensor", "Tensor", "buffer", "Buffer", "pool", "Pool", "GiB", "MiB", " GB", "bytes", "slot",
                   "layer", "Layer", "attention", "Attention", "backend", "sampler", "Sampler", "capture", "Capture",
                   "shape", "device", "Device", "dtype", "xpected"]


@functools.lru_cache(maxsize=1)
def prefilter_needles() -> list[str]:
    """The fast path's search set: :func:`event_needles`, and for the catalogue (:func:`kvdiag.catalog.needles`, so a
    catalogued message no event names is decoded too) :data:`CATALOG_ANCHORS` plus every catalogue needle no anchor or
    event needle is part of; minus needles that contain another. A line holding a catalogue needle holds one of
    these."""
    base = set(event_needles()) | set(CATALOG_ANCHORS)
    ac = ahocorasick_rs.AhoCorasick(sorted(base))
    rest = {n for n in map(_plain, catalog.needles()) if not ac.find_matches_as_indexes(n)}
    return _minimal_needles(base | rest)


_UNPLAIN = re.compile(r'[^\x20-\x7e]+|["\\]+')


def _plain(needle: str) -> str:
    """The longest run of ``needle`` that reads the same in raw bytes and in a Docker json-file ``log`` string (which
    may escape non-ASCII as ``\\uXXXX`` and always escapes quotes and backslashes): ``"🚧kv_cache is None, "`` →
    ``"kv_cache is None, "``; the needle itself when no run of 4+ characters is left."""
    if not _UNPLAIN.search(needle):
        return needle
    best = max(_UNPLAIN.split(needle), key=len)
    return best if len(best.strip()) >= 4 else needle


@functools.lru_cache(maxsize=1)
def _catalog_matcher() -> ahocorasick_rs.AhoCorasick:
    # an NFA: it only runs on the few decoded lines, and a DFA of the catalogue's needles would take ~23 MB
    return ahocorasick_rs.AhoCorasick(_minimal_needles(set(catalog.needles())),
                                      implementation=ahocorasick_rs.Implementation.ContiguousNFA)


def _catalog_needle_in(msg: str) -> bool:
    """Does ``msg`` hold a needle of the catalogue (a whole template's longest literal or a cut line's prefix)?
    Only then is :func:`kvdiag.catalog.match` worth calling."""
    return bool(_catalog_matcher().find_matches_as_indexes(msg[:catalog.MAX_MESSAGE]))


# events whose lines are no catalogued memory message (banners, args, identity, write-ups): never phrase-matched
_NO_PHRASES = {"version", "args", "architecture", "measure_pool", "measure_request", "measure_usage",
               "v0_prefix_hit_rate", "stats_disabled"}


@functools.lru_cache(maxsize=1)
def _anchor_matcher() -> ahocorasick_rs.AhoCorasick:
    return ahocorasick_rs.AhoCorasick(CATALOG_ANCHORS + ["memory", "Memory", "MEMORY", "OOM", "token", "max_seq",
                                                         "allocat", "preempt", "Preempt"])


def _anchor_in(msg: str) -> bool:
    """Does ``msg`` hold a word most catalogued memory messages hold (:data:`CATALOG_ANCHORS`, memory, token, ...)?
    Such a line, or one of five words or more, is worth a phrase match; a bare exception name (a cancelled request's
    'asyncio.exceptions.CancelledError') is not."""
    return bool(_anchor_matcher().find_matches_as_indexes(msg[:catalog.MAX_MESSAGE]))


_RANGE = re.compile(r"\((\d+\.\d+)(?:-(\d+\.\d+)|\+)\)")


def version_from_formats(formats: set[str]) -> str:
    """The vLLM version range every seen line format allows (``"0.8-0.9"``, ``"0.24+"``), or ``""`` when the
    formats name no range or contradict each other (e.g. logs of two servers)."""
    lo, hi = (0, 0), (99, 99)
    seen = False
    for f in formats:
        for m in _RANGE.finditer(f):
            seen = True
            a = tuple(int(x) for x in m.group(1).split("."))
            lo = max(lo, a)
            if m.group(2):
                hi = min(hi, tuple(int(x) for x in m.group(2).split(".")))
    if not seen or lo > hi:
        return ""
    fmt = "{}.{}".format
    return f"{fmt(*lo)}+" if hi == (99, 99) else (fmt(*lo) if lo == hi else f"{fmt(*lo)}-{fmt(*hi)}")


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


__all__ = ["LogCollector", "read_logs", "phase_of", "deciding_frame", "size_bytes", "EVENTS", "EVENT_VERSIONS",
           "needles_of", "event_needles", "version_from_formats"]
