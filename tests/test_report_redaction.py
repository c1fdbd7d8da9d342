"""Secrets and control bytes from log lines never reach a report, and the JSON report stays JSON (breaker 12:
D1 JSON broken by redacting its serialised text, D2 AWS keys, D3 excerpt cut before redaction, D9 control bytes,
D10 unbounded model identity notes). Each runs the real CLI on a written log."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from kvdiag.redaction import redact

HEAD = "ERROR 10-15 00:03:10 [core.py:708] out of memory "
STARTUP = [
    "INFO 10-15 00:02:38 [api_server.py:1805] vLLM API server version 0.10.2",
    "(EngineCore_DP0 pid=812) INFO 10-15 00:03:10 [gpu_worker.py:276] Available KV cache memory: 1.20 GiB",
    "(EngineCore_DP0 pid=812) ERROR 10-15 00:03:10 [core.py:708] ValueError: To serve at least one request with the "
    "model's max seq len (32768), (1.75 GiB KV cache is needed, which is larger than the available KV cache memory "
    "(1.20 GiB). Based on the available memory, the estimated maximum model length is 22432. Try increasing "
    "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.",
]


def run(tmp_path, text: str, *args: str) -> subprocess.CompletedProcess:
    p = tmp_path / "x.log"
    p.write_bytes(text.encode())
    return subprocess.run([sys.executable, "-m", "kvdiag", *args, "--log", str(p)], capture_output=True, timeout=120)


# (message after HEAD, secrets that must not show)
QUOTED = [
    ('curl -H "Authorization: Basic dXNlcjpwdw==" http://h', ["dXNlcjpwdw"]),
    ('password: "hunter2 x"', ["hunter2"]),
    ("api_key='se\"cr\\et' next", ["se\"cr", "cr\\et"]),
    ('token="a\\\\b\\"c" end', ["a\\\\b"]),
    ('{"api_key": "k\\"ey1", "x": 1}', ["ey1"]),
    ('Authorization: Bearer abc.def\\"ghi', ["abc.def"]),
]


@pytest.mark.parametrize("msg,secrets", QUOTED)
def test_json_report_is_json_and_redacted(tmp_path, msg, secrets):
    r = run(tmp_path, HEAD + msg + "\n", "analyze", "--format", "json")
    doc = json.loads(r.stdout)                      # D1: the redactor ate an escaping backslash: not JSON
    flat = json.dumps(doc, ensure_ascii=False)
    notes = [n for i in doc["inputs"] for n in i["notes"]]
    assert any("seen, not understood" in n for n in notes), notes
    for s in secrets:
        assert s not in flat and s not in r.stdout.decode(), (s, notes)
    assert '***"***' not in flat                     # no double redaction of one quoted value


AWS = ("AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY "
       "SECRET_KEY=s3cr3tvalue OPENAI_API_KEY=abcd1234efgh")
AWS_SECRETS = ["AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI", "s3cr3tvalue", "abcd1234efgh"]


@pytest.mark.parametrize("fmt", ["text", "json", "markdown"])
def test_aws_keys_redacted_in_every_format(tmp_path, fmt):
    out = run(tmp_path, HEAD + AWS + "\n", "analyze", "--format", fmt).stdout.decode()
    assert "seen, not understood" in out
    for s in AWS_SECRETS:
        assert s not in out, (s, out)


@pytest.mark.parametrize("text,secret", [
    ("s3://AKIAIOSFODNN7EXAMPLE:wJalrXUtnFEMI/K7MDENG@bucket/key", "wJalrXUtnFEMI"),
    ("AKIAIOSFODNN7EXAMPLE:topsecretpw@host", "topsecretpw"),
    ("https://b.s3.amazonaws.com/o?X-Amz-Credential=ASIAIOSFODNN7EXAMPLE%2F20261201&X-Amz-Signature=deadbeef0123",
     "deadbeef0123"),
    ("https://b.s3.amazonaws.com/o?X-Amz-Signature=deadbeef0123&x=1", "deadbeef0123"),
    ("key ASIAIOSFODNN7EXAMPLE used", "ASIAIOSFODNN7EXAMPLE"),
    ("aws_secret_access_key: 'wJal rXUt'", "rXUt"),
])
def test_aws_shapes(text, secret):
    out = redact(text)
    assert secret not in out and "AKIAIOSFODNN7EXAMPLE" not in out and "ASIAIOSFODNN7EXAMPLE" not in out, out


def test_settings_with_key_like_words_stay():
    text = "max_num_batched_tokens=8192, kv_cache_dtype=auto, monkey_patch=1, enable_prefix_caching=True"
    assert redact(text) == text


@pytest.mark.parametrize("fmt", ["json", "text", "markdown"])
def test_excerpt_redacted_before_cut(tmp_path, fmt):
    out = run(tmp_path, HEAD + "y" * 118 + " api_key='TOPSECRET with space'\n", "analyze", "--format", fmt).stdout.decode()
    assert "seen, not understood" in out and "TOPSECRET" not in out, out


@pytest.mark.parametrize("args", [("analyze",), ("analyze", "--format", "markdown"), ("check",)])
def test_no_control_bytes_in_text_markdown_check(tmp_path, args):
    lines = list(STARTUP) + [HEAD + "bad\x00byte \x1b[2J\x07bell here"]
    lines[-2] = lines[-2].replace("which is larger", "which\x00 is larger")
    out = run(tmp_path, "\n".join(lines) + "\n", *args).stdout
    assert b"seen, not understood" in out or args == ("check",)
    for c in (b"\x00", b"\x07", b"\x1b[2J"):
        assert c not in out, (c, out)


def test_identity_notes_bounded(tmp_path):
    t = (f"INFO 10-15 00:02:38 [api_server.py:1805] vLLM API server version 0.{'9' * 3000}\n"
         f"INFO 10-15 00:02:40 [core.py:74] Initializing a V1 LLM engine with config: "
         f"model='{'a' * 10000}', quantization={'q' * 5000}, architectures=['{'A' * 4000}']\n" + STARTUP[-1] + "\n")
    notes = [n for i in json.loads(run(tmp_path, t, "analyze", "--format", "json").stdout)["inputs"]
             for n in i["notes"]]
    assert any(n.startswith("model aaaa") for n in notes) and any(n.startswith("vLLM version 0.99") for n in notes)
    assert max(map(len, notes)) <= 700, [len(n) for n in notes]
