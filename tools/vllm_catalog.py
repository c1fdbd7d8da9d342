#!/usr/bin/env python3
"""Regenerate kvdiag's catalogue of vLLM's memory-related messages from vLLM's released wheels.

For every minor release 0.4 → 0.33 on the package index (the newest patch of each minor), the wheel is
downloaded once into a cache directory outside the repository (``pip download --no-deps --only-binary :all:``),
its ``.py`` members are read with :mod:`zipfile` (never installed, never imported) and parsed with :mod:`ast`.
Collected:

* every ``raise X(...)`` with ``X`` ending in ``Error``/``Exception``, every ``assert cond, msg`` and every
  ``logger.debug/info/warning/warning_once/info_once/debug_once/error/exception/critical(...)`` whose text
  concerns memory, the KV cache, blocks, OOM, profiling, CUDA graphs, preemption/swap, the sampler warm-up,
  the encoder cache, max_model_len, gpu_memory_utilization or the Mamba/state cache; the message expression
  becomes a template with placeholders (f-strings with format specs, ``%``-formatting with the logger's
  arguments, ``.format(...)``, implicit and ``+`` concatenation, a message variable assigned earlier in the
  same function);
* the functions whose frames mark a start-up phase (``load_model``, ``profile_run``, ``_dummy_run``,
  ``_dummy_sampler_run``, ``capture_model``, ``determine_available_memory``, ``initialize_kv_cache``, ...);
* the progress-bar texts (``tqdm(..., desc=...)``) that mark phases.

Each message is mapped to a kvdiag event by the hand-written table ``kvdiag/catalog/event_map.yaml`` (first rule
whose regex matches the template wins; the numbers it carries are named there per placeholder).

Writes ``kvdiag/catalog/vllm_messages.json`` (versions as ranges, provenance: wheel file name and sha256 per
version) and prints per version the entries catalogued and, if the catalogue is wired into the log parser,
recognised by it (``tests/test_catalog_render.py`` measures that in every paste form).

Usage (one command; network to the package index on the first run only)::

    python tools/vllm_catalog.py                      # all minors 0.4-0.33, cache /work/wheels
    python tools/vllm_catalog.py --cache DIR --versions 0.9,0.33
    python tools/vllm_catalog.py --remap              # re-apply event_map.yaml to the checked-in JSON, no wheels
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import re
import string
import subprocess
import sys
import zipfile
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path

from packaging.version import InvalidVersion, Version

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
OUT = ROOT / "kvdiag" / "catalog" / "vllm_messages.json"
MAP = ROOT / "kvdiag" / "catalog" / "event_map.yaml"

FIRST_MINOR, LAST_MINOR = 4, 33
LOG_METHODS = {"debug", "info", "warning", "warn", "error", "exception", "critical", "fatal",
               "warning_once", "info_once", "debug_once", "error_once"}
LEVEL_OF = {"warn": "warning", "fatal": "critical", "exception": "error"}

# What a message must mention (its literal text, case-insensitive) to be catalogued.
RELEVANT = re.compile(
    r"memory|kv[ _-]?cache|(?:cache|gpu|cpu|free|kv|available|physical|allocated|#|num) blocks?\b|"
    r"blocks? (?:table|manager|pool|allocat)|block_manager|block[ _]size|num_\w*blocks|\boom\b|out of memory|OutOfMemory|"
    r"profil(?!er)|profiling|cuda ?graphs?|\bGB\b|cudagraph|graph captur|captur\w* (?:the )?(?:model|graph)|preempt|swap|"
    r"sampler|warm(?:ing)?[ -]?up|encoder[ _]cache|max_model_len|max model len|max[ _]seq[ _]len|"
    r"gpu_memory_utilization|memory utilization|mamba|state cache|ssm state|\bGiB\b|\bMiB\b",
    re.I)
# Placeholder names strong enough on their own (a message that only formats such a value).
RELEVANT_NAME = re.compile(r"kv_cache|gpu_memory|memory|num_gpu_blocks|max_model_len|GiB", re.I)
# ...but never these: torch profiler, tokenizer/LoRA/... that merely say 'block' or 'swap' in another sense
NOT_RELEVANT = re.compile(r"torch profiler|profiler (?:is|was|not)|VLLM_TORCH_PROFILER|layerwise profil|"
                          r"swap_space_bytes is deprecated", re.I)

TOPICS: list[tuple[str, re.Pattern]] = [
    ("oom", re.compile(r"out of memory|\boom\b|OutOfMemory|not enough (?:GPU )?memory", re.I)),
    ("preemption", re.compile(r"preempt|\bswap", re.I)),
    ("sampler", re.compile(r"sampler|pooler", re.I)),
    ("cuda_graph", re.compile(r"cuda ?graph|cudagraph|graph captur|captur\w* (?:the )?(?:model|graph)", re.I)),
    ("encoder_cache", re.compile(r"encoder[ _]cache|multi-?modal|encoder budget|mm_", re.I)),
    ("state_cache", re.compile(r"mamba|state cache|ssm|conv[ _]state", re.I)),
    ("kv_capacity", re.compile(r"kv[ _-]?cache|\bkv\b|\bblocks?\b|block[ _]size|num_gpu_blocks", re.I)),
    ("max_model_len", re.compile(r"max_model_len|max model len|max[ _]seq[ _]len|context length", re.I)),
    ("gpu_memory_utilization", re.compile(r"gpu_memory_utilization|memory utilization", re.I)),
    ("profiling", re.compile(r"profil|warm(?:ing)?[ -]?up", re.I)),
    ("memory", re.compile(r"memory|GiB|MiB", re.I)),
]

# Function names whose frames mark a start-up phase (matched against every def in the wheel).
PHASE_FUNCS = re.compile(
    r"^(?:load_model|load_weights|_initialize_model|initialize_model|profile_run|_dummy_run|_dummy_sampler_run|"
    r"_dummy_pooler_run|dummy_sampler_run|capture_model|_capture_cudagraphs|_capture_graphs|capture|"
    r"determine_available_memory|determine_num_available_blocks|initialize_kv_cache|initialize_cache|"
    r"_initialize_kv_caches|initialize_kv_cache_tensors|get_kv_cache_config|get_kv_cache_configs|get_kv_cache_spec|"
    r"_allocate_kv_cache|_allocate_kv_cache_tensors|_init_cache_engine|_init_cache|init_device|"
    r"compile_or_warm_up_model|_warm_up_model|warming_up_model|_warmup_\w+|warmup_model|"
    r"_execute_mm_encoder|execute_mm_encoder|get_multimodal_embeddings|_process_image_input|_process_video_input|"
    r"_process_audio_input|get_dummy_mm_data|get_dummy_encoder_data|_get_mm_dummy_batch|"
    r"get_encoder_dummy_data|get_decoder_dummy_data|profile_encoder\w*|\w*_profile_run|_profile_\w+|"
    r"execute_model|reinitialize_distributed|sleep|wake_up)$")

TQDM_NAMES = {"tqdm", "tqdm_asyncio", "trange"}

NUMERIC_SPEC = re.compile(r"[dfFeEgGn%xXob]$|,")
NUMERIC_NAME = re.compile(
    r"(?:^|_)(?:num|len|size|tokens?|blocks?|bytes|memory|mem|gib|mib|gb|util|utilization|seconds|secs|ratio|"
    r"count|concurrency|usage|free|total|peak|budget|capacity|elapsed|time)(?:_|$)|^(?:n|i|x)$", re.I)


# ------------------------------------------------------------------------------------------------
# templates: a list of parts, each a literal str or a Ph placeholder
class Ph:
    __slots__ = ("name", "spec", "conv")

    def __init__(self, name: str, spec: str = "", conv: str = "") -> None:
        self.name = name.replace("{", "(").replace("}", ")")
        self.spec = spec
        self.conv = conv

    def text(self) -> str:
        return "{" + self.name + ("!" + self.conv if self.conv else "") + (":" + self.spec if self.spec else "") + "}"


def _unparse(node: ast.AST) -> str:
    try:
        return ast.unparse(node)
    except Exception:  # noqa: BLE001 - very old syntax trees
        return "?"


def _merge(parts: list) -> list:
    out: list = []
    for p in parts:
        if isinstance(p, str):
            if not p:
                continue
            if out and isinstance(out[-1], str):
                out[-1] += p
                continue
        out.append(p)
    return out


_PCT = re.compile(r"%(?:\((?P<key>\w+)\))?(?P<flags>[#0\- +]*)(?P<width>\*|\d+)?(?:\.(?P<prec>\*|\d+))?[hlL]?"
                  r"(?P<type>[diouxXeEfFgGcrsa%])")


def _apply_percent(parts: list, args: list[ast.AST], resolve=None) -> list:
    """``'x %d y %.2f' % (a, b)`` / ``logger.info('x %d', a)`` → parts with placeholders named from the args."""
    dict_arg = args[0] if len(args) == 1 and isinstance(args[0], ast.Dict) else None
    out: list = []
    i = 0
    for p in parts:
        if not isinstance(p, str):
            out.append(p)
            continue
        pos = 0
        for m in _PCT.finditer(p):
            out.append(p[pos:m.start()])
            pos = m.end()
            t = m.group("type")
            if t == "%":
                out.append("%")
                continue
            if m.group("key") and dict_arg is not None:
                val = next((v for k, v in zip(dict_arg.keys, dict_arg.values)
                            if isinstance(k, ast.Constant) and k.value == m.group("key")), None)
                name = _unparse(val) if val is not None else m.group("key")
            elif i < len(args):
                arg = args[i]
                i += 1
                if t in "sa" and not m.group("width") and not m.group("prec"):
                    # logger.info("size: %s tokens", f"{n:,}") or a variable holding that f-string: its own parts
                    inner = resolve(arg) if resolve is not None else None
                    if inner is None and isinstance(arg, ast.JoinedStr):
                        inner = Templater({}).parts(arg, 0)
                    if inner is not None and any(isinstance(x, Ph) for x in inner):
                        out += inner
                        continue
                name = _unparse(arg)
            else:
                out.append(m.group(0))  # more specifiers than arguments: printed as written
                continue
            conv = "r" if t == "r" else ""
            ftype = "" if t in "sra" else ("d" if t in "iu" else t)
            spec = (m.group("flags") or "").replace("-", "<") + (m.group("width") or "") + \
                ("." + m.group("prec") if m.group("prec") else "") + ftype
            out.append(Ph(name, spec, conv))
        out.append(p[pos:])
    return _merge(out)


def _apply_format(parts: list, args: list[ast.AST], kwargs: dict[str, ast.AST]) -> list:
    """``'x {} y {name:.2f}'.format(a, name=b)`` → parts."""
    out: list = []
    auto = 0
    for p in parts:
        if not isinstance(p, str):
            out.append(p)
            continue
        try:
            pieces = list(string.Formatter().parse(p))
        except ValueError:
            out.append(p)
            continue
        for literal, field, spec, conv in pieces:
            out.append(literal)
            if field is None:
                continue
            head = re.match(r"\w*", field).group(0)
            rest = field[len(head):]
            if head == "":
                node = args[auto] if auto < len(args) else None
                auto += 1
            elif head.isdigit():
                node = args[int(head)] if int(head) < len(args) else None
            else:
                node = kwargs.get(head)
            name = (_unparse(node) if node is not None else head or "?") + rest
            out.append(Ph(name, spec or "", conv or ""))
    return _merge(out)


class Templater:
    """Turns a message expression into template parts, resolving a message variable assigned in the function."""

    def __init__(self, assigns: dict[str, list[tuple[int, ast.AST]]]) -> None:
        self.assigns = assigns

    def parts(self, node: ast.AST, lineno: int, depth: int = 0) -> list | None:
        if isinstance(node, ast.Constant):
            return [node.value] if isinstance(node.value, str) else None
        if isinstance(node, ast.JoinedStr):
            out: list = []
            for v in node.values:
                if isinstance(v, ast.Constant):
                    out.append(str(v.value))
                elif isinstance(v, ast.FormattedValue):
                    inner = None
                    if not v.format_spec and v.conversion in (-1, None, 115):
                        # a nested f-string or a message variable inside the f-string: inline its text
                        if isinstance(v.value, ast.JoinedStr):
                            inner = self.parts(v.value, lineno, depth)
                        elif isinstance(v.value, ast.Name) and depth < 3:
                            inner = self.parts(v.value, lineno, depth)
                    if inner is not None:
                        out += inner
                        continue
                    spec = ""
                    if v.format_spec is not None:
                        spec = "".join(str(x.value) if isinstance(x, ast.Constant) else "{" + _unparse(x.value) + "}"
                                       for x in v.format_spec.values)
                    conv = chr(v.conversion) if v.conversion and v.conversion > 0 else ""
                    out.append(Ph(_unparse(v.value), spec, conv))
            return _merge(out)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left = self.parts(node.left, lineno, depth)
            right = self.parts(node.right, lineno, depth)
            if left is None and right is None:
                return None
            return _merge((left if left is not None else [Ph(_unparse(node.left))]) +
                          (right if right is not None else [Ph(_unparse(node.right))]))
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
            left = self.parts(node.left, lineno, depth)
            if left is None:
                return None
            r = node.right
            args = list(r.elts) if isinstance(r, ast.Tuple) else [r]
            return _apply_percent(left, args)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format":
            base = self.parts(node.func.value, lineno, depth)
            if base is None:
                return None
            kwargs = {k.arg: k.value for k in node.keywords if k.arg}
            return _apply_format(base, list(node.args), kwargs)
        if isinstance(node, ast.Name) and depth < 3:
            cands = [v for ln, v in self.assigns.get(node.id, []) if ln <= lineno]
            if cands:
                return self.parts(cands[-1], lineno, depth + 1)
        return None


def template_text(parts: list) -> str:
    return "".join(p.replace("{", "{{").replace("}", "}}") if isinstance(p, str) else p.text() for p in parts)


def literal_text(parts: list) -> str:
    return " ".join(p for p in parts if isinstance(p, str))


def normalised(parts: list) -> str:
    """Template with placeholder names dropped (a renamed variable is the same message): ids and merging."""
    return "".join(re.sub(r"\s+", " ", p) if isinstance(p, str) else "{:" + p.spec + "}" for p in parts).strip()


def placeholder_type(ph: Ph) -> str:
    """``number`` (digits as Python prints them), ``text`` (anything) — what the compiled regex captures."""
    if ph.conv == "r":
        return "text"
    if ph.spec and NUMERIC_SPEC.search(ph.spec):
        return "number"
    last = re.split(r"[.\[(]", ph.name.replace(")", "").replace("]", ""))
    ident = next((x for x in reversed(last) if re.match(r"^[A-Za-z_]\w*$", x)), "")
    if re.match(r"^(?:len|int|float|round|format_gib|GiB|sum|max|min|math\.ceil|math\.floor)\(", ph.name) or "/ GiB" in ph.name or \
            "/ (1024" in ph.name or "GiB_bytes" in ph.name:
        return "number"
    if ident and NUMERIC_NAME.search(ident) and not re.search(r"(?:type|dtype|name|mode|config|spec|shape|str|"
                                                              r"list|layers?|device|keys?|ids?|groups?)$",
                                                              ident, re.I):
        return "number"
    return "text"


# ------------------------------------------------------------------------------------------------
class Collector(ast.NodeVisitor):
    """Walk one module: messages, phase-function definitions and progress-bar texts."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.stack: list[str] = []
        self.assign_stack: list[dict] = [defaultdict(list)]
        self.messages: list[dict] = []
        self.functions: list[dict] = []
        self.progress: list[dict] = []

    # scopes
    def _func(self, node) -> None:
        self.stack.append(node.name)
        if PHASE_FUNCS.match(node.name):
            self.functions.append({"name": node.name, "qualname": ".".join(self.stack), "file": self.path})
        assigns: dict = defaultdict(list)
        for sub in ast.walk(node):
            if isinstance(sub, ast.Assign) and len(sub.targets) == 1 and isinstance(sub.targets[0], ast.Name):
                assigns[sub.targets[0].id].append((sub.lineno, sub.value))
            elif isinstance(sub, ast.AnnAssign) and isinstance(sub.target, ast.Name) and sub.value is not None:
                assigns[sub.target.id].append((sub.lineno, sub.value))
        self.assign_stack.append(assigns)
        self.generic_visit(node)
        self.assign_stack.pop()
        self.stack.pop()

    visit_FunctionDef = _func
    visit_AsyncFunctionDef = _func

    def visit_ClassDef(self, node) -> None:
        self.stack.append(node.name)
        self.generic_visit(node)
        self.stack.pop()

    def _where(self) -> str:
        return ".".join(self.stack) or "<module>"

    def _add(self, kind: str, what: str, parts: list | None, node: ast.AST) -> None:
        if not parts or not any(isinstance(p, str) and p.strip() for p in parts):
            return
        self.messages.append({"kind": kind, "what": what, "parts": parts, "file": self.path,
                              "function": self._where(), "line": getattr(node, "lineno", 0)})

    def visit_Return(self, node: ast.Return) -> None:
        # the text of a result object vLLM logs whole (MemoryProfilingResult.__repr__ is the M4 line)
        if node.value is not None and self.stack and self.stack[-1] in ("__repr__", "__str__"):
            t = Templater(self.assign_stack[-1])
            self._add("repr", "", t.parts(node.value, node.lineno), node)
        self.generic_visit(node)

    def visit_Raise(self, node: ast.Raise) -> None:
        exc = node.exc
        if isinstance(exc, ast.Call):
            etype = _unparse(exc.func).rsplit(".", 1)[-1]
            if re.search(r"(?:Error|Exception|Exit)$", etype) and exc.args:
                t = Templater(self.assign_stack[-1])
                self._add("raise", etype, t.parts(exc.args[0], node.lineno), node)
        self.generic_visit(node)

    def visit_Assert(self, node: ast.Assert) -> None:
        if node.msg is not None:
            t = Templater(self.assign_stack[-1])
            self._add("assert", "AssertionError", t.parts(node.msg, node.lineno), node)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr in LOG_METHODS and node.args:
            owner = f.value
            oname = owner.id if isinstance(owner, ast.Name) else owner.attr if isinstance(owner, ast.Attribute) else ""
            if re.search(r"log", oname, re.I):
                t = Templater(self.assign_stack[-1])
                parts = t.parts(node.args[0], node.lineno)
                if parts is not None and len(node.args) > 1:
                    def resolve(arg, _t=t, _ln=node.lineno):
                        if isinstance(arg, (ast.JoinedStr, ast.Name)):
                            return _t.parts(arg, _ln)
                        return None
                    parts = _apply_percent(parts, list(node.args[1:]), resolve)
                level = f.attr.replace("_once", "")
                self._add("log", LEVEL_OF.get(level, level), parts, node)
        fname = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
        if fname in TQDM_NAMES:
            desc = next((k.value for k in node.keywords if k.arg == "desc"), None)
            if desc is not None:
                parts = Templater(self.assign_stack[-1]).parts(desc, node.lineno)
                if parts and any(isinstance(p, str) and p.strip() for p in parts):
                    self.progress.append({"parts": parts, "file": self.path, "function": self._where()})
        self.generic_visit(node)


# wheel members that never run in a server: tests and benchmark scripts shipped inside the package
SKIP_MEMBER = re.compile(r"(?:^|/)tests?/|/test_[^/]*\.py$|^vllm/benchmarks/")
_SCANNED: dict[tuple[str, str], tuple] = {}  # (member path, sha1 of its bytes) → results: unchanged files parse once


def scan_wheel(path: Path) -> tuple[list, list, list, int]:
    """Messages, phase functions and progress texts of one wheel's ``vllm/**.py`` members, and the member count."""
    msgs, funcs, progress, n = [], [], [], 0
    with zipfile.ZipFile(path) as z:
        for name in sorted(z.namelist()):
            if not name.endswith(".py") or not name.startswith("vllm/") or SKIP_MEMBER.search(name):
                continue
            raw = z.read(name)
            key = (name, hashlib.sha1(raw).hexdigest())
            n += 1
            if key not in _SCANNED:
                try:
                    tree = ast.parse(raw.decode("utf-8", errors="replace"), filename=name)
                except SyntaxError:
                    print(f"  {path.name}: {name}: not parsable with this Python, skipped", file=sys.stderr)
                    _SCANNED[key] = ([], [], [])
                    continue
                c = Collector(name)
                c.visit(tree)
                _SCANNED[key] = (c.messages, c.functions, c.progress)
            m, f, p = _SCANNED[key]
            msgs += m
            funcs += f
            progress += p
    return msgs, funcs, progress, n


# ------------------------------------------------------------------------------------------------
SCAN_VERSION = 5  # bump when the Collector changes: cached scans of older code are ignored


def _dump_parts(parts: list) -> list:
    return [p if isinstance(p, str) else {"ph": [p.name, p.spec, p.conv]} for p in parts]


def _load_parts(parts: list) -> list:
    return [p if isinstance(p, str) else Ph(*p["ph"]) for p in parts]


def scan_cached(whl: Path, cache: Path) -> tuple[list, list, list, int]:
    """:func:`scan_wheel` with its result kept beside the wheel (``scan-v{SCAN_VERSION}-{wheel}.json``)."""
    path = cache / f"scan-v{SCAN_VERSION}-{whl.name}.json"
    if path.exists():
        d = json.loads(path.read_text())
        for item in d["msgs"] + d["progress"]:
            item["parts"] = _load_parts(item["parts"])
        return d["msgs"], d["funcs"], d["progress"], d["n"]
    msgs, funcs, progress, n = scan_wheel(whl)
    dump = {"msgs": [{**m, "parts": _dump_parts(m["parts"])} for m in msgs], "funcs": funcs,
            "progress": [{**p, "parts": _dump_parts(p["parts"])} for p in progress], "n": n}
    path.write_text(json.dumps(dump))
    return msgs, funcs, progress, n


def index_versions() -> list[str]:
    """``pip index versions vllm`` → the newest release of each minor 0.4 ... 0.33, oldest first."""
    out = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "vllm"], capture_output=True,
                         text=True, check=True).stdout
    m = re.search(r"Available versions: (.*)", out)
    if not m:
        raise SystemExit("pip index versions vllm: no 'Available versions:' line in its output")
    best: dict[int, Version] = {}
    for s in m.group(1).split(","):
        try:
            v = Version(s.strip())
        except InvalidVersion:
            continue
        if v.is_prerelease or v.is_devrelease or v.release[0] != 0 or not FIRST_MINOR <= v.release[1] <= LAST_MINOR:
            continue
        if v.release[1] not in best or v > best[v.release[1]]:
            best[v.release[1]] = v
    return [str(best[k]) for k in sorted(best)]


def fetch(version: str, cache: Path) -> Path:
    found = sorted(cache.glob(f"vllm-{version}-*.whl"))
    if not found:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary", ":all:",
                        f"vllm=={version}", "-d", str(cache)], check=True)
        found = sorted(cache.glob(f"vllm-{version}-*.whl"))
    if not found:
        raise SystemExit(f"pip download vllm=={version}: no wheel in {cache}")
    return found[0]


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def minor(version: str) -> str:
    v = Version(version)
    return f"{v.release[0]}.{v.release[1]}"


def ranges(minors: list[str], order: list[str]) -> list[str]:
    """``['0.9', '0.10', '0.11', '0.14']`` (in the order of the covered versions) → ``['0.9-0.11', '0.14']``."""
    idx = sorted(order.index(m) for m in set(minors))
    out, start, prev = [], None, None
    for i in idx:
        if start is None:
            start = prev = i
        elif i == prev + 1:
            prev = i
        else:
            out.append(order[start] if start == prev else f"{order[start]}-{order[prev]}")
            start = prev = i
    if start is not None:
        out.append(order[start] if start == prev else f"{order[start]}-{order[prev]}")
    return out


def relevant(parts: list) -> bool:
    """Does the message concern memory, the KV cache, ... (:data:`RELEVANT`, or a placeholder named so)?"""
    lit = literal_text(parts)
    names = " ".join(p.name for p in parts if isinstance(p, Ph))
    return bool(RELEVANT.search(lit) or RELEVANT_NAME.search(names)) and not NOT_RELEVANT.search(lit)


def topic_of(text: str) -> str:
    for name, pat in TOPICS:
        if pat.search(text):
            return name
    return "memory"


def build(per_version: dict[str, tuple], order: list[str]) -> tuple[list, list, list]:
    msgs: dict[str, dict] = {}
    for ver in order:  # oldest first: the newest version's names and sources win
        for m in per_version[ver][0]:
            parts = m["parts"]
            if not relevant(parts):
                continue
            key = m["kind"] + ":" + m["what"] + "|" + normalised(parts)
            e = msgs.get(key)
            if e is None:
                e = msgs[key] = {"kind": m["kind"], "what": m["what"], "minors": [], "sources": {}}
            e["parts"] = parts
            if ver not in e["minors"]:
                e["minors"].append(ver)
            e["sources"].setdefault((m["file"], m["function"]), []).append(ver)
    messages = []
    for key, e in msgs.items():
        parts = e["parts"]
        text = template_text(parts)
        entry = {
            "id": hashlib.sha1(key.encode()).hexdigest()[:10],
            "kind": e["kind"],
            **({"level": e["what"]} if e["kind"] == "log" else
               {"exception": e["what"]} if e["kind"] in ("raise", "assert") else {}),
            "template": text,
            "placeholders": [{"name": p.name, "spec": p.spec, **({"conv": p.conv} if p.conv else {}),
                              "type": placeholder_type(p)} for p in parts if isinstance(p, Ph)],
            "topic": topic_of(literal_text(parts)),
            "versions": ranges(e["minors"], order),
            "sources": [{"file": f, "function": fn, "versions": ranges(vs, order)}
                        for (f, fn), vs in sorted(e["sources"].items(), key=lambda kv: -order.index(kv[1][-1]))],
        }
        messages.append(entry)
    messages.sort(key=lambda x: (x["topic"], x["template"]))

    funcs: dict[tuple, dict] = {}
    for ver in order:
        for f in per_version[ver][1]:
            e = funcs.setdefault((f["name"], f["file"]), {"name": f["name"], "qualname": f["qualname"],
                                                          "file": f["file"], "minors": []})
            e["qualname"] = f["qualname"]
            if ver not in e["minors"]:
                e["minors"].append(ver)
    functions = group_functions([{"name": e["name"], "qualname": e["qualname"], "file": e["file"],
                                  "minors": e["minors"]} for e in funcs.values()], order)

    progs: dict[str, dict] = {}
    for ver in order:
        for p in per_version[ver][2]:
            key = normalised(p["parts"])
            e = progs.setdefault(key, {"minors": [], "sources": {}})
            e["parts"] = p["parts"]
            if ver not in e["minors"]:
                e["minors"].append(ver)
            e["sources"].setdefault((p["file"], p["function"]), []).append(ver)
    progress = []
    for key, e in sorted(progs.items()):
        parts = e["parts"]
        progress.append({
            "id": hashlib.sha1(("progress|" + key).encode()).hexdigest()[:10],
            "template": template_text(parts),
            "placeholders": [{"name": p.name, "spec": p.spec, "type": placeholder_type(p)}
                             for p in parts if isinstance(p, Ph)],
            "versions": ranges(e["minors"], order),
            "sources": [{"file": f, "function": fn, "versions": ranges(vs, order)}
                        for (f, fn), vs in sorted(e["sources"].items(), key=lambda kv: -order.index(kv[1][-1]))],
        })
    return messages, functions, progress


MODEL_DIR = "vllm/model_executor/models/"


def group_functions(rows: list[dict], order: list[str]) -> list[dict]:
    """Per function name: the versions defining it, its files (the hundreds of model files collapsed into one
    ``vllm/model_executor/models/*`` row with a count) and the phase kvdiag gives such a frame today."""
    from kvdiag.collect.logs import phase_of  # read-only use: which phase kvdiag gives the frame today
    by_name: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_name[r["name"]].append(r)
    out = []
    for name in sorted(by_name):
        rs = by_name[name]
        files: list[dict] = []
        models = [r for r in rs if r["file"].startswith(MODEL_DIR)]
        for r in sorted((r for r in rs if not r["file"].startswith(MODEL_DIR)), key=lambda r: r["file"]):
            files.append({"file": r["file"], "qualname": r["qualname"], "versions": ranges(r["minors"], order)})
        if models:
            files.append({"file": MODEL_DIR + "*", "count": len(models),
                          "versions": ranges([m for r in models for m in r["minors"]], order)})
        out.append({"name": name, "versions": ranges([m for r in rs for m in r["minors"]], order),
                    "files": files, "kvdiag_phase": phase_of([("", name)])})
    return out


def apply_map(data: dict) -> None:
    """Give every message and progress text its event (and numbers) from ``event_map.yaml``."""
    from kvdiag.catalog.mapping import map_entry, map_progress
    for e in data["messages"]:
        e.update(map_entry(e))
    for p in data["progress"]:
        p.update(map_progress(p))


def write(data: dict) -> None:
    OUT.parent.mkdir(parents=True, exist_ok=True)
    # one entry per line: compact, and a diff shows which message changed
    with open(OUT, "w") as f:
        f.write("{\n")
        keys = list(data)
        for i, k in enumerate(keys):
            v = data[k]
            comma = "," if i < len(keys) - 1 else ""
            if isinstance(v, list):
                f.write(f"{json.dumps(k)}: [\n")
                for j, item in enumerate(v):
                    f.write(json.dumps(item, ensure_ascii=False, separators=(",", ":")) +
                            ("," if j < len(v) - 1 else "") + "\n")
                f.write(f"]{comma}\n")
            else:
                f.write(f"{json.dumps(k)}: {json.dumps(v, ensure_ascii=False)}{comma}\n")
        f.write("}\n")


DOC = ROOT / "docs" / "catalog.md"


def _replace_section(doc: str, name: str, body: str) -> str:
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    if begin not in doc or end not in doc:
        return doc
    head, rest = doc.split(begin, 1)
    return head + begin + "\n" + body + "\n" + end + rest.split(end, 1)[1]


def write_doc(data: dict) -> None:
    """Fill the generated sections of docs/catalog.md: entries per version, topics, events, phases, progress."""
    if not DOC.exists():
        return
    from kvdiag import catalog
    from kvdiag.catalog.mapping import marker, table
    minors = [v["minor"] for v in data["versions"]]
    rows = ["| vLLM | wheel | sha256 (first 12) | .py files | entries | raise/assert | log |",
            "|---|---|---|---:|---:|---:|---:|"]
    for v in data["versions"]:
        es = [e for e in data["messages"] if v["minor"] in catalog.expand(e["versions"], minors)]
        rows.append(f"| {v['version']} | `{v['wheel']}` | `{v['sha256'][:12]}` | {v['py_files']} | {len(es)} | "
                    f"{sum(e['kind'] != 'log' for e in es)} | {sum(e['kind'] == 'log' for e in es)} |")
    rows.append(f"\n{len(data['messages'])} distinct templates over {len(minors)} versions; "
                f"{len(data['phase_functions'])} phase function names; {len(data['progress'])} progress texts.")
    doc = DOC.read_text()
    doc = _replace_section(doc, "versions", "\n".join(rows))
    topics: dict[str, int] = defaultdict(int)
    for e in data["messages"]:
        topics[e["topic"]] += 1
    doc = _replace_section(doc, "topics", "| topic | entries |\n|---|---:|\n" + "\n".join(
        f"| {t} | {n} |" for t, n in sorted(topics.items(), key=lambda kv: -kv[1])))
    events: dict[str, list] = defaultdict(list)
    for e in data["messages"]:
        events[e["event"]].append(e)
    t = table()
    erows = ["| event | kind | entries | numbers (placeholder → signal, unit) | example template |",
             "|---|---|---:|---|---|"]
    for ev in sorted(events, key=lambda k: (k not in t["markers"], k)):
        es = events[ev]
        kind = "EVENTS" if ev in t["markers"] else "proposed" if ev in t["proposed"] else "generic"
        nums = sorted({f"{n['field']} ({n['unit']})" for e in es for n in e["numbers"]})
        ex = min(es, key=lambda e: len(e["template"]))["template"].replace("|", "\\|").replace("\n", " ")
        ex = ex if len(ex) <= 100 else ex[:97] + "..."
        erows.append(f"| {ev} | {kind} | {len(es)} | {', '.join(nums)} | `{ex}` |")
    doc = _replace_section(doc, "events", "\n".join(erows))
    prow = ["| function | versions | files | kvdiag phase today |", "|---|---|---|---|"]
    for f in data["phase_functions"]:
        files = ", ".join(x["file"].replace("vllm/", "") + (f" ({x['count']})" if "count" in x else "")
                          for x in f["files"][:4]) + (f", +{len(f['files']) - 4}" if len(f["files"]) > 4 else "")
        prow.append(f"| `{f['name']}` | {', '.join(f['versions'])} | {files} | {f['kvdiag_phase'] or '—'} |")
    doc = _replace_section(doc, "phases", "\n".join(prow))
    grow = ["| progress text | versions | file | phase |", "|---|---|---|---|"]
    for p in data["progress"]:
        grow.append(f"| `{p['template'].replace('|', '/')}` | {', '.join(p['versions'])} | "
                    f"{p['sources'][0]['file'].replace('vllm/', '')} | {p.get('phase') or '—'} |")
    doc = _replace_section(doc, "progress", "\n".join(grow))
    DOC.write_text(doc)


def recognised_now(cat) -> dict[str, str] | None:
    """Entry id → '' (recognised) or the reason, for the V1 paste form, with the log parser as it is
    (tests/test_catalog_render.py does every form); None when the harness cannot be loaded."""
    import importlib.util
    import tempfile
    path = ROOT / "tests" / "test_catalog_render.py"
    try:
        spec = importlib.util.spec_from_file_location("catalog_render", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    except Exception as e:  # noqa: BLE001 - a report nicety, not the catalogue
        print(f"  (recognised: not measured, {path.name} not loadable: {e})", file=sys.stderr)
        return None
    with tempfile.TemporaryDirectory() as tmp:
        return mod.run_form("v1", cat, Path(tmp))


def report(data: dict) -> None:
    from kvdiag import catalog
    cat = catalog.Catalog(data)
    rec = recognised_now(cat)
    print(f"{'minor':>6} {'version':>12} {'py files':>8} {'entries':>7} {'mapped':>6} {'recognised (V1 form)':>21}")
    for v in data["versions"]:
        entries = cat.entries_of(v["minor"])
        mapped = sum(1 for e in entries if e["rule"])
        if rec is None:
            rec_s = "n/a"
        else:
            ids = [e["id"] for e in entries if e["id"] in rec]
            rec_s = f"{sum(1 for i in ids if not rec[i])}/{len(ids)}"
        print(f"{v['minor']:>6} {v['version']:>12} {v['py_files']:>8} {len(entries):>7} {mapped:>6} {rec_s:>21}")
    print(f"distinct templates: {len(data['messages'])}; matchable (needle of 4+ chars): {len(cat.entries)}; "
          f"phase functions: {len(data['phase_functions'])}; progress texts: {len(data['progress'])}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", default="/work/wheels", help="wheel cache directory (outside the repository)")
    ap.add_argument("--versions", help="comma-separated minors (0.9,0.33) or versions; default: all on the index")
    ap.add_argument("--remap", action="store_true", help="re-apply event_map.yaml to the checked-in JSON only")
    args = ap.parse_args(argv)
    if args.remap:
        data = json.loads(OUT.read_text())
        apply_map(data)
        write(data)
        write_doc(data)
        report(data)
        return 0
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    versions = index_versions()
    if args.versions:
        want = {w.strip() for w in args.versions.split(",")}
        versions = [v for v in versions if v in want or minor(v) in want]
    order = [minor(v) for v in versions]
    per_version: dict[str, tuple] = {}
    prov = []
    for v in versions:
        whl = fetch(v, cache)
        msgs, funcs, progress, n = scan_cached(whl, cache)
        per_version[minor(v)] = (msgs, funcs, progress)
        prov.append({"minor": minor(v), "version": v, "wheel": whl.name, "sha256": sha256(whl), "py_files": n})
        print(f"  {v}: {n} .py files, {len(msgs)} messages, {len(funcs)} phase functions, "
              f"{len(progress)} progress texts", file=sys.stderr)
    messages, functions, progress = build(per_version, order)
    data = {
        "schema": 1,
        "generator": "tools/vllm_catalog.py",
        "generated": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "source": "vLLM wheels from the package index (pip download --no-deps --only-binary :all:), .py members "
                  "read with zipfile and parsed with ast; never installed",
        "versions": prov,
        "messages": messages,
        "phase_functions": functions,
        "progress": progress,
    }
    apply_map(data)
    write(data)
    write_doc(data)
    report(data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
