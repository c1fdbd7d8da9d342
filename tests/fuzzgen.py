"""Input generators and runners shared by the hypothesis fuzz suite (``tests/test_fuzz_inputs.py``) and the long
campaign (``benchmarks/fuzz_campaign.py``).

Each family has ``gen(rng) -> bytes`` (a mutated real input: a log, a /metrics page, an OpenMetrics recording, a
config.json, a rule file, a state file, a URL) and ``run(data, tmp) -> "ok" | "refused"``: the input goes through
kvdiag's own entry (collector, derive, rules, every renderer) and may end in a report (``ok``) or in one
``KvdiagError`` (``refused``, the clean one-line error of the CLI). Any other exception is a defect and propagates.
"""

from __future__ import annotations

import functools
import json
import os
import random
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"

# numbers as no server prints them, and text that breaks naive parsers
ODD_NUMBERS = ["1.2.3", ".", ",", "9" * 5000, "1" + "0" * 400, "1e999", "-1e17", "1e20", "NaN", "nan", "+Inf", "-Inf",
               "-0", "0x10", "1_000", "١٢٣", "", " ", "-", "e5", "1e", "9" * 30, "-9" * 20, "0.000000001", "1,2,3",
               "18446744073709551616", "4.9e-324", "1.7976931348623157e309"]
JUNK = ["\r", "\n", "\x1b[31m", "\x00", "{", "}", '"', "(", ")", "%", "\\", "GiB", "\udcff", "File \"", ", line ",
        "Error: ", " blocks: ", "KV cache usage: ", "# EOF", "# TYPE x histogram", "le=", "=", "#", "\t", "’"]
SECRET = "FuzzS3cr3tQ"  # planted in URLs: must never come out of safe_url / redact
_NUM = re.compile(r"\d+(?:[.,]\d+)*(?:[eE][+-]?\d+)?")


@functools.lru_cache(maxsize=None)
def _seed_logs() -> tuple[str, ...]:
    lines: list[str] = []
    for case in sorted((FIXTURES / "logs" / "real").iterdir()):
        log = case / "evidence.log"
        if log.is_file():
            lines += log.read_text(errors="replace").splitlines()[:200]
    return tuple(line for line in lines if line.strip())


@functools.lru_cache(maxsize=None)
def _seed_pages() -> tuple[str, ...]:
    return tuple(p.read_text() for p in sorted((FIXTURES / "metrics").glob("*.prom")))


@functools.lru_cache(maxsize=None)
def _seed_configs() -> tuple[str, ...]:
    return tuple(p.read_text() for p in sorted((FIXTURES / "models").glob("*.json")))


@functools.lru_cache(maxsize=None)
def _seed_rules() -> tuple[str, ...]:
    return tuple(p.read_text() for p in sorted((ROOT / "rules").glob("*/*.yaml")))


def _mutate_numbers(rng: random.Random, line: str, k: int = 2) -> str:
    ms = list(_NUM.finditer(line))
    for m in sorted(rng.sample(ms, min(k, len(ms))), key=lambda m: -m.start()):
        line = line[:m.start()] + rng.choice(ODD_NUMBERS) + line[m.end():]
    return line


def _mutate_chars(rng: random.Random, text: str, n: int) -> str:
    chars = list(text)
    for _ in range(n):
        pos = rng.randint(0, len(chars))
        op = rng.random()
        if op < 0.4:
            chars[pos:pos] = list(rng.choice(JUNK))
        elif op < 0.7 and chars:
            del chars[pos:pos + rng.randint(1, 8)]
        elif chars:
            chars[min(pos, len(chars) - 1)] = chr(rng.randint(0, 0x2FF))
    return "".join(chars)


def gen_log(rng: random.Random) -> bytes:
    seeds = _seed_logs()
    start = rng.randrange(len(seeds))
    lines = list(seeds[start:start + rng.randint(1, 30)])
    for i in range(len(lines)):
        r = rng.random()
        if r < 0.35:
            lines[i] = _mutate_numbers(rng, lines[i], rng.randint(1, 3))
        elif r < 0.5:
            lines[i] = _mutate_chars(rng, lines[i], rng.randint(1, 4))
        elif r < 0.55:
            lines[i] = '{"log":"%s\\n","stream":"stdout","time":"2025-01-01T00:00:00Z"}' % lines[i].replace('"', '\\"')
    if rng.random() < 0.1:
        lines.append(lines[-1] * rng.randint(2, 200))  # a long line
    return ("\n".join(lines) + rng.choice(["\n", "", "\r\n"])).encode("utf-8", "surrogateescape")


def _page_lines(rng: random.Random) -> list[str]:
    page = rng.choice(_seed_pages()).splitlines()
    vllm = [i for i, line in enumerate(page) if line.startswith("vllm")]
    for i in rng.sample(vllm, min(len(vllm), rng.randint(1, 6))):
        line = page[i]
        r = rng.random()
        if r < 0.3:  # the value
            page[i] = line.rsplit(" ", 1)[0] + " " + rng.choice(ODD_NUMBERS + ["1", "0.5", "-1", "9" * 400])
        elif r < 0.5:  # a timestamp
            page[i] = line + " " + rng.choice(ODD_NUMBERS + ["1700000000", "1700000000000", "1e10"])
        elif r < 0.65 and 'le="' in line:
            page[i] = re.sub(r'le="[^"]*"', 'le="%s"' % rng.choice(ODD_NUMBERS), line)
        elif r < 0.8:  # a label value
            page[i] = re.sub(r'="[^"]*"', lambda m: '="%s"' % rng.choice(ODD_NUMBERS + JUNK[:3] + ["None", "True"]),
                             line, count=1)
        else:
            page[i] = _mutate_chars(rng, line, rng.randint(1, 3))
    return page


def gen_page(rng: random.Random) -> bytes:
    return ("\n".join(_page_lines(rng)) + "\n").encode("utf-8", "surrogateescape")


def gen_recording(rng: random.Random) -> bytes:
    out = []
    t0 = 1_700_000_000 + rng.randint(0, 10 ** 6)
    for k in range(rng.randint(1, 4)):
        lines = [line for line in _page_lines(rng) if line and not line.startswith("#")]
        ts = rng.choice([f"{t0 + 15 * k}", f"{t0 + 15 * k}.5", rng.choice(ODD_NUMBERS)]) if rng.random() < 0.2 \
            else f"{t0 + 15 * k}"
        out += [line if len(line.split(" ")) > 2 and rng.random() < 0.5 else f"{line} {ts}" for line in lines]
    if rng.random() < 0.9:
        out.append("# EOF")
    return ("\n".join(out) + "\n").encode("utf-8", "surrogateescape")


def _odd_json(rng: random.Random):
    return rng.choice(["x", [1], [], {}, None, True, -1, 0, 1.5, 2 ** 60, "1e999", {"a": 1}, 10 ** 30, -(10 ** 20)])


def gen_config(rng: random.Random) -> bytes:
    cfg = json.loads(rng.choice(_seed_configs()))
    keys = list(cfg)
    extra = ["linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
             "linear_conv_kernel_dim", "full_attention_interval", "sliding_window", "layers_block_type",
             "text_config", "kv_lora_rank", "linear_attn_config", "hybrid_override_pattern", "head_dim",
             "num_key_value_heads", "torch_dtype", "quantization_config", "model_type"]
    for _ in range(rng.randint(1, 4)):
        key = rng.choice(keys + extra)
        cfg[key] = _odd_json(rng) if rng.random() < 0.8 else rng.choice(["qwen3_next", "gemma3", "jamba", "deepseek_v3"])
    if rng.random() < 0.2:
        cfg.update(model_type="qwen3_next", full_attention_interval=4, linear_num_value_heads=32,
                   linear_num_key_heads=_odd_json(rng), linear_key_head_dim=128, linear_value_head_dim=128,
                   linear_conv_kernel_dim=4)
    text = json.dumps(cfg)
    r = rng.random()
    if r < 0.15:
        text = _NUM.sub(lambda m: rng.choice(["9" * rng.randint(17, 6000), m.group(0), "1e400"]), text, count=3)
    elif r < 0.25:
        text = _mutate_chars(rng, text, rng.randint(1, 5))
    elif r < 0.3:
        text = "[" * rng.randint(10, 3000) + "]" * rng.randint(0, 3000)
    return text.encode("utf-8", "surrogateescape")


def gen_rule(rng: random.Random) -> bytes:
    text = rng.choice(_seed_rules())
    r = rng.random()
    if r < 0.25:
        text = _mutate_numbers(rng, text, rng.randint(1, 3))
    elif r < 0.45:
        text = _mutate_chars(rng, text, rng.randint(1, 6))
    elif r < 0.6:  # an evidence item, a template field, an agg that does not exist
        text += rng.choice(["\nevidence: [kv_cache_usage.median]\n", "\nevidence: [kv_cache_usage.p95]\n",
                            "\nevidence: [nope.max]\n", "\nevidence: kv_cache_usage\n",
                            "\nmessage: '{kv_cache_usage.median:.1%}'\n", "\nmessage: '{x:>9999}'\n"])
    elif r < 0.75:  # aliases repeating aliases
        width, depth = rng.randint(2, 12), rng.randint(2, 10)
        lines = ['a0: &a0 ["lol"]']
        for d in range(1, depth):
            lines.append(f"a{d}: &a{d} [" + ",".join([f"*a{d - 1}"] * width) + "]")
        text = text + "\nreferences: *a%d\n" % (depth - 1) if rng.random() < 0.5 else "\n".join(lines) + "\n" + text
        if rng.random() < 0.5:
            text = "\n".join(lines) + "\nreferences: *a%d\n" % (depth - 1) + text.split("references:", 1)[0]
    elif r < 0.8:
        text = "a: " + "[" * rng.randint(10, 5000)
    else:
        lines = text.splitlines()
        if lines:
            del lines[rng.randrange(len(lines))]
        text = "\n".join(lines)
    return text.encode("utf-8", "surrogateescape")


def gen_state(rng: random.Random) -> bytes:
    entry = {"t": 1_700_000_000.0, "counters": {"num_preemptions": 3.0, "prompt_tokens": 10.0},
             "process_start_time": 1_699_990_000.0}
    for _ in range(rng.randint(1, 3)):
        key = rng.choice(["t", "counters", "process_start_time", "x"])
        entry[key] = _odd_json(rng) if rng.random() < 0.7 else {"num_preemptions": _odd_json(rng)}
    data = {"version": rng.choice([1, 1, 1, 2, "1", None]), "instances": {"inst": entry}}
    if rng.random() < 0.2:
        data["instances"] = _odd_json(rng)
    text = json.dumps(data)
    if rng.random() < 0.2:
        text = _mutate_chars(rng, text, rng.randint(1, 5))
    elif rng.random() < 0.1:
        text = _NUM.sub(lambda m: "9" * rng.randint(17, 6000), text, count=1)
    return text.encode("utf-8", "surrogateescape")


def gen_url(rng: random.Random) -> bytes:
    host = rng.choice(["h", "127.0.0.1:8000", "[::1]:9090", "host.example:443", ""])
    forms = ["http://{h}/metrics?{n}={s}", "http://u:{s}@{h}/metrics", "http://u:pa{c}{s}@{h}/metrics",
             "https://{h}/m?a=1&{n}={s};b=2", "{h}/metrics?{n}={s}", "//u:{s}@{h}/x", "http://{h}/m#{s}",
             "http://AKIAABCDEFGHIJKLMNOP:{s}@{h}/", "u:{s}@{h}/metrics", "http://{h}/m?{n}={s}&{n}2={s}"]
    name = rng.choice(["jwt", "x", "token", "q", "", "a b", "%20"])
    url = rng.choice(forms).format(h=host, n=name, s=SECRET + rng.choice(["", "/x", "?y", "#z", "%40", "&"]),
                                   c=rng.choice("#?/@:"))
    return url.encode()


# ---- runners ---------------------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _rules_cached(dirs: tuple) -> list:
    from kvdiag.engine.model import load_rules

    return load_rules(list(dirs))


def _judge_and_render(**sources) -> None:
    import kvdiag.analyze as A
    from kvdiag.report.formats import RENDERERS

    real = A.load_rules
    A.load_rules = lambda dirs=None: _rules_cached(tuple(dirs or ()))  # the shipped rules, parsed once per process
    try:
        report = A.analyze(progress=False, year=2025, **sources)
    finally:
        A.load_rules = real
    for render in RENDERERS.values():
        render(report)


def _write(tmp: Path, name: str, data: bytes) -> str:
    path = tmp / name
    path.write_bytes(data)
    return str(path)


def _outcome(fn, *args, **kw) -> str:
    from kvdiag.errors import KvdiagError

    try:
        fn(*args, **kw)
    except KvdiagError:
        return "refused"
    return "ok"


def run_log(data: bytes, tmp: Path, judge: bool = True) -> str:
    path = _write(tmp, "vllm.log", data)
    if judge:
        return _outcome(_judge_and_render, logs=[path])
    from kvdiag.bundle import Bundle
    from kvdiag.collect.logs import read_logs

    return _outcome(lambda: read_logs(Bundle(), [path], year=2025, progress=False))


def run_page(data: bytes, tmp: Path, judge: bool = True, name: str = "page.prom") -> str:
    path = _write(tmp, name, data)
    if judge:
        return _outcome(_judge_and_render, metrics_files=[path])
    from kvdiag.bundle import Bundle
    from kvdiag.collect.metrics import read_metrics_file

    return _outcome(lambda: read_metrics_file(Bundle(), path))


def run_recording(data: bytes, tmp: Path, judge: bool = True) -> str:
    return run_page(data, tmp, judge, name="rec.prom")


def run_config(data: bytes, tmp: Path, judge: bool = True) -> str:
    path = _write(tmp, "config.json", data)

    def load():  # the one loader of every --model-config (kvdiag.capacity.load_model_config)
        from kvdiag.capacity import load_model_config

        load_model_config(path)

    return _outcome(load)


def run_rule(data: bytes, tmp: Path, judge: bool = True) -> str:
    folder = tmp / "rules"
    folder.mkdir(exist_ok=True)
    for old in folder.iterdir():
        old.unlink()
    path = _write(folder, "R.yaml", data)

    def load_and_use():
        from kvdiag.engine.model import load_rule

        rule = load_rule(path)
        if judge:
            from kvdiag.bundle import Bundle
            from kvdiag.engine.evaluate import evaluate

            b = Bundle()
            for sig, v in (("kv_cache_usage", 0.95), ("num_requests_waiting", 4.0), ("num_preemptions", 2.0)):
                b.add(sig, v, "fuzz", t=1_700_000_000.0)
                b.add(sig, v * 1.1, "fuzz", t=1_700_000_060.0)
            evaluate([rule], b)

    return _outcome(load_and_use)


def run_state(data: bytes, tmp: Path, judge: bool = True) -> str:
    path = _write(tmp, "state.json", data)

    def use():
        from kvdiag.check import CheckState, check_state_path, load_state, save_state

        check_state_path(path)
        load_state(path, "inst", now=1_700_000_100.0)
        note = save_state(path, "inst2", CheckState(1_700_000_100.0, {"num_preemptions": 1.0}, None))
        assert isinstance(note, str)

    return _outcome(use)


def run_url(data: bytes, tmp: Path, judge: bool = True) -> str:
    from kvdiag.collect.metrics import safe_url
    from kvdiag.redaction import redact

    url = data.decode()
    shown = [safe_url(url), redact(f"kvdiag: error: {safe_url(url)}: cannot connect")]
    if re.match(r"https?://", url) and "#" not in url and not re.search(r"\s", url):
        shown.append(redact(f"GET {url} 200"))  # a URL a log line holds: its query values and userinfo password
    for text in shown:
        if SECRET in text:
            raise AssertionError(f"secret shown: {url!r} -> {text!r}")
    return "ok"


FAMILIES = {
    "log": (gen_log, run_log),
    "page": (gen_page, run_page),
    "recording": (gen_recording, run_recording),
    "config": (gen_config, run_config),
    "rule": (gen_rule, run_rule),
    "state": (gen_state, run_state),
    "url": (gen_url, run_url),
}


def scratch_dir(base: str | None = None) -> Path:
    import tempfile

    return Path(tempfile.mkdtemp(prefix="kvdiag-fuzz-", dir=base or os.environ.get("TMPDIR")))
