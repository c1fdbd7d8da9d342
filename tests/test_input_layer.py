"""Issue 29, "Must show" 3: every click option (and argument) that takes a file or a URL is read through the input
layer (``kvdiag/inputs/``, over ``kvdiag/fileio.py``).

The test walks the whole command tree, lists every parameter whose type is a path or whose metavar names a FILE, DIR
or URL (and every positional argument), and fails when one is in none of the tables below (a new option must say
whether it is read, written, or no file at all). Then it runs each read one on a real file or a loopback server:
``python -m kvdiag`` under an audit hook (PEP 578) that notes, for every open of a file in the option's folder and
every connection to the server, the innermost kvdiag frame that made it. The test fails when that frame is outside
the input layer, or when the option's input was never read at all (a recipe that proves nothing).
"""

from __future__ import annotations

import http.server
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import click
import pytest

from conftest import FIXTURES, ROOT

LAYER = ("kvdiag/inputs/", "kvdiag/fileio.py")
PAGE = FIXTURES / "metrics" / "vllm033_quiet_0030.prom"
LOG = FIXTURES / "logs" / "real" / "011-v0102-kv-near-100-waiting-queue-grows" / "evidence.log"
CONFIG = FIXTURES / "models" / "llama-3.1-8b-instruct.json"
CERT = FIXTURES / "tls" / "loopback-cert.pem"
LAB = FIXTURES / "simulate" / "evict_load_011"
SERIES = FIXTURES / "series" / "vllm033_quiet"
STEP = "overhead_ms=1,weights_ms=1,compute_us_per_token=10,kv_read_ns_per_token=10"

# options kvdiag writes (checked by kvdiag.fileio.check_output_target, never read as an input) and parameters that
# name no file; every other file or URL parameter must have a recipe in READS
WRITES = {("analyze", "--output"), ("diff", "--output"), ("simulate", "--output"), ("record", "--out"),
          ("rules export", "--out"), ("rules export", "--tests"), ("check", "--textfile"), ("check", "--pushgateway"),
          ("dashboards export", "--out")}
# --runbook-base is the address the runbooks are published at: written into the alerts, never fetched
NOT_FILES = {("rules explain", "rule_id"), ("rules export", "--runbook-base")}


def _walk(cmd, path=()):
    if isinstance(cmd, click.Group):
        for name, sub in sorted(cmd.commands.items()):
            yield from _walk(sub, path + (name,))
    else:
        yield " ".join(path), cmd


def file_parameters() -> set[tuple[str, str]]:
    """Every ``(command, option)`` whose value is a file, a folder or a URL (positional arguments by name)."""
    from kvdiag.cli import cli

    found = set()
    for name, cmd in _walk(cli):
        for p in cmd.params:
            metavar = (getattr(p, "metavar", None) or "").upper()
            if isinstance(p, click.Argument):
                found.add((name, p.name))
            elif isinstance(p.type, click.Path) or any(k in metavar for k in ("FILE", "DIR", "URL")):
                found.add((name, max(p.opts, key=len)))
    return found


# --- the recipes: each builds the option's input in ``src`` (watched) and the rest in ``other`` (not watched) ---------

def _page(src: Path) -> str:
    shutil.copy(PAGE, src / "page.prom")
    return str(src / "page.prom")


def _log(src: Path) -> str:
    shutil.copy(LOG, src / "vllm.log")
    return str(src / "vllm.log")


def _config(src: Path) -> str:
    shutil.copy(CONFIG, src / "config.json")
    return str(src / "config.json")


def _rules(src: Path) -> str:
    d = src / "rules"
    shutil.copytree(ROOT / "rules" / "capacity_pressure", d)
    return str(d)


def _token(src: Path) -> str:
    (src / "token").write_text("t0ken-value\n")
    return str(src / "token")


def _ca(src: Path) -> str:
    shutil.copy(CERT, src / "ca.pem")
    return str(src / "ca.pem")


def _trace(src: Path) -> str:
    (src / "trace.csv").write_text("arrival_s,prompt_tokens,output_tokens\n0,100,10\n1,200,20\n")
    return str(src / "trace.csv")


def _state(src: Path) -> str:
    (src / "state.json").write_text(json.dumps({"version": 1, "instances": {}}))
    return str(src / "state.json")


def _lab(src: Path) -> str:
    d = src / "case"
    d.mkdir()
    for f in ("workload.json", "truth.json", "times.csv"):
        shutil.copy(LAB / f, d / f)
    return str(d)


def _series(src: Path) -> str:
    d = src / "series"
    (d / "metrics").mkdir(parents=True)
    for k in ("0001", "0002", "0003", "0004", "0005"):
        shutil.copy(SERIES / "metrics" / f"{k}.prom", d / "metrics" / f"{k}.prom")
    (d / "times.csv").write_text("\n".join((SERIES / "times.csv").read_text().splitlines()[:7]) + "\n")
    return str(d)


def _cases(src: Path) -> str:
    d = src / "cases"
    shutil.copytree(ROOT / "rules" / "capacity_pressure" / "cases", d)
    return str(d)


# (command, option) -> (argv builder(src, other, url), what the server must serve: "metrics" / "prometheus" / None)
READS = {
    ("analyze", "--log"): (lambda s, o, u: ["analyze", "--log", _log(s)], None),
    ("analyze", "--metrics-file"): (lambda s, o, u: ["analyze", "--metrics-file", _page(s)], None),
    ("analyze", "--metrics-url"): (lambda s, o, u: ["analyze", "--metrics-url", u + "/metrics", "--duration", "1s"],
                                   "url"),
    ("analyze", "--model-config"): (lambda s, o, u: ["analyze", "--model-config", _config(s), "--gpu-memory", "80"],
                                    None),
    ("analyze", "--rules"): (lambda s, o, u: ["analyze", "--rules", _rules(s), "--metrics-file", _page(o)], None),
    ("analyze", "--prometheus-url"): (lambda s, o, u: ["analyze", "--prometheus-url", u, "--since", "5m"], "url"),
    ("analyze", "--bearer-token-file"): (lambda s, o, u: ["analyze", "--metrics-url", u + "/metrics", "--duration",
                                                          "1s", "--bearer-token-file", _token(s)], None),
    ("analyze", "--ca-cert"): (lambda s, o, u: ["analyze", "--metrics-url", u + "/metrics", "--duration", "1s",
                                                "--ca-cert", _ca(s)], None),
    ("analyze", "--trace"): (lambda s, o, u: ["analyze", "--metrics-file", _page(o), "--trace", _trace(s),
                                              "--step-cost", STEP], None),
    ("check", "--log"): (lambda s, o, u: ["check", "--log", _log(s)], None),
    ("check", "--metrics-file"): (lambda s, o, u: ["check", "--metrics-file", _page(s)], None),
    ("check", "--metrics-url"): (lambda s, o, u: ["check", "--metrics-url", u + "/metrics"], "url"),
    ("check", "--model-config"): (lambda s, o, u: ["check", "--model-config", _config(s), "--gpu-memory", "80"], None),
    ("check", "--rules"): (lambda s, o, u: ["check", "--rules", _rules(s), "--metrics-file", _page(o)], None),
    ("check", "--state"): (lambda s, o, u: ["check", "--metrics-file", _page(o), "--state", _state(s)], None),
    ("check", "--bearer-token-file"): (lambda s, o, u: ["check", "--metrics-url", u + "/metrics",
                                                        "--bearer-token-file", _token(s)], None),
    ("check", "--ca-cert"): (lambda s, o, u: ["check", "--metrics-url", u + "/metrics", "--ca-cert", _ca(s)], None),
    ("diff", "before"): (lambda s, o, u: ["diff", _log(s), _page(o)], None),
    ("diff", "after"): (lambda s, o, u: ["diff", _page(o), _page(s)], None),
    ("diff", "--before-also"): (lambda s, o, u: ["diff", _page(o), str(ROOT / "fixtures/metrics/vllm033_pressure_0054.prom"),
                                                 "--before-also", _log(s)], None),
    ("diff", "--after-also"): (lambda s, o, u: ["diff", _page(o), str(ROOT / "fixtures/metrics/vllm033_pressure_0054.prom"),
                                                "--after-also", _log(s)], None),
    ("diff", "--prometheus-url"): (lambda s, o, u: ["diff", "--prometheus-url", u, "--before-window",
                                                    "1700000000..1700000600", "--after-window",
                                                    "1700001000..1700001600"], "url"),
    ("diff", "--rules"): (lambda s, o, u: ["diff", _page(o), str(ROOT / "fixtures/metrics/vllm033_pressure_0054.prom"),
                                           "--rules", _rules(s)], None),
    ("estimate", "--model-config"): (lambda s, o, u: ["estimate", "--model-config", _config(s), "--kv-cache-memory",
                                                      "20"], None),
    ("record", "--metrics-url"): (lambda s, o, u: ["record", "--metrics-url", u + "/metrics", "--duration", "1s",
                                                   "--interval", "0.5s", "--out", str(o / "rec.om")], "url"),
    ("record", "--bearer-token-file"): (lambda s, o, u: ["record", "--metrics-url", u + "/metrics", "--duration", "1s",
                                                         "--out", str(o / "rec.om"), "--bearer-token-file",
                                                         _token(s)], None),
    ("record", "--ca-cert"): (lambda s, o, u: ["record", "--metrics-url", u + "/metrics", "--duration", "1s",
                                               "--out", str(o / "rec.om"), "--ca-cert", _ca(s)], None),
    ("rules explain", "--rules"): (lambda s, o, u: ["rules", "explain", "CAP001", "--rules", _rules(s)], None),
    ("rules export", "--rules"): (lambda s, o, u: ["rules", "export", "--rules", _rules(s), "--out",
                                                   str(o / "a.yml")], None),
    ("rules list", "--rules"): (lambda s, o, u: ["rules", "list", "--rules", _rules(s)], None),
    ("dashboards export", "--rules"): (lambda s, o, u: ["dashboards", "export", "--rules", _rules(s), "--out",
                                                        str(o / "d.json")], None),
    ("rules test", "cases_dir"): (lambda s, o, u: ["rules", "test", _cases(s)], None),
    ("rules test", "--rules"): (lambda s, o, u: ["rules", "test", "--rules", _rules(s)], None),
    # watch runs until interrupted: read while it runs, then SIGINT (LIVE)
    ("watch", "urls"): (lambda s, o, u: ["watch", u + "/metrics", "--no-tui", "--interval", "200ms"], "url"),
    ("watch", "--prometheus-url"): (lambda s, o, u: ["watch", "--prometheus-url", u, "--no-tui", "--interval",
                                                     "200ms"], "url"),
    ("watch", "--rules"): (lambda s, o, u: ["watch", u + "/metrics", "--no-tui", "--interval", "200ms", "--rules",
                                            _rules(s)], None),
    ("watch", "--bearer-token-file"): (lambda s, o, u: ["watch", u + "/metrics", "--no-tui", "--interval", "200ms",
                                                        "--bearer-token-file", _token(s)], None),
    ("watch", "--ca-cert"): (lambda s, o, u: ["watch", u + "/metrics", "--no-tui", "--interval", "200ms",
                                              "--ca-cert", _ca(s)], None),
    ("simulate", "--trace"): (lambda s, o, u: ["simulate", "--trace", _trace(s), "--num-gpu-blocks", "100",
                                               "--step-cost", STEP], None),
    ("simulate", "--lab-case"): (lambda s, o, u: ["simulate", "--lab-case", _lab(s), "--max-steps", "2000"], None),
    ("simulate", "--from-metrics"): (lambda s, o, u: ["simulate", "--from-metrics", _series(s), "--max-num-seqs", "8",
                                                      "--step-cost", STEP, "--max-steps", "2000"], None),
    ("simulate", "--model-config"): (lambda s, o, u: ["simulate", "--trace", _trace(o), "--model-config", _config(s),
                                                      "--kv-cache-memory", "1", "--step-cost", STEP], None),
}

_PRELUDE = r"""
import json, os, runpy, sys, threading
watch, port, out_path, root = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
out = open(out_path, "a")
kv = os.path.join(root, "kvdiag") + os.sep
busy = threading.local()

def innermost():
    f = sys._getframe(2)
    while f is not None:
        name = f.f_code.co_filename
        if name.startswith(kv):
            return os.path.relpath(name, root) + ":" + f.f_code.co_name
        f = f.f_back
    return "(no kvdiag frame)"

def hook(event, args):
    if event not in ("open", "socket.connect") or getattr(busy, "on", False):
        return
    busy.on = True
    try:
        if event == "open":
            path, mode, flags = args
            if not isinstance(path, (str, bytes, os.PathLike)) or isinstance(path, int):
                return
            p = os.path.abspath(os.fsdecode(path))
            reading = (flags & os.O_ACCMODE) == os.O_RDONLY if isinstance(flags, int) else "r" in (mode or "r")
            if p.startswith(watch) and reading and not os.path.isdir(p):
                out.write(json.dumps(["open", p, innermost()]) + "\n"); out.flush()
        else:
            sock, addr = args
            if isinstance(addr, tuple) and len(addr) >= 2 and addr[1] == port:
                out.write(json.dumps(["connect", str(addr[:2]), innermost()]) + "\n"); out.flush()
    finally:
        busy.on = False

sys.addaudithook(hook)
sys.argv = ["-m"] + sys.argv[5:]
runpy.run_module("kvdiag", run_name="__main__", alter_sys=True)
"""


class _Server(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802
        if self.path.startswith("/api/v1/"):
            body = json.dumps({"status": "success", "data": {"resultType": "matrix" if "range" in self.path
                                                              else "vector", "result": []}}).encode()
            ctype = "application/json"
        else:
            body, ctype = PAGE.read_bytes(), "text/plain; version=0.0.4"
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_GET

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Server)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}", srv.server_address[1]
    srv.shutdown()
    srv.server_close()


def test_every_file_or_url_parameter_is_classified():
    found = file_parameters()
    known = set(READS) | WRITES | NOT_FILES
    assert found - known == set(), f"file/URL parameters with no recipe in READS (nor in WRITES): {found - known}"
    assert known - found == set(), f"tables name parameters that no longer exist: {known - found}"
    assert len(READS) >= 30


#: commands that run until interrupted: they are given until their input was read (at most 30 s), then SIGINT
LIVE = {"watch"}


def _run_live(cmd, log: Path, env) -> subprocess.CompletedProcess:
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and proc.poll() is None and not (log.exists() and log.stat().st_size):
        time.sleep(0.2)
    time.sleep(1.0)  # a scrape or two after the first read
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


@pytest.mark.parametrize("key", sorted(READS), ids=lambda k: f"{k[0]}:{k[1]}")
def test_the_parameter_is_read_through_the_input_layer(key, tmp_path, server):
    url, port = server
    build, kind = READS[key]
    src, other = tmp_path / "src", tmp_path / "other"
    src.mkdir()
    other.mkdir()
    argv = build(src, other, url)
    log = tmp_path / "reads.jsonl"
    watch = str(src) if kind is None else "//no-file//"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-c", _PRELUDE, watch, str(port if kind == "url" else -1), str(log), str(ROOT), *argv]
    if argv[0] in LIVE:
        proc = _run_live(cmd, log, env)
    else:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr[-1500:]
    rows = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    assert rows, (f"{key}: its input was never read (the recipe proves nothing): rc {proc.returncode}, "
                  f"{proc.stderr[-600:]}")
    outside = [r for r in rows if not r[2].startswith(LAYER)]
    assert not outside, f"{key}: read outside the input layer: {outside[:5]}"
