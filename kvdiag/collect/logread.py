"""Log input forms and the fast path of the log collector.

What this module does, before any vLLM wording is looked at:

* **opens** a log: a path (plain, gzip or zstandard, told apart by their magic bytes, not the
  name) or ``-`` for standard input (:func:`open_log`);
* **orders** rotated files oldest first (``vllm.log.3.gz, vllm.log.2, vllm.log.1, vllm.log``,
  :func:`order_paths`);
* **streams** the bytes in fixed-size blocks and hands on only the *candidate records*: the
  physical lines that contain one of the collector's needles (literal substrings every line an
  event matches must contain), found for a whole block at once with an Aho-Corasick automaton
  (``ahocorasick-rs``). Lines without a needle (request logs, access logs, progress output) are
  counted and never decoded, which is what makes the collector run at hundreds of MB/s;
* **re-joins** records that a container runtime split over several physical lines: Docker
  json-file partial messages (``"log"`` without a trailing ``\\n``), CRI partial lines
  (``2025-01-01T06:00:00.123456789Z stdout P …``), and ``docker logs -t`` output wrapped by a
  terminal (continuation lines without the leading timestamp) (:class:`RecordReader`);
* **re-joins pasted text** (:meth:`RecordReader._detect_paste`): excerpts quoted with ``> `` (any depth) or
  indented, and lines a mail client, terminal or issue form wrapped at 60-200 columns with the header only on the
  first piece. Such an input is recognised from its first 400 lines; then every block is unwrapped into logical
  records *before* the needle search, so a needle split by the wrap (``KV ca`` / ``che``) is still found. Plain
  logs keep the fast path (pastes are small, the unwrapping is a Python loop);
* **redacts** secrets (:func:`kvdiag.redaction.redact`).

Memory stays bounded whatever the file size: one block (4 MiB) plus one carried partial line,
capped at :data:`MAX_LINE_BYTES` (a longer "line", e.g. hours of ``\\r`` progress bar without a
newline, is cut there).
"""

from __future__ import annotations

from contextlib import contextmanager
import functools
import os
from pathlib import Path
import re
import sys
from typing import BinaryIO, Callable, Iterator
import zlib

import ahocorasick_rs
import numpy as np

from ..errors import InputError

MIB = 1 << 20

BLOCK_BYTES = 4 << 20
MAX_LINE_BYTES = 8 << 20
MAGIC_GZIP = b"\x1f\x8b"
MAGIC_ZSTD = b"\x28\xb5\x2f\xfd"

# ``docker logs -t`` / CRI timestamp at the start of a physical line
TS_START = re.compile(rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d")
CRI_PARTIAL = re.compile(rb"^\d{4}-\d\d-\d\dT\S+\s+(?:stdout|stderr)\s+P\s")
MAX_JOIN = 64  # physical lines one record may span
# paste forms: '> ' quotes (any depth) and indentation in front of a physical line
QUOTE = re.compile(rb"^[ \t]*(?:>[ \t]?)+")
_HEADER_START = re.compile(rb"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+\d\d-\d\d\s+\d\d:\d\d:\d\d")
# a headerless record that begins with an exception name (the last line of a traceback, 'ValueError: Free memory on
# device ...'): its wrapped pieces are joined to it as to a headed record
_EXC_START = re.compile(rb"^[ \t]*(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception):\s")


def _headed(ln: bytes) -> bool:
    return bool(_HEADER_START.search(ln[:160]) or _EXC_START.match(ln))
# a piece that is a log header and nothing else (the message was wrapped onto the next piece)
_HEADER_ONLY = re.compile(rb"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+\d\d-\d\d\s+\d\d:\d\d:\d\d\s+\[?[\w./-]+:\d+\]\s*$")
# a physical line that starts a record of its own (never a wrapped piece of the line before)
RECORD_START = re.compile(
    rb"^[ \t]*(?:\((?:[A-Za-z_]\w*)(?: rank=\d+)? pid=\d+(?:, ip=[\w.:-]+)?\)\s*|\[rank\d+\]:\s*|"
    rb"\d{4}-\d\d-\d\dT\S+\s+(?:(?:stdout|stderr)\s+[FP]\s+)?)*"
    rb"(?:(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+\d\d-\d\d\s|Traceback \(|File \"|During handling|The above "
    rb"exception|[A-Za-z_][\w.]*(?:Error|Exception|Warning)\b|\^+\s*$|\{\"|#|\$ |\d{4}-\d\d-\d\d[ T])")


# ------------------------------------------------------------------------------------------------
# Opening and ordering
class _Inflating:
    """A readable stream of the decompressed bytes of a gzip or zstandard file (members/frames in a row), bounded
    while it streams.

    Hands out every byte that can be decompressed before it says anything is wrong: a stream cut short (a
    truncated ``.gz`` / ``.zst``, a file still being written) raises ``EOFError`` only once the decodable
    bytes before the cut were read, so the reader keeps the lines it got.

    Bounded: one step inflates at most :data:`STEP_OUT` bytes (gzip: ``max_length``; zstandard, whose
    ``decompressobj`` has no such bound: the next input piece is sized from the ratio seen so far, so a run of RLE
    blocks inflates a few MiB per step, never GiB), and once :data:`RATIO_FLOOR` bytes came out, a stream that
    inflates to more than :data:`MAX_RATIO` times the compressed bytes it consumed is refused
    (:class:`~kvdiag.errors.InputError`, naming the file and the cap) before its lines are read: a 1 MiB gzip
    of one 1 GiB line or of one line repeated (250-1000x) is a decompression bomb, not a log (a real vLLM log gzips 8-15x, an
    idle server's stats lines ~80x; zstandard -19 ~230x).

    Args:
        raw: the stored (compressed) byte stream.
        kind: ``"gzip"`` or ``"zstd"``.
        name: the file for messages.
    """

    CHUNK = 256 << 10
    STEP_OUT = 1 << 20
    RATIO_FLOOR = 1 << 20
    MAX_RATIO = {"gzip": 200, "zstd": 1000}

    def __init__(self, raw: BinaryIO, kind: str, name: str = "") -> None:
        self._raw, self.kind, self.name = raw, kind, name
        self._d = self._make()
        self._buf = bytearray()
        self._pending = b""       # stored bytes read but not yet fed to the decompressor
        self._in_member = False   # input fed to the current decompressor since its start
        self._ended = False       # the stored stream is exhausted
        self.consumed = 0         # stored bytes the decompressors took
        self.inflated = 0         # bytes they gave
        self._piece = 256         # zstandard: the next input piece (adapted to the ratio seen; 256 bytes of RLE
        # blocks inflate to at most 8 MiB)

    def _make(self):
        if self.kind == "gzip":
            return zlib.decompressobj(wbits=31)
        import zstandard

        return zstandard.ZstdDecompressor().decompressobj()

    def _step(self) -> bool:
        """Inflate one bounded step of the pending input; False when it needs more stored bytes."""
        data = self._pending
        if not data:
            return False
        self._in_member = True
        try:
            if self.kind == "gzip":
                out = self._d.decompress(data, self.STEP_OUT)
                rest = self._d.unconsumed_tail
                if self._d.eof:
                    rest = self._d.unused_data
            else:
                piece = data[:self._piece]
                out = self._d.decompress(piece)
                rest = data[len(piece):]
                if self._d.eof:
                    rest = self._d.unused_data + rest
                ratio = len(out) / max(1, len(piece) - (len(self._d.unused_data) if self._d.eof else 0))
                self._piece = int(min(self.CHUNK, max(256, self.STEP_OUT / max(ratio, 1.0))))
        except MemoryError:
            raise
        except Exception as exc:  # zlib.error, zstandard.ZstdError: the stored stream is corrupt
            raise ValueError(f"corrupt {self.kind} stream: {exc}") from None
        self.consumed += len(data) - len(rest)
        self.inflated += len(out)
        self._buf += out
        self._pending = rest
        if self._d.eof:
            self._d = self._make()
            self._in_member = False
            if rest and not rest.strip(b"\x00"):
                self._pending = b""  # zero padding after the last member (gzip tools write it; GzipFile ignores it)
        self._check_ratio()
        return True

    def _check_ratio(self) -> None:
        cap = self.MAX_RATIO[self.kind]
        if self.inflated > self.RATIO_FLOOR and self.inflated > cap * max(1, self.consumed):
            raise InputError(
                f"{self.name}: {self.kind} stream inflates more than {cap}x (the cap: {self.inflated / MIB:,.0f} MiB "
                f"from {self.consumed / 1024:,.1f} KiB so far): a decompression bomb, not vLLM log or /metrics text "
                f"(to read it anyway, decompress it yourself and give the plain file or '-')")

    def readinto(self, view) -> int:
        want = len(view)
        while len(self._buf) < want:
            if self._step():
                continue
            if self._ended:
                break
            chunk = self._raw.read(self.CHUNK)
            if not chunk:
                self._ended = True
                break
            self._pending = chunk
        if not self._buf:
            if self._ended and self._in_member:
                raise EOFError(f"{self.kind} stream ends before its end-of-stream marker")
            return 0
        n = min(want, len(self._buf))
        view[:n] = self._buf[:n]
        del self._buf[:n]
        return n


@contextmanager
def open_log(path: str) -> Iterator[tuple[BinaryIO, Callable[[], int], int | None]]:
    """Open a log for binary streaming, decompressing gzip and zstandard by their magic bytes.

    Yields:
        ``(stream, position, size)``: the decompressed byte stream, a function giving how many bytes
        of the *stored* file were read so far (for a progress bar), and the stored size in bytes
        (``None`` for standard input).

    Raises:
        InputError: the path is missing, a directory or unreadable.
    """
    if path == "-":
        raw = sys.stdin.buffer
        size = None
    else:
        p = Path(path)
        if not p.exists():
            raise InputError(f"{path}: no such file")
        if p.is_dir():
            raise InputError(f"{path}: is a directory, expected a vLLM log file")
        try:
            from ..inputs.files import open_binary  # the input layer opens every file kvdiag reads

            raw = open_binary(str(p))
            size = os.fstat(raw.fileno()).st_size
        except OSError as exc:
            raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        head = raw.peek(4)[:4] if hasattr(raw, "peek") else b""
        if head.startswith(MAGIC_GZIP):
            stream = _Inflating(raw, "gzip", path)
        elif head.startswith(MAGIC_ZSTD):
            stream = _Inflating(raw, "zstd", path)
        else:
            stream = raw
        position = (lambda: raw.tell()) if size is not None else (lambda: 0)
        yield stream, position, size
    finally:
        if raw is not sys.stdin.buffer:
            raw.close()


_ROTATED = re.compile(r"^(?P<base>.+?)(?:[.-](?P<n>\d{1,4}|\d{8}(?:-\d+)?))?(?P<z>\.gz|\.zst)?$")


def order_paths(paths: list[str]) -> list[str]:
    """Put rotated logs in time order, oldest first.

    Files that differ only by a rotation suffix form one set: ``NAME.N`` (logrotate, larger N is
    older), ``NAME-YYYYMMDD`` (dateext, older date first), each optionally ``.gz`` / ``.zst``; the
    bare ``NAME`` (the live file) comes last. Sets keep the order of their first mention; ``-``
    stays where it is. Duplicates are read once.
    """
    groups: dict[str, list[tuple[tuple, str]]] = {}
    order: list[str] = []
    for i, path in enumerate(dict.fromkeys(paths)):
        m = _ROTATED.match(os.path.basename(path)) if path != "-" else None
        if m is None:
            key, rank = f"\0{i}", (0, 0)
        else:
            key = os.path.join(os.path.dirname(path), m.group("base"))
            n = m.group("n")
            if n is None:
                rank = (2, 0)  # live file: newest
            elif len(n) >= 8:
                rank = (1, int(n.replace("-", "")))  # dateext: ascending date
            else:
                rank = (0, -int(n))  # .N: larger is older
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append((rank, path))
    return [path for key in order for _, path in sorted(groups[key])]


# ------------------------------------------------------------------------------------------------
# Streaming with the needle prefilter
@functools.lru_cache(maxsize=4)
def _automaton(needles: tuple[bytes, ...]) -> ahocorasick_rs.BytesAhoCorasick:
    """The prefilter automaton of a needle set, built once per process (a DFA of ~1,400 needles takes 0.1 s)."""
    return ahocorasick_rs.BytesAhoCorasick(needles, implementation=ahocorasick_rs.Implementation.DFA)


class RecordReader:
    """Yield the candidate records of one byte stream.

    Args:
        needles: literal substrings (str); a physical line containing none of them is skipped.
        name: name for error messages.
        on_block: called after each block with no arguments (progress).

    Attributes (after iteration):
        lines: physical lines in the stream.
        container: ``"json"`` (Docker json-file), ``"ts"`` (``docker logs -t`` / CRI) or ``""``.

    Iterating yields ``(lineno, [physical_line, ...])`` with 1-based ``lineno`` of the record's first
    physical line and the lines as bytes without their ``\\n``, in file order.

        truncated: why the stream ended early (a compressed file cut short or corrupt after some lines:
            the lines before the cut are kept), else ``""``.
        cut_lines: times a line longer than :data:`MAX_LINE_BYTES` was cut into a new line.
        binary_lines: physical lines holding control bytes (NUL and other C0 codes besides tab, CR,
            ESC): binary garbage inside a text log, not log text.

    Raises:
        InputError: the stream holds binary data (NUL bytes in most of its first lines), or cannot
            be decompressed at all (nothing before the damage).
    """

    def __init__(self, needles: list[str], name: str, on_block: Callable[[], None] | None = None) -> None:
        self.name = name
        self.lines = 0
        self.truncated = ""
        self.binary_lines = 0
        self.cut_lines = 0
        self.container = ""
        self.paste = ""          # "" or how the text was pasted ("quoted '> '", "wrapped at 80 columns", ...)
        self._wrap = 0           # wrap width of a wrapped paste (0: not wrapped)
        self._hard_wrap = False  # cut at exactly the width (no space dropped) rather than at word boundaries
        self._hard_width = 0
        self.alternatives: dict[int, bytes] = {}  # line number → the other joining of a wrapped pasted record
        self._mode_known = False
        self._on_block = on_block
        # a DFA explicitly: with 100+ needles the automatic choice falls back to an NFA, 3x slower per byte (measured
        # 0.79 s vs 0.25 s on 100 MiB with benchmarks/log_throughput.py's log); the DFA of a few hundred short
        # needles is small
        self._ac = _automaton(tuple(sorted({n.encode() for n in needles if n})))

    def read(self, stream: BinaryIO) -> Iterator[tuple[int, list[bytes]]]:
        buf = bytearray(BLOCK_BYTES + MAX_LINE_BYTES + 1)
        view = memoryview(buf)
        carry = 0  # bytes of an unfinished line kept at the front of buf
        first = True
        while True:
            try:
                got = stream.readinto(view[carry:carry + BLOCK_BYTES]) or 0
            except OSError as exc:
                raise InputError(f"{self.name}: cannot read: {exc.strerror or exc}") from None
            except InputError:
                raise  # a decompression bomb: refused, not a truncation
            except Exception as exc:  # noqa: BLE001 - EOFError, zlib.error, zstandard.ZstdError: a damaged archive
                if not self.lines and not carry:
                    raise InputError(f"{self.name}: cannot decompress ({exc}): nothing readable before the "
                                     "damage, expected vLLM log lines") from None
                self.truncated = str(exc) or exc.__class__.__name__
                got = 0
            final = got == 0
            size = carry + got
            if final:
                if size and buf[size - 1] != 10:
                    buf[size] = 10  # a last line without newline
                    size += 1
                cut = size
            else:
                cut = buf.rfind(b"\n", 0, size) + 1
                if cut == 0 and size >= MAX_LINE_BYTES:
                    buf[size] = 10  # an over-long line is cut here
                    size += 1
                    cut = size
                    self.cut_lines += 1
            if cut:
                body = view[:cut]
                # one pass finds the newlines and the control bytes both (bytes < 32; issue 28's profile: 28 finds
                # of a control byte each and a separate newline pass cost as much again)
                arr = np.frombuffer(body, dtype=np.uint8)
                low = np.flatnonzero(arr < 32)
                kinds = arr[low]
                nl = low[kinds == 10]
                bad = low[(kinds != 9) & (kinds != 10) & (kinds != 13) & (kinds != 27)]
                if len(bad):
                    self.binary_lines += len(np.unique(np.searchsorted(nl, bad)))
                del arr
                if first:
                    self._check_text(bytes(body[:1 << 16]))
                    self._detect_container(bytes(body[:1 << 16]))
                    if not self.container:
                        self._detect_paste(bytes(body[:1 << 16]))
                    first = False
                yield from self._block(body, nl)
                del body, nl, low, kinds, bad
                carry = size - cut
                buf[:carry] = buf[cut:size]
            else:
                carry = size
            if self._on_block:
                self._on_block()
            if final:
                return

    def _check_text(self, body: bytes) -> None:
        sample = body[:1 << 16].split(b"\n")[:200]
        sample = [s for s in sample if s] or sample
        nul = sum(1 for s in sample if b"\x00" in s)
        if nul >= 3 and nul * 2 >= len(sample) or (nul and len(sample) <= 2 and nul == len(sample)):
            raise InputError(f"{self.name}:1: binary data, expected text log lines")

    def _detect_container(self, body: bytes) -> None:
        for line in body[:1 << 16].split(b"\n")[:20]:
            s = line.lstrip()
            if not s or s.startswith(b"#"):
                continue
            if s.startswith(b'{"log":') or s.startswith(b'{"time":') or s.startswith(b'{"stream":'):
                self.container = "json"
            elif TS_START.match(s):
                self.container = "ts"
            return

    def _detect_paste(self, body: bytes) -> None:
        """Recognise a pasted excerpt from its first 400 non-empty lines: quoted (30 % of them start with ``>``),
        or wrapped: at most 2 % of the lines are longer than 200 columns (a real log has long config / args lines)
        and a piece of at least 60 columns of a record that starts with a vLLM header is followed by a piece that
        starts no record. Hard-wrapped (cut at a fixed column, no space dropped) when every such piece has the same
        length, or the one piece is a terminal width (80, 100, 120, 132, 160 columns); else wrapped at word
        boundaries (the space at each break was dropped and is put back)."""
        sample = [ln.rstrip(b"\r") for ln in body.split(b"\n")[:2000] if ln.strip()][:400]
        if not sample:
            return
        quoted = sum(1 for ln in sample if QUOTE.match(ln))
        kinds = []
        if quoted * 10 >= len(sample) * 3:
            kinds.append("quoted '> '")
        lines = [QUOTE.sub(b"", ln) if QUOTE.match(ln) else ln for ln in sample]
        if sum(1 for ln in lines if len(ln) > 200) * 50 <= len(lines):
            cut: list[int] = []  # lengths of the pieces a continuation follows
            headed = False
            for i, ln in enumerate(lines):
                if headed and i and len(lines[i - 1]) >= 40 and not RECORD_START.match(ln) \
                        and b'File "' not in lines[i - 1]:
                    cut.append(len(lines[i - 1]))
                elif headed and i and _EXC_START.match(ln) and _HEADER_ONLY.search(lines[i - 1]):
                    cut.append(len(lines[i - 1]))  # a header alone on its piece, the exception name on the next
                else:
                    headed = _headed(ln)
            if cut:
                width = max(cut)
                self._wrap = 60 if width >= 60 else 40
                self._hard_wrap = (len(cut) >= 2 and cut.count(width) == len(cut)) or \
                    (len(cut) == 1 and width in (80, 100, 120, 132, 160))
                self._hard_width = width
                kinds.append(f"wrapped at {width} columns")
        self.paste = ", ".join(kinds)

    def _paste_block(self, body: memoryview) -> Iterator[tuple[int, list[bytes]]]:
        """Candidate records of one block of a pasted excerpt: quote prefixes removed, wrapped pieces joined to
        the record that has the header (a piece of a headed record of 60+ columns followed by a piece that starts
        no record), then the needle search on the joined record. Each joined record is built both ways, pieces
        glued as they are (a hard cut at a column) and with the dropped space put back (a wrap at word
        boundaries): the one the width heuristic of :meth:`_detect_paste` prefers is yielded, the other is put in
        :attr:`alternatives` under the same line number for the collector to choose the reading that matches (a
        needle split by the cut is found in either: the search runs on the joined text). A record is not joined
        across a 4 MiB block boundary."""
        base = self.lines
        raw = bytes(body).split(b"\n")
        if raw and raw[-1] == b"":
            raw.pop()
        self.lines += len(raw)
        width = self._wrap
        hard: bytearray | None = None   # pieces glued as they are
        soft: bytearray | None = None   # pieces joined with one space
        headed = False
        joined = False
        rec_no = 0
        prev = b""
        out: list[tuple[int, bytes]] = []

        def flush():
            if hard is None:
                return
            if not joined:
                out.append((rec_no, bytes(hard)))
                return
            first, other = (hard, soft) if self._hard_wrap else (soft, hard)
            out.append((rec_no, bytes(first)))
            if other != first:
                self.alternatives[rec_no] = bytes(other)

        quoted = "quoted" in self.paste
        for i, ln in enumerate(raw):
            ln = ln.rstrip(b"\r")
            if QUOTE.match(ln):
                # in a paste that is not quoted, a '>' starting a wrapped piece is the message's own text ('... when
                # P TP', '> D TP.'): removed only in front of a record
                unq = QUOTE.sub(b"", ln, count=1)
                if quoted or RECORD_START.match(unq):
                    ln = unq
            if (hard is not None and width and headed and ln.strip() and
                    ((len(prev) >= width and not RECORD_START.match(ln) and b'File "' not in prev) or
                     (joined is False and _EXC_START.match(ln) and _HEADER_ONLY.search(prev)))):
                hard += ln
                soft += b" " + ln.lstrip() if not soft.endswith(b" ") else ln.lstrip()
                joined = True
                prev = ln
                continue
            flush()
            hard, soft, rec_no, prev, joined = bytearray(ln), bytearray(ln), base + i + 1, ln, False
            headed = _headed(ln)
        flush()
        for lineno, text in out:
            alt = self.alternatives.get(lineno)
            if self._ac.find_matches_as_indexes(text) or (alt is not None and self._ac.find_matches_as_indexes(alt)):
                yield lineno, [text]  # the collector reads alternatives[lineno] while it handles this record
            self.alternatives.pop(lineno, None)

    def _continues(self, prev: bytes, nxt: bytes) -> bool:
        """Does physical line ``nxt`` continue the record of ``prev``?"""
        if self.container == "json":
            return prev.startswith(b'{"') and b'\\n"' not in prev and nxt.startswith(b'{"')
        if self.container == "ts":
            if CRI_PARTIAL.match(prev):
                return True
            s = nxt.rstrip(b"\r")
            return bool(s) and not TS_START.match(s) and not s.startswith(b"#")
        return False

    def _block(self, body: memoryview, nl: np.ndarray) -> Iterator[tuple[int, list[bytes]]]:
        """Candidate records of one block of whole lines (``body`` ends with ``\\n``; ``nl`` its newline offsets)."""
        if self.paste:
            yield from self._paste_block(body)
            return
        base = self.lines
        self.lines += len(nl)
        matches = self._ac.find_matches_as_indexes(body)
        if not matches:
            return
        n = len(body)
        done_to = 0  # end of the last record handed out (exclusive)
        starts = np.fromiter((m[1] for m in matches), dtype=np.int64, count=len(matches))
        line_idx = np.unique(np.searchsorted(nl, starts)).tolist()  # line index of each match inside the block
        nl_count = len(nl)
        nl = nl.tolist()
        for k in line_idx:
            start = nl[k - 1] + 1 if k else 0
            if start < done_to:
                continue
            ls = start
            le = nl[k] + 1 if k < nl_count else n
            lines = [bytes(body[ls:le - 1])]
            first = k
            if self.container:
                # walk back while this line continues the previous one (bounded, inside the block)
                while ls > done_to and len(lines) < MAX_JOIN:
                    ps = nl[first - 2] + 1 if first >= 2 else 0
                    prev = bytes(body[ps:ls - 1])
                    if not self._continues(prev, lines[0]):
                        break
                    lines.insert(0, prev)
                    ls = ps
                    first -= 1
                j = k + 1
                while le < n and len(lines) < MAX_JOIN:
                    ne = nl[j] + 1 if j < nl_count else n
                    nxt = bytes(body[le:ne - 1])
                    if not self._continues(lines[-1], nxt):
                        break
                    lines.append(nxt)
                    le = ne
                    j += 1
            done_to = le
            yield base + first + 1, lines
