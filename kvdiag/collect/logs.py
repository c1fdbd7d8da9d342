"""Read vLLM logs (V0 0.4–0.10 and V1 0.7–0.33 line formats) into a :class:`~kvdiag.bundle.Bundle`.

The file is read as a stream, one line at a time. Each line is cleaned (ANSI colour codes,
``docker logs -t`` / CRI timestamps, ``(EngineCore pid=N)`` process tags, ``[rankN]:``), its
header ``LEVEL MM-DD HH:MM:SS [file:line]`` parsed when present (the header moved from
``file:line]`` to ``[file:line]`` at 0.8, §2.1 of the reference), and the message matched against
the EVENTS registry below. Patterns are searched anywhere in the line, so headerless excerpts and
lines glued behind a ``\\r`` progress bar are read too.

Lines starting ``# [`` are editorial notes in the shared fixtures and are skipped (counted).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
import gzip
from pathlib import Path
import re
from typing import Callable, Iterator

from ..bundle import Bundle, InputInfo
from ..errors import InputError

GIB = 1024 ** 3
_UNITS = {"B": 1, "BYTES": 1, "KIB": 1024, "MIB": 1024 ** 2, "GIB": GIB, "TIB": 1024 ** 4,
          "KB": 1024, "MB": 1024 ** 2, "GB": GIB}

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# `docker logs -t` / CRI timestamp in front of a line: 2025-10-15T00:02:38.756689123Z [stdout F ]
CONTAINER_TS = re.compile(
    r"^(?P<ts>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d))\s+(?:(?:stdout|stderr)\s+[FP]\s+)?")
PROC_TAG = re.compile(r"^\((?P<proc>[A-Za-z_][\w]*(?: rank=\d+)? pid=\d+)\)\s*")
RANK_TAG = re.compile(r"^\[rank\d+\]:\s?")
HEADER = re.compile(
    r"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+(?:(?P<mon>\d\d)-(?P<day>\d\d)\s+"
    r"(?P<time>\d\d:\d\d:\d\d)\s+)?(?:\[(?P<file1>[\w./-]+):(?P<line1>\d+)\]|(?P<file2>[\w.-]+\.py):(?P<line2>\d+)\])\s?")
FRAME = re.compile(r'File "(?P<path>[^"]+)", line \d+, in (?P<func>[\w<>]+)')


def size_bytes(number: str, unit: str) -> float:
    """``"1002.00", "MiB"`` → bytes. Units as PyTorch and vLLM print them (GiB, MiB, KiB, bytes, GB)."""
    return float(number) * _UNITS[unit.upper()]


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
    ("sampler", re.compile(r"_dummy_sampler_run|/sample/sampler\.py|sampler\.py$")),
    ("cudagraph", re.compile(r"capture_model|_capture_cudagraphs|cuda_graph|cudagraph", re.I)),
    ("kv_alloc", re.compile(r"_allocate_kv_cache|_init_cache_engine|initialize_kv_cache|cache_engine\.py")),
    ("encoder", re.compile(r"get_multimodal_embeddings|_process_image_input|vision|visual|encoder", re.I)),
    ("profile", re.compile(r"profile_run|_dummy_run|determine_available_memory|determine_num_available_blocks")),
    ("runtime", re.compile(r"execute_model")),
    ("load", re.compile(r"load_model|load_weights|_initialize_model|build_model|create_weights|weight_loader|"
                        r"model_loader|lm_head|ParallelLMHead|VocabParallelEmbedding")),
]


def phase_of(frames: list[tuple[str, str]]) -> str:
    """Classify an OOM by its traceback frames (list of ``(path, function)``, outermost first).

    Returns the phase of the innermost frame that names one (``load``, ``profile``, ``kv_alloc``,
    ``cudagraph``, ``sampler``, ``encoder``, ``runtime``), or ``""`` when none does.
    """
    for path, func in reversed(frames):
        for phase, pattern in PHASE_FRAMES:
            if pattern.search(func) or pattern.search(path.rsplit("/", 1)[-1]):
                return phase
    return ""


# ------------------------------------------------------------------------------------------------
# The EVENTS registry: (id, pattern, handler). Handlers receive the match, the Line and the
# collector, and add observations. Ids follow shared/reference/vllm-observability.md §2.
_num = r"(-?\d+(?:\.\d+)?)"


class LogCollector:
    """Parse one or more log files into a bundle. Create once per bundle; call :meth:`read`."""

    def __init__(self, bundle: Bundle, year: int | None = None) -> None:
        self.bundle = bundle
        self.year = year
        self.segment = 0
        self._seen_startup = False
        self._frames: dict[str, list[tuple[str, str]]] = {}
        self._frames_line: dict[str, int] = {}
        self._name = ""
        self._obs_before = 0
        self.version: str | None = None
        self.formats: set[str] = set()
        self._after_startup_events: set[str] = set()

    # -- reading ---------------------------------------------------------------------------------
    def read(self, path: str) -> InputInfo:
        """Read one log file (plain or ``.gz``) and add its observations.

        Raises:
            InputError: the path is missing, a directory, unreadable, empty, or not text.
        """
        p = Path(path)
        if not p.exists():
            raise InputError(f"{path}: no such file")
        if p.is_dir():
            raise InputError(f"{path}: is a directory, expected a vLLM log file")
        info = InputInfo(kind="log", name=path)
        self._name = p.name
        self._frames.clear()
        self.segment = max(self.segment, 0)
        year = self.year or datetime.fromtimestamp(p.stat().st_mtime, tz=timezone.utc).year
        before = len(self.bundle)
        try:
            opener: Callable = gzip.open if path.endswith(".gz") else open
            with opener(path, "rb") as fh:
                self._read_stream(fh, info, year)
        except (OSError, EOFError, gzip.BadGzipFile) as exc:
            raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from exc
        if info.records == 0:
            raise InputError(f"{path}: empty file, expected vLLM log lines")
        info.observations = len(self.bundle) - before
        if self.version:
            info.notes.append(f"vLLM version {self.version}")
        if self.formats:
            info.notes.append("line format: " + ", ".join(sorted(self.formats)))
        if info.skipped:
            info.notes.append(f"skipped {info.skipped} editorial note line(s) starting '# ['")
        self.bundle.inputs.append(info)
        return info

    def _read_stream(self, fh, info: InputInfo, year: int) -> None:
        binary_lines = 0
        prev: Line | None = None
        container_style = False
        last_month = None
        year_now = year
        for lineno, raw in enumerate(fh, 1):
            info.records += 1
            if b"\x00" in raw:
                binary_lines += 1
                if binary_lines >= 3 and binary_lines * 2 >= info.records:
                    raise InputError(f"{info.name}:{lineno}: binary data, expected text log lines")
                continue
            text = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            if text.startswith("# ["):
                info.skipped += 1
                continue
            # A progress bar glued with \r: keep the last segment that holds a log header, else all.
            if "\r" in text:
                parts = [s for s in text.split("\r") if s.strip()]
                text = next((s for s in reversed(parts) if HEADER.search(s)), " ".join(parts))
            text = ANSI.sub("", text)
            t_container = None
            m = CONTAINER_TS.match(text)
            if m:
                container_style = True
                t_container = _parse_rfc3339(m.group("ts"))
                text = text[m.end():]
            elif container_style and prev is not None and text and not text.startswith("#"):
                # docker wrapped a long line: this physical line continues the previous record
                prev.msg += text
                continue
            if prev is not None:
                self._dispatch(prev)
                prev = None
            proc = ""
            m = PROC_TAG.match(text)
            if m:
                proc = m.group("proc")
                text = text[m.end():]
            text = RANK_TAG.sub("", text)
            level = ""
            t = t_container
            h = HEADER.search(text)
            if h:
                level = h.group("level")
                self.formats.add("V0 'file.py:N]' (0.4-0.7)" if h.group("file2") else "'[file:N]' (0.8+)")
                if t is None and h.group("mon"):
                    month = int(h.group("mon"))
                    if last_month is not None and month < last_month and last_month - month >= 6:
                        year_now += 1  # crossed New Year
                    last_month = month
                    try:
                        t = datetime.strptime(f"{year_now}-{h.group('mon')}-{h.group('day')} {h.group('time')}",
                                              "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc).timestamp()
                    except ValueError:
                        t = None
                text = text[h.end():]  # anything before the header is a glued progress bar
            prev = Line(lineno, t, proc, level, text)
        if prev is not None:
            self._dispatch(prev)

    # -- matching --------------------------------------------------------------------------------
    def _src(self, line: Line) -> str:
        return f"log:{self._name}:{line.lineno}"

    def _add(self, signal: str, value, line: Line, text: str = "") -> None:
        self.bundle.add(signal, value, self._src(line), t=line.t, text=text, segment=self.segment)

    def _new_segment(self, line: Line, why: str) -> None:
        if self._seen_startup and why in self._after_startup_events:
            self.segment += 1
            self._after_startup_events.clear()
        self._seen_startup = True
        self._after_startup_events.add(why)

    def _dispatch(self, line: Line) -> None:
        msg = line.msg
        key = line.proc or "main"
        fm = FRAME.search(msg)
        if fm:
            self._frames.setdefault(key, []).append((fm.group("path"), fm.group("func")))
            self._frames_line[key] = line.lineno
            return
        for _id, pattern, handler in EVENTS:
            m = pattern.search(msg)
            if m:
                handler(self, m, line)


def _parse_rfc3339(ts: str) -> float | None:
    ts = ts.replace("Z", "+00:00")
    m = re.match(r"(.*\d\d:\d\d:\d\d)(\.\d+)?(.*)", ts)
    if not m:
        return None
    frac = (m.group(2) or "")[:7]
    try:
        return datetime.fromisoformat(m.group(1) + frac + m.group(3)).timestamp()
    except ValueError:
        return None


# ---- handlers ----------------------------------------------------------------------------------
def _stats(c: LogCollector, m: re.Match, line: Line) -> None:
    """Periodic stats line (V0 engine/metrics.py, V1 v1/metrics/loggers.py; §2.5)."""
    msg = line.msg
    fields = {
        "prompt_throughput": r"Avg prompt throughput: ([\d.]+) tokens/s",
        "generation_throughput": r"Avg generation throughput: ([\d.]+) tokens/s",
        "num_requests_running": r"Running: (\d+) reqs",
        "num_requests_swapped": r"Swapped: (\d+) reqs",
        "num_requests_waiting": r"(?:Waiting|Pending): (\d+) reqs",
    }
    for signal, pat in fields.items():
        mm = re.search(pat, msg)
        if mm:
            c._add(signal, float(mm.group(1)), line)
    mm = re.search(r"(?<!CPU )\b(?:GPU|XPU|CPU|TPU|HPU|NPU|GPU \+ host) KV cache usage: ([\d.]+)%", msg)
    if mm:
        c._add("kv_cache_usage", float(mm.group(1)) / 100.0, line)
    mm = re.search(r"CPU KV cache usage: ([\d.]+)%", msg)
    if mm and "Swapped" in msg:
        c._add("cpu_cache_usage", float(mm.group(1)) / 100.0, line)
    mm = re.search(r"(?<!External )Prefix cache hit rate: ([\d.]+)%", msg)
    if mm:
        c._add("prefix_cache_hit_rate", float(mm.group(1)) / 100.0, line)
    mm = re.search(r"Preemptions: (\d+)", msg)
    if mm:
        # per-interval count (0.16+): accumulate into the counter
        prev = c.bundle.signal("num_preemptions")
        base = prev["value"].iloc[-1] if len(prev) else 0.0
        c._add("num_preemptions", base + float(mm.group(1)), line)


def _v0_prefix_rate(c: LogCollector, m: re.Match, line: Line) -> None:
    """V0 separate record 'Prefix cache hit rate: GPU: x%, CPU: y%' (cumulative since start)."""
    c._add("prefix_cache_hit_rate", float(m.group(1)) / 100.0, line)


def _preempt(c: LogCollector, m: re.Match, line: Line) -> None:
    """V0 WARNING, logged for the 1st, 51st, 101st ... preemption (§2.6); n is cumulative."""
    c._add("preemption_warning", 1, line, text=m.group(1))
    c._add("num_preemptions", float(m.group(2)), line)


def _weights(c: LogCollector, m: re.Match, line: Line) -> None:
    """W1 'Loading model weights took X GB' (GiB despite the name) / W2, W3 'Model loading took X GiB'."""
    c._new_segment(line, "weights")
    c._add("weights_bytes", float(m.group(1)) * GIB, line)
    c._add("startup_segments", 1, line, text="weights_loaded")


def _m1(c: LogCollector, m: re.Match, line: Line) -> None:
    """M1 'Memory profiling results: total_gpu_memory=..GiB ... kv_cache_size=..GiB gpu_memory_utilization=..'."""
    kv = dict(re.findall(r"(\w+)=(-?[\d.]+)(?:Gi?B|GIB)?", line.msg[m.start():]))
    mapping = {"total_gpu_memory": "gpu_total_bytes", "non_torch_memory": "non_torch_bytes",
               "kv_cache_size": "kv_cache_memory_bytes", "peak_torch_memory": "activation_peak_bytes"}
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
                        (r"Current kv cache memory in use is ([\d.]+) GiB", "kv_cache_memory_bytes")):
        mm = re.search(pat, rest)
        if mm:
            c._add(signal, float(mm.group(1)) * GIB, line)


def _blocks(c: LogCollector, m: re.Match, line: Line) -> None:
    """K1/K2/K3 '# GPU blocks: N, # CPU blocks: M' (V0; '# cuda blocks' 0.7-0.10)."""
    c._add("num_gpu_blocks", float(m.group(1)), line)
    if m.group(2) is not None:
        c._add("num_cpu_blocks", float(m.group(2)), line)


def _k4(c: LogCollector, m: re.Match, line: Line) -> None:
    """K4/K6 'GPU KV cache size: N tokens' (V1 0.8+)."""
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


def _e4(c: LogCollector, m: re.Match, line: Line) -> None:
    """E4 'Free memory on device (F/T GiB) on startup is less than desired GPU memory utilization (U, R GiB).'"""
    c._add("free_memory_below_request", 1, line)
    c._add("gpu_free_at_startup_bytes", float(m.group(1)) * GIB, line)
    c._add("gpu_total_bytes", float(m.group(2)) * GIB, line)


def _e6(c: LogCollector, m: re.Match, line: Line) -> None:
    """E6 'CUDA out of memory occurred when warming up sampler with N dummy requests.' (V1 0.8+)."""
    c._add("sampler_warmup_oom", 1, line)


def _traceback(c: LogCollector, m: re.Match, line: Line) -> None:
    """'Traceback (most recent call last):' — an uncaught exception (issue 6: a start-up that died without an OOM
    text)."""
    c._add("python_traceback", 1, line)


def _w4(c: LogCollector, m: re.Match, line: Line) -> None:
    """W4 'Failed to load model - not enough GPU memory.' (0.16+)."""
    c._add("weights_load_failed", 1, line)


def _oom(c: LogCollector, m: re.Match, line: Line) -> None:
    """PyTorch 'CUDA out of memory. Tried to allocate X. GPU i has a total capacity of T of which F is free. ...'
    (torch 2.1+ wording; 'capacty' typo in 2.1), §2.7. The phase comes from the traceback frames seen in the same
    process just before (or, without frames, from what the log shows happened before the OOM)."""
    msg = line.msg
    tried = size_bytes(m.group(1), m.group(2))
    total = size_bytes(m.group(3), m.group(4))
    free = size_bytes(m.group(5), m.group(6))
    key = line.proc or "main"
    frames = c._frames.get(key) or []
    if not frames:  # frames may sit under another tag (rank prefix vs none); take the most recent group
        if c._frames_line:
            last_key = max(c._frames_line, key=c._frames_line.get)
            if line.lineno - c._frames_line[last_key] < 200:
                frames = c._frames.get(last_key, [])
    phase = phase_of(frames)
    if not phase and "Error in model execution" in msg:
        phase = "runtime"
    if not phase and "sampler" in msg.lower():
        phase = "sampler"
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
        phase = _infer_phase(c, torch_alloc, total)
    c._add("cuda_oom", tried, line, text=phase or "unknown")
    c._frames.pop(key, None)


def _infer_phase(c: LogCollector, torch_alloc: float | None, total: float) -> str:
    """No traceback frames: if nothing in this start-up segment shows the weights loaded, the KV pool sized or a
    request served, and PyTorch holds ≥ 90 % of the GPU, the only large allocation so far is the weights."""
    df = c.bundle.frame()
    seg = df[df["segment"] == c.segment]
    later = {"weights_bytes", "kv_cache_memory_bytes", "num_gpu_blocks", "kv_cache_size_tokens",
             "kv_cache_usage", "num_requests_running", "activation_peak_bytes", "cudagraph_bytes"}
    if len(seg) and seg["signal"].isin(later).any():
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
    phase = phase_of(c._frames.get(key) or []) or _infer_phase(c, alloc, total)
    c._add("cuda_oom", size_bytes(m.group(1), m.group(2)), line, text=phase or "unknown")
    c._frames.pop(key, None)


def _version(c: LogCollector, m: re.Match, line: Line) -> None:
    """Version banner (0.33 'version 0.33.0'), 'vLLM API server version X', 'Initializing a V0 LLM engine (vX)'."""
    c.version = m.group(1)
    c._add("vllm_version", None, line, text=m.group(1))
    c._new_segment(line, "version")


def _args(c: LogCollector, m: re.Match, line: Line) -> None:
    """Engine-config / args Namespace / non-default args lines: a few settings kvdiag needs."""
    msg = line.msg
    pats = {
        "max_model_len": r"\bmax_(?:model|seq)_len['\"]?\s*[=:]\s*(\d+)",
        "gpu_memory_utilization": r"\bgpu_memory_utilization['\"]?\s*[=:]\s*([\d.]+)",
        "block_size": r"\bblock_size['\"]?\s*[=:]\s*(\d+)",
        "tensor_parallel_size": r"\btensor_parallel_size['\"]?\s*[=:]\s*(\d+)",
        "max_num_seqs": r"\bmax_num_seqs['\"]?\s*[=:]\s*(\d+)",
    }
    for signal, pat in pats.items():
        mm = re.search(pat, msg)
        if mm:
            c._add(signal, float(mm.group(1)), line)
    mm = re.search(r"\bkv_cache_dtype['\"]?\s*[=:]\s*'?([\w]+)", msg)
    if mm:
        c._add("cache_dtype", None, line, text=mm.group(1))
    mm = re.search(r"\benable_prefix_caching['\"]?\s*[=:]\s*(True|False)", msg)
    if mm:
        c._add("enable_prefix_caching", 1.0 if mm.group(1) == "True" else 0.0, line)


def _max_len(c: LogCollector, m: re.Match, line: Line) -> None:
    """'Using max model len N' (V1 config)."""
    c._add("max_model_len", float(m.group(1)), line)


def _measure_usage(c: LogCollector, m: re.Match, line: Line) -> None:
    """A reported measurement 'GPU KV cache usage 44.6% (~297 of 665 blocks)' (usage with the blocks behind it)."""
    c._add("kv_cache_usage", float(m.group(1)) / 100.0, line)
    c._add("num_blocks_used", float(m.group(2)), line)
    c._add("num_gpu_blocks", float(m.group(3)), line)


def _measure_pool(c: LogCollector, m: re.Match, line: Line) -> None:
    """A reported measurement 'pool: 1,096,153 tokens ... / 665 GPU blocks'."""
    c._add("kv_cache_size_tokens", float(m.group(1).replace(",", "")), line)
    if m.group(2):
        c._add("num_gpu_blocks", float(m.group(2).replace(",", "")), line)


def _measure_request(c: LogCollector, m: re.Match, line: Line) -> None:
    """A reported measurement 'one ~36k-token request: ...' / '3 ~8k-token requests: ...' (running set and its
    tokens)."""
    words = {"one": 1, "two": 2, "three": 3, "four": 4, "a": 1, "single": 1}
    n = words.get(m.group(1).lower()) or int(m.group(1))
    per = float(m.group(2).replace(",", "")) * (1000 if m.group(3) else 1)
    c._add("num_requests_running", n, line)
    c._add("context_tokens", n * per, line)


_SZ = r"([\d.]+) (GiB|MiB|KiB|bytes|GB|MB)"

EVENTS: list[tuple[str, re.Pattern, Callable]] = [
    ("stats", re.compile(r"Avg prompt throughput: [\d.]+ tokens/s|Iteration\(\d+\):.*KV cache usage"), _stats),
    ("v0_prefix_hit_rate", re.compile(r"Prefix cache hit rate: GPU: ([\d.]+)%"), _v0_prefix_rate),
    ("preemption", re.compile(r"is preempted by PreemptionMode\.(\w+) mode because there is not enough KV cache "
                              r"space.*total_num_cumulative_preemption=(\d+)"), _preempt),
    ("W1", re.compile(r"Loading model weights took ([\d.]+) GB"), _weights),
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
    ("E4", re.compile(r"Free memory on device (?:\S+ )?\(([\d.]+)/([\d.]+) GiB\) on startup is less than desired"),
     _e4),
    ("K1", re.compile(r"(?:#\s*)?(?:GPU|cuda|\w+) blocks: (\d+)(?:, # CPU blocks: (\d+))?"), _blocks),
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
    ("oom", re.compile(r"CUDA out of memory\. Tried to allocate " + _SZ + r"\. GPU \d+ has a total capac?i?ty of "
                       + _SZ + r" of which " + _SZ + r" is free"), _oom),
    ("oom_old", re.compile(r"CUDA out of memory\. Tried to allocate " + _SZ + r" \(GPU \d+; " + _SZ +
                           r" total capacity; " + _SZ + r" already allocated; " + _SZ + r" free"), _oom_old),
    ("version", re.compile(r"(?:vLLM API server version |Initializing an? (?:V[01] )?LLM engine \(v|"
                           r"█\s+version\s+)(\d+\.\d+[\w.+-]*)"), _version),
    ("args", re.compile(r"args: Namespace\(|with config: |non-default args: |max_parallel_loading_workers="), _args),
    ("max_len", re.compile(r"Using max model len (\d+)"), _max_len),
    # measurements an operator reported next to the log (incident write-ups), not vLLM lines
    ("measure_pool", re.compile(r"\bpool: ([\d,]+) tokens\b(?:.*?/ ([\d,]+) GPU blocks)?"), _measure_pool),
    ("measure_request", re.compile(r"\b(one|two|three|four|single|a|\d+) ~?([\d,.]+)(k?)-token requests?\b", re.I),
     _measure_request),
    ("measure_usage", re.compile(r"KV cache usage:? ([\d.]+)% \(~?(\d+) of (\d+) blocks\)"), _measure_usage),
]


def iter_log_paths(paths: list[str]) -> Iterator[str]:
    """Yield the given paths (kept as a hook for rotated-file ordering)."""
    yield from paths


def read_logs(bundle: Bundle, paths: list[str], year: int | None = None) -> list[InputInfo]:
    """Read several log files into ``bundle`` in the order given.

    Raises:
        InputError: a path is missing, a directory, empty or binary.
    """
    collector = LogCollector(bundle, year=year)
    return [collector.read(p) for p in iter_log_paths(paths)]


__all__ = ["LogCollector", "read_logs", "phase_of", "size_bytes", "EVENTS"]
