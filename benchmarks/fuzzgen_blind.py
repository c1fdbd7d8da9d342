"""Blind fuzz generators for issue 29: every command and input kind of kvdiag, written from the outside.

Written without reading kvdiag's input-handling code: only README.md, docs/, each command's ``--help``, the example
inputs under fixtures/ and rules/, and vLLM's formats (the observability reference, Prometheus text / OpenMetrics).

Same form as ``tests/fuzzgen.py``: ``FAMILIES = {name: (gen, run)}`` with ``gen(rng) -> bytes`` and
``run(data, tmp, judge) -> outcome``. An input is one *case*: a JSON document with the command line (``argv``), the
files it reads (``files``), what the loopback HTTP server answers (``serve``) and optional standard input. The
runner writes the files under ``tmp/case/``, serves the answers on 127.0.0.1, calls the real entry point in-process
(``kvdiag.cli.main``, the only kvdiag name imported) with stdout / stderr captured, and applies the oracles:

``ok``            exit code 0/1/2 (a verdict), all oracles hold
``refused``       exit code 3 (could not judge), all oracles hold
``uncaught``      an exception escaped the entry point without ``--debug`` (or a non-kvdiag one with it)
``traceback``     "Traceback (most recent call last)" in stdout / stderr without ``--debug``
``internal_error`` the text "internal error" anywhere in stdout / stderr
``exit_code``     an exit code outside the command's documented set (README / ``--help``; 130 is not expected)
``debug_exit``    with ``--debug`` the entry point raised instead of returning its exit code
``leak``          a planted secret in stdout, stderr, a traceback or any file the run wrote
``clobbered``     an input file (token, CA bundle, rule file, log, a foreign --state file) was overwritten
``template``      a rule title's Go template text exported verbatim into a Prometheus rule file
``html``          an HTML report with a script or a remote reference
``slow``          one input took longer than ``SLOW_S`` seconds (default 10)

``LAST_FINDING`` holds a one-line description of the last violation (the campaign saves it with the input).
Replay a saved input: ``python benchmarks/fuzzgen_blind.py replay FILE.input``.
"""

from __future__ import annotations

import base64
import gzip
import io
import json
import os
import random
import re
import shutil
import sys
import threading
import time
import traceback
from functools import lru_cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
SLOW_S = float(os.environ.get("KVDIAG_FUZZ_SLOW_S", "10"))
LAST_FINDING = ""
LAST_STDERR = ""

# --------------------------------------------------------------------------------------------------- secrets
# Each planted secret has a unique needle (the part that must never come out) and a text in one of the forms the
# README promises to redact: api_key=…, --api-key, bearer tokens, HF_TOKEN, AWS keys and key ids, X-Amz-Signature,
# *SECRET* / *KEY* / *PASSWORD* names, URL userinfo and every URL query value (JWTs among them).

_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"


def _needle(i: int, n: int = 20, alphabet: str = _B64) -> str:
    r = random.Random(f"needle:{i}")
    if alphabet != _B64:  # a key id or signature of exactly n characters of its alphabet (AKIA + 16, 64 hex)
        return "".join(r.choice(alphabet) for _ in range(n))
    return f"Qz{i:02d}" + "".join(r.choice(alphabet) for _ in range(n - 4))


def _jwt(i: int) -> tuple[str, str]:
    payload = base64.urlsafe_b64encode(json.dumps({"sub": f"fuzz{i}", "k": _needle(i, 12)}).encode()).decode()
    payload = payload.rstrip("=")
    return f"eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.{payload}.{_needle(i + 500, 32)}", payload


_FORMS = [
    ("api_key", lambda n: f"api_key={n}"),
    ("cli_api_key", lambda n: f"--api-key {n}"),
    ("bearer", lambda n: f"Authorization: Bearer {n}"),
    ("hf_token", lambda n: f"HF_TOKEN=hf_{n}"),
    ("aws_secret", lambda n: f"AWS_SECRET_ACCESS_KEY={n}wJalrXUtnFEMI/K7MDENG"),
    ("aws_key_id", None),
    ("amz_signature", None),
    ("url_userinfo", lambda n: f"http://admin:{n}@10.1.2.3:8000/metrics"),
    ("url_query", lambda n: f"https://vllm.example.com:8443/metrics?token={n}"),
    ("jwt_query", None),
    ("openai_key", lambda n: f"OPENAI_API_KEY=sk-proj-{n}"),
    ("password", lambda n: f"DB_PASSWORD={n}"),
    ("dict_api_key", lambda n: f"'api_key': '{n}'"),
    ("secret_name", lambda n: f"MY_SERVICE_SECRET={n}"),
]


def _build_secrets() -> list[tuple[str, str, str]]:
    out = []
    for i in range(70):
        form, make = _FORMS[i % len(_FORMS)]
        if form == "aws_key_id":
            needle = _needle(i, 16, "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567")
            out.append((form, f"AKIA{needle}", needle))
        elif form == "amz_signature":
            needle = _needle(i, 64, "0123456789abcdef")
            out.append((form, f"X-Amz-Signature={needle}", needle))
        elif form == "jwt_query":
            token, payload = _jwt(i)
            out.append((form, f"https://gw.example.com/metrics?jwt={token}", payload))
        else:
            needle = _needle(i)
            out.append((form, make(needle), needle))
    return out


SECRETS = _build_secrets()            # (form, planted text, needle)
NEEDLES = [s[2] for s in SECRETS]
URL_SECRETS = [s for s in SECRETS if s[0] in ("url_userinfo", "url_query", "jwt_query")]


def _secret(rng: random.Random, forms: tuple[str, ...] = ()) -> tuple[str, str, str]:
    pool = [s for s in SECRETS if not forms or s[0] in forms]
    return rng.choice(pool)


# --------------------------------------------------------------------------------------------------- hostile values
HUGE_INTS = ["9" * 4400, "1" + "0" * 400, "-" + "7" * 4301, "18446744073709551616", "9" * 30, "1" + "0" * 4300]
ODD_NUMBERS = HUGE_INTS + ["1e999", "-1e999", "NaN", "nan", "+Inf", "-Inf", "Infinity", "-0", "0x10", "1_000", "1.2.3",
                           "١٢٣", "", " ", "-", "e5", "1e", ".", "4.9e-324", "1.7976931348623157e309", "-1", "0",
                           "1e308", "1,5", "+5", "0.0000001", "99999999999999999999.5"]
JSON_ODD = ["NaN", "Infinity", "-Infinity", "9" * 4400, "1" + "0" * 400, "1e999", "-1", "0", "null", "true", '"12"',
            "[]", "{}", '"x"', "1.5", "-0.0", "2147483648", "1e-400", '"' + "A" * 5000 + '"']
YEAR_TS = ["0001-01-01T00:00:00.000000000Z", "9999-12-31T23:59:59.999999999Z", "1970-01-01T00:00:00Z",
           "2286-11-20T17:46:40Z", "2200-01-01T00:00:00Z", "2038-01-19T03:14:08Z", "0000-00-00T00:00:00Z",
           "2026-02-30T25:61:61Z", "2026-05-11T09:31:12.123456789+14:00", "2026-05-11T09:31:12Z"]
UNIX_ODD = ["-62135596800", "253402300799", "1e20", "NaN", "-1", "0", "9" * 400, "1778491854.3", "1e999", "+Inf",
            "32503680000", "7258118400"]
JUNK = ["\r", "\x1b[31m", "\x00", "{", "}", '"', "\\", "\udcff", "\t", "’", "\u202e", "\ufeff", "{{", "}}", "%s", "%n",
        "<script>alert(1)</script>", "</svg>", "&#x3c;", "\u2028", "é" * 3, "\x7f", "'"]
GO_TEMPLATES = ['{{ query "kvdiagPWN" | first | value }}', '{{ range query "kvdiagPWN" }}{{ . }}{{ end }}',
                '{{ $labels.kvdiagPWN }}', '{{ template "kvdiagPWN" }}', '{{- /* kvdiagPWN */ -}}',
                '{{ "kvdiagPWN" | safeHtml }}', '{{ with query "kvdiagPWN" }}x{{ end }}']
DURATIONS_ODD = ["0s", "-1s", "1e999s", "9" * 400 + "s", "NaNs", "1y", "5m", "1h", "366d", "367d", "100ms", "99ms",
                 "1.5s", "", "s", "1", "7d", "8d", "1m1s", "\x00"]


def _odd(rng: random.Random) -> str:
    return rng.choice(ODD_NUMBERS)


def _mutate_numbers(rng: random.Random, text: str, k: int) -> str:
    spans = [m.span() for m in re.finditer(r"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?", text[:200000])]
    for _ in range(min(k, len(spans))):
        a, b = rng.choice(spans)
        text = text[:a] + _odd(rng) + text[b:]
        spans = [m.span() for m in re.finditer(r"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?", text[:200000])]
        if not spans:
            break
    return text


def _mutate_chars(rng: random.Random, text: str, n: int) -> str:
    for _ in range(n):
        if not text:
            break
        i = rng.randrange(len(text))
        op = rng.random()
        if op < 0.4:
            text = text[:i] + rng.choice(JUNK) + text[i:]
        elif op < 0.7:
            text = text[:i] + text[i + rng.randint(1, 40):]
        else:
            j = rng.randrange(len(text))
            text = text[:i] + text[j:j + rng.randint(1, 60)] + text[i:]
    return text


def _deep_json(rng: random.Random) -> str:
    depth = rng.choice([100, 1000, 5000, 50000])
    kind = rng.random()
    if kind < 0.5:
        return "[" * depth + "1" + "]" * depth
    return '{"a":' * depth + "1" + "}" * depth


def _nest_yaml(rng: random.Random) -> str:
    depth = rng.choice([200, 2000, 20000])
    return "[" * depth + "1" + "]" * depth


def _billion_laughs() -> str:
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for k in range(1, 10):
        lines.append(f"a{k}: &a{k} [" + ",".join([f"*a{k - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------------- seeds
def _read(p: Path) -> str:
    data = p.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return data.decode("utf-8", "replace")


@lru_cache(maxsize=None)
def seed_logs() -> tuple[str, ...]:
    paths = sorted(FIXTURES.glob("incidents/*/*.log")) + sorted(FIXTURES.glob("series/*/vllm.log"))
    paths += sorted(FIXTURES.glob("diff/*/*.log")) + sorted(FIXTURES.glob("lab/*/vllm.log"))
    paths += sorted(p for p in FIXTURES.glob("logs/real/*/*") if p.is_file() and p.suffix in (".log", ".txt", ""))
    out = []
    for p in paths:
        try:
            text = _read(p)
        except OSError:
            continue
        if text.strip():
            out.append(text[:400_000])
    return tuple(out)


@lru_cache(maxsize=None)
def seed_pages() -> tuple[str, ...]:
    paths = sorted(FIXTURES.glob("metrics/*.prom"))
    for d in sorted(FIXTURES.glob("series/vllm033_*/metrics")):
        paths += sorted(d.glob("*.prom"))[::12]
    return tuple(_read(p) for p in paths)


@lru_cache(maxsize=None)
def seed_series_pages() -> tuple[tuple[tuple[str, ...], tuple[str, ...]], ...]:
    """(pages, times.csv rows) per series folder."""
    out = []
    for d in sorted(FIXTURES.glob("series/vllm033_*")):
        pages = tuple(_read(p) for p in sorted((d / "metrics").glob("*.prom")))
        times = tuple((d / "times.csv").read_text().splitlines())
        out.append((pages, times))
    return tuple(out)


@lru_cache(maxsize=None)
def seed_recordings() -> tuple[str, ...]:
    out = [_read(p) for p in sorted(FIXTURES.glob("series/forecast/*.om"))]
    for p in sorted(FIXTURES.glob("lab/*/recording.om.gz"))[:6]:
        lines = [ln for ln in _read(p).splitlines() if ln.startswith(("vllm", "# TYPE vllm", "# HELP vllm"))
                 or ln.startswith("# EOF")]
        out.append("\n".join(lines[:3000]) + "\n")
    return tuple(o[:600_000] for o in out)


@lru_cache(maxsize=None)
def seed_configs() -> tuple[str, ...]:
    paths = sorted(FIXTURES.glob("models/*.json")) + sorted(FIXTURES.glob("capacity/configs/*.json"))
    paths += sorted(FIXTURES.glob("simulate/*.json"))
    return tuple(p.read_text() for p in paths)


@lru_cache(maxsize=None)
def seed_rules() -> tuple[tuple[str, str], ...]:
    return tuple((p.stem.split("-")[0], p.read_text()) for p in sorted((ROOT / "rules").glob("*/*.yaml")))


@lru_cache(maxsize=None)
def seed_cases() -> tuple[tuple[str, str], ...]:
    return tuple((p.stem, p.read_text()) for p in sorted((ROOT / "rules").glob("*/cases/*.yaml")))


@lru_cache(maxsize=None)
def seed_workloads() -> tuple[dict, ...]:
    out = []
    for p in sorted(FIXTURES.glob("series/*/workload.json")) + sorted(FIXTURES.glob("simulate/*/workload.json")):
        out.append(json.loads(p.read_text()))
    return tuple(out)


@lru_cache(maxsize=None)
def seed_truths() -> tuple[dict, ...]:
    out = []
    for p in sorted(FIXTURES.glob("series/*/truth.json")) + sorted(FIXTURES.glob("simulate/*/truth.json")):
        out.append(json.loads(p.read_text()))
    return tuple(out)


# --------------------------------------------------------------------------------------------------- case encoding
def _case(argv: list[str], files: dict[str, bytes | str] | None = None, serve: dict | None = None,
          stdin: bytes | None = None, keep: tuple[str, ...] = ()) -> bytes:
    enc = {}
    for name, body in (files or {}).items():
        raw = body.encode("utf-8", "surrogateescape") if isinstance(body, str) else body
        try:
            enc[name] = {"t": raw.decode("utf-8")}
        except UnicodeDecodeError:
            enc[name] = {"b": base64.b64encode(raw).decode()}
    doc = {"argv": argv, "files": enc}
    if serve:
        doc["serve"] = {k: [_enc_answer(a) for a in v] for k, v in serve.items()}
    if stdin is not None:
        doc["stdin"] = base64.b64encode(stdin).decode()
    if keep:
        doc["may_change"] = list(keep)
    return json.dumps(doc).encode()


def _enc_answer(a) -> dict:
    status, headers, body = a[0], a[1], a[2]
    delay = a[3] if len(a) > 3 else 0.0
    raw = body.encode("utf-8", "surrogateescape") if isinstance(body, str) else body
    return {"status": status, "headers": headers, "b": base64.b64encode(raw).decode(), "delay": delay}


def _dec_file(v: dict) -> bytes:
    return v["t"].encode("utf-8") if "t" in v else base64.b64decode(v["b"])


def _fmt(rng: random.Random, formats=("text", "json", "markdown", "html")) -> list[str]:
    f = rng.choice(formats)
    if f == "html" or rng.random() < 0.3:
        return ["--format", f, "--output", "@T/out." + f]
    return ["--format", f]


def _maybe_debug(rng: random.Random, argv: list[str], p: float = 0.15) -> list[str]:
    return ["--debug", *argv] if rng.random() < p else argv


# --------------------------------------------------------------------------------------------------- logs
_LOG_HDRS = ["(APIServer pid=12) INFO 05-11 09:31:12 [api_server.py:1] ", "INFO 05-11 09:31:12 api_server.py:1] ",
             "(EngineCore_DP0 pid=272) ERROR 05-11 09:31:12 [core.py:700] ", "WARNING 12-31 23:59:59 arg_utils.py:9] ",
             "(VllmWorker rank=0 pid=300) INFO 01-01 00:00:00 [gpu_worker.py:1] ", ""]
_LOG_SECRET_LINES = [
    "non-default args: {{'model': 'Qwen/Qwen2.5-7B-Instruct', {s}, 'max_model_len': 32768}}",
    "vLLM API server version 0.11.0 args: Namespace(host=None, port=8000, {s}, model='x')",
    "Environment: {s}",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. {s}",
    "Error in preprocessing prompt inputs: {s} KV cache usage: 99%",
    "Connecting to {s}",
    "Received request with header {s}",
    "ERROR: out of memory while handling {s}",
    "Loading weights from {s}",
    "preempt: request {s} was preempted (no available blocks)",
]
_ODD_LOG_LINES = [
    "GPU KV cache size: {n} tokens", "Maximum concurrency for {n} tokens per request: {n}x",
    "Available KV cache memory: {n} GiB", "# GPU blocks: {n}, # CPU blocks: {n}",
    "Engine 000: Avg prompt throughput: {n} tokens/s, Avg generation throughput: {n} tokens/s, Running: {n} reqs, "
    "Waiting: {n} reqs, GPU KV cache usage: {n}%, Prefix cache hit rate: {n}%",
    "Model loading took {n} GiB and {n} seconds", "Memory profiling takes {n} seconds",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {n} GiB. GPU 0 has a total capacity of {n} GiB "
    "of which {n} MiB is free. Including non-PyTorch memory, this process has {n} GiB memory in use.",
    "Sequence group 1 is preempted by PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. "
    "total_num_cumulative_preemption={n}",
    "The model's max seq len ({n}) is larger than the maximum number of tokens that can be stored in KV cache ({n}).",
    "non-default args: {{'max_model_len': {n}, 'gpu_memory_utilization': {n}, 'tensor_parallel_size': {n}}}",
    "Capturing CUDA graphs (decode, FULL): {n}/35",
]


def _log_text(rng: random.Random, lines_max: int = 300) -> str:
    text = rng.choice(seed_logs())
    lines = text.splitlines()
    if len(lines) > lines_max and rng.random() < 0.8:
        a = rng.randrange(0, len(lines) - lines_max)
        lines = lines[a:a + rng.randint(20, lines_max)]
    if rng.random() < 0.35:  # valid-looking: the real log with secrets in argument lines
        for _ in range(rng.randint(1, 3)):
            tpl = rng.choice(_LOG_SECRET_LINES)
            lines.insert(rng.randint(0, len(lines)), rng.choice(_LOG_HDRS[:5]) + tpl.format(s=_secret(rng)[1]))
        return "\n".join(lines) + "\n"
    k = rng.random()
    if k < 0.35:
        for _ in range(rng.randint(1, 4)):
            tpl = rng.choice(_LOG_SECRET_LINES)
            lines.insert(rng.randint(0, len(lines)), rng.choice(_LOG_HDRS) + tpl.format(s=_secret(rng)[1]))
    if rng.random() < 0.35:
        for _ in range(rng.randint(1, 5)):
            tpl = rng.choice(_ODD_LOG_LINES)
            line = re.sub(r"\{n\}", lambda _m: _odd(rng), tpl).replace("{{", "{").replace("}}", "}")
            lines.insert(rng.randint(0, len(lines)), rng.choice(_LOG_HDRS) + line)
    if rng.random() < 0.3:
        i = rng.randrange(len(lines) or 1)
        lines[i:i + 1] = [_mutate_numbers(rng, "\n".join(lines[i:i + 30]), rng.randint(1, 6))]
    if rng.random() < 0.25:
        lines = _mutate_chars(rng, "\n".join(lines), rng.randint(1, 30)).split("\n")
    if rng.random() < 0.08:
        lines.insert(rng.randint(0, len(lines)), rng.choice(_LOG_HDRS) + "non-default args: " + _deep_json(rng))
    if rng.random() < 0.05:
        lines.insert(rng.randint(0, len(lines)), "x" * rng.choice([70_000, 300_000]) + " KV cache usage: 99%")
    if rng.random() < 0.3:  # container forms with extreme dates
        form = rng.random()
        ts_pool = YEAR_TS if rng.random() < 0.7 else ["2026-05-11T09:31:12.123456789Z"]
        out = []
        base = rng.choice(ts_pool)
        for j, ln in enumerate(lines):
            ts = base if rng.random() < 0.9 else rng.choice(YEAR_TS)
            if form < 0.4:
                out.append(f"{ts} stdout F {ln}")
            elif form < 0.7:
                out.append(json.dumps({"log": ln + "\n", "stream": "stdout", "time": ts}))
            else:
                out.append(f"{ts} {ln}")
        lines = out
    return "\n".join(lines) + rng.choice(["\n", "", "\r\n"])


def _compress(rng: random.Random, raw: bytes, kind: str) -> bytes:
    if kind == "gz":
        data = gzip.compress(raw, compresslevel=rng.choice([1, 6, 9]))
        if rng.random() < 0.2:
            data += gzip.compress(b"\n" + raw[: len(raw) // 3])  # two members
    else:
        import zstandard

        data = zstandard.ZstdCompressor(level=rng.choice([1, 3])).compress(raw)
    r = rng.random()
    if r < 0.25:
        data = data[: rng.randint(1, max(1, len(data) - 1))]  # cut stream
    elif r < 0.32:
        i = rng.randrange(len(data))
        data = data[:i] + bytes([data[i] ^ 0x40]) + data[i + 1:]
    elif r < 0.35:
        data = data[:10]
    return data


def gen_analyze_log(rng: random.Random, kind: str = "plain") -> bytes:
    text = _log_text(rng)
    raw = text.encode("utf-8", "surrogateescape")
    name = "vllm.log"
    if kind in ("gz", "zst"):
        raw = _compress(rng, raw, kind)
        name = "vllm.log." + kind if rng.random() < 0.7 else "vllm.log"
    argv = ["analyze", "--log", "@T/" + name, *_fmt(rng)]
    files = {name: raw}
    r = rng.random()
    if r < 0.1:
        files["vllm.log.1"] = _log_text(rng, 60)
        argv += ["--log", "@T/vllm.log.1"]
    elif r < 0.15:
        argv = ["analyze", "--log", "-", *_fmt(rng)]
        return _case(_maybe_debug(rng, argv), {}, stdin=raw)
    if rng.random() < 0.1:
        argv += ["--year", rng.choice(["1970", "2100", "2026"])]
    if rng.random() < 0.05:
        argv += ["--output", "@T/" + name]  # output equal to the input
    if rng.random() < 0.05:
        argv += ["--width", rng.choice(["40", "1000"])]
    return _case(_maybe_debug(rng, argv), files)


def gen_analyze_log_gz(rng: random.Random) -> bytes:
    return gen_analyze_log(rng, "gz")


def gen_analyze_log_zst(rng: random.Random) -> bytes:
    return gen_analyze_log(rng, "zst")


# --------------------------------------------------------------------------------------------------- pages
_PAGE_EXTRA = [
    'vllm:cache_config_info{{block_size="16",num_gpu_blocks="{n}",gpu_memory_utilization="{n}",'
    'cache_dtype="auto",enable_prefix_caching="True"}} 1.0',
    'vllm:kv_cache_usage_perc{{engine="0",model_name="m"}} {n}',
    'vllm:num_requests_waiting{{engine="0",model_name="m"}} {n}',
    'vllm:num_preemptions_total{{engine="0",model_name="m"}} {n}',
    'vllm:request_prompt_tokens_bucket{{engine="0",le="{n}",model_name="m"}} {n}',
    'vllm:request_prompt_tokens_bucket{{engine="0",le="1.2.3",model_name="m"}} 3.0',
    'vllm:request_generation_tokens_bucket{{engine="0",le="NaN",model_name="m"}} 1.0',
    'vllm:request_generation_tokens_bucket{{engine="0",le="abc",model_name="m"}} 1.0',
    'vllm:request_prompt_tokens_sum{{engine="0",model_name="m"}} {n}',
    'vllm:request_prompt_tokens_count{{engine="0",model_name="m"}} {n}',
    'vllm:prefix_cache_hits_total{{engine="0",model_name="m"}} {n}',
    'vllm:prefix_cache_queries_total{{engine="0",model_name="m"}} {n}',
    'vllm:iteration_tokens_total_bucket{{engine="0",le="{n}",model_name="m"}} {n}',
    'process_start_time_seconds {n}',
    "# TYPE vllm:kv_cache_usage_perc histogram",
    "# TYPE vllm:num_requests_waiting counter",
    "# EOF",
    'vllm:kv_cache_usage_perc{{engine="0",model_name="m"}} 0.5 {n}',
    'vllm:kv_cache_usage_perc{{engine="0" model_name="m"}} 0.5',
    'vllm:kv_cache_usage_perc{{engine="0",model_name="m\\"}} 0.5',
]
_LABEL_SECRET_TPL = [
    'vllm:kv_cache_usage_perc{{engine="0",model_name="{s}"}} 0.97',
    'vllm:cache_config_info{{block_size="16",num_gpu_blocks="2048",extra="{s}"}} 1.0',
    'vllm:num_requests_waiting{{engine="0",model_name="x",note="{s}"}} 3',
    'vllm:num_requests_running{{engine="0",model_name="{s}",le="1.2.3"}} {n}',
    'vllm:request_prompt_tokens_bucket{{engine="0",le="1.2.3",model_name="{s}"}} 3.0',
    'vllm:kv_cache_usage_perc{{engine="0",model_name="{s}"}} {n}',
    'vllm:kv_cache_usage_perc{{engine="0",model_name="{s}} 0.5',
    'vllm:bogus_line {s}',
    'vllm:kv_cache_usage_perc{{{s}}} 0.5',
]


def _esc_label(s: str) -> str:
    return s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _page_text(rng: random.Random, base: str | None = None, ts: bool = False) -> str:
    lines = (base if base is not None else rng.choice(seed_pages())).splitlines()
    if rng.random() < 0.4:  # valid-looking: secrets only in well-formed label values, plausible numbers
        for _ in range(rng.randint(0, 3)):
            tpl = rng.choice(_LABEL_SECRET_TPL[:3])
            line = tpl.replace("{{", "{").replace("}}", "}").replace("{s}", _esc_label(_secret(rng)[1]))
            lines.insert(rng.randint(0, len(lines)), line)
        if rng.random() < 0.5:
            idx = [i for i, ln in enumerate(lines) if ln.startswith("vllm:")]
            for _ in range(rng.randint(1, 5)):
                if idx:
                    i = rng.choice(idx)
                    parts = lines[i].split("} ", 1)
                    if len(parts) == 2:
                        rest = parts[1].split(" ")
                        rest[0] = rng.choice(["0", "1", "0.99", "1e6", "12.5", "1.0", "3e-5", "4096"])
                        lines[i] = parts[0] + "} " + " ".join(rest)
        return "\n".join(lines) + "\n"
    if rng.random() < 0.5:
        idx = [i for i, ln in enumerate(lines) if ln and not ln.startswith("#")]
        for _ in range(rng.randint(1, 4)):
            if not idx:
                break
            i = rng.choice(idx)
            parts = lines[i].rsplit(" ", 2 if ts else 1)
            if len(parts) >= 2:
                parts[1] = _odd(rng)
                if ts and len(parts) == 3 and rng.random() < 0.5:
                    parts[2] = rng.choice(UNIX_ODD)
                lines[i] = " ".join(parts)
    if rng.random() < 0.4:
        for _ in range(rng.randint(1, 4)):
            line = re.sub(r"\{n\}", lambda _m: _odd(rng), rng.choice(_PAGE_EXTRA)).replace("{{", "{").replace("}}", "}")
            lines.insert(rng.randint(0, len(lines)), line)
    if rng.random() < 0.35:
        for _ in range(rng.randint(1, 3)):
            tpl = rng.choice(_LABEL_SECRET_TPL)
            sec = _secret(rng)[1]
            sec = _esc_label(sec) if rng.random() < 0.8 else sec
            line = tpl.replace("{{", "{").replace("}}", "}").replace("{s}", sec).replace("{n}", _odd(rng))
            lines.insert(rng.randint(0, len(lines)), line)
    if rng.random() < 0.15:
        lines = _mutate_chars(rng, "\n".join(lines), rng.randint(1, 20)).split("\n")
    if rng.random() < 0.04:
        lines.append('vllm:kv_cache_usage_perc{engine="0",model_name="' + "m" * 200_000 + '"} 0.5')
    if rng.random() < 0.04:
        lines += [f'vllm:kv_cache_usage_perc{{engine="{j}",model_name="m"}} 0.5' for j in range(20000)]
    return "\n".join(lines) + "\n"


def gen_analyze_page(rng: random.Random) -> bytes:
    pages = {f"p{j}.prom": _page_text(rng) for j in range(rng.choice([1, 1, 2, 3]))}
    argv = ["analyze"]
    for name in pages:
        argv += ["--metrics-file", "@T/" + name]
    if rng.random() < 0.15:
        name = next(iter(pages))
        pages[name] = _compress(rng, pages[name].encode("utf-8", "surrogateescape"), rng.choice(["gz", "zst"]))
    if rng.random() < 0.2:
        pages["vllm.log"] = _log_text(rng, 80)
        argv += ["--log", "@T/vllm.log"]
    argv += _fmt(rng)
    return _case(_maybe_debug(rng, argv), pages)


def _recording_text(rng: random.Random) -> str:
    text = rng.choice(seed_recordings())
    lines = text.splitlines()
    if rng.random() < 0.4:  # shift every timestamp to an extreme
        base = rng.choice(["-62135596800", "253402300799", "1e20", "0", "-1", "32503680000", "4102444800"])
        out = []
        for j, ln in enumerate(lines):
            parts = ln.rsplit(" ", 2)
            if not ln.startswith("#") and len(parts) == 3:
                try:
                    parts[2] = repr(float(base) + j) if rng.random() < 0.95 else rng.choice(UNIX_ODD)
                except ValueError:
                    parts[2] = base
                ln = " ".join(parts)
            out.append(ln)
        lines = out
    if rng.random() < 0.15:
        rng.shuffle(lines)
    text = "\n".join(lines) + "\n"
    return _page_text(rng, text, ts=True) if rng.random() < 0.7 else text


def gen_analyze_recording(rng: random.Random) -> bytes:
    raw: bytes | str = _recording_text(rng)
    name = "rec.om"
    if rng.random() < 0.25:
        raw = _compress(rng, raw.encode("utf-8", "surrogateescape"), "gz")
        name = "rec.om.gz"
    files = {name: raw}
    argv = ["analyze", "--metrics-file", "@T/" + name]
    if rng.random() < 0.2:
        files["vllm.log"] = _log_text(rng, 80)
        argv += ["--log", "@T/vllm.log"]
    argv += _fmt(rng, ("text", "json", "html", "html"))
    return _case(_maybe_debug(rng, argv), files)


# --------------------------------------------------------------------------------------------------- configs
_CONFIG_KEYS = ["num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim", "hidden_size",
                "intermediate_size", "vocab_size", "max_position_embeddings", "sliding_window", "kv_lora_rank",
                "qk_rope_head_dim", "num_experts", "torch_dtype", "quantization_config", "text_config",
                "architectures", "model_type", "layer_types", "_name_or_path", "rope_scaling"]


def _config_text(rng: random.Random) -> str:
    text = rng.choice(seed_configs())
    r = rng.random()
    if r < 0.3:
        text = _mutate_numbers(rng, text, rng.randint(1, 5))
    elif r < 0.55:
        try:
            doc = json.loads(text)
        except ValueError:
            doc = {}
        key = rng.choice(_CONFIG_KEYS)
        marker = "@@ODD@@"
        target = doc.get("text_config", doc) if isinstance(doc.get("text_config"), dict) and rng.random() < 0.5 else doc
        target[key] = marker
        if rng.random() < 0.3:
            doc["_name_or_path"] = _secret(rng, ("url_userinfo", "url_query", "jwt_query", "hf_token"))[1]
        if rng.random() < 0.2:
            doc["architectures"] = [_secret(rng)[1]]
        text = json.dumps(doc).replace('"' + marker + '"', rng.choice(JSON_ODD + [_deep_json(rng)]))
    elif r < 0.62:
        text = _deep_json(rng)
    elif r < 0.7:
        text = _mutate_chars(rng, text, rng.randint(1, 15))
    elif r < 0.75:
        text = rng.choice(["", "null", "[]", '"x"', "\ufeff{}", "{" * 3, '{"a": NaN}', "9" * 5000])
    return text


def gen_analyze_config(rng: random.Random) -> bytes:
    files = {"config.json": _config_text(rng), "vllm.log": _log_text(rng, 120)}
    argv = ["analyze", "--log", "@T/vllm.log", "--model-config", "@T/config.json"]
    if rng.random() < 0.4:
        argv += ["--gpu-memory", rng.choice(["24", "80", "0.001", "1e308", "9" * 400, "nan", "inf"])]
    if rng.random() < 0.3:
        argv += ["--tensor-parallel-size", rng.choice(["1", "8", "4096", "9" * 30])]
    if rng.random() < 0.3:
        argv += ["--gpu-memory-utilization", rng.choice(["0.9", "1", "0.0000001", "nan"])]
    argv += _fmt(rng)
    return _case(_maybe_debug(rng, argv), files)


_STEP_COST = "overhead_ms=4,weights_ms=45,compute_us_per_token=230,kv_read_ns_per_token=500"


def _step_cost(rng: random.Random) -> str:
    if rng.random() < 0.8:
        return _STEP_COST + (",jitter=0.03,seed=1" if rng.random() < 0.2 else "")
    return rng.choice([_STEP_COST.replace("4", _odd(rng), 1), "overhead_ms=1e999", "overhead_ms=nan,weights_ms=1",
                       "=", "a=b", _STEP_COST + ",seed=" + "9" * 4400, _STEP_COST + ",bogus=1", "",
                       _STEP_COST.replace("230", "-230"), _STEP_COST + ",jitter=" + "9" * 400])


# --------------------------------------------------------------------------------------------------- traces
def _workload_doc(rng: random.Random) -> dict:
    doc = json.loads(json.dumps(rng.choice(seed_workloads())))
    reqs = doc.get("requests", [])
    n = rng.choice([5, 20, 60, 150])
    if len(reqs) > n:
        a = rng.randrange(len(reqs) - n)
        reqs = reqs[a:a + n]
    doc["requests"] = reqs
    return doc


_MARK = "@@ODD@@"


def _poison_workload(rng: random.Random, doc: dict) -> str:
    reqs = doc["requests"]
    if rng.random() < 0.35:
        return json.dumps(doc)
    r = rng.random()
    if r < 0.45 and reqs:
        for _ in range(rng.randint(1, 3)):
            row = rng.choice(reqs)
            if isinstance(row, list) and row:
                row[rng.randrange(len(row))] = _MARK
    elif r < 0.55:
        doc["columns"] = rng.choice([[], ["arrival_s"], doc.get("columns", [])[::-1], [_MARK], "x"])
    elif r < 0.62:
        doc[rng.choice(["serving_start_unix", "mode", "prefixes", "requests"])] = _MARK
    elif r < 0.7 and reqs:
        row = rng.choice(reqs)
        if isinstance(row, list) and len(row) > 2:
            row[2] = _secret(rng)[1]  # prefix_id holding a secret
    elif r < 0.75:
        doc["about"] = _secret(rng)[1]
        if reqs and isinstance(reqs[0], list):
            reqs[0].append(_secret(rng)[1])
    text = json.dumps(doc)
    while _MARK in text:
        text = text.replace('"' + _MARK + '"', rng.choice(JSON_ODD + [_deep_json(rng)] * 1), 1)
    if rng.random() < 0.05:
        text = _deep_json(rng)
    elif rng.random() < 0.08:
        text = _mutate_chars(rng, text, rng.randint(1, 10))
    return text


def _rows(doc: dict) -> list[dict]:
    cols = doc.get("columns", [])
    out = []
    for row in doc.get("requests", []):
        if isinstance(row, list):
            d = dict(zip(cols, row))
            out.append({"arrival_s": d.get("arrival_s"), "prompt_tokens": (d.get("prefix_tokens") or 0) +
                        (d.get("unique_tokens") or 0), "output_tokens": d.get("output_tokens"),
                        "prefix_id": d.get("prefix_id"), "prefix_tokens": d.get("prefix_tokens"),
                        "max_tokens": d.get("max_tokens")})
    return out


def _trace_file(rng: random.Random) -> tuple[str, str]:
    doc = _workload_doc(rng)
    kind = rng.random()
    if kind < 0.45:
        return "workload.json", _poison_workload(rng, doc)
    rows = _rows(doc)
    if kind < 0.75:  # CSV
        cols = ["arrival_s", "prompt_tokens", "output_tokens", "prefix_id", "prefix_tokens", "max_tokens"]
        if rng.random() < 0.2:
            cols = cols[:3]
        lines = [",".join(cols)]
        for row in rows:
            lines.append(",".join("" if row.get(c) is None else str(row.get(c)) for c in cols))
        text = "\n".join(lines) + "\n"
        r = rng.random()
        if r < 0.35:
            return "requests.csv", text
        r = (r - 0.35) / 0.65
        if r < 0.5 and len(lines) > 1:
            for _ in range(rng.randint(1, 3)):
                i = rng.randrange(1, len(lines))
                cells = lines[i].split(",")
                cells[rng.randrange(len(cells))] = rng.choice(ODD_NUMBERS + [_secret(rng)[1], '"a,b"', "\x00"])
                lines[i] = ",".join(cells)
            text = "\n".join(lines) + "\n"
        elif r < 0.6:
            text = text.replace("arrival_s", rng.choice(["", "arrival_s,arrival_s", _secret(rng)[1]]), 1)
        elif r < 0.65:
            lines = [lines[0]] + lines[1:][::-1]  # unsorted
            text = "\n".join(lines) + "\n"
        elif r < 0.7:
            text = _mutate_chars(rng, text, rng.randint(1, 10))
        return "requests.csv", text
    lines = []
    for row in rows:
        d = {k: v for k, v in row.items() if v is not None}
        lines.append(json.dumps(d))
    r = rng.random() if rng.random() < 0.65 else 1.0
    if r < 0.5 and lines:
        for _ in range(rng.randint(1, 3)):
            i = rng.randrange(len(lines))
            try:
                d = json.loads(lines[i])
            except ValueError:  # already holds a number Python will not read back
                continue
            d[rng.choice(["arrival_s", "prompt_tokens", "output_tokens", "prefix_tokens", "max_tokens",
                          "prefix_id"])] = _MARK
            lines[i] = json.dumps(d).replace('"' + _MARK + '"', rng.choice(JSON_ODD + [_deep_json(rng)]))
    elif r < 0.6 and lines:
        lines.insert(rng.randrange(len(lines)), json.dumps({"arrival_s": 1, "prompt_tokens": 10, "output_tokens": 1,
                                                            "prefix_id": _secret(rng)[1]}))
    elif r < 0.65:
        lines.append(rng.choice(["{", "[]", "null", "1", _deep_json(rng)]))
    return "requests.jsonl", "\n".join(lines) + "\n"


def _sim_tail(rng: random.Random) -> list[str]:
    argv = []
    if rng.random() < 0.7:
        argv += ["--max-steps", rng.choice(["100000", "300000", "1", "50"])]
    if rng.random() < 0.3:
        argv += ["--block-size", rng.choice(["16", "16,32", "32", "1", "4096"] * 2 + ["0", "9" * 400, "1e999", "16,,32"])]
    if rng.random() < 0.3:
        argv += ["--max-num-seqs", rng.choice(["12,16,256", "1", "16", "256"] * 2 + ["0", "9" * 30, "nan", ",",
                                                                                      "1," * 70 + "1"])]
    if rng.random() < 0.2:
        argv += ["--max-num-batched-tokens", rng.choice(["2048", "1", "9" * 4400, "1e3"])]
    if rng.random() < 0.2:
        argv += ["--duration", rng.choice(["1m", "15m", "0s", "1e999s", "9" * 400 + "s", "7d"])]
    if rng.random() < 0.15:
        argv += ["--max-model-len", rng.choice(["16", "16777216", "32768"])]
    if rng.random() < 0.1:
        argv += [rng.choice(["--enable-prefix-caching", "--no-enable-prefix-caching"])]
    return argv + _fmt(rng)


def _pool(rng: random.Random) -> tuple[list[str], dict]:
    if rng.random() < 0.7:
        return ["--num-gpu-blocks", rng.choice(["3510", "512,3510", "2048", "3510"] * 3 + [
            "2", "1", "0", "9" * 4400, "1e9", "-5", "nan", "3510,3510"])], {}
    return (["--kv-cache-memory", rng.choice(["3", "3,4.5"] * 4 + ["0", "1e999", "9" * 400, "nan", "0.001"]),
             "--model-config", "@T/config.json"],
            {"config.json": rng.choice(seed_configs()) if rng.random() < 0.6 else _config_text(rng)})


def gen_simulate_trace(rng: random.Random) -> bytes:
    name, text = _trace_file(rng)
    pool, files = _pool(rng)
    files[name] = text
    argv = ["simulate", "--trace", "@T/" + name, *pool, "--step-cost", _step_cost(rng)]
    if rng.random() < 0.1:
        argv += ["--max-requests", rng.choice(["1", "10", "100000000"])]
    return _case(_maybe_debug(rng, argv + _sim_tail(rng)), files)


def gen_analyze_trace(rng: random.Random) -> bytes:
    name, text = _trace_file(rng)
    files = {name: text, "vllm.log": _log_text(rng, 150)}
    argv = ["analyze", "--log", "@T/vllm.log", "--trace", "@T/" + name]
    if rng.random() < 0.9:
        argv += ["--step-cost", _step_cost(rng)]
    if rng.random() < 0.3:
        files["p.prom"] = _page_text(rng)
        argv += ["--metrics-file", "@T/p.prom"]
    return _case(_maybe_debug(rng, argv + _fmt(rng)), files)


def gen_simulate_from_metrics(rng: random.Random) -> bytes:
    pages, times = rng.choice(seed_series_pages())
    n = rng.choice([2, 3, 5, 8])
    a = rng.randrange(0, max(1, len(pages) - n))
    chosen = list(pages[a:a + n])
    files: dict[str, str | bytes] = {}
    rows = [times[0]] + [f"{j},{times[1 + a + j].split(',')[1] if 1 + a + j < len(times) else '0'}"
                         for j in range(len(chosen))]
    r = rng.random()
    if r < 0.5:
        j = rng.randrange(len(chosen))
        chosen[j] = _page_text(rng, chosen[j])
    elif r < 0.6:
        j = rng.randrange(len(chosen))
        chosen[j] = chosen[j].replace('le="', 'le="1.2.3', 1) if rng.random() < 0.5 else \
            re.sub(r"_bucket\{([^}]*)\} \S+", lambda m: "_bucket{" + m.group(1) + "} " + "1" + "0" * 400,
                   chosen[j], count=1)
    if rng.random() < 0.3:
        k = rng.randrange(1, len(rows))
        rows[k] = rows[k].split(",")[0] + "," + rng.choice(UNIX_ODD + ["", "x", "2026-05-11T09:31:12Z"])
    if rng.random() < 0.08:
        rows = rows[:1] + rows[1:][::-1]
    if rng.random() < 0.05:
        rows.append(f"{len(chosen) + 3},1778491854.3")
    for j, page in enumerate(chosen):
        files[f"m/metrics/{j:04d}.prom"] = page
    if rng.random() < 0.95:
        files["m/times.csv"] = "\n".join(rows) + "\n"
    argv = ["simulate", "--from-metrics", "@T/m"]
    if rng.random() < 0.5:
        argv += ["--step-cost", _step_cost(rng)]
    if rng.random() < 0.5:
        pool, extra = _pool(rng)
        argv += pool
        files.update(extra)
    return _case(_maybe_debug(rng, argv + _sim_tail(rng)), files)


_TRUTH_PATHS = [("num_gpu_blocks",), ("block_size",), ("deployment", "max_num_seqs"),
                ("deployment", "max_num_batched_tokens"), ("deployment", "max_model_len"),
                ("deployment", "enable_prefix_caching"), ("step_cost_model", "overhead_ms"),
                ("step_cost_model", "weights_ms"), ("step_cost_model", "jitter"), ("clock", "duration_s"),
                ("clock", "serving_start_unix"), ("clock", "serving_end_unix"), ("deployment", "kv_bytes_per_token"),
                ("deployment",), ("step_cost_model",), ("clock",)]


def gen_simulate_lab_case(rng: random.Random) -> bytes:
    truth = json.loads(json.dumps(rng.choice(seed_truths())))
    for _ in range(rng.randint(0, 3)):
        path = rng.choice(_TRUTH_PATHS)
        d = truth
        for key in path[:-1]:
            d = d.setdefault(key, {}) if isinstance(d, dict) else {}
        if isinstance(d, dict):
            d[path[-1]] = _MARK
    if rng.random() < 0.3:
        dep = truth.setdefault("deployment", {})
        if isinstance(dep, dict):
            dep["serve_command"] = "vllm serve Qwen/Qwen2.5-7B-Instruct " + _secret(rng, ("cli_api_key",))[1]
            dep["model"] = _secret(rng)[1] if rng.random() < 0.5 else dep.get("model")
    text = json.dumps(truth)
    while _MARK in text:
        text = text.replace('"' + _MARK + '"', rng.choice(JSON_ODD), 1)
    if rng.random() < 0.05:
        text = _deep_json(rng)
    files = {"case/truth.json": text, "case/workload.json": _poison_workload(rng, _workload_doc(rng))
             if rng.random() < 0.5 else json.dumps(_workload_doc(rng))}
    if rng.random() < 0.05:
        del files["case/truth.json"]
    argv = ["simulate", "--lab-case", "@T/case"]
    if rng.random() < 0.3:
        argv += ["--step-cost", _step_cost(rng)]
    if rng.random() < 0.3:
        argv += _pool(rng)[0][:2] if rng.random() < 0.7 else []
    return _case(_maybe_debug(rng, argv + _sim_tail(rng)), files)


def gen_estimate(rng: random.Random) -> bytes:
    files = {"config.json": _config_text(rng) if rng.random() < 0.7 else rng.choice(seed_configs())}
    argv = ["estimate", "--model-config", "@T/config.json"]
    if rng.random() < 0.8:
        argv += ["--kv-cache-memory", rng.choice(["61.02", "3", "0", "1e308", "9" * 400, "nan", "-1", "inf", "1e-30"])]
    else:
        argv += ["--gpu-memory", rng.choice(["80", "24", "0.5", "1e308", "9" * 4400, "nan"])]
    opts = {"--tensor-parallel-size": ["1", "2", "8", "4096", "3"], "--pipeline-parallel-size": ["1", "2", "4096"],
            "--block-size": ["16", "1", "4096", "32"], "--max-model-len": ["32768", "1", "2147483648", "131072"],
            "--max-num-batched-tokens": ["2048", "1", "2147483648"],
            "--vllm-version": ["0.11.0", "0.11.0rc2.dev98+g393de22d2", "0.4.0", "0.33.0", "99.0", "0.0.0", "x",
                               "9" * 5000, "0." + "9" * 400, "v0.8.5", "../../etc", "0.21.0+cu128", ""],
            "--speculative-method": ["eagle", "eagle3", "mtp", "ngram"], "--num-speculative-tokens": ["0", "1", "64"],
            "--draft-layers": ["0", "1", "1024"], "--decode-context-parallel-size": ["1", "2", "3", "4096"],
            "--mamba-ssm-cache-dtype": ["auto", "float32"], "--kv-cache-dtype": ["auto", "fp8", "fp8_ds_mla"],
            "--quantization": ["fp8", "awq", "gptq", "bitsandbytes", "mxfp4", "nonsense", "9" * 400],
            "--gpu-memory-utilization": ["0.9", "1", "1.5", "0", "nan"]}
    for opt, values in opts.items():
        if rng.random() < 0.15:
            argv += [opt, rng.choice(values)]
    if rng.random() < 0.1:
        argv.append(rng.choice(["--no-prefix-caching", "--enable-prefix-caching"]))
    argv += ["--format", rng.choice(["text", "json"])]
    return _case(argv, files)


# --------------------------------------------------------------------------------------------------- rules
def _rule_text(rng: random.Random, new_id: str) -> str:
    rid, text = rng.choice(seed_rules())
    text = re.sub(r"^id: .*$", f"id: {new_id}", text, count=1, flags=re.M)
    r = rng.random()
    if r < 0.15:
        return text
    r = (r - 0.15) / 0.85
    if r < 0.4:  # Go template text (and secrets) in the title / message / remedy
        tpl = rng.choice(GO_TEMPLATES)
        where = rng.choice(["title", "name", "doc"])
        if where == "title":
            text = re.sub(r"^title: .*$", "title: " + json.dumps(f"pool full {tpl}"), text, count=1, flags=re.M)
        elif where == "name":
            text = re.sub(r"^name: .*$", "name: " + json.dumps(f"x-{tpl}"), text, count=1, flags=re.M)
        else:
            text = text.replace("doc:\n  meaning: >-", "doc:\n  meaning: >-\n    " + tpl, 1)
    elif r < 0.55:
        text = _mutate_numbers(rng, text, rng.randint(1, 4))
    elif r < 0.65:
        text = re.sub(r"^params: .*$", "params: {usage_min: " + rng.choice(HUGE_INTS + [".nan", ".inf", "1e999"]) + "}",
                      text, count=1, flags=re.M)
    elif r < 0.72:
        text = _mutate_chars(rng, text, rng.randint(1, 10))
    elif r < 0.77:
        text = text + "\nextra: " + _nest_yaml(rng) + "\n"
    elif r < 0.8:
        text = _billion_laughs() + text
    elif r < 0.83:
        text = "!!python/object/apply:os.system ['echo pwned']\n"
    elif r < 0.86:
        text = rng.choice(["", "---\n---\n", "[]", "id: [", "\t", "id: " + "9" * 5000, "- a\n- b"])
    elif r < 0.9:
        text = re.sub(r"^title: .*$", "title: '{kv_cache_usage.max:" + rng.choice(
            ["99999999999.99999999999f", ">9999999999f", "%", "!r", ".1%}{0.__class__"]) + "}'",
            text, count=1, flags=re.M)
    return text


def _rules_dir(rng: random.Random, files: dict) -> list[str]:
    ids = []
    for j in range(rng.choice([1, 1, 2, 3])):
        new_id = f"ZZ{j}{rng.randrange(1000)}" if rng.random() < 0.94 else rng.choice(
            ["CAP001", "Z" + "9" * 40, "zz1", f"FZ_{j}-X", "A", "Z" * 32])
        ids.append(new_id)
        files[f"myrules/r{j}.yaml"] = _rule_text(rng, new_id)
    return ids


def gen_rules_file(rng: random.Random) -> bytes:
    files: dict = {}
    ids = _rules_dir(rng, files)
    r = rng.random()
    if r < 0.3:
        argv = ["rules", "list", "--rules", "@T/myrules"]
    elif r < 0.5:
        argv = ["rules", "explain", rng.choice(ids + ["CAP001", "NOPE", "../x", ""]), "--rules", "@T/myrules"]
    elif r < 0.8:
        files["vllm.log"] = _log_text(rng, 150)
        argv = ["analyze", "--log", "@T/vllm.log", "--rules", "@T/myrules", *_fmt(rng)]
    else:
        files["p.prom"] = _page_text(rng)
        argv = ["check", "--metrics-file", "@T/p.prom", "--rules", "@T/myrules"]
    return _case(_maybe_debug(rng, argv, 0.1) if argv[0] != "rules" else argv, files,
                 keep=())


def _case_text(rng: random.Random) -> str:
    cid, text = rng.choice(seed_cases())
    r = rng.random()
    if r < 0.35:
        text = _mutate_numbers(rng, text, rng.randint(1, 5))
    elif r < 0.5:
        text = re.sub(r"'([0-9.]+)x(\d+)", lambda m: "'" + rng.choice(["1e999", "nan", "9" * 4400, m.group(1)]) +
                      "x" + rng.choice(["100000", "9" * 30, m.group(2), "-1"]), text, count=1)
    elif r < 0.6:
        text = re.sub(r"^interval: .*$", "interval: " + rng.choice(DURATIONS_ODD), text, count=1, flags=re.M)
    elif r < 0.7:
        text = _mutate_chars(rng, text, rng.randint(1, 10))
    elif r < 0.75:
        text += "\n  deep:\n    series: {kv_cache_usage: " + _nest_yaml(rng) + "}\n"
    elif r < 0.78:
        text = _billion_laughs() + text
    elif r < 0.82:
        text = text.replace("facts: {", "facts: {model_name: " + json.dumps(_secret(rng)[1]) + ", ", 1)
    return text


def gen_rules_test(rng: random.Random) -> bytes:
    files: dict = {}
    for j in range(rng.choice([1, 2])):
        files[f"cases/c{j}.yaml"] = _case_text(rng)
    argv = ["rules", "test", "@T/cases"]
    if rng.random() < 0.3:
        _rules_dir(rng, files)
        argv += ["--rules", "@T/myrules"]
    if rng.random() < 0.3:
        argv.append("-v")
    return _case(argv, files)


def gen_rules_export(rng: random.Random) -> bytes:
    files: dict = {}
    _rules_dir(rng, files)
    argv = ["rules", "export", "--rules", "@T/myrules"]
    r = rng.random()
    if r < 0.7:
        argv += ["--out", "@T/alerts.yml"]
    elif r < 0.78:
        argv += ["--out", "@T/myrules/r0.yaml"]  # output equal to an input
    if rng.random() < 0.4:
        argv += ["--tests", rng.choice(["@T/alerts.test.yml", "@T/alerts.test.yml", "@T/myrules/r0.yaml",
                                        "@T/nodir/x.yml"])]
    if rng.random() < 0.3:
        argv += ["--window", rng.choice(DURATIONS_ODD)]
    if rng.random() < 0.3:
        argv += ["--for", rng.choice(DURATIONS_ODD + ["auto"])]
    return _case(argv, files)


# --------------------------------------------------------------------------------------------------- check
def _state_text(rng: random.Random) -> str:
    r = rng.random()
    if r < 0.15:
        return rng.choice(["", "{}", "[]", "null", '{"foo": 1}', "not json", _deep_json(rng), '{"version": ' +
                           "9" * 4400 + "}"])
    now = time.time()
    entry = {"time": now - 60, "counters": {"vllm:num_preemptions_total": 5.0, "vllm:prompt_tokens_total": 1000.0},
             "process_start_time": now - 3600}
    doc = {"version": 1, "entries": {"@T/p.prom": entry}}
    text = json.dumps(doc)
    if r < 0.7:
        text = _mutate_numbers(rng, text, rng.randint(1, 4))
    elif r < 0.8:
        text = text.replace('"entries"', '"entries_' + _esc_label(_secret(rng)[1]).replace('"', "") + '"')
    elif r < 0.9:
        text = text.replace(str(int(now - 60)), rng.choice(UNIX_ODD), 1)
    return text


def gen_check(rng: random.Random) -> bytes:
    files: dict = {}
    argv = ["check"]
    r = rng.random()
    if r < 0.5:
        files["p.prom"] = _page_text(rng)
        argv += ["--metrics-file", "@T/p.prom"]
    elif r < 0.7:
        files["rec.om"] = _recording_text(rng)
        argv += ["--metrics-file", "@T/rec.om"]
    else:
        files["vllm.log"] = _log_text(rng, 150)
        argv += ["--log", "@T/vllm.log"]
    keep: tuple = ()
    if rng.random() < 0.6:
        st = _state_text(rng)
        if rng.random() < 0.9:
            files["state.json"] = st
            if '"version"' in st:
                keep = ("state.json",)
        argv += ["--state", rng.choice(["@T/state.json"] * 8 + ["@T/nodir/state.json", "@T/p.prom"])]
    if rng.random() < 0.4:
        argv += ["--textfile", rng.choice(["@T/tf", "@T/tf", "@T/missing", "@T/p.prom"])]
        files["tf/.keep"] = ""
    for opt in ("--warn-on", "--fail-on"):
        if rng.random() < 0.2:
            argv += [opt, rng.choice(["capacity_pressure", "CRITICAL", "warning", "ok", "nope", "", "healthy",
                                      "Warning", "9" * 400])]
    if rng.random() < 0.15:
        argv += ["--instance", rng.choice(["a", "", "x" * 5000, 'a"b\nc', "\x00"])]
    return _case(_maybe_debug(rng, argv), files, keep=keep)


# --------------------------------------------------------------------------------------------------- diff
def _side(rng: random.Random, tag: str, files: dict) -> str:
    r = rng.random()
    if r < 0.5:
        name, body = f"{tag}.log", _log_text(rng, 200)
    elif r < 0.75:
        name, body = f"{tag}.prom", _page_text(rng)
    else:
        name, body = f"{tag}.om", _recording_text(rng)
    if rng.random() < 0.15:
        body = _compress(rng, body.encode("utf-8", "surrogateescape"), rng.choice(["gz", "zst"]))
        name += rng.choice([".gz", ".zst", ""])
    files[name] = body
    return "@T/" + name


def gen_diff(rng: random.Random) -> bytes:
    files: dict = {}
    if rng.random() < 0.2:  # a real pair, mutated lightly
        pairs = sorted(FIXTURES.glob("diff/real-*"))
        d = rng.choice(pairs)
        b, a = _read(d / "before.log"), _read(d / "after.log")
        if rng.random() < 0.7:
            b = _mutate_numbers(rng, b, rng.randint(1, 3))
        if rng.random() < 0.3:
            a = a + "\n" + rng.choice(_LOG_HDRS) + rng.choice(_LOG_SECRET_LINES).format(s=_secret(rng)[1]) + "\n"
        files.update({"before.log": b, "after.log": a})
        argv = ["diff", "@T/before.log", "@T/after.log"]
    else:
        argv = ["diff", _side(rng, "before", files), _side(rng, "after", files)]
    if rng.random() < 0.25:
        argv += ["--before-also", _side(rng, "b2", files)]
    if rng.random() < 0.25:
        argv += ["--after-also", _side(rng, "a2", files)]
    for flag in ("--fail-on-regression", "--allow-different-models"):
        if rng.random() < 0.3:
            argv.append(flag)
    if rng.random() < 0.05:
        argv[1] = argv[2]  # the same file on both sides
    if rng.random() < 0.05:
        argv += ["--output", argv[1]]
    argv += _fmt(rng)
    return _case(_maybe_debug(rng, argv), files)


# --------------------------------------------------------------------------------------------------- HTTP
def _page_answer(rng: random.Random, text: str | None = None):
    body = text if text is not None else _page_text(rng)
    headers = {"Content-Type": rng.choice(["text/plain; version=0.0.4"] * 6 + [
        "application/openmetrics-text; version=1.0.0", "text/html", "application/json", "text/plain"])}
    r = rng.random()
    status = 200
    raw: bytes | str = body
    if r < 0.06:
        status = rng.choice([404, 500, 401, 403, 302, 301, 503])
        if status in (301, 302):
            sec = rng.choice(URL_SECRETS)[1]
            headers["Location"] = rng.choice([sec, "http://evil.example.invalid/metrics", "/metrics?x=1", "//x"])
        raw = rng.choice(["", _secret(rng)[1], "<html>" + _secret(rng)[1] + "</html>"])
    elif r < 0.12:
        headers["Content-Encoding"] = "gzip"
        raw = _compress(rng, body.encode("utf-8", "surrogateescape"), "gz")
    elif r < 0.15:
        headers["Content-Length"] = "99999999999"
    elif r < 0.18:
        raw = b"\xff\xfe" + body.encode("utf-16-le", "surrogatepass")
    return (status, headers, raw, 0.0 if rng.random() < 0.95 else rng.choice([0.5, 1.5]))


def _http_opts(rng: random.Random, files: dict) -> list[str]:
    argv = ["--timeout", rng.choice(["1s", "2s", "1s"])]
    if rng.random() < 0.35:
        argv += ["--header", rng.choice([f"Authorization: Bearer {_secret(rng, ('bearer',))[2]}",
                                         f"X-Api-Key: {_secret(rng, ('api_key',))[2]}",
                                         f"Cookie: session={_secret(rng)[2]}", f"X-Auth-Token: {_secret(rng)[2]}"]
                                        * 3 + ["Bad header", "X: \x00", "Host: evil", ": v", "X-Foo: " + "a" * 20000])]
    if rng.random() < 0.25:
        files["token"] = rng.choice([_secret(rng, ("bearer",))[2], _secret(rng)[2] + "\n"] * 3 + [
            "", "\x00\xff", "a" * 100_000, "tok en\nX-Injected: 1"])
        argv += ["--bearer-token-file", "@T/token"]
    if rng.random() < 0.15:
        files["ca.pem"] = rng.choice([(FIXTURES / "tls" / "loopback-cert.pem").read_text(), "garbage",
                                      "-----BEGIN CERTIFICATE-----\n" + _secret(rng)[2] + "\n-----END CERTIFICATE-----\n"])
        argv += ["--ca-cert", "@T/ca.pem"]
    elif rng.random() < 0.1:
        argv.append("--insecure")
    return argv


def _metrics_url(rng: random.Random, path: str = "/metrics") -> str:
    r = rng.random()
    if r < 0.25:  # userinfo / query secrets on a URL that works
        sec = rng.choice(URL_SECRETS)
        needle = sec[2]
        if sec[0] == "url_userinfo":
            return f"http://admin:{needle}@@HOST{path}"
        if sec[0] == "jwt_query":
            return f"http://@HOST{path}?jwt={sec[1].split('jwt=')[1]}"
        return f"http://@HOST{path}?token={needle}&x=1"
    if r < 0.3:
        return f"http://u:p#{_secret(rng)[2]}@@HOST{path}"  # '#' in the password
    if r < 0.35:
        return rng.choice(["ftp://@HOST/metrics", "http://", "http://[::1", "@HOST/metrics", "http://@HOST:99999/m",
                           "http://127.0.0.1:1/metrics", "file:///etc/passwd", "http://@HOST/" + "a" * 10000,
                           "http://@HOST/metrics\r\nX: y"])
    return f"http://@HOST{path}"


def gen_analyze_url(rng: random.Random) -> bytes:
    files: dict = {}
    n = rng.choice([1, 1, 2])
    serve = {}
    argv = ["analyze"]
    for j in range(n):
        path = f"/m{j}/metrics"
        serve[path] = [_page_answer(rng) for _ in range(rng.choice([1, 3]))]
        argv += ["--metrics-url", _metrics_url(rng, path)]
    argv += ["--duration", rng.choice(["300ms", "500ms", "1s"] * 3 + ["0s", "8d", "1e999s"]),
             "--interval", rng.choice(["100ms", "200ms"] * 4 + ["50ms", "1s"])]
    argv += _http_opts(rng, files)
    if rng.random() < 0.15:
        argv += ["--output", rng.choice(["@T/token", "@T/ca.pem", "@T/out.txt"])]
        files.setdefault("token", "sometoken")
        files.setdefault("ca.pem", "x")
        if "--bearer-token-file" not in argv:
            argv += ["--bearer-token-file", "@T/token"]
        if "--ca-cert" not in argv and "@T/ca.pem" in argv:
            argv += ["--ca-cert", "@T/ca.pem"]
    else:
        argv += _fmt(rng)
    return _case(_maybe_debug(rng, argv), files, serve)


def _prom_answer(rng: random.Random, kind: str):
    inst = rng.choice(["10.0.0.1:8000", _secret(rng)[1], "a" * 3000, "", "x\ny"])
    val = rng.choice(["0.97", "NaN", "+Inf", "-Inf", "9" * 4400, "1e999", "", "x", "-1", "0.5", "1" + "0" * 400])
    ts = rng.choice(["1778491854.3", "-62135596800", "253402300799", "1e20", "NaN", '"x"', "9" * 400])
    metric = {"__name__": "vllm:kv_cache_usage_perc", "instance": inst, "job": "vllm", "model_name": "m"}
    if kind == "matrix":
        values = ",".join(f"[{ts if rng.random() < 0.2 else 1778491854 + 15 * k},\"{val if rng.random() < 0.3 else 0.5}\"]"
                          for k in range(rng.choice([1, 5, 40])))
        result = f'[{{"metric": {json.dumps(metric)}, "values": [{values}]}}]'
        rtype = "matrix"
    else:
        result = f'[{{"metric": {json.dumps(metric)}, "value": [{ts}, "{val}"]}}]'
        rtype = "vector"
    r = rng.random()
    if r < 0.1:
        body = rng.choice(["", "{", "[]", "null", '{"status":"error","error":"' + _secret(rng)[1] + '"}',
                           _deep_json(rng), '{"status":"success","data":{"resultType":"scalar","result":[1,"2"]}}'])
    else:
        body = f'{{"status":"success","data":{{"resultType":"{rtype}","result":{result}}}}}'
    status = 200 if rng.random() < 0.93 else rng.choice([400, 422, 500, 401])
    return (status, {"Content-Type": "application/json"}, body, 0.0)


def gen_analyze_prom(rng: random.Random) -> bytes:
    files: dict = {}
    serve = {"/api/v1/query": [_prom_answer(rng, "vector") for _ in range(3)],
             "/api/v1/query_range": [_prom_answer(rng, "matrix") for _ in range(3)],
             "/api/v1/series": [(200, {"Content-Type": "application/json"}, json.dumps(
                 {"status": "success", "data": [{"__name__": "vllm:kv_cache_usage_perc", "instance": "10.0.0.1:8000",
                                                 "job": "vllm"}]}), 0.0)],
             "/api/v1/status/buildinfo": [(200, {"Content-Type": "application/json"},
                                          '{"status":"success","data":{"version":"2.45.0"}}', 0.0)]}
    url = _metrics_url(rng, "")
    if rng.random() < 0.75:
        argv = ["analyze", "--prometheus-url", url]
        if rng.random() < 0.5:
            argv += ["--since", rng.choice(["1h", "6h", "0s", "1e999s", "0001-01-01T00:00:00Z", "-62135596800",
                                            "9999-12-31T23:59:59Z", "253402300799", "9" * 400, "nan", "366d"])]
        if rng.random() < 0.4:
            argv += ["--until", rng.choice(["1778491854", "0001-01-01T00:00:00Z", "9999-12-31T23:59:59Z",
                                            "2286-11-20T17:46:41Z", "1e20", "nan", "-1", "2026-02-30T00:00:00Z"])]
        if rng.random() < 0.3:
            argv += ["--step", rng.choice(["15s", "1ms", "0s", "1h", "1e999s", "-1s"])]
        if rng.random() < 0.3:
            argv += ["--selector", rng.choice(['{job="vllm"}', "{", '{job="' + _secret(rng)[1] + '"}', "", "up",
                                               '{a=~".*"}' * 50])]
        argv += _http_opts(rng, files) + _fmt(rng)
    else:
        argv = ["diff", "--prometheus-url", url, "--before-window",
                rng.choice(["1778490000..1778491000", "0001-01-01T00:00:00Z..9999-12-31T23:59:59Z", "x..y", "..",
                            "1778491000..1778490000", "1e20..1e21", "-62135596800..253402300799"])]
        if rng.random() < 0.5:
            argv += ["--after-window", "1778491000..1778492000"]
        argv += ["--selector", '{job="vllm"}'] + _fmt(rng)
    return _case(_maybe_debug(rng, argv), files, serve)


def gen_check_http(rng: random.Random) -> bytes:
    files: dict = {"p.prom": _page_text(rng)}
    serve = {"/m0/metrics": [_page_answer(rng) for _ in range(2)],
             "/metrics/job/kvdiag": [(rng.choice([200, 202, 500, 400, 404]), {}, rng.choice(["", _secret(rng)[1]]),
                                     0.0)]}
    argv = ["check"]
    if rng.random() < 0.6:
        argv += ["--metrics-url", _metrics_url(rng, "/m0/metrics")] + _http_opts(rng, files)
    else:
        argv += ["--metrics-file", "@T/p.prom"]
    if rng.random() < 0.7:
        pg = _metrics_url(rng, "")
        argv += ["--pushgateway", pg]
        if rng.random() < 0.3:
            argv += ["--job", rng.choice(["kvdiag", "a/b", "", "x" * 3000, "../.."])]
    return _case(_maybe_debug(rng, argv), files, serve)


def gen_record(rng: random.Random) -> bytes:
    files: dict = {}
    rec = rng.choice(seed_pages())
    serve = {"/metrics": [_page_answer(rng, _page_text(rng, rec) if rng.random() < 0.6 else rec)
                          for _ in range(rng.choice([1, 3]))]}
    argv = ["record", "--metrics-url", _metrics_url(rng, "/metrics"),
            "--interval", rng.choice(["100ms", "200ms", "100ms", "200ms", "99ms"]),
            "--duration", rng.choice(["300ms", "500ms", "1s", "300ms", "500ms", "1s", "0s", "8d"]),
            *_http_opts(rng, files)]
    r = rng.random()
    if r < 0.75:
        argv += ["--out", "@T/incident.om"]
    elif r < 0.85:
        files.setdefault("token", "tok")
        if "--bearer-token-file" not in argv:
            argv += ["--bearer-token-file", "@T/token"]
        argv += ["--out", "@T/token"]
    elif r < 0.92:
        files.setdefault("ca.pem", (FIXTURES / "tls" / "loopback-cert.pem").read_text())
        if "--ca-cert" not in argv:
            argv += ["--ca-cert", "@T/ca.pem"]
        argv += ["--out", "@T/ca.pem"]
    else:
        argv += ["--out", rng.choice(["@T/nodir/x.om", "@T", "/dev/full"])]
    return _case(_maybe_debug(rng, argv), files, serve)


def gen_html(rng: random.Random) -> bytes:
    files: dict = {}
    r = rng.random()
    lines = _log_text(rng, 200).splitlines()
    if rng.random() < 0.8:  # container timestamps at the edges of time
        ts = rng.choice(YEAR_TS[:3] + ["9999-12-31T23:59:59Z", "0001-01-01T00:00:00Z"])
        lines = [f"{ts} stdout F {ln}" for ln in lines]
    if rng.random() < 0.3:
        lines.insert(0, "<script>alert(1)</script><img src=http://evil.example/x> " + _secret(rng)[1])
    files["vllm.log"] = "\n".join(lines) + "\n"
    if r < 0.6:
        argv = ["analyze", "--log", "@T/vllm.log"]
        if rng.random() < 0.4:
            files["rec.om"] = _recording_text(rng)
            argv += ["--metrics-file", "@T/rec.om"]
    elif r < 0.8:
        files["b.log"] = _log_text(rng, 200)
        argv = ["diff", "@T/b.log", "@T/vllm.log"]
    else:
        name, text = _trace_file(rng)
        files[name] = text
        argv = ["simulate", "--trace", "@T/" + name, "--num-gpu-blocks", "512,3510", "--step-cost", _STEP_COST,
                "--max-steps", "200000"]
    argv += ["--format", "html", "--output", rng.choice(["@T/r.html"] * 9 + ["@T/vllm.log"])]
    return _case(_maybe_debug(rng, argv), files)


# --------------------------------------------------------------------------------------------------- loopback server
class _Server:
    answers: dict = {}
    counts: dict = {}
    received: list = []
    srv: ThreadingHTTPServer | None = None
    pid = -1


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):  # noqa: D401 - quiet
        pass

    def _answer(self):
        path = self.path.split("?", 1)[0]
        if path.startswith("/metrics/job/"):
            path = "/metrics/job/kvdiag"
        length = int(self.headers.get("Content-Length") or 0)
        if 0 < length < 50_000_000:  # a Pushgateway push: what kvdiag sent out is judged like its output
            _Server.received.append(f"{self.command} {self.path}\n" + self.rfile.read(length).decode("utf-8", "replace"))
        elif self.command in ("PUT", "POST"):
            _Server.received.append(f"{self.command} {self.path}\n")
        options = _Server.answers.get(path)
        if not options:
            self._send(404, {}, b"not found")
            return
        k = _Server.counts.get(path, 0)
        _Server.counts[path] = k + 1
        a = options[k % len(options)]
        if a["delay"]:
            time.sleep(a["delay"])
        self._send(a["status"], a["headers"], base64.b64decode(a["b"]))

    def _send(self, status, headers, body):
        try:
            self.send_response(status)
            cl = None
            for h, v in headers.items():
                if h.lower() == "content-length":
                    cl = v
                self.send_header(h, v)
            if cl is None:
                self.send_header("Content-Length", str(len(body)))
            self.send_header("Connection", "close")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
        except OSError:
            pass
        self.close_connection = True

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _answer


def _server() -> str:
    if _Server.srv is None or _Server.pid != os.getpid():
        srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        srv.daemon_threads = True
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        _Server.srv, _Server.pid = srv, os.getpid()
    return f"127.0.0.1:{_Server.srv.server_address[1]}"


# --------------------------------------------------------------------------------------------------- runner
# the README's exit-code table (issue 25 gave each code one meaning: diff 0/1/3, estimate 2 = vLLM would refuse)
EXIT_CODES = {"analyze": {0, 1, 2, 3}, "check": {0, 1, 2, 3}, "diff": {0, 1, 3}, "simulate": {0, 3},
              "estimate": {0, 2, 3}, "record": {0, 3}, "rules": {0, 3}, "rules test": {0, 1, 3}}


class _Capture(io.TextIOWrapper):
    def __init__(self):
        super().__init__(io.BytesIO(), encoding="utf-8", errors="backslashreplace", write_through=True)

    def isatty(self):
        return False

    def text(self) -> str:
        self.flush()
        return self.buffer.getvalue().decode("utf-8", "backslashreplace")


def _is_kvdiag_error(exc: BaseException) -> bool:
    """A handled error (kvdiag's own, or click's usage error), which ``--debug`` may show as a traceback."""
    return any(c.__name__ in ("KvdiagError", "ClickException") for c in type(exc).__mro__)


def _subst(arg: str, case_dir: Path, host: str) -> str:
    return arg.replace("@T", str(case_dir)).replace("@HOST", host)


def _plain(raw: bytes) -> bytes:
    """A compressed input as far as it decompresses (a cut or damaged stream gives what came before the damage)."""
    import zlib

    try:
        if raw[:2] == b"\x1f\x8b":
            return zlib.decompressobj(31).decompress(raw)
        if raw[:4] == b"\x28\xb5\x2f\xfd":
            import zstandard

            out = io.BytesIO()
            try:
                with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(raw)) as r:
                    while chunk := r.read(65536):
                        out.write(chunk)
            except zstandard.ZstdError:
                pass
            return out.getvalue()
    except zlib.error:
        return raw
    return raw


def _b64(seg: str) -> str:
    try:
        return base64.urlsafe_b64decode(seg + "=" * (-len(seg) % 4)).decode("utf-8", "replace")
    except ValueError:
        return ""


def _finding(kind: str, detail: str) -> str:
    global LAST_FINDING
    LAST_FINDING = detail[:2000]
    return kind


def run_case(data: bytes, tmp: Path, judge: bool = True) -> str:
    """Run one case through ``kvdiag.cli.main`` and judge it; returns the outcome (see the module doc)."""
    from kvdiag.cli import main

    global LAST_FINDING
    LAST_FINDING = ""
    doc = json.loads(data)
    case_dir = Path(tmp) / "case"
    if case_dir.exists():
        shutil.rmtree(case_dir, ignore_errors=True)
    case_dir.mkdir(parents=True)
    inputs: dict[Path, bytes] = {}
    for name, v in doc["files"].items():
        p = case_dir / name
        p.parent.mkdir(parents=True, exist_ok=True)
        raw = _dec_file(v)
        if name.endswith("/.keep"):
            continue
        raw = raw.replace(b"@T", str(case_dir).encode())
        p.write_bytes(raw)
        inputs[p] = raw
    host = _server() if doc.get("serve") else "127.0.0.1:9"
    _Server.answers = doc.get("serve") or {}
    _Server.counts = {}
    _Server.received = []
    argv = [_subst(a, case_dir, host) for a in doc["argv"]]
    debug = "--debug" in argv
    cmd = [a for a in argv if a != "--debug"][0]
    sub = [a for a in argv if a != "--debug"][1] if cmd == "rules" and len(argv) > 1 else ""
    allowed = EXIT_CODES["rules test" if (cmd, sub) == ("rules", "test") else cmd]
    out, err = _Capture(), _Capture()
    stdin = io.TextIOWrapper(io.BytesIO(base64.b64decode(doc.get("stdin", ""))), encoding="utf-8")
    old = sys.stdin, sys.stdout, sys.stderr
    escaped = None
    t0 = time.monotonic()
    try:
        sys.stdin, sys.stdout, sys.stderr = stdin, out, err
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
        except BaseException as exc:  # noqa: BLE001 - judged below
            escaped = exc
            code = None
    finally:
        sys.stdin, sys.stdout, sys.stderr = old
    seconds = time.monotonic() - t0
    so, se = out.text(), err.text()
    global LAST_STDERR
    LAST_STDERR = (se.strip() or so.strip()[:300])[-500:]
    tb = "".join(traceback.format_exception(escaped)) if escaped is not None else ""
    line = " ".join(argv)[:300]
    # secrets: in the output, the error, a traceback, or any file the run wrote
    written = []
    for p in sorted(case_dir.rglob("*")):
        if p.is_file():
            try:
                body = p.read_bytes()
            except OSError:
                continue
            if p in inputs and body == inputs[p]:
                continue
            written.append((p, body))
    # `record` copies the endpoint's page: a secret the server itself put in a label value is data there, not a leak
    # (the URL's own userinfo / query, the headers and the token must still never reach the recording)
    served = " ".join(base64.b64decode(a["b"]).decode("utf-8", "replace") for v in (doc.get("serve") or {}).values()
                      for a in v) if cmd == "record" else ""
    pushed = []  # what kvdiag sent to the Pushgateway: the body, and the grouping key of the path (base64 decoded);
    for req in _Server.received:  # not the query, which is the user's own URL and may carry its credentials
        line, _, body = req.partition("\n")
        path = line.split(" ", 1)[-1].split("?", 1)[0]
        key = [path] + [_b64(seg) for seg in re.findall(r"@base64/([A-Za-z0-9_=-]+)", path)]
        pushed.append(("a push to the loopback server (body or grouping key)", body + "\n" + "\n".join(key)))
    # a needle counts only where the input still holds its secret whole, in a form the README names (a character
    # mutation can split "HF_TOKEN=hf_…" into two words; the second is then no secret)
    corpus = "\n".join([" ".join(argv), base64.b64decode(doc.get("stdin", "")).decode("utf-8", "replace")] + [
        _plain(_dec_file(v)).decode("utf-8", "replace") for v in doc["files"].values()] + [
        base64.b64decode(a["b"]).decode("utf-8", "replace") for v in (doc.get("serve") or {}).values() for a in v])
    raw_files = "\n".join(_dec_file(v).decode("utf-8", "replace") for k, v in doc["files"].items()
                           if k in ("token", "ca.pem"))

    def intact(k: int) -> bool:
        form, text, needle = SECRETS[k]
        return (text in corpus or _esc_label(text) in corpus or needle in " ".join(argv) or needle in raw_files
                or (form == "jwt_query" and text.split("jwt=", 1)[1] in corpus))

    for where, text in [("stdout", so), ("stderr", se), ("traceback", tb)] + pushed + [
            (str(p.relative_to(case_dir)), b.decode("utf-8", "replace")) for p, b in written]:
        for needle in NEEDLES:
            if needle in text and not (where.endswith(".om") and needle in served) and intact(NEEDLES.index(needle)):
                form = SECRETS[NEEDLES.index(needle)][0]
                i = text.index(needle)
                return _finding("leak", f"{form} secret in {where}: …{text[max(0, i - 80):i + 30]!r} | {line}")
    if escaped is not None:
        if isinstance(escaped, (KeyboardInterrupt, MemoryError, RecursionError)) or not _is_kvdiag_error(escaped):
            return _finding("uncaught", f"{type(escaped).__name__}: {str(escaped)[:300]} | {line}")
        if not debug:
            return _finding("uncaught", f"{type(escaped).__name__} escaped main: {str(escaped)[:300]} | {line}")
        return _finding("debug_exit", f"--debug: main raised {type(escaped).__name__} instead of exit 3 | {line}")
    both = so + "\n" + se
    if "internal error" in both.lower():
        i = both.lower().index("internal error")
        return _finding("internal_error", f"{both[i:i + 200]!r} | {line}")
    if not debug and "Traceback (most recent call last)" in both:
        i = both.index("Traceback (most recent call last)")
        return _finding("traceback", f"{both[i:i + 300]!r} | {line}")
    try:
        icode = int(code) if code is not None else 0
    except (TypeError, ValueError):
        icode = -999
    if icode not in allowed:
        return _finding("exit_code", f"exit {icode} not in {sorted(allowed)}: {se.strip()[-200:]!r} | {line}")
    may_change = {case_dir / m for m in doc.get("may_change", [])}
    named = [Path(a) for k, a in enumerate(argv) if a.startswith(str(case_dir))
             and (k == 0 or argv[k - 1] not in ("--output", "--out", "--tests", "--textfile"))]
    for p, raw in inputs.items():
        if p in may_change or not any(p == n or n in p.parents for n in named):
            continue  # only what the command reads: a file named on the command line or inside a folder named there
        try:
            now = p.read_bytes()
        except OSError:
            return _finding("clobbered", f"input {p.name} removed | {line}")
        if now != raw:
            return _finding("clobbered", f"input {p.name} overwritten ({len(raw)} -> {len(now)} bytes) | {line}")
    exported = [(Path("stdout"), so.encode())] if (cmd, sub) == ("rules", "export") else []
    tests_file = {argv[k + 1] for k, a in enumerate(argv[:-1]) if a == "--tests"}
    for p, body in written + exported:
        text = body.decode("utf-8", "replace")
        if (p.suffix in (".yml", ".yaml") or p.name == "stdout") and "kvdiagPWN" in text and str(p) not in tests_file:
            # a rule file Prometheus loads (not the promtool test file, whose expected annotations are the rendered,
            # literal text; not YAML comments, which Prometheus never renders)
            live = "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("#"))
            for tpl in GO_TEMPLATES:
                if tpl in live:
                    return _finding("template", f"Go template {tpl!r} exported verbatim to {p.name} | {line}")
        if p.suffix == ".html" or text.lstrip().lower().startswith(("<!doctype html", "<html")):
            low = text.lower()
            # a script, or anything the browser would fetch (links a reader may follow are fine)
            fetch = r"""<script|\bsrc\s*=\s*["']?(?:https?:)?//|<link[^>]*href\s*=\s*["']?(?:https?:)?//|url\(\s*["']?(?:https?:)?//"""
            m = re.search(fetch, low)
            if m:
                return _finding("html", f"{p.name}: {text[m.start():m.start() + 120]!r} | {line}")
    if seconds > SLOW_S:
        return _finding("slow", f"{seconds:.1f} s | {line}")
    return "ok" if icode in (0, 1, 2) else "refused"


FAMILIES = {
    "analyze-log": (gen_analyze_log, run_case),
    "analyze-log-gz": (gen_analyze_log_gz, run_case),
    "analyze-log-zst": (gen_analyze_log_zst, run_case),
    "analyze-page": (gen_analyze_page, run_case),
    "analyze-recording": (gen_analyze_recording, run_case),
    "analyze-config": (gen_analyze_config, run_case),
    "analyze-trace": (gen_analyze_trace, run_case),
    "analyze-url": (gen_analyze_url, run_case),
    "analyze-prom": (gen_analyze_prom, run_case),
    "html": (gen_html, run_case),
    "check": (gen_check, run_case),
    "check-http": (gen_check_http, run_case),
    "diff": (gen_diff, run_case),
    "simulate-trace": (gen_simulate_trace, run_case),
    "simulate-from-metrics": (gen_simulate_from_metrics, run_case),
    "simulate-lab-case": (gen_simulate_lab_case, run_case),
    "estimate": (gen_estimate, run_case),
    "rules-file": (gen_rules_file, run_case),
    "rules-test": (gen_rules_test, run_case),
    "rules-export": (gen_rules_export, run_case),
    "record": (gen_record, run_case),
}
OK_OUTCOMES = ("ok", "refused")


def scratch_dir(base: str | None = None) -> Path:
    import tempfile

    return Path(tempfile.mkdtemp(prefix="kvdiag-fuzz-blind-", dir=base or os.environ.get("TMPDIR")))


def _cli() -> int:
    import argparse

    ap = argparse.ArgumentParser(description="replay or sample the blind generators")
    sub = ap.add_subparsers(dest="cmd", required=True)
    rp = sub.add_parser("replay", help="run one saved .input file and print its outcome")
    rp.add_argument("file")
    sp = sub.add_parser("show", help="print the case of FAMILY at SEED:I")
    sp.add_argument("family")
    sp.add_argument("key", help="the generator's seed string, e.g. 29:diff:17")
    args = ap.parse_args()
    tmp = scratch_dir()
    try:
        if args.cmd == "replay":
            data = Path(args.file).read_bytes()
        else:
            data = FAMILIES[args.family][0](random.Random(args.key))
            doc = json.loads(data)
            print(json.dumps({"argv": doc["argv"], "files": {k: (v.get("t", "")[:300] if "t" in v else "<binary>")
                                                             for k, v in doc["files"].items()}}, indent=1))
        outcome = run_case(data, tmp)
        print(f"{outcome}: {LAST_FINDING}" if LAST_FINDING else outcome)
        return 0 if outcome in OK_OUTCOMES else 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(_cli())
