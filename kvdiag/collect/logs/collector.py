"""Runs and assembly: :class:`LogCollector` reads one file's records, splits them into runs (one server start each),
keeps per-process traceback state and adds observations to the bundle."""

from __future__ import annotations

import calendar
import json
import math
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from ... import catalog
from ...bundle import Bundle, InputInfo
from ...errors import InputError
from ...redaction import redact
from ...signals import SIGNALS
from ..logread import MAX_LINE_BYTES, RecordReader, open_log
from .envelope import (ANSI, CONTAINER_TS, EXC_LINE, FRAME, HEADER, Line, PROC_TAG, QUOTE_PREFIX, RANK_TAG,
                       _PASTE_LEAD, _excerpt, _parse_rfc3339, _proc_format)
from .handlers import _DIGITS, _DP_COMBINE
from .messages import (UNSEEN_LISTED, _KNOWN_NOT_TROUBLE, _NO_PHRASES, _SHELL, _anchor_in, _better_joining,
                       _catalog_needle_in, _events_for, _looks_like_trouble, prefilter_needles, version_from_formats)
from .phases import MAX_FRAME_LINE, _GLUED_CALL, _GLUED_EXC, deciding_frame


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
                        t_container = _parse_rfc3339(_no_lone_surrogates(obj["time"]))
                    parts.append(_no_lone_surrogates(obj["log"]).rstrip("\n"))
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


def _no_lone_surrogates(text: str) -> str:
    """``text`` with each lone surrogate (``"\\udcff"`` in a JSON envelope: an undecodable byte escaped by the
    logging driver) as U+FFFD, as an undecodable byte of a plain log line is read: such a str cannot be encoded
    as UTF-8 (the event matcher, every report writer). Pairs were joined by :func:`json.loads` already."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text
