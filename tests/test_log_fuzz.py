"""Fuzzing the log collector (hypothesis) and keeping secrets out of every output."""

from __future__ import annotations

import os
import random
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from conftest import FIXTURES
from kvdiag.bundle import Bundle
from kvdiag.collect.logs import read_logs
from kvdiag.redaction import redact
from kvdiag.errors import InputError
from kvdiag.report.formats import RENDERERS
from test_log_events import LINES

REAL_LINES = [line for case in sorted((FIXTURES / "logs" / "real").iterdir())
              for line in (case / "evidence.log").read_text(errors="replace").splitlines()[:40]]
SEED_LINES = [line for text, _ in LINES.values() for line in text.splitlines()] + REAL_LINES
WRAPPERS = ["{}", '{{"log":"{}\\n","stream":"stdout","time":"2025-01-01T00:00:00Z"}}',
            "2025-01-01T06:00:00.123456789Z stdout P {}", "2025-01-01T06:00:00Z stdout F {}",
            "\x1b[1;36m(EngineCore_DP0 pid=1)\x1b[0;0m {}", "[rank1]: {}", "bar 10%|#|\r{}\r"]
JUNK = ["\r", "\n", "\x1b[", "\x00", "{", "}", '"', "(", ")", "%", "9" * 30, "-1", "1e308", "nan", "GiB", "\udcff",
        "File \"", ", line ", "Error: ", " blocks: ", "KV cache usage: ", "12-31 23:59:59 ", "13-45 99:99:99 "]


def collect(data: bytes) -> Bundle:
    fd, path = tempfile.mkstemp(suffix=".log")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        b = Bundle()
        try:
            read_logs(b, [path], year=2025, progress=False)
        except InputError:
            pass
        b.frame()
        return b
    finally:
        os.unlink(path)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=3000))
def test_arbitrary_bytes_raise_nothing_but_input_error(data):
    collect(data)


@st.composite
def mutated_logs(draw) -> bytes:
    lines = draw(st.lists(st.sampled_from(SEED_LINES), min_size=1, max_size=8))
    out = []
    for line in lines:
        chars = list(line)
        for _ in range(draw(st.integers(0, 6))):
            pos = draw(st.integers(0, len(chars)))
            op = draw(st.sampled_from(["insert", "delete", "replace", "truncate"]))
            junk = draw(st.sampled_from(JUNK))
            if op == "insert":
                chars[pos:pos] = list(junk)
            elif op == "delete" and chars:
                del chars[pos:pos + draw(st.integers(1, 12))]
            elif op == "replace" and pos < len(chars):
                chars[pos] = draw(st.characters())
            else:
                chars = chars[:pos]
        out.append(draw(st.sampled_from(WRAPPERS)).format("".join(chars)))
    sep = draw(st.sampled_from(["\n", "\r\n", "\r"]))
    return sep.join(out).encode("utf-8", errors="surrogatepass" if draw(st.booleans()) else "replace")


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_logs())
def test_mutated_real_lines_raise_nothing_but_input_error(data):
    b = collect(data)
    df = b.frame()
    assert df["value"].dropna().map(lambda v: v == v).all()


def test_analyze_never_prints_a_traceback(kvdiag, tmp_path):
    """The real CLI on mutated real logs: a report or a one-line error, exit 0-3, never a traceback."""
    rng = random.Random(3)
    for i in range(4):
        lines = rng.sample(SEED_LINES, 30)
        text = "\n".join(line[:rng.randrange(len(line) + 1)] + rng.choice(JUNK[:-3]) if rng.random() < 0.5 else line
                         for line in lines)
        p = tmp_path / f"fuzz{i}.log"
        p.write_bytes(text.encode("utf-8", errors="replace") + bytes(rng.randrange(256) for _ in range(40)))
        res = kvdiag("analyze", "--log", str(p), "--format", "json")
        assert "Traceback" not in res.err, res.err
        assert res.code in (0, 1, 2, 3)
        assert res.out.startswith("{") or res.err.startswith("kvdiag: error:")


# ---- secrets ----------------------------------------------------------------------------------------------------
SECRETS = ["sk-PLANTED0123456789abcdefXYZ", "hf_PLANTEDabcdefghijklmnopqrstu", "PLANTEDbearerTOKEN42xyz",
           "PLANTED-pass-word-99", "PLANTEDplainapikey7"]
SECRET_LOG = f"""\
INFO 11-05 03:21:18 api_server.py:526] vLLM API server version 0.6.1.dev238+ge2c6e0a82
INFO 11-05 03:21:18 api_server.py:527] args: Namespace(host=None, port=8000, api_key='{SECRETS[0]}', lora_modules=None, max_model_len=29000, gpu_memory_utilization=0.9, block_size=16)
(APIServer pid=1) INFO 11-05 03:21:18 [utils.py:328] non-default args: {{'model': 'x', 'api_key': ['{SECRETS[4]}'], 'hf_token': '{SECRETS[1]}'}}
# command: vllm serve x --api-key {SECRETS[0]} --hf-token {SECRETS[1]}
DEBUG 11-05 03:21:19 api_server.py:600] headers: Authorization: Bearer {SECRETS[2]}, HF_TOKEN={SECRETS[1]}, password={SECRETS[3]}
Memory profiling results: total_gpu_memory=23.58GiB initial_memory_usage=15.34GiB peak_torch_memory=17.98GiB memory_usage_post_profile=15.35GiB non_torch_memory=0.35GiB kv_cache_size=2.89GiB gpu_memory_utilization=0.90
# GPU blocks: 1478, # CPU blocks: 2048
The model's max seq len (29000) is larger than the maximum number of tokens that can be stored in KV cache (23648). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.
Traceback (most recent call last):
  File "/v/vllm/worker/worker.py", line 1, in determine_num_available_blocks
ValueError: api_key={SECRETS[4]} token {SECRETS[0]}
"""


@pytest.mark.parametrize("text, hidden", [
    ("args: Namespace(api_key='sk-abcdefghijklmnop1234', port=8000)", "sk-abcdefghijklmnop1234"),
    ("{'api_key': ['abc123secret'], 'model': 'm'}", "abc123secret"),
    ("--api-key=topsecret1 --port 8000", "topsecret1"),
    ("--api-key topsecret2", "topsecret2"),
    ("HF_TOKEN=hf_abcdefghijklmnopqrstuvwx", "hf_abcdefghijklmnopqrstuvwx"),
    ('"Authorization": "Bearer eyJhbGciOiJIUzI1NiJ9.e30.x"', "eyJhbGciOiJIUzI1NiJ9"),
    ("password: hunter2hunter2", "hunter2hunter2"),
    ("uses ghp_0123456789abcdefghijABCD in a URL", "ghp_0123456789abcdefghijABCD"),
])
def test_redact_forms(text, hidden):
    out = redact(text)
    assert hidden not in out and "***" in out


def test_redact_keeps_settings():
    text = "api_key=None, max_model_len=29000, enable_prefix_caching=True, tokenizer='meta-llama/x'"
    assert redact(text) == text


def test_planted_secrets_stay_out_of_the_bundle(tmp_path):
    p = tmp_path / "vllm.log"
    p.write_text(SECRET_LOG)
    b = Bundle()
    read_logs(b, [str(p)], year=2025, progress=False)
    df = b.frame()
    blob = " ".join(df["text"].astype(str)) + " ".join(df["source"]) + " ".join(n for i in b.inputs for n in i.notes)
    assert b.has("exception") and b.has("kv_capacity_error")  # the lines around the secrets were read
    assert not [s for s in SECRETS if s in blob]


@pytest.mark.parametrize("fmt", sorted(set(RENDERERS) | {"text", "json", "markdown"}))
def test_planted_secrets_never_in_any_output(kvdiag, tmp_path, fmt):
    p = tmp_path / "vllm.log"
    p.write_text(SECRET_LOG)
    res = kvdiag("analyze", "--log", str(p), "--format", fmt)
    assert res.code == 2, res.err  # the KV-capacity start-up failure is diagnosed
    leaked = [s for s in SECRETS if s in res.out or s in res.err]
    assert not leaked, leaked
