"""Plug-in generator families for ``benchmarks/fuzz_campaign.py``: a generator module names, for each family, the
kvdiag command and the input kind it attacks and a function that draws one *case* (files, a command line, what a
loopback server answers, the secrets planted in it); this module runs a case through the real CLI in-process and
judges what came out. The interface is documented in ``docs/fuzz-plugins.md``.

A case (a dict) as ``generate(rng)`` returns it::

    {"files": {"t.jsonl": b"..."},                 # written to a fresh scratch folder (names may hold '/')
     "argv": ["simulate", "--trace", "{t.jsonl}", "--num-gpu-blocks", "64", "--step-cost", "..."],
     "serve": {"/metrics": b"...", "/api/v1/query": (b"{...}", "application/json", 200)},   # optional
     "secrets": ["sk-plantedSECRET0001"],          # optional: must never be shown
     "codes": [0, 1, 2, 3]}                        # optional: exit codes that are fine (default 0..3)

In ``argv``: ``{NAME}`` is the path of ``files[NAME]``, ``{dir}`` the scratch folder, ``{url}`` the loopback
server's base URL (``http://127.0.0.1:PORT``), ``{out}`` a fresh output path in the scratch folder.

Outcomes: ``ok`` (a verdict or a result: 0..2, or what ``codes`` allows), ``refused`` (3 with one line),
``uncaught`` (``internal error``, a traceback without ``--debug``, an exception out of ``main``, an exit code not
allowed, more than one error line), ``leak`` (a planted secret in stdout, stderr or a file the command wrote),
``debug-code`` (``--debug`` changed the exit code). Every ``variants``-th case is also run with ``--debug`` and with
each ``--format`` its command takes (the HTML renderer included).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import io
import threading
from pathlib import Path

OUTCOMES = ("ok", "refused", "uncaught", "leak", "debug-code")


class PluginError(Exception):
    """A generator module that does not follow the interface (the message says what is missing)."""


def load_plugins(specs: list[str]) -> dict[str, dict]:
    """``{family: {"command", "kind", "generate", "module"}}`` from generator modules given as importable names
    (``my_fuzz.traces``) or file paths (``/path/gen_traces.py``).

    Raises:
        PluginError: a module without ``FAMILIES``, a family without ``command`` / ``kind`` / ``generate``, an
            unknown command, or a family name used twice.
    """
    out: dict[str, dict] = {}
    commands = command_formats()
    for spec in specs:
        if spec.endswith(".py") or "/" in spec:
            path = Path(spec)
            mod_spec = importlib.util.spec_from_file_location(f"kvdiag_fuzz_plugin_{path.stem}", path)
            if mod_spec is None or mod_spec.loader is None:
                raise PluginError(f"{spec}: not a Python file")
            module = importlib.util.module_from_spec(mod_spec)
            mod_spec.loader.exec_module(module)
        else:
            module = importlib.import_module(spec)
        fams = getattr(module, "FAMILIES", None)
        if not isinstance(fams, dict) or not fams:
            raise PluginError(f"{spec}: expected a non-empty dict FAMILIES (family name -> spec)")
        for name, fam in fams.items():
            if name in out:
                raise PluginError(f"{spec}: family {name!r} is also in {out[name]['module']}")
            missing = [k for k in ("command", "kind", "generate") if k not in fam]
            if missing:
                raise PluginError(f"{spec}: family {name!r} lacks {', '.join(missing)}")
            if fam["command"] not in commands:
                raise PluginError(f"{spec}: family {name!r}: command {fam['command']!r} is none of "
                                  f"{', '.join(sorted(commands))}")
            out[name] = {"command": fam["command"], "kind": fam["kind"], "generate": fam["generate"],
                         "module": spec}
    return out


def command_formats() -> dict[str, list[str]]:
    """Every kvdiag command (``rules export`` for a subcommand) and the ``--format`` choices it takes."""
    import click

    from kvdiag.cli import cli

    out: dict[str, list[str]] = {}

    def walk(cmd, path):
        if isinstance(cmd, click.Group):
            for name, sub in cmd.commands.items():
                walk(sub, path + [name])
            return
        fmts: list[str] = []
        for p in cmd.params:
            if "--format" in getattr(p, "opts", []) and isinstance(p.type, click.Choice):
                fmts = list(p.type.choices)
        out[" ".join(path)] = fmts

    walk(cli, [])
    return out


# --- the loopback server: answers with the current case's "serve" bodies ------------------------------------------
class _Server:
    def __init__(self) -> None:
        import http.server

        routes: dict = {}
        self.routes = routes

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self):  # noqa: N802
                path = self.path.split("?", 1)[0]
                hit = routes.get(path, routes.get("*"))
                if hit is None:
                    body, ctype, status = b"not found\n", "text/plain", 404
                elif isinstance(hit, (bytes, str)):
                    body, ctype, status = hit, "text/plain; version=0.0.4", 200
                else:
                    body, ctype, status = (tuple(hit) + ("text/plain", 200))[:3]
                body = body.encode() if isinstance(body, str) else body
                self.send_response(int(status))
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = _answer

            def log_message(self, *args):
                pass

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.srv.daemon_threads = True
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.srv.server_address[1]}"


_SERVER: _Server | None = None


def _server() -> _Server:
    global _SERVER
    if _SERVER is None:
        _SERVER = _Server()
    return _SERVER


# --- one case ---------------------------------------------------------------------------------------------------------
def _materialise(case: dict, scratch: Path, tag: str) -> tuple[list[str], list[Path]]:
    folder = scratch / tag
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    subst = {"dir": str(folder), "out": str(folder / "out.report")}
    for name, data in (case.get("files") or {}).items():
        p = folder / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data if isinstance(data, bytes) else str(data).encode())
        written.append(p)
        subst[name] = str(p)
    if case.get("serve"):
        srv = _server()
        srv.routes.clear()
        srv.routes.update(case["serve"])
        subst["url"] = srv.url
    elif any("{url}" in a for a in case["argv"]):
        subst["url"] = _server().url
    argv = []
    for a in case["argv"]:
        for k, v in subst.items():
            a = a.replace("{" + k + "}", v)
        argv.append(a)
    return argv, written


def _run_cli(argv: list[str]) -> tuple[int | None, str, str, str]:
    """``kvdiag.cli.main(argv)`` in-process: ``(code, stdout, stderr, escaped exception or '')``."""
    from kvdiag.cli import main

    out, err = io.StringIO(), io.StringIO()
    escaped = ""
    code = None
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 3
        except BaseException as exc:  # noqa: BLE001 - what escaped main is the finding
            escaped = f"{exc.__class__.__name__}: {str(exc)[:300]}"
    return code, out.getvalue(), err.getvalue(), escaped


def judge_run(case: dict, code, out: str, err: str, escaped: str, files: list[Path], debug: bool) -> tuple[str, str]:
    """The outcome of one run and a one-line reason."""
    secrets = [s for s in case.get("secrets") or [] if s]
    for s in secrets:
        where = "stdout" if s in out else "stderr" if s in err else ""
        if not where:
            for p in files:
                try:
                    if s.encode() in p.read_bytes():
                        where = str(p.name)
                        break
                except OSError:
                    pass
        if where:
            return "leak", f"planted secret {s[:6]}… shown in {where}"
    if escaped:
        return "uncaught", f"escaped main: {escaped}"
    if "internal error" in err or (not debug and "Traceback (most recent call last)" in err):
        return "uncaught", (err.strip().splitlines() or ["?"])[-1][:300]
    allowed = case.get("codes") or [0, 1, 2, 3]
    if code not in allowed:
        return "uncaught", f"exit code {code} (allowed {allowed})"
    if code == 3 and not debug:
        lines = [ln for ln in err.splitlines() if ln.startswith("kvdiag: error:")]
        if len(lines) > 1:
            return "uncaught", f"{len(lines)} error lines"
        return "refused", lines[0][:200] if lines else ""
    return "ok", ""


def run_case(case: dict, scratch: Path, tag: str, variants: bool) -> tuple[str, str, int]:
    """Run ``case`` (and, with ``variants``, its ``--debug`` and every-``--format`` runs); the worst outcome, its
    reason, and how many runs were made."""
    argv, files = _materialise(case, scratch, tag)
    runs = [(argv, False)]
    if variants:
        fmts = command_formats().get(_command_of(argv), [])
        for fmt in fmts:
            if "--format" not in argv:
                runs.append((argv + ["--format", fmt], False))
        runs.append((["--debug"] + argv, True))
    worst, why, base_code = "ok", "", None
    rank = {o: i for i, o in enumerate(("ok", "refused", "debug-code", "uncaught", "leak"))}
    for args, debug in runs:
        code, out, err, escaped = _run_cli(args)
        outcome, reason = judge_run(case, code, out, err, escaped, _written(scratch / tag, files), debug)
        if debug and base_code is not None and code != base_code and outcome in ("ok", "refused"):
            outcome, reason = "debug-code", f"--debug exit {code}, without {base_code}"
        if not debug and base_code is None:
            base_code = code
        if rank[outcome] > rank[worst]:
            worst, why = outcome, reason
    return worst, why, len(runs)


def _command_of(argv: list[str]) -> str:
    words = [a for a in argv if not a.startswith("-")]
    if words[:1] == ["rules"] and len(words) > 1:
        return f"rules {words[1]}"
    return words[0] if words else ""


def _written(folder: Path, inputs: list[Path]) -> list[Path]:
    """Files the command wrote in the case's folder (its outputs), besides the inputs."""
    ins = {p.resolve() for p in inputs}
    return [p for p in folder.rglob("*") if p.is_file() and p.resolve() not in ins]
