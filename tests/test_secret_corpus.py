"""A planted-secret corpus (issue 19): 40+ secrets in logs, URLs, headers, token files and recordings, run through
every command and format, errors and ``--debug`` included. Not one may reach stdout, stderr or a written file.

Each secret is a unique marker string, so a leak is found by plain substring search (no redactor in the test)."""

from __future__ import annotations

import contextlib
import http.server
import io
import threading
from pathlib import Path

import pytest

from conftest import FIXTURES, _Handler, run_kvdiag
from kvdiag.cli import main
from kvdiag.report.formats import RENDERERS

PAGE = (FIXTURES / "metrics" / "vllm033_pressure_0054.prom").read_bytes()


def _s(n: int) -> str:
    """The n-th planted secret: unique, no substring of another one (fixed width)."""
    return f"Pl4nted{n:03d}Zq"


# (form, line): each line holds one secret in a form vLLM logs, launch scripts or env dumps print
LOG_FORMS = [
    "args: Namespace(api_key='{s}', model='m')",
    "non-default args: {{'api_key': ['{s}', 'x{s}y']}}",
    "--api-key {s}",
    "--hf-token={s}",
    "HF_TOKEN={s}",
    "hf_token: {s}",
    "password={s}",
    "Authorization: Bearer {s}",
    "AWS_ACCESS_KEY_ID=AKIA{s}ABCDEF",
    "AWS_SECRET_ACCESS_KEY={s}/K7MDENG+bPxRfiCY",
    "SECRET_KEY={s}",
    "OPENAI_API_KEY={s}",
    "db_password_file: {s}",
    "downloading https://bucket.s3.amazonaws.com/w.bin?X-Amz-Signature={s}&X-Amz-Date=1",
    "https://bucket/w?X-Amz-Credential={s}%2F2024&X-Amz-Security-Token={s}T",
    "fetch https://user:{s}@hub.example.com/model",
    "fetch https://user:{s}#x?y/z@hub.example.com/model",
    "GET http://h:8000/v1?jwt={s} 200",
    "GET http://h:8000/v1?page=1&x={s} 200",
    "credentials = {s}",
    "token: \"{s}\"",
    "api-key='{s} with space'",
]
BARE_FORMS = ["hf_{s}abcdefgh1234", "sk-{s}abcdefghij12", "ghp_{s}abcdefghijklmn12", "xoxb-{s}12345"]


def _corpus(tmp: Path):
    """Write the corpus; return (log path, list of secrets, url builder)."""
    secrets: list[str] = []
    n = 0
    lines = []
    for form in LOG_FORMS + BARE_FORMS:
        s = _s(n)
        n += 1
        secrets.append(s)
        text = form.format(s=s)
        lines.append(f"INFO 01-01 06:00:{n % 60:02d} [api_server.py:1] {text}")
        # the same secret inside a line kvdiag reads as trouble (an error excerpt) and one it does not know
        lines.append(f"ERROR 01-01 06:01:{n % 60:02d} [core.py:2] torch.OutOfMemoryError: CUDA out of memory. {text}")
    log = tmp / "vllm.log"
    log.write_text("\n".join(lines) + "\n")
    return log, secrets, n


_Page = type("_Page", (_Handler,), {"body": PAGE})  # conftest's fixed-body handler


@pytest.fixture(scope="module")
def server():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def _run(args: list[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(args)
        except BaseException as exc:  # --debug re-raises: its message counts as output too
            import traceback

            rc = -1
            err.write("".join(traceback.format_exception(exc)))
    return rc, out.getvalue() + err.getvalue()


def _files_text(folder: Path) -> str:
    inputs = {"vllm.log", "token.secret", "bad.prom", "good.prom"}
    return "".join(p.read_text(errors="replace") for p in folder.rglob("*") if p.is_file() and p.name not in inputs)


def test_planted_secret_corpus_never_leaks(tmp_path, server):
    log, secrets, n = _corpus(tmp_path)
    # URLs: every query name, userinfo passwords with # ? /, an AKIA userinfo; and one on an unreachable port
    url_forms = ["http://{h}/metrics?jwt={s}", "http://{h}/metrics?x={s}&y=1", "http://{h}/metrics?a=1;session={s}",
                 "http://u:{s}@{h}/metrics", "http://u:{s}#frag@{h}/metrics", "http://u:{s}?q@{h}/metrics",
                 "http://u:{s}/p@{h}/metrics", "http://AKIAABCDEFGHIJKLMNOP:{s}@{h}/metrics",
                 "http://{h}/metrics#{s}", "http://u:{s}@127.0.0.1:9/metrics?tok={s}X"]
    urls = []
    for form in url_forms:
        s = _s(n)
        n += 1
        secrets.append(s)
        urls.append(form.format(h=server, s=s))
    header_secret, header_secret2, token_secret, label_secret, label_secret2 = (_s(n + k) for k in range(5))
    secrets += [header_secret, header_secret2, token_secret, label_secret, label_secret2]
    token_file = tmp_path / "token.secret"
    token_file.write_text(token_secret + "\n")
    # recordings: a broken line with a secret in a label value (the parse error quotes it), and a valid one
    bad_rec = tmp_path / "bad.prom"
    bad_rec.write_text('vllm:num_requests_running{api_key="%s",url="http://h/?jwt=%sB"} 1 1700000000\n'
                       'vllm:num_requests_running{engine="0",token="%s"} oops 1700000001\n# EOF\n'
                       % (label_secret, label_secret, label_secret2))
    good_rec = tmp_path / "good.prom"
    good_rec.write_text('vllm:num_requests_running{engine="0",url="http://h/m?jwt=%sC"} 1 1700000000\n'
                        'vllm:num_requests_running{engine="0",url="http://h/m?jwt=%sC"} 2 1700000010\n# EOF\n'
                        % (label_secret2, label_secret2))
    assert len(secrets) >= 40
    http_opts = ["--header", f"Authorization: Bearer {header_secret}", "--header", f"X-Api-Key: {header_secret2}"]
    runs: list[list[str]] = []
    for fmt in RENDERERS:
        runs.append(["analyze", "--log", str(log), "--format", fmt])
        runs.append(["analyze", "--metrics-file", str(good_rec), "--format", fmt])
        for url in urls:
            runs.append(["analyze", "--metrics-url", url, "--duration", "0.2s", "--interval", "0.1s",
                         "--timeout", "2s", "--format", fmt] + http_opts)
    for url in urls[:4] + urls[-1:]:
        runs.append(["analyze", "--metrics-url", url, "--duration", "0.2s", "--interval", "0.1s",
                     "--bearer-token-file", str(token_file), "--timeout", "2s"])
    runs.append(["analyze", "--metrics-file", str(bad_rec)])
    runs.append(["analyze", "--log", str(log), "--metrics-file", str(bad_rec), "--format", "json"])
    for i, url in enumerate(urls):
        runs.append(["check", "--metrics-url", url, "--state", str(tmp_path / "state.json"),
                     "--textfile", str(tmp_path / f"tf{i}"), "--timeout", "2s"] + http_opts)
        runs.append(["record", "--metrics-url", url, "--out", str(tmp_path / f"rec{i}.prom"), "--duration", "0.3s",
                     "--interval", "0.1s", "--timeout", "2s", "--no-progress"] + http_opts)
    runs.append(["check", "--log", str(log), "--state", str(tmp_path / "state2.json")])
    runs.append(["check", "--metrics-file", str(bad_rec)])
    runs.append(["estimate", "--model-config", str(log), "--gpu-memory", "80"])
    debug_runs = [r + ["--debug"] for r in runs if "record" not in r][:12]
    for rc_args in runs + debug_runs:
        (tmp_path / "tf0").mkdir(exist_ok=True)
        for k in range(len(urls)):
            (tmp_path / f"tf{k}").mkdir(exist_ok=True)
        rc, text = _run(rc_args)
        leaked = [s for s in secrets if s in text]
        assert not leaked, (rc_args, leaked, text[:3000])
    written = _files_text(tmp_path)
    leaked = [s for s in secrets if s in written]
    assert not leaked, (leaked, written[:3000])
    # a few through the real entry point (a subprocess: the console script, its own stderr)
    for args in (["analyze", "--log", str(log), "--format", "markdown"],
                 ["analyze", "--metrics-url", urls[4], "--duration", "0.2s", "--interval", "0.1s"],
                 ["check", "--metrics-url", urls[-1], "--timeout", "1s", "--debug"],
                 ["analyze", "--metrics-file", str(bad_rec), "--debug"]):
        res = run_kvdiag(*args)
        leaked = [s for s in secrets if s in res.out + res.err]
        assert not leaked, (args, leaked, (res.out + res.err)[:3000])
