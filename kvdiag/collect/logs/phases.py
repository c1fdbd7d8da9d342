"""Stage 3 of the log reader, tracebacks and phases: which start-up step (``load``, ``profile``, ``kv_alloc``,
``cudagraph``, ``sampler``, ``encoder``, ``runtime``) a traceback's frames or the last phase marker name, and the
handlers of the exception / OOM lines that close a traceback (§2.7 of shared/reference/vllm-observability.md)."""

from __future__ import annotations

# ``LogCollector`` (:mod:`.collector`) is named in annotations only: the collector imports this module

import re

from .envelope import Line, size_bytes
from .identity import _model_name

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
# torch 2.1+ (c10/cuda/CUDACachingAllocator.cpp), only when above 0: 'with 2.52 GiB allocated in private pools (e.g.,
# CUDA Graphs),' — a paste wrapped in the middle is re-joined with a space before matching
_PRIVATE_POOLS = re.compile(r"with ([\d.]+) (\w+) allocated in private pools")


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
    mm = _PRIVATE_POOLS.search(msg)
    private = size_bytes(mm.group(1), mm.group(2)) if mm else None
    if private is not None:
        c._add("oom_private_pools_bytes", private, line)
    c._add("oom_free_bytes", free, line)
    mm = re.search(r"this process has ([\d.]+) (\w+) memory in use", msg)
    if mm:
        c._add("oom_process_in_use_bytes", size_bytes(mm.group(1), mm.group(2)), line)
    if not phase:
        phase = c._step.get(key, "") or _infer_phase(c, torch_alloc, total, private)
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


def _infer_phase(c: LogCollector, torch_alloc: float | None, total: float, private: float | None = None) -> str:
    """The phase of an OOM without traceback frames or phase marker, from its memory figures (bytes).

    * PyTorch holds memory in private pools (``private`` > 0, a small share of ``torch_alloc``): CUDA graphs were
      captured — vLLM captures them into a private pool (``vllm/compilation/cuda_graph.py`` ``CUDAGraphWrapper``,
      ``torch.cuda.graph(..., pool=self.graph_pool)``) in ``compile_or_warm_up_model``, after the weights loaded
      and the KV pool was allocated (``v1/worker/gpu_worker.py``) — so the OOM came while serving: ``runtime``.
      Not when the private pools hold most of PyTorch's memory: sleep mode loads the weights into a private pool
      of its own (``vllm/device_allocator/cumem.py``, ``use_memory_pool(tag="weights")``).
    * Else, if PyTorch holds ≥ 90 % of the GPU, the only large allocation so far is the weights: ``load``.

    Both only when nothing in this start-up segment shows the weights loaded, the KV pool sized or a request served
    (then ``""``: :func:`kvdiag.derive.core.oom_phase` settles the phase from the order of start-up steps)."""
    later = {"weights_bytes", "kv_cache_memory_bytes", "num_gpu_blocks", "kv_cache_size_tokens",
             "kv_cache_usage", "num_requests_running", "activation_peak_bytes", "peak_torch_memory_bytes",
             "cudagraph_bytes"}
    if c._segment_signals & later:
        return ""
    if private and torch_alloc and private < 0.5 * torch_alloc:
        return "runtime"
    if torch_alloc is not None and total > 0 and torch_alloc / total >= 0.90 and not private:
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

