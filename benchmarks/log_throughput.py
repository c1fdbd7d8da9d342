"""Log collector throughput and memory on a realistic multi-GB vLLM log, next to ``grep -c``.

Builds (once, or reuses with ``--keep``) a vLLM 0.10-style log of ``--size-mb`` MiB: a start-up block
(banner, engine args with a planted API key, weights, memory accounting, KV pool, CUDA-graph capture
tqdm bars glued with ``\\r``), then serving at ``--rps`` requests/s: ``Received request`` lines with
prompts, ``Added request``, uvicorn access lines, the periodic stats line every 10 s, warnings,
and a request traceback every ~30 minutes of log time. Then measures, each in its own process
(peak RSS from ``wait4``):

* ``collector``: :func:`kvdiag.collect.logs.read_logs` alone;
* ``analyze``: the whole ``kvdiag analyze --log FILE --format json`` (collect, derive, rules, report);
* ``grep -c 'KV cache usage'`` on the same file (a lower bound on reading it at all).

Bad input (issue 12, Must show 4): ``--kind unrelated`` builds ``--size-mb`` of text with no vLLM line (web-server
access lines); ``--kind unseen`` builds ``--unseen-lines`` (default 10⁶) WARNING lines that look like memory trouble
but match no event, each listed as "seen, not understood" up to the cap and then counted. The collector's row then
also prints how many notes it wrote.

Usage: ``python benchmarks/log_throughput.py [--size-mb 1024] [--path /tmp/x.log] [--keep] [--kind vllm]``.
Prints wall time, MB/s, CPU time (user + system, so MB per CPU-second is robust to other load on the
machine) and peak RSS; it judges nothing (targets: >= 200 MB/s on one core, peak RSS <= 150 MB).
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

STARTUP = [
    "(APIServer pid=1) INFO 12-31 23:40:01 [api_server.py:1896] vLLM API server version 0.10.2",
    "(APIServer pid=1) INFO 12-31 23:40:01 [utils.py:328] non-default args: {'model': 'Qwen/Qwen3-32B', "
    "'max_model_len': 40000, 'gpu_memory_utilization': 0.92, 'api_key': ['sk-PLANTEDSECRET0123456789abcdef'], "
    "'enable_prefix_caching': True}",
    "(EngineCore_DP0 pid=270) INFO 12-31 23:40:40 [gpu_model_runner.py:2007] Model loading took 61.0297 GiB and "
    "12.480116 seconds",
    "(EngineCore_DP0 pid=270) INFO 12-31 23:40:52 [gpu_worker.py:276] Available KV cache memory: 9.46 GiB",
    "(EngineCore_DP0 pid=270) INFO 12-31 23:40:52 [kv_cache_utils.py:864] GPU KV cache size: 38,752 tokens",
    "(EngineCore_DP0 pid=270) INFO 12-31 23:40:52 [kv_cache_utils.py:868] Maximum concurrency for 40,000 tokens per "
    "request: 0.97x",
    "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE):  50%|█████     | 34/67 [00:02<00:02, 14.2it/s]\r"
    "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%|██████████| 67/67 [00:04<00:00, 14.9it/s]\r"
    "(EngineCore_DP0 pid=270) INFO 12-31 23:40:58 [gpu_model_runner.py:2708] Graph capturing finished in 6 secs, "
    "took 1.86 GiB",
    "(EngineCore_DP0 pid=270) INFO 12-31 23:40:58 [core.py:214] init engine (profile, create kv cache, warmup "
    "model) took 31.20 seconds",
]
WORDS = ("the quarterly report shows revenue growth across all regions while operating costs remained flat and the "
         "outlook for next year depends on supply chain constraints and currency movements").split()
TRACEBACK = [
    "(APIServer pid=1) ERROR 12-31 23:40:58 [serving_chat.py:1145] Error in chat completion stream generator.",
    "(APIServer pid=1) Traceback (most recent call last):",
    '(APIServer pid=1)   File "/usr/local/lib/python3.12/dist-packages/vllm/entrypoints/openai/serving_chat.py", '
    "line 574, in chat_completion_stream_generator",
    "(APIServer pid=1)     async for res in result_generator:",
    '(APIServer pid=1)   File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/async_llm.py", line 387, in '
    "generate",
    "(APIServer pid=1)     out = q.get_nowait() or await q.get()",
    "(APIServer pid=1) asyncio.exceptions.CancelledError",
]


def build(path: str, size_mb: int, rps: float, seed: int = 7) -> None:
    """Write the synthetic log (see module docstring) of at least ``size_mb`` MiB to ``path``."""
    rng = random.Random(seed)
    target = size_mb << 20
    t = 23 * 3600 + 41 * 60  # seconds since 12-31 00:00, crosses New Year after ~19 minutes
    day = 0
    written = 0
    interval = 0
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("\n".join(STARTUP) + "\n")
        while written < target:
            out = []
            n_req = int(rps * 10)
            for i in range(n_req):
                ts = t + i * 10 // n_req
                stamp = _stamp(day, ts)
                rid = f"chatcmpl-{rng.getrandbits(96):024x}"
                prompt = " ".join(rng.choice(WORDS) for _ in range(rng.randint(10, 120)))
                out.append(f"(APIServer pid=1) INFO {stamp} [logger.py:40] Received request {rid}: prompt: "
                           f"'<|im_start|>user\\n{prompt}<|im_end|>\\n<|im_start|>assistant\\n', params: "
                           f"SamplingParams(n=1, presence_penalty=0.0, frequency_penalty=0.0, temperature=0.7, "
                           f"top_p=0.8, top_k=20, max_tokens={rng.randint(64, 4096)}), prompt_token_ids: None, "
                           "lora_request: None.")
                out.append(f"(APIServer pid=1) INFO {stamp} [async_llm.py:320] Added request {rid}.")
                out.append(f"(APIServer pid=1) INFO:     10.0.{rng.randint(0, 9)}.{rng.randint(1, 254)}:"
                           f"{rng.randint(1024, 65535)} - \"POST /v1/chat/completions HTTP/1.1\" 200 OK")
                if rng.random() < 0.01:
                    out.append(f"(APIServer pid=1) WARNING {stamp} [protocol.py:81] The following fields were "
                               "present in the request but ignored: {'stream_options'}")
            t += 10
            if t >= 86400:
                t -= 86400
                day += 1
            usage = min(99.9, 60 + 40 * abs(((interval % 360) / 180.0) - 1))
            out.append(f"(APIServer pid=1) INFO {_stamp(day, t)} [loggers.py:123] Engine 000: Avg prompt throughput: "
                       f"{rng.uniform(500, 9000):.1f} tokens/s, Avg generation throughput: {rng.uniform(200, 2000):.1f}"
                       f" tokens/s, Running: {rng.randint(5, 40)} reqs, Waiting: {rng.randint(0, 30)} reqs, GPU KV "
                       f"cache usage: {usage:.1f}%, Prefix cache hit rate: {rng.uniform(0, 60):.1f}%")
            if interval % 180 == 179:
                out.extend(TRACEBACK)
            interval += 1
            chunk = "\n".join(out) + "\n"
            fh.write(chunk)
            written += len(chunk.encode())


def build_unrelated(path: str, size_mb: int) -> None:
    """``size_mb`` MiB of web-server access lines: no needle of the collector, nothing vLLM."""
    rng = random.Random(7)
    target = size_mb << 20
    written = 0
    with open(path, "w") as fh:
        while written < target:
            chunk = "".join(f"10.0.{rng.randint(0, 255)}.{rng.randint(0, 255)} - - [01/Dec/2025:10:{i % 60:02d}:00 "
                            f"+0000] \"GET /static/app.{rng.randint(0, 9999)}.js HTTP/1.1\" 200 {rng.randint(100, 99999)}"
                            " \"-\" \"Mozilla/5.0 (X11; Linux x86_64)\"\n" for i in range(10000))
            fh.write(chunk)
            written += len(chunk)


def build_unseen(path: str, n: int) -> None:
    """``n`` WARNING lines with memory-trouble wording that no event reads."""
    with open(path, "w") as fh:
        for start in range(0, n, 10000):
            fh.write("".join(f"WARNING 12-01 10:00:{i % 60:02d} [x.py:1] odd KV cache condition number {i} on rank 0\n"
                             for i in range(start, min(n, start + 10000))))


def build_stats(path: str, size_mb: int) -> None:
    """``size_mb`` MiB of nothing but periodic stats lines (issue 19: memory per stats line kept), 10 s apart."""
    rng = random.Random(7)
    target = size_mb << 20
    written, t, day = 0, 0, 0
    with open(path, "w") as fh:
        while written < target:
            out = []
            for _ in range(5000):
                t += 10
                if t >= 86400:
                    t, day = t - 86400, (day + 1) % 28
                out.append(f"(APIServer pid=1) INFO {_stamp(day, t)} [loggers.py:123] Engine 000: Avg prompt "
                           f"throughput: {rng.uniform(500, 9000):.1f} tokens/s, Avg generation throughput: "
                           f"{rng.uniform(200, 2000):.1f} tokens/s, Running: {rng.randint(5, 40)} reqs, Waiting: "
                           f"{rng.randint(0, 30)} reqs, GPU KV cache usage: {rng.uniform(0, 99):.1f}%, Prefix cache "
                           f"hit rate: {rng.uniform(0, 60):.1f}%")
            chunk = "\n".join(out) + "\n"
            fh.write(chunk)
            written += len(chunk)


def _stamp(day: int, sec: int) -> str:
    month, dom = (12, 31) if day == 0 else (1, day)
    return f"{month:02d}-{dom:02d} {sec // 3600:02d}:{sec // 60 % 60:02d}:{sec % 60:02d}"


def measure(cmd: list[str], root: str = ROOT) -> tuple[float, float, float, str]:
    """Run ``cmd`` in ``root`` (whose kvdiag it imports); return (wall seconds, CPU seconds, peak RSS MiB of that
    process, stdout)."""
    start = time.perf_counter()
    env = dict(os.environ, PYTHONPATH=root)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=root, env=env)
    out = proc.stdout.read()
    _, _status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024.0, out.decode(errors="replace")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--rps", type=float, default=30.0)
    ap.add_argument("--path", default=None)
    ap.add_argument("--keep", action="store_true", help="reuse --path if it exists and keep it afterwards")
    ap.add_argument("--kind", choices=("vllm", "unrelated", "unseen", "stats"), default="vllm")
    ap.add_argument("--unseen-lines", type=int, default=1_000_000)
    ap.add_argument("--baseline", default=None, metavar="DIR", help="another kvdiag tree (e.g. the commit before a "
                    "change, unpacked with git archive): its collector is measured in the same run, interleaved with "
                    "this tree's, and the ratios printed")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each collector with --baseline (best of)")
    args = ap.parse_args()
    path = args.path or os.path.join(tempfile.gettempdir(), f"kvdiag-bench-{args.kind}-{args.size_mb}mb.log")
    if not (args.keep and os.path.exists(path)):
        t0 = time.perf_counter()
        if args.kind == "unrelated":
            build_unrelated(path, args.size_mb)
        elif args.kind == "unseen":
            build_unseen(path, args.unseen_lines)
        elif args.kind == "stats":
            build_stats(path, args.size_mb)
        else:
            build(path, args.size_mb, args.rps)
        print(f"built {path} in {time.perf_counter() - t0:.1f} s")
    size = os.path.getsize(path)
    lines = sum(1 for _ in open(path, "rb"))
    collect = [sys.executable, "-c",
               "import sys; from kvdiag.bundle import Bundle; from kvdiag.collect.logs import read_logs; "
               "b = Bundle(); i = read_logs(b, [sys.argv[1]], progress=False)[0]; "
               "print(i.records, len(b), len(b.signal('kv_cache_usage')), 'notes', len(i.notes))", path]
    if args.baseline:
        best: dict[str, list] = {"new": [], "old": []}
        for _ in range(max(1, args.repeat)):  # interleaved, so a load change on the machine hits both alike
            best["old"].append(measure(collect, os.path.abspath(args.baseline)))
            best["new"].append(measure(collect))
        print(f"file: {path}  {size / 2**20:,.0f} MiB  {lines:,} lines; collector, best of {max(1, args.repeat)}")
        print(f"{'tree':6} {'CPU s':>7} {'MB/CPU-s':>9} {'peak RSS MiB':>13}  output")
        got = {}
        for name in ("old", "new"):
            wall, cpu, rss, out = min(best[name], key=lambda r: r[1])
            got[name] = (cpu, rss)
            print(f"{name:6} {cpu:7.2f} {size / 1e6 / max(cpu, 1e-9):9.1f} {rss:13.1f}  {out.strip()[:60]}")
        print(f"new/old CPU time {got['new'][0] / got['old'][0]:.3f}, peak RSS {got['new'][1] / got['old'][1]:.3f}")
        if not args.keep:
            os.unlink(path)
        return
    rows = [("kvdiag collector (read_logs)", *measure(collect)),
            ("kvdiag analyze --format json", *measure([sys.executable, "-m", "kvdiag", "analyze", "--log", path,
                                                      "--format", "json"])),
            ("grep -c 'KV cache usage'", *measure(["grep", "-c", "KV cache usage", path]))]
    print(f"file: {path}  {size / 2**20:,.0f} MiB  {lines:,} lines")
    print(f"{'what':32} {'wall s':>7} {'MB/s':>7} {'CPU s':>7} {'MB/CPU-s':>9} {'peak RSS MiB':>13}  output")
    for name, wall, cpu, rss, out in rows:
        first = out.strip().splitlines()[0][:40] if out.strip() else ""
        print(f"{name:32} {wall:7.2f} {size / 1e6 / wall:7.1f} {cpu:7.2f} {size / 1e6 / max(cpu, 1e-9):9.1f} "
              f"{rss:13.1f}  {first}")
    print(f"single core: yes (one Python process; nproc={os.cpu_count()})")
    if not args.keep:
        os.unlink(path)


if __name__ == "__main__":
    main()
